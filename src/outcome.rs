//! How a job ended: the reason codes of the external contract, the outcome
//! they imply, and — in exactly one place — the process exit code.

use serde::{Deserialize, Serialize};

/// Why a job ended. The serialized names are the contract's reason codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Accepted,
    AttemptsExhausted,
    BudgetUsd,
    MaxTurns,
    MaxTokens,
    WallClock,
    AttemptTimeout,
    IdleTimeout,
    StuckRepeat,
    StuckNoProgress,
    JudgesDisagree,
    ProtectedPath,
    TestCountDropped,
    /// The baseline's test summary was read, the last attempt's was not:
    /// the gate cannot count, so the change is not accepted.
    TestCountUnreadable,
    SkipMarker,
    /// The pre-critic found debug output, commented-out code, a swallowed
    /// error or a drive-by rename in the added lines.
    Precheck,
    /// The change is larger than the bound the critic reads in full
    /// (`[guard] max_diff_kb`).
    DiffTooLarge,
    /// The goal test changed the change (the agent's code, run by it,
    /// rewrote a file): what would be committed is not what was judged.
    GoalChangedTree,
    /// A held-out goal step (tests the agent never saw) was red on the
    /// judge-only tree of the last attempt.
    HeldOutFailed,
    /// The whole suite on the judge-only tree: a test that passed at
    /// BASE_REF does not pass after the change (`[judge] suite`).
    SuiteRegressed,
    /// A test the examiner wrote from the task (`[examiner]`) was red on
    /// the last attempt's judge-only tree (in evidence mode: and the critic
    /// did not rule it wrong on a quote loopd found).
    ExaminerFailed,
    /// A process of the job made a directory or file of the worktree
    /// unreadable to loopd (a `chmod 0` over what the judges must walk):
    /// loopd made it readable again to judge and park it.
    UnreadablePath,
    /// A goal step's test runner resolved elsewhere than at BASE_REF (a
    /// module named like it in the tree, another interpreter or
    /// executable): what ran as the tests is not the runner that ran.
    RunnerChanged,
    ConfigTampered,
    /// Preflight: a goal step's program could not be run at the baseline
    /// (exit 127 or 126). Exit 2, like any configuration error.
    GoalNotRunnable,
    /// Preflight: the baseline is green already; nothing to fix (unless
    /// `--allow-green`).
    AlreadyGreen,
    Signal,
    AgentError,
    InternalError,
    /// The agent filed an escalation (`loopd escalate`): it claims the task
    /// cannot be done honestly, and a human decides. Never an acceptance.
    Escalated,
}

/// The coarse result scripts branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Accepted,
    Exhausted,
    Stopped,
    Interrupted,
    Error,
    /// The goal test passed before any attempt: nothing to fix.
    NothingToFix,
    /// The agent escalated: a human must look at its claim.
    NeedsHuman,
}

