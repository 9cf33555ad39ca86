//! The daemon's intake: how a job gets into the queue, and who may put it
//! there.
//!
//! While a daemon runs, `loopd submit` hands the job over a Unix socket,
//! `spool/submit.sock`, and the daemon writes the job file itself. The
//! daemon checks the submitting process first (`SO_PEERCRED`): it must run
//! as the daemon's user, and it must not be a process a loopd job started —
//! one that descends from the daemon (a child subreaper, so a double fork
//! does not leave the tree), carries a containment token, or runs under
//! another loopd (a foreground `loopd run`). Such a job is refused, kept in
//! `spool/rejected/` with the reason beside it, and logged as an error.
//!
//! A job file that *appears* in `spool/incoming/` while the daemon runs
//! without coming through the socket was written there by something else
//! (a job's own code, when it is not sandboxed) and is refused the same
//! way. Files queued while no daemon ran are taken at its start: the
//! daemon scans `incoming/` under an exclusive lock (`spool/submit.lock`)
//! that `loopd submit` holds shared while it writes a file, so a file is
//! either written before the scan (and taken) or after the socket exists
//! (and handed over).

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::spool::{JobSpec, Spool};

/// The socket, in the spool (0700, so only the owner can reach it by path).
pub const SOCKET: &str = "submit.sock";
/// Held shared by `loopd submit` while it writes a file, exclusively by a
/// starting daemon while it binds the socket and scans `incoming/`.
const SUBMIT_LOCK: &str = "submit.lock";
/// Held exclusively by the daemon for its lifetime: one daemon per spool.
const DAEMON_LOCK: &str = "daemon.lock";
/// A job file is a few KiB; anything longer is not one.
const MAX_REQUEST: u64 = 1 << 20;

/// The daemon's answer to a submission.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Queued,
    Refused(String),
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("cannot use `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another loopd daemon already serves `{}`", path.display())]
    Busy { path: PathBuf },
    #[error("the socket path `{}` is longer than a Unix socket allows (107 bytes)", path.display())]
    PathTooLong { path: PathBuf },
    #[error("the daemon refused the job: {0}")]
    Refused(String),
    #[error("the daemon gave no usable answer ({0})")]
    Protocol(String),
    #[error(transparent)]
    Spool(#[from] super::spool::SpoolError),
}

impl IntakeError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IntakeError + '_ {
        move |source| IntakeError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn hint(&self) -> &'static str {
        match self {
            IntakeError::Busy { .. } => {
                "stop the other daemon, or give this one its own `--state-dir`"
            }
            IntakeError::PathTooLong { .. } => "choose a shorter `--state-dir` (LOOPD_STATE_DIR)",
            IntakeError::Refused(_) => {
                "jobs are queued by you, from outside loopd's jobs; a job may not queue another"
            }
            _ => "check that the state dir is yours and writable",
        }
    }
}

/// The intake's locks ([`crate::util::FileLock`]), with its error.
struct Lock;

impl Lock {
    fn take(
        path: &Path,
        exclusive: bool,
        wait: bool,
    ) -> Result<Option<crate::util::FileLock>, IntakeError> {
        crate::util::FileLock::take(path, exclusive, wait).map_err(IntakeError::io(path))
    }
}

/// The jobs the daemon let in: those in `incoming/` at its start and those
/// handed over since. Anything else in `incoming/` is refused.
#[derive(Debug, Clone, Default)]
pub struct Admitted(Arc<Mutex<HashSet<String>>>);

impl Admitted {
    fn insert(&self, id: &str) {
        self.0
            .lock()
            .expect("the admitted set is never poisoned")
            .insert(id.to_owned());
    }

    fn remove(&self, id: &str) {
        self.0
            .lock()
            .expect("the admitted set is never poisoned")
            .remove(id);
    }

    /// Whether the job file `id` came in the front door.
    pub fn contains(&self, id: &str) -> bool {
        self.0
            .lock()
            .expect("the admitted set is never poisoned")
            .contains(id)
    }
}

