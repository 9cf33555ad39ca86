//! Contained processes: spawn so that everything a child starts can be found
//! again, and stop all of it — SIGTERM, a grace period, SIGKILL.
//!
//! A process group is not enough. The Claude Code CLI runs every Bash-tool
//! command in a *new session* (CLAUDE_CLI.md §7), and a test suite may
//! double-fork a server with `setsid`; neither is in the child's group, and
//! both survive the CLI's own exit. So containment has three parts:
//!
//! 1. the child leads a new session, and so a new process group (one
//!    `kill(-pgid)` reaches the CLI and its ordinary children) — and has no
//!    controlling terminal: nothing a job runs can open `/dev/tty`, read
//!    the user's keystrokes or push input into the user's shell (`TIOCSTI`);
//! 2. every child carries a unique [`TOKEN_VAR`] in its environment, which
//!    all its descendants inherit, setsid or not — a sweep over `/proc` finds
//!    them by that token;
//! 3. loopd is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so orphans are
//!    re-parented to loopd instead of init and are reaped here, never left as
//!    zombies nor lost to another parent.
//!
//! [`Contained::stop`] and [`sweep`] implement TERM → grace → KILL over the
//! group *and* the token set; a hurry request (a second signal, see
//! [`Contained::stop_until`]) cuts the grace short, even once it has begun.
//!
//! A token scan must also see processes in the middle of `execve(2)`: between
//! the old image and the new one's stack, `/proc/<pid>/environ` reads empty,
//! so the token is invisible for that moment. [`Mark::Unknown`] names that
//! state, and a stop is over only when no descendant of ours is in it.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Environment variable that marks every process of one contained unit.
pub const TOKEN_VAR: &str = "LOOPD_CONTAINMENT";

/// How often the stop loop looks whether the processes are gone.
const POLL: Duration = Duration::from_millis(5);

/// How long a stop keeps looking after SIGKILL before it gives up: a process
/// in uninterruptible sleep (a hung disk, NFS) cannot die sooner.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// `PF_KTHREAD` in `/proc/<pid>/stat`'s flags: kernel threads have no
/// environment and are never ours.
const PF_KTHREAD: u64 = 0x0020_0000;

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
    let mut tokens = std::collections::BTreeSet::new();
    // Two scans, as everywhere: a process in the middle of exec(2) hides its
    // token from one of them.
    for pass in 0..2 {
        if pass > 0 {
            tokio::time::sleep(POLL).await;
        }
        let found = scan(|t| t.starts_with(&prefix));
        tokens.extend(found.matched.into_iter().map(|(_, t)| t));
    }
    let mut n = 0;
    for t in tokens {
        n += sweep(&t, grace).await;
    }
    n
}

/// A command prepared for containment: a new session (its own process
/// group, no controlling terminal), exactly the environment `env` (built
/// from an allow-list, never inherited) and the token, killed if dropped.
pub fn command<K, V>(
    program: impl AsRef<std::ffi::OsStr>,
    token: &str,
    env: impl IntoIterator<Item = (K, V)>,
) -> Command
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.env_clear().envs(env);
    cmd.env(TOKEN_VAR, token).kill_on_drop(true);
    // SAFETY: `setsid` is async-signal-safe; it runs in the forked child
    // before exec, first of the child's steps (the sandbox's come after).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// A request to skip what is left of a grace period: a second signal. The
/// one place that implements "a second request to stop skips the grace":
/// every grace wait of a stop sleeps through [`Hurry::sleep`], so the
/// request cuts it short whenever it arrives, before or during the wait.
/// Once arrived, it stays arrived for every later grace of the same stop.
struct Hurry<'a, H> {
    request: Option<Pin<&'a mut H>>,
}

impl<'a, H: Future<Output = ()>> Hurry<'a, H> {
    fn new(request: Pin<&'a mut H>) -> Self {
        Hurry {
            request: Some(request),
        }
    }

    fn arrived(&self) -> bool {
        self.request.is_none()
    }

