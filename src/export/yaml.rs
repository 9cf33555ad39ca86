//! A small YAML emitter for what `loopd export` writes: block style, keys in
//! the order they were built, every string quoted unless it is plainly a
//! string to every YAML parser (1.1 and 1.2), and a multi-line string (a
//! script) as a literal block a human can read.
//!
//! Why not a YAML crate: loopd has none, and what it writes is a handful of
//! maps, lists, strings, integers and booleans — no anchors, tags or flow
//! style. Why not JSON (which is YAML too): a manifest or a workflow is
//! read and reviewed by people, and a script in one JSON string line is not
//! reviewable. The output is checked by real parsers in the suite (PyYAML,
//! kubernetes-validate, check-jsonschema): `tests/it/export.rs`.

/// One YAML value, its map keys in the order they are to be written.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Str(String),
    Int(i64),
    Bool(bool),
}

impl Node {
    /// A map from `(key, value)` pairs, in that order.
    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Node)>) -> Node {
        Node::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn seq(items: impl IntoIterator<Item = Node>) -> Node {
        Node::Seq(items.into_iter().collect())
    }

    /// Add one entry at the end of a map (a no-op on anything else, which
    /// never happens: the exporters only push onto maps they built).
    pub fn push(&mut self, key: impl Into<String>, value: Node) {
        if let Node::Map(entries) = self {
            entries.push((key.into(), value));
        }
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Node {
        Node::Str(s.to_owned())
    }
}

impl From<String> for Node {
    fn from(s: String) -> Node {
        Node::Str(s)
    }
}

impl From<&String> for Node {
    fn from(s: &String) -> Node {
        Node::Str(s.clone())
    }
}

impl From<i64> for Node {
    fn from(n: i64) -> Node {
        Node::Int(n)
    }
}

impl From<u32> for Node {
    fn from(n: u32) -> Node {
        Node::Int(i64::from(n))
    }
}

impl From<usize> for Node {
    fn from(n: usize) -> Node {
        Node::Int(i64::try_from(n).expect("a count the exporters write fits in i64"))
    }
}

impl From<bool> for Node {
    fn from(b: bool) -> Node {
        Node::Bool(b)
    }
}

/// `comments` (each line prefixed with `# `, an empty line as `#`), then
/// each document, separated by `---`.
pub fn documents(comments: &[String], docs: &[Node]) -> String {
    let mut out = String::new();
    for line in comments {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            out.push_str("# ");
            out.push_str(line);
            out.push('\n');
        }
    }
    for doc in docs {
        out.push_str("---\n");
        write_block(&mut out, doc, 0);
    }
    out
}

/// One document with its header comments and no `---` (a workflow file).
pub fn document(comments: &[String], doc: &Node) -> String {
    let mut out = documents(comments, &[]);
    write_block(&mut out, doc, 0);
    out
}

/// `node` as the content of a block at `indent`, starting at the beginning
/// of a line; ends with a newline.
fn write_block(out: &mut String, node: &Node, indent: usize) {
    match node {
        Node::Map(entries) if !entries.is_empty() => {
            for (key, value) in entries {
                pad(out, indent);
                write_entry(out, key, value, indent);
            }
        }
        Node::Seq(items) if !items.is_empty() => {
            for item in items {
                pad(out, indent);
                write_item(out, item, indent);
            }
        }
        scalar => {
            pad(out, indent);
            write_inline(out, scalar, indent);
        }
    }
}

/// `key: value` at the current position (the line is padded already).
fn write_entry(out: &mut String, key: &str, value: &Node, indent: usize) {
    out.push_str(&scalar_text(key));
    out.push(':');
    match value {
        Node::Map(e) if !e.is_empty() => {
            out.push('\n');
            write_block(out, value, indent + 2);
        }
        Node::Seq(s) if !s.is_empty() => {
            out.push('\n');
            write_block(out, value, indent + 2);
        }
        _ => {
            out.push(' ');
            write_inline(out, value, indent);
        }
    }
}

/// `- item` at the current position: a map's first entry on the dash's
/// line, the rest under it.
fn write_item(out: &mut String, item: &Node, indent: usize) {
    out.push_str("- ");
    match item {
        Node::Map(entries) if !entries.is_empty() => {
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    pad(out, indent + 2);
                }
                write_entry(out, key, value, indent + 2);
            }
        }
        Node::Seq(items) if !items.is_empty() => {
            for (i, inner) in items.iter().enumerate() {
                if i > 0 {
                    pad(out, indent + 2);
                }
                write_item(out, inner, indent + 2);
            }
        }
        _ => write_inline(out, item, indent),
    }
}

