//! The scripted model: a loopback HTTP server that speaks the Anthropic
//! Messages API (SSE streaming) — and the OpenAI Responses API, for Codex
//! ([`responses`]) — and plays back scripted turns.
//!
//! The real Claude Code CLI is pointed at it with `ANTHROPIC_BASE_URL`, so the
//! CLI really runs its tools, permissions and hooks on a fixture repository;
//! only the model is scripted.
//!
//! Routing. Every `claude -p` run sends a distinct `x-claude-code-session-id`
//! header. A session whose request offers the `StructuredOutput` tool is a
//! *critic* session (loopd passes `--json-schema` only to the critic); any
//! other is an *agent* session. The n-th agent session to appear plays
//! `agent[n]`, the n-th critic session `critic[n]`. Within a session, the turn
//! played is the number of assistant messages already in the request.
//!
//! Placeholders. Every string in a tool input may contain `{cwd}`, replaced by
//! the session's working directory (read from the system prompt's
//! `Primary working directory:` line), because tool inputs need absolute paths.
//!
//! A request that the script does not cover gets HTTP 400 `scenario exhausted`,
//! so an unexpected extra call fails loudly instead of passing by accident.
//!
//! The wire log. Every request that reaches the server — any method, any
//! path, as its raw target — is logged before anything else ([`Wire`]), so a
//! test can prove that a request never reached the upstream at all.
//!
//! Burst calls. A `POST /v1/messages` whose first prompt starts with
//! `LOOPD-BURST output=N stall_ms=M` is no session's: it is answered at once
//! with content, then (after `M` ms) `min(N, max_tokens)` output tokens, and
//! billed that whole output when it arrives, whether or not the client
//! stays to read it — the upstream's own count of what a caller spent
//! ([`ScriptedModel::bursts`]). Its input is 100 tokens plus its PNG images
//! at the provider's formula ([`image_tokens`]). Like the real API, it
//! routes on the path as a server normalises it (`/v1/./messages` is
//! `/v1/messages`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A whole scenario: the scripts of the agent sessions and of the critic
/// sessions, in the order the sessions are expected to start.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub agent: Vec<SessionScript>,
    #[serde(default)]
    pub critic: Vec<SessionScript>,
    /// The examiner's sessions (`[examiner]`), in order.
    #[serde(default)]
    pub examiner: Vec<SessionScript>,
}

/// The turns one `claude -p` session plays, one per model call.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SessionScript {
    #[serde(default, rename = "turn")]
    pub turns: Vec<Turn>,
    /// When the session's prompt contains this text, `instead` is played in
    /// its place: an agent that behaves differently when its prompt carries
    /// a lesson.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_prompt_contains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instead: Option<Box<SessionScript>>,
}

/// One answer of the model.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Wait this long before answering (headers included).
    #[serde(default)]
    pub delay_ms: u64,
    /// Wait this long after `message_start` before the rest of the stream:
    /// a model that starts answering and then stalls.
    #[serde(default)]
    pub stall_after_start_ms: u64,
    /// Answer with this HTTP error instead of a message.
    #[serde(default)]
    pub error: Option<HttpError>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default, rename = "block")]
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpError {
    pub status: u16,
    #[serde(default = "default_error_message")]
    pub message: String,
}

fn default_error_message() -> String {
    "scripted error".to_owned()
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cache writes (reported in `message_start`).
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Cache reads (reported in `message_start`).
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Default for Usage {
    fn default() -> Self {
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        }
    }
}

/// A content block of an answer.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Block {
    Text { text: String },
    ToolUse { name: String, input: Value },
}

/// Which kind of session a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Agent,
    Critic,
    /// A structured-answer session whose prompt is the examiner's.
    Examiner,
}

/// The first words of the examiner's prompt ([`loopd::examiner::instruction`]).
pub const EXAMINER_MARKER: &str = "You are the examiner of a coding task";

/// A structured-answer session is the critic's unless its prompt is the
/// examiner's.
fn structured_role(body: &Value) -> Role {
    if body.to_string().contains(EXAMINER_MARKER) {
        Role::Examiner
    } else {
        Role::Critic
    }
}

