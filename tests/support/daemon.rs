//! Driving `loopd daemon` and its queue from tests.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::model::ScriptedModel;
use super::{finish, send_signal, TestEnv};

/// A running `loopd daemon`, logging to `daemon.log` in the test's temp dir.
pub struct Daemon {
    child: Child,
}

impl Daemon {
    pub fn start(env: &TestEnv, model: &ScriptedModel, jobs: usize) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(env.tmp.path().join("daemon.log"))
            .expect("log");
        let child = env
            .loopd(Some(model))
            .args(["daemon", "--jobs", &jobs.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn daemon");
        Daemon { child }
    }

    pub fn signal(&self, sig: i32) {
        send_signal(self.child.id(), sig);
    }

    pub fn wait(mut self, within: Duration) -> i32 {
        let until = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < until,
                "the daemon did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn submit(env: &TestEnv, args: &[&str]) -> String {
    let r = finish(
        env.loopd(None)
            .args(["submit", "--json"])
            .args(args)
            .output()
            .expect("submit"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("json");
    v["job_id"].as_str().expect("job_id").to_owned()
}

pub fn status(env: &TestEnv, id: &str) -> Value {
    let r = finish(
        env.loopd(None)
            .args(["status", id, "--json"])
            .output()
            .expect("status"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(r.stdout.trim()).expect("json")
}

/// Wait (bounded) until `pred` holds for the job's status.
pub fn wait_for(env: &TestEnv, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_for_within(env, id, what, Duration::from_secs(90), pred)
}

/// [`wait_for`] with its own bound (a failure guard, never a timing claim).
pub fn wait_for_within(
    env: &TestEnv,
    id: &str,
    what: &str,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + within;
    loop {
        let s = status(env, id);
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < until,
            "job {id} never got {what}: {s}\ndaemon log:\n{}",
            std::fs::read_to_string(env.tmp.path().join("daemon.log")).unwrap_or_default()
        );
        // The next `loopd status` (a process) when what it reads changed,
        // at the latest after a second (a process that died changes no
        // file); looking is a few syscalls, asking is a process start.
        let seen = status_inputs(env, id);
        let recheck = Instant::now() + Duration::from_secs(1);
        while status_inputs(env, id) == seen && Instant::now() < recheck {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// What `loopd status` of job `id` is made of, as sizes and times: its
/// state file, its run dir's files and the spool's listing.
fn status_inputs(env: &TestEnv, id: &str) -> Vec<(String, u64, Option<std::time::SystemTime>)> {
    let mut seen = Vec::new();
    let mut look = |dir: std::path::PathBuf| {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let meta = entry.metadata().ok();
            seen.push((
                entry.path().to_string_lossy().into_owned(),
                meta.as_ref().map_or(0, |m| m.len()),
                meta.and_then(|m| m.modified().ok()),
            ));
        }
    };
    look(env.state.join("runs").join(id));
    for dir in ["incoming", "running", "done", "rejected", "cancel"] {
        look(env.state.join("spool").join(dir));
    }
    seen
}

pub fn final_state(env: &TestEnv, id: &str) -> Value {
    wait_for(env, id, "a final state", |s| {
        !matches!(
            s["state"].as_str(),
            Some("queued" | "running" | "interrupted")
        )
    })
}
