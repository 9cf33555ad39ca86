//! `loopd resume` as one operation: decide whether a job that ended may
//! continue, with which caps, and where — a daemon job is queued again
//! through the intake, a foreground job is handed back to its caller ready
//! to run here. The CLI only parses the flags and prints.

use std::path::{Path, PathBuf};

use crate::config::{Job, JobFlags, Overrides};
use crate::daemon::spool::{valid_id, JobSpec, Spool};
use crate::daemon::state::{JobState, Status};
use crate::journal::{self, Ending, Event, Journal, Replay};
use crate::outcome::{Outcome, Reason};
use crate::workspace::Workspace;

/// What a human raises for the job's continuation (each over the whole
/// job: what was spent still counts), and their note.
#[derive(Debug, Clone, Default)]
pub struct Raise {
    pub budget_usd: Option<f64>,
    pub max_attempts: Option<i64>,
    pub max_turns: Option<i64>,
    pub max_tokens: Option<i64>,
    pub timeout: Option<String>,
    pub note: Option<String>,
}

/// Why a job cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("`{0}` is not a job id")]
    NotAnId(String),
    #[error("no job `{id}` in `{}`", state_dir.display())]
    NoSuchJob { id: String, state_dir: PathBuf },
    #[error("job `{0}` has not ended: it is queued or running")]
    NotEnded(String),
    #[error("job `{id}` ended with `{}` ({}): only a job stopped by a cap or a time limit, out of attempts, interrupted or escalated can be resumed", ending.reason, ending.detail)]
    NotResumable { id: String, ending: Ending },
    #[error("the job file `{}` cannot be used: {why}", path.display())]
    JobFile { path: PathBuf, why: String },
    #[error("job `{id}` has no readable `{}`", path.display())]
    NoJobFile { id: String, path: PathBuf },
    /// The raised caps leave no room for another session.
    #[error("{message}")]
    NoRoom { message: String, hint: String },
    #[error("`{}` is at {head}, but job `{id}` started at BASE_REF {base}", repo.display())]
    BaseMoved {
        id: String,
        repo: PathBuf,
        head: String,
        base: String,
    },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
    #[error(transparent)]
    Intake(#[from] crate::daemon::intake::IntakeError),
    #[error("cannot queue the job again: {0}")]
    Spool(String),
    #[error("{what}")]
    Clis { what: String, hint: String },
}

impl ResumeError {
    /// The user asked for something that cannot be (exit 2), rather than
    /// the environment failing (exit 5).
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            ResumeError::Journal(_)
                | ResumeError::Intake(_)
                | ResumeError::Spool(_)
                | ResumeError::Clis { .. }
        )
    }

    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ResumeError::NoSuchJob { .. } => "`loopd status` lists every job".into(),
            ResumeError::NotEnded(_) => "a running job is stopped with `loopd cancel` (daemon) or a signal (foreground); resume it after".into(),
            ResumeError::NotResumable { .. } => "start a new job with `loopd run` or `loopd submit`".into(),
            ResumeError::NoJobFile { .. } => "only jobs of `loopd run` or `loopd submit` (this version or later) can be resumed".into(),
            ResumeError::NoRoom { hint, .. } | ResumeError::Clis { hint, .. } => hint.clone(),
            ResumeError::BaseMoved { repo, base, .. } => format!(
                "check the base out first: `git -C {} switch --detach {base}`",
                crate::util::shell_quote(&repo.to_string_lossy())
            ),
            ResumeError::Intake(e) => e.hint().to_owned(),
            _ => return None,
        })
    }
}

/// Where a resumed job continues.
pub enum Resumed {
    /// A daemon job: raised caps in its job file, queued again.
    Queued,
    /// A job of `loopd run`: ready to continue in this process.
    Here(Box<Foreground>),
}

/// A foreground job about to continue: its repository (clean, at
/// BASE_REF), its resolved settings and its state, and the journal entry
/// that reopens it — appended by [`Foreground::reopen`] once the caller
/// holds the job's lock and its control.
pub struct Foreground {
    pub job: Job,
    pub ws: Workspace,
    pub state: JobState,
    pub run_dir: PathBuf,
    pub spent_usd: f64,
    reopened: Event,
}

