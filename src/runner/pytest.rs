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
        // Installed-distribution metadata on `sys.path` (the tree's top,
        // under `python -m`): a `[pytest11]` entry point there is a plugin
        // pytest loads by itself.
        "**/*.dist-info/**",
        "**/*.egg-info/**",
        "**/*.egg-link",
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
    tests,
};

fn runs(words: &[&str]) -> bool {
    match words.first().map(|w| base(w)) {
        Some("pytest" | "py.test") => true,
        Some(w) if is_python(w) => module(words) == Some("pytest"),
        _ => false,
    }
}

pub(super) fn is_python(word: &str) -> bool {
    word.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The module of `python … -m NAME`.
fn module<'a>(words: &[&'a str]) -> Option<&'a str> {
    if words.contains(&"-mpytest") {
        return Some("pytest");
    }
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
    probe_module(words, "pytest")
}

/// [`probe`] for a runner that is the interpreter's module `module`
/// (pytest, unittest).
pub(super) fn probe_module(words: &[&str], module: &str) -> Option<String> {
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
import MODULE
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
    let script =
        crate::util::shell_quote(&SCRIPT.replace("import MODULE", &format!("import {module}")));
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

/// The words after the runner: after `-m pytest` for an interpreter.
fn arguments<'a>(words: &'a [&'a str]) -> &'a [&'a str] {
    let start = match words.first().map(|w| base(w)) {
        Some(w) if is_python(w) => words
            .iter()
            .position(|w| *w == "-m" || *w == "-mpytest")
            .map_or(words.len(), |at| at + if words[at] == "-m" { 2 } else { 1 }),
        _ => 1,
    };
    &words[start.min(words.len())..]
}

/// What a pytest command runs as tests beyond the default names: the
/// modules it names (`checks/verify.py`, `tests/x.py::test_y`; not with
/// `--doctest-modules`, where a named module is the code under test),
/// and the names its configuration adds (`python_files`, under
/// `testpaths` or a directory it names) — from `-o`, else the file `-c`
/// names, else the first file of pytest's own order at the root that
/// configures it. A pattern that names every module (`*.py`) with no
/// `testpaths` to bound it is left out: it would make the code under test
/// a test.
fn tests(words: &[&str], read: &super::ReadBase<'_>) -> Vec<String> {
    let args = arguments(words);
    let value: Vec<&str> = VALUE.iter().chain(SELECT_VALUE).copied().collect();
    let option = |names: &[&str]| -> Vec<String> {
        let mut out = Vec::new();
        for (i, w) in args.iter().enumerate() {
            for n in names {
                if w == n {
                    out.extend(args.get(i + 1).map(|v| (*v).to_owned()));
                } else if let Some(v) = w.strip_prefix(n).and_then(|r| r.strip_prefix('=')) {
                    out.push(v.to_owned());
                }
            }
        }
        out
    };
    let overrides = option(&["-o", "--override-ini"]);
    // pytest looks for its configuration from the common ancestor of the
    // paths it is given upwards: a directory named first is where a
    // configuration of its own wins.
    let named_dir = super::positionals(
        args,
        &VALUE
            .iter()
            .chain(SELECT_VALUE)
            .copied()
            .collect::<Vec<_>>(),
    )
    .into_iter()
    .map(|w| {
        w.split("::")
            .next()
            .unwrap_or(w)
            .trim_start_matches("./")
            .trim_end_matches('/')
    })
    .find(|w| !w.is_empty() && !w.ends_with(".py") && !w.contains(['*', '?', '[']))
    .map(str::to_owned);
    let config = config(
        option(&["-c", "--config-file"]).pop(),
        named_dir.as_deref(),
        read,
    );
    let setting = |key: &str| -> Vec<String> {
        overrides
            .iter()
            .rev()
            .find_map(|o| {
                let (k, v) = o.split_once('=')?;
                (k.trim() == key).then(|| v.split_whitespace().map(str::to_owned).collect())
            })
            .or_else(|| config.get(key).cloned())
            .unwrap_or_default()
    };
    let patterns = setting("python_files");
    let testpaths = setting("testpaths");
    let doctests = args.contains(&"--doctest-modules");
    let mut out = Vec::new();
    let mut dirs = Vec::new();
    let pyargs = args.contains(&"--pyargs");
    for w in super::positionals(args, &value) {
        let path = w.split("::").next().unwrap_or(w);
        if pyargs && !path.contains('/') && path.contains('.') && !path.ends_with(".py") {
            // A dotted module name: its file, or its package's.
            let p = path.replace('.', "/");
            out.push(super::literal(&format!("{p}.py")));
            out.push(format!("{}/**/*.py", super::literal(&p)));
            continue;
        }
        if path.ends_with(".py") {
            if !doctests {
                out.extend(super::named_file(path));
            }
        } else if !path.contains(['*', '?', '[']) {
            dirs.push(
                path.trim_start_matches("./")
                    .trim_end_matches('/')
                    .to_owned(),
            );
        }
    }
    let roots = if !dirs.is_empty() {
        dirs
    } else {
        testpaths.clone()
    };
    for p in &patterns {
        if roots.is_empty() && (p == "*.py" || p == "*") {
            continue;
        }
        if roots.is_empty() {
            out.push(format!("**/{p}"));
        }
        for r in &roots {
            let r = r.trim_start_matches("./").trim_end_matches('/');
            // `testpaths` takes globs (pytest 7); a named directory is a
            // path.
            let r = if r.contains(['*', '?', '[']) {
                r.to_owned()
            } else {
                super::literal(r)
            };
            out.push(match r.as_str() {
                "" | "." => format!("**/{p}"),
                r => format!("{r}/**/{p}"),
            });
        }
    }
    out
}

/// pytest's settings (`python_files`, `testpaths`, …) as it reads them:
/// from the file `-c` names, else from the first of its configuration
/// files at the root that configures it (`pytest.ini` does even when
/// empty). Each value as its words.
fn config(
    named: Option<String>,
    dir: Option<&str>,
    read: &super::ReadBase<'_>,
) -> std::collections::BTreeMap<String, Vec<String>> {
    const ORDER: &[(&str, &str)] = &[
        ("pytest.toml", "pytest"),
        (".pytest.toml", "pytest"),
        ("pytest.ini", "pytest"),
        (".pytest.ini", "pytest"),
        ("pyproject.toml", "tool.pytest.ini_options"),
        ("pyproject.toml", "tool.pytest"),
        ("tox.ini", "pytest"),
        ("setup.cfg", "tool:pytest"),
    ];
    let section = |file: &str, name: &str| {
        let text = read(file)?;
        if file.ends_with(".toml") {
            toml_section(&text, name)
        } else {
            ini_section(&text, name)
        }
    };
    if let Some(file) = named {
        let file = file.trim_start_matches("./").to_owned();
        let names: &[&str] = if file.ends_with(".toml") {
            &["pytest", "tool.pytest.ini_options", "tool.pytest"]
        } else {
            &["pytest", "tool:pytest"]
        };
        return names
            .iter()
            .find_map(|n| section(&file, n))
            .unwrap_or_default();
    }
    // From the named directory up to the root, the first that configures
    // pytest.
    let mut dirs: Vec<String> = Vec::new();
    if let Some(d) = dir.filter(|d| !d.starts_with('/') && !d.split('/').any(|c| c == "..")) {
        let mut d = d.to_owned();
        loop {
            dirs.push(d.clone());
            match d.rsplit_once('/') {
                Some((up, _)) => d = up.to_owned(),
                None => break,
            }
        }
    }
    dirs.push(String::new());
    dirs.iter()
        .find_map(|d| {
            ORDER.iter().find_map(|(file, name)| {
                let path = if d.is_empty() {
                    (*file).to_owned()
                } else {
                    format!("{d}/{file}")
                };
                section(&path, name)
            })
        })
        .unwrap_or_default()
}

/// A TOML table's settings (`tool.pytest.ini_options`): a string as its
/// words, an array as its strings.
fn toml_section(text: &str, path: &str) -> Option<std::collections::BTreeMap<String, Vec<String>>> {
    let mut table: &toml::Table = &text.parse::<toml::Table>().ok()?;
    for key in path.split('.') {
        table = table.get(key)?.as_table()?;
    }
    Some(
        table
            .iter()
            .map(|(k, v)| {
                let words = match v {
                    toml::Value::String(s) => s.split_whitespace().map(str::to_owned).collect(),
                    toml::Value::Array(a) => a
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect(),
                    _ => Vec::new(),
                };
                (k.clone(), words)
            })
            .collect(),
    )
}

/// An INI section's settings (`[pytest]`, `[tool:pytest]`), a value
/// continued on indented lines.
fn ini_section(text: &str, name: &str) -> Option<std::collections::BTreeMap<String, Vec<String>>> {
    let mut found = false;
    let mut inside = false;
    let mut last: Option<String> = None;
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t.trim_start_matches('[').trim_end_matches(']').trim() == name;
            found |= inside;
            last = None;
            continue;
        }
        if !inside || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(k) = &last {
                out.entry(k.clone())
                    .or_default()
                    .extend(t.split_whitespace().map(str::to_owned));
            }
            continue;
        }
        if let Some((k, v)) = t.split_once(['=', ':']) {
            let k = k.trim().to_owned();
            out.insert(k.clone(), v.split_whitespace().map(str::to_owned).collect());
            last = Some(k);
        }
    }
    found.then_some(out)
}

