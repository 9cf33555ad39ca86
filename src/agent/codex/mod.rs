//! OpenAI's Codex CLI (`codex exec`) as loopd drives it: the command lines
//! of the agent and critic sessions, its private home, its stream
//! ([`stream`]), its tool names, its hook protocol, its credential, its wire
//! protocol at the gateway ([`wire`]) and its price table.
//!
//! Facts relied on (CODEX_CLI.md, and re-checked against `@openai/codex`
//! 0.171 here): a custom provider (`-c model_provider=...`) points Codex at
//! loopd's gateway, the session's token in the variable `env_key` names
//! (`OPENAI_BASE_URL` is ignored); `--ignore-user-config` and a private
//! `CODEX_HOME` keep the user's own configuration out; hooks given with `-c
//! hooks.PreToolUse=[...]` run headless with `--dangerously-bypass-hook-trust`
//! (the hook sees the shell tool as `Bash`, `tool_input.command`; exit 2
//! with the reason on stderr blocks the call, and a blocked call leaves no
//! item in the stream — loopd's gateway records it); `web_search =
//! "disabled"` takes the provider-side search tool away; `--output-schema`
//! reaches the model as a strict JSON schema, and the final message is the
//! object; stdin is appended to the prompt. Codex's own sandbox is off
//! (`danger-full-access`): loopd's is the authority (the critic's a
//! read-only one), and a second layer inside it gains nothing.

use std::ffi::OsString;
use std::sync::Arc;

use serde_json::Value;

pub mod stream;
pub mod wire;

use super::events::{Action, StreamParser, ToolCall};
use super::gateway::{channel, Access, Credential, CredentialError, Wire};
use super::{Agent, Command, HookReply, Price, Role, Session};

/// `codex exec`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Codex;

/// The public API, when the user names no other upstream.
pub const DEFAULT_UPSTREAM: &str = "https://api.openai.com";

/// Where loopd reads the upstream from (Codex itself ignores it).
pub const BASE_URL_VAR: &str = "OPENAI_BASE_URL";

/// Credential variables, in the order they are picked.
pub const CREDENTIAL_VARS: &[&str] = &["CODEX_API_KEY", "OPENAI_API_KEY"];

/// The verdict schema's file in the session's home.
const SCHEMA_FILE: &str = "loopd-verdict-schema.json";

