//! The scripted agent of test builds (`--agent scripted`, cargo feature
//! `scripted-agent`): no CLI and no node, so the suite decides in-process
//! what a unit decides (the gates, the hook policy's attacks, judge order,
//! replay and the crash walks' bookkeeping) without a node process per
//! session.
//!
//! It is Claude Code's protocols without Claude Code, played in loopd's
//! own process: it asks the model through the job's gateway on the real
//! wire (Messages API, SSE — metered, capped and reserved as any call, by
//! the scripted model of the tests upstream), writes Claude Code's
//! stream-json lines into the one session loop every session runs
//! ([`session::drive`]: the stream log, the parser, the guards, the idle
//! timeout, stops), asks the job's real hook (`loopd hook`, through the
//! authenticated channel) before every tool call, and runs every tool —
//! `Bash`, and `Read`/`Write`/`Edit` too — as a contained process of the
//! session in the job's sandbox, so what an agent process may touch is
//! decided by the sandbox as for a CLI.
//!
//! What it does not prove, and the real-CLI tests keep: that a CLI really
//! honours a hook's deny and its permission rules (here a model of them:
//! `Read` always, edits in the working directory, `Bash` by the allowed
//! list's `Bash`, `Bash(prefix:*)`, `Bash(prefix *)` or `Bash(command)`
//! rules), the CLI's own stream format and retries, its own
//! `--max-budget-usd` (here the gateway's cap is the only one), its
//! process tree and signals. `tests/it/README.md` names
//! the real-CLI test of each.
//!
//! Never in a build that ships: an agent that is no agent has no place
//! there.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::claude::{self, ClaudeCode};
use super::events::{StreamParser, ToolCall};
use super::gateway::{Access, CredentialError, Wire};
use super::session::{self, Driven, SessionEnd, SessionSpec};
use super::{Agent, Command, HookReply, Price, Role, Session, SessionFuture};
use crate::process;

/// `--agent scripted`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scripted;

/// What one session is to do: the session's whole command line, as one
/// JSON argument (there is no CLI to parse flags).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Call {
    role: Role,
    model: String,
    prompt: String,
    schema: Option<String>,
    allowed_tools: Vec<String>,
    max_turns: u64,
    hook_command: String,
    /// `loopd`, whose `scripted-call` makes each model call.
    loopd: std::path::PathBuf,
    gateway_url: String,
    token: String,
}

/// How long one tool process may run (Claude Code's default for Bash).
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// At most this much of a tool's output goes back to the model.
const MAX_TOOL_OUTPUT: usize = 30_000;

impl Agent for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    /// Its tools run through the shell: the "program" is `sh`.
    fn program(&self) -> &'static str {
        "sh"
    }

    fn package(&self) -> Option<super::Package> {
        None
    }

    fn install(&self) -> String {
        "cargo build --features scripted-agent".to_owned()
    }

    /// `sh` starts no session: the shell is only what its tools run with.
    fn nests(&self) -> bool {
        false
    }

    fn default_models(&self) -> (&'static str, &'static str) {
        ClaudeCode.default_models()
    }

    fn credential_vars(&self) -> &'static [&'static str] {
        ClaudeCode.credential_vars()
    }

    fn access(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Access, CredentialError> {
        ClaudeCode.access(get)
    }

    fn wire(&self) -> Arc<dyn Wire> {
        ClaudeCode.wire()
    }

    fn prices(&self) -> fn(&str) -> Option<Price> {
        ClaudeCode.prices()
    }

    fn first_request_bytes(&self, role: Role) -> u64 {
        ClaudeCode.first_request_bytes(role)
    }

    fn command(&self, s: &Session<'_>) -> std::io::Result<Command> {
        let call = Call {
            role: s.role,
            model: s.model.to_owned(),
            prompt: s.prompt.to_owned(),
            schema: s.schema.map(str::to_owned),
            allowed_tools: s.allowed_tools.to_vec(),
            max_turns: s.limits.max_turns.max(1),
            hook_command: s.hook_command.to_owned(),
            loopd: s.loopd.to_path_buf(),
            gateway_url: s.gateway_url.to_owned(),
            token: s.token.to_owned(),
        };
        Ok(Command {
            args: vec![OsString::from(
                serde_json::to_string(&call).expect("a call serializes"),
            )],
            env: claude::SESSION_ENV
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .chain([
                    (claude::BASE_URL_VAR.into(), s.gateway_url.into()),
                    (claude::API_KEY_VAR.into(), s.token.into()),
                ])
                .collect(),
            stdin: s.material.map(str::to_owned),
        })
    }

    fn answer_with(&self) -> &'static str {
        ClaudeCode.answer_with()
    }

    fn parser(&self) -> Box<dyn StreamParser> {
        ClaudeCode.parser()
    }

    fn tool_call(&self, id: String, name: String, input: Value) -> ToolCall {
        ClaudeCode.tool_call(id, name, input)
    }

    fn hook_reply(&self, deny: Option<&str>) -> HookReply {
        ClaudeCode.hook_reply(deny)
    }

    fn run_session<'a>(
        &'a self,
        spec: &'a SessionSpec,
        parser: &'a mut dyn StreamParser,
        observer: &'a mut (dyn session::Observer + Send),
        stop: &'a mut tokio::sync::watch::Receiver<Option<session::StopRequest>>,
        gateway: Option<
            &'a mut tokio::sync::mpsc::UnboundedReceiver<super::gateway::record::Record>,
        >,
    ) -> SessionFuture<'a> {
        Box::pin(run(spec, parser, observer, stop, gateway))
    }
}

