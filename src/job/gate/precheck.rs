//! The pre-critic on a green attempt: what the rubric forbids and the
//! added lines show (debug output, swallowed errors, comments, ...), and
//! what fits the change to the tests — runner markers and a module that
//! shadows the code under test on every attempt; names, expected values and
//! conventions from a late attempt on. Decided without a model call,
//! before the critic, which costs one.

use super::{Facts, Gate, Stage};
use crate::goal::GoalReport;
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::{Check, Finding};
use crate::judges::precheck::{self, Lang};
use crate::outcome::Reason;
use crate::workspace::{self, Diff};

/// The most test files of BASE_REF a late attempt's special-casing check
/// reads for the values the failing tests expect.
const EXPECTED_FILES: usize = 500;

/// See the module's doc.
pub(in crate::job) struct Precheck;

impl Gate for Precheck {
    fn id(&self) -> journal::Gate {
        journal::Gate::PRECHECK
    }

    fn stage(&self) -> Stage {
        Stage::GreenGoal
    }

    fn check(&self, run: &Run<'_>, facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let diff = facts.diff;
        let files = facts.texts(|p| Lang::of(p).is_some());
        let plan = &run.job.rubric.precheck_plan;
        let mut found = plan.run(&run.job.task, &diff.added, &files);
        let late = run.strict(facts.n);
        let (failing, expected) = if late {
            failing_and_expected(run, facts.baseline)
        } else {
            (Vec::new(), Vec::new())
        };
        let (cases, values) = test_cases_at_base(run);
        let mut fitted =
            precheck::fitting::findings(&diff.added, &files, &cases, &values, &run.job.task, late);
        fitted.extend(precheck::fitting::test_patching(&diff.added, &files));
        fitted.extend(shadowing_modules(run, diff));
        for mut f in precheck::test_special_casing(&diff.added, &files, late, &failing, &expected)
            .into_iter()
            .chain(fitted)
        {
            f.rule = run.job.rubric.tests_rule();
            f.check = Some(Check::TestSpecialCasing);
            found.push(f);
        }
        Ok(found)
    }
}

/// A Python file the change adds among the tests under the name of a
/// module of BASE_REF (`tests/rechnung.py` beside `rechnung.py`): on
/// the tests' `sys.path` it stands in for the code under test.
fn shadowing_modules(run: &Run<'_>, diff: &Diff) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in diff
        .changes
        .iter()
        .filter(|c| c.status == workspace::ChangeKind::Added)
    {
        let Some((dir, name)) = c.path.rsplit_once('/') else {
            continue;
        };
        // A module (`tests/rechnung.py`), a package
        // (`tests/rechnung/__init__.py`) or an extension module
        // (`tests/rechnung.so`): each is imported before the real one.
        let (dir, stem) = match name {
            "__init__.py" => match dir.rsplit_once('/') {
                Some((parent, package)) => (parent, package),
                None => continue,
            },
            _ => match name.strip_suffix(".py").or_else(|| {
                name.split_once('.')
                    .filter(|(_, e)| e.ends_with("so") || *e == "pyd")
                    .map(|(s, _)| s)
            }) {
                Some(stem) => (dir, stem),
                None => continue,
            },
        };
        if !dir.split('/').any(|d| d == "tests" || d == "test") {
            continue;
        }
        let shadowed = [
            format!("{stem}.py"),
            format!("src/{stem}.py"),
            format!("{stem}/__init__.py"),
            format!("src/{stem}/__init__.py"),
        ]
        .into_iter()
        .find(|p| {
            !matches!(
                run.ws.base_content(run.base_oid, p),
                workspace::Content::Deleted
            )
        });
        if let Some(module) = shadowed {
            out.push(Finding {
                reason: Reason::Precheck,
                path: c.path.clone(),
                line: None,
                rule: None,
                check: None,
                problem: format!("the change adds `{}` among the tests under the name of `{module}`: the tests would import it instead of the code under test", c.path),
                fix: format!("remove `{}`; fix `{module}` itself", c.path),
            });
        }
    }
    out
}

/// The text of each test file of BASE_REF in a language the pre-critic
/// reads, at most [`EXPECTED_FILES`] of them.
fn tests_at_base<'r>(run: &'r Run<'_>) -> impl Iterator<Item = (&'r str, String)> + 'r {
    run.env
        .policy
        .files
        .iter()
        .filter(|(path, why)| {
            why.as_str() == crate::judges::tamper::TEST_AT_BASE && Lang::of(path).is_some()
        })
        .take(EXPECTED_FILES)
        .filter_map(|(path, _)| match run.ws.base_content(run.base_oid, path) {
            workspace::Content::Text { text } => Some((path.as_str(), text)),
            _ => None,
        })
}

/// Every assertion's inputs and expected values in the test files of
/// BASE_REF (at most [`EXPECTED_FILES`] of them), and every value they
/// spell out: what a change fitted to the tests repeats.
fn test_cases_at_base(
    run: &Run<'_>,
) -> (
    Vec<precheck::fitting::Case>,
    std::collections::HashSet<String>,
) {
    let mut cases = Vec::new();
    let mut values = std::collections::HashSet::new();
    for (path, text) in tests_at_base(run) {
        cases.extend(precheck::fitting::cases_in_tests(path, &text));
        values.extend(precheck::fitting::values_in_tests(path, &text));
    }
    (cases, values)
}

/// The tests that failed at baseline, and the values they expect: from
/// the runner's output and from the failing tests' own bodies in the
/// test files of BASE_REF (at most [`EXPECTED_FILES`] of them).
fn failing_and_expected(run: &Run<'_>, baseline: &GoalReport) -> (Vec<String>, Vec<String>) {
    let failing: Vec<String> = baseline
        .steps
        .iter()
        .flat_map(|s| s.read(None).failing.clone())
        .collect();
    let mut expected: Vec<String> = baseline
        .steps
        .iter()
        .flat_map(|s| s.read(None).expected.clone())
        .collect();
    if !failing.is_empty() {
        for (path, text) in tests_at_base(run) {
            expected.extend(precheck::expected_in_tests(path, &text, &failing));
        }
    }
    expected.sort();
    expected.dedup();
    (failing, expected)
}
