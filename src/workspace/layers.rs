//! The layers a hermetic judge run's tree is made of — the judge's world
//! is not the agent's. Every judge run (the baseline, each goal run, each
//! held-out run) sees, at the worktree's own path, an overlay of:
//!
//! 1. **the base**: BASE_REF's tracked files, written once per job from git
//!    objects into the run directory ([`write_base`]) — no process of the
//!    job can write it;
//! 2. **the baseline's scratch**: what the goal test wrote while it ran
//!    BASE_REF's code (a build directory, caches), kept read-only for later
//!    runs so that they build incrementally from the user's code, never
//!    from anything an agent wrote;
//! 3. **the judged change** ([`write_change`]): the changed files from the
//!    judged tree object, and a whiteout for each deleted one;
//! 4. the held-out files, in a held-out run;
//!
//! under a fresh, writable scratch that is thrown away after the run. The
//! ignored entries present when the job started ([`ignored_at_start`]: a
//! virtualenv, `node_modules`, a build directory) are shown from the
//! worktree, each as an overlay of its own: the agent's sessions see them
//! the same way, so no agent process ever writes the real ones.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use super::WorkspaceError;

/// The most ignored entries shown to a job: each is a mount.
pub const MAX_IGNORED: usize = 256;

/// One ignored entry of the worktree as the job started: shown to the
/// agent and to every judge run as it was then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// Relative to the worktree's root.
    pub path: String,
    /// A directory (shown as an overlay), or a file (bound read-only).
    pub dir: bool,
    /// A submodule's working tree: shown to the judge as the worktree
    /// holds it *now* (the gates judge a change inside one), never fixed
    /// at the job's start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub submodule: bool,
}