/// One session: the script plays into a pipe that the one session loop
/// reads; a stop aborts the script and stops its tool processes.
async fn run(
    spec: &SessionSpec,
    parser: &mut dyn StreamParser,
    observer: &mut (dyn session::Observer + Send),
    stop: &mut tokio::sync::watch::Receiver<Option<session::StopRequest>>,
    gateway: Option<&mut tokio::sync::mpsc::UnboundedReceiver<super::gateway::record::Record>>,
) -> Result<SessionEnd, session::SessionError> {
    let started = Instant::now();
    let spawn_error = |e: String| session::SessionError::Spawn {
        bin: spec.bin.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    };
    let arg = spec
        .args
        .first()
        .and_then(|a| a.to_str())
        .ok_or_else(|| spawn_error("no session argument".into()))?;
    let call: Call = serde_json::from_str(arg).map_err(|e| spawn_error(e.to_string()))?;
    let token = process::new_token(&spec.scope, spec.role.as_str());
    let (writer, reader) = tokio::io::duplex(256 << 10);
    let loopd_exe = call.loopd.clone();
    let player = Player {
        call,
        spec: spec.clone(),
        token: token.clone(),
        material: spec.stdin.clone(),
        session_id: format!("scripted-{}", token.replace('/', "-")),
        loopd: loopd_exe,
        out: writer,
        stderr: String::new(),
    };
    let mut script = tokio::spawn(player.play());
    let lines = BufReader::new(reader).lines();
    let Driven { result, stopped } =
        session::drive(spec, lines, parser, observer, stop, gateway).await?;
    let (stderr, exit_code) = match stopped {
        Some(reason) => {
            tracing::info!(role = spec.role.as_str(), %reason, "stopping the session");
            script.abort();
            let _ = (&mut script).await;
            (String::new(), None)
        }
        None => match script.await {
            Ok(stderr) => (stderr, Some(0)),
            Err(e) => (format!("the scripted session failed: {e}"), Some(1)),
        },
    };
    // Every tool process carries the session's token: whatever is left
    // (a stopped session's, or one a command started and left behind) is
    // stopped as a CLI's process tree would be.
    let leftovers = process::sweep(&token, spec.grace).await;
    if let Err(e) = tokio::fs::write(&spec.stderr_log, &stderr).await {
        tracing::warn!(error = %e, "cannot write the session's stderr log");
    }
    Ok(SessionEnd {
        result,
        stopped,
        exit_code,
        stderr_tail: stderr,
        wall: started.elapsed(),
        leftovers: if stopped.is_some() { 0 } else { leftovers },
    })
}

/// A content block of the model's answer, as it streamed.
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// What a tool call came to.
struct Outcome {
    text: String,
    is_error: bool,
}

/// The session as it plays: the conversation, and the stream it writes.
struct Player {
    call: Call,
    spec: SessionSpec,
    token: String,
    material: Option<String>,
    session_id: String,
    /// This executable: the model call is its `scripted-call`.
    loopd: std::path::PathBuf,
    out: DuplexStream,
    stderr: String,
}

