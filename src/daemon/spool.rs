//! The spool: a file-based queue whose every move is an atomic rename.
//!
//! ```text
//! <state>/spool/incoming/<id>.json   submitted (by `loopd submit`, daemon up or down)
//! <state>/spool/running/<id>.json    claimed by a daemon (rename = the claim)
//! <state>/spool/done/<id>.json       finished (any final state, cancelled included)
//! <state>/spool/rejected/<name>      unreadable or refused, with <name>.error beside it
//! <state>/spool/cancel/<id>          a request to cancel a running job
//! <state>/spool/submit.sock           the running daemon's intake (see [`super::intake`])
//! ```
//!
//! A job file names a repository, a pinned commit and the run flags — never
//! an agent binary or a state dir: a job cannot make the daemon run anything
//! but its goal steps, which `loopd status` shows.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Overrides;

/// A queued job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub job_id: String,
    /// The repository's working-tree root (absolute).
    pub repo: PathBuf,
    /// The ref as requested (`HEAD`, a branch, a tag, a commit).
    pub git_ref: String,
    /// The commit it pointed at when the job was submitted (BASE_REF).
    pub commit: String,
    /// `loopd run`'s settings, minus the binary and the state dir, which
    /// belong to the daemon (a job file naming them is refused).
    pub flags: Overrides,
    /// The task and goal steps as resolved at submit, for `loopd status`.
    pub task: String,
    pub goal: Vec<String>,
    pub submitted_at: String,
}

/// The spool's directories.
#[derive(Debug, Clone)]
pub struct Spool {
    pub root: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("cannot create `{}`: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` is writable by other users (mode {mode:o}); loopd refuses a spool others can write to", path.display())]
    Insecure { path: PathBuf, mode: u32 },
    #[error("cannot write the job file `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub const DIRS: [&str; 5] = ["incoming", "running", "done", "rejected", "cancel"];

impl Spool {
    pub fn new(state_dir: &Path) -> Spool {
        Spool {
            root: state_dir.join("spool"),
        }
    }

    pub fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Create the directories (0700) and refuse group/world-writable ones.
    pub fn ensure(&self) -> Result<(), SpoolError> {
        use std::os::unix::fs::PermissionsExt;
        for d in std::iter::once(self.root.clone()).chain(DIRS.iter().map(|d| self.dir(d))) {
            crate::util::private_dir(&d).map_err(|source| SpoolError::Create {
                path: d.clone(),
                source,
            })?;
            let mode = std::fs::metadata(&d)
                .map_err(|source| SpoolError::Create {
                    path: d.clone(),
                    source,
                })?
                .permissions()
                .mode();
            if mode & 0o022 != 0 {
                return Err(SpoolError::Insecure {
                    path: d,
                    mode: mode & 0o7777,
                });
            }
        }
        Ok(())
    }

    /// Write a job into `incoming/` atomically (temp file + rename).
    pub fn submit(&self, spec: &JobSpec) -> Result<PathBuf, SpoolError> {
        self.submit_to(spec, "incoming")
    }

    /// Write a job file into one of the spool's directories atomically.
    pub fn submit_to(&self, spec: &JobSpec, dir: &str) -> Result<PathBuf, SpoolError> {
        let path = self.dir(dir).join(format!("{}.json", spec.job_id));
        let tmp = self.dir(dir).join(format!(".{}.tmp", spec.job_id));
        let text = serde_json::to_string_pretty(spec).expect("a job spec serializes");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|source| SpoolError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// Job files in `dir`, oldest id first (ids sort by time).
    pub fn list(&self, dir: &str) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir(dir))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == "json")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        files.sort();
        files
    }

    /// Move a job file between directories (atomic). `false` if it was gone
    /// (another process moved it first).
    pub fn move_to(&self, from: &Path, dir: &str) -> std::io::Result<bool> {
        let to = self
            .dir(dir)
            .join(from.file_name().expect("a job file has a name"));
        match std::fs::rename(from, &to) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Move an unusable job file aside with the reason next to it.
    pub fn reject(&self, from: &Path, why: &str) {
        let name = from.file_name().expect("a job file has a name").to_owned();
        let to = self.dir("rejected").join(&name);
        if let Err(e) = std::fs::rename(from, &to) {
            tracing::error!(file = %from.display(), error = %e, "cannot move a rejected job file aside");
            return;
        }
        self.explain(&to, why);
        tracing::error!(file = %to.display(), why, "job file rejected");
    }

    /// Say why a file in `rejected/` is there: `<name>.error` beside it,
    /// written whole or not at all (a reader never sees it empty).
    pub fn explain(&self, rejected: &Path, why: &str) {
        let name = rejected.file_name().expect("a job file has a name");
        let err = self
            .dir("rejected")
            .join(format!("{}.error", name.to_string_lossy()));
        if let Err(e) = crate::util::write_atomic(&err, format!("{why}\n").as_bytes()) {
            tracing::error!(file = %err.display(), error = %e, "cannot say why a job file was rejected");
        }
    }

    /// Read and check a job file: owned by us, in a private directory,
    /// well-formed (a BOM is tolerated).
    pub fn read(&self, path: &Path) -> Result<JobSpec, String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot stat: {e}"))?;
        if !meta.file_type().is_file() {
            return Err("not a regular file".into());
        }
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(format!(
                "owned by uid {}, not by the daemon's uid {me}; refusing it",
                meta.uid()
            ));
        }
        let dir_mode = std::fs::metadata(path.parent().unwrap_or(Path::new(".")))
            .map(|m| m.mode())
            .unwrap_or(0);
        if dir_mode & 0o022 != 0 {
            return Err(format!(
                "its directory is writable by others (mode {:o}); refusing it",
                dir_mode & 0o7777
            ));
        }
        // Opened as a file another process could have swapped in since the
        // check above: never a FIFO, never a link, never unbounded.
        let bytes = crate::util::read_untrusted(path, MAX_JOB_FILE)
            .map_err(|e| format!("cannot read: {e}"))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        parse_job(&String::from_utf8_lossy(&bytes), &stem)
    }
}

