//! Rust: `.rs`.

use super::{
    Added, AppendOnly, Brace, Grammar, InlineTests, Lang, Language, Lexical, MainFunction, Pattern,
    Script, Swallow, Terminal, UnderTest,
};

const NAME: &str = "rust";

impl Lang {
    /// Named like the enum variant it was, so call sites read the same.
    #[allow(non_upper_case_globals)]
    pub const Rust: Lang = Lang(&RUST);
}

impl Brace {
    /// Rust: `'` chars or lifetimes, `r#"…"#` raw strings.
    #[allow(non_upper_case_globals)]
    pub const Rust: Brace = Brace {
        spanning_quotes: b"\"'`",
        backtick_escapes: false,
        raw_strings: true,
        char_literals: true,
    };
}

pub static RUST: Language = Language {
    name: NAME,
    grammars: &[Grammar {
        extensions: &["rs"],
        language: || tree_sitter_rust::LANGUAGE.into(),
    }],
    line_comment: "//",
    comment_directives: super::SLASH_DIRECTIVES,
    pragmas: super::SLASH_PRAGMAS,
    reserved: NAMES,
    terminal: Terminal {
        // Rust prints through macros (read by the pre-critic from the
        // macro node) and through the standard streams.
        writers: &[],
        print: "a print",
        print_handed_on: "a print handed to a call",
        streams: &["stdout()", "stderr()"],
        stream_methods: &["write", "write_all", "write_fmt", "write_vectored"],
        stream_suffixes_dropped: &[".lock()"],
        stream_prefixes_dropped: &["std::", "io::"],
        call_forms: &[],
        bind: None,
        calls_named_with_parens: true,
        to_argument: &[],
        terminals: &[],
        error_level: &[],
        log_methods: &[],
        log_methods_by_prefix: false,
        importers: &[],
        module_scheme: None,
        global_objects: &[],
        global_paths: &[],
        debugger_calls: &[],
        debugger_modules: &[],
    },
    script: Script {
        if_kind: "if_expression",
        guards: &[],
        main: Some(MainFunction {
            kind: "function_item",
            names: &["main"],
            only_under_a_guard: false,
        }),
    },
    swallows: &[
        ("assignment_expression", Swallow::DroppedAssign),
        ("let_declaration", Swallow::DroppedLet),
        ("expression_statement", Swallow::DroppedOk),
        ("match_arm", Swallow::IgnoredErrArm),
    ],
    code_kinds: CODE_KINDS,
    statement_context: ("fn _loopd() {\n", "\n}\n"),
    under_test: UnderTest {
        markers: Pattern::new(
            r"\bcfg!\s*\(\s*(?:not\s*\(\s*)?test\s*\)|RUST_TEST_THREADS|NEXTEST_\w+|\bcfg!\s*\(\s*debug_assertions\s*\)\s*&&\s*cfg!\s*\(\s*test|#\[\s*cfg\s*\([^\]]*\bnot\s*\(\s*test\s*\)|#\[\s*cfg_attr\s*\(\s*(?:not\s*\(\s*)?test\b",
        ),
        runner_reach: None,
        convention: None,
        test_module_attribute: Some("#[cfg(test)]"),
    },
    imports: None,
    lexical: Lexical::Braces(Brace::Rust),
    declares_encoding: false,
    // Integration tests and benches, and a module of unit tests in a
    // file of its own (`#[cfg(test)] mod tests;` reads `tests.rs`).
    tests: &["tests/**", "**/tests/**/*.rs", "benches/**", "**/tests.rs"],
    append_only: Some(AppendOnly {
        introduces,
        imported_modules: |_| Vec::new(),
    }),
    entry_files: &["main.rs", "cli.rs", "build.rs"],
    entry_line: None,
    inline_tests: Some(inline_tests),
    shadows_assertions: Some(Pattern::new(
        r"\bmacro_rules!\s*(?:r#)?(?:assert\w*|debug_assert\w*|panic|unreachable|todo|unimplemented)\b",
    )),
};

