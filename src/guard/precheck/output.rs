//! Calls that write to the terminal, however the added code spells them.
//!
//! A line regex anchored at `print(` was evaded by `print ("DEBUG", x)`,
//! `_ = print(x)`, `if x: print(x)`, `sys.stdout.write`, `builtins.print`
//! and an alias (`out = print`). This reads a line's *code* — its string
//! literals emptied and its trailing comment cut, so that neither hides
//! nor fakes a call — and looks for a call of any name that writes to the
//! terminal anywhere in it, the file's own aliases of those names included
//! (`import sys as s`, `from sys import stdout`, `p = print`,
//! `const log = console.log`). It is lexical, not a parser: an alias made
//! through a container or a function's return value is not followed.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use regex::Regex;

use crate::util::once_regex as re;

use super::Lang;

/// What an added line's call writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Output {
    /// A print or a write to stdout/stderr (what it is, for the finding).
    Print(&'static str),
    /// A logger call at debug level where the file, before the change,
    /// logged at no debug level: not the project's usual level.
    NewDebugLog,
    /// A logger call at the project's usual levels: output only when what
    /// it says reads as debugging.
    Log,
}

/// The names that write to the terminal in one file: the language's own,
/// and the aliases the file's new text makes of them.
pub(super) struct Writers {
    lang: Lang,
    /// Callee paths that write (`print`, `sys.stdout.write`, an alias).
    names: BTreeSet<String>,
    /// The file logged at debug level before the change.
    debug_was_usual: bool,
}

/// Every call site of a line's code: the callee's dotted path before `(`.
fn callees(code: &str) -> impl Iterator<Item = &str> {
    static CALL: OnceLock<Regex> = OnceLock::new();
    re(
        &CALL,
        r"(?:^|[^\w.$])([A-Za-z_$][\w$]*(?:\s*\??\.\s*[A-Za-z_$][\w$]*)*)\s*(?:\?\.)?\s*\(",
    )
    .captures_iter(code)
    .filter_map(|c| c.get(1).map(|m| m.as_str()))
}

/// Rust's writers are macros, and `std::io::stdout().write…`.
fn rust_writes(code: &str) -> bool {
    static RS: OnceLock<Regex> = OnceLock::new();
    re(
        &RS,
        r"(?:^|[^\w.])(?:(?:::)?std::)?e?print(?:ln)?!\s*[(\[{]|(?:^|[^\w])(?:(?:::)?std::)?(?:io::)?std(?:out|err)\(\)\s*\.\s*(?:lock\(\)\s*\.\s*)?write|\bwrite(?:ln)?!\s*\(\s*&?\s*(?:mut\s+)?(?:(?:::)?std::)?(?:io::)?std(?:out|err)\(\)",
    )
    .is_match(code)
}

/// Go's `fmt.Fprint*(os.Stdout…)`.
fn go_fprint_std(code: &str) -> bool {
    static GO: OnceLock<Regex> = OnceLock::new();
    re(
        &GO,
        r"(?:^|[^\w.])fmt\.Fprint(?:ln|f)?\s*\(\s*os\.Std(?:out|err)\b",
    )
    .is_match(code)
}

/// A logger call's level, per language.
fn log_level(lang: Lang, code: &str) -> Option<String> {
    static PY: OnceLock<Regex> = OnceLock::new();
    static JS: OnceLock<Regex> = OnceLock::new();
    static GO: OnceLock<Regex> = OnceLock::new();
    static RS: OnceLock<Regex> = OnceLock::new();
    let pattern = match lang {
        Lang::Python => re(
            &PY,
            r"(?:^|[^\w.])(?:self\.|cls\.)?(?:_*log(?:ger)?|LOG(?:GER)?|logging)\.(debug|info|warning|warn|error|exception|critical)\s*\(",
        ),
        Lang::Js => re(
            &JS,
            r"(?:^|[^\w.])(?:this\.)?(?:log(?:ger)?)\.(debug|trace|info|warn|error)\s*\(",
        ),
        Lang::Go => re(
            &GO,
            r"(?:^|[^\w.])(?:slog|log|logger)\.(Debug|Info|Warn|Error|Print|Printf|Println)\w*\s*\(",
        ),
        Lang::Rust => re(
            &RS,
            r"(?:^|[^\w])(?:log::|tracing::)?(debug|info|warn|error|trace)!\s*\(",
        ),
    };
    pattern.captures(code).map(|c| c[1].to_ascii_lowercase())
}

