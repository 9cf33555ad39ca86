//! Top-level statements of source code, read lexically but string- and
//! bracket-aware: what the runner gate compares in a conftest and what
//! `[protect] tests = "append_only"` compares in an existing test file.
//! Python is split at unindented lines (decorators kept with what they
//! decorate); JavaScript/TypeScript, Go and Rust at lines that start at
//! column 0 with every bracket closed. Where loopd cannot be sure where a
//! statement ends, it errs towards one larger statement, which can only
//! make a change look *more* like an edit of an existing one (refused),
//! never less.

/// One top-level statement: its decorators, its first line and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The statement's code lines (comments and blank lines dropped), as
    /// written: what "unchanged" compares.
    pub text: String,
    /// 1-based line of its first line.
    pub line: u32,
}

/// Split Python source into top-level statements. Strings (single, triple,
/// with prefixes), comments, brackets and backslash continuations are
/// followed, so nothing that Python reads as one statement is read here as
/// two (a hook hidden in the "body" of a fixture would be indented, and
/// Python would put it inside the fixture too).
pub fn python_statements(source: &str) -> Vec<Statement> {
    // Python ends a line at `\n`, `\r\n` and a lone `\r`; so does this.
    let source = &normal_lines(source);
    let mut out: Vec<Statement> = Vec::new();
    let mut current: Option<Statement> = None;
    let mut depth: i32 = 0;
    let mut in_string: Option<&'static str> = None;
    let mut continued = false;
    let mut decorators = String::new();
    let mut decorators_line = 0;
    for (i, raw) in source.lines().enumerate() {
        let line_no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let starts_inside = in_string.is_some() || depth > 0 || continued;
        let (code, state) = scan(raw, in_string, depth);
        in_string = state.0;
        depth = state.1;
        continued =
            in_string.is_none() && raw.trim_end().ends_with('\\') && !code.trim().is_empty();
        let blank = code.trim().is_empty() && !starts_inside && in_string.is_none();
        if blank {
            continue;
        }
        let indented = raw.starts_with([' ', '\t']);
        if starts_inside || indented {
            match current.as_mut() {
                Some(s) => {
                    s.text.push_str(raw.trim_end());
                    s.text.push('\n');
                }
                // Indented code before any statement: Python refuses it,
                // and here it is a statement of its own (never allowed).
                None => {
                    current = Some(Statement {
                        text: format!("{}\n", raw.trim_end()),
                        line: line_no,
                    })
                }
            }
            continue;
        }
        if let Some(s) = current.take() {
            out.push(s);
        }
        let text = format!("{}\n", raw.trim_end());
        if raw.trim_start().starts_with('@') && depth == 0 && in_string.is_none() {
            // A decorator belongs to the statement after it.
            if decorators.is_empty() {
                decorators_line = line_no;
            }
            decorators.push_str(&text);
            continue;
        }
        let (text, line) = if decorators.is_empty() {
            (text, line_no)
        } else {
            (
                format!("{}{text}", std::mem::take(&mut decorators)),
                decorators_line,
            )
        };
        current = Some(Statement { text, line });
    }
    if !decorators.is_empty() {
        out.extend(current.take());
        current = Some(Statement {
            text: decorators,
            line: decorators_line,
        });
    }
    out.extend(current);
    out
}

/// The code of one line with string contents and the comment removed, and
/// the string/bracket state it leaves for the next line.
pub fn scan(
    line: &str,
    mut in_string: Option<&'static str>,
    mut depth: i32,
) -> (String, (Option<&'static str>, i32)) {
    // Bytes, so a character of several bytes is never cut (a line's
    // indexes are bytes); the code is UTF-8 again at the end.
    let mut code: Vec<u8> = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if let Some(quote) = in_string {
            if b[i] == b'\\' {
                i += 2;
                continue;
            }
            if b[i..].starts_with(quote.as_bytes()) {
                in_string = None;
                i += quote.len();
                code.push(b'"');
                continue;
            }
            i += 1;
            continue;
        }
        match b[i] {
            b'#' => break,
            b'"' | b'\'' => {
                let q = if b[i] == b'"' { "\"" } else { "'" };
                let triple = if q == "\"" { "\"\"\"" } else { "'''" };
                let quote = if b[i..].starts_with(triple.as_bytes()) {
                    triple
                } else {
                    q
                };
                in_string = Some(quote);
                code.push(b'"');
                i += quote.len();
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = (depth - 1).max(0),
            _ => {}
        }
        code.push(b[i]);
        i += 1;
    }
    // A single-quoted string does not span lines (but for a backslash
    // continuation, which keeps it open): close it at the line's end.
    if matches!(in_string, Some("\"" | "'")) && !line.ends_with('\\') {
        in_string = None;
    }
    (
        String::from_utf8_lossy(&code).into_owned(),
        (in_string, depth),
    )
}

/// How a brace language's strings read, for [`brace_statements`]: each
/// language's own ([`crate::lang::Language::lexical`]).
pub use super::Brace;

/// The lexer's state between lines of a brace language.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct BraceState {
    depth: i32,
    /// Inside a string that spans lines: its closing quote (a raw Rust
    /// string's `"` and how many `#`).
    string: Option<(u8, usize)>,
    block_comment: bool,
}

