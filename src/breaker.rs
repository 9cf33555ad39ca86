//! The circuit breaker: on every ending that is not acceptance, park the
//! work where nothing can lose it and write a report a human can act on.
//!
//! Parking is `git stash push --include-untracked` (git2) with the message
//! `loopd <job-id>: <reason>`, plus `refs/loopd/stash/<job-id>` on the stash
//! commit so that `git stash drop`/`clear` or gc cannot lose it. The report,
//! `failure.json`, lives in the state dir, never in the repository.

use std::path::{Path, PathBuf};

use crate::outcome::Reason;
use crate::report::{self, FailureReport, Totals};
use crate::workspace::{Workspace, WorkspaceError};

/// What the breaker did.
#[derive(Debug, Clone)]
pub struct Parked {
    pub stash_commit: Option<String>,
    pub report: PathBuf,
}

/// Everything the report needs from the job.
pub struct Trip<'a> {
    pub job_id: &'a str,
    pub reason: Reason,
    pub detail: &'a str,
    pub base_ref: &'a str,
    pub totals: Totals,
    pub attempts: usize,
    pub last_events: Vec<serde_json::Value>,
    pub run_dir: &'a Path,
}

#[derive(Debug, thiserror::Error)]
pub enum BreakerError {
    #[error(transparent)]
    Park(#[from] WorkspaceError),
    #[error("cannot write the failure report `{}`: {source}", path.display())]
    Report {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Park the work and write `failure.json`. If parking fails, the report is
/// still written (saying so) and the tree is left exactly as it was.
pub fn trip(ws: &mut Workspace, trip: Trip<'_>) -> Result<Parked, BreakerError> {
    let message = format!("loopd {}: {}", trip.job_id, trip.reason);
    let parked = ws.park(trip.job_id, &message);
    let (stash_commit, park_error) = match &parked {
        Ok(Some(oid)) => (Some(oid.to_string()), None),
        Ok(None) => (None, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let repo = ws.root().to_path_buf();
    let restore = match (&stash_commit, &park_error) {
        (Some(c), _) => format!(
            "git -C {} stash apply {c}",
            crate::agent::key::shell_quote(&repo.to_string_lossy())
        ),
        (None, None) => "nothing to restore: the agent left no changes".to_owned(),
        (None, Some(e)) => {
            format!("nothing was parked ({e}); the agent's changes are still in the working tree")
        }
    };
    match &stash_commit {
        Some(c) => tracing::info!(stash_commit = %c, "work parked"),
        None if park_error.is_none() => {
            tracing::info!("nothing to park: the working tree is unchanged")
        }
        None => {}
    }
    let report = FailureReport {
        job_id: trip.job_id.to_owned(),
        reason: trip.reason,
        detail: trip.detail.to_owned(),
        timestamp: report::now_rfc3339(),
        repo,
        base_ref: trip.base_ref.to_owned(),
        stash_commit: stash_commit.clone(),
        restore,
        totals: trip.totals,
        attempts: trip.attempts,
        last_events: trip.last_events,
    };
    let path = trip.run_dir.join("failure.json");
    report::write_json_atomic(&path, &report).map_err(|source| BreakerError::Report {
        path: path.clone(),
        source,
    })?;
    parked?;
    Ok(Parked {
        stash_commit,
        report: path,
    })
}
