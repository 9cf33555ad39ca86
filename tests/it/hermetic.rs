//! The judge runs in a world the agent did not shape (issue 39): each of
//! the fifteen findings on `7056f70` is attacked here the way it broke —
//! an agent with Bash, a critic that always answers PASS, so that only the
//! mechanical layers stand. Each test names its finding.

use crate::support::model::ScriptedModel;
use crate::support::*;

/// Finding 6: the environment is an allow-list for every process of a job.
/// Cloud and registry tokens, a forge token and a session's socket paths
/// in loopd's environment reach neither the agent's Bash nor a goal step
/// (nor, through them, the model or the run directory); a variable the
/// lead names with `--env` does, and `loopd check` lists the environment.
#[test]
fn issue39_6_the_environment_is_an_allow_list() {
    let env = TestEnv::scripted();
    env.append_config(
        "[[goal]]\nname = \"env\"\nrun = \"env | sort\"\n",
        "a goal step that shows its environment",
    );
    let secrets = [
        ("AWS_SECRET_ACCESS_KEY", unique_secret("aws")),
        ("NPM_TOKEN", unique_secret("npm")),
        ("LOOPD_GITHUB_TOKEN", unique_secret("forge")),
        ("GH_TOKEN", unique_secret("gh")),
        ("SSH_AUTH_SOCK", unique_secret("ssh-sock")),
        ("DBUS_SESSION_BUS_ADDRESS", unique_secret("dbus")),
        ("PYTHONPATH", unique_secret("pythonpath")),
    ];
    let named = unique_secret("named");
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash(
                "env | sort; cat /proc/self/environ /proc/$PPID/environ | tr '\\0' '\\n'; echo MARK-$((40+2))-env",
            )]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let mut cmd = env.loopd(Some(&model));
    for (k, v) in &secrets {
        cmd.env(k, v);
    }
    cmd.env("DATABASE_URL", &named);
    let out = cmd
        .args(["run", "--json", "--env", "DATABASE_URL"])
        .args(one_attempt(&["--allow-green"]))
        .output()
        .expect("run");
    let r = finish(out);
    let bodies = all_bodies(&model);
    assert!(
        bodies.contains("MARK-42-env"),
        "the attack ran: {}",
        r.stderr
    );
    // The named variable reached the agent's Bash, and the goal step (its
    // output is the baseline the critic reads).
    assert!(
        bodies.matches(named.as_str()).count() >= 2,
        "`--env DATABASE_URL` reaches the agent and the goal steps: {bodies}"
    );
    let values: Vec<&str> = secrets.iter().map(|(_, v)| v.as_str()).collect();
    for v in &values {
        assert!(!bodies.contains(v), "`{v}` reached a job's process");
    }
    env.assert_no_secret_in_state(&values);

    // `loopd check` lists what a job's processes get, and a credential is
    // refused as a name.
    let check = env.exec(&["check", "--env", "DATABASE_URL"]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert_contains_all(
        &check.stdout,
        &["environment:", "PATH", "DATABASE_URL", "HOME"],
        "loopd check",
    );
    let refused = env.exec(&["check", "--env", "ANTHROPIC_API_KEY"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--env") && refused.stderr.contains("credential"),
        "{}",
        refused.stderr
    );
}

/// Finding 7: a held-out path answers no `stat` from the agent — not its
/// names, sizes or times, nor a listing of the directory that holds it
/// (which the sandbox may read): it does not exist in the job's root.
#[test]
fn issue39_7_held_out_paths_answer_no_stat() {
    let (env, dir) = crate::held_out::held_out_env(None);
    let shared = dir.parent().expect("parent").to_path_buf();
    std::fs::write(shared.join("visible.txt"), "VISIBLECONTROL\n").expect("control");
    env.append_config(
        &format!("[sandbox]\nread = [\"{}\"]\n", shared.display()),
        "the shared directory is readable",
    );
    let file = dir.join("tests_hidden/test_hidden.py");
    let probe = format!(
        r#"
import os
for p in ["{d}", "{f}", "{d}/tests_hidden"]:
    try:
        st = os.stat(p)
        print("ANSWERED", p, st.st_size, int(st.st_mtime))
    except OSError as e:
        print("NOSTAT", p, e.errno)
try:
    print("LISTING", sorted(os.listdir("{s}")))
except OSError as e:
    print("LISTING denied", e.errno)
print("VISIBLE", open("{s}/visible.txt").read().strip())
"#,
        d = dir.display(),
        f = file.display(),
        s = shared.display(),
    );
    let (model, r) = run_one_session(
        &env,
        vec![turn(vec![bash(&format!(
            "cat > \"$TMPDIR/p.py\" <<'EOF'\n{probe}\nEOF\npython3 \"$TMPDIR/p.py\"; stat {f}; echo PROBE-$((1+1))",
            f = file.display()
        ))])],
    );
    assert_eq!(r.summary()["sandbox"], "landlock", "{}", r.stderr);
    let bodies = all_bodies(&model);
    assert!(bodies.contains("PROBE-2"), "the probe ran: {}", r.stderr);
    assert!(
        bodies.contains("VISIBLE VISIBLECONTROL"),
        "the readable parent is readable"
    );
    assert!(
        !bodies.contains("ANSWERED /"),
        "a held-out path answered stat"
    );
    assert!(bodies.contains("NOSTAT"), "the probe asked");
    let listing = bodies
        .split("LISTING ")
        .nth(1)
        .and_then(|l| l.split("\\n").next())
        .unwrap_or_default();
    // The parent the plan carves around the hole is only a way through
    // (listing it is denied); if it were listed, the hole is not named.
    assert!(
        !listing.is_empty() && !listing.contains("held-out"),
        "the listing of the readable parent names the held-out directory: {listing}"
    );
    assert!(!bodies.contains(crate::held_out::MARKER));
}

/// Finding 6, sockets: no process of a job — the agent's Bash, a goal
/// step — connects to a Unix socket it did not create: a pathname socket
/// of the user's session (in the real `HOME`, named by an inherited
/// variable or guessed) or an abstract one. With user namespaces the
/// socket is not in the job's root; without them (`LOOPD_TEST_NO_USERNS`)
/// no Unix socket can be made at all.
#[test]
fn issue39_6b_no_unix_socket_outside_the_job() {
    use std::os::linux::net::SocketAddrExt;
    for no_userns in [false, true] {
        let env = TestEnv::scripted();
        std::fs::create_dir_all(env.home.join(".ssh")).expect("dir");
        let path = env.home.join(".ssh/agent.sock");
        let named = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        named.set_nonblocking(true).expect("nonblocking");
        let abstract_name = format!("loopd-test-{}-{no_userns}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("abstract");
        let hidden = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind abstract");
        hidden.set_nonblocking(true).expect("nonblocking");
        let probe = format!(
            r#"import os
import socket


def tryit(name, addr):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(addr)
        print("SOCK", name, "allowed")
    except OSError as e:
        print("SOCK", name, "denied", e.errno)


tryit("path", "{p}")
tryit("env", os.environ.get("SSH_AUTH_SOCK", "/nonexistent"))
tryit("abstract", "\0{a}")
print("PROBED-" + str(40 + 2))
"#,
            p = path.display(),
            a = abstract_name,
        );
        std::fs::write(env.repo.join("sock_probe.py"), &probe).expect("probe");
        env.git(&["add", "sock_probe.py"]);
        env.append_config(
            "[[goal]]\nname = \"sock\"\nrun = \"python3 sock_probe.py\"\n",
            "a goal step that tries the session's sockets",
        );
        let model = ScriptedModel::start(scenario(
            vec![session(vec![
                turn(vec![bash("python3 sock_probe.py")]),
                turn(vec![text("Done.")]),
            ])],
            vec![pass()],
        ));
        let mut cmd = env.loopd(Some(&model));
        cmd.env("SSH_AUTH_SOCK", &path);
        if no_userns {
            cmd.env("LOOPD_TEST_NO_USERNS", "1");
        }
        let r = finish(
            cmd.args(["run", "--json"])
                .args(one_attempt(&["--allow-green"]))
                .output()
                .expect("run"),
        );
        let bodies = all_bodies(&model);
        // The agent's Bash (its output went to the model) and the goal
        // step (its output is the baseline in the run directory).
        let baseline: String = env
            .state_files()
            .into_iter()
            .filter(|(p, _)| p.ends_with("baseline.txt"))
            .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
            .collect();
        for (what, text) in [("the agent's Bash", &bodies), ("the goal step", &baseline)] {
            assert!(
                text.contains("PROBED-42"),
                "{what} probed (no_userns {no_userns}): {}",
                r.stderr
            );
            for name in ["path", "env", "abstract"] {
                assert!(
                    !text.contains(&format!("SOCK {name} allowed")),
                    "{what} connected to the session's {name} socket (no_userns {no_userns})"
                );
                assert!(
                    text.contains(&format!("SOCK {name} denied")),
                    "{what} tried the {name} socket (no_userns {no_userns})"
                );
            }
        }
        assert!(named.accept().is_err(), "the named socket was reached");
        assert!(hidden.accept().is_err(), "the abstract socket was reached");
    }
}

/// A small JavaScript repository judged by `npm test` (node's runner):
/// `add` subtracts, its one test is red.
fn js_env() -> TestEnv {
    let src = tempfile::tempdir().expect("tmp");
    let d = src.path();
    std::fs::create_dir_all(d.join("test")).expect("dir");
    for (path, text) in [
        (
            "package.json",
            r#"{"name": "calc", "version": "1.0.0", "private": true, "scripts": {"test": "node --test"}}"#,
        ),
        ("calc.js", "exports.add = (a, b) => a - b;\n"),
        (
            "test/calc.test.js",
            "const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('../calc');\n\ntest('adds', () => assert.strictEqual(add(2, 3), 5));\n",
        ),
        ("README.md", "calc\n"),
        (
            "loopd.toml",
            "agent = \"scripted\"\ncritic_agent = \"scripted\"\ntask = \"Make npm test pass.\"\nmax_attempts = 1\n\n[[goal]]\nname = \"test\"\nrun = \"npm test\"\n\n[examiner]\nmode = \"off\"\n",
        ),
    ] {
        std::fs::write(d.join(path), text).expect("write");
    }
    TestEnv::from_dir(d)
}

/// Finding 1: the judge's `HOME` is not the agent's. The agent writes an
/// npm configuration and a module into its own `HOME` — no file of the
/// change — that give node an option which turns every red test run
/// green; the goal run, in a fresh `HOME`, never reads them: the bug stays
/// red, with a critic that always answers PASS. (Accepted on `7056f70`.)
#[test]
fn issue39_1_what_the_agent_writes_into_its_home_never_reaches_the_judge() {
    let env = js_env();
    // (The name is put together at run time: the hook, a courtesy, would
    // deny a write to anything named `.npmrc`.)
    let plant =
        "n=.np; n=${n}mrc; printf 'node-options=--require=%s/fix.js\\n' \"$HOME\" > \"$HOME/$n\"; \
         echo \"process.on('exit', () => { process.exitCode = 0; });\" > \"$HOME/fix.js\"; \
         echo 'A calculator.' >> README.md; npm test >/dev/null 2>&1; echo PLANTED-$?";
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash(plant)]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&[]));
    let s = r.summary();
    // The plant works where it was made: the agent's own `npm test` is green.
    assert!(
        all_bodies(&model).contains("PLANTED-0"),
        "the agent's plant turned its own run green: {}",
        r.stderr
    );
    assert_eq!(s["judge"], "hermetic", "{}", r.stderr);
    assert_ne!(s["outcome"], "accepted", "{}", r.stderr);
    assert_eq!(s["attempts"][0]["goal_passed"], false, "{}", s["attempts"]);
}

