//! The attempt loop: from a pinned BASE_REF to an accepted diff or an
//! honest "no", driven by the job's journal.
//!
//! ```text
//! prepare ─ pin BASE_REF ─ baseline (every goal step) ─┐
//!   ┌──────────────────────────────────────────────────┘
//!   └─ attempt n: agent session ─ judge: diff ─ interdiff ─ gates ─ goal test
//!        ├─ red   → next prompt = failing step + output   ─ test count ─ pre-critic
//!        └─ green → pre-critic finding? → next prompt = the findings ─ critic ─ decision
//!                 → critic (fresh session, no tools, JSON verdict; from attempt 2
//!                   on with the previous findings and the interdiff)
//!                     ├─ PASS, no violations → accepted
//!                     └─ otherwise → next prompt = violations
//!   attempts used up → exhausted;  a guard → stopped;  a signal → interrupted
//!   every ending but acceptance → circuit breaker (park + failure.json)
//! ```
//!
//! Every step's result is appended to the [`journal`](crate::journal) before
//! anything acts on it, and every step first asks the journal whether it is
//! already done: a job resumed after `kill -9` replays what finished and runs
//! only what did not. The phases live in their own files: [`prepare`],
//! [`attempt`] (the agent session), [`judge`] (interdiff → gates → goal →
//! test count → pre-critic → critic → decision), [`ending`] (the breaker and
//! the views).
//!
//! The code decides: acceptance is computed here from the goal test's exit
//! codes and the parsed verdict, never from what a model says about itself.
//!
//! `.git/` is loopd's for the job's duration: credentials in the checkout's
//! git config are held out of it before the first session
//! ([`crate::workspace::credentials`]) and put back at the end, and its
//! config, hooks and info are pinned ([`crate::workspace::gitdir`]), compared
//! after every agent session and goal test, and put back before loopd's own
//! git operations.

mod attempt;
mod channel;
pub mod continued;
mod ending;
mod examine;
mod feedback;
mod gate;
mod held_out;
mod judge;
mod prepare;
mod world;

use std::path::{Path, PathBuf};
use std::time::Instant;

use tokio::sync::watch;

pub use feedback::{decide, next_prompt, Feedback, MAX_FEEDBACK};
pub use prepare::sandbox_plan;

use crate::agent::session::{self, Role, StopRequest};
use crate::agent::{Agent, Prices};
use crate::config::Job;
use crate::goal::{self, GoalReport, Mode, Preflight};
use crate::guard::caps::Budget;
use crate::guard::escalation;
use crate::journal::{Ending, Event, Journal, JournalError, Phase};
use crate::judges::tamper;
use crate::lessons;
use crate::outcome::Reason;
use crate::record::Summary;
use crate::util;
use crate::workspace::credentials::{self, CredentialError, Released};
use crate::workspace::gitdir::Pin;
use crate::workspace::outside::Outside;

