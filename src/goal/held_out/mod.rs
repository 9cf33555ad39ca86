//! Held-out goal steps: tests a lead keeps outside the repository, which
//! no process of the job ever reads — not the agent's, not the visible goal
//! steps' (the sandbox's allow-list has a hole where they are). After the
//! visible goal is green they run on a judge-only tree: the candidate
//! change written from git objects, the held-out files copied over it,
//! sandboxed to read the system and that tree and to write only the tree,
//! in a network of its own, and thrown away after. So an implementation
//! that passes the tests the agent saw and fails the ones it did not is
//! rejected, and what the agent learns of them is what `[guard]
//! held_out_feedback` allows ([`feedback`]).
//!
//! The held-out steps' one home below the job: what they are, their files,
//! and what a red run tells. Running them for a job, and the gate that
//! reads the run, are `crate::job`'s.

pub mod feedback;

pub use feedback::{
    findings, known_ids, one_bit, CountCheck, Feedback, Outcome, FULL_OUTPUT, MAX_IDS,
};

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::GoalStep;

/// One held-out step: a goal step, and the directory its files come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldOutStep {
    #[serde(flatten)]
    pub step: GoalStep,
    /// Outside the repository; copied into the judge-only tree's root. A
    /// git repository when `commit` is set.
    pub files: PathBuf,
    /// `ref = "…"`: the commit of `files` it named when the job was
    /// configured (hex); its tree is what is copied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// Resolve `git_ref` in the repository at `repo` to a commit whose tree is
/// within [`MAX_FILES`] and [`MAX_BYTES`]; the commit's id, or why not.
pub fn pin_ref(repo: &Path, git_ref: &str) -> Result<String, String> {
    let r = git2::Repository::open(repo)
        .map_err(|e| format!("not a git repository: {}", e.message()))?;
    let commit = r
        .revparse_single(git_ref)
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| format!("not a commit: {}", e.message()))?;
    let tree = commit.tree().map_err(|e| e.message().to_owned())?;
    let (mut files, mut bytes) = (0usize, 0u64);
    let mut over = false;
    tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
        if entry.kind() == Some(git2::ObjectType::Blob) {
            files += 1;
            bytes += entry
                .to_object(&r)
                .ok()
                .and_then(|o| o.as_blob().map(|b| b.size() as u64))
                .unwrap_or(0);
            if files > MAX_FILES || bytes > MAX_BYTES {
                over = true;
                return git2::TreeWalkResult::Abort;
            }
        }
        git2::TreeWalkResult::Ok
    })
    .ok();
    if over {
        return Err(format!(
            "more than {MAX_FILES} files or {} MiB",
            MAX_BYTES >> 20
        ));
    }
    Ok(commit.id().to_string())
}

/// Why the job's repository at `job_repo` can reach `commit`, a held-out
/// commit of the repository at `held` (`None`: it cannot). The agent runs
/// git on the job's repository from its Bash, and git reads every object
/// that repository's database holds or borrows: held-out tests in it, in a
/// linked worktree of it, or in a repository either borrows objects from
/// (`objects/info/alternates`), are tests the agent can print with `git
/// show`. Checked on the common git directories, the alternates of both,
/// and the job's object database itself (which follows its alternates).
pub fn reachable_from_job(held: &Path, job_repo: &Path, commit: &str) -> Option<String> {
    let job = git2::Repository::open(job_repo).ok()?;
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let job_common = canonical(job.commondir());
    if let Ok(h) = git2::Repository::open(held) {
        let held_common = canonical(h.commondir());
        if held_common == job_common {
            return Some(format!(
                "it is the job's repository or a worktree of it (git directory `{}`)",
                job_common.display()
            ));
        }
        let (held_objects, job_objects) = (held_common.join("objects"), job_common.join("objects"));
        if alternates(&job_objects).contains(&canonical(&held_objects)) {
            return Some(format!(
                "the job's repository borrows its objects (`{}` lists `{}`)",
                job_objects.join("info/alternates").display(),
                held_objects.display()
            ));
        }
        if alternates(&held_objects).contains(&canonical(&job_objects)) {
            return Some(format!(
                "it borrows the job's repository's objects (`{}` lists `{}`)",
                held_objects.join("info/alternates").display(),
                job_objects.display()
            ));
        }
    }
    let oid = git2::Oid::from_str(commit).ok()?;
    let in_job = job.odb().map(|db| db.exists(oid)).unwrap_or(false);
    in_job.then(|| {
        format!(
            "its commit {commit} is in the object database of `{}`",
            job_repo.display()
        )
    })
}

/// The object directories `objects/info/alternates` of the object
/// directory `objects` lists (relative lines are relative to `objects`),
/// canonical; none when it has no such file.
fn alternates(objects: &Path) -> Vec<PathBuf> {
    let Ok(text) = crate::util::read_untrusted(&objects.join("info/alternates"), 64 << 10) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let p = objects.join(l);
            p.canonicalize().unwrap_or(p)
        })
        .collect()
}

/// The most a held-out directory may hold: loopd copies it per attempt.
pub const MAX_FILES: usize = 10_000;
pub const MAX_BYTES: u64 = 256 << 20;

/// What copying a held-out directory found wrong.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("cannot copy the held-out files from `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the held-out directory `{}` holds more than {MAX_FILES} files or {} MiB", path.display(), MAX_BYTES >> 20)]
    TooLarge { path: PathBuf },
}

