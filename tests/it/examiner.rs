//! The examiner (`[examiner] mode = "gate"`): before attempt 1 a scripted
//! examiner session answers with tests written from the task alone; loopd
//! keeps them out of every sandbox and run directory, checks them at
//! BASE_REF, and runs them on each candidate's judge-only tree.

use serde_json::Value;

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

/// A marker only the examiner's tests hold: it must never reach the agent
/// or a run directory.
const MARKER: &str = "EXAMINERMARKER41c9";

/// Tests the rechnung task implies: VAT on many lines rounds half up (red
/// at BASE_REF, and red for a fix that rounds down), a discount out of
/// range is refused (green at BASE_REF), and a module that cannot be
/// collected (dropped at BASE_REF).
fn examiner_tests() -> Vec<(&'static str, String)> {
    vec![
        (
            "test_examiner.py",
            format!("# {MARKER}\nfrom decimal import Decimal\n\nimport pytest\n\nfrom rechnung import apply_discount, gross_total\n\n\ndef test_gross_total_of_many_lines_rounds_half_up():\n    assert gross_total([(1, Decimal(\"10\")), (3, Decimal(\"2.50\"))]) == Decimal(\"20.83\")\n\n\ndef test_a_discount_over_100_is_refused():\n    with pytest.raises(ValueError):\n        apply_discount(Decimal(\"10\"), 150)\n"),
        ),
        (
            "test_broken.py",
            format!("# {MARKER}\nimport no_such_module_anywhere\n\n\ndef test_never():\n    assert no_such_module_anywhere\n"),
        ),
    ]
}

fn examiner_script() -> crate::support::model::SessionScript {
    let tests = examiner_tests();
    let refs: Vec<(&str, &str)> = tests.iter().map(|(f, c)| (*f, c.as_str())).collect();
    examiner_writes(&refs)
}

fn examiner_env() -> TestEnv {
    let env = TestEnv::scripted();
    env.append_config("[examiner]\nmode = \"gate\"\n", "an examiner");
    env
}

/// Green on the visible tests, wrong on the task's rounding.
fn wrong_but_green() -> String {
    clean_solution().replace("ROUND_HALF_UP", "ROUND_DOWN")
}

