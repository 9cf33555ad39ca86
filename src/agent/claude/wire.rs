//! The Anthropic Messages API as loopd's gateway speaks it: the endpoints it
//! forwards, what a call asks for (read from its body before it goes
//! upstream), its usage as the answer streams past, and the headers that
//! reach upstream.
//!
//! Everything here reads bytes an agent process wrote (a request) or that
//! pass on its behalf (a response); it is fuzzed (`tests/fuzz.rs`).

use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::OAUTH_BETA;
use crate::agent::events::Usage;
use crate::agent::gateway::json::{contains, find_object, top_level_value};
use crate::agent::gateway::media;
use crate::agent::gateway::spend::{Ask, INPUT_MARGIN};
use crate::agent::gateway::target::{Endpoint, Kind};
use crate::agent::gateway::{Credential, Meter, Reading, Wire};

/// What the gateway forwards for Claude Code: model calls and token
/// counting, with or without the CLI's `?beta=true`. Nothing else.
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        method: "POST",
        path: "/v1/messages",
        queries: &["", "beta=true"],
        kind: Kind::Call,
    },
    Endpoint {
        method: "POST",
        path: "/v1/messages/count_tokens",
        queries: &["", "beta=true"],
        kind: Kind::Free,
    },
];

/// Tool types the model may call that run on the client (the CLI): every
/// other `type` is a server tool that reaches the network from the
/// provider's side and is billed outside the usage loopd meters.
const CLIENT_TOOL_TYPES: &[&str] = &["custom", "bash_", "text_editor_", "computer_", "memory_"];

/// Request headers passed upstream; every other header is dropped.
const FORWARDED: &[&str] = &[
    "content-type",
    "accept",
    "anthropic-version",
    "anthropic-beta",
    "user-agent",
    "x-app",
    "x-claude-code-session-id",
];

/// The Messages API.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anthropic;

#[derive(Deserialize)]
struct CallBody {
    model: String,
    /// Required of a call; a token count has none.
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    tools: Vec<ToolHead>,
    #[serde(default)]
    mcp_servers: Option<IgnoredAny>,
    #[serde(default)]
    container: Option<IgnoredAny>,
    #[serde(default)]
    thinking: Option<Thinking>,
}

#[derive(Deserialize)]
struct ToolHead {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct Thinking {
    #[serde(default)]
    budget_tokens: Option<u64>,
}

impl Anthropic {
    /// Read and check a `/v1/messages` body.
    pub fn read_call(body: &[u8]) -> Result<(Ask, u64), String> {
        let (b, deep) = Anthropic::read_body(body)?;
        let Some(max_tokens) = b.max_tokens else {
            return Err("a model call without `max_tokens` cannot be capped: refused".into());
        };
        if max_tokens == 0 {
            return Err("`max_tokens` must be at least 1".into());
        }
        let thinking = b.thinking.and_then(|t| t.budget_tokens).unwrap_or(0);
        Ok((
            Ask {
                model: b.model,
                max_tokens,
                // The bytes bound the text; images and documents are
                // billed by their pixels and pages, on top.
                input_bound: (body.len() as u64)
                    .saturating_add(INPUT_MARGIN)
                    .saturating_add(deep.as_ref().map_or(0, media::claude_tokens)),
            },
            thinking,
        ))
    }

