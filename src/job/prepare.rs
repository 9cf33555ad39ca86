//! Before the first attempt (and again on every resume, idempotently): the
//! protection policy the hook enforces, the judges' checksums, the session
//! settings file, and the metering gateway the sessions talk to.

use std::path::{Path, PathBuf};

use super::{Control, JobError};
use crate::agent::gateway::{Admit, Gateway, Refusal};
use crate::agent::AgentCli;
use crate::config::Job;
use crate::guard::caps::{Budget, Spend};
use crate::guard::tamper::{self, Policy};
use crate::rubric::RubricSource;
use crate::sandbox::{self, Sandbox};
use crate::util;
use crate::workspace::Workspace;

/// What every session and gate of the job needs, set up once.
pub struct Prepared {
    pub policy: Policy,
    /// sha256 of the judges' inputs recorded at start: the config, the
    /// rubric, the policy file.
    pub integrity: Vec<(PathBuf, String)>,
    pub settings_path: PathBuf,
    /// Removed from every session's environment: credentials never reach
    /// the agent, its tools or its hooks (sessions get the gateway's
    /// session token instead).
    pub session_env_remove: Vec<std::ffi::OsString>,
    /// The metering gateway, serving while the job runs; dropped before
    /// the ending.
    pub gateway: Option<Gateway>,
    /// The Landlock sandbox of the job's processes (`None`: unsupported or
    /// turned off).
    pub sandbox: Option<Sandbox>,
    pub confinement: sandbox::Confinement,
}

/// The gateway's admission: one more call may start when the job's spend
/// (what the journal held when the gateway started, plus what it metered
/// since) leaves room for a minimal call on the model (budget before cost).
fn admission(budget: Budget, before: Spend) -> Admit {
    Box::new(move |model, metered| {
        let spent = before.plus(&Spend::of_metered(metered));
        let model = if model.is_empty() { "unknown" } else { model };
        budget.can_start(&spent, model).map_err(|reason| Refusal {
            reason,
            message: format!(
                "the job's remaining budget cannot cover one more call on `{model}`: spent ${:.4} of ${}, {} of {} turns, {} of {} tokens",
                spent.cost_usd,
                budget.caps.budget_usd,
                spent.turns,
                budget.caps.max_turns,
                spent.tokens(),
                budget.caps.max_tokens
            ),
        })
    })
}

