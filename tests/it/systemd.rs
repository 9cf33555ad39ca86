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

/// READY=1 once the spool is scanned, WATCHDOG=1 at half WATCHDOG_USEC,
/// STOPPING=1 on SIGTERM.
#[test]
fn the_daemon_speaks_sd_notify() {
    let env = TestEnv::new();
    let sock_path = env.tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut child = env
        .loopd(None)
        .args(["daemon"])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon");
    let mut seen = String::new();
    let until = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 512];
    while !(seen.contains("READY=1") && seen.contains("WATCHDOG=1")) {
        assert!(Instant::now() < until, "got only: {seen}");
        let n = sock.recv(&mut buf).expect("a notification");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        seen.push('\n');
    }
    send_signal(child.id(), 15);
    loop {
        let n = sock.recv(&mut buf).expect("a notification");
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            break;
        }
    }
    assert_eq!(child.wait().expect("exit").code(), Some(0));
}

/// Regression: the daemon's own scan of the spool must not wake it (an
/// inotify access event per scan made it spin at 100% CPU).
#[test]
fn an_idle_daemon_does_not_wake_up() {
    let env = TestEnv::new();
    let sock_path = env.tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut child = env
        .loopd(None)
        .args(["daemon"])
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon");
    let mut buf = [0u8; 512];
    loop {
        let n = sock.recv(&mut buf).expect("READY");
        if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
            break;
        }
    }
    let switches = |pid: u32| -> u64 {
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
    };
    std::thread::sleep(Duration::from_millis(200));
    let before = switches(child.id());
    std::thread::sleep(Duration::from_secs(1));
    let woke = switches(child.id()) - before;
    assert!(woke < 10, "an idle daemon woke up {woke} times in a second");
    send_signal(child.id(), 15);
    assert_eq!(child.wait().expect("exit").code(), Some(0));
}