    /// Sleep `d`, or less if the request arrives meanwhile.
    async fn sleep(&mut self, d: Duration) {
        let Some(request) = self.request.as_mut() else {
            tokio::time::sleep(d).await;
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = request.as_mut() => {
                tracing::info!("hurry requested: skipping the rest of the grace period");
                self.request = None;
            }
        }
    }
}

/// Spawn a helper loopd waits for itself (std, not tokio), marked managed
/// across the spawn and until [`Managed::wait`]: between its fork and its
/// exec a child shows loopd's own environment, with no token, so a sweep
/// for strays on another thread (another job of the daemon) would take it
/// for an orphan and stop it; and `reap_orphans` must leave its exit to
/// the wait.
pub fn spawn_managed(cmd: &mut std::process::Command) -> std::io::Result<Managed> {
    let mut managed = MANAGED.lock().expect("managed pid set");
    let child = cmd.spawn()?;
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::new)
        .expect("a child that was just spawned and not yet waited for has a pid");
    managed.get_or_insert_with(HashSet::new).insert(pid);
    drop(managed);
    Ok(Managed { child, pid })
}

/// A std child marked managed until waited for ([`spawn_managed`]).
pub struct Managed {
    pub child: std::process::Child,
    pid: Pid,
}

impl Managed {
    /// Wait for it to exit, and unmark it.
    pub fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        let status = self.child.wait();
        managed_remove(self.pid);
        status
    }
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
        self.stop_until(grace, std::future::pending()).await
    }

    /// [`stop`](Self::stop), but when `hurry` resolves (a second signal),
    /// whatever is left of the grace is skipped and SIGKILL follows within a
    /// poll. `hurry` may resolve at once (the first request was already in
    /// a hurry) or at any time during the grace.
    pub async fn stop_until(
        &mut self,
        grace: Duration,
        hurry: impl Future<Output = ()>,
    ) -> Option<std::process::ExitStatus> {
        let hurry = std::pin::pin!(hurry);
        let mut hurry = Hurry::new(hurry);
        signal_group(self.group(), Signal::Term);
        let stopped = terminate_tree(&self.token, grace, Some(&mut self.child), &mut hurry).await;
        managed_remove(self.pid);
        stopped.status
    }

    /// After a normal exit: stop whatever the child left running.
    pub async fn sweep(&self, grace: Duration) -> usize {
        self.sweep_until(grace, std::future::pending()).await
    }

    /// [`sweep`](Self::sweep), with the grace cut short when `hurry`
    /// resolves, as in [`stop_until`](Self::stop_until).
    pub async fn sweep_until(&self, grace: Duration, hurry: impl Future<Output = ()>) -> usize {
        let hurry = std::pin::pin!(hurry);
        let mut hurry = Hurry::new(hurry);
        signal_group(self.group(), Signal::Term);
        sweep_token(&self.token, grace, &mut hurry).await
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
    let never = std::pin::pin!(std::future::pending::<()>());
    sweep_token(token, grace, &mut Hurry::new(never)).await
}

async fn sweep_token<H: Future<Output = ()>>(
    token: &str,
    grace: Duration,
    hurry: &mut Hurry<'_, H>,
) -> usize {
    let stopped = terminate_tree(token, grace, None, hurry).await;
    if stopped.seen > 0 {
        tracing::debug!(token, found = stopped.seen, "stopped leftover processes");
    }
    reap_orphans();
    let mut found = stopped.seen;
    if KILL_STRAYS.load(std::sync::atomic::Ordering::Relaxed) {
        found += stop_strays(grace, hurry).await;
    }
    found
}

/// Our unmanaged children that are known to carry no token. A child in the
/// middle of exec(2) is not known to carry none: it may be another unit's
/// orphan (a test server) that must live on.
fn strays() -> Vec<Pid> {
    let me = std::process::id() as i32;
    all_pids()
        .filter(|&pid| {
            matches!(stat(pid), Some(st) if st.ppid == me && !st.dead())
                && !is_managed(pid)
                && matches!(mark(pid), Some(Mark::NoToken))
        })
        .collect()
}

