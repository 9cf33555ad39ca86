//! The held-out gate: each red held-out step, told as `[guard]
//! held_out_feedback` allows, and each held-out step whose test count
//! dropped below its count at BASE_REF. The held-out run itself is the
//! judge's (`Run::run_held_out`); this gate reads what the journal kept of
//! it.

use super::{Facts, Gate, Stage};
use crate::goal;
use crate::goal::held_out;
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// See the module's doc.
pub(in crate::job) struct HeldOut;

impl Gate for HeldOut {
    fn id(&self) -> journal::Gate {
        journal::Gate::HELD_OUT
    }

    fn stage(&self) -> Stage {
        Stage::HeldOut
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        !run.job.held_out.is_empty()
    }

    fn check(&self, run: &Run<'_>, _facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        Ok(held_out_findings(run))
    }
}

/// The held-out gate: each red held-out step, told as `[guard]
/// held_out_feedback` allows, and each held-out step whose test count
/// dropped below its count at BASE_REF.
fn held_out_findings(run: &Run<'_>) -> Vec<Finding> {
    let rule = run.job.rubric.tests_rule();
    let Some(report) = run.current().held_out else {
        return vec![failed(
            rule,
            "the held-out steps could not run: the change is too large to write as a tree",
            "make a smaller change",
        )];
    };
    let overwrote = run.current().held_out_overwrote;
    if overwrote > 0 {
        // No name, no count: they may be held-out files', and which or
        // how many is the candidate's to choose. Under `none`, not even
        // how: the one bit every red held-out run is.
        if run.job.guard.held_out_feedback == held_out::Feedback::None {
            return vec![held_out::one_bit(rule)];
        }
        return vec![failed(
            rule,
            "the change's code, run by the held-out steps, wrote over or deleted files of the tree it ran in",
            "leave the tree alone from code the tests run: write outputs to temporary files",
        )];
    }
    let outcomes = match run.current().held_out_outcomes {
        o if !o.is_empty() => o,
        // A journal of a loopd that kept the output: read it now.
        _ => run.held_out_outcomes(&report),
    };
    held_out::findings(
        &outcomes,
        run.job.guard.held_out_feedback,
        &|name| {
            report
                .steps
                .iter()
                .find(|s| s.name == name)
                .map(|s| goal::head_and_tail(&s.output, held_out::FULL_OUTPUT))
        },
        rule,
    )
}

/// A finding on the held-out steps as a whole, naming no file of theirs.
fn failed(rule: Option<u32>, problem: &str, fix: &str) -> Finding {
    Finding {
        reason: Reason::HeldOutFailed,
        path: "held-out steps".into(),
        line: None,
        rule,
        check: None,
        problem: problem.into(),
        fix: fix.into(),
    }
}