/// One request as the server saw it, for tests to assert on.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub role: Role,
    /// Index of the session within its role (0 = first agent session, ...).
    pub session: usize,
    pub turn: usize,
    pub session_id: String,
    pub model: String,
    /// Whether the script covered this request.
    pub scripted: bool,
    /// The API key the CLI sent (`x-api-key`, else a bearer token).
    pub api_key: Option<String>,
    /// The `x-api-key` header, as sent.
    pub x_api_key: Option<String>,
    /// The `authorization` header, as sent.
    pub authorization: Option<String>,
    /// The `anthropic-beta` header, as sent.
    pub anthropic_beta: Option<String>,
    pub body: Value,
}

/// A request as it arrived on the wire, before any routing.
#[derive(Debug, Clone, Serialize)]
pub struct Wire {
    pub method: String,
    /// The raw request target.
    pub target: String,
    /// The credential it carried (`x-api-key`, else a bearer token).
    pub api_key: Option<String>,
}

/// A burst call as the upstream billed it.
#[derive(Debug, Clone, Serialize)]
pub struct Burst {
    pub model: String,
    pub max_tokens: u64,
    pub usage: Usage,
}

impl Recorded {
    /// The text of the first user message: the prompt the session was given
    /// (the CLI may add system-reminder blocks; they are included).
    pub fn prompt(&self) -> String {
        first_prompt(&self.body)
    }

    /// Names of the tools the request offered the model.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    scenario: Scenario,
    /// Each session's role, index, and whether it plays its `instead`.
    sessions: HashMap<String, (Role, usize, bool)>,
    started: HashMap<Role, usize>,
    log: Vec<Recorded>,
    wire: Vec<Wire>,
    bursts: Vec<Burst>,
    /// Play the scenario once per working directory (jobs side by side,
    /// each in its own worktree): sessions are counted per directory.
    per_dir: bool,
    started_in: HashMap<(String, Role), usize>,
    /// Requests so far of each Codex session (its next turn).
    codex_turns: HashMap<String, usize>,
    /// Choose a new session's script by what its first request says
    /// (instead of by order): a session re-run after a crash then gets the
    /// same script as the first time.
    pick: Option<Picker>,
}

/// Chooses a new session's script from its role and first request body.
pub type Picker = std::sync::Arc<dyn Fn(Role, &Value) -> Option<usize> + Send + Sync>;

/// A running scripted model. Dropping it stops the server.
pub struct ScriptedModel {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ScriptedModel {
    /// Start on `127.0.0.1:port` (0 = any free port) in a thread of its own.
    pub fn start(scenario: Scenario) -> ScriptedModel {
        Self::start_on(scenario, 0)
    }

    /// Play `scenario` once for every working directory the requests name:
    /// jobs that run side by side each get the whole script, whatever the
    /// interleaving.
    pub fn start_per_dir(scenario: Scenario) -> ScriptedModel {
        let m = Self::start_on(scenario, 0);
        m.state.lock().expect("model state").per_dir = true;
        m
    }

    /// Like [`Self::start_per_dir`], with each new session's script chosen
    /// by `pick` from its first request.
    pub fn start_per_dir_picking(scenario: Scenario, pick: Picker) -> ScriptedModel {
        let m = Self::start_per_dir(scenario);
        m.state.lock().expect("model state").pick = Some(pick);
        m
    }

    /// How many sessions of a role have started in each working directory.
    pub fn session_counts_per_dir(&self, role: Role) -> Vec<(String, usize)> {
        let st = self.state.lock().expect("model state");
        let mut v: Vec<(String, usize)> = st
            .started_in
            .iter()
            .filter(|((_, r), _)| *r == role)
            .map(|((d, _), n)| (d.clone(), *n))
            .collect();
        v.sort();
        v
    }

    pub fn start_on(scenario: Scenario, port: u16) -> ScriptedModel {
        let state = Arc::new(Mutex::new(State {
            scenario,
            ..State::default()
        }));
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |method, uri, headers, body| {
            handle(shared.clone(), method, uri, headers, body)
        });
        let (addr, stop) = serve(app, port);
        ScriptedModel {
            addr,
            state,
            stop: Some(stop),
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request seen so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().expect("model state").log.clone()
    }

    /// The requests of one session, in turn order.
    pub fn session(&self, role: Role, index: usize) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.role == role && r.session == index)
            .collect()
    }

    /// How many sessions of a role have started.
    pub fn session_count(&self, role: Role) -> usize {
        *self
            .state
            .lock()
            .expect("model state")
            .started
            .get(&role)
            .unwrap_or(&0)
    }

    /// Every request that reached the server, in arrival order.
    pub fn wire(&self) -> Vec<Wire> {
        self.state.lock().expect("model state").wire.clone()
    }

    /// The burst calls the upstream billed.
    pub fn bursts(&self) -> Vec<Burst> {
        self.state.lock().expect("model state").bursts.clone()
    }

    /// Requests the script did not cover (they were answered with HTTP 400).
    pub fn unscripted(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| !r.scripted)
            .collect()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serve `app` on `127.0.0.1:port` (0 = any free port) on a thread and
