//! The events of a pull request that `loopd ci` answers, read from the
//! Actions event payload (`GITHUB_EVENT_NAME`, `GITHUB_EVENT_PATH`) into
//! one typed value: a check that failed on the pull request's head, a
//! comment or review from a person, a base that moved under it. The payload
//! is the only input; nothing here calls the API, so each shape is decided
//! by a unit test.
//!
//! Sources: GitHub's "Webhook events and payloads" (`check_run`,
//! `workflow_run`, `issue_comment`, `pull_request_review`,
//! `pull_request_review_comment`, `pull_request`).

use serde_json::Value;

/// What a round answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrEvent {
    /// A check run or workflow run on the pull request's head concluded
    /// in failure (or timed out).
    CheckFailed {
        pr: u64,
        /// `check_run` or `workflow_run`, with its id: the event's key.
        kind: &'static str,
        id: u64,
        name: String,
        head_sha: String,
    },
    /// A person's words on the pull request.
    Request(Request),
    /// A maintainer's command (`/loopd continue`): more rounds after the
    /// cap. The comment, for the trust rule.
    Continue(Request),
    /// A maintainer's command (`/loopd merge`): merge the base into the
    /// branch, the conflicts as the task.
    Merge(Request),
    /// The base branch moved and the pull request no longer merges
    /// (`pull_request` `synchronize`/`edited`, or a base push naming it).
    BaseMoved { pr: u64, head_sha: String },
}

/// A comment or review, as loopd reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub pr: u64,
    /// `issue_comment`, `pull_request_review` or
    /// `pull_request_review_comment`: with `id`, the event's key.
    pub kind: &'static str,
    pub id: u64,
    pub author: String,
    /// GitHub's `author_association` (`OWNER`, `MEMBER`, …).
    pub association: String,
    /// `Bot` for an app or `github-actions[bot]`.
    pub author_type: String,
    pub body: String,
    /// The review comment this one is, for a reply on its thread.
    pub thread: Option<u64>,
    /// The head repository is not the base repository.
    pub from_fork: bool,
}

/// The command that lifts the round cap, alone on a comment's first line.
pub const CONTINUE: &str = "/loopd continue";

/// The command that asks for the base to be merged in, alone on a
/// comment's first line.
pub const MERGE: &str = "/loopd merge";

/// The `repository_dispatch` type of a merge round a base push starts:
/// `client_payload` holds the pull request's `pr` and `head_sha`.
pub const DISPATCH: &str = "loopd-merge";

/// The marker every comment loopd writes carries (its own words are never
/// a request).
pub const MARKER: &str = "<!-- loopd:";

impl PrEvent {
    /// The pull request it is about.
    pub fn pr(&self) -> u64 {
        match self {
            PrEvent::CheckFailed { pr, .. } | PrEvent::BaseMoved { pr, .. } => *pr,
            PrEvent::Request(r) | PrEvent::Continue(r) | PrEvent::Merge(r) => r.pr,
        }
    }

    /// What makes it this event and no other, whatever GitHub redelivers
    /// or a maintainer re-runs: `kind:id` (`base:<head sha>` for a moved
    /// base, which is one event per head).
    pub fn key(&self) -> String {
        match self {
            PrEvent::CheckFailed { kind, id, .. } => format!("{kind}:{id}"),
            PrEvent::Request(r) | PrEvent::Continue(r) | PrEvent::Merge(r) => {
                format!("{}:{}", r.kind, r.id)
            }
            PrEvent::BaseMoved { head_sha, .. } => format!("base:{head_sha}"),
        }
    }

