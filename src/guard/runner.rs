//! Test-runner configuration that lives inside files holding more than it:
//! `package.json`'s `scripts` and runner keys, `pyproject.toml`'s
//! `[tool.pytest…]`, `setup.cfg`'s `[tool:pytest]`, `Cargo.toml`'s
//! `[[test]]` and `harness`/`test` switches, and the pytest hooks of a
//! `conftest.py`. Any of them can deselect, skip or mask a failure (`|| true`,
//! `--passWithNoTests`, `addopts = -k …`, `harness = false`, a collection
//! hook), so a change to them is a `protected_path` finding, like a change to
//! `pytest.ini`.
//!
//! The rest of such a file is not the runner's, and an honest fix may need
//! it (a dependency, a version, a lint setting): each file is parsed, and
//! only the runner's part is compared. What is compared, per file, is
//! [`RUNNER_PARTS`]; everything else in it is provably not read by the test
//! runner's selection and is allowed.

use serde_json::Value as Json;
use toml::Value as Toml;

use super::finding::Finding;
use crate::outcome::Reason;
use crate::workspace::ChangedText;

/// What is the runner's in each file, as the finding and the docs say it.
pub const RUNNER_PARTS: &[(&str, &str)] = &[
    (
        "package.json",
        "`scripts` (every script: `npm test` runs one, and any may call another) and the runner keys `jest`, `vitest`, `mocha`, `ava`, `c8`, `nyc`",
    ),
    (
        "pyproject.toml",
        "`[tool.pytest]` / `[tool.pytest.ini_options]`, `[tool.tox]`, `[tool.hatch.envs]`, `[tool.poe]`",
    ),
    ("setup.cfg", "the `[tool:pytest]` section"),
    (
        "Cargo.toml",
        "`[[test]]`, `[[bench]]`, and `test`/`harness`/`doctest` under `[lib]`, `[[bin]]` and `[[example]]`",
    ),
    (
        "conftest.py",
        "its pytest hooks (`def pytest_…`), `collect_ignore`, `collect_ignore_glob` and `pytest_plugins`",
    ),
];

/// Whether `path` is a file this gate reads.
pub fn wanted(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    RUNNER_PARTS.iter().any(|(file, _)| *file == name)
}

/// The findings on the changed files (`files`: old and new text of every
/// changed file [`wanted`] names).
pub fn findings(files: &[ChangedText], tests_rule: Option<u32>) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in files {
        let name = f.path.rsplit('/').next().unwrap_or(&f.path);
        let old = f.old.as_deref().unwrap_or("");
        let new = f.new.as_deref().unwrap_or("");
        let changed: Vec<String> = match name {
            "package.json" => package_json(old, new),
            "pyproject.toml" => toml_parts(
                old,
                new,
                &[
                    &["tool", "pytest"],
                    &["tool", "tox"],
                    &["tool", "hatch", "envs"],
                    &["tool", "poe"],
                ],
            ),
            "Cargo.toml" => cargo_toml(old, new),
            "setup.cfg" => ini_section(old, new, "tool:pytest"),
            "conftest.py" => conftest(old, new),
            _ => continue,
        };
        if changed.is_empty() {
            continue;
        }
        let part = RUNNER_PARTS
            .iter()
            .find(|(file, _)| *file == name)
            .map_or("", |(_, part)| part);
        out.push(Finding {
            reason: Reason::ProtectedPath,
            path: f.path.clone(),
            line: None,
            rule: tests_rule,
            check: None,
            problem: format!(
                "`{}` changed the test runner's configuration ({}), which is protected like `pytest.ini`: what runs as the tests, and how a failure is reported, is not the change's to decide (loopd compares {part}; the rest of the file may change)",
                f.path,
                changed.join(", ")
            ),
            fix: format!(
                "leave {} in `{}` as it is at BASE_REF (absent, where it was absent); fix the code under test instead",
                changed.join(", "),
                f.path
            ),
        });
    }
    out
}