/// runtime of its own, until the returned sender fires or is dropped. The
/// thread is not joined: a stalled turn may hold a connection open, and the
/// thread ends with the process.
pub fn serve(app: axum::Router, port: u16) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind loopback");
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    let addr = listener.local_addr().expect("local addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime for a test server");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
    });
    (addr, stop)
}

/// The text of a request's first user message.
fn first_prompt(body: &Value) -> String {
    match &body["messages"][0]["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn working_dir(value: &Value) -> Option<String> {
    // The CLI has moved this line between the system prompt and an injected
    // message across versions, so look in every string of the request.
    match value {
        Value::String(s) => s.lines().find_map(|line| {
            line.trim()
                .trim_start_matches("- ")
                .strip_prefix("Primary working directory:")
                .map(|rest| rest.trim().to_owned())
        }),
        Value::Array(items) => items.iter().find_map(working_dir),
        Value::Object(map) => map.values().find_map(working_dir),
        _ => None,
    }
}

fn substitute(value: &Value, cwd: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("{cwd}", cwd)),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, cwd)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, cwd)))
                .collect(),
        ),
        other => other.clone(),
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let credential = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned)
        });
    state.lock().expect("model state").wire.push(Wire {
        method: method.to_string(),
        target: uri.to_string(),
        api_key: credential.clone(),
    });
    if method == Method::HEAD || method == Method::GET {
        return StatusCode::OK.into_response();
    }
    let path = normalised(uri.path());
    if method != Method::POST || (path != "/v1/messages" && path != "/v1/responses") {
        return StatusCode::NOT_FOUND.into_response();
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("bad json: {e}")).into_response(),
    };
    if path == "/v1/responses" {
        return responses(state, headers, body, credential).await;
    }
    if let Some(spec) = first_prompt(&body).strip_prefix("LOOPD-BURST") {
        return burst(&state, &body, spec);
    }
    let session_id = headers
        .get("x-claude-code-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no-session")
        .to_owned();
    let offers_structured_output = body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "StructuredOutput"));
    let role = if offers_structured_output {
        structured_role(&body)
    } else {
        Role::Agent
    };
    let turn_index = body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0);
    let model = body["model"].as_str().unwrap_or("unknown").to_owned();
    let api_key = credential;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (x_api_key, authorization, anthropic_beta) = (
        header("x-api-key"),
        header("authorization"),
        header("anthropic-beta"),
    );
    let streaming = body["stream"].as_bool().unwrap_or(false);
    let cwd = working_dir(&body).unwrap_or_default();

    let turn = {
        let mut st = state.lock().expect("model state");
        let prompt = first_prompt(&body);
        let (session, instead) = session_of(&mut st, &session_id, role, &cwd, &body, &prompt);
        let turn = scripted_turn(&st, role, session, instead, turn_index);
        st.log.push(Recorded {
            role,
            session,
            turn: turn_index,
            session_id: session_id.clone(),
            model: model.clone(),
            scripted: turn.is_some(),
            api_key: api_key.clone(),
            x_api_key,
            authorization,
            anthropic_beta,
            body: body.clone(),
        });
        turn
    };

    let Some(turn) = turn else {
        return api_error(400, "scenario exhausted: no scripted turn for this request");
    };
    if turn.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(turn.delay_ms)).await;
    }
    if let Some(err) = &turn.error {
        return api_error(err.status, &err.message);
    }
    let blocks: Vec<Block> = turn
        .blocks
        .iter()
        .map(|b| match b {
            Block::ToolUse { name, input } => Block::ToolUse {
                name: name.clone(),
                input: substitute(input, &cwd),
            },
            other => other.clone(),
        })
        .collect();
    let message_id = format!("msg_scripted_{}_{}", short(&session_id), turn_index);
    if streaming {
        sse_response(
            message_id,
            model,
            blocks,
            turn.usage,
            turn.stall_after_start_ms,
        )
    } else {
        json_response(message_id, model, blocks, turn.usage)
    }
}

