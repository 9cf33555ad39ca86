//! `loopd resume`: continue a job that ended without acceptance, with
//! raised caps and a human's note.

use std::path::PathBuf;

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::config::{Job, JobFlags};
use crate::daemon::spool::{valid_id, JobSpec, Spool};
use crate::daemon::state::{JobState, Status};
use crate::journal::{self, Ending, Event, Journal, Replay};
use crate::outcome::{ExitStatus, Outcome, Reason};
use crate::workspace::Workspace;

/// Continue a job that ended stopped by a cap or a time limit, exhausted,
/// interrupted or escalated (`needs_human`): on its parked work, at the same
/// BASE_REF, with the same journal. What it spent still counts against the
/// (raised) caps; nothing that finished runs again. A job of `loopd run`
/// continues in the foreground; a daemon job is queued again.
///
/// Example: `loopd resume 20261130-221503042-3f9a --budget-usd 5 --note "the test is right: the spec says net totals include every line"`
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The job's id (as `loopd status` lists it, e.g. `20261130-221503042-3f9a`).
    pub job: String,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The agent's CLI binary [default: the job's agent's program on PATH].
    #[arg(long, value_name = "PATH", env = "LOOPD_AGENT_BIN")]
    pub agent_bin: Option<PathBuf>,
    /// The critic's CLI binary [default: as `run` picks it].
    #[arg(long, value_name = "PATH", env = "LOOPD_CRITIC_BIN")]
    pub critic_bin: Option<PathBuf>,
    /// The job's new spend cap in USD, over the whole job: what it spent still counts.
    #[arg(long, value_name = "X")]
    pub budget_usd: Option<f64>,
    /// The job's new number of attempts, the ended ones included.
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<i64>,
    /// The job's new turn cap, over the whole job.
    #[arg(long, value_name = "N")]
    pub max_turns: Option<i64>,
    /// The job's new token cap, over the whole job.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<i64>,
    /// The job's new wall-clock cap, e.g. `2h` (time already used still counts).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Your answer (e.g. to an escalation): the next prompt's first paragraph.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    /// Print the final summary as one JSON object on stdout (foreground jobs).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub credentials: crate::cli::CredentialArgs,
}

fn usage(message: impl std::fmt::Display) -> CliError {
    CliError::new(ExitStatus::Usage, message)
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
fn check_room(replay: &Replay, job: &Job) -> Result<(), CliError> {
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
        return Err(usage(format!(
            "the job has spent ${:.4}, {} turns and {} tokens: its {reason} cap leaves no room for another session",
            spent.cost_usd,
            spent.turns,
            spent.tokens()
        ))
        .hint(format!("raise it: `loopd resume JOB {flag} ...` (a cap over the whole job; what was spent still counts)")));
    }
    let (next, _) = replay.next_attempt();
    if next > job.max_attempts {
        return Err(usage(format!(
            "the job used {} of its {} attempts",
            next - 1,
            job.max_attempts
        ))
        .hint(format!("allow more: `--max-attempts {}` or higher", next)));
    }
    if u128::from(replay.wall_ms) >= job.caps.timeout.as_millis() {
        return Err(usage(format!(
            "the job has used {} of its wall-clock cap of {}",
            humantime::format_duration(std::time::Duration::from_millis(
                replay.wall_ms / 1000 * 1000
            )),
            humantime::format_duration(job.caps.timeout)
        ))
        .hint("raise it: `--timeout DUR` (over the whole job)"));
    }
    Ok(())
}

