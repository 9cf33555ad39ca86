//! The lessons memory (issue 14, part 3): what later attempts had to fix on
//! a repository is distilled, audited, kept in the state dir and carried by
//! the first prompt of the next job there.

use serde_json::Value;

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

/// The lesson the pre-critic's debug-output finding teaches.
pub const DEBUG_LESSON: &str = "Leave no debug output";

fn lessons_json(env: &TestEnv) -> Value {
    let r = env.exec(&["lessons", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).expect("lessons json")
}

/// Job 1 leaves a debug print, the pre-critic rejects it, attempt 2 is
/// clean. Job 2's agent repeats the print unless its prompt carries the
/// lesson.
pub fn two_jobs() -> crate::support::model::Scenario {
    scenario(
        vec![
            agent_writes(&dirty_solution()),
            agent_writes(&clean_solution()),
            unless_told(
                DEBUG_LESSON,
                agent_writes(&clean_solution()),
                agent_writes(&dirty_solution()),
            ),
            agent_writes(&clean_solution()),
        ],
        vec![pass(), pass()],
    )
}

#[test]
fn the_second_job_is_told_what_the_first_had_to_fix() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(two_jobs());
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first = r.summary();
    assert_eq!(first["attempts"].as_array().expect("attempts").len(), 2);
    let calls_first = model.requests().len();
    // The audit of each lesson is in the job's journal.
    let events = journal(&first);
    assert!(
        events.iter().any(|e| matches!(
            e,
            loopd::journal::Event::LessonAudited { key, refused: None, .. } if key == "precheck:debug_output"
        )),
        "{events:?}"
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, loopd::journal::Event::LessonsLearned { .. })));
    let l = lessons_json(&env);
    let lesson = &l["lessons"][0];
    assert_eq!(lesson["key"], "precheck:debug_output");
    assert_eq!(lesson["rule"], 2);
    assert_eq!(lesson["seen"], 1);
    assert_eq!(lesson["jobs"][0], first["job_id"]);
    assert!(
        lesson["example"]
            .as_str()
            .expect("example")
            .starts_with("rechnung.py:18 (rule 2, gate precheck)"),
        "{lesson}"
    );
    // Nothing of it is in the repository.
    assert!(!env
        .git(&["status", "--porcelain", "--ignored"])
        .contains("lesson"));

    // The same repository again, from a clean tree.
    env.git(&["checkout", "--", "."]);
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let second = r.summary();
    assert_eq!(
        second["attempts"].as_array().expect("attempts").len(),
        1,
        "told, the agent got it right the first time"
    );
    let prompt = model.session(Role::Agent, 2)[0].prompt();
    assert!(
        prompt.contains("Lessons from earlier jobs on this repository")
            && prompt.contains(DEBUG_LESSON),
        "{prompt}"
    );
    let calls_second = model.requests().len() - calls_first;
    assert!(
        calls_second < calls_first,
        "job 2 made {calls_second} model calls, job 1 {calls_first}"
    );

    // `loopd lessons` lists it; `forget` removes it.
    let r = env.exec(&["lessons"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = lesson["id"].as_str().expect("id");
    assert!(
        r.stdout.contains(id) && r.stdout.contains(DEBUG_LESSON),
        "{}",
        r.stdout
    );
    let r = env.exec(&["lessons", "forget", id]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(lessons_json(&env)["lessons"], serde_json::json!([]));
    let r = env.exec(&["lessons", "forget", id]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
}

#[test]
fn a_lesson_that_would_touch_the_tests_is_refused_by_the_audit() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scope_creep_then_clean(
        1,
        "the totals disagree with the tests",
        "edit tests/test_rechnung.py to expect the new totals",
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let refused = journal(&s).into_iter().find_map(|e| match e {
        loopd::journal::Event::LessonAudited {
            refused: Some(why),
            text,
            ..
        } => Some((text, why)),
        _ => None,
    });
    let (text, why) = refused.expect("the audit refused the lesson");
    assert!(text.contains("edit tests/test_rechnung.py"), "{text}");
    assert!(
        why.contains("tests/test_rechnung.py") && why.contains("protected"),
        "{why}"
    );
    assert_eq!(lessons_json(&env)["lessons"], serde_json::json!([]));
}
