//! A `conftest.py` read as pytest reads it: a sequence of top-level
//! statements, each of which may register hooks, skip or deselect tests, or
//! patch pytest itself at import. The gate is an allow-list: of what a
//! conftest may hold, only three kinds of *new* statement are provably not
//! the runner's —
//!
//! - a fixture (`@pytest.fixture`, not `autouse`) under a name that no test
//!   file at BASE_REF uses (so it cannot replace a fixture an existing test
//!   requests) and that is not one of pytest's own;
//! - a plain function under a new name that no other statement of the file
//!   mentions (so an unchanged hook cannot be calling it);
//! - an `import` of names that are not pytest's hooks, from a module that is
//!   not pytest's or pluggy's, and never `*`.
//!
//! Every statement that was there at BASE_REF must be there unchanged.
//! Anything else — module-level code, an `if`, a class, a hook however it is
//! spelled or imported, `collect_ignore`, `pytest_plugins`, an autouse
//! fixture — is the runner's.

use std::collections::BTreeSet;

use crate::judges::syntax::{identifier, python_statements as statements, scan, words, Statement};

/// pytest's built-in fixtures and the common plugins': a new fixture under
/// one of these names replaces what an existing test requests.
const BUILTIN_FIXTURES: &[&str] = &[
    "cache",
    "capfd",
    "capfdbinary",
    "caplog",
    "capsys",
    "capsysbinary",
    "capteesys",
    "config",
    "doctest_namespace",
    "monkeypatch",
    "pytestconfig",
    "record_property",
    "record_testsuite_property",
    "record_xml_attribute",
    "recwarn",
    "request",
    "subtests",
    "testdir",
    "pytester",
    "tmp_path",
    "tmp_path_factory",
    "tmpdir",
    "tmpdir_factory",
    "mocker",
    "event_loop",
    "benchmark",
];

