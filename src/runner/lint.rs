//! Linters and formatters a goal step runs (`ruff check .`, `eslint .`,
//! `cargo clippy`, `golangci-lint run`, `mypy`): not test runners, but a
//! goal step all the same, and their configuration decides what they
//! check (an `exclude = ["*"]` passes anything).
//!
//! Sources: ruff's "Configuring Ruff" (`ruff.toml`, `.ruff.toml`,
//! `pyproject.toml`'s `[tool.ruff]` — a shared file, its lint sections
//! allowed to change there), ESLint's "Configuration files"
//! (`eslint.config.*`, `.eslintrc*`, `.eslintignore`), mypy's "The mypy
//! configuration file", flake8's, golangci-lint's and Clippy's
//! (`clippy.toml`), rustfmt's (`rustfmt.toml`).

use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "linters",
    docs: &[
        "https://docs.astral.sh/ruff/configuration/",
        "https://eslint.org/docs/latest/use/configure/configuration-files",
        "https://mypy.readthedocs.io/en/stable/config_file.html",
        "https://golangci-lint.run/usage/configuration/",
        "https://doc.rust-lang.org/clippy/configuration.html",
    ],
    files: &[
        "**/ruff.toml",
        "**/.ruff.toml",
        "**/eslint.config.*",
        "**/.eslintrc*",
        "**/.eslintignore",
        "**/mypy.ini",
        "**/.mypy.ini",
        "**/.flake8",
        "**/.pylintrc",
        "**/pylintrc",
        "**/.golangci.*",
        "**/clippy.toml",
        "**/.clippy.toml",
        "**/rustfmt.toml",
        "**/.rustfmt.toml",
        "**/.prettierrc*",
        "**/.prettierignore",
    ],
    vars: &["RUFF_CACHE_DIR", "ESLINT_USE_FLAT_CONFIG", "MYPYPATH"],
    runs,
    probe,
    whole: super::cannot_tell,
    tests: super::default_tests,
};

fn runs(words: &[&str]) -> bool {
    match words.first().map(|w| base(w)) {
        Some("ruff" | "eslint" | "mypy" | "flake8" | "pylint" | "golangci-lint" | "prettier") => {
            true
        }
        Some("cargo") => words.get(1).is_some_and(|w| matches!(*w, "clippy" | "fmt")),
        _ => false,
    }
}

fn probe(words: &[&str]) -> Option<String> {
    Some(super::executable_probe(words.first()?))
}
