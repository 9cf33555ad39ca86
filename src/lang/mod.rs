//! What loopd knows about each programming language, in one place: one
//! module per language (`python`, `js`, `go`, `rust`), each a [`Language`]
//! value of data, registered in [`LANGUAGES`].
//!
//! The judges (the pre-critic's checks, the append-only rule) read these
//! tables instead of matching on which language a file is in, so that a new
//! language is one module here and one line in [`LANGUAGES`]: its grammar,
//! its comments, its names, the calls that write to the terminal, the
//! shapes its handlers swallow errors in, what marks code as running under
//! its test runner. Where data cannot say it, a plain `fn` pointer does.
//!
//! This module sits low (beside `runner`): it needs only tree-sitter and
//! the regex crate, so every judge may read it.

pub mod go;
pub mod js;
pub mod python;
pub mod rust;
pub mod syntax;

use std::sync::OnceLock;

use regex::Regex;

/// Every language loopd reads, by file extension. The shape of
/// `agent::AGENTS`: a language is registered here and nowhere else.
pub static LANGUAGES: &[&Language] = &[&python::PYTHON, &rust::RUST, &js::JS, &go::GO];

/// One language: its grammar and everything the judges ask of its code.
pub struct Language {
    /// The registry's name for it (what [`Lang`] carries).
    pub name: &'static str,
    /// Its tree-sitter grammars, by extension; the first is the one for a
    /// path with none of the extensions (TypeScript and TSX have their own,
    /// a superset of JavaScript's that would read type annotations as
    /// errors).
    pub grammars: &'static [Grammar],
    /// What starts a line comment (`#`, `//`).
    pub line_comment: &'static str,
    /// What, right after the comment marker, makes a comment no plain
    /// comment: a doc comment (`///`, `//!`), a shebang (`#!`), a
    /// directive glued to the marker (`//go:embed`).
    pub comment_directives: &'static [&'static str],
    /// A tool's pragma, after the marker and any space (`# noqa`,
    /// `// eslint-disable`): not a comment a human wrote for humans.
    pub pragmas: &'static [&'static str],
    /// The language's own names: keywords, builtins, its own and its
    /// standard library's type names ([`Language::reserved`]).
    pub reserved: &'static [&'static str],
    /// The calls that write to the terminal.
    pub terminal: Terminal,
    /// How code says it runs only as a script.
    pub script: Script,
    /// The handler shapes that swallow an error, by the node kind that
    /// carries each.
    pub swallows: &'static [(&'static str, Swallow)],
    /// Node kinds only code makes: a comment whose text parses into one of
    /// them is commented-out code, prose that happens to parse holds none.
    pub code_kinds: &'static [&'static str],
    /// What a snippet of statements is wrapped in to parse on its own
    /// (Rust and Go statements live in a function body): before, after.
    pub statement_context: (&'static str, &'static str),
    /// How library code can tell it runs under the test runner.
    pub under_test: UnderTest,
    /// How a test file imports the code under test, where loopd reads it
    /// (what a test may not rebind).
    pub imports: Option<Imports>,
    /// How a file splits into top-level statements where its tree has
    /// errors (the append-only rule's fallback).
    pub lexical: Lexical,
    /// The first two lines may declare the source's encoding (Python's
    /// `# -*- coding: … -*-`), which makes the language read other text
    /// than loopd does when it is not UTF-8.
    pub declares_encoding: bool,
    /// Globs of its test files: what exists at BASE_REF and matches is
    /// protected ([`crate::judges::finding::test_globs`]).
    pub tests: &'static [&'static str],
    /// What `[protect] tests = "append_only"` reads in its test files
    /// (`None`: nothing — any change to an existing test file is refused).
    pub append_only: Option<AppendOnly>,
    /// File names that are a program's entry point (`main.py`,
    /// `build.rs`), where output is the program's own.
    pub entry_files: &'static [&'static str],
    /// A line that makes any file of the language an entry point (Go's
    /// `package main`).
    pub entry_line: Option<&'static str>,
    /// Where its tests live inside source files (Rust's `#[cfg(test)] mod
    /// tests`): those are tests that existed at BASE_REF as much as a
    /// test file's, judged item by item ([`InlineTests`]). `None`: the
    /// language keeps its tests in test files only.
    pub inline_tests: Option<fn(tree_sitter::Node<'_>, &str) -> Vec<InlineTests>>,
    /// Code that redefines the language's assertions for everything after
    /// it (Rust's `macro_rules! assert_eq`): every test assertion in scope
    /// would then check nothing.
    pub shadows_assertions: Option<Pattern>,
}

