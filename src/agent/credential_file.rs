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
    /// An entry that is, or resolves (through a link) to, a path a job's
    /// processes can read: the agent would read the key itself, or swap
    /// the link for one of its own before the next start.
    #[error("the credential file `{}`: `{}` {} inside {why} (`{}`): the agent can read it", path.display(), entry.display(), reached(entry, resolved), root.display())]
    Exposed {
        path: PathBuf,
        /// The entry of the directory (or the file itself).
        entry: PathBuf,
        /// The path on the way (a link, or where it ends) that is readable.
        resolved: PathBuf,
        /// The readable root it lies under, and why the sandbox reads it.
        root: PathBuf,
        why: String,
    },
}

/// How an [`CredentialFileError::Exposed`] entry reaches what is readable.
fn reached(entry: &Path, resolved: &Path) -> String {
    if entry == resolved {
        "lies".to_owned()
    } else {
        format!("resolves through `{}`,", resolved.display())
    }
}

impl CredentialFileError {
    pub fn hint(&self) -> String {
        if let CredentialFileError::Exposed { .. } = self {
            return "keep the credentials, and every link to them, outside the repository and outside what the job's sandbox reads (`loopd check` lists it): a Secret volume, `$RUNNER_TEMP`, `/run/credentials`".into();
        }
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

/// Every path `path` (the credential file, or each entry of the
/// credential directory, `..data` and the like included) passes through
/// on its way to what is read: the entry itself, each link followed (hop by
/// hop, a link inside a linked directory too), and where it ends. A Secret
/// volume's `KEY -> ..data/KEY`, `..data -> ..2026_…` yields the entry,
/// the two links and the file; a link into the repository yields a path
/// in the repository. Relative paths are taken from the current directory.
pub fn resolve(path: &Path) -> Result<Vec<(PathBuf, Vec<PathBuf>)>, CredentialFileError> {
    let read_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| CredentialFileError::Read { path: p, source }
    };
    let path = std::path::absolute(path).map_err(read_err(path))?;
    let mut entries = vec![path.clone()];
    if std::fs::metadata(&path).map_err(read_err(&path))?.is_dir() {
        for e in std::fs::read_dir(&path).map_err(read_err(&path))? {
            entries.push(e.map_err(read_err(&path))?.path());
        }
    }
    // The file itself first, then the entries loopd reads, then a
    // volume's bookkeeping (`..data`): a refusal names the first.
    entries[1..].sort_by_key(|e| {
        let hidden = e
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
        (hidden, e.clone())
    });
    entries
        .into_iter()
        .map(|e| {
            let hops = trace(&e).map_err(read_err(&e))?;
            Ok((e, hops))
        })
        .collect()
}

/// Refuse `path` when one of its entries is, or passes on its way to what
/// is read ([`resolve`]), a path under one of `readable` (the roots a
/// job's processes read, each with why); else nothing.
pub fn refuse_exposed(
    path: &Path,
    readable: &[(PathBuf, String)],
) -> Result<(), CredentialFileError> {
    for (entry, hops) in resolve(path)? {
        for hop in &hops {
            if let Some((root, why)) = readable.iter().find(|(r, _)| hop.starts_with(r)) {
                return Err(CredentialFileError::Exposed {
                    path: path.to_path_buf(),
                    entry,
                    resolved: hop.clone(),
                    root: root.clone(),
                    why: why.clone(),
                });
            }
        }
    }
    Ok(())
}

/// The paths an absolute `path` passes through, resolved component by
/// component: each link met (as the path of the link) and the final path.
/// At most 40 links, as the kernel allows.
fn trace(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    use std::collections::VecDeque;
    use std::ffi::OsString;
    use std::path::Component;
    /// A component, owned: a link's target is spliced in front of what
    /// is left of the path.
    enum Part {
        Root,
        Up,
        Name(OsString),
    }
    fn parts(p: &Path) -> impl DoubleEndedIterator<Item = Part> + '_ {
        p.components().filter_map(|c| match c {
            Component::RootDir => Some(Part::Root),
            Component::ParentDir => Some(Part::Up),
            Component::Normal(n) => Some(Part::Name(n.to_owned())),
            Component::CurDir | Component::Prefix(_) => None,
        })
    }
    let mut hops = vec![path.to_path_buf()];
    let mut pending: VecDeque<Part> = parts(path).collect();
    let mut links = 0;
    let mut at = PathBuf::from("/");
    while let Some(part) = pending.pop_front() {
        match part {
            Part::Root => at = PathBuf::from("/"),
            Part::Up => {
                at.pop();
            }
            Part::Name(name) => {
                let next = at.join(name);
                if std::fs::symlink_metadata(&next)?.file_type().is_symlink() {
                    links += 1;
                    if links > 40 {
                        return Err(std::io::Error::other("too many levels of links"));
                    }
                    let target = std::fs::read_link(&next)?;
                    for p in parts(&target).rev() {
                        pending.push_front(p);
                    }
                    hops.push(next);
                } else {
                    at = next;
                }
            }
        }
    }
    hops.push(at);
    hops.dedup();
    Ok(hops)
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
    fn every_entry_is_traced_through_each_link_to_where_it_ends() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let (secret, repo) = (root.join("secret"), root.join("repo"));
        let dated = secret.join("..2026_12_04_01_00_00.1");
        std::fs::create_dir_all(&dated).unwrap();
        std::fs::create_dir_all(repo.join("keys")).unwrap();
        std::fs::write(dated.join("ANTHROPIC_API_KEY"), "sk-dated\n").unwrap();
        std::fs::write(repo.join("keys/real"), "sk-real\n").unwrap();
        std::os::unix::fs::symlink("..2026_12_04_01_00_00.1", secret.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/ANTHROPIC_API_KEY", secret.join("ANTHROPIC_API_KEY"))
            .unwrap();
        let traced = resolve(&secret).unwrap();
        let key = traced
            .iter()
            .find(|(e, _)| e.ends_with("ANTHROPIC_API_KEY"))
            .expect("the key's entry");
        assert_eq!(
            key.1,
            [
                secret.join("ANTHROPIC_API_KEY"),
                secret.join("..data"),
                dated.join("ANTHROPIC_API_KEY")
            ]
        );
        let readable = [(repo.clone(), "the repository".to_owned())];
        refuse_exposed(&secret, &readable).unwrap();

        // `..data` moved to a linked directory in the repository: the key
        // resolves there, though no entry names the repository itself.
        std::fs::remove_file(secret.join("..data")).unwrap();
        std::os::unix::fs::symlink(root.join("via"), secret.join("..data")).unwrap();
        std::os::unix::fs::symlink("repo/keys", root.join("via")).unwrap();
        std::fs::rename(repo.join("keys/real"), repo.join("keys/ANTHROPIC_API_KEY")).unwrap();
        let e = refuse_exposed(&secret, &readable).unwrap_err();
        match &e {
            CredentialFileError::Exposed {
                entry, resolved, ..
            } => {
                assert_eq!(entry, &secret.join("ANTHROPIC_API_KEY"));
                assert_eq!(resolved, &repo.join("keys/ANTHROPIC_API_KEY"));
            }
            other => panic!("{other}"),
        }
        assert!(!e.to_string().contains("sk-"), "{e}");
        assert!(e.to_string().contains("inside the repository"), "{e}");
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
