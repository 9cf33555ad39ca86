//! An honest way out (issue 13): the agent escalates instead of forcing an
//! impossible task, and a human's answer or a raised budget resumes a job on
//! its parked work — with the same journal, nothing billed twice.

use serde_json::Value;

use crate::support::github::FakeGitHub;
use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

const LOOPD: &str = env!("CARGO_BIN_EXE_loopd");

/// The agent's Bash call of `loopd escalate`.
fn escalate(test: &str, reason: &str) -> model::Block {
    bash(&format!(
        "{LOOPD} escalate --test {test} --reason \"{reason}\""
    ))
}

use crate::support::model;

/// A Read of rechnung.py at `offset` (distinct calls) with scripted usage.
fn read_at(offset: u64, input_tokens: u64, output_tokens: u64) -> model::Turn {
    turn_usage(
        vec![tool(
            "Read",
            serde_json::json!({"file_path": "{cwd}/rechnung.py", "offset": offset}),
        )],
        input_tokens,
        output_tokens,
    )
}

fn partial_fix() -> String {
    fixture("rechnung/repo/rechnung.py").replace("quantity + unit_price", "quantity * unit_price")
}

fn resume(env: &TestEnv, model: &ScriptedModel, args: &[&str]) -> RunResult {
    finish(
        env.loopd(Some(model))
            .arg("resume")
            .args(args)
            .arg("--json")
            .output()
            .expect("loopd resume"),
    )
}

fn run_dir(summary: &Value) -> std::path::PathBuf {
    std::path::PathBuf::from(summary["run_dir"].as_str().expect("run_dir"))
}

