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

/// None of `words` is in `prompt`, the examiner's marker in no request of
/// the agent and in no file of the run directory (returned).
fn hidden(
    model: &ScriptedModel,
    summary: &Value,
    prompt: &str,
    words: &[&str],
) -> std::path::PathBuf {
    for word in words {
        assert!(
            !prompt.contains(word),
            "`{word}` reached the prompt: {prompt}"
        );
    }
    assert!(!bodies_of(model, Role::Agent).contains(MARKER));
    let run_dir = std::path::PathBuf::from(summary["run_dir"].as_str().expect("run dir"));
    for (path, text) in files_under(&run_dir, None) {
        assert!(
            !text.contains(MARKER),
            "the examiner's tests leaked into {}",
            path.display()
        );
    }
    run_dir
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
    // Its revision turn (a module did not collect): the broken module
    // replaced by a guard that runs.
    let revised = [
        examiner_tests().remove(0),
        (
            "test_guard.py",
            format!("# {MARKER}\nfrom decimal import Decimal\n\nfrom rechnung import apply_discount\n\n\ndef test_no_discount_keeps_the_amount():\n    assert apply_discount(Decimal(\"10.00\"), 0) == Decimal(\"10.00\")\n"),
        ),
    ];
    let refs: Vec<(&str, &str)> = revised.iter().map(|(f, c)| (*f, c.as_str())).collect();
    s.examiner = vec![examiner_script(), examiner_writes(&refs)];
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
    // Two examiner sessions — the tests, and one revision turn told only
    // ids and outcomes at BASE_REF — on their own line of the spend.
    assert_eq!(model.session_count(Role::Examiner), 2);
    let revision = model.session(Role::Examiner, 1)[0].body.to_string();
    assert!(
        revision.contains("revising the tests you wrote")
            && revision.contains("errored or skipped (dropped)")
            && revision.contains("test_broken"),
        "{revision}"
    );
    assert!(
        !revision.contains("ModuleNotFoundError"),
        "ids and outcomes only, never output: {revision}"
    );
    let e = &s["examiner"];
    assert_eq!(e["revised"], true, "{e}");
    assert_eq!(e["tests"], 2, "{e}");
    assert_eq!(e["failing_at_base"], 1, "{e}");
    assert_eq!(e["passing_at_base"], 2, "{e}");
    assert_eq!(
        e["dropped"], 0,
        "the revision replaced what did not run: {e}"
    );
    assert!(e["cost_usd"].as_f64().expect("cost") > 0.0, "{e}");
    // The next prompt names the failing test's id, nothing of its source.
    let prompt = model.session(Role::Agent, 1)[0].prompt();
    assert!(
        prompt.contains("test_gross_total_of_many_lines_rounds_half_up"),
        "{prompt}"
    );
    // The run directory (what an artefact upload carries) holds none of
    // the tests; they are kept under the state dir's examiner directory.
    hidden(
        &model,
        &s,
        &prompt,
        &[MARKER, "20.83", "no_such_module_anywhere"],
    );
    let kept = files_under(&env.state.join("examiner"), None);
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
    let seen = bodies_of(&model, Role::Agent).replace(&probe, "");
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
    // The tests, then a revision turn that keeps them (no file).
    s.examiner = vec![examiner_script(), examiner_writes(&[]), examiner_script()];
    let model = ScriptedModel::start(s);
    // Killed right after the examiner's tests are written, before the
    // journal says so; started again, and killed right after the revision
    // turn.
    for (point, sessions) in [("examiner:written#1", 1), ("examiner:revised#1", 2)] {
        let killed = finish(
            env.loopd(Some(&model))
                .args(["run", "--json", "--job-id", "exam1"])
                .env("LOOPD_CRASH_AT", point)
                .output()
                .expect("run loopd"),
        );
        assert_ne!(killed.code, 0, "killed at {point}: {}", killed.stderr);
        assert_eq!(model.session_count(Role::Examiner), sessions, "{point}");
    }
    let again = env.run(&model, &["--job-id", "exam1"]);
    let s = again.summary();
    assert_eq!(
        s["outcome"], "accepted",
        "{}\n{}",
        s["attempts"], again.stderr
    );
    assert_eq!(
        model.session_count(Role::Examiner),
        2,
        "neither the tests nor their revision, kept under their key, is paid for again"
    );
    assert_eq!(s["examiner"]["tests"], 2, "{}", s["examiner"]);
    assert_eq!(s["examiner"]["revised"], true, "{}", s["examiner"]);
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
    // A mode loopd does not know is refused.
    let off = TestEnv::scripted();
    off.append_config("[examiner]\nmode = \"judge\"\n", "no such mode");
    let refused = off.exec(&["check"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("examiner.mode"),
        "{}",
        refused.stderr
    );
}

#[test]
fn the_examiner_is_on_by_default_in_evidence_mode_on_the_cheap_model_where_it_can_run() {
    let env = TestEnv::scripted();
    let cfg = examiner_off_removed(&env.read_repo("loopd.toml"));
    std::fs::write(env.repo.join("loopd.toml"), &cfg).expect("loopd.toml");
    env.git(&["commit", "-qam", "the examiner left to its default"]);
    let shown = env.exec(&["check"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stdout.contains("examiner:") && shown.stdout.contains("(evidence)"),
        "{}",
        shown.stdout
    );
    // The critic CLI's cheaper default model (the critic's is `sonnet`).
    assert!(shown.stdout.contains("`haiku` on"), "{}", shown.stdout);
    // Where it cannot run, the default is off and says why; a mode the
    // lead set is refused there instead.
    let no_pytest = cfg.replace(
        "run = \"python3 -m pytest -q\"",
        "run = \"python3 -c 'import rechnung'\"",
    );
    assert_ne!(no_pytest, cfg);
    std::fs::write(env.repo.join("loopd.toml"), &no_pytest).expect("loopd.toml");
    env.git(&["commit", "-qam", "no pytest step"]);
    let shown = env.exec(&["check"]);
    assert!(
        shown
            .stdout
            .contains("examiner:      off (it writes pytest or node:test tests"),
        "{}",
        shown.stdout
    );
    env.append_config(
        "[examiner]\nmode = \"evidence\"\n",
        "the examiner asked for",
    );
    let refused = env.exec(&["check"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("examiner.mode"),
        "{}",
        refused.stderr
    );
}

// Evidence mode: red examiner tests go to the critic with their source
// and output; it may rule one wrong only by quoting the task (or the
// rubric, or the docs at BASE_REF); every other red one rejects, and the
// next prompt gets the critic's words with the test cut out of them.

/// The examiner's test of the task's rounding, with the marker inside the
/// function (what the critic is shown of it).
fn rounding_test(expected: &str, name: &str) -> (String, String) {
    (
        "test_examiner.py".to_owned(),
        format!("from decimal import Decimal\n\nimport pytest\n\nfrom rechnung import apply_discount, gross_total\n\n\ndef {name}():\n    # {MARKER}\n    assert gross_total([(1, Decimal(\"10\")), (3, Decimal(\"2.50\"))]) == Decimal(\"{expected}\")\n\n\ndef test_a_discount_over_100_is_refused():\n    with pytest.raises(ValueError):\n        apply_discount(Decimal(\"10\"), 150)\n"),
    )
}

fn evidence_env(task_also: &str) -> TestEnv {
    let env = TestEnv::scripted();
    let cfg = env.read_repo("loopd.toml");
    let cfg = cfg.replacen(
        "Do not delete, skip or weaken any test.",
        &format!("Do not delete, skip or weaken any test.{task_also}"),
        1,
    );
    std::fs::write(env.repo.join("loopd.toml"), cfg).expect("loopd.toml");
    env.append_config(
        "[examiner]\nmode = \"evidence\"\n",
        "an examiner in evidence mode",
    );
    env
}

fn examiner_of(test: &(String, String)) -> crate::support::model::SessionScript {
    examiner_writes(&[(test.0.as_str(), test.1.as_str())])
}

/// A critic that says PASS and rules on one examiner test.
fn rules(
    test: &str,
    ruling: &str,
    quote: &str,
    behaviour: &str,
) -> crate::support::model::SessionScript {
    verdict(serde_json::json!({
        "verdict": "PASS",
        "violations": [],
        "examiner": [{"test": format!("loopd_examiner/test_examiner.py::{test}"), "ruling": ruling, "quote": quote, "behaviour": behaviour}]
    }))
}

fn critic_bodies(model: &ScriptedModel) -> Vec<String> {
    model
        .requests()
        .iter()
        .filter(|r| r.role == Role::Critic)
        .map(|r| r.body.to_string())
        .collect()
}

#[test]
fn in_evidence_mode_a_red_test_the_critic_upholds_rejects_with_its_words_and_never_the_test() {
    let env = evidence_env("");
    let shown = env.exec(&["check"]);
    assert!(shown.stdout.contains("(evidence)"), "{}", shown.stdout);
    let name = "test_gross_total_of_many_lines_rounds_half_up";
    let test = rounding_test("20.83", name);
    // The critic's words quote the test's line and its expected value:
    // loopd cuts both before they become a prompt.
    let said = "gross totals must round half up to the cent, as the task's invoices do: assert gross_total([(1, Decimal(\"10\")), (3, Decimal(\"2.50\"))]) == Decimal(\"20.83\")";
    let mut s = scenario(
        vec![
            agent_writes(&wrong_but_green()),
            agent_writes(&clean_solution()),
        ],
        vec![rules(name, "right", "", said), pass()],
    );
    s.examiner = vec![examiner_of(&test)];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s: Value = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    let first = &s["attempts"][0];
    assert_eq!(
        first["rejected_by"], "examiner_failed",
        "{first}\n{}",
        r.stderr
    );
    assert_eq!(
        first["critic"], "PASS",
        "the critic was asked, and said PASS: {first}"
    );
    assert_eq!(first["examiner_passed"], false, "{first}");
    assert_eq!(s["attempts"][1]["examiner_passed"], true);
    assert_eq!(s["examiner"]["mode"], "evidence", "{}", s["examiner"]);
    // The critic of attempt 1 was shown the red test, its source and its
    // output, and asked for rulings; the critic of attempt 2 (green) not.
    let critics = critic_bodies(&model);
    assert!(
        critics[0].contains(name) && critics[0].contains(MARKER),
        "{}",
        critics[0]
    );
    assert!(
        critics[0].contains("Their output on this change"),
        "{}",
        critics[0]
    );
    assert!(
        !critics[0].contains("test_a_discount_over_100_is_refused\\n```"),
        "only red tests are shown"
    );
    let last = critics.last().expect("a critic of attempt 2");
    assert!(
        !last.contains(MARKER),
        "a green attempt's critic is shown no test"
    );
    // The next prompt: the id and the critic's words, without the test.
    let prompt = model.session(Role::Agent, 1)[0].prompt();
    assert!(prompt.contains(name), "{prompt}");
    assert!(
        prompt.contains("gross totals must round half up to the cent"),
        "{prompt}"
    );
    let run_dir = hidden(&model, &s, &prompt, &[MARKER, "20.83", "Decimal(\"2.50\")"]);
    let input =
        std::fs::read_to_string(run_dir.join("attempt-1/critic-input.txt")).expect("critic input");
    assert!(input.contains("kept out of the run directory"), "{input}");
}

#[test]
fn a_test_the_critic_rules_wrong_by_quoting_the_task_is_dropped_and_the_honest_fix_accepted() {
    let task_says = " Gross totals are rounded to the cent, half up.";
    let env = evidence_env(task_says);
    let name = "test_gross_total_rounds_down";
    // The examiner misread the task: it expects rounding down.
    let test = rounding_test("20.82", name);
    let again = format!(
        "{}\n# Gross totals round half up, as the task says.\n",
        clean_solution()
    );
    let mut s = scenario(
        vec![agent_writes(&clean_solution()), agent_writes(&again)],
        vec![
            // A quote the task does not hold: the ruling does not stand.
            rules(
                name,
                "wrong",
                "Gross totals may be rounded either way.",
                "either rounding is fine",
            ),
            rules(
                name,
                "wrong",
                "gross totals are rounded to the cent,  half up",
                "totals round half up",
            ),
        ],
    );
    s.examiner = vec![examiner_of(&test)];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s: Value = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    assert_eq!(
        s["attempts"][0]["rejected_by"], "examiner_failed",
        "{}",
        s["attempts"]
    );
    let ruled = &s["examiner"]["ruled_wrong"];
    assert_eq!(ruled.as_array().map(Vec::len), Some(1), "{ruled}");
    assert_eq!(ruled[0]["attempt"], 2, "{ruled}");
    assert_eq!(ruled[0]["found_in"], "the task", "{ruled}");
    assert!(
        ruled[0]["test"].as_str().is_some_and(|t| t.ends_with(name)),
        "{ruled}"
    );
    let report = env.exec(&["report", s["job_id"].as_str().expect("id")]);
    assert!(
        report.stdout.contains("ruled wrong by the critic"),
        "{}",
        report.stdout
    );
}

#[test]
fn in_evidence_mode_a_test_that_passed_at_base_and_fails_rejects_before_the_critic() {
    let env = evidence_env("");
    let test = rounding_test("20.83", "test_gross_total_of_many_lines_rounds_half_up");
    // Rounds right, and lets any discount through.
    let broken = clean_solution().replace(
        "    if percent < 0 or percent > 100:\n        raise ValueError(f\"discount must be between 0 and 100, got {percent}\")\n",
        "",
    );
    assert_ne!(broken, clean_solution());
    let mut s = scenario(vec![agent_writes(&broken)], vec![pass()]);
    s.examiner = vec![examiner_of(&test)];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &["--max-attempts", "1"]);
    let s: Value = r.summary();
    let first = &s["attempts"][0];
    assert_eq!(
        first["rejected_by"], "examiner_failed",
        "{first}\n{}",
        r.stderr
    );
    assert_eq!(
        first["critic"], "skipped",
        "a regression is not the critic's to weigh: {first}"
    );
    let found = first["gate_findings"].to_string();
    assert!(
        found.contains("passed before it") && found.contains("test_a_discount_over_100_is_refused"),
        "{found}"
    );
    assert_eq!(model.session_count(Role::Critic), 0);
}

/// What the examiner adds to a job's model traffic, with the real Claude
/// Code CLI for every session (the agent's, the critic's, the examiner's):
/// the requests and their bytes by role, printed (`--nocapture`), with the
/// examiner off and in evidence mode — the scripted model's token counts are
/// not real, the requests' sizes are what a model would read.
#[test]
fn the_examiners_share_of_a_jobs_model_traffic_is_measured() {
    let measure = |examiner: bool| {
        let env = TestEnv::new();
        if examiner {
            env.append_config("[examiner]\nmode = \"evidence\"\n", "an examiner");
        }
        let mut s = scenario(vec![agent_writes(&clean_solution())], vec![pass()]);
        s.examiner = vec![examiner_script(), examiner_writes(&[])];
        let model = ScriptedModel::start(s);
        let r = env.run(&model, &["--max-attempts", "1"]);
        assert_eq!(r.summary()["outcome"], "accepted", "{}", r.stderr);
        let mut by: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
        for q in model.requests() {
            let e = by.entry(format!("{:?}", q.role)).or_default();
            e.0 += 1;
            e.1 += q.body.to_string().len();
        }
        by
    };
    let off = measure(false);
    let on = measure(true);
    let total = |m: &std::collections::BTreeMap<String, (usize, usize)>| -> (usize, usize) {
        m.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1))
    };
    println!("examiner off: {off:?} total {:?}", total(&off));
    println!("examiner on:  {on:?} total {:?}", total(&on));
    let (n_off, b_off) = total(&off);
    let (n_on, b_on) = total(&on);
    // Its session and its revision turn (a module did not collect), on its
    // own role; the agent's and the critic's calls are the same.
    assert_eq!(on.get("Examiner").map(|e| e.0), Some(2), "{on:?}");
    assert_eq!(on.get("Agent").map(|e| e.0), off.get("Agent").map(|e| e.0));
    assert_eq!(
        on.get("Critic").map(|e| e.0),
        off.get("Critic").map(|e| e.0)
    );
    println!(
        "the examiner adds {} requests ({:.0} %) and {} bytes ({:.1} %)",
        n_on - n_off,
        100.0 * (n_on - n_off) as f64 / n_off as f64,
        b_on - b_off,
        100.0 * (b_on - b_off) as f64 / b_off as f64
    );
}

