//! The critic: a fresh session of the critic's agent CLI (of either vendor),
//! with no tool that reads or writes, that sees the task, the baseline, the
//! diff since BASE_REF and the rubric — never the agent's transcript — and
//! answers with a verdict object through its CLI's structured output
//! ([`crate::agent::Agent::answer_with`]).
//!
//! The critic sees the whole change: a listing of every changed file with
//! its size, then every file's section of the diff whole. Nothing is cut
//! silently: a change over the bound never reaches the critic (the size
//! gate, [`crate::judges::size`]), and where a section of the interdiff does
//! not fit its bound, whole hunks are shown and the listing says what is not.
//!
//! The verdict is read from `structured_output` only. Prose, a missing
//! object, a malformed one, or a session that failed are all `invalid`, and
//! invalid is a rejection: the model explains, the code decides.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::agent::events::SessionResult;
use crate::examiner::evidence::{self, Ruling};
use crate::judges::size::human;
use crate::rubric::Rubric;
use crate::workspace::FilePatch;

/// The instruction passed as the critic's prompt argument; the material
/// follows on stdin.
pub fn instruction(answer_with: &str) -> String {
    format!("You are the reviewer of a code change. Everything you need follows. Judge the change only by the numbered rules and answer only {answer_with}.")
}

/// The JSON schema of the verdict object (DESIGN.md, "Critic verdict").
pub fn verdict_schema() -> serde_json::Value {
    verdict_schema_with(false)
}

/// The verdict's schema, with the `examiner` rulings when the critic is
/// shown red examiner tests ([`crate::examiner::evidence`]).
pub fn verdict_schema_with(rulings: bool) -> serde_json::Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["PASS", "FAIL"]},
            "violations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "rule": {"type": "integer"},
                        "file": {"type": "string"},
                        "problem": {"type": "string"},
                        "fix": {"type": "string"}
                    },
                    "required": ["rule", "file", "problem", "fix"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["verdict", "violations"],
        "additionalProperties": false
    });
    if rulings {
        schema["properties"]["examiner"] = evidence::rulings_schema();
        schema["required"] = json!(["verdict", "violations", "examiner"]);
    }
    schema
}

/// One finding of the critic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Violation {
    pub rule: i64,
    pub file: String,
    pub problem: String,
    pub fix: String,
}

impl Violation {
    /// The repository path the violation names: the critic may write
    /// `./a.py` or `a.py:12`.
    pub fn path(&self) -> &str {
        let f = self.file.trim().trim_start_matches("./");
        match f.rsplit_once(':') {
            Some((path, line)) if line.chars().all(|c| c.is_ascii_digit()) && !line.is_empty() => {
                path
            }
            _ => f,
        }
    }

    /// `file (rule N): problem — fix: ...`, the line the next prompt carries.
    pub fn render(&self) -> String {
        format!(
            "{} (rule {}): {} — fix: {}",
            self.file, self.rule, self.problem, self.fix
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum VerdictWord {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "FAIL")]
    Fail,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VerdictObject {
    verdict: VerdictWord,
    violations: Vec<Violation>,
    /// Rulings on red examiner tests (evidence mode only).
    #[serde(default)]
    examiner: Vec<evidence::Answered>,
}

/// What the critic decided, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "critic", rename_all = "snake_case")]
pub enum CriticVerdict {
    /// `PASS` with no violations.
    Pass,
    /// `FAIL`, or `PASS` that still listed violations.
    Fail { violations: Vec<Violation> },
    /// No usable verdict; `why` says what was wrong.
    Invalid { why: String },
    /// Not asked (the goal test or a gate failed first).
    Skipped,
}

impl CriticVerdict {
    /// The summary's `critic` field.
    pub fn label(&self) -> &'static str {
        match self {
            CriticVerdict::Pass => "PASS",
            CriticVerdict::Fail { .. } => "FAIL",
            CriticVerdict::Invalid { .. } => "invalid",
            CriticVerdict::Skipped => "skipped",
        }
    }

    pub fn violations(&self) -> &[Violation] {
        match self {
            CriticVerdict::Fail { violations } => violations,
            _ => &[],
        }
    }
}

/// Read the verdict from a critic session's result (whichever CLI ran it:
/// each parses its structured answer into `structured_output`).
pub fn read_verdict(result: Option<&SessionResult>) -> CriticVerdict {
    read_judgement(result, None).0
}

/// What the critic was shown of the examiner's red tests, for reading its
/// rulings: their ids, where a `wrong` ruling's quote may come from, and
/// what to cut out of its words.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// The red tests shown, by id.
    pub shown: Vec<String>,
    /// (name, text): the task, the rubric, the documentation at BASE_REF.
    pub sources: Vec<(String, String)>,
    pub redactor: evidence::Redactor,
}

