//! Guards and the circuit breaker against the real CLI (issue: guards and
//! the circuit breaker).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::model::{Role, ScriptedModel, Turn};
use crate::support::*;

/// A Read of rechnung.py at `offset` (distinct calls) with scripted usage.
fn read_at(offset: u64, input_tokens: u64, output_tokens: u64) -> Turn {
    turn_usage(
        vec![tool(
            "Read",
            json!({"file_path": "{cwd}/rechnung.py", "offset": offset}),
        )],
        input_tokens,
        output_tokens,
    )
}

fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("loopd-it") {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Write `[guard] nudge = false` into the fixture's `loopd.toml`.
fn without_nudge(env: &TestEnv) {
    let cfg = env.read_repo("loopd.toml");
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!("{cfg}\n[guard]\nnudge = false\n"),
    )
    .expect("cfg");
    env.git(&["commit", "-qam", "no nudge"]);
}

fn nudged_events(summary: &Value) -> Vec<loopd::guard::Nudge> {
    journal(summary)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::Nudged(n) => Some(n),
            _ => None,
        })
        .collect()
}

const NUDGE: &str = "loopd: this is the 3rd identical Read call among your last 5 tool calls";

#[test]
fn the_same_read_repeated_is_nudged_then_stuck() {
    let same = || turn(vec![read("rechnung.py")]);
    let script = || {
        scenario(
            vec![session(vec![
                same(),
                same(),
                same(),
                same(),
                same(),
                turn(vec![text("Done.")]),
            ])],
            vec![],
        )
    };
    // The 3rd identical call is denied with a nudge; the 4th stops.
    let env = TestEnv::new();
    let model = ScriptedModel::start(script());
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "stopped");
    assert_eq!(s["reason"], "stuck_repeat");
    assert_eq!(s["attempts"][0]["stopped"], "stuck_repeat");
    let calls = agent_tool_calls(&s);
    assert_eq!(
        calls.len(),
        4,
        "stopped at the 4th identical call: {calls:?}"
    );
    assert!(calls.iter().all(|c| c.args_sha256 == calls[0].args_sha256));
    // Denied by the hook (the stream reports it as an error tool result).
    assert_ne!(calls[2].outcome, "ok", "{calls:?}");
    assert_eq!(nudged_events(&s).len(), 1);
    let fourth = model.session(Role::Agent, 0)[3].body.to_string();
    assert!(
        fourth.contains(NUDGE) && fourth.contains("escalate --test"),
        "{fourth}"
    );
    assert_eq!(model.session_count(Role::Critic), 0);

    // `[guard] nudge = false`: the hard stop at the 3rd.
    let env = TestEnv::new();
    without_nudge(&env);
    let model = ScriptedModel::start(script());
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "stuck_repeat");
    let calls = agent_tool_calls(&s);
    assert_eq!(
        calls.len(),
        3,
        "stopped at the 3rd identical call: {calls:?}"
    );
    assert!(nudged_events(&s).is_empty());
}

#[test]
fn a_nudged_session_recovers_and_is_accepted() {
    let env = TestEnv::scripted();
    let same = || turn(vec![read("rechnung.py")]);
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            same(),
            same(),
            same(),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "accepted");
    let nudges = nudged_events(&s);
    assert_eq!(nudges.len(), 1, "{nudges:?}");
    assert_eq!(nudges[0].tool, "Read");
    let fourth = model.session(Role::Agent, 0)[3].body.to_string();
    assert!(fourth.contains(NUDGE), "{fourth}");
    // A nudge is not a tamper denial: nothing rejects the attempt for it.
    assert_eq!(s["attempts"][0]["denied_tool_calls"], 0);
    assert_eq!(s["attempts"][0]["rejected_by"], Value::Null);
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
}

#[test]
fn reordered_nested_keys_are_the_same_call() {
    let env = TestEnv::scripted();
    // Three Grep calls whose inputs differ only in key order, at two depths.
    // (The CLI rejects the unknown nested field; the calls still appear in
    // the stream, which is what the guard hashes.)
    let a = json!({"pattern": "def", "path": "{cwd}", "meta": {"x": 1, "y": {"p": 1, "q": 2}}});
    let b = json!({"meta": {"y": {"q": 2, "p": 1}, "x": 1}, "path": "{cwd}", "pattern": "def"});
    let c = json!({"path": "{cwd}", "meta": {"y": {"p": 1, "q": 2}, "x": 1}, "pattern": "def"});
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![tool("Grep", a)]),
            turn(vec![tool("Grep", b)]),
            turn(vec![tool("Grep", c.clone())]),
            // The nudge lets one repeat through; the next stops.
            turn(vec![tool("Grep", c)]),
            turn(vec![text("Done.")]),
        ])],
        vec![],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "stuck_repeat");
    // The stream really carried different key orders.
    let stream = std::fs::read_to_string(
        std::path::PathBuf::from(s["run_dir"].as_str().expect("dir"))
            .join("attempt-1/agent-stream.jsonl"),
    )
    .expect("stream");
    assert!(
        stream.contains(r#""meta":{"y":{"q":2,"p":1},"x":1}"#),
        "key order survived to the stream"
    );
}

