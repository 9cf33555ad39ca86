//! Test-runner configuration that lives inside files holding more than it:
//! `package.json`, `pyproject.toml`, `setup.cfg`, `Cargo.toml` and a new
//! `conftest.py`. Any part of them can deselect, skip or mask a failure
//! (`|| true`, `--passWithNoTests`, `addopts = -k …`, `harness = false`,
//! `autotests = false`, a `pytest11` entry point, a feature that turns on a
//! `cfg_attr(…, ignore)`, a `main` that points the tests at another module,
//! a collection hook), so the gate is an allow-list: each file is parsed,
//! the keys [`ALLOWED`] names — dependencies on registry versions, versions,
//! descriptive metadata, lint settings — are taken out, and whatever is left
//! must be as it was at BASE_REF. Anything loopd cannot prove unrelated to
//! the runner is the runner's: a `protected_path` finding, like a change to
//! `pytest.ini`.

use serde_json::{Map, Value as Json};

use super::finding::Finding;
use crate::outcome::Reason;
use crate::workspace::ChangedText;

mod conftest;

/// What may change in each file, as the finding and the docs say it. `*`
/// is any one key; a dependency table's entries are allowed only as
/// registry versions (a `path`, `git`, `file:` or renamed package could put
/// a fake of a test dependency in its place).
pub const ALLOWED: &[(&str, &str)] = &[
    (
        "package.json",
        "`name`, `version`, `description`, `keywords`, `author`, `contributors`, `maintainers`, `license`, `homepage`, `repository`, `bugs`, `funding`, `private`, `engines`, `files`, `publishConfig`, `eslintConfig`, `prettier`, `stylelint`, `browserslist`, and the `dependencies`/`devDependencies`/`peerDependencies`/`optionalDependencies` entries that name a registry version",
    ),
    (
        "pyproject.toml",
        "`[project]`'s `name`, `version`, `description`, `readme`, `license`, `authors`, `maintainers`, `keywords`, `classifiers`, `urls`, `requires-python` and its `dependencies`/`optional-dependencies` without a direct URL; `[dependency-groups]`; `[build-system].requires`; `[tool.ruff]`, `[tool.black]`, `[tool.isort]`, `[tool.mypy]`, `[tool.pylint]`, `[tool.pyright]`, `[tool.codespell]`, `[tool.pydocstyle]`; `[tool.poetry]`'s `version`, `description`, `authors`, `readme`, `license`, `keywords`, `classifiers` and dependency tables on registry versions",
    ),
    (
        "setup.cfg",
        "the `[metadata]`, `[flake8]`, `[isort]`, `[mypy]`/`[mypy-…]`, `[pycodestyle]`, `[pydocstyle]`, `[bdist_wheel]` sections and `[options]`' `install_requires`/`python_requires`",
    ),
    (
        "Cargo.toml",
        "`[package]`'s `version`, `description`, `authors`, `license`, `license-file`, `repository`, `homepage`, `documentation`, `readme`, `keywords`, `categories`, `rust-version`, `publish`, `include`, `exclude`, `metadata`; `[lints]`; `[badges]`; `[workspace.package].version`, `[workspace.lints]`, `[workspace.metadata]`; and `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]` (also under `[target.…]` and `[workspace]`) entries on registry versions",
    ),
    (
        "go.mod",
        "`require` entries on module versions; the `module`, `go`, `toolchain`, `godebug`, `replace`, `exclude`, `retract` and `tool` directives stay as they were",
    ),
    (
        "conftest.py",
        "new fixtures (not `autouse`, under a name no test file at BASE_REF uses and not pytest's own), new helper functions no other statement calls, and new imports that are not pytest hooks, `*` or from `_pytest`/`pluggy`; every statement of BASE_REF unchanged",
    ),
];

/// Key paths taken out before comparing, per file. The last key of a
/// [`Strip::Deps`] path is a dependency table.
enum Strip {
    Key(&'static [&'static str]),
    Deps(&'static [&'static str]),
}

use Strip::{Deps, Key};