/// What a pytest command selects: paths and node ids, `-k`/`-m`
/// expressions (also inside a cluster of short options, `-qk expr`),
/// `--deselect`/`--ignore`, `--lf`, an ini override of what is collected
/// (`-o python_functions=…`), and a stop at the first failures (`-x`,
/// `--maxfail`, `--sw`), which leaves the rest unrun. Without them: the
/// same command over every test it collects, going on past a module that
/// does not import (one broken module must not leave the rest unjudged).
fn whole(words: &[&str]) -> Option<super::Whole> {
    let start = match words.first().map(|w| base(w)) {
        Some(w) if is_python(w) => {
            let at = words.iter().position(|w| *w == "-m" || *w == "-mpytest")?;
            if words[at] == "-m" {
                at + 2
            } else {
                at + 1
            }
        }
        _ => 1,
    };
    let (head, args) = words.split_at(start.min(words.len()));
    let (kept, selected) = without_selection(args);
    if !selected {
        return Some(super::Whole::All);
    }
    Some(super::Whole::Without(
        head.iter()
            .map(|w| (*w).to_owned())
            .chain(kept)
            .chain(std::iter::once(GO_ON.to_owned()))
            .collect(),
    ))
}

/// What the whole suite adds: a module that does not import is an error
/// of its own, the rest still run.
pub(crate) const GO_ON: &str = "--continue-on-collection-errors";

