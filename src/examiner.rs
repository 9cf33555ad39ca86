//! The examiner: before the first attempt, a fresh session (the critic's
//! CLI, a model the lead picks) reads the task, the rubric and the
//! repository at BASE_REF — given as material, with no tool that reads or
//! writes — and answers with tests of the behaviour the task describes, in
//! the repository's own test framework. loopd writes them where no process
//! of the job reads them (a held-out directory under the state dir, cut out
//! of every sandbox), checks them at BASE_REF, and runs them on each
//! candidate's judge-only tree like held-out tests. The examiner never sees
//! the agent's change; the agent never sees its tests, only the ids of
//! those that fail.
//!
//! What it catches: a fix green on the visible tests that breaks the rule
//! the task states (the wrong rounding, the cases the visible tests leave
//! out) — when the examiner read the task right. What it cannot: a
//! behaviour the task does not state, and a forged report (the held-out
//! run's limits, `docs/judging.md`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::agent::events::SessionResult;

pub mod evidence;

/// The directory the examiner's tests live in, at the top of the judge-only
/// tree.
pub const DIR: &str = "loopd_examiner";

/// At most this many test files.
pub const MAX_FILES: usize = 8;
/// At most this many bytes in a test file's name.
pub const MAX_NAME: usize = 100;
/// At most this many bytes per test file.
pub const MAX_FILE_BYTES: usize = 32 << 10;
/// The repository's files the examiner is shown, in all.
pub const MAX_MATERIAL: usize = 160 << 10;
/// One file of the repository is shown up to this size.
const MAX_SHOWN_FILE: usize = 24 << 10;

/// How red examiner tests judge (`[examiner] mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// No examiner.
    Off,
    /// A red examiner test rejects the attempt like a held-out test; the
    /// next prompt gets only ids.
    Gate,
    /// A red examiner test goes to the critic with its source and output;
    /// the critic may rule it wrong only by quoting the task, the rubric
    /// or the repository's documentation at BASE_REF that it contradicts
    /// (a test ruled wrong is dropped for the rest of the job). Every other
    /// red test rejects the attempt; the next prompt gets its id and the
    /// critic's words about the behaviour, never the test's source.
    Evidence,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Gate => "gate",
            Mode::Evidence => "evidence",
        }
    }
}

/// The test framework the examiner writes for: the goal's runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framework {
    Pytest,
    /// node's own test runner (`node --test`).
    Node,
}

impl Framework {
    /// How its report is read (the junit channel of the runner registry).
    pub fn preset(self) -> crate::judges::testcount::Preset {
        match self {
            Framework::Pytest => crate::judges::testcount::Preset::Pytest,
            Framework::Node => crate::judges::testcount::Preset::Node,
        }
    }

    /// What the examiner is told to write.
    fn files(self) -> &'static str {
        match self {
            Framework::Pytest => "pytest test modules named `test_*.py`",
            Framework::Node => {
                "test files for node's own runner (`node:test` and `node:assert`), named `*.test.mjs` (ES modules), that import the code under test by a path relative to that directory (`../src/x.mjs`)"
            }
        }
    }

    /// A test file's name the runner collects from the examiner's
    /// directory.
    pub fn is_test_file(self, name: &str) -> bool {
        match self {
            Framework::Pytest => {
                name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"))
            }
            Framework::Node => [".test.mjs", ".test.js", ".test.cjs"]
                .iter()
                .any(|e| name.ends_with(e) && name.len() > e.len()),
        }
    }

    /// The language a code fence of its tests names.
    pub fn fence(self) -> &'static str {
        match self {
            Framework::Pytest => "python",
            Framework::Node => "js",
        }
    }
}

/// The examiner of a job, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    pub mode: Mode,
    /// The CLI that runs its session: the job's agent's or critic's
    /// (its name in the agent registry).
    pub agent: String,
    /// The model of its session (the critic's CLI runs it).
    pub model: String,
    /// The command that runs its tests: the goal's runner, no selection,
    /// over [`DIR`].
    pub run: String,
    /// The bound of each run of them: that goal step's own timeout.
    #[serde(with = "crate::util::duration_text")]
    pub timeout: std::time::Duration,
    /// What it writes tests for.
    pub framework: Framework,
}

