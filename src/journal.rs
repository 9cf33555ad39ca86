//! The journal: one job's truth, `runs/<job-id>/ledger.jsonl`.
//!
//! Every fact about a job — a session finished and what it cost, a diff
//! taken, a gate's findings, a goal test's result, a verdict, the end of an
//! attempt, the ending, where the breaker parked the work, the commit, the
//! push and the pull request, the pinned git directory and the credentials
//! held out of the checkout, the daemon's final state — is one typed
//! [`Event`], appended and fsync'd
//! **before** anything acts on it. A job's state is a pure fold over its
//! events ([`Replay`]); resuming after `kill -9` is replaying the journal, and
//! what it records as finished is never run or billed again, whatever the
//! instant of the kill. `state.json` and `summary.json` are views written
//! after the journal.
//!
//! The same types write and read every line: there are no JSON literals and
//! nothing is read back by key. The per-call lines of the hot path (model
//! calls, tool calls) are written without an fsync — the next durable event
//! flushes them, since the file is append-only — so the guards are never
//! slowed down by the disk.
//!
//! A torn last line (the process died mid-write) is dropped on open, and the
//! file is truncated to its last whole line before anything is appended.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::agent::gateway::MeteredCall;
use crate::agent::session::Role;
use crate::critic::{CriticVerdict, Violation};
use crate::goal::GoalReport;
use crate::guard::caps::Spend;
use crate::guard::progress::DiffHistory;
use crate::guard::{ModelCall, Nudge, Record, Recorder, ToolCall};
use crate::judges::finding::Finding;
use crate::outcome::{Escalation, Reason, Status};
use crate::record::{AttemptRecord, Summary, Totals};
use crate::workspace::gitdir::Pinned;
use crate::workspace::Artefacts;

/// The journal's file name in a run directory.
pub const FILE: &str = "ledger.jsonl";

/// How many entries `failure.json` quotes.
pub const LAST_EVENTS: usize = 10;

/// Why a job (or an attempt) stops, with a sentence for humans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ending {
    pub reason: Reason,
    pub detail: String,
}

/// A session's end: its reconciled spend and how it went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFinished {
    pub attempt: u32,
    pub role: Role,
    pub session: u32,
    /// The authority for billing: the gateway's metered calls of this
    /// session (the `metered_call` events before this one), turns at least
    /// the CLI's count. Journals from before the gateway: reconciled with
    /// the CLI's result event.
    pub spend: Spend,
    /// What the stream's live estimate said.
    pub cost_usd_estimate: f64,
    /// What the CLI's result event said the session cost: a cross-check of
    /// the metered spend (a disagreement is logged and kept here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_cost_usd: Option<f64>,
    pub tool_calls: u64,
    pub wall_ms: u64,
    pub terminal_reason: Option<String>,
    pub is_error: Option<bool>,
    /// Set when loopd stopped the session.
    pub stopped: Option<Reason>,
    pub exit_code: Option<i32>,
    pub leftover_processes: usize,
    /// How the session failed, as the ending it implies (`None`: it completed).
    pub failure: Option<Ending>,
    /// The critic's verdict (critic sessions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<CriticVerdict>,
    /// The critic's rulings on red examiner tests (evidence mode), with
    /// what loopd checked of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rulings: Vec<crate::examiner::evidence::Ruling>,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "as", rename_all = "snake_case")]
pub enum AttemptEnd {
    Accepted,
    /// Rejected; the next attempt runs with this prompt.
    Rejected {
        next_prompt: String,
    },
    /// The job stops.
    Stopped {
        ending: Ending,
    },
}

/// Which deterministic gate produced a [`Event::GateChecked`]: its name
/// in the gate table (`crate::job::gate::GATES`). A name, not an enum, so
/// that a new gate is its own module and a line of the table — the journal
/// keeps whatever the table names, and a journal written by a loopd with
/// fewer gates reads the same.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Gate(std::borrow::Cow<'static, str>);

impl Gate {
    /// Protected paths and skip markers, on the diff.
    pub const DIFF: Gate = Gate::named("diff");
    /// The test count of a green goal test against the baseline.
    pub const TEST_COUNT: Gate = Gate::named("test_count");
    /// `.git/` (config, hooks, info) against its pin, after the agent session.
    pub const GIT_DIR: Gate = Gate::named("git_dir");
    /// `.git/` against its pin, after the goal test ran the agent's code.
    pub const GIT_DIR_AFTER_GOAL: Gate = Gate::named("git_dir_after_goal");
    /// Protected paths and skip markers again, on the tree the goal test
    /// left: the goal ran the agent's code, which the hook never sees.
    pub const DIFF_AFTER_GOAL: Gate = Gate::named("diff_after_goal");
    /// The pre-critic on the added lines of a green attempt, before the
    /// critic ([`crate::judges::precheck`]).
    pub const PRECHECK: Gate = Gate::named("precheck");
    /// The held-out goal steps on the judge-only tree, after the
    /// pre-critic and before the critic ([`crate::goal::held_out`]).
    pub const HELD_OUT: Gate = Gate::named("held_out");
    /// The whole suite on the judge-only tree against BASE_REF's, after
    /// the pre-critic ([`crate::goal::suite`]).
    pub const SUITE: Gate = Gate::named("suite");
    /// The examiner's tests on the judge-only tree, after the held-out
    /// steps ([`crate::examiner`]).
    pub const EXAMINER: Gate = Gate::named("examiner");
    /// Evidence mode: the examiner's tests red on the change that the
    /// critic did not rule wrong, after the critic
    /// ([`crate::examiner::evidence`]).
    pub const EXAMINER_EVIDENCE: Gate = Gate::named("examiner_evidence");

    pub const fn named(name: &'static str) -> Gate {
        Gate(std::borrow::Cow::Borrowed(name))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// The gate's name for humans (the live view's and the HTML report's
    /// one wording). A gate without a line here is shown by its name.
    pub fn label(&self) -> &str {
        match self.name() {
            "diff" => "diff gate",
            "test_count" => "test-count gate",
            "git_dir" => "`.git/` check",
            "git_dir_after_goal" => "`.git/` check after the goal test",
            "diff_after_goal" => "diff gate after the goal test",
            "precheck" => "pre-critic",
            "held_out" => "held-out tests",
            "examiner" => "examiner's tests",
            "examiner_evidence" => "examiner's tests after the critic",
            other => other,
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a job is judged by and what it may spend, recorded when it starts
/// (and again when `loopd resume` raises its caps): a later `loopd run
/// --job-id` of the same job must bring the same spec, or the job would be
/// judged by another goal, another rubric or other caps than it started
/// with — a continuation that grades itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub task: String,
    pub goal: Vec<SpecStep>,
    #[serde(default)]
    pub held_out: Vec<SpecHeldOut>,
    /// The whole suite step (`[judge] suite`, or inferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<SpecStep>,
    /// The spend caps (written flat: `budget_usd`, `max_turns`,
    /// `max_tokens`).
    #[serde(flatten)]
    pub limits: crate::guard::caps::Limits,
    pub max_attempts: u32,
    /// The three time limits, as durations are written (`1h`).
    pub timeout: String,
    pub attempt_timeout: String,
    pub idle_timeout: String,
    /// The sha256 of the configuration file's bytes (`None`: no file).
    pub config_sha256: Option<String>,
    /// The sha256 of the rubric's bytes (the embedded one's too).
    pub rubric_sha256: String,
}

/// A goal step as a [`Spec`] pins it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecStep {
    pub name: String,
    pub run: String,
    pub timeout: String,
    /// The test report it is read as (`None`: no count).
    pub report: Option<String>,
}

/// A held-out step as a [`Spec`] pins it: the step, where its files come
/// from, and the commit of its `ref`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecHeldOut {
    #[serde(flatten)]
    pub step: SpecStep,
    pub files: PathBuf,
    pub commit: Option<String>,
}

/// The examiner's tests of a job, as checked at BASE_REF: what judges
/// every attempt after. Never their source: it stays under `home`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Examination {
    pub model: String,
    /// How its tests judge (journals from before evidence mode: `gate`).
    #[serde(default = "gate_mode")]
    pub mode: crate::examiner::Mode,
    /// Where they are kept (outside every run directory).
    pub home: PathBuf,
    /// Their files under `loopd_examiner/` (none: the examiner wrote no
    /// test loopd can run, `why`).
    pub tests: Vec<String>,
    /// Test ids that did not run at BASE_REF (a collection or fixture
    /// error): dropped for the job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// Test ids red at BASE_REF: what the task asks for.
    pub failing_at_base: Vec<String>,
    /// Test ids green at BASE_REF: what must not break.
    pub passing_at_base: Vec<String>,
    /// Whether the examiner took its revision turn (told its tests' ids
    /// and outcomes at BASE_REF); the lists above are the revised set's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revised: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

fn gate_mode() -> crate::examiner::Mode {
    crate::examiner::Mode::Gate
}

impl Examination {
    /// The ids that judge an attempt.
    pub fn kept(&self) -> impl Iterator<Item = &String> {
        self.failing_at_base.iter().chain(&self.passing_at_base)
    }
}

impl Replay {
    /// The examiner's tests the critic ruled wrong on a quote loopd found:
    /// dropped for the rest of the job.
    pub fn ruled_wrong(&self) -> impl Iterator<Item = &crate::examiner::evidence::Ruling> {
        self.rulings.iter().map(|(_, r)| r).filter(|r| r.drops())
    }

