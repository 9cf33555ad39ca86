//! `loopd report`: the human account of one job.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::state::JobState;
use crate::outcome::ExitStatus;
use crate::report::{interdiffs, markdown, Branch, FailureReport, Summary};

/// Print the account of a job: attempts, verdicts, gates, each attempt's
/// interdiff with the one before, costs, and how to get the work back.
///
/// Example: `loopd report 20261130-114617-613025 --format md`
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    pub job: String,
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// `md` (Markdown) or `json`.
    #[arg(long, default_value = "md", value_parser = ["md", "json"])]
    pub format: String,
}

pub fn report(args: ReportArgs) -> Result<ExitStatus, CliError> {
    let state_dir = state_dir_or_default(args.state_dir);
    let run_dir = state_dir.join("runs").join(&args.job);
    let state = JobState::load(&state_dir, &args.job);
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
                format!(
                    "no report for job `{}` in `{}`",
                    args.job,
                    state_dir.display()
                ),
            )
            .hint("`loopd status` lists every job")),
        };
    };
    if args.format == "json" {
        crate::cli::out!(
            "{}",
            serde_json::json!({"state": state, "summary": summary, "failure": failure})
        );
    } else {
        let branch = state.as_ref().map(|s| Branch {
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
