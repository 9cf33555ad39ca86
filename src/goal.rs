//! The goal test: ordered shell steps, cheap first, each with a timeout, run
//! contained in the repository. An attempt stops at the first failing step
//! and names it; the baseline runs every step, because the critic needs the
//! whole red picture from before attempt 1.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use crate::agent::session::{self, StopRequest};
use crate::judges::precheck;
use crate::judges::testcount::{self, Counts, Preset, Unreadable};
use crate::process::{self, Contained};

pub mod held_out;
pub mod results;
pub mod suite;

/// Output kept per step: the head and tail of anything longer.
pub const MAX_STEP_OUTPUT: usize = 64 * 1024;

/// One step of the goal test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GoalStep {
    pub name: String,
    pub run: String,
    #[serde(with = "crate::util::duration_text")]
    pub timeout: Duration,
    /// Which test runner's summary to read for the test-count gate
    /// (explicit, or inferred from `run`); `None` = no count for this step.
    pub report: Option<Preset>,
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub name: String,
    pub command: String,
    /// `None` when the step was killed (timeout, signal).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub passed: bool,
    /// stdout and stderr, interleaved as written, bounded (head and tail kept).
    pub output: String,
    pub duration_ms: u64,
    /// Processes the step left running (a test server, a daemon) that
    /// loopd stopped after it.
    #[serde(default)]
    pub leftovers: usize,
    /// The tests of the report loopd asked the runner for
    /// ([`results`]): `None` when none was asked for or none was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<results::Results>,
    /// What the output says, read once where the step ran (`None` in a
    /// journal of a loopd that did not read it: [`StepResult::read`]
    /// reads it then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Read>,
}

/// What a step's output says, read where the step ran: the counts of its
/// runner's summary, the tests that failed and the values they expected.
/// Every judge takes them from here; none parses the output again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Read {
    /// The runner's summary by the step's preset (`None`: the step has
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Result<Counts, Unreadable>>,
    /// The tests that failed, by name, as the runner printed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// The values the failing tests expected, as the runner printed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected: Vec<String>,
}

impl Read {
    /// Read `output` by `preset`.
    pub fn of(preset: Option<Preset>, output: &str) -> Read {
        Read {
            counts: preset.map(|p| testcount::read(p, output)),
            failing: precheck::failing_tests(output),
            expected: precheck::failing_expected(output),
        }
    }
}

impl StepResult {
    /// What the output says: as read where the step ran, or (a journal of
    /// a loopd that did not read it) read now by `preset`.
    pub fn read(&self, preset: Option<Preset>) -> std::borrow::Cow<'_, Read> {
        match &self.read {
            Some(r) if r.counts.is_some() || preset.is_none() => std::borrow::Cow::Borrowed(r),
            _ => std::borrow::Cow::Owned(Read::of(preset, &self.output)),
        }
    }

    /// The counts of the runner's summary by `preset`.
    pub fn counts(&self, preset: Preset) -> Result<Counts, Unreadable> {
        self.read(Some(preset))
            .counts
            .clone()
            .expect("a read by a preset holds counts")
    }
}

/// The goal test's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalReport {
    pub steps: Vec<StepResult>,
}

impl GoalReport {
    pub fn passed(&self) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(|s| s.passed)
    }

    pub fn failed_step(&self) -> Option<&StepResult> {
        self.steps.iter().find(|s| !s.passed)
    }

    /// Every step's output, labelled, for the baseline the critic reads.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for s in &self.steps {
            let status = match (s.timed_out, s.exit_code) {
                (true, _) => "timed out".to_owned(),
                (false, Some(c)) => format!("exit {c}"),
                (false, None) => "killed".to_owned(),
            };
            out.push_str(&format!(
                "$ {}   # step `{}`: {}\n{}",
                s.command, s.name, status, s.output
            ));
            if !s.output.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }
}

/// What the baseline says before anything is spent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    /// The job has something to fix.
    Ready,
    /// A step's program could not be run: the shell answered 127 (not
    /// found) or 126 (found, not executable). Every attempt would be judged
    /// by a goal that can never pass.
    NotRunnable {
        step: String,
        command: String,
        code: i32,
    },
    /// Every step passed already: there is nothing to fix.
    AlreadyGreen,
}

