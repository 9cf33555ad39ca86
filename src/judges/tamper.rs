//! Tamper-proof judging: the tests and the judges cannot be weakened,
//! whatever the critic says. "The model explains, the code decides."
//!
//! The [`Policy`] names what is protected:
//! - every test file that exists at BASE_REF (per-language globs below) —
//!   creating a new test file is allowed, changing an old one is not;
//! - every file of every runner in the registry ([`crate::runner`]:
//!   `pytest.ini`, `.cargo/config.toml`, `.npmrc`, `go.work`, ...), new or
//!   old — default-deny: the runner's unless [`super::runner`] parses the
//!   file and shows the change lies outside the runner's part;
//! - the job's `loopd.toml` and the rubric;
//! - whatever the lead adds in `loopd.toml` (`[protect] paths`).
//! - the repository's git directory (`.git/**`): loopd's during a job, since
//!   its config decides where a push goes and its hooks what git runs.
//!
//! It is enforced twice: at the tool call by `loopd hook pre-tool-use`
//! ([`Policy::check_tool`]), and after every attempt by a deterministic gate
//! on the diff since BASE_REF ([`Policy::diff_findings`]): any change to a
//! protected path (content, deletion, rename, mode, type) and any skip marker
//! added anywhere. The hook is a courtesy to the agent (it learns at once);
//! the diff gate is the guarantee.
//!
//! A lead's exceptions (`[protect] allow`, issue 40) lift the protection of
//! exactly the files they name — a test the task says to change, a fixture
//! — and nothing else: never the judge's own files (`loopd.toml`, the
//! rubric, `.git/`), never the skip-marker check, never the test count. A
//! lifted file that changed is recorded ([`Compiled::lifted_changes`]), so
//! the report and the critic say so.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::finding::{test_globs, Finding};
use crate::agent::events::{Action, ToolCall};

use crate::outcome::Reason;
use crate::workspace::{ChangeKind, Diff};

/// Why a test file is protected (the policy's `files` say it of each).
pub const TEST_AT_BASE: &str = "a test that exists at BASE_REF";

/// Markers that skip, disable or narrow tests, by language.
pub const SKIP_MARKERS: &[&str] = &[
    // pytest / unittest
    r"\bpytest\.mark\.(skip|skipif|xfail)\b",
    r"\bpytest\.(skip|xfail|importorskip)\s*\(",
    r"\bcollect_ignore(_glob)?\b",
    r"@unittest\.(skip|skipIf|skipUnless|expectedFailure)\b",
    r"\.skipTest\s*\(",
    r"\braise\s+(unittest\.)?SkipTest\b",
    // Rust
    r"#\[\s*ignore\b",
    // JavaScript / TypeScript
    r"\b(it|test|describe|context|suite)\.(skip|todo|only)\s*\(",
    r"\b(xit|xtest|xdescribe|xcontext|fit|fdescribe)\s*\(",
    // Go
    r"\b[tb]\.Skip(Now|f)?\s*\(",
    // JUnit
    r"@(Disabled|Ignore)\b",
];

/// Git subcommands that rewrite history or reset the working tree (and
/// `commit --amend`): denied wherever the hook runs.
pub const FORBIDDEN_GIT: &[&str] = &[
    "stash",
    "reset",
    "checkout",
    "switch",
    "restore",
    "clean",
    "push",
    "rebase",
    "filter-branch",
    "filter-repo",
    "update-ref",
    "reflog",
    "replace",
    "gc",
    "prune",
];

/// Git subcommands that write the repository's refs, configuration or
/// hooks: denied inside a loopd job, where `.git/` is loopd's and loopd
/// commits an accepted change itself. (`config`, `remote`, `symbolic-ref`,
/// `branch` and `tag` are judged by their arguments: their read-only forms
/// stay allowed.)
pub const GIT_DIR_WRITERS: &[&str] = &[
    "commit",
    "merge",
    "cherry-pick",
    "revert",
    "am",
    "pull",
    "init",
    "worktree",
    "submodule",
    "notes",
];

/// Programs that write, move or delete the paths they are given.
const MUTATORS: &[&str] = &[
    "rm", "rmdir", "unlink", "shred", "mv", "cp", "ln", "chmod", "chown", "chgrp", "touch",
    "truncate", "tee", "dd", "install", "rsync", "patch",
];

/// Programs that install git hooks, with the argument that makes them do it
/// (`None`: any invocation).
const HOOK_INSTALLERS: &[(&str, Option<&str>)] = &[
    ("pre-commit", Some("install")),
    ("lefthook", Some("install")),
    ("husky", None),
    ("husky-init", None),
];

/// Why the repository's git directory is protected, for denials and findings.
pub const GIT_DIR_WHY: &str = "the repository's git directory is loopd's during a job: its config decides where a push goes and its hooks what git runs";

/// Interpreters whose inline code (`-c`, `-e`) is searched for protected paths.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "perl", "ruby", "node", "bash", "sh", "zsh", "dash",
];

/// The policy a job runs under, as written to the policy file the hook reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Policy {
    pub repo: PathBuf,
    pub base_ref: String,
    /// Repository-relative paths protected because they existed at BASE_REF,
    /// with why.
    pub files: BTreeMap<String, String>,
    /// Globs that protect any matching path, new or existing, with why.
    pub patterns: Vec<(String, String)>,
    /// Absolute paths outside the repository (config, rubric), with why.
    pub outside: BTreeMap<PathBuf, String>,
    pub skip_markers: Vec<String>,
    /// Inside a loopd job: the checkout's git directories (its own and the
    /// common one, which a worktree shares). Nothing under them may be
    /// written, and git may not write refs, config or hooks. Empty for the
    /// standalone hook in your own sessions.
    #[serde(default)]
    pub git_dirs: Vec<PathBuf>,
    /// `[protect] allow_submodules`.
    #[serde(default)]
    pub allow_submodules: bool,
    /// `[protect] tests = "append_only"`: the hook lets the agent's editing
    /// tools write an existing test file, and the diff gate judges the
    /// change by [`super::append_only`] instead of refusing it whole.
    #[serde(default)]
    pub append_only: bool,
    /// `[protect] allow`: globs (repository-relative) whose files are not
    /// protected — checked by [`check_allow`] when the policy is built, so
    /// none of them reaches the judge's own files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("protect pattern `{pattern}` is not a valid glob: {message}")]
    Glob { pattern: String, message: String },
    #[error("skip marker `{pattern}` is not a valid regex: {message}")]
    Marker { pattern: String, message: String },
    #[error("cannot list the files of BASE_REF: {0}")]
    Git(#[from] git2::Error),
    #[error("cannot read the policy file `{}`: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("`[protect] allow` entry `{entry}` {why}")]
    Allow { entry: String, why: AllowRefusal },
}

/// Why a `[protect] allow` entry is refused. An entry names files inside
/// the repository, relative to its root, and may never lift the protection
/// of what judges the change: the lead's exception is for the work, not
/// for the judge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowRefusal {
    #[error("is empty")]
    Empty,
    #[error("is an absolute path, and an entry is relative to the repository root")]
    Absolute,
    #[error("has a `..` component, and an entry names files inside the repository")]
    ParentDir,
    #[error("is not a valid glob: {0}")]
    Glob(String),
    /// It matches `loopd.toml`, the rubric or the git directory.
    #[error("would lift the protection of {0}: the judge's own configuration is never the agent's to edit")]
    Judge(String),
}

/// Paths an entry is tried against to see whether it reaches into a git
/// directory (the repository's, or a submodule's `.git`).
const GIT_SAMPLES: &[&str] = &[
    ".git",
    ".git/config",
    ".git/HEAD",
    ".git/hooks/pre-commit",
    ".git/info/exclude",
    ".git/refs/heads/main",
    "sub/.git",
    "sub/.git/config",
];

/// Whether `rel` is a file a test runner reads before it collects a test:
/// a file of the runner registry, a shared file with a runner's part
/// ([`super::runner::wanted`]), or a `conftest.py`.
fn runs_the_tests(rel: &str) -> bool {
    static RUNNER_FILES: std::sync::OnceLock<GlobSet> = std::sync::OnceLock::new();
    // The registry's globs, at the root and at any depth: built once, not
    // per path the hook or the diff gate asks about.
    let runner_files = RUNNER_FILES.get_or_init(|| {
        let mut b = GlobSetBuilder::new();
        for (g, _) in crate::runner::config_globs() {
            for pattern in [g.to_owned(), format!("**/{g}")] {
                if let Ok(glob) = Glob::new(&pattern) {
                    b.add(glob);
                }
            }
        }
        b.build().unwrap_or_else(|_| GlobSet::empty())
    });
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "conftest.py" || super::runner::wanted(rel) || runner_files.is_match(rel)
}

/// Whether an `allow` entry names `rel` exactly (no glob), as a path is
/// written: `./` and repeated slashes aside.
fn allow_names(entry: &str, rel: &str) -> bool {
    let entry = normal_entry(entry);
    !entry.contains(['*', '?', '[', '{', '\\']) && entry == rel
}

