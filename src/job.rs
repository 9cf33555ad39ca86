//! The attempt loop: from a pinned BASE_REF to an accepted diff or an
//! honest "no".
//!
//! ```text
//! pin BASE_REF ─ baseline (every goal step) ─┐
//!   ┌────────────────────────────────────────┘
//!   └─ attempt n: agent session ─ progress check on the diff ─ goal test
//!        ├─ red   → next prompt = failing step + output
//!        └─ green → critic (fresh session, no tools, JSON verdict)
//!                     ├─ PASS, no violations → accepted
//!                     └─ otherwise → next prompt = violations
//!   attempts used up → exhausted;  a guard → stopped;  a signal → interrupted
//!   every ending but acceptance → circuit breaker (park + failure.json)
//! ```
//!
//! The code decides: acceptance is computed here from the goal test's exit
//! codes and the parsed verdict, never from what a model says about itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use crate::agent::events::ResultEvent;
use crate::agent::key::{self, KeyServer};
use crate::agent::session::{self, Role, SessionEnd, SessionSpec, StopRequest};
use crate::agent::{self as cli, CliLimits};
use crate::breaker;
use crate::config::Job;
use crate::critic::{self, CriticInput, CriticVerdict};
use crate::goal::{self, GoalReport, Mode};
use crate::guard::caps::{Budget, Spend};
use crate::guard::progress::DiffHistory;
use crate::guard::tamper::{self, Finding, Policy};
use crate::guard::testcount::{self, Counts};
use crate::guard::Watch;
use crate::outcome::{Outcome, Reason};
use crate::report::{self, AttemptRecord, Ledger, Summary, Totals};
use crate::rubric::RubricSource;
use crate::workspace::Workspace;

/// Variables a goal step never sees: the API key and the forge tokens.
const SECRET_VARS: &[&str] = &[
    key::KEY_VAR,
    "LOOPD_GITHUB_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
];

/// The most of a failing step's output that goes into the next prompt.
pub const MAX_FEEDBACK: usize = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot create the run directory `{}`: {source}", path.display())]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Goal(#[from] goal::GoalError),
    #[error(transparent)]
    Session(#[from] session::SessionError),
    #[error("the protection policy: {0}")]
    Policy(tamper::PolicyError),
    #[error("cannot serve the API key to the CLI: {0}")]
    Key(std::io::Error),
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why the previous attempt was rejected: what the next prompt carries.
#[derive(Debug, Clone)]
pub enum Feedback {
    GoalFailed {
        step: String,
        command: String,
        exit: String,
        output: String,
    },
    Critic(Vec<critic::Violation>),
    CriticInvalid,
    /// Findings of the deterministic gates (protected paths, skip markers,
    /// test count), with file and line.
    Gates(Vec<Finding>),
}

/// The next attempt's prompt: the task, the rejection, the instruction.
pub fn next_prompt(task: &str, feedback: &Feedback, rubric_rules: &str) -> String {
    let mut p = String::new();
    p.push_str(task.trim_end());
    p.push_str("\n\nThe previous attempt was rejected:\n");
    match feedback {
        Feedback::GoalFailed {
            step,
            command,
            exit,
            output,
        } => {
            p.push_str(&format!(
                "The goal test failed at step `{step}` (`{command}`, {exit}). Its output:\n"
            ));
            p.push_str(&goal::head_and_tail(output.trim_end(), MAX_FEEDBACK));
            p.push('\n');
        }
        Feedback::Critic(violations) => {
            for v in violations {
                p.push_str(&v.render());
                p.push('\n');
            }
        }
        Feedback::Gates(findings) => {
            for f in findings {
                p.push_str(&f.render());
                p.push('\n');
            }
        }
        Feedback::CriticInvalid => {
            p.push_str("The goal test passes, but the reviewer could not confirm the change. Re-check it against these rules:\n");
            p.push_str(rubric_rules);
            p.push('\n');
        }
    }
    p.push_str("Fix exactly these points, nothing else.");
    p
}

/// The decision, in code: accepted only if the goal test is green and the
/// verdict is a clean PASS.
pub fn decide(goal: &GoalReport, verdict: &CriticVerdict) -> Result<(), Feedback> {
    if let Some(step) = goal.failed_step() {
        let exit = match (step.timed_out, step.exit_code) {
            (true, _) => "timed out".to_owned(),
            (false, Some(c)) => format!("exit code {c}"),
            (false, None) => "killed by a signal".to_owned(),
        };
        return Err(Feedback::GoalFailed {
            step: step.name.clone(),
            command: step.command.clone(),
            exit,
            output: step.output.clone(),
        });
    }
    match verdict {
        CriticVerdict::Pass if goal.passed() => Ok(()),
        CriticVerdict::Fail { violations } if !violations.is_empty() => {
            Err(Feedback::Critic(violations.clone()))
        }
        _ => Err(Feedback::CriticInvalid),
    }
}

/// A job id: `YYYYMMDD-HHMMSSmmm-xxxx`, sortable by submission time to the
/// millisecond (the queue runs jobs in id order), unique by its random tail.
pub fn new_job_id() -> String {
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let stamp: String = now.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut rnd = [0u8; 2];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut rnd);
    }
    format!("{}-{}-{}", &stamp[..8], &stamp[8..17], hex::encode(rnd))
}

/// Create a private directory (0700) and its parents.
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// How the caller controls a running job.
pub struct Control {
    /// Stop requests (signals, cancel).
    pub stop: watch::Receiver<Option<StopRequest>>,
    /// This executable, for the `apiKeyHelper` command.
    pub loopd_exe: PathBuf,
    /// The API key, if loopd has one to hand to the CLI.
    pub api_key: Option<String>,
    /// Use this id instead of a fresh one.
    pub job_id: Option<String>,
    /// Resume from this checkpoint (the daemon, after a restart).
    pub resume: Option<Checkpoint>,
}