/// The instruction passed as the examiner's prompt argument; the material
/// follows on stdin. Its first words tell the examiner's sessions apart in
/// a scripted model.
pub fn instruction(answer_with: &str, framework: Framework) -> String {
    format!(
        "You are the examiner of a coding task. Everything you need follows: the task, the rules changes are judged by, and the repository as it is before anyone works on it. Write tests of the behaviour the task describes — the cases it states and the ones it implies, not only those the repository's tests already cover — in the repository's own test framework, as {} in the directory `{DIR}/` at the top of the repository. Import the code under test the way the repository's own tests do. Do not fix anything. Answer only {answer_with}.",
        framework.files()
    )
}

/// The instruction of the examiner's one revision turn (the same first
/// words: the same examiner).
pub fn revision_instruction(answer_with: &str, framework: Framework) -> String {
    format!(
        "You are the examiner of a coding task, revising the tests you wrote. Everything you need follows: the task, the rules, the repository before anyone works on it, your tests, and how each of them ran there. A test that errored or was skipped there is dropped. A test of what the task asks for should fail there (the work is not done yet); a test of what must not break should pass. Fix what did not run, and revise what tests the wrong thing, as {} in the directory `{DIR}/`. Answer only {answer_with}, with the complete revised set of test files (it replaces the first), or with no file to keep them as they are.",
        framework.files()
    )
}

/// What the revision turn adds to the material: the examiner's tests and
/// each one's outcome at BASE_REF — ids and outcomes only, never output.
pub fn revision_material(
    framework: Framework,
    tests: &[TestFile],
    failing: &[String],
    passing: &[String],
    dropped: &[String],
) -> String {
    let mut out = String::from("# Your tests\n\n");
    for t in tests {
        out.push_str(&format!(
            "## `{DIR}/{}`\n\n```{}\n{}\n```\n\n",
            t.file,
            framework.fence(),
            t.content.trim_end()
        ));
    }
    out.push_str("# How they ran at BASE_REF\n\n");
    for (word, ids) in [
        ("failed", failing),
        ("passed", passing),
        ("errored or skipped (dropped)", dropped),
    ] {
        out.push_str(&format!("{} {word}:\n", ids.len()));
        for id in ids {
            out.push_str(&format!("- `{id}`\n"));
        }
    }
    if failing.len() + passing.len() + dropped.len() == 0 {
        out.push_str("No test ran: none was collected.\n");
    }
    out
}

/// The JSON schema of the examiner's answer.
pub fn answer_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "tests": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string"},
                        "content": {"type": "string"}
                    },
                    "required": ["file", "content"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["tests"],
        "additionalProperties": false
    })
}

/// One test file the examiner wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestFile {
    /// A plain file name under [`DIR`] (`test_rounding.py`).
    pub file: String,
    pub content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    tests: Vec<TestFile>,
}

/// The examiner's tests, from its structured answer: each a test file of
/// the runner by a plain name, bounded in number and size. `Err`: why
/// nothing usable came back.
pub fn read_answer(
    result: Option<&SessionResult>,
    framework: Framework,
) -> Result<Vec<TestFile>, String> {
    let result = result.ok_or("the examiner session ended without a result")?;
    if !result.completed {
        return Err(format!(
            "the examiner session failed: {}",
            result.error_text()
        ));
    }
    let object = result
        .structured_output
        .as_ref()
        .ok_or("no structured answer (the examiner answered in prose)")?;
    let answer: Answer = serde_json::from_value(object.clone())
        .map_err(|e| format!("malformed answer object: {e}"))?;
    let mut out: Vec<TestFile> = Vec::new();
    for t in answer.tests {
        if out.len() == MAX_FILES {
            break;
        }
        let name = t
            .file
            .trim()
            .trim_start_matches(&format!("{DIR}/"))
            .to_owned();
        let plain = !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
            && !name.starts_with('.');
        if !plain || !framework.is_test_file(&name) || t.content.len() > MAX_FILE_BYTES {
            tracing::warn!(file = %t.file, bytes = t.content.len(), "an examiner test file loopd does not write: a plain test file name under the examiner's directory, at most 32 KiB");
            continue;
        }
        if out.iter().any(|o| o.file == name) {
            continue;
        }
        out.push(TestFile {
            file: name,
            content: t.content,
        });
    }
    if out.is_empty() {
        return Err("the examiner wrote no test file loopd can use".into());
    }
    Ok(out)
}