/// What one new statement is, for the allow-list.
fn kind(s: &Statement, in_change: &dyn Fn(&str) -> bool) -> Kind {
    let mut decorators = Vec::new();
    let mut rest = "";
    for line in s.text.lines() {
        let t = line.trim_start();
        if t.starts_with('@') && rest.is_empty() {
            decorators.push(t.trim_end());
        } else if rest.is_empty() {
            rest = t;
        }
    }
    let code = |s: &str| scan(s, None, 0).0;
    if let Some(def) = rest
        .strip_prefix("def ")
        .or_else(|| rest.strip_prefix("async def "))
    {
        let name = def.split('(').next().unwrap_or("").trim().to_owned();
        // A default argument or an annotation is evaluated when the `def`
        // runs, at conftest import: a call there is module code.
        let header: String = s
            .text
            .lines()
            .filter(|l| !l.trim_start().starts_with('@'))
            .map(&code)
            .collect::<Vec<_>>()
            .join(" ");
        let signature = header.split_once('(').map_or("", |(_, rest)| {
            rest.rsplit_once(':').map_or(rest, |(sig, _)| sig)
        });
        let signature = signature.rsplit_once(')').map_or(signature, |(sig, _)| sig);
        if signature.contains('(') || header.contains("lambda") && signature.contains("lambda") {
            return Kind::Other;
        }
        let fixture = match decorators.as_slice() {
            [] => return Kind::Helper(name),
            [one] => {
                let d = code(one);
                let d = d.trim();
                (d == "@pytest.fixture" || d.starts_with("@pytest.fixture("))
                    && !d.contains("autouse")
                    && !d.contains("name")
                    && d.matches('(').count() <= 1
            }
            _ => false,
        };
        return if fixture {
            Kind::Fixture(name)
        } else {
            Kind::Other
        };
    }
    if !decorators.is_empty() {
        return Kind::Other;
    }
    let flat: String = code(&s.text.replace(['\n', '\\'], " "));
    let flat = flat.trim();
    let (module, names): (&str, Vec<String>) = if let Some(r) = flat.strip_prefix("import ") {
        (
            r,
            r.split(',')
                .map(|n| n.split_whitespace().last().unwrap_or("").to_owned())
                .collect(),
        )
    } else if let Some(r) = flat.strip_prefix("from ") {
        let Some((module, names)) = r.split_once(" import ") else {
            return Kind::Other;
        };
        let names = names.trim().trim_start_matches('(').trim_end_matches(')');
        (
            module,
            names
                .split(',')
                .filter(|n| !n.trim().is_empty())
                .map(|n| n.split_whitespace().last().unwrap_or("").to_owned())
                .collect(),
        )
    } else {
        return Kind::Other;
    };
    let root = module.trim().split(['.', ' ', ',']).next().unwrap_or("");
    // pytest's public names are imported by honest conftests (`fixture`,
    // `approx`); its internals and pluggy's are how a conftest rewires it.
    // A module this change adds or edits runs at conftest import, before
    // collection: it is the runner's (so is a relative import, whose
    // target loopd does not resolve).
    let modules: Vec<&str> = if flat.starts_with("import ") {
        module
            .split(',')
            .map(|m| m.split_whitespace().next().unwrap_or(""))
            .collect()
    } else {
        vec![module.trim()]
    };
    let runner_module = matches!(root, "_pytest" | "pluggy")
        || modules
            .iter()
            .any(|m| m.is_empty() || m.starts_with('.') || in_change(m));
    // `import x as pytest` would make `@pytest.fixture` whatever `x` says.
    let runner_name = names.iter().any(|n| {
        n == "*"
            || n.starts_with("pytest_")
            || n.starts_with("collect_ignore")
            || (n == "pytest" && flat != "import pytest")
    });
    if runner_module || runner_name || flat.contains(';') {
        Kind::Other
    } else {
        Kind::Import(names)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Fixture(String),
    Helper(String),
    Import(Vec<String>),
    Other,
}

/// What changed in the runner's part of a conftest: one entry per
/// statement, naming it and its line. `used_at_base` says whether a name
/// is mentioned by a test file at BASE_REF.
pub(super) fn changed(
    old: &str,
    new: &str,
    used_at_base: &dyn Fn(&str) -> bool,
    in_change: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let old_s = statements(old);
    let new_s = statements(new);
    let mut unmatched: Vec<&Statement> = new_s.iter().collect();
    let mut out = Vec::new();
    for s in &old_s {
        match unmatched.iter().position(|n| n.text == s.text) {
            Some(i) => {
                unmatched.remove(i);
            }
            None => out.push(format!(
                "the statement at BASE_REF line {} (changed or removed)",
                s.line
            )),
        }
    }
    let old_words: BTreeSet<String> = old_s.iter().flat_map(|o| words(&o.text)).collect();
    for s in unmatched {
        let own = new_s.iter().position(|n| std::ptr::eq(n, s)).unwrap_or(0);
        let allowed = match kind(s, in_change) {
            // Python reads a name in NFKC form: so does this.
            Kind::Fixture(name) => {
                let name = identifier(&name).into_owned();
                !name.starts_with("pytest_")
                    && !BUILTIN_FIXTURES.contains(&name.as_str())
                    && !used_at_base(&name)
                    && !old_words.contains(name.as_str())
            }
            Kind::Helper(name) => {
                let name = identifier(&name).into_owned();
                !name.starts_with("pytest_")
                    && !used_at_base(&name)
                    && !old_words.contains(name.as_str())
                    && !mentioned_by_runner_code(&new_s, own, &name)
            }
            Kind::Import(names) => names
                .iter()
                .all(|n| !old_words.contains(identifier(n).as_ref())),
            Kind::Other => false,
        };
        if !allowed {
            let first = s
                .text
                .lines()
                .find(|l| !l.trim_start().starts_with('@'))
                .or_else(|| s.text.lines().next())
                .unwrap_or("")
                .trim();
            let first: String = first.chars().take(60).collect();
            out.push(format!("`{first}` (line {})", s.line));
        }
    }
    out
}

/// Whether a helper's name is used by a statement that is not an allowed
/// new fixture or helper: a hook (even a refused one) or module code that
/// calls it would make the helper part of the runner.
fn mentioned_by_runner_code(all: &[Statement], own: usize, name: &str) -> bool {
    all.iter().enumerate().any(|(i, s)| {
        i != own
            && words(&s.text).contains(identifier(name).as_ref())
            && !matches!(kind(s, &|_| false), Kind::Fixture(_) | Kind::Helper(_))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> bool {
        false
    }

    #[test]
    fn statements_follow_strings_brackets_and_decorators() {
        let src = "import pytest\n\n\n@pytest.fixture\ndef lines():\n    return \"\"\"\ndef pytest_x(): pass\n\"\"\"\n\npytest_plugins = [\n    \"a\",\n]\nx = (1 # (\n)\n";
        let s = statements(src);
        let firsts: Vec<&str> = s.iter().map(|s| s.text.lines().next().unwrap()).collect();
        assert_eq!(
            firsts,
            [
                "import pytest",
                "@pytest.fixture",
                "pytest_plugins = [",
                "x = (1 # ("
            ]
        );
        assert!(s[1].text.contains("def pytest_x"), "{:?}", s[1]);
        assert_eq!(s[1].line, 4);
    }

    #[test]
    fn only_new_fixtures_helpers_and_imports_are_allowed() {
        let old = "import pytest\n\n\n@pytest.fixture\ndef lines():\n    return [1, 2]\n";
        let honest = format!("{old}\nfrom decimal import Decimal\n\n@pytest.fixture\ndef money():\n    return Decimal('1.10')\n\n\ndef cents(x):\n    return int(x * 100)\n");
        assert_eq!(changed(old, &honest, &none, &none), Vec::<String>::new());
        for (cheat, what) in [
            (
                "@pytest.fixture(autouse=True)\ndef _skip():\n    pytest.skip('x')\n",
                "def _skip",
            ),
            (
                "if True:\n    def pytest_collection_modifyitems(items):\n        items.clear()\n",
                "if True",
            ),
            (
                "from plugin import pytest_collection_modifyitems\n",
                "from plugin",
            ),
            ("from helpers import *\n", "from helpers"),
            ("from _pytest import runner\n", "from _pytest"),
            ("import os; os._exit(0)\n", "import os"),
            (
                "def pytest_sessionfinish(session):\n    session.exitstatus = 0\n",
                "def pytest_sessionfinish",
            ),
            (
                "globals()['pytest_' + 'collection_modifyitems'] = lambda items: items.clear()\n",
                "globals()",
            ),
            (
                "collect_ignore = ['tests/test_total.py']\n",
                "collect_ignore",
            ),
            ("class Plugin:\n    pass\n", "class Plugin"),
            (
                "@pytest.fixture\ndef tmp_path():\n    return 1\n",
                "def tmp_path",
            ),
            (
                "@pytest.fixture(name='lines')\ndef other():\n    return []\n",
                "def other",
            ),
            (
                "@pytest.fixture\ndef lines():\n    return []\n",
                "def lines",
            ),
        ] {
            let new = format!("{old}\n{cheat}");
            let c = changed(old, &new, &none, &none);
            assert!(c.iter().any(|c| c.contains(what)), "{cheat}: {c:?}");
        }
        // What a blind attack got through before: a conftest that only
        // imports a module the change adds (which installs a plugin at
        // import), and code run in a default argument.
        let in_change = |m: &str| m == "rtools";
        let c = changed("", "import rtools\n", &none, &in_change);
        assert!(c.iter().any(|c| c.contains("import rtools")), "{c:?}");
        let c = changed("", "from .helpers import make\n", &none, &none);
        assert!(c.iter().any(|c| c.contains("from .helpers")), "{c:?}");
        for def in [
            "import os\n\n\ndef helper_value(_x=os.getcwd()):\n    return _x\n",
            "import pytest\n\n\n@pytest.fixture(params=[os.getcwd()])\ndef cwd(request):\n    return request.param\n",
            "def helper(x: int = len([])) -> int:\n    return x\n",
        ] {
            let c = changed("", def, &none, &none);
            assert!(!c.is_empty(), "{def}");
        }
        // A module the change does not touch may be imported.
        assert!(changed("", "from decimal import Decimal\n", &none, &in_change).is_empty());
        // A helper an existing hook calls is the runner's: its new body
        // changes what the hook does.
        let hooked = "def pytest_collection_modifyitems(items):\n    keep(items)\n";
        let c = changed(
            hooked,
            &format!("{hooked}\ndef keep(items):\n    items.clear()\n"),
            &none,
            &none,
        );
        assert!(c.iter().any(|c| c.contains("def keep")), "{c:?}");
        // A fixture an existing test requests, defined anew in a new
        // conftest, replaces the one it had.
        let c = changed(
            "",
            "import pytest\n\n@pytest.fixture\ndef lines():\n    return []\n",
            &|n| n == "lines",
            &none,
        );
        assert!(c.iter().any(|c| c.contains("def lines")), "{c:?}");
        // A statement of BASE_REF that changed.
        let c = changed(old, &old.replace("[1, 2]", "[1]"), &none, &none);
        assert!(c.iter().any(|c| c.contains("BASE_REF line 4")), "{c:?}");
    }
}