/// Finding 11: the tests that existed at BASE_REF run alone. New test
/// code — here a package `__init__.py` among the tests that rebinds the
/// functions of the code under test through the module's `__setattr__`,
/// a spelling no rule reads — never runs beside them: the old tests are
/// red on the change without it, and the attempt is rejected by the goal
/// test, not by a rule. (Accepted on `7056f70`.)
#[test]
fn issue39_11_the_old_tests_run_alone() {
    let env = TestEnv::scripted();
    let patch = format!(
        "\"\"\"Shared test setup.\"\"\"\nimport rechnung as _target\n{}\n\nfor _name in (\"line_total\", \"net_total\", \"gross_total\", \"apply_discount\"):\n    _target.__setattr__(_name, globals()[_name])\n",
        clean_solution()
            .replace("\"\"\"Invoices: line totals, VAT and discounts. Money is Decimal, never float.\"\"\"\n", "")
    );
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![write("tests/__init__.py", &patch)]),
            turn(vec![bash(
                "python3 -m pytest -q >/dev/null 2>&1; echo PATCHED-$?",
            )]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&[]));
    assert!(
        all_bodies(&model).contains("PATCHED-0"),
        "the patch turns the tests green where the agent runs them: {}",
        r.stderr
    );
    let s = r.summary();
    assert_eq!(s["judge"], "hermetic", "{}", r.stderr);
    assert_ne!(s["outcome"], "accepted", "{}", r.stderr);
    let attempt = &s["attempts"][0];
    assert_eq!(attempt["goal_passed"], false, "{attempt}");
    let alone = journal(&s)
        .into_iter()
        .find_map(|e| match e {
            loopd::journal::Event::GoalRun { alone, .. } => alone,
            _ => None,
        })
        .expect("the old tests ran alone");
    assert!(!alone.passed());
    assert!(
        alone
            .render()
            .contains("without the test code it adds (tests/__init__.py;"),
        "{}",
        alone.render()
    );
}

