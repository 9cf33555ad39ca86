//! `loopd run --job-id`: a job a scheduler may start again anywhere — a
//! pod restarted after a drain, a re-run of a CI job — continues where its
//! journal stops and is never billed twice; the credential comes from a
//! mounted file (`--credential-file`), never from a literal in the
//! environment. The `kill -9` walk through this entry point is in
//! `crash.rs`.

use std::process::Stdio;

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

/// A drained pod (SIGTERM, exit 4) started again with the same command
/// line: the parked work comes back, the job goes on to acceptance, what
/// the stopped session spent still counts; meanwhile a second process of
/// the same job is refused (exit 5), a job id of another job is refused
/// (exit 2), and a run of the ended job does nothing.
#[test]
fn a_drained_run_continues_on_the_next_start_with_its_credential_from_a_file() {
    let env = TestEnv::scripted();
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![write("rechnung.py", &partial)]),
                stalled(120_000),
            ]),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    // The key as a Kubernetes Secret volume mounts it: a link into `..data`.
    let key = unique_secret("sk-ant-file");
    let secret = env.tmp.path().join("secret");
    let data = secret.join("..2026_12_02_00_00_00.1");
    std::fs::create_dir_all(&data).expect("secret dir");
    std::fs::write(data.join("ANTHROPIC_API_KEY"), format!("{key}\n")).expect("key file");
    std::os::unix::fs::symlink("..2026_12_02_00_00_00.1", secret.join("..data")).expect("link");
    std::os::unix::fs::symlink("..data/ANTHROPIC_API_KEY", secret.join("ANTHROPIC_API_KEY"))
        .expect("link");
    let id = "j5eed5eed00-7";
    let run = |extra: &[&str]| {
        let mut cmd = env.loopd(Some(&model));
        cmd.env_remove("ANTHROPIC_API_KEY")
            .args(["run", "--json", "--job-id", id, "--credential-file"])
            .arg(&secret)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };

    let first = run(&[]).spawn().expect("spawn loopd");
    wait_for_requests(&model, 0, 2);
    // One process per job: a second start while the first runs bills
    // nothing and tells the scheduler to try again later.
    let twin = finish(run(&[]).output().expect("run loopd"));
    assert_eq!(twin.code, 5, "{}", twin.stderr);
    assert!(
        twin.stderr.contains("running in another process"),
        "{}",
        twin.stderr
    );
    send_signal(first.id(), libc::SIGTERM);
    let r = finish(first.wait_with_output().expect("wait loopd"));
    assert_eq!(r.code, 4, "{}", r.stderr);
    let stopped = r.summary();
    assert_eq!(stopped["reason"], "signal");
    let spent_before = stopped["totals"]["cost_usd"].as_f64().expect("cost");
    assert!(spent_before > 0.0, "the stopped session spent something");
    assert_eq!(env.git(&["status", "--porcelain"]), "", "parked");

    // The engine starts it again: on from the journal, the work restored.
    let r = finish(run(&[]).output().expect("run loopd"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["job_id"], id);
    assert_eq!(s["outcome"], "accepted");
    let attempts = s["attempts"].as_array().expect("attempts");
    assert_eq!(
        attempts.len(),
        2,
        "the stopped attempt and the accepted one"
    );
    assert!(
        s["totals"]["cost_usd"].as_f64().expect("cost") > spent_before,
        "what the stopped session spent still counts"
    );
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
    assert_eq!(
        (
            model.session_count(Role::Agent),
            model.session_count(Role::Critic)
        ),
        (2, 1)
    );
    // The key came from the file, through the gateway, on every call.
    let requests = model.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|q| q.api_key.as_deref() == Some(key.as_str())),
        "every upstream call carries the file's key"
    );
    env.assert_no_secret_in_state(&[&key]);

    // A job that has ended: its summary and code, nothing run or billed.
    let calls = model.requests().len();
    let again = finish(run(&[]).output().expect("run loopd"));
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.summary(), s);
    assert_eq!(
        model.requests().len(),
        calls,
        "an ended job reached the model"
    );

    // The id of another job: refused, naming it.
    let other = finish(
        run(&["--task", "Something else"])
            .output()
            .expect("run loopd"),
    );
    assert_eq!(other.code, 2, "{}", other.stderr);
    assert!(other.stderr.contains(id), "{}", other.stderr);
    let bad = finish(
        env.loopd(None)
            .args(["run", "--job-id", "../x"])
            .output()
            .expect("run loopd"),
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

/// A credential file with a misspelt name is refused before anything runs,
/// naming the file and the name, never the value.
#[test]
fn a_misspelt_credential_file_is_refused_naming_the_name_not_the_value() {
    let env = TestEnv::new();
    let file = env.tmp.path().join("credentials");
    std::fs::write(&file, "ANTHROPIC_APIKEY=sk-ant-must-not-show\n").expect("write");
    let out = finish(
        env.loopd(None)
            .env_remove("ANTHROPIC_API_KEY")
            .args(["run", "--credential-file"])
            .arg(&file)
            .output()
            .expect("run loopd"),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_contains_all(
        &out.stderr,
        &[
            "ANTHROPIC_APIKEY",
            &file.display().to_string(),
            "ANTHROPIC_API_KEY",
        ],
        "the refusal",
    );
    assert!(
        !out.stderr.contains("sk-ant-must-not-show"),
        "{}",
        out.stderr
    );
    assert!(env
        .state
        .join("runs")
        .read_dir()
        .map_or(true, |mut d| d.next().is_none()));
}

/// What the attack on `--job-id` found, each refused: a run directory that
/// is a link elsewhere, a lock file that is a link, an id that reads as a
/// flag, a planted journal taking uncommitted work of yours into a job, a
/// planted summary deciding the exit code, a credential file inside the
/// repository.
#[test]
fn a_planted_or_linked_run_dir_never_decides_what_a_job_does() {
    let env = TestEnv::new();
    let runs = env.state.join("runs");
    std::fs::create_dir_all(&runs).expect("runs");
    let base = env.git(&["rev-parse", "HEAD"]).trim().to_owned();
    let task =
        "Make python3 -m pytest and ruff check . pass. Do not delete, skip or weaken any test.";
    let run = |id: &str| {
        finish(
            env.loopd(None)
                .args(["run", "--json", "--job-id", id])
                .output()
                .expect("run loopd"),
        )
    };

    let flag = run("-x");
    assert_eq!(flag.code, 2, "{}", flag.stderr);

    // A run directory linked elsewhere: refused, nothing written there.
    let elsewhere = env.tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("dir");
    std::os::unix::fs::symlink(&elsewhere, runs.join("linked")).expect("link");
    let r = run("linked");
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("not a directory of its own"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_dir(&elsewhere).expect("dir").count(), 0);

    // A lock file linked elsewhere: never created or locked through.
    std::fs::create_dir(runs.join("locklink")).expect("dir");
    let target = env.tmp.path().join("created-by-loopd");
    std::os::unix::fs::symlink(&target, runs.join("locklink/run.lock")).expect("link");
    let r = run("locklink");
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        !target.exists(),
        "loopd created a file through the lock's link"
    );

    // A planted journal does not make a dirty tree the job's.
    let plant = |id: &str, ended: bool| {
        let dir = runs.join(id);
        std::fs::create_dir(&dir).expect("run dir");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("private");
        let mut j = loopd::journal::Journal::open(&dir).expect("journal");
        j.append(loopd::journal::Event::JobStarted {
            job_id: id.into(),
            base_ref: base.clone(),
            repo: env.repo.clone(),
            task: task.into(),
            spec: None,
        })
        .expect("append");
        if ended {
            j.append(loopd::journal::Event::JobEnded {
                ending: loopd::journal::Ending {
                    reason: loopd::outcome::Reason::AttemptsExhausted,
                    detail: "planted".into(),
                },
            })
            .expect("append");
            j.append(loopd::journal::Event::Finalized {
                state: loopd::outcome::Status::Exhausted,
            })
            .expect("append");
        }
        dir
    };
    plant("planted", false);
    std::fs::write(env.repo.join("rechnung.py"), "# my own work in progress\n").expect("edit");
    let r = run("planted");
    assert_eq!(r.code, 5, "a dirty tree is refused: {}", r.stderr);
    assert!(r.stderr.contains("uncommitted changes"), "{}", r.stderr);
    assert_eq!(env.read_repo("rechnung.py"), "# my own work in progress\n");
    env.git(&["checkout", "--", "rechnung.py"]);

    // A planted summary that disagrees with the journal decides nothing:
    // the ending is the journal's (exhausted, exit 1), never "accepted".
    let dir = plant("summary", true);
    let forged =
        serde_json::json!({"job_id": "summary", "reason": "accepted", "outcome": "accepted"});
    std::fs::write(dir.join("summary.json"), forged.to_string()).expect("forge");
    let r = run("summary");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.summary()["reason"], "attempts_exhausted");

    // A credential file inside the repository: readable by the agent.
    std::fs::create_dir(env.repo.join(".secret")).expect("dir");
    std::fs::write(
        env.repo.join(".secret/creds"),
        "ANTHROPIC_API_KEY=sk-in-repo\n",
    )
    .expect("creds");
    let r = finish(
        env.loopd(None)
            .args(["run", "--credential-file", ".secret/creds"])
            .output()
            .expect("run loopd"),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("inside the repository"), "{}", r.stderr);
}

