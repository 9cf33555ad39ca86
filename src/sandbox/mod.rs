//! The sandbox every process of a job runs in: the agent CLI, the critic
//! and every goal step, and all their descendants (Landlock domains and
//! namespaces are inherited and cannot be left).
//!
//! It is an allow-list, never a list of what to hide ([`Plan`]):
//!
//! - **read** (and execute): the system (`/usr`, `/lib*`, `/bin`, `/sbin`,
//!   `/etc` but what holds secrets, `/proc`, `/sys`), the toolchains the
//!   job's programs come from ([`toolchains`]: the directories on `PATH`
//!   and the installs their programs link into, found, never all of
//!   `HOME`), the agent CLI and loopd's own executable, the job's git
//!   directory, and what `[sandbox] read` adds. The real `HOME` and the
//!   state dir are not readable;
//! - **write**: the worktree, a private `HOME` and `TMPDIR` for the job, and
//!   what `[sandbox] read_write` adds;
//! - **devices**: `/dev/null`, `zero`, `full`, `random` and `urandom`
//!   only, and no device ioctl — no terminal (every job process also runs
//!   in a session of its own, without a controlling terminal: see
//!   [`crate::process::command`]); `/dev/shm` is the job's own tmpfs (where it
//!   has its namespaces), never the machine's, whose files outlive the job;
//! - **signals and abstract Unix sockets**: none to or of a process outside
//!   the sandbox (Landlock scopes, ABI 6);
//! - **its own namespaces** ([`Namespaces`], where the system allows
//!   unprivileged user namespaces): a mount namespace in which the
//!   worktree's git directory is read-only (Landlock cannot carve it out of
//!   the writable worktree) and `/dev/shm` is private; and with
//!   `gateway-only`, a network namespace that has only a loopback
//!   interface, with the gateway's listening socket made inside it: the
//!   job's processes reach the gateway and each other on loopback, and
//!   nothing else on any address.
//!
//! The ruleset is built once, in loopd; the child only joins the namespaces
//! and calls `landlock_restrict_self` between fork and exec (system calls
//! on descriptors made beforehand, no allocation).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod env;
mod ns;
mod seccomp;

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};

/// How a job's processes are confined (`summary.json`'s `sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confinement {
    /// In a Landlock sandbox.
    Landlock,
    /// Not confined: the kernel offers no Landlock.
    Unsupported,
    /// Not confined: `[sandbox] enabled = false`.
    Off,
}

/// Where the judge runs (`summary.json`'s `judge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judge {
    /// Every judge run in a root, a network and a tree of its own: BASE_REF
    /// plus the judged change, under a fresh scratch, with a fresh `HOME`.
    Hermetic,
    /// In the worktree the agent wrote (no user namespace with overlays),
    /// what it left beside the change set aside first.
    Shared,
}

/// Whom a job's processes may talk to over the network (`[sandbox] network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// Anything this user can reach.
    #[default]
    Open,
    /// The gateway, and the job's own processes on loopback: nothing else.
    GatewayOnly,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Open => "open",
            Network::GatewayOnly => "gateway-only",
        }
    }
}

/// What a job's processes may touch, and why each entry is there (`loopd
/// check` prints it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Read (and execute) beneath these.
    pub read: Vec<(PathBuf, String)>,
    /// Read, write, create and delete beneath these.
    pub read_write: Vec<(PathBuf, String)>,
}

impl Plan {
    pub fn read(&mut self, path: impl Into<PathBuf>, why: impl Into<String>) {
        let path = path.into();
        if !self.read.iter().any(|(p, _)| *p == path) {
            self.read.push((path, why.into()));
        }
    }

    pub fn read_write(&mut self, path: impl Into<PathBuf>, why: impl Into<String>) {
        let path = path.into();
        if !self.read_write.iter().any(|(p, _)| *p == path) {
            self.read_write.push((path, why.into()));
        }
    }

    /// The same plan with nothing writable (the critic's: it judges, it
    /// changes nothing).
    pub fn read_only(&self) -> Plan {
        let mut plan = self.clone();
        for (p, why) in std::mem::take(&mut plan.read_write) {
            plan.read(p, why);
        }
        plan
    }

    /// The same plan with `hidden` and everything beneath unreachable
    /// (the held-out tests): an entry that holds a hidden path is carved
    /// around it ([`carve`]), an entry beneath one is dropped. Landlock
    /// only ever allows, so this is the only way a path inside a readable
    /// root (a toolchain, `[sandbox] read`) is kept out.
    pub fn hide(&mut self, hidden: &[PathBuf]) {
        let cut = |list: Vec<(PathBuf, String)>| -> Vec<(PathBuf, String)> {
            let mut out = Vec::new();
            for (p, why) in list {
                if hidden.iter().any(|h| p.starts_with(h)) {
                    continue;
                }
                if hidden.iter().any(|h| h.starts_with(&p)) {
                    out.extend(carve(vec![p], hidden).into_iter().map(|c| (c, why.clone())));
                } else {
                    out.push((p, why));
                }
            }
            out
        };
        self.read = cut(std::mem::take(&mut self.read));
        self.read_write = cut(std::mem::take(&mut self.read_write));
    }

