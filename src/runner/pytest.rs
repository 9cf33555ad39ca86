//! pytest (and `python -m pytest`): its configuration files, the
//! interpreter's start-up hooks, and the modules it is imported from.
//!
//! Sources: pytest's "Configuration" page (`pytest.toml`, `.pytest.toml`,
//! `pytest.ini`, `.pytest.ini`, `pyproject.toml`, `tox.ini`, `setup.cfg`;
//! `PYTEST_ADDOPTS`, `PYTEST_PLUGINS`, `PYTEST_DISABLE_PLUGIN_AUTOLOAD`),
//! "Writing plugins" (`conftest.py`, `pytest11` entry points), Python's
//! `site` module (`sitecustomize`, `usercustomize`, `.pth` files) and the
//! command-line docs (`-m` puts the working directory first on `sys.path`,
//! so a module named like the runner at the top of the tree is imported
//! instead of it: what the probe sees).

use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "pytest",
    docs: &[
        "https://docs.pytest.org/en/stable/reference/customize.html",
        "https://docs.pytest.org/en/stable/reference/reference.html#environment-variables",
        "https://docs.python.org/3/library/site.html",
    ],
    files: &[
        "**/pytest.ini",
        "**/.pytest.ini",
        "**/pytest.toml",
        "**/.pytest.toml",
        "**/tox.ini",
        "**/.coveragerc",
        "**/sitecustomize.py",
        "**/usercustomize.py",
        "**/*.pth",
        "**/pyvenv.cfg",
        "**/.python-version",
        "**/.env",
        "**/pytest.py",
        "**/pytest/**",
        "**/_pytest/**",
        "**/pluggy.py",
        "**/pluggy/**",
        "**/py.py",
    ],
    vars: &[
        "PYTEST_ADDOPTS",
        "PYTEST_PLUGINS",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
        "PYTEST_THEME",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH",
        "PYTHONWARNINGS",
        "PYTHONDEVMODE",
        "PYTHONEXECUTABLE",
        "VIRTUAL_ENV",
    ],
    runs,
    probe,
    whole,
};

fn runs(words: &[&str]) -> bool {
    match words.first().map(|w| base(w)) {
        Some("pytest" | "py.test") => true,
        Some(w) if is_python(w) => module(words) == Some("pytest"),
        _ => false,
    }
}

fn is_python(word: &str) -> bool {
    word.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The module of `python … -m NAME`.
fn module<'a>(words: &[&'a str]) -> Option<&'a str> {
    words
        .iter()
        .position(|w| *w == "-m")
        .and_then(|i| words.get(i + 1).copied())
}

/// Where the interpreter, pytest, every module importing pytest loads and
/// every module of the standard library and the installed distributions
/// would resolve, from the goal step's directory: the same
/// `sys.path` the runner gets (`-c` puts the directory first, as `-m`
/// does; a `pytest` script puts its own directory, which lies outside the
/// tree, so the probe errs on the side of seeing more).
fn probe(words: &[&str]) -> Option<String> {
    // Each module found on the path is printed as it is found, before its
    // code runs (a shadow that ends the process is named all the same).
    // Then where every module of the standard library and every installed
    // distribution's top-level module *would* resolve from here — found,
    // not imported: a module the runner imports later in the run (pdb's
    // `cmd`), or the tests do, is shadowed all the same by a file named
    // like it at the top of the tree.
    const SCRIPT: &str = r#"import sys, os
import importlib.machinery as m
import importlib.util as u
print('interpreter\t' + os.path.realpath(sys.executable), flush=True)
class Seen:
    @staticmethod
    def find_spec(name, path=None, target=None):
        s = m.PathFinder.find_spec(name, path, target)
        if s is not None and s.origin and os.path.exists(s.origin):
            print(name + '\t' + os.path.realpath(s.origin), flush=True)
        return s
sys.meta_path.insert(sys.meta_path.index(m.PathFinder), Seen)
import pytest
sys.meta_path.remove(Seen)
for k, v in sorted(sys.modules.items()):
    f = getattr(v, '__file__', None)
    if f:
        print(k + '\t' + os.path.realpath(f))
names = set(getattr(sys, 'stdlib_module_names', ()))
try:
    import importlib.metadata as md
    names.update(md.packages_distributions())
except Exception:
    pass
for n in sorted(names):
    if n in sys.modules or not n.isidentifier():
        continue
    try:
        s = m.PathFinder.find_spec(n)
    except Exception:
        continue
    if s is not None and s.origin and os.path.exists(s.origin):
        print(n + '\t' + os.path.realpath(s.origin))
print('probed\tcomplete')"#;
    let script = crate::util::shell_quote(SCRIPT);
    let python = match words.first().map(|w| base(w)) {
        Some(w) if is_python(w) => crate::util::shell_quote(words[0]),
        // A console script: its interpreter is its shebang's.
        _ => {
            return Some(format!(
                "{} && i=$(head -n1 \"$r\" | sed -n 's/^#! *//p') && $i -c {script} 2>/dev/null",
                super::resolve(words.first()?)
            ));
        }
    };
    Some(format!("{python} -c {script} 2>/dev/null"))
}

