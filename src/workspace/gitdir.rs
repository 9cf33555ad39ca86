//! `.git/` is loopd's during a job, never the agent's.
//!
//! The files that decide what git does — `config` (remotes, push URLs,
//! `insteadOf` rewrites, proxies, `core.hooksPath`, filters), `hooks/` and
//! `info/` (exclude, attributes, grafts), and the replace refs
//! (`refs/replace/`, `packed-refs`) that would make git show another
//! commit in BASE_REF's place — are pinned when the job starts:
//! their bytes are copied into the run directory and their hashes go to the
//! journal. After every agent session and every goal test the job compares
//! them with the pin; a change is a tamper finding, and loopd puts the pinned
//! files back before any git operation of its own (diff, stash, commit,
//! push). So nothing the agent or the code under test writes there decides
//! where loopd pushes or what its git does.
//!
//! The pin covers the *common* git directory, which a daemon job's worktree
//! shares with the user's checkout.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The paths under the git directory that are pinned: these files, and
/// everything below these directories. `refs/replace/` and `packed-refs`
/// because a replace ref makes git show another commit in BASE_REF's place
/// (a gutted test in `git show`, `git diff`, `git checkout`) long after the
/// job; loopd's own git (libgit2) never follows them.
pub const PINNED_FILES: &[&str] = &["config", "packed-refs"];
pub const PINNED_DIRS: &[&str] = &["hooks", "info", "refs/replace"];

/// One pinned file: its content's sha256 (the name of its copy in the
/// store), its permission bits, and whether it is a symlink (then the
/// content is the link's target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinned {
    pub sha256: String,
    pub mode: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link: bool,
}

/// How a pinned path differs from its pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Drift {
    Added,
    Modified,
    Removed,
    ModeChanged,
}

impl Drift {
    pub fn as_str(self) -> &'static str {
        match self {
            Drift::Added => "was created",
            Drift::Modified => "was modified",
            Drift::Removed => "was deleted",
            Drift::ModeChanged => "had its mode changed",
        }
    }
}

/// A pinned path that changed; `path` is relative to the git directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub path: String,
    pub drift: Drift,
}

/// The pinned state of a git directory, with its copies in `store`.
#[derive(Debug, Clone)]
pub struct Pin {
    git_dir: PathBuf,
    store: PathBuf,
    files: BTreeMap<String, Pinned>,
}

/// What is on disk now at one pinned location.
struct Current {
    pinned: Pinned,
    bytes: Vec<u8>,
}

fn read(path: &Path) -> io::Result<Option<Current>> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let link = meta.file_type().is_symlink();
    let bytes = if link {
        std::fs::read_link(path)?
            .to_string_lossy()
            .into_owned()
            .into_bytes()
    } else if meta.is_file() {
        std::fs::read(path)?
    } else {
        return Ok(None);
    };
    Ok(Some(Current {
        pinned: Pinned {
            sha256: hex::encode(Sha256::digest(&bytes)),
            mode: meta.permissions().mode() & 0o7777,
            link,
        },
        bytes,
    }))
}

