//! Commented-out code: runs of added comment lines that parse as code.
//!
//! The comments come from the syntax tree, so a `#` inside a string or a
//! `//` in a URL is not one. Whether a run reads as code is asked of the
//! language's own grammar: the run's text, with the comment markers taken
//! off and the common indentation removed, is parsed (inside a function body
//! for Rust and Go); code parses and holds statements, prose does not. A run
//! that does not parse as a whole (a fragment: an `else` branch, half a
//! call) is read line by line, each line on its own.

use tree_sitter::Node;

use super::{finding, quote, Lang, Parsed};
use crate::judges::finding::Finding;
use crate::judges::tree::{self, Tree};
use crate::workspace::AddedLine;

/// Characters prose rarely has and code nearly always does.
fn has_code_chars(text: &str) -> bool {
    text.contains([
        '(', ')', '[', ']', '{', '}', '=', ';', ':', '*', '+', '<', '>',
    ])
}

/// Whether `code` parses cleanly as `lang` (where its statements parse,
/// [`crate::lang::Language::statement_context`]) and holds a node only
/// code makes ([`crate::lang::Language::code_kinds`]).
fn parses_as_code(path: &str, lang: Lang, code: &str) -> bool {
    if !has_code_chars(code) {
        return false;
    }
    let (before, after) = lang.statement_context;
    let wrapped = format!("{before}{code}{after}");
    let Some(t) = Tree::parse_as(path, lang, &wrapped) else {
        return false;
    };
    // `Rounding: half-up` parses as a bare annotation, which prose of the
    // form "Key: value" is; an annotation without a value is not evidence.
    let annotation =
        |n: Node<'_>| n.kind() == "assignment" && n.child_by_field_name("right").is_none();
    t.clean()
        && t.nodes()
            .into_iter()
            .any(|n: Node<'_>| lang.code_kinds.contains(&n.kind()) && !annotation(n))
}

/// The lines of a comment run without their markers and common indentation.
fn uncommented(lang: Lang, texts: &[&str]) -> Vec<String> {
    let bodies: Vec<&str> = texts
        .iter()
        .map(|t| lang.comment(t).unwrap_or(""))
        .collect();
    let indent = bodies
        .iter()
        .filter(|b| !b.trim().is_empty())
        .map(|b| b.len() - b.trim_start().len())
        .min()
        .unwrap_or(0);
    bodies
        .iter()
        .map(|b| b.get(indent..).unwrap_or("").trim_end().to_owned())
        .collect()
}

/// How many lines of a run read as code.
fn code_lines(path: &str, lang: Lang, texts: &[&str]) -> usize {
    let lines = uncommented(lang, texts);
    let nonblank = lines.iter().filter(|l| !l.trim().is_empty()).count();
    if parses_as_code(path, lang, &lines.join("\n")) {
        return nonblank;
    }
    lines
        .iter()
        .filter(|l| parses_as_code(path, lang, l.trim()))
        .count()
}

/// The added lines that are whole-line comments, per the file's tree: no
/// code before the comment on its line, and not a doc comment or pragma.
fn comment_lines(t: &Tree<'_>, added: &[&AddedLine]) -> Vec<u32> {
    let lang = t.lang;
    let lines: Vec<&str> = t.text.lines().collect();
    let mut out: Vec<u32> = t
        .nodes()
        .into_iter()
        .filter(|n| tree::is_comment(*n) && tree::line(*n) == tree::end_line(*n))
        .filter_map(|n| {
            let line = tree::line(n);
            let raw = lines.get(line as usize - 1)?;
            let before = raw.get(..n.start_position().column)?;
            (before.trim().is_empty() && lang.comment(raw).is_some()).then_some(line)
        })
        .filter(|l| added.iter().any(|a| a.line == *l))
        .collect();
    out.dedup();
    out
}

pub(super) fn commented_out_code(added: &[AddedLine], files: &[Parsed<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in files {
        let (lang, Some(t)) = (f.lang, f.new.as_ref()) else {
            continue;
        };
        let mine: Vec<&AddedLine> = added.iter().filter(|a| a.path == f.path).collect();
        if mine.is_empty() {
            continue;
        }
        let comments = comment_lines(t, &mine);
        // Runs of consecutive comment lines.
        let mut runs: Vec<Vec<u32>> = Vec::new();
        for l in comments {
            match runs.last_mut() {
                Some(run) if run.last().is_some_and(|p| p + 1 == l) => run.push(l),
                _ => runs.push(vec![l]),
            }
        }
        for run in runs.into_iter().filter(|r| r.len() >= 2) {
            let texts: Vec<&str> = run
                .iter()
                .filter_map(|l| mine.iter().find(|a| a.line == *l).map(|a| a.text.as_str()))
                .collect();
            let blank = texts
                .iter()
                .filter(|t| lang.comment(t).is_some_and(|c| c.trim().is_empty()))
                .count();
            let code = code_lines(f.path, lang, &texts);
            if code >= 2 && code * 2 >= texts.len() - blank {
                let first = run[0];
                let last = run[run.len() - 1];
                out.push(finding(
                    f.path,
                    first,
                    format!(
                        "{} lines of commented-out code were added (lines {first}-{last}), starting `{}`",
                        run.len(),
                        quote(texts[0])
                    ),
                    "delete the commented-out block; git keeps the old version",
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::ChangedText;

    fn code(path: &str, texts: &[&str]) -> usize {
        code_lines(path, Lang::of(path).expect("known"), texts)
    }

    #[test]
    fn code_parses_and_prose_does_not() {
        assert_eq!(code("a.py", &["# def f(x):", "#     return x + 1"]), 2);
        assert_eq!(code("a.py", &["# if ok:", "#     total += x"]), 2);
        assert_eq!(
            code(
                "a.py",
                &[
                    "# Totals are Decimal; never round",
                    "# before the sum is taken."
                ]
            ),
            0
        );
        assert_eq!(code("a.py", &["# import this", "# see: the docs"]), 0);
        assert_eq!(
            code("a.py", &["# Rounding: half-up", "# Currency: euro"]),
            0
        );
        assert_eq!(
            code("a.py", &["# Invariant: net >= 0", "# Raises: ValueError"]),
            0
        );
        assert_eq!(code("a.py", &["# x: int = 3", "# y = f(x)"]), 2);
        assert_eq!(code("a.js", &["// TODO: refactor", "// NOTE: slow"]), 0);
        assert_eq!(
            code("a.js", &["// const y = compute(x);", "// return y;"]),
            2
        );
        assert_eq!(
            code("a.ts", &["// const y: number = compute(x);", "// use(y);"]),
            2
        );
        assert_eq!(
            code("a.go", &["// if err != nil {", "// \treturn err", "// }"]),
            3
        );
        assert_eq!(
            code(
                "a.rs",
                &[
                    "// Returns the total (in cents) of the lines.",
                    "// Never rounds."
                ]
            ),
            0
        );
        // A fragment is read line by line.
        assert_eq!(
            code("a.py", &["# else:", "#     x = g(y)", "#     h(x)"]),
            2
        );
    }

    #[test]
    fn a_hash_in_a_string_is_not_a_comment() {
        let f = ChangedText {
            path: "a.py".into(),
            old: Some(String::new()),
            new: Some("s = '''\n# x = f(1)\n# y = g(2)\n'''\n".into()),
        };
        let added: Vec<AddedLine> = (1..=4)
            .map(|line| AddedLine {
                path: "a.py".into(),
                line,
                text: f
                    .new
                    .as_deref()
                    .expect("set")
                    .lines()
                    .nth(line as usize - 1)
                    .expect("line")
                    .into(),
            })
            .collect();
        assert!(commented_out_code(&added, &Parsed::all(&[f])).is_empty());
    }
}
