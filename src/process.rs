//! Contained processes: spawn so that everything a child starts can be found
//! again, and stop all of it — SIGTERM, a grace period, SIGKILL.
//!
//! A process group is not enough. The Claude Code CLI runs every Bash-tool
//! command in a *new session* (CLAUDE_CLI.md §7), and a test suite may
//! double-fork a server with `setsid`; neither is in the child's group, and
//! both survive the CLI's own exit. So containment has three parts:
//!
//! 1. the child leads a new process group (one `kill(-pgid)` reaches the CLI
//!    and its ordinary children);
//! 2. every child carries a unique [`TOKEN_VAR`] in its environment, which
//!    all its descendants inherit, setsid or not — a sweep over `/proc` finds
//!    them by that token;
//! 3. loopd is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so orphans are
//!    re-parented to loopd instead of init and are reaped here, never left as
//!    zombies nor lost to another parent.
//!
//! [`Contained::stop`] and [`sweep`] implement TERM → grace → KILL over the
//! group *and* the token set; a second request to stop skips the grace.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Environment variable that marks every process of one contained unit.
pub const TOKEN_VAR: &str = "LOOPD_CONTAINMENT";

/// How often the stop loop looks whether the processes are gone.
const POLL: Duration = Duration::from_millis(5);

/// The signals containment sends. An enum rather than a raw `c_int`, so a
/// signal number cannot stand where a pid belongs or the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Asks to exit; may be caught or ignored.
    Term,
    /// Cannot be caught nor ignored.
    Kill,
}

impl Signal {
    fn raw(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }
}

/// One process. A signal sent through a `Pid` reaches that process only:
/// kill(2) reads 0 as "my group", a negative number as "that group" and -1
/// as "everything I may signal", so [`Pid::new`] refuses all of them and
/// groups have their own type, [`Pgid`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(i32);

impl Pid {
    /// `None` unless `raw` is positive (see the type's doc).
    pub fn new(raw: i32) -> Option<Pid> {
        (raw > 0).then_some(Pid(raw))
    }

    pub fn get(self) -> i32 {
        self.0
    }

    /// The group this process leads. Only a group leader has one by that
    /// number — such as every child spawned from [`command`], which puts it
    /// in a new group of its own.
    pub fn led_group(self) -> Pgid {
        Pgid(self.0)
    }

