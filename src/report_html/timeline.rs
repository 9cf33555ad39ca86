//! Each attempt's timeline, folded from the journal's entries: the agent
//! session, the deterministic gates, every goal step and the critic, each
//! with when it started (since the attempt started) and how long it took.
//!
//! Durations come from what the journal recorded: a session's own
//! `wall_ms`, a goal step's `duration_ms`. A gate records no duration of its
//! own; it is the time since the journal's previous entry (the gate ran in
//! between, and nothing else did).

use std::collections::BTreeMap;

use crate::agent::session::Role;
use crate::critic::CriticVerdict;
use crate::journal::{AttemptEnd, Entry, Event, Gate};
use crate::judges::finding::Finding;

/// What a phase of an attempt was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseKind {
    Agent,
    Gate,
    Goal,
    Critic,
}

impl PhaseKind {
    /// The CSS class suffix (`phase-agent`, `seg-goal`).
    pub fn class(self) -> &'static str {
        match self {
            PhaseKind::Agent => "agent",
            PhaseKind::Gate => "gate",
            PhaseKind::Goal => "goal",
            PhaseKind::Critic => "critic",
        }
    }
}

/// One phase of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub kind: PhaseKind,
    pub label: String,
    /// Milliseconds since the attempt started.
    pub start_ms: u64,
    pub duration_ms: u64,
    /// `Some(true)` passed, `Some(false)` failed or rejected, `None`: neither.
    pub passed: Option<bool>,
    /// What happened, in a few words (`exit 1`, `2 finding(s)`, `PASS`).
    pub note: String,
}

/// One attempt as the journal tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptTimeline {
    pub n: u32,
    /// The job's wall clock (ms) when the attempt started.
    pub started_ms: u64,
    /// The job's wall clock (ms) when it ended (`None`: it never did).
    pub ended_ms: Option<u64>,
    pub phases: Vec<Phase>,
    /// Every gate's findings, in order.
    pub findings: Vec<(Gate, Finding)>,
    /// Tool calls loopd's hook denied during the agent session.
    pub denied: Vec<Finding>,
    pub verdict: Option<CriticVerdict>,
    /// Reconciled spend of the attempt's agent and critic sessions.
    pub agent_cost_usd: f64,
    pub critic_cost_usd: f64,
    /// A later process took the job over during this attempt.
    pub resumed: bool,
    /// How the attempt ended, as the journal says.
    pub end: Option<AttemptEnd>,
}

impl AttemptTimeline {
    fn new(n: u32, started_ms: u64) -> AttemptTimeline {
        AttemptTimeline {
            n,
            started_ms,
            ended_ms: None,
            phases: Vec::new(),
            findings: Vec::new(),
            denied: Vec::new(),
            verdict: None,
            agent_cost_usd: 0.0,
            critic_cost_usd: 0.0,
            resumed: false,
            end: None,
        }
    }

    /// How long the attempt took (to its end, or to its last phase).
    pub fn duration_ms(&self) -> u64 {
        let last_phase = self
            .phases
            .iter()
            .map(|p| p.start_ms + p.duration_ms)
            .max()
            .unwrap_or(0);
        self.ended_ms
            .map_or(0, |e| e.saturating_sub(self.started_ms))
            .max(last_phase)
    }
}