/// What a pytest command selects: paths and node ids, `-k`/`-m`
/// expressions, `--deselect`/`--ignore`, `--lf`, and a stop at the first
/// failures (`-x`, `--maxfail`, `--sw`), which leaves the rest unrun.
/// Without them: the same command over every test it collects.
fn whole(words: &[&str]) -> Option<super::Whole> {
    let start = match words.first().map(|w| base(w)) {
        Some(w) if is_python(w) => words.iter().position(|w| *w == "-m")? + 2,
        _ => 1,
    };
    let (head, args) = words.split_at(start.min(words.len()));
    const VALUE: &[&str] = &[
        "-p",
        "-c",
        "-o",
        "-W",
        "-r",
        "--rootdir",
        "--confcutdir",
        "--basetemp",
        "--tb",
        "--durations",
        "--log-level",
        "--import-mode",
        "--junitxml",
        "--override-ini",
        "--capture",
        "--color",
        "--cov",
        "--cov-report",
        "-n",
        "--dist",
        "--timeout",
        "--pyargs-root",
        "--log-cli-level",
        "--log-file",
    ];
    const SELECT: &[&str] = &[
        "-x",
        "--exitfirst",
        "--lf",
        "--last-failed",
        "--sw",
        "--stepwise",
    ];
    const SELECT_VALUE: &[&str] = &[
        "-k",
        "-m",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "--maxfail",
    ];
    // Short flags in a cluster (`-qx`) and `-kEXPR` glued.
    let mut unglued: Vec<String> = Vec::new();
    let mut glued_selection = false;
    for w in args {
        let short = w.len() > 2 && w.starts_with('-') && !w.starts_with("--");
        if short && (w.starts_with("-k") || w.starts_with("-m")) {
            glued_selection = true;
        } else if short && w[1..].chars().all(|c| c.is_ascii_alphabetic()) && w.contains('x') {
            glued_selection = true;
            let rest: String = w[1..].chars().filter(|c| *c != 'x').collect();
            if !rest.is_empty() {
                unglued.push(format!("-{rest}"));
            }
        } else {
            unglued.push((*w).to_owned());
        }
    }
    // The conventional test root is the whole suite, not a selection.
    let root = |w: &str| {
        matches!(
            w.trim_start_matches("./").trim_end_matches('/'),
            "tests" | "test" | "." | ""
        )
    };
    let unglued: Vec<&str> = unglued
        .iter()
        .map(String::as_str)
        .filter(|w| !root(w))
        .collect();
    let (kept, selected) = super::drop_selection(&unglued, VALUE, SELECT, SELECT_VALUE);
    if !selected && !glued_selection {
        return Some(super::Whole::All);
    }
    Some(super::Whole::Without(
        head.iter().map(|w| (*w).to_owned()).chain(kept).collect(),
    ))
}