/// A test's id without its parameters (`m::test_x[7.50-20.83]` is
/// `m::test_x`): what the examiner's tests are judged and told by — the
/// parameters of a parametrized test are its expected values.
pub fn test_of(id: &str) -> &str {
    let last = id.rfind("::").map_or(0, |i| i + 2);
    match id[last..].find('[') {
        Some(i) => &id[..last + i],
        None => id,
    }
}

/// Whether a run's report is not its runner's: it says every test passed
/// (or was skipped) while the runner did not exit 0 — it failed, was
/// killed or timed out. Code the tests import runs in the runner's process
/// and can write the report's file; it cannot make the runner it shares a
/// process with exit 0 with a test failing, nor survive its own kill.
pub fn report_disowned(step: &crate::goal::StepResult) -> bool {
    use crate::goal::results::Verdict;
    let Some(results) = step.results.as_ref() else {
        return false;
    };
    let all_green = results
        .values()
        .all(|v| matches!(v, Verdict::Passed | Verdict::Skipped));
    let clean_exit = step.exit_code == Some(0) && !step.timed_out;
    all_green && !clean_exit
}

/// The results by test ([`test_of`]): a test passes only when every case
/// of it passed; an error outranks a failure, which outranks a skip.
pub fn by_test(results: &crate::goal::results::Results) -> crate::goal::results::Results {
    use crate::goal::results::Verdict;
    let rank = |v: Verdict| match v {
        Verdict::Passed => 0,
        Verdict::Skipped => 1,
        Verdict::Failed => 2,
        Verdict::Error => 3,
    };
    let mut out = crate::goal::results::Results::new();
    for (id, v) in results {
        let e = out.entry(test_of(id).to_owned()).or_insert(*v);
        if rank(*v) > rank(*e) {
            *e = *v;
        }
    }
    out
}

/// The command that runs the examiner's tests, from the goal's steps: the
/// first step whose one command is pytest or `node --test` — directly, or
/// through a package script (`npm test`, resolved by `scripts` from
/// `package.json`) — without its selection, over [`DIR`] (pytest going on
/// past a module that does not collect), with that step's timeout and the
/// framework. `None`: no goal step runs a runner the examiner writes for.
pub fn command_for(
    goal: &[crate::goal::GoalStep],
    scripts: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, std::time::Duration, Framework)> {
    goal.iter().find_map(|s| {
        let line = through_scripts(&s.run, scripts);
        let runners = crate::runner::runners_of(&line);
        let [(runner, _)] = runners.as_slice() else {
            return None;
        };
        if crate::runner::commands(&line).len() != 1 {
            return None;
        }
        let narrowed = crate::runner::narrowed(&line);
        let whole = narrowed.clone().unwrap_or_else(|| line.clone());
        match runner.name {
            "pytest" => {
                // A module of the examiner's that does not import must not
                // stop the others from running: it is dropped at BASE_REF.
                // The inferred whole suite goes on past collection errors
                // already.
                let go_on = if narrowed.is_none() {
                    " --continue-on-collection-errors"
                } else {
                    ""
                };
                Some((
                    format!("{whole}{go_on} {DIR}"),
                    s.timeout,
                    Framework::Pytest,
                ))
            }
            "node --test" => Some((format!("{whole} {DIR}/"), s.timeout, Framework::Node)),
            _ => None,
        }
    })
}