/// Finding 12, as an ordinary user (root reads through any mode): the
/// agent plants the fixed code as a cached `.pyc` beside the buggy source
/// and makes that cache, and an untracked directory of its own,
/// unlistable. Nothing is silently skipped: each is a finding
/// (`unreadable_path`), the planted bytecode never reaches the judge, and
/// the work — the unlistable directory's file included — is parked.
#[test]
fn issue39_12_an_unreadable_directory_is_a_finding_and_the_work_is_still_parked() {
    let env = TestEnv::scripted();
    let copy = NobodyCopy::of(&env);
    let repo = &copy.repo;
    let fixed = clean_solution();
    let plant = format!(
        "cat > \"$TMPDIR/fixed.py\" <<'LOOPD_EOF'\n{fixed}\nLOOPD_EOF\n\
         cp \"$TMPDIR/fixed.py\" rechnung.py && \
         python3 -c \"import importlib.util, py_compile; py_compile.compile('rechnung.py', cfile=importlib.util.cache_from_source('rechnung.py'), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\" && \
         git show HEAD:rechnung.py | grep -v '^import os$' > rechnung.py && \
         mkdir -p notes && echo kept > notes/todo.txt && chmod 0300 notes __pycache__ && \
         python3 -m pytest -q 2>&1 | tail -1; echo PLANTED"
    );
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash(&plant)]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let out = copy
        .command(loopd_bin())
        .args(["run", "--json", "-C"])
        .arg(repo)
        .arg("--state-dir")
        .arg(&copy.state)
        .args(one_attempt(&[]))
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ANTHROPIC_BASE_URL", model.base_url())
        .output()
        .expect("loopd as nobody");
    let r = finish(out);
    assert!(
        all_bodies(&model).contains("PLANTED"),
        "the plant ran: {}",
        r.stderr
    );
    let s = r.summary();
    assert_ne!(s["outcome"], "accepted", "{}", r.stderr);
    assert_eq!(
        s["reason"], "unreadable_path",
        "{}\n{}",
        s["attempts"], r.stderr
    );
    let findings = s["attempts"][0]["gate_findings"].to_string();
    for path in ["notes", "__pycache__"] {
        assert!(
            findings.contains(&format!("`{path}` was made unreadable")),
            "{path}: {findings}"
        );
    }
    // Parked, the unlistable directory's file with it.
    let stash = s["stash_commit"].as_str().expect("the work is parked");
    let kept = std::process::Command::new("git")
        .current_dir(repo)
        .args([
            "-c",
            "safe.directory=*",
            "show",
            &format!("{stash}^3:notes/todo.txt"),
        ])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git show");
    assert_eq!(String::from_utf8_lossy(&kept.stdout), "kept\n", "{kept:?}");
}