/// An `allow` entry as the path it names: without a leading `./`, `.`
/// components, repeated or trailing slashes.
pub fn normal_entry(entry: &str) -> String {
    entry
        .trim()
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Check one `[protect] allow` entry: a non-empty path or glob relative to
/// the repository root, with no `..`, that matches none of `judge` — the
/// judge's own files as (repository-relative path, what it is) — and
/// nothing under a `.git`. Default-deny: a glob broad enough to reach one
/// of them (`*`, `**`, `*.toml`, `.*`) is refused whole, not narrowed.
pub fn check_allow(entry: &str, judge: &[(&str, &str)]) -> Result<(), AllowRefusal> {
    if entry.trim().is_empty() {
        return Err(AllowRefusal::Empty);
    }
    if entry.starts_with('/') {
        return Err(AllowRefusal::Absolute);
    }
    let parts: Vec<&str> = entry.split('/').collect();
    if parts.contains(&"..") {
        return Err(AllowRefusal::ParentDir);
    }
    if parts.contains(&".git") {
        return Err(AllowRefusal::Judge(
            "the repository's git directory (`.git/`)".into(),
        ));
    }
    let matcher = glob(entry)
        .map_err(|e| match e {
            PolicyError::Glob { message, .. } => AllowRefusal::Glob(message),
            other => AllowRefusal::Glob(other.to_string()),
        })?
        .compile_matcher();
    if let Some((path, what)) = judge.iter().find(|(path, _)| matcher.is_match(path)) {
        return Err(AllowRefusal::Judge(format!("`{path}` ({what})")));
    }
    if GIT_SAMPLES.iter().any(|p| matcher.is_match(p)) {
        return Err(AllowRefusal::Judge(
            "the repository's git directory (`.git/`)".into(),
        ));
    }
    Ok(())
}

fn glob(pattern: &str) -> Result<Glob, PolicyError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| PolicyError::Glob {
            pattern: pattern.into(),
            message: e.to_string(),
        })
}

fn globset<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<GlobSet, PolicyError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(glob(p)?);
    }
    b.build().map_err(|e| PolicyError::Glob {
        pattern: "<set>".into(),
        message: e.to_string(),
    })
}

/// The largest runner configuration file read at BASE_REF for the names
/// it adds to the tests (`pyproject.toml`, `setup.cfg`).
const MAX_RUNNER_CONFIG: usize = 1 << 20;

/// Everything a lead can set under `[protect]` in `loopd.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProtectSettings {
    /// Extra globs to protect (new or existing), e.g. `Makefile`, `ci/**`.
    pub paths: Vec<String>,
    /// Replace the built-in skip-marker regexes when set.
    pub skip_markers: Option<Vec<String>>,
    /// Let the change move a submodule or change files inside one (off: a
    /// change inside a submodule is a protected-path finding, since its
    /// tests are nobody's to weaken either).
    #[serde(default)]
    pub allow_submodules: bool,
    /// `[protect] tests`: `append_only` lets new tests into existing test
    /// files (judged by [`super::append_only`] at the diff gate).
    #[serde(default)]
    pub tests: super::append_only::TestsMode,
    /// `[protect] allow`: the lead's exceptions, paths or globs relative to
    /// the repository root whose protection is lifted (a test the task says
    /// to change). Checked by [`check_allow`]; their changes are recorded,
    /// and skip markers in them are still refused.
    #[serde(default)]
    pub allow: Vec<String>,
}

impl Policy {
    /// Build the policy for a job: list the files of BASE_REF and match
    /// them. A test file is one of a language's test names, or one the
    /// `goal` commands' runners run as tests ([`crate::runner::tests_of`]:
    /// a module a command names, the names a runner's configuration at
    /// BASE_REF adds).
    pub fn build(
        repo_git: &git2::Repository,
        repo: &Path,
        base: git2::Oid,
        protect: &ProtectSettings,
        own_files: &[(PathBuf, &str)],
        goal: &[&str],
    ) -> Result<Policy, PolicyError> {
        let tree = repo_git.find_commit(base)?.tree()?;
        let read = |rel: &str| -> Option<String> {
            let entry = tree.get_path(Path::new(rel)).ok()?;
            let blob = repo_git.find_blob(entry.id()).ok()?;
            (blob.size() <= MAX_RUNNER_CONFIG)
                .then(|| String::from_utf8_lossy(blob.content()).into_owned())
        };
        let run: Vec<String> = goal
            .iter()
            .flat_map(|g| crate::runner::tests_of(g, &read))
            .collect();
        // A glob of a runner's reading that does not compile protects
        // nothing more (the language's names still do).
        let mut all: Vec<&str> = test_globs().collect();
        all.extend(run.iter().map(String::as_str));
        let tests = globset(all).or_else(|_| globset(test_globs()))?;
        let mut files = BTreeMap::new();
        let mut all = std::collections::BTreeSet::new();
        let mut sources = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob) {
                let path = format!("{dir}{}", entry.name().unwrap_or(""));
                if tests.is_match(&path) {
                    files.insert(path.clone(), TEST_AT_BASE.to_owned());
                } else if crate::lang::Lang::of(&path).is_some_and(|l| l.inline_tests.is_some()) {
                    sources.push((path.clone(), entry.id()));
                }
                all.insert(path);
            }
            git2::TreeWalkResult::Ok
        })?;
        // Test modules in files of their own (`#[cfg(test)] mod unit;`).
        for (path, id) in sources {
            let Ok(blob) = repo_git.find_blob(id) else {
                continue;
            };
            if blob.size() > MAX_RUNNER_CONFIG
                || !blob.content().windows(9).any(|w| w == b"cfg(test)")
            {
                continue;
            }
            let text = String::from_utf8_lossy(blob.content());
            for f in super::append_only::test_module_files(&path, &text) {
                if all.contains(&f) {
                    files.insert(f, TEST_AT_BASE.to_owned());
                }
            }
        }
        let mut patterns: Vec<(String, String)> = crate::runner::config_globs()
            .map(|(g, runner)| {
                (
                    g.to_owned(),
                    format!("test-runner configuration ({runner})"),
                )
            })
            .collect();
        for p in &protect.paths {
            glob(p)?;
            patterns.push((p.clone(), "protected in loopd.toml".to_owned()));
        }
        let mut outside = BTreeMap::new();
        let mut judge = Vec::new();
        for (path, why) in own_files {
            match path.strip_prefix(repo) {
                Ok(rel) => {
                    let rel = rel.to_string_lossy().into_owned();
                    judge.push((rel.clone(), *why));
                    files.insert(rel, why.to_string());
                }
                Err(_) => {
                    outside.insert(path.clone(), why.to_string());
                }
            }
        }
        // Checked at config load too; here again for the policy itself:
        // whatever reads `loopd.toml`, no exception reaches the judge.
        let judge: Vec<(&str, &str)> = judge.iter().map(|(p, w)| (p.as_str(), *w)).collect();
        for entry in &protect.allow {
            check_allow(entry, &judge).map_err(|why| PolicyError::Allow {
                entry: entry.clone(),
                why,
            })?;
        }
        let skip_markers = protect
            .skip_markers
            .clone()
            .unwrap_or_else(|| SKIP_MARKERS.iter().map(|s| s.to_string()).collect());
        for m in &skip_markers {
            Regex::new(m).map_err(|e| PolicyError::Marker {
                pattern: m.clone(),
                message: e.to_string(),
            })?;
        }
        Ok(Policy {
            repo: repo.to_path_buf(),
            base_ref: base.to_string(),
            files,
            patterns,
            outside,
            skip_markers,
            git_dirs: vec![],
            allow_submodules: protect.allow_submodules,
            append_only: protect.tests == super::append_only::TestsMode::AppendOnly,
            allow: protect.allow.clone(),
        })
    }

    /// Compile the globs and regexes for matching.
    pub fn compile(&self) -> Result<Compiled<'_>, PolicyError> {
        Ok(Compiled {
            policy: self,
            patterns: globset(self.patterns.iter().map(|(p, _)| p.as_str()))?,
            allow: globset(self.allow.iter().map(String::as_str))?,
            markers: self
                .skip_markers
                .iter()
                .map(|m| {
                    Regex::new(m).map_err(|e| PolicyError::Marker {
                        pattern: m.clone(),
                        message: e.to_string(),
                    })
                })
                .collect::<Result<_, _>>()?,
        })
    }
}

/// A policy ready to match paths and lines.
pub struct Compiled<'a> {
    pub policy: &'a Policy,
    patterns: GlobSet,
    /// `[protect] allow`.
    allow: GlobSet,
    markers: Vec<Regex>,
}