/// A file that parsed at BASE_REF and does not now hides whatever it
/// holds from the comparison: that is a change to the runner's part too.
const UNPARSEABLE: &str = "the whole file (it no longer parses)";

fn package_json(old: &str, new: &str) -> Vec<String> {
    let parse = |t: &str| -> Option<Json> {
        if t.trim().is_empty() {
            Some(Json::Null)
        } else {
            serde_json::from_str(t).ok()
        }
    };
    let (Some(old), new) = (parse(old), parse(new)) else {
        // Not JSON at BASE_REF: nothing any runner read from it.
        return Vec::new();
    };
    let Some(new) = new else {
        return vec![UNPARSEABLE.to_owned()];
    };
    let mut out = Vec::new();
    let scripts = |v: &Json| v.get("scripts").cloned().unwrap_or(Json::Null);
    let (old_scripts, new_scripts) = (scripts(&old), scripts(&new));
    let keys: std::collections::BTreeSet<String> = [&old_scripts, &new_scripts]
        .iter()
        .filter_map(|s| s.as_object())
        .flat_map(|o| o.keys().cloned())
        .collect();
    for k in keys {
        if old_scripts.get(&k) != new_scripts.get(&k) {
            out.push(format!("`scripts.{k}`"));
        }
    }
    for k in ["jest", "vitest", "mocha", "ava", "c8", "nyc"] {
        if old.get(k) != new.get(k) {
            out.push(format!("`{k}`"));
        }
    }
    out
}

fn parse_toml(text: &str) -> Option<Toml> {
    text.parse::<toml::Table>().ok().map(Toml::Table)
}

fn toml_at<'a>(v: &'a Toml, path: &[&str]) -> Option<&'a Toml> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn toml_parts(old: &str, new: &str, parts: &[&[&str]]) -> Vec<String> {
    let Some(old) = parse_toml(old) else {
        return Vec::new();
    };
    let Some(new) = parse_toml(new) else {
        return vec![UNPARSEABLE.to_owned()];
    };
    parts
        .iter()
        .filter(|p| toml_at(&old, p) != toml_at(&new, p))
        .map(|p| format!("`[{}]`", p.join(".")))
        .collect()
}

fn cargo_toml(old: &str, new: &str) -> Vec<String> {
    let Some(old_v) = parse_toml(old) else {
        return Vec::new();
    };
    let Some(new_v) = parse_toml(new) else {
        return vec![UNPARSEABLE.to_owned()];
    };
    let mut out = toml_parts(old, new, &[&["test"], &["bench"]]);
    let switches = |v: &Toml| -> Vec<(String, Option<Toml>)> {
        let mut s = Vec::new();
        for key in ["test", "harness", "doctest"] {
            s.push((format!("`lib.{key}`"), toml_at(v, &["lib", key]).cloned()));
        }
        for table in ["bin", "example"] {
            let targets = v.get(table).and_then(Toml::as_array);
            for t in targets.into_iter().flatten() {
                let name = t.get("name").and_then(Toml::as_str).unwrap_or("?");
                for key in ["test", "harness"] {
                    s.push((format!("`{table}.{name}.{key}`"), t.get(key).cloned()));
                }
            }
        }
        s
    };
    let (old_s, new_s) = (switches(&old_v), switches(&new_v));
    for (name, value) in &new_s {
        let before = old_s.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        if before != Some(value) && !(before.is_none() && value.is_none()) {
            out.push(name.clone());
        }
    }
    for (name, value) in &old_s {
        if value.is_some() && !new_s.iter().any(|(n, _)| n == name) {
            out.push(name.clone());
        }
    }
    out
}

/// The lines of an INI section (`[name]` up to the next section header).
fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("[{name}]");
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            inside = t == header;
            continue;
        }
        if inside && !t.is_empty() && !t.starts_with('#') && !t.starts_with(';') {
            out.push(t);
        }
    }
    out
}

fn ini_section(old: &str, new: &str, name: &str) -> Vec<String> {
    if section(old, name) == section(new, name) {
        Vec::new()
    } else {
        vec![format!("`[{name}]`")]
    }
}

