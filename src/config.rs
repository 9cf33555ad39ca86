//! `loopd.toml` + flags → a validated [`Job`].
//!
//! Every field of `loopd.toml` can be overridden by a flag of the same name
//! (`max_attempts` ↔ `--max-attempts`). Input is parsed into loose "file"
//! structs first and then checked field by field, so that a bad value is
//! reported with the file, the field, what was expected and what was found —
//! before anything in the repository is touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{Agent, Price};
pub use crate::goal::held_out::HeldOutStep;
pub use crate::goal::GoalStep;
pub use crate::guard::caps::Caps;
pub use crate::guard::GuardSettings;
use crate::judges::append_only::TestsMode;
use crate::judges::risk::RiskPolicy;
use crate::judges::tamper::{AllowRefusal, ProtectSettings};
use crate::judges::testcount::Preset;
use crate::notify::Webhook;
use crate::rubric::Rubric;
use crate::util::FileError;

/// The name of the per-repository configuration file.
pub const CONFIG_FILE: &str = "loopd.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] crate::util::FileError),
    #[error("no task: set `task` in `{}` or pass `--task TEXT`", file.display())]
    NoTask { file: PathBuf },
    #[error("no goal test: add `[[goal]]` steps to `{}` or pass `--goal CMD`", file.display())]
    NoGoal { file: PathBuf },
    /// A model neither the agent's price table nor `[prices]` knows: its
    /// calls could not be capped.
    #[error("{}: {field}: loopd has no price for the {agent} model `{model}`, so it cannot cap what its calls cost", file.display())]
    Unpriced {
        file: PathBuf,
        field: String,
        model: String,
        agent: &'static str,
        /// The configuration file to price it in.
        config: PathBuf,
    },
    /// A held-out `ref` whose commit the job's repository can reach: the
    /// agent could read the held-out tests through git from its Bash.
    #[error("{}: {field}: the held-out tests of `{git_ref}` can be read from the job's repository: {why}", file.display())]
    HeldOutReachable {
        file: PathBuf,
        field: String,
        git_ref: String,
        why: String,
    },
    /// A `[protect] allow` entry loopd will not take: not a path or glob
    /// inside the repository, or one that reaches the judge's own files
    /// ([`crate::judges::tamper::check_allow`]).
    #[error("`{}`: field `{field}`: `{entry}` {why}", file.display())]
    Allow {
        file: PathBuf,
        field: String,
        entry: String,
        why: AllowRefusal,
    },
}

impl ConfigError {
    /// A `hint:` line for the user, where there is something useful to say.
    pub fn hint(&self) -> Option<String> {
        match self {
            ConfigError::File(FileError::Parse { .. } | FileError::Invalid { .. }) => {
                Some("run `loopd check` to validate `loopd.toml` and the rubric".into())
            }
            ConfigError::NoTask { .. } => Some(
                "for example: task = \"Make python3 -m pytest pass. Do not weaken any test.\""
                    .into(),
            ),
            ConfigError::NoGoal { .. } => {
                Some("add a step, for example `[[goal]]` with `run = \"python3 -m pytest -q\"`, or pass `--goal \"python3 -m pytest -q\"`".into())
            }
                        ConfigError::Unpriced { model, config, .. } => Some(format!(
                "price it (USD per million tokens) in `{}`: [prices.\"{model}\"] input = …, output = …, cache_read = …, cache_write = …",
                config.display()
            )),
            ConfigError::HeldOutReachable { .. } => Some(
                "keep held-out tests in a repository the job's repository cannot reach: not the job's repository, not a worktree of it, and neither borrowing the other's objects (`git clone --no-shared`)".into(),
            ),
            ConfigError::Allow {
                why: AllowRefusal::Judge(_),
                ..
            } => Some(
                "`allow` names what the task needs changed (`tests/test_client.py`, `tests/fixtures/*.json`); `loopd.toml`, the rubric and `.git/` stay protected whatever it says".into(),
            ),
            ConfigError::Allow { .. } => Some(
                "an entry is a path or glob relative to the repository root, such as `tests/test_client.py` or `tests/fixtures/*.json`".into(),
            ),
            ConfigError::File(FileError::Read { .. }) => None,
        }
    }
}

/// The job settings a flag, a job file in the queue and `loopd.toml` can
/// each set — one type for the first two (clap and serde), so the command
/// line and the queue never drift apart. A value here overrides the
/// `loopd.toml` field of the same name.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Overrides {
    /// Configuration file (default: `loopd.toml` at the repository root, if present).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What the agent must achieve, in plain words.
    #[arg(long, value_name = "TEXT")]
    pub task: Option<String>,
    /// A goal-test step (a shell command line); repeat for ordered steps, cheap first.
    #[arg(long = "goal", value_name = "CMD")]
    pub goal: Vec<String>,
    /// Rubric file the critic judges by (default: the embedded four rules).
    #[arg(long, value_name = "FILE")]
    pub rubric: Option<PathBuf>,
    /// Attempts before giving up [default: 5].
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub max_attempts: Option<i64>,
    /// The agent CLI that works on the task: `claude` or `codex` [default: claude].
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The agent CLI of the critic sessions (another vendor's model is the
    /// strongest "different model") [default: the agent's].
    #[arg(long, value_name = "NAME")]
    pub critic_agent: Option<String>,
    /// Model of the agent sessions, in the agent's vendor's names [default: haiku for claude, gpt-5-codex for codex].
    #[arg(long, value_name = "MODEL")]
    pub agent_model: Option<String>,
    /// Model of the critic sessions, in the critic's vendor's names [default: sonnet for claude, gpt-5 for codex].
    #[arg(long, value_name = "MODEL")]
    pub critic_model: Option<String>,
    /// Tools the agent may use, comma-separated [default: Read,Edit,Write,Glob,Grep plus `Bash(<step> *)` per goal step].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub allowed_tools: Option<Vec<String>>,
    /// Spend cap in USD over the whole job, agent and critic together [default: 2].
    #[arg(long, allow_negative_numbers = true, value_name = "X")]
    pub budget_usd: Option<f64>,
    /// Cap on model turns over the whole job [default: 200].
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub max_turns: Option<i64>,
    /// Cap on input+output tokens over the whole job [default: 5000000].
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub max_tokens: Option<i64>,
    /// Wall-clock cap for the whole job, e.g. `30m` [default: 1h].
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Wall-clock cap for one attempt [default: 20m].
    #[arg(long, value_name = "DUR")]
    pub attempt_timeout: Option<String>,
    /// Stop an agent that emits no event for this long [default: 5m].
    #[arg(long, value_name = "DUR")]
    pub idle_timeout: Option<String>,
    /// Run the loop even when the goal test is green at the baseline (a
    /// rubric-only job); otherwise such a job ends at once, `nothing_to_fix`.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_green: bool,
    /// Refuse to run (exit 5) when the kernel cannot sandbox the agent (Landlock).
    #[arg(long)]
    pub require_sandbox: bool,
    /// Pass this variable of loopd's environment to every process of the job
    /// (repeat for more; with `[sandbox] env`): nothing else is inherited
    /// but `PATH`, the locale, `TZ` and where toolchains live.
    #[arg(long = "env", value_name = "NAME")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The held-out tests' directory, for every `held_out` goal step (over
    /// their `files`): in CI, a path the workflow provides outside the checkout.
    #[arg(long, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out: Option<PathBuf>,
}

impl Overrides {
    /// The same, with relative paths made absolute against `cwd` (a job
    /// file is read later, by a daemon with another working directory).
    pub fn absolute(&self, cwd: &Path) -> Overrides {
        let abs = |p: &Option<PathBuf>| {
            p.as_ref().map(|p| {
                if p.is_absolute() {
                    p.clone()
                } else {
                    cwd.join(p)
                }
            })
        };
        Overrides {
            config: abs(&self.config),
            rubric: abs(&self.rubric),
            held_out: abs(&self.held_out),
            ..self.clone()
        }
    }
}

/// The flags every job-taking command shares (`run`, `check`, `submit`,
/// `ci`): where to work, with what, and the [`Overrides`].
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JobFlags {
    /// Repository to work on.
    #[arg(short = 'C', long = "repo", value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The agent's CLI binary [default: the agent's program (`claude`, `codex`) on PATH].
    #[arg(long, value_name = "PATH", env = "LOOPD_AGENT_BIN")]
    pub agent_bin: Option<PathBuf>,
    /// The critic's CLI binary [default: the agent's binary when the critic
    /// is the same CLI, else its program on PATH].
    #[arg(long, value_name = "PATH", env = "LOOPD_CRITIC_BIN")]
    pub critic_bin: Option<PathBuf>,
    /// Where runs, reports and the queue live [default: `$XDG_STATE_HOME/loopd`].
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub over: Overrides,
}

impl std::ops::Deref for JobFlags {
    type Target = Overrides;
    fn deref(&self) -> &Overrides {
        &self.over
    }
}

