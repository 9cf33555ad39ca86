//! The metering gateway: loopd is the model endpoint its sessions talk to.
//!
//! The agent runs as loopd's user, so anything its processes can reach — an
//! environment, a file, a socket — is not a place for the real credential.
//! Instead, each job serves this small HTTP/1 gateway on `127.0.0.1` (a
//! random port). Sessions get `ANTHROPIC_BASE_URL` pointing at it and a
//! random per-job *session token* as their `ANTHROPIC_API_KEY`; the real
//! credential stays in loopd's memory. For every request the gateway:
//!
//! 1. checks the session token (constant-time) — nothing else gets through;
//! 2. asks the job's [`Admit`] whether the remaining budget covers one more
//!    call at its minimum, and refuses with an Anthropic-style error JSON
//!    (HTTP 400, which the CLI does not retry) when it does not;
//! 3. forwards the request byte for byte to the upstream (the user's
//!    `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com`) with the auth
//!    headers replaced by the real credential — so the CLI's prompt-cache
//!    breakpoints stay intact;
//! 4. streams the response back chunk by chunk, reading the usage of
//!    `message_start` / `message_delta` (or a non-streaming body's `usage`)
//!    as it passes, and reports one [`MeteredCall`] per call when the
//!    response ends (or the client goes away).
//!
//! A `claude -p` the agent starts from its Bash tool inherits the same base
//! URL and token, so it is metered and capped like the agent itself.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::events::Usage;
use super::session::Role;
use super::Price;
use crate::outcome::Reason;

/// The public API, when the user names no other upstream.
pub const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

/// Where the upstream is read from (and what sessions get, pointing at the
/// gateway).
pub const BASE_URL_VAR: &str = "ANTHROPIC_BASE_URL";

/// Credential variables, in the order they are picked.
pub const CREDENTIAL_VARS: [&str; 3] = [
    crate::util::API_KEY_VAR,
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
];

/// Modes in which the CLI talks to another cloud's API: not metered, so
/// refused.
pub const UNMETERED_MODES: [&str; 2] = ["CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"];

/// The beta flag the API wants on requests authorized by an OAuth token.
pub const OAUTH_BETA: &str = "oauth-2025-04-20";

/// The largest request body forwarded (a long conversation is a few MB).
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// The largest non-streaming response body kept for metering.
const MAX_METERED_JSON: usize = 16 << 20;

/// The real credential: only ever in loopd's memory and on the upstream
/// request.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// `ANTHROPIC_API_KEY`: sent as `x-api-key`.
    ApiKey(String),
    /// `CLAUDE_CODE_OAUTH_TOKEN` / `ANTHROPIC_AUTH_TOKEN`: sent as
    /// `Authorization: Bearer`, with the OAuth beta flag.
    OAuth(String),
}

/// Never print a credential, not even in a debug log.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::ApiKey(_) => "Credential::ApiKey(<redacted>)",
            Credential::OAuth(_) => "Credential::OAuth(<redacted>)",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialError {
    #[error("no model credential: none of {} is set", CREDENTIAL_VARS.join(", "))]
    Missing,
    #[error(
        "`{var}` is set: loopd cannot meter or cap Bedrock/Vertex calls, so it refuses to run them"
    )]
    Unmetered { var: String },
}

/// The credential and the upstream, picked once when loopd starts — before
/// anything of a job runs.
#[derive(Debug, Clone)]
pub struct Access {
    pub credential: Credential,
    /// Without a trailing slash.
    pub upstream: String,
}

