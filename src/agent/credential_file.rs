//! `--credential-file`: the model credentials from files instead of the
//! environment — a Kubernetes Secret mounted as a volume, a file a systemd
//! unit's `LoadCredential=` provides, a CI step's file under `$RUNNER_TEMP`.
//! A literal key in a manifest or a unit's environment is visible to every
//! reader of that manifest or of `/proc/<pid>/environ`; a file is read once,
//! here, and lives in loopd's memory only, like the variables
//! [`crate::util::scrub_environ`] removes.
//!
//! Two shapes: a directory holding one file per variable, named after it
//! (how a Secret volume mounts its keys: `ANTHROPIC_API_KEY` →
//! `..data/ANTHROPIC_API_KEY`, links included), or one file of
//! `NAME=value` lines (`#` comments, blank lines). Only the agents'
//! credential variables are accepted: a misspelt name is an error, never a
//! key silently unused. No error ever quotes a value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A credential file or directory is small; anything larger is a mistake.
const MAX_BYTES: u64 = 64 * 1024;

/// Why a credential file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialFileError {
    #[error("cannot read the credential file `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{name}` in the credential file `{path}` is not a credential variable")]
    UnknownName { path: PathBuf, name: String },
    /// An entry whose name is not even a variable name: never echoed (it
    /// may be a value written where a name belongs).
    #[error("the credential file `{path}` holds an entry that is not a variable name")]
    NotAName { path: PathBuf },
    #[error("the value of `{name}` in the credential file `{path}` holds a line break or a control character")]
    BadValue { path: PathBuf, name: String },
    #[error("line {line} of the credential file `{path}` is not `NAME=value`")]
    Malformed { path: PathBuf, line: usize },
    #[error("the credential file `{path}` holds no credential")]
    Empty { path: PathBuf },
}

impl CredentialFileError {
    pub fn hint(&self) -> String {
        format!(
            "a directory with one file per variable, or a file of `NAME=value` lines; the names loopd reads: {}",
            super::credential_vars().join(", ")
        )
    }
}

