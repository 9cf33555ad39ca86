//! The stream of `codex exec --json` (one JSON object per line), turned into
//! loopd's events: commands and file changes as canonical tool calls, the
//! turn's end as the session's result. Codex reports usage only per turn
//! (and, after a resume, as the thread's running total): loopd's spend comes
//! from the gateway's meter, never from these counts.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::agent::events::{Action, Event, SessionResult, StreamParser, ToolCall, Usage};

// Borrowed from the line where it can be: a command's text (a whole file,
// in a heredoc) is read only for a call not seen before, never for its
// completion.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    item: Option<Item<'a>>,
    #[serde(default)]
    usage: Option<TurnUsage>,
    #[serde(default)]
    error: Option<ErrorBody>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(default, borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    command: Option<&'a RawValue>,
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    changes: Vec<Change>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct Change {
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
struct TurnUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: String,
}

/// Codex's stream, turned into loopd's events.
#[derive(Debug, Default)]
pub struct CodexStream {
    /// Tool items reported as started (their end reports the result).
    started: std::collections::HashSet<String>,
    /// The last message the agent wrote: the session's answer.
    last_message: Option<String>,
    /// Error notices, kept for a failed turn's report.
    errors: Vec<String>,
}

impl CodexStream {
    fn tool(&mut self, item: &Item, out: &mut Vec<Event>) {
        // Reported once, when it starts: its completion (and every update)
        // names a call already seen, so nothing is built for it.
        if self.started.contains(item.id.as_ref()) {
            return;
        }
        let (name, input, action) = match item.kind.as_ref() {
            "command_execution" => {
                let line: Option<String> = item
                    .command
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .flatten();
                let command = unwrap_shell(line.as_deref().unwrap_or_default());
                (
                    "exec_command",
                    serde_json::json!({ "command": command }),
                    Action::Shell { command },
                )
            }
            "file_change" => {
                let paths: Vec<String> = item.changes.iter().map(|c| c.path.clone()).collect();
                (
                    "apply_patch",
                    serde_json::json!({ "paths": paths }),
                    Action::Patch { paths },
                )
            }
            "mcp_tool_call" | "web_search" => (item.kind.as_ref(), Value::Null, Action::Other),
            _ => return,
        };
        self.started.insert(item.id.clone().into_owned());
        out.push(Event::ToolUse(ToolCall {
            id: item.id.clone().into_owned(),
            name: name.to_owned(),
            input,
            action,
        }));
    }
}

/// The command a model asked for, out of the shell line Codex ran it with
/// (`/bin/bash -lc '<command>'`): what the hook saw, what the repeat hash
/// and the reports use.
pub fn unwrap_shell(line: &str) -> String {
    let rest = [
        "/bin/bash -lc ",
        "bash -lc ",
        "/bin/bash -c ",
        "bash -c ",
        "/bin/sh -c ",
        "sh -c ",
    ]
    .iter()
    .find_map(|p| line.strip_prefix(p));
    let Some(rest) = rest else {
        return line.to_owned();
    };
    // One double-quoted word (`"cat 'x'"`), with `\"`, `\\`, `\$` and
    // `` \` `` inside it.
    if let Some(inner) = rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(e @ ('"' | '\\' | '$' | '`')) => out.push(e),
                    Some(e) => {
                        out.push('\\');
                        out.push(e);
                    }
                    None => return rest.to_owned(),
                },
                // Not one quoted word after all (`"a" "b"`): keep it as it ran.
                '"' => return rest.to_owned(),
                c => out.push(c),
            }
        }
        return out;
    }
    // One single-quoted word, with `'\''` for each quote inside it.
    let Some(inner) = rest.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) else {
        return rest.to_owned();
    };
    if inner.replace("'\\''", "").contains('\'') {
        // Not one quoted word after all (`'a' 'b'`): keep it as it ran.
        return rest.to_owned();
    }
    inner.replace("'\\''", "'")
}

