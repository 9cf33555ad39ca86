//! attack41c: the fixes of attack41b's holes, attacked again blind (from
//! README.md's threat model, docs/ci.md "Following a pull request",
//! docs/security.md on the state dir, the follow workflow and the test
//! harness only): the planted run directory in all its shapes, two
//! processes of one round, every kind of round killed after its own push,
//! and `--json` on every error path. Each test asserts a PROMISE of the
//! docs; a failing test is a hole.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::attack41b::*;
use crate::ci::*;
use crate::support::model::{Role, ScriptedModel, Turn};
use crate::support::*;

/// The job id of member comment 11's round.
const ID: &str = "pr1-issue-comment-11";

/// uid/gid of `nobody`: another user.
const NOBODY: u32 = 65534;

/// `loopd ci --json ARGS` as GitHub Actions runs it (`loopd_ci`'s
/// environment), the event file holding `event` as given; `tag` keeps two
/// processes' files apart.
fn ci_cmd(
    ci: &Ci,
    model: &ScriptedModel,
    args: &[&str],
    branch: &str,
    event: &str,
    name: &str,
    tag: &str,
) -> Command {
    let event_path = ci.env.tmp.path().join(format!("event-{tag}.json"));
    std::fs::write(&event_path, event).expect("event");
    let summary = ci.env.tmp.path().join(format!("summary-{tag}.md"));
    actions_cmd(ci, Some(model), args, branch, name, &event_path, &summary)
}

/// Run `cmd`, its output in files under `dir`; `None` when it had not
/// ended after `secs` seconds (it is killed then).
fn timed(mut cmd: Command, dir: &Path, tag: &str, secs: u64) -> Option<RunResult> {
    let out = dir.join(format!("{tag}.stdout"));
    let err = dir.join(format!("{tag}.stderr"));
    cmd.stdout(std::fs::File::create(&out).expect("stdout"))
        .stderr(std::fs::File::create(&err).expect("stderr"));
    let mut child = cmd.spawn().expect("spawn loopd");
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(RunResult {
                code: status.code().unwrap_or(-1),
                stdout: std::fs::read_to_string(&out).unwrap_or_default(),
                stderr: std::fs::read_to_string(&err).unwrap_or_default(),
            });
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A member's comment round in a state dir planted with `what`; `None`
/// (and a hole) when it hung.
fn planted_round(
    ci: &Ci,
    model: &ScriptedModel,
    branch: &str,
    what: &str,
    holes: &mut Vec<String>,
) -> Option<RunResult> {
    let r = timed_round(ci, model, branch, "r");
    if r.is_none() {
        holes.push(format!("{what}: `loopd ci` hung (killed after 240 s)"));
    }
    r
}

/// A member's comment round, killed after `timed` seconds.
fn timed_round(ci: &Ci, model: &ScriptedModel, branch: &str, tag: &str) -> Option<RunResult> {
    let cmd = ci_cmd(
        ci,
        model,
        &[],
        branch,
        &ask(11).to_string(),
        "issue_comment",
        tag,
    );
    timed(cmd, ci.env.tmp.path(), tag, 240)
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).expect("chown");
}

/// Every path under `dir` (links not followed), with its length.
fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    walk(dir, &mut |p, meta| out.push((p.to_path_buf(), meta.len())));
    out.sort();
    out
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo")
        .success();
    assert!(ok, "mkfifo {path:?}");
}

/// Is stdout exactly one JSON object with a `decision`?
fn one_object(r: &RunResult) -> bool {
    serde_json::from_str::<Value>(r.stdout.trim())
        .ok()
        .is_some_and(|v| v.is_object() && v["decision"].is_string())
}

/// loopd's answers on #1 that carry a round record.
fn round_records(ci: &Ci) -> usize {
    ci.gh
        .comments()
        .iter()
        .filter(|c| c.author_type == "Bot" && c.body.contains("<!-- loopd: round event="))
        .count()
}