/// The ignored entries of the worktree at `root` now, outermost only (an
/// ignored directory, not each file in it), the git directory and links
/// aside; at most [`MAX_IGNORED`], the rest counted.
pub fn ignored_at_start(
    repo: &Repository,
    root: &Path,
) -> Result<(Vec<Ignored>, usize), WorkspaceError> {
    let mut opts = git2::StatusOptions::new();
    opts.include_ignored(true)
        .recurse_ignored_dirs(false)
        .include_untracked(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(|source| WorkspaceError::Git {
            operation: "list the ignored files",
            path: root.to_path_buf(),
            source,
        })?;
    let mut out = Vec::new();
    let mut over = 0;
    for s in statuses.iter() {
        if !s.status().contains(git2::Status::IGNORED) {
            continue;
        }
        let Some(path) = s.path() else { continue };
        let path = path.trim_end_matches('/').to_owned();
        if path.is_empty() || path.split('/').any(|c| c == ".git" || c == "..") {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(root.join(&path)) else {
            continue;
        };
        if !(meta.is_dir() || meta.is_file()) {
            continue;
        }
        if out.len() >= MAX_IGNORED {
            over += 1;
            continue;
        }
        out.push(Ignored {
            path,
            dir: meta.is_dir(),
            submodule: false,
        });
    }
    // Submodules' working trees: the base holds only their commit ids.
    if let Ok(subs) = repo.submodules() {
        for s in subs {
            let path = s.path().to_string_lossy().into_owned();
            if std::fs::symlink_metadata(root.join(&path)).is_ok_and(|m| m.is_dir()) {
                out.push(Ignored {
                    path,
                    dir: true,
                    submodule: true,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((out, over))
}

/// Write BASE_REF's tracked files (`base`, a commit) into `dir` once: a
/// `dir.done` marker holding the commit says it is whole, so a resume
/// reuses it and a crash in the middle starts it again.
pub fn write_base(repo: &Repository, base: Oid, dir: &Path) -> Result<(), WorkspaceError> {
    let marker = dir.with_extension("done");
    if crate::util::read_text(&marker).is_ok_and(|t| t.trim() == base.to_string()) && dir.is_dir() {
        return Ok(());
    }
    remove_tree(dir).map_err(|source| WorkspaceError::Io {
        operation: "clear the judge's base",
        path: dir.to_path_buf(),
        source,
    })?;
    super::checkout::write_tree_of(repo, base, dir)?;
    crate::util::write_atomic(&marker, format!("{base}\n").as_bytes()).map_err(|source| {
        WorkspaceError::Io {
            operation: "mark the judge's base whole",
            path: marker,
            source,
        }
    })
}

/// Which changes of a diff a layer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole change.
    All,
    /// The change without the files it adds to the test tree: the tests
    /// that existed at BASE_REF run beside none of the agent's test code.
    WithoutNewTestFiles,
}

/// Whether `path`, a file the change adds, belongs to the test tree: a test
/// file, a `conftest.py`, or anything under a test directory (`tests/`,
/// `test/`, `__tests__/`, `testdata/`, `spec/`).
pub fn in_test_tree(path: &str, is_test: impl Fn(&str) -> bool) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let in_dir = path.split('/').rev().skip(1).any(|d| {
        matches!(
            d,
            "tests" | "test" | "__tests__" | "testdata" | "spec" | "testing"
        )
    });
    name == "conftest.py" || in_dir || is_test(path)
}

/// What a judged tree changes against BASE_REF, file by file (no rename
/// detection: a rename is a deletion and an addition), submodules aside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub deleted: Vec<String>,
}

impl Delta {
    /// The files it adds to the test tree (see [`in_test_tree`]).
    pub fn new_test_files(&self, is_test: impl Fn(&str) -> bool) -> Vec<String> {
        self.added
            .iter()
            .filter(|p| in_test_tree(p, &is_test))
            .cloned()
            .collect()
    }
}

/// The delta from BASE_REF (`base`, a commit) to the judged tree `tree`.
pub fn delta(repo: &Repository, base: Oid, tree: Oid) -> Result<Delta, WorkspaceError> {
    let git = |source| WorkspaceError::Git {
        operation: "compare the judged tree with BASE_REF",
        path: repo.path().to_path_buf(),
        source,
    };
    let old = repo.find_commit(base).and_then(|c| c.tree()).map_err(git)?;
    let new = repo.find_tree(tree).map_err(git)?;
    let mut opts = git2::DiffOptions::new();
    opts.include_typechange(true).ignore_submodules(true);
    let diff = repo
        .diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts))
        .map_err(git)?;
    let mut out = Delta::default();
    let path = |f: git2::DiffFile<'_>| f.path().map(|p| p.to_string_lossy().into_owned());
    for d in diff.deltas() {
        let gitlink = |f: git2::DiffFile<'_>| f.mode() == git2::FileMode::Commit;
        if gitlink(d.old_file()) || gitlink(d.new_file()) {
            continue;
        }
        match d.status() {
            git2::Delta::Added => out.added.extend(path(d.new_file())),
            git2::Delta::Deleted => out.deleted.extend(path(d.old_file())),
            _ => out.changed.extend(path(d.new_file())),
        }
    }
    Ok(out)
}

/// Write the change from BASE_REF to the judged tree object `tree`
/// (`delta`) into `dir` as an overlay layer: each added or changed file as
/// the judged tree holds it, and a whiteout (a `0:0` character device) for
/// each deleted one; `leave` out of it (the new test files), as if the
/// change had never added them. Returns how many entries it wrote.
pub fn write_change(
    repo: &Repository,
    tree: Oid,
    delta: &Delta,
    leave: &[String],
    dir: &Path,
) -> Result<usize, WorkspaceError> {
    let io = |operation: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| WorkspaceError::Io {
            operation,
            path,
            source,
        }
    };
    let git = |source| WorkspaceError::Git {
        operation: "read the judged tree",
        path: dir.to_path_buf(),
        source,
    };
    remove_tree(dir).map_err(io("clear a layer", dir))?;
    std::fs::create_dir_all(dir).map_err(io("make a layer", dir))?;
    let tree = repo.find_tree(tree).map_err(git)?;
    let mut written = 0;
    for rel in &delta.deleted {
        let path = safe_join(dir, rel)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("make a layer", parent))?;
        }
        // A deleted file's path may be a new directory's (a type change):
        // the directory wins.
        if std::fs::symlink_metadata(&path).is_err() {
            make_whiteout(&path).map_err(io("make a whiteout", &path))?;
            written += 1;
        }
    }
    for rel in delta.added.iter().chain(&delta.changed) {
        if leave.contains(rel) {
            continue;
        }
        let Ok(entry) = tree.get_path(Path::new(rel)) else {
            continue;
        };
        let path = safe_join(dir, rel)?;
        if let Some(parent) = path.parent() {
            // A whiteout where a parent directory goes (a file became a
            // directory) gives way.
            let mut up = Some(parent);
            while let Some(a) = up.filter(|a| a.starts_with(dir) && *a != dir) {
                if std::fs::symlink_metadata(a).is_ok_and(|m| !m.is_dir()) {
                    std::fs::remove_file(a).map_err(io("write a layer", a))?;
                }
                up = a.parent();
            }
            std::fs::create_dir_all(parent).map_err(io("make a layer", parent))?;
        }
        if std::fs::symlink_metadata(&path).is_ok() {
            remove_tree(&path).map_err(io("write a layer", &path))?;
        }
        let blob = repo.find_blob(entry.id()).map_err(git)?;
        match entry.filemode() {
            0o120000 => {
                let target = String::from_utf8_lossy(blob.content()).into_owned();
                std::os::unix::fs::symlink(target, &path).map_err(io("write a layer", &path))?;
            }
            mode => {
                std::fs::write(&path, blob.content()).map_err(io("write a layer", &path))?;
                let perm = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm))
                    .map_err(io("write a layer", &path))?;
            }
        }
        written += 1;
    }
    Ok(written)
}

