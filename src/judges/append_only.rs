//! `[protect] tests = "append_only"`: an existing test file may gain new
//! tests, fixtures, helpers and imports, but no statement it had at
//! BASE_REF may change or go — not a test's body, its decorators or its
//! parametrisation. Each file is split into top-level statements — from
//! its syntax tree ([`super::tree`]) when both versions parse, else
//! lexically ([`super::syntax`]); every old statement must be in the new
//! file unchanged (the same tree, or the same code lines), and every new
//! one must be of a kind that cannot reach an
//! existing test: a test or helper under a name the file did not mention
//! (a redefinition replaces what the old tests call), a non-`autouse`
//! fixture under such a name, an import of new names. What runs around
//! every test (`beforeEach`, an autouse fixture, module-level code,
//! `test.only`, `jest.mock`) is an edit of the existing tests too.

use std::collections::BTreeSet;

use super::finding::Finding;
use super::precheck::Lang;
use super::syntax::{
    brace_statements, identifier, normal_lines, python_statements, words, Statement,
};
use super::tree::{self, Tree};
use crate::lang::{Added, Lexical};
use crate::outcome::Reason;

/// `[protect] tests`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestsMode {
    /// No existing test file changes (the default).
    #[default]
    Frozen,
    /// New tests may be added to existing test files.
    AppendOnly,
}

impl TestsMode {
    pub fn parse(v: &str) -> Option<TestsMode> {
        match v.trim() {
            "frozen" => Some(TestsMode::Frozen),
            "append_only" => Some(TestsMode::AppendOnly),
            _ => None,
        }
    }
}

/// A top-level statement and, when the file parsed cleanly, its shape on
/// the syntax tree ([`tree::shape`]): what "unchanged" compares, so that
/// re-formatting an existing test is no change and a changed token is one.
struct Stmt {
    s: Statement,
    shape: Option<String>,
}

impl std::ops::Deref for Stmt {
    type Target = Statement;
    fn deref(&self) -> &Statement {
        &self.s
    }
}

/// A file's top-level statements: from its syntax tree when it parses
/// without an error, else from the lexical splitter (which errs towards
/// larger statements). Attributes (`#[test]`) go with the item they mark,
/// as decorators do.
fn statements(path: &str, lang: Lang, text: &str) -> Vec<Stmt> {
    let text = normal_lines(text);
    if let Some(t) = Tree::parse_as(path, lang, &text).filter(Tree::clean) {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        let mut attrs: Option<(u32, String)> = None;
        for node in tree::code_children(t.root()) {
            let (first, shape) = match attrs.take() {
                Some((line, shape)) => (line, shape),
                None => (tree::line(node), String::new()),
            };
            let shape = shape + &tree::shape(&t, node);
            if node.kind() == "attribute_item" {
                attrs = Some((first, shape));
                continue;
            }
            let code: String = lines
                .get(first as usize - 1..tree::end_line(node) as usize)
                .unwrap_or(&[])
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| format!("{}\n", l.trim_end()))
                .collect();
            out.push(Stmt {
                s: Statement {
                    text: code,
                    line: first,
                },
                shape: Some(shape),
            });
        }
        return out;
    }
    let lexical = match lang.lexical {
        Lexical::Indentation => python_statements(&text),
        Lexical::Braces(brace) => brace_statements(&text, brace),
    };
    lexical
        .into_iter()
        .map(|s| Stmt { s, shape: None })
        .collect()
}

/// An old statement is in the new file unchanged: the same shape on the
/// tree, or (where a file did not parse) the same code lines.
fn same(old: &Stmt, new: &Stmt) -> bool {
    match (&old.shape, &new.shape) {
        (Some(a), Some(b)) => a == b,
        _ => old.text == new.text,
    }
}

/// Names a runner calls around the tests of a file, whatever they hold.
const RUN_AROUND: &[&str] = &[
    "init",
    "TestMain",
    "setup_module",
    "teardown_module",
    "setup_function",
    "teardown_function",
    "setup_method",
    "teardown_method",
    "setup",
    "teardown",
    "setUpModule",
    "tearDownModule",
];