    /// The examiner's tests that still judge: kept at BASE_REF, not ruled
    /// wrong since.
    pub fn examiner_judging(&self) -> Vec<&String> {
        let Some(e) = self.examined.as_ref() else {
            return Vec::new();
        };
        e.kept()
            .filter(|id| !self.ruled_wrong().any(|r| &r.test == *id))
            .collect()
    }
}

/// One field two [`Spec`]s disagree on, for people: its name, and what
/// each says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecChange {
    pub field: &'static str,
    pub was: String,
    pub now: String,
}

impl Spec {
    /// Every field of `now` that is not what `self` says, in the order
    /// the struct declares them (empty: the same spec).
    pub fn changes(&self, now: &Spec) -> Vec<SpecChange> {
        fn steps(s: &[SpecStep]) -> String {
            let shown: Vec<String> = s.iter().map(step).collect();
            format!("[{}]", shown.join(", "))
        }
        fn step(s: &SpecStep) -> String {
            format!(
                "`{}` runs `{}` (timeout {}, report {})",
                s.name,
                s.run,
                s.timeout,
                s.report.as_deref().unwrap_or("none")
            )
        }
        fn held(s: &[SpecHeldOut]) -> String {
            let shown: Vec<String> = s
                .iter()
                .map(|h| {
                    format!(
                        "{} from `{}`{}",
                        step(&h.step),
                        h.files.display(),
                        h.commit
                            .as_deref()
                            .map(|c| format!(" at {c}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            format!("[{}]", shown.join(", "))
        }
        fn digest(d: &Option<String>) -> String {
            d.clone().unwrap_or_else(|| "no file".into())
        }
        let mut out = Vec::new();
        let mut field = |field: &'static str, was: String, now: String| {
            if was != now {
                out.push(SpecChange { field, was, now });
            }
        };
        field(
            "task",
            format!("{:?}", self.task),
            format!("{:?}", now.task),
        );
        field("goal", steps(&self.goal), steps(&now.goal));
        field("held_out", held(&self.held_out), held(&now.held_out));
        let suite = |s: &Option<SpecStep>| s.as_ref().map_or("none".into(), step);
        field("suite", suite(&self.suite), suite(&now.suite));
        field(
            "budget_usd",
            self.limits.budget_usd.to_string(),
            now.limits.budget_usd.to_string(),
        );
        field(
            "max_turns",
            self.limits.max_turns.to_string(),
            now.limits.max_turns.to_string(),
        );
        field(
            "max_tokens",
            self.limits.max_tokens.to_string(),
            now.limits.max_tokens.to_string(),
        );
        field(
            "max_attempts",
            self.max_attempts.to_string(),
            now.max_attempts.to_string(),
        );
        field("timeout", self.timeout.clone(), now.timeout.clone());
        field(
            "attempt_timeout",
            self.attempt_timeout.clone(),
            now.attempt_timeout.clone(),
        );
        field(
            "idle_timeout",
            self.idle_timeout.clone(),
            now.idle_timeout.clone(),
        );
        field(
            "config (sha256)",
            digest(&self.config_sha256),
            digest(&now.config_sha256),
        );
        field(
            "rubric (sha256)",
            self.rubric_sha256.clone(),
            now.rubric_sha256.clone(),
        );
        out
    }
}

/// Every fact of a job, in the order it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The first line of every journal.
    JobStarted {
        job_id: String,
        base_ref: String,
        repo: PathBuf,
        task: String,
        /// What the job is judged by and may spend (journals of loopd
        /// before it was pinned have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<Box<Spec>>,
    },
    /// A later process took the job over (after a crash or a shutdown).
    Resumed {
        pid: u32,
    },
    /// Credentials found in the checkout's git config (entry names, never
    /// values) are held out of it for the job (`recovered`: a crashed job's
    /// hold was put back first).
    CredentialsHeld {
        removed: Vec<String>,
        recovered: bool,
    },
    /// The job let go of the credentials (`restored`: it was the last
    /// holder, and the config is as it was).
    CredentialsReleased {
        restored: bool,
    },
    /// `.git/` config, hooks and info as the job started: the copies are in
    /// the run directory's `git-dir/`, named by sha256.
    GitDirPinned {
        files: BTreeMap<String, Pinned>,
    },
    /// The goal test before attempt 1, every step; `artefacts`: untracked
    /// files it created (path → git blob id).
    Baseline {
        report: GoalReport,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        artefacts: BTreeMap<String, String>,
        /// Goal steps with a test-count preset whose baseline output had no
        /// summary loopd could read (step → why): their count gate is off
        /// for the whole job, and every view says so.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        test_count_off: BTreeMap<String, String>,
        /// The held-out steps at BASE_REF, on a judge-only tree: what their
        /// test counts are compared with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_out: Option<GoalReport>,
        /// The held-out steps' test counts at BASE_REF (BASE_REF's code
        /// printed them): what each later count is checked against.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        held_out_counts: BTreeMap<String, crate::judges::testcount::Counts>,
        /// With a hermetic judge: where each goal step's runner resolved
        /// at BASE_REF (what `runner_changed` compares with).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        origins: crate::runner::Origins,
        /// The whole suite at BASE_REF on a judge-only tree: the tests
        /// that passed there must pass after the change.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suite: Option<GoalReport>,
    },
    AttemptStarted {
        attempt: u32,
        prompt: String,
    },
    SessionStarted {
        attempt: u32,
        role: Role,
        session: u32,
    },
    /// The stream's live estimate of one model call.
    ModelCall(ModelCall),
    /// One model call as the metering gateway saw it on the wire: what the
    /// job is billed.
    MeteredCall(MeteredCall),
    ToolCall(ToolCall),
    /// The hook denied a repeated call with a nudge; a further repeat stops.
    Nudged(Nudge),
    SessionFinished(SessionFinished),
    /// A tool call the hook denied (journals of loopd before the gateway
    /// carried the hook's questions: read from its denials log).
    HookDenied {
        attempt: u32,
        finding: Finding,
    },
    /// A tool call the job's policy denied when the hook asked (through
    /// the gateway: nothing of the job's processes can erase it).
    ToolDenied(crate::agent::gateway::channel::Denial),
    /// A request the gateway refused: not an endpoint it forwards, a body
    /// it cannot meter, no valid session token.
    GatewayRefused(crate::agent::gateway::channel::Refused),
    /// The agent ran `loopd escalate` (received by the gateway); the judge
    /// turns it into `escalated` once every gate has run.
    EscalationRequested {
        attempt: u32,
        session: u32,
        test: String,
        reason: String,
    },
    /// The state of the tree after the agent session (`diff.patch`), and
    /// the tree object of the change as the judges take it (what a commit
    /// of this attempt holds; `None` when the change is too large to load).
    DiffTaken {
        attempt: u32,
        sha256: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tree: Option<String>,
    },
    /// Files the judges do not see (ignored, artefacts), new or changed
    /// since the baseline, set aside before the goal test: it runs on the
    /// judged change and what was there before the job
    /// ([`crate::workspace::outside`]). `moved` are under
    /// `attempt-N/set-aside/`; `removed` were on another file system.
    SetAside {
        attempt: u32,
        moved: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removed: Vec<String>,
    },
    /// A gate ran; an empty list means it passed.
    GateChecked {
        attempt: u32,
        gate: Gate,
        findings: Vec<Finding>,
    },
    /// Files of the change that would be protected but for the lead's
    /// `[protect] allow`: let through by the diff gate, never silently —
    /// the summary, the reports and the critic name them. Journaled before
    /// the diff gate's result, only when there are any.
    ProtectionLifted {
        attempt: u32,
        files: Vec<String>,
    },
    GoalRun {
        attempt: u32,
        report: GoalReport,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        artefacts: BTreeMap<String, String>,
        /// With a hermetic judge, when the change adds test files: the
        /// goal run of the tests that existed at BASE_REF alone, without
        /// them (`report` is the whole change's when that one was green).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        alone: Option<GoalReport>,
        /// With a hermetic judge: what the goal run changed in its own
        /// tree (the agent's code ran there), for the gate after the goal.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        written: Vec<crate::workspace::layers::Written>,
        /// With a hermetic judge: where each step's runner resolved in
        /// this attempt's runs (the alone run's steps with ` (alone)`).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        origins: crate::runner::Origins,
    },
    /// The held-out steps on this attempt's judge-only tree (`files`: how
    /// many held-out files it held). Only loopd reads this: the agent
    /// learns what `[guard] held_out_feedback` allows, through the gate.
    HeldOutRun {
        attempt: u32,
        report: GoalReport,
        files: usize,
        /// With a hermetic judge: how many paths of its tree the run
        /// changed that it did not make (the candidate's code wrote over
        /// the judge's tree; no name is kept, they may be held-out files').
        #[serde(default, skip_serializing_if = "is_zero")]
        overwrote: usize,
        /// Each step's outcome, failing ids and count verdict (the
        /// report's output is kept only under `full` feedback).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        outcomes: Vec<crate::goal::held_out::Outcome>,
    },
    /// The examiner's tests, written and checked at BASE_REF, once per job
    /// ([`crate::examiner`]).
    Examined(Examination),
    /// The examiner's tests on this attempt's judge-only tree: ids and
    /// outcomes only (their output would quote them).
    ExaminerRun {
        attempt: u32,
        /// `None`: the runner wrote no report, or one it does not stand
        /// by (`disowned`).
        results: Option<crate::goal::results::Results>,
        #[serde(default, skip_serializing_if = "is_zero")]
        written: usize,
        /// The report said every test passed while the runner failed, was
        /// killed or timed out: written by something else in its process.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        disowned: bool,
    },
    /// The whole suite on this attempt's judge-only tree, once the goal
    /// and the gates before it were green (`written`: how many paths of
    /// its tree the run changed).
    SuiteRun {
        attempt: u32,
        report: GoalReport,
        #[serde(default, skip_serializing_if = "is_zero")]
        written: usize,
    },
    /// What changed between attempt `from`'s tree and this attempt's
    /// (`interdiff.patch`), and which of those files no finding that
    /// rejected attempt `from` named (the scope check: a warning, not a gate).
    InterdiffTaken {
        attempt: u32,
        from: u32,
        files: Vec<String>,
        unnamed: Vec<String>,
    },
    AttemptEnded {
        record: AttemptRecord,
        end: AttemptEnd,
    },
    /// The decision: how the job ends (before the breaker runs).
    JobEnded {
        ending: Ending,
    },
    /// The daemon is shutting down: the job stays resumable where it is.
    Suspended,
    /// The breaker parked the work (or found nothing to park, or failed).
    Parked {
        stash_commit: Option<String>,
        error: Option<String>,
        /// Inside submodules (absent from journals written before loopd
        /// parked them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        submodules: Vec<crate::workspace::SubmoduleParked>,
    },
    /// The accepted change, committed on the job's branch (daemon) or on
    /// `loopd/autofix/<sha>` (`loopd ci`).
    Committed {
        commit: String,
    },
    /// `loopd ci` pushed `commit` to `branch` at `url` (the URL decided
    /// before the agent ran; no userinfo). `replaced`: the earlier loopd
    /// commit the push overwrote (a force-push with lease).
    Pushed {
        url: String,
        branch: String,
        commit: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaced: Option<String>,
    },
    /// The pull request of `loopd ci` (`opened_now`: this run created it;
    /// otherwise it existed — found, or GitHub answered "already exists").
    PullRequest {
        number: u64,
        url: String,
        opened_now: bool,
    },
    /// A lesson distilled at the job's end, and the audit's verdict on it:
    /// `refused` says why it may never reach a prompt.
    LessonAudited {
        key: String,
        text: String,
        refused: Option<String>,
    },
    /// The job's audited lessons are in the repository's memory.
    LessonsLearned {
        repo: String,
        keys: Vec<String>,
    },
    /// The daemon's final state, recorded before the spool file moves.
    Finalized {
        state: Status,
    },
    /// The agent ran `loopd escalate` and loopd verified it: the job ends
    /// `needs_human`, never accepted.
    Escalated {
        escalation: Escalation,
    },
    /// `loopd resume`: an ended job continues with these caps (`None`:
    /// unchanged) and the human's note as the next prompt's first paragraph;
    /// `restore` is the parked work to put back first.
    Reopened {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_usd: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_attempts: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        restore: Option<String>,
        /// The job's spec from here on, its caps raised (`None`: the
        /// spec stays as it was).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<Box<Spec>>,
    },
    /// The parked work is back in the working tree.
    Restored {
        stash_commit: String,
    },
    /// How the job's processes are confined from here on (on every start
    /// and resume: the kernel may differ after a reboot).
    Confined {
        sandbox: crate::sandbox::Confinement,
        /// The network its processes get (journals of loopd before the
        /// private network namespace have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        network: Option<crate::sandbox::Network>,
        /// Where the judge runs (journals of loopd before the hermetic
        /// judge have none: theirs shared the worktree).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        judge: Option<crate::sandbox::Judge>,
    },
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Event {
    /// The event's name, as in the file (`"session_finished"`), for crash
    /// points and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::JobStarted { .. } => "job_started",
            Event::Resumed { .. } => "resumed",
            Event::Confined { .. } => "confined",
            Event::CredentialsHeld { .. } => "credentials_held",
            Event::CredentialsReleased { .. } => "credentials_released",
            Event::GitDirPinned { .. } => "git_dir_pinned",
            Event::Baseline { .. } => "baseline",
            Event::AttemptStarted { .. } => "attempt_started",
            Event::SessionStarted { .. } => "session_started",
            Event::ModelCall(_) => "model_call",
            Event::MeteredCall(_) => "metered_call",
            Event::ToolCall(_) => "tool_call",
            Event::Nudged(_) => "nudged",
            Event::SessionFinished(_) => "session_finished",
            Event::HookDenied { .. } => "hook_denied",
            Event::ToolDenied(_) => "tool_denied",
            Event::GatewayRefused(_) => "gateway_refused",
            Event::EscalationRequested { .. } => "escalation_requested",
            Event::DiffTaken { .. } => "diff_taken",
            Event::SetAside { .. } => "set_aside",
            Event::GateChecked { .. } => "gate_checked",
            Event::ProtectionLifted { .. } => "protection_lifted",
            Event::GoalRun { .. } => "goal_run",
            Event::HeldOutRun { .. } => "held_out_run",
            Event::SuiteRun { .. } => "suite_run",
            Event::Examined(_) => "examined",
            Event::ExaminerRun { .. } => "examiner_run",
            Event::InterdiffTaken { .. } => "interdiff_taken",
            Event::AttemptEnded { .. } => "attempt_ended",
            Event::JobEnded { .. } => "job_ended",
            Event::Suspended => "suspended",
            Event::Parked { .. } => "parked",
            Event::Committed { .. } => "committed",
            Event::Pushed { .. } => "pushed",
            Event::PullRequest { .. } => "pull_request",
            Event::LessonAudited { .. } => "lesson_audited",
            Event::LessonsLearned { .. } => "lessons_learned",
            Event::Finalized { .. } => "finalized",
            Event::Escalated { .. } => "escalated",
            Event::Reopened { .. } => "reopened",
            Event::Restored { .. } => "restored",
        }
    }

    /// Facts something acts on are fsync'd; the per-call lines of the hot
    /// path are not (the next durable append flushes them).
    fn durable(&self) -> bool {
        !matches!(
            self,
            Event::ModelCall(_)
                | Event::MeteredCall(_)
                | Event::ToolCall(_)
                | Event::GatewayRefused(_)
        )
    }
}

/// One line of the journal: when, how far into the job, what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub ts: String,
    /// Milliseconds of the job's wall clock when this was appended, across
    /// restarts: the wall-clock cap keeps counting after a resume.
    pub ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot open the journal `{}`: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot append to the journal `{}`: {source}", path.display())]
    Append {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Parse a journal's text. A last line without its newline is torn and
/// dropped (`torn` says so); an unreadable line elsewhere is skipped with a
/// warning (a newer loopd's event, or damage) rather than losing the job.
pub fn parse(text: &str) -> (Vec<Entry>, bool) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (whole, torn) = match text.rfind('\n') {
        Some(i) => (&text[..=i], i + 1 < text.len()),
        None => ("", !text.is_empty()),
    };
    let mut entries = Vec::new();
    for (n, line) in whole.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Entry>(line) {
            Ok(e) => entries.push(e),
            Err(e) => {
                tracing::warn!(line = n + 1, error = %e, "skipping an unreadable journal line")
            }
        }
    }
    (entries, torn)
}

/// Read and fold a journal without opening it for writing (`loopd status`,
/// `loopd report`, the daemon's repair pass). A missing file is an empty
/// journal.
pub fn load(run_dir: &Path) -> Replay {
    let text = crate::util::read_text(&run_dir.join(FILE)).unwrap_or_default();
    let (entries, _) = parse(&text);
    Replay::fold(&entries)
}

/// The journal, open for appending, with the state it folds to.
pub struct Journal {
    path: PathBuf,
    file: std::fs::File,
    state: Replay,
    /// The job's wall clock: now minus what earlier processes used.
    clock: Instant,
    /// Told of every entry once it is written and folded (live progress).
    observer: Option<Observer>,
}

/// See [`Journal::observe`].
pub type Observer = Box<dyn FnMut(&Entry, &Replay) + Send>;

impl Journal {
    /// Open (creating it) for appending; a torn last line is cut off first.
    pub fn open(run_dir: &Path) -> Result<Journal, JournalError> {
        let path = run_dir.join(FILE);
        let open_err = |source| JournalError::Open {
            path: path.clone(),
            source,
        };
        let text = match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(open_err(e)),
        };
        let (entries, torn) = parse(&text);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(open_err)?;
        if torn {
            let keep = text.rfind('\n').map_or(0, |i| i + 1) as u64;
            tracing::warn!(path = %path.display(), "the journal's last line was torn by a crash; dropping it");
            file.set_len(keep).map_err(open_err)?;
        }
        let state = Replay::fold(&entries);
        let clock = Instant::now()
            .checked_sub(std::time::Duration::from_millis(state.wall_ms))
            .unwrap_or_else(Instant::now);
        Ok(Journal {
            path,
            file,
            state,
            clock,
            observer: None,
        })
    }

