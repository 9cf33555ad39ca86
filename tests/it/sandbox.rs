//! The sandbox's network policy and the kernels without Landlock, against
//! the real CLI. (The filesystem attacks are in `attacks.rs`.)

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

/// Add `[sandbox]` lines to the fixture's `loopd.toml` and a goal step that
/// runs `probe` first; commit.
fn env_with(sandbox: &str, probe: Option<(&str, &str)>) -> TestEnv {
    let env = TestEnv::new();
    let mut cfg = std::fs::read_to_string(env.repo.join("loopd.toml")).expect("cfg");
    if let Some((file, script)) = probe {
        std::fs::write(env.repo.join(file), script).expect("probe");
        cfg = cfg.replacen(
            "[[goal]]",
            &format!("[[goal]]\nname = \"probe\"\nrun = \"python3 {file}\"\n\n[[goal]]"),
            1,
        );
    }
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!("{cfg}\n[sandbox]\n{sandbox}\n"),
    )
    .expect("cfg");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "sandbox settings for the test"]);
    env
}

/// Tries every way out it knows and prints `NET <what> allowed|denied`.
fn net_probe(port: u16) -> String {
    format!(
        r#"import os
import socket
import urllib.parse


def attempt(name, action):
    try:
        action()
        print("NET", name, "allowed")
    except OSError as e:
        print("NET", name, "denied", e.errno)


base = os.environ.get("ANTHROPIC_BASE_URL")
if base:
    gateway = urllib.parse.urlparse(base).port
    attempt("gateway", lambda: socket.create_connection(("127.0.0.1", gateway)).close())
attempt("other", lambda: socket.create_connection(("127.0.0.1", {port})).close())
attempt("other6", lambda: socket.create_connection(("::1", {port})).close())
attempt("bind", lambda: socket.socket().bind(("127.0.0.1", 0)))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})))
"#
    )
}

/// The probe's verdicts (`other denied 13`, ...) wherever they are printed.
fn probe_lines(out: &str) -> Vec<String> {
    out.split("NET ")
        .skip(1)
        .map(|rest| {
            // Each word up to the first character that is not part of it
            // (the request body's JSON follows the last one).
            let words: Vec<&str> = rest
                .split_whitespace()
                .take(3)
                .map(|w| {
                    w.split(|c: char| !c.is_ascii_alphanumeric())
                        .next()
                        .unwrap_or("")
                })
                .collect();
            let n = if words.get(1) == Some(&"denied") {
                3
            } else {
                2
            };
            words[..n.min(words.len())].join(" ")
        })
        .collect()
}

