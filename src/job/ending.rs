//! How a job ends: the decision is journaled, `.git/` is put back as pinned,
//! then — for every ending but acceptance — the breaker parks the work and
//! the journal records where, the checkout's credentials are released (the
//! last holder puts them back), *then* `failure.json` and `summary.json`
//! (views) are written. A resumed
//! job whose journal already holds a step does not do it again; a failing
//! disk never hides where the work went (it is logged and printed).

use super::Run;
use crate::breaker::{self, Parked, Trip};
use crate::journal::{Ending, Event};
use crate::outcome::Reason;
use crate::report::{Summary, Totals};


impl Run<'_> {
    pub(super) fn finish(mut self, ending: Ending) -> Result<Summary, super::JobError> {
        let suspend = self.journal.state().ending.is_none()
            && ending.reason == Reason::Signal
            && self.stop_request().is_some_and(|r| r.suspend());
        if suspend {
            self.journal.append(Event::Suspended)?;
            tracing::info!("job suspended; it resumes from its journal");
        } else if self.journal.state().ending.is_none() {
            if let Err(e) = self.journal.append(Event::JobEnded {
                ending: ending.clone(),
            }) {
                // Park the work all the same: losing it would be worse.
                tracing::error!(error = %e, "cannot journal the job's end");
            }
        }
        // Before the breaker's stash (a git operation): `.git/` as pinned.
        // An ending mid-attempt had no gate to look; what was there is kept.
        if let Err(e) = self.restore_git_dir(&self.dir.join("git-dir-changed").join("ending")) {
            tracing::error!(error = %e, "cannot put the git directory back as pinned");
        }
        let parked = if ending.reason == Reason::Accepted || suspend {
            None
        } else {
            Some(self.park(&ending))
        };
        self.release_credentials();
        let state = self.journal.state();
        let wall_ms = state.wall_ms.max(self.journal.started().elapsed().as_millis() as u64);
        let totals = Totals::from_spend(&state.spend(), wall_ms);
        let failure_report = parked.as_ref().and_then(|p| {
            let trip = Trip {
                job_id: &self.id,
                reason: ending.reason,
                detail: &ending.detail,
                repo: self.ws.root(),
                base_ref: &self.base,
                totals,
                attempts: state.attempts.len(),
                last_events: state.last_events(),
                run_dir: &self.dir,
            };
            match breaker::report(trip, p) {
                Ok(path) => Some(path),
                Err(e) => {
                    tracing::error!(error = %e, stash_commit = p.stash_commit.as_deref().unwrap_or("none"), "cannot write the failure report; the work is parked all the same");
                    None
                }
            }
        });
        let mut summary = state.summary(&ending, &self.dir, failure_report, wall_ms);
        // Parked but not journaled (a full disk): the summary still says where.
        if summary.stash_commit.is_none() {
            summary.stash_commit = parked.and_then(|p| p.stash_commit);
        }
        let path = self.dir.join("summary.json");
        if let Err(e) = crate::util::write_json_atomic(&path, &summary) {
            tracing::error!(error = %e, path = %path.display(), "cannot write the summary");
        }
        crate::util::crash_point("summary:written");
        Ok(summary)
    }

    /// Park the work once; the journal says whether it was, and where.
    fn park(&mut self, ending: &Ending) -> Parked {
        if let Some((stash_commit, error)) = self.journal.state().parked.clone() {
            return Parked {
                stash_commit,
                error,
            };
        }
        let parked = breaker::park(&mut self.ws, &self.id, ending.reason);
        if let Err(e) = self.journal.append(Event::Parked {
            stash_commit: parked.stash_commit.clone(),
            error: parked.error.clone(),
        }) {
            tracing::error!(error = %e, stash_commit = parked.stash_commit.as_deref().unwrap_or("none"), "cannot journal where the work is parked");
        }
        parked
    }
}
