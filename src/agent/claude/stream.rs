//! The stream of `claude -p --output-format stream-json --verbose
//! --include-partial-messages`, one JSON object per line, parsed into its
//! own typed events and turned into loopd's ([`ClaudeStream`]).
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

pub use crate::agent::events::Usage;
use crate::agent::events::{self as canon, SessionResult, StreamParser};

/// One line of the stream.
#[derive(Debug, Clone)]
pub enum Event {
    System(SystemEvent),
    Assistant(AssistantEvent),
    User(UserEvent),
    StreamEvent(PartialEvent),
    Result(Box<ResultEvent>),
    Unknown,
}

/// Just the `type` of a line; every other field is skipped without being
/// materialized.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// Parse one line of the stream.
///
/// This is the hot path of ingest. Rather than an internally tagged enum
/// (which buffers the whole object, every string allocated, before choosing
/// a variant), the `type` is read first and the line is then parsed straight
/// into the one struct it names, skipping fields loopd does not use.
pub fn parse_line(line: &str) -> Result<Event, serde_json::Error> {
    let kind = match compact_type(line) {
        Some(kind) => std::borrow::Cow::Borrowed(kind),
        None => match serde_json::from_str::<Head>(line)?.kind {
            Some(kind) => kind,
            None => return Ok(Event::Unknown),
        },
    };
    Ok(match kind.as_ref() {
        "system" => Event::System(serde_json::from_str(line)?),
        "assistant" => Event::Assistant(serde_json::from_str(line)?),
        "user" => Event::User(serde_json::from_str(line)?),
        "stream_event" => {
            // Most lines of a stream are content deltas, which loopd does not
            // read. In compact JSON, `"type":"message_` can only be structure
            // (inside a string the quotes would be escaped), so a line
            // without it cannot be message_start/delta/stop.
            if compact_type(line).is_some() && !line.contains(r#""type":"message_"#) {
                Event::StreamEvent(PartialEvent {
                    event: ApiEvent::Other,
                    parent_tool_use_id: None,
                })
            } else {
                Event::StreamEvent(serde_json::from_str(line)?)
            }
        }
        "result" => Event::Result(Box::new(serde_json::from_str(line)?)),
        _ => Event::Unknown,
    })
}

