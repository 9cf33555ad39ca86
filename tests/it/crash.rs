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
use crate::support::model::{Picker, Role, Scenario, ScriptedModel};
use crate::support::*;
use loopd::journal::Event;

/// Critic FAIL → a second attempt (with an interdiff) → critic PASS →
/// commit. The first change is one only the critic judges: it passes the
/// pre-critic.
fn fail_then_pass() -> Scenario {
    scope_creep_then_clean(
        4,
        "a function the task did not ask for was added",
        "remove average_line",
    )
}

/// The script follows the content, not the order: the critic fails a
/// change that adds the unasked-for function and passes the clean one; the
/// agent writes the clean solution when its prompt carries the critic's
/// finding. A session run again after a crash gets the same answer.
fn by_content() -> Picker {
    std::sync::Arc::new(|role, body: &Value| {
        let text = body.to_string();
        Some(match role {
            Role::Critic => usize::from(!text.contains("+def average_line")),
            Role::Agent => usize::from(text.contains("Fix exactly these points")),
            Role::Examiner => 0,
        })
    })
}

/// A daemon started with extra environment, killed or not by a crash point.
/// A daemon of a walk, killed when the walk ends — a failed assertion
/// included, so no walk leaves a daemon running.
struct WalkDaemon(std::process::Child);

impl std::ops::Deref for WalkDaemon {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for WalkDaemon {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for WalkDaemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn daemon_with(
    env: &TestEnv,
    model: &ScriptedModel,
    jobs: usize,
    vars: &[(&str, &str)],
) -> WalkDaemon {
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
    WalkDaemon(cmd.spawn().expect("spawn daemon"))
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
        // Generous: a walk restarts the daemon mid-job, and on a loaded
        // machine a job's four real CLI sessions take a while.
        let s = wait_for_within(env, id, "a final state", Duration::from_secs(400), |s| {
            !matches!(
                s["state"].as_str(),
                Some("queued" | "running" | "interrupted")
            )
        });
        let log = || std::fs::read_to_string(env.tmp.path().join("daemon.log")).unwrap_or_default();
        let path = s["summary"]
            .as_str()
            .unwrap_or_else(|| panic!("job {id} ended without a summary: {s}\n{}", log()));
        let sum: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("summary")).expect("json");
        o.states
            .push(s["state"].as_str().expect("state").to_owned());
        // Billed once: what the finished sessions cost equals the crash-free
        // run's; the totals add only what interrupted sessions spent.
        let (usd, tin, tout) = billed(&env.state.join("runs").join(id));
        o.cost_usd.push(usd);
        o.tokens.push((tin, tout));
        let total = sum["totals"]["cost_usd"].as_f64().expect("cost");
        assert!(
            total + 1e-9 >= usd,
            "the totals hold at least the finished sessions' spend"
        );
        o.attempts
            .push(sum["attempts"].as_array().expect("attempts").len());
    }
    o
}

/// Run `jobs` jobs to their end on a fresh daemon, optionally killed at
/// `crash` and restarted. Returns the outcome and the crash points passed.
/// What a walk runs: how many jobs side by side, and whether they end
/// accepted (critic FAIL → second attempt → PASS → commit) or parked (one
/// attempt, critic FAIL → exhausted → the breaker stashes the work).
///
/// `real_cli`: the sessions are Claude Code's (`claude -p`), walked only at
/// the points where a session starts or ends — what a real CLI's process
/// tree does when loopd dies under it is the CLI's to prove; every other
/// walk runs the scripted agent of test builds (the journal's bookkeeping
/// is the same whichever agent wrote it).
#[derive(Clone, Copy)]
struct Plan {
    jobs: usize,
    parked: bool,
    real_cli: bool,
}

impl Plan {
    fn sessions(&self) -> usize {
        if self.parked {
            2
        } else {
            4
        }
    }
}

/// The scripted agent on a goal of `ruff check .` alone: red at the
/// baseline (the fixture's unused import), green for both solutions. What
/// the walks check is the journal's bookkeeping, which is the same for any
/// goal; pytest's start (~0.15 s of CPU, three times per job, in hundreds
/// of walks) was most of what a walk cost. The real-CLI walk keeps both
/// steps.
fn bookkeeping_env() -> TestEnv {
    let env = TestEnv::scripted();
    let path = env.repo.join("loopd.toml");
    let cfg = std::fs::read_to_string(&path).expect("loopd.toml");
    let pytest =
        "[[goal]]\nname = \"pytest\"\nrun = \"python3 -m pytest -q\"\ntimeout = \"2m\"\n\n";
    assert!(cfg.contains(pytest), "the fixture's pytest step: {cfg}");
    std::fs::write(&path, cfg.replace(pytest, "")).expect("loopd.toml");
    env.git(&["commit", "-qam", "the walks' goal: ruff alone"]);
    env
}

