//! The test-count gate: a green goal step must have run and passed at least
//! as many tests as *ran* at baseline, with no more skipped or deselected.
//!
//! This catches what no file-level rule can: deselecting in a build file,
//! filtering in a new `conftest.py`, or shrinking the suite through any file
//! that is not itself protected. Counts come from the test runner's own
//! summary; each goal step names a preset (or one is inferred from its
//! command).

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

use crate::util::once_regex as re;
use serde::{Deserialize, Serialize};

/// Test runners whose summaries loopd reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// `N passed, N failed, N skipped, N deselected ... in 0.1s`
    Pytest,
    /// `cargo test` (`test result: ...` lines, summed) and `cargo nextest`.
    Cargo,
    /// `go test -v` (`--- PASS/FAIL/SKIP` lines).
    Go,
    /// jest (`Tests: ...`) and vitest (`Tests  ... (N)`).
    Jest,
    /// node's test runner (`# tests N` / `ℹ tests N`).
    Node,
}

impl Preset {
    pub fn parse_name(name: &str) -> Option<Preset> {
        match name {
            "pytest" => Some(Preset::Pytest),
            "cargo" | "nextest" => Some(Preset::Cargo),
            "go" => Some(Preset::Go),
            "jest" | "vitest" => Some(Preset::Jest),
            "node" => Some(Preset::Node),
            _ => None,
        }
    }

    /// The name `report = "…"` takes.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Pytest => "pytest",
            Preset::Cargo => "cargo",
            Preset::Go => "go",
            Preset::Jest => "jest",
            Preset::Node => "node",
        }
    }

    /// What the runner must print for loopd to count its tests.
    fn hint(self) -> &'static str {
        match self {
            Preset::Pytest => "loopd reads pytest's last summary line (`3 passed, 1 skipped in 0.1s`); a run that stops before it (a collection or conftest error, `-p no:terminal`, `--collect-only`) prints none",
            Preset::Cargo => "loopd reads `cargo test`'s `test result:` lines and `cargo nextest run`'s `Summary [` line; a build error or `--format json` prints neither",
            Preset::Go => "run `go test -v`: without it go prints no per-test `--- PASS`/`--- FAIL` lines to count",
            Preset::Jest => "loopd reads jest's `Tests: …` and vitest's `Tests  … (N)` line; a reporter that prints neither (`--json`, `--silent` with a custom reporter) cannot be counted",
            Preset::Node => "loopd reads `node --test`'s `# tests N` (tap) or `ℹ tests N` (spec) lines; other reporters cannot be counted",
        }
    }

    /// The preset a command line evidently uses.
    pub fn infer(command: &str) -> Option<Preset> {
        let c = command;
        if c.contains("pytest") {
            Some(Preset::Pytest)
        } else if c.contains("cargo test") || c.contains("cargo nextest") {
            Some(Preset::Cargo)
        } else if c.contains("go test") {
            Some(Preset::Go)
        } else if c.contains("jest") || c.contains("vitest") {
            Some(Preset::Jest)
        } else if c.contains("node --test")
            || c.contains("tsx --test")
            || (c.contains("node ") && c.contains(" --test"))
        {
            // `tsx --test` and `node --import tsx --test` run node's own
            // runner on TypeScript, with its output.
            Some(Preset::Node)
        } else {
            None
        }
    }
}

/// How many scripts deep `npm test` is followed (`test` → `test:unit` → …).
const SCRIPT_DEPTH: usize = 4;