impl Access {
    /// Pick from variables (`get` reads one; empty counts as unset): the API
    /// key first, then an OAuth token; the upstream from
    /// `ANTHROPIC_BASE_URL`, else the public API.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Access, CredentialError> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        if let Some(var) = UNMETERED_MODES
            .iter()
            .find(|v| get(v).is_some_and(|x| !matches!(x.trim(), "0" | "false")))
        {
            return Err(CredentialError::Unmetered {
                var: (*var).to_owned(),
            });
        }
        let credential = match (
            get(CREDENTIAL_VARS[0]),
            get(CREDENTIAL_VARS[1]),
            get(CREDENTIAL_VARS[2]),
        ) {
            (Some(k), _, _) => Credential::ApiKey(k.trim().to_owned()),
            (None, Some(t), _) | (None, None, Some(t)) => Credential::OAuth(t.trim().to_owned()),
            (None, None, None) => return Err(CredentialError::Missing),
        };
        let upstream = get(BASE_URL_VAR)
            .unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned())
            .trim()
            .trim_end_matches('/')
            .to_owned();
        Ok(Access {
            credential,
            upstream,
        })
    }

    /// From loopd's own environment.
    pub fn from_env() -> Result<Access, CredentialError> {
        Access::from_vars(|k| std::env::var(k).ok())
    }
}

/// Which session the gateway's calls are billed to right now. A nested
/// `claude -p` started from the agent's Bash is billed to the agent session
/// that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    pub role: Role,
    pub attempt: u32,
    pub session: u32,
}

/// One model call as the gateway saw it on the wire: the authority for
/// billing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeteredCall {
    pub attempt: u32,
    pub role: Role,
    pub session: u32,
    pub model: String,
    pub message_id: String,
    /// Upstream's HTTP status.
    pub status: u16,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cache writes.
    pub cache_creation_input_tokens: u64,
    /// Cache reads.
    pub cache_read_input_tokens: u64,
    pub cost_usd: f64,
    /// Until upstream's response headers.
    pub latency_ms: u64,
    /// Until the response's last byte.
    pub wall_ms: u64,
}

impl MeteredCall {
    pub fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_creation_input_tokens: self.cache_creation_input_tokens,
            cache_read_input_tokens: self.cache_read_input_tokens,
        }
    }
}

/// What the gateway has metered since it started (every session's calls).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metered {
    pub calls: u64,
    pub cost_usd: f64,
    /// Input tokens of every kind.
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A request the gateway refused, and the cap that refused it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

/// May one more call on `model` start, given what this gateway has metered?
pub type Admit = Box<dyn Fn(&str, &Metered) -> Result<(), Refusal> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
    #[error("cannot build the HTTP client for `{upstream}`: {source}")]
    Client {
        upstream: String,
        #[source]
        source: reqwest::Error,
    },
}

struct Shared {
    token: String,
    access: Access,
    client: reqwest::Client,
    price: fn(&str) -> Price,
    admit: Admit,
    tag: Mutex<Tag>,
    metered: Mutex<Metered>,
    refusal: Mutex<Option<Refusal>>,
    calls: mpsc::UnboundedSender<MeteredCall>,
    in_flight: watch::Sender<usize>,
}