/// A path a registry glob matches (`**/` at the root, `*` as `x`).
fn concrete(glob: &str) -> String {
    glob.replace("**/", "")
        .replace("/**", "/x")
        .replace('*', "x")
}

/// Done means, for every registered runner: the agent writes each file of
/// its registry entry into the fixture repository, and the judged run
/// refuses every one of them (`protected_path`, at the tool call or on the
/// diff), with a critic that always answers PASS. One job per runner.
#[test]
fn issue39_10_every_file_of_every_registered_runner_is_refused() {
    for runner in loopd::runner::REGISTRY {
        let env = TestEnv::scripted();
        let paths: Vec<String> = runner.files.iter().map(|g| concrete(g)).collect();
        // Through a script the hook cannot read (it is a courtesy; the
        // diff gate is the guarantee).
        let script: String = paths
            .iter()
            .map(|p| {
                let q = format!("'{p}'");
                format!("mkdir -p \"$(dirname {q})\" && echo '# written by the agent' > {q}\n")
            })
            .collect();
        let model = ScriptedModel::start(scenario(
            vec![session(vec![
                turn(vec![write("plant.txt", &script)]),
                turn(vec![bash("sh plant.txt && rm plant.txt && echo PLANTED")]),
                turn(vec![write("rechnung.py", &clean_solution())]),
                turn(vec![text("Done.")]),
            ])],
            vec![pass()],
        ));
        let r = env.run(&model, &one_attempt(&[]));
        assert!(
            all_bodies(&model).contains("PLANTED"),
            "{}: {}",
            runner.name,
            r.stderr
        );
        let s = r.summary();
        assert_ne!(s["outcome"], "accepted", "{}: {}", runner.name, r.stderr);
        let findings = &s["attempts"][0]["gate_findings"];
        for p in &paths {
            let refused = findings.as_array().into_iter().flatten().any(|f| {
                f.as_str().is_some_and(|f| {
                    (f.starts_with(&format!("{p}:")) || f.starts_with(&format!("{p} (")))
                        && f.contains("(gate protected_path)")
                })
            });
            assert!(
                refused,
                "{}: `{p}` was not refused: {findings}",
                runner.name
            );
        }
    }
}

