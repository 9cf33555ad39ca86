//! What cheaper, sharper judging saves, printed (no timed assertions):
//!
//! 1. The pre-critic: model calls on the rechnung fixture's six labelled
//!    defects, with the pre-critic and without it (`[precheck] enabled =
//!    false` in a copy of the default rubric). Attempt 1 leaves one defect,
//!    attempt 2 the honest fix; the scripted critic is a perfect one (it
//!    finds the defect when asked about attempt 1 and passes attempt 2).
//! 2. The lessons memory: two jobs in a row on one repository, with a
//!    scripted agent that repeats its mistake (a debug print) unless its
//!    first prompt carries the lesson; once with the memory, once with the
//!    lesson forgotten between the jobs.
//!
//! 3. The pre-critic's own cost: milliseconds per attempt on a 2,000-line
//!    added diff in each language (in process, no model; the median of 15
//!    runs).
//!
//! Every run in 1 and 2 is a real `loopd run` against the real Claude Code CLI and the
//! scripted model. A model call is one request the CLI sent to the model
//! (agent and critic turns alike).
//!
//! `cargo bench --bench judging` (needs the test
//! tools: `scripts/install-test-tools.sh`, or `LOOPD_TEST_TOOLS=DIR`).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/it/precheck.rs"]
#[allow(dead_code)]
mod scenarios;

// Its tests are not compiled here (no test harness): their imports go unused.
#[path = "../tests/it/lessons.rs"]
#[allow(dead_code, unused_imports)]
mod lessons;

use serde_json::Value;
use support::model::{Role, ScriptedModel};
use support::*;

/// A variant, the rule its defect breaks, and whether the tamper gates
/// (which the pre-critic does not switch) catch it anyway.
const VARIANTS: &[(&str, i64, bool)] = &[
    ("skip_marker", 1, true),
    ("weakened_assert", 1, true),
    ("debug_print", 2, false),
    ("commented_out", 2, false),
    ("swallowed_error", 3, false),
    ("renamed", 4, false),
];

struct Run {
    calls: usize,
    critic_sessions: usize,
    attempts: usize,
    cost_usd: f64,
    outcome: String,
}

fn run(variant: &str, rule: i64, precheck: bool, gated: bool) -> Run {
    let env = TestEnv::new();
    // The variants' script runs in the job's sandbox, which reads nothing
    // outside the worktree unless granted.
    env.sandbox_reads(&[&manifest_dir().join("fixtures/rechnung")]);
    // The critic is asked about attempt 1 only when no gate rejected it.
    let critic_needed_twice = !gated && !precheck;
    let mut critic = Vec::new();
    if critic_needed_twice {
        critic.push(fail(rule, "rechnung.py", "the labelled defect", "undo it"));
    }
    critic.push(pass());
    let model = ScriptedModel::start(scenario(
        vec![
            scenarios::agent_applies(variant),
            scenarios::agent_applies("honest"),
        ],
        critic,
    ));
    let rubric = scenarios::rubric_without_precheck(&env);
    let mut args = vec!["--max-attempts", "2", "--allowed-tools", "Read,Write,Bash"];
    let rubric_arg = rubric.to_string_lossy().into_owned();
    if !precheck {
        args.extend(["--rubric", rubric_arg.as_str()]);
    }
    let r = env.run(&model, &args);
    let s: Value = r.summary();
    assert!(
        model.unscripted().is_empty(),
        "{variant}: a model call the script did not expect — the bench's assumptions are off: {}",
        r.stderr
    );
    Run {
        calls: model.requests().len(),
        critic_sessions: model.session_count(Role::Critic),
        attempts: s["attempts"].as_array().map_or(0, Vec::len),
        cost_usd: s["totals"]["cost_usd"].as_f64().unwrap_or(0.0),
        outcome: s["outcome"].as_str().unwrap_or("?").to_owned(),
    }
}

/// Model calls of two jobs in a row on one repository; `forget` drops the
/// lessons between them.
fn two_jobs(forget: bool) -> (usize, usize, usize, usize) {
    let env = TestEnv::new();
    let model = ScriptedModel::start(lessons::two_jobs());
    let first = env.run(&model, &[]).summary();
    let calls_first = model.requests().len();
    env.git(&["checkout", "--", "."]);
    if forget {
        let dir = env.state.join("lessons");
        std::fs::remove_dir_all(&dir).expect("forget the lessons");
    }
    let second = env.run(&model, &[]).summary();
    let calls_second = model.requests().len() - calls_first;
    let attempts = |s: &Value| s["attempts"].as_array().map_or(0, Vec::len);
    for s in [&first, &second] {
        assert_eq!(s["outcome"], "accepted", "{s}");
    }
    (
        calls_first,
        attempts(&first),
        calls_second,
        attempts(&second),
    )
}

fn main() {
    precheck_cost();
    // `LOOPD_BENCH=cost`: the pre-critic's cost alone (no CLI, no model;
    // what a profiler is pointed at).
    if std::env::var("LOOPD_BENCH").as_deref() == Ok("cost") {
        return;
    }
    println!();
    precheck();
    println!();
    println!(
        "two jobs in a row on one repository (the agent repeats its debug print unless told)\n"
    );
    println!(
        "{:<28} {:>12} {:>9} {:>12} {:>9}",
        "", "job 1 calls", "attempts", "job 2 calls", "attempts"
    );
    for (label, forget) in [
        ("with the lessons memory", false),
        ("lessons forgotten between", true),
    ] {
        let (c1, a1, c2, a2) = two_jobs(forget);
        println!("{label:<28} {c1:>12} {a1:>9} {c2:>12} {a2:>9}");
    }
}