/// The script index of a session (and whether it plays its `instead`),
/// assigned when its first request arrives.
fn session_of(
    st: &mut State,
    session_id: &str,
    role: Role,
    cwd: &str,
    body: &Value,
    prompt: &str,
) -> (usize, bool) {
    if let Some(&(_, index, instead)) = st.sessions.get(session_id) {
        return (index, instead);
    }
    *st.started.entry(role).or_insert(0) += 1;
    let key = (
        if st.per_dir {
            cwd.to_owned()
        } else {
            String::new()
        },
        role,
    );
    let picked = st.pick.as_ref().and_then(|p| p(role, body));
    let counter = st.started_in.entry(key).or_insert(0);
    let index = picked.unwrap_or(*counter);
    *counter += 1;
    let scripts = match role {
        Role::Agent => &st.scenario.agent,
        Role::Critic => &st.scenario.critic,
        Role::Examiner => &st.scenario.examiner,
    };
    let instead = scripts
        .get(index)
        .and_then(|s| s.when_prompt_contains.as_deref())
        .is_some_and(|needle| prompt.contains(needle));
    st.sessions
        .insert(session_id.to_owned(), (role, index, instead));
    (index, instead)
}

/// The turn a session plays next, if its script has one.
fn scripted_turn(
    st: &State,
    role: Role,
    session: usize,
    instead: bool,
    turn: usize,
) -> Option<Turn> {
    let scripts = match role {
        Role::Agent => &st.scenario.agent,
        Role::Critic => &st.scenario.critic,
        Role::Examiner => &st.scenario.examiner,
    };
    scripts
        .get(session)
        .and_then(|s| match (&s.instead, instead) {
            (Some(alt), true) => alt.turns.get(turn),
            _ => s.turns.get(turn),
        })
        .cloned()
}

/// The OpenAI Responses API, as Codex calls it (`POST /v1/responses`,
/// SSE): the same scenario, played for Codex sessions. A session is the
/// thread id of `x-codex-turn-metadata`; a request asking for a JSON-schema
/// answer (`text.format`) is a critic's; the turn is the number of requests
/// the session made before. Claude-shaped tool calls become what a Codex
/// model would ask for: every one a command for its `exec_command` tool
/// (`Write` a heredoc, `Edit` a Python one-liner, `Read` a `cat`), and the
/// critic's `StructuredOutput` its final message, the verdict's JSON.
async fn responses(
    state: Arc<Mutex<State>>,
    headers: HeaderMap,
    body: Value,
    credential: Option<String>,
) -> Response {
    let metadata: Value = headers
        .get("x-codex-turn-metadata")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or(Value::Null);
    let session_id = metadata["thread_id"]
        .as_str()
        .or_else(|| headers.get("thread-id").and_then(|v| v.to_str().ok()))
        .unwrap_or("no-session")
        .to_owned();
    let role = if body["text"]["format"]["type"] == "json_schema" {
        structured_role(&body)
    } else {
        Role::Agent
    };
    let model = body["model"].as_str().unwrap_or("unknown").to_owned();
    let cwd = codex_cwd(&body)
        .or_else(|| {
            metadata["workspaces"]
                .as_object()
                .and_then(|w| w.keys().next().cloned())
        })
        .unwrap_or_default();
    let prompt = codex_prompt(&body);
    let (turn, turn_index) = {
        let mut st = state.lock().expect("model state");
        let turn_index = {
            let n = st.codex_turns.entry(session_id.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let (session, instead) = session_of(&mut st, &session_id, role, &cwd, &body, &prompt);
        let turn = scripted_turn(&st, role, session, instead, turn_index);
        st.log.push(Recorded {
            role,
            session,
            turn: turn_index,
            session_id: session_id.clone(),
            model: model.clone(),
            scripted: turn.is_some(),
            api_key: credential,
            x_api_key: header(&headers, "x-api-key"),
            authorization: header(&headers, "authorization"),
            anthropic_beta: None,
            body: body.clone(),
        });
        (turn, turn_index)
    };
    let Some(turn) = turn else {
        return api_error(400, "scenario exhausted: no scripted turn for this request");
    };
    if turn.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(turn.delay_ms)).await;
    }
    if let Some(err) = &turn.error {
        return api_error(err.status, &err.message);
    }
    let id = format!("resp_scripted_{}_{}", short(&session_id), turn_index);
    let mut items = Vec::new();
    for (i, block) in turn.blocks.iter().enumerate() {
        match block {
            Block::Text { text } => items.push(codex_message(text)),
            Block::ToolUse { name, input } => {
                let input = substitute(input, &cwd);
                match name.as_str() {
                    "StructuredOutput" => items.push(codex_message(&input.to_string())),
                    _ => items.push(json!({
                        "type": "function_call",
                        "id": format!("fc_{id}_{i}"),
                        "call_id": format!("call_{id}_{i}"),
                        "name": "exec_command",
                        "arguments": json!({ "cmd": codex_command(name, &input) }).to_string(),
                    })),
                }
            }
        }
    }
    let u = turn.usage;
    let mut events = vec![sse(
        "response.created",
        json!({"type": "response.created", "response": {"id": id, "model": model}}),
    )];
    let stall = turn.stall_after_start_ms;
    for item in items {
        events.push(sse(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "item": item}),
        ));
    }
    let all_input = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
    events.push(sse(
        "response.completed",
        json!({"type": "response.completed", "response": {"id": id, "model": model, "usage": {
            "input_tokens": all_input,
            "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": all_input + u.output_tokens}}}),
    ));
    let mut events = events.into_iter();
    let first = events.next().expect("response.created");
    let stream =
        futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(first) })
            .chain(futures_util::stream::once(async move {
                if stall > 0 {
                    tokio::time::sleep(Duration::from_millis(stall)).await;
                }
                Ok::<_, std::convert::Infallible>(Bytes::new())
            }))
            .chain(futures_util::stream::iter(events.map(Ok)));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .expect("sse response")
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn codex_message(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": "msg_scripted",
           "content": [{"type": "output_text", "text": text}]})
}