/// Done means, the variables: the agent sets every variable of every
/// registered runner where a shell or a tool would pick it up — its
/// environment, `~/.profile`, `~/.bashrc`, a `.envrc` — and so does
/// loopd's own environment; no goal step sees one (the judge's environment
/// is an allow-list, its `HOME` fresh), but where the toolchains live.
/// (On `7056f70` loopd's `PYTHONPATH`, `NODE_OPTIONS`, … reached it.)
#[test]
fn issue39_10_no_variable_of_a_registered_runner_reaches_the_goal() {
    let env = TestEnv::scripted();
    env.append_config(
        "[[goal]]\nname = \"env\"\nrun = \"env | sort\"\n",
        "a goal step that shows its environment",
    );
    let vars: std::collections::BTreeSet<&str> = loopd::runner::REGISTRY
        .iter()
        .flat_map(|r| r.vars.iter().copied())
        .collect();
    let exports: String = vars
        .iter()
        .map(|v| format!("export {v}=planted-{v}\n"))
        .collect();
    let plant = format!(
        "cat > \"$HOME/.profile\" <<'X'\n{exports}X\ncp \"$HOME/.profile\" \"$HOME/.bashrc\"; cp \"$HOME/.profile\" .envrc; echo PLANTED"
    );
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash(&plant)]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    // And in loopd's own environment, which a lead did not name: none but
    // where the toolchains live (passed by design) reaches a goal step.
    let mut cmd = env.loopd(Some(&model));
    for v in vars
        .iter()
        .filter(|v| !loopd::sandbox::env::TOOLCHAIN_VARS.contains(v))
    {
        cmd.env(v, format!("planted-{v}"));
    }
    let r = finish(
        cmd.args(["run", "--json"])
            .args(one_attempt(&[]))
            .output()
            .expect("run"),
    );
    assert!(all_bodies(&model).contains("PLANTED"), "{}", r.stderr);
    let s = r.summary();
    let goal = journal(&s)
        .into_iter()
        .find_map(|e| match e {
            loopd::journal::Event::GoalRun { report, .. } => Some(report),
            _ => None,
        })
        .expect("the goal ran");
    let out = goal.render();
    assert!(out.contains("PATH="), "the env step ran: {out}");
    for v in &vars {
        assert!(
            !out.contains(&format!("planted-{v}")),
            "`{v}` reached a goal step: {out}"
        );
    }
}

