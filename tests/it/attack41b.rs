//! attack41b: two new surfaces of `loopd ci`, attacked blind (from
//! docs/ci.md "Following a pull request", docs/security.md and the test
//! harness only): the base sweep (`loopd ci --base-pushed` and the
//! `repository_dispatch` `loopd-merge` round it starts) and the
//! continuation of an interrupted round (its job id derived from the
//! event). Each test asserts a PROMISE of the docs; a failing test is a
//! hole.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

pub(crate) use crate::attack41::{commit_tree, push_branch, review};
use crate::ci::*;
use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

pub(crate) fn finish_holes(holes: Vec<String>) {
    assert!(holes.is_empty(), "HOLES:\n{}", holes.join("\n"));
}

pub(crate) fn decision(r: &RunResult) -> String {
    serde_json::from_str::<Value>(r.stdout.trim())
        .ok()
        .and_then(|v| v["decision"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The pull request numbers dispatched so far, sorted.
fn dispatched_prs(ci: &Ci) -> Vec<u64> {
    let mut prs: Vec<u64> = dispatches(ci)
        .iter()
        .map(|d| d["client_payload"]["pr"].as_u64().unwrap_or(u64::MAX))
        .collect();
    prs.sort_unstable();
    prs
}

/// The dispatched event as GitHub delivers it.
pub(crate) fn merge_dispatch(pr: Value, head: &str) -> Value {
    json!({"action": "loopd-merge", "client_payload": {"pr": pr, "head_sha": head}, "sender": {"login": "github-actions[bot]", "type": "Bot"}, "repository": {"full_name": "acme/rechnung"}})
}

/// Pull request #1, loopd's, whose base moved under it: `main` and the
/// branch each changed rechnung.py's first line. The checkout is at the
/// branch's head; GitHub says it no longer merges. (branch, head, main's
/// tip)
pub(crate) fn unmergeable_pr(ci: &mut Ci) -> (String, String, String) {
    let buggy = std::fs::read_to_string(ci.env.repo.join("rechnung.py")).expect("rechnung.py");
    let first = buggy.lines().next().expect("a first line").to_owned();
    let out = moved_base(
        ci,
        "rechnung.py",
        &buggy,
        &buggy.replacen(&first, "\"\"\"Invoices (the base's words).\"\"\"", 1),
        &buggy.replacen(&first, "\"\"\"Invoices (the branch's words).\"\"\"", 1),
    );
    ci.gh.set_pull_meta(1, json!({"mergeable": false}));
    out
}

/// The `cost=` of loopd's round record on #1.
pub(crate) fn record_cost(ci: &Ci) -> Option<String> {
    ci.gh.comments().iter().find_map(|c| {
        let at = c.body.find("<!-- loopd: round event=")?;
        let rest = &c.body[at..];
        let cost = rest.find("cost=")?;
        Some(
            rest[cost + 5..]
                .split(|ch: char| ch.is_whitespace())
                .next()
                .unwrap_or("")
                .to_owned(),
        )
    })
}

/// Call `f` on every path under `dir` with its own metadata, links not
/// followed (one walk for `files_holding` and attack41c's `listing`).
pub(crate) fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        f(&p, &meta);
        if meta.is_dir() {
            walk(&p, f);
        }
    }
}

/// Every file under `dir` (links not followed) whose bytes hold `needle`.
pub(crate) fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, &mut |p, meta| {
        if meta.is_file() {
            if let Ok(bytes) = std::fs::read(p) {
                if String::from_utf8_lossy(&bytes).contains(needle) {
                    out.push(p.to_path_buf());
                }
            }
        }
    });
    out
}

pub(crate) fn mode(path: &Path, bits: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(bits)).expect("chmod");
}

/// The state dir and its `runs/`, as loopd makes them (0700).
pub(crate) fn runs_dir(env: &TestEnv) -> PathBuf {
    let runs = env.state.join("runs");
    std::fs::create_dir_all(&runs).expect("runs");
    mode(&env.state, 0o700);
    mode(&runs, 0o700);
    runs
}

/// `runs/<id>` (and the state dir and `runs/`), as loopd makes them (0700).
pub(crate) fn run_dir(env: &TestEnv, id: &str) -> PathBuf {
    let dir = runs_dir(env).join(id);
    std::fs::create_dir_all(&dir).expect("run dir");
    mode(&dir, 0o700);
    dir
}

/// An attacker's directory outside the state dir.
pub(crate) fn elsewhere(env: &TestEnv, name: &str) -> PathBuf {
    let dir = env.tmp.path().join(name);
    std::fs::create_dir_all(&dir).expect("elsewhere");
    dir
}

/// What a run did, for a hole's message: its decision, exit code, pushes
/// and model calls.
pub(crate) fn what_ran(ci: &Ci, model: &ScriptedModel, r: &RunResult) -> String {
    format!(
        "`{}` exit {}, {} pushes, {} model calls",
        decision(r),
        r.code,
        ci.authenticated_pushes(),
        model.requests().len()
    )
}

/// An agent that gives up: three sessions that change nothing.
fn gives_up() -> ScriptedModel {
    let quit = || session(vec![turn(vec![text("I cannot resolve this.")])]);
    ScriptedModel::start(scenario(
        vec![quit(), quit(), quit()],
        vec![pass(), pass(), pass()],
    ))
}

