//! A loopback server standing in for the GitHub REST API and for a webhook
//! receiver, recording every request. Pull requests, statuses and comments
//! are kept in memory; `/hook` answers with scripted status codes.
//!
//! It answers like GitHub where loopd depends on it: a second pull request
//! from the same head is refused with 422 "already exists"; with a remote
//! repository attached, `GET .../branches/<name>` reads the real branch (404
//! when there is none) and a pull request from a head branch the remote does
//! not have is refused with 422. `POST .../pulls` can be scripted to fail
//! (an outage) or to fail *after* creating the pull request (a lost answer).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub authorization: Option<String>,
    pub body: Value,
}

#[derive(Default)]
pub struct State {
    pub requests: Vec<Request>,
    /// Pull requests: (number, head, base, title, body).
    pub pulls: Vec<(u64, String, String, String, String)>,
    pub statuses: Vec<(String, Value)>,
    pub hook_script: VecDeque<u16>,
    /// Webhook bodies answered with 2xx.
    pub delivered: Vec<Value>,
    /// The bare repository behind the API (branches, PR heads).
    pub remote: Option<PathBuf>,
    /// What the next `POST .../pulls` requests get.
    pub pulls_script: VecDeque<PullScript>,
    /// Comments on pull requests' conversations and review threads.
    pub comments: Vec<Comment>,
    /// Per pull request: what `GET .../pulls/<n>` adds or overrides
    /// (`state`, `merged`, `labels`, `head.repo`).
    pub pull_meta: std::collections::HashMap<u64, Value>,
    /// Scripted failures: (method, a part of the path, status, how many more).
    pub failures: Vec<(String, String, u16, usize)>,
}

/// A comment, as the fake keeps it.
#[derive(Debug, Clone)]
pub struct Comment {
    pub id: u64,
    pub pr: u64,
    /// The review thread it replies on (`None`: the conversation).
    pub thread: Option<u64>,
    pub author: String,
    pub author_type: String,
    pub association: String,
    pub body: String,
}

/// A scripted answer to `POST .../pulls`.
#[derive(Debug, Clone, Copy)]
pub enum PullScript {
    /// Answer with this status; nothing is created (an outage).
    Fail(u16),
    /// Create the pull request, then answer with this status (the answer
    /// is lost on the way).
    CreateThenFail(u16),
}

