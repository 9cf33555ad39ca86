//! The metering gateway: loopd is the model endpoint its sessions talk to,
//! and the one way out of the sandbox.
//!
//! The agent runs as loopd's user, so anything its processes can reach — an
//! environment, a file, a socket — is not a place for the real credential.
//! Instead, each job serves this small HTTP/1 gateway on loopback (inside
//! the job's own network namespace when the network is `gateway-only`).
//! Every session gets a fresh *session token* ([`Gateway::open_session`]),
//! revoked when the session ends; the real credential stays in loopd's
//! memory. The gateway is default-deny:
//!
//! 1. a request without the open session's token is refused (401);
//! 2. its target must be exactly one of the agent protocol's endpoints or
//!    loopd's own ([`target`]), matched on the raw request target before any
//!    normalisation — everything else is refused (403) and journaled;
//! 3. a model call's body must be one the gateway can meter (the
//!    [`Wire`]'s reading of it), and its worst case is reserved against the
//!    job's caps beside every call in flight ([`spend`]; its images and
//!    documents priced by their pixels and pages, [`media`]); a call that does
//!    not fit is forwarded with a smaller `max_tokens`, or refused (HTTP 400,
//!    which the CLI does not retry);
//! 4. the upstream request is built from the matched endpoint with an
//!    allow-list of headers and the real credential, the body byte for byte
//!    (but for a clamped `max_tokens`) so prompt-cache breakpoints hold;
//! 5. the answer streams back chunk by chunk while the [`Meter`] reads its
//!    usage; when it ends the call settles to the metered usage — or to its
//!    reservation when it ended without one (a client gone before
//!    `message_delta`, an upstream cut) — and one [`MeteredCall`] is
//!    reported.
//!
//! loopd's own endpoints ([`channel`]) carry the hook's questions and the
//! agent's escalation: nothing that crosses from the sandbox to loopd is a
//! file an agent process could write.
//!
//! A `claude -p` the agent starts from its Bash tool inherits the same base
//! URL and token, so it is metered and capped like the agent itself.

pub mod channel;
pub mod json;
pub mod media;
pub mod record;
pub mod spend;
pub mod target;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::events::Usage;
use super::{Prices, Role};
pub use channel::{Channel, NoChannel};
use record::Record;
pub use spend::{Grant, Limits, Refusal, Spend};
use target::{Endpoint, Kind};

/// The real credential: only ever in loopd's memory and on the upstream
/// request (where and how, the agent's [`Wire`] decides).
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// An API key sent in a header of its own (`x-api-key`).
    ApiKey(String),
    /// A subscription's OAuth token, sent as a bearer with the provider's
    /// OAuth flag.
    OAuth(String),
    /// An API key sent as `Authorization: Bearer`.
    Bearer(String),
}

/// Never print a credential, not even in a debug log.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::ApiKey(_) => "Credential::ApiKey(<redacted>)",
            Credential::OAuth(_) => "Credential::OAuth(<redacted>)",
            Credential::Bearer(_) => "Credential::Bearer(<redacted>)",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialError {
    #[error("no model credential for {agent}: none of {} is set", vars.join(", "))]
    Missing {
        agent: &'static str,
        vars: Vec<&'static str>,
    },
    #[error("`{var}` is set: loopd cannot meter or cap those calls, so it refuses to run them")]
    Unmetered { var: String },
}

/// The credentials picked when loopd started, by agent name.
pub type AccessMap = std::collections::BTreeMap<&'static str, Access>;

/// The credential and the upstream of one agent, picked once when loopd
/// starts — before anything of a job runs.
#[derive(Debug, Clone)]
pub struct Access {
    pub credential: Credential,
    /// Without a trailing slash.
    pub upstream: String,
}

impl Access {
    /// The upstream from a variable's value, else `default`, without a
    /// trailing slash.
    pub fn upstream(value: Option<String>, default: &str) -> String {
        value
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| default.to_owned())
            .trim()
            .trim_end_matches('/')
            .to_owned()
    }
}

/// The largest request body forwarded (a long conversation is a few MB).
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// How many refused requests and hook denials of one session are
/// journaled one by one; beyond that they are only counted.
const MAX_REFUSED_EVENTS: u64 = 64;
const MAX_DENIAL_EVENTS: u64 = 256;

/// Which session the gateway's calls are billed to. A nested `claude -p`
/// started from the agent's Bash is billed to the agent session that
/// started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    pub role: Role,
    pub attempt: u32,
    pub session: u32,
}

