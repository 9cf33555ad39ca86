//! Images and documents in a request, priced before it goes upstream.
//!
//! The reservation bounds a call's input by its request's bytes, since a
//! token of text is at least a byte. Media breaks that: the providers bill
//! an image by its pixels and a PDF by its pages, so a PNG of a few hundred
//! bytes that declares 1568x1568 pixels costs thousands of tokens, and
//! parallel calls full of such images once billed $1.23 under a $0.50 cap
//! (issue 39, finding 8). So every image and document block in a request
//! — anywhere in it: a message, a `tool_result`'s content (where Claude
//! Code puts screenshots and images the Read tool opened), a system block,
//! a Codex `function_call_output` — adds its own bound to the call's input
//! bound ([`price`]), read from the image's header ([`header`]) or the
//! PDF's page objects ([`pdf`]) after decoding only as much base64 as that
//! needs ([`base64`]). What cannot be read is reserved at the most one can
//! cost.
//!
//! Vendor-neutral in its parts; the two walks below name each vendor's
//! block shapes, as the wires do.

pub mod base64;
pub mod header;
pub mod pdf;
pub mod price;

use serde_json::{Map, Value};

use header::Dimensions;
use price::Detail;

/// How much of an image's base64 is decoded for its header: a PNG's is in
/// its first 24 bytes, a JPEG's frame header follows its metadata
/// segments (each at most 64 KiB). A frame further in is unreadable, and
/// reserved at the maximum.
const HEADER_PREFIX: usize = 64 << 10;

/// The largest request a body can be: whole documents are decoded, never
/// more than this.
const MAX_DOCUMENT: usize = 64 << 20;

/// Does `body` name any media a walk would price (or hide a name behind
/// an escape)? A cheap look before the whole body is parsed.
pub fn may_hold_media(body: &[u8], names: &[&[u8]]) -> bool {
    use super::json::contains;
    names.iter().any(|n| contains(body, n)) || contains(body, b"\\u")
}

/// The names [`may_hold_media`] looks for in a Messages API request.
pub const CLAUDE_NAMES: &[&[u8]] = &[b"\"image\"", b"\"document\""];

/// The names [`may_hold_media`] looks for in a Responses API request.
pub const OPENAI_NAMES: &[&[u8]] = &[b"input_image", b"input_file"];

/// Input tokens of every image and document block in a Messages API
/// request (its system prompt and messages), beyond the bytes of the
/// request itself.
pub fn claude_tokens(request: &Value) -> u64 {
    ["system", "messages"]
        .iter()
        .filter_map(|k| request.get(k))
        .map(|v| sum_blocks(v, &claude_block))
        .fold(0, u64::saturating_add)
}

/// Input tokens of every input image and file in a Responses API request
/// (its `input`), beyond the bytes of the request itself.
pub fn openai_tokens(request: &Value) -> u64 {
    request
        .get("input")
        .map_or(0, |v| sum_blocks(v, &openai_block))
}

/// What a walk makes of one object.
enum Block {
    /// Media, at this many tokens; nothing inside it is more.
    Priced(u64),
    /// Not media, and nothing inside it is billed as media (a tool call's
    /// input is the model's own JSON, billed as text).
    Opaque,
    /// Not media itself; blocks inside it may be.
    Container,
}

/// The sum over every block in `value`, at any depth: a block nested in a
/// tool result is billed like one in a message. (serde_json's parser
/// limits nesting, so the recursion is bounded.)
fn sum_blocks(value: &Value, price: &dyn Fn(&Map<String, Value>) -> Block) -> u64 {
    match value {
        Value::Object(map) => match price(map) {
            Block::Priced(tokens) => tokens,
            Block::Opaque => 0,
            Block::Container => map
                .values()
                .map(|v| sum_blocks(v, price))
                .fold(0, u64::saturating_add),
        },
        Value::Array(items) => items
            .iter()
            .map(|v| sum_blocks(v, price))
            .fold(0, u64::saturating_add),
        _ => 0,
    }
}