    /// Send `sig` to this process alone. `ESRCH` means it is already gone.
    pub fn kill(self, sig: Signal) -> std::io::Result<()> {
        raw_kill(self.0, sig)
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A process group: a signal sent through a `Pgid` reaches every member.
/// Built only from its leader's [`Pid`] ([`Pid::led_group`]), so it is
/// always positive, and the minus sign kill(2) wants lives in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pgid(i32);

impl Pgid {
    pub fn get(self) -> i32 {
        self.0
    }

    /// Send `sig` to every process of the group. `ESRCH` means the group
    /// has no member left.
    pub fn kill(self, sig: Signal) -> std::io::Result<()> {
        raw_kill(-self.0, sig)
    }
}

impl fmt::Display for Pgid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

fn raw_kill(target: libc::pid_t, sig: Signal) -> std::io::Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    if unsafe { libc::kill(target, sig.raw()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Signal each process, ignoring failures: a process found by a scan may
/// exit before the signal reaches it (`ESRCH`), which is what we want.
fn kill_all(pids: &[Pid], sig: Signal) {
    for &pid in pids {
        if let Err(e) = pid.kill(sig) {
            if e.raw_os_error() != Some(libc::ESRCH) {
                tracing::debug!(pid = pid.get(), ?sig, error = %e, "cannot signal a contained process");
            }
        }
    }
}

/// Whether a sweep also stops *strays*: see [`enable_stray_sweep`].
static KILL_STRAYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Also stop strays at every sweep: processes re-parented to us (we are a
/// subreaper) that tokio does not manage and that carry no containment token
/// — an orphan whose environment was scrubbed (`env -i`) on its way out, the
/// one escape the token alone cannot see. Only the `loopd` binary turns this
/// on: in a test process, other tests' children look the same.
pub fn enable_stray_sweep() {
    KILL_STRAYS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Pids spawned through tokio and not yet waited for: the orphan reaper must
/// leave them to tokio.
static MANAGED: Mutex<Option<HashSet<Pid>>> = Mutex::new(None);

fn managed_remove(pid: Pid) {
    if let Some(set) = MANAGED.lock().expect("managed pid set").as_mut() {
        set.remove(&pid);
    }
}

fn is_managed(pid: Pid) -> bool {
    MANAGED
        .lock()
        .expect("managed pid set")
        .as_ref()
        .is_some_and(|s| s.contains(&pid))
}

/// Make this process a child subreaper, so that processes orphaned by a
/// contained child are re-parented here. Returns whether it worked (Linux only).
pub fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument
        // and has no memory-safety preconditions.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// A fresh token, unique per contained unit: `<scope>/<pid>-<n>-<label>`.
/// The scope (a job id) lets [`sweep_scope`] find every process of a job,
/// even one started by an earlier loopd process.
pub fn new_token(scope: &str, label: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{scope}/{}-{}-{}", std::process::id(), n, label)
}

/// Stop every process whose token belongs to `scope` (TERM, grace, KILL):
/// what a crashed loopd left running for that job.
pub async fn sweep_scope(scope: &str, grace: Duration) -> usize {
    let prefix = format!("{scope}/");
    let tokens: std::collections::BTreeSet<String> = processes_matching(|t| t.starts_with(&prefix))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let mut n = 0;
    for t in tokens {
        n += sweep(&t, grace).await;
    }
    n
}

/// A command prepared for containment: new process group, token in the
/// environment, killed if dropped.
pub fn command(program: impl AsRef<std::ffi::OsStr>, token: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.process_group(0)
        .env(TOKEN_VAR, token)
        .kill_on_drop(true);
    cmd
}

/// A running contained child.
#[derive(Debug)]
pub struct Contained {
    pub child: Child,
    pub pid: Pid,
    pub token: String,
}

impl Contained {
    pub fn spawn(mut cmd: Command, token: String) -> std::io::Result<Contained> {
        // Hold the managed set across the spawn: a child that exits at once
        // must not be reaped by `reap_orphans` on another thread before it is
        // marked as tokio's, or tokio's wait fails with ECHILD.
        let mut managed = MANAGED.lock().expect("managed pid set");
        let child = cmd.spawn()?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .and_then(Pid::new)
            .expect("a child that was just spawned and not yet waited for has a pid");
        managed.get_or_insert_with(HashSet::new).insert(pid);
        drop(managed);
        Ok(Contained { child, pid, token })
    }

    /// The child's own process group (see [`command`]).
    pub fn group(&self) -> Pgid {
        self.pid.led_group()
    }

    /// Wait for the child to exit by itself.
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let status = self.child.wait().await;
        managed_remove(self.pid);
        status
    }

    /// Stop the child and everything it started: SIGTERM to its group and
    /// to every process carrying its token, `grace` to go, then SIGKILL.
    /// Returns the child's exit status.
    pub async fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        signal_group(self.group(), Signal::Term);
        let status = terminate_tree(&self.token, grace, Some(&mut self.child)).await;
        managed_remove(self.pid);
        status
    }

    /// After a normal exit: stop whatever the child left running.
    pub async fn sweep(&self, grace: Duration) -> usize {
        signal_group(self.group(), Signal::Term);
        sweep(&self.token, grace).await
    }
}

/// Signal a group, ignoring `ESRCH`: the group may have no member left.
fn signal_group(group: Pgid, sig: Signal) {
    if let Err(e) = group.kill(sig) {
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::debug!(pgid = group.get(), ?sig, error = %e, "cannot signal a contained group");
        }
    }
}

/// Stop every live process that carries `token` (TERM, grace, KILL).
/// Returns how many were found.
pub async fn sweep(token: &str, grace: Duration) -> usize {
    // A process in the middle of exec(2) can briefly show no environment:
    // one empty scan is not proof, so look twice.
    let mut found = processes_with_token(token).len();
    if found == 0 {
        tokio::time::sleep(POLL).await;
        found = processes_with_token(token).len();
    }
    if found > 0 {
        tracing::debug!(token, found, "stopping leftover processes");
        terminate_tree(token, grace, None).await;
    }
    reap_orphans();
    if KILL_STRAYS.load(std::sync::atomic::Ordering::Relaxed) {
        found += stop_strays(grace).await;
    }
    found
}

/// Our unmanaged, token-less, live children.
fn strays() -> Vec<Pid> {
    let me = std::process::id() as i32;
    let prefix = format!("{TOKEN_VAR}=");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
                .and_then(Pid::new)
        })
        .filter(|&pid| {
            matches!(stat_fields(pid), Some((state, ppid)) if ppid == me && state != 'Z')
                && !is_managed(pid)
        })
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    !env.split(|&b| b == 0)
                        .any(|v| v.starts_with(prefix.as_bytes()))
                })
                .unwrap_or(false)
        })
        .collect()
}

async fn stop_strays(grace: Duration) -> usize {
    let found = strays();
    if found.is_empty() {
        return 0;
    }
    tracing::warn!(
        count = found.len(),
        "stopping orphans that shed their containment token"
    );
    kill_all(&found, Signal::Term);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && found.iter().any(|&p| !is_zombie(p)) {
        reap_orphans();
        tokio::time::sleep(POLL).await;
    }
    let left: Vec<Pid> = found.iter().copied().filter(|&p| !is_zombie(p)).collect();
    kill_all(&left, Signal::Kill);
    tokio::time::sleep(POLL).await;
    reap_orphans();
    found.len()
}

