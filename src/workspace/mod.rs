//! The repository, through git2: locate it, refuse a dirty tree, pin
//! BASE_REF, compute the diff since BASE_REF *including untracked files*
//! (which `git diff BASE_REF` silently omits), and park work in a stash that
//! nothing can garbage-collect.
//!
//! It also keeps what each attempt left ([`Snapshot`]: the changed files'
//! contents, stored outside the repository) and computes the *interdiff*
//! between two attempts with `similar` ([`interdiff`]): what the later
//! attempt changed relative to the earlier one, which the critic reads from
//! attempt 2 on.
//!
//! Rules: nothing here drops, pops or clears a stash, cleans a working tree
//! or resets one; parking is the only write to the user's tree, and it is
//! undone by `git stash apply <commit>`.
//!
//! The change is what the agent wrote: untracked files that goal steps
//! created, and the usual build artefacts ([`ARTEFACT_GLOBS`]), are left out
//! of the diff ([`Artefacts`]). `.git/` itself is pinned for the job
//! ([`gitdir`]), and credentials in its config are held out of the agent's
//! reach ([`credentials`]).

mod checkout;
pub use checkout::write_tree_of;
pub mod credentials;
pub mod gitdir;
pub mod layers;
pub mod outside;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use git2::{DiffOptions, Oid, Repository, StatusOptions};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("`{}` is not a git repository", path.display())]
    NotARepository { path: PathBuf },
    #[error("`{}` is a bare repository; loopd needs a working tree", path.display())]
    Bare { path: PathBuf },
    #[error("the working tree of `{}` has uncommitted changes: {}", path.display(), paths.join(", "))]
    Dirty { path: PathBuf, paths: Vec<String> },
    #[error("`{}` has no commit yet; loopd pins BASE_REF to a commit", path.display())]
    NoCommit { path: PathBuf },
    #[error("cannot write the diff: {source}")]
    WritePatch {
        #[source]
        source: std::io::Error,
    },
    #[error("git: {operation} failed in `{}`: {source}", path.display())]
    Git {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("cannot {operation} in `{}`: {source}", path.display())]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            WorkspaceError::NotARepository { .. } => Some("pass the repository with `-C DIR`, or run `git init` and commit first"),
            WorkspaceError::Dirty { .. } => Some("commit or stash your changes first; loopd never works on top of uncommitted changes"),
            WorkspaceError::NoCommit { .. } => Some("make a first commit: loopd pins BASE_REF to a commit id"),
            _ => None,
        }
    }
}

/// One changed path between BASE_REF and the working tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub path: String,
    /// For renames, where it came from.
    pub old_path: Option<String>,
    pub status: ChangeKind,
    /// A submodule: its commit moved, or its working tree has changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub submodule: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    Renamed,
    TypeChanged,
    ModeChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Renamed => "renamed",
            ChangeKind::TypeChanged => "type-changed",
            ChangeKind::ModeChanged => "mode-changed",
        }
    }
}

/// sha256 of a file, read in chunks (never whole), opened as a file an
/// agent process could have written.
fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let (mut f, _) = crate::util::open_untrusted(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The largest untracked file whose git blob id is taken (an artefact
/// check); a larger one counts as the agent's change, and the size gate
/// judges it.
const MAX_HASHED: u64 = 256 << 20;

/// The git blob id of a file in the working tree: a regular file read
/// without following a link or blocking, or a link's target; `None` for
/// anything else.
fn blob_id(path: &Path) -> Option<Oid> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let bytes = if meta.file_type().is_symlink() {
        std::fs::read_link(path)
            .ok()?
            .to_string_lossy()
            .into_owned()
            .into_bytes()
    } else {
        crate::util::read_untrusted(path, MAX_HASHED).ok()?
    };
    Oid::hash_object(git2::ObjectType::Blob, &bytes).ok()
}

/// Where a diff's patch goes as it is produced: the writer (whole), the
/// hash (whole), and memory (up to the keep limit).
struct PatchSink<'w> {
    out: &'w mut dyn std::io::Write,
    hasher: Sha256,
    written: u64,
    keep: u64,
    /// The patch text while it is within `keep`; `None` once it is not.
    kept: Option<String>,
    added: Vec<AddedLine>,
    added_bytes: u64,
    added_complete: bool,
    /// The first write error (the print callback cannot return one).
    error: Option<std::io::Error>,
}

impl<'w> PatchSink<'w> {
    fn new(out: &'w mut dyn std::io::Write, keep: u64) -> Self {
        PatchSink {
            out,
            hasher: Sha256::new(),
            written: 0,
            keep,
            kept: Some(String::new()),
            added: Vec::new(),
            added_bytes: 0,
            added_complete: true,
            error: None,
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.written += bytes.len() as u64;
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(bytes) {
                self.error = Some(e);
            }
        }
        if self.written > self.keep {
            self.kept = None;
        } else if let Some(k) = &mut self.kept {
            k.push_str(&String::from_utf8_lossy(bytes));
        }
    }

    fn kept_len(&self) -> usize {
        self.kept.as_ref().map_or(0, String::len)
    }

    fn added(&mut self, line: AddedLine) {
        self.added_bytes += line.text.len() as u64 + line.path.len() as u64;
        if self.added_bytes > self.keep {
            self.added_complete = false;
        } else {
            self.added.push(line);
        }
    }
}

/// Untracked paths that are build artefacts whoever made them (gitignore
/// semantics: a directory of that name at any depth). Only *untracked*
/// files: a tracked file is part of the change whatever its name.
pub const ARTEFACT_GLOBS: &[&str] = &[
    "**/__pycache__/**",
    "**/*.pyc",
    "**/.pytest_cache/**",
    "**/target/**",
    "**/node_modules/**",
];

/// What is not the agent's change: untracked files the goal steps created
/// (path → the git blob id the goal run left; a file the agent changed
/// afterwards has another id and counts again), and anything untracked
/// matching [`ARTEFACT_GLOBS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Artefacts {
    pub from_goal: BTreeMap<String, String>,
}

fn artefact_globs() -> globset::GlobSet {
    let mut b = globset::GlobSetBuilder::new();
    for g in ARTEFACT_GLOBS {
        b.add(
            globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .expect("the artefact globs are valid"),
        );
    }
    b.build().expect("the artefact globs build")
}

/// Is `rel` (an untracked path) a usual build artefact?
pub fn is_usual_artefact(rel: &str) -> bool {
    artefact_globs().is_match(rel)
}

impl Artefacts {
    /// Is the untracked file `rel` (under `root`) left out of the change?
    fn excludes(&self, globs: &globset::GlobSet, root: &Path, rel: &str) -> bool {
        if globs.is_match(rel) {
            return true;
        }
        let Some(recorded) = self.from_goal.get(rel) else {
            return false;
        };
        blob_id(&root.join(rel)).is_some_and(|now| now.to_string() == *recorded)
    }

    /// The untracked files a goal run created or rewrote: in `after` and
    /// not in `before`, or changed while `before` still held what an earlier
    /// goal run left (the agent did not touch it in between).
    pub fn created_by_goal(
        &self,
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        after
            .iter()
            .filter(|(path, blob)| match before.get(*path) {
                None => true,
                Some(b) => b != *blob && self.from_goal.get(*path) == Some(b),
            })
            .map(|(p, b)| (p.clone(), b.clone()))
            .collect()
    }
}

