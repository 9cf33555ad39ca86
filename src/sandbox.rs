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
//! The ruleset is built once, in loopd; the child only calls
//! `landlock_restrict_self` on its descriptor between fork and exec (no
//! allocation there).

use std::os::fd::{AsRawFd, OwnedFd};
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
}

/// A built sandbox, ready to be entered by children.
#[derive(Debug, Clone)]
pub struct Sandbox {
    fd: Arc<OwnedFd>,
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

impl Sandbox {
    /// Build the ruleset; `Ok(None)` when the kernel has no Landlock.
    pub fn build(spec: &Spec) -> Result<Option<Sandbox>, SandboxError> {
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
            .scope(Scope::Signal)?
            .create()?;
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
        // SAFETY: the closure runs in the forked child before exec and only
        // makes two system calls (no allocation, no lock); `keep` holds the
        // descriptor open in the parent until the command is dropped.
        unsafe {
            cmd.pre_exec(move || {
                let _ = &keep;
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
}