/// The verdict and, when the critic was shown red examiner tests, its
/// rulings on them — every word of it that could quote a test cut out
/// before anything keeps it.
pub fn read_judgement(
    result: Option<&SessionResult>,
    evidence: Option<&Evidence>,
) -> (CriticVerdict, Vec<Ruling>) {
    let Some(result) = result else {
        return (
            CriticVerdict::Invalid {
                why: "the critic session ended without a result".into(),
            },
            Vec::new(),
        );
    };
    if !result.completed {
        return (
            CriticVerdict::Invalid {
                why: format!("the critic session failed: {}", result.error_text()),
            },
            Vec::new(),
        );
    }
    let Some(object) = &result.structured_output else {
        let prose = result
            .text
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        let prose = match evidence {
            Some(e) => e.redactor.redact(&prose),
            None => prose,
        };
        return (
            CriticVerdict::Invalid {
                why: format!("no structured verdict (the critic answered in prose: {prose:?})"),
            },
            Vec::new(),
        );
    };
    let v = match serde_json::from_value::<VerdictObject>(object.clone()) {
        Err(e) => {
            return (
                CriticVerdict::Invalid {
                    why: format!("malformed verdict object: {e}"),
                },
                Vec::new(),
            )
        }
        Ok(v) => v,
    };
    let (violations, rulings) = match evidence {
        None => (v.violations, Vec::new()),
        Some(e) => {
            let redact = |t: &str| e.redactor.redact(t);
            let violations = v
                .violations
                .into_iter()
                .map(|x| Violation {
                    problem: redact(&x.problem),
                    fix: redact(&x.fix),
                    file: redact(&x.file),
                    ..x
                })
                .collect();
            let rulings = evidence::read_rulings(v.examiner, &e.shown, &e.sources, &e.redactor);
            (violations, rulings)
        }
    };
    let verdict = if v.verdict == VerdictWord::Pass && violations.is_empty() {
        CriticVerdict::Pass
    } else {
        CriticVerdict::Fail { violations }
    };
    (verdict, rulings)
}

/// A patch as the critic is shown it: the text and each file's section.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a> {
    pub patch: &'a str,
    pub files: &'a [FilePatch],
}

/// A file's section split into its header and its hunks (each starting at
/// an `@@` line; no other line of a section starts so).
fn hunks(section: &str) -> (&str, Vec<&str>) {
    let mut starts = Vec::new();
    let mut off = 0;
    for line in section.split_inclusive('\n') {
        if line.starts_with("@@") {
            starts.push(off);
        }
        off += line.len();
    }
    let Some(&first) = starts.first() else {
        return (section, Vec::new());
    };
    let mut out = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(section.len());
        out.push(&section[start..end]);
    }
    (&section[..first], out)
}