/// What computing a diff may hold in memory. The patch itself is streamed
/// to a writer (the attempt's `diff.patch`) as it is produced; only this much
/// is kept, so a huge file the agent wrote cannot take loopd's memory with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffLimits {
    /// A file larger than this (either side) is not loaded or diffed: it is
    /// listed with its size and sha256, and counts whole against the size
    /// gate.
    pub max_file: u64,
    /// At most this many bytes of patch text, and of added-line text, are
    /// kept in memory ([`Diff::patch`], [`Diff::added`]).
    pub keep: u64,
}

impl DiffLimits {
    /// The limits for a change bound of `bound` bytes: whatever fits the
    /// bound is kept whole, a file larger than the bound is never loaded.
    pub fn for_bound(bound: u64) -> DiffLimits {
        DiffLimits {
            max_file: bound,
            keep: bound,
        }
    }
}

/// One changed file's part of a patch, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    pub path: String,
    pub status: ChangeKind,
    /// Where the file's section is in the kept patch text (byte offsets
    /// into [`Diff::patch`] / [`Interdiff::patch`]).
    pub start: usize,
    pub len: usize,
    /// Bytes of patch text the file produced (as written to disk).
    pub diff_bytes: u64,
    pub added: u64,
    pub removed: u64,
    /// The file's size now (at BASE_REF when it was deleted).
    pub bytes: u64,
    /// Larger than [`DiffLimits::max_file`]: not loaded, its section is a
    /// header naming its size and sha256.
    pub too_large: bool,
}

impl FilePatch {
    /// This file's section of `patch` (empty when `patch` does not hold it).
    pub fn text<'p>(&self, patch: &'p str) -> &'p str {
        patch.get(self.start..self.start + self.len).unwrap_or("")
    }
}

/// The state of the tree relative to BASE_REF.
#[derive(Debug, Clone)]
pub struct Diff {
    /// The unified diff text (new untracked files included, artefacts not),
    /// when it is at most [`DiffLimits::keep`] bytes; the whole of it went
    /// to the writer [`Workspace::diff_since`] was given either way.
    pub patch: Option<String>,
    /// Bytes of patch text written.
    pub patch_bytes: u64,
    pub changes: Vec<Change>,
    /// Every changed file's section and size, in patch order.
    pub files: Vec<FilePatch>,
    /// Untracked paths left out as artefacts (not the agent's change); the
    /// protected-path gate still looks at them.
    pub excluded: Vec<String>,
    /// sha256 of the patch text (a file too large to load is in it by its
    /// sha256): equal hashes mean the same working tree state.
    pub sha256: String,
    /// The added lines with their file and line number in the new file
    /// (the skip-marker gate and the pre-critic read these), up to
    /// [`DiffLimits::keep`] bytes of text.
    pub added: Vec<AddedLine>,
    /// False when added lines beyond the limit were not kept.
    pub added_complete: bool,
    /// The limits the diff was computed under.
    pub limits: DiffLimits,
}

impl Diff {
    /// The change's size against the bound: the patch text plus every file
    /// too large to load, whole.
    pub fn size(&self) -> u64 {
        self.patch_bytes
            + self
                .files
                .iter()
                .filter(|f| f.too_large)
                .map(|f| f.bytes)
                .sum::<u64>()
    }

    /// Was `path` too large to load?
    fn too_large(&self, path: &str) -> bool {
        self.files.iter().any(|f| f.too_large && f.path == path)
    }
}

/// One line the change added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedLine {
    pub path: String,
    pub line: u32,
    pub text: String,
}

/// A changed file's text before (at BASE_REF) and after (in the working
/// tree); `None` where the file does not exist or is not UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedText {
    pub path: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// One file's state as an attempt left it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "as", rename_all = "snake_case")]
pub enum Content {
    Text {
        text: String,
    },
    /// Not UTF-8 text: compared by hash only.
    Binary {
        sha256: String,
    },
    /// Larger than the diff's file limit: never loaded, compared by hash.
    TooLarge {
        bytes: u64,
        sha256: String,
    },
    Deleted,
}

impl Content {
    fn of_bytes(bytes: &[u8]) -> Content {
        match std::str::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => Content::Text {
                text: text.to_owned(),
            },
            _ => Content::Binary {
                sha256: hex::encode(Sha256::digest(bytes)),
            },
        }
    }
}

/// What an attempt left: every path changed since BASE_REF with its
/// content (a path not listed is as it is at BASE_REF). Written to the run
/// directory, so the next attempt's interdiff needs nothing of the repository
/// but BASE_REF.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub files: BTreeMap<String, Content>,
}

/// What changed between two attempts' trees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interdiff {
    /// Unified diff, earlier attempt (`a/`) to later attempt (`b/`).
    pub patch: String,
    /// The paths that differ, sorted.
    pub files: Vec<String>,
    /// Each differing file's section of `patch`, and its size.
    pub sections: Vec<FilePatch>,
}

/// The interdiff between `earlier` and `later`; `base` gives a path's
/// content at BASE_REF (for a path only one of the two changed).
pub fn interdiff(
    earlier: &Snapshot,
    later: &Snapshot,
    base: impl Fn(&str) -> Content,
) -> Interdiff {
    let mut out = Interdiff::default();
    let paths: std::collections::BTreeSet<&String> =
        earlier.files.keys().chain(later.files.keys()).collect();
    for path in paths {
        let side = |s: &Snapshot| s.files.get(path).cloned().unwrap_or_else(|| base(path));
        let (a, b) = (side(earlier), side(later));
        if a == b {
            continue;
        }
        out.files.push(path.clone());
        let start = out.patch.len();
        let text = |c: &Content| match c {
            Content::Text { text } => Some(text.clone()),
            Content::Deleted => Some(String::new()),
            Content::Binary { .. } | Content::TooLarge { .. } => None,
        };
        let mut too_large = false;
        match (text(&a), text(&b)) {
            (Some(old), Some(new)) => {
                let diff = similar::TextDiff::from_lines(&old, &new);
                let from = if a == Content::Deleted {
                    "/dev/null".to_owned()
                } else {
                    format!("a/{path}")
                };
                let to = if b == Content::Deleted {
                    "/dev/null".to_owned()
                } else {
                    format!("b/{path}")
                };
                out.patch.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(3)
                        .header(&from, &to)
                        .to_string(),
                );
            }
            _ => match (&a, &b) {
                (Content::TooLarge { bytes, sha256 }, _)
                | (_, Content::TooLarge { bytes, sha256 }) => {
                    too_large = true;
                    out.patch.push_str(&format!(
                        "File {path} is too large to show ({bytes} bytes, sha256 {sha256})\n"
                    ));
                }
                _ => out
                    .patch
                    .push_str(&format!("Binary files a/{path} and b/{path} differ\n")),
            },
        }
        let section = &out.patch[start..];
        let body = || section.lines().skip(2);
        let size = |c: &Content| match c {
            Content::Text { text } => text.len() as u64,
            Content::TooLarge { bytes, .. } => *bytes,
            Content::Binary { .. } | Content::Deleted => 0,
        };
        out.sections.push(FilePatch {
            path: path.clone(),
            status: match (&a, &b) {
                (Content::Deleted, _) => ChangeKind::Added,
                (_, Content::Deleted) => ChangeKind::Deleted,
                _ => ChangeKind::Modified,
            },
            start,
            len: section.len(),
            diff_bytes: section.len() as u64,
            added: body().filter(|l| l.starts_with('+')).count() as u64,
            removed: body().filter(|l| l.starts_with('-')).count() as u64,
            bytes: if b == Content::Deleted {
                size(&a)
            } else {
                size(&b)
            },
            too_large,
        });
    }
    out
}

