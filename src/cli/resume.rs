//! `loopd resume`: continue a job that ended without acceptance, with
//! raised caps and a human's note.

use std::path::PathBuf;

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::{
    self,
    resume::{Raise, ResumeError, Resumed},
};
use crate::outcome::ExitStatus;

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

/// `progress`: print live progress lines on stderr (not with `-q`).
pub fn resume(args: ResumeArgs, progress: bool) -> Result<ExitStatus, CliError> {
    let state_dir = state_dir_or_default(args.state_dir.clone());
    let raise = Raise {
        budget_usd: args.budget_usd,
        max_attempts: args.max_attempts,
        max_turns: args.max_turns,
        max_tokens: args.max_tokens,
        timeout: args.timeout.clone(),
        note: args.note.clone(),
    };
    let bins = (args.agent_bin.clone(), args.critic_bin.clone());
    let resumed = daemon::resume::resume(&args.job, &state_dir, bins, &raise).map_err(cli_error)?;
    let id = &args.job;
    match resumed {
        Resumed::Queued => {
            crate::cli::out!("{id} queued again; `loopd status {id}` follows it");
            Ok(ExitStatus::Success)
        }
        Resumed::Here(mut here) => {
            let _lock = crate::cli::run::lock_job(&here.ws, &here.job, &here.run_dir, id)?;
            let mut control =
                crate::cli::foreground_control(&here.job, &here.ws, progress, &args.credentials)?;
            control.job_id = Some(id.clone());
            here.reopen().map_err(cli_error)?;
            tracing::info!(job_id = %id, spent_usd = %format!("{:.4}", here.spent_usd), "resuming the job");
            let here = *here;
            let record = daemon::foreground::Foreground::resumed(here.state, &here.job.state_dir);
            crate::cli::run::finish_foreground(&here.job, here.ws, control, record, args.json)
        }
    }
}

fn cli_error(e: ResumeError) -> CliError {
    match e {
        ResumeError::Config(c) => CliError::from(c),
        ResumeError::Workspace(w) => CliError::from(w),
        e => {
            let status = if e.is_usage() {
                ExitStatus::Usage
            } else {
                ExitStatus::Environment
            };
            let hint = e.hint();
            let err = CliError::new(status, e);
            match hint {
                Some(h) => err.hint(h),
                None => err,
            }
        }
    }
}
