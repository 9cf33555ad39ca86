//! What a job answers on its gateway's own endpoints: the hook's question
//! about each tool call (the nudge before a `stuck_repeat` stop, then the
//! protection policy), and whether the agent may escalate. Decided here, in
//! loopd's memory; the gateway reports each denial to the job, which
//! journals it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::agent::events::Action;
use crate::agent::gateway::channel::{Channel, HookDecision, HookInput};
use crate::agent::gateway::Tag;
use crate::agent::{Agent, Role};
use crate::guard::progress::Nudger;
use crate::judges::tamper::Policy;

pub struct JobChannel {
    policy: Policy,
    /// The worktree: where a call without a usable `cwd` runs.
    root: PathBuf,
    nudger: Option<Mutex<Nudger>>,
    escalation: bool,
    /// The agent CLIs of the agent and the critic sessions: a hook's tool
    /// names are made canonical by its CLI.
    agent: &'static dyn Agent,
    critic: &'static dyn Agent,
}

impl JobChannel {
    pub fn new(
        policy: Policy,
        root: &Path,
        nudger: Option<Nudger>,
        escalation: bool,
        (agent, critic): (&'static dyn Agent, &'static dyn Agent),
    ) -> Self {
        JobChannel {
            policy,
            root: root.to_path_buf(),
            nudger: nudger.map(Mutex::new),
            escalation,
            agent,
            critic,
        }
    }
}

impl Channel for JobChannel {
    fn pre_tool_use(&self, tag: Tag, input: &HookInput) -> HookDecision {
        let agent = match tag.role {
            Role::Agent => self.agent,
            Role::Critic | Role::Examiner => self.critic,
        };
        let call = agent.tool_call(
            input.tool_use_id.clone().unwrap_or_default(),
            input.tool_name.clone(),
            input.tool_input.clone(),
        );
        // The critic judges the material it is given: a critic CLI that
        // offers tools anyway (Codex's shell) gets none that read or change
        // anything — only what carries its answer (Claude Code's
        // structured output). Not a tamper finding: a hint.
        if tag.role != Role::Agent {
            return match call.action {
                Action::Other => HookDecision::Allow,
                _ => HookDecision::Nudge {
                    reason: "loopd: the critic judges the task, the diff and the rubric it was given; it runs no tools. Answer with the verdict.".into(),
                },
            };
        }
        if let Some(nudger) = &self.nudger {
            let mut n = nudger.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(reason) = n.observe(&input.session_id, &call) {
                return HookDecision::Nudge { reason };
            }
        }
        // Reads and tools that touch no file only count for the nudge.
        if !call.mutating() {
            return HookDecision::Allow;
        }
        let cwd = input
            .cwd
            .as_deref()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| self.root.clone());
        let decision = match self.policy.compile() {
            Ok(compiled) => compiled.check_tool(&call, &cwd),
            Err(e) => Some(format!(
                "loopd: the protection policy cannot be compiled ({e}); refusing file changes"
            )),
        };
        match decision {
            Some(reason) => HookDecision::Deny { reason },
            None => HookDecision::Allow,
        }
    }

    fn escalation(&self) -> bool {
        self.escalation
    }
}
