//! The rubric a lead writes: the rules the critic judges a change by.
//!
//! A rubric is a TOML file with a `name`, one to eight `[[rule]]` tables
//! (`id`, `text`) and an optional `context`. The critic is told to judge only
//! these rules, so findings stay concrete enough to become the next prompt.
//!
//! An optional `[precheck]` table tunes the pre-critic
//! ([`crate::judges::precheck`]), the deterministic checks that enforce some
//! of these rules before the critic is asked: `enabled = false` turns it
//! off; `[precheck.<check>]` takes `enabled`, `rule` (the id it enforces,
//! inferred from the rule texts when absent) and `allow` (path globs). It
//! lives in the rubric because the rubric is the lead's, protected and
//! checksummed like the rules it tunes.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::judges::finding::Check;
use crate::judges::precheck::{self, CheckSettings, Plan, PrecheckSettings};

/// A rubric file that cannot be used, named with its file and field.
pub type RubricError = crate::util::FileError;

/// The rubric used when `loopd.toml` names none: the four rules of the
/// reference critic loop.
pub const DEFAULT_RUBRIC: &str = include_str!("../rubrics/default.toml");

/// Where a rubric came from, for messages and for the checksum guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RubricSource {
    Embedded,
    File(PathBuf),
}

impl std::fmt::Display for RubricSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RubricSource::Embedded => f.write_str("<embedded default rubric>"),
            RubricSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RubricFile {
    name: Option<String>,
    context: Option<String>,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleFile>,
    precheck: Option<PrecheckFile>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrecheckFile {
    enabled: Option<bool>,
    debug_output: Option<CheckFile>,
    commented_out_code: Option<CheckFile>,
    swallowed_error: Option<CheckFile>,
    drive_by_rename: Option<CheckFile>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckFile {
    enabled: Option<bool>,
    rule: Option<i64>,
    allow: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    id: Option<i64>,
    text: Option<String>,
}

/// One rule the critic judges.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rule {
    pub id: u32,
    pub text: String,
}

/// A validated rubric.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rubric {
    pub name: String,
    pub context: Option<String>,
    pub rules: Vec<Rule>,
    /// `[precheck]` as written.
    #[serde(skip)]
    pub precheck: PrecheckSettings,
    /// What the pre-critic runs: each check on (with its rule) or off (why).
    #[serde(rename = "precheck")]
    pub precheck_plan: Plan,
    #[serde(skip)]
    pub source: RubricSource,
    /// The exact bytes the rubric was parsed from (for the checksum guard).
    #[serde(skip)]
    pub text: String,
}

/// The most rules a rubric may carry: more than this and the critic's
/// findings stop being concrete.
pub const MAX_RULES: usize = 8;

impl Rubric {
    pub fn embedded_default() -> Rubric {
        Rubric::parse(DEFAULT_RUBRIC, RubricSource::Embedded)
            .expect("the embedded default rubric is valid (unit-tested)")
    }

    pub fn load(path: &Path) -> Result<Rubric, RubricError> {
        let text = std::fs::read_to_string(path).map_err(|source| RubricError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        Rubric::parse(&text, RubricSource::File(path.to_path_buf()))
    }

    pub fn parse(text: &str, source: RubricSource) -> Result<Rubric, RubricError> {
        let file_name = PathBuf::from(source.to_string());
        let invalid = |field: String, expected: &str, found: String| RubricError::Invalid {
            file: file_name.clone(),
            field,
            expected: expected.to_owned(),
            found,
        };
        let raw: RubricFile = toml::from_str(text).map_err(|e| RubricError::Parse {
            file: file_name.clone(),
            message: e.to_string(),
        })?;
        let name = match raw.name {
            Some(n) if !n.trim().is_empty() => n,
            Some(_) => return Err(invalid("name".into(), "a non-empty string", "\"\"".into())),
            None => {
                return Err(invalid(
                    "name".into(),
                    "a non-empty string",
                    "nothing".into(),
                ))
            }
        };
        if raw.rules.is_empty() || raw.rules.len() > MAX_RULES {
            return Err(invalid(
                "rule".into(),
                "one to eight [[rule]] tables",
                format!("{} rules", raw.rules.len()),
            ));
        }
        let mut rules = Vec::with_capacity(raw.rules.len());
        for (i, r) in raw.rules.into_iter().enumerate() {
            let at = |f: &str| format!("rule[{i}].{f}");
            let id = match r.id {
                Some(id) if id >= 1 && id <= u32::MAX as i64 => id as u32,
                Some(id) => return Err(invalid(at("id"), "a positive integer", id.to_string())),
                None => return Err(invalid(at("id"), "a positive integer", "nothing".into())),
            };
            let text = match r.text {
                Some(t) if !t.trim().is_empty() => t.trim().to_owned(),
                _ => return Err(invalid(at("text"), "a non-empty string", "nothing".into())),
            };
            if rules.iter().any(|existing: &Rule| existing.id == id) {
                return Err(invalid(
                    at("id"),
                    "an id no other rule uses",
                    format!("{id} (already used)"),
                ));
            }
            rules.push(Rule { id, text });
        }
        let precheck = match raw.precheck {
            None => PrecheckSettings::default(),
            Some(p) => {
                let mut settings = PrecheckSettings {
                    enabled: p.enabled.unwrap_or(true),
                    ..PrecheckSettings::default()
                };
                let tables = [
                    (Check::DebugOutput, p.debug_output),
                    (Check::CommentedOutCode, p.commented_out_code),
                    (Check::SwallowedError, p.swallowed_error),
                    (Check::DriveByRename, p.drive_by_rename),
                ];
                for (check, table) in tables {
                    let Some(t) = table else { continue };
                    let at = |f: &str| format!("precheck.{}.{f}", check.name());
                    let rule = match t.rule {
                        None => None,
                        Some(id) if rules.iter().any(|r| i64::from(r.id) == id) => Some(id as u32),
                        Some(id) => {
                            return Err(invalid(
                                at("rule"),
                                "the id of one of the rubric's [[rule]] tables",
                                id.to_string(),
                            ))
                        }
                    };
                    let allow = t.allow.unwrap_or_default();
                    for (i, g) in allow.iter().enumerate() {
                        if let Err(e) = precheck::valid_glob(g) {
                            return Err(invalid(
                                format!("{}[{i}]", at("allow")),
                                "a path glob such as `scripts/**`",
                                format!("`{g}` ({e})"),
                            ));
                        }
                    }
                    settings.checks.insert(
                        check,
                        CheckSettings {
                            enabled: t.enabled.unwrap_or(true),
                            rule,
                            allow,
                        },
                    );
                }
                settings
            }
        };
        let precheck_plan = Plan::new(&precheck, rules.iter().map(|r| (r.id, r.text.as_str())));
        Ok(Rubric {
            name,
            context: raw
                .context
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty()),
            rules,
            precheck,
            precheck_plan,
            source,
            text: text.to_owned(),
        })
    }

