//! The examiner's gate: each test the examiner wrote from the task, kept at
//! BASE_REF and not ruled wrong since, must pass on the change's
//! judge-only tree. In `gate` mode every red one rejects here; in
//! `evidence` mode a test that passed at BASE_REF and fails now (a
//! regression the task never asked for) rejects here, and those red at
//! BASE_REF too go to the critic first (the gate after it:
//! [`super::examiner_evidence`]). The next prompt learns only the ids of
//! those that fail: never their source or what they expect.

use super::{Facts, Gate, Stage};
use crate::examiner::Mode;
use crate::goal::results::Verdict;
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// See the module's doc.
pub(in crate::job) struct Examiner;

/// How many failing ids a finding names.
pub(super) const NAMED: usize = 20;

/// What the examiner's run on this attempt says: the judging tests that
/// do not pass, or the findings that stand in for it (no tree, no report,
/// a tree written over).
pub(in crate::job) fn red(run: &Run<'_>) -> Result<Vec<String>, Vec<Finding>> {
    let finding = |reason, problem: &str, fix: &str| Finding {
        reason,
        path: "the examiner's tests".into(),
        line: None,
        rule: run.job.rubric.tests_rule(),
        check: None,
        problem: problem.into(),
        fix: fix.into(),
    };
    let Some((results, written)) = run.current().examiner else {
        return Err(vec![finding(
            Reason::ExaminerFailed,
            "the examiner's tests could not run: the change is too large to write as a tree",
            "make a smaller change",
        )]);
    };
    if written > 0 {
        // No name: they may be the examiner's files.
        return Err(vec![finding(
            Reason::GoalChangedTree,
            "the change's code, run by the examiner's tests, wrote over or deleted files of the tree it ran in",
            "leave the tree alone from code the tests run: write outputs to temporary files",
        )]);
    }
    let Some(results) = results else {
        return Err(vec![finding(
            Reason::ExaminerFailed,
            "the examiner's tests wrote no test report their runner stands by on the change (they did at BASE_REF): none, or one that says every test passed while the runner failed, was killed or timed out",
            "do not end the test process, touch its report or change how the tests report",
        )]);
    };
    Ok(run
        .journal
        .state()
        .examiner_judging()
        .into_iter()
        .filter(|id| results.get(*id) != Some(&Verdict::Passed))
        .cloned()
        .collect())
}

/// `ids`, at most [`NAMED`] of them, and how many more.
pub(super) fn named(ids: &[String]) -> String {
    let mut named: Vec<String> = ids.iter().take(NAMED).cloned().collect();
    if ids.len() > NAMED {
        named.push(format!("and {} more", ids.len() - NAMED));
    }
    named.join(", ")
}

impl Gate for Examiner {
    fn id(&self) -> journal::Gate {
        journal::Gate::EXAMINER
    }

    fn stage(&self) -> Stage {
        Stage::Examiner
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        !run.journal.state().examiner_judging().is_empty()
    }

    fn check(&self, run: &Run<'_>, _facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let failing = match red(run) {
            Ok(failing) => failing,
            Err(findings) => return Ok(findings),
        };
        let state = run.journal.state();
        let regressed = state
            .examined
            .as_ref()
            .is_some_and(|e| failing.iter().any(|id| e.passing_at_base.contains(id)));
        let evidence = run
            .job
            .examiner
            .as_ref()
            .is_some_and(|s| s.mode == Mode::Evidence);
        // In evidence mode the critic weighs what the task asks for first;
        // a regression rejects here, with every red id.
        if failing.is_empty() || (evidence && !regressed) {
            return Ok(Vec::new());
        }
        Ok(vec![Finding {
            reason: Reason::ExaminerFailed,
            path: "the examiner's tests".into(),
            line: None,
            rule: run.job.rubric.tests_rule(),
            check: None,
            problem: format!(
                "{} test(s) written from the task alone fail on the change{}: {}",
                failing.len(),
                if regressed {
                    ", some of which passed before it"
                } else {
                    ""
                },
                named(&failing)
            ),
            fix: "read the task again and meet every case it states; these tests are not yours to see"
                .into(),
        }])
    }
}
