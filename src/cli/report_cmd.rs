//! `loopd report`: the human account of one job.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::state::JobState;
use crate::outcome::ExitStatus;
use crate::report::{interdiffs, markdown, Branch, FailureReport, Summary};

/// Print the account of a job: attempts, verdicts, gates, each attempt's
/// interdiff with the one before, costs, and how to get the work back.
///
/// Example: `loopd report 20261130-114617-613025 --format md`
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    pub job: String,
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// `md` (Markdown) or `json`.
    #[arg(long, default_value = "md", value_parser = ["md", "json"])]
    pub format: String,
}

pub fn report(args: ReportArgs) -> Result<ExitStatus, CliError> {
    let state_dir = state_dir_or_default(args.state_dir);
    let run_dir = state_dir.join("runs").join(&args.job);
    let state = JobState::load(&state_dir, &args.job);
    let summary: Option<Summary> = std::fs::read_to_string(run_dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(t.trim_start_matches('\u{feff}')).ok());
    let failure: Option<FailureReport> = std::fs::read_to_string(run_dir.join("failure.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(summary) = summary else {
        return match state {
            Some(st) => {
                crate::cli::out!("job {} is {}; no summary yet", st.job_id, st.state.as_str());
                Ok(ExitStatus::Success)
            }
            None => Err(CliError::new(
                ExitStatus::Usage,
                format!(
                    "no report for job `{}` in `{}`",
                    args.job,
                    state_dir.display()
                ),
            )
            .hint("`loopd status` lists every job")),
        };
    };
    if args.format == "json" {
        crate::cli::out!(
            "{}",
            serde_json::json!({"state": state, "summary": summary, "failure": failure})
        );
    } else {
        // A job of `loopd run` has no branch: its change is in the tree.
        let branch = state.as_ref().filter(|s| !s.foreground).map(|s| Branch {
            branch: &s.branch,
            commit_accepted: s.commit_accepted.as_deref(),
        });
        crate::cli::out!(
            "{}",
            markdown(
                branch.as_ref(),
                &summary,
                failure.as_ref(),
                &interdiffs(&run_dir, &summary)
            )
            .trim_end_matches('\n')
        );
    }
    Ok(ExitStatus::Success)
}
