//! Live progress: one plain line per thing a person waiting on a job wants
//! to see — each tool call (tool, target, ok/denied/error), each phase
//! (baseline, agent and critic sessions, gates, goal steps, verdicts), and
//! the spend against the budget after every session.
//!
//! The lines are rendered from journal entries, so `loopd run` (as they are
//! appended) and `loopd tail` (reading another process's journal, also
//! after the fact) print the same thing. Plain lines, no cursor tricks: on
//! a terminal they interleave with the log lines without garbling them, and
//! in a pipe or a CI log they stay readable.

use crate::agent::session::Role;
use crate::journal::{AttemptEnd, Entry, Event, Replay};

/// Renders journal entries as progress lines for one job.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The job's budget, when known (shown next to the spend).
    pub budget_usd: Option<f64>,
}

impl Progress {
    /// A journal observer that prints each entry's line on stderr: how a
    /// foreground job speaks while it runs.
    pub fn on_stderr(self) -> crate::journal::Observer {
        Box::new(move |entry, state| {
            if let Some(line) = self.line(entry, state) {
                eprintln!("{line}");
            }
        })
    }

    /// The line for `entry`, given the job's state *after* it was applied;
    /// `None` for an entry not worth a line (a model call, a pin).
    pub fn line(&self, entry: &Entry, state: &Replay) -> Option<String> {
        let text = match &entry.event {
            Event::JobStarted { job_id, task, .. } => {
                format!("job {job_id}: {}", first_line(task))
            }
            Event::Resumed { pid } => format!("resumed by process {pid}"),
            Event::Baseline {
                report,
                test_count_off,
                held_out,
                suite,
                ..
            } => {
                let mut line = match report.failed_step() {
                    Some(s) => format!(
                        "baseline: red at `{}` ({} of {} steps fail)",
                        s.name,
                        report.steps.iter().filter(|s| !s.passed).count(),
                        report.steps.len()
                    ),
                    None => "baseline: every goal step passes".to_owned(),
                };
                for (step, why) in test_count_off {
                    line.push_str(&format!(
                        "\nTEST COUNT GATE OFF for `{step}`: {why}"
                    ));
                }
                if let Some(h) = held_out {
                    let failed = h.steps.iter().filter(|s| !s.passed).count();
                    line.push_str(&format!(
                        "\nheld-out tests at baseline: {} steps, {failed} red",
                        h.steps.len()
                    ));
                }
                if let Some(step) = suite.as_ref().and_then(|r| r.steps.first()) {
                    let passing = step.results.as_ref().map(|r| {
                        r.values()
                            .filter(|v| **v == crate::goal::results::Verdict::Passed)
                            .count()
                    });
                    line.push_str(&format!(
                        "\nthe whole suite at baseline: {}{} ({:.1} s)",
                        if step.passed { "green" } else { "red" },
                        passing.map_or(String::new(), |n| format!(", {n} tests pass")),
                        step.duration_ms as f64 / 1000.0
                    ));
                }
                line
            }
            Event::AttemptStarted { attempt, .. } => format!("attempt {attempt}: started"),
            Event::SessionStarted { attempt, role, .. } => {
                format!("attempt {attempt}: {} session started", role_name(*role))
            }
            Event::ToolCall(c) => format!(
                "  {} {}{} · {} · {} ms",
                role_name(c.role),
                c.tool,
                c.target
                    .as_deref()
                    .map(|t| format!(" {t}"))
                    .unwrap_or_default(),
                c.outcome,
                c.latency_ms
            ),
            Event::SessionFinished(f) => {
                let how = match (&f.failure, f.stopped) {
                    (Some(e), _) => format!("failed ({})", e.reason),
                    (None, Some(r)) => format!("stopped ({r})"),
                    (None, None) => "finished".to_owned(),
                };
                let mut line = format!(
                    "attempt {}: {} session {how} · {} turns · {} tool calls · ${:.4} · {}",
                    f.attempt,
                    role_name(f.role),
                    f.spend.turns,
                    f.tool_calls,
                    f.spend.cost_usd,
                    self.spend_line(state)
                );
                for r in &f.rulings {
                    line.push_str(&format!(
                        "\n  the critic rules examiner test {} {}",
                        r.test,
                        match (&r.found_in, r.ruling) {
                            (Some(src), _) => format!("wrong, quoting {src}: dropped for the job"),
                            (None, crate::examiner::evidence::Word::Wrong) => {
                                "wrong, on a quote found nowhere: it stands".to_owned()
                            }
                            (None, crate::examiner::evidence::Word::Right) => "right".to_owned(),
                        }
                    ));
                }
                line
            }
            Event::HookDenied { attempt, finding } => {
                format!("attempt {attempt}: the hook denied a call: {}", finding.problem)
            }
            Event::ToolDenied(d) => format!(
                "attempt {}: the hook denied a {} call: {}",
                d.attempt,
                d.tool,
                first_line(&d.reason)
            ),
            Event::GatewayRefused(r) => format!(
                "attempt {}: the gateway refused {} {}: {}",
                r.attempt, r.method, r.target, r.why
            ),
            Event::EscalationRequested { attempt, test, .. } => {
                format!("attempt {attempt}: the agent asked to escalate `{test}`")
            }
            Event::GateChecked {
                attempt,
                gate,
                findings,
            } => {
                let name = gate.label();
                match findings.first() {
                    None => format!("attempt {attempt}: {name}: passed"),
                    Some(f) => format!(
                        "attempt {attempt}: {name}: {} finding{} — {}",
                        findings.len(),
                        if findings.len() == 1 { "" } else { "s" },
                        f.render()
                    ),
                }
            }
            Event::ProtectionLifted { attempt, files } => format!(
                "attempt {attempt}: changed, allowed by [protect] allow (recorded, not rejected): {}",
                files.join(", ")
            ),
            Event::GoalRun {
                attempt, report, ..
            } => {
                let steps: Vec<String> = report
                    .steps
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} ({:.1} s)",
                            s.name,
                            if s.passed { "ok" } else { "FAILED" },
                            s.duration_ms as f64 / 1000.0
                        )
                    })
                    .collect();
                let verdict = if report.passed() { "green" } else { "red" };
                format!("attempt {attempt}: goal test {verdict}: {}", steps.join(", "))
            }
            Event::HeldOutRun {
                attempt,
                report,
                files,
                ..
            } => {
                let verdict = if report.passed() { "green" } else { "red" };
                let failed = report.steps.iter().filter(|s| !s.passed).count();
                format!(
                    "attempt {attempt}: held-out tests {verdict} ({} steps, {failed} failed, {files} held-out files on a judge-only tree)",
                    report.steps.len()
                )
            }
            Event::Examined(e) => match &e.why {
                Some(why) if e.kept().next().is_none() => {
                    format!("examiner: no test judges this job ({why})")
                }
                _ => format!(
                    "examiner: {} test file(s) of `{}`; at BASE_REF {} red (what the task asks), {} green, {} dropped",
                    e.tests.len(),
                    e.model,
                    e.failing_at_base.len(),
                    e.passing_at_base.len(),
                    e.dropped.len()
                ),
            },
            Event::ExaminerRun {
                attempt, results, ..
            } => {
                let failing = results.as_ref().map(|r| {
                    r.values()
                        .filter(|v| **v != crate::goal::results::Verdict::Passed)
                        .count()
                });
                match failing {
                    Some(0) => format!("attempt {attempt}: the examiner's tests green on a judge-only tree"),
                    Some(n) => format!("attempt {attempt}: the examiner's tests RED on a judge-only tree ({n} not passing)"),
                    None => format!("attempt {attempt}: the examiner's tests wrote no report"),
                }
            }
            Event::SuiteRun {
                attempt, report, ..
            } => {
                let ms: u64 = report.steps.iter().map(|s| s.duration_ms).sum();
                let verdict = if report.passed() { "green" } else { "red" };
                format!("attempt {attempt}: the whole suite {verdict} on a judge-only tree ({:.1} s)", ms as f64 / 1000.0)
            }
            Event::InterdiffTaken {
                attempt,
                from,
                files,
                unnamed,
            } => {
                let mut line = format!(
                    "attempt {attempt}: {} file{} changed since attempt {from}",
                    files.len(),
                    if files.len() == 1 { "" } else { "s" }
                );
                if !unnamed.is_empty() {
                    line.push_str(&format!(" (no finding named: {})", unnamed.join(", ")));
                }
                line
            }
            Event::AttemptEnded { record, end } => match end {
                AttemptEnd::Accepted => format!("attempt {}: ACCEPTED", record.n),
                AttemptEnd::Rejected { .. } => {
                    let why = match (&record.rejected_by, record.goal_passed) {
                        (Some(r), _) => format!("by the {r} gate"),
                        (None, false) => format!(
                            "goal test red at `{}`",
                            record.failed_step.as_deref().unwrap_or("?")
                        ),
                        (None, true) => format!("critic {}", record.critic),
                    };
                    format!("attempt {}: rejected ({why}); the findings become the next prompt", record.n)
                }
                AttemptEnd::Stopped { ending } => {
                    format!("attempt {}: stopped ({})", record.n, ending.reason)
                }
            },
            Event::JobEnded { ending } => {
                format!("job ended: {} — {}", ending.reason, ending.detail)
            }
            Event::Suspended => "job suspended; it resumes from its journal".to_owned(),
            Event::Parked {
                stash_commit,
                error,
                submodules,
            } => {
                let mut parts = Vec::new();
                match (stash_commit, error) {
                    (Some(c), _) => {
                        parts.push(format!("work parked: `git stash apply {c}` brings it back"))
                    }
                    (None, Some(e)) => parts.push(format!("parking the work FAILED: {e}")),
                    (None, None) => {}
                }
                for sub in submodules {
                    match (&sub.stash_commit, &sub.error) {
                        (_, Some(e)) => parts.push(format!(
                            "parking the work inside `{}` FAILED: {e}",
                            sub.path
                        )),
                        (Some(c), None) => parts.push(format!(
                            "work inside `{0}` parked: `git -C {0} stash apply {c}` brings it back",
                            sub.path
                        )),
                        (None, None) => {}
                    }
                }
                if parts.is_empty() {
                    return None;
                }
                parts.join("; ")
            }
            Event::Committed { commit } => format!("committed {commit}"),
            Event::Pushed { branch, commit, .. } => format!("pushed {commit} to {branch}"),
            Event::PullRequest { url, opened_now, .. } => {
                if *opened_now {
                    format!("pull request opened: {url}")
                } else {
                    format!("pull request exists: {url}")
                }
            }
            Event::Finalized { state } => format!("final state: {}", state.as_str()),
            Event::Confined {
                sandbox,
                network,
                judge,
            } => match sandbox {
                crate::sandbox::Confinement::Landlock => format!(
                    "sandbox: the agent, the critic and the goal steps run under Landlock; network: {}; judge: {}",
                    match network {
                        Some(crate::sandbox::Network::GatewayOnly) => {
                            "the gateway only (a private network namespace)"
                        }
                        _ => "OPEN (whatever this user can reach)",
                    },
                    match judge {
                        Some(crate::sandbox::Judge::Hermetic) => {
                            "hermetic (BASE_REF plus the judged change, a fresh HOME, per run)"
                        }
                        _ => "SHARES THE WORKTREE (no user namespace with overlays)",
                    }
                ),
                crate::sandbox::Confinement::Unsupported => {
                    "NO SANDBOX: this kernel has no Landlock".to_owned()
                }
                crate::sandbox::Confinement::Off => {
                    "NO SANDBOX: `[sandbox] enabled = false`".to_owned()
                }
            },
            Event::Nudged(n) => format!(
                "attempt {}: the hook nudged the agent: its {} call repeated; one more repeat stops the session",
                n.attempt, n.tool
            ),
            Event::Escalated { escalation } => format!(
                "attempt {}: the agent ESCALATED `{}`: {}",
                escalation.attempt,
                escalation.test,
                first_line(&escalation.claim)
            ),
            Event::Reopened { note, .. } => match note {
                Some(n) => format!("job reopened by `loopd resume`; the note: {}", first_line(n)),
                None => "job reopened by `loopd resume`".to_owned(),
            },
                        Event::Restored { stash_commit } => {
                format!("the parked work {stash_commit} is back in the working tree")
            }
            Event::SetAside {
                attempt,
                moved,
                removed,
            } => format!(
                "attempt {attempt}: {} file(s) the judges do not see, new since the baseline, set aside before the goal test",
                moved.len() + removed.len()
            ),
            Event::ModelCall(_)
            | Event::MeteredCall(_)
            | Event::DiffTaken { .. }
            | Event::CredentialsHeld { .. }
            | Event::CredentialsReleased { .. }
            | Event::GitDirPinned { .. }
            | Event::LessonAudited { .. }
            | Event::LessonsLearned { .. } => return None,
        };
        // A command, a path or a claim in it is the agent's text: no
        // escape sequence of its reaches the terminal.
        Some(crate::util::printable(&text).into_owned())
    }

    /// `job so far $0.0123 of $2.00 budget, 11 turns`
    fn spend_line(&self, state: &Replay) -> String {
        let spend = state.spend();
        match self.budget_usd {
            Some(b) => format!(
                "job so far ${:.4} of ${b:.2} budget, {} turns",
                spend.cost_usd, spend.turns
            ),
            None => format!("job so far ${:.4}, {} turns", spend.cost_usd, spend.turns),
        }
    }
}

