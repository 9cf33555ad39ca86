//! The agent seam: what loopd needs from an agent CLI, as one trait
//! ([`AgentCli`]), and the Claude Code CLI behind it ([`claude`]). The loop
//! never builds a command line, a settings file or a price itself; a second
//! agent CLI is a new implementation of the trait, not an edit of the loop.
//! The stream's typed events ([`events`]) are the common language: another
//! CLI's stream is parsed into them.

pub mod claude;
pub mod events;
pub mod gateway;
pub mod session;

use std::ffi::OsString;

pub use claude::ClaudeCode;

/// Which kind of session this is; the guards count both, the ledger tells
/// them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Agent,
    Critic,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Critic => "critic",
        }
    }
}

/// Spending limits passed to the CLI as a second line of defence.
#[derive(Debug, Clone, Copy)]
pub struct CliLimits {
    pub max_budget_usd: f64,
    pub max_turns: u64,
}

/// Everything specific to one agent CLI.
pub trait AgentCli: Send + Sync {
    /// The sessions' settings (passed inline): the pre-tool-use hook
    /// command. No credential: sessions talk to the metering gateway
    /// ([`gateway`]) with a session token.
    fn settings(&self, hook_command: Option<&str>) -> String;
    /// An agent session's arguments (after the binary).
    fn agent_args(
        &self,
        model: &str,
        allowed_tools: &[String],
        settings: &str,
        limits: CliLimits,
        prompt: &str,
    ) -> Vec<OsString>;
    /// A critic session's arguments: no tools, the verdict's JSON schema; the
    /// material to judge goes on stdin.
    fn critic_args(
        &self,
        model: &str,
        schema: &str,
        settings: &str,
        limits: CliLimits,
        instruction: &str,
    ) -> Vec<OsString>;
    /// Variables set for every session: the gateway's URL and session
    /// token as the CLI's endpoint and credential, and the CLI's own.
    fn session_env(&self, gateway_url: &str, session_token: &str) -> Vec<(OsString, OsString)>;
    /// The price table for live estimates: model name → price.
    fn prices(&self) -> fn(&str) -> Price;
    /// About how large the CLI's first request of a session is, before
    /// loopd's own input (its system prompt and tool definitions): what
    /// "budget before cost" reserves for a session's first call.
    fn first_request_bytes(&self, role: Role) -> u64;
    /// The CLI's protocol on the wire, as the gateway forwards and meters it.
    fn wire(&self) -> std::sync::Arc<dyn gateway::Wire>;
}

/// Prices in USD per million tokens: the gateway prices every call it
/// meters with them (the authority), and the stream's live estimate too.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

impl Price {
    /// The Claude Code price table (the default agent's).
    pub fn for_model(model: &str) -> Price {
        claude::price(model)
    }

    /// The dearer of two prices, input and output each.
    pub fn max(self, other: Price) -> Price {
        Price {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
        }
    }

    /// Cache writes cost 1.25× input, cache reads 0.1× input.
    pub fn cost(&self, usage: &events::Usage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.cache_creation_input_tokens as f64 * self.input * 1.25
            + usage.cache_read_input_tokens as f64 * self.input * 0.1
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}
