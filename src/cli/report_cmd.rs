//! `loopd report`: the human account of one job.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::state::JobState;
use crate::outcome::ExitStatus;
use crate::report::{FailureReport, Summary};

/// Print the account of a job: attempts, verdicts, gates, costs, and how to
/// get the work back.
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

/// The Markdown account of a job.
pub fn markdown(
    state: Option<&JobState>,
    summary: &Summary,
    failure: Option<&FailureReport>,
) -> String {
    let mut md = format!("# loopd job {}\n\n", summary.job_id);
    md.push_str(&format!(
        "**{}** ({}) — {}\n\n",
        summary.outcome_word(),
        summary.reason,
        summary.detail
    ));
    md.push_str(&format!(
        "- repository: `{}`\n- BASE_REF: `{}`\n- task: {}\n",
        summary.repo.display(),
        summary.base_ref,
        summary.task
    ));
    if let Some(st) = state {
        md.push_str(&format!("- branch: `{}`\n", st.branch));
        if let Some(c) = &st.commit_accepted {
            md.push_str(&format!("- accepted commit: `{c}` (`git log -1 {c}`)\n"));
        }
    }
    md.push_str(&format!(
        "- cost: ${:.4} · {} turns · {} input / {} output tokens · {:.1} s\n\n",
        summary.totals.cost_usd,
        summary.totals.turns,
        summary.totals.input_tokens,
        summary.totals.output_tokens,
        summary.totals.wall_ms as f64 / 1000.0
    ));
    md.push_str("| attempt | goal test | gates | critic | cost | turns |\n| --- | --- | --- | --- | --- | --- |\n");
    for a in &summary.attempts {
        let goal = if a.goal_passed {
            "green".to_owned()
        } else {
            format!("red at `{}`", a.failed_step.as_deref().unwrap_or("-"))
        };
        let gates = a
            .rejected_by
            .map_or("passed".to_owned(), |r| format!("`{r}`"));
        md.push_str(&format!(
            "| {} | {goal} | {gates} | {} | ${:.4} | {} |\n",
            a.n, a.critic, a.cost_usd, a.turns
        ));
    }
    for a in &summary.attempts {
        if a.violations.is_empty() && a.gate_findings.is_empty() {
            continue;
        }
        md.push_str(&format!("\n### Attempt {}\n\n", a.n));
        for f in &a.gate_findings {
            md.push_str(&format!("- {f}\n"));
        }
        for v in &a.violations {
            md.push_str(&format!("- {}\n", v.render()));
        }
    }
    md.push_str("\n## Getting the work back\n\n");
    match (&summary.stash_commit, failure) {
        (Some(_), Some(f)) => md.push_str(&format!("The work is parked: `{}`\n", f.restore)),
        (None, Some(f)) => md.push_str(&format!("{}\n", f.restore)),
        _ if state.is_some_and(|s| s.commit_accepted.is_some()) => md.push_str(&format!(
            "The change is committed on `{}`: `git -C {} merge {}`\n",
            state.map(|s| s.branch.as_str()).unwrap_or(""),
            summary.repo.display(),
            state.map(|s| s.branch.as_str()).unwrap_or("")
        )),
        _ => md.push_str("The change is in the working tree.\n"),
    }
    md.push_str(&format!("\nFiles: `{}`\n", summary.run_dir.display()));
    md
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
                println!("job {} is {}; no summary yet", st.job_id, st.state.as_str());
                Ok(ExitStatus::Accepted)
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
        println!(
            "{}",
            serde_json::json!({"state": state, "summary": summary, "failure": failure})
        );
    } else {
        print!("{}", markdown(state.as_ref(), &summary, failure.as_ref()));
    }
    Ok(ExitStatus::Accepted)
}