fn precheck() {
    println!(
        "model calls on the rechnung variants (attempt 1: the defect; attempt 2: the honest fix)\n"
    );
    println!(
        "{:<16} {:>6} | {:>13} {:>8} {:>9} | {:>13} {:>8} {:>9}",
        "variant", "rule", "calls without", "critics", "$", "calls with", "critics", "$"
    );
    let (mut without_total, mut with_total) = (0, 0);
    let (mut without_critic, mut with_critic) = (0, 0);
    for &(variant, rule, gated) in VARIANTS {
        let off = run(variant, rule, false, gated);
        let on = run(variant, rule, true, gated);
        for r in [&off, &on] {
            assert_eq!(
                r.outcome, "accepted",
                "{variant}: the honest fix must be accepted"
            );
            assert_eq!(r.attempts, 2, "{variant}");
        }
        println!(
            "{:<16} {:>6} | {:>13} {:>8} {:>9.5} | {:>13} {:>8} {:>9.5}",
            variant,
            rule,
            off.calls,
            off.critic_sessions,
            off.cost_usd,
            on.calls,
            on.critic_sessions,
            on.cost_usd
        );
        without_total += off.calls;
        with_total += on.calls;
        without_critic += off.critic_sessions;
        with_critic += on.critic_sessions;
    }
    println!(
        "\ntotal: {without_total} model calls ({without_critic} critic sessions) without the pre-critic, \
         {with_total} ({with_critic}) with it: {} fewer calls",
        without_total - with_total
    );
}

/// The pre-critic on a 2,000-line added diff per language: 40 files of 50
/// lines, ordinary library code with aliases and a print in every file.
fn precheck_cost() {
    use loopd::judges::precheck::{Plan, PrecheckSettings};
    use loopd::workspace::{AddedLine, ChangedText};
    const RULES: [(u32, &str); 4] = [
        (1, "No test was deleted, skipped or weakened."),
        (
            2,
            "No debug prints, dead code or commented-out blocks were added.",
        ),
        (3, "Errors are handled, not silently swallowed."),
        (
            4,
            "The change stays inside the task; no drive-by refactoring.",
        ),
    ];
    let plan = Plan::new(&PrecheckSettings::default(), RULES);
    println!(
        "the pre-critic on a 2,000-line added diff (40 files of 50 lines), with special-casing and fitting against 300 test assertions, median of 15 runs\n"
    );
    println!("{:<12} {:>10} {:>10}", "language", "ms", "findings");
    let bodies: [(&str, &str, &str); 4] = [
        ("python", "py", "import sys as s\nout = s.stdout.write\n\ndef f{i}(x, y):\n    total = x * {i} + y  # the sum\n    if total > 10 and 'print(' in str(y):\n        return total - 1\n    out('done')\n    return total\n\n"),
        ("javascript", "js", "const {{ log: say }} = console;\nexport function f{i}(x, y) {{\n  const total = x * {i} + y; // the sum\n  if (total > 10 && `${{y}}`.includes('log(')) {{\n    return total - 1;\n  }}\n  say('done');\n  return total;\n}}\n\n"),
        ("rust", "rs", "pub fn f{i}(x: u64, y: u64) -> u64 {{\n    let total = x * {i} + y; // the sum\n    if total > 10 && format!(\"{{y}}\").contains(\"println!(\") {{\n        return total - 1;\n    }}\n    println!(\"done\");\n    total\n}}\n\n"),
        ("go", "go", "func F{i}(x, y int) int {{\n\ttotal := x*{i} + y // the sum\n\tif total > 10 && strings.Contains(fmt.Sprint(y), \"Println(\") {{\n\t\treturn total - 1\n\t}}\n\tfmt.Println(\"done\")\n\treturn total\n}}\n\n"),
    ];
    for (name, ext, body) in bodies {
        let mut added = Vec::new();
        let mut files = Vec::new();
        for file in 0..40 {
            let path = format!("pkg/mod{file}.{ext}");
            let mut text = String::new();
            while text.lines().count() < 50 {
                let i = text.len();
                text.push_str(
                    &body
                        .replace("{i}", &i.to_string())
                        .replace("{{", "{")
                        .replace("}}", "}"),
                );
            }
            let text: String = text.lines().take(50).map(|l| format!("{l}\n")).collect();
            for (n, line) in text.lines().enumerate() {
                added.push(AddedLine {
                    path: path.clone(),
                    line: n as u32 + 1,
                    text: line.to_owned(),
                });
            }
            files.push(ChangedText {
                path,
                old: Some(String::new()),
                new: Some(text),
            });
        }
        assert_eq!(added.len(), 2000);
        // The tests the fitting check reads pairs from: 300 assertions.
        let tests: String = (0..300)
            .map(|i| {
                format!(
                    "def test_{i}():\n    assert f{i}(\"input {i}\", {i}0) == \"expected {i}\"\n\n"
                )
            })
            .collect();
        let mut times = Vec::new();
        let mut found = 0;
        for _ in 0..15 {
            let t = std::time::Instant::now();
            let cases =
                loopd::judges::precheck::fitting::cases_in_tests("tests/test_all.py", &tests);
            let values: std::collections::HashSet<String> =
                loopd::judges::precheck::fitting::values_in_tests("tests/test_all.py", &tests)
                    .into_iter()
                    .collect();
            found = plan.run("t", &added, &files).len()
                + loopd::judges::precheck::fitting::findings(
                    &added, &files, &cases, &values, "t", true,
                )
                .len()
                + loopd::judges::precheck::test_special_casing(&added, &files, true, &[], &[])
                    .len();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!("{name:<12} {:>10.2} {found:>10}", times[times.len() / 2]);
    }
}
