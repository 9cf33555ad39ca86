//! `loopd export`: many jobs beyond one machine. One jobs file — a list of
//! (repository, task, goal test, caps) — becomes a Kubernetes Indexed Job
//! ([`kubernetes`]) or a GitHub Actions matrix workflow
//! ([`github_actions`]); each job of it is one `loopd run` there.
//!
//! What makes retries safe is the job id: derived from the file's bytes and
//! the job's index ([`job_id`]), the same file always names the same jobs,
//! so a retried pod or a re-run workflow passes the same `--job-id` and
//! `loopd run` continues that job's journal (or, when it ended, prints its
//! summary and exits with its code) instead of starting — and billing —
//! again. A changed file is a new set of jobs.
//!
//! Both exporters build each job's command line with [`run_command`], so
//! the two cannot drift in how a task or a goal is quoted.

pub mod github_actions;
pub mod kubernetes;
pub mod yaml;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The most jobs one file may hold. A Kubernetes Indexed Job with a
/// per-index backoff limit takes at most 100 000 completions, and a
/// workflow of 40 matrix jobs is already unwieldy; past ten thousand a
/// file is more likely a mistake (a generator in a loop) than a plan.
pub const MAX_JOBS: usize = 10_000;

/// How many hex digits of the file's sha256 an id carries: 40 bits, so two
/// different files of one operator practically never share ids.
const HASH_HEX: usize = 10;

/// The keys a `[[job]]` table takes (`[defaults]` takes all but `repo`).
/// A unit test keeps this equal to what serde accepts.
pub const JOB_KEYS: &[&str] = &[
    "repo",
    "ref",
    "task",
    "goal",
    "rubric",
    "agent",
    "budget_usd",
    "max_attempts",
    "max_turns",
    "max_tokens",
    "timeout",
];

/// Why a jobs file cannot be exported. Every variant names the file; all
/// are the operator's to fix, and the CLI exits 2 on them.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot read the jobs file `{}`: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("the jobs file `{}` is not valid {format}: {message}", file.display())]
    Syntax {
        file: PathBuf,
        format: &'static str,
        message: String,
    },
    #[error("the jobs file `{}`: {at}: unknown key `{key}`", file.display())]
    UnknownKey {
        file: PathBuf,
        /// `[defaults]`, `job 3 (the 4th [[job]])`, or `the top level`.
        at: String,
        key: String,
    },
    #[error("the jobs file `{}`: {at}: `{field}` {problem}", file.display())]
    Invalid {
        file: PathBuf,
        at: String,
        field: &'static str,
        problem: String,
    },
    #[error("the jobs file `{}` holds no `[[job]]`", file.display())]
    NoJobs { file: PathBuf },
    #[error("the jobs file `{}` holds {count} jobs; at most {MAX_JOBS} are exported at once", file.display())]
    TooMany { file: PathBuf, count: usize },
    /// A setting of the export itself (`--name`, `--image`, …).
    #[error("{option}: {problem}")]
    Option {
        option: &'static str,
        problem: String,
    },
    /// What the target cannot hold (a ConfigMap's size, a text GitHub
    /// would evaluate as an expression).
    #[error("the jobs file `{}`: {problem}", file.display())]
    Target { file: PathBuf, problem: String },
}

impl ExportError {
    /// A `hint:` line: what to write instead.
    pub fn hint(&self) -> Option<String> {
        match self {
            ExportError::UnknownKey { key, at, .. } => {
                let keys: Vec<&str> = if at == TOP_LEVEL {
                    vec!["defaults", "job"]
                } else if at == DEFAULTS {
                    JOB_KEYS.iter().copied().filter(|k| *k != "repo").collect()
                } else {
                    JOB_KEYS.to_vec()
                };
                let guess = closest(key, &keys)
                    .map(|k| format!("did you mean `{k}`? "))
                    .unwrap_or_default();
                Some(format!("{guess}the keys here: {}", keys.join(", ")))
            }
            ExportError::Syntax { .. } | ExportError::NoJobs { .. } => Some(
                "a jobs file is `[[job]]` tables with `repo`, `task` and `goal = [\"CMD\", ...]`, and an optional `[defaults]`; see docs/many-repositories.md".into(),
            ),
            ExportError::TooMany { .. } => {
                Some("split it into several files, each exported on its own".into())
            }
            ExportError::Read { .. }
            | ExportError::Invalid { .. }
            | ExportError::Option { .. }
            | ExportError::Target { .. } => None,
        }
    }
}

