//! The diff gate, on the change the agent session left: protected paths
//! and skip markers (the tamper policy), the runner's part of shared files
//! compared parsed, `[protect] tests = "append_only"`, the size bound, and
//! what a process of the job made unreadable.

use std::collections::BTreeSet;

use super::{Facts, Gate, Stage};
use crate::job::{JobError, Run};
use crate::journal;
use crate::judges::finding::Finding;
use crate::outcome::Reason;
use crate::workspace::{self, ChangedText, Diff};

/// See the module's doc.
pub(in crate::job) struct DiffGate;

impl Gate for DiffGate {
    fn id(&self) -> journal::Gate {
        journal::Gate::DIFF
    }

    fn stage(&self) -> Stage {
        Stage::Session
    }

    fn check(&self, run: &Run<'_>, facts: &Facts<'_>) -> Result<Vec<Finding>, JobError> {
        let mut findings = change_findings(run, facts.diff, facts.texts)?;
        findings.extend(crate::judges::size::findings(
            facts.diff,
            run.job.guard.max_diff_bytes(),
        ));
        findings.extend(embedded_repositories(run, facts.diff));
        findings.extend(facts.unlocked.iter().map(|(path, fixed)| Finding {
            reason: Reason::UnreadablePath,
            path: path.clone(),
            line: None,
            rule: None,
            check: None,
            problem: format!(
                "`{path}` was made unreadable to loopd by a process of this job{}",
                if *fixed {
                    "; loopd made it readable again"
                } else {
                    ", and loopd cannot read it"
                }
            ),
            fix: format!(
                "leave `{path}` readable: the judges must see everything the change holds"
            ),
        }));
        Ok(findings)
    }
}

/// The tamper gate's findings on a change: protected paths and skip
/// markers, the runner's part of shared files, `append_only`.
/// `texts`: the old and new text of the changed files (see
/// [`super::Facts::texts`]).
pub(super) fn change_findings(
    run: &Run<'_>,
    diff: &Diff,
    texts: &[ChangedText],
) -> Result<Vec<Finding>, JobError> {
    let mut findings = run
        .env
        .policy
        .compile()
        .map_err(JobError::Policy)?
        .diff_findings(diff, run.job.rubric.tests_rule());
    findings.extend(runner_findings(run, diff, texts));
    findings.extend(append_only_findings(run, diff, texts));
    findings.extend(inline_test_findings(run, diff, texts));
    findings.extend(assertion_findings(run, texts));
    Ok(findings)
}

/// Code the change adds that redefines the language's assertions
/// ([`crate::lang::Language::shadows_assertions`]): the tests in its scope
/// would assert nothing, whether or not their own text changed.
fn assertion_findings(run: &Run<'_>, texts: &[ChangedText]) -> Vec<Finding> {
    let rule = run.job.rubric.tests_rule();
    let mut out = Vec::new();
    for t in texts {
        let (Some(lang), Some(new)) = (crate::judges::tree::Lang::of(&t.path), t.new.as_deref())
        else {
            continue;
        };
        let Some(shadows) = &lang.shadows_assertions else {
            continue;
        };
        let before = t
            .old
            .as_deref()
            .map_or(0, |o| shadows.regex().find_iter(o).count());
        let found: Vec<_> = shadows.regex().find_iter(new).collect();
        if found.len() <= before {
            continue;
        }
        let m = found[before.min(found.len() - 1)];
        let line = new[..m.start()].matches('\n').count() as u32 + 1;
        out.push(Finding {
            reason: Reason::ProtectedPath,
            path: t.path.clone(),
            line: Some(line),
            rule,
            check: None,
            problem: format!("`{}` line {line} defines `{}`, which replaces the assertion the tests use: every assertion in its scope would check nothing", t.path, m.as_str()),
            fix: "remove the definition and fix the code under test".into(),
        });
    }
    out
}

/// Tests inside source files (Rust's `#[cfg(test)] mod tests`): each
/// changed source file that held some at BASE_REF, judged by
/// [`crate::judges::append_only::inline_findings`] in either `[protect]
/// tests` mode (a test file is judged as a whole above). A file
/// `[protect] allow` names is the lead's to change.
fn inline_test_findings(run: &Run<'_>, diff: &Diff, texts: &[ChangedText]) -> Vec<Finding> {
    let policy = run.env.policy.compile().ok();
    let rule = run.job.rubric.tests_rule();
    let added_module = |module: &str| module_in_change(diff, module, true);
    texts
        .iter()
        .filter(|t| !run.env.policy.files.contains_key(&t.path))
        .filter(|t| !policy.as_ref().is_some_and(|p| p.lifted(&t.path)))
        .filter_map(|t| Some((t, t.old.as_deref()?, t.new.as_deref()?)))
        .flat_map(|(t, old, new)| {
            crate::judges::append_only::inline_findings(&t.path, old, new, rule, &added_module)
        })
        .collect()
}

