//! Facts about loopd itself that the README states: the minimum Rust the
//! lockfile needs, the shell completions and the man page.

use std::path::Path;
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

fn loopd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loopd"))
        .args(args)
        .env("LOOPD_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("loopd {args:?}: {e}"))
}

fn loopd_stdout(args: &[&str]) -> String {
    let text = stdout(loopd(args), &format!("loopd {}", args.join(" ")));
    assert!(
        !text.trim().is_empty(),
        "loopd {} printed nothing",
        args.join(" ")
    );
    text
}

fn names_subcommands(text: &str, what: &str) {
    for sub in ["run", "daemon", "submit", "status", "completions", "man"] {
        let word = regex::Regex::new(&format!(r"\b{sub}\b")).expect("regex");
        assert!(word.is_match(text), "{what} does not name `{sub}`:\n{text}");
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let script = loopd_stdout(&["completions", shell]);
        names_subcommands(&script, &format!("the {shell} completions"));
    }
    let out = loopd(&["completions", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// The bash script parses, registers itself for `loopd`, and completes.
#[test]
fn bash_completions_parse_and_complete_a_subcommand() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("loopd.bash");
    std::fs::write(&file, loopd_stdout(&["completions", "bash"])).expect("write script");
    let bash = |script: &str, file: &Path| {
        Command::new("bash")
            .args(["--norc", "--noprofile", "-c", script, "bash"])
            .arg(file)
            .output()
            .expect("bash")
    };
    stdout(
        Command::new("bash")
            .arg("-n")
            .arg(&file)
            .output()
            .expect("bash -n"),
        "bash -n on the completion script",
    );
    let out = stdout(
        bash(
            r#"source "$1" && complete -p loopd && COMP_WORDS=(loopd sub) COMP_CWORD=1 && _loopd loopd sub loopd && echo "reply: ${COMPREPLY[*]}""#,
            &file,
        ),
        "sourcing the bash completions",
    );
    assert!(
        out.contains("reply: submit"),
        "completing `loopd sub`:\n{out}"
    );
}

#[test]
fn the_man_page_is_roff_and_lists_the_subcommands() {
    let page = loopd_stdout(&["man"]);
    // Before the title only roff requests (clap_mangen defines a string),
    // then `.TH loopd 1` before any section.
    let th = page
        .lines()
        .position(|l| l.starts_with(".TH "))
        .unwrap_or_else(|| panic!("no .TH header:\n{page}"));
    assert!(
        page.lines().take(th).all(|l| l.starts_with('.')),
        "text before .TH:\n{page}"
    );
    assert!(
        page.lines().nth(th).expect("th").starts_with(".TH loopd 1"),
        "{page}"
    );
    let first_section = page
        .lines()
        .position(|l| l.starts_with(".SH"))
        .expect(".SH");
    assert!(th < first_section, "{page}");
    let subcommands = page
        .split_once(".SH SUBCOMMANDS")
        .unwrap_or_else(|| panic!("no SUBCOMMANDS section:\n{page}"))
        .1;
    for sub in ["run", "daemon", "submit", "status", "completions", "man"] {
        assert!(
            subcommands.contains(&format!("loopd\\-{sub}(1)")),
            "SUBCOMMANDS does not list loopd-{sub}(1):\n{page}"
        );
    }
    assert!(
        !page.contains("agent\\-key"),
        "the internal subcommand is listed:\n{page}"
    );

    // The pages SUBCOMMANDS refers to exist.
    let run = loopd_stdout(&["man", "run"]);
    assert!(run.contains("\n.TH loopd-run 1"), "{run}");
    assert!(run.contains("\\-\\-max\\-attempts"), "{run}");
    let hook = loopd_stdout(&["man", "hook", "pre-tool-use"]);
    assert!(hook.contains("\n.TH loopd-hook-pre-tool-use 1"), "{hook}");
    let out = loopd(&["man", "no-such-command"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown subcommand is a usage error"
    );
}

/// The README says every top-level `loopd.toml` field has a flag of the
/// same name and the tables have none: both, checked against `run --help`
/// and the README's own sample file.
#[test]
fn every_top_level_field_of_the_readmes_sample_has_its_flag() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).expect("README");
    let start = readme
        .find("```toml\ntask = ")
        .expect("the README's sample loopd.toml");
    let sample = &readme[start + 8..];
    let sample = &sample[..sample.find("```").expect("end of the sample")];
    let help = String::from_utf8_lossy(&loopd(&["run", "--help"]).stdout).into_owned();
    let mut fields = Vec::new();
    for line in sample.lines() {
        if line.starts_with('[') {
            break; // the tables: file only
        }
        if let Some((key, _)) = line.split_once('=') {
            fields.push(key.trim().to_owned());
        }
    }
    assert!(fields.len() >= 10, "the sample's fields: {fields:?}");
    for field in &fields {
        let flag = format!("--{}", field.replace('_', "-"));
        assert!(
            help.contains(&flag),
            "`{field}` has no `{flag}` in `loopd run --help`"
        );
    }
    for table in ["guard", "protect", "ci", "approval", "notify"] {
        assert!(
            !help.contains(&format!("--{table}")),
            "the README says [{table}] has no flags"
        );
    }
}
