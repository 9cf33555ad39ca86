//! The OpenAI Responses API as loopd's gateway speaks it for Codex: the one
//! endpoint it forwards, what a call asks for, its usage as the answer
//! streams past, and the headers that reach upstream.
//!
//! Codex sends no output bound; the gateway reserves one and puts it in the
//! request (`max_output_tokens`, inserted or lowered in place, read back),
//! so the worst case of every call is known before it goes upstream.

use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderValue};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::agent::events::Usage;
use crate::agent::gateway::json::{contains, find_object, top_level_value};
use crate::agent::gateway::media;
use crate::agent::gateway::spend::{Ask, INPUT_MARGIN};
use crate::agent::gateway::target::{Endpoint, Kind};
use crate::agent::gateway::{Credential, Meter, Reading, Wire};

/// The one endpoint forwarded for Codex: a model call.
pub const ENDPOINTS: &[Endpoint] = &[Endpoint {
    method: "POST",
    path: "/v1/responses",
    queries: &[""],
    kind: Kind::Call,
}];

/// The output bound a call without one gets at the most (the largest any
/// current model writes).
pub const MAX_OUTPUT: u64 = 128_000;

/// Tool types that run on the client (Codex): every other `type` runs on
/// the provider's side (web search, file search, code interpreter, MCP,
/// image generation) — the network from there, and billed outside the
/// metered usage.
const CLIENT_TOOL_TYPES: &[&str] = &["function", "custom", "local_shell", "apply_patch", "shell"];

/// Request headers passed upstream; every other header is dropped.
const FORWARDED: &[&str] = &[
    "content-type",
    "accept",
    "user-agent",
    "originator",
    "version",
    "session_id",
    "openai-beta",
    "x-codex-beta-features",
    "x-codex-turn-metadata",
    "x-codex-window-id",
];

/// The Responses API.
#[derive(Debug, Clone, Copy, Default)]
pub struct Responses;

