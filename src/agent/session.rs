//! One `claude -p` session: spawn it contained, read its stream as it
//! arrives, let an [`Observer`] (the guards and the ledger) see every event
//! and stop the session mid-turn, enforce the deadlines and the idle timeout,
//! and hand back what the `result` event said.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::events::{Event, SessionResult, StreamParser};
use super::gateway::record::Record;
use crate::outcome::Reason;
use crate::process::{self, Contained};

pub use super::Role;

/// Everything needed to start one session.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub role: Role,
    pub bin: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    /// The role's environment (an allow-list: see
    /// [`crate::sandbox::env`]); `env_set` is added to it.
    pub env: crate::sandbox::env::Environment,
    pub env_set: Vec<(OsString, OsString)>,
    /// Written to stdin, which is then closed; `None` = stdin is /dev/null.
    pub stdin: Option<String>,
    /// Where the raw stream (one JSON object per line) is kept.
    pub stream_log: PathBuf,
    /// Where the CLI's stderr is kept.
    pub stderr_log: PathBuf,
    /// The earliest of the job's and the attempt's deadlines, and which one.
    pub deadline: Option<(Instant, Reason)>,
    /// Stop if no event arrives for this long.
    pub idle_timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// The job this session belongs to: its processes' tokens start with
    /// it, so a restarted daemon can find what a crashed one left behind.
    pub scope: String,
    /// The Landlock sandbox the session and its tools run in.
    pub sandbox: Option<crate::sandbox::Sandbox>,
}

/// What an observer asks for after seeing an event.
pub type Verdict = Option<Reason>;

/// Sees every event of a session as it arrives. Returning `Some(reason)`
/// stops the session at once.
pub trait Observer {
    fn on_event(&mut self, event: &Event, at: Instant) -> Verdict;

    /// What the job's gateway reported while the session runs: a call it
    /// metered (the session's own, or a nested `claude -p`'s that never
    /// shows in its stream), a refused request, a hook denial, an
    /// escalation.
    fn on_gateway(&mut self, _record: Record) -> Verdict {
        None
    }
}

/// Why a job is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// A signal to a foreground job (`loopd run`, `loopd ci`): park the work.
    Signal,
    /// The daemon is shutting down: keep the work in place, the job resumable.
    Shutdown,
    /// `loopd cancel`: park the work; the job ends `cancelled`.
    Cancel,
}

/// A request from outside (a signal, a shutdown, a cancel) to stop the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopRequest {
    pub reason: Reason,
    /// Skip the grace period (a second signal).
    pub hurry: bool,
    pub cause: StopCause,
}

impl StopRequest {
    /// Keep the work in place and the job resumable instead of parking it.
    pub fn suspend(&self) -> bool {
        self.cause == StopCause::Shutdown
    }
}

/// How a session ended.
#[derive(Debug)]
pub struct SessionEnd {
    /// How the CLI said the session ended, if it got to say.
    pub result: Option<SessionResult>,
    /// Set when loopd stopped the session (a guard, a deadline, a signal).
    pub stopped: Option<Reason>,
    pub exit_code: Option<i32>,
    /// The last lines the CLI wrote to stderr.
    pub stderr_tail: String,
    pub wall: Duration,
    /// Processes left behind by the session and swept after it.
    pub leftovers: usize,
}