const TOP_LEVEL: &str = "the top level";
const DEFAULTS: &str = "[defaults]";

/// Where in the file a job is, as a person counts and as the ids count.
fn at_job(index: usize) -> String {
    let n = index + 1;
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("job {index} (the {n}{suffix} [[job]])")
}

/// The known key nearest to a misspelt one, if it is near at all (one or
/// two edits, or one is a prefix of the other).
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = if ca == *cb {
                    prev
                } else {
                    1 + prev.min(row[j]).min(cur)
                };
                prev = cur;
            }
        }
        row[b.len()]
    }
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (distance(&key, k), *k))
        .filter(|(d, k)| *d <= 2 || k.starts_with(&key) || key.starts_with(k))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// One `[[job]]` table, or `[defaults]`, as written. `deny_unknown_fields`
/// is the last word on the keys; [`check_keys`] runs first only to name
/// the job and suggest the key meant.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    repo: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    task: Option<String>,
    goal: Option<Vec<String>>,
    rubric: Option<String>,
    agent: Option<String>,
    budget_usd: Option<f64>,
    max_attempts: Option<i64>,
    max_turns: Option<i64>,
    max_tokens: Option<i64>,
    timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: RawJob,
    #[serde(default)]
    job: Vec<RawJob>,
}

/// One job, validated, with its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its place in the file, from 0 (a Kubernetes `$JOB_COMPLETION_INDEX`).
    pub index: usize,
    /// `j<10 hex of the file's sha256>-<index>`: see [`job_id`].
    pub id: String,
    /// A clone URL, or an absolute path on the node or runner.
    pub repo: String,
    /// What to check out; `None`: the remote's default branch.
    pub git_ref: Option<String>,
    pub task: String,
    pub goal: Vec<String>,
    /// A path inside the repository.
    pub rubric: Option<String>,
    pub agent: Option<String>,
    pub budget_usd: Option<f64>,
    pub max_attempts: Option<u64>,
    pub max_turns: Option<u64>,
    pub max_tokens: Option<u64>,
    pub timeout: Option<String>,
}

/// A jobs file, read and validated.
#[derive(Debug, Clone)]
pub struct JobsFile {
    pub path: PathBuf,
    /// The sha256 of its bytes, in hex.
    pub sha256: String,
    pub jobs: Vec<Job>,
}

impl JobsFile {
    /// The part of the hash the ids carry (and the exporters name their
    /// Kubernetes objects after).
    pub fn short_hash(&self) -> &str {
        &self.sha256[..HASH_HEX]
    }
}

/// The id of the job at `index` of a file whose bytes are `bytes`: the same
/// file always gives the same ids (a retry continues its job), a changed
/// byte gives new ones (a changed plan is new jobs). Always a valid job id
/// (`daemon::spool::valid_id`): `j`, ten hex digits, `-`, the index.
pub fn job_id(bytes: &[u8], index: usize) -> String {
    id_of(&hex::encode(Sha256::digest(bytes)), index)
}

/// [`job_id`] from the file's hash, computed once for all its jobs.
fn id_of(sha256: &str, index: usize) -> String {
    format!("j{}-{index}", &sha256[..HASH_HEX])
}

