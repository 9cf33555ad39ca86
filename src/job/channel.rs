//! What a job answers on its gateway's own endpoints: the hook's question
//! about each tool call (the nudge before a `stuck_repeat` stop, then the
//! protection policy), and whether the agent may escalate. Decided here, in
//! loopd's memory; the gateway reports each denial to the job, which
//! journals it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::agent::gateway::channel::{Channel, HookDecision, HookInput};
use crate::agent::gateway::Tag;
use crate::guard::progress::Nudger;
use crate::guard::tamper::Policy;

/// The tools whose calls the policy checks (the rest only count for the
/// nudge).
const MUTATING: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"];

pub struct JobChannel {
    policy: Policy,
    /// The worktree: where a call without a usable `cwd` runs.
    root: PathBuf,
    nudger: Option<Mutex<Nudger>>,
    escalation: bool,
}

impl JobChannel {
    pub fn new(policy: Policy, root: &Path, nudger: Option<Nudger>, escalation: bool) -> Self {
        JobChannel {
            policy,
            root: root.to_path_buf(),
            nudger: nudger.map(Mutex::new),
            escalation,
        }
    }
}

impl Channel for JobChannel {
    fn pre_tool_use(&self, _tag: Tag, input: &HookInput) -> HookDecision {
        if let Some(nudger) = &self.nudger {
            let mut n = nudger.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(reason) = n.observe(&input.session_id, &input.tool_name, &input.tool_input)
            {
                return HookDecision::Nudge { reason };
            }
        }
        if !MUTATING.contains(&input.tool_name.as_str()) {
            return HookDecision::Allow;
        }
        let cwd = input
            .cwd
            .as_deref()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| self.root.clone());
        let decision = match self.policy.compile() {
            Ok(compiled) => compiled.check_tool(&input.tool_name, &input.tool_input, &cwd),
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
