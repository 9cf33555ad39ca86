//! The size gate: a change larger than the bound (`[guard] max_diff_kb`,
//! default 200 KiB of diff) is rejected before the critic, with a finding
//! that asks for a focused change.
//!
//! Why a gate and not a cut: the critic is shown every changed file whole
//! (see [`crate::critic`]); a change too large for that would otherwise be
//! judged from part of it, and padding a change with large files around a
//! small forbidden edit would hide the edit. Files too large to load count
//! whole, so a huge file cannot slip under the bound by not being diffed.

use crate::outcome::Reason;
use crate::workspace::Diff;

use super::finding::Finding;

/// `bytes` for people: `812 bytes`, `150.0 KiB`, `200.0 MiB`.
pub fn human(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} bytes")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

/// The size gate's finding, if the change is over `bound` bytes.
pub fn findings(diff: &Diff, bound: u64) -> Vec<Finding> {
    let size = diff.size();
    if size <= bound {
        return Vec::new();
    }
    let mut largest: Vec<(&str, u64)> = diff
        .files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                if f.too_large { f.bytes } else { f.diff_bytes },
            )
        })
        .collect();
    largest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let named: Vec<String> = largest
        .iter()
        .take(5)
        .map(|(p, b)| format!("`{p}` {}", human(*b)))
        .collect();
    let more = largest.len().saturating_sub(named.len());
    vec![Finding {
        reason: Reason::DiffTooLarge,
        path: largest.first().map_or("the change", |(p, _)| p).to_owned(),
        line: None,
        rule: None,
        check: None,
        problem: format!(
            "the change is {} of diff over {} files ({}{}), more than the {} the reviewer reads in full",
            human(size),
            diff.files.len(),
            named.join(", "),
            if more > 0 { format!(", and {more} more") } else { String::new() },
            human(bound)
        ),
        fix: "make a focused change: only what the task needs, no generated, copied or padding files".into(),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{ChangeKind, DiffLimits, FilePatch};

    fn file(path: &str, diff_bytes: u64, bytes: u64, too_large: bool) -> FilePatch {
        FilePatch {
            path: path.into(),
            status: ChangeKind::Added,
            start: 0,
            len: 0,
            diff_bytes,
            added: 1,
            removed: 0,
            bytes,
            too_large,
        }
    }

    fn diff(files: Vec<FilePatch>) -> Diff {
        Diff {
            patch: None,
            patch_bytes: files.iter().map(|f| f.diff_bytes).sum(),
            changes: vec![],
            files,
            excluded: vec![],
            sha256: String::new(),
            added: vec![],
            added_complete: true,
            limits: DiffLimits::for_bound(200 * 1024),
        }
    }

    #[test]
    fn a_change_over_the_bound_is_rejected_and_names_its_largest_files() {
        let bound = 200 * 1024;
        let small = diff(vec![file("a.py", 900, 2000, false)]);
        assert!(findings(&small, bound).is_empty());
        let padded = diff(vec![
            file("pad_a.txt", 150 * 1024, 150 * 1024, false),
            file("rechnung.py", 900, 2000, false),
            file("pad_b.txt", 150 * 1024, 150 * 1024, false),
        ]);
        let f = findings(&padded, bound);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].reason, Reason::DiffTooLarge);
        assert!(f[0].render().starts_with("pad_a.txt (gate diff_too_large): the change is 300.9 KiB of diff over 3 files (`pad_a.txt` 150.0 KiB, `pad_b.txt` 150.0 KiB, `rechnung.py` 900 bytes), more than the 200.0 KiB"), "{}", f[0].render());
        // A file too large to load counts whole, though its diff is a header.
        let huge = diff(vec![file("big.txt", 120, 200 * 1024 * 1024, true)]);
        assert!(findings(&huge, bound)[0]
            .problem
            .contains("`big.txt` 200.0 MiB"));
    }
}
