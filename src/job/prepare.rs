//! Before the first attempt (and again on every resume, idempotently): the
//! protection policy the hook's questions are decided by, the judges'
//! checksums, the session settings, and the metering gateway the sessions
//! talk to — the one channel out of the sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::channel::JobChannel;
use super::{Control, JobError};
use crate::agent::gateway::{self, Gateway, Vendor};
use crate::agent::{Agent, Prices};
use crate::config::Job;
use crate::guard::caps::Spend;
use crate::guard::progress::{NudgeSettings, Nudger};
use crate::judges::tamper::{self, Policy};
use crate::rubric::RubricSource;
use crate::sandbox::env::Environment;
use crate::sandbox::{self, Sandbox};
use crate::workspace::Workspace;

/// What every session and gate of the job needs, set up once.
pub struct Prepared {
    pub policy: Policy,
    /// sha256 of the judges' inputs recorded at start: the config, the
    /// rubric.
    pub integrity: Vec<(PathBuf, String)>,
    /// The hook's command line, passed to the CLI inline: nothing of the
    /// state dir needs to be readable by a session.
    pub hook_command: String,
    /// The metering gateway, serving while the job runs; dropped before
    /// the ending.
    pub gateway: Option<Gateway>,
    /// Where the agent's sessions (and the goal steps) run, and the
    /// critic's.
    pub agent: RoleEnv,
    pub critic: RoleEnv,
    pub confinement: sandbox::Confinement,
    pub network: sandbox::Network,
    /// Whether the agent's namespaces show it the ignored entries as
    /// overlays (`agent_view`): only then can the judge have a world of its
    /// own; otherwise it shares the worktree, said loudly.
    pub hermetic: bool,
}

/// The agent's view of the worktree's ignored entries, for a hermetic
/// judge: overlays of its own over the directories, the files read-only
/// (see `world::Hermetic::agent_view`).
pub type AgentView = (Vec<sandbox::Overlay>, Vec<PathBuf>);

/// What the sessions of one role run in.
pub struct RoleEnv {
    /// The gateway's vendor (the CLI's wire, credential and prices).
    pub vendor: usize,
    /// The sessions' private home (the CLI's own state).
    pub home: PathBuf,
    /// Their Landlock sandbox (`None`: unsupported or turned off).
    pub sandbox: Option<Sandbox>,
    /// Their whole environment: the job's allow-list, their private
    /// `HOME` and `TMPDIR`, where the toolchains live. Never loopd's own:
    /// no credential, token or socket path of the user's session.
    pub env: Environment,
}