    /// Read a Messages API body (a call's or a token count's) and refuse
    /// what reaches the network or is billed from the provider's side.
    /// The body's whole JSON comes back too when its content blocks needed
    /// a look ([`deep`]).
    fn read_body(body: &[u8]) -> Result<(CallBody, Option<Value>), String> {
        let b: CallBody = serde_json::from_slice(body).map_err(|e| {
            format!("the request body is not a Messages API request loopd can meter: {e}")
        })?;
        if b.mcp_servers.is_some() {
            return Err("`mcp_servers` makes the provider connect to servers on the caller's behalf: refused".into());
        }
        if b.container.is_some() {
            return Err("`container` runs code on the provider's side, billed outside the metered usage: refused".into());
        }
        if let Some(kind) = b.tools.iter().filter_map(|t| t.kind.as_deref()).find(|k| {
            !CLIENT_TOOL_TYPES
                .iter()
                .any(|c| k == c || (c.ends_with('_') && k.starts_with(c)))
        }) {
            return Err(format!("the server tool `{kind}` reaches the network from the provider's side and is billed outside the metered usage: refused"));
        }
        let deep = deep(body);
        if let Some(why) = deep.as_ref().and_then(remote_content) {
            return Err(why);
        }
        Ok((b, deep))
    }
}

/// The whole body as JSON, when its content blocks need a look: only a
/// body that could hold a `source`, an image or a document is parsed whole
/// (an escaped key could spell any of them).
fn deep(body: &[u8]) -> Option<Value> {
    if !contains(body, b"\"source\"") && !media::may_hold_media(body, media::CLAUDE_NAMES) {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// An image or document block whose content the provider fetches (`url`)
/// or holds (`file`): it reaches the network from the provider's side, and
/// costs input tokens the request's size does not bound. Only content in
/// the request itself (`base64`, `text`, `content`) goes through.
fn remote_content(value: &Value) -> Option<String> {
    find_object(value, &|m| {
        let source = m.get("source")?.as_object()?;
        let kind = source.get("type").and_then(|t| t.as_str()).unwrap_or("");
        (!matches!(kind, "base64" | "text" | "content")).then(|| {
            format!("a content block with a `{kind}` source makes the provider fetch or read content loopd cannot see or bound: refused")
        })
    })
}

impl Wire for Anthropic {
    fn endpoints(&self) -> &'static [Endpoint] {
        ENDPOINTS
    }

    fn ask(&self, body: &[u8]) -> Result<Ask, String> {
        Anthropic::read_call(body).map(|(ask, _)| ask)
    }

    fn check_free(&self, body: &[u8]) -> Result<(), String> {
        // A token count is free, but its body reaches the provider like a
        // call's: the same refusals (a URL image, a file id, `mcp_servers`,
        // a server tool make the provider fetch or connect).
        Anthropic::read_body(body).map(|_| ())
    }

    fn min_output(&self, body: &[u8]) -> u64 {
        // Extended thinking needs `max_tokens` above its budget.
        Anthropic::read_call(body).map_or(0, |(_, thinking)| thinking.saturating_add(1))
    }

    fn with_max_tokens(&self, body: &[u8], max_tokens: u64) -> Option<Vec<u8>> {
        let span = top_level_value(body, "max_tokens")?;
        let mut out = Vec::with_capacity(body.len());
        out.extend_from_slice(&body[..span.start]);
        out.extend_from_slice(max_tokens.to_string().as_bytes());
        out.extend_from_slice(&body[span.end..]);
        // Read back as upstream will: exactly this bound, or nothing.
        match Anthropic::read_call(&out) {
            Ok((ask, _)) if ask.max_tokens == max_tokens => Some(out),
            _ => None,
        }
    }

    fn meter(&self, streaming: bool, requested_model: &str) -> Box<dyn Meter + Send> {
        Box::new(MessagesMeter::new(streaming, requested_model.to_owned()))
    }

    fn upstream_headers(&self, from: &HeaderMap, credential: &Credential) -> HeaderMap {
        let mut out = HeaderMap::with_capacity(FORWARDED.len() + 2);
        for (name, value) in from {
            if FORWARDED.contains(&name.as_str()) || name.as_str().starts_with("x-stainless-") {
                out.append(name.clone(), value.clone());
            }
        }
        match credential {
            Credential::ApiKey(k) => {
                if let Ok(v) = HeaderValue::from_str(k) {
                    out.insert(HeaderName::from_static("x-api-key"), v);
                }
            }
            Credential::Bearer(t) => {
                if let Ok(v) = HeaderValue::from_str(&format!("Bearer {t}")) {
                    out.insert(hyper::header::AUTHORIZATION, v);
                }
            }
            Credential::OAuth(t) => {
                if let Ok(v) = HeaderValue::from_str(&format!("Bearer {t}")) {
                    out.insert(hyper::header::AUTHORIZATION, v);
                }
                let mut beta = out
                    .get_all("anthropic-beta")
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .flat_map(|v| v.split(','))
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
                    .collect::<Vec<_>>();
                if !beta.iter().any(|b| b == OAUTH_BETA) {
                    beta.push(OAUTH_BETA.to_owned());
                }
                if let Ok(v) = HeaderValue::from_str(&beta.join(",")) {
                    out.insert(HeaderName::from_static("anthropic-beta"), v);
                }
            }
        }
        out
    }

    fn error_body(&self, kind: &str, message: &str) -> Bytes {
        let body =
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
        Bytes::from(body.to_string())
    }
}

/// Reads the usage of one Messages API response as it passes.
pub struct MessagesMeter {
    streaming: bool,
    /// The SSE line being assembled (bounded: a longer line is not usage).
    line: Vec<u8>,
    line_overflow: bool,
    /// The current SSE event's name (`event:` line).
    event: Vec<u8>,
    /// A non-streaming body, kept for its `usage`.
    body: Vec<u8>,
    body_overflow: bool,
    model: String,
    message_id: String,
    usage: Usage,
    started: bool,
    complete: bool,
}

/// The longest SSE line and non-streamed body read for usage.
const MAX_LINE: usize = 1 << 20;
const MAX_BODY: usize = 16 << 20;

impl MessagesMeter {
    pub fn new(streaming: bool, requested_model: String) -> MessagesMeter {
        MessagesMeter {
            streaming,
            line: Vec::new(),
            line_overflow: false,
            event: Vec::new(),
            body: Vec::new(),
            body_overflow: false,
            model: requested_model,
            message_id: String::new(),
            usage: Usage::default(),
            started: false,
            complete: false,
        }
    }

    fn on_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.event.clear();
        } else if let Some(name) = line.strip_prefix(b"event:") {
            self.event.clear();
            self.event.extend_from_slice(name.trim_ascii());
        } else if let Some(data) = line.strip_prefix(b"data:") {
            // Only the events that carry usage are parsed: the content
            // deltas (nearly all the bytes) pass untouched.
            let wanted = match self.event.as_slice() {
                b"message_start" | b"message_delta" | b"message_stop" => true,
                b"" => {
                    contains(data, b"\"message_start\"")
                        || contains(data, b"\"message_delta\"")
                        || contains(data, b"\"message_stop\"")
                }
                _ => false,
            };
            if wanted {
                if let Ok(ev) = serde_json::from_slice::<SseData>(data.trim_ascii()) {
                    self.on_event(ev);
                }
            }
        }
    }

