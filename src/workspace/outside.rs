//! Files the judges do not see — ignored files, build artefacts, what the
//! goal test left — and what an agent may plant among them.
//!
//! The goal test runs in the worktree, but the judges (the diff, the
//! critic, the commit) see only the change: a compiled `.pyc` in an
//! ignored `__pycache__/`, or a sourceless `pkg/__init__.pyc` beside a
//! deleted source, turned the goal test green on code that was never
//! judged or committed. So before every goal test after an agent session,
//! loopd sets aside every such file that is new or changed since the
//! baseline ([`Outside::strays`]): the goal test then runs on the judged
//! change plus what the repository held before the job. A file's identity
//! is its inode, size, modification and *change* time: no process can set a
//! ctime back, so a file rewritten with its old timestamps still counts as
//! changed.

use std::collections::BTreeMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }
}

/// Every file and link under a worktree (its `.git` aside), by path
/// relative to the root, with its identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outside {
    files: BTreeMap<Vec<u8>, FileId>,
}

impl Outside {
    /// Walk `root` without following links.
    pub fn scan(root: &Path) -> std::io::Result<Outside> {
        let mut files = BTreeMap::new();
        let mut dirs = vec![PathBuf::new()];
        while let Some(rel) = dirs.pop() {
            let entries = match std::fs::read_dir(root.join(&rel)) {
                Ok(e) => e,
                // Gone, or not ours to read: nothing of it runs in the goal.
                Err(e) if !rel.as_os_str().is_empty() => {
                    tracing::debug!(dir = %rel.display(), error = %e, "not scanned");
                    continue;
                }
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let path = rel.join(entry.file_name());
                if rel.as_os_str().is_empty() && entry.file_name() == ".git" {
                    continue;
                }
                let meta = match std::fs::symlink_metadata(root.join(&path)) {
                    Ok(m) => m,
                    Err(_) => continue,
                };
                if meta.is_dir() {
                    dirs.push(path);
                } else {
                    files.insert(path.into_os_string().into_vec(), FileId::of(&meta));
                }
            }
        }
        Ok(Outside { files })
    }

    /// The files of `now` that are new or changed since `self` and that
    /// the judges do not see (`judged` says which they do): what must not
    /// reach the goal test.
    pub fn strays(&self, now: &Outside, judged: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
        now.files
            .iter()
            .filter(|(p, id)| self.files.get(*p) != Some(id))
            .map(|(p, _)| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
            .filter(|p| !judged(p))
            .collect()
    }

    /// One line per file: the path in hex (any byte may be in a name),
    /// then the identity.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut text = String::with_capacity(self.files.len() * 96);
        for (p, id) in &self.files {
            text.push_str(&format!(
                "{} {} {} {} {} {}\n",
                hex::encode(p),
                id.dev,
                id.ino,
                id.size,
                id.mtime_ns,
                id.ctime_ns
            ));
        }
        crate::util::write_atomic(path, text.as_bytes())
    }

    /// Read what [`Outside::save`] wrote (loopd's own file in the run
    /// directory); a line that does not parse is an error.
    pub fn load(path: &Path) -> std::io::Result<Outside> {
        let bad = |line: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("`{}`: not a file list line: {line:?}", path.display()),
            )
        };
        let text = std::fs::read_to_string(path)?;
        let mut files = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let [p, dev, ino, size, mtime, ctime] = f[..] else {
                return Err(bad(line));
            };
            let id = (|| {
                Some(FileId {
                    dev: dev.parse().ok()?,
                    ino: ino.parse().ok()?,
                    size: size.parse().ok()?,
                    mtime_ns: mtime.parse().ok()?,
                    ctime_ns: ctime.parse().ok()?,
                })
            })()
            .ok_or_else(|| bad(line))?;
            files.insert(hex::decode(p).map_err(|_| bad(line))?, id);
        }
        Ok(Outside { files })
    }
}

/// What [`set_aside`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAside {
    /// Moved under the set-aside directory.
    pub moved: Vec<String>,
    /// Deleted: on another file system than the run directory.
    pub removed: Vec<String>,
}

/// Move `paths` (relative to `root`) under `into`, keeping their layout;
/// a file that cannot be moved there (another file system) is deleted —
/// it is nothing the judges saw or a commit holds.
pub fn set_aside(root: &Path, paths: &[PathBuf], into: &Path) -> std::io::Result<SetAside> {
    let mut done = SetAside::default();
    for rel in paths {
        let from = root.join(rel);
        let to = into.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let name = rel.to_string_lossy().into_owned();
        match std::fs::rename(&from, &to) {
            Ok(()) => done.moved.push(name),
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                std::fs::remove_file(&from)?;
                done.removed.push(name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_and_changed_files_the_judges_do_not_see_are_strays() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        for (p, text) in [
            (".venv/lib/site.py", "ok"),
            ("__pycache__/app.cpython-311.pyc", "old"),
            ("app.py", "x = 1"),
        ] {
            std::fs::create_dir_all(root.join(p).parent().expect("parent")).expect("dir");
            std::fs::write(root.join(p), text).expect("write");
        }
        std::fs::create_dir_all(root.join(".git")).expect("git");
        let base = Outside::scan(root).expect("scan");
        let run_dir = tempfile::tempdir().expect("run dir");
        let saved = run_dir.path().join("outside.txt");
        base.save(&saved).expect("save");
        assert_eq!(Outside::load(&saved).expect("load"), base);

        // The agent plants a compiled module, rewrites the cache, changes
        // the source (judged) and writes into `.git` (not scanned).
        std::fs::write(root.join("__pycache__/app.cpython-311.pyc"), "planted").expect("write");
        std::fs::create_dir_all(root.join("pkg")).expect("dir");
        std::fs::write(root.join("pkg/__init__.pyc"), "sourceless").expect("write");
        std::fs::write(root.join("app.py"), "x = 2").expect("write");
        std::fs::write(root.join(".git/x"), "x").expect("write");
        let now = Outside::scan(root).expect("scan");
        let judged = |p: &Path| p == Path::new("app.py");
        let strays = base.strays(&now, &judged);
        assert_eq!(
            strays,
            [
                PathBuf::from("__pycache__/app.cpython-311.pyc"),
                PathBuf::from("pkg/__init__.pyc")
            ]
        );
        let into = tempfile::tempdir().expect("into");
        let done = set_aside(root, &strays, into.path()).expect("set aside");
        assert_eq!(done.moved.len(), 2);
        assert!(!root.join("pkg/__init__.pyc").exists());
        assert_eq!(
            std::fs::read_to_string(into.path().join("pkg/__init__.pyc")).expect("kept"),
            "sourceless"
        );
        assert!(
            root.join(".venv/lib/site.py").exists(),
            "what was there stays"
        );
    }
}
