//! A job run in the foreground (`loopd run`, `run --job-id`, and `loopd
//! resume` of such a job) as the daemon's records know it: its job file
//! beside its journal (what `resume` reads its settings from), its state
//! (so `loopd status` lists it beside the queue's), the webhooks at its end.
//! The one door the CLI's run command goes through: the queue's own files
//! and types stay the daemon's.

use std::path::{Path, PathBuf};

pub use super::spool::{valid_id, JobSpec};
use super::state::{JobState, Status};

/// A foreground job's record while it runs.
pub struct Foreground {
    state: JobState,
    state_dir: PathBuf,
}

impl Foreground {
    /// A new job: its job file written into `run_dir`, its state saved as
    /// running in this process.
    pub fn record(run_dir: &Path, state_dir: &Path, spec: &JobSpec) -> std::io::Result<Self> {
        crate::util::write_json_atomic(&run_dir.join(super::resume::SPEC_FILE), spec)?;
        let mut state = JobState::foreground(spec);
        state.save(state_dir);
        Ok(Foreground {
            state,
            state_dir: state_dir.to_path_buf(),
        })
    }

    /// A job continued in this process: its state running again, from the
    /// job file it was recorded with (`spec` when it has none: a job of an
    /// older loopd).
    pub fn reopen<E>(
        run_dir: &Path,
        state_dir: &Path,
        id: &str,
        spec: impl FnOnce() -> Result<JobSpec, E>,
    ) -> Result<Self, E> {
        let recorded = crate::util::read_text(&run_dir.join(super::resume::SPEC_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<JobSpec>(&t).ok());
        let spec = match recorded {
            Some(s) => s,
            None => spec()?,
        };
        let mut state =
            JobState::load(state_dir, id).unwrap_or_else(|| JobState::foreground(&spec));
        state.state = Status::Running;
        state.pid = Some(std::process::id());
        Ok(Self::resumed(state, state_dir))
    }

    /// A job whose state `loopd resume` reopened.
    pub fn resumed(mut state: JobState, state_dir: &Path) -> Self {
        state.save(state_dir);
        Foreground {
            state,
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The job could not run to an ending: an internal error, said in its
    /// state.
    pub fn failed(mut self, why: &str) {
        self.state.state = Status::Error;
        self.state.reason = Some(crate::outcome::Reason::InternalError.to_string());
        self.state.detail = Some(why.to_owned());
        self.state.save(&self.state_dir);
    }

    /// The job's ending, taken from its summary: the final state, which
    /// the journal is told before the state file is written.
    pub fn ended(&mut self, summary: &crate::record::Summary) -> Status {
        self.state.fill_from(summary);
        self.state.state
    }

    /// The state saved, and the webhooks told the ending.
    pub async fn close(
        mut self,
        hooks: &[crate::notify::Webhook],
        escalation: Option<crate::outcome::Escalation>,
    ) {
        self.state.save(&self.state_dir);
        super::worker::notify_end(hooks, &self.state, escalation).await;
    }
}
