//! The rubric a lead writes: the rules the critic judges a change by.
//!
//! A rubric is a TOML file with a `name`, one to eight `[[rule]]` tables
//! (`id`, `text`) and an optional `context`. The critic is told to judge only
//! these rules, so findings stay concrete enough to become the next prompt.

use std::path::{Path, PathBuf};

use serde::Deserialize;

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
        Ok(Rubric {
            name,
            context: raw
                .context
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty()),
            rules,
            source,
            text: text.to_owned(),
        })
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
