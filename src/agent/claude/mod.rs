//! The Claude Code CLI (`claude -p`) as loopd drives it: the command lines
//! of the agent and critic sessions, its stream ([`stream`]), its tool
//! names, its hook protocol, its credential, its wire protocol at the
//! gateway ([`wire`]) and its price table.
//!
//! Facts relied on (CLAUDE_CLI.md): multi-value flags swallow a trailing
//! prompt, so the prompt always follows `--`; stream-json needs `--verbose`;
//! `--setting-sources ""` plus `--settings JSON` means only loopd's settings
//! (and hooks) apply; `ANTHROPIC_BASE_URL` + `ANTHROPIC_API_KEY` point the
//! CLI at loopd's metering gateway with a session token (the real credential
//! never reaches a session); `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`
//! avoids telemetry DNS stalls; a PreToolUse hook denies with
//! `permissionDecision: "deny"` on stdout.

use std::ffi::OsString;
use std::sync::Arc;

use serde_json::{json, Value};

pub mod stream;
pub mod wire;

use super::events::{Action, StreamParser, ToolCall};
use super::gateway::{Access, Credential, CredentialError, Wire};
use super::{Agent, CliLimits, Command, HookReply, Price, Role, Session};

/// `claude -p`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaudeCode;

/// The public API, when the user names no other upstream.
pub const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

/// Where the upstream is read from (and what sessions get, pointing at the
/// gateway).
pub const BASE_URL_VAR: &str = "ANTHROPIC_BASE_URL";

/// The API key variable (sessions get the gateway's token in it).
pub const API_KEY_VAR: &str = "ANTHROPIC_API_KEY";

/// Credential variables, in the order they are picked.
pub const CREDENTIAL_VARS: &[&str] = &[
    API_KEY_VAR,
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
];

/// Modes in which the CLI talks to another cloud's API: not metered, so
/// refused.
pub const UNMETERED_MODES: [&str; 2] = ["CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"];

/// The beta flag the API wants on requests authorized by an OAuth token.
pub const OAUTH_BETA: &str = "oauth-2025-04-20";

/// Variables set for every session.
pub const SESSION_ENV: [(&str, &str); 1] = [("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")];

impl Agent for ClaudeCode {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn program(&self) -> &'static str {
        "claude"
    }

    fn package(&self) -> Option<super::Package> {
        Some(super::Package {
            name: "@anthropic-ai/claude-code",
            version: "2.1.328",
        })
    }

    fn default_models(&self) -> (&'static str, &'static str) {
        ("haiku", "sonnet")
    }

    fn credential_vars(&self) -> &'static [&'static str] {
        CREDENTIAL_VARS
    }

    /// The API key first, then an OAuth token; the upstream from
    /// `ANTHROPIC_BASE_URL`, else the public API. Bedrock and Vertex are
    /// refused: loopd cannot meter their calls.
    fn access(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Access, CredentialError> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        if let Some(var) = UNMETERED_MODES
            .iter()
            .find(|v| get(v).is_some_and(|x| !matches!(x.trim(), "0" | "false")))
        {
            return Err(CredentialError::Unmetered {
                var: (*var).to_owned(),
            });
        }
        let credential = match (
            get(CREDENTIAL_VARS[0]),
            get(CREDENTIAL_VARS[1]),
            get(CREDENTIAL_VARS[2]),
        ) {
            (Some(k), _, _) => Credential::ApiKey(k.trim().to_owned()),
            (None, Some(t), _) | (None, None, Some(t)) => Credential::OAuth(t.trim().to_owned()),
            (None, None, None) => {
                return Err(CredentialError::Missing {
                    agent: self.name(),
                    vars: CREDENTIAL_VARS.to_vec(),
                })
            }
        };
        Ok(Access {
            credential,
            upstream: Access::upstream(get(BASE_URL_VAR), DEFAULT_UPSTREAM),
        })
    }

    fn wire(&self) -> Arc<dyn Wire> {
        Arc::new(wire::Anthropic)
    }

    fn prices(&self) -> fn(&str) -> Option<Price> {
        price
    }

    /// Measured on 2.1.328 against a scripted model: an agent session's
    /// first request is 52-81 KB (its tools and system prompt), a critic's
    /// about 9 KB.
    fn first_request_bytes(&self, role: Role) -> u64 {
        match role {
            Role::Agent => 64 << 10,
            Role::Critic | Role::Examiner => 10 << 10,
        }
    }

    fn command(&self, s: &Session<'_>) -> std::io::Result<Command> {
        // Every tool: the hook also counts each session's calls for the
        // nudge before a `stuck_repeat` stop, not only the mutating ones.
        let hooks = json!({"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": s.hook_command}]}]});
        let settings =
            serde_json::to_string(&settings_json(&[], Some(hooks))).expect("settings serialize");
        let mut args = common_args(s.model, &settings, s.limits);
        match s.role {
            Role::Agent => {
                args.extend(
                    [
                        "--permission-mode",
                        "acceptEdits",
                        "--allowedTools",
                        &s.allowed_tools.join(","),
                    ]
                    .map(OsString::from),
                );
            }
            Role::Critic | Role::Examiner => {
                args.extend(["--tools", ""].map(OsString::from));
                if let Some(schema) = s.schema {
                    args.extend(["--json-schema", schema].map(OsString::from));
                }
            }
        }
        args.push("--".into());
        args.push(s.prompt.into());
        let env = SESSION_ENV
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .chain([
                (BASE_URL_VAR.into(), s.gateway_url.into()),
                (API_KEY_VAR.into(), s.token.into()),
            ])
            .collect();
        Ok(Command {
            args,
            env,
            stdin: s.material.map(str::to_owned),
        })
    }

    fn parser(&self) -> Box<dyn StreamParser> {
        Box::new(stream::ClaudeStream)
    }

    /// `--json-schema` offers the model a `StructuredOutput` tool.
    fn answer_with(&self) -> &'static str {
        "by calling the StructuredOutput tool"
    }

    fn tool_call(&self, id: String, name: String, input: Value) -> ToolCall {
        tool_call(id, name, input)
    }

    /// Denied: `permissionDecision: "deny"` on stdout, exit 0 (the model
    /// reads the reason).
    fn hook_reply(&self, deny: Option<&str>) -> HookReply {
        HookReply {
            stdout: deny.map_or_else(String::new, |reason| {
                json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}})
                    .to_string()
            }),
            stderr: String::new(),
            code: 0,
        }
    }
}