/// Fold the journal's entries into one timeline per attempt.
pub fn build(entries: &[Entry]) -> BTreeMap<u32, AttemptTimeline> {
    let mut out: BTreeMap<u32, AttemptTimeline> = BTreeMap::new();
    // Session number → (attempt, when it started).
    let mut sessions: BTreeMap<u32, u64> = BTreeMap::new();
    let mut current: Option<u32> = None;
    let mut last_ms = 0u64;
    for e in entries {
        let ms = e.ms;
        match &e.event {
            Event::AttemptStarted { attempt, .. } => {
                out.entry(*attempt)
                    .or_insert_with(|| AttemptTimeline::new(*attempt, ms));
                current = Some(*attempt);
            }
            Event::Resumed { .. } => {
                if let Some(t) = current.and_then(|n| out.get_mut(&n)) {
                    if t.ended_ms.is_none() {
                        t.resumed = true;
                    }
                }
            }
            Event::SessionStarted { session, .. } => {
                sessions.insert(*session, ms);
            }
            Event::SessionFinished(f) => {
                let t = attempt(&mut out, f.attempt, ms);
                let start = sessions
                    .get(&f.session)
                    .copied()
                    .unwrap_or_else(|| ms.saturating_sub(f.wall_ms));
                let (kind, label) = match f.role {
                    Role::Agent => (PhaseKind::Agent, "agent session".to_owned()),
                    Role::Critic => (PhaseKind::Critic, "critic".to_owned()),
                    Role::Examiner => (PhaseKind::Critic, "examiner".to_owned()),
                };
                match f.role {
                    Role::Agent => t.agent_cost_usd += f.spend.cost_usd,
                    Role::Critic | Role::Examiner => t.critic_cost_usd += f.spend.cost_usd,
                }
                let (passed, note) = match (&f.failure, f.stopped, &f.verdict) {
                    (Some(end), _, _) => (Some(false), format!("{}: {}", end.reason, end.detail)),
                    (None, Some(r), _) => (Some(false), format!("stopped: {r}")),
                    (None, None, Some(v)) => {
                        t.verdict = Some(v.clone());
                        (Some(*v == CriticVerdict::Pass), v.label().to_owned())
                    }
                    (None, None, None) => (
                        None,
                        format!("{} turn(s), {} tool call(s)", f.spend.turns, f.tool_calls),
                    ),
                };
                t.phases.push(Phase {
                    kind,
                    label,
                    start_ms: start.saturating_sub(t.started_ms),
                    duration_ms: f.wall_ms,
                    passed,
                    note,
                });
            }
            Event::HookDenied {
                attempt: n,
                finding,
            } => {
                attempt(&mut out, *n, ms).denied.push(finding.clone());
            }
            Event::GateChecked {
                attempt: n,
                gate,
                findings,
            } => {
                let t = attempt(&mut out, *n, ms);
                let start = last_ms.max(t.started_ms);
                t.phases.push(Phase {
                    kind: PhaseKind::Gate,
                    label: gate.label().to_owned(),
                    start_ms: start - t.started_ms,
                    duration_ms: ms.saturating_sub(start),
                    passed: Some(findings.is_empty()),
                    note: match findings.len() {
                        0 => "passed".to_owned(),
                        1 => "1 finding".to_owned(),
                        k => format!("{k} findings"),
                    },
                });
                t.findings
                    .extend(findings.iter().map(|f| (gate.clone(), f.clone())));
            }
            Event::GoalRun {
                attempt: n, report, ..
            } => {
                let t = attempt(&mut out, *n, ms);
                let total: u64 = report.steps.iter().map(|s| s.duration_ms).sum();
                // `.git/` is checked after the goal ran and journaled before
                // its result: that gate's span holds the goal run, and the
                // gate itself took the rest of it.
                let after_goal = t
                    .phases
                    .pop_if(|p| p.label == Gate::GIT_DIR_AFTER_GOAL.label());
                let mut at = match &after_goal {
                    Some(g) => g.start_ms,
                    None => ms.saturating_sub(total).max(t.started_ms) - t.started_ms,
                };
                let goal_start = at;
                for s in &report.steps {
                    let note = match (s.passed, s.timed_out, s.exit_code) {
                        (true, _, _) => "passed".to_owned(),
                        (false, true, _) => "timed out".to_owned(),
                        (false, false, Some(c)) => format!("exit {c}"),
                        (false, false, None) => "killed".to_owned(),
                    };
                    t.phases.push(Phase {
                        kind: PhaseKind::Goal,
                        label: format!("goal step `{}`", s.name),
                        start_ms: at,
                        duration_ms: s.duration_ms,
                        passed: Some(s.passed),
                        note,
                    });
                    at += s.duration_ms;
                }
                if let Some(mut g) = after_goal {
                    let end = g.start_ms + g.duration_ms;
                    g.start_ms = (goal_start + total).min(end);
                    g.duration_ms = end - g.start_ms;
                    t.phases.push(g);
                }
            }
            Event::AttemptEnded { record, end } => {
                let t = attempt(&mut out, record.n, ms);
                t.ended_ms = Some(ms);
                t.end = Some(end.clone());
            }
            _ => {}
        }
        last_ms = ms;
    }
    out
}