impl JobFlags {
    /// The flags of a queued job, run by the daemon in `repo` with its own
    /// agent binaries and state dir (a job file names none of them).
    pub fn for_daemon(
        repo: &Path,
        (agent_bin, critic_bin): (Option<PathBuf>, Option<PathBuf>),
        state_dir: &Path,
        over: &Overrides,
    ) -> JobFlags {
        JobFlags {
            repo: repo.to_path_buf(),
            agent_bin,
            critic_bin,
            state_dir: Some(state_dir.to_path_buf()),
            over: over.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    task: Option<String>,
    #[serde(default)]
    goal: Vec<GoalStepFile>,
    rubric: Option<PathBuf>,
    max_attempts: Option<i64>,
    agent: Option<String>,
    critic_agent: Option<String>,
    agent_model: Option<String>,
    critic_model: Option<String>,
    allowed_tools: Option<Vec<String>>,
    budget_usd: Option<f64>,
    max_turns: Option<i64>,
    max_tokens: Option<i64>,
    timeout: Option<String>,
    attempt_timeout: Option<String>,
    idle_timeout: Option<String>,
    allow_green: Option<bool>,
    #[serde(default)]
    guard: GuardFile,
    #[serde(default)]
    protect: ProtectFile,
    #[serde(default)]
    sandbox: SandboxFile,
    #[serde(default)]
    ci: CiFile,
    #[serde(default)]
    approval: ApprovalFile,
    #[serde(default)]
    notify: Vec<NotifyFile>,
    #[serde(default)]
    judge: JudgeFile,
    #[serde(default)]
    examiner: ExaminerFile,
    /// `[prices."model-id"]`: per million tokens, over the agents' tables.
    #[serde(default)]
    prices: BTreeMap<String, PriceFile>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    input: Option<f64>,
    output: Option<f64>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CiFile {
    budget_usd: Option<f64>,
    max_attempts: Option<i64>,
    max_files: Option<i64>,
    max_lines: Option<i64>,
    never_touch: Option<Vec<String>>,
    allow_new_dependencies: Option<bool>,
    allow_forks: Option<bool>,
    max_rounds: Option<i64>,
    pr_budget_usd: Option<f64>,
    trusted: Option<Vec<String>>,
    follow_label: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalFile {
    required: Option<bool>,
    action: Option<String>,
    merge_into: Option<String>,
    remote: Option<String>,
    base: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NotifyFile {
    url: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxFile {
    enabled: Option<bool>,
    require: Option<bool>,
    read: Option<Vec<PathBuf>>,
    read_write: Option<Vec<PathBuf>>,
    network: Option<String>,
    env: Option<Vec<String>>,
}

/// `[sandbox]` in `loopd.toml`: the Landlock sandbox of the agent, the
/// critic and the goal steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxSettings {
    /// Off: no sandbox at all (loudly logged).
    pub enabled: bool,
    /// Refuse to run when the kernel cannot sandbox (`--require-sandbox`).
    pub require: bool,
    /// More paths the sandboxed processes may read (a toolchain loopd
    /// does not find on `PATH`, a data set the tests read).
    pub read: Vec<PathBuf>,
    /// More paths they may write (e.g. a shared build cache).
    pub read_write: Vec<PathBuf>,
    /// `gateway-only` or `open`; `None` (not set): `gateway-only` where
    /// the system can give the job a private network namespace, `open`
    /// (said loudly) where it cannot.
    pub network: Option<crate::sandbox::Network>,
    /// Variables of loopd's environment passed to every process of the job
    /// (`[sandbox] env`, `--env`), besides the allow-list of
    /// [`crate::sandbox::env`].
    pub env: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProtectFile {
    paths: Option<Vec<String>>,
    skip_markers: Option<Vec<String>>,
    allow_submodules: Option<bool>,
    tests: Option<String>,
    allow: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GoalStepFile {
    name: Option<String>,
    run: Option<String>,
    timeout: Option<String>,
    report: Option<String>,
    held_out: Option<bool>,
    files: Option<PathBuf>,
    /// A held-out step's files as a ref of the git repository `files`.
    #[serde(rename = "ref")]
    git_ref: Option<String>,
}

/// `[examiner]`: tests written from the task before the first attempt.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExaminerFile {
    mode: Option<String>,
    /// The CLI that runs it: the agent's or the critic's (the critic's by
    /// default).
    agent: Option<String>,
    model: Option<String>,
}

/// `[judge]`: what the judge runs besides the goal.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeFile {
    /// The whole suite's command; `false` (or `""`) for none.
    suite: Option<SuiteFile>,
    suite_timeout: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SuiteFile {
    Command(String),
    Enabled(bool),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuardFile {
    stuck_window: Option<i64>,
    stuck_repeat: Option<i64>,
    poll_patterns: Option<Vec<String>>,
    grace: Option<String>,
    escalation: Option<bool>,
    nudge: Option<bool>,
    strict_from: Option<i64>,
    max_diff_kb: Option<i64>,
    held_out_feedback: Option<String>,
}

/// What approving does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAction {
    /// Merge the job's branch into a named local branch.
    Merge,
    /// Push the job's branch and open a pull request (GitHub).
    PullRequest,
}

/// `[approval]` in `loopd.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalSettings {
    pub required: bool,
    pub action: ApprovalAction,
    /// For `merge`: the local branch to merge into.
    pub merge_into: String,
    /// For `pull_request`: the remote to push to.
    pub remote: String,
    /// For `pull_request`: the base branch.
    pub base: String,
}

impl Default for ApprovalSettings {
    fn default() -> Self {
        ApprovalSettings {
            required: false,
            action: ApprovalAction::Merge,
            merge_into: "main".into(),
            remote: "origin".into(),
            base: "main".into(),
        }
    }
}

/// A fully resolved, validated job: everything `loopd run` needs.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub repo: PathBuf,
    pub config_file: Option<PathBuf>,
    pub task: String,
    pub goal: Vec<GoalStep>,
    /// Goal steps the agent never sees the files of, run after the visible
    /// goal is green on a judge-only tree ([`crate::goal::held_out`]).
    pub held_out: Vec<HeldOutStep>,
    /// The whole suite, run on the judge-only tree once the goal and the
    /// gates are green: every test that passed at BASE_REF must still
    /// pass (`[judge] suite`; [`crate::goal::suite`]).
    pub suite: Option<Suite>,
    /// The examiner (`[examiner]`; `None`: off), [`crate::examiner`].
    pub examiner: Option<crate::examiner::Settings>,
    /// Why the examiner is off although the lead left it to its default
    /// (`loopd check` says so).
    pub examiner_off: Option<String>,
    pub rubric: Rubric,
    pub rubric_source: String,
    pub max_attempts: u32,
    /// Go on when the baseline is green (`--allow-green`).
    pub allow_green: bool,
    /// The agent CLI of the agent sessions and of the critic's, by name
    /// ([`crate::agent::by_name`]; checked here).
    pub agent: String,
    pub critic_agent: String,
    pub agent_model: String,
    pub critic_model: String,
    pub allowed_tools: Vec<String>,
    pub agent_bin: PathBuf,
    pub critic_bin: PathBuf,
    /// Prices per million tokens by model, over the agents' own tables.
    pub prices: BTreeMap<String, Price>,
    pub state_dir: PathBuf,
    pub caps: Caps,
    pub guard: GuardSettings,
    pub protect: ProtectSettings,
    pub sandbox: SandboxSettings,
    /// loopd's own environment, as the job was resolved in it (the
    /// process's; a test's own for a job run in a test process). Never
    /// written to `job.json`: it holds the caller's secrets.
    #[serde(skip)]
    pub host: std::sync::Arc<crate::util::Host>,
    /// The autofix gate's risk policy (`loopd ci`).
    pub ci: RiskPolicy,
    /// The durable approval gate (the daemon).
    pub approval: ApprovalSettings,
    /// Webhooks told when a job is accepted, awaits approval, or ends otherwise.
    #[serde(skip)]
    pub notify: Vec<Webhook>,
    /// The exact bytes of the configuration file, for the checksum guard.
    #[serde(skip)]
    pub config_text: Option<String>,
}

// Every default of a job, in one place (the help texts quote them).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub const DEFAULT_BUDGET_USD: f64 = 2.0;
pub const DEFAULT_MAX_TURNS: u64 = 200;
pub const DEFAULT_MAX_TOKENS: u64 = 5_000_000;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1200);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_AGENT: &str = "claude";

pub const DEFAULT_TOOLS: [&str; 5] = ["Read", "Edit", "Write", "Glob", "Grep"];
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// The configuration file (`--config`, else `loopd.toml` at the root if
/// there is one): where it is, what it says, and its text (for the judge
/// integrity check). No file is an empty configuration.
fn read_config(
    flags: &JobFlags,
    repo_root: &Path,
) -> Result<(Option<PathBuf>, ConfigFile, Option<String>), ConfigError> {
    let config_path = match &flags.config {
        Some(p) => Some(if p.is_absolute() {
            p.clone()
        } else {
            std::env::current_dir()
                .map(|d| d.join(p))
                .unwrap_or_else(|_| p.clone())
        }),
        None => {
            let p = repo_root.join(CONFIG_FILE);
            p.is_file().then_some(p)
        }
    };
    let (file, config_text) = match &config_path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| {
                ConfigError::from(FileError::Read {
                    file: p.clone(),
                    source,
                })
            })?;
            let text = text
                .strip_prefix('\u{feff}')
                .map(str::to_owned)
                .unwrap_or(text);
            let parsed: ConfigFile = toml::from_str(&text).map_err(|e| {
                ConfigError::from(FileError::Parse {
                    file: p.clone(),
                    message: e.to_string(),
                })
            })?;
            (parsed, Some(text))
        }
        None => (ConfigFile::default(), None),
    };
    Ok((config_path, file, config_text))
}

/// The largest `package.json` whose scripts are read for inference.
const MAX_PACKAGE_JSON: u64 = 1024 * 1024;