/// The durable state of a job between phases: written to
/// `runs/<job-id>/checkpoint.json` after the baseline, after each agent
/// session and after each attempt, so a restarted job resumes without
/// running or billing a finished session again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    pub job_id: String,
    pub base_ref: String,
    pub baseline: Option<GoalReport>,
    /// Finished attempts.
    pub attempts: Vec<AttemptRecord>,
    /// The attempt to run (or finish) next.
    pub next_attempt: u32,
    /// Its prompt (`None`: the task itself).
    pub next_prompt: Option<String>,
    pub spent: Spend,
    pub diffs: DiffHistory,
    pub denials_read: usize,
    /// Wall-clock time used before, so `--timeout` keeps counting.
    pub wall_ms: u64,
    /// Ledger lines written when this was saved: spend recorded after it
    /// (a session that never finished) is recovered from the ledger.
    pub ledger_lines: usize,
    /// The next attempt's agent session already finished.
    pub agent_done: Option<AgentDone>,
    pub saved_at: String,
}

/// An attempt whose agent session finished: what the rest of it needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentDone {
    pub record: AttemptRecord,
    /// How the session failed, if it did.
    pub failure: Option<(Reason, String)>,
}

impl Checkpoint {
    /// Read `checkpoint.json`, falling back to the previous one when the
    /// newest is truncated or corrupt (a BOM is tolerated).
    pub fn load(run_dir: &Path) -> Option<Checkpoint> {
        for name in ["checkpoint.json", "checkpoint.prev.json"] {
            let path = run_dir.join(name);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            match serde_json::from_str(text.trim_start_matches('\u{feff}')) {
                Ok(cp) => return Some(cp),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable checkpoint; trying the previous one")
                }
            }
        }
        None
    }
}

/// Running state of one job.
struct Run<'a> {
    job: &'a Job,
    id: String,
    dir: PathBuf,
    base: String,
    base_oid: git2::Oid,
    ws: Workspace,
    ledger: Ledger,
    budget: Budget,
    spent: Spend,
    diffs: DiffHistory,
    started: Instant,
    started_at: String,
    stop: watch::Receiver<Option<StopRequest>>,
    settings_path: PathBuf,
    session_env_remove: Vec<std::ffi::OsString>,
    attempts: Vec<AttemptRecord>,
    policy: Policy,
    /// sha256 of the judges' inputs recorded at start: the config, the
    /// rubric, the policy file.
    integrity: Vec<(PathBuf, String)>,
    /// Test counts of each goal step at baseline (steps with a report).
    baseline_counts: BTreeMap<String, Counts>,
    /// Lines of the hook's denials log already read.
    denials_read: usize,
    baseline: Option<GoalReport>,
    next_attempt: u32,
    prompt: String,
    agent_done: Option<AgentDone>,
}

/// How an attempt ended.
enum AttemptOutcome {
    Accepted,
    /// Rejected: the feedback becomes the next prompt.
    Rejected(Feedback),
    /// The job stops (a guard, a signal, an agent error).
    Stop(Ending),
}

/// How the loop ended (before the breaker runs).
struct Ending {
    reason: Reason,
    detail: String,
}