/// Python's writers: called as these, they print.
const PY_WRITERS: &[&str] = &[
    "print",
    "pprint",
    "pprint.pprint",
    "pprint.pp",
    "builtins.print",
    "__builtins__.print",
];
/// Python's terminal streams: their `write`/`writelines` print.
const PY_STREAMS: &[&str] = &[
    "sys.stdout",
    "sys.stderr",
    "sys.__stdout__",
    "sys.__stderr__",
];
const JS_WRITERS: &[&str] = &[
    "console.log",
    "console.info",
    "console.debug",
    "console.trace",
    "console.dir",
    "console.table",
    "process.stdout.write",
    "process.stderr.write",
];
const GO_WRITERS: &[&str] = &[
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

impl Writers {
    /// The writers of a file whose new text is `new` (its old text `old`).
    pub(super) fn of(lang: Lang, new: Option<&str>, old: Option<&str>) -> Writers {
        let names = match lang {
            Lang::Python => python_names(new.unwrap_or("")),
            Lang::Js => js_names(new.unwrap_or("")),
            Lang::Go => GO_WRITERS.iter().map(|s| (*s).to_owned()).collect(),
            // Rust's are macros: [`rust_writes`].
            Lang::Rust => BTreeSet::new(),
        };
        let debug_was_usual = old.is_some_and(|old| {
            old.lines().any(|l| {
                log_level(lang, &code_of(lang, l)).is_some_and(|lv| lv == "debug" || lv == "trace")
            })
        });
        Writers {
            lang,
            names,
            debug_was_usual,
        }
    }

    /// The output call on `line` (raw text), if it makes one.
    pub(super) fn call(&self, line: &str) -> Option<Output> {
        let code = code_of(self.lang, line);
        if defines(self.lang, &code) {
            return None;
        }
        let writes = match self.lang {
            Lang::Rust => rust_writes(&code),
            Lang::Go => {
                go_fprint_std(&code) || callees(&code).any(|c| self.names.contains(&squeeze(c)))
            }
            _ => callees(&code).any(|c| self.names.contains(&squeeze(c))),
        };
        if writes {
            return Some(Output::Print(match self.lang {
                Lang::Js => "a console print",
                _ => "a print",
            }));
        }
        let level = log_level(self.lang, &code)?;
        let debug = level == "debug" || level == "trace";
        Some(if debug && !self.debug_was_usual {
            Output::NewDebugLog
        } else {
            Output::Log
        })
    }
}

/// A callee path without the spaces around its dots (`sys . stdout`),
/// optional chaining (`console?.log`) and the global object's prefix
/// (`globalThis.console.log`).
fn squeeze(callee: &str) -> String {
    let s: String = callee
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '?')
        .collect();
    for global in ["globalThis.", "window.", "self.", "global."] {
        if let Some(rest) = s.strip_prefix(global) {
            if rest.starts_with("console.") || rest.starts_with("process.") {
                return rest.to_owned();
            }
        }
    }
    s
}

/// A definition (`def print(…)`, `fn print(…)`, `function log(…)`), not a
/// call.
fn defines(lang: Lang, code: &str) -> bool {
    let t = code.trim_start();
    let words: &[&str] = match lang {
        Lang::Python => &["def ", "async def ", "class "],
        Lang::Rust => &["fn ", "pub fn ", "pub(crate) fn ", "macro_rules!"],
        Lang::Js => &["function ", "async function "],
        Lang::Go => &["func "],
    };
    words.iter().any(|w| t.starts_with(w))
}