    fn on_event(&mut self, ev: SseData) {
        match ev {
            SseData::MessageStart { message } => {
                if !message.model.is_empty() {
                    self.model = message.model;
                }
                self.message_id = message.id;
                self.started = true;
                self.take_usage(&message.usage);
            }
            SseData::MessageDelta { usage } => {
                if let Some(u) = usage {
                    self.take_usage(&u);
                    // The delta's usage is the response's final count.
                    self.complete = self.started;
                }
            }
            SseData::MessageStop {} => {}
        }
    }

    /// Counts are cumulative across a response's events: keep the largest.
    fn take_usage(&mut self, u: &Usage) {
        self.usage.input_tokens = self.usage.input_tokens.max(u.input_tokens);
        self.usage.output_tokens = self.usage.output_tokens.max(u.output_tokens);
        self.usage.cache_creation_input_tokens = self
            .usage
            .cache_creation_input_tokens
            .max(u.cache_creation_input_tokens);
        self.usage.cache_read_input_tokens = self
            .usage
            .cache_read_input_tokens
            .max(u.cache_read_input_tokens);
    }
}

impl Meter for MessagesMeter {
    fn feed(&mut self, chunk: &[u8]) {
        if !self.streaming {
            if self.body.len() + chunk.len() <= MAX_BODY {
                self.body.extend_from_slice(chunk);
            } else {
                self.body_overflow = true;
            }
            return;
        }
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            if self.line.is_empty() && !self.line_overflow {
                self.on_line(&rest[..i]);
            } else {
                if !self.line_overflow {
                    self.line.extend_from_slice(&rest[..i]);
                    let line = std::mem::take(&mut self.line);
                    self.on_line(&line);
                }
                self.line.clear();
                self.line_overflow = false;
            }
            rest = &rest[i + 1..];
        }
        if self.line.len() + rest.len() > MAX_LINE {
            self.line.clear();
            self.line_overflow = true;
        } else if !self.line_overflow {
            self.line.extend_from_slice(rest);
        }
    }

    fn reading(&self) -> Reading {
        let mut model = self.model.clone();
        let mut message_id = self.message_id.clone();
        let mut usage = self.usage;
        let mut started = self.started;
        let mut complete = self.complete;
        if !self.streaming && !self.body_overflow {
            if let Ok(msg) = serde_json::from_slice::<WholeMessage>(&self.body) {
                if !msg.model.is_empty() {
                    model = msg.model;
                }
                message_id = msg.id;
                if let Some(u) = msg.usage {
                    usage = u;
                    started = true;
                    complete = true;
                }
            }
        }
        Reading {
            model,
            message_id,
            usage,
            started,
            complete,
        }
    }
}