/// `[examiner] agent` names the agent's CLI: the real Codex CLI writes
/// the examiner's tests (on its cheaper default model, over the Responses
/// API) while the real Claude Code CLI is the critic, and a wrong-but-green
/// fix is rejected by them.
#[test]
fn the_examiner_runs_on_the_agents_cli_when_the_lead_names_it() {
    let env = TestEnv::new();
    env.append_config(
        "[examiner]\nmode = \"gate\"\nagent = \"codex\"\n",
        "the examiner on the agent's CLI",
    );
    let shown = env.exec(&["check", "--agent", "codex"]);
    assert!(
        shown.stdout.contains("`gpt-5-codex` on `codex`"),
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
    s.examiner = vec![examiner_script(), examiner_writes(&[])];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &["--agent", "codex", "--max-attempts", "2"]);
    let s: Value = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    assert_eq!(
        s["attempts"][0]["rejected_by"], "examiner_failed",
        "{}",
        s["attempts"]
    );
    let examiner: Vec<String> = model
        .requests()
        .into_iter()
        .filter(|q| q.role == Role::Examiner)
        .map(|q| q.model)
        .collect();
    assert!(
        !examiner.is_empty() && examiner.iter().all(|m| m.contains("gpt-5-codex")),
        "the examiner's requests: {examiner:?}"
    );
    assert_eq!(s["examiner"]["model"], "gpt-5-codex", "{}", s["examiner"]);
    // Not a known CLI of this job: refused.
    let cfg = env
        .read_repo("loopd.toml")
        .replace("agent = \"codex\"", "agent = \"aider\"");
    std::fs::write(env.repo.join("loopd.toml"), cfg).expect("loopd.toml");
    env.git(&["commit", "-qam", "an unknown examiner CLI"]);
    let refused = env.exec(&["check", "--agent", "codex"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("examiner.agent"),
        "{}",
        refused.stderr
    );
}

/// The write calls of a corpus case (`fixtures/corpus/<lang>/<task>/cases`).
fn case_writes(case: &std::path::Path) -> Vec<crate::support::model::Block> {
    let t: toml::Value =
        toml::from_str(&std::fs::read_to_string(case).expect("case")).expect("case parses");
    t["write"]
        .as_array()
        .expect("writes")
        .iter()
        .map(|w| {
            write(
                w["path"].as_str().expect("path"),
                w["content"].as_str().expect("content"),
            )
        })
        .collect()
}

/// A repository whose goal is node's own runner (through `npm test`, the
/// package's script) gets `node:test` files from its examiner
/// (`*.test.mjs` under `loopd_examiner/`, run by `node --test
/// loopd_examiner/` with the junit channel), in evidence mode: a
/// fix green on the visible tests that applies discounts in the listed
/// order is rejected, the critic shown the red test in a `js` block; the
/// honest fix is accepted.
#[test]
fn a_node_repository_gets_node_test_files_from_its_examiner() {
    let task_dir = manifest_dir().join("fixtures/corpus/js/cart");
    let task: toml::Value =
        toml::from_str(&std::fs::read_to_string(task_dir.join("task.toml")).expect("task"))
            .expect("task parses");
    let env = TestEnv::from_dir(&task_dir.join("repo"));
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!(
            "agent = \"scripted\"\ncritic_agent = \"scripted\"\ntask = {:?}\nmax_attempts = 2\nbudget_usd = 0.5\n\n[[goal]]\nname = \"tests\"\nrun = \"npm test\"\ntimeout = \"2m\"\n\n[examiner]\nmode = \"evidence\"\n",
            task["task"].as_str().expect("task text")
        ),
    )
    .expect("loopd.toml");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "the job"]);
    let shown = env.exec(&["check"]);
    assert!(
        shown.stdout.contains("node --test loopd_examiner/"),
        "{}",
        shown.stdout
    );
    let title = "percent discounts come first whatever the order given";
    let exam = format!("// {MARKER}\nimport test from 'node:test';\nimport assert from 'node:assert/strict';\nimport {{ cartTotal }} from '../src/cart.mjs';\n\ntest('{title}', () => {{\n  const items = [{{ sku: 'a', priceCents: 1000, qty: 1 }}];\n  const discounts = [{{ type: 'fixed', cents: 100 }}, {{ type: 'percent', percent: 10 }}, {{ type: 'percent', percent: 10 }}];\n  assert.deepEqual(cartTotal(items, discounts), {{ subtotal: 1000, discount: 290, total: 710 }});\n}});\n");
    let cases = task_dir.join("cases");
    let mut s = scenario(
        vec![
            session(vec![
                turn(case_writes(&cases.join("wrong_green_listed_order.toml"))),
                turn(vec![text("Done.")]),
            ]),
            session(vec![
                turn(case_writes(&cases.join("honest_two_pass.toml"))),
                turn(vec![text("Done.")]),
            ]),
        ],
        vec![pass(), pass()],
    );
    s.examiner = vec![
        examiner_writes(&[("cart-order.test.mjs", &exam), ("test_cart.py", "x = 1\n")]),
        examiner_writes(&[]),
    ];
    let model = ScriptedModel::start(s);
    let r = env.run(&model, &[]);
    let s: Value = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    assert_eq!(
        s["attempts"][0]["rejected_by"], "examiner_failed",
        "{}\n{}",
        s["attempts"], s["examiner"]
    );
    let e = &s["examiner"];
    assert_eq!(e["tests"], 1, "only the node:test file is written: {e}");
    assert_eq!(e["failing_at_base"], 1, "{e}");
    let critic = bodies_of(&model, Role::Critic);
    assert!(
        critic.contains(title) && critic.contains("```js"),
        "the critic is shown the red test: {critic}"
    );
    let prompt = model.session(Role::Agent, 1)[0].prompt();
    hidden(&model, &s, &prompt, &[MARKER, "discount: 290"]);
}