    /// Call `observer` with every entry appended from now on, after it is
    /// written and folded into the state (before its crash point).
    pub fn observe(&mut self, observer: Observer) {
        self.observer = Some(observer);
    }

    /// What the journal says so far.
    pub fn state(&self) -> &Replay {
        &self.state
    }

    /// When the job started, on this process's clock (earlier runs included).
    pub fn started(&self) -> Instant {
        self.clock
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `event` (fsync'd when it is a fact something acts on), fold it
    /// into the state, then pass the crash point `journal:<kind>`.
    pub fn append(&mut self, event: Event) -> Result<(), JournalError> {
        let entry = Entry {
            ts: crate::util::now_rfc3339(),
            ms: self.clock.elapsed().as_millis() as u64,
            event,
        };
        // The entry's line, without serde's slower flatten path: the event
        // is an internally tagged object, so its fields follow `ts` and `ms`
        // directly (read back through `Entry`, flatten and all).
        let event = serde_json::to_string(&entry.event).expect("a journal event serializes");
        let ts = serde_json::to_string(&entry.ts).expect("a timestamp serializes");
        let line = format!("{{\"ts\":{ts},\"ms\":{},{}\n", entry.ms, &event[1..]);
        let durable = entry.event.durable();
        let result = self.file.write_all(line.as_bytes()).and_then(|()| {
            if durable {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        result.map_err(|source| JournalError::Append {
            path: self.path.clone(),
            source,
        })?;
        let kind = entry.event.kind();
        self.state.apply(&entry);
        if let Some(observe) = self.observer.as_mut() {
            observe(&entry, &self.state);
        }
        if durable {
            crate::util::crash_point(&format!("journal:{kind}"));
        }
        Ok(())
    }
}

/// The guards' per-call records go to the journal; a failed write is logged
/// (the hot path never stops a session for it; the next durable append
/// reports the disk's state).
impl Recorder for Journal {
    fn record(&mut self, record: Record) {
        if let Err(e) = self.append(Event::from(record)) {
            tracing::warn!(error = %e, "cannot journal a model or tool call");
        }
    }
}

/// The one table from a session's records to the journal's events.
impl From<Record> for Event {
    fn from(record: Record) -> Event {
        match record {
            Record::ModelCall(c) => Event::ModelCall(c),
            Record::ToolCall(c) => Event::ToolCall(c),
            Record::Nudged(n) => Event::Nudged(n),
            Record::Metered(c) => Event::MeteredCall(c),
            Record::Refused(r) => Event::GatewayRefused(r),
            Record::Denied(d) => Event::ToolDenied(d),
            Record::Escalated {
                attempt,
                session,
                request,
            } => Event::EscalationRequested {
                attempt,
                session,
                test: request.test,
                reason: request.reason,
            },
        }
    }
}

/// The attempt in progress: what of it the journal says is done.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Current {
    pub attempt: u32,
    pub prompt: String,
    pub agent: Option<SessionFinished>,
    /// The diff's sha256 and what the progress guard said of it.
    pub diff: Option<(String, Option<Reason>)>,
    pub denied: Vec<Finding>,
    pub goal: Option<GoalReport>,
    /// Each gate that ran, in the order it ran, with its findings (none:
    /// it passed).
    pub gates: Vec<(Gate, Vec<Finding>)>,
    pub held_out: Option<GoalReport>,
    /// How many paths of its tree the held-out run changed (see
    /// [`Event::HeldOutRun`]).
    pub held_out_overwrote: usize,
    /// What the hermetic goal run changed of its tree.
    pub goal_written: Vec<crate::workspace::layers::Written>,
    /// Where the runners of this attempt's goal runs resolved.
    pub goal_origins: crate::runner::Origins,
    /// The held-out steps' outcomes of this attempt.
    pub held_out_outcomes: Vec<crate::goal::held_out::Outcome>,
    /// The whole suite's run of this attempt, and how many paths of its
    /// tree it changed.
    pub suite: Option<(GoalReport, usize)>,
    /// The examiner's tests on this attempt: their results (`None`: no
    /// report), and how many paths of their tree the run changed.
    pub examiner: Option<(Option<crate::goal::results::Results>, usize)>,
    /// The interdiff's files and the scope check's unnamed files.
    pub interdiff: Option<(Vec<String>, Vec<String>)>,
    /// What `[protect] allow` let through (see [`Event::ProtectionLifted`]).
    pub lifted: Vec<String>,
    pub critic: Option<SessionFinished>,
    /// The agent's escalation (test, reason), as the gateway received it.
    pub escalation_request: Option<(String, String)>,
    /// The judged tree (see [`Event::DiffTaken`]).
    pub tree: Option<String>,
}

impl Current {
    /// A gate's findings, once it ran.
    pub fn gate(&self, gate: &Gate) -> Option<&Vec<Finding>> {
        self.gates.iter().find(|(g, _)| g == gate).map(|(_, f)| f)
    }

    /// What rejects this attempt: gate and pre-critic findings, denials,
    /// critic violations, a red goal step.
    fn rejection(&self) -> Rejection {
        Rejection {
            attempt: self.attempt,
            findings: self
                .gates
                .iter()
                .flat_map(|(_, f)| f)
                .chain(&self.denied)
                .cloned()
                .collect(),
            violations: self
                .critic
                .iter()
                .filter_map(|c| c.verdict.as_ref())
                .flat_map(|v| v.violations())
                .cloned()
                .collect(),
            goal_failed: self
                .goal
                .as_ref()
                .and_then(|g| g.failed_step().map(|s| s.name.clone())),
        }
    }
}

/// Why an attempt was rejected: what the next critic is told, what the
/// scope check compares with, what lessons are distilled from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rejection {
    pub attempt: u32,
    /// Gate and pre-critic findings and the hook's denials.
    pub findings: Vec<Finding>,
    pub violations: Vec<Violation>,
    /// The goal step that failed, when the goal test rejected it.
    pub goal_failed: Option<String>,
}

impl Rejection {
    /// Each finding as the next prompt carried it.
    pub fn lines(&self) -> Vec<String> {
        self.findings
            .iter()
            .map(Finding::render)
            .chain(self.violations.iter().map(Violation::render))
            .collect()
    }

    /// The repository paths the findings named.
    pub fn named(&self) -> Vec<String> {
        self.findings
            .iter()
            .map(|f| f.path.clone())
            .chain(self.violations.iter().map(|v| v.path().to_owned()))
            .collect()
    }
}

/// Where a job is in its life, derived from its journal.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Nothing recorded: prepare and run the baseline.
    Start,
    /// The baseline is known; attempt `next` starts next.
    Ready { next: u32 },
    /// Attempt `n` is under way (its agent session may be done).
    Attempt { n: u32 },
    /// The decision is recorded; the ending steps (park, reports, commit,
    /// final state) remain.
    Ending(Ending),
    /// The daemon recorded a final state: nothing remains.
    Finalized(Status),
}

/// A job's state: the fold of its journal.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub job_id: Option<String>,
    /// How the job's processes are confined (the latest start's word).
    pub sandbox: Option<crate::sandbox::Confinement>,
    /// The network they get (the latest start's word).
    pub network: Option<crate::sandbox::Network>,
    /// Where the judge runs (the latest start's word).
    pub judge: Option<crate::sandbox::Judge>,
    /// When the job started (the first entry's time).
    pub started_at: Option<String>,
    pub repo: Option<PathBuf>,
    pub task: Option<String>,
    /// The job's spec as it started, or as `loopd resume` last raised its
    /// caps (`None`: a journal of a loopd before specs were pinned).
    pub spec: Option<Spec>,
    pub base_ref: Option<String>,
    pub baseline: Option<GoalReport>,
    /// Steps whose test-count gate is off (see [`Event::Baseline`]).
    pub test_count_off: BTreeMap<String, String>,
    /// The held-out steps at BASE_REF (see [`Event::Baseline`]).
    pub held_out_baseline: Option<GoalReport>,
    /// The whole suite at BASE_REF (see [`Event::Baseline`]).
    pub suite_baseline: Option<GoalReport>,
    /// The examiner's tests, once written and checked.
    pub examined: Option<Examination>,
    /// What the examiner's sessions spent (within [`Replay::spend`]).
    pub examiner_spend: Spend,
    /// The critic's rulings on red examiner tests, with the attempt each
    /// was given in (evidence mode).
    pub rulings: Vec<(u32, crate::examiner::evidence::Ruling)>,
    /// The held-out steps' counts at BASE_REF.
    pub held_out_counts: BTreeMap<String, crate::judges::testcount::Counts>,
    /// Where each goal step's runner resolved at BASE_REF.
    pub baseline_origins: crate::runner::Origins,
    /// Ended attempts, in order.
    pub attempts: Vec<AttemptRecord>,
    /// How the last ended attempt ended.
    pub last_end: Option<AttemptEnd>,
    pub current: Option<Current>,
    /// Why each rejected attempt was rejected, in order.
    pub rejections: Vec<Rejection>,
    /// Reconciled spend of finished sessions, plus the live estimates of
    /// sessions that never finished (a kill mid-session still counts).
    pub spent: Spend,
    /// Sessions started so far (the next session's number).
    pub sessions: u32,
    /// Model-call estimates of sessions not (yet) finished, by session.
    unfinished: std::collections::BTreeMap<u32, Spend>,
    /// Metered calls of sessions not (yet) finished, by session. A
    /// session's `session_finished` bills them (its `spend` is their sum);
    /// a call metered after its session finished is billed on its own.
    metered: std::collections::BTreeMap<u32, Spend>,
    pub diffs: DiffHistory,
    /// Requests the gateway refused (journaled ones).
    pub gateway_refused: usize,
    pub wall_ms: u64,
    pub ending: Option<Ending>,
    /// Suspended and not resumed since.
    pub suspended: bool,
    /// Where the breaker parked the work, once it did.
    pub parked: Option<crate::record::Parked>,
    pub committed: Option<String>,
    /// The tree of the accepted attempt's change, as the judges took it:
    /// what loopd commits (never the working tree as it is later).
    pub accepted_tree: Option<String>,
    /// The pinned `.git/` files, once pinned.
    pub git_dir_pin: Option<BTreeMap<String, Pinned>>,
    /// Credentials are held out of the checkout and not released yet.
    pub credentials_held: bool,
    /// Untracked files the goal runs created: not the agent's change.
    pub artefacts: Artefacts,
    /// Where `loopd ci` pushed: (branch, commit).
    pub pushed: Option<(String, String)>,
    /// The pull request of `loopd ci`: (number, url).
    pub pull_request: Option<(u64, String)>,
    /// The job's lessons are merged into the repository's memory.
    pub lessons_learned: bool,
    pub finalized: Option<Status>,
    /// The agent's escalation, once verified.
    pub escalation: Option<Escalation>,
    /// The latest goal test report (the baseline or an attempt's).
    pub last_goal: Option<GoalReport>,
    /// A resume's note, until the attempt that carries it starts.
    pub note: Option<String>,
    /// A resume's parked work, until it is back in the tree.
    pub restore: Option<String>,
    /// The last entries, for `failure.json`.
    pub recent: VecDeque<Entry>,
    /// Every entry folded.
    pub entries: usize,
}

impl Replay {
    pub fn fold(entries: &[Entry]) -> Replay {
        let mut r = Replay::default();
        for e in entries {
            r.apply(e);
        }
        r
    }