    /// The plan as lines for people: `read  PATH  (why)`.
    pub fn render(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .read
            .iter()
            .map(|(p, why)| format!("read        {}  ({why})", p.display()))
            .collect();
        out.extend(
            self.read_write
                .iter()
                .map(|(p, why)| format!("read-write  {}  ({why})", p.display())),
        );
        out.extend(DEVICES.iter().map(|d| format!("read-write  {d}  (device)")));
        out
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("cannot make `{}` for the sandbox: {source}", path.display())]
    Make {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open `{}` for the sandbox: {source}", path.display())]
    Path {
        path: PathBuf,
        #[source]
        source: landlock::PathFdError,
    },
    #[error("without a user namespace, loopd keeps a job's processes from the Unix sockets of your session with a seccomp filter, and this build has none for this architecture: run where unprivileged user namespaces are allowed, or set `[sandbox] enabled = false`")]
    NoSocketBan,
    #[error("the job's namespaces (a root of its own, a private network namespace) cannot be made ({0}); unprivileged user namespaces may be turned off (`kernel.unprivileged_userns_clone`, `user.max_user_namespaces`, an AppArmor restriction)")]
    Namespace(String),
}

/// Why there is no sandbox.
pub const UNSUPPORTED: &str =
    "this kernel does not offer Landlock (Linux 5.13 or newer with `landlock` in the LSM list)";

/// The highest ABI loopd asks for (filesystem rights up to ioctl on
/// devices; scoping is ABI 6).
const FS_ABI: ABI = ABI::V5;

/// Where a system's software lives: readable by every job, and a program
/// under it needs no toolchain of its own.
pub const SOFTWARE: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/nix/store",
];

/// The rest of the system every job reads: its configuration (but
/// [`ETC_SECRETS`]), its processes and devices' descriptions, DNS.
pub const SYSTEM_STATE: &[&str] = &["/etc", "/proc", "/sys", "/run/systemd/resolve"];

/// What under `/etc` holds secrets (host keys, password hashes, the
/// credentials of services, loopd's own unit environment): not readable.
pub const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/loopd",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/openvpn",
    "/etc/letsencrypt",
    "/etc/krb5.keytab",
    "/etc/ipsec.secrets",
    "/etc/ppp",
    "/etc/security/opasswd",
    "/etc/docker",
    "/etc/containers/auth.json",
    "/etc/netrc",
];

/// The device files a job's processes may open (read and write). No
/// terminal: `/dev/tty` would be loopd's own (a goal step's keystrokes
/// pushed into the user's shell), and `/dev/pts/` holds every terminal of
/// the user (what another one shows and is typed into).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Directories that hold a system's software: programs under them need no
/// toolchain of their own.
fn is_system(path: &Path) -> bool {
    SOFTWARE.iter().any(|s| path.starts_with(s))
}

/// The readable part of the system: [`SOFTWARE`] and [`SYSTEM_STATE`] but
/// [`ETC_SECRETS`].
pub fn system_plan(plan: &mut Plan) {
    let hidden: Vec<PathBuf> = ETC_SECRETS.iter().map(PathBuf::from).collect();
    let roots: Vec<PathBuf> = SOFTWARE
        .iter()
        .chain(SYSTEM_STATE)
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    for p in carve(roots, &hidden) {
        plan.read(p, "the system");
    }
}

/// `roots`, with every path of `hidden` cut out: Landlock only ever
/// allows, so an ancestor of a hidden path is replaced by its other
/// children, level by level, as they exist now.
pub fn carve(roots: Vec<PathBuf>, hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut readable = roots;
    for h in hidden {
        if !readable.iter().any(|r| h.starts_with(r)) {
            continue;
        }
        let mut next = Vec::new();
        for r in readable {
            if h == &r {
                continue;
            }
            if h.starts_with(&r) {
                next.extend(children_except(&r, h));
            } else {
                next.push(r);
            }
        }
        readable = next;
    }
    readable
}

/// Every entry beneath `top` that is not `hidden` nor on the way to it.
fn children_except(top: &Path, hidden: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dir = top.to_path_buf();
    while dir != hidden {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            break;
        };
        let mut next = None;
        for e in entries.flatten() {
            let p = e.path();
            if hidden.starts_with(&p) {
                next = Some(p);
            } else {
                out.push(p);
            }
        }
        match next {
            Some(n) => dir = n,
            None => break,
        }
    }
    out
}