/// `line` with the contents of its string literals removed (the quotes
/// kept) and its trailing line comment cut: what the line *does*.
pub(super) fn code_of(lang: Lang, line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let comment = match lang {
            Lang::Python => c == '#',
            _ => c == '/' && chars.get(i + 1) == Some(&'/'),
        };
        if comment {
            break;
        }
        // A Rust char literal (`'"'`, `'\''`) is not a string's start; a
        // lifetime (`'a`) is neither.
        if lang == Lang::Rust && c == '\'' {
            let len = if chars.get(i + 1) == Some(&'\\') {
                4
            } else {
                3
            };
            if chars.get(i + len - 1) == Some(&'\'') {
                out.push_str("' '");
                i += len;
                continue;
            }
        }
        let opens = match lang {
            Lang::Python => c == '"' || c == '\'',
            Lang::Rust => c == '"',
            Lang::Js | Lang::Go => c == '"' || c == '\'' || c == '`',
        };
        out.push(c);
        i += 1;
        if !opens {
            continue;
        }
        // Code inside the string: an f-string's `{…}`, a JS template's
        // `${…}`. It is kept, so that a call there is still seen.
        let interpolates = match lang {
            Lang::Python => {
                let prefix: String = out
                    .chars()
                    .rev()
                    .skip(1)
                    .take_while(|p| p.is_ascii_alphabetic())
                    .collect();
                prefix.len() <= 2 && prefix.to_ascii_lowercase().contains('f')
            }
            Lang::Js => c == '`',
            _ => false,
        };
        while i < chars.len() {
            let d = chars[i];
            if d == '\\' {
                i += 2;
                continue;
            }
            if d == c {
                out.push(d);
                i += 1;
                break;
            }
            let opens_code = interpolates
                && match lang {
                    Lang::Js => d == '$' && chars.get(i + 1) == Some(&'{'),
                    _ => d == '{' && chars.get(i + 1) != Some(&'{'),
                };
            if interpolates && lang == Lang::Python && d == '{' && chars.get(i + 1) == Some(&'{') {
                i += 2;
                continue;
            }
            if opens_code {
                i += if lang == Lang::Js { 2 } else { 1 };
                out.push(' ');
                let mut depth = 0usize;
                while i < chars.len() {
                    match chars[i] {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    out.push(chars[i]);
                    i += 1;
                }
                out.push(' ');
            }
            i += 1;
        }
    }
    out
}

/// The lines (1-based) that start inside a multi-line string or comment:
/// a docstring's example, a JSDoc block, a Go raw string. They are text,
/// whatever they look like.
pub(super) fn text_lines(lang: Lang, text: &str) -> BTreeSet<u32> {
    #[derive(PartialEq)]
    enum At {
        Code,
        Triple(char),
        Block,
        Backtick,
    }
    let mut at = At::Code;
    let mut out = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        if at != At::Code {
            out.insert(n as u32 + 1);
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        let mut quote: Option<char> = None;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            match &at {
                At::Triple(q) => {
                    if c == '\\' {
                        i += 1;
                    } else if c == *q && next == Some(*q) && chars.get(i + 2) == Some(q) {
                        at = At::Code;
                        i += 2;
                    }
                }
                At::Block => {
                    if c == '*' && next == Some('/') {
                        at = At::Code;
                        i += 1;
                    }
                }
                At::Backtick => {
                    if c == '\\' {
                        i += 1;
                    } else if c == '`' {
                        at = At::Code;
                    }
                }
                At::Code => match quote {
                    Some(q) => {
                        if c == '\\' {
                            i += 1;
                        } else if c == q {
                            quote = None;
                        }
                    }
                    None => match lang {
                        Lang::Python if c == '#' => break,
                        Lang::Python
                            if (c == '"' || c == '\'')
                                && next == Some(c)
                                && chars.get(i + 2) == Some(&c) =>
                        {
                            at = At::Triple(c);
                            i += 2;
                        }
                        Lang::Python if c == '"' || c == '\'' => quote = Some(c),
                        Lang::Python => {}
                        _ if c == '/' && next == Some('/') => break,
                        _ if c == '/' && next == Some('*') => {
                            at = At::Block;
                            i += 1;
                        }
                        Lang::Js | Lang::Go if c == '`' => at = At::Backtick,
                        Lang::Js | Lang::Go if c == '"' || c == '\'' => quote = Some(c),
                        Lang::Rust if c == '"' => quote = Some(c),
                        _ => {}
                    },
                },
            }
            i += 1;
        }
    }
    out
}

