//! A gate for the tests alone (built with `failpoints`): it finds a file
//! named `loopd-planted-gate` that the change adds. It is here to show,
//! and to test, that a new gate is one module and one line of
//! [`super::GATES`]: nothing else in loopd names it, yet the journal keeps
//! its findings, the attempt is rejected by them, and the live view and the
//! reports show them.

use super::{Facts, Gate, Stage};
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;
use crate::workspace::ChangeKind;

/// The file name this gate finds.
const PLANTED: &str = "loopd-planted-gate";

/// See the module's doc.
pub(in crate::job) struct Planted;

impl Gate for Planted {
    fn id(&self) -> journal::Gate {
        journal::Gate::named("planted")
    }

    fn stage(&self) -> Stage {
        Stage::Session
    }

    fn check(&self, _run: &Run<'_>, facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        Ok(facts
            .diff
            .changes
            .iter()
            .filter(|c| c.status == ChangeKind::Added)
            .filter(|c| c.path.rsplit('/').next() == Some(PLANTED))
            .map(|c| Finding {
                reason: Reason::Precheck,
                path: c.path.clone(),
                line: None,
                rule: None,
                check: None,
                problem: format!("`{}` is the planted gate's file", c.path),
                fix: format!("remove `{}`", c.path),
            })
            .collect())
    }
}
