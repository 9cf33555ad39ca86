//! The command line: one `*Args` struct per subcommand, whose doc comments
//! are the help text. Each subcommand returns an [`ExitStatus`] or a
//! [`CliError`]; `main` turns both into the process exit code.

pub mod approve;
pub mod cancel;
pub mod check;
pub mod ci;
pub mod completions;
pub mod daemon;
pub mod escalate;
pub mod export;
pub mod hook;
pub mod lessons_cmd;
pub mod report_cmd;
pub mod resume;
pub mod run;
#[cfg(feature = "scripted-agent")]
pub mod scripted_call;
pub mod status;
pub mod submit;
pub mod tail;

use clap::{Parser, Subcommand};

use crate::outcome::ExitStatus;

/// Supervise a coding agent on a git repository until a goal test and a
/// fresh-session critic both accept its change — or stop it safely.
#[derive(Debug, Parser)]
#[command(name = "loopd", version, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace). `LOOPD_LOG` takes a full filter.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only warnings and errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Run(run::RunArgs),
    Check(check::CheckArgs),
    Daemon(daemon::DaemonArgs),
    Submit(submit::SubmitArgs),
    Status(status::StatusArgs),
    Cancel(cancel::CancelArgs),
    Report(report_cmd::ReportArgs),
    Tail(tail::TailArgs),
    Resume(resume::ResumeArgs),
    Escalate(escalate::EscalateArgs),
    Lessons(lessons_cmd::LessonsArgs),
    /// Approve an accepted job and perform its outward step (merge, or push and open a pull request).
    Approve(approve::DecideArgs),
    /// Reject an accepted job: nothing leaves the machine, the change stays parked.
    Reject(approve::DecideArgs),
    Ci(ci::CiArgs),
    Export(export::ExportArgs),
    /// Entry points for Claude Code hooks.
    Hook(hook::HookArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
    /// The scripted agent's model call (test builds only).
    #[cfg(feature = "scripted-agent")]
    #[command(hide = true)]
    ScriptedCall(scripted_call::ScriptedCallArgs),
}

/// An error at the command line's edge: what to print and how to exit.
#[derive(Debug)]
pub struct CliError {
    pub status: ExitStatus,
    pub message: String,
    pub hint: Option<String>,
}

impl CliError {
    pub fn new(status: ExitStatus, message: impl std::fmt::Display) -> CliError {
        CliError {
            status,
            message: message.to_string(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }
}

impl From<crate::config::ConfigError> for CliError {
    fn from(e: crate::config::ConfigError) -> Self {
        let hint = e.hint();
        CliError {
            status: ExitStatus::Usage,
            message: e.to_string(),
            hint,
        }
    }
}

impl From<crate::job::JobError> for CliError {
    /// A job that cannot start or go on: a tree that is not ready (the
    /// workspace's own message and hint), a state dir that is not private
    /// (its hint), anything else the environment's.
    fn from(e: crate::job::JobError) -> Self {
        use crate::job::JobError;
        match e {
            JobError::Workspace(w) => CliError::from(w),
            JobError::StateDir(s) => {
                let hint = s.hint();
                CliError::new(ExitStatus::Environment, s).hint(hint)
            }
            e => CliError::new(ExitStatus::Environment, e),
        }
    }
}

impl From<crate::job::continued::ContinueError> for CliError {
    fn from(e: crate::job::continued::ContinueError) -> Self {
        if let crate::job::continued::ContinueError::Job(j) = e {
            return CliError::from(j);
        }
        let (status, hint) = (e.status(), e.hint());
        CliError {
            status,
            message: e.to_string(),
            hint,
        }
    }
}

impl From<crate::workspace::WorkspaceError> for CliError {
    fn from(e: crate::workspace::WorkspaceError) -> Self {
        let hint = e.hint().map(str::to_owned);
        CliError {
            status: ExitStatus::Environment,
            message: e.to_string(),
            hint,
        }
    }
}

/// The tokio runtime a command runs its async work on: two workers, as
/// many as the machines we target have cores.
/// Print to stdout like `println!`, but a reader that went away (`loopd
/// status --json | head`) ends the command quietly instead of a panic: the
/// data went where it was wanted, and there is no one left to tell.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}
pub(crate) use out;

#[doc(hidden)]
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        tracing::error!(error = %e, "cannot write to stdout");
    }
}

pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot start the runtime: {e}"),
            )
        })
}

/// Call `handler(n, signal)` on a thread of its own for every SIGTERM or
/// SIGINT, `n` counting from 1: the first asks for a graceful stop, a second
/// for an immediate one.
pub fn on_signals(mut handler: impl FnMut(usize, i32) + Send + 'static) -> Result<(), CliError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for (i, sig) in signals.forever().enumerate() {
                handler(i + 1, sig);
            }
        })
        .map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot start the signal thread: {e}"),
            )
        })?;
    Ok(())
}

/// This executable, for the command the CLI runs back into loopd (the
/// hook).
pub fn loopd_exe() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("loopd"))
}

/// Where the model credentials come from besides the environment: shared
/// by every command that runs sessions (`run`, `resume`, `ci`, `daemon`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CredentialArgs {
    /// Read the model credentials from PATH: a directory with one file per
    /// variable named after it (a Kubernetes Secret volume), or a file of
    /// `NAME=value` lines. Read once; its values win over the environment's.
    #[arg(long, value_name = "PATH", env = "LOOPD_CREDENTIAL_FILE")]
    pub credential_file: Option<std::path::PathBuf>,
}

