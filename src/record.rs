//! What a job leaves for its views to show: the summary and its attempts
//! and totals, the failure report's record, and where the work was parked.
//! The journal folds its events into these; `report`, `report_html` and
//! `breaker` render or write them. Living here, below the journal, they
//! keep the journal from importing any view of itself.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::critic::Violation;
use crate::guard::caps::Spend;
use crate::outcome::{Escalation, Outcome, Reason};
use crate::workspace::SubmoduleParked;

/// One attempt, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub n: u32,
    pub goal_passed: bool,
    pub failed_step: Option<String>,
    /// Whether the held-out steps passed on this attempt's judge-only tree
    /// (`None`: they did not run — no held-out steps, or a gate before them
    /// rejected the attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_passed: Option<bool>,
    /// The whole suite's run on this attempt's judge-only tree (`None`: it
    /// did not run — no suite step, or a gate before it rejected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<SuiteRun>,
    /// Whether the examiner's tests passed on this attempt's judge-only
    /// tree (`None`: they did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examiner_passed: Option<bool>,
    /// `PASS` | `FAIL` | `invalid` | `skipped`.
    pub critic: String,
    /// Why the verdict was invalid, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic_note: Option<String>,
    pub violations: Vec<Violation>,
    /// Findings of the deterministic gates (tamper checks), one per line.
    #[serde(default)]
    pub gate_findings: Vec<String>,
    /// The gate that rejected this attempt (`protected_path`, `skip_marker`,
    /// `test_count_dropped`), if one did.
    #[serde(default)]
    pub rejected_by: Option<Reason>,
    /// Files that differ between the previous attempt's tree and this one's
    /// (`attempt-<n>/interdiff.patch` has the diff).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interdiff_files: Vec<String>,
    /// The scope check: files this attempt changed that no finding of the
    /// previous rejection named. A warning, not a gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope_warnings: Vec<String>,
    /// Files this attempt changed that would be protected but for the
    /// lead's `[protect] allow`: let through, and said so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_changes: Vec<String>,
    /// Tool calls loopd's hook denied during the agent session.
    #[serde(default)]
    pub denied_tool_calls: usize,
    pub cost_usd: f64,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub diff_sha256: String,
    /// Set when a guard ended the job during this attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Reason>,
    /// The prompt the agent was given.
    pub prompt_file: PathBuf,
}

/// The examiner of a job, as the summary reports it: its tests, what they
/// said at BASE_REF, and what it cost (its own line of the spend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExaminerSummary {
    pub model: String,
    /// `gate` or `evidence`.
    pub mode: String,
    /// Test files it wrote.
    pub tests: usize,
    pub failing_at_base: usize,
    pub passing_at_base: usize,
    pub dropped: usize,
    /// Whether the examiner revised its tests once, told their outcomes at
    /// BASE_REF (ids only).
    #[serde(default)]
    pub revised: bool,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Why no test of it judges the job, when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Tests the critic ruled wrong on a quote loopd found (evidence mode):
    /// dropped from the attempt named on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ruled_wrong: Vec<RuledWrong>,
}

/// An examiner test the critic ruled wrong, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuledWrong {
    pub test: String,
    pub attempt: u32,
    /// What the critic quoted, and where loopd found it.
    pub quote: String,
    pub found_in: String,
}

/// One run of the whole suite, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteRun {
    /// Whether a test that passed at BASE_REF did not pass.
    pub regressed: bool,
    /// How long it ran: its cost outside the model.
    pub ms: u64,
}

/// The whole suite step of a job (`[judge] suite`), as the summary
/// reports it: what ran, what passed at BASE_REF, and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteSummary {
    pub command: String,
    /// Tests that passed at BASE_REF, by id (`None`: the runner wrote no
    /// report loopd reads; compared by its output instead).
    pub passing_at_base: Option<usize>,
    pub baseline_ms: u64,
    /// Every run's time, the baseline's included.
    pub total_ms: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Totals {
    pub cost_usd: f64,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub wall_ms: u64,
}