/// The user messages' text: Codex's environment context and the prompt
/// (with the critic's material appended).
fn codex_prompt(body: &Value) -> String {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .flat_map(|i| i["content"].as_array().into_iter().flatten())
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The working directory Codex states in its environment context.
fn codex_cwd(body: &Value) -> Option<String> {
    let text = codex_prompt(body);
    let start = text.find("<cwd>")? + "<cwd>".len();
    let end = text[start..].find("</cwd>")? + start;
    Some(text[start..end].trim().to_owned())
}

/// A Claude Code tool call as the shell command a Codex model would run.
fn codex_command(name: &str, input: &Value) -> String {
    let s = |k: &str| input[k].as_str().unwrap_or_default().to_owned();
    let q = |v: &str| format!("'{}'", v.replace('\'', r"'\''"));
    match name {
        "Bash" => s("command"),
        "Read" => format!("cat {}", q(&s("file_path"))),
        "Write" => {
            let content = s("content");
            let body = content.strip_suffix('\n').unwrap_or(&content);
            format!("cat > {} <<'LOOPD_EOF'\n{body}\nLOOPD_EOF", q(&s("file_path")))
        }
        "Edit" => format!(
            "python3 -c 'import sys,pathlib; p=pathlib.Path(sys.argv[1]); p.write_text(p.read_text().replace(sys.argv[2], sys.argv[3], 1))' {} {} {}",
            q(&s("file_path")),
            q(&s("old_string")),
            q(&s("new_string"))
        ),
        "Grep" => format!("grep -rn {} .", q(&s("pattern"))),
        "Glob" => format!("ls -d {}", s("pattern")),
        other => format!("echo {}", q(&format!("(no such tool here: {other})"))),
    }
}

/// A path as an HTTP server resolves it: dot segments, empty segments and
/// a trailing slash gone.
fn normalised(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// A burst call: billed `min(output, max_tokens)` output tokens on arrival,
/// streamed as content, a stall, then the usage.
fn burst(state: &Arc<Mutex<State>>, body: &Value, spec: &str) -> Response {
    let arg = |name: &str| {
        spec.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(0);
    let model = body["model"].as_str().unwrap_or("unknown").to_owned();
    let usage = Usage {
        input_tokens: 100 + image_tokens(body),
        output_tokens: arg("output").min(max_tokens),
        ..Usage::default()
    };
    state.lock().expect("model state").bursts.push(Burst {
        model: model.clone(),
        max_tokens,
        usage,
    });
    let stall = arg("stall_ms");
    let text = "x".repeat(2000);
    sse_response(
        format!(
            "msg_burst_{}",
            state.lock().expect("model state").bursts.len()
        ),
        model,
        vec![Block::Text { text }],
        usage,
        0,
    )
    .map(|b| {
        // The content first, the usage only after the stall.
        let stream = b
            .into_data_stream()
            .enumerate()
            .then(move |(i, chunk)| async move {
                // Chunks: message_start, the (empty) stall marker, the block's
                // start, delta and stop, then the delta with the usage.
                if i == 5 && stall > 0 {
                    tokio::time::sleep(Duration::from_millis(stall)).await;
                }
                chunk
            });
        Body::from_stream(stream)
    })
}

/// Input tokens of the base64 PNG images anywhere in a Messages API
/// request, as the provider bills them ("Images and vision": about
/// `width * height / 750`, after an image above the native resolution is
/// scaled down, aspect kept — here the largest, Opus 4.7's 2576 px long
/// edge and ~3.75 MP). Written apart from loopd's pricing, and read with
/// the `png` crate rather than loopd's header reader, so the gateway's
/// reservation is checked against an independent count. Any other image
/// bills nothing here.
fn image_tokens(value: &Value) -> u64 {
    match value {
        Value::Object(map) => {
            let own = (map.get("type") == Some(&json!("image"))
                && value["source"]["type"] == "base64")
                .then(|| value["source"]["data"].as_str())
                .flatten()
                .and_then(png_size)
                .map_or(0, |(w, h)| {
                    let (w, h) = (w as f64, h as f64);
                    let s = (2576.0 / w.max(h))
                        .min((2576.0 * 1456.0 / (w * h)).sqrt())
                        .min(1.0);
                    let (w, h) = ((w * s).floor(), (h * s).floor());
                    (w * h / 750.0).ceil() as u64
                });
            own + map.values().map(image_tokens).sum::<u64>()
        }
        Value::Array(items) => items.iter().map(image_tokens).sum(),
        _ => 0,
    }
}

/// A base64 PNG's width and height, by the `png` crate.
fn png_size(data: &str) -> Option<(u32, u32)> {
    let mut bytes = Vec::new();
    let mut bits = 0u32;
    let mut n = 0;
    for c in data.bytes().take_while(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = bits << 6 | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            bytes.push((bits >> n) as u8);
        }
    }
    let reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .ok()?;
    Some((reader.info().width, reader.info().height))
}

fn short(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect()
}

fn api_error(status: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"type": "error", "error": {"type": "api_error", "message": message}});
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn stop_reason(blocks: &[Block]) -> &'static str {
    if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn tool_use_id(message_id: &str, index: usize) -> String {
    format!("toolu_{}_{}", message_id.trim_start_matches("msg_"), index)
}

fn content_json(message_id: &str, blocks: &[Block]) -> Vec<Value> {
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| match b {
            Block::Text { text } => json!({"type": "text", "text": text}),
            Block::ToolUse { name, input } => json!({
                "type": "tool_use", "id": tool_use_id(message_id, i), "name": name, "input": input
            }),
        })
        .collect()
}