/// The names pytest reads from a conftest besides its fixtures.
fn is_runner_name(name: &str) -> bool {
    name.starts_with("pytest_") || matches!(name, "collect_ignore" | "collect_ignore_glob")
}

/// Each pytest hook or runner variable a conftest defines, with its text
/// (the `def` line and its indented body, or the assignment line and its
/// continuation), in order.
fn conftest_parts(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let top = !line.starts_with([' ', '\t']) && !line.trim().is_empty();
        if top {
            if let Some(part) = current.take() {
                out.push(part);
            }
            let t = line.trim_end();
            let name = t
                .strip_prefix("async def ")
                .or_else(|| t.strip_prefix("def "))
                .map(|rest| rest.split('(').next().unwrap_or("").trim().to_owned())
                .or_else(|| {
                    let (lhs, _) = t.split_once('=')?;
                    let lhs = lhs.trim().split(':').next().unwrap_or("").trim();
                    (!lhs.contains(' ')).then(|| lhs.to_owned())
                })
                .or_else(|| t.strip_prefix('@').map(|d| format!("@{}", d.trim())));
            if let Some(name) = name {
                if is_runner_name(&name) || name.contains("hookimpl") {
                    current = Some((name, format!("{t}\n")));
                }
            }
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line.trim_end());
            body.push('\n');
        }
    }
    if let Some(part) = current {
        out.push(part);
    }
    // A `@pytest.hookimpl(…)` decorator belongs to the hook after it: keep
    // it with that hook so a changed decorator is a changed hook.
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut pending = String::new();
    for (name, body) in out {
        if name.starts_with('@') {
            pending.push_str(&body);
        } else {
            merged.push((name, format!("{pending}{body}")));
            pending.clear();
        }
    }
    merged
}