impl Foreground {
    /// Journal the reopening and mark the job running in this process.
    pub fn reopen(&mut self) -> Result<(), ResumeError> {
        Journal::open(&self.run_dir)?.append(self.reopened.clone())?;
        self.state.state = Status::Running;
        self.state.pid = Some(std::process::id());
        self.state.save(&self.job.state_dir);
        Ok(())
    }
}

/// Whether a job that ended this way may continue: a cap, a time limit,
/// attempts used up (whatever gate rejected the last one), a signal, or an
/// escalation — never a tamper stop, a stuck agent or an error.
fn resumable(replay: &Replay, ending: &Ending) -> bool {
    let attempts_used_up = matches!(replay.last_end, Some(journal::AttemptEnd::Rejected { .. }));
    match ending.reason {
        Reason::AttemptsExhausted
        | Reason::BudgetUsd
        | Reason::MaxTurns
        | Reason::MaxTokens
        | Reason::WallClock
        | Reason::AttemptTimeout
        | Reason::IdleTimeout
        | Reason::Signal
        | Reason::Escalated => true,
        _ => ending.reason.outcome() == Outcome::Stopped && attempts_used_up,
    }
}

/// The raised caps must leave room for at least one more attempt.
fn check_room(replay: &Replay, job: &Job) -> Result<(), ResumeError> {
    let spent = replay.spend();
    let budget = job.budget();
    let (agent, _) = job.agents();
    let first = agent.first_request_bytes(crate::agent::Role::Agent);
    let price = crate::agent::Prices::new(agent.prices(), &job.prices)
        .of(&job.agent_model)
        .expect("a job's models are priced (checked when it is resolved)");
    let over = budget
        .exceeded(&spent)
        .or_else(|| budget.can_start(&spent, price, first).err());
    if let Some(reason) = over {
        let flag = match reason {
            Reason::MaxTurns => "--max-turns",
            Reason::MaxTokens => "--max-tokens",
            _ => "--budget-usd",
        };
        return Err(ResumeError::NoRoom {
            message: format!(
                "the job has spent ${:.4}, {} turns and {} tokens: its {reason} cap leaves no room for another session",
                spent.cost_usd,
                spent.turns,
                spent.tokens()
            ),
            hint: format!("raise it: `loopd resume JOB {flag} ...` (a cap over the whole job; what was spent still counts)"),
        });
    }
    let (next, _) = replay.next_attempt();
    if next > job.max_attempts {
        return Err(ResumeError::NoRoom {
            message: format!(
                "the job used {} of its {} attempts",
                next - 1,
                job.max_attempts
            ),
            hint: format!("allow more: `--max-attempts {next}` or higher"),
        });
    }
    if u128::from(replay.wall_ms) >= job.caps.timeout.as_millis() {
        return Err(ResumeError::NoRoom {
            message: format!(
                "the job has used {} of its wall-clock cap of {}",
                humantime::format_duration(std::time::Duration::from_millis(
                    replay.wall_ms / 1000 * 1000
                )),
                humantime::format_duration(job.caps.timeout)
            ),
            hint: "raise it: `--timeout DUR` (over the whole job)".into(),
        });
    }
    Ok(())
}

/// The job's flags with the raised caps over them.
fn raised(flags: &Overrides, raise: &Raise) -> Overrides {
    let mut over = flags.clone();
    if raise.budget_usd.is_some() {
        over.budget_usd = raise.budget_usd;
    }
    if raise.max_attempts.is_some() {
        over.max_attempts = raise.max_attempts;
    }
    if raise.max_turns.is_some() {
        over.max_turns = raise.max_turns;
    }
    if raise.max_tokens.is_some() {
        over.max_tokens = raise.max_tokens;
    }
    if raise.timeout.is_some() {
        over.timeout = raise.timeout.clone();
    }
    over
}

