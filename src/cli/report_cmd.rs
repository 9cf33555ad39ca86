//! `loopd report`: the human account of one job.

use std::path::{Path, PathBuf};

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::state::JobState;
use crate::outcome::ExitStatus;
use crate::record::{FailureReport, Summary};
use crate::report::{interdiffs, markdown, Branch};
use crate::report_html::{self, BranchInfo, Inputs};

/// Print the account of a job: attempts, verdicts, gates, each attempt's
/// interdiff with the one before, costs, and how to get the work back.
///
/// Example: `loopd report 20261130-114617123-613a --format md`,
/// `loopd report 20261130-114617123-613a --html /tmp/job.html`,
/// `loopd report --html /tmp/night/index.html --batch ./artifacts`
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The job's id (as `loopd status` lists it, e.g. `20261130-221503042-3f9a`).
    #[arg(required_unless_present = "batch", conflicts_with = "batch")]
    pub job: Option<String>,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// `md` (Markdown) or `json`.
    #[arg(long, default_value = "md", value_parser = ["md", "json"])]
    pub format: String,
    /// Write the account as one self-contained HTML page to FILE (`-`:
    /// stdout): timeline per attempt, cost against the budget, tokens, diffs,
    /// findings. Never inside the job's repository, and never over a file
    /// loopd did not write.
    #[arg(long, value_name = "FILE", conflicts_with = "format")]
    pub html: Option<PathBuf>,
    /// With `--html FILE`: one index page for every job under DIR — a state
    /// dir, a directory of run dirs, or folders of CI artifacts holding
    /// either (4 levels deep, no link followed) — the jobs that need a
    /// human first, then the stopped and failed, then the accepted, with
    /// totals; each job's own page is written beside FILE as
    /// `<job-id>.html` and linked. `--html -` prints the index alone,
    /// without links.
    #[arg(long, value_name = "DIR", requires = "html")]
    pub batch: Option<PathBuf>,
}