/// Finding 3, beyond the registry's names: a module at the top of the
/// tree named like one the runner imports before it collects (`argparse`,
/// which pytest loads for its command line) ends the run green before a
/// test runs. The probe sees pytest's import resolve into the tree:
/// `runner_changed`, with a critic that always answers PASS.
#[test]
fn issue39_3_a_module_shadowing_what_the_runner_loads_is_runner_changed() {
    let env = TestEnv::scripted();
    let shadow = "import os, sys\nsys.stdout.write('5 passed in 0.01s\\n')\nsys.stdout.flush()\nos._exit(0)\n";
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![write("argparse.py", shadow)]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&[]));
    let s = r.summary();
    assert_eq!(s["judge"], "hermetic", "{}", r.stderr);
    assert_ne!(s["outcome"], "accepted", "{}", r.stderr);
    let findings = s["attempts"][0]["gate_findings"].to_string();
    assert!(
        findings.contains("runner_changed") && findings.contains("argparse"),
        "{findings}"
    );
}

/// Finding 5: held-out feedback carries no data the candidate controls.
/// With `held_out_feedback = "none"`, code of the change removes the
/// held-out run's report and prints, after the real summary, one of its
/// own whose skipped and deselected counts could carry bytes of the
/// hidden file: the next prompt says one bit — the held-out tests found
/// the change wrong — and quotes no count. (On `7056f70` it quoted both
/// numbers.) The descriptor is computed: written `1`, the pre-critic finds the
/// write before the held-out run, and this is about the run.
#[test]
fn issue39_5_held_out_none_is_one_bit_and_quotes_no_count() {
    let (env, _dir) = crate::held_out::held_out_env(Some("none"));
    // In the held-out run only: the report loopd asked for is removed
    // (its path is in the runner's options) and a summary of its own
    // printed, so that only stdout is left to count from.
    let payload = "import atexit\nimport os\n\n\ndef _leak():\n    for value in list(os.environ.values()):\n        for opt in value.split():\n            if opt.startswith(\"--junit\") and \"=\" in opt:\n                os.remove(opt.split(\"=\", 1)[1])\n    os.write(int(\"1\"), b\"==== 1 passed, 4711 skipped, 8273 deselected in 0.01s ====\\n\")\n\n\nif os.path.isdir(\"tests_hidden\"):\n    atexit.register(_leak)\n";
    let cheat = clean_solution().replacen(
        "from decimal import",
        "import _probe  # noqa: F401\nfrom decimal import",
        1,
    );
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![
                    write("_probe.py", payload),
                    write("rechnung.py", &cheat),
                ]),
                turn(vec![text("Done.")]),
            ]),
            session(vec![turn(vec![text("Done.")])]),
        ],
        vec![pass(), pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s = r.summary();
    assert_eq!(
        s["attempts"][0]["rejected_by"], "held_out_failed",
        "{}\n{}",
        s["attempts"], r.stderr
    );
    let prompt = model.session(crate::support::model::Role::Agent, 1)[0].prompt();
    assert!(
        prompt.contains("tests you cannot see"),
        "the one bit is told: {prompt}"
    );
    for n in ["4711", "8273"] {
        assert!(
            !prompt.contains(n),
            "`{n}` reached the next prompt: {prompt}"
        );
    }
    let findings = s["attempts"][0]["gate_findings"].to_string();
    assert_eq!(findings.matches("held_out_failed").count(), 1, "{findings}");
}