/// The toolchain a directory or program belongs to, as the directories to
/// read: a `node_modules` tree, a `bin/`'s prefix, `~/.cargo`'s parts but
/// its credentials, `~/.local`'s `bin` and `lib` but nothing of its `share`.
/// `None` for the system, `HOME` itself, and `/`.
pub fn toolchain_of(path: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if is_system(&path) || path == Path::new("/") || Some(path.as_path()) == home {
        return vec![];
    }
    if let Some(home) = home {
        if let Ok(rel) = path.strip_prefix(home) {
            let mut parts = rel.components();
            let first = parts
                .next()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default();
            match first.as_str() {
                ".cargo" => {
                    return ["bin", "registry", "git", "config.toml", "config"]
                        .iter()
                        .map(|p| home.join(".cargo").join(p))
                        .chain([home.join(".rustup")])
                        .collect()
                }
                ".local" => {
                    return vec![home.join(".local/bin"), home.join(".local/lib")];
                }
                ".pyenv" | ".nvm" | ".rustup" | ".volta" | ".asdf" | ".rbenv" | ".sdkman"
                | ".deno" | ".bun" | ".pnpm" | "go" | ".go" | ".juliaup" | ".ghcup" | ".elan"
                | ".opam" | ".nix-profile" | ".gradle" | ".m2" => return vec![home.join(&first)],
                _ => {}
            }
        }
    }
    // A `node_modules` tree holds a package and its dependencies.
    if let Some(nm) = path
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
    {
        return vec![nm.to_path_buf()];
    }
    let dir = if path.is_dir() {
        path.clone()
    } else {
        path.parent().map_or(path.clone(), Path::to_path_buf)
    };
    // Never HOME, nor a directory that holds it (`/home`), nor `/`: a
    // program kept there (`~/claude`, `/home/claude`) is read as itself.
    let holds_home = |d: &Path| d == Path::new("/") || home.is_some_and(|h| h.starts_with(d));
    if holds_home(&dir) {
        return if path.is_file() { vec![path] } else { vec![] };
    }
    // `<prefix>/bin`: the prefix (a venv, an interpreter's install).
    match (dir.file_name().and_then(|n| n.to_str()), dir.parent()) {
        (Some("bin" | "sbin"), Some(prefix)) if !holds_home(prefix) => {
            vec![prefix.to_path_buf()]
        }
        _ => vec![dir],
    }
}

/// The most entries of one `PATH` directory looked at for links into
/// other installs.
const MAX_LINKS_PER_DIR: usize = 2_000;

/// The toolchains a job's programs come from: every directory on `path`
/// (outside the system) and the installs its programs link into (a venv's
/// `python` → its interpreter's prefix), plus `programs` (absolute paths:
/// the agent CLI, loopd itself, a goal step's program), plus the roots the
/// usual variables name (`CARGO_HOME`, `VIRTUAL_ENV`, …).
pub fn toolchains(
    path: Option<&std::ffi::OsStr>,
    home: Option<&Path>,
    programs: &[PathBuf],
    var: impl Fn(&str) -> Option<String>,
    plan: &mut Plan,
) {
    let add = |p: &Path, why: &str, plan: &mut Plan| {
        for root in toolchain_of(p, home) {
            if root.exists() {
                plan.read(root, why);
            }
        }
    };
    for dir in path.map(std::env::split_paths).into_iter().flatten() {
        if dir.as_os_str().is_empty() || !dir.is_absolute() {
            continue;
        }
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if is_system(&canonical) {
            continue;
        }
        add(&dir, "a directory on PATH", plan);
        // A venv's interpreter, a shim's target: installs elsewhere.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten().take(MAX_LINKS_PER_DIR) {
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                if let Ok(target) = e.path().canonicalize() {
                    add(&target, "linked from a directory on PATH", plan);
                }
            }
        }
        // A venv names its interpreter's install in `pyvenv.cfg`.
        if let Some(prefix) = dir.parent() {
            if let Ok(cfg) = std::fs::read_to_string(prefix.join("pyvenv.cfg")) {
                for line in cfg.lines() {
                    if let Some(home_dir) = line
                        .strip_prefix("home")
                        .map(str::trim_start)
                        .and_then(|l| l.strip_prefix('='))
                    {
                        add(Path::new(home_dir.trim()), "a venv's interpreter", plan);
                    }
                }
            }
        }
    }
    for p in programs {
        add(p, "a program of the job", plan);
    }
    for v in env::TOOLCHAIN_VARS {
        if let Some(val) = var(v).filter(|v| Path::new(v).is_absolute()) {
            let p = PathBuf::from(&val);
            if *v == "CARGO_HOME" {
                for part in ["bin", "registry", "git", "config.toml", "config"] {
                    if p.join(part).exists() {
                        plan.read(p.join(part), format!("${v}"));
                    }
                }
            } else if p.exists() && Some(p.as_path()) != home && p != Path::new("/") {
                plan.read(p, format!("${v}"));
            }
        }
    }
}

