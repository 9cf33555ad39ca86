//! `loopd daemon`: a durable job queue, one worktree per job, under systemd.
//!
//! # Theory of operation
//! Jobs arrive as files in `spool/incoming/` ([`spool`]): `loopd submit`
//! hands them to the running daemon over its socket, which checks who
//! submits ([`intake`]: never a process one of its jobs started), or writes
//! them atomically while no daemon runs. The daemon learns
//! of new files through inotify (the callback only `try_send`s a wake-up; it
//! never blocks), and at start it scans the spool for whatever arrived while
//! it was down. An idle daemon has no timers: nothing wakes it but a file or
//! a signal (and the systemd watchdog, when the unit asks for one).
//!
//! Claiming a job is renaming its file into `spool/running/`; a job file
//! that cannot be read or is not ours is moved to `spool/rejected/` with an
//! error file beside it and never blocks the others. Each job runs in its own
//! tokio task ([`worker`]) in its own git worktree, at most `--jobs` at once.
//!
//! Durability: each job's journal is its truth ([`crate::journal`]); the
//! final state is journaled before `state.json` is written and before the
//! spool file moves. At start the daemon first repairs every job whose views
//! lag its journal ([`repair`]), stops whatever a dead daemon's jobs left
//! running (found by the job id in their containment tokens), then resumes
//! the jobs still in `running/` by replaying their journals: what finished is
//! not run again, and the caps keep counting.
//!
//! Shutdown: SIGTERM stops claiming, stops the running agents with the grace
//! period and suspends their jobs as `interrupted` (the work stays in the
//! worktree, resumable), then exits 0. A second SIGTERM/SIGINT skips the
//! grace period.

pub mod approval;
pub mod foreground;
pub mod intake;
pub mod resume;
pub mod spool;
pub mod state;
pub mod systemd;
pub mod worker;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::agent::session::{StopCause, StopRequest};
use crate::outcome::Reason;
use spool::Spool;
use state::{JobState, Status};

/// How hard the daemon has been asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shutdown {
    Run,
    /// Stop taking jobs, suspend running ones with the grace period.
    Graceful,
    /// The same, without the grace period.
    Immediate,
}

