//! Facts about loopd itself that the README and the reference in `docs/`
//! state: the minimum Rust the lockfile needs, the shell completions and the
//! man page, the flags and the sample `loopd.toml`, the reason codes with
//! their exit codes, and that every relative link leads somewhere.

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

/// README.md and every page of `docs/`, as (path relative to the
/// repository, text), in a fixed order: the documents whose facts these
/// tests hold to the code.
fn doc_pages() -> Vec<(String, String)> {
    let root = manifest_dir();
    let mut paths = vec!["README.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| {
            e.expect("a docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(root.join(&p)).unwrap_or_else(|e| panic!("{p}: {e}"));
            (p, text)
        })
        .collect()
}

/// One page's text, by its path relative to the repository.
fn doc_page(rel: &str) -> String {
    std::fs::read_to_string(manifest_dir().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn cargo() -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    // `scripts/test.sh` runs the test binaries with RUSTC_BOOTSTRAP=1 (for
    // `--report-time`); the cargo run here is a stable one.
    cmd.current_dir(manifest_dir())
        .env_remove("RUSTC_BOOTSTRAP");
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

    // Every "Rust X.Y" in the README and the docs names the same version,
    // and the README (where a newcomer installs from) states it.
    let rust = regex::Regex::new(r"(?i)\brust\W{0,4}(\d+\.\d+(?:\.\d+)?)").expect("regex");
    for (page, text) in doc_pages() {
        let stated = rust
            .captures_iter(&text)
            .map(|c| c[1].to_owned())
            .collect::<Vec<_>>();
        assert!(
            page != "README.md" || !stated.is_empty(),
            "the README does not state the minimum Rust ({declared})"
        );
        for v in &stated {
            assert_eq!(
                version(v),
                version(declared),
                "{page} says Rust {v}; Cargo.toml's rust-version is {declared}"
            );
        }
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

/// The top-level fields of every sample `loopd.toml` (a ```` ```toml ````
/// block that starts with `task = `) in the README and the docs, with the
/// page it is on.
fn sample_configs() -> Vec<(String, Vec<String>)> {
    let mut samples = Vec::new();
    for (page, text) in doc_pages() {
        for (start, _) in text.match_indices("```toml\ntask = ") {
            let sample = &text[start + "```toml\n".len()..];
            let sample = &sample[..sample.find("```").expect("end of the sample")];
            let mut fields = Vec::new();
            for line in sample.lines() {
                if line.starts_with('[') {
                    break; // the tables: file only
                }
                if let Some((key, _)) = line.split_once('=') {
                    fields.push(key.trim().to_owned());
                }
            }
            samples.push((page.clone(), fields));
        }
    }
    samples
}

/// The docs say every top-level `loopd.toml` field has a flag of the
/// same name and the tables have none: both, checked against `run --help`
/// and every sample file the README and the docs show — one of them the
/// full sample of docs/configuration.md.
#[test]
fn every_top_level_field_of_the_sample_loopd_toml_has_its_flag() {
    let samples = sample_configs();
    assert!(
        samples
            .iter()
            .any(|(page, fields)| page == "docs/configuration.md" && fields.len() >= 10),
        "docs/configuration.md has no full sample loopd.toml: {samples:?}"
    );
    let help = String::from_utf8_lossy(&loopd(&["run", "--help"]).stdout).into_owned();
    for (page, fields) in &samples {
        for field in fields {
            let flag = format!("--{}", field.replace('_', "-"));
            assert!(
                help.contains(&flag),
                "{page}: `{field}` has no `{flag}` in `loopd run --help`"
            );
        }
    }
    for table in ["guard", "protect", "ci", "approval", "notify"] {
        assert!(
            !help.contains(&format!("--{table}")),
            "docs/configuration.md says [{table}] has no flags"
        );
    }
}

/// docs/configuration.md names every long flag `loopd run --help` prints,
/// so a new flag cannot ship undocumented.
#[test]
fn every_flag_of_loopd_run_is_in_the_configuration_page() {
    let help = stdout(loopd(&["run", "--help"]), "loopd run --help");
    let page = doc_page("docs/configuration.md");
    // An option's own line: `  -C, --repo <DIR>` or `      --json`.
    let option = regex::Regex::new(r"(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)").expect("regex");
    let flags: Vec<&str> = option
        .captures_iter(&help)
        .map(|c| c.get(1).expect("flag").as_str())
        .collect();
    assert!(
        flags.len() >= 20 && flags.contains(&"max-attempts"),
        "the flags of `loopd run --help`: {flags:?}\n{help}"
    );
    for flag in flags {
        let named = regex::Regex::new(&format!(r"--{}(?:[^a-z0-9-]|$)", regex::escape(flag)))
            .expect("regex");
        assert!(
            named.is_match(&page),
            "`loopd run --{flag}` is not in docs/configuration.md"
        );
    }
}

/// The cells of a Markdown table's body rows under the heading `heading`
/// (up to the next heading), trimmed, backticks kept.
fn table_rows(text: &str, heading: &str) -> Vec<Vec<String>> {
    let section = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no `{heading}` heading"))
        .1;
    let section = section.split("\n#").next().expect("a section");
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("| ---"))
        .skip(1) // the header row
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// docs/exit-codes.md lists every reason code once, with the outcome and
/// the exit code `src/outcome.rs` gives it, and every exit code a reason
/// can have is in its table of exit codes.
#[test]
fn the_exit_codes_page_lists_every_reason_with_its_exit_code() {
    use loopd::outcome::{ExitStatus, Reason};
    let page = doc_page("docs/exit-codes.md");
    let codes: Vec<u8> = table_rows(&page, "## Exit codes")
        .iter()
        .map(|row| {
            row[0]
                .parse()
                .unwrap_or_else(|e| panic!("exit code `{}`: {e}", row[0]))
        })
        .collect();
    let rows = table_rows(&page, "## Reason codes");
    let mut documented = Vec::new();
    for row in &rows {
        assert!(
            row.len() >= 3,
            "a reason row without its exit code: {row:?}"
        );
        let name = row[0].trim_matches('`');
        let reason = Reason::ALL
            .iter()
            .find(|r| r.as_str() == name)
            .unwrap_or_else(|| {
                panic!("docs/exit-codes.md lists `{name}`, which is no reason code")
            });
        let outcome = serde_json::to_value(reason.outcome()).expect("an outcome serializes");
        let outcome = outcome.as_str().expect("an outcome is a string");
        assert_eq!(
            row[1].trim_matches('`'),
            outcome,
            "docs/exit-codes.md: the outcome of `{name}`"
        );
        let code = ExitStatus::from(*reason).code();
        assert_eq!(
            row[2],
            code.to_string(),
            "docs/exit-codes.md: the exit code of `{name}`"
        );
        assert!(
            codes.contains(&code),
            "docs/exit-codes.md: exit code {code} (of `{name}`) is not in its table of exit codes"
        );
        assert!(
            !documented.contains(&name),
            "docs/exit-codes.md lists `{name}` twice"
        );
        documented.push(name);
    }
    for reason in Reason::ALL {
        assert!(
            documented.contains(&reason.as_str()),
            "docs/exit-codes.md does not list the reason code `{reason}`"
        );
    }
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to `-`, every
/// other character but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every relative link in README.md and the docs leads to a file that
/// exists, and a `#anchor` to a heading of that file: the reference was
/// split into pages, and a cross-reference must survive the next move.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = manifest_dir();
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").expect("regex");
    let mut checked = 0;
    for (page, text) in doc_pages() {
        let dir = Path::new(&page)
            .parent()
            .expect("a page's directory")
            .to_path_buf();
        let mut fence = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fence = !fence;
                continue;
            }
            if fence {
                continue;
            }
            for c in link.captures_iter(line) {
                let target = &c[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file = if path.is_empty() {
                    root.join(&page)
                } else {
                    root.join(&dir).join(path)
                };
                assert!(
                    file.exists(),
                    "{page}: the link `{target}` leads to {}, which does not exist",
                    file.display()
                );
                if !anchor.is_empty() {
                    let text = std::fs::read_to_string(&file)
                        .unwrap_or_else(|e| panic!("{page}: `{target}`: {e}"));
                    assert!(
                        anchors(&text).iter().any(|a| a == anchor),
                        "{page}: the link `{target}`: no heading with the anchor `#{anchor}` in {}",
                        file.display()
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
}

/// The image recipe cannot be built here (no registry for its base
/// images), so what it promises is checked from its text: the CLIs it pins
/// are the ones the tests run against, the Rust image meets `rust-version`,
/// every file it copies from the repository exists, and it ends as a
/// non-root user on the `BASE` a repository chooses.
#[test]
fn the_containerfile_pins_what_the_tests_pin_and_runs_as_non_root() {
    let root = manifest_dir();
    let recipe = std::fs::read_to_string(root.join("Containerfile")).expect("Containerfile");
    let install = std::fs::read_to_string(root.join("scripts/install-test-tools.sh"))
        .expect("install script");
    let pin = |text: &str, name: &str| -> String {
        text.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("ARG ")
                    .unwrap_or(l.trim())
                    .strip_prefix(&format!("{name}="))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("no {name}= in the text"))
    };
    for name in ["CLAUDE_CODE_VERSION", "CODEX_VERSION"] {
        assert_eq!(
            pin(&recipe, name),
            pin(&install, name),
            "{name}: the Containerfile and scripts/install-test-tools.sh pin different CLIs"
        );
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let needed = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"')
        .to_owned();
    let image = pin(&recipe, "RUST_IMAGE");
    let tag = image
        .strip_prefix("rust:")
        .and_then(|t| t.split('-').next())
        .expect("a rust:X.Y image");
    let v = |s: &str| -> (u64, u64) {
        let mut it = s.split('.').map(|p| p.parse::<u64>().expect("a number"));
        (it.next().expect("major"), it.next().unwrap_or(0))
    };
    assert!(
        v(tag) >= v(&needed),
        "{image} is older than rust-version {needed}"
    );
    for line in recipe
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        for src in &words[1..words.len() - 1] {
            assert!(
                root.join(src).exists(),
                "`{line}`: {src} is not in the repository"
            );
        }
    }
    assert!(
        recipe
            .lines()
            .any(|l| l.trim() == "FROM ${BASE} AS runtime"),
        "the runtime stage is built on the repository's BASE"
    );
    let user = recipe
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    let uid = user.split(':').next().expect("uid");
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u >= 1000),
        "the image runs as `{user}`: a numeric non-root uid (runAsNonRoot needs a number)"
    );
    let after_user = recipe
        .split(&format!("USER {user}"))
        .nth(1)
        .expect("after USER");
    assert!(
        !after_user
            .lines()
            .any(|l| l.starts_with("RUN ") || l.starts_with("FROM ")),
        "nothing runs as root after USER"
    );
}

/// Each file of the suite but `main.rs`, as (module, text): the module is
/// the file's stem.
fn suite_files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(manifest_dir().join("tests/it")).expect("tests/it") {
        let path = entry.expect("an entry").path();
        let module = path
            .file_stem()
            .expect("a stem")
            .to_string_lossy()
            .into_owned();
        if path.extension().is_none_or(|e| e != "rs") || module == "main" {
            continue;
        }
        out.push((module, std::fs::read_to_string(&path).expect("a test file")));
    }
    out
}

/// Each test function of the suite as (module, name, body): the body runs
/// to the next test or top-level function.
fn suite_tests() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (module, text) in suite_files() {
        // A test is its attribute's line up to the next test or top-level
        // `fn` after its own.
        let mut current: Option<(Option<String>, String)> = None;
        for line in text.split_inclusive('\n') {
            let attribute = line.trim() == "#[test]" || line.trim().starts_with("#[tokio::test");
            let named = current.as_ref().is_some_and(|(name, _)| name.is_some());
            if attribute || (line.starts_with("fn ") && named) || current.is_none() {
                if let Some((Some(name), body)) = current.take() {
                    out.push((module.clone(), name, body));
                }
                if !attribute {
                    continue;
                }
                current = Some((None, String::new()));
            }
            let (name, body) = current.as_mut().expect("inside a test");
            if name.is_none() {
                if let Some((_, rest)) = line.split_once("fn ") {
                    *name = rest.split_once('(').map(|(n, _)| n.trim().to_owned());
                }
            }
            body.push_str(line);
        }
        if let Some((Some(name), body)) = current {
            out.push((module.clone(), name, body));
        }
    }
    out
}

/// The "Counts" table of `tests/it/README.md`, computed from the suite:
/// the test functions by attribute and the rows by agent. `Err` holds the
/// table as it should read.
fn counts_match(
    readme: &str,
    rows: &std::collections::BTreeMap<(String, String), String>,
    tests: &[(String, String, String)],
) -> Result<(), String> {
    let tokio = tests
        .iter()
        .filter(|(_, _, body)| body.trim_start().starts_with("#[tokio::test"))
        .count();
    let by = |prefix: &str| rows.values().filter(|a| a.starts_with(prefix)).count();
    let want = format!(
        "| test fns ({} `#[test]` + {tokio} `#[tokio::test]`) | {} |\n\
         | drive the scripted agent (\"scripted\") | {} |\n\
         | start a real agent CLI (\"real CLI\") | {} |\n\
         | no agent (pure Rust, files, `check`/`report`/`status`, or stop before any session) | {} |\n",
        tests.len() - tokio,
        tests.len(),
        by("scripted"),
        by("real CLI"),
        by("none"),
    );
    let have: String = readme
        .split_once("### Counts")
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("| |") && !l.starts_with("|---"))
        .map(|l| format!("{l}\n"))
        .collect();
    if have == want {
        Ok(())
    } else {
        Err(want)
    }
}

/// The inventory in `tests/it/README.md` has a row for every test, and its
/// "agent" column is true where the source can tell: a test marked
/// `scripted` builds its job on the scripted agent (`TestEnv::scripted()`,
/// itself or through a helper of its file), and one marked `real CLI` does
/// not. A test moved between the two without its row is caught here.
/// Whether a function sets its job on the scripted agent: through
/// `TestEnv::scripted()`, or by writing `agent = "scripted"` into the
/// `loopd.toml` it makes (as the corpus does for its own repositories).
fn writes_scripted(body: &str) -> bool {
    body.contains("TestEnv::scripted()") || body.contains(r#"agent = \"scripted\""#)
}

#[test]
fn the_suite_inventory_names_each_test_with_the_agent_it_uses() {
    let readme = doc_page("tests/it/README.md");
    let mut rows = std::collections::BTreeMap::new();
    let mut module = String::new();
    for line in readme.lines() {
        if let Some(m) = line.strip_prefix("## ") {
            module = m.trim().to_owned();
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if !line.starts_with("| ") || cells.len() != 4 || cells[0] == "test" || cells[0] == "class"
        {
            continue;
        }
        let name = cells[0].split(' ').next().expect("a name").to_owned();
        rows.insert((module.clone(), name), cells[1].to_owned());
    }
    let tests = suite_tests();
    if let Err(table) = counts_match(&readme, &rows, &tests) {
        panic!("tests/it/README.md's counts are not the suite's; they are:\n{table}");
    }
    // Whether `body` calls `call` (`name(`), not a longer name ending so.
    let calls = |body: &str, call: &str| {
        body.match_indices(call).any(|(i, _)| {
            !body[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
        })
    };
    // Helpers that set a job up on the scripted agent, per file: those
    // that call `TestEnv::scripted()`, and those that call one of them.
    let mut helpers: Vec<(String, String)> = Vec::new();
    let mut functions: Vec<(String, String, String)> = Vec::new();
    // Modules whose helpers a file calls by name (`use crate::ci::*;`,
    // `use crate::attack40::{repo, run_repo};`).
    let mut globs: Vec<(String, String)> = Vec::new();
    for (module, text) in suite_files() {
        for line in text.lines() {
            if let Some((m, _)) = line
                .strip_prefix("use crate::")
                .and_then(|l| l.split_once("::"))
                .filter(|(m, rest)| {
                    *m != "support" && (rest.starts_with('*') || rest.starts_with('{'))
                })
            {
                globs.push((module.clone(), m.to_owned()));
            }
        }
        for chunk in text
            .split("\nfn ")
            .skip(1)
            .chain(text.split("\npub fn ").skip(1))
            .chain(text.split("\npub(crate) fn ").skip(1))
        {
            let chunk = chunk.split("\n#[").next().expect("a chunk");
            let name = chunk.split_once('(').map_or(chunk, |(n, _)| n);
            functions.push((module.clone(), format!("{name}("), chunk.to_owned()));
        }
    }
    loop {
        let before = helpers.len();
        for (module, call, body) in &functions {
            let known = helpers.iter().any(|(m, h)| m == module && h == call);
            let scripted = writes_scripted(body)
                || helpers.iter().any(|(m, h)| {
                    let in_scope =
                        m == module || globs.iter().any(|(g, of)| g == module && of == m);
                    (in_scope && calls(body, h)) || body.contains(&format!("crate::{m}::{h}"))
                });
            if scripted && !known {
                helpers.push((module.clone(), call.clone()));
            }
        }
        if helpers.len() == before {
            break;
        }
    }
    let mut wrong = Vec::new();
    for (module, name, body) in &tests {
        let Some(agent) = rows.remove(&(module.clone(), name.clone())) else {
            wrong.push(format!("{module}::{name} has no row"));
            continue;
        };
        let scripted = if body.contains("real_cli: true") {
            false
        } else {
            writes_scripted(body)
                || body.contains("real_cli: false")
                || helpers.iter().any(|(m, h)| {
                    (m == module && calls(body, h)) || body.contains(&format!("crate::{m}::{h}"))
                })
        };
        // A job that never starts a session may be set up either way.
        let fits = if agent.starts_with("scripted") {
            scripted
        } else {
            !(agent.starts_with("real CLI") && scripted)
        };
        if !fits {
            wrong.push(format!(
                "{module}::{name}: the row says `{agent}`, the source {}",
                if scripted {
                    "uses the scripted agent"
                } else {
                    "does not use the scripted agent"
                }
            ));
        }
    }
    for ((module, name), _) in rows {
        wrong.push(format!("{module}::{name} has a row but no test"));
    }
    assert!(
        wrong.is_empty(),
        "tests/it/README.md is out of date:\n{}",
        wrong.join("\n")
    );
}
