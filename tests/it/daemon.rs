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
    let env = TestEnv::scripted();
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
    let env = TestEnv::scripted();
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
    let env = TestEnv::scripted();
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

/// A script that tries to queue a job from inside a job: `loopd submit`
/// as it is, then with a scrubbed environment from a double fork (`env -i
/// setsid -f`), then — when it can — by writing a job file straight into
/// the spool. Prints one `QUEUE <how> <exit> <stderr's last line>` each.
fn queue_script(env: &TestEnv, job_file: &std::path::Path) -> String {
    let loopd = env!("CARGO_BIN_EXE_loopd");
    let state = env.state.display();
    format!(
        r#"import os
import shutil
import subprocess
import time

LOOPD = "{loopd}"
STATE = "{state}"


def last(text):
    return " | ".join(x for x in text.strip().splitlines() if x.strip())


e = dict(os.environ, LOOPD_STATE_DIR=STATE)
r = subprocess.run([LOOPD, "submit", "--json"], env=e, capture_output=True, text=True)
print("QUEUE plain", r.returncode, last(r.stderr))
out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "q2.txt")
subprocess.run(
    ["env", "-i", "PATH=" + os.environ["PATH"], "LOOPD_STATE_DIR=" + STATE,
     "setsid", "-f", "sh", "-c", LOOPD + " submit --json >" + out + ".part 2>&1; echo $? >>" + out + ".part; mv " + out + ".part " + out]
)
for _ in range(400):
    if os.path.exists(out):
        break
    time.sleep(0.05)
text = "never finished\n?"
if os.path.exists(out):
    with open(out) as f:
        text = f.read()
    os.remove(out)
lines = text.strip().splitlines()
print("QUEUE orphan", lines[-1], last("\n".join(lines[:-1])))
try:
    shutil.copy("{job_file}", os.path.join(STATE, "spool", "incoming", "20990101-000000-f00d00.json"))
    print("QUEUE file written")
except OSError as err:
    print("QUEUE file denied", err.errno)
"#,
        job_file = job_file.display(),
    )
}

