//! `loopd submit`: validate a job like `loopd check` and queue it.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::config::{Job, JobFlags};
use crate::daemon::spool::{JobSpec, Spool};
use crate::outcome::ExitStatus;
use crate::workspace::Workspace;

/// Queue a job for the daemon; works while the daemon is down.
///
/// A running daemon takes the job over its socket and refuses it when it
/// comes from a process one of loopd's jobs started (exit 5).
///
/// Example: `loopd submit -C ~/src/app --ref main --task "Make the tests pass"`
///
/// The job runs in a worktree of its own on a branch `loopd/<job-id>` made
/// from `--ref` (pinned to its commit now), so your working tree is never
/// touched and may be dirty.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub flags: JobFlags,
    /// The ref to start from.
    #[arg(long = "ref", value_name = "REF", default_value = "HEAD")]
    pub git_ref: String,
    /// Print `{"job_id": ...}` on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn submit(args: SubmitArgs) -> Result<ExitStatus, CliError> {
    let ws = Workspace::open(&args.flags.repo)?;
    let job = Job::resolve(&args.flags, ws.root())?;
    let commit = ws
        .git2()
        .revparse_single(&args.git_ref)
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| {
            CliError::new(
                ExitStatus::Usage,
                format!(
                    "`--ref {}` does not name a commit in `{}`: {e}",
                    args.git_ref,
                    ws.root().display()
                ),
            )
        })?;
    let state_dir = state_dir_or_default(args.flags.state_dir.clone());
    let spool = Spool::new(&state_dir);
    spool
        .ensure()
        .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| ws.root().to_path_buf());
    let spec = JobSpec {
        job_id: crate::util::new_job_id(),
        repo: ws.root().to_path_buf(),
        git_ref: args.git_ref.clone(),
        commit: commit.id().to_string(),
        flags: args.flags.over.absolute(&cwd),
        task: job.task.clone(),
        goal: job.goal.iter().map(|s| s.run.clone()).collect(),
        submitted_at: crate::util::now_rfc3339(),
    };
    let delivered = crate::daemon::intake::submit(&spool, &spec).map_err(|e| {
        let hint = e.hint();
        CliError::new(ExitStatus::Environment, e).hint(hint)
    })?;
    if args.json {
        crate::cli::out!("{}", serde_json::json!({"job_id": spec.job_id}));
    } else {
        crate::cli::out!("{}", spec.job_id);
    }
    tracing::info!(job_id = %spec.job_id, commit = %spec.commit, ?delivered, "job queued");
    Ok(ExitStatus::Success)
}
