//! The autofix flow of `loopd ci`: the loop first, then the gate in code,
//! then the one outward step (push + pull request). The CLI only parses
//! arguments and maps the [`CiReport`] to an exit code.

use std::path::Path;

use super::github::{self, Actions, Api, GitHubError};
use super::{CiReport, Decision};
use crate::config::Job;
use crate::job::{self, Control};
use crate::outcome::Outcome;
use crate::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum CiError {
    #[error(transparent)]
    GitHub(#[from] GitHubError),
    #[error(transparent)]
    Job(#[from] job::JobError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error("cannot commit the fix: {0}")]
    Commit(#[source] git2::Error),
}

/// What the autofix needs, resolved by the caller.
pub struct Autofix<'a> {
    pub actions: &'a Actions,
    pub job: Job,
    pub ws: Workspace,
    /// The remote to push the fix to.
    pub remote: &'a str,
    /// The flags set `budget_usd` / `max_attempts` (else `[ci]`'s apply).
    pub budget_from_flags: bool,
    pub attempts_from_flags: bool,
}

impl Autofix<'_> {
    fn report(&self, decision: Decision, why: String) -> CiReport {
        CiReport {
            decision,
            why,
            sha: self.actions.sha.clone(),
            branch: None,
            pull_request: None,
            risk_violations: vec![],
            summary: None,
        }
    }
}

/// Run the autofix. `ready` is the last check before the job touches
/// anything (a clean tree, a state dir); `control` stops the job.
pub async fn run(
    mut a: Autofix<'_>,
    ready: impl FnOnce(&Workspace, &Job) -> Result<(), CiError>,
    control: impl FnOnce() -> Control,
) -> Result<CiReport, CiError> {
    let actions = a.actions;
    // No recursion: never on loopd's own branches or commits.
    if let Some(why) = super::is_loopd_work(&actions.branch, &a.ws) {
        return Ok(a.report(Decision::Skipped, format!("nothing to do: {why}")));
    }
    if actions.from_fork && !a.job.ci.allow_forks {
        return Ok(a.report(Decision::Refused, format!("the `{}` event comes from a fork; loopd does not run with this repository's secrets on it (set `[ci] allow_forks = true` to allow)", actions.event_name)));
    }
    let token = github::token_from_env()?;
    let api = Api::new(&actions.api_url, &actions.repository, token.clone())?;
    let branch = super::autofix_branch(&actions.sha);
    // At most one pull request per failing commit.
    if let Some(pr) = api.find_pull(&branch).await? {
        let mut r = a.report(
            Decision::PullRequestExists,
            format!("an autofix for {} already exists: #{}", actions.sha, pr.number),
        );
        r.pull_request = Some(pr);
        return Ok(r);
    }

    // The loop, on the small CI budget unless the flags say otherwise.
    if !a.budget_from_flags {
        a.job.caps.budget_usd = a.job.ci.budget_usd;
    }
    if !a.attempts_from_flags {
        a.job.max_attempts = a.job.ci.max_attempts;
    }
    ready(&a.ws, &a.job)?;
    let repo_root = a.ws.root().to_path_buf();
    let ws = std::mem::replace(&mut a.ws, Workspace::open(&repo_root)?);
    let summary = job::run(&a.job, ws, control()).await?;
    if summary.outcome != Outcome::Accepted {
        let _ = api
            .set_status(
                &actions.sha,
                "failure",
                &format!("no verified fix: {}", summary.reason),
                actions.run_url.as_deref(),
            )
            .await;
        let mut r = a.report(
            Decision::NotAccepted,
            format!("no fix was accepted ({}): {}", summary.reason, summary.detail),
        );
        r.summary = Some(summary);
        return Ok(r);
    }

    // The autofix gate, in code: accepted (every deterministic gate green)
    // and the risk policy.
    let ws = Workspace::open(&repo_root)?;
    let diff = ws.diff_since(ws.head_commit()?)?;
    let violations = a.job.ci.violations(&diff);
    if !violations.is_empty() {
        let _ = api
            .set_status(
                &actions.sha,
                "failure",
                "a fix was found but fails the risk policy",
                actions.run_url.as_deref(),
            )
            .await;
        let mut r = a.report(
            Decision::GateRefused,
            format!("the fix was accepted but not pushed: {}", violations.join("; ")),
        );
        r.risk_violations = violations;
        r.summary = Some(summary);
        return Ok(r);
    }

    // The one outward step.
    let message = format!(
        "loopd: autofix for {}\n\n{}\n\n{} {}\n",
        &actions.sha[..actions.sha.len().min(12)],
        summary.task,
        super::TRAILER,
        summary.job_id
    );
    super::commit_to_branch(&repo_root, &branch, &message).map_err(CiError::Commit)?;
    push(&repo_root, a.remote, &branch, &token)?;
    let baseline =
        std::fs::read_to_string(summary.run_dir.join("baseline.txt")).unwrap_or_default();
    let body = super::pr_body(
        &summary,
        &crate::goal::head_and_tail(&baseline, 3000),
        actions.run_url.as_deref(),
    );
    let title = format!("loopd autofix: {}", summary.headline());
    let pr = api
        .create_pull(&branch, &actions.branch, &title, &body)
        .await?;
    let _ = api
        .set_status(
            &actions.sha,
            "success",
            &format!("a verified fix is proposed in #{}", pr.number),
            Some(&pr.url),
        )
        .await;
    let mut r = a.report(
        Decision::PullRequestOpened,
        format!(
            "pushed `{branch}` and opened #{} against `{}`",
            pr.number, actions.branch
        ),
    );
    r.branch = Some(branch);
    r.pull_request = Some(pr);
    r.summary = Some(summary);
    Ok(r)
}

fn push(repo: &Path, remote: &str, branch: &str, token: &str) -> Result<(), GitHubError> {
    let refspec = format!("refs/heads/{branch}");
    github::push(repo, remote, &refspec, &refspec, Some(token))
}