/// The timeline of attempt `n`, begun now if the journal never said it
/// started (a journal from before `attempt_started`, or a torn one).
fn attempt(out: &mut BTreeMap<u32, AttemptTimeline>, n: u32, ms: u64) -> &mut AttemptTimeline {
    out.entry(n).or_insert_with(|| AttemptTimeline::new(n, ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::{GoalReport, StepResult};
    use crate::guard::caps::Spend;
    use crate::journal::SessionFinished;
    use crate::outcome::Reason;

    fn entry(ms: u64, event: Event) -> Entry {
        Entry {
            ts: "2026-11-30T00:00:00Z".into(),
            ms,
            event,
        }
    }

    fn finished(attempt: u32, role: Role, session: u32, wall_ms: u64, cost: f64) -> Event {
        Event::SessionFinished(SessionFinished {
            attempt,
            role,
            session,
            spend: Spend {
                cost_usd: cost,
                turns: 3,
                input_tokens: 10,
                output_tokens: 5,
            },
            cost_usd_estimate: cost,
            cli_cost_usd: None,
            tool_calls: 2,
            wall_ms,
            terminal_reason: Some("completed".into()),
            is_error: Some(false),
            stopped: None,
            exit_code: Some(0),
            leftover_processes: 0,
            failure: None,
            verdict: (role == Role::Critic).then_some(CriticVerdict::Pass),
            rulings: Vec::new(),
        })
    }

    fn step(name: &str, passed: bool, duration_ms: u64) -> StepResult {
        StepResult {
            name: name.into(),
            command: name.into(),
            exit_code: Some(if passed { 0 } else { 1 }),
            timed_out: false,
            passed,
            output: String::new(),
            duration_ms,
            leftovers: 0,
            results: None,
            read: None,
        }
    }

    #[test]
    fn phases_are_placed_from_the_journal_times() {
        let finding = Finding {
            reason: Reason::Precheck,
            path: "a.py".into(),
            line: Some(3),
            rule: Some(2),
            check: None,
            problem: "debug print".into(),
            fix: "remove it".into(),
        };
        let entries = vec![
            entry(
                1000,
                Event::AttemptStarted {
                    attempt: 1,
                    prompt: "p".into(),
                },
            ),
            entry(
                1010,
                Event::SessionStarted {
                    attempt: 1,
                    role: Role::Agent,
                    session: 0,
                },
            ),
            entry(5010, finished(1, Role::Agent, 0, 4000, 0.25)),
            entry(
                5110,
                Event::GateChecked {
                    attempt: 1,
                    gate: Gate::DIFF,
                    findings: vec![],
                },
            ),
            entry(
                5850,
                Event::GateChecked {
                    attempt: 1,
                    gate: Gate::GIT_DIR_AFTER_GOAL,
                    findings: vec![],
                },
            ),
            entry(
                5900,
                Event::GoalRun {
                    attempt: 1,
                    report: GoalReport {
                        steps: vec![step("ruff", true, 200), step("pytest", false, 500)],
                    },
                    artefacts: Default::default(),
                    alone: None,
                    written: vec![],
                    origins: Default::default(),
                },
            ),
            entry(
                6000,
                Event::GateChecked {
                    attempt: 1,
                    gate: Gate::PRECHECK,
                    findings: vec![finding.clone()],
                },
            ),
            entry(
                7000,
                Event::AttemptStarted {
                    attempt: 2,
                    prompt: "q".into(),
                },
            ),
            entry(
                7000,
                Event::SessionStarted {
                    attempt: 2,
                    role: Role::Critic,
                    session: 1,
                },
            ),
            entry(9000, finished(2, Role::Critic, 1, 2000, 0.5)),
        ];
        let t = build(&entries);
        let a1 = &t[&1];
        let got: Vec<_> = a1
            .phases
            .iter()
            .map(|p| (p.kind, p.start_ms, p.duration_ms, p.passed))
            .collect();
        assert_eq!(
            got,
            vec![
                (PhaseKind::Agent, 10, 4000, None),
                (PhaseKind::Gate, 4010, 100, Some(true)),
                // The goal ran from the diff gate's end (4110); `.git/`
                // was checked after it (journaled at 4850, before the goal).
                (PhaseKind::Goal, 4110, 200, Some(true)),
                (PhaseKind::Goal, 4310, 500, Some(false)),
                (PhaseKind::Gate, 4810, 40, Some(true)),
                (PhaseKind::Gate, 4900, 100, Some(false)),
            ]
        );
        assert_eq!(a1.findings, vec![(Gate::PRECHECK, finding)]);
        assert!((a1.agent_cost_usd - 0.25).abs() < 1e-12);
        assert_eq!(a1.ended_ms, None);
        assert_eq!(a1.duration_ms(), 5000);
        let a2 = &t[&2];
        assert_eq!(a2.phases[0].kind, PhaseKind::Critic);
        assert_eq!(a2.phases[0].note, "PASS");
        assert_eq!(a2.verdict, Some(CriticVerdict::Pass));
        assert!((a2.critic_cost_usd - 0.5).abs() < 1e-12);
    }

    #[test]
    fn an_empty_journal_has_no_timeline() {
        assert!(build(&[]).is_empty());
    }
}
