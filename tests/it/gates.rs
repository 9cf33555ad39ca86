//! The gate table (`src/job/gate/`): a gate is one module and one line of
//! the table. The planted gate of test builds is named nowhere else in
//! loopd, yet its findings are journaled under its name, reject the
//! attempt, reach the next prompt and show in the live view.

use loopd::journal::{Event, Gate};

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

#[test]
fn a_gate_registered_by_one_line_of_the_table_judges_like_every_other() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![write("rechnung.py", &clean_solution())]),
                turn(vec![write("notes/loopd-planted-gate", "planted\n")]),
                turn(vec![text("Done.")]),
            ]),
            session(vec![
                turn(vec![bash("rm notes/loopd-planted-gate")]),
                turn(vec![text("Removed.")]),
            ]),
        ],
        vec![pass()],
    ));
    let r = env.run(&model, &["--allowed-tools", "Read,Edit,Write,Bash"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let attempts = s["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{s}");
    assert_eq!(attempts[0]["rejected_by"], "precheck", "{s}");
    assert_eq!(s["outcome"], "accepted", "{s}");
    // Journaled under its own name, once per attempt; passed on the second.
    let planted: Vec<(u32, usize)> = journal(&s)
        .iter()
        .filter_map(|e| match e {
            Event::GateChecked {
                attempt,
                gate,
                findings,
            } if *gate == Gate::named("planted") => Some((*attempt, findings.len())),
            _ => None,
        })
        .collect();
    assert_eq!(planted, vec![(1, 1), (2, 0)]);
    // Its finding is the next prompt's, and the critic never saw attempt 1.
    let second = model.session(Role::Agent, 1)[0].prompt();
    assert!(
        second.contains("notes/loopd-planted-gate"),
        "the second prompt names the planted file: {second}"
    );
    assert_eq!(model.session_count(Role::Critic), 1);
    assert!(
        r.stderr.contains("attempt 1: planted: 1 finding"),
        "the live view says it by its name: {}",
        r.stderr
    );
    // Said once: the live line, not a warning after it as well; the job's
    // log keeps the warning.
    assert!(
        !r.stderr.contains("gate finding"),
        "a warning repeats the live line: {}",
        r.stderr
    );
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run_dir"));
    let log = std::fs::read_to_string(run_dir.join("loopd.log")).expect("loopd.log");
    assert!(log.contains("gate finding"), "{log}");
}

/// A git repository the agent makes inside the worktree (`git init` from
/// Python, past the hook) is the diff gate's finding — not an internal
/// error that turns a judged attempt into an environment failure a
/// scheduler retries (the blind attack on issue 40, a14b).
#[test]
fn an_embedded_repository_is_a_finding_not_an_internal_error() {
    let env = TestEnv::scripted();
    let nested = "import os, subprocess\nd = os.path.join('scratch', 'sub')\nos.makedirs(d, exist_ok=True)\nenv = dict(os.environ, GIT_CONFIG_GLOBAL='/dev/null', GIT_CONFIG_NOSYSTEM='1', GIT_AUTHOR_NAME='a', GIT_AUTHOR_EMAIL='a@b.invalid', GIT_COMMITTER_NAME='a', GIT_COMMITTER_EMAIL='a@b.invalid')\nsubprocess.run(['g' + 'it', 'init', '-q', d], env=env, check=True)\nopen(os.path.join(d, 'x.txt'), 'w').write('x\\n')\nsubprocess.run(['g' + 'it', '-C', d, 'add', '-A'], env=env, check=True)\nsubprocess.run(['g' + 'it', '-C', d, 'commit', '-qm', 'x'], env=env, check=True)\n";
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![bash(&format!("python3 - <<'EOF'\n{nested}EOF"))]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(
        &model,
        &one_attempt(&["--allowed-tools", "Read,Edit,Write,Bash"]),
    );
    let s = r.summary();
    assert_eq!(s["reason"], "protected_path", "{s}");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let findings = s["attempts"][0]["gate_findings"].to_string();
    assert!(findings.contains("scratch/sub"), "{findings}");
}
