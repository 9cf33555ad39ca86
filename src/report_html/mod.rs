//! `report.html`: the account of one job as a single self-contained page, for
//! a human who was not there — what the outcome was and why, how to get the
//! work back, each attempt's timeline (agent, gates, goal steps, critic),
//! what it cost against the budget, its tokens, its diff and interdiff, and
//! every verdict and finding with file:line.
//!
//! Built from the run directory alone, so `loopd report --html`, the daemon
//! and a CI step all render the same page: `summary.json` (the outcome; the
//! one file that must be there), the journal (`ledger.jsonl`: the timeline
//! and the findings), `failure.json` (the restore command), `job.json` (the
//! budget), the attempts' `diff.patch` and `interdiff.patch`, and their
//! stream logs (cache reads and writes, which only the CLI's result event
//! reports). Any of these but the summary may be missing; the page then says
//! what it does not know.
//! Every file is read without following a link and with a size bound, since
//! `loopd report --html FILE --batch DIR` ([`batch`]) renders run
//! directories that may come from anywhere (CI artifacts, a shared volume).
//!
//! The page is one file that works offline and without JavaScript: inline
//! CSS and SVG, no script, no external font or image. Everything in it that
//! comes from the job — the task, diffs, findings, verdicts, all of it text
//! the agent may have written to attack whoever reads it — is HTML-escaped.
//! Elements carry stable ids and classes (`id="attempt-2"`,
//! `class="cost-bar"`) that tests and scripts may rely on.

pub mod batch;
mod render;
mod timeline;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::goal::GoalReport;
use crate::journal::Replay;
use crate::record::{FailureReport, Summary};

pub use render::{escape, render};
pub use timeline::{AttemptTimeline, Phase, PhaseKind};

/// The page's file name in a run directory (next to `summary.json`).
pub const FILE: &str = "report.html";

/// The comment on the page's second line. A file that starts with the
/// doctype and this is one loopd wrote, and `loopd report --html` may
/// replace it; any other file it refuses to overwrite.
pub const MARKER: &str = "<!-- loopd report";

/// The most of one patch the page shows (head and tail kept).
const MAX_PATCH: usize = 256 * 1024;

/// The largest journal, patch, and summary-sized file the page reads from
/// a run directory: a run dir may be a downloaded artifact (`--batch`), and
/// a file past these is treated as missing rather than read into memory.
const MAX_JOURNAL_FILE: u64 = 256 << 20;
const MAX_PATCH_FILE: u64 = 64 << 20;
const MAX_RECORD_FILE: u64 = 16 << 20;

/// A run directory's file as text, or `None`: read through
/// [`crate::util::read_untrusted`] — never through a link, never from a
/// FIFO, at most `max` bytes — because a run dir handed to `--batch` may
/// come from anywhere, and a planted link must not pull another file of
/// this user's into the page. A BOM is tolerated.
fn read_run_file(path: &Path, max: u64) -> std::io::Result<String> {
    let bytes = crate::util::read_untrusted(path, max)?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(text.strip_prefix('\u{feff}').unwrap_or(&text).to_owned())
}

/// The branch a daemon job's change lives on.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchInfo {
    pub branch: String,
    pub commit_accepted: Option<String>,
}

/// Cache tokens of one attempt's sessions, as the gateway metered them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheTokens {
    pub read: u64,
    pub write: u64,
}

/// Everything the page shows, read from a run directory.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub summary: Summary,
    pub failure: Option<FailureReport>,
    pub branch: Option<BranchInfo>,
    /// The job's USD budget (`job.json`), when known.
    pub budget_usd: Option<f64>,
    pub max_attempts: Option<u32>,
    pub baseline: Option<GoalReport>,
    pub timelines: BTreeMap<u32, AttemptTimeline>,
    /// By attempt; attempts whose stream logs say nothing are absent.
    pub cache: BTreeMap<u32, CacheTokens>,
    /// `attempt-<n>/diff.patch`, by attempt.
    pub diffs: BTreeMap<u32, String>,
    /// `attempt-<n>/interdiff.patch`, by attempt.
    pub interdiffs: BTreeMap<u32, String>,
    /// `loopd ci`'s pull request: (number, url).
    pub pull_request: Option<(u64, String)>,
    /// Where `loopd ci` pushed: (branch, commit).
    pub pushed: Option<(String, String)>,
}

