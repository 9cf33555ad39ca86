//! Shared test support: a hermetic environment around one fixture
//! repository, the real `loopd` binary, the real Claude Code CLI and the
//! scripted model.
//!
//! Hermetic means: the environment is cleared; HOME, the state dir and the
//! repository live in a fresh temp dir; git reads no user or system config;
//! the model is on a random loopback port. The CLI and the fixture's tools
//! (pytest, ruff) come from `.tools/`, installed by
//! `scripts/install-test-tools.sh` — a missing install fails loudly, it is
//! never a reason to skip.

#![allow(dead_code)]

pub mod daemon;
pub mod github;
pub mod gitserver;
pub mod in_process;
pub mod model;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use model::{Block, Scenario, ScriptedModel, SessionScript, Turn, Usage};
use serde_json::{json, Value};

pub const API_KEY: &str = "sk-ant-test-4f1d9c0e-never-print-me";

/// `--allowed-tools` for the worst case a lead can configure: full Bash,
/// so the CLI's own permission rules stop nothing before loopd does.
pub const FULL_BASH: &str = "Read,Edit,Write,Bash";

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directories with the pinned CLI and pytest/ruff.
pub fn tools_path() -> OsString {
    let tools = std::env::var_os("LOOPD_TEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join(".tools"));
    let claude = tools.join("npm/node_modules/.bin");
    let venv = tools.join("venv/bin");
    assert!(
        claude.join("claude").is_file() && venv.join("ruff").is_file(),
        "the test tools are missing under {}: run `scripts/install-test-tools.sh` (the README's test command does)",
        tools.display()
    );
    std::env::join_paths([
        claude,
        venv,
        PathBuf::from("/usr/local/bin"),
        PathBuf::from("/usr/bin"),
        PathBuf::from("/bin"),
    ])
    .expect("join PATH")
}

/// Copy the files and directories beneath `from` to `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("make the copy's directory");
    for e in std::fs::read_dir(from)
        .expect("read the directory to copy")
        .flatten()
    {
        let target = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy a file");
        }
    }
}

/// A fixture file's content.
pub fn fixture(rel: &str) -> String {
    std::fs::read_to_string(manifest_dir().join("fixtures").join(rel))
        .unwrap_or_else(|e| panic!("fixture {rel}: {e}"))
}

pub struct TestEnv {
    pub tmp: tempfile::TempDir,
    pub repo: PathBuf,
    pub state: PathBuf,
    pub home: PathBuf,
}