/// A git repository with a working tree.
pub struct Workspace {
    repo: Repository,
    root: PathBuf,
    /// A daemon job's repository: the user's repository it borrows objects
    /// from and brings its results back to ([`checkout`]).
    home: Option<PathBuf>,
}

impl Workspace {
    /// Open the repository whose working tree contains `path`.
    pub fn open(path: &Path) -> Result<Workspace, WorkspaceError> {
        let repo = Repository::discover(path).map_err(|_| WorkspaceError::NotARepository {
            path: path.to_path_buf(),
        })?;
        Workspace::of(repo, path, None)
    }

    /// A repository with its working tree (`path` names it in errors);
    /// `home`: see [`Workspace::home`].
    fn of(
        repo: Repository,
        path: &Path,
        home: Option<PathBuf>,
    ) -> Result<Workspace, WorkspaceError> {
        let root = repo
            .workdir()
            .ok_or_else(|| WorkspaceError::Bare {
                path: path.to_path_buf(),
            })?
            .to_path_buf();
        let root = root.canonicalize().unwrap_or(root);
        Ok(Workspace { repo, root, home })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn git2(&self) -> &Repository {
        &self.repo
    }

    fn io(&self, operation: &'static str, source: std::io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            operation,
            path: self.root.clone(),
            source,
        }
    }

    fn git(&self, operation: &'static str) -> impl Fn(git2::Error) -> WorkspaceError + '_ {
        move |source| WorkspaceError::Git {
            operation,
            path: self.root.clone(),
            source,
        }
    }

    /// The status of every changed or untracked file (ignored files do not
    /// count), untracked directories listed file by file.
    fn statuses(&self) -> Result<git2::Statuses<'_>, WorkspaceError> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false);
        self.repo
            .statuses(Some(&mut opts))
            .map_err(self.git("status"))
    }

    /// Uncommitted changes and untracked files (ignored files do not count).
    pub fn dirty_paths(&self) -> Result<Vec<String>, WorkspaceError> {
        let statuses = self.statuses()?;
        Ok(statuses
            .iter()
            .filter_map(|s| s.path().map(str::to_owned))
            .collect())
    }

    /// Refuse to work on a tree with uncommitted changes.
    pub fn ensure_clean(&self) -> Result<(), WorkspaceError> {
        let mut paths = self.dirty_paths()?;
        if paths.is_empty() {
            return Ok(());
        }
        if paths.len() > 5 {
            let more = paths.len() - 5;
            paths.truncate(5);
            paths.push(format!("and {more} more"));
        }
        Err(WorkspaceError::Dirty {
            path: self.root.clone(),
            paths,
        })
    }

    /// The commit id HEAD points at: BASE_REF, pinned.
    pub fn head_commit(&self) -> Result<Oid, WorkspaceError> {
        let head = self.repo.head().map_err(|_| WorkspaceError::NoCommit {
            path: self.root.clone(),
        })?;
        let commit = head
            .peel_to_commit()
            .map_err(|_| WorkspaceError::NoCommit {
                path: self.root.clone(),
            })?;
        Ok(commit.id())
    }

    /// The repository's common git directory (a worktree shares its
    /// `config`, `hooks/` and `info/` with the main checkout).
    pub fn common_dir(&self) -> &Path {
        self.repo.commondir()
    }

    /// Every git directory of this checkout: its own (`.git/`, or
    /// `.git/worktrees/<name>/` for a worktree) and the common one.
    pub fn git_dirs(&self) -> Vec<PathBuf> {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let mut dirs = vec![canonical(self.repo.path())];
        let common = canonical(self.repo.commondir());
        if !dirs.contains(&common) {
            dirs.push(common);
        }
        dirs
    }

    /// The untracked files (not ignored, not usual artefacts) with their
    /// git blob ids: what a goal run is compared against.
    pub fn untracked_blobs(&self) -> Result<BTreeMap<String, String>, WorkspaceError> {
        let statuses = self.statuses()?;
        let globs = artefact_globs();
        let mut out = BTreeMap::new();
        for s in statuses.iter() {
            if !s.status().contains(git2::Status::WT_NEW) {
                continue;
            }
            let Some(path) = s.path() else { continue };
            if globs.is_match(path) {
                continue;
            }
            if let Some(oid) = blob_id(&self.root.join(path)) {
                out.insert(path.to_owned(), oid.to_string());
            }
        }
        Ok(out)
    }