/// The merge round a base push dispatches for #1, whose base moved under
/// it: (branch, event, name).
pub(crate) fn dispatched_round(ci: &mut Ci) -> (String, Value, &'static str) {
    let (branch, head, _) = unmergeable_pr(ci);
    (
        branch,
        merge_dispatch(json!(1), &head),
        "repository_dispatch",
    )
}

// ---------------------------------------------------------------------------
// The base sweep: `loopd ci --base-pushed`

/// "for each that loopd follows (same rules as above) ... and for each that
/// does not [merge], dispatches": open, same repository, loopd's branch or
/// the label, into the pushed branch, `mergeable: false`. Nothing else.
#[test]
fn attack41b_01_the_base_sweep_dispatches_only_followed_open_unmergeable_same_repo_prs() {
    let mut ci = ci_env();
    let (_, head, _) = unmergeable_pr(&mut ci);
    let loopd = json!([{"name": "loopd"}]);
    // (number, head branch, base, meta); every head is the same commit.
    let others = [
        (
            2,
            "feature/labelled",
            "main",
            json!({"mergeable": false, "labels": loopd}),
        ),
        (
            3,
            "loopd/autofix/fork00000000",
            "main",
            json!({"mergeable": false, "head_repo": "mallory/rechnung"}),
        ),
        (
            4,
            "loopd/autofix/closed000000",
            "main",
            json!({"mergeable": false, "state": "closed"}),
        ),
        (
            5,
            "loopd/autofix/merged000000",
            "main",
            json!({"mergeable": false, "state": "closed", "merged": true}),
        ),
        (6, "feature/unfollowed", "main", json!({"mergeable": false})),
        (
            7,
            "feature/labelled-fork",
            "main",
            json!({"mergeable": false, "labels": loopd, "head_repo": "mallory/rechnung"}),
        ),
        (
            8,
            "loopd/autofix/merges000000",
            "main",
            json!({"mergeable": true}),
        ),
        (
            9,
            "feature/other-label",
            "main",
            json!({"mergeable": false, "labels": [{"name": "loopd-no"}]}),
        ),
        (
            10,
            "loopd/autofix/release00000",
            "release",
            json!({"mergeable": false}),
        ),
        (
            11,
            "feature/labelled-closed",
            "main",
            json!({"mergeable": false, "labels": loopd, "state": "closed"}),
        ),
        (
            12,
            "loopd/autofix/fork-case000",
            "main",
            json!({"mergeable": false, "head_repo": "acme/rechnung-fork"}),
        ),
        (
            13,
            "loopd/autofix/no-repo00000",
            "main",
            json!({"mergeable": false, "head": {"ref": "loopd/autofix/no-repo00000", "sha": head, "repo": null}}),
        ),
    ];
    for (n, head_ref, base, meta) in others {
        push_branch(&ci, &head, head_ref);
        ci.gh.add_pull(head_ref, base);
        ci.gh.set_pull_meta(n, meta);
    }
    let quiet = no_model();
    let r = base_pushed(&ci, &quiet, "main");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(decision(&r), "merges_started", "{}", r.stdout);
    assert_eq!(
        dispatched_prs(&ci),
        [1, 2],
        "only #1 (loopd's) and #2 (labelled): {:?}",
        dispatches(&ci)
    );
    for d in dispatches(&ci) {
        assert_eq!(d["event_type"], "loopd-merge", "{d}");
        assert_eq!(d["client_payload"]["head_sha"], head.as_str(), "{d}");
    }
    assert!(other_writes(&ci).is_empty(), "{:?}", other_writes(&ci));
    assert_eq!((ci.authenticated_pushes(), quiet.requests().len()), (0, 0));
}

/// The pushed branch's name is data: a name that would smuggle another
/// `base=` (or cut the query) into the API call lists no pull request into
/// another branch, and dispatches nothing.
#[test]
fn attack41b_02_odd_pushed_branch_names_dispatch_nothing_for_main() {
    let mut ci = ci_env();
    let _ = unmergeable_pr(&mut ci);
    let quiet = no_model();
    let mut holes = Vec::new();
    for name in [
        "main&base=main",
        "x&base=main",
        "main#frag",
        "main?base=main",
        "main base",
        " main",
        "main ",
        "main%26base%3Dmain",
        "main%00",
        "m\u{e4}in",
        "main\u{202e}",
        "main/../main",
        "main\nbase=main",
        "*",
        "",
    ] {
        let before = dispatches(&ci).len();
        let r = base_pushed(&ci, &quiet, name);
        if r.code != 0 && r.code != 2 {
            holes.push(format!("{name:?}: exit {} {}", r.code, tail(&r.stderr)));
        }
        if dispatches(&ci).len() != before {
            holes.push(format!(
                "{name:?}: dispatched {:?} for a pull request into `main`",
                &dispatches(&ci)[before..]
            ));
        }
    }
    if !other_writes(&ci).is_empty() || ci.authenticated_pushes() != 0 {
        holes.push(format!(
            "writes {:?}, pushes {}",
            other_writes(&ci),
            ci.authenticated_pushes()
        ));
    }
    // The control: `main` itself.
    let r = base_pushed(&ci, &quiet, "main");
    assert_eq!(decision(&r), "merges_started", "{}", r.stdout);
    assert!(quiet.requests().is_empty());
    finish_holes(holes);
}

