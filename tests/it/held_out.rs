//! Held-out tests: goal steps whose files live outside the repository and
//! that no process of the job reads but the judge-only run.

use serde_json::Value;

use crate::support::model::ScriptedModel;
use crate::support::*;

/// A marker only the held-out files hold: it must never reach the model.
pub(crate) const MARKER: &str = "HELDOUTMARKER7f3a";

/// A held-out directory outside the repository with one test the visible
/// suite lacks (more than one line, rounding half up), and the job's
/// `loopd.toml` with a held-out step that runs it.
pub fn held_out_env(feedback: Option<&str>) -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::scripted();
    // Inside a directory the sandbox may be told to read (see the attack
    // below): only the hole loopd cuts keeps the held-out files out.
    let dir = env.tmp.path().join("shared/held-out");
    std::fs::create_dir_all(dir.join("tests_hidden")).expect("held-out dir");
    std::fs::write(
        dir.join("tests_hidden/test_hidden.py"),
        format!("# {MARKER}\nfrom decimal import Decimal\n\nfrom rechnung import gross_total\n\n\ndef test_gross_total_many_lines():\n    assert gross_total([(1, Decimal(\"10\")), (3, Decimal(\"2.50\"))]) == Decimal(\"20.83\")\n"),
    )
    .expect("held-out test");
    let cfg = std::fs::read_to_string(env.repo.join("loopd.toml")).expect("cfg");
    // The fixture's `loopd.toml` ends with its `[[goal]]` steps: the
    // held-out step follows them, then the `[guard]` table.
    let mut cfg = format!(
        "{cfg}\n[[goal]]\nname = \"hidden\"\nrun = \"python3 -m pytest -q tests_hidden\"\nheld_out = true\nfiles = \"{}\"\n",
        dir.display()
    );
    if let Some(f) = feedback {
        cfg.push_str(&format!("\n[guard]\nheld_out_feedback = \"{f}\"\n"));
    }
    std::fs::write(env.repo.join("loopd.toml"), cfg).expect("cfg");
    env.git(&["commit", "-qam", "a held-out step"]);
    (env, dir)
}

/// Green on the visible tests, wrong on the held-out one (20.82).
fn wrong_but_green() -> String {
    clean_solution().replace("ROUND_HALF_UP", "ROUND_DOWN")
}

fn held_out_runs(s: &Value) -> Vec<(u32, bool)> {
    journal(s)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::HeldOutRun {
                attempt, report, ..
            } => Some((attempt, report.passed())),
            _ => None,
        })
        .collect()
}