impl Player {
    /// Play the session to its end; what it would have said on stderr.
    async fn play(mut self) -> String {
        let first = match &self.material {
            Some(m) => format!("{m}\n\n{}", self.call.prompt),
            None => self.call.prompt.clone(),
        };
        let mut messages = vec![json!({"role": "user", "content": first})];
        self.emit(json!({"type": "system", "subtype": "init", "model": self.call.model, "cwd": self.spec.cwd, "session_id": self.session_id}))
            .await;
        let mut usage = super::events::Usage::default();
        let mut turns = 0u64;
        let mut denials = Vec::new();
        let mut structured: Option<Value> = None;
        let mut last_text = String::new();
        loop {
            if turns >= self.call.max_turns {
                self.finish(
                    "error_max_turns",
                    Some("max_turns"),
                    None,
                    turns,
                    usage,
                    &denials,
                    structured,
                    &format!("Reached the maximum number of turns ({turns})"),
                )
                .await;
                break;
            }
            turns += 1;
            let answer = match self.ask(&messages).await {
                Ok(a) => a,
                Err((status, text)) => {
                    self.stderr.push_str(&text);
                    self.finish(
                        "success",
                        Some("api_error"),
                        status,
                        turns,
                        usage,
                        &denials,
                        structured,
                        &format!("API Error: {text}"),
                    )
                    .await;
                    break;
                }
            };
            usage.input_tokens += answer.usage.input_tokens;
            usage.output_tokens += answer.usage.output_tokens;
            usage.cache_creation_input_tokens += answer.usage.cache_creation_input_tokens;
            usage.cache_read_input_tokens += answer.usage.cache_read_input_tokens;
            let mut content = Vec::new();
            let mut results = Vec::new();
            for block in &answer.blocks {
                match block {
                    Block::Text(t) => {
                        last_text.clone_from(t);
                        content.push(json!({"type": "text", "text": t}));
                    }
                    Block::ToolUse { id, name, json } => {
                        let input: Value = serde_json::from_str(json).unwrap_or(json!({}));
                        content.push(
                            json!({"type": "tool_use", "id": id, "name": name, "input": input}),
                        );
                    }
                }
            }
            messages.push(json!({"role": "assistant", "content": content}));
            for block in answer.blocks {
                let Block::ToolUse { id, name, json } = block else {
                    continue;
                };
                let input: Value = serde_json::from_str(&json).unwrap_or(json!({}));
                let outcome = match self.permitted(&name, &input) {
                    false => {
                        denials.push(
                            json!({"tool_name": name, "tool_use_id": id, "tool_input": input}),
                        );
                        Outcome {
                            text: format!("Claude requested permissions to use {name}, but you haven't granted it yet."),
                            is_error: true,
                        }
                    }
                    true => match self.hook(&id, &name, &input).await {
                        Some(reason) => Outcome {
                            text: reason,
                            is_error: true,
                        },
                        None => {
                            if name == "StructuredOutput" {
                                structured = Some(input.clone());
                            }
                            self.tool(&name, &input).await
                        }
                    },
                };
                results.push(json!({"type": "tool_result", "tool_use_id": id, "is_error": outcome.is_error, "content": outcome.text}));
            }
            // As Claude Code does: an accepted structured answer ends the
            // session at once (its round trip counted as a turn).
            if let Some(answer) = structured.clone().filter(|_| self.call.role != Role::Agent) {
                self.emit(json!({"type": "user", "message": {"role": "user", "content": results}}))
                    .await;
                self.finish(
                    "success",
                    None,
                    None,
                    turns + 1,
                    usage,
                    &denials,
                    Some(answer),
                    &last_text,
                )
                .await;
                break;
            }
            if results.is_empty() {
                self.finish(
                    "success", None, None, turns, usage, &denials, structured, &last_text,
                )
                .await;
                break;
            }
            self.emit(
                json!({"type": "user", "message": {"role": "user", "content": results.clone()}}),
            )
            .await;
            messages.push(json!({"role": "user", "content": results}));
        }
        self.stderr
    }