fn summary_job_id(r: &RunResult) -> String {
    serde_json::from_str::<Value>(r.stdout.trim())
        .ok()
        .and_then(|v| v["summary"]["job_id"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// The planted run directory

/// "refused with exit 5 ... when it, or a directory directly under it ...
/// is group- or world-writable or owned by another user" and "the run
/// directory is the round's own": `state/runs` (or the state dir itself) a
/// link to another user's world-writable directory is refused, and nothing
/// is written through it. (`runs` a link to a 0700 directory of my own is
/// only reported: the docs do not forbid it.)
#[test]
fn attack41c_01_a_state_runs_that_is_a_link_to_another_users_dir_is_refused() {
    let mut holes = Vec::new();
    for (what, owner, bits) in [
        ("runs -> another user's 0777 dir", NOBODY, 0o777),
        ("state -> another user's 0777 dir", NOBODY, 0o777),
        ("runs -> my own 0700 dir", 0, 0o700),
    ] {
        let ci = ci_env();
        let branch = loopd_pr(&ci);
        let theirs = elsewhere(&ci.env, "theirs");
        mode(&theirs, bits);
        chown(&theirs, owner);
        if what.starts_with("state") {
            let _ = std::fs::remove_dir_all(&ci.env.state);
            std::os::unix::fs::symlink(&theirs, &ci.env.state).expect("link");
        } else {
            std::fs::create_dir_all(&ci.env.state).expect("state");
            mode(&ci.env.state, 0o700);
            std::os::unix::fs::symlink(&theirs, ci.env.state.join("runs")).expect("link");
        }
        let model = one_clean_fix();
        let r = timed_round(&ci, &model, &branch, "r").expect("loopd ci hung");
        let written = listing(&theirs);
        let found = format!(
            "{what}: `{}` exit {}, {} pushes, the round's files written through the link: {:?}",
            decision(&r),
            r.code,
            ci.authenticated_pushes(),
            written.iter().map(|w| &w.0).take(3).collect::<Vec<_>>(),
        );
        if owner != NOBODY {
            eprintln!("(not a hole) {found}");
            continue;
        }
        if r.code != 5 || ci.authenticated_pushes() != 0 || !written.is_empty() {
            holes.push(found);
        }
    }
    finish_holes(holes);
}

/// "a link or a file planted at `runs/<id>` ... is refused (exit 5)": a
/// regular file, a FIFO, a dangling link, a link to `/dev/null`, a link to
/// another user's world-writable directory — each refused, quickly (a FIFO
/// must not hang the round), with nothing run, pushed or written.
#[test]
fn attack41c_02_a_run_dir_planted_as_a_file_fifo_or_odd_link_is_refused() {
    let mut holes = Vec::new();
    for planted in [
        "file",
        "fifo",
        "dangling link",
        "link to /dev/null",
        "link to another user's dir",
        "link to a relative dir",
    ] {
        let ci = ci_env();
        let branch = loopd_pr(&ci);
        let runs = runs_dir(&ci.env);
        let theirs = elsewhere(&ci.env, "theirs");
        let at = runs.join(ID);
        match planted {
            "file" => std::fs::write(&at, "{}\n").expect("file"),
            "fifo" => mkfifo(&at),
            "dangling link" => std::os::unix::fs::symlink(theirs.join("gone"), &at).expect("link"),
            "link to /dev/null" => std::os::unix::fs::symlink("/dev/null", &at).expect("link"),
            "link to another user's dir" => {
                mode(&theirs, 0o777);
                chown(&theirs, NOBODY);
                std::os::unix::fs::symlink(&theirs, &at).expect("link");
            }
            _ => {
                std::fs::create_dir_all(runs.join("other")).expect("other");
                std::os::unix::fs::symlink("other", &at).expect("link");
            }
        }
        let model = one_clean_fix();
        let Some(r) = planted_round(&ci, &model, &branch, planted, &mut holes) else {
            continue;
        };
        let written: Vec<_> = listing(&theirs)
            .into_iter()
            .chain(listing(&runs.join("other")))
            .collect();
        if r.code != 5
            || ci.authenticated_pushes() != 0
            || !model.requests().is_empty()
            || !written.is_empty()
        {
            holes.push(format!(
                "{planted}: {}, written {:?}: {}",
                what_ran(&ci, &model, &r),
                written.iter().map(|w| &w.0).take(3).collect::<Vec<_>>(),
                tail(&r.stderr)
            ));
        }
        if !one_object(&r) {
            holes.push(format!("{planted}: no JSON object: {:?}", r.stdout));
        }
    }
    finish_holes(holes);
}

/// The round's own run directory, with its real journal (killed after the
/// job decided), moved into an attacker's directory and linked back at
/// `runs/<id>`: refused (exit 5) — the journal the link leads to decides
/// nothing, nothing is pushed or answered, nothing is written there.
#[test]
fn attack41c_03_a_link_to_a_dir_holding_a_journal_that_claims_the_ending_is_refused() {
    let mut holes = Vec::new();
    for owner in [0, NOBODY] {
        let (ci, branch, model) = killed_comment_round("journal:job_ended");
        let runs = ci.env.state.join("runs");
        let theirs = elsewhere(&ci.env, "theirs");
        let moved = theirs.join(ID);
        std::fs::rename(runs.join(ID), &moved).expect("move the run dir");
        if owner == NOBODY {
            Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(&theirs)
                .status()
                .expect("chown");
            mode(&theirs, 0o777);
        }
        std::os::unix::fs::symlink(&moved, runs.join(ID)).expect("link");
        let before = std::fs::read(moved.join("ledger.jsonl")).expect("a journal");
        let listed = listing(&theirs);
        let r = timed_round(&ci, &model, &branch, "r").expect("loopd ci hung");
        let after = std::fs::read(moved.join("ledger.jsonl")).unwrap_or_default();
        if r.code != 5
            || ci.authenticated_pushes() != 0
            || !ci.gh.comments().is_empty()
            || before != after
            || listing(&theirs) != listed
        {
            holes.push(format!(
                "owner {owner}: `{}` exit {}, {} pushes, {} comments, journal changed: {}, files changed: {}: {}",
                decision(&r),
                r.code,
                ci.authenticated_pushes(),
                ci.gh.comments().len(),
                before != after,
                listing(&theirs) != listed,
                tail(&r.stderr)
            ));
        }
    }
    finish_holes(holes);
}

/// "a link or a file planted at `runs/<id>` (or its `run.lock`) is refused
/// (exit 5)": `run.lock` as a link to an attacker's existing file, to
/// `/dev/null`, to a directory; and as a FIFO or a directory (not a link:
/// the round may refuse it or run, but never hang, and never push twice).
#[test]
fn attack41c_04_a_run_lock_planted_as_a_link_fifo_or_dir() {
    let mut holes = Vec::new();
    for planted in [
        "link to their file",
        "link to /dev/null",
        "link to a dir",
        "fifo",
        "dir",
    ] {
        let ci = ci_env();
        let branch = loopd_pr(&ci);
        let dir = run_dir(&ci.env, ID);
        let theirs = elsewhere(&ci.env, "theirs");
        let their_file = theirs.join("lockfile");
        std::fs::write(&their_file, "theirs\n").expect("their file");
        let lock = dir.join("run.lock");
        let link = planted.starts_with("link");
        match planted {
            "link to their file" => std::os::unix::fs::symlink(&their_file, &lock).expect("link"),
            "link to /dev/null" => std::os::unix::fs::symlink("/dev/null", &lock).expect("link"),
            "link to a dir" => std::os::unix::fs::symlink(&theirs, &lock).expect("link"),
            "fifo" => mkfifo(&lock),
            _ => std::fs::create_dir_all(&lock).expect("dir"),
        }
        let model = one_clean_fix();
        let Some(r) = planted_round(&ci, &model, &branch, planted, &mut holes) else {
            continue;
        };
        let theirs_now = std::fs::read_to_string(&their_file).unwrap_or_default();
        if theirs_now != "theirs\n" || listing(&theirs).len() != 1 {
            holes.push(format!(
                "{planted}: wrote through the link: {:?}",
                listing(&theirs)
            ));
        }
        if link && (r.code != 5 || ci.authenticated_pushes() != 0 || !model.requests().is_empty()) {
            holes.push(format!(
                "{planted}: not refused: {}: {}",
                what_ran(&ci, &model, &r),
                tail(&r.stderr)
            ));
        }
        let refused = r.code == 5 && ci.authenticated_pushes() == 0;
        let one_round = decision(&r) == "round_pushed" && ci.authenticated_pushes() == 1;
        if !(link || refused || one_round) {
            holes.push(format!(
                "{planted}: neither refused nor one round: `{}` exit {}, {} pushes: {}",
                decision(&r),
                r.code,
                ci.authenticated_pushes(),
                tail(&r.stderr)
            ));
        }
        if !one_object(&r) {
            holes.push(format!("{planted}: no JSON object: {:?}", r.stdout));
        }
    }
    finish_holes(holes);
}

/// "refused with exit 5 ... when it, or a directory directly under it ...
/// is group- or world-writable or owned by another user": `runs/`
/// world-writable, group-writable, or another user's is refused; a
/// `runs/<id>` that is world-writable or another user's is either refused
/// or not left so (the run directory is the round's own).
#[test]
fn attack41c_05_a_run_dir_with_wrong_permissions_or_owner() {
    let mut holes = Vec::new();
    for case in [
        "runs 0777",
        "runs 0770",
        "runs nobody's",
        "run dir 0777",
        "run dir nobody's",
        "run.lock nobody's 0666",
    ] {
        let ci = ci_env();
        let branch = loopd_pr(&ci);
        let runs = runs_dir(&ci.env);
        let dir = runs.join(ID);
        if case.starts_with("run ") || case.starts_with("run.lock") {
            std::fs::create_dir_all(&dir).expect("run dir");
            mode(&dir, 0o700);
        }
        match case {
            "runs 0777" => mode(&runs, 0o777),
            "runs 0770" => mode(&runs, 0o770),
            "runs nobody's" => chown(&runs, NOBODY),
            "run dir 0777" => mode(&dir, 0o777),
            "run dir nobody's" => chown(&dir, NOBODY),
            _ => {
                let lock = dir.join("run.lock");
                std::fs::write(&lock, "").expect("lock");
                chown(&lock, NOBODY);
                mode(&lock, 0o666);
            }
        }
        let model = one_clean_fix();
        let Some(r) = planted_round(&ci, &model, &branch, case, &mut holes) else {
            continue;
        };
        let refused = r.code == 5 && ci.authenticated_pushes() == 0 && model.requests().is_empty();
        if case.starts_with("runs ") {
            if !refused {
                holes.push(format!(
                    "{case}: not refused: `{}` exit {}, {} pushes",
                    decision(&r),
                    r.code,
                    ci.authenticated_pushes()
                ));
            }
            continue;
        }
        let target = if case.starts_with("run.lock") {
            dir.join("run.lock")
        } else {
            dir.clone()
        };
        let meta = std::fs::symlink_metadata(&target);
        let still_theirs = meta.as_ref().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() != 0 || m.mode() & 0o022 != 0
        });
        if !refused && still_theirs && case.starts_with("run.lock") {
            eprintln!(
                "(not a hole: a lock file's owner only decides who may hold it) {case}: `{}` exit {}",
                decision(&r),
                r.code
            );
        } else if !refused && still_theirs {
            holes.push(format!(
                "{case}: the round ran (`{}` exit {}, {} pushes) in a run directory left {:o} uid {}",
                decision(&r),
                r.code,
                ci.authenticated_pushes(),
                meta.as_ref().map(|m| m.permissions().mode()).unwrap_or(0),
                meta.as_ref()
                    .map(|m| {
                        use std::os::unix::fs::MetadataExt;
                        m.uid()
                    })
                    .unwrap_or(0)
            ));
        }
    }
    finish_holes(holes);
}

/// "It must be the same job (the task, ...; otherwise exit 2)": comment
/// 11's journal — accepted, not yet committed — planted as the run
/// directory of comment 12, which asks for something else. Never comment
/// 11's work pushed as the answer to 12.
#[test]
fn attack41c_06_a_planted_journal_of_another_task_is_not_continued() {
    let (ci, branch, model) = killed_comment_round("journal:job_ended");
    let runs = ci.env.state.join("runs");
    std::fs::rename(runs.join(ID), runs.join("pr1-issue-comment-12")).expect("rename");
    let other = issue_comment(
        12,
        "MEMBER",
        "User",
        "Please add a docstring to the module.",
    );
    let r = round(&ci, &model, &branch, other, "issue_comment");
    assert_eq!(
        (ci.authenticated_pushes(), remote_tip(&ci, &branch)),
        (0, ci.sha.clone()),
        "comment 11's judged work pushed as comment 12's round: `{}` exit {}: {}",
        decision(&r),
        r.code,
        tail(&r.stderr)
    );
    assert_eq!(r.code, 2, "`{}`: {}", decision(&r), tail(&r.stderr));
}

/// "an ending the job decided is final and only its answer (or push) is
/// still owed" and "What is pushed is ... the judged tree": a round killed
/// after its job accepted (and after it committed), whose checkout then
/// gains a change nobody judged — a line in the judged file and a new file
/// — pushes only what was judged (or nothing).
#[test]
fn attack41c_07_an_unjudged_change_in_the_tree_of_an_ended_round_is_never_pushed() {
    let mut holes = Vec::new();
    for (point, how) in [
        ("journal:job_ended", "dirty"),
        ("journal:committed", "dirty"),
        ("journal:job_ended", "fresh checkout"),
    ] {
        let (ci, branch, model) = killed_comment_round(point);
        assert_eq!(ci.authenticated_pushes(), 0, "{point}");
        if how == "dirty" {
            let path = ci.env.repo.join("rechnung.py");
            let mut text = std::fs::read_to_string(&path).expect("rechnung.py");
            text.push_str("\n# planted after the judge\nimport os  # noqa\n");
            std::fs::write(&path, text).expect("write");
            std::fs::write(ci.env.repo.join("planted.py"), "PLANTED = True\n").expect("write");
        } else {
            ci.env.git(&["checkout", "-q", "-f", &ci.sha]);
            ci.env.git(&["clean", "-qfdx"]);
        }
        let r = round(&ci, &model, &branch, ask(11), "issue_comment");
        let tip = remote_tip(&ci, &branch);
        if tip != ci.sha {
            let file = remote_git(&ci.remote, &["show", &format!("{tip}:rechnung.py")]).1;
            let planted = remote_git(&ci.remote, &["ls-tree", "--name-only", &tip]).1;
            if file != clean_solution() || planted.contains("planted.py") {
                holes.push(format!(
                    "{point} ({how}): pushed a tree nobody judged (`{}`): planted.py {}, rechnung.py the judged one: {}",
                    decision(&r),
                    planted.contains("planted.py"),
                    file == clean_solution()
                ));
            }
        }
        if ci.authenticated_pushes() > 1 || round_records(&ci) > 1 {
            holes.push(format!(
                "{point} ({how}): {} pushes, {} answers",
                ci.authenticated_pushes(),
                round_records(&ci)
            ));
        }
    }
    finish_holes(holes);
}

// ---------------------------------------------------------------------------
// Two processes of one round

/// "a second process of the same round waits for nothing (exit 5)": while
/// the first runs its agent, a second `loopd ci` of the same event exits 5
/// at once — no model call, no comment, no push, one JSON object — and the
/// first goes on to one push and one answer.
#[test]
fn attack41c_08_a_second_process_of_the_same_round_exits_5_and_nothing_is_pushed_twice() {
    let ci = ci_env();
    let branch = loopd_pr(&ci);
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            Turn {
                delay_ms: 8_000,
                ..turn(vec![read("rechnung.py")])
            },
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let first_cmd = ci_cmd(
        &ci,
        &model,
        &[],
        &branch,
        &ask(11).to_string(),
        "issue_comment",
        "first",
    );
    let dir = ci.env.tmp.path().to_path_buf();
    let first = std::thread::spawn(move || timed(first_cmd, &dir, "first", 300));
    wait_for_requests(&model, 0, 1);
    let second = timed_round(&ci, &model, &branch, "second").expect("the second process hung");
    let mut holes = Vec::new();
    if second.code != 5 {
        holes.push(format!(
            "the second process: `{}` exit {}: {}",
            decision(&second),
            second.code,
            tail(&second.stderr)
        ));
    }
    if !one_object(&second) {
        holes.push(format!(
            "the second process: no JSON object: {:?}",
            second.stdout
        ));
    }
    let comments_meanwhile = ci.gh.comments().len();
    let first = first
        .join()
        .expect("thread")
        .expect("the first process hung");
    if decision(&first) != "round_pushed" {
        holes.push(format!(
            "the first process: `{}` exit {}: {}",
            decision(&first),
            first.code,
            tail(&first.stderr)
        ));
    }
    if ci.authenticated_pushes() != 1 || round_records(&ci) != 1 || ci.gh.comments().len() != 1 {
        holes.push(format!(
            "{} pushes, {} records, {} comments ({} while both ran)",
            ci.authenticated_pushes(),
            round_records(&ci),
            ci.gh.comments().len(),
            comments_meanwhile
        ));
    }
    if model.session_count(Role::Agent) != 1 {
        holes.push(format!(
            "{} agent sessions",
            model.session_count(Role::Agent)
        ));
    }
    finish_holes(holes);
}

// ---------------------------------------------------------------------------
// Every kind of round killed after its own push

/// `[ci] max_rounds = 1` and a round of `kind` on #1: (branch, event, name).
fn kind_setup(ci: &mut Ci, kind: &str) -> (String, Value, &'static str) {
    ci.configure("[ci]\nmax_rounds = 1\n", "one round per pull request");
    match kind {
        "check_run" => {
            let branch = loopd_pr(ci);
            let event = check_failed(ci, &branch, 7);
            (branch, event, "check_run")
        }
        "issue_comment" => (loopd_pr(ci), ask(9), "issue_comment"),
        "review_comment" => (
            loopd_pr(ci),
            review_comment(9, "acme/rechnung", ASK),
            "pull_request_review_comment",
        ),
        "review" => (
            loopd_pr(ci),
            review(9, "MEMBER", "User", json!(ASK)),
            "pull_request_review",
        ),
        "merge_comment" => {
            let (branch, _, _) = unmergeable_pr(ci);
            (
                branch,
                issue_comment(9, "OWNER", "User", "/loopd merge"),
                "issue_comment",
            )
        }
        _ => dispatched_round(ci),
    }
}

/// "a run killed between the two (crash point `ci:round-pushed`) leaves the
/// note, and the next run of the event ... edits it into the answer without
/// a round and without a second push" and "Rounds and spend are counted
/// from the records": killed at `ci:round-pushed` and at `journal:pushed`,
/// re-run on the checkout and state it left: one push, one answer with its
/// round record, and a later request at `max_rounds = 1` is `capped`.
fn killed_after_push(kind: &str) {
    let mut holes = Vec::new();
    for point in ["ci:round-pushed", "journal:pushed"] {
        let mut ci = ci_env();
        let (branch, event, name) = kind_setup(&mut ci, kind);
        let model = one_clean_fix();
        let r = round_with(&ci, &model, &branch, event.clone(), name, &crash_at(point));
        if r.code == 0 || ci.authenticated_pushes() != 1 {
            holes.push(format!(
                "{point}: the first run was not killed after one push (`{}` exit {}, {} pushes)",
                decision(&r),
                r.code,
                ci.authenticated_pushes()
            ));
            continue;
        }
        let pushed = remote_tip(&ci, &branch);
        let calls = model.requests().len();
        let r = round(&ci, &model, &branch, event.clone(), name);
        if decision(&r) != "answered"
            || ci.authenticated_pushes() != 1
            || remote_tip(&ci, &branch) != pushed
            || model.requests().len() != calls
        {
            holes.push(format!(
                "{point}: the re-run `{}` exit {}, {} pushes, {} model calls more: {}",
                decision(&r),
                r.code,
                ci.authenticated_pushes(),
                model.requests().len() - calls,
                tail(&r.stderr)
            ));
        }
        let bots: Vec<_> = ci
            .gh
            .comments()
            .into_iter()
            .filter(|c| c.author_type == "Bot")
            .collect();
        if bots.len() != 1 || round_records(&ci) != 1 {
            holes.push(format!(
                "{point}: {} comments of loopd's, {} round records: {:?}",
                bots.len(),
                round_records(&ci),
                bots.iter().map(|c| c.body.clone()).collect::<Vec<_>>()
            ));
        }
        // The same event once more: nothing.
        let r = round(&ci, &model, &branch, event, name);
        if decision(&r) != "skipped" || ci.authenticated_pushes() != 1 {
            holes.push(format!(
                "{point}: a third run `{}`, {} pushes",
                decision(&r),
                ci.authenticated_pushes()
            ));
        }
        // The round counted: a later request is capped.
        let quiet = no_model();
        let r = round(
            &ci,
            &quiet,
            &branch,
            issue_comment(50, "MEMBER", "User", "Please also handle an empty invoice."),
            "issue_comment",
        );
        if decision(&r) != "capped" || !quiet.requests().is_empty() {
            holes.push(format!(
                "{point}: a later request at max_rounds = 1 was `{}` ({} model calls): the round was not counted",
                decision(&r),
                quiet.requests().len()
            ));
        }
    }
    finish_holes(holes);
}

#[test]
fn attack41c_09a_a_check_round_killed_after_its_push_is_answered_once_and_counted() {
    killed_after_push("check_run");
}

#[test]
fn attack41c_09b_a_comment_round_killed_after_its_push_is_answered_once_and_counted() {
    killed_after_push("issue_comment");
}

#[test]
fn attack41c_09c_a_review_comment_round_killed_after_its_push_is_answered_once_and_counted() {
    killed_after_push("review_comment");
}

#[test]
fn attack41c_09d_a_review_round_killed_after_its_push_is_answered_once_and_counted() {
    killed_after_push("review");
}

#[test]
fn attack41c_09e_a_merge_comment_round_killed_after_its_push_is_answered_once_and_counted() {
    killed_after_push("merge_comment");
}

#[test]
fn attack41c_09f_a_dispatched_merge_round_killed_after_its_push_is_answered_once_and_counted() {
    killed_after_push("dispatch");
}

// ---------------------------------------------------------------------------
// `--json` on every error path

/// "`--json` prints one object" and "An API or push failure ... ends with
/// decision `error` and exit 5": every failure reachable from outside
/// prints exactly one JSON object, and never the token.
#[test]
fn attack41c_10_every_error_prints_one_json_object() {
    let mut holes = Vec::new();
    let cases = [
        "no token",
        "an empty token",
        "no event file",
        "an event that is no JSON",
        "an event that is a list",
        "a comment with no body nor author",
        "no GITHUB_REPOSITORY",
        "an unreachable API",
        "pulls/1 answers 500",
        "pulls/1 answers 404",
        "the comments list answers 500",
        "the note cannot be written (500)",
        "the push is refused",
        "base-pushed: the list answers 500",
        "base-pushed: the dispatch answers 500",
        "base-pushed: the dispatch answers 403",
        "base-pushed: no token",
        "dispatch: pulls/1 answers 500",
    ];
    for case in cases {
        let mut ci = ci_env();
        let base = case.starts_with("base-pushed") || case.starts_with("dispatch");
        let (branch, head) = if base {
            let (b, h, _) = unmergeable_pr(&mut ci);
            (b, h)
        } else {
            (loopd_pr(&ci), String::new())
        };
        let model = one_clean_fix();
        let (args, event, name, branch_name): (Vec<&str>, String, &str, String) =
            if case.starts_with("base-pushed") {
                (
                    vec!["--base-pushed"],
                    push_event().to_string(),
                    "push",
                    "main".to_owned(),
                )
            } else if case.starts_with("dispatch") {
                (
                    vec![],
                    merge_dispatch(json!(1), &head).to_string(),
                    "repository_dispatch",
                    branch.clone(),
                )
            } else {
                (vec![], ask(11).to_string(), "issue_comment", branch.clone())
            };
        let event = match case {
            "an event that is no JSON" => "{\"action\": \"created\", \"comment\": {".to_owned(),
            "an event that is a list" => "[]".to_owned(),
            "a comment with no body nor author" => {
                json!({"action": "created", "issue": {"number": 1, "pull_request": {}}, "comment": {"id": 11}}).to_string()
            }
            _ => event,
        };
        let mut cmd = ci_cmd(&ci, &model, &args, &branch_name, &event, name, "r");
        match case {
            "no token" | "base-pushed: no token" => {
                cmd.env_remove("GITHUB_TOKEN");
            }
            "an empty token" => {
                cmd.env("GITHUB_TOKEN", "");
            }
            "no event file" => {
                cmd.env("GITHUB_EVENT_PATH", ci.env.tmp.path().join("no-such.json"));
            }
            "no GITHUB_REPOSITORY" => {
                cmd.env_remove("GITHUB_REPOSITORY");
            }
            "an unreachable API" => {
                cmd.env("GITHUB_API_URL", "http://127.0.0.1:9");
            }
            "pulls/1 answers 500" | "dispatch: pulls/1 answers 500" => {
                ci.gh.fail("GET", "/pulls/1", 500, 1000)
            }
            "pulls/1 answers 404" => ci.gh.fail("GET", "/pulls/1", 404, 1000),
            "the comments list answers 500" => ci.gh.fail("GET", "/issues/1/comments", 500, 1000),
            "the note cannot be written (500)" => {
                ci.gh.fail("POST", "/issues/1/comments", 500, 1000)
            }
            "the push is refused" => {
                let hook = ci.remote.join("hooks/pre-receive");
                std::fs::create_dir_all(hook.parent().expect("hooks")).expect("hooks");
                std::fs::write(&hook, "#!/bin/sh\necho refused by policy >&2\nexit 1\n")
                    .expect("hook");
                mode(&hook, 0o755);
            }
            "base-pushed: the list answers 500" => {
                ci.gh.fail("GET", "/repos/acme/rechnung/pulls", 500, 1000)
            }
            "base-pushed: the dispatch answers 500" => ci.gh.fail("POST", "/dispatches", 500, 1000),
            "base-pushed: the dispatch answers 403" => ci.gh.fail("POST", "/dispatches", 403, 1000),
            _ => {}
        }
        let tip = remote_tip(&ci, &branch);
        let Some(r) = timed(cmd, ci.env.tmp.path(), "r", 300) else {
            holes.push(format!("{case}: hung"));
            continue;
        };
        eprintln!("{case}: exit {} {}", r.code, r.stdout.trim());
        if !one_object(&r) {
            holes.push(format!(
                "{case}: exit {}, stdout {:?} is not one JSON object: {}",
                r.code,
                r.stdout,
                tail(&r.stderr)
            ));
        } else if r.code != 0 && decision(&r) == "round_pushed" {
            holes.push(format!("{case}: exit {} with `round_pushed`", r.code));
        }
        if r.stdout.contains(TOKEN) || r.stderr.contains(TOKEN) {
            holes.push(format!("{case}: the token printed"));
        }
        if case == "the note cannot be written (500)" && remote_tip(&ci, &branch) != tip {
            holes.push(format!(
                "{case}: pushed with no note written (`{}`): exactly once is lost",
                decision(&r)
            ));
        }
        if (case == "the push is refused" || case.contains("500") || case.contains("404"))
            && r.code != 5
        {
            holes.push(format!(
                "{case}: an API or push failure ended `{}` exit {} (the docs: `error`, exit 5)",
                decision(&r),
                r.code
            ));
        }
    }
    finish_holes(holes);
}

/// The answer cannot be edited after the push (the API answers 500 to
/// the PATCH): `error`, exit 5, one JSON object; the next run of the event
/// with the API back edits the note into the answer — no round, no second
/// push, one record.
#[test]
fn attack41c_11_an_answer_lost_after_the_push_is_given_by_the_next_run_once() {
    let ci = ci_env();
    let branch = loopd_pr(&ci);
    let model = one_clean_fix();
    ci.gh.fail("PATCH", "/comments/", 500, 1000);
    let r = round(&ci, &model, &branch, ask(11), "issue_comment");
    let mut holes = Vec::new();
    if !one_object(&r) || r.code != 5 {
        holes.push(format!(
            "the lost answer: `{}` exit {}, stdout {:?}",
            decision(&r),
            r.code,
            r.stdout
        ));
    }
    let pushed = remote_tip(&ci, &branch);
    ci.gh.state.lock().expect("state").failures.clear();
    let calls = model.requests().len();
    let r = round(&ci, &model, &branch, ask(11), "issue_comment");
    if decision(&r) != "answered"
        || ci.authenticated_pushes() != 1
        || remote_tip(&ci, &branch) != pushed
        || model.requests().len() != calls
        || round_records(&ci) != 1
        || ci.gh.comments().len() != 1
    {
        holes.push(format!(
            "the next run: `{}` exit {}, {} pushes, {} model calls more, {} records, {} comments: {}",
            decision(&r),
            r.code,
            ci.authenticated_pushes(),
            model.requests().len() - calls,
            round_records(&ci),
            ci.gh.comments().len(),
            tail(&r.stderr)
        ));
    }
    finish_holes(holes);
}

// ---------------------------------------------------------------------------
// The planted link under the ids of other kinds of events

/// The fix (a) for every kind of event's derived id, not only a comment's:
/// `pr1-check-run-7`, `pr1-base-<head>` (a dispatch), and the review's and
/// review comment's ids. A guessed id the round does not use is no hole
/// (the round's `job_id` says which it used).
#[test]
fn attack41c_12_a_planted_link_under_every_kind_of_round_id_is_refused() {
    let mut holes = Vec::new();
    for kind in [
        "check_run",
        "review_comment",
        "review",
        "merge_comment",
        "dispatch",
    ] {
        let mut ci = ci_env();
        let (branch, event, name) = kind_setup(&mut ci, kind);
        let head = ci.env.git(&["rev-parse", "HEAD"]).trim().to_owned();
        let id = match kind {
            "check_run" => "pr1-check-run-7".to_owned(),
            "review_comment" => "pr1-pull-request-review-comment-9".to_owned(),
            "review" => "pr1-pull-request-review-9".to_owned(),
            "merge_comment" => "pr1-issue-comment-9".to_owned(),
            _ => format!("pr1-base-{head}"),
        };
        let runs = runs_dir(&ci.env);
        let theirs = elsewhere(&ci.env, "theirs");
        std::os::unix::fs::symlink(&theirs, runs.join(&id)).expect("link");
        let model = one_clean_fix();
        let Some(r) = timed(
            ci_cmd(&ci, &model, &[], &branch, &event.to_string(), name, "r"),
            ci.env.tmp.path(),
            "r",
            240,
        ) else {
            holes.push(format!("{kind}: hung"));
            continue;
        };
        let used = summary_job_id(&r);
        if !used.is_empty() && used != id {
            eprintln!("{kind}: the round's id is {used}, not the guessed {id}: no verdict");
            continue;
        }
        if r.code != 5 || ci.authenticated_pushes() != 0 || !listing(&theirs).is_empty() {
            holes.push(format!(
                "{kind} ({id}): `{}` exit {}, {} pushes, written {:?}: {}",
                decision(&r),
                r.code,
                ci.authenticated_pushes(),
                listing(&theirs).len(),
                tail(&r.stderr)
            ));
        }
    }
    finish_holes(holes);
}

// ---------------------------------------------------------------------------
// The note of a push

/// A round killed after its push (`ci:round-pushed`), then someone pushes a
/// commit on top of loopd's before the event runs again (on the cached
/// checkout at `max_rounds = 1`; on a fresh checkout of the new head at the
/// default 3 — "that round runs again (its push still happens once)"): the
/// re-run never pushes again nor over their commit, and the round that did
/// push is answered once (its record is what the cap counts).
#[test]
fn attack41c_13_a_pushed_round_with_a_commit_on_top_is_answered_never_pushed_again() {
    let mut holes = Vec::new();
    for (kind, capped) in [
        ("issue_comment", true),
        ("check_run", true),
        ("issue_comment", false),
        ("check_run", false),
    ] {
        let mut ci = ci_env();
        let (branch, event, name) = if capped {
            kind_setup(&mut ci, kind)
        } else {
            let branch = loopd_pr(&ci);
            let event = match kind {
                "check_run" => check_failed(&ci, &branch, 7),
                _ => ask(9),
            };
            (
                branch,
                event,
                if kind == "check_run" {
                    "check_run"
                } else {
                    "issue_comment"
                },
            )
        };
        let kind = format!("{kind} (max_rounds {})", if capped { 1 } else { 3 });
        let model = one_clean_fix();
        killed_round(&ci, &model, &branch, &event, name, "ci:round-pushed");
        assert_eq!(ci.authenticated_pushes(), 1, "{kind}");
        let ours = remote_tip(&ci, &branch);
        let theirs = commit_tree(&ci, &ours, "a person's commit on top");
        push_branch(&ci, &theirs, &branch);
        if !capped {
            // The runner vanished: the next checks out the head as it is.
            ci.env.git(&["fetch", "-q", "origin", &branch]);
            ci.env.git(&["checkout", "-q", "-f", "FETCH_HEAD"]);
        }
        let r = round(&ci, &model, &branch, event, name);
        if ci.authenticated_pushes() != 1 || remote_tip(&ci, &branch) != theirs {
            holes.push(format!(
                "{kind}: pushed again (`{}`): {} pushes, tip theirs: {}",
                decision(&r),
                ci.authenticated_pushes(),
                remote_tip(&ci, &branch) == theirs
            ));
        }
        if round_records(&ci) != 1 {
            holes.push(format!(
                "{kind}: the pushed round left {} round records (`{}` exit {}, why {}): the note stays, the round is not counted",
                round_records(&ci),
                decision(&r),
                r.code,
                serde_json::from_str::<Value>(r.stdout.trim())
                    .map(|v| v["why"].to_string())
                    .unwrap_or_default()
            ));
        }
    }
    finish_holes(holes);
}

/// "only records in comments written by an app ... count — a person who
/// writes one records nothing": a person's `pushing` note naming the
/// branch's tip makes no answer of an event that was never run; the round
/// runs, pushes once and answers.
#[test]
fn attack41c_14_a_persons_pushing_note_is_no_record() {
    let ci = ci_env();
    let branch = loopd_pr(&ci);
    ci.gh.add_comment(
        1,
        "mallory",
        "User",
        "NONE",
        &format!(
            "Done.\n\n<!-- loopd: pushing event=issue_comment:11 commit={} cost=0.0000 -->",
            ci.sha
        ),
    );
    let model = one_clean_fix();
    let r = round(&ci, &model, &branch, ask(11), "issue_comment");
    assert_eq!(
        (decision(&r).as_str(), ci.authenticated_pushes()),
        ("round_pushed", 1),
        "a person's note decided the round: {}",
        r.stdout
    );
    assert_eq!(round_records(&ci), 1);
}
