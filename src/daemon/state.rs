//! A job's state as the daemon and `loopd status` see it:
//! `runs/<job-id>/state.json`, written atomically at every transition — a
//! view of the job's journal, written after it (and repaired from it).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::spool::JobSpec;

pub use crate::outcome::Status;

/// `state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobState {
    pub job_id: String,
    pub state: Status,
    pub repo: PathBuf,
    pub git_ref: String,
    pub commit: String,
    pub branch: String,
    pub task: String,
    /// The goal steps the job runs: the only commands it can make the daemon run.
    pub goal: Vec<String>,
    pub attempt: u32,
    pub spent_usd: f64,
    pub reason: Option<String>,
    pub detail: Option<String>,
    /// The accepted commit on `branch`, when accepted.
    pub commit_accepted: Option<String>,
    pub stash_commit: Option<String>,
    pub report: Option<PathBuf>,
    pub summary: Option<PathBuf>,
    /// What the approved outward step did (set once: it runs at most once).
    #[serde(default)]
    pub delivered: Option<String>,
    /// Run by `loopd run` in the repository itself (no branch, no spool file).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub foreground: bool,
    /// The `loopd run` process of a foreground job, while it runs: `status`
    /// tells a job whose process was killed from one still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub updated_at: String,
}

impl JobState {
    pub fn new(spec: &JobSpec, state: Status) -> JobState {
        JobState {
            job_id: spec.job_id.clone(),
            state,
            repo: spec.repo.clone(),
            git_ref: spec.git_ref.clone(),
            commit: spec.commit.clone(),
            branch: branch_name(&spec.job_id),
            task: spec.task.clone(),
            goal: spec.goal.clone(),
            attempt: 0,
            spent_usd: 0.0,
            reason: None,
            detail: None,
            commit_accepted: None,
            stash_commit: None,
            report: None,
            summary: None,
            delivered: None,
            foreground: false,
            pid: None,
            updated_at: crate::util::now_rfc3339(),
        }
    }

    /// A job `loopd run` runs in the foreground: it shows in `loopd status`
    /// beside the daemon's, without a branch.
    pub fn foreground(spec: &JobSpec) -> JobState {
        JobState {
            branch: String::new(),
            foreground: true,
            pid: Some(std::process::id()),
            ..JobState::new(spec, Status::Running)
        }
    }

    /// Take the ending from a job's summary.
    pub fn fill_from(&mut self, summary: &crate::record::Summary) {
        self.attempt = summary.attempts.last().map_or(0, |a| a.n);
        self.spent_usd = summary.totals.cost_usd;
        self.reason = Some(summary.reason.to_string());
        self.detail = Some(summary.detail.clone());
        self.stash_commit = summary.stash_commit.clone();
        self.report = summary.failure_report.clone();
        self.summary = Some(summary.run_dir.join("summary.json"));
        self.state = Status::from_outcome(summary.outcome);
        self.pid = None;
    }

    pub fn path(state_dir: &Path, id: &str) -> PathBuf {
        state_dir.join("runs").join(id).join("state.json")
    }

    /// Read a state file; a BOM is tolerated, a truncated file is `None`
    /// (the caller falls back to the spool and the journal).
    pub fn load(state_dir: &Path, id: &str) -> Option<JobState> {
        let path = Self::path(state_dir, id);
        let text = std::fs::read_to_string(&path).ok()?;
        match serde_json::from_str(text.trim_start_matches('\u{feff}')) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable job state");
                None
            }
        }
    }

    pub fn save(&mut self, state_dir: &Path) {
        self.updated_at = crate::util::now_rfc3339();
        let path = Self::path(state_dir, &self.job_id);
        if let Some(dir) = path.parent() {
            let _ = crate::util::private_dir(dir);
        }
        if let Err(e) = crate::util::write_json_atomic(&path, self) {
            tracing::error!(path = %path.display(), error = %e, "cannot write the job state");
        }
    }
}

/// The branch a job works on.
pub fn branch_name(id: &str) -> String {
    format!("loopd/{id}")
}
