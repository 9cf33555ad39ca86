//! `kill -9` at every named crash point (issue: the journal is the truth).
//!
//! A crash-free run of the daemon first records every crash point its jobs
//! pass (`LOOPD_CRASH_TRACE`); then, for each point and each time it is
//! reached, a fresh daemon is killed there (`LOOPD_CRASH_AT=point#k`, a
//! SIGKILL from inside — exactly `kill -9`, at exactly that instant) and a
//! second daemon is started on the same state dir. Every walk must end with
//! the job accepted, every finished session having reached the model exactly
//! once, the spend equal to the crash-free run's, no job left non-final, and
//! the user's checkout untouched. The crash points exist only in builds with
//! the `failpoints` feature, which the test command turns on.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::daemon::*;
use crate::support::model::{Role, Scenario, ScriptedModel};
use crate::support::*;

/// Critic FAIL → a second attempt → critic PASS → commit.
fn fail_then_pass() -> Scenario {
    scenario(
        vec![
            agent_writes(&dirty_solution()),
            agent_writes(&clean_solution()),
        ],
        vec![
            fail(
                2,
                "rechnung.py",
                "a debug print was added",
                "remove the print",
            ),
            pass(),
        ],
    )
}

/// A daemon started with extra environment, killed or not by a crash point.
fn daemon_with(env: &TestEnv, model: &ScriptedModel, jobs: usize, vars: &[(&str, &str)]) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.tmp.path().join("daemon.log"))
        .expect("log");
    let mut cmd = env.loopd(Some(model));
    cmd.args(["daemon", "--jobs", &jobs.to_string()])
        .stdout(Stdio::null())
        .stderr(log);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn daemon")
}

/// What a finished walk (or the crash-free run) leaves, for comparison.
#[derive(Debug, PartialEq)]
struct Outcome {
    states: Vec<String>,
    cost_usd: Vec<f64>,
    tokens: Vec<(u64, u64)>,
    attempts: Vec<usize>,
}

fn outcome(env: &TestEnv, ids: &[String]) -> Outcome {
    let mut o = Outcome {
        states: vec![],
        cost_usd: vec![],
        tokens: vec![],
        attempts: vec![],
    };
    for id in ids {
        let s = final_state(env, id);
        let sum: Value = serde_json::from_str(
            &std::fs::read_to_string(s["summary"].as_str().expect("summary path"))
                .expect("summary"),
        )
        .expect("json");
        o.states.push(s["state"].as_str().expect("state").to_owned());
        o.cost_usd
            .push((sum["totals"]["cost_usd"].as_f64().expect("cost") * 1e9).round() / 1e9);
        o.tokens.push((
            sum["totals"]["input_tokens"].as_u64().expect("in"),
            sum["totals"]["output_tokens"].as_u64().expect("out"),
        ));
        o.attempts
            .push(sum["attempts"].as_array().expect("attempts").len());
    }
    o
}