/// A scalar (or an empty collection) after `key: ` or `- `; ends the line.
/// `indent` is the indentation of the key, which a literal block's lines go
/// under.
fn write_inline(out: &mut String, node: &Node, indent: usize) {
    match node {
        Node::Map(_) => out.push_str("{}\n"),
        Node::Seq(_) => out.push_str("[]\n"),
        Node::Int(n) => {
            out.push_str(&n.to_string());
            out.push('\n');
        }
        Node::Bool(b) => {
            out.push_str(if *b { "true" } else { "false" });
            out.push('\n');
        }
        Node::Str(s) if literal_ok(s) => write_literal(out, s, indent + 2),
        Node::Str(s) => {
            out.push_str(&scalar_text(s));
            out.push('\n');
        }
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A string as a plain scalar when that is unambiguous, else double-quoted.
pub fn scalar_text(s: &str) -> String {
    if plain_ok(s) {
        s.to_owned()
    } else {
        double_quoted(s)
    }
}

/// Plain only when every parser reads it back as this very string: a
/// conservative alphabet, starting with a letter or `/`, never a word YAML
/// 1.1 turns into a boolean or null (`on`, `no`, `y`, `null`, `~`…).
fn plain_ok(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "y", "yes", "n", "no", "true", "false", "on", "off", "null", "nil",
    ];
    let Some(first) = s.chars().next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '/')
        && !s.ends_with(' ')
        && !s.contains(": ")
        && !s.contains(" #")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || " ._/@=+-".contains(c))
        && !SPECIAL.contains(&s.to_ascii_lowercase().as_str())
}

/// The characters that may not stand raw in a YAML stream, or that some
/// parser reads as a line break or a byte-order mark: shown as escapes in a
/// double-quoted string, and the reason a string is never a literal block.
fn needs_escape(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A literal block (`|`) keeps a script as it is, readable: only for a
/// multi-line string whose every line stands in a block unchanged — no
/// carriage return or other character needing an escape, no line of only
/// spaces (a block would read it as indentation), no leading space on the
/// first line (it would set the block's indentation).
fn literal_ok(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && !s.chars().any(|c| c == '\r' || needs_escape(c))
        && s.split('\n')
            .all(|l| l.is_empty() || !l.chars().all(|c| c == ' ' || c == '\t'))
}

/// `|`, `|-` or `|+` by how the string ends (one newline, none, more), so
/// the value reads back byte for byte.
fn write_literal(out: &mut String, s: &str, indent: usize) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lists_and_scalars_in_block_style() {
        let doc = Node::map([
            ("apiVersion", "batch/v1".into()),
            (
                "spec",
                Node::map([
                    ("completions", 3usize.into()),
                    ("on", true.into()),
                    ("empty", Node::map(Vec::<(String, Node)>::new())),
                    (
                        "rules",
                        Node::seq([
                            Node::map([
                                ("action", "Ignore".into()),
                                ("codes", Node::seq([4i64.into(), 5i64.into()])),
                            ]),
                            "no".into(),
                        ]),
                    ),
                ]),
            ),
        ]);
        assert_eq!(
            document(&["a header".into(), String::new()], &doc),
            "# a header\n#\napiVersion: batch/v1\nspec:\n  completions: 3\n  \"on\": true\n  empty: {}\n  rules:\n    - action: Ignore\n      codes:\n        - 4\n        - 5\n    - \"no\"\n"
        );
    }

    #[test]
    fn strings_are_quoted_unless_plainly_strings() {
        for (s, want) in [
            ("main", "main"),
            ("ubuntu-latest", "ubuntu-latest"),
            ("0400", "\"0400\""),
            ("", "\"\""),
            ("yes", "\"yes\""),
            ("a: b", "\"a: b\""),
            ("${{ matrix.id }}", "\"${{ matrix.id }}\""),
            ("it's \"x\"\\", "\"it's \\\"x\\\"\\\\\""),
            ("tab\there", "\"tab\\there\""),
            ("bell\u{7}\u{85}\u{2028}", "\"bell\\u0007\\u0085\\u2028\""),
        ] {
            assert_eq!(scalar_text(s), want, "{s:?}");
        }
    }

    #[test]
    fn scripts_are_literal_blocks_that_keep_their_ending() {
        let doc = Node::map([
            ("one", "a\n  b\n".into()),
            ("none", "a\nb".into()),
            ("more", "a\n\nb\n\n".into()),
            ("spaces", "a\n   \nb\n".into()),
        ]);
        assert_eq!(
            document(&[], &doc),
            "one: |\n  a\n    b\nnone: |-\n  a\n  b\nmore: |+\n  a\n\n  b\n\nspaces: \"a\\n   \\nb\\n\"\n"
        );
    }
}
