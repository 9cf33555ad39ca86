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

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    #[error("`[sandbox] network = \"gateway-only\"` needs a private network namespace, and this system does not let loopd make one ({0}); unprivileged user namespaces may be turned off (`kernel.unprivileged_userns_clone`, `user.max_user_namespaces`, an AppArmor restriction)")]
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
    for v in [
        "CARGO_HOME",
        "RUSTUP_HOME",
        "PYENV_ROOT",
        "NVM_DIR",
        "VOLTA_HOME",
        "GOROOT",
        "GOPATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "JAVA_HOME",
        "PNPM_HOME",
        "BUN_INSTALL",
        "DENO_INSTALL",
    ] {
        if let Some(val) = var(v).filter(|v| Path::new(v).is_absolute()) {
            let p = PathBuf::from(&val);
            if v == "CARGO_HOME" {
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
    /// The private tmpfs mounts, opened inside the mount namespace: a
    /// Landlock rule is on an inode, and theirs are not the host's.
    tmpfs: Vec<OwnedFd>,
}

/// What the job's namespaces hold.
#[derive(Debug, Clone, Default)]
pub struct NsSpec {
    /// loopd's own executable: run with [`NAMESPACE_HELPER_ARG`] to make
    /// the namespaces.
    pub helper: PathBuf,
    /// Bind-mounted read-only over themselves (a git directory that lies
    /// inside the writable worktree).
    pub read_only: Vec<PathBuf>,
    /// Private tmpfs mounts (`/dev/shm`).
    pub tmpfs: Vec<PathBuf>,
    /// A private network with a listening socket on its loopback.
    pub network: bool,
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

    pub fn private_network(&self) -> bool {
        self.net.is_some()
    }
}

/// The first argument that makes `loopd` the namespace helper
/// ([`namespace_helper`]) instead of a command: loopd runs it on itself.
pub const NAMESPACE_HELPER_ARG: &str = "__loopd-namespaces";

/// The namespace helper's whole life (`loopd __loopd-namespaces FD NET
/// [--ro PATH]… [--tmpfs PATH]…`): make the job's namespaces and hand them
/// back over the socket `FD`. Returns the exit code. Called by `main`
/// before anything else, in a process that holds no secret.
pub fn namespace_helper(args: &[std::ffi::OsString]) -> u8 {
    ns::helper(args)
}

mod ns {
    //! Made by a short-lived helper: a fresh exec of loopd's own executable
    //! with an empty environment ([`super::NAMESPACE_HELPER_ARG`]), so it
    //! holds no secret and is dumpable like any new process — a
    //! non-dumpable process (loopd, and any child forked from it before
    //! exec) may not write its own `uid_map` after `unshare`, so an
    //! unprivileged loopd could never make a namespace itself. The helper
    //! leaves loopd's namespaces (`unshare`), maps its own uid and gid,
    //! makes its mounts private, binds the read-only paths and mounts the
    //! tmpfs's, brings `lo` up and opens a listening socket (with a
    //! network), hands the socket and descriptors of its namespaces back
    //! over a socket pair (`SCM_RIGHTS`) and exits. The descriptors keep the
    //! namespaces alive after it is gone.

    use super::*;
    use std::ffi::CString;
    use std::os::unix::process::CommandExt;

    /// The most private tmpfs mounts a job gets.
    pub const MAX_TMPFS: usize = 4;

    /// What the child reports on failure: the step and its errno.
    const STEPS: [&str; 12] = [
        "unshare",
        "setgroups",
        "uid_map",
        "gid_map",
        "make the mounts private",
        "bind a path read-only",
        "mount a private tmpfs",
        "bring up lo",
        "socket",
        "bind",
        "listen",
        "open the namespaces",
    ];

    /// Everything the child needs, made before the fork.
    struct Plan {
        sock: i32,
        network: bool,
        proc_paths: Vec<CString>,
        uid_map: Vec<u8>,
        gid_map: Vec<u8>,
        read_only: Vec<CString>,
        tmpfs: Vec<CString>,
        tmpfs_type: CString,
        tmpfs_data: CString,
        root: CString,
    }

    pub fn create(spec: &NsSpec) -> Result<(Namespaces, Option<std::net::TcpListener>), String> {
        let mut pair = [0i32; 2];
        // SAFETY: a fresh socket pair; both ends are owned below.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        } != 0
        {
            return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: just created, owned by nothing else.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let read_only: Vec<&Path> = spec
            .read_only
            .iter()
            .filter(|p| p.exists())
            .map(PathBuf::as_path)
            .collect();
        let tmpfs_dirs: Vec<&Path> = spec
            .tmpfs
            .iter()
            .filter(|p| p.is_dir())
            .map(PathBuf::as_path)
            .take(MAX_TMPFS)
            .collect();
        let mut cmd = std::process::Command::new(&spec.helper);
        cmd.arg(super::NAMESPACE_HELPER_ARG)
            .arg(HELPER_FD.to_string())
            .arg(if spec.network { "net" } else { "no-net" });
        for p in &read_only {
            cmd.arg("--ro").arg(p);
        }
        for p in &tmpfs_dirs {
            cmd.arg("--tmpfs").arg(p);
        }
        cmd.env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let theirs_fd = theirs.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and makes
        // system calls only: the helper's end of the pair at `HELPER_FD`,
        // kept open across the exec.
        unsafe {
            cmd.pre_exec(move || {
                if theirs_fd == HELPER_FD {
                    if libc::fcntl(HELPER_FD, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(theirs_fd, HELPER_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut proc = cmd
            .spawn()
            .map_err(|e| format!("the namespace helper: {e}"))?;
        drop(theirs);
        let got = receive(ours.as_raw_fd(), spec.network, tmpfs_dirs.len());
        let status = proc.wait();
        got.map_err(|e| match status {
            Ok(s) if !s.success() => format!("{e} (the helper ended: {s})"),
            _ => e,
        })
    }

    /// Where the helper finds its end of the socket pair.
    const HELPER_FD: i32 = 3;

    /// The helper's side: read the plan from the arguments, make the
    /// namespaces, send them; the exit code (2: arguments it cannot read;
    /// a failed step is reported over the socket).
    pub fn helper(args: &[std::ffi::OsString]) -> u8 {
        let mut it = args.iter();
        let (Some(fd), Some(net)) = (it.next(), it.next()) else {
            return 2;
        };
        let Some(sock) = fd.to_str().and_then(|f| f.parse::<i32>().ok()) else {
            return 2;
        };
        let network = net == "net";
        let (mut read_only, mut tmpfs) = (Vec::new(), Vec::new());
        while let Some(flag) = it.next() {
            let Some(path) = it.next() else {
                return 2;
            };
            let Ok(path) = CString::new(path.as_encoded_bytes()) else {
                return 2;
            };
            match flag.to_str() {
                Some("--ro") => read_only.push(path),
                Some("--tmpfs") if tmpfs.len() < MAX_TMPFS => tmpfs.push(path),
                _ => return 2,
            }
        }
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let plan = Plan {
            sock,
            network,
            proc_paths: [
                "/proc/self/setgroups",
                "/proc/self/uid_map",
                "/proc/self/gid_map",
                "/proc/self/ns/user",
                "/proc/self/ns/mnt",
                "/proc/self/ns/net",
            ]
            .iter()
            .map(|p| CString::new(*p).expect("no NUL"))
            .collect(),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            read_only,
            tmpfs,
            tmpfs_type: CString::new("tmpfs").expect("no NUL"),
            tmpfs_data: CString::new("mode=1777,size=256m").expect("no NUL"),
            root: CString::new("/").expect("no NUL"),
        };
        // SAFETY: system calls on descriptors and memory made above; the
        // process is single-threaded (nothing started a thread yet), as
        // `unshare(CLONE_NEWUSER)` requires.
        unsafe { child_calls(&plan) };
        0
    }

    /// The mount flags a bind remount must keep (a user namespace may not
    /// drop them).
    fn locked_flags(path: &CString) -> libc::c_ulong {
        // SAFETY: statvfs into a zeroed struct on the stack.
        unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(path.as_ptr(), &mut st) != 0 {
                return 0;
            }
            let mut flags = 0;
            for (st_flag, ms_flag) in [
                (libc::ST_NOSUID, libc::MS_NOSUID),
                (libc::ST_NODEV, libc::MS_NODEV),
                (libc::ST_NOEXEC, libc::MS_NOEXEC),
                (libc::ST_NOATIME, libc::MS_NOATIME),
                (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
                (libc::ST_RELATIME, libc::MS_RELATIME),
            ] {
                if st.f_flag & st_flag != 0 {
                    flags |= ms_flag;
                }
            }
            flags
        }
    }

    /// # Safety
    /// In the single-threaded helper only.
    unsafe fn child_calls(plan: &Plan) {
        unsafe {
            let sock = plan.sock;
            let fail = |step: usize| {
                let errno = *libc::__errno_location();
                let msg = [
                    b'E',
                    step as u8,
                    (errno & 0xff) as u8,
                    ((errno >> 8) & 0xff) as u8,
                ];
                libc::send(sock, msg.as_ptr().cast(), msg.len(), 0);
            };
            let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
            if plan.network {
                flags |= libc::CLONE_NEWNET;
            }
            if libc::unshare(flags) != 0 {
                return fail(0);
            }
            let write_file = |path: &CString, data: &[u8]| -> bool {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return false;
                }
                let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
                libc::close(fd);
                ok
            };
            if !write_file(&plan.proc_paths[0], b"deny") {
                return fail(1);
            }
            if !write_file(&plan.proc_paths[1], &plan.uid_map) {
                return fail(2);
            }
            if !write_file(&plan.proc_paths[2], &plan.gid_map) {
                return fail(3);
            }
            let null = std::ptr::null::<libc::c_char>();
            if libc::mount(
                null,
                plan.root.as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return fail(4);
            }
            for p in &plan.read_only {
                let keep = locked_flags(p);
                if libc::mount(
                    p.as_ptr(),
                    p.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                    || libc::mount(
                        null,
                        p.as_ptr(),
                        null,
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
                        std::ptr::null(),
                    ) != 0
                {
                    return fail(5);
                }
            }
            let mut roots = [-1i32; MAX_TMPFS];
            for (i, p) in plan.tmpfs.iter().enumerate().take(MAX_TMPFS) {
                if libc::mount(
                    plan.tmpfs_type.as_ptr(),
                    p.as_ptr(),
                    plan.tmpfs_type.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    plan.tmpfs_data.as_ptr().cast(),
                ) != 0
                {
                    return fail(6);
                }
                roots[i] = libc::open(
                    p.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                );
                if roots[i] < 0 {
                    return fail(6);
                }
            }
            let mut listener = -1;
            if plan.network {
                // `lo` up: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP.
                let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
                if s < 0 {
                    return fail(7);
                }
                let mut req: libc::ifreq = std::mem::zeroed();
                req.ifr_name[0] = b'l' as libc::c_char;
                req.ifr_name[1] = b'o' as libc::c_char;
                if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) != 0 {
                    return fail(7);
                }
                req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                if libc::ioctl(s, libc::SIOCSIFFLAGS, &mut req) != 0 {
                    return fail(7);
                }
                libc::close(s);
                let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                if l < 0 {
                    return fail(8);
                }
                let mut addr: libc::sockaddr_in = std::mem::zeroed();
                addr.sin_family = libc::AF_INET as libc::sa_family_t;
                addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
                if libc::bind(
                    l,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                ) != 0
                {
                    return fail(9);
                }
                if libc::listen(l, 1024) != 0 {
                    return fail(10);
                }
                listener = l;
            }
            let open = |p: &CString| libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            let user = open(&plan.proc_paths[3]);
            let mnt = open(&plan.proc_paths[4]);
            let net = if plan.network {
                open(&plan.proc_paths[5])
            } else {
                -1
            };
            if user < 0 || mnt < 0 || (plan.network && net < 0) {
                return fail(11);
            }
            let mut fds = [-1i32; 4 + MAX_TMPFS];
            fds[..4].copy_from_slice(&[user, mnt, net, listener]);
            let t = plan.tmpfs.len().min(MAX_TMPFS);
            fds[4..4 + t].copy_from_slice(&roots[..t]);
            // Sent in order: user, mnt, [net, listener], tmpfs roots.
            let mut send = [-1i32; 4 + MAX_TMPFS];
            let mut n = 0;
            for (i, fd) in fds.iter().enumerate() {
                if i < 2 || (i < 4 && plan.network) || (i >= 4 && i < 4 + t) {
                    send[n] = *fd;
                    n += 1;
                }
            }
            // u64s: a control message header must be aligned.
            let mut cbuf = [0u64; 16];
            let mut byte = [b'K'];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let len = (n * std::mem::size_of::<i32>()) as u32;
            let fds = send;
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(len) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(len) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                len as usize,
            );
            libc::sendmsg(sock, &msg, 0);
        }
    }

    /// loopd's side: the namespaces and the listener, or why not.
    fn receive(
        sock: i32,
        network: bool,
        tmpfs: usize,
    ) -> Result<(Namespaces, Option<std::net::TcpListener>), String> {
        // u64s: a control message header must be aligned.
        let mut cbuf = [0u64; 16];
        let mut data = [0u8; 4];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: a zeroed msghdr pointing at buffers that outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: receiving into the buffers above; the helper's end closes
        // when it exits, so this returns.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n <= 0 {
            return Err("the namespace helper sent nothing".into());
        }
        if data[0] == b'E' {
            let step = STEPS.get(data[1] as usize).copied().unwrap_or("?");
            let errno = i32::from(data[2]) | (i32::from(data[3]) << 8);
            return Err(format!(
                "{step}: {}",
                std::io::Error::from_raw_os_error(errno)
            ));
        }
        let count = if network { 4 } else { 2 } + tmpfs;
        let len = count * std::mem::size_of::<i32>();
        // SAFETY: the control buffer was filled by recvmsg above.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        if cmsg.is_null() {
            return Err("the namespace helper sent no descriptors".into());
        }
        let mut fds = [-1i32; 4 + MAX_TMPFS];
        // SAFETY: SCM_RIGHTS with `count` descriptors, as the child sent.
        unsafe {
            if (*cmsg).cmsg_type != libc::SCM_RIGHTS
                || (*cmsg).cmsg_len as usize != libc::CMSG_LEN(len as u32) as usize
            {
                return Err("the namespace helper sent something else".into());
            }
            std::ptr::copy_nonoverlapping(
                libc::CMSG_DATA(cmsg),
                fds.as_mut_ptr().cast::<u8>(),
                len,
            );
        }
        // SAFETY: descriptors received just now, owned by nothing else.
        unsafe {
            let user = OwnedFd::from_raw_fd(fds[0]);
            let mnt = OwnedFd::from_raw_fd(fds[1]);
            let (net, listener, rest) = if network {
                (
                    Some(OwnedFd::from_raw_fd(fds[2])),
                    Some(std::net::TcpListener::from_raw_fd(fds[3])),
                    4,
                )
            } else {
                (None, None, 2)
            };
            let tmpfs = fds[rest..rest + tmpfs]
                .iter()
                .map(|fd| OwnedFd::from_raw_fd(*fd))
                .collect();
            Ok((
                Namespaces {
                    user,
                    mnt,
                    net,
                    tmpfs,
                },
                listener,
            ))
        }
    }
}

/// A built sandbox, ready to be entered by children.
#[derive(Debug, Clone)]
pub struct Sandbox {
    fd: Arc<OwnedFd>,
    /// The job's own namespaces (where the system allows them).
    ns: Option<Arc<Namespaces>>,
    /// Set in every sandboxed child (`HOME`, `TMPDIR`: its private dirs;
    /// toolchain variables).
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl Sandbox {
    /// Build the ruleset for `plan` (the private `home` and `tmp` made and
    /// added as writable, `env` set in every child); `Ok(None)` when the
    /// kernel has no Landlock.
    pub fn build(
        plan: &Plan,
        home: &Path,
        tmp: &Path,
        env: Vec<(String, String)>,
        ns: Option<Arc<Namespaces>>,
    ) -> Result<Option<Sandbox>, SandboxError> {
        let abi = kernel_abi();
        if abi < 1 {
            return Ok(None);
        }
        let read = AccessFs::from_read(FS_ABI);
        let all = AccessFs::from_all(FS_ABI);
        let file = AccessFs::from_file(FS_ABI);
        let mut child_env: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::new();
        let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
        for (var, dir) in [("HOME", home), ("TMPDIR", tmp)] {
            std::fs::create_dir_all(dir).map_err(|source| SandboxError::Make {
                path: dir.to_path_buf(),
                source,
            })?;
            child_env.push((var.into(), dir.as_os_str().to_owned()));
            rules.push((dir.to_path_buf(), all));
        }
        child_env.extend(env.into_iter().map(|(k, v)| (k.into(), v.into())));
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
        for fd in ns.iter().flat_map(|n| n.tmpfs.iter()) {
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
        let fd: Option<OwnedFd> = ruleset.into();
        Ok(fd.map(|fd| Sandbox {
            fd: Arc::new(fd),
            ns,
            env: child_env,
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
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
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
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
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
            vec![],
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
             touch $HOME/h; echo home=$?; echo x > /dev/null; echo null=$?; \
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
            r#"
import socket
def tryit(name, f):
    try:
        f()
        print(name, "allowed")
    except OSError as e:
        print(name, "denied", e.errno)
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
}