/// Run `jobs` jobs to their end on a fresh daemon, optionally killed at
/// `crash` and restarted. Returns the outcome and the crash points passed.
fn walk(jobs: usize, crash: Option<&str>) -> (Outcome, Vec<String>) {
    let env = TestEnv::new();
    let model = ScriptedModel::start_per_dir(fail_then_pass());
    let head = env.git(&["rev-parse", "HEAD"]);
    let ids: Vec<String> = (0..jobs).map(|_| submit(&env, &[])).collect();
    let trace = env.tmp.path().join("crash-trace.txt");
    let trace_s = trace.to_string_lossy().into_owned();
    let mut vars = vec![("LOOPD_CRASH_TRACE", trace_s.as_str())];
    if let Some(point) = crash {
        vars.push(("LOOPD_CRASH_AT", point));
        let mut first = daemon_with(&env, &model, jobs, &vars);
        let until = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = first.try_wait().expect("try_wait") {
                break s;
            }
            assert!(Instant::now() < until, "the daemon never reached crash point {point}");
            std::thread::sleep(Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "killed at {point}, not {status:?}");
        vars.retain(|(k, _)| *k != "LOOPD_CRASH_AT");
    }
    let mut daemon = daemon_with(&env, &model, jobs, &vars);
    let out = outcome(&env, &ids);
    let log = || std::fs::read_to_string(env.tmp.path().join("daemon.log")).unwrap_or_default();
    // Each finished session reached the scripted model exactly once: per
    // job, two agent sessions and two critic sessions, never a third.
    for role in [Role::Agent, Role::Critic] {
        let counts = model.session_counts_per_dir(role);
        assert_eq!(counts.len(), jobs, "{role:?} sessions per job at {crash:?}: {counts:?}\n{}", log());
        for (dir, n) in counts {
            assert_eq!(n, 2, "{role:?} sessions in {dir} at {crash:?}\n{}", log());
        }
    }
    assert!(model.unscripted().is_empty(), "unscripted requests at {crash:?}");
    // No job left non-final: the restarted daemon empties `running/` (a
    // state.json can be final before its spool file moves, so wait for it).
    let until = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(env.state.join("spool/running")).expect("running").count() > 0 {
        assert!(Instant::now() < until, "a job stayed in running/ at {crash:?}\n{}", log());
        std::thread::sleep(Duration::from_millis(20));
    }
    for id in &ids {
        assert_eq!(
            env.git(&["show", &format!("loopd/{id}:rechnung.py")]),
            clean_solution(),
            "the accepted change is on the job's branch ({crash:?})"
        );
    }
    // The user's checkout is untouched.
    assert_eq!(env.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert_eq!(env.read_repo("rechnung.py"), fixture("rechnung/repo/rechnung.py"));
    let _ = daemon.kill();
    let _ = daemon.wait();
    let points = std::fs::read_to_string(&trace).unwrap_or_default();
    (out, points.lines().map(str::to_owned).collect())
}

/// Every point a crash-free run passes, each as `point#k`; then a walk per
/// point, two at a time.
fn walk_every_point(jobs: usize) {
    let (reference, points) = walk(jobs, None);
    assert!(
        reference.states.iter().all(|s| s == "accepted"),
        "{reference:?}"
    );
    assert_eq!(reference.attempts, vec![2; jobs]);
    // Only the first-process points: a restart passes `resumed` and more.
    let mut points: Vec<String> = points;
    points.dedup();
    assert!(
        points.len() >= 20,
        "too few crash points were reached — is the `failpoints` feature on? {points:?}"
    );
    for name in [
        "journal:session_finished#1",
        "journal:attempt_ended#1",
        "journal:job_ended#1",
        "journal:committed#1",
        "journal:finalized#1",
        "worker:committed#1",
        "worker:state_saved#1",
    ] {
        assert!(points.iter().any(|p| p == name), "{name} not reached: {points:?}");
    }
    // To re-walk one point while debugging: LOOPD_CRASH_ONLY=point#k.
    if let Ok(only) = std::env::var("LOOPD_CRASH_ONLY") {
        points.retain(|p| only.split(',').any(|o| o == p));
    }
    let queue = std::sync::Mutex::new(points.clone());
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some(point) = queue.lock().expect("queue").pop() else {
                    return;
                };
                let result = std::panic::catch_unwind(|| walk(jobs, Some(&point)).0);
                match result {
                    Ok(out) if out == reference => {}
                    Ok(out) => failures
                        .lock()
                        .expect("failures")
                        .push(format!("{point}: {out:?} != {reference:?}")),
                    Err(e) => failures.lock().expect("failures").push(format!(
                        "{point}: {}",
                        e.downcast_ref::<String>().cloned().unwrap_or_default()
                    )),
                }
            });
        }
    });
    let failures = failures.into_inner().expect("failures");
    assert!(
        failures.is_empty(),
        "{} of {} crash points broke a promise:\n{}",
        failures.len(),
        points.len(),
        failures.join("\n")
    );
    eprintln!("walked {} crash points: {}", points.len(), points.join(" "));
}

#[test]
fn kill_9_at_every_crash_point_of_a_job() {
    walk_every_point(1);
}

#[test]
fn kill_9_at_every_crash_point_of_two_jobs_side_by_side() {
    walk_every_point(2);
}