impl Shown<'_> {
    /// Every file listed with its size and what of it is shown; then the
    /// sections — each whole while it fits `bound` bytes, else as many of
    /// its whole hunks as fit. Returns how many files were not shown whole.
    fn render(&self, s: &mut String, bound: usize) -> usize {
        let mut budget = bound;
        let mut listing = String::new();
        let mut body = String::new();
        let mut partial = 0;
        for f in self.files {
            let text = f.text(self.patch);
            let size = if f.too_large {
                format!("{}, too large to load", human(f.bytes))
            } else {
                format!(
                    "+{} -{} lines, {} of diff",
                    f.added,
                    f.removed,
                    human(f.diff_bytes)
                )
            };
            let shown = if f.too_large {
                partial += 1;
                "not shown (its content was never loaded)".to_owned()
            } else if text.is_empty() && f.diff_bytes > 0 {
                partial += 1;
                "not shown (the diff was not kept)".to_owned()
            } else if text.len() <= budget {
                budget -= text.len();
                body.push_str(text);
                "shown whole".to_owned()
            } else {
                partial += 1;
                let (header, parts) = hunks(text);
                let mut taken = 0;
                let mut used = header.len();
                for h in &parts {
                    if used + h.len() > budget {
                        break;
                    }
                    used += h.len();
                    taken += 1;
                }
                if taken == 0 {
                    format!(
                        "NOT shown: its diff is larger than the {} left to show",
                        human(budget as u64)
                    )
                } else {
                    budget -= used;
                    body.push_str(header);
                    for h in &parts[..taken] {
                        body.push_str(h);
                    }
                    format!(
                        "partly shown: hunks 1-{taken} of {}, the rest is NOT shown",
                        parts.len()
                    )
                }
            };
            listing.push_str(&format!(
                "- `{}` ({}; {size}): {shown}\n",
                f.path,
                f.status.as_str()
            ));
        }
        s.push_str(&format!(
            "Files changed ({}), every one of them:\n",
            self.files.len()
        ));
        s.push_str(&listing);
        if !body.ends_with('\n') && !body.is_empty() {
            body.push('\n');
        }
        s.push_str("```diff\n");
        s.push_str(&body);
        s.push_str("```\n");
        if partial > 0 {
            s.push_str(&format!(
                "{partial} file(s) above are not shown whole (see the listing); judge what you see and do not assume what you were not shown is fine.\n"
            ));
        }
        partial
    }
}

/// What the critic of attempt 2 and later is told about the previous one:
/// why it was rejected and what changed since (the interdiff).
pub struct Previous<'a> {
    pub attempt: u32,
    /// The findings that rejected it, one line each (empty when the goal
    /// test did).
    pub findings: &'a [String],
    /// The goal step that failed, when the goal test rejected it.
    pub goal_failed: Option<&'a str>,
    /// Unified diff from the previous attempt's tree to this one.
    pub interdiff: Shown<'a>,
    /// Files changed since that no finding named (the scope check).
    pub unnamed: &'a [String],
}

/// The most interdiff text the critic is shown.
pub const MAX_INTERDIFF: usize = 64 * 1024;

