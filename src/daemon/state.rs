//! A job's durable state as the daemon and `loopd status` see it:
//! `runs/<job-id>/state.json`, written atomically at every transition.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::spool::JobSpec;
use crate::outcome::Outcome;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Accepted,
    Exhausted,
    Stopped,
    /// Suspended by a daemon shutdown; resumes when the daemon starts.
    Interrupted,
    Error,
    Cancelled,
    /// Accepted, committed on its branch, nothing pushed: waits for
    /// `loopd approve` or `loopd reject`.
    AwaitingApproval,
    /// Accepted, then rejected by a human; the change stays parked.
    Rejected,
}

impl Status {
    pub fn from_outcome(o: Outcome) -> Status {
        match o {
            Outcome::Accepted => Status::Accepted,
            Outcome::Exhausted => Status::Exhausted,
            Outcome::Stopped => Status::Stopped,
            Outcome::Interrupted => Status::Interrupted,
            Outcome::Error => Status::Error,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Accepted => "accepted",
            Status::Exhausted => "exhausted",
            Status::Stopped => "stopped",
            Status::Interrupted => "interrupted",
            Status::Error => "error",
            Status::Cancelled => "cancelled",
            Status::AwaitingApproval => "awaiting_approval",
            Status::Rejected => "rejected",
        }
    }
}

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
            updated_at: crate::report::now_rfc3339(),
        }
    }

    pub fn path(state_dir: &Path, id: &str) -> PathBuf {
        state_dir.join("runs").join(id).join("state.json")
    }

    /// Read a state file; a BOM is tolerated, a truncated file is `None`
    /// (the caller falls back to the spool and the checkpoint).
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
        self.updated_at = crate::report::now_rfc3339();
        let path = Self::path(state_dir, &self.job_id);
        if let Some(dir) = path.parent() {
            let _ = crate::job::private_dir(dir);
        }
        if let Err(e) = crate::report::write_json_atomic(&path, self) {
            tracing::error!(path = %path.display(), error = %e, "cannot write the job state");
        }
    }
}

/// The branch a job works on.
pub fn branch_name(id: &str) -> String {
    format!("loopd/{id}")
}