    /// The rule about tests (deleted, skipped, weakened), which the tamper
    /// gates enforce, if the rubric has one.
    pub fn tests_rule(&self) -> Option<u32> {
        precheck::tests_rule(self.rules.iter().map(|r| (r.id, r.text.as_str())))
    }

    /// The rules as the critic sees them, one per line.
    pub fn render_rules(&self) -> String {
        self.rules
            .iter()
            .map(|r| format!("{}. {}", r.id, r.text))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_has_the_four_reference_rules() {
        let r = Rubric::embedded_default();
        assert_eq!(r.rules.len(), 4);
        assert_eq!(r.rules[0].text, "No test was deleted, skipped or weakened.");
    }

    #[test]
    fn shipped_examples_are_valid() {
        for f in [
            "rubrics/python.toml",
            "rubrics/rust.toml",
            "rubrics/default.toml",
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
            let r = Rubric::load(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert!(!r.rules.is_empty());
        }
    }

    #[test]
    fn precheck_rules_follow_each_shipped_rubric() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (file, want, tests) in [
            (
                "rubrics/default.toml",
                [Some(2), Some(2), Some(3), Some(4)],
                Some(1),
            ),
            (
                "rubrics/python.toml",
                [Some(4), Some(4), Some(3), Some(5)],
                Some(1),
            ),
            (
                "rubrics/rust.toml",
                [Some(4), Some(4), Some(2), Some(5)],
                Some(1),
            ),
        ] {
            let r = Rubric::load(&root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(Check::ALL.map(|c| r.precheck_plan.rule(c)), want, "{file}");
            assert_eq!(r.tests_rule(), tests, "{file}");
        }
    }

    #[test]
    fn precheck_table_is_validated_and_applied() {
        let base = "name = \"x\"\n[[rule]]\nid = 1\ntext = \"No debug prints.\"\n[[rule]]\nid = 2\ntext = \"Nothing else.\"\n";
        let r = Rubric::parse(
            &format!("{base}[precheck.debug_output]\nrule = 2\nallow = [\"scripts/**\"]\n[precheck.swallowed_error]\nenabled = false\n"),
            RubricSource::Embedded,
        )
        .expect("valid");
        assert_eq!(r.precheck_plan.rule(Check::DebugOutput), Some(2));
        assert_eq!(r.precheck_plan.rule(Check::SwallowedError), None);
        assert_eq!(r.precheck_plan.checks[0].allow, ["scripts/**"]);
        let off = Rubric::parse(
            &format!("{base}[precheck]\nenabled = false\n"),
            RubricSource::Embedded,
        )
        .expect("valid");
        assert!(Check::ALL
            .iter()
            .all(|c| off.precheck_plan.rule(*c).is_none()));
        let e = Rubric::parse(
            &format!("{base}[precheck.debug_output]\nrule = 9\n"),
            RubricSource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("precheck.debug_output.rule") && e.contains('9'),
            "{e}"
        );
        let e = Rubric::parse(
            &format!("{base}[precheck.debug_output]\nallow = [\"a/[\"]\n"),
            RubricSource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("precheck.debug_output.allow[0]"), "{e}");
        let e = Rubric::parse(
            &format!("{base}[precheck.debug_prints]\nenabled = false\n"),
            RubricSource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("debug_prints"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = Rubric::parse(
            "name = \"x\"\n[[rule]]\nid = 0\ntext = \"a\"\n",
            RubricSource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rule[0].id"), "{e}");
        let e = Rubric::parse("name = \"x\"\n", RubricSource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`rule`") && e.contains("one to eight"), "{e}");
        let e = Rubric::parse(
            "name = \"x\"\n[[rule]]\nid = 1\ntext = \"a\"\n[[rule]]\nid = 1\ntext = \"b\"\n",
            RubricSource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("rule[1].id") && e.contains("already used"),
            "{e}"
        );
        let e = Rubric::parse("name = \"x\"\nrules = 3\n", RubricSource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `rules`"), "{e}");
    }
}
