//! One queued job, run to its end in a repository of its own.
//!
//! The job's git directory (`gitdirs/<id>`) and working tree
//! (`worktrees/<id>`) live under the state dir; its objects are borrowed
//! from the user's repository, which the job's processes can read but never
//! write ([`crate::workspace`]'s job checkouts). loopd makes the branch
//! `loopd/<job-id>` at the pinned commit in the user's repository at the
//! start, so the user's own working tree is never touched and two jobs on
//! one repository run side by side. On acceptance loopd commits the judged
//! tree and brings the commit home onto that branch; on any other ending the
//! circuit breaker has parked the work (brought home too); either way the
//! job's repository is removed and the branch stays. A job suspended by a
//! shutdown keeps its repository and resumes from its journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{Oid, Repository};
use tokio::sync::watch;

use super::spool::{JobSpec, Spool};
use super::state::{branch_name, JobState, Status};
use crate::agent::session::{StopCause, StopRequest};
use crate::config::{Job, JobFlags};
use crate::job::{self, Control};
use crate::journal::{Event, Journal};
use crate::record::Summary;
use crate::workspace::Workspace;

/// What every job of a daemon shares.
pub struct Context {
    pub state_dir: PathBuf,
    pub spool: Spool,
    pub agent_bin: Option<PathBuf>,
    pub critic_bin: Option<PathBuf>,
    pub loopd_exe: PathBuf,
    /// The model credentials and upstreams, picked when the daemon started.
    pub access: crate::agent::gateway::AccessMap,
}

fn worktree_path(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("worktrees").join(id)
}

fn git_dir_path(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("gitdirs").join(id)
}

/// Branches are created in the user's repository by several jobs at once:
/// serialized, as is a job repository's creation.
static WORKTREE_ADMIN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Make the job's repository (its branch `loopd/<id>` at the pinned commit,
/// in the user's repository and its own), or reopen the one a suspended
/// run left. A job started by an older loopd in a `git worktree` goes on
/// in it.
pub fn prepare_worktree(spec: &JobSpec, state_dir: &Path) -> Result<Workspace, String> {
    let _admin = WORKTREE_ADMIN.lock().unwrap_or_else(|e| e.into_inner());
    let path = worktree_path(state_dir, &spec.job_id);
    let git_dir = git_dir_path(state_dir, &spec.job_id);
    if !git_dir.exists() && path.join(".git").is_file() && path.join(".git").exists() {
        if let Ok(ws) = Workspace::open(&path) {
            if ws.common_dir().starts_with(&spec.repo) {
                tracing::info!(job_id = %spec.job_id, "resuming in the git worktree an older loopd made");
                return Ok(ws);
            }
        }
    }
    let repo = Repository::open(&spec.repo)
        .map_err(|e| format!("cannot open the repository `{}`: {e}", spec.repo.display()))?;
    let oid =
        Oid::from_str(&spec.commit).map_err(|e| format!("bad commit id `{}`: {e}", spec.commit))?;
    let commit = repo.find_commit(oid).map_err(|e| {
        format!(
            "commit {} is not in `{}`: {e}",
            spec.commit,
            spec.repo.display()
        )
    })?;
    let name = branch_name(&spec.job_id);
    if repo.find_branch(&name, git2::BranchType::Local).is_err() {
        repo.branch(&name, &commit, false)
            .map_err(|e| format!("cannot create branch `{name}`: {e}"))?;
    }
    for dir in [path.parent(), git_dir.parent()].into_iter().flatten() {
        crate::util::private_dir(dir)
            .map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    }
    Workspace::job_checkout(&spec.repo, oid, &name, &git_dir, &path)
        .map_err(|e| format!("cannot make the job's repository: {e}"))
}

/// Reopen a job's repository after the job ran (to commit what it judged).
fn reopen(spec: &JobSpec, state_dir: &Path) -> Result<Workspace, String> {
    let git_dir = git_dir_path(state_dir, &spec.job_id);
    if git_dir.exists() {
        Workspace::open_job(&git_dir, &spec.repo)
    } else {
        Workspace::open(&worktree_path(state_dir, &spec.job_id))
    }
    .map_err(|e| e.to_string())
}

/// Remove the job's repository (and the registration of an older loopd's
/// worktree); the branch stays.
pub fn remove_worktree(repo: &Path, state_dir: &Path, id: &str) {
    let _admin = WORKTREE_ADMIN.lock().unwrap_or_else(|e| e.into_inner());
    for path in [worktree_path(state_dir, id), git_dir_path(state_dir, id)] {
        if let Err(e) = std::fs::remove_dir_all(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove the job's repository");
            }
        }
    }
    if let Ok(r) = Repository::open(repo) {
        if let Ok(wt) = r.find_worktree(id) {
            let _ = wt.prune(Some(
                git2::WorktreePruneOptions::new()
                    .valid(true)
                    .working_tree(true),
            ));
        }
    }
}

