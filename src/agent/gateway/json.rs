//! JSON as the gateway must read it: exactly as the upstream's parser
//! will (a key compared after its escapes are decoded), without trusting
//! the body to be well-formed. Vendor-neutral: every wire uses it.

use serde_json::Value;

/// Where a top-level key's value is in a JSON object, when the object is
/// well-formed up to it and the key appears once. Keys are compared after
/// decoding their escapes, as a JSON parser would.
pub fn top_level_value(body: &[u8], key: &str) -> Option<std::ops::Range<usize>> {
    let mut s = Scanner { b: body, i: 0 };
    s.ws();
    s.eat(b'{')?;
    let mut found = None;
    loop {
        s.ws();
        if s.peek()? == b'}' {
            return found;
        }
        let k = s.string()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        let start = s.i;
        s.value(0)?;
        if k == key {
            if found.is_some() {
                return None;
            }
            found = Some(start..s.i);
        }
        s.ws();
        match s.next()? {
            b',' => continue,
            b'}' => return found,
            _ => return None,
        }
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

/// Deeper than any request a CLI sends; deeper input is not scanned.
const MAX_DEPTH: usize = 256;

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string, decoded (escapes included); `None` when malformed.
    fn string(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let mut out: Vec<u16> = Vec::new();
        let mut raw: Vec<u8> = Vec::new();
        loop {
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    let esc = self.next()?;
                    let c = match esc {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = self.b.get(self.i..self.i + 4)?;
                            let n = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                            self.i += 4;
                            flush(&mut raw, &mut out)?;
                            out.push(n);
                            continue;
                        }
                        _ => return None,
                    };
                    raw.extend_from_slice(c.to_string().as_bytes());
                }
                c if c < 0x20 => return None,
                c => raw.push(c),
            }
        }
        flush(&mut raw, &mut out)?;
        String::from_utf16(&out).ok()
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                self.i += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    self.value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            _ => {
                // A number or a literal: up to the next delimiter.
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }
}

/// Move raw UTF-8 bytes into the UTF-16 buffer.
fn flush(raw: &mut Vec<u8>, out: &mut Vec<u16>) -> Option<()> {
    if !raw.is_empty() {
        out.extend(std::str::from_utf8(raw).ok()?.encode_utf16());
        raw.clear();
    }
    Some(())
}

/// Does `value`, anywhere inside it, hold an object for which `bad`
/// answers a reason? The first reason found; `None` for none.
pub fn find_object(
    value: &Value,
    bad: &dyn Fn(&serde_json::Map<String, Value>) -> Option<String>,
) -> Option<String> {
    match value {
        Value::Object(map) => bad(map).or_else(|| map.values().find_map(|v| find_object(v, bad))),
        Value::Array(items) => items.iter().find_map(|v| find_object(v, bad)),
        _ => None,
    }
}

/// Does `hay` hold `needle` (a cheap look before a parse)?
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}