/// What one `loopd` invocation did.
#[derive(Debug)]
pub struct RunResult {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl RunResult {
    /// The `--json` summary printed on stdout.
    pub fn summary(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "no JSON summary on stdout ({e}):\nstdout: {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl TestEnv {
    /// A fresh environment with the rechnung fixture repository.
    pub fn new() -> TestEnv {
        let tmp = tempfile::Builder::new()
            .prefix("loopd-it-")
            .tempdir()
            .expect("tempdir");
        let repo = tmp.path().join("repo");
        let state = tmp.path().join("state");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let out = Command::new(manifest_dir().join("fixtures/rechnung/make-repo.sh"))
            .arg(&repo)
            .env_clear()
            .env("PATH", tools_path())
            .output()
            .expect("run make-repo.sh");
        assert!(
            out.status.success(),
            "make-repo.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let repo = repo.canonicalize().expect("canonical repo path");
        TestEnv {
            tmp,
            repo,
            state,
            home,
        }
    }

    /// A fresh environment with a copy of `dir` as its repository, committed
    /// (git isolated from the user's configuration).
    pub fn from_dir(dir: &Path) -> TestEnv {
        let tmp = tempfile::Builder::new()
            .prefix("loopd-it-")
            .tempdir()
            .expect("tempdir");
        let repo = tmp.path().join("repo");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        copy_tree(dir, &repo);
        let repo = repo.canonicalize().expect("canonical repo path");
        let env = TestEnv {
            state: tmp.path().join("state"),
            tmp,
            repo,
            home,
        };
        env.git(&["init", "-q", "-b", "main", "."]);
        env.git(&["add", "-A"]);
        env.git(&["commit", "-qm", "the task at its start"]);
        env
    }

    /// A fresh environment whose jobs run the scripted agent of test builds
    /// (`agent = "scripted"` for the agent and the critic, committed in the
    /// fixture's `loopd.toml`): no CLI and no node. The scripted model still
    /// answers through the job's gateway, the job's hook still decides every
    /// tool call and every tool runs in the job's sandbox; what only a real
    /// CLI proves stays with the tests that start one (`tests/it/README.md`).
    pub fn scripted() -> TestEnv {
        let env = TestEnv::new();
        let cfg = std::fs::read_to_string(env.repo.join("loopd.toml")).expect("loopd.toml");
        std::fs::write(
            env.repo.join("loopd.toml"),
            format!("agent = \"scripted\"\ncritic_agent = \"scripted\"\n{cfg}"),
        )
        .expect("loopd.toml");
        env.git(&[
            "commit",
            "-qam",
            "the scripted agent runs this repository's jobs",
        ]);
        env
    }

    /// Grant the job's sandbox reading `paths` (`[sandbox] read` in the
    /// fixture's `loopd.toml`, committed).
    pub fn sandbox_reads(&self, paths: &[&Path]) {
        let cfg = std::fs::read_to_string(self.repo.join("loopd.toml")).expect("loopd.toml");
        let list: Vec<String> = paths
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect();
        std::fs::write(
            self.repo.join("loopd.toml"),
            format!("{cfg}\n[sandbox]\nread = [{}]\n", list.join(", ")),
        )
        .expect("loopd.toml");
        self.git(&["commit", "-qam", "the sandbox may read the test's fixtures"]);
    }

    /// Git in the fixture repo, isolated from any user config.
    pub fn git(&self, args: &[&str]) -> String {
        self.git_in(&self.repo, args)
    }

    /// Git in `dir` (another repository of the test), isolated the same way.
    pub fn git_in(&self, dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", tools_path())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The whole environment `loopd` runs in: the tools, this test's own
    /// HOME and state dir, git isolated from any user's config, the test
    /// credential, and `model`'s address for both vendors.
    pub fn loopd_env(&self, model: Option<&ScriptedModel>) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), tools_path()),
            ("HOME".into(), self.home.clone().into()),
            ("LOOPD_STATE_DIR".into(), self.state.clone().into()),
            ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("ANTHROPIC_API_KEY".into(), API_KEY.into()),
            ("OPENAI_API_KEY".into(), API_KEY.into()),
            ("NO_COLOR".into(), "1".into()),
        ];
        if let Some(m) = model {
            // One scripted model speaks both vendors' protocols.
            env.push(("ANTHROPIC_BASE_URL".into(), m.base_url().into()));
            env.push((
                "OPENAI_BASE_URL".into(),
                format!("{}/v1", m.base_url()).into(),
            ));
        }
        env
    }

    /// `loopd` with a clean environment pointed at `model`.
    pub fn loopd(&self, model: Option<&ScriptedModel>) -> Command {
        let mut cmd = Command::new(loopd_bin());
        cmd.env_clear()
            .envs(self.loopd_env(model))
            .current_dir(&self.repo);
        cmd
    }

    /// `loopd ARGS...` with no model (check, report, lessons, ...).
    pub fn exec(&self, args: &[&str]) -> RunResult {
        finish(self.loopd(None).args(args).output().expect("run loopd"))
    }

    /// `loopd run --json ARGS...` against `model`.
    pub fn run(&self, model: &ScriptedModel, args: &[&str]) -> RunResult {
        let mut cmd = self.loopd(Some(model));
        cmd.arg("run").arg("--json").args(args);
        finish(cmd.output().expect("run loopd"))
    }

    /// None of `secrets` is in any file under the state dir.
    pub fn assert_no_secret_in_state(&self, secrets: &[&str]) {
        for (path, bytes) in self.state_files() {
            let text = String::from_utf8_lossy(&bytes);
            for s in secrets {
                assert!(!text.contains(s), "`{s}` leaked into {}", path.display());
            }
        }
    }

    /// Every file under the state dir, with its content.
    pub fn state_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if let Ok(bytes) = std::fs::read(&p) {
                    out.push((p, bytes));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.state, &mut out);
        out
    }

    pub fn read_repo(&self, rel: &str) -> String {
        std::fs::read_to_string(self.repo.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// Append `toml` to the repository's `loopd.toml` and commit it (the
    /// tree must be clean for a job).
    pub fn append_config(&self, toml: &str, message: &str) {
        let mut cfg = self.read_repo("loopd.toml");
        if toml.contains("[examiner]") {
            cfg = examiner_off_removed(&cfg);
        }
        std::fs::write(self.repo.join("loopd.toml"), format!("{cfg}\n{toml}")).expect("loopd.toml");
        self.git(&["commit", "-qam", message]);
    }
}

/// The `loopd` under test: this build's, or the one `LOOPD_TEST_BIN` names
/// (to run an attack against an earlier release and see it succeed there).
/// A Claude model's price, as the gateway bills it.
pub fn price(model: &str) -> loopd::agent::Price {
    use loopd::agent::Agent;
    loopd::agent::ClaudeCode.prices()(model).expect("a priced Claude model")
}

pub fn loopd_bin() -> PathBuf {
    std::env::var_os("LOOPD_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_loopd")))
}