/// Variables a sandboxed process needs when its `HOME` moves: where the
/// toolchains found under the real `HOME` keep their state (`rustup`,
/// `cargo` and `pyenv` look under `$HOME` otherwise).
pub fn toolchain_env(
    plan: &Plan,
    home: Option<&Path>,
    var: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let Some(home) = home else { return vec![] };
    let mut out = Vec::new();
    let granted = |p: PathBuf| plan.read.iter().any(|(r, _)| *r == p);
    for (name, dir) in [
        ("CARGO_HOME", home.join(".cargo")),
        ("RUSTUP_HOME", home.join(".rustup")),
        ("PYENV_ROOT", home.join(".pyenv")),
    ] {
        let covered = granted(dir.clone()) || granted(dir.join("bin"));
        if var(name).is_none() && covered {
            out.push((name.to_owned(), dir.to_string_lossy().into_owned()));
        }
    }
    out
}

/// The Landlock ABI this kernel offers (0: none).
///
/// Test builds (feature `failpoints`) can pretend a kernel without Landlock
/// (`LOOPD_TEST_LANDLOCK_ABI=0`) or with an older one, so that the refusals
/// are tested on a kernel that has it.
pub fn kernel_abi() -> i32 {
    #[cfg(feature = "failpoints")]
    if let Some(abi) = std::env::var("LOOPD_TEST_LANDLOCK_ABI")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return abi;
    }
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute and size
    // 0 only asks for the version; it creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(abi).unwrap_or(0).max(0)
}

/// The job's own namespaces, made without privilege (in a user namespace
/// of its own): a mount namespace in which the worktree's git directory is
/// read-only and `/dev/shm` is a private tmpfs, and — with `gateway-only` —
/// a network namespace with only a loopback interface, in which the
/// gateway listens. Sandboxed children join them.
#[derive(Debug)]
pub struct Namespaces {
    user: OwnedFd,
    mnt: OwnedFd,
    net: Option<OwnedFd>,
    /// The mounts made inside (private tmpfs's, overlays), opened inside
    /// the mount namespace: a Landlock rule is on an inode, and theirs are
    /// not the host's. Every right beneath each.
    inner: Vec<OwnedFd>,
    /// Whether its mount namespace has a root of its own (see [`Root`]):
    /// then no path outside the plan — no socket of the user's session —
    /// can be named from inside.
    own_root: bool,
}

/// What the job's namespaces hold.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct NsSpec {
    /// loopd's own executable: run with [`NAMESPACE_HELPER_ARG`] to make
    /// the namespaces.
    #[serde(skip)]
    pub helper: PathBuf,
    /// A root of its own, holding only what the sandbox allows (`None`:
    /// the host's root, with the mounts below made in it).
    pub root: Option<Root>,
    /// Bind-mounted read-only over themselves (a git directory that lies
    /// inside the writable worktree).
    pub read_only: Vec<PathBuf>,
    /// Private tmpfs mounts (`/dev/shm`, `/tmp`).
    pub tmpfs: Vec<PathBuf>,
    /// Overlays, mounted in order after everything else (their lower
    /// layers are read at the host's paths).
    pub overlays: Vec<Overlay>,
    /// A private network with a listening socket on its loopback.
    pub network: bool,
}

/// A root of its own for a sandbox: a tmpfs at `staging` (a directory
/// loopd made for it) holding `read` (read-only) and `read_write`, each
/// bound at its own path, and the devices of [`DEVICES`]; nothing else of
/// the host exists there.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Root {
    pub staging: PathBuf,
    pub read: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
}

impl Root {
    /// The root that shows exactly what `plan` allows, and `private`
    /// (the role's own home and temporary directory).
    pub fn of(plan: &Plan, staging: PathBuf, private: &[&Path]) -> Root {
        Root {
            staging,
            read: plan.read.iter().map(|(p, _)| p.clone()).collect(),
            read_write: plan
                .read_write
                .iter()
                .map(|(p, _)| p.clone())
                .chain(private.iter().map(|p| p.to_path_buf()))
                .collect(),
        }
    }
}

/// An overlay mount: `lowers` (read-only, the first on top) under a
/// writable `upper` (with its `work` directory on the same filesystem),
/// shown at `target`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Overlay {
    pub target: PathBuf,
    pub lowers: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Writable by the sandbox through a rule of its own (a judge's tree):
    /// its descriptor comes back with the namespaces. An overlay beneath
    /// a writable path needs none.
    pub rule: bool,
}

impl Namespaces {
    /// Make the namespaces (and, with `spec.network`, a TCP socket listening
    /// on `127.0.0.1` inside the network namespace, a random port). Test
    /// builds can pretend the system refuses (`LOOPD_TEST_NO_USERNS=1`).
    pub fn create(
        spec: &NsSpec,
    ) -> Result<(Namespaces, Option<std::net::TcpListener>), SandboxError> {
        #[cfg(feature = "failpoints")]
        if std::env::var_os("LOOPD_TEST_NO_USERNS").is_some() {
            return Err(SandboxError::Namespace(
                "refused for this test (LOOPD_TEST_NO_USERNS)".into(),
            ));
        }
        ns::create(spec).map_err(SandboxError::Namespace)
    }

