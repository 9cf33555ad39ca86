//! `loopd report --html FILE --batch DIR`: one page for the night. DIR holds
//! many jobs' run directories — downloaded CI artifacts, a volume several
//! daemons share — and the index lists them all: the jobs that need a human
//! first (an escalation, a commit awaiting approval), then those that were
//! stopped or failed, then the accepted ones, each with its outcome, its
//! repository, its task, what it cost and a link to its own page (the
//! single-job page of [`super::render`], written beside the index).
//!
//! The run directories are found by walking DIR ([`find_run_dirs`]), never
//! through a link, and their files are read with the page's bounded,
//! link-refusing reads: a batch of artifacts may come from anywhere. A job
//! that cannot be read is listed as `unreadable: <why>` rather than
//! failing the page, since one broken artifact must not hide the night.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::render::{escape, ms, outcome_badge, outcome_class, usd, CSS};
use super::{read_run, read_run_file, BranchInfo, HtmlError, Inputs, MARKER, MAX_RECORD_FILE};
use crate::outcome::{ExitStatus, Outcome, Reason, Status};
use crate::record::{FailureReport, Summary};

/// How deep below DIR a run directory is looked for: deep enough for an
/// artifact folder holding a state dir (`DIR/loopd-<id>/runs/<id>`, 3) with
/// one more level of grouping, shallow enough that pointing it at a home
/// directory does not walk the whole disk.
pub const MAX_DEPTH: usize = 4;

/// The most run directories one index lists; the walk stops there.
pub const MAX_JOBS: usize = 10_000;

/// The most of a task the index shows (the job's own page has all of it).
const MAX_TASK: usize = 140;