/// The `type` of a compact line that starts with it (the CLI writes
/// `JSON.stringify` output: `{"type":"...",...}`), without parsing the line.
fn compact_type(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(r#"{"type":""#)?;
    let end = rest.find('"')?;
    let kind = &rest[..end];
    (!kind.contains('\\')).then_some(kind)
}

/// The `type` of a line, for logging events loopd does not know.
pub fn type_of(line: &str) -> String {
    serde_json::from_str::<Head>(line)
        .ok()
        .and_then(|h| h.kind.map(|k| k.into_owned()))
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
#[serde(from = "RawBlock")]
pub enum AssistantBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    Other,
}

/// The flat shape of any content block; see [`parse_line`] for why flat.
#[derive(Deserialize)]
struct RawBlock {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

impl From<RawBlock> for AssistantBlock {
    fn from(b: RawBlock) -> Self {
        match (b.kind.as_str(), b.text, b.id, b.name) {
            ("text", Some(text), _, _) => AssistantBlock::Text { text },
            ("tool_use", _, Some(id), Some(name)) => AssistantBlock::ToolUse {
                id,
                name,
                input: b.input.unwrap_or(Value::Null),
            },
            _ => AssistantBlock::Other,
        }
    }
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

/// A user message's content: a string, or blocks. Deserialized by hand:
/// `#[serde(untagged)]` would buffer the whole content (every tool
/// result's text) before choosing, the dearest part of ingest.
#[derive(Debug, Clone)]
pub enum UserContent {
    Text(String),
    Blocks(Vec<UserBlock>),
}

impl<'de> Deserialize<'de> for UserContent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Content;
        impl<'de> serde::de::Visitor<'de> for Content {
            type Value = UserContent;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a list of content blocks")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<UserContent, E> {
                Ok(UserContent::Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<UserContent, E> {
                Ok(UserContent::Text(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<UserContent, A::Error> {
                let mut blocks = Vec::new();
                while let Some(b) = seq.next_element::<UserBlock>()? {
                    blocks.push(b);
                }
                Ok(UserContent::Blocks(blocks))
            }
        }
        d.deserialize_any(Content)
    }
}

impl Default for UserContent {
    fn default() -> Self {
        UserContent::Blocks(Vec::new())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RawUserBlock")]
pub enum UserBlock {
    ToolResult {
        tool_use_id: String,
        is_error: Option<bool>,
    },
    Other,
}

/// A user content block; the (possibly large) `content` is skipped.
#[derive(Deserialize)]
struct RawUserBlock {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    is_error: Option<bool>,
}

impl From<RawUserBlock> for UserBlock {
    fn from(b: RawUserBlock) -> Self {
        match (b.kind.as_str(), b.tool_use_id) {
            ("tool_result", Some(tool_use_id)) => UserBlock::ToolResult {
                tool_use_id,
                is_error: b.is_error,
            },
            _ => UserBlock::Other,
        }
    }
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
#[serde(from = "RawApiEvent")]
pub enum ApiEvent {
    MessageStart { message: ApiMessage },
    MessageDelta { usage: Usage },
    MessageStop,
    Other,
}

/// The flat shape of an SSE event: read in one pass. An internally tagged
/// enum would buffer the whole event first (its `type` comes after
/// `message` in the CLI's lines), which made these small lines the
/// dearest per byte of ingest.
#[derive(Deserialize)]
struct RawApiEvent {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: Option<ApiMessage>,
    #[serde(default)]
    usage: Option<Usage>,
}

impl From<RawApiEvent> for ApiEvent {
    fn from(e: RawApiEvent) -> Self {
        match (e.kind.as_str(), e.message) {
            ("message_start", Some(message)) => ApiEvent::MessageStart { message },
            ("message_delta", _) => ApiEvent::MessageDelta {
                usage: e.usage.unwrap_or_default(),
            },
            ("message_stop", _) => ApiEvent::MessageStop,
            _ => ApiEvent::Other,
        }
    }
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

impl ResultEvent {
    /// The session's end in loopd's terms.
    pub fn to_result(&self) -> SessionResult {
        SessionResult {
            completed: self.completed(),
            is_error: self.is_error,
            terminal_reason: self.terminal_reason.clone(),
            subtype: self.subtype.clone(),
            num_turns: self.num_turns,
            total_cost_usd: Some(self.total_cost_usd),
            usage: self.usage,
            text: self.result.clone(),
            structured_output: self.structured_output.clone(),
            errors: self.errors.clone(),
            api_error_status: self.api_error_status,
            denied: self
                .permission_denials
                .iter()
                .map(|d| d.tool_use_id.clone())
                .collect(),
        }
    }
}

/// Claude Code's stream, turned into loopd's events.
#[derive(Debug, Default)]
pub struct ClaudeStream;

impl StreamParser for ClaudeStream {
    fn line(&mut self, line: &str, out: &mut Vec<canon::Event>) -> Result<(), String> {
        let event = match parse_line(line) {
            Ok(e) => e,
            Err(e) => return Err(e.to_string()),
        };
        match event {
            Event::StreamEvent(p) => match p.event {
                ApiEvent::MessageStart { message } => out.push(canon::Event::CallStarted {
                    id: message.id,
                    model: message.model,
                    usage: Usage {
                        output_tokens: 0,
                        ..message.usage
                    },
                }),
                ApiEvent::MessageDelta { usage } => out.push(canon::Event::CallOutput {
                    output_tokens: usage.output_tokens,
                }),
                ApiEvent::MessageStop => out.push(canon::Event::CallEnded),
                ApiEvent::Other => {}
            },
            Event::Assistant(a) => {
                for block in a.message.content {
                    if let AssistantBlock::ToolUse { id, name, input } = block {
                        out.push(canon::Event::ToolUse(super::tool_call(id, name, input)));
                    }
                }
            }
            Event::User(u) => {
                for (id, is_error) in u.tool_results() {
                    out.push(canon::Event::ToolResult {
                        id: id.to_owned(),
                        is_error,
                    });
                }
            }
            Event::System(s) if s.subtype == "permission_denied" => {
                if let Some(id) = s.tool_use_id {
                    out.push(canon::Event::ToolDenied { id });
                }
            }
            Event::Result(r) => {
                for d in &r.permission_denials {
                    out.push(canon::Event::ToolDenied {
                        id: d.tool_use_id.clone(),
                    });
                }
                out.push(canon::Event::Result(Box::new(r.to_result())));
            }
            Event::System(_) | Event::Unknown => {
                tracing::trace!(kind = %type_of(line), "stream event loopd does not act on");
            }
        }
        Ok(())
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
        // A delta whose text mentions the pattern is still just a delta (the
        // quotes inside a JSON string are escaped).
        let tricky = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"\"type\":\"message_delta\""}}}"#;
        assert!(matches!(
            parse_line(tricky).expect("partial"),
            Event::StreamEvent(PartialEvent {
                event: ApiEvent::Other,
                ..
            })
        ));
        // Spaced (non-compact) JSON takes the full parse and still works.
        let spaced = r#"{ "type": "stream_event", "event": { "type": "message_delta", "usage": { "output_tokens": 5 } } }"#;
        assert!(
            matches!(parse_line(spaced).expect("partial"), Event::StreamEvent(PartialEvent { event: ApiEvent::MessageDelta { usage }, .. }) if usage.output_tokens == 5)
        );
        // The real CLI puts other keys first inside `event`.
        let reordered = r#"{"type":"stream_event","event":{"delta":{"stop_reason":"tool_use"},"type":"message_delta","usage":{"output_tokens":600}}}"#;
        assert!(
            matches!(parse_line(reordered).expect("partial"), Event::StreamEvent(PartialEvent { event: ApiEvent::MessageDelta { usage }, .. }) if usage.output_tokens == 600)
        );
        assert!(matches!(
            parse_line(other).expect("partial"),
            Event::StreamEvent(PartialEvent {
                event: ApiEvent::Other,
                ..
            })
        ));
    }
}
