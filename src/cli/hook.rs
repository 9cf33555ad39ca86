//! `loopd hook pre-tool-use [--agent NAME]`: the agent CLI's PreToolUse hook
//! that denies tool calls which would change a protected path, rewrite git
//! history, or write the repository's git directory (config, remotes,
//! hooks, refs). `--agent` names the CLI whose hook protocol it speaks
//! (its tool names, how it answers).
//!
//! Inside a loopd job the hook decides nothing itself: it forwards the event
//! to the job's gateway (`LOOPD_GATEWAY`, with the session's token) and
//! prints loopd's answer. The policy, the nudge counts and the denials live
//! in loopd's memory and journal, where no process of the job can reach
//! them; a gateway that cannot be reached means the call is denied. Used on
//! its own (see `hooks/`), it builds the policy from the repository at the
//! hook's `cwd`: the tests at `HEAD`, `loopd.toml`'s `[protect]` table, the
//! rubric. A denial is answered the way the CLI documents (Claude Code:
//! `permissionDecision: "deny"` on stdout; Codex: the reason on stderr and
//! exit 2), with a reason the agent can act on.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::agent::gateway::channel::{self, HookDecision};
use crate::agent::{Agent, HookReply};
use crate::cli::CliError;
use crate::judges::tamper::Policy;
use crate::outcome::ExitStatus;
use crate::workspace::Workspace;

/// Run loopd's guard as an agent CLI's hook.
///
/// Register it in `.claude/settings.json` (see `hooks/` in the loopd
/// repository) as a PreToolUse hook for `Write|Edit|MultiEdit|NotebookEdit|Bash`,
/// or in Codex's `config.toml` as `[[hooks.PreToolUse]]` with `--agent codex`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    pub event: HookEvent,
}

#[derive(Debug, clap::Subcommand)]
pub enum HookEvent {
    /// Decide a PreToolUse event read from stdin.
    PreToolUse {
        /// The agent CLI whose hook this is: its tool names and its way of
        /// answering.
        #[arg(long, default_value = crate::config::DEFAULT_AGENT, value_parser = clap::builder::PossibleValuesParser::new(crate::agent::names()))]
        agent: String,
    },
}

/// Print the CLI's answer and exit with its code.
fn reply(agent: &dyn Agent, deny: Option<&str>) -> ExitStatus {
    let HookReply {
        stdout,
        stderr,
        code,
    } = agent.hook_reply(deny);
    if !stdout.is_empty() {
        crate::cli::out!("{stdout}");
    }
    if !stderr.is_empty() {
        eprintln!("{stderr}");
    }
    ExitStatus::Hook(code)
}

/// The policy for a standalone hook: tests at HEAD, loopd.toml's `[protect]`.
fn policy_for_repo(cwd: &Path) -> Result<Policy, String> {
    let ws = Workspace::open(cwd).map_err(|e| e.to_string())?;
    let head = ws.head_commit().map_err(|e| e.to_string())?;
    let (protect, own) = crate::config::protect_of_repo(ws.root()).map_err(|e| e.to_string())?;
    let own: Vec<(PathBuf, &str)> = own
        .iter()
        .map(|(p, why)| (p.clone(), why.as_str()))
        .collect();
    // No goal here: the tests are the languages' names (a job adds those
    // its goal's runners run).
    Policy::build(ws.git2(), ws.root(), head, &protect, &own, &[]).map_err(|e| e.to_string())
}

pub fn hook(args: HookArgs) -> Result<ExitStatus, CliError> {
    let HookEvent::PreToolUse { agent } = args.event;
    let agent = crate::agent::by_name(&agent).expect("clap checked the agent's name");
    let mut input = String::new();
    std::io::stdin()
        .take(channel::MAX_HOOK_BYTES as u64 + 1)
        .read_to_string(&mut input)
        .map_err(|e| {
            CliError::new(
                ExitStatus::Usage,
                format!("cannot read the hook input: {e}"),
            )
        })?;
    if let (Ok(gateway), Ok(token)) = (
        std::env::var(channel::GATEWAY_VAR),
        std::env::var(channel::TOKEN_VAR),
    ) {
        return Ok(reply(agent, ask_loopd(&gateway, &token, &input).as_deref()));
    }
    let event: Value = serde_json::from_str(&input).map_err(|e| {
        CliError::new(
            ExitStatus::Usage,
            format!("the hook input is not JSON: {e}"),
        )
    })?;
    let call = agent.tool_call(
        event["tool_use_id"].as_str().unwrap_or_default().to_owned(),
        event["tool_name"].as_str().unwrap_or_default().to_owned(),
        event["tool_input"].clone(),
    );
    let cwd = event["cwd"]
        .as_str()
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    if !call.mutating() {
        return Ok(reply(agent, None));
    }
    let decision = match policy_for_repo(&cwd) {
        Ok(policy) => match policy.compile() {
                        Ok(compiled) => compiled.check_tool(&call, &cwd),
            Err(e) => Some(format!("loopd: the protection policy could not be compiled ({e}); refusing file changes until it can")),
        },
        Err(e) => Some(format!("loopd: the protection policy could not be read ({e}); refusing file changes until it can")),
    };
    Ok(reply(agent, decision.as_deref()))
}

/// Inside a job: loopd decides (through the gateway): the reason to deny
/// the call, if any. Anything but a clear "allow" denies.
fn ask_loopd(gateway: &str, token: &str, input: &str) -> Option<String> {
    let answer = channel::post(
        gateway,
        token,
        "/loopd/v1/hook/pre-tool-use",
        input.as_bytes(),
        std::time::Duration::from_secs(60),
    );
    let decision = match answer {
        Ok((200, body)) => serde_json::from_slice::<HookDecision>(&body).unwrap_or_else(|e| {
            HookDecision::Deny {
                reason: format!("loopd: the gateway's answer is unreadable ({e}); refusing the call"),
            }
        }),
        Ok((status, body)) => HookDecision::Deny {
            reason: format!(
                "loopd: the gateway refused the hook's question (HTTP {status}: {}); refusing the call",
                String::from_utf8_lossy(&body).chars().take(300).collect::<String>()
            ),
        },
        Err(e) => HookDecision::Deny {
            reason: format!("loopd: {e}; refusing the call"),
        },
    };
    match decision {
        HookDecision::Allow => None,
        HookDecision::Nudge { reason } | HookDecision::Deny { reason } => Some(reason),
    }
}