/// One item of test code inside a source file, as found on the file's
/// syntax tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineTests {
    /// What names it in its file: its kind and path (`mod tests`,
    /// `fn adds`, `mod parse::tests` for one nested in `mod parse`).
    pub name: String,
    /// Its bytes, attributes included.
    pub item: std::ops::Range<usize>,
    /// The bytes of its body when it holds items of its own (a module's,
    /// braces left out): judged statement by statement, as an append-only
    /// test file. `None`: compared whole.
    pub body: Option<std::ops::Range<usize>>,
}

/// How `[protect] tests = "append_only"` reads a new top-level statement
/// of one of the language's test files.
pub struct AppendOnly {
    /// The names the statement introduces when the allow-list takes it (a
    /// new test, a helper, an import of plain names; `Some(vec![])` for an
    /// anonymous test), or `None` for anything that could reach the
    /// existing tests.
    pub introduces: fn(&Added<'_>) -> Option<Vec<String>>,
    /// The modules an import statement names (what an extended old import
    /// must keep naming).
    pub imported_modules: fn(&Added<'_>) -> Vec<String>,
}

/// A top-level statement an append-only change added, as its rules read
/// it.
pub struct Added<'a> {
    /// Its leading decorators or attributes (`@pytest.mark…`, `#[test]`).
    pub attrs: &'a [&'a str],
    /// Its other code lines, trimmed, comment lines left out.
    pub rest: &'a [&'a str],
    /// Its whole text.
    pub text: &'a str,
}

impl Added<'_> {
    /// Its code lines with strings emptied and comments out, on one line
    /// (`import x  # noqa: F403` reads as `import x`).
    pub fn flat(&self) -> String {
        self.attrs
            .iter()
            .chain(self.rest)
            .map(|l| syntax::scan(l, None, 0).0)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One tree-sitter grammar and the extensions it reads.
pub struct Grammar {
    pub extensions: &'static [&'static str],
    /// A function, not a value: tree-sitter's `Language` is built at run time.
    pub language: fn() -> tree_sitter::Language,
}

/// The calls of a language that write to the terminal, as the dotted path
/// the pre-critic resolves a callee to (`sys.stdout.write`,
/// `console.log`, `std::io::stdout().write_all`).
pub struct Terminal {
    /// Calls that print, called as these.
    pub writers: &'static [&'static str],
    /// How a finding names such a call (`a print`, `a console print`).
    pub print: &'static str,
    /// How a finding names one of them handed to another call, which calls
    /// it (`xs.forEach(console.log)`).
    pub print_handed_on: &'static str,
    /// The terminal streams: a call of one of [`Terminal::stream_methods`]
    /// on them prints.
    pub streams: &'static [&'static str],
    pub stream_methods: &'static [&'static str],
    /// Suffixes, then prefixes, taken off a stream's path once each, in
    /// order, before it is looked up (`std::io::stdout().lock()` is
    /// `stdout()`).
    pub stream_suffixes_dropped: &'static [&'static str],
    pub stream_prefixes_dropped: &'static [&'static str],
    /// Suffixes that call what they follow unchanged (`print.__call__`,
    /// `console.log.call`): the first that matches is taken off.
    pub call_forms: &'static [&'static str],
    /// The method that hands on the callable it is called on
    /// (`console.log.bind(console)` is `console.log`).
    pub bind: Option<&'static str>,
    /// A call's value is named by its callee and `()` (Rust's `stdout()` is
    /// the stream the path continues from).
    pub calls_named_with_parens: bool,
    /// Calls that write to the stream or file descriptor they are handed
    /// as the argument at the index: a print when it is the terminal.
    pub to_argument: &'static [(&'static str, usize)],
    /// What names the terminal as such an argument, resolved: the streams,
    /// and (as a call's callee) what returns their descriptor.
    pub terminals: &'static [&'static str],
    /// Calls that write to the terminal at an error level (the level):
    /// output only when what they say reads as debugging, like a logger's.
    pub error_level: &'static [(&'static str, &'static str)],
    /// A logger's methods and the level each logs at.
    pub log_methods: &'static [(&'static str, &'static str)],
    /// A logger method is named by its start (Go's `Infof`, `Errorw`).
    pub log_methods_by_prefix: bool,
    /// Calls that return a module by its name (`__import__("sys")`).
    pub importers: &'static [&'static str],
    /// The scheme a builtin module may be named with (`node:fs`).
    pub module_scheme: Option<&'static str>,
    /// The names under which a program reaches its global object, and the
    /// paths under it that mean the same without it (an entry ending in
    /// `.` is a prefix, else the whole path).
    pub global_objects: &'static [&'static str],
    pub global_paths: &'static [&'static str],
    /// Calls that stop in a debugger (`breakpoint()`).
    pub debugger_calls: &'static [&'static str],
    /// Modules whose import is a debugger hook (`import pdb`).
    pub debugger_modules: &'static [&'static str],
}