/// The daemon's side: holds the daemon lock and the listening socket.
pub struct Intake {
    _daemon_lock: crate::util::FileLock,
    pub admitted: Admitted,
    listener: tokio::net::UnixListener,
}

/// How long a daemon waits for the daemon lock before it says another
/// one serves the spool: see [`take_daemon_lock`].
const LOCK_GRACE: Duration = Duration::from_secs(2);

/// The daemon lock, waiting a moment for a dead daemon's last child. A
/// `kill -9` can land while the daemon is between fork and exec of a
/// child: the child holds a copy of every descriptor, the lock's too,
/// until its exec closes it — a few milliseconds, longer on a loaded
/// machine — and a restart in that window was refused (the crash walks
/// saw it). A live daemon holds the lock for good, so a bounded wait tells
/// the two apart; it blocks the starting daemon only, before it serves.
fn take_daemon_lock(
    path: &Path,
    grace: Duration,
) -> Result<Option<crate::util::FileLock>, IntakeError> {
    let give_up = std::time::Instant::now() + grace;
    loop {
        if let Some(lock) = Lock::take(path, true, false)? {
            return Ok(Some(lock));
        }
        if std::time::Instant::now() >= give_up {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn socket_path(spool: &Spool) -> Result<PathBuf, IntakeError> {
    let path = spool.root.join(SOCKET);
    if path.as_os_str().len() > 107 {
        return Err(IntakeError::PathTooLong { path });
    }
    Ok(path)
}

impl Intake {
    /// Take the spool (one daemon only), bind the socket, and admit what
    /// was queued while no daemon ran. Inside a tokio runtime.
    pub fn open(spool: &Spool) -> Result<Intake, IntakeError> {
        let lock_path = spool.root.join(DAEMON_LOCK);
        let daemon_lock = take_daemon_lock(&lock_path, LOCK_GRACE)?.ok_or(IntakeError::Busy {
            path: spool.root.clone(),
        })?;
        let path = socket_path(spool)?;
        let submit_lock = Lock::take(&spool.root.join(SUBMIT_LOCK), true, true)?;
        // A socket left by a daemon that was killed: ours now (we hold the
        // daemon lock).
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(IntakeError::Io { path, source: e })
            }
            _ => {}
        }
        let listener = tokio::net::UnixListener::bind(&path).map_err(IntakeError::io(&path))?;
        let admitted = Admitted::default();
        for file in spool.list("incoming") {
            if let Some(id) = file.file_stem() {
                admitted.insert(&id.to_string_lossy());
            }
        }
        drop(submit_lock);
        Ok(Intake {
            _daemon_lock: daemon_lock,
            admitted,
            listener,
        })
    }

    /// Serve submissions until the task is dropped.
    pub async fn serve(self, spool: Spool) {
        let Intake {
            _daemon_lock,
            admitted,
            listener,
        } = self;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most likely: wait instead of spinning.
                    tracing::warn!(error = %e, "cannot accept a submission");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (spool, admitted) = (spool.clone(), admitted.clone());
            tokio::spawn(async move {
                if let Err(e) = handle(stream, &spool, &admitted).await {
                    tracing::warn!(error = %e, "a submission failed");
                }
            });
        }
    }
}