fn json_response(message_id: String, model: String, blocks: Vec<Block>, usage: Usage) -> Response {
    let body = json!({
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": content_json(&message_id, &blocks),
        "stop_reason": stop_reason(&blocks), "stop_sequence": null,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                  "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                  "cache_read_input_tokens": usage.cache_read_input_tokens},
    });
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn sse(event: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

fn sse_response(
    message_id: String,
    model: String,
    blocks: Vec<Block>,
    usage: Usage,
    stall_ms: u64,
) -> Response {
    let start = sse(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                      "cache_read_input_tokens": usage.cache_read_input_tokens}}}),
    );
    let mut rest = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block {
            Block::Text { text } => {
                rest.push(sse(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}}),
                ));
                rest.push(sse(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": text}}),
                ));
            }
            Block::ToolUse { name, input } => {
                rest.push(sse(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": tool_use_id(&message_id, i),
                                      "name": name, "input": {}}}),
                ));
                rest.push(sse(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                ));
            }
        }
        rest.push(sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    rest.push(sse(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason(&blocks), "stop_sequence": null},
               "usage": {"output_tokens": usage.output_tokens}}),
    ));
    rest.push(sse("message_stop", json!({"type": "message_stop"})));

    let stream =
        futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(start) })
            .chain(futures_util::stream::once(async move {
                if stall_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(stall_ms)).await;
                }
                Ok::<_, std::convert::Infallible>(Bytes::new())
            }))
            .chain(futures_util::stream::iter(rest.into_iter().map(Ok)));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .expect("sse response")
}

use futures_util::StreamExt as _;

/// Load a scenario from a TOML file (the format of `fixtures/scenarios/`).
pub fn load_scenario(path: &std::path::Path) -> Scenario {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read scenario {}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("parse scenario {}: {e}", path.display()))
}
