//! Syntax trees of changed files, from tree-sitter's grammars (each
//! language's, [`crate::lang::LANGUAGES`]): what the pre-critic reads calls,
//! handlers, comments and functions from, and what `append_only` compares
//! statements on. A line regex is fooled by a space, an alias or a string
//! that looks like code; a syntax tree is not.
//!
//! tree-sitter always returns a tree: where the text does not parse, the
//! tree holds `ERROR` nodes, and [`Tree::clean`] says so. The callers decide
//! what a tree with errors is worth (the pre-critic reads what parsed; the
//! append-only rule falls back to the lexical splitter).

use std::time::{Duration, Instant};

use tree_sitter::{Node, ParseOptions, Parser};

/// The language handle the checks carry: the languages themselves, and
/// all loopd knows of each, live in [`crate::lang`].
pub use crate::lang::Lang;

/// A parsed file: its text and its tree.
pub struct Tree<'a> {
    pub text: &'a str,
    pub lang: Lang,
    tree: tree_sitter::Tree,
}

impl std::fmt::Debug for Tree<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree")
            .field("lang", &self.lang)
            .field("bytes", &self.text.len())
            .finish()
    }
}

/// Files larger than this are not parsed (the pre-critic stays silent on
/// them, `append_only` splits them lexically): a generated bundle is not
/// hand-written code, and a tree's nodes cost memory per byte.
pub const MAX_BYTES: usize = 1 << 20;

/// How long one file may take to parse.
pub const PARSE_BUDGET: Duration = Duration::from_secs(2);

/// How deep the checks follow an expression or a tree (`((((print))))`):
/// the walks are recursive, and text an agent wrote must not be able to
/// exhaust loopd's stack. Deeper than this is not followed.
pub const MAX_DEPTH: usize = 64;

impl<'a> Tree<'a> {
    /// Parse `text` as the language of `path`. `None` for a language loopd
    /// has no grammar for, or a file over [`MAX_BYTES`].
    pub fn parse(path: &str, text: &'a str) -> Option<Tree<'a>> {
        let lang = Lang::of(path)?;
        Tree::parse_as(path, lang, text)
    }

    /// Parse `text` as `lang` (the path picks TypeScript over JavaScript).
    pub fn parse_as(path: &str, lang: Lang, text: &'a str) -> Option<Tree<'a>> {
        Tree::parse_within(path, lang, text, PARSE_BUDGET)
    }

    /// Parse within `budget`; `None` when it ran out.
    fn parse_within(path: &str, lang: Lang, text: &'a str, budget: Duration) -> Option<Tree<'a>> {
        if text.len() > MAX_BYTES {
            return None;
        }
        let mut parser = Parser::new();
        parser
            .set_language(&lang.grammar(path))
            .expect("the bundled grammars match tree-sitter's ABI");
        // A text built to make the parser work hard gets a budget, not the
        // job's time: past it the file is not read.
        let deadline = Instant::now() + budget;
        let mut over = |_: &tree_sitter::ParseState| Instant::now() > deadline;
        let bytes = text.as_bytes();
        let tree = parser.parse_with_options(
            &mut |i, _| bytes.get(i..).unwrap_or(&[]),
            None,
            Some(ParseOptions::new().progress_callback(&mut over)),
        )?;
        Some(Tree { text, lang, tree })
    }

    pub fn root(&self) -> Node<'_> {
        self.tree.root_node()
    }

    /// No part of the text failed to parse.
    pub fn clean(&self) -> bool {
        !self.root().has_error()
    }

    /// The source text of a node.
    pub fn text_of(&self, node: Node<'_>) -> &'a str {
        self.text.get(node.byte_range()).unwrap_or("")
    }

    /// Every node, depth first, in source order.
    pub fn nodes(&self) -> Vec<Node<'_>> {
        descendants(self.root())
    }
}

/// 1-based first line of a node.
pub fn line(node: Node<'_>) -> u32 {
    u32::try_from(node.start_position().row + 1).unwrap_or(u32::MAX)
}

/// 1-based last line of a node.
pub fn end_line(node: Node<'_>) -> u32 {
    u32::try_from(node.end_position().row + 1).unwrap_or(u32::MAX)
}

/// A node and everything under it, depth first, in source order.
pub fn descendants(node: Node<'_>) -> Vec<Node<'_>> {
    let mut out = Vec::new();
    let mut cursor = node.walk();
    loop {
        out.push(cursor.node());
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.node() == node {
                return out;
            }
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return out;
            }
        }
    }
}

/// The named children of a node that are not comments: a block's
/// statements, a call's arguments.
pub fn code_children(node: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|c| !is_comment(*c))
        .collect()
}

