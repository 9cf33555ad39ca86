//! The job's namespaces, made by a short-lived helper: a fresh exec of
//! loopd's own executable with an empty environment
//! ([`super::NAMESPACE_HELPER_ARG`]), so it holds no secret and is dumpable
//! like any new process — a non-dumpable process (loopd, and any child
//! forked from it before exec) may not write its own `uid_map` after
//! `unshare`, so an unprivileged loopd could never make a namespace itself.
//!
//! The helper reads what to make ([`NsSpec`], JSON on its stdin), leaves
//! loopd's namespaces (`unshare`), maps its own uid and gid and makes its
//! mounts private. With a [`Root`] it then builds **a root of its own**: a
//! tmpfs holding exactly the paths the sandbox allows, each bound at its
//! own path (read-only unless it is writable), the devices the sandbox
//! allows, and a private `/tmp` — then `pivot_root`s into it. A path the
//! plan does not name does not exist there: no socket of the user's
//! session (`/run/user`, an agent socket under `HOME`, `/tmp/.X11-unix`),
//! no held-out directory, not even for `stat`. Then the read-only binds,
//! the private tmpfs's and the overlays, `lo` up and a listening socket
//! (with a network). It hands the socket and descriptors of its namespaces
//! (and of the mounts it made, for Landlock rules) back over a socket pair
//! (`SCM_RIGHTS`) and exits; the descriptors keep the namespaces alive.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::{Namespaces, NsSpec, DEVICES};

/// The most descriptors of mounts made inside (tmpfs's, overlays) a
/// namespace sends back.
pub const MAX_INNER: usize = 8;

/// Where the helper finds its end of the socket pair.
const HELPER_FD: i32 = 3;

/// The most bytes of an error the helper reports.
const MAX_ERROR: usize = 2048;

pub fn create(spec: &NsSpec) -> Result<(Namespaces, Option<std::net::TcpListener>), String> {
    let inner = spec.tmpfs.len() + spec.overlays.iter().filter(|o| o.rule).count();
    if inner > MAX_INNER {
        return Err(format!(
            "{inner} private mounts asked for; at most {MAX_INNER}"
        ));
    }
    let mut pair = [0i32; 2];
    // SAFETY: a fresh socket pair; both ends are owned below.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: just created, owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let text = serde_json::to_string(spec).expect("a namespace spec serializes");
    let mut cmd = std::process::Command::new(&spec.helper);
    cmd.arg(super::NAMESPACE_HELPER_ARG)
        .arg(HELPER_FD.to_string())
        .env_clear()
        // A token of its own, which no sweep matches: without one, a sweep
        // for strays (a subreaper's orphans with no token) would stop it.
        .env(crate::process::TOKEN_VAR, "loopd-namespace-helper")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let theirs_fd = theirs.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and makes
    // system calls only: the helper's end of the pair at `HELPER_FD`, kept
    // open across the exec.
    unsafe {
        cmd.pre_exec(move || {
            if theirs_fd == HELPER_FD {
                if libc::fcntl(HELPER_FD, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(theirs_fd, HELPER_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Managed until waited for: a sweep for strays (another job's, in the
    // daemon) must not take it, between its fork and its exec, for an
    // orphan with no token.
    let mut proc = crate::process::spawn_managed(&mut cmd)
        .map_err(|e| format!("the namespace helper: {e}"))?;
    drop(theirs);
    if let Some(mut stdin) = proc.child.stdin.take() {
        // The helper reads all of it before anything else; a failure shows
        // as its error below.
        let _ = stdin.write_all(text.as_bytes());
    }
    let got = receive(ours.as_raw_fd(), spec.network, inner, spec.root.is_some());
    let status = proc.wait();
    got.map_err(|e| match status {
        Ok(s) if !s.success() => format!("{e} (the helper ended: {s})"),
        _ => e,
    })
}

/// The helper's side: read the spec, make the namespaces, send them; the
/// exit code (2: arguments or a spec it cannot read; a failed step is
/// reported over the socket).
pub fn helper(args: &[std::ffi::OsString]) -> u8 {
    let Some(sock) = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|s| s.parse::<i32>().ok())
    else {
        return 2;
    };
    let mut text = String::new();
    if std::io::stdin().read_to_string(&mut text).is_err() {
        return 2;
    }
    let Ok(spec) = serde_json::from_str::<NsSpec>(&text) else {
        return 2;
    };
    match build(&spec) {
        Ok(fds) => send_fds(sock, &fds),
        Err(e) => {
            let mut msg = format!("E{e}").into_bytes();
            msg.truncate(MAX_ERROR);
            // SAFETY: sending a buffer that outlives the call.
            unsafe { libc::send(sock, msg.as_ptr().cast(), msg.len(), 0) };
        }
    }
    0
}

fn cstr(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("`{}` holds a NUL", p.display()))
}

fn errno(what: &str, p: &Path) -> String {
    format!(
        "{what} `{}`: {}",
        p.display(),
        std::io::Error::last_os_error()
    )
}

/// `mount(2)` with a source, a target, a type and data (all optional).
fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let src = source.map(cstr).transpose()?;
    let tgt = cstr(target)?;
    let ty = fstype.map(|t| CString::new(t).expect("no NUL"));
    let data = data
        .map(|d| CString::new(d).map_err(|_| "mount data holds a NUL".to_owned()))
        .transpose()?;
    // SAFETY: NUL-terminated strings (or null) that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            ty.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if r != 0 {
        return Err(errno(
            &format!("mount {}", fstype.unwrap_or("(bind)")),
            target,
        ));
    }
    Ok(())
}

/// The mount flags a bind remount must keep (a user namespace may not
/// drop them).
fn locked_flags(path: &Path) -> libc::c_ulong {
    let Ok(p) = cstr(path) else { return 0 };
    // SAFETY: statvfs into a zeroed struct on the stack.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(p.as_ptr(), &mut st) != 0 {
            return 0;
        }
        let mut flags = 0;
        for (st_flag, ms_flag) in [
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if st.f_flag & st_flag != 0 {
                flags |= ms_flag;
            }
        }
        flags
    }
}

/// Bind `source` at `target` (recursively), read-only when asked.
fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), String> {
    mount(
        Some(source),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    if read_only {
        let keep = locked_flags(target);
        mount(
            None,
            target,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
            None,
        )?;
    }
    Ok(())
}

/// Write a whole small file (`/proc/self/uid_map`, …).
fn write_file(path: &str, data: &[u8]) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(data))
        .map_err(|e| format!("write {path}: {e}"))
}

