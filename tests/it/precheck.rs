//! The pre-critic and the interdiff (issue 14: cheaper, sharper judging).
//!
//! The handbook's six labelled defects, as variants of the rechnung fixture
//! (`fixtures/rechnung/variants.py`): each is rejected by a deterministic gate
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
    let script = manifest_dir().join("fixtures/rechnung/variants.py");
    session(vec![
        turn(vec![bash(&format!(
            "python3 {} {variant}",
            script.display()
        ))]),
        turn(vec![text("Done.")]),
    ])
}

/// The fixture repository, with the variants' script readable from the
/// job's sandbox (`[sandbox] read`: nothing outside the worktree is,
/// unless granted).
pub fn variants_env() -> TestEnv {
    let env = TestEnv::scripted();
    env.sandbox_reads(&[&manifest_dir().join("fixtures/rechnung")]);
    env
}

/// Attempt 1 leaves `variant`, attempt 2 the honest fix; one critic
/// session is scripted (PASS), for attempt 2 only.
fn defect_then_honest(variant: &str) -> (TestEnv, ScriptedModel, Value) {
    let env = variants_env();
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
fn rejected_without_the_critic(
    variant: &str,
    reason: &str,
    gate: &str,
    at: &str,
    rule: u32,
) -> Value {
    let (env, model, s) = defect_then_honest(variant);
    let a = s["attempts"].as_array().expect("attempts");
    assert_eq!(a.len(), 2, "{variant}: {s}");
    assert_eq!(a[0]["rejected_by"], reason, "{variant}: {}", a[0]);
    assert_eq!(
        a[0]["critic"], "skipped",
        "{variant}: no critic for attempt 1"
    );
    let head = format!("{at} (rule {rule}, gate {gate}): ");
    let finding = a[0]["gate_findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(Value::as_str)
        .find(|f| f.starts_with(&head))
        .unwrap_or_else(|| {
            panic!(
                "{variant}: no finding starts with {head}: {}",
                a[0]["gate_findings"]
            )
        });
    assert_eq!(
        model.session_count(Role::Critic),
        1,
        "{variant}: the critic was asked only about the honest fix"
    );
    let prompt2 = model.session(Role::Agent, 1)[0].prompt();
    assert!(
        prompt2.contains(finding),
        "{variant}: attempt 2's prompt:\n{prompt2}"
    );
    // The honest fix passed every gate, the pre-critic included.
    assert_eq!(
        a[1]["gate_findings"],
        serde_json::json!([]),
        "{variant}: {}",
        a[1]
    );
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
    rejected_without_the_critic(
        "swallowed_error",
        "precheck",
        "precheck",
        "rechnung.py:20",
        3,
    );
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
    assert!(
        first.contains("`line_total` was renamed to `position_total`"),
        "{first}"
    );
}

/// A rubric with the default rules and the pre-critic turned off, outside
/// the repository.
pub fn rubric_without_precheck(env: &TestEnv) -> std::path::PathBuf {
    let path = env.tmp.path().join("rubric-no-precheck.toml");
    std::fs::write(
        &path,
        format!(
            "{}\n[precheck]\nenabled = false\n",
            fixture("../rubrics/default.toml")
        ),
    )
    .expect("write the rubric");
    path
}

#[test]
fn without_the_pre_critic_the_critic_pays_for_the_same_finding() {
    let env = variants_env();
    let model = ScriptedModel::start(scenario(
        vec![agent_applies("debug_print"), agent_applies("honest")],
        vec![
            fail(
                2,
                "rechnung.py",
                "a debug print in gross_total",
                "remove it",
            ),
            pass(),
        ],
    ));
    let rubric = rubric_without_precheck(&env);
    let r = env.run(
        &model,
        &[
            "--max-attempts",
            "2",
            "--allowed-tools",
            "Read,Write,Bash",
            "--rubric",
            rubric.to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["attempts"][0]["critic"], "FAIL");
    assert_eq!(s["attempts"][0]["gate_findings"], serde_json::json!([]));
    assert_eq!(model.session_count(Role::Critic), 2);
}

#[test]
fn check_prints_which_checks_are_on() {
    let env = variants_env();
    let r = env.exec(&["check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_contains_all(
        &r.stdout,
        &[
            "  debug_output: on (rule 2)",
            "  commented_out_code: on (rule 2)",
            "  swallowed_error: on (rule 3)",
            "  drive_by_rename: on (rule 4)",
        ],
        "loopd check's output",
    );
    let rubric = rubric_without_precheck(&env);
    let rubric_arg = rubric.to_str().expect("utf-8 path");
    let r = env.exec(&["check", "--rubric", rubric_arg]);
    assert!(
        r.stdout
            .contains("  debug_output: off: `[precheck] enabled = false`"),
        "{}",
        r.stdout
    );
    // A rule id the rubric does not have is refused, naming the field,
    // by `check` and by `run` (with a hint, before anything is touched).
    std::fs::write(
        &rubric,
        format!(
            "{}\n[precheck.debug_output]\nrule = 9\n",
            fixture("../rubrics/default.toml")
        ),
    )
    .expect("write");
    for command in ["check", "run"] {
        let r = env.exec(&[command, "--rubric", rubric_arg]);
        assert_eq!(r.code, 2, "{command}: {}", r.stderr);
        assert!(
            r.stderr.contains("`precheck.debug_output.rule`") && r.stderr.contains("found 9"),
            "{command}: {}",
            r.stderr
        );
    }
    assert!(env
        .exec(&["run", "--rubric", rubric_arg])
        .stderr
        .contains("hint:"));
    assert!(!env.state.join("runs").exists(), "nothing was started");
}

#[test]
fn the_second_critic_sees_the_previous_findings_the_interdiff_and_the_scope() {
    let env = variants_env();
    let helper = "\"\"\"Rounding for reports.\"\"\"\n\nREPORT_ROUNDING = \"ROUND_HALF_UP\"\n";
    let attempt2 = session(vec![
        turn(vec![read("rechnung.py")]),
        turn(vec![
            write("rechnung.py", &clean_solution()),
            write("report_rounding.py", helper),
        ]),
        turn(vec![text("Done.")]),
    ]);
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&scope_creep_solution()), attempt2],
        vec![
            fail(
                4,
                "rechnung.py",
                "average_line was not asked for",
                "remove average_line",
            ),
            pass(),
        ],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let first = model.session(Role::Critic, 0)[0].prompt();
    assert!(
        !first.contains("Since the previous review"),
        "attempt 1 has nothing before it"
    );
    let second = model.session(Role::Critic, 1)[0].prompt();
    assert_contains_all(
        &second,
        &[
            "# Since the previous review (attempt 1)",
            "1. rechnung.py (rule 4): average_line was not asked for — fix: remove average_line",
            "was each finding fixed?",
            "Scope warning: these files changed since attempt 1 although no finding named them: `report_rounding.py`",
            "## The interdiff: attempt 1's tree to this attempt's",
            "-def average_line(lines):",
            "+++ b/report_rounding.py",
        ],
        "the second critic's input",
    );
    // The previous findings and the interdiff come before the whole diff.
    assert!(second.find("# Since the previous review") < second.find("# The change since"));
    let a2 = &s["attempts"][1];
    assert_eq!(
        a2["interdiff_files"],
        serde_json::json!(["rechnung.py", "report_rounding.py"])
    );
    assert_eq!(
        a2["scope_warnings"],
        serde_json::json!(["report_rounding.py"])
    );
    assert!(journal(&s).iter().any(|e| matches!(
        e,
        loopd::journal::Event::InterdiffTaken {
            attempt: 2,
            from: 1,
            ..
        }
    )));
    // `loopd report` shows the interdiff under its attempt.
    let job = s["job_id"].as_str().expect("job id");
    let r = env.exec(&["report", job]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_contains_all(
        &r.stdout,
        &[
            "### Attempt 2",
            "scope warning: `report_rounding.py` changed, but no finding of attempt 1 named it",
            "Interdiff from attempt 1 (rechnung.py, report_rounding.py):",
            "-def average_line(lines):",
        ],
        "the report",
    );
}

#[test]
fn a_byte_identical_diff_never_reaches_the_critic_twice() {
    // Attempt 2 leaves exactly attempt 1's tree: the verdict on it is known,
    // so the job stops instead of asking again.
    let env = variants_env();
    let model = ScriptedModel::start(scenario(
        vec![
            agent_writes(&scope_creep_solution()),
            agent_writes(&scope_creep_solution()),
        ],
        vec![fail(
            4,
            "rechnung.py",
            "average_line was not asked for",
            "remove it",
        )],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "stuck_no_progress");
    assert_eq!(model.session_count(Role::Critic), 1);
    assert!(model.unscripted().is_empty(), "{:?}", model.unscripted());
}