async fn stop_strays<H: Future<Output = ()>>(grace: Duration, hurry: &mut Hurry<'_, H>) -> usize {
    let found = strays();
    if found.is_empty() {
        return 0;
    }
    tracing::warn!(
        count = found.len(),
        "stopping orphans that shed their containment token"
    );
    kill_all(&found, Signal::Term);
    let me = std::process::id() as i32;
    // Still our child and alive: once reaped, a pid may be reused by a
    // stranger, who must not get the SIGKILL.
    let alive = |p: Pid| matches!(stat(p), Some(st) if st.ppid == me && !st.dead());
    let ends = Instant::now() + grace;
    while !hurry.arrived() && Instant::now() < ends && found.iter().any(|&p| alive(p)) {
        reap_orphans();
        hurry.sleep(POLL).await;
    }
    let left: Vec<Pid> = found.iter().copied().filter(|&p| alive(p)).collect();
    kill_all(&left, Signal::Kill);
    tokio::time::sleep(POLL).await;
    reap_orphans();
    found.len()
}

/// What [`terminate_tree`] did.
struct Stopped {
    /// The contained child's exit status, when there was a child.
    status: Option<std::process::ExitStatus>,
    /// How many distinct processes carried the token.
    seen: usize,
}

async fn terminate_tree<H: Future<Output = ()>>(
    token: &str,
    grace: Duration,
    mut child: Option<&mut Child>,
    hurry: &mut Hurry<'_, H>,
) -> Stopped {
    let mut status = None;
    let grace_ends = Instant::now() + grace;
    let mut killed_at: Option<Instant> = None;
    let mut seen = HashSet::new();
    // Gone means two clean scans in a row: /proc is read one directory
    // entry at a time, so a process forking a child at a lower pid (pids
    // wrap around) and then exiting could slip past a single scan.
    let mut clean_scans = 0;
    loop {
        let found = scan(|t| t == token);
        let pids: Vec<Pid> = found.matched.iter().map(|&(pid, _)| pid).collect();
        seen.extend(pids.iter().copied());
        if let Some(c) = child.as_deref_mut() {
            if status.is_none() {
                if let Ok(Some(s)) = c.try_wait() {
                    status = Some(s);
                }
            }
        }
        let child_done = child.is_none() || status.is_some();
        clean_scans = if found.is_clean() { clean_scans + 1 } else { 0 };
        if clean_scans >= 2 && child_done {
            break;
        }
        let now = Instant::now();
        if killed_at.is_none() && (hurry.arrived() || now >= grace_ends) {
            killed_at = Some(now);
            if let Some(c) = child.as_deref_mut() {
                if status.is_none() {
                    let _ = c.start_kill();
                }
            }
        }
        // Signal on every round, since a dying parent may have forked once
        // more: TERM while the grace lasts, KILL after it.
        match killed_at {
            None => kill_all(&pids, Signal::Term),
            Some(at) => {
                kill_all(&pids, Signal::Kill);
                if now >= at + KILL_WAIT {
                    tracing::warn!(
                        token,
                        left = pids.len(),
                        in_exec = found.unknown.len(),
                        "processes survived SIGKILL"
                    );
                    break;
                }
            }
        }
        reap_orphans();
        hurry.sleep(POLL).await;
    }
    if let (Some(c), None) = (child, status) {
        status = c.wait().await.ok();
    }
    reap_orphans();
    Stopped {
        status,
        seen: seen.len(),
    }
}