impl GoalReport {
    /// The preflight verdict on a baseline.
    pub fn preflight(&self) -> Preflight {
        if let Some(s) = self
            .steps
            .iter()
            .find(|s| !s.timed_out && matches!(s.exit_code, Some(126 | 127)))
        {
            return Preflight::NotRunnable {
                step: s.name.clone(),
                command: s.command.clone(),
                code: s.exit_code.expect("matched above"),
            };
        }
        if self.passed() {
            Preflight::AlreadyGreen
        } else {
            Preflight::Ready
        }
    }
}

/// Shell words that are not programs on `PATH`.
const SHELL_BUILTINS: [&str; 22] = [
    ".", ":", "[", "alias", "cd", "command", "echo", "eval", "exec", "exit", "export", "false",
    "printf", "pwd", "read", "set", "source", "test", "true", "type", "ulimit", "umask",
];

/// The program a goal step's command line starts, when it can be told
/// without a shell: the first word after `VAR=value` assignments, quotes
/// stripped. `None` for a line that starts with shell syntax (`(`, `{`,
/// `if`, `!`, a redirection, a substitution).
pub fn program_of(command: &str) -> Option<String> {
    let word = command
        .split_whitespace()
        .find(|w| !(w.contains('=') && !w.starts_with('=') && !w.starts_with(['"', '\''])))?;
    let word = word.trim_matches(['"', '\'']);
    let syntax = ['(', '{', '!', '<', '>', '$', '`', '&', '|', ';'];
    if word.is_empty()
        || word.starts_with(syntax)
        || ["if", "for", "while", "until", "case", "time"].contains(&word)
    {
        return None;
    }
    Some(word.trim_end_matches(';').to_owned())
}

/// Whether `program` (from [`program_of`]) can be started in `dir`: a shell
/// builtin, an executable file at that path (relative to `dir` when it
/// has a slash), or on `PATH`.
pub fn program_resolves(program: &str, dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if SHELL_BUILTINS.contains(&program) {
        return true;
    }
    if program.contains('/') {
        return executable(&dir.join(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| executable(&d.join(program))))
}

/// Whether to go on after a failing step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run every step (the baseline).
    All,
    /// Stop at the first failing step (an attempt).
    FirstFailure,
}

#[derive(Debug, thiserror::Error)]
pub enum GoalError {
    #[error("cannot run goal step `{step}`: {source}")]
    Spawn {
        step: String,
        #[source]
        source: std::io::Error,
    },
}

/// Keep the head and the tail of `text` within `max` bytes, saying what was cut.
pub fn head_and_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

/// Run the steps in order in `dir`, each in exactly the environment
/// `limits.env` (an allow-list: no secret of loopd's reaches a step).
pub async fn run(
    steps: &[GoalStep],
    dir: &Path,
    mode: Mode,
    limits: &Limits<'_>,
) -> Result<GoalReport, GoalError> {
    let mut results = Vec::with_capacity(steps.len());
    for step in steps {
        let result = run_step(step, dir, limits).await?;
        let exit = match (result.timed_out, result.exit_code) {
            (true, _) => "timed out".to_owned(),
            (false, Some(c)) => c.to_string(),
            (false, None) => "killed by a signal".to_owned(),
        };
        tracing::info!(step = %result.name, passed = result.passed, exit = %exit, ms = result.duration_ms, "goal step");
        let failed = !result.passed;
        results.push(result);
        if failed && (mode == Mode::FirstFailure || limits.interrupted()) {
            break;
        }
    }
    Ok(GoalReport { steps: results })
}

/// What bounds the goal test besides each step's own timeout.
pub struct Limits<'a> {
    /// The steps' whole environment ([`crate::sandbox::env`]).
    pub env: &'a crate::sandbox::env::Environment,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// The job's or attempt's deadline: no step runs past it.
    pub deadline: Option<Instant>,
    /// Signals: a stop request ends the running step.
    pub stop: Option<tokio::sync::watch::Receiver<Option<StopRequest>>>,
    /// The job the steps belong to (see [`process::new_token`]).
    pub scope: &'a str,
    /// The Landlock sandbox the steps run in.
    pub sandbox: Option<&'a crate::sandbox::Sandbox>,
    /// A directory outside the tree the steps may write, where a step's
    /// runner is asked for its report ([`results::channel`]).
    pub results: Option<&'a Path>,
}