impl BraceState {
    fn top(&self) -> bool {
        self.depth == 0 && self.string.is_none() && !self.block_comment
    }
}

/// Advance `st` over one line.
fn brace_scan(line: &str, lang: Brace, st: &mut BraceState) {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if st.block_comment {
            if b[i..].starts_with(b"*/") {
                st.block_comment = false;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        if let Some((quote, hashes)) = st.string {
            if b[i] == b'\\' && hashes == 0 && quote != b'`' {
                i += 2;
                continue;
            }
            if b[i] == b'\\' && quote == b'`' && lang.backtick_escapes {
                i += 2;
                continue;
            }
            if b[i] == quote
                && b[i + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|c| **c == b'#')
                    .count()
                    == hashes
            {
                st.string = None;
                i += 1 + hashes;
                continue;
            }
            i += 1;
            continue;
        }
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => return,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                st.block_comment = true;
                i += 2;
                continue;
            }
            b'r' if lang.raw_strings
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    st.string = Some((b'"', hashes));
                    i += 2 + hashes;
                    continue;
                }
            }
            b'\'' if lang.char_literals => {
                // A char literal ('x', '\n', '\u{1F600}') or a lifetime.
                let rest = &b[i + 1..];
                let len = if rest.first() == Some(&b'\\') {
                    rest.iter().skip(1).position(|c| *c == b'\'').map(|p| p + 2)
                } else {
                    let ch = line[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (rest.get(ch) == Some(&b'\'')).then_some(ch)
                };
                i += 1 + len.map_or(0, |l| l + 1);
                continue;
            }
            q @ (b'"' | b'\'' | b'`') => {
                let spans = lang.spanning_quotes.contains(&q);
                st.string = Some((q, 0));
                i += 1;
                // A quote that cannot span lines closes at the line's end
                // (below) if it is still open.
                if !spans {
                    let close = b[i..]
                        .iter()
                        .enumerate()
                        .find(|(k, c)| **c == q && (*k == 0 || b[i + k - 1] != b'\\'));
                    match close {
                        Some((k, _)) => i += k + 1,
                        None => i = b.len(),
                    }
                    st.string = None;
                }
                continue;
            }
            b'(' | b'[' | b'{' => st.depth += 1,
            b')' | b']' | b'}' => st.depth = (st.depth - 1).max(0),
            _ => {}
        }
        i += 1;
    }
}

/// Split JavaScript/TypeScript, Go or Rust source into top-level items: an
/// item starts at a line that begins at column 0 (not with a closing
/// bracket or a continuation) while every bracket, string and block
/// comment is closed. Comment lines, attributes (`#[…]`) and decorators
/// (`@…`) at the top belong to the item after them; blank lines are
/// dropped.
pub fn brace_statements(source: &str, lang: Brace) -> Vec<Statement> {
    // A lone `\r` ends a line in JavaScript, Go and Rust too.
    let source = &normal_lines(source);
    let mut out: Vec<Statement> = Vec::new();
    let mut current: Option<Statement> = None;
    let mut pending = String::new();
    let mut pending_line = 0;
    let mut st = BraceState::default();
    for (i, raw) in source.lines().enumerate() {
        let line_no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let at_top = st.top();
        brace_scan(raw, lang, &mut st);
        let t = raw.trim();
        if t.is_empty() && at_top {
            continue;
        }
        let text = format!("{}\n", raw.trim_end());
        let starts_item = at_top
            && !raw.starts_with([' ', '\t'])
            && !t.starts_with(['}', ')', ']', '.', ',', '?', ':', '+', '-', '*', '|', '&']);
        if !starts_item {
            match current.as_mut() {
                Some(s) => s.text.push_str(&text),
                None => {
                    pending.push_str(&text);
                }
            }
            continue;
        }
        if let Some(s) = current.take() {
            out.push(s);
        }
        let prefix =
            t.starts_with("//") || t.starts_with("/*") || t.starts_with("#[") || t.starts_with('@');
        if prefix && (st.top() || st.block_comment) {
            if pending.is_empty() {
                pending_line = line_no;
            }
            pending.push_str(&text);
            continue;
        }
        let (text, line) = if pending.is_empty() {
            (text, line_no)
        } else {
            (
                format!("{}{text}", std::mem::take(&mut pending)),
                pending_line,
            )
        };
        current = Some(Statement { text, line });
    }
    if !pending.is_empty() {
        out.extend(current.take());
        current = Some(Statement {
            text: pending,
            line: pending_line,
        });
    }
    out.extend(current);
    out
}

