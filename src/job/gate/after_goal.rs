//! What the goal test did, which ran the agent's code. A hermetic judge
//! ran it in a tree of its own: what it wrote over that tree is found
//! there ([`Written`]). A shared judge ran it in the worktree: the diff gate
//! again on the tree it left, and the drift gate — the change must be what
//! it was before the goal test ([`Drift`]).

use super::{Facts, Gate, Stage};
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// A hermetic goal run's writes over its own tree: a protected path it
/// wrote or deleted (a test of BASE_REF rewritten before the runner
/// collected it, runner configuration) is `protected_path`; any other file
/// of the change or of BASE_REF is `goal_changed_tree`. What it only
/// created is its own. And each step whose runner resolved elsewhere than
/// at BASE_REF: `runner_changed`.
pub(in crate::job) struct Written;

impl Gate for Written {
    fn id(&self) -> journal::Gate {
        journal::Gate::DIFF_AFTER_GOAL
    }

    fn stage(&self) -> Stage {
        Stage::Goal
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        run.hermetic.is_some()
    }

    fn check(&self, run: &Run<'_>, _facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let written = run
            .journal
            .state()
            .current
            .as_ref()
            .map(|c| c.goal_written.clone())
            .unwrap_or_default();
        let policy = run.env.policy.compile().map_err(JobError::Policy)?;
        let rule = run.job.rubric.tests_rule();
        let mut findings = runner_changed(run);
        findings.extend(written
            .iter()
            .map(|w| {
                let path = w.path().to_owned();
                let what = match w {
                    crate::workspace::layers::Written::Changed(_) => "modified",
                    crate::workspace::layers::Written::Deleted(_) => "deleted",
                };
                let protected = policy.protected(&path).or_else(|| {
                    run.hermetic.as_ref()?.submodule_of(&path).map(|sub| {
                        format!("`{sub}` is a submodule, judged as it was checked out")
                    })
                });
                match protected {
                    Some(why) => Finding {
                        reason: Reason::ProtectedPath,
                        problem: format!("`{path}` was {what} while the goal test ran this attempt's code ({why})"),
                        fix: format!("leave `{path}` alone from code the tests run; fix the code, not the tests or how they run"),
                        path,
                        line: None,
                        rule,
                        check: None,
                    },
                    None => Finding {
                        reason: Reason::GoalChangedTree,
                        problem: format!("`{path}` changed while the goal test ran (its code {what} it): what would be committed is not what the judges saw run"),
                        fix: "leave the tree as it is from code the tests run: write outputs to ignored or temporary files, never to the change or the tests".into(),
                        path,
                        line: None,
                        rule: None,
                        check: None,
                    },
                }
            }));
        Ok(findings)
    }
}

/// The diff gate again after a goal test in the worktree, and the drift
/// gate.
pub(in crate::job) struct Drift;

impl Gate for Drift {
    fn id(&self) -> journal::Gate {
        journal::Gate::DIFF_AFTER_GOAL
    }

    fn stage(&self) -> Stage {
        Stage::Goal
    }

    fn applies(&self, run: &Run<'_>) -> bool {
        run.hermetic.is_none()
    }

    fn check(&self, run: &Run<'_>, facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let after = run.take_diff(&facts.dir.join("diff-after-goal.patch"))?;
        let texts = run.ws.changed_texts(run.base_oid, &after, |_| true);
        let mut findings = super::diff::change_findings(run, &after, &texts)?;
        for f in &mut findings {
            f.problem = format!("{}, while the goal test ran this attempt's code", f.problem);
        }
        // Whatever else it changed would be committed unjudged.
        let named: Vec<String> = findings.iter().map(|f| f.path.clone()).collect();
        findings.extend(
            crate::judges::drift::findings(facts.diff, &after)
                .into_iter()
                .filter(|f| !named.contains(&f.path)),
        );
        Ok(findings)
    }
}

/// Each goal step whose runner resolved elsewhere in this attempt's
/// runs than at BASE_REF ([`crate::runner::moved`]): `runner_changed`.
fn runner_changed(run: &Run<'_>) -> Vec<Finding> {
    let state = run.journal.state();
    let base = &state.baseline_origins;
    let Some(now) = state.current.as_ref().map(|c| &c.goal_origins) else {
        return Vec::new();
    };
    let root = format!("{}/", run.ws.root().display());
    let mut out = Vec::new();
    for (step, origins) in now {
        let name = step.strip_suffix(crate::job::ALONE).unwrap_or(step);
        let Some(was) = base.get(name).filter(|b| !b.is_empty()) else {
            continue;
        };
        let moved = crate::runner::moved(was, origins, &root);
        if moved.is_empty() {
            continue;
        }
        tracing::warn!(target: crate::live::SAID, step = %name, moved = moved.len(), "the goal step's runner resolved elsewhere than at BASE_REF");
        out.push(Finding {
            reason: Reason::RunnerChanged,
            path: moved
                .iter()
                .filter_map(|m| m.rsplit(" → ").next())
                .find_map(|o| o.strip_prefix(&root))
                .unwrap_or(name)
                .to_owned(),
            line: None,
            rule: run.job.rubric.tests_rule(),
            check: None,
            problem: format!(
                "the test runner of goal step `{name}` resolved elsewhere than at BASE_REF: {}; what ran as the tests is not the runner that ran at BASE_REF",
                moved.join("; ")
            ),
            fix: "do not add modules or programs named like the test runner or what it loads, and do not change which interpreter runs it; fix the code under test".into(),
        });
    }
    out
}