#[test]
fn a_polling_command_repeated_is_not_stuck() {
    let env = TestEnv::scripted();
    let poll = || turn(vec![bash("sleep 0.1")]);
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            poll(),
            poll(),
            poll(),
            poll(),
            poll(),
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &["--allowed-tools", "Read,Write,Bash(sleep *)"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let calls = agent_tool_calls(&r.summary());
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.tool == "Bash" && c.outcome == "ok")
            .count(),
        5
    );
}

/// Issue 40: `sleep 0` waits for nothing, and quoting, wrappers and no-op
/// elements are trivia. The same read, varied each time, is one call
/// repeated: nudged at the 3rd, stopped at the 4th.
#[test]
fn trivially_varied_repeats_of_a_read_are_stuck() {
    let env = TestEnv::scripted();
    let variants = [
        "sleep 0; cat rechnung.py",
        "sleep 0;  cat 'rechnung.py'",
        "true && env X=1 cat rechnung.py",
        "sleep 0; timeout 30 \"cat\" rechnung.py",
        "cat rechnung.py",
    ];
    let mut turns: Vec<Turn> = variants.iter().map(|c| turn(vec![bash(c)])).collect();
    turns.push(turn(vec![text("Done.")]));
    let model = ScriptedModel::start(scenario(vec![session(turns)], vec![]));
    let r = env.run(&model, &one_attempt(&[]));
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "stuck_repeat");
    let calls = agent_tool_calls(&s);
    assert_eq!(calls.len(), 4, "stopped at the 4th: {calls:?}");
    assert_eq!(nudged_events(&s).len(), 1);
    // The journal keeps each call as it ran.
    assert_ne!(calls[0].args_sha256, calls[1].args_sha256);
}

/// A read re-run after each write is a new question, not a repeat (it
/// was nudged at its 3rd run before a change started a new round).
#[test]
fn a_read_after_each_write_is_not_a_repeat() {
    let env = TestEnv::scripted();
    let check = || turn(vec![bash("cat rechnung.py")]);
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            check(),
            turn(vec![write("rechnung.py", "# draft 1\n")]),
            check(),
            turn(vec![write("rechnung.py", "# draft 2\n")]),
            check(),
            turn(vec![write("rechnung.py", &clean_solution())]),
            check(),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&[]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "accepted");
    assert!(nudged_events(&s).is_empty(), "{:?}", nudged_events(&s));
}

#[test]
fn two_attempts_without_change_are_no_progress() {
    let env = TestEnv::scripted();
    let idle = || {
        session(vec![
            turn(vec![read("rechnung.py")]),
            turn(vec![text("I think it is fine.")]),
        ])
    };
    let model = ScriptedModel::start(scenario(vec![idle(), idle(), idle()], vec![]));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "stuck_no_progress");
    assert_eq!(s["attempts"].as_array().expect("attempts").len(), 2);
    assert_eq!(
        model.session_count(Role::Agent),
        2,
        "no third attempt was started"
    );
    // Nothing to park: the tree is unchanged; the report says so.
    assert_eq!(s["stash_commit"], Value::Null);
    let f: Value = serde_json::from_str(
        &std::fs::read_to_string(s["failure_report"].as_str().expect("report")).expect("read"),
    )
    .expect("json");
    assert!(f["restore"]
        .as_str()
        .expect("restore")
        .contains("nothing to restore"));
}