/// The usage-carrying events, named as the API names them.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)]
enum SseData {
    MessageStart {
        message: MessageHead,
    },
    MessageDelta {
        #[serde(default)]
        usage: Option<Usage>,
    },
    MessageStop {},
}

#[derive(Deserialize)]
struct MessageHead {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    usage: Usage,
}

#[derive(Deserialize)]
struct WholeMessage {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    usage: Option<Usage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_the_provider_fetches_is_refused() {
        let body = |block: &str| {
            format!(
                r#"{{"model":"claude-haiku-5-5","max_tokens":10,"messages":[{{"role":"user","content":[{block}]}}]}}"#
            )
        };
        for bad in [
            r#"{"type":"image","source":{"type":"url","url":"https://exfil.example/S.png"}}"#,
            r#"{"type":"document","source":{"type":"url","url":"https://exfil.example/S.pdf"}}"#,
            r#"{"type":"image","source":{"type":"file","file_id":"file_1"}}"#,
            r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}"#,
            r#"{"type":"image","\u0073ource":{"type":"url","url":"https://exfil.example/S.png"}}"#,
        ] {
            assert!(Anthropic::read_call(body(bad).as_bytes()).is_err(), "{bad}");
        }
        for good in [
            r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}"#,
            r#"{"type":"tool_use","id":"t","name":"WebFetch","input":{"url":"https://example.com"}}"#,
            r#"{"type":"document","source":{"type":"text","media_type":"text/plain","data":"hi"}}"#,
        ] {
            assert!(
                Anthropic::read_call(body(good).as_bytes()).is_ok(),
                "{good}"
            );
        }
    }

    /// Issue 39, finding 8: a PNG of a few dozen bytes that declares
    /// 1568x1568 pixels is billed thousands of tokens; the input bound
    /// counts each image by its pixels, wherever it sits.
    #[test]
    fn small_images_of_many_pixels_are_reserved_by_their_pixels() {
        use crate::agent::gateway::media::{header::Dimensions, price, tests::png};
        let image = serde_json::json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(1568, 1568)}});
        let n = 20;
        let body = serde_json::json!({
            "model": "claude-opus-5-5", "max_tokens": 100,
            "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": vec![image.clone(); n / 2]},
            ]}, {"role": "user", "content": vec![image; n / 2]}]
        })
        .to_string();
        let per_image = price::claude_image(Dimensions {
            width: 1568,
            height: 1568,
        });
        assert!(per_image > 1600, "{per_image}");
        let ask = Anthropic.ask(body.as_bytes()).expect("ask");
        assert!(
            ask.input_bound >= n as u64 * per_image + body.len() as u64,
            "{} < {n} x {per_image}",
            ask.input_bound
        );
        // Escaped names are the same names.
        let escaped = body.replacen("\"type\":\"image\"", "\"type\":\"\\u0069mage\"", 1);
        assert_ne!(escaped, body);
        assert!(Anthropic.ask(escaped.as_bytes()).expect("ask").input_bound >= ask.input_bound);
        // A rewritten `max_tokens` keeps the same bound.
        let out = Anthropic
            .with_max_tokens(body.as_bytes(), 50)
            .expect("rewritten");
        assert!(Anthropic.ask(&out).expect("ask").input_bound + 10 >= ask.input_bound);
    }

    #[test]
    fn max_tokens_is_rewritten_in_place_and_read_back() {
        let body = br#"{"model":"claude-opus-5-5","max_tokens":128000,"stream":true,"messages":[{"role":"user","content":"max_tokens: 9"}]}"#;
        let out = Anthropic.with_max_tokens(body, 4975).expect("rewritten");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.starts_with(r#"{"model":"claude-opus-5-5","max_tokens":4975,"stream":true"#));
        assert!(text.ends_with(r#""content":"max_tokens: 9"}]}"#));
        // An escaped key is the same key to a parser.
        let escaped = br#"{"model":"m","max\u005ftokens":5000}"#;
        let out = Anthropic.with_max_tokens(escaped, 10).expect("rewritten");
        assert_eq!(out, br#"{"model":"m","max\u005ftokens":10}"#);
        // Duplicates, or a nested key only: not rewritten (refused).
        assert!(Anthropic
            .with_max_tokens(br#"{"model":"m","max_tokens":1,"max_tokens":9}"#, 5)
            .is_none());
        assert!(Anthropic
            .with_max_tokens(br#"{"model":"m","x":{"max_tokens":9}}"#, 5)
            .is_none());
    }

    #[test]
    fn server_tools_and_provider_side_features_are_refused() {
        let ok = br#"{"model":"m","max_tokens":10,"tools":[{"name":"Bash","input_schema":{}},{"type":"custom","name":"x","input_schema":{}},{"type":"bash_20250124","name":"bash"}]}"#;
        assert!(Anthropic.ask(ok).is_ok());
        for body in [
            br#"{"model":"m","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}]}"#.as_slice(),
            br#"{"model":"m","max_tokens":10,"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}"#,
            br#"{"model":"m","max_tokens":10,"mcp_servers":[{"type":"url","url":"https://x"}]}"#,
            br#"{"model":"m","max_tokens":10,"container":"c"}"#,
            br#"{"model":"m"}"#,
            br#"{"model":"m","max_tokens":1e5}"#,
            br#"{"model":"m","max_tokens":10,"max_tokens":20}"#,
        ] {
            assert!(Anthropic.ask(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn a_token_count_is_refused_what_a_call_is() {
        let ok = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"Bash","input_schema":{}}]}"#;
        assert!(Anthropic.check_free(ok).is_ok());
        for body in [
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}"#.as_slice(),
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"f"}}]}]}"#,
            br#"{"model":"m","mcp_servers":[{"type":"url","url":"https://x"}]}"#,
            br#"{"model":"m","tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}"#,
            br#"not json"#,
        ] {
            assert!(Anthropic.check_free(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    fn read(stream: &str, cut: usize) -> Reading {
        let mut m = MessagesMeter::new(true, "requested".into());
        m.feed(&stream.as_bytes()[..cut]);
        m.feed(&stream.as_bytes()[cut..]);
        m.reading()
    }

    #[test]
    fn the_meter_reads_usage_across_chunk_boundaries() {
        let stream = concat!(
            "event: message_start\r\n",
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-haiku-5-5\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1,\"cache_creation_input_tokens\":2000,\"cache_read_input_tokens\":30000}}}\r\n\r\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"message_delta\"}}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":40}}\n\n",
            "event: message_stop\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        for cut in [0, 1, 7, 50, 123, stream.len() - 3, stream.len()] {
            let r = read(stream, cut);
            assert_eq!(r.model, "claude-haiku-5-5");
            assert_eq!(r.message_id, "msg_1");
            assert!(r.complete && r.started, "cut at {cut}");
            assert_eq!(
                (
                    r.usage.input_tokens,
                    r.usage.output_tokens,
                    r.usage.cache_creation_input_tokens,
                    r.usage.cache_read_input_tokens
                ),
                (100, 40, 2000, 30000),
                "cut at {cut}"
            );
        }
        // Cut before the delta: started, not complete.
        let head = &stream[..stream.find("event: message_delta").expect("delta")];
        let r = read(head, 10);
        assert!(r.started && !r.complete);
        assert_eq!(r.usage.output_tokens, 1);
    }

    #[test]
    fn the_meter_reads_a_non_streaming_body() {
        let mut m = MessagesMeter::new(false, "sonnet".into());
        m.feed(br#"{"id":"msg_2","type":"message","model":"claude-sonnet-5-5","content":[],"#);
        assert!(!m.reading().complete, "half a body is not a usage");
        m.feed(br#""usage":{"input_tokens":7,"output_tokens":3}}"#);
        let r = m.reading();
        assert_eq!(
            (
                r.model.as_str(),
                r.usage.input_tokens,
                r.usage.output_tokens,
                r.complete
            ),
            ("claude-sonnet-5-5", 7, 3, true)
        );
    }
}