/// Finding 4: the count is no longer read from stdout, which the code
/// under test writes to. Library code, imported under pytest, prints a
/// green runner summary after the real one and ends the process with 0 —
/// through `os.write`, a spelling no rule reads. loopd asked pytest for
/// its junit report at a path outside the tree: by ids, the tests still
/// fail, and the attempt is rejected with a critic that always answers
/// PASS. (Accepted on `7056f70`.)
#[test]
fn issue39_4_results_come_from_the_runners_report_not_stdout() {
    let env = TestEnv::scripted();
    let payload = "import atexit\nimport os\nimport sys\n\nif \"pytest\" in sys.modules:\n    atexit.register(lambda: (os.write(1, b\"============ 14 passed in 0.02s ============\\n\"), os._exit(0)))\n";
    // Lint-clean, with a bug the visible tests see: only the tests are red.
    let buggy = clean_solution().replace(
        "    return quantity * unit_price",
        "    return quantity + unit_price",
    );
    assert_ne!(buggy, clean_solution(), "the bug went in");
    let cheat = buggy.replacen(
        "from decimal import",
        "import _probe  # noqa: F401\nfrom decimal import",
        1,
    );
    assert_ne!(cheat, buggy, "the import went in");
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![
                write("_probe.py", payload),
                write("rechnung.py", &cheat),
            ]),
            turn(vec![bash(
                "python3 -m pytest -q >/dev/null 2>&1; echo FORGED-$?",
            )]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&[]));
    assert!(
        all_bodies(&model).contains("FORGED-0"),
        "the forged exit works where the agent runs it: {}",
        r.stderr
    );
    let s = r.summary();
    assert_ne!(s["outcome"], "accepted", "{}", r.stderr);
    let findings = s["attempts"][0]["gate_findings"].to_string();
    assert!(
        findings.contains("in its report") && findings.contains("test_"),
        "{findings}\n{}",
        r.stderr
    );
    // The baseline's report was read by ids.
    let baseline = journal(&s)
        .into_iter()
        .find_map(|e| match e {
            loopd::journal::Event::Baseline { report, .. } => Some(report),
            _ => None,
        })
        .expect("a baseline");
    assert!(
        baseline.steps[0]
            .results
            .as_ref()
            .is_some_and(|r| !r.is_empty()),
        "pytest's junit report was read at the baseline"
    );
}

/// A mutation guard (issue 39, "done means"): the sandbox's list of secret
/// files under `/etc` is what keeps the password hashes and the host's SSH
/// configuration from the agent's Bash and a goal step. Emptying
/// `ETC_SECRETS` left the suite green on `7056f70`; here, whatever of them
/// this process can read, no process of the job reads (the check is
/// meaningful where the suite runs as root, as CI does; elsewhere the
/// files are unreadable to everyone involved).
#[test]
fn the_secret_files_under_etc_are_read_by_no_process_of_a_job() {
    let env = TestEnv::scripted();
    env.append_config(
        "[[goal]]\nname = \"etc\"\nrun = \"cat /etc/shadow /etc/gshadow; cat /etc/ssh/* 2>&1; true\"\n",
        "a goal step that reads the secret files",
    );
    let secrets: Vec<String> = ["/etc/shadow", "/etc/gshadow", "/etc/ssh/ssh_config"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| {
            t.lines()
                .find(|l| l.len() > 12 && !l.trim_start().starts_with('#'))
                .map(str::to_owned)
        })
        .collect();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash(
                "cat /etc/shadow /etc/gshadow /etc/ssh/ssh_config 2>&1; ls -la /etc/ssh 2>&1; echo READ-ATTEMPTED",
            )]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&["--allow-green"]));
    let bodies = all_bodies(&model);
    assert!(bodies.contains("READ-ATTEMPTED"), "{}", r.stderr);
    let refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
    for s in &refs {
        assert!(!bodies.contains(s), "`{s}` reached the agent");
    }
    env.assert_no_secret_in_state(&refs);
}

