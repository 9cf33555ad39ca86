//! Evidence mode (`[examiner] mode = "evidence"`): what the critic is shown
//! of a red examiner test, the ruling it may give on it, and what loopd
//! keeps of its words.
//!
//! The critic weighs each red test against the task: `right` (the change
//! is wrong on that behaviour) or `wrong` — and a `wrong` ruling holds only
//! when its quote is found, word for word, in the task, the rubric or the
//! repository's documentation at BASE_REF. The model explains; the code
//! checks what it can: a critic that answers PASS to everything rules on
//! nothing, and every red test it did not rule away still rejects.
//!
//! The agent never sees an examiner test: before the critic's words become
//! a prompt (or reach the journal), every line of the tests it was shown
//! and every value they hold that the task does not state is cut out
//! ([`Redactor`]).

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The shortest quote a `wrong` ruling may rest on (after whitespace is
/// collapsed): a sentence, not a word that is everywhere.
pub const MIN_QUOTE: usize = 20;
/// The most of one test's source the critic is shown.
const MAX_SHOWN_TEST: usize = 6 << 10;
/// The most of the red tests' output the critic is shown.
const MAX_SHOWN_OUTPUT: usize = 12 << 10;
/// The most of all red tests' sources the critic is shown.
const MAX_SHOWN_SOURCES: usize = 36 << 10;
/// What replaces a line or a value of an examiner test in the critic's
/// words.
pub const REMOVED: &str = "[examiner's test removed]";

/// The critic's ruling on one red examiner test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Word {
    /// The test checks what the task asks: the change is wrong there.
    Right,
    /// The test contradicts the task: dropped, when the quote holds.
    Wrong,
}

/// A ruling as the critic answers it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answered {
    pub test: String,
    pub ruling: Word,
    #[serde(default)]
    pub quote: String,
    #[serde(default)]
    pub behaviour: String,
}

/// A ruling as loopd keeps it (journaled with the critic's session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ruling {
    /// The test's id (`loopd_examiner/test_x.py::test_y`).
    pub test: String,
    pub ruling: Word,
    /// What a `wrong` ruling quoted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub quote: String,
    /// The critic's words on the behaviour, with the test's lines and
    /// values cut out: what the next prompt may carry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub behaviour: String,
    /// Where loopd found the quote (`None`: nowhere, or a `right` ruling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_in: Option<String>,
}

impl Ruling {
    /// Whether the ruling drops its test: `wrong`, on a quote loopd found.
    pub fn drops(&self) -> bool {
        self.ruling == Word::Wrong && self.found_in.is_some()
    }
}

/// The schema of the verdict's `examiner` array.
pub fn rulings_schema() -> serde_json::Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "test": {"type": "string"},
                "ruling": {"type": "string", "enum": ["right", "wrong"]},
                "quote": {"type": "string"},
                "behaviour": {"type": "string"}
            },
            "required": ["test", "ruling", "quote", "behaviour"],
            "additionalProperties": false
        }
    })
}

/// One red test as the critic is shown it.
#[derive(Debug, Clone)]
pub struct Red {
    pub id: String,
    /// Its function (decorators included), from its file.
    pub source: String,
}