/// A comment node, in any of the grammars.
pub fn is_comment(node: Node<'_>) -> bool {
    matches!(
        node.kind(),
        "comment" | "line_comment" | "block_comment" | "html_comment"
    )
}

/// The ancestors of a node, nearest first.
pub fn ancestors(node: Node<'_>) -> impl Iterator<Item = Node<'_>> {
    std::iter::successors(node.parent(), |n| n.parent())
}

/// A node's structure and leaves, comments left out: what "the same
/// statement" means on the syntax tree. Whitespace and comments may change;
/// a token, or where a statement sits (Python's indentation), may not.
pub fn shape(tree: &Tree<'_>, node: Node<'_>) -> String {
    // Iterative, with a closing marker on the stack: a deep tree cannot
    // exhaust the call stack.
    enum Step<'t> {
        Open(Node<'t>),
        Close,
    }
    let mut out = String::new();
    let mut stack = vec![Step::Open(node)];
    while let Some(step) = stack.pop() {
        let node = match step {
            Step::Close => {
                out.push_str(") ");
                continue;
            }
            Step::Open(n) => n,
        };
        if is_comment(node) {
            continue;
        }
        if node.child_count() == 0 {
            out.push_str(tree.text_of(node));
            out.push(' ');
            continue;
        }
        out.push('(');
        out.push_str(node.kind());
        out.push(' ');
        stack.push(Step::Close);
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
        stack.extend(children.into_iter().rev().map(Step::Open));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_language_parses_and_errors_are_seen() {
        for (path, good, bad) in [
            ("a.py", "def f(x):\n    return x\n", "def f(:\n"),
            ("a.js", "const f = (x) => x;\n", "const = ;\n"),
            (
                "a.ts",
                "const f = (x: number): number => x;\n",
                "const f = (x: ) =>;\n",
            ),
            (
                "a.tsx",
                "const e = <div>{x}</div>;\n",
                "const e = <div>{x</div>;\n",
            ),
            (
                "a.go",
                "package a\nfunc F() int { return 1 }\n",
                "package a\nfunc F( {\n",
            ),
            ("a.rs", "fn f() -> u8 { 1 }\n", "fn f( -> {\n"),
        ] {
            assert!(Tree::parse(path, good).expect(path).clean(), "{path}");
            assert!(!Tree::parse(path, bad).expect(path).clean(), "{path}");
        }
        assert!(Tree::parse("a.txt", "x").is_none());
    }

    #[test]
    fn deep_nesting_and_a_huge_file_cannot_hurt_the_reader() {
        let deep = format!("x = {}1{}\n", "(".repeat(100_000), ")".repeat(100_000));
        let t = Tree::parse("deep.py", &deep).expect("parses");
        assert!(shape(&t, t.root()).len() > 100_000);
        assert!(Tree::parse("big.py", &"x = 1\n".repeat(MAX_BYTES / 6 + 1)).is_none());
        let long = "x = f(1)\n".repeat(20_000);
        assert!(
            Tree::parse_within("long.py", Lang::Python, &long, Duration::ZERO).is_none(),
            "a parse over its budget is given up"
        );
        assert!(Tree::parse_within("long.py", Lang::Python, &long, PARSE_BUDGET).is_some());
    }

    #[test]
    fn shape_ignores_comments_and_spaces_but_not_structure() {
        let a = Tree::parse("t.py", "if a:\n    x()\ny()\n").expect("parses");
        let b = Tree::parse("t.py", "if a:  # why\n    x( )\ny()\n").expect("parses");
        let c = Tree::parse("t.py", "if a:\n    x()\n    y()\n").expect("parses");
        let s = |t: &Tree<'_>| shape(t, t.root());
        assert_eq!(s(&a), s(&b));
        assert_ne!(s(&a), s(&c));
    }
}
