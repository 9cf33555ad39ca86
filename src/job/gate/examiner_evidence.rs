//! The examiner's gate after the critic (`[examiner] mode = "evidence"`):
//! each examiner test red on the change — red at BASE_REF too, the
//! behaviour the task asks for — that the critic did not rule wrong on a
//! quote loopd found rejects the attempt, whatever the critic's verdict.
//! The next prompt gets the test's id and the critic's words on the
//! behaviour (cut of every line and value of the test,
//! [`crate::examiner::evidence::Redactor`]); never the test.

use super::examiner::{red, NAMED};
use super::{Facts, Gate, Stage};
use crate::examiner::evidence::Word;
use crate::examiner::Mode;
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// See the module's doc.
pub(in crate::job) struct ExaminerEvidence;

impl Gate for ExaminerEvidence {
    fn id(&self) -> journal::Gate {
        journal::Gate::EXAMINER_EVIDENCE
    }

    fn stage(&self) -> Stage {
        Stage::Verdict
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        run.job
            .examiner
            .as_ref()
            .is_some_and(|s| s.mode == Mode::Evidence)
            && !run.journal.state().examiner_judging().is_empty()
    }

    fn check(&self, run: &Run<'_>, facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let failing = match red(run) {
            Ok(failing) => failing,
            Err(findings) => return Ok(findings),
        };
        let state = run.journal.state();
        let words = |id: &str| {
            state
                .rulings
                .iter()
                .rev()
                .find(|(n, r)| *n == facts.n && r.test == id && r.ruling == Word::Right)
                .map(|(_, r)| r.behaviour.clone())
                .filter(|b| !b.is_empty())
        };
        let finding = |path: String, problem: String| Finding {
            reason: Reason::ExaminerFailed,
            path,
            line: None,
            rule: run.job.rubric.tests_rule(),
            check: None,
            problem,
            fix: "meet the behaviour the task states; the test is not yours to see".into(),
        };
        let mut out: Vec<Finding> = failing
            .iter()
            .take(NAMED)
            .map(|id| {
                let problem = match words(id) {
                    Some(b) => format!(
                        "a test written from the task alone fails on the change; the reviewer says: {b}"
                    ),
                    None => "a test written from the task alone fails on the change, and the reviewer did not rule it wrong".into(),
                };
                finding(id.clone(), problem)
            })
            .collect();
        if failing.len() > NAMED {
            out.push(finding(
                "the examiner's tests".into(),
                format!("and {} more of them fail", failing.len() - NAMED),
            ));
        }
        Ok(out)
    }
}