async fn terminate_tree(
    token: &str,
    grace: Duration,
    mut child: Option<&mut Child>,
) -> Option<std::process::ExitStatus> {
    let mut status = None;
    let deadline = Instant::now() + grace;
    let mut killed = false;
    let hard_deadline = Instant::now() + grace + Duration::from_secs(5);
    // Gone means two empty scans in a row (see `sweep`).
    let mut empty_scans = 0;
    loop {
        let pids = processes_with_token(token);
        if !killed {
            kill_all(&pids, Signal::Term);
        }
        if let Some(c) = child.as_deref_mut() {
            if status.is_none() {
                if let Ok(Some(s)) = c.try_wait() {
                    status = Some(s);
                }
            }
        }
        let child_done = child.is_none() || status.is_some();
        empty_scans = if pids.is_empty() { empty_scans + 1 } else { 0 };
        if empty_scans >= 2 && child_done {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            // Grace is over: kill what is left, and keep scanning, since a
            // dying parent may have forked once more.
            kill_all(&pids, Signal::Kill);
            if let Some(c) = child.as_deref_mut() {
                if status.is_none() {
                    let _ = c.start_kill();
                }
            }
            killed = true;
        }
        if now >= hard_deadline {
            tracing::warn!(token, left = pids.len(), "processes survived SIGKILL");
            break;
        }
        reap_orphans();
        tokio::time::sleep(POLL).await;
    }
    if let (Some(c), None) = (child, status) {
        status = c.wait().await.ok();
    }
    reap_orphans();
    status
}

/// Live (non-zombie) processes whose environment carries `token`.
pub fn processes_with_token(token: &str) -> Vec<Pid> {
    processes_matching(|t| t == token)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// Live processes whose token satisfies `pred`, with their tokens.
fn processes_matching(pred: impl Fn(&str) -> bool) -> Vec<(Pid, String)> {
    let prefix = format!("{TOKEN_VAR}=");
    let prefix = prefix.as_bytes();
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(Pid::new)
        else {
            continue;
        };
        if pid.get() == me {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let token = env
            .split(|&b| b == 0)
            .find_map(|var| var.strip_prefix(prefix))
            .map(|t| String::from_utf8_lossy(t).into_owned());
        if let Some(token) = token {
            if pred(&token) && !is_zombie(pid) {
                pids.push((pid, token));
            }
        }
    }
    pids
}

fn stat_fields(pid: Pid) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid.get().to_string()).join("stat"))
        .ok()?;
    // The command name is in parentheses and may contain spaces.
    let after = &stat[stat.rfind(')')? + 2..];
    let mut fields = after.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn is_zombie(pid: Pid) -> bool {
    matches!(stat_fields(pid), Some(('Z', _)) | None)
}

/// Reap zombies re-parented to us (we are a subreaper) that tokio does not
/// own. Never touches a child tokio is still waiting for.
pub fn reap_orphans() -> usize {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut reaped = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(Pid::new)
        else {
            continue;
        };
        if let Some(('Z', ppid)) = stat_fields(pid) {
            if ppid == me && !is_managed(pid) {
                let mut status = 0;
                // SAFETY: waitpid on a specific pid of a zombie child we do not
                // otherwise track; `status` is a valid out-pointer.
                let r = unsafe { libc::waitpid(pid.get(), &mut status, libc::WNOHANG) };
                if r == pid.get() {
                    reaped += 1;
                }
            }
        }
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stop_reaches_a_setsid_grandchild() {
        become_subreaper();
        let token = new_token("unit", "test");
        let mut cmd = command("sh", &token);
        // The grandchild leaves the group with setsid and ignores nothing.
        cmd.arg("-c").arg("setsid sleep 300 & sleep 300");
        let mut c = Contained::spawn(cmd, token.clone()).expect("spawn sh");
        // Wait until both sleeps exist.
        for _ in 0..400 {
            if processes_with_token(&token).len() >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(processes_with_token(&token).len() >= 2);
        c.stop(Duration::from_secs(2)).await;
        assert!(
            processes_with_token(&token).is_empty(),
            "survivors: {:?}",
            processes_with_token(&token)
        );
    }

    #[tokio::test]
    async fn sweep_kills_processes_that_ignore_sigterm() {
        become_subreaper();
        let token = new_token("unit", "test-ignore");
        let mut cmd = command("sh", &token);
        cmd.arg("-c")
            .arg("(trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep 300' &) ; exit 0");
        let mut c = Contained::spawn(cmd, token.clone()).expect("spawn sh");
        c.wait().await.expect("sh exits");
        for _ in 0..400 {
            if !processes_with_token(&token).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            !processes_with_token(&token).is_empty(),
            "the leak happened"
        );
        let found = c.sweep(Duration::from_millis(100)).await;
        assert!(found >= 1);
        assert!(processes_with_token(&token).is_empty());
    }

    #[test]
    fn pids_and_groups_are_positive_and_distinct() {
        assert_eq!(Pid::new(0), None);
        assert_eq!(Pid::new(-1), None);
        let pid = Pid::new(42).expect("positive");
        assert_eq!(pid.get(), 42);
        assert_eq!(pid.led_group().get(), 42);
    }
}