/// Why there is no index to render.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("cannot read the batch directory `{}`: {source}", dir.display())]
    Read {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` is not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error(
        "no loopd run directory in `{}` (none holds `summary.json` or `{}` within {MAX_DEPTH} levels)",
        dir.display(),
        crate::journal::FILE
    )]
    NoRunDir { dir: PathBuf },
}

impl BatchError {
    pub fn hint(&self) -> &'static str {
        match self {
            BatchError::Read { .. } | BatchError::NotADirectory { .. } => {
                "give the directory that holds the jobs, e.g. `--batch ./artifacts` or `--batch ~/.local/state/loopd`"
            }
            BatchError::NoRunDir { .. } => {
                "give a state dir (it holds `runs/`), a directory of run dirs (`<job-id>/summary.json`), or a directory of artifacts that hold either"
            }
        }
    }
}

/// The part of a run dir's `state.json` the index shows: whether a human
/// must act (the daemon's own type of it lives in a layer above this one).
#[derive(Debug, Clone, Deserialize)]
pub struct StateFile {
    pub state: Status,
    #[serde(default)]
    pub repo: Option<PathBuf>,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub commit_accepted: Option<String>,
}

/// Where the index lists a job, in the order it lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Escalated, or accepted and awaiting approval: someone must decide.
    NeedsHuman,
    /// Exhausted, stopped, interrupted, failed, or unreadable.
    NotAccepted,
    /// Accepted (or nothing to fix).
    Accepted,
}

/// One run directory of the batch.
#[derive(Debug, Clone)]
pub struct Job {
    pub run_dir: PathBuf,
    /// `run_dir` below the batch directory, as the index names it.
    pub rel: PathBuf,
    /// The file name of the job's own page beside the index (ASCII letters,
    /// digits, `.`, `_`, `-` only, so the relative link is just that name);
    /// `None` for an unreadable job, which has no page.
    pub page: Option<String>,
    pub state: Option<StateFile>,
    /// The summary and failure report, or why they could not be read.
    pub read: Result<(Summary, Option<FailureReport>), String>,
}

impl Job {
    /// Read the job in `run_dir`; never fails (see [`Job::read`]).
    pub fn load(run_dir: &Path, batch_dir: &Path) -> Job {
        let state = read_run_file(&run_dir.join("state.json"), MAX_RECORD_FILE)
            .ok()
            .and_then(|t| serde_json::from_str::<StateFile>(&t).ok());
        let read = match read_run(run_dir) {
            Ok(r) => Ok(r),
            Err(HtmlError::Summary { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Err(match &state {
                    Some(s) => format!("no summary.json yet (state `{}`)", s.state.as_str()),
                    None => "no summary.json".into(),
                })
            }
            Err(HtmlError::Summary { source, .. }) => {
                Err(format!("cannot read summary.json: {source}"))
            }
            Err(HtmlError::SummaryParse { source, .. }) => {
                Err(format!("summary.json does not parse: {source}"))
            }
            Err(e) => Err(e.to_string()),
        };
        Job {
            run_dir: run_dir.to_path_buf(),
            rel: run_dir
                .strip_prefix(batch_dir)
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| run_dir.to_path_buf()),
            page: None,
            state,
            read,
        }
    }

    /// The job's id: its summary's, else its directory's name.
    pub fn id(&self) -> String {
        match &self.read {
            Ok((s, _)) => s.job_id.clone(),
            Err(_) => self
                .run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    /// The job's accepted commit waits for `loopd approve` or `loopd reject`.
    pub fn awaiting_approval(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| s.state == Status::AwaitingApproval)
    }

    pub fn group(&self) -> Group {
        let state_needs = self.awaiting_approval()
            || self
                .state
                .as_ref()
                .is_some_and(|s| s.state == Status::NeedsHuman);
        match &self.read {
            _ if state_needs => Group::NeedsHuman,
            Ok((s, _)) if s.outcome == Outcome::NeedsHuman || s.reason == Reason::Escalated => {
                Group::NeedsHuman
            }
            Ok((s, _)) if matches!(s.outcome, Outcome::Accepted | Outcome::NothingToFix) => {
                Group::Accepted
            }
            _ => Group::NotAccepted,
        }
    }

    /// The repositories the job worked on (its checkout, and for a daemon
    /// job the repository it came from): no page is written inside one.
    pub fn repos(&self) -> Vec<PathBuf> {
        let summary = self.read.as_ref().ok().map(|(s, _)| s.repo.clone());
        let state = self.state.as_ref().and_then(|s| s.repo.clone());
        summary.into_iter().chain(state).collect()
    }

    /// The job's own page, by the single-job renderer; `None` when its
    /// summary could not be read.
    pub fn render_page(&self) -> Option<String> {
        let (summary, failure) = self.read.as_ref().ok()?;
        let branch = self.state.as_ref().and_then(|s| {
            Some(BranchInfo {
                branch: s.branch.clone()?,
                commit_accepted: s.commit_accepted.clone(),
            })
        });
        Some(super::render(&Inputs::load(
            &self.run_dir,
            summary.clone(),
            failure.clone(),
            branch,
        )))
    }
}

/// Every job of a batch directory, in the order the index lists them.
#[derive(Debug, Clone)]
pub struct Batch {
    pub dir: PathBuf,
    pub jobs: Vec<Job>,
}

impl Batch {
    /// Find and read the jobs under `dir` and name their pages; `index`
    /// is the index's own file name, which no job's page may take.
    pub fn load(dir: &Path, index: Option<&str>) -> Result<Batch, BatchError> {
        let mut jobs: Vec<Job> = find_run_dirs(dir)?
            .iter()
            .map(|d| Job::load(d, dir))
            .collect();
        // Within a group the unreadable come first (they need a look), then
        // by id, which sorts by submission time.
        jobs.sort_by_cached_key(|j| (j.group(), j.read.is_ok(), j.id(), j.rel.clone()));
        let mut used = BTreeSet::new();
        if let Some(name) = index {
            used.insert(name.to_ascii_lowercase());
        }
        for job in jobs.iter_mut().filter(|j| j.read.is_ok()) {
            job.page = Some(page_name(&job.run_dir, &mut used));
        }
        Ok(Batch {
            dir: dir.to_path_buf(),
            jobs,
        })
    }

    /// Every job's repositories (see [`Job::repos`]).
    pub fn repos(&self) -> Vec<PathBuf> {
        self.jobs.iter().flat_map(Job::repos).collect()
    }

    /// The index page. With `links`, each readable job links to its page
    /// (`Job::page`, beside the index); without (the index alone, on
    /// stdout), there are no pages and so no links.
    pub fn render_index(&self, links: bool) -> String {
        let in_group = |g: Group| self.jobs.iter().filter(move |j| j.group() == g);
        let summaries = || self.jobs.iter().filter_map(|j| j.read.as_ref().ok());
        let accepted = summaries()
            .filter(|(s, _)| s.outcome == Outcome::Accepted)
            .count();
        let needs_human = in_group(Group::NeedsHuman).count();
        let not_accepted = in_group(Group::NotAccepted).count();
        let unreadable = self.jobs.iter().filter(|j| j.read.is_err()).count();
        let cost = crate::record::round_usd(summaries().map(|(s, _)| s.totals.cost_usd).sum());
        let attempts: usize = summaries().map(|(s, _)| s.attempts.len()).sum();
        let wall_ms: u64 = summaries().map(|(s, _)| s.totals.wall_ms).sum();
        let cls = if needs_human > 0 {
            "needs-human"
        } else if not_accepted > 0 {
            "stopped"
        } else {
            "accepted"
        };
        let n = self.jobs.len();
        let mut h = String::with_capacity(16 * 1024 + n * 1024);
        let _ = write!(
            h,
            "<!DOCTYPE html>\n{MARKER}: written by loopd; `loopd report --html` may replace this file -->\n\
             <html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"color-scheme\" content=\"light dark\">\n\
             <meta name=\"generator\" content=\"loopd {version}\">\n\
             <title>loopd: {n} jobs, {accepted} accepted, {needs_human} need a human</title>\n\
             <style>\n{CSS}</style>\n</head>\n<body>\n\
             <header class=\"outcome outcome-{cls}\" id=\"batch\">\n\
             <h1>loopd: {n} jobs</h1>\n<dl class=\"facts\" id=\"totals\">\n\
             <dt>from</dt><dd><code>{dir}</code></dd>\n\
             <dt>jobs</dt><dd id=\"total-jobs\">{n}{unreadable_note}</dd>\n\
             <dt>accepted</dt><dd id=\"total-accepted\">{accepted}</dd>\n\
             <dt>need a human</dt><dd id=\"total-needs-human\">{needs_human}</dd>\n\
             <dt>cost</dt><dd id=\"total-cost\" data-cost-usd=\"{cost}\">{cost_text}</dd>\n\
             <dt>attempts</dt><dd id=\"total-attempts\">{attempts}</dd>\n\
             <dt>wall time</dt><dd id=\"total-wall\">{wall}</dd>\n\
             </dl>\n</header>\n",
            version = env!("CARGO_PKG_VERSION"),
            dir = text(&self.dir.to_string_lossy()),
            unreadable_note = if unreadable > 0 {
                format!(" ({unreadable} unreadable)")
            } else {
                String::new()
            },
            cost_text = usd(cost),
            wall = ms(wall_ms),
        );
        for (group, id, title) in [
            (Group::NeedsHuman, "needs-human", "Needs a human"),
            (Group::NotAccepted, "not-accepted", "Stopped or failed"),
            (Group::Accepted, "accepted", "Accepted"),
        ] {
            let jobs: Vec<&Job> = in_group(group).collect();
            let _ = write!(
                h,
                "<section id=\"{id}\">\n<h2>{title} ({})</h2>\n",
                jobs.len()
            );
            if jobs.is_empty() {
                h.push_str("<p class=\"muted\">None.</p>\n</section>\n");
                continue;
            }
            h.push_str(
                "<table class=\"jobs\">\n<thead><tr><th>job</th><th>outcome</th><th>repository</th>\
                 <th>task</th><th class=\"num\">cost</th><th class=\"num\">attempts</th>\
                 <th class=\"num\">wall time</th></tr></thead>\n<tbody>\n",
            );
            for job in jobs {
                row(&mut h, job, links);
            }
            h.push_str("</tbody>\n</table>\n</section>\n");
        }
        let _ = write!(
            h,
            "<footer>Written by loopd {} from {n} run directories. One file: no network, no script.{}</footer>\n\
             </body>\n</html>\n",
            env!("CARGO_PKG_VERSION"),
            if links {
                " Each job's own page lies beside this one."
            } else {
                " Printed alone: no job's page was written, so none is linked."
            }
        );
        h
    }
}

/// Text from a job — the agent may have written any of it — made inert:
/// control characters and bidirectional overrides shown as `\u{..}` (so
/// they cannot reorder what a human reads), then HTML-escaped.
fn text(s: &str) -> String {
    escape(&crate::util::printable(s))
}

/// The task on one line, cut to [`MAX_TASK`] characters.
fn short_task(task: &str) -> String {
    let flat = task.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX_TASK {
        return flat;
    }
    let mut cut: String = flat.chars().take(MAX_TASK).collect();
    cut.push('…');
    cut
}

fn row(h: &mut String, job: &Job, links: bool) {
    let id = text(&job.id());
    let (summary, _) = match &job.read {
        Ok(r) => r,
        Err(why) => {
            let _ = writeln!(
                h,
                "<tr class=\"job unreadable\" data-job=\"{id}\"><td><code>{id}</code></td>\
                 <td colspan=\"6\"><span class=\"badge fail\">unreadable</span> {why} \
                 <span class=\"muted\">(<code>{rel}</code>)</span></td></tr>",
                why = text(why),
                rel = text(&job.rel.to_string_lossy()),
            );
            return;
        }
    };
    let name = match (&job.page, links) {
        (Some(page), true) => format!("<a href=\"{}\">{id}</a>", escape(page)),
        _ => format!("<code>{id}</code>"),
    };
    let approval = if job.awaiting_approval() {
        " <span class=\"badge warn awaiting-approval\">awaiting approval</span>"
    } else {
        ""
    };
    let _ = writeln!(
        h,
        "<tr class=\"job {cls}\" data-job=\"{id}\"><td>{name}</td>\
         <td><span class=\"badge {badge}\">{word}</span> <code class=\"reason\">{reason}</code> \
         <span class=\"muted\">exit {exit}</span>{approval}</td>\
         <td><code>{repo}</code></td><td class=\"task\">{task}</td>\
         <td class=\"num\" data-cost-usd=\"{cost}\">{cost_text}</td><td class=\"num\">{attempts}</td>\
         <td class=\"num\">{wall}</td></tr>",
        cls = outcome_class(summary.outcome),
        badge = outcome_badge(summary.outcome),
        word = summary.outcome_word(),
        reason = escape(summary.reason.as_str()),
        exit = ExitStatus::from(summary.reason).code(),
        repo = text(&summary.repo.to_string_lossy()),
        task = text(&short_task(&summary.task)),
        cost = summary.totals.cost_usd,
        cost_text = usd(summary.totals.cost_usd),
        attempts = summary.attempts.len(),
        wall = ms(summary.totals.wall_ms),
    );
}

/// A page name for the job in `run_dir` that no other takes: its
/// directory's name when that is a plain file name (a job id is), else
/// `job`; `-2`, `-3`… on a clash. Compared without case, for file
/// systems that ignore it.
fn page_name(run_dir: &Path, used: &mut BTreeSet<String>) -> String {
    let dir_name = run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| {
            !n.is_empty()
                && n.len() <= 100
                && !n.starts_with('.')
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
        .unwrap_or("job");
    let mut name = format!("{dir_name}.html");
    let mut k = 2;
    while !used.insert(name.to_ascii_lowercase()) {
        name = format!("{dir_name}-{k}.html");
        k += 1;
    }
    name
}

/// Every run directory under `dir` (sorted), in the layouts a batch comes
/// in: `dir` itself, a state dir (`runs/<id>/`), a directory of run dirs
/// (`<id>/`), or folders holding either (`loopd-<id>/runs/<id>/`,
/// `loopd-<id>/<id>/`), at most [`MAX_DEPTH`] levels down. A run dir is a
/// directory holding `summary.json` or the journal.
///
/// `dir` itself is taken as given (a link to a state dir works); below
/// it, no link is followed and nothing but directories is entered. Nor is
/// anything below a run dir, or beside a state dir's `runs/` (its
/// worktrees), ever walked: those are places an agent could write, and a
/// run dir planted there must not pose as a job.
pub fn find_run_dirs(dir: &Path) -> Result<Vec<PathBuf>, BatchError> {
    let meta = std::fs::metadata(dir).map_err(|source| BatchError::Read {
        dir: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(BatchError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    std::fs::read_dir(dir).map_err(|source| BatchError::Read {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut found = Vec::new();
    walk(dir, 0, &mut found);
    if found.is_empty() {
        return Err(BatchError::NoRunDir {
            dir: dir.to_path_buf(),
        });
    }
    found.sort();
    Ok(found)
}

fn is_run_dir(dir: &Path) -> bool {
    ["summary.json", crate::journal::FILE]
        .iter()
        .any(|f| std::fs::symlink_metadata(dir.join(f)).is_ok())
}

/// The directories in `dir` — links, FIFOs, sockets and devices left out.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if found.len() >= MAX_JOBS {
        return;
    }
    if is_run_dir(dir) {
        found.push(dir.to_path_buf());
        return;
    }
    let runs = dir.join("runs");
    if std::fs::symlink_metadata(&runs).is_ok_and(|m| m.is_dir()) {
        if depth + 2 <= MAX_DEPTH {
            for run in subdirs(&runs) {
                if found.len() < MAX_JOBS && is_run_dir(&run) {
                    found.push(run);
                }
            }
        }
        return;
    }
    if depth < MAX_DEPTH {
        for sub in subdirs(dir) {
            walk(&sub, depth + 1, found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report_html::render::tests::summary;

    /// A run dir as a job leaves it: `summary.json` written the way the
    /// job writes it, from the library's own type.
    fn run_dir(at: &Path, s: &Summary) {
        std::fs::create_dir_all(at).expect("mkdir");
        crate::util::write_json_atomic(&at.join("summary.json"), s).expect("summary");
    }

    fn job(id: &str, reason: Reason, cost: f64) -> Summary {
        let mut s = summary(&[cost / 2.0, cost / 2.0]);
        s.job_id = id.into();
        s.reason = reason;
        s.outcome = reason.outcome();
        s.totals.cost_usd = cost;
        s
    }

    fn state(at: &Path, status: &str) {
        std::fs::write(
            at.join("state.json"),
            format!(
                r#"{{"job_id": "x", "state": "{status}", "repo": "/src/app", "branch": "loopd/x", "commit_accepted": "abc"}}"#
            ),
        )
        .expect("state");
    }

    #[test]
    fn needs_human_first_then_stopped_then_accepted_with_totals() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        // Three layouts in one batch: a state dir, an artifact holding a
        // state dir, an artifact holding a run dir.
        run_dir(&d.join("state/runs/a1"), &job("a1", Reason::Accepted, 0.25));
        run_dir(
            &d.join("loopd-e1/runs/e1"),
            &job("e1", Reason::Escalated, 0.5),
        );
        run_dir(
            &d.join("loopd-s1/s1"),
            &job("s1", Reason::AttemptsExhausted, 1.0),
        );
        let approve = d.join("state/runs/a2");
        run_dir(&approve, &job("a2", Reason::Accepted, 0.125));
        state(&approve, "awaiting_approval");
        let b = Batch::load(d, Some("index.html")).expect("batch");
        let ids: Vec<String> = b.jobs.iter().map(Job::id).collect();
        assert_eq!(ids, ["a2", "e1", "s1", "a1"]);
        let groups: Vec<Group> = b.jobs.iter().map(Job::group).collect();
        assert_eq!(
            groups,
            [
                Group::NeedsHuman,
                Group::NeedsHuman,
                Group::NotAccepted,
                Group::Accepted
            ]
        );
        let html = b.render_index(true);
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s}:\n{html}"));
        assert!(at("data-job=\"a2\"") < at("data-job=\"e1\""));
        assert!(at("id=\"needs-human\"") < at("id=\"not-accepted\""));
        assert!(at("data-job=\"e1\"") < at("data-job=\"s1\""));
        assert!(at("data-job=\"s1\"") < at("data-job=\"a1\""));
        assert!(html.contains("<dd id=\"total-jobs\">4</dd>"));
        assert!(html.contains("<dd id=\"total-accepted\">2</dd>"));
        assert!(html.contains("<dd id=\"total-needs-human\">2</dd>"));
        assert!(
            html.contains("data-cost-usd=\"1.875\">$1.8750</dd>"),
            "{html}"
        );
        assert!(html.contains("<dd id=\"total-attempts\">8</dd>"));
        assert!(html.contains("awaiting approval"));
        // Exit codes as the contract has them; links to pages beside it.
        assert!(html.contains(
            "<code class=\"reason\">escalated</code> <span class=\"muted\">exit 6</span>"
        ));
        assert!(html.contains("<a href=\"e1.html\">e1</a>"));
        assert!(html.starts_with(&format!("<!DOCTYPE html>\n{MARKER}")));
        assert!(
            !b.render_index(false).contains("<a href"),
            "no pages, no links"
        );
        // The page is the single-job page, with the branch from state.json.
        let page = b.jobs[0].render_page().expect("a page");
        assert!(page.contains("<code>loopd/x</code>"), "{page}");
        assert_eq!(b.repos().len(), 5, "each summary's repo, and a2's state's");
    }

    #[test]
    fn hostile_text_is_escaped_and_bidi_controls_shown() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut s = job(
            "20261130-120000000-abcd\u{202e}lmth.exe",
            Reason::AttemptsExhausted,
            0.1,
        );
        s.task = "<script>alert(1)</script> \"quoted\" & \u{202e}txt.exe\u{2066} \u{1b}[2J".into();
        s.repo = PathBuf::from("/src/<img src=x onerror=alert(2)>");
        run_dir(&tmp.path().join("j"), &s);
        let html = Batch::load(tmp.path(), None)
            .expect("batch")
            .render_index(true);
        for bad in ["<script", "<img", "\u{202e}", "\u{2066}", "\u{1b}"] {
            assert!(!html.contains(bad), "{bad:?} survived:\n{html}");
        }
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot; &amp; \\u{202e}txt.exe\\u{2066} \\u{1b}[2J"), "{html}");
        assert!(html.contains("/src/&lt;img src=x onerror=alert(2)&gt;"));
        // The page's file name is the directory's, never the summary's id.
        assert!(html.contains("<a href=\"j.html\">20261130-120000000-abcd\\u{202e}lmth.exe</a>"));
    }

    #[test]
    fn a_long_task_is_cut_to_one_line() {
        let long = format!("first line\n{}", "x".repeat(500));
        let t = short_task(&long);
        assert!(t.starts_with("first line x"));
        assert_eq!(t.chars().count(), MAX_TASK + 1);
        assert!(t.ends_with('…'));
        assert_eq!(short_task("  a\n b  "), "a b");
    }

    #[test]
    fn a_symlinked_run_dir_is_not_followed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let outside = tmp.path().join("outside");
        run_dir(
            &outside.join("secret"),
            &job("secret", Reason::Accepted, 9.0),
        );
        let batch = tmp.path().join("batch");
        run_dir(&batch.join("real"), &job("real", Reason::Accepted, 0.1));
        std::os::unix::fs::symlink(outside.join("secret"), batch.join("link")).expect("link");
        std::os::unix::fs::symlink(&outside, batch.join("linked-dir")).expect("link");
        // A state dir whose `runs` is a link is no state dir.
        std::fs::create_dir_all(batch.join("st")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, batch.join("st/runs")).expect("link");
        assert_eq!(find_run_dirs(&batch).expect("found"), [batch.join("real")]);
        // A run dir whose summary is a link is listed, unreadable, not read.
        let planted = batch.join("planted");
        std::fs::create_dir_all(&planted).expect("mkdir");
        std::os::unix::fs::symlink(
            outside.join("secret/summary.json"),
            planted.join("summary.json"),
        )
        .expect("link");
        let b = Batch::load(&batch, None).expect("batch");
        assert_eq!(b.jobs.len(), 2);
        let bad = b.jobs.iter().find(|j| j.read.is_err()).expect("unreadable");
        assert!(
            bad.read
                .as_ref()
                .expect_err("unreadable")
                .contains("cannot read summary.json"),
            "{:?}",
            bad.read
        );
        assert!(!b.render_index(true).contains("secret"));
    }

    #[test]
    fn a_fifo_is_skipped_and_nothing_below_a_run_dir_or_beside_runs_is_walked() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        let fifo = d.join("pipe");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
        // SAFETY: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        run_dir(&d.join("state/runs/j1"), &job("j1", Reason::Accepted, 0.1));
        // Planted where an agent writes: a job's worktree, its sandbox home.
        run_dir(
            &d.join("state/worktrees/j1/fake"),
            &job("fake", Reason::Accepted, 0.0),
        );
        run_dir(
            &d.join("state/runs/j1/sandbox/agent"),
            &job("fake2", Reason::Accepted, 0.0),
        );
        // Too deep.
        run_dir(&d.join("a/b/c/d/e"), &job("deep", Reason::Accepted, 0.0));
        assert_eq!(find_run_dirs(d).expect("found"), [d.join("state/runs/j1")]);
    }

    #[test]
    fn an_unreadable_summary_is_listed_not_fatal() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        run_dir(&d.join("good"), &job("good", Reason::Accepted, 0.1));
        std::fs::create_dir_all(d.join("broken")).expect("mkdir");
        std::fs::write(d.join("broken/summary.json"), "{\"job_id\": <b>").expect("write");
        let running = d.join("running");
        std::fs::create_dir_all(&running).expect("mkdir");
        std::fs::write(running.join(crate::journal::FILE), "").expect("journal");
        state(&running, "running");
        let b = Batch::load(d, None).expect("batch");
        let html = b.render_index(true);
        assert_eq!(b.jobs.len(), 3);
        assert!(html.contains("summary.json does not parse"), "{html}");
        assert!(
            html.contains("no summary.json yet (state `running`)"),
            "{html}"
        );
        assert!(html.contains("(2 unreadable)"));
        assert!(!html.contains("<b>"));
        // Listed with the stopped and failed, and given no page.
        assert!(b
            .jobs
            .iter()
            .filter(|j| j.read.is_err())
            .all(|j| j.page.is_none()
                && j.group() == Group::NotAccepted
                && j.render_page().is_none()));
        assert!(html.find("id=\"not-accepted\"") < html.find("data-job=\"broken\""));
    }

    #[test]
    fn no_run_dir_or_no_dir_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(tmp.path().join("empty/sub")).expect("mkdir");
        let e = Batch::load(&tmp.path().join("empty"), None).expect_err("nothing there");
        assert!(matches!(e, BatchError::NoRunDir { .. }), "{e}");
        assert!(e.to_string().contains("empty"), "{e}");
        let e = Batch::load(&tmp.path().join("absent"), None).expect_err("no dir");
        assert!(matches!(e, BatchError::Read { .. }), "{e}");
        assert!(e.to_string().contains("absent"), "{e}");
        assert!(!e.hint().is_empty());
    }

    #[test]
    fn page_names_are_plain_unique_and_never_the_index() {
        let mut used = BTreeSet::from(["index.html".to_owned()]);
        assert_eq!(page_name(Path::new("/x/index"), &mut used), "index-2.html");
        assert_eq!(page_name(Path::new("/x/a1"), &mut used), "a1.html");
        assert_eq!(page_name(Path::new("/y/A1"), &mut used), "A1-2.html");
        assert_eq!(page_name(Path::new("/x/<b> x"), &mut used), "job.html");
        assert_eq!(page_name(Path::new("/x/.hidden"), &mut used), "job-2.html");
    }
}