impl StreamParser for CodexStream {
    fn line(&mut self, line: &str, out: &mut Vec<Event>) -> Result<(), String> {
        let l: Line = serde_json::from_str(line).map_err(|e| e.to_string())?;
        match l.kind.as_ref() {
            "item.started" | "item.updated" => {
                if let Some(item) = &l.item {
                    self.tool(item, out);
                }
            }
            "item.completed" => {
                let Some(item) = l.item else { return Ok(()) };
                match item.kind.as_ref() {
                    "agent_message" => self.last_message = item.text,
                    "error" => self.errors.extend(item.message),
                    "command_execution" | "file_change" | "mcp_tool_call" | "web_search" => {
                        self.tool(&item, out);
                        let failed = item.status.as_deref() == Some("failed")
                            || item.exit_code.is_some_and(|c| c != 0);
                        out.push(Event::ToolResult {
                            id: item.id.into_owned(),
                            is_error: failed,
                        });
                    }
                    _ => {}
                }
            }
            "turn.completed" => {
                let usage = l.usage.map_or_else(Usage::default, |u| Usage {
                    input_tokens: u.input_tokens.saturating_sub(u.cached_input_tokens),
                    cache_read_input_tokens: u.cached_input_tokens.min(u.input_tokens),
                    cache_creation_input_tokens: 0,
                    output_tokens: u.output_tokens,
                });
                let text = self.last_message.take();
                // A structured answer (the critic's verdict) is the final
                // message's JSON object.
                let structured_output = text
                    .as_deref()
                    .and_then(|t| serde_json::from_str::<Value>(t.trim()).ok())
                    .filter(Value::is_object);
                out.push(Event::Result(Box::new(SessionResult {
                    completed: true,
                    terminal_reason: Some("completed".into()),
                    subtype: "turn.completed".into(),
                    usage,
                    text,
                    structured_output,
                    ..SessionResult::default()
                })));
            }
            "turn.failed" => {
                let mut errors = std::mem::take(&mut self.errors);
                errors.extend(l.error.map(|e| e.message));
                out.push(Event::Result(Box::new(SessionResult {
                    completed: false,
                    is_error: true,
                    terminal_reason: Some("turn_failed".into()),
                    subtype: "turn.failed".into(),
                    errors,
                    ..SessionResult::default()
                })));
            }
            "error" => self.errors.extend(l.message),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&str]) -> Vec<Event> {
        let mut p = CodexStream::default();
        let mut out = Vec::new();
        for l in lines {
            p.line(l, &mut out).expect("line");
        }
        out
    }

    #[test]
    fn commands_changes_and_the_turn_become_events() {
        let out = parse(&[
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'pytest -q'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'pytest -q'","aggregated_output":"1 failed","exit_code":1,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/r/a.py","kind":"update"}],"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"{\"verdict\":\"PASS\",\"violations\":[]}"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":2000,"cached_input_tokens":400,"output_tokens":100}}"#,
        ]);
        assert!(
            matches!(&out[0], Event::ToolUse(t) if t.id == "item_1" && t.action == Action::Shell { command: "pytest -q".into() })
        );
        assert!(matches!(&out[1], Event::ToolResult { id, is_error: true } if id == "item_1"));
        assert!(
            matches!(&out[2], Event::ToolUse(t) if t.action == Action::Patch { paths: vec!["/r/a.py".into()] })
        );
        assert!(matches!(
            &out[3],
            Event::ToolResult {
                is_error: false,
                ..
            }
        ));
        let Event::Result(r) = &out[4] else {
            panic!("{out:?}")
        };
        assert!(r.completed);
        assert_eq!(
            (r.usage.input_tokens, r.usage.cache_read_input_tokens),
            (1600, 400)
        );
        assert_eq!(
            r.structured_output.as_ref().expect("verdict")["verdict"],
            "PASS"
        );
    }

    #[test]
    fn the_shell_wrapper_comes_off() {
        assert_eq!(unwrap_shell("/bin/bash -lc 'pytest -q'"), "pytest -q");
        assert_eq!(
            unwrap_shell(r"/bin/bash -lc 'echo '\''hi'\'''"),
            "echo 'hi'"
        );
        assert_eq!(unwrap_shell("/bin/bash -lc ls"), "ls");
        assert_eq!(unwrap_shell("pytest -q"), "pytest -q");
        assert_eq!(unwrap_shell("/bin/bash -lc 'a' 'b'"), "'a' 'b'");
        // As Codex 0.171 prints a command with a single quote inside.
        assert_eq!(
            unwrap_shell(r#"/bin/bash -c "cat '/r/x.py' && echo \"\$HOME\"""#),
            r#"cat '/r/x.py' && echo "$HOME""#
        );
        assert_eq!(unwrap_shell(r#"/bin/bash -c "a" "b""#), r#""a" "b""#);
    }

    #[test]
    fn a_failed_turn_is_not_completed() {
        let out = parse(&[
            r#"{"type":"error","message":"stream disconnected"}"#,
            r#"{"type":"turn.failed","error":{"message":"unexpected status 400"}}"#,
        ]);
        let Event::Result(r) = &out[0] else { panic!() };
        assert!(!r.completed && r.is_error);
        assert!(
            r.error_text().contains("unexpected status 400"),
            "{}",
            r.error_text()
        );
    }
}