/// Python's writer names, with the file's aliases of them.
fn python_names(text: &str) -> BTreeSet<String> {
    let mut writers: BTreeSet<String> = PY_WRITERS.iter().map(|s| (*s).to_owned()).collect();
    let mut streams: BTreeSet<String> = PY_STREAMS.iter().map(|s| (*s).to_owned()).collect();
    static IMPORT_AS: OnceLock<Regex> = OnceLock::new();
    static FROM_IMPORT: OnceLock<Regex> = OnceLock::new();
    static ASSIGN: OnceLock<Regex> = OnceLock::new();
    let import_as = re(
        &IMPORT_AS,
        r"^\s*import\s+(builtins|sys|pprint)\s+as\s+(\w+)\s*$",
    );
    let from_import = re(
        &FROM_IMPORT,
        r"^\s*from\s+(builtins|sys|pprint)\s+import\s+(.+)$",
    );
    let assign = re(
        &ASSIGN,
        r"^\s*([A-Za-z_]\w*)\s*(?::\s*[\w.\[\], ]+)?=\s*(?:functools\.)?(?:partial\(\s*)?([A-Za-z_][\w.]*)\s*[,)]?",
    );
    let code: Vec<String> = text.lines().map(|l| code_of(Lang::Python, l)).collect();
    // Twice: an alias of an alias (`p = print`, then `q = p`).
    for _ in 0..2 {
        for line in &code {
            if let Some(c) = import_as.captures(line) {
                let alias = &c[2];
                match &c[1] {
                    "builtins" => {
                        writers.insert(format!("{alias}.print"));
                    }
                    "sys" => {
                        streams.insert(format!("{alias}.stdout"));
                        streams.insert(format!("{alias}.stderr"));
                    }
                    _ => {
                        writers.insert(format!("{alias}.pprint"));
                        writers.insert(format!("{alias}.pp"));
                    }
                }
            } else if let Some(c) = from_import.captures(line) {
                let module = c[1].to_owned();
                for item in c[2].trim_matches(|ch| ch == '(' || ch == ')').split(',') {
                    let mut parts = item.split_whitespace();
                    let Some(name) = parts.next() else { continue };
                    let alias = match (parts.next(), parts.next()) {
                        (Some("as"), Some(a)) => a,
                        _ => name,
                    };
                    match (module.as_str(), name) {
                        ("builtins", "print") | ("pprint", "pprint" | "pp") => {
                            writers.insert(alias.to_owned());
                        }
                        ("sys", "stdout" | "stderr" | "__stdout__" | "__stderr__") => {
                            streams.insert(alias.to_owned());
                        }
                        _ => {}
                    }
                }
            } else if let Some(c) = assign.captures(line) {
                let (alias, target) = (c[1].to_owned(), c[2].to_owned());
                if writers.contains(&target) {
                    writers.insert(alias);
                } else if streams.contains(&target) {
                    streams.insert(alias);
                } else if let Some(stream) = target
                    .strip_suffix(".write")
                    .or_else(|| target.strip_suffix(".writelines"))
                {
                    if streams.contains(stream) {
                        writers.insert(alias);
                    }
                }
            }
        }
    }
    for s in streams {
        writers.insert(format!("{s}.write"));
        writers.insert(format!("{s}.writelines"));
    }
    writers
}

