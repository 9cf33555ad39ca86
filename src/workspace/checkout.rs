//! A daemon job's own repository, the judged tree, and bringing results
//! home.
//!
//! A `git worktree` shares the user's git directory: its HEAD, its refs and
//! its config live there, and anything the agent can write in it moves the
//! user's branches (an agent that pointed its worktree's HEAD at
//! `refs/heads/release` got the accepted commit onto `release`). So a
//! daemon job works in a repository of its own: a git directory under the
//! state dir (read-only to the job's processes) whose objects borrow the
//! user's through `objects/info/alternates` (read-only too), with the
//! working tree elsewhere under the state dir, reached through a `.git`
//! file. loopd alone writes the user's repository: the job's branch at
//! submit, and at the end the judged commit (or the parked stash), copied
//! object by object.
//!
//! What is committed is exactly what was judged: [`Workspace::judged_tree`]
//! writes the tree of the change as the judges took it (from the same bytes,
//! read as any file an agent process could have written), the journal
//! records its id, and every commit loopd makes — the daemon's, `loopd
//! ci`'s — is that tree, never what the working tree holds later.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::{ChangeKind, Diff, Workspace, WorkspaceError};

/// The largest file a judged tree takes (a larger change is rejected by
/// the size gate long before).
const MAX_BLOB: u64 = 1 << 30;

/// Written into a job's git directory once its repository is complete
/// (objects borrowed, branch made, tree checked out): a directory without
/// it is what a kill in the middle of making it left, never a job's work.
const COMPLETE: &str = "loopd-checkout-complete";