/// How a language's code says it runs as a script, not as a library.
pub struct Script {
    /// The node kind of a condition's statement (`if __name__ ==
    /// "__main__":`).
    pub if_kind: &'static str,
    /// The conditions that guard a module's script side, read with spaces,
    /// parentheses and quotes normalised.
    pub guards: &'static [Guard],
    /// The functions that are the script side.
    pub main: Option<MainFunction>,
}

/// A main guard's condition.
pub enum Guard {
    /// The condition is exactly this.
    Is(&'static str),
    /// The condition holds this.
    Contains(&'static str),
}

/// The functions a language runs as its program.
pub struct MainFunction {
    /// The node kind of a function definition.
    pub kind: &'static str,
    pub names: &'static [&'static str],
    /// Only a top-level one, and only in a module with a main guard
    /// (Python's `main()` called under `if __name__ == "__main__":`).
    pub only_under_a_guard: bool,
}

impl Guard {
    pub fn matches(&self, condition: &str) -> bool {
        match self {
            Guard::Is(c) => condition == *c,
            Guard::Contains(c) => condition.contains(c),
        }
    }
}

/// The shapes a handler swallows an error in; which node kind carries each
/// is the language's ([`Language::swallows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swallow {
    /// A broad `except` whose body does nothing, or a bare `except:`.
    BroadExcept,
    /// `return`, `break` or `continue` in `finally`.
    ExitInFinally,
    /// `with contextlib.suppress(Exception):`.
    SuppressAll,
    /// An empty `catch`, or one that only assigns a default.
    EmptyCatch,
    /// `p.catch(() => {})`.
    EmptyPromiseCatch,
    /// Go's `_ = err`, `_ = os.Remove(p)`.
    BlankAssign,
    /// Go's empty `if err != nil {}`.
    EmptyErrCheck,
    /// Rust's `_ = call();`.
    DroppedAssign,
    /// Rust's `let _ = call();`.
    DroppedLet,
    /// Rust's `call().ok();`.
    DroppedOk,
    /// Rust's `Err(_) => {}`.
    IgnoredErrArm,
}

/// How library code can tell it runs under the language's test runner.
pub struct UnderTest {
    /// A marker only the runner sets (`PYTEST_CURRENT_TEST`, `cfg!(test)`).
    pub markers: Pattern,
    /// Reaching into the runner itself (its options, its assertions).
    pub runner_reach: Option<Pattern>,
    /// A convention apps use honestly too (`NODE_ENV === 'test'`): read
    /// only late, when special-casing of tests typically emerges.
    pub convention: Option<Pattern>,
    /// The attribute that opens the file's own test module
    /// (`#[cfg(test)]`), inside which a marker is the module's business.
    pub test_module_attribute: Option<&'static str>,
}

/// How a test file names the modules and names it imports.
pub struct Imports {
    /// A module import: group 1 the module, group 2 its alias.
    pub module: Pattern,
    /// An import of names from a module: group 1 the names, by commas.
    pub names: Pattern,
    /// Modules a test imports for the runner, not as the code under test.
    pub test_support: &'static [&'static str],
}

/// How a language's top-level statements are found without its grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lexical {
    /// By indentation (Python's: `#` comments, its quotes and prefixes);
    /// indentation is syntax, so tabs mixed with spaces are ambiguous.
    Indentation,
    /// By brackets, with the language's strings.
    Braces(Brace),
}

/// How a brace language's strings read, for the lexical splitter: a
/// bracket inside a string or a comment is no bracket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Brace {
    /// Quotes whose strings may span lines; any other closes at the line's
    /// end.
    pub spanning_quotes: &'static [u8],
    /// A backslash escapes inside a backtick string (a JS template).
    pub backtick_escapes: bool,
    /// `r#"…"#` raw strings (Rust).
    pub raw_strings: bool,
    /// `'x'` is a char literal or a lifetime, not a string (Rust).
    pub char_literals: bool,
}

