//! The gates: the deterministic judges of an attempt, in one ordered table
//! — the shape of the agent registry (`crate::agent::AGENTS`). Each gate
//! says when it runs and returns findings; [`super::Run::judge`] runs the
//! table stage by stage, the journal keeps each gate's findings under its
//! name, and a resumed job never runs a gate whose result it holds.
//!
//! A new gate is a module here and one line of [`GATES`]; a gate the
//! humans should see by another name than its own adds a line to
//! [`crate::journal::Gate::label`].
//!
//! `.git/` against its pin is not in the table: it guards loopd's own
//! repository, not the change, and it puts back what it finds every time
//! it looks (see `Run::git_dir_gate`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use super::{JobError, Run};
use crate::agent::events::ToolCall;
use crate::agent::gateway::channel::HookDecision;
use crate::agent::Role;
use crate::goal::GoalReport;
use crate::guard::progress::Nudger;
use crate::journal;
use crate::judges::finding::Finding;
use crate::judges::tamper::Policy;
use crate::judges::testcount::Counts;
use crate::workspace::{ChangedText, Diff};

mod after_goal;
mod diff;
mod examiner;
mod examiner_evidence;
mod held_out;
#[cfg(feature = "failpoints")]
mod planted;
mod precheck;
mod suite;
mod test_count;
mod tool_call;

pub(super) use examiner::red as examiner_red;

/// What a gate runs after, in an attempt; in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// On one tool call the hook asks about, before it runs, during a
    /// session ([`Gate::tool_call`]; through [`decide_tool_call`]).
    ToolCall,
    /// On the change the agent session left, before the goal test. Every
    /// gate of the stage runs; their findings reject together, after the
    /// agent's escalation is heard.
    Session,
    /// On what the goal test did, which ran the agent's code.
    Goal,
    /// On a green goal test, before anything that costs a model call.
    GreenGoal,
    /// On the whole suite's run, once the goal and its gates are green.
    Suite,
    /// On the held-out run, before the critic.
    HeldOut,
    /// On the examiner's tests' run, before the critic.
    Examiner,
    /// On what the critic answered (its rulings on red examiner tests).
    Verdict,
}

/// What the gates of an attempt read: built once by the judge and handed
/// to every gate.
pub(super) struct Facts<'a> {
    pub n: u32,
    /// The change the agent session left.
    pub diff: &'a Diff,
    /// The old and new text of every file it changed, read once for every
    /// gate ([`Facts::texts`]).
    pub texts: &'a [ChangedText],
    /// Paths a process of the job made unreadable to loopd (and whether
    /// loopd made them readable again).
    pub unlocked: &'a [(String, bool)],
    /// The attempt's run directory.
    pub dir: &'a Path,
    pub baseline: &'a GoalReport,
    /// Each goal step's test counts at baseline.
    pub counts: &'a BTreeMap<String, Counts>,
    /// The goal test's report, from [`Stage::Goal`] on.
    pub goal: Option<&'a GoalReport>,
}

impl Facts<'_> {
    /// The changed files' texts that `wanted` names.
    fn texts(&self, wanted: impl Fn(&str) -> bool) -> Vec<ChangedText> {
        self.texts
            .iter()
            .filter(|t| wanted(&t.path))
            .cloned()
            .collect()
    }

    /// The goal report, which every gate after [`Stage::Session`] has.
    fn goal(&self) -> &GoalReport {
        self.goal
            .expect("a gate after the session runs once the goal test reported")
    }
}

/// What a gate of [`Stage::ToolCall`] reads: one tool call the hook asks
/// about, made canonical by its CLI, and what the job's channel holds.
pub(super) struct ToolCallFacts<'a> {
    pub role: Role,
    pub session_id: &'a str,
    pub call: &'a ToolCall,
    /// Where the call runs (the worktree when the hook did not say).
    pub cwd: &'a Path,
    pub policy: &'a Policy,
    pub nudger: Option<&'a Mutex<Nudger>>,
}

/// A deterministic judge of an attempt.
pub(super) trait Gate: Sync {
    /// The name the journal keeps its findings under.
    fn id(&self) -> journal::Gate;
    fn stage(&self) -> Stage;
    /// Whether it judges this job at all (a held-out gate without
    /// held-out steps does not).
    fn applies(&self, _run: &Run<'_>) -> bool {
        true
    }
    /// A gate after a session: its findings on the attempt.
    fn check(&self, _run: &Run<'_>, _facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        Ok(Vec::new())
    }
    /// A gate of [`Stage::ToolCall`]: its answer to the hook, if it has
    /// one.
    fn tool_call(&self, _facts: &ToolCallFacts<'_>) -> Option<HookDecision> {
        None
    }
}

/// The hook's answer about one tool call: the first gate of
/// [`Stage::ToolCall`] that answers decides; a call none answers is
/// allowed.
pub(super) fn decide_tool_call(facts: &ToolCallFacts<'_>) -> HookDecision {
    GATES
        .iter()
        .filter(|g| g.stage() == Stage::ToolCall)
        .find_map(|g| g.tool_call(facts))
        .unwrap_or(HookDecision::Allow)
}

/// Every gate, in the order it runs within its stage.
pub(super) static GATES: &[&dyn Gate] = &[
    &tool_call::CriticTools,
    &tool_call::Nudge,
    &tool_call::Protect,
    &diff::DiffGate,
    #[cfg(feature = "failpoints")]
    &planted::Planted,
    &after_goal::Written,
    &after_goal::Drift,
    &test_count::TestCount,
    &precheck::Precheck,
    &suite::Suite,
    &held_out::HeldOut,
    &examiner::Examiner,
    &examiner_evidence::ExaminerEvidence,
];

/// The gates of a stage that judge this job.
pub(super) fn of<'r>(
    stage: Stage,
    run: &'r Run<'_>,
) -> impl Iterator<Item = &'static dyn Gate> + 'r {
    GATES
        .iter()
        .copied()
        .filter(move |g| g.stage() == stage && g.applies(run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gate_has_a_name_of_its_own_within_its_stage() {
        // Two gates may share a name only when no job runs both (the
        // hermetic and the shared after-goal gate).
        let mut seen: Vec<(String, bool)> = Vec::new();
        for g in GATES {
            let name = g.id().name().to_owned();
            assert!(!name.is_empty());
            seen.push((name, true));
        }
        let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
        let after_goal = names.iter().filter(|n| **n == "diff_after_goal").count();
        assert_eq!(after_goal, 2, "the hermetic and the shared after-goal gate");
        let mut others: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| *n != "diff_after_goal")
            .collect();
        let len = others.len();
        others.sort();
        others.dedup();
        assert_eq!(others.len(), len, "a gate name is used twice: {names:?}");
    }

    #[test]
    fn the_stages_run_in_the_order_of_the_table() {
        let order = [
            Stage::ToolCall,
            Stage::Session,
            Stage::Goal,
            Stage::GreenGoal,
            Stage::Suite,
            Stage::HeldOut,
            Stage::Examiner,
            Stage::Verdict,
        ];
        let stages: Vec<usize> = GATES
            .iter()
            .map(|g| order.iter().position(|s| *s == g.stage()).expect("a stage"))
            .collect();
        assert!(
            stages.windows(2).all(|w| w[0] <= w[1]),
            "the table lists its gates in stage order: {stages:?}"
        );
    }
}