impl SessionEnd {
    /// A one-line description of how the session failed, for reports.
    pub fn failure(&self) -> String {
        match (&self.result, self.stopped) {
            (_, Some(reason)) => format!("stopped by loopd: {reason}"),
            (Some(r), None) => r.error_text(),
            (None, None) => format!(
                "the CLI exited ({}) without a result event; stderr: {}",
                self.exit_code
                    .map_or("by a signal".into(), |c| format!("code {c}")),
                self.stderr_tail.trim()
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot start the agent CLI `{}`: {source}", bin.display())]
    Spawn {
        bin: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write `{}`: {source}", path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Keep only the last `max` bytes of a growing text, on a char boundary.
fn keep_tail(buf: &mut String, max: usize) {
    if buf.len() > max {
        let mut cut = buf.len() - max;
        while !buf.is_char_boundary(cut) {
            cut += 1;
        }
        buf.drain(..cut);
    }
}

/// Run one session to its end. `stop` carries requests from signal
/// handlers; `gateway`, what the job's gateway reports, handed to the
/// observer as it happens.
pub async fn run(
    spec: &SessionSpec,
    parser: &mut dyn StreamParser,
    observer: &mut (dyn Observer + Send),
    stop: &mut tokio::sync::watch::Receiver<Option<StopRequest>>,
    gateway: Option<&mut tokio::sync::mpsc::UnboundedReceiver<Record>>,
) -> Result<SessionEnd, SessionError> {
    let started = Instant::now();
    let token = process::new_token(&spec.scope, spec.role.as_str());
    let mut cmd = command_in(spec, &spec.bin, &token);
    cmd.args(&spec.args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdin(if spec.stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        });
    let mut child = Contained::spawn(cmd, token).map_err(|source| SessionError::Spawn {
        bin: spec.bin.clone(),
        source,
    })?;
    tracing::debug!(
        role = spec.role.as_str(),
        pid = child.pid.get(),
        "session started"
    );

    if let (Some(text), Some(mut stdin)) = (spec.stdin.clone(), child.child.stdin.take()) {
        // Written from a task so a large input cannot deadlock against a
        // full stdout pipe; dropping stdin closes it.
        tokio::spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let stdout = child.child.stdout.take().expect("stdout was piped");
    let mut stderr = child.child.stderr.take().expect("stderr was piped");
    let stderr_log = spec.stderr_log.clone();
    let stderr_task = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all).await;
        let _ = tokio::fs::write(&stderr_log, &all).await;
        let mut text = String::from_utf8_lossy(&all).into_owned();
        keep_tail(&mut text, 4000);
        text
    });

    let lines = BufReader::new(stdout).lines();
    let Driven { result, stopped } = drive(spec, lines, parser, observer, stop, gateway).await?;

    let (exit_code, leftovers) = match stopped {
        Some(reason) => {
            tracing::info!(role = spec.role.as_str(), %reason, "stopping the session");
            // A hurried request (a second signal) skips the grace, whether it
            // came first or arrives while the grace runs.
            let status = child.stop_until(spec.grace, wait_for_hurry(stop)).await;
            (status.and_then(|s| s.code()), 0)
        }
        None => {
            let status = child.wait().await.ok();
            let leftovers = child.sweep_until(spec.grace, wait_for_hurry(stop)).await;
            if leftovers > 0 {
                tracing::info!(
                    role = spec.role.as_str(),
                    leftovers,
                    "stopped processes the session left running"
                );
            }
            (status.and_then(|s| s.code()), leftovers)
        }
    };
    let stderr_tail = stderr_task.await.unwrap_or_default();
    Ok(SessionEnd {
        result,
        stopped,
        exit_code,
        stderr_tail,
        wall: started.elapsed(),
        leftovers,
    })
}

/// `program` as the session's processes run: contained under `token`, in
/// the session's directory, environment and sandbox.
pub fn command_in(
    spec: &SessionSpec,
    program: &std::path::Path,
    token: &str,
) -> tokio::process::Command {
    let mut cmd = process::command(program, token, spec.env.pairs());
    cmd.current_dir(&spec.cwd);
    for (k, v) in &spec.env_set {
        cmd.env(k, v);
    }
    if let Some(sandbox) = &spec.sandbox {
        sandbox.apply(&mut cmd, &spec.cwd);
    }
    cmd
}

/// What a session's stream said, and whether loopd stopped it.
#[derive(Debug)]
pub struct Driven {
    pub result: Option<SessionResult>,
    pub stopped: Option<Reason>,
}

/// Read a session's stream to its end, or until loopd stops it: every line
/// is kept in the stream log and parsed, the observer sees every event and
/// what the gateway reports, and the idle timeout, the deadline and stop
/// requests are enforced. The one loop every session runs, whatever writes
/// the lines (a CLI's stdout, or the in-process scripted agent of tests).
pub async fn drive<R: tokio::io::AsyncBufRead + Unpin>(
    spec: &SessionSpec,
    mut lines: tokio::io::Lines<R>,
    parser: &mut dyn StreamParser,
    observer: &mut (dyn Observer + Send),
    stop: &mut tokio::sync::watch::Receiver<Option<StopRequest>>,
    mut gateway: Option<&mut tokio::sync::mpsc::UnboundedReceiver<Record>>,
) -> Result<Driven, SessionError> {
    let log_err = |source| SessionError::Log {
        path: spec.stream_log.clone(),
        source,
    };
    let mut log = tokio::io::BufWriter::new(
        tokio::fs::File::create(&spec.stream_log)
            .await
            .map_err(log_err)?,
    );
    let mut result: Option<SessionResult> = None;
    let mut events: Vec<Event> = Vec::with_capacity(8);
    let mut stopped: Option<Reason> = None;
    let mut last_event = Instant::now();
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    let (deadline, deadline_reason) = spec.deadline.unwrap_or((far, Reason::WallClock));

    loop {
        let idle_at = last_event + spec.idle_timeout;
        tokio::select! {
            line = lines.next_line() => {
                let line = match line {
                    Ok(Some(line)) => line,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the agent stream failed");
                        break;
                    }
                };
                let now = Instant::now();
                last_event = now;
                log.write_all(line.as_bytes()).await.map_err(log_err)?;
                log.write_all(b"\n").await.map_err(log_err)?;
                if line.trim().is_empty() {
                    continue;
                }
                events.clear();
                if let Err(e) = parser.line(&line, &mut events) {
                    tracing::warn!(error = %e, line = %line.chars().take(200).collect::<String>(), "unparsable stream line");
                }
                let mut verdict = None;
                for event in events.drain(..) {
                    if verdict.is_none() {
                        verdict = observer.on_event(&event, now);
                    }
                    if let Event::Result(r) = event {
                        result = Some(*r);
                    }
                }
                if let Some(reason) = verdict {
                    stopped = Some(reason);
                    break;
                }
            }
            Some(event) = next_event(&mut gateway) => {
                if let Some(reason) = observer.on_gateway(event) {
                    stopped = Some(reason);
                    break;
                }
            }
            _ = tokio::time::sleep_until(idle_at.into()) => {
                tracing::warn!(role = spec.role.as_str(), idle_s = spec.idle_timeout.as_secs_f64(), "no event from the session");
                stopped = Some(Reason::IdleTimeout);
                break;
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                stopped = Some(deadline_reason);
                break;
            }
            changed = stop.changed() => {
                if changed.is_ok() {
                    if let Some(req) = *stop.borrow() {
                        stopped = Some(req.reason);
                        break;
                    }
                }
            }
        }
    }
    log.flush().await.map_err(log_err)?;
    Ok(Driven { result, stopped })
}

/// The gateway's next event; never resolves without a gateway.
async fn next_event(
    rx: &mut Option<&mut tokio::sync::mpsc::UnboundedReceiver<Record>>,
) -> Option<Record> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves when a stop request asks to skip the grace (`hurry`: a second
/// signal) — at once if the latest request already does. Never resolves
/// once the sender is gone: no request can come any more. Meant as the
/// `hurry` of [`Contained::stop_until`].
pub async fn wait_for_hurry(stop: &mut tokio::sync::watch::Receiver<Option<StopRequest>>) {
    if stop.wait_for(|r| r.is_some_and(|r| r.hurry)).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::testing::{self, expect_line, stubborn_script, KillOnDrop};

    /// Sees every event, stops nothing.
    struct Quiet;

    impl Observer for Quiet {
        fn on_event(&mut self, _: &Event, _: Instant) -> Verdict {
            None
        }
    }

    #[tokio::test]
    async fn a_second_signal_skips_the_rest_of_the_grace() {
        process::become_subreaper();
        let dir = tempfile::tempdir().expect("tempdir");
        // Unique per test process: the guard must not reach another run's.
        let scope = format!("unit-session-hurry-{}", std::process::id());
        let _cleanup = KillOnDrop::scope(&scope);
        let mut ctl = testing::fifo(&dir.path().join("ctl"));
        // The "CLI" ignores the first SIGTERM and reports it on the FIFO.
        let spec = SessionSpec {
            role: Role::Agent,
            bin: "/bin/sh".into(),
            args: vec!["-c".into(), stubborn_script("ctl").into()],
            cwd: dir.path().to_path_buf(),
            env_set: vec![],
            env: crate::sandbox::env::Environment::from_process(&[]),
            stdin: None,
            stream_log: dir.path().join("stream.jsonl"),
            stderr_log: dir.path().join("stderr.txt"),
            deadline: None,
            idle_timeout: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            scope,
            sandbox: None,
        };
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        let request = |hurry| {
            Some(StopRequest {
                reason: Reason::Signal,
                hurry,
                cause: StopCause::Signal,
            })
        };
        let signals = async {
            expect_line(&mut ctl, "ready").await;
            tx.send(request(false)).expect("the session listens");
            // The CLI reports the SIGTERM: the stop and its grace began.
            expect_line(&mut ctl, "term").await;
            tx.send(request(true)).expect("the session listens");
        };
        // A failure guard, far below the 30 s grace: the assertion is that
        // the session returns at all before it.
        let mut observer = Quiet;
        let mut parser = crate::agent::claude::stream::ClaudeStream;
        let (end, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(
                run(&spec, &mut parser, &mut observer, &mut rx, None),
                signals
            )
        })
        .await
        .expect("the second signal cut the 30 s grace short");
        let end = end.expect("session");
        assert_eq!(end.stopped, Some(Reason::Signal));
        assert_eq!(end.exit_code, None, "the CLI was killed");
    }
}