/// "The `base` job has ... no model credential": the sweep needs neither a
/// model credential nor an agent CLI, and the token goes only to the API.
#[test]
fn attack41b_03_the_base_sweep_needs_no_model_credential_nor_agent_and_keeps_the_token() {
    let mut ci = ci_env();
    let (_, head, _) = unmergeable_pr(&mut ci);
    let event_path = ci.env.tmp.path().join("event.json");
    std::fs::write(&event_path, push_event().to_string()).expect("event");
    let summary = ci.env.tmp.path().join("step-summary.md");
    let r = finish(
        actions_cmd(
            &ci,
            None,
            &["--base-pushed"],
            "main",
            "push",
            &event_path,
            &summary,
        )
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("loopd ci"),
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(decision(&r), "merges_started", "{}", r.stdout);
    assert_eq!(
        dispatches(&ci),
        [json!({"event_type": "loopd-merge", "client_payload": {"pr": 1, "head_sha": head}})]
    );
    let paths: Vec<String> = ci.gh.writes().iter().map(|q| q.path.clone()).collect();
    assert_eq!(paths, ["/repos/acme/rechnung/dispatches"]);
    let summary = std::fs::read_to_string(&summary).unwrap_or_default();
    for (what, text) in [
        ("stdout", &r.stdout),
        ("stderr", &r.stderr),
        ("step summary", &summary),
    ] {
        assert!(!text.contains(TOKEN), "the token in the {what}");
    }
    assert!(files_holding(&ci.env.state, TOKEN).is_empty());
    assert!(files_holding(&ci.env.repo, TOKEN).is_empty());
    assert_eq!(ci.authenticated_pushes(), 0);
}

/// "asked again after 2, 4 and 8 s while GitHub has not computed it, then
/// named in `why` as unknown": `mergeable: null` is no dispatch.
#[test]
fn attack41b_04_a_pull_request_github_has_not_computed_is_asked_again_then_named_unknown() {
    let mut ci = ci_env();
    let (_, head, _) = unmergeable_pr(&mut ci);
    ci.gh.set_pull_meta(1, json!({"mergeable": null}));
    push_branch(&ci, &head, "feature/labelled");
    ci.gh.add_pull("feature/labelled", "main");
    ci.gh.set_pull_meta(
        2,
        json!({"mergeable": false, "labels": [{"name": "loopd"}]}),
    );
    let quiet = no_model();
    let r = base_pushed(&ci, &quiet, "main");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(dispatched_prs(&ci), [2]);
    let asked = ci
        .gh
        .requests()
        .iter()
        .filter(|q| q.method == "GET" && q.path == "/repos/acme/rechnung/pulls/1")
        .count();
    assert!(asked >= 4, "asked {asked} times");
    let rep = report(&r);
    let why = rep["why"].as_str().unwrap_or("");
    assert!(
        why.contains("#1") && (why.contains("unknown") || why.contains("had not said")),
        "{rep}"
    );
}

/// A push to one of loopd's own branches is loopd's (`skipped`), even with a
/// followed pull request into it that no longer merges.
#[test]
fn attack41b_05_a_base_push_to_a_loopd_branch_is_skipped() {
    let mut ci = ci_env();
    let (_, head, _) = unmergeable_pr(&mut ci);
    let base = "loopd/autofix/000000000000";
    push_branch(&ci, &head, base);
    push_branch(&ci, &head, "feature/onto-loopd");
    ci.gh.add_pull("feature/onto-loopd", base);
    ci.gh.set_pull_meta(
        2,
        json!({"mergeable": false, "labels": [{"name": "loopd"}]}),
    );
    let quiet = no_model();
    let r = base_pushed(&ci, &quiet, base);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(decision(&r), "skipped", "{}", r.stdout);
    assert!(dispatches(&ci).is_empty(), "{:?}", dispatches(&ci));
}

/// "A pull request whose head is the repository's default branch is
/// refused": the sweep starts no round on it either.
#[test]
fn attack41b_06_a_labelled_pull_request_from_the_default_branch_gets_no_merge_round() {
    let mut ci = ci_env();
    let (_, head, main_tip) = unmergeable_pr(&mut ci);
    push_branch(&ci, &head, "release");
    ci.gh.add_pull("main", "release");
    ci.gh.set_pull_meta(
        2,
        json!({"mergeable": false, "labels": [{"name": "loopd"}]}),
    );
    let quiet = no_model();
    let event = json!({"repository": {"full_name": "acme/rechnung", "fork": false, "default_branch": "main"}});
    let r = loopd_ci(
        &ci,
        &quiet,
        &["--base-pushed"],
        "release",
        event,
        "push",
        &[],
    )
    .0;
    assert!(
        dispatches(&ci).is_empty(),
        "a merge round dispatched for `main` as a head: {:?} ({})",
        dispatches(&ci),
        r.stdout
    );
    // And the dispatch itself, forged, pushes nothing to `main`.
    let model = one_clean_fix();
    let r = round(
        &ci,
        &model,
        "main",
        merge_dispatch(json!(2), &main_tip),
        "repository_dispatch",
    );
    assert_eq!(remote_tip(&ci, "main"), main_tip, "{}", r.stdout);
    assert_eq!(ci.authenticated_pushes(), 0);
}

// ---------------------------------------------------------------------------
// The dispatched round: `repository_dispatch` `loopd-merge`

/// A dispatch is read again before anything runs: one naming a pull request
/// loopd does not follow, a fork's, a closed one, a head that is not the
/// pull request's, or with a payload that names nothing, runs nothing.
#[test]
fn attack41b_07_forged_and_odd_dispatches_run_nothing() {
    let mut ci = ci_env();
    let (branch, head, main_tip) = unmergeable_pr(&mut ci);
    for (n, head_ref, meta) in [
        (2, "feature/unfollowed", json!({"mergeable": false})),
        (
            3,
            "loopd/autofix/fork00000000",
            json!({"mergeable": false, "head_repo": "mallory/rechnung"}),
        ),
        (
            4,
            "loopd/autofix/closed000000",
            json!({"mergeable": false, "state": "closed"}),
        ),
        (
            5,
            "feature/labelled-fork",
            json!({"mergeable": false, "labels": [{"name": "loopd"}], "head_repo": "mallory/rechnung"}),
        ),
    ] {
        push_branch(&ci, &head, head_ref);
        ci.gh.add_pull(head_ref, "main");
        ci.gh.set_pull_meta(n, meta);
    }
    let quiet = no_model();
    let dispatch = |pr: Value, sha: Value| json!({"action": "loopd-merge", "client_payload": {"pr": pr, "head_sha": sha}, "sender": {"login": "github-actions[bot]", "type": "Bot"}});
    let cases: Vec<(&str, Value)> = vec![
        ("unfollowed #2", dispatch(json!(2), json!(head))),
        ("fork's #3", dispatch(json!(3), json!(head))),
        ("closed #4", dispatch(json!(4), json!(head))),
        ("labelled fork's #5", dispatch(json!(5), json!(head))),
        ("a head that is main's", dispatch(json!(1), json!(main_tip))),
        (
            "a head that is no commit",
            dispatch(json!(1), json!("0".repeat(40))),
        ),
        (
            "no head",
            json!({"action": "loopd-merge", "client_payload": {"pr": 1}}),
        ),
        ("an empty head", dispatch(json!(1), json!(""))),
        ("a null head", dispatch(json!(1), Value::Null)),
        ("a head as a list", dispatch(json!(1), json!([head]))),
        (
            "a head with a ref",
            dispatch(json!(1), json!(format!("{head}:refs/heads/main"))),
        ),
        (
            "an option as the head",
            dispatch(json!(1), json!("--upload-pack=touch /tmp/pwned")),
        ),
        ("HEAD as the head", dispatch(json!(1), json!("HEAD"))),
        (
            "no pr",
            json!({"action": "loopd-merge", "client_payload": {"head_sha": head}}),
        ),
        ("pr 0", dispatch(json!(0), json!(head))),
        ("pr -1", dispatch(json!(-1), json!(head))),
        ("pr huge", dispatch(json!(u64::MAX), json!(head))),
        ("pr 2^64+1 as a number", {
            let text = format!(
                "{{\"action\":\"loopd-merge\",\"client_payload\":{{\"pr\":18446744073709551617,\"head_sha\":\"{head}\"}}}}"
            );
            serde_json::from_str(&text).unwrap_or(Value::Null)
        }),
        ("pr 1.5", dispatch(json!(1.5), json!(head))),
        ("pr a path", dispatch(json!("1/../2"), json!(head))),
        ("pr a list", dispatch(json!([1]), json!(head))),
        ("no client_payload", json!({"action": "loopd-merge"})),
        (
            "client_payload a string",
            json!({"action": "loopd-merge", "client_payload": "pr=1"}),
        ),
        (
            "another action",
            json!({"action": "loopd-merge-now", "client_payload": {"pr": 1, "head_sha": head}}),
        ),
        (
            "action spelt otherwise",
            json!({"action": "LOOPD-MERGE", "client_payload": {"pr": 1, "head_sha": head}}),
        ),
        (
            "no action",
            json!({"client_payload": {"pr": 1, "head_sha": head}}),
        ),
    ];
    let mut holes = Vec::new();
    for (what, event) in cases {
        let pushes = ci.authenticated_pushes();
        let writes = other_writes(&ci).len();
        let r = round(&ci, &quiet, &branch, event, "repository_dispatch");
        if !quiet.requests().is_empty() {
            holes.push(format!("{what}: the model was called ({})", decision(&r)));
        }
        if ci.authenticated_pushes() != pushes {
            holes.push(format!("{what}: pushed ({})", decision(&r)));
        }
        if other_writes(&ci).len() != writes {
            holes.push(format!(
                "{what}: wrote {:?} ({})",
                &other_writes(&ci)[writes..],
                decision(&r)
            ));
        }
        // Nothing ran; a pull request GitHub does not know may be an
        // `error` (exit 5): attack41b_07b asks for its JSON.
        let quiet_end =
            ["skipped", "refused"].contains(&decision(&r).as_str()) || r.code == 2 || r.code == 5;
        if !quiet_end {
            holes.push(format!(
                "{what}: decision `{}` exit {}: stdout {:?}: {}",
                decision(&r),
                r.code,
                r.stdout,
                tail(&r.stderr)
            ));
        }
    }
    assert_eq!(remote_tip(&ci, &branch), head);
    assert!(!Path::new("/tmp/pwned").exists());
    // The control: the true dispatch runs the merge round.
    let model = one_clean_fix();
    let r = round(
        &ci,
        &model,
        &branch,
        merge_dispatch(json!(1), &head),
        "repository_dispatch",
    );
    assert_eq!(decision(&r), "round_pushed", "{}", r.stderr);
    finish_holes(holes);
}

/// "An API ... failure ... ends with decision `error` and exit 5" and
/// "`--json` prints one object": a dispatch naming a pull request GitHub
/// does not know (404) still reports, as JSON, what happened.
#[test]
fn attack41b_07b_a_dispatch_for_an_unknown_pull_request_still_reports_json() {
    let mut ci = ci_env();
    let (branch, head, _) = unmergeable_pr(&mut ci);
    let quiet = no_model();
    for pr in [json!(0), json!(99), json!(u64::MAX)] {
        let r = round(
            &ci,
            &quiet,
            &branch,
            merge_dispatch(pr.clone(), &head),
            "repository_dispatch",
        );
        assert!(
            serde_json::from_str::<Value>(r.stdout.trim()).is_ok(),
            "pr {pr}: exit {} and no JSON report: stdout {:?}, stderr {}",
            r.code,
            r.stdout,
            tail(&r.stderr)
        );
    }
    assert!(quiet.requests().is_empty());
    assert_eq!(ci.authenticated_pushes(), 0);
}

/// "Exactly once ... keyed `base:<head sha>` like any moved base": a merge
/// round that was not accepted is answered; the same dispatch delivered
/// again, and a `pull_request` event that says the same head no longer
/// merges, are `skipped` — no second round, no second answer.
#[test]
fn attack41b_08_a_dispatch_delivered_twice_is_one_round() {
    let mut ci = ci_env();
    let (branch, head, _) = unmergeable_pr(&mut ci);
    let model = gives_up();
    let event = merge_dispatch(json!(1), &head);
    let r = round(&ci, &model, &branch, event.clone(), "repository_dispatch");
    assert!(
        ["answered", "gate_refused"].contains(&decision(&r).as_str()),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(ci.authenticated_pushes(), 0);
    let answers = ci.gh.comments().len();
    assert_eq!(answers, 1, "{:?}", ci.gh.comments());
    let calls = model.requests().len();
    let sessions = model.session_count(Role::Agent);
    let mut holes = Vec::new();
    let r = round(&ci, &model, &branch, event, "repository_dispatch");
    if decision(&r) != "skipped"
        || model.requests().len() != calls
        || ci.gh.comments().len() != answers
    {
        holes.push(format!(
            "the same dispatch again: `{}`, agent sessions {} -> {}, answers {answers} -> {}",
            decision(&r),
            sessions,
            model.session_count(Role::Agent),
            ci.gh.comments().len()
        ));
    }
    let pull_request = json!({"action": "synchronize", "number": 1, "pull_request": {"number": 1, "mergeable": false, "state": "open", "head": {"ref": branch, "sha": head, "repo": {"full_name": "acme/rechnung"}}, "base": {"ref": "main", "repo": {"full_name": "acme/rechnung"}}, "user": {"login": "lead", "type": "User"}}, "sender": {"login": "lead", "type": "User"}, "repository": {"full_name": "acme/rechnung"}});
    let r = round(&ci, &model, &branch, pull_request, "pull_request");
    if model.requests().len() != calls || ci.gh.comments().len() != answers {
        holes.push(format!(
            "a pull_request event for the same head: `{}`, agent sessions {} -> {}, answers {answers} -> {}",
            decision(&r),
            sessions,
            model.session_count(Role::Agent),
            ci.gh.comments().len()
        ));
    }
    assert_eq!(ci.authenticated_pushes(), 0);
    finish_holes(holes);
}

/// "every later event is `capped` with no comment and no round": a
/// dispatch at the cap runs nothing; the open points are listed once.
#[test]
fn attack41b_09_a_dispatch_at_the_cap_runs_no_round() {
    for (cfg, record) in [
        (
            "[ci]\nmax_rounds = 1\n",
            "Round 1.\n\n<!-- loopd: round event=check_run:1 cost=0.0100 -->",
        ),
        (
            "[ci]\npr_budget_usd = 0.5\n",
            "Round 1.\n\n<!-- loopd: round event=check_run:1 cost=0.5000 -->",
        ),
    ] {
        let mut ci = ci_env();
        ci.configure(cfg, "a cap");
        let (branch, head, _) = unmergeable_pr(&mut ci);
        ci.gh
            .add_comment(1, "github-actions[bot]", "Bot", "NONE", record);
        let quiet = no_model();
        for _ in 0..2 {
            let r = round(
                &ci,
                &quiet,
                &branch,
                merge_dispatch(json!(1), &head),
                "repository_dispatch",
            );
            assert_eq!(r.code, 0, "{cfg}: {}", r.stderr);
            assert_eq!(decision(&r), "capped", "{cfg}: {}", r.stdout);
        }
        assert!(quiet.requests().is_empty(), "{cfg}");
        assert_eq!(ci.authenticated_pushes(), 0, "{cfg}");
        let caps = ci
            .gh
            .comments()
            .iter()
            .filter(|c| c.body.contains("<!-- loopd: cap"))
            .count();
        assert_eq!(caps, 1, "{cfg}: {:?}", ci.gh.comments());
    }
}

// ---------------------------------------------------------------------------
// A round interrupted is continued, not repeated

/// A round's points, from a crash-free run (`LOOPD_CRASH_TRACE`), and the
/// cost its answer recorded.
fn round_trace(merge: bool) -> (Vec<String>, String) {
    let mut ci = ci_env();
    let (branch, event, name) = round_setup(&mut ci, merge);
    let model = one_clean_fix();
    let trace = ci.env.tmp.path().join("trace.txt");
    let trace_s = trace.to_string_lossy().into_owned();
    let r = round_with(
        &ci,
        &model,
        &branch,
        event,
        name,
        &[("LOOPD_CRASH_TRACE", trace_s.as_str())],
    );
    assert_eq!(decision(&r), "round_pushed", "{}", r.stderr);
    let points = std::fs::read_to_string(&trace).unwrap_or_default();
    (
        points.lines().map(str::to_owned).collect(),
        record_cost(&ci).expect("a record"),
    )
}

/// A followed pull request and the event of a round on it: a member's
/// comment, or a base push's merge dispatch.
fn round_setup(ci: &mut Ci, merge: bool) -> (String, Value, &'static str) {
    if merge {
        dispatched_round(ci)
    } else {
        (loopd_pr(ci), ask(11), "issue_comment")
    }
}

/// Killed at every point a round passes (SIGKILL), then the same event run
/// again on the state dir and checkout it left: one push, one answer, the
/// agent's finished session not run again, the spend counted once (the
/// record's cost is an uninterrupted run's).
fn kill_at_every_point(merge: bool) {
    let (points, cost) = round_trace(merge);
    assert!(points.len() >= 5, "too few points: {points:?}");
    let agent_done = points
        .iter()
        .position(|p| p == "journal:session_finished#1")
        .expect("the agent's session finished");
    let mut holes = Vec::new();
    for (i, point) in points.iter().enumerate() {
        let mut ci = ci_env();
        let (branch, event, name) = round_setup(&mut ci, merge);
        let model = one_clean_fix();
        let r = round_with(&ci, &model, &branch, event.clone(), name, &crash_at(point));
        if r.code == 0 {
            holes.push(format!("{point}: not killed ({})", decision(&r)));
            continue;
        }
        let r = round(&ci, &model, &branch, event.clone(), name);
        let d = decision(&r);
        if !["round_pushed", "answered"].contains(&d.as_str()) {
            holes.push(format!(
                "{point}: the re-run ended `{d}` exit {}: {}",
                r.code,
                tail(&r.stderr)
            ));
        }
        let agents = model.session_count(Role::Agent);
        if i > agent_done && agents != 1 {
            holes.push(format!(
                "{point}: the finished agent session reached the model {agents} times"
            ));
        }
        if ci.authenticated_pushes() != 1 {
            holes.push(format!("{point}: {} pushes", ci.authenticated_pushes()));
        }
        let comments = ci.gh.comments();
        if comments.len() != 1 {
            holes.push(format!("{point}: {} comments", comments.len()));
        }
        if i > agent_done && record_cost(&ci).as_deref() != Some(cost.as_str()) {
            holes.push(format!(
                "{point}: the record says cost={:?}, an uninterrupted round {cost}",
                record_cost(&ci)
            ));
        }
        // And once more: nothing.
        let r = round(&ci, &model, &branch, event, name);
        if decision(&r) != "skipped" || ci.authenticated_pushes() > 1 {
            holes.push(format!(
                "{point}: a third run `{}`, pushes {}",
                decision(&r),
                ci.authenticated_pushes()
            ));
        }
    }
    eprintln!("{} points: {points:?}", points.len());
    finish_holes(holes);
}

#[test]
fn attack41b_10_a_comment_round_killed_at_every_point_is_continued_once() {
    kill_at_every_point(false);
}

#[test]
fn attack41b_11_a_merge_round_killed_at_every_point_is_continued_once() {
    kill_at_every_point(true);
}

/// "It must be the same job (the task, ...; otherwise exit 2, naming what
/// differs)": the same comment id with other words (an edited comment
/// replayed as `created`) does not continue the old job with a new task,
/// nor run it under the old job.
#[test]
fn attack41b_12_the_same_event_id_with_other_words_is_refused_not_continued() {
    let (ci, branch, model) = killed_comment_round("journal:goal_run");
    let r = round(
        &ci,
        &model,
        &branch,
        issue_comment(
            11,
            "MEMBER",
            "User",
            "Please also make the invoice total a Decimal everywhere.",
        ),
        "issue_comment",
    );
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(ci.authenticated_pushes(), 0);
    assert_eq!(model.session_count(Role::Agent), 1);
}

/// The journal pins the spec (`loopd.toml`'s sha256): a continuation in a
/// checkout whose `loopd.toml` now says another goal and budget is refused
/// (exit 2), not continued under the new rules.
#[test]
fn attack41b_13_a_changed_loopd_toml_is_refused_on_continuation() {
    let (ci, branch, model) = killed_comment_round("journal:goal_run");
    let path = ci.env.repo.join("loopd.toml");
    let cfg = std::fs::read_to_string(&path).expect("loopd.toml");
    std::fs::write(
        &path,
        cfg.replace("budget_usd = 0.5", "budget_usd = 5.0")
            .replace("python3 -m pytest -q", "true"),
    )
    .expect("loopd.toml");
    let r = round(&ci, &model, &branch, ask(11), "issue_comment");
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(ci.authenticated_pushes(), 0);
}

/// A round killed mid-job; someone pushes to the pull request; the next
/// runner checks out the new head (the cache gone for the checkout, the
/// state dir kept) — loopd.toml changed in that push. Not the same job:
/// exit 2 or nothing, and never a push over the other commit.
#[test]
fn attack41b_14_a_new_head_with_another_loopd_toml_is_not_the_interrupted_job() {
    let (mut ci, branch, model) = killed_comment_round("journal:goal_run");
    // Someone's commit on the branch: a bigger budget, a goal that is `true`.
    let other = ci.env.tmp.path().join("other");
    ci.env.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        &other.to_string_lossy(),
        &ci.sha,
    ]);
    let path = other.join("loopd.toml");
    let cfg = std::fs::read_to_string(&path).expect("loopd.toml");
    std::fs::write(&path, cfg.replace("budget_usd = 0.5", "budget_usd = 5.0")).expect("write");
    ci.env
        .git_in(&other, &["commit", "-qam", "a bigger budget"]);
    let theirs = ci
        .env
        .git_in(&other, &["rev-parse", "HEAD"])
        .trim()
        .to_owned();
    push_branch(&ci, &theirs, &branch);
    ci.env.git(&["checkout", "-q", "-f", &theirs]);
    ci.env.git(&["clean", "-qfdx", "-e", ".loopd"]);
    ci.sha = theirs.clone();
    let r = round(&ci, &model, &branch, ask(11), "issue_comment");
    assert_eq!(remote_tip(&ci, &branch), theirs, "{}", r.stdout);
    assert_eq!(ci.authenticated_pushes(), 0, "{}", r.stdout);
    assert!(
        r.code == 2 || decision(&r) == "skipped",
        "continued the interrupted job in another checkout: `{}` exit {}\n{}",
        decision(&r),
        r.code,
        tail(&r.stderr)
    );
}