    /// Total spend: finished sessions, plus for each unfinished one the
    /// larger of its stream estimate and its metered calls (never both: they
    /// read the same calls).
    pub fn spend(&self) -> Spend {
        self.unfinished.iter().fold(self.spent, |acc, (n, est)| {
            acc.plus(&self.metered.get(n).map_or(*est, |m| m.max(est)))
        })
    }

    /// Total spend without the unfinished session `n` (whose own reading
    /// the caller holds).
    pub fn spend_without(&self, n: u32) -> Spend {
        self.unfinished
            .iter()
            .filter(|(s, _)| **s != n)
            .fold(self.spent, |acc, (s, est)| {
                acc.plus(&self.metered.get(s).map_or(*est, |m| m.max(est)))
            })
    }

    /// The metered calls of session `n` so far, while it is unfinished.
    pub fn metered_of(&self, n: u32) -> Spend {
        self.metered.get(&n).copied().unwrap_or_default()
    }

    /// Why the last ended attempt was rejected (`None` when it was not).
    pub fn last_rejection(&self) -> Option<&Rejection> {
        let last = self.attempts.last()?;
        match self.last_end {
            Some(AttemptEnd::Rejected { .. }) => {
                self.rejections.last().filter(|r| r.attempt == last.n)
            }
            _ => None,
        }
    }

