//! The live guards: what watches a session as it streams and stops it —
//! resource caps ([`caps`]), the progress guard ([`progress`], reading
//! shell commands with [`shell`]) and the agent's approved exit
//! ([`escalation`]). What judges a change after a session is
//! [`crate::judges`].
//!
//! [`Watch`] is the observer a session runs under. On the hot path it does
//! only what it must per event: account a model call when it completes,
//! hash a tool call when it is issued, and hand a typed [`Record`] of each to
//! its [`Recorder`] (the job's journal).

pub mod caps;
pub mod escalation;
pub mod progress;
pub mod shell;

use std::collections::HashMap;
use std::time::Duration;
use std::time::Instant;

use serde::Serialize;

use crate::agent::events::{Event, ToolCall as AgentToolCall, Usage};
pub use crate::agent::gateway::record::{ModelCall, Nudge, Record, ToolCall, TARGET_MAX};
use crate::agent::session::{Observer, Role, Verdict};
use crate::agent::Prices;
use crate::outcome::Reason;
use caps::{Budget, Spend};
use progress::RepeatDetector;

/// Progress-guard and process settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardSettings {
    /// How many recent tool calls the repeat detector looks at.
    pub stuck_window: usize,
    /// How many identical calls within the window mean "stuck".
    pub stuck_repeat: usize,
    /// The commands that wait, word for word at the start of a command
    /// (wrappers such as `timeout 30` looked through): a shell call that
    /// waits with one of these and otherwise only looks (`sleep 5; curl
    /// …/health`) is polling and never counts as stuck
    /// ([`progress::is_polling`]).
    pub poll_patterns: Vec<String>,
    /// Time between SIGTERM and SIGKILL when stopping a process tree.
    #[serde(with = "crate::util::duration_text")]
    pub grace: Duration,
    /// The agent may end the job with `loopd escalate` ([`escalation`]).
    pub escalation: bool,
    /// The first repeat that would stop a session is denied with a nudge
    /// instead (by the hook); only a further repeat stops it.
    pub nudge: bool,
    /// From this attempt on, the critic is asked for extra care with test
    /// helpers, fixtures and conditionals, and the pre-critic rejects code
    /// that branches on being under test (0: never).
    pub strict_from: u32,
    /// The largest change the critic is asked about, in KiB of diff (files
    /// too large to load count whole): a larger one is rejected by the size
    /// gate ([`crate::judges::size`]), so the critic always sees all of what it judges.
    pub max_diff_kb: u64,
    /// What the next prompt learns of a red held-out step.
    pub held_out_feedback: crate::goal::held_out::Feedback,
}

impl GuardSettings {
    /// [`GuardSettings::max_diff_kb`] in bytes.
    pub fn max_diff_bytes(&self) -> u64 {
        self.max_diff_kb * 1024
    }
}

impl Default for GuardSettings {
    /// What `loopd.toml` gets when `[guard]` says nothing.
    fn default() -> Self {
        GuardSettings {
            stuck_window: 5,
            stuck_repeat: 3,
            poll_patterns: DEFAULT_POLL_PATTERNS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            grace: Duration::from_secs(5),
            escalation: true,
            nudge: true,
            strict_from: 3,
            max_diff_kb: DEFAULT_MAX_DIFF_KB,
            held_out_feedback: crate::goal::held_out::Feedback::Ids,
        }
    }
}

/// The default size bound of a change, in KiB of diff.
pub const DEFAULT_MAX_DIFF_KB: u64 = 200;
/// The largest bound `[guard] max_diff_kb` accepts: what is kept in memory
/// while judging grows with it.
pub const MAX_MAX_DIFF_KB: u64 = 64 * 1024;

/// What `[guard] poll_patterns` is when `loopd.toml` says nothing: the commands
/// that wait (and `ps`, whose repeats are a process being waited for).
/// Wrappers (`timeout`, `env`, `nice`) are looked through, never patterns.
pub const DEFAULT_POLL_PATTERNS: [&str; 5] = ["sleep", "wait", "tail -f", "watch", "ps"];