/// `package.json`'s `scripts` at the repository's root (none when it is
/// absent, not a regular file, too large or not JSON): what `npm test` runs,
/// for the test-count preset.
fn package_scripts(repo_root: &Path) -> BTreeMap<String, String> {
    let path = repo_root.join("package.json");
    let regular = std::fs::symlink_metadata(&path)
        .is_ok_and(|m| m.file_type().is_file() && m.len() <= MAX_PACKAGE_JSON);
    if !regular {
        return BTreeMap::new();
    }
    let Ok(text) = std::fs::read_to_string(&path) else {
        return BTreeMap::new();
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
        tracing::debug!(path = %path.display(), "package.json is not JSON; its scripts are not read");
        return BTreeMap::new();
    };
    json.get("scripts")
        .and_then(|s| s.as_object())
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `--goal` steps: each a command line, named by itself.
fn goal_from_flags(
    o: &Origin<'_>,
    runs: &[String],
    scripts: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<GoalStep>, ConfigError> {
    runs.iter()
        .map(|run| {
            if run.trim().is_empty() {
                return Err(o.invalid("goal", "a shell command line", "\"\""));
            }
            Ok(GoalStep {
                name: run.trim().to_owned(),
                run: run.trim().to_owned(),
                timeout: DEFAULT_STEP_TIMEOUT,
                report: Preset::infer_through_scripts(run, scripts),
            })
        })
        .collect()
}

/// `[[goal]]` steps: a command line each, a unique name, a timeout and
/// the test report it prints; the visible ones, and the held-out ones with
/// their `files` as written.
#[allow(clippy::type_complexity)]
fn goal_from_file(
    o: &Origin<'_>,
    file: Vec<GoalStepFile>,
    scripts: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<GoalStep>, Vec<HeldOutFile>), ConfigError> {
    let mut steps = Vec::new();
    let mut held_out: Vec<HeldOutFile> = Vec::new();
    for (i, step) in file.into_iter().enumerate() {
        let hidden = step.held_out.unwrap_or(false);
        let files = step.files.clone();
        let git_ref = step.git_ref.clone();
        if !hidden && git_ref.is_some() {
            return Err(o.invalid(
                &format!("goal[{i}].ref"),
                "`ref` only on a step with `held_out = true`",
                "`ref` on a visible step",
            ));
        }
        if !hidden && files.is_some() {
            return Err(o.invalid(
                &format!("goal[{i}].files"),
                "`files` only on a step with `held_out = true`",
                "`files` on a visible step",
            ));
        }
        let run = match step.run {
            Some(r) if !r.trim().is_empty() => r.trim().to_owned(),
            _ => {
                return Err(o.invalid(&format!("goal[{i}].run"), "a shell command line", "nothing"))
            }
        };
        let name = match step.name {
            Some(n) if !n.trim().is_empty() => n.trim().to_owned(),
            Some(_) => {
                return Err(o.invalid(&format!("goal[{i}].name"), "a non-empty string", "\"\""))
            }
            None => run.clone(),
        };
        if steps
            .iter()
            .chain(held_out.iter().map(|(s, _, _)| s))
            .any(|s: &GoalStep| s.name == name)
        {
            return Err(o.invalid(
                &format!("goal[{i}].name"),
                "a name no other step uses",
                format!("`{name}`"),
            ));
        }
        let timeout = duration(
            o,
            &format!("goal[{i}].timeout"),
            step.timeout.as_deref(),
            DEFAULT_STEP_TIMEOUT,
        )?;
        let report = match step.report.as_deref().map(str::trim) {
            None => Preset::infer_through_scripts(&run, scripts),
            Some("none") => None,
            Some(name) => Some(Preset::parse_name(name).ok_or_else(|| {
                o.invalid(
                    &format!("goal[{i}].report"),
                    "one of `pytest`, `cargo`, `nextest`, `go`, `jest`, `vitest`, `node`, `none`",
                    format!("`{name}`"),
                )
            })?),
        };
        let step = GoalStep {
            name,
            run,
            timeout,
            report,
        };
        if hidden {
            held_out.push((step, files, git_ref));
        } else {
            steps.push(step);
        }
    }
    Ok((steps, held_out))
}

/// The whole suite step of a job: its command, and whether loopd
/// inferred it from a narrowed goal step (and which) or the lead named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suite {
    pub step: GoalStep,
    /// The goal step it was inferred from; `None`: `[judge] suite`.
    pub inferred_from: Option<String>,
}

/// `[examiner]`: `evidence` (the default), `gate` or `off`, on `agent`
/// (the critic's CLI unless the agent's is named) with `model` (that CLI's
/// cheaper default model unless named, priced like any), over the first goal step that runs pytest.
/// Left to its default, it is off where it cannot run — no goal step runs
/// pytest alone, no sandbox keeps its tests from the agent, its model has
/// no price — and the second value says why; a mode the lead set is
/// refused there instead (exit 2).
fn examiner_setting(
    o: &Origin<'_>,
    file: &ExaminerFile,
    goal: &[GoalStep],
    (agent, critic_agent): (
        &'static dyn crate::agent::Agent,
        &'static dyn crate::agent::Agent,
    ),
    prices: &BTreeMap<String, Price>,
    sandboxed: bool,
    scripts: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<crate::examiner::Settings>, Option<String>), ConfigError> {
    use crate::examiner::{Mode, Settings};
    let (mode, chosen) = match file.mode.as_deref().map(str::trim) {
        None => (Mode::Evidence, false),
        Some("off") => (Mode::Off, true),
        Some("gate") => (Mode::Gate, true),
        Some("evidence") => (Mode::Evidence, true),
        Some(other) => {
            return Err(o.invalid(
                "examiner.mode",
                "`off`, `gate` or `evidence`",
                format!("`{other}`"),
            ))
        }
    };
    if mode == Mode::Off {
        return Ok((None, None));
    }
    // One of the job's two CLIs, run in the critic's world: no tool, a
    // home of its own, emptied after.
    let cli = match file.agent.as_deref().map(str::trim) {
        None => critic_agent,
        Some(name) if name == critic_agent.name() => critic_agent,
        Some(name) if name == agent.name() => agent,
        Some(other) => {
            return Err(o.invalid(
                "examiner.agent",
                &format!(
                    "the agent's or the critic's CLI (`{}` or `{}`): the examiner runs one of the job's two",
                    agent.name(),
                    critic_agent.name()
                ),
                format!("`{other}`"),
            ))
        }
    };
    let model = file
        .model
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or(cli.default_models().0)
        .to_owned();
    let off = |field: &str, expected: &str, found: String, why: String| {
        if chosen {
            Err(o.invalid(field, expected, found))
        } else {
            tracing::info!(why = %why, "the examiner is off for this job");
            Ok((None, Some(why)))
        }
    };
    if crate::agent::Prices::new(cli.prices(), prices)
        .of(&model)
        .is_none()
    {
        return off(
            "examiner.model",
            &format!(
                "a model the examiner's CLI (`{}`) can price (or a `[prices.\"{model}\"]` table)",
                cli.name()
            ),
            format!("`{model}`"),
            format!("its model `{model}` has no price"),
        );
    }
    let Some((run, timeout, framework)) = crate::examiner::command_for(goal, scripts) else {
        return off(
            "examiner.mode",
            "`off` for this goal: the examiner writes pytest or node:test tests, and no goal step is one pytest or `node --test` command",
            format!("`{}`", mode.as_str()),
            "it writes pytest or node:test tests, and no goal step is one pytest or `node --test` command".into(),
        );
    };
    if !sandboxed && !chosen {
        return Ok((
            None,
            Some(
                "the sandbox is off, and it is what keeps the examiner's tests from the agent"
                    .into(),
            ),
        ));
    }
    Ok((
        Some(Settings {
            mode,
            agent: cli.name().to_owned(),
            model,
            run,
            timeout,
            framework,
        }),
        None,
    ))
}

/// The default bound of the whole suite's run.
pub const DEFAULT_SUITE_TIMEOUT: Duration = Duration::from_secs(1200);

/// `[judge] suite`: the lead's command, none (`false`, `""`), or — unset
/// — the whole suite of the first goal step that narrows a runner loopd
/// reads ([`crate::runner::narrowed`]); none when no step narrows one.
fn suite_setting(
    o: &Origin<'_>,
    file: &JudgeFile,
    goal: &[GoalStep],
    scripts: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Suite>, ConfigError> {
    let timeout = duration(
        o,
        "judge.suite_timeout",
        file.suite_timeout.as_deref(),
        DEFAULT_SUITE_TIMEOUT,
    )?;
    let step = |run: String| GoalStep {
        name: "suite".into(),
        report: Preset::infer_through_scripts(&run, scripts),
        run,
        timeout,
    };
    Ok(match &file.suite {
        Some(SuiteFile::Enabled(false)) => None,
        Some(SuiteFile::Command(c)) if c.trim().is_empty() => None,
        Some(SuiteFile::Command(c)) => Some(Suite {
            step: step(c.trim().to_owned()),
            inferred_from: None,
        }),
        Some(SuiteFile::Enabled(true)) | None => {
            let found = goal
                .iter()
                .find_map(|g| crate::runner::narrowed(&g.run).map(|run| (g, run)));
            match (found, &file.suite) {
                (Some((g, run)), _) => Some(Suite {
                    step: step(run),
                    inferred_from: Some(g.name.clone()),
                }),
                (None, Some(_)) => {
                    return Err(o.invalid(
                        "judge.suite",
                        "the whole suite's command line (`true` infers it only from a goal step that narrows pytest, go test or node --test)",
                        "true",
                    ))
                }
                (None, None) => None,
            }
        }
    })
}

/// A held-out step as the file says it: the step, its `files`, its `ref`.
type HeldOutFile = (GoalStep, Option<PathBuf>, Option<String>);

/// The held-out steps' directories: `--held-out` over each step's
/// `files` (relative to the configuration file), each an existing
/// directory outside the repository that does not hold it either — what
/// the sandbox hides must not be where the job works.
fn held_out_steps<'a>(
    origin: &dyn Fn(bool) -> Origin<'a>,
    steps: Vec<HeldOutFile>,
    flag: Option<&Path>,
    config_dir: &Path,
    repo_root: &Path,
) -> Result<Vec<HeldOutStep>, ConfigError> {
    let repo = repo_root
        .canonicalize()
        .unwrap_or_else(|_| repo_root.to_path_buf());
    let mut out = Vec::new();
    for (step, files, git_ref) in steps {
        let from_flag = flag.is_some();
        let o = origin(from_flag);
        let field = if from_flag {
            "held-out".to_owned()
        } else {
            format!("goal (held-out step `{}`).files", step.name)
        };
        let Some(dir) = flag.map(Path::to_path_buf).or(files) else {
            return Err(o.invalid(
                &field,
                "the directory of the held-out tests, outside the repository (or pass `--held-out DIR`)",
                "nothing",
            ));
        };
        let dir = if dir.is_absolute() {
            dir
        } else if from_flag {
            std::env::current_dir().map(|d| d.join(&dir)).unwrap_or(dir)
        } else {
            config_dir.join(dir)
        };
        let full = match dir.canonicalize() {
            Ok(p) if p.is_dir() => p,
            _ => {
                return Err(o.invalid(
                    &field,
                    "an existing directory",
                    format!("`{}`", dir.display()),
                ))
            }
        };
        // A ref of a repository: pinned to its commit for the whole job.
        let ref_field = format!("goal (held-out step `{}`).ref", step.name);
        let commit = match &git_ref {
            None => None,
            Some(r) => Some(crate::goal::held_out::pin_ref(&full, r).map_err(|why| {
                o.invalid(
                    &ref_field,
                    "a ref of the git repository `files` names, of at most 10,000 files and 256 MiB",
                    format!("`{r}` ({why})"),
                )
            })?),
        };
        // The agent runs git on the job's repository: a commit it can reach
        // there is a held-out test it can print.
        if let (Some(r), Some(c)) = (&git_ref, &commit) {
            if let Some(why) = crate::goal::held_out::reachable_from_job(&full, repo_root, c) {
                let (file, field) = o.field(&ref_field);
                return Err(ConfigError::HeldOutReachable {
                    file,
                    field,
                    git_ref: r.clone(),
                    why,
                });
            }
        }
        let limits = if commit.is_some() {
            Ok(())
        } else {
            crate::goal::held_out::within_limits(&full)
        };
        if let Err(why) = limits {
            return Err(o.invalid(
                &field,
                &format!("a directory of at most {} files and {} MiB (loopd copies it for every held-out run)", crate::goal::held_out::MAX_FILES, crate::goal::held_out::MAX_BYTES >> 20),
                format!("`{}` ({why})", full.display()),
            ));
        }
        if full.starts_with(&repo) || repo.starts_with(&full) {
            return Err(o.invalid(
                &field,
                "a directory outside the repository that does not hold it (the agent reads the whole repository)",
                format!("`{}`", full.display()),
            ));
        }
        out.push(HeldOutStep {
            step,
            files: full,
            commit,
        });
    }
    Ok(out)
}

/// `[prices."model"]`: prices over the agents' own tables, all four
/// kinds of token each.
fn price_overrides(
    o: &Origin<'_>,
    table: &BTreeMap<String, PriceFile>,
) -> Result<BTreeMap<String, Price>, ConfigError> {
    let mut prices = BTreeMap::new();
    for (model, p) in table {
        let field = |k: &str| format!("prices.\"{model}\".{k}");
        let get = |k: &str, v: Option<f64>| match v {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            Some(x) => Err(o.invalid(
                &field(k),
                "a price in USD per million tokens (0 or more)",
                x,
            )),
            None => Err(o.invalid(
                &field(k),
                "a price in USD per million tokens",
                "nothing (all four of input, output, cache_read, cache_write are needed)",
            )),
        };
        let price = Price {
            input: get("input", p.input)?,
            output: get("output", p.output)?,
            cache_read: get("cache_read", p.cache_read)?,
            cache_write: get("cache_write", p.cache_write)?,
        };
        prices.insert(model.clone(), price);
    }
    Ok(prices)
}

/// The caps: budget, turns, tokens and the three timeouts, each from its
/// flag or the file, checked.
fn caps<'a>(
    flags: &JobFlags,
    file: &ConfigFile,
    origin: &dyn Fn(bool) -> Origin<'a>,
) -> Result<Caps, ConfigError> {
    let (v, f) = pick(flags.budget_usd, file.budget_usd);
    let budget_usd = match v {
        None => DEFAULT_BUDGET_USD,
        Some(x) if x.is_finite() && x > 0.0 => x,
        Some(x) => {
            return Err(origin(f).invalid("budget_usd", "a positive number of US dollars", x))
        }
    };
    let (v, f) = pick(flags.max_turns, file.max_turns);
    let max_turns = positive(&origin(f), "max_turns", v, DEFAULT_MAX_TURNS)?;
    let (v, f) = pick(flags.max_tokens, file.max_tokens);
    let max_tokens = positive(&origin(f), "max_tokens", v, DEFAULT_MAX_TOKENS)?;
    let (v, f) = pick(flags.timeout.clone(), file.timeout.clone());
    let timeout = duration(&origin(f), "timeout", v.as_deref(), DEFAULT_TIMEOUT)?;
    let (v, f) = pick(flags.attempt_timeout.clone(), file.attempt_timeout.clone());
    let attempt_timeout = duration(
        &origin(f),
        "attempt_timeout",
        v.as_deref(),
        DEFAULT_ATTEMPT_TIMEOUT,
    )?;
    let (v, f) = pick(flags.idle_timeout.clone(), file.idle_timeout.clone());
    let idle_timeout = duration(
        &origin(f),
        "idle_timeout",
        v.as_deref(),
        DEFAULT_IDLE_TIMEOUT,
    )?;
    Ok(Caps {
        limits: crate::guard::caps::Limits {
            budget_usd,
            max_turns,
            max_tokens,
        },
        timeout,
        attempt_timeout,
        idle_timeout,
    })
}

