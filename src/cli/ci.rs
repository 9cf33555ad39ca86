//! `loopd ci`: `loopd run` for a CI job, then the autofix gate
//! ([`crate::ci::autofix`]).

use crate::ci::autofix::{self, Autofix, CiError};
use crate::ci::event::PrEvent;
use crate::ci::follow::{self, Follow};
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
    /// This run is a push to a base branch: start a merge round (a
    /// `repository_dispatch` `loopd-merge`) for each pull request loopd
    /// follows into it that no longer merges; no job runs here.
    #[arg(long)]
    pub base_pushed: bool,
}

/// The events only a pull request loopd follows has: with nothing to
/// answer in one, there is nothing to do (never an autofix).
const PR_EVENTS: &[&str] = &[
    "issue_comment",
    "pull_request_review",
    "pull_request_review_comment",
    "check_run",
];

/// The round this run answers, if it is one: a comment, review or command
/// on a pull request, or a check that failed on one of loopd's own
/// branches (a failed run elsewhere is the autofix's: a red build gets its
/// pull request, as before).
fn follows(actions: &Actions) -> Result<Option<PrEvent>, String> {
    Ok(
        match PrEvent::parse(&actions.event_name, &actions.payload)? {
            Some(PrEvent::CheckFailed { .. }) if !actions.branch.starts_with("loopd/") => None,
            other => other,
        },
    )
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
/// With `--json`, every run prints one object: a refusal before anything
/// ran (no event, no repository, a bad configuration) is decision `error`.
pub fn ci(args: CiArgs, progress: bool) -> Result<ExitStatus, CliError> {
    let json = args.json;
    let result = run(args, progress);
    if let (true, Err(e)) = (json, &result) {
        let why = match &e.hint {
            Some(h) => format!("{} (hint: {h})", e.message),
            None => e.message.clone(),
        };
        let sha = std::env::var("GITHUB_SHA").unwrap_or_default();
        let report = CiReport::new(ci::Decision::Error, why, &sha);
        crate::cli::out!(
            "{}",
            serde_json::to_string(&report).expect("a report serializes")
        );
    }
    result
}

fn run(args: CiArgs, progress: bool) -> Result<ExitStatus, CliError> {
    let actions = Actions::from_env().map_err(|e| {
        CliError::new(ExitStatus::Usage, e)
            .hint("`loopd ci` runs in GitHub Actions; use `loopd run` elsewhere")
    })?;
    let rt = crate::cli::runtime()?;
    if args.base_pushed {
        // No job runs here: no agent CLI, no model credential is needed.
        let ws = crate::workspace::Workspace::open(&args.flags.repo)?;
        let job = crate::config::Job::resolve(&args.flags, ws.root())?;
        return outcome(&args, &actions, rt.block_on(follow::sweep(&actions, &job)));
    }
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
    let event = follows(&actions).map_err(|message| {
        let path = std::env::var_os("GITHUB_EVENT_PATH").unwrap_or_default().into();
        CliError::new(ExitStatus::Usage, GitHubError::Event { path, message })
            .hint("the payload GitHub Actions writes for the event is read as GitHub documents it; a hand-made event file must have the same fields")
    })?;
    let result = match event {
        Some(event) => rt.block_on(follow::run(
            Follow {
                actions: &actions,
                event,
                job: fix.job,
                ws: fix.ws,
                remote: fix.remote,
                budget_from_flags: fix.budget_from_flags,
                attempts_from_flags: fix.attempts_from_flags,
            },
            ready,
            move || control,
        )),
        None if PR_EVENTS.contains(&actions.event_name.as_str()) => Ok(CiReport::new(
            ci::Decision::Skipped,
            format!("nothing to answer in this `{}` event", actions.event_name),
            &actions.sha,
        )),
        None => rt.block_on(autofix::run(fix, ready, move || control)),
    };
    outcome(&args, &actions, result)
}

/// The report's exit code, or the error's, the step summary written either way.
fn outcome(
    args: &CiArgs,
    actions: &Actions,
    outcome: Result<CiReport, CiError>,
) -> Result<ExitStatus, CliError> {
    match outcome {
        Ok(report) => Ok(finish(args, actions, report)),
        Err(e) => {
            // The step summary says what happened, whatever happened
            // (and `--json`, in [`ci`]).
            if let Some(path) = &actions.step_summary {
                let report = CiReport::new(ci::Decision::Error, e.to_string(), &actions.sha);
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
                CiError::Continue(c) => CliError::from(c),
                e => CliError::new(ExitStatus::Environment, e),
            })
        }
    }
}