fn walk(plan: Plan, crash: Option<&str>) -> (Outcome, Vec<String>) {
    let jobs = plan.jobs;
    let env = if plan.real_cli {
        TestEnv::new()
    } else {
        bookkeeping_env()
    };
    // The script follows the content, not the order: the critic fails a
    // change that adds the unasked-for function and passes the clean one
    // (from attempt 2 on its input also quotes the finding and shows the
    // function removed in the interdiff, so it looks for the added line);
    // the agent writes the clean solution when its prompt carries the
    // critic's finding. A
    // session that was in flight when the daemon died (another job's, in
    // the two-job walk) is unfinished, so it runs again — and gets the
    // same answer.
    let pick = by_content();
    let model = ScriptedModel::start_per_dir_picking(fail_then_pass(), pick);
    let head = env.git(&["rev-parse", "HEAD"]);
    let args: &[&str] = if plan.parked {
        &["--max-attempts", "1"]
    } else {
        &[]
    };
    let ids: Vec<String> = (0..jobs).map(|_| submit(&env, args)).collect();
    let trace = env.tmp.path().join("crash-trace.txt");
    let trace_s = trace.to_string_lossy().into_owned();
    let mut vars = vec![("LOOPD_CRASH_TRACE", trace_s.as_str())];
    if let Some(point) = crash {
        vars.push(("LOOPD_CRASH_AT", point));
        let mut first = daemon_with(&env, &model, jobs, &vars);
        let until = Instant::now() + Duration::from_secs(400);
        let status = loop {
            if let Some(s) = first.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() >= until {
                let _ = first.kill();
                let log =
                    std::fs::read_to_string(env.tmp.path().join("daemon.log")).unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(60)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!("the daemon never reached crash point {point}; its log ends:\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "killed at {point}, not {status:?}"
        );
        vars.retain(|(k, _)| *k != "LOOPD_CRASH_AT");
    }
    let mut daemon = daemon_with(&env, &model, jobs, &vars);
    let out = outcome(&env, &ids);
    let log = || std::fs::read_to_string(env.tmp.path().join("daemon.log")).unwrap_or_default();
    // Each finished session reached the scripted model exactly once: in
    // every job's journal each (attempt, role) finished once, and the model
    // saw no session the journal did not start. A kill in the middle of a
    // session (only another job's, in the two-job walk) leaves it
    // unfinished: it runs again and what it spent still counts.
    for id in &ids {
        let run_dir = env.state.join("runs").join(id);
        let events = journal_of(&run_dir);
        let mut finished = std::collections::BTreeMap::new();
        let mut started = 0;
        for e in &events {
            match e {
                Event::SessionStarted { .. } => started += 1,
                Event::SessionFinished(f) => {
                    *finished
                        .entry((f.attempt, format!("{:?}", f.role)))
                        .or_insert(0) += 1
                }
                _ => {}
            }
        }
        assert_eq!(
            finished.len(),
            plan.sessions(),
            "agent and critic sessions finished ({crash:?}): {finished:?}"
        );
        assert!(
            finished.values().all(|&n| n == 1),
            "a finished session ran twice at {crash:?}: {finished:?}\n{}",
            log()
        );
        // The agent works in the job's worktree, the critic in a home of
        // its own in the run dir.
        let dirs = [
            env.state.join("worktrees").join(id),
            env.state
                .join("runs")
                .join(id)
                .join("sandbox")
                .join("critic"),
        ]
        .map(|d| d.to_string_lossy().into_owned());
        let seen: usize = [Role::Agent, Role::Critic]
            .iter()
            .flat_map(|r| model.session_counts_per_dir(*r))
            .filter(|(d, _)| dirs.contains(d))
            .map(|(_, n)| n)
            .sum();
        assert!(
            (plan.sessions()..=started).contains(&seen),
            "the model saw {seen} sessions of job {id}, the journal started {started} ({crash:?})\n{}",
            log()
        );
        if jobs == 1 {
            assert_eq!(
                seen,
                plan.sessions(),
                "one job alone: no session is ever in flight at a crash point"
            );
        }
    }
    assert!(
        model.unscripted().is_empty(),
        "unscripted requests at {crash:?}"
    );
    // No job left non-final: the restarted daemon empties `running/` (a
    // state.json can be final before its spool file moves, so wait for it).
    let until = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(env.state.join("spool/running"))
        .expect("running")
        .count()
        > 0
    {
        assert!(
            Instant::now() < until,
            "a job stayed in running/ at {crash:?}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for id in &ids {
        if plan.parked {
            assert_eq!(
                env.git(&["show", &format!("refs/loopd/stash/{id}:rechnung.py")]),
                scope_creep_solution(),
                "the parked work is pinned by its ref ({crash:?})"
            );
        } else {
            assert_eq!(
                env.git(&["show", &format!("loopd/{id}:rechnung.py")]),
                clean_solution(),
                "the accepted change is on the job's branch ({crash:?})\n{}",
                log()
            );
        }
    }
    // The user's checkout is untouched.
    assert_eq!(env.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert_eq!(
        env.read_repo("rechnung.py"),
        fixture("rechnung/repo/rechnung.py")
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let points = std::fs::read_to_string(&trace).unwrap_or_default();
    (out, points.lines().map(str::to_owned).collect())
}

/// Every point a crash-free run passes, each as `point#k`; then a walk per
/// point, two at a time.
fn walk_every_point(plan: Plan) {
    let jobs = plan.jobs;
    let (reference, points) = walk(plan, None);
    let (state, attempts) = if plan.parked {
        ("exhausted", 1)
    } else {
        ("accepted", 2)
    };
    assert!(reference.states.iter().all(|s| s == state), "{reference:?}");
    assert_eq!(reference.attempts, vec![attempts; jobs]);
    // Only the first-process points: a restart passes `resumed` and more.
    let mut points: Vec<String> = points;
    points.dedup();
    assert!(
        points.len() >= 12,
        "too few crash points were reached — is the `failpoints` feature on? {points:?}"
    );
    let required: &[&str] = if plan.parked {
        &[
            "workspace:initialised#1",
            "journal:session_finished#1",
            "journal:job_ended#1",
            "park:stashed#1",
            "journal:parked#1",
            "journal:finalized#1",
            "worker:state_saved#1",
        ]
    } else {
        &[
            "workspace:initialised#1",
            "journal:session_finished#1",
            "journal:attempt_ended#1",
            "journal:job_ended#1",
            "journal:committed#1",
            "journal:finalized#1",
            "worker:committed#1",
            "worker:state_saved#1",
        ]
    };
    for name in required {
        assert!(
            points.iter().any(|p| p == *name),
            "{name} not reached: {points:?}"
        );
    }
    eprintln!("{} crash points: {points:?}", points.len());
    if plan.real_cli {
        points.retain(|p| p.starts_with("journal:session_"));
    }
    // To re-walk one point while debugging: LOOPD_CRASH_ONLY=point#k.
    if let Ok(only) = std::env::var("LOOPD_CRASH_ONLY") {
        points.retain(|p| only.split(',').any(|o| o == p));
    }
    walk_all(&points, &reference, |point| walk(plan, Some(point)).0);
}

/// Walk every point of `points`, two at a time, each on a fresh repository
/// and state dir: every walk must end as `reference` did.
fn walk_all(points: &[String], reference: &Outcome, walk: impl Fn(&str) -> Outcome + Sync) {
    let queue = std::sync::Mutex::new(points.to_vec());
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some(point) = queue.lock().expect("queue").pop() else {
                    return;
                };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| walk(&point))) {
                    Ok(out) if out == *reference => {}
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
    walk_every_point(Plan {
        jobs: 1,
        parked: false,
        real_cli: false,
    });
}

#[test]
fn kill_9_at_every_crash_point_of_a_job_the_breaker_parks() {
    walk_every_point(Plan {
        jobs: 1,
        parked: true,
        real_cli: false,
    });
}

/// The real CLI at every session boundary of a job: `claude -p` sessions
/// started and finished around each kill, billed from its real metered
/// calls. (A kill while a real CLI is mid-request is
/// `daemon::kill_9_mid_attempt_then_restart_completes_without_rerunning_a_finished_session`.)
#[test]
fn kill_9_at_the_session_boundaries_of_a_job_with_the_real_cli() {
    walk_every_point(Plan {
        jobs: 1,
        parked: false,
        real_cli: true,
    });
}

#[test]
fn kill_9_at_every_crash_point_of_two_jobs_side_by_side() {
    walk_every_point(Plan {
        jobs: 2,
        parked: false,
        real_cli: false,
    });
}

/// One `loopd run --job-id` job — one attempt, the critic fails it, the
/// breaker parks the work — killed at `crash` and started again with the
/// same command line, as a Kubernetes Job controller starts a pod again on
/// the same volume; then once more, as a re-run of a job that has ended.
fn run_walk(crash: Option<&str>) -> (Outcome, Vec<String>) {
    let env = bookkeeping_env();
    let pick = by_content();
    let model = ScriptedModel::start_per_dir_picking(fail_then_pass(), pick);
    let head = env.git(&["rev-parse", "HEAD"]);
    let id = "j0c0ffee123-0";
    let trace = env.tmp.path().join("crash-trace.txt");
    let run = |crash: Option<&str>| {
        let mut cmd = env.loopd(Some(&model));
        cmd.args(["run", "--json", "--job-id", id, "--max-attempts", "1"])
            .env("LOOPD_CRASH_TRACE", &trace);
        if let Some(point) = crash {
            cmd.env("LOOPD_CRASH_AT", point);
        }
        cmd.output().expect("run loopd")
    };
    if let Some(point) = crash {
        let out = run(Some(point));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "killed at {point}, not {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let r = finish(run(None));
    assert_eq!(
        r.code, 1,
        "exhausted after a restart at {crash:?}: {}",
        r.stderr
    );
    let summary = r.summary();
    let sessions = (
        model.session_count(Role::Agent),
        model.session_count(Role::Critic),
    );
    // A job that has ended: its summary and its code, nothing run again.
    let again = finish(run(None));
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert_eq!(again.summary(), summary, "the ended job's own summary");
    assert_eq!(
        (
            model.session_count(Role::Agent),
            model.session_count(Role::Critic)
        ),
        sessions,
        "a re-run of an ended job reached the model"
    );
    // Each finished session reached the model exactly once.
    let run_dir = env.state.join("runs").join(id);
    let mut finished = std::collections::BTreeMap::new();
    for e in journal_of(&run_dir) {
        if let Event::SessionFinished(f) = e {
            *finished
                .entry((f.attempt, format!("{:?}", f.role)))
                .or_insert(0) += 1;
        }
    }
    assert_eq!(finished.len(), 2, "{finished:?} at {crash:?}");
    assert!(
        finished.values().all(|&n| n == 1),
        "{finished:?} at {crash:?}"
    );
    assert_eq!(sessions, (1, 1), "sessions the model saw at {crash:?}");
    assert!(
        model.unscripted().is_empty(),
        "unscripted at {crash:?}: {:?}",
        model
            .unscripted()
            .iter()
            .map(|r| (
                r.role,
                r.session,
                r.turn,
                r.prompt().chars().take(300).collect::<String>()
            ))
            .collect::<Vec<_>>()
    );
    // The work is parked under the job's ref; the checkout is back at its
    // base, clean.
    assert_eq!(
        env.git(&["show", &format!("refs/loopd/stash/{id}:rechnung.py")]),
        scope_creep_solution(),
        "the parked work is pinned by its ref ({crash:?})"
    );
    assert_eq!(env.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(env.git(&["status", "--porcelain"]), "", "at {crash:?}");
    let finished_spend = billed(&run_dir);
    let out = Outcome {
        states: vec![summary["outcome"].as_str().expect("outcome").to_owned()],
        cost_usd: vec![finished_spend.0],
        tokens: vec![(finished_spend.1, finished_spend.2)],
        attempts: vec![summary["attempts"].as_array().expect("attempts").len()],
    };
    let points = std::fs::read_to_string(&trace).unwrap_or_default();
    (out, points.lines().map(str::to_owned).collect())
}

/// `loopd run --job-id` killed at every crash point a foreground job
/// passes, then run again with the same command: the same outcome and
/// spend as an uninterrupted run, every session billed once, the work
/// parked, and a further run of the ended job does nothing.
#[test]
fn kill_9_at_every_crash_point_of_a_run_with_a_job_id() {
    let (reference, mut points) = run_walk(None);
    assert_eq!(reference.states, vec!["exhausted".to_owned()]);
    // The first process's points only: the re-runs pass `resumed` and more.
    let first_end = points
        .iter()
        .position(|p| p == "journal:finalized#1")
        .expect("the first run finalizes");
    points.truncate(first_end + 1);
    points.dedup();
    for name in [
        "journal:session_finished#1",
        "journal:job_ended#1",
        "park:stashed#1",
        "journal:parked#1",
        "journal:finalized#1",
    ] {
        assert!(
            points.iter().any(|p| p == name),
            "{name} not reached: {points:?}"
        );
    }
    if let Ok(only) = std::env::var("LOOPD_CRASH_ONLY") {
        points.retain(|p| only.split(',').any(|o| o == p));
    }
    walk_all(&points, &reference, |point| run_walk(Some(point)).0);
}