#[test]
fn gateway_only_lets_the_sessions_reach_the_model_and_nothing_else() {
    // A listener the sandboxed processes must not reach (v4 and v6, same port).
    let outside = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("listener");
    outside.set_nonblocking(true).expect("nonblocking");
    let port = outside.local_addr().expect("addr").port();
    let outside6 = std::net::TcpListener::bind(("::1", port)).ok();
    let env = env_with(
        "network = \"gateway-only\"",
        Some(("netprobe.py", &net_probe(port))),
    );
    let (model, r) = run_one_session(
        &env,
        vec![
            turn(vec![bash("python3 netprobe.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
        ],
    );
    // The agent and the critic worked through the gateway: accepted.
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["sandbox"], "landlock");
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run dir"));
    let goal_probe = std::fs::read_to_string(run_dir.join("baseline.txt")).expect("baseline");
    let agent_probe = model.session(Role::Agent, 0)[1].body.to_string();
    let agent_probe = agent_probe.replace("\\n", "\n");
    for (who, out) in [
        ("the agent's Bash", &agent_probe),
        ("the goal test", &goal_probe),
    ] {
        let lines = probe_lines(out);
        // The job's own network: a listener outside it is not there
        // (refused, 111; no IPv6 at all, 99); the job's processes may
        // listen and send on its loopback.
        let mut expected = vec!["other denied 111", "bind allowed", "udp allowed"];
        if outside6.is_some() {
            expected.push("other6 denied");
        }
        if who == "the agent's Bash" {
            // Sessions get the gateway's URL; goal steps do not.
            expected.push("gateway allowed");
        }
        for line in &expected {
            assert!(
                lines.iter().any(|l| l.starts_with(line)),
                "{who}: `{line}` in {lines:?}"
            );
        }
        assert!(
            lines.iter().all(|l| !l.contains("allowed")
                || ["gateway allowed", "bind allowed", "udp allowed"].contains(&l.as_str())),
            "{who}: {lines:?}"
        );
    }
    assert!(
        matches!(outside.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing reached the outside listener"
    );
    assert_eq!(s["network"], "gateway-only");
}

/// `gateway-only` needs the job's own network namespace (user namespaces)
/// and Landlock: refused, never silently open, where either is missing.
/// Unset, the network is the gateway's where it can be, and open (said
/// loudly) where it cannot.
#[test]
fn gateway_only_without_namespaces_or_landlock_is_refused_and_unset_falls_back_loudly() {
    let env = env_with("network = \"gateway-only\"", None);
    for (var, value, says) in [
        ("LOOPD_TEST_NO_USERNS", "1", "network namespace"),
        ("LOOPD_TEST_LANDLOCK_ABI", "0", "gateway-only"),
    ] {
        let model = ScriptedModel::start(scenario(
            vec![agent_writes(&clean_solution())],
            vec![pass()],
        ));
        let mut cmd = env.loopd(Some(&model));
        cmd.env(var, value)
            .args(["run", "--json", "--max-attempts", "1"]);
        let r = finish(cmd.output().expect("run loopd"));
        assert_eq!(r.code, 5, "{var}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{var}: {}", r.stderr);
        assert_eq!(model.session_count(Role::Agent), 0, "no agent ran");
    }
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let r = finish(
        env.loopd(Some(&model))
            .env("LOOPD_TEST_NO_USERNS", "1")
            .args(["run", "--json", "--max-attempts", "1"])
            .output()
            .expect("run loopd"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("NETWORK OPEN"), "{}", r.stderr);
    assert_eq!(r.summary()["network"], "open");
}

#[test]
fn without_landlock_loopd_says_so_and_require_sandbox_refuses() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let mut cmd = env.loopd(Some(&model));
    cmd.env("LOOPD_TEST_LANDLOCK_ABI", "0").args([
        "run",
        "--json",
        "--max-attempts",
        "1",
        "--require-sandbox",
    ]);
    let r = finish(cmd.output().expect("run loopd"));
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(r.stderr.contains("a sandbox is required"), "{}", r.stderr);
    assert!(r.stderr.contains("--require-sandbox"), "{}", r.stderr);
    assert_eq!(model.session_count(Role::Agent), 0, "no agent ran");
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "the tree is untouched"
    );

    // Without `--require-sandbox` the job runs, unconfined, and says so.
    let mut cmd = env.loopd(Some(&model));
    cmd.env("LOOPD_TEST_LANDLOCK_ABI", "0")
        .args(["run", "--json", "--max-attempts", "1"]);
    let r = finish(cmd.output().expect("run loopd"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("NO SANDBOX"), "{}", r.stderr);
    assert_eq!(r.summary()["sandbox"], "unsupported");
}

#[test]
fn check_shows_the_network_policy_and_names_a_bad_value() {
    let env = env_with("network = \"gateway-only\"", None);
    let r = env.exec(&["check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("network: the gateway only (required)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("the sandbox may read"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("{}  (the worktree)", env.repo.display())),
        "{}",
        r.stdout
    );
    // loopd itself is read as its one file, never its directory (a
    // downloaded `~/loopd` made the whole HOME readable).
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_loopd"))
        .canonicalize()
        .expect("loopd");
    let dir = exe
        .parent()
        .expect("loopd's directory")
        .display()
        .to_string();
    assert!(
        r.stdout.contains(&format!("{}  (loopd", exe.display())),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{dir}  ("))),
        "loopd's directory is readable: {}",
        r.stdout
    );
    for (sandbox, says) in [
        ("network = \"closed\"", "`open` or `gateway-only`"),
        (
            "enabled = false\nnetwork = \"gateway-only\"",
            "only the sandbox can confine the network",
        ),
    ] {
        let env = env_with(sandbox, None);
        let r = env.exec(&["check"]);
        assert_eq!(r.code, 2, "{sandbox}: {}", r.stderr);
        assert!(
            r.stderr.contains("sandbox.network") && r.stderr.contains(says),
            "{sandbox}: {}",
            r.stderr
        );
    }
}

/// Found by the attack on the boundary: an unprivileged loopd never got its
/// namespaces. It makes itself non-dumpable first thing, and a
/// non-dumpable process (and a child forked from it) may not write its own
/// `uid_map` after `unshare` — so the recommended deployment, loopd as an
/// ordinary user, always ran with the network open and `.git/` writable.
/// Now a fresh exec of loopd, holding no secret, makes them: as `nobody`,
/// the job is `gateway-only` and its goal step cannot write `.git/`.
#[test]
fn an_unprivileged_loopd_gets_its_private_network_and_a_read_only_git_dir() {
    let env = TestEnv::new();
    let copy = NobodyCopy::of(&env);
    let (repo, state) = (&copy.repo, &copy.state);
    let nobody = |program: &str| copy.command(program);
    // The control: this machine gives an unprivileged user a namespace.
    let control = nobody("unshare")
        .args(["--user", "--map-root-user", "--net", "true"])
        .output()
        .expect("unshare");
    assert!(
        control.status.success(),
        "unprivileged user namespaces are off here: {control:?}"
    );
    // Green at the baseline only where `.git/` is read-only to the job.
    let out = nobody(env!("CARGO_BIN_EXE_loopd"))
        .args(["run", "--json", "-C"])
        .arg(repo)
        .arg("--state-dir")
        .arg(state)
        .args([
            "--task",
            "nothing",
            "--goal",
            "sh -c '! touch .git/loopd-probe 2>/dev/null'",
        ])
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .output()
        .expect("loopd as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(summary["network"], "gateway-only", "{stderr}");
    assert_eq!(summary["sandbox"], "landlock", "{stderr}");
    assert_eq!(summary["reason"], "already_green", "{summary:#}\n{stderr}");
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(!repo.join(".git/loopd-probe").exists());
    assert!(!stderr.contains("NETWORK OPEN"), "{stderr}");
}