/// The root being built: a tmpfs at `staging`, into which host paths are
/// bound at their own paths; `binds` are the host paths already visible
/// there (nothing is ever created inside one: it is the host's).
struct RootBuilder<'a> {
    staging: &'a Path,
    binds: Vec<(PathBuf, bool)>,
    /// The directories made only to lead to a mount (in the root's tmpfs
    /// or a private `/tmp`): made traversal-only at the end, so that no
    /// process of the job lists or writes them.
    scaffold: Vec<PathBuf>,
    /// The overlays mounted so far (host paths): beneath one, a path is the
    /// overlay's, whatever a bind showed there before.
    overlaid: Vec<PathBuf>,
}

impl RootBuilder<'_> {
    /// Where host path `p` is in the root being built.
    fn at(&self, p: &Path) -> PathBuf {
        self.staging.join(p.strip_prefix("/").unwrap_or(p))
    }

    /// The bind that still shows `p`, and whether it is writable: every
    /// bind is made before the overlays, so one whose place an overlay
    /// covers shows nothing any more.
    fn covered(&self, p: &Path) -> Option<bool> {
        self.binds
            .iter()
            .filter(|(b, _)| p.starts_with(b) && !self.overlaid.iter().any(|o| b.starts_with(o)))
            .map(|(_, rw)| *rw)
            .max()
    }

    /// Make `p`'s place in the root (a directory, or an empty file for a
    /// file's bind) and its parents, unless a bind shows it already.
    fn place(&mut self, p: &Path, dir: bool) -> Result<PathBuf, String> {
        let at = self.at(p);
        // A mount goes here: its mode is the mount's, never scaffolding's.
        self.scaffold.retain(|s| *s != at);
        if self.covered(p).is_some() || std::fs::symlink_metadata(&at).is_ok() {
            return Ok(at);
        }
        // The ancestors about to be made lead to the mount: scaffolding.
        let mut up = at.parent();
        while let Some(a) = up.filter(|a| a.starts_with(self.staging) && *a != self.staging) {
            if std::fs::symlink_metadata(a).is_ok() {
                break;
            }
            self.scaffold.push(a.to_path_buf());
            up = a.parent();
        }
        let made = if dir {
            std::fs::create_dir_all(&at)
        } else {
            at.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::File::create(&at).map(drop))
        };
        made.map_err(|e| format!("make `{}` in the job's root: {e}", p.display()))?;
        Ok(at)
    }

    /// The links on the way to `p` in the host, made the same in the root
    /// (`/bin` → `usr/bin`, a program's link into its install), so that `p`
    /// resolves there as it does in the host.
    fn mirror_links(&self, p: &Path, depth: usize) -> Result<(), String> {
        if depth > 8 {
            return Ok(());
        }
        let mut cur = PathBuf::from("/");
        for c in p.components().skip(1) {
            cur.push(c);
            if self.covered(&cur).is_some() {
                return Ok(());
            }
            let Ok(meta) = std::fs::symlink_metadata(&cur) else {
                return Ok(());
            };
            if meta.file_type().is_symlink() {
                let at = self.at(&cur);
                if std::fs::symlink_metadata(&at).is_err() {
                    let target = std::fs::read_link(&cur)
                        .map_err(|e| format!("read the link `{}`: {e}", cur.display()))?;
                    if let Some(parent) = at.parent() {
                        std::fs::create_dir_all(parent)
                            .map_err(|e| format!("make `{}`: {e}", parent.display()))?;
                    }
                    std::os::unix::fs::symlink(&target, &at)
                        .map_err(|e| format!("link `{}`: {e}", cur.display()))?;
                }
                // What it points at may hold links of its own.
                if let Ok(target) = cur.canonicalize() {
                    self.mirror_links(&target, depth + 1)?;
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// Bind host path `p` (a directory or a file) at its own path.
    fn show(&mut self, p: &Path, writable: bool) -> Result<(), String> {
        self.mirror_links(p, 0)?;
        let Ok(real) = p.canonicalize() else {
            return Ok(());
        };
        let Ok(meta) = std::fs::metadata(&real) else {
            return Ok(());
        };
        // A socket, a FIFO or a device outside the list is never shown.
        if !meta.is_dir() && !meta.is_file() {
            return Ok(());
        }
        match self.covered(&real) {
            Some(rw) if rw || !writable => return Ok(()),
            _ => {}
        }
        let at = self.place(&real, meta.is_dir())?;
        bind(&real, &at, !writable)?;
        self.binds.push((real, writable));
        Ok(())
    }

    /// `/dev`: a tmpfs with the device files the sandbox allows and the
    /// links programs expect (`/dev/fd`, `/dev/stdin`, …).
    fn devices(&mut self) -> Result<(), String> {
        let dev = self.place(Path::new("/dev"), true)?;
        mount(
            Some(Path::new("tmpfs")),
            &dev,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some("mode=755,size=64k"),
        )?;
        for d in DEVICES {
            let host = Path::new(d);
            if !host.exists() {
                continue;
            }
            let at = self.at(host);
            std::fs::File::create(&at).map_err(|e| format!("make `{d}`: {e}"))?;
            bind(host, &at, false)?;
        }
        for (link, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            std::os::unix::fs::symlink(target, dev.join(link))
                .map_err(|e| format!("link `/dev/{link}`: {e}"))?;
        }
        std::fs::create_dir_all(dev.join("shm")).map_err(|e| format!("make `/dev/shm`: {e}"))?;
        Ok(())
    }
}

/// Make the namespaces `spec` asks for, in this (single-threaded) helper;
/// the descriptors to send: user, mnt, [net, listener], the mounts made
/// inside (tmpfs's, then overlays).
fn build(spec: &NsSpec) -> Result<Vec<i32>, String> {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    if spec.network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: the process is single-threaded (nothing started a thread),
    // as `unshare(CLONE_NEWUSER)` requires.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    write_file("/proc/self/setgroups", b"deny")?;
    write_file("/proc/self/uid_map", format!("{uid} {uid} 1\n").as_bytes())?;
    write_file("/proc/self/gid_map", format!("{gid} {gid} 1\n").as_bytes())?;
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    // Where each path of the spec is while the mounts are made.
    let mut root = spec.root.as_ref().map(|r| RootBuilder {
        staging: &r.staging,
        binds: Vec::new(),
        scaffold: Vec::new(),
        overlaid: Vec::new(),
    });
    let place =
        |p: &Path, dir: bool, root: &mut Option<RootBuilder<'_>>| -> Result<PathBuf, String> {
            match root {
                Some(b) => b.place(p, dir),
                None => Ok(p.to_path_buf()),
            }
        };
    if let (Some(b), Some(r)) = (root.as_mut(), spec.root.as_ref()) {
        std::fs::create_dir_all(&r.staging)
            .map_err(|e| format!("make `{}`: {e}", r.staging.display()))?;
        mount(
            Some(Path::new("tmpfs")),
            &r.staging,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=755,size=16m"),
        )?;
        b.devices()?;
    }
    // The private tmpfs's first: a path the plan shows beneath one (a
    // worktree under `/tmp`) is bound into it.
    for p in &spec.tmpfs {
        let at = place(p, true, &mut root)?;
        mount(
            Some(Path::new("tmpfs")),
            &at,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777,size=256m"),
        )?;
    }
    if let (Some(b), Some(r)) = (root.as_mut(), spec.root.as_ref()) {
        // Parents first, so that a path beneath one is seen as shown.
        let mut entries: Vec<(&PathBuf, bool)> = r
            .read
            .iter()
            .map(|p| (p, false))
            .chain(r.read_write.iter().map(|p| (p, true)))
            .collect();
        entries.sort_by_key(|(p, rw)| (p.components().count(), !rw));
        for (p, rw) in entries {
            b.show(p, rw)?;
        }
    }
    for o in &spec.overlays {
        let at = place(&o.target, true, &mut root)?;
        for d in [&o.upper, &o.work] {
            std::fs::create_dir_all(d).map_err(|e| format!("make `{}`: {e}", d.display()))?;
        }
        let lowers: Vec<String> = o
            .lowers
            .iter()
            .map(|l| {
                l.to_string_lossy()
                    .replace('\\', "\\\\")
                    .replace(':', "\\:")
                    .replace(',', "\\,")
            })
            .collect();
        let data = format!(
            "lowerdir={},upperdir={},workdir={},userxattr",
            lowers.join(":"),
            o.upper.display(),
            o.work.display()
        );
        mount(
            Some(Path::new("overlay")),
            &at,
            Some("overlay"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&data),
        )?;
        if let Some(b) = root.as_mut() {
            b.overlaid.push(o.target.clone());
        }
    }
    // Read-only, over whatever shows the path now (the worktree's bind, a
    // judge's overlay): the host's file or directory at that path.
    for p in &spec.read_only {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            continue;
        };
        if !(meta.is_dir() || meta.is_file()) {
            continue;
        }
        let at = place(p, meta.is_dir(), &mut root)?;
        bind(p, &at, true)?;
    }
    if let Some(b) = &root {
        for d in &b.scaffold {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o111))
                .map_err(|e| format!("lock `{}`: {e}", d.display()))?;
        }
    }
    if let Some(r) = &spec.root {
        let old = r.staging.join(".oldroot");
        std::fs::create_dir_all(&old).map_err(|e| format!("make `{}`: {e}", old.display()))?;
        let (new, put_old) = (cstr(&r.staging)?, cstr(&old)?);
        // SAFETY: NUL-terminated paths that outlive the calls.
        unsafe {
            if libc::syscall(libc::SYS_pivot_root, new.as_ptr(), put_old.as_ptr()) != 0 {
                return Err(errno("pivot_root into", &r.staging));
            }
            if libc::chdir(c"/".as_ptr()) != 0 {
                return Err(errno("chdir", Path::new("/")));
            }
            if libc::umount2(c"/.oldroot".as_ptr(), libc::MNT_DETACH) != 0 {
                return Err(errno("detach the old root", Path::new("/.oldroot")));
            }
        }
        let _ = std::fs::remove_dir("/.oldroot");
    }
    let open = |p: &Path, flags: i32| -> Result<i32, String> {
        let c = cstr(p)?;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(errno("open", p));
        }
        Ok(fd)
    };
    let mut fds = vec![
        open(Path::new("/proc/self/ns/user"), libc::O_RDONLY)?,
        open(Path::new("/proc/self/ns/mnt"), libc::O_RDONLY)?,
    ];
    if spec.network {
        fds.push(open(Path::new("/proc/self/ns/net"), libc::O_RDONLY)?);
        fds.push(loopback_listener()?);
    }
    // After the pivot, every path is where it will be seen.
    for p in spec
        .tmpfs
        .iter()
        .chain(spec.overlays.iter().filter(|o| o.rule).map(|o| &o.target))
    {
        fds.push(open(p, libc::O_PATH | libc::O_DIRECTORY)?);
    }
    Ok(fds)
}