/// Every file under `dir`, with its text.
fn texts_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(texts_under(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out
}

fn agent_bodies(model: &ScriptedModel) -> String {
    model
        .requests()
        .iter()
        .filter(|r| r.role == Role::Agent)
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_wrong_but_green_change_is_rejected_by_tests_the_examiner_wrote_from_the_task() {
    let env = examiner_env();
    let shown = env.exec(&["check"]);
    assert!(
        shown.stdout.contains("examiner:")
            && shown
                .stdout
                .contains("python3 -m pytest -q --continue-on-collection-errors loopd_examiner"),
        "{}",
        shown.stdout
    );
    let mut s = scenario(
        vec![
            agent_writes(&wrong_but_green()),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    );
    s.examiner = vec![examiner_script()];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s: Value = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    let first = &s["attempts"][0];
    assert_eq!(
        first["rejected_by"], "examiner_failed",
        "{first}\n{}\n{}",
        s["examiner"], r.stderr
    );
    assert_eq!(first["critic"], "skipped", "before the critic: {first}");
    assert_eq!(first["examiner_passed"], false, "{first}");
    assert_eq!(s["attempts"][1]["examiner_passed"], true);
    // One examiner session, on its own line of the spend.
    assert_eq!(model.session_count(Role::Examiner), 1);
    let e = &s["examiner"];
    assert_eq!(e["tests"], 2, "{e}");
    assert_eq!(e["failing_at_base"], 1, "{e}");
    assert_eq!(e["passing_at_base"], 1, "{e}");
    assert!(
        e["dropped"].as_u64().expect("dropped") >= 1,
        "a module that does not collect is dropped: {e}"
    );
    assert!(e["cost_usd"].as_f64().expect("cost") > 0.0, "{e}");
    // The next prompt names the failing test's id, nothing of its source.
    let prompt = model.session(Role::Agent, 1)[0].prompt();
    assert!(
        prompt.contains("test_gross_total_of_many_lines_rounds_half_up"),
        "{prompt}"
    );
    for word in [MARKER, "20.83", "no_such_module_anywhere"] {
        assert!(
            !prompt.contains(word),
            "`{word}` reached the prompt: {prompt}"
        );
    }
    assert!(!agent_bodies(&model).contains(MARKER));
    // The run directory (what an artefact upload carries) holds none of
    // the tests; they are kept under the state dir's examiner directory.
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run dir"));
    for (path, text) in texts_under(&run_dir) {
        assert!(
            !text.contains(MARKER),
            "the examiner's tests leaked into {}",
            path.display()
        );
    }
    let kept = texts_under(&env.state.join("examiner"));
    assert!(
        kept.iter()
            .any(|(p, t)| p.ends_with("loopd_examiner/test_examiner.py") && t.contains(MARKER)),
        "{:?}",
        kept.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let report = env.exec(&["report", s["job_id"].as_str().expect("id")]);
    assert!(report.stdout.contains("examiner `"), "{}", report.stdout);
}

#[test]
fn the_agent_cannot_read_the_examiners_tests() {
    let env = TestEnv::scripted();
    // The state dir itself is made readable (a lead's `[sandbox] read`),
    // and a file in it proves it: only the hole loopd cuts keeps the
    // examiner's tests out.
    let shared = env.state.clone();
    std::fs::create_dir_all(&shared).expect("state dir");
    std::fs::write(shared.join("visible.txt"), "VISIBLECONTROL\n").expect("control");
    env.append_config(
        &format!(
            "[examiner]\nmode = \"gate\"\n\n[sandbox]\nread = [\"{}\"]\n",
            shared.display()
        ),
        "an examiner, and the state dir readable",
    );
    let tests = env.state.join("examiner");
    let probe = format!(
        "cat {c} > loot.txt 2>&1; cat {t}/*/files/loopd_examiner/test_examiner.py >> loot.txt 2>&1; ls -laR {t} >> loot.txt 2>&1; grep -r {m} {s} >> loot.txt 2>&1; cat loot.txt",
        c = shared.join("visible.txt").display(),
        t = tests.display(),
        m = MARKER,
        s = shared.display()
    );
    let mut s = scenario(
        vec![session(vec![
            turn(vec![bash(&probe)]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    );
    s.examiner = vec![examiner_script()];
    let model = ScriptedModel::start(s);
    let r = env.run(
        &model,
        &[
            "--max-attempts",
            "1",
            "--allowed-tools",
            "Read,Write,Edit,Bash",
        ],
    );
    let summary = r.summary();
    assert_eq!(summary["sandbox"], "landlock", "{}", r.stderr);
    let seen = agent_bodies(&model).replace(&probe, "");
    assert!(
        seen.contains("VISIBLECONTROL"),
        "the readable root is readable: {seen} {}",
        r.stderr
    );
    assert!(
        !seen.contains(MARKER),
        "the agent read the examiner's tests: {seen}"
    );
    assert!(
        !seen.contains("test_examiner.py\\n"),
        "the agent listed the examiner's tests: {seen}"
    );
    assert!(
        seen.contains("No such file or directory") || seen.contains("Permission denied"),
        "the probe ran and was refused: {seen}"
    );
}

#[test]
fn a_job_started_again_after_its_examiner_wrote_does_not_pay_for_it_again() {
    let env = examiner_env();
    let mut s = scenario(vec![agent_writes(&clean_solution())], vec![pass()]);
    s.examiner = vec![examiner_script(), examiner_script()];
    let model = ScriptedModel::start(s);
    // Killed right after the examiner's tests are written, before the
    // journal says so.
    let killed = finish(
        env.loopd(Some(&model))
            .args(["run", "--json", "--job-id", "exam1"])
            .env("LOOPD_CRASH_AT", "examiner:written#1")
            .output()
            .expect("run loopd"),
    );
    assert_ne!(
        killed.code, 0,
        "killed at the crash point: {}",
        killed.stderr
    );
    assert_eq!(model.session_count(Role::Examiner), 1);
    let again = env.run(&model, &["--job-id", "exam1"]);
    let s = again.summary();
    assert_eq!(
        s["outcome"], "accepted",
        "{}\n{}",
        s["attempts"], again.stderr
    );
    assert_eq!(
        model.session_count(Role::Examiner),
        1,
        "the tests kept under their key are not paid for again"
    );
    assert_eq!(s["examiner"]["tests"], 2, "{}", s["examiner"]);
}

#[test]
fn an_examiner_that_writes_nothing_usable_leaves_the_job_to_go_on_without() {
    let env = examiner_env();
    let mut s = scenario(vec![agent_writes(&wrong_but_green())], vec![pass()]);
    // A path outside its directory and a file that is no test module.
    s.examiner = vec![examiner_writes(&[
        ("../conftest.py", "import os\n"),
        ("helper.py", "X = 1\n"),
    ])];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &["--max-attempts", "1"]);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    assert!(
        s["examiner"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("no test file")),
        "{}",
        s["examiner"]
    );
    assert!(!env.repo.join("conftest.py").exists());
    // Off by default; `evidence` is refused until it is built.
    let off = TestEnv::scripted();
    assert!(!off.exec(&["check"]).stdout.contains("examiner:"));
    off.append_config("[examiner]\nmode = \"evidence\"\n", "evidence");
    let refused = off.exec(&["check"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("examiner.mode"),
        "{}",
        refused.stderr
    );
}
