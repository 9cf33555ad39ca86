//! A round on a pull request whose base moved: the base is merged into the
//! branch with git's own conflict markers left where the two sides
//! disagree, and the conflicts are the task. The job starts on that state
//! (a local commit of the merge as git leaves it), the goal test decides,
//! and a marker left anywhere is a finding; what is pushed is a real merge
//! — parents the head loopd worked on and the base's tip — so the pull
//! request merges again, never a rewrite of the branch.

use std::path::Path;

use git2::{Oid, Repository};

use super::github::{GitHubError, PushTarget};

/// What merging the base into the head left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// The base is already in the head: nothing to do.
    UpToDate,
    /// A commit of the merge as git leaves it, on the head (one parent):
    /// what the job starts from; `conflicts` holds the paths with markers.
    Started { commit: Oid, conflicts: Vec<String> },
}

fn git_err(what: &'static str) -> impl Fn(git2::Error) -> GitHubError {
    move |e| GitHubError::Push {
        remote: what.into(),
        message: e.message().to_owned(),
    }
}

/// Fetch `branch` from the decided target into `local` (a ref of loopd's),
/// offering the token only to the decided host. Returns its tip.
pub fn fetch(
    repo: &Path,
    target: &PushTarget,
    branch: &str,
    local: &str,
    token: Option<&str>,
) -> Result<Oid, GitHubError> {
    let err = |e: git2::Error| GitHubError::Push {
        remote: target.url.clone(),
        message: format!("fetch `{branch}`: {}", e.message()),
    };
    let r = Repository::open(repo).map_err(err)?;
    let mut remote = r.remote_anonymous(&target.url).map_err(err)?;
    let callbacks = super::github::token_callbacks(target, token);
    let mut opts = git2::FetchOptions::new();
    opts.remote_callbacks(callbacks);
    opts.follow_redirects(git2::RemoteRedirect::None);
    opts.proxy_options(git2::ProxyOptions::new());
    opts.download_tags(git2::AutotagOption::None);
    remote
        .fetch(
            &[format!("+refs/heads/{branch}:{local}")],
            Some(&mut opts),
            None,
        )
        .map_err(err)?;
    r.refname_to_id(local).map_err(err)
}

/// Does `branch` at the decided target hold `commit` (its tip, or under
/// it)? Fetched into a ref of loopd's, offering the token only to the
/// decided host.
pub fn holds(
    repo: &Path,
    target: &PushTarget,
    branch: &str,
    commit: &str,
    token: Option<&str>,
) -> Result<bool, GitHubError> {
    let Ok(commit) = Oid::from_str(commit) else {
        return Ok(false);
    };
    let tip = fetch(repo, target, branch, "refs/loopd/pushed", token)?;
    let r = Repository::open(repo).map_err(git_err("read the branch"))?;
    Ok(tip == commit
        || r.graph_descendant_of(tip, commit)
            .map_err(git_err("read the branch"))?)
}

