//! loopd's own language for what an agent session does, whatever the CLI:
//! model calls and their usage, tool calls as *canonical* actions (read,
//! write, edit, patch, shell, other), their results, denials, and how the
//! session ended. Each agent module parses its CLI's stream into these
//! ([`StreamParser`]); the guards, the hook policy, the tamper checks and
//! the journal read nothing else, so the same stuck detection, progress
//! guard and tamper policy apply to every agent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token counts of a model call (or a session), in loopd's terms: plain
/// input, cache writes, cache reads, output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Input tokens of every kind (plain, cache write, cache read).
    pub fn all_input(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

/// What a tool call does, as the policy judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Read {
        path: String,
    },
    /// Create or overwrite a file.
    Write {
        path: String,
    },
    /// Change part of a file.
    Edit {
        path: String,
    },
    /// A patch over several files (added, updated, deleted, moved).
    Patch {
        paths: Vec<String>,
    },
    /// A shell command.
    Shell {
        command: String,
    },
    Other,
}

/// One tool call, canonical: the CLI's own name and input (for the
/// journal and the repeat hash) and what it does.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
    pub action: Action,
}

impl ToolCall {
    /// Does it change files (or may, as a shell command)?
    pub fn mutating(&self) -> bool {
        !matches!(self.action, Action::Read { .. } | Action::Other)
    }

    /// The shell command, for a shell call.
    pub fn command(&self) -> Option<&str> {
        match &self.action {
            Action::Shell { command } => Some(command),
            _ => None,
        }
    }

    /// What the call works on, for people: a path or the command.
    pub fn target(&self) -> Option<&str> {
        match &self.action {
            Action::Read { path } | Action::Write { path } | Action::Edit { path } => Some(path),
            Action::Patch { paths } => paths.first().map(String::as_str),
            Action::Shell { command } => Some(command),
            Action::Other => None,
        }
    }
}

/// How a session ended, as its CLI reported it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionResult {
    /// It ended the way a finished session ends (not an error, not a
    /// limit, not an interruption).
    pub completed: bool,
    pub is_error: bool,
    /// Why it ended, in the CLI's words (`completed`, `max_turns`,
    /// `budget_exhausted`, `api_error`, ...).
    pub terminal_reason: Option<String>,
    pub subtype: String,
    pub num_turns: u64,
    /// The CLI's own cost accounting, when it has one.
    pub total_cost_usd: Option<f64>,
    pub usage: Usage,
    /// The final answer's text.
    pub text: Option<String>,
    /// A structured answer (the critic's verdict object).
    pub structured_output: Option<Value>,
    pub errors: Vec<String>,
    pub api_error_status: Option<i64>,
    /// Tool calls the CLI itself refused (by id).
    pub denied: Vec<String>,
}

impl SessionResult {
    /// A one-line description of what went wrong, for reports.
    pub fn error_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = &self.terminal_reason {
            parts.push(format!("terminal_reason={r}"));
        }
        if !self.subtype.is_empty() {
            parts.push(format!("subtype={}", self.subtype));
        }
        if let Some(s) = self.api_error_status {
            parts.push(format!("api_error_status={s}"));
        }
        if !self.errors.is_empty() {
            parts.push(self.errors.join("; "));
        } else if let Some(r) = &self.text {
            parts.push(r.chars().take(300).collect());
        }
        parts.join(", ")
    }
}

/// One thing a session did, in loopd's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A model call began; `usage` is what is known of it so far (input).
    CallStarted {
        id: String,
        model: String,
        usage: Usage,
    },
    /// The call's output so far (cumulative).
    CallOutput {
        output_tokens: u64,
    },
    /// The call ended.
    CallEnded,
    ToolUse(ToolCall),
    ToolResult {
        id: String,
        is_error: bool,
    },
    /// The CLI refused a tool call (its permissions).
    ToolDenied {
        id: String,
    },
    /// The session's end.
    Result(Box<SessionResult>),
}

/// Turns one CLI's output lines into [`Event`]s. Stateful: a CLI may say
/// in one line what the next completes.
pub trait StreamParser: Send {
    /// Parse one line, appending what it says to `out` (nothing, for a line
    /// loopd does not act on). `Err` for a line that is not the CLI's JSON.
    fn line(&mut self, line: &str, out: &mut Vec<Event>) -> Result<(), String>;
}