/// How a call's cost was settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// From the usage the answer reported.
    #[default]
    Metered,
    /// The answer ended without its final usage: billed at its
    /// reservation, the most it can have cost.
    Reserved,
    /// Upstream answered with an error: nothing billed.
    Failed,
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
    #[serde(default)]
    pub settled: Settled,
    /// The `max_tokens` the call was forwarded with, when the gateway
    /// clamped it to what the budget could cover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clamped_max_tokens: Option<u64>,
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

/// What a [`Meter`] has read of one response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub model: String,
    pub message_id: String,
    pub usage: Usage,
    /// The response said what it read (`message_start`).
    pub started: bool,
    /// The response said what it cost in full (`message_delta`, or a whole
    /// non-streamed body).
    pub complete: bool,
}

/// Reads the usage of one response as it passes.
pub trait Meter {
    fn feed(&mut self, chunk: &[u8]);
    fn reading(&self) -> Reading;
}

/// One agent protocol on the wire: what the gateway forwards, how it reads
/// a call and its answer, and which headers reach upstream.
pub trait Wire: Send + Sync {
    /// The endpoints forwarded (exact request targets).
    fn endpoints(&self) -> &'static [Endpoint];
    /// What a model call's body asks for; `Err` when the gateway cannot
    /// meter it (or it asks for something billed outside the usage).
    fn ask(&self, body: &[u8]) -> Result<spend::Ask, String>;
    /// Check the body of a free endpoint's request (a token count): `Err`
    /// for what it must not carry upstream. No default: every protocol
    /// says what its free endpoints may take.
    fn check_free(&self, body: &[u8]) -> Result<(), String>;
    /// The smallest `max_tokens` the call works with (above a thinking
    /// budget, say); 0 when any will do.
    fn min_output(&self, _body: &[u8]) -> u64 {
        0
    }
    /// The body with its output bound set to `max_tokens`, read back to be
    /// sure; `None` when it cannot be rewritten exactly.
    fn with_max_tokens(&self, body: &[u8], max_tokens: u64) -> Option<Vec<u8>>;
    /// A meter for one response.
    fn meter(&self, streaming: bool, requested_model: &str) -> Box<dyn Meter + Send>;
    /// The upstream request's headers: the allow-listed ones of the client's
    /// request, and the real credential.
    fn upstream_headers(&self, from: &HeaderMap, credential: &Credential) -> HeaderMap;
    /// An error body in the protocol's own shape.
    fn error_body(&self, kind: &str, message: &str) -> Bytes;
}

/// One agent's way out through the gateway: its protocol, its credential
/// and upstream, its prices.
#[derive(Clone)]
pub struct Vendor {
    pub name: &'static str,
    pub wire: Arc<dyn Wire>,
    pub access: Access,
    pub prices: Prices,
}

impl std::fmt::Debug for Vendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vendor")
            .field("name", &self.name)
            .field("upstream", &self.access.upstream)
            .finish_non_exhaustive()
    }
}

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

/// What a gateway needs to start.
pub struct Config {
    /// The agents its sessions are (a job's agent and critic may be of two
    /// vendors); a session talks its own vendor's protocol only.
    pub vendors: Vec<Vendor>,
    /// The job's caps, and what it spent before this gateway started.
    pub limits: Limits,
    pub before: Spend,
    pub channel: Arc<dyn Channel>,
    /// Listen here (a socket made inside the job's network namespace);
    /// `None`: a fresh one on `127.0.0.1`.
    pub listener: Option<std::net::TcpListener>,
}

/// The session whose token is valid now.
struct Open {
    token: String,
    tag: Tag,
    vendor: usize,
}

struct Shared {
    vendors: Vec<Vendor>,
    /// Each vendor's endpoints and loopd's own.
    endpoints: Vec<Vec<Endpoint>>,
    channel: Arc<dyn Channel>,
    client: reqwest::Client,
    open: Mutex<Option<Open>>,
    /// The last session's tag: what a call still in flight after its
    /// session closed is billed to.
    last_tag: Mutex<Tag>,
    ledger: Mutex<spend::Ledger>,
    refusal: Mutex<Option<Refusal>>,
    events: mpsc::UnboundedSender<Record>,
    in_flight: watch::Sender<usize>,
    /// This session's refused requests, denials and escalations.
    refused: AtomicU64,
    denied: AtomicU64,
    escalated: AtomicU64,
}