/// The worktree's files after the baseline, in the run directory.
const OUTSIDE: &str = "outside.txt";
/// A foreground job's detailed log (tracing's lines, INFO and up).
const LOG: &str = "loopd.log";
/// The suffix of the hermetic judge's alone run's step names in its
/// runner origins (`world::Origins`), which the after-goal gate reads back.
const ALONE: &str = " (alone)";
use crate::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot create the run directory `{}`: {source}", path.display())]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    StateDir(#[from] util::StateDirError),
    #[error(transparent)]
    HeldOut(#[from] crate::goal::held_out::CopyError),
    #[error("the sandbox: {0}")]
    Sandbox(#[source] crate::sandbox::SandboxError),
    /// What asked for the sandbox, which the kernel cannot give.
    #[error("a sandbox is required ({0}), but {unsupported}", unsupported = crate::sandbox::UNSUPPORTED)]
    SandboxRequired(&'static str),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Goal(#[from] goal::GoalError),
    #[error(transparent)]
    Session(#[from] session::SessionError),
    #[error("the protection policy: {0}")]
    Policy(#[source] tamper::PolicyError),
    #[error("cannot start the metering gateway: {0}")]
    Gateway(#[source] crate::agent::gateway::GatewayError),
    /// The caller picked no credential for an agent the job runs.
    #[error("no model credential was picked for the `{0}` agent when loopd started")]
    NoAccess(&'static str),
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    #[error("cannot pin or restore the git directory `{}`: {source}", path.display())]
    GitDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("attempt {attempt}'s judged tree is not in the journal: the change cannot be judged on a tree of its own")]
    NoJudgedTree { attempt: u32 },
    #[error("the journal names BASE_REF `{base}`, which is not a commit id")]
    BaseRef {
        base: String,
        #[source]
        source: git2::Error,
    },
}

/// How the caller controls a running job.
pub struct Control {
    /// Stop requests (signals, cancel, shutdown).
    pub stop: watch::Receiver<Option<StopRequest>>,
    /// This executable, for the hook command.
    pub loopd_exe: PathBuf,
    /// The model credentials and upstreams, by agent name, picked when
    /// loopd started: the job's metering gateway uses them.
    pub access: crate::agent::gateway::AccessMap,
    /// Use this id instead of a fresh one (the daemon's job; a resume).
    pub job_id: Option<String>,
    /// Print live progress lines on stderr (a foreground job not run with
    /// `-q`); a daemon's jobs are followed with `loopd tail`.
    pub progress: bool,
}

/// One job while it runs: its inputs, its journal (the state) and the
/// handles it acts through. Everything it knows about its progress is in
/// `journal.state()`, never mirrored in a field here.
struct Run<'a> {
    job: &'a Job,
    /// The agent CLI of the agent sessions, and of the critic's.
    agent: &'static dyn Agent,
    critic: &'static dyn Agent,
    id: String,
    dir: PathBuf,
    base: String,
    base_oid: git2::Oid,
    ws: Workspace,
    journal: Journal,
    budget: Budget,
    stop: watch::Receiver<Option<StopRequest>>,
    env: prepare::Prepared,
    /// `.git/` config, hooks and info as the job started.
    pin: Pin,
    /// sha256 of the git config the credentials were held from (in memory:
    /// the record on disk is not trusted to say it).
    held: Option<String>,
    /// The repository's key in the lessons memory (`None`: it could not be
    /// found, and the job neither reads nor writes lessons).
    repo_key: Option<String>,
    /// This executable: the agent's `loopd escalate` runs it.
    loopd_exe: PathBuf,
    /// The judge's world of its own (`None`: the judge shares the
    /// worktree).
    hermetic: Option<world::Hermetic>,
}

/// The last checks before a foreground job touches anything: a clean tree
/// and a state dir to write to.
pub fn ready(ws: &Workspace, job: &Job) -> Result<(), JobError> {
    ws.ensure_clean()?;
    util::secure_state_dir(&job.state_dir, Some(ws.root()))?;
    Ok(())
}

/// Run a job in a repository whose tree the caller has checked is clean —
/// or resume it from its journal, if it has one.
pub async fn run(job: &Job, ws: Workspace, control: Control) -> Result<Summary, JobError> {
    let (agent, critic) = job.agents();
    let id = control.job_id.clone().unwrap_or_else(util::new_job_id);
    // Private, and out of the agent's tree, whoever called (the daemon too).
    util::secure_state_dir(&job.state_dir, Some(ws.root()))?;
    let dir = job.state_dir.join("runs").join(&id);
    util::private_dir(&dir).map_err(|source| JobError::RunDir {
        path: dir.clone(),
        source,
    })?;
    let mut journal = Journal::open(&dir)?;
    if control.progress {
        // The live lines speak on stderr; the detailed log goes here.
        if let Err(e) = util::log_file::attach(&dir.join(LOG)) {
            tracing::warn!(error = %e, "cannot write the job's log file");
        }
        journal.observe(
            crate::live::Progress {
                budget_usd: Some(job.caps.limits.budget_usd),
            }
            .on_stderr(),
        );
    }
    // BASE_REF is pinned once; a resumed job keeps the journal's.
    let base = match journal.state().base_ref.clone() {
        Some(b) => b,
        None => ws.head_commit()?.to_string(),
    };
    let base_oid = git2::Oid::from_str(&base).map_err(|source| JobError::BaseRef {
        base: base.clone(),
        source,
    })?;
    let spent = journal.state().spend();
    // The judge's world, where the system allows one: set up before the
    // agent's namespaces, which show it the ignored entries as overlays.
    let hermetic = match (job.sandbox.enabled, crate::sandbox::kernel_abi() >= 1) {
        (true, true) => {
            let fresh = journal.state().baseline.is_none();
            match world::Hermetic::prepare(&dir, &ws, base_oid, fresh) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, "the judge's world cannot be set up");
                    None
                }
            }
        }
        _ => None,
    };
    let view = hermetic.as_ref().map(|h| h.agent_view(ws.root()));
    let env = prepare::prepare(job, &ws, &dir, &control, base_oid, spent, view)?;
    let hermetic = hermetic.filter(|_| env.hermetic);
    let repo_key = match lessons::repo_key(ws.git2(), base_oid) {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::warn!(error = %e, "no lessons memory for this job");
            None
        }
    };
    if journal.state().job_id.is_none() {
        journal.append(Event::JobStarted {
            job_id: id.clone(),
            base_ref: base.clone(),
            repo: ws.root().to_path_buf(),
            task: job.task.clone(),
            spec: Some(Box::new(job.spec())),
        })?;
        tracing::info!(job_id = %id, base_ref = %base, run_dir = %dir.display(), "job started");
    } else {
        journal.append(Event::Resumed {
            pid: std::process::id(),
        })?;
        let s = journal.state();
        let next = match s.phase() {
            Phase::Start => "the baseline".to_owned(),
            Phase::Ready { next } => format!("attempt {next}"),
            Phase::Attempt { n } => format!("attempt {n} (in progress)"),
            Phase::Ending(e) => format!("its ending ({})", e.reason),
            Phase::Finalized(st) => format!("nothing: it is {}", st.as_str()),
        };
        tracing::info!(job_id = %id, resumes_at = %next, attempts_ended = s.attempts.len(), spent_usd = %format!("{:.4}", s.spend().cost_usd), "job resumed from its journal");
    }
    // `loopd resume`: the parked work goes back into the tree before
    // anything looks at it (again after a crash until it is journaled).
    if let Some(stash) = journal.state().restore.clone() {
        let oid = git2::Oid::from_str(&stash).map_err(|source| JobError::BaseRef {
            base: stash.clone(),
            source,
        })?;
        let files = ws.unpark(oid)?;
        journal.append(Event::Restored {
            stash_commit: stash.clone(),
        })?;
        tracing::info!(stash_commit = %stash, files, "the parked work is back in the working tree");
    }
    journal.append(Event::Confined {
        sandbox: env.confinement,
        network: Some(env.network),
        judge: Some(if hermetic.is_some() {
            crate::sandbox::Judge::Hermetic
        } else {
            crate::sandbox::Judge::Shared
        }),
    })?;
    // Before any session: the credentials out of the checkout, then `.git/`
    // pinned as it is without them.
    let held = hold_credentials(&mut journal, job, &ws, &id)?;
    let pin = match pin_git_dir(&mut journal, &ws, &dir) {
        Ok(pin) => pin,
        Err(e) => {
            if let Err(r) =
                credentials::release(&job.state_dir, ws.common_dir(), &id, held.as_deref())
            {
                tracing::error!(error = %r, "cannot put the checkout's git credentials back");
            }
            return Err(e);
        }
    };
    let mut run = Run {
        job,
        agent,
        critic,
        id,
        dir,
        base,
        base_oid,
        ws,
        journal,
        budget: job.budget(),
        stop: control.stop,
        env,
        pin,
        held,
        repo_key,
        loopd_exe: control.loopd_exe,
        hermetic,
    };
    let ending = match run.journal.state().phase() {
        Phase::Ending(e) => e,
        Phase::Finalized(_) => run
            .journal
            .state()
            .decided()
            .expect("a finalized journal has an ending"),
        _ => match run.main_loop().await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "internal error");
                Ending {
                    reason: Reason::InternalError,
                    detail: e.to_string(),
                }
            }
        },
    };
    drop(run.env.gateway.take());
    run.finish(ending)
}