/// `[protect] tests = "append_only"`: each existing test file the change
/// modified, judged statement by statement (none without it: the diff
/// gate refuses the whole file).
fn append_only_findings(run: &Run<'_>, diff: &Diff, texts: &[ChangedText]) -> Vec<Finding> {
    if !run.env.policy.append_only {
        return Vec::new();
    }
    // A test `[protect] allow` names may change whole: the lead said
    // so. (A policy that does not compile lifts nothing.)
    let policy = run.env.policy.compile().ok();
    let tests = &run.env.policy.files;
    let modified: Vec<&str> = diff
        .changes
        .iter()
        .filter(|c| c.status == workspace::ChangeKind::Modified && !c.submodule)
        .filter(|c| {
            tests.get(&c.path).map(String::as_str) == Some(crate::judges::tamper::TEST_AT_BASE)
                && !policy.as_ref().is_some_and(|p| p.lifted(&c.path))
        })
        .map(|c| c.path.as_str())
        .collect();
    if modified.is_empty() {
        return Vec::new();
    }
    let files: Vec<&ChangedText> = texts
        .iter()
        .filter(|t| modified.contains(&t.path.as_str()))
        .collect();
    let rule = run.job.rubric.tests_rule();
    let added_module = |module: &str| module_in_change(diff, module, true);
    let mut out = Vec::new();
    for f in &files {
        match (&f.old, &f.new) {
            (Some(old), Some(new)) => out.extend(crate::judges::append_only::findings(
                &f.path,
                old,
                new,
                rule,
                &added_module,
            )),
            _ => out.push(Finding {
                reason: Reason::ProtectedPath,
                path: f.path.clone(),
                line: None,
                rule,
                check: None,
                problem: format!("`{}` is an existing test file that is no longer text loopd can read (or is too large to load)", f.path),
                fix: format!("restore `{}` as it is at BASE_REF and add new tests under new names", f.path),
            }),
        }
    }
    // A file the size bound kept out of `changed_texts` is not judged
    // as appended: it is refused.
    for p in &modified {
        if !files.iter().any(|f| f.path == *p) {
            out.push(Finding {
                reason: Reason::ProtectedPath,
                path: (*p).to_owned(),
                line: None,
                rule,
                check: None,
                problem: format!("`{p}` is an existing test file too large for loopd to compare statement by statement"),
                fix: format!("restore `{p}` as it is at BASE_REF"),
            });
        }
    }
    out
}

/// The runner's configuration inside shared files (`package.json`'s
/// scripts, `[tool.pytest]`, a conftest's hooks, ...), compared parsed.
fn runner_findings(run: &Run<'_>, diff: &Diff, texts: &[ChangedText]) -> Vec<Finding> {
    // A file `[protect] allow` names is the lead's exception here too (a
    // `conftest.py` the task says to change). A policy that does not
    // compile lifts nothing.
    let policy = run.env.policy.compile().ok();
    let files: Vec<ChangedText> = texts
        .iter()
        .filter(|t| {
            crate::judges::runner::wanted(&t.path)
                && !policy.as_ref().is_some_and(|c| c.lifted(&t.path))
        })
        .cloned()
        .collect();
    // The words of the Python tests at BASE_REF, read once, and only
    // when a new conftest defines something to look up.
    let base_words: std::cell::OnceCell<BTreeSet<String>> = std::cell::OnceCell::new();
    let used_at_base = |name: &str| {
        base_words
            .get_or_init(|| {
                let mut words = BTreeSet::new();
                for (path, why) in &run.env.policy.files {
                    if why.as_str() != crate::judges::tamper::TEST_AT_BASE || !path.ends_with(".py")
                    {
                        continue;
                    }
                    if let workspace::Content::Text { text } =
                        run.ws.base_content(run.base_oid, path)
                    {
                        words.extend(crate::judges::syntax::words(&text));
                    }
                }
                words
            })
            .contains(name)
    };
    let in_change = |module: &str| module_in_change(diff, module, false);
    crate::judges::runner::findings(
        &files,
        run.job.rubric.tests_rule(),
        &used_at_base,
        &in_change,
    )
}

/// Whether a module a statement imports — Python's `a.b.c`, or a
/// JavaScript specifier `./x/y.mjs` — is one the change touches (`added`:
/// one it adds): a changed path holds its top-level package as a
/// component, or its file is named like its last part. Errs towards yes.
fn module_in_change(diff: &Diff, module: &str, added: bool) -> bool {
    let parts: Vec<&str> = module
        .split(['.', '/'])
        .filter(|p| !p.is_empty() && !matches!(*p, "mjs" | "js" | "cjs" | "ts" | "py"))
        .collect();
    let (Some(top), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    diff.changes
        .iter()
        .filter(|c| !added || c.status == workspace::ChangeKind::Added)
        .any(|c| {
            let mut components = c.path.split('/');
            let file = c.path.rsplit('/').next().unwrap_or(&c.path);
            let stem = file.split('.').next().unwrap_or(file);
            stem == *last || components.any(|d| d == *top)
        })
}

/// A git repository the change holds (`git init` in the worktree, past the
/// hook): git lists it as one directory, and what is in it is neither
/// judged nor committed — refused, not an internal error.
fn embedded_repositories(run: &Run<'_>, diff: &Diff) -> Vec<Finding> {
    diff.changes
        .iter()
        .filter(|c| !c.submodule && c.status != workspace::ChangeKind::Deleted)
        .filter(|c| c.path.ends_with('/') || run.ws.root().join(&c.path).join(".git").exists())
        .map(|c| Finding {
            reason: Reason::ProtectedPath,
            path: c.path.clone(),
            line: None,
            rule: None,
            check: None,
            problem: format!(
                "`{}` is a git repository inside the change: its files are neither judged nor committed",
                c.path
            ),
            fix: format!(
                "remove `{}` (or its `.git`); keep the work as plain files of this repository",
                c.path.trim_end_matches('/')
            ),
        })
        .collect()
}
