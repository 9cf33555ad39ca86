//! The held-out gate: a held-out goal step that is red on the judge-only
//! tree rejects the attempt (`held_out_failed`), and what the next prompt
//! learns of it is what the lead chose ([`Feedback`]) — by default the ids
//! of the failing tests, never their source or the values they expect, so
//! the agent cannot fit the change to them. The ids are taken only where
//! the held-out files define a test of that name: the candidate's code
//! runs in that step and could print anything as a "failing test". Which
//! of the held-out tests fail is still told — by design, at most one bit
//! per held-out test per attempt (`none` tells nothing).

use serde::{Deserialize, Serialize};

use crate::judges::finding::Finding;
use crate::outcome::Reason;

/// `[guard] held_out_feedback`: what a red held-out step tells the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feedback {
    /// The failing tests' names: no source, no expected values.
    #[default]
    Ids,
    /// That a held-out step failed, and nothing else.
    None,
    /// The step's output, head and tail (which may quote the tests).
    Full,
}

impl Feedback {
    pub fn parse(v: &str) -> Option<Feedback> {
        match v.trim() {
            "ids" => Some(Feedback::Ids),
            "none" => Some(Feedback::None),
            "full" => Some(Feedback::Full),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Feedback::Ids => "ids",
            Feedback::None => "none",
            Feedback::Full => "full",
        }
    }
}

/// The most failing-test names `ids` feedback carries.
pub const MAX_IDS: usize = 20;

/// The most of a step's output `full` feedback carries.
pub const FULL_OUTPUT: usize = 4 * 1024;

/// What the test-count gate found of one held-out step, decided when the
/// step ran. Only the verdict is kept and told, never a number: the
/// candidate's code runs in that step and prints what the count is read
/// from, so a quoted count would carry two numbers of its choosing —
/// read from the hidden files — into the next prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountCheck {
    /// The step has no count (no `report`, or none at BASE_REF).
    #[default]
    NotCounted,
    /// As many tests ran and passed as at BASE_REF, no more skipped.
    Held,
    /// Fewer ran or passed, or more were skipped or deselected.
    Dropped,
    /// Counted at BASE_REF, unreadable now.
    Unreadable,
}

/// One held-out step as the journal keeps it: its outcome and the ids of
/// its failing tests that the held-out files define (at most
/// [`MAX_IDS`]) — never its output, which may quote the hidden tests'
/// source and expected values (`full` keeps that in the report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub name: String,
    pub passed: bool,
    pub timed_out: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    #[serde(default)]
    pub count: CountCheck,
}

impl Outcome {
    /// Whether the step found the change wrong, by its exit or its count.
    pub fn red(&self) -> bool {
        !self.passed || matches!(self.count, CountCheck::Dropped | CountCheck::Unreadable)
    }
}

/// The ids a held-out step's output names that the held-out files define
/// (`known`), sorted, at most [`MAX_IDS`].
pub fn known_ids(failing: &[String], known: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut ids: Vec<String> = failing.iter().filter(|n| known(n)).cloned().collect();
    ids.sort_unstable();
    ids.dedup();
    ids.truncate(MAX_IDS);
    ids
}

/// The one bit `none` feedback tells, whatever failed and however: the
/// same words for a red step, a count drop and a run that wrote over its
/// tree.
pub fn one_bit(tests_rule: Option<u32>) -> Finding {
    Finding {
        reason: Reason::HeldOutFailed,
        path: "held-out steps".into(),
        line: None,
        rule: tests_rule,
        check: None,
        problem: "tests you cannot see, of the same task, found the change wrong".into(),
        fix: FIX.into(),
    }
}

const FIX: &str =
    "make the change right for every input the task describes, not only for the tests you can see";

