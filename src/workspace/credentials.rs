//! Credentials in the checkout's git config, held out of the agent's reach
//! for a job's duration.
//!
//! `actions/checkout` with `persist-credentials` (its default) leaves the
//! workflow's token in `.git/config` as `http.<url>.extraheader =
//! AUTHORIZATION: basic …`, and people put personal tokens into remote URLs
//! (`https://user:token@host/…`). The agent can read `.git/config`; what it
//! reads goes to the model and into the stream log a CI job uploads. So
//! before the first session loopd removes every such entry — `Authorization`
//! headers, and userinfo in any URL, whether it is an entry's value or part
//! of its section's name — and writes the file back, byte for byte, when the
//! job ends.
//!
//! The original bytes are held in `<state>/held/<key>.json` (mode 0600, beside
//! and not inside the run directories a CI job uploads), written and fsync'd
//! *before* the config changes: after a crash, the next loopd job in the same
//! repository finds the record of a holder that is gone and puts the file
//! back first. Several jobs may hold the same repository at once (a daemon's
//! worktrees share one `.git/config`): each is a holder, and the last one to
//! release restores.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("cannot hold the credentials of `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot edit the git config `{}`: {source}", path.display())]
    Config {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("the held-credentials record `{}` is unreadable: {message}", path.display())]
    Record { path: PathBuf, message: String },
    #[error("the held-credentials record `{}` was changed since loopd wrote it; not writing it into the git config (the original is lost to loopd: restore `.git/config` by hand)", path.display())]
    Tampered { path: PathBuf },
}

/// One job (or `loopd ci` run) holding a repository's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub id: String,
    pub pid: u32,
}

/// The record in `<state>/held/`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// The config file held.
    config: PathBuf,
    /// Its bytes before loopd removed the credentials (hex: a config file
    /// need not be UTF-8).
    original_hex: String,
    /// The names of the entries removed or rewritten (never their values).
    removed: Vec<String>,
    holders: Vec<Holder>,
}

