//! The Landlock sandbox every process of a job runs in: the agent CLI, the
//! critic and every goal step, and all their descendants (Landlock domains
//! are inherited and cannot be left).
//!
//! What it allows: read (and execute) everywhere except the state dir;
//! write only to the paths it is given (the worktree, the session's private
//! `HOME` and temp dir, `/dev`) and to single files (the hook's denials
//! log); and no signal to a process outside the sandbox (loopd). The state
//! dir is carved out of "everywhere": Landlock only ever allows, so every
//! sibling of every directory on the way down to the state dir is allowed
//! instead, as it exists when the sandbox is built.
//!
//! With `[sandbox] network = "gateway-only"` the same domain also allows
//! TCP connections to the gateway's port only and no TCP bind (Landlock ABI
//! 4), and a seccomp filter refuses every other internet socket (UDP, SCTP,
//! raw) and `io_uring` (which could make one behind seccomp's back), because
//! Landlock governs TCP alone.
//!
//! The ruleset (and the filter) is built once, in loopd; the child only calls
//! `landlock_restrict_self` on its descriptor (and `prctl` on the filter)
//! between fork and exec (no allocation there).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
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
    /// Anything this user can reach (the default: test suites talk to
    /// themselves over local ports).
    #[default]
    Open,
    /// TCP connect to the gateway's port only; no TCP bind; no other
    /// internet socket.
    GatewayOnly,
}

/// What a job's processes may touch.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Never readable (the state dir), except what is granted below.
    pub hidden: Vec<PathBuf>,
    /// Read, write, create and delete beneath these.
    pub read_write: Vec<PathBuf>,
    /// Read (and execute) beneath these (needed only inside `hidden`).
    pub read: Vec<PathBuf>,
    /// Single files that may be read and appended to.
    pub write_files: Vec<PathBuf>,
    /// The children's private `HOME` and temp dir (made, and writable).
    pub home: Option<PathBuf>,
    pub tmp: Option<PathBuf>,
    /// The network policy, and the gateway's port it lets through.
    pub network: Network,
    pub gateway_port: u16,
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
    #[error("`[sandbox] network = \"gateway-only\"` needs Landlock ABI 4 (Linux 6.7 or newer); this kernel offers ABI {0}")]
    NoNetworkRule(i32),
    #[error("cannot open `{}` for the sandbox: {source}", path.display())]
    Path {
        path: PathBuf,
        #[source]
        source: landlock::PathFdError,
    },
}

/// A built sandbox, ready to be entered by children.
#[derive(Debug, Clone)]
pub struct Sandbox {
    fd: Arc<OwnedFd>,
    /// The seccomp filter of `gateway-only` (none when the network is open).
    filter: Option<Arc<[libc::sock_filter]>>,
    /// Set in every sandboxed child (`HOME`, `TMPDIR`: its private dirs).
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

/// Credential files and directories under the user's `HOME` that a
/// sandboxed process may not read.
pub const CREDENTIALS_IN_HOME: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gh",
    ".config/gcloud",
    ".config/hub",
    ".docker",
    ".kube",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".claude",
    ".claude.json",
];

/// Why there is no sandbox.
pub const UNSUPPORTED: &str =
    "this kernel does not offer Landlock (Linux 5.13 or newer with `landlock` in the LSM list)";

/// The highest ABI loopd asks for (filesystem rights; signal scoping is ABI 6).
const FS_ABI: ABI = ABI::V5;