    /// Write one line of the stream (lost only if loopd stopped reading).
    async fn emit(&mut self, line: Value) {
        let mut text = line.to_string();
        text.push('\n');
        let _ = self.out.write_all(text.as_bytes()).await;
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &mut self,
        subtype: &str,
        terminal_reason: Option<&str>,
        api_error_status: Option<u16>,
        turns: u64,
        usage: super::events::Usage,
        denials: &[Value],
        structured: Option<Value>,
        text: &str,
    ) {
        let cost = ClaudeCode.prices()(&self.call.model).map_or(0.0, |p| p.cost(&usage));
        let is_error = terminal_reason.is_some();
        let mut result = json!({
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "num_turns": turns,
            "total_cost_usd": cost,
            "usage": usage,
            "terminal_reason": terminal_reason.unwrap_or("completed"),
            "permission_denials": denials,
            "session_id": self.session_id,
        });
        if is_error {
            result["errors"] = json!([text]);
        } else {
            result["result"] = json!(text);
        }
        if let Some(s) = api_error_status {
            result["api_error_status"] = json!(s);
        }
        if let Some(s) = structured {
            result["structured_output"] = s;
        }
        self.emit(result).await;
    }

    /// The tools this session offers the model.
    fn tools(&self) -> Vec<Value> {
        let tool = |name: &str, schema: Value| json!({"name": name, "description": format!("the scripted agent's {name}"), "input_schema": schema});
        match self.call.role {
            Role::Agent => ["Bash", "Read", "Write", "Edit"]
                .iter()
                .map(|n| tool(n, json!({"type": "object"})))
                .collect(),
            Role::Critic | Role::Examiner => self
                .call
                .schema
                .as_deref()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .map(|schema| vec![tool("StructuredOutput", schema)])
                .unwrap_or_default(),
        }
    }

    /// A system prompt as long as Claude Code's instructions and tool
    /// schemas ([`Agent::first_request_bytes`]): the gateway reserves a
    /// call's worst case by its size, so a cap is reached after as many
    /// calls as with the CLI.
    fn system_prompt(&self) -> String {
        let mut text = format!(
            "You are loopd's scripted agent.\nPrimary working directory: {}\n",
            self.spec.cwd.display()
        );
        let size = usize::try_from(ClaudeCode.first_request_bytes(self.call.role))
            .expect("a request size fits in memory")
            .saturating_sub(4 << 10);
        while text.len() < size {
            text.push_str(
                "Follow the task; run the tools you are allowed; say when you are done.\n",
            );
        }
        text
    }

    /// One model call through the gateway: the answer's blocks and usage,
    /// or the HTTP status and text of an error.
    async fn ask(&mut self, messages: &[Value]) -> Result<Answer, (Option<u16>, String)> {
        let body = json!({
            "model": self.call.model,
            "max_tokens": 32000,
            "stream": true,
            "system": [{"type": "text", "text": self.system_prompt()}],
            "tools": self.tools(),
            "messages": messages,
        });
        // From inside the session's sandbox, as a CLI calls: the gateway
        // listens in the job's network namespace, not in loopd's.
        let session = format!("x-claude-code-session-id: {}", self.session_id);
        let args = [
            "scripted-call",
            "--path",
            "/v1/messages",
            "--header",
            "anthropic-version: 2023-06-01",
            "--header",
            &session,
        ];
        let loopd = self.loopd.clone();
        let (code, out, err) = self
            .run_in_session(&loopd, &args, Some(body.to_string()))
            .await
            .map_err(|e| (None, format!("cannot reach the model: {e}")))?;
        if code != Some(0) {
            return Err((None, format!("cannot reach the model: {}", err.trim())));
        }
        let (status, text) = out.split_once('\n').unwrap_or((out.as_str(), ""));
        let status: u16 = status.trim().parse().unwrap_or(0);
        if !(200..300).contains(&status) {
            return Err((Some(status), format!("{status} {text}")));
        }
        let text = text.to_owned();
        self.read_sse(&text).await
    }