#[test]
fn a_diff_returning_to_an_earlier_state_means_the_judges_disagree() {
    let env = TestEnv::scripted();
    let x = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let y = fixture("rechnung/repo/rechnung.py").replace("lines[1:]", "lines");
    let model = ScriptedModel::start(scenario(
        vec![
            agent_writes(&x),
            agent_writes(&y),
            agent_writes(&x),
            agent_writes(&y),
        ],
        vec![],
    ));
    let r = env.run(&model, &["--max-attempts", "5"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "judges_disagree");
    let a = s["attempts"].as_array().expect("attempts");
    assert_eq!(a.len(), 3);
    assert_eq!(a[2]["diff_sha256"], a[0]["diff_sha256"]);
    assert_eq!(
        a[2]["goal_passed"], false,
        "the goal test was not run again on a known state"
    );
    assert!(s["detail"]
        .as_str()
        .expect("detail")
        .contains("opposite directions"));
    env.git(&[
        "stash",
        "apply",
        s["stash_commit"].as_str().expect("parked"),
    ]);
    assert_eq!(env.read_repo("rechnung.py"), x);
}

/// The cap is never crossed: each call's worst case is reserved before it
/// goes upstream, and the call whose reservation does not fit beside what
/// was spent is refused — the job stops with the budget reason, under the
/// cap, before the script runs out.
#[test]
fn usage_near_the_usd_cap_never_crosses_it() {
    let env = TestEnv::scripted();
    // Each call: 20000 in / 2000 out on haiku = $0.003; the cap is $0.03.
    let call = |offset: u64| read_at(offset, 20_000, 2_000);
    let model = ScriptedModel::start(scenario(
        vec![session(
            (1..=8)
                .map(call)
                .chain([turn(vec![text("Done.")])])
                .collect(),
        )],
        vec![],
    ));
    let r = env.run(&model, &["--budget-usd", "0.03"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "budget_usd");
    let spent = s["totals"]["cost_usd"].as_f64().expect("cost");
    assert!(spent >= 0.003 - 1e-9, "calls ran: {spent}");
    assert!(spent <= 0.03 + 1e-12, "never above the cap: {spent}");
    let calls = model.session(Role::Agent, 0).len();
    assert!(
        (1..9).contains(&calls),
        "stopped before the script ran out: {calls}"
    );
    let failure = finished_sessions(&s)[0].failure.clone().expect("failed");
    assert!(
        failure.detail.contains("gateway refused"),
        "{}",
        failure.detail
    );
    assert_eq!(model.session_count(Role::Critic), 0);
}

#[test]
fn a_session_the_budget_cannot_cover_is_never_started() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    // One minimal haiku call costs $0.00015.
    let r = env.run(&model, &["--budget-usd", "0.0001"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "budget_usd");
    assert!(model.requests().is_empty(), "no model call was made");
    assert_eq!(s["totals"]["cost_usd"], 0.0);
}

#[test]
fn turn_and_token_caps() {
    let env = TestEnv::scripted();
    let call = |offset: u64| read_at(offset, 40_000, 100);
    let script = || {
        scenario(
            vec![session(
                (1..=8)
                    .map(call)
                    .chain([turn(vec![text("Done.")])])
                    .collect(),
            )],
            vec![],
        )
    };
    let model = ScriptedModel::start(script());
    let r = env.run(&model, &["--max-turns", "3"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.summary()["reason"], "max_turns");
    assert!(model.session(Role::Agent, 0).len() <= 4);

    let env = TestEnv::scripted();
    let model = ScriptedModel::start(script());
    // Each call reserves its request's size in input tokens beside the
    // 40,100 it is billed: the call that does not fit under the cap is
    // refused, and the tokens never pass it.
    let r = env.run(&model, &["--max-tokens", "250000"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "max_tokens");
    let tokens = s["totals"]["input_tokens"].as_u64().expect("in")
        + s["totals"]["output_tokens"].as_u64().expect("out");
    assert!((40_100..=250_000).contains(&tokens), "{tokens}");
}

#[test]
fn a_stalled_model_is_an_idle_timeout() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![read("rechnung.py")]),
            stalled(120_000),
        ])],
        vec![],
    ));
    let started = Instant::now();
    let r = env.run(&model, &["--idle-timeout", "2s"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "idle_timeout");
    // Within idle + grace (5 s) + the baseline: far from the 120 s stall.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn wall_clock_and_attempt_timeouts() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(vec![session(vec![stalled(120_000)])], vec![]));
    let r = env.run(&model, &["--attempt-timeout", "2s"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.summary()["reason"], "attempt_timeout");

    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(vec![session(vec![stalled(120_000)])], vec![]));
    let r = env.run(&model, &["--timeout", "3s"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.summary()["reason"], "wall_clock");
}

#[test]
fn processes_leaked_by_the_goal_test_and_the_agent_do_not_survive() {
    let env = TestEnv::new();
    let marker = format!("loopd-leak-{}", std::process::id());
    std::fs::write(
        env.repo.join("leak.py"),
        "import subprocess, sys\n\
         subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]],\n\
         \x20                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n",
    )
    .expect("leak.py");
    env.git(&["add", "leak.py"]);
    env.git(&["commit", "-qm", "a test helper that leaks a server"]);
    let agent = session(vec![
        turn(vec![bash(&format!("python3 leak.py agent-{marker}"))]),
        turn(vec![read("rechnung.py")]),
        turn(vec![write("rechnung.py", &clean_solution())]),
        turn(vec![text("Done.")]),
    ]);
    let model = ScriptedModel::start(scenario(vec![agent], vec![pass()]));
    let goal = format!("python3 leak.py goal-{marker} && python3 -m pytest -q");
    let r = env.run(
        &model,
        &[
            "--goal",
            &goal,
            "--allowed-tools",
            "Read,Write,Bash(python3 leak.py *)",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    // Both leaks happened and were stopped.
    let sessions: Vec<_> = finished_sessions(&s)
        .into_iter()
        .filter(|f| f.role == loopd::agent::session::Role::Agent)
        .collect();
    assert!(sessions[0].leftover_processes >= 1, "{sessions:?}");
    let dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("dir"));
    let goal_report: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("attempt-1/goal.json")).expect("goal.json"),
    )
    .expect("json");
    assert!(
        goal_report["steps"][0]["leftovers"]
            .as_u64()
            .expect("count")
            >= 1,
        "{goal_report}"
    );
    assert_eq!(survivors(&marker), Vec::<String>::new());
}

