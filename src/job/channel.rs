//! What a job answers on its gateway's own endpoints: the hook's question
//! about each tool call (answered by the gates of the tool-call stage:
//! the critic's no tools, the nudge before a `stuck_repeat` stop, then the
//! protection policy), and whether the agent may escalate. Decided here, in
//! loopd's memory; the gateway reports each denial to the job, which
//! journals it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        let cwd = input
            .cwd
            .as_deref()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| self.root.clone());
        super::gate::decide_tool_call(&super::gate::ToolCallFacts {
            role: tag.role,
            session_id: &input.session_id,
            call: &call,
            cwd: &cwd,
            policy: &self.policy,
            nudger: self.nudger.as_ref(),
        })
    }

    fn escalation(&self) -> bool {
        self.escalation
    }
}
