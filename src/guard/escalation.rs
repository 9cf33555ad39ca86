//! The agent's approved exit: `loopd escalate --test ID --reason TEXT`.
//!
//! An agent facing a task it cannot do honestly — a test that contradicts
//! the specification — either cheats or burns the remaining attempts, unless
//! it has a way to say so. Each agent session gets one: two variables in its
//! environment (so only the job's own processes know them) name the file the
//! command writes, inside the job's private run directory, and the job's id.
//! The job reads the file after the session (the [`Watch`](super::Watch)
//! stops the session as soon as the command's tool result arrives), verifies
//! it names this job, journals it, and ends with `needs_human`
//! (`escalated`). An escalation is never accepted as a fix; the work is
//! parked like any other ending but acceptance, and `loopd resume JOB
//! --note TEXT` carries the human's answer into the next attempt.
//!
//! `[guard] escalation = false` in `loopd.toml` takes the exit away: no
//! variables, no paragraph in the prompt, no permission for the command.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file the command writes; set in the agent session's environment.
pub const PATH_VAR: &str = "LOOPD_ESCALATION";
/// The job the session belongs to; the command records it, loopd checks it.
pub const JOB_VAR: &str = "LOOPD_JOB_ID";
/// The directory of the run directory the command writes in: one the
/// sandbox leaves writable (the rest of the state dir is hidden).
pub const DIR: &str = "escalation";

/// What `loopd escalate` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub job_id: String,
    pub test: String,
    pub reason: String,
    pub ts: String,
}

/// Where the escalation of the attempt in `attempt_dir`
/// (`runs/<id>/attempt-<n>`) goes: `runs/<id>/escalation/attempt-<n>.json`.
pub fn file(attempt_dir: &Path) -> PathBuf {
    let name = attempt_dir
        .file_name()
        .map_or_else(|| "attempt".into(), |n| n.to_string_lossy().into_owned());
    attempt_dir
        .parent()
        .unwrap_or(attempt_dir)
        .join(DIR)
        .join(format!("{name}.json"))
}

/// Read and verify the escalation at `path` for job `job_id`: `None` when
/// there is none, `Some(Err(why))` when the file is not one this job's
/// command wrote.
pub fn read(path: &Path, job_id: &str) -> Option<Result<Request, String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("cannot read `{}`: {e}", path.display()))),
    };
    let req: Request = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            return Some(Err(format!(
                "`{}` is not an escalation: {e}",
                path.display()
            )))
        }
    };
    Some(if req.job_id != job_id {
        Err(format!(
            "`{}` names job `{}`, not `{job_id}`",
            path.display(),
            req.job_id
        ))
    } else if req.test.trim().is_empty() || req.reason.trim().is_empty() {
        Err("an escalation must name a test and give a reason".into())
    } else {
        Ok(req)
    })
}

/// Write a request (the command's side): atomically, and only once — a
/// second escalation in the same attempt changes nothing.
pub fn write(path: &Path, req: &Request) -> std::io::Result<bool> {
    if path.exists() {
        return Ok(false);
    }
    crate::util::write_json_atomic(path, req)?;
    Ok(true)
}

/// The command line the agent runs, as the prompt shows it.
pub fn command(loopd_exe: &Path) -> String {
    format!(
        "{} escalate",
        crate::util::shell_quote(&loopd_exe.to_string_lossy())
    )
}

/// The permission rule that lets the agent's Bash tool run it.
pub fn allowed_tool(loopd_exe: &Path) -> String {
    format!("Bash({} *)", command(loopd_exe))
}

/// The paragraph of the first prompt that explains the exit.
pub fn paragraph(loopd_exe: &Path) -> String {
    format!(
        "If the task cannot be done honestly — for example a test contradicts the specification or the docstring — do not special-case, skip or weaken anything. Run `{} --test <test id> --reason \"<why, quoting the spec>\"` instead: the job then ends, a human decides, and an escalation is never counted as a fix.",
        command(loopd_exe)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_jobs_escalation_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file(&dir.path().join("attempt-2"));
        assert_eq!(path, dir.path().join("escalation").join("attempt-2.json"));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        assert!(read(&path, "j1").is_none());
        let req = Request {
            job_id: "j1".into(),
            test: "tests/test_x.py::test_y".into(),
            reason: "the docstring says otherwise".into(),
            ts: "t".into(),
        };
        assert!(write(&path, &req).expect("write"));
        assert!(!write(&path, &req).expect("second write is a no-op"));
        assert_eq!(read(&path, "j1"), Some(Ok(req)));
        assert!(read(&path, "j2").expect("a file").is_err());
        std::fs::write(&path, "{}").expect("write");
        assert!(read(&path, "j1").expect("a file").is_err());
    }

    #[test]
    fn the_rule_allows_exactly_the_command() {
        let exe = Path::new("/opt/loopd/bin/loopd");
        assert_eq!(allowed_tool(exe), "Bash(/opt/loopd/bin/loopd escalate *)");
        assert!(paragraph(exe).contains("`/opt/loopd/bin/loopd escalate --test <test id>"));
    }
}