impl Preset {
    /// The preset of a command, looking through package scripts: `npm
    /// test`, `yarn test`, `pnpm run test:unit`, `bun run test` run a
    /// script of `package.json`, and that script's command says which
    /// runner it is (`scripts` looks a script up by name). So a script
    /// that runs fewer tests is caught by the count gate too.
    pub fn infer_through_scripts(
        command: &str,
        scripts: &dyn Fn(&str) -> Option<String>,
    ) -> Option<Preset> {
        static SCRIPT: OnceLock<Regex> = OnceLock::new();
        let script = re(
            &SCRIPT,
            r"(?:^|[;&|(\s])(?:npm|pnpm|yarn|bun)\s+(?:(?:run(?:-script)?|--silent|-s)\s+)*([\w:.-]+)",
        );
        let mut command = command.to_owned();
        for _ in 0..SCRIPT_DEPTH {
            if let Some(p) = Preset::infer(&command) {
                return Some(p);
            }
            let next: Vec<String> = script
                .captures_iter(&command)
                .filter_map(|c| {
                    let name = match &c[1] {
                        "t" => "test",
                        n => n,
                    };
                    scripts(name)
                })
                .collect();
            if next.is_empty() {
                return None;
            }
            command = next.join(" && ");
        }
        None
    }
}

/// Does this command look like it runs tests (for `loopd check`'s warning)?
pub fn looks_like_tests(command: &str) -> bool {
    let c = command.to_ascii_lowercase();
    ["test", "spec"].iter().any(|w| c.contains(w))
}

/// What a test run reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Tests that ran to a verdict (passed or failed).
    pub ran: u64,
    pub passed: u64,
    pub failed: u64,
    /// Skipped, ignored, todo — and xfail, a skip in disguise.
    pub skipped: u64,
    /// Deselected or filtered out.
    pub deselected: u64,
    /// Subtests that ran (pytest ≥ 9's `subtests` fixture, or the plugin
    /// before it), counted apart from the tests they run inside.
    #[serde(default)]
    pub subtests: u64,
}

/// Why a runner's output could not be read: the gate cannot count, and
/// says so instead of counting zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    pub preset: Preset,
    /// The last line that looked like the runner's summary but did not
    /// read as one (cut to a readable length), if there was one.
    pub line: Option<String>,
}

impl Unreadable {
    /// What went wrong and what to do about it, in one sentence.
    pub fn explain(&self) -> String {
        let seen = match &self.line {
            Some(l) => format!("the last line like one was `{l}`"),
            None => "no line looked like one".to_owned(),
        };
        format!(
            "no {} summary loopd can read in its output ({seen}); {}",
            self.preset.name(),
            self.preset.hint()
        )
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.explain())
    }
}

/// The longest summary-looking line an [`Unreadable`] quotes.
const QUOTED_LINE: usize = 160;

/// The output without terminal escapes: a runner forced into colour
/// (`--color=yes`, `FORCE_COLOR`, a TTY-faking wrapper) wraps every number
/// of its summary in SGR sequences, and hyperlinks in OSC 8.
pub fn plain(output: &str) -> Cow<'_, str> {
    static ESCAPES: OnceLock<Regex> = OnceLock::new();
    if !output.contains('\u{1b}') {
        return Cow::Borrowed(output);
    }
    let escapes = re(
        &ESCAPES,
        r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]",
    );
    escapes.replace_all(output, "")
}

/// Read the counts from a runner's output (escapes removed first).
pub fn read(preset: Preset, output: &str) -> Result<Counts, Unreadable> {
    let text = plain(output);
    let counts = match preset {
        Preset::Pytest => read_pytest(&text),
        Preset::Cargo => read_cargo(&text),
        Preset::Go => read_go(&text),
        Preset::Jest => read_jest(&text),
        Preset::Node => read_node(&text),
    };
    counts.ok_or_else(|| Unreadable {
        preset,
        line: summary_like(preset, &text),
    })
}

