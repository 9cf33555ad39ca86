//! The API key's way to the CLI, around the agent's tools.
//!
//! `ANTHROPIC_API_KEY` in the CLI's environment is inherited by every Bash
//! command the agent runs and by every hook (CLAUDE_CLI.md §8), so a test
//! that prints its environment would leak it into logs. Instead loopd keeps
//! the key in memory, removes it from the sessions' environment, and serves it
//! on a Unix socket in the run's private directory; the per-session settings
//! name `loopd agent-key <socket>` as the CLI's `apiKeyHelper`. The key is
//! never written to a file.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;

use crate::util::shell_quote;

/// The environment variable the key is read from (and removed from sessions).
pub const KEY_VAR: &str = crate::util::API_KEY_VAR;

/// Serves the key while alive; removes the socket when dropped.
pub struct KeyServer {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl KeyServer {
    /// Start serving `key` on `path` (its directory should be private).
    pub fn start(path: &Path, key: String) -> std::io::Result<KeyServer> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let key = key.clone();
                tokio::spawn(async move {
                    let _ = stream.write_all(key.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(KeyServer {
            path: path.to_path_buf(),
            task,
        })
    }

    /// The shell command the CLI runs to get the key.
    pub fn helper_command(&self, loopd_exe: &Path) -> String {
        format!(
            "{} agent-key {}",
            shell_quote(&loopd_exe.to_string_lossy()),
            shell_quote(&self.path.to_string_lossy())
        )
    }
}

impl Drop for KeyServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `loopd agent-key SOCKET`: print the key served on `SOCKET`.
pub fn print_key(socket: &Path) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
    let mut key = String::new();
    stream.read_to_string(&mut key)?;
    let mut out = std::io::stdout().lock();
    out.write_all(key.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_the_key_and_cleans_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("key.sock");
        let server = KeyServer::start(&sock, "sk-secret".into()).expect("bind");
        let got = tokio::task::spawn_blocking({
            let sock = sock.clone();
            move || {
                use std::io::Read;
                let mut s = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
                let mut k = String::new();
                s.read_to_string(&mut k).expect("read");
                k
            }
        })
        .await
        .expect("join");
        assert_eq!(got, "sk-secret");
        drop(server);
        assert!(!sock.exists());
    }
}