/// Test `id` in `file_text`: a Python test's decorators, `def` line and
/// body, or a `node:test` test's call from the line that names it to the
/// bracket that closes it (up to a bound). `None`: not found there.
fn find_test(file_text: &str, id: &str) -> Option<String> {
    let name = id.rsplit("::").next().unwrap_or(id);
    let name = &name[..name.find('[').unwrap_or(name.len())];
    if name.trim().is_empty() {
        return None;
    }
    let lines: Vec<&str> = file_text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let is_def = |l: &str| {
        let t = l.trim_start();
        let t = t.strip_prefix("async ").unwrap_or(t);
        t.strip_prefix("def ")
            .and_then(|r| r.strip_prefix(name))
            .is_some_and(|r| r.trim_start().starts_with('('))
    };
    let (start, end) = if let Some(at) = lines.iter().position(|l| is_def(l)) {
        let depth = indent(lines[at]);
        let mut start = at;
        while start > 0 && lines[start - 1].trim_start().starts_with('@') {
            start -= 1;
        }
        let mut end = at + 1;
        while end < lines.len() {
            let l = lines[end];
            if !l.trim().is_empty() && indent(l) <= depth {
                break;
            }
            end += 1;
        }
        (start, end)
    } else {
        // `test('name', …)`, `it("name", …)`: to where its brackets close.
        let quoted = ['\'', '"', '`'].map(|q| format!("{q}{name}{q}"));
        let at = lines
            .iter()
            .position(|l| quoted.iter().any(|q| l.contains(q.as_str())))?;
        let mut depth = 0i64;
        let mut end = at;
        for (k, l) in lines.iter().enumerate().skip(at) {
            depth += l.matches(['(', '{', '[']).count() as i64;
            depth -= l.matches([')', '}', ']']).count() as i64;
            end = k + 1;
            if depth <= 0 {
                break;
            }
        }
        (at, end)
    };
    let text = lines[start..end].join("\n");
    Some(crate::util::truncate(text.trim_end(), MAX_SHOWN_TEST).to_owned())
}

/// Test `id`'s source among the examiner's `files`: from the file its id
/// names, else the first that holds it, else the head of the first file (a
/// test a class or a loop generates).
pub fn test_source(files: &[crate::examiner::TestFile], id: &str) -> String {
    let names: Vec<String> = files.iter().map(|t| t.file.clone()).collect();
    let named = file_of(id, &names).and_then(|f| files.iter().find(|t| &t.file == f));
    named
        .and_then(|t| find_test(&t.content, id))
        .or_else(|| files.iter().find_map(|t| find_test(&t.content, id)))
        .unwrap_or_else(|| {
            let head = named.or(files.first()).map_or("", |t| t.content.as_str());
            crate::util::truncate(head, MAX_SHOWN_TEST).to_owned()
        })
}

/// Two spellings of one test id (`loopd_examiner/test_x.py::t` and the
/// report's `loopd_examiner.test_x::t`) as one.
pub fn same_test(a: &str, b: &str) -> bool {
    fn key(id: &str) -> String {
        let id = crate::examiner::test_of(id.trim());
        let (module, name) = id.split_once("::").unwrap_or((id, ""));
        let module = module.trim_end_matches(".py").replace('/', ".");
        format!("{module}::{name}")
    }
    key(a) == key(b)
}

/// Which of `files` (names under the examiner's directory) holds test `id`.
pub fn file_of<'f>(id: &str, files: &'f [String]) -> Option<&'f String> {
    let module = id.split("::").next().unwrap_or(id).trim_end_matches(".py");
    let segments: Vec<&str> = module.split(['.', '/']).collect();
    files
        .iter()
        .find(|f| segments.contains(&f.trim_end_matches(".py")))
}

/// The critic's section on the red tests: what they are, how to rule, each
/// one's source, and their output on the change.
pub fn section(red: &[Red], output: Option<&str>, fence: &str) -> String {
    let mut s = String::from(
        "\n# Tests written from the task alone, red on this change\n\
         Before attempt 1, an examiner who never saw this change wrote tests of the behaviour the task describes. \
         The tests below fail on this change, and they failed before it: they test what the task asks for — if the examiner read the task right. \
         The author of the change will never see them.\n\
         Rule on each one in `examiner`:\n\
         - `right` when the behaviour it checks is what the task states or implies: the change is wrong there. \
         Say in `behaviour`, in your own words, what the code must do — never the test's code, its names or the values it expects: the author is not shown the test.\n\
         - `wrong` only when the task, the rules or the repository's documentation says otherwise: `quote` is the sentence it contradicts, word for word \
         (it is checked; a ruling whose quote is not found there does not hold). A test ruled wrong is dropped.\n\
         A red test you rule `right`, or do not rule on, rejects the change whatever your verdict.\n",
    );
    let mut used = 0;
    for r in red {
        s.push_str(&format!("\n## `{}`\n", r.id));
        if used + r.source.len() > MAX_SHOWN_SOURCES {
            s.push_str("(its source is not shown: the sources shown are at their bound)\n");
            continue;
        }
        used += r.source.len();
        s.push_str(&format!("```{fence}\n{}\n```\n", r.source.trim_end()));
    }
    match output {
        Some(out) => s.push_str(&format!(
            "\n## Their output on this change\n```\n{}\n```\n",
            crate::goal::head_and_tail(out.trim_end(), MAX_SHOWN_OUTPUT)
        )),
        None => s.push_str("\n(Their output on this change was not kept.)\n"),
    }
    s
}