/// Live (non-zombie) processes whose environment carries `token`. A process
/// in the middle of exec(2) is not among them (see [`Mark::Unknown`]).
pub fn processes_with_token(token: &str) -> Vec<Pid> {
    scan(|t| t == token)
        .matched
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// What one pass over `/proc` saw.
struct Scan {
    /// Live processes whose token satisfied the predicate, with the token.
    matched: Vec<(Pid, String)>,
    /// Descendants of ours whose token cannot be read right now (see
    /// [`Mark::Unknown`]); any of them may carry the token.
    unknown: Vec<Pid>,
}

impl Scan {
    /// Nothing matched, and nothing that could match hid.
    fn is_clean(&self) -> bool {
        self.matched.is_empty() && self.unknown.is_empty()
    }
}

fn scan(pred: impl Fn(&str) -> bool) -> Scan {
    let me = std::process::id() as i32;
    let mut found = Scan {
        matched: Vec::new(),
        unknown: Vec::new(),
    };
    for pid in all_pids().filter(|p| p.get() != me) {
        match mark(pid) {
            Some(Mark::Token(t)) if pred(&t) => found.matched.push((pid, t)),
            // Only our descendants can carry one of our tokens (orphans come
            // back to us as subreaper), and an unrelated process stuck in
            // exec must not hold up every stop.
            Some(Mark::Unknown) if descends_from(pid, me) => found.unknown.push(pid),
            _ => {}
        }
    }
    found
}

/// What a process's environment says about containment.
#[derive(Debug, PartialEq, Eq)]
enum Mark {
    Token(String),
    /// It has an environment (possibly an empty one), without a token.
    NoToken,
    /// Between two images: in the middle of `execve(2)` — after the old
    /// memory is gone, before the new stack holds the environment — or on
    /// its way out. `/proc/<pid>/environ` reads empty then; ask again soon.
    Unknown,
}

/// Read a process's mark. `None`: gone, a zombie, a kernel thread, or not
/// ours to read.
fn mark(pid: Pid) -> Option<Mark> {
    let prefix = format!("{TOKEN_VAR}=");
    // An empty read of an image that does have an environment means our read
    // straddled an exec (it opened the old image, which was gone when read):
    // read again, a bounded number of times.
    for _ in 0..3 {
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        if !env.is_empty() {
            let token = env
                .split(|&b| b == 0)
                .find_map(|var| var.strip_prefix(prefix.as_bytes()));
            return match token {
                Some(t) if !is_zombie(pid) => {
                    Some(Mark::Token(String::from_utf8_lossy(t).into_owned()))
                }
                Some(_) => None,
                None => Some(Mark::NoToken),
            };
        }
        // Empty: a zombie, a kernel thread, an `env -i` process, or one
        // between images. The stat line tells them apart.
        let st = stat(pid)?;
        if st.dead() || st.flags & PF_KTHREAD != 0 {
            return None;
        }
        match st.env {
            // Kernels before 3.5 do not say: take the empty read at its word,
            // as the two-scan rule did alone.
            None => return Some(Mark::NoToken),
            Some((_, 0)) => return Some(Mark::Unknown),
            Some((start, end)) if start == end => return Some(Mark::NoToken),
            Some(_) => continue,
        }
    }
    Some(Mark::Unknown)
}

/// Whether `ancestor` is among `pid`'s ancestors.
fn descends_from(pid: Pid, ancestor: i32) -> bool {
    let mut p = pid;
    // A bound instead of trusting /proc to describe a tree while it changes.
    for _ in 0..64 {
        let Some(st) = stat(p) else { return false };
        if st.ppid == ancestor {
            return true;
        }
        match Pid::new(st.ppid) {
            Some(parent) if st.ppid > 1 => p = parent,
            _ => return false,
        }
    }
    false
}

/// Why `pid` is a process a loopd job started; `None` when it is not.
///
/// Asked by the daemon of whoever submits a job. Contained means: it, or
/// one of its ancestors, carries a containment token (which names the
/// job); it descends from this loopd (a child subreaper, so a double fork
/// with a scrubbed environment still does); or one of its ancestors runs
/// the same program as this loopd (a foreground `loopd run` or `loopd ci`).
/// Fails closed: a process that cannot be inspected counts as contained.
pub fn why_contained(pid: i32) -> Option<String> {
    let Some(peer) = Pid::new(pid) else {
        return Some(format!("no such process {pid}"));
    };
    let me = std::process::id() as i32;
    let comm = |p: i32| std::fs::read_to_string(format!("/proc/{p}/comm")).ok();
    let mine = comm(me);
    let mut cur = peer;
    // A bound instead of trusting /proc to describe a tree while it changes.
    for _ in 0..64 {
        match mark(cur) {
            Some(Mark::Token(t)) => {
                let job = t.split('/').next().unwrap_or_default();
                let via = if cur == peer {
                    String::new()
                } else {
                    format!(" runs under process {cur}, which")
                };
                return Some(format!(
                    "process {pid}{via} carries the containment token of job {job}"
                ));
            }
            // The submitter itself must be readable (ours); an ancestor
            // need not be (a root-owned session leader).
            None if cur == peer => return Some(format!("process {pid} cannot be inspected")),
            _ => {}
        }
        let Some(st) = stat(cur) else {
            return Some(format!("process {pid}'s ancestry cannot be inspected"));
        };
        if st.ppid == me {
            return Some(format!(
                "process {pid} descends from this loopd (pid {me}), which ran it for a job"
            ));
        }
        // Reached init (or the top): no loopd above it.
        let parent = Pid::new(st.ppid).filter(|_| st.ppid > 1)?;
        if mine.is_some() && comm(parent.get()) == mine {
            return Some(format!(
                "process {pid} runs under {} (pid {parent})",
                mine.as_deref().unwrap_or_default().trim()
            ));
        }
        cur = parent;
    }
    Some(format!(
        "process {pid}'s ancestry is deeper than loopd looks"
    ))
}

/// Every process (thread-group leader) `/proc` lists.
fn all_pids() -> impl Iterator<Item = Pid> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
                .and_then(Pid::new)
        })
}