/// The identifiers a text mentions (`$` counts, for JavaScript), each in
/// NFKC form ([`identifier`]).
pub fn words(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty())
        .map(|w| identifier(w).into_owned())
        .collect()
}

/// The identifier `text` starts with (letters, digits, `_`, `$`).
pub fn ident_prefix(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
        .collect()
}

/// An identifier as Python reads it: NFKC-normalised, so `ｔest_total`
/// (fullwidth `ｔ`) and `test_total` are one name, and a new test spelled
/// with look-alikes cannot replace an old one unseen. Languages that do not
/// normalise (JavaScript, Go) then read two names as one, which can only
/// refuse a new name, never let a redefinition through.
pub fn identifier(word: &str) -> std::borrow::Cow<'_, str> {
    if word.is_ascii() {
        return word.into();
    }
    icu_normalizer::ComposingNormalizerBorrowed::new_nfkc()
        .normalize(word)
        .into_owned()
        .into()
}

/// `text` with every line ending (`\r\n`, a lone `\r`) as `\n`.
pub fn normal_lines(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\r') {
        text.replace("\r\n", "\n").replace('\r', "\n").into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn firsts(s: &[Statement]) -> Vec<String> {
        s.iter()
            .map(|s| {
                s.text
                    .lines()
                    .find(|l| !["//", "#[", "/*", "*/"].iter().any(|p| l.starts_with(p)))
                    .unwrap_or("")
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn characters_of_several_bytes_are_never_cut() {
        let (code, _) = scan("s = \"Ünïcode Straße\"  # ß", None, 0);
        assert_eq!(code, "s = \"\"  ");
        let (code, _) = scan("größe = 1  # ü", None, 0);
        assert_eq!(code, "größe = 1  ");
        assert_eq!(python_statements("x = 'é'\ny = \"ü\"\n").len(), 2);
    }

    #[test]
    fn brace_items_follow_strings_comments_and_brackets() {
        let js = "import { total } from './total.js';\n\ntest('a {', () => {\n  expect(total(`x}\n}`)).toBe(1);\n});\n/* a } comment\n*/\n// the next one\ntest(\"b\", () => {\n  expect(1)\n    .toBe(1);\n});\n";
        let s = brace_statements(js, Brace::Js);
        assert_eq!(
            firsts(&s),
            [
                "import { total } from './total.js';",
                "test('a {', () => {",
                "test(\"b\", () => {"
            ]
        );
        assert!(
            s[2].text
                .starts_with("/* a } comment\n*/\n// the next one\n"),
            "{:?}",
            s[2]
        );
        let rs = "use lib::total;\n\n#[test]\nfn a() {\n    let s = r#\"}\"#;\n    let c = '}';\n    let l: &'static str = \"{\";\n    assert_eq!(total(s, c, l), 1);\n}\n\nfn helper<'a>(x: &'a str) -> &'a str {\n    x\n}\n";
        let s = brace_statements(rs, Brace::Rust);
        assert_eq!(
            firsts(&s),
            [
                "use lib::total;",
                "fn a() {",
                "fn helper<'a>(x: &'a str) -> &'a str {"
            ]
        );
        assert!(s[1].text.starts_with("#[test]\n"));
        let go = "package total\n\nimport (\n\t\"testing\"\n)\n\nfunc TestA(t *testing.T) {\n\ts := `}\n`\n\tif total(s) != 1 {\n\t\tt.Fatal(\"}\")\n\t}\n}\n";
        let s = brace_statements(go, Brace::Go);
        assert_eq!(
            firsts(&s),
            ["package total", "import (", "func TestA(t *testing.T) {"]
        );
    }
}