impl Limits<'_> {
    fn interrupted(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.borrow().is_some())
    }
}

async fn run_step(
    step: &GoalStep,
    dir: &Path,
    limits: &Limits<'_>,
) -> Result<StepResult, GoalError> {
    let grace = limits.grace;
    let spawn_err = |source| GoalError::Spawn {
        step: step.name.clone(),
        source,
    };
    let started = Instant::now();
    // One pipe for stdout and stderr keeps them in the order they were written.
    let (reader, writer) = std::io::pipe().map_err(spawn_err)?;
    let writer_err: OwnedFd = OwnedFd::from(writer.try_clone().map_err(spawn_err)?);
    let writer_out: OwnedFd = OwnedFd::from(writer);
    let token = process::new_token(limits.scope, "goal");
    let mut cmd = process::command("/bin/sh", &token, limits.env.pairs());
    let report = report_path(step, limits);
    if let Some((path, vars)) = &report {
        // A file of an earlier run never counts as this one's.
        let _ = std::fs::remove_file(path);
        for (k, v) in vars {
            cmd.env(k, v);
        }
    }
    cmd.arg("-c")
        .arg(&step.run)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(writer_out))
        .stderr(std::process::Stdio::from(writer_err));
    if let Some(sandbox) = limits.sandbox {
        sandbox.apply(&mut cmd, dir);
    }
    let mut child = Contained::spawn(cmd, token).map_err(spawn_err)?;
    // The write ends moved into `cmd`, which `spawn` consumed and dropped:
    // EOF comes when the step and everything it started have closed them.
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(spawn_err)?;
    let read_task = tokio::spawn(read_bounded(reader));

    let mut timeout_at = Instant::now() + step.timeout;
    if let Some(d) = limits.deadline {
        timeout_at = timeout_at.min(d);
    }
    let mut stop = limits.stop.clone();
    // Every stop below waits out the grace unless a hurried request (a
    // second signal) arrives, before the stop or during its grace.
    let (exit_code, timed_out) = tokio::select! {
        status = child.wait() => (status.ok().and_then(|s| s.code()), false),
        _ = tokio::time::sleep_until(timeout_at.into()) => {
            tracing::warn!(step = %step.name, timeout_s = step.timeout.as_secs_f64(), "goal step timed out");
            let status = child.stop_until(grace, hurry_requested(&mut stop)).await;
            (status.and_then(|s| s.code()), true)
        }
        _ = stop_requested(&mut stop) => {
            let status = child.stop_until(grace, hurry_requested(&mut stop)).await;
            (status.and_then(|s| s.code()), false)
        }
    };
    // Whatever the step left running (a test server, a setsid daemon) goes
    // now: it would otherwise also hold the pipe open.
    let leftovers = child.sweep_until(grace, hurry_requested(&mut stop)).await;
    if leftovers > 0 {
        tracing::info!(step = %step.name, leftovers, "stopped processes the goal step left running");
    }
    let output = read_task.await.unwrap_or_default();
    let results = report.and_then(|(path, _)| {
        let bytes = crate::util::read_untrusted(&path, results::MAX_REPORT).ok()?;
        results::parse_junit(&String::from_utf8_lossy(&bytes))
    });
    let read = Some(Read::of(step.report, &output));
    Ok(StepResult {
        name: step.name.clone(),
        command: step.run.clone(),
        exit_code,
        timed_out,
        passed: !timed_out && exit_code == Some(0),
        output,
        duration_ms: started.elapsed().as_millis() as u64,
        leftovers,
        results,
        read,
    })
}

