//! `loopd run`: one job in the foreground (a laptop or a CI step).

use std::path::PathBuf;

use crate::agent::key::KEY_VAR;
use crate::agent::session::StopRequest;
use crate::cli::CliError;
use crate::config::{find_on_path, Job, JobFlags};
use crate::job::{self, Control};
use crate::outcome::{ExitStatus, Reason};
use crate::report;
use crate::workspace::Workspace;

/// Run the agent in a loop on a repository until the goal test and the critic
/// accept its change, or a guard stops it.
///
/// Example: `loopd run -C ~/src/app --task "Make the tests pass" --goal "python3 -m pytest -q"`
///
/// Exit codes: 0 accepted, 1 attempts exhausted, 2 usage or config error,
/// 3 stopped by a guard, 4 interrupted by a signal, 5 environment error.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub flags: JobFlags,
    /// Print the final summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Open the repository, resolve the job and check everything that can be
/// checked before a file is touched. Shared with `check`.
pub fn prepare(flags: &JobFlags) -> Result<(Workspace, Job), CliError> {
    let ws = Workspace::open(&flags.repo)?;
    let mut job = Job::resolve(flags, ws.root())?;
    job.agent_bin = find_on_path(&job.agent_bin).ok_or_else(|| {
        CliError::new(ExitStatus::Environment, format!("the agent CLI `{}` was not found", job.agent_bin.display()))
            .hint("install it with `npm install -g @anthropic-ai/claude-code`, or pass `--agent-bin PATH` / set `LOOPD_AGENT_BIN`")
    })?;
    Ok((ws, job))
}

/// The last checks before a foreground job touches anything: a clean tree
/// and a state dir to write to.
pub fn ready(ws: &Workspace, job: &Job) -> Result<(), CliError> {
    ws.ensure_clean()?;
    job::private_dir(&job.state_dir).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!(
                "cannot create the state dir `{}`: {e}",
                job.state_dir.display()
            ),
        )
    })
}

/// Forward SIGTERM/SIGINT to the job: the first stops it gracefully, the
/// second skips the grace period.
fn watch_signals(tx: tokio::sync::watch::Sender<Option<StopRequest>>) -> Result<(), CliError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut seen = 0;
            for sig in signals.forever() {
                seen += 1;
                tracing::warn!(
                    signal = sig,
                    "signal received; {}",
                    if seen == 1 {
                        "stopping the job (a second signal skips the grace period)"
                    } else {
                        "stopping now"
                    }
                );
                let _ = tx.send(Some(StopRequest {
                    reason: Reason::Signal,
                    hurry: seen > 1,
                    suspend: false,
                }));
            }
        })
        .map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot start the signal thread: {e}"),
            )
        })?;
    Ok(())
}

pub fn run(args: RunArgs) -> Result<ExitStatus, CliError> {
    let (ws, job) = prepare(&args.flags)?;
    ready(&ws, &job)?;
    let (tx, rx) = tokio::sync::watch::channel(None);
    watch_signals(tx)?;
    let loopd_exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("loopd"));
    let control = Control {
        stop: rx,
        loopd_exe,
        api_key: std::env::var(KEY_VAR).ok().filter(|k| !k.is_empty()),
        job_id: None,
        resume: None,
    };
    let rt = crate::cli::runtime()?;
    let summary = rt
        .block_on(job::run(&job, ws, control))
        .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    eprint!("{}", report::render_human(&summary));
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("the summary serializes")
        );
    }
    Ok(summary.reason.into())
}
