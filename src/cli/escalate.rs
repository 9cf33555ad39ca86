//! `loopd escalate`: the agent's approved exit, run from its Bash tool.

use std::path::PathBuf;

use crate::cli::CliError;
use crate::guard::escalation::{self, Request};
use crate::outcome::ExitStatus;

/// Hand the task to a human instead of forcing it: the job ends after this
/// session as `needs_human` (exit 6), with your claim, the test you name,
/// the goal output and the diff in its report. Never counted as a fix.
///
/// Run by the agent inside a loopd job (its environment names the job).
///
/// Example: `loopd escalate --test tests/test_x.py::test_y --reason "the docstring says rounding is half-up; the test expects half-down"`
#[derive(Debug, clap::Args)]
pub struct EscalateArgs {
    /// The test that cannot be satisfied honestly, as the test runner names it.
    #[arg(long, value_name = "ID")]
    pub test: String,
    /// Why, quoting the specification, docstring or other test it contradicts.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

pub fn escalate(args: EscalateArgs) -> Result<ExitStatus, CliError> {
    let (Some(path), Some(job_id)) = (
        std::env::var_os(escalation::PATH_VAR).map(PathBuf::from),
        std::env::var(escalation::JOB_VAR).ok(),
    ) else {
        return Err(CliError::new(
            ExitStatus::Usage,
            "not inside a loopd job: nothing to escalate to",
        )
        .hint("the agent of a loopd job runs `loopd escalate`; `[guard] escalation = false` turns it off for a repository"));
    };
    if args.test.trim().is_empty() || args.reason.trim().is_empty() {
        return Err(CliError::new(
            ExitStatus::Usage,
            "an escalation needs a test (`--test ID`) and a reason (`--reason TEXT`)",
        ));
    }
    let req = Request {
        job_id,
        test: args.test.trim().to_owned(),
        reason: args.reason.trim().to_owned(),
        ts: crate::util::now_rfc3339(),
    };
    let written = escalation::write(&path, &req).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!("cannot write the escalation `{}`: {e}", path.display()),
        )
    })?;
    crate::cli::out!(
        "{}",
        if written {
            "Escalated to a human. The job ends after this session without further attempts; stop here and change nothing else."
        } else {
            "Already escalated in this attempt. Stop here and change nothing else."
        }
    );
    Ok(ExitStatus::Success)
}