    /// The diff from `base` to the working tree, untracked files included
    /// with their content, ignored files and `artefacts` excluded. The patch
    /// is written to `out` as it is produced, file by file; memory stays
    /// within `limits` however large the change (a file over the limit is
    /// never loaded).
    pub fn diff_since(
        &self,
        base: Oid,
        artefacts: &Artefacts,
        limits: DiffLimits,
        out: &mut dyn std::io::Write,
    ) -> Result<Diff, WorkspaceError> {
        let tree = self
            .repo
            .find_commit(base)
            .and_then(|c| c.tree())
            .map_err(self.git("read BASE_REF"))?;
        let mut opts = DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .show_untracked_content(true)
            .include_typechange(true)
            // A change inside a submodule is part of the change (the
            // tamper gate decides whether it may be).
            .ignore_submodules(false)
            // `.gitattributes` is the agent's to write: `-diff` or `binary`
            // there must not hide a source file from the judges. Whether a
            // file is binary is decided by its content alone
            // ([`Workspace::binary_content`]).
            .force_text(true);
        // The repository's index is the agent's to write where `.git/` is
        // (`git update-index --skip-worktree` or `--assume-unchanged` on a
        // gutted test, a stale stat cache): the change is BASE_REF's tree
        // against the files on disk, through an index made from that tree
        // alone and never the repository's.
        let mut index = git2::Index::new().map_err(self.git("make an index"))?;
        index.read_tree(&tree).map_err(self.git("read BASE_REF"))?;
        let mut diff = self
            .repo
            .diff_index_to_workdir(Some(&index), Some(&mut opts))
            .map_err(self.git("diff"))?;
        let mut find = git2::DiffFindOptions::new();
        find.renames(true)
            .renames_from_rewrites(true)
            .for_untracked(true);
        diff.find_similar(Some(&mut find))
            .map_err(self.git("find renames"))?;

        let globs = artefact_globs();
        let mut excluded = BTreeSet::new();
        let mut changes = Vec::new();
        let mut changes_by_delta = BTreeMap::new();
        for (idx, delta) in diff.deltas().enumerate() {
            if delta.status() == git2::Delta::Untracked {
                if let Some(p) = delta.new_file().path() {
                    let rel = p.to_string_lossy().into_owned();
                    if artefacts.excludes(&globs, &self.root, &rel) {
                        excluded.insert(rel);
                        continue;
                    }
                }
            }
            let new_path = delta
                .new_file()
                .path()
                .map(|p| p.to_string_lossy().into_owned());
            let old_path = delta
                .old_file()
                .path()
                .map(|p| p.to_string_lossy().into_owned());
            let submodule = [delta.old_file().mode(), delta.new_file().mode()]
                .contains(&git2::FileMode::Commit);
            let status = match delta.status() {
                git2::Delta::Added | git2::Delta::Untracked => ChangeKind::Added,
                git2::Delta::Deleted => ChangeKind::Deleted,
                git2::Delta::Renamed => ChangeKind::Renamed,
                git2::Delta::Typechange => ChangeKind::TypeChanged,
                // A submodule with the same commit has changes inside it.
                git2::Delta::Modified
                    if delta.old_file().id() == delta.new_file().id() && !submodule =>
                {
                    ChangeKind::ModeChanged
                }
                git2::Delta::Modified | git2::Delta::Copied => ChangeKind::Modified,
                _ => continue,
            };
            let path = match status {
                ChangeKind::Deleted => old_path.clone(),
                _ => new_path.clone().or(old_path.clone()),
            }
            .unwrap_or_default();
            let change = Change {
                path,
                old_path: (status == ChangeKind::Renamed)
                    .then_some(old_path)
                    .flatten(),
                status,
                submodule,
            };
            changes_by_delta.insert(idx, change.clone());
            changes.push(change);
        }

        let mut sink = PatchSink::new(out, limits.keep);
        let mut files = Vec::new();
        for (idx, delta) in diff.deltas().enumerate() {
            let new_path = delta
                .new_file()
                .path()
                .map(|p| p.to_string_lossy().into_owned());
            let left_out = delta.status() == git2::Delta::Untracked
                && new_path.as_ref().is_some_and(|p| excluded.contains(p));
            let Some(change) = changes_by_delta.get(&idx) else {
                continue;
            };
            if left_out {
                continue;
            }
            let (start, written) = (sink.kept_len(), sink.written);
            let bytes = self.size_of(change, &delta);
            let too_large = bytes > limits.max_file || delta.old_file().size() > limits.max_file;
            let mut counts = (0u64, 0u64);
            if too_large {
                // Never loaded: the header names it and the hash stands for
                // its content (a changed huge file is a changed diff).
                let sha256 = match change.status {
                    ChangeKind::Deleted => delta.old_file().id().to_string(),
                    _ => sha256_file(&self.root.join(&change.path))
                        .unwrap_or_else(|e| format!("unreadable ({e})")),
                };
                let old = change.old_path.as_deref().unwrap_or(&change.path);
                sink.emit(format!(
                    "diff --git a/{old} b/{}\nloopd: {} file of {bytes} bytes, not loaded (larger than the {}-byte file limit); sha256 {sha256}\n",
                    change.path,
                    change.status.as_str(),
                    limits.max_file
                ).as_bytes());
            } else if self.binary_content(change, &delta) {
                // Named, sized and hashed: a binary change is never silent.
                let sha256 = match change.status {
                    ChangeKind::Deleted => format!("(deleted; was blob {})", delta.old_file().id()),
                    _ => sha256_file(&self.root.join(&change.path))
                        .unwrap_or_else(|e| format!("unreadable ({e})")),
                };
                let old = change.old_path.as_deref().unwrap_or(&change.path);
                sink.emit(
                    format!(
                        "diff --git a/{old} b/{}\nloopd: binary file {} ({bytes} bytes; sha256 {sha256}): its content is not shown\n",
                        change.path,
                        change.status.as_str(),
                    )
                    .as_bytes(),
                );
            } else {
                match git2::Patch::from_diff(&diff, idx).map_err(self.git("render diff"))? {
                    Some(mut patch) => {
                        patch
                            .print(&mut |delta, _hunk, line| {
                                match line.origin() {
                                    '+' | '-' | ' ' => sink.emit(&[line.origin() as u8]),
                                    _ => {}
                                }
                                match line.origin() {
                                    '+' => counts.0 += 1,
                                    '-' => counts.1 += 1,
                                    _ => {}
                                }
                                if line.origin() == '+' {
                                    if let (Some(path), Some(no)) =
                                        (delta.new_file().path(), line.new_lineno())
                                    {
                                        sink.added(AddedLine {
                                            path: path.to_string_lossy().into_owned(),
                                            line: no,
                                            text: String::from_utf8_lossy(line.content())
                                                .trim_end()
                                                .to_owned(),
                                        });
                                    }
                                }
                                sink.emit(line.content());
                                true
                            })
                            .map_err(self.git("render diff"))?;
                    }
                    None => {
                        let old = change.old_path.as_deref().unwrap_or(&change.path);
                        sink.emit(
                            format!(
                                "diff --git a/{old} b/{}\nBinary files differ\n",
                                change.path
                            )
                            .as_bytes(),
                        );
                    }
                }
            }
            if let Some(e) = sink.error.take() {
                return Err(WorkspaceError::WritePatch { source: e });
            }
            files.push(FilePatch {
                path: change.path.clone(),
                status: change.status,
                start,
                len: sink.kept_len().saturating_sub(start),
                diff_bytes: sink.written - written,
                added: counts.0,
                removed: counts.1,
                bytes,
                too_large,
            });
        }
        sink.out
            .flush()
            .map_err(|source| WorkspaceError::WritePatch { source })?;
        let PatchSink {
            hasher,
            written,
            kept,
            added,
            added_complete,
            ..
        } = sink;
        Ok(Diff {
            patch: kept,
            patch_bytes: written,
            changes,
            files,
            excluded: excluded.into_iter().collect(),
            sha256: hex::encode(hasher.finalize()),
            added,
            added_complete,
            limits,
        })
    }

    /// Every path the repository's index tracks.
    pub fn tracked_paths(&self) -> Result<std::collections::HashSet<PathBuf>, WorkspaceError> {
        use std::os::unix::ffi::OsStrExt;
        let index = self.repo.index().map_err(self.git("read the index"))?;
        Ok(index
            .iter()
            .map(|e| PathBuf::from(std::ffi::OsStr::from_bytes(&e.path)))
            .collect())
    }

    /// Is either side of a change binary by its content (a NUL byte in its
    /// first 8000 bytes, git's own test), whatever `.gitattributes` says?
    fn binary_content(&self, change: &Change, delta: &git2::DiffDelta<'_>) -> bool {
        const PROBE: usize = 8000;
        let has_nul = |b: &[u8]| b[..b.len().min(PROBE)].contains(&0);
        let old = delta.old_file().id();
        let old_binary = !old.is_zero()
            && self
                .repo
                .find_blob(old)
                .is_ok_and(|blob| has_nul(blob.content()));
        let new_binary = change.status != ChangeKind::Deleted
            && !change.submodule
            && crate::util::open_untrusted(&self.root.join(&change.path)).is_ok_and(|(f, _)| {
                use std::io::Read;
                let mut buf = Vec::with_capacity(PROBE);
                f.take(PROBE as u64).read_to_end(&mut buf).is_ok() && has_nul(&buf)
            });
        old_binary || new_binary
    }

    /// A changed file's size: in the working tree, or at BASE_REF when it
    /// was deleted (never loading it).
    fn size_of(&self, change: &Change, delta: &git2::DiffDelta<'_>) -> u64 {
        match change.status {
            ChangeKind::Deleted => self
                .repo
                .odb()
                .and_then(|odb| odb.read_header(delta.old_file().id()))
                .map_or(delta.old_file().size(), |(len, _)| len as u64),
            _ => std::fs::symlink_metadata(self.root.join(&change.path))
                .map_or(delta.new_file().size(), |m| m.len()),
        }
    }