/// Whether a file of the repository is documentation a `wrong` ruling may
/// quote: a README, a page under `docs/`, a Markdown, reStructuredText or
/// plain-text file.
pub fn is_documentation(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    name.starts_with("readme")
        || path.starts_with("docs/")
        || path.starts_with("doc/")
        || [".md", ".rst", ".txt"].iter().any(|e| name.ends_with(e))
}

/// Text for comparing quotes: lower case, whitespace collapsed, typographic
/// quotes made plain.
fn normal(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\u{2018}' | '\u{2019}' => '\'',
            '\u{201c}' | '\u{201d}' => '"',
            c => c.to_ascii_lowercase(),
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where `quote` is found, word for word (whitespace and case aside): the
/// name of the first of `sources` (name, text) holding it. `None`: in none,
/// or too short to rest a ruling on ([`MIN_QUOTE`]).
pub fn quote_found(quote: &str, sources: &[(String, String)]) -> Option<String> {
    let q = normal(quote);
    let q = q.trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '>' | ' ' | '.' | '…'));
    if q.len() < MIN_QUOTE {
        return None;
    }
    sources
        .iter()
        .find(|(_, text)| normal(text).contains(q))
        .map(|(name, _)| name.clone())
}

/// Cuts an examiner test out of the critic's words: each of its lines (of
/// some length) and any stretch of one of [`GRAM`] characters or more,
/// each value it holds that the task does not state, and each name in it
/// that reads as code (a helper, a constant, a marker in a comment) that
/// neither the task nor the repository at BASE_REF holds — matched with
/// case and whitespace aside. What it cannot cut: a value spelled out or
/// paraphrased, a stretch shorter than its units.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Squeezed ([`squeeze`]), longest first.
    cuts: Vec<String>,
    /// Every stretch of [`GRAM`] characters of the tests' lines, squeezed.
    grams: std::collections::HashSet<String>,
}

/// The shortest line of a test that is cut (squeezed).
const MIN_LINE: usize = 10;
/// The shortest value of a test that is cut.
const MIN_VALUE: usize = 3;
/// The shortest name of a test that is cut.
const MIN_NAME: usize = 6;
/// The shortest part of a line of a test that is cut (squeezed).
pub const GRAM: usize = 16;

fn literals() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    crate::util::once_regex(&RE, r#""([^"\\\n]*)"|'([^'\\\n]*)'|\b(\d[\d_.]*\d)\b"#)
}

fn names() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    crate::util::once_regex(&RE, r"[A-Za-z_][A-Za-z0-9_]{5,}")
}

/// `text` without whitespace, in lower case, typographic quotes made
/// plain: each character with the range of `text` it came from.
fn squeeze(text: &str) -> Vec<(char, (usize, usize))> {
    text.char_indices()
        .filter(|(_, c)| !c.is_whitespace())
        .map(|(i, c)| {
            let n = match c {
                '\u{2018}' | '\u{2019}' => '\'',
                '\u{201c}' | '\u{201d}' => '"',
                c => c.to_ascii_lowercase(),
            };
            (n, (i, i + c.len_utf8()))
        })
        .collect()
}

fn squeezed(text: &str) -> String {
    squeeze(text).into_iter().map(|(c, _)| c).collect()
}

