//! The one channel from the sandbox back to loopd.
//!
//! Nothing a job's processes can write is trusted by loopd: a denials log
//! the agent can truncate, an escalation file it can make a FIFO, a nudge
//! count it can reset. So what has to cross from the sandbox to loopd — the
//! pre-tool-use hook's question and the agent's escalation — crosses as a
//! request to the job's gateway, authenticated by the session's token, and
//! is decided and recorded in loopd's memory: the hook asks, loopd's policy
//! answers and loopd journals the denial; `loopd escalate` tells, loopd
//! journals. What the hook and `loopd escalate` run inside the sandbox is a
//! thin client ([`post`]).

use std::io::{Read, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Tag;

/// Where the hook and `loopd escalate` find the gateway (set in every
/// session's environment).
pub const GATEWAY_VAR: &str = "LOOPD_GATEWAY";
/// The session's token for loopd's endpoints.
pub const TOKEN_VAR: &str = "LOOPD_SESSION_TOKEN";

/// The largest hook event and escalation the gateway reads.
pub const MAX_HOOK_BYTES: usize = 1 << 20;
pub const MAX_ESCALATION_BYTES: usize = 64 << 10;

/// A refused request, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    pub attempt: u32,
    pub session: u32,
    pub method: String,
    /// The raw request target, printable characters only.
    pub target: String,
    pub why: String,
}

/// A tool call the job's policy denied, as the hook asked about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Denial {
    pub attempt: u32,
    pub session: u32,
    pub tool: String,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    pub input: serde_json::Value,
    pub reason: String,
}

/// What `loopd escalate` sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EscalationRequest {
    pub test: String,
    pub reason: String,
}

impl EscalationRequest {
    /// The longest test id and reason kept.
    pub const MAX_FIELD: usize = 8 << 10;

    pub fn check(&self) -> Result<(), String> {
        if self.test.trim().is_empty() || self.reason.trim().is_empty() {
            return Err("an escalation must name a test and give a reason".into());
        }
        if self.test.len() > Self::MAX_FIELD || self.reason.len() > Self::MAX_FIELD {
            return Err(format!(
                "the test id and the reason may have at most {} bytes each",
                Self::MAX_FIELD
            ));
        }
        Ok(())
    }
}

/// A pre-tool-use event as the hook forwards it (the agent CLI's own
/// fields; what loopd does not read is ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HookInput {
    #[serde(default)]
    pub session_id: String,
    #[serde(default)]
    pub tool_name: String,
    #[serde(default)]
    pub tool_input: serde_json::Value,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// loopd's answer to the hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum HookDecision {
    Allow,
    /// Denied with a hint, not a tamper finding: the nudge before a
    /// `stuck_repeat` stop; a tool the critic does not get.
    Nudge {
        reason: String,
    },
    /// Denied: a tamper attempt, journaled.
    Deny {
        reason: String,
    },
}

/// What a job decides for the requests that come through its gateway's
/// own endpoints.
pub trait Channel: Send + Sync {
    /// The hook's question about one tool call of the session `tag`.
    fn pre_tool_use(&self, tag: Tag, input: &HookInput) -> HookDecision;
    /// May the agent escalate at all (`[guard] escalation`)?
    fn escalation(&self) -> bool;
}

/// A channel that allows every tool call and takes no escalation (a
/// gateway with no job behind it: benchmarks, tests of the wire).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoChannel;

impl Channel for NoChannel {
    fn pre_tool_use(&self, _: Tag, _: &HookInput) -> HookDecision {
        HookDecision::Allow
    }

    fn escalation(&self) -> bool {
        false
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{GATEWAY_VAR}` is not an http://127.0.0.1:PORT address: `{0}`")]
    Address(String),
    #[error("cannot reach loopd's gateway at `{addr}`: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("loopd's gateway answered something that is not HTTP")]
    Malformed,
}

/// POST `body` to loopd's endpoint `path` at `gateway` (`http://HOST:PORT`)
/// with `token`; the status and the response body. A tiny HTTP/1.1 client:
/// the hook runs once per tool call and must start fast, without a runtime.
pub fn post(
    gateway: &str,
    token: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, Vec<u8>), ClientError> {
    post_with(gateway, token, path, &[], body, timeout, 4 << 20)
}

/// [`post`] with extra headers, reading at most `max` bytes of answer.
pub fn post_with(
    gateway: &str,
    token: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
    max: u64,
) -> Result<(u16, Vec<u8>), ClientError> {
    let addr = gateway
        .strip_prefix("http://")
        .map(|a| a.trim_end_matches('/'))
        .filter(|a| !a.contains('/') && !a.is_empty())
        .ok_or_else(|| ClientError::Address(gateway.to_owned()))?;
    let io = |source| ClientError::Io {
        addr: addr.to_owned(),
        source,
    };
    let sock: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| ClientError::Address(gateway.to_owned()))?;
    let mut stream = std::net::TcpStream::connect_timeout(&sock, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut resp = Vec::new();
    stream.take(max).read_to_end(&mut resp).map_err(io)?;
    parse_response(&resp).ok_or(ClientError::Malformed)
}

/// Status and body of a `Connection: close` HTTP/1.1 response (plain or
/// chunked body).
fn parse_response(resp: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&resp[..end]).ok()?;
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let body = &resp[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Some((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let nl = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).ok()?.trim(), 16).ok()?;
        rest = &rest[nl + 2..];
        if size == 0 {
            return Some((status, out));
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_plain_and_chunked() {
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            Some((200, b"ok".to_vec()))
        );
        assert_eq!(
            parse_response(
                b"HTTP/1.1 403 Forbidden\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            ),
            Some((403, b"abcde".to_vec()))
        );
        assert_eq!(parse_response(b"garbage"), None);
    }

    #[test]
    fn an_escalation_names_a_test_and_a_reason() {
        let ok = EscalationRequest {
            test: "t".into(),
            reason: "r".into(),
        };
        assert!(ok.check().is_ok());
        assert!(EscalationRequest {
            test: " ".into(),
            ..ok.clone()
        }
        .check()
        .is_err());
        assert!(serde_json::from_str::<EscalationRequest>(
            r#"{"test":"t","reason":"r","job_id":"x"}"#
        )
        .is_err());
    }
}
