//! `loopd tail`: follow one job's progress from its journal — the same lines
//! `loopd run` prints as it goes, for a daemon's job or one in another
//! terminal.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::journal::{self, Entry, Replay};
use crate::live::Progress;
use crate::outcome::ExitStatus;

/// Print a job's progress so far and follow it until it ends: every tool
/// call, phase, verdict and the spend, from the job's journal.
///
/// Example: `loopd tail 20261130-114617123-613a`
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The job's id (as `loopd status` lists it, e.g. `20261130-221503042-3f9a`).
    pub job: String,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print what happened so far and exit instead of following.
    #[arg(long)]
    pub once: bool,
}

pub fn tail(args: TailArgs) -> Result<ExitStatus, CliError> {
    let state_dir = state_dir_or_default(args.state_dir);
    follow(&state_dir, &args.job, !args.once)
}

/// Print `job`'s progress lines; with `keep_following`, wait for more until
/// the job is over (its summary written, or its final daemon state).
pub fn follow(state_dir: &Path, job: &str, keep_following: bool) -> Result<ExitStatus, CliError> {
    let run_dir = state_dir.join("runs").join(job);
    let path = run_dir.join(journal::FILE);
    if !path.exists() {
        return Err(CliError::new(
            ExitStatus::Usage,
            format!("no journal for job `{job}` in `{}`", state_dir.display()),
        )
        .hint("`loopd status` lists every job; a queued job has no journal until it starts"));
    }
    let live = Progress {
        budget_usd: read_budget(&run_dir),
    };
    let mut reader = Reader::default();
    let mut state = Replay::default();
    // A watcher wakes the loop when the journal grows; the timeout is the
    // fallback for file systems without inotify.
    let (tx, rx) = std::sync::mpsc::channel();
    let _watcher = keep_following
        .then(|| {
            use notify::Watcher;
            let mut w = notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
                let _ = tx.send(());
            })
            .ok()?;
            w.watch(&run_dir, notify::RecursiveMode::NonRecursive)
                .ok()?;
            Some(w)
        })
        .flatten();
    let mut print_new = |state: &mut Replay| -> Result<(), CliError> {
        for entry in reader.read_new(&path).map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot read `{}`: {e}", path.display()),
            )
        })? {
            state.apply(&entry);
            if let Some(line) = live.line(&entry, state) {
                crate::cli::out!("{line}");
            }
        }
        Ok(())
    };
    loop {
        print_new(&mut state)?;
        if !keep_following {
            return Ok(ExitStatus::Success);
        }
        if over(&state, state_dir, job) {
            // What was journaled before the state said so (the final state).
            print_new(&mut state)?;
            return Ok(ExitStatus::Success);
        }
        let _ = rx.recv_timeout(Duration::from_secs(1));
    }
}

/// The job is over: its final state is journaled, or its ending is, its
/// summary written and its state file no longer says it runs (a job of an
/// earlier version, which journaled no final state in the foreground).
fn over(state: &Replay, state_dir: &Path, job: &str) -> bool {
    use crate::daemon::state::{JobState, Status};
    state.finalized.is_some()
        || (state.ending.is_some()
            && state_dir
                .join("runs")
                .join(job)
                .join("summary.json")
                .exists()
            && JobState::load(state_dir, job)
                .is_some_and(|s| !matches!(s.state, Status::Running | Status::Queued)))
}

/// The job's budget, from the resolved job the run directory keeps.
fn read_budget(run_dir: &Path) -> Option<f64> {
    Some(crate::record::JobFile::read(run_dir)?.caps?.budget_usd)
}

/// Reads whole journal lines appended since the last call.
#[derive(Default)]
struct Reader {
    offset: u64,
}

impl Reader {
    fn read_new(&mut self, path: &Path) -> std::io::Result<Vec<Entry>> {
        let mut file = std::fs::File::open(path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        // Only whole lines: a line being written is read next time.
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            return Ok(Vec::new());
        };
        self.offset += end as u64 + 1;
        let (entries, _) = journal::parse(&String::from_utf8_lossy(&bytes[..=end]));
        Ok(entries)
    }
}