/// Every file (and symlink) under `dir`, relative to `base`, sorted.
fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(base, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(base) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// The pinned locations that exist under `git_dir` now.
fn present(git_dir: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for f in PINNED_FILES {
        if std::fs::symlink_metadata(git_dir.join(f)).is_ok() {
            out.push((*f).to_owned());
        }
    }
    for d in PINNED_DIRS {
        walk(git_dir, &git_dir.join(d), &mut out)?;
    }
    out.sort();
    Ok(out)
}

impl Pin {
    /// Pin what `git_dir` holds now, copying the bytes into `store` (a
    /// private directory of the run).
    pub fn take(git_dir: &Path, store: &Path) -> io::Result<Pin> {
        crate::util::private_dir(store)?;
        let mut files = BTreeMap::new();
        for rel in present(git_dir)? {
            if let Some(c) = read(&git_dir.join(&rel))? {
                let copy = store.join(&c.pinned.sha256);
                if !copy.exists() {
                    crate::util::write_atomic(&copy, &c.bytes)?;
                }
                files.insert(rel, c.pinned);
            }
        }
        Ok(Pin {
            git_dir: git_dir.to_path_buf(),
            store: store.to_path_buf(),
            files,
        })
    }

    /// A pin recorded earlier (the journal's list, the copies in `store`).
    pub fn from_record(git_dir: &Path, store: &Path, files: BTreeMap<String, Pinned>) -> Pin {
        Pin {
            git_dir: git_dir.to_path_buf(),
            store: store.to_path_buf(),
            files,
        }
    }

    pub fn files(&self) -> &BTreeMap<String, Pinned> {
        &self.files
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// What differs from the pin now.
    pub fn changes(&self) -> io::Result<Vec<Changed>> {
        let mut out = Vec::new();
        let now = present(&self.git_dir)?;
        for rel in &now {
            if !self.files.contains_key(rel) {
                out.push(Changed {
                    path: rel.clone(),
                    drift: Drift::Added,
                });
            }
        }
        for (rel, pinned) in &self.files {
            let drift = match read(&self.git_dir.join(rel))? {
                None => Some(Drift::Removed),
                Some(c) if c.pinned.sha256 != pinned.sha256 || c.pinned.link != pinned.link => {
                    Some(Drift::Modified)
                }
                Some(c) if c.pinned.mode != pinned.mode => Some(Drift::ModeChanged),
                Some(_) => None,
            };
            if let Some(drift) = drift {
                out.push(Changed {
                    path: rel.clone(),
                    drift,
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Put every pinned file back as it was pinned and remove what was
    /// added. What is replaced or removed is first copied under `keep` (if
    /// given), so nothing written there is lost — only taken out of git's
    /// way. Returns what was put back.
    pub fn restore(&self, keep: Option<&Path>) -> io::Result<Vec<Changed>> {
        use std::os::unix::fs::PermissionsExt;
        let changes = self.changes()?;
        for c in &changes {
            let path = self.git_dir.join(&c.path);
            if let (Some(keep), true) = (keep, c.drift != Drift::Removed) {
                let copy = keep.join(&c.path);
                if let Some(parent) = copy.parent() {
                    crate::util::private_dir(parent)?;
                }
                if let Some(now) = read(&path)? {
                    std::fs::write(&copy, &now.bytes)?;
                }
            }
            match self.files.get(&c.path) {
                None => std::fs::remove_file(&path)?,
                Some(pinned) => {
                    let copy = self.store.join(&pinned.sha256);
                    let bytes = std::fs::read(&copy)?;
                    // The store is a file like any other: a copy whose bytes
                    // are not what was pinned is never written into `.git/`.
                    if hex::encode(Sha256::digest(&bytes)) != pinned.sha256 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "the pinned copy `{}` was changed; not putting it into `.git/`",
                                copy.display()
                            ),
                        ));
                    }
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    if std::fs::symlink_metadata(&path).is_ok() {
                        std::fs::remove_file(&path)?;
                    }
                    if pinned.link {
                        std::os::unix::fs::symlink(
                            String::from_utf8_lossy(&bytes).as_ref(),
                            &path,
                        )?;
                    } else {
                        crate::util::write_atomic(&path, &bytes)?;
                        std::fs::set_permissions(
                            &path,
                            std::fs::Permissions::from_mode(pinned.mode),
                        )?;
                    }
                }
            }
            tracing::warn!(path = %path.display(), drift = c.drift.as_str(), "put a pinned git file back");
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_under_config_hooks_or_info_is_seen_and_put_back() {
        let tmp = tempfile::tempdir().expect("tmp");
        let git = tmp.path().join("git");
        std::fs::create_dir_all(git.join("hooks")).expect("hooks");
        std::fs::create_dir_all(git.join("info")).expect("info");
        std::fs::write(git.join("config"), "[core]\n\tbare = false\n").expect("config");
        std::fs::write(git.join("info/exclude"), "# nothing\n").expect("exclude");
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("head");
        let pin = Pin::take(&git, &tmp.path().join("store")).expect("pin");
        assert_eq!(
            pin.files().keys().collect::<Vec<_>>(),
            ["config", "info/exclude"]
        );
        assert!(pin.changes().expect("changes").is_empty());

        std::fs::write(
            git.join("config"),
            "[core]\n\tbare = false\n[remote \"origin\"]\n\tpushurl = http://127.0.0.1:9/x\n",
        )
        .expect("config");
        std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\ncurl evil\n").expect("hook");
        std::fs::remove_file(git.join("info/exclude")).expect("rm");
        // Not pinned: HEAD and refs are git's business, not this gate's.
        std::fs::write(git.join("HEAD"), "ref: refs/heads/other\n").expect("head");
        let changes = pin.changes().expect("changes");
        assert_eq!(
            changes,
            vec![
                Changed {
                    path: "config".into(),
                    drift: Drift::Modified
                },
                Changed {
                    path: "hooks/pre-commit".into(),
                    drift: Drift::Added
                },
                Changed {
                    path: "info/exclude".into(),
                    drift: Drift::Removed
                },
            ]
        );
        let keep = tmp.path().join("keep");
        assert_eq!(pin.restore(Some(&keep)).expect("restore"), changes);
        assert!(pin.changes().expect("changes").is_empty());
        assert_eq!(
            std::fs::read_to_string(git.join("config")).expect("config"),
            "[core]\n\tbare = false\n"
        );
        assert!(!git.join("hooks/pre-commit").exists());
        // What was taken out of git's way is kept.
        assert!(std::fs::read_to_string(keep.join("config"))
            .expect("kept")
            .contains("pushurl"));
        assert!(keep.join("hooks/pre-commit").exists());
        // A pin read back from its record restores the same way.
        let again = Pin::from_record(&git, &tmp.path().join("store"), pin.files().clone());
        std::fs::write(git.join("info/exclude"), "*.py\n").expect("exclude");
        assert_eq!(again.restore(None).expect("restore").len(), 1);
        assert_eq!(
            std::fs::read_to_string(git.join("info/exclude")).expect("exclude"),
            "# nothing\n"
        );
        // A copy in the store that was tampered with is refused.
        let sha = &pin.files()["config"].sha256;
        std::fs::write(tmp.path().join("store").join(sha), "[remote \"x\"]\n").expect("tamper");
        std::fs::write(git.join("config"), "changed\n").expect("config");
        assert!(pin.restore(None).is_err());
        assert_eq!(
            std::fs::read_to_string(git.join("config")).expect("config"),
            "changed\n"
        );
    }

    #[test]
    fn a_replace_ref_loose_or_packed_is_seen_and_put_back() {
        let tmp = tempfile::tempdir().expect("tmp");
        let git = tmp.path().join("git");
        std::fs::create_dir_all(git.join("refs/heads")).expect("refs");
        std::fs::write(git.join("config"), "[core]\n").expect("config");
        std::fs::write(git.join("packed-refs"), "# pack-refs with: peeled\n").expect("packed");
        let pin = Pin::take(&git, &tmp.path().join("store")).expect("pin");
        let base = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(git.join("refs/replace")).expect("replace");
        std::fs::write(git.join("refs/replace").join(base), format!("{base}\n")).expect("ref");
        std::fs::write(
            git.join("packed-refs"),
            format!("# pack-refs with: peeled\n{base} refs/replace/{base}\n"),
        )
        .expect("packed");
        let changes = pin.changes().expect("changes");
        assert_eq!(
            changes,
            vec![
                Changed {
                    path: "packed-refs".into(),
                    drift: Drift::Modified
                },
                Changed {
                    path: format!("refs/replace/{base}"),
                    drift: Drift::Added
                },
            ]
        );
        pin.restore(None).expect("restore");
        assert!(pin.changes().expect("changes").is_empty());
        assert!(!git.join("refs/replace").join(base).exists());
    }

    #[test]
    fn a_mode_change_on_a_hook_is_a_change() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tmp");
        let git = tmp.path().join("git");
        std::fs::create_dir_all(git.join("hooks")).expect("hooks");
        let hook = git.join("hooks/pre-push.sample");
        std::fs::write(&hook, "#!/bin/sh\n").expect("hook");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let pin = Pin::take(&git, &tmp.path().join("store")).expect("pin");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(pin.changes().expect("changes")[0].drift, Drift::ModeChanged);
        pin.restore(None).expect("restore");
        let mode = std::fs::metadata(&hook).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
    }
}