impl Reason {
    /// Every reason, in declaration order: what the documentation's table
    /// of reason codes is checked against (`tests/it/meta.rs`), so a new
    /// reason cannot ship undocumented. A unit test keeps it complete.
    pub const ALL: &'static [Reason] = &[
        Reason::Accepted,
        Reason::AttemptsExhausted,
        Reason::BudgetUsd,
        Reason::MaxTurns,
        Reason::MaxTokens,
        Reason::WallClock,
        Reason::AttemptTimeout,
        Reason::IdleTimeout,
        Reason::StuckRepeat,
        Reason::StuckNoProgress,
        Reason::JudgesDisagree,
        Reason::ProtectedPath,
        Reason::TestCountDropped,
        Reason::TestCountUnreadable,
        Reason::SkipMarker,
        Reason::Precheck,
        Reason::DiffTooLarge,
        Reason::GoalChangedTree,
        Reason::HeldOutFailed,
        Reason::SuiteRegressed,
        Reason::ExaminerFailed,
        Reason::UnreadablePath,
        Reason::RunnerChanged,
        Reason::ConfigTampered,
        Reason::GoalNotRunnable,
        Reason::AlreadyGreen,
        Reason::Signal,
        Reason::AgentError,
        Reason::InternalError,
        Reason::Escalated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Accepted => "accepted",
            Reason::AttemptsExhausted => "attempts_exhausted",
            Reason::BudgetUsd => "budget_usd",
            Reason::MaxTurns => "max_turns",
            Reason::MaxTokens => "max_tokens",
            Reason::WallClock => "wall_clock",
            Reason::AttemptTimeout => "attempt_timeout",
            Reason::IdleTimeout => "idle_timeout",
            Reason::StuckRepeat => "stuck_repeat",
            Reason::StuckNoProgress => "stuck_no_progress",
            Reason::JudgesDisagree => "judges_disagree",
            Reason::ProtectedPath => "protected_path",
            Reason::TestCountDropped => "test_count_dropped",
            Reason::TestCountUnreadable => "test_count_unreadable",
            Reason::SkipMarker => "skip_marker",
            Reason::Precheck => "precheck",
            Reason::DiffTooLarge => "diff_too_large",
            Reason::GoalChangedTree => "goal_changed_tree",
            Reason::HeldOutFailed => "held_out_failed",
            Reason::SuiteRegressed => "suite_regressed",
            Reason::ExaminerFailed => "examiner_failed",
            Reason::UnreadablePath => "unreadable_path",
            Reason::RunnerChanged => "runner_changed",
            Reason::ConfigTampered => "config_tampered",
            Reason::GoalNotRunnable => "goal_not_runnable",
            Reason::AlreadyGreen => "already_green",
            Reason::Signal => "signal",
            Reason::AgentError => "agent_error",
            Reason::InternalError => "internal_error",
            Reason::Escalated => "escalated",
        }
    }

    pub fn outcome(self) -> Outcome {
        match self {
            Reason::Accepted => Outcome::Accepted,
            Reason::AttemptsExhausted => Outcome::Exhausted,
            Reason::Signal => Outcome::Interrupted,
            Reason::AgentError | Reason::InternalError | Reason::GoalNotRunnable => Outcome::Error,
            Reason::AlreadyGreen => Outcome::NothingToFix,
            Reason::Escalated => Outcome::NeedsHuman,
            _ => Outcome::Stopped,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an agent's escalation claims, as the summary, the report and the
/// webhook carry it: the test it names, its reason, the goal test's output
/// and the diff it left (both cut to a readable size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Escalation {
    pub attempt: u32,
    /// The test the agent says is wrong or impossible (as it named it).
    pub test: String,
    /// Why, in the agent's words.
    pub claim: String,
    /// The latest goal test output the job has (this attempt's, an earlier
    /// one's, or the baseline's), head and tail.
    pub goal_output: String,
    /// The diff since BASE_REF the agent left, head and tail.
    pub diff: String,
}

/// Where a job is in its life, as `loopd status` shows it (the daemon
/// states of the contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Accepted,
    Exhausted,
    Stopped,
    /// Suspended by a daemon shutdown; resumes when the daemon starts.
    Interrupted,
    Error,
    Cancelled,
    /// Accepted, committed on its branch, nothing pushed: waits for
    /// `loopd approve` or `loopd reject`.
    AwaitingApproval,
    /// Accepted, then rejected by a human; the change stays parked.
    Rejected,
    /// The goal test was green before any attempt.
    NothingToFix,
    /// The agent escalated; waits for a human (`loopd resume JOB --note`).
    NeedsHuman,
}

impl Status {
    pub fn from_outcome(o: Outcome) -> Status {
        match o {
            Outcome::Accepted => Status::Accepted,
            Outcome::Exhausted => Status::Exhausted,
            Outcome::Stopped => Status::Stopped,
            Outcome::Interrupted => Status::Interrupted,
            Outcome::Error => Status::Error,
            Outcome::NothingToFix => Status::NothingToFix,
            Outcome::NeedsHuman => Status::NeedsHuman,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Accepted => "accepted",
            Status::Exhausted => "exhausted",
            Status::Stopped => "stopped",
            Status::Interrupted => "interrupted",
            Status::Error => "error",
            Status::Cancelled => "cancelled",
            Status::AwaitingApproval => "awaiting_approval",
            Status::Rejected => "rejected",
            Status::NothingToFix => "nothing_to_fix",
            Status::NeedsHuman => "needs_human",
        }
    }

    /// A state the job never leaves by itself.
    pub fn is_final(self) -> bool {
        !matches!(self, Status::Queued | Status::Running | Status::Interrupted)
    }
}

