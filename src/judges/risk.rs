//! The autofix gate's risk policy, computed in code: how much an automatic
//! fix may change, what it may never touch, and whether it may add
//! dependencies. An accepted fix that fails it is not pushed.

use serde::Serialize;

use crate::workspace::Diff;

/// `[ci]` in `loopd.toml`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RiskPolicy {
    /// The small default budget of a CI run.
    pub budget_usd: f64,
    pub max_attempts: u32,
    pub max_files: usize,
    /// Added plus removed lines.
    pub max_lines: usize,
    pub never_touch: Vec<String>,
    pub allow_new_dependencies: bool,
    /// Run on events from forks (with this repository's secrets).
    pub allow_forks: bool,
    /// `[ci] max_rounds`: the rounds loopd runs on one pull request before
    /// it lists what is open and waits for a maintainer.
    pub max_rounds: u32,
    /// `[ci] pr_budget_usd`: what all rounds on one pull request may
    /// spend together.
    pub pr_budget_usd: f64,
    /// `[ci] trusted`: the author associations whose comments and reviews
    /// start a round.
    pub trusted: Vec<String>,
    /// `[ci] follow_label`: a maintainer's label that makes loopd follow a
    /// pull request it did not open.
    pub follow_label: String,
}

/// GitHub's author associations (`author_association` of a comment).
pub const ASSOCIATIONS: &[&str] = &[
    "OWNER",
    "MEMBER",
    "COLLABORATOR",
    "CONTRIBUTOR",
    "FIRST_TIME_CONTRIBUTOR",
    "FIRST_TIMER",
    "MANNEQUIN",
    "NONE",
];

pub const NEVER_TOUCH: &[&str] = &[
    ".github/**",
    ".gitlab-ci.yml",
    "**/Cargo.lock",
    "**/package-lock.json",
    "**/yarn.lock",
    "**/pnpm-lock.yaml",
    "**/poetry.lock",
    "**/uv.lock",
    "**/Pipfile.lock",
    "**/go.sum",
    "**/Gemfile.lock",
    "**/composer.lock",
];

/// Files that declare dependencies: an added line in one is a new dependency.
pub const MANIFESTS: &[&str] = &[
    "**/requirements*.txt",
    "**/pyproject.toml",
    "**/Pipfile",
    "**/setup.py",
    "**/setup.cfg",
    "**/package.json",
    "**/Cargo.toml",
    "**/go.mod",
    "**/Gemfile",
    "**/pom.xml",
    "**/build.gradle*",
];

impl Default for RiskPolicy {
    fn default() -> Self {
        RiskPolicy {
            budget_usd: 0.5,
            max_attempts: 3,
            max_files: 5,
            max_lines: 200,
            never_touch: NEVER_TOUCH.iter().map(|s| s.to_string()).collect(),
            allow_new_dependencies: false,
            allow_forks: false,
            max_rounds: 3,
            pr_budget_usd: 2.0,
            trusted: ["OWNER", "MEMBER", "COLLABORATOR"]
                .map(str::to_owned)
                .to_vec(),
            follow_label: "loopd".to_owned(),
        }
    }
}

fn set(globs: impl IntoIterator<Item = impl AsRef<str>>) -> globset::GlobSet {
    let mut b = globset::GlobSetBuilder::new();
    for g in globs {
        if let Ok(g) = globset::GlobBuilder::new(g.as_ref())
            .literal_separator(true)
            .build()
        {
            b.add(g);
        }
    }
    b.build().expect("validated globs build")
}

impl RiskPolicy {
    /// Why the change may not be pushed automatically, one reason per line;
    /// empty when it may.
    pub fn violations(&self, diff: &Diff) -> Vec<String> {
        let mut out = Vec::new();
        if diff.changes.len() > self.max_files {
            out.push(format!(
                "{} files changed; the policy allows at most {}",
                diff.changes.len(),
                self.max_files
            ));
        }
        let lines: u64 = diff.files.iter().map(|f| f.added + f.removed).sum();
        for f in diff.files.iter().filter(|f| f.too_large) {
            out.push(format!(
                "`{}` is too large to diff ({} bytes); the policy cannot count its lines",
                f.path, f.bytes
            ));
        }
        if lines > self.max_lines as u64 {
            out.push(format!(
                "{lines} lines changed; the policy allows at most {}",
                self.max_lines
            ));
        }
        let never = set(&self.never_touch);
        for c in &diff.changes {
            if never.is_match(&c.path) || c.old_path.as_ref().is_some_and(|p| never.is_match(p)) {
                out.push(format!(
                    "`{}` was changed; the policy says never to touch it",
                    c.path
                ));
            }
        }
        if !self.allow_new_dependencies {
            let manifests = set(MANIFESTS);
            let mut files: Vec<&str> = diff
                .added
                .iter()
                .filter(|a| manifests.is_match(&a.path) && !a.text.trim().is_empty())
                .map(|a| a.path.as_str())
                .collect();
            files.dedup();
            for f in files {
                out.push(format!(
                    "`{f}` gained lines: new dependencies are not allowed"
                ));
            }
        }
        out
    }
}