/// Attempt 1 wrong but green, attempt 2 the fix: accepted, and the summary.
fn wrong_then_right(env: &TestEnv) -> (ScriptedModel, Value) {
    let model = ScriptedModel::start(scenario(
        vec![
            agent_writes(&wrong_but_green()),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted", "{}\n{}", s["attempts"], r.stderr);
    (model, s)
}

#[test]
fn a_wrong_but_green_change_is_rejected_by_tests_it_never_saw() {
    let (env, _dir) = held_out_env(None);
    let (model, s) = wrong_then_right(&env);
    let first = &s["attempts"][0];
    assert_eq!(first["rejected_by"], "held_out_failed", "{first}");
    assert_eq!(
        first["critic"], "skipped",
        "no critic call for a held-out failure"
    );
    let findings = first["gate_findings"].to_string();
    assert!(
        findings.contains("test_gross_total_many_lines"),
        "{findings}"
    );
    // The ids, never the source or the values it expects.
    assert!(
        !findings.contains("20.83") && !findings.contains(MARKER),
        "{findings}"
    );
    // The accepted job's held-out runs are in its journal, its summary and
    // its report.
    assert_eq!(held_out_runs(&s), [(1, false), (2, true)]);
    assert_eq!(s["attempts"][0]["held_out_passed"], false);
    assert_eq!(s["attempts"][1]["held_out_passed"], true);
    let report = env.exec(&["report", s["job_id"].as_str().expect("job id")]);
    assert!(
        report.stdout.contains("held-out tests RED")
            && report.stdout.contains("held-out tests green"),
        "{}",
        report.stdout
    );
    let baseline = journal(&s).into_iter().find_map(|e| match e {
        loopd::journal::Event::Baseline { held_out, .. } => held_out,
        _ => None,
    });
    assert!(
        baseline.is_some_and(|b| !b.passed()),
        "the held-out step at BASE_REF is red"
    );
    let bodies = all_bodies(&model);
    assert!(
        bodies.contains("test_gross_total_many_lines"),
        "the next prompt names the test"
    );
    assert!(!bodies.contains(MARKER) && !bodies.contains("20.83"));
    // Nothing of the judge-only trees is left.
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run dir"));
    for d in [
        "held-out-baseline",
        "attempt-1/held-out",
        "attempt-2/held-out",
    ] {
        assert!(!run_dir.join(d).exists(), "{d} was not thrown away");
    }
}

/// What a blind attack did: code the held-out step imports prints every
/// word of the held-out files as a "failing test" at exit; only the names
/// of tests the held-out files define may reach the next prompt. (The
/// file's name is spelled in two pieces, and the descriptor is computed:
/// whole, the pre-critic finds the code reading test files and writing to
/// descriptor 1 before the held-out run, and this is about the run.)
#[test]
fn printed_fake_test_ids_carry_nothing_of_the_held_out_files() {
    let (env, _dir) = held_out_env(None);
    let payload = "import atexit\nimport os\nimport pathlib\nimport re\n\nHERE = pathlib.Path(\"tests_hidden\")\nif HERE.is_dir():\n    WORDS = sorted({w for f in HERE.rglob(\"*.py\") for w in re.findall(r\"\\w+\", f.read_text())})\n    atexit.register(lambda: os.write(int(\"1\"), \"\".join(\"FAILED tests_hidden/test_hidden\" + \".py::\" + w + \" - x\\n\" for w in WORDS).encode()))\n";
    let cheat = wrong_but_green().replacen(
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
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "2"]);
    let s = r.summary();
    assert_eq!(
        s["attempts"][0]["rejected_by"], "held_out_failed",
        "{}\n{}",
        s["attempts"], r.stderr
    );
    let bodies = all_bodies(&model);
    let prompt = model.session(crate::support::model::Role::Agent, 1)[0].prompt();
    assert!(
        prompt.contains("test_gross_total_many_lines"),
        "the real id is told: {prompt}"
    );
    for word in [MARKER, "Decimal", "gross_total([(1"] {
        assert!(
            !prompt.contains(word),
            "`{word}` leaked into the next prompt: {prompt}"
        );
    }
    assert!(!bodies.contains(MARKER));
    // The journal keeps the held-out run as outcomes and ids the held-out
    // files define, never its output (which held the fake ids): nothing
    // of the hidden files is in the run directory an artefact upload
    // would carry.
    let outcomes = journal(&s)
        .into_iter()
        .find_map(|e| match e {
            loopd::journal::Event::HeldOutRun {
                attempt: 1,
                outcomes,
                ..
            } => Some(outcomes),
            _ => None,
        })
        .expect("the held-out run is journaled");
    assert!(!outcomes[0].passed);
    assert!(
        outcomes[0]
            .failing
            .iter()
            .all(|id| id.starts_with("test_") && id != MARKER),
        "{outcomes:?}"
    );
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run dir"));
    let mut stack = vec![run_dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("run dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(text) = std::fs::read(&p) {
                assert!(
                    !String::from_utf8_lossy(&text).contains(MARKER),
                    "`{}` holds a word of the held-out files",
                    p.display()
                );
            }
        }
    }
}

/// The held-out files as a ref of another repository: pinned to its commit
/// when the job starts, so what the ref (or the repository's working tree)
/// holds later does not change the job's judge.
#[test]
fn held_out_tests_from_a_ref_of_another_repository() {
    let (env, dir) = held_out_env(None);
    // The directory becomes a repository; its tests are committed and
    // tagged, then its working tree is emptied of them.
    env.git_in(&dir, &["init", "-q", "-b", "main", "."]);
    env.git_in(&dir, &["add", "-A"]);
    env.git_in(&dir, &["commit", "-qm", "held-out tests"]);
    env.git_in(&dir, &["tag", "v1"]);
    std::fs::remove_dir_all(dir.join("tests_hidden")).expect("empty the working tree");
    let cfg = env.read_repo("loopd.toml").replace(
        &format!("files = \"{}\"\n", dir.display()),
        &format!("files = \"{}\"\nref = \"v1\"\n", dir.display()),
    );
    std::fs::write(env.repo.join("loopd.toml"), cfg).expect("cfg");
    env.git(&["commit", "-qam", "held out from a ref"]);
    let (_model, s) = wrong_then_right(&env);
    assert_eq!(s["attempts"][0]["rejected_by"], "held_out_failed");
    assert!(s["attempts"][0]["gate_findings"]
        .to_string()
        .contains("test_gross_total_many_lines"));
    assert_eq!(held_out_runs(&s), [(1, false), (2, true)]);
    // A ref that names nothing is a configuration error.
    let cfg = env
        .read_repo("loopd.toml")
        .replace("ref = \"v1\"", "ref = \"v9\"");
    std::fs::write(env.repo.join("loopd.toml"), cfg).expect("cfg");
    env.git(&["commit", "-qam", "a ref that names nothing"]);
    let c = env.exec(&["check"]);
    assert_eq!(c.code, 2, "{}", c.stderr);
    assert!(c.stderr.contains("`v9`"), "{}", c.stderr);
}

#[test]
fn held_out_feedback_none_says_only_that_it_failed() {
    let (env, dir) = held_out_env(Some("none"));
    let c = finish(
        env.loopd(None)
            .args(["check"])
            .output()
            .expect("loopd check"),
    );
    assert_eq!(c.code, 0, "{}", c.stderr);
    let shown = format!("{}{}", c.stdout, c.stderr);
    assert!(shown.contains("the next prompt learns: none"), "{shown}");
    assert!(
        shown.contains(&format!("files from {} (1 files", dir.display())),
        "{shown}"
    );
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&wrong_but_green())],
        vec![pass()],
    ));
    let r = env.run(&model, &["--max-attempts", "1"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "held_out_failed", "{}", s["attempts"]);
    let findings = s["attempts"][0]["gate_findings"].to_string();
    assert!(
        !findings.contains("test_gross_total_many_lines"),
        "{findings}"
    );
}

