//! `loopd ci`: a gated autofix of a red build.
//!
//! Reasoning and execution live apart: the loop (agent, gates, critic) runs
//! first; then the **autofix gate** is computed in code — accepted, every
//! deterministic gate green, and the risk policy ([`crate::judges::risk`]) satisfied — and
//! only then does the one step that writes to the outside world run: push
//! `loopd/autofix/<short-sha>` and open a pull request against the failing
//! branch. Otherwise nothing is pushed and the reason is reported.
//!
//! Safety: nothing runs on loopd's own branches or commits (no recursion);
//! at most one pull request per failing commit (a second run finds the first
//! and stops; a run after a partial failure opens the pull request from the
//! branch the first one pushed, without a model call); an event from a fork
//! is refused unless the config allows it; the token never reaches the
//! agent, a log line or a file, and goes only where loopd decided before the
//! agent ran ([`github::PushTarget`]).
//!
//! Only [`github`] knows GitHub.

pub mod autofix;
pub mod event;
pub mod follow;
pub mod github;
pub mod merge;

use std::path::Path;

use serde::Serialize;

use crate::record::Summary;
use crate::workspace::Workspace;

/// The trailer every loopd commit carries (no recursion on loopd's commits).
pub const TRAILER: &str = "Loopd-Job:";

/// The trailer of an autofix commit: the failing commit it fixes (a rerun
/// recognizes an earlier run's fix by it).
pub const FIX_TRAILER: &str = "Loopd-Autofix-Of:";

/// The branch an autofix of `sha` is pushed to.
pub fn autofix_branch(sha: &str) -> String {
    format!("loopd/autofix/{}", &sha[..sha.len().min(12)])
}

pub use crate::outcome::CiDecision as Decision;

/// What `loopd ci` decided, for the step summary and `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct CiReport {
    pub decision: Decision,
    pub why: String,
    pub sha: String,
    pub branch: Option<String>,
    /// Where the fix is (or would be) pushed, decided before the agent ran.
    pub push_url: Option<String>,
    pub pull_request: Option<github::PullRequest>,
    pub risk_violations: Vec<String>,
    pub summary: Option<Summary>,
    /// A round's own time outside its job (API calls, the audit, commit,
    /// push, answer), in milliseconds: what following a pull request adds
    /// to the agent and the judges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead_ms: Option<u64>,
}

impl CiReport {
    /// A decision about commit `sha` before anything was pushed.
    pub fn new(decision: Decision, why: String, sha: &str) -> CiReport {
        CiReport {
            decision,
            why,
            sha: sha.to_owned(),
            branch: None,
            push_url: None,
            pull_request: None,
            risk_violations: vec![],
            summary: None,
            overhead_ms: None,
        }
    }
}

/// Is this loopd's own work? (Its branches, or commits it made.)
pub fn is_loopd_work(branch: &str, ws: &Workspace) -> Option<String> {
    if branch.starts_with("loopd/") {
        return Some(format!("`{branch}` is one of loopd's own branches"));
    }
    let head = ws.git2().head().ok()?.peel_to_commit().ok()?;
    let msg = head.message().unwrap_or("");
    if msg.lines().any(|l| l.starts_with(TRAILER)) {
        return Some(format!("commit {} was made by loopd", head.id()));
    }
    None
}

/// The pull request's body: what was wrong, what changed, the verdict, the cost.
pub fn pr_body(summary: &Summary, baseline_excerpt: &str, run_url: Option<&str>) -> String {
    let last = summary.attempts.last();
    let mut b = String::from("## loopd autofix\n\n");
    b.push_str(&format!("**Task:** {}\n\n", summary.task));
    b.push_str("### What was wrong\n\n```\n");
    b.push_str(baseline_excerpt.trim_end());
    b.push_str("\n```\n\n### What changed\n\n");
    b.push_str(&format!(
        "See the diff. Accepted at attempt {} of this run; BASE_REF `{}`.\n\n",
        last.map_or(0, |a| a.n),
        summary.base_ref
    ));
    b.push_str("### Verdict\n\n");
    b.push_str(&format!(
        "- goal test: green\n- deterministic gates: passed (tests at BASE_REF unchanged, no skip markers, test count kept)\n- critic: {}\n- risk policy: passed\n\n",
        last.map_or("?", |a| a.critic.as_str())
    ));
    b.push_str(&format!(
        "### Cost\n\n${:.4}, {} turns, {} input / {} output tokens, {:.1} s\n",
        summary.totals.cost_usd,
        summary.totals.turns,
        summary.totals.input_tokens,
        summary.totals.output_tokens,
        summary.totals.wall_ms as f64 / 1000.0
    ));
    if let Some(u) = run_url {
        b.push_str(&format!("\n[The CI run]({u})\n"));
    }
    b
}

/// Append Markdown to `$GITHUB_STEP_SUMMARY`.
pub fn write_step_summary(path: &Path, report: &CiReport) {
    let mut md = format!(
        "## loopd autofix: {}\n\n{}\n\n",
        report.decision.as_str(),
        report.why
    );
    if let Some(pr) = &report.pull_request {
        md.push_str(&format!("Pull request: [#{}]({})\n\n", pr.number, pr.url));
    }
    if let (Some(branch), Some(url)) = (&report.branch, &report.push_url) {
        md.push_str(&format!("Branch: `{branch}` at `{url}`\n\n"));
    }
    for v in &report.risk_violations {
        md.push_str(&format!("- risk policy: {v}\n"));
    }
    if let Some(s) = &report.summary {
        md.push('\n');
        md.push_str(&crate::report::markdown(None, s, None, &Default::default()));
    }
    use std::io::Write;
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        Ok(mut f) => {
            let _ = f.write_all(md.as_bytes());
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the step summary")
        }
    }
}