impl Run<'_> {
    fn write(&self, path: &Path, text: &str) -> Result<(), JobError> {
        std::fs::write(path, text).map_err(|source| JobError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    fn job_deadline(&self) -> Instant {
        self.started + self.job.caps.timeout
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

    /// What bounds a goal test now: secrets out, the job's grace, the
    /// deadline, signals, and the job's containment scope.
    fn goal_limits(&self, deadline: Instant) -> goal::Limits<'_> {
        goal::Limits {
            env_remove: SECRET_VARS,
            grace: self.job.guard.grace,
            deadline: Some(deadline),
            stop: Some(self.stop.clone()),
            scope: &self.id,
        }
    }

    fn signalled(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Run one session under the guards; returns its end and reconciled spend.
    async fn session(
        &mut self,
        role: Role,
        attempt: u32,
        args: Vec<std::ffi::OsString>,
        stdin: Option<String>,
        dir: &Path,
        attempt_started: Instant,
    ) -> Result<(SessionEnd, Spend), JobError> {
        let spec = SessionSpec {
            role,
            bin: self.job.agent_bin.clone(),
            args,
            cwd: self.ws.root().to_path_buf(),
            env_set: cli::SESSION_ENV
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            env_remove: self.session_env_remove.clone(),
            stdin,
            stream_log: dir.join(format!("{}-stream.jsonl", role.as_str())),
            stderr_log: dir.join(format!("{}-stderr.txt", role.as_str())),
            deadline: Some(self.deadline(attempt_started)),
            idle_timeout: self.job.caps.idle_timeout,
            grace: self.job.guard.grace,
            scope: self.id.clone(),
        };
        let mut stop = self.stop.clone();
        let before = self.spent;
        let (end, live, tool_calls) = {
            let mut watch = Watch::new(
                role,
                attempt,
                &self.budget,
                before,
                &self.job.guard,
                &mut self.ledger,
            );
            let end = session::run(&spec, &mut watch, &mut stop).await?;
            watch.flush_pending();
            (end, watch.live, watch.tool_calls)
        };
        // The result event is the authority; the live estimate stands in
        // when the session was stopped before it could write one.
        let spend = match &end.result {
            Some(r) => Spend {
                cost_usd: r.total_cost_usd.max(if r.total_cost_usd == 0.0 {
                    live.cost_usd
                } else {
                    0.0
                }),
                turns: r.num_turns.max(live.turns),
                input_tokens: r.usage.all_input().max(live.input_tokens),
                output_tokens: r.usage.output_tokens.max(live.output_tokens),
            },
            None => live,
        };
        self.spent.add(&spend);
        self.ledger.record(json!({
            "event": "session_end", "attempt": attempt, "role": role.as_str(),
            "cost_usd": spend.cost_usd, "cost_usd_estimate": live.cost_usd, "turns": spend.turns,
            "input_tokens": spend.input_tokens, "output_tokens": spend.output_tokens,
            "tool_calls": tool_calls, "wall_ms": end.wall.as_millis() as u64,
            "terminal_reason": end.result.as_ref().and_then(|r| r.terminal_reason.clone()),
            "is_error": end.result.as_ref().map(|r| r.is_error),
            "stopped": end.stopped, "exit_code": end.exit_code, "leftover_processes": end.leftovers,
        }));
        tracing::info!(role = role.as_str(), attempt, cost_usd = spend.cost_usd, turns = spend.turns, tool_calls, stopped = ?end.stopped, "session ended");
        Ok((end, spend))
    }

    /// Map a failed session to the reason the job stops with.
    fn session_failure(&self, end: &SessionEnd) -> Option<Ending> {
        if let Some(reason) = end.stopped {
            return Some(Ending {
                reason,
                detail: self.guard_detail(reason),
            });
        }
        let failed = |r: &ResultEvent| match r.terminal_reason.as_deref() {
            Some("max_turns") => Some(Reason::MaxTurns),
            Some("budget_exhausted") => Some(Reason::BudgetUsd),
            _ => None,
        };
        match &end.result {
            Some(r) if r.completed() => None,
            Some(r) => match failed(r) {
                Some(reason) => Some(Ending {
                    reason,
                    detail: format!(
                        "the CLI's own limit stopped the session ({}); {}",
                        r.error_text(),
                        self.spend_line()
                    ),
                }),
                None => Some(Ending {
                    reason: Reason::AgentError,
                    detail: format!("the agent CLI failed: {}", end.failure()),
                }),
            },
            None => Some(Ending {
                reason: Reason::AgentError,
                detail: format!("the agent CLI failed: {}", end.failure()),
            }),
        }
    }

    fn spend_line(&self) -> String {
        format!(
            "spent ${:.4} of ${}, {} of {} turns, {} of {} tokens",
            self.spent.cost_usd,
            self.job.caps.budget_usd,
            self.spent.turns,
            self.job.caps.max_turns,
            self.spent.tokens(),
            self.job.caps.max_tokens
        )
    }

    fn guard_detail(&self, reason: Reason) -> String {
        let caps = &self.job.caps;
        let g = &self.job.guard;
        match reason {
            Reason::BudgetUsd | Reason::MaxTurns | Reason::MaxTokens => format!("the {reason} cap was reached: {}", self.spend_line()),
            Reason::WallClock => format!("the job ran into its wall-clock limit of {}", humantime::format_duration(caps.timeout)),
            Reason::AttemptTimeout => format!("an attempt ran into its limit of {}", humantime::format_duration(caps.attempt_timeout)),
            Reason::IdleTimeout => format!("the agent sent no event for {}", humantime::format_duration(caps.idle_timeout)),
            Reason::StuckRepeat => format!("the agent repeated the same tool call {} times within its last {} calls", g.stuck_repeat, g.stuck_window),
            Reason::StuckNoProgress => "the attempt left the working tree exactly as the previous attempt did".into(),
            Reason::JudgesDisagree => "the diff returned to an earlier attempt's state: the goal test and the critic pull in opposite directions; a human should look at the rubric and the task".into(),
            Reason::Signal => "loopd received a termination signal".into(),
            other => other.to_string(),
        }
    }

    /// Refuse a session the budget cannot cover (budget before cost).
    fn may_start(&self, model: &str) -> Option<Ending> {
        self.budget.can_start(&self.spent, model).err().map(|reason| Ending {
            reason,
            detail: format!("not starting another session on `{model}`: the remaining budget cannot cover even one call ({})", self.spend_line()),
        })
    }

    fn limits(&self) -> CliLimits {
        CliLimits {
            max_budget_usd: self.budget.remaining_usd(&self.spent),
            max_turns: self.budget.remaining_turns(&self.spent),
        }
    }

    async fn attempt(
        &mut self,
        n: u32,
        prompt: &str,
        baseline: &GoalReport,
    ) -> Result<AttemptOutcome, JobError> {
        let dir = self.dir.join(format!("attempt-{n}"));
        private_dir(&dir).map_err(|source| JobError::RunDir {
            path: dir.clone(),
            source,
        })?;
        let prompt_file = dir.join("prompt.txt");
        self.write(&prompt_file, prompt)?;
        let attempt_started = Instant::now();
        if let Some(done) = self.agent_done.clone().filter(|d| d.record.n == n) {
            tracing::info!(
                attempt = n,
                "resuming after the attempt's finished agent session"
            );
            let mut record = done.record;
            let failure = done
                .failure
                .map(|(reason, detail)| Ending { reason, detail });
            let outcome = self
                .judge(n, baseline, &dir, attempt_started, &mut record, failure)
                .await;
            return Ok(self.end_attempt(record, outcome?));
        }
        let mut record = AttemptRecord {
            n,
            goal_passed: false,
            failed_step: None,
            critic: CriticVerdict::Skipped.label().into(),
            critic_note: None,
            violations: vec![],
            gate_findings: vec![],
            rejected_by: None,
            denied_tool_calls: 0,
            cost_usd: 0.0,
            turns: 0,
            input_tokens: 0,
            output_tokens: 0,
            diff_sha256: String::new(),
            stopped: None,
            prompt_file,
        };
        tracing::info!(attempt = n, max = self.job.max_attempts, "attempt started");
        let failure = match self
            .agent_phase(n, prompt, &dir, attempt_started, &mut record)
            .await?
        {
            Ok(failure) => failure,
            Err(ending) => return Ok(self.end_attempt(record, AttemptOutcome::Stop(ending))),
        };
        // A session cut short by a signal did not finish: a resumed job
        // runs the attempt's agent session again.
        if let Some(e) = failure.as_ref().filter(|e| e.reason == Reason::Signal) {
            let ending = Ending {
                reason: e.reason,
                detail: e.detail.clone(),
            };
            return Ok(self.end_attempt(record, AttemptOutcome::Stop(ending)));
        }
        self.agent_done = Some(AgentDone {
            record: record.clone(),
            failure: failure.as_ref().map(|e| (e.reason, e.detail.clone())),
        });
        self.save_checkpoint();
        let outcome = self
            .judge(n, baseline, &dir, attempt_started, &mut record, failure)
            .await?;
        Ok(self.end_attempt(record, outcome))
    }

    fn end_attempt(
        &mut self,
        mut record: AttemptRecord,
        outcome: AttemptOutcome,
    ) -> AttemptOutcome {
        if let AttemptOutcome::Stop(ending) = &outcome {
            record.stopped = Some(ending.reason);
        }
        self.ledger.record(json!({
            "event": "attempt_end", "attempt": record.n, "goal_passed": record.goal_passed,
            "failed_step": record.failed_step, "critic": record.critic, "violations": record.violations.len(),
            "cost_usd": record.cost_usd, "diff_sha256": record.diff_sha256, "stopped": record.stopped,
        }));
        self.attempts.push(record);
        outcome
    }

    /// Save where the job is, atomically, keeping the previous checkpoint.
    fn save_checkpoint(&self) {
        let cp = Checkpoint {
            job_id: self.id.clone(),
            base_ref: self.base.clone(),
            baseline: self.baseline.clone(),
            attempts: self
                .attempts
                .iter()
                .filter(|a| a.n < self.next_attempt)
                .cloned()
                .collect(),
            next_attempt: self.next_attempt,
            next_prompt: (self.prompt != self.job.task).then(|| self.prompt.clone()),
            spent: self.spent,
            diffs: self.diffs.clone(),
            denials_read: self.denials_read,
            wall_ms: self.started.elapsed().as_millis() as u64,
            ledger_lines: self.ledger.lines(),
            agent_done: self.agent_done.clone(),
            saved_at: report::now_rfc3339(),
        };
        let path = self.dir.join("checkpoint.json");
        if path.exists() {
            let _ = std::fs::rename(&path, self.dir.join("checkpoint.prev.json"));
        }
        if let Err(e) = report::write_json_atomic(&path, &cp) {
            tracing::error!(error = %e, path = %path.display(), "cannot write the checkpoint");
        }
    }

    /// The agent session of attempt `n`. `Ok(Err(ending))` when the job
    /// cannot even start it; otherwise how the session failed, if it did.
    async fn agent_phase(
        &mut self,
        n: u32,
        prompt: &str,
        dir: &Path,
        attempt_started: Instant,
        record: &mut AttemptRecord,
    ) -> Result<Result<Option<Ending>, Ending>, JobError> {
        if let Some(e) = self.may_start(&self.job.agent_model) {
            return Ok(Err(e));
        }
        let args = cli::agent_args(
            &self.job.agent_model,
            &self.job.allowed_tools,
            &self.settings_path,
            self.limits(),
            prompt,
        );
        let (end, spend) = self
            .session(Role::Agent, n, args, None, dir, attempt_started)
            .await?;
        add_spend(record, &spend);
        Ok(Ok(self.session_failure(&end)))
    }

    /// Everything after the agent session: progress check, gates, goal
    /// test, critic, decision.
    async fn judge(
        &mut self,
        n: u32,
        baseline: &GoalReport,
        dir: &Path,
        attempt_started: Instant,
        record: &mut AttemptRecord,
        failure: Option<Ending>,
    ) -> Result<AttemptOutcome, JobError> {
        let stop = |e: Ending| Ok(AttemptOutcome::Stop(e));
        let diff = self.ws.diff_since(self.base_oid)?;
        self.write(&dir.join("diff.patch"), &diff.patch)?;
        record.diff_sha256 = diff.sha256.clone();
        if let Some(e) = failure {
            return stop(e);
        }
        if let Some(reason) = self.budget.exceeded(&self.spent) {
            return stop(Ending {
                reason,
                detail: self.guard_detail(reason),
            });
        }
        if let Some(reason) = self.diffs.observe(&diff.sha256) {
            tracing::warn!(attempt = n, %reason, diff_sha256 = %diff.sha256, "no progress");
            return stop(Ending {
                reason,
                detail: self.guard_detail(reason),
            });
        }

        // What the hook denied during the session: attempts at tampering.
        let denied = self.read_denials();
        record.denied_tool_calls = denied.len();
        // The deterministic gate on the diff, before the goal test.
        let findings = self
            .policy
            .compile()
            .map_err(JobError::Policy)?
            .diff_findings(&diff);
        if !findings.is_empty() {
            return Ok(AttemptOutcome::Rejected(
                self.reject_by_gates(n, record, findings, denied),
            ));
        }

        let (deadline, deadline_reason) = self.deadline(attempt_started);
        let goal = goal::run(
            &self.job.goal,
            self.ws.root(),
            Mode::FirstFailure,
            &self.goal_limits(deadline),
        )
        .await?;
        self.write(&dir.join("goal.txt"), &goal.render())?;
        self.write(
            &dir.join("goal.json"),
            &serde_json::to_string_pretty(&goal).expect("a goal report serializes"),
        )?;
        record.goal_passed = goal.passed();
        record.failed_step = goal.failed_step().map(|s| s.name.clone());
        if let Some(req) = *self.stop.borrow() {
            return stop(Ending {
                reason: req.reason,
                detail: self.guard_detail(req.reason),
            });
        }
        if Instant::now() >= deadline {
            return stop(Ending {
                reason: deadline_reason,
                detail: self.guard_detail(deadline_reason),
            });
        }

        if goal.passed() {
            let findings = self.test_count_findings(&goal);
            if !findings.is_empty() {
                return Ok(AttemptOutcome::Rejected(
                    self.reject_by_gates(n, record, findings, denied),
                ));
            }
        }

        let verdict = if goal.passed() {
            if let Some(e) = self.may_start(&self.job.critic_model) {
                return stop(e);
            }
            if let Some(e) = self.verify_integrity() {
                return stop(e);
            }
            let gates = self.gates_statement(&goal);
            let input = CriticInput {
                task: &self.job.task,
                baseline: &baseline.render(),
                goal_names: self.job.goal.iter().map(|s| s.name.as_str()).collect(),
                rubric: &self.job.rubric,
                base_ref: &self.base,
                patch: &diff.patch,
                gates: &gates,
            }
            .render();
            self.write(&dir.join("critic-input.txt"), &input)?;
            let schema = critic::verdict_schema().to_string();
            let args = cli::critic_args(
                &self.job.critic_model,
                &schema,
                &self.settings_path,
                self.limits(),
                critic::INSTRUCTION,
            );
            let (end, spend) = self
                .session(Role::Critic, n, args, Some(input), dir, attempt_started)
                .await?;
            add_spend(record, &spend);
            if let Some(reason) = end.stopped {
                return stop(Ending {
                    reason,
                    detail: self.guard_detail(reason),
                });
            }
            let verdict = critic::read_verdict(end.result.as_ref());
            let verdict_file = dir.join("critic-verdict.json");
            let written = serde_json::to_string_pretty(&json!({
                "verdict": &verdict,
                "structured_output": end.result.as_ref().and_then(|r| r.structured_output.clone()),
                "result": end.result.as_ref().and_then(|r| r.result.clone()),
            }))
            .expect("a verdict serializes");
            self.write(&verdict_file, &written)?;
            if let CriticVerdict::Invalid { why } = &verdict {
                tracing::warn!(attempt = n, why = %why, "the critic's verdict is invalid");
                record.critic_note = Some(why.clone());
            }
            if let Some(reason) = self.budget.exceeded(&self.spent) {
                record.critic = verdict.label().into();
                record.violations = verdict.violations().to_vec();
                return stop(Ending {
                    reason,
                    detail: self.guard_detail(reason),
                });
            }
            verdict
        } else {
            CriticVerdict::Skipped
        };
        record.critic = verdict.label().into();
        record.violations = verdict.violations().to_vec();
        match decide(&goal, &verdict) {
            Ok(()) => match self.verify_integrity() {
                Some(e) => stop(e),
                None => Ok(AttemptOutcome::Accepted),
            },
            Err(feedback) => {
                if !denied.is_empty() {
                    record
                        .gate_findings
                        .extend(denied.iter().map(Finding::render));
                    record.rejected_by = Some(Reason::ProtectedPath);
                }
                Ok(AttemptOutcome::Rejected(feedback))
            }
        }
    }
}

impl Run<'_> {
    /// Record gate findings on the attempt and turn them into feedback.
    fn reject_by_gates(
        &mut self,
        n: u32,
        record: &mut AttemptRecord,
        mut findings: Vec<Finding>,
        denied: Vec<Finding>,
    ) -> Feedback {
        // A protected path outranks a skip marker, which outranks a count.
        findings.sort_by_key(|f| match f.reason {
            Reason::ProtectedPath => 0,
            Reason::SkipMarker => 1,
            _ => 2,
        });
        for f in &findings {
            tracing::warn!(attempt = n, reason = %f.reason, path = %f.path, line = ?f.line, "gate: {}", f.problem);
            self.ledger.record(json!({"event": "gate", "attempt": n, "reason": f.reason, "path": f.path, "line": f.line, "problem": f.problem}));
        }
        record.rejected_by = findings.first().map(|f| f.reason);
        findings.extend(denied);
        record.gate_findings = findings.iter().map(Finding::render).collect();
        Feedback::Gates(findings)
    }

    /// New entries of the hook's denials log, as findings.
    fn read_denials(&mut self) -> Vec<Finding> {
        let Some(log) = &self.policy.denials_log else {
            return Vec::new();
        };
        let Ok(text) = std::fs::read_to_string(log) else {
            return Vec::new();
        };
        let lines: Vec<&str> = text.lines().collect();
        let new = &lines[self.denials_read.min(lines.len())..];
        self.denials_read = lines.len();
        new.iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|d| {
                let tool = d["tool"].as_str().unwrap_or("?").to_owned();
                let target = d["input"]["file_path"]
                    .as_str()
                    .map(|p| {
                        p.strip_prefix(&format!("{}/", self.ws.root().display()))
                            .unwrap_or(p)
                            .to_owned()
                    })
                    .or_else(|| {
                        d["input"]["command"]
                            .as_str()
                            .map(|c| format!("`{}`", c.chars().take(120).collect::<String>()))
                    })
                    .unwrap_or_default();
                self.ledger
                    .record(json!({"event": "hook_denied", "tool": tool, "target": target}));
                Finding {
                    reason: Reason::ProtectedPath,
                    path: target.clone(),
                    line: None,
                    problem: format!(
                        "the {tool} call on {target} was denied: {}",
                        d["reason"].as_str().unwrap_or("protected")
                    ),
                    fix:
                        "leave protected files and git history as they are; fix the code under test"
                            .into(),
                }
            })
            .collect()
    }

    /// The test-count gate for the steps of a green goal test.
    fn test_count_findings(&self, goal: &GoalReport) -> Vec<Finding> {
        let mut out = Vec::new();
        for (step, result) in self.job.goal.iter().zip(&goal.steps) {
            let (Some(preset), Some(base)) = (step.report, self.baseline_counts.get(&step.name))
            else {
                continue;
            };
            let problem = match testcount::parse(preset, &result.output) {
                None => Some("its output no longer has a test summary".to_owned()),
                Some(now) => testcount::compare(base, &now),
            };
            if let Some(problem) = problem {
                out.push(Finding {
                    reason: Reason::TestCountDropped,
                    path: format!("goal step `{}`", step.name),
                    line: None,
                    problem: format!("the test count dropped: {problem}"),
                    fix: "run every test that ran at baseline, none skipped or deselected; fix the code, not the test selection".into(),
                });
            }
        }
        out
    }

    /// What the critic is told the code already established.
    fn gates_statement(&self, goal: &GoalReport) -> String {
        let mut s = String::from(
            "The deterministic gates passed: no protected path (tests that existed at BASE_REF, test-runner configuration, loopd.toml, the rubric) was changed and no skip marker was added",
        );
        let counts: Vec<String> = self
            .job
            .goal
            .iter()
            .zip(&goal.steps)
            .filter_map(|(step, r)| {
                let base = self.baseline_counts.get(&step.name)?;
                let now = testcount::parse(step.report?, &r.output)?;
                Some(format!(
                    "`{}`: {} tests ran and {} passed (baseline: {} ran)",
                    step.name, now.ran, now.passed, base.ran
                ))
            })
            .collect();
        if !counts.is_empty() {
            s.push_str(&format!(
                "; the test count did not drop ({})",
                counts.join("; ")
            ));
        }
        s.push_str(". These are enforced in code; you need not re-check them, and no verdict can override them.");
        s
    }

    /// Judge integrity: the config, the rubric and the policy are unchanged.
    fn verify_integrity(&self) -> Option<Ending> {
        for (path, recorded) in &self.integrity {
            let now = tamper::file_sha256(path).unwrap_or_else(|e| format!("unreadable: {e}"));
            if &now != recorded {
                tracing::error!(path = %path.display(), "a judge's input changed during the job");
                return Some(Ending {
                    reason: Reason::ConfigTampered,
                    detail: format!("`{}` changed during the job (sha256 {} at start); the judges' inputs must not change", path.display(), recorded),
                });
            }
        }
        None
    }
}

