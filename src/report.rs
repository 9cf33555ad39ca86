//! The human rendering of what a job leaves behind, outside the repository:
//! `summary.json` (also what `--json` prints) and `failure.json`, whose
//! types live in [`crate::record`] and are folded from the journal
//! (`ledger.jsonl`, [`crate::journal`]); the markdown report, the interdiffs
//! and how to get the work back.
//! Nothing here ever contains the API key: it is never given to this module.

use std::collections::BTreeMap;
use std::path::Path;

use crate::record::{FailureReport, Summary};

/// The branch a daemon job's change lives on.
pub struct Branch<'a> {
    pub branch: &'a str,
    pub commit_accepted: Option<&'a str>,
}

/// Where a job's work is and the one command that gets it back: the same
/// answer in every view of a report (Markdown, HTML).
#[derive(Debug, Clone, PartialEq)]
pub enum WorkBack {
    /// Parked by the breaker: `restore` applies the stash.
    Parked { restore: String },
    /// The job did not end in acceptance and nothing was parked;
    /// `restore` is `failure.json`'s sentence on why.
    NotParked { restore: String },
    /// Accepted and committed on a daemon job's branch.
    Committed { branch: String, merge: String },
    /// Accepted in the foreground: the change is in the working tree.
    WorkingTree,
}

/// See [`WorkBack`]. A stash without `failure.json` (a full disk) still
/// names the stash.
pub fn work_back(
    branch: Option<&Branch<'_>>,
    summary: &Summary,
    failure: Option<&FailureReport>,
) -> WorkBack {
    match (&summary.stash_commit, failure) {
        (Some(_), Some(f)) => WorkBack::Parked {
            restore: f.restore.clone(),
        },
        (Some(c), None) => WorkBack::Parked {
            restore: format!(
                "git -C {} stash apply {c}",
                crate::util::shell_quote(&summary.repo.to_string_lossy())
            ),
        },
        // Only inside submodules: parked all the same.
        (None, Some(f)) if f.submodule_stashes.iter().any(|s| s.stash_commit.is_some()) => {
            WorkBack::Parked {
                restore: f.restore.clone(),
            }
        }
        (None, Some(f)) => WorkBack::NotParked {
            restore: f.restore.clone(),
        },
        (None, None) => match branch {
            Some(b) if b.commit_accepted.is_some() => WorkBack::Committed {
                branch: b.branch.to_owned(),
                merge: format!(
                    "git -C {} merge {}",
                    crate::util::shell_quote(&summary.repo.to_string_lossy()),
                    b.branch
                ),
            },
            _ => WorkBack::WorkingTree,
        },
    }
}

/// Each attempt's interdiff (`attempt-<n>/interdiff.patch`) in a run
/// directory, by attempt, for [`markdown`]; attempts without one are absent.
pub fn interdiffs(run_dir: &Path, summary: &Summary) -> BTreeMap<u32, String> {
    summary
        .attempts
        .iter()
        .filter_map(|a| {
            let path = run_dir
                .join(format!("attempt-{}", a.n))
                .join("interdiff.patch");
            crate::util::read_text(&path).ok().map(|t| (a.n, t))
        })
        .collect()
}

/// The most of one interdiff the Markdown account shows.
const MAX_REPORT_INTERDIFF: usize = 16 * 1024;