impl Previous<'_> {
    fn render(&self, s: &mut String) {
        let a = self.attempt;
        s.push_str(&format!("\n# Since the previous review (attempt {a})\n"));
        match (self.findings.is_empty(), self.goal_failed) {
            (_, Some(step)) => s.push_str(&format!(
                "Attempt {a} was rejected because the goal test failed at step `{step}`.\n"
            )),
            (false, None) => {
                s.push_str(&format!("Attempt {a} was rejected for these findings:\n"));
                for (i, f) in self.findings.iter().enumerate() {
                    s.push_str(&format!("{}. {f}\n", i + 1));
                }
                s.push_str(
                    "Answer these first: was each finding fixed? A finding that was not fixed is a violation again; list it. \
                     Then: did anything else change? Judge that by the rules too.\n",
                );
            }
            (true, None) => s.push_str(&format!(
                "Attempt {a} was rejected because no usable verdict was given; judge the whole change.\n"
            )),
        }
        if !self.unnamed.is_empty() {
            s.push_str(&format!(
                "Scope warning: these files changed since attempt {a} although no finding named them: {}. \
                 Check that those changes stay inside the task.\n",
                self.unnamed
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        s.push_str(&format!(
            "\n## The interdiff: attempt {a}'s tree to this attempt's\n"
        ));
        self.interdiff.render(s, MAX_INTERDIFF);
    }
}

/// Everything the critic is shown, written to its stdin.
pub struct CriticInput<'a> {
    pub task: &'a str,
    pub baseline: &'a str,
    pub goal_names: Vec<&'a str>,
    pub rubric: &'a Rubric,
    pub base_ref: &'a str,
    /// The change since BASE_REF; within `bound` (the size gate saw to it).
    pub change: Shown<'a>,
    /// The size bound (`[guard] max_diff_kb`), in bytes.
    pub bound: u64,
    /// What the deterministic gates established, stated so the critic does
    /// not re-litigate it (empty when there are no gates to report).
    pub gates: &'a str,
    /// Files of the change that would be protected but for the lead's
    /// `[protect] allow`: the critic is told the lead allowed them, so it
    /// neither takes their change for tampering nor lets it pass unread.
    pub allowed: &'a [String],
    /// From attempt 2 on: the previous rejection and the interdiff.
    pub previous: Option<Previous<'a>>,
    /// How the critic's CLI takes the verdict ([`crate::agent::Agent::answer_with`]).
    pub answer_with: &'a str,
    /// Evidence mode: the red examiner tests' section
    /// ([`evidence::section`]), asking for rulings.
    pub examiner: Option<&'a str>,
}

impl CriticInput<'_> {
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# Task given to the author of the change\n");
        s.push_str(self.task);
        s.push_str("\n\n# Baseline: the goal test's output before any change\n");
        s.push_str(self.baseline.trim_end());
        s.push_str("\n\n# The goal test now\nEvery step passed: ");
        s.push_str(
            &self
                .goal_names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push('\n');
        if !self.gates.is_empty() {
            s.push_str(self.gates.trim_end());
            s.push('\n');
        }
        if !self.allowed.is_empty() {
            s.push_str("\n# Files the lead allowed to change\n");
            s.push_str(
                "The lead's configuration lifts the protection of these files (`[protect] allow` in loopd.toml), and this change touches them:\n",
            );
            for f in self.allowed {
                s.push_str(&format!("- `{f}`\n"));
            }
            s.push_str(
                "Changing them is not tampering in itself, and no gate rejected it. Judge those changes by the rules like the rest of the change: \
                 they must serve the task, and must not weaken what a test checks (fewer or looser assertions, a test that no longer exercises the code). \
                 Skip markers in them are still refused in code, and the test count still holds.\n",
            );
        }
        s.push_str(&format!("\n# Rubric: {}\n", self.rubric.name));
        if let Some(ctx) = &self.rubric.context {
            s.push_str(ctx);
            s.push_str("\n\n");
        }
        s.push_str("Rules:\n");
        s.push_str(&self.rubric.render_rules());
        s.push('\n');
        if let Some(p) = &self.previous {
            p.render(&mut s);
        }
        s.push_str(&format!(
            "\n# The change since {} (new untracked files included)\n",
            self.base_ref
        ));
        self.change.render(&mut s, self.bound as usize);
        if let Some(section) = self.examiner {
            s.push_str(section);
        }
        s.push('\n');
        let (empty, rulings) = match self.examiner {
            Some(_) => (
                r#"{"verdict": "PASS", "violations": [], "examiner": [...]}"#,
                " In `examiner`, give one ruling per red test above: its `test` id, `ruling` (`right` or `wrong`), `quote` (a `wrong` ruling's words from the task, the rules or the documentation; empty otherwise) and `behaviour` (what the code must do, in your own words).",
            ),
            None => (r#"{"verdict": "PASS", "violations": []}"#, ""),
        };
        s.push_str(&format!(
            "# How to answer\n\
             Judge only the numbered rules above; never comment on style or architecture, \
             and never ask to undo what the task and the goal test require.\n\
             Answer {} with {empty} if every rule holds. \
             Otherwise use verdict \"FAIL\" and list each violation with the rule number, the file, \
             the problem, and a one-line fix.{rulings}\n",
            self.answer_with
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::events::Event;
    use crate::agent::Agent;

    /// A Claude Code result line, as the critic session ends with it.
    fn result(json: &str) -> SessionResult {
        let mut out = Vec::new();
        crate::agent::ClaudeCode
            .parser()
            .line(json, &mut out)
            .expect("result json");
        match out.pop() {
            Some(Event::Result(r)) => *r,
            other => panic!("{other:?}"),
        }
    }

    /// A patch of one file, its section the whole text.
    fn one(path: &str, patch: &str) -> FilePatch {
        FilePatch {
            path: path.into(),
            status: crate::workspace::ChangeKind::Modified,
            start: 0,
            len: patch.len(),
            diff_bytes: patch.len() as u64,
            added: 1,
            removed: 0,
            bytes: 10,
            too_large: false,
        }
    }

    #[test]
    fn every_file_is_listed_and_nothing_is_cut_silently() {
        let a = "diff --git a/a.py b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n";
        let b = "diff --git a/b.py b/b.py\n@@ -1 +1 @@\n-y = 1\n+y = 2\n@@ -9 +9 @@\n-z = 1\n+print(z)\n";
        let patch = format!("{a}{b}");
        let mut second = one("b.py", b);
        second.start = a.len();
        let mut big = one("big.txt", "");
        big.too_large = true;
        big.bytes = 200 * 1024 * 1024;
        big.diff_bytes = 0;
        let files = [one("a.py", a), second, big];
        let shown = Shown {
            patch: &patch,
            files: &files,
        };

        let mut all = String::new();
        assert_eq!(
            shown.render(&mut all, 10_000),
            1,
            "only the huge file is not shown"
        );
        assert!(all.contains(a) && all.contains(b), "{all}");
        assert!(
            all.contains("- `big.txt` (modified; 200.0 MiB, too large to load): not shown"),
            "{all}"
        );
        assert!(
            all.contains("- `a.py` (modified; +1 -0 lines, 51 bytes of diff): shown whole"),
            "{all}"
        );

        // Too little room for b.py whole: its first hunk, whole, and a note.
        let mut part = String::new();
        let room = a.len() + "diff --git a/b.py b/b.py\n@@ -1 +1 @@\n-y = 1\n+y = 2\n".len() + 4;
        assert_eq!(shown.render(&mut part, room), 2);
        assert!(part.contains("+y = 2\n```"), "{part}");
        assert!(!part.contains("print(z)"), "{part}");
        assert!(part.contains("- `b.py` (modified; +1 -0 lines, 80 bytes of diff): partly shown: hunks 1-1 of 2, the rest is NOT shown"), "{part}");
        assert!(
            part.contains("2 file(s) above are not shown whole"),
            "{part}"
        );
    }

    #[test]
    fn only_a_clean_pass_is_a_pass() {
        let pass = result(
            r#"{"type":"result","is_error":false,"terminal_reason":"completed","structured_output":{"verdict":"PASS","violations":[]}}"#,
        );
        assert_eq!(read_verdict(Some(&pass)), CriticVerdict::Pass);
        let pass_but = result(
            r#"{"type":"result","is_error":false,"structured_output":{"verdict":"PASS","violations":[{"rule":2,"file":"a.py","problem":"p","fix":"f"}]}}"#,
        );
        assert_eq!(read_verdict(Some(&pass_but)).label(), "FAIL");
        let prose = result(r#"{"type":"result","is_error":false,"result":"PASS"}"#);
        assert!(matches!(
            read_verdict(Some(&prose)),
            CriticVerdict::Invalid { .. }
        ));
        let bad = result(
            r#"{"type":"result","is_error":false,"structured_output":{"verdict":"Pass","violations":[]}}"#,
        );
        assert!(matches!(
            read_verdict(Some(&bad)),
            CriticVerdict::Invalid { .. }
        ));
        let failed = result(
            r#"{"type":"result","is_error":true,"terminal_reason":"structured_output_retry_exhausted","structured_output":{"verdict":"PASS","violations":[]}}"#,
        );
        assert!(matches!(
            read_verdict(Some(&failed)),
            CriticVerdict::Invalid { .. }
        ));
        assert!(matches!(read_verdict(None), CriticVerdict::Invalid { .. }));
    }

    #[test]
    fn violations_render_as_the_next_prompt_lines() {
        let v = Violation {
            rule: 2,
            file: "rechnung.py".into(),
            problem: "debug print added".into(),
            fix: "remove the print".into(),
        };
        assert_eq!(
            v.render(),
            "rechnung.py (rule 2): debug print added — fix: remove the print"
        );
    }

    #[test]
    fn input_carries_task_baseline_rules_and_diff() {
        let rubric = Rubric::embedded_default();
        let input = CriticInput {
            task: "Make the tests pass.",
            baseline: "4 failed, 2 passed",
            goal_names: vec!["pytest", "ruff"],
            rubric: &rubric,
            base_ref: "abc123",
            change: Shown {
                patch: "+++ b/new.py\n+x = 1\n",
                files: &[one("new.py", "+++ b/new.py\n+x = 1\n")],
            },
            bound: 1024,
            gates: "",
            allowed: &[],
            previous: None,
            answer_with: "by calling the StructuredOutput tool",
            examiner: None,
        }
        .render();
        assert!(
            !input.contains("the lead allowed"),
            "no exceptions, no section"
        );
        for needle in [
            "Make the tests pass.",
            "4 failed, 2 passed",
            "`pytest`, `ruff`",
            "1. No test was deleted",
            "+x = 1",
            "since abc123",
            "Judge only the numbered rules",
        ] {
            assert!(input.contains(needle), "missing {needle:?}");
        }
    }

    #[test]
    fn from_attempt_two_the_input_asks_about_each_finding_first() {
        let rubric = Rubric::embedded_default();
        let findings = vec!["rechnung.py (rule 2): a print — fix: remove it".to_owned()];
        let unnamed = vec!["helpers.py".to_owned()];
        let input = CriticInput {
            task: "T",
            baseline: "B",
            goal_names: vec!["pytest"],
            rubric: &rubric,
            base_ref: "abc",
            change: Shown {
                patch: "+x = 1\n",
                files: &[one("a.py", "+x = 1\n")],
            },
            bound: 1024,
            gates: "",
            allowed: &[],
            previous: Some(Previous {
                attempt: 1,
                findings: &findings,
                goal_failed: None,
                interdiff: Shown {
                    patch: "-    print(x)\n",
                    files: &[one("rechnung.py", "-    print(x)\n")],
                },
                unnamed: &unnamed,
            }),
            answer_with: "by calling the StructuredOutput tool",
            examiner: None,
        }
        .render();
        let since = input
            .find("# Since the previous review (attempt 1)")
            .expect("section");
        let change = input.find("# The change since abc").expect("diff");
        assert!(since < change, "the previous findings come before the diff");
        for needle in [
            "1. rechnung.py (rule 2): a print — fix: remove it",
            "was each finding fixed?",
            "Scope warning: these files changed since attempt 1 although no finding named them: `helpers.py`",
            "-    print(x)",
        ] {
            assert!(input.contains(needle), "missing {needle:?} in\n{input}");
        }
    }

    #[test]
    fn the_critic_is_told_which_files_the_lead_allowed() {
        let rubric = Rubric::embedded_default();
        let allowed = vec!["tests/test_client.py".to_owned()];
        let patch = "+++ b/tests/test_client.py\n+client = Client(FakeTransport())\n";
        let input = CriticInput {
            task: "Point the live-service test at the fake transport.",
            baseline: "1 failed",
            goal_names: vec!["pytest"],
            rubric: &rubric,
            base_ref: "abc",
            change: Shown {
                patch,
                files: &[one("tests/test_client.py", patch)],
            },
            bound: 4096,
            gates: "The deterministic gates passed",
            allowed: &allowed,
            previous: None,
            answer_with: "by calling the StructuredOutput tool",
            examiner: None,
        }
        .render();
        let section = input
            .find("# Files the lead allowed to change")
            .expect("the section");
        assert!(
            section < input.find("# The change since abc").expect("the diff"),
            "the exception is read before the diff"
        );
        for needle in [
            "`[protect] allow` in loopd.toml",
            "- `tests/test_client.py`",
            "must not weaken what a test checks",
            "Skip markers in them are still refused in code",
        ] {
            assert!(input.contains(needle), "missing {needle:?} in\n{input}");
        }
    }

    #[test]
    fn a_violation_names_its_path() {
        for (file, path) in [
            ("a.py", "a.py"),
            ("./a.py", "a.py"),
            ("a.py:12", "a.py"),
            ("C:x", "C:x"),
        ] {
            let v = Violation {
                rule: 1,
                file: file.into(),
                problem: "p".into(),
                fix: "f".into(),
            };
            assert_eq!(v.path(), path);
        }
    }

    #[test]
    fn schema_requires_both_fields() {
        let s = verdict_schema();
        assert_eq!(s["required"], json!(["verdict", "violations"]));
    }
}