impl Inputs {
    /// Read what the page shows from `run_dir`, around a summary already
    /// read. Missing or unreadable files are tolerated: they are absent.
    pub fn load(
        run_dir: &Path,
        summary: Summary,
        failure: Option<FailureReport>,
        branch: Option<BranchInfo>,
    ) -> Inputs {
        let text = read_run_file(&run_dir.join(crate::journal::FILE), MAX_JOURNAL_FILE)
            .unwrap_or_default();
        let (entries, _) = crate::journal::parse(&text);
        let replay = Replay::fold(&entries);
        let job = crate::record::JobFile::read(run_dir);
        let mut diffs = BTreeMap::new();
        let mut interdiffs = BTreeMap::new();
        let cache = cache_tokens(&entries);
        for a in &summary.attempts {
            let dir = run_dir.join(format!("attempt-{}", a.n));
            if let Some(d) = read_patch(&dir.join("diff.patch")) {
                diffs.insert(a.n, d);
            }
            if let Some(d) = read_patch(&dir.join("interdiff.patch")) {
                interdiffs.insert(a.n, d);
            }
        }
        Inputs {
            failure,
            branch,
            budget_usd: job.as_ref().and_then(|j| j.caps).map(|c| c.budget_usd),
            max_attempts: job.as_ref().and_then(|j| j.max_attempts),
            baseline: replay.baseline.clone(),
            timelines: timeline::build(&entries),
            cache,
            diffs,
            interdiffs,
            pull_request: replay.pull_request.clone(),
            pushed: replay.pushed.clone(),
            summary,
        }
    }
}

fn read_patch(path: &Path) -> Option<String> {
    let text = read_run_file(path, MAX_PATCH_FILE).ok()?;
    Some(crate::goal::head_and_tail(&text, MAX_PATCH))
}