    /// The SSE answer, passed on as Claude Code does with
    /// `--include-partial-messages`: the message events as `stream_event`
    /// lines, each finished content block as an `assistant` line.
    async fn read_sse(&mut self, text: &str) -> Result<Answer, (Option<u16>, String)> {
        let mut answer = Answer::default();
        let mut open: Option<Block> = None;
        let mut message = json!({"id": "", "model": self.call.model});
        for data in text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
        {
            let Ok(event) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            match event["type"].as_str().unwrap_or_default() {
                "message_start" => {
                    message["id"] = event["message"]["id"].clone();
                    if let Ok(u) = serde_json::from_value(event["message"]["usage"].clone()) {
                        answer.usage = u;
                    }
                    self.emit(json!({"type": "stream_event", "event": event}))
                        .await;
                }
                "message_delta" => {
                    if let Some(out) = event["usage"]["output_tokens"].as_u64() {
                        answer.usage.output_tokens = out;
                    }
                    self.emit(json!({"type": "stream_event", "event": event}))
                        .await;
                }
                "message_stop" => {
                    self.emit(json!({"type": "stream_event", "event": event}))
                        .await;
                }
                "content_block_start" => {
                    let b = &event["content_block"];
                    open = Some(match b["type"].as_str() {
                        Some("tool_use") => Block::ToolUse {
                            id: b["id"].as_str().unwrap_or_default().to_owned(),
                            name: b["name"].as_str().unwrap_or_default().to_owned(),
                            json: String::new(),
                        },
                        _ => Block::Text(b["text"].as_str().unwrap_or_default().to_owned()),
                    });
                }
                "content_block_delta" => match (&mut open, event["delta"]["type"].as_str()) {
                    (Some(Block::Text(t)), Some("text_delta")) => {
                        t.push_str(event["delta"]["text"].as_str().unwrap_or_default());
                    }
                    (Some(Block::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(event["delta"]["partial_json"].as_str().unwrap_or_default());
                    }
                    _ => {}
                },
                "content_block_stop" => {
                    if let Some(block) = open.take() {
                        let content = match &block {
                            Block::Text(t) => json!({"type": "text", "text": t}),
                            Block::ToolUse { id, name, json } => json!({
                                "type": "tool_use", "id": id, "name": name,
                                "input": serde_json::from_str::<Value>(json).unwrap_or(json!({})),
                            }),
                        };
                        let mut m = message.clone();
                        m["content"] = json!([content]);
                        self.emit(json!({"type": "assistant", "message": m})).await;
                        answer.blocks.push(block);
                    }
                }
                "error" => {
                    return Err((None, event["error"].to_string()));
                }
                _ => {}
            }
        }
        Ok(answer)
    }

    /// The CLI's permission rules, as modelled: reads always, edits in the
    /// working directory (`acceptEdits`), a command only by an allowed
    /// `Bash`, `Bash(prefix:*)`, `Bash(prefix *)` or `Bash(command)` rule;
    /// the critic, only its answer.
    fn permitted(&self, name: &str, input: &Value) -> bool {
        match (self.call.role, name) {
            (Role::Critic | Role::Examiner, n) => n == "StructuredOutput",
            (Role::Agent, "Read" | "Write" | "Edit") => true,
            (Role::Agent, "Bash") => {
                let command = input["command"].as_str().unwrap_or_default();
                self.call.allowed_tools.iter().any(|rule| {
                    rule == "Bash"
                        || rule == "Bash(*)"
                        || rule
                            .strip_prefix("Bash(")
                            .and_then(|r| r.strip_suffix(')'))
                            .is_some_and(|r| {
                                if let Some(prefix) = r.strip_suffix(":*") {
                                    command.starts_with(prefix)
                                } else if let Some(prefix) = r.strip_suffix(" *") {
                                    command == prefix || command.starts_with(&format!("{prefix} "))
                                } else {
                                    command == r
                                }
                            })
                })
            }
            _ => false,
        }
    }

    /// The job's PreToolUse hook, run as Claude Code runs it: the reason
    /// it denies the call, if it does.
    async fn hook(&mut self, id: &str, name: &str, input: &Value) -> Option<String> {
        let event = json!({
            "session_id": self.session_id,
            "transcript_path": "",
            "cwd": self.spec.cwd,
            "permission_mode": "acceptEdits",
            "hook_event_name": "PreToolUse",
            "tool_name": name,
            "tool_input": input,
            "tool_use_id": id,
        });
        let (code, stdout, stderr) = match self
            .process(
                &["-c", &self.call.hook_command.clone()],
                Some(event.to_string()),
            )
            .await
        {
            Ok(out) => out,
            Err(e) => return Some(format!("the hook could not run: {e}")),
        };
        if code == Some(2) {
            return Some(stderr);
        }
        let said: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
        let out = &said["hookSpecificOutput"];
        (out["permissionDecision"] == "deny").then(|| {
            out["permissionDecisionReason"]
                .as_str()
                .unwrap_or("denied by the hook")
                .to_owned()
        })
    }

    /// Run an allowed tool, as a contained process of the session in its
    /// sandbox.
    async fn tool(&mut self, name: &str, input: &Value) -> Outcome {
        let s = |k: &str| input[k].as_str().unwrap_or_default().to_owned();
        let ran = match name {
            "Bash" => self.process(&["-c", &s("command")], None).await,
            "Read" => {
                self.process(&["-c", r#"cat -- "$1""#, "sh", &s("file_path")], None)
                    .await
            }
            "Write" => self.write(&s("file_path"), s("content")).await,
            "Edit" => {
                let path = s("file_path");
                match self
                    .process(&["-c", r#"cat -- "$1""#, "sh", &path], None)
                    .await
                {
                    Ok((Some(0), text, _)) => {
                        let (old, new) = (s("old_string"), s("new_string"));
                        let n = text.matches(old.as_str()).count();
                        if old.is_empty() || n == 0 {
                            return failed(format!(
                                "String to replace not found in file.\nString: {old}"
                            ));
                        }
                        if n > 1 && input["replace_all"] != true {
                            return failed(format!("Found {n} matches of the string to replace, but replace_all is false."));
                        }
                        self.write(&path, text.replace(&old, &new)).await
                    }
                    Ok((_, _, err)) => return failed(err),
                    Err(e) => Err(e),
                }
            }
            "StructuredOutput" => {
                return Outcome {
                    text: "Structured output provided successfully".into(),
                    is_error: false,
                }
            }
            other => return failed(format!("No such tool available: {other}")),
        };
        match ran {
            Ok((code, stdout, stderr)) => {
                let mut text = stdout;
                if !stderr.is_empty() {
                    text.push_str(&stderr);
                }
                let mut cut = text.len().min(MAX_TOOL_OUTPUT);
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                Outcome {
                    is_error: code != Some(0),
                    text,
                }
            }
            Err(e) => failed(e.to_string()),
        }
    }

    async fn write(
        &mut self,
        path: &str,
        content: String,
    ) -> std::io::Result<(Option<i32>, String, String)> {
        self.process(
            &[
                "-c",
                r#"mkdir -p -- "$(dirname -- "$1")" && cat > "$1""#,
                "sh",
                path,
            ],
            Some(content),
        )
        .await
    }

    /// `sh ARGS` as a process of the session (see [`Self::run_in_session`]).
    async fn process(
        &mut self,
        args: &[&str],
        stdin: Option<String>,
    ) -> std::io::Result<(Option<i32>, String, String)> {
        let sh = self.spec.bin.clone();
        self.run_in_session(&sh, args, stdin).await
    }

    /// `program ARGS` as a process of the session: contained under its
    /// token, in its directory, environment and sandbox; exit code, stdout,
    /// stderr.
    async fn run_in_session(
        &mut self,
        program: &std::path::Path,
        args: &[&str],
        stdin: Option<String>,
    ) -> std::io::Result<(Option<i32>, String, String)> {
        let mut cmd = session::command_in(&self.spec, program, &self.token);
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = process::Contained::spawn(cmd, self.token.clone())?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.child.stdin.take()) {
            tokio::spawn(async move {
                let _ = pipe.write_all(text.as_bytes()).await;
            });
        }
        let mut out = child.child.stdout.take().expect("stdout was piped");
        let mut err = child.child.stderr.take().expect("stderr was piped");
        let read = async {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let _ = tokio::join!(out.read_to_end(&mut o), err.read_to_end(&mut e));
            (o, e)
        };
        match tokio::time::timeout(TOOL_TIMEOUT, read).await {
            Ok((o, e)) => {
                let status = child.wait().await?;
                Ok((
                    status.code(),
                    String::from_utf8_lossy(&o).into_owned(),
                    String::from_utf8_lossy(&e).into_owned(),
                ))
            }
            Err(_) => {
                child.stop(Duration::from_secs(1)).await;
                Ok((
                    None,
                    String::new(),
                    format!("Command timed out after {}s", TOOL_TIMEOUT.as_secs()),
                ))
            }
        }
    }
}

fn failed(text: String) -> Outcome {
    Outcome {
        text,
        is_error: true,
    }
}

/// A model's answer: its blocks and usage.
#[derive(Default)]
struct Answer {
    blocks: Vec<Block>,
    usage: super::events::Usage,
}
