//! `loopd daemon`, `submit`, `status`, `cancel`, `report` against the real CLI
//! (issue: the durable job queue).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::daemon::*;
use crate::support::model::{Role, ScriptedModel, Turn};
use crate::support::*;

fn stalled(ms: u64) -> Turn {
    Turn {
        delay_ms: ms,
        ..turn(vec![text("too late")])
    }
}

fn wait_for_model(model: &ScriptedModel, role: Role, session: usize, requests: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    while model.session(role, session).len() < requests {
        assert!(
            Instant::now() < until,
            "{role:?} session {session} never made request {requests}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn summary_of(s: &Value) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(s["summary"].as_str().expect("summary path")).expect("summary"),
    )
    .expect("json")
}

#[test]
fn three_jobs_two_at_a_time_each_on_its_own_branch() {
    let env = TestEnv::new();
    // Every session plays the same script, so the interleaving of the two
    // concurrent jobs does not matter.
    let model = ScriptedModel::start(scenario(
        (0..3).map(|_| agent_writes(&clean_solution())).collect(),
        (0..3).map(|_| pass()).collect(),
    ));
    // The user's tree is dirty: queuing does not care, and it is not touched.
    std::fs::write(env.repo.join("scratch.txt"), "mine\n").expect("scratch");
    // Two jobs submitted while the daemon is down, one while it runs.
    let a = submit(&env, &[]);
    let b = submit(&env, &[]);
    let daemon = Daemon::start(&env, &model, 2);
    let c = submit(&env, &[]);
    let mut windows = Vec::new();
    for id in [&a, &b, &c] {
        let s = final_state(&env, id);
        assert_eq!(s["state"], "accepted", "{s}");
        let branch = s["branch"].as_str().expect("branch");
        assert_eq!(branch, format!("loopd/{id}"));
        let commit = s["commit_accepted"].as_str().expect("accepted commit");
        assert_eq!(env.git(&["rev-parse", branch]).trim(), commit);
        assert_eq!(
            env.git(&["show", &format!("{branch}:rechnung.py")]),
            clean_solution()
        );
        assert!(env
            .git(&["log", "-1", "--format=%B", branch])
            .contains(&format!("Accepted by loopd job {id}")));
        // The daemon wrote the page next to summary.json, with the branch.
        let page = std::fs::read_to_string(
            std::path::Path::new(s["summary"].as_str().expect("summary path"))
                .with_file_name("report.html"),
        )
        .expect("report.html next to summary.json");
        assert!(page.contains(&format!("merge {branch}")), "{page}");
        assert!(page.contains(&format!("<code>{commit}</code>")));
        let sum = summary_of(&s);
        windows.push((
            sum["started_at"].as_str().expect("start").to_owned(),
            sum["finished_at"].as_str().expect("end").to_owned(),
        ));
    }
    // Worktrees are gone, branches stay, the user's tree is untouched.
    assert_eq!(
        std::fs::read_dir(env.state.join("worktrees"))
            .expect("worktrees")
            .count(),
        0
    );
    assert_eq!(env.read_repo("scratch.txt"), "mine\n");
    assert_eq!(
        env.read_repo("rechnung.py"),
        fixture("rechnung/repo/rechnung.py")
    );
    // Two ran side by side, never three.
    let overlap = |x: &(String, String), y: &(String, String)| x.0 < y.1 && y.0 < x.1;
    assert!(
        overlap(&windows[0], &windows[1]),
        "the first two ran concurrently: {windows:?}"
    );
    assert!(
        !(overlap(&windows[0], &windows[2])
            && overlap(&windows[1], &windows[2])
            && overlap(&windows[0], &windows[1])),
        "--jobs 2 ran three at once: {windows:?}"
    );
    daemon.signal(15);
    assert_eq!(daemon.wait(Duration::from_secs(20)), 0);
}

#[test]
fn kill_9_mid_attempt_then_restart_completes_without_rerunning_a_finished_session() {
    let env = TestEnv::new();
    // The agent session finishes; the first critic call hangs; the daemon is
    // killed while it waits.
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![session(vec![stalled(120_000)]), pass()],
    ));
    let id = submit(&env, &[]);
    let daemon = Daemon::start(&env, &model, 1);
    wait_for_model(&model, Role::Critic, 0, 1);
    daemon.signal(9);
    daemon.wait(Duration::from_secs(10));
    assert_eq!(
        status(&env, &id)["state"],
        "running",
        "the dead daemon left it running"
    );
    let daemon = Daemon::start(&env, &model, 1);
    let s = final_state(&env, &id);
    assert_eq!(s["state"], "accepted", "{s}");
    // The finished agent session was not run (or billed) again.
    assert_eq!(model.session_count(Role::Agent), 1);
    assert_eq!(
        model.session_count(Role::Critic),
        2,
        "the unfinished critic call was made again"
    );
    let sum = summary_of(&s);
    assert_eq!(sum["attempts"].as_array().expect("attempts").len(), 1);
    // Billed exactly once: the agent's 3 scripted calls of 100/20 tokens on
    // haiku and the one critic call that answered (the killed one never did).
    let agent_cost = 3.0 * (100.0 * 0.1 + 20.0 * 0.5) / 1e6;
    let critic_cost = (100.0 * 2.0 + 20.0 * 10.0) / 1e6;
    let total = sum["totals"]["cost_usd"].as_f64().expect("cost");
    assert!((total - (agent_cost + critic_cost)).abs() < 1e-9, "{total}");
    daemon.signal(15);
    assert_eq!(daemon.wait(Duration::from_secs(20)), 0);
}