/// A tool call the hook denied, as a gate finding; paths relative to
/// `root` (with its trailing slash).
pub fn denial_finding(tool: &str, input: &serde_json::Value, reason: &str, root: &str) -> Finding {
    let target = input
        .get("file_path")
        .and_then(|p| p.as_str())
        .map(|p| p.strip_prefix(root).unwrap_or(p).to_owned())
        .or_else(|| {
            input
                .get("command")
                .and_then(|c| c.as_str())
                .map(|c| format!("`{}`", c.chars().take(120).collect::<String>()))
        })
        .unwrap_or_default();
    Finding {
        reason: Reason::ProtectedPath,
        problem: format!("the {tool} call on {target} was denied: {reason}"),
        path: target,
        line: None,
        rule: None,
        check: None,
        fix: "leave protected files and git history as they are; fix the code under test".into(),
    }
}

/// Where a write to the absolute path `abs` lands: the `/proc` links to
/// the writer's own cwd and root replaced (`cwd`: the session's), then the
/// longest prefix that exists resolved through its symlinks (the rest
/// appended as written).
fn resolve(abs: &Path, cwd: &Path) -> PathBuf {
    let path = without_proc_self(abs, cwd);
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for name in rest.iter().rev() {
                out.push(name);
            }
            return normalize(&out);
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return normalize(&path),
        }
    }
}

/// `abs` with the `/proc` links to the writer's own cwd and root replaced
/// (`cwd`: the session's; the hook's own would be wrong).
fn without_proc_self(abs: &Path, cwd: &Path) -> PathBuf {
    for link in ["/proc/self/cwd", "/proc/thread-self/cwd"] {
        if let Ok(rest) = abs.strip_prefix(link) {
            return cwd.join(rest);
        }
    }
    for link in ["/proc/self/root", "/proc/thread-self/root"] {
        if let Ok(rest) = abs.strip_prefix(link) {
            return Path::new("/").join(rest);
        }
    }
    abs.to_path_buf()
}