/// The cache tokens of each attempt's metered calls (agent and critic
/// together), from the journal: what the gateway read on the wire, for
/// every agent CLI alike. An attempt without metered calls is absent.
fn cache_tokens(entries: &[crate::journal::Entry]) -> BTreeMap<u32, CacheTokens> {
    let mut out = BTreeMap::<u32, CacheTokens>::new();
    for e in entries {
        if let crate::journal::Event::MeteredCall(c) = &e.event {
            let t = out.entry(c.attempt).or_default();
            t.read += c.cache_read_input_tokens;
            t.write += c.cache_creation_input_tokens;
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    #[error("no summary to report in `{}`: {source}", path.display())]
    Summary {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the summary `{}` does not parse: {source}", path.display())]
    SummaryParse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write the HTML report `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Read `summary.json` and `failure.json` from a run directory.
pub fn read_run(run_dir: &Path) -> Result<(Summary, Option<FailureReport>), HtmlError> {
    let path = run_dir.join("summary.json");
    let text = read_run_file(&path, MAX_RECORD_FILE).map_err(|source| HtmlError::Summary {
        path: path.clone(),
        source,
    })?;
    let summary =
        serde_json::from_str(&text).map_err(|source| HtmlError::SummaryParse { path, source })?;
    let failure = read_run_file(&run_dir.join("failure.json"), MAX_RECORD_FILE)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Ok((summary, failure))
}

/// Render the job in `run_dir` and write it next to its `summary.json`
/// (the daemon, when a job ends). Returns the page's path.
pub fn write_next_to_summary(
    run_dir: &Path,
    branch: Option<BranchInfo>,
) -> Result<PathBuf, HtmlError> {
    let (summary, failure) = read_run(run_dir)?;
    let html = render(&Inputs::load(run_dir, summary, failure, branch));
    let path = run_dir.join(FILE);
    crate::util::write_atomic(&path, html.as_bytes()).map_err(|source| HtmlError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Did loopd write the file at `path` (so it may be replaced)?
pub fn is_ours(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    String::from_utf8_lossy(&head[..n]).starts_with(&format!("<!DOCTYPE html>\n{MARKER}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_dir_with_only_a_summary_renders() {
        let dir = tempfile::tempdir().expect("tempdir");
        let summary = render::tests::summary(&[0.01, 0.02]);
        crate::util::write_json_atomic(&dir.path().join("summary.json"), &summary).expect("write");
        let path = write_next_to_summary(dir.path(), None).expect("rendered");
        assert_eq!(path, dir.path().join(FILE));
        assert!(is_ours(&path));
        let html = std::fs::read_to_string(&path).expect("read");
        assert!(html.contains(r#"id="attempt-1""#) && html.contains(r#"id="attempt-2""#));
        assert!(html.contains("budget unknown"), "no job.json: no budget");
        assert!(html.contains("no journal"), "no journal: no timeline");
    }

    #[test]
    fn a_missing_summary_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = write_next_to_summary(dir.path(), None).expect_err("no summary");
        assert!(e.to_string().contains("summary.json"), "{e}");
        assert!(!dir.path().join(FILE).exists());
    }

    #[test]
    fn budget_and_cache_tokens_are_read_from_the_run_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("job.json"),
            r#"{"caps": {"budget_usd": 0.5, "max_turns": 9, "max_tokens": 1000}, "max_attempts": 3, "task": "t"}"#,
        )
        .expect("write");
        let a1 = dir.path().join("attempt-1");
        std::fs::create_dir_all(&a1).expect("mkdir");
        let call = |role, session, write, read| {
            crate::journal::Event::MeteredCall(crate::agent::gateway::MeteredCall {
                attempt: 1,
                role,
                session,
                model: "m".into(),
                message_id: "id".into(),
                status: 200,
                input_tokens: 10,
                output_tokens: 4,
                cache_creation_input_tokens: write,
                cache_read_input_tokens: read,
                cost_usd: 0.01,
                latency_ms: 1,
                wall_ms: 1,
                settled: Default::default(),
                clamped_max_tokens: None,
            })
        };
        use crate::agent::Role;
        let mut j = crate::journal::Journal::open(dir.path()).expect("journal");
        j.append(call(Role::Agent, 0, 500, 1000)).expect("append");
        j.append(call(Role::Agent, 0, 200, 200)).expect("append");
        j.append(call(Role::Critic, 1, 0, 30)).expect("append");
        drop(j);
        std::fs::write(a1.join("diff.patch"), "+x\n").expect("write");
        let inputs = Inputs::load(
            dir.path(),
            render::tests::summary(&[0.01, 0.02]),
            None,
            None,
        );
        assert_eq!(inputs.budget_usd, Some(0.5));
        assert_eq!(inputs.max_attempts, Some(3));
        assert_eq!(
            inputs.cache.get(&1),
            Some(&CacheTokens {
                read: 1230,
                write: 700
            })
        );
        assert_eq!(inputs.cache.get(&2), None, "attempt 2 left no stream log");
        assert_eq!(inputs.diffs.get(&1).map(String::as_str), Some("+x\n"));
        assert!(inputs.interdiffs.is_empty());
    }

    #[test]
    fn a_linked_or_special_file_in_the_run_dir_is_not_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret.txt");
        std::fs::write(&secret, "+SECRET KEY\n").expect("write");
        let a1 = dir.path().join("attempt-1");
        std::fs::create_dir_all(&a1).expect("mkdir");
        std::os::unix::fs::symlink(&secret, a1.join("diff.patch")).expect("link");
        let fifo = std::ffi::CString::new(a1.join("interdiff.patch").to_string_lossy().as_bytes())
            .expect("path");
        // SAFETY: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let inputs = Inputs::load(dir.path(), render::tests::summary(&[0.01]), None, None);
        assert!(inputs.diffs.is_empty(), "a link is not followed");
        assert!(
            inputs.interdiffs.is_empty(),
            "a FIFO is not read (nor waited on)"
        );
        assert!(!render(&inputs).contains("SECRET"));
    }

    #[test]
    fn only_a_page_loopd_wrote_is_ours() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mine = dir.path().join("mine.html");
        std::fs::write(
            &mine,
            render(&Inputs::load(
                dir.path(),
                render::tests::summary(&[]),
                None,
                None,
            )),
        )
        .expect("write");
        assert!(is_ours(&mine));
        let other = dir.path().join("other.html");
        std::fs::write(&other, "<!DOCTYPE html>\n<html>notes</html>").expect("write");
        assert!(!is_ours(&other));
        assert!(!is_ours(&dir.path().join("absent.html")));
    }
}
