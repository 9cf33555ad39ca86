//! What a job leaves behind, outside the repository: `summary.json` (also
//! what `--json` prints), `ledger.jsonl` (one line per tool call, model call,
//! session, attempt and stop), the per-attempt files, and `failure.json`.
//! Nothing here ever contains the API key: it is never given to this module.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::critic::Violation;
use crate::guard::caps::Spend;
use crate::outcome::{Outcome, Reason};

/// One attempt, as the summary reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub n: u32,
    pub goal_passed: bool,
    pub failed_step: Option<String>,
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
    pub totals: Totals,
    pub stash_commit: Option<String>,
    pub failure_report: Option<PathBuf>,
    pub run_dir: PathBuf,
    pub started_at: String,
    pub finished_at: String,
}

impl Summary {
    pub fn outcome_word(&self) -> &'static str {
        outcome_word(self.outcome)
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
    /// The one command that gets the work back.
    pub restore: String,
    pub totals: Totals,
    pub attempts: usize,
    pub last_events: Vec<serde_json::Value>,
}

/// The ledger: `ledger.jsonl`, one line per event, flushed as written so a
/// crash loses nothing; the last few entries are kept for `failure.json`.
pub struct Ledger {
    file: std::fs::File,
    recent: VecDeque<serde_json::Value>,
    lines: usize,
}

/// How many entries `failure.json` quotes.
pub const LAST_EVENTS: usize = 10;

impl Ledger {
    /// Open for appending (a resumed job continues its ledger).
    pub fn create(path: &Path) -> std::io::Result<Ledger> {
        let lines = match std::fs::read(path) {
            Ok(bytes) => bytes.iter().filter(|&&b| b == b'\n').count(),
            Err(_) => 0,
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Ledger {
            file,
            recent: VecDeque::with_capacity(LAST_EVENTS + 1),
            lines,
        })
    }

    /// How many lines the ledger holds.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Spend recorded after line `from`: finished sessions by their
    /// reconciled totals, unfinished ones by their model calls' estimates.
    /// A job resumed after a crash adds this to its checkpoint's spend.
    pub fn spend_after(path: &Path, from: usize) -> Spend {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut total = Spend::default();
        let mut pending: std::collections::HashMap<(u64, String), Spend> = Default::default();
        for line in text.lines().skip(from) {
            let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let key = (
                e["attempt"].as_u64().unwrap_or(0),
                e["role"].as_str().unwrap_or("").to_owned(),
            );
            let n = |k: &str| e[k].as_u64().unwrap_or(0);
            match e["event"].as_str() {
                Some("model_call") => {
                    let p = pending.entry(key).or_default();
                    p.cost_usd += e["cost_usd_estimate"].as_f64().unwrap_or(0.0);
                    p.turns += 1;
                    p.input_tokens += n("input_tokens");
                    p.output_tokens += n("output_tokens");
                }
                Some("session_end") => {
                    pending.remove(&key);
                    total.add(&Spend {
                        cost_usd: e["cost_usd"].as_f64().unwrap_or(0.0),
                        turns: n("turns"),
                        input_tokens: n("input_tokens"),
                        output_tokens: n("output_tokens"),
                    });
                }
                _ => {}
            }
        }
        for p in pending.values() {
            total.add(p);
        }
        total
    }

    /// Append one entry (an object; `ts` is added).
    pub fn record(&mut self, mut entry: serde_json::Value) {
        if let Some(obj) = entry.as_object_mut() {
            obj.insert("ts".into(), serde_json::Value::String(now_rfc3339()));
        }
        let mut line = entry.to_string();
        line.push('\n');
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => self.lines += 1,
            Err(e) => tracing::warn!(error = %e, "cannot append to the ledger"),
        }
        self.recent.push_back(entry);
        if self.recent.len() > LAST_EVENTS {
            self.recent.pop_front();
        }
    }

    pub fn last_events(&self) -> Vec<serde_json::Value> {
        self.recent.iter().cloned().collect()
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Write `value` as pretty JSON to `path` atomically (temp file + rename),
/// so a reader never sees half a file.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    text.push('\n');
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// A short human account of a summary, for stderr at the end of a run.
pub fn render_human(s: &Summary) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "loopd {}: {} ({})\n",
        s.job_id,
        outcome_word(s.outcome),
        s.reason
    ));
    out.push_str(&format!("  {}\n", s.detail));
    for a in &s.attempts {
        let goal = if a.goal_passed {
            "goal green".to_owned()
        } else {
            format!("goal red at `{}`", a.failed_step.as_deref().unwrap_or("?"))
        };
        out.push_str(&format!(
            "  attempt {}: {goal}, critic {}, {} violation(s), ${:.4}, {} turns\n",
            a.n,
            a.critic,
            a.violations.len(),
            a.cost_usd,
            a.turns
        ));
        for line in &a.gate_findings {
            out.push_str(&format!("    gate: {line}\n"));
        }
        for v in &a.violations {
            out.push_str(&format!("    {}\n", v.render()));
        }
    }
    out.push_str(&format!(
        "  total: ${:.4}, {} turns, {} in / {} out tokens, {:.1}s\n",
        s.totals.cost_usd,
        s.totals.turns,
        s.totals.input_tokens,
        s.totals.output_tokens,
        s.totals.wall_ms as f64 / 1000.0
    ));
    if let Some(c) = &s.stash_commit {
        out.push_str(&format!(
            "  work parked: `git -C {} stash apply {c}`\n",
            s.repo.display()
        ));
    }
    if let Some(f) = &s.failure_report {
        out.push_str(&format!("  report: `{}`\n", f.display()));
    }
    out.push_str(&format!("  run dir: `{}`\n", s.run_dir.display()));
    out
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Accepted => "accepted",
        Outcome::Exhausted => "exhausted",
        Outcome::Stopped => "stopped",
        Outcome::Interrupted => "interrupted",
        Outcome::Error => "error",
    }
}