#[test]
fn the_agent_and_the_goal_code_cannot_read_the_held_out_tests() {
    let (env, dir) = held_out_env(None);
    // The held-out directory's parent is readable (`[sandbox] read`), and
    // a file next to it proves it: the agent must read that one.
    let shared = dir.parent().expect("parent").to_path_buf();
    std::fs::write(shared.join("visible.txt"), "VISIBLECONTROL\n").expect("control");
    env.append_config(
        &format!("[sandbox]\nread = [\"{}\"]\n", shared.display()),
        "the shared directory is readable",
    );
    let file = dir.join("tests_hidden/test_hidden.py");
    // What the goal's code finds, it reports as a red test: a judge of its
    // own lets nothing else it writes out.
    let probe = format!(
        "import pathlib\n\nLOOT = []\nfor p in [{f:?}, {d:?}]:\n    try:\n        path = pathlib.Path(p)\n        got = path.read_text() if path.is_file() else ' '.join(sorted(x.name for x in path.iterdir()))\n        LOOT.append('READ ' + got)\n    except OSError as e:\n        LOOT.append(f'DENIED {{p}}: {{e}}')\n\n\ndef test_probe():\n    assert not LOOT, '\\n'.join(LOOT)\n",
        f = file.display().to_string(),
        d = dir.display().to_string(),
    );
    let bash_probe = format!(
        "cat {c} > loot-agent.txt 2>&1; cat {f} >> loot-agent.txt 2>&1; ls -la {d} >> loot-agent.txt 2>&1; ls {d}/tests_hidden >> loot-agent.txt 2>&1; cat loot-agent.txt",
        c = shared.join("visible.txt").display(),
        f = file.display(),
        d = dir.display()
    );
    let (model, r) = run_one_session(
        &env,
        vec![
            turn(vec![bash(&bash_probe)]),
            turn(vec![
                write("rechnung.py", &clean_solution()),
                write("tests/test_probe.py", &probe),
            ]),
        ],
    );
    let s = r.summary();
    assert_eq!(s["sandbox"], "landlock", "{}", r.stderr);
    let bodies = all_bodies(&model);
    assert!(
        !bodies.contains(MARKER),
        "the agent read the held-out tests"
    );
    // The command names the file; what it printed must not list it.
    let seen = bodies.replace(&bash_probe, "");
    assert!(
        seen.contains("VISIBLECONTROL"),
        "the readable root is readable: {seen}"
    );
    // Not even there: the job's root holds no held-out directory.
    assert!(
        seen.contains("No such file or directory"),
        "the probe ran and was refused: {seen}"
    );
    assert!(
        !seen.contains("test_hidden.py\\n"),
        "the agent listed the held-out directory: {seen}"
    );
    // The goal's code ran (the visible goal is green) and was refused too;
    // its loot is in the parked change or the tree, never the marker.
    let run_dir = std::path::PathBuf::from(s["run_dir"].as_str().expect("run dir"));
    let patch = std::fs::read_to_string(run_dir.join("attempt-1/diff-after-goal.patch"))
        .or_else(|_| std::fs::read_to_string(run_dir.join("attempt-1/diff.patch")))
        .expect("a diff");
    assert!(!patch.contains(MARKER), "{patch}");
    let goal_loot = std::fs::read_to_string(run_dir.join("attempt-1/goal.txt")).unwrap_or_default();
    assert!(
        goal_loot.contains("DENIED"),
        "the goal's code ran and was refused: {goal_loot}"
    );
    assert!(
        !goal_loot.contains("READ") && !goal_loot.contains(MARKER),
        "{goal_loot}"
    );
}