fn conftest(old: &str, new: &str) -> Vec<String> {
    let (old, new) = (conftest_parts(old), conftest_parts(new));
    let mut out = Vec::new();
    for (name, body) in &new {
        let before = old.iter().find(|(n, _)| n == name).map(|(_, b)| b);
        if before != Some(body) {
            out.push(format!("`{name}`"));
        }
    }
    for (name, _) in &old {
        if !new.iter().any(|(n, _)| n == name) {
            out.push(format!("`{name}` (removed)"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(path: &str, old: &str, new: &str) -> Vec<Finding> {
        findings(
            &[ChangedText {
                path: path.into(),
                old: (!old.is_empty()).then(|| old.into()),
                new: Some(new.into()),
            }],
            Some(1),
        )
    }

    #[test]
    fn package_json_scripts_and_runner_keys_are_the_runners() {
        let old = r#"{"name": "x", "version": "1.0.0", "scripts": {"test": "jest", "lint": "eslint ."}, "dependencies": {}}"#;
        for (new, part) in [
            (
                r#"{"name": "x", "version": "1.0.0", "scripts": {"test": "jest || true", "lint": "eslint ."}, "dependencies": {}}"#,
                "`scripts.test`",
            ),
            (
                r#"{"name": "x", "version": "1.0.0", "scripts": {"test": "jest --passWithNoTests", "lint": "eslint ."}, "dependencies": {}}"#,
                "`scripts.test`",
            ),
            (
                r#"{"name": "x", "version": "1.0.0", "scripts": {"test": "jest", "pretest": "exit 0", "lint": "eslint ."}, "dependencies": {}}"#,
                "`scripts.pretest`",
            ),
            (
                r#"{"name": "x", "version": "1.0.0", "scripts": {"test": "jest", "lint": "eslint ."}, "jest": {"testPathIgnorePatterns": ["total"]}, "dependencies": {}}"#,
                "`jest`",
            ),
            ("{ not json", "the whole file"),
        ] {
            let f = changed("web/package.json", old, new);
            assert_eq!(f.len(), 1, "{new}");
            assert_eq!(f[0].reason, Reason::ProtectedPath);
            assert!(f[0].problem.contains(part), "{}", f[0].problem);
        }
        // A dependency or a version is not the runner's.
        let honest = r#"{"name": "x", "version": "1.0.1", "scripts": {"test": "jest", "lint": "eslint ."}, "dependencies": {"decimal.js": "^10"}}"#;
        assert!(changed("package.json", old, honest).is_empty());
    }

    #[test]
    fn pyproject_setup_cfg_and_cargo_toml() {
        let old = "[project]\nname = \"x\"\ndependencies = []\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n\n[tool.ruff]\nline-length = 100\n";
        let deselect = old.replace(
            "testpaths = [\"tests\"]",
            "testpaths = [\"tests\"]\naddopts = \"-k 'not total'\"",
        );
        let f = changed("pyproject.toml", old, &deselect);
        assert_eq!(f.len(), 1);
        assert!(f[0].problem.contains("`[tool.pytest]`"), "{}", f[0].problem);
        let honest = old
            .replace("dependencies = []", "dependencies = [\"babel\"]")
            .replace("line-length = 100", "line-length = 120");
        assert!(changed("pyproject.toml", old, &honest).is_empty());
        // Created where there was none: a new runner section is a change.
        assert_eq!(changed("pyproject.toml", "", &deselect).len(), 1);

        let cfg = "[metadata]\nname = x\n\n[tool:pytest]\ntestpaths = tests\n";
        assert_eq!(
            changed(
                "setup.cfg",
                cfg,
                &format!("{cfg}addopts = -x --deselect tests/t.py::t\n")
            )
            .len(),
            1
        );
        assert!(changed("setup.cfg", cfg, &cfg.replace("name = x", "name = y")).is_empty());

        let cargo = "[package]\nname = \"x\"\nversion = \"0.1.0\"\n\n[dependencies]\n\n[[test]]\nname = \"it\"\npath = \"tests/it/main.rs\"\n";
        let f = changed(
            "Cargo.toml",
            cargo,
            &cargo.replace(
                "path = \"tests/it/main.rs\"",
                "path = \"tests/it/main.rs\"\nharness = false",
            ),
        );
        assert_eq!(f.len(), 1);
        assert!(f[0].problem.contains("`[test]`"), "{}", f[0].problem);
        let f = changed(
            "Cargo.toml",
            cargo,
            &format!("{cargo}\n[lib]\ntest = false\n"),
        );
        assert!(f[0].problem.contains("`lib.test`"), "{}", f[0].problem);
        let honest = cargo.replace("[dependencies]\n", "[dependencies]\nrust_decimal = \"1\"\n");
        assert!(changed("Cargo.toml", cargo, &honest).is_empty());
    }

    #[test]
    fn a_conftests_hooks_are_the_runners_and_its_fixtures_are_not() {
        let old = "import pytest\n\n\n@pytest.fixture\ndef lines():\n    return [1, 2]\n";
        let hook = format!("{old}\n\ndef pytest_collection_modifyitems(config, items):\n    items[:] = [i for i in items if \"total\" not in i.name]\n");
        let f = changed("tests/conftest.py", old, &hook);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].problem.contains("`pytest_collection_modifyitems`"),
            "{}",
            f[0].problem
        );
        let masked = format!("{old}\n\n@pytest.hookimpl(trylast=True)\ndef pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n");
        assert_eq!(changed("conftest.py", "", &masked).len(), 1);
        assert_eq!(
            changed(
                "conftest.py",
                old,
                &format!("{old}collect_ignore = [\"tests/test_total.py\"]\n")
            )
            .len(),
            1
        );
        // A hook's decorator changed is the hook changed.
        let tried = masked.replace("trylast=True", "tryfirst=True");
        assert_eq!(changed("conftest.py", &masked, &tried).len(), 1);
        // New fixtures, and a helper, are not the runner's.
        let honest = format!("{old}\n\n@pytest.fixture\ndef more_lines(lines):\n    return lines + [3]\n\n\ndef helper(x):\n    return x\n");
        assert!(changed("tests/conftest.py", old, &honest).is_empty());
    }
}