const PACKAGE_JSON: &[Strip] = &[
    Key(&["name"]),
    Key(&["version"]),
    Key(&["description"]),
    Key(&["keywords"]),
    Key(&["author"]),
    Key(&["contributors"]),
    Key(&["maintainers"]),
    Key(&["license"]),
    Key(&["homepage"]),
    Key(&["repository"]),
    Key(&["bugs"]),
    Key(&["funding"]),
    Key(&["private"]),
    Key(&["engines"]),
    Key(&["files"]),
    Key(&["publishConfig"]),
    Key(&["eslintConfig"]),
    Key(&["prettier"]),
    Key(&["stylelint"]),
    Key(&["browserslist"]),
    Deps(&["dependencies"]),
    Deps(&["devDependencies"]),
    Deps(&["peerDependencies"]),
    Deps(&["optionalDependencies"]),
];

const PYPROJECT: &[Strip] = &[
    Key(&["project", "name"]),
    Key(&["project", "version"]),
    Key(&["project", "description"]),
    Key(&["project", "readme"]),
    Key(&["project", "license"]),
    Key(&["project", "authors"]),
    Key(&["project", "maintainers"]),
    Key(&["project", "keywords"]),
    Key(&["project", "classifiers"]),
    Key(&["project", "urls"]),
    Key(&["project", "requires-python"]),
    Deps(&["project", "dependencies"]),
    Deps(&["project", "optional-dependencies", "*"]),
    Deps(&["dependency-groups", "*"]),
    Key(&["build-system", "requires"]),
    Key(&["tool", "ruff"]),
    Key(&["tool", "black"]),
    Key(&["tool", "isort"]),
    Key(&["tool", "mypy"]),
    Key(&["tool", "pylint"]),
    Key(&["tool", "pyright"]),
    Key(&["tool", "codespell"]),
    Key(&["tool", "pydocstyle"]),
    Key(&["tool", "poetry", "version"]),
    Key(&["tool", "poetry", "description"]),
    Key(&["tool", "poetry", "authors"]),
    Key(&["tool", "poetry", "readme"]),
    Key(&["tool", "poetry", "license"]),
    Key(&["tool", "poetry", "keywords"]),
    Key(&["tool", "poetry", "classifiers"]),
    Deps(&["tool", "poetry", "dependencies"]),
    Deps(&["tool", "poetry", "dev-dependencies"]),
    Deps(&["tool", "poetry", "group", "*", "dependencies"]),
];

const CARGO_TOML: &[Strip] = &[
    Key(&["package", "version"]),
    Key(&["package", "description"]),
    Key(&["package", "authors"]),
    Key(&["package", "license"]),
    Key(&["package", "license-file"]),
    Key(&["package", "repository"]),
    Key(&["package", "homepage"]),
    Key(&["package", "documentation"]),
    Key(&["package", "readme"]),
    Key(&["package", "keywords"]),
    Key(&["package", "categories"]),
    Key(&["package", "rust-version"]),
    Key(&["package", "publish"]),
    Key(&["package", "include"]),
    Key(&["package", "exclude"]),
    Key(&["package", "metadata"]),
    Key(&["lints"]),
    Key(&["badges"]),
    Key(&["workspace", "package", "version"]),
    Key(&["workspace", "lints"]),
    Key(&["workspace", "metadata"]),
    Deps(&["workspace", "dependencies"]),
    Deps(&["dependencies"]),
    Deps(&["dev-dependencies"]),
    Deps(&["build-dependencies"]),
    Deps(&["target", "*", "dependencies"]),
    Deps(&["target", "*", "dev-dependencies"]),
    Deps(&["target", "*", "build-dependencies"]),
];

/// `go.mod`: requirements may move to other versions; a `replace` (a
/// local directory in place of a module), a `toolchain` (another `go`) or
/// a `godebug` (another runtime behaviour) is the runner's.
const GO_MOD: &[Strip] = &[Deps(&["require"])];

/// `setup.cfg` sections that are not read by any test runner.
const SETUP_CFG_SECTIONS: &[&str] = &[
    "metadata",
    "flake8",
    "isort",
    "mypy",
    "pycodestyle",
    "pydocstyle",
    "bdist_wheel",
];

