//! The Claude Code CLI as loopd drives it: the command lines of the agent
//! and critic sessions, the per-session settings file, and the price table.
//!
//! Facts relied on (CLAUDE_CLI.md): multi-value flags swallow a trailing
//! prompt, so the prompt always follows `--`; stream-json needs `--verbose`;
//! `--setting-sources ""` plus `--settings FILE` means only loopd's settings
//! (and hooks) apply; `ANTHROPIC_BASE_URL` + `ANTHROPIC_API_KEY` point the
//! CLI at loopd's metering gateway with a session token (the real credential
//! never reaches a session); `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`
//! avoids telemetry DNS stalls.

use std::ffi::OsString;

use serde_json::json;

pub mod wire;

use super::{AgentCli, CliLimits, Price};

/// `claude -p`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaudeCode;

impl AgentCli for ClaudeCode {
    fn settings(&self, hook_command: Option<&str>) -> String {
        // Every tool: the hook also counts each session's calls for the
        // nudge before a `stuck_repeat` stop, not only the mutating ones.
        let hooks = hook_command.map(|command| {
            json!({"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]})
        });
        serde_json::to_string_pretty(&settings_json(&[], hooks)).expect("settings serialize")
    }

    fn agent_args(
        &self,
        model: &str,
        allowed_tools: &[String],
        settings: &str,
        limits: CliLimits,
        prompt: &str,
    ) -> Vec<OsString> {
        let mut args = common_args(model, settings, limits);
        args.push("--permission-mode".into());
        args.push("acceptEdits".into());
        args.push("--allowedTools".into());
        args.push(allowed_tools.join(",").into());
        args.push("--".into());
        args.push(prompt.into());
        args
    }

    fn critic_args(
        &self,
        model: &str,
        schema: &str,
        settings: &str,
        limits: CliLimits,
        instruction: &str,
    ) -> Vec<OsString> {
        let mut args = common_args(model, settings, limits);
        args.push("--tools".into());
        args.push("".into());
        args.push("--json-schema".into());
        args.push(schema.into());
        args.push("--".into());
        args.push(instruction.into());
        args
    }

    fn session_env(&self, gateway_url: &str, session_token: &str) -> Vec<(OsString, OsString)> {
        SESSION_ENV
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .chain([
                (super::gateway::BASE_URL_VAR.into(), gateway_url.into()),
                (crate::util::API_KEY_VAR.into(), session_token.into()),
            ])
            .collect()
    }

    fn prices(&self) -> fn(&str) -> Price {
        price
    }

    /// Measured on 2.1.328 against a scripted model: an agent session's
    /// first request is 52-81 KB (its tools and system prompt), a critic's
    /// about 9 KB.
    fn first_request_bytes(&self, role: super::Role) -> u64 {
        match role {
            super::Role::Agent => 64 << 10,
            super::Role::Critic => 10 << 10,
        }
    }

    fn wire(&self) -> std::sync::Arc<dyn super::gateway::Wire> {
        std::sync::Arc::new(wire::Anthropic)
    }
}

/// Variables set for every session.
pub const SESSION_ENV: [(&str, &str); 1] = [("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")];

fn common_args(model: &str, settings: &str, limits: CliLimits) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--model",
        model,
        "--setting-sources",
        "",
        "--no-session-persistence",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push("--settings".into());
    args.push(settings.into());
    // The CLI refuses 0; a budget this small still stops after one call.
    args.push("--max-budget-usd".into());
    args.push(format!("{:.6}", limits.max_budget_usd.max(0.000001)).into());
    args.push("--max-turns".into());
    args.push(limits.max_turns.max(1).to_string().into());
    args
}

/// The per-session settings file: permissions and hooks (no credential,
/// no key helper: the session's credential is the gateway's token).
pub fn settings_json(deny: &[String], hooks: Option<serde_json::Value>) -> serde_json::Value {
    let mut settings = json!({
        "permissions": { "deny": deny },
    });
    if let Some(hooks) = hooks {
        settings["hooks"] = hooks;
    }
    settings
}

/// Measured against Claude Code 2.1.328's own cost accounting (the scripted
/// model reports tokens, the CLI reports `total_cost_usd`). An unknown
/// model is priced like the most expensive one, so the estimate errs toward
/// stopping early.
pub fn price(model: &str) -> Price {
    let m = model.to_ascii_lowercase();
    if m.contains("haiku") {
        Price {
            input: 0.1,
            output: 0.5,
        }
    } else if m.contains("sonnet") {
        Price {
            input: 2.0,
            output: 10.0,
        }
    } else {
        Price {
            input: 4.0,
            output: 20.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::events;

    fn limits() -> CliLimits {
        CliLimits {
            max_budget_usd: 0.5,
            max_turns: 40,
        }
    }

    #[test]
    fn agent_args_end_with_the_prompt_after_double_dash() {
        let tools = vec!["Read".to_string(), "Bash(python3 -m pytest *)".to_string()];
        let args = ClaudeCode.agent_args("haiku", &tools, "{\"hooks\":{}}", limits(), "--fix it");
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[args.len() - 2], "--");
        assert_eq!(args[args.len() - 1], "--fix it");
        let joined = args.join(" ");
        for needle in [
            "-p --output-format stream-json --verbose",
            "--model haiku",
            "--setting-sources  --no-session-persistence",
            "--settings {\"hooks\":{}}",
            "--permission-mode acceptEdits",
            "--allowedTools Read,Bash(python3 -m pytest *)",
            "--max-budget-usd 0.500000",
            "--max-turns 40",
        ] {
            assert!(joined.contains(needle), "missing `{needle}` in {joined}");
        }
    }

    #[test]
    fn critic_args_have_no_tools_and_a_schema() {
        let args =
            ClaudeCode.critic_args("sonnet", "{\"type\":\"object\"}", "{}", limits(), "judge");
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let i = args.iter().position(|a| a == "--tools").expect("--tools");
        assert_eq!(args[i + 1], "");
        assert_eq!(args[i + 2], "--json-schema");
        assert_eq!(args[args.len() - 2..], ["--", "judge"]);
        assert!(!args.iter().any(|a| a == "--allowedTools"));
    }

    #[test]
    fn settings_carry_no_credential_and_sessions_get_the_gateway() {
        let s = settings_json(&[], None);
        assert!(s.get("apiKeyHelper").is_none());
        assert!(s.get("hooks").is_none());
        let env = ClaudeCode.session_env("http://127.0.0.1:4242", "loopd-session-x");
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(
            get("ANTHROPIC_BASE_URL").as_deref(),
            Some("http://127.0.0.1:4242")
        );
        assert_eq!(get("ANTHROPIC_API_KEY").as_deref(), Some("loopd-session-x"));
    }

    #[test]
    fn prices_match_the_cli() {
        let u = events::Usage {
            input_tokens: 10_000,
            output_tokens: 10_000,
            ..Default::default()
        };
        assert!((Price::for_model("claude-haiku-5-5").cost(&u) - 0.006).abs() < 1e-12);
        assert!((Price::for_model("sonnet").cost(&u) - 0.12).abs() < 1e-12);
        assert!(Price::for_model("mystery").input >= Price::for_model("opus").input);
    }
}
