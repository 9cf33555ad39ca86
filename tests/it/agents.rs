//! One table of run-loop scenarios, played by every agent CLI loopd drives
//! (issue 22): the same scripted turns reach Claude Code as Anthropic
//! Messages and Codex as Responses (the scripted model turns a `Write` into
//! the shell command a Codex model would run), and the same outcome is
//! expected of both. A mixed job — one vendor's agent, the other's critic —
//! is accepted end to end. What each of these proves that an in-process
//! test cannot is in `tests/it/README.md`.

use serde_json::Value;

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

/// Every agent, by its `--agent` name.
const AGENTS: [&str; 2] = ["claude", "codex"];

const LOOPD: &str = env!("CARGO_BIN_EXE_loopd");

fn run_as(env: &TestEnv, agent: &str, model: &ScriptedModel, args: &[&str]) -> RunResult {
    let mut all = vec!["--agent", agent];
    all.extend_from_slice(args);
    env.run(model, &all)
}

fn events(r: &RunResult) -> Vec<loopd::journal::Event> {
    journal(&r.summary())
}

/// A scenario of the table: its name, and what it does with one agent.
type Case = (&'static str, fn(&str));

const TABLE: &[Case] = &[
    ("accepted after a critique", accepted_after_a_critique),
    ("red, then green", red_then_green),
    ("tamper attempts are denied", tamper_is_denied),
    ("the same command repeated is stuck", stuck),
    ("the budget stops a session", budget_stop),
    ("the agent escalates", escalation),
    ("SIGTERM parks the work", sigterm_parks_the_work),
];

/// The table, for every agent: a failure names the scenario and the agent.
#[test]
fn every_scenario_for_every_agent() {
    let mut failed = Vec::new();
    for agent in AGENTS {
        for (name, case) in TABLE {
            let outcome = std::panic::catch_unwind(|| case(agent));
            if let Err(e) = outcome {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!(
                    "[{agent}] {name}: {}",
                    why.chars().take(3000).collect::<String>()
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

fn accepted_after_a_critique(agent: &str) {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scope_creep_then_clean(
        3,
        "average_line was not asked for",
        "remove average_line",
    ));
    let r = run_as(&env, agent, &model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted");
    assert_eq!(s["attempts"].as_array().expect("attempts").len(), 2);
    assert_eq!(s["attempts"][0]["critic"], "FAIL");
    // The second prompt carried the critic's finding.
    let second = model.session(Role::Agent, 1);
    assert!(
        second[0]
            .body
            .to_string()
            .contains("average_line was not asked for"),
        "the finding reached attempt 2"
    );
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
    // Metered on the agent's own wire, every call.
    let metered = events(&r)
        .into_iter()
        .filter(|e| matches!(e, loopd::journal::Event::MeteredCall(_)))
        .count();
    assert_eq!(metered, model.requests().len(), "every call was metered");
}

fn red_then_green(agent: &str) {
    let env = TestEnv::new();
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&partial), agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = run_as(&env, agent, &model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["attempts"][0]["goal_passed"], false);
    assert_eq!(
        s["attempts"][0]["critic"], "skipped",
        "a red goal skips the critic"
    );
    assert_eq!(s["attempts"][1]["goal_passed"], true);
    assert_eq!(model.session_count(Role::Critic), 1);
}

fn tamper_is_denied(agent: &str) {
    let env = TestEnv::new();
    let before = env.read_repo("tests/test_rechnung.py");
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![write(
                "tests/test_rechnung.py",
                "def test_nothing():\n    pass\n",
            )]),
            turn(vec![bash(
                "sed -i 's/assert/assert True or/' tests/test_rechnung.py",
            )]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = run_as(&env, agent, &model, &one_attempt(&[]));
    assert_eq!(
        env.read_repo("tests/test_rechnung.py"),
        before,
        "the test is intact"
    );
    let denied: Vec<String> = events(&r)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::ToolDenied(d) => Some(d.reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        denied.len(),
        2,
        "both tamper calls were denied: {denied:?}\n{}",
        r.stderr
    );
    // The honest fix after the denials is judged on its own merits.
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.summary()["attempts"][0]["denied_tool_calls"], 2);
}

fn stuck(agent: &str) {
    let env = TestEnv::new();
    let same = || turn(vec![bash("cat rechnung.py")]);
    let mut turns: Vec<_> = (0..8).map(|_| same()).collect();
    turns.push(turn(vec![text("Done.")]));
    let model = ScriptedModel::start(scenario(vec![session(turns)], vec![]));
    let r = run_as(&env, agent, &model, &one_attempt(&[]));
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.summary()["reason"], "stuck_repeat");
    let nudged = events(&r)
        .into_iter()
        .filter(|e| matches!(e, loopd::journal::Event::Nudged(_)))
        .count();
    assert_eq!(nudged, 1, "nudged once before the stop");
    assert_eq!(model.session_count(Role::Critic), 0);
}

fn budget_stop(agent: &str) {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![read("rechnung.py")]),
            turn_usage(vec![read("tests/test_rechnung.py")], 10_000_000, 100),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = run_as(&env, agent, &model, &["--budget-usd", "0.5"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "budget_usd");
    assert_eq!(model.session_count(Role::Critic), 0);
    let stash = s["stash_commit"].as_str().unwrap_or_default();
    assert!(stash.is_empty() || env.git(&["stash", "list"]).contains("budget_usd"));
}

fn escalation(agent: &str) {
    let env = TestEnv::new();
    let test = "tests/test_rechnung.py::test_line_total";
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash(&format!(
                "{LOOPD} escalate --test {test} --reason \"the test contradicts the docstring\""
            ))]),
            turn(vec![text("Escalated.")]),
        ])],
        vec![],
    ));
    let r = run_as(&env, agent, &model, &[]);
    assert_eq!(r.code, 6, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "escalated");
    assert_eq!(s["escalation"]["test"], test);
}