fn add_spend(record: &mut AttemptRecord, s: &Spend) {
    record.cost_usd = report::round_usd(record.cost_usd + s.cost_usd);
    record.turns += s.turns;
    record.input_tokens += s.input_tokens;
    record.output_tokens += s.output_tokens;
}

/// Run a job in a repository whose tree the caller has checked is clean.
pub async fn run(job: &Job, ws: Workspace, control: Control) -> Result<Summary, JobError> {
    let started = Instant::now();
    let started_at = report::now_rfc3339();
    let base_oid = ws.head_commit()?;
    let base = base_oid.to_string();
    let id = control.job_id.clone().unwrap_or_else(new_job_id);
    let dir = job.state_dir.join("runs").join(&id);
    private_dir(&dir).map_err(|source| JobError::RunDir {
        path: dir.clone(),
        source,
    })?;
    tracing::info!(job_id = %id, base_ref = %base, run_dir = %dir.display(), "job started");

    // The key reaches the CLI through its apiKeyHelper, never the environment
    // of the agent's tools. The socket path must fit a sockaddr_un.
    let key_server = match &control.api_key {
        Some(k) => {
            let mut sock = dir.join("key.sock");
            if sock.as_os_str().len() > 100 {
                let short = std::env::temp_dir().join(format!("loopd-{}", std::process::id()));
                private_dir(&short).map_err(|source| JobError::RunDir {
                    path: short.clone(),
                    source,
                })?;
                sock = short.join(format!("{id}.sock"));
            }
            Some(KeyServer::start(&sock, k.clone()).map_err(JobError::Key)?)
        }
        None => None,
    };
    // The protection policy: written where the hook reads it, hashed with
    // the other judges' inputs.
    let mut own_files: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(c) = &job.config_file {
        own_files.push((
            c.canonicalize().unwrap_or_else(|_| c.clone()),
            "the job's configuration",
        ));
    }
    if let RubricSource::File(r) = &job.rubric.source {
        own_files.push((r.canonicalize().unwrap_or_else(|_| r.clone()), "the rubric"));
    }
    let mut policy = Policy::build(ws.git2(), ws.root(), base_oid, &job.protect, &own_files)
        .map_err(JobError::Policy)?;
    policy.denials_log = Some(dir.join("hook-denials.jsonl"));
    let policy_path = dir.join("policy.json");
    policy
        .outside
        .insert(policy_path.clone(), "loopd's protection policy".into());
    std::fs::write(
        &policy_path,
        serde_json::to_string_pretty(&policy).expect("the policy serializes"),
    )
    .map_err(|source| JobError::Write {
        path: policy_path.clone(),
        source,
    })?;
    let mut integrity = Vec::new();
    for path in own_files
        .iter()
        .map(|(p, _)| p.clone())
        .chain([policy_path.clone()])
    {
        let sha = tamper::file_sha256(&path).map_err(|source| JobError::Write {
            path: path.clone(),
            source,
        })?;
        integrity.push((path, sha));
    }
    let hook_command = format!(
        "{}={} {} hook pre-tool-use",
        crate::cli::hook::POLICY_VAR,
        key::shell_quote(&policy_path.to_string_lossy()),
        key::shell_quote(&control.loopd_exe.to_string_lossy())
    );
    let hooks = json!({"PreToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit|Bash", "hooks": [{"type": "command", "command": hook_command}]}]});
    let settings = cli::settings_json(
        key_server
            .as_ref()
            .map(|s| s.helper_command(&control.loopd_exe))
            .as_deref(),
        &[],
        Some(hooks),
    );
    let settings_path = dir.join("settings.json");
    std::fs::write(
        &settings_path,
        serde_json::to_string_pretty(&settings).expect("settings serialize"),
    )
    .map_err(|source| JobError::Write {
        path: settings_path.clone(),
        source,
    })?;
    std::fs::write(
        dir.join("job.json"),
        serde_json::to_string_pretty(job).expect("job serializes"),
    )
    .map_err(|source| JobError::Write {
        path: dir.join("job.json"),
        source,
    })?;

    let ledger_path = dir.join("ledger.jsonl");
    let ledger = Ledger::create(&ledger_path).map_err(|source| JobError::Write {
        path: ledger_path,
        source,
    })?;
    let mut run = Run {
        job,
        id: id.clone(),
        dir: dir.clone(),
        base: base.clone(),
        base_oid,
        ws,
        ledger,
        budget: Budget {
            caps: job.caps.clone(),
        },
        spent: Spend::default(),
        diffs: DiffHistory::default(),
        started,
        started_at,
        stop: control.stop,
        settings_path,
        // Tokens never reach the agent, its tools or its hooks; the API key
        // only through the helper.
        session_env_remove: crate::ci::github::TOKEN_VARS
            .iter()
            .map(|v| (*v).into())
            .chain(key_server.as_ref().map(|_| key::KEY_VAR.into()))
            .collect(),
        attempts: Vec::new(),
        policy,
        integrity,
        baseline_counts: BTreeMap::new(),
        denials_read: 0,
        baseline: None,
        next_attempt: 1,
        prompt: job.task.clone(),
        agent_done: None,
    };
    if let Some(cp) = control.resume {
        // Caps keep counting from where they were: the checkpoint's spend
        // plus whatever the ledger recorded after it (a session cut short).
        let after = Ledger::spend_after(&run.dir.join("ledger.jsonl"), cp.ledger_lines);
        run.spent = cp.spent.plus(&after);
        run.started = Instant::now()
            .checked_sub(std::time::Duration::from_millis(cp.wall_ms))
            .unwrap_or(run.started);
        run.baseline = cp.baseline;
        run.attempts = cp.attempts;
        run.next_attempt = cp.next_attempt;
        run.prompt = cp.next_prompt.unwrap_or_else(|| job.task.clone());
        run.diffs = cp.diffs;
        run.denials_read = cp.denials_read;
        run.agent_done = cp.agent_done;
        tracing::info!(
            attempt = run.next_attempt,
            spent_usd = run.spent.cost_usd,
            recovered_usd = after.cost_usd,
            "resuming from the checkpoint"
        );
        run.ledger.record(json!({"event": "job_resume", "next_attempt": run.next_attempt, "spent": run.spent, "recovered_from_ledger": after}));
    }
    run.ledger.record(
        json!({"event": "job_start", "job_id": id, "base_ref": base, "repo": run.ws.root()}),
    );

    let ending = run.main_loop().await;
    drop(key_server);
    let ending = match ending {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "internal error");
            Ending {
                reason: Reason::InternalError,
                detail: e.to_string(),
            }
        }
    };
    run.finish(ending)
}

