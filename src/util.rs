//! The bottom layer: small helpers every other module may use and that use
//! no other module of the crate — atomic writes, BOM-tolerant reads, the
//! clock, job ids, private directories, shell quoting, the names of the
//! forge token variables, and the test-only crash points.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Variables that hold a credential: never passed to the agent, its tools,
/// its hooks or a goal step. The forge tokens come first, in the order
/// `loopd ci` picks them.
pub const TOKEN_VARS: &[&str] = &["LOOPD_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN"];

/// Wipe the values of `names` from this process's environment block, and
/// make the process undumpable: `/proc/<pid>/environ` is the block the
/// process started with, readable by every process of the same user (the
/// agent's included), so a credential read from it must not stay there.
/// Undumpable, `/proc/<pid>/{environ,mem}` and ptrace are closed to other
/// processes of a non-root user. Call once, early, before other threads
/// read the environment; afterwards the variables read as empty.
pub fn scrub_environ(names: &[&str]) {
    extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: `environ` is the C runtime's NULL-terminated array of
    // NUL-terminated strings, valid for the life of the process; no other
    // thread reads or writes the environment now (the caller's contract).
    // Each matching string is overwritten only after its `NAME=`, within
    // its own length, so every entry stays a valid C string.
    unsafe {
        let mut entry = *std::ptr::addr_of!(environ);
        if entry.is_null() {
            return;
        }
        while !(*entry).is_null() {
            let text = std::ffi::CStr::from_ptr(*entry).to_bytes();
            let len = text.len();
            if let Some(name) = names.iter().find(|n| {
                text.len() > n.len() && text.starts_with(n.as_bytes()) && text[n.len()] == b'='
            }) {
                let start = name.len() + 1;
                std::ptr::write_bytes((*entry).add(start), 0, len - start);
            }
            entry = entry.add(1);
        }
    }
    make_undumpable();
}

/// Make this process non-dumpable (`PR_SET_DUMPABLE` 0): processes of the
/// same user — the agent, its tools, code the goal test runs — can then
/// neither ptrace it nor read its `/proc/<pid>/environ`, `mem` or `fd/`
/// (only a holder of `CAP_SYS_PTRACE` can). Children get their own
/// dumpable flag back at exec, so nothing loopd starts is affected.
pub fn make_undumpable() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_DUMPABLE takes one integer argument and
        // has no memory-safety preconditions.
        let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// A file loopd reads (`loopd.toml`, a rubric) that cannot be used, named
/// with the file, the field, what was expected and what was found.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read `{}`: {source}", file.display())]
    Read {
        file: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` is not valid TOML for loopd: {message}", file.display())]
    Parse {
        file: std::path::PathBuf,
        message: String,
    },
    #[error("`{}`: field `{field}`: expected {expected}, found {found}", file.display())]
    Invalid {
        file: std::path::PathBuf,
        field: String,
        expected: String,
        found: String,
    },
}

/// A built-in regex, compiled once into `cell` on first use: what the
/// gates and parsers match with, never rebuilt per line or per file.
pub fn once_regex(
    cell: &'static std::sync::OnceLock<regex::Regex>,
    pattern: &str,
) -> &'static regex::Regex {
    cell.get_or_init(|| regex::Regex::new(pattern).expect("a built-in regex is valid"))
}

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Now, as RFC 3339 with milliseconds (UTC).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A job id: `YYYYMMDD-HHMMSSmmm-xxxx`, sortable by submission time to the
/// millisecond (the queue runs jobs in id order), unique by its random tail.
pub fn new_job_id() -> String {
    let now = now_rfc3339();
    let stamp: String = now.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut rnd = [0u8; 2];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut rnd);
    }
    format!("{}-{}-{}", &stamp[..8], &stamp[8..17], hex::encode(rnd))
}

/// Create a private directory (0700) and its parents.
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Why a state dir is refused.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("cannot create the state dir `{}`: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` (in the state dir) is {what} (mode {mode:03o}): another user could plant or change loopd's files there", path.display())]
    Writable {
        path: PathBuf,
        mode: u32,
        what: &'static str,
    },
    #[error("`{}` (in the state dir) belongs to uid {owner}, not to this user (uid {me})", path.display())]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error("the state dir `{}` is inside the repository `{}`: the agent could read and change loopd's own files, and parking the work would stash them", path.display(), repo.display())]
    InsideRepository { path: PathBuf, repo: PathBuf },
}