/// A tool call's target, for the live progress lines: the path it works
/// on, or its command's first line. A long path keeps its end (the file's
/// name), anything else its start.
pub fn tool_target(call: &AgentToolCall) -> Option<String> {
    let field = call.target()?;
    let is_path = call.command().is_none();
    let line = field.lines().next().unwrap_or("").trim();
    let n = line.chars().count();
    if is_path && n > TARGET_MAX {
        let tail: String = line.chars().skip(n - (TARGET_MAX - 1)).collect();
        return Some(format!("…{tail}"));
    }
    let mut out: String = line.chars().take(TARGET_MAX).collect();
    if n > TARGET_MAX || field.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    Some(out)
}

/// Where a [`Watch`] sends its records. The hot path: an implementation must
/// not block on the disk for each record (no fsync per tool call).
pub trait Recorder: Send {
    fn record(&mut self, record: Record);
}

/// Records nowhere (benchmarks, tests).
impl Recorder for Vec<Record> {
    fn record(&mut self, record: Record) {
        self.push(record);
    }
}

/// A model call in flight (between `message_start` and `message_delta`).
struct Call {
    id: String,
    model: String,
    usage: Usage,
    started: Instant,
    /// What this call has already been charged in `live`.
    charged: Spend,
}

struct PendingTool {
    name: String,
    target: Option<String>,
    hash: String,
    started: Instant,
    denied: bool,
}

/// The observer of one session: live spend, repeated calls, the ledger.
pub struct Watch<'a> {
    role: Role,
    attempt: u32,
    session: u32,
    budget: &'a Budget,
    /// The session's agent's prices, for the stream's live estimate.
    prices: Prices,
    /// Spend of the job before this session (reconciled totals).
    before: Spend,
    /// This session's spend so far, estimated from the stream.
    pub live: Spend,
    /// This session's spend so far as the gateway metered it (nested
    /// `claude -p` calls included, which never show in the stream).
    pub metered: Spend,
    /// Per session: a fresh session has a fresh context, and re-reading a
    /// file at the start of each attempt is not being stuck.
    repeat: RepeatDetector,
    settings: &'a GuardSettings,
    recorder: &'a mut (dyn Recorder + Send),
    call: Option<Call>,
    tools: HashMap<String, PendingTool>,
    pub tool_calls: u64,
    /// The hook has nudged this session once: the next repeat stops it.
    nudged: bool,
}

impl<'a> Watch<'a> {
    pub fn new(
        (role, attempt, session): (Role, u32, u32),
        budget: &'a Budget,
        prices: Prices,
        before: Spend,
        settings: &'a GuardSettings,
        recorder: &'a mut (dyn Recorder + Send),
    ) -> Watch<'a> {
        Watch {
            role,
            attempt,
            session,
            budget,
            prices,
            before,
            live: Spend::default(),
            metered: Spend::default(),
            repeat: RepeatDetector::new(settings.stuck_window, settings.stuck_repeat),
            settings,
            recorder,
            call: None,
            tools: HashMap::new(),
            tool_calls: 0,
            nudged: false,
        }
    }

    /// Charge the in-flight call with its usage so far; returns a cap it broke.
    fn charge(&mut self) -> Option<Reason> {
        let call = self.call.as_mut()?;
        let now = Spend {
            // An unpriced model's calls are refused at the gateway: they
            // cost nothing.
            cost_usd: self
                .prices
                .of(&call.model)
                .map_or(0.0, |p| p.cost(&call.usage)),
            turns: 1,
            input_tokens: call.usage.all_input(),
            output_tokens: call.usage.output_tokens,
        };
        self.live.cost_usd += now.cost_usd - call.charged.cost_usd;
        self.live.turns += now.turns - call.charged.turns;
        self.live.input_tokens += now.input_tokens - call.charged.input_tokens;
        self.live.output_tokens += now.output_tokens - call.charged.output_tokens;
        call.charged = now;
        self.over_cap()
    }

    /// The cap this session's spend broke, if any: the larger of the
    /// stream's estimate and the gateway's reading, field by field.
    fn over_cap(&self) -> Option<Reason> {
        self.budget
            .exceeded(&self.before.plus(&self.live.max(&self.metered)))
    }

    fn finish_call(&mut self) {
        if let Some(call) = self.call.take() {
            self.recorder.record(Record::ModelCall(ModelCall {
                attempt: self.attempt,
                role: self.role,
                session: self.session,
                message_id: call.id,
                model: call.model,
                input_tokens: call.usage.all_input(),
                output_tokens: call.usage.output_tokens,
                cost_usd_estimate: call.charged.cost_usd,
                latency_ms: call.started.elapsed().as_millis() as u64,
            }));
        }
    }

    fn tool_done(&mut self, id: &str, is_error: bool, at: Instant) {
        if let Some(t) = self.tools.remove(id) {
            let outcome = if t.denied {
                "denied"
            } else if is_error {
                "error"
            } else {
                "ok"
            };
            self.recorder.record(Record::ToolCall(ToolCall {
                attempt: self.attempt,
                role: self.role,
                session: self.session,
                tool: t.name,
                args_sha256: t.hash,
                tool_use_id: id.to_owned(),
                latency_ms: at.duration_since(t.started).as_millis() as u64,
                outcome: outcome.to_owned(),
                target: t.target,
            }));
        }
    }

    /// Tool calls issued but never answered (the session was stopped).
    pub fn flush_pending(&mut self) {
        self.finish_call();
        let ids: Vec<String> = self.tools.keys().cloned().collect();
        let now = Instant::now();
        for id in ids {
            if let Some(t) = self.tools.get_mut(&id) {
                t.denied = false;
            }
            self.tool_done(&id, true, now);
        }
    }
}

