//! What a hermetic judge costs (issue 39), printed (no timed assertions):
//! one attempt of a job on three trees, with the judge in a world of its
//! own (`hermetic`: BASE_REF written once from git objects, a change layer
//! per attempt, overlays over the ignored entries, a probe of the runner)
//! and with the judge sharing the worktree (`shared`, the fallback where
//! the system has no user namespaces: `LOOPD_TEST_NO_USERNS=1`).
//!
//! - `fixture`: the rechnung fixture (a handful of files);
//! - `30k files`: the fixture plus 30,000 tracked files;
//! - `500 MB ignored`: the fixture plus an ignored directory of 500 MB
//!   (fifty 10 MB files, like a virtualenv or `node_modules`).
//!
//! Each job: the scripted agent writes the honest fix, the goal runs, the
//! critic passes. Printed per tree and mode: the job's wall time, its
//! setup (to the sandbox and the judge's world made), the baseline phase
//! (BASE_REF's goal run), the attempt's judging (from the agent session's end to the goal's result:
//! the change layer, the old tests alone and the whole change) and the
//! end (the critic, the commit, the judge's world removed), each the
//! median of `LOOPD_BENCH_RUNS` runs (default 3), from the journal's clock.
//!
//! `cargo bench --features failpoints,scripted-agent --bench hermetic`
//! (the scripted agent of test builds; `failpoints` for the shared mode's
//! switch; the test tools: `scripts/install-test-tools.sh`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Instant;

use support::model::ScriptedModel;
use support::*;

/// Milliseconds of each named event's first entry on the job's clock.
fn clock(run_dir: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(run_dir.join("ledger.jsonl")).expect("journal");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["event"].as_str()?.to_owned(), v["ms"].as_u64()?)))
        .collect()
}

fn at(events: &[(String, u64)], name: &str) -> u64 {
    events
        .iter()
        .find(|(e, _)| e == name)
        .map(|(_, ms)| *ms)
        .unwrap_or_else(|| panic!("no `{name}` event in {events:?}"))
}

struct Timing {
    wall_ms: u64,
    /// From the job's start to its sandbox and judge made (`confined`).
    setup_ms: u64,
    baseline_ms: u64,
    judging_ms: u64,
    /// From the goal's result to the job's last event (the critic, the
    /// commit).
    end_ms: u64,
}

fn one(tree: &str, shared: bool) -> Timing {
    let env = TestEnv::scripted();
    match tree {
        "30k files" => {
            let data = env.repo.join("data");
            for d in 0..100 {
                let dir = data.join(format!("d{d:03}"));
                std::fs::create_dir_all(&dir).expect("dir");
                for f in 0..300 {
                    std::fs::write(dir.join(format!("f{f:03}.txt")), format!("{d} {f}\n"))
                        .expect("file");
                }
            }
            env.git(&["add", "-A"]);
            env.git(&["commit", "-qm", "30,000 files"]);
        }
        "500 MB ignored" => {
            let big = env.repo.join("big");
            std::fs::create_dir_all(&big).expect("dir");
            let chunk = vec![7u8; 10 << 20];
            for f in 0..50 {
                std::fs::write(big.join(format!("blob{f:02}.bin")), &chunk).expect("blob");
            }
            let ignore = env.repo.join(".gitignore");
            let mut text = std::fs::read_to_string(&ignore).unwrap_or_default();
            text.push_str("\nbig/\n");
            std::fs::write(&ignore, text).expect(".gitignore");
            env.git(&["add", ".gitignore"]);
            env.git(&["commit", "-qm", "a 500 MB ignored directory"]);
        }
        _ => {}
    }
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let mut cmd = env.loopd(Some(&model));
    if shared {
        cmd.env("LOOPD_TEST_NO_USERNS", "1");
    }
    let started = Instant::now();
    let out = cmd
        .args(["run", "--json", "--max-attempts", "1"])
        .output()
        .expect("run");
    let wall_ms = started.elapsed().as_millis() as u64;
    let r = finish(out);
    let s = r.summary();
    assert_eq!(s["outcome"], "accepted", "{tree}: {}", r.stderr);
    assert_eq!(
        s["judge"],
        if shared { "shared" } else { "hermetic" },
        "{}",
        r.stderr
    );
    let events = clock(Path::new(s["run_dir"].as_str().expect("run dir")));
    let last = events.last().map_or(0, |(_, ms)| *ms);
    Timing {
        wall_ms,
        setup_ms: at(&events, "confined"),
        baseline_ms: at(&events, "baseline") - at(&events, "confined"),
        judging_ms: at(&events, "goal_run") - at(&events, "session_finished"),
        end_ms: last - at(&events, "goal_run"),
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("LOOPD_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    println!("hermetic judge cost, one attempt, median of {runs} runs (ms)");
    println!(
        "{:<16} {:<9} {:>8} {:>8} {:>10} {:>14} {:>8}",
        "tree", "judge", "job", "setup", "baseline", "attempt judge", "end"
    );
    // `LOOPD_BENCH_TREES=30k` (a substring of a tree's name) runs part.
    let only = std::env::var("LOOPD_BENCH_TREES").unwrap_or_default();
    for tree in ["fixture", "30k files", "500 MB ignored"]
        .into_iter()
        .filter(|t| t.contains(only.as_str()))
    {
        for shared in [true, false] {
            let t: Vec<Timing> = (0..runs).map(|_| one(tree, shared)).collect();
            println!(
                "{:<16} {:<9} {:>8} {:>8} {:>10} {:>14} {:>8}",
                tree,
                if shared { "shared" } else { "hermetic" },
                median(t.iter().map(|t| t.wall_ms).collect()),
                median(t.iter().map(|t| t.setup_ms).collect()),
                median(t.iter().map(|t| t.baseline_ms).collect()),
                median(t.iter().map(|t| t.judging_ms).collect()),
                median(t.iter().map(|t| t.end_ms).collect()),
            );
        }
    }
}
