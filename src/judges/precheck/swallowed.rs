//! Swallowed errors, read from the syntax tree: a handler is a handler
//! however it is laid out (`except (Exception) as e:` over three lines, a
//! `catch` whose block holds only a comment, `Err(_e) => ()`), and a
//! handler's body is its statements, not the lines indented under it.
//!
//! What is a swallow: a broad Python handler (`except:`, `except
//! Exception`, `except BaseException`, a tuple holding one, or `with
//! contextlib.suppress(Exception)`) whose body does nothing with the error
//! (`pass`, `...`, `continue`, a bare or constant `return`); a bare
//! `except:` whatever it does; an empty JS `catch` or `.catch(() => {})`;
//! Go's `_ = err` and an empty `if err != nil {}`; Rust's `let _ = call();`,
//! `call().ok();` without a comment on the line above saying why, and an
//! `Err(_) => {}` arm. A handler counts as added when its first line, or its
//! body's first statement, is an added line.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::{does_nothing, finding, quote, Parsed};
use crate::judges::finding::Finding;
use crate::judges::tree::{self, Tree};
use crate::lang::Swallow;
use crate::workspace::AddedLine;

const FIX_PY: &str = "catch only the exception you expect and handle it, or let it propagate; never return a default for every error";
const FIX: &str = "handle the error or propagate it; never drop it silently";

/// A type expression that catches every error.
fn broad(t: &Tree<'_>, n: Node<'_>) -> bool {
    broad_at(t, n, 0)
}

fn broad_at(t: &Tree<'_>, n: Node<'_>, depth: usize) -> bool {
    if depth > tree::MAX_DEPTH {
        // Nesting nobody writes by hand: read as catching everything.
        return true;
    }
    let broad = |c: Node<'_>| broad_at(t, c, depth + 1);
    match n.kind() {
        "as_pattern" => n.named_child(0).is_some_and(broad),
        "parenthesized_expression" | "tuple" => tree::code_children(n).into_iter().any(broad),
        "identifier" | "attribute" => {
            let name = t.text_of(n).rsplit('.').next().unwrap_or("");
            matches!(name, "Exception" | "BaseException")
        }
        _ => false,
    }
}

fn body_does_nothing(t: &Tree<'_>, block: Node<'_>) -> Option<String> {
    let stmts: Vec<&str> = tree::code_children(block)
        .into_iter()
        .map(|s| t.text_of(s))
        .collect();
    does_nothing(&stmts).then(|| stmts.first().map_or("", |s| s.trim()).to_owned())
}

/// A JS block whose statements only assign constants (`x = null;`,
/// `result = [];`): a default standing in for every error.
fn assigns_a_default(block: Node<'_>) -> bool {
    let stmts = tree::code_children(block);
    !stmts.is_empty()
        && stmts.into_iter().all(|s| {
            let Some(e) = tree::code_children(s).into_iter().next() else {
                return false;
            };
            let constant = |v: Node<'_>| {
                matches!(
                    v.kind(),
                    "null" | "undefined" | "true" | "false" | "number" | "string"
                ) || matches!(v.kind(), "array" | "object") && tree::code_children(v).is_empty()
            };
            s.kind() == "expression_statement"
                && e.kind() == "assignment_expression"
                && e.child_by_field_name("right").is_some_and(constant)
        })
}

/// A block with no statements (comments do not count).
fn empty(n: Node<'_>) -> bool {
    matches!(n.kind(), "statement_block" | "block") && tree::code_children(n).is_empty()
        || n.kind() == "unit_expression"
        || n.kind() == "null"
        || n.kind() == "undefined"
}

/// The first line of a node's source, for a finding.
fn first_line<'a>(t: &Tree<'a>, n: Node<'_>) -> &'a str {
    t.text_of(n).lines().next().unwrap_or("")
}

