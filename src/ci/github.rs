//! Everything GitHub-specific, in one module: the Actions environment and
//! event payload, the REST API (reqwest with rustls, timeouts, bounded
//! retries with backoff, a configurable base URL for GitHub Enterprise and
//! tests), and pushing with the token as the credential (git2).
//!
//! The token is read from the environment, kept in memory, and never logged
//! or written anywhere. Where it may go is decided before the agent runs
//! ([`PushTarget`]): one URL, pushed to explicitly, with the credential
//! offered only to that scheme, host and port, over https (plain http only
//! to a loopback address, and only with the test-only
//! [`ALLOW_HTTP_LOOPBACK_VAR`]); a git config that rewrites the URL
//! (`insteadOf`) makes the push refuse rather than follow it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

pub use crate::util::TOKEN_VARS;

/// Test-only: allow pushing with the token over plain http to a loopback
/// address (the test suite's git server). Nothing else ever gets it over
/// http.
pub const ALLOW_HTTP_LOOPBACK_VAR: &str = "LOOPD_TEST_ALLOW_HTTP_LOOPBACK";

#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    #[error("not running in GitHub Actions: `{0}` is not set")]
    NotActions(&'static str),
    #[error("no token: set `GITHUB_TOKEN` (or `LOOPD_GITHUB_TOKEN`) for the step")]
    NoToken,
    #[error("cannot read the event payload `{}`: {message}", path.display())]
    Event { path: PathBuf, message: String },
    #[error("GitHub API {method} {path}: {message}")]
    Api {
        method: String,
        path: String,
        /// The HTTP status, when the API answered.
        status: Option<u16>,
        message: String,
    },
    #[error("git push to `{remote}` failed: {message}")]
    Push { remote: String, message: String },
    #[error("cannot push to `{url}`: {why}")]
    PushTarget { url: String, why: String },
    #[error("the git configuration rewrites the push URL `{url}` to `{to}` (`url.<base>.insteadOf` / `pushInsteadOf`); loopd pushes only to the URL it decided before the agent ran")]
    PushRedirected { url: String, to: String },
    #[error("the remote branch `{branch}` moved: expected {expected}, found {found}; loopd force-pushes only its own branch, and only over what it saw (a lease)")]
    Lease {
        branch: String,
        expected: String,
        found: String,
    },
}

impl GitHubError {
    /// The API's HTTP status for this error, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            GitHubError::Api { status, .. } => *status,
            _ => None,
        }
    }

    pub fn hint(&self) -> Option<&'static str> {
        match self {
            GitHubError::PushTarget { .. } => Some("the push URL comes from `GITHUB_SERVER_URL` + `GITHUB_REPOSITORY` (in Actions), else from the remote's URL (`--remote`); it must be https"),
            GitHubError::PushRedirected { .. } => Some("remove the `insteadOf` rewrite from the git configuration (`git config --show-origin --get-regexp 'url\\..*insteadof'`)"),
            GitHubError::NoToken => Some("pass the workflow's token to the step: `env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`"),
            _ => None,
        }
    }
}

/// What the Actions environment says about this run.
#[derive(Debug, Clone)]
pub struct Actions {
    /// `owner/name`.
    pub repository: String,
    /// The commit to fix.
    pub sha: String,
    /// The branch it is on (the pull request base for the autofix).
    pub branch: String,
    pub event_name: String,
    /// The event comes from a fork.
    pub from_fork: bool,
    pub api_url: String,
    /// `GITHUB_SERVER_URL` (`https://github.com`, or a GitHub Enterprise
    /// host): with `repository`, where the fix is pushed.
    pub server_url: Option<String>,
    /// [`ALLOW_HTTP_LOOPBACK_VAR`] is set (tests only).
    pub allow_http_loopback: bool,
    pub step_summary: Option<PathBuf>,
    pub run_url: Option<String>,
    /// The event's payload (`GITHUB_EVENT_PATH`), `null` without one.
    pub payload: Value,
}