/// `[guard]`: the stuck and progress guards' settings, checked.
fn guard_settings(o: &Origin<'_>, g: GuardFile) -> Result<GuardSettings, ConfigError> {
    let defaults = GuardSettings::default();
    let stuck_window = positive(
        o,
        "guard.stuck_window",
        g.stuck_window,
        defaults.stuck_window as u64,
    )? as usize;
    let stuck_repeat = positive(
        o,
        "guard.stuck_repeat",
        g.stuck_repeat,
        defaults.stuck_repeat as u64,
    )? as usize;
    if stuck_repeat < 2 || stuck_repeat > stuck_window {
        return Err(o.invalid(
            "guard.stuck_repeat",
            &format!("an integer from 2 to guard.stuck_window ({stuck_window})"),
            stuck_repeat,
        ));
    }
    let strict_from = match g.strict_from {
        None => defaults.strict_from,
        Some(n) if (0..=i64::from(u32::MAX)).contains(&n) => n as u32,
        Some(n) => return Err(o.invalid("guard.strict_from", "an attempt number (0: never)", n)),
    };
    let poll_patterns = g.poll_patterns.unwrap_or(defaults.poll_patterns);
    let grace = duration(o, "guard.grace", g.grace.as_deref(), defaults.grace)?;

    let max_diff_kb = positive(o, "guard.max_diff_kb", g.max_diff_kb, defaults.max_diff_kb)?;
    if max_diff_kb > crate::guard::MAX_MAX_DIFF_KB {
        return Err(o.invalid(
            "guard.max_diff_kb",
            &format!("a size in KiB from 1 to {}", crate::guard::MAX_MAX_DIFF_KB),
            max_diff_kb,
        ));
    }
    Ok(GuardSettings {
        stuck_window,
        stuck_repeat,
        poll_patterns,
        grace,
        escalation: g.escalation.unwrap_or(defaults.escalation),
        nudge: g.nudge.unwrap_or(defaults.nudge),
        strict_from,
        max_diff_kb,
        held_out_feedback: match g.held_out_feedback.as_deref() {
            None => defaults.held_out_feedback,
            Some(v) => crate::goal::held_out::Feedback::parse(v).ok_or_else(|| {
                o.invalid(
                    "guard.held_out_feedback",
                    "one of `ids`, `none`, `full`",
                    format!("`{v}`"),
                )
            })?,
        },
    })
}

/// `[protect]`: what besides the tests no agent may change, and the
/// lead's exceptions, checked. `judge` are the judge's own files as
/// (repository-relative path, what it is): no `allow` entry may reach one.
fn protect_settings(
    o: &Origin<'_>,
    p: ProtectFile,
    judge: &[(String, &str)],
) -> Result<ProtectSettings, ConfigError> {
    let tests = match p.tests.as_deref() {
        None => TestsMode::default(),
        Some(v) => TestsMode::parse(v).ok_or_else(|| {
            o.invalid(
                "protect.tests",
                "`frozen` (no existing test file changes) or `append_only` (new tests may be added to one)",
                format!("`{v}`"),
            )
        })?,
    };
    let judge: Vec<(&str, &str)> = judge.iter().map(|(p, w)| (p.as_str(), *w)).collect();
    let mut allow = Vec::new();
    for (i, entry) in p.allow.unwrap_or_default().iter().enumerate() {
        let normal = normal_allow_entry(entry);
        crate::judges::tamper::check_allow(&normal, &judge).map_err(|why| {
            let (file, field) = o.field(&format!("protect.allow[{i}]"));
            ConfigError::Allow {
                file,
                field,
                entry: entry.clone(),
                why,
            }
        })?;
        allow.push(normal);
    }
    let protect = ProtectSettings {
        paths: p.paths.unwrap_or_default(),
        skip_markers: p.skip_markers,
        allow_submodules: p.allow_submodules.unwrap_or(false),
        tests,
        allow,
    };
    for (i, p) in protect.paths.iter().enumerate() {
        if p.trim().is_empty() || globset::Glob::new(p).is_err() {
            return Err(o.invalid(
                &format!("protect.paths[{i}]"),
                "a glob such as `Makefile` or `ci/**`",
                format!("`{p}`"),
            ));
        }
    }
    for (i, m) in protect.skip_markers.iter().flatten().enumerate() {
        if regex::Regex::new(m).is_err() {
            return Err(o.invalid(
                &format!("protect.skip_markers[{i}]"),
                "a regular expression",
                format!("`{m}`"),
            ));
        }
    }
    Ok(protect)
}

