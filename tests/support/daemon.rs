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
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn final_state(env: &TestEnv, id: &str) -> Value {
    wait_for(env, id, "a final state", |s| {
        !matches!(
            s["state"].as_str(),
            Some("queued" | "running" | "interrupted")
        )
    })
}