/// Hold the credentials of the checkout's git config out of it for the job
/// (idempotent on a resume); journaled when there were any. Returns the
/// sha256 of what is held.
fn hold_credentials(
    journal: &mut Journal,
    job: &Job,
    ws: &Workspace,
    id: &str,
) -> Result<Option<String>, JobError> {
    let held = credentials::hold(&job.state_dir, ws.common_dir(), id)?;
    if !held.removed.is_empty() && !journal.state().credentials_held {
        journal.append(Event::CredentialsHeld {
            removed: held.removed,
            recovered: held.recovered,
        })?;
    }
    Ok(held.original_sha256)
}

/// The job's pin of `.git/`: taken (copies first, then the journal) on the
/// first start, read back from the journal on a resume — never re-taken,
/// since the agent may have run in between.
fn pin_git_dir(journal: &mut Journal, ws: &Workspace, dir: &Path) -> Result<Pin, JobError> {
    let store = dir.join("git-dir");
    if let Some(files) = journal.state().git_dir_pin.clone() {
        return Ok(Pin::from_record(ws.common_dir(), &store, files));
    }
    let pin = Pin::take(ws.common_dir(), &store).map_err(|source| JobError::GitDir {
        path: ws.common_dir().to_path_buf(),
        source,
    })?;
    journal.append(Event::GitDirPinned {
        files: pin.files().clone(),
    })?;
    Ok(pin)
}

