//! `loopd run`: the attempt loop against the real CLI (issue: the supervised
//! attempt loop).

use serde_json::{json, Value};

use crate::support::model::{load_scenario, Role, ScriptedModel};
use crate::support::*;

fn attempts(summary: &Value) -> &Vec<Value> {
    summary["attempts"].as_array().expect("attempts is a list")
}

#[test]
fn accepted_in_attempt_one() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted");
    assert_eq!(s["reason"], "accepted");
    assert_eq!(
        s["base_ref"].as_str().expect("base_ref").len(),
        40,
        "BASE_REF is a commit id"
    );
    assert_eq!(
        s["base_ref"].as_str(),
        Some(env.git(&["rev-parse", "HEAD"]).trim())
    );
    let a = attempts(&s);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["goal_passed"], true);
    assert_eq!(a[0]["critic"], "PASS");
    assert_eq!(a[0]["failed_step"], Value::Null);
    assert_eq!(s["stash_commit"], Value::Null);
    assert_eq!(s["failure_report"], Value::Null);
    for field in ["job_id", "repo", "totals", "attempts"] {
        assert!(s.get(field).is_some(), "summary lacks {field}");
    }
    // The accepted change stays in the working tree.
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
    // Exactly one agent and one critic session; nothing unscripted.
    assert_eq!(model.session_count(Role::Agent), 1);
    assert_eq!(model.session_count(Role::Critic), 1);
    assert!(model.unscripted().is_empty(), "{:?}", model.unscripted());
    // summary.json and the ledger are outside the repository.
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run_dir"));
    assert!(run_dir.starts_with(&env.state) && !run_dir.starts_with(&env.repo));
    let on_disk: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("summary.json")).expect("summary.json"),
    )
    .expect("json");
    assert_eq!(on_disk, s);
    let tool_calls = agent_tool_calls(&s);
    assert_eq!(tool_calls.len(), 2, "Read and Write: {tool_calls:?}");
    assert_eq!(tool_calls[0].tool, "Read");
    assert_eq!(tool_calls[0].args_sha256.len(), 64);
    assert_eq!(tool_calls[1].outcome, "ok");
}

#[test]
fn agent_command_line_and_session_settings() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let agent = model.session(Role::Agent, 0);
    let critic = model.session(Role::Critic, 0);
    // The agent model and the critic model are the configured ones.
    assert!(agent[0].model.contains("haiku"), "{}", agent[0].model);
    assert!(critic[0].model.contains("sonnet"), "{}", critic[0].model);
    // The critic has no tools but the structured-output one.
    let critic_tools = critic[0].tool_names();
    assert!(critic_tools.contains(&"StructuredOutput".to_string()));
    for t in ["Read", "Edit", "Write", "Bash"] {
        assert!(
            !critic_tools.iter().any(|n| n == t),
            "critic was offered {t}: {critic_tools:?}"
        );
    }
    // The key reached the upstream on every call, put there by loopd's
    // metering gateway (the CLI only ever held a session token)...
    assert!(agent
        .iter()
        .chain(critic.iter())
        .all(|r| r.api_key.as_deref() == Some(API_KEY)));
    // ...and was never written anywhere under the state dir.
    env.assert_no_secret_in_state(&[API_KEY]);
}

#[test]
fn api_key_is_not_in_the_environment_of_the_agents_tools() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash("env")]),
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &["--allowed-tools", "Read,Write,Bash(env)"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The tool's output reached the model in the next request.
    let second = &model.session(Role::Agent, 0)[1];
    let body = second.body.to_string();
    assert!(
        body.contains("LOOPD_CONTAINMENT="),
        "the env output is in the request: {body}"
    );
    assert!(
        !body.contains(API_KEY),
        "the agent's Bash tool saw the API key"
    );
    assert_eq!(second.api_key.as_deref(), Some(API_KEY));
    // The Bash tool sees the gateway's session token in its place.
    assert!(body.contains("ANTHROPIC_API_KEY=loopd-session-"), "{body}");
}

