//! JavaScript and TypeScript (`.js`, `.jsx`, `.mjs`, `.cjs`, `.ts`,
//! `.mts`, `.cts`, `.tsx`): one language with three grammars.

use super::{
    Added, AppendOnly, Brace, Grammar, Guard, Lang, Language, Lexical, Pattern, Script, Swallow,
    Terminal, UnderTest,
};

const NAME: &str = "javascript";

impl Lang {
    /// Named like the enum variant it was, so call sites read the same.
    #[allow(non_upper_case_globals)]
    pub const Js: Lang = Lang(&JS);
}

impl Brace {
    /// JavaScript and TypeScript: `'`, `"`, template literals.
    #[allow(non_upper_case_globals)]
    pub const Js: Brace = Brace {
        spanning_quotes: b"`",
        backtick_escapes: true,
        raw_strings: false,
        char_literals: false,
    };
}

pub static JS: Language = Language {
    name: NAME,
    grammars: &[
        Grammar {
            extensions: &["js", "jsx", "mjs", "cjs"],
            language: || tree_sitter_javascript::LANGUAGE.into(),
        },
        // TypeScript and TSX: a superset of JavaScript's grammar that
        // would read type annotations as errors.
        Grammar {
            extensions: &["ts", "mts", "cts"],
            language: || tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        },
        Grammar {
            extensions: &["tsx"],
            language: || tree_sitter_typescript::LANGUAGE_TSX.into(),
        },
    ],
    line_comment: "//",
    comment_directives: super::SLASH_DIRECTIVES,
    pragmas: super::SLASH_PRAGMAS,
    reserved: NAMES,
    terminal: Terminal {
        writers: WRITERS,
        print: "a console print",
        print_handed_on: "a console print handed to a call",
        streams: &[],
        stream_methods: &[],
        stream_suffixes_dropped: &[],
        stream_prefixes_dropped: &[],
        call_forms: &[".call", ".apply"],
        bind: Some(".bind"),
        calls_named_with_parens: false,
        to_argument: &[("fs.writeSync", 0), ("fs.write", 0)],
        terminals: &["process.stdout.fd", "process.stderr.fd"],
        error_level: &[("console.error", "error"), ("console.warn", "warn")],
        log_methods: &[
            ("debug", "debug"),
            ("trace", "trace"),
            ("info", "info"),
            ("warn", "warn"),
            ("error", "error"),
        ],
        log_methods_by_prefix: false,
        importers: &["require"],
        module_scheme: Some("node:"),
        global_objects: &["globalThis", "window", "global", "self"],
        global_paths: &["console", "console.", "process."],
        debugger_calls: &[],
        debugger_modules: &[],
    },
    script: Script {
        if_kind: "if_statement",
        guards: &[
            Guard::Contains("require.main===module"),
            Guard::Contains("import.meta.main"),
        ],
        main: None,
    },
    swallows: &[
        ("finally_clause", Swallow::ExitInFinally),
        ("catch_clause", Swallow::EmptyCatch),
        ("call_expression", Swallow::EmptyPromiseCatch),
    ],
    code_kinds: CODE_KINDS,
    statement_context: ("", "\n"),
    under_test: UnderTest {
        markers: Pattern::new(
            r#"\b(?:JEST_WORKER_ID|VITEST\w*|NODE_TEST_CONTEXT)\b|\bimport\.meta\.vitest\b|process\.(?:argv|execArgv)\b[^\n]*["']--test["']|\btypeof\s+(?:jest|vi|describe|it|test)\s*[!=]==?"#,
        ),
        // Reaching into the runner itself — its options, its reporter, its
        // assertions patched: library code has no honest reason to either.
        runner_reach: Some(Pattern::new(
            r#"\bNODE_OPTIONS\b|--test-reporter|\bsyncBuiltinESMExports\b|["']node:test["']|\bassert(?:\.\w+)*\s*\.\s*\w+\s*=[^=]|\bassert\s*\[[^\]\n]+\]\s*=[^=]|Object\.(?:assign|defineProperty|defineProperties)\(\s*assert\b"#,
        )),
        convention: Some(Pattern::new(
            r#"process\.env\.NODE_ENV\s*[!=]==?\s*["']test["']|["']test["']\s*[!=]==?\s*process\.env\.NODE_ENV"#,
        )),
        test_module_attribute: None,
    },
    imports: None,
    lexical: Lexical::Braces(Brace::Js),
    declares_encoding: false,
    // Jest's and Vitest's names, and what `node --test` finds by default:
    // `*.test.*`, `*-test.*`, `*_test.*`, `test-*.*`, `test.*` and every
    // file under a `test/` folder.
    tests: &[
        "**/*.{test,spec}.{js,jsx,ts,tsx,mjs,cjs,mts,cts}",
        "**/__tests__/**",
        "**/__mocks__/**",
        "**/*{-,_}test.{js,jsx,ts,tsx,mjs,cjs,mts,cts}",
        "**/test-*.{js,jsx,ts,tsx,mjs,cjs,mts,cts}",
        "**/test.{js,jsx,ts,tsx,mjs,cjs,mts,cts}",
        "**/test/**/*.{js,jsx,ts,tsx,mjs,cjs,mts,cts}",
    ],
    append_only: Some(AppendOnly {
        introduces,
        imported_modules,
    }),
    entry_files: &[],
    entry_line: None,
    inline_tests: None,
    shadows_assertions: None,
};