/// What `loopd ci` decided (its `--json` `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CiDecision {
    PullRequestOpened,
    PullRequestExists,
    /// Loopd's own branch or commit: nothing to do.
    Skipped,
    /// A fork's event, refused.
    Refused,
    /// Accepted, but the risk policy refused the fix.
    GateRefused,
    /// The loop did not accept a fix.
    NotAccepted,
    /// The GitHub API or the push failed, or the autofix branch holds a
    /// commit loopd did not make.
    Error,
    /// A round on a pull request loopd follows pushed its accepted fix
    /// and answered where the request came from.
    RoundPushed,
    /// A round's answer without a push: a round that was not accepted
    /// (the honest report), a reply an earlier run's push still owed, a
    /// maintainer's `/loopd continue` acknowledged.
    Answered,
    /// The request needs a change loopd never makes (a test, CI
    /// configuration): answered, nothing ran.
    NeedsHuman,
    /// The pull request reached its round cap or budget: the open points
    /// are listed once, and nothing more runs until a maintainer asks.
    Capped,
    /// A push to a base branch: a merge round was started (dispatched)
    /// for each followed pull request into it that no longer merges.
    MergesStarted,
}

impl CiDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            CiDecision::PullRequestOpened => "pull request opened",
            CiDecision::PullRequestExists => "pull request exists",
            CiDecision::Skipped => "skipped",
            CiDecision::Refused => "refused",
            CiDecision::GateRefused => "gate refused",
            CiDecision::NotAccepted => "not accepted",
            CiDecision::Error => "error",
            CiDecision::RoundPushed => "round pushed",
            CiDecision::Answered => "answered",
            CiDecision::NeedsHuman => "needs human",
            CiDecision::Capped => "capped",
            CiDecision::MergesStarted => "merges started",
        }
    }

    /// `loopd ci`'s exit code: 0 when a pull request exists (or there was
    /// nothing to do), when a round pushed its fix, or at the round cap; 2
    /// for a refused fork, 3 for the risk policy, 6 when a request needs a
    /// human, else the job's own (`reason`, when the loop ran).
    pub fn exit_status(self, reason: Option<Reason>) -> ExitStatus {
        match self {
            CiDecision::PullRequestOpened
            | CiDecision::PullRequestExists
            | CiDecision::Skipped
            | CiDecision::RoundPushed
            | CiDecision::Capped
            | CiDecision::MergesStarted => ExitStatus::Success,
            CiDecision::Answered => reason.map_or(ExitStatus::Success, ExitStatus::from),
            CiDecision::NeedsHuman => ExitStatus::NeedsHuman,
            CiDecision::Refused => ExitStatus::Usage,
            CiDecision::GateRefused => ExitStatus::Guard,
            CiDecision::NotAccepted => reason.map_or(ExitStatus::Environment, ExitStatus::from),
            CiDecision::Error => ExitStatus::Environment,
        }
    }
}

/// Process exit codes of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: a command that is not a job succeeded.
    Success,
    /// 0: accepted.
    Accepted,
    /// 1: attempts used up, never accepted.
    Exhausted,
    /// 2: usage or configuration error; nothing was touched.
    Usage,
    /// 3: stopped by a guard.
    Guard,
    /// 4: interrupted by a signal.
    Signal,
    /// 5: environment error (agent missing or failing, not a repository,
    /// dirty tree, git failure).
    Environment,
    /// 7: the goal test was green before any attempt; nothing was spent.
    NothingToFix,
    /// 6: the agent escalated; a human must decide (`needs_human`).
    NeedsHuman,
    /// `loopd hook`: the code the agent CLI's hook protocol gives the
    /// answer (Codex blocks a call on exit 2; Claude Code reads stdout).
    Hook(u8),
}

impl ExitStatus {
    /// Whether a scheduler should start the job again after this code: an
    /// interruption (a drain, an eviction, a signal) or an environment
    /// failure (a transient git or API error) — the job itself decided
    /// nothing. `loopd run --job-id` continues a job that ended so; every
    /// other ending is final, and a retry could only repeat it.
    pub fn retryable(self) -> bool {
        matches!(self, ExitStatus::Signal | ExitStatus::Environment)
    }

    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success | ExitStatus::Accepted => 0,
            ExitStatus::Exhausted => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Guard => 3,
            ExitStatus::Signal => 4,
            ExitStatus::Environment => 5,
            ExitStatus::NothingToFix => 7,
            ExitStatus::NeedsHuman => 6,
            ExitStatus::Hook(code) => code,
        }
    }
}

impl From<Outcome> for ExitStatus {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Accepted => ExitStatus::Accepted,
            Outcome::Exhausted => ExitStatus::Exhausted,
            Outcome::Stopped => ExitStatus::Guard,
            Outcome::Interrupted => ExitStatus::Signal,
            Outcome::Error => ExitStatus::Environment,
            Outcome::NothingToFix => ExitStatus::NothingToFix,
            Outcome::NeedsHuman => ExitStatus::NeedsHuman,
        }
    }
}