/// A regular expression a language's data names, compiled on first use.
pub struct Pattern {
    pub source: &'static str,
    compiled: OnceLock<Regex>,
}

impl Pattern {
    pub const fn new(source: &'static str) -> Pattern {
        Pattern {
            source,
            compiled: OnceLock::new(),
        }
    }

    pub fn regex(&self) -> &Regex {
        self.compiled
            .get_or_init(|| Regex::new(self.source).expect("a language's regex is valid"))
    }
}

/// Pragmas of the `//` languages. One list for all three: a tool's
/// directive may land in any of their files, and the pre-critic has always
/// read them alike.
pub(crate) const SLASH_PRAGMAS: &[&str] = &[
    "eslint",
    "prettier-ignore",
    "@ts-",
    "istanbul",
    "c8 ",
    "jshint",
    "global ",
    "nolint",
    "+build",
    "rustfmt::",
    "biome-ignore",
    "deno-lint",
];

/// What glued to `//` is no plain comment, in the `//` languages: a doc
/// comment (`///`, `//!`), Go's `//go:` and `//line ` directives.
pub(crate) const SLASH_DIRECTIVES: &[&str] = &["/", "!", "go:", "line "];

/// Type names every language's code compares against when it reads
/// another format's types (a schema's `"date"`, `"integer"`, `"datetime"`).
const COMMON_TYPE_NAMES: &[&str] = &[
    "int",
    "integer",
    "float",
    "double",
    "decimal",
    "number",
    "numeric",
    "string",
    "str",
    "text",
    "bool",
    "boolean",
    "date",
    "datetime",
    "time",
    "timestamp",
    "duration",
    "null",
    "none",
    "array",
    "list",
    "object",
    "dict",
    "map",
    "bytes",
    "binary",
    "uuid",
    "json",
];

fn extension(path: &str) -> Option<&str> {
    path.rsplit_once('.').map(|(_, e)| e)
}

impl Language {
    /// The language of a path, by its extension.
    pub fn of(path: &str) -> Option<&'static Language> {
        let ext = extension(path)?;
        LANGUAGES
            .iter()
            .copied()
            .find(|l| l.extensions().any(|e| e == ext))
    }

    /// Every extension the language's grammars read.
    pub fn extensions(&self) -> impl Iterator<Item = &'static str> {
        self.grammars
            .iter()
            .flat_map(|g| g.extensions.iter().copied())
    }

    /// The grammar for a path of this language.
    pub fn grammar(&self, path: &str) -> tree_sitter::Language {
        let ext = extension(path).unwrap_or("");
        let g = self
            .grammars
            .iter()
            .find(|g| g.extensions.contains(&ext))
            .or(self.grammars.first())
            .expect("every language has a grammar (the registry's test)");
        (g.language)()
    }

    /// The line-comment text of `line`, if the line is a plain comment
    /// (doc comments and pragmas are not).
    pub fn comment<'l>(&self, line: &'l str) -> Option<&'l str> {
        let c = line.trim_start().strip_prefix(self.line_comment)?;
        let body = c.trim_start();
        let directive = self.comment_directives.iter().any(|d| c.starts_with(d))
            || self.pragmas.iter().any(|p| body.starts_with(p));
        (!directive).then_some(c)
    }

    /// Whether `word` is one of the language's own names — a keyword, a
    /// builtin, a type name (its own or its standard library's): what
    /// honest code compares against (`if kind == "int"`, `typeof x ===
    /// "string"`) and never a value only the tests use.
    pub fn reserved(&self, word: &str) -> bool {
        self.reserved.contains(&word) || COMMON_TYPE_NAMES.contains(&word)
    }

    /// The swallowing shape a node kind carries in this language.
    pub fn swallow(&self, kind: &str) -> Option<Swallow> {
        self.swallows
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, s)| *s)
    }
}

/// A language as the judges carry it: a `Copy` handle to its registered
/// [`Language`], which it reads as (one pointer: the judges read a
/// language's tables on every node they visit). Two handles are the same
/// language when they name the same one.
#[derive(Clone, Copy)]
pub struct Lang(&'static Language);

impl Lang {
    /// The language of a path, by its extension.
    pub fn of(path: &str) -> Option<Lang> {
        Language::of(path).map(Lang)
    }

    /// The registered language this handle is.
    pub fn language(self) -> &'static Language {
        self.0
    }
}