fn commit_message(summary: &Summary, job: &Job) -> String {
    let first = summary.headline();
    let last = summary.attempts.last();
    format!(
        "loopd: {first}\n\nTask: {}\n\nAccepted by loopd job {} at attempt {} of {}: the goal test is green ({}) and the critic passed the diff.\nCost ${:.4}, {} turns, {} input / {} output tokens.\nBASE_REF {}\n",
        summary.task,
        summary.job_id,
        last.map_or(0, |a| a.n),
        job.max_attempts,
        job.goal.iter().map(|s| format!("`{}`", s.name)).collect::<Vec<_>>().join(", "),
        summary.totals.cost_usd,
        summary.totals.turns,
        summary.totals.input_tokens,
        summary.totals.output_tokens,
        summary.base_ref
    )
}

/// Run one job to its end (or suspension). Returns its final status.
///
/// The order is the durability contract: the job's journal records the
/// ending (and where the breaker parked the work), then the commit, then the
/// final state — and only then do the views (`state.json`) and the spool
/// file move. A daemon killed anywhere in between finds the journal ahead of
/// the views and brings them to it ([`super::repair`]); nothing is run twice.
pub async fn run(
    spec: JobSpec,
    spool_file: PathBuf,
    ctx: Arc<Context>,
    stop: watch::Receiver<Option<StopRequest>>,
) -> Status {
    let id = spec.job_id.clone();
    let run_dir = ctx.state_dir.join("runs").join(&id);
    let mut state = JobState::load(&ctx.state_dir, &id)
        .unwrap_or_else(|| JobState::new(&spec, Status::Running));
    state.state = Status::Running;
    state.save(&ctx.state_dir);
    tracing::info!(job_id = %id, repo = %spec.repo.display(), "job running");
    let probe = stop.clone();
    let cancelled = move || probe.borrow().is_some_and(|r| r.cause == StopCause::Cancel);

    let fail = |state: &mut JobState, why: String| {
        tracing::error!(job_id = %state.job_id, why = %why, "job failed to run");
        state.state = Status::Error;
        state.reason = Some("internal_error".into());
        state.detail = Some(why);
    };
    let worktree = match crate::util::secure_state_dir(&ctx.state_dir, Some(&spec.repo)) {
        // A state dir inside the job's own repository would put loopd's
        // files in the agent's reach (and in the repository's stashes).
        Err(e) => Err(format!("{e} (hint: {})", e.hint())),
        Ok(_) => {
            let spec = spec.clone();
            let dir = ctx.state_dir.clone();
            tokio::task::spawn_blocking(move || prepare_worktree(&spec, &dir))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
        }
    };
    let outcome = match worktree {
        Err(why) => {
            fail(&mut state, why);
            None
        }
        Ok(ws) => match prepare_job(&spec, ws, &ctx) {
            Err(why) => {
                fail(&mut state, why);
                None
            }
            Ok((ws, job)) => {
                let control = Control {
                    stop,
                    loopd_exe: ctx.loopd_exe.clone(),
                    access: ctx.access.clone(),
                    job_id: Some(id.clone()),
                    progress: false,
                };
                match job::run(&job, ws, control).await {
                    Ok(summary) => Some((summary, job)),
                    Err(e) => {
                        fail(&mut state, e.to_string());
                        None
                    }
                }
            }
        },
    };

    let mut notify = Vec::new();
    let mut escalation = None;
    if let Some((summary, job)) = outcome {
        state.fill_from(&summary);
        escalation = summary.escalation.clone();
        if state.state == Status::Interrupted && !cancelled() {
            // Suspended by a shutdown: the worktree and the spool file stay,
            // the next daemon resumes from the journal.
            state.save(&ctx.state_dir);
            tracing::info!(job_id = %id, "job interrupted; it resumes when the daemon starts again");
            return Status::Interrupted;
        }
        if cancelled() && state.state != Status::Accepted {
            state.state = Status::Cancelled;
        }
        if state.state == Status::Accepted {
            match commit_once(&run_dir, &spec, &ctx.state_dir, &summary, &job).await {
                Ok(c) => {
                    state.commit_accepted = Some(c);
                    if job.approval.required {
                        // Nothing leaves the machine until a human approves.
                        state.state = Status::AwaitingApproval;
                    }
                }
                Err(why) => fail(&mut state, why),
            }
        }
        notify = job.notify.clone();
    }
    // The final state is the journal's before it is anyone else's.
    match Journal::open(&run_dir) {
        Ok(mut j) if j.state().finalized.is_none() => {
            if let Err(e) = j.append(Event::Finalized { state: state.state }) {
                tracing::error!(job_id = %id, error = %e, "cannot journal the final state");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::error!(job_id = %id, error = %e, "cannot open the journal"),
    }
    notify_end(&notify, &state, escalation).await;
    remove_worktree(&spec.repo, &ctx.state_dir, &id);
    crate::util::crash_point("worker:worktree_removed");
    // The page a human reads, next to summary.json, before the final state
    // says the job is done; a job that never got a summary has nothing to
    // show, and a failure here never changes how the job ended.
    if run_dir.join("summary.json").exists() {
        let branch = crate::report_html::BranchInfo {
            branch: state.branch.clone(),
            commit_accepted: state.commit_accepted.clone(),
        };
        match crate::report_html::write_next_to_summary(&run_dir, Some(branch)) {
            Ok(path) => {
                tracing::debug!(job_id = %id, path = %path.display(), "wrote the HTML report")
            }
            Err(e) => tracing::warn!(job_id = %id, error = %e, "cannot write the HTML report"),
        }
    }
    state.save(&ctx.state_dir);
    crate::util::crash_point("worker:state_saved");
    if let Err(e) = ctx.spool.move_to(&spool_file, "done") {
        tracing::error!(job_id = %id, error = %e, "cannot move the job file to done/");
    }
    tracing::info!(job_id = %id, state = state.state.as_str(), branch = %state.branch, "job finished");
    state.state
}

/// Commit the accepted change once — the tree the judges judged, never
/// what the working tree holds now — and bring it home onto the job's
/// branch in the user's repository. The journal (or, after a kill between
/// the commit and its record, the branch itself) says whether it was.
async fn commit_once(
    run_dir: &Path,
    spec: &JobSpec,
    state_dir: &Path,
    summary: &Summary,
    job: &Job,
) -> Result<String, String> {
    let mut journal = Journal::open(run_dir).map_err(|e| e.to_string())?;
    if let Some(c) = journal.state().committed.clone() {
        return Ok(c);
    }
    let tree = journal
        .state()
        .accepted_tree
        .clone()
        .ok_or("accepted, but the journal holds no judged tree to commit")?;
    let message = commit_message(summary, job);
    let (spec, state_dir, base) = (
        spec.clone(),
        state_dir.to_path_buf(),
        summary.base_ref.clone(),
    );
    let commit = tokio::task::spawn_blocking(move || -> Result<String, String> {
        let ws = reopen(&spec, &state_dir)?;
        let oid = |s: &str| Oid::from_str(s).map_err(|e| format!("`{s}` is not an object id: {e}"));
        let (base, tree) = (oid(&base)?, oid(&tree)?);
        let branch = branch_name(&spec.job_id);
        let commit = ws
            .commit_tree(base, tree, &branch, &message)
            .map_err(|e| e.to_string())?;
        ws.bring_home(
            commit,
            &format!("refs/heads/{branch}"),
            Some(base),
            "loopd: the accepted change",
        )
        .map_err(|e| e.to_string())?;
        Ok(commit.to_string())
    })
    .await
    .map_err(|e| format!("accepted, but the commit task failed: {e}"))?
    .map_err(|e| format!("accepted, but the commit on the job's branch failed: {e}"))?;
    crate::util::crash_point("worker:committed");
    journal
        .append(Event::Committed {
            commit: commit.clone(),
        })
        .map_err(|e| e.to_string())?;
    Ok(commit)
}

/// Tell the webhooks how the job ended. Delivery runs in its own task and
/// never fails the job; we wait for it (bounded) so a daemon that exits next
/// does not cut it short.
pub async fn notify_end(
    hooks: &[crate::notify::Webhook],
    state: &JobState,
    escalation: Option<crate::outcome::Escalation>,
) {
    let event = crate::notify::JobEvent {
        event: state.state.as_str().to_owned(),
        job_id: state.job_id.clone(),
        repo: state.repo.display().to_string(),
        reason: state.reason.clone().unwrap_or_default(),
        detail: state.detail.clone().unwrap_or_default(),
        branch: Some(state.branch.clone()),
        cost_usd: state.spent_usd,
        report: state.report.as_ref().map(|p| p.display().to_string()),
        escalation,
    };
    if let Some(handle) = crate::notify::spawn(hooks, event, crate::notify::Retry::default()) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(60), handle).await;
    }
}

fn prepare_job(spec: &JobSpec, ws: Workspace, ctx: &Context) -> Result<(Workspace, Job), String> {
    let worktree = ws.root().to_path_buf();
    let flags = JobFlags::for_daemon(
        &worktree,
        (ctx.agent_bin.clone(), ctx.critic_bin.clone()),
        &ctx.state_dir,
        &spec.flags,
    );
    let mut job = Job::resolve(&flags, ws.root()).map_err(|e| e.to_string())?;
    job.locate_clis()
        .map_err(|(what, hint)| format!("{what} ({hint})"))?;
    Ok((ws, job))
}