fn write(path: &Path, text: &str) -> Result<(), JobError> {
    std::fs::write(path, text).map_err(|source| JobError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Set up the job's policy, settings and key server in its run directory.
pub fn prepare(
    job: &Job,
    ws: &Workspace,
    dir: &Path,
    control: &Control,
    base_oid: git2::Oid,
    agent: &dyn AgentCli,
    spent: Spend,
) -> Result<Prepared, JobError> {
    // The credential stays in this process: sessions reach the model only
    // through the gateway, with a per-job session token.
    let budget = Budget {
        caps: job.caps.clone(),
        price: agent.prices(),
    };
    let gateway = Gateway::start(
        control.access.clone(),
        agent.prices(),
        admission(budget, spent),
    )
    .map_err(JobError::Gateway)?;
    // The protection policy: written where the hook reads it, hashed with
    // the other judges' inputs.
    let mut own_files: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(c) = &job.config_file {
        own_files.push((
            c.canonicalize().unwrap_or_else(|_| c.clone()),
            "the job's configuration",
        ));
    }
    if let RubricSource::File(r) = &job.rubric.source {
        own_files.push((r.canonicalize().unwrap_or_else(|_| r.clone()), "the rubric"));
    }
    let mut policy = Policy::build(ws.git2(), ws.root(), base_oid, &job.protect, &own_files)
        .map_err(JobError::Policy)?;
    policy.denials_log = Some(dir.join("hook-denials.jsonl"));
    // Inside a job `.git/` is loopd's: the hook denies writing it.
    policy.git_dirs = ws.git_dirs();
    // What the agent's processes write in the run directory, in
    // directories of their own: the sandbox leaves these writable.
    let mut agent_writes = Vec::new();
    if job.guard.escalation {
        let escalations = dir.join(crate::guard::escalation::DIR);
        util::private_dir(&escalations).map_err(|source| JobError::RunDir {
            path: escalations.clone(),
            source,
        })?;
        agent_writes.push(escalations);
    }
    if job.guard.nudge {
        let counts = dir.join("nudge");
        util::private_dir(&counts).map_err(|source| JobError::RunDir {
            path: counts.clone(),
            source,
        })?;
        agent_writes.push(counts.clone());
        policy.nudge = Some(crate::guard::progress::NudgeSettings {
            window: job.guard.stuck_window,
            repeat: job.guard.stuck_repeat,
            poll_patterns: job.guard.poll_patterns.clone(),
            dir: counts,
            escalate: job
                .guard
                .escalation
                .then(|| crate::guard::escalation::command(&control.loopd_exe)),
        });
    }
    let policy_path = dir.join("policy.json");
    policy
        .outside
        .insert(policy_path.clone(), "loopd's protection policy".into());
    write(
        &policy_path,
        &serde_json::to_string_pretty(&policy).expect("the policy serializes"),
    )?;
    let mut integrity = Vec::new();
    for path in own_files
        .iter()
        .map(|(p, _)| p.clone())
        .chain([policy_path.clone()])
    {
        let sha = tamper::file_sha256(&path).map_err(|source| JobError::Write {
            path: path.clone(),
            source,
        })?;
        integrity.push((path, sha));
    }
    let hook_command = format!(
        "{}={} {} hook pre-tool-use",
        tamper::POLICY_VAR,
        util::shell_quote(&policy_path.to_string_lossy()),
        util::shell_quote(&control.loopd_exe.to_string_lossy())
    );
    let settings = agent.settings(Some(&hook_command));
    let settings_path = dir.join("settings.json");
    write(&settings_path, &settings)?;
    write(
        &dir.join("job.json"),
        &serde_json::to_string_pretty(job).expect("job serializes"),
    )?;
    let session_env_remove = util::SECRET_VARS.iter().map(|v| (*v).into()).collect();
    let (sandbox, confinement) = sandbox_for(
        job,
        ws,
        dir,
        &policy_path,
        &settings_path,
        agent_writes,
        gateway.port(),
    )?;
    Ok(Prepared {
        policy,
        integrity,
        settings_path,
        session_env_remove,
        gateway: Some(gateway),
        sandbox,
        confinement,
    })
}

/// The job's sandbox: the state dir hidden but for the files the hook and
/// the CLI read (the policy, the settings) and the hook's denials log; the
/// worktree, its git directories and a private `HOME` and temp dir writable;
/// plus what `[sandbox]` adds. Refused when required and unsupported.
fn sandbox_for(
    job: &Job,
    ws: &Workspace,
    dir: &Path,
    policy_path: &Path,
    settings_path: &Path,
    agent_writes: Vec<PathBuf>,
    gateway_port: u16,
) -> Result<(Option<Sandbox>, sandbox::Confinement), JobError> {
    use sandbox::Confinement;
    if !job.sandbox.enabled {
        tracing::warn!("the sandbox is off (`[sandbox] enabled = false`): the agent can read and write whatever this user can");
        return Ok((None, Confinement::Off));
    }
    let denials = dir.join("hook-denials.jsonl");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&denials)
        .map_err(|source| JobError::Write {
            path: denials.clone(),
            source,
        })?;
    let mut read_write = vec![ws.root().to_path_buf()];
    read_write.extend(ws.git_dirs());
    read_write.extend(agent_writes);
    read_write.extend(job.sandbox.read_write.iter().cloned());
    let mut read = vec![policy_path.to_path_buf(), settings_path.to_path_buf()];
    read.extend(job.sandbox.read.iter().cloned());
    let mut hidden = vec![job.state_dir.clone()];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        hidden.extend(
            sandbox::CREDENTIALS_IN_HOME
                .iter()
                .map(|c| home.join(c))
                .filter(|p| p.exists()),
        );
    }
    let spec = sandbox::Spec {
        hidden,
        read_write,
        read,
        write_files: vec![denials],
        home: Some(dir.join("sandbox").join("home")),
        tmp: Some(dir.join("sandbox").join("tmp")),
        network: job.sandbox.network,
        gateway_port,
    };
    match Sandbox::build(&spec).map_err(JobError::Sandbox)? {
        Some(s) => {
            tracing::info!(network = ?job.sandbox.network, "the agent, the critic and the goal steps run in a Landlock sandbox");
            Ok((Some(s), Confinement::Landlock))
        }
        None if job.sandbox.require => Err(JobError::SandboxRequired(
            "`--require-sandbox` or `[sandbox] require`",
        )),
        None if job.sandbox.network == sandbox::Network::GatewayOnly => Err(
            JobError::SandboxRequired("`[sandbox] network = \"gateway-only\"`"),
        ),
        None => {
            tracing::warn!("NO SANDBOX: {}; the agent can read and write whatever this user can (pass `--require-sandbox` to refuse)", sandbox::UNSUPPORTED);
            Ok((None, Confinement::Unsupported))
        }
    }
}
