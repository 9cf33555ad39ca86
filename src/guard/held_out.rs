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

use super::finding::Finding;
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

/// What one held-out step did, as the gate reads it.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub name: &'a str,
    pub passed: bool,
    pub timed_out: bool,
    pub output: &'a str,
    /// The failing tests' names the output shows (any runner's).
    pub failing: &'a [String],
}

/// The findings on the held-out steps. `known` says whether a name is a
/// test the held-out files define.
pub fn findings(
    steps: &[Step<'_>],
    feedback: Feedback,
    known: &dyn Fn(&str) -> bool,
    tests_rule: Option<u32>,
    head_and_tail: &dyn Fn(&str, usize) -> String,
) -> Vec<Finding> {
    steps
        .iter()
        .filter(|s| !s.passed)
        .map(|s| {
            let how = if s.timed_out {
                "timed out"
            } else {
                "failed"
            };
            let mut ids: Vec<&str> = s
                .failing
                .iter()
                .map(String::as_str)
                .filter(|n| known(n))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids.truncate(MAX_IDS);
            let problem = match feedback {
                Feedback::None => format!(
                    "a held-out goal step {how}: tests you cannot see, of the same task, found the change wrong"
                ),
                Feedback::Ids if ids.is_empty() => format!(
                    "held-out goal step `{}` {how}: tests you cannot see, of the same task, found the change wrong (no failing test could be named)",
                    s.name
                ),
                Feedback::Ids => format!(
                    "held-out goal step `{}` {how}: these tests you cannot see, of the same task, fail: {}",
                    s.name,
                    ids.join(", ")
                ),
                Feedback::Full => format!(
                    "held-out goal step `{}` {how}; its output:\n{}",
                    s.name,
                    head_and_tail(s.output, FULL_OUTPUT)
                ),
            };
            Finding {
                reason: Reason::HeldOutFailed,
                path: format!("held-out step `{}`", s.name),
                line: None,
                rule: tests_rule,
                check: None,
                problem,
                fix: "make the change right for every input the task describes, not only for the tests you can see".into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(s: &str, _: usize) -> String {
        s.to_owned()
    }

    #[test]
    fn each_feedback_says_what_it_may_and_no_more() {
        let failing = vec![
            "test_rounding_half_even".to_owned(),
            "test_secret_from_the_change".to_owned(),
        ];
        let step = Step {
            name: "hidden",
            passed: false,
            timed_out: false,
            output: "E   assert Decimal('2.50') == Decimal('2.49')\nFAILED t.py::test_rounding_half_even\n",
            failing: &failing,
        };
        let known = |n: &str| n == "test_rounding_half_even";
        let ids = findings(&[step], Feedback::Ids, &known, Some(1), &cut);
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
        let none = findings(&[step], Feedback::None, &known, None, &cut);
        assert!(!none[0].problem.contains("test_rounding") && !none[0].problem.contains("hidden"));
        let full = findings(&[step], Feedback::Full, &known, None, &cut);
        assert!(full[0].problem.contains("2.49"));
        let green = Step {
            passed: true,
            ..step
        };
        assert!(findings(&[green], Feedback::Ids, &known, None, &cut).is_empty());
    }
}
