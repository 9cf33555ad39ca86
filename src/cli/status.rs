//! `loopd status`: every job, or one.

use std::path::Path;

use serde_json::{json, Value};

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::daemon::spool::Spool;
use crate::daemon::state::{branch_name, JobState, Status};
use crate::outcome::ExitStatus;

/// Show the state of every job (or of JOB): queued, running, accepted,
/// exhausted, stopped, interrupted, error or cancelled, with the current
/// attempt, the spend so far, the branch and the report.
///
/// Example: `loopd status --json | jq '.[] | select(.state == "running")'`
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// One job's id.
    pub job: Option<String>,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Follow: with JOB, its progress lines until it ends (as `loopd tail`);
    /// without, the table again whenever it changes (until interrupted).
    #[arg(short = 'w', long, conflicts_with = "json")]
    pub watch: bool,
}

/// The status of every job the state dir knows, oldest first.
///
/// A job file only ever moves forward (incoming → running → done) while we
/// look, so the directories are scanned in that order and the last sighting
/// of a job wins: a job claimed or finished mid-scan is never missed.
pub fn collect(state_dir: &Path) -> Vec<Value> {
    let spool = Spool::new(state_dir);
    let mut seen = std::collections::BTreeMap::new();
    for (dir, default) in [
        ("incoming", Status::Queued),
        ("running", Status::Running),
        ("done", Status::Error),
    ] {
        for file in spool.list(dir) {
            let id = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let state = match dir {
                "incoming" => None,
                _ => JobState::load(state_dir, &id),
            };
            let mut v = match state {
                Some(st) => serde_json::to_value(&st).expect("a job state serializes"),
                None => match spool.read(&file) {
                    Ok(spec) => serde_json::to_value(JobState::new(&spec, default))
                        .expect("a job state serializes"),
                    Err(why) => {
                        json!({"job_id": id, "state": "error", "detail": why, "branch": branch_name(&id)})
                    }
                },
            };
            if dir == "running" {
                // Live progress comes from the journal, the job's truth.
                let replay = crate::journal::load(&state_dir.join("runs").join(&id));
                if replay.job_id.is_some() {
                    let attempt = replay
                        .current
                        .as_ref()
                        .map_or(replay.attempts.len() as u32, |c| c.attempt);
                    v["attempt"] = json!(attempt);
                    v["spent_usd"] = json!(crate::record::round_usd(replay.spend().cost_usd));
                }
            }
            seen.insert(id, v);
        }
    }
    // Jobs of `loopd run`: a state in their run directory, no spool file.
    for entry in std::fs::read_dir(state_dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let id = entry.file_name().to_string_lossy().into_owned();
        if seen.contains_key(&id) {
            continue;
        }
        let Some(st) = JobState::load(state_dir, &id).filter(|s| s.foreground) else {
            continue;
        };
        let mut v = serde_json::to_value(&st).expect("a job state serializes");
        if st.state == Status::Running && st.pid.is_some_and(|p| !is_loopd(p)) {
            // Killed (kill -9, OOM, a reboot) before it could say so.
            v["state"] = json!(Status::Interrupted.as_str());
            v["detail"] = json!(format!(
                "the `loopd run` process (pid {}) is gone: it was killed before the job ended; the agent's work is in the working tree as it left it",
                st.pid.unwrap_or(0)
            ));
        }
        if st.state == Status::Running {
            let replay = crate::journal::load(&entry.path());
            let attempt = replay
                .current
                .as_ref()
                .map_or(replay.attempts.len() as u32, |c| c.attempt);
            v["attempt"] = json!(attempt);
            v["spent_usd"] = json!(crate::record::round_usd(replay.spend().cost_usd));
        }
        seen.insert(id, v);
    }
    seen.into_values().collect()
}

/// Whether `pid` is a running loopd (a reused pid is someone else's).
fn is_loopd(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        c.split(|b| *b == 0)
            .next()
            .is_some_and(|exe| exe.ends_with(b"loopd"))
    })
}

pub fn status(args: StatusArgs) -> Result<ExitStatus, CliError> {
    let state_dir = state_dir_or_default(args.state_dir);
    if args.watch {
        if let Some(id) = &args.job {
            return crate::cli::tail::follow(&state_dir, id, true);
        }
        let mut last = String::new();
        loop {
            let now = table(&collect(&state_dir));
            if now != last {
                crate::cli::out!("{}\n", now.trim_end_matches('\n'));
                last = now;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let mut jobs = collect(&state_dir);
    if let Some(id) = &args.job {
        jobs.retain(|j| j["job_id"].as_str() == Some(id));
        if jobs.is_empty() {
            return Err(CliError::new(
                ExitStatus::Usage,
                format!("no job `{id}` in `{}`", state_dir.display()),
            )
            .hint("`loopd status` lists every job"));
        }
    }
    if args.json {
        let v = if args.job.is_some() {
            jobs[0].clone()
        } else {
            Value::Array(jobs)
        };
        crate::cli::out!("{v}");
        return Ok(ExitStatus::Success);
    }
    let mut out = String::new();
    if args.job.is_some() {
        let j = &jobs[0];
        for key in [
            "job_id",
            "state",
            "repo",
            "git_ref",
            "commit",
            "branch",
            "task",
            "attempt",
            "spent_usd",
            "reason",
            "detail",
            "commit_accepted",
            "stash_commit",
            "report",
        ] {
            if !j[key].is_null() && j[key] != "" {
                out.push_str(&format!(
                    "{key:<16} {}\n",
                    j[key]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| j[key].to_string())
                ));
            }
        }
        out.push_str("goal steps (the commands this job runs):\n");
        for g in j["goal"].as_array().into_iter().flatten() {
            out.push_str(&format!("  {}\n", g.as_str().unwrap_or("")));
        }
    } else if jobs.is_empty() {
        out.push_str(&format!(
            "no jobs yet in `{}`: `loopd run` runs one here, `loopd submit` queues one for the daemon",
            state_dir.display()
        ));
    } else {
        out = table(&jobs);
    }
    crate::cli::out!("{}", out.trim_end_matches('\n'));
    Ok(ExitStatus::Success)
}

/// The table of every job (`loopd status`).
fn table(jobs: &[Value]) -> String {
    let mut out = format!(
        "{:<24} {:<12} {:>7} {:>9}  {}\n",
        "JOB", "STATE", "ATTEMPT", "SPENT", "BRANCH"
    );
    for j in jobs {
        out.push_str(&format!(
            "{:<24} {:<12} {:>7} {:>9}  {}\n",
            j["job_id"].as_str().unwrap_or("?"),
            j["state"].as_str().unwrap_or("?"),
            j["attempt"].as_u64().unwrap_or(0),
            format!("${:.4}", j["spent_usd"].as_f64().unwrap_or(0.0)),
            match j["branch"].as_str() {
                Some(b) if !b.is_empty() => b,
                _ => "(foreground)",
            }
        ));
    }
    out
}