fn var(name: &'static str) -> Result<String, GitHubError> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or(GitHubError::NotActions(name))
}

impl Actions {
    pub fn from_env() -> Result<Actions, GitHubError> {
        let repository = var("GITHUB_REPOSITORY")?;
        let event_name = std::env::var("GITHUB_EVENT_NAME").unwrap_or_else(|_| "push".into());
        let event: Value = match std::env::var_os("GITHUB_EVENT_PATH") {
            Some(p) => {
                let path = PathBuf::from(p);
                let text = std::fs::read_to_string(&path).map_err(|e| GitHubError::Event {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                serde_json::from_str(&text).map_err(|e| GitHubError::Event {
                    path,
                    message: e.to_string(),
                })?
            }
            None => Value::Null,
        };
        let mut sha = var("GITHUB_SHA")?;
        let mut branch = std::env::var("GITHUB_HEAD_REF")
            .ok()
            .filter(|b| !b.is_empty())
            .or_else(|| std::env::var("GITHUB_REF_NAME").ok())
            .unwrap_or_default();
        let full = |v: &Value| v["full_name"].as_str().map(str::to_owned);
        let from_fork = match event_name.as_str() {
            "pull_request" | "pull_request_target" => {
                full(&event["pull_request"]["head"]["repo"])
                    != full(&event["pull_request"]["base"]["repo"])
            }
            "check_run" => {
                let run = &event["check_run"];
                if let Some(s) = run["head_sha"].as_str() {
                    sha = s.to_owned();
                }
                if let Some(b) = run["check_suite"]["head_branch"].as_str() {
                    branch = b.to_owned();
                }
                false
            }
            "workflow_run" => {
                let run = &event["workflow_run"];
                if let Some(s) = run["head_sha"].as_str() {
                    sha = s.to_owned();
                }
                if let Some(b) = run["head_branch"].as_str() {
                    branch = b.to_owned();
                }
                full(&run["head_repository"]).is_some_and(|h| Some(h) != full(&event["repository"]))
            }
            _ => event["repository"]["fork"].as_bool().unwrap_or(false) && event_name != "push",
        };
        let api_url = std::env::var("GITHUB_API_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "https://api.github.com".into());
        let server_url = std::env::var("GITHUB_SERVER_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .map(|u| u.trim_end_matches('/').to_owned());
        let run_url = match (&server_url, std::env::var("GITHUB_RUN_ID")) {
            (Some(server), Ok(id)) => Some(format!("{server}/{repository}/actions/runs/{id}")),
            _ => None,
        };
        Ok(Actions {
            repository,
            sha,
            branch,
            event_name,
            from_fork,
            api_url,
            server_url,
            allow_http_loopback: allow_http_loopback_from_env(),
            step_summary: std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from),
            run_url,
            payload: event,
        })
    }
}

/// Is the test-only [`ALLOW_HTTP_LOOPBACK_VAR`] set to `1`?
pub fn allow_http_loopback_from_env() -> bool {
    std::env::var(ALLOW_HTTP_LOOPBACK_VAR).is_ok_and(|v| v == "1")
}

/// The token, from the first of [`TOKEN_VARS`] that is set.
pub fn token_from_env() -> Result<String, GitHubError> {
    TOKEN_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|t| !t.is_empty()))
        .ok_or(GitHubError::NoToken)
}

/// Where a push goes, decided before the agent runs and never re-read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    /// The URL pushed to, without userinfo.
    pub url: String,
    kind: TargetKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TargetKind {
    /// The token goes to this scheme, host and port, and nowhere else.
    Remote {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
    /// A path or `file://` URL: no credential is ever offered.
    Local,
}

impl PushTarget {
    /// In Actions: `GITHUB_SERVER_URL/GITHUB_REPOSITORY.git`; elsewhere the
    /// URL `remote` has now (its push URL if it has one).
    pub fn decide(actions: &Actions, repo: &Path, remote: &str) -> Result<PushTarget, GitHubError> {
        match &actions.server_url {
            Some(server) => PushTarget::new(
                &format!("{server}/{}.git", actions.repository),
                actions.allow_http_loopback,
            ),
            None => PushTarget::of_remote(repo, remote, actions.allow_http_loopback),
        }
    }

    /// The URL `remote` has in the repository's configuration now.
    pub fn of_remote(
        repo: &Path,
        remote: &str,
        allow_http_loopback: bool,
    ) -> Result<PushTarget, GitHubError> {
        let err = |why: String| GitHubError::PushTarget {
            url: remote.to_owned(),
            why,
        };
        let r = git2::Repository::open(repo).map_err(|e| err(e.message().to_owned()))?;
        let rm = r
            .find_remote(remote)
            .map_err(|e| err(format!("no remote `{remote}`: {}", e.message())))?;
        let url = rm
            .pushurl()
            .or(rm.url())
            .ok_or_else(|| err(format!("the remote `{remote}` has no URL")))?
            .to_owned();
        PushTarget::new(&url, allow_http_loopback)
    }

    /// Check a URL: https (userinfo dropped), a local path, or — tests only
    /// — http to a loopback address.
    pub fn new(url: &str, allow_http_loopback: bool) -> Result<PushTarget, GitHubError> {
        let refuse = |why: &str| GitHubError::PushTarget {
            url: redact(url),
            why: why.to_owned(),
        };
        if url.starts_with('/') {
            return Ok(PushTarget {
                url: url.to_owned(),
                kind: TargetKind::Local,
            });
        }
        let mut parsed = reqwest::Url::parse(url).map_err(|_| {
            refuse("not a URL loopd can push to with a token (an `ssh` or `host:path` remote?); loopd pushes over https")
        })?;
        let scheme = parsed.scheme().to_owned();
        if scheme == "file" {
            return Ok(PushTarget {
                url: url.to_owned(),
                kind: TargetKind::Local,
            });
        }
        let host = parsed
            .host_str()
            .ok_or_else(|| refuse("the URL has no host"))?
            .to_owned();
        match scheme.as_str() {
            "https" => {}
            "http" if allow_http_loopback && is_loopback(&host) => {}
            "http" => return Err(refuse("the token is sent only over https (plain http only to a loopback address, in tests)")),
            _ => return Err(refuse("loopd pushes over https")),
        }
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        Ok(PushTarget {
            url: parsed.to_string(),
            kind: TargetKind::Remote {
                scheme,
                port: parsed.port_or_known_default(),
                host,
            },
        })
    }

    /// May the token be offered to a server asking for it at `url`?
    pub fn accepts_credentials_for(&self, url: &str) -> bool {
        let TargetKind::Remote { scheme, host, port } = &self.kind else {
            return false;
        };
        reqwest::Url::parse(url).is_ok_and(|u| {
            u.scheme() == scheme
                && u.host_str() == Some(host.as_str())
                && u.port_or_known_default() == *port
        })
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A URL for a message: without userinfo.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

/// The tip of a remote branch, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchTip {
    pub sha: String,
    pub message: String,
    pub parents: Vec<String>,
}

/// A pull request, as a round on it needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullInfo {
    pub number: u64,
    pub url: String,
    /// Open and not merged.
    pub open: bool,
    pub head_ref: String,
    pub head_sha: String,
    /// `owner/name` of the head's repository (another one: a fork).
    pub head_repo: String,
    pub base_ref: String,
    pub base_repo: String,
    /// The repository's default branch (`main` when the API does not say).
    pub default_branch: String,
    pub labels: Vec<String>,
    /// Whether it merges into its base (`None`: GitHub has not computed it
    /// yet).
    pub mergeable: Option<bool>,
}

/// A comment on a pull request's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueComment {
    pub id: u64,
    pub author: String,
    pub association: String,
    /// `User`, or `Bot` for an app (loopd's own token is one).
    pub author_type: String,
    pub body: String,
    /// On a review thread (else on the conversation).
    pub in_thread: bool,
}

/// A pull request, as loopd needs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PullRequest {
    pub number: u64,
    pub url: String,
}