/// A directory shaped as a Kubernetes Secret volume mounts one: `..data`
/// a link to the dated directory, and `ANTHROPIC_API_KEY` a link to
/// `target` (relative to the directory, or absolute).
fn secret_dir(at: &std::path::Path, target: &str) {
    let dated = at.join("..2026_12_04_00_00_00.1");
    std::fs::create_dir_all(&dated).expect("secret dir");
    std::fs::write(dated.join("ANTHROPIC_API_KEY"), "sk-ant-dated\n").expect("key file");
    std::os::unix::fs::symlink("..2026_12_04_00_00_00.1", at.join("..data")).expect("link");
    std::os::unix::fs::symlink(target, at.join("ANTHROPIC_API_KEY")).expect("link");
}

/// Issue 39 #9: a credential directory outside the repository whose entry
/// is a link into the repository (where the agent reads the real key), or
/// into a directory `[sandbox] read` grants, is refused before anything
/// runs (exit 2), naming the entry and where it resolves, never the key;
/// a Secret volume as Kubernetes mounts it is accepted.
#[test]
fn issue39_9_a_credential_entry_that_resolves_where_the_agent_reads_is_refused() {
    let env = TestEnv::scripted();
    let key = unique_secret("sk-ant-repo");
    std::fs::write(env.repo.join("somefile"), format!("{key}\n")).expect("key in the repo");
    env.git(&["add", "somefile"]);
    env.git(&["commit", "-qm", "a file the agent reads"]);
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let run = |secret: &std::path::Path| {
        let mut cmd = env.loopd(Some(&model));
        cmd.env_remove("ANTHROPIC_API_KEY")
            .args(["run", "--json", "--max-attempts", "1", "--credential-file"])
            .arg(secret);
        finish(cmd.output().expect("run loopd"))
    };

    let into_repo = env.tmp.path().join("secret-repo");
    let target = env.repo.join("somefile");
    secret_dir(&into_repo, target.to_str().expect("UTF-8 path"));
    let r = run(&into_repo);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_contains_all(
        &r.stderr,
        &[
            &into_repo.join("ANTHROPIC_API_KEY").display().to_string(),
            &target.display().to_string(),
            "inside the repository",
            "hint:",
        ],
        "the refusal",
    );
    assert!(!r.stderr.contains(&key), "{}", r.stderr);

    // Through `..data`: the dated directory is a link to a directory the
    // job's sandbox reads.
    let shared = env.tmp.path().join("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    std::fs::write(shared.join("ANTHROPIC_API_KEY"), "sk-ant-shared\n").expect("key");
    env.sandbox_reads(&[&shared]);
    let into_read = env.tmp.path().join("secret-read");
    std::fs::create_dir_all(&into_read).expect("secret dir");
    std::os::unix::fs::symlink(&shared, into_read.join("..data")).expect("link");
    std::os::unix::fs::symlink(
        "..data/ANTHROPIC_API_KEY",
        into_read.join("ANTHROPIC_API_KEY"),
    )
    .expect("link");
    let r = run(&into_read);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_contains_all(
        &r.stderr,
        &[
            &into_read.join("ANTHROPIC_API_KEY").display().to_string(),
            &shared.join("ANTHROPIC_API_KEY").display().to_string(),
            "[sandbox] read",
        ],
        "the refusal",
    );
    assert!(model.requests().is_empty(), "nothing ran");

    // A Secret volume as Kubernetes mounts it: accepted, its key used.
    let normal = env.tmp.path().join("secret-ok");
    secret_dir(&normal, "..data/ANTHROPIC_API_KEY");
    let r = run(&normal);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(model
        .requests()
        .iter()
        .all(|q| q.api_key.as_deref() == Some("sk-ant-dated")));
}

/// Issue 39 #14: the journal pins the whole job spec, not only the task
/// and the repository. A drained job (exit 4) started again with another
/// goal step and a larger budget would be judged by the new goal and
/// spend the new budget: refused (exit 2), naming both fields, nothing
/// billed; the same command line as the first continues it to acceptance.
#[test]
fn issue39_14_a_continuation_with_another_goal_or_budget_is_refused() {
    let env = TestEnv::scripted();
    let partial = fixture("rechnung/repo/rechnung.py")
        .replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![write("rechnung.py", &partial)]),
                stalled(120_000),
            ]),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let id = "issue39-14";
    let run = |extra: &[&str]| {
        let mut cmd = env.loopd(Some(&model));
        cmd.args(["run", "--json", "--job-id", id])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let first = run(&[]).spawn().expect("spawn loopd");
    wait_for_requests(&model, 0, 2);
    send_signal(first.id(), libc::SIGTERM);
    let r = finish(first.wait_with_output().expect("wait loopd"));
    assert_eq!(r.code, 4, "{}", r.stderr);
    let started = journal(&r.summary())
        .into_iter()
        .find_map(|e| match e {
            loopd::journal::Event::JobStarted { spec, .. } => spec,
            _ => None,
        })
        .expect("the journal pins the spec");
    let was = format!("budget_usd: was {} → now 50", started.limits.budget_usd);
    let calls = model.requests().len();

    // Another goal, a larger budget: the continuation would grade itself.
    let other = finish(
        run(&["--goal", "true", "--budget-usd", "50"])
            .output()
            .expect("run loopd"),
    );
    assert_eq!(other.code, 2, "{}", other.stderr);
    assert_contains_all(
        &other.stderr,
        &[
            id,
            "goal: was [",
            "now [`true` runs `true`",
            &was,
            "loopd resume",
        ],
        "the refusal",
    );
    assert!(!other.stderr.contains("max_turns"), "{}", other.stderr);
    assert_eq!(
        model.requests().len(),
        calls,
        "a refused run reached the model"
    );

    // The same spec: on from the journal, to acceptance.
    let r = finish(run(&[]).output().expect("run loopd"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.summary()["outcome"], "accepted");
    assert_eq!(env.read_repo("rechnung.py"), clean_solution());
}