    /// The next attempt's number and prompt (`None`: the task itself).
    pub fn next_attempt(&self) -> (u32, Option<&str>) {
        let n = self.attempts.last().map_or(1, |a| a.n + 1);
        let prompt = match &self.last_end {
            Some(AttemptEnd::Rejected { next_prompt }) => Some(next_prompt.as_str()),
            _ => None,
        };
        (n, prompt)
    }

    /// The ending the journal implies: recorded, or decided by the last
    /// attempt's end (a kill between the two).
    pub fn decided(&self) -> Option<Ending> {
        if let Some(e) = &self.ending {
            return Some(e.clone());
        }
        match &self.last_end {
            Some(AttemptEnd::Accepted) if self.current.is_none() => Some(Ending {
                reason: Reason::Accepted,
                detail: format!(
                    "attempt {} was accepted: the goal test is green and the critic passed the diff",
                    self.attempts.last().map_or(0, |a| a.n)
                ),
            }),
            Some(AttemptEnd::Stopped { ending }) if self.current.is_none() => {
                Some(ending.clone())
            }
            _ => None,
        }
    }

    pub fn phase(&self) -> Phase {
        if let Some(s) = self.finalized {
            return Phase::Finalized(s);
        }
        if let Some(e) = self.decided() {
            return Phase::Ending(e);
        }
        if let Some(c) = &self.current {
            return Phase::Attempt { n: c.attempt };
        }
        match self.baseline {
            Some(_) => Phase::Ready {
                next: self.next_attempt().0,
            },
            None => Phase::Start,
        }
    }

    /// Fold one entry in.
    pub fn apply(&mut self, entry: &Entry) {
        self.wall_ms = self.wall_ms.max(entry.ms);
        self.entries += 1;
        if !matches!(
            entry.event,
            Event::ModelCall(_)
                | Event::MeteredCall(_)
                | Event::ToolCall(_)
                | Event::GatewayRefused(_)
        ) {
            self.recent.push_back(entry.clone());
            if self.recent.len() > LAST_EVENTS {
                self.recent.pop_front();
            }
        }
        fn current(r: &mut Replay, n: u32) -> Option<&mut Current> {
            r.current.as_mut().filter(|c| c.attempt == n)
        }
        match &entry.event {
            Event::JobStarted {
                job_id,
                base_ref,
                repo,
                task,
                spec,
            } => {
                self.spec = spec.as_deref().cloned();
                self.repo = Some(repo.clone());
                self.task = Some(task.clone());
                self.job_id = Some(job_id.clone());
                self.base_ref = Some(base_ref.clone());
                self.started_at = Some(entry.ts.clone());
            }
            Event::Resumed { .. } => self.suspended = false,
            Event::Confined {
                sandbox,
                network,
                judge,
            } => {
                self.sandbox = Some(*sandbox);
                self.network = *network;
                self.judge = *judge;
            }
            Event::CredentialsHeld { .. } => self.credentials_held = true,
            Event::CredentialsReleased { .. } => self.credentials_held = false,
            Event::GitDirPinned { files } => self.git_dir_pin = Some(files.clone()),
            Event::Baseline {
                report,
                artefacts,
                test_count_off,
                held_out,
                held_out_counts,
                origins,
                suite,
            } => {
                self.suite_baseline = suite.clone();
                self.held_out_baseline = held_out.clone();
                self.baseline_origins = origins.clone();
                self.held_out_counts = held_out_counts.clone();
                self.baseline = Some(report.clone());
                self.test_count_off = test_count_off.clone();
                self.last_goal = Some(report.clone());
                self.artefacts.from_goal.extend(artefacts.clone());
            }
            Event::AttemptStarted { attempt, prompt } => {
                self.note = None;
                self.current = Some(Current {
                    attempt: *attempt,
                    prompt: prompt.clone(),
                    ..Current::default()
                })
            }
            Event::SessionStarted { session, .. } => {
                self.sessions = self.sessions.max(session + 1);
                self.unfinished.insert(*session, Spend::default());
            }
            Event::ModelCall(c) => {
                if let Some(s) = self.unfinished.get_mut(&c.session) {
                    s.add(&Spend {
                        cost_usd: c.cost_usd_estimate,
                        turns: 1,
                        input_tokens: c.input_tokens,
                        output_tokens: c.output_tokens,
                    });
                }
            }
            Event::MeteredCall(c) => {
                let call = Spend::of_call(c);
                if self.unfinished.contains_key(&c.session) {
                    self.metered.entry(c.session).or_default().add(&call);
                } else {
                    self.spent.add(&call);
                }
            }
            Event::ToolCall(_) | Event::Nudged(_) => {}
            Event::SessionFinished(f) => {
                self.unfinished.remove(&f.session);
                self.metered.remove(&f.session);
                self.spent.add(&f.spend);
                if f.role == Role::Examiner {
                    self.examiner_spend.add(&f.spend);
                }
                // A session cut short by a signal did not finish its work:
                // billed, but a resumed job runs it again.
                let cut_short = f.stopped == Some(Reason::Signal);
                if f.role == Role::Critic && !cut_short {
                    self.rulings
                        .extend(f.rulings.iter().map(|r| (f.attempt, r.clone())));
                }
                if let Some(c) = current(self, f.attempt).filter(|_| !cut_short) {
                    match f.role {
                        Role::Agent => c.agent = Some(f.clone()),
                        Role::Critic => c.critic = Some(f.clone()),
                        // The job's, not an attempt's: [`Replay::examiner`].
                        Role::Examiner => {}
                    }
                }
            }
            Event::HookDenied { attempt, finding } => {
                if let Some(c) = current(self, *attempt) {
                    c.denied.push(finding.clone());
                }
            }
            Event::ToolDenied(d) => {
                let root = self
                    .repo
                    .as_ref()
                    .map(|r| format!("{}/", r.display()))
                    .unwrap_or_default();
                if let Some(c) = current(self, d.attempt) {
                    c.denied.push(crate::judges::tamper::denial_finding(
                        &d.tool, &d.input, &d.reason, &root,
                    ));
                }
            }
            Event::GatewayRefused(_) => self.gateway_refused += 1,
            Event::SetAside { .. } => {}
            Event::EscalationRequested {
                attempt,
                test,
                reason,
                ..
            } => {
                if let Some(c) = current(self, *attempt) {
                    c.escalation_request
                        .get_or_insert((test.clone(), reason.clone()));
                }
            }
            Event::DiffTaken {
                attempt,
                sha256,
                tree,
            } => {
                let verdict = self.diffs.observe(sha256);
                if let Some(c) = current(self, *attempt) {
                    c.diff = Some((sha256.clone(), verdict));
                    c.tree = tree.clone();
                }
            }
            Event::GateChecked {
                attempt,
                gate,
                findings,
            } => {
                // A goal re-run after a crash checks `.git/` again: what
                // either check found stands.
                if let Some(c) = current(self, *attempt) {
                    match c.gates.iter_mut().find(|(g, _)| g == gate) {
                        Some((_, found)) => found.extend(findings.iter().cloned()),
                        None => c.gates.push((gate.clone(), findings.clone())),
                    }
                }
            }
            Event::ProtectionLifted { attempt, files } => {
                if let Some(c) = current(self, *attempt) {
                    c.lifted = files.clone();
                }
            }
            Event::GoalRun {
                attempt,
                report,
                artefacts,
                written,
                origins,
                ..
            } => {
                self.artefacts.from_goal.extend(artefacts.clone());
                self.last_goal = Some(report.clone());
                if let Some(c) = current(self, *attempt) {
                    c.goal = Some(report.clone());
                    c.goal_written = written.clone();
                    c.goal_origins = origins.clone();
                }
            }
            Event::HeldOutRun {
                attempt,
                report,
                overwrote,
                outcomes,
                ..
            } => {
                if let Some(c) = current(self, *attempt) {
                    c.held_out = Some(report.clone());
                    c.held_out_overwrote = *overwrote;
                    c.held_out_outcomes = outcomes.clone();
                }
            }
            Event::Examined(e) => self.examined = Some(e.clone()),
            Event::ExaminerRun {
                attempt,
                results,
                written,
                ..
            } => {
                if let Some(c) = current(self, *attempt) {
                    c.examiner = Some((results.clone(), *written));
                }
            }
            Event::SuiteRun {
                attempt,
                report,
                written,
            } => {
                if let Some(c) = current(self, *attempt) {
                    c.suite = Some((report.clone(), *written));
                }
            }
            Event::InterdiffTaken {
                attempt,
                files,
                unnamed,
                ..
            } => {
                if let Some(c) = current(self, *attempt) {
                    c.interdiff = Some((files.clone(), unnamed.clone()));
                }
            }
            Event::AttemptEnded { record, end } => {
                let ended = self.current.take_if(|c| c.attempt == record.n);
                match (end, ended) {
                    (AttemptEnd::Rejected { .. }, Some(c)) => self.rejections.push(c.rejection()),
                    (AttemptEnd::Accepted, Some(c)) => self.accepted_tree = c.tree,
                    _ => {}
                }
                self.attempts.push(record.clone());
                self.last_end = Some(end.clone());
            }
            Event::JobEnded { ending } => {
                self.ending = Some(ending.clone());
                self.current = None;
            }
            Event::Suspended => self.suspended = true,
            Event::Parked {
                stash_commit,
                error,
                submodules,
            } => {
                self.parked = Some(crate::record::Parked {
                    stash_commit: stash_commit.clone(),
                    error: error.clone(),
                    submodules: submodules.clone(),
                })
            }
            Event::Committed { commit } => self.committed = Some(commit.clone()),
            Event::Pushed { branch, commit, .. } => {
                self.pushed = Some((branch.clone(), commit.clone()))
            }
            Event::PullRequest { number, url, .. } => {
                self.pull_request = Some((*number, url.clone()))
            }
            Event::LessonAudited { .. } => {}
            Event::LessonsLearned { .. } => self.lessons_learned = true,
            Event::Finalized { state } => self.finalized = Some(*state),
            Event::Escalated { escalation } => self.escalation = Some(escalation.clone()),
            Event::Reopened {
                note,
                restore,
                spec,
                ..
            } => {
                if let Some(spec) = spec {
                    self.spec = Some((**spec).clone());
                }
                // The ending is undone: the job continues after its last
                // ended attempt, and parks again if it ends without
                // acceptance.
                self.ending = None;
                self.finalized = None;
                self.parked = None;
                self.suspended = false;
                self.current = None;
                if matches!(self.last_end, Some(AttemptEnd::Stopped { .. })) {
                    self.last_end = None;
                }
                self.note = note.clone();
                self.restore = restore.clone();
            }
            Event::Restored { .. } => self.restore = None,
        }
    }