/// The tracing target of a warning that a live line also says (a gate's
/// finding, a stop for no progress, files set aside): with live lines on,
/// stderr leaves it to the live line, and the job's log keeps it — each
/// event is said once.
pub const SAID: &str = "loopd::said";

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Agent => "agent",
        Role::Critic => "critic",
        Role::Examiner => "examiner",
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    let mut out: String = line.chars().take(100).collect();
    if line.chars().count() > 100 || text.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::ToolCall;
    use crate::journal::Ending;
    use crate::outcome::Reason;

    fn entry(event: Event) -> Entry {
        Entry {
            ts: "2026-11-30T00:00:00Z".into(),
            ms: 0,
            event,
        }
    }

    #[test]
    fn tool_calls_and_phases_read_as_lines() {
        let live = Progress {
            budget_usd: Some(2.0),
        };
        let mut state = Replay::default();
        let mut lines = Vec::new();
        for event in [
            Event::AttemptStarted {
                attempt: 1,
                prompt: "fix it".into(),
            },
            Event::SessionStarted {
                attempt: 1,
                role: Role::Agent,
                session: 0,
            },
            Event::ToolCall(ToolCall {
                attempt: 1,
                role: Role::Agent,
                session: 0,
                tool: "Bash".into(),
                args_sha256: "0".repeat(64),
                tool_use_id: "t1".into(),
                latency_ms: 12,
                outcome: "denied".into(),
                target: Some("git push".into()),
            }),
            Event::GateChecked {
                attempt: 1,
                gate: crate::journal::Gate::DIFF,
                findings: vec![],
            },
            Event::JobEnded {
                ending: Ending {
                    reason: Reason::BudgetUsd,
                    detail: "the budget_usd cap was reached".into(),
                },
            },
        ] {
            let e = entry(event);
            state.apply(&e);
            lines.extend(live.line(&e, &state));
        }
        assert_eq!(
            lines,
            [
                "attempt 1: started",
                "attempt 1: agent session started",
                "  agent Bash git push · denied · 12 ms",
                "attempt 1: diff gate: passed",
                "job ended: budget_usd — the budget_usd cap was reached",
            ]
        );
    }

    #[test]
    fn a_target_keeps_a_long_paths_end_and_a_commands_first_line() {
        let target = |name: &str, input| {
            crate::guard::tool_target(&crate::agent::claude::tool_call(
                "t".into(),
                name.into(),
                input,
            ))
        };
        let long = format!("/{}/rechnung.py", "d".repeat(120));
        let t = target("Read", serde_json::json!({ "file_path": long })).expect("target");
        assert!(t.starts_with('…') && t.ends_with("/rechnung.py"), "{t}");
        assert_eq!(t.chars().count(), crate::guard::TARGET_MAX);
        let t = target(
            "Bash",
            serde_json::json!({ "command": "pytest -q\necho done" }),
        );
        assert_eq!(t.as_deref(), Some("pytest -q…"));
        assert_eq!(
            target("TodoWrite", serde_json::json!({ "todos": [] })),
            None
        );
    }
}