/// Normalize a path lexically (no filesystem access): drop `.`, fold `..`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl Compiled<'_> {
    /// Why `rel` (repository-relative) is protected, if it is. A directory
    /// that contains protected files counts as protected too. A file
    /// `[protect] allow` names is not (see [`Compiled::lifted`]).
    pub fn protected(&self, rel: &str) -> Option<String> {
        self.protection(rel, true)
    }

    /// Whether `[protect] allow` lifts the protection of `rel`. Never true
    /// in a git directory; the policy was built refusing any entry that
    /// reaches the judge's own files ([`check_allow`]).
    ///
    /// A file through which a test runner reads configuration, plugins or
    /// code (the runner registry's files, a `conftest.py`, a shared file
    /// with a runner's part such as `pyproject.toml`) is lifted only by an
    /// entry that names it exactly: a glob written for fixtures
    /// (`tests/fixtures/**`) never hands the agent how the tests run.
    pub fn lifted(&self, rel: &str) -> bool {
        let rel = rel.trim_start_matches("./").trim_end_matches('/');
        if rel.split('/').any(|c| c == ".git") || !self.allow.is_match(rel) {
            return false;
        }
        !runs_the_tests(rel) || self.policy.allow.iter().any(|e| allow_names(e, rel))
    }

    /// Why `rel` is protected; `honour_allow: false` asks what it would be
    /// without `[protect] allow` (to record what an exception let through).
    fn protection(&self, rel: &str, honour_allow: bool) -> Option<String> {
        let rel = rel.trim_start_matches("./").trim_end_matches('/');
        if self.owns_git_dir() && (rel == ".git" || rel.starts_with(".git/")) {
            return Some(GIT_DIR_WHY.to_owned());
        }
        let lifted = |f: &str| honour_allow && self.lifted(f);
        if rel.is_empty() || rel == "." {
            return self
                .policy
                .files
                .keys()
                .any(|f| !lifted(f))
                .then(|| "the repository root contains protected files".to_owned());
        }
        if !lifted(rel) {
            if let Some(why) = self.policy.files.get(rel) {
                return Some(why.clone());
            }
            if let Some(i) = self.patterns.matches(rel).first() {
                return Some(self.policy.patterns[*i].1.clone());
            }
        }
        let dir = format!("{rel}/");
        if let Some((f, _)) = self
            .policy
            .files
            .range(dir.clone()..)
            .take_while(|(f, _)| f.starts_with(&dir))
            .find(|(f, _)| !lifted(f))
        {
            return Some(format!("it contains `{f}`, a protected file"));
        }
        None
    }

    /// The paths of `diff` that would be protected but for `[protect]
    /// allow`: what the lead's exceptions let through this time, for the
    /// journal, the report and the critic. Sorted, each once.
    pub fn lifted_changes(&self, diff: &Diff) -> Vec<String> {
        if self.policy.allow.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<String> = diff
            .changes
            .iter()
            .filter(|c| !c.submodule)
            .flat_map(|c| std::iter::once(&c.path).chain(c.old_path.iter()))
            // Every change an entry covers, protected or not (a new file
            // under a glob): what the lead let through is never silent.
            .filter(|p| self.lifted(p))
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Resolve a path as the agent wrote it (absolute, or relative to `cwd`)
    /// and say why it is protected, if it is. Returns the display path too.
    ///
    /// The path is matched as written and as the kernel would resolve it:
    /// `/proc/self/cwd/...` is under `cwd`, and symlinks in its longest
    /// existing prefix are followed (`ln -s tests tdir`, then a write to
    /// `tdir/test_x.py`, writes `tests/test_x.py`).
    pub fn protected_path(&self, raw: &str, cwd: &Path) -> Option<(String, String)> {
        let p = Path::new(raw);
        let abs = normalize(&if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        });
        self.protected_abs(&abs).or_else(|| {
            let real = resolve(&abs, cwd);
            (real != abs).then(|| self.protected_abs(&real)).flatten()
        })
    }

    /// [`Compiled::protected_path`] for an operand that a command removes
    /// itself (`rm` without `-r`, `unlink`): when its last component is a
    /// symlink, the link is what goes, so only the directory it is in is
    /// resolved (`ln -s tests tdir`, then `rm tdir`, removes the link, not
    /// the tests). A trailing `/` or `/.` makes the kernel follow the link:
    /// then it is resolved whole, like any other path.
    fn protected_removal(&self, raw: &str, cwd: &Path) -> Option<(String, String)> {
        let last = raw.rsplit('/').next().unwrap_or_default();
        let p = Path::new(raw);
        let abs = normalize(&if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        });
        let link = without_proc_self(&abs, cwd);
        let is_link = !matches!(last, "" | "." | "..")
            && std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return self.protected_path(raw, cwd);
        }
        self.protected_abs(&abs).or_else(|| {
            let (dir, name) = (link.parent()?, link.file_name()?);
            let real = resolve(dir, cwd).join(name);
            (real != abs).then(|| self.protected_abs(&real)).flatten()
        })
    }

    /// Why the absolute, normalized path `abs` is protected, if it is.
    fn protected_abs(&self, abs: &Path) -> Option<(String, String)> {
        let abs = abs.to_path_buf();
        if let Some(why) = self.policy.outside.get(&abs) {
            return Some((abs.display().to_string(), why.clone()));
        }
        if self.policy.git_dirs.iter().any(|d| abs.starts_with(d)) {
            return Some((abs.display().to_string(), GIT_DIR_WHY.to_owned()));
        }
        let rel = abs.strip_prefix(&self.policy.repo).ok()?;
        let rel = rel.to_string_lossy();
        self.protected(&rel).map(|why| (rel.into_owned(), why))
    }

    /// A shell word with glob characters, matched against the protected files.
    fn protected_glob(&self, word: &str, cwd: &Path) -> Option<(String, String)> {
        let p = Path::new(word);
        let abs = normalize(&if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        });
        let rel = abs
            .strip_prefix(&self.policy.repo)
            .ok()?
            .to_string_lossy()
            .into_owned();
        let g = GlobBuilder::new(&rel)
            .literal_separator(true)
            .build()
            .ok()?
            .compile_matcher();
        self.policy
            .files
            .iter()
            .find(|(f, _)| g.is_match(f) && !self.lifted(f))
            .map(|(f, why)| (f.clone(), why.clone()))
    }

    /// The PreToolUse decision on a canonical tool call (whichever agent
    /// made it): `Some(reason)` to deny the call.
    pub fn check_tool(&self, call: &ToolCall, cwd: &Path) -> Option<String> {
        // Under `append_only`, an editing tool may write an existing test
        // (the diff gate judges what it did); a shell command may not.
        let path = |p: &str| {
            self.protected_path(p, cwd)
                .filter(|(_, why)| !(self.policy.append_only && why == TEST_AT_BASE))
                .map(|(p, why)| deny_path(&p, &why))
        };
        match &call.action {
            Action::Write { path: p } | Action::Edit { path: p } => path(p),
            Action::Patch { paths } => paths.iter().find_map(|p| path(p)),
            Action::Shell { command } => self.check_shell(command, cwd, 0),
            Action::Read { .. } | Action::Other => None,
        }
    }

    fn check_shell(&self, command: &str, cwd: &Path, depth: u8) -> Option<String> {
        for cmd in shell::parse(command) {
            for target in &cmd.redirects {
                if let Some((p, why)) = self.protected_path(target, cwd) {
                    return Some(deny_path(&p, &why));
                }
            }
            let Some((program, args)) = cmd.program() else {
                continue;
            };
            if let Some(reason) = hook_installer(program, args).filter(|_| self.owns_git_dir()) {
                return Some(reason);
            }
            if let Some(reason) = model_client(program, args) {
                return Some(reason);
            }
            if program == "git" {
                if let Some(reason) = self.check_git(args, cwd) {
                    return Some(reason);
                }
                continue;
            }
            let inline = INTERPRETERS.contains(&program)
                && args
                    .iter()
                    .any(|a| a == "-c" || a == "-e" || a.starts_with("-pi") || a == "-i");
            if inline {
                if let Some(code) = args.iter().skip_while(|a| *a != "-c" && *a != "-e").nth(1) {
                    if matches!(program, "bash" | "sh" | "zsh" | "dash") && depth < 3 {
                        if let Some(r) = self.check_shell(code, cwd, depth + 1) {
                            return Some(r);
                        }
                    }
                    if let Some((p, why)) = self.mentioned(code) {
                        return Some(deny_path(&p, &why));
                    }
                }
            }
            let mutating = MUTATORS.contains(&program)
                || (program == "sed"
                    && args.iter().any(|a| {
                        a == "-i"
                            || a.starts_with("-i")
                            || a == "--in-place"
                            || (a.starts_with('-') && !a.starts_with("--") && a.contains('i'))
                    }))
                || (program == "perl"
                    && args.iter().any(|a| a.starts_with("-") && a.contains('i')));
            if mutating {
                // These remove the operand itself, never what a symlink
                // there points to (`rm -r dir/` follows one: resolved).
                let removes_itself = program == "unlink"
                    || (program == "rm"
                        && !args.iter().any(|a| {
                            a == "--recursive"
                                || (a.starts_with('-')
                                    && !a.starts_with("--")
                                    && a.contains(['r', 'R']))
                        }));
                let operands: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
                // These read their sources and write only the last operand.
                let targets = if matches!(program, "cp" | "install" | "rsync" | "ln") {
                    &operands[operands.len().saturating_sub(1)..]
                } else {
                    &operands[..]
                };
                for a in targets {
                    let a = a.strip_prefix("of=").unwrap_or(a);
                    let hit = if a.contains(['*', '?', '[']) {
                        self.protected_glob(a, cwd)
                    } else if removes_itself {
                        self.protected_removal(a, cwd)
                    } else {
                        self.protected_path(a, cwd)
                    };
                    if let Some((p, why)) = hit {
                        return Some(deny_path(&p, &why));
                    }
                }
            }
        }
        None
    }

    fn check_git(&self, args: &[String], cwd: &Path) -> Option<String> {
        let mut it = args.iter().peekable();
        // Skip global options (`-C dir`, `-c k=v`, `--git-dir=...`).
        let mut sub = None;
        while let Some(a) = it.next() {
            if a == "-C" || a == "-c" {
                it.next();
            } else if !a.starts_with('-') {
                sub = Some(a.as_str());
                break;
            }
        }
        let sub = sub?;
        let rest: Vec<&String> = it.collect();
        if FORBIDDEN_GIT.contains(&sub) || (sub == "commit" && rest.iter().any(|a| *a == "--amend"))
        {
            let what = if sub == "commit" {
                "git commit --amend".to_owned()
            } else {
                format!("git {sub}")
            };
            return Some(format!(
                "loopd: `{what}` rewrites history or resets the working tree, and is not allowed during a loopd job. Change the files you need directly; loopd keeps every attempt's state itself."
            ));
        }
        let owned = self.owns_git_dir();
        if owned && GIT_DIR_WRITERS.contains(&sub) {
            return Some(format!(
                "loopd: `git {sub}` writes the repository's refs or git directory, which is loopd's during a job. Change the files you need directly; loopd keeps every attempt's state and commits an accepted change itself."
            ));
        }
        if let Some(what) = git_dir_write(sub, &rest).filter(|_| owned) {
            return Some(format!(
                "loopd: `{what}` writes the repository's git directory (its config, remotes, hooks or refs), which is loopd's during a job: it decides where a push goes and what git runs. Read-only forms (`git config --get`, `git remote -v`, `git branch --list`) are fine; leave the repository's setup as it is and fix the code under test."
            ));
        }
        if matches!(sub, "rm" | "mv") {
            for a in rest.iter().filter(|a| !a.starts_with('-')) {
                if let Some((p, why)) = self.protected_path(a, cwd) {
                    return Some(deny_path(&p, &why));
                }
            }
        }
        None
    }

    /// Is this a loopd job's policy, under which `.git/` is loopd's?
    fn owns_git_dir(&self) -> bool {
        !self.policy.git_dirs.is_empty()
    }

    /// A protected file named inside a piece of inline code.
    fn mentioned(&self, code: &str) -> Option<(String, String)> {
        let git_dir = self.owns_git_dir()
            && (code.contains(".git/")
                || self
                    .policy
                    .git_dirs
                    .iter()
                    .any(|d| code.contains(&*d.to_string_lossy())));
        if git_dir {
            return Some((".git/".to_owned(), GIT_DIR_WHY.to_owned()));
        }
        self.policy
            .files
            .iter()
            .find(|(f, _)| code.contains(f.as_str()) && !self.lifted(f))
            .map(|(f, why)| (f.clone(), why.clone()))
            .or_else(|| {
                self.policy
                    .outside
                    .iter()
                    .find(|(p, _)| code.contains(&*p.to_string_lossy()))
                    .map(|(p, why)| (p.display().to_string(), why.clone()))
            })
    }

    /// The first skip marker in `text`, if any.
    pub fn skip_marker(&self, text: &str) -> Option<String> {
        self.markers
            .iter()
            .find_map(|re| re.find(text))
            .map(|m| m.as_str().to_owned())
    }

    /// The diff gate: protected paths changed and skip markers added.
    /// `tests_rule` is the rubric rule about tests, put on the findings that
    /// touch a test (a changed test names its first added line).
    /// Untracked artefacts left out of the change are still checked for
    /// protected paths (a "build artefact" named like a runner config is not
    /// waved through).
    pub fn diff_findings(&self, diff: &Diff, tests_rule: Option<u32>) -> Vec<Finding> {
        let mut out = Vec::new();
        for path in &diff.excluded {
            if let Some(why) = self.protected(path) {
                out.push(Finding {
                    reason: Reason::ProtectedPath,
                    path: path.clone(),
                    line: None,
                    rule: tests_rule.filter(|_| why == TEST_AT_BASE),
                    check: None,
                    problem: format!("`{path}` was created, but it is protected ({why})"),
                    fix: format!("remove `{path}`; fix the code under test instead"),
                });
            }
        }
        for change in diff.changes.iter().filter(|c| c.submodule) {
            if self.policy.allow_submodules {
                break;
            }
            let path = &change.path;
            out.push(Finding {
                reason: Reason::ProtectedPath,
                path: path.clone(),
                line: None,
                rule: tests_rule,
                check: None,
                problem: format!("`{path}` is a submodule, and the change moved its commit or changed files inside it; a submodule is protected (its tests and code are not this repository's to change)"),
                fix: format!("undo every change inside `{path}` and leave its commit as it is at BASE_REF; fix the code under test in this repository (or set `[protect] allow_submodules = true`)"),
            });
        }
        for change in diff.changes.iter().filter(|c| !c.submodule) {
            for path in std::iter::once(&change.path).chain(change.old_path.iter()) {
                if let Some(why) = self.protected(path) {
                    // Judged statement by statement instead (the caller
                    // adds [`super::append_only::findings`]).
                    if self.policy.append_only
                        && why == TEST_AT_BASE
                        && change.status == ChangeKind::Modified
                    {
                        break;
                    }
                    let what = match change.status {
                        ChangeKind::Added => "was created".to_owned(),
                        ChangeKind::Modified => "was modified".to_owned(),
                        ChangeKind::Deleted => "was deleted".to_owned(),
                        ChangeKind::Renamed => format!(
                            "was renamed from `{}` to `{}`",
                            change.old_path.as_deref().unwrap_or("?"),
                            change.path
                        ),
                        ChangeKind::TypeChanged => {
                            "was replaced by a different kind of file (a symlink?)".to_owned()
                        }
                        ChangeKind::ModeChanged => "had its mode changed".to_owned(),
                    };
                    let test = why == TEST_AT_BASE;
                    out.push(Finding {
                        reason: Reason::ProtectedPath,
                        path: path.clone(),
                        line: diff
                            .added
                            .iter()
                            .find(|a| &a.path == path)
                            .map(|a| a.line),
                        rule: tests_rule.filter(|_| test),
                        check: None,
                        problem: format!("`{path}` {what}, but it is protected ({why})"),
                        fix: format!("restore `{path}` exactly as it is at BASE_REF and fix the code under test instead"),
                    });
                    break;
                }
            }
        }
        for added in &diff.added {
            if let Some(m) = self.skip_marker(&added.text) {
                out.push(Finding {
                    reason: Reason::SkipMarker,
                    path: added.path.clone(),
                    line: Some(added.line),
                    rule: tests_rule,
                    check: None,
                    problem: format!("a skip marker was added: `{m}`"),
                    fix: "remove it; make the tests pass by fixing the code under test".into(),
                });
            }
        }
        out
    }
}