impl PartialEq for Lang {
    fn eq(&self, other: &Lang) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Lang {}

impl std::ops::Deref for Lang {
    type Target = Language;
    fn deref(&self) -> &Language {
        self.0
    }
}

impl std::fmt::Debug for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The handles the judges name in code.
    const HANDLES: &[Lang] = &[Lang::Python, Lang::Rust, Lang::Js, Lang::Go];

    #[test]
    fn the_registry_is_consistent() {
        let mut names = BTreeMap::new();
        let mut claimed: BTreeMap<&str, &str> = BTreeMap::new();
        for l in LANGUAGES {
            assert!(
                names.insert(l.name, ()).is_none(),
                "two languages are named {}",
                l.name
            );
            assert!(!l.grammars.is_empty(), "{} has no grammar", l.name);
            for e in l.extensions() {
                if let Some(other) = claimed.insert(e, l.name) {
                    panic!("`.{e}` is claimed by {other} and {}", l.name);
                }
                let path = format!("a.{e}");
                assert_eq!(Language::of(&path).map(|x| x.name), Some(l.name), "{path}");
            }
            // Every grammar parses a trivial snippet of the language: an
            // empty file and a comment, cleanly.
            for g in l.grammars {
                let mut parser = tree_sitter::Parser::new();
                parser
                    .set_language(&(g.language)())
                    .expect("the grammar matches tree-sitter's ABI");
                let snippet = format!("{} a comment\n", l.line_comment);
                let tree = parser.parse(&snippet, None).expect("parses");
                assert!(!tree.root_node().has_error(), "{}: {snippet:?}", l.name);
                assert!(
                    l.comment(&snippet).is_some(),
                    "{}: a plain comment reads as one",
                    l.name
                );
            }
            // Every pattern compiles.
            for p in [
                Some(&l.under_test.markers),
                l.under_test.runner_reach.as_ref(),
            ]
            .into_iter()
            .chain([
                l.under_test.convention.as_ref(),
                l.shadows_assertions.as_ref(),
            ])
            .flatten()
            {
                assert!(Regex::new(p.source).is_ok(), "{}: {}", l.name, p.source);
            }
            if let Some(i) = &l.imports {
                assert!(Regex::new(i.module.source).is_ok(), "{}", l.name);
                assert!(Regex::new(i.names.source).is_ok(), "{}", l.name);
            }
            // The swallowing shapes name each node kind once.
            let mut kinds: Vec<&str> = l.swallows.iter().map(|(k, _)| *k).collect();
            kinds.sort_unstable();
            kinds.dedup();
            assert_eq!(kinds.len(), l.swallows.len(), "{}", l.name);
        }
        // Every handle the judges name is a registered language (a handle
        // of none would panic where it is read).
        for h in HANDLES {
            assert!(
                LANGUAGES.iter().any(|l| std::ptr::eq(*l, h.language())),
                "Lang::{h:?} is no registered language"
            );
        }
    }

    #[test]
    fn a_path_finds_its_language_and_grammar() {
        assert_eq!(Lang::of("a/b.pyi"), Some(Lang::Python));
        assert_eq!(Lang::of("x.tsx"), Some(Lang::Js));
        assert_eq!(Lang::of("x.go"), Some(Lang::Go));
        assert_eq!(Lang::of("x.rs"), Some(Lang::Rust));
        assert_eq!(Lang::of("x.txt"), None);
        assert_eq!(Lang::of("Makefile"), None);
        // TypeScript's grammar reads an annotation JavaScript's cannot.
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&Lang::Js.grammar("a.ts")).expect("abi");
        let ts = parser.parse("let x: number = 1;\n", None).expect("parses");
        assert!(!ts.root_node().has_error());
        parser.set_language(&Lang::Js.grammar("a.js")).expect("abi");
        let js = parser.parse("let x: number = 1;\n", None).expect("parses");
        assert!(js.root_node().has_error());
    }

    #[test]
    fn pragmas_and_doc_comments_are_no_plain_comments() {
        assert_eq!(Lang::Python.comment("  # hi"), Some(" hi"));
        assert_eq!(Lang::Python.comment("# noqa: E501"), None);
        assert_eq!(Lang::Python.comment("#!/usr/bin/env python"), None);
        assert_eq!(Lang::Rust.comment("/// doc"), None);
        assert_eq!(Lang::Rust.comment("// why"), Some(" why"));
        assert_eq!(Lang::Go.comment("//go:embed x"), None);
        assert_eq!(Lang::Js.comment("// eslint-disable-line"), None);
        assert!(Lang::Go.reserved("uint8") && Lang::Go.reserved("date"));
        assert!(!Lang::Python.reserved("uint8"));
    }
}