const WRITERS: &[&str] = &[
    "console.log",
    "console.info",
    "console.debug",
    "console.trace",
    "console.dir",
    "console.dirxml",
    "console.table",
    "console.group",
    "process.stdout.write",
    "process.stderr.write",
];

/// Node kinds only code makes: a prose sentence that happens to parse
/// holds none of them.
const CODE_KINDS: &[&str] = &[
    "call_expression",
    "assignment_expression",
    "lexical_declaration",
    "variable_declaration",
    "return_statement",
    "if_statement",
    "for_statement",
    "for_in_statement",
    "while_statement",
    "function_declaration",
    "import_statement",
    "export_statement",
    "class_declaration",
    "throw_statement",
    "subscript_expression",
];

/// JavaScript's and TypeScript's keywords, what `typeof` answers, and the
/// global constructors.
const NAMES: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "else",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "let",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "async",
    "await",
    "undefined",
    "NaN",
    "Infinity",
    "string",
    "number",
    "boolean",
    "object",
    "symbol",
    "bigint",
    "any",
    "unknown",
    "never",
    "interface",
    "enum",
    "type",
    "Array",
    "Object",
    "String",
    "Number",
    "Boolean",
    "Symbol",
    "BigInt",
    "Date",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "Promise",
    "RegExp",
    "Error",
    "JSON",
    "Math",
    "Function",
    "Uint8Array",
    "ArrayBuffer",
    "Buffer",
];

/// `[protect] tests = "append_only"`: what a new top-level statement of a
/// test file introduces — an anonymous test, a function, a `const`/`let`,
/// an import ([`super::AppendOnly`]).
fn introduces(added: &Added<'_>) -> Option<Vec<String>> {
    let first = *added.rest.first()?;
    let (attrs, rest) = (added.attrs, added.rest);
    let ident = super::syntax::ident_prefix;
    if !attrs.is_empty() {
        return None;
    }
    for call in [
        "test(",
        "it(",
        "describe(",
        "test.each",
        "it.each",
        "describe.each",
    ] {
        if first.starts_with(call) {
            // A test is anonymous: it adds, and reaches nothing.
            return Some(Vec::new());
        }
    }
    if let Some(r) = first
        .strip_prefix("function ")
        .or_else(|| first.strip_prefix("async function "))
    {
        return Some(vec![ident(r.trim_start_matches('*').trim())]);
    }
    for decl in ["const ", "let "] {
        if let Some(r) = first.strip_prefix(decl) {
            let name = ident(r);
            return (!name.is_empty()).then(|| vec![name]);
        }
    }
    if first.starts_with("import ") && !first.contains("import(") {
        let flat = rest.join(" ");
        let names = flat
            .strip_prefix("import ")?
            .split(" from ")
            .next()?
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .filter(|w| !w.is_empty() && *w != "as" && *w != "type")
            .map(str::to_owned)
            .collect::<Vec<_>>();
        return Some(names);
    }
    None
}

/// The module an `import … from` statement names (the specifier is a
/// string, emptied by the lexer: read from the raw text).
fn imported_modules(added: &Added<'_>) -> Vec<String> {
    added
        .text
        .split(" from ")
        .nth(1)
        .map(|r| {
            r.trim()
                .trim_matches(|c| c == '\'' || c == '"' || c == ';' || c == '\n')
                .to_owned()
        })
        .into_iter()
        .collect()
}
