//! `loopd run`: one job in the foreground (a laptop or a CI step).

use crate::cli::CliError;
use crate::config::{Job, JobFlags};
use crate::daemon::spool::JobSpec;
use crate::daemon::state::{JobState, Status};
use crate::daemon::worker::notify_end;
use crate::job;
use crate::outcome::ExitStatus;
use crate::report;
use crate::workspace::Workspace;

/// Run the agent in a loop on a repository until the goal test and the critic
/// accept its change, or a guard stops it.
///
/// Example: `loopd run -C ~/src/app --task "Make the tests pass" --goal "python3 -m pytest -q"`
///
/// Exit codes: 0 accepted, 1 attempts exhausted, 2 usage or config error,
/// 3 stopped by a guard, 4 interrupted by a signal, 5 environment error,
/// 6 the agent escalated (needs a human), 7 nothing to fix (the goal test
/// was green before any attempt).
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub flags: JobFlags,
    /// Print the final summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Open the repository, resolve the job and check everything that can be
/// checked before a file is touched. Shared with `check`.
pub fn prepare(flags: &JobFlags) -> Result<(Workspace, Job), CliError> {
    let ws = Workspace::open(&flags.repo)?;
    let mut job = Job::resolve(flags, ws.root())?;
    job.locate_clis()
        .map_err(|(what, hint)| CliError::new(ExitStatus::Environment, what).hint(hint))?;
    Ok((ws, job))
}

/// The last checks before a foreground job touches anything: a clean tree
/// and a state dir to write to.
pub fn ready(ws: &Workspace, job: &Job) -> Result<(), CliError> {
    job::ready(ws, job).map_err(|e| match e {
        job::JobError::Workspace(w) => CliError::from(w),
        job::JobError::StateDir(s) => {
            let hint = s.hint();
            CliError::new(ExitStatus::Environment, s).hint(hint)
        }
        e => CliError::new(ExitStatus::Environment, e),
    })
}

/// `progress`: print live progress lines on stderr (not with `-q`).
pub fn run(args: RunArgs, progress: bool) -> Result<ExitStatus, CliError> {
    let (ws, job) = prepare(&args.flags)?;
    ready(&ws, &job)?;
    let mut control = crate::cli::foreground_control(&job, progress)?;
    // The job is recorded where the daemon's are, so `status`, `report`
    // and `resume` find it: its job file beside its journal, its state.
    let id = crate::util::new_job_id();
    control.job_id = Some(id.clone());
    let cwd = std::env::current_dir().unwrap_or_else(|_| ws.root().to_path_buf());
    let spec = JobSpec {
        job_id: id.clone(),
        repo: ws.root().to_path_buf(),
        git_ref: "HEAD".into(),
        commit: ws.head_commit()?.to_string(),
        flags: args.flags.over.absolute(&cwd),
        task: job.task.clone(),
        goal: job.goal.iter().map(|s| s.run.clone()).collect(),
        submitted_at: crate::util::now_rfc3339(),
    };
    let run_dir = job.state_dir.join("runs").join(&id);
    crate::util::private_dir(&run_dir)
        .and_then(|()| crate::util::write_json_atomic(&run_dir.join(SPEC_FILE), &spec))
        .map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot record the job in `{}`: {e}", run_dir.display()),
            )
        })?;
    let mut state = JobState::foreground(&spec);
    state.save(&job.state_dir);
    finish_foreground(&job, ws, control, state, args.json)
}

/// A foreground job's job file in its run directory (what `loopd resume`
/// reads its settings from).
pub const SPEC_FILE: &str = "spec.json";

/// Run (or continue) a foreground job to its end: its state for `loopd
/// status`, the webhooks, the human summary on stderr, `--json` on stdout.
pub fn finish_foreground(
    job: &Job,
    ws: Workspace,
    control: job::Control,
    mut state: JobState,
    json: bool,
) -> Result<ExitStatus, CliError> {
    let rt = crate::cli::runtime()?;
    let summary = match rt.block_on(job::run(job, ws, control)) {
        Ok(s) => s,
        Err(e) => {
            state.state = Status::Error;
            state.reason = Some(crate::outcome::Reason::InternalError.to_string());
            state.detail = Some(e.to_string());
            state.save(&job.state_dir);
            return Err(CliError::new(ExitStatus::Environment, e));
        }
    };
    state.fill_from(&summary);
    state.save(&job.state_dir);
    rt.block_on(notify_end(&job.notify, &state, summary.escalation.clone()));
    eprint!("{}", report::render_human(&summary));
    if json {
        crate::cli::out!(
            "{}",
            serde_json::to_string(&summary).expect("the summary serializes")
        );
    }
    Ok(summary.reason.into())
}