#[test]
fn sigterm_suspends_the_job_and_the_next_daemon_resumes_it() {
    let env = TestEnv::new();
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![read("rechnung.py")]),
                turn(vec![write("rechnung.py", &partial)]),
                stalled(120_000),
            ]),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let id = submit(&env, &[]);
    let daemon = Daemon::start(&env, &model, 1);
    wait_for_model(&model, Role::Agent, 0, 3);
    let asked = Instant::now();
    daemon.signal(15);
    assert_eq!(daemon.wait(Duration::from_secs(20)), 0, "SIGTERM exits 0");
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "well within a stop timeout"
    );
    let s = status(&env, &id);
    assert_eq!(s["state"], "interrupted");
    // The work is where it was, in the job's worktree.
    let wt = env.state.join("worktrees").join(&id);
    assert_eq!(
        std::fs::read_to_string(wt.join("rechnung.py")).expect("worktree"),
        partial
    );
    let daemon = Daemon::start(&env, &model, 1);
    let s = final_state(&env, &id);
    assert_eq!(s["state"], "accepted", "{s}");
    assert_eq!(
        env.git(&["show", &format!("loopd/{id}:rechnung.py")]),
        clean_solution()
    );
    // The interrupted session's spend still counts.
    let sum = summary_of(&s);
    assert!(
        sum["totals"]["input_tokens"].as_u64().expect("tokens") >= 2 * 100 + 3 * 100,
        "{}",
        sum["totals"]
    );
    daemon.signal(15);
    daemon.wait(Duration::from_secs(20));
}

