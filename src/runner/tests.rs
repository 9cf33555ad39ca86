use std::collections::BTreeMap;

use super::*;

fn names(line: &str) -> Vec<&'static str> {
    runners_of(line).into_iter().map(|(r, _)| r.name).collect()
}

#[test]
fn goal_commands_name_their_runners_through_wrappers_and_assignments() {
    assert_eq!(names("python3 -m pytest -q"), ["pytest"]);
    assert_eq!(names(".venv/bin/python3.12 -m pytest tests/"), ["pytest"]);
    assert_eq!(names("PYTHONHASHSEED=0 uv run pytest"), ["pytest"]);
    assert_eq!(names("python3 -m unittest"), ["unittest"]);
    assert_eq!(names("python3 -m unittest.mock"), Vec::<&str>::new());
    assert_eq!(names("npm ci && npx jest --ci"), ["jest"]);
    assert_eq!(names("node --test test/"), ["node --test"]);
    assert_eq!(names("go vet ./... && go test ./..."), ["go test"]);
    assert_eq!(
        names("cargo +stable test --locked; cargo nextest run"),
        ["cargo test", "cargo test"]
    );
    assert_eq!(names("pnpm test"), ["npm scripts"]);
    assert_eq!(
        names("env -i A=1 ./node_modules/.bin/vitest run"),
        ["vitest"]
    );
    assert_eq!(
        names("sh -c 'mocha'"),
        Vec::<&str>::new(),
        "a quoted script is not read"
    );
    assert_eq!(names("make test"), Vec::<&str>::new());
}

#[test]
fn every_registered_file_is_a_glob_and_every_runner_names_its_sources() {
    for r in REGISTRY {
        assert!(!r.docs.is_empty(), "{} names no source", r.name);
        assert!(!r.files.is_empty(), "{} names no file", r.name);
        for f in r.files {
            globset::Glob::new(f).unwrap_or_else(|e| panic!("{}: {f}: {e}", r.name));
        }
    }
    let globs: Vec<&str> = config_globs().map(|(g, _)| g).collect();
    for must in [
        "**/pytest.toml",
        "**/.cargo/config.toml",
        "**/.npmrc",
        "**/go.work",
        "**/sitecustomize.py",
        "**/vite.config.*",
    ] {
        assert!(globs.contains(&must), "{must} is in no runner's entry");
    }
}

#[test]
fn a_probe_prefixes_each_line_with_its_runner() {
    let p = probe("python3 -m pytest").expect("pytest is probed");
    assert!(
        p.contains("import pytest") && p.contains("s/^/pytest:/"),
        "{p}"
    );
    assert!(probe("make test").is_none());
}

#[test]
fn moved_names_what_resolves_elsewhere_or_newly_inside_the_tree() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let base = map(&[
        ("pytest:interpreter", "/usr/bin/python3.12"),
        ("pytest:pytest", "/venv/lib/pytest/__init__.py"),
        ("pytest:re", "/usr/lib/python3.12/re/__init__.py"),
    ]);
    assert!(moved(&base, &base, "/repo/").is_empty());
    let shadowed = map(&[
        ("pytest:interpreter", "/usr/bin/python3.12"),
        ("pytest:pytest", "/repo/pytest.py"),
        ("pytest:re", "/usr/lib/python3.12/re/__init__.py"),
        ("pytest:helper", "/repo/helper.py"),
        ("pytest:json", "/usr/lib/python3.12/json/__init__.py"),
    ]);
    let m = moved(&base, &shadowed, "/repo/");
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(
        m[0].starts_with("pytest:helper") && m[1].contains("/repo/pytest.py"),
        "{m:?}"
    );
    let gone = map(&[("pytest:pytest", "/venv/lib/pytest/__init__.py")]);
    assert!(moved(&base, &gone, "/repo/")[0].contains("does not resolve"));
}

#[test]
fn a_probe_runs_and_sees_a_module_named_like_the_runner() {
    let Ok(python) = which("python3") else { return };
    let dir = tempfile::tempdir().unwrap();
    // A runner-free stand-in: probe `-m json.tool`'s interpreter the way
    // pytest's is probed, with `json` shadowed.
    let script = probe("python3 -m pytest")
        .unwrap()
        .replace("import pytest", "import json");
    let run = |dir: &std::path::Path| {
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .current_dir(dir)
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", python.parent().unwrap().display()),
            )
            .output()
            .unwrap();
        origins(&String::from_utf8_lossy(&out.stdout))
    };
    let before = run(dir.path());
    assert!(before.contains_key("pytest:json"), "{before:?}");
    std::fs::write(dir.path().join("json.py"), "x = 1\n").unwrap();
    let after = run(dir.path());
    let root = format!("{}/", dir.path().canonicalize().unwrap().display());
    let m = moved(&before, &after, &root);
    assert!(m.iter().any(|l| l.starts_with("pytest:json:")), "{m:?}");
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}