/// Whether `path` is a file this gate reads.
pub fn wanted(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ALLOWED.iter().any(|(file, _)| *file == name)
}

/// The findings on the changed files (`files`: old and new text of every
/// changed file [`wanted`] names). `used_at_base` says whether a test file
/// at BASE_REF mentions a name (a conftest's new fixture must not replace
/// one an existing test requests); `in_change` whether a Python module
/// (`a.b`) is one the change adds or edits (a new conftest importing it
/// runs it before collection).
pub fn findings(
    files: &[ChangedText],
    tests_rule: Option<u32>,
    used_at_base: &dyn Fn(&str) -> bool,
    in_change: &dyn Fn(&str) -> bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in files {
        let name = f.path.rsplit('/').next().unwrap_or(&f.path);
        let old = f.old.as_deref().unwrap_or("");
        let new = f.new.as_deref().unwrap_or("");
        let changed: Vec<String> = match name {
            "package.json" => structured(old, new, parse_json, PACKAGE_JSON),
            "pyproject.toml" => structured(old, new, parse_toml, PYPROJECT),
            "Cargo.toml" => structured(old, new, parse_toml, CARGO_TOML),
            "setup.cfg" => structured(old, new, parse_setup_cfg, &[]),
            "go.mod" => structured(old, new, parse_go_mod, GO_MOD),
            "conftest.py" => conftest::changed(old, new, used_at_base, in_change),
            _ => continue,
        };
        if changed.is_empty() {
            continue;
        }
        let allowed = ALLOWED
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
                "`{}` changed what the test runner may read ({}), which is protected like `pytest.ini`: what runs as the tests, and how a failure is reported, is not the change's to decide (in this file only {allowed} may change)",
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

/// The parts that differ between `old` and `new` once the allowed keys are
/// taken out. A file that does not parse at BASE_REF is compared whole:
/// nothing in it is known to be outside the runner.
fn structured(
    old: &str,
    new: &str,
    parse: fn(&str) -> Option<Json>,
    strip: &[Strip],
) -> Vec<String> {
    let empty = |t: &str| t.trim().is_empty();
    let parse = |t: &str| {
        if empty(t) {
            Some(Json::Object(Map::new()))
        } else {
            parse(t)
        }
    };
    let Some(mut old_v) = parse(old) else {
        return if old == new {
            Vec::new()
        } else {
            vec!["the whole file (it did not parse at BASE_REF)".to_owned()]
        };
    };
    let Some(mut new_v) = parse(new) else {
        return vec![UNPARSEABLE.to_owned()];
    };
    for s in strip {
        take_out(&mut old_v, s);
        take_out(&mut new_v, s);
    }
    let mut out = Vec::new();
    differences(&old_v, &new_v, &mut Vec::new(), &mut out);
    out
}

fn take_out(v: &mut Json, strip: &Strip) {
    let (path, deps) = match strip {
        Key(p) => (*p, false),
        Deps(p) => (*p, true),
    };
    take_at(v, path, deps);
}

fn take_at(v: &mut Json, path: &[&str], deps: bool) {
    let Some(obj) = v.as_object_mut() else { return };
    match path {
        [] => {}
        [last] => {
            if !deps {
                obj.remove(*last);
                return;
            }
            // Keep only the entries that are not plain registry versions:
            // those stay compared.
            match obj.get_mut(*last) {
                Some(Json::Object(table)) => {
                    table.retain(|name, spec| !registry_version(name, spec));
                    if table.is_empty() {
                        obj.remove(*last);
                    }
                }
                Some(Json::Array(list)) => {
                    list.retain(|spec| !spec.as_str().is_some_and(pep508_registry));
                    if list.is_empty() {
                        obj.remove(*last);
                    }
                }
                _ => {}
            }
        }
        ["*", rest @ ..] => {
            for child in obj.values_mut() {
                take_at(child, rest, deps);
            }
        }
        [key, rest @ ..] => {
            if let Some(child) = obj.get_mut(*key) {
                take_at(child, rest, deps);
                if child.as_object().is_some_and(Map::is_empty) {
                    obj.remove(*key);
                }
            }
        }
    }
}

/// A dependency entry that names only a version from the registry (npm's
/// `"^1.2"`, Cargo's `"1"` or `{ version, features, default-features,
/// optional }`, Poetry's the same): nothing a test could be fooled by.
fn registry_version(name: &str, spec: &Json) -> bool {
    match spec {
        Json::String(s) => {
            let s = s.trim();
            !name.is_empty()
                && !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || " ^~<>=*.|-+,xX".contains(c))
        }
        Json::Object(t) => t.iter().all(|(k, v)| match k.as_str() {
            "version" => registry_version(name, v),
            "features" | "default-features" | "default_features" | "optional" | "extras"
            | "python" | "markers" => true,
            _ => false,
        }),
        _ => false,
    }
}

/// A PEP 508 requirement without a direct URL (`name[extra]>=1; marker`).
fn pep508_registry(spec: &str) -> bool {
    !spec.contains('@') && !spec.contains("://")
}

fn parse_json(text: &str) -> Option<Json> {
    serde_json::from_str(text).ok()
}

fn parse_toml(text: &str) -> Option<Json> {
    let table = text.parse::<toml::Table>().ok()?;
    serde_json::to_value(table).ok()
}

/// `setup.cfg` as pytest's reader (iniconfig) sees it: a section header is
/// an unindented `[name]` (a trailing comment allowed), an indented line
/// continues the key above it. Allowed sections are dropped here; a line
/// loopd cannot place (an indented line with no key above it, a header
/// that does not close, a section twice) makes the file unparseable, so it
/// is compared whole.
/// `go.mod` as `{directive: [arguments…]}`, `require` as `{module:
/// version}` (comments dropped, blocks opened), so that only
/// requirements can be stripped. A line loopd cannot read is kept whole
/// under its directive, and so compared.
fn parse_go_mod(text: &str) -> Option<Json> {
    let mut out: Map<String, Json> = Map::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        let t = line.split("//").next().unwrap_or("").trim();
        if t.is_empty() {
            continue;
        }
        if t == ")" {
            // A `)` outside a block: not a file loopd can read.
            block.take()?;
            continue;
        }
        let (directive, rest) = match &block {
            Some(d) => (d.clone(), t.to_owned()),
            None => {
                let (d, rest) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
                let rest = rest.trim();
                if rest == "(" {
                    block = Some(d.to_owned());
                    continue;
                }
                (d.to_owned(), rest.to_owned())
            }
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if directive == "require" {
            if let [module, version] = words[..] {
                out.entry("require")
                    .or_insert_with(|| Json::Object(Map::new()))
                    .as_object_mut()?
                    .insert(module.to_owned(), Json::String(version.to_owned()));
                continue;
            }
        }
        out.entry(directive)
            .or_insert_with(|| Json::Array(Vec::new()))
            .as_array_mut()?
            .push(Json::String(rest));
    }
    block.is_none().then_some(Json::Object(out))
}

fn parse_setup_cfg(text: &str) -> Option<Json> {
    let mut sections: Map<String, Json> = Map::new();
    let mut section: Option<String> = None;
    let mut key: Option<String> = None;
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            let (s, k) = (section.as_ref()?, key.as_ref()?);
            let entry = sections.get_mut(s)?.get_mut(k)?;
            if let Json::String(v) = entry {
                v.push('\n');
                v.push_str(t);
            }
            continue;
        }
        if t.starts_with('[') {
            let head = t.split(['#', ';']).next().unwrap_or("").trim();
            let name = head.strip_prefix('[')?.strip_suffix(']')?.trim().to_owned();
            if !seen.insert(name.clone()) {
                return None;
            }
            sections.insert(name.clone(), Json::Object(Map::new()));
            section = Some(name);
            key = None;
            continue;
        }
        let s = section.as_ref()?;
        let (k, v) = t.split_once(['=', ':'])?;
        let k = k.trim().to_owned();
        sections
            .get_mut(s)?
            .as_object_mut()?
            .insert(k.clone(), Json::String(v.trim().to_owned()));
        key = Some(k);
    }
    sections.retain(|name, _| {
        !SETUP_CFG_SECTIONS.contains(&name.as_str()) && !name.starts_with("mypy-")
    });
    if let Some(Json::Object(options)) = sections.get_mut("options") {
        options.remove("install_requires");
        options.remove("python_requires");
        if options.is_empty() {
            sections.remove("options");
        }
    }
    Some(Json::Object(sections))
}