/// A round killed mid-job, then someone pushes to the pull request, and
/// the round is re-run on the cached checkout: never a push over their
/// commit. Both a comment round (killed after the job decided) and a merge
/// round (killed after its goal test).
#[test]
fn attack41b_15_an_interrupted_round_never_pushes_over_a_commit_made_meanwhile() {
    let mut holes = Vec::new();
    for (merge, point) in [
        (false, "journal:job_ended"),
        (false, "journal:goal_run"),
        (true, "journal:goal_run"),
        (true, "journal:job_ended"),
    ] {
        let mut ci = ci_env();
        let (branch, event, name) = round_setup(&mut ci, merge);
        let model = one_clean_fix();
        killed_round(&ci, &model, &branch, &event, name, point);
        let tip = remote_tip(&ci, &branch);
        let theirs = commit_tree(&ci, &tip, "someone's commit meanwhile");
        push_branch(&ci, &theirs, &branch);
        let r = round(&ci, &model, &branch, event, name);
        if remote_tip(&ci, &branch) != theirs || ci.authenticated_pushes() != 0 {
            holes.push(format!(
                "merge={merge} {point}: pushed over their commit (`{}`)",
                decision(&r)
            ));
        }
    }
    finish_holes(holes);
}

/// "runs/<id> ... must not be links": a run directory (or its `run.lock`)
/// planted as a link under the id the event derives is not followed.
#[test]
fn attack41b_16_a_planted_run_dir_link_is_refused() {
    let mut holes = Vec::new();
    for planted in ["run-lock", "run-dir"] {
        let ci = ci_env();
        let branch = loopd_pr(&ci);
        let elsewhere = elsewhere(&ci.env, "elsewhere");
        let runs = runs_dir(&ci.env);
        let id = runs.join("pr1-issue-comment-11");
        if planted == "run-dir" {
            std::os::unix::fs::symlink(&elsewhere, &id).expect("link");
        } else {
            std::fs::create_dir_all(&id).expect("run dir");
            std::os::unix::fs::symlink(elsewhere.join("lock"), id.join("run.lock")).expect("link");
        }
        let model = one_clean_fix();
        let r = round(&ci, &model, &branch, ask(11), "issue_comment");
        let written: Vec<_> = std::fs::read_dir(&elsewhere)
            .expect("elsewhere")
            .flatten()
            .map(|e| e.path())
            .collect();
        let still_link = std::fs::symlink_metadata(&id)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false);
        if !written.is_empty() {
            holes.push(format!(
                "{planted}: wrote through the link into {written:?} (link still there: {still_link}; `{}`)",
                decision(&r)
            ));
        }
        if r.code == 0 || ci.authenticated_pushes() != 0 || !model.requests().is_empty() {
            holes.push(format!(
                "{planted}: not refused: {}",
                what_ran(&ci, &model, &r)
            ));
        }
    }
    finish_holes(holes);
}

