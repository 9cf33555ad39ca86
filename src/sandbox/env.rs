//! The environment of every process of a job — the agent CLI and its tools,
//! the critic, every goal step and held-out step: **built from an
//! allow-list, never inherited**. loopd's own environment is the user's
//! session: cloud and registry tokens, `SSH_AUTH_SOCK`, a D-Bus address, an
//! editor's socket. None of it reaches a job unless it is on the list:
//!
//! - what programs need to be found and to speak the user's language:
//!   `PATH`, the locale (`LANG`, `LANGUAGE`, `LC_*`) and `TZ` ([`PASSED`]);
//! - where the toolchains the sandbox reads live (`CARGO_HOME`,
//!   `RUSTUP_HOME`, `VIRTUAL_ENV`, … — [`TOOLCHAIN_VARS`]);
//! - what loopd itself sets: a private `HOME` and `TMPDIR` for the role,
//!   the containment token, the session's gateway and token;
//! - what the lead names: `[sandbox] env = ["NAME", …]` or `--env NAME`,
//!   taken from loopd's environment. A credential's name is refused there
//!   ([`refused`]): loopd's credentials never reach a job.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// Passed from loopd's environment when set: what programs need to be
/// found and to speak the user's language.
pub const PASSED: &[&str] = &["PATH", "LANG", "LANGUAGE", "TZ"];

/// Passed by prefix: the locale's categories (`LC_ALL`, `LC_CTYPE`, …).
pub const PASSED_PREFIX: &str = "LC_";

/// Where toolchains live: each names a directory the sandbox already
/// reads (see [`super::toolchains`]), and the toolchain's programs look
/// for themselves there.
pub const TOOLCHAIN_VARS: &[&str] = &[
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "PYENV_ROOT",
    "NVM_DIR",
    "VOLTA_HOME",
    "GOROOT",
    "GOPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "JAVA_HOME",
    "PNPM_HOME",
    "BUN_INSTALL",
    "DENO_INSTALL",
];

/// Why one variable is in a job's environment (`loopd check` prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// [`PASSED`] or the locale.
    System,
    /// [`TOOLCHAIN_VARS`].
    Toolchain,
    /// Set by loopd (a private `HOME`, the gateway, …).
    Loopd,
    /// `[sandbox] env` or `--env`.
    Named,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::System => "the system: programs and the locale",
            Source::Toolchain => "where a toolchain lives",
            Source::Loopd => "set by loopd",
            Source::Named => "[sandbox] env / --env",
        }
    }
}

/// Why a name the lead gave cannot be passed: a credential loopd holds
/// (every agent's, every forge token's), or loopd's own variables.
pub fn refused(name: &str, secrets: &[&str]) -> Option<&'static str> {
    if secrets.contains(&name) {
        return Some("it is a credential loopd holds: credentials never reach a job's processes");
    }
    if name.starts_with("LOOPD_") {
        return Some("loopd's own variables are set by loopd");
    }
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Some("it is not a variable name");
    }
    None
}

/// A job process's whole environment: nothing else is inherited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<OsString, (OsString, Source)>,
}

impl Environment {
    /// The allow-list applied to `vars` (loopd's own environment, as
    /// name–value pairs): [`PASSED`], the locale, [`TOOLCHAIN_VARS`] and
    /// `named` (the lead's), each when set. Nothing else.
    pub fn allow_listed(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        named: &[String],
    ) -> Environment {
        let mut env = Environment::default();
        for (k, v) in vars {
            let Some(name) = k.to_str() else { continue };
            let source = if PASSED.contains(&name) || name.starts_with(PASSED_PREFIX) {
                Source::System
            } else if TOOLCHAIN_VARS.contains(&name) {
                Source::Toolchain
            } else if named.iter().any(|n| n == name) {
                Source::Named
            } else {
                continue;
            };
            env.vars.insert(k, (v, source));
        }
        env
    }

    /// The allow-list applied to loopd's own environment.
    pub fn from_process(named: &[String]) -> Environment {
        Environment::allow_listed(std::env::vars_os(), named)
    }

    /// Set `name` (loopd's own setting: a private `HOME`, the gateway).
    pub fn set(&mut self, name: impl Into<OsString>, value: impl Into<OsString>) {
        self.vars.insert(name.into(), (value.into(), Source::Loopd));
    }

    /// The same, with `name` set.
    pub fn with(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Environment {
        self.set(name, value);
        self
    }

    /// The value of `name`, if the environment holds it.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(|(v, _)| v.as_os_str())
    }

    /// Every name and why it is there, for people (`loopd check`).
    pub fn names(&self) -> Vec<(String, Source)> {
        self.vars
            .iter()
            .map(|(k, (_, s))| (k.to_string_lossy().into_owned(), *s))
            .collect()
    }

    /// Every name and value.
    pub fn pairs(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, (v, _))| (k.as_os_str(), v.as_os_str()))
    }

    /// Make `cmd`'s environment exactly this one.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        cmd.env_clear();
        for (k, (v, _)) in &self.vars {
            cmd.env(k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_what_is_listed_passes() {
        let env = Environment::allow_listed(
            pairs(&[
                ("PATH", "/usr/bin"),
                ("LC_ALL", "C.UTF-8"),
                ("TZ", "UTC"),
                ("CARGO_HOME", "/opt/cargo"),
                ("AWS_SECRET_ACCESS_KEY", "x"),
                ("SSH_AUTH_SOCK", "/run/user/1000/ssh"),
                ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
                ("NPM_TOKEN", "t"),
                ("DATABASE_URL", "postgres://"),
                ("PYTHONPATH", "/tmp/evil"),
                ("NODE_OPTIONS", "--require /tmp/evil.js"),
            ]),
            &["DATABASE_URL".to_owned()],
        );
        let names: Vec<String> = env.names().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["CARGO_HOME", "DATABASE_URL", "LC_ALL", "PATH", "TZ"],
            "{env:?}"
        );
        assert_eq!(env.get("DATABASE_URL"), Some(OsStr::new("postgres://")));
        let env = env.with("HOME", "/run/job/home");
        assert!(env.names().contains(&("HOME".to_owned(), Source::Loopd)));
    }

    #[test]
    fn credentials_and_loopds_own_names_are_refused() {
        let secrets = ["ANTHROPIC_API_KEY", "GITHUB_TOKEN"];
        assert!(refused("ANTHROPIC_API_KEY", &secrets).is_some());
        assert!(refused("GITHUB_TOKEN", &secrets).is_some());
        assert!(refused("LOOPD_SESSION_TOKEN", &secrets).is_some());
        assert!(refused("A=B", &secrets).is_some());
        assert!(refused("DATABASE_URL", &secrets).is_none());
    }

    #[tokio::test]
    async fn a_command_gets_exactly_the_environment() {
        let env = Environment::allow_listed(pairs(&[("PATH", "/usr/bin:/bin")]), &[])
            .with("HOME", "/nonexistent-home");
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.args(["-c", "env"]);
        env.apply(&mut cmd);
        let out = cmd.output().await.expect("sh runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            // The shell's own.
            .filter(|k| !matches!(*k, "PWD" | "SHLVL" | "_" | "OLDPWD"))
            .collect();
        names.sort();
        assert_eq!(names, ["HOME", "PATH"], "{text}");
    }
}
