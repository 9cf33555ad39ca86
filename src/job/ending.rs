//! How a job ends: the decision is journaled, `.git/` is put back as pinned,
//! then — for every ending but acceptance — the breaker parks the work and
//! the journal records where, the checkout's credentials are released (the
//! last holder puts them back), *then* `failure.json` and `summary.json`
//! (views) are written. A resumed
//! job whose journal already holds a step does not do it again; a failing
//! disk never hides where the work went (it is logged and printed).

use super::Run;
use crate::breaker::{self, Trip};
use crate::journal::{Ending, Event};
use crate::lessons;
use crate::outcome::Reason;
use crate::record::Parked;
use crate::record::{Summary, Totals};

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
        if !suspend {
            self.learn();
            // The judge's layers are disk the job no longer needs.
            if let Some(h) = &self.hermetic {
                h.clear();
            }
        }
        let parked = if ending.reason == Reason::Accepted || suspend {
            None
        } else {
            Some(self.park(&ending))
        };
        self.release_credentials();
        let state = self.journal.state();
        let wall_ms = state
            .wall_ms
            .max(self.journal.started().elapsed().as_millis() as u64);
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

    /// The improvement loop: distil what later attempts had to fix into
    /// lessons, audit each against the job's tamper policy (both journaled),
    /// and merge what passed into the repository's memory — once per job. A
    /// failure here is logged and never costs the job its ending.
    fn learn(&mut self) {
        let state = self.journal.state();
        let Some(key) = self.repo_key.clone().filter(|_| !state.lessons_learned) else {
            return;
        };
        let last = state.attempts.last().map_or(0, |a| a.n);
        let rejected: Vec<_> = state
            .rejections
            .iter()
            .filter(|r| r.attempt < last)
            .cloned()
            .collect();
        let candidates = lessons::distill(
            rejected
                .iter()
                .map(|r| (&r.findings[..], &r.violations[..])),
        );
        if candidates.is_empty() {
            return;
        }
        let policy = match self.env.policy.compile() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot audit lessons; none are kept");
                return;
            }
        };
        // The values the failing tests expected at the baseline: what a
        // lesson must never tell a later job to return.
        let expected: Vec<String> = self
            .journal
            .state()
            .baseline
            .iter()
            .flat_map(|b| &b.steps)
            .flat_map(|s| s.read(None).expected.clone())
            .collect();
        let mut kept = Vec::new();
        let mut audits = Vec::new();
        for c in candidates {
            let refused = lessons::audit(&c.text, &policy, &expected).err();
            if let Some(why) = &refused {
                tracing::warn!(key = %c.key, why = %why, "a lesson was refused by the audit");
            }
            audits.push(Event::LessonAudited {
                key: c.key.clone(),
                text: c.text.clone(),
                refused: refused.clone(),
            });
            if refused.is_none() {
                kept.push(c);
            }
        }
        for event in audits {
            if let Err(e) = self.journal.append(event) {
                tracing::warn!(error = %e, "cannot journal a lesson's audit; none are kept");
                return;
            }
        }
        let now = crate::util::now_rfc3339();
        let merged = lessons::update(&self.job.state_dir, &key, |l| {
            for c in &kept {
                lessons::merge(l, c, &self.id, &now);
            }
            Ok(())
        });
        match merged {
            Ok(()) => {
                let keys = kept.into_iter().map(|c| c.key).collect::<Vec<_>>();
                tracing::info!(repo = %key, lessons = keys.len(), "lessons learned");
                if let Err(e) = self
                    .journal
                    .append(Event::LessonsLearned { repo: key, keys })
                {
                    tracing::warn!(error = %e, "cannot journal the lessons learned");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot keep the lessons"),
        }
    }

    /// Park the work once; the journal says whether it was, and where.
    fn park(&mut self, ending: &Ending) -> Parked {
        if let Some(parked) = self.journal.state().parked.clone() {
            return parked;
        }
        // What a process of the job made unreadable would stop the stash.
        for (path, fixed) in crate::workspace::layers::unlock_unreadable(self.ws.root()) {
            tracing::warn!(path = %path, readable_again = fixed, "a path of the worktree was unreadable before parking");
        }
        let parked = breaker::park(&mut self.ws, &self.id, ending.reason);
        if let Err(e) = self.journal.append(Event::Parked {
            stash_commit: parked.stash_commit.clone(),
            error: parked.error.clone(),
            submodules: parked.submodules.clone(),
        }) {
            tracing::error!(error = %e, stash_commit = parked.stash_commit.as_deref().unwrap_or("none"), "cannot journal where the work is parked");
        }
        parked
    }
}