/// The last line of `text` that looks like `preset`'s summary, loosely:
/// what an [`Unreadable`] quotes so that a human sees what loopd saw.
fn summary_like(preset: Preset, text: &str) -> Option<String> {
    static PYTEST: OnceLock<Regex> = OnceLock::new();
    static CARGO: OnceLock<Regex> = OnceLock::new();
    static GO: OnceLock<Regex> = OnceLock::new();
    static JEST: OnceLock<Regex> = OnceLock::new();
    static NODE: OnceLock<Regex> = OnceLock::new();
    let loose = match preset {
        Preset::Pytest => re(
            &PYTEST,
            r"\b(?:passed|failed|errors?|skipped|deselected|no tests ran)\b|^={5,} .* ={5,}$",
        ),
        Preset::Cargo => re(&CARGO, r"test result:|Summary \[|^running \d+ tests?"),
        Preset::Go => re(&GO, r"^(?:ok|FAIL|---|PASS)\b"),
        Preset::Jest => re(&JEST, r"^\s*Tests?\b|\b(?:passed|failed)\b"),
        Preset::Node => re(&NODE, r"^\s*(?:#|ℹ|not ok|ok) "),
    };
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| loose.is_match(l))?;
    let mut quoted: String = line.chars().take(QUOTED_LINE).collect();
    if quoted.len() < line.len() {
        quoted.push('…');
    }
    Some(quoted)
}

/// Read the counts from a runner's output; `None` if there is no summary
/// ([`read`] says why).
pub fn parse(preset: Preset, output: &str) -> Option<Counts> {
    read(preset, output).ok()
}

/// pytest's last summary line: `N label, N label … in 0.1s`, where a label
/// is one word (`passed`) or two (`subtests passed`, pytest ≥ 9), or
/// `no tests ran`. A failed subtest is also counted in `N failed`, though
/// it is not a test: it is taken out again, counted from the parent's
/// `contains N failed subtests` or from the `SUBFAILED` lines (`-rN` with
/// `--tb=no` prints neither; then it stays counted as a failed test).
fn read_pytest(output: &str) -> Option<Counts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    static ITEM: OnceLock<Regex> = OnceLock::new();
    static CONTAINS: OnceLock<Regex> = OnceLock::new();
    static SUBFAILED: OnceLock<Regex> = OnceLock::new();
    let line_re = re(
        &LINE,
        r"^=*\s*((?:\d+ [a-z]+(?: [a-z]+)?)(?:, \d+ [a-z]+(?: [a-z]+)?)*|no tests ran) in [\d.]+s\b.*$",
    );
    let item_re = re(&ITEM, r"^(\d+) ([a-z]+(?: [a-z]+)?)$");
    let caps = output
        .lines()
        .rev()
        .map(str::trim)
        .find_map(|l| line_re.captures(l))?;
    let mut c = Counts::default();
    let mut xpassed = 0;
    let mut errors = 0;
    let mut subtests_failed = 0;
    // pytest's default mode leaves `N subtests passed` out of the line
    // (`-q` prints it): subtests are counted only where it is printed.
    let mut subtests_shown = false;
    for item in caps[1].split(", ") {
        let Some(cap) = item_re.captures(item) else {
            continue;
        };
        let n: u64 = cap[1].parse().ok()?;
        match &cap[2] {
            "passed" => c.passed += n,
            "failed" => c.failed += n,
            "skipped" | "xfailed" => c.skipped += n,
            "deselected" => c.deselected += n,
            "xpassed" => xpassed += n,
            "error" | "errors" => errors += n,
            "subtests passed" | "subtests xpassed" => {
                subtests_shown = true;
                c.subtests += n
            }
            "subtests failed" => {
                subtests_shown = true;
                subtests_failed += n
            }
            label if label.starts_with("subtests ") => subtests_shown = true,
            _ => {}
        }
    }
    // Failed subtests the summary folded into `N failed`.
    let contains = re(&CONTAINS, r"(?m)^contains (\d+) failed subtests?\s*$");
    let from_parents: u64 = contains
        .captures_iter(output)
        .filter_map(|c| c[1].parse::<u64>().ok())
        .sum();
    let subfailed = re(&SUBFAILED, r"(?m)^SUBFAILED\b");
    let from_lines = subfailed.find_iter(output).count() as u64;
    let folded = from_parents.max(from_lines).min(c.failed);
    c.failed = c.failed.saturating_sub(folded);
    if subtests_shown {
        c.subtests += subtests_failed + folded;
    }
    c.passed += xpassed;
    c.failed += errors;
    c.ran = c.passed + c.failed;
    Some(c)
}