#[test]
fn an_orphan_that_scrubs_its_environment_does_not_survive_either() {
    // `env -i` drops the containment token; the orphan is still re-parented
    // to loopd (a subreaper), which stops it as a stray.
    let env = TestEnv::new();
    let marker = format!("loopd-stray-{}", std::process::id());
    let agent = session(vec![
        turn(vec![bash(&format!(
            "env -i setsid /bin/sh -c 'sleep 600; : {marker}' > /dev/null 2>&1 &"
        ))]),
        turn(vec![read("rechnung.py")]),
        turn(vec![write("rechnung.py", &clean_solution())]),
        turn(vec![text("Done.")]),
    ]);
    let model = ScriptedModel::start(scenario(vec![agent], vec![pass()]));
    let r = env.run(&model, &["--allowed-tools", "Read,Write,Bash"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let stray_ran = model.session(Role::Agent, 0).len() >= 2;
    assert!(stray_ran, "the agent's Bash call ran");
    assert_eq!(survivors(&marker), Vec::<String>::new(), "{}", r.stderr);
}

#[test]
fn sigterm_mid_attempt_parks_the_partial_work() {
    let env = TestEnv::new();
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let notes = "work in progress\nline two, with bytes: \u{e9}\u{1F600}\n";
    let agent = session(vec![
        turn(vec![read("rechnung.py")]),
        turn(vec![
            write("rechnung.py", &partial),
            write("NOTES.md", notes),
        ]),
        stalled(120_000),
    ]);
    let model = ScriptedModel::start(scenario(vec![agent], vec![]));
    let mut cmd = env.loopd(Some(&model));
    cmd.args(["run", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn loopd");
    wait_for_requests(&model, 0, 3);
    send_signal(child.id(), 15);
    let r = finish(child.wait_with_output().expect("wait loopd"));
    assert_eq!(r.code, 4, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "interrupted");
    assert_eq!(s["reason"], "signal");
    assert_eq!(env.git(&["status", "--porcelain"]), "", "the tree is clean");
    let report = std::path::PathBuf::from(s["failure_report"].as_str().expect("report"));
    assert!(report.starts_with(&env.state) && report.is_file());
    let f: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("read")).expect("json");
    assert_eq!(f["reason"], "signal");
    assert!(f["last_events"].as_array().expect("events").len() <= 10);
    let stash = s["stash_commit"].as_str().expect("parked");
    let list = env.git(&["stash", "list"]);
    assert!(
        list.contains(&format!(
            "loopd {}: signal",
            s["job_id"].as_str().expect("id")
        )),
        "{list}"
    );
    env.git(&["stash", "apply", stash]);
    assert_eq!(
        std::fs::read(env.repo.join("rechnung.py")).expect("read"),
        partial.as_bytes()
    );
    assert_eq!(
        std::fs::read(env.repo.join("NOTES.md")).expect("read"),
        notes.as_bytes()
    );
}

#[test]
fn an_api_error_is_an_agent_error_and_the_work_is_parked() {
    use crate::support::model::HttpError;
    let env = TestEnv::new();
    let broken = Turn {
        error: Some(HttpError {
            status: 400,
            message: "mock bad request".into(),
        }),
        ..Turn::default()
    };
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![read("rechnung.py")]),
            turn(vec![write("NEW.md", "draft\n")]),
            broken,
        ])],
        vec![],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 5, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "error");
    assert_eq!(s["reason"], "agent_error");
    assert!(
        s["detail"].as_str().expect("detail").contains("api_error"),
        "{}",
        s["detail"]
    );
    assert!(s["stash_commit"].is_string(), "the partial work is parked");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}
