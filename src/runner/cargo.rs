//! `cargo test` and `cargo nextest`.
//!
//! Sources: "Cargo configuration" (`.cargo/config.toml` and `.cargo/config`
//! in the directory and every parent: `target.*.runner` replaces every
//! test binary, `build.rustflags` adds `--cfg`s, `alias` renames `test`,
//! `[env]` sets variables), "Build scripts" (`build.rs` runs before the
//! crate builds and can set `cfg`s a test is ignored under), rustup's
//! toolchain overrides (`rust-toolchain`, `rust-toolchain.toml`), and
//! nextest's configuration (`.config/nextest.toml`, tool configs).

use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "cargo test",
    docs: &[
        "https://doc.rust-lang.org/cargo/reference/config.html",
        "https://doc.rust-lang.org/cargo/reference/build-scripts.html",
        "https://rust-lang.github.io/rustup/overrides.html",
        "https://nexte.st/docs/configuration/",
    ],
    files: &[
        "**/.cargo/config",
        "**/.cargo/config.toml",
        "**/rust-toolchain",
        "**/rust-toolchain.toml",
        "**/build.rs",
        "**/.nextest.toml",
        ".config/nextest.toml",
        "**/.config/nextest.toml",
    ],
    vars: &[
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_HOME",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "NEXTEST_PROFILE",
        "RUST_TEST_THREADS",
    ],
    runs,
    probe,
    whole: super::cannot_tell,
    tests: super::default_tests,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "cargo")
        && words
            .iter()
            .skip(1)
            .find(|w| !w.starts_with('+') && !w.starts_with('-'))
            .is_some_and(|w| matches!(*w, "test" | "nextest" | "t"))
}

fn probe(words: &[&str]) -> Option<String> {
    Some(format!(
        "{}; printf 'rustc\\t%s\\n' \"$(rustc -vV 2>/dev/null | tr '\\n' ' ')\"",
        super::executable_probe(words.first()?)
    ))
}