/// Read and validate the jobs file at `path`: TOML, or JSON when its name
/// ends in `.json`.
pub fn load(path: &Path) -> Result<JobsFile, ExportError> {
    let read_err = |source| ExportError::Read {
        file: path.to_path_buf(),
        source,
    };
    // A regular file of bounded size (links resolved): a FIFO is refused,
    // not waited on, and `/dev/zero` is not read into memory.
    let real = std::fs::canonicalize(path).map_err(read_err)?;
    let bytes = crate::util::read_untrusted(&real, MAX_JOBS_FILE_BYTES).map_err(read_err)?;
    parse(path, &bytes)
}

/// The largest jobs file read: 10 000 jobs of a long task each fit.
pub const MAX_JOBS_FILE_BYTES: u64 = 16 << 20;

/// How the first lines of every export begin: what marks a file as one
/// `loopd export` wrote (and may write again).
pub const HEADER: &str = "# Written by `loopd export ";

/// Whether `path` is a regular file `loopd export` wrote (its header in
/// the first lines): the only kind of existing file an export replaces.
pub fn is_ours(path: &Path) -> bool {
    let Ok((mut file, _)) = crate::util::open_untrusted(path) else {
        return false;
    };
    let mut head = vec![0u8; 512];
    let n = std::io::Read::read(&mut file, &mut head).unwrap_or(0);
    String::from_utf8_lossy(&head[..n])
        .lines()
        .take(3)
        .any(|l| l.starts_with(HEADER))
}

/// [`load`] on bytes already read (`path` names the file in errors and
/// decides the format).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<JobsFile, ExportError> {
    let file = path.to_path_buf();
    let json = path.extension().is_some_and(|e| e == "json");
    let format = if json { "JSON" } else { "TOML" };
    let syntax = |message: String| ExportError::Syntax {
        file: file.clone(),
        format,
        message,
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|e| syntax(format!("not UTF-8: {e}")))?
        .trim_start_matches('\u{feff}');
    // First as a tree, for the keys: a misspelt one is named with the job
    // it is in. Then typed, for everything else (the parsers' messages name
    // the line).
    let tree: serde_json::Value = if json {
        serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?
    } else {
        let table: toml::Table = toml::from_str(text).map_err(|e| syntax(e.to_string()))?;
        serde_json::to_value(table).map_err(|e| syntax(e.to_string()))?
    };
    check_keys(&file, &tree)?;
    let raw: RawFile = if json {
        serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?
    } else {
        toml::from_str(text).map_err(|e| syntax(e.to_string()))?
    };
    if raw.job.is_empty() {
        return Err(ExportError::NoJobs { file });
    }
    if raw.job.len() > MAX_JOBS {
        return Err(ExportError::TooMany {
            file,
            count: raw.job.len(),
        });
    }
    if raw.defaults.repo.is_some() {
        return Err(ExportError::Invalid {
            file,
            at: DEFAULTS.into(),
            field: "repo",
            problem: "is not a default: each `[[job]]` names its own repository".into(),
        });
    }
    let sha256 = hex::encode(Sha256::digest(bytes));
    let jobs = raw
        .job
        .into_iter()
        .enumerate()
        .map(|(index, job)| validate(&file, &sha256, index, job, &raw.defaults))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(JobsFile {
        path: file,
        sha256,
        jobs,
    })
}

/// Every key of the top level, `[defaults]` and each `[[job]]` is known.
fn check_keys(file: &Path, tree: &serde_json::Value) -> Result<(), ExportError> {
    let unknown = |at: String, key: &str| ExportError::UnknownKey {
        file: file.to_path_buf(),
        at,
        key: key.to_owned(),
    };
    let Some(top) = tree.as_object() else {
        return Ok(()); // the typed parse says what it should be
    };
    for key in top.keys() {
        if key != "defaults" && key != "job" {
            return Err(unknown(TOP_LEVEL.into(), key));
        }
    }
    if let Some(defaults) = top.get("defaults").and_then(|d| d.as_object()) {
        for key in defaults.keys() {
            if !JOB_KEYS.contains(&key.as_str()) {
                return Err(unknown(DEFAULTS.into(), key));
            }
        }
    }
    if let Some(jobs) = top.get("job").and_then(|j| j.as_array()) {
        for (i, job) in jobs.iter().enumerate() {
            for key in job.as_object().into_iter().flat_map(|o| o.keys()) {
                if !JOB_KEYS.contains(&key.as_str()) {
                    return Err(unknown(at_job(i), key));
                }
            }
        }
    }
    Ok(())
}