/// A path a judge run changed in its tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Written {
    /// A file or link written over an existing one with other content
    /// (or of another kind).
    Changed(String),
    /// An existing path deleted, or a directory replaced whole.
    Deleted(String),
}

impl Written {
    pub fn path(&self) -> &str {
        match self {
            Written::Changed(p) | Written::Deleted(p) => p,
        }
    }
}

/// What a judge run's scratch layer (`upper`) changed of the tree its
/// `lowers` (the first on top) made: every file it wrote over an existing
/// one with other content, every existing path it deleted, every
/// directory it replaced whole. What it only created (a cache, a report)
/// is not listed: that is the run's own.
pub fn written(upper: &Path, lowers: &[PathBuf]) -> Vec<Written> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(upper.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = rel.join(e.file_name());
            let name = rel.to_string_lossy().into_owned();
            let here = upper.join(&rel);
            let Ok(meta) = std::fs::symlink_metadata(&here) else {
                continue;
            };
            let below = lower_entry(lowers, &rel);
            if is_whiteout(&meta) {
                if below.is_some() {
                    out.push(Written::Deleted(name));
                }
            } else if meta.is_dir() {
                if opaque(&here) && below.as_ref().is_some_and(|b| dir_has_entries(b)) {
                    out.push(Written::Deleted(name));
                }
                stack.push(rel);
            } else if let Some(b) = below {
                if !same_content(&here, &b) {
                    out.push(Written::Changed(name));
                }
            }
        }
    }
    out.sort_by(|a, b| a.path().cmp(b.path()));
    out
}

/// The entry at `rel` in the highest lower layer that has one (`None`
/// when none has, or the first that has is a whiteout).
fn lower_entry(lowers: &[PathBuf], rel: &Path) -> Option<PathBuf> {
    for l in lowers {
        let p = l.join(rel);
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            return (!is_whiteout(&m)).then_some(p);
        }
    }
    None
}

fn is_whiteout(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    m.file_type().is_char_device() && m.rdev() == 0
}

/// An overlay's opaque directory (`user.overlay.opaque`, the overlays here
/// are mounted with `userxattr`): what the layers below hold there is
/// hidden.
fn opaque(dir: &Path) -> bool {
    let (Ok(path), Ok(name)) = (
        std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()),
        std::ffi::CString::new("user.overlay.opaque"),
    ) else {
        return false;
    };
    let mut value = [0u8; 4];
    // SAFETY: NUL-terminated strings and a buffer of the length given.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n > 0 && value[0] == b'y'
}

fn dir_has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut e| e.next().is_some())
}