#[test]
fn assignments_and_operators_split_commands() {
    assert_eq!(
        commands("A=1 B='x y' pytest -k 'a or b' | tee out; go test"),
        vec![
            vec!["pytest".to_owned(), "-k".into(), "a or b".into()],
            vec!["tee".into(), "out".into()],
            vec!["go".into(), "test".into()],
        ]
    );
}

/// The whole suite a narrowed goal command leaves out, runner by runner:
/// each selection taken off, everything else kept, and nothing inferred
/// where the command runs the whole suite already or cannot be read.
#[test]
fn a_narrowed_goal_names_its_whole_suite() {
    const GO_ON: &str = " --continue-on-collection-errors";
    let py = |s: &str| Some(format!("{s}{GO_ON}"));
    let cases: Vec<(&str, Option<String>)> = vec![
        // pytest: paths, node ids, expressions, early stops.
        (
            "python3 -m pytest -q tests/test_a.py",
            py("python3 -m pytest -q"),
        ),
        ("pytest tests/test_a.py::test_x -q", py("pytest -q")),
        ("pytest -q -k 'parse and not slow'", py("pytest -q")),
        ("pytest -kparse", py("pytest")),
        ("pytest -qx", py("pytest -q")),
        (
            "pytest --maxfail=1 -p no:cacheprovider tests",
            py("pytest -p no:cacheprovider"),
        ),
        ("pytest --deselect tests/t.py::a -q", py("pytest -q")),
        (
            "PYTHONPATH=src uv run pytest tests/test_a.py",
            py("PYTHONPATH=src uv run pytest"),
        ),
        ("pytest -q", None),
        ("python3 -m pytest -q tests", None),
        ("pytest ./tests/ -q", None),
        ("pytest tests/unit", py("pytest")),
        (
            "python3 -m pytest -q -o addopts=",
            py("python3 -m pytest -q"),
        ),
        ("python3 -m pytest -q -o cache_dir=/tmp/c", None),
        // What a blind attack found: a selection inside a cluster, in the
        // environment, in an ini override; a value with a space; wrappers.
        (
            "python3 -m pytest -qk line_total",
            py("python3 -m pytest -q"),
        ),
        (
            "PYTEST_ADDOPTS=\"-k line_total\" python3 -m pytest -q tests/t.py",
            py("PYTEST_ADDOPTS='' python3 -m pytest -q"),
        ),
        (
            "PYTEST_ADDOPTS=\"-p no:cacheprovider\" python3 -m pytest -q t.py::a",
            py("PYTEST_ADDOPTS='-p no:cacheprovider' python3 -m pytest -q"),
        ),
        (
            "PYTEST_ADDOPTS=\"-k a\" python3 -m pytest -q",
            Some("PYTEST_ADDOPTS='' python3 -m pytest -q".into()),
        ),
        (
            "python3 -m pytest -q -o python_functions=test_line_total tests/t.py",
            py("python3 -m pytest -q"),
        ),
        (
            "timeout 60 python3 -m pytest t.py",
            py("timeout 60 python3 -m pytest"),
        ),
        ("python3 -mpytest t.py", py("python3 -mpytest")),
        ("pytest --rootdir tests t.py", py("pytest --rootdir tests")),
        // go test: packages and patterns.
        ("go test ./parser/...", Some("go test ./...".into())),
        (
            "go test -count=1 -run TestParse ./...",
            Some("go test -count=1 ./...".into()),
        ),
        ("go test -failfast ./...", Some("go test ./...".into())),
        ("go test -v ./...", None),
        (
            "go test ./pkg -args -update",
            Some("go test ./... -args -update".into()),
        ),
        // node --test: files and name patterns.
        ("node --test test/a.test.js", Some("node --test".into())),
        (
            "node --test --test-name-pattern=parse",
            Some("node --test".into()),
        ),
        ("node --import tsx --test", None),
        // Not one simple command, or a runner loopd does not read.
        ("cd sub && pytest tests/a.py", None),
        ("cargo test parse", None),
        ("npx jest parse", None),
        ("make test", None),
    ];
    for (line, want) in cases {
        assert_eq!(narrowed(line), want, "{line}");
    }
}

/// [`tests_of`] with the files of a repository at BASE_REF.
fn tests_in(line: &str, files: &[(&str, &str)]) -> Vec<String> {
    let read = |p: &str| {
        files
            .iter()
            .find(|(f, _)| *f == p)
            .map(|(_, t)| (*t).to_owned())
    };
    tests_of(line, &read)
}