    /// Whether the namespaces have a root of their own.
    pub fn own_root(&self) -> bool {
        self.own_root
    }

    pub fn private_network(&self) -> bool {
        self.net.is_some()
    }
}

/// The first argument that makes `loopd` the namespace helper
/// ([`namespace_helper`]) instead of a command: loopd runs it on itself.
pub const NAMESPACE_HELPER_ARG: &str = "__loopd-namespaces";

/// The namespace helper's whole life (`loopd __loopd-namespaces FD`, the
/// [`NsSpec`] as JSON on stdin): make the job's namespaces and hand them
/// back over the socket `FD`. Returns the exit code. Called by `main`
/// before anything else, in a process that holds no secret.
pub fn namespace_helper(args: &[std::ffi::OsString]) -> u8 {
    ns::helper(args)
}

/// `SECBIT_NOROOT` and its lock (`linux/securebits.h`): uid 0 gains no
/// capability at exec.
const SECBIT_NOROOT: u32 = 1 << 0;
const SECBIT_NOROOT_LOCKED: u32 = 1 << 1;

/// A built sandbox, ready to be entered by children.
#[derive(Debug, Clone)]
pub struct Sandbox {
    fd: Arc<OwnedFd>,
    /// The job's own namespaces (where the system allows them).
    ns: Option<Arc<Namespaces>>,
    /// Where there is no root of the job's own: no Unix socket at all
    /// ([`seccomp`]).
    ban: Option<seccomp::Ban>,
}