/// Every directory that is not `hidden` nor on the way to it: the children
/// of each ancestor of `hidden`, except the next step down.
fn readable_except(hidden: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut ancestors: Vec<&Path> = hidden.ancestors().skip(1).collect();
    ancestors.reverse();
    for dir in ancestors {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !hidden.starts_with(&p) {
                out.push(p);
            }
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

/// `AUDIT_ARCH_*` of the architecture loopd is built for: the filter kills
/// a process that makes system calls of another (a 32-bit binary's
/// `socketcall` would otherwise pass unchecked).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The seccomp filter of `gateway-only`: `socket(AF_INET/AF_INET6, …)` is
/// refused (`EACCES`) unless it is a TCP stream, `io_uring_setup` is refused
/// (`ENOSYS`, so runtimes fall back to plain system calls), x32 calls and
/// another architecture's calls kill the process; everything else passes.
fn network_filter() -> Vec<libc::sock_filter> {
    const fn stmt(code: u32, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        }
    }
    use libc::{
        BPF_ABS, BPF_ALU, BPF_AND, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W,
    };
    let load = BPF_LD | BPF_W | BPF_ABS;
    let eq = BPF_JMP | BPF_JEQ | BPF_K;
    // struct seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 i (the
    // low 32 bits first on these little-endian targets).
    let (nr, arch, arg0, arg1, arg2) = (0, 4, 16, 24, 32);
    let allow = libc::SECCOMP_RET_ALLOW;
    let deny = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
    let nosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    vec![
        /* 0 */ stmt(load, arch),
        /* 1 */ jump(eq, AUDIT_ARCH, 1, 0),
        /* 2 */ stmt(BPF_RET | BPF_K, kill),
        /* 3 */ stmt(load, nr),
        /* 4 */ jump(BPF_JMP | BPF_JGE | BPF_K, 0x4000_0000, 0, 1),
        /* 5 */ stmt(BPF_RET | BPF_K, kill),
        /* 6 */ jump(eq, libc::SYS_io_uring_setup as u32, 0, 1),
        /* 7 */ stmt(BPF_RET | BPF_K, nosys),
        /* 8 */ jump(eq, libc::SYS_socket as u32, 1, 0),
        /* 9 */ stmt(BPF_RET | BPF_K, allow),
        /* 10 */ stmt(load, arg0),
        /* 11 */ jump(eq, libc::AF_INET as u32, 1, 0),
        /* 12 */ jump(eq, libc::AF_INET6 as u32, 0, 7),
        /* 13 */ stmt(load, arg1),
        /* 14 */ stmt(BPF_ALU | BPF_AND | BPF_K, 0xf),
        /* 15 */ jump(eq, libc::SOCK_STREAM as u32, 0, 3),
        /* 16 */ stmt(load, arg2),
        /* 17 */ jump(eq, 0, 2, 0),
        /* 18 */ jump(eq, libc::IPPROTO_TCP as u32, 1, 0),
        /* 19 */ stmt(BPF_RET | BPF_K, deny),
        /* 20 */ stmt(BPF_RET | BPF_K, allow),
    ]
}

impl Sandbox {
    /// Build the ruleset; `Ok(None)` when the kernel has no Landlock.
    pub fn build(spec: &Spec) -> Result<Option<Sandbox>, SandboxError> {
        let abi = kernel_abi();
        if abi < 1 {
            return Ok(None);
        }
        if spec.network == Network::GatewayOnly && abi < 4 {
            return Err(SandboxError::NoNetworkRule(abi));
        }
        let read = AccessFs::from_read(FS_ABI);
        let all = AccessFs::from_all(FS_ABI);
        let hidden: Vec<PathBuf> = spec
            .hidden
            .iter()
            .map(|h| h.canonicalize().unwrap_or_else(|_| h.clone()))
            .collect();
        let mut env = Vec::new();
        let mut read_write = spec.read_write.clone();
        for (var, dir) in [("HOME", &spec.home), ("TMPDIR", &spec.tmp)] {
            if let Some(dir) = dir {
                std::fs::create_dir_all(dir).map_err(|source| SandboxError::Make {
                    path: dir.clone(),
                    source,
                })?;
                env.push((var.into(), dir.clone().into_os_string()));
                read_write.push(dir.clone());
            }
        }
        let mut readable = vec![PathBuf::from("/")];
        for h in &hidden {
            let mut next = Vec::new();
            for r in &readable {
                if h.starts_with(r) {
                    next.extend(readable_except(h).into_iter().filter(|p| p.starts_with(r)));
                } else {
                    next.push(r.clone());
                }
            }
            readable = next;
        }
        let file = AccessFs::from_file(FS_ABI);
        let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
        for p in readable.iter().chain(&spec.read) {
            // A file gets file rights only (directory rights on it are an error).
            rules.push((p.clone(), if p.is_dir() { read } else { read & file }));
        }
        for p in read_write.iter().chain([&PathBuf::from("/dev")]) {
            rules.push((p.clone(), all));
        }
        for f in &spec.write_files {
            rules.push((f.clone(), file));
        }
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)?
            .scope(Scope::Signal)?;
        if spec.network == Network::GatewayOnly {
            // Required, not best effort: checked against the ABI above.
            ruleset = ruleset
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessNet::from_all(ABI::V4))?
                .set_compatibility(CompatLevel::BestEffort);
        }
        let mut ruleset = ruleset.create()?;
        if spec.network == Network::GatewayOnly {
            ruleset = ruleset.add_rule(NetPort::new(spec.gateway_port, AccessNet::ConnectTcp))?;
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
        let filter = (spec.network == Network::GatewayOnly).then(|| network_filter().into());
        Ok(fd.map(|fd| Sandbox {
            fd: Arc::new(fd),
            filter,
            env,
        }))
    }

    /// Enter the sandbox in the child of `cmd`, between fork and exec.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let fd = self.fd.as_raw_fd();
        let keep = self.fd.clone();
        let filter = self.filter.clone();
        // SAFETY: the closure runs in the forked child before exec and only
        // makes system calls (no allocation, no lock); `keep` holds the
        // descriptor open, and `filter` the filter, until the command is
        // dropped.
        unsafe {
            cmd.pre_exec(move || {
                let _ = &keep;
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(filter) = &filter {
                    let prog = libc::sock_fprog {
                        len: filter.len() as libc::c_ushort,
                        filter: filter.as_ptr().cast_mut(),
                    };
                    if libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                        &prog as *const libc::sock_fprog as libc::c_ulong,
                        0,
                        0,
                    ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_but_the_hidden_dir_is_listed_readable() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        for d in ["state/runs", "repo", "other"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        std::fs::write(root.join("note.txt"), "x").expect("file");
        let r = readable_except(&root.join("state"));
        assert!(r.contains(&root.join("repo")) && r.contains(&root.join("other")));
        assert!(r.contains(&root.join("note.txt")));
        assert!(
            !r.iter().any(|p| p.starts_with(root.join("state"))),
            "{r:?}"
        );
        assert!(!r.contains(&root), "an ancestor is never granted whole");
        assert!(r.contains(&PathBuf::from("/usr")) || !Path::new("/usr").exists());
    }

    #[tokio::test]
    async fn a_sandboxed_child_cannot_read_the_hidden_dir_or_write_outside() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("state")).expect("state");
        std::fs::write(root.join("state/secret"), "s3cret").expect("secret");
        std::fs::create_dir_all(root.join("work")).expect("work");
        let spec = Spec {
            hidden: vec![root.join("state")],
            read_write: vec![root.join("work")],
            home: Some(root.join("state/sandbox/home")),
            tmp: Some(root.join("state/sandbox/tmp")),
            ..Spec::default()
        };
        let sandbox = Sandbox::build(&spec)
            .expect("build")
            .expect("the test machines' kernel offers Landlock");
        let script = format!(
            "cat {s}/secret; echo read=$?; touch {r}/outside; echo outside=$?; touch work/inside; echo inside=$?; touch $HOME/h; echo home=$?",
            s = root.join("state").display(),
            r = root.display(),
        );
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.args(["-c", &script])
            .current_dir(&root)
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        sandbox.apply(&mut cmd);
        let out = cmd.output().await.expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("s3cret"), "{text}");
        for line in ["read=1", "outside=1", "inside=0", "home=0"] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[tokio::test]
    async fn gateway_only_lets_tcp_reach_the_gateway_port_and_nothing_else() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        let gateway = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("gateway");
        let other = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("other");
        let spec = Spec {
            read_write: vec![root.clone()],
            network: Network::GatewayOnly,
            gateway_port: gateway.local_addr().expect("addr").port(),
            ..Spec::default()
        };
        let sandbox = Sandbox::build(&spec)
            .expect("build")
            .expect("the test machines' kernel offers Landlock ABI 4");
        let script = format!(
            r#"
import socket
def tryit(name, f):
    try:
        f()
        print(name, "allowed")
    except OSError as e:
        print(name, "denied", e.errno)
tryit("gateway", lambda: socket.create_connection(("127.0.0.1", {gw})))
tryit("other", lambda: socket.create_connection(("127.0.0.1", {other})))
tryit("bind", lambda: socket.socket().bind(("127.0.0.1", 0)))
tryit("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
tryit("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
tryit("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
"#,
            gw = spec.gateway_port,
            other = other.local_addr().expect("addr").port(),
        );
        let mut cmd = tokio::process::Command::new("python3");
        cmd.args(["-c", &script]);
        sandbox.apply(&mut cmd);
        let out = cmd.output().await.expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in [
            "gateway allowed",
            "other denied 13",
            "bind denied 13",
            "udp denied 13",
            "udp6 denied 13",
            "unix allowed",
        ] {
            assert!(
                text.contains(line),
                "{line} in {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