#[test]
fn green_but_dirty_is_rejected_then_fixed() {
    // The demo's scenario file: attempt 1 leaves a debug print, the
    // pre-critic finds it without a model call, attempt 2 removes it and the
    // critic (asked once) passes.
    let env = TestEnv::new();
    let model = ScriptedModel::start(load_scenario(
        &manifest_dir().join("fixtures/scenarios/demo.toml"),
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let a = attempts(&s);
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["goal_passed"], true);
    assert_eq!(a[0]["critic"], "skipped");
    assert_eq!(a[0]["rejected_by"], "precheck");
    assert_eq!(a[1]["critic"], "PASS");
    assert_eq!(model.session_count(Role::Critic), 1);
    // Attempt 2's prompt carries the finding verbatim, in the contract's shape.
    let prompt2 = model.session(Role::Agent, 1)[0].prompt();
    let expected = "Make python3 -m pytest and ruff check . pass. Do not delete, skip or weaken any test.\n\n\
                    The previous attempt was rejected:\n\
                    rechnung.py:18 (rule 2, gate precheck): debug output was added (a print): `print(\"DEBUG net_total\", total)` \
                    — fix: remove the debug output; report through the code's own return values, errors or logger\n\
                    Fix exactly these points, nothing else.";
    assert!(prompt2.ends_with(expected), "attempt 2 prompt:\n{prompt2}");
    // Costs and turns are the CLI's accounting of the scripted usage:
    // agent 1: 18000 in / 830 out on haiku ($0.10/M, $0.50/M) = $0.002215
    // agent 2: 13000 / 740 on haiku = $0.00167
    // the critic: 2500 / 60 on sonnet ($2/M, $10/M) = $0.0056
    let close = |v: &Value, want: f64| (v.as_f64().expect("number") - want).abs() < 1e-9;
    assert!(close(&a[0]["cost_usd"], 0.002215), "{}", a[0]["cost_usd"]);
    assert!(
        close(&a[1]["cost_usd"], 0.00167 + 0.0056),
        "{}",
        a[1]["cost_usd"]
    );
    assert!(close(&s["totals"]["cost_usd"], 0.002215 + 0.00167 + 0.0056));
    assert_eq!(a[0]["input_tokens"], 18000);
    assert_eq!(a[0]["output_tokens"], 830);
    assert_eq!(s["totals"]["input_tokens"], 18000 + 13000 + 2500);
    // Turns are the CLI's num_turns: 4 agent calls, and 2 for the critic
    // session (the CLI counts the structured-output round as a turn).
    assert_eq!(a[0]["turns"], 4);
    assert_eq!(a[1]["turns"], 3 + 2);
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
}

#[test]
fn red_goal_test_skips_the_critic_and_feeds_back_the_failing_step() {
    let env = TestEnv::scripted();
    // Attempt 1 fixes only line_total: pytest stays red.
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&partial), agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let a = attempts(&s);
    assert_eq!(a[0]["goal_passed"], false);
    assert_eq!(a[0]["failed_step"], "pytest");
    assert_eq!(a[0]["critic"], "skipped");
    assert_eq!(a[1]["critic"], "PASS");
    // One critic session in all: none for the red attempt.
    assert_eq!(model.session_count(Role::Critic), 1);
    let prompt2 = model.session(Role::Agent, 1)[0].prompt();
    assert!(prompt2.contains("The previous attempt was rejected:\nThe goal test failed at step `pytest` (`python3 -m pytest -q`, exit code 1)"), "{prompt2}");
    assert!(
        prompt2.contains("FAILED tests/test_rechnung.py::test_net_total"),
        "pytest's output is in the prompt: {prompt2}"
    );
    assert!(prompt2.ends_with("Fix exactly these points, nothing else."));
}

#[test]
fn a_critic_answering_in_prose_is_a_rejection() {
    let env = TestEnv::scripted();
    // The CLI reminds the model once to use the tool; prose twice ends the
    // session without structured_output.
    let prose = session(vec![
        turn(vec![text("PASS")]),
        turn(vec![text("PASS, looks good to me.")]),
    ]);
    let model = ScriptedModel::start(scenario(vec![agent_writes(&clean_solution())], vec![prose]));
    let r = env.run(&model, &["--max-attempts", "1"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "exhausted");
    assert_eq!(s["reason"], "attempts_exhausted");
    let a = attempts(&s);
    assert_eq!(a[0]["goal_passed"], true);
    assert_eq!(a[0]["critic"], "invalid");
    assert!(
        a[0]["critic_note"]
            .as_str()
            .expect("note")
            .contains("prose"),
        "{}",
        a[0]["critic_note"]
    );
}

#[test]
fn attempts_exhausted_exits_one_and_parks_the_work() {
    let env = TestEnv::scripted();
    let only_mult = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let only_slice = fixture("rechnung/repo/rechnung.py").replace("lines[1:]", "lines");
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&only_mult), agent_writes(&only_slice)],
        vec![],
    ));
    let r = env.run(&model, &["--max-attempts", "2"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "exhausted");
    assert_eq!(attempts(&s).len(), 2);
    assert_eq!(model.session_count(Role::Critic), 0);
    // The circuit breaker parked the last state and wrote the report outside the repo.
    let stash = s["stash_commit"].as_str().expect("stash_commit");
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "the tree is clean afterwards"
    );
    assert_eq!(
        env.git(&[
            "rev-parse",
            &format!("refs/loopd/stash/{}", s["job_id"].as_str().expect("id"))
        ])
        .trim(),
        stash
    );
    let report = std::path::PathBuf::from(s["failure_report"].as_str().expect("failure_report"));
    assert!(report.starts_with(&env.state));
    let f: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("failure.json"))
        .expect("json");
    assert_eq!(f["reason"], "attempts_exhausted");
    assert!(f["restore"]
        .as_str()
        .expect("restore")
        .contains(&format!("stash apply {stash}")));
    env.git(&["stash", "apply", stash]);
    assert_eq!(env.read_repo("rechnung.py"), only_slice);
}