/// An `allow` entry as the policy matches it: repository paths are
/// matched without a leading `./`, so `./tests/x.py` means `tests/x.py`.
/// `.` components, repeated and trailing slashes go too (`tests//x.py/`
/// is `tests/x.py`); an absolute entry is kept as written, to be refused.
fn normal_allow_entry(entry: &str) -> String {
    let e = entry.trim();
    if e.starts_with('/') {
        return e.to_owned();
    }
    crate::judges::tamper::normal_entry(e)
}

/// The judge's own files inside the repository, as `allow` is checked
/// against them: `loopd.toml` at the root (whichever file this job reads),
/// the configuration file and the rubric when they lie in the repository.
fn judge_files(
    repo_root: &Path,
    config: Option<&Path>,
    rubric: Option<&Path>,
) -> Vec<(String, &'static str)> {
    let mut out = vec![(CONFIG_FILE.to_owned(), "the job's configuration")];
    for (path, what) in [(config, "the job's configuration"), (rubric, "the rubric")] {
        for rel in path.into_iter().flat_map(|p| repo_relative(p, repo_root)) {
            if !out.iter().any(|(p, _)| *p == rel) {
                out.push((rel, what));
            }
        }
    }
    out
}

/// `path` relative to `repo_root`, when it lies inside: as written (`.`
/// and `..` components resolved), and with both resolved through their
/// links — a rubric named through a link (`rub.toml` → `rules/r.toml`) or
/// through `ci/../rubric.toml` is both the name and the file.
fn repo_relative(path: &Path, repo_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rel) = path.strip_prefix(repo_root) {
        let mut parts: Vec<String> = Vec::new();
        for c in rel.components() {
            match c {
                std::path::Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
                std::path::Component::ParentDir => {
                    parts.pop();
                }
                _ => {}
            }
        }
        out.push(parts.join("/"));
    }
    if let (Ok(p), Ok(r)) = (path.canonicalize(), repo_root.canonicalize()) {
        if let Ok(rel) = p.strip_prefix(r) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    out.retain(|r| !r.is_empty());
    out.dedup();
    out
}

/// `[sandbox]`: what a job's processes may read, write and reach; a
/// `--require-sandbox` flag or `require = true` refuses to run without it.
fn sandbox_settings(
    o: &Origin<'_>,
    s: SandboxFile,
    require_flag: bool,
    env_flags: &[String],
) -> Result<SandboxSettings, ConfigError> {
    let secrets = crate::agent::secret_vars();
    let mut env = Vec::new();
    for (i, name) in s.env.iter().flatten().enumerate() {
        if let Some(why) = crate::sandbox::env::refused(name, &secrets) {
            return Err(o.invalid(
                &format!("sandbox.env[{i}]"),
                &format!("a variable a job may see, not this one: {why}"),
                format!("`{name}`"),
            ));
        }
        env.push(name.clone());
    }
    for name in env_flags {
        if let Some(why) = crate::sandbox::env::refused(name, &secrets) {
            return Err(Origin {
                file: o.file,
                from_flag: true,
            }
            .invalid(
                "env",
                &format!("a variable a job may see, not this one: {why}"),
                format!("`{name}`"),
            ));
        }
        if !env.contains(name) {
            env.push(name.clone());
        }
    }
    let extra = |paths: Option<Vec<PathBuf>>, field: &str| -> Result<Vec<PathBuf>, ConfigError> {
        let paths = paths.unwrap_or_default();
        for (i, p) in paths.iter().enumerate() {
            if !p.is_absolute() {
                return Err(o.invalid(
                    &format!("sandbox.{field}[{i}]"),
                    "an absolute path",
                    p.display().to_string(),
                ));
            }
        }
        Ok(paths)
    };
    let sandbox = SandboxSettings {
        enabled: s.enabled.unwrap_or(true),
        require: require_flag || s.require.unwrap_or(false),
        read: extra(s.read, "read")?,
        read_write: extra(s.read_write, "read_write")?,
        env,
        network: match s.network.as_deref() {
            None => None,
            Some("open") => Some(crate::sandbox::Network::Open),
            Some("gateway-only") => Some(crate::sandbox::Network::GatewayOnly),
            Some(other) => {
                return Err(o.invalid(
                    "sandbox.network",
                    "`open` or `gateway-only`",
                    format!("`{other}`"),
                ))
            }
        },
    };
    if !sandbox.enabled && sandbox.network == Some(crate::sandbox::Network::GatewayOnly) {
        return Err(o.invalid(
            "sandbox.network",
            "`open` when `enabled = false` (only the sandbox can confine the network)",
            "`gateway-only`",
        ));
    }
    Ok(sandbox)
}

/// `[ci]`: the risk policy of `loopd ci`, checked.
fn ci_policy(o: &Origin<'_>, c: &CiFile) -> Result<RiskPolicy, ConfigError> {
    let mut policy = RiskPolicy::default();
    if let Some(x) = c.budget_usd {
        if !(x.is_finite() && x > 0.0) {
            return Err(o.invalid("ci.budget_usd", "a positive number of US dollars", x));
        }
        policy.budget_usd = x;
    }
    if let Some(n) = c.max_attempts {
        policy.max_attempts = positive(o, "ci.max_attempts", Some(n), 1)? as u32;
    }
    if let Some(n) = c.max_files {
        policy.max_files = positive(o, "ci.max_files", Some(n), 1)? as usize;
    }
    if let Some(n) = c.max_lines {
        policy.max_lines = positive(o, "ci.max_lines", Some(n), 1)? as usize;
    }
    if let Some(list) = &c.never_touch {
        for (i, g) in list.iter().enumerate() {
            if globset::Glob::new(g).is_err() {
                return Err(o.invalid(
                    &format!("ci.never_touch[{i}]"),
                    "a glob such as `.github/**`",
                    format!("`{g}`"),
                ));
            }
        }
        policy.never_touch = list.clone();
    }
    policy.allow_new_dependencies = c.allow_new_dependencies.unwrap_or(false);
    policy.allow_forks = c.allow_forks.unwrap_or(false);
    if let Some(n) = c.max_rounds {
        policy.max_rounds = positive(o, "ci.max_rounds", Some(n), 1)? as u32;
    }
    if let Some(x) = c.pr_budget_usd {
        if !(x.is_finite() && x > 0.0) {
            return Err(o.invalid("ci.pr_budget_usd", "a positive number of US dollars", x));
        }
        policy.pr_budget_usd = x;
    }
    if let Some(list) = &c.trusted {
        for (i, a) in list.iter().enumerate() {
            if !crate::judges::risk::ASSOCIATIONS.contains(&a.as_str()) {
                return Err(o.invalid(
                    &format!("ci.trusted[{i}]"),
                    "one of GitHub's author associations: `OWNER`, `MEMBER`, `COLLABORATOR`, `CONTRIBUTOR`, `FIRST_TIME_CONTRIBUTOR`, `FIRST_TIMER`, `NONE`",
                    format!("`{a}`"),
                ));
            }
        }
        policy.trusted = list.clone();
    }
    if let Some(l) = &c.follow_label {
        if l.trim().is_empty() || l.len() > 50 {
            return Err(o.invalid(
                "ci.follow_label",
                "a label name of 1 to 50 characters",
                format!("`{l}`"),
            ));
        }
        policy.follow_label = l.clone();
    }
    Ok(policy)
}

/// `[approval]`: whether an accepted daemon job waits for a human, and
/// what approving it does.
fn approval_settings(o: &Origin<'_>, a: &ApprovalFile) -> Result<ApprovalSettings, ConfigError> {
    let action = match a.action.as_deref() {
        None | Some("merge") => ApprovalAction::Merge,
        Some("pull_request") => ApprovalAction::PullRequest,
        Some(other) => {
            return Err(o.invalid(
                "approval.action",
                "`merge` or `pull_request`",
                format!("`{other}`"),
            ))
        }
    };
    Ok(ApprovalSettings {
        required: a.required.unwrap_or(false),
        action,
        merge_into: non_empty(o, "approval.merge_into", a.merge_into.clone(), "main")?,
        remote: non_empty(o, "approval.remote", a.remote.clone(), "origin")?,
        base: non_empty(o, "approval.base", a.base.clone(), "main")?,
    })
}

/// `[[notify]]`: the webhooks told of each ending (their URLs are
/// secrets: never shown in an error).
fn webhooks(o: &Origin<'_>, list: &[NotifyFile]) -> Result<Vec<Webhook>, ConfigError> {
    let mut notify = Vec::new();
    for (i, n) in list.iter().enumerate() {
        match n.url.as_deref().map(str::trim) {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                notify.push(Webhook { url: u.to_owned() })
            }
            _ => {
                return Err(o.invalid(
                    &format!("notify[{i}].url"),
                    "an http:// or https:// URL",
                    "something else (not shown: webhook URLs are secrets)",
                ))
            }
        }
    }
    Ok(notify)
}

