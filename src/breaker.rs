//! The circuit breaker: on every ending that is not acceptance, park the
//! work where nothing can lose it and write a report a human can act on.
//!
//! Parking is `git stash push --include-untracked` (git2) with the message
//! `loopd <job-id>: <reason>`, plus `refs/loopd/stash/<job-id>` on the stash
//! commit so that `git stash drop`/`clear` or gc cannot lose it. The report,
//! `failure.json`, lives in the state dir, never in the repository. The job
//! journals where the work went *between* the two steps, so a full disk or a
//! failing report never hides it.

use std::path::{Path, PathBuf};

use crate::outcome::Reason;
use crate::report::{FailureReport, Totals};
use crate::workspace::Workspace;

/// Where the work went: recorded in the journal before any report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parked {
    /// The stash commit (`None`: nothing to park, or parking failed).
    pub stash_commit: Option<String>,
    /// Why parking failed, if it did: the work is then still in the tree.
    pub error: Option<String>,
}

/// Everything the report needs from the job.
pub struct Trip<'a> {
    pub job_id: &'a str,
    pub reason: Reason,
    pub detail: &'a str,
    pub repo: &'a Path,
    pub base_ref: &'a str,
    pub totals: Totals,
    pub attempts: usize,
    pub last_events: Vec<serde_json::Value>,
    pub run_dir: &'a Path,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write the failure report `{}`: {source}", path.display())]
pub struct ReportError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Park the work: a stash (untracked files included) pinned by a ref. A
/// failure leaves the tree exactly as it was and says why. Idempotent: a
/// job parked by a run that was killed before recording it finds its ref.
pub fn park(ws: &mut Workspace, job_id: &str, reason: Reason) -> Parked {
    let message = format!("loopd {job_id}: {reason}");
    match ws.park(job_id, &message) {
        Ok(Some(oid)) => {
            tracing::info!(stash_commit = %oid, "work parked");
            Parked {
                stash_commit: Some(oid.to_string()),
                error: None,
            }
        }
        Ok(None) => {
            tracing::info!("nothing to park: the working tree is unchanged");
            Parked::default()
        }
        Err(e) => {
            tracing::error!(error = %e, "the circuit breaker could not park the work; the working tree is left as it is");
            Parked {
                stash_commit: None,
                error: Some(e.to_string()),
            }
        }
    }
}

/// Write `failure.json` (outside the repository) for parked work.
pub fn report(trip: Trip<'_>, parked: &Parked) -> Result<PathBuf, ReportError> {
    let restore = match (&parked.stash_commit, &parked.error) {
        (Some(c), _) => format!(
            "git -C {} stash apply {c}",
            crate::util::shell_quote(&trip.repo.to_string_lossy())
        ),
        (None, None) => "nothing to restore: the agent left no changes".to_owned(),
        (None, Some(e)) => {
            format!("nothing was parked ({e}); the agent's changes are still in the working tree")
        }
    };
    let report = FailureReport {
        job_id: trip.job_id.to_owned(),
        reason: trip.reason,
        detail: trip.detail.to_owned(),
        timestamp: crate::util::now_rfc3339(),
        repo: trip.repo.to_path_buf(),
        base_ref: trip.base_ref.to_owned(),
        stash_commit: parked.stash_commit.clone(),
        restore,
        totals: trip.totals,
        attempts: trip.attempts,
        last_events: trip.last_events,
    };
    let path = trip.run_dir.join("failure.json");
    crate::util::write_json_atomic(&path, &report).map_err(|source| ReportError {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}
