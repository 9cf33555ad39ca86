//! Results from a channel loopd owns: where a runner can write a
//! machine-readable report, loopd asks for one at a path outside the tree
//! (pytest's `--junitxml`, node's junit reporter to a destination) and
//! judges **test ids** from it — each test that ran at BASE_REF still
//! runs, each that passed still passes — instead of a summary line read
//! from stdout, which the code under test writes to as well.
//!
//! What this does not close: code that runs inside the runner's own
//! process (a test module, the library it imports) can still find the
//! report's path and write it, or patch the reporter. Held-out tests are
//! the layer that catches a forged green: their ids are not the agent's to
//! know, and their run's report is read the same way (`docs/judging.md`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::judges::testcount::{Counts, Preset};

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    Failed,
    /// An `<error>`: the test did not get to run its body (a collection
    /// error — a module that does not import at BASE_REF — or a fixture
    /// that failed). Failing, but not a test that ran.
    Error,
    Skipped,
}

impl Verdict {
    /// Whether the report counts it against the run.
    pub fn failing(self) -> bool {
        matches!(self, Verdict::Failed | Verdict::Error)
    }
}

/// Each test of a report by its id (`classname::name`).
pub type Results = BTreeMap<String, Verdict>;

/// The largest report loopd reads.
pub const MAX_REPORT: u64 = 64 << 20;

/// The variables that make `preset`'s runner write a junit report to
/// `path` besides what it prints (`inherited`: the value loopd's own
/// environment gives the variable, kept). `None`: the runner has no such
/// channel loopd drives by the environment (go, cargo, jest: their
/// summaries are read from stdout, as `docs/judging.md` says).
pub fn channel(
    preset: Preset,
    path: &Path,
    inherited: &dyn Fn(&str) -> Option<String>,
) -> Option<Vec<(String, String)>> {
    let path = path.display();
    let (var, ours) = match preset {
        Preset::Pytest => ("PYTEST_ADDOPTS", format!("--junitxml={path}")),
        // The junit reporter to the file, and the spec reporter to stdout
        // as before (the first `--test-reporter` replaces the default).
        Preset::Node => (
            "NODE_OPTIONS",
            format!("--test-reporter=junit --test-reporter-destination={path} --test-reporter=spec --test-reporter-destination=stdout"),
        ),
        Preset::Cargo | Preset::Go | Preset::Jest => return None,
    };
    let value = match inherited(var) {
        Some(v) if !v.trim().is_empty() => format!("{v} {ours}"),
        _ => ours,
    };
    Some(vec![(var.to_owned(), value)])
}

/// Read a junit report: every `<testcase>`, its id from its `classname`
/// and `name`, failed when it holds a `<failure>` or `<error>`, skipped
/// when it holds a `<skipped>`. `None` when the text holds no test case
/// loopd can read (an empty run is `Some` of nothing only when the report
/// has a `<testsuite` element).
pub fn parse_junit(xml: &str) -> Option<Results> {
    let mut out = Results::new();
    let mut rest = xml;
    let mut suites = xml.contains("<testsuite");
    while let Some(start) = rest.find("<testcase") {
        let after = &rest[start + "<testcase".len()..];
        // `<testcases` would be another element.
        if !after.starts_with(|c: char| c.is_whitespace() || c == '>' || c == '/') {
            rest = after;
            continue;
        }
        let end = after.find('>')?;
        let head = &after[..end];
        let self_closing = head.ends_with('/');
        let body = if self_closing {
            ""
        } else {
            let close = after.find("</testcase>")?;
            &after[end..close]
        };
        let attr = |name: &str| attribute(head, name);
        let name = attr("name")?;
        let id = match attr("classname").filter(|c| !c.is_empty()) {
            Some(class) => format!("{class}::{name}"),
            None => name,
        };
        let verdict = if body.contains("<failure") {
            Verdict::Failed
        } else if body.contains("<error") {
            Verdict::Error
        } else if body.contains("<skipped") {
            Verdict::Skipped
        } else {
            Verdict::Passed
        };
        // A name met twice (a test's call and its teardown, a rerun): the
        // worse verdict stands.
        out.entry(id)
            .and_modify(|v| {
                if verdict.failing() && !v.failing() {
                    *v = verdict
                }
            })
            .or_insert(verdict);
        suites = true;
        rest = &after[end..];
    }
    suites.then_some(out)
}

/// An attribute's value in a tag's head, entities decoded.
fn attribute(head: &str, name: &str) -> Option<String> {
    let mut search = head;
    loop {
        let at = search.find(name)?;
        let before = search[..at].chars().last();
        let after = &search[at + name.len()..];
        let after_trim = after.trim_start();
        if before.is_some_and(char::is_whitespace) && after_trim.starts_with('=') {
            let value = after_trim[1..].trim_start();
            let quote = value.chars().next()?;
            if quote != '"' && quote != '\'' {
                return None;
            }
            let value = &value[1..];
            let close = value.find(quote)?;
            return Some(unescape(&value[..close]));
        }
        search = after;
    }
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#10;", "\n")
        .replace("&amp;", "&")
}

/// A report's counts, from its ids.
pub fn counts(results: &Results) -> Counts {
    let mut c = Counts::default();
    for v in results.values() {
        match v {
            Verdict::Passed => {
                c.ran += 1;
                c.passed += 1;
            }
            Verdict::Failed => {
                c.ran += 1;
                c.failed += 1;
            }
            Verdict::Error => c.failed += 1,
            Verdict::Skipped => c.skipped += 1,
        }
    }
    c
}