/// What [`hold`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Names of the config entries held out (never their values); empty:
    /// the config holds no credentials and nothing is held.
    pub removed: Vec<String>,
    /// A record left by a holder that is gone (a crash) was found and the
    /// config put back before holding again.
    pub recovered: bool,
    /// sha256 of the original bytes, kept in the holder's memory: the record
    /// lives in a file the agent could write, and [`release`] puts back only
    /// what hashes to this.
    pub original_sha256: Option<String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What [`release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The last holder left: the config is as it was before.
    Restored,
    /// Other holders remain; the config stays without its credentials.
    StillHeld,
    /// This holder held nothing.
    NotHeld,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> CredentialError + '_ {
    move |source| CredentialError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<state>/held/<key>` for a repository's common git directory.
fn record_paths(state_dir: &Path, git_dir: &Path) -> (PathBuf, PathBuf) {
    let canonical = git_dir
        .canonicalize()
        .unwrap_or_else(|_| git_dir.to_path_buf());
    let key = hex::encode(&Sha256::digest(canonical.to_string_lossy().as_bytes())[..8]);
    let dir = state_dir.join("held");
    (
        dir.join(format!("{key}.json")),
        dir.join(format!("{key}.lock")),
    )
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Holds the record's lock while it lives.
struct Locked {
    _file: std::fs::File,
}

fn lock(state_dir: &Path, lock_path: &Path) -> Result<Locked, CredentialError> {
    let dir = state_dir.join("held");
    crate::util::private_dir(&dir).map_err(io_err(&dir))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(io_err(lock_path))?;
    file.lock().map_err(io_err(lock_path))?;
    Ok(Locked { _file: file })
}

fn load(path: &Path) -> Result<Option<Record>, CredentialError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| CredentialError::Record {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Write the record (0600) and fsync it before anything acts on it.
fn save(path: &Path, record: &Record) -> Result<(), CredentialError> {
    use std::os::unix::fs::OpenOptionsExt;
    let text = serde_json::to_string(record).expect("a held record serializes");
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// The original bytes the record holds.
fn original(record: &Record, path: &Path) -> Result<Vec<u8>, CredentialError> {
    hex::decode(&record.original_hex).map_err(|e| CredentialError::Record {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Put the original bytes back over the config — only bytes that hash to
/// `expected`, when the caller knows what it held.
fn put_back(record: &Record, path: &Path, expected: Option<&str>) -> Result<(), CredentialError> {
    let bytes = original(record, path)?;
    if expected.is_some_and(|e| e != sha256_hex(&bytes)) {
        return Err(CredentialError::Tampered {
            path: path.to_path_buf(),
        });
    }
    crate::util::write_atomic(&record.config, &bytes).map_err(io_err(&record.config))
}

/// The credential-free form of a config entry, if it carries one.
#[derive(Debug, PartialEq, Eq)]
enum Finding {
    /// Remove the entry (an auth header, or a section named by a URL with
    /// userinfo).
    Remove,
    /// Keep the entry with this value (the URL without its userinfo).
    Rewrite(String),
}

fn userinfo() -> Regex {
    // `https://user@`, `https://user:secret@`, and `<scheme>://user:secret@`
    // for any other scheme (`ssh://git@host` is a user name, not a secret).
    Regex::new(r"(?i)\b(?:(https?)://([^/@\s]+)@|([a-z][a-z0-9+.-]*)://([^/@\s:]+:[^/@\s]*)@)")
        .expect("a valid regex")
}

fn strip_userinfo(re: &Regex, s: &str) -> Option<String> {
    if !re.is_match(s) {
        return None;
    }
    Some(
        re.replace_all(s, |c: &regex::Captures| {
            let scheme = c.get(1).or_else(|| c.get(3)).map_or("", |m| m.as_str());
            format!("{scheme}://")
        })
        .into_owned(),
    )
}

fn judge(re: &Regex, name: &str, value: &str) -> Option<Finding> {
    let lower = name.to_ascii_lowercase();
    let auth_header = lower.starts_with("http.")
        && lower.ends_with(".extraheader")
        && Regex::new(r"(?i)^\s*(proxy-)?authorization\s*:")
            .expect("a valid regex")
            .is_match(value);
    // The subsection is everything between the first and the last dot.
    let subsection = match (name.find('.'), name.rfind('.')) {
        (Some(a), Some(b)) if b > a => &name[a + 1..b],
        _ => "",
    };
    if auth_header || re.is_match(subsection) {
        return Some(Finding::Remove);
    }
    strip_userinfo(re, value).map(Finding::Rewrite)
}

/// A value as a POSIX extended regex that matches exactly it.
fn exactly(value: &str) -> String {
    let mut out = String::from("^");
    for c in value.chars() {
        if "\\^$.|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

/// Remove the credentials from the config file at `path`; the names of the
/// entries changed.
fn sanitize(path: &Path) -> Result<Vec<String>, CredentialError> {
    let err = |source| CredentialError::Config {
        path: path.to_path_buf(),
        source,
    };
    let mut cfg = git2::Config::open(path).map_err(err)?;
    let re = userinfo();
    let mut found = Vec::new();
    {
        let mut entries = cfg.entries(None).map_err(err)?;
        while let Some(entry) = entries.next() {
            let entry = entry.map_err(err)?;
            let (Some(name), Some(value)) = (entry.name(), entry.value()) else {
                continue;
            };
            if let Some(f) = judge(&re, name, value) {
                found.push((name.to_owned(), value.to_owned(), f));
            }
        }
    }
    let mut names = Vec::new();
    for (name, value, f) in found {
        let edited = match f {
            Finding::Remove => cfg.remove_multivar(&name, &exactly(&value)),
            Finding::Rewrite(clean) => cfg.set_multivar(&name, &exactly(&value), &clean),
        };
        match edited {
            Ok(()) => {}
            // An entry of an included file: not in this file to edit.
            Err(e) if e.code() == git2::ErrorCode::NotFound => continue,
            Err(e) => return Err(err(e)),
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    drop(cfg);
    // git leaves a section header behind when its last entry goes; one
    // named by a URL with userinfo still names the secret.
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let kept: Vec<&[u8]> = bytes
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| {
            let l = String::from_utf8_lossy(l);
            !(l.trim_start().starts_with('[') && re.is_match(&l))
        })
        .collect();
    if kept.concat() != bytes {
        crate::util::write_atomic(path, &kept.concat()).map_err(io_err(path))?;
    }
    Ok(names)
}

/// Does the config at `path` carry credentials? (Read-only.)
pub fn carries_credentials(path: &Path) -> bool {
    let Ok(cfg) = git2::Config::open(path) else {
        return false;
    };
    let re = userinfo();
    let Ok(mut entries) = cfg.entries(None) else {
        return false;
    };
    while let Some(Ok(entry)) = entries.next() {
        if let (Some(name), Some(value)) = (entry.name(), entry.value()) {
            if judge(&re, name, value).is_some() {
                return true;
            }
        }
    }
    false
}

/// Hold the credentials of the repository whose common git directory is
/// `git_dir` for `holder`: remove them from its `config` (the first holder),
/// or join the holders (a later one). Idempotent for the same holder id.
pub fn hold(state_dir: &Path, git_dir: &Path, holder: &str) -> Result<Held, CredentialError> {
    let config = git_dir.join("config");
    let (record_path, lock_path) = record_paths(state_dir, git_dir);
    let _lock = lock(state_dir, &lock_path)?;
    let me = Holder {
        id: holder.to_owned(),
        pid: std::process::id(),
    };
    let mut recovered = false;
    if let Some(mut record) = load(&record_path)? {
        record.holders.retain(|h| h.id != me.id && alive(h.pid));
        if !record.holders.is_empty() {
            record.holders.push(me);
            save(&record_path, &record)?;
            let original_sha256 = Some(sha256_hex(&original(&record, &record_path)?));
            return Ok(Held {
                removed: record.removed,
                recovered,
                original_sha256,
            });
        }
        // Every holder is gone (a crash): put the config back first.
        put_back(&record, &record_path, None)?;
        std::fs::remove_file(&record_path).map_err(io_err(&record_path))?;
        tracing::warn!(config = %config.display(), "put back the git credentials a crashed loopd job held");
        recovered = true;
    }
    if !carries_credentials(&config) {
        return Ok(Held {
            removed: vec![],
            recovered,
            original_sha256: None,
        });
    }
    let original = std::fs::read(&config).map_err(io_err(&config))?;
    let mut record = Record {
        config: config.clone(),
        original_hex: hex::encode(&original),
        removed: vec![],
        holders: vec![me],
    };
    // Durable before the config changes: a crash between the two leaves a
    // record whose original is the file as it still is.
    save(&record_path, &record)?;
    record.removed = sanitize(&config)?;
    save(&record_path, &record)?;
    tracing::info!(config = %config.display(), entries = ?record.removed, "held the git credentials out of the checkout for the job");
    Ok(Held {
        removed: record.removed,
        recovered,
        original_sha256: Some(sha256_hex(&original)),
    })
}

/// Release `holder`'s hold; the last holder puts the config back — only if
/// the record still holds what `held` (the holder's [`Held`]) says it did.
pub fn release(
    state_dir: &Path,
    git_dir: &Path,
    holder: &str,
    held: Option<&str>,
) -> Result<Released, CredentialError> {
    let (record_path, lock_path) = record_paths(state_dir, git_dir);
    if !record_path.exists() {
        return Ok(Released::NotHeld);
    }
    let _lock = lock(state_dir, &lock_path)?;
    let Some(mut record) = load(&record_path)? else {
        return Ok(Released::NotHeld);
    };
    let was_holder = record.holders.iter().any(|h| h.id == holder);
    record.holders.retain(|h| h.id != holder && alive(h.pid));
    if !record.holders.is_empty() {
        save(&record_path, &record)?;
        return Ok(if was_holder {
            Released::StillHeld
        } else {
            Released::NotHeld
        });
    }
    // The last holder left (or every other one is gone): put it back.
    if let Err(e) = put_back(&record, &record_path, held) {
        if matches!(e, CredentialError::Tampered { .. }) {
            // Never used again, kept as evidence.
            let _ = std::fs::rename(&record_path, record_path.with_extension("tampered"));
        }
        return Err(e);
    }
    std::fs::remove_file(&record_path).map_err(io_err(&record_path))?;
    tracing::info!(config = %record.config.display(), "put the git credentials back");
    Ok(Released::Restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA==";

    fn repo_config(dir: &Path) -> PathBuf {
        let git = dir.join("git");
        std::fs::create_dir_all(&git).expect("git dir");
        let config = git.join("config");
        std::fs::write(
            &config,
            format!(
                "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://x-access-token:ghp_pat123@github.com/acme/app.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[remote \"mirror\"]\n\turl = ssh://git@example.com/acme/app.git\n[http \"https://github.com/\"]\n\textraheader = {HEADER}\n\textraheader = X-Trace: 1\n[url \"https://bot:tok456@example.com/\"]\n\tinsteadOf = https://example.com/\n"
            ),
        )
        .expect("config");
        config
    }

    #[test]
    fn auth_headers_and_userinfo_are_held_out_and_put_back_byte_for_byte() {
        let tmp = tempfile::tempdir().expect("tmp");
        let config = repo_config(tmp.path());
        let before = std::fs::read(&config).expect("read");
        let git = config.parent().expect("git dir");
        let state = tmp.path().join("state");
        let held = hold(&state, git, "job-1").expect("hold");
        let sha = held.original_sha256.clone();
        assert_eq!(sha.as_deref(), Some(sha256_hex(&before).as_str()));
        assert!(!held.recovered);
        assert_eq!(held.removed.len(), 3, "{:?}", held.removed);
        let during = std::fs::read_to_string(&config).expect("read");
        for secret in ["ghp_pat123", "eC1hY2Nlc3MtdG9r", "tok456", "x-access-token"] {
            assert!(!during.contains(secret), "{secret} left in:\n{during}");
        }
        // What is not a credential stays.
        for kept in [
            "https://github.com/acme/app.git",
            "ssh://git@example.com/acme/app.git",
            "X-Trace: 1",
            "fetch = +refs/heads/*",
        ] {
            assert!(during.contains(kept), "{kept} lost:\n{during}");
        }
        assert!(!carries_credentials(&config));
        // The record is private and outside any run directory.
        let records: Vec<_> = std::fs::read_dir(state.join("held"))
            .expect("held")
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .collect();
        assert_eq!(records.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            records[0].metadata().expect("meta").permissions().mode() & 0o777,
            0o600
        );
        // A second holder joins; the first release keeps them held.
        let second = hold(&state, git, "job-2").expect("hold");
        assert_eq!(second.removed.len(), 3);
        assert_eq!(second.original_sha256, sha);
        assert_eq!(
            release(&state, git, "job-1", sha.as_deref()).expect("release"),
            Released::StillHeld
        );
        assert!(!carries_credentials(&config));
        assert_eq!(
            release(&state, git, "job-2", sha.as_deref()).expect("release"),
            Released::Restored
        );
        assert_eq!(std::fs::read(&config).expect("read"), before);
        assert_eq!(
            release(&state, git, "job-2", sha.as_deref()).expect("release"),
            Released::NotHeld
        );
    }

    #[test]
    fn a_crashed_holders_record_puts_the_config_back_on_the_next_hold() {
        let tmp = tempfile::tempdir().expect("tmp");
        let config = repo_config(tmp.path());
        let before = std::fs::read(&config).expect("read");
        let git = config.parent().expect("git dir");
        let state = tmp.path().join("state");
        hold(&state, git, "crashed").expect("hold");
        // Make the holder look dead: a pid that cannot exist.
        let (record_path, _) = record_paths(&state, git);
        let mut record = load(&record_path).expect("load").expect("record");
        record.holders[0].pid = i32::MAX as u32;
        save(&record_path, &record).expect("save");
        let held = hold(&state, git, "next").expect("hold");
        assert!(held.recovered);
        assert_eq!(held.removed.len(), 3);
        assert_eq!(
            release(&state, git, "next", held.original_sha256.as_deref()).expect("release"),
            Released::Restored
        );
        assert_eq!(std::fs::read(&config).expect("read"), before);
    }

    #[test]
    fn a_record_rewritten_while_held_is_never_written_into_the_config() {
        let tmp = tempfile::tempdir().expect("tmp");
        let config = repo_config(tmp.path());
        let git = config.parent().expect("git dir");
        let state = tmp.path().join("state");
        let held = hold(&state, git, "job").expect("hold");
        let during = std::fs::read(&config).expect("read");
        // The agent runs as the same user: it could rewrite the record to
        // plant a config of its own at the end.
        let (record_path, _) = record_paths(&state, git);
        let mut record = load(&record_path).expect("load").expect("record");
        record.original_hex =
            hex::encode("[remote \"origin\"]\n\tpushurl = http://127.0.0.1:9/x\n");
        save(&record_path, &record).expect("save");
        assert!(matches!(
            release(&state, git, "job", held.original_sha256.as_deref()),
            Err(CredentialError::Tampered { .. })
        ));
        assert_eq!(
            std::fs::read(&config).expect("read"),
            during,
            "nothing planted"
        );
        // Nor later, by a job that finds the record.
        assert!(hold(&state, git, "later").expect("hold").removed.is_empty());
        assert_eq!(std::fs::read(&config).expect("read"), during);
    }

    #[test]
    fn a_config_without_credentials_is_left_alone() {
        let tmp = tempfile::tempdir().expect("tmp");
        let git = tmp.path().join("git");
        std::fs::create_dir_all(&git).expect("git");
        let text = "[remote \"origin\"]\n\turl = https://github.com/acme/app.git\n";
        std::fs::write(git.join("config"), text).expect("config");
        let state = tmp.path().join("state");
        let held = hold(&state, &git, "j").expect("hold");
        assert!(held.removed.is_empty());
        assert_eq!(
            std::fs::read_to_string(git.join("config")).expect("read"),
            text
        );
        assert_eq!(
            release(&state, &git, "j", None).expect("release"),
            Released::NotHeld
        );
    }

    #[test]
    fn userinfo_is_stripped_from_any_url_in_a_value() {
        let re = userinfo();
        assert_eq!(
            strip_userinfo(&re, "https://TOKEN@github.com/a/b"),
            Some("https://github.com/a/b".into())
        );
        assert_eq!(
            strip_userinfo(&re, "ftp://u:p@h/x"),
            Some("ftp://h/x".into())
        );
        assert_eq!(strip_userinfo(&re, "ssh://git@github.com/a/b"), None);
        assert_eq!(strip_userinfo(&re, "git@github.com:a/b"), None);
        assert_eq!(exactly("a.b*c"), r"^a\.b\*c$");
    }
}
