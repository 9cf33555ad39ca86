//! The systemd units and the daemon's sd_notify protocol.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// `systemd-analyze verify` accepts both units (ExecStart pointed at the
/// binary under test, which verify requires to exist).
#[test]
fn systemd_analyze_verifies_both_units() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_loopd");
    let system = std::fs::read_to_string(manifest_dir().join("systemd/loopd.service"))
        .expect("unit")
        .replace("/usr/local/bin/loopd", bin);
    let user = std::fs::read_to_string(manifest_dir().join("systemd/loopd.user.service"))
        .expect("unit")
        .replace("%h/.cargo/bin/loopd", bin);
    for (name, text, user_mode) in [
        ("loopd.service", system, false),
        ("user/loopd.service", user, true),
    ] {
        let path = tmp.path().join(name);
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, text).expect("write unit");
        let runtime = tmp.path().join("run");
        std::fs::create_dir_all(&runtime).expect("runtime dir");
        let mut cmd = Command::new("systemd-analyze");
        if user_mode {
            cmd.arg("--user");
        }
        let out = cmd
            .arg("verify")
            .arg(&path)
            .env("XDG_RUNTIME_DIR", &runtime)
            .output()
            .expect("systemd-analyze (scripts/install-test-tools.sh installs it)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "{name}: {stderr}"
        );
    }
    let system =
        std::fs::read_to_string(manifest_dir().join("systemd/loopd.service")).expect("unit");
    for line in [
        "Type=notify",
        "KillMode=mixed",
        "WatchdogSec=",
        "TimeoutStopSec=30s",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    ] {
        assert!(system.contains(line), "loopd.service lacks {line}");
    }
}

/// A daemon reporting to a notify socket of the test's.
struct Notified {
    child: std::process::Child,
    sock: UnixDatagram,
    /// Everything received so far, one message per line.
    seen: String,
}

impl Notified {
    fn start(env: &TestEnv, extra_env: &[(&str, &str)]) -> Notified {
        let sock_path = env.tmp.path().join("notify.sock");
        let sock = UnixDatagram::bind(&sock_path).expect("bind notify socket");
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut cmd = env.loopd(None);
        cmd.args(["daemon"])
            .env("NOTIFY_SOCKET", &sock_path)
            .stderr(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        Notified {
            child: cmd.spawn().expect("daemon"),
            sock,
            seen: String::new(),
        }
    }

    /// Receive until every one of `wanted` has been seen (bounded).
    fn until(&mut self, wanted: &[&str]) {
        let until = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 512];
        while !wanted.iter().all(|w| self.seen.contains(w)) {
            assert!(Instant::now() < until, "got only: {}", self.seen);
            let n = self.sock.recv(&mut buf).expect("a notification");
            self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            self.seen.push('\n');
        }
    }

    fn stop(mut self) {
        send_signal(self.child.id(), 15);
        self.until(&["STOPPING=1"]);
        assert_eq!(self.child.wait().expect("exit").code(), Some(0));
    }
}

/// READY=1 once the spool is scanned, WATCHDOG=1 at half WATCHDOG_USEC,
/// STOPPING=1 on SIGTERM.
#[test]
fn the_daemon_speaks_sd_notify() {
    let env = TestEnv::new();
    let mut d = Notified::start(&env, &[("WATCHDOG_USEC", "200000")]);
    d.until(&["READY=1", "WATCHDOG=1"]);
    d.stop();
}

/// Context switches of every thread of `pid`: each one is a wake-up.
fn switches(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
        .map(|t| {
            std::fs::read_to_string(t.path().join("status"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Regression: the daemon's own scan of the spool must not wake it (an
/// inotify access event per scan made it spin at 100% CPU).
#[test]
fn an_idle_daemon_does_not_wake_up() {
    let env = TestEnv::new();
    let mut d = Notified::start(&env, &[]);
    d.until(&["READY=1"]);
    std::thread::sleep(Duration::from_millis(200));
    let before = switches(d.child.id());
    std::thread::sleep(Duration::from_secs(1));
    let woke = switches(d.child.id()) - before;
    assert!(woke < 10, "an idle daemon woke up {woke} times in a second");
    d.stop();
}