/// "a `summary.json` that disagrees with the journal decides nothing": a
/// planted summary saying the round was accepted (no journal) pushes
/// nothing that was not judged.
#[test]
fn attack41b_17_a_planted_summary_decides_nothing() {
    let ci = ci_env();
    let branch = loopd_pr(&ci);
    let dir = run_dir(&ci.env, "pr1-issue-comment-11");
    std::fs::write(
        dir.join("summary.json"),
        json!({"job_id": "pr1-issue-comment-11", "outcome": "accepted", "exit_code": 0, "cost_usd": 0.0, "attempts": [], "run_dir": dir}).to_string(),
    )
    .expect("summary");
    let model = no_model();
    let r = round(&ci, &model, &branch, ask(11), "issue_comment");
    assert_eq!(ci.authenticated_pushes(), 0, "{}", r.stdout);
    assert_eq!(remote_tip(&ci, &branch), ci.sha);
    assert!(
        decision(&r) != "round_pushed" && decision(&r) != "answered" || r.code != 0,
        "a planted summary answered the round: {}",
        r.stdout
    );
}

/// The workflow caches the state dir and the checkout (`if: always()`),
/// and a cache of the default branch is readable by every pull request's
/// runs, forks' included: neither the token nor the model credential may
/// be in them — after a round, after one killed mid-job, and after one
/// killed right after its push.
#[test]
fn attack41b_18_no_credential_is_left_in_what_the_workflow_caches() {
    let mut holes = Vec::new();
    for point in [
        None,
        Some("journal:goal_run"),
        Some("journal:job_ended"),
        Some("ci:round-pushed"),
    ] {
        for merge in [false, true] {
            let mut ci = ci_env();
            let (branch, event, name) = round_setup(&mut ci, merge);
            let model = one_clean_fix();
            let vars: Vec<(&str, &str)> = point.iter().map(|p| ("LOOPD_CRASH_AT", *p)).collect();
            let _ = round_with(&ci, &model, &branch, event, name, &vars);
            for secret in [TOKEN, API_KEY] {
                for dir in [&ci.env.state, &ci.env.repo] {
                    let found = files_holding(dir, secret);
                    if !found.is_empty() {
                        holes.push(format!("{point:?} merge={merge}: `{secret}` in {found:?}"));
                    }
                }
            }
        }
    }
    finish_holes(holes);
}

