//! The pre-critic and the interdiff (issue 14: cheaper, sharper judging).
//!
//! The handbook's six labelled defects, as variants of the rechnung fixture
//! (`fixtures/rechnung/variants/`): each is rejected by a deterministic gate
//! with the right rule and line and no critic session; the honest fix that
//! follows passes the pre-critic untouched and goes to the critic, which
//! sees the previous findings and the interdiff first.

use serde_json::Value;

use crate::support::model::{Role, ScriptedModel, SessionScript};
use crate::support::*;

/// An agent session that overlays a variant of the fixture through a
/// script (so a change to a protected test reaches the tree the way a
/// determined agent would get it there; the hook cannot see it).
pub fn agent_applies(variant: &str) -> SessionScript {
    let script = manifest_dir().join("fixtures/rechnung/variants/apply.py");
    session(vec![
        turn(vec![bash(&format!("python3 {} {variant}", script.display()))]),
        turn(vec![text("Done.")]),
    ])
}

/// Attempt 1 leaves `variant`, attempt 2 the honest fix; one critic
/// session is scripted (PASS), for attempt 2 only.
fn defect_then_honest(variant: &str) -> (TestEnv, ScriptedModel, Value) {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![agent_applies(variant), agent_applies("honest")],
        vec![pass()],
    ));
    let r = env.run(
        &model,
        &["--max-attempts", "2", "--allowed-tools", "Read,Write,Bash"],
    );
    assert_eq!(r.code, 0, "{variant}: {}", r.stderr);
    let s = r.summary();
    (env, model, s)
}

/// The variant is rejected in attempt 1 by `reason` with a finding at `at`
/// under `rule` (of gate `gate`), without the critic; attempt 2's prompt
/// carries the finding; the honest fix is accepted with one critic session
/// in all. Returns the summary.
fn rejected_without_the_critic(variant: &str, reason: &str, gate: &str, at: &str, rule: u32) -> Value {
    let (env, model, s) = defect_then_honest(variant);
    let a = s["attempts"].as_array().expect("attempts");
    assert_eq!(a.len(), 2, "{variant}: {s}");
    assert_eq!(a[0]["rejected_by"], reason, "{variant}: {}", a[0]);
    assert_eq!(a[0]["critic"], "skipped", "{variant}: no critic for attempt 1");
    let head = format!("{at} (rule {rule}, gate {gate}): ");
    let finding = a[0]["gate_findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(Value::as_str)
        .find(|f| f.starts_with(&head))
        .unwrap_or_else(|| panic!("{variant}: no finding starts with {head}: {}", a[0]["gate_findings"]));
    assert_eq!(
        model.session_count(Role::Critic),
        1,
        "{variant}: the critic was asked only about the honest fix"
    );
    let prompt2 = model.session(Role::Agent, 1)[0].prompt();
    assert!(prompt2.contains(finding), "{variant}: attempt 2's prompt:\n{prompt2}");
    // The honest fix passed every gate, the pre-critic included.
    assert_eq!(a[1]["gate_findings"], serde_json::json!([]), "{variant}: {}", a[1]);
    assert_eq!(a[1]["critic"], "PASS");
    assert_eq!(s["outcome"], "accepted");
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
    assert!(model.unscripted().is_empty(), "{:?}", model.unscripted());
    s
}

#[test]
fn defect_1_a_skip_marker_over_a_red_test() {
    rejected_without_the_critic(
        "skip_marker",
        "protected_path",
        "skip_marker",
        "tests/test_rechnung.py:24",
        1,
    );
}

#[test]
fn defect_2_a_weakened_assert() {
    rejected_without_the_critic(
        "weakened_assert",
        "protected_path",
        "protected_path",
        "tests/test_rechnung.py:19",
        1,
    );
}

#[test]
fn defect_3_a_debug_print() {
    rejected_without_the_critic("debug_print", "precheck", "precheck", "rechnung.py:24", 2);
}

#[test]
fn defect_4_a_commented_out_old_function() {
    rejected_without_the_critic("commented_out", "precheck", "precheck", "rechnung.py:27", 2);
}

#[test]
fn defect_5_a_swallowed_error() {
    rejected_without_the_critic("swallowed_error", "precheck", "precheck", "rechnung.py:20", 3);
}

#[test]
fn defect_6_every_function_renamed() {
    let s = rejected_without_the_critic("renamed", "precheck", "precheck", "rechnung.py:8", 4);
    // One finding per renamed function, at its new definition.
    let heads: Vec<&str> = s["attempts"][0]["gate_findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f.as_str().expect("text").split(": ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        heads,
        [
            "rechnung.py:8 (rule 4, gate precheck)",
            "rechnung.py:13 (rule 4, gate precheck)",
            "rechnung.py:21 (rule 4, gate precheck)",
            "rechnung.py:27 (rule 4, gate precheck)",
        ]
    );
    let first = s["attempts"][0]["gate_findings"][0].to_string();
    assert!(first.contains("`line_total` was renamed to `position_total`"), "{first}");
}