#[test]
fn an_impossible_task_is_escalated_not_forced() {
    let env = TestEnv::new();
    // A test that contradicts the docstring (and the other test of
    // line_total): no honest change makes both pass.
    std::fs::write(
        env.repo.join("tests/test_line_sum.py"),
        "from decimal import Decimal\n\nfrom rechnung import line_total\n\n\ndef test_line_total_is_a_sum():\n    assert line_total(3, Decimal(\"2.50\")) == Decimal(\"5.50\")\n",
    )
    .expect("test");
    let gh = FakeGitHub::start();
    let cfg = env.read_repo("loopd.toml");
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!("{cfg}\n[[notify]]\nurl = \"{}\"\n", gh.hook_url()),
    )
    .expect("cfg");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "an impossible test"]);
    let test_id = "tests/test_line_sum.py::test_line_total_is_a_sum";
    let claim = "the docstring says line_total is the price of one line, and test_line_total expects 3 x 2.50 = 7.50; this test expects the sum 5.50";
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &partial_fix())]),
            turn(vec![escalate(test_id, claim)]),
            turn(vec![text("Escalated to a human.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 6, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "needs_human");
    assert_eq!(s["reason"], "escalated");
    assert_eq!(s["attempts"][0]["stopped"], "escalated");
    let e = &s["escalation"];
    assert_eq!(e["attempt"], 1);
    assert_eq!(e["test"], test_id);
    assert_eq!(e["claim"], claim);
    assert!(
        // The baseline's: the sum test passes there, test_line_total fails.
        e["goal_output"]
            .as_str()
            .expect("goal output")
            .contains("4 failed, 3 passed"),
        "{e}"
    );
    assert!(
        e["diff"]
            .as_str()
            .expect("diff")
            .contains("+    return quantity * unit_price"),
        "{e}"
    );
    // No further model call: no critic, no second attempt; and the first
    // prompt explained the exit.
    assert_eq!(model.session_count(Role::Agent), 1);
    assert_eq!(model.session_count(Role::Critic), 0);
    assert!(model.unscripted().is_empty(), "{:?}", model.unscripted());
    let prompt = std::fs::read_to_string(run_dir(&s).join("attempt-1/prompt.txt")).expect("prompt");
    assert!(
        prompt.contains(&format!("`{LOOPD} escalate --test <test id>")),
        "{prompt}"
    );
    // Never accepted: the work is parked like any other ending.
    let stash = s["stash_commit"].as_str().expect("parked");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert!(env.git(&["stash", "list"]).contains("escalated"));
    env.git(&["stash", "apply", stash]);
    assert_eq!(env.read_repo("rechnung.py"), partial_fix());
    // The journal holds the escalation.
    assert!(journal(&s).iter().any(|ev| matches!(
        ev,
        loopd::journal::Event::Escalated { escalation } if escalation.test == test_id
    )));
    // One webhook, with the claim.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while gh.delivered().is_empty() {
        assert!(std::time::Instant::now() < until, "never delivered");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let hooks = gh.delivered();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["event"], "needs_human");
    assert_eq!(hooks[0]["reason"], "escalated");
    assert_eq!(hooks[0]["escalation"]["test"], test_id);
    assert!(hooks[0]["text"].as_str().expect("text").contains(claim));
    // The report and the status say so.
    let id = s["job_id"].as_str().expect("id");
    let report = env.exec(&["report", id]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    assert_contains_all(
        &report.stdout,
        &[
            "The agent escalated (attempt 1)",
            test_id,
            claim,
            "loopd resume",
        ],
        "the report",
    );
    let status = env.exec(&["status", id, "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let st: Value = serde_json::from_str(status.stdout.trim()).expect("json");
    assert_eq!(st["state"], "needs_human");
}

#[test]
fn turned_off_there_is_no_way_out() {
    let env = TestEnv::scripted();
    let cfg = env.read_repo("loopd.toml");
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!("{cfg}\n[guard]\nescalation = false\n"),
    )
    .expect("cfg");
    env.git(&["commit", "-qam", "no escalation"]);
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![escalate(
                "tests/test_rechnung.py::test_net_total",
                "I would rather not",
            )]),
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "accepted");
    let calls = agent_tool_calls(&s);
    assert_ne!(
        calls[0].outcome, "ok",
        "the command was not allowed: {calls:?}"
    );
    let prompt = std::fs::read_to_string(run_dir(&s).join("attempt-1/prompt.txt")).expect("prompt");
    assert!(!prompt.contains("escalate"), "{prompt}");
}

#[test]
fn a_note_answers_an_escalation_and_the_job_resumes_on_its_work() {
    let env = TestEnv::scripted();
    // Before any job: an empty table says so.
    let st = env.exec(&["status"]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert!(st.stdout.contains("no jobs yet"), "{}", st.stdout);
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![read("rechnung.py")]),
                turn(vec![write("rechnung.py", &partial_fix())]),
                turn(vec![escalate(
                    "tests/test_rechnung.py::test_net_total",
                    "net_total skips the first line on purpose, says the comment",
                )]),
                turn(vec![text("Escalated.")]),
            ]),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 6, "{}", r.stderr);
    let first = r.summary();
    let id = first["job_id"].as_str().expect("id").to_owned();
    let st = env.exec(&["status"]);
    assert!(
        st.stdout.contains(&id)
            && st.stdout.contains("needs_human")
            && st.stdout.contains("(foreground)"),
        "{}",
        st.stdout
    );

    let note = "The test is right: net_total sums every line; the slice is the bug.";
    let r = resume(&env, &model, &[&id, "--note", note]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["job_id"], id.as_str());
    assert_eq!(s["outcome"], "accepted");
    assert!(s.get("escalation").is_none(), "{s}");
    let a = s["attempts"].as_array().expect("attempts");
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["stopped"], "escalated");
    assert_eq!(a[1]["critic"], "PASS");
    // The note is the next prompt's first paragraph.
    let prompt = std::fs::read_to_string(run_dir(&s).join("attempt-2/prompt.txt")).expect("prompt");
    assert!(prompt.starts_with(&format!("{note}\n\n")), "{prompt}");
    assert!(model.session(Role::Agent, 1)[0].prompt().contains(note));
    // The parked work was back before the agent read the file.
    let read_result = model.session(Role::Agent, 1)[1].body.to_string();
    assert!(
        read_result.contains("quantity * unit_price"),
        "{read_result}"
    );
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
    // The same journal: one start, the escalation, the reopening, the restore.
    let events = journal(&s);
    let kinds: Vec<&str> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "job_started").count(), 1);
    for k in ["escalated", "reopened", "restored"] {
        assert!(kinds.contains(&k), "{k} missing: {kinds:?}");
    }
    assert_eq!(model.session_count(Role::Agent), 2);
    assert_eq!(model.session_count(Role::Critic), 1);
    let st = env.exec(&["status", &id, "--json"]);
    let st: Value = serde_json::from_str(st.stdout.trim()).expect("json");
    assert_eq!(st["state"], "accepted");
    // An accepted job is not resumed.
    let again = resume(&env, &model, &[&id]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("hint:"), "{}", again.stderr);
}