pub struct FakeGitHub {
    addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeGitHub {
    pub fn start() -> FakeGitHub {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |method, uri, headers, body| {
            handle(shared.clone(), method, uri, headers, body)
        });
        let (addr, stop) = super::model::serve(app, 0);
        FakeGitHub {
            addr,
            state,
            _stop: stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hook_url(&self) -> String {
        format!("http://{}/hook/T0/B0/secret-path", self.addr)
    }

    /// Back the API with a real bare repository.
    pub fn set_remote(&self, remote: &std::path::Path) {
        self.state.lock().expect("state").remote = Some(remote.to_path_buf());
    }

    pub fn script_pulls(&self, script: &[PullScript]) {
        self.state.lock().expect("state").pulls_script = script.iter().copied().collect();
    }

    pub fn script_hook(&self, statuses: &[u16]) {
        self.state.lock().expect("state").hook_script = statuses.iter().copied().collect();
    }

    /// Answer the next `times` requests `method` whose path contains
    /// `part` with `status` (nothing is done).
    pub fn fail(&self, method: &str, part: &str, status: u16, times: usize) {
        self.state.lock().expect("state").failures.push((
            method.to_owned(),
            part.to_owned(),
            status,
            times,
        ));
    }

    pub fn add_pull(&self, head: &str, base: &str) {
        let mut st = self.state.lock().expect("state");
        let n = st.pulls.len() as u64 + 1;
        st.pulls.push((
            n,
            head.into(),
            base.into(),
            "existing".into(),
            String::new(),
        ));
    }

    /// Set what `GET .../pulls/<n>` says besides the stored pull request.
    pub fn set_pull_meta(&self, n: u64, meta: Value) {
        self.state.lock().expect("state").pull_meta.insert(n, meta);
    }

    /// A comment already on pull request `pr`'s conversation.
    pub fn add_comment(
        &self,
        pr: u64,
        author: &str,
        author_type: &str,
        association: &str,
        body: &str,
    ) {
        let mut st = self.state.lock().expect("state");
        let id = 1000 + st.comments.len() as u64;
        st.comments.push(Comment {
            id,
            pr,
            thread: None,
            author: author.into(),
            author_type: author_type.into(),
            association: association.into(),
            body: body.into(),
        });
    }

    pub fn comments(&self) -> Vec<Comment> {
        self.state.lock().expect("state").comments.clone()
    }

    /// The requests that wrote something (anything but a GET).
    pub fn writes(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|q| q.method != "GET")
            .collect()
    }

    pub fn pulls(&self) -> Vec<(u64, String, String, String, String)> {
        self.state.lock().expect("state").pulls.clone()
    }

    pub fn statuses(&self) -> Vec<(String, Value)> {
        self.state.lock().expect("state").statuses.clone()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().expect("state").requests.clone()
    }

    pub fn delivered(&self) -> Vec<Value> {
        self.state.lock().expect("state").delivered.clone()
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or("").to_owned();
    let mut st = state.lock().expect("state");
    st.requests.push(Request {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: body.clone(),
    });
    if let Some(f) = st
        .failures
        .iter_mut()
        .find(|f| f.0 == method.as_str() && path.contains(&f.1) && f.3 > 0)
    {
        f.3 -= 1;
        return StatusCode::from_u16(f.2)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response();
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", ["hook", ..]) => {
            let code = st.hook_script.pop_front().unwrap_or(200);
            if (200..300).contains(&code) {
                st.delivered.push(body);
            }
            StatusCode::from_u16(code)
                .unwrap_or(StatusCode::OK)
                .into_response()
        }
        ("GET", ["repos", owner, _, "pulls"]) => {
            let want = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("head="))
                .unwrap_or("")
                .to_owned();
            let base = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("base="))
                .map(|b| b.replace("%2F", "/"));
            let list: Vec<Value> = st
                .pulls
                .iter()
                .filter(|p| want.is_empty() || want == format!("{owner}:{}", p.1) || want == format!("{owner}%3A{}", p.1))
                .filter(|p| base.as_ref().is_none_or(|b| *b == p.2))
                .map(|p| json!({"number": p.0, "html_url": format!("https://github.example/pull/{}", p.0), "head": {"ref": p.1}}))
                .collect();
            axum::Json(Value::Array(list)).into_response()
        }
        ("GET", ["repos", _, _, "branches", name @ ..]) => {
            let name = name.join("/");
            match st.remote.as_ref().and_then(|r| tip(r, &name)) {
                Some((sha, parents, message)) => axum::Json(json!({
                    "name": name,
                    "commit": {
                        "sha": sha,
                        "commit": {"message": message},
                        "parents": parents.iter().map(|p| json!({"sha": p})).collect::<Vec<_>>(),
                    },
                    "protected": false,
                }))
                .into_response(),
                None => (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"message": "Branch not found"})),
                )
                    .into_response(),
            }
        }
        ("POST", ["repos", owner, _, "pulls"]) => {
            let script = st.pulls_script.pop_front();
            if let Some(PullScript::Fail(code)) = script {
                return StatusCode::from_u16(code)
                    .unwrap_or(StatusCode::BAD_GATEWAY)
                    .into_response();
            }
            let s = |k: &str| body[k].as_str().unwrap_or("").to_owned();
            let head = s("head");
            if st.pulls.iter().any(|p| p.1 == head) {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    axum::Json(json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for {owner}:{head}.")}]})),
                )
                    .into_response();
            }
            if st.remote.as_ref().is_some_and(|r| tip(r, &head).is_none()) {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    axum::Json(json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}]})),
                )
                    .into_response();
            }
            let n = st.pulls.len() as u64 + 1;
            st.pulls.push((n, head, s("base"), s("title"), s("body")));
            if let Some(PullScript::CreateThenFail(code)) = script {
                return StatusCode::from_u16(code)
                    .unwrap_or(StatusCode::BAD_GATEWAY)
                    .into_response();
            }
            (
                StatusCode::CREATED,
                axum::Json(
                    json!({"number": n, "html_url": format!("https://github.example/pull/{n}")}),
                ),
            )
                .into_response()
        }
        ("POST", ["repos", _, _, "dispatches"]) => StatusCode::NO_CONTENT.into_response(),
        ("POST", ["repos", _, _, "statuses", sha]) => {
            st.statuses.push((sha.to_string(), body));
            (StatusCode::CREATED, axum::Json(json!({}))).into_response()
        }
        ("GET", ["repos", owner, name, "pulls", n]) => {
            let Some(p) = n
                .parse::<u64>()
                .ok()
                .and_then(|n| st.pulls.iter().find(|p| p.0 == n))
                .cloned()
            else {
                return StatusCode::NOT_FOUND.into_response();
            };
            let head_sha = st
                .remote
                .as_ref()
                .and_then(|r| tip(r, &p.1))
                .map(|t| t.0)
                .unwrap_or_default();
            let repo = json!({"full_name": format!("{owner}/{name}")});
            let mut v = json!({
                "number": p.0,
                "html_url": format!("https://github.example/pull/{}", p.0),
                "state": "open",
                "merged": false,
                "labels": [],
                "head": {"ref": p.1, "sha": head_sha, "repo": repo.clone()},
                "base": {"ref": p.2, "repo": repo},
            });
            if let Some(Value::Object(meta)) = st.pull_meta.get(&p.0) {
                for (k, m) in meta {
                    if k == "head_repo" {
                        v["head"]["repo"] = json!({"full_name": m});
                    } else {
                        v[k] = m.clone();
                    }
                }
            }
            axum::Json(v).into_response()
        }
        ("GET", ["repos", _, _, list @ ("issues" | "pulls"), n, "comments"]) => {
            let threads = *list == "pulls";
            let page = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("page="))
                .and_then(|p| p.parse::<usize>().ok())
                .unwrap_or(1);
            let n = n.parse::<u64>().unwrap_or(0);
            let list: Vec<Value> = st
                .comments
                .iter()
                .filter(|c| c.pr == n && c.thread.is_some() == threads)
                .skip((page - 1) * 100)
                .take(100)
                .map(|c| json!({"id": c.id, "body": c.body, "author_association": c.association, "user": {"login": c.author, "type": c.author_type}}))
                .collect();
            axum::Json(Value::Array(list)).into_response()
        }
        ("POST", ["repos", _, _, "issues", n, "comments"]) => {
            let id = 1000 + st.comments.len() as u64;
            st.comments.push(Comment {
                id,
                pr: n.parse().unwrap_or(0),
                thread: None,
                author: "github-actions[bot]".into(),
                author_type: "Bot".into(),
                association: "NONE".into(),
                body: body["body"].as_str().unwrap_or("").to_owned(),
            });
            (StatusCode::CREATED, axum::Json(json!({"id": id}))).into_response()
        }
        ("PATCH", ["repos", _, _, list @ ("issues" | "pulls"), "comments", id]) => {
            let threads = *list == "pulls";
            let id = id.parse::<u64>().unwrap_or(0);
            match st
                .comments
                .iter_mut()
                .find(|c| c.id == id && c.thread.is_some() == threads)
            {
                Some(c) => {
                    c.body = body["body"].as_str().unwrap_or("").to_owned();
                    axum::Json(json!({"id": id})).into_response()
                }
                None => StatusCode::NOT_FOUND.into_response(),
            }
        }
        ("POST", ["repos", _, _, "pulls", n, "comments", thread, "replies"]) => {
            let id = 1000 + st.comments.len() as u64;
            st.comments.push(Comment {
                id,
                pr: n.parse().unwrap_or(0),
                thread: thread.parse().ok(),
                author: "github-actions[bot]".into(),
                author_type: "Bot".into(),
                association: "NONE".into(),
                body: body["body"].as_str().unwrap_or("").to_owned(),
            });
            (StatusCode::CREATED, axum::Json(json!({"id": id}))).into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The tip of `branch` in the bare repository `remote`: (sha, parents,
/// message), or `None` when there is no such branch.
fn tip(remote: &std::path::Path, branch: &str) -> Option<(String, Vec<String>, String)> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(remote)
        .args(["log", "-1", "--format=%H%x00%P%x00%B"])
        .arg(format!("refs/heads/{branch}"))
        .arg("--")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut parts = text.splitn(3, '\0');
    let sha = parts.next()?.trim().to_owned();
    let parents = parts
        .next()?
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    Some((sha, parents, parts.next().unwrap_or("").to_owned()))
}