impl Run<'_> {
    async fn main_loop(&mut self) -> Result<Ending, JobError> {
        let (deadline, reason) = (self.job_deadline(), Reason::WallClock);
        let baseline = match self.baseline.clone() {
            Some(b) => b,
            None => {
                let baseline = goal::run(
                    &self.job.goal,
                    self.ws.root(),
                    Mode::All,
                    &self.goal_limits(deadline),
                )
                .await?;
                self.write(&self.dir.join("baseline.txt"), &baseline.render())?;
                self.write(
                    &self.dir.join("baseline.json"),
                    &serde_json::to_string_pretty(&baseline).expect("a goal report serializes"),
                )?;
                self.ledger.record(json!({"event": "baseline", "passed": baseline.passed(), "failed_step": baseline.failed_step().map(|s| s.name.clone())}));
                if self.stop.borrow().is_none() {
                    self.baseline = Some(baseline.clone());
                    self.save_checkpoint();
                }
                baseline
            }
        };
        // The test counts the test-count gate compares against.
        for (step, result) in self.job.goal.iter().zip(&baseline.steps) {
            let Some(preset) = step.report else { continue };
            match testcount::parse(preset, &result.output) {
                Some(counts) => {
                    tracing::info!(step = %step.name, ran = counts.ran, passed = counts.passed, skipped = counts.skipped, "baseline test count");
                    self.ledger.record(
                        json!({"event": "baseline_count", "step": step.name, "counts": counts}),
                    );
                    self.baseline_counts.insert(step.name.clone(), counts);
                }
                None => {
                    tracing::warn!(step = %step.name, ?preset, "no test summary in the baseline output; the test-count gate is off for this step")
                }
            }
        }
        if let Some(req) = *self.stop.borrow() {
            return Ok(Ending {
                reason: req.reason,
                detail: self.guard_detail(req.reason),
            });
        }
        if Instant::now() >= deadline {
            return Ok(Ending {
                reason,
                detail: self.guard_detail(reason),
            });
        }
        for n in self.next_attempt..=self.job.max_attempts {
            let prompt = self.prompt.clone();
            match self.attempt(n, &prompt, &baseline).await? {
                AttemptOutcome::Accepted => {
                    return Ok(Ending { reason: Reason::Accepted, detail: format!("attempt {n} was accepted: the goal test is green and the critic passed the diff") });
                }
                AttemptOutcome::Stop(ending) => return Ok(ending),
                AttemptOutcome::Rejected(feedback) => {
                    if self.signalled() {
                        let reason = self
                            .stop
                            .borrow()
                            .map(|r| r.reason)
                            .unwrap_or(Reason::Signal);
                        return Ok(Ending {
                            reason,
                            detail: self.guard_detail(reason),
                        });
                    }
                    self.prompt =
                        next_prompt(&self.job.task, &feedback, &self.job.rubric.render_rules());
                    self.next_attempt = n + 1;
                    self.agent_done = None;
                    self.save_checkpoint();
                }
            }
        }
        // When the last attempt was rejected by a gate, that is the honest
        // reason the job ends without acceptance.
        let last = self
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

    fn finish(mut self, ending: Ending) -> Result<Summary, JobError> {
        let wall_ms = self.started.elapsed().as_millis() as u64;
        let totals = Totals::from_spend(&self.spent, wall_ms);
        self.ledger
            .record(json!({"event": "job_end", "reason": ending.reason, "detail": ending.detail}));
        let suspend =
            ending.reason == Reason::Signal && self.stop.borrow().is_some_and(|r| r.suspend);
        if suspend {
            // Resumable: the work stays in place, the checkpoint says where.
            self.save_checkpoint();
            tracing::info!(
                attempt = self.next_attempt,
                "job suspended; it resumes from its checkpoint"
            );
        }
        let (stash_commit, failure_report) = if ending.reason == Reason::Accepted || suspend {
            (None, None)
        } else {
            let trip = breaker::Trip {
                job_id: &self.id,
                reason: ending.reason,
                detail: &ending.detail,
                base_ref: &self.base,
                totals,
                attempts: self.attempts.len(),
                last_events: self.ledger.last_events(),
                run_dir: &self.dir,
            };
            match breaker::trip(&mut self.ws, trip) {
                Ok(p) => (p.stash_commit, Some(p.report)),
                Err(e) => {
                    tracing::error!(error = %e, "the circuit breaker could not park the work; the working tree is left as it is");
                    let report = self.dir.join("failure.json");
                    (None, report.exists().then_some(report))
                }
            }
        };
        let summary = Summary {
            job_id: self.id.clone(),
            repo: self.ws.root().to_path_buf(),
            base_ref: self.base.clone(),
            task: self.job.task.clone(),
            outcome: ending.reason.outcome(),
            reason: ending.reason,
            detail: ending.detail,
            attempts: std::mem::take(&mut self.attempts),
            totals,
            stash_commit,
            failure_report,
            run_dir: self.dir.clone(),
            started_at: self.started_at.clone(),
            finished_at: report::now_rfc3339(),
        };
        let path = self.dir.join("summary.json");
        report::write_json_atomic(&path, &summary)
            .map_err(|source| JobError::Write { path, source })?;
        debug_assert!(summary.outcome != Outcome::Accepted || summary.stash_commit.is_none());
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critic::Violation;
    use crate::goal::StepResult;

    fn goal(passed: bool) -> GoalReport {
        GoalReport {
            steps: vec![StepResult {
                name: "pytest".into(),
                command: "python3 -m pytest -q".into(),
                exit_code: Some(if passed { 0 } else { 1 }),
                timed_out: false,
                passed,
                output: "F..\n1 failed, 2 passed".into(),
                duration_ms: 5,
                leftovers: 0,
            }],
        }
    }

    #[test]
    fn the_code_decides() {
        assert!(decide(&goal(true), &CriticVerdict::Pass).is_ok());
        assert!(matches!(
            decide(&goal(false), &CriticVerdict::Pass),
            Err(Feedback::GoalFailed { .. })
        ));
        assert!(matches!(
            decide(
                &goal(true),
                &CriticVerdict::Invalid {
                    why: "prose".into()
                }
            ),
            Err(Feedback::CriticInvalid)
        ));
        assert!(matches!(
            decide(&goal(true), &CriticVerdict::Skipped),
            Err(Feedback::CriticInvalid)
        ));
        let v = Violation {
            rule: 1,
            file: "t.py".into(),
            problem: "skip".into(),
            fix: "remove it".into(),
        };
        assert!(matches!(
            decide(
                &goal(true),
                &CriticVerdict::Fail {
                    violations: vec![v]
                }
            ),
            Err(Feedback::Critic(_))
        ));
    }

    #[test]
    fn next_prompt_shapes() {
        let v = Violation {
            rule: 2,
            file: "rechnung.py".into(),
            problem: "debug print".into(),
            fix: "remove it".into(),
        };
        let p = next_prompt("Make the tests pass.", &Feedback::Critic(vec![v]), "");
        assert_eq!(p, "Make the tests pass.\n\nThe previous attempt was rejected:\nrechnung.py (rule 2): debug print — fix: remove it\nFix exactly these points, nothing else.");
        let Err(f) = decide(&goal(false), &CriticVerdict::Skipped) else {
            panic!()
        };
        let p = next_prompt("T", &f, "");
        assert!(p.starts_with("T\n\nThe previous attempt was rejected:\nThe goal test failed at step `pytest` (`python3 -m pytest -q`, exit code 1)"), "{p}");
        assert!(
            p.contains("1 failed, 2 passed")
                && p.ends_with("Fix exactly these points, nothing else.")
        );
        let long = Feedback::GoalFailed {
            step: "s".into(),
            command: "c".into(),
            exit: "exit code 1".into(),
            output: format!("HEAD{}TAIL", "x".repeat(100_000)),
        };
        let p = next_prompt("T", &long, "");
        assert!(p.len() < MAX_FEEDBACK + 500 && p.contains("HEAD") && p.contains("TAIL"));
    }

    #[test]
    fn a_truncated_checkpoint_falls_back_to_the_previous_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cp = Checkpoint {
            job_id: "j".into(),
            base_ref: "0".repeat(40),
            baseline: None,
            attempts: vec![],
            next_attempt: 2,
            next_prompt: Some("fix it".into()),
            spent: Spend {
                cost_usd: 0.25,
                ..Spend::default()
            },
            diffs: DiffHistory::default(),
            denials_read: 0,
            wall_ms: 1000,
            ledger_lines: 7,
            agent_done: None,
            saved_at: "then".into(),
        };
        let good = serde_json::to_string(&cp).expect("json");
        // BOM-prefixed previous, truncated newest.
        std::fs::write(
            dir.path().join("checkpoint.prev.json"),
            format!("\u{feff}{good}"),
        )
        .expect("write");
        std::fs::write(dir.path().join("checkpoint.json"), &good[..good.len() / 2]).expect("write");
        let loaded = Checkpoint::load(dir.path()).expect("fell back");
        assert_eq!(loaded.next_attempt, 2);
        assert_eq!(loaded.spent.cost_usd, 0.25);
        std::fs::write(dir.path().join("checkpoint.prev.json"), "garbage").expect("write");
        assert!(
            Checkpoint::load(dir.path()).is_none(),
            "both unreadable: no resume, no crash"
        );
    }

    #[test]
    fn ledger_spend_after_a_checkpoint_is_recovered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger.jsonl");
        let lines = [
            json!({"event": "session_end", "attempt": 1, "role": "agent", "cost_usd": 1.0, "turns": 3, "input_tokens": 10, "output_tokens": 5}),
            // After the checkpoint: a finished critic and an agent cut short.
            json!({"event": "model_call", "attempt": 2, "role": "critic", "cost_usd_estimate": 0.1, "input_tokens": 1, "output_tokens": 1}),
            json!({"event": "session_end", "attempt": 2, "role": "critic", "cost_usd": 0.12, "turns": 2, "input_tokens": 1, "output_tokens": 1}),
            json!({"event": "model_call", "attempt": 3, "role": "agent", "cost_usd_estimate": 0.05, "input_tokens": 100, "output_tokens": 10}),
        ];
        std::fs::write(
            &path,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .expect("write");
        let s = Ledger::spend_after(&path, 1);
        assert!((s.cost_usd - 0.17).abs() < 1e-12, "{s:?}");
        assert_eq!((s.turns, s.input_tokens, s.output_tokens), (3, 101, 11));
    }

    #[test]
    fn job_ids_sort_by_time() {
        let id = new_job_id();
        assert_eq!(id.len(), "20261130-112048123-abcd".len(), "{id}");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(new_job_id() > id, "ids sort by time");
    }
}
