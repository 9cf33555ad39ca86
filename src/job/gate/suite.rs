//! The whole suite's gate: each test that passed at BASE_REF and does not
//! pass on the change's judge-only tree ([`crate::goal::suite`]). The
//! run itself is the judge's (`Run::suite_once`, and at the baseline);
//! this gate reads what the journal kept of both.

use super::{Facts, Gate, Stage};
use crate::goal;
use crate::goal::suite::regressions;
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// See the module's doc.
pub(in crate::job) struct Suite;

/// How many lost tests a finding names (the rest are counted).
const NAMED: usize = 20;

/// How much of the suite's output a finding quotes: the tests are the
/// repository's own, visible to the agent.
const OUTPUT: usize = 2_000;

/// The suite's output as a finding quotes it: without the line where
/// pytest names the report loopd asked it for (a path of the judge's).
fn quoted(output: &str) -> String {
    output
        .lines()
        .filter(|l| !l.contains("generated xml file:"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Gate for Suite {
    fn id(&self) -> journal::Gate {
        journal::Gate::SUITE
    }

    fn stage(&self) -> Stage {
        Stage::Suite
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        run.job.suite.is_some()
    }

    fn check(&self, run: &Run<'_>, _facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let Some(suite) = &run.job.suite else {
            return Ok(Vec::new());
        };
        let command = &suite.step.run;
        let rule = run.job.rubric.tests_rule();
        let finding = |reason, problem: String, fix: String| Finding {
            reason,
            path: "the whole suite".into(),
            line: None,
            rule,
            check: None,
            problem,
            fix,
        };
        let Some((report, written)) = run.current().suite else {
            return Ok(vec![finding(
                Reason::SuiteRegressed,
                "the whole suite could not run: the change is too large to write as a tree".into(),
                "make a smaller change".into(),
            )]);
        };
        if written > 0 {
            return Ok(vec![finding(
                Reason::GoalChangedTree,
                format!("the change's code, run by the whole suite (`{command}`), wrote over or deleted {written} file(s) of the tree it ran in"),
                "leave the tree alone from code the tests run: write outputs to temporary files".into(),
            )]);
        }
        let state = run.journal.state();
        let (Some(base), Some(now)) = (
            state.suite_baseline.as_ref().and_then(|r| r.steps.first()),
            report.steps.first(),
        ) else {
            tracing::warn!("the whole suite has no run at BASE_REF to compare with");
            return Ok(Vec::new());
        };
        let r = regressions(base, now, suite.step.report);
        if r.lost.is_empty() {
            return Ok(Vec::new());
        }
        let mut named: Vec<&str> = r.lost.iter().take(NAMED).map(String::as_str).collect();
        let more = r.lost.len().saturating_sub(NAMED);
        let more_text = format!("and {more} more");
        if more > 0 {
            named.push(&more_text);
        }
        Ok(vec![finding(
            Reason::SuiteRegressed,
            format!(
                "the goal is green, but the whole suite (`{command}`) is not as it was: {} test(s) that passed at BASE_REF do not pass after the change: {}\n{}",
                r.lost.len(),
                named.join(", "),
                goal::head_and_tail(&quoted(&now.output), OUTPUT)
            ),
            format!("keep every test that passed before passing: the goal names only some tests, the rest still hold (run `{command}`)"),
        )])
    }
}