#[test]
fn new_untracked_files_are_in_the_critics_diff() {
    let env = TestEnv::scripted();
    let helper = "\"\"\"Helpers for invoices.\"\"\"\n\nUNTRACKED_MARKER = 42\n";
    let agent = session(vec![
        turn(vec![read("rechnung.py")]),
        turn(vec![
            write("rechnung.py", &clean_solution()),
            write("invoice_helpers.py", helper),
        ]),
        turn(vec![text("Done.")]),
    ]);
    let model = ScriptedModel::start(scenario(vec![agent], vec![pass()]));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let critic_prompt = model.session(Role::Critic, 0)[0].prompt();
    assert!(
        critic_prompt.contains("invoice_helpers.py"),
        "{critic_prompt}"
    );
    assert!(
        critic_prompt.contains("+UNTRACKED_MARKER = 42"),
        "the new file's content is in the diff"
    );
    // It also got the task, the baseline and the rubric, and nothing of the agent's transcript.
    assert!(critic_prompt.contains("Make python3 -m pytest and ruff check . pass."));
    assert!(
        critic_prompt.contains("4 failed, 2 passed"),
        "the baseline: {critic_prompt}"
    );
    assert!(critic_prompt.contains("1. No test was deleted, skipped or weakened."));
    assert!(
        !critic_prompt.contains("Done."),
        "the agent's words are not shown to the critic"
    );
}

#[test]
fn bad_config_and_rubric_exit_two_naming_the_field() {
    let env = TestEnv::new();
    let cfg = env.repo.join("loopd.toml");
    let original = std::fs::read_to_string(&cfg).expect("loopd.toml");
    std::fs::write(
        &cfg,
        original.replace("max_attempts = 3", "max_attempts = -2"),
    )
    .expect("write");
    env.git(&["commit", "-qam", "bad config"]);
    let r = finish(env.loopd(None).args(["run"]).output().expect("loopd"));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("loopd.toml")
            && r.stderr.contains("`max_attempts`")
            && r.stderr.contains("positive integer"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    assert!(!env.state.join("runs").exists(), "nothing was started");

    std::fs::write(&cfg, format!("rubric = \"rubric.toml\"\n{original}")).expect("write");
    std::fs::write(
        env.repo.join("rubric.toml"),
        "name = \"r\"\n[[rule]]\nid = 1\n",
    )
    .expect("write rubric");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "bad rubric"]);
    let r = finish(env.loopd(None).args(["check"]).output().expect("loopd"));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("rubric.toml") && r.stderr.contains("`rule[0].text`"),
        "{}",
        r.stderr
    );

    let r = finish(
        env.loopd(None)
            .args(["run", "--max-turns", "0"])
            .output()
            .expect("loopd"),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn dirty_tree_and_non_repository_exit_five() {
    let env = TestEnv::new();
    std::fs::write(env.repo.join("scratch.txt"), "mine\n").expect("write");
    let r = finish(env.loopd(None).args(["run"]).output().expect("loopd"));
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("uncommitted changes") && r.stderr.contains("scratch.txt"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(env.repo.join("scratch.txt")).expect("kept"),
        "mine\n",
        "the user's file is untouched"
    );

    let plain = env.tmp.path().join("plain");
    std::fs::create_dir_all(&plain).expect("dir");
    let r = finish(
        env.loopd(None)
            .args(["run", "-C"])
            .arg(&plain)
            .output()
            .expect("loopd"),
    );
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("is not a git repository") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
}

#[test]
fn unsafe_state_dirs_are_refused_with_exit_five() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let refused = |state: &std::path::Path, cmd: &str, needle: &str| {
        let r = finish(
            env.loopd(None)
                .arg(cmd)
                .arg("--state-dir")
                .arg(state)
                .output()
                .expect("loopd"),
        );
        assert_eq!(r.code, 5, "{cmd} {}: {}", state.display(), r.stderr);
        assert!(
            r.stderr.contains(needle) && r.stderr.contains("hint:"),
            "{}",
            r.stderr
        );
    };
    // Inside the repository: the breaker would stash loopd's own files.
    refused(&env.repo.join(".loopd"), "run", "is inside the repository");
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "nothing created in the repository"
    );

    // World- or group-writable: the state dir, or a directory under it.
    let open = env.tmp.path().join("open-state");
    std::fs::create_dir_all(&open).expect("dir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    refused(&open, "run", "is world-writable (mode 777)");
    refused(&open, "daemon", "is world-writable (mode 777)");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::create_dir_all(open.join("runs")).expect("runs");
    std::fs::set_permissions(open.join("runs"), std::fs::Permissions::from_mode(0o770))
        .expect("chmod");
    refused(
        &open,
        "run",
        "runs` (in the state dir) is group-writable (mode 770)",
    );
}

