//! `loopd scripted-call` (hidden; test builds with the `scripted-agent`
//! feature only): the scripted agent's model call. The agent runs in
//! loopd's process, outside the job's network namespace, so its calls are
//! made from inside the session's sandbox as a CLI's are: this command,
//! started as a contained process of the session, posts the request on
//! stdin to the job's gateway (`LOOPD_GATEWAY`, the session's token) and
//! prints the HTTP status on a line of its own, then the answer.

use std::io::{Read, Write};

use crate::agent::gateway::channel;
use crate::cli::CliError;
use crate::outcome::ExitStatus;

#[derive(Debug, clap::Args)]
pub struct ScriptedCallArgs {
    /// The gateway path to post to.
    #[arg(long, value_name = "PATH")]
    pub path: String,
    /// An extra header, `NAME: VALUE` (repeatable).
    #[arg(long, value_name = "HEADER")]
    pub header: Vec<String>,
}

pub fn scripted_call(args: ScriptedCallArgs) -> Result<ExitStatus, CliError> {
    let env = |k: &str| {
        std::env::var(k).map_err(|_| {
            CliError::new(
                ExitStatus::Usage,
                format!("`{k}` is not set: not inside a loopd session"),
            )
        })
    };
    let (gateway, token) = (env(channel::GATEWAY_VAR)?, env(channel::TOKEN_VAR)?);
    let mut body = Vec::new();
    std::io::stdin()
        .read_to_end(&mut body)
        .map_err(|e| CliError::new(ExitStatus::Usage, format!("cannot read the request: {e}")))?;
    let headers: Vec<(&str, &str)> = args
        .header
        .iter()
        .filter_map(|h| h.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let (status, answer) = channel::post_with(
        &gateway,
        &token,
        &args.path,
        &headers,
        &body,
        std::time::Duration::from_secs(600),
        64 << 20,
    )
    .map_err(|e| CliError::new(ExitStatus::Environment, e.to_string()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{status}")
        .and_then(|()| out.write_all(&answer))
        .and_then(|()| out.flush())
        .map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot write the answer: {e}"),
            )
        })?;
    Ok(ExitStatus::Success)
}