#[test]
fn a_held_out_directory_inside_the_repository_is_refused() {
    let env = TestEnv::scripted();
    std::fs::create_dir_all(env.repo.join("hidden")).expect("dir");
    let cfg = std::fs::read_to_string(env.repo.join("loopd.toml")).expect("cfg");
    std::fs::write(
        env.repo.join("loopd.toml"),
        format!("{cfg}\n[[goal]]\nname = \"hidden\"\nrun = \"true\"\nheld_out = true\nfiles = \"hidden\"\n"),
    )
    .expect("cfg");
    std::fs::write(env.repo.join("hidden/.keep"), "").expect("keep");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "held out inside"]);
    let r = finish(
        env.loopd(None)
            .args(["check"])
            .output()
            .expect("loopd check"),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("outside the repository"), "{}", r.stderr);
    assert!(
        r.stderr.contains("loopd.toml"),
        "names the file: {}",
        r.stderr
    );
}

/// Issue 39 #13: held-out tests committed in a linked worktree of the
/// job's repository, or in a clone that borrows its objects, are objects
/// the agent prints with `git show` from its Bash. Each is refused when
/// the job is configured (exit 2), naming the ref and why; the same tests
/// in a repository of their own are accepted.
#[test]
fn issue39_13_a_held_out_ref_the_jobs_repository_can_reach_is_refused() {
    let (env, dir) = held_out_env(None);
    let with_ref = |files: &std::path::Path, git_ref: &str| {
        let cfg = env.read_repo("loopd.toml");
        let start = cfg.find("files = \"").expect("the held-out step's files");
        let end = start + cfg[start..].find("\"\n").expect("end of files") + 2;
        let end = match cfg[end..].starts_with("ref = ") {
            true => end + cfg[end..].find('\n').expect("end of ref") + 1,
            false => end,
        };
        let cfg = format!(
            "{}files = \"{}\"\nref = \"{git_ref}\"\n{}",
            &cfg[..start],
            files.display(),
            &cfg[end..]
        );
        std::fs::write(env.repo.join("loopd.toml"), cfg).expect("cfg");
        env.git(&["commit", "-qam", "held out from a ref"]);
        env.exec(&["check"])
    };
    let commit_tests = |repo: &std::path::Path, tag: &str| {
        copy_tree(&dir.join("tests_hidden"), &repo.join("tests_hidden"));
        env.git_in(repo, &["add", "-A"]);
        env.git_in(repo, &["commit", "-qm", "held-out tests"]);
        env.git_in(repo, &["tag", tag]);
    };

    // A linked worktree of the job's repository, outside it.
    let linked = env.tmp.path().join("linked");
    env.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "held-out",
        linked.to_str().expect("UTF-8 path"),
    ]);
    commit_tests(&linked, "hidden-v1");
    let c = with_ref(&linked, "hidden-v1");
    assert_eq!(c.code, 2, "{}", c.stderr);
    assert_contains_all(
        &c.stderr,
        &[
            "`hidden-v1`",
            "worktree",
            "loopd.toml",
            "hint:",
            "cannot reach",
        ],
        "the refusal",
    );

    // A clone that borrows the job's repository's objects.
    let borrowing = env.tmp.path().join("borrowing");
    env.git_in(
        env.tmp.path(),
        &[
            "clone",
            "-q",
            "--shared",
            env.repo.to_str().expect("UTF-8 path"),
            borrowing.to_str().expect("UTF-8 path"),
        ],
    );
    commit_tests(&borrowing, "hidden-v2");
    let c = with_ref(&borrowing, "hidden-v2");
    assert_eq!(c.code, 2, "{}", c.stderr);
    assert_contains_all(&c.stderr, &["`hidden-v2`", "borrows"], "the refusal");

    // A repository of its own: accepted as before.
    env.git_in(&dir, &["init", "-q", "-b", "main", "."]);
    env.git_in(&dir, &["add", "-A"]);
    env.git_in(&dir, &["commit", "-qm", "held-out tests"]);
    env.git_in(&dir, &["tag", "v1"]);
    let c = with_ref(&dir, "v1");
    assert_eq!(c.code, 0, "{}", c.stderr);
}
