//! `loopd escalate`: the agent's approved exit, run from its Bash tool.

use crate::agent::gateway::channel::{self, EscalationRequest};
use crate::cli::CliError;
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
    let (Ok(gateway), Ok(token)) = (
        std::env::var(channel::GATEWAY_VAR),
        std::env::var(channel::TOKEN_VAR),
    ) else {
        return Err(CliError::new(
            ExitStatus::Usage,
            "not inside a loopd job: nothing to escalate to",
        )
        .hint("the agent of a loopd job runs `loopd escalate`; `[guard] escalation = false` turns it off for a repository"));
    };
    let req = EscalationRequest {
        test: args.test.trim().to_owned(),
        reason: args.reason.trim().to_owned(),
    };
    req.check().map_err(|why| {
        CliError::new(
            ExitStatus::Usage,
            format!("{why} (`--test ID`, `--reason TEXT`)"),
        )
    })?;
    let body = serde_json::to_vec(&req).expect("an escalation serializes");
    let (status, answer) = channel::post(
        &gateway,
        &token,
        "/loopd/v1/escalate",
        &body,
        std::time::Duration::from_secs(30),
    )
    .map_err(|e| CliError::new(ExitStatus::Environment, format!("cannot escalate: {e}")))?;
    if status != 200 {
        return Err(CliError::new(
            ExitStatus::Environment,
            format!(
                "loopd refused the escalation (HTTP {status}): {}",
                String::from_utf8_lossy(&answer)
                    .chars()
                    .take(500)
                    .collect::<String>()
            ),
        ));
    }
    let written = serde_json::from_slice::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| v["written"].as_bool())
        .unwrap_or(false);
    crate::cli::out!(
        "{}",
        if written {
            "Escalated to a human. The job ends now without further attempts; stop here and change nothing else."
        } else {
            "Already escalated in this session. Stop here and change nothing else."
        }
    );
    Ok(ExitStatus::Success)
}