/// The fields of `/proc/<pid>/stat` containment needs.
struct Stat {
    state: char,
    ppid: i32,
    /// The session it is in.
    session: i32,
    flags: u64,
    /// `env_start` and `env_end` (Linux 3.5+; zeros for a process we may
    /// not inspect, or whose memory is between images).
    env: Option<(u64, u64)>,
}

impl Stat {
    /// A zombie (`Z`) or dead (`X`): signals and tokens no longer matter.
    fn dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

fn stat(pid: Pid) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces
    // and parentheses: the other fields start after the last ')'.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // Numbered as in proc(5); `rest` starts at field 3.
    let field = |n: usize| fields.get(n - 3).copied();
    let number = |n: usize| field(n).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        flags: number(9)?,
        env: number(50).zip(number(51)),
    })
}

fn is_zombie(pid: Pid) -> bool {
    stat(pid).is_none_or(|st| st.dead())
}

/// Reap zombies re-parented to us (we are a subreaper) that tokio does not
/// own. Never touches a child tokio is still waiting for, nor one in our
/// own session: every contained process leads a session of its own
/// ([`command`]) and none of its descendants can join ours, so a zombie
/// child in our session is one its spawner waits for (a `git` a test
/// harness runs beside a job in its process) — reaping it would leave that
/// spawner with `ECHILD`.
pub fn reap_orphans() -> usize {
    let me = std::process::id() as i32;
    // SAFETY: getsid(0) only reads this process's session id.
    let own_session = unsafe { libc::getsid(0) };
    let mut reaped = 0;
    for pid in all_pids() {
        let Some(st) = stat(pid) else { continue };
        if st.state == 'Z' && st.ppid == me && st.session != own_session && !is_managed(pid) {
            let mut status = 0;
            // SAFETY: waitpid on a specific pid of a zombie child we do not
            // otherwise track; `status` is a valid out-pointer.
            let r = unsafe { libc::waitpid(pid.get(), &mut status, libc::WNOHANG) };
            if r == pid.get() {
                reaped += 1;
            }
        }
    }
    reaped
}

