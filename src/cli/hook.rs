//! `loopd hook pre-tool-use`: the Claude Code PreToolUse hook that denies
//! tool calls which would change a protected path, rewrite git history, or
//! write the repository's git directory (config, remotes, hooks, refs).
//!
//! Inside a loopd job the policy arrives through the file named by
//! `LOOPD_POLICY` (set in the hook's command line in the per-session
//! settings, not in the prompt). Used on its own (see `hooks/`), it builds
//! the policy from the repository at the hook's `cwd`: the tests at `HEAD`,
//! `loopd.toml`'s `[protect]` table, the rubric. A denial is answered the
//! way the CLI documents (`permissionDecision: "deny"` with a reason the
//! agent can act on) and appended to the policy's denials log.
//!
//! Inside a job the hook sees every tool call, and also delivers the nudge
//! before a `stuck_repeat` stop: the first call of a session that repeats
//! `stuck_repeat` times is denied with what to do instead
//! ([`crate::guard::progress::nudge`]); that denial is not a tamper finding.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cli::CliError;
use crate::guard::tamper::{Denial, Policy, POLICY_VAR};
use crate::outcome::ExitStatus;
use crate::workspace::Workspace;

/// Run loopd's guard as a Claude Code hook.
///
/// Register it in `.claude/settings.json` (see `hooks/` in the loopd
/// repository) as a PreToolUse hook for `Write|Edit|MultiEdit|NotebookEdit|Bash`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    pub event: HookEvent,
}

#[derive(Debug, clap::Subcommand)]
pub enum HookEvent {
    /// Decide a PreToolUse event read from stdin.
    PreToolUse,
}

fn deny(reason: &str) -> Value {
    json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}})
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
    Policy::build(ws.git2(), ws.root(), head, &protect, &own).map_err(|e| e.to_string())
}

pub fn hook(args: HookArgs) -> Result<ExitStatus, CliError> {
    let HookEvent::PreToolUse = args.event;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| {
        CliError::new(
            ExitStatus::Usage,
            format!("cannot read the hook input: {e}"),
        )
    })?;
    let event: Value = serde_json::from_str(&input).map_err(|e| {
        CliError::new(
            ExitStatus::Usage,
            format!("the hook input is not JSON: {e}"),
        )
    })?;
    let tool = event["tool_name"].as_str().unwrap_or("");
    let tool_input = &event["tool_input"];
    let cwd = event["cwd"]
        .as_str()
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    let mutating = matches!(
        tool,
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" | "Bash"
    );
    let job_policy = std::env::var_os(POLICY_VAR)
        .map(|path| Policy::load(Path::new(&path)).map_err(|e| e.to_string()));
    // Inside a job, any tool: the first call that repeats `stuck_repeat`
    // times in the session is denied with a nudge instead of a stop. Not a
    // tamper denial: it goes to no denials log.
    if let Some(settings) = job_policy
        .as_ref()
        .and_then(|p| p.as_ref().ok())
        .and_then(|p| p.nudge.as_ref())
    {
        let session = event["session_id"].as_str().unwrap_or("unknown");
        match crate::guard::progress::nudge(settings, session, tool, tool_input) {
            Ok(Some(message)) => {
                crate::cli::out!("{}", deny(&message));
                return Ok(ExitStatus::Success);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot count the session's tool calls; no nudge"),
        }
    }
    if !mutating {
        return Ok(ExitStatus::Success);
    }
    let policy = match job_policy {
        Some(p) => p,
        None => policy_for_repo(&cwd),
    };
    let compiled = policy
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|p| p.compile().map_err(|e| e.to_string()));
    let decision = match compiled {
        Ok(compiled) => compiled.check_tool(tool, tool_input, &cwd),
        Err(e) => Some(format!("loopd: the protection policy could not be read ({e}); refusing file changes until it can")),
    };
    if let Some(reason) = decision {
        if let Some(log) = policy.as_ref().ok().and_then(|p| p.denials_log.as_ref()) {
            use std::io::Write;
            let entry = Denial {
                ts: crate::util::now_rfc3339(),
                tool: tool.to_owned(),
                tool_use_id: event["tool_use_id"].as_str().map(str::to_owned),
                input: tool_input.clone(),
                reason: reason.clone(),
            };
            let entry = serde_json::to_string(&entry).expect("a denial serializes");
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
            {
                let _ = writeln!(f, "{entry}");
            }
        }
        crate::cli::out!("{}", deny(&reason));
    }
    Ok(ExitStatus::Success)
}