/// A running gateway; stops serving when dropped.
pub struct Gateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
    calls: mpsc::UnboundedReceiver<MeteredCall>,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Listen on a random loopback port and serve until dropped (inside a
    /// tokio runtime).
    pub fn start(
        access: Access,
        price: fn(&str) -> Price,
        admit: Admit,
    ) -> Result<Gateway, GatewayError> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(GatewayError::Bind)?;
        let addr = listener.local_addr().map_err(GatewayError::Bind)?;
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            .tcp_nodelay(true)
            // Never follow a redirect with the credential on it.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| GatewayError::Client {
                upstream: access.upstream.clone(),
                source,
            })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            token: session_token(),
            access,
            client,
            price,
            admit,
            tag: Mutex::new(Tag {
                role: Role::Agent,
                attempt: 0,
                session: 0,
            }),
            metered: Mutex::new(Metered::default()),
            refusal: Mutex::new(None),
            calls: tx,
            in_flight: watch::channel(0).0,
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        tracing::info!(%addr, upstream = %shared.access.upstream, "metering gateway listening");
        Ok(Gateway {
            addr,
            shared,
            calls: rx,
            task,
        })
    }

    /// The loopback port it listens on (the one `gateway-only` lets through).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// What sessions get as `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What sessions get as their credential (`ANTHROPIC_API_KEY`).
    pub fn session_token(&self) -> &str {
        &self.shared.token
    }

    /// Bill the calls from now on to this session.
    pub fn set_tag(&self, tag: Tag) {
        *lock(&self.shared.tag) = tag;
    }

    /// The calls metered since the last look, in the order they ended.
    pub fn calls(&mut self) -> &mut mpsc::UnboundedReceiver<MeteredCall> {
        &mut self.calls
    }

    /// Everything metered since the gateway started.
    pub fn metered(&self) -> Metered {
        *lock(&self.shared.metered)
    }

    /// The refusal since the last look, if the gateway refused a request.
    pub fn take_refusal(&self) -> Option<Refusal> {
        lock(&self.shared.refusal).take()
    }

    /// Wait until no call is in flight (its [`MeteredCall`] is sent), or
    /// `limit` passed: a session's last response may still be draining when
    /// the CLI exits.
    pub async fn settle(&self, limit: std::time::Duration) {
        let mut rx = self.shared.in_flight.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// 32 random bytes, hex: the per-job session token.
fn session_token() -> String {
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut bytes)
    });
    if read.is_err() {
        // Never a predictable token: mix the clock, the pid and an address.
        use sha2::Digest;
        let seed = format!(
            "{:?}{}{:p}",
            std::time::SystemTime::now(),
            std::process::id(),
            &bytes
        );
        bytes.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes()));
    }
    format!("loopd-session-{}", hex::encode(bytes))
}

/// Compare without an early exit, so the time taken says nothing about how
/// much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Does the request carry the session token (as `x-api-key` or a bearer)?
fn authorized(token: &str, headers: &HeaderMap) -> bool {
    let key = headers.get("x-api-key").map(|v| v.as_bytes());
    let bearer = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    [key, bearer]
        .into_iter()
        .flatten()
        .any(|given| constant_time_eq(given, token.as_bytes()))
}

async fn accept_loop(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "gateway accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "gateway connection ended with an error");
            }
        });
    }
}

/// The response body: one buffer, or the upstream's chunks as they come.
pub enum GatewayBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            GatewayBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }
}

/// An Anthropic-style error: `{"type":"error","error":{"type":..,"message":..}}`.
fn api_error(status: StatusCode, kind: &str, message: &str) -> Response<GatewayBody> {
    let body = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    let mut resp = Response::new(GatewayBody::Full(Some(Bytes::from(body.to_string()))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Headers that belong to one hop, or that the gateway sets itself.
fn dropped(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "proxy-authenticate"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// The request's headers for upstream: the session's auth out, the real
/// credential in; `accept-encoding` out, so the stream can be metered as it
/// passes.
fn upstream_headers(from: &HeaderMap, credential: &Credential) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(from.len() + 2);
    for (name, value) in from {
        if dropped(name)
            || name == "x-api-key"
            || name == hyper::header::AUTHORIZATION
            || name == hyper::header::ACCEPT_ENCODING
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    match credential {
        Credential::ApiKey(k) => {
            if let Ok(v) = HeaderValue::from_str(k) {
                out.insert("x-api-key", v);
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
                out.insert("anthropic-beta", v);
            }
        }
    }
    out
}

/// Read a whole request body (requests are bounded; responses stream).
async fn read_body(mut body: Incoming) -> Result<Bytes, Response<GatewayBody>> {
    let mut buf = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(Bytes::from(buf)),
            Some(Err(e)) => {
                return Err(api_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("loopd gateway: cannot read the request: {e}"),
                ))
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > MAX_REQUEST_BYTES {
                        return Err(api_error(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "request_too_large",
                            "loopd gateway: the request is too large",
                        ));
                    }
                }
            }
        }
    }
}