#[test]
fn a_job_stopped_by_its_budget_resumes_with_a_raised_budget() {
    let env = TestEnv::scripted();
    // Each call: 60000 in / 2000 out on haiku = $0.007; the cap is $0.014:
    // the first call fits beside its worst case, the second does not (the
    // gateway refuses it), and a resume has no room either.
    let model = ScriptedModel::start(scenario(
        vec![
            session(
                (1..=6)
                    .map(|o| read_at(o, 60_000, 2_000))
                    .chain([turn(vec![text("Done.")])])
                    .collect(),
            ),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let r = env.run(&model, &["--budget-usd", "0.014"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let before = r.summary();
    assert_eq!(before["reason"], "budget_usd");
    let id = before["job_id"].as_str().expect("id").to_owned();
    let calls_before = model.requests().len();

    // Not raised, there is no room: refused before anything runs.
    let r = resume(&env, &model, &[&id]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--budget-usd"), "{}", r.stderr);
    assert_eq!(model.requests().len(), calls_before);

    let r = resume(&env, &model, &[&id, "--budget-usd", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let after = r.summary();
    assert_eq!(after["outcome"], "accepted");
    let a = after["attempts"].as_array().expect("attempts");
    assert_eq!(a.len(), 2);
    assert_eq!(a[0], before["attempts"][0], "attempt 1 is as it was");
    let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
    let total = |s: &Value| s["totals"]["cost_usd"].as_f64().expect("cost");
    assert!(
        close(
            total(&after),
            total(&before) + a[1]["cost_usd"].as_f64().expect("cost")
        ),
        "{} != {} + {}",
        total(&after),
        total(&before),
        a[1]["cost_usd"]
    );
    // Every session finished once, and the totals are exactly their sum.
    let sessions = finished_sessions(&after);
    let mut numbers: Vec<u32> = sessions.iter().map(|f| f.session).collect();
    numbers.dedup();
    assert_eq!(numbers, [0, 1, 2], "{sessions:?}");
    let sum: f64 = sessions.iter().map(|f| f.spend.cost_usd).sum();
    assert!(close(total(&after), sum), "{} != {sum}", total(&after));
    assert_eq!(model.session_count(Role::Agent), 2);
    assert_eq!(model.session_count(Role::Critic), 1);
    assert!(model.unscripted().is_empty(), "{:?}", model.unscripted());
}

#[test]
fn a_daemon_job_that_escalated_is_queued_again_with_the_note() {
    use crate::support::daemon::{final_state, submit, wait_for, Daemon};
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![read("rechnung.py")]),
                turn(vec![write("rechnung.py", &partial_fix())]),
                turn(vec![escalate(
                    "tests/test_rechnung.py::test_net_total",
                    "the first line looks like a header row",
                )]),
                turn(vec![text("Escalated.")]),
            ]),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let id = submit(&env, &[]);
    let d = Daemon::start(&env, &model, 1);
    let st = final_state(&env, &id);
    assert_eq!(st["state"], "needs_human", "{st}");
    assert_eq!(st["reason"], "escalated");

    let note = "There is no header row: every line counts.";
    let r = finish(
        env.loopd(None)
            .args(["resume", &id, "--note", note])
            .output()
            .expect("resume"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("queued again"), "{}", r.stdout);
    let st = wait_for(&env, &id, "accepted", |s| s["state"] == "accepted");
    assert_eq!(st["attempt"], 2, "{st}");
    let commit = st["commit_accepted"].as_str().expect("committed");
    assert_eq!(
        env.git(&["show", &format!("{commit}:rechnung.py")]),
        clean_solution()
    );
    let run_dir = env.state.join("runs").join(&id);
    let prompt = std::fs::read_to_string(run_dir.join("attempt-2/prompt.txt")).expect("prompt");
    assert!(prompt.starts_with(&format!("{note}\n\n")), "{prompt}");
    // The parked work was back in the new worktree before the agent read it.
    let read_result = model.session(Role::Agent, 1)[1].body.to_string();
    assert!(
        read_result.contains("quantity * unit_price"),
        "{read_result}"
    );
    assert_eq!(model.session_count(Role::Agent), 2);
    assert_eq!(model.session_count(Role::Critic), 1);
    d.signal(15);
    assert_eq!(d.wait(std::time::Duration::from_secs(20)), 0);
}

#[test]
fn a_late_attempt_that_detects_the_test_runner_is_rejected_with_file_and_line() {
    let env = TestEnv::scripted();
    let original = fixture("rechnung/repo/rechnung.py");
    let only_mult = original.replace("quantity + unit_price", "quantity * unit_price");
    let only_slice = original.replace("lines[1:]", "lines");
    // Green, but it behaves differently under pytest (line 11).
    let cheat = clean_solution()
        .replace("from decimal import", "import os\nfrom decimal import")
        .replace(
            "    return quantity * unit_price\n",
            "    if \"PYTEST_CURRENT_TEST\" in os.environ:\n        return quantity * unit_price\n    return quantity * unit_price\n",
        );
    let model = ScriptedModel::start(scenario(
        vec![
            agent_writes(&only_mult),
            agent_writes(&only_slice),
            agent_writes(&cheat),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "4"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let a = s["attempts"].as_array().expect("attempts");
    assert_eq!(a.len(), 4);
    assert_eq!(a[2]["goal_passed"], true);
    assert_eq!(a[2]["rejected_by"], "precheck");
    let finding = a[2]["gate_findings"][0].as_str().expect("a finding");
    assert!(
        finding.starts_with("rechnung.py:11 (rule 1, gate precheck): the change branches on being under test (`PYTEST_CURRENT_TEST`)"),
        "{finding}"
    );
    // The critic of the late attempt was asked for extra care; one critic call in all.
    assert_eq!(model.session_count(Role::Critic), 1);
    let critic = model.session(Role::Critic, 0)[0].prompt();
    assert!(
        critic.contains("This is attempt 4: special-casing of tests"),
        "{critic}"
    );
}