/// `line` with a lone package-script command (`npm test`, `yarn run
/// unit`) replaced by its script, a few levels deep: what it runs.
fn through_scripts(line: &str, scripts: &dyn Fn(&str) -> Option<String>) -> String {
    let mut line = line.to_owned();
    for _ in 0..3 {
        let commands = crate::runner::commands(&line);
        let [words] = commands.as_slice() else {
            break;
        };
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let is_manager = words.first().is_some_and(|w| {
            let base = w.rsplit('/').next().unwrap_or(w);
            matches!(base, "npm" | "yarn" | "pnpm" | "bun")
        });
        let name = match words.get(1..) {
            Some(["test" | "t" | "tst"]) => "test",
            Some(["run" | "run-script", name]) => name,
            _ => break,
        };
        match scripts(name).filter(|_| is_manager) {
            Some(script) => line = script,
            None => break,
        }
    }
    line
}

/// Where a job's examiner tests are kept: under the state dir, outside
/// every run directory (an uploaded run directory never carries them),
/// keyed by BASE_REF, the task and the model — a resumed job finds them.
pub fn home(state_dir: &Path, base_ref: &str, task: &str, model: &str) -> PathBuf {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in [base_ref, task, model] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let key = hex::encode(h.finalize());
    examiners(state_dir).join(&key[..24])
}

/// The directory of every job's examiner tests: a hole in every sandbox.
pub fn examiners(state_dir: &Path) -> PathBuf {
    state_dir.join("examiner")
}