/// One job: its own settings over the defaults, checked.
fn validate(
    file: &Path,
    sha256: &str,
    index: usize,
    job: RawJob,
    defaults: &RawJob,
) -> Result<Job, ExportError> {
    let at = at_job(index);
    let invalid = |field: &'static str, problem: String| ExportError::Invalid {
        file: file.to_path_buf(),
        at: at.clone(),
        field,
        problem,
    };
    let or = |own: Option<String>, default: &Option<String>| own.or_else(|| default.clone());

    let repo = job
        .repo
        .ok_or_else(|| invalid("repo", "is missing: a clone URL or an absolute path".into()))?;
    check_repo(&repo).map_err(|p| invalid("repo", p))?;
    let git_ref = or(job.git_ref, &defaults.git_ref);
    if let Some(r) = &git_ref {
        check_ref(r).map_err(|p| invalid("ref", p))?;
    }
    let task = or(job.task, &defaults.task).unwrap_or_default();
    if task.trim().is_empty() {
        return Err(invalid(
            "task",
            "is missing or empty: what the agent must achieve, in plain words".into(),
        ));
    }
    let goal = job
        .goal
        .or_else(|| defaults.goal.clone())
        .unwrap_or_default();
    if goal.is_empty() {
        return Err(invalid("goal", "is missing or empty: one or more goal-test steps, e.g. `goal = [\"python3 -m pytest -q\"]`".into()));
    }
    if let Some(i) = goal.iter().position(|g| g.trim().is_empty()) {
        return Err(invalid("goal", format!("step {} is empty", i + 1)));
    }
    let rubric = or(job.rubric, &defaults.rubric);
    if let Some(r) = &rubric {
        let p = Path::new(r);
        if r.is_empty()
            || p.is_absolute()
            || p.components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(invalid(
                "rubric",
                format!("`{r}` is not a path inside the repository (relative, without `..`)"),
            ));
        }
    }
    let agent = or(job.agent, &defaults.agent);
    if let Some(a) = &agent {
        if crate::agent::by_name(a).is_none() {
            let names = crate::agent::names();
            return Err(invalid(
                "agent",
                format!("`{a}` is no agent loopd knows ({})", names.join(", ")),
            ));
        }
    }
    let budget_usd = job.budget_usd.or(defaults.budget_usd);
    if let Some(b) = budget_usd {
        if !(b.is_finite() && b > 0.0) {
            return Err(invalid(
                "budget_usd",
                format!("must be a positive number of USD, not {b}"),
            ));
        }
    }
    let count = |field: &'static str, v: Option<i64>| -> Result<Option<u64>, ExportError> {
        match v {
            None => Ok(None),
            Some(n) if n >= 1 => Ok(Some(n.unsigned_abs())),
            Some(n) => Err(invalid(
                field,
                format!("must be a positive integer, not {n}"),
            )),
        }
    };
    let max_attempts = count("max_attempts", job.max_attempts.or(defaults.max_attempts))?;
    let max_turns = count("max_turns", job.max_turns.or(defaults.max_turns))?;
    let max_tokens = count("max_tokens", job.max_tokens.or(defaults.max_tokens))?;
    let timeout = or(job.timeout, &defaults.timeout);
    if let Some(t) = &timeout {
        match humantime::parse_duration(t.trim()) {
            Ok(d) if !d.is_zero() => {}
            _ => {
                return Err(invalid(
                    "timeout",
                    format!("must be a duration such as `90s`, `20m` or `2h`, not `{t}`"),
                ))
            }
        }
    }
    for (field, text) in [("task", Some(&task)), ("rubric", rubric.as_ref())] {
        if text.is_some_and(|t| t.contains('\0')) {
            return Err(invalid(
                field,
                "holds a NUL byte, which no command line can carry".into(),
            ));
        }
    }
    if goal.iter().any(|g| g.contains('\0')) {
        return Err(invalid(
            "goal",
            "holds a NUL byte, which no command line can carry".into(),
        ));
    }
    let id = id_of(sha256, index);
    debug_assert!(crate::daemon::spool::valid_id(&id), "{id}");
    Ok(Job {
        index,
        id,
        repo,
        git_ref,
        task,
        goal,
        rubric,
        agent,
        budget_usd,
        max_attempts,
        max_turns,
        max_tokens,
        timeout,
    })
}