#[test]
fn cancel_a_running_and_a_queued_job() {
    let env = TestEnv::new();
    let partial = fixture("rechnung/repo/rechnung.py").replace("lines[1:]", "lines");
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &partial)]),
            stalled(120_000),
        ])],
        vec![],
    ));
    let running = submit(&env, &[]);
    let queued = submit(&env, &[]);
    let daemon = Daemon::start(&env, &model, 1);
    wait_for_model(&model, Role::Agent, 0, 3);
    let r = finish(
        env.loopd(None)
            .args(["cancel", &queued])
            .output()
            .expect("cancel"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(status(&env, &queued)["state"], "cancelled");
    let r = finish(
        env.loopd(None)
            .args(["cancel", &running])
            .output()
            .expect("cancel"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = final_state(&env, &running);
    assert_eq!(s["state"], "cancelled", "{s}");
    // Parked through the breaker: stash pinned by a ref, report written.
    let stash = s["stash_commit"].as_str().expect("parked");
    assert_eq!(
        env.git(&["rev-parse", &format!("refs/loopd/stash/{running}")])
            .trim(),
        stash
    );
    assert!(std::path::Path::new(s["report"].as_str().expect("report")).is_file());
    let page = std::fs::read_to_string(env.state.join("runs").join(&running).join("report.html"))
        .expect("report.html");
    assert!(page.contains(&format!("stash apply {stash}")), "{page}");
    assert_eq!(env.git(&["show", &format!("{stash}:rechnung.py")]), partial);
    assert_eq!(
        model.session_count(Role::Agent),
        1,
        "the cancelled queued job never started"
    );
    let r = finish(
        env.loopd(None)
            .args(["report", &running])
            .output()
            .expect("report"),
    );
    assert!(r.stdout.contains("stash apply"), "{}", r.stdout);
    let r = finish(
        env.loopd(None)
            .args(["cancel", "20000101-000000-000000"])
            .output()
            .expect("cancel"),
    );
    assert_eq!(r.code, 2);
    daemon.signal(15);
    daemon.wait(Duration::from_secs(20));
}

#[test]
fn a_malformed_job_file_is_moved_aside_and_never_blocks_the_others() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let incoming = env.state.join("spool/incoming");
    let good = submit(&env, &[]);
    // Sorted before the good one, so the daemon meets it first.
    std::fs::write(
        incoming.join("00000000-000000-badbad.json"),
        "{\"job_id\": \"0000",
    )
    .expect("bad file");
    std::fs::write(incoming.join("00000000-000000-evil00.json"), format!("{{\"job_id\":\"00000000-000000-evil00\",\"repo\":\"{}\",\"git_ref\":\"HEAD\",\"commit\":\"x\",\"task\":\"t\",\"goal\":[],\"submitted_at\":\"now\",\"flags\":{{\"agent_bin\":\"/bin/sh\"}}}}", env.repo.display())).expect("evil file");
    let daemon = Daemon::start(&env, &model, 1);
    assert_eq!(final_state(&env, &good)["state"], "accepted");
    let rejected = env.state.join("spool/rejected");
    assert!(rejected.join("00000000-000000-badbad.json.error").is_file());
    let why = std::fs::read_to_string(rejected.join("00000000-000000-evil00.json.error"))
        .expect("error file");
    assert!(why.contains("agent_bin"), "{why}");
    daemon.signal(15);
    daemon.wait(Duration::from_secs(20));
}

#[test]
fn a_job_whose_repository_holds_the_state_dir_is_refused() {
    // The state dir inside the job's repository: the agent could reach
    // loopd's files there. The job ends in `error`, and no agent runs.
    let env = TestEnv::new();
    let inside = env.repo.join(".loopd-state");
    let loopd = || {
        let mut cmd = env.loopd(None);
        cmd.env("LOOPD_STATE_DIR", &inside);
        cmd
    };
    let r = finish(loopd().args(["submit", "--json"]).output().expect("submit"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = serde_json::from_str::<Value>(r.stdout.trim()).expect("json")["job_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut daemon = loopd()
        .args(["daemon", "--jobs", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("daemon");
    let until = Instant::now() + Duration::from_secs(60);
    let s = loop {
        let r = finish(
            loopd()
                .args(["status", &id, "--json"])
                .output()
                .expect("status"),
        );
        let s: Value = serde_json::from_str(r.stdout.trim()).expect("json");
        if s["state"] == "error" {
            break s;
        }
        assert!(Instant::now() < until, "the job never failed: {s}");
        std::thread::sleep(Duration::from_millis(25));
    };
    send_signal(daemon.id(), 15);
    let _ = daemon.wait();
    assert!(
        s["detail"]
            .as_str()
            .is_some_and(|d| d.contains("is inside the repository")),
        "{s}"
    );
}

#[test]
fn status_of_queued_jobs_shows_their_goal_steps() {
    let env = TestEnv::new();
    let id = submit(&env, &["--goal", "python3 -m pytest -q"]);
    let r = finish(
        env.loopd(None)
            .args(["status", &id])
            .output()
            .expect("status"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("queued")
            && r.stdout
                .contains("goal steps (the commands this job runs):\n  python3 -m pytest -q"),
        "{}",
        r.stdout
    );
    // The spool is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.state.join("spool/incoming"))
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}
