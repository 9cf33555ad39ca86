//! `loopd daemon`: run the job queue in the foreground (systemd supervises it).

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::CliError;
use crate::config::default_state_dir;
use crate::daemon::{self, Options, Shutdown};
use crate::outcome::ExitStatus;

/// Run queued jobs, each in its own git worktree, until SIGTERM.
///
/// Example: `loopd daemon --state-dir /var/lib/loopd --jobs 2`
///
/// SIGTERM (or SIGINT) stops taking jobs and suspends the running ones as
/// `interrupted`, resumable on the next start; a second one skips the grace
/// period. Logs go to stderr (journald under systemd).
#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    #[command(flatten)]
    pub credentials: crate::cli::CredentialArgs,
    /// Where the spool, runs and worktrees live [default: `$XDG_STATE_HOME/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// How many jobs run at once.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub jobs: usize,
    /// The agent's CLI binary for every job [default: the job's agent's program on PATH].
    #[arg(long, value_name = "PATH", env = "LOOPD_AGENT_BIN")]
    pub agent_bin: Option<PathBuf>,
    /// The critic's CLI binary for every job [default: as `run` picks it].
    #[arg(long, value_name = "PATH", env = "LOOPD_CRITIC_BIN")]
    pub critic_bin: Option<PathBuf>,
}

pub fn state_dir_or_default(dir: Option<PathBuf>) -> PathBuf {
    let dir = dir.unwrap_or_else(default_state_dir);
    if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir().map(|d| d.join(&dir)).unwrap_or(dir)
    }
}

pub fn daemon(args: DaemonArgs) -> Result<ExitStatus, CliError> {
    if args.jobs == 0 {
        return Err(CliError::new(
            ExitStatus::Usage,
            "`--jobs` must be at least 1",
        ));
    }
    let state_dir = state_dir_or_default(args.state_dir);
    crate::util::secure_state_dir(&state_dir, None).map_err(|e| {
        let hint = e.hint();
        CliError::new(ExitStatus::Environment, e).hint(hint)
    })?;
    let (tx, rx) = tokio::sync::watch::channel(Shutdown::Run);
    crate::cli::on_signals(move |n, sig| {
        tracing::info!(signal = sig, "signal received");
        let _ = tx.send(if n == 1 {
            Shutdown::Graceful
        } else {
            Shutdown::Immediate
        });
    })?;
    let opts = Options {
        state_dir,
        jobs: args.jobs,
        agent_bin: args.agent_bin,
        critic_bin: args.critic_bin,
        loopd_exe: crate::cli::loopd_exe(),
        access: crate::cli::access(&[], &args.credentials)?,
        grace: Duration::from_secs(5),
    };
    let rt = crate::cli::runtime()?;
    rt.block_on(daemon::serve(opts, rx)).map_err(|e| {
        let hint = match &e {
            daemon::DaemonError::Intake(i) => Some(i.hint()),
            _ => None,
        };
        let err = CliError::new(ExitStatus::Environment, e);
        match hint {
            Some(h) => err.hint(h),
            None => err,
        }
    })?;
    Ok(ExitStatus::Success)
}