#[derive(Deserialize)]
struct CallBody {
    model: String,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    tools: Vec<ToolHead>,
    #[serde(default)]
    previous_response_id: Option<IgnoredAny>,
    #[serde(default)]
    conversation: Option<IgnoredAny>,
    #[serde(default)]
    background: Option<bool>,
    /// A stored prompt, by id: text the provider holds.
    #[serde(default)]
    prompt: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ToolHead {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    /// A `namespace` groups tools (Codex's multi-agent functions): each
    /// is judged as if it stood alone.
    #[serde(default)]
    tools: Vec<ToolHead>,
}

impl ToolHead {
    /// The first type here (or in a namespace, at any depth) that runs on
    /// the provider's side.
    fn server_side(&self) -> Option<&str> {
        match self.kind.as_deref() {
            Some("namespace") => self.tools.iter().find_map(ToolHead::server_side),
            Some(k) if !CLIENT_TOOL_TYPES.contains(&k) => Some(k),
            _ => None,
        }
    }
}

/// The whole body as JSON, when its input items need a look: only a body
/// that could hold an input image or file or an item reference is parsed
/// whole (an escaped key could spell any of them).
fn deep(body: &[u8]) -> Option<Value> {
    if !contains(body, b"item_reference") && !media::may_hold_media(body, media::OPENAI_NAMES) {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// An input image or file the provider fetches (`image_url`/`file_url`
/// that is not a `data:` URL) or holds (`file_id`): the network from the
/// provider's side, and input tokens the request's size does not bound.
fn remote_content(value: &Value) -> Option<String> {
    find_object(value, &|m| {
        let kind = m.get("type")?.as_str()?;
        if kind == "item_reference" {
            return Some("an `item_reference` brings in an item the provider holds (its cost cannot be bounded): refused".into());
        }
        if !matches!(kind, "input_image" | "input_file") {
            return None;
        }
        let remote = m.contains_key("file_id")
            || ["image_url", "file_url"].iter().any(|k| {
                m.get(*k)
                    .is_some_and(|u| !u.as_str().is_some_and(|u| u.starts_with("data:")))
            });
        remote.then(|| format!("an `{kind}` the provider fetches or holds (a URL or a file id) reaches the network from its side and costs input the request does not bound: refused"))
    })
}

impl Wire for Responses {
    fn endpoints(&self) -> &'static [Endpoint] {
        ENDPOINTS
    }

    fn check_free(&self, _body: &[u8]) -> Result<(), String> {
        Err("the Responses API has no free endpoint at loopd's gateway".into())
    }

    fn ask(&self, body: &[u8]) -> Result<Ask, String> {
        let b: CallBody = serde_json::from_slice(body).map_err(|e| {
            format!("the request body is not a Responses API request loopd can meter: {e}")
        })?;
        if b.previous_response_id.is_some() || b.conversation.is_some() || b.prompt.is_some() {
            return Err("`previous_response_id`/`conversation`/`prompt` bring context the request does not show (its cost cannot be bounded): refused".into());
        }
        if b.background == Some(true) {
            return Err(
                "`background` responses are billed outside the stream loopd meters: refused".into(),
            );
        }
        if let Some(kind) = b.tools.iter().find_map(ToolHead::server_side) {
            return Err(format!("the server tool `{kind}` reaches the network from the provider's side and is billed outside the metered usage: refused"));
        }
        let deep = deep(body);
        if let Some(why) = deep.as_ref().and_then(remote_content) {
            return Err(why);
        }
        Ok(Ask {
            model: b.model,
            max_tokens: b.max_output_tokens.unwrap_or(MAX_OUTPUT).max(1),
            // The bytes bound the text; images and files are billed by
            // their pixels and pages, on top.
            input_bound: (body.len() as u64)
                .saturating_add(INPUT_MARGIN)
                .saturating_add(deep.as_ref().map_or(0, media::openai_tokens)),
        })
    }

    fn with_max_tokens(&self, body: &[u8], max_tokens: u64) -> Option<Vec<u8>> {
        let value = max_tokens.to_string();
        let out = match top_level_value(body, "max_output_tokens") {
            Some(span) => [&body[..span.start], value.as_bytes(), &body[span.end..]].concat(),
            None => {
                // Inserted as the object's first key.
                let open = body.iter().position(|&c| c == b'{')?;
                let rest = &body[open + 1..];
                let empty = rest.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'}');
                let sep: &[u8] = if empty { b"" } else { b"," };
                [
                    &body[..=open],
                    b"\"max_output_tokens\":",
                    value.as_bytes(),
                    sep,
                    rest,
                ]
                .concat()
            }
        };
        match self.ask(&out) {
            Ok(ask)
                if ask.max_tokens == max_tokens
                    && top_level_value(&out, "max_output_tokens").is_some() =>
            {
                Some(out)
            }
            _ => None,
        }
    }

    fn meter(&self, streaming: bool, requested_model: &str) -> Box<dyn Meter + Send> {
        Box::new(ResponsesMeter::new(streaming, requested_model.to_owned()))
    }

    fn upstream_headers(&self, from: &HeaderMap, credential: &Credential) -> HeaderMap {
        let mut out = HeaderMap::with_capacity(FORWARDED.len() + 1);
        for (name, value) in from {
            if FORWARDED.contains(&name.as_str()) {
                out.append(name.clone(), value.clone());
            }
        }
        let secret = match credential {
            Credential::ApiKey(k) | Credential::OAuth(k) | Credential::Bearer(k) => k,
        };
        if let Ok(v) = HeaderValue::from_str(&format!("Bearer {secret}")) {
            out.insert(hyper::header::AUTHORIZATION, v);
        }
        out
    }

    fn error_body(&self, kind: &str, message: &str) -> Bytes {
        let body = serde_json::json!({"error": {"type": kind, "message": message, "code": kind}});
        Bytes::from(body.to_string())
    }
}

/// Usage as the Responses API reports it: `input_tokens` counts the cached
/// ones too.
#[derive(Debug, Default, Deserialize)]
struct ApiUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens: u64,
}

#[derive(Debug, Default, Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
}

impl ApiUsage {
    fn canonical(&self) -> Usage {
        let cached = self
            .input_tokens_details
            .as_ref()
            .map_or(0, |d| d.cached_tokens)
            .min(self.input_tokens);
        Usage {
            input_tokens: self.input_tokens - cached,
            cache_read_input_tokens: cached,
            cache_creation_input_tokens: 0,
            output_tokens: self.output_tokens,
        }
    }
}