pub fn finish(out: Output) -> RunResult {
    RunResult {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A job's journal, read back through loopd's own types: every line must
/// parse (an unknown or malformed line fails the test).
pub fn journal(summary: &Value) -> Vec<loopd::journal::Event> {
    let dir = PathBuf::from(summary["run_dir"].as_str().expect("run_dir"));
    journal_of(&dir)
}

/// The journal in a run directory, strictly parsed.
pub fn journal_of(run_dir: &Path) -> Vec<loopd::journal::Event> {
    let text = std::fs::read_to_string(run_dir.join("ledger.jsonl")).expect("journal");
    text.lines()
        .map(|l| {
            serde_json::from_str::<loopd::journal::Entry>(l)
                .unwrap_or_else(|e| panic!("journal line {l}: {e}"))
                .event
        })
        .collect()
}

/// What a job's journal billed: the finished sessions' spend — USD
/// (rounded to 1e-9, so runs compare exactly), input and output tokens. A
/// session cut off by a crash is not in it: it runs again.
pub fn billed(run_dir: &Path) -> (f64, u64, u64) {
    let (usd, tin, tout) = journal_of(run_dir)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::SessionFinished(f) => Some(f.spend),
            _ => None,
        })
        .fold((0.0, 0, 0), |(u, i, o), s| {
            (u + s.cost_usd, i + s.input_tokens, o + s.output_tokens)
        });
    ((usd * 1e9).round() / 1e9, tin, tout)
}

/// The agent's tool calls, from the journal.
pub fn agent_tool_calls(summary: &Value) -> Vec<loopd::guard::ToolCall> {
    journal(summary)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::ToolCall(c) if c.role == loopd::agent::session::Role::Agent => {
                Some(c)
            }
            _ => None,
        })
        .collect()
}

/// The finished sessions, from the journal.
pub fn finished_sessions(summary: &Value) -> Vec<loopd::journal::SessionFinished> {
    journal(summary)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::SessionFinished(f) => Some(f),
            _ => None,
        })
        .collect()
}

// ---- scenario builders ------------------------------------------------------

pub fn turn(blocks: Vec<Block>) -> Turn {
    Turn {
        blocks,
        ..Turn::default()
    }
}

pub fn turn_usage(blocks: Vec<Block>, input_tokens: u64, output_tokens: u64) -> Turn {
    Turn {
        blocks,
        usage: Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        },
        ..Turn::default()
    }
}

pub fn session(turns: Vec<Turn>) -> SessionScript {
    SessionScript {
        turns,
        ..SessionScript::default()
    }
}

/// A session that plays `otherwise` unless its prompt contains `needle`,
/// then `then`: an agent that repeats a mistake unless told.
pub fn unless_told(needle: &str, then: SessionScript, otherwise: SessionScript) -> SessionScript {
    SessionScript {
        when_prompt_contains: Some(needle.to_owned()),
        instead: Some(Box::new(then)),
        ..otherwise
    }
}

pub fn text(t: &str) -> Block {
    Block::Text { text: t.into() }
}

pub fn tool(name: &str, input: Value) -> Block {
    Block::ToolUse {
        name: name.into(),
        input,
    }
}

pub fn read(rel: &str) -> Block {
    tool("Read", json!({"file_path": format!("{{cwd}}/{rel}")}))
}

pub fn write(rel: &str, content: &str) -> Block {
    tool(
        "Write",
        json!({"file_path": format!("{{cwd}}/{rel}"), "content": content}),
    )
}

pub fn bash(command: &str) -> Block {
    tool("Bash", json!({"command": command, "description": "run"}))
}

/// `loopd run` arguments for one attempt with full Bash, then `extra`.
pub fn one_attempt<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    ["--max-attempts", "1", "--allowed-tools", FULL_BASH]
        .into_iter()
        .chain(extra.iter().copied())
        .collect()
}