    /// The summary (a view) of a job that ended with `ending`.
    pub fn summary(
        &self,
        ending: &Ending,
        run_dir: &Path,
        failure_report: Option<PathBuf>,
        wall_ms: u64,
    ) -> Summary {
        Summary {
            job_id: self.job_id.clone().unwrap_or_default(),
            repo: self.repo.clone().unwrap_or_default(),
            base_ref: self.base_ref.clone().unwrap_or_default(),
            task: self.task.clone().unwrap_or_default(),
            outcome: ending.reason.outcome(),
            reason: ending.reason,
            detail: ending.detail.clone(),
            attempts: self.attempts.clone(),
            escalation: self
                .escalation
                .clone()
                .filter(|_| ending.reason == Reason::Escalated),
            totals: Totals::from_spend(&self.spend(), wall_ms.max(self.wall_ms)),
            stash_commit: self.parked.as_ref().and_then(|p| p.stash_commit.clone()),
            failure_report,
            sandbox: self.sandbox,
            network: self.network,
            judge: self.judge,
            test_count_off: self.test_count_off.clone(),
            suite: self.suite_summary(),
            examiner: self
                .examined
                .as_ref()
                .map(|e| crate::record::ExaminerSummary {
                    model: e.model.clone(),
                    mode: e.mode.as_str().to_owned(),
                    ruled_wrong: self
                        .rulings
                        .iter()
                        .filter(|(_, r)| r.drops())
                        .map(|(attempt, r)| crate::record::RuledWrong {
                            test: r.test.clone(),
                            attempt: *attempt,
                            quote: r.quote.clone(),
                            found_in: r.found_in.clone().unwrap_or_default(),
                        })
                        .collect(),
                    tests: e.tests.len(),
                    failing_at_base: e.failing_at_base.len(),
                    passing_at_base: e.passing_at_base.len(),
                    dropped: e.dropped.len(),
                    revised: e.revised,
                    cost_usd: crate::record::round_usd(self.examiner_spend.cost_usd),
                    input_tokens: self.examiner_spend.input_tokens,
                    output_tokens: self.examiner_spend.output_tokens,
                    why: e.why.clone(),
                }),
            run_dir: run_dir.to_path_buf(),
            started_at: self.started_at.clone().unwrap_or_default(),
            finished_at: crate::util::now_rfc3339(),
        }
    }

    /// The whole suite's line of the summary: its baseline run and what
    /// every attempt's run cost.
    fn suite_summary(&self) -> Option<crate::record::SuiteSummary> {
        let base = self.suite_baseline.as_ref()?.steps.first()?;
        let runs: u64 = self
            .attempts
            .iter()
            .filter_map(|a| a.suite.as_ref().map(|s| s.ms))
            .sum();
        Some(crate::record::SuiteSummary {
            command: base.command.clone(),
            passing_at_base: base.results.as_ref().map(|r| {
                r.values()
                    .filter(|v| **v == crate::goal::results::Verdict::Passed)
                    .count()
            }),
            baseline_ms: base.duration_ms,
            total_ms: base.duration_ms + runs,
        })
    }