/// JavaScript's writer names, with the file's aliases of them
/// (`const log = console.log`, `const { log } = console`).
fn js_names(text: &str) -> BTreeSet<String> {
    let mut writers: BTreeSet<String> = JS_WRITERS.iter().map(|s| (*s).to_owned()).collect();
    static ASSIGN: OnceLock<Regex> = OnceLock::new();
    static DESTRUCTURE: OnceLock<Regex> = OnceLock::new();
    let assign = re(
        &ASSIGN,
        r"(?:^|[;\s])(?:const|let|var)?\s*([A-Za-z_$][\w$]*)\s*=\s*([A-Za-z_$][\w$.]*)(?:\.bind\([^)]*\))?\s*;?\s*$",
    );
    let destructure = re(
        &DESTRUCTURE,
        r"(?:const|let|var)\s*\{([^}]*)\}\s*=\s*console\b",
    );
    for line in text.lines().map(|l| code_of(Lang::Js, l)) {
        if let Some(c) = destructure.captures(&line) {
            for item in c[1].split(',') {
                let (name, alias) = match item.split_once(':') {
                    Some((n, a)) => (n.trim(), a.trim()),
                    None => (item.trim(), item.trim()),
                };
                if writers.contains(&format!("console.{name}")) && !alias.is_empty() {
                    writers.insert(alias.to_owned());
                }
            }
        } else if let Some(c) = assign.captures(&line) {
            if writers.contains(&c[2]) {
                writers.insert(c[1].to_owned());
            }
        }
    }
    writers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(text: &str, line: &str) -> Option<Output> {
        Writers::of(Lang::Python, Some(text), Some("")).call(line)
    }

    #[test]
    fn strings_and_comments_neither_hide_nor_fake_a_call() {
        assert_eq!(
            code_of(Lang::Python, r#"x = "print(1) # no" + 'a\'b'  # print(2)"#),
            r#"x = "" + ''  "#
        );
        assert_eq!(
            code_of(Lang::Rust, r#"let s = "//"; // x"#),
            r#"let s = ""; "#
        );
        // The code inside an interpolation stays code.
        assert_eq!(code_of(Lang::Js, "f(`a ${b}`) // c"), "f(` b `) ");
        assert_eq!(py("", "msg = 'call print(x) to see'"), None);
        assert_eq!(py("", "# print(x)"), None);
    }

    #[test]
    fn every_spelling_of_a_python_print_is_one() {
        let print = Some(Output::Print("a print"));
        for line in [
            "print (\"DEBUG\", x)",
            "_ = print(x)",
            "if x: print(x)",
            "sys.stdout.write(f\"{x}\\n\")",
            "sys.stderr.writelines([x])",
            "builtins.print(x)",
            "pprint.pprint(x)",
        ] {
            assert_eq!(py("", line), print, "{line}");
        }
        let aliased = "import sys as s\nfrom sys import stderr as err\nfrom builtins import print as show\nout = print\nw = s.stdout.write\nq = out\nemit = functools.partial(print, flush=True)\n";
        for line in [
            "s.stdout.write(x)",
            "err.write(x)",
            "show(x)",
            "out(x)",
            "w(x)",
            "q(x)",
            "emit(x)",
        ] {
            assert_eq!(py(aliased, line), print, "{line}");
        }
    }

    /// What a helper found past the first version (stop 35's attack).
    #[test]
    fn spellings_found_by_the_attack() {
        let print = Some(Output::Print("a print"));
        assert_eq!(py("", "msg = f'{print(x)}'"), print);
        assert_eq!(
            py("", "msg = f'{{print(x)}}'"),
            None,
            "doubled braces are text"
        );
        let rs = Writers::of(Lang::Rust, Some(""), Some(""));
        for line in [
            "io::stdout().write_all(b)?;",
            "std::io::stdout().lock().write_all(b)?;",
            "writeln!(std::io::stderr(), \"x\")?;",
            "::std::println!(\"x\");",
            "let q = '\"'; println!(\"{q}\");",
        ] {
            assert!(matches!(rs.call(line), Some(Output::Print(_))), "{line}");
        }
        let js = Writers::of(Lang::Js, Some(""), None);
        for line in [
            "console.info(x)",
            "globalThis.console.log(x)",
            "console.log?.(x)",
            "const s = `${console.log(x)}`;",
        ] {
            assert!(matches!(js.call(line), Some(Output::Print(_))), "{line}");
        }
        assert_eq!(js.call("console.error('deprecated: use g()')"), None);
    }

    #[test]
    fn docstrings_and_block_comments_are_text() {
        let py = "def f(x):\n    \"\"\"Double x.\n\n    >>> print(f(2))\n    4\n    \"\"\"\n    return 2 * x\n";
        assert_eq!(
            text_lines(Lang::Python, py).into_iter().collect::<Vec<_>>(),
            [3, 4, 5, 6]
        );
        let js = "/**\n * console.log(f(1));\n */\nexport const s = `a\nconsole.log(1)\n`;\n";
        assert_eq!(
            text_lines(Lang::Js, js).into_iter().collect::<Vec<_>>(),
            [2, 3, 5, 6]
        );
        assert!(text_lines(Lang::Python, "x = '\"\"\"'\nprint(x)\n").is_empty());
    }

    #[test]
    fn what_is_not_a_print_stays_unflagged() {
        for line in [
            "self.print(x)",
            "printer.print_report(x)",
            "def print(self, x):",
            "traceback_text = format_exc()",
            "reprint(x)",
            "log_print = 3",
        ] {
            assert_eq!(py("", line), None, "{line}");
        }
    }

    #[test]
    fn logging_at_a_new_debug_level_and_at_the_usual_levels() {
        let w = Writers::of(
            Lang::Python,
            Some(""),
            Some("log = logging.getLogger(__name__)\n"),
        );
        assert_eq!(w.call("logger.debug('x=%s', x)"), Some(Output::NewDebugLog));
        assert_eq!(w.call("self._log.warning('x=%s', x)"), Some(Output::Log));
        let usual = Writers::of(Lang::Python, Some(""), Some("    log.debug('start')\n"));
        assert_eq!(usual.call("log.debug('x=%s', x)"), Some(Output::Log));
    }

    #[test]
    fn other_languages() {
        let rs = Writers::of(Lang::Rust, Some(""), Some(""));
        assert!(matches!(
            rs.call("if x { println!(\"{x}\") }"),
            Some(Output::Print(_))
        ));
        assert!(matches!(
            rs.call("let _ = std::io::stdout().write_all(b)"),
            Some(Output::Print(_))
        ));
        assert_eq!(rs.call("writeln!(f, \"{x}\")?;"), None);
        assert_eq!(
            rs.call("tracing::debug!(x, \"step\");"),
            Some(Output::NewDebugLog)
        );
        let js = Writers::of(
            Lang::Js,
            Some("const { log: say } = console;\nconst out = console.log.bind(console);\n"),
            None,
        );
        assert!(matches!(js.call("say(x)"), Some(Output::Print(_))));
        assert!(matches!(js.call("out(x)"), Some(Output::Print(_))));
        assert!(matches!(
            js.call("process.stdout.write(x)"),
            Some(Output::Print(_))
        ));
        assert_eq!(js.call("this.console.log(x)"), None);
        let go = Writers::of(Lang::Go, Some(""), Some(""));
        assert!(matches!(
            go.call("if x { println(x) }"),
            Some(Output::Print(_))
        ));
        assert!(matches!(
            go.call("fmt.Fprintln(os.Stderr, x)"),
            Some(Output::Print(_))
        ));
        assert_eq!(go.call("fmt.Fprintln(w, x)"), None);
        assert_eq!(go.call("func print(x int) {"), None);
    }
}