/// The REST API client.
pub struct Api {
    client: reqwest::Client,
    base: String,
    repository: String,
    token: String,
    attempts: u32,
    backoff: Duration,
}

impl Api {
    pub fn new(base: &str, repository: &str, token: String) -> Result<Api, GitHubError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("loopd/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| GitHubError::Api {
                method: "-".into(),
                path: "-".into(),
                status: None,
                message: e.to_string(),
            })?;
        Ok(Api {
            client,
            base: base.trim_end_matches('/').to_owned(),
            repository: repository.to_owned(),
            token,
            attempts: 4,
            backoff: Duration::from_millis(500),
        })
    }

    /// One request, retried on transport errors, 5xx and 429 with backoff.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        let url = format!("{}{path}", self.base);
        let err = |status: Option<u16>, message: String| GitHubError::Api {
            method: method.to_string(),
            path: path.to_owned(),
            status,
            message,
        };
        let mut backoff = self.backoff;
        for attempt in 1..=self.attempts {
            let mut req = self
                .client
                .request(method.clone(), &url)
                .bearer_auth(&self.token)
                .header("accept", "application/vnd.github+json")
                .header("x-github-api-version", "2022-11-28");
            if let Some(b) = body {
                req = req.json(b);
            }
            let retryable = match req.send().await {
                Ok(r) if r.status().is_success() => {
                    return r.json::<Value>().await.or(Ok(Value::Null));
                }
                Ok(r) => {
                    let status = r.status();
                    let text: String = r
                        .text()
                        .await
                        .unwrap_or_default()
                        .chars()
                        .take(300)
                        .collect();
                    if !(status.is_server_error() || status.as_u16() == 429)
                        || attempt == self.attempts
                    {
                        return Err(err(Some(status.as_u16()), format!("HTTP {status}: {text}")));
                    }
                    tracing::warn!(%method, path, status = status.as_u16(), attempt, "GitHub API error; retrying");
                    true
                }
                Err(e) => {
                    let what = if e.is_timeout() {
                        "timeout"
                    } else if e.is_connect() {
                        "cannot connect"
                    } else {
                        "request failed"
                    };
                    if attempt == self.attempts {
                        return Err(err(None, what.into()));
                    }
                    tracing::warn!(%method, path, error = what, attempt, "GitHub API unreachable; retrying");
                    true
                }
            };
            if retryable {
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
            }
        }
        Err(err(None, "retries exhausted".into()))
    }

    fn owner(&self) -> &str {
        self.repository.split('/').next().unwrap_or("")
    }

    /// A pull request from `head` (open or closed), if one exists.
    pub async fn find_pull(&self, head: &str) -> Result<Option<PullRequest>, GitHubError> {
        let path = format!(
            "/repos/{}/pulls?state=all&head={}:{}",
            self.repository,
            self.owner(),
            head
        );
        let v = self.call(reqwest::Method::GET, &path, None).await?;
        Ok(v.as_array().and_then(|a| a.first()).map(|p| PullRequest {
            number: p["number"].as_u64().unwrap_or(0),
            url: p["html_url"].as_str().unwrap_or("").to_owned(),
        }))
    }

    /// The tip of `branch`, or `None` when GitHub does not know it (404).
    pub async fn branch(&self, branch: &str) -> Result<Option<BranchTip>, GitHubError> {
        let path = format!("/repos/{}/branches/{branch}", self.repository);
        match self.call(reqwest::Method::GET, &path, None).await {
            Ok(v) => {
                let c = &v["commit"];
                Ok(Some(BranchTip {
                    sha: c["sha"].as_str().unwrap_or("").to_owned(),
                    message: c["commit"]["message"].as_str().unwrap_or("").to_owned(),
                    parents: c["parents"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|p| p["sha"].as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                }))
            }
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Open a pull request, or find the one that exists: GitHub answers 422
    /// "already exists" to a duplicate — also to the retry of a request
    /// whose first answer was lost (a 502 after creating it). `true`: this
    /// call created it.
    pub async fn open_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<(PullRequest, bool), GitHubError> {
        match self.create_pull(head, base, title, body).await {
            Ok(pr) => Ok((pr, true)),
            Err(e) if e.status() == Some(422) => match self.find_pull(head).await? {
                Some(pr) => {
                    tracing::info!(number = pr.number, head, "the pull request already exists");
                    Ok((pr, false))
                }
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    pub async fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, GitHubError> {
        let path = format!("/repos/{}/pulls", self.repository);
        let v = self
            .call(
                reqwest::Method::POST,
                &path,
                Some(&json!({"head": head, "base": base, "title": title, "body": body})),
            )
            .await?;
        Ok(PullRequest {
            number: v["number"].as_u64().unwrap_or(0),
            url: v["html_url"].as_str().unwrap_or("").to_owned(),
        })
    }

    /// Pull request `number`, as a round needs it.
    pub async fn pull(&self, number: u64) -> Result<PullInfo, GitHubError> {
        let path = format!("/repos/{}/pulls/{number}", self.repository);
        let p = self.call(reqwest::Method::GET, &path, None).await?;
        let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
        Ok(PullInfo {
            number,
            url: s(&p["html_url"]),
            open: p["state"] == "open" && p["merged"] != Value::Bool(true),
            head_ref: s(&p["head"]["ref"]),
            head_sha: s(&p["head"]["sha"]),
            head_repo: s(&p["head"]["repo"]["full_name"]),
            base_ref: s(&p["base"]["ref"]),
            base_repo: s(&p["base"]["repo"]["full_name"]),
            default_branch: p["base"]["repo"]["default_branch"]
                .as_str()
                .unwrap_or("main")
                .to_owned(),
            labels: p["labels"]
                .as_array()
                .map(|a| a.iter().map(|l| s(&l["name"])).collect())
                .unwrap_or_default(),
            mergeable: p["mergeable"].as_bool(),
        })
    }

    /// The numbers of the open pull requests into `base` (100 a page; at
    /// most 10 pages).
    pub async fn pulls_into(&self, base: &str) -> Result<Vec<u64>, GitHubError> {
        let mut out = Vec::new();
        for page in 1..=10 {
            let path = format!(
                "/repos/{}/pulls?state=open&base={}&per_page=100&page={page}",
                self.repository,
                query_value(base)
            );
            let v = self.call(reqwest::Method::GET, &path, None).await?;
            let items = v.as_array().cloned().unwrap_or_default();
            out.extend(items.iter().filter_map(|p| p["number"].as_u64()));
            if items.len() < 100 {
                break;
            }
        }
        Ok(out)
    }

    /// A `repository_dispatch` of `event_type` with `payload`: a workflow
    /// run started by the workflow's own token (GitHub starts no run for
    /// its other events).
    pub async fn dispatch(&self, event_type: &str, payload: Value) -> Result<(), GitHubError> {
        let path = format!("/repos/{}/dispatches", self.repository);
        self.call(
            reqwest::Method::POST,
            &path,
            Some(&serde_json::json!({"event_type": event_type, "client_payload": payload})),
        )
        .await?;
        Ok(())
    }

    /// Every comment on pull request `number`: its conversation's, then
    /// its review threads', oldest first (100 a page; at most 30 pages of
    /// each).
    pub async fn comments(&self, number: u64) -> Result<Vec<IssueComment>, GitHubError> {
        let mut out = Vec::new();
        for list in ["issues", "pulls"] {
            for page in 1..=30 {
                let path = format!(
                    "/repos/{}/{list}/{number}/comments?per_page=100&page={page}",
                    self.repository
                );
                let v = self.call(reqwest::Method::GET, &path, None).await?;
                let items = v.as_array().cloned().unwrap_or_default();
                let last = items.len() < 100;
                let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
                out.extend(items.iter().map(|c| IssueComment {
                    id: c["id"].as_u64().unwrap_or(0),
                    author: s(&c["user"]["login"]),
                    association: s(&c["author_association"]),
                    author_type: s(&c["user"]["type"]),
                    body: s(&c["body"]),
                    in_thread: list == "pulls",
                }));
                if last {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Reply on the review thread whose first comment is `thread`.
    /// Returns the reply's id.
    pub async fn reply_in_thread(
        &self,
        number: u64,
        thread: u64,
        body: &str,
    ) -> Result<u64, GitHubError> {
        let path = format!(
            "/repos/{}/pulls/{number}/comments/{thread}/replies",
            self.repository
        );
        self.call(reqwest::Method::POST, &path, Some(&json!({ "body": body })))
            .await
            .map(|v| v["id"].as_u64().unwrap_or(0))
    }

    /// Replace the body of comment `id` (on a review thread when
    /// `in_thread`, else on the conversation).
    pub async fn edit_comment(
        &self,
        id: u64,
        in_thread: bool,
        body: &str,
    ) -> Result<(), GitHubError> {
        let list = if in_thread { "pulls" } else { "issues" };
        let path = format!("/repos/{}/{list}/comments/{id}", self.repository);
        self.call(
            reqwest::Method::PATCH,
            &path,
            Some(&json!({ "body": body })),
        )
        .await
        .map(|_| ())
    }

    /// Returns the comment's id.
    pub async fn comment(&self, number: u64, body: &str) -> Result<u64, GitHubError> {
        let path = format!("/repos/{}/issues/{number}/comments", self.repository);
        self.call(reqwest::Method::POST, &path, Some(&json!({ "body": body })))
            .await
            .map(|v| v["id"].as_u64().unwrap_or(0))
    }

    /// Set the `loopd/autofix` commit status.
    pub async fn set_status(
        &self,
        sha: &str,
        state: &str,
        description: &str,
        target_url: Option<&str>,
    ) -> Result<(), GitHubError> {
        let path = format!("/repos/{}/statuses/{sha}", self.repository);
        let mut body = json!({"state": state, "context": "loopd/autofix", "description": description.chars().take(140).collect::<String>()});
        if let Some(u) = target_url {
            body["target_url"] = json!(u);
        }
        self.call(reqwest::Method::POST, &path, Some(&body))
            .await
            .map(|_| ())
    }
}

/// What the remote branch must hold for loopd to push over it (a lease):
/// loopd only force-pushes its own `loopd/` branches, and only over what it
/// saw. A branch already at the pushed commit is always fine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The branch must not exist.
    Absent,
    /// The branch must be at this commit (loopd's own, seen before the job).
    At(git2::Oid),
}

/// Push `local_ref` to `remote_ref` at `target` (its URL, never a remote's
/// configuration), offering `token` only to the target's host. The push is
/// forced only for `refs/heads/loopd/...`, and only under `lease`.
/// Callbacks that offer `token` only to the host decided before the agent
/// ran, and only once (a wrong token must fail, not loop).
pub(super) fn token_callbacks<'a>(
    target: &'a PushTarget,
    token: Option<&'a str>,
) -> git2::RemoteCallbacks<'a> {
    let mut callbacks = git2::RemoteCallbacks::new();
    let mut tried = false;
    callbacks.credentials(move |url, _user, allowed| {
        if !target.accepts_credentials_for(url) {
            tracing::warn!(url = %redact(url), "a server asked for credentials that loopd only gives the decided push host");
            return Err(git2::Error::from_str("no credentials for this URL"));
        }
        if tried || !allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) {
            return Err(git2::Error::from_str("the token was refused"));
        }
        tried = true;
        match token {
            Some(t) => git2::Cred::userpass_plaintext("x-access-token", t),
            None => Err(git2::Error::from_str("no token for an authenticated remote")),
        }
    });
    callbacks
}

pub fn push(
    repo: &Path,
    target: &PushTarget,
    local_ref: &str,
    remote_ref: &str,
    token: Option<&str>,
    lease: Lease,
) -> Result<(), GitHubError> {
    let err = |e: git2::Error| GitHubError::Push {
        remote: target.url.clone(),
        message: e.message().to_owned(),
    };
    let r = git2::Repository::open(repo).map_err(err)?;
    let mut remote_obj = r.remote_anonymous(&target.url).map_err(err)?;
    // An `insteadOf`/`pushInsteadOf` anywhere in git's configuration would
    // send the push (and the token) elsewhere: refuse instead.
    let rewritten = remote_obj
        .pushurl()
        .filter(|p| *p != target.url)
        .or(remote_obj.url().filter(|u| *u != target.url));
    if let Some(to) = rewritten {
        return Err(GitHubError::PushRedirected {
            url: target.url.clone(),
            to: redact(to),
        });
    }
    let own = remote_ref.starts_with("refs/heads/loopd/");
    let rejected = std::cell::RefCell::new(None);
    let moved = std::cell::RefCell::new(None);
    {
        let mut callbacks = token_callbacks(target, token);
        callbacks.push_negotiation(|updates| {
            for u in updates {
                let found = u.src();
                let fine = found == u.dst()
                    || match lease {
                        Lease::Absent => found.is_zero(),
                        Lease::At(expected) => found == expected,
                    };
                if !fine {
                    *moved.borrow_mut() = Some(found);
                    return Err(git2::Error::from_str("the lease does not hold"));
                }
            }
            Ok(())
        });
        callbacks.push_update_reference(|refname, status| {
            if let Some(s) = status {
                *rejected.borrow_mut() = Some(format!("{refname}: {s}"));
            }
            Ok(())
        });
        let mut opts = git2::PushOptions::new();
        opts.remote_callbacks(callbacks);
        // Never follow a redirect to another server; never a proxy from the
        // configuration.
        opts.follow_redirects(git2::RemoteRedirect::None);
        opts.proxy_options(git2::ProxyOptions::new());
        let force = if own { "+" } else { "" };
        let pushed = remote_obj.push(
            &[format!("{force}{local_ref}:{remote_ref}")],
            Some(&mut opts),
        );
        if let Some(found) = moved.borrow_mut().take() {
            return Err(GitHubError::Lease {
                branch: remote_ref.trim_start_matches("refs/heads/").to_owned(),
                expected: match lease {
                    Lease::Absent => "no branch".into(),
                    Lease::At(o) => o.to_string(),
                },
                found: if found.is_zero() {
                    "no branch".into()
                } else {
                    found.to_string()
                },
            });
        }
        pushed.map_err(err)?;
    }
    match rejected.into_inner() {
        Some(why) => Err(GitHubError::Push {
            remote: target.url.clone(),
            message: why,
        }),
        None => Ok(()),
    }
}

/// `value` as a URL query value: every byte but the unreserved ones
/// percent-encoded (a branch may hold `&`, `#` or `+`).
fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_over_https_to_the_decided_host_only() {
        let t = PushTarget::new(
            "https://x-access-token:ghs_secret@github.com/acme/app.git",
            false,
        )
        .expect("https");
        assert_eq!(t.url, "https://github.com/acme/app.git", "userinfo dropped");
        assert!(t.accepts_credentials_for(
            "https://github.com/acme/app.git/info/refs?service=git-receive-pack"
        ));
        for other in [
            "http://github.com/acme/app.git",
            "https://github.com.evil.example/acme/app.git",
            "https://github.com:8443/acme/app.git",
            "http://127.0.0.1:9/x.git",
        ] {
            assert!(!t.accepts_credentials_for(other), "{other}");
        }
        for refused in [
            "http://github.com/acme/app.git",
            "git@github.com:acme/app.git",
            "ssh://git@github.com/acme/app.git",
        ] {
            assert!(PushTarget::new(refused, true).is_err(), "{refused}");
        }
        // Loopback http only with the test-only setting.
        assert!(PushTarget::new("http://127.0.0.1:9/acme/app.git", false).is_err());
        let local = PushTarget::new("http://127.0.0.1:9/acme/app.git", true).expect("loopback");
        assert!(local.accepts_credentials_for("http://127.0.0.1:9/acme/app.git/info/refs"));
        assert!(!local.accepts_credentials_for("http://127.0.0.1:10/acme/app.git/info/refs"));
        assert!(PushTarget::new("http://10.0.0.1/acme/app.git", true).is_err());
        // A path: pushed to without any credential.
        let path = PushTarget::new("/srv/git/app.git", false).expect("path");
        assert!(!path.accepts_credentials_for("/srv/git/app.git"));
    }

    /// A repository with one commit on `refs/heads/<branch>` (a new root
    /// commit each call), and a bare remote beside it.
    fn commit_on(r: &git2::Repository, branch: &str, text: &str) -> git2::Oid {
        let sig = git2::Signature::now("t", "t@example.invalid").expect("sig");
        let blob = r.blob(text.as_bytes()).expect("blob");
        let mut tb = r.treebuilder(None).expect("tree");
        tb.insert("f", blob, 0o100644).expect("insert");
        let tree = r.find_tree(tb.write().expect("write")).expect("tree");
        let oid = r
            .commit(None, &sig, &sig, text, &tree, &[])
            .expect("commit");
        r.reference(&format!("refs/heads/{branch}"), oid, true, "t")
            .expect("ref");
        oid
    }

    #[test]
    fn loopd_force_pushes_its_own_branch_only_over_what_it_saw() {
        let tmp = tempfile::tempdir().expect("tmp");
        let r = git2::Repository::init(tmp.path().join("work")).expect("init");
        let remote = tmp.path().join("remote.git");
        git2::Repository::init_bare(&remote).expect("bare");
        let target = PushTarget::new(&remote.to_string_lossy(), false).expect("path");
        let refspec = "refs/heads/loopd/autofix/abc";
        let push_now = |lease| {
            push(
                r.workdir().expect("workdir"),
                &target,
                refspec,
                refspec,
                None,
                lease,
            )
        };
        let first = commit_on(&r, "loopd/autofix/abc", "one");
        push_now(Lease::Absent).expect("a new branch");
        push_now(Lease::Absent).expect("already there: nothing to do");
        // A new fix: not over a branch it expected absent...
        let second = commit_on(&r, "loopd/autofix/abc", "two");
        match push_now(Lease::Absent) {
            Err(GitHubError::Lease { found, .. }) => assert_eq!(found, first.to_string()),
            other => panic!("pushed over an unexpected branch: {other:?}"),
        }
        // ...nor over a commit it did not see...
        match push_now(Lease::At(second)) {
            Err(GitHubError::Lease { .. }) => {}
            other => panic!("pushed without the lease: {other:?}"),
        }
        // ...only over the one it saw (a force-push: no common history).
        push_now(Lease::At(first)).expect("forced under the lease");
        let bare = git2::Repository::open_bare(&remote).expect("open");
        assert_eq!(bare.refname_to_id(refspec).expect("ref"), second);
    }

    #[test]
    fn a_push_url_rewritten_by_git_config_is_refused_before_connecting() {
        let tmp = tempfile::tempdir().expect("tmp");
        let r = git2::Repository::init(tmp.path()).expect("init");
        let mut cfg = r.config().expect("config");
        cfg.set_str(
            "url.http://127.0.0.1:9/.pushInsteadOf",
            "https://github.com/",
        )
        .expect("set");
        let target = PushTarget::new("https://github.com/acme/app.git", false).expect("target");
        match push(
            tmp.path(),
            &target,
            "refs/heads/x",
            "refs/heads/loopd/x",
            Some("t"),
            Lease::Absent,
        ) {
            Err(GitHubError::PushRedirected { to, .. }) => {
                assert!(to.starts_with("http://127.0.0.1:9/"), "{to}")
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}
