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