/// The credentials in `path`, by variable name.
pub fn read(path: &Path) -> Result<BTreeMap<String, String>, CredentialFileError> {
    let read_err = |source| CredentialFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let known = super::credential_vars();
    let meta = std::fs::metadata(path).map_err(read_err)?;
    let mut out = BTreeMap::new();
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(read_err)? {
            let entry = entry.map_err(read_err)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // A Secret volume's own bookkeeping (`..data`, `..2026_12_02…`).
            if name.starts_with('.') {
                continue;
            }
            check_name(path, &known, &name)?;
            let value = check_value(path, &name, &read_one(&entry.path())?)?;
            out.insert(name, value);
        }
    } else {
        let text = read_one(path)?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, value)) = line.split_once('=') else {
                return Err(CredentialFileError::Malformed {
                    path: path.to_path_buf(),
                    line: i + 1,
                });
            };
            let name = name.trim();
            if !is_name(name) {
                // `KEY: value`, `KEY value=`, a bare value with `=` in it:
                // the line as a whole is wrong, and it may hold the secret.
                return Err(CredentialFileError::Malformed {
                    path: path.to_path_buf(),
                    line: i + 1,
                });
            }
            check_name(path, &known, name)?;
            out.insert(name.to_owned(), check_value(path, name, value)?);
        }
    }
    out.retain(|_, v| !v.is_empty());
    if out.is_empty() {
        return Err(CredentialFileError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// `NAME` as the environment spells one: what an error may quote.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// A name the file may hold: a variable name (else never quoted back: it
/// may be a value written where a name belongs) that an agent reads.
fn check_name(path: &Path, known: &[&str], name: &str) -> Result<(), CredentialFileError> {
    if !is_name(name) {
        return Err(CredentialFileError::NotAName {
            path: path.to_path_buf(),
        });
    }
    if !known.contains(&name) {
        return Err(CredentialFileError::UnknownName {
            path: path.to_path_buf(),
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// A value: one line of printable text, trimmed.
fn check_value(path: &Path, name: &str, value: &str) -> Result<String, CredentialFileError> {
    let value = value.trim();
    if value.chars().any(char::is_control) {
        return Err(CredentialFileError::BadValue {
            path: path.to_path_buf(),
            name: name.to_owned(),
        });
    }
    Ok(value.to_owned())
}

/// One file's text, links resolved (a Secret volume's files are links), a
/// regular file only, never a blocking open, at most [`MAX_BYTES`].
fn read_one(path: &Path) -> Result<String, CredentialFileError> {
    let read_err = |source| CredentialFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let real = std::fs::canonicalize(path).map_err(read_err)?;
    let bytes = crate::util::read_untrusted(&real, MAX_BYTES).map_err(read_err)?;
    String::from_utf8(bytes)
        .map_err(|e| read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_volume_with_its_links_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("..2026_12_02_01_00_00.1");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("ANTHROPIC_API_KEY"), "sk-test\n").unwrap();
        std::os::unix::fs::symlink(&data, dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink(
            "..data/ANTHROPIC_API_KEY",
            dir.path().join("ANTHROPIC_API_KEY"),
        )
        .unwrap();
        let got = read(dir.path()).unwrap();
        assert_eq!(
            got.get("ANTHROPIC_API_KEY").map(String::as_str),
            Some("sk-test")
        );
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn a_file_of_lines_is_read_and_a_misspelt_name_is_refused_without_its_value() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("creds");
        std::fs::write(&f, "# the night's key\n\nOPENAI_API_KEY = sk-o\n").unwrap();
        assert_eq!(read(&f).unwrap()["OPENAI_API_KEY"], "sk-o");

        std::fs::write(&f, "ANTHROPIC_APIKEY=sk-secret\n").unwrap();
        let e = read(&f).unwrap_err();
        assert!(
            matches!(&e, CredentialFileError::UnknownName { name, .. } if name == "ANTHROPIC_APIKEY")
        );
        assert!(!e.to_string().contains("sk-secret"), "{e}");
        assert!(e.hint().contains("ANTHROPIC_API_KEY"), "{}", e.hint());

        std::fs::write(&f, "sk-only-a-value\n").unwrap();
        let e = read(&f).unwrap_err();
        assert!(matches!(e, CredentialFileError::Malformed { line: 1, .. }));
        assert!(!e.to_string().contains("sk-only"), "{e}");

        std::fs::write(&f, "ANTHROPIC_API_KEY=\n").unwrap();
        assert!(matches!(read(&f), Err(CredentialFileError::Empty { .. })));

        // A value where a name belongs is never quoted back.
        for line in [
            "ANTHROPIC_API_KEY: sk-leak-abc==",
            "ANTHROPIC_API_KEY sk-leak=1",
            "sk-leak-bare==",
        ] {
            std::fs::write(&f, format!("{line}\n")).unwrap();
            let e = read(&f).unwrap_err();
            assert!(
                matches!(e, CredentialFileError::Malformed { .. }),
                "{line}: {e}"
            );
            assert!(!e.to_string().contains("sk-leak"), "{e}");
        }
    }

    #[test]
    fn a_value_with_a_line_break_or_a_control_character_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ANTHROPIC_API_KEY"),
            "sk-a\r\nX-Injected: yes\n",
        )
        .unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(matches!(e, CredentialFileError::BadValue { .. }), "{e}");
        assert!(!e.to_string().contains("sk-a"), "{e}");
        std::fs::write(dir.path().join("ANTHROPIC_API_KEY"), "sk-a\0b").unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(CredentialFileError::BadValue { .. })
        ));
        let f = dir.path().join("lines");
        std::fs::write(&f, "OPENAI_API_KEY=sk-\u{1b}[2J\r\n").unwrap();
        assert!(matches!(
            read(&f),
            Err(CredentialFileError::BadValue { .. })
        ));
        std::fs::write(&f, "OPENAI_API_KEY=sk-ok\r\n").unwrap();
        assert_eq!(
            read(&f).unwrap()["OPENAI_API_KEY"],
            "sk-ok",
            "a CRLF file is fine"
        );
        let d2 = tempfile::tempdir().unwrap();
        std::fs::write(d2.path().join("sk-secret-as-a-name=="), "x").unwrap();
        let e = read(d2.path()).unwrap_err();
        assert!(matches!(e, CredentialFileError::NotAName { .. }), "{e}");
        assert!(!e.to_string().contains("sk-secret"), "{e}");
    }

    #[test]
    fn a_fifo_or_a_huge_file_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("ANTHROPIC_API_KEY");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read(dir.path()),
            Err(CredentialFileError::Read { .. })
        ));
        std::fs::remove_file(&fifo).unwrap();
        std::fs::write(&fifo, vec![b'k'; 100_000]).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(CredentialFileError::Read { .. })
        ));
    }
}
