//! The circuit breaker: on every ending that is not acceptance, park the
//! work where nothing can lose it and write a report a human can act on.
//!
//! Parking is `git stash push --include-untracked` (git2) with the message
//! `loopd <job-id>: <reason>`, plus `refs/loopd/stash/<job-id>` on the stash
//! commit so that `git stash drop`/`clear` or gc cannot lose it. The report,
//! `failure.json`, lives in the state dir, never in the repository. The job
//! journals where the work went *between* the two steps, so a full disk or a
//! failing report never hides it.
//!
//! A git stash never looks inside a submodule, so each checked-out
//! submodule with changes is parked the same way in its own repository
//! (its stash pinned by its own `refs/loopd/stash/<job-id>`), and the
//! report's `restore` applies every stash.

use std::path::{Path, PathBuf};

use crate::outcome::Reason;
use crate::record::{FailureReport, Parked, Totals};
use crate::util::shell_quote;
use crate::workspace::{SubmoduleParked, Workspace};

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

/// Park the work: a stash (untracked files included) pinned by a ref, in
/// the repository and in each submodule with changes. A failure leaves that
/// tree exactly as it was and says why. Idempotent: a job parked by a run
/// that was killed before recording it finds its refs.
pub fn park(ws: &mut Workspace, job_id: &str, reason: Reason) -> Parked {
    let message = format!("loopd {job_id}: {reason}");
    let mut parked = match ws.park(job_id, &message) {
        Ok(Some(oid)) => {
            tracing::info!(stash_commit = %oid, "work parked");
            Parked {
                stash_commit: Some(oid.to_string()),
                ..Parked::default()
            }
        }
        Ok(None) => {
            tracing::info!("nothing to park: the working tree is unchanged");
            Parked::default()
        }
        Err(e) => {
            tracing::error!(error = %e, "the circuit breaker could not park the work; the working tree is left as it is");
            Parked {
                error: Some(e.to_string()),
                ..Parked::default()
            }
        }
    };
    match ws.park_submodules(job_id, &message) {
        Ok(subs) => parked.submodules = subs,
        Err(e) => {
            tracing::error!(error = %e, "the circuit breaker could not look into the submodules; their working trees are left as they are");
            parked.submodules.push(SubmoduleParked {
                path: "*".into(),
                error: Some(e.to_string()),
                ..SubmoduleParked::default()
            });
        }
    }
    for sub in &parked.submodules {
        match (&sub.stash_commit, &sub.error) {
            (_, Some(e)) => {
                tracing::error!(submodule = %sub.path, error = %e, "the circuit breaker could not park the work inside a submodule; its working tree is left as it is")
            }
            (Some(c), None) => {
                tracing::info!(submodule = %sub.path, stash_commit = %c, "work inside a submodule parked")
            }
            (None, None) => {}
        }
        if let Some(head) = &sub.moved_head {
            tracing::warn!(submodule = %sub.path, head = %head, "the agent moved a submodule's commit; it is left checked out there, pinned");
        }
    }
    parked
}

/// The `restore` line of `failure.json`: the commands that apply every
/// stash, then what could not be parked, if anything.
fn restore_hint(repo: &Path, parked: &Parked) -> String {
    let repo = repo.to_string_lossy();
    let mut commands = Vec::new();
    if let Some(c) = &parked.stash_commit {
        commands.push(format!("git -C {} stash apply {c}", shell_quote(&repo)));
    }
    for sub in &parked.submodules {
        if let Some(c) = &sub.stash_commit {
            let dir = format!("{repo}/{}", sub.path);
            commands.push(format!("git -C {} stash apply {c}", shell_quote(&dir)));
        }
    }
    let mut left = Vec::new();
    if let Some(e) = &parked.error {
        left.push(format!(
            "nothing was parked ({e}); the agent's changes are still in the working tree"
        ));
    }
    for sub in &parked.submodules {
        if let Some(e) = &sub.error {
            left.push(format!(
                "`{}` was not parked ({e}); the agent's changes are still in its working tree",
                sub.path
            ));
        }
    }
    match (commands.is_empty(), left.is_empty()) {
        (true, true) => "nothing to restore: the agent left no changes".to_owned(),
        (false, true) => commands.join(" && "),
        (true, false) => left.join("; "),
        (false, false) => format!("{}; {}", commands.join(" && "), left.join("; ")),
    }
}

/// Write `failure.json` (outside the repository) for parked work.
pub fn report(trip: Trip<'_>, parked: &Parked) -> Result<PathBuf, ReportError> {
    let restore = restore_hint(trip.repo, parked);
    let report = FailureReport {
        job_id: trip.job_id.to_owned(),
        reason: trip.reason,
        detail: trip.detail.to_owned(),
        timestamp: crate::util::now_rfc3339(),
        repo: trip.repo.to_path_buf(),
        base_ref: trip.base_ref.to_owned(),
        stash_commit: parked.stash_commit.clone(),
        submodule_stashes: parked.submodules.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(path: &str, stash: Option<&str>, error: Option<&str>) -> SubmoduleParked {
        SubmoduleParked {
            path: path.into(),
            stash_commit: stash.map(Into::into),
            error: error.map(Into::into),
            ..SubmoduleParked::default()
        }
    }

    #[test]
    fn the_restore_line_applies_every_stash_and_names_what_was_left() {
        let repo = Path::new("/src/my app");
        let cases = [
            (Parked::default(), "nothing to restore: the agent left no changes"),
            (
                Parked {
                    stash_commit: Some("aaa".into()),
                    submodules: vec![sub("vendor", Some("bbb"), None)],
                    ..Parked::default()
                },
                "git -C '/src/my app' stash apply aaa && git -C '/src/my app/vendor' stash apply bbb",
            ),
            (
                Parked {
                    submodules: vec![sub("vendor/inner", Some("ccc"), None)],
                    ..Parked::default()
                },
                "git -C '/src/my app/vendor/inner' stash apply ccc",
            ),
            (
                Parked {
                    stash_commit: Some("aaa".into()),
                    submodules: vec![sub("vendor", None, Some("locked"))],
                    ..Parked::default()
                },
                "git -C '/src/my app' stash apply aaa; `vendor` was not parked (locked); the agent's changes are still in its working tree",
            ),
            (
                Parked {
                    error: Some("locked".into()),
                    ..Parked::default()
                },
                "nothing was parked (locked); the agent's changes are still in the working tree",
            ),
        ];
        for (parked, want) in cases {
            assert_eq!(restore_hint(repo, &parked), want, "{parked:?}");
        }
    }
}
