//! Live progress (issue: what users see): `loopd run` prints each tool call
//! and phase as it happens; `loopd tail` and `loopd status -w` follow the
//! same lines from the journal.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::support::model::{Role, ScriptedModel, Turn};
use crate::support::*;

fn slow_clean_fix() -> ScriptedModel {
    let agent = session(vec![
        turn(vec![read("rechnung.py")]),
        turn(vec![write("rechnung.py", &clean_solution())]),
        // The session goes on for a while after the write: the line for it
        // must be out before the session ends.
        Turn {
            delay_ms: 3000,
            ..turn(vec![text("Done.")])
        },
    ]);
    ScriptedModel::start(scenario(vec![agent], vec![pass()]))
}

fn run_dir(env: &TestEnv) -> std::path::PathBuf {
    std::fs::read_dir(env.state.join("runs"))
        .expect("runs/")
        .next()
        .expect("one run")
        .expect("entry")
        .path()
}

/// The job's id: the name of its run directory.
fn job_id(env: &TestEnv) -> String {
    run_dir(env)
        .file_name()
        .expect("id")
        .to_string_lossy()
        .into_owned()
}

/// `loopd run` against `model`, its stderr read line by line as it comes.
fn spawn_run(
    env: &TestEnv,
    model: &ScriptedModel,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStderr>>,
) {
    let mut child = env
        .loopd(Some(model))
        .arg("run")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("loopd run");
    let stderr = child.stderr.take().expect("stderr");
    (child, BufReader::new(stderr).lines())
}

#[test]
fn run_prints_each_tool_call_and_phase_as_it_happens_and_tail_follows_it() {
    let env = TestEnv::new();
    let model = slow_clean_fix();
    let (mut child, mut lines) = spawn_run(&env, &model);
    let mut seen = Vec::new();
    let mut tail = None;
    for line in lines.by_ref() {
        let line = line.expect("a line");
        if line.contains("agent session started") && tail.is_none() {
            // Follow the job from another process while it runs.
            let id = job_id(&env);
            tail = Some(
                env.loopd(None)
                    .args(["tail", &id])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("loopd tail"),
            );
        }
        let write_line = line.contains("agent Write") && line.contains("rechnung.py · ok");
        seen.push(line);
        if write_line {
            // Printed when the call returned, not when the session ended.
            let finished = finished_sessions_in(&run_dir(&env));
            assert_eq!(
                finished, 0,
                "the Write line came only after the session ended"
            );
            assert!(
                model.session(Role::Agent, 0).len() < 4,
                "the session's last turn has not been answered yet"
            );
            break;
        }
    }
    seen.extend(lines.map(|l| l.expect("a line")));
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "{}", seen.join("\n"));
    let stderr = seen.join("\n");
    assert_contains_all(
        &stderr,
        &[
            "baseline: red at",
            "attempt 1: agent session started",
            "agent Read ",
            "agent Write ",
            "attempt 1: diff gate: passed",
            "attempt 1: goal test green",
            "attempt 1: pre-critic: passed",
            "attempt 1: critic session finished",
            "of $0.50 budget",
            "attempt 1: ACCEPTED",
        ],
        "the live progress lines",
    );

    // `tail` followed the job to its end by itself, and printed the lines
    // `run` printed, in the same order.
    let followed = tail
        .expect("tail started")
        .wait_with_output()
        .expect("tail");
    assert!(followed.status.success());
    let followed = String::from_utf8_lossy(&followed.stdout).into_owned();
    let id = job_id(&env);
    let once = env.exec(&["tail", &id, "--once"]);
    assert_eq!(once.code, 0, "{}", once.stderr);
    assert_eq!(
        followed, once.stdout,
        "following and reading afterwards agree"
    );
    let mut rest = stderr.as_str();
    for line in once.stdout.lines() {
        let at = rest
            .find(line)
            .unwrap_or_else(|| panic!("`{line}` is not among run's lines (in order):\n{stderr}"));
        rest = &rest[at + line.len()..];
    }
    // `status -w JOB` is the same follow.
    let watched = env.exec(&["status", "-w", &id]);
    assert_eq!(watched.stdout, once.stdout);
}

fn finished_sessions_in(run_dir: &std::path::Path) -> usize {
    journal_of(run_dir)
        .iter()
        .filter(|e| matches!(e, loopd::journal::Event::SessionFinished(_)))
        .count()
}

#[test]
fn quiet_prints_no_progress_lines() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = finish(
        env.loopd(Some(&model))
            .args(["-q", "run"])
            .output()
            .expect("loopd"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("agent Write"), "{}", r.stderr);
    assert!(!r.stderr.contains("session started"), "{}", r.stderr);
}

#[test]
fn tail_names_a_job_it_does_not_know() {
    let env = TestEnv::new();
    let r = env.exec(&["tail", "no-such-job"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_contains_all(
        &r.stderr,
        &["no journal for job `no-such-job`", "hint:"],
        "the error",
    );
}

#[test]
fn a_foreground_job_killed_mid_run_shows_as_interrupted_not_running() {
    let env = TestEnv::scripted();
    let model = slow_clean_fix();
    let (mut child, lines) = spawn_run(&env, &model);
    for line in lines {
        if line.expect("a line").contains("agent Write") {
            break;
        }
    }
    let id = job_id(&env);
    let running = env.exec(&["status", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&running.stdout).expect("json");
    assert_eq!(v["state"], "running", "{v}");
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    let after = env.exec(&["status", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&after.stdout).expect("json");
    assert_eq!(v["state"], "interrupted", "{v}");
    assert!(
        v["detail"].as_str().is_some_and(|d| d.contains("is gone")),
        "{v}"
    );
}