    /// The last entries, as JSON, for `failure.json`.
    pub fn last_events(&self) -> Vec<serde_json::Value> {
        self.recent
            .iter()
            .map(|e| serde_json::to_value(e).expect("a journal entry serializes"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::StepResult;

    fn spec() -> Spec {
        Spec {
            task: "t".into(),
            goal: vec![SpecStep {
                name: "pytest".into(),
                run: "python3 -m pytest -q".into(),
                timeout: "10m".into(),
                report: Some("pytest".into()),
            }],
            held_out: Vec::new(),
            suite: None,
            limits: crate::guard::caps::Limits {
                budget_usd: 2.0,
                max_turns: 200,
                max_tokens: 5_000_000,
            },
            max_attempts: 5,
            timeout: "1h".into(),
            attempt_timeout: "20m".into(),
            idle_timeout: "5m".into(),
            config_sha256: Some("c1".into()),
            rubric_sha256: "r1".into(),
        }
    }

    #[test]
    fn a_journal_without_a_spec_loads_and_a_raised_spec_replaces_the_first() {
        // A first line as a loopd before pinned specs wrote it.
        let old = r#"{"ts":"t","ms":0,"event":"job_started","job_id":"j","base_ref":"b","repo":"/r","task":"t"}"#;
        let (entries, _) = parse(&format!("{old}\n"));
        assert_eq!(entries.len(), 1, "the old line parses");
        assert_eq!(Replay::fold(&entries).spec, None);

        let mut raised = spec();
        raised.limits.budget_usd = 5.0;
        let ev = vec![
            Event::JobStarted {
                job_id: "j".into(),
                base_ref: "b".into(),
                repo: "/r".into(),
                task: "t".into(),
                spec: Some(Box::new(spec())),
            },
            Event::Reopened {
                budget_usd: Some(5.0),
                max_attempts: None,
                timeout: None,
                note: None,
                restore: None,
                spec: Some(Box::new(raised.clone())),
            },
        ];
        let r = Replay::fold(&parse(&lines(ev[..1].to_vec())).0);
        assert_eq!(r.spec, Some(spec()));
        let r = Replay::fold(&parse(&lines(ev)).0);
        assert_eq!(r.spec, Some(raised));
    }

    #[test]
    fn spec_changes_name_each_field_that_differs_and_nothing_else() {
        let was = spec();
        assert!(was.changes(&was.clone()).is_empty());
        let mut now = spec();
        now.goal[0].run = "true".into();
        now.limits.budget_usd = 50.0;
        now.rubric_sha256 = "r2".into();
        now.config_sha256 = None;
        let changes = was.changes(&now);
        let fields: Vec<&str> = changes.iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            ["goal", "budget_usd", "config (sha256)", "rubric (sha256)"]
        );
        assert_eq!(
            (changes[1].was.as_str(), changes[1].now.as_str()),
            ("2", "50")
        );
        assert!(changes[0].now.contains("runs `true`"), "{:?}", changes[0]);
        assert_eq!(changes[2].now, "no file");
    }

    fn goal(passed: bool) -> GoalReport {
        GoalReport {
            steps: vec![StepResult {
                name: "pytest".into(),
                command: "python3 -m pytest -q".into(),
                exit_code: Some(if passed { 0 } else { 1 }),
                timed_out: false,
                passed,
                output: "1 failed, 2 passed".into(),
                duration_ms: 5,
                leftovers: 0,
                results: None,
                read: None,
            }],
        }
    }

    fn spend(usd: f64) -> Spend {
        Spend {
            cost_usd: usd,
            turns: 2,
            input_tokens: 100,
            output_tokens: 10,
        }
    }

    fn finished(attempt: u32, role: Role, session: u32, usd: f64) -> Event {
        Event::SessionFinished(SessionFinished {
            attempt,
            role,
            session,
            spend: spend(usd),
            cost_usd_estimate: usd,
            cli_cost_usd: None,
            tool_calls: 1,
            wall_ms: 10,
            terminal_reason: None,
            is_error: Some(false),
            stopped: None,
            exit_code: Some(0),
            leftover_processes: 0,
            failure: None,
            verdict: (role == Role::Critic).then_some(CriticVerdict::Pass),
            rulings: Vec::new(),
        })
    }

    fn record(n: u32) -> AttemptRecord {
        AttemptRecord {
            n,
            goal_passed: true,
            held_out_passed: None,
            suite: None,
            examiner_passed: None,
            failed_step: None,
            critic: "FAIL".into(),
            critic_note: None,
            violations: vec![],
            gate_findings: vec![],
            rejected_by: None,
            interdiff_files: vec![],
            scope_warnings: vec![],
            allowed_changes: vec![],
            denied_tool_calls: 0,
            cost_usd: 0.0,
            turns: 0,
            input_tokens: 0,
            output_tokens: 0,
            diff_sha256: "d1".into(),
            stopped: None,
            prompt_file: "p".into(),
        }
    }

    fn lines(events: Vec<Event>) -> String {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| {
                let e = Entry {
                    ts: "t".into(),
                    ms: i as u64 * 100,
                    event,
                };
                format!("{}\n", serde_json::to_string(&e).expect("json"))
            })
            .collect()
    }

    fn start() -> Vec<Event> {
        vec![
            Event::JobStarted {
                job_id: "j".into(),
                base_ref: "b".into(),
                repo: "/r".into(),
                task: "t".into(),
                spec: None,
            },
            Event::Baseline {
                report: goal(false),
                artefacts: BTreeMap::new(),
                test_count_off: BTreeMap::new(),
                held_out: None,
                held_out_counts: BTreeMap::new(),
                origins: BTreeMap::new(),
                suite: None,
            },
            Event::AttemptStarted {
                attempt: 1,
                prompt: "t".into(),
            },
            Event::SessionStarted {
                attempt: 1,
                role: Role::Agent,
                session: 0,
            },
        ]
    }

    #[test]
    fn a_finished_agent_session_is_done_and_billed_once() {
        let mut ev = start();
        ev.push(finished(1, Role::Agent, 0, 0.5));
        let (entries, torn) = parse(&lines(ev));
        assert!(!torn);
        let r = Replay::fold(&entries);
        assert_eq!(r.phase(), Phase::Attempt { n: 1 });
        let c = r.current.as_ref().expect("attempt 1 in progress");
        assert!(c.agent.is_some() && c.goal.is_none() && c.critic.is_none());
        assert_eq!(r.spend().cost_usd, 0.5);
        assert_eq!(r.sessions, 1);
        assert_eq!(r.wall_ms, 400);
    }

    #[test]
    fn an_unfinished_session_counts_its_estimates() {
        let mut ev = start();
        for _ in 0..2 {
            ev.push(Event::ModelCall(ModelCall {
                attempt: 1,
                role: Role::Agent,
                session: 0,
                message_id: "m".into(),
                model: "haiku".into(),
                input_tokens: 100,
                output_tokens: 20,
                cost_usd_estimate: 0.25,
                latency_ms: 1,
            }));
        }
        let r = Replay::fold(&parse(&lines(ev)).0);
        let s = r.spend();
        assert_eq!((s.cost_usd, s.turns, s.input_tokens), (0.5, 2, 200));
        assert!(r.current.as_ref().expect("current").agent.is_none());
    }

    fn metered(session: u32, usd: f64, cache_read: u64) -> Event {
        Event::MeteredCall(MeteredCall {
            attempt: 1,
            role: Role::Agent,
            session,
            model: "claude-haiku-5-5".into(),
            message_id: "m".into(),
            status: 200,
            input_tokens: 100,
            output_tokens: 20,
            cache_creation_input_tokens: 10,
            cache_read_input_tokens: cache_read,
            cost_usd: usd,
            latency_ms: 1,
            wall_ms: 2,
            settled: Default::default(),
            clamped_max_tokens: None,
        })
    }

    fn estimate(session: u32, usd: f64) -> Event {
        Event::ModelCall(ModelCall {
            attempt: 1,
            role: Role::Agent,
            session,
            message_id: "m".into(),
            model: "haiku".into(),
            input_tokens: 100,
            output_tokens: 20,
            cost_usd_estimate: usd,
            latency_ms: 1,
        })
    }

    /// Every metered call is billed exactly once, wherever a crash cuts the
    /// journal: while its session runs it counts (not added to the stream's
    /// estimate of the same call), the session's end bills the sum it
    /// carries, and a call metered after its session ended counts on its own.
    #[test]
    fn metered_calls_are_billed_once_at_every_cut() {
        let mut ev = start();
        ev.push(estimate(0, 0.25));
        ev.push(metered(0, 0.3, 1000));
        // A nested `claude -p`'s call: metered, never in the stream.
        ev.push(metered(0, 0.2, 0));
        let mut finished = match finished(1, Role::Agent, 0, 0.0) {
            Event::SessionFinished(f) => f,
            _ => unreachable!("a session_finished event"),
        };
        finished.spend = Spend {
            cost_usd: 0.5,
            turns: 2,
            input_tokens: 100 + 10 + 1000 + 100 + 10,
            output_tokens: 40,
        };
        ev.push(Event::SessionFinished(finished));
        ev.push(metered(0, 0.125, 0));
        let start_len = start().len();
        let expected = [
            // (events kept after `start`, billed usd)
            (0, 0.0),
            (1, 0.25),  // the stream's estimate only
            (2, 0.3),   // metered supersedes the same call's estimate
            (3, 0.5),   // the nested call adds
            (4, 0.5),   // the session's end bills the same sum
            (5, 0.625), // a late call counts on its own
        ];
        for (kept, usd) in expected {
            let r = Replay::fold(&parse(&lines(ev[..start_len + kept].to_vec())).0);
            assert!(
                (r.spend().cost_usd - usd).abs() < 1e-12,
                "after {kept} events: billed {} not {usd}",
                r.spend().cost_usd
            );
        }
        let r = Replay::fold(&parse(&lines(ev[..start_len + 3].to_vec())).0);
        assert_eq!(r.metered_of(0).input_tokens, 2 * 110 + 1000);
        assert_eq!(r.metered_of(0).turns, 2);
        // A second session, killed mid-way: its own calls only.
        let mut ev2 = ev.clone();
        ev2.push(Event::SessionStarted {
            attempt: 1,
            role: Role::Critic,
            session: 1,
        });
        ev2.push(metered(1, 0.01, 0));
        let r = Replay::fold(&parse(&lines(ev2)).0);
        assert!((r.spend().cost_usd - 0.635).abs() < 1e-12);
        assert_eq!(r.metered_of(0), Spend::default(), "session 0 finished");
    }

    #[test]
    fn a_torn_last_line_is_dropped() {
        let mut ev = start();
        ev.push(finished(1, Role::Agent, 0, 0.5));
        let text = lines(ev);
        // Cut the last line in half: the session's end was never written.
        let cut = text.len() - 40;
        let (entries, torn) = parse(&text[..cut]);
        assert!(torn);
        let r = Replay::fold(&entries);
        assert!(r.current.expect("current").agent.is_none());
        assert_eq!(r.spent.cost_usd, 0.0);
    }

    #[test]
    fn a_torn_line_is_cut_before_the_next_append() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = lines(start());
        std::fs::write(
            dir.path().join(FILE),
            format!("{text}{{\"ts\":\"x\",\"ms\":5,\"eve"),
        )
        .expect("write");
        let mut j = Journal::open(dir.path()).expect("open");
        assert_eq!(j.state().phase(), Phase::Attempt { n: 1 });
        j.append(finished(1, Role::Agent, 0, 0.5)).expect("append");
        let again = load(dir.path());
        assert_eq!(again.entries, 5, "the torn bytes are gone");
        assert_eq!(again.spent.cost_usd, 0.5);
    }