#[derive(Deserialize)]
struct ResponseHead {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    usage: Option<ApiUsage>,
}

#[derive(Deserialize)]
struct SseEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    response: Option<ResponseHead>,
}

/// Reads the usage of one Responses API answer as it passes.
pub struct ResponsesMeter {
    streaming: bool,
    line: Vec<u8>,
    line_overflow: bool,
    body: Vec<u8>,
    body_overflow: bool,
    reading: Reading,
}

/// The longest SSE line and non-streamed body read for usage.
const MAX_LINE: usize = 4 << 20;
const MAX_BODY: usize = 16 << 20;

impl ResponsesMeter {
    pub fn new(streaming: bool, requested_model: String) -> ResponsesMeter {
        ResponsesMeter {
            streaming,
            line: Vec::new(),
            line_overflow: false,
            body: Vec::new(),
            body_overflow: false,
            reading: Reading {
                model: requested_model,
                ..Reading::default()
            },
        }
    }

    fn on_data(&mut self, data: &[u8]) {
        // Most events are deltas: only the response's own events are read.
        if !(contains(data, b"\"response.created\"")
            || contains(data, b"\"response.completed\"")
            || contains(data, b"\"response.incomplete\"")
            || contains(data, b"\"response.failed\""))
        {
            return;
        }
        let Ok(ev) = serde_json::from_slice::<SseEvent>(data.trim_ascii()) else {
            return;
        };
        let Some(r) = ev.response else { return };
        self.take(r, ev.kind != "response.created");
    }

    fn take(&mut self, r: ResponseHead, ended: bool) {
        if !r.model.is_empty() {
            self.reading.model = r.model;
        }
        if !r.id.is_empty() {
            self.reading.message_id = r.id;
        }
        self.reading.started = true;
        if let (true, Some(u)) = (ended, r.usage) {
            self.reading.usage = u.canonical();
            self.reading.complete = true;
        }
    }
}

