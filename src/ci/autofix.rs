//! The autofix flow of `loopd ci`, in order:
//!
//! 1. nothing on loopd's own work, nothing from a fork (unless allowed);
//! 2. the push target, decided **before the agent runs** ([`PushTarget`]);
//! 3. what an earlier run left: a pull request (done), or a pushed fix for
//!    this very commit without one (open the pull request from it — no model
//!    call), or a branch loopd did not make (refuse);
//! 4. the loop, with the checkout's credentials held out of it;
//! 5. the gate in code (accepted + the risk policy), on the change as the
//!    agent wrote it (goal-step and build artefacts left out);
//! 6. the one outward step: commit, push (forced only over loopd's own
//!    commit, with a lease), open the pull request ("already exists" is
//!    success) — each journaled.
//!
//! An API or push failure ends in [`Decision::Error`] with the commit
//! status set when the API still answers; the CLI writes the step summary
//! either way and maps the [`CiReport`] to an exit code.

use std::path::Path;

use super::github::{self, Actions, Api, BranchTip, GitHubError, Lease, PushTarget};
use super::{CiReport, Decision};
use crate::config::Job;
use crate::job::{self, Control};
use crate::journal::{Event, Journal, JournalError};
use crate::outcome::Outcome;
use crate::record::Summary;
use crate::workspace::credentials::{self, CredentialError};
use crate::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum CiError {
    #[error(transparent)]
    GitHub(#[from] GitHubError),
    #[error(transparent)]
    Job(#[from] job::JobError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("cannot put the git directory back as pinned: {0}")]
    GitDir(#[source] std::io::Error),
    #[error(transparent)]
    Continue(#[from] job::continued::ContinueError),
    #[error("cannot commit the fix: {0}")]
    Commit(#[source] git2::Error),
}

/// What the autofix needs, resolved by the caller.
pub struct Autofix<'a> {
    pub actions: &'a Actions,
    pub job: Job,
    pub ws: Workspace,
    /// The remote whose URL is the push target outside Actions.
    pub remote: &'a str,
    /// The flags set `budget_usd` / `max_attempts` (else `[ci]`'s apply).
    pub budget_from_flags: bool,
    pub attempts_from_flags: bool,
}

impl Autofix<'_> {
    fn report(&self, decision: Decision, why: String) -> CiReport {
        CiReport::new(decision, why, &self.actions.sha)
    }
}

/// The outward side of one run: the API, the branch, where it is pushed.
struct Outward<'a> {
    actions: &'a Actions,
    api: Api,
    branch: String,
    target: PushTarget,
    token: String,
}

impl Outward<'_> {
    /// Best effort: the commit status says how it went (an API that is down
    /// cannot be told; the step summary still is).
    async fn status(&self, state: &str, description: &str, url: Option<&str>) {
        let url = url.or(self.actions.run_url.as_deref());
        if let Err(e) = self
            .api
            .set_status(&self.actions.sha, state, description, url)
            .await
        {
            tracing::warn!(error = %e, state, "cannot set the commit status");
        }
    }

    /// The pull request exists (`opened_now`: this run opened it): the
    /// status says so, and so does the report.
    async fn proposed(
        &self,
        mut report: CiReport,
        pr: github::PullRequest,
        opened_now: bool,
        why: String,
    ) -> CiReport {
        self.status(
            "success",
            &format!("a verified fix is proposed in #{}", pr.number),
            Some(&pr.url),
        )
        .await;
        report.decision = if opened_now {
            Decision::PullRequestOpened
        } else {
            Decision::PullRequestExists
        };
        report.why = why;
        report.pull_request = Some(pr);
        report
    }

    /// An API or push failure as the run's decision.
    async fn failed(&self, mut report: CiReport, what: &str, e: GitHubError) -> CiReport {
        tracing::error!(error = %e, what, "the autofix's outward step failed");
        self.status("error", &format!("loopd could not {what}"), None)
            .await;
        report.decision = Decision::Error;
        report.why = match e.hint() {
            Some(h) => format!("could not {what}: {e} (hint: {h})"),
            None => format!("could not {what}: {e}"),
        };
        report.branch = Some(self.branch.clone());
        report.push_url = Some(self.target.url.clone());
        report
    }
}

/// Is `tip` loopd's commit (its trailer)?
fn is_loopd_commit(tip: &BranchTip) -> bool {
    tip.message.lines().any(|l| l.starts_with(super::TRAILER))
}

/// Is `tip` loopd's verified fix of `sha` (both trailers)?
fn is_fix_for(tip: &BranchTip, sha: &str) -> bool {
    is_loopd_commit(tip)
        && tip
            .message
            .lines()
            .any(|l| l.strip_prefix(super::FIX_TRAILER).map(str::trim) == Some(sha))
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
    // Where the fix may go is decided now, before the agent exists: nothing
    // it writes into the repository's configuration can change it.
    let target = PushTarget::decide(actions, a.ws.root(), a.remote)?;
    tracing::info!(push_url = %target.url, "push target decided");
    let out = Outward {
        actions,
        api: Api::new(&actions.api_url, &actions.repository, token.clone())?,
        branch: super::autofix_branch(&actions.sha),
        target,
        token,
    };
    let mut base_report = a.report(Decision::Error, String::new());
    base_report.push_url = Some(out.target.url.clone());

    // At most one pull request per failing commit (open or closed).
    let existing = match out.api.find_pull(&out.branch).await {
        Ok(p) => p,
        Err(e) => {
            return Ok(out
                .failed(base_report, "look for an earlier pull request", e)
                .await)
        }
    };
    if let Some(pr) = existing {
        let mut r = base_report;
        r.decision = Decision::PullRequestExists;
        r.why = format!(
            "an autofix for {} already exists: #{}",
            actions.sha, pr.number
        );
        r.branch = Some(out.branch.clone());
        r.pull_request = Some(pr);
        return Ok(r);
    }
    // A branch from an earlier run that never got its pull request.
    let tip = match out.api.branch(&out.branch).await {
        Ok(t) => t,
        Err(e) => {
            return Ok(out
                .failed(base_report, "look for an earlier autofix branch", e)
                .await)
        }
    };
    let lease = match tip {
        None => Lease::Absent,
        Some(t) if is_fix_for(&t, &actions.sha) => {
            return Ok(open_from_earlier_run(&out, base_report, &t).await)
        }
        Some(t) if is_loopd_commit(&t) => match git2::Oid::from_str(&t.sha) {
            Ok(oid) => Lease::At(oid),
            Err(_) => {
                let mut r = base_report;
                r.why = format!(
                    "the API names the tip of `{}` as `{}`, which is not a commit id",
                    out.branch, t.sha
                );
                return Ok(r);
            }
        },
        Some(t) => {
            let mut r = base_report;
            r.branch = Some(out.branch.clone());
            r.why = format!(
                "`{}` exists at {} with a commit loopd did not make; loopd never pushes over someone else's work (hint: delete the branch to let loopd try again)",
                out.branch, t.sha
            );
            return Ok(r);
        }
    };

    // The loop, on the small CI budget unless the flags say otherwise.
    if !a.budget_from_flags {
        a.job.caps.limits.budget_usd = a.job.ci.budget_usd;
    }
    if !a.attempts_from_flags {
        a.job.max_attempts = a.job.ci.max_attempts;
    }
    ready(&a.ws, &a.job)?;
    let repo_root = a.ws.root().to_path_buf();
    // The credentials stay out of the checkout until the push is done: the
    // job's own hold ends with the job, this one after the outward step.
    let _held = Hold::new(&a.job.state_dir, a.ws.common_dir())?;
    let ws = std::mem::replace(&mut a.ws, Workspace::open(&repo_root)?);
    let summary = job::run(&a.job, ws, control()).await?;
    if summary.outcome != Outcome::Accepted {
        out.status(
            "failure",
            &format!("no verified fix: {}", summary.reason),
            None,
        )
        .await;
        let mut r = base_report;
        r.decision = Decision::NotAccepted;
        r.why = format!(
            "no fix was accepted ({}): {}",
            summary.reason, summary.detail
        );
        r.summary = Some(summary);
        return Ok(r);
    }
    outward(&a, &out, base_report, summary, lease).await
}

/// The gate in code, then commit → push → pull request, each journaled.
async fn outward(
    a: &Autofix<'_>,
    out: &Outward<'_>,
    mut report: CiReport,
    summary: Summary,
    lease: Lease,
) -> Result<CiReport, CiError> {
    let actions = out.actions;
    let mut accepted = Accepted::read(a.ws.root(), &a.job, &summary)?;
    let violations = a.job.ci.violations(&accepted.diff);
    if !violations.is_empty() {
        out.status("failure", "a fix was found but fails the risk policy", None)
            .await;
        report.decision = Decision::GateRefused;
        report.why = format!(
            "the fix was accepted but not pushed: {}",
            violations.join("; ")
        );
        report.risk_violations = violations;
        report.summary = Some(summary);
        return Ok(report);
    }

    let message = format!(
        "loopd: autofix for {}\n\n{}\n\n{} {}\n{} {}\n",
        &actions.sha[..actions.sha.len().min(12)],
        summary.task,
        super::TRAILER,
        summary.job_id,
        super::FIX_TRAILER,
        actions.sha,
    );
    let commit = accepted.commit(&out.branch, &message)?;
    report.branch = Some(out.branch.clone());
    let refspec = format!("refs/heads/{}", out.branch);
    let (ws, journal) = (&accepted.ws, &mut accepted.journal);
    if let Err(e) = github::push(
        ws.root(),
        &out.target,
        &refspec,
        &refspec,
        Some(&out.token),
        lease,
    ) {
        report.summary = Some(summary);
        return Ok(out
            .failed(report, &format!("push `{}`", out.branch), e)
            .await);
    }
    journal.append(Event::Pushed {
        url: out.target.url.clone(),
        branch: out.branch.clone(),
        commit: commit.clone(),
        replaced: match lease {
            Lease::At(o) => Some(o.to_string()),
            Lease::Absent => None,
        },
    })?;
    tracing::info!(branch = %out.branch, %commit, url = %out.target.url, "pushed the fix");

    let baseline =
        std::fs::read_to_string(summary.run_dir.join("baseline.txt")).unwrap_or_default();
    let body = super::pr_body(
        &summary,
        &crate::goal::head_and_tail(&baseline, 3000),
        actions.run_url.as_deref(),
    );
    let title = format!("loopd autofix: {}", summary.headline());
    let (pr, opened_now) = match out
        .api
        .open_pull(&out.branch, &actions.branch, &title, &body)
        .await
    {
        Ok(p) => p,
        Err(e) => {
            report.summary = Some(summary);
            return Ok(out.failed(report, "open the pull request", e).await);
        }
    };
    journal.append(Event::PullRequest {
        number: pr.number,
        url: pr.url.clone(),
        opened_now,
    })?;
    let why = format!(
        "pushed `{}` and {} #{} against `{}`",
        out.branch,
        if opened_now {
            "opened"
        } else {
            "found the existing"
        },
        pr.number,
        actions.branch
    );
    let mut report = out.proposed(report, pr, opened_now, why).await;
    report.summary = Some(summary);
    Ok(report)
}

/// An accepted job's change, read back for the outward step: the checkout
/// with `.git/` as pinned (put back once more before loopd's own git
/// runs), the journal, BASE_REF, and the change as the agent wrote it —
/// artefacts of goal steps and builds are not part of the risk policy or
/// the commit.
pub(super) struct Accepted {
    pub ws: Workspace,
    pub journal: Journal,
    pub base: git2::Oid,
    pub diff: crate::workspace::Diff,
}

impl Accepted {
    pub(super) fn read(root: &Path, job: &Job, summary: &Summary) -> Result<Accepted, CiError> {
        let ws = Workspace::open(root)?;
        let journal = Journal::open(&summary.run_dir)?;
        if let Some(pin) = job::git_dir_pin(&summary.run_dir, &ws) {
            pin.restore(Some(&summary.run_dir.join("git-dir-changed").join("ci")))
                .map_err(CiError::GitDir)?;
        }
        let base = git2::Oid::from_str(&summary.base_ref).map_err(CiError::Commit)?;
        let diff = ws.diff_since(
            base,
            &journal.state().artefacts,
            crate::workspace::DiffLimits::for_bound(job.guard.max_diff_bytes()),
            &mut std::io::sink(),
        )?;
        Ok(Accepted {
            ws,
            journal,
            base,
            diff,
        })
    }

    /// The judged tree committed on BASE_REF as local `branch`, journaled
    /// (`committed`): once — an outward step run again finds the commit.
    /// What is committed is the tree the judges judged, and the change the
    /// risk policy read must be that tree.
    pub(super) fn commit(&mut self, branch: &str, message: &str) -> Result<String, CiError> {
        if let Some(c) = self.journal.state().committed.clone() {
            return Ok(c);
        }
        let judged = self.judged()?;
        let c = self
            .ws
            .commit_tree(self.base, judged, branch, message)?
            .to_string();
        self.journal
            .append(Event::Committed { commit: c.clone() })?;
        Ok(c)
    }

    /// The tree the judges accepted, checked to be the working tree's
    /// change the risk policy read.
    pub(super) fn judged(&self) -> Result<git2::Oid, CiError> {
        let judged = self
            .journal
            .state()
            .accepted_tree
            .as_deref()
            .and_then(|t| git2::Oid::from_str(t).ok())
            .ok_or_else(|| {
                CiError::Commit(git2::Error::from_str(
                    "the journal holds no judged tree of the accepted attempt",
                ))
            })?;
        if self.ws.judged_tree(self.base, &self.diff)? != Some(judged) {
            return Err(CiError::Commit(git2::Error::from_str(
                "the working tree is no longer the change the judges accepted; nothing is pushed",
            )));
        }
        Ok(judged)
    }
}

/// An earlier run pushed a verified fix of this commit but never opened its
/// pull request (the API failed after the push): open it now, without a
/// model call.
async fn open_from_earlier_run(
    out: &Outward<'_>,
    mut report: CiReport,
    tip: &BranchTip,
) -> CiReport {
    let actions = out.actions;
    let job = tip
        .message
        .lines()
        .find_map(|l| l.strip_prefix(super::TRAILER))
        .map(str::trim)
        .unwrap_or("?");
    let short = &actions.sha[..actions.sha.len().min(12)];
    let body = format!(
        "## loopd autofix\n\nThe fix on `{}` ({}) was made and verified by an earlier run (loopd job `{job}`): the goal test, every deterministic gate, the critic and the risk policy passed before it was pushed. That run could not open this pull request, so this run opens it without running the loop again.\n",
        out.branch, tip.sha
    );
    let body = match &actions.run_url {
        Some(u) => format!("{body}\n[The CI run]({u})\n"),
        None => body,
    };
    report.branch = Some(out.branch.clone());
    match out
        .api
        .open_pull(
            &out.branch,
            &actions.branch,
            &format!("loopd autofix for {short}"),
            &body,
        )
        .await
    {
        Ok((pr, opened_now)) => {
            let why = format!(
                "`{}` already carries a verified fix of {} from job `{job}`; {} #{} without running the loop again",
                out.branch,
                actions.sha,
                if opened_now { "opened" } else { "found" },
                pr.number
            );
            out.proposed(report, pr, opened_now, why).await
        }
        Err(e) => out.failed(report, "open the pull request", e).await,
    }
}

/// `loopd ci`'s own hold on the checkout's credentials, released when it
/// goes out of scope (a panic included; a `kill -9` leaves a record the next
/// loopd job in the repository recovers).
pub(super) struct Hold {
    state_dir: std::path::PathBuf,
    git_dir: std::path::PathBuf,
    id: String,
    original_sha256: Option<String>,
}

impl Hold {
    pub(super) fn new(state_dir: &Path, git_dir: &Path) -> Result<Hold, CredentialError> {
        let id = format!("ci-{}", std::process::id());
        let held = credentials::hold(state_dir, git_dir, &id)?;
        Ok(Hold {
            state_dir: state_dir.to_path_buf(),
            git_dir: git_dir.to_path_buf(),
            id,
            original_sha256: held.original_sha256,
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let held = self.original_sha256.as_deref();
        if let Err(e) = credentials::release(&self.state_dir, &self.git_dir, &self.id, held) {
            tracing::error!(error = %e, "cannot put the checkout's git credentials back; the next loopd job in this repository retries");
        }
    }
}