/// The largest job file read.
pub const MAX_JOB_FILE: u64 = 1 << 20;

/// A job file's text, checked: well-formed (a BOM is tolerated), its id
/// the file's name (`stem`), its repository an absolute path.
pub fn parse_job(text: &str, stem: &str) -> Result<JobSpec, String> {
    let spec: JobSpec = serde_json::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| format!("not a valid job file: {e}"))?;
    if spec.job_id != stem || !valid_id(&spec.job_id) {
        return Err(format!(
            "job id `{}` does not match the file name `{stem}`",
            spec.job_id
        ));
    }
    if !spec.repo.is_absolute() {
        return Err(format!(
            "repo `{}` is not an absolute path",
            spec.repo.display()
        ));
    }
    Ok(spec)
}

/// Job ids are what `new_job_id` makes: digits, dashes, hex.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> JobSpec {
        JobSpec {
            job_id: id.into(),
            repo: "/repo".into(),
            git_ref: "HEAD".into(),
            commit: "0".repeat(40),
            flags: Overrides::default(),
            task: "t".into(),
            goal: vec!["true".into()],
            submitted_at: "now".into(),
        }
    }

    #[test]
    fn submit_read_and_refuse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = Spool::new(dir.path());
        spool.ensure().expect("ensure");
        let path = spool
            .submit(&spec("20261130-000000-aaaaaa"))
            .expect("submit");
        assert_eq!(
            spool.read(&path).expect("read").job_id,
            "20261130-000000-aaaaaa"
        );
        assert_eq!(spool.list("incoming"), vec![path.clone()]);
        // A job file may not name the agent binary.
        let bad = spool.dir("incoming").join("20261130-000000-bbbbbb.json");
        let mut v = serde_json::to_value(spec("20261130-000000-bbbbbb")).expect("json");
        v["flags"]["agent_bin"] = "/bin/evil".into();
        std::fs::write(&bad, v.to_string()).expect("write");
        assert!(spool.read(&bad).unwrap_err().contains("agent_bin"));
        // BOM tolerated; truncated refused.
        let bom = spool.dir("incoming").join("20261130-000000-cccccc.json");
        std::fs::write(
            &bom,
            format!(
                "\u{feff}{}",
                serde_json::to_string(&spec("20261130-000000-cccccc")).expect("json")
            ),
        )
        .expect("write");
        assert!(spool.read(&bom).is_ok());
        let cut = spool.dir("incoming").join("20261130-000000-dddddd.json");
        std::fs::write(&cut, "{\"job_id\": \"2026").expect("write");
        assert!(spool.read(&cut).is_err());
        spool.reject(&cut, "truncated");
        assert!(spool
            .dir("rejected")
            .join("20261130-000000-dddddd.json.error")
            .is_file());
    }

    #[test]
    fn world_writable_spool_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = Spool::new(dir.path());
        spool.ensure().expect("ensure");
        std::fs::set_permissions(
            spool.dir("incoming"),
            std::fs::Permissions::from_mode(0o777),
        )
        .expect("chmod");
        assert!(matches!(spool.ensure(), Err(SpoolError::Insecure { .. })));
    }
}