/// The pin of a job's `.git/`, read back from its journal (for the outward
/// steps after the job: `loopd ci` puts it back once more before its commit
/// and push).
pub fn git_dir_pin(run_dir: &Path, ws: &Workspace) -> Option<Pin> {
    crate::journal::load(run_dir)
        .git_dir_pin
        .map(|files| Pin::from_record(ws.common_dir(), &run_dir.join("git-dir"), files))
}

/// Who runs a session of one role, and where: the CLI, its gateway
/// vendor, binary, model and prices, its home and working directory, its
/// sandbox.
pub(super) struct SessionCli {
    pub agent: &'static dyn Agent,
    pub vendor: usize,
    pub bin: PathBuf,
    pub model: String,
    pub prices: Prices,
    pub home: PathBuf,
    pub cwd: PathBuf,
    pub sandbox: Option<crate::sandbox::Sandbox>,
    pub env: crate::sandbox::env::Environment,
}

impl Run<'_> {
    /// The CLI of a role's sessions. The agent works in the worktree; the
    /// critic, which reads the material it is given and runs no tools, in
    /// a home of its own that no agent process can write (nothing planted
    /// there — instructions, configuration — reaches the judge).
    pub(super) fn cli(&self, role: Role) -> SessionCli {
        let (agent, bin, model, v) = match role {
            Role::Agent => (
                self.agent,
                &self.job.agent_bin,
                &self.job.agent_model,
                &self.env.agent,
            ),
            Role::Critic => (
                self.critic,
                &self.job.critic_bin,
                &self.job.critic_model,
                &self.env.critic,
            ),
            // The critic's world (no tool, its home emptied after the
            // session: `Run::examine`), on the examiner's CLI — the
            // critic's or the agent's — and model.
            Role::Examiner => match &self.job.examiner {
                Some(e) if e.agent == self.agent.name() && e.agent != self.critic.name() => {
                    (self.agent, &self.job.agent_bin, &e.model, &self.env.critic)
                }
                Some(e) => (
                    self.critic,
                    &self.job.critic_bin,
                    &e.model,
                    &self.env.critic,
                ),
                None => (
                    self.critic,
                    &self.job.critic_bin,
                    &self.job.critic_model,
                    &self.env.critic,
                ),
            },
        };
        // The vendor of the CLI that runs, whichever world it runs in.
        let vendor = if agent.name() == self.agent.name() {
            self.env.agent.vendor
        } else {
            v.vendor
        };
        SessionCli {
            agent,
            vendor,
            bin: bin.clone(),
            model: model.clone(),
            prices: Prices::new(agent.prices(), &self.job.prices),
            home: v.home.clone(),
            cwd: match role {
                Role::Agent => self.ws.root().to_path_buf(),
                Role::Critic | Role::Examiner => v.home.clone(),
            },
            sandbox: v.sandbox.clone(),
            env: v.env.clone(),
        }
    }

    /// Put `.git/` back as pinned (before any git operation of loopd's
    /// own); what was there instead is kept under `keep`.
    fn restore_git_dir(&self, keep: &Path) -> Result<(), JobError> {
        self.pin
            .restore(Some(keep))
            .map(drop)
            .map_err(|source| JobError::GitDir {
                path: self.pin.git_dir().to_path_buf(),
                source,
            })
    }

    /// Let go of the checkout's credentials; the last holder puts them back.
    fn release_credentials(&mut self) {
        match credentials::release(
            &self.job.state_dir,
            self.ws.common_dir(),
            &self.id,
            self.held.as_deref(),
        ) {
            Ok(released) => {
                if self.journal.state().credentials_held {
                    let restored = released == Released::Restored;
                    if let Err(e) = self.journal.append(Event::CredentialsReleased { restored }) {
                        tracing::error!(error = %e, "cannot journal that the credentials were released");
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot put the checkout's git credentials back; the next loopd job in this repository retries")
            }
        }
    }

    /// Record the files of the worktree as they are (after the baseline):
    /// the reference for [`Run::set_aside_strays`].
    fn save_outside(&self) -> Result<Outside, JobError> {
        let path = self.dir.join(OUTSIDE);
        let err = |source| JobError::Write {
            path: path.clone(),
            source,
        };
        let outside = Outside::scan(self.ws.root()).map_err(err)?;
        outside.save(&path).map_err(err)?;
        Ok(outside)
    }

    /// Before a goal test on the agent's code: set aside the files the
    /// judges do not see that are new or changed since the baseline, so
    /// the goal test runs on the judged change and what the repository
    /// held before the job — never on a planted `.pyc` or a cache.
    fn set_aside_strays(
        &mut self,
        n: u32,
        diff: &crate::workspace::Diff,
        dir: &Path,
    ) -> Result<(), JobError> {
        let path = self.dir.join(OUTSIDE);
        let base = match Outside::load(&path) {
            Ok(o) => o,
            // A job the baseline of which recorded none (an older loopd).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.save_outside()?,
            Err(source) => return Err(JobError::Write { path, source }),
        };
        let root = self.ws.root().to_path_buf();
        let now = Outside::scan(&root).map_err(|source| JobError::Write {
            path: root.clone(),
            source,
        })?;
        let tracked = self.ws.tracked_paths()?;
        let changed: std::collections::HashSet<PathBuf> = diff
            .changes
            .iter()
            .flat_map(|c| std::iter::once(&c.path).chain(c.old_path.as_ref()))
            .map(PathBuf::from)
            .collect();
        let strays = base.strays(&now, &|p| tracked.contains(p) || changed.contains(p));
        if strays.is_empty() {
            return Ok(());
        }
        let into = dir.join("set-aside");
        let done =
            crate::workspace::outside::set_aside(&root, &strays, &into).map_err(|source| {
                JobError::Write {
                    path: into.clone(),
                    source,
                }
            })?;
        tracing::warn!(target: crate::live::SAID, attempt = n,
            moved = done.moved.len(),
            removed = done.removed.len(),
            "files the judges do not see, new or changed since the baseline, set aside before the goal test"
        );
        self.journal.append(Event::SetAside {
            attempt: n,
            moved: done.moved,
            removed: done.removed,
        })?;
        Ok(())
    }

    fn write(&self, path: &Path, text: &str) -> Result<(), JobError> {
        std::fs::write(path, text).map_err(|source| JobError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    fn job_deadline(&self) -> Instant {
        self.journal.started() + self.job.caps.timeout
    }

    /// The earliest deadline that applies now, and the reason it would give.
    fn deadline(&self, attempt_started: Instant) -> (Instant, Reason) {
        let job = self.job_deadline();
        let attempt = attempt_started + self.job.caps.attempt_timeout;
        if attempt < job {
            (attempt, Reason::AttemptTimeout)
        } else {
            (job, Reason::WallClock)
        }
    }

    /// What bounds a goal test now: the job's environment (no secret in
    /// it), the job's grace, the deadline, signals, and the job's
    /// containment scope.
    fn goal_limits(&self, deadline: Instant) -> goal::Limits<'_> {
        goal::Limits {
            env: &self.env.agent.env,
            grace: self.job.guard.grace,
            deadline: Some(deadline),
            stop: Some(self.stop.clone()),
            scope: &self.id,
            sandbox: self.env.agent.sandbox.as_ref(),
            results: None,
        }
    }

    /// The stop request, if one came.
    fn stop_request(&self) -> Option<StopRequest> {
        *self.stop.borrow()
    }

    /// A stop request as the ending it causes.
    fn signalled(&self) -> Option<Ending> {
        self.stop_request().map(|req| self.guard_ending(req.reason))
    }

    /// A signal, or the deadline passed: what ends the attempt between two
    /// of its steps.
    fn halted(&self, deadline: Instant, reason: Reason) -> Option<Ending> {
        self.signalled()
            .or_else(|| (Instant::now() >= deadline).then(|| self.guard_ending(reason)))
    }

    fn spend_line(&self) -> String {
        let spent = self.journal.state().spend();
        format!(
            "spent ${:.4} of ${}, {} of {} turns, {} of {} tokens",
            spent.cost_usd,
            self.job.caps.limits.budget_usd,
            spent.turns,
            self.job.caps.limits.max_turns,
            spent.tokens(),
            self.job.caps.limits.max_tokens
        )
    }

    /// The ending a guard's reason gives, with a sentence for humans.
    fn guard_ending(&self, reason: Reason) -> Ending {
        let caps = &self.job.caps;
        let g = &self.job.guard;
        let detail = match reason {
            Reason::BudgetUsd | Reason::MaxTurns | Reason::MaxTokens => format!("the {reason} cap was reached: {}", self.spend_line()),
            Reason::WallClock => format!("the job ran into its wall-clock limit of {}", humantime::format_duration(caps.timeout)),
            Reason::AttemptTimeout => format!("an attempt ran into its limit of {}", humantime::format_duration(caps.attempt_timeout)),
            Reason::IdleTimeout => format!("the agent sent no event for {}", humantime::format_duration(caps.idle_timeout)),
            Reason::StuckRepeat => format!("the agent repeated the same tool call {} times within its last {} calls", g.stuck_repeat, g.stuck_window),
            Reason::StuckNoProgress => "the attempt left the working tree exactly as the previous attempt did".into(),
            Reason::JudgesDisagree => "the diff returned to an earlier attempt's state: the goal test and the critic pull in opposite directions; a human should look at the rubric and the task".into(),
            Reason::Signal => "loopd received a termination signal".into(),
            Reason::Escalated => "the agent escalated the task to a human".into(),
            other => other.to_string(),
        };
        Ending { reason, detail }
    }

    /// The first attempt's prompt: the task, and what earlier jobs on this
    /// repository had to learn (the lessons most often seen).
    fn first_prompt(&self) -> String {
        let mut task = self.job.task.clone();
        if self.job.guard.escalation {
            task = format!("{task}\n\n{}", escalation::paragraph(&self.loopd_exe));
        }
        let Some(key) = &self.repo_key else {
            return task;
        };
        match lessons::load(&self.job.state_dir, key) {
            Ok(l) => match lessons::prompt_block(&l) {
                Some(block) => {
                    tracing::info!(
                        lessons = lessons::most_seen(&l).len(),
                        "the first prompt carries this repository's lessons"
                    );
                    format!("{task}\n\n{block}")
                }
                None => task,
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the lessons; the first prompt is the task alone");
                task
            }
        }
    }

    /// The baseline: every goal step before attempt 1, run once per job.
    async fn baseline(&mut self) -> Result<Result<GoalReport, Ending>, JobError> {
        if let Some(b) = self.journal.state().baseline.clone() {
            return Ok(Ok(b));
        }
        let hermetic = self.hermetic.is_some();
        let before = if hermetic {
            Default::default()
        } else {
            self.ws.untracked_blobs()?
        };
        let mut origins = Default::default();
        let baseline = if hermetic {
            // BASE_REF's code in the judge's world; what it builds is kept
            // for the later runs to build on.
            let layers = world::Layers {
                keep_built: true,
                ..Default::default()
            };
            // What BASE_REF's code wrote over its tree is not anyone's fault.
            let run = self
                .judge_run(
                    "baseline",
                    layers,
                    &self.job.goal.clone(),
                    Mode::All,
                    self.job_deadline(),
                )
                .await?;
            origins = run.origins;
            run.report
        } else {
            goal::run(
                &self.job.goal,
                self.ws.root(),
                Mode::All,
                &self.goal_limits(self.job_deadline()),
            )
            .await?
        };
        self.write(&self.dir.join("baseline.txt"), &baseline.render())?;
        self.write(
            &self.dir.join("baseline.json"),
            &serde_json::to_string_pretty(&baseline).expect("a goal report serializes"),
        )?;
        // A baseline cut short by a signal is not the baseline.
        if let Some(e) = self.signalled() {
            return Ok(Err(e));
        }
        // The code at BASE_REF is not the agent's: a change it made to
        // `.git/` is put back, not held against anyone.
        self.restore_git_dir(&self.dir.join("git-dir-changed").join("baseline"))?;
        let artefacts = if hermetic {
            Default::default()
        } else {
            // What the worktree holds besides the change, now: what later
            // goal tests may find there ([`crate::workspace::outside`]).
            self.save_outside()?;
            let after = self.ws.untracked_blobs()?;
            self.journal
                .state()
                .artefacts
                .created_by_goal(&before, &after)
        };
        // The held-out steps at BASE_REF: what their counts are compared
        // with later. (Run after the visible baseline's artefacts are
        // counted: their tree is elsewhere.)
        let held_out = if self.job.held_out.is_empty() {
            None
        } else {
            let (report, _, _) = self
                .run_held_out(
                    self.base_oid,
                    &self.dir.join("held-out-baseline"),
                    self.job_deadline(),
                )
                .await?;
            if let Some(e) = self.signalled() {
                return Ok(Err(e));
            }
            // BASE_REF's code printed these counts, not the candidate's.
            let counts = judge::counts_of(&self.held_out_steps(), &report);
            let kept = self.held_out_kept(report, &[]);
            Some((kept, counts))
        };
        let (held_out, held_out_counts) = match held_out {
            Some((r, c)) => (Some(r), c),
            None => (None, Default::default()),
        };
        // The whole suite at BASE_REF, on a judge-only tree: which tests
        // pass there, which every attempt must keep passing.
        let suite = match self.job.suite.as_ref().map(|s| s.step.clone()) {
            None => None,
            Some(step) => {
                let (report, _, _) = self
                    .judge_only(
                        self.base_oid,
                        &self.dir.join("suite-baseline"),
                        &[step],
                        world::Files::None,
                        &[],
                        self.job_deadline(),
                    )
                    .await?;
                if let Some(e) = self.signalled() {
                    return Ok(Err(e));
                }
                Some(report)
            }
        };
        self.journal.append(Event::Baseline {
            report: baseline.clone(),
            artefacts,
            test_count_off: judge::test_count_off(self.job, &baseline),
            held_out,
            held_out_counts,
            origins,
            suite,
        })?;
        Ok(Ok(baseline))
    }

    /// Preflight on the baseline, before anything is spent: a goal step
    /// that cannot run ends the job as a configuration error, a green
    /// baseline as nothing to fix (unless the job allows it).
    fn preflight(&self, baseline: &GoalReport) -> Option<Ending> {
        match baseline.preflight() {
            Preflight::Ready => None,
            Preflight::NotRunnable {
                step,
                command,
                code,
            } => {
                let what = if code == 127 {
                    "was not found"
                } else {
                    "is not executable"
                };
                tracing::error!(step = %step, command = %command, exit_code = code, "a goal step cannot run");
                Some(Ending {
                    reason: Reason::GoalNotRunnable,
                    detail: format!("goal step `{step}` cannot run: the program of `{command}` {what} (exit {code}); no attempt was made — fix the step's command (a typo? a tool not installed?) and check it with `loopd check --preflight`"),
                })
            }
            Preflight::AlreadyGreen if self.job.allow_green => {
                tracing::info!("the goal test is green at the baseline; going on (allow_green)");
                None
            }
            Preflight::AlreadyGreen => {
                tracing::info!("the goal test is green at the baseline: nothing to fix");
                Some(Ending {
                    reason: Reason::AlreadyGreen,
                    detail: "every goal step passed before any attempt: nothing to fix; nothing was spent. For a job judged by the rubric alone, pass `--allow-green` (or `allow_green = true` in loopd.toml)".into(),
                })
            }
        }
    }

    async fn main_loop(&mut self) -> Result<Ending, JobError> {
        let baseline = match self.baseline().await? {
            Ok(b) => b,
            Err(e) => return Ok(e),
        };
        if let Some(e) = self.preflight(&baseline) {
            return Ok(e);
        }
        if let Some(e) = self.examine().await? {
            return Ok(e);
        }
        let counts = judge::baseline_counts(self.job, &baseline);
        if let Some(e) = self.signalled() {
            return Ok(e);
        }
        if Instant::now() >= self.job_deadline() {
            return Ok(self.guard_ending(Reason::WallClock));
        }
        loop {
            let state = self.journal.state();
            let (n, prompt) = match &state.current {
                Some(c) => (c.attempt, c.prompt.clone()),
                None => {
                    let (n, prompt) = state.next_attempt();
                    if n > self.job.max_attempts {
                        break;
                    }
                    let mut prompt = match prompt {
                        Some(p) => p.to_owned(),
                        None => self.first_prompt(),
                    };
                    // A resume's note is the human's answer: it comes first.
                    if let Some(note) = state
                        .note
                        .as_deref()
                        .map(str::trim)
                        .filter(|n| !n.is_empty())
                    {
                        prompt = format!("{note}\n\n{prompt}");
                    }
                    self.journal.append(Event::AttemptStarted {
                        attempt: n,
                        prompt: prompt.clone(),
                    })?;
                    (n, prompt)
                }
            };
            match self.attempt(n, &prompt, &baseline, &counts).await? {
                attempt::Step::Accepted => {
                    return Ok(self
                        .journal
                        .state()
                        .decided()
                        .expect("an accepted attempt decides the job"))
                }
                attempt::Step::Stop(ending) => return Ok(ending),
                attempt::Step::Rejected => {
                    if let Some(e) = self.signalled() {
                        return Ok(e);
                    }
                }
            }
        }
        // When the last attempt was rejected by a gate, that is the honest
        // reason the job ends without acceptance.
        let last = self
            .journal
            .state()
            .attempts
            .last()
            .and_then(|a| a.rejected_by.map(|r| (r, a.gate_findings.first().cloned())));
        Ok(match last {
            Some((reason, finding)) => Ending {
                reason,
                detail: format!(
                    "{} attempts, none accepted; the last was rejected by the {reason} gate: {}",
                    self.job.max_attempts,
                    finding.unwrap_or_default()
                ),
            },
            None => Ending {
                reason: Reason::AttemptsExhausted,
                detail: format!("{} attempts, none accepted", self.job.max_attempts),
            },
        })
    }
}