impl Observer for Watch<'_> {
    fn on_gateway(&mut self, record: Record) -> Verdict {
        let verdict = match &record {
            Record::Metered(call) => {
                self.metered.add(&Spend::of_call(call));
                let verdict = self.over_cap();
                if let Some(reason) = verdict {
                    tracing::warn!(%reason, "the metered spend reached a cap");
                }
                verdict
            }
            Record::Denied(d) => {
                if let Some(t) = d.tool_use_id.as_ref().and_then(|id| self.tools.get_mut(id)) {
                    t.denied = true;
                }
                None
            }
            Record::Escalated { request, .. } if self.role == Role::Agent => {
                tracing::warn!(test = %request.test, "the agent escalated; stopping its session");
                Some(Reason::Escalated)
            }
            // The gateway takes an escalation only from an agent session's
            // token; one that arrives while another session is watched
            // (a leftover process of the agent's) is not this session's.
            Record::Escalated { .. } => return None,
            _ => None,
        };
        self.recorder.record(record);
        verdict
    }

    fn on_event(&mut self, event: &Event, at: Instant) -> Verdict {
        match event {
            Event::CallStarted { id, model, usage } => {
                self.finish_call();
                self.call = Some(Call {
                    id: id.clone(),
                    model: model.clone(),
                    usage: Usage {
                        output_tokens: 0,
                        ..*usage
                    },
                    started: at,
                    charged: Spend::default(),
                });
                self.charge()
            }
            Event::CallOutput { output_tokens } => {
                if let Some(call) = self.call.as_mut() {
                    // The count is cumulative over the call.
                    call.usage.output_tokens = call.usage.output_tokens.max(*output_tokens);
                }
                self.charge()
            }
            Event::CallEnded => {
                self.finish_call();
                None
            }
            Event::ToolUse(call) => {
                self.tool_calls += 1;
                let hash = progress::call_hash(call);
                let mut verdict = None;
                if self.role == Role::Agent {
                    let judged = progress::judge(call, &self.settings.poll_patterns);
                    verdict = self.repeat.observe(&judged);
                    if verdict.is_some() && self.settings.nudge && !self.nudged {
                        // The hook denies this call with a nudge (loopd counts
                        // the same calls); the next repeat stops.
                        self.nudged = true;
                        verdict = None;
                        tracing::warn!(tool = %call.name, args_sha256 = %hash, "the same tool call repeated; the agent is nudged, a further repeat stops the session");
                        self.recorder.record(Record::Nudged(Nudge {
                            attempt: self.attempt,
                            session: self.session,
                            tool: call.name.clone(),
                            args_sha256: hash.clone(),
                        }));
                    } else if verdict.is_some() {
                        tracing::warn!(tool = %call.name, args_sha256 = %hash, "the same tool call repeated");
                    }
                }
                self.tools.insert(
                    call.id.clone(),
                    PendingTool {
                        name: call.name.clone(),
                        target: tool_target(call),
                        hash,
                        started: at,
                        denied: false,
                    },
                );
                verdict
            }
            Event::ToolResult { id, is_error } => {
                self.tool_done(id, *is_error, at);
                None
            }
            Event::ToolDenied { id } => {
                if let Some(t) = self.tools.get_mut(id) {
                    t.denied = true;
                }
                None
            }
            Event::Result(_) => None,
        }
    }
}