/// The repository at BASE_REF as the examiner reads it: each text file
/// (by path, sources and tests alike), whole up to a bound, until the
/// material's bound.
pub fn material(task: &str, rubric: &str, files: &[(String, String)]) -> String {
    let mut out = format!(
        "# The task\n\n{task}\n\n# The rules changes are judged by\n\n{rubric}\n\n# The repository at BASE_REF\n\n"
    );
    let mut used = 0usize;
    let mut left_out = Vec::new();
    for (path, text) in files {
        if text.len() > MAX_SHOWN_FILE || used + text.len() > MAX_MATERIAL {
            left_out.push(path.as_str());
            continue;
        }
        used += text.len();
        out.push_str(&format!("## `{path}`\n\n```\n{text}\n```\n\n"));
    }
    if !left_out.is_empty() {
        out.push_str(&format!("Not shown (too large): {}\n", left_out.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(answer: serde_json::Value) -> SessionResult {
        SessionResult {
            completed: true,
            structured_output: Some(answer),
            ..SessionResult::default()
        }
    }

    #[test]
    fn only_plain_test_files_of_a_bounded_size_are_taken() {
        let got = read_answer(
            Some(&result(json!({"tests": [
                {"file": "test_a.py", "content": "def test_a(): pass\n"},
                {"file": "loopd_examiner/test_b.py", "content": "def test_b(): pass\n"},
                {"file": "../conftest.py", "content": "x"},
                {"file": "sub/test_c.py", "content": "x"},
                {"file": "helper.py", "content": "x"},
                {"file": "test_big.py", "content": "x".repeat(MAX_FILE_BYTES + 1)},
                {"file": "test_a.py", "content": "again"},
            ]}))),
            Framework::Pytest,
        )
        .expect("two usable files");
        let names: Vec<&str> = got.iter().map(|t| t.file.as_str()).collect();
        assert_eq!(names, ["test_a.py", "test_b.py"]);
        let read = |v| read_answer(Some(&result(v)), Framework::Pytest);
        assert!(read(json!({"tests": []})).is_err());
        assert!(read(json!({"verdict": "PASS"})).is_err());
        assert!(read_answer(None, Framework::Pytest).is_err());
        let node = read_answer(
            Some(&result(json!({"tests": [
                {"file": "cart-rounding.test.mjs", "content": "import test from 'node:test';\n"},
                {"file": "test_cart.py", "content": "x"},
                {"file": ".test.mjs", "content": "x"},
            ]}))),
            Framework::Node,
        )
        .expect("a node test file");
        assert_eq!(node.len(), 1);
        assert_eq!(node[0].file, "cart-rounding.test.mjs");
    }

    #[test]
    fn the_examiners_command_is_the_goals_runner_over_its_directory() {
        let step = |run: &str| crate::goal::GoalStep {
            name: "t".into(),
            run: run.into(),
            timeout: std::time::Duration::from_secs(60),
            report: None,
        };
        let scripts = |name: &str| (name == "test").then(|| "node --test tests/".to_owned());
        let command_for = |g: &[crate::goal::GoalStep]| command_for(g, &scripts).map(|(c, _, _)| c);
        assert_eq!(
            command_for(&[
                step("ruff check ."),
                step("python3 -m pytest -q tests/test_a.py")
            ]),
            Some("python3 -m pytest -q --continue-on-collection-errors loopd_examiner".into())
        );
        assert_eq!(
            command_for(&[step("pytest -q")]),
            Some("pytest -q --continue-on-collection-errors loopd_examiner".into())
        );
        assert_eq!(command_for(&[step("go test ./...")]), None);
        assert_eq!(
            command_for(&[step("node --test tests/")]),
            Some("node --test loopd_examiner/".into())
        );
        assert_eq!(
            command_for(&[step("npm test")]),
            Some("node --test loopd_examiner/".into()),
            "through the package's test script"
        );
        assert_eq!(command_for(&[step("npm run lint")]), None);
        assert_eq!(command_for(&[step("make test && pytest")]), None);
    }

    #[test]
    fn parameters_are_not_part_of_what_is_told() {
        use crate::goal::results::{Results, Verdict};
        assert_eq!(test_of("m.t::test_x[7.50-20.83]"), "m.t::test_x");
        assert_eq!(test_of("m.t::C::test_y"), "m.t::C::test_y");
        assert_eq!(test_of("m[x].t::test_z"), "m[x].t::test_z");
        let r: Results = [
            ("m::a[1]", Verdict::Passed),
            ("m::a[2]", Verdict::Failed),
            ("m::b", Verdict::Passed),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let g = by_test(&r);
        assert_eq!(g.get("m::a"), Some(&Verdict::Failed));
        assert_eq!(g.get("m::b"), Some(&Verdict::Passed));
        assert_eq!(g.len(), 2);
        let long = format!("test_{}.py", "a".repeat(300));
        assert!(read_answer(
            Some(&result(json!({"tests": [{"file": long, "content": "x"}]}))),
            Framework::Pytest
        )
        .is_err());
    }

    #[test]
    fn a_report_all_green_from_a_runner_that_failed_is_not_the_runners() {
        use crate::goal::results::Verdict;
        let step = |exit: Option<i32>, timed_out: bool, v: Verdict| crate::goal::StepResult {
            name: "examiner".into(),
            command: "node --test loopd_examiner/".into(),
            exit_code: exit,
            timed_out,
            passed: exit == Some(0) && !timed_out,
            output: String::new(),
            duration_ms: 1,
            leftovers: 0,
            results: Some([("test::a".to_owned(), v)].into_iter().collect()),
            read: None,
        };
        assert!(report_disowned(&step(Some(1), false, Verdict::Passed)));
        assert!(
            report_disowned(&step(None, false, Verdict::Passed)),
            "killed"
        );
        assert!(
            report_disowned(&step(Some(0), true, Verdict::Passed)),
            "timed out"
        );
        assert!(!report_disowned(&step(Some(0), false, Verdict::Passed)));
        assert!(!report_disowned(&step(Some(1), false, Verdict::Failed)));
    }

    #[test]
    fn the_home_is_keyed_by_base_ref_task_and_model_outside_every_run() {
        let s = Path::new("/state");
        let a = home(s, "abc", "fix it", "m1");
        assert!(a.starts_with("/state/examiner"));
        assert_eq!(a, home(s, "abc", "fix it", "m1"));
        assert_ne!(a, home(s, "abc", "fix it", "m2"));
        assert_ne!(a, home(s, "abd", "fix it", "m1"));
    }
}