fn str_of<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

/// An Anthropic `image` or `document` block (one with a `source`: without
/// one the provider refuses the block). Only `base64` content is let
/// through the gateway (a URL or a file id is refused before this); any
/// other source is priced at the maximum all the same.
fn claude_block(block: &Map<String, Value>) -> Block {
    let kind = str_of(block, "type");
    if matches!(kind, Some("tool_use" | "server_tool_use")) {
        return Block::Opaque;
    }
    let Some(source) = block.get("source") else {
        return Block::Container;
    };
    let source_type = source.get("type").and_then(Value::as_str);
    let base64 = (source_type == Some("base64"))
        .then(|| source.get("data").and_then(Value::as_str))
        .flatten();
    match kind {
        Some("image") => Block::Priced(
            base64
                .and_then(image_dimensions)
                .map_or(price::CLAUDE_IMAGE_MAX, price::claude_image),
        ),
        Some("document") => match source_type {
            // Text in the request (its bytes are counted), or content
            // blocks (their images are found by the walk).
            Some("text" | "content") => Block::Container,
            _ => Block::Priced(price::claude_document(base64.and_then(pdf_pages))),
        },
        _ => Block::Container,
    }
}

/// An OpenAI `input_image` (a `data:` URL; a URL or a file id is refused
/// before this, and priced at the maximum all the same) or `input_file`,
/// each with content of some kind (without, the provider refuses it).
fn openai_block(block: &Map<String, Value>) -> Block {
    let has = |keys: &[&str]| keys.iter().any(|k| block.contains_key(*k));
    match str_of(block, "type") {
        Some("input_image") if has(&["image_url", "file_id"]) => {
            // `image_url` is a string in the Responses API; an object with
            // a `url` (and the `detail`) in Chat Completions.
            let image_url = block.get("image_url");
            let url = image_url.and_then(|u| u.as_str().or_else(|| u.get("url")?.as_str()));
            let detail = str_of(block, "detail").or_else(|| image_url?.get("detail")?.as_str());
            let dims = url.and_then(base64::data_url).and_then(image_dimensions);
            Block::Priced(price::openai_image(dims, Detail::of(detail)))
        }
        Some("input_file") if has(&["file_data", "file_id", "file_url"]) => {
            let data = str_of(block, "file_data").map(|d| base64::data_url(d).unwrap_or(d));
            Block::Priced(price::openai_file(data.and_then(pdf_pages)))
        }
        _ => Block::Container,
    }
}

fn image_dimensions(base64: &str) -> Option<Dimensions> {
    header::dimensions(&base64::decode_prefix(base64, HEADER_PREFIX))
}

