//! The examiner's gate (`[examiner] mode = "gate"`): each test the examiner
//! wrote from the task, kept at BASE_REF, must pass on the change's
//! judge-only tree — those red at BASE_REF (what the task asks for) and
//! those green there (what must not break). The next prompt learns only
//! the ids of those that fail: never their source or what they expect.

use super::{Facts, Gate, Stage};
use crate::goal::results::Verdict;
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// See the module's doc.
pub(in crate::job) struct Examiner;

/// How many failing ids a finding names.
const NAMED: usize = 20;

impl Gate for Examiner {
    fn id(&self) -> journal::Gate {
        journal::Gate::EXAMINER
    }

    fn stage(&self) -> Stage {
        Stage::Examiner
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        run.journal
            .state()
            .examined
            .as_ref()
            .is_some_and(|e| e.kept().next().is_some())
    }

    fn check(&self, run: &Run<'_>, _facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let state = run.journal.state();
        let Some(examined) = state.examined.as_ref() else {
            return Ok(Vec::new());
        };
        let finding = |reason, problem: String, fix: &str| Finding {
            reason,
            path: "the examiner's tests".into(),
            line: None,
            rule: run.job.rubric.tests_rule(),
            check: None,
            problem,
            fix: fix.into(),
        };
        let Some((results, written)) = run.current().examiner else {
            return Ok(vec![finding(
                Reason::ExaminerFailed,
                "the examiner's tests could not run: the change is too large to write as a tree"
                    .into(),
                "make a smaller change",
            )]);
        };
        if written > 0 {
            // No name: they may be the examiner's files.
            return Ok(vec![finding(
                Reason::GoalChangedTree,
                "the change's code, run by the examiner's tests, wrote over or deleted files of the tree it ran in".into(),
                "leave the tree alone from code the tests run: write outputs to temporary files",
            )]);
        }
        let Some(results) = results else {
            return Ok(vec![finding(
                Reason::ExaminerFailed,
                "the examiner's tests wrote no test report on the change (they did at BASE_REF)"
                    .into(),
                "do not end the test process or change how the tests report",
            )]);
        };
        let failing: Vec<&str> = examined
            .kept()
            .filter(|id| results.get(*id) != Some(&Verdict::Passed))
            .map(String::as_str)
            .collect();
        if failing.is_empty() {
            return Ok(Vec::new());
        }
        let mut named: Vec<String> = failing
            .iter()
            .take(NAMED)
            .map(|s| (*s).to_owned())
            .collect();
        if failing.len() > NAMED {
            named.push(format!("and {} more", failing.len() - NAMED));
        }
        Ok(vec![finding(
            Reason::ExaminerFailed,
            format!(
                "{} test(s) written from the task alone fail on the change: {}",
                failing.len(),
                named.join(", ")
            ),
            "read the task again and meet every case it states; these tests are not yours to see",
        )])
    }
}