/// A running gateway; stops serving when dropped.
pub struct Gateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: mpsc::UnboundedReceiver<Record>,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Serve until dropped (inside a tokio runtime).
    pub fn start(config: Config) -> Result<Gateway, GatewayError> {
        let listener = match config.listener {
            Some(l) => Ok(l),
            None => std::net::TcpListener::bind(("127.0.0.1", 0)),
        }
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
                upstream: config
                    .vendors
                    .iter()
                    .map(|v| v.access.upstream.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                source,
            })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let endpoints = config
            .vendors
            .iter()
            .map(|v| {
                let mut e = v.wire.endpoints().to_vec();
                e.extend_from_slice(target::LOOPD_ENDPOINTS);
                e
            })
            .collect();
        let tag = Tag {
            role: Role::Agent,
            attempt: 0,
            session: 0,
        };
        let shared = Arc::new(Shared {
            vendors: config.vendors,
            endpoints,
            channel: config.channel,
            client,
            open: Mutex::new(None),
            last_tag: Mutex::new(tag),
            ledger: Mutex::new(spend::Ledger::new(config.limits, config.before)),
            refusal: Mutex::new(None),
            events: tx,
            in_flight: watch::channel(0).0,
            refused: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            escalated: AtomicU64::new(0),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        for v in &shared.vendors {
            tracing::info!(%addr, agent = v.name, upstream = %v.access.upstream, "metering gateway listening");
        }
        Ok(Gateway {
            addr,
            shared,
            events: rx,
            task,
        })
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// What sessions get as their model endpoint.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Open a session of the agent `vendor` (an index into the vendors it
    /// started with): calls from now on are billed to `tag` and must speak
    /// that vendor's protocol, and only the token returned is valid (the
    /// previous session's no longer is).
    pub fn open_session(&self, tag: Tag, vendor: usize) -> String {
        let token = session_token();
        *lock(&self.shared.open) = Some(Open {
            token: token.clone(),
            tag,
            vendor: vendor.min(self.shared.vendors.len().saturating_sub(1)),
        });
        *lock(&self.shared.last_tag) = tag;
        self.shared.refused.store(0, Ordering::Relaxed);
        self.shared.denied.store(0, Ordering::Relaxed);
        self.shared.escalated.store(0, Ordering::Relaxed);
        token
    }

    /// Close the session: its token is revoked (calls in flight finish).
    pub fn close_session(&self) {
        *lock(&self.shared.open) = None;
    }

    /// What happened since the last look, in order.
    pub fn events(&mut self) -> &mut mpsc::UnboundedReceiver<Record> {
        &mut self.events
    }

    /// What this gateway's calls settled to since it started.
    pub fn spent(&self) -> Spend {
        lock(&self.shared.ledger).settled()
    }

    /// What the calls in flight hold.
    pub fn reserved(&self) -> Spend {
        lock(&self.shared.ledger).reserved()
    }

    /// Requests refused in the open (or last) session, journaled or not.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// The cap refusal since the last look, if the gateway refused a call.
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

/// 32 random bytes, hex: a session token.
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

/// Does the request carry `token` (as `x-api-key` or a bearer)?
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

fn respond(status: StatusCode, body: Bytes) -> Response<GatewayBody> {
    let mut resp = Response::new(GatewayBody::Full(Some(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

impl Shared {
    /// An error in the open (or first) vendor's protocol's shape.
    fn error(&self, status: StatusCode, kind: &str, message: &str) -> Response<GatewayBody> {
        let v = lock(&self.open).as_ref().map_or(0, |o| o.vendor);
        respond(status, self.vendors[v].wire.error_body(kind, message))
    }

    /// The open session's tag and vendor, if `headers` carry its token.
    fn session_of(&self, headers: &HeaderMap) -> Option<(Tag, usize)> {
        let open = lock(&self.open);
        open.as_ref()
            .filter(|o| authorized(&o.token, headers))
            .map(|o| (o.tag, o.vendor))
    }

    /// Refuse a request: logged, reported (the first ones of a session one
    /// by one), answered with `status`.
    fn refuse(
        &self,
        method: &hyper::Method,
        uri: &hyper::Uri,
        status: StatusCode,
        kind: &str,
        why: &str,
    ) -> Response<GatewayBody> {
        let target = target::printable(uri);
        tracing::warn!(%method, %target, why, "gateway refused a request");
        let n = self.refused.fetch_add(1, Ordering::Relaxed);
        if n < MAX_REFUSED_EVENTS {
            let tag = *lock(&self.last_tag);
            let _ = self.events.send(Record::Refused(channel::Refused {
                attempt: tag.attempt,
                session: tag.session,
                method: method.as_str().chars().take(16).collect(),
                target,
                why: why.to_owned(),
            }));
        }
        self.error(status, kind, &format!("loopd gateway: {why}"))
    }
}

/// Read a whole request body, at most `max` bytes.
async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, String> {
    let mut buf = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(Bytes::from(buf)),
            Some(Err(e)) => return Err(format!("cannot read the request: {e}")),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > max {
                        return Err(format!("the request is larger than {max} bytes"));
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
    Ok(serve(shared, req).await.unwrap_or_else(|r| r))
}

async fn serve(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<GatewayBody>, Response<GatewayBody>> {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let (method, uri) = (&parts.method, &parts.uri);
    let Some((tag, vendor)) = shared.session_of(&parts.headers) else {
        return Err(shared.refuse(
            method,
            uri,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "this endpoint serves loopd's open session only (no valid session token)",
        ));
    };
    let (endpoint, query) = match target::route(method, uri, &shared.endpoints[vendor]) {
        Ok(m) => m,
        Err(miss) => {
            return Err(shared.refuse(
                method,
                uri,
                StatusCode::FORBIDDEN,
                "permission_error",
                miss.as_str(),
            ))
        }
    };
    let endpoint = *endpoint;
    let max = match endpoint.kind {
        Kind::Hook => channel::MAX_HOOK_BYTES,
        Kind::Escalate => channel::MAX_ESCALATION_BYTES,
        _ => MAX_REQUEST_BYTES,
    };
    let body = match read_body(body, max).await {
        Ok(b) => b,
        Err(why) => {
            return Err(shared.refuse(
                method,
                uri,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                &why,
            ))
        }
    };
    match endpoint.kind {
        Kind::Hook => Ok(hook(&shared, tag, &body)),
        Kind::Escalate => Ok(escalate(&shared, tag, method, uri, &body)),
        Kind::Probe => Ok(respond(StatusCode::OK, Bytes::new())),
        Kind::Free => {
            if let Err(why) = shared.vendors[vendor].wire.check_free(&body) {
                return Err(shared.refuse(
                    method,
                    uri,
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &why,
                ));
            }
            let call = Forward {
                vendor,
                endpoint,
                query,
                headers: parts.headers,
                grant: None,
                started,
            };
            forward(shared, call, body).await
        }
        Kind::Call => {
            let (grant, body) = reserve(&shared, vendor, method, uri, body).map_err(|r| *r)?;
            let call = Forward {
                vendor,
                endpoint,
                query,
                headers: parts.headers,
                grant: Some(grant),
                started,
            };
            forward(shared, call, body).await
        }
    }
}

/// The hook's question: decided by the job, a denial reported.
fn hook(shared: &Shared, tag: Tag, body: &[u8]) -> Response<GatewayBody> {
    let decision = match serde_json::from_slice::<channel::HookInput>(body) {
        Ok(input) => {
            let decision = shared.channel.pre_tool_use(tag, &input);
            if let channel::HookDecision::Deny { reason } = &decision {
                if shared.denied.fetch_add(1, Ordering::Relaxed) < MAX_DENIAL_EVENTS {
                    let _ = shared.events.send(Record::Denied(channel::Denial {
                        attempt: tag.attempt,
                        session: tag.session,
                        tool: input.tool_name.chars().take(200).collect(),
                        tool_use_id: input.tool_use_id.clone(),
                        input: input.tool_input.clone(),
                        reason: reason.clone(),
                    }));
                }
            }
            decision
        }
        // Fail closed: a question loopd cannot read is denied.
        Err(e) => channel::HookDecision::Deny {
            reason: format!("loopd could not read the hook event ({e}); refusing the call"),
        },
    };
    respond(
        StatusCode::OK,
        Bytes::from(serde_json::to_vec(&decision).expect("a decision serializes")),
    )
}

/// The agent's escalation: from an agent session of a job that allows it,
/// once per session.
fn escalate(
    shared: &Shared,
    tag: Tag,
    method: &hyper::Method,
    uri: &hyper::Uri,
    body: &[u8],
) -> Response<GatewayBody> {
    if tag.role != Role::Agent || !shared.channel.escalation() {
        return shared.refuse(
            method,
            uri,
            StatusCode::FORBIDDEN,
            "permission_error",
            "escalation is not open to this session",
        );
    }
    let req = match serde_json::from_slice::<channel::EscalationRequest>(body)
        .map_err(|e| e.to_string())
        .and_then(|r| r.check().map(|()| r))
    {
        Ok(r) => r,
        Err(why) => {
            return shared.error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("loopd gateway: not an escalation: {why}"),
            )
        }
    };
    let first = shared.escalated.fetch_add(1, Ordering::Relaxed) == 0;
    if first {
        let _ = shared.events.send(Record::Escalated {
            attempt: tag.attempt,
            session: tag.session,
            request: req,
        });
    }
    respond(
        StatusCode::OK,
        Bytes::from(serde_json::json!({ "written": first }).to_string()),
    )
}

/// Read a model call, reserve its worst case, clamp its output bound to
/// what fits.
fn reserve(
    shared: &Arc<Shared>,
    vendor: usize,
    method: &hyper::Method,
    uri: &hyper::Uri,
    body: Bytes,
) -> Result<(Grant, Bytes), Box<Response<GatewayBody>>> {
    let v = &shared.vendors[vendor];
    let ask = v.wire.ask(&body).map_err(|why| {
        Box::new(shared.refuse(
            method,
            uri,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &why,
        ))
    })?;
    let Some(price) = v.prices.of(&ask.model) else {
        let why = format!("loopd has no price for the model `{}`, so it cannot cap its cost: refused (price it in loopd.toml's `[prices.\"{}\"]`)", ask.model, ask.model);
        return Err(Box::new(shared.refuse(
            method,
            uri,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &why,
        )));
    };
    let min_output = v.wire.min_output(&body);
    let refused = |refusal: Refusal| {
        tracing::warn!(model = %ask.model, reason = %refusal.reason, "gateway refused a call: {}", refusal.message);
        let message = format!("loopd: {} ({})", refusal.message, refusal.reason);
        *lock(&shared.refusal) = Some(refusal);
        Box::new(shared.error(StatusCode::BAD_REQUEST, "invalid_request_error", &message))
    };
    let grant = lock(&shared.ledger).reserve(&ask, price).map_err(refused)?;
    if grant.max_tokens == ask.max_tokens {
        return Ok((grant, body));
    }
    let rewritten = (grant.max_tokens >= min_output)
        .then(|| v.wire.with_max_tokens(&body, grant.max_tokens))
        .flatten();
    match rewritten {
        Some(b) => {
            tracing::info!(model = %ask.model, asked = ask.max_tokens, granted = grant.max_tokens, "gateway clamped a call's max_tokens to the remaining budget");
            Ok((grant, Bytes::from(b)))
        }
        None => {
            lock(&shared.ledger).release(&grant);
            Err(refused(Refusal {
                reason: crate::outcome::Reason::BudgetUsd,
                message: format!(
                    "the job's remaining budget covers {} output tokens of the {} this call asks for, and its max_tokens cannot be lowered to that",
                    grant.max_tokens, ask.max_tokens
                ),
            }))
        }
    }
}

/// A matched request on its way upstream.
struct Forward {
    vendor: usize,
    endpoint: Endpoint,
    query: Option<String>,
    headers: HeaderMap,
    /// A model call's reservation (`None`: a free endpoint).
    grant: Option<Grant>,
    started: Instant,
}

/// Forward a matched request upstream and stream the answer back; a model
/// call (`grant`) is metered and settled when its answer ends.
async fn forward(
    shared: Arc<Shared>,
    call: Forward,
    body: Bytes,
) -> Result<Response<GatewayBody>, Response<GatewayBody>> {
    let Forward {
        vendor,
        endpoint,
        query,
        headers,
        grant,
        started,
    } = call;
    let v = shared.vendors[vendor].clone();
    let in_flight = grant.as_ref().map(|_| InFlight::new(shared.clone()));
    let requested_model = grant
        .as_ref()
        .and_then(|_| v.wire.ask(&body).ok())
        .map(|a| a.model)
        .unwrap_or_default();
    let url = format!(
        "{}{}",
        v.access.upstream,
        endpoint.upstream(query.as_deref())
    );
    let method = hyper::Method::from_bytes(endpoint.method.as_bytes()).expect("a listed method");
    let sent = shared
        .client
        .request(method, &url)
        .headers(v.wire.upstream_headers(&headers, &v.access.credential))
        .body(body)
        .send()
        .await;
    let upstream = match sent {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %without_url(&e), upstream = %v.access.upstream, "gateway: upstream unreachable");
            if let Some(grant) = &grant {
                // Never connected: nothing reached upstream. Otherwise the
                // call may have run: it costs its reservation.
                if e.is_connect() {
                    lock(&shared.ledger).release(grant);
                } else {
                    settle(
                        &shared,
                        &v,
                        grant,
                        Reading::default(),
                        0,
                        (started, started.elapsed()),
                        &requested_model,
                    );
                }
            }
            drop(in_flight);
            return Err(shared.error(
                StatusCode::BAD_GATEWAY,
                "api_error",
                &format!(
                    "loopd gateway: the upstream is unreachable: {}",
                    without_url(&e)
                ),
            ));
        }
    };
    let latency = started.elapsed();
    let status = upstream.status();
    let mut resp = Response::builder().status(status.as_u16());
    let streaming = upstream
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    for (name, value) in upstream.headers() {
        if !hop_by_hop(name) {
            resp = resp.header(name, value);
        }
    }
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    let resp = resp.body(GatewayBody::Stream(rx)).map_err(|e| {
        shared.error(
            StatusCode::BAD_GATEWAY,
            "api_error",
            &format!("loopd gateway: {e}"),
        )
    })?;
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let mut upstream = upstream;
        let mut meter = grant
            .as_ref()
            .map(|_| v.wire.meter(streaming, &requested_model));
        loop {
            // A client gone while upstream is silent ends the call too.
            let next = tokio::select! {
                next = upstream.chunk() => next,
                () = tx.closed() => break,
            };
            match next {
                Ok(Some(chunk)) => {
                    if let Some(m) = meter.as_mut() {
                        m.feed(&chunk);
                    }
                    if tx.send(chunk).await.is_err() {
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
        if let (Some(grant), Some(meter)) = (grant, meter) {
            settle(
                &shared,
                &v,
                &grant,
                meter.reading(),
                status.as_u16(),
                (started, latency),
                &requested_model,
            );
        }
    });
    Ok(resp)
}

/// Settle a call: the metered usage when the answer reported it in full,
/// nothing when upstream refused it, else its reservation.
fn settle(
    shared: &Shared,
    vendor: &Vendor,
    grant: &Grant,
    reading: Reading,
    status: u16,
    (started, latency): (Instant, std::time::Duration),
    requested_model: &str,
) {
    let failed = status != 0 && !(200..300).contains(&status);
    let (usage, settled) = if failed {
        (Usage::default(), Settled::Failed)
    } else if reading.complete {
        (reading.usage, Settled::Metered)
    } else {
        let seen = reading.started.then_some(&reading.usage);
        (grant.worst_case(seen), Settled::Reserved)
    };
    let model = if reading.model.is_empty() {
        requested_model.to_owned()
    } else {
        reading.model
    };
    // Priced at the dearer of the answered and the requested model: the
    // reservation was taken at the requested one.
    let price = vendor
        .prices
        .of(&model)
        .map_or(grant.price, |p| grant.price.max(p));
    let cost = if failed {
        Spend::default()
    } else {
        Spend::of_usage(&usage, price)
    };
    lock(&shared.ledger).settle(grant, &cost);
    let tag = *lock(&shared.last_tag);
    if settled == Settled::Reserved {
        tracing::warn!(model = %model, cost_usd = cost.cost_usd, "a call ended without its final usage: billed at its reservation");
    }
    let call = MeteredCall {
        attempt: tag.attempt,
        role: tag.role,
        session: tag.session,
        model,
        message_id: reading.message_id,
        status,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cache_creation_input_tokens: usage.cache_creation_input_tokens,
        cache_read_input_tokens: usage.cache_read_input_tokens,
        cost_usd: cost.cost_usd,
        latency_ms: latency.as_millis() as u64,
        wall_ms: started.elapsed().as_millis() as u64,
        settled,
        clamped_max_tokens: (grant.max_tokens < grant.asked).then_some(grant.max_tokens),
    };
    tracing::debug!(model = %call.model, cost_usd = call.cost_usd, "gateway metered a call");
    let _ = shared.events.send(Record::Metered(call));
}

/// Headers that belong to one hop, or that the gateway sets itself.
fn hop_by_hop(name: &HeaderName) -> bool {
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

/// reqwest errors name the URL; the upstream URL is not a secret, but keep
/// the message short and free of query strings.
fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(i) = e.find(" for url (") {
        e.truncate(i);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