/// The blind attack's A4: a `cmd.py` at the top of the tree re-exports the
/// standard library's `cmd` and patches pytest's test call to swallow
/// assertion errors, names built from pieces. pdb imports `cmd` during the
/// run, not during `import pytest`: the probe sees every module of the
/// standard library and the installed distributions resolve from the
/// goal's directory, so the shadow is `runner_changed`, with a critic that
/// always answers PASS. (Accepted before the probe looked past `import
/// pytest`.)
#[test]
fn a_module_shadowing_one_the_run_imports_later_is_runner_changed() {
    let env = TestEnv::scripted();
    let shadow = r#""""Line-oriented command interpreters (the standard library's)."""
import importlib
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "_cmd_std", os.path.join(os.path.dirname(os.__file__), "cmd.py")
)
_std = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_std)
Cmd = _std.Cmd
IDENTCHARS = _std.IDENTCHARS
PROMPT = _std.PROMPT
__all__ = ["Cmd"]


def _quiet(fn):
    def run(self):
        try:
            fn(self)
        except AssertionError:
            return None

    return run


def _settle():
    try:
        mod = importlib.import_module("_py" + "test.python")
    except ImportError:
        return
    kind = getattr(mod, "Func" + "tion")
    setattr(kind, "run" + "test", _quiet(getattr(kind, "run" + "test")))


_settle()
"#;
    let buggy = clean_solution().replace(
        "    return quantity * unit_price",
        "    return quantity + unit_price",
    );
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![write("rechnung.py", &buggy), write("cmd.py", shadow)]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &one_attempt(&[]));
    let s = r.summary();
    assert_ne!(s["outcome"], "accepted", "{}", r.stderr);
    let findings = s["attempts"][0]["gate_findings"].to_string();
    assert!(
        findings.contains("runner_changed") && findings.contains("cmd.py"),
        "{findings}"
    );
}

/// The blind attack's A11: under `none`, the candidate's code in the
/// held-out run writes over a test or `pyproject.toml`, chosen by a byte
/// of the hidden file. The next prompt says the one bit and nothing of
/// how or how many.
#[test]
fn a_held_out_run_that_writes_over_its_tree_tells_one_bit_under_none() {
    let (env, _dir) = crate::held_out::held_out_env(Some("none"));
    let payload = "\n\ndef _mark():\n    for root, _dirs, files in os.walk(\".\"):\n        if \"hidden\" not in root:\n            continue\n        for name in files:\n            with open(os.path.join(root, name), encoding=\"utf-8\", errors=\"replace\") as f:\n                body = f.read()\n            if body[2:3] == \"H\":\n                target = os.path.join(\"te\" + \"sts\", \"te\" + \"st_rechnung.py\")\n            else:\n                target = \"pyproject.toml\"\n            with open(target, \"a\") as f:\n                f.write(\"\\n\")\n            return\n\n\n_mark()\n";
    let rech = format!(
        "{}{payload}",
        clean_solution()
            .replace("ROUND_HALF_UP", "ROUND_DOWN")
            .replace(
                "from decimal import ROUND_DOWN, Decimal",
                "import os\nfrom decimal import ROUND_DOWN, Decimal"
            )
    );
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![write("rechnung.py", &rech)]),
                turn(vec![text("Done.")]),
            ]),
            session(vec![turn(vec![text("Done.")])]),
        ],
        vec![pass(), pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s = r.summary();
    assert_eq!(
        s["attempts"][0]["rejected_by"], "held_out_failed",
        "{}\n{}",
        s["attempts"], r.stderr
    );
    let prompt = model.session(crate::support::model::Role::Agent, 1)[0].prompt();
    assert!(prompt.contains("tests you cannot see"), "{prompt}");
    for word in ["wrote over", "file(s)", "test_rechnung", "pyproject"] {
        assert!(
            !prompt.contains(word),
            "`{word}` reached the next prompt: {prompt}"
        );
    }
}