/// The model credentials (and upstreams) the metering gateway uses, every
/// agent's that is set, picked before anything of a job runs. `needed`
/// (the job's agent and critic) must have theirs; with none needed (the
/// daemon) at least one agent must: otherwise exit 5 with a hint.
pub fn access(
    needed: &[&'static dyn crate::agent::Agent],
    credentials: &CredentialArgs,
) -> Result<crate::agent::gateway::AccessMap, CliError> {
    use crate::agent::gateway::{AccessMap, CredentialError};
    // A credential file's values first, the environment's for the rest.
    let from_file = match &credentials.credential_file {
        Some(path) => crate::agent::credential_file::read(path).map_err(|e| {
            let hint = e.hint();
            CliError::new(ExitStatus::Usage, e).hint(hint)
        })?,
        None => Default::default(),
    };
    let get = |k: &str| from_file.get(k).cloned().or_else(|| std::env::var(k).ok());
    let mut map = AccessMap::new();
    let mut errors = Vec::new();
    for agent in crate::agent::AGENTS {
        match agent.access(&get) {
            Ok(a) => {
                map.insert(agent.name(), a);
            }
            Err(e) => errors.push((*agent, e)),
        }
    }
    // The credentials live in this process's memory from now on, never in
    // its environment block, which the agent's processes could read.
    crate::util::scrub_environ(&crate::agent::credential_vars());
    let refuse = |agent: &dyn crate::agent::Agent, e: &CredentialError| {
        let vars = agent.credential_vars().join(" or ");
        let hint = match e {
            CredentialError::Missing { .. } => format!("set {vars}; see docs/agents.md"),
            CredentialError::Unmetered { .. } => {
                format!("unset it and set {vars}; see docs/agents.md")
            }
        };
        CliError::new(ExitStatus::Environment, e.to_string()).hint(hint)
    };
    for agent in needed {
        if !map.contains_key(agent.name()) {
            let (_, e) = errors
                .iter()
                .find(|(a, _)| a.name() == agent.name())
                .expect("an agent without access has its error");
            return Err(refuse(*agent, e));
        }
    }
    if map.is_empty() {
        let (agent, e) = errors.first().expect("at least one agent is registered");
        return Err(refuse(*agent, e));
    }
    Ok(map)
}

/// The control of a job run in the foreground (`run`, `ci`): SIGTERM/SIGINT
/// stop it through the circuit breaker, a second one skips the grace period.
pub fn foreground_control(
    job: &crate::config::Job,
    ws: &crate::workspace::Workspace,
    progress: bool,
    credentials: &CredentialArgs,
) -> Result<crate::job::Control, CliError> {
    let (agent, critic) = job.agents();
    if let Some(path) = &credentials.credential_file {
        refuse_readable_credentials(path, job, ws)?;
    }
    use crate::agent::session::{StopCause, StopRequest};
    use crate::outcome::Reason;
    let (tx, rx) = tokio::sync::watch::channel(None);
    on_signals(move |n, sig| {
        tracing::warn!(
            signal = sig,
            "signal received; {}",
            if n == 1 {
                "stopping the job (a second signal skips the grace period)"
            } else {
                "stopping now"
            }
        );
        let _ = tx.send(Some(StopRequest {
            reason: Reason::Signal,
            hurry: n > 1,
            cause: StopCause::Signal,
        }));
    })?;
    Ok(crate::job::Control {
        stop: rx,
        loopd_exe: loopd_exe(),
        access: access(&[agent, critic], credentials)?,
        job_id: None,
        progress,
    })
}

/// A credential file any of whose entries the job's processes can read —
/// it, or a link on its way, or what it resolves to lies in the
/// repository or under a root of the job's sandbox plan — is refused
/// before it is read: the agent would read the key, or replace a link it
/// can write with one of its own before the job's next start.
fn refuse_readable_credentials(
    path: &std::path::Path,
    job: &crate::config::Job,
    ws: &crate::workspace::Workspace,
) -> Result<(), CliError> {
    let canonical = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let plan = crate::job::sandbox_plan(job, ws, &loopd_exe());
    let readable: Vec<(std::path::PathBuf, String)> = [
        (canonical(&job.repo), "the repository".to_owned()),
        (canonical(ws.root()), "the repository".to_owned()),
    ]
    .into_iter()
    .chain(plan.read_write.iter().chain(&plan.read).map(|(p, why)| {
        (
            canonical(p),
            format!("what the job's sandbox reads as {why}"),
        )
    }))
    .collect();
    crate::agent::credential_file::refuse_exposed(path, &readable).map_err(|e| {
        let hint = e.hint();
        CliError::new(ExitStatus::Usage, e).hint(hint)
    })
}

/// Run the parsed command line.
pub fn dispatch(cli: Cli) -> Result<ExitStatus, CliError> {
    match cli.command {
        Command::Run(args) => run::run(args, !cli.quiet),
        Command::Check(args) => check::check(args),
        Command::Daemon(args) => daemon::daemon(args),
        Command::Submit(args) => submit::submit(args),
        Command::Status(args) => status::status(args),
        Command::Cancel(args) => cancel::cancel(args),
        Command::Report(args) => report_cmd::report(args),
        Command::Tail(args) => tail::tail(args),
        Command::Resume(args) => resume::resume(args, !cli.quiet),
        Command::Escalate(args) => escalate::escalate(args),
        Command::Lessons(args) => lessons_cmd::lessons(args),
        Command::Approve(args) => approve::approve(args),
        Command::Reject(args) => approve::reject(args),
        Command::Ci(args) => ci::ci(args, !cli.quiet),
        Command::Export(args) => export::export(args),
        Command::Hook(args) => hook::hook(args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
        #[cfg(feature = "scripted-agent")]
        Command::ScriptedCall(args) => scripted_call::scripted_call(args),
    }
}
