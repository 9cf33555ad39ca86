//! Go: `.go`.

use super::{
    Added, AppendOnly, Brace, Grammar, Lang, Language, Lexical, Pattern, Script, Swallow, Terminal,
    UnderTest,
};

const NAME: &str = "go";

impl Lang {
    /// Named like the enum variant it was, so call sites read the same.
    #[allow(non_upper_case_globals)]
    pub const Go: Lang = Lang(&GO);
}

impl Brace {
    /// Go: `'` runes, backtick raw strings.
    #[allow(non_upper_case_globals)]
    pub const Go: Brace = Brace {
        spanning_quotes: b"`",
        backtick_escapes: false,
        raw_strings: false,
        char_literals: false,
    };
}

pub static GO: Language = Language {
    name: NAME,
    grammars: &[Grammar {
        extensions: &["go"],
        language: || tree_sitter_go::LANGUAGE.into(),
    }],
    line_comment: "//",
    comment_directives: super::SLASH_DIRECTIVES,
    pragmas: super::SLASH_PRAGMAS,
    reserved: NAMES,
    terminal: Terminal {
        writers: WRITERS,
        print: "a print",
        print_handed_on: "a print handed to a call",
        streams: &[],
        stream_methods: &[],
        stream_suffixes_dropped: &[],
        stream_prefixes_dropped: &[],
        call_forms: &[],
        bind: None,
        calls_named_with_parens: false,
        to_argument: &[
            ("fmt.Fprint", 0),
            ("fmt.Fprintln", 0),
            ("fmt.Fprintf", 0),
            ("io.WriteString", 0),
            ("io.Copy", 0),
        ],
        terminals: &["os.Stdout", "os.Stderr"],
        error_level: &[],
        // `Infof`, `Errorw`, `Println`: the start names the level.
        log_methods: &[
            ("Debug", "debug"),
            ("Info", "info"),
            ("Warn", "warn"),
            ("Error", "error"),
            ("Print", "print"),
        ],
        log_methods_by_prefix: true,
        importers: &[],
        module_scheme: None,
        global_objects: &[],
        global_paths: &[],
        debugger_calls: &[],
        debugger_modules: &[],
    },
    script: Script {
        if_kind: "if_statement",
        guards: &[],
        main: None,
    },
    swallows: &[
        ("assignment_statement", Swallow::BlankAssign),
        ("if_statement", Swallow::EmptyErrCheck),
    ],
    code_kinds: CODE_KINDS,
    statement_context: ("package p\nfunc _loopd() {\n", "\n}\n"),
    under_test: UnderTest {
        markers: Pattern::new(
            r#"\btesting\.Testing\(\)|flag\.Lookup\(\s*"test\.\w+"\s*\)|os\.Args\[0\][^\n]*"\.test"|"\.test"[^\n]*os\.Args\[0\]"#,
        ),
        runner_reach: None,
        convention: None,
        test_module_attribute: None,
    },
    imports: None,
    lexical: Lexical::Braces(Brace::Go),
    declares_encoding: false,
    tests: &["**/*_test.go", "**/testdata/**"],
    append_only: Some(AppendOnly {
        introduces,
        imported_modules: |_| Vec::new(),
    }),
    entry_files: &[],
    entry_line: Some("package main"),
    inline_tests: None,
    shadows_assertions: None,
};

const WRITERS: &[&str] = &[
    "print",
    "println",
    "fmt.Print",
    "fmt.Println",
    "fmt.Printf",
    "os.Stdout.Write",
    "os.Stdout.WriteString",
    "os.Stderr.Write",
    "os.Stderr.WriteString",
];

/// Node kinds only code makes: a prose sentence that happens to parse
/// holds none of them.
const CODE_KINDS: &[&str] = &[
    "call_expression",
    "short_var_declaration",
    "assignment_statement",
    "return_statement",
    "if_statement",
    "for_statement",
    "var_declaration",
    "function_declaration",
    "defer_statement",
    "go_statement",
    "index_expression",
];

/// Go's keywords and predeclared identifiers, and the standard library's
/// common type names.
const NAMES: &[&str] = &[
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "fallthrough",
    "for",
    "func",
    "go",
    "goto",
    "if",
    "import",
    "interface",
    "map",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "type",
    "var",
    "any",
    "bool",
    "byte",
    "comparable",
    "complex64",
    "complex128",
    "error",
    "float32",
    "float64",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "rune",
    "string",
    "uint",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "uintptr",
    "true",
    "false",
    "iota",
    "nil",
    "append",
    "cap",
    "clear",
    "close",
    "complex",
    "copy",
    "delete",
    "imag",
    "len",
    "make",
    "max",
    "min",
    "new",
    "panic",
    "print",
    "println",
    "real",
    "recover",
    "Time",
    "Duration",
];

/// `[protect] tests = "append_only"`: a new `func` that is no method (a
/// method changes a type the old tests use) ([`super::AppendOnly`]).
fn introduces(added: &Added<'_>) -> Option<Vec<String>> {
    let first = *added.rest.first()?;
    let ident = super::syntax::ident_prefix;
    let r = first.strip_prefix("func ")?;
    // A method (`func (s *T) …`) changes a type the old tests use.
    (!r.starts_with('(')).then(|| vec![ident(r)])
}