/// One file's swallowed errors: (line, problem).
fn in_file(t: &Tree<'_>, added: &BTreeSet<u32>) -> Vec<(u32, String)> {
    let lines: Vec<&str> = t.text.lines().collect();
    let comment_above = |n: Node<'_>| {
        let l = tree::line(n) as usize;
        l >= 2
            && lines
                .get(l - 2)
                .is_some_and(|p| t.lang.comment(p).is_some())
    };
    let is_added = |n: Node<'_>| added.contains(&tree::line(n));
    let mut out = Vec::new();
    for n in t.nodes() {
        let problem = match t.lang.swallow(n.kind()) {
            None => None,
            Some(Swallow::BroadExcept) => (|| {
                let block = tree::code_children(n)
                    .into_iter()
                    .rfind(|c| c.kind() == "block")?;
                let first = tree::code_children(block).into_iter().next();
                if !is_added(n) && !first.is_some_and(is_added) {
                    return None;
                }
                let types: Vec<Node<'_>> = tree::code_children(n)
                    .into_iter()
                    .filter(|c| c.kind() != "block")
                    .collect();
                let bare = types.is_empty();
                let wide = bare || types.iter().any(|c| broad(t, *c));
                let head = first_line(t, n);
                match body_does_nothing(t, block) {
                    Some(body) if wide => Some(format!(
                        "an error is swallowed: `{}` followed by `{body}`",
                        quote(head)
                    )),
                    _ if bare => Some(format!(
                        "a bare `except:` catches every error: `{}`",
                        quote(head)
                    )),
                    _ => None,
                }
            })(),
            // `return` in `finally` discards the error in flight (and a
            // `break`/`continue` there does the same).
            Some(Swallow::ExitInFinally) => (|| {
                let block = tree::code_children(n)
                    .into_iter()
                    .rfind(|c| matches!(c.kind(), "block" | "statement_block"))?;
                let exits = tree::code_children(block).into_iter().find(|c| {
                    matches!(
                        c.kind(),
                        "return_statement" | "break_statement" | "continue_statement"
                    ) && is_added(*c)
                })?;
                Some(format!(
                    "an error is swallowed: `{}` in `finally` discards any error in flight",
                    quote(first_line(t, exits))
                ))
            })(),
            Some(Swallow::SuppressAll) if is_added(n) => (|| {
                // `with contextlib.suppress(Exception):`
                let item = tree::descendants(n)
                    .into_iter()
                    .find(|c| c.kind() == "with_item")?;
                let call = item.named_child(0)?;
                let function = call.child_by_field_name("function")?;
                let name = t.text_of(function).rsplit('.').next()?;
                let args = call.child_by_field_name("arguments")?;
                (name == "suppress" && tree::code_children(args).into_iter().any(|a| broad(t, a)))
                    .then(|| format!("every error is suppressed: `{}`", quote(first_line(t, n))))
            })(),
            Some(Swallow::EmptyCatch) => (|| {
                let body = n.child_by_field_name("body")?;
                if is_added(n) && !empty(body) && assigns_a_default(body) {
                    return Some(format!(
                        "an error is swallowed: `{}` only assigns a default",
                        quote(first_line(t, n))
                    ));
                }
                (is_added(n) && empty(body)).then(|| {
                    format!(
                        "an error is swallowed by an empty catch: `{}`",
                        quote(first_line(t, n))
                    )
                })
            })(),
            Some(Swallow::EmptyPromiseCatch) if is_added(n) => (|| {
                // `p.catch(() => {})`, `p.catch(() => null)`.
                let function = n.child_by_field_name("function")?;
                let property = function.child_by_field_name("property")?;
                if t.text_of(property) != "catch" {
                    return None;
                }
                let args = tree::code_children(n.child_by_field_name("arguments")?);
                let [handler] = args.as_slice() else {
                    return None;
                };
                let body = handler.child_by_field_name("body")?;
                (matches!(handler.kind(), "arrow_function" | "function_expression") && empty(body))
                    .then(|| {
                        format!(
                            "an error is swallowed by an empty catch: `{}`",
                            quote(t.text_of(n))
                        )
                    })
            })(),
            Some(Swallow::BlankAssign) if is_added(n) => (|| {
                let left = n.child_by_field_name("left")?;
                let right = n.child_by_field_name("right")?;
                let blank = tree::code_children(left)
                    .iter()
                    .all(|l| t.text_of(*l) == "_");
                let err = tree::code_children(right)
                    .iter()
                    .any(|r| r.kind() == "identifier" && t.text_of(*r).starts_with("err"));
                // `_ = os.Remove(p)`: a call's result dropped without a word.
                let call = tree::code_children(right)
                    .iter()
                    .all(|r| r.kind() == "call_expression")
                    && !comment_above(n);
                (blank && (err || call))
                    .then(|| format!("an error is dropped: `{}`", quote(t.text_of(n))))
            })(),
            Some(Swallow::EmptyErrCheck) if is_added(n) => (|| {
                let cond = n.child_by_field_name("condition")?;
                let c: String = t.text_of(cond).split_whitespace().collect();
                let consequence = n.child_by_field_name("consequence")?;
                let checks_err =
                    c.starts_with("err") && c.ends_with("!=nil") || c.starts_with("nil!=err");
                (checks_err && empty(consequence))
                    .then(|| format!("an error is dropped: `{}`", quote(first_line(t, n))))
            })(),
            Some(Swallow::DroppedAssign) if is_added(n) && !comment_above(n) => (|| {
                // `_ = std::fs::remove_file(p);`
                let left = n.child_by_field_name("left")?;
                let right = n.child_by_field_name("right")?;
                (t.text_of(left) == "_" && right.kind() == "call_expression").then(|| {
                    format!(
                        "a `Result` is dropped without a word: `{}`",
                        quote(t.text_of(n))
                    )
                })
            })(),
            Some(Swallow::DroppedLet) if is_added(n) && !comment_above(n) => (|| {
                let pattern = n.child_by_field_name("pattern")?;
                let value = n.child_by_field_name("value")?;
                (t.text_of(pattern) == "_" && value.kind() == "call_expression").then(|| {
                    format!(
                        "a `Result` is dropped without a word: `{}`",
                        quote(t.text_of(n))
                    )
                })
            })(),
            Some(Swallow::DroppedOk) if is_added(n) && !comment_above(n) => (|| {
                // `call().ok();`
                let call = n.named_child(0)?;
                let function = call.child_by_field_name("function")?;
                let field = function.child_by_field_name("field")?;
                let args = call.child_by_field_name("arguments")?;
                (call.kind() == "call_expression"
                    && t.text_of(field) == "ok"
                    && tree::code_children(args).is_empty())
                .then(|| {
                    format!(
                        "a `Result` is dropped without a word: `{}`",
                        quote(t.text_of(n))
                    )
                })
            })(),
            Some(Swallow::IgnoredErrArm) if is_added(n) => (|| {
                let pattern: String = t
                    .text_of(n.child_by_field_name("pattern")?)
                    .split_whitespace()
                    .collect();
                let value = n.child_by_field_name("value")?;
                let ignores = pattern
                    .strip_prefix("Err(")
                    .and_then(|p| p.strip_suffix(')'))
                    .is_some_and(|p| p.starts_with('_') || p == "..");
                (ignores && empty(value)).then(|| {
                    format!(
                        "a `Result` is dropped without a word: `{}`",
                        quote(t.text_of(n))
                    )
                })
            })(),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            out.push((tree::line(n), problem));
        }
    }
    out
}

