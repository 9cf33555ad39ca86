//! `loopd ci`: `loopd run` for a CI job, then the autofix gate
//! ([`crate::ci::autofix`]).

use crate::ci::autofix::{self, Autofix, CiError};
use crate::ci::github::{Actions, GitHubError};
use crate::ci::{self, CiReport};
use crate::cli::run::prepare;
use crate::cli::CliError;
use crate::config::JobFlags;
use crate::outcome::ExitStatus;

/// Try a gated autofix of the checked-out failing commit (GitHub Actions).
///
/// Example (a step after a failing test step):
/// `loopd ci --task "Make the tests pass" --goal "python3 -m pytest -q"`
///
/// Runs the loop with the small `[ci]` budget; only an accepted fix that
/// passes every gate and the risk policy is pushed to
/// `loopd/autofix/<short-sha>` as a pull request against the failing branch.
/// The push goes to `GITHUB_SERVER_URL/GITHUB_REPOSITORY.git` (else the
/// remote's URL, read before the agent runs), over https only.
/// Exit 0 when a pull request with a verified fix exists (now or from an
/// earlier run), 0 on loopd's own branches (nothing to do), 2 for a refused
/// fork event or a missing token, 3 when the fix failed the risk policy, 5
/// when the GitHub API or the push failed, otherwise `loopd run`'s code. The
/// failing build itself stays red: its own job already failed.
#[derive(Debug, clap::Args)]
pub struct CiArgs {
    #[command(flatten)]
    pub flags: JobFlags,
    #[command(flatten)]
    pub credentials: crate::cli::CredentialArgs,
    /// Outside GitHub Actions (no `GITHUB_SERVER_URL`): the remote whose URL,
    /// read before the agent runs, the fix is pushed to.
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
    eprintln!("loopd ci: {}: {}", report.decision.as_str(), report.why);
    if let Some(s) = &report.summary {
        eprintln!(
            "loopd ci: report files for upload: `{}`",
            s.run_dir.display()
        );
    }
    if args.json {
        crate::cli::out!(
            "{}",
            serde_json::to_string(&report).expect("a report serializes")
        );
    }
    report
        .decision
        .exit_status(report.summary.as_ref().map(|s| s.reason))
}

/// `progress`: print live progress lines on stderr (not with `-q`).
pub fn ci(args: CiArgs, progress: bool) -> Result<ExitStatus, CliError> {
    let actions = Actions::from_env().map_err(|e| {
        CliError::new(ExitStatus::Usage, e)
            .hint("`loopd ci` runs in GitHub Actions; use `loopd run` elsewhere")
    })?;
    let rt = crate::cli::runtime()?;
    let (ws, job) = prepare(&args.flags)?;
    let control = crate::cli::foreground_control(&job, &ws, progress, &args.credentials)?;
    let fix = Autofix {
        actions: &actions,
        job,
        ws,
        remote: &args.remote,
        budget_from_flags: args.flags.budget_usd.is_some(),
        attempts_from_flags: args.flags.max_attempts.is_some(),
    };
    let ready = |ws: &crate::workspace::Workspace, job: &crate::config::Job| {
        crate::job::ready(ws, job).map_err(CiError::from)
    };
    match rt.block_on(autofix::run(fix, ready, move || control)) {
        Ok(report) => Ok(finish(&args, &actions, report)),
        Err(e) => {
            // The step summary says what happened, whatever happened.
            if let Some(path) = &actions.step_summary {
                let report = CiReport {
                    decision: ci::Decision::Error,
                    why: e.to_string(),
                    sha: actions.sha.clone(),
                    branch: None,
                    push_url: None,
                    pull_request: None,
                    risk_violations: vec![],
                    summary: None,
                };
                ci::write_step_summary(path, &report);
            }
            Err(match e {
                CiError::GitHub(g) => {
                    let status = match g {
                        GitHubError::NoToken | GitHubError::PushTarget { .. } => ExitStatus::Usage,
                        _ => ExitStatus::Environment,
                    };
                    let hint = g.hint();
                    let err = CliError::new(status, g);
                    match hint {
                        Some(h) => err.hint(h),
                        None => err,
                    }
                }
                CiError::Workspace(w) => CliError::from(w),
                e => CliError::new(ExitStatus::Environment, e),
            })
        }
    }
}