/// The workflow's cache key is the event: a dispatched merge round's key
/// must name its pull request too (two pull requests from one head into two
/// bases are two rounds, `pr<N>-base-<sha>`), else the second restores the
/// first's checkout and state.
#[test]
fn attack41b_19_the_dispatch_cache_key_names_the_pull_request() {
    let text = std::fs::read_to_string(manifest_dir().join("examples/github/loopd-follow.yml"))
        .expect("workflow");
    let keys: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("key:") || l.contains("restore-keys:"))
        .collect();
    assert!(!keys.is_empty());
    for k in keys {
        assert!(
            k.contains("client_payload.pr"),
            "a dispatch's cache key without its pull request: {k}"
        );
    }
}

/// The control for attack41b_16: the rule `loopd ci` says it continues by
/// — `loopd run --job-id` — refuses the same planted link.
#[test]
fn attack41b_16b_run_job_id_refuses_the_same_planted_link() {
    let env = TestEnv::scripted();
    let elsewhere = elsewhere(&env, "elsewhere");
    let runs = runs_dir(&env);
    std::os::unix::fs::symlink(&elsewhere, runs.join("planted")).expect("link");
    let model = one_clean_fix();
    let r = env.run(&model, &["--job-id", "planted"]);
    let written = std::fs::read_dir(&elsewhere).expect("elsewhere").count();
    assert_ne!(r.code, 0, "{}", tail(&r.stderr));
    assert_eq!(written, 0);
}