/// A clone URL (`scheme://…`, or scp-like `user@host:path`) or an absolute
/// path — a relative one means nothing on a node. Never starting with `-`
/// (it would be an option to git) and on one line.
fn check_repo(repo: &str) -> Result<(), String> {
    if repo.starts_with('-') || repo.chars().any(char::is_control) || repo.trim() != repo {
        return Err(format!(
            "`{}` is not a clone URL or an absolute path",
            crate::util::printable(repo)
        ));
    }
    let url = repo.split_once("://").is_some_and(|(scheme, rest)| {
        !rest.is_empty() && ["https", "http", "ssh", "git", "file"].contains(&scheme)
    });
    let scp = !repo.contains("://")
        && repo.split_once(':').is_some_and(|(host, path)| {
            host.contains('@') && !host.contains('/') && !path.is_empty()
        });
    if url || scp || repo.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "`{repo}` is neither a clone URL (https://…, ssh://…, git@host:path) nor an absolute path"
        ))
    }
}

/// A ref git can check out: no option, no whitespace or control character.
fn check_ref(r: &str) -> Result<(), String> {
    if r.is_empty()
        || r.starts_with('-')
        || r.chars().any(|c| c.is_whitespace() || c.is_control())
        || r.contains("..")
    {
        Err(format!(
            "`{}` is not a branch, tag or commit name",
            crate::util::printable(r)
        ))
    } else {
        Ok(())
    }
}

/// Where a job's run finds its checkout, its state dir and its credential,
/// as shell words written as they are: the exporter's own fixed paths,
/// which may name a variable of the platform (`"$RUNNER_TEMP"/loopd/state`)
/// — never text from the jobs file, which [`run_command`] quotes itself.
#[derive(Debug, Clone, Copy)]
pub struct Places<'a> {
    pub checkout: &'a str,
    pub state_dir: &'a str,
    pub credential_file: &'a str,
}

/// The job's own arguments of `loopd run`, unquoted: `--task`, each
/// `--goal`, and the settings the file gave (none it did not: the
/// repository's `loopd.toml` and loopd's defaults decide the rest).
pub fn run_args(job: &Job) -> Vec<String> {
    let mut args = vec!["--task".to_owned(), job.task.clone()];
    for step in &job.goal {
        args.push("--goal".into());
        args.push(step.clone());
    }
    let mut opt = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            args.push(flag.into());
            args.push(v);
        }
    };
    opt("--rubric", job.rubric.clone());
    opt("--agent", job.agent.clone());
    opt("--budget-usd", job.budget_usd.map(|b| b.to_string()));
    opt("--max-attempts", job.max_attempts.map(|n| n.to_string()));
    opt("--max-turns", job.max_turns.map(|n| n.to_string()));
    opt("--max-tokens", job.max_tokens.map(|n| n.to_string()));
    opt("--timeout", job.timeout.clone());
    args
}