impl StateDirError {
    pub fn hint(&self) -> String {
        match self {
            StateDirError::Create { .. } => "pass a state dir you can write with `--state-dir DIR` (or `LOOPD_STATE_DIR`)".into(),
            StateDirError::Writable { path, .. } => format!("make it private: `chmod 700 {}`", path.display()),
            StateDirError::NotOwned { .. } => "use a state dir of your own with `--state-dir DIR` (or `LOOPD_STATE_DIR`)".into(),
            StateDirError::InsideRepository { .. } => "pass a state dir outside the repository with `--state-dir DIR` (the default is `$XDG_STATE_HOME/loopd`)".into(),
        }
    }
}

/// Create the state dir (0700, parents too) and check it and the
/// directories directly under it (and under `spool/`): owned by this user
/// and writable by nobody else — and, given the repository a job runs in,
/// not inside it. Returns the canonical path.
pub fn secure_state_dir(dir: &Path, repo: Option<&Path>) -> Result<PathBuf, StateDirError> {
    private_dir(dir).map_err(|source| StateDirError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    let real = dir.canonicalize().map_err(|source| StateDirError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    if let Some(repo) = repo {
        let repo = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
        if real.starts_with(&repo) {
            return Err(StateDirError::InsideRepository { path: real, repo });
        }
    }
    owned_and_private(&real)?;
    for parent in [real.clone(), real.join("spool")] {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            owned_and_private(&e.path())?;
        }
    }
    Ok(real)
}

/// A directory of loopd's state — or a link to one, judged by where it
/// leads — must be this user's and writable by no one else: whoever else
/// can write it can swap a journal under a job. Anything that is not a
/// directory (nor leads to one) is left to the code that opens it.
pub fn owned_and_private(path: &Path) -> Result<(), StateDirError> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let m = if m.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(target) => target,
            Err(_) => return Ok(()),
        }
    } else {
        m
    };
    if !m.is_dir() {
        return Ok(());
    }
    let mode = m.mode() & 0o7777;
    if m.uid() != me {
        return Err(StateDirError::NotOwned {
            path: path.to_path_buf(),
            owner: m.uid(),
            me,
        });
    }
    let what = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (_, true) => "world-writable",
        (true, false) => "group-writable",
        (false, false) => return Ok(()),
    };
    Err(StateDirError::Writable {
        path: path.to_path_buf(),
        mode,
        what,
    })
}

/// `path` with its nearest existing ancestor resolved (links, `..`) and
/// the rest appended: where a directory that may not exist yet would be.
pub fn canonical_or_nearest(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut p = path.to_path_buf();
    loop {
        if let Ok(c) = p.canonicalize() {
            return rest.iter().rev().fold(c, |acc, part| acc.join(part));
        }
        match (p.file_name().map(|f| f.to_owned()), p.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                p = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Write `bytes` to `path` atomically: a temp file beside it, fsync'd, then
/// renamed over it, so a reader (or a restart after `kill -9`) never sees
/// half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Write `value` as pretty JSON (with a final newline) atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// An advisory lock on a file (`flock(2)`), released when dropped — also
/// when the process dies, `kill -9` included, so a lock is never stale.
#[derive(Debug)]
pub struct FileLock {
    _file: std::fs::File,
}

impl FileLock {
    /// Take `path`'s lock (the file is created, private, if missing):
    /// `exclusive` or shared; `wait` blocks until it is free, else `None`
    /// when another process holds it.
    pub fn take(path: &Path, exclusive: bool, wait: bool) -> std::io::Result<Option<FileLock>> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link: a lock file planted as a link would have
        // loopd create or lock a file elsewhere.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the lock `{}` is not a regular file", path.display()),
            ));
        }
        let mut op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        if !wait {
            op |= libc::LOCK_NB;
        }
        // SAFETY: flock(2) on a descriptor this function owns; no memory
        // is passed.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(Some(FileLock { _file: file }));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        Err(e)
    }
}