fn sigterm_parks_the_work(agent: &str) {
    let env = TestEnv::new();
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![write("rechnung.py", &partial)]),
            turn(vec![write("NOTES.md", "work in progress\n")]),
            stalled(120_000),
        ])],
        vec![],
    ));
    let mut cmd = env.loopd(Some(&model));
    cmd.args(["run", "--json", "--agent", agent])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn loopd");
    wait_for_requests(&model, 0, 3);
    send_signal(child.id(), 15);
    let r = finish(child.wait_with_output().expect("wait loopd"));
    assert_eq!(r.code, 4, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "signal");
    assert_eq!(env.git(&["status", "--porcelain"]), "", "the tree is clean");
    env.git(&[
        "stash",
        "apply",
        s["stash_commit"].as_str().expect("parked"),
    ]);
    assert_eq!(env.read_repo("rechnung.py"), partial);
    assert_eq!(env.read_repo("NOTES.md"), "work in progress\n");
}

/// One vendor's agent, the other's critic: each session goes to its own
/// CLI and wire, both are metered in one ledger, and the job is accepted.
#[test]
fn a_mixed_job_is_accepted_end_to_end() {
    for (agent, critic) in [("codex", "claude"), ("claude", "codex")] {
        let env = TestEnv::new();
        let model = ScriptedModel::start(scope_creep_then_clean(
            3,
            "average_line was not asked for",
            "remove average_line",
        ));
        let r = run_as(&env, agent, &model, &["--critic-agent", critic]);
        assert_eq!(r.code, 0, "[{agent} + {critic}] {}", r.stderr);
        let s = r.summary();
        assert_eq!(s["attempts"][0]["critic"], "FAIL");
        let wire = |role: Role| -> Vec<String> {
            model
                .requests()
                .into_iter()
                .filter(|q| q.role == role)
                .map(|q| q.model)
                .collect()
        };
        let (agent_model, critic_model) = match agent {
            "codex" => ("gpt-5-codex", "sonnet"),
            _ => ("haiku", "gpt-5"),
        };
        assert!(
            wire(Role::Agent)
                .iter()
                .all(|m| m.contains(agent_model) || m == agent_model),
            "[{agent} + {critic}] agent models {:?}",
            wire(Role::Agent)
        );
        assert!(
            wire(Role::Critic)
                .iter()
                .all(|m| m.contains(critic_model) || m == critic_model),
            "[{agent} + {critic}] critic models {:?}",
            wire(Role::Critic)
        );
        let summary: &Value = &s;
        assert!(summary["totals"]["cost_usd"].as_f64().expect("cost") > 0.0);
        // `loopd check` names both.
        let check = env.exec(&["check", "--agent", agent, "--critic-agent", critic]);
        assert!(
            check.stdout.contains(&format!("agent:         {agent}"))
                && check.stdout.contains(&format!("critic:        {critic}")),
            "{}",
            check.stdout
        );
    }
}