pub(super) fn swallowed_errors(added: &[AddedLine], files: &[Parsed<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in files {
        let (lang, Some(t)) = (f.lang, f.new.as_ref()) else {
            continue;
        };
        let lines: BTreeSet<u32> = added
            .iter()
            .filter(|a| a.path == f.path)
            .map(|a| a.line)
            .collect();
        if lines.is_empty() {
            continue;
        }
        // Where a broad handler is the language's way to swallow, the fix
        // says to narrow it.
        let broad_handlers = lang
            .swallows
            .iter()
            .any(|(_, s)| *s == Swallow::BroadExcept);
        let fix = if broad_handlers { FIX_PY } else { FIX };
        for (line, problem) in in_file(t, &lines) {
            out.push(finding(f.path, line, problem, fix));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(path: &str, text: &str) -> Vec<u32> {
        let t = Tree::parse(path, text).expect("parses");
        let all: BTreeSet<u32> =
            (1..=u32::try_from(text.lines().count()).expect("small")).collect();
        in_file(&t, &all).into_iter().map(|(l, _)| l).collect()
    }

    /// Layouts a line reader did not follow.
    #[test]
    fn handlers_however_they_are_laid_out() {
        assert_eq!(
            found("a.py", "try:\n    f()\nexcept (\n    ValueError,\n    Exception,\n) as e:\n    # ignore\n    pass\n"),
            [3]
        );
        assert_eq!(found("a.py", "try:\n    f()\nexcept Exception: ...\n"), [3]);
        let deep = format!(
            "try:\n    f()\nexcept {}KeyError{}:\n    pass\n",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        assert_eq!(
            found("a.py", &deep),
            [3],
            "past the depth, a handler is broad"
        );
        assert_eq!(
            found(
                "a.py",
                "import contextlib\nwith contextlib.suppress(Exception):\n    f()\n"
            ),
            [2]
        );
        assert!(found(
            "a.py",
            "with suppress(FileNotFoundError):\n    os.remove(p)\n"
        )
        .is_empty());
        assert!(found(
            "a.py",
            "try:\n    f()\nexcept Exception:\n    log.exception('f')\n    raise\n"
        )
        .is_empty());
        assert!(
            found("a.py", "s = '''\nexcept:\n    pass\n'''\n").is_empty(),
            "text is not a handler"
        );
        assert_eq!(
            found("a.js", "try { f() } catch (e) {\n  // fine\n}\n"),
            [1]
        );
        assert_eq!(found("a.js", "p.catch(function () {});\n"), [1]);
        assert!(found("a.js", "p.catch((e) => report(e));\n").is_empty());
        assert_eq!(found("a.rs", "fn f() {\n    match g() {\n        Ok(v) => v,\n        Err(_e) => (),\n    }\n}\n"), [4]);
        assert_eq!(
            found("a.go", "package a\nfunc F() {\n\tif err != nil { }\n}\n"),
            [3]
        );
        // What a blind attack found next.
        assert_eq!(found("a.go", "package a\nfunc F() {\n\tif nil != err {\n\t}\n\t_ = os.Remove(p)\n\t// Gone already is fine.\n\t_ = os.Remove(q)\n}\n"), [3, 5]);
        assert_eq!(found("a.rs", "fn f() {\n    _ = std::fs::remove_file(p);\n    match g() {\n        Err(..) => {}\n        Ok(v) => v,\n    }\n}\n"), [2, 4]);
        assert_eq!(
            found("a.py", "try:\n    f()\nexcept Exception:\n    None\n"),
            [3]
        );
    }

    /// Two routes the judging issue found open: a broad handler that only
    /// assigns a default, and an exit from `finally`.
    #[test]
    fn a_default_for_every_error_and_an_exit_from_finally_are_swallows() {
        assert_eq!(
            found(
                "a.py",
                "try:\n    v = f()\nexcept Exception:\n    v = None\n"
            ),
            [3]
        );
        assert_eq!(
            found(
                "a.py",
                "try:\n    v = f()\nexcept Exception:\n    v: int = 0\n    ok = False\n"
            ),
            [3]
        );
        // A narrow handler may default; a broad one that also says so may.
        assert!(found(
            "a.py",
            "try:\n    v = int(s)\nexcept ValueError:\n    v = None\n"
        )
        .is_empty());
        assert!(found(
            "a.py",
            "try:\n    v = f()\nexcept Exception:\n    log.warning('no v')\n    v = None\n"
        )
        .is_empty());
        assert_eq!(
            found(
                "a.py",
                "def f():\n    try:\n        return g()\n    finally:\n        return 0\n"
            ),
            [4]
        );
        assert!(found(
            "a.py",
            "def f():\n    try:\n        return g()\n    finally:\n        close()\n"
        )
        .is_empty());
        assert_eq!(
            found(
                "a.js",
                "function f() {\n  try { return g(); } finally {\n    return 0;\n  }\n}\n"
            ),
            [2]
        );
        assert_eq!(
            found("a.js", "try { v = f(); } catch (e) {\n  v = null;\n}\n"),
            [1]
        );
        assert!(found(
            "a.js",
            "try { v = f(); } catch (e) {\n  v = fallback(e);\n}\n"
        )
        .is_empty());
    }
}