impl Agent for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn program(&self) -> &'static str {
        "codex"
    }

    fn package(&self) -> Option<super::Package> {
        Some(super::Package {
            name: "@openai/codex",
            version: "0.171.0",
        })
    }

    fn default_models(&self) -> (&'static str, &'static str) {
        ("gpt-5-codex", "gpt-5")
    }

    fn credential_vars(&self) -> &'static [&'static str] {
        CREDENTIAL_VARS
    }

    fn access(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Access, CredentialError> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let key = CREDENTIAL_VARS.iter().find_map(|v| get(v)).ok_or_else(|| {
            CredentialError::Missing {
                agent: self.name(),
                vars: CREDENTIAL_VARS.to_vec(),
            }
        })?;
        // OpenAI's base URLs end in `/v1`; the gateway forwards the whole
        // path (`/v1/responses`).
        let upstream = Access::upstream(get(BASE_URL_VAR), DEFAULT_UPSTREAM);
        let upstream = upstream.strip_suffix("/v1").unwrap_or(&upstream).to_owned();
        Ok(Access {
            credential: Credential::Bearer(key.trim().to_owned()),
            upstream,
        })
    }

    fn wire(&self) -> Arc<dyn Wire> {
        Arc::new(wire::Responses)
    }

    fn prices(&self) -> fn(&str) -> Option<Price> {
        price
    }

    /// Measured on 0.171 against a scripted Responses API: a session's
    /// first request is about 41 KB (its tools and instructions).
    fn first_request_bytes(&self, _role: Role) -> u64 {
        48 << 10
    }

    fn command(&self, s: &Session<'_>) -> std::io::Result<Command> {
        let home = s.home.join(".codex");
        std::fs::create_dir_all(&home)?;
        let toml_str = |v: &str| Value::String(v.to_owned()).to_string();
        let provider = format!(
            "model_providers.loopd={{name=\"loopd\", base_url={}, env_key=\"{}\", wire_api=\"responses\"}}",
            toml_str(&format!("{}/v1", s.gateway_url)),
            channel::TOKEN_VAR
        );
        let hooks = format!(
            "hooks.PreToolUse=[{{matcher=\"*\", hooks=[{{type=\"command\", command={}, timeout=120}}]}}]",
            toml_str(s.hook_command)
        );
        let mut args: Vec<OsString> = [
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--ignore-user-config",
            "--dangerously-bypass-hook-trust",
            "-c",
            "model_provider=\"loopd\"",
            "-c",
            &provider,
            "-c",
            &hooks,
            "-c",
            "web_search=\"disabled\"",
            // Codex reports analytics to OpenAI when a session ends: a
            // connection that is not the gateway's (and, in a private
            // network, a 5 s wait for it to fail at every session's end).
            "-c",
            "analytics.enabled=false",
            // A login shell (`bash -lc`) reads /etc/profile, which resets
            // PATH: the agent would run another python or pytest than the
            // goal test does.
            "-c",
            "allow_login_shell=false",
            // The repository's AGENTS.md is not an instruction loopd gave
            // (as `--setting-sources ""` keeps CLAUDE.md out for Claude
            // Code): the task and the rubric are.
            "-c",
            "project_doc_max_bytes=0",
            // loopd's sandbox is the authority (the critic's is read-only).
            "--sandbox",
            "danger-full-access",
            "-m",
            s.model,
        ]
        .iter()
        .map(OsString::from)
        .collect();
        if let Some(schema) = s.schema {
            let file = home.join(SCHEMA_FILE);
            std::fs::write(&file, schema)?;
            args.push("--output-schema".into());
            args.push(file.into());
        }
        args.push("--".into());
        args.push(s.prompt.into());
        Ok(Command {
            args,
            env: vec![("CODEX_HOME".into(), home.into())],
            stdin: s.material.map(str::to_owned),
        })
    }

    fn parser(&self) -> Box<dyn StreamParser> {
        Box::<stream::CodexStream>::default()
    }

    /// `--output-schema` makes the final message the verdict object.
    fn answer_with(&self) -> &'static str {
        "with the verdict's JSON object alone, as your final message"
    }

    fn tool_call(&self, id: String, name: String, input: Value) -> ToolCall {
        let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
        let action = match name.as_str() {
            // The hook names the shell `Bash`; the model calls it
            // `exec_command` (`cmd`) or `shell` (an argv).
            "Bash" | "exec_command" | "shell" => text("command")
                .or_else(|| text("cmd"))
                .or_else(|| {
                    input.get("command").and_then(Value::as_array).map(|argv| {
                        argv.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                })
                .map(|command| match patch_paths(&command) {
                    Some(paths) => Action::Patch { paths },
                    None => Action::Shell { command },
                }),
            "apply_patch" => text("input")
                .or_else(|| text("patch"))
                .and_then(|p| patch_paths(&p))
                .map(|paths| Action::Patch { paths }),
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

    /// Denied: the reason on stderr, exit 2 (the model reads it).
    fn hook_reply(&self, deny: Option<&str>) -> HookReply {
        HookReply {
            stdout: String::new(),
            stderr: deny.unwrap_or_default().to_owned(),
            code: if deny.is_some() { 2 } else { 0 },
        }
    }
}

/// The files a Codex patch (`*** Begin Patch` … `*** End Patch`, given to
/// `apply_patch` as an argument or a heredoc) adds, updates, deletes or
/// moves; `None` for text that is not a patch.
pub fn patch_paths(text: &str) -> Option<Vec<String>> {
    if !text.contains("*** Begin Patch") {
        return None;
    }
    let paths = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            [
                "*** Add File: ",
                "*** Update File: ",
                "*** Delete File: ",
                "*** Move to: ",
            ]
            .iter()
            .find_map(|p| l.strip_prefix(p))
            .map(|p| p.trim().to_owned())
        })
        .collect();
    Some(paths)
}

/// OpenAI's list prices per million tokens for the GPT-5 family (cached
/// input at a tenth; no surcharge for writing the cache). Any other model
/// has no price: a call on it is refused unless `[prices."model"]` gives
/// one.
pub fn price(model: &str) -> Option<Price> {
    let m = model.to_ascii_lowercase();
    if !m.starts_with("gpt-5") {
        return None;
    }
    let (input, output) = if m.contains("nano") {
        (0.05, 0.4)
    } else if m.contains("mini") {
        (0.25, 2.0)
    } else if m.contains("pro") {
        (15.0, 120.0)
    } else {
        (1.25, 10.0)
    };
    Some(Price {
        input,
        output,
        cache_read: input * 0.1,
        cache_write: input,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::CliLimits;
    use serde_json::json;

    #[test]
    fn the_command_points_codex_at_the_gateway_with_loopds_hook() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = Session {
            role: Role::Critic,
            model: "gpt-5",
            prompt: "judge",
            material: Some("the diff"),
            allowed_tools: &[],
            schema: Some("{\"type\":\"object\"}"),
            limits: CliLimits {
                max_budget_usd: 1.0,
                max_turns: 10,
            },
            hook_command: "/opt/loopd hook pre-tool-use --agent codex",
            loopd: std::path::Path::new("/opt/loopd"),
            gateway_url: "http://127.0.0.1:4242",
            token: "loopd-session-x",
            home: dir.path(),
        };
        let c = Codex.command(&s).expect("command");
        let args: Vec<String> = c
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        for needle in [
            "exec --json",
            "--ignore-user-config",
            "base_url=\"http://127.0.0.1:4242/v1\", env_key=\"LOOPD_SESSION_TOKEN\"",
            "command=\"/opt/loopd hook pre-tool-use --agent codex\"",
            "web_search=\"disabled\"",
            "analytics.enabled=false",
            "project_doc_max_bytes=0",
            "--output-schema",
        ] {
            assert!(joined.contains(needle), "missing `{needle}` in {joined}");
        }
        assert_eq!(args[args.len() - 2..], ["--", "judge"]);
        assert!(dir.path().join(".codex").join(SCHEMA_FILE).is_file());
        assert_eq!(c.stdin.as_deref(), Some("the diff"));
        assert!(
            !joined.contains("loopd-session-x"),
            "the token is in the environment, never the command line"
        );
    }

    #[test]
    fn tool_calls_and_patches_are_canonical() {
        let t = |name: &str, input: Value| Codex.tool_call("c".into(), name.into(), input).action;
        assert_eq!(
            t("Bash", json!({"command": "ls"})),
            Action::Shell {
                command: "ls".into()
            }
        );
        assert_eq!(
            t("exec_command", json!({"cmd": "ls"})),
            Action::Shell {
                command: "ls".into()
            }
        );
        let patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: tests/test_x.py\n@@\n-a\n+b\n*** Add File: new.py\n+x\n*** End Patch\nEOF";
        assert_eq!(
            t("Bash", json!({ "command": patch })),
            Action::Patch {
                paths: vec!["tests/test_x.py".into(), "new.py".into()]
            }
        );
        assert_eq!(Codex.hook_reply(Some("no")).code, 2);
        assert_eq!(Codex.hook_reply(Some("no")).stderr, "no");
        assert_eq!(Codex.hook_reply(None).code, 0);
    }

    #[test]
    fn the_key_is_picked_and_sent_as_a_bearer() {
        let get = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-o".to_owned());
        let a = Codex.access(&get).expect("access");
        assert_eq!(a.credential, Credential::Bearer("sk-o".into()));
        assert_eq!(a.upstream, DEFAULT_UPSTREAM);
        assert!(matches!(
            Codex.access(&|_| None),
            Err(CredentialError::Missing { .. })
        ));
        let get = |k: &str| match k {
            "CODEX_API_KEY" => Some("sk-c".to_owned()),
            "OPENAI_BASE_URL" => Some("https://proxy.example/v1/".to_owned()),
            _ => None,
        };
        let a = Codex.access(&get).expect("access");
        assert_eq!(a.credential, Credential::Bearer("sk-c".into()));
        assert_eq!(a.upstream, "https://proxy.example");
    }
}
