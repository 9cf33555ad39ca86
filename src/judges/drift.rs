//! The drift gate: the goal test must leave the change as the agent left
//! it.
//!
//! Why: the goal test runs the agent's code, which the hook never sees (a
//! new `conftest.py`, a `build.rs`, a test that rewrites its own snapshot).
//! What the job commits is the tree after the goal test, and the critic and
//! the pre-critic judged the diff taken before it; a file the goal test
//! changed would be committed unjudged. Files the goal test creates that
//! were not there (untracked artefacts) are not the change and do not count.

use std::collections::BTreeMap;

use crate::outcome::Reason;
use crate::workspace::{Diff, FilePatch};

use super::finding::Finding;

/// What one file's section says about it, comparable across two diffs.
fn fingerprint<'d>(f: &FilePatch, diff: &'d Diff) -> (String, u64, u64, u64, u64, &'d str) {
    (
        format!("{:?}", f.status),
        f.diff_bytes,
        f.added,
        f.removed,
        f.bytes,
        diff.patch.as_deref().map_or("", |p| f.text(p)),
    )
}

/// A finding per file that the goal test added, removed or changed in the
/// change between `before` (taken after the agent's session) and `after`
/// (taken after the goal test).
pub fn findings(before: &Diff, after: &Diff) -> Vec<Finding> {
    if before.sha256 == after.sha256 {
        return Vec::new();
    }
    let seen: BTreeMap<&str, _> = before
        .files
        .iter()
        .map(|f| (f.path.as_str(), fingerprint(f, before)))
        .collect();
    let now: BTreeMap<&str, _> = after
        .files
        .iter()
        .map(|f| (f.path.as_str(), fingerprint(f, after)))
        .collect();
    let mut paths: Vec<&str> = seen.keys().chain(now.keys()).copied().collect();
    paths.sort_unstable();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| seen.get(p) != now.get(p))
        .map(|path| Finding {
            reason: Reason::GoalChangedTree,
            path: path.to_owned(),
            line: None,
            rule: None,
            check: None,
            problem: format!(
                "`{path}` changed while the goal test ran: what would be committed is not what the agent wrote and the judges saw"
            ),
            fix: "leave the tree as it is from code the tests run: write outputs to ignored or temporary files, never to the change or the tests".into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{ChangeKind, DiffLimits};

    /// A diff of `files` (path, section text), the patch their concatenation.
    fn diff(files: &[(&str, &str)]) -> Diff {
        let mut patch = String::new();
        let mut out = Vec::new();
        for (path, text) in files {
            out.push(FilePatch {
                path: (*path).into(),
                status: ChangeKind::Modified,
                start: patch.len(),
                len: text.len(),
                diff_bytes: text.len() as u64,
                added: 1,
                removed: 1,
                bytes: 100,
                too_large: false,
            });
            patch.push_str(text);
        }
        Diff {
            // Distinct texts, distinct ids: the patch itself will do.
            sha256: patch.clone(),
            patch_bytes: patch.len() as u64,
            patch: Some(patch),
            changes: vec![],
            files: out,
            excluded: vec![],
            added: vec![],
            added_complete: true,
            limits: DiffLimits::for_bound(200 * 1024),
        }
    }

    #[test]
    fn only_what_the_goal_test_changed_is_named() {
        let before = diff(&[("a.py", "-x\n+y\n"), ("b.py", "-1\n+2\n")]);
        assert!(findings(
            &before,
            &diff(&[("a.py", "-x\n+y\n"), ("b.py", "-1\n+2\n")])
        )
        .is_empty());
        // b.py rewritten, c.py new, a.py untouched.
        let after = diff(&[("a.py", "-x\n+y\n"), ("b.py", "-1\n+3\n"), ("c.py", "+z\n")]);
        let f = findings(&before, &after);
        let paths: Vec<&str> = f.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["b.py", "c.py"]);
        assert!(f.iter().all(|f| f.reason == Reason::GoalChangedTree));
        // A change the goal test undid is named too.
        let undone = diff(&[("a.py", "-x\n+y\n")]);
        assert_eq!(findings(&before, &undone)[0].path, "b.py");
    }
}