/// Costs to a billionth of a dollar: sums of float prices print as
/// `0.015985` rather than `0.015985000000000003`.
pub fn round_usd(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

impl Totals {
    pub fn from_spend(s: &Spend, wall_ms: u64) -> Totals {
        Totals {
            cost_usd: round_usd(s.cost_usd),
            turns: s.turns,
            input_tokens: s.input_tokens,
            output_tokens: s.output_tokens,
            wall_ms,
        }
    }
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub job_id: String,
    pub repo: PathBuf,
    pub base_ref: String,
    pub task: String,
    pub outcome: Outcome,
    pub reason: Reason,
    /// A sentence on what happened, for humans.
    pub detail: String,
    pub attempts: Vec<AttemptRecord>,
    /// The agent's claim, when the job ended `escalated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
    pub totals: Totals,
    pub stash_commit: Option<String>,
    pub failure_report: Option<PathBuf>,
    /// How the agent, the critic and the goal steps were confined:
    /// `landlock`, `unsupported` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::Confinement>,
    /// The network the job's processes got (`gateway-only` or `open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::sandbox::Network>,
    /// Where the judge ran: `hermetic` (a world of its own per run) or
    /// `shared` (the worktree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<crate::sandbox::Judge>,
    /// Goal steps whose test-count gate was off because their baseline
    /// output had no summary loopd could read (step → why).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub test_count_off: BTreeMap<String, String>,
    /// The whole suite step, when the job has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<SuiteSummary>,
    /// The examiner, when the job has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examiner: Option<ExaminerSummary>,
    pub run_dir: PathBuf,
    pub started_at: String,
    pub finished_at: String,
}

impl Summary {
    /// The outcome in the words a human reads.
    pub fn outcome_word(&self) -> &'static str {
        match self.outcome {
            Outcome::Accepted => "accepted",
            Outcome::Exhausted => "exhausted",
            Outcome::Stopped => "stopped",
            Outcome::Interrupted => "interrupted",
            Outcome::Error => "error",
            Outcome::NothingToFix => "nothing to fix",
            Outcome::NeedsHuman => "needs a human",
        }
    }

    /// The task's first line, short enough for a commit or PR title.
    pub fn headline(&self) -> String {
        self.task
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect()
    }
}

/// `failure.json`: what a human needs when the job did not end in acceptance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailureReport {
    pub job_id: String,
    pub reason: Reason,
    pub detail: String,
    pub timestamp: String,
    pub repo: PathBuf,
    pub base_ref: String,
    pub stash_commit: Option<String>,
    /// The submodules' own stashes (a git stash never looks inside one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submodule_stashes: Vec<crate::workspace::SubmoduleParked>,
    /// The one command that gets the work back (every stash applied).
    pub restore: String,
    pub totals: Totals,
    pub attempts: usize,
    pub last_events: Vec<serde_json::Value>,
}

/// Where the work went: recorded in the journal before any report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parked {
    /// The stash commit (`None`: nothing to park, or parking failed).
    pub stash_commit: Option<String>,
    /// Why parking failed, if it did: the work is then still in the tree.
    pub error: Option<String>,
    /// The submodules that had something to park (or failed to).
    pub submodules: Vec<SubmoduleParked>,
}

/// The name of a run's resolved job, written when it starts.
pub const JOB_FILE: &str = "job.json";

/// What the views read back of a run's `job.json` — the report's budget
/// and attempts, `loopd tail`'s budget, `loopd approve`'s settings — in one
/// reader. The file is the configuration layer's (`Job`, above this one);
/// a field it lacks or cannot be read is absent here, never an error: a
/// view of an older run still shows the rest.
#[derive(Debug, Default, Deserialize)]
pub struct JobFile {
    /// The spend caps the job ran under.
    #[serde(default, deserialize_with = "lenient")]
    pub caps: Option<crate::guard::caps::Limits>,
    #[serde(default, deserialize_with = "lenient")]
    pub max_attempts: Option<u32>,
    /// `[approval]`, read by the daemon's layer.
    #[serde(default)]
    pub approval: serde_json::Value,
}

impl JobFile {
    /// The largest `job.json` read (a task and a rubric fit many times).
    pub const MAX_BYTES: u64 = 16 << 20;

    /// `run_dir`'s job file, if it is there and reads as JSON.
    pub fn read(run_dir: &std::path::Path) -> Option<JobFile> {
        let bytes = crate::util::read_untrusted(&run_dir.join(JOB_FILE), Self::MAX_BYTES).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(&text)).ok()
    }
}

/// A field that does not read as its type is absent, not the whole file.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}