/// Counts a call in flight until dropped.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(shared: Arc<Shared>) -> InFlight {
        shared.in_flight.send_modify(|n| *n += 1);
        InFlight(shared)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<GatewayBody>, Infallible> {
    Ok(forward(shared, req).await.unwrap_or_else(|r| r))
}

async fn forward(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<GatewayBody>, Response<GatewayBody>> {
    let started = Instant::now();
    if !authorized(&shared.token, req.headers()) {
        tracing::warn!(path = %req.uri().path(), "gateway: a request without the session token");
        return Err(api_error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "loopd gateway: this endpoint serves loopd's sessions only",
        ));
    }
    let (parts, body) = req.into_parts();
    let body = read_body(body).await?;
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let is_call = parts.method == hyper::Method::POST
        && parts
            .uri
            .path()
            .trim_end_matches('/')
            .ends_with("/v1/messages");
    let requested_model = if is_call {
        serde_json::from_slice::<ModelOnly>(&body)
            .map(|m| m.model)
            .unwrap_or_default()
    } else {
        String::new()
    };
    let in_flight = is_call.then(|| InFlight::new(shared.clone()));
    if is_call {
        let metered = *lock(&shared.metered);
        if let Err(refusal) = (shared.admit)(&requested_model, &metered) {
            tracing::warn!(model = %requested_model, reason = %refusal.reason, "gateway refused a call: {}", refusal.message);
            let message = format!("loopd: {} ({})", refusal.message, refusal.reason);
            *lock(&shared.refusal) = Some(refusal);
            return Err(api_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &message,
            ));
        }
    }
    let tag = *lock(&shared.tag);
    let url = format!("{}{}", shared.access.upstream, path);
    let upstream = shared
        .client
        .request(parts.method.clone(), &url)
        .headers(upstream_headers(&parts.headers, &shared.access.credential))
        .body(body)
        .send()
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, upstream = %shared.access.upstream, "gateway: upstream unreachable");
            api_error(
                StatusCode::BAD_GATEWAY,
                "api_error",
                &format!("loopd gateway: the upstream is unreachable: {}", without_url(&e)),
            )
        })?;
    let latency = started.elapsed();
    let status = upstream.status();
    let mut resp = Response::builder().status(status.as_u16());
    let streaming = upstream
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    for (name, value) in upstream.headers() {
        if !dropped(name) || name == hyper::header::CONTENT_LENGTH {
            resp = resp.header(name, value);
        }
    }
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    let resp = resp.body(GatewayBody::Stream(rx)).map_err(|e| {
        api_error(
            StatusCode::BAD_GATEWAY,
            "api_error",
            &format!("loopd gateway: {e}"),
        )
    })?;
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let mut upstream = upstream;
        let mut meter = Meter::new(streaming, requested_model);
        loop {
            // A client gone while upstream is silent ends the call too.
            let next = tokio::select! {
                next = upstream.chunk() => next,
                () = tx.closed() => break,
            };
            match next {
                Ok(Some(chunk)) => {
                    if is_call {
                        meter.feed(&chunk);
                    }
                    if tx.send(chunk).await.is_err() {
                        // The client went away (a stopped session): what
                        // upstream sent so far is what gets billed.
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %without_url(&e), "gateway: the upstream response broke off");
                    break;
                }
            }
        }
        drop(tx);
        if is_call {
            let call = meter.finish(
                tag,
                status.as_u16(),
                latency,
                started.elapsed(),
                shared.price,
            );
            {
                let mut m = lock(&shared.metered);
                m.calls += 1;
                m.cost_usd += call.cost_usd;
                m.input_tokens += call.usage().all_input();
                m.output_tokens += call.output_tokens;
            }
            tracing::debug!(model = %call.model, cost_usd = call.cost_usd, "gateway metered a call");
            let _ = shared.calls.send(call);
        }
    });
    Ok(resp)
}

/// reqwest errors name the URL; the upstream URL is not a secret, but keep
/// the message short and free of query strings.
fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(i) = e.find(" for url (") {
        e.truncate(i);
    }
    e
}