impl Workspace {
    /// Make a daemon job's repository: a git directory at `git_dir` whose
    /// objects are borrowed from `user_repo`, the working tree at
    /// `worktree` (with a `.git` file pointing back), the branch `branch` at
    /// `commit`, checked out. Idempotent for a job that was suspended: a
    /// complete one is opened as it is. One a kill left half made (no
    /// [`COMPLETE`] marker: the job never ran in it) is made again.
    pub fn job_checkout(
        user_repo: &Path,
        commit: Oid,
        branch: &str,
        git_dir: &Path,
        worktree: &Path,
    ) -> Result<Workspace, WorkspaceError> {
        let git = |operation: &'static str| {
            move |source| WorkspaceError::Git {
                operation,
                path: git_dir.to_path_buf(),
                source,
            }
        };
        if git_dir.join(COMPLETE).exists() && worktree.exists() {
            return Workspace::open_job(git_dir, user_repo);
        }
        for dir in [git_dir, worktree] {
            match std::fs::remove_dir_all(dir) {
                Ok(()) => {
                    tracing::warn!(path = %dir.display(), "a half-made job repository, made again")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(WorkspaceError::Io {
                        operation: "remove a half-made job repository",
                        path: dir.to_path_buf(),
                        source,
                    })
                }
            }
        }
        let user = Repository::open(user_repo).map_err(|_| WorkspaceError::NotARepository {
            path: user_repo.to_path_buf(),
        })?;
        let objects = user.commondir().join("objects");
        let objects = objects.canonicalize().unwrap_or(objects);
        let mut opts = git2::RepositoryInitOptions::new();
        opts.bare(false)
            .no_dotgit_dir(true)
            .mkpath(true)
            .workdir_path(worktree)
            .external_template(false);
        let repo =
            Repository::init_opts(git_dir, &opts).map_err(git("init the job's repository"))?;
        // A kill here leaves a repository with HEAD and nothing else.
        crate::util::crash_point("workspace:initialised");
        let info = git_dir.join("objects").join("info");
        std::fs::create_dir_all(&info).map_err(|source| WorkspaceError::Io {
            operation: "create objects/info",
            path: info.clone(),
            source,
        })?;
        crate::util::write_atomic(
            &info.join("alternates"),
            format!("{}\n", objects.display()).as_bytes(),
        )
        .map_err(|source| WorkspaceError::Io {
            operation: "write objects/info/alternates",
            path: info.clone(),
            source,
        })?;
        // Reopen so the object database sees the alternates.
        drop(repo);
        let repo = Repository::open(git_dir).map_err(git("open the job's repository"))?;
        let target = repo
            .find_commit(commit)
            .map_err(git("find the pinned commit"))?;
        repo.branch(branch, &target, true)
            .map_err(git("create the job's branch"))?;
        repo.set_head(&format!("refs/heads/{branch}"))
            .map_err(git("point HEAD at the job's branch"))?;
        let mut co = git2::build::CheckoutBuilder::new();
        co.force();
        repo.checkout_head(Some(&mut co))
            .map_err(git("check out the pinned commit"))?;
        drop(target);
        drop(repo);
        crate::util::write_atomic(&git_dir.join(COMPLETE), b"").map_err(|source| {
            WorkspaceError::Io {
                operation: "mark the job's repository complete",
                path: git_dir.to_path_buf(),
                source,
            }
        })?;
        Workspace::open_job(git_dir, user_repo)
    }

    /// Open a daemon job's repository by its git directory (never through
    /// the `.git` file in the working tree, which the job's processes can
    /// rewrite); `home` is the user's repository results go back to.
    pub fn open_job(git_dir: &Path, home: &Path) -> Result<Workspace, WorkspaceError> {
        let repo = Repository::open(git_dir).map_err(|_| WorkspaceError::NotARepository {
            path: git_dir.to_path_buf(),
        })?;
        Workspace::of(repo, git_dir, Some(home.to_path_buf()))
    }

    /// The user's repository a job's repository borrows from and brings
    /// its results back to (`None`: the job works in it directly).
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    /// Object directories this repository borrows (`alternates`): the
    /// job's processes read them.
    pub fn borrowed_objects(&self) -> Vec<PathBuf> {
        let file = self.repo.commondir().join("objects/info/alternates");
        let Ok(text) = crate::util::read_untrusted(&file, 64 << 10) else {
            return vec![];
        };
        String::from_utf8_lossy(&text)
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('/'))
            .map(PathBuf::from)
            .collect()
    }

    /// Write the files of `tree` (a judged tree, or BASE_REF's) under
    /// `dir`, which must be empty or absent: the held-out tests' judge-only
    /// tree, made from git objects alone, so nothing the working tree holds
    /// besides the change (and no `.git`) is in it. Links are written as
    /// links; a submodule is left out (its commit is not in this
    /// repository's objects). `tree` may be a commit (BASE_REF): its tree
    /// is written. Returns the number of files written.
    pub fn write_tree(&self, tree: Oid, dir: &Path) -> Result<usize, WorkspaceError> {
        write_tree_of(&self.repo, tree, dir)
    }

    /// The tree of `base` with the change `diff` describes applied, from
    /// the working tree's bytes as they are now (read without following a
    /// link or blocking, regular files and links only), written to the
    /// object database. `None` when the change holds a file too large to
    /// load (the size gate rejects such a change).
    pub fn judged_tree(&self, base: Oid, diff: &Diff) -> Result<Option<Oid>, WorkspaceError> {
        if diff.files.iter().any(|f| f.too_large) {
            return Ok(None);
        }
        let git = self.git("write the judged tree");
        let parent = self
            .repo
            .find_commit(base)
            .and_then(|c| c.tree())
            .map_err(self.git("read BASE_REF"))?;
        // A private index: the checkout's own stays as it was.
        let mut index = git2::Index::new().map_err(&git)?;
        index.read_tree(&parent).map_err(&git)?;
        for change in &diff.changes {
            if let Some(old) = &change.old_path {
                index.remove_path(Path::new(old)).map_err(&git)?;
            }
            if change.status == ChangeKind::Deleted {
                index.remove_path(Path::new(&change.path)).map_err(&git)?;
                continue;
            }
            if change.submodule {
                // The submodule's recorded commit, as the checkout has it.
                let Some(id) = self
                    .repo
                    .find_submodule(&change.path)
                    .ok()
                    .and_then(|s| s.workdir_id().or(s.index_id()))
                else {
                    continue;
                };
                index
                    .add(&entry(&change.path, id, 0o160000, 0))
                    .map_err(&git)?;
                continue;
            }
            let full = self.root.join(&change.path);
            let meta =
                std::fs::symlink_metadata(&full).map_err(|e| self.io("read a changed file", e))?;
            if meta.is_dir() {
                // A git repository the change holds (`git init` in the
                // worktree): git lists it whole, as a directory. Its files
                // are not the change's; the diff gate refuses it.
                continue;
            }
            let (content, mode) = if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&full).map_err(|e| self.io("read a changed link", e))?;
                (target.to_string_lossy().into_owned().into_bytes(), 0o120000)
            } else {
                use std::os::unix::fs::PermissionsExt;
                let bytes = crate::util::read_untrusted(&full, MAX_BLOB)
                    .map_err(|e| self.io("read a changed file", e))?;
                let exec = meta.permissions().mode() & 0o111 != 0;
                (bytes, if exec { 0o100755 } else { 0o100644 })
            };
            let oid = self.repo.blob(&content).map_err(&git)?;
            index
                .add(&entry(&change.path, oid, mode, content.len() as u32))
                .map_err(&git)?;
        }
        let tree = index.write_tree_to(&self.repo).map_err(&git)?;
        Ok(Some(tree))
    }

    /// Commit `tree` on top of `base` and point `refs/heads/<branch>` at it
    /// (forced: the branch is loopd's own), without touching the checkout,
    /// its index or HEAD. A commit with the same tree, parent and message
    /// already on the branch (a kill before it was journaled) is reused.
    pub fn commit_tree(
        &self,
        base: Oid,
        tree: Oid,
        branch: &str,
        message: &str,
    ) -> Result<Oid, WorkspaceError> {
        let git = self.git("commit the judged tree");
        let refname = format!("refs/heads/{branch}");
        if let Ok(tip) = self
            .repo
            .refname_to_id(&refname)
            .and_then(|id| self.repo.find_commit(id))
        {
            if tip.tree_id() == tree
                && tip.parent_id(0).ok() == Some(base)
                && tip.message() == Some(message)
            {
                return Ok(tip.id());
            }
        }
        let parent = self.repo.find_commit(base).map_err(&git)?;
        let tree = self.repo.find_tree(tree).map_err(&git)?;
        let sig = self
            .repo
            .signature()
            .or_else(|_| git2::Signature::now("loopd", "loopd@localhost"))
            .map_err(&git)?;
        let oid = self
            .repo
            .commit(None, &sig, &sig, message, &tree, &[&parent])
            .map_err(&git)?;
        clear_stale_ref_lock(&self.repo, &refname, STALE_REF_LOCK);
        self.repo
            .reference(&refname, oid, true, "loopd: the judged change")
            .map_err(&git)?;
        Ok(oid)
    }

    /// Copy `commit` and everything it reaches that the user's repository
    /// lacks into it, then point `refname` there at it — only from `from`
    /// (what loopd put there before, or nothing), never over someone
    /// else's. A no-op for a job that works in the user's repository.
    pub fn bring_home(
        &self,
        commit: Oid,
        refname: &str,
        from: Option<Oid>,
        message: &str,
    ) -> Result<(), WorkspaceError> {
        let Some((home, dest)) = self.copy_home(commit)? else {
            return Ok(());
        };
        let git = |operation| git_err(&home, operation);
        match (dest.refname_to_id(refname).ok(), from) {
            (Some(now), _) if now == commit => return Ok(()),
            (Some(now), Some(expected)) if now != expected => {
                return Err(WorkspaceError::Git {
                    operation: "move the job's branch",
                    path: home.clone(),
                    source: git2::Error::from_str(&format!(
                        "`{refname}` is at {now}, not at {expected} where loopd left it: someone else moved it; loopd does not overwrite it"
                    )),
                });
            }
            _ => {}
        }
        clear_stale_ref_lock(&dest, refname, STALE_REF_LOCK);
        dest.reference(refname, commit, true, message)
            .map_err(git("move the job's branch"))?;
        Ok(())
    }

    /// A parked stash, brought home: its objects, the pinning ref, and an
    /// entry in the user's stash list (as `git stash push` would add).
    pub fn park_home(&self, stash: Oid, job_id: &str, message: &str) -> Result<(), WorkspaceError> {
        let Some((home, dest)) = self.copy_home(stash)? else {
            return Ok(());
        };
        let git = |operation| git_err(&home, operation);
        let keep = super::keep_ref(job_id);
        if dest.refname_to_id(&keep).ok() == Some(stash) {
            return Ok(());
        }
        dest.reference(&keep, stash, true, message)
            .map_err(git("pin the parked work"))?;
        // The user's `git stash list` shows it, as with a stash made there.
        dest.reference_ensure_log("refs/stash")
            .map_err(git("keep the stash's log"))?;
        dest.reference("refs/stash", stash, true, message)
            .map_err(git("add to the stash list"))?;
        Ok(())
    }
}