/// Long options that take the next word as their value, kept.
const VALUE: &[&str] = &[
    "-p",
    "-c",
    "-o",
    "-W",
    "-r",
    "-n",
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
    "--dist",
    "--timeout",
    "--log-cli-level",
    "--log-file",
    "--config-file",
];
/// Options that select (dropped), and those of them that take a value.
const SELECT: &[&str] = &[
    "-x",
    "--exitfirst",
    "--lf",
    "--last-failed",
    "--sw",
    "--stepwise",
    "--sw-skip",
    "--stepwise-skip",
];
const SELECT_VALUE: &[&str] = &[
    "-k",
    "-m",
    "--deselect",
    "--ignore",
    "--ignore-glob",
    "--maxfail",
    "--keyword",
];

/// An ini override that changes what is collected.
fn selects_ini(value: &str) -> bool {
    let key = value.split('=').next().unwrap_or("").trim();
    matches!(
        key,
        "python_files" | "python_classes" | "python_functions" | "testpaths" | "addopts"
    )
}

/// The conventional test root: the whole suite, not a selection.
fn root(w: &str) -> bool {
    matches!(
        w.trim_start_matches("./").trim_end_matches('/'),
        "tests" | "test" | "." | ""
    )
}

/// pytest's arguments without what selects, and whether anything did.
pub(crate) fn without_selection(args: &[&str]) -> (Vec<String>, bool) {
    let mut kept: Vec<String> = Vec::new();
    let mut selected = false;
    let mut i = 0;
    while i < args.len() {
        let w = args[i];
        i += 1;
        if w == "--" {
            selected |= args[i..].iter().any(|a| !root(a));
            break;
        }
        if w.starts_with("--") {
            let (name, inline) = match w.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (w, None),
            };
            let mut value = || match inline {
                Some(v) => Some(v.to_owned()),
                None => {
                    i += 1;
                    args.get(i - 1).map(|v| (*v).to_owned())
                }
            };
            if SELECT.contains(&name) {
                selected = true;
            } else if SELECT_VALUE.contains(&name) {
                selected = true;
                value();
            } else if name == "--override-ini" {
                let v = value().unwrap_or_default();
                if selects_ini(&v) {
                    selected = true;
                } else {
                    kept.push(format!("--override-ini={v}"));
                }
            } else if VALUE.contains(&name) && inline.is_none() {
                kept.push(w.to_owned());
                kept.extend(value());
            } else {
                kept.push(w.to_owned());
            }
            continue;
        }
        if let Some(cluster) = w.strip_prefix('-').filter(|c| !c.is_empty()) {
            // Short options, clustered: a flag each, until one that takes
            // a value — the rest of the word, or the next word.
            let chars: Vec<char> = cluster.chars().collect();
            let mut flags = String::new();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                j += 1;
                let takes_value = matches!(c, 'k' | 'm' | 'p' | 'c' | 'o' | 'W' | 'r' | 'n');
                if c == 'x' {
                    selected = true;
                    continue;
                }
                if !takes_value {
                    flags.push(c);
                    continue;
                }
                let rest: String = chars[j..].iter().collect();
                j = chars.len();
                let v = if rest.is_empty() {
                    i += 1;
                    args.get(i - 1).map(|v| (*v).to_owned()).unwrap_or_default()
                } else {
                    rest
                };
                match c {
                    'k' | 'm' => selected = true,
                    'o' if selects_ini(&v) => selected = true,
                    _ => {
                        if !flags.is_empty() {
                            kept.push(format!("-{}", std::mem::take(&mut flags)));
                        }
                        kept.push(format!("-{c}"));
                        kept.push(v);
                    }
                }
            }
            if !flags.is_empty() {
                kept.push(format!("-{flags}"));
            }
            continue;
        }
        if !root(w) {
            selected = true;
        }
    }
    (kept, selected)
}