fn write(path: &Path, text: &str) -> Result<(), JobError> {
    std::fs::write(path, text).map_err(|source| JobError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Set up the job's policy, settings and gateway in its run directory.
pub fn prepare(
    job: &Job,
    ws: &Workspace,
    dir: &Path,
    control: &Control,
    base_oid: git2::Oid,
    spent: Spend,
    agent_view: Option<AgentView>,
) -> Result<Prepared, JobError> {
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
    let goal: Vec<&str> = job
        .goal
        .iter()
        .chain(job.suite.as_ref().map(|s| &s.step))
        .map(|s| s.run.as_str())
        .collect();
    let mut policy = Policy::build(
        ws.git2(),
        ws.root(),
        base_oid,
        &job.protect,
        &own_files,
        &goal,
    )
    .map_err(JobError::Policy)?;
    // Inside a job `.git/` is loopd's: the hook denies writing it.
    policy.git_dirs = ws.git_dirs();
    policy.compile().map_err(JobError::Policy)?;
    let nudger = job.guard.nudge.then(|| {
        Nudger::new(NudgeSettings {
            window: job.guard.stuck_window,
            repeat: job.guard.stuck_repeat,
            poll_patterns: job.guard.poll_patterns.clone(),
            escalate: job
                .guard
                .escalation
                .then(|| crate::guard::escalation::command(&control.loopd_exe)),
        })
    });
    // The judges' own inputs may lie in the agent's tree: read as any file
    // an agent process could have written.
    let mut integrity = Vec::new();
    for (path, _) in &own_files {
        let sha = tamper::file_sha256(path).map_err(|source| JobError::Write {
            path: path.clone(),
            source,
        })?;
        integrity.push((path.clone(), sha));
    }
    write(
        &dir.join("policy.json"),
        &serde_json::to_string_pretty(&policy).expect("the policy serializes"),
    )?;
    let (agent, critic) = job.agents();
    let hook_command = format!(
        "{} hook pre-tool-use --agent {}",
        crate::util::shell_quote(&control.loopd_exe.to_string_lossy()),
        agent.name()
    );
    write(
        &dir.join(crate::record::JOB_FILE),
        &serde_json::to_string_pretty(job).expect("job serializes"),
    )?;
    let homes = (
        dir.join("sandbox").join("home"),
        dir.join("sandbox").join("critic"),
    );
    let tmps = (
        dir.join("sandbox").join("tmp"),
        dir.join("sandbox").join("critic-tmp"),
    );
    let mut hermetic = agent_view;
    let (sandboxes, confinement, network, listener) =
        sandbox_for(job, ws, control, &homes, &tmps, &mut hermetic)?;
    let hermetic = hermetic.is_some();
    if !hermetic {
        tracing::warn!("JUDGE SHARES THE WORKTREE: the system gives loopd no user namespace with overlays, so the goal test runs in the worktree the agent wrote, with what it left beside the change set aside (see docs/security.md)");
    }
    let role_env = |home: &Path, tmp: &Path| -> Result<Environment, JobError> {
        crate::util::private_dir(tmp).map_err(|source| JobError::RunDir {
            path: tmp.to_path_buf(),
            source,
        })?;
        Ok(environment(job, home, tmp))
    };
    let envs = (role_env(&homes.0, &tmps.0)?, role_env(&homes.1, &tmps.1)?);
    // The credentials stay in this process: sessions reach the model only
    // through the gateway, with a per-session token. One vendor per CLI.
    let mut vendors = Vec::new();
    let mut vendor_of = |a: &'static dyn Agent| -> Result<usize, JobError> {
        if let Some(i) = vendors.iter().position(|v: &Vendor| v.name == a.name()) {
            return Ok(i);
        }
        let access = control
            .access
            .get(a.name())
            .cloned()
            .ok_or(JobError::NoAccess(a.name()))?;
        vendors.push(Vendor {
            name: a.name(),
            wire: a.wire(),
            access,
            prices: Prices::new(a.prices(), &job.prices),
        });
        Ok(vendors.len() - 1)
    };
    let agent_vendor = vendor_of(agent)?;
    let critic_vendor = vendor_of(critic)?;
    let channel = JobChannel::new(
        policy.clone(),
        ws.root(),
        nudger,
        job.guard.escalation,
        (agent, critic),
    );
    let gateway = Gateway::start(gateway::Config {
        vendors,
        limits: job.caps.limits,
        before: spent,
        channel: Arc::new(channel),
        listener,
    })
    .map_err(JobError::Gateway)?;
    let (agent_sandbox, critic_sandbox) = sandboxes;
    Ok(Prepared {
        policy,
        integrity,
        hook_command,
        gateway: Some(gateway),
        agent: RoleEnv {
            vendor: agent_vendor,
            home: homes.0,
            sandbox: agent_sandbox,
            env: envs.0,
        },
        critic: RoleEnv {
            vendor: critic_vendor,
            home: homes.1,
            sandbox: critic_sandbox,
            env: envs.1,
        },
        confinement,
        network,
        hermetic,
    })
}

/// The whole environment of a job's processes in one role: the job's
/// allow-list ([`Job::environment`]), `home` and `tmp` as `HOME` and
/// `TMPDIR`, and where the toolchains found under the real `HOME` keep
/// their state (`CARGO_HOME`, … — they looked there before `HOME` moved).
pub fn environment(job: &Job, home: &Path, tmp: &Path) -> Environment {
    let mut env = job.environment().with("HOME", home).with("TMPDIR", tmp);
    let real_home = job.host.var_os("HOME").map(PathBuf::from);
    let plan = toolchain_plan(job);
    for (k, v) in sandbox::toolchain_env(&plan, real_home.as_deref(), |v| {
        env.get(v).map(|s| s.to_string_lossy().into_owned())
    }) {
        env.set(k, v);
    }
    env
}

/// What a job's processes may read and write (`loopd check` prints it):
/// the system, the toolchains of `PATH`, the agent CLI and loopd, the
/// worktree (read-write), its git directories and the objects they borrow
/// (read), and what `[sandbox]` adds. Never the real `HOME`, never the
/// state dir.
pub fn sandbox_plan(job: &Job, ws: &Workspace, loopd_exe: &Path) -> sandbox::Plan {
    let mut plan = judge_plan(job, ws, loopd_exe);
    plan.read_write(ws.root().to_path_buf(), "the worktree");
    plan
}

/// What a judge run reads besides its own tree: the system, the
/// toolchains, the agent CLIs and loopd, the repository's git directories
/// and the objects they borrow, and `[sandbox] read`; it writes `[sandbox]
/// read_write`. Never the worktree (the judge's tree is an overlay at its
/// path) nor a held-out directory.
pub(super) fn judge_plan(job: &Job, ws: &Workspace, loopd_exe: &Path) -> sandbox::Plan {
    let mut plan = software_plan(job, loopd_exe);
    for d in ws.git_dirs() {
        plan.read(d, "the job's git directory");
    }
    for d in ws.borrowed_objects() {
        plan.read(
            d,
            "the repository's objects the job's git directory borrows",
        );
    }
    for p in &job.sandbox.read {
        plan.read(p.clone(), "[sandbox] read");
    }
    for p in &job.sandbox.read_write {
        plan.read_write(p.clone(), "[sandbox] read_write");
    }
    // The held-out tests: a hole in every readable root, whatever holds them.
    plan.hide(&held_out_dirs(job));
    plan
}

/// The held-out steps' directories.
pub fn held_out_dirs(job: &Job) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = job.held_out.iter().map(|h| h.files.clone()).collect();
    // The examiner's tests are held out the same way.
    if job.examiner.is_some() {
        dirs.push(crate::examiner::examiners(&job.state_dir));
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The held-out run's sandbox: it reads the system, the toolchains and
/// `[sandbox] read` (never the worktree, its git directories, or the real
/// `HOME`), writes only the judge-only `tree` and its own `home` and
/// `tmp` (thrown away with it), and has a network of its own with nothing
/// in it — whatever the candidate's code does with the held-out files
/// there, nothing of the job that the agent reads later can hold it.
pub(super) fn held_out_sandbox(
    job: &Job,
    loopd_exe: &Path,
    tree: &Path,
    home: &Path,
    tmp: &Path,
) -> Result<Sandbox, JobError> {
    let mut plan = software_plan(job, loopd_exe);
    for p in &job.sandbox.read {
        plan.read(p.clone(), "[sandbox] read");
    }
    for p in &job.sandbox.read_write {
        plan.read(p.clone(), "[sandbox] read_write, read-only here");
    }
    plan.hide(&held_out_dirs(job));
    plan.read_write(tree.to_path_buf(), "the judge-only tree");
    for d in [home, tmp] {
        crate::util::private_dir(d).map_err(|source| JobError::RunDir {
            path: d.to_path_buf(),
            source,
        })?;
    }
    let staging = tree.with_file_name("root");
    let spec = ns_spec(loopd_exe, &plan, staging, &[home, tmp], Vec::new(), true);
    // The listener would be a gateway's: this network has none.
    let ns = match sandbox::Namespaces::create(&spec) {
        Ok((ns, _listener)) => Some(Arc::new(ns)),
        Err(e) => {
            tracing::warn!(error = %e, "the held-out run gets no namespaces of its own: the system gives loopd no user namespace");
            None
        }
    };
    Sandbox::build(&plan, home, tmp, ns)
        .map_err(JobError::Sandbox)?
        .ok_or(JobError::SandboxRequired(
            "held-out goal steps (`held_out = true`)",
        ))
}

/// What every sandbox of a job reads: the system, the toolchains of
/// `PATH`, the agent CLIs ([`toolchain_plan`]) and loopd.
fn software_plan(job: &Job, loopd_exe: &Path) -> sandbox::Plan {
    let mut plan = toolchain_plan(job);
    // loopd itself: the hook and `loopd escalate` run it.
    plan.read(
        loopd_exe
            .canonicalize()
            .unwrap_or_else(|_| loopd_exe.to_path_buf()),
        "loopd (the hook, `loopd escalate`)",
    );
    plan
}

/// The system, the toolchains of `PATH` and the agent CLIs.
fn toolchain_plan(job: &Job) -> sandbox::Plan {
    let mut plan = sandbox::Plan::default();
    sandbox::system_plan(&mut plan);
    let home = job
        .host
        .var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map(|h| h.canonicalize().unwrap_or(h));
    // loopd itself is read as its one file (below), never as a toolchain:
    // the directory a downloaded loopd sits in (`~/loopd`, a project's
    // `target/release/`) is not the job's to read.
    let programs: Vec<PathBuf> = [job.agent_bin.clone(), job.critic_bin.clone()]
        .into_iter()
        .filter(|p| p.is_absolute())
        .collect();
    sandbox::toolchains(
        job.host.var_os("PATH"),
        home.as_deref(),
        &programs,
        |v| job.host.var(v),
        &mut plan,
    );
    plan
}

/// The namespaces of a sandbox with `plan`: a root of its own that shows
/// only what the plan allows and `private` (the role's home and temporary
/// directory), built at `staging`; `read_only` bound read-only within it;
/// a private `/tmp`, `/var/tmp` and `/dev/shm`; and a network of its own
/// (with nothing in it but what loopd listens on) when asked.
pub(super) fn ns_spec(
    loopd_exe: &Path,
    plan: &sandbox::Plan,
    staging: PathBuf,
    private: &[&Path],
    read_only: Vec<PathBuf>,
    network: bool,
) -> sandbox::NsSpec {
    sandbox::NsSpec {
        helper: loopd_exe.to_path_buf(),
        root: Some(sandbox::Root::of(plan, staging, private)),
        read_only,
        tmpfs: ["/tmp", "/var/tmp", "/dev/shm"]
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        overlays: Vec::new(),
        network,
    }
}

/// The job's own namespaces ([`sandbox::Namespaces`]): a root that shows
/// only what `plan` allows (no socket of the user's session, no held-out
/// directory), the worktree's git directories read-only, a private `/tmp`
/// and `/dev/shm`, and the network — `gateway-only` when asked for
/// (refused where the system cannot give a job a network namespace) or,
/// when `[sandbox] network` says nothing, wherever it can; `open`
/// otherwise, said loudly.
#[allow(clippy::type_complexity)]
fn namespaces_for(
    job: &Job,
    ws: &Workspace,
    loopd_exe: &Path,
    plan: &sandbox::Plan,
    staging: PathBuf,
    private: &[&Path],
    hermetic: &mut Option<AgentView>,
) -> Result<
    (
        sandbox::Network,
        Option<(sandbox::Namespaces, Option<std::net::TcpListener>)>,
    ),
    JobError,
> {
    use sandbox::Network;
    let want_network = job.sandbox.network != Some(Network::Open);
    let mut read_only: Vec<PathBuf> = ws
        .git_dirs()
        .into_iter()
        .filter(|d| d.starts_with(ws.root()))
        .collect();
    // A job repository's `.git` file points loopd's own git at nothing,
    // but the agent's git commands read it.
    read_only.push(ws.root().join(".git"));
    let spec = ns_spec(loopd_exe, plan, staging, private, read_only, want_network);
    // With a hermetic judge the agent sees each ignored entry as an overlay
    // of its own; where the system refuses overlays, the judge is shared.
    let created = match hermetic.clone() {
        Some((overlays, files)) => {
            let mut with = spec.clone();
            with.overlays = overlays;
            with.read_only.extend(files);
            match sandbox::Namespaces::create(&with) {
                Ok(ns) => Ok(ns),
                Err(e) => {
                    tracing::warn!(error = %e, "the agent's namespaces with overlays of the ignored entries cannot be made: the judge shares the worktree");
                    *hermetic = None;
                    sandbox::Namespaces::create(&spec)
                }
            }
        }
        None => sandbox::Namespaces::create(&spec),
    };
    match created {
        Ok(ns) => Ok((
            if want_network {
                Network::GatewayOnly
            } else {
                Network::Open
            },
            Some(ns),
        )),
        Err(e) if job.sandbox.network == Some(Network::GatewayOnly) => Err(JobError::Sandbox(e)),
        Err(e) => {
            tracing::warn!(error = %e, "NETWORK OPEN: the system gives loopd no user namespace, so the job's processes can reach whatever this user can, write the repository's `.git/` (pinned and checked, not prevented) and share `/dev/shm` (set `[sandbox] network = \"gateway-only\"` to refuse to run without one)");
            Ok((Network::Open, None))
        }
    }
}

/// The job's sandboxes ([`sandbox_plan`]) — the agent's and the goal
/// steps' with its `homes.0`, and the critic's: the same plan read-only,
/// with `homes.1` — its network, and the socket the gateway listens on
/// (inside the job's network namespace, when it has one). Refused when
/// required and unsupported.
#[allow(clippy::type_complexity)]
fn sandbox_for(
    job: &Job,
    ws: &Workspace,
    control: &Control,
    homes: &(PathBuf, PathBuf),
    tmps: &(PathBuf, PathBuf),
    hermetic: &mut Option<AgentView>,
) -> Result<
    (
        (Option<Sandbox>, Option<Sandbox>),
        sandbox::Confinement,
        sandbox::Network,
        Option<std::net::TcpListener>,
    ),
    JobError,
> {
    use sandbox::{Confinement, Network};
    for home in [&homes.0, &homes.1] {
        crate::util::private_dir(home).map_err(|source| JobError::RunDir {
            path: home.clone(),
            source,
        })?;
    }
    // `[sandbox] enabled = false` with held-out steps is refused by the
    // configuration.
    let held_out = !job.held_out.is_empty();
    if !job.sandbox.enabled {
        tracing::warn!("the sandbox is off (`[sandbox] enabled = false`): the agent can read and write whatever this user can");
        return Ok(((None, None), Confinement::Off, Network::Open, None));
    }
    let plan = sandbox_plan(job, ws, &control.loopd_exe);
    let private: Vec<&Path> = [&homes.0, &tmps.0, &homes.1, &tmps.1]
        .into_iter()
        .map(PathBuf::as_path)
        .collect();
    for d in &private {
        crate::util::private_dir(d).map_err(|source| JobError::RunDir {
            path: d.to_path_buf(),
            source,
        })?;
    }
    let staging = homes.0.with_file_name("root");
    let (network, ns) = namespaces_for(
        job,
        ws,
        &control.loopd_exe,
        &plan,
        staging,
        &private,
        hermetic,
    )?;
    if ns.is_none() {
        *hermetic = None;
    }
    let (ns, listener) = match ns {
        Some((n, l)) => (Some(Arc::new(n)), l),
        None => (None, None),
    };
    let built = Sandbox::build(&plan, &homes.0, &tmps.0, ns.clone()).map_err(JobError::Sandbox)?;
    let critic =
        Sandbox::build(&plan.read_only(), &homes.1, &tmps.1, ns).map_err(JobError::Sandbox)?;
    match built {
        Some(s) => {
            tracing::info!(
                network = network.as_str(),
                "the agent, the critic and the goal steps run in a Landlock sandbox"
            );
            Ok(((Some(s), critic), Confinement::Landlock, network, listener))
        }
        None if job.sandbox.require => Err(JobError::SandboxRequired(
            "`--require-sandbox` or `[sandbox] require`",
        )),
        None if held_out => Err(JobError::SandboxRequired(
            "held-out goal steps (`held_out = true`)",
        )),
        None if job.sandbox.network == Some(Network::GatewayOnly) => Err(
            JobError::SandboxRequired("`[sandbox] network = \"gateway-only\"`"),
        ),
        None => {
            tracing::warn!("NO SANDBOX: {}; the agent can read and write whatever this user can (pass `--require-sandbox` to refuse)", sandbox::UNSUPPORTED);
            Ok(((None, None), Confinement::Unsupported, Network::Open, None))
        }
    }
}
