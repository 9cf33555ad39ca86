//! `loopd run`: one job in the foreground (a laptop or a CI step).

use crate::cli::CliError;
use crate::config::{Job, JobFlags};
use crate::daemon::foreground::{self, Foreground, JobSpec};
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
    /// The job's id, e.g. one a scheduler derives (letters, digits and `-`,
    /// at most 64). If the state dir already holds this job, the run
    /// continues it as `loopd resume` would — nothing that finished runs or
    /// is billed again — and a job that has ended prints its summary and
    /// exits with its code: a retried pod or CI job is a resume, not a
    /// second bill.
    #[arg(long, value_name = "ID")]
    pub job_id: Option<String>,
    #[command(flatten)]
    pub credentials: crate::cli::CredentialArgs,
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
    Ok(job::ready(ws, job)?)
}

/// `progress`: print live progress lines on stderr (not with `-q`).
pub fn run(args: RunArgs, progress: bool) -> Result<ExitStatus, CliError> {
    if let Some(id) = &args.job_id {
        if !foreground::valid_id(id) || id.starts_with('-') {
            return Err(CliError::new(
                ExitStatus::Usage,
                format!("`--job-id {id}` is not a job id"),
            )
            .hint("letters, digits and `-` (not first), at most 64 characters"));
        }
    }
    let (ws, job) = prepare(&args.flags)?;
    // The credentials before anything is written: a bad credential file
    // leaves no trace.
    let mut control = crate::cli::foreground_control(&job, &ws, progress, &args.credentials)?;
    let id = args.job_id.clone().unwrap_or_else(crate::util::new_job_id);
    let run_dir = job.state_dir.join("runs").join(&id);
    // A new job starts from a clean tree; a job continued starts from the
    // tree it left.
    if crate::journal::load(&run_dir).job_id.is_none() {
        ready(&ws, &job)?;
    }
    // One process per job: a second pod of the same index, a re-run while
    // the first still runs, waits for nothing and bills nothing.
    let _lock = lock_job(&ws, &job, &run_dir, &id)?;
    let replay = crate::journal::load(&run_dir);
    if replay.job_id.is_some() {
        return continue_job(&args, control, ws, &job, &id, &replay);
    }
    // The job is recorded where the daemon's are, so `status`, `report`
    // and `resume` find it: its job file beside its journal, its state.
    control.job_id = Some(id.clone());
    let spec = spec_of(&ws, &job, &args.flags, &id)?;
    let record = Foreground::record(&run_dir, &job.state_dir, &spec).map_err(|e| {
        CliError::new(
            ExitStatus::Environment,
            format!("cannot record the job in `{}`: {e}", run_dir.display()),
        )
    })?;
    finish_foreground(&job, ws, control, record, args.json)
}

/// The job's run directory, created, and its lock, held while this
/// process lives ([`job::continued::lock`]). Held by another process: exit
/// 5 (an environment error a scheduler retries later), never a second
/// writer of one journal.
pub(crate) fn lock_job(
    ws: &Workspace,
    job: &Job,
    run_dir: &std::path::Path,
    id: &str,
) -> Result<crate::util::FileLock, CliError> {
    Ok(job::continued::lock(job, ws, run_dir, id)?)
}

/// The job file of a foreground job (what `loopd resume` reads its
/// settings from).
fn spec_of(ws: &Workspace, job: &Job, flags: &JobFlags, id: &str) -> Result<JobSpec, CliError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ws.root().to_path_buf());
    Ok(JobSpec {
        job_id: id.to_owned(),
        repo: ws.root().to_path_buf(),
        git_ref: "HEAD".into(),
        commit: ws.head_commit()?.to_string(),
        flags: flags.over.absolute(&cwd),
        task: job.task.clone(),
        goal: job.goal.iter().map(|s| s.run.clone()).collect(),
        submitted_at: crate::util::now_rfc3339(),
    })
}

/// `run --job-id` of a job the state dir already holds: its summary if it
/// has ended, else on from where its journal stops (after a `kill -9`, an
/// eviction, a reboot), in the tree it left ([`job::continued`] decides).
fn continue_job(
    args: &RunArgs,
    mut control: crate::job::Control,
    ws: Workspace,
    job: &Job,
    id: &str,
    replay: &crate::journal::Replay,
) -> Result<ExitStatus, CliError> {
    use crate::job::continued;
    let run_dir = job.state_dir.join("runs").join(id);
    let again = continued::again(job, &ws, id, replay)?;
    if let continued::Again::Ended(ending) = &again {
        // The summary is a view: trusted only where it says what the
        // journal says (else the ending is written again from it).
        if let Some(summary) = crate::util::read_untrusted(&run_dir.join("summary.json"), 16 << 20)
            .ok()
            .and_then(|t| serde_json::from_slice::<crate::record::Summary>(&t).ok())
            .filter(|s| s.job_id == id && s.reason == ending.reason)
        {
            tracing::info!(job_id = %id, reason = %summary.reason, "the job has ended; nothing to do");
            print_summary(&summary, args.json);
            return Ok(summary.reason.into());
        }
    }
    continued::ready(job, &ws, id, replay)?;
    control.job_id = Some(id.to_owned());
    continued::reopen(&run_dir, again)?;
    let record = Foreground::reopen(&run_dir, &job.state_dir, id, || {
        spec_of(&ws, job, &args.flags, id)
    })?;
    finish_foreground(job, ws, control, record, args.json)
}

/// Run (or continue) a foreground job to its end: its state for `loopd
/// status`, the webhooks, the human summary on stderr, `--json` on stdout.
pub fn finish_foreground(
    job: &Job,
    ws: Workspace,
    control: job::Control,
    mut record: Foreground,
    json: bool,
) -> Result<ExitStatus, CliError> {
    let rt = crate::cli::runtime()?;
    let progress = control.progress;
    let summary = match rt.block_on(job::run(job, ws, control)) {
        Ok(s) => s,
        Err(e) => {
            record.failed(&e.to_string());
            return Err(CliError::new(ExitStatus::Environment, e));
        }
    };
    let state = record.ended(&summary);
    // The final state is the journal's first: a run of the same
    // `--job-id` after this point prints the summary and does nothing.
    {
        let finalized = crate::journal::Journal::open(&summary.run_dir).and_then(|mut j| {
            if progress {
                j.observe(
                    crate::live::Progress {
                        budget_usd: Some(job.caps.limits.budget_usd),
                    }
                    .on_stderr(),
                );
            }
            match j.state().finalized {
                None => j.append(crate::journal::Event::Finalized { state }),
                Some(_) => Ok(()),
            }
        });
        if let Err(e) = finalized {
            tracing::error!(error = %e, "cannot journal the final state");
        }
    }
    rt.block_on(record.close(&job.notify, summary.escalation.clone()));
    print_summary(&summary, json);
    Ok(summary.reason.into())
}

/// The human summary on stderr; with `json`, the summary on stdout.
fn print_summary(summary: &crate::record::Summary, json: bool) {
    eprint!("{}", report::render_human(summary));
    if json {
        crate::cli::out!(
            "{}",
            serde_json::to_string(summary).expect("the summary serializes")
        );
    }
}