impl From<Reason> for ExitStatus {
    fn from(r: Reason) -> Self {
        match r {
            // A goal that cannot run is the configuration's fault.
            Reason::GoalNotRunnable => ExitStatus::Usage,
            _ => r.outcome().into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Reason::ALL` holds every variant once. A new variant first stops
    /// the wildcard-free match below from compiling, so whoever adds it
    /// looks here; the order is checked against the discriminants (no
    /// duplicate, no gap before the last one listed), and completeness
    /// against serde's own list of the variants, which its error for an
    /// unknown name spells out — so one missing at the end is caught too.
    #[test]
    fn all_lists_every_reason_once() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r} is out of place in Reason::ALL");
            // No wildcard: a new variant does not compile until it is here.
            match r {
                Reason::Accepted
                | Reason::AttemptsExhausted
                | Reason::BudgetUsd
                | Reason::MaxTurns
                | Reason::MaxTokens
                | Reason::WallClock
                | Reason::AttemptTimeout
                | Reason::IdleTimeout
                | Reason::StuckRepeat
                | Reason::StuckNoProgress
                | Reason::JudgesDisagree
                | Reason::ProtectedPath
                | Reason::TestCountDropped
                | Reason::TestCountUnreadable
                | Reason::SkipMarker
                | Reason::Precheck
                | Reason::DiffTooLarge
                | Reason::GoalChangedTree
                | Reason::HeldOutFailed
                | Reason::SuiteRegressed
                | Reason::ExaminerFailed
                | Reason::UnreadablePath
                | Reason::RunnerChanged
                | Reason::ConfigTampered
                | Reason::GoalNotRunnable
                | Reason::AlreadyGreen
                | Reason::Signal
                | Reason::AgentError
                | Reason::InternalError
                | Reason::Escalated => {}
            }
        }
        let err = serde_json::from_str::<Reason>("\"no_such_reason\"")
            .expect_err("an unknown reason code is refused")
            .to_string();
        let expected = err
            .split_once("expected one of ")
            .unwrap_or_else(|| panic!("serde's message names the variants: {err}"))
            .1;
        let names: Vec<&str> = expected
            .split(", ")
            .map(|n| n.split('`').nth(1).expect("a quoted name"))
            .collect();
        let all: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, all, "Reason::ALL is not every reason");
    }

    #[test]
    fn reason_codes_serialize_as_in_the_contract() {
        for r in [
            Reason::Accepted,
            Reason::StuckNoProgress,
            Reason::TestCountDropped,
            Reason::TestCountUnreadable,
            Reason::BudgetUsd,
            Reason::Precheck,
            Reason::DiffTooLarge,
            Reason::GoalChangedTree,
        ] {
            assert_eq!(serde_json::to_value(r).expect("json"), r.as_str());
        }
        assert_eq!(ExitStatus::from(Reason::Accepted).code(), 0);
        assert_eq!(ExitStatus::from(Reason::AttemptsExhausted).code(), 1);
        assert_eq!(ExitStatus::from(Reason::BudgetUsd).code(), 3);
        assert_eq!(ExitStatus::from(Reason::ConfigTampered).code(), 3);
        assert_eq!(ExitStatus::from(Reason::Precheck).code(), 3);
        assert_eq!(ExitStatus::from(Reason::TestCountUnreadable).code(), 3);
        assert_eq!(ExitStatus::from(Reason::DiffTooLarge).code(), 3);
        assert_eq!(ExitStatus::from(Reason::GoalChangedTree).code(), 3);
        assert_eq!(ExitStatus::from(Reason::Signal).code(), 4);
        assert_eq!(ExitStatus::from(Reason::AgentError).code(), 5);
        assert_eq!(ExitStatus::from(Reason::GoalNotRunnable).code(), 2);
        assert_eq!(ExitStatus::from(Reason::AlreadyGreen).code(), 7);
        assert_eq!(
            Status::from_outcome(Reason::AlreadyGreen.outcome()).as_str(),
            "nothing_to_fix"
        );
        assert_eq!(ExitStatus::from(Reason::Escalated).code(), 6);
        assert_eq!(Reason::Escalated.outcome(), Outcome::NeedsHuman);
        assert_eq!(
            serde_json::to_value(Outcome::NeedsHuman).expect("json"),
            "needs_human"
        );
    }
}