/// Merge `base` into `head`: [`Merged::UpToDate`] when `base` is in
/// `head` already, else a local commit on `head` of the merged tree, each
/// conflicting file holding git's markers (`<<<<<<< head`, `=======`,
/// `>>>>>>> base`), pointed to by `local`.
pub fn start(
    repo: &Repository,
    head: Oid,
    base: Oid,
    base_name: &str,
    local: &str,
) -> Result<Merged, GitHubError> {
    let err = git_err("merge");
    if repo.graph_descendant_of(head, base).map_err(&err)? || head == base {
        return Ok(Merged::UpToDate);
    }
    let ours = repo.find_commit(head).map_err(&err)?;
    let theirs = repo.find_commit(base).map_err(&err)?;
    let mut index = repo.merge_commits(&ours, &theirs, None).map_err(&err)?;
    let mut conflicts = Vec::new();
    if index.has_conflicts() {
        let entries: Vec<git2::IndexConflict> = index
            .conflicts()
            .map_err(&err)?
            .collect::<Result<_, _>>()
            .map_err(&err)?;
        for c in entries {
            let (our, their) = match (c.our, c.their) {
                (Some(our), Some(their)) => (our, their),
                (one, other) => {
                    // Deleted on one side, changed on the other: no markers
                    // to write; the changed side is kept and the file named.
                    let mut kept = one.or(other).expect("a conflict has a side");
                    let path = String::from_utf8_lossy(&kept.path).into_owned();
                    index.remove_path(Path::new(&path)).map_err(&err)?;
                    kept.flags &= !0x3000;
                    index.add(&kept).map_err(&err)?;
                    conflicts.push(path);
                    continue;
                }
            };
            let path = String::from_utf8_lossy(&our.path).into_owned();
            let mut opts = git2::MergeFileOptions::new();
            opts.our_label("head")
                .their_label(format!("base ({base_name})"));
            let merged = repo
                .merge_file_from_index(
                    c.ancestor.as_ref().unwrap_or(&our),
                    &our,
                    &their,
                    Some(&mut opts),
                )
                .map_err(&err)?;
            let blob = repo.blob(merged.content()).map_err(&err)?;
            index.remove_path(Path::new(&path)).map_err(&err)?;
            let mut entry = our;
            entry.id = blob;
            entry.file_size = merged.content().len() as u32;
            entry.flags &= !0x3000;
            index.add(&entry).map_err(&err)?;
            conflicts.push(path);
        }
    }
    let tree = index.write_tree_to(repo).map_err(&err)?;
    let tree = repo.find_tree(tree).map_err(&err)?;
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("loopd", "loopd@localhost"))
        .map_err(&err)?;
    conflicts.sort();
    let mut message = format!(
        "loopd: merge {base_name} ({base}) into the branch, conflicts left as markers\n\n{BASE_TRAILER} {base}\n"
    );
    for c in &conflicts {
        let quoted = serde_json::to_string(c).expect("a path serializes");
        message.push_str(&format!("{CONFLICT_TRAILER} {quoted}\n"));
    }
    let commit = repo
        .commit(None, &sig, &sig, &message, &tree, &[&ours])
        .map_err(&err)?;
    repo.reference(local, commit, true, "loopd: a merge to resolve")
        .map_err(&err)?;
    Ok(Merged::Started { commit, conflicts })
}

/// The trailer of a merge's starting commit naming the base's tip.
const BASE_TRAILER: &str = "Loopd-Merge-Base:";
/// The trailer naming each conflicted path (as a JSON string).
const CONFLICT_TRAILER: &str = "Loopd-Conflict:";

/// A merge round continued from its journal: `commit` is the starting
/// commit [`start`] made (the journal's BASE_REF, so loopd's own, never a
/// commit read off the branch) — the head it was made on, the base's tip
/// and the conflicts, as the round began with them.
pub fn started(repo: &Repository, commit: Oid) -> Option<(Oid, Oid, Vec<String>)> {
    let c = repo.find_commit(commit).ok()?;
    if c.parent_count() != 1 {
        return None;
    }
    let head = c.parent_id(0).ok()?;
    let message = c.message()?;
    let mut base = None;
    let mut conflicts = Vec::new();
    for line in message.lines() {
        if let Some(b) = line.strip_prefix(BASE_TRAILER) {
            base = Oid::from_str(b.trim()).ok();
        } else if let Some(p) = line.strip_prefix(CONFLICT_TRAILER) {
            conflicts.push(serde_json::from_str(p.trim()).ok()?);
        }
    }
    Some((head, base?, conflicts))
}

/// Check the merge's state out (detached), where the job starts.
pub fn check_out(repo: &Repository, commit: Oid) -> Result<(), GitHubError> {
    let err = git_err("check out the merge");
    let c = repo.find_commit(commit).map_err(&err)?;
    let mut opts = git2::build::CheckoutBuilder::new();
    opts.force();
    repo.checkout_tree(c.as_object(), Some(&mut opts))
        .map_err(&err)?;
    repo.set_head_detached(commit).map_err(&err)
}

/// The lines of `tree` that still hold a conflict marker, in the files
/// that conflicted: `path:line`.
pub fn markers_left(repo: &Repository, tree: Oid, conflicts: &[String]) -> Vec<String> {
    let Ok(tree) = repo.find_tree(tree) else {
        return vec!["the judged tree cannot be read".into()];
    };
    let mut out = Vec::new();
    for path in conflicts {
        let Ok(entry) = tree.get_path(Path::new(path)) else {
            continue;
        };
        let Ok(blob) = repo.find_blob(entry.id()) else {
            continue;
        };
        let text = String::from_utf8_lossy(blob.content());
        for (i, line) in text.lines().enumerate() {
            let marker =
                ["<<<<<<< ", ">>>>>>> "].iter().any(|m| line.starts_with(m)) || line == "=======";
            if marker {
                out.push(format!("{path}:{}", i + 1));
            }
        }
    }
    out
}

