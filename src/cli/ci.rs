//! `loopd ci`: `loopd run` for a CI job, then the autofix gate.

use crate::ci::github::{self, Actions, Api};
use crate::ci::{self, CiReport};
use crate::cli::run::prepare;
use crate::cli::CliError;
use crate::config::JobFlags;
use crate::job;
use crate::outcome::{ExitStatus, Outcome};

/// Try a gated autofix of the checked-out failing commit (GitHub Actions).
///
/// Example (a step after a failing test step):
/// `loopd ci --task "Make the tests pass" --goal "python3 -m pytest -q"`
///
/// Runs the loop with the small `[ci]` budget; only an accepted fix that
/// passes every gate and the risk policy is pushed to
/// `loopd/autofix/<short-sha>` as a pull request against the failing branch.
/// Exit 0 when a pull request with a verified fix exists (now or from an
/// earlier run), 0 on loopd's own branches (nothing to do), 2 for a refused
/// fork event, 3 when the fix failed the risk policy, otherwise `loopd run`'s
/// code. The failing build itself stays red: its own job already failed.
#[derive(Debug, clap::Args)]
pub struct CiArgs {
    #[command(flatten)]
    pub flags: JobFlags,
    /// The remote to push the fix to.
    #[arg(long, default_value = "origin")]
    pub remote: String,
    /// Print the decision as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn finish(args: &CiArgs, actions: &Actions, report: CiReport) -> ExitStatus {
    if let Some(path) = &actions.step_summary {
        ci::write_step_summary(path, &report);
    }
    eprintln!(
        "loopd ci: {}: {}",
        report.decision.replace('_', " "),
        report.why
    );
    if let Some(s) = &report.summary {
        eprintln!(
            "loopd ci: report files for upload: `{}`",
            s.run_dir.display()
        );
    }
    let status = match report.decision.as_str() {
        "pull_request_opened" | "pull_request_exists" | "skipped" => ExitStatus::Accepted,
        "refused" => ExitStatus::Usage,
        "gate_refused" => ExitStatus::Guard,
        _ => report
            .summary
            .as_ref()
            .map_or(ExitStatus::Environment, |s| s.reason.into()),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("a report serializes")
        );
    }
    status
}

pub fn ci(args: CiArgs) -> Result<ExitStatus, CliError> {
    let actions = Actions::from_env().map_err(|e| {
        CliError::new(ExitStatus::Usage, e)
            .hint("`loopd ci` runs in GitHub Actions; use `loopd run` elsewhere")
    })?;
    let rt = crate::cli::runtime()?;
    let base = |decision: &str, why: String| CiReport {
        decision: decision.into(),
        why,
        sha: actions.sha.clone(),
        branch: None,
        pull_request: None,
        risk_violations: vec![],
        summary: None,
    };

    let (ws, mut job) = prepare(&args.flags)?;
    // No recursion: never on loopd's own branches or commits.
    if let Some(why) = ci::is_loopd_work(&actions.branch, &ws) {
        return Ok(finish(
            &args,
            &actions,
            base("skipped", format!("nothing to do: {why}")),
        ));
    }
    if actions.from_fork && !job.ci.allow_forks {
        return Ok(finish(
            &args,
            &actions,
            base("refused", format!("the `{}` event comes from a fork; loopd does not run with this repository's secrets on it (set `[ci] allow_forks = true` to allow)", actions.event_name)),
        ));
    }
    let token = github::token_from_env().map_err(|e| CliError::new(ExitStatus::Usage, e))?;
    let api = Api::new(&actions.api_url, &actions.repository, token.clone())
        .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    let branch = ci::autofix_branch(&actions.sha);
    // At most one pull request per failing commit.
    match rt.block_on(api.find_pull(&branch)) {
        Ok(Some(pr)) => {
            let mut r = base(
                "pull_request_exists",
                format!(
                    "an autofix for {} already exists: #{}",
                    actions.sha, pr.number
                ),
            );
            r.pull_request = Some(pr);
            return Ok(finish(&args, &actions, r));
        }
        Ok(None) => {}
        Err(e) => return Err(CliError::new(ExitStatus::Environment, e)),
    }

    // The loop, on the small CI budget unless the flags say otherwise.
    if args.flags.budget_usd.is_none() {
        job.caps.budget_usd = job.ci.budget_usd;
    }
    if args.flags.max_attempts.is_none() {
        job.max_attempts = job.ci.max_attempts;
    }
    crate::cli::run::ready(&ws, &job)?;
    let repo_root = ws.root().to_path_buf();
    let control = crate::cli::foreground_control()?;
    let summary = rt
        .block_on(job::run(&job, ws, control))
        .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    if summary.outcome != Outcome::Accepted {
        let _ = rt.block_on(api.set_status(
            &actions.sha,
            "failure",
            &format!("no verified fix: {}", summary.reason),
            actions.run_url.as_deref(),
        ));
        let mut r = base(
            "not_accepted",
            format!(
                "no fix was accepted ({}): {}",
                summary.reason, summary.detail
            ),
        );
        r.summary = Some(summary);
        return Ok(finish(&args, &actions, r));
    }

    // The autofix gate, in code: accepted (every deterministic gate green)
    // and the risk policy.
    let ws = crate::workspace::Workspace::open(&repo_root)?;
    let diff = ws.diff_since(ws.head_commit()?)?;
    let violations = job.ci.violations(&diff);
    if !violations.is_empty() {
        let _ = rt.block_on(api.set_status(
            &actions.sha,
            "failure",
            "a fix was found but fails the risk policy",
            actions.run_url.as_deref(),
        ));
        let mut r = base(
            "gate_refused",
            format!(
                "the fix was accepted but not pushed: {}",
                violations.join("; ")
            ),
        );
        r.risk_violations = violations;
        r.summary = Some(summary);
        return Ok(finish(&args, &actions, r));
    }

    // The one outward step.
    let message = format!(
        "loopd: autofix for {}\n\n{}\n\n{} {}\n",
        &actions.sha[..actions.sha.len().min(12)],
        summary.task,
        ci::TRAILER,
        summary.job_id
    );
    ci::commit_to_branch(&repo_root, &branch, &message).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!("cannot commit the fix: {e}"),
        )
    })?;
    github::push(
        &repo_root,
        &args.remote,
        &format!("refs/heads/{branch}"),
        &format!("refs/heads/{branch}"),
        Some(&token),
    )
    .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    let baseline =
        std::fs::read_to_string(summary.run_dir.join("baseline.txt")).unwrap_or_default();
    let body = ci::pr_body(
        &summary,
        &crate::goal::head_and_tail(&baseline, 3000),
        actions.run_url.as_deref(),
    );
    let title = format!("loopd autofix: {}", summary.headline());
    let pr = rt
        .block_on(api.create_pull(&branch, &actions.branch, &title, &body))
        .map_err(|e| CliError::new(ExitStatus::Environment, e))?;
    let _ = rt.block_on(api.set_status(
        &actions.sha,
        "success",
        &format!("a verified fix is proposed in #{}", pr.number),
        Some(&pr.url),
    ));
    let mut r = base(
        "pull_request_opened",
        format!(
            "pushed `{branch}` and opened #{} against `{}`",
            pr.number, actions.branch
        ),
    );
    r.branch = Some(branch);
    r.pull_request = Some(pr);
    r.summary = Some(summary);
    Ok(finish(&args, &actions, r))
}