/// Starting an agent CLI (`claude`, `codex`, … — every registered agent's
/// program and npm package) or `loopd` from the agent's shell (directly or
/// through a package runner): a nested session would be metered and capped
/// by the job's gateway anyway; this is defence in depth, and a clear word
/// to the agent. `loopd escalate` is the agent's approved exit, not a
/// session.
fn model_client(program: &str, args: &[String]) -> Option<String> {
    let first_operand = args.iter().find(|a| !a.starts_with('-'));
    if program.rsplit('/').next() == Some("loopd") && first_operand.is_some_and(|a| a == "escalate")
    {
        return None;
    }
    let program = match program {
        "npx" | "bunx" | "pnpx" => first_operand.map_or(program, |a| a.as_str()),
        _ => program,
    };
    // `@scope/name@version` names a package; anything else is a path.
    let name = match program.strip_prefix('@') {
        Some(scoped) => {
            let (scope, rest) = scoped.split_once('/').unwrap_or((scoped, ""));
            let rest = rest.split('@').next().unwrap_or(rest);
            format!("@{scope}/{rest}")
        }
        None => {
            let base = program.rsplit('/').next().unwrap_or(program);
            base.split('@').next().unwrap_or(base).to_owned()
        }
    };
    let clients = crate::agent::client_programs();
    (name == "loopd" || clients.contains(&name.as_str())).then(|| {
        format!("loopd: starting `{name}` from the agent's shell is not allowed: do the work in this session, with the tools you have.")
    })
}

/// A program that installs git hooks (`pre-commit install`, `husky`, …),
/// directly or through a package runner (`npx husky`).
fn hook_installer(program: &str, args: &[String]) -> Option<String> {
    let (program, args) = match program {
        "npx" | "bunx" | "pnpx" => match args.iter().position(|a| !a.starts_with('-')) {
            Some(i) => (args[i].as_str(), &args[i + 1..]),
            None => return None,
        },
        "pnpm" | "yarn" | "bun" | "npm"
            if args
                .first()
                .is_some_and(|a| a == "exec" || a == "dlx" || a == "x") =>
        {
            match args.get(1) {
                Some(p) => (p.as_str(), &args[2..]),
                None => return None,
            }
        }
        _ => (program, args),
    };
    let program = program.split('@').next().unwrap_or(program);
    HOOK_INSTALLERS
        .iter()
        .find(|(p, arg)| *p == program && arg.is_none_or(|a| args.iter().any(|x| x == a)))
        .map(|_| format!("loopd: `{program}` installs git hooks into the repository's git directory, which is loopd's during a job. Leave the hooks as they are and fix the code under test."))
}

/// The form of `git <sub> <rest>` that writes config, remotes or refs, if
/// this is one; read-only forms are `None`.
fn git_dir_write(sub: &str, rest: &[&String]) -> Option<String> {
    let has = |flags: &[&str]| rest.iter().any(|a| flags.contains(&a.as_str()));
    let operands: Vec<&str> = rest
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(|a| a.as_str())
        .collect();
    let writes = match sub {
        "config" => {
            !has(&[
                "--get",
                "--get-all",
                "--get-regexp",
                "--get-urlmatch",
                "--get-color",
                "--get-colorbool",
                "-l",
                "--list",
            ]) && !matches!(operands.first(), Some(&"get") | Some(&"list"))
        }
        "remote" => !matches!(operands.first(), None | Some(&"show") | Some(&"get-url")),
        "symbolic-ref" => has(&["-d", "--delete"]) || operands.len() > 1,
        "branch" => {
            has(&[
                "-d",
                "-D",
                "--delete",
                "-m",
                "-M",
                "--move",
                "-c",
                "-C",
                "--copy",
                "-f",
                "--force",
                "-u",
                "--set-upstream-to",
                "--unset-upstream",
                "--edit-description",
            ]) || (!operands.is_empty()
                && !has(&[
                    "-l",
                    "--list",
                    "--contains",
                    "--merged",
                    "--no-merged",
                    "--points-at",
                ]))
        }
        "tag" => {
            has(&[
                "-d",
                "--delete",
                "-a",
                "--annotate",
                "-s",
                "--sign",
                "-f",
                "--force",
                "-m",
                "-F",
            ]) || (!operands.is_empty()
                && !has(&[
                    "-l",
                    "--list",
                    "--contains",
                    "--merged",
                    "--no-merged",
                    "--points-at",
                ]))
        }
        _ => false,
    };
    writes.then(|| format!("git {sub}"))
}

fn deny_path(path: &str, why: &str) -> String {
    format!(
        "loopd: `{path}` is protected ({why}); it cannot be changed, moved, deleted or chmod-ed during this job. Fix the code under test instead — adding a new test file is allowed."
    )
}

/// Changes to the pinned `.git/` files as gate findings (`stage`: when they
/// happened, for the agent to read).
pub fn git_dir_findings(
    changes: &[crate::workspace::gitdir::Changed],
    stage: &str,
) -> Vec<Finding> {
    changes
        .iter()
        .map(|c| {
            let path = format!(".git/{}", c.path);
            Finding {
                reason: Reason::ProtectedPath,
                problem: format!("`{path}` {} {stage}, but it is protected ({GIT_DIR_WHY})", c.drift.as_str()),
                path,
                line: None,
                rule: None,
                check: None,
                fix: "leave `.git/` alone — no `git config`, `git remote`, hook installs or writes under `.git/`, also not from code the tests run; loopd has put it back".into(),
            }
        })
        .collect()
}

/// Hash of a file's bytes (for the judge-integrity guard).
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    Ok(hex::encode(Sha256::digest(std::fs::read(path)?)))
}

/// A small, conservative shell parser: enough to find the programs a
/// command line runs, their arguments and its redirection targets. It errs
/// toward splitting more (every separator starts a new command).
pub mod shell {
    /// One simple command.
    #[derive(Debug, Default, PartialEq, Eq)]
    pub struct Simple {
        pub words: Vec<String>,
        pub redirects: Vec<String>,
    }

    /// Wrappers that run the next word as the program.
    const WRAPPERS: &[&str] = &[
        "sudo", "env", "command", "exec", "nohup", "time", "nice", "xargs", "timeout", "builtin",
    ];