/// Why this peer may not submit; `None` when it may.
fn refuse_peer(stream: &tokio::net::UnixStream) -> Option<String> {
    let cred = match stream.peer_cred() {
        Ok(c) => c,
        Err(e) => return Some(format!("cannot tell who is submitting: {e}")),
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if cred.uid() != me {
        return Some(format!(
            "submitted by uid {}, not by the daemon's user (uid {me})",
            cred.uid()
        ));
    }
    let Some(pid) = cred.pid() else {
        return Some("cannot tell which process is submitting".into());
    };
    crate::process::why_contained(pid)
        .map(|why| format!("submitted from inside a loopd job: {why}"))
}

async fn handle(
    stream: tokio::net::UnixStream,
    spool: &Spool,
    admitted: &Admitted,
) -> std::io::Result<()> {
    let refusal = refuse_peer(&stream);
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no request"))??;
    let reply = match serde_json::from_str::<JobSpec>(&line) {
        Err(e) => Reply::Refused(format!("not a job: {e}")),
        Ok(spec) => admit(spec, refusal, spool, admitted),
    };
    let mut text = serde_json::to_string(&reply).expect("a reply serializes");
    text.push('\n');
    write.write_all(text.as_bytes()).await
}

/// Queue a handed-over job, or keep it in `rejected/` and say why.
fn admit(spec: JobSpec, refusal: Option<String>, spool: &Spool, admitted: &Admitted) -> Reply {
    if !super::spool::valid_id(&spec.job_id) {
        return Reply::Refused(format!("`{}` is not a job id", spec.job_id));
    }
    if let Some(why) = refusal {
        tracing::error!(job_id = %spec.job_id, why = %why, "a job tried to queue a job: refused");
        match spool.submit_to(&spec, "rejected") {
            Ok(path) => spool.explain(&path, &why),
            Err(e) => tracing::error!(error = %e, "cannot keep the refused job file"),
        }
        return Reply::Refused(why);
    }
    admitted.insert(&spec.job_id);
    match spool.submit(&spec) {
        Ok(_) => {
            tracing::info!(job_id = %spec.job_id, "job handed over");
            Reply::Queued
        }
        Err(e) => {
            admitted.remove(&spec.job_id);
            Reply::Refused(e.to_string())
        }
    }
}

/// Where `submit` put the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Handed to the running daemon.
    Daemon,
    /// Written into `incoming/` for the next daemon to take.
    Spool,
}

/// `loopd submit`'s side: hand the job to the running daemon, or queue the
/// file when none runs.
pub fn submit(spool: &Spool, spec: &JobSpec) -> Result<Delivered, IntakeError> {
    let path = socket_path(spool)?;
    if let Some(d) = hand_over(&path, spec)? {
        return Ok(d);
    }
    let _shared = Lock::take(&spool.root.join(SUBMIT_LOCK), false, true)?;
    // A daemon may have started since: it has scanned and listens now.
    if let Some(d) = hand_over(&path, spec)? {
        return Ok(d);
    }
    spool.submit(spec)?;
    Ok(Delivered::Spool)
}

/// `None`: no daemon listens.
fn hand_over(path: &Path, spec: &JobSpec) -> Result<Option<Delivered>, IntakeError> {
    let mut stream = match std::os::unix::net::UnixStream::connect(path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => {
            return Err(IntakeError::Io {
                path: path.to_path_buf(),
                source: e,
            })
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(IntakeError::io(path))?;
    let mut text = serde_json::to_string(spec).expect("a job spec serializes");
    text.push('\n');
    stream
        .write_all(text.as_bytes())
        .map_err(IntakeError::io(path))?;
    let mut line = String::new();
    std::io::BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(IntakeError::io(path))?;
    match serde_json::from_str::<Reply>(&line) {
        Ok(Reply::Queued) => Ok(Some(Delivered::Daemon)),
        Ok(Reply::Refused(why)) => Err(IntakeError::Refused(why)),
        Err(e) => Err(IntakeError::Protocol(format!("{e}: `{}`", line.trim()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock a dead daemon's child still holds for a moment is taken once
    /// it lets go; one held for good is not, after the grace.
    #[test]
    fn the_daemon_lock_waits_out_a_brief_holder_but_not_a_daemon() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("daemon.lock");
        let brief = crate::util::FileLock::take(&path, true, false)
            .expect("lock")
            .expect("free");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(brief);
        });
        let taken = take_daemon_lock(&path, Duration::from_secs(10)).expect("no error");
        release.join().expect("released");
        assert!(taken.is_some(), "taken once the brief holder let go");
        let second = take_daemon_lock(&path, Duration::from_millis(200)).expect("no error");
        assert!(second.is_none(), "a daemon holding it keeps it");
    }
}
