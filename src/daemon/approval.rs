//! The durable approval gate: with `[approval] required = true`, an accepted
//! job waits (`awaiting_approval`) with its branch and report in place and
//! nothing pushed, until a human runs `loopd approve` or `loopd reject`.
//!
//! The decision is written to `runs/<job-id>/approval.json` *before* anything
//! happens, so it survives restarts; and the outward step ([`deliver`])
//! refuses to run unless that file records an approval of exactly the
//! accepted commit. A check in the code path, not a convention.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{ApprovalAction, ApprovalSettings};
use crate::daemon::state::{JobState, Status};

/// A recorded decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decision {
    pub job_id: String,
    /// `approved` or `rejected`.
    pub decision: String,
    /// The accepted commit the decision is about.
    pub commit: String,
    pub by: String,
    pub at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("job `{0}` is not awaiting approval (it is {1})")]
    NotAwaiting(String, String),
    #[error(
        "no recorded approval of commit {commit} for job `{job}`: the outward step refuses to run"
    )]
    NotApproved { job: String, commit: String },
    #[error("job `{0}` was already {1}")]
    AlreadyDecided(String, String),
    #[error("cannot record the decision at `{}`: {source}", path.display())]
    Record {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the merge into `{branch}` failed: {message}")]
    Merge { branch: String, message: String },
    #[error(transparent)]
    GitHub(#[from] crate::ci::github::GitHubError),
}

fn decision_path(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("runs").join(id).join("approval.json")
}

pub fn load(state_dir: &Path, id: &str) -> Option<Decision> {
    let text = std::fs::read_to_string(decision_path(state_dir, id)).ok()?;
    serde_json::from_str(text.trim_start_matches('\u{feff}')).ok()
}

/// Record a decision durably, once. Recording the same decision again is a
/// no-op (so an interrupted `approve` can be retried).
pub fn record(state_dir: &Path, st: &JobState, decision: &str) -> Result<Decision, ApprovalError> {
    let commit = st.commit_accepted.clone().unwrap_or_default();
    if let Some(existing) = load(state_dir, &st.job_id) {
        if existing.decision != decision || existing.commit != commit {
            return Err(ApprovalError::AlreadyDecided(
                st.job_id.clone(),
                existing.decision,
            ));
        }
        return Ok(existing);
    }
    let by = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid {}", unsafe_uid()));
    let d = Decision {
        job_id: st.job_id.clone(),
        decision: decision.into(),
        commit,
        by,
        at: crate::util::now_rfc3339(),
    };
    let path = decision_path(state_dir, &st.job_id);
    if let Some(dir) = path.parent() {
        crate::util::private_dir(dir).map_err(|source| ApprovalError::Record {
            path: path.clone(),
            source,
        })?;
    }
    crate::util::write_json_atomic(&path, &d)
        .map_err(|source| ApprovalError::Record { path, source })?;
    Ok(d)
}

fn unsafe_uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The outward step: merge or push + pull request. Refuses without a
/// recorded approval of the job's accepted commit; runs at most once.
pub async fn deliver(
    state_dir: &Path,
    st: &mut JobState,
    settings: &ApprovalSettings,
) -> Result<String, ApprovalError> {
    let commit = st.commit_accepted.clone().unwrap_or_default();
    match load(state_dir, &st.job_id) {
        Some(d) if d.decision == "approved" && d.commit == commit && !commit.is_empty() => {}
        _ => {
            return Err(ApprovalError::NotApproved {
                job: st.job_id.clone(),
                commit,
            })
        }
    }
    if let Some(done) = &st.delivered {
        return Ok(format!("already delivered: {done}"));
    }
    let what = match settings.action {
        ApprovalAction::Merge => merge(&st.repo, &st.branch, &settings.merge_into)?,
        ApprovalAction::PullRequest => {
            let token = crate::ci::github::token_from_env()?;
            // The job has ended and put `.git/` back as it was pinned: the
            // remote's URL now is the one the job started with.
            let target = crate::ci::github::PushTarget::of_remote(
                &st.repo,
                &settings.remote,
                crate::ci::github::allow_http_loopback_from_env(),
            )?;
            crate::ci::github::push(
                &st.repo,
                &target,
                &format!("refs/heads/{}", st.branch),
                &format!("refs/heads/{}", st.branch),
                Some(&token),
                crate::ci::github::Lease::Absent,
            )?;
            let repo = std::env::var("LOOPD_GITHUB_REPOSITORY")
                .or_else(|_| std::env::var("GITHUB_REPOSITORY"))
                .map_err(|_| {
                    crate::ci::github::GitHubError::NotActions("LOOPD_GITHUB_REPOSITORY")
                })?;
            let api_url =
                std::env::var("GITHUB_API_URL").unwrap_or_else(|_| "https://api.github.com".into());
            let api = crate::ci::github::Api::new(&api_url, &repo, token)?;
            let pr = match api.find_pull(&st.branch).await? {
                Some(pr) => pr,
                None => {
                    let pr = api
                        .create_pull(
                            &st.branch,
                            &settings.base,
                            &format!("loopd: {}", st.task.lines().next().unwrap_or("")),
                            &format!(
                                "loopd job `{}`.\n\n{}",
                                st.job_id,
                                st.detail.clone().unwrap_or_default()
                            ),
                        )
                        .await?;
                    // The audit trail: who approved what, when.
                    if let Some(d) = load(state_dir, &st.job_id) {
                        api.comment(
                            pr.number,
                            &format!("Approved by {} at {} (commit {}).", d.by, d.at, d.commit),
                        )
                        .await?;
                    }
                    pr
                }
            };
            format!(
                "pushed `{}` and opened #{} ({})",
                st.branch, pr.number, pr.url
            )
        }
    };
    st.delivered = Some(what.clone());
    st.state = Status::Accepted;
    st.save(state_dir);
    Ok(what)
}

/// Merge `branch` into the local branch `into` (fast-forward or a merge
/// commit), refusing a branch that is checked out anywhere: its working tree
/// is the user's.
fn merge(repo: &Path, branch: &str, into: &str) -> Result<String, ApprovalError> {
    let err = |message: String| ApprovalError::Merge {
        branch: into.to_owned(),
        message,
    };
    let r = git2::Repository::open(repo).map_err(|e| err(e.to_string()))?;
    let target = r
        .find_branch(into, git2::BranchType::Local)
        .map_err(|e| err(e.to_string()))?;
    if target.is_head() {
        return Err(err(format!("`{into}` is checked out in `{}`; loopd does not touch your working tree (merge `{branch}` yourself, or set `merge_into` to another branch)", repo.display())));
    }
    let ours = target
        .get()
        .peel_to_commit()
        .map_err(|e| err(e.to_string()))?;
    let theirs = r
        .find_branch(branch, git2::BranchType::Local)
        .and_then(|b| b.get().peel_to_commit())
        .map_err(|e| err(e.to_string()))?;
    let refname = format!("refs/heads/{into}");
    if r.graph_descendant_of(theirs.id(), ours.id())
        .unwrap_or(false)
        || ours.id() == theirs.id()
    {
        r.reference(
            &refname,
            theirs.id(),
            true,
            &format!("loopd: fast-forward to {branch}"),
        )
        .map_err(|e| err(e.to_string()))?;
        return Ok(format!(
            "fast-forwarded `{into}` to `{branch}` ({})",
            theirs.id()
        ));
    }
    let mut index = r
        .merge_commits(&ours, &theirs, None)
        .map_err(|e| err(e.to_string()))?;
    if index.has_conflicts() {
        return Err(err(format!(
            "`{branch}` conflicts with `{into}`; nothing was changed"
        )));
    }
    let tree = r
        .find_tree(index.write_tree_to(&r).map_err(|e| err(e.to_string()))?)
        .map_err(|e| err(e.to_string()))?;
    let sig = r
        .signature()
        .or_else(|_| git2::Signature::now("loopd", "loopd@localhost"))
        .map_err(|e| err(e.to_string()))?;
    let oid = r
        .commit(
            Some(&refname),
            &sig,
            &sig,
            &format!("Merge {branch} into {into} (approved)"),
            &tree,
            &[&ours, &theirs],
        )
        .map_err(|e| err(e.to_string()))?;
    Ok(format!("merged `{branch}` into `{into}` ({oid})"))
}

/// Reject: record it, pin the accepted commit so nothing can lose it, and
/// leave every branch as it is.
pub fn reject(state_dir: &Path, st: &mut JobState) -> Result<String, ApprovalError> {
    record(state_dir, st, "rejected")?;
    let commit = st.commit_accepted.clone().unwrap_or_default();
    if let Ok(r) = git2::Repository::open(&st.repo) {
        if let Ok(oid) = git2::Oid::from_str(&commit) {
            let _ = r.reference(
                &crate::workspace::keep_ref(&st.job_id),
                oid,
                true,
                "loopd: rejected, parked",
            );
        }
    }
    st.stash_commit = Some(commit.clone());
    st.state = Status::Rejected;
    st.save(state_dir);
    Ok(format!("rejected; the change stays parked at `{}` (commit {commit}); `git cherry-pick {commit}` brings it back", crate::workspace::keep_ref(&st.job_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::daemon::spool::JobSpec;

    #[tokio::test]
    async fn the_outward_step_refuses_without_a_recorded_approval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = JobSpec {
            job_id: "20261130-000000000-abcd".into(),
            repo: dir.path().join("repo"),
            git_ref: "HEAD".into(),
            commit: "0".repeat(40),
            flags: Overrides::default(),
            task: "t".into(),
            goal: vec![],
            submitted_at: "now".into(),
        };
        let mut st = JobState::new(&spec, Status::AwaitingApproval);
        st.commit_accepted = Some("1".repeat(40));
        let settings = ApprovalSettings::default();
        let err = deliver(dir.path(), &mut st, &settings).await.unwrap_err();
        assert!(matches!(err, ApprovalError::NotApproved { .. }), "{err}");
        // A rejection recorded is not an approval either.
        reject(dir.path(), &mut st).expect("reject");
        let err = deliver(dir.path(), &mut st, &settings).await.unwrap_err();
        assert!(matches!(err, ApprovalError::NotApproved { .. }), "{err}");
        assert!(st.delivered.is_none());
    }
}
