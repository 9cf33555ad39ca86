//! sd_notify without libsystemd: readiness, status and the watchdog, sent as
//! datagrams to `$NOTIFY_SOCKET` (a path, or `@name` in the abstract
//! namespace). Outside systemd every call is a no-op.

use std::time::Duration;

/// Send one notification (`READY=1`, `STATUS=...`, `WATCHDOG=1`, `STOPPING=1`).
pub fn notify(message: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let socket = socket.to_string_lossy().into_owned();
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let sent = if let Some(name) = socket.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|addr| sock.send_to_addr(message.as_bytes(), &addr))
    } else {
        sock.send_to(message.as_bytes(), &socket)
    };
    if let Err(e) = sent {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// Half the watchdog interval systemd asked for (`WATCHDOG_USEC`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Some(pid) = std::env::var("WATCHDOG_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    {
        if pid != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}