#[test]
fn check_shows_the_sandbox_and_refuses_a_relative_sandbox_path() {
    let env = TestEnv::new();
    let r = env.exec(&["check", "--require-sandbox"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "sandbox:       Landlock for the agent, the critic and the goal steps (required)"
        ),
        "{}",
        r.stdout
    );
    let cfg = std::fs::read_to_string(env.repo.join("loopd.toml")).expect("cfg");
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!("{cfg}\n[sandbox]\nread_write = [\"cache\"]\n"),
    )
    .expect("cfg");
    let r = env.exec(&["check"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("sandbox.read_write[0]") && r.stderr.contains("an absolute path"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_job_without_the_sandbox_says_so_loudly() {
    let env = TestEnv::scripted();
    env.append_config("[sandbox]\nenabled = false\n", "no sandbox");
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.summary()["sandbox"], "off");
    assert!(
        r.stderr.contains("NO SANDBOX: `[sandbox] enabled = false`"),
        "{}",
        r.stderr
    );
}

#[test]
fn check_prints_the_resolved_job() {
    let env = TestEnv::new();
    let r = finish(
        env.loopd(None)
            .args(["check", "--max-attempts", "7", "--json"])
            .output()
            .expect("loopd"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let job: Value = serde_json::from_str(&r.stdout).expect("json job");
    assert_eq!(job["max_attempts"], 7);
    assert_eq!(
        job["goal"][0],
        json!({"name": "pytest", "run": "python3 -m pytest -q", "timeout": "2m", "report": "pytest"})
    );
    assert_eq!(job["allowed_tools"][5], "Bash(python3 -m pytest -q *)");
    assert_eq!(job["rubric"]["rules"].as_array().expect("rules").len(), 4);
}

#[test]
fn preflight_a_goal_that_cannot_run_or_has_nothing_to_fix_spends_nothing() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    // A typo in the goal: the baseline's 127 ends the job before attempt 1.
    let r = env.run(&model, &["--goal", "ruf check ."]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "error");
    assert_eq!(s["reason"], "goal_not_runnable");
    assert_contains_all(
        &r.stderr,
        &["ruf check .", "was not found", "loopd check --preflight"],
        "the log names the step and the way to check it",
    );
    // A program that is there but cannot be executed: 126. (In the
    // repository: the job's root holds nothing beside what it may read.)
    std::fs::write(env.repo.join("lint.sh"), "echo lint\n").expect("write");
    env.git(&["add", "lint.sh"]);
    env.git(&["commit", "-qm", "a lint script that is not executable"]);
    let r = env.run(&model, &["--goal", "./lint.sh"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not executable"), "{}", r.stderr);
    // Already green: nothing to fix, exit 7, unless the job allows it.
    let r = env.run(&model, &["--goal", "true"]);
    assert_eq!(r.code, 7, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "nothing_to_fix");
    assert_eq!(s["reason"], "already_green");
    assert_eq!(s["attempts"].as_array().map(Vec::len), Some(0));
    assert!(model.requests().is_empty(), "no model call for any of them");
    assert_eq!(env.git(&["status", "--porcelain"]), "", "nothing touched");

    let r = env.run(&model, &["--goal", "true", "--allow-green"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.summary()["outcome"], "accepted");
    assert!(
        !model.requests().is_empty(),
        "a rubric-only job runs the loop"
    );
}

#[test]
fn check_preflight_reports_what_run_would_find() {
    let env = TestEnv::new();
    let r = env.exec(&["check", "--goal", "ruf check ."]);
    assert_eq!(r.code, 0, "without --preflight nothing runs: {}", r.stderr);
    assert_contains_all(
        &r.stderr,
        &["`ruf` was not found", "--preflight"],
        "check's warning",
    );

    let r = env.exec(&["check", "--preflight", "--goal", "ruf check ."]);
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("preflight:") && r.stdout.contains("cannot run"),
        "{}",
        r.stdout
    );
    let r = env.exec(&["check", "--preflight", "--goal", "true"]);
    assert_eq!(r.code, 7, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("nothing to fix"), "{}", r.stdout);
    let r = env.exec(&["check", "--preflight", "--goal", "true", "--allow-green"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    // The fixture's own goal is red: something to fix.
    let r = env.exec(&["check", "--preflight"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("preflight:     ready"), "{}", r.stdout);
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "check leaves the tree as it was"
    );
}
