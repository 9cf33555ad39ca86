//! The test-count gate: a green goal step must have run and passed at least
//! as many tests as *ran* at baseline, with no more skipped or deselected.
//!
//! This catches what no file-level rule can: deselecting in a build file,
//! filtering in a new `conftest.py`, or shrinking the suite through any file
//! that is not itself protected. Counts come from the test runner's own
//! summary; each goal step names a preset (or one is inferred from its
//! command).

use std::sync::OnceLock;

use regex::Regex;
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
        } else if c.contains("node --test") {
            Some(Preset::Node)
        } else {
            None
        }
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
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("a valid built-in regex"))
}

/// Read the counts from a runner's output; `None` if there is no summary.
pub fn parse(preset: Preset, output: &str) -> Option<Counts> {
    match preset {
        Preset::Pytest => parse_pytest(output),
        Preset::Cargo => parse_cargo(output),
        Preset::Go => parse_go(output),
        Preset::Jest => parse_jest(output),
        Preset::Node => parse_node(output),
    }
}

fn parse_pytest(output: &str) -> Option<Counts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    static PAIR: OnceLock<Regex> = OnceLock::new();
    let line_re = re(
        &LINE,
        r"^=*\s*((?:\d+ \w+(?:, )?)+|no tests ran) in [\d.]+s\b.*$",
    );
    let pair_re = re(&PAIR, r"(\d+) (\w+)");
    let line = output
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| line_re.is_match(l))?;
    let mut c = Counts::default();
    let mut xpassed = 0;
    let mut errors = 0;
    for cap in pair_re.captures_iter(line) {
        let n: u64 = cap[1].parse().ok()?;
        match &cap[2] {
            "passed" => c.passed += n,
            "failed" => c.failed += n,
            "skipped" | "xfailed" => c.skipped += n,
            "deselected" => c.deselected += n,
            "xpassed" => xpassed += n,
            "error" | "errors" => errors += n,
            _ => {}
        }
    }
    c.passed += xpassed;
    c.failed += errors;
    c.ran = c.passed + c.failed;
    Some(c)
}

fn parse_cargo(output: &str) -> Option<Counts> {
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

fn parse_go(output: &str) -> Option<Counts> {
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

fn parse_jest(output: &str) -> Option<Counts> {
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

fn parse_node(output: &str) -> Option<Counts> {
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
                deselected: 0
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
                deselected: 3
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
                deselected: 4
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
                deselected: 0
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
                deselected: 0
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
                deselected: 0
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
                deselected: 0
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
                deselected: 0
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

    #[test]
    fn inference() {
        assert_eq!(Preset::infer("python3 -m pytest -q"), Some(Preset::Pytest));
        assert_eq!(Preset::infer("cargo nextest run"), Some(Preset::Cargo));
        assert_eq!(Preset::infer("npx vitest run"), Some(Preset::Jest));
        assert_eq!(Preset::infer("ruff check ."), None);
        assert!(looks_like_tests("make test"));
    }
}
