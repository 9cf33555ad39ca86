//! The gates of [`Stage::ToolCall`]: what the job answers the hook about
//! one tool call, before it runs — decided in loopd's memory, on the
//! gateway's authenticated channel ([`crate::job::channel`]). In the order
//! of the table; the first gate that answers decides, and a call no gate
//! answers is allowed.
//!
//! - [`CriticTools`]: a critic or examiner session runs no tools that read
//!   or change anything (a hint, not a tamper finding).
//! - [`Nudge`]: the first repeat that would stop the session as stuck is
//!   denied with a nudge instead.
//! - [`Protect`]: a call that changes files is checked against the
//!   protection policy (the tamper finding, journaled as a denial).

use super::{Gate, Stage, ToolCallFacts};
use crate::agent::events::Action;
use crate::agent::gateway::channel::HookDecision;
use crate::agent::Role;
use crate::journal;

/// See the module's doc.
pub(in crate::job) struct CriticTools;

impl Gate for CriticTools {
    fn id(&self) -> journal::Gate {
        journal::Gate::named("critic_tools")
    }

    fn stage(&self) -> Stage {
        Stage::ToolCall
    }

    fn tool_call(&self, facts: &ToolCallFacts<'_>) -> Option<HookDecision> {
        if facts.role == Role::Agent {
            return None;
        }
        // The critic judges the material it is given: a critic CLI that
        // offers tools anyway (Codex's shell) gets none that read or change
        // anything — only what carries its answer (Claude Code's
        // structured output).
        Some(match facts.call.action {
            Action::Other => HookDecision::Allow,
            _ => HookDecision::Nudge {
                reason: "loopd: the critic judges the task, the diff and the rubric it was given; it runs no tools. Answer with the verdict.".into(),
            },
        })
    }
}

/// See the module's doc.
pub(in crate::job) struct Nudge;

impl Gate for Nudge {
    fn id(&self) -> journal::Gate {
        journal::Gate::named("nudge")
    }

    fn stage(&self) -> Stage {
        Stage::ToolCall
    }

    fn tool_call(&self, facts: &ToolCallFacts<'_>) -> Option<HookDecision> {
        let nudger = facts.nudger?;
        let mut n = nudger.lock().unwrap_or_else(|e| e.into_inner());
        n.observe(facts.session_id, facts.call)
            .map(|reason| HookDecision::Nudge { reason })
    }
}

/// See the module's doc.
pub(in crate::job) struct Protect;

impl Gate for Protect {
    fn id(&self) -> journal::Gate {
        journal::Gate::named("protect")
    }

    fn stage(&self) -> Stage {
        Stage::ToolCall
    }

    fn tool_call(&self, facts: &ToolCallFacts<'_>) -> Option<HookDecision> {
        // Reads and tools that touch no file only count for the nudge.
        if !facts.call.mutating() {
            return None;
        }
        let reason = match facts.policy.compile() {
            Ok(compiled) => compiled.check_tool(facts.call, facts.cwd)?,
            Err(e) => format!(
                "loopd: the protection policy cannot be compiled ({e}); refusing file changes"
            ),
        };
        Some(HookDecision::Deny { reason })
    }
}