impl Redactor {
    /// From the sources of the tests the critic was shown (and the lines
    /// of their output that quote them), the task (a value it states is
    /// the agent's already) and the repository's texts at BASE_REF (a name
    /// they hold is no secret).
    pub fn new(sources: &[&str], task: &str, known: &[&str]) -> Redactor {
        let task_s = squeezed(task);
        let known_names: std::collections::HashSet<&str> = known
            .iter()
            .flat_map(|t| names().find_iter(t).map(|m| m.as_str()))
            .collect();
        // Names that read as code (an underscore, a digit, a capital
        // inside): a plain word of a comment is no secret.
        let code_like = |w: &str| {
            w.contains('_')
                || w.chars().any(|c| c.is_ascii_digit())
                || w.chars().skip(1).any(|c| c.is_ascii_uppercase())
        };
        let mut r = Redactor::default();
        let mut keep = |cut: String, min: usize| {
            if cut.chars().count() >= min && !task_s.contains(&cut) {
                r.cuts.push(cut);
            }
        };
        for src in sources {
            for line in src.lines() {
                keep(squeezed(line), MIN_LINE);
            }
            for c in literals().captures_iter(src) {
                if let Some(v) = c.get(1).or(c.get(2)).or(c.get(3)) {
                    keep(squeezed(v.as_str()), MIN_VALUE);
                }
            }
            for m in names().find_iter(src) {
                if code_like(m.as_str()) && !known_names.contains(m.as_str()) {
                    keep(squeezed(m.as_str()), MIN_NAME);
                }
            }
        }
        for src in sources {
            for line in src.lines() {
                let chars: Vec<char> = squeezed(line).chars().collect();
                for w in chars.windows(GRAM) {
                    let gram: String = w.iter().collect();
                    if !task_s.contains(&gram) {
                        r.grams.insert(gram);
                    }
                }
            }
        }
        r.cuts
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        r.cuts.dedup();
        r
    }

    /// `text` without any line, part of a line, value or name of the
    /// tests: each stretch of it that matches one is one [`REMOVED`].
    pub fn redact(&self, text: &str) -> String {
        let sq = squeeze(text);
        let flat: String = sq.iter().map(|(c, _)| *c).collect();
        // Byte offset in `flat` → index in `sq`.
        let mut at_char = vec![0usize; flat.len() + 1];
        let mut off = 0;
        for (k, (c, _)) in sq.iter().enumerate() {
            for b in 0..c.len_utf8() {
                at_char[off + b] = k;
            }
            off += c.len_utf8();
        }
        at_char[flat.len()] = sq.len();
        let mut cut = vec![false; text.len()];
        let mut mark = |from: usize, to: usize| {
            if from < to {
                let (a, _) = sq[from].1;
                let (_, b) = sq[to - 1].1;
                cut[a..b].iter_mut().for_each(|x| *x = true);
            }
        };
        for c in &self.cuts {
            let mut from = 0;
            while let Some(at) = flat[from..].find(c.as_str()) {
                let start = from + at;
                let end = start + c.len();
                mark(at_char[start], at_char[end]);
                from = end;
            }
        }
        if !self.grams.is_empty() && sq.len() >= GRAM {
            let chars: Vec<char> = sq.iter().map(|(c, _)| *c).collect();
            for (k, w) in chars.windows(GRAM).enumerate() {
                if self.grams.contains(&w.iter().collect::<String>()) {
                    mark(k, k + GRAM);
                }
            }
        }
        let mut out = String::with_capacity(text.len());
        let mut removing = false;
        for (i, ch) in text.char_indices() {
            if cut[i] {
                if !removing {
                    out.push_str(REMOVED);
                    removing = true;
                }
            } else {
                removing = false;
                out.push(ch);
            }
        }
        out
    }

    /// Whether it cuts nothing.
    pub fn is_empty(&self) -> bool {
        self.cuts.is_empty() && self.grams.is_empty()
    }
}