impl Workspace {
    /// The user's repository, with `commit` and everything it reaches in
    /// it (`None` for a job that works in the user's repository itself).
    fn copy_home(&self, commit: Oid) -> Result<Option<(PathBuf, Repository)>, WorkspaceError> {
        let Some(home) = &self.home else {
            return Ok(None);
        };
        let dest = Repository::open(home).map_err(git_err(home, "open the repository"))?;
        copy_objects(&self.repo, &dest, commit).map_err(git_err(home, "copy the job's objects"))?;
        Ok(Some((home.clone(), dest)))
    }
}

/// A git error of `operation` in the repository at `path`.
fn git_err<'a>(
    path: &'a Path,
    operation: &'static str,
) -> impl Fn(git2::Error) -> WorkspaceError + 'a {
    move |source| WorkspaceError::Git {
        operation,
        path: path.to_path_buf(),
        source,
    }
}

fn entry(path: &str, id: Oid, mode: u32, size: u32) -> git2::IndexEntry {
    git2::IndexEntry {
        ctime: git2::IndexTime::new(0, 0),
        mtime: git2::IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: size,
        id,
        flags: 0,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// Copy the objects `commit` reaches that `dest` lacks, stopping at what it
/// has (the base it borrowed from).
fn copy_objects(src: &Repository, dest: &Repository, commit: Oid) -> Result<(), git2::Error> {
    let (from, to) = (src.odb()?, dest.odb()?);
    for (n, id) in copy_order(src, &to, commit)?.into_iter().enumerate() {
        let obj = from.read(id)?;
        to.write(obj.kind(), obj.data())?;
        if n == 0 {
            // A kill here leaves some of the objects copied, not all.
            crate::util::crash_point("workspace:copying");
        }
    }
    Ok(())
}

/// The objects `commit` reaches that `dest` lacks, each after everything
/// it points to: an object present in `dest` always has all of its own, so
/// a copy cut short by a kill leaves no commit without its tree, and the
/// next copy (which skips what is present) completes it. Writing a commit
/// before its tree lost the tree for good when a daemon was killed between
/// the two (the crash walk of two jobs side by side found it).
fn copy_order(
    src: &Repository,
    dest: &git2::Odb<'_>,
    commit: Oid,
) -> Result<Vec<Oid>, git2::Error> {
    let mut order = Vec::new();
    // (object, its children are already on the stack)
    let mut stack = vec![(commit, false)];
    let mut seen = std::collections::HashSet::new();
    while let Some((id, expanded)) = stack.pop() {
        if expanded {
            order.push(id);
            continue;
        }
        if !seen.insert(id) || dest.exists(id) {
            continue;
        }
        stack.push((id, true));
        match src.find_object(id, None)?.kind() {
            Some(git2::ObjectType::Commit) => {
                let c = src.find_commit(id)?;
                stack.push((c.tree_id(), false));
                stack.extend(c.parent_ids().map(|p| (p, false)));
            }
            Some(git2::ObjectType::Tree) => {
                let t = src.find_tree(id)?;
                // A submodule's commit lives in its own repository.
                stack.extend(
                    t.iter()
                        .filter(|e| e.kind() != Some(git2::ObjectType::Commit))
                        .map(|e| (e.id(), false)),
                );
            }
            _ => {}
        }
    }
    Ok(order)
}

/// How long a lock on one of loopd's own refs may be held by a live git
/// before it is taken for one a killed process left behind.
const STALE_REF_LOCK: std::time::Duration = std::time::Duration::from_secs(2);

/// A `<ref>.lock` that outlives [`STALE_REF_LOCK`] on a ref only this job
/// writes (`refs/heads/loopd/<job-id>`, under the job's run lock) was left
/// by a process killed mid-update (`kill -9`, a crash): git never removes
/// it, and every later update of the ref would fail. A live git holds such
/// a lock for milliseconds, so it is waited out first.
fn clear_stale_ref_lock(repo: &git2::Repository, refname: &str, wait: std::time::Duration) {
    if !refname.starts_with("refs/heads/loopd/") || refname.contains("..") {
        return;
    }
    let lock = repo.commondir().join(format!("{refname}.lock"));
    let started = std::time::Instant::now();
    while lock.exists() {
        if started.elapsed() >= wait {
            tracing::warn!(lock = %lock.display(), "removing a stale lock on the job's own branch (left by a killed process)");
            if let Err(e) = std::fs::remove_file(&lock) {
                tracing::warn!(lock = %lock.display(), error = %e, "cannot remove the stale ref lock");
            }
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// [`Workspace::write_tree`] for any repository: a held-out ref's tree is
/// written the same way.
pub fn write_tree_of(repo: &Repository, tree: Oid, dir: &Path) -> Result<usize, WorkspaceError> {
    use std::os::unix::fs::PermissionsExt;
    let git = |source| WorkspaceError::Git {
        operation: "write a tree to a directory",
        path: dir.to_path_buf(),
        source,
    };
    let io = |operation, source| WorkspaceError::Io {
        operation,
        path: dir.to_path_buf(),
        source,
    };
    // A tree, or a commit's (BASE_REF).
    let tree = match repo.find_tree(tree) {
        Ok(t) => t,
        Err(_) => repo
            .find_commit(tree)
            .and_then(|c| c.tree())
            .map_err(&git)?,
    };
    std::fs::create_dir_all(dir).map_err(|e| io("make the judge-only tree", e))?;
    let mut written = 0;
    let mut failed: Option<WorkspaceError> = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
        let Some(name) = entry.name() else {
            return git2::TreeWalkResult::Skip;
        };
        let rel = Path::new(parent).join(name);
        // git itself never checks these out: nothing may land outside
        // `dir` or in a `.git` of its own.
        if rel.components().any(|c| {
            matches!(c, std::path::Component::ParentDir)
                || c.as_os_str().eq_ignore_ascii_case(".git")
        }) {
            return git2::TreeWalkResult::Skip;
        }
        let path = dir.join(&rel);
        let result = match entry.filemode() {
            0o040000 => std::fs::create_dir_all(&path),
            0o120000 => match repo.find_blob(entry.id()) {
                Ok(b) => {
                    std::os::unix::fs::symlink(String::from_utf8_lossy(b.content()).as_ref(), &path)
                }
                Err(e) => Err(std::io::Error::other(e)),
            },
            mode @ (0o100644 | 0o100755) => match repo.find_blob(entry.id()) {
                Ok(b) => std::fs::write(&path, b.content()).and_then(|()| {
                    written += 1;
                    std::fs::set_permissions(
                        &path,
                        std::fs::Permissions::from_mode(if mode == 0o100755 {
                            0o755
                        } else {
                            0o644
                        }),
                    )
                }),
                Err(e) => Err(std::io::Error::other(e)),
            },
            _ => return git2::TreeWalkResult::Skip,
        };
        match result {
            Ok(()) => git2::TreeWalkResult::Ok,
            Err(e) => {
                failed = Some(io("write the judge-only tree", e));
                git2::TreeWalkResult::Abort
            }
        }
    })
    .map_err(|e| failed.take().unwrap_or_else(|| git(e)))?;
    match failed {
        Some(e) => Err(e),
        None => Ok(written),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything `id` points to directly (a submodule's commit aside).
    fn children(repo: &Repository, id: Oid) -> Vec<Oid> {
        match repo.find_object(id, None).expect("object").kind() {
            Some(git2::ObjectType::Commit) => {
                let c = repo.find_commit(id).expect("commit");
                std::iter::once(c.tree_id()).chain(c.parent_ids()).collect()
            }
            Some(git2::ObjectType::Tree) => repo
                .find_tree(id)
                .expect("tree")
                .iter()
                .map(|e| e.id())
                .collect(),
            _ => vec![],
        }
    }

    /// A kill between `git init` and the end of the checkout left a git
    /// dir with HEAD and an empty working tree: it was opened as the job's
    /// repository, every tracked file missing.
    #[test]
    fn a_half_made_job_repository_is_made_again_and_a_complete_one_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let user = Repository::init(dir.path().join("user")).expect("user");
        std::fs::write(dir.path().join("user/a.txt"), "a\n").expect("a.txt");
        let mut index = user.index().expect("index");
        index.add_path(Path::new("a.txt")).expect("add");
        let tree = user
            .find_tree(index.write_tree().expect("tree"))
            .expect("tree");
        let sig = git2::Signature::now("t", "t@example.invalid").expect("sig");
        let commit = user
            .commit(Some("HEAD"), &sig, &sig, "c", &tree, &[])
            .expect("commit");
        let (git_dir, worktree) = (dir.path().join("gitdir"), dir.path().join("work"));
        // What the kill left: an initialised repository, nothing checked out.
        let mut opts = git2::RepositoryInitOptions::new();
        opts.no_dotgit_dir(true)
            .mkpath(true)
            .workdir_path(&worktree);
        Repository::init_opts(&git_dir, &opts).expect("init");
        assert!(git_dir.join("HEAD").exists() && worktree.exists());
        let user_path = dir.path().join("user");
        Workspace::job_checkout(&user_path, commit, "loopd/j", &git_dir, &worktree)
            .expect("made again");
        assert_eq!(
            std::fs::read_to_string(worktree.join("a.txt")).expect("checked out"),
            "a\n"
        );
        // A complete one holds the job's work: opened as it is.
        std::fs::write(worktree.join("a.txt"), "work\n").expect("work");
        Workspace::job_checkout(&user_path, commit, "loopd/j", &git_dir, &worktree)
            .expect("opened");
        assert_eq!(
            std::fs::read_to_string(worktree.join("a.txt")).expect("kept"),
            "work\n"
        );
    }

    #[test]
    fn every_object_is_copied_after_what_it_points_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = Repository::init(dir.path().join("src")).expect("src");
        let dest = Repository::init(dir.path().join("dest")).expect("dest");
        let sig = git2::Signature::now("t", "t@example.invalid").expect("sig");
        // Two commits; the second shares a blob with the first and adds a
        // subdirectory.
        let blob = |text: &str| src.blob(text.as_bytes()).expect("blob");
        let tree = |entries: &[(&str, Oid, i32)]| {
            let mut b = src.treebuilder(None).expect("builder");
            for (name, id, mode) in entries {
                b.insert(name, *id, *mode).expect("insert");
            }
            b.write().expect("tree")
        };
        let shared = blob("shared\n");
        let t1 = tree(&[("a.txt", shared, 0o100644)]);
        let c1 = src
            .commit(
                None,
                &sig,
                &sig,
                "one",
                &src.find_tree(t1).expect("t1"),
                &[],
            )
            .expect("c1");
        let sub = tree(&[
            ("b.txt", blob("b\n"), 0o100644),
            ("a.txt", shared, 0o100644),
        ]);
        let t2 = tree(&[("a.txt", shared, 0o100644), ("sub", sub, 0o040000)]);
        let parent = src.find_commit(c1).expect("c1");
        let c2 = src
            .commit(
                None,
                &sig,
                &sig,
                "two",
                &src.find_tree(t2).expect("t2"),
                &[&parent],
            )
            .expect("c2");
        let order = copy_order(&src, &dest.odb().expect("odb"), c2).expect("order");
        assert_eq!(order.last(), Some(&c2), "the commit is written last");
        for (i, id) in order.iter().enumerate() {
            for child in children(&src, *id) {
                let at = order.iter().position(|o| *o == child).expect("copied");
                assert!(at < i, "{child} is written before {id}, which points to it");
            }
        }
        assert_eq!(order.len(), 7, "each object once: {order:?}");
        // What dest has is skipped, and so is everything below it.
        copy_objects(&src, &dest, c1).expect("copy c1");
        let rest = copy_order(&src, &dest.odb().expect("odb"), c2).expect("order");
        assert_eq!(rest.len(), 4, "c2, t2, sub and b.txt: {rest:?}");
        copy_objects(&src, &dest, c2).expect("copy c2");
        assert!(dest.find_commit(c2).expect("c2 home").tree().is_ok());
    }

    #[test]
    fn a_stale_lock_on_the_jobs_own_branch_is_cleared_and_no_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = git2::Repository::init(dir.path()).expect("init");
        let sig = git2::Signature::now("t", "t@t").expect("sig");
        let tree = repo
            .find_tree(repo.index().expect("index").write_tree().expect("tree"))
            .expect("tree");
        let c = repo
            .commit(None, &sig, &sig, "c", &tree, &[])
            .expect("commit");
        let heads = repo.commondir().join("refs/heads");
        std::fs::create_dir_all(heads.join("loopd")).expect("dirs");
        std::fs::write(heads.join("loopd/j1.lock"), "").expect("lock");
        std::fs::write(heads.join("main.lock"), "").expect("lock");
        assert!(
            repo.reference("refs/heads/loopd/j1", c, true, "m").is_err(),
            "locked"
        );
        clear_stale_ref_lock(&repo, "refs/heads/loopd/j1", std::time::Duration::ZERO);
        repo.reference("refs/heads/loopd/j1", c, true, "m")
            .expect("the lock is gone");
        clear_stale_ref_lock(&repo, "refs/heads/main", std::time::Duration::ZERO);
        assert!(
            heads.join("main.lock").exists(),
            "a user's ref lock is never touched"
        );
    }
}
