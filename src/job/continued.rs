//! A job the state dir already holds, run again under its id: a retried
//! pod, a re-run CI job (`loopd run --job-id`) or a pull-request round
//! whose runner died (`loopd ci`). The rule is one for all of them: an
//! ending the job decided is final and nothing runs or is billed again;
//! one a scheduler retries (a signal, an environment failure) reopens; a
//! job in the middle of an attempt goes on from its journal, in the tree
//! it left. What may not change under it — the repository, the task, the
//! spec it is judged by, its BASE_REF — is checked here, once.

use std::path::{Path, PathBuf};

use crate::config::Job;
use crate::journal::{Ending, Event, Phase, Replay};
use crate::outcome::ExitStatus;
use crate::workspace::Workspace;

/// Why a job cannot be continued by this run.
#[derive(Debug, thiserror::Error)]
pub enum ContinueError {
    #[error("job `{id}` in `{}` is another job: it was started on `{}` with the task {task:?}", state_dir.display(), repo.display())]
    AnotherJob {
        id: String,
        state_dir: PathBuf,
        repo: PathBuf,
        task: String,
    },
    #[error("job `{id}` was started with another spec than this run's; what differs:\n{}", changes.join("\n"))]
    Spec { id: String, changes: Vec<String> },
    #[error("the journal of job `{id}` says it was finalized but not how it ended")]
    NoEnding { id: String },
    #[error("`{}` is at {head}, but job `{id}` started at BASE_REF {base}", root.display())]
    Base {
        id: String,
        root: PathBuf,
        head: String,
        base: String,
    },
    #[error("cannot record the job in `{}`: {source}", path.display())]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("job `{id}` is running in another process")]
    Locked { id: String },
    #[error(transparent)]
    Job(#[from] super::JobError),
}

impl ContinueError {
    /// How to go on.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ContinueError::AnotherJob { .. } => "a new job needs a new `--job-id`; `loopd report ID` shows what that one was".into(),
            ContinueError::Spec { id, .. } => format!("continue it with the same goal, configuration and caps; raising its caps is `loopd resume {id} --budget-usd X` (or `--max-attempts`, `--max-turns`, `--max-tokens`, `--timeout`) once it has stopped; another goal is a new job with a new `--job-id`"),
            ContinueError::NoEnding { id } => format!("`loopd report {id}` shows what it holds; a new job needs a new `--job-id`"),
            ContinueError::Base { root, base, .. } => format!(
                "check the base out first: `git -C {} switch --detach {base}`",
                crate::util::shell_quote(&root.to_string_lossy())
            ),
            ContinueError::Locked { id } => format!(
                "`loopd status {id}` shows it; run this again when it has stopped"
            ),
            ContinueError::RunDir { .. } | ContinueError::Job(_) => return None,
        })
    }

    /// A usage error (another job, spec or base) or the environment's.
    pub fn status(&self) -> ExitStatus {
        match self {
            ContinueError::NoEnding { .. }
            | ContinueError::RunDir { .. }
            | ContinueError::Locked { .. }
            | ContinueError::Job(_) => ExitStatus::Environment,
            _ => ExitStatus::Usage,
        }
    }
}

/// The lock of a job's run directory (one process per job).
const LOCK_FILE: &str = "run.lock";

/// The run directory `dir` of job `id`, created, and its lock, held while
/// the caller lives — taken before its journal is read. A second process
/// of the same job (a second pod of one index, a re-run while the first
/// still runs) is refused: never two writers of one journal. The directory
/// must be one of its own — never a link to one elsewhere, where another
/// user (or an agent) could plant a journal or a summary — and so must the
/// lock.
pub fn lock(
    job: &Job,
    ws: &Workspace,
    dir: &Path,
    id: &str,
) -> Result<crate::util::FileLock, ContinueError> {
    let err = |source: std::io::Error| ContinueError::RunDir {
        path: dir.to_path_buf(),
        source,
    };
    crate::util::secure_state_dir(&job.state_dir, Some(ws.root()))
        .map_err(|e| ContinueError::Job(e.into()))?;
    if dir
        .symlink_metadata()
        .is_ok_and(|m| !m.file_type().is_dir())
    {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it is not a directory of its own (a link or a file)",
        )));
    }
    crate::util::private_dir(dir).map_err(err)?;
    // One that was there already: this user's, and no one else's to write.
    crate::util::owned_and_private(dir).map_err(|e| ContinueError::Job(e.into()))?;
    crate::util::FileLock::take(&dir.join(LOCK_FILE), true, false)
        .map_err(err)?
        .ok_or_else(|| ContinueError::Locked { id: id.to_owned() })
}

