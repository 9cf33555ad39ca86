//! What a rejection tells the next attempt, and the decision itself — made
//! in code from the goal test's exit codes and the parsed verdict, never
//! from what a model says about itself.

use crate::critic::{self, CriticVerdict};
use crate::goal::{self, GoalReport};
use crate::judges::finding::Finding;

/// The most of a failing step's output that goes into the next prompt.
pub const MAX_FEEDBACK: usize = 8 * 1024;

/// Why the previous attempt was rejected: what the next prompt carries.
#[derive(Debug, Clone)]
pub enum Feedback {
    GoalFailed {
        step: String,
        command: String,
        exit: String,
        output: String,
    },
    Critic(Vec<critic::Violation>),
    CriticInvalid,
    /// Findings of the deterministic gates (protected paths, skip markers,
    /// test count), with file and line.
    Gates(Vec<Finding>),
    /// Findings of a gate after the critic (the examiner's red tests in
    /// evidence mode), then the critic's own violations.
    GatesAndCritic(Vec<Finding>, Vec<critic::Violation>),
}

/// The next attempt's prompt: the task, the rejection, the instruction.
pub fn next_prompt(task: &str, feedback: &Feedback, rubric_rules: &str) -> String {
    let mut p = String::new();
    p.push_str(task.trim_end());
    p.push_str("\n\nThe previous attempt was rejected:\n");
    match feedback {
        Feedback::GoalFailed {
            step,
            command,
            exit,
            output,
        } => {
            p.push_str(&format!(
                "The goal test failed at step `{step}` (`{command}`, {exit}). Its output:\n"
            ));
            p.push_str(&goal::head_and_tail(output.trim_end(), MAX_FEEDBACK));
            p.push('\n');
        }
        Feedback::Critic(violations) => {
            for v in violations {
                p.push_str(&v.render());
                p.push('\n');
            }
        }
        Feedback::Gates(findings) => {
            for f in findings {
                p.push_str(&f.render());
                p.push('\n');
            }
        }
        Feedback::GatesAndCritic(findings, violations) => {
            for f in findings {
                p.push_str(&f.render());
                p.push('\n');
            }
            for v in violations {
                p.push_str(&v.render());
                p.push('\n');
            }
        }
        Feedback::CriticInvalid => {
            p.push_str("The goal test passes, but the reviewer could not confirm the change. Re-check it against these rules:\n");
            p.push_str(rubric_rules);
            p.push('\n');
        }
    }
    p.push_str("Fix exactly these points, nothing else.");
    p
}

/// The decision, in code: accepted only if the goal test is green and the
/// verdict is a clean PASS.
pub fn decide(goal: &GoalReport, verdict: &CriticVerdict) -> Result<(), Feedback> {
    if let Some(step) = goal.failed_step() {
        let exit = match (step.timed_out, step.exit_code) {
            (true, _) => "timed out".to_owned(),
            (false, Some(c)) => format!("exit code {c}"),
            (false, None) => "killed by a signal".to_owned(),
        };
        return Err(Feedback::GoalFailed {
            step: step.name.clone(),
            command: step.command.clone(),
            exit,
            output: step.output.clone(),
        });
    }
    match verdict {
        CriticVerdict::Pass if goal.passed() => Ok(()),
        CriticVerdict::Fail { violations } if !violations.is_empty() => {
            Err(Feedback::Critic(violations.clone()))
        }
        _ => Err(Feedback::CriticInvalid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critic::Violation;
    use crate::goal::StepResult;

    fn goal(passed: bool) -> GoalReport {
        GoalReport {
            steps: vec![StepResult {
                name: "pytest".into(),
                command: "python3 -m pytest -q".into(),
                exit_code: Some(if passed { 0 } else { 1 }),
                timed_out: false,
                passed,
                output: "F..\n1 failed, 2 passed".into(),
                duration_ms: 5,
                leftovers: 0,
                results: None,
                read: None,
            }],
        }
    }

    #[test]
    fn the_code_decides() {
        assert!(decide(&goal(true), &CriticVerdict::Pass).is_ok());
        assert!(matches!(
            decide(&goal(false), &CriticVerdict::Pass),
            Err(Feedback::GoalFailed { .. })
        ));
        assert!(matches!(
            decide(
                &goal(true),
                &CriticVerdict::Invalid {
                    why: "prose".into()
                }
            ),
            Err(Feedback::CriticInvalid)
        ));
        assert!(matches!(
            decide(&goal(true), &CriticVerdict::Skipped),
            Err(Feedback::CriticInvalid)
        ));
        let v = Violation {
            rule: 1,
            file: "t.py".into(),
            problem: "skip".into(),
            fix: "remove it".into(),
        };
        assert!(matches!(
            decide(
                &goal(true),
                &CriticVerdict::Fail {
                    violations: vec![v]
                }
            ),
            Err(Feedback::Critic(_))
        ));
    }

    #[test]
    fn next_prompt_shapes() {
        let v = Violation {
            rule: 2,
            file: "rechnung.py".into(),
            problem: "debug print".into(),
            fix: "remove it".into(),
        };
        let p = next_prompt("Make the tests pass.", &Feedback::Critic(vec![v]), "");
        assert_eq!(p, "Make the tests pass.\n\nThe previous attempt was rejected:\nrechnung.py (rule 2): debug print — fix: remove it\nFix exactly these points, nothing else.");
        let Err(f) = decide(&goal(false), &CriticVerdict::Skipped) else {
            panic!()
        };
        let p = next_prompt("T", &f, "");
        assert!(p.starts_with("T\n\nThe previous attempt was rejected:\nThe goal test failed at step `pytest` (`python3 -m pytest -q`, exit code 1)"), "{p}");
        assert!(
            p.contains("1 failed, 2 passed")
                && p.ends_with("Fix exactly these points, nothing else.")
        );
        let long = Feedback::GoalFailed {
            step: "s".into(),
            command: "c".into(),
            exit: "exit code 1".into(),
            output: format!("HEAD{}TAIL", "x".repeat(100_000)),
        };
        let p = next_prompt("T", &long, "");
        assert!(p.len() < MAX_FEEDBACK + 500 && p.contains("HEAD") && p.contains("TAIL"));
    }
}