/// Rust's unit tests live beside the code: every item marked
/// `#[cfg(test)]` (a `mod tests` above all; `cfg(all(test, …))` too,
/// `cfg(not(test))` not) or `#[test]` (`#[tokio::test]` and the like),
/// at the top of the file or inside a module that is not itself test
/// code.
fn inline_tests(root: tree_sitter::Node<'_>, text: &str) -> Vec<InlineTests> {
    let mut out = Vec::new();
    inline_tests_in(root, text, "", &mut out);
    out
}

fn inline_tests_in(
    node: tree_sitter::Node<'_>,
    text: &str,
    within: &str,
    out: &mut Vec<InlineTests>,
) {
    let mut cursor = node.walk();
    let mut attrs: Option<usize> = None;
    let mut marked = false;
    for child in node.named_children(&mut cursor) {
        match child.kind() {
            "attribute_item" => {
                attrs.get_or_insert(child.start_byte());
                marked |= marks_test(&text[child.byte_range()]);
                continue;
            }
            "line_comment" | "block_comment" => continue,
            _ => {}
        }
        let name = child
            .child_by_field_name("name")
            .map_or(child.kind(), |n| &text[n.byte_range()]);
        let path = match within {
            "" => name.to_owned(),
            w => format!("{w}::{name}"),
        };
        let kind = child.kind().strip_suffix("_item").unwrap_or(child.kind());
        let body = (child.kind() == "mod_item")
            .then(|| child.child_by_field_name("body"))
            .flatten();
        if marked {
            out.push(InlineTests {
                name: format!("{kind} {path}"),
                item: attrs.unwrap_or(child.start_byte())..child.end_byte(),
                body: body.map(|b| {
                    b.start_byte() + 1..b.end_byte().saturating_sub(1).max(b.start_byte() + 1)
                }),
            });
        } else if let Some(body) = body {
            inline_tests_in(body, text, &path, out);
        }
        attrs = None;
        marked = false;
    }
}

/// Whether one attribute marks its item as test code.
fn marks_test(attribute: &str) -> bool {
    let a: String = attribute.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(inner) = a.strip_prefix("#[").and_then(|a| a.strip_suffix(']')) else {
        return false;
    };
    if inner == "test" || inner.ends_with("::test") || inner.contains("::test(") {
        return true;
    }
    let Some(cfg) = inner.strip_prefix("cfg(") else {
        return false;
    };
    let words: Vec<&str> = cfg
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    words.contains(&"test") && !cfg.contains("not(test")
}

/// Node kinds only code makes: a prose sentence that happens to parse
/// holds none of them.
const CODE_KINDS: &[&str] = &[
    "call_expression",
    "macro_invocation",
    "let_declaration",
    "assignment_expression",
    "compound_assignment_expr",
    "return_expression",
    "if_expression",
    "for_expression",
    "while_expression",
    "function_item",
    "use_declaration",
    "match_expression",
    "index_expression",
];

/// Rust's keywords, primitive types and the prelude's types and variants.
const NAMES: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "bool", "char", "str", "i8", "i16", "i32", "i64", "i128",
    "isize", "u8", "u16", "u32", "u64", "u128", "usize", "f32", "f64", "String", "Vec", "Option",
    "Result", "Box", "Some", "None", "Ok", "Err",
];

/// `[protect] tests = "append_only"`: a new `#[test]` function or `use`
/// ([`super::AppendOnly`]).
fn introduces(added: &Added<'_>) -> Option<Vec<String>> {
    let first = *added.rest.first()?;
    let attrs = added.attrs;
    let ident = super::syntax::ident_prefix;
    let plain =
        |a: &str| matches!(a, "#[test]" | "#[should_panic]") || a.starts_with("#[should_panic(");
    if !attrs.iter().all(|a| plain(a)) {
        return None;
    }
    let r = first.strip_prefix("pub ").unwrap_or(first);
    if let Some(r) = r.strip_prefix("fn ") {
        return Some(vec![ident(r)]);
    }
    if let Some(r) = r.strip_prefix("use ") {
        return attrs.is_empty().then(|| {
            r.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect()
        });
    }
    None
}
