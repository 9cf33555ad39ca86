//! One queued job, run to its end in a git worktree of its own.
//!
//! The worktree lives under the state dir on a branch `loopd/<job-id>` made
//! from the pinned commit, so the user's own working tree is never touched
//! and two jobs on one repository run side by side. On acceptance the change
//! is committed on that branch; on any other ending the circuit breaker has
//! parked the work; either way the worktree is removed and the branch stays.
//! A job suspended by a shutdown keeps its worktree and resumes from its
//! journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{Oid, Repository};
use tokio::sync::watch;

use super::spool::{JobSpec, Spool};
use super::state::{branch_name, JobState, Status};
use crate::agent::session::{StopCause, StopRequest};
use crate::config::{find_on_path, Job, JobFlags};
use crate::job::{self, Control};
use crate::journal::{Event, Journal};
use crate::report::Summary;
use crate::workspace::Workspace;

/// What every job of a daemon shares.
pub struct Context {
    pub state_dir: PathBuf,
    pub spool: Spool,
    pub agent_bin: Option<PathBuf>,
    pub loopd_exe: PathBuf,
    /// The model credential and upstream, picked when the daemon started.
    pub access: crate::agent::gateway::Access,
}

fn worktree_path(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("worktrees").join(id)
}

/// Worktree bookkeeping (`.git/worktrees/`) is not safe against concurrent
/// writers — two jobs starting at once on one repository raced creating it —
/// so adding and removing worktrees is serialized.
static WORKTREE_ADMIN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Create the job's worktree on `loopd/<id>` at the pinned commit, or reuse
/// the one a suspended run left.
pub fn prepare_worktree(spec: &JobSpec, state_dir: &Path) -> Result<PathBuf, String> {
    let _admin = WORKTREE_ADMIN.lock().unwrap_or_else(|e| e.into_inner());
    let path = worktree_path(state_dir, &spec.job_id);
    if path.join(".git").exists() {
        return Ok(path);
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
    let branch = match repo.find_branch(&name, git2::BranchType::Local) {
        Ok(b) => b,
        Err(_) => repo
            .branch(&name, &commit, false)
            .map_err(|e| format!("cannot create branch `{name}`: {e}"))?,
    };
    // A registration whose directory is gone (a crash mid-removal) is stale.
    if let Ok(wt) = repo.find_worktree(&spec.job_id) {
        let _ = wt.prune(Some(
            git2::WorktreePruneOptions::new()
                .valid(true)
                .working_tree(true),
        ));
    }
    crate::util::private_dir(path.parent().expect("worktrees/<id> has a parent"))
        .map_err(|e| format!("cannot create the worktrees dir: {e}"))?;
    let mut opts = git2::WorktreeAddOptions::new();
    opts.reference(Some(branch.get()));
    repo.worktree(&spec.job_id, &path, Some(&opts))
        .map_err(|e| format!("cannot add a worktree for `{name}`: {e}"))?;
    Ok(path)
}

/// Commit everything in the worktree on its branch; returns the commit id.
/// A commit this job already made (a kill before it was journaled) is
/// found by its message and reused.
fn commit_accepted(worktree: &Path, id: &str, message: &str) -> Result<String, git2::Error> {
    let repo = Repository::open(worktree)?;
    let head = repo.head()?.peel_to_commit()?;
    if head
        .message()
        .is_some_and(|m| m.contains(&format!("Accepted by loopd job {id} ")))
    {
        return Ok(head.id().to_string());
    }
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.update_all(["*"], None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let parent = repo.head()?.peel_to_commit()?;
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("loopd", "loopd@localhost"))?;
    let oid = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent])?;
    Ok(oid.to_string())
}

/// Remove the worktree directory and its registration; the branch stays.
pub fn remove_worktree(repo: &Path, state_dir: &Path, id: &str) {
    let _admin = WORKTREE_ADMIN.lock().unwrap_or_else(|e| e.into_inner());
    let path = worktree_path(state_dir, id);
    if let Err(e) = std::fs::remove_dir_all(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the worktree");
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
        Ok(wt) => match prepare_job(&spec, &wt, &ctx) {
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
                    Ok(summary) => Some((summary, job, wt)),
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
    if let Some((summary, job, wt)) = outcome {
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
            match commit_once(&run_dir, &wt, &summary, &job).await {
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

/// Commit the accepted change once: the journal (or, after a kill between
/// the commit and its record, the branch itself) says whether it was.
async fn commit_once(
    run_dir: &Path,
    wt: &Path,
    summary: &Summary,
    job: &Job,
) -> Result<String, String> {
    let mut journal = Journal::open(run_dir).map_err(|e| e.to_string())?;
    if let Some(c) = journal.state().committed.clone() {
        return Ok(c);
    }
    let message = commit_message(summary, job);
    let (wt, id) = (wt.to_path_buf(), summary.job_id.clone());
    let commit = tokio::task::spawn_blocking(move || commit_accepted(&wt, &id, &message))
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

fn prepare_job(spec: &JobSpec, worktree: &Path, ctx: &Context) -> Result<(Workspace, Job), String> {
    let ws = Workspace::open(worktree).map_err(|e| e.to_string())?;
    let flags = JobFlags::for_daemon(worktree, ctx.agent_bin.clone(), &ctx.state_dir, &spec.flags);
    let mut job = Job::resolve(&flags, ws.root()).map_err(|e| e.to_string())?;
    job.agent_bin = find_on_path(&job.agent_bin)
        .ok_or_else(|| format!("the agent CLI `{}` was not found", job.agent_bin.display()))?;
    Ok((ws, job))
}
