//! The test-count gate on a green goal test: every test that ran at
//! BASE_REF still runs and every one that passed still passes — by id
//! where the runner writes a report to loopd's channel
//! ([`crate::goal::results`]), by the counts its output states otherwise.

use std::collections::BTreeMap;

use super::{Facts, Gate, Stage};
use crate::goal::{self, GoalReport, GoalStep};
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::judges::testcount::{self, Counts};
use crate::outcome::Reason;

/// See the module's doc.
pub(in crate::job) struct TestCount;

impl Gate for TestCount {
    fn id(&self) -> journal::Gate {
        journal::Gate::TEST_COUNT
    }

    fn stage(&self) -> Stage {
        Stage::GreenGoal
    }

    fn check(&self, run: &Run<'_>, facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        Ok(test_count_findings(
            run,
            &run.job.goal,
            "goal step",
            facts.goal(),
            facts.counts,
            facts.baseline,
        ))
    }
}

/// The test-count gate for the steps of a green goal test (`label`:
/// what a step is called in the finding).
fn test_count_findings(
    run: &Run<'_>,
    steps: &[GoalStep],
    label: &str,
    goal: &GoalReport,
    counts: &BTreeMap<String, Counts>,
    baseline: &GoalReport,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (step, result) in steps.iter().zip(&goal.steps) {
        // Where the runner wrote the report loopd asked for at
        // BASE_REF, the gate reads ids from it, not stdout.
        let base_ids = baseline
            .steps
            .iter()
            .find(|s| s.name == step.name)
            .and_then(|s| s.results.as_ref());
        if let Some(base_ids) = base_ids {
            out.extend(id_findings(run, label, step, base_ids, result));
            continue;
        }
        let (Some(preset), Some(base)) = (step.report, counts.get(&step.name)) else {
            continue;
        };
        let path = format!("{label} `{}`", step.name);
        match result.counts(preset) {
            Err(unreadable) => out.push(Finding {
                reason: Reason::TestCountUnreadable,
                path,
                line: None,
                rule: run.job.rubric.tests_rule(),
                check: None,
                problem: format!(
                    "the test count cannot be read, though {} tests ran at baseline: {unreadable}",
                    base.ran
                ),
                fix: "leave how the goal step's tests run and report as it was at baseline; fix the code, not the runner's output".into(),
            }),
            Ok(now) => {
                if let Some(problem) = testcount::compare(base, &now) {
                    out.push(Finding {
                        reason: Reason::TestCountDropped,
                        path,
                        line: None,
                        rule: run.job.rubric.tests_rule(),
                        check: None,
                        problem: format!("the test count dropped: {problem}"),
                        fix: "run every test that ran at baseline, none skipped or deselected; fix the code, not the test selection".into(),
                    });
                }
            }
        }
    }
    out
}

/// The test-count gate by ids ([`goal::results`]): each test that ran
/// at BASE_REF still runs, each that passed still passes.
fn id_findings(
    run: &Run<'_>,
    label: &str,
    step: &GoalStep,
    base: &goal::results::Results,
    result: &goal::StepResult,
) -> Option<Finding> {
    let path = format!("{label} `{}`", step.name);
    let rule = run.job.rubric.tests_rule();
    let Some(now) = &result.results else {
        return Some(Finding {
            reason: Reason::TestCountUnreadable,
            path,
            line: None,
            rule,
            check: None,
            problem: format!(
                "the runner wrote no report loopd could read where it wrote one at BASE_REF ({} tests by id): what ran cannot be told",
                base.len()
            ),
            fix: "leave how the goal step's tests run and report as it was at baseline; fix the code, not the runner".into(),
        });
    };
    let mut problems = goal::results::compare(base, now, 10);
    // A step that exited 0 while its own report shows a failing test:
    // the exit, not the tests, was made green.
    let failing: Vec<&str> = now
        .iter()
        .filter(|(_, v)| v.failing())
        .map(|(id, _)| id.as_str())
        .collect();
    if result.passed && !failing.is_empty() {
        problems.push(format!(
            "the step exited 0, but {} test(s) fail in its report: {}",
            failing.len(),
            failing
                .iter()
                .take(10)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    (!problems.is_empty()).then(|| Finding {
        reason: Reason::TestCountDropped,
        path,
        line: None,
        rule,
        check: None,
        problem: format!("the tests of BASE_REF, by id, in the runner's own report: {}", problems.join("; ")),
        fix: "run every test that ran at baseline, none skipped or deselected, and keep each that passed green; fix the code, not the test selection".into(),
    })
}