/// Where a value came from, for error messages.
struct Origin<'a> {
    file: &'a Path,
    from_flag: bool,
}

impl Origin<'_> {
    fn field(&self, field: &str) -> (PathBuf, String) {
        if self.from_flag {
            (
                PathBuf::from("command line"),
                format!("--{}", field.replace('_', "-")),
            )
        } else {
            (self.file.to_path_buf(), field.to_owned())
        }
    }

    fn invalid(&self, field: &str, expected: &str, found: impl ToString) -> ConfigError {
        let (file, field) = self.field(field);
        ConfigError::from(FileError::Invalid {
            file,
            field,
            expected: expected.to_owned(),
            found: found.to_string(),
        })
    }
}

fn pick<T>(flag: Option<T>, file: Option<T>) -> (Option<T>, bool) {
    match flag {
        Some(v) => (Some(v), true),
        None => (file, false),
    }
}

fn positive(
    origin: &Origin,
    field: &str,
    v: Option<i64>,
    default: u64,
) -> Result<u64, ConfigError> {
    match v {
        None => Ok(default),
        Some(n) if n >= 1 => Ok(n as u64),
        Some(n) => Err(origin.invalid(field, "a positive integer", n)),
    }
}

fn duration(
    origin: &Origin,
    field: &str,
    v: Option<&str>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) => match humantime::parse_duration(s.trim()) {
            Ok(d) if !d.is_zero() => Ok(d),
            _ => Err(origin.invalid(
                field,
                "a duration such as `90s`, `20m` or `1h`",
                format!("`{s}`"),
            )),
        },
    }
}

fn non_empty(
    origin: &Origin,
    field: &str,
    v: Option<String>,
    default: &str,
) -> Result<String, ConfigError> {
    match v {
        None => Ok(default.to_owned()),
        Some(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Some(_) => Err(origin.invalid(field, "a non-empty string", "\"\"")),
    }
}

/// The default state dir: `$XDG_STATE_HOME/loopd`, else `~/.local/state/loopd`.
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("loopd");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/loopd")
}