#[test]
fn a_job_cannot_queue_another_job() {
    // From the agent's Bash (through a script the hook cannot read) and
    // from the goal test, with the sandbox on and with it off.
    for sandbox in ["", "[sandbox]\nenabled = false\n"] {
        let env = TestEnv::new();
        // A well-formed job file for the direct write, made outside the job.
        let job_file = env.tmp.path().join("f00d.json");
        let mut spec: Value = serde_json::from_str(
            &std::fs::read_to_string(
                env.state
                    .join("spool/incoming")
                    .join(format!("{}.json", submit(&env, &[]))),
            )
            .expect("job file"),
        )
        .expect("json");
        for f in std::fs::read_dir(env.state.join("spool/incoming")).expect("incoming") {
            std::fs::remove_file(f.expect("entry").path()).expect("unqueue");
        }
        spec["job_id"] = "20990101-000000-f00d00".into();
        spec["flags"]["max_attempts"] = 50.into();
        std::fs::write(&job_file, spec.to_string()).expect("job file");
        std::fs::write(env.repo.join("queue.py"), queue_script(&env, &job_file)).expect("script");
        let cfg = std::fs::read_to_string(env.repo.join("loopd.toml")).expect("cfg");
        std::fs::write(
            env.repo.join("loopd.toml"),
            format!(
                "{}\n{sandbox}",
                cfg.replacen(
                    "[[goal]]",
                    "[[goal]]\nname = \"queue\"\nrun = \"python3 queue.py\"\n\n[[goal]]",
                    1,
                )
            ),
        )
        .expect("cfg");
        env.git(&["add", "-A"]);
        env.git(&["commit", "-qm", "a goal step that queues jobs"]);
        let model = ScriptedModel::start(scenario(
            vec![session(vec![
                turn(vec![bash("python3 queue.py")]),
                turn(vec![write("rechnung.py", &clean_solution())]),
                turn(vec![text("Done.")]),
            ])],
            vec![pass()],
        ));
        let daemon = Daemon::start(&env, &model, 1);
        let id = submit(&env, &["--allowed-tools", "Read,Edit,Write,Bash"]);
        let s = final_state(&env, &id);
        assert_eq!(s["state"], "accepted", "{sandbox}: {s}");
        let baseline =
            std::fs::read_to_string(env.state.join("runs").join(&id).join("baseline.txt"))
                .expect("baseline");
        let agent = model.session(Role::Agent, 0)[1]
            .body
            .to_string()
            .replace("\\n", "\n");
        for (who, out) in [("the goal test", &baseline), ("the agent's Bash", &agent)] {
            // As it is, the token names the job; scrubbed and orphaned,
            // the daemon (a subreaper) is still its ancestor.
            let token = format!("carries the containment token of job {id}");
            for (how, why) in [
                ("plain", token.as_str()),
                ("orphan", "descends from this loopd"),
            ] {
                let line = out
                    .split(&format!("QUEUE {how} "))
                    .nth(1)
                    .unwrap_or_else(|| panic!("{sandbox}{who}: no `{how}` line in {out}"));
                let line = line.lines().next().unwrap_or_default();
                assert!(line.starts_with('5'), "{sandbox}{who} {how}: {line}");
                if sandbox.is_empty() {
                    // The job's root holds no spool: the daemon is not
                    // even reached.
                    assert!(!line.contains("submitted"), "{sandbox}{who} {how}: {line}");
                } else {
                    assert!(
                        line.contains("submitted from inside a loopd job") && line.contains(why),
                        "{sandbox}{who} {how}: `{why}` in {line}"
                    );
                }
            }
            let wrote = out.contains("QUEUE file written");
            assert_eq!(wrote, !sandbox.is_empty(), "{sandbox}{who}: {out}");
        }
        // Only the job we queued ever ran; what the job tried is kept,
        // with the reason beside it.
        assert_eq!(model.session_count(Role::Agent), 1);
        let done: Vec<_> = std::fs::read_dir(env.state.join("spool/done"))
            .expect("done")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(done, vec![std::ffi::OsString::from(format!("{id}.json"))]);
        let rejected = env.state.join("spool/rejected");
        let reasons = || -> Vec<String> {
            std::fs::read_dir(&rejected)
                .expect("rejected")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "error"))
                .map(|p| std::fs::read_to_string(p).expect("reason"))
                .collect()
        };
        // The intake refuses what the last goal run queued on its own
        // time, maybe after the job ended: wait for every reason (bounded).
        let expected = if sandbox.is_empty() { 0 } else { 7 };
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while reasons().len() < expected && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let reasons = reasons();
        // Two tries each from the goal test at the baseline, the agent and
        // the goal test after the attempt; the direct write once per goal
        // run when unsandboxed (the same file name: kept once).
        assert_eq!(
            reasons
                .iter()
                .filter(|r| r.contains("inside a loopd job"))
                .count(),
            if sandbox.is_empty() { 0 } else { 6 },
            "{sandbox}: {reasons:?}"
        );
        let direct = reasons
            .iter()
            .filter(|r| r.contains("not handed over by `loopd submit`"))
            .count();
        assert_eq!(
            direct,
            usize::from(!sandbox.is_empty()),
            "{sandbox}: {reasons:?}"
        );
        daemon.signal(15);
        assert_eq!(daemon.wait(Duration::from_secs(20)), 0);
    }
}

#[test]
fn a_second_daemon_on_the_same_state_dir_is_refused() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let first = Daemon::start(&env, &model, 1);
    // Once the first listens, it holds the spool.
    let until = Instant::now() + Duration::from_secs(30);
    while !env.state.join("spool/submit.sock").exists() {
        assert!(Instant::now() < until, "the daemon never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = finish(
        env.loopd(Some(&model))
            .args(["daemon", "--jobs", "1"])
            .output()
            .expect("second daemon"),
    );
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("another loopd daemon already serves"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    // The first still takes jobs.
    let id = submit(&env, &[]);
    assert_eq!(final_state(&env, &id)["state"], "accepted");
    first.signal(15);
    assert_eq!(first.wait(Duration::from_secs(20)), 0);
}