/// The merge commit: the judged tree, with parents the head loopd worked
/// on and the base's tip, at `local`.
pub fn commit(
    repo: &Repository,
    head: Oid,
    base: Oid,
    tree: Oid,
    local: &str,
    message: &str,
) -> Result<Oid, GitHubError> {
    let err = git_err("commit the merge");
    let parents = [
        repo.find_commit(head).map_err(&err)?,
        repo.find_commit(base).map_err(&err)?,
    ];
    let tree = repo.find_tree(tree).map_err(&err)?;
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("loopd", "loopd@localhost"))
        .map_err(&err)?;
    let oid = repo
        .commit(
            None,
            &sig,
            &sig,
            message,
            &tree,
            &[&parents[0], &parents[1]],
        )
        .map_err(&err)?;
    repo.reference(local, oid, true, "loopd: the resolved merge")
        .map_err(&err)?;
    Ok(oid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit_file(repo: &Repository, parent: Option<Oid>, path: &str, text: &str) -> Oid {
        let mut index = git2::Index::new().expect("index");
        if let Some(p) = parent {
            index
                .read_tree(&repo.find_commit(p).expect("parent").tree().expect("tree"))
                .expect("read");
        }
        let blob = repo.blob(text.as_bytes()).expect("blob");
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
                flags: path.len() as u16,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            })
            .expect("add");
        let tree = index.write_tree_to(repo).expect("tree");
        let sig = git2::Signature::now("t", "t@t").expect("sig");
        let parents: Vec<git2::Commit> = parent
            .map(|p| repo.find_commit(p).expect("p"))
            .into_iter()
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(
            None,
            &sig,
            &sig,
            "c",
            &repo.find_tree(tree).expect("t"),
            &refs,
        )
        .expect("commit")
    }

    #[test]
    fn a_conflict_is_left_as_markers_and_a_resolution_is_a_real_merge() {
        let dir = tempfile::tempdir().expect("tmp");
        let repo = Repository::init(dir.path()).expect("init");
        let root = commit_file(&repo, None, "a.txt", "one\ntwo\nthree\n");
        let head = commit_file(&repo, Some(root), "a.txt", "one\nTWO (head)\nthree\n");
        let base = commit_file(&repo, Some(root), "a.txt", "one\nTWO (base)\nthree\n");
        assert_eq!(
            start(&repo, head, root, "main", "refs/loopd/m").expect("merge"),
            Merged::UpToDate
        );
        let Merged::Started { commit, conflicts } =
            start(&repo, head, base, "main", "refs/loopd/m").expect("merge")
        else {
            panic!("a conflict")
        };
        assert_eq!(conflicts, ["a.txt"]);
        assert_eq!(
            super::started(&repo, commit),
            Some((head, base, conflicts.clone())),
            "a continued round reads its merge back"
        );
        assert_eq!(super::started(&repo, head), None, "not a merge's start");
        let started = repo.find_commit(commit).expect("commit");
        assert_eq!(started.parent_ids().collect::<Vec<_>>(), [head]);
        let left = markers_left(&repo, started.tree_id(), &conflicts);
        assert_eq!(left, ["a.txt:2", "a.txt:4", "a.txt:6"], "{left:?}");
        // A resolution: no marker left, two parents.
        let resolved = commit_file(&repo, Some(commit), "a.txt", "one\nTWO (both)\nthree\n");
        let tree = repo.find_commit(resolved).expect("c").tree_id();
        assert!(markers_left(&repo, tree, &conflicts).is_empty());
        let merge = super::commit(&repo, head, base, tree, "refs/loopd/done", "merge\n")
            .expect("merge commit");
        let merge = repo.find_commit(merge).expect("c");
        assert_eq!(merge.parent_ids().collect::<Vec<_>>(), [head, base]);
        assert!(repo.graph_descendant_of(merge.id(), base).expect("graph"));
    }
}