/// The Markdown account of a job; `interdiffs` are shown under their
/// attempts (see [`interdiffs`]).
pub fn markdown(
    branch: Option<&Branch<'_>>,
    summary: &Summary,
    failure: Option<&FailureReport>,
    interdiffs: &BTreeMap<u32, String>,
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
    if let Some(st) = branch {
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
    for (step, why) in &summary.test_count_off {
        md.push_str(&format!(
            "**The test-count gate was off for `{step}`**: {why}\n\n"
        ));
    }
    if let Some(line) = suite_line(summary) {
        md.push_str(&format!("- {line}\n\n"));
    }
    if let Some(line) = examiner_line(summary) {
        md.push_str(&format!("- {line}\n\n"));
    }
    if let Some(e) = &summary.escalation {
        md.push_str(&format!(
            "## The agent escalated (attempt {})\n\n- test: `{}`\n- claim: {}\n\nGoal test output:\n\n```\n{}\n```\n\nThe diff it left:\n\n```diff\n{}\n```\n\nAnswer with `loopd resume {} --note \"...\"` (the note becomes the next prompt's first paragraph).\n\n",
            e.attempt,
            e.test,
            e.claim,
            e.goal_output.trim_end(),
            e.diff.trim_end(),
            summary.job_id
        ));
    }
    md.push_str("| attempt | goal test | gates | critic | cost | turns |\n| --- | --- | --- | --- | --- | --- |\n");
    for a in &summary.attempts {
        let mut goal = if a.goal_passed {
            "green".to_owned()
        } else {
            match a.failed_step.as_deref() {
                Some(step) => format!("red at `{step}`"),
                None => "not run".to_owned(),
            }
        };
        match a.held_out_passed {
            Some(true) => goal.push_str("; held-out tests green"),
            Some(false) => goal.push_str("; held-out tests RED"),
            None => {}
        }
        match a.suite.as_ref().map(|s| s.regressed) {
            Some(false) => goal.push_str("; whole suite as at BASE_REF"),
            Some(true) => goal.push_str("; whole suite REGRESSED"),
            None => {}
        }
        match a.examiner_passed {
            Some(true) => goal.push_str("; examiner's tests green"),
            Some(false) => goal.push_str("; examiner's tests RED"),
            None => {}
        }
        let gates = a
            .rejected_by
            .map_or("passed".to_owned(), |r| format!("`{r}`"));
        md.push_str(&format!(
            "| {} | {goal} | {gates} | {} | ${:.4} | {} |\n",
            a.n, a.critic, a.cost_usd, a.turns
        ));
    }
    for a in &summary.attempts {
        let interdiff = interdiffs.get(&a.n).filter(|d| !d.trim().is_empty());
        if a.violations.is_empty()
            && a.gate_findings.is_empty()
            && a.scope_warnings.is_empty()
            && a.allowed_changes.is_empty()
            && interdiff.is_none()
        {
            continue;
        }
        md.push_str(&format!("\n### Attempt {}\n\n", a.n));
        for f in &a.gate_findings {
            md.push_str(&format!("- {f}\n"));
        }
        for v in &a.violations {
            md.push_str(&format!("- {}\n", v.render()));
        }
        for f in &a.scope_warnings {
            md.push_str(&format!(
                "- scope warning: `{f}` changed, but no finding of attempt {} named it\n",
                a.n - 1
            ));
        }
        for f in &a.allowed_changes {
            md.push_str(&format!("- `{f}` changed (allowed by [protect] allow)\n"));
        }
        if let Some(d) = interdiff {
            md.push_str(&format!(
                "\nInterdiff from attempt {} ({}):\n\n```diff\n{}\n```\n",
                a.n - 1,
                a.interdiff_files.join(", "),
                crate::goal::head_and_tail(d.trim_end(), MAX_REPORT_INTERDIFF)
            ));
        }
    }
    md.push_str("\n## Getting the work back\n\n");
    match work_back(branch, summary, failure) {
        WorkBack::Parked { restore } => md.push_str(&format!("The work is parked: `{restore}`\n")),
        WorkBack::NotParked { restore } => md.push_str(&format!("{restore}\n")),
        WorkBack::Committed { branch, merge } => md.push_str(&format!(
            "The change is committed on `{branch}`: `{merge}`\n"
        )),
        WorkBack::WorkingTree => md.push_str("The change is in the working tree.\n"),
    }
    md.push_str(&format!("\nFiles: `{}`\n", summary.run_dir.display()));
    // Every line of it may carry text an agent wrote (a claim, a tool
    // call, a finding's path): no escape sequence of its reaches a terminal.
    crate::util::printable(&md).into_owned()
}

/// A short human account of a summary, for stderr at the end of a run.
pub fn render_human(s: &Summary) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "loopd {}: {} ({})\n",
        s.job_id,
        s.outcome_word(),
        s.reason
    ));
    out.push_str(&format!("  {}\n", s.detail));
    if let Some(e) = &s.escalation {
        out.push_str(&format!(
            "  escalated at attempt {}: test `{}`: {}\n  answer with `loopd resume {} --note \"...\"`\n",
            e.attempt, e.test, e.claim, s.job_id
        ));
    }
    match s.sandbox {
        Some(crate::sandbox::Confinement::Unsupported) => out.push_str(
            "  NO SANDBOX: this kernel has no Landlock; the agent could read and write whatever this user can\n",
        ),
        Some(crate::sandbox::Confinement::Off) => out.push_str(
            "  NO SANDBOX: `[sandbox] enabled = false`; the agent could read and write whatever this user can\n",
        ),
        Some(crate::sandbox::Confinement::Landlock) | None => {}
    }
    for (step, why) in &s.test_count_off {
        out.push_str(&format!("  TEST COUNT GATE OFF for `{step}`: {why}\n"));
    }
    if let Some(line) = suite_line(s) {
        out.push_str(&format!("  {line}\n"));
    }
    if let Some(line) = examiner_line(s) {
        out.push_str(&format!("  {line}\n"));
    }
    for a in &s.attempts {
        let mut goal = if a.goal_passed {
            "goal green".to_owned()
        } else {
            match a.failed_step.as_deref() {
                Some(step) => format!("goal red at `{step}`"),
                None => "goal not run".to_owned(),
            }
        };
        match a.held_out_passed {
            Some(true) => goal.push_str(", held-out tests green"),
            Some(false) => goal.push_str(", held-out tests RED"),
            None => {}
        }
        match a.suite.as_ref().map(|s| s.regressed) {
            Some(false) => goal.push_str(", whole suite as at BASE_REF"),
            Some(true) => goal.push_str(", whole suite REGRESSED"),
            None => {}
        }
        match a.examiner_passed {
            Some(true) => goal.push_str(", examiner's tests green"),
            Some(false) => goal.push_str(", examiner's tests RED"),
            None => {}
        }
        out.push_str(&format!(
            "  attempt {}: {goal}, critic {}, {} violation(s), ${:.4}, {} turns\n",
            a.n,
            a.critic,
            a.violations.len(),
            a.cost_usd,
            a.turns
        ));
        for line in &a.gate_findings {
            out.push_str(&format!("    gate: {line}\n"));
        }
        for f in &a.scope_warnings {
            out.push_str(&format!(
                "    scope warning: `{f}` changed, but no finding named it\n"
            ));
        }
        for f in &a.allowed_changes {
            out.push_str(&format!("    {f} changed (allowed by [protect] allow)\n"));
        }
        for v in &a.violations {
            out.push_str(&format!("    {}\n", v.render()));
        }
    }
    out.push_str(&format!(
        "  total: ${:.4}, {} turns, {} in / {} out tokens, {:.1}s\n",
        s.totals.cost_usd,
        s.totals.turns,
        s.totals.input_tokens,
        s.totals.output_tokens,
        s.totals.wall_ms as f64 / 1000.0
    ));
    if let Some(c) = &s.stash_commit {
        out.push_str(&format!(
            "  work parked: `git -C {} stash apply {c}`\n",
            s.repo.display()
        ));
    }
    if let Some(f) = &s.failure_report {
        out.push_str(&format!("  report: `{}`\n", f.display()));
    }
    out.push_str(&format!("  run dir: `{}`\n", s.run_dir.display()));
    crate::util::printable(&out).into_owned()
}