/// `lo` up, and a TCP socket listening on `127.0.0.1` (a random port).
fn loopback_listener() -> Result<i32, String> {
    // SAFETY: socket ioctls on a fresh socket and a zeroed request; the
    // listener is a fresh socket bound and listening, handed to the caller.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(format!("bring up lo: {}", std::io::Error::last_os_error()));
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS, &mut req) != 0 {
            return Err(format!("bring up lo: {}", std::io::Error::last_os_error()));
        }
        libc::close(s);
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if l < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        if libc::bind(
            l,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
        {
            return Err(format!("bind: {}", std::io::Error::last_os_error()));
        }
        if libc::listen(l, 1024) != 0 {
            return Err(format!("listen: {}", std::io::Error::last_os_error()));
        }
        Ok(l)
    }
}

/// Send `fds` with a one-byte `K` over `sock`.
fn send_fds(sock: i32, fds: &[i32]) {
    // u64s: a control message header must be aligned.
    let mut cbuf = [0u64; 16];
    let mut byte = [b'K'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let len = std::mem::size_of_val(fds) as u32;
    // SAFETY: a zeroed msghdr pointing at buffers that outlive the call,
    // with room for every descriptor (at most 4 + MAX_INNER).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(len) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(len) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr().cast::<u8>(),
            libc::CMSG_DATA(cmsg),
            len as usize,
        );
        libc::sendmsg(sock, &msg, 0);
    }
}