#[test]
fn what_a_goal_runs_as_tests_beyond_the_default_names() {
    let none: &[(&str, &str)] = &[];
    // Named modules and files are tests, whatever their names.
    assert_eq!(
        tests_in("python -m pytest -q checks/verify_calc.py::test_add", none),
        ["checks/verify_calc.py"]
    );
    assert_eq!(
        tests_in("node --test --test-reporter spec spec/calc.js", none),
        ["spec/calc.js"]
    );
    assert_eq!(
        tests_in("mocha --spec 'checks/*.js'", none),
        ["checks/*.js"]
    );
    assert_eq!(
        tests_in("cd pkg && pytest verify.py", none),
        ["pkg/verify.py"]
    );
    // A named module under `--doctest-modules` is the code under test; a
    // directory is left to the runner's names; nothing outside the tree.
    assert!(tests_in("pytest --doctest-modules src/calc.py", none).is_empty());
    assert!(tests_in("pytest -q tests/ ../elsewhere.py /abs.py", none).is_empty());
    assert!(tests_in("cd /tmp && pytest x.py", none).is_empty());
    // pytest's configuration adds names: the first file of its order
    // that configures it, under `testpaths`, or `-o` over it.
    let ini = [(
        "pytest.ini",
        "[pytest]\npython_files = check_*.py\n    verify_*.py\n",
    )];
    assert_eq!(
        tests_in("pytest", &ini),
        ["**/check_*.py", "**/verify_*.py"]
    );
    let pyproject = [(
        "pyproject.toml",
        "[tool.pytest.ini_options]\npython_files = [\"check_*.py\"]\ntestpaths = [\"qa\"]\n",
    )];
    assert_eq!(
        tests_in("python3 -m pytest", &pyproject),
        ["qa/**/check_*.py"]
    );
    let cfg = [(
        "setup.cfg",
        "[metadata]\nname = x\n\n[tool:pytest]\npython_files=spec_*.py\n",
    )];
    assert_eq!(tests_in("pytest", &cfg), ["**/spec_*.py"]);
    assert_eq!(
        tests_in("pytest -o python_files=t_*.py", &cfg),
        ["**/t_*.py"]
    );
    let both = [
        ("pytest.ini", "[pytest]\n"),
        ("tox.ini", "[pytest]\npython_files = x_*.py\n"),
    ];
    assert!(
        tests_in("pytest", &both).is_empty(),
        "an empty pytest.ini wins"
    );
    // `testpaths` takes globs; a directory the command names reads its
    // own configuration first.
    let glob = [(
        "pytest.ini",
        "[pytest]\npython_files = check_*.py\ntestpaths = q*\n",
    )];
    assert_eq!(tests_in("pytest", &glob), ["q*/**/check_*.py"]);
    let nested = [
        ("pytest.ini", "[pytest]\n"),
        ("qa/tox.ini", "[pytest]\npython_files = check_*.py\n"),
    ];
    assert_eq!(tests_in("pytest qa", &nested), ["qa/**/check_*.py"]);
    // Every module is no test name without testpaths to bound it.
    let every = [("pytest.ini", "[pytest]\npython_files = *.py\n")];
    assert!(tests_in("pytest", &every).is_empty());
    // unittest: discovery's pattern under its start directory, or the
    // modules it names.
    assert_eq!(tests_in("python3 -m unittest", none), ["**/test*.py"]);
    assert_eq!(
        tests_in("python3 -m unittest discover -s qa -p 'check*.py'", none),
        ["qa/**/check*.py"]
    );
    assert_eq!(
        tests_in("python3 -m unittest discover qa", none),
        ["qa/**/test*.py"]
    );
    assert_eq!(
        tests_in("python3 -m unittest -v qa.verify", none),
        ["qa.py", "qa/verify.py"]
    );
    // Behind a shell, a script of the tree, a package script.
    let spec = ["qa/calc_spec.py"];
    assert_eq!(
        tests_in("sh -c 'python3 -m pytest -q qa/calc_spec.py'", none),
        spec
    );
    let script = [(
        "scripts/test.sh",
        "#!/bin/sh\nset -e\npython3 -m pytest -q qa/calc_spec.py\n",
    )];
    assert_eq!(tests_in("bash scripts/test.sh", &script), spec);
    let package = [(
        "package.json",
        r#"{"scripts": {"test": "python3 -m pytest qa/calc_spec.py"}}"#,
    )];
    assert_eq!(tests_in("npm test", &package), spec);
    assert_eq!(
        tests_in("pytest --pyargs qa.calc_spec", none),
        ["qa/calc_spec.py", "qa/calc_spec/**/*.py"]
    );
    // Runners that add nothing.
    assert!(tests_in("go test ./... && cargo test && npx jest", none).is_empty());
}