/// What the ids of `now` break of `base`'s: each test that ran at
/// BASE_REF that no longer runs (gone, or skipped), each that passed and
/// no longer passes. An id that was an error at BASE_REF (a module that
/// did not import: its tests were not known yet) need not appear again. At most `max` ids are named per kind; the counts say
/// how many.
pub fn compare(base: &Results, now: &Results, max: usize) -> Vec<String> {
    let mut gone = Vec::new();
    let mut broke = Vec::new();
    for (id, was) in base {
        let ran = matches!(was, Verdict::Passed | Verdict::Failed);
        match now.get(id) {
            None | Some(Verdict::Skipped) if ran => gone.push(id.as_str()),
            Some(v) if v.failing() && *was == Verdict::Passed => broke.push(id.as_str()),
            _ => {}
        }
    }
    let name = |ids: &[&str]| {
        let shown: Vec<&str> = ids.iter().take(max).copied().collect();
        let more = ids.len().saturating_sub(max);
        match more {
            0 => shown.join(", "),
            n => format!("{} and {n} more", shown.join(", ")),
        }
    };
    let mut out = Vec::new();
    if !gone.is_empty() {
        out.push(format!(
            "{} test(s) that ran at BASE_REF no longer run: {}",
            gone.len(),
            name(&gone)
        ));
    }
    if !broke.is_empty() {
        out.push(format!(
            "{} test(s) that passed at BASE_REF fail: {}",
            broke.len(),
            name(&broke)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTEST: &str = r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="3"><testcase classname="tests.test_rechnung" name="test_net_total[a&amp;b]" time="0.001" /><testcase classname="tests.test_rechnung" name="test_gross" time="0.001"><failure message="assert 1 == 2">E assert 1 == 2</failure></testcase><testcase classname="tests.test_rechnung" name="test_later" time="0.000"><skipped type="pytest.skip" message="later">skip</skipped></testcase></testsuite></testsuites>"#;

    const NODE: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<testsuites>\n\t<testcase name=\"adds\" time=\"0.000800\" classname=\"test\"/>\n\t<testcase name=\"subtracts\" time=\"0.000300\" classname=\"test\">\n\t\t<failure type=\"testCodeFailure\" message=\"Expected values to be strictly equal\">\n[Error]\n\t\t</failure>\n\t</testcase>\n</testsuites>\n";

    #[test]
    fn pytest_and_node_reports_read_as_ids() {
        let r = parse_junit(PYTEST).expect("pytest's report");
        assert_eq!(r.len(), 3);
        assert_eq!(
            r["tests.test_rechnung::test_net_total[a&b]"],
            Verdict::Passed
        );
        assert_eq!(r["tests.test_rechnung::test_gross"], Verdict::Failed);
        assert_eq!(r["tests.test_rechnung::test_later"], Verdict::Skipped);
        let c = counts(&r);
        assert_eq!((c.ran, c.passed, c.failed, c.skipped), (2, 1, 1, 1));
        let n = parse_junit(NODE).expect("node's report");
        assert_eq!(n["test::adds"], Verdict::Passed);
        assert_eq!(n["test::subtracts"], Verdict::Failed);
        assert_eq!(parse_junit("not xml at all"), None);
        assert_eq!(
            parse_junit("<testsuites></testsuites>"),
            Some(Results::new())
        );
        // Truncated: never a panic.
        for cut in 0..PYTEST.len() {
            if PYTEST.is_char_boundary(cut) {
                let _ = parse_junit(&PYTEST[..cut]);
            }
        }
    }

    #[test]
    fn ids_that_ran_must_run_and_ids_that_passed_must_pass() {
        let base = parse_junit(PYTEST).expect("base");
        assert!(compare(&base, &base, 5).is_empty());
        let mut now = base.clone();
        now.remove("tests.test_rechnung::test_net_total[a&b]");
        now.insert("tests.test_rechnung::test_gross".into(), Verdict::Passed);
        // A green run with more tests: one of BASE_REF's is gone.
        now.insert("tests.test_new::test_x".into(), Verdict::Passed);
        now.insert("tests.test_new::test_y".into(), Verdict::Passed);
        let p = compare(&base, &now, 5);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("test_net_total"), "{p:?}");
        // A collection error at BASE_REF is not a test that must still run.
        let mut errored = base.clone();
        errored.insert("tests.test_more".into(), Verdict::Error);
        assert!(compare(&errored, &base, 5).is_empty());
        let mut skipped = base.clone();
        skipped.insert("tests.test_rechnung::test_gross".into(), Verdict::Skipped);
        assert!(compare(&base, &skipped, 5)[0].contains("no longer run"));
    }

    #[test]
    fn the_channel_keeps_what_the_lead_passed() {
        let path = Path::new("/r/1.xml");
        let v = channel(Preset::Pytest, path, &|_| {
            Some("-p no:cacheprovider".into())
        })
        .expect("pytest");
        assert_eq!(v[0].1, "-p no:cacheprovider --junitxml=/r/1.xml");
        assert!(channel(Preset::Cargo, path, &|_| None).is_none());
        let n = channel(Preset::Node, path, &|_| None).expect("node");
        assert!(n[0].1.contains("--test-reporter-destination=/r/1.xml"));
    }
}