/// The whole suite step's line: what ran, what passed at BASE_REF, and
/// its cost in time (every view says the same).
pub fn suite_line(s: &Summary) -> Option<String> {
    let suite = s.suite.as_ref()?;
    Some(format!(
        "whole suite `{}`: {} at BASE_REF; {:.1} s in all ({:.1} s at BASE_REF)",
        suite.command,
        suite
            .passing_at_base
            .map_or("compared by its output".to_owned(), |n| format!(
                "{n} tests passed"
            )),
        suite.total_ms as f64 / 1000.0,
        suite.baseline_ms as f64 / 1000.0
    ))
}

/// The examiner's line: its tests, what they said at BASE_REF, and its
/// own share of the spend (every view says the same).
pub fn examiner_line(s: &Summary) -> Option<String> {
    let e = s.examiner.as_ref()?;
    let what = match &e.why {
        Some(why) => format!("no test of it judges the job ({why})"),
        None => format!(
            "{} test file(s); at BASE_REF {} red (what the task asks), {} green, {} dropped",
            e.tests, e.failing_at_base, e.passing_at_base, e.dropped
        ),
    };
    let mut line = format!(
        "examiner `{}` ({}): {what}; ${:.4} ({} input / {} output tokens)",
        e.model, e.mode, e.cost_usd, e.input_tokens, e.output_tokens
    );
    for r in &e.ruled_wrong {
        line.push_str(&format!(
            "; `{}` ruled wrong by the critic at attempt {} (quoting {}: \"{}\"), dropped",
            r.test, r.attempt, r.found_in, r.quote
        ));
    }
    Some(line)
}