impl Sandbox {
    /// Build the ruleset for `plan` (the private `home` and `tmp` made and
    /// added as writable: the role's environment names them, see
    /// [`env::Environment`]); `Ok(None)` when the kernel has no Landlock.
    pub fn build(
        plan: &Plan,
        home: &Path,
        tmp: &Path,
        ns: Option<Arc<Namespaces>>,
    ) -> Result<Option<Sandbox>, SandboxError> {
        let abi = kernel_abi();
        if abi < 1 {
            return Ok(None);
        }
        let read = AccessFs::from_read(FS_ABI);
        let all = AccessFs::from_all(FS_ABI);
        let file = AccessFs::from_file(FS_ABI);
        let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
        for dir in [home, tmp] {
            std::fs::create_dir_all(dir).map_err(|source| SandboxError::Make {
                path: dir.to_path_buf(),
                source,
            })?;
            rules.push((dir.to_path_buf(), all));
        }
        for (p, _) in &plan.read {
            // A file gets file rights only (directory rights on it are an error).
            rules.push((p.clone(), if p.is_dir() { read } else { read & file }));
        }
        for (p, _) in &plan.read_write {
            rules.push((p.clone(), if p.is_dir() { all } else { file }));
        }
        // `/dev`: listing it, and the device files of [`DEVICES`]; the job's
        // private `/dev/shm`, where it has one.
        rules.push((PathBuf::from("/dev"), AccessFs::ReadDir.into()));
        // No device ioctl (Landlock ABI 5): none of these devices needs
        // one, and a terminal's (`TIOCSTI`) is a way out.
        let device = file;
        for d in DEVICES {
            let p = PathBuf::from(d);
            rules.push((p.clone(), if p.is_dir() { read | device } else { device }));
        }
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)?
            .scope(Scope::Signal | Scope::AbstractUnixSocket)?
            .create()?;
        // The job's private tmpfs mounts, by the descriptors opened inside
        // its mount namespace.
        for fd in ns.iter().flat_map(|n| n.inner.iter()) {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, all))?;
        }
        for (path, access) in rules {
            let fd = match PathFd::new(&path) {
                Ok(fd) => fd,
                // Gone since it was listed (or never there): nothing to allow.
                Err(_) if std::fs::symlink_metadata(&path).is_err() => continue,
                Err(source) => return Err(SandboxError::Path { path, source }),
            };
            ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
        }
        // Without a root of its own a socket of the user's session can be
        // named: no Unix socket at all then, or no sandbox.
        let ban = match ns.as_ref().is_some_and(|n| n.own_root) {
            true => None,
            false => Some(seccomp::Ban::unix_sockets().ok_or(SandboxError::NoSocketBan)?),
        };
        let fd: Option<OwnedFd> = ruleset.into();
        Ok(fd.map(|fd| Sandbox {
            fd: Arc::new(fd),
            ns,
            ban,
        }))
    }

    /// Is the network the job's private one?
    pub fn private_network(&self) -> bool {
        self.ns.as_ref().is_some_and(|n| n.private_network())
    }

    /// Enter the sandbox in the child of `cmd`, between fork and exec;
    /// `cwd` is where it runs (joining a mount namespace moves a process to
    /// its root, so it goes back there).
    pub fn apply(&self, cmd: &mut tokio::process::Command, cwd: &Path) {
        let fd = self.fd.as_raw_fd();
        let keep = self.fd.clone();
        let ns = self.ns.as_ref().map(|n| {
            (
                n.user.as_raw_fd(),
                n.mnt.as_raw_fd(),
                n.net.as_ref().map(|f| f.as_raw_fd()),
            )
        });
        let keep_ns = self.ns.clone();
        let ban = self.ban;
        let cwd = std::ffi::CString::new(cwd.as_os_str().as_encoded_bytes()).ok();
        // SAFETY: the closure runs in the forked child before exec and only
        // makes system calls (no allocation, no lock); `keep` and `keep_ns`
        // hold the descriptors open until the command is dropped.
        unsafe {
            cmd.pre_exec(move || {
                let _ = (&keep, &keep_ns);
                if let Some((user, mnt, net)) = ns {
                    if libc::setns(user, libc::CLONE_NEWUSER) != 0
                        || libc::setns(mnt, libc::CLONE_NEWNS) != 0
                        || net.is_some_and(|n| libc::setns(n, libc::CLONE_NEWNET) != 0)
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(cwd) = &cwd {
                        if libc::chdir(cwd.as_ptr()) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    // No capability survives the exec, root or not: the
                    // file modes of the job's root apply to it as to
                    // anyone (its scaffolding is traversal-only).
                    let bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED;
                    if libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(ban) = ban {
                    ban.install()?;
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python helper the sandbox tests' probes share: run `f`, print
    /// `NAME allowed` or `NAME denied ERRNO`.
    pub(super) const TRYIT: &str = r#"
def tryit(name, f):
    try:
        f()
        print(name, "allowed")
    except OSError as e:
        print(name, "denied", e.errno)
"#;

    /// The loopd binary beside this test binary (`target/debug/loopd`):
    /// the namespace helper is loopd's own executable. `scripts/test.sh`
    /// builds it (`cargo test --lib --test it` builds the binary first).
    fn loopd_binary() -> PathBuf {
        let exe = std::env::current_exe().expect("the test binary");
        let bin = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps")
            .join("loopd");
        assert!(
            bin.exists(),
            "{} is missing: build the binary first (`cargo build`, or `cargo test --lib --test it`)",
            bin.display()
        );
        bin
    }

    #[test]
    fn carving_keeps_everything_but_the_hidden_paths() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        for d in ["etc/ssh", "etc/ssl/private", "etc/ssl/certs", "etc/apt"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        std::fs::write(root.join("etc/hosts"), "x").expect("file");
        let r = carve(
            vec![root.join("etc")],
            &[root.join("etc/ssh"), root.join("etc/ssl/private")],
        );
        assert!(r.contains(&root.join("etc/apt")) && r.contains(&root.join("etc/hosts")));
        assert!(r.contains(&root.join("etc/ssl/certs")));
        assert!(!r.iter().any(|p| p.starts_with(root.join("etc/ssh"))));
        assert!(!r
            .iter()
            .any(|p| p.starts_with(root.join("etc/ssl/private"))));
        assert!(!r.contains(&root.join("etc")) && !r.contains(&root.join("etc/ssl")));
    }

    #[test]
    fn a_hidden_path_is_cut_out_of_every_entry_that_holds_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        for d in ["shared/held-out/tests", "shared/data", "tools/bin"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        let mut plan = Plan::default();
        plan.read(root.join("shared"), "[sandbox] read");
        plan.read(root.join("shared/held-out/tests"), "beneath it");
        plan.read_write(root.join("tools"), "elsewhere");
        plan.hide(&[root.join("shared/held-out")]);
        let read: Vec<&PathBuf> = plan.read.iter().map(|(p, _)| p).collect();
        assert_eq!(read, [&root.join("shared/data")], "{plan:?}");
        assert_eq!(plan.read[0].1, "[sandbox] read", "the reason is kept");
        assert_eq!(plan.read_write.len(), 1);
    }

    #[test]
    fn toolchains_are_their_roots_never_home() {
        let tmp = tempfile::tempdir().expect("tmp");
        let home = tmp.path().canonicalize().expect("canonical");
        for d in [
            ".cargo/bin",
            ".cargo/registry",
            ".local/bin",
            ".local/share/keyrings",
            ".pyenv/shims",
            "proj/venv/bin",
            "proj/node_modules/.bin",
            "bin",
        ] {
            std::fs::create_dir_all(home.join(d)).expect("dir");
        }
        let of = |p: &str| toolchain_of(&home.join(p), Some(&home));
        assert!(of(".cargo/bin").contains(&home.join(".cargo/registry")));
        assert!(!of(".cargo/bin").contains(&home.join(".cargo")));
        assert_eq!(
            of(".local/bin"),
            vec![home.join(".local/bin"), home.join(".local/lib")]
        );
        assert_eq!(of(".pyenv/shims"), vec![home.join(".pyenv")]);
        assert_eq!(of("proj/venv/bin"), vec![home.join("proj/venv")]);
        assert_eq!(
            of("proj/node_modules/.bin"),
            vec![home.join("proj/node_modules")]
        );
        assert_eq!(of("bin"), vec![home.join("bin")]);
        assert!(toolchain_of(&home, Some(&home)).is_empty());
        assert!(toolchain_of(Path::new("/usr/bin"), Some(&home)).is_empty());
        // A program kept in HOME itself (a downloaded `~/claude`) is read
        // as itself: never HOME, never what holds it.
        std::fs::write(home.join("claude"), "#!/bin/sh\n").expect("program");
        assert_eq!(of("claude"), vec![home.join("claude")]);
        let parent = home.parent().expect("HOME has a parent");
        assert!(toolchain_of(parent, Some(&home)).is_empty());
    }

    fn plan_for(root: &Path) -> Plan {
        let mut plan = Plan::default();
        system_plan(&mut plan);
        toolchains(
            std::env::var_os("PATH").as_deref(),
            None,
            &[],
            |_| None,
            &mut plan,
        );
        plan.read_write(root.join("work"), "the worktree");
        plan
    }

    /// The sandbox of a test under `root` (its worktree `root/work`), in
    /// `ns` when given.
    fn sandbox_for(root: &Path, ns: Option<Namespaces>) -> Sandbox {
        Sandbox::build(
            &plan_for(root),
            &root.join("sandbox/home"),
            &root.join("sandbox/tmp"),
            ns.map(Arc::new),
        )
        .expect("build")
        .expect("the test machines' kernel offers Landlock")
    }

    /// Run `program args` in `sandbox` at `cwd` with a bare environment;
    /// fail unless its stdout holds every line of `expected`. Returns it.
    async fn run_expecting(
        sandbox: &Sandbox,
        cwd: &Path,
        program: &str,
        args: &[&str],
        expected: &[&str],
    ) -> String {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        sandbox.apply(&mut cmd, cwd);
        let out = cmd.output().await.expect("run");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        for line in expected {
            assert!(
                text.contains(line),
                "{line} in {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        text
    }

    fn test_root() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("work")).expect("work");
        (tmp, root)
    }

    #[tokio::test]
    async fn a_sandboxed_child_reads_and_writes_only_what_is_listed() {
        let (_tmp, root) = test_root();
        for d in ["state", "home-real"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        std::fs::write(root.join("state/secret"), "s3cret").expect("secret");
        std::fs::write(root.join("home-real/.bash_history"), "KEY=sk-ant-x").expect("history");
        let sandbox = sandbox_for(&root, None);
        let script = format!(
            "cat {r}/state/secret; echo read=$?; cat {r}/home-real/.bash_history; echo history=$?; \
             touch {r}/outside; echo outside=$?; touch work/inside; echo inside=$?; \
             HOME={r}/sandbox/home; touch $HOME/h; echo home=$?; echo x > /dev/null; echo null=$?; \
             echo x > /dev/shm/loopd-test-$$; echo shm=$?; ls /usr/bin >/dev/null; echo usr=$?",
            r = root.display(),
        );
        let expected = [
            "read=1",
            "history=1",
            "outside=1",
            "inside=0",
            "home=0",
            "null=0",
            "shm=2",
            "usr=0",
        ];
        let text = run_expecting(&sandbox, &root, "/bin/sh", &["-c", &script], &expected).await;
        assert!(
            !text.contains("s3cret") && !text.contains("sk-ant"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_private_network_has_loopback_and_the_gateway_only() {
        let (_tmp, root) = test_root();
        let outside = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("outside");
        let (ns, gateway) = Namespaces::create(&NsSpec {
            helper: loopd_binary(),
            network: true,
            ..NsSpec::default()
        })
        .expect("this machine allows user namespaces");
        let gateway = gateway.expect("a listener in the network namespace");
        let sandbox = sandbox_for(&root, Some(ns));
        let script = format!(
            r#"{TRYIT}
import socket
tryit("gateway", lambda: socket.create_connection(("127.0.0.1", {gw}), timeout=2))
tryit("outside", lambda: socket.create_connection(("127.0.0.1", {out}), timeout=2))
tryit("other-host", lambda: socket.create_connection(("127.0.0.2", {gw}), timeout=2))
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
tryit("own-server", lambda: socket.create_connection(s.getsockname(), timeout=2))
tryit("udp-out", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)))
"#,
            gw = gateway.local_addr().expect("addr").port(),
            out = outside.local_addr().expect("addr").port(),
        );
        let expected = [
            "gateway allowed",
            "outside denied 111",
            "other-host denied",
            "own-server allowed",
            "udp-out denied 101",
        ];
        run_expecting(&sandbox, &root, "python3", &["-c", &script], &expected).await;
    }

    #[tokio::test]
    async fn the_worktrees_git_dir_is_read_only_and_dev_shm_private() {
        let (_tmp, root) = test_root();
        let work = root.join("work");
        std::fs::create_dir_all(work.join(".git/refs/heads")).expect("git dir");
        std::fs::write(work.join(".git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let (ns, listener) = Namespaces::create(&NsSpec {
            helper: loopd_binary(),
            read_only: vec![work.join(".git")],
            tmpfs: vec![PathBuf::from("/dev/shm")],
            network: false,
            ..NsSpec::default()
        })
        .expect("this machine allows user namespaces");
        assert!(listener.is_none());
        let sandbox = sandbox_for(&root, Some(ns));
        let marker = format!("loopd-shm-test-{}", std::process::id());
        let script = format!(
            "echo 'ref: refs/heads/release' > .git/HEAD; echo head=$?; touch .git/refs/heads/evil; echo ref=$?; \
             touch src.py; echo work=$?; echo x > /dev/shm/{marker}; echo shm=$?; pwd"
        );
        let expected = [
            "head=2",
            "ref=1",
            "work=0",
            "shm=0",
            work.to_str().expect("utf8"),
        ];
        run_expecting(&sandbox, &work, "/bin/sh", &["-c", &script], &expected).await;
        assert_eq!(
            std::fs::read_to_string(work.join(".git/HEAD")).expect("HEAD"),
            "ref: refs/heads/main\n"
        );
        assert!(
            !Path::new("/dev/shm").join(&marker).exists(),
            "the job's /dev/shm is its own"
        );
    }

    /// A root of its own holds exactly the plan: a socket of the user's
    /// session outside it cannot be named, a held-out directory does not
    /// exist even for `stat`, a listing of `/` shows nothing else, and
    /// what the job makes in its own tree (a socket too) works.
    #[tokio::test]
    async fn a_root_of_its_own_shows_only_the_plan() {
        let (_tmp, root) = test_root();
        for d in ["session", "held/tests", "sandbox/home", "sandbox/tmp"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        std::fs::write(root.join("held/tests/test_h.py"), "assert 1\n").expect("held");
        let session = root.join("session/agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&session).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let mut plan = plan_for(&root);
        plan.hide(&[root.join("held")]);
        let (home, tmp) = (root.join("sandbox/home"), root.join("sandbox/tmp"));
        let (ns, _) = Namespaces::create(&NsSpec {
            helper: loopd_binary(),
            root: Some(Root::of(&plan, root.join("staging"), &[&home, &tmp])),
            tmpfs: vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")],
            ..NsSpec::default()
        })
        .expect("this machine allows user namespaces");
        let sandbox = Sandbox::build(&plan, &home, &tmp, Some(Arc::new(ns)))
            .expect("build")
            .expect("Landlock");
        let script = format!(
            r#"{TRYIT}
import os, socket
def connect(p):
    s = socket.socket(socket.AF_UNIX)
    s.connect(p)
tryit("session-socket", lambda: connect("{session}"))
tryit("held-stat", lambda: os.stat("{held}"))
own = "{work}/own.sock"
srv = socket.socket(socket.AF_UNIX); srv.bind(own); srv.listen()
tryit("own-socket", lambda: connect(own))
print("tmp-empty", os.listdir("/tmp") == ["{top}"] or os.listdir("/tmp"))
tryit("null", lambda: open("/dev/null", "w").write("x"))
print("caps", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")])
tryit("list-scaffold", lambda: os.listdir("{top_dir}"))
for p in ["/etc/shadow", "/etc/ssh", "/boot", "/run/user", "/var/run/docker.sock", "{home_real}"]:
    print("exists", p, os.path.lexists(p))
"#,
            session = session.display(),
            held = root.join("held").display(),
            work = root.join("work").display(),
            top = root
                .strip_prefix("/tmp")
                .ok()
                .and_then(|r| r.components().next())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default(),
            home_real = root.join("session").display(),
            top_dir = root.join("sandbox").display(),
        );
        let text = run_expecting(
            &sandbox,
            &root.join("work"),
            "python3",
            &["-c", &script],
            &[
                "session-socket denied 2",
                "held-stat denied 2",
                "own-socket allowed",
                "null allowed",
                "list-scaffold denied",
                "caps ['0000000000000000']",
            ],
        )
        .await;
        assert!(
            listener.accept().is_err(),
            "nothing reached the session's socket"
        );
        for line in text.lines().filter(|l| l.starts_with("exists ")) {
            assert!(
                line.ends_with(" False"),
                "not in the plan, yet there: {line}"
            );
        }
    }
}