/// Read a text file, tolerating a UTF-8 byte-order mark (editors on other
/// systems write one).
pub fn read_text(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Open a file that a job's process could have written (the worktree, a
/// config in the repository): the last component is never followed if it
/// is a link, the open never blocks (a FIFO), and anything but a regular
/// file is refused. Every read loopd makes of an agent-writable place goes
/// through here or [`read_untrusted`].
pub fn open_untrusted(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{}` is not a regular file", path.display()),
        ));
    }
    Ok((file, meta))
}

/// Read a file a job's process could have written ([`open_untrusted`]), at
/// most `max` bytes: a larger one is an error, not a partial read.
pub fn read_untrusted(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, meta) = open_untrusted(path)?;
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("`{}` is larger than {max} bytes", path.display()),
        )
    };
    if meta.len() > max {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large());
    }
    Ok(out)
}

/// Quote for a POSIX shell: single quotes, with embedded ones escaped.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Text an agent could have written, made safe to print on a terminal:
/// every control character but newline and tab (ESC, CR, backspace, the C1
/// range, DEL) and every bidirectional override is shown as its escape
/// (`\u{1b}`), so an escape sequence in a command, a claim or a path
/// cannot move the cursor, clear the screen, hide what loopd prints after
/// it or reorder what a human reads.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            // Direction overrides and isolates, and the line and paragraph
            // separators (a YAML parser, an editor, a terminal may break a
            // line there).
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The detailed log of a foreground job: while the live progress lines
/// speak on stderr, tracing's INFO lines (which say the same, with fields)
/// go to `runs/<id>/loopd.log` instead, so each step is printed once.
/// Lines logged before the job's directory exists are kept (bounded) and
/// written first.
pub mod log_file {
    use std::fs::File;
    use std::io::Write;
    use std::path::Path;
    use std::sync::Mutex;

    struct Sink {
        file: Option<File>,
        pending: Vec<u8>,
    }

    static SINK: Mutex<Sink> = Mutex::new(Sink {
        file: None,
        pending: Vec::new(),
    });

    /// What is kept before [`attach`]: a job's start logs a few lines.
    const PENDING_MAX: usize = 256 << 10;

    /// From now on, the log goes to `path` (appended: a resume adds to
    /// the same file; created `0600`).
    pub fn attach(path: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let mut sink = SINK.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&std::mem::take(&mut sink.pending))?;
        sink.file = Some(file);
        Ok(())
    }

    /// A writer for tracing's `fmt` layer (`.with_writer(|| Writer)`).
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Writer;

    impl Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut guard = SINK.lock().unwrap_or_else(|p| p.into_inner());
            let sink = &mut *guard;
            match sink.file.as_mut() {
                // A log that cannot be written must not stop the job.
                Some(f) => {
                    let _ = f.write_all(buf);
                }
                None if sink.pending.len() + buf.len() <= PENDING_MAX => {
                    sink.pending.extend_from_slice(buf);
                }
                None => {}
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

/// Serialize a `Duration` the way users write it (`"5m 30s"`), for
/// `#[serde(with = "crate::util::duration_text")]`.
pub mod duration_text {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// Named crash points: in a build with the `failpoints` feature (tests
/// only), `LOOPD_CRASH_AT=NAME` or `NAME#K` ends the process with SIGKILL —
/// exactly like `kill -9` — the first (or K-th) time the point is reached,
/// and `LOOPD_CRASH_TRACE=FILE` appends every point reached to FILE, so a
/// test can first learn which points a job passes and then kill it at each.
/// In every other build, a crash point compiles to nothing.
#[inline]
pub fn crash_point(name: &str) {
    #[cfg(feature = "failpoints")]
    failpoints::reached(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

#[cfg(feature = "failpoints")]
mod failpoints {
    use std::collections::HashMap;
    use std::io::Write;
    use std::sync::Mutex;

    static HITS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

    pub fn reached(name: &str) {
        let mut hits = HITS.lock().unwrap_or_else(|e| e.into_inner());
        let count = {
            let map = hits.get_or_insert_with(HashMap::new);
            let c = map.entry(name.to_owned()).or_insert(0);
            *c += 1;
            *c
        };
        if let Some(trace) = std::env::var_os("LOOPD_CRASH_TRACE") {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(trace)
            {
                let _ = writeln!(f, "{name}#{count}");
            }
        }
        let Ok(at) = std::env::var("LOOPD_CRASH_AT") else {
            return;
        };
        let (point, nth) = match at.split_once('#') {
            Some((p, k)) => (p, k.parse().unwrap_or(1)),
            None => (at.as_str(), 1),
        };
        if point == name && count == nth {
            tracing::warn!(point = name, hit = count, "crash point: SIGKILL");
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            // SIGKILL cannot be caught; wait for it to land.
            loop {
                std::thread::park();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_what_a_terminal_would_obey() {
        assert!(matches!(
            printable("plain\ttext\nline"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            printable("echo hi\u{1b}[1A\u{1b}[2K accepted\r\u{9b}2J\u{202e}x"),
            "echo hi\\u{1b}[1A\\u{1b}[2K accepted\\u{d}\\u{9b}2J\\u{202e}x"
        );
        // Line and paragraph separators end a YAML comment and a line in
        // editors: shown, not obeyed.
        assert_eq!(printable("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
    }

    #[test]
    fn scrubbed_variables_read_empty() {
        // A name no other test reads; set before any thread of this test
        // touches the environment.
        std::env::set_var("LOOPD_SCRUB_TEST_SECRET", "sk-scrub-me");
        scrub_environ(&["LOOPD_SCRUB_TEST_SECRET"]);
        assert_eq!(std::env::var("LOOPD_SCRUB_TEST_SECRET").as_deref(), Ok(""));
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/usr/bin/loopd"), "/usr/bin/loopd");
        assert_eq!(shell_quote("/a b/it's"), "'/a b/it'\\''s'");
    }

    #[test]
    fn job_ids_sort_by_time() {
        let id = new_job_id();
        assert_eq!(id.len(), "20261130-112048123-abcd".len(), "{id}");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(new_job_id() > id, "ids sort by time");
    }

    #[test]
    fn atomic_write_and_bom_tolerant_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.json");
        write_atomic(&p, "\u{feff}{\"a\":1}".as_bytes()).expect("write");
        assert_eq!(read_text(&p).expect("read"), "{\"a\":1}");
        assert!(!dir.path().join("x.json.tmp").exists());
    }
}

#[cfg(test)]
mod state_dir_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_state_dir_is_made_private_and_an_unsafe_one_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("a/state");
        let real = secure_state_dir(&dir, None).expect("fresh");
        let mode = std::fs::metadata(&real).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        std::fs::create_dir_all(real.join("spool/incoming")).expect("spool");
        std::fs::set_permissions(
            real.join("spool/incoming"),
            std::fs::Permissions::from_mode(0o733),
        )
        .expect("chmod");
        let e = secure_state_dir(&dir, None).expect_err("a writable spool dir");
        assert!(
            matches!(
                e,
                StateDirError::Writable {
                    what: "world-writable",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.hint().contains("chmod 700"), "{}", e.hint());
        std::fs::set_permissions(
            real.join("spool/incoming"),
            std::fs::Permissions::from_mode(0o700),
        )
        .expect("chmod");
        secure_state_dir(&dir, None).expect("private again");

        let e = secure_state_dir(&real.join("x"), Some(tmp.path())).expect_err("inside");
        assert!(matches!(e, StateDirError::InsideRepository { .. }), "{e}");
    }
}

/// loopd's own environment as it started: what a job's processes start
/// from (through the sandbox's allow-list) and where the toolchains they
/// run are found. The process's, read once at the edge — or given, so that
/// a job run inside a test process lives in the test's world, not the
/// process's: the job never reads the process environment again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    vars: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString>,
}

impl Host {
    /// This process's environment, now.
    pub fn process() -> Host {
        Host::from_vars(std::env::vars_os())
    }

    /// An environment of these variables (the last of a name wins).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Host {
        Host {
            vars: vars.into_iter().collect(),
        }
    }

    pub fn var_os(&self, name: &str) -> Option<&std::ffi::OsStr> {
        self.vars
            .get(std::ffi::OsStr::new(name))
            .map(|v| v.as_os_str())
    }

    /// `name`'s value, when it is set and is UTF-8.
    pub fn var(&self, name: &str) -> Option<String> {
        self.var_os(name)?.to_str().map(str::to_owned)
    }

    pub fn vars(&self) -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> + '_ {
        self.vars.iter().map(|(k, v)| (k.clone(), v.clone()))
    }
}
