//! The whole suite's judge: a goal narrowed to a few tests (a lead's
//! `pytest tests/test_x.py`) says nothing of the rest, and a fix that
//! makes the goal green while it breaks a test outside it is not a fix.
//! The whole suite (`[judge] suite`, or inferred from the narrowed step:
//! [`crate::runner::narrowed`]) runs on the judge-only tree at BASE_REF
//! and after the change; every test that passed at BASE_REF must still
//! pass. Tests red at BASE_REF are not the change's to fix.
//!
//! By test id where the runner wrote loopd its report
//! ([`crate::goal::results`]: pytest, `node --test`); else by the names
//! of failing tests the runner printed and its summary's count of passed
//! tests; else by the exit status when the suite was green at BASE_REF.

use crate::goal::results::Verdict;
use crate::goal::StepResult;
use crate::judges::testcount::Preset;

/// How [`regressions`] could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Test ids from the runner's report, both runs.
    Ids,
    /// Failing names and counts from what the runner printed.
    Output,
    /// The exit status: green at BASE_REF, red now.
    Exit,
    /// Nothing to compare: red at BASE_REF with no report or summary.
    Nothing,
}

/// What broke: each test that passed at BASE_REF and does not now, as
/// people read it, and how that was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regressions {
    pub lost: Vec<String>,
    pub by: By,
}

/// The tests that passed in `base` (BASE_REF) and do not in `now`.
pub fn regressions(base: &StepResult, now: &StepResult, preset: Option<Preset>) -> Regressions {
    if now.timed_out {
        return Regressions {
            lost: vec!["the whole suite did not finish within its timeout".into()],
            by: By::Exit,
        };
    }
    if let (Some(was), Some(is)) = (&base.results, &now.results) {
        let lost = was
            .iter()
            .filter(|(_, v)| **v == Verdict::Passed)
            .filter_map(|(id, _)| match is.get(id) {
                Some(Verdict::Passed) => None,
                Some(Verdict::Skipped) => Some(format!("{id} (skipped now)")),
                Some(_) => Some(id.clone()),
                None => Some(format!("{id} (no longer runs)")),
            })
            .collect();
        return Regressions { lost, by: By::Ids };
    }
    if base.results.is_some() {
        // A report at BASE_REF and none now: the run ended before its
        // runner wrote it (an exit from the change's code), or something
        // removed it. Nothing it says can be counted as passed.
        return Regressions {
            lost: vec![
                "the whole suite wrote no test report (it did at BASE_REF): its tests cannot be counted as passing".into(),
            ],
            by: By::Ids,
        };
    }
    let (was, is) = (base.read(preset), now.read(preset));
    if base.passed {
        let lost = if now.passed {
            Vec::new()
        } else if is.failing.is_empty() {
            vec![format!(
                "the whole suite: green at BASE_REF, red now (exit {})",
                now.exit_code.map_or("none".into(), |c| c.to_string())
            )]
        } else {
            is.failing.clone()
        };
        return Regressions { lost, by: By::Exit };
    }
    let mut lost: Vec<String> = is
        .failing
        .iter()
        .filter(|f| !was.failing.contains(f))
        .cloned()
        .collect();
    let passed = |r: &crate::goal::Read| match &r.counts {
        Some(Ok(c)) => Some(c.passed),
        _ => None,
    };
    if passed(&was).is_some() && passed(&is).is_none() {
        lost.push("the whole suite printed no summary loopd can read (it did at BASE_REF)".into());
    }
    let told = passed(&was).zip(passed(&is));
    if let Some((p0, p1)) = told {
        if p1 < p0 && lost.is_empty() {
            lost.push(format!(
                "fewer tests pass than at BASE_REF ({p1} now, {p0} then)"
            ));
        }
    }
    let by = if told.is_some() || !was.failing.is_empty() || !is.failing.is_empty() {
        By::Output
    } else {
        By::Nothing
    };
    Regressions { lost, by }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::results::Results;

    fn step(passed: bool, results: Option<&[(&str, Verdict)]>, output: &str) -> StepResult {
        StepResult {
            name: "suite".into(),
            command: "pytest".into(),
            exit_code: Some(if passed { 0 } else { 1 }),
            timed_out: false,
            passed,
            output: output.into(),
            duration_ms: 1,
            leftovers: 0,
            results: results.map(|r| {
                r.iter()
                    .map(|(id, v)| ((*id).to_owned(), *v))
                    .collect::<Results>()
            }),
            read: None,
        }
    }

    use Verdict::*;

    #[test]
    fn by_id_a_test_that_passed_must_still_pass_and_red_ones_are_not_the_changes() {
        let base = step(
            false,
            Some(&[
                ("t::a", Passed),
                ("t::b", Failed),
                ("t::c", Passed),
                ("t::d", Passed),
            ]),
            "",
        );
        let now = step(
            false,
            Some(&[("t::a", Failed), ("t::b", Failed), ("t::c", Skipped)]),
            "",
        );
        let r = regressions(&base, &now, Some(Preset::Pytest));
        assert_eq!(r.by, By::Ids);
        assert_eq!(
            r.lost,
            vec!["t::a", "t::c (skipped now)", "t::d (no longer runs)"]
        );
        // The goal's own red test going green is no regression.
        let fixed = step(
            true,
            Some(&[
                ("t::a", Passed),
                ("t::b", Passed),
                ("t::c", Passed),
                ("t::d", Passed),
            ]),
            "",
        );
        assert!(regressions(&base, &fixed, Some(Preset::Pytest))
            .lost
            .is_empty());
    }

    #[test]
    fn without_ids_the_printed_failures_and_the_passed_count_tell() {
        let base = step(
            false,
            None,
            "--- FAIL: TestParse (0.00s)\nFAIL\nok  \tx\t0.1s\n",
        );
        let now = step(
            false,
            None,
            "--- FAIL: TestParse (0.00s)\n--- FAIL: TestFormat (0.00s)\nFAIL\n",
        );
        let r = regressions(&base, &now, Some(Preset::Go));
        assert_eq!(r.lost, vec!["TestFormat"], "{r:?}");
        assert_eq!(r.by, By::Output);
        // Green at BASE_REF: any red now is a regression, named or not.
        let green = step(true, None, "ok\n");
        let red = step(false, None, "boom\n");
        let r = regressions(&green, &red, None);
        assert_eq!(r.by, By::Exit);
        assert_eq!(r.lost.len(), 1, "{r:?}");
        assert!(regressions(&green, &green, None).lost.is_empty());
    }

    #[test]
    fn a_report_or_summary_gone_since_base_ref_is_a_regression() {
        // The change's code ends the process before the runner reports.
        let base = step(false, Some(&[("t::a", Passed), ("t::b", Failed)]), "");
        let now = step(true, None, "");
        let r = regressions(&base, &now, Some(Preset::Pytest));
        assert_eq!(r.lost.len(), 1, "{r:?}");
        // Without ids: a summary read at BASE_REF and none now.
        let base = step(
            false,
            None,
            "FAILED t.py::test_b - x\n1 failed, 1 passed in 0.01s\n",
        );
        let now = step(false, None, "");
        let r = regressions(&base, &now, Some(Preset::Pytest));
        assert!(r.lost.iter().any(|l| l.contains("no summary")), "{r:?}");
    }

    #[test]
    fn a_suite_cut_short_by_its_timeout_is_a_regression() {
        let base = step(true, None, "");
        let mut now = step(false, None, "");
        now.timed_out = true;
        now.exit_code = None;
        assert_eq!(regressions(&base, &now, None).lost.len(), 1);
    }
}