/// `progress`: print live progress lines on stderr (not with `-q`).
pub fn resume(args: ResumeArgs, progress: bool) -> Result<ExitStatus, CliError> {
    if !valid_id(&args.job) {
        return Err(usage(format!("`{}` is not a job id", args.job)));
    }
    let id = args.job.clone();
    let state_dir = state_dir_or_default(args.state_dir.clone());
    let run_dir = state_dir.join("runs").join(&id);
    let replay = journal::load(&run_dir);
    if replay.job_id.is_none() {
        return Err(usage(format!("no job `{id}` in `{}`", state_dir.display()))
            .hint("`loopd status` lists every job"));
    }
    let Some(ending) = replay.decided() else {
        return Err(usage(format!("job `{id}` has not ended: it is queued or running")).hint(
            "a running job is stopped with `loopd cancel` (daemon) or a signal (foreground); resume it after",
        ));
    };
    if !resumable(&replay, &ending) {
        return Err(usage(format!(
            "job `{id}` ended with `{}` ({}): only a job stopped by a cap or a time limit, out of attempts, interrupted or escalated can be resumed",
            ending.reason, ending.detail
        ))
        .hint("start a new job with `loopd run` or `loopd submit`"));
    }
    let spool = Spool::new(&state_dir);
    let done = spool.dir("done").join(format!("{id}.json"));
    let daemon = done.is_file();
    let mut spec: JobSpec = if daemon {
        spool.read(&done).map_err(|why| {
            usage(format!(
                "the job file `{}` cannot be used: {why}",
                done.display()
            ))
        })?
    } else {
        let path = run_dir.join(crate::cli::run::SPEC_FILE);
        crate::util::read_text(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| {
                usage(format!("job `{id}` has no readable `{}`", path.display()))
                    .hint("only jobs of `loopd run` or `loopd submit` (this version or later) can be resumed")
            })?
    };
    let mut over = spec.flags.clone();
    if args.budget_usd.is_some() {
        over.budget_usd = args.budget_usd;
    }
    if args.max_attempts.is_some() {
        over.max_attempts = args.max_attempts;
    }
    if args.max_turns.is_some() {
        over.max_turns = args.max_turns;
    }
    if args.max_tokens.is_some() {
        over.max_tokens = args.max_tokens;
    }
    if args.timeout.is_some() {
        over.timeout = args.timeout.clone();
    }
    let flags = JobFlags {
        repo: spec.repo.clone(),
        agent_bin: args.agent_bin.clone(),
        critic_bin: args.critic_bin.clone(),
        state_dir: Some(state_dir.clone()),
        over: over.clone(),
    };
    let mut job = Job::resolve(&flags, &spec.repo)?;
    check_room(&replay, &job)?;
    let reopened = Event::Reopened {
        budget_usd: args.budget_usd,
        max_attempts: args.max_attempts.map(|_| job.max_attempts),
        timeout: args.timeout.clone(),
        note: args.note.clone().filter(|n| !n.trim().is_empty()),
        restore: replay.parked.as_ref().and_then(|p| p.stash_commit.clone()),
    };
    let env_err = |e: journal::JournalError| CliError::new(ExitStatus::Environment, e);

    if daemon {
        // The daemon's job: the same journal, raised caps in its job file,
        // queued again; the worker restores the parked work in a fresh
        // worktree of its branch.
        spool
            .ensure()
            .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
        Journal::open(&run_dir)
            .and_then(|mut j| j.append(reopened))
            .map_err(env_err)?;
        spec.flags = over;
        // The state first: a daemon that claims the job at once writes
        // `running` over it, never the other way round.
        let mut state =
            JobState::load(&state_dir, &id).unwrap_or_else(|| JobState::new(&spec, Status::Queued));
        state.state = Status::Queued;
        state.detail = Some("resumed: queued again".into());
        state.reason = None;
        state.save(&state_dir);
        // Through the intake, like `loopd submit`: a running daemon refuses
        // a file that appears in its spool behind its back.
        crate::daemon::intake::submit(&spool, &spec).map_err(|e| {
            let hint = e.hint();
            CliError::new(ExitStatus::Environment, e).hint(hint)
        })?;
        if let Err(e) = std::fs::remove_file(&done) {
            tracing::warn!(file = %done.display(), error = %e, "cannot remove the old job file from done/");
        }
        tracing::info!(job_id = %id, "job queued again");
        crate::cli::out!("{id} queued again; `loopd status {id}` follows it");
        return Ok(ExitStatus::Success);
    }

    // A job of `loopd run`: its repository, clean, at BASE_REF.
    let ws = Workspace::open(&spec.repo)?;
    ws.ensure_clean()?;
    let base = replay.base_ref.clone().unwrap_or_default();
    let head = ws.head_commit()?.to_string();
    if head != base {
        return Err(usage(format!(
            "`{}` is at {head}, but job `{id}` started at BASE_REF {base}",
            ws.root().display()
        ))
        .hint(format!(
            "check the base out first: `git -C {} switch --detach {base}`",
            crate::util::shell_quote(&ws.root().to_string_lossy())
        )));
    }
    job.locate_clis()
        .map_err(|(what, hint)| CliError::new(ExitStatus::Environment, what).hint(hint))?;
    let _lock = crate::cli::run::lock_job(&ws, &job, &run_dir, &id)?;
    let mut control = crate::cli::foreground_control(&job, progress, &args.credentials)?;
    control.job_id = Some(id.clone());
    Journal::open(&run_dir)
        .and_then(|mut j| j.append(reopened))
        .map_err(env_err)?;
    tracing::info!(job_id = %id, spent_usd = %format!("{:.4}", replay.spend().cost_usd), "resuming the job");
    let mut state = JobState::load(&state_dir, &id).unwrap_or_else(|| JobState::foreground(&spec));
    state.state = Status::Running;
    state.pid = Some(std::process::id());
    state.save(&state_dir);
    crate::cli::run::finish_foreground(&job, ws, control, state, args.json)
}
