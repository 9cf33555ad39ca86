//! Facts about loopd itself that the README states: the minimum Rust the
//! lockfile needs.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::manifest_dir;

/// "1.91" or "1.91.1" as comparable numbers (a missing patch counts as 0).
fn version(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| {
        p.parse::<u64>()
            .unwrap_or_else(|e| panic!("rust-version `{v}`: {e}"))
    });
    let major = parts.next().expect("major");
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major, minor, patch)
}

fn cargo() -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(manifest_dir());
    cmd
}

fn stdout(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"))
}

/// The platform cargo builds for here, e.g. `x86_64-unknown-linux-gnu`.
fn host() -> String {
    let out = stdout(cargo().arg("-vV").output().expect("cargo -vV"), "cargo -vV");
    out.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("no `host:` line in `cargo -vV`:\n{out}"))
        .trim()
        .to_owned()
}

/// `rust-version` in Cargo.toml (and the README) is exactly the highest
/// `rust-version` among the locked packages: lower, and `cargo build
/// --locked` fails at step one on a toolchain the README says is enough;
/// higher, and it asks for more than anything needs.
///
/// Offline and filtered to this platform: the packages of other platforms
/// (windows-sys, ...) are never downloaded by a build here, and loopd runs
/// on Linux only.
#[test]
fn rust_version_is_what_the_lockfile_needs_and_the_readme_says_so() {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host()])
        .output()
        .expect("cargo metadata");
    let meta: Value =
        serde_json::from_str(&stdout(out, "cargo metadata")).expect("cargo metadata JSON");
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|m| m.as_str().expect("member id"))
        .collect();
    let packages = meta["packages"].as_array().expect("packages");
    let ours = packages
        .iter()
        .find(|p| p["name"] == "loopd")
        .expect("loopd in cargo metadata");
    let declared = ours["rust_version"]
        .as_str()
        .expect("Cargo.toml sets rust-version");

    // The highest rust-version among the locked packages, and who sets it.
    let mut needed: Option<((u64, u64, u64), String)> = None;
    for p in packages {
        if members.contains(&p["id"].as_str().expect("package id")) {
            continue;
        }
        let Some(rv) = p["rust_version"].as_str() else {
            continue;
        };
        if needed.as_ref().is_none_or(|(v, _)| version(rv) > *v) {
            let name = p["name"].as_str().expect("name");
            let v = p["version"].as_str().expect("version");
            needed = Some((version(rv), format!("{name} {v} requires rustc {rv}")));
        }
    }
    let (needed, by) = needed.expect("some locked package declares a rust-version");
    assert!(
        version(declared) >= needed,
        "Cargo.toml says rust-version = \"{declared}\", but {by}: raise it (and the README)"
    );
    assert!(
        version(declared) == needed,
        "Cargo.toml says rust-version = \"{declared}\", but no locked package needs more than {by}: lower it (and the README)"
    );

    // Every "Rust X.Y" in the README names the same version, and one does.
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).expect("README.md");
    let stated = regex::Regex::new(r"(?i)\brust\W{0,4}(\d+\.\d+(?:\.\d+)?)")
        .expect("regex")
        .captures_iter(&readme)
        .map(|c| c[1].to_owned())
        .collect::<Vec<_>>();
    assert!(
        !stated.is_empty(),
        "the README does not state the minimum Rust ({declared})"
    );
    for v in &stated {
        assert_eq!(
            version(v),
            version(declared),
            "the README says Rust {v}; Cargo.toml's rust-version is {declared}"
        );
    }
}