/// Helpers for tests that start contained processes, here and in the
/// modules that use containment.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader, Lines};

    use super::{reap_orphans, scan, Signal, POLL};

    /// SIGKILLs, when dropped, every process whose token matches — so a test
    /// that fails (panics) half-way leaves nothing running behind it.
    pub struct KillOnDrop {
        matches: Box<dyn Fn(&str) -> bool>,
    }

    impl KillOnDrop {
        /// Processes carrying exactly `token`.
        pub fn token(token: &str) -> Self {
            let token = token.to_owned();
            KillOnDrop {
                matches: Box::new(move |t| t == token),
            }
        }

        /// Processes of every unit of `scope` (see [`super::new_token`]):
        /// for a test that does not see the tokens its code makes.
        pub fn scope(scope: &str) -> Self {
            let prefix = format!("{scope}/");
            KillOnDrop {
                matches: Box::new(move |t| t.starts_with(&prefix)),
            }
        }
    }

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            // Blocking on purpose: this runs during a panic's unwinding too,
            // where nothing can be awaited.
            let give_up = Instant::now() + Duration::from_secs(5);
            let mut clean = 0;
            while clean < 2 && Instant::now() < give_up {
                let found = scan(&*self.matches);
                for &(pid, _) in &found.matched {
                    let _ = pid.kill(Signal::Kill);
                }
                clean = if found.is_clean() { clean + 1 } else { 0 };
                reap_orphans();
                std::thread::sleep(POLL);
            }
        }
    }

    /// A FIFO at `path` with its reading end open, for a contained script to
    /// report what it did (`echo ready >path`) when its stdout is taken.
    /// Opened read-write, so that the reader sees no end of file before the
    /// script opens the writing end, nor between two writers.
    pub fn fifo(path: &Path) -> Lines<BufReader<tokio::net::unix::pipe::Receiver>> {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .expect("a temporary path has no NUL");
        // SAFETY: `c_path` is a valid NUL-terminated string for the call.
        let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
        let rx = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(path)
            .expect("open the fifo");
        BufReader::new(rx).lines()
    }

    /// Wait for the line `want`, skipping others; a failure guard bounds the
    /// wait, so a broken script fails the test instead of hanging it.
    pub async fn expect_line<R: AsyncBufRead + Unpin>(lines: &mut Lines<R>, want: &str) {
        let read = async {
            loop {
                match lines.next_line().await.expect("read a line") {
                    Some(line) if line == want => return,
                    Some(_) => continue,
                    None => panic!("end of output before `{want}`"),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap_or_else(|_| panic!("no `{want}` within 10 s"));
    }

    /// A shell script that does not die on SIGTERM: it reports each one on
    /// `out` (a redirection target: `&1`, a FIFO's path) and goes on. It
    /// says `ready` on `out` once its trap is set. The `sleep`s run in the
    /// background so that `wait`, unlike a foreground command, lets the trap
    /// run as soon as the signal arrives.
    pub fn stubborn_script(out: &str) -> String {
        format!(
            "trap 'echo term >{out}' TERM; echo ready >{out}; \
             while :; do sleep 1 & wait $!; done"
        )
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use tokio::io::{AsyncBufReadExt, BufReader};

    use super::testing::{expect_line, stubborn_script, KillOnDrop};
    use super::*;

    #[tokio::test]
    async fn stop_reaches_a_setsid_grandchild() {
        become_subreaper();
        let token = new_token("unit", "test");
        let _cleanup = KillOnDrop::token(&token);
        let mut cmd = command("sh", &token, std::env::vars_os());
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
        let _cleanup = KillOnDrop::token(&token);
        let mut cmd = command("sh", &token, std::env::vars_os());
        // The child exits at once and leaves a setsid grandchild that ignores
        // SIGTERM, and says so once its trap is set: that line, not a scan of
        // /proc, tells the test the leak is in place. (A scan can catch the
        // grandchild in the middle of exec, when its token is unreadable.)
        cmd.arg("-c")
            .arg("(trap '' TERM; setsid sh -c 'trap \"\" TERM; echo ready; sleep 300' &) ; exit 0")
            .stdout(std::process::Stdio::piped());
        let mut c = Contained::spawn(cmd, token.clone()).expect("spawn sh");
        let mut out = BufReader::new(c.child.stdout.take().expect("stdout was piped")).lines();
        c.wait().await.expect("sh exits");
        expect_line(&mut out, "ready").await;
        let found = c.sweep(Duration::from_millis(100)).await;
        assert!(found >= 1, "the sweep found nothing");
        assert!(
            processes_with_token(&token).is_empty(),
            "survivors: {:?}",
            processes_with_token(&token)
        );
    }

    #[tokio::test]
    async fn a_hurry_request_cuts_a_running_grace_short() {
        become_subreaper();
        let token = new_token("unit", "test-hurry");
        let _cleanup = KillOnDrop::token(&token);
        let mut cmd = command("sh", &token, std::env::vars_os());
        cmd.arg("-c")
            .arg(stubborn_script("&1"))
            .stdout(std::process::Stdio::piped());
        let mut c = Contained::spawn(cmd, token.clone()).expect("spawn sh");
        let mut out = BufReader::new(c.child.stdout.take().expect("stdout was piped")).lines();
        expect_line(&mut out, "ready").await;

        let (hurry_tx, mut hurry_rx) = tokio::sync::watch::channel(false);
        let stop = c.stop_until(Duration::from_secs(30), async move {
            // The sender outlives the stop: an error cannot happen here.
            let _ = hurry_rx.wait_for(|&h| h).await;
        });
        let second_signal = async {
            // The child reports the SIGTERM: the stop and its grace began.
            expect_line(&mut out, "term").await;
            hurry_tx.send(true).expect("the stop is listening");
        };
        // A failure guard, far below the 30 s grace: the assertion is that
        // the stop returns at all before it.
        let (status, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(stop, second_signal)
        })
        .await
        .expect("the hurry request cut the 30 s grace short");
        assert_eq!(
            status.and_then(|s| s.signal()),
            Some(libc::SIGKILL),
            "the child got SIGKILL"
        );
        assert!(
            processes_with_token(&token).is_empty(),
            "survivors: {:?}",
            processes_with_token(&token)
        );
    }

    #[test]
    fn a_submitter_that_loopd_started_is_contained_and_its_parent_is_not() {
        // A child of this process (as a job's process is of the daemon),
        // with an empty environment: contained by descent alone.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env_clear()
            .spawn()
            .expect("sleep");
        let why = why_contained(child.id() as i32);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            why.as_deref()
                .is_some_and(|w| w.contains("descends from this loopd")),
            "{why:?}"
        );
        // Whoever started the tests did not descend from them.
        let parent = std::os::unix::process::parent_id() as i32;
        assert_eq!(why_contained(parent), None);
        assert!(
            why_contained(i32::MAX).is_some(),
            "a gone process fails closed"
        );
    }

    #[test]
    fn pids_and_groups_are_positive_and_distinct() {
        assert_eq!(Pid::new(0), None);
        assert_eq!(Pid::new(-1), None);
        let pid = Pid::new(42).expect("positive");
        assert_eq!(pid.get(), 42);
        assert_eq!(pid.led_group().get(), 42);
    }

    #[tokio::test]
    async fn a_process_with_an_empty_environment_carries_no_token() {
        // Spawned contained, so that the orphan reaper other tests run at
        // the same time leaves its zombie to us; `env_clear` drops the token.
        let token = new_token("unit", "test-env-i");
        let mut cmd = command("sleep", &token, std::env::vars_os());
        cmd.arg("30").env_clear();
        let mut c = Contained::spawn(cmd, token).expect("spawn sleep");
        // Until exec completes the child has no environment to show; wait
        // until the new image says what it is.
        let give_up = Instant::now() + Duration::from_secs(10);
        let mark = loop {
            match mark(c.pid) {
                Some(Mark::Unknown) if Instant::now() < give_up => tokio::task::yield_now().await,
                m => break m,
            }
        };
        c.child.start_kill().expect("kill sleep");
        c.wait().await.expect("reap sleep");
        assert_eq!(mark, Some(Mark::NoToken));
    }
}