    /// Every text file of the tree at `base` no larger than `max_file`
    /// bytes, by path (in git's order): what the examiner reads.
    pub fn texts_at(&self, base: Oid, max_file: usize) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let Ok(tree) = self.repo.find_commit(base).and_then(|c| c.tree()) else {
            return out;
        };
        let _ = tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() != Some(git2::ObjectType::Blob) {
                return git2::TreeWalkResult::Ok;
            }
            let Ok(blob) = self.repo.find_blob(entry.id()) else {
                return git2::TreeWalkResult::Ok;
            };
            let bytes = blob.content();
            if bytes.len() > max_file || bytes[..bytes.len().min(8000)].contains(&0) {
                return git2::TreeWalkResult::Ok;
            }
            if let (Ok(text), Some(name)) = (std::str::from_utf8(bytes), entry.name()) {
                out.push((format!("{dir}{name}"), text.to_owned()));
            }
            git2::TreeWalkResult::Ok
        });
        out
    }

    /// A path's content at `base` ([`Content::Deleted`] when it is not there).
    pub fn base_content(&self, base: Oid, path: &str) -> Content {
        let blob = self
            .repo
            .find_commit(base)
            .and_then(|c| c.tree())
            .and_then(|t| t.get_path(Path::new(path)))
            .and_then(|e| self.repo.find_blob(e.id()));
        match blob {
            Ok(b) => Content::of_bytes(b.content()),
            Err(_) => Content::Deleted,
        }
    }

    /// A path's content in the working tree; a file larger than `max_file`
    /// is hashed in chunks, never loaded.
    /// A link is its target's path (as git stores it), never what it points
    /// at; a special file (a FIFO, a device) is never opened.
    fn work_content(&self, path: &str, max_file: u64) -> Content {
        let full = self.root.join(path);
        match std::fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&full) {
                Ok(target) => Content::of_bytes(target.to_string_lossy().as_bytes()),
                Err(_) => Content::Deleted,
            },
            Ok(m) if m.is_file() && m.len() > max_file => match sha256_file(&full) {
                Ok(sha256) => Content::TooLarge {
                    bytes: m.len(),
                    sha256,
                },
                Err(_) => Content::Deleted,
            },
            Ok(m) if m.is_file() => match crate::util::read_untrusted(&full, max_file) {
                Ok(bytes) => Content::of_bytes(&bytes),
                Err(_) => Content::Deleted,
            },
            _ => Content::Deleted,
        }
    }

    /// The changed files of `diff` whose path `wanted` accepts, with their
    /// text at `base` and now (files too large to load have none).
    pub fn changed_texts(
        &self,
        base: Oid,
        diff: &Diff,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<ChangedText> {
        let text = |c: Content| match c {
            Content::Text { text } => Some(text),
            _ => None,
        };
        diff.changes
            .iter()
            .filter(|c| wanted(&c.path) && !diff.too_large(&c.path))
            .map(|c| ChangedText {
                path: c.path.clone(),
                old: text(self.base_content(base, c.old_path.as_deref().unwrap_or(&c.path))),
                new: match c.status {
                    ChangeKind::Deleted => None,
                    _ => text(self.work_content(&c.path, diff.limits.max_file)),
                },
            })
            .collect()
    }

    /// What the working tree holds of the paths `diff` changed.
    pub fn snapshot(&self, diff: &Diff) -> Snapshot {
        let mut files = BTreeMap::new();
        for c in &diff.changes {
            if let Some(old) = &c.old_path {
                files.insert(old.clone(), Content::Deleted);
            }
            let content = match c.status {
                ChangeKind::Deleted => Content::Deleted,
                _ => self.work_content(&c.path, diff.limits.max_file),
            };
            files.insert(c.path.clone(), content);
        }
        Snapshot { files }
    }

    /// Park everything the agent left (tracked changes and untracked files)
    /// in a stash with `message`, and pin the stash commit under
    /// `refs/loopd/stash/<job_id>` so that dropping or clearing stashes, or
    /// garbage collection, cannot lose it. Returns `None` when there was
    /// nothing to park. Afterwards the working tree is clean, but for its
    /// submodules: a git stash never looks inside one (nor at a moved
    /// submodule commit), so [`Workspace::park_submodules`] parks those.
    pub fn park(&mut self, job_id: &str, message: &str) -> Result<Option<Oid>, WorkspaceError> {
        let root = self.root.clone();
        let stash = park_in(&mut self.repo, &root, job_id, message)?;
        if let Some(s) = stash {
            crate::util::crash_point("park:stashed");
            // A daemon job's repository goes away with its worktree: the
            // parked work goes to the user's repository first.
            self.park_home(s, job_id, message)?;
        }
        Ok(stash)
    }

    /// Park what the agent left inside each checked-out submodule (nested
    /// ones too), in a stash in the submodule's own repository pinned there
    /// by `refs/loopd/stash/<job_id>`. A submodule whose commit the agent
    /// moved is left checked out where it is (nothing here resets) and its
    /// HEAD is pinned by `refs/loopd/head/<job_id>`, so that a later
    /// `git submodule update` and gc cannot lose the agent's commits. A
    /// submodule that cannot be parked is left as it is, its entry says why.
    /// Idempotent, like [`Workspace::park`]: a clean submodule answers with
    /// the refs an earlier run left.
    pub fn park_submodules(
        &self,
        job_id: &str,
        message: &str,
    ) -> Result<Vec<SubmoduleParked>, WorkspaceError> {
        let mut out = Vec::new();
        park_submodules_of(&self.repo, &self.root, "", job_id, message, &mut out)
            .map_err(self.git("list the submodules"))?;
        Ok(out)
    }
}

/// A submodule's share of the parked work (`failure.json`, the journal).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubmoduleParked {
    /// Where it is checked out, relative to the repository's root
    /// (`vendor`, or `vendor/inner` for a nested one); `*` when the
    /// submodules could not even be listed.
    pub path: String,
    /// The stash commit in the submodule's own repository, pinned there by
    /// `refs/loopd/stash/<job-id>` (`None`: nothing to park inside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stash_commit: Option<String>,
    /// The submodule's HEAD, when the agent moved it off the commit the
    /// repository records: left checked out, pinned by
    /// `refs/loopd/head/<job-id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_head: Option<String>,
    /// Why it could not be parked: its changes are still in its tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Whether `repo` holds anything a git stash would take: changed or
/// untracked files, submodules left out, exactly as libgit2's stash sees
/// them (asked to stash nothing, it fails).
fn has_stashable_changes(repo: &Repository) -> Result<bool, git2::Error> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    Ok(!repo.statuses(Some(&mut opts))?.is_empty())
}

/// [`Workspace::park`] for any repository: the superproject or a submodule.
fn park_in(
    repo: &mut Repository,
    root: &Path,
    job_id: &str,
    message: &str,
) -> Result<Option<Oid>, WorkspaceError> {
    let git = |operation: &'static str| {
        move |source| WorkspaceError::Git {
            operation,
            path: root.to_path_buf(),
            source,
        }
    };
    if !has_stashable_changes(repo).map_err(git("status"))? {
        // Parked already by a run killed before it could record where:
        // the pinning ref says.
        return Ok(repo.refname_to_id(&keep_ref(job_id)).ok());
    }
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("loopd", "loopd@localhost"))
        .map_err(git("make a signature"))?;
    let stash = repo
        .stash_save2(
            &sig,
            Some(message),
            Some(git2::StashFlags::INCLUDE_UNTRACKED),
        )
        .map_err(git("stash push --include-untracked"))?;
    repo.reference(&keep_ref(job_id), stash, true, message)
        .map_err(git("pin the stash commit"))?;
    Ok(Some(stash))
}