fn pdf_pages(base64: &str) -> Option<u64> {
    pdf::pages(&base64::decode_prefix(base64, MAX_DOCUMENT))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Standard base64, for the tests.
    pub(crate) fn encode(bytes: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= c.len() {
                    out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    pub(crate) fn png(w: u32, h: u32) -> String {
        encode(&header::tests::png_header(w, h))
    }

    fn claude_image(data: &str) -> Value {
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
    }

    #[test]
    fn the_test_encoder_round_trips() {
        for n in 0..10u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(97)).collect();
            assert_eq!(base64::decode_prefix(&encode(&bytes), 100), bytes);
        }
    }

    #[test]
    fn claude_images_are_found_anywhere_and_priced_by_pixels() {
        let one = price::claude_image(Dimensions {
            width: 1568,
            height: 1568,
        });
        let request = json!({
            "model": "claude-opus-5-5",
            "system": [{"type": "text", "text": "s"}, claude_image(&png(1568, 1568))],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    claude_image(&png(1568, 1568)),
                    {"type": "tool_result", "tool_use_id": "t", "content": [
                        claude_image(&png(1568, 1568)),
                        {"type": "text", "text": "a screenshot"}
                    ]}
                ]},
                {"role": "user", "content": "plain text"}
            ]
        });
        assert_eq!(claude_tokens(&request), 3 * one);
        // Unreadable images: the maximum each.
        let request = json!({"messages": [{"role": "user", "content": [
            claude_image("not base64 at all!"),
            claude_image(&encode(b"GIF89a")),
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        ]}]});
        assert_eq!(claude_tokens(&request), 3 * price::CLAUDE_IMAGE_MAX);
        // Not media: a tool call's input (the model's own JSON), the tool
        // definitions, a block without a source.
        let request = json!({
            "tools": [{"name": "t", "input_schema": {"type": "object"}, "x": claude_image(&png(9000, 9000))}],
            "messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "Show", "input": {"block": claude_image(&png(9000, 9000))}},
                {"type": "document", "title": "no source"},
            ]}]
        });
        assert_eq!(claude_tokens(&request), 0);
        // No media: nothing beyond the bytes.
        assert_eq!(
            claude_tokens(&json!({"messages": [{"role": "user", "content": "hi"}]})),
            0
        );
    }

    #[test]
    fn claude_documents_are_priced_by_pages() {
        let pdf = b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n2 0 obj << /Type /Page >> endobj\n";
        let doc = |source: Value| json!({"messages": [{"role": "user", "content": [{"type": "document", "source": source}]}]});
        let two =
            doc(json!({"type": "base64", "media_type": "application/pdf", "data": encode(pdf)}));
        assert_eq!(claude_tokens(&two), price::claude_document(Some(2)));
        let junk = doc(json!({"type": "base64", "media_type": "application/pdf", "data": "AAAA"}));
        assert_eq!(claude_tokens(&junk), price::claude_document(None));
        let text = doc(json!({"type": "text", "media_type": "text/plain", "data": "hi"}));
        assert_eq!(claude_tokens(&text), 0);
        // A content document's images are its own blocks.
        let content = doc(json!({"type": "content", "content": [claude_image(&png(10, 10))]}));
        assert_eq!(
            claude_tokens(&content),
            price::claude_image(Dimensions {
                width: 10,
                height: 10
            })
        );
    }

    #[test]
    fn openai_images_and_files_are_found_anywhere() {
        let image = |detail: Option<&str>| {
            let mut v = json!({"type": "input_image", "image_url": format!("data:image/png;base64,{}", png(1024, 1024))});
            if let Some(d) = detail {
                v["detail"] = json!(d);
            }
            v
        };
        let request = json!({
            "model": "gpt-5-codex",
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    image(None),
                    image(Some("low")),
                ]},
                {"type": "function_call_output", "call_id": "c", "output": [image(Some("original"))]},
            ]
        });
        let d = Some(Dimensions {
            width: 1024,
            height: 1024,
        });
        assert_eq!(
            openai_tokens(&request),
            price::openai_image(d, Detail::High)
                + price::openai_image(d, Detail::Low)
                + price::openai_image(d, Detail::Original)
        );
        let file = json!({"input": [{"type": "message", "role": "user", "content": [
            {"type": "input_file", "filename": "a.pdf", "file_data": format!("data:application/pdf;base64,{}", encode(b"%PDF-1.7\n/Type /Page"))},
            {"type": "input_file", "file_id": "file-1"},
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
        ]}]});
        assert_eq!(
            openai_tokens(&file),
            price::openai_file(Some(1))
                + price::openai_file(None)
                + price::openai_image(None, Detail::Low)
        );
    }

    #[test]
    fn a_cheap_look_first() {
        assert!(may_hold_media(br#"{"type":"image"}"#, CLAUDE_NAMES));
        assert!(may_hold_media(br#"{"type":"\u0069mage"}"#, CLAUDE_NAMES));
        assert!(!may_hold_media(br#"{"type":"text"}"#, CLAUDE_NAMES));
        assert!(may_hold_media(br#"{"type":"input_file"}"#, OPENAI_NAMES));
    }
}