/// loopd's side: the namespaces and the listener, or why not.
fn receive(
    sock: i32,
    network: bool,
    inner: usize,
    own_root: bool,
) -> Result<(Namespaces, Option<std::net::TcpListener>), String> {
    // u64s: a control message header must be aligned.
    let mut cbuf = [0u64; 16];
    let mut data = vec![0u8; MAX_ERROR];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr pointing at buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: receiving into the buffers above; the helper's end closes
    // when it exits, so this returns.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return Err("the namespace helper sent nothing".into());
    }
    if data[0] == b'E' {
        return Err(String::from_utf8_lossy(&data[1..n as usize]).into_owned());
    }
    let count = if network { 4 } else { 2 } + inner;
    let len = count * std::mem::size_of::<i32>();
    // SAFETY: the control buffer was filled by recvmsg above.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    if cmsg.is_null() {
        return Err("the namespace helper sent no descriptors".into());
    }
    let mut fds = vec![-1i32; count];
    // SAFETY: SCM_RIGHTS with `count` descriptors, as the child sent.
    unsafe {
        if (*cmsg).cmsg_type != libc::SCM_RIGHTS
            || (*cmsg).cmsg_len as usize != libc::CMSG_LEN(len as u32) as usize
        {
            return Err("the namespace helper sent something else".into());
        }
        std::ptr::copy_nonoverlapping(libc::CMSG_DATA(cmsg), fds.as_mut_ptr().cast::<u8>(), len);
    }
    // SAFETY: descriptors received just now, owned by nothing else.
    unsafe {
        let user = OwnedFd::from_raw_fd(fds[0]);
        let mnt = OwnedFd::from_raw_fd(fds[1]);
        let (net, listener, rest) = if network {
            (
                Some(OwnedFd::from_raw_fd(fds[2])),
                Some(std::net::TcpListener::from_raw_fd(fds[3])),
                4,
            )
        } else {
            (None, None, 2)
        };
        let inner = fds[rest..]
            .iter()
            .map(|fd| OwnedFd::from_raw_fd(*fd))
            .collect();
        Ok((
            Namespaces {
                user,
                mnt,
                net,
                inner,
                own_root,
            },
            listener,
        ))
    }
}
