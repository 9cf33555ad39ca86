//! Everything GitHub-specific, in one module: the Actions environment and
//! event payload, the REST API (reqwest with rustls, timeouts, bounded
//! retries with backoff, a configurable base URL for GitHub Enterprise and
//! tests), and pushing with the token as the credential (git2).
//!
//! The token is read from the environment, kept in memory, and never logged
//! or written anywhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

pub use crate::util::TOKEN_VARS;

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
        message: String,
    },
    #[error("git push to `{remote}` failed: {message}")]
    Push { remote: String, message: String },
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
    pub step_summary: Option<PathBuf>,
    pub run_url: Option<String>,
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
        let run_url = match (
            std::env::var("GITHUB_SERVER_URL"),
            std::env::var("GITHUB_RUN_ID"),
        ) {
            (Ok(server), Ok(id)) => Some(format!("{server}/{repository}/actions/runs/{id}")),
            _ => None,
        };
        Ok(Actions {
            repository,
            sha,
            branch,
            event_name,
            from_fork,
            api_url,
            step_summary: std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from),
            run_url,
        })
    }
}

/// The token, from the first of [`TOKEN_VARS`] that is set.
pub fn token_from_env() -> Result<String, GitHubError> {
    TOKEN_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|t| !t.is_empty()))
        .ok_or(GitHubError::NoToken)
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
        let err = |message: String| GitHubError::Api {
            method: method.to_string(),
            path: path.to_owned(),
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
                        return Err(err(format!("HTTP {status}: {text}")));
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
                        return Err(err(what.into()));
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
        Err(err("retries exhausted".into()))
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

    pub async fn comment(&self, number: u64, body: &str) -> Result<(), GitHubError> {
        let path = format!("/repos/{}/issues/{number}/comments", self.repository);
        self.call(reqwest::Method::POST, &path, Some(&json!({ "body": body })))
            .await
            .map(|_| ())
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

/// Push `local_ref` to `remote_ref` on `remote` (a name or a URL), with the
/// token as the credential for https remotes.
pub fn push(
    repo: &Path,
    remote: &str,
    local_ref: &str,
    remote_ref: &str,
    token: Option<&str>,
) -> Result<(), GitHubError> {
    let err = |e: git2::Error| GitHubError::Push {
        remote: remote.to_owned(),
        message: e.message().to_owned(),
    };
    let r = git2::Repository::open(repo).map_err(err)?;
    let mut remote_obj = match r.find_remote(remote) {
        Ok(rm) => rm,
        Err(_) => r.remote_anonymous(remote).map_err(err)?,
    };
    let rejected = std::cell::RefCell::new(None);
    {
        let mut callbacks = git2::RemoteCallbacks::new();
        let mut tried = false;
        callbacks.credentials(move |_url, _user, _allowed| {
            // One try: a wrong token must fail, not loop.
            if tried {
                return Err(git2::Error::from_str("the token was refused"));
            }
            tried = true;
            match token {
                Some(t) => git2::Cred::userpass_plaintext("x-access-token", t),
                None => Err(git2::Error::from_str(
                    "no token for an authenticated remote",
                )),
            }
        });
        callbacks.push_update_reference(|refname, status| {
            if let Some(s) = status {
                *rejected.borrow_mut() = Some(format!("{refname}: {s}"));
            }
            Ok(())
        });
        let mut opts = git2::PushOptions::new();
        opts.remote_callbacks(callbacks);
        remote_obj
            .push(&[format!("{local_ref}:{remote_ref}")], Some(&mut opts))
            .map_err(err)?;
    }
    match rejected.into_inner() {
        Some(why) => Err(GitHubError::Push {
            remote: remote.to_owned(),
            message: why,
        }),
        None => Ok(()),
    }
}
