//! Typed events of `claude -p --output-format stream-json --verbose
//! --include-partial-messages`, one JSON object per line.
//!
//! Only what loopd acts on is typed; unknown event types and unknown fields
//! are tolerated (the CLI adds fields between versions). The facts relied on
//! are in CLAUDE_CLI.md §1: assistant events come one per content block and
//! their `usage` is stale, so live token accounting reads the partial
//! `message_start` / `message_delta` stream events; the `result` event is the
//! authority on cost, turns and tokens.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// One line of the stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    System(SystemEvent),
    Assistant(AssistantEvent),
    User(UserEvent),
    StreamEvent(PartialEvent),
    Result(Box<ResultEvent>),
    #[serde(other)]
    Unknown,
}

/// Parse one line of the stream.
pub fn parse_line(line: &str) -> Result<Event, serde_json::Error> {
    serde_json::from_str(line)
}

/// The `type` of a line, for logging events loopd does not know.
pub fn type_of(line: &str) -> String {
    #[derive(Deserialize)]
    struct Tag {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_str::<Tag>(line)
        .ok()
        .and_then(|t| t.kind)
        .unwrap_or_else(|| "<none>".into())
}

#[derive(Debug, Clone, Deserialize)]
pub struct SystemEvent {
    pub subtype: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub error_status: Option<i64>,
    #[serde(default)]
    pub attempt: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AssistantEvent {
    pub message: AssistantMessage,
    #[serde(default)]
    pub parent_tool_use_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AssistantMessage {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub content: Vec<AssistantBlock>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AssistantBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Deserialize)]
pub struct UserEvent {
    pub message: UserMessage,
}

#[derive(Debug, Clone, Deserialize)]
pub struct UserMessage {
    #[serde(default)]
    pub content: UserContent,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum UserContent {
    Text(String),
    Blocks(Vec<UserBlock>),
}

impl Default for UserContent {
    fn default() -> Self {
        UserContent::Blocks(Vec::new())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UserBlock {
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        is_error: Option<bool>,
    },
    #[serde(other)]
    Other,
}

impl UserEvent {
    /// The tool results this event carries: `(tool_use_id, is_error)`.
    pub fn tool_results(&self) -> impl Iterator<Item = (&str, bool)> {
        let blocks: &[UserBlock] = match &self.message.content {
            UserContent::Blocks(b) => b,
            UserContent::Text(_) => &[],
        };
        blocks.iter().filter_map(|b| match b {
            UserBlock::ToolResult {
                tool_use_id,
                is_error,
            } => Some((tool_use_id.as_str(), is_error.unwrap_or(false))),
            UserBlock::Other => None,
        })
    }
}

/// A raw Messages API SSE event, present with `--include-partial-messages`.
#[derive(Debug, Clone, Deserialize)]
pub struct PartialEvent {
    pub event: ApiEvent,
    #[serde(default)]
    pub parent_tool_use_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ApiEvent {
    MessageStart {
        message: ApiMessage,
    },
    MessageDelta {
        #[serde(default)]
        usage: Usage,
    },
    MessageStop,
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ApiMessage {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub usage: Usage,
}

/// Token counts as the API and the CLI report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
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

/// The last line of a session: the authority on cost, turns and tokens.
#[derive(Debug, Clone, Deserialize)]
pub struct ResultEvent {
    #[serde(default)]
    pub subtype: String,
    #[serde(default)]
    pub is_error: bool,
    /// Present on success results; error results carry `errors` instead.
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub errors: Vec<String>,
    #[serde(default)]
    pub num_turns: u64,
    #[serde(default)]
    pub total_cost_usd: f64,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub terminal_reason: Option<String>,
    #[serde(default)]
    pub api_error_status: Option<i64>,
    #[serde(default)]
    pub structured_output: Option<Value>,
    #[serde(default)]
    pub permission_denials: Vec<Denial>,
    #[serde(default, rename = "modelUsage")]
    pub model_usage: BTreeMap<String, ModelUsage>,
    #[serde(default)]
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Denial {
    pub tool_name: String,
    #[serde(default)]
    pub tool_use_id: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ModelUsage {
    #[serde(default, rename = "inputTokens")]
    pub input_tokens: u64,
    #[serde(default, rename = "outputTokens")]
    pub output_tokens: u64,
    #[serde(default, rename = "costUSD")]
    pub cost_usd: f64,
}

impl ResultEvent {
    /// Did the session end the way a finished session ends? Judged by
    /// `is_error` and `terminal_reason`, never by the exit code: a SIGINT'd
    /// session exits 0, an API error is a `success` subtype with `is_error`.
    pub fn completed(&self) -> bool {
        !self.is_error
            && self
                .terminal_reason
                .as_deref()
                .is_none_or(|r| r == "completed")
    }

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
        } else if let Some(r) = &self.result {
            parts.push(r.chars().take(300).collect());
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_shapes() {
        let tool = r#"{"type":"assistant","message":{"id":"msg_3","model":"m","content":[{"type":"tool_use","id":"toolu_01","name":"Bash","input":{"command":"echo hello > out.txt","description":"write"}}],"stop_reason":null},"parent_tool_use_id":null,"session_id":"s","uuid":"u"}"#;
        match parse_line(tool).expect("assistant") {
            Event::Assistant(a) => match &a.message.content[0] {
                AssistantBlock::ToolUse { name, input, .. } => {
                    assert_eq!(name, "Bash");
                    assert_eq!(input["command"], "echo hello > out.txt");
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        let result = r#"{"type":"user","message":{"content":[{"tool_use_id":"toolu_a1","type":"tool_result","content":"one","is_error":true}]},"tool_use_result":{"stdout":"one"}}"#;
        match parse_line(result).expect("user") {
            Event::User(u) => {
                assert_eq!(u.tool_results().collect::<Vec<_>>(), [("toolu_a1", true)])
            }
            other => panic!("{other:?}"),
        }
        let injected = r#"{"type":"user","message":{"role":"user","content":"[Request interrupted by user]"}}"#;
        assert!(matches!(
            parse_line(injected).expect("user text"),
            Event::User(_)
        ));
        let res = r#"{"type":"result","subtype":"success","is_error":false,"result":"PASS","num_turns":2,"stop_reason":"end_turn","terminal_reason":"completed","duration_ms":220,"total_cost_usd":0.0016,"usage":{"input_tokens":200,"output_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"claude-opus-5-5":{"inputTokens":200,"outputTokens":40,"costUSD":0.0016}},"permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_01","tool_input":{}}]}"#;
        match parse_line(res).expect("result") {
            Event::Result(r) => {
                assert!(r.completed());
                assert_eq!(r.num_turns, 2);
                assert_eq!(r.usage.output_tokens, 40);
                assert_eq!(r.permission_denials[0].tool_name, "Bash");
                assert!((r.model_usage["claude-opus-5-5"].cost_usd - 0.0016).abs() < 1e-12);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_results_are_not_completed() {
        let api = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","result":"API Error: 400 mock bad request","api_error_status":400}"#;
        let Event::Result(r) = parse_line(api).expect("result") else {
            panic!()
        };
        assert!(!r.completed());
        assert!(r.error_text().contains("api_error_status=400"));
        let sigint = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"terminal_reason":"aborted_tools","errors":["[ede_diagnostic] x"]}"#;
        let Event::Result(r) = parse_line(sigint).expect("result") else {
            panic!()
        };
        assert!(!r.completed());
    }

    #[test]
    fn unknown_events_and_blocks_are_tolerated() {
        assert!(matches!(
            parse_line(r#"{"type":"brand_new","x":1}"#).expect("unknown"),
            Event::Unknown
        ));
        assert_eq!(type_of(r#"{"type":"brand_new","x":1}"#), "brand_new");
        let thinking = r#"{"type":"assistant","message":{"id":"m","content":[{"type":"thinking","thinking":"hm","signature":"s"}]}}"#;
        let Event::Assistant(a) = parse_line(thinking).expect("assistant") else {
            panic!()
        };
        assert!(matches!(a.message.content[0], AssistantBlock::Other));
        let partial = r#"{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":77}}}"#;
        let Event::StreamEvent(p) = parse_line(partial).expect("partial") else {
            panic!()
        };
        assert!(matches!(p.event, ApiEvent::MessageDelta { usage } if usage.output_tokens == 77));
        let other = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}}"#;
        assert!(matches!(
            parse_line(other).expect("partial"),
            Event::StreamEvent(PartialEvent {
                event: ApiEvent::Other,
                ..
            })
        ));
    }
}