impl Meter for ResponsesMeter {
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
            if !self.line_overflow {
                self.line.extend_from_slice(&rest[..i]);
                let line = std::mem::take(&mut self.line);
                let line = line.strip_suffix(b"\r").unwrap_or(&line);
                if let Some(data) = line.strip_prefix(b"data:") {
                    self.on_data(data);
                }
            }
            self.line.clear();
            self.line_overflow = false;
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
        let mut r = self.reading.clone();
        if !self.streaming && !self.body_overflow {
            if let Ok(head) = serde_json::from_slice::<ResponseHead>(&self.body) {
                let mut m = ResponsesMeter::new(false, r.model.clone());
                m.take(head, true);
                r = m.reading;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_the_provider_fetches_are_refused() {
        let body = |content: &str| {
            format!(
                r#"{{"model":"gpt-5","input":[{{"type":"message","role":"user","content":[{content}]}}]}}"#
            )
        };
        for bad in [
            r#"{"type":"input_image","image_url":"https://exfil.example/x.png"}"#,
            r#"{"type":"input_image","file_id":"file-1"}"#,
            r#"{"type":"input_file","file_url":"https://exfil.example/x.pdf"}"#,
            r#"{"type":"input_file","file_id":"file-1"}"#,
            r#"{"type":"\u0069nput_image","image_url":"https://exfil.example/x.png"}"#,
        ] {
            assert!(Responses.ask(body(bad).as_bytes()).is_err(), "{bad}");
        }
        for good in [
            r#"{"type":"input_text","text":"https://example.com is a URL in text"}"#,
            r#"{"type":"input_image","image_url":"data:image/png;base64,iVBO"}"#,
            r#"{"type":"input_file","file_data":"data:application/pdf;base64,JVBE","filename":"a.pdf"}"#,
        ] {
            assert!(Responses.ask(body(good).as_bytes()).is_ok(), "{good}");
        }
    }

    /// Issue 39, finding 8, for Codex: images in a message and in a
    /// function call's output are reserved by their pixels.
    #[test]
    fn small_images_of_many_pixels_are_reserved_by_their_pixels() {
        use crate::agent::gateway::media::{header::Dimensions, price, tests::png};
        let image = serde_json::json!({"type": "input_image", "image_url": format!("data:image/png;base64,{}", png(4000, 3000))});
        let n = 10;
        let body = serde_json::json!({
            "model": "gpt-5-codex",
            "input": [
                {"type": "message", "role": "user", "content": vec![image.clone(); n / 2]},
                {"type": "function_call_output", "call_id": "c", "output": vec![image; n / 2]},
            ]
        })
        .to_string();
        let per_image = price::openai_image(
            Some(Dimensions {
                width: 4000,
                height: 3000,
            }),
            price::Detail::High,
        );
        let ask = Responses.ask(body.as_bytes()).expect("ask");
        assert!(ask.input_bound >= n as u64 * per_image + body.len() as u64);
    }

    #[test]
    fn an_output_bound_is_inserted_or_lowered_and_read_back() {
        let body = br#"{"model":"gpt-5-codex","input":[{"role":"user","content":"max_output_tokens"}],"stream":true}"#;
        assert_eq!(Responses.ask(body).expect("ask").max_tokens, MAX_OUTPUT);
        let out = Responses.with_max_tokens(body, 4000).expect("inserted");
        assert!(out.starts_with(br#"{"max_output_tokens":4000,"model""#));
        assert_eq!(Responses.ask(&out).expect("ask").max_tokens, 4000);
        let again = Responses.with_max_tokens(&out, 10).expect("lowered");
        assert_eq!(Responses.ask(&again).expect("ask").max_tokens, 10);
        assert_eq!(
            Responses.with_max_tokens(b"{}", 5),
            None,
            "no model: refused"
        );
    }

    #[test]
    fn what_bills_outside_the_stream_is_refused() {
        for body in [
            br#"{"model":"m","tools":[{"type":"web_search"}]}"#.as_slice(),
            br#"{"model":"m","tools":[{"type":"mcp","server_url":"https://x"}]}"#,
            br#"{"model":"m","previous_response_id":"resp_1"}"#,
            br#"{"model":"m","background":true}"#,
            br#"{"model":"m","prompt":{"id":"pmpt_1"}}"#,
            br#"{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}"#,
            br#"{"model":"m","tools":[{"type":"namespace","name":"n","tools":[{"type":"web_search"}]}]}"#,
        ] {
            assert!(
                Responses.ask(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(Responses
            .ask(br#"{"model":"m","tools":[{"type":"function","name":"exec_command"}]}"#)
            .is_ok());
        // Codex's multi-agent functions, grouped in a namespace.
        assert!(Responses
            .ask(br#"{"model":"m","tools":[{"type":"namespace","name":"multi_agent_v1","tools":[{"type":"function","name":"spawn_agent"}]}]}"#)
            .is_ok());
    }

    #[test]
    fn usage_is_read_with_cached_input_apart() {
        let stream = concat!(
            "event: response.created\n",
            "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-5-codex\"}}\n\n",
            "event: response.output_text.delta\n",
            "data: {\"type\":\"response.output_text.delta\",\"delta\":\"\\\"response.completed\\\"\"}\n\n",
            "event: response.completed\n",
            "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":1000,\"input_tokens_details\":{\"cached_tokens\":200},\"output_tokens\":50}}}\n\n",
        );
        for cut in [0, 5, 60, 200, stream.len()] {
            let mut m = ResponsesMeter::new(true, "req".into());
            m.feed(&stream.as_bytes()[..cut]);
            m.feed(&stream.as_bytes()[cut..]);
            let r = m.reading();
            assert!(r.complete && r.started, "cut {cut}");
            assert_eq!(r.model, "gpt-5-codex");
            assert_eq!(
                (
                    r.usage.input_tokens,
                    r.usage.cache_read_input_tokens,
                    r.usage.output_tokens
                ),
                (800, 200, 50)
            );
        }
        let head = &stream[..stream.find("event: response.completed").expect("completed")];
        let mut m = ResponsesMeter::new(true, "req".into());
        m.feed(head.as_bytes());
        assert!(m.reading().started && !m.reading().complete);
    }
}
