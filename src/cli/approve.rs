//! `loopd approve` / `loopd reject`: the human's answer to a job that
//! awaits approval.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::config::ApprovalSettings;
use crate::daemon::approval;
use crate::daemon::state::{JobState, Status};
use crate::outcome::ExitStatus;

/// Approve an accepted job and perform its outward step (merge into a local
/// branch, or push and open a pull request — `[approval] action`).
///
/// Example: `loopd approve 20261130-221503042-3f9a`
#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The job's id (as `loopd status` lists it, e.g. `20261130-221503042-3f9a`).
    pub job: String,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
}

fn load(args: &DecideArgs) -> Result<(std::path::PathBuf, JobState, ApprovalSettings), CliError> {
    let state_dir = state_dir_or_default(args.state_dir.clone());
    let st = JobState::load(&state_dir, &args.job).ok_or_else(|| {
        CliError::new(
            ExitStatus::Usage,
            format!("no job `{}` in `{}`", args.job, state_dir.display()),
        )
        .hint("`loopd status` lists every job")
    })?;
    // The settings the job ran with (its resolved job.json).
    let settings = crate::record::JobFile::read(&state_dir.join("runs").join(&args.job))
        .and_then(|j| serde_json::from_value::<ApprovalSettings>(j.approval).ok())
        .unwrap_or_default();
    Ok((state_dir, st, settings))
}

pub fn approve(args: DecideArgs) -> Result<ExitStatus, CliError> {
    let (state_dir, mut st, settings) = load(&args)?;
    let retry = st.state == Status::Accepted
        && st.delivered.is_none()
        && approval::load(&state_dir, &st.job_id).is_some();
    if st.state != Status::AwaitingApproval && !retry {
        if st.delivered.is_some() {
            crate::cli::out!(
                "job {} was already approved and delivered: {}",
                st.job_id,
                st.delivered.as_deref().unwrap_or("")
            );
            return Ok(ExitStatus::Success);
        }
        return Err(CliError::new(
            ExitStatus::Usage,
            approval::ApprovalError::NotAwaiting(st.job_id.clone(), st.state.as_str().into()),
        ));
    }
    approval::record(&state_dir, &st, "approved")
        .map_err(|e| CliError::new(ExitStatus::Usage, e))?;
    let rt = crate::cli::runtime()?;
    let what = rt
        .block_on(approval::deliver(&state_dir, &mut st, &settings))
        .map_err(|e| {
            CliError::new(ExitStatus::Environment, e)
                .hint("the approval is recorded: run `loopd approve` again once the cause is fixed")
        })?;
    crate::cli::out!("approved {}: {what}", st.job_id);
    Ok(ExitStatus::Success)
}

/// Reject an accepted job: nothing leaves the machine, the change stays
/// parked (pinned under `refs/loopd/stash/<job-id>`).
///
/// Example: `loopd reject 20261130-221503042-3f9a`
pub fn reject(args: DecideArgs) -> Result<ExitStatus, CliError> {
    let (state_dir, mut st, _) = load(&args)?;
    if st.state != Status::AwaitingApproval {
        return Err(CliError::new(
            ExitStatus::Usage,
            approval::ApprovalError::NotAwaiting(st.job_id.clone(), st.state.as_str().into()),
        ));
    }
    let what =
        approval::reject(&state_dir, &mut st).map_err(|e| CliError::new(ExitStatus::Usage, e))?;
    crate::cli::out!("{}: {what}", st.job_id);
    Ok(ExitStatus::Success)
}