pub struct Options {
    pub state_dir: PathBuf,
    pub jobs: usize,
    pub agent_bin: Option<PathBuf>,
    pub critic_bin: Option<PathBuf>,
    pub loopd_exe: PathBuf,
    /// The model credentials and upstreams, picked when the daemon started.
    pub access: crate::agent::gateway::AccessMap,
    /// For stopping what a previous daemon left running.
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    #[error(transparent)]
    Intake(#[from] intake::IntakeError),
    #[error("cannot watch `{}`: {message}", path.display())]
    Watch { path: PathBuf, message: String },
}

struct Running {
    stop: watch::Sender<Option<StopRequest>>,
}

/// Serve until `shutdown` says stop and every job has suspended or ended.
pub async fn serve(
    opts: Options,
    mut shutdown: watch::Receiver<Shutdown>,
) -> Result<(), DaemonError> {
    let spool = Spool::new(&opts.state_dir);
    spool.ensure()?;
    // The front door: from here on, a job file that does not come through
    // it is refused.
    let intake = intake::Intake::open(&spool)?;
    let admitted = intake.admitted.clone();
    let _intake = AbortOnDrop(tokio::spawn(intake.serve(spool.clone())));
    let ctx = Arc::new(worker::Context {
        state_dir: opts.state_dir.clone(),
        spool: spool.clone(),
        agent_bin: opts.agent_bin.clone(),
        critic_bin: opts.critic_bin.clone(),
        loopd_exe: opts.loopd_exe.clone(),
        access: opts.access.clone(),
    });

    // Views behind their journals (a kill between the journal and them):
    // bring them to the journal's truth before anything else runs.
    repair(&spool, &opts.state_dir);
    // Jobs a previous daemon was running: stop what it left behind, resume them.
    let mut resume: VecDeque<PathBuf> = spool.list("running").into();
    for file in &resume {
        if let Some(id) = file.file_stem().map(|s| s.to_string_lossy().into_owned()) {
            let n = crate::process::sweep_scope(&id, opts.grace).await;
            if n > 0 {
                tracing::warn!(job_id = %id, processes = n, "stopped processes a previous daemon left running");
            }
        }
    }

    let (wake_tx, mut wake_rx) = mpsc::channel::<()>(1);
    let _watcher = watch_dirs(&spool, wake_tx)?;
    systemd::notify(&format!(
        "READY=1\nSTATUS=idle; state dir {}",
        opts.state_dir.display()
    ));
    tracing::info!(state_dir = %opts.state_dir.display(), jobs = opts.jobs, resuming = resume.len(), "daemon ready");
    let _watchdog = systemd::watchdog_interval().map(|every| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                systemd::notify("WATCHDOG=1");
            }
        })
    });

    let mut tasks: JoinSet<(String, Status)> = JoinSet::new();
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut level = Shutdown::Run;
    loop {
        if level == Shutdown::Run {
            handle_cancels(&spool, &opts.state_dir, &running);
            while running.len() < opts.jobs.max(1) {
                let Some((file, spec)) = next_job(&spool, &admitted, &mut resume) else {
                    break;
                };
                let (stop_tx, stop_rx) = watch::channel(None);
                running.insert(spec.job_id.clone(), Running { stop: stop_tx });
                let ctx = ctx.clone();
                tasks.spawn(async move {
                    let id = spec.job_id.clone();
                    (id, worker::run(spec, file, ctx, stop_rx).await)
                });
            }
            systemd::notify(&format!(
                "STATUS={} running, {} queued",
                running.len(),
                spool.list("incoming").len()
            ));
        }
        if level > Shutdown::Run && running.is_empty() {
            break;
        }
        tokio::select! {
            _ = wake_rx.recv() => {}
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                match done {
                    Ok((id, status)) => {
                        running.remove(&id);
                        tracing::debug!(job_id = %id, state = status.as_str(), "job task ended");
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "a job task panicked");
                        running.retain(|_, r| !r.stop.is_closed());
                    }
                }
            }
            changed = shutdown.changed() => {
                let new = if changed.is_ok() { *shutdown.borrow() } else { Shutdown::Graceful };
                if new > level {
                    level = new;
                    tracing::info!(?level, running = running.len(), "shutting down: no new jobs; suspending the running ones");
                    systemd::notify("STOPPING=1\nSTATUS=stopping");
                    for r in running.values() {
                        let _ = r.stop.send(Some(StopRequest { reason: Reason::Signal, hurry: level == Shutdown::Immediate, cause: StopCause::Shutdown }));
                    }
                }
            }
        }
    }
    tracing::info!("daemon stopped");
    Ok(())
}

/// Bring every job whose files disagree to its journal's truth:
/// - in `running/` with a final state in its journal: the daemon was killed
///   after recording it; finish the views, drop the worktree, move the file;
/// - in `done/` with a non-final `state.json` (or none): rewrite it from the
///   journal.
///
/// A job in `running/` without a final state is resumed by the caller.
pub fn repair(spool: &Spool, state_dir: &std::path::Path) {
    for (dir, file) in spool
        .list("running")
        .into_iter()
        .map(|f| ("running", f))
        .chain(spool.list("done").into_iter().map(|f| ("done", f)))
    {
        let Some(id) = file.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let run_dir = state_dir.join("runs").join(&id);
        let replay = crate::journal::load(&run_dir);
        let current = JobState::load(state_dir, &id);
        if dir == "done" && current.as_ref().is_some_and(|s| s.state.is_final()) {
            continue;
        }
        let final_state = match replay.finalized {
            Some(s) => s,
            // Only a job the daemon already let go of is read from its
            // ending alone (an older daemon recorded no final state).
            None if dir == "done" => match replay.decided() {
                Some(e) => Status::from_outcome(e.reason.outcome()),
                None => Status::Error,
            },
            None => continue,
        };
        let Ok(spec) = spool.read(&file) else {
            continue;
        };
        let mut state = current.unwrap_or_else(|| JobState::new(&spec, final_state));
        if let Some(ending) = replay.decided() {
            let report = run_dir.join("failure.json");
            let summary = replay.summary(&ending, &run_dir, report.exists().then_some(report), 0);
            let path = run_dir.join("summary.json");
            if !path.exists() {
                if let Err(e) = crate::util::write_json_atomic(&path, &summary) {
                    tracing::error!(job_id = %id, error = %e, "cannot write the summary");
                }
            }
            state.fill_from(&summary);
        } else {
            state.reason = Some(Reason::InternalError.to_string());
            state.detail = Some("the job's journal records no ending".into());
        }
        state.commit_accepted = replay.committed.clone();
        state.state = final_state;
        tracing::warn!(job_id = %id, state = final_state.as_str(), "repaired a job's state from its journal");
        if dir == "running" {
            worker::remove_worktree(&spec.repo, state_dir, &id);
        }
        state.save(state_dir);
        if dir == "running" {
            if let Err(e) = spool.move_to(&file, "done") {
                tracing::error!(job_id = %id, error = %e, "cannot move the job file to done/");
            }
        }
    }
}