/// A turn the model answers only after `ms`: an agent busy for a while.
pub fn stalled(ms: u64) -> Turn {
    Turn {
        delay_ms: ms,
        ..turn(vec![text("too late")])
    }
}

/// Wait (bounded) until the model has seen `n` requests of the agent's
/// session `session`.
pub fn wait_for_requests(model: &ScriptedModel, session: usize, n: usize) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while model.session(model::Role::Agent, session).len() < n {
        assert!(
            std::time::Instant::now() < until,
            "the agent never made request {n}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// One agent session — `turns`, then "Done." — a critic that says PASS,
/// and `loopd run --json --max-attempts 1 --allowed-tools FULL_BASH`.
pub fn run_one_session(env: &TestEnv, mut turns: Vec<Turn>) -> (ScriptedModel, RunResult) {
    turns.push(turn(vec![text("Done.")]));
    let model = ScriptedModel::start(scenario(vec![session(turns)], vec![pass()]));
    let r = env.run(&model, &one_attempt(&[]));
    (model, r)
}

/// An agent session that rewrites `rechnung.py` with `content`.
pub fn agent_writes(content: &str) -> SessionScript {
    session(vec![
        turn(vec![read("rechnung.py")]),
        turn(vec![write("rechnung.py", content)]),
        turn(vec![text("Done.")]),
    ])
}

pub fn clean_solution() -> String {
    fixture("rechnung/solutions/rechnung.py")
}

/// Two turns: read `rechnung.py`, then write the clean solution and `also`.
pub fn the_fix_and(also: Vec<Block>) -> Vec<Turn> {
    let mut writes = vec![write("rechnung.py", &clean_solution())];
    writes.extend(also);
    vec![turn(vec![read("rechnung.py")]), turn(writes)]
}

/// Green, but with a debug print (the pre-critic's to find).
pub fn dirty_solution() -> String {
    fixture("rechnung/solutions/rechnung_dirty.py")
}

/// Green, with a function the task did not ask for: nothing the pre-critic
/// decides, so only the critic can reject it.
pub fn scope_creep_solution() -> String {
    format!(
        "{}\n\ndef average_line(lines):\n    \"\"\"Mean line total, for reports.\"\"\"\n    if not lines:\n        raise ValueError(\"no lines to average\")\n    return net_total(lines) / len(lines)\n",
        clean_solution()
    )
}

pub fn verdict(v: Value) -> SessionScript {
    session(vec![turn(vec![tool("StructuredOutput", v)])])
}

pub fn pass() -> SessionScript {
    verdict(json!({"verdict": "PASS", "violations": []}))
}

pub fn fail(rule: i64, file: &str, problem: &str, fix: &str) -> SessionScript {
    verdict(
        json!({"verdict": "FAIL", "violations": [{"rule": rule, "file": file, "problem": problem, "fix": fix}]}),
    )
}

pub fn scenario(agent: Vec<SessionScript>, critic: Vec<SessionScript>) -> Scenario {
    Scenario {
        agent,
        critic,
        examiner: Vec::new(),
    }
}

/// The fixture's `loopd.toml` without the block that turns the examiner
/// off (it is on by default): for a test that sets `[examiner]` itself.
pub fn examiner_off_removed(cfg: &str) -> String {
    match cfg.find("# loopd-test: the examiner") {
        Some(at) => {
            let end = cfg[at..]
                .find("mode = \"off\"\n")
                .map_or(cfg.len(), |i| at + i + "mode = \"off\"\n".len());
            format!("{}{}", &cfg[..at], &cfg[end..])
        }
        None => cfg.to_owned(),
    }
}

/// An examiner session that answers with `tests` (file name, content).
pub fn examiner_writes(tests: &[(&str, &str)]) -> SessionScript {
    let tests: Vec<Value> = tests
        .iter()
        .map(|(file, content)| json!({"file": file, "content": content}))
        .collect();
    verdict(json!({ "tests": tests }))
}

/// Attempt 1 adds a function the task did not ask for and the critic
/// fails it with this rule and fix; attempt 2 is clean and passes.
pub fn scope_creep_then_clean(rule: i64, problem: &str, fix: &str) -> Scenario {
    scenario(
        vec![
            agent_writes(&scope_creep_solution()),
            agent_writes(&clean_solution()),
        ],
        vec![fail(rule, "rechnung.py", problem, fix), pass()],
    )
}

/// Every needle is in `text`, or the test fails naming the first missing.
pub fn assert_contains_all(text: &str, needles: &[&str], what: &str) {
    for needle in needles {
        assert!(
            text.contains(needle),
            "missing {needle:?} in {what}:\n{text}"
        );
    }
}

/// A secret no other process on the machine holds (tests of other
/// checkouts may be running with the shared test key).
pub fn unique_secret(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("sk-ant-{kind}-{}-{nanos}", std::process::id())
}

/// Every request body the upstream saw, as one text.
pub fn all_bodies(model: &ScriptedModel) -> String {
    model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Send a signal to a child process of the test.
pub fn send_signal(pid: u32, sig: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { kill(pid as i32, sig) };
}

/// A copy of a test's repository, with a state dir and a `HOME`, all owned
/// by `nobody` (65534), in a fresh temporary directory others may enter:
/// for loopd run as an ordinary user (root reads through any mode).
pub struct NobodyCopy {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub state: PathBuf,
    pub home: PathBuf,
}

impl NobodyCopy {
    pub fn of(env: &TestEnv) -> NobodyCopy {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let (repo, state, home) = (
            dir.path().join("repo"),
            dir.path().join("state"),
            dir.path().join("home"),
        );
        std::fs::create_dir(&home).expect("home");
        std::fs::create_dir(&state).expect("state");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&env.repo)
            .arg(&repo)
            .status()
            .expect("cp");
        assert!(copied.success());
        let chowned = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&repo)
            .arg(&state)
            .arg(&home)
            .status()
            .expect("chown");
        assert!(chowned.success());
        NobodyCopy {
            dir,
            repo,
            state,
            home,
        }
    }

    /// `program` as `nobody`, in a clean environment with this `HOME` and
    /// git isolated from any configuration.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(program)
            .env_clear()
            .env("PATH", tools_path())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1");
        cmd
    }
}