fn read_cargo(output: &str) -> Option<Counts> {
    static RESULT: OnceLock<Regex> = OnceLock::new();
    static NEXTEST: OnceLock<Regex> = OnceLock::new();
    static NEXTEST_PART: OnceLock<Regex> = OnceLock::new();
    let result = re(
        &RESULT,
        r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out",
    );
    let mut c = Counts::default();
    let mut found = false;
    for cap in result.captures_iter(output) {
        found = true;
        let n = |i: usize| cap[i].parse::<u64>().unwrap_or(0);
        c.passed += n(1);
        c.failed += n(2);
        c.skipped += n(3);
        c.deselected += n(4);
    }
    if !found {
        let line_re = re(
            &NEXTEST,
            r"(?m)^\s*Summary \[.*?\]\s+(\d+) tests? run: (.*)$",
        );
        let part = re(
            &NEXTEST_PART,
            r"(\d+) (passed|failed|skipped|timed out|flaky)",
        );
        let cap = line_re.captures_iter(output).last()?;
        for p in part.captures_iter(&cap[2]) {
            let n: u64 = p[1].parse().unwrap_or(0);
            match &p[2] {
                "passed" | "flaky" => c.passed += n,
                "failed" | "timed out" => c.failed += n,
                "skipped" => c.skipped += n,
                _ => {}
            }
        }
    }
    c.ran = c.passed + c.failed;
    Some(c)
}

fn read_go(output: &str) -> Option<Counts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line_re = re(&LINE, r"(?m)^\s*--- (PASS|FAIL|SKIP): ");
    let mut c = Counts::default();
    let mut found = false;
    for cap in line_re.captures_iter(output) {
        found = true;
        match &cap[1] {
            "PASS" => c.passed += 1,
            "FAIL" => c.failed += 1,
            _ => c.skipped += 1,
        }
    }
    if !found {
        return None;
    }
    c.ran = c.passed + c.failed;
    Some(c)
}

fn read_jest(output: &str) -> Option<Counts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    static PAIR: OnceLock<Regex> = OnceLock::new();
    let line_re = re(&LINE, r"(?m)^\s*Tests:?\s+(.*)$");
    let pair = re(&PAIR, r"(\d+) (failed|skipped|todo|passed)");
    let line = line_re.captures_iter(output).last()?;
    let mut c = Counts::default();
    for p in pair.captures_iter(&line[1]) {
        let n: u64 = p[1].parse().unwrap_or(0);
        match &p[2] {
            "passed" => c.passed += n,
            "failed" => c.failed += n,
            _ => c.skipped += n,
        }
    }
    c.ran = c.passed + c.failed;
    Some(c)
}

fn read_node(output: &str) -> Option<Counts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line_re = re(
        &LINE,
        r"(?m)^\s*(?:#|ℹ) (pass|fail|skipped|todo|cancelled) (\d+)\s*$",
    );
    let mut c = Counts::default();
    let mut found = false;
    for cap in line_re.captures_iter(output) {
        found = true;
        let n: u64 = cap[2].parse().unwrap_or(0);
        match &cap[1] {
            "pass" => c.passed = n,
            "fail" | "cancelled" => c.failed += n,
            _ => c.skipped += n,
        }
    }
    if !found {
        return None;
    }
    c.ran = c.passed + c.failed;
    Some(c)
}