/// The one command line a job runs, on either platform:
/// `loopd run --job-id ID -C CHECKOUT --state-dir STATE --credential-file
/// PATH` and the job's own arguments, each quoted for a POSIX shell. It is
/// run with the checkout as the working directory, so a `--rubric` path is
/// the repository's.
pub fn run_command(job: &Job, places: &Places<'_>) -> String {
    use crate::util::shell_quote;
    let mut words = vec![
        "loopd".to_owned(),
        "run".into(),
        "--job-id".into(),
        shell_quote(&job.id),
        "-C".into(),
        places.checkout.to_owned(),
        "--state-dir".into(),
        places.state_dir.to_owned(),
        "--credential-file".into(),
        places.credential_file.to_owned(),
    ];
    words.extend(run_args(job).iter().map(|a| shell_quote(a)));
    words.join(" ")
}

/// `owner/name` of a github.com clone URL (`https://github.com/o/n[.git]`),
/// which `actions/checkout` takes as `repository:`.
pub fn github_repository(repo: &str) -> Option<String> {
    let rest = repo.strip_prefix("https://github.com/")?;
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    let (owner, name) = rest.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    (ok(owner) && ok(name) && !name.contains('/')).then(|| format!("{owner}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[defaults]
budget_usd = 2.0
max_attempts = 3

[[job]]
repo = "https://github.com/acme/app.git"
ref = "main"
task = "Make the tests pass"
goal = ["python3 -m pytest -q"]
rubric = "docs/rubric.md"

[[job]]
repo = "/srv/repos/lib"
task = "Fix the lint"
goal = ["ruff check .", "python3 -m pytest -q"]
agent = "codex"
budget_usd = 0.5
timeout = "2h"
"#;

    fn parse_str(name: &str, text: &str) -> Result<JobsFile, ExportError> {
        parse(Path::new(name), text.as_bytes())
    }

    #[test]
    fn ids_come_from_the_bytes_and_the_index() {
        let a = parse_str("jobs.toml", FILE).expect("valid");
        let hash = hex::encode(Sha256::digest(FILE.as_bytes()));
        assert_eq!(a.jobs[0].id, format!("j{}-0", &hash[..10]));
        assert_eq!(a.jobs[1].id, format!("j{}-1", &hash[..10]));
        assert_eq!(a.short_hash(), &hash[..10]);
        let again = parse_str("other-name.toml", FILE).expect("valid");
        assert_eq!(
            a.jobs.iter().map(|j| &j.id).collect::<Vec<_>>(),
            again.jobs.iter().map(|j| &j.id).collect::<Vec<_>>(),
            "the same bytes, the same ids"
        );
        let changed = parse_str("jobs.toml", &FILE.replace("3", "4")).expect("valid");
        assert_ne!(a.jobs[0].id, changed.jobs[0].id, "a changed file, new ids");
        for index in [0, 9, MAX_JOBS - 1, usize::MAX] {
            let id = job_id(b"x", index);
            assert!(crate::daemon::spool::valid_id(&id), "{id}");
        }
    }

    #[test]
    fn defaults_fill_what_a_job_leaves_out() {
        let f = parse_str("jobs.toml", FILE).expect("valid");
        let (a, b) = (&f.jobs[0], &f.jobs[1]);
        assert_eq!(a.budget_usd, Some(2.0));
        assert_eq!(a.max_attempts, Some(3));
        assert_eq!(a.git_ref.as_deref(), Some("main"));
        assert_eq!(b.budget_usd, Some(0.5), "a job's own setting wins");
        assert_eq!(b.max_attempts, Some(3));
        assert_eq!(b.git_ref, None, "the remote's default branch");
        assert_eq!(b.goal.len(), 2);
        assert_eq!(
            run_args(b),
            [
                "--task",
                "Fix the lint",
                "--goal",
                "ruff check .",
                "--goal",
                "python3 -m pytest -q",
                "--agent",
                "codex",
                "--budget-usd",
                "0.5",
                "--max-attempts",
                "3",
                "--timeout",
                "2h"
            ]
        );
    }

    #[test]
    fn json_is_read_when_the_name_says_so() {
        let text = r#"{"job": [{"repo": "/r", "task": "t", "goal": ["true"]}]}"#;
        let f = parse_str("jobs.json", text).expect("valid JSON");
        assert_eq!(f.jobs[0].repo, "/r");
        let err = parse_str("jobs.toml", text).expect_err("not TOML");
        assert!(
            matches!(err, ExportError::Syntax { format: "TOML", .. }),
            "{err}"
        );
    }

    #[test]
    fn a_misspelt_key_is_named_with_its_job_and_the_key_meant() {
        let text = FILE.replace("agent = \"codex\"", "agnet = \"codex\"");
        let err = parse_str("jobs.toml", &text).expect_err("misspelt");
        let msg = err.to_string();
        assert!(
            msg.contains("jobs.toml")
                && msg.contains("job 1 (the 2nd [[job]])")
                && msg.contains("`agnet`"),
            "{msg}"
        );
        assert!(
            err.hint()
                .expect("a hint")
                .contains("did you mean `agent`?"),
            "{:?}",
            err.hint()
        );

        let err = parse_str(
            "jobs.toml",
            &FILE.replace("max_attempts = 3", "max_attempt = 3"),
        )
        .expect_err("misspelt");
        assert!(
            err.to_string()
                .contains("[defaults]: unknown key `max_attempt`"),
            "{err}"
        );
        assert!(err.hint().expect("hint").contains("`max_attempts`"));

        let err = parse_str("jobs.toml", &format!("jobs = 1\n{FILE}")).expect_err("misspelt");
        assert!(
            err.to_string()
                .contains("the top level: unknown key `jobs`"),
            "{err}"
        );
        assert!(err.hint().expect("hint").contains("did you mean `job`?"));
    }

    /// `JOB_KEYS` is what serde takes: its error for an unknown field lists
    /// the fields it expects.
    #[test]
    fn job_keys_are_the_fields_serde_accepts() {
        let err = serde_json::from_str::<RawJob>(r#"{"no_such_key": 1}"#)
            .expect_err("unknown")
            .to_string();
        let expected = err.split_once("expected one of ").expect("the list").1;
        let names: Vec<&str> = expected
            .split(", ")
            .map(|n| n.split('`').nth(1).expect("a quoted name"))
            .collect();
        assert_eq!(names, JOB_KEYS);
    }

    #[test]
    fn invalid_jobs_are_refused_with_the_field() {
        let job = |body: &str| format!("[[job]]\n{body}\n");
        let ok = "repo = \"/r\"\ntask = \"t\"\ngoal = [\"true\"]";
        for (body, field) in [
            ("task = \"t\"\ngoal = [\"true\"]", "repo"),
            (
                "repo = \"relative/path\"\ntask = \"t\"\ngoal = [\"true\"]",
                "repo",
            ),
            (
                "repo = \"--upload-pack=evil\"\ntask = \"t\"\ngoal = [\"true\"]",
                "repo",
            ),
            ("repo = \"/r\"\ntask = \"  \"\ngoal = [\"true\"]", "task"),
            ("repo = \"/r\"\ntask = \"t\"\ngoal = []", "goal"),
            (
                "repo = \"/r\"\ntask = \"t\"\ngoal = [\"true\", \"\"]",
                "goal",
            ),
            (&format!("{ok}\nbudget_usd = 0"), "budget_usd"),
            (&format!("{ok}\nbudget_usd = -1.5"), "budget_usd"),
            (&format!("{ok}\nmax_attempts = 0"), "max_attempts"),
            (&format!("{ok}\nmax_turns = -3"), "max_turns"),
            (&format!("{ok}\nmax_tokens = 0"), "max_tokens"),
            (&format!("{ok}\ntimeout = \"soon\""), "timeout"),
            (&format!("{ok}\ntimeout = \"0s\""), "timeout"),
            (&format!("{ok}\nagent = \"gpt\""), "agent"),
            (&format!("{ok}\nrubric = \"../outside.md\""), "rubric"),
            (&format!("{ok}\nrubric = \"/etc/passwd\""), "rubric"),
            (&format!("{ok}\nref = \"--orphan\""), "ref"),
            (&format!("{ok}\nref = \"a b\""), "ref"),
        ] {
            match parse_str("jobs.toml", &job(body)) {
                Err(ExportError::Invalid { field: f, at, .. }) => {
                    assert_eq!(f, field, "{body}");
                    assert_eq!(at, "job 0 (the 1st [[job]])");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(matches!(
            parse_str("jobs.toml", "[defaults]\nbudget_usd = 1.0\n"),
            Err(ExportError::NoJobs { .. })
        ));
        let many = job(ok).repeat(MAX_JOBS + 1);
        assert!(
            matches!(parse_str("jobs.toml", &many), Err(ExportError::TooMany { count, .. }) if count == MAX_JOBS + 1)
        );
        assert!(parse_str("jobs.toml", &job(ok).repeat(MAX_JOBS)).is_ok());
        let typed = parse_str("jobs.toml", &job(&format!("{ok}\nmax_turns = \"ten\"")))
            .expect_err("a string");
        assert!(
            typed.to_string().contains("max_turns"),
            "the parser names the key: {typed}"
        );
        for (repo, ok) in [
            ("https://github.com/a/b.git", true),
            ("ssh://git@host/a/b", true),
            ("git@github.com:a/b.git", true),
            ("file:///srv/r", true),
            ("/srv/r", true),
            ("ftp://x/y", false),
            ("host:path", false),
            ("https://", false),
        ] {
            assert_eq!(check_repo(repo).is_ok(), ok, "{repo}");
        }
    }

    #[test]
    fn github_repositories_are_recognized() {
        for (url, want) in [
            ("https://github.com/acme/app.git", Some("acme/app")),
            ("https://github.com/acme/app", Some("acme/app")),
            ("https://github.com/acme/app/", Some("acme/app")),
            ("https://github.com/acme/app/tree/x", None),
            ("https://gitlab.com/acme/app.git", None),
            ("git@github.com:acme/app.git", None),
            ("/srv/app", None),
        ] {
            assert_eq!(github_repository(url).as_deref(), want, "{url}");
        }
    }

    /// A hostile task reaches `loopd run` as one argument, byte for byte,
    /// through a real shell.
    #[test]
    fn the_command_quotes_every_argument_of_the_job() {
        let hostile = "$(rm -rf ~) `id` \"double\" 'single' \\ ; & | > x\nsecond line\t$HOME";
        let text = format!(
            "[[job]]\nrepo = \"/r\"\ntask = {}\ngoal = [{}]\n",
            toml::Value::String(hostile.into()),
            toml::Value::String(format!("{hostile} 2")),
        );
        let f = parse_str("jobs.toml", &text).expect("valid");
        let job = &f.jobs[0];
        let places = Places {
            checkout: "\"$CHECKOUT\"",
            state_dir: "/var/lib/loopd/state",
            credential_file: "/var/run/secrets/loopd",
        };
        let cmd = run_command(job, &places);
        let printed = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("loopd() {{ printf '%s\\0' \"$@\"; }}; {cmd}"))
            .env("CHECKOUT", "/the checkout")
            .output()
            .expect("sh");
        assert!(
            printed.status.success(),
            "{}",
            String::from_utf8_lossy(&printed.stderr)
        );
        let args: Vec<String> = String::from_utf8(printed.stdout)
            .expect("UTF-8")
            .split_terminator('\0')
            .map(str::to_owned)
            .collect();
        let mut want: Vec<String> = [
            "run",
            "--job-id",
            &job.id,
            "-C",
            "/the checkout",
            "--state-dir",
            "/var/lib/loopd/state",
            "--credential-file",
            "/var/run/secrets/loopd",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        want.extend(run_args(job));
        assert_eq!(args, want);
        assert_eq!(args[10], hostile);
    }
}
