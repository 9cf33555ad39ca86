//! Webhook notifications: when a job is accepted, awaits approval, or ends
//! otherwise. The body is Slack-compatible (`text`) with the structured
//! fields beside it. Sending never blocks or fails the job: it runs in a
//! task of its own, retries with backoff, and only logs what it could not
//! deliver. Webhook URLs carry secrets, so logs show only scheme and host.

use std::time::Duration;

use serde::Serialize;

/// One configured receiver (`[[notify]] url = "..."`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
}

/// How often and how patiently a notification is retried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub first_backoff: Duration,
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 5,
            first_backoff: Duration::from_millis(250),
            timeout: Duration::from_secs(10),
        }
    }
}

/// What happened to a job, as a notification carries it.
#[derive(Debug, Clone, Serialize)]
pub struct JobEvent {
    /// `accepted`, `awaiting_approval`, or the final state.
    pub event: String,
    pub job_id: String,
    pub repo: String,
    pub reason: String,
    pub detail: String,
    pub branch: Option<String>,
    pub cost_usd: f64,
    pub report: Option<String>,
    /// The agent's claim, the test it named, the goal output and the diff,
    /// when it escalated (`needs_human`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalation: Option<crate::outcome::Escalation>,
}

/// `scheme://host/…`: enough to tell receivers apart, no path or token.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!(
            "{scheme}://{}/…",
            rest.split(['/', '?']).next().unwrap_or("")
        ),
        None => "<webhook>".into(),
    }
}

fn body(e: &JobEvent) -> serde_json::Value {
    let mut v = serde_json::to_value(e).expect("an event serializes");
    v["text"] = serde_json::Value::String(format!(
        "loopd job {} {}: {} ({}) — ${:.4}{}{}",
        e.job_id,
        e.event,
        e.detail,
        e.reason,
        e.cost_usd,
        e.branch
            .as_ref()
            .filter(|b| !b.is_empty())
            .map(|b| format!(", branch {b}"))
            .unwrap_or_default(),
        e.escalation
            .as_ref()
            .map(|x| format!("\nThe agent asks a human about `{}`: {}", x.test, x.claim))
            .unwrap_or_default()
    ));
    v
}

/// Deliver to one webhook, retrying on errors and 5xx. Returns whether it
/// was delivered.
pub async fn deliver(
    client: &reqwest::Client,
    hook: &Webhook,
    event: &JobEvent,
    retry: Retry,
) -> bool {
    let payload = body(event);
    let mut backoff = retry.first_backoff;
    for attempt in 1..=retry.attempts {
        let res = client
            .post(&hook.url)
            .timeout(retry.timeout)
            .json(&payload)
            .send()
            .await;
        match res {
            Ok(r) if r.status().is_success() => {
                tracing::info!(webhook = %redact(&hook.url), attempt, event = %event.event, "notification delivered");
                return true;
            }
            Ok(r) if r.status().is_client_error() && r.status().as_u16() != 429 => {
                tracing::warn!(webhook = %redact(&hook.url), status = r.status().as_u16(), "notification refused; not retrying");
                return false;
            }
            Ok(r) => {
                tracing::warn!(webhook = %redact(&hook.url), status = r.status().as_u16(), attempt, "notification failed; retrying")
            }
            Err(e) => {
                tracing::warn!(webhook = %redact(&hook.url), error = %redact_error(&e), attempt, "notification failed; retrying")
            }
        }
        if attempt < retry.attempts {
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
        }
    }
    tracing::error!(webhook = %redact(&hook.url), event = %event.event, "notification not delivered");
    false
}

/// reqwest errors print the URL; keep only what it says about the failure.
fn redact_error(e: &reqwest::Error) -> String {
    e.without_url_ref().to_string()
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        if self.is_timeout() {
            "timeout".into()
        } else if self.is_connect() {
            "cannot connect".into()
        } else {
            "request failed".into()
        }
    }
}

/// Send to every webhook in the background; the returned handle may be
/// awaited (at shutdown) or dropped.
pub fn spawn(
    hooks: &[Webhook],
    event: JobEvent,
    retry: Retry,
) -> Option<tokio::task::JoinHandle<()>> {
    if hooks.is_empty() {
        return None;
    }
    let hooks = hooks.to_vec();
    Some(tokio::spawn(async move {
        let client = match reqwest::Client::builder().timeout(retry.timeout).build() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build the HTTP client for notifications");
                return;
            }
        };
        for h in &hooks {
            deliver(&client, h, &event, retry).await;
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact("https://hooks.slack.com/services/T000/B000/XXXXSECRET"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(
            redact("http://127.0.0.1:9/hook?token=abc"),
            "http://127.0.0.1:9/…"
        );
    }
}