/// A Claude Code tool call in canonical form.
pub fn tool_call(id: String, name: String, input: Value) -> ToolCall {
    let path = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
    let action = match name.as_str() {
        "Read" => path("file_path").map(|path| Action::Read { path }),
        "Write" => path("file_path").map(|path| Action::Write { path }),
        "Edit" | "MultiEdit" => path("file_path").map(|path| Action::Edit { path }),
        "NotebookEdit" => path("notebook_path").map(|path| Action::Edit { path }),
        "Bash" => path("command").map(|command| Action::Shell { command }),
        _ => None,
    }
    .unwrap_or(Action::Other);
    ToolCall {
        id,
        name,
        input,
        action,
    }
}

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

/// The per-session settings: permissions and hooks (no credential, no key
/// helper: the session's credential is the gateway's token).
pub fn settings_json(deny: &[String], hooks: Option<Value>) -> Value {
    let mut settings = json!({
        "permissions": { "deny": deny },
    });
    if let Some(hooks) = hooks {
        settings["hooks"] = hooks;
    }
    settings
}

/// Measured against Claude Code 2.1.328's own cost accounting (the scripted
/// model reports tokens, the CLI reports `total_cost_usd`): cache writes at
/// 1.25x input, cache reads at 0.1x. A model of no family here has no
/// price: a call on it is refused unless `[prices."model"]` gives one (a
/// guess could under-bill a dearer model).
pub fn price(model: &str) -> Option<Price> {
    let m = model.to_ascii_lowercase();
    let (input, output) = if m.contains("haiku") {
        (0.1, 0.5)
    } else if m.contains("sonnet") {
        (2.0, 10.0)
    } else if m.contains("opus") {
        (4.0, 20.0)
    } else {
        return None;
    };
    Some(Price {
        input,
        output,
        cache_read: input * 0.1,
        cache_write: input * 1.25,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::events;

    fn session<'a>(role: Role, home: &'a std::path::Path, tools: &'a [String]) -> Session<'a> {
        Session {
            role,
            model: "haiku",
            prompt: "--fix it",
            material: Some("the diff"),
            allowed_tools: tools,
            schema: Some("{\"type\":\"object\"}"),
            limits: CliLimits {
                max_budget_usd: 0.5,
                max_turns: 40,
            },
            hook_command: "/opt/loopd hook pre-tool-use",
            loopd: std::path::Path::new("/opt/loopd"),
            gateway_url: "http://127.0.0.1:4242",
            token: "loopd-session-x",
            home,
        }
    }

    fn args_of(c: &Command) -> Vec<String> {
        c.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn agent_args_end_with_the_prompt_after_double_dash() {
        let tools = vec!["Read".to_string(), "Bash(python3 -m pytest *)".to_string()];
        let home = std::path::Path::new("/h");
        let c = ClaudeCode
            .command(&session(Role::Agent, home, &tools))
            .expect("command");
        let args = args_of(&c);
        assert_eq!(args[args.len() - 2..], ["--", "--fix it"]);
        let joined = args.join(" ");
        for needle in [
            "-p --output-format stream-json --verbose",
            "--model haiku",
            "--setting-sources  --no-session-persistence",
            "--permission-mode acceptEdits",
            "--allowedTools Read,Bash(python3 -m pytest *)",
            "--max-budget-usd 0.500000",
            "--max-turns 40",
            "\"command\":\"/opt/loopd hook pre-tool-use\"",
        ] {
            assert!(joined.contains(needle), "missing `{needle}` in {joined}");
        }
        assert!(!joined.contains("--json-schema"));
    }

    #[test]
    fn critic_args_have_no_tools_and_a_schema() {
        let home = std::path::Path::new("/h");
        let c = ClaudeCode
            .command(&session(Role::Critic, home, &[]))
            .expect("command");
        let args = args_of(&c);
        let i = args.iter().position(|a| a == "--tools").expect("--tools");
        assert_eq!(args[i + 1], "");
        assert_eq!(args[i + 2], "--json-schema");
        assert_eq!(args[args.len() - 2..], ["--", "--fix it"]);
        assert!(!args.iter().any(|a| a == "--allowedTools"));
        assert_eq!(c.stdin.as_deref(), Some("the diff"));
    }

    #[test]
    fn sessions_get_the_gateway_and_no_credential() {
        let home = std::path::Path::new("/h");
        let c = ClaudeCode
            .command(&session(Role::Agent, home, &[]))
            .expect("command");
        let get = |k: &str| {
            c.env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(
            get("ANTHROPIC_BASE_URL").as_deref(),
            Some("http://127.0.0.1:4242")
        );
        assert_eq!(get("ANTHROPIC_API_KEY").as_deref(), Some("loopd-session-x"));
        assert!(!args_of(&c).join(" ").contains("apiKeyHelper"));
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn credentials_are_picked_in_order() {
        let a = ClaudeCode
            .access(&vars(&[
                ("ANTHROPIC_AUTH_TOKEN", "auth"),
                ("CLAUDE_CODE_OAUTH_TOKEN", "oauth"),
                ("ANTHROPIC_API_KEY", "key"),
            ]))
            .expect("access");
        assert_eq!(a.credential, Credential::ApiKey("key".into()));
        assert_eq!(a.upstream, DEFAULT_UPSTREAM);
        let a = ClaudeCode
            .access(&vars(&[
                ("ANTHROPIC_AUTH_TOKEN", "auth"),
                ("CLAUDE_CODE_OAUTH_TOKEN", "oauth"),
                ("ANTHROPIC_API_KEY", ""),
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ]))
            .expect("access");
        assert_eq!(a.credential, Credential::OAuth("oauth".into()));
        assert_eq!(a.upstream, "http://127.0.0.1:9");
        assert!(matches!(
            ClaudeCode.access(&vars(&[])),
            Err(CredentialError::Missing { .. })
        ));
        assert!(matches!(
            ClaudeCode.access(&vars(&[
                ("ANTHROPIC_API_KEY", "k"),
                ("CLAUDE_CODE_USE_BEDROCK", "1")
            ])),
            Err(CredentialError::Unmetered { .. })
        ));
        assert!(!format!("{:?}", Credential::ApiKey("sk-secret".into())).contains("sk-secret"));
    }

    #[test]
    fn tool_calls_are_canonical() {
        let t =
            |name: &str, input: Value| ClaudeCode.tool_call("t".into(), name.into(), input).action;
        assert_eq!(
            t("Write", json!({"file_path": "/r/a.py"})),
            Action::Write {
                path: "/r/a.py".into()
            }
        );
        assert_eq!(
            t("MultiEdit", json!({"file_path": "/r/a.py"})),
            Action::Edit {
                path: "/r/a.py".into()
            }
        );
        assert_eq!(
            t("Bash", json!({"command": "ls"})),
            Action::Shell {
                command: "ls".into()
            }
        );
        assert_eq!(t("TodoWrite", json!({})), Action::Other);
        let deny = ClaudeCode.hook_reply(Some("no"));
        assert!(deny.stdout.contains("\"permissionDecision\":\"deny\"") && deny.code == 0);
        assert!(ClaudeCode.hook_reply(None).stdout.is_empty());
    }

    #[test]
    fn prices_match_the_cli() {
        let u = events::Usage {
            input_tokens: 10_000,
            output_tokens: 10_000,
            ..Default::default()
        };
        let p = |m: &str| price(m).expect("priced");
        assert!((p("claude-haiku-5-5").cost(&u) - 0.006).abs() < 1e-12);
        assert!((p("sonnet").cost(&u) - 0.12).abs() < 1e-12);
        assert!(p("claude-opus-5-5").input >= p("sonnet").input);
        assert_eq!(price("mystery"), None, "an unknown model is not guessed");
    }
}
