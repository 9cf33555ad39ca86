//! The agent seam: everything vendor-specific about an agent CLI is behind
//! one trait ([`Agent`]) and lives in one module per CLI ([`claude`],
//! [`codex`]): its command lines and home, the stream it writes (parsed
//! into loopd's own [`events`]), its tool calls in canonical form, its hook
//! protocol, its wire protocol at the gateway, its prices and the
//! credential it takes. Nothing outside this folder names a vendor; the
//! agents are registered in one place ([`AGENTS`]).

pub mod claude;
pub mod codex;
pub mod credential_file;
pub mod events;
pub mod gateway;
#[cfg(feature = "scripted-agent")]
pub mod scripted;
pub mod session;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

pub use claude::ClaudeCode;
use events::{StreamParser, ToolCall};
use gateway::{Access, CredentialError, Wire};

/// Every agent loopd can drive, by name: adding one is a module and a line
/// here.
pub const AGENTS: &[&dyn Agent] = &[
    &claude::ClaudeCode,
    &codex::Codex,
    // Test builds only: no CLI, no node (see the module).
    #[cfg(feature = "scripted-agent")]
    &scripted::Scripted,
];

/// One session as it runs ([`Agent::run_session`]).
pub type SessionFuture<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<session::SessionEnd, session::SessionError>>
            + Send
            + 'a,
    >,
>;

/// The agent of this name (`--agent`, `loopd.toml`'s `agent`).
pub fn by_name(name: &str) -> Option<&'static dyn Agent> {
    AGENTS.iter().copied().find(|a| a.name() == name)
}

/// The names agents go by, for help and errors.
pub fn names() -> Vec<&'static str> {
    AGENTS.iter().map(|a| a.name()).collect()
}

/// An npm package at a pinned version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    /// `@scope/name`.
    pub name: &'static str,
    /// The exact version (`2.1.328`).
    pub version: &'static str,
}

impl std::fmt::Display for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// The npm packages of every registered agent, pinned: what a machine that
/// may run any of them installs.
pub fn packages() -> Vec<Package> {
    AGENTS.iter().filter_map(|a| a.package()).collect()
}

/// The names a program that starts an agent session goes by: each
/// agent's program, its npm package and the package's own name (`claude`, `@anthropic-ai/claude-code`,
/// `claude-code`, `codex`, `@openai/codex`).
pub fn client_programs() -> Vec<&'static str> {
    let mut out = Vec::new();
    for a in AGENTS.iter().filter(|a| a.nests()) {
        out.push(a.program());
        if let Some(p) = a.package() {
            out.push(p.name);
            out.push(p.name.rsplit('/').next().unwrap_or(p.name));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Every model credential variable of every agent: read once when loopd
/// starts, then scrubbed from its own environment.
pub fn credential_vars() -> Vec<&'static str> {
    // Agents share variables (the scripted agent of test builds takes
    // Claude's), not always next to each other: first appearance wins.
    let mut out: Vec<&'static str> = Vec::new();
    for v in AGENTS
        .iter()
        .flat_map(|a| a.credential_vars().iter().copied())
    {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Every variable that holds a credential — every agent's model
/// credentials and the forge tokens: removed from the environment of every
/// child, whichever agent a job runs.
pub fn secret_vars() -> Vec<&'static str> {
    let mut out = credential_vars();
    out.extend(crate::util::TOKEN_VARS);
    out
}

/// Which kind of session this is; the guards count both, the ledger tells
/// them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Agent,
    Critic,
    /// Writes tests of the task's behaviour before the first attempt
    /// (`[examiner]`): a session like the critic's — no tools, the
    /// material on stdin, a structured answer.
    Examiner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Critic => "critic",
            Role::Examiner => "examiner",
        }
    }
}

/// Spending limits passed to the CLI as a second line of defence.
#[derive(Debug, Clone, Copy)]
pub struct CliLimits {
    pub max_budget_usd: f64,
    pub max_turns: u64,
}

/// What one session is to do.
#[derive(Debug, Clone)]
pub struct Session<'a> {
    pub role: Role,
    pub model: &'a str,
    /// The agent's prompt, or the critic's instruction.
    pub prompt: &'a str,
    /// The critic's material (task, baseline, diff, rubric), on stdin.
    pub material: Option<&'a str>,
    /// The tools an agent session may use (the CLI's permission rules,
    /// where it has them), the escalation command's among them.
    pub allowed_tools: &'a [String],
    /// The critic's verdict schema (JSON).
    pub schema: Option<&'a str>,
    pub limits: CliLimits,
    /// The pre-tool-use hook's command line.
    pub hook_command: &'a str,
    /// This executable, which the hook command runs (and the scripted
    /// agent of test builds asks the model through): the caller's, never
    /// `current_exe` — a job run inside a test process is not `loopd`.
    pub loopd: &'a Path,
    /// The gateway's URL and the session's token.
    pub gateway_url: &'a str,
    pub token: &'a str,
    /// A directory private to the job's sessions (writable in the sandbox)
    /// for the CLI's own state and files loopd hands it.
    pub home: &'a Path,
}

/// A session's command: arguments after the program, variables to set,
/// what goes on stdin.
#[derive(Debug, Clone, Default)]
pub struct Command {
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub stdin: Option<String>,
}

/// How the hook answers the CLI: what it prints and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookReply {
    pub stdout: String,
    pub stderr: String,
    pub code: u8,
}