/// Find `name` on `PATH` (a path with a slash is taken as given).
pub fn find_on_path(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// For the standalone hook: the `[protect]` settings of the repository's
/// `loopd.toml` (if any) and the files that protect themselves — the config
/// and its rubric.
pub fn protect_of_repo(
    repo_root: &Path,
) -> Result<(ProtectSettings, Vec<(PathBuf, String)>), ConfigError> {
    let path = repo_root.join(CONFIG_FILE);
    if !path.is_file() {
        return Ok((ProtectSettings::default(), Vec::new()));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| {
        ConfigError::from(FileError::Read {
            file: path.clone(),
            source,
        })
    })?;
    let file: ConfigFile = toml::from_str(text.trim_start_matches('\u{feff}')).map_err(|e| {
        ConfigError::from(FileError::Parse {
            file: path.clone(),
            message: e.to_string(),
        })
    })?;
    let mut own = vec![(path, "the job's configuration".to_owned())];
    if let Some(r) = file.rubric {
        own.push((
            if r.is_absolute() {
                r
            } else {
                repo_root.join(r)
            },
            "the rubric".to_owned(),
        ));
    }
    let judge = judge_files(repo_root, None, own.get(1).map(|(p, _)| p.as_path()));
    let judge: Vec<(&str, &str)> = judge.iter().map(|(p, w)| (p.as_str(), *w)).collect();
    // The standalone hook stays strict: an entry it cannot take lifts
    // nothing (`loopd check` says why).
    let allow = file
        .protect
        .allow
        .unwrap_or_default()
        .iter()
        .map(|e| normal_allow_entry(e))
        .filter(|e| match crate::judges::tamper::check_allow(e, &judge) {
            Ok(()) => true,
            Err(why) => {
                tracing::warn!(entry = %e, %why, "a `[protect] allow` entry is refused; it lifts nothing");
                false
            }
        })
        .collect();
    Ok((
        ProtectSettings {
            paths: file.protect.paths.unwrap_or_default(),
            skip_markers: file.protect.skip_markers,
            allow_submodules: file.protect.allow_submodules.unwrap_or(false),
            // The standalone hook stays strict: an unreadable value is frozen.
            tests: file
                .protect
                .tests
                .as_deref()
                .and_then(TestsMode::parse)
                .unwrap_or_default(),
            allow,
        },
        own,
    ))
}

/// The tools the agent may use when nothing is configured.
pub fn default_allowed_tools(goal: &[GoalStep]) -> Vec<String> {
    let mut tools: Vec<String> = DEFAULT_TOOLS.iter().map(|s| s.to_string()).collect();
    tools.extend(goal.iter().map(|s| format!("Bash({} *)", s.run)));
    tools
}

impl Job {
    /// What the job is judged by and may spend, as its journal pins it
    /// ([`crate::journal::Spec`]): the task, the goal and held-out steps,
    /// the caps, and the digests of the configuration file and the rubric.
    pub fn spec(&self) -> crate::journal::Spec {
        use crate::journal::{Spec, SpecHeldOut, SpecStep};
        use sha2::Digest;
        let sha256 = |bytes: &[u8]| hex::encode(sha2::Sha256::digest(bytes));
        let text = |d: Duration| humantime::format_duration(d).to_string();
        let step = |s: &GoalStep| SpecStep {
            name: s.name.clone(),
            run: s.run.clone(),
            timeout: text(s.timeout),
            report: s.report.map(|p| p.name().to_owned()),
        };
        Spec {
            task: self.task.clone(),
            goal: self.goal.iter().map(step).collect(),
            held_out: self
                .held_out
                .iter()
                .map(|h| SpecHeldOut {
                    step: step(&h.step),
                    files: h.files.clone(),
                    commit: h.commit.clone(),
                })
                .collect(),
            suite: self.suite.as_ref().map(|s| step(&s.step)),
            limits: self.caps.limits,
            max_attempts: self.max_attempts,
            timeout: text(self.caps.timeout),
            attempt_timeout: text(self.caps.attempt_timeout),
            idle_timeout: text(self.caps.idle_timeout),
            config_sha256: self.config_text.as_deref().map(|t| sha256(t.as_bytes())),
            rubric_sha256: sha256(self.rubric.text.as_bytes()),
        }
    }

    /// The job's caps as the guards check them.
    /// The environment every process of the job starts from: the
    /// allow-list of [`crate::sandbox::env`] applied to loopd's own, and
    /// the variables the lead named. Each role adds its own `HOME` and
    /// `TMPDIR`.
    pub fn environment(&self) -> crate::sandbox::env::Environment {
        crate::sandbox::env::Environment::allow_listed(self.host.vars(), &self.sandbox.env)
    }

    pub fn budget(&self) -> crate::guard::caps::Budget {
        crate::guard::caps::Budget::new(self.caps.clone())
    }

    /// The agent CLI of the agent sessions and the critic's.
    pub fn agents(&self) -> (&'static dyn Agent, &'static dyn Agent) {
        let get = |name: &str| {
            crate::agent::by_name(name).expect("a job's agents are checked when it is resolved")
        };
        (get(&self.agent), get(&self.critic_agent))
    }

    /// Find the agent's and the critic's binaries on `PATH` (a path with a
    /// slash is taken as given): the error names the one missing, with how
    /// to install it.
    pub fn locate_clis(&mut self) -> Result<(), (String, String)> {
        let (agent, critic) = self.agents();
        for (bin, cli, flag) in [
            (
                &mut self.agent_bin,
                agent,
                "--agent-bin PATH` / set `LOOPD_AGENT_BIN",
            ),
            (
                &mut self.critic_bin,
                critic,
                "--critic-bin PATH` / set `LOOPD_CRITIC_BIN",
            ),
        ] {
            match find_on_path(bin) {
                Some(found) => *bin = found,
                None => {
                    return Err((
                        format!("the {} CLI `{}` was not found", cli.name(), bin.display()),
                        format!("install it with `{}`, or pass `{flag}`", cli.install()),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Resolve `loopd.toml` (if any) and the flags into a job for the
    /// repository at `repo_root` (already located by the caller).
    pub fn resolve(flags: &JobFlags, repo_root: &Path) -> Result<Job, ConfigError> {
        let (config_path, file, config_text) = read_config(flags, repo_root)?;
        let file_name = config_path
            .clone()
            .unwrap_or_else(|| repo_root.join(CONFIG_FILE));
        let origin = |from_flag| Origin {
            file: &file_name,
            from_flag,
        };

        // Read before the fields below are taken out of `file`.
        let caps = caps(flags, &file, &origin)?;

        let (task, from_flag) = pick(flags.task.clone(), file.task);
        let task = match task {
            Some(t) if !t.trim().is_empty() => t.trim().to_owned(),
            Some(_) => return Err(origin(from_flag).invalid("task", "a non-empty string", "\"\"")),
            None => return Err(ConfigError::NoTask { file: file_name }),
        };

        let package = package_scripts(repo_root);
        let scripts = |name: &str| package.get(name).cloned();
        let (file_goal, held_out) = goal_from_file(&origin(false), file.goal, &scripts)?;
        let goal = if !flags.goal.is_empty() {
            goal_from_flags(&origin(true), &flags.goal, &scripts)?
        } else {
            file_goal
        };
        let config_dir = config_path
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(repo_root)
            .to_path_buf();
        let held_out = held_out_steps(
            &origin,
            held_out,
            flags.held_out.as_deref(),
            &config_dir,
            repo_root,
        )?;
        if goal.is_empty() {
            return Err(ConfigError::NoGoal { file: file_name });
        }

        let (rubric_path, from_flag) = pick(flags.rubric.clone(), file.rubric);
        let rubric = match rubric_path {
            None => Rubric::embedded_default(),
            Some(p) => {
                let base = if from_flag {
                    std::env::current_dir().unwrap_or_else(|_| repo_root.to_path_buf())
                } else {
                    config_path
                        .as_deref()
                        .and_then(Path::parent)
                        .unwrap_or(repo_root)
                        .to_path_buf()
                };
                let full = if p.is_absolute() { p } else { base.join(p) };
                if !full.is_file() {
                    return Err(origin(from_flag).invalid(
                        "rubric",
                        "a readable rubric file",
                        format!("`{}` (no such file)", full.display()),
                    ));
                }
                Rubric::load(&full)?
            }
        };
        let rubric_source = rubric.source.to_string();

        let (v, f) = pick(flags.max_attempts, file.max_attempts);
        let max_attempts = positive(&origin(f), "max_attempts", v, DEFAULT_MAX_ATTEMPTS as u64)?;
        let max_attempts = u32::try_from(max_attempts)
            .map_err(|_| origin(f).invalid("max_attempts", "at most 4294967295", max_attempts))?;

        let agent_named = |field: &str, v: Option<String>, f: bool| {
            let name = v.unwrap_or_else(|| DEFAULT_AGENT.to_owned());
            crate::agent::by_name(name.trim()).ok_or_else(|| {
                origin(f).invalid(
                    field,
                    &format!(
                        "one of {}",
                        crate::agent::names()
                            .iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    format!("`{name}`"),
                )
            })
        };
        let (v, f) = pick(flags.agent.clone(), file.agent);
        let agent = agent_named("agent", v, f)?;
        let (v, f) = pick(flags.critic_agent.clone(), file.critic_agent);
        let critic_agent = match v {
            None => agent,
            v => agent_named("critic_agent", v, f)?,
        };
        let (v, f) = pick(flags.agent_model.clone(), file.agent_model);
        let agent_model = non_empty(&origin(f), "agent_model", v, agent.default_models().0)?;
        let (v, f) = pick(flags.critic_model.clone(), file.critic_model);
        let critic_model = non_empty(
            &origin(f),
            "critic_model",
            v,
            critic_agent.default_models().1,
        )?;
        let prices = price_overrides(&origin(false), &file.prices)?;
        // Default-deny on cost: a model loopd cannot price is a model whose
        // calls it cannot cap.
        for (field, model, cli, from_flag) in [
            (
                "agent_model",
                &agent_model,
                agent,
                flags.agent_model.is_some(),
            ),
            (
                "critic_model",
                &critic_model,
                critic_agent,
                flags.critic_model.is_some(),
            ),
        ] {
            if crate::agent::Prices::new(cli.prices(), &prices)
                .of(model)
                .is_none()
            {
                let (file, _) = origin(from_flag).field(field);
                return Err(ConfigError::Unpriced {
                    file,
                    field: field.to_owned(),
                    model: model.clone(),
                    agent: cli.name(),
                    config: file_name.clone(),
                });
            }
        }

        let (v, f) = pick(flags.allowed_tools.clone(), file.allowed_tools);
        let allowed_tools = match v {
            None => default_allowed_tools(&goal),
            Some(list) => {
                let list: Vec<String> = list
                    .into_iter()
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
                    .collect();
                if list.is_empty() {
                    return Err(origin(f).invalid(
                        "allowed_tools",
                        "at least one tool name",
                        "an empty list",
                    ));
                }
                list
            }
        };

        let o = origin(false);
        let guard = guard_settings(&o, file.guard)?;
        let suite = suite_setting(&o, &file.judge, &goal, &scripts)?;
        let sandbox = sandbox_settings(&o, file.sandbox, flags.require_sandbox, &flags.env)?;
        let (examiner, examiner_off) = examiner_setting(
            &o,
            &file.examiner,
            &goal,
            (agent, critic_agent),
            &prices,
            sandbox.enabled,
            &scripts,
        )?;
        let rubric_file = match &rubric.source {
            crate::rubric::RubricSource::File(p) => Some(p.as_path()),
            crate::rubric::RubricSource::Embedded => None,
        };
        let judge = judge_files(repo_root, config_path.as_deref(), rubric_file);
        let mut protect = protect_settings(&o, file.protect, &judge)?;
        // The examiner's directory is its own: a change that adds a file
        // there (a copy of the code, an `__init__.py` that patches it) would
        // sit beside its tests, imported before the code they test.
        if examiner.is_some() {
            protect.paths.push(format!("{}/**", crate::examiner::DIR));
        }
        if !sandbox.enabled && examiner.is_some() {
            return Err(o.invalid(
                "sandbox.enabled",
                "`true` while the examiner is on: the sandbox is what keeps its tests from the agent",
                "false",
            ));
        }
        if !sandbox.enabled && !held_out.is_empty() {
            return Err(o.invalid(
                "sandbox.enabled",
                "`true` while goal steps are held out: the sandbox is what keeps their files from the agent",
                "false",
            ));
        }

        let ci = ci_policy(&o, &file.ci)?;
        let approval = approval_settings(&o, &file.approval)?;
        let notify = webhooks(&o, &file.notify)?;

        let agent_bin = flags
            .agent_bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(agent.program()));
        let critic_bin = match &flags.critic_bin {
            Some(b) => b.clone(),
            None if critic_agent.name() == agent.name() => agent_bin.clone(),
            None => PathBuf::from(critic_agent.program()),
        };
        let state_dir = flags.state_dir.clone().unwrap_or_else(default_state_dir);
        let state_dir = if state_dir.is_absolute() {
            state_dir
        } else {
            std::env::current_dir()
                .map(|d| d.join(&state_dir))
                .unwrap_or(state_dir)
        };
        // The state dir inside a held-out directory would be copied into
        // the judge-only tree it lives in (and the job's runs read back).
        let state_canon = crate::util::canonical_or_nearest(&state_dir);
        if let Some(h) = held_out.iter().find(|h| state_canon.starts_with(&h.files)) {
            return Err(origin(flags.held_out.is_some()).invalid(
                &format!("goal (held-out step `{}`).files", h.step.name),
                "a directory that does not hold loopd's state dir",
                format!(
                    "`{}` (the state dir is `{}`)",
                    h.files.display(),
                    state_dir.display()
                ),
            ));
        }

        Ok(Job {
            host: std::sync::Arc::new(crate::util::Host::process()),
            repo: repo_root.to_path_buf(),
            config_file: config_path,
            task,
            goal,
            held_out,
            suite,
            examiner,
            examiner_off,
            rubric,
            rubric_source,
            max_attempts,
            allow_green: flags.allow_green || file.allow_green.unwrap_or(false),
            agent: agent.name().to_owned(),
            critic_agent: critic_agent.name().to_owned(),
            agent_model,
            critic_model,
            allowed_tools,
            agent_bin,
            critic_bin,
            prices,
            state_dir,
            caps,
            guard,
            protect,
            ci,
            approval,
            sandbox,
            notify,
            config_text,
        })
    }
}

/// Durations in JSON as humantime strings (`"20m"`), the way users write them.
#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_with(toml: &str, flags: JobFlags) -> Result<Job, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(CONFIG_FILE), toml).expect("write config");
        Job::resolve(&flags, dir.path())
    }

    const OK: &str = "task = \"fix it\"\n[[goal]]\nrun = \"python3 -m pytest -q\"\n[[goal]]\nname = \"lint\"\nrun = \"ruff check .\"\ntimeout = \"2m\"\n";

    #[test]
    fn agents_models_and_prices_resolve_per_vendor() {
        let job = resolve_with(OK, JobFlags::default()).expect("resolve");
        assert_eq!(
            (job.agent.as_str(), job.critic_agent.as_str()),
            ("claude", "claude")
        );
        let toml = format!("agent = \"codex\"\ncritic_agent = \"claude\"\n{OK}");
        let job = resolve_with(&toml, JobFlags::default()).expect("resolve");
        assert_eq!(
            (job.agent_model.as_str(), job.critic_model.as_str()),
            ("gpt-5-codex", "sonnet")
        );
        assert_eq!(job.agent_bin, PathBuf::from("codex"));
        assert_eq!(job.critic_bin, PathBuf::from("claude"));
        let e =
            resolve_with(&format!("agent = \"gemini\"\n{OK}"), JobFlags::default()).unwrap_err();
        assert!(e.to_string().contains("`claude`, `codex`"), "{e}");
        // A model no table knows is refused, naming the field and the fix.
        let e = resolve_with(
            &format!("agent_model = \"mystery-1\"\n{OK}"),
            JobFlags::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("agent_model") && e.to_string().contains("mystery-1"),
            "{e}"
        );
        assert!(e.hint().expect("hint").contains("[prices.\"mystery-1\"]"));
        let priced = format!("agent_model = \"mystery-1\"\n{OK}[prices.\"mystery-1\"]\ninput = 1\noutput = 2\ncache_read = 0.1\ncache_write = 1.25\n");
        let job = resolve_with(&priced, JobFlags::default()).expect("priced");
        assert_eq!(job.prices["mystery-1"].output, 2.0);
        let partial = format!("{OK}[prices.\"m\"]\ninput = 1\n");
        let e = resolve_with(&partial, JobFlags::default()).unwrap_err();
        assert!(e.to_string().contains("prices.\"m\".output"), "{e}");
        let negative = format!(
            "{OK}[prices.\"m\"]\ninput = -1\noutput = 1\ncache_read = 1\ncache_write = 1\n"
        );
        assert!(resolve_with(&negative, JobFlags::default()).is_err());
    }

    #[test]
    fn held_out_steps_are_checked_and_kept_apart() {
        let outside = tempfile::tempdir().expect("held-out dir");
        let step = |files: &str| {
            format!("{OK}[[goal]]\nname = \"hidden\"\nrun = \"pytest -q hidden\"\nheld_out = true\n{files}")
        };
        let job = resolve_with(
            &format!(
                "{}\n[guard]\nheld_out_feedback = \"none\"\n",
                step(&format!("files = \"{}\"\n", outside.path().display()))
            ),
            JobFlags::default(),
        )
        .expect("resolve");
        assert_eq!(job.goal.len(), 2, "not a visible step");
        assert_eq!(job.held_out.len(), 1);
        assert_eq!(
            job.held_out[0].files,
            outside.path().canonicalize().unwrap()
        );
        assert_eq!(
            job.guard.held_out_feedback,
            crate::goal::held_out::Feedback::None
        );
        // A held-out directory that holds the state dir, or too much.
        let flags = JobFlags {
            state_dir: Some(outside.path().join("state")),
            ..JobFlags::default()
        };
        let with_files = step(&format!("files = \"{}\"\n", outside.path().display()));
        let e = resolve_with(&with_files, flags).expect_err("state dir inside");
        assert!(e.to_string().contains("state dir"), "{e}");
        let big = tempfile::tempdir().expect("big");
        let f = std::fs::File::create(big.path().join("huge.bin")).expect("huge");
        f.set_len(crate::goal::held_out::MAX_BYTES + 1)
            .expect("sparse");
        let e = resolve_with(
            &step(&format!("files = \"{}\"\n", big.path().display())),
            JobFlags::default(),
        )
        .expect_err("too large");
        assert!(e.to_string().contains("MiB"), "{e}");
        // `--held-out` stands in for `files`.
        let mut flags = JobFlags::default();
        flags.over.held_out = Some(outside.path().to_path_buf());
        assert_eq!(
            resolve_with(&step(""), flags).expect("flag").held_out.len(),
            1
        );
        for (toml, field) in [
            (step(""), "files"),
            (step("files = \"/no/such/dir\"\n"), "files"),
            (step("files = \".\"\n"), "files"),
            (
                format!("{OK}[[goal]]\nrun = \"x\"\nfiles = \"/tmp\"\n"),
                "goal[2].files",
            ),
            (
                format!(
                    "{}\n[guard]\nheld_out_feedback = \"all\"\n",
                    step(&format!("files = \"{}\"\n", outside.path().display()))
                ),
                "held_out_feedback",
            ),
            (
                format!(
                    "{}\n[sandbox]\nenabled = false\n",
                    step(&format!("files = \"{}\"\n", outside.path().display()))
                ),
                "sandbox.enabled",
            ),
        ] {
            let e = resolve_with(&toml, JobFlags::default()).expect_err(&toml);
            assert!(e.to_string().contains(field), "{toml}: {e}");
        }
    }

    #[test]
    fn defaults_and_goal_steps() {
        let job = resolve_with(OK, JobFlags::default()).expect("valid");
        assert_eq!(job.max_attempts, 5);
        assert_eq!(job.agent_model, "haiku");
        assert_eq!(job.critic_model, "sonnet");
        assert_eq!(job.goal[0].name, "python3 -m pytest -q");
        assert_eq!(job.goal[1].name, "lint");
        assert_eq!(job.goal[1].timeout, Duration::from_secs(120));
        assert_eq!(
            job.allowed_tools,
            [
                "Read",
                "Edit",
                "Write",
                "Glob",
                "Grep",
                "Bash(python3 -m pytest -q *)",
                "Bash(ruff check . *)"
            ]
        );
    }

    #[test]
    fn flags_override_the_file() {
        let flags = JobFlags {
            over: Overrides {
                max_attempts: Some(2),
                goal: vec!["make test".into()],
                agent_model: Some("sonnet".into()),
                timeout: Some("90s".into()),
                ..Overrides::default()
            },
            ..JobFlags::default()
        };
        let job = resolve_with(OK, flags).expect("valid");
        assert_eq!(job.max_attempts, 2);
        assert_eq!(job.goal.len(), 1);
        assert_eq!(job.goal[0].run, "make test");
        assert_eq!(job.agent_model, "sonnet");
        assert_eq!(job.caps.timeout, Duration::from_secs(90));
    }

    #[test]
    fn bad_values_name_file_and_field() {
        let e = resolve_with(&format!("max_attempts = 0\n{OK}"), JobFlags::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("loopd.toml")
                && e.contains("`max_attempts`")
                && e.contains("positive integer"),
            "{e}"
        );
        let e = resolve_with(
            &format!("idle_timeout = \"soon\"\n{OK}"),
            JobFlags::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`idle_timeout`") && e.contains("`soon`"), "{e}");
        let e = resolve_with(&format!("max_atempts = 3\n{OK}"), JobFlags::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `max_atempts`"), "{e}");
        let flags = JobFlags {
            over: Overrides {
                budget_usd: Some(-1.0),
                ..Overrides::default()
            },
            ..JobFlags::default()
        };
        let e = resolve_with(OK, flags).unwrap_err().to_string();
        assert!(
            e.contains("command line") && e.contains("`--budget-usd`"),
            "{e}"
        );
        let e = resolve_with("[[goal]]\nrun = \"x\"\n", JobFlags::default()).unwrap_err();
        assert!(matches!(e, ConfigError::NoTask { .. }));
        let e = resolve_with("task = \"t\"\n", JobFlags::default()).unwrap_err();
        assert!(matches!(e, ConfigError::NoGoal { .. }));
    }

    #[test]
    fn protect_allow_entries_are_kept_as_the_policy_matches_them() {
        let toml = format!(
            "{OK}[protect]\nallow = [\"tests/test_client.py\", \"./tests/fixtures/*.json\", \" conftest.py \"]\n"
        );
        let job = resolve_with(&toml, JobFlags::default()).expect("valid");
        assert_eq!(
            job.protect.allow,
            [
                "tests/test_client.py",
                "tests/fixtures/*.json",
                "conftest.py"
            ]
        );
        let job = resolve_with(OK, JobFlags::default()).expect("valid");
        assert!(job.protect.allow.is_empty(), "no exception unless said");
    }

    #[test]
    fn a_protect_allow_entry_that_is_no_repository_path_is_refused_by_index() {
        for (entry, why) in [
            ("", "is empty"),
            ("   ", "is empty"),
            ("/etc/passwd", "is an absolute path"),
            ("../x", "has a `..` component"),
            ("tests/../../x.py", "has a `..` component"),
            ("tests/[x.py", "is not a valid glob"),
        ] {
            let toml = format!("{OK}[protect]\nallow = [\"tests/ok.py\", {entry:?}]\n");
            let e = resolve_with(&toml, JobFlags::default()).expect_err(entry);
            assert!(matches!(e, ConfigError::Allow { .. }), "{entry}: {e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains("loopd.toml")
                    && msg.contains("`protect.allow[1]`")
                    && msg.contains(&format!("`{entry}`"))
                    && msg.contains(why),
                "{entry}: {msg}"
            );
            let hint = e.hint().expect("a hint");
            assert!(hint.contains("relative to the repository root"), "{hint}");
        }
    }

    #[test]
    fn protect_allow_never_reaches_the_judges_own_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("strict.toml"),
            crate::rubric::DEFAULT_RUBRIC,
        )
        .expect("rubric");
        for (entry, what) in [
            ("loopd.toml", "`loopd.toml` (the job's configuration)"),
            ("*", "`loopd.toml`"),
            ("**", "`loopd.toml`"),
            ("*.toml", "`loopd.toml`"),
            ("strict.toml", "`strict.toml` (the rubric)"),
            (".git/config", "git directory"),
            ("vendor/lib/.git", "git directory"),
            (".*/**", "git directory"),
            ("?git/hooks/*", "git directory"),
        ] {
            let toml = format!("rubric = \"strict.toml\"\n{OK}[protect]\nallow = [{entry:?}]\n");
            std::fs::write(dir.path().join(CONFIG_FILE), &toml).expect("write config");
            let e = Job::resolve(&JobFlags::default(), dir.path()).expect_err(entry);
            let msg = e.to_string();
            assert!(
                matches!(
                    e,
                    ConfigError::Allow {
                        why: AllowRefusal::Judge(_),
                        ..
                    }
                ) && msg.contains("`protect.allow[0]`")
                    && msg.contains(what)
                    && msg.contains("the judge's own configuration is never the agent's to edit"),
                "{entry}: {msg}"
            );
            let hint = e.hint().expect("a hint");
            assert!(hint.contains("stay protected"), "{hint}");
        }
    }

    #[test]
    fn the_standalone_hook_reads_allow_and_drops_what_it_cannot_take() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[protect]\nallow = [\"tests/test_client.py\", \"*\", \"../x\", \"tests/fixtures/*.json\"]\n",
        )
        .expect("write config");
        let (protect, own) = protect_of_repo(dir.path()).expect("read");
        assert_eq!(
            protect.allow,
            ["tests/test_client.py", "tests/fixtures/*.json"],
            "a refused entry lifts nothing"
        );
        assert_eq!(own.len(), 1, "the configuration protects itself");
    }

    #[test]
    fn bom_prefixed_config_is_read() {
        let job =
            resolve_with(&format!("\u{feff}{OK}"), JobFlags::default()).expect("BOM tolerated");
        assert_eq!(job.task, "fix it");
    }
}
