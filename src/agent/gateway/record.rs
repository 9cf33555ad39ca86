//! What a session's observers record, in one type from the wire to the
//! journal: the calls the metering gateway saw (the authority on spend), the
//! requests it refused, the tool calls the hook denied and the agent's
//! escalation — sent by the gateway as they happen — and the model and tool
//! calls the session's stream reported, added by the live guards' watch.
//! The gateway's events are the same values the watch accounts and the
//! journal keeps: nothing is translated on the way to the budget decision.

use serde::{Deserialize, Serialize};

use super::channel::{Denial, EscalationRequest, Refused};
use super::MeteredCall;
use crate::agent::Role;

/// One record of a session, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A model call the stream reported (the live estimate).
    ModelCall(ModelCall),
    /// A tool call the stream reported, and how it ended.
    ToolCall(ToolCall),
    /// The hook denied a repeat with a nudge.
    Nudged(Nudge),
    /// A model call the metering gateway saw on the wire and settled (the
    /// authority).
    Metered(MeteredCall),
    /// A request the gateway refused.
    Refused(Refused),
    /// A tool call the hook asked about and the job's policy denied.
    Denied(Denial),
    /// The agent escalated (through the gateway; only an agent session may).
    Escalated {
        attempt: u32,
        session: u32,
        request: EscalationRequest,
    },
}

/// One model call, as the stream reported it: the live estimate of what it
/// cost. A finished session's reconciled totals supersede these; they count
/// only for a session that never finished (a crash, a kill).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    pub attempt: u32,
    pub role: Role,
    /// The job's session number this call belongs to.
    pub session: u32,
    pub message_id: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd_estimate: f64,
    pub latency_ms: u64,
}

/// The longest [`ToolCall::target`] kept.
pub const TARGET_MAX: usize = 80;

/// One tool call and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub attempt: u32,
    pub role: Role,
    pub session: u32,
    pub tool: String,
    pub args_sha256: String,
    pub tool_use_id: String,
    pub latency_ms: u64,
    /// `ok` | `error` | `denied`.
    pub outcome: String,
    /// What the call was about, for people (a file path, the first line of
    /// a command, a pattern), cut to [`TARGET_MAX`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// The hook denied a repeated tool call with a nudge instead of the
/// `stuck_repeat` stop (once per session).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nudge {
    pub attempt: u32,
    pub session: u32,
    pub tool: String,
    pub args_sha256: String,
}