/// Continue job `id` of `state_dir` with `raise`: queue a daemon job
/// again, or hand a foreground job back ready to run here. `bins` are the
/// agent's and the critic's CLI binaries, if given.
pub fn resume(
    id: &str,
    state_dir: &Path,
    bins: (Option<PathBuf>, Option<PathBuf>),
    raise: &Raise,
) -> Result<Resumed, ResumeError> {
    if !valid_id(id) {
        return Err(ResumeError::NotAnId(id.to_owned()));
    }
    let run_dir = state_dir.join("runs").join(id);
    let replay = journal::load(&run_dir);
    if replay.job_id.is_none() {
        return Err(ResumeError::NoSuchJob {
            id: id.to_owned(),
            state_dir: state_dir.to_path_buf(),
        });
    }
    let ending = replay
        .decided()
        .ok_or_else(|| ResumeError::NotEnded(id.to_owned()))?;
    if !resumable(&replay, &ending) {
        return Err(ResumeError::NotResumable {
            id: id.to_owned(),
            ending,
        });
    }
    let spool = Spool::new(state_dir);
    let done = spool.dir("done").join(format!("{id}.json"));
    let daemon = done.is_file();
    let mut spec: JobSpec = if daemon {
        spool.read(&done).map_err(|why| ResumeError::JobFile {
            path: done.clone(),
            why: why.to_string(),
        })?
    } else {
        let path = run_dir.join(SPEC_FILE);
        crate::util::read_text(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| ResumeError::NoJobFile {
                id: id.to_owned(),
                path,
            })?
    };
    let over = raised(&spec.flags, raise);
    let flags = JobFlags {
        repo: spec.repo.clone(),
        agent_bin: bins.0,
        critic_bin: bins.1,
        state_dir: Some(state_dir.to_path_buf()),
        over: over.clone(),
    };
    let mut job = Job::resolve(&flags, &spec.repo)?;
    check_room(&replay, &job)?;
    let reopened = Event::Reopened {
        budget_usd: raise.budget_usd,
        max_attempts: raise.max_attempts.map(|_| job.max_attempts),
        timeout: raise.timeout.clone(),
        note: raise.note.clone().filter(|n| !n.trim().is_empty()),
        restore: replay.parked.as_ref().and_then(|p| p.stash_commit.clone()),
        // The raised caps are the job's from here on: a later `loopd run
        // --job-id` of it is compared with them.
        spec: Some(Box::new(job.spec())),
    };

    if daemon {
        // The same journal, raised caps in its job file, queued again; the
        // worker restores the parked work in a fresh worktree of its branch.
        spool
            .ensure()
            .map_err(|e| ResumeError::Spool(e.to_string()))?;
        Journal::open(&run_dir)?.append(reopened)?;
        spec.flags = over;
        // The state first: a daemon that claims the job at once writes
        // `running` over it, never the other way round.
        let mut state =
            JobState::load(state_dir, id).unwrap_or_else(|| JobState::new(&spec, Status::Queued));
        state.state = Status::Queued;
        state.detail = Some("resumed: queued again".into());
        state.reason = None;
        state.save(state_dir);
        // Through the intake, like `loopd submit`: a running daemon refuses
        // a file that appears in its spool behind its back.
        crate::daemon::intake::submit(&spool, &spec)?;
        if let Err(e) = std::fs::remove_file(&done) {
            tracing::warn!(file = %done.display(), error = %e, "cannot remove the old job file from done/");
        }
        tracing::info!(job_id = %id, "job queued again");
        return Ok(Resumed::Queued);
    }

    // A job of `loopd run`: its repository, clean, at BASE_REF.
    let ws = Workspace::open(&spec.repo)?;
    ws.ensure_clean()?;
    let base = replay.base_ref.clone().unwrap_or_default();
    let head = ws.head_commit()?.to_string();
    if head != base {
        return Err(ResumeError::BaseMoved {
            id: id.to_owned(),
            repo: ws.root().to_path_buf(),
            head,
            base,
        });
    }
    job.locate_clis()
        .map_err(|(what, hint)| ResumeError::Clis { what, hint })?;
    let state = JobState::load(state_dir, id).unwrap_or_else(|| JobState::foreground(&spec));
    Ok(Resumed::Here(Box::new(Foreground {
        job,
        ws,
        state,
        run_dir,
        spent_usd: replay.spend().cost_usd,
        reopened,
    })))
}

/// A foreground job's job file in its run directory (what `loopd resume`
/// reads its settings from; `loopd run` writes it).
pub const SPEC_FILE: &str = "spec.json";