/// The rulings of a verdict object, as loopd keeps them: only on tests the
/// critic was shown (`shown`), one per test — `wrong` only when every
/// ruling on it is `wrong` on a quote found in `sources` (a critic that
/// says both stands by the test) — each `behaviour` and each quote loopd
/// did not find cut by `redactor`.
pub fn read_rulings(
    answered: Vec<Answered>,
    shown: &[String],
    sources: &[(String, String)],
    redactor: &Redactor,
) -> Vec<Ruling> {
    let mut out: Vec<Ruling> = Vec::new();
    for a in answered {
        let Some(test) = shown.iter().find(|s| same_test(s, &a.test)).cloned() else {
            continue;
        };
        let found_in = match a.ruling {
            Word::Wrong => quote_found(&a.quote, sources),
            Word::Right => None,
        };
        if a.ruling == Word::Wrong && found_in.is_none() {
            tracing::warn!(test = %test, "the critic ruled an examiner test wrong on a quote that is not in the task, the rubric or the documentation: the test stands");
        }
        // A quote loopd found is the task's or the docs' words; any other
        // may be the test's.
        let quote = match (a.ruling, &found_in) {
            (Word::Wrong, Some(_)) => crate::util::truncate(a.quote.trim(), 1000).to_owned(),
            (Word::Wrong, None) => redactor.redact(crate::util::truncate(a.quote.trim(), 1000)),
            (Word::Right, _) => String::new(),
        };
        let ruling = Ruling {
            test,
            ruling: a.ruling,
            quote,
            behaviour: redactor.redact(crate::util::truncate(a.behaviour.trim(), 2000)),
            found_in,
        };
        match out.iter_mut().find(|r| r.test == ruling.test) {
            None => out.push(ruling),
            // Two rulings on one test: it drops only if both would.
            Some(first) if first.drops() && !ruling.drops() => *first = ruling,
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: &str = "import pytest\nfrom rechnung import gross_total\n\n\n@pytest.mark.slow\ndef test_many_lines_round_half_up():\n    lines = [(1, '10'), (3, '2.50')]\n    assert gross_total(lines) == Decimal(\"20.83\")\n\n\ndef test_other():\n    assert True\n";

    #[test]
    fn a_tests_source_is_its_function_with_its_decorators() {
        let file = |f: &str, c: &str| crate::examiner::TestFile {
            file: f.into(),
            content: c.into(),
        };
        let files = vec![file("test_r.py", TEST)];
        let s = test_source(
            &files,
            "loopd_examiner/test_r.py::test_many_lines_round_half_up",
        );
        assert!(s.starts_with("@pytest.mark.slow\ndef test_many_lines_round_half_up"));
        assert!(s.contains("20.83"));
        assert!(!s.contains("test_other"));
        let p = test_source(&files, "m::test_other[1-2]");
        assert_eq!(p, "def test_other():\n    assert True");
        assert!(test_source(&files, "m::test_missing").contains("import pytest"));
        let js = "import test from 'node:test';\nimport assert from 'node:assert';\n\ntest('rounds half up', () => {\n  assert.equal(total([1, 2]), 3);\n});\n\ntest('other', () => {});\n";
        let node = vec![file("cart.test.mjs", js)];
        assert_eq!(
            test_source(&node, "test::rounds half up"),
            "test('rounds half up', () => {\n  assert.equal(total([1, 2]), 3);\n});"
        );
    }

    #[test]
    fn a_quote_holds_only_when_found_word_for_word_and_long_enough() {
        let sources = vec![
            (
                "the task".to_owned(),
                "Totals round half up\nto the cent, per invoice.".to_owned(),
            ),
            (
                "README.md".to_owned(),
                "Discounts are whole percentages.".to_owned(),
            ),
        ];
        assert_eq!(
            quote_found(
                "\u{201c}totals round HALF up to the cent\u{201d}.",
                &sources
            ),
            Some("the task".into())
        );
        assert_eq!(
            quote_found("Discounts are whole percentages", &sources),
            Some("README.md".into())
        );
        assert_eq!(
            quote_found("totals round half down to the cent", &sources),
            None
        );
        assert_eq!(quote_found("round half", &sources), None, "too short");
        assert_eq!(quote_found("", &sources), None);
    }

    #[test]
    fn the_tests_lines_and_values_are_cut_from_the_critics_words() {
        let r = Redactor::new(
            &[TEST],
            "Fix gross_total: round half up; 2.50 is a price.",
            &["def gross_total(lines): ..."],
        );
        let said = "The total of lines = [(1, '10'), (3, '2.50')] must be 20.83; a price of 2.50 is fine; the code returns \"20.82\". assert gross_total(lines) == Decimal(\"20.83\")";
        let out = r.redact(said);
        assert!(!out.contains("20.83"), "{out}");
        assert!(!out.contains("lines = [(1, '10')"), "{out}");
        assert!(
            out.contains("price of 2.50"),
            "a value the task states stays: {out}"
        );
        assert!(out.contains("20.82"), "not the test's value: {out}");
        // Case and spacing aside, and the test's own names.
        let out = r.redact("ASSERT  GROSS_TOTAL(lines)\n == decimal(\"20.83\") in test_many_lines_round_half_up; gross_total is the code's");
        assert!(!out.to_lowercase().contains("assert gross_total"), "{out}");
        assert!(!out.contains("test_many_lines_round_half_up"), "{out}");
        assert!(
            out.contains("gross_total is the code's"),
            "a name of the code stays: {out}"
        );
    }

    #[test]
    fn rulings_are_kept_only_for_shown_tests_once_each_with_their_quote_checked() {
        let shown = vec!["m::test_a".to_owned(), "m::test_b".to_owned()];
        let sources = vec![(
            "the task".to_owned(),
            "Amounts are rounded half up to the cent.".to_owned(),
        )];
        let a = |test: &str, ruling, quote: &str| Answered {
            test: test.into(),
            ruling,
            quote: quote.into(),
            behaviour: "totals must round half up".into(),
        };
        let got = read_rulings(
            vec![
                a(
                    "m::test_a[1]",
                    Word::Wrong,
                    "Amounts are rounded half up to the cent",
                ),
                a("m::test_a", Word::Right, ""),
                a("m::test_b", Word::Wrong, "Amounts are rounded down"),
                a(
                    "m::test_c",
                    Word::Wrong,
                    "Amounts are rounded half up to the cent",
                ),
            ],
            &shown,
            &sources,
            &Redactor::default(),
        );
        assert_eq!(got.len(), 2);
        assert!(!got[0].drops(), "ruled wrong, then right: it stands");
        assert!(!got[1].drops(), "a quote not found does not hold");
        let got = read_rulings(
            vec![a(
                "m::test_a",
                Word::Wrong,
                "Amounts are rounded half up to the cent",
            )],
            &shown,
            &sources,
            &Redactor::default(),
        );
        assert!(got[0].drops());
        assert_eq!(got[0].found_in.as_deref(), Some("the task"));
    }

    #[test]
    fn a_test_is_one_test_by_path_or_by_module() {
        assert!(same_test(
            "loopd_examiner/test_x.py::test_a",
            "loopd_examiner.test_x::test_a"
        ));
        assert!(same_test(
            "loopd_examiner.test_x::test_a[1]",
            "loopd_examiner.test_x::test_a"
        ));
        assert!(!same_test(
            "loopd_examiner.test_x::test_a",
            "loopd_examiner.test_y::test_a"
        ));
        let files = vec!["test_x.py".to_owned(), "test_y.py".to_owned()];
        assert_eq!(
            file_of("loopd_examiner.test_y.TestC::test_a", &files),
            Some(&files[1])
        );
        assert_eq!(
            file_of("loopd_examiner/test_x.py::test_a", &files),
            Some(&files[0])
        );
        assert_eq!(file_of("other::test_a", &files), None);
    }
}
