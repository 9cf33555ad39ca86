//! Python: `.py` and `.pyi`.

use super::{
    Added, AppendOnly, Grammar, Guard, Imports, Lang, Language, Lexical, MainFunction, Pattern,
    Script, Swallow, Terminal, UnderTest,
};

const NAME: &str = "python";

impl Lang {
    /// Named like the enum variant it was, so call sites read the same.
    #[allow(non_upper_case_globals)]
    pub const Python: Lang = Lang(&PYTHON);
}

pub static PYTHON: Language = Language {
    name: NAME,
    grammars: &[Grammar {
        extensions: &["py", "pyi"],
        language: || tree_sitter_python::LANGUAGE.into(),
    }],
    line_comment: "#",
    // A shebang.
    comment_directives: &["!"],
    // A tool's directive: `# fmt: off`, `# isort: skip`, …
    pragmas: &[
        "type:", "noqa", "-*-", "pragma", "fmt:", "isort:", "pylint:", "mypy:", "pyright:",
        "ruff:", "nosec", "yapf:", "coding", "vim:",
    ],
    reserved: NAMES,
    terminal: Terminal {
        writers: WRITERS,
        print: "a print",
        print_handed_on: "a print handed to a call",
        streams: STREAMS,
        stream_methods: &["write", "writelines"],
        stream_suffixes_dropped: &[],
        stream_prefixes_dropped: &[],
        call_forms: &[".__call__"],
        bind: None,
        calls_named_with_parens: false,
        to_argument: &[("os.write", 0)],
        terminals: &[
            "sys.stdout",
            "sys.stderr",
            "sys.__stdout__",
            "sys.__stderr__",
            "sys.stdout.fileno",
            "sys.stderr.fileno",
        ],
        error_level: &[],
        log_methods: &[
            ("debug", "debug"),
            ("info", "info"),
            ("warning", "warning"),
            ("warn", "warn"),
            ("error", "error"),
            ("exception", "exception"),
            ("critical", "critical"),
        ],
        log_methods_by_prefix: false,
        importers: &["__import__", "importlib.import_module"],
        module_scheme: None,
        global_objects: &[],
        global_paths: &[],
        debugger_calls: &[
            "breakpoint",
            "pdb.set_trace",
            "ipdb.set_trace",
            "pudb.set_trace",
        ],
        debugger_modules: &["pdb", "ipdb", "pudb"],
    },
    script: Script {
        if_kind: "if_statement",
        guards: &[
            Guard::Is(r#"__name__=="__main__""#),
            Guard::Is(r#""__main__"==__name__"#),
        ],
        main: Some(MainFunction {
            kind: "function_definition",
            names: &["main", "_main", "cli", "run_cli"],
            only_under_a_guard: true,
        }),
    },
    swallows: &[
        ("except_clause", Swallow::BroadExcept),
        ("finally_clause", Swallow::ExitInFinally),
        ("with_statement", Swallow::SuppressAll),
    ],
    code_kinds: CODE_KINDS,
    statement_context: ("", "\n"),
    under_test: UnderTest {
        markers: Pattern::new(
            r#"\bPYTEST_[A-Z_]+|["'](?:_?pytest|unittest)["'][^\n]*\b(?:modules|argv)\b|\b(?:modules|argv)\b[^\n]*["'](?:_?pytest|py\.test|-m pytest|unittest)["']|\bpytest\.__|\bimport\s+_pytest\b|\bfrom\s+_pytest\b|__import__\(\s*["']_?pytest"#,
        ),
        // Reaching into the test framework's assertions, or into the
        // interpreter's builtins the tests call: library code has no
        // honest reason to rebind either.
        runner_reach: Some(Pattern::new(
            r"\bTestCase\s*\.\s*(?:assert|fail)\w*\s*=[^=]|setattr\(\s*(?:unittest\s*\.\s*)?TestCase\b|\bbuiltins\s*\.\s*\w+\s*=[^=]|setattr\(\s*builtins\b|__builtins__\s*(?:\[[^\]\n]+\]|\.\s*\w+)\s*=[^=]|\bimport\s+builtins\s+as\b",
        )),
        convention: None,
        test_module_attribute: None,
    },
    imports: Some(Imports {
        module: Pattern::new(r"(?m)^\s*import\s+([\w.]+)(?:\s+as\s+(\w+))?"),
        names: Pattern::new(r"(?m)^\s*from\s+[\w.]+\s+import\s+\(?([^)\n#]+)"),
        test_support: &["pytest", "unittest", "mock"],
    }),
    lexical: Lexical::Indentation,
    declares_encoding: true,
    // pytest's default names, and the module Django's and unittest's
    // projects keep their tests in.
    tests: &[
        "**/test_*.py",
        "**/*_test.py",
        "**/tests/**/*.py",
        "**/conftest.py",
        "**/tests.py",
    ],
    append_only: Some(AppendOnly {
        introduces,
        imported_modules,
    }),
    entry_files: &["__main__.py", "main.py", "cli.py", "manage.py", "setup.py"],
    entry_line: None,
    inline_tests: None,
    shadows_assertions: None,
};

/// Called as these, they print.
const WRITERS: &[&str] = &[
    "print",
    "pprint.pprint",
    "pprint.pp",
    "builtins.print",
    "__builtins__.print",
];

/// The terminal streams: their `write`/`writelines` print.
const STREAMS: &[&str] = &[
    "sys.stdout",
    "sys.stderr",
    "sys.__stdout__",
    "sys.__stderr__",
    "sys.stdout.buffer",
    "sys.stderr.buffer",
];

/// Node kinds only code makes: a prose sentence that happens to parse
/// (`TODO: refactor`, `import this`) holds none of them.
const CODE_KINDS: &[&str] = &[
    "call",
    "assignment",
    "augmented_assignment",
    "return_statement",
    "import_from_statement",
    "function_definition",
    "class_definition",
    "if_statement",
    "for_statement",
    "while_statement",
    "raise_statement",
    "with_statement",
    "try_statement",
    "assert_statement",
    "subscript",
];

/// Python's keywords and soft keywords, its builtins (`dir(builtins)`, the
/// exceptions aside), and the standard library's and `typing`'s type names.
const NAMES: &[&str] = &[
    "Ellipsis",
    "False",
    "None",
    "NotImplemented",
    "True",
    "abs",
    "aiter",
    "all",
    "and",
    "anext",
    "any",
    "as",
    "ascii",
    "assert",
    "async",
    "await",
    "bin",
    "bool",
    "break",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "case",
    "chr",
    "class",
    "classmethod",
    "compile",
    "complex",
    "continue",
    "def",
    "del",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "elif",
    "else",
    "enumerate",
    "eval",
    "except",
    "exec",
    "exit",
    "filter",
    "finally",
    "float",
    "for",
    "format",
    "from",
    "frozenset",
    "getattr",
    "global",
    "globals",
    "hasattr",
    "hash",
    "hex",
    "id",
    "if",
    "import",
    "in",
    "input",
    "int",
    "is",
    "isinstance",
    "issubclass",
    "iter",
    "lambda",
    "len",
    "list",
    "locals",
    "map",
    "match",
    "max",
    "memoryview",
    "min",
    "next",
    "nonlocal",
    "not",
    "object",
    "oct",
    "open",
    "or",
    "ord",
    "pass",
    "pow",
    "print",
    "property",
    "raise",
    "range",
    "repr",
    "return",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "try",
    "tuple",
    "type",
    "vars",
    "while",
    "with",
    "yield",
    "zip",
    "NoneType",
    "Decimal",
    "decimal",
    "Fraction",
    "UUID",
    "uuid",
    "Path",
    "Any",
    "Optional",
    "Union",
    "List",
    "Dict",
    "Tuple",
    "Set",
    "FrozenSet",
    "Callable",
    "Iterable",
    "Iterator",
    "Sequence",
    "Mapping",
    "Literal",
    "timedelta",
    "timezone",
    "tzinfo",
    "Enum",
    "IntEnum",
    "dataclass",
];

/// `[protect] tests = "append_only"`: what a new top-level statement of a
/// test module introduces, when the allow-list takes it — a test function
/// or class whose header and decorators run nothing at import, or an
/// import of plain names ([`super::AppendOnly`]).
fn introduces(added: &Added<'_>) -> Option<Vec<String>> {
    let first = *added.rest.first()?;
    let (attrs, rest) = (added.attrs, added.rest);
    let ident = super::syntax::ident_prefix;
    let ok_decorator = |d: &str| {
        (d.starts_with("@pytest.fixture") && !d.contains("autouse") && !d.contains("name"))
            || d.starts_with("@pytest.mark.parametrize")
            || d.starts_with("@pytest.mark.")
                && !["skip", "xfail", "usefixtures"]
                    .iter()
                    .any(|m| d.contains(m))
    };
    if !attrs.iter().all(|d| ok_decorator(d) && !runs_code(d)) {
        return None;
    }
    // What runs when the `def` or `class` line does (a default, an
    // annotation, a base class): code at import, before any test.
    let header = python_header(rest);
    if let Some(r) = first
        .strip_prefix("def ")
        .or_else(|| first.strip_prefix("async def "))
    {
        let signature = header.split_once('(').map_or("", |(_, s)| s);
        return (!signature.contains('(') && !runs_code(signature)).then(|| vec![ident(r)]);
    }
    if let Some(r) = first.strip_prefix("class ") {
        // A class body runs at import: only methods (and a
        // docstring) may be in it.
        let body_ok = rest[1..].iter().all(|l| {
            l.starts_with("def ")
                || l.starts_with("async def ")
                || l.starts_with('@') && !runs_code(l)
                || l.starts_with("\"\"\"")
                || l.starts_with("pass")
                || !added.text.lines().any(|t| t.trim() == *l && indent(t) == 4)
        });
        return (attrs.is_empty() && !header.contains('(') && body_ok).then(|| vec![ident(r)]);
    }
    if !attrs.is_empty() {
        return None;
    }
    // Comments out, so `import x  # noqa: F403` reads as `import x`.
    let flat: String = rest
        .iter()
        .map(|l| super::syntax::scan(l, None, 0).0)
        .collect::<Vec<_>>()
        .join(" ");
    let flat = flat.trim();
    let names = if let Some(r) = flat.strip_prefix("import ") {
        r.split(',')
            .map(|n| n.split_whitespace().last().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    } else if let Some(r) = flat.strip_prefix("from ") {
        let (module, names) = r.split_once(" import ")?;
        if module.trim().starts_with("_pytest") || module.trim().starts_with("conftest") {
            return None;
        }
        names
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .filter(|n| !n.trim().is_empty())
            .map(|n| n.split_whitespace().last().unwrap_or("").to_owned())
            .collect()
    } else {
        return None;
    };
    (!flat.contains(';') && names.iter().all(|n| n != "*" && !n.starts_with("pytest_"))).then_some(
        names
            .into_iter()
            .map(|n| n.trim_end_matches(')').to_owned())
            .collect(),
    )
}

/// The modules an `import`/`from … import` statement names.
fn imported_modules(added: &Added<'_>) -> Vec<String> {
    let flat = added.flat();
    let flat = flat.trim();
    if let Some(r) = flat.strip_prefix("import ") {
        r.split(',')
            .filter_map(|m| m.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    } else if let Some(r) = flat.strip_prefix("from ") {
        r.split_whitespace()
            .next()
            .map(str::to_owned)
            .into_iter()
            .collect()
    } else {
        Vec::new()
    }
}

/// Whether a piece of Python code rebinds or reaches into names at run
/// time: a call is not enough (a decorator's `Decimal("1")` is honest), but
/// an assignment expression, a lambda, `globals()`/`vars()`, `setattr` or
/// `__setitem__`/`update` of a namespace is.
fn runs_code(code: &str) -> bool {
    static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    crate::util::once_regex(
        &R,
        r"\bglobals\s*\(|\bvars\s*\(|\blocals\s*\(|:=|\blambda\b|\bsetattr\s*\(|__setitem__|__dict__|\bexec\s*\(|\beval\s*\(|__import__|sys\.modules",
    )
    .is_match(code)
}

/// The `def`/`class` header of a statement's code lines (up to the `:` that
/// ends it), strings emptied.
fn python_header(rest: &[&str]) -> String {
    let mut header = String::new();
    for l in rest {
        let code = super::syntax::scan(l, None, 0).0;
        header.push_str(&code);
        header.push(' ');
        if code.trim_end().ends_with(':') {
            break;
        }
    }
    header
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}