/// Where `step`'s report goes and the variables that ask for it, when the
/// steps have a results directory and its runner such a channel.
fn report_path(
    step: &GoalStep,
    limits: &Limits<'_>,
) -> Option<(std::path::PathBuf, Vec<(String, String)>)> {
    let dir = limits.results?;
    use sha2::Digest;
    // Named by the step's name, whatever characters it holds.
    let digest = hex::encode(&sha2::Sha256::digest(step.name.as_bytes())[..8]);
    let path = dir.join(format!("{digest}.xml"));
    let inherited = |var: &str| {
        limits
            .env
            .pairs()
            .find(|(k, _)| *k == var)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    let vars = results::channel(step.report?, &path, &inherited)?;
    Some((path, vars))
}

async fn stop_requested(stop: &mut Option<tokio::sync::watch::Receiver<Option<StopRequest>>>) {
    match stop {
        Some(rx) => {
            if rx.wait_for(|r| r.is_some()).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Resolves when a stop request asks to skip the grace (see
/// [`session::wait_for_hurry`]); never without a stop channel.
async fn hurry_requested(stop: &mut Option<tokio::sync::watch::Receiver<Option<StopRequest>>>) {
    match stop {
        Some(rx) => session::wait_for_hurry(rx).await,
        None => std::future::pending::<()>().await,
    }
}

async fn read_bounded(mut reader: tokio::net::unix::pipe::Receiver) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    // Keep at most twice the limit in memory; head_and_tail trims the rest.
    let mut dropped_middle = 0usize;
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                all.extend_from_slice(&buf[..n]);
                if all.len() > 2 * MAX_STEP_OUTPUT {
                    // Keep the first half-limit and the latest half-limit.
                    let keep_head = MAX_STEP_OUTPUT / 2;
                    let excess = all.len() - MAX_STEP_OUTPUT;
                    all.drain(keep_head..keep_head + excess);
                    dropped_middle += excess;
                }
            }
        }
    }
    let text = String::from_utf8_lossy(&all).into_owned();
    if dropped_middle > 0 {
        let mut cut = MAX_STEP_OUTPUT / 2;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!(
            "{}\n[... {} bytes cut ...]\n{}",
            &text[..cut],
            dropped_middle,
            &text[cut..]
        )
    } else {
        head_and_tail(&text, MAX_STEP_OUTPUT)
    }
}

#[cfg(test)]
mod tests {

    /// What a step's output says is read once, where the step ran, and
    /// the same read is what a journal of an older loopd gets on demand.
    #[test]
    fn a_steps_output_is_read_once_where_it_ran() {
        let output = "FAILED tests/test_r.py::test_total - AssertionError\n\
                      E       AssertionError: assert Decimal('5.50') == Decimal('7.50')\n\
                      ========== 1 failed, 3 passed in 0.12s ==========\n";
        let read = Read::of(Some(Preset::Pytest), output);
        let counts = read.counts.clone().expect("a preset").expect("readable");
        assert_eq!((counts.ran, counts.passed, counts.failed), (4, 3, 1));
        assert!(
            read.failing.iter().any(|f| f.contains("test_total")),
            "{read:?}"
        );
        assert_eq!(read.expected, ["7.50"]);
        let mut step = StepResult {
            name: "pytest".into(),
            command: "pytest".into(),
            exit_code: Some(1),
            timed_out: false,
            passed: false,
            output: output.into(),
            duration_ms: 1,
            leftovers: 0,
            results: None,
            read: Some(read.clone()),
        };
        assert_eq!(*step.read(Some(Preset::Pytest)), read);
        // Read where it ran: the output is not parsed again.
        step.output = String::new();
        assert_eq!(step.counts(Preset::Pytest), Ok(counts));
        // A journal of a loopd that did not read it.
        step.read = None;
        step.output = output.into();
        assert_eq!(*step.read(Some(Preset::Pytest)), read);
    }

    use super::*;
    use crate::outcome::Reason;
    use crate::process::testing::{self, expect_line, stubborn_script, KillOnDrop};

    fn limits() -> Limits<'static> {
        Limits {
            env: Box::leak(Box::new(
                crate::sandbox::env::Environment::from_process(&[]),
            )),
            grace: Duration::from_millis(200),
            deadline: None,
            stop: None,
            scope: "unit",
            sandbox: None,
            results: None,
        }
    }

    fn step(name: &str, run: &str) -> GoalStep {
        GoalStep {
            name: name.into(),
            run: run.into(),
            timeout: Duration::from_secs(10),
            report: None,
        }
    }

    #[tokio::test]
    async fn preflight_names_a_step_whose_program_cannot_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("not-exec.sh"), "echo hi\n").expect("write");
        for (run_line, code) in [("ruf check .", 127), ("./not-exec.sh", 126)] {
            let steps = [step("lint", run_line), step("tests", "exit 1")];
            let r = super::run(&steps, dir.path(), Mode::All, &limits())
                .await
                .expect("run");
            assert_eq!(
                r.preflight(),
                Preflight::NotRunnable {
                    step: "lint".into(),
                    command: run_line.into(),
                    code
                }
            );
        }
        let red = super::run(&[step("tests", "exit 1")], dir.path(), Mode::All, &limits())
            .await
            .expect("run");
        assert_eq!(red.preflight(), Preflight::Ready);
        let green = super::run(&[step("tests", "true")], dir.path(), Mode::All, &limits())
            .await
            .expect("run");
        assert_eq!(green.preflight(), Preflight::AlreadyGreen);
    }

    #[test]
    fn the_program_of_a_step_is_found_without_a_shell() {
        assert_eq!(program_of("ruf check .").as_deref(), Some("ruf"));
        assert_eq!(
            program_of("PYTHONDONTWRITEBYTECODE=1 'pytest' -q").as_deref(),
            Some("pytest")
        );
        assert_eq!(program_of("(cd x && make)"), None);
        assert_eq!(program_of("if true; then :; fi"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(program_resolves("sh", dir.path()));
        assert!(program_resolves("cd", dir.path()));
        assert!(!program_resolves("ruf-does-not-exist", dir.path()));
        assert!(!program_resolves("./missing.sh", dir.path()));
    }

    #[tokio::test]
    async fn stops_at_the_first_failure_and_names_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let steps = [
            step("ok", "echo fine"),
            step("bad", "echo out; echo err >&2; exit 3"),
            step("never", "touch never"),
        ];
        let r = run(&steps, dir.path(), Mode::FirstFailure, &limits())
            .await
            .expect("run");
        assert!(!r.passed());
        assert_eq!(r.steps.len(), 2);
        let failed = r.failed_step().expect("a failed step");
        assert_eq!(failed.name, "bad");
        assert_eq!(failed.exit_code, Some(3));
        assert_eq!(failed.output, "out\nerr\n");
        assert!(!dir.path().join("never").exists());
        let all = run(&steps, dir.path(), Mode::All, &limits())
            .await
            .expect("run");
        assert_eq!(all.steps.len(), 3);
        assert!(all.render().contains("# step `bad`: exit 3"));
    }

    #[tokio::test]
    async fn a_timeout_kills_the_step_and_what_it_started() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = step("slow", "setsid sleep 30 & sleep 30");
        s.timeout = Duration::from_millis(200);
        let r = run(&[s], dir.path(), Mode::All, &limits())
            .await
            .expect("run");
        assert!(r.steps[0].timed_out);
        assert!(!r.passed());
    }

    #[tokio::test]
    async fn a_second_signal_skips_the_rest_of_the_grace() {
        crate::process::become_subreaper();
        let dir = tempfile::tempdir().expect("tempdir");
        // Unique per test process: the guard must not reach another run's.
        let scope = format!("unit-goal-hurry-{}", std::process::id());
        let _cleanup = KillOnDrop::scope(&scope);
        let mut ctl = testing::fifo(&dir.path().join("ctl"));
        let (tx, rx) = tokio::sync::watch::channel(None);
        let limits = Limits {
            grace: Duration::from_secs(30),
            stop: Some(rx),
            scope: &scope,
            ..limits()
        };
        let request = |hurry| {
            Some(StopRequest {
                reason: Reason::Signal,
                hurry,
                cause: session::StopCause::Signal,
            })
        };
        let steps = [step("stubborn", &stubborn_script("ctl"))];
        let signals = async {
            expect_line(&mut ctl, "ready").await;
            tx.send(request(false)).expect("the step listens");
            // The step reports the SIGTERM: the stop and its grace began.
            expect_line(&mut ctl, "term").await;
            tx.send(request(true)).expect("the step listens");
        };
        // A failure guard, far below the 30 s grace: the assertion is that
        // the run returns at all before it.
        let (report, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(run(&steps, dir.path(), Mode::All, &limits), signals)
        })
        .await
        .expect("the second signal cut the 30 s grace short");
        let report = report.expect("run");
        assert!(!report.passed());
        assert_eq!(report.steps[0].exit_code, None, "the step was killed");
    }

    #[test]
    fn head_and_tail_keeps_both_ends() {
        let text = format!("{}{}", "a".repeat(100), "z".repeat(100));
        let cut = head_and_tail(&text, 50);
        assert!(cut.starts_with("aaaa") && cut.ends_with("zzzz") && cut.contains("bytes cut"));
    }
}