#[derive(Deserialize)]
struct ModelOnly {
    #[serde(default)]
    model: String,
}

/// Reads the usage of one response as it passes.
pub struct Meter {
    streaming: bool,
    /// The SSE line being assembled.
    line: Vec<u8>,
    /// The current SSE event's name (`event:` line).
    event: Vec<u8>,
    /// A non-streaming body, kept for its `usage`.
    body: Vec<u8>,
    model: String,
    message_id: String,
    usage: Usage,
}

impl Meter {
    pub fn new(streaming: bool, requested_model: String) -> Meter {
        Meter {
            streaming,
            line: Vec::new(),
            event: Vec::new(),
            body: Vec::new(),
            model: requested_model,
            message_id: String::new(),
            usage: Usage::default(),
        }
    }

    /// One more chunk of the response body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.streaming {
            if self.body.len() + chunk.len() <= MAX_METERED_JSON {
                self.body.extend_from_slice(chunk);
            }
            return;
        }
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            if self.line.is_empty() {
                self.on_line(&rest[..i]);
            } else {
                self.line.extend_from_slice(&rest[..i]);
                let line = std::mem::take(&mut self.line);
                self.on_line(&line);
            }
            rest = &rest[i + 1..];
        }
        self.line.extend_from_slice(rest);
    }

    fn on_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.event.clear();
        } else if let Some(name) = line.strip_prefix(b"event:") {
            self.event.clear();
            self.event.extend_from_slice(name.trim_ascii());
        } else if let Some(data) = line.strip_prefix(b"data:") {
            // Only the two events that carry usage are parsed: the content
            // deltas (nearly all the bytes) pass untouched.
            let wanted = match self.event.as_slice() {
                b"message_start" | b"message_delta" => true,
                b"" => contains(data, b"\"message_start\"") || contains(data, b"\"message_delta\""),
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
                self.take_usage(&message.usage);
            }
            SseData::MessageDelta { usage } => self.take_usage(&usage),
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

    /// The call, once its response ended.
    pub fn finish(
        mut self,
        tag: Tag,
        status: u16,
        latency: std::time::Duration,
        wall: std::time::Duration,
        price: fn(&str) -> Price,
    ) -> MeteredCall {
        if !self.streaming {
            if let Ok(msg) = serde_json::from_slice::<MessageHead>(&self.body) {
                if !msg.model.is_empty() {
                    self.model = msg.model.clone();
                }
                self.message_id = msg.id.clone();
                self.take_usage(&msg.usage);
            }
        }
        MeteredCall {
            attempt: tag.attempt,
            role: tag.role,
            session: tag.session,
            cost_usd: price(&self.model).cost(&self.usage),
            model: self.model,
            message_id: self.message_id,
            status,
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cache_creation_input_tokens: self.usage.cache_creation_input_tokens,
            cache_read_input_tokens: self.usage.cache_read_input_tokens,
            latency_ms: latency.as_millis() as u64,
            wall_ms: wall.as_millis() as u64,
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum SseData {
    MessageStart {
        message: MessageHead,
    },
    MessageDelta {
        #[serde(default)]
        usage: Usage,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn credentials_are_picked_in_order() {
        let a = Access::from_vars(vars(&[
            ("ANTHROPIC_AUTH_TOKEN", "auth"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "oauth"),
            ("ANTHROPIC_API_KEY", "key"),
        ]))
        .expect("access");
        assert_eq!(a.credential, Credential::ApiKey("key".into()));
        assert_eq!(a.upstream, DEFAULT_UPSTREAM);
        let a = Access::from_vars(vars(&[
            ("ANTHROPIC_AUTH_TOKEN", "auth"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "oauth"),
            ("ANTHROPIC_API_KEY", ""),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
        ]))
        .expect("access");
        assert_eq!(a.credential, Credential::OAuth("oauth".into()));
        assert_eq!(a.upstream, "http://127.0.0.1:9");
        let a = Access::from_vars(vars(&[("ANTHROPIC_AUTH_TOKEN", "auth")])).expect("access");
        assert_eq!(a.credential, Credential::OAuth("auth".into()));
        assert_eq!(
            Access::from_vars(vars(&[])).map(|a| a.credential),
            Err(CredentialError::Missing)
        );
        assert!(matches!(
            Access::from_vars(vars(&[
                ("ANTHROPIC_API_KEY", "k"),
                ("CLAUDE_CODE_USE_BEDROCK", "1")
            ])),
            Err(CredentialError::Unmetered { .. })
        ));
        assert!(!format!("{:?}", Credential::ApiKey("sk-secret".into())).contains("sk-secret"));
    }

    #[test]
    fn auth_headers_are_replaced() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("session"));
        h.insert("authorization", HeaderValue::from_static("Bearer session"));
        h.insert("accept-encoding", HeaderValue::from_static("gzip, br"));
        h.insert(
            "anthropic-beta",
            HeaderValue::from_static("claude-code-20250219,x"),
        );
        h.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        let key = upstream_headers(&h, &Credential::ApiKey("sk-real".into()));
        assert_eq!(key["x-api-key"], "sk-real");
        assert!(key.get("authorization").is_none());
        assert!(key.get("accept-encoding").is_none());
        assert_eq!(key["anthropic-version"], "2023-06-01");
        let oauth = upstream_headers(&h, &Credential::OAuth("tok".into()));
        assert!(oauth.get("x-api-key").is_none());
        assert_eq!(oauth["authorization"], "Bearer tok");
        assert_eq!(
            oauth["anthropic-beta"],
            "claude-code-20250219,x,oauth-2025-04-20"
        );
    }

    #[test]
    fn only_the_session_token_passes() {
        let mut h = HeaderMap::new();
        assert!(!authorized("tok", &h));
        h.insert("x-api-key", HeaderValue::from_static("tok"));
        assert!(authorized("tok", &h));
        h.insert("x-api-key", HeaderValue::from_static("tox"));
        assert!(!authorized("tok", &h));
        h.insert("authorization", HeaderValue::from_static("Bearer tok"));
        assert!(authorized("tok", &h));
        assert!(!constant_time_eq(b"tok", b"toke"));
    }

    fn tag() -> Tag {
        Tag {
            role: Role::Critic,
            attempt: 2,
            session: 5,
        }
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
        // Every split point gives the same reading.
        for cut in [1, 7, 50, 123, stream.len() - 3] {
            let mut m = Meter::new(true, "requested".into());
            m.feed(&stream.as_bytes()[..cut]);
            m.feed(&stream.as_bytes()[cut..]);
            let call = m.finish(
                tag(),
                200,
                Default::default(),
                Default::default(),
                Price::for_model,
            );
            assert_eq!(call.model, "claude-haiku-5-5");
            assert_eq!(call.message_id, "msg_1");
            assert_eq!(
                (
                    call.input_tokens,
                    call.output_tokens,
                    call.cache_creation_input_tokens,
                    call.cache_read_input_tokens
                ),
                (100, 40, 2000, 30000),
                "cut at {cut}"
            );
            assert_eq!(
                (call.role, call.attempt, call.session),
                (Role::Critic, 2, 5)
            );
            let expected = Price::for_model("haiku").cost(&call.usage());
            assert!((call.cost_usd - expected).abs() < 1e-15);
        }
    }

    #[test]
    fn the_meter_reads_a_non_streaming_body() {
        let mut m = Meter::new(false, "sonnet".into());
        m.feed(br#"{"id":"msg_2","type":"message","model":"claude-sonnet-5-5","content":[],"#);
        m.feed(br#""usage":{"input_tokens":7,"output_tokens":3}}"#);
        let call = m.finish(
            tag(),
            200,
            Default::default(),
            Default::default(),
            Price::for_model,
        );
        assert_eq!(
            (call.model.as_str(), call.input_tokens, call.output_tokens),
            ("claude-sonnet-5-5", 7, 3)
        );
    }
}
