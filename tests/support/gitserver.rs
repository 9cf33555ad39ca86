//! Git over HTTP on loopback, as GitHub serves it: smart HTTP through the
//! real `git http-backend`, and every request without the right
//! `Authorization: Basic x-access-token:<token>` answered 401 with a Basic
//! challenge (so a client offers its credentials). Every request is
//! recorded with the credentials it carried.
//!
//! The same module has the "attacker": a loopback server that challenges
//! every request and records what it was sent — it must never see a token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One request as a server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub authorization: Option<String>,
}

fn seen(method: &Method, uri: &Uri, headers: &HeaderMap) -> Seen {
    Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or("").to_owned(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    }
}

fn challenge() -> Response {
    let mut r = StatusCode::UNAUTHORIZED.into_response();
    r.headers_mut().insert(
        "www-authenticate",
        HeaderValue::from_static("Basic realm=\"GitHub\""),
    );
    r
}

/// Standard base64 (for the Basic credentials a test expects or plants).
pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The `Authorization` value of a push with `token`, as GitHub expects it.
pub fn basic(token: &str) -> String {
    format!(
        "Basic {}",
        base64(format!("x-access-token:{token}").as_bytes())
    )
}

pub struct GitServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl GitServer {
    /// Serve the repositories under `root` (`<root>/<owner>/<name>.git`),
    /// accepting `token` only.
    pub fn start(root: &Path, token: &str) -> GitServer {
        let seen_log = Arc::new(Mutex::new(Vec::new()));
        let log = seen_log.clone();
        let root = root.to_path_buf();
        let expected = basic(token);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let log = log.clone();
                let root = root.clone();
                let expected = expected.clone();
                async move {
                    let s = seen(&method, &uri, &headers);
                    let authorized = s.authorization.as_deref() == Some(expected.as_str());
                    log.lock().expect("log").push(s);
                    if !authorized {
                        return challenge();
                    }
                    cgi(&root, &method, &uri, &headers, body).await
                }
            },
        );
        let (addr, stop) = super::model::serve(app, 0);
        GitServer {
            addr,
            seen: seen_log,
            _stop: stop,
        }
    }

    /// What `GITHUB_SERVER_URL` is for this server.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }
}

/// Run `git http-backend` for one request (CGI).
async fn cgi(
    root: &PathBuf,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    use tokio::io::AsyncWriteExt;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", super::tools_path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("REMOTE_USER", "x-access-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("git http-backend");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(&body).await.expect("cgi stdin");
    drop(stdin);
    let out = child.wait_with_output().await.expect("cgi output");
    let text = &out.stdout;
    let split = text
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| text.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, sep)) = split else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
            .into_response();
    };
    let mut response = Response::new(axum::body::Body::from(text[end + sep..].to_vec()));
    for line in String::from_utf8_lossy(&text[..end]).lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("status") {
            let code = v
                .split(' ')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(500);
            *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
        } else if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(k.trim().as_bytes()),
            HeaderValue::from_str(v),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// A server that wants credentials from whoever comes: it challenges every
/// request and records what it was sent.
pub struct Attacker {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Attacker {
    pub fn start() -> Attacker {
        let seen_log = Arc::new(Mutex::new(Vec::new()));
        let log = seen_log.clone();
        let app =
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
                let log = log.clone();
                async move {
                    log.lock().expect("log").push(seen(&method, &uri, &headers));
                    challenge()
                }
            });
        let (addr, stop) = super::model::serve(app, 0);
        Attacker {
            addr,
            seen: seen_log,
            _stop: stop,
        }
    }

    /// The attacker's server, as a URL prefix (`http://127.0.0.1:PORT/`).
    pub fn base(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// A repository URL on the attacker's server.
    pub fn url(&self) -> String {
        format!("{}stolen.git", self.base())
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }
}
