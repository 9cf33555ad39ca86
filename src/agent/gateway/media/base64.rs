//! Base64 decoded only as far as the gateway needs it: an image's header is
//! in its first bytes, so a payload of megabytes is read a few kilobytes
//! deep. Base64 decodes in groups of four characters, so a prefix of the
//! text is a prefix of the bytes.
//!
//! Lenient on purpose: both alphabets (standard and URL-safe), whitespace
//! skipped, padding optional; decoding stops at the first character of
//! neither alphabet. What is decoded here only ever *lowers* a reservation
//! when it yields a readable header, and a header read from bytes the
//! provider would decode differently is one the provider rejects (nothing
//! billed).

/// Decode `text` until `max_out` bytes are out (or the text ends, or a
/// character of no alphabet or padding comes).
pub fn decode_prefix(text: &str, max_out: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(max_out.min(text.len() / 4 * 3 + 3));
    let mut group = [0u8; 4];
    let mut n = 0;
    for c in text.bytes() {
        if out.len() >= max_out {
            break;
        }
        if c.is_ascii_whitespace() {
            continue;
        }
        let Some(v) = sextet(c) else { break };
        group[n] = v;
        n += 1;
        if n == 4 {
            out.push(group[0] << 2 | group[1] >> 4);
            out.push(group[1] << 4 | group[2] >> 2);
            out.push(group[2] << 6 | group[3]);
            n = 0;
        }
    }
    // A last, partial group: two characters are one byte, three are two.
    if n >= 2 {
        out.push(group[0] << 2 | group[1] >> 4);
    }
    if n == 3 {
        out.push(group[1] << 4 | group[2] >> 2);
    }
    out.truncate(max_out);
    out
}

/// The payload of a `data:` URL in base64 (`data:image/png;base64,iVBO…`);
/// `None` for any other URL, or a `data:` URL that is not base64.
pub fn data_url(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("data:")?;
    let (head, payload) = rest.split_once(',')?;
    head.rsplit(';')
        .next()
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("base64"))
        .then_some(payload)
}

fn sextet(c: u8) -> Option<u8> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_whole_and_prefixes() {
        assert_eq!(decode_prefix("aGVsbG8gd29ybGQ=", 100), b"hello world");
        assert_eq!(decode_prefix("aGVsbG8gd29ybGQ", 100), b"hello world");
        assert_eq!(
            decode_prefix("aGVs\nbG8g d29y\r\nbGQ=", 100),
            b"hello world"
        );
        assert_eq!(decode_prefix("aGVsbG8gd29ybGQ=", 5), b"hello");
        assert_eq!(decode_prefix("aGVsbG8gd29ybGQ=", 0), b"");
        // URL-safe alphabet.
        assert_eq!(decode_prefix("-_8", 10), [0xfb, 0xff]);
        // Garbage stops the decoding; what came before stays.
        assert_eq!(decode_prefix("aGVs!bG8=", 10), b"hel");
        assert_eq!(decode_prefix("", 10), b"");
        assert_eq!(decode_prefix("a", 10), b"");
    }

    #[test]
    fn data_urls_in_base64_only() {
        assert_eq!(data_url("data:image/png;base64,iVBO"), Some("iVBO"));
        assert_eq!(
            data_url("data:application/pdf;name=a.pdf;BASE64,JVBE"),
            Some("JVBE")
        );
        assert_eq!(data_url("data:text/plain,hello"), None);
        assert_eq!(data_url("https://example.com/a.png"), None);
        assert_eq!(data_url("data:image/png;base64"), None);
    }
}