/// How many regular files, and bytes, a held-out directory holds (links
/// never followed), counting stops just past [`MAX_FILES`] or
/// [`MAX_BYTES`]; or why it cannot be read.
pub fn measure(dir: &Path) -> Result<(usize, u64), String> {
    let (mut files, mut bytes) = (0usize, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| format!("`{}` cannot be read: {e}", d.display()))?;
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => {
                    files += 1;
                    bytes += e.metadata().map_or(0, |m| m.len());
                    if files > MAX_FILES || bytes > MAX_BYTES {
                        return Ok((files, bytes));
                    }
                }
                _ => {}
            }
        }
    }
    Ok((files, bytes))
}

/// Whether a held-out directory is within [`MAX_FILES`] and
/// [`MAX_BYTES`]; the error says what it holds.
pub fn within_limits(dir: &Path) -> Result<(), String> {
    let (files, bytes) = measure(dir)?;
    if files > MAX_FILES || bytes > MAX_BYTES {
        return Err(format!(
            "more than {} files or {} MiB",
            files - 1,
            bytes >> 20
        ));
    }
    Ok(())
}

/// What a copy brought over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    /// Paths relative to the tree's root, in order.
    pub files: Vec<String>,
    /// What was not copied (a link, a FIFO, a device): never followed,
    /// never opened.
    pub skipped: Vec<String>,
}

/// Copy the regular files and directories beneath `from` into `to`
/// (over whatever the tree holds at the same path). A link or special file
/// in the held-out directory is skipped, never followed or opened: loopd
/// reads only what the lead put there.
pub fn copy_files(from: &Path, to: &Path) -> Result<Copied, CopyError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CopyError::Io { path, source }
    };
    let mut copied = Copied::default();
    let mut total = 0u64;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = from.join(&rel);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(err(&dir))?
            .collect::<Result<_, _>>()
            .map_err(err(&dir))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let rel = rel.join(e.file_name());
            let src = from.join(&rel);
            // Never the tree being written, wherever it lies.
            if src == to || to.starts_with(&src) {
                copied.skipped.push(rel.to_string_lossy().into_owned());
                continue;
            }
            let meta = std::fs::symlink_metadata(&src).map_err(err(&src))?;
            let dst = to.join(&rel);
            if meta.is_dir() {
                if std::fs::symlink_metadata(&dst).is_ok_and(|m| !m.is_dir()) {
                    std::fs::remove_file(&dst).map_err(err(&dst))?;
                }
                std::fs::create_dir_all(&dst).map_err(err(&dst))?;
                stack.push(rel);
            } else if meta.is_file() {
                total += meta.len();
                if copied.files.len() >= MAX_FILES || total > MAX_BYTES {
                    return Err(CopyError::TooLarge {
                        path: from.to_path_buf(),
                    });
                }
                // The candidate may hold a link (or a directory) where a
                // held-out file goes: it is replaced, never written through.
                match std::fs::symlink_metadata(&dst) {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(&dst).map_err(err(&dst))?,
                    Ok(_) => std::fs::remove_file(&dst).map_err(err(&dst))?,
                    Err(_) => {}
                }
                let bytes = crate::util::read_untrusted(&src, MAX_BYTES).map_err(err(&src))?;
                std::fs::write(&dst, bytes).map_err(err(&dst))?;
                copied.files.push(rel.to_string_lossy().into_owned());
            } else {
                copied.skipped.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    copied.files.sort();
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_of_the_jobs_own_repository_is_reachable_and_one_of_another_is_not() {
        let t = tempfile::tempdir().unwrap();
        let commit_in = |dir: &Path, message: &str| {
            let repo = git2::Repository::init(dir).unwrap();
            let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
            let tree = repo.treebuilder(None).unwrap().write().unwrap();
            let tree = repo.find_tree(tree).unwrap();
            repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[])
                .unwrap()
                .to_string()
        };
        let (job, other) = (t.path().join("job"), t.path().join("other"));
        let mine = commit_in(&job, "the job's");
        let theirs = commit_in(&other, "held-out tests");
        let why = reachable_from_job(&job, &job, &mine).expect("its own repository");
        assert!(why.contains("worktree"), "{why}");
        // A repository of its own, sharing no object: unreachable.
        assert_eq!(reachable_from_job(&other, &job, &theirs), None);
        // Its commit copied into the job's database: reachable.
        let (dst, src) = (
            git2::Repository::open(&job).unwrap(),
            git2::Repository::open(&other).unwrap(),
        );
        let (dst, src) = (dst.odb().unwrap(), src.odb().unwrap());
        let obj = src.read(git2::Oid::from_str(&theirs).unwrap()).unwrap();
        dst.write(obj.kind(), obj.data()).unwrap();
        let why = reachable_from_job(&other, &job, &theirs).expect("in the job's objects");
        assert!(why.contains("object database"), "{why}");
    }

    #[test]
    fn files_are_copied_over_the_tree_and_links_and_fifos_are_not() {
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("held"), t.path().join("tree"));
        std::fs::create_dir_all(from.join("tests_hidden")).unwrap();
        std::fs::write(
            from.join("tests_hidden/test_more.py"),
            "def test_x(): pass\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("link")).unwrap();
        let fifo = std::ffi::CString::new(from.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir_all(to.join("tests_hidden")).unwrap();
        // The candidate's link where a held-out file goes is replaced.
        std::os::unix::fs::symlink("/tmp/elsewhere", to.join("tests_hidden/test_more.py")).unwrap();
        let c = copy_files(&from, &to).unwrap();
        assert_eq!(c.files, ["tests_hidden/test_more.py"]);
        assert_eq!(c.skipped.len(), 2, "{c:?}");
        let written = to.join("tests_hidden/test_more.py");
        assert!(std::fs::symlink_metadata(&written).unwrap().is_file());
        assert_eq!(
            std::fs::read_to_string(written).unwrap(),
            "def test_x(): pass\n"
        );
        assert!(!to.join("link").exists() && !to.join("fifo").exists());
    }
}
