//! `loopd run`: one job in the foreground (a laptop or a CI step).

use crate::cli::CliError;
use crate::config::{find_on_path, Job, JobFlags};
use crate::job;
use crate::outcome::ExitStatus;
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
    job::ready(ws, job).map_err(|e| match e {
        job::JobError::Workspace(w) => CliError::from(w),
        job::JobError::StateDir(s) => {
            let hint = s.hint();
            CliError::new(ExitStatus::Environment, s).hint(hint)
        }
        e => CliError::new(ExitStatus::Environment, e),
    })
}

pub fn run(args: RunArgs) -> Result<ExitStatus, CliError> {
    let (ws, job) = prepare(&args.flags)?;
    ready(&ws, &job)?;
    let control = crate::cli::foreground_control()?;
    let rt = crate::cli::runtime()?;
    let summary = rt
        .block_on(job::run(&job, ws, control))
        .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    eprint!("{}", report::render_human(&summary));
    if args.json {
        crate::cli::out!(
            "{}",
            serde_json::to_string(&summary).expect("the summary serializes")
        );
    }
    Ok(summary.reason.into())
}