    /// Read the event `name` with payload `event`. `Ok(None)`: an event
    /// loopd has nothing to do with (a passing check, an edited comment,
    /// a comment on an issue); `Err`: a payload that is not what GitHub
    /// sends for the event, named.
    pub fn parse(name: &str, event: &Value) -> Result<Option<PrEvent>, String> {
        let n = |v: &Value, what: &str| {
            v.as_u64()
                .ok_or_else(|| format!("`{what}` is not a number"))
        };
        let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let fork = |pull: &Value| {
            let full = |r: &Value| r["full_name"].as_str().map(str::to_owned);
            full(&pull["head"]["repo"]) != full(&pull["base"]["repo"])
        };
        let action = event["action"].as_str().unwrap_or("");
        Ok(match name {
            "check_run" | "workflow_run" => {
                let run = &event[name];
                let failed = matches!(
                    run["conclusion"].as_str(),
                    Some("failure" | "timed_out" | "startup_failure")
                );
                if action != "completed" || !failed {
                    return Ok(None);
                }
                // A run on a fork's head names no pull request of this
                // repository: nothing to follow.
                let Some(pr) = run["pull_requests"].as_array().and_then(|a| a.first()) else {
                    return Ok(None);
                };
                Some(PrEvent::CheckFailed {
                    pr: n(&pr["number"], "pull_requests[0].number")?,
                    kind: if name == "check_run" {
                        "check_run"
                    } else {
                        "workflow_run"
                    },
                    id: n(&run["id"], "id")?,
                    name: s(&run["name"]),
                    head_sha: s(&run["head_sha"]),
                })
            }
            "issue_comment" => {
                // A comment on an issue, not a pull request, or an edit: an
                // edit would let anyone who can edit rewrite a request
                // loopd already answered.
                if action != "created" || event["issue"]["pull_request"].is_null() {
                    return Ok(None);
                }
                let c = &event["comment"];
                let pr = n(&event["issue"]["number"], "issue.number")?;
                let body = s(&c["body"]);
                let id = n(&c["id"], "comment.id")?;
                let (author, association) = (s(&c["user"]["login"]), s(&c["author_association"]));
                let request = Request {
                    pr,
                    kind: "issue_comment",
                    id,
                    author,
                    association,
                    author_type: s(&c["user"]["type"]),
                    body,
                    thread: None,
                    // An issue comment's payload does not say where the
                    // head lives; the pull request does ([`super::follow`]
                    // reads it before anything runs).
                    from_fork: false,
                };
                Some(match request.body.lines().next().map(str::trim) {
                    Some(CONTINUE) => PrEvent::Continue(request),
                    Some(MERGE) => PrEvent::Merge(request),
                    _ => PrEvent::Request(request),
                })
            }
            "pull_request_review" => {
                let r = &event["review"];
                let body = s(&r["body"]);
                if action != "submitted" || body.trim().is_empty() {
                    return Ok(None);
                }
                Some(PrEvent::Request(Request {
                    pr: n(&event["pull_request"]["number"], "pull_request.number")?,
                    kind: "pull_request_review",
                    id: n(&r["id"], "review.id")?,
                    author: s(&r["user"]["login"]),
                    association: s(&r["author_association"]),
                    author_type: s(&r["user"]["type"]),
                    body,
                    thread: None,
                    from_fork: fork(&event["pull_request"]),
                }))
            }
            "pull_request_review_comment" => {
                if action != "created" {
                    return Ok(None);
                }
                let c = &event["comment"];
                let id = n(&c["id"], "comment.id")?;
                Some(PrEvent::Request(Request {
                    pr: n(&event["pull_request"]["number"], "pull_request.number")?,
                    kind: "pull_request_review_comment",
                    id,
                    author: s(&c["user"]["login"]),
                    association: s(&c["author_association"]),
                    author_type: s(&c["user"]["type"]),
                    body: s(&c["body"]),
                    // A reply goes to the thread's first comment.
                    thread: Some(c["in_reply_to_id"].as_u64().unwrap_or(id)),
                    from_fork: fork(&event["pull_request"]),
                }))
            }
            "pull_request" => {
                let p = &event["pull_request"];
                let moved = matches!(action, "synchronize" | "edited" | "reopened")
                    && p["mergeable"] == Value::Bool(false);
                if !moved {
                    return Ok(None);
                }
                Some(PrEvent::BaseMoved {
                    pr: n(&p["number"], "pull_request.number")?,
                    head_sha: s(&p["head"]["sha"]),
                })
            }
            // A merge round a base push asked for ([`super::follow::sweep`]):
            // a dispatch needs write access to the repository, and the pull
            // request is read again before anything runs.
            "repository_dispatch" if action == DISPATCH => {
                let c = &event["client_payload"];
                Some(PrEvent::BaseMoved {
                    pr: n(&c["pr"], "client_payload.pr")?,
                    head_sha: s(&c["head_sha"]),
                })
            }
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_event_reads_into_one_shape_and_the_rest_into_none() {
        let check = json!({"action": "completed", "check_run": {"id": 7, "name": "tests", "conclusion": "failure", "head_sha": "abc", "pull_requests": [{"number": 4}]}});
        let e = PrEvent::parse("check_run", &check)
            .expect("parses")
            .expect("an event");
        assert_eq!(e.key(), "check_run:7");
        assert_eq!(e.pr(), 4);
        let mut green = check.clone();
        green["check_run"]["conclusion"] = json!("success");
        assert_eq!(PrEvent::parse("check_run", &green), Ok(None));
        let mut no_pr = check.clone();
        no_pr["check_run"]["pull_requests"] = json!([]);
        assert_eq!(PrEvent::parse("check_run", &no_pr), Ok(None));

        let comment = json!({"action": "created", "issue": {"number": 4, "pull_request": {}}, "comment": {"id": 9, "body": "please also handle X", "user": {"login": "lead", "type": "User"}, "author_association": "MEMBER"}});
        let PrEvent::Request(r) = PrEvent::parse("issue_comment", &comment)
            .expect("parses")
            .expect("an event")
        else {
            panic!("a request")
        };
        assert_eq!(
            (r.kind, r.id, r.association.as_str()),
            ("issue_comment", 9, "MEMBER")
        );
        let mut edited = comment.clone();
        edited["action"] = json!("edited");
        assert_eq!(
            PrEvent::parse("issue_comment", &edited),
            Ok(None),
            "an edit is no new request"
        );
        let mut on_issue = comment.clone();
        on_issue["issue"] = json!({"number": 4});
        assert_eq!(PrEvent::parse("issue_comment", &on_issue), Ok(None));
        let mut cont = comment.clone();
        cont["comment"]["body"] = json!("/loopd continue\nthanks");
        assert!(matches!(
            PrEvent::parse("issue_comment", &cont),
            Ok(Some(PrEvent::Continue(Request { pr: 4, id: 9, .. })))
        ));
        cont["comment"]["body"] = json!("  /loopd merge  ");
        assert!(matches!(
            PrEvent::parse("issue_comment", &cont),
            Ok(Some(PrEvent::Merge(Request { pr: 4, id: 9, .. })))
        ));

        let thread = json!({"action": "created", "pull_request": {"number": 4, "head": {"repo": {"full_name": "o/r"}}, "base": {"repo": {"full_name": "o/r"}}}, "comment": {"id": 12, "in_reply_to_id": 10, "body": "rename this", "user": {"login": "lead", "type": "User"}, "author_association": "OWNER"}});
        let PrEvent::Request(r) = PrEvent::parse("pull_request_review_comment", &thread)
            .expect("parses")
            .expect("an event")
        else {
            panic!("a request")
        };
        assert_eq!((r.thread, r.from_fork), (Some(10), false));
        let mut forked = thread.clone();
        forked["pull_request"]["head"]["repo"]["full_name"] = json!("mallory/r");
        let Ok(Some(PrEvent::Request(r))) = PrEvent::parse("pull_request_review_comment", &forked)
        else {
            panic!("a request")
        };
        assert!(r.from_fork);

        let review = json!({"action": "submitted", "pull_request": {"number": 4}, "review": {"id": 3, "body": "", "user": {"login": "lead"}, "author_association": "OWNER"}});
        assert_eq!(
            PrEvent::parse("pull_request_review", &review),
            Ok(None),
            "an approval without words asks nothing"
        );

        let bad = json!({"action": "completed", "check_run": {"id": "seven", "conclusion": "failure", "pull_requests": [{"number": 4}]}});
        assert!(PrEvent::parse("check_run", &bad)
            .unwrap_err()
            .contains("`id`"));
        assert_eq!(PrEvent::parse("push", &json!({})), Ok(None));

        let dispatch =
            json!({"action": "loopd-merge", "client_payload": {"pr": 4, "head_sha": "abc"}});
        let e = PrEvent::parse("repository_dispatch", &dispatch)
            .expect("parses")
            .expect("an event");
        assert_eq!((e.pr(), e.key()), (4, "base:abc".to_owned()));
        let mut other = dispatch.clone();
        other["action"] = json!("deploy");
        assert_eq!(PrEvent::parse("repository_dispatch", &other), Ok(None));
        other["action"] = json!("loopd-merge");
        other["client_payload"]["pr"] = json!("4");
        assert!(PrEvent::parse("repository_dispatch", &other)
            .unwrap_err()
            .contains("client_payload.pr"));
    }
}