/// Park the submodules of `repo` (checked out at `root`, which is `prefix`
/// in the superproject), then theirs. Only listing them can fail here.
fn park_submodules_of(
    repo: &Repository,
    root: &Path,
    prefix: &str,
    job_id: &str,
    message: &str,
    out: &mut Vec<SubmoduleParked>,
) -> Result<(), git2::Error> {
    for sm in repo.submodules()? {
        let rel = sm.path().to_string_lossy().into_owned();
        let path = if prefix.is_empty() {
            rel
        } else {
            format!("{prefix}/{rel}")
        };
        // Not checked out (never initialised, or removed): nothing of the
        // agent's can be inside.
        let Ok(mut sub) = sm.open() else { continue };
        let sub_root = root.join(sm.path());
        let mut entry = SubmoduleParked {
            path: path.clone(),
            ..SubmoduleParked::default()
        };
        match park_in(&mut sub, &sub_root, job_id, message) {
            Ok(stash) => {
                if stash.is_some() {
                    crate::util::crash_point("park:submodule-stashed");
                }
                entry.stash_commit = stash.map(|s| s.to_string());
            }
            Err(e) => entry.error = Some(e.to_string()),
        }
        let head = sub.head().ok().and_then(|h| h.target());
        if let Some(head) = head.filter(|h| sm.head_id().is_some_and(|r| r != *h)) {
            match sub.reference(&head_ref(job_id), head, true, message) {
                Ok(_) => entry.moved_head = Some(head.to_string()),
                Err(e) => {
                    let pin = format!("cannot pin its moved HEAD {head}: {e}");
                    entry.error = Some(match entry.error.take() {
                        Some(first) => format!("{first}; {pin}"),
                        None => pin,
                    });
                }
            }
        }
        if entry.stash_commit.is_some() || entry.moved_head.is_some() || entry.error.is_some() {
            out.push(entry);
        }
        if let Err(e) = park_submodules_of(&sub, &sub_root, &path, job_id, message, out) {
            out.push(SubmoduleParked {
                path,
                error: Some(format!("cannot list its submodules: {e}")),
                ..SubmoduleParked::default()
            });
        }
    }
    Ok(())
}

impl Workspace {
    /// Put parked work back (`loopd resume`): the stash commit's tracked
    /// changes against the commit it was made on, and its untracked files,
    /// written into the working tree; the index stays as it is, so the work
    /// is uncommitted as the agent left it. Idempotent (the same bytes are
    /// written again). Returns how many files it wrote or removed.
    pub fn unpark(&self, stash: Oid) -> Result<usize, WorkspaceError> {
        let commit = self
            .repo
            .find_commit(stash)
            .map_err(self.git("find the parked stash commit"))?;
        let base = commit
            .parent(0)
            .and_then(|p| p.tree())
            .map_err(self.git("read the stash's base"))?;
        let tree = commit.tree().map_err(self.git("read the stash's tree"))?;
        let diff = self
            .repo
            .diff_tree_to_tree(Some(&base), Some(&tree), None)
            .map_err(self.git("diff the stash"))?;
        // libgit2 may keep untracked files in the stash's own tree too:
        // each path is written once.
        let mut done = BTreeSet::new();
        for delta in diff.deltas() {
            if delta.status() == git2::Delta::Deleted {
                if let Some(p) = delta.old_file().path() {
                    let path = self.root.join(p);
                    match std::fs::remove_file(&path) {
                        Ok(()) => {
                            done.insert(p.to_path_buf());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(self.io("remove a file the parked work deleted", e)),
                    }
                }
                continue;
            }
            let file = delta.new_file();
            if let Some(p) = file.path() {
                self.write_blob(p, file.id(), u32::from(file.mode()))?;
                done.insert(p.to_path_buf());
            }
        }
        // A stash with untracked files has them in its third parent's tree.
        if commit.parent_count() >= 3 {
            let untracked = commit
                .parent(2)
                .and_then(|p| p.tree())
                .map_err(self.git("read the stash's untracked files"))?;
            let mut blobs = Vec::new();
            untracked
                .walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
                    if entry.kind() == Some(git2::ObjectType::Blob) {
                        let name = entry.name().unwrap_or_default();
                        blobs.push((format!("{dir}{name}"), entry.id(), entry.filemode() as u32));
                    }
                    git2::TreeWalkResult::Ok
                })
                .map_err(self.git("walk the stash's untracked files"))?;
            for (p, id, mode) in blobs {
                if done.insert(PathBuf::from(&p)) {
                    self.write_blob(Path::new(&p), id, mode)?;
                }
            }
        }
        Ok(done.len())
    }

    fn write_blob(&self, rel: &Path, id: Oid, mode: u32) -> Result<(), WorkspaceError> {
        use std::os::unix::fs::PermissionsExt;
        let blob = self
            .repo
            .find_blob(id)
            .map_err(self.git("read a parked file"))?;
        let path = self.root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.io("create a directory", e))?;
        }
        if mode == 0o120000 {
            let target = String::from_utf8_lossy(blob.content()).into_owned();
            let _ = std::fs::remove_file(&path);
            return std::os::unix::fs::symlink(target, &path)
                .map_err(|e| self.io("restore a parked symlink", e));
        }
        std::fs::write(&path, blob.content()).map_err(|e| self.io("restore a parked file", e))?;
        let exec = if mode == 0o100755 { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(exec))
            .map_err(|e| self.io("set a parked file's mode", e))
    }
}

/// The ref that keeps a parked job's stash commit alive.
pub fn keep_ref(job_id: &str) -> String {
    format!("refs/loopd/stash/{job_id}")
}

