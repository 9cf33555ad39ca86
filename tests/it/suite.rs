//! The whole suite guards what a narrowed goal leaves out: the goal names
//! one test of the rechnung fixture, the whole suite (inferred from it)
//! runs on the judge-only tree at BASE_REF and after a green goal, and a
//! test that passed at BASE_REF must still pass.

use serde_json::Value;

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

/// The rechnung fixture with its goal narrowed to `test_line_total`
/// (red at BASE_REF); `extra` is appended to its `loopd.toml`. At
/// BASE_REF `test_discount` and `test_net_total_empty` pass.
fn narrowed(extra: &str) -> TestEnv {
    let env = TestEnv::new();
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!(
            "agent = \"scripted\"\ncritic_agent = \"scripted\"\ntask = \"Fix line_total: a line's total is quantity times unit price.\"\nmax_attempts = 2\nbudget_usd = 0.5\n\n[[goal]]\nname = \"line total\"\nrun = \"python3 -m pytest -q tests/test_rechnung.py::test_line_total\"\ntimeout = \"2m\"\n{extra}"
        ),
    )
    .expect("loopd.toml");
    env.git(&["commit", "-qam", "a goal narrowed to one test"]);
    env
}

/// `line_total` fixed, and nothing else.
fn honest() -> String {
    fixture("rechnung/repo/rechnung.py").replace(
        "return quantity + unit_price",
        "return quantity * unit_price",
    )
}

/// `line_total` fixed — and `apply_discount` broken on the way, which
/// only `test_discount`, outside the goal, sees.
fn breaks_discount() -> String {
    honest().replace(
        "factor = (Decimal(100) - Decimal(percent)) / Decimal(100)",
        "factor = Decimal(percent) / Decimal(100)",
    )
}

fn suite_runs(s: &Value) -> Vec<(u32, bool)> {
    journal(s)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::SuiteRun {
                attempt, report, ..
            } => Some((attempt, report.passed())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_narrowed_fix_that_breaks_a_test_outside_the_goal_is_rejected_by_the_whole_suite() {
    let env = narrowed("");
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&breaks_discount()), agent_writes(&honest())],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    let first = &s["attempts"][0];
    assert_eq!(
        first["goal_passed"], true,
        "the goal alone is green: {first}"
    );
    assert_eq!(first["rejected_by"], "suite_regressed", "{first}");
    assert_eq!(
        first["critic"], "skipped",
        "decided before the critic: {first}"
    );
    assert_eq!(first["suite"]["regressed"], true, "{first}");
    let finding = first["gate_findings"][0].as_str().expect("a finding");
    let named = finding.lines().next().expect("a first line");
    assert!(
        named.ends_with("do not pass after the change: tests.test_rechnung::test_discount"),
        "only the test that passed at BASE_REF is named; those red there are not the change's: {named}"
    );
    // The next prompt names the broken test: the suite is the agent's own.
    let prompt = model.session(Role::Agent, 1)[0].prompt();
    assert!(prompt.contains("test_discount"), "{prompt}");
    assert_eq!(s["attempts"][1]["suite"]["regressed"], false);
    assert_eq!(suite_runs(&s), vec![(1, false), (2, false)]);
    // The summary's line: what ran, what passed at BASE_REF, the cost.
    assert_eq!(
        s["suite"]["command"], "python3 -m pytest -q --continue-on-collection-errors",
        "{}",
        s["suite"]
    );
    assert_eq!(s["suite"]["passing_at_base"], 2, "{}", s["suite"]);
    assert!(
        s["suite"]["total_ms"].as_u64().expect("ms")
            >= s["suite"]["baseline_ms"].as_u64().expect("ms")
    );
    let report = env.exec(&["report", s["job_id"].as_str().expect("id")]);
    assert!(
        report
            .stdout
            .contains("whole suite `python3 -m pytest -q --continue-on-collection-errors`: 2 tests passed at BASE_REF"),
        "{}",
        report.stdout
    );
}

#[test]
fn an_honest_narrowed_fix_is_accepted_and_the_plan_says_where_the_suite_comes_from() {
    let env = narrowed("");
    let shown = env.exec(&["check"]);
    assert!(
        shown
            .stdout
            .contains("whole suite:   `python3 -m pytest -q --continue-on-collection-errors`")
            && shown
                .stdout
                .contains("inferred from goal step `line total`"),
        "{}",
        shown.stdout
    );
    let model = ScriptedModel::start(scenario(vec![agent_writes(&honest())], vec![pass()]));
    let r = env.run(&model, &[]);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    assert_eq!(s["attempts"][0]["suite"]["regressed"], false);
}

#[test]
fn with_the_suite_turned_off_the_same_break_is_accepted() {
    // What only the suite step catches: the control.
    let env = narrowed("\n[judge]\nsuite = false\n");
    let shown = env.exec(&["check"]);
    assert!(
        shown.stdout.contains("whole suite:   none"),
        "{}",
        shown.stdout
    );
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&breaks_discount())],
        vec![pass()],
    ));
    let r = env.run(&model, &[]);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    assert!(s["suite"].is_null(), "{}", s["suite"]);
    assert!(suite_runs(&s).is_empty());
}

#[test]
fn a_named_suite_is_run_and_a_suite_that_cannot_be_inferred_is_refused() {
    // The lead names the suite for a goal that does not narrow one.
    let env =
        narrowed("\n[judge]\nsuite = \"python3 -m pytest -q tests\"\nsuite_timeout = \"3m\"\n");
    let shown = env.exec(&["check"]);
    assert!(
        shown
            .stdout
            .contains("whole suite:   `python3 -m pytest -q tests` (timeout 3m, [judge] suite)"),
        "{}",
        shown.stdout
    );
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&breaks_discount())],
        vec![pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "1"]);
    let s = r.summary();
    assert_eq!(
        s["reason"], "suite_regressed",
        "{}\n{}",
        s["attempts"], r.stderr
    );
    assert_eq!(r.code, 3, "stopped: {}", r.stderr);
    // `true` asks loopd to infer one: a goal of the whole suite has none.
    let env = TestEnv::scripted();
    env.append_config("\n[judge]\nsuite = true\n", "infer the suite");
    let refused = env.exec(&["check"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("judge.suite"), "{}", refused.stderr);
}