/// Stops a task when the daemon stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a job file that did not come through the intake is refused.
const NOT_ADMITTED: &str = "written into spool/incoming/ while the daemon ran, not handed over by `loopd submit`: refused (a job's own code may not queue jobs); if you wrote it, queue it with `loopd submit`";

/// The next job to start: a resumable one first, then the oldest incoming
/// that came through the intake.
fn next_job(
    spool: &Spool,
    admitted: &intake::Admitted,
    resume: &mut VecDeque<PathBuf>,
) -> Option<(PathBuf, spool::JobSpec)> {
    while let Some(file) = resume.pop_front() {
        match spool.read(&file) {
            Ok(spec) => return Some((file, spec)),
            Err(why) => spool.reject(&file, &why),
        }
    }
    for file in spool.list("incoming") {
        let claimed = spool
            .dir("running")
            .join(file.file_name().expect("a job file has a name"));
        let id = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !admitted.contains(&id) {
            spool.reject(&file, NOT_ADMITTED);
            continue;
        }
        // Check before claiming: a file we refuse is moved aside from where it is.
        if let Err(why) = spool.read(&file) {
            spool.reject(&file, &why);
            continue;
        }
        match spool.move_to(&file, "running") {
            Ok(true) => match spool.read(&claimed) {
                Ok(spec) => return Some((claimed, spec)),
                Err(why) => spool.reject(&claimed, &why),
            },
            Ok(false) => continue,
            Err(e) => tracing::error!(file = %file.display(), error = %e, "cannot claim a job"),
        }
    }
    None
}

/// Apply `spool/cancel/<id>` requests: stop a running job through the
/// breaker, or drop a queued one.
fn handle_cancels(spool: &Spool, state_dir: &std::path::Path, running: &HashMap<String, Running>) {
    for entry in std::fs::read_dir(spool.dir("cancel"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let id = entry.file_name().to_string_lossy().into_owned();
        let _ = std::fs::remove_file(entry.path());
        if let Some(r) = running.get(&id) {
            tracing::info!(job_id = %id, "cancel requested: stopping the job and parking its work");
            let _ = r.stop.send(Some(StopRequest {
                reason: Reason::Signal,
                hurry: false,
                cause: StopCause::Cancel,
            }));
        } else {
            cancel_queued(spool, state_dir, &id);
        }
    }
}

/// Cancel a job that is not running: move its file to `done/`. Returns
/// whether there was such a job.
pub fn cancel_queued(spool: &Spool, state_dir: &std::path::Path, id: &str) -> bool {
    let file = spool.dir("incoming").join(format!("{id}.json"));
    let Ok(spec) = spool.read(&file) else {
        return false;
    };
    if let Ok(true) = spool.move_to(&file, "done") {
        let mut st = JobState::new(&spec, Status::Cancelled);
        st.detail = Some("cancelled before it started".into());
        st.save(state_dir);
        tracing::info!(job_id = %id, "queued job cancelled");
        return true;
    }
    false
}

fn watch_dirs(
    spool: &Spool,
    wake: mpsc::Sender<()>,
) -> Result<notify::RecommendedWatcher, DaemonError> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // Only arrivals and departures matter. Access events must not wake
        // us: the daemon's own scan of these directories opens them, and
        // waking on that would spin.
        let relevant = res.is_ok_and(|e| {
            matches!(
                e.kind,
                notify::EventKind::Create(_)
                    | notify::EventKind::Modify(_)
                    | notify::EventKind::Remove(_)
            )
        });
        if relevant {
            // Never block the notify thread: one pending wake-up is enough.
            let _ = wake.try_send(());
        }
    })
    .map_err(|e| DaemonError::Watch {
        path: spool.root.clone(),
        message: e.to_string(),
    })?;
    for d in ["incoming", "cancel"] {
        let path = spool.dir(d);
        watcher
            .watch(&path, notify::RecursiveMode::NonRecursive)
            .map_err(|e| DaemonError::Watch {
                path: path.clone(),
                message: e.to_string(),
            })?;
    }
    Ok(watcher)
}