/// What running a held job again means.
#[derive(Debug)]
pub enum Again {
    /// It ended as it decided: nothing runs again (its summary is its
    /// answer; run, the job only writes that summary again).
    Ended(Ending),
    /// It ended on a condition a scheduler retries: this event, journaled
    /// before it runs, reopens it with the same caps (its parked work back
    /// in the tree, what it spent still counted).
    Reopen(Box<Event>),
    /// It stopped in its middle (a `kill -9`, an eviction, a reboot): on
    /// from where its journal stops.
    Running,
}

/// The first check of a job held under `id`: that it is this job (its
/// repository, its task, the spec it started with or that `loopd resume`
/// last raised — another goal, rubric or cap would have the continuation
/// graded by rules the job was not given) and what running it again means.
pub fn again(job: &Job, ws: &Workspace, id: &str, replay: &Replay) -> Result<Again, ContinueError> {
    if replay.task.as_deref() != Some(job.task.as_str())
        || replay.repo.as_deref() != Some(ws.root())
    {
        return Err(ContinueError::AnotherJob {
            id: id.to_owned(),
            state_dir: job.state_dir.clone(),
            repo: replay.repo.clone().unwrap_or_else(|| PathBuf::from("?")),
            task: replay.task.clone().unwrap_or_default(),
        });
    }
    match &replay.spec {
        // A journal of an older loopd pins no spec: let through, warned.
        None => {
            tracing::warn!(job_id = %id, "the journal of this job records no spec (an older loopd wrote it): this run's goal, rubric and caps are taken as they are, unchecked")
        }
        Some(was) => {
            let changes = was.changes(&job.spec());
            if !changes.is_empty() {
                return Err(ContinueError::Spec {
                    id: id.to_owned(),
                    changes: changes
                        .iter()
                        .map(|c| format!("  {}: was {} → now {}", c.field, c.was, c.now))
                        .collect(),
                });
            }
        }
    }
    let ending = match replay.phase() {
        Phase::Finalized(_) => replay
            .decided()
            .ok_or_else(|| ContinueError::NoEnding { id: id.to_owned() })?,
        Phase::Ending(e) => e,
        _ => return Ok(Again::Running),
    };
    if !ExitStatus::from(ending.reason).retryable() {
        return Ok(Again::Ended(ending));
    }
    tracing::info!(job_id = %id, reason = %ending.reason, "the job ended on a retryable condition; it continues");
    Ok(Again::Reopen(Box::new(Event::Reopened {
        budget_usd: None,
        max_attempts: None,
        timeout: None,
        note: None,
        restore: replay.parked.as_ref().and_then(|p| p.stash_commit.clone()),
        spec: None,
    })))
}

/// The last check before a held job runs again: the tree holds the job's
/// own work from its first attempt until the breaker parks it (a `kill -9`
/// anywhere in between leaves it there); before that and after it, it must
/// be clean, as for a new job — uncommitted work of yours is never taken
/// into a job. And the checkout is at the job's BASE_REF.
pub fn ready(job: &Job, ws: &Workspace, id: &str, replay: &Replay) -> Result<(), ContinueError> {
    let holds_the_jobs_work =
        (replay.current.is_some() || !replay.attempts.is_empty()) && replay.parked.is_none();
    if !holds_the_jobs_work {
        super::ready(ws, job)?;
    }
    if let Some(base) = &replay.base_ref {
        let head = ws.head_commit().map_err(super::JobError::from)?.to_string();
        if &head != base {
            return Err(ContinueError::Base {
                id: id.to_owned(),
                root: ws.root().to_path_buf(),
                head,
                base: base.clone(),
            });
        }
    }
    Ok(())
}

/// Journal `reopen` (if any) in the run directory `dir`.
pub fn reopen(dir: &Path, again: Again) -> Result<(), ContinueError> {
    if let Again::Reopen(event) = again {
        crate::journal::Journal::open(dir)
            .and_then(|mut j| j.append(*event))
            .map_err(super::JobError::from)?;
    }
    Ok(())
}