/// Why `now` is not acceptable against `baseline`, if it is not.
pub fn compare(baseline: &Counts, now: &Counts) -> Option<String> {
    let mut problems = Vec::new();
    if now.ran < baseline.ran {
        problems.push(format!(
            "{} tests ran, {} ran at baseline",
            now.ran, baseline.ran
        ));
    }
    if now.passed < baseline.ran {
        problems.push(format!(
            "{} passed, but {} ran at baseline",
            now.passed, baseline.ran
        ));
    }
    if now.skipped > baseline.skipped {
        problems.push(format!(
            "{} skipped, {} at baseline",
            now.skipped, baseline.skipped
        ));
    }
    if now.deselected > baseline.deselected {
        problems.push(format!(
            "{} deselected, {} at baseline",
            now.deselected, baseline.deselected
        ));
    }
    if now.subtests < baseline.subtests {
        problems.push(format!(
            "{} subtests ran, {} at baseline",
            now.subtests, baseline.subtests
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_summaries() {
        let out =
            "FFF.F.\n=== FAILURES ===\nE  assert 1 passed in 3s\n4 failed, 2 passed in 0.05s\n";
        assert_eq!(
            parse(Preset::Pytest, out),
            Some(Counts {
                ran: 6,
                passed: 2,
                failed: 4,
                skipped: 0,
                deselected: 0,
                subtests: 0,
            })
        );
        let out = "..ss\n2 passed, 2 skipped, 3 deselected, 1 xfailed in 0.02s\n";
        assert_eq!(
            parse(Preset::Pytest, out),
            Some(Counts {
                ran: 2,
                passed: 2,
                failed: 0,
                skipped: 3,
                deselected: 3,
                subtests: 0,
            })
        );
        let out = "========= 6 passed, 1 warning in 0.12s =========\n";
        assert_eq!(parse(Preset::Pytest, out).map(|c| c.passed), Some(6));
        assert_eq!(
            parse(Preset::Pytest, "no tests ran in 0.01s\n"),
            Some(Counts::default())
        );
        assert_eq!(parse(Preset::Pytest, "ImportError: boom\n"), None);
    }

    #[test]
    fn cargo_sums_every_binary() {
        let out = "test result: ok. 35 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.2s\n\
                   test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 4 filtered out; finished in 1s\n";
        assert_eq!(
            parse(Preset::Cargo, out),
            Some(Counts {
                ran: 40,
                passed: 38,
                failed: 2,
                skipped: 1,
                deselected: 4,
                subtests: 0,
            })
        );
        let nextest = "     Summary [   0.123s] 12 tests run: 11 passed, 1 failed, 2 skipped\n";
        assert_eq!(
            parse(Preset::Cargo, nextest),
            Some(Counts {
                ran: 12,
                passed: 11,
                failed: 1,
                skipped: 2,
                deselected: 0,
                subtests: 0,
            })
        );
    }

    #[test]
    fn go_jest_vitest_node() {
        let go = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.00s)\n    --- SKIP: TestC/sub (0.00s)\nFAIL\n";
        assert_eq!(
            parse(Preset::Go, go),
            Some(Counts {
                ran: 2,
                passed: 1,
                failed: 1,
                skipped: 1,
                deselected: 0,
                subtests: 0,
            })
        );
        assert_eq!(parse(Preset::Go, "ok  \texample.com/x\t0.01s\n"), None);
        let jest = "Tests:       1 failed, 2 skipped, 5 passed, 8 total\n";
        assert_eq!(
            parse(Preset::Jest, jest),
            Some(Counts {
                ran: 6,
                passed: 5,
                failed: 1,
                skipped: 2,
                deselected: 0,
                subtests: 0,
            })
        );
        let vitest =
            " Test Files  1 passed (1)\n      Tests  2 failed | 5 passed | 1 skipped (8)\n";
        assert_eq!(
            parse(Preset::Jest, vitest),
            Some(Counts {
                ran: 7,
                passed: 5,
                failed: 2,
                skipped: 1,
                deselected: 0,
                subtests: 0,
            })
        );
        let node =
            "# tests 6\n# suites 0\n# pass 5\n# fail 1\n# cancelled 0\n# skipped 0\n# todo 0\n";
        assert_eq!(
            parse(Preset::Node, node),
            Some(Counts {
                ran: 6,
                passed: 5,
                failed: 1,
                skipped: 0,
                deselected: 0,
                subtests: 0,
            })
        );
    }

    #[test]
    fn the_gate() {
        let base = Counts {
            ran: 6,
            passed: 2,
            failed: 4,
            skipped: 0,
            deselected: 0,
            subtests: 0,
        };
        assert_eq!(
            compare(
                &base,
                &Counts {
                    ran: 6,
                    passed: 6,
                    ..Counts::default()
                }
            ),
            None
        );
        assert_eq!(
            compare(
                &base,
                &Counts {
                    ran: 7,
                    passed: 7,
                    ..Counts::default()
                }
            ),
            None,
            "a new test is fine"
        );
        let shrunk = compare(
            &base,
            &Counts {
                ran: 2,
                passed: 2,
                deselected: 4,
                ..Counts::default()
            },
        )
        .expect("dropped");
        assert!(
            shrunk.contains("2 tests ran, 6 ran at baseline") && shrunk.contains("4 deselected"),
            "{shrunk}"
        );
        assert!(compare(
            &base,
            &Counts {
                ran: 6,
                passed: 5,
                skipped: 1,
                ..Counts::default()
            }
        )
        .is_some());
    }

    const PYTEST9_Q: &str = include_str!("../../fixtures/runner-output/pytest9-q.txt");
    const PYTEST9_Q_COLOR: &str = include_str!("../../fixtures/runner-output/pytest9-q-color.txt");
    const PYTEST9_COLOR_RN: &str =
        include_str!("../../fixtures/runner-output/pytest9-color-rN.txt");
    const PYTEST9_FIXED: &str = include_str!("../../fixtures/runner-output/pytest9-fixed.txt");
    const PYTEST9_FIXED_Q_COLOR: &str =
        include_str!("../../fixtures/runner-output/pytest9-fixed-q-color.txt");

    /// pytest ≥ 9 prints two-word labels (`4 subtests passed`) and, forced
    /// into colour, wraps each number in escapes: both were unreadable, so
    /// the gate was off, or counted an honest fix as a drop.
    #[test]
    fn pytest_nine_subtests_and_colour_are_read() {
        let base = read(Preset::Pytest, PYTEST9_Q).expect("pytest 9 -q is read");
        assert_eq!(
            base,
            Counts {
                ran: 4,
                passed: 2,
                failed: 2,
                skipped: 2,
                deselected: 0,
                subtests: 5,
            },
            "the failed subtest is a subtest, not a fifth test"
        );
        assert_eq!(read(Preset::Pytest, PYTEST9_Q_COLOR), Ok(base), "colour");
        let fixed = read(Preset::Pytest, PYTEST9_FIXED_Q_COLOR).expect("the fix, in colour");
        assert_eq!(
            fixed,
            Counts {
                ran: 4,
                passed: 4,
                failed: 0,
                skipped: 2,
                deselected: 0,
                subtests: 5,
            }
        );
        assert_eq!(compare(&base, &fixed), None, "an honest fix is no drop");

        // The default mode leaves subtests out of the line; `-rN` leaves
        // out the `SUBFAILED` lines, and the parent's failure says it.
        let base = read(Preset::Pytest, PYTEST9_COLOR_RN).expect("default mode, colour, -rN");
        assert_eq!((base.ran, base.failed, base.subtests), (4, 2, 0));
        let fixed = read(Preset::Pytest, PYTEST9_FIXED).expect("the fix, default mode");
        assert_eq!((fixed.ran, fixed.passed), (4, 4));
        assert_eq!(compare(&base, &fixed), None);
    }

    #[test]
    fn fewer_subtests_is_a_drop() {
        let base = read(Preset::Pytest, PYTEST9_Q).expect("read");
        let now = read(
            Preset::Pytest,
            "4 passed, 1 skipped, 1 xfailed, 3 subtests passed in 0.02s\n",
        )
        .expect("read");
        let problem = compare(&base, &now).expect("dropped");
        assert!(
            problem.contains("3 subtests ran, 5 at baseline"),
            "{problem}"
        );
        // A green run's stray `contains N failed subtests` cannot add any.
        let now = read(
            Preset::Pytest,
            "contains 9 failed subtests\n4 passed, 1 skipped, 1 xfailed, 3 subtests passed in 0.02s\n",
        )
        .expect("read");
        assert_eq!(now.subtests, 3);
    }

    #[test]
    fn colour_is_read_for_every_runner() {
        let cargo = "test result: \x1b[32mok\x1b[0m. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        assert_eq!(read(Preset::Cargo, cargo).map(|c| c.passed), Ok(3));
        let nextest = "\x1b[32;1m     Summary\x1b[0m [   0.012s] \x1b[1m2\x1b[0m tests run: \x1b[1m2\x1b[0m \x1b[32;1mpassed\x1b[0m, \x1b[1m0\x1b[0m \x1b[33;1mskipped\x1b[0m\n";
        assert_eq!(read(Preset::Cargo, nextest).map(|c| c.ran), Ok(2));
        let go = "\x1b[32m--- PASS\x1b[0m: TestA (0.00s)\n";
        assert_eq!(read(Preset::Go, go).map(|c| c.passed), Ok(1));
        let vitest = "\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[1m\x1b[32m2 passed\x1b[39m\x1b[22m\x1b[90m (3)\x1b[39m\n";
        assert_eq!(
            read(Preset::Jest, vitest).map(|c| (c.ran, c.failed)),
            Ok((3, 1))
        );
        let link =
            "\x1b]8;;file:///t.py\x1b\\t.py\x1b]8;;\x1b\\ \x1b[32m1 passed\x1b[0m in 0.01s\n";
        assert_eq!(plain(link), "t.py 1 passed in 0.01s\n");
    }

    /// An output the gate cannot read says what loopd looked at and what
    /// the runner must print, instead of counting nothing.
    #[test]
    fn an_unreadable_summary_says_what_was_seen() {
        let e = read(
            Preset::Pytest,
            "ImportError while loading conftest '/r/conftest.py'.\n",
        )
        .expect_err("no summary");
        assert_eq!(e.line, None);
        assert!(e.explain().contains("collection or conftest error"), "{e}");
        let odd = "===== 3 passed, 2 rerun-later in 0.10s =====";
        let e = read(Preset::Pytest, &format!("..\n{odd}\n")).expect_err("odd label");
        assert_eq!(e.line.as_deref(), Some(odd));
        let e = read(Preset::Go, "ok  \texample.com/x\t0.01s\n").expect_err("no -v");
        assert_eq!(e.line.as_deref(), Some("ok  \texample.com/x\t0.01s"));
        assert!(e.explain().contains("go test -v"), "{e}");
        let long = format!("test result: {}", "x".repeat(400));
        let e = read(Preset::Cargo, &long).expect_err("no numbers");
        assert!(e.line.expect("quoted").chars().count() <= QUOTED_LINE + 1);
    }

    #[test]
    fn inference_through_package_scripts() {
        let scripts = |name: &str| match name {
            "test" => Some("npm run test:unit --silent".to_owned()),
            "test:unit" => Some("vitest run".to_owned()),
            "check" => Some("node --test test/".to_owned()),
            "loop" => Some("npm run loop".to_owned()),
            _ => None,
        };
        let infer = |c: &str| Preset::infer_through_scripts(c, &scripts);
        assert_eq!(infer("npm test"), Some(Preset::Jest));
        assert_eq!(infer("npm t"), Some(Preset::Jest));
        assert_eq!(infer("yarn test:unit"), Some(Preset::Jest));
        assert_eq!(infer("npm ci && pnpm run check"), Some(Preset::Node));
        assert_eq!(infer("python3 -m pytest"), Some(Preset::Pytest));
        assert_eq!(infer("npm run lint"), None);
        assert_eq!(infer("npm run loop"), None, "a loop ends");
    }

    #[test]
    fn inference() {
        assert_eq!(Preset::infer("python3 -m pytest -q"), Some(Preset::Pytest));
        assert_eq!(Preset::infer("cargo nextest run"), Some(Preset::Cargo));
        assert_eq!(Preset::infer("npx vitest run"), Some(Preset::Jest));
        assert_eq!(Preset::infer("ruff check ."), None);
        assert_eq!(
            Preset::infer("tsx --test tests/*.test.ts"),
            Some(Preset::Node)
        );
        assert_eq!(
            Preset::infer("node --import tsx --test tests/"),
            Some(Preset::Node)
        );
        assert!(looks_like_tests("make test"));
    }
}