/// The findings on the held-out steps. `none` feedback is one bit: one
/// finding whatever failed and however; `ids` names each red step and the
/// ids kept; `full` quotes a red step's output (`output`: by step name,
/// kept only under `full`). No count is ever quoted.
pub fn findings(
    steps: &[Outcome],
    feedback: Feedback,
    output: &dyn Fn(&str) -> Option<String>,
    tests_rule: Option<u32>,
) -> Vec<Finding> {
    let finding = |path: String, problem: String| {
        Finding {
        reason: Reason::HeldOutFailed,
        path,
        line: None,
        rule: tests_rule,
        check: None,
        problem,
        fix: "make the change right for every input the task describes, not only for the tests you can see".into(),
    }
    };
    let red: Vec<&Outcome> = steps.iter().filter(|s| s.red()).collect();
    if red.is_empty() {
        return Vec::new();
    }
    if feedback == Feedback::None {
        return vec![one_bit(tests_rule)];
    }
    red.into_iter()
        .map(|s| {
            let how = match (s.timed_out, s.passed) {
                (true, _) => "timed out",
                (false, false) => "failed",
                (false, true) => "ran fewer of its tests than at BASE_REF, or passed fewer, or skipped more",
            };
            let path = format!("held-out step `{}`", s.name);
            let problem = match feedback {
                Feedback::Full => format!(
                    "held-out goal step `{}` {how}; its output:\n{}",
                    s.name,
                    output(&s.name).unwrap_or_default()
                ),
                _ if s.failing.is_empty() => format!(
                    "held-out goal step `{}` {how}: tests you cannot see, of the same task, found the change wrong (no failing test could be named)",
                    s.name
                ),
                _ => format!(
                    "held-out goal step `{}` {how}: these tests you cannot see, of the same task, fail: {}",
                    s.name,
                    s.failing.join(", ")
                ),
            };
            finding(path, problem)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_feedback_says_what_it_may_and_no_more() {
        let failing = vec![
            "test_rounding_half_even".to_owned(),
            "test_secret_from_the_change".to_owned(),
        ];
        let known = |n: &str| n == "test_rounding_half_even";
        let step = Outcome {
            name: "hidden".into(),
            passed: false,
            timed_out: false,
            failing: known_ids(&failing, &known),
            count: CountCheck::NotCounted,
        };
        let output = |_: &str| Some("E   assert Decimal('2.50') == Decimal('2.49')\n".to_owned());
        let ids = findings(std::slice::from_ref(&step), Feedback::Ids, &output, Some(1));
        assert_eq!(ids.len(), 1);
        assert_eq!(ids[0].reason, Reason::HeldOutFailed);
        assert!(
            ids[0].problem.contains("test_rounding_half_even"),
            "{}",
            ids[0].problem
        );
        // A name the held-out files do not define is the candidate's print.
        assert!(!ids[0].problem.contains("test_secret_from_the_change"));
        assert!(!ids[0].problem.contains("2.49"), "no expected values");
        let full = findings(std::slice::from_ref(&step), Feedback::Full, &output, None);
        assert!(full[0].problem.contains("2.49"));
        let green = Outcome {
            passed: true,
            failing: vec![],
            ..step.clone()
        };
        assert!(findings(std::slice::from_ref(&green), Feedback::Ids, &output, None).is_empty());
    }

    /// `none` is one bit: two red steps, one by its exit and one by its
    /// count, give one finding that names neither; no feedback quotes a
    /// number.
    #[test]
    fn none_is_one_bit_and_no_feedback_quotes_a_count() {
        let red = Outcome {
            name: "hidden-a".into(),
            passed: false,
            timed_out: false,
            failing: vec!["test_a".into()],
            count: CountCheck::Held,
        };
        let dropped = Outcome {
            name: "hidden-b".into(),
            passed: true,
            failing: vec![],
            count: CountCheck::Dropped,
            ..red.clone()
        };
        let steps = [red, dropped];
        let none = findings(&steps, Feedback::None, &|_| None, None);
        assert_eq!(none.len(), 1);
        assert!(!none[0].problem.contains("hidden") && !none[0].problem.contains("test_a"));
        let ids = findings(&steps, Feedback::Ids, &|_| None, None);
        assert_eq!(ids.len(), 2);
        for f in &ids {
            assert!(
                !f.problem.chars().any(|c| c.is_ascii_digit()),
                "{}",
                f.problem
            );
        }
    }
}