/// `v` as a table; a table that is new, or gone (`Null`), is compared key
/// by key against an empty one, so the finding names what it holds.
fn table<'a>(v: &'a Json, none: &'a Map<String, Json>) -> Option<&'a Map<String, Json>> {
    match v {
        Json::Object(m) => Some(m),
        Json::Null => Some(none),
        _ => None,
    }
}

/// The paths (at most two keys deep, as `[a.b]`) where `old` and `new`
/// differ.
fn differences(old: &Json, new: &Json, at: &mut Vec<String>, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    let none = Map::new();
    match (table(old, &none), table(new, &none)) {
        (Some(a), Some(b)) if at.len() < 2 => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                at.push(k.clone());
                differences(
                    a.get(k.as_str()).unwrap_or(&Json::Null),
                    b.get(k.as_str()).unwrap_or(&Json::Null),
                    at,
                    out,
                );
                at.pop();
            }
        }
        _ if at.is_empty() => out.push("the whole file".to_owned()),
        _ => out.push(format!("`{}`", at.join("."))),
    }
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
            &|_| false,
            &|_| false,
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
                "`jest.",
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
    fn go_mod_requirements_move_and_nothing_else_does() {
        let old = "module example.com/calc\n\ngo 1.22\n\nrequire (\n\tgolang.org/x/text v0.14.0 // indirect\n)\n";
        let bumped = old.replace("v0.14.0", "v0.15.0");
        assert!(changed("go.mod", old, &bumped).is_empty());
        let added = format!("{old}require github.com/google/go-cmp v0.6.0\n");
        assert!(changed("go.mod", old, &added).is_empty());
        for runner in [
            "replace golang.org/x/text => ./fake",
            "toolchain go1.23.0",
            "godebug panicnil=1",
        ] {
            let f = changed("go.mod", old, &format!("{old}{runner}\n"));
            assert_eq!(f.len(), 1, "{runner}");
            assert_eq!(f[0].reason, Reason::ProtectedPath);
        }
        let f = changed("go.mod", old, &old.replace("go 1.22", "go 1.23"));
        assert_eq!(f.len(), 1, "the language version is the runner's");
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
        assert!(f[0].problem.contains("`tool.pytest`"), "{}", f[0].problem);
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
        assert!(f[0].problem.contains("`test`"), "{}", f[0].problem);
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
            f[0].problem.contains("pytest_collection_modifyitems"),
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

    /// What a helper found the deny-list of runner parts let through: each
    /// is the runner's now, because only named keys may change.
    #[test]
    fn everything_not_allowed_is_the_runners() {
        let cargo = "[package]\nname = \"x\"\nversion = \"0.1.0\"\n\n[dependencies]\nserde = \"1\"\n\n[dev-dependencies]\napprox = \"0.5\"\n";
        for (new, part) in [
            (
                cargo.replace(
                    "version = \"0.1.0\"\n",
                    "version = \"0.1.0\"\nautotests = false\n",
                ),
                "`package.autotests`",
            ),
            (
                format!(
                    "{cargo}\n[profile.test]\ndebug-assertions = false\noverflow-checks = false\n"
                ),
                "`profile.test`",
            ),
            (
                format!("{cargo}\n[workspace]\nmembers = [\"fake\"]\n"),
                "`workspace.members`",
            ),
            (
                format!("{cargo}\n[features]\ndefault = [\"quick\"]\nquick = []\n"),
                "`features.default`",
            ),
            (
                cargo.replace("approx = \"0.5\"", "approx = { path = \"fake-approx\" }"),
                "`dev-dependencies.approx`",
            ),
            (
                cargo.replace(
                    "approx = \"0.5\"",
                    "approx = { git = \"https://example.com/a\" }",
                ),
                "`dev-dependencies.approx`",
            ),
            (
                format!("{cargo}\n[patch.crates-io]\napprox = {{ path = \"fake\" }}\n"),
                "`patch.crates-io`",
            ),
        ] {
            let f = changed("Cargo.toml", cargo, &new);
            assert_eq!(f.len(), 1, "{new}");
            assert!(f[0].problem.contains(part), "{part}: {}", f[0].problem);
        }
        let honest = cargo
            .replace(
                "serde = \"1\"",
                "serde = { version = \"1\", features = [\"derive\"] }\nrust_decimal = \"1.36\"",
            )
            .replace("version = \"0.1.0\"", "version = \"0.1.1\"");
        assert!(changed("Cargo.toml", cargo, &honest).is_empty());

        let py = "[project]\nname = \"x\"\nversion = \"1\"\ndependencies = [\"attrs\"]\n\n[tool.ruff]\nline-length = 100\n";
        for (new, part) in [
            (
                format!("{py}\n[project.entry-points.pytest11]\nquiet = \"x.plugin\"\n"),
                "`project.entry-points`",
            ),
            (
                format!("{py}\n[tool.pdm.scripts]\ntest = \"pytest -k 'not total'\"\n"),
                "`tool.pdm`",
            ),
            (
                format!("{py}\n[tool.coverage.report]\nfail_under = 0\n"),
                "`tool.coverage`",
            ),
            (
                py.replace("[\"attrs\"]", "[\"attrs @ file:///tmp/fake\"]"),
                "`project.dependencies`",
            ),
        ] {
            let f = changed("pyproject.toml", py, &new);
            assert_eq!(f.len(), 1, "{new}");
            assert!(f[0].problem.contains(part), "{part}: {}", f[0].problem);
        }
        let honest = py
            .replace("[\"attrs\"]", "[\"attrs\", \"babel>=2.14\"]")
            .replace("line-length = 100", "line-length = 120");
        assert!(changed("pyproject.toml", py, &honest).is_empty());

        let pkg = r#"{"name": "x", "version": "1.0.0", "main": "src/index.js", "scripts": {"test": "node --test"}, "devDependencies": {"tap": "^18"}}"#;
        for (new, part) in [
            (pkg.replace("src/index.js", "src/fake.js"), "`main`"),
            (
                pkg.replace("\"main\"", "\"tap\": {\"bail\": false}, \"main\""),
                "`tap.",
            ),
            (
                pkg.replace("\"^18\"", "\"file:./fake-tap\""),
                "`devDependencies.tap`",
            ),
            (
                pkg.replace("\"main\"", "\"type\": \"module\", \"main\""),
                "`type`",
            ),
            (
                pkg.replace(
                    "\"main\"",
                    "\"imports\": {\"#lib\": \"./fake.js\"}, \"main\"",
                ),
                "`imports.",
            ),
        ] {
            let f = changed("package.json", pkg, &new);
            assert_eq!(f.len(), 1, "{new}");
            assert!(f[0].problem.contains(part), "{part}: {}", f[0].problem);
        }

        let cfg = "[metadata]\nname = x\n\n[options]\ninstall_requires =\n    attrs\n";
        for new in [
            format!("{cfg}\n[tool:pytest]  # quiet\naddopts = -k 'not total'\n"),
            format!("{cfg}\n[options.entry_points]\npytest11 =\n    quiet = x.plugin\n"),
            cfg.replace("[metadata]", "[metadata\naddopts = -x"),
            format!("{cfg}\n[metadata]\nname = y\n"),
        ] {
            assert_eq!(changed("setup.cfg", cfg, &new).len(), 1, "{new}");
        }
        let honest = cfg
            .replace("    attrs\n", "    attrs\n    babel\n")
            .replace("name = x", "name = y");
        assert!(changed("setup.cfg", cfg, &honest).is_empty());

        // A file that did not parse at BASE_REF is compared whole.
        assert_eq!(changed("package.json", "{ broken", "{ broken2").len(), 1);
        assert!(changed("package.json", "{ broken", "{ broken").is_empty());
    }
}
