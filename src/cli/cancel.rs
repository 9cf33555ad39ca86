//! `loopd cancel`: stop a running job (work parked, report written) or drop
//! a queued one.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::spool::{valid_id, Spool};
use crate::outcome::ExitStatus;

/// Cancel a job: a queued one is removed from the queue; a running one is
/// stopped through the circuit breaker (its work parked in a stash, a report
/// written).
///
/// Example: `loopd cancel 20261130-114617123-613a`
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The job's id (as `loopd status` lists it, e.g. `20261130-221503042-3f9a`).
    pub job: String,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
}

pub fn cancel(args: CancelArgs) -> Result<ExitStatus, CliError> {
    if !valid_id(&args.job) {
        return Err(CliError::new(
            ExitStatus::Usage,
            format!("`{}` is not a job id", args.job),
        ));
    }
    let state_dir = state_dir_or_default(args.state_dir);
    let spool = Spool::new(&state_dir);
    if crate::daemon::cancel_queued(&spool, &state_dir, &args.job) {
        crate::cli::out!("cancelled {} (it had not started)", args.job);
        return Ok(ExitStatus::Success);
    }
    if spool
        .dir("running")
        .join(format!("{}.json", args.job))
        .is_file()
    {
        std::fs::write(spool.dir("cancel").join(&args.job), b"").map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot request the cancel: {e}"),
            )
        })?;
        crate::cli::out!(
            "cancel requested for {}: the daemon stops it and parks its work",
            args.job
        );
        return Ok(ExitStatus::Success);
    }
    Err(CliError::new(
        ExitStatus::Usage,
        format!("no queued or running job `{}`", args.job),
    )
    .hint("`loopd status` lists every job"))
}