pub fn report(args: ReportArgs) -> Result<ExitStatus, CliError> {
    if let Some(dir) = &args.batch {
        let target = args.html.as_deref().expect("clap: --batch requires --html");
        return batch(dir, target);
    }
    let job = args.job.expect("clap: JOB is required without --batch");
    let state_dir = state_dir_or_default(args.state_dir);
    let run_dir = state_dir.join("runs").join(&job);
    let state = JobState::load(&state_dir, &job);
    let summary: Option<Summary> = std::fs::read_to_string(run_dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(t.trim_start_matches('\u{feff}')).ok());
    let failure: Option<FailureReport> = std::fs::read_to_string(run_dir.join("failure.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(summary) = summary else {
        return match state {
            Some(st) => {
                crate::cli::out!("job {} is {}; no summary yet", st.job_id, st.state.as_str());
                Ok(ExitStatus::Success)
            }
            None => Err(CliError::new(
                ExitStatus::Usage,
                format!("no report for job `{job}` in `{}`", state_dir.display()),
            )
            .hint("`loopd status` lists every job")),
        };
    };
    if let Some(target) = &args.html {
        let branch = state.as_ref().map(|s| BranchInfo {
            branch: s.branch.clone(),
            commit_accepted: s.commit_accepted.clone(),
        });
        // The job's checkout, and for a daemon job the repository it came from.
        let repos: Vec<PathBuf> = std::iter::once(summary.repo.clone())
            .chain(state.as_ref().map(|s| s.repo.clone()))
            .collect();
        let html = report_html::render(&Inputs::load(&run_dir, summary, failure, branch));
        return write_html(target, &html, &repos).map(|()| ExitStatus::Success);
    }
    if args.format == "json" {
        crate::cli::out!(
            "{}",
            serde_json::json!({"state": state, "summary": summary, "failure": failure})
        );
    } else {
        // A job of `loopd run` has no branch: its change is in the tree.
        let branch = state.as_ref().filter(|s| !s.foreground).map(|s| Branch {
            branch: &s.branch,
            commit_accepted: s.commit_accepted.as_deref(),
        });
        crate::cli::out!(
            "{}",
            markdown(
                branch.as_ref(),
                &summary,
                failure.as_ref(),
                &interdiffs(&run_dir, &summary)
            )
            .trim_end_matches('\n')
        );
        if let Some(table) = metered_table(&run_dir) {
            crate::cli::out!("\n{}", table.trim_end_matches('\n'));
        }
    }
    Ok(ExitStatus::Success)
}

/// `--html FILE --batch DIR`: the index of every job under `dir`, and each
/// readable job's own page beside it. Every path is checked before
/// anything is written, so a refusal leaves no half-written night.
fn batch(dir: &Path, target: &Path) -> Result<ExitStatus, CliError> {
    use report_html::batch::Batch;
    let stdout = target == Path::new("-");
    let index_name = if stdout {
        None
    } else {
        target.file_name().and_then(|n| n.to_str())
    };
    let batch = Batch::load(dir, index_name)
        .map_err(|e| CliError::new(ExitStatus::Usage, &e).hint(e.hint()))?;
    if stdout {
        // No page is written, so the index links to none.
        crate::cli::out!("{}", batch.render_index(false).trim_end_matches('\n'));
        return Ok(ExitStatus::Success);
    }
    let repos = batch.repos();
    let index = checked_target(target, &repos)?;
    let beside = index
        .parent()
        .expect("a checked target is a file in a directory")
        .to_path_buf();
    let mut pages = Vec::new();
    for job in &batch.jobs {
        if let Some(name) = &job.page {
            pages.push((job, checked_target(&beside.join(name), &repos)?));
        }
    }
    for (job, path) in &pages {
        if let Some(html) = job.render_page() {
            write_checked(path, &html)?;
        }
    }
    write_checked(&index, &batch.render_index(true))?;
    eprintln!(
        "loopd report: wrote `{}` ({} jobs) and {} job pages beside it",
        index.display(),
        batch.jobs.len(),
        pages.len()
    );
    Ok(ExitStatus::Success)
}

/// Write the page to `target` (`-`: stdout), once [`checked_target`]
/// allows it.
fn write_html(target: &Path, html: &str, repos: &[PathBuf]) -> Result<(), CliError> {
    if target == Path::new("-") {
        crate::cli::out!("{}", html.trim_end_matches('\n'));
        return Ok(());
    }
    let path = checked_target(target, repos)?;
    write_checked(&path, html)?;
    eprintln!("loopd report: wrote `{}`", path.display());
    Ok(())
}

/// Where a page for `target` may be written: its absolute path. Refused,
/// before anything is written: a path inside a job's repository (reports
/// never go there, and the agent's next run would see it), a directory,
/// and an existing file loopd did not write.
fn checked_target(target: &Path, repos: &[PathBuf]) -> Result<PathBuf, CliError> {
    let usage = |msg: String| CliError::new(ExitStatus::Usage, msg);
    let name = target.file_name().ok_or_else(|| {
        usage(format!("`--html {}` names no file", target.display()))
            .hint("give a file name, e.g. `--html /tmp/loopd-report.html`, or `-` for stdout")
    })?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = parent.canonicalize().map_err(|e| {
        usage(format!(
            "cannot write the HTML report into `{}`: {e}",
            parent.display()
        ))
        .hint("create the directory first, or choose another path")
    })?;
    let path = dir.join(name);
    for repo in repos.iter().filter_map(|r| r.canonicalize().ok()) {
        if path.starts_with(&repo) {
            return Err(usage(format!(
                "`{}` is inside the job's repository `{}`; reports never go inside it",
                path.display(),
                repo.display()
            ))
            .hint("write it elsewhere, e.g. `--html /tmp/loopd-report.html`, or print it with `--html -`"));
        }
    }
    if path.is_dir() {
        return Err(usage(format!("`{}` is a directory", path.display()))
            .hint("give a file name, e.g. `--html /tmp/loopd-report.html`"));
    }
    if path.symlink_metadata().is_ok() && !report_html::is_ours(&path) {
        return Err(usage(format!(
            "`{}` exists and is not a report loopd wrote; refusing to overwrite it",
            path.display()
        ))
        .hint("choose another path, or move that file away first"));
    }
    Ok(path)
}

/// Write a page at a path [`checked_target`] returned.
fn write_checked(path: &Path, html: &str) -> Result<(), CliError> {
    crate::util::write_atomic(path, html.as_bytes()).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!("cannot write the HTML report `{}`: {e}", path.display()),
        )
    })
}

/// Per session, what the metering gateway read on the wire — calls,
/// tokens, cache writes and reads, cost — beside what the CLI reported.
fn metered_table(run_dir: &std::path::Path) -> Option<String> {
    use crate::journal::{self, Event};
    use std::collections::BTreeMap;
    use std::fmt::Write;
    #[derive(Default)]
    struct Row {
        label: String,
        calls: u64,
        input: u64,
        output: u64,
        writes: u64,
        reads: u64,
        usd: f64,
        cli_usd: Option<f64>,
    }
    let text = crate::util::read_text(&run_dir.join(journal::FILE)).ok()?;
    let (entries, _) = journal::parse(&text);
    let mut rows: BTreeMap<u32, Row> = BTreeMap::new();
    for e in entries {
        match e.event {
            Event::MeteredCall(c) => {
                let row = rows.entry(c.session).or_default();
                row.label = format!("{} {} (attempt {})", c.role.as_str(), c.session, c.attempt);
                row.calls += 1;
                row.input += c.input_tokens;
                row.output += c.output_tokens;
                row.writes += c.cache_creation_input_tokens;
                row.reads += c.cache_read_input_tokens;
                row.usd += c.cost_usd;
            }
            Event::SessionFinished(f) => {
                if let Some(row) = rows.get_mut(&f.session) {
                    row.cli_usd = f.cli_cost_usd;
                }
            }
            _ => {}
        }
    }
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from("## Model calls (metered by the gateway)\n\n| session | calls | input | output | cache writes | cache reads | cost (USD) | CLI says |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for row in rows.values() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.6} | {} |",
            row.label,
            row.calls,
            row.input,
            row.output,
            row.writes,
            row.reads,
            row.usd,
            row.cli_usd.map_or("-".to_owned(), |u| format!("{u:.6}"))
        );
    }
    Some(out)
}