    #[test]
    fn rejected_then_accepted_then_parked_and_finalized() {
        let mut ev = start();
        ev.extend([
            finished(1, Role::Agent, 0, 0.5),
            Event::DiffTaken {
                tree: None,
                attempt: 1,
                sha256: "d1".into(),
            },
            Event::GoalRun {
                attempt: 1,
                report: goal(true),
                artefacts: [("out.log".to_owned(), "b1".to_owned())].into(),
                alone: None,
                written: vec![],
                origins: Default::default(),
            },
            Event::SessionStarted {
                attempt: 1,
                role: Role::Critic,
                session: 1,
            },
            finished(1, Role::Critic, 1, 0.25),
            Event::AttemptEnded {
                record: record(1),
                end: AttemptEnd::Rejected {
                    next_prompt: "fix the print".into(),
                },
            },
        ]);
        let r = Replay::fold(&parse(&lines(ev.clone())).0);
        assert_eq!(r.phase(), Phase::Ready { next: 2 });
        assert_eq!(
            r.artefacts.from_goal.get("out.log").map(String::as_str),
            Some("b1")
        );
        assert_eq!(r.next_attempt(), (2, Some("fix the print")));
        assert_eq!(r.spend().cost_usd, 0.75);
        // The same diff again would be no progress.
        assert_eq!(r.diffs.clone().observe("d1"), Some(Reason::StuckNoProgress));

        ev.push(Event::AttemptStarted {
            attempt: 2,
            prompt: "fix the print".into(),
        });
        ev.push(Event::AttemptEnded {
            record: record(2),
            end: AttemptEnd::Accepted,
        });
        let r = Replay::fold(&parse(&lines(ev.clone())).0);
        // Killed between the attempt's end and the job's: the decision stands.
        assert!(matches!(
            r.phase(),
            Phase::Ending(Ending {
                reason: Reason::Accepted,
                ..
            })
        ));
        ev.push(Event::JobEnded {
            ending: Ending {
                reason: Reason::Accepted,
                detail: "ok".into(),
            },
        });
        ev.push(Event::Committed { commit: "c".into() });
        let r = Replay::fold(&parse(&lines(ev.clone())).0);
        assert_eq!(r.committed.as_deref(), Some("c"));
        assert!(matches!(r.phase(), Phase::Ending(_)));
        ev.push(Event::Finalized {
            state: Status::Accepted,
        });
        let r = Replay::fold(&parse(&lines(ev)).0);
        assert_eq!(r.phase(), Phase::Finalized(Status::Accepted));
        assert_eq!(r.attempts.len(), 2);
    }

    #[test]
    fn a_stop_recorded_on_the_attempt_is_the_ending() {
        let mut ev = start();
        let ending = Ending {
            reason: Reason::BudgetUsd,
            detail: "cap".into(),
        };
        ev.push(Event::AttemptEnded {
            record: record(1),
            end: AttemptEnd::Stopped {
                ending: ending.clone(),
            },
        });
        let r = Replay::fold(&parse(&lines(ev)).0);
        assert_eq!(r.phase(), Phase::Ending(ending));
    }

    #[test]
    fn a_reopened_job_continues_after_its_last_attempt_and_keeps_its_spend() {
        let mut ev = start();
        let ending = Ending {
            reason: Reason::BudgetUsd,
            detail: "cap".into(),
        };
        ev.extend([
            finished(1, Role::Agent, 0, 0.5),
            Event::AttemptEnded {
                record: record(1),
                end: AttemptEnd::Stopped {
                    ending: ending.clone(),
                },
            },
            Event::JobEnded { ending },
            Event::Parked {
                stash_commit: Some("s1".into()),
                error: None,
                submodules: vec![],
            },
            Event::Finalized {
                state: Status::Stopped,
            },
            Event::Reopened {
                budget_usd: Some(3.0),
                max_attempts: None,
                timeout: None,
                note: Some("the test is right".into()),
                restore: Some("s1".into()),
                spec: None,
            },
        ]);
        let r = Replay::fold(&parse(&lines(ev.clone())).0);
        assert_eq!(r.phase(), Phase::Ready { next: 2 });
        assert_eq!(r.next_attempt(), (2, None));
        assert_eq!(
            (r.note.as_deref(), r.restore.as_deref()),
            (Some("the test is right"), Some("s1"))
        );
        assert!(r.parked.is_none() && r.ending.is_none());
        assert_eq!(r.spend().cost_usd, 0.5, "what was spent still counts");
        ev.extend([
            Event::Restored {
                stash_commit: "s1".into(),
            },
            Event::AttemptStarted {
                attempt: 2,
                prompt: "the test is right\n\nt".into(),
            },
        ]);
        let r = Replay::fold(&parse(&lines(ev)).0);
        assert_eq!(r.phase(), Phase::Attempt { n: 2 });
        assert!(r.note.is_none() && r.restore.is_none());
    }

    #[test]
    fn unknown_lines_are_skipped_and_a_bom_is_tolerated() {
        let text = format!(
            "\u{feff}{}{{\"ts\":\"t\",\"ms\":1,\"event\":\"from_the_future\"}}\n",
            lines(start())
        );
        let (entries, torn) = parse(&text);
        assert_eq!((entries.len(), torn), (4, false));
    }

    #[test]
    fn every_rejection_is_kept_and_the_last_is_the_previous_attempts() {
        let finding = Finding {
            reason: Reason::Precheck,
            path: "rechnung.py".into(),
            line: Some(18),
            rule: Some(2),
            check: Some(crate::judges::finding::Check::DebugOutput),
            problem: "debug output".into(),
            fix: "remove it".into(),
        };
        let mut ev = start();
        ev.extend([
            finished(1, Role::Agent, 0, 0.1),
            Event::GateChecked {
                attempt: 1,
                gate: Gate::PRECHECK,
                findings: vec![finding.clone()],
            },
            Event::AttemptEnded {
                record: record(1),
                end: AttemptEnd::Rejected {
                    next_prompt: "remove the print".into(),
                },
            },
        ]);
        let r = Replay::fold(&parse(&lines(ev.clone())).0);
        let last = r.last_rejection().expect("attempt 1 was rejected");
        assert_eq!((last.attempt, &last.findings), (1, &vec![finding.clone()]));
        assert_eq!(last.named(), ["rechnung.py"]);
        assert_eq!(
            last.lines(),
            ["rechnung.py:18 (rule 2, gate precheck): debug output — fix: remove it"]
        );
        ev.extend([
            Event::AttemptStarted {
                attempt: 2,
                prompt: "remove the print".into(),
            },
            Event::InterdiffTaken {
                attempt: 2,
                from: 1,
                files: vec!["rechnung.py".into(), "x.py".into()],
                unnamed: vec!["x.py".into()],
            },
        ]);
        let r = Replay::fold(&parse(&lines(ev.clone())).0);
        let c = r.current.as_ref().expect("attempt 2");
        assert_eq!(
            c.interdiff.as_ref().map(|i| i.1.clone()),
            Some(vec!["x.py".to_owned()])
        );
        assert_eq!(
            r.last_rejection().map(|l| l.attempt),
            Some(1),
            "still the previous attempt's"
        );
        ev.push(Event::AttemptEnded {
            record: record(2),
            end: AttemptEnd::Accepted,
        });
        let r = Replay::fold(&parse(&lines(ev)).0);
        assert!(r.last_rejection().is_none(), "attempt 2 was not rejected");
        assert_eq!(r.rejections.len(), 1);
    }

    #[test]
    fn events_round_trip_through_the_same_type() {
        for event in start().into_iter().chain([
            Event::InterdiffTaken {
                attempt: 2,
                from: 1,
                files: vec!["a.py".into()],
                unnamed: vec![],
            },
            Event::LessonAudited {
                key: "precheck:debug_output".into(),
                text: "Leave no debug output.".into(),
                refused: Some("why".into()),
            },
            Event::LessonsLearned {
                repo: "root".into(),
                keys: vec!["precheck:debug_output".into()],
            },
            finished(1, Role::Critic, 1, 0.1),
            Event::Suspended,
            Event::Parked {
                stash_commit: Some("abc".into()),
                error: None,
                submodules: vec![crate::workspace::SubmoduleParked {
                    path: "vendor".into(),
                    stash_commit: Some("def".into()),
                    moved_head: None,
                    error: None,
                }],
            },
            Event::Finalized {
                state: Status::AwaitingApproval,
            },
            Event::CredentialsHeld {
                removed: vec!["http.https://github.com/.extraheader".into()],
                recovered: false,
            },
            Event::CredentialsReleased { restored: true },
            Event::GitDirPinned {
                files: [(
                    "config".to_owned(),
                    Pinned {
                        sha256: "ab".into(),
                        mode: 0o644,
                        link: false,
                    },
                )]
                .into(),
            },
            Event::GateChecked {
                attempt: 1,
                gate: Gate::GIT_DIR_AFTER_GOAL,
                findings: vec![],
            },
            Event::Pushed {
                url: "https://github.com/acme/app.git".into(),
                branch: "loopd/autofix/0123456789ab".into(),
                commit: "c".into(),
                replaced: None,
            },
            Event::PullRequest {
                number: 7,
                url: "https://github.com/acme/app/pull/7".into(),
                opened_now: false,
            },
            Event::Escalated {
                escalation: Escalation {
                    attempt: 1,
                    test: "tests/test_x.py::test_y".into(),
                    claim: "the docstring says otherwise".into(),
                    goal_output: "1 failed".into(),
                    diff: "diff --git".into(),
                },
            },
            Event::Reopened {
                budget_usd: Some(5.0),
                max_attempts: Some(8),
                timeout: None,
                note: Some("the test is right".into()),
                restore: Some("abc".into()),
                spec: None,
            },
            Event::Restored {
                stash_commit: "abc".into(),
            },
            Event::Nudged(Nudge {
                attempt: 1,
                session: 0,
                tool: "Read".into(),
                args_sha256: "ab".into(),
            }),
        ]) {
            let e = Entry {
                ts: "t".into(),
                ms: 1,
                event,
            };
            let text = serde_json::to_string(&e).expect("json");
            let back: Entry = serde_json::from_str(&text).expect("parse");
            assert_eq!(back, e, "{text}");
            assert!(text.contains(&format!("\"event\":\"{}\"", e.event.kind())));
        }
    }

    #[test]
    fn a_parked_line_written_before_submodules_were_parked_still_reads() {
        let line = r#"{"ts":"t","ms":1,"event":"parked","stash_commit":"abc","error":null}"#;
        let (entries, _) = parse(&format!("{line}\n"));
        assert_eq!(
            entries.iter().map(|e| &e.event).collect::<Vec<_>>(),
            [&Event::Parked {
                stash_commit: Some("abc".into()),
                error: None,
                submodules: vec![],
            }]
        );
    }
}