/// Every request body of `role`'s sessions, joined.
pub fn bodies_of(model: &ScriptedModel, role: model::Role) -> String {
    model
        .requests()
        .iter()
        .filter(|r| r.role == role)
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every file under `dir` (links not followed), with its bytes as text.
pub fn files_under(dir: &Path, skip: Option<&Path>) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if skip.is_some_and(|s| p == s) {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            out.extend(files_under(&p, skip));
        } else if ft.is_file() {
            if let Ok(bytes) = std::fs::read(&p) {
                out.push((p, String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
    out
}

/// `loopd run --json ARGS…` against `model`, killed (and reported as a
/// hang) after `secs`.
pub fn run_bounded(
    env: &TestEnv,
    model: &ScriptedModel,
    args: &[&str],
    secs: u64,
) -> (RunResult, bool) {
    use std::io::Read;
    let mut cmd = env.loopd(Some(model));
    cmd.arg("run").arg("--json").args(args);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn loopd");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut hung = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if std::time::Instant::now() > until {
            hung = true;
            send_signal(child.id(), 9);
            break child.wait().expect("wait");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    (
        RunResult {
            code: status.code().unwrap_or(-1),
            stdout: t_out.join().unwrap_or_default(),
            stderr: t_err.join().unwrap_or_default(),
        },
        hung,
    )
}

pub fn tail(s: &str) -> &str {
    let n = s.len();
    let mut i = n.saturating_sub(3000);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// The attempt was not accepted: the job did not end `accepted` on it.
pub fn assert_not_accepted(r: &RunResult, s: &Value, what: &str) {
    assert_ne!(
        r.code,
        5,
        "{what}: loopd crashed (exit 5): {}",
        tail(&r.stderr)
    );
    assert_ne!(
        s["outcome"],
        "accepted",
        "{what}: HOLE, the change was accepted: attempts {} examiner {}\n{}",
        s["attempts"],
        s["examiner"],
        tail(&r.stderr)
    );
}

/// What a Rust task's jobs need in their environment: cargo on `PATH`
/// before the tools, and the toolchain's homes (the test's own HOME is a
/// fresh one, where no toolchain lives).
pub fn rust_env() -> Vec<(&'static str, OsString)> {
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cargo"));
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".rustup"));
    let cargo_bin = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .find(|d| d.join("cargo").is_file())
        .expect("cargo is on the test's PATH");
    let path = std::env::join_paths(
        std::iter::once(cargo_bin).chain(std::env::split_paths(&tools_path())),
    )
    .expect("join PATH");
    vec![
        ("PATH", path),
        ("CARGO_HOME", cargo_home.into_os_string()),
        ("RUSTUP_HOME", rustup_home.into_os_string()),
    ]
}