/// The ref that keeps a submodule commit the agent moved to alive.
pub fn head_ref(job_id: &str) -> String {
    format!("refs/loopd/head/{job_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, Workspace, Oid) {
        let tmp = tempfile::tempdir().expect("tmp");
        let r = Repository::init(tmp.path()).expect("init");
        std::fs::write(tmp.path().join("app.py"), "x = 1\n").expect("write");
        let mut index = r.index().expect("index");
        index.add_path(Path::new("app.py")).expect("add");
        index.write().expect("write the index");
        let tree = r
            .find_tree(index.write_tree().expect("tree"))
            .expect("tree");
        let sig = git2::Signature::now("t", "t@example.invalid").expect("sig");
        let base = r
            .commit(Some("HEAD"), &sig, &sig, "base", &tree, &[])
            .expect("commit");
        let ws = Workspace::open(tmp.path()).expect("open");
        (tmp, ws, base)
    }

    fn diff_of(ws: &Workspace, base: Oid, artefacts: &Artefacts) -> Diff {
        let mut out = Vec::new();
        let diff = ws
            .diff_since(base, artefacts, DiffLimits::for_bound(1 << 20), &mut out)
            .expect("diff");
        assert_eq!(
            diff.patch.as_deref().map(str::as_bytes),
            Some(&out[..]),
            "kept = written"
        );
        diff
    }

    #[test]
    fn a_large_change_is_streamed_and_a_file_over_the_limit_is_never_loaded() {
        let (tmp, ws, base) = repo();
        let root = tmp.path();
        std::fs::write(root.join("app.py"), "x = 2\n").expect("write");
        std::fs::write(root.join("big.txt"), "padding line\n".repeat(10_000)).expect("big");
        std::fs::write(root.join("mid.txt"), "line\n".repeat(100)).expect("mid");
        let limits = DiffLimits {
            max_file: 50_000,
            keep: 300,
        };
        let mut out = Vec::new();
        let diff = ws
            .diff_since(base, &Artefacts::default(), limits, &mut out)
            .expect("diff");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(diff.patch, None, "over the keep limit: not held in memory");
        assert_eq!(diff.patch_bytes, text.len() as u64, "but written whole");
        assert!(text.contains("+x = 2") && text.contains("+line"), "{text}");
        let big = diff
            .files
            .iter()
            .find(|f| f.path == "big.txt")
            .expect("listed");
        assert!(big.too_large && big.bytes == 130_000, "{big:?}");
        assert!(
            text.contains("loopd: added file of 130000 bytes, not loaded"),
            "{text}"
        );
        assert!(!text.contains("padding line"), "never loaded");
        assert_eq!(diff.size(), diff.patch_bytes + 130_000);
        assert!(
            !diff.added_complete,
            "the added lines beyond the limit were dropped"
        );
        assert!(diff.added.len() < 100);
        let mid = diff
            .files
            .iter()
            .find(|f| f.path == "mid.txt")
            .expect("listed");
        assert_eq!(
            (mid.added, mid.removed),
            (100, 0),
            "counted, though not kept"
        );
        // A different huge file is a different diff.
        std::fs::write(root.join("big.txt"), "padding line!\n".repeat(10_000)).expect("big");
        let again = ws
            .diff_since(base, &Artefacts::default(), limits, &mut std::io::sink())
            .expect("diff");
        assert_ne!(again.sha256, diff.sha256);
        assert!(matches!(
            ws.snapshot(&again).files["big.txt"],
            Content::TooLarge { bytes: 140_000, .. }
        ));
    }

    #[test]
    fn parked_work_comes_back_as_it_was_left() {
        use std::os::unix::fs::PermissionsExt;
        let (tmp, mut ws, _base) = repo();
        let root = tmp.path();
        std::fs::write(root.join("app.py"), "x = 2\n").expect("write");
        std::fs::create_dir_all(root.join("tools")).expect("dir");
        std::fs::write(root.join("tools/run.sh"), "#!/bin/sh\necho hi\n").expect("write");
        std::fs::set_permissions(
            root.join("tools/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let stash = ws
            .park("j1", "loopd j1: escalated")
            .expect("park")
            .expect("parked");
        assert!(
            ws.dirty_paths().expect("status").is_empty(),
            "parked: the tree is clean"
        );
        assert_eq!(ws.unpark(stash).expect("unpark"), 2);
        assert_eq!(
            std::fs::read_to_string(root.join("app.py")).expect("read"),
            "x = 2\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("tools/run.sh")).expect("read"),
            "#!/bin/sh\necho hi\n"
        );
        let mode = std::fs::metadata(root.join("tools/run.sh"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "still executable");
        let mut dirty = ws.dirty_paths().expect("status");
        dirty.sort();
        assert_eq!(
            dirty,
            ["app.py", "tools/run.sh"],
            "uncommitted, untracked as left"
        );
        // Again (a crash before it was journaled): the same bytes.
        ws.unpark(stash).expect("unpark again");
        assert_eq!(
            std::fs::read_to_string(root.join("app.py")).expect("read"),
            "x = 2\n"
        );

        // A deleted file stays deleted.
        let (tmp, mut ws, _base) = repo();
        std::fs::remove_file(tmp.path().join("app.py")).expect("rm");
        let stash = ws
            .park("j2", "loopd j2: budget_usd")
            .expect("park")
            .expect("parked");
        assert!(
            tmp.path().join("app.py").exists(),
            "parking restored the tree"
        );
        ws.unpark(stash).expect("unpark");
        assert!(!tmp.path().join("app.py").exists());
    }

    /// Git on the command line (`submodule add` has no git2 counterpart),
    /// kept from the user's config.
    fn git_cli(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn parking_reaches_inside_submodules_and_pins_each_stash() {
        let tmp = tempfile::tempdir().expect("tmp");
        let lib = tmp.path().join("lib");
        std::fs::create_dir_all(lib.join("tests")).expect("lib");
        std::fs::write(lib.join("tests/test_lib.py"), "assert 1 + 1 == 2\n").expect("write");
        git_cli(&lib, &["init", "-q", "-b", "main"]);
        git_cli(&lib, &["add", "-A"]);
        git_cli(&lib, &["commit", "-qm", "lib"]);
        let sup = tmp.path().join("sup");
        std::fs::create_dir_all(&sup).expect("sup");
        std::fs::write(sup.join("app.py"), "x = 1\n").expect("write");
        git_cli(&sup, &["init", "-q", "-b", "main"]);
        let lib = lib.to_string_lossy().into_owned();
        git_cli(
            &sup,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                &lib,
                "vendor",
            ],
        );
        git_cli(&sup, &["add", "-A"]);
        git_cli(&sup, &["commit", "-qm", "base"]);
        let vendor = sup.join("vendor");
        std::fs::write(sup.join("app.py"), "x = 2\n").expect("write");
        std::fs::write(vendor.join("tests/test_lib.py"), "assert True\n").expect("weaken");
        std::fs::write(vendor.join("notes.txt"), "untracked\n").expect("untracked");

        let mut ws = Workspace::open(&sup).expect("open");
        ws.park("j1", "loopd j1: protected_path")
            .expect("park")
            .expect("parked");
        assert_eq!(
            ws.dirty_paths().expect("status"),
            ["vendor"],
            "a git stash never looks inside a submodule"
        );
        let subs = ws
            .park_submodules("j1", "loopd j1: protected_path")
            .expect("park the submodules");
        assert_eq!(subs.len(), 1, "{subs:?}");
        let stash = subs[0].stash_commit.clone().expect("parked inside");
        assert_eq!(
            (subs[0].path.as_str(), &subs[0].moved_head, &subs[0].error),
            ("vendor", &None, &None)
        );
        assert!(ws.dirty_paths().expect("status").is_empty(), "all clean");
        let inner = Repository::open(&vendor).expect("the submodule's repository");
        assert_eq!(
            inner
                .refname_to_id(&keep_ref("j1"))
                .expect("pinned")
                .to_string(),
            stash,
            "pinned in the submodule's own repository"
        );
        assert_eq!(
            ws.park_submodules("j1", "loopd j1: protected_path")
                .expect("again"),
            subs,
            "a resumed run finds the stash it made"
        );
        git_cli(&vendor, &["stash", "apply", &stash]);
        assert_eq!(
            std::fs::read_to_string(vendor.join("tests/test_lib.py")).expect("read"),
            "assert True\n"
        );
        assert!(vendor.join("notes.txt").is_file(), "untracked, parked too");

        // A commit the agent made inside: no stash of the superproject
        // records a moved submodule; it stays checked out, pinned.
        git_cli(&vendor, &["add", "-A"]);
        git_cli(&vendor, &["commit", "-qm", "the agent's commit"]);
        let head = inner.head().expect("head").target().expect("oid");
        assert_eq!(ws.park("j2", "loopd j2: budget_usd").expect("park"), None);
        let subs = ws
            .park_submodules("j2", "loopd j2: budget_usd")
            .expect("park the submodules");
        assert_eq!(
            subs,
            [SubmoduleParked {
                path: "vendor".into(),
                moved_head: Some(head.to_string()),
                ..SubmoduleParked::default()
            }]
        );
        assert_eq!(inner.refname_to_id(&head_ref("j2")).expect("pinned"), head);
        assert_eq!(
            inner.head().expect("head").target(),
            Some(head),
            "left where the agent moved it"
        );
    }

    /// Found by the attack on the boundary: `rechnung.py -diff` in a
    /// `.gitattributes` the agent wrote showed the critic "Binary files
    /// differ" instead of the changed source. Binary is decided by content.
    #[test]
    fn the_index_cannot_hide_a_change() {
        let (tmp, ws, base) = repo();
        let root = tmp.path();
        std::fs::write(root.join("notes.txt"), "n\n").expect("write");
        git_cli(root, &["add", "notes.txt"]);
        git_cli(root, &["commit", "-qm", "notes"]);
        let base2 = ws.head_commit().expect("head");
        assert_ne!(base, base2);
        std::fs::write(root.join("app.py"), "x = 'gutted'\n").expect("write");
        std::fs::write(root.join("notes.txt"), "changed, then staged\n").expect("write");
        git_cli(root, &["update-index", "--skip-worktree", "app.py"]);
        git_cli(root, &["add", "notes.txt"]);
        git_cli(root, &["update-index", "--assume-unchanged", "notes.txt"]);
        let diff = diff_of(&ws, base2, &Artefacts::default());
        let paths: Vec<&str> = diff.changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["app.py", "notes.txt"], "{:?}", diff.changes);
        let patch = diff.patch.as_deref().expect("kept");
        assert!(patch.contains("+x = 'gutted'"), "{patch}");
    }

    #[test]
    fn gitattributes_cannot_hide_a_source_change() {
        let (tmp, ws, base) = repo();
        let root = tmp.path();
        std::fs::write(root.join(".gitattributes"), "app.py -diff\n*.txt binary\n").expect("attrs");
        std::fs::write(
            root.join("app.py"),
            "x = 2\ndef _payload():\n    return 'HIDDEN-MARKER'\n",
        )
        .expect("write");
        std::fs::write(root.join("notes.txt"), "plain text, marked binary\n").expect("write");
        std::fs::write(root.join("blob.bin"), b"BIN\0ARY\n").expect("write");
        let diff = diff_of(&ws, base, &Artefacts::default());
        let patch = diff.patch.as_deref().expect("kept");
        assert!(patch.contains("+    return 'HIDDEN-MARKER'"), "{patch}");
        assert!(patch.contains("+plain text, marked binary"), "{patch}");
        assert!(
            patch.contains("loopd: binary file added (8 bytes; sha256 "),
            "a real binary is named, sized and hashed: {patch}"
        );
        assert!(!patch.contains("BIN\0ARY"));
    }

    #[test]
    fn goal_and_build_artefacts_are_not_part_of_the_change() {
        let (tmp, ws, base) = repo();
        let root = tmp.path();
        std::fs::write(root.join("app.py"), "x = 2\n").expect("write");
        std::fs::write(root.join("helper.py"), "y = 1\n").expect("agent's new file");
        // A goal run: the usual artefacts and a report file.
        let before = ws.untracked_blobs().expect("before");
        for (p, text) in [
            ("__pycache__/app.cpython-312.pyc", "\u{0}bytecode"),
            ("pkg/node_modules/left-pad/index.js", "module.exports = 1\n"),
            ("report.xml", "<testsuite/>\n"),
        ] {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(path, text).expect("artefact");
        }
        let after = ws.untracked_blobs().expect("after");
        assert!(
            !after
                .keys()
                .any(|p| p.contains("__pycache__") || p.contains("node_modules")),
            "usual artefacts are not even hashed: {after:?}"
        );
        let mut artefacts = Artefacts::default();
        let created = artefacts.created_by_goal(&before, &after);
        assert_eq!(created.keys().collect::<Vec<_>>(), ["report.xml"]);
        artefacts.from_goal.extend(created);

        let diff = diff_of(&ws, base, &artefacts);
        let paths: Vec<&str> = diff.changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["app.py", "helper.py"]);
        let patch = diff.patch.as_deref().expect("kept");
        assert!(!patch.contains("testsuite") && !patch.contains("left-pad"));
        assert_eq!(diff.excluded.len(), 3, "{:?}", diff.excluded);

        // The agent rewrites the report afterwards: now it is its change.
        std::fs::write(root.join("report.xml"), "<testsuite tests=\"9\"/>\n").expect("write");
        let diff = diff_of(&ws, base, &artefacts);
        assert!(diff.changes.iter().any(|c| c.path == "report.xml"));
        // A goal run that rewrites a file the agent made does not make it
        // an artefact.
        let before = ws.untracked_blobs().expect("before");
        std::fs::write(root.join("helper.py"), "y = 2\n").expect("goal rewrites");
        let after = ws.untracked_blobs().expect("after");
        assert!(!artefacts
            .created_by_goal(&before, &after)
            .contains_key("helper.py"));
    }

    fn text(t: &str) -> Content {
        Content::Text { text: t.into() }
    }

    fn snap(files: &[(&str, Content)]) -> Snapshot {
        Snapshot {
            files: files
                .iter()
                .map(|(p, c)| (p.to_string(), c.clone()))
                .collect(),
        }
    }

    #[test]
    fn the_interdiff_is_what_the_later_attempt_changed() {
        let base = |p: &str| match p {
            "a.py" => text("x = 1\ny = 2\n"),
            "b.py" => text("keep\n"),
            _ => Content::Deleted,
        };
        // Attempt 1 changed a.py and added c.py; attempt 2 reverted a.py,
        // kept c.py and deleted b.py.
        let one = snap(&[("a.py", text("x = 1\ny = 3\n")), ("c.py", text("new\n"))]);
        let two = snap(&[("c.py", text("new\n")), ("b.py", Content::Deleted)]);
        let d = interdiff(&one, &two, base);
        assert_eq!(d.files, ["a.py", "b.py"]);
        assert!(d.patch.contains("--- a/a.py\n+++ b/a.py\n"), "{}", d.patch);
        assert!(d.patch.contains("-y = 3\n+y = 2\n"), "{}", d.patch);
        assert!(
            d.patch.contains("--- a/b.py\n+++ /dev/null\n"),
            "{}",
            d.patch
        );
        assert!(
            !d.patch.contains("c.py"),
            "unchanged between the attempts: {}",
            d.patch
        );
        assert_eq!(interdiff(&two, &two, base), Interdiff::default());
    }

    #[test]
    fn binary_content_is_compared_by_hash() {
        assert!(matches!(Content::of_bytes(b"a\0b"), Content::Binary { .. }));
        assert_eq!(Content::of_bytes(b"ab"), text("ab"));
        let one = snap(&[("img", Content::of_bytes(b"\0one"))]);
        let two = snap(&[("img", Content::of_bytes(b"\0two"))]);
        let d = interdiff(&one, &two, |_| Content::Deleted);
        assert_eq!(d.patch, "Binary files a/img and b/img differ\n");
    }
}