/// A statement's code lines without the comment lines before it.
fn code_lines(s: &Statement) -> Vec<&str> {
    s.text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !(l.starts_with("//")
                || l.starts_with('#') && !l.starts_with("#[")
                || l.starts_with("/*")
                || l.starts_with('*'))
        })
        .collect()
}

/// The names a new top-level statement introduces, when the language's
/// append-only rules take it ([`crate::lang::AppendOnly`]); `None` for
/// anything that could reach the existing tests, and for every statement
/// of a language with no such rules.
fn introduces(lang: Lang, s: &Statement) -> Option<Vec<String>> {
    let rules = lang.append_only.as_ref()?;
    with_added(s, |added| (rules.introduces)(added))
}

/// The modules an import statement names, as the language reads them.
fn imported_modules(lang: Lang, s: &Statement) -> Vec<String> {
    match lang.append_only.as_ref() {
        Some(rules) => with_added(s, |added| (rules.imported_modules)(added)),
        None => Vec::new(),
    }
}

/// `s` as the languages' rules read it: its decorators or attributes, then
/// the rest of its code lines.
fn with_added<T>(s: &Statement, read: impl FnOnce(&Added<'_>) -> T) -> T {
    let lines = code_lines(s);
    let n = lines
        .iter()
        .take_while(|l| l.starts_with('@') || l.starts_with("#["))
        .count();
    read(&Added {
        attrs: &lines[..n],
        rest: &lines[n..],
        text: &s.text,
    })
}

/// The first line (1-based) whose indentation mixes tabs and spaces or
/// holds a form feed.
fn ambiguous_indent(text: &str) -> Option<u32> {
    normal_lines(text).lines().enumerate().find_map(|(i, l)| {
        let lead: &str = &l[..l.len() - l.trim_start_matches([' ', '\t', '\x0c']).len()];
        let mixed = lead.contains(' ') && lead.contains('\t') || lead.contains('\x0c');
        mixed.then(|| u32::try_from(i + 1).unwrap_or(u32::MAX))
    })
}

/// A Python source's first two lines declare an encoding that is not UTF-8.
pub(crate) fn foreign_encoding(text: &str) -> bool {
    static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let r = crate::util::once_regex(&R, r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)");
    text.split(['\n', '\r']).take(2).any(|l| {
        r.captures(l).is_some_and(|c| {
            let e = c[1].to_ascii_lowercase().replace('_', "-");
            !matches!(e.as_str(), "utf-8" | "utf8" | "ascii" | "us-ascii")
        })
    })
}

/// An old import that the new file extends with more names (`from m
/// import a` → `from m import a, b`): every token of the old is in the new,
/// both are imports, and they start alike.
fn extends_import(old: &Statement, new: &Statement) -> bool {
    let (o, n) = (code_lines(old).join(" "), code_lines(new).join(" "));
    let head = |t: &str| t.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    (o.starts_with("import") || o.starts_with("from ") || o.starts_with("use "))
        && head(&o) == head(&n)
        && words(&o).is_subset(&words(&n))
}

/// The findings on one existing test file changed under `append_only`.
pub fn findings(
    path: &str,
    old: &str,
    new: &str,
    tests_rule: Option<u32>,
    added_module: &dyn Fn(&str) -> bool,
) -> Vec<Finding> {
    let finding = |line: Option<u32>, problem: String| {
        Finding {
        reason: Reason::ProtectedPath,
        path: path.to_owned(),
        line,
        rule: tests_rule,
        check: None,
        problem,
        fix: format!("leave every test and statement `{path}` had at BASE_REF exactly as it was; add new tests under new names instead, and fix the code under test"),
    }
    };
    let Some(lang) = Lang::of(path) else {
        return vec![finding(None, format!("`{path}` is an existing test file loopd cannot split into statements, so with `[protect] tests = \"append_only\"` it may not change either"))];
    };
    // A declared encoding other than UTF-8 makes Python read other text
    // than loopd does (`# -*- coding: utf-7 -*-`).
    if lang.declares_encoding && foreign_encoding(new) {
        return vec![finding(Some(1), format!("`{path}` declares an encoding other than UTF-8, so Python would read other code than loopd compares"))];
    }
    // Python takes a tab to the next multiple of 8 columns and a form feed
    // back to column 0; a parser may count otherwise, and then a test that
    // Python nests inside a helper reads as an unchanged top-level test.
    if let Some(line) = (lang.lexical == Lexical::Indentation)
        .then(|| ambiguous_indent(new))
        .flatten()
    {
        return vec![finding(Some(line), format!("`{path}` line {line} indents with tabs and spaces together (or a form feed), which Python and loopd could read as different blocks: indent with spaces only"))];
    }
    let old_s = statements(path, lang, old);
    let new_s = statements(path, lang, new);
    let old_words: BTreeSet<String> = words(old);
    let mut unmatched: Vec<&Stmt> = new_s.iter().collect();
    let mut out = Vec::new();
    let mut extended: Vec<&Stmt> = Vec::new();
    for s in &old_s {
        if let Some(i) = unmatched.iter().position(|n| same(s, n)) {
            unmatched.remove(i);
            continue;
        }
        if let Some(i) = unmatched.iter().position(|n| extends_import(s, n)) {
            extended.push(s);
            let n = unmatched.remove(i);
            let added: Vec<String> = words(&n.text)
                .difference(&words(&s.text))
                .cloned()
                .collect();
            if added.iter().any(|w| old_words.contains(w)) {
                out.push(finding(Some(n.line), format!("`{path}` imports a name at line {} that the file already uses: it would replace what the existing tests call", n.line)));
            }
            continue;
        }
        let first = code_lines(s)
            .first()
            .copied()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>();
        out.push(finding(
            None,
            format!("`{path}` changed or removed an existing statement (`{first}` at BASE_REF line {}): new tests may be added beside the old ones, but no existing test, fixture, decorator or parametrisation may change", s.line),
        ));
    }
    for s in unmatched {
        // An import of a module this change adds runs that module, which
        // can rewrite what the existing tests call.
        if let Some(m) = imported_modules(lang, s)
            .into_iter()
            .find(|m| added_module(m))
        {
            out.push(finding(Some(s.line), format!("`{path}` line {}: imports `{m}`, a module this change adds: importing it runs it before the existing tests", s.line)));
            continue;
        }
        let first: String = code_lines(s)
            .iter()
            .find(|l| !l.starts_with('@') && !l.starts_with("#["))
            .copied()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect();
        match introduces(lang, s) {
            Some(names) if names.iter().map(|n| identifier(n)).any(|n| RUN_AROUND.contains(&n.as_ref()) || n.starts_with("pytest_")) => {
                out.push(finding(Some(s.line), format!(
                    "`{path}` line {}: `{first}` is run around every test of the file (a setup, teardown or hook), so it reaches the existing tests",
                    s.line
                )))
            }
            Some(names) if names.iter().all(|n| !n.is_empty() && !old_words.contains(identifier(n).as_ref())) => {}
            Some(names) => out.push(finding(Some(s.line), format!(
                "`{path}` line {}: `{first}` defines {} that the file already uses: it would replace what the existing tests call",
                s.line,
                names.iter().filter(|n| old_words.contains(identifier(n).as_ref()) || n.is_empty()).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ))),
            None => out.push(finding(Some(s.line), format!(
                "`{path}` line {}: `{first}` is not a new test, fixture, helper or import, and code like it (module-level code, an autouse fixture, a setup hook, `.only`, a mock) reaches the existing tests",
                s.line
            ))),
        }
    }
    out
}

/// The findings on a source file that held tests at BASE_REF (Rust's
/// `#[cfg(test)] mod tests`, [`crate::lang::Language::inline_tests`]):
/// those tests are protected as a test file's are, whatever `[protect]
/// tests` says, but judged as an append-only test file, since the file is
/// also the code a fix changes. Each item of test code must still be
/// there under its name with the same attributes; a module's body may
/// gain new tests and helpers under the append-only rules; any other item
/// must be unchanged.
pub fn inline_findings(
    path: &str,
    old: &str,
    new: &str,
    tests_rule: Option<u32>,
    added_module: &dyn Fn(&str) -> bool,
) -> Vec<Finding> {
    let olds = inline_items(path, old, false).unwrap_or_default();
    if olds.is_empty() {
        return Vec::new();
    }
    let finding = |line: usize, problem: String| {
        Finding {
        reason: Reason::ProtectedPath,
        path: path.to_owned(),
        line: u32::try_from(line).ok(),
        rule: tests_rule,
        check: None,
        problem,
        fix: format!("leave the tests `{path}` held at BASE_REF exactly as they were (add new tests under new names), and fix the code under test"),
    }
    };
    let line_of = |text: &str, at: usize| text[..at].matches('\n').count() + 1;
    let news = match inline_items(path, new, true) {
        Some(items) => items,
        None => {
            return vec![finding(1, format!("`{path}` held tests at BASE_REF ({}) and no longer parses, so loopd cannot tell that they are unchanged", olds[0].name))];
        }
    };
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    for o in &olds {
        let at = line_of(old, o.item.start);
        let Some(n) = news.iter().find(|n| n.name == o.name) else {
            out.push(finding(
                at,
                format!(
                    "`{path}` removed or unmarked `{}`, tests it held at BASE_REF (line {at})",
                    o.name
                ),
            ));
            continue;
        };
        match (&o.body, &n.body) {
            (Some(ob), Some(nb)) => {
                if flat(&old[o.item.start..ob.start]) != flat(&new[n.item.start..nb.start]) {
                    out.push(finding(line_of(new, n.item.start), format!("`{path}` changed the attributes or heading of `{}`, tests it held at BASE_REF", o.name)));
                    continue;
                }
                // Each body as a file of its own, on the lines it has in
                // its file (so that a finding's line is the file's).
                let body = |text: &str, b: &std::ops::Range<usize>| {
                    "\n".repeat(line_of(text, b.start) - 1) + &text[b.clone()]
                };
                let name = &o.name;
                out.extend(
                    findings(
                        path,
                        &body(old, ob),
                        &body(new, nb),
                        tests_rule,
                        added_module,
                    )
                    .into_iter()
                    .map(|mut f| {
                        f.problem =
                            format!("in `{name}`, tests it held at BASE_REF: {}", f.problem);
                        f
                    }),
                );
            }
            _ if flat(&old[o.item.clone()]) == flat(&new[n.item.clone()]) => {}
            _ => out.push(finding(
                line_of(new, n.item.start),
                format!(
                    "`{path}` changed `{}`, tests it held at BASE_REF (line {at})",
                    o.name
                ),
            )),
        }
    }
    out
}

/// The test code inside source file `path` ([`crate::lang::Language::inline_tests`]):
/// `None` when it does not parse (`clean`: without an error anywhere);
/// none when its language keeps tests in test files only.
fn inline_items(path: &str, text: &str, clean: bool) -> Option<Vec<crate::lang::InlineTests>> {
    let Some(lang) = Lang::of(path) else {
        return Some(Vec::new());
    };
    let Some(find) = lang.inline_tests else {
        return Some(Vec::new());
    };
    let tree = Tree::parse_as(path, lang, text).filter(|t| !clean || t.clean())?;
    Some(find(tree.root(), text))
}

/// The files of test modules a source file declares without a body
/// (`#[cfg(test)] mod unit;` reads `unit.rs` or `unit/mod.rs` beside it,
/// or what `#[path = "…"]` names): test files as much as a `tests.rs` is.
/// Repository-relative candidates; the caller keeps those that exist.
pub fn test_module_files(path: &str, text: &str) -> Vec<String> {
    let (parent, stem) = match path.rsplit_once('/') {
        Some((p, f)) => (p.to_owned(), f.trim_end_matches(".rs").to_owned()),
        None => (String::new(), path.trim_end_matches(".rs").to_owned()),
    };
    let join = |dir: &str, rel: &str| {
        if dir.is_empty() {
            rel.to_owned()
        } else {
            format!("{dir}/{rel}")
        }
    };
    // A module's children live beside `mod.rs`, `lib.rs` and `main.rs`, and
    // under a directory named like any other file.
    let dir = match stem.as_str() {
        "mod" | "lib" | "main" => parent.clone(),
        _ => join(&parent, &stem),
    };
    let mut out = Vec::new();
    for item in inline_items(path, text, false).unwrap_or_default() {
        let Some(name) = item.name.strip_prefix("mod ") else {
            continue;
        };
        if item.body.is_some() {
            continue;
        }
        let name = name
            .rsplit("::")
            .next()
            .unwrap_or(name)
            .trim_start_matches("r#");
        let head = &text[item.item.clone()];
        match head.split("path").nth(1).and_then(|r| r.split('"').nth(1)) {
            Some(p) if head.contains("#[path") => out.push(join(&parent, p)),
            _ => {
                out.push(join(&dir, &format!("{name}.rs")));
                out.push(join(&dir, &format!("{name}/mod.rs")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PY: &str = "from decimal import Decimal\n\nimport pytest\n\nfrom rechnung import net_total\n\n\n@pytest.fixture\ndef lines():\n    return [(1, Decimal(\"10\"))]\n\n\n@pytest.mark.parametrize(\"n\", [1, 2])\ndef test_net_total(lines, n):\n    assert net_total(lines * n) == Decimal(\"10\") * n\n";

    fn problems(path: &str, old: &str, new: &str) -> Vec<String> {
        findings(path, old, new, Some(1), &|_| false)
            .into_iter()
            .map(|f| f.problem)
            .collect()
    }

    const LIB_RS: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 3), 5);\n    }\n}\n";

    fn inline(old: &str, new: &str) -> Vec<String> {
        inline_findings("src/lib.rs", old, new, Some(1), &|_| false)
            .into_iter()
            .map(|f| format!("{}: {}", f.line.unwrap_or(0), f.problem))
            .collect()
    }

    #[test]
    fn rust_tests_in_a_source_file_are_protected_and_may_be_appended_to() {
        // The fix and a new test beside the old ones: nothing to say.
        let honest = LIB_RS.replace("a - b", "a + b").replace(
            "        assert_eq!(add(2, 3), 5);\n    }\n",
            "        assert_eq!(add(2, 3), 5);\n    }\n\n    #[test]\n    fn adds_zero() {\n        assert_eq!(add(2, 0), 2);\n    }\n",
        );
        assert_eq!(inline(LIB_RS, &honest), Vec::<String>::new());
        // A file without tests at BASE_REF says nothing either.
        assert!(inline("pub fn f() {}\n", "pub fn f() { }\n").is_empty());
        // Every way of weakening the old test is a finding.
        for (what, new) in [
            ("a changed assertion", LIB_RS.replace("5);", "-1);")),
            ("the module unmarked", LIB_RS.replace("#[cfg(test)]\n", "")),
            ("the module cfg'd away", LIB_RS.replace("#[cfg(test)]", "#[cfg(all(test, any()))]")),
            ("the module renamed", LIB_RS.replace("mod tests", "mod checks")),
            ("the module gone", LIB_RS[..LIB_RS.find("#[cfg(test)]").expect("a tests module")].to_owned()),
            ("the test ignored", LIB_RS.replace("    #[test]\n", "    #[test]\n    #[ignore]\n")),
            ("a shadowing helper", LIB_RS.replace("    use super::*;\n", "    use super::*;\n\n    fn add(a: i32, b: i32) -> i32 {\n        a + b\n    }\n")),
            ("no longer parses", LIB_RS.replace("mod tests {", "mod tests {{")),
        ] {
            assert!(!inline(LIB_RS, &new).is_empty(), "{what} passed:\n{new}");
        }
        // A finding names the line of the file, not of the module's body.
        let changed = inline(LIB_RS, &LIB_RS.replace("5);", "-1);"));
        assert!(changed[0].contains("BASE_REF line 9"), "{changed:?}");
        // A `#[test]` at the top of a file, and a module nested in one
        // that is not test code, are tests too.
        let top = "#[test]\nfn adds() {\n    assert_eq!(1 + 1, 2);\n}\n";
        assert!(!inline(top, &top.replace("2);", "3);")).is_empty());
        let nested = format!("mod parse {{\n{LIB_RS}}}\n");
        let hit = inline(&nested, &nested.replace("5);", "-1);"));
        assert!(!hit.is_empty());
        assert!(inline(&nested, &nested.replace("a - b", "a + b")).is_empty());
        // `cfg(not(test))` is code, not tests.
        let not_test = "#[cfg(not(test))]\nfn real() -> i32 {\n    1\n}\n";
        assert!(inline(not_test, &not_test.replace('1', "2")).is_empty());
    }

    #[test]
    fn a_test_module_in_a_file_of_its_own_is_a_test_file() {
        let lib = "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n#[cfg(test)]\nmod unit;\n\n#[cfg(test)]\n#[path = \"checks/more.rs\"]\nmod more;\n\nmod parse;\n";
        assert_eq!(
            test_module_files("src/lib.rs", lib),
            ["src/unit.rs", "src/unit/mod.rs", "src/checks/more.rs"]
        );
        assert_eq!(
            test_module_files("src/calc.rs", "#[cfg(test)]\nmod tests;\n"),
            ["src/calc/tests.rs", "src/calc/tests/mod.rs"]
        );
        assert!(test_module_files("src/lib.rs", "mod parse;\n").is_empty());
    }

    #[test]
    fn python_new_tests_pass_and_every_edit_of_an_old_one_does_not() {
        let honest = format!("{}\n\n@pytest.mark.parametrize(\"q\", [3])\ndef test_net_total_many(lines, q):\n    assert net_total(lines * q) == Decimal(\"30\")\n\n\n@pytest.fixture\ndef more_lines():\n    return [(2, Decimal(\"5\"))]\n\n\ndef test_more(more_lines):\n    assert net_total(more_lines) == Decimal(\"10\")\n", PY.trim_end());
        let honest = honest.replace(
            "from rechnung import net_total",
            "from rechnung import gross_total, net_total",
        );
        assert_eq!(
            problems("tests/test_r.py", PY, &honest),
            Vec::<String>::new()
        );
        for (cheat, says) in [
            (PY.replace("[1, 2]", "[1]"), "changed or removed an existing statement"),
            (PY.replace("== Decimal(\"10\") * n", "== net_total(lines * n)"), "changed or removed"),
            (PY.replace("@pytest.mark.parametrize", "@pytest.mark.skip\n@pytest.mark.parametrize"), "changed or removed"),
            (format!("{PY}\n\n@pytest.fixture(autouse=True)\ndef _quiet(monkeypatch):\n    monkeypatch.setattr('rechnung.net_total', lambda l: 0)\n"), "not a new test"),
            (format!("{PY}\n\ndef lines():\n    return []\n"), "already uses"),
            (format!("{PY}\n\nnet_total = lambda l: 0\n"), "not a new test"),
            (format!("{PY}\n\nfrom fake import net_total\n"), "already uses"),
            (format!("{PY}\n\nif True:\n    pass\n"), "not a new test"),
            (format!("{PY}\n\ndef setup_module(module):\n    module.net_total = lambda l: 0\n"), "run around every test"),
            (PY.replace("from rechnung import net_total", "from rechnung import Decimal, net_total"), "already uses"),
        ] {
            let p = problems("tests/test_r.py", PY, &cheat);
            assert!(p.iter().any(|p| p.contains(says)), "{cheat}\n{p:?}");
        }
    }

    #[test]
    fn js_go_and_rust_new_tests_pass_and_edits_do_not() {
        let js = "import { total } from '../src/total.js';\n\ntest('sums', () => {\n  expect(total([1, 2])).toBe(3);\n});\n";
        let honest = format!("{js}\ntest('empty', () => {{\n  expect(total([])).toBe(0);\n}});\n");
        assert!(problems("src/total.test.js", js, &honest).is_empty());
        for cheat in [
            js.replace("toBe(3)", "toBeDefined()"),
            format!("{js}\nbeforeEach(() => {{ jest.resetModules(); }});\n"),
            js.replace("test('sums'", "test.skip('sums'"),
            format!("{js}\ntest.only('new', () => {{}});\n"),
            format!("{js}\njest.mock('../src/total.js');\n"),
            format!("{js}\nconst total = () => 3;\n"),
        ] {
            assert!(
                !problems("src/total.test.js", js, &cheat).is_empty(),
                "{cheat}"
            );
        }
        let go = "package total\n\nimport \"testing\"\n\nfunc TestSum(t *testing.T) {\n\tif Sum(1, 2) != 3 {\n\t\tt.Fatal(\"sum\")\n\t}\n}\n";
        let honest = format!("{go}\nfunc TestSumZero(t *testing.T) {{\n\tif Sum(0, 0) != 0 {{\n\t\tt.Fatal(\"zero\")\n\t}}\n}}\n");
        assert!(problems("total_test.go", go, &honest).is_empty());
        assert!(!problems("total_test.go", go, &go.replace("!= 3", "!= Sum(1, 2)")).is_empty());
        assert!(!problems(
            "total_test.go",
            go,
            &format!("{go}\nfunc init() {{ testing.Init() }}\n")
        )
        .is_empty());
        assert!(!problems(
            "total_test.go",
            go,
            &format!("{go}\nfunc (s *T) Sum() {{}}\n")
        )
        .is_empty());
        let rs = "use lib::total;\n\n#[test]\nfn sums() {\n    assert_eq!(total(&[1, 2]), 3);\n}\n";
        let honest = format!("{rs}\n#[test]\nfn empty() {{\n    assert_eq!(total(&[]), 0);\n}}\n");
        assert!(problems("tests/total.rs", rs, &honest).is_empty());
        assert!(!problems(
            "tests/total.rs",
            rs,
            &rs.replace("#[test]", "#[test]\n#[ignore]")
        )
        .is_empty());
        assert!(!problems(
            "tests/total.rs",
            rs,
            &format!("{rs}\n#[ctor::ctor]\nfn setup() {{}}\n")
        )
        .is_empty());
    }

    /// What a blind attack on the tree comparison found: look-alike names
    /// that Python folds into the old ones (NFKC), and tabs that Python
    /// and the parser count differently.
    #[test]
    fn look_alike_names_and_mixed_indentation_are_refused() {
        let lookalike =
            format!("{PY}\n\ndef \u{ff54}est_net_total():  # noqa: F811\n    assert True\n");
        let p = problems("tests/test_r.py", PY, &lookalike);
        assert!(p.iter().any(|p| p.contains("already uses")), "{p:?}");
        let hidden = PY.replace(
            "@pytest.mark.parametrize",
            "def _unused_0():\n       \tpass\n        @pytest.mark.parametrize",
        );
        let p = problems("tests/test_r.py", PY, &hidden);
        assert!(p.iter().any(|p| p.contains("tabs and spaces")), "{p:?}");
        let conftest_hook = "def \u{ff50}ytest_collection_modifyitems(items):\n    items.clear()\n";
        assert!(!problems("tests/test_r.py", PY, &format!("{PY}\n\n{conftest_hook}")).is_empty());
    }

    /// Compared on the syntax tree: the same tokens in the same structure
    /// are the same statement, however they are laid out; a token or a
    /// nesting that changed is a changed statement.
    #[test]
    fn old_statements_are_compared_on_the_syntax_tree() {
        let reformatted = PY.replace(
            "    assert net_total(lines * n) == Decimal(\"10\") * n\n",
            "    assert net_total(lines*n) == Decimal(\"10\")*n  # why\n",
        );
        assert_eq!(
            problems("tests/test_r.py", PY, &reformatted),
            Vec::<String>::new()
        );
        // Python's indentation is structure: a line moved out of a block is
        // a changed statement, though every token is still there.
        let old =
            "def test_a():\n    if flag():\n        assert f() == 1\n        assert g() == 2\n";
        let moved = "def test_a():\n    if flag():\n        assert f() == 1\n    assert g() == 2\n";
        assert!(!problems("tests/test_a.py", old, moved).is_empty());
        // A file that no longer parses is compared line for line, and a
        // changed line is still a change.
        let broken = PY.replace("[1, 2])", "[1, 2]))");
        assert!(!problems("tests/test_r.py", PY, &broken).is_empty());
        let js = "test('sums', () => {\n  expect(total([1, 2])).toBe(3);\n});\n";
        let laid_out = "test('sums', () => {\n  expect(\n    total([1, 2])\n  ).toBe(3);\n});\n";
        assert!(problems("src/total.test.ts", js, laid_out).is_empty());
        assert!(!problems("src/total.test.ts", js, &js.replace("[1, 2]", "[1, 2, 0]")).is_empty());
        // Rust attributes go with the item they mark.
        let rs = "#[test]\n#[should_panic]\nfn sums() {\n    total(&[]);\n}\n";
        assert!(!problems("tests/total.rs", rs, &rs.replace("#[should_panic]\n", "")).is_empty());
        assert!(problems(
            "tests/total.rs",
            rs,
            &format!("{rs}\n#[test]\nfn more() {{\n    total(&[1]);\n}}\n")
        )
        .is_empty());
    }
}
