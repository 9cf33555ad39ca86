//! unittest (`python -m unittest`): the interpreter's start-up hooks (in
//! pytest's entry: `sitecustomize`, `.pth` files, …) and the module it is.
//!
//! Sources: Python's `unittest` docs ("Command-Line Interface", "Test
//! Discovery": `discover` and a bare `python -m unittest` find every
//! `test*.py` under the start directory; `-p`, `-s`, `-t` and the same
//! three positionally after `discover`; otherwise the words name modules,
//! classes, methods or files).

use super::pytest::{is_python, probe_module};
use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "unittest",
    docs: &[
        "https://docs.python.org/3/library/unittest.html#command-line-interface",
        "https://docs.python.org/3/library/unittest.html#test-discovery",
    ],
    files: &["**/unittest.py", "**/unittest/**"],
    vars: &[
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONWARNINGS",
    ],
    runs,
    probe,
    whole: super::cannot_tell,
    tests,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| is_python(base(w))) && module(words).is_some()
}

/// The words after `-m unittest`, when the command runs it.
fn module<'a>(words: &'a [&'a str]) -> Option<&'a [&'a str]> {
    let at = words.iter().position(|w| *w == "-m")?;
    (words.get(at + 1) == Some(&"unittest")).then(|| &words[at + 2..])
}

fn probe(words: &[&str]) -> Option<String> {
    probe_module(words, "unittest")
}

/// What unittest runs as tests: under discovery (`discover`, or no
/// names), every module matching its pattern (`test*.py` unless `-p`
/// says) under its start directory (`.` unless `-s` says) — `testing.py`
/// and `tests.py` included; otherwise the modules and files it names
/// (`tests.test_calc`, `tests/test_calc.py`, `tests.test_calc.Case.test_x`
/// is `tests/test_calc.py` or `tests/test_calc/…`).
fn tests(words: &[&str], _: &super::ReadBase<'_>) -> Vec<String> {
    let Some(args) = module(words) else {
        return Vec::new();
    };
    const VALUE: &[&str] = &[
        "-p",
        "--pattern",
        "-s",
        "--start-directory",
        "-t",
        "--top-level-directory",
        "-k",
    ];
    let named = super::positionals(args, VALUE);
    let discover = named.first() == Some(&"discover") || named.is_empty();
    if discover {
        let option = |short: &str, long: &str, at: usize| -> Option<String> {
            args.windows(2)
                .find(|w| w[0] == short || w[0] == long)
                .map(|w| w[1].to_owned())
                .or_else(|| {
                    args.iter().find_map(|w| {
                        w.strip_prefix(long)
                            .and_then(|r| r.strip_prefix('='))
                            .map(str::to_owned)
                    })
                })
                .or_else(|| named.get(at).map(|w| (*w).to_owned()))
        };
        let start = option("-s", "--start-directory", 1).unwrap_or_else(|| ".".into());
        let pattern = option("-p", "--pattern", 2).unwrap_or_else(|| "test*.py".into());
        let start = start.trim_start_matches("./").trim_end_matches('/');
        if start.starts_with('/') || start.split('/').any(|c| c == "..") {
            return Vec::new();
        }
        return vec![match start {
            "" | "." => format!("**/{pattern}"),
            s => format!("{}/**/{pattern}", super::literal(s)),
        }];
    }
    named
        .iter()
        .flat_map(|w| {
            if w.ends_with(".py") {
                return super::named_file(w).into_iter().collect::<Vec<_>>();
            }
            // A dotted name: each prefix could be the module (a package,
            // then its module, then a class in it).
            let parts: Vec<&str> = w.split('.').collect();
            (1..=parts.len())
                .map(|n| parts[..n].join("/"))
                .filter(|p| !p.is_empty())
                .map(|p| super::literal(&format!("{p}.py")))
                .collect()
        })
        .collect()
}