/// Everything specific to one agent CLI.
pub trait Agent: Send + Sync {
    /// Its name in `--agent`, `loopd.toml` and reports.
    fn name(&self) -> &'static str;
    /// The program looked up on `PATH` when no binary is named.
    fn program(&self) -> &'static str;
    /// The npm package and the version the suite tests (the install
    /// script installs it, and so does an exported CI workflow); `None`
    /// for an agent that is not an npm package.
    fn package(&self) -> Option<Package>;
    /// How to install the version the suite tests (for the error when the
    /// program is missing).
    fn install(&self) -> String {
        match self.package() {
            Some(p) => format!("npm install -g {p}"),
            None => format!("put `{}` on PATH", self.program()),
        }
    }
    /// Does running its program start another session (so the hook
    /// refuses it from the agent's shell)? True of every CLI; the scripted
    /// agent of test builds names the shell it runs its tools with.
    fn nests(&self) -> bool {
        true
    }
    /// The models used when none is named: (agent, critic) — a different
    /// model judges.
    fn default_models(&self) -> (&'static str, &'static str);
    /// Its credential variables, in the order they are picked.
    fn credential_vars(&self) -> &'static [&'static str];
    /// The credential and the upstream, from the variables `get` reads
    /// (picked once, when loopd starts).
    fn access(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Access, CredentialError>;
    /// Its protocol on the wire, as the gateway forwards and meters it.
    fn wire(&self) -> Arc<dyn Wire>;
    /// Its price table: model name → price; `None` for a model it does not
    /// know (a call on it is refused unless `[prices."model"]` prices it).
    fn prices(&self) -> fn(&str) -> Option<Price>;
    /// About how large the CLI's first request of a session is, before
    /// loopd's own input: what "budget before cost" reserves for a
    /// session's first call.
    fn first_request_bytes(&self, role: Role) -> u64;
    /// The command line, environment and stdin of one session (files the
    /// CLI needs are written under `session.home`).
    fn command(&self, session: &Session<'_>) -> std::io::Result<Command>;
    /// How the critic's model gives its verdict in this CLI, as the
    /// critic's instruction says it ("answer only …").
    fn answer_with(&self) -> &'static str;
    /// A parser for its stream.
    fn parser(&self) -> Box<dyn StreamParser>;
    /// A tool call in canonical form, from the CLI's own name and input
    /// (its stream's, and its hook's).
    fn tool_call(&self, id: String, name: String, input: Value) -> ToolCall;
    /// The hook's answer, in the CLI's hook protocol: allowed (`None`) or
    /// denied with a reason the model reads.
    fn hook_reply(&self, deny: Option<&str>) -> HookReply;
    /// Run one session under the observer. A CLI is a process loopd starts
    /// and reads ([`session::run`]); only the scripted agent of test builds
    /// runs in loopd's own process.
    fn run_session<'a>(
        &'a self,
        spec: &'a session::SessionSpec,
        parser: &'a mut dyn StreamParser,
        observer: &'a mut (dyn session::Observer + Send),
        stop: &'a mut tokio::sync::watch::Receiver<Option<session::StopRequest>>,
        gateway: Option<&'a mut tokio::sync::mpsc::UnboundedReceiver<gateway::record::Record>>,
    ) -> SessionFuture<'a> {
        Box::pin(session::run(spec, parser, observer, stop, gateway))
    }
}

/// Prices in USD per million tokens: the gateway prices every call it
/// meters with them (the authority), and the stream's live estimate too.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Input read from the provider's cache.
    pub cache_read: f64,
    /// Input written to the provider's cache.
    pub cache_write: f64,
}

impl Price {
    /// The dearer of two prices, each kind of token on its own.
    pub fn max(self, other: Price) -> Price {
        Price {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cache_read: self.cache_read.max(other.cache_read),
            cache_write: self.cache_write.max(other.cache_write),
        }
    }

    /// The dearest a token of input can be (a cache write, or plain input
    /// where writes cost no more): what a reservation prices input at.
    pub fn dearest_input(&self) -> f64 {
        self.input.max(self.cache_write)
    }

    pub fn cost(&self, usage: &events::Usage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.cache_creation_input_tokens as f64 * self.cache_write
            + usage.cache_read_input_tokens as f64 * self.cache_read
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// An agent's price table with the overrides of `loopd.toml`'s
/// `[prices."model-id"]` (prices change faster than releases).
#[derive(Debug, Clone)]
pub struct Prices {
    base: fn(&str) -> Option<Price>,
    overrides: Arc<std::collections::BTreeMap<String, Price>>,
}

impl Prices {
    pub fn new(
        base: fn(&str) -> Option<Price>,
        overrides: &std::collections::BTreeMap<String, Price>,
    ) -> Prices {
        Prices {
            base,
            overrides: Arc::new(overrides.clone()),
        }
    }

    /// The table alone, no overrides.
    pub fn of_table(base: fn(&str) -> Option<Price>) -> Prices {
        Prices {
            base,
            overrides: Arc::default(),
        }
    }

    /// A model's price: its override, else the table's; `None` when
    /// neither knows it (default-deny: an unpriced call cannot be capped).
    pub fn of(&self, model: &str) -> Option<Price> {
        self.overrides
            .get(model)
            .copied()
            .or_else(|| (self.base)(model))
    }
}