    impl Simple {
        /// The program (basename, wrappers and `VAR=x` skipped) and its arguments.
        pub fn program(&self) -> Option<(&str, &[String])> {
            let mut i = 0;
            while i < self.words.len() {
                let w = &self.words[i];
                if is_assignment(w) {
                    i += 1;
                    continue;
                }
                let base = w.rsplit('/').next().unwrap_or(w);
                if WRAPPERS.contains(&base) {
                    i += 1;
                    while let Some(next) = self.words.get(i) {
                        if base == "sudo" && matches!(next.as_str(), "-u" | "-g" | "-C" | "-D") {
                            i += 2;
                        } else if next.starts_with('-')
                            || is_assignment(next)
                            || (base == "timeout" && next.starts_with(|c: char| c.is_ascii_digit()))
                        {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    continue;
                }
                return Some((base, &self.words[i + 1..]));
            }
            None
        }
    }

    /// `NAME=value`, as in `FOO=1 cmd`.
    fn is_assignment(w: &str) -> bool {
        match w.split_once('=') {
            Some((name, _)) => {
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            }
            None => false,
        }
    }

    /// Split a command line into simple commands.
    pub fn parse(line: &str) -> Vec<Simple> {
        let mut cmds = vec![Simple::default()];
        let mut word = String::new();
        let mut in_word = false;
        let mut redirect_next = false;
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        let end_word = |cmds: &mut Vec<Simple>,
                        word: &mut String,
                        in_word: &mut bool,
                        redirect_next: &mut bool| {
            if *in_word {
                let w = std::mem::take(word);
                let cmd = cmds.last_mut().expect("at least one command");
                if *redirect_next {
                    cmd.redirects.push(w);
                    *redirect_next = false;
                } else {
                    cmd.words.push(w);
                }
                *in_word = false;
            }
        };
        while i < chars.len() {
            let c = chars[i];
            match c {
                '\'' => {
                    in_word = true;
                    i += 1;
                    while i < chars.len() && chars[i] != '\'' {
                        word.push(chars[i]);
                        i += 1;
                    }
                }
                '"' => {
                    in_word = true;
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        if chars[i] == '\\' && i + 1 < chars.len() {
                            i += 1;
                        }
                        word.push(chars[i]);
                        i += 1;
                    }
                }
                '\\' if i + 1 < chars.len() => {
                    in_word = true;
                    word.push(chars[i + 1]);
                    i += 1;
                }
                ' ' | '\t' => end_word(&mut cmds, &mut word, &mut in_word, &mut redirect_next),
                ';' | '&' | '|' | '\n' | '(' | ')' | '`' | '{' | '}' => {
                    end_word(&mut cmds, &mut word, &mut in_word, &mut redirect_next);
                    if c == '&' && chars.get(i + 1) == Some(&'>') {
                        // `&>file`: a redirect, not a separator.
                        redirect_next = true;
                        i += 1;
                        if chars.get(i + 1) == Some(&'>') {
                            i += 1;
                        }
                    } else if !cmds
                        .last()
                        .is_some_and(|c| c.words.is_empty() && c.redirects.is_empty())
                    {
                        cmds.push(Simple::default());
                    }
                }
                '$' if chars.get(i + 1) == Some(&'(') => {
                    end_word(&mut cmds, &mut word, &mut in_word, &mut redirect_next);
                    cmds.push(Simple::default());
                    i += 1;
                }
                '>' | '<' => {
                    // `2>`, `>>`, `>|`: the fd digits belong to the operator.
                    if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                        word.clear();
                        in_word = false;
                    } else {
                        end_word(&mut cmds, &mut word, &mut in_word, &mut redirect_next);
                    }
                    let output = c == '>';
                    while matches!(chars.get(i + 1), Some('>') | Some('|')) {
                        i += 1;
                    }
                    if chars.get(i + 1) == Some(&'&') {
                        // `2>&1`: a descriptor, not a file.
                        i += 2;
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                        continue;
                    }
                    if output {
                        redirect_next = true;
                    } else {
                        // Input redirection: the next word is read, not written.
                        redirect_next = false;
                        // Consume the file name as an ignored word.
                        while i + 1 < chars.len() && chars[i + 1] == ' ' {
                            i += 1;
                        }
                        while i + 1 < chars.len()
                            && !matches!(chars[i + 1], ' ' | ';' | '&' | '|' | '\n')
                        {
                            i += 1;
                        }
                    }
                }
                _ => {
                    in_word = true;
                    word.push(c);
                }
            }
            i += 1;
        }
        end_word(&mut cmds, &mut word, &mut in_word, &mut redirect_next);
        cmds.retain(|c| !c.words.is_empty() || !c.redirects.is_empty());
        cmds
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn splits_commands_words_and_redirects() {
            let c = parse(
                "cd x && sed -i 's/a b/c/' 'tests/t.py' > out.txt 2>&1; echo \"hi there\" >> log",
            );
            assert_eq!(c.len(), 3);
            assert_eq!(c[0].words, ["cd", "x"]);
            assert_eq!(c[1].words, ["sed", "-i", "s/a b/c/", "tests/t.py"]);
            assert_eq!(c[1].redirects, ["out.txt"]);
            assert_eq!(c[2].words, ["echo", "hi there"]);
            assert_eq!(c[2].redirects, ["log"]);
            let c = parse("FOO=1 sudo -u x rm -rf tests | cat");
            assert_eq!(c[0].program().map(|(p, a)| (p, a.len())), Some(("rm", 2)));
            let c = parse("echo $(rm x)");
            assert!(c.iter().any(|s| s.program().map(|p| p.0) == Some("rm")));
            let c = parse("cat < in.txt > out.txt");
            assert_eq!(c[0].redirects, ["out.txt"]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn policy() -> Policy {
        let mut files = BTreeMap::new();
        files.insert(
            "tests/test_rechnung.py".to_owned(),
            "a test that exists at BASE_REF".to_owned(),
        );
        files.insert(
            "loopd.toml".to_owned(),
            "the job's configuration".to_owned(),
        );
        let mut outside = BTreeMap::new();
        outside.insert(
            PathBuf::from("/etc/loopd/rubric.toml"),
            "the rubric".to_owned(),
        );
        Policy {
            repo: PathBuf::from("/repo"),
            base_ref: "0".repeat(40),
            files,
            patterns: vec![
                ("**/pytest.ini".into(), "test-runner configuration".into()),
                ("Makefile".into(), "protected in loopd.toml".into()),
            ],
            outside,
            skip_markers: SKIP_MARKERS.iter().map(|s| s.to_string()).collect(),
            git_dirs: vec![PathBuf::from("/repo/.git")],
            allow_submodules: false,
            append_only: false,
            allow: vec![],
        }
    }

    /// A Claude Code tool call, canonical.
    fn call(name: &str, input: Value) -> ToolCall {
        crate::agent::claude::tool_call("t".into(), name.into(), input)
    }

    #[test]
    fn codex_calls_are_judged_by_the_same_policy() {
        use crate::agent::Agent;
        let pol = policy();
        let p = pol.compile().expect("compile");
        let codex = |name: &str, input: Value| {
            crate::agent::codex::Codex.tool_call("c".into(), name.into(), input)
        };
        let patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: rechnung.py\n@@\n-a\n+b\n*** Update File: tests/test_rechnung.py\n@@\n-x\n+y\n*** End Patch\nEOF";
        let cwd = Path::new("/repo");
        assert!(p
            .check_tool(&codex("Bash", json!({ "command": patch })), cwd)
            .is_some());
        assert!(p
            .check_tool(
                &codex(
                    "Bash",
                    json!({ "command": "sed -i s/a/b/ tests/test_rechnung.py" })
                ),
                cwd
            )
            .is_some());
        assert!(p
            .check_tool(
                &codex("Bash", json!({ "command": "python -m pytest -q" })),
                cwd
            )
            .is_none());
        let honest = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: rechnung.py\n@@\n-a\n+b\n*** End Patch\nEOF";
        assert!(p
            .check_tool(&codex("Bash", json!({ "command": honest })), cwd)
            .is_none());
    }

    fn bash(p: &Compiled, cmd: &str) -> Option<String> {
        p.check_tool(&call("Bash", json!({ "command": cmd })), Path::new("/repo"))
    }

    /// A repository with `tests/test_rechnung.py`, a link `tdir` to
    /// `tests/` and a link `alias.py` to the test file, and its policy.
    fn linked_repo() -> (tempfile::TempDir, std::path::PathBuf, Policy) {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("tests")).expect("tests");
        std::fs::write(root.join("tests/test_rechnung.py"), "def test(): pass\n").expect("test");
        std::os::unix::fs::symlink("tests", root.join("tdir")).expect("symlink");
        std::os::unix::fs::symlink("tests/test_rechnung.py", root.join("alias.py"))
            .expect("symlink");
        let mut pol = policy();
        pol.repo = root.clone();
        pol.git_dirs = vec![root.join(".git")];
        (tmp, root, pol)
    }

    #[test]
    fn writes_through_a_symlink_or_proc_self_cwd_are_denied() {
        let (_tmp, root, pol) = linked_repo();
        let p = pol.compile().expect("compile");
        let write = |path: &str| p.check_tool(&call("Write", json!({ "file_path": path })), &root);
        let shell = |cmd: &str| p.check_tool(&call("Bash", json!({ "command": cmd })), &root);
        for path in [
            "tdir/test_rechnung.py".to_owned(),
            root.join("tdir/test_rechnung.py").display().to_string(),
            "alias.py".to_owned(),
            "/proc/self/cwd/tests/test_rechnung.py".to_owned(),
            "/proc/self/cwd/tdir/test_rechnung.py".to_owned(),
            format!(
                "/proc/self/root{}",
                root.join("tdir/test_rechnung.py").display()
            ),
        ] {
            let denied = write(&path).unwrap_or_else(|| panic!("{path} is allowed"));
            assert!(denied.contains("tests/test_rechnung.py"), "{denied}");
        }
        assert!(shell("echo 'def test(): pass' > tdir/test_rechnung.py").is_some());
        assert!(shell("sed -i s/pass/0/ /proc/self/cwd/tests/test_rechnung.py").is_some());
        // What the links do not lead into stays allowed.
        assert!(write("tdir_new/x.py").is_none());
        assert!(write("/proc/self/cwd/rechnung.py").is_none());
        assert!(shell("ln -s tests tdir2").is_none());
    }

    #[test]
    fn removing_ones_own_symlink_removes_the_link_not_what_it_points_to() {
        let (_tmp, root, pol) = linked_repo();
        let p = pol.compile().expect("compile");
        let shell = |cmd: &str| p.check_tool(&call("Bash", json!({ "command": cmd })), &root);
        for (cmd, denied) in [
            // The operand is the link itself: it goes, the tests stay.
            ("rm tdir", false),
            ("unlink tdir", false),
            ("rm -f tdir", false),
            ("rm -f -- alias.py", false),
            ("rm /proc/self/cwd/tdir", false),
            // Through the link, or with a `/` that makes the kernel follow
            // it, or recursively: the tests.
            ("rm tdir/test_rechnung.py", true),
            ("unlink tdir/test_rechnung.py", true),
            ("rm -rf tdir/", true),
            ("rm tdir/", true),
            ("rm -r tdir", true),
            ("unlink tests/test_rechnung.py", true),
            ("rm tests", true),
            // Not a removal: writes through the link.
            ("truncate -s 0 alias.py", true),
        ] {
            let got = shell(cmd);
            assert_eq!(got.is_some(), denied, "{cmd}: {got:?}");
        }
    }

    #[test]
    fn append_only_lets_the_editing_tools_write_a_test_and_nothing_else() {
        let mut pol = policy();
        pol.append_only = true;
        let p = pol.compile().expect("compile");
        let cwd = Path::new("/repo");
        let tool = |name: &str, input: serde_json::Value| p.check_tool(&call(name, input), cwd);
        let test = "/repo/tests/test_rechnung.py";
        assert!(tool("Edit", json!({ "file_path": test })).is_none());
        assert!(tool("Write", json!({ "file_path": test })).is_none());
        // The shell may not: its effect is not a file the gate compares.
        for cmd in [
            "rm tests/test_rechnung.py",
            "truncate -s 0 tests/test_rechnung.py",
            "echo x > tests/test_rechnung.py",
        ] {
            assert!(tool("Bash", json!({ "command": cmd })).is_some(), "{cmd}");
        }
        // Runner configuration stays protected.
        assert!(tool("Write", json!({"file_path": "/repo/pytest.ini"})).is_some());
    }

    #[test]
    fn file_tools_on_protected_paths_are_denied() {
        let pol = policy();
        let p = pol.compile().expect("compile");
        let cwd = Path::new("/repo");
        assert!(p
            .check_tool(
                &call("Edit", json!({"file_path": "/repo/tests/test_rechnung.py"})),
                cwd
            )
            .is_some());
        assert!(p
            .check_tool(
                &call(
                    "Write",
                    json!({"file_path": "/repo/tests/../tests/test_rechnung.py"})
                ),
                cwd
            )
            .is_some());
        assert!(
            p.check_tool(
                &call("Write", json!({"file_path": "/repo/sub/pytest.ini"})),
                cwd
            )
            .is_some(),
            "new runner config"
        );
        assert!(
            p.check_tool(
                &call("Write", json!({"file_path": "/repo/tests/test_new.py"})),
                cwd
            )
            .is_none(),
            "new test files are fine"
        );
        assert!(p
            .check_tool(
                &call("Edit", json!({"file_path": "/repo/rechnung.py"})),
                cwd
            )
            .is_none());
        assert!(p
            .check_tool(
                &call("Write", json!({"file_path": "/etc/loopd/rubric.toml"})),
                cwd
            )
            .is_some());
        assert!(p
            .check_tool(
                &call("Read", json!({"file_path": "/repo/tests/test_rechnung.py"})),
                cwd
            )
            .is_none());
    }

    #[test]
    fn shell_commands_that_touch_protected_paths_are_denied() {
        let pol = policy();
        let p = pol.compile().expect("compile");
        for cmd in [
            "rm tests/test_rechnung.py",
            "rm -rf tests",
            "mv tests/test_rechnung.py /tmp/x",
            "sed -i 's/7.50/5.50/' tests/test_rechnung.py",
            "sed -Ei 's/a/b/' tests/test_rechnung.py",
            "chmod 000 tests/test_rechnung.py",
            "ln -sf /dev/null tests/test_rechnung.py",
            "echo x > tests/test_rechnung.py",
            "printf 'test:\\n\\ttrue\\n' > Makefile",
            "cat /dev/null | tee tests/test_rechnung.py",
            "rm tests/*.py",
            "python3 -c \"open('tests/test_rechnung.py','w').write('')\"",
            "bash -c 'rm tests/test_rechnung.py'",
            "cd /repo && git checkout HEAD~1 -- tests/",
            "git stash push tests/",
            "git reset --hard",
            "git -C /repo clean -fd",
            "git commit --amend -m x",
            "git rm tests/test_rechnung.py",
            "echo x >> /etc/loopd/rubric.toml",
            "dd if=/dev/zero of=tests/test_rechnung.py",
        ] {
            assert!(bash(&p, cmd).is_some(), "not denied: {cmd}");
        }
        for cmd in [
            "python3 -m pytest -q tests/test_rechnung.py",
            "cat tests/test_rechnung.py",
            "grep -n total tests/test_rechnung.py",
            "sed -n 1,5p tests/test_rechnung.py",
            "ruff check . 2>&1",
            "git status && git diff",
            "git log --oneline",
            "cp tests/test_rechnung.py /tmp/copy.py",
            "echo ok > notes.txt",
        ] {
            assert!(bash(&p, cmd).is_none(), "denied but harmless: {cmd}");
        }
    }

    #[test]
    fn the_git_directory_and_git_commands_that_write_it_are_denied() {
        let pol = policy();
        let p = pol.compile().expect("compile");
        let cwd = Path::new("/repo");
        for path in [
            "/repo/.git/config",
            "/repo/.git/hooks/pre-push",
            ".git/info/exclude",
        ] {
            assert!(
                p.check_tool(&call("Write", json!({ "file_path": path })), cwd)
                    .is_some(),
                "not denied: Write {path}"
            );
        }
        assert!(p
            .check_tool(
                &call("Read", json!({"file_path": "/repo/.git/config"})),
                cwd
            )
            .is_none());
        for cmd in [
            "git remote set-url --push origin http://127.0.0.1:9/x",
            "git remote add evil http://127.0.0.1:9/x",
            "git config remote.origin.pushurl http://127.0.0.1:9/x",
            "git config --add url.http://127.0.0.1:9/.pushInsteadOf https://github.com/",
            "git -C /repo config core.hooksPath /tmp/hooks",
            "git config set core.fsmonitor true",
            "git update-ref refs/heads/main HEAD~1",
            "git symbolic-ref HEAD refs/heads/other",
            "git commit -qam wip",
            "git commit --amend -m x",
            "git branch -f main HEAD~1",
            "git branch evil",
            "git tag -f v1",
            "git init",
            "git worktree add /tmp/x",
            "echo '[remote \"x\"]' >> .git/config",
            "cp /tmp/hook .git/hooks/pre-commit",
            "chmod +x /repo/.git/hooks/pre-commit",
            "python3 -c \"open('.git/config','a').write('x')\"",
            "pre-commit install",
            "npx husky install",
            "npx --yes husky",
            "lefthook install",
        ] {
            assert!(bash(&p, cmd).is_some(), "not denied: {cmd}");
        }
        for cmd in [
            "git config --get remote.origin.url",
            "git config --list",
            "git config get user.name",
            "git remote -v",
            "git remote",
            "git remote get-url origin",
            "git symbolic-ref HEAD",
            "git branch",
            "git branch --show-current",
            "git branch --list 'loopd/*'",
            "git tag",
            "git tag -l",
            "git add rechnung.py",
            "git status --short",
            "cat .git/config",
            "pre-commit run --all-files",
        ] {
            assert!(bash(&p, cmd).is_none(), "denied but read-only: {cmd}");
        }
        // The diff gate's view: `.git` paths are protected too.
        assert!(p.protected(".git/config").is_some());
        assert!(p.protected(".github/workflows/ci.yml").is_none());

        // The standalone hook in your own sessions: history stays protected,
        // commits and `.git/` are yours.
        let mut own = policy();
        own.git_dirs.clear();
        let p = own.compile().expect("compile");
        for cmd in [
            "git commit -qam wip",
            "git remote add up https://example.com/x",
            "pre-commit install",
        ] {
            assert!(bash(&p, cmd).is_none(), "denied outside a job: {cmd}");
        }
        for cmd in ["git commit --amend -m x", "git reset --hard", "git stash"] {
            assert!(bash(&p, cmd).is_some(), "allowed outside a job: {cmd}");
        }
    }

    #[test]
    fn starting_an_agent_cli_or_loopd_from_the_shell_is_denied() {
        let pol = policy();
        let c = pol.compile().expect("compile");
        for cmd in [
            "claude -p hi",
            "/usr/local/bin/claude --print x",
            "cd /tmp && env FOO=1 claude -p x",
            "sh -c 'claude -p x'",
            "npx @anthropic-ai/claude-code -p x",
            "npx @anthropic-ai/claude-code@2.1.328 -p x",
            "npx claude-code -p x",
            "codex exec --json go",
            "/opt/bin/codex exec go",
            "npx -y @openai/codex exec go",
            "loopd run --task x",
            "timeout 5 loopd status",
        ] {
            assert!(
                bash(&c, cmd).is_some_and(|r| r.contains("not allowed")),
                "{cmd} was allowed"
            );
        }
        for cmd in [
            "echo claude",
            "grep -r claude .",
            "python3 -m pytest -q",
            "/opt/loopd/bin/loopd escalate --test t --reason 'the test contradicts the spec'",
        ] {
            assert_eq!(bash(&c, cmd), None, "{cmd} was denied");
        }
    }

    #[test]
    fn a_directory_holding_protected_files_is_protected() {
        let pol = policy();
        let p = pol.compile().expect("compile");
        assert!(p.protected("tests").is_some());
        assert!(p.protected("tests/").is_some());
        assert!(p.protected("test").is_none());
    }

    /// The test policy with a second test, a fixture and `allow` naming
    /// one test and the fixtures' glob.
    fn allowing() -> Policy {
        let mut pol = policy();
        for f in ["tests/test_client.py", "tests/fixtures/reply.json"] {
            pol.files.insert(f.to_owned(), TEST_AT_BASE.to_owned());
        }
        pol.allow = vec![
            "tests/test_client.py".into(),
            "tests/fixtures/*.json".into(),
        ];
        pol
    }

    fn change(path: &str, status: ChangeKind) -> crate::workspace::Change {
        crate::workspace::Change {
            path: path.into(),
            old_path: None,
            status,
            submodule: false,
        }
    }

    fn diff_of(changes: Vec<crate::workspace::Change>, added: &[(&str, &str)]) -> Diff {
        Diff {
            patch: None,
            patch_bytes: 0,
            changes,
            files: vec![],
            excluded: vec![],
            sha256: String::new(),
            added: added
                .iter()
                .map(|(path, text)| crate::workspace::AddedLine {
                    path: (*path).into(),
                    line: 3,
                    text: (*text).into(),
                })
                .collect(),
            added_complete: true,
            limits: crate::workspace::DiffLimits::for_bound(200 * 1024),
        }
    }

    #[test]
    fn allow_lifts_exactly_the_files_it_names_at_the_hook() {
        let pol = allowing();
        let p = pol.compile().expect("compile");
        let cwd = Path::new("/repo");
        let tool = |name: &str, input: Value| p.check_tool(&call(name, input), cwd);
        for allowed in [
            "/repo/tests/test_client.py",
            "/repo/tests/fixtures/reply.json",
            "/repo/tests/fixtures/new.json",
        ] {
            assert!(
                tool("Edit", json!({ "file_path": allowed })).is_none(),
                "{allowed}"
            );
        }
        assert!(tool(
            "Bash",
            json!({"command": "sed -i s/live/fake/ tests/test_client.py"})
        )
        .is_none());
        // The others stay protected, by any tool and through any spelling.
        for denied in [
            "/repo/tests/test_rechnung.py",
            "/repo/loopd.toml",
            "/repo/pytest.ini",
        ] {
            assert!(
                tool("Write", json!({ "file_path": denied })).is_some(),
                "{denied}"
            );
        }
        for cmd in [
            "rm -r tests",
            "rm tests/*.py",
            "python3 -c 'open(\"tests/test_rechnung.py\", \"w\")'",
            "echo x > .git/config",
        ] {
            assert!(tool("Bash", json!({ "command": cmd })).is_some(), "{cmd}");
        }
        // A directory whose protected files are all allowed is not protected.
        assert!(p.protected("tests/fixtures").is_none());
        assert!(p.protected("tests").is_some());
    }

    #[test]
    fn allow_never_lifts_the_judge_even_in_a_hand_made_policy() {
        let mut pol = allowing();
        pol.allow.push(".git/**".into());
        let p = pol.compile().expect("compile");
        assert!(!p.lifted(".git/config"));
        assert_eq!(p.protected(".git/config").as_deref(), Some(GIT_DIR_WHY));
    }

    #[test]
    fn the_diff_gate_lets_an_allowed_change_through_and_records_it() {
        let pol = allowing();
        let p = pol.compile().expect("compile");
        let diff = diff_of(
            vec![
                change("tests/test_client.py", ChangeKind::Modified),
                change("tests/fixtures/new.json", ChangeKind::Added),
                change("tests/fixtures/reply.json", ChangeKind::Deleted),
                change("tests/test_rechnung.py", ChangeKind::Modified),
                change("rechnung.py", ChangeKind::Modified),
            ],
            &[("tests/test_client.py", "client = Client(FakeTransport())")],
        );
        let findings = p.diff_findings(&diff, Some(1));
        let paths: Vec<&str> = findings.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["tests/test_rechnung.py"], "{findings:?}");
        // Recorded: every change an entry covers, a new fixture too.
        assert_eq!(
            p.lifted_changes(&diff),
            [
                "tests/fixtures/new.json",
                "tests/fixtures/reply.json",
                "tests/test_client.py"
            ]
        );
        // The lead allowed editing, not skipping.
        let diff = diff_of(
            vec![change("tests/test_client.py", ChangeKind::Modified)],
            &[("tests/test_client.py", "@pytest.mark.skip")],
        );
        let findings = p.diff_findings(&diff, Some(1));
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].reason, Reason::SkipMarker);
        assert_eq!(findings[0].path, "tests/test_client.py");
        // No exception, nothing recorded.
        assert!(policy()
            .compile()
            .expect("compile")
            .lifted_changes(&diff)
            .is_empty());
    }

    #[test]
    fn a_runners_file_is_lifted_only_by_an_entry_that_names_it() {
        let mut policy = policy();
        policy.allow = vec![
            "tests/fixtures/**".into(),
            "pyproject.toml".into(),
            "tests/conftest.py".into(),
        ];
        let p = policy.compile().expect("compiles");
        assert!(p.lifted("tests/fixtures/reply.json"));
        assert!(
            !p.lifted("tests/fixtures/conftest.py"),
            "a glob lifts no conftest"
        );
        assert!(
            !p.lifted("tests/fixtures/pytest.ini"),
            "a glob lifts no runner file"
        );
        assert!(
            !p.lifted("tests/fixtures/package.json"),
            "a glob lifts no shared file"
        );
        assert!(p.lifted("pyproject.toml"), "named exactly");
        assert!(p.lifted("tests/conftest.py"), "named exactly");
        assert_eq!(normal_entry("./tests//x.py/"), "tests/x.py");
        assert_eq!(normal_entry("tests/./x.py"), "tests/x.py");
    }

    #[test]
    fn check_allow_refuses_what_is_no_repository_path_or_reaches_the_judge() {
        let judge = [
            ("loopd.toml", "the job's configuration"),
            ("ci/rubric.toml", "the rubric"),
        ];
        for ok in [
            "tests/test_client.py",
            "tests/fixtures/*.json",
            "conftest.py",
            "pytest.ini",
            "**/*.py",
        ] {
            assert_eq!(check_allow(ok, &judge), Ok(()), "{ok}");
        }
        for (bad, want) in [
            ("", AllowRefusal::Empty),
            ("/abs/x.py", AllowRefusal::Absolute),
            ("../x", AllowRefusal::ParentDir),
            ("a/../../x", AllowRefusal::ParentDir),
        ] {
            assert_eq!(check_allow(bad, &judge), Err(want), "{bad}");
        }
        assert!(matches!(
            check_allow("a[", &judge),
            Err(AllowRefusal::Glob(_))
        ));
        for judged in [
            "loopd.toml",
            "*",
            "**",
            "*.toml",
            "ci/*",
            ".git",
            ".git/config",
            "**/.git/**",
            ".*/*",
            "sub/.git",
        ] {
            assert!(
                matches!(check_allow(judged, &judge), Err(AllowRefusal::Judge(_))),
                "{judged}"
            );
        }
    }

    #[test]
    fn findings_render_with_file_and_line() {
        let f = Finding {
            reason: Reason::SkipMarker,
            path: "tests/t.py".into(),
            line: Some(12),
            rule: None,
            check: None,
            problem: "a skip marker was added: `@pytest.mark.skip`".into(),
            fix: "remove it".into(),
        };
        assert_eq!(f.render(), "tests/t.py:12 (gate skip_marker): a skip marker was added: `@pytest.mark.skip` — fix: remove it");
        let f = Finding { rule: Some(1), ..f };
        assert_eq!(f.render(), "tests/t.py:12 (rule 1, gate skip_marker): a skip marker was added: `@pytest.mark.skip` — fix: remove it");
    }

    #[test]
    fn skip_markers_match_each_language() {
        let pol = policy();
        let p = pol.compile().expect("compile");
        let hit = |line: &str| p.markers.iter().any(|r| r.is_match(line));
        for l in [
            "@pytest.mark.skip(reason='x')",
            "    pytest.skip('later')",
            "collect_ignore = ['tests']",
            "@unittest.skip('x')",
            "self.skipTest('x')",
            "#[ ignore ]",
            &format!("#[{}]", "ignore"),
            "it.skip('x', () => {})",
            "xit('x', fn)",
            "describe.only('x', fn)",
            "t.Skip(\"flaky\")",
            "@Disabled",
            "@pytest.mark.xfail",
        ] {
            assert!(hit(l), "missed: {l}");
        }
        for l in [
            "sys.exit(1)",
            "def test_skip_list():",
            "ignore = True",
            "# it.skipped",
        ] {
            assert!(!hit(l), "false positive: {l}");
        }
    }
}