/// "a run killed between the two (crash point `ci:round-pushed`) leaves
/// the note, and the next run of the event, finding `<sha>` at the
/// branch's tip, edits it into the answer without a round and without a
/// second push" — for a dispatched merge round too: its own push moved the
/// head the dispatch names, which must not make the re-run skip the answer
/// it owes (the record the cap counts rounds and spend from).
#[test]
fn attack41b_20_a_dispatched_merge_round_killed_after_its_push_is_answered_by_the_rerun() {
    for point in ["ci:round-pushed", "journal:pushed"] {
        let mut ci = ci_env();
        let (branch, head, _) = unmergeable_pr(&mut ci);
        let event = merge_dispatch(json!(1), &head);
        let model = one_clean_fix();
        killed_round(&ci, &model, &branch, &event, "repository_dispatch", point);
        assert_eq!(ci.authenticated_pushes(), 1, "{point}");
        let r = round(&ci, &model, &branch, event, "repository_dispatch");
        assert_eq!(ci.authenticated_pushes(), 1, "{point}");
        let comments = ci.gh.comments();
        assert_eq!(comments.len(), 1, "{point}: {comments:?}");
        assert!(
            comments[0].body.contains("<!-- loopd: round event=base:"),
            "{point}: the re-run ended `{}` ({}) and the pull request keeps only the note, no answer, no record: {}",
            decision(&r),
            report(&r)["why"],
            comments[0].body
        );
    }
}
