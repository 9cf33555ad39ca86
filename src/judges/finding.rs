//! What the judges' deterministic layers say, shared by the gates that say
//! it: a [`Finding`] (a gate's rejection, a line of the next prompt), the
//! pre-critic's [`Check`] names, and what a test file is ([`test_globs`]).
//! Its own module so that the tamper gates and the pre-critic both sit on
//! it instead of on each other.

use serde::{Deserialize, Serialize};

use crate::outcome::Reason;

/// What a test file is, in languages loopd protects but does not read
/// (the others are each language's own, [`crate::lang::Language::tests`]).
const OTHER_TEST_GLOBS: &[&str] = &[
    // Java / Kotlin
    "**/src/test/**",
    "**/*{Test,Tests,IT}.{java,kt}",
];

/// What a test file is — what exists at BASE_REF and matches is protected:
/// every language's own test-file globs, and those of languages loopd
/// protects without reading them.
pub fn test_globs() -> impl Iterator<Item = &'static str> {
    crate::lang::LANGUAGES
        .iter()
        .flat_map(|l| l.tests.iter().copied())
        .chain(OTHER_TEST_GLOBS.iter().copied())
}

/// Whether `path` is a test file ([`test_globs`]).
pub fn is_test_file(path: &str) -> bool {
    static SET: std::sync::OnceLock<globset::GlobSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let mut b = globset::GlobSetBuilder::new();
        for g in test_globs() {
            b.add(globset::Glob::new(g).expect("the test globs are valid"));
        }
        b.build().expect("the test globs build")
    })
    .is_match(path)
}

/// One finding of a deterministic gate: it rejects the attempt and becomes a
/// line of the next prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub reason: Reason,
    pub path: String,
    pub line: Option<u32>,
    /// The rubric rule the finding breaks, when one says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<u32>,
    /// The pre-critic's check that found it (pre-critic findings only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Check>,
    pub problem: String,
    pub fix: String,
}

impl Finding {
    /// `path:line (rule N, gate reason): problem — fix: ...`
    pub fn render(&self) -> String {
        let at = match self.line {
            Some(l) => format!("{}:{l}", self.path),
            None => self.path.clone(),
        };
        let rule = self.rule.map(|r| format!("rule {r}, ")).unwrap_or_default();
        format!(
            "{at} ({rule}gate {}): {} — fix: {}",
            self.reason, self.problem, self.fix
        )
    }
}

/// One check of the pre-critic; the name is its table in `[precheck]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    DebugOutput,
    CommentedOutCode,
    SwallowedError,
    DriveByRename,
    /// Late attempts only (not in [`Check::ALL`], not set in the rubric):
    /// added code that branches on being under test
    /// ([`test_special_casing`]).
    TestSpecialCasing,
}

impl Check {
    pub const ALL: [Check; 4] = [
        Check::DebugOutput,
        Check::CommentedOutCode,
        Check::SwallowedError,
        Check::DriveByRename,
    ];

    /// The name in `[precheck]` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Check::DebugOutput => "debug_output",
            Check::CommentedOutCode => "commented_out_code",
            Check::SwallowedError => "swallowed_error",
            Check::DriveByRename => "drive_by_rename",
            Check::TestSpecialCasing => "test_special_casing",
        }
    }

    pub fn parse_name(name: &str) -> Option<Check> {
        Check::ALL.into_iter().find(|c| c.name() == name)
    }

    /// What a rule's text says when it covers this check.
    pub(crate) fn rule_words(self) -> &'static str {
        match self {
            Check::DebugOutput => r"(?i)\b(debug\w*|prints?|println!?|dbg!|console\.log)\b",
            Check::CommentedOutCode => r"(?i)comment(ed)?[- ]out|\bcommented\b",
            Check::SwallowedError => r"(?i)\b(swallow\w*|errors?|exceptions?|failures?)\b",
            Check::DriveByRename => r"(?i)\b(renam\w*|refactor\w*|drive-by|scope)\b",
            Check::TestSpecialCasing => r"(?i)\btests?\b.*\b(delet|skip|weaken|special)",
        }
    }
}