/// Whether two paths hold the same: both links to the same target, or
/// both regular files with the same bytes (read in chunks, never whole).
fn same_content(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(ma), Ok(mb)) = (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) else {
        return false;
    };
    if ma.file_type().is_symlink() || mb.file_type().is_symlink() {
        return ma.file_type().is_symlink()
            && mb.file_type().is_symlink()
            && std::fs::read_link(a).ok() == std::fs::read_link(b).ok();
    }
    if !(ma.is_file() && mb.is_file()) {
        return ma.is_dir() && mb.is_dir();
    }
    if ma.len() != mb.len() {
        return false;
    }
    let (Ok(mut fa), Ok(mut fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let (Ok(na), Ok(nb)) = (fa.read(&mut ba), fb.read(&mut bb)) else {
            return false;
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// `rel` under `dir`, refused when it would leave it (`..`, an absolute
/// path) or enter a `.git`.
fn safe_join(dir: &Path, rel: &str) -> Result<PathBuf, WorkspaceError> {
    let p = Path::new(rel);
    let bad = p.is_absolute()
        || p.components().any(|c| {
            matches!(c, std::path::Component::ParentDir)
                || c.as_os_str().eq_ignore_ascii_case(".git")
        });
    if bad {
        return Err(WorkspaceError::Io {
            operation: "write a layer",
            path: dir.join(rel),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a path outside the tree",
            ),
        });
    }
    Ok(dir.join(p))
}

/// An overlay whiteout: a character device `0:0` (made without privilege
/// since Linux 5.8).
fn make_whiteout(path: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in a path"))?;
    // SAFETY: a NUL-terminated path; mknod creates nothing else.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Walk the worktree at `root` (its `.git` aside, links never followed)
/// for what loopd cannot read — a directory it cannot list, a file it
/// cannot open — and make each readable to its owner again (`u+rwx` for a
/// directory, `u+r` for a file). Returns each path, relative, and whether
/// it could be made readable. A process of the job that `chmod 0`s a
/// directory must neither hide a file from the judges nor stop the work
/// from being parked.
pub fn unlock_unreadable(root: &Path) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    && !rel.as_os_str().is_empty() =>
            {
                let fixed = add_mode(&dir, 0o700) && std::fs::read_dir(&dir).is_ok();
                out.push((rel.to_string_lossy().into_owned(), fixed));
                match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(_) => continue,
                }
            }
            Err(_) => continue,
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if rel.as_os_str().is_empty() && name == ".git" {
                continue;
            }
            let Ok(t) = e.file_type() else { continue };
            let child = rel.join(&name);
            if t.is_dir() {
                stack.push(child);
            } else if t.is_file() {
                let path = root.join(&child);
                if let Err(err) = std::fs::File::open(&path) {
                    if err.kind() == std::io::ErrorKind::PermissionDenied {
                        let fixed = add_mode(&path, 0o400) && std::fs::File::open(&path).is_ok();
                        out.push((child.to_string_lossy().into_owned(), fixed));
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// Add `bits` to `path`'s mode; whether it could.
fn add_mode(path: &Path, bits: u32) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode(m.permissions().mode() | bits),
        )
        .is_ok()
    })
}

/// Remove `dir` and everything beneath it, whatever the permissions a
/// process of the job left on its directories (an overlay's `work/work`
/// is made `000`; a goal step may `chmod 0` what it made): never following
/// a link. Nothing to remove is no error.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(dir),
        Ok(_) => {}
    }
    if std::fs::remove_dir_all(dir).is_ok() {
        return Ok(());
    }
    // Make every directory ours to list and empty, then again.
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    std::fs::remove_dir_all(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_in_the_test_tree() {
        let is_test = |p: &str| p.ends_with("_test.go") || p.starts_with("test_");
        for p in [
            "tests/test_new.py",
            "tests/__init__.py",
            "tests/helpers.py",
            "pkg/tests/x.py",
            "conftest.py",
            "sub/conftest.py",
            "lib/__tests__/a.js",
            "x_test.go",
            "test_top.py",
        ] {
            assert!(in_test_tree(p, is_test), "{p}");
        }
        for p in ["rechnung.py", "src/lib.rs", "testsuite.py", "tests.py"] {
            assert!(!in_test_tree(p, is_test), "{p}");
        }
    }

    /// A repository at `dir` with one commit of `files`; the commit.
    fn repo_with(dir: &Path, files: &[(&str, &str)]) -> (Repository, Oid) {
        let repo = Repository::init(dir).unwrap();
        let tree = tree_of(&repo, files);
        let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
        let commit = {
            let t = repo.find_tree(tree).unwrap();
            repo.commit(None, &sig, &sig, "base", &t, &[]).unwrap()
        };
        (repo, commit)
    }

    /// The tree of `files`, written to `repo`'s object database.
    fn tree_of(repo: &Repository, files: &[(&str, &str)]) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, text) in files {
            let blob = repo.blob(text.as_bytes()).unwrap();
            index
                .add(&git2::IndexEntry {
                    ctime: git2::IndexTime::new(0, 0),
                    mtime: git2::IndexTime::new(0, 0),
                    dev: 0,
                    ino: 0,
                    mode: 0o100644,
                    uid: 0,
                    gid: 0,
                    file_size: text.len() as u32,
                    id: blob,
                    flags: 0,
                    flags_extended: 0,
                    path: path.as_bytes().to_vec(),
                })
                .unwrap();
        }
        index.write_tree_to(repo).unwrap()
    }

    #[test]
    fn a_change_layer_holds_the_judged_files_and_whiteouts_and_can_leave_new_tests_out() {
        use std::os::unix::fs::FileTypeExt;
        let t = tempfile::tempdir().unwrap();
        let (repo, base) = repo_with(
            &t.path().join("repo"),
            &[
                ("lib.py", "old\n"),
                ("gone.py", "x\n"),
                ("tests/test_lib.py", "t\n"),
            ],
        );
        let judged = tree_of(
            &repo,
            &[
                ("lib.py", "new\n"),
                ("tests/test_lib.py", "t\n"),
                ("tests/conftest.py", "patch\n"),
                ("added.py", "a\n"),
            ],
        );
        let d = delta(&repo, base, judged).unwrap();
        assert_eq!(d.changed, ["lib.py"]);
        assert_eq!(d.deleted, ["gone.py"]);
        let new_tests = d.new_test_files(|p| p.starts_with("tests/test_"));
        assert_eq!(new_tests, ["tests/conftest.py"]);
        let all = t.path().join("all");
        write_change(&repo, judged, &d, &[], &all).unwrap();
        assert_eq!(
            std::fs::read_to_string(all.join("lib.py")).unwrap(),
            "new\n"
        );
        assert!(all.join("tests/conftest.py").is_file() && all.join("added.py").is_file());
        let gone = std::fs::symlink_metadata(all.join("gone.py")).unwrap();
        assert!(gone.file_type().is_char_device(), "a whiteout");
        assert!(
            !all.join("tests/test_lib.py").exists(),
            "unchanged files come from the base"
        );
        let old = t.path().join("old");
        write_change(&repo, judged, &d, &new_tests, &old).unwrap();
        assert!(!old.join("tests/conftest.py").exists());
        assert!(old.join("added.py").is_file());
    }

    #[test]
    fn what_a_run_wrote_over_its_layers_is_told_apart_from_what_it_made() {
        let t = tempfile::tempdir().unwrap();
        let (upper, change, base) = (t.path().join("u"), t.path().join("c"), t.path().join("b"));
        for d in [&upper, &change, &base] {
            std::fs::create_dir_all(d.join("tests")).unwrap();
        }
        std::fs::write(base.join("tests/test_a.py"), "assert f() == 1\n").unwrap();
        std::fs::write(base.join("same.py"), "x\n").unwrap();
        std::fs::write(base.join("gone.py"), "x\n").unwrap();
        std::fs::write(change.join("lib.py"), "def f(): return 1\n").unwrap();
        // The run: rewrites a test, copies one file up unchanged, deletes
        // one, rewrites the change, and makes a cache of its own.
        std::fs::write(upper.join("tests/test_a.py"), "pass\n").unwrap();
        std::fs::write(upper.join("same.py"), "x\n").unwrap();
        make_whiteout(&upper.join("gone.py")).unwrap();
        std::fs::write(upper.join("lib.py"), "def f(): return 2\n").unwrap();
        std::fs::create_dir_all(upper.join(".pytest_cache")).unwrap();
        std::fs::write(upper.join(".pytest_cache/x"), "c").unwrap();
        let w = written(&upper, &[change, base]);
        assert_eq!(
            w,
            [
                Written::Deleted("gone.py".into()),
                Written::Changed("lib.py".into()),
                Written::Changed("tests/test_a.py".into()),
            ]
        );
    }

    #[test]
    fn a_whiteout_and_a_tree_with_a_locked_directory_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("layer");
        std::fs::create_dir_all(d.join("a/locked/deep")).unwrap();
        std::fs::write(d.join("a/locked/deep/f"), "x").unwrap();
        make_whiteout(&d.join("gone.py")).expect("an unprivileged whiteout");
        std::fs::set_permissions(d.join("a/locked"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        remove_tree(&d).unwrap();
        assert!(!d.exists());
        remove_tree(&d).expect("nothing to remove is fine");
    }
}
