//! Stream ingest: events per second through parsing, both guards (caps and
//! progress) and the ledger, on a recorded stream of each real agent CLI
//! (Claude Code's stream-json, Codex's `exec --json`) repeated to ≥ 1
//! million events. Target: ≥ 500k events/s on one core.
//!
//! `cargo bench --bench ingest [-- EVENTS] [AGENT]` (AGENT: only that
//! agent's stream, e.g. under a profiler)

use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use loopd::agent::session::{Observer, Role};
use loopd::agent::{Agent, Prices};
use loopd::config::{Caps, GuardSettings};
use loopd::guard::caps::Budget;
use loopd::guard::Watch;
use loopd::journal::Journal;

fn main() {
    let target: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let only: Option<String> = std::env::args()
        .skip(1)
        .find(|a| a.parse::<usize>().is_err() && !a.starts_with('-'));
    for (agent, fixture) in [
        (
            &loopd::agent::ClaudeCode as &dyn Agent,
            "agent-attempt.jsonl",
        ),
        (&loopd::agent::codex::Codex, "codex-agent-attempt.jsonl"),
    ] {
        if only.as_deref().is_some_and(|o| o != agent.name()) {
            continue;
        }
        ingest(agent, fixture, target);
    }
}

fn ingest(agent: &dyn Agent, fixture: &str, target: usize) {
    let recorded = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/streams")
            .join(fixture),
    )
    .expect("the recorded stream");
    let lines: Vec<&str> = recorded.lines().collect();
    let dir = tempfile::tempdir().expect("tempdir");

    // Build the input file outside the timed part. Each repetition gets its
    // own ids and paths so the progress guard sees distinct calls, as in a
    // long real session.
    let input = dir.path().join("stream.jsonl");
    {
        let mut w = BufWriter::new(std::fs::File::create(&input).expect("create input"));
        let mut n = 0;
        let mut rep = 0;
        while n < target {
            for l in &lines {
                let l = l
                    .replace("rechnung.py", &format!("rechnung_{rep}.py"))
                    .replace("msg_scripted_", &format!("msg_{rep}_"))
                    .replace("toolu_scripted_", &format!("toolu_{rep}_"))
                    .replace("\"item_", &format!("\"item_{rep}_"));
                w.write_all(l.as_bytes()).expect("write");
                w.write_all(b"\n").expect("write");
                n += 1;
            }
            rep += 1;
        }
    }
    let bytes = std::fs::metadata(&input).expect("stat").len();

    let budget = Budget::new(Caps {
        limits: loopd::guard::caps::Limits {
            budget_usd: 1e12,
            max_turns: u64::MAX / 2,
            max_tokens: u64::MAX / 2,
        },
        timeout: Duration::from_secs(3600),
        attempt_timeout: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(3600),
    });
    let settings = GuardSettings::default();
    let text = std::fs::read_to_string(&input).expect("read input");
    let lines: Vec<&str> = text.lines().collect();

    // Pass 1: what the target names — parsing, both guards, ledger.
    // Pass 2: the same plus the raw stream copy `loopd run` keeps on disk
    // (attempt-<n>/agent-stream.jsonl), i.e. the whole per-line hot path.
    for with_raw_log in [false, true] {
        let jdir = dir.path().join(format!("journal-{with_raw_log}"));
        std::fs::create_dir_all(&jdir).expect("journal dir");
        let mut ledger = Journal::open(&jdir).expect("journal");
        let mut raw_log = BufWriter::with_capacity(
            64 * 1024,
            std::fs::File::create(dir.path().join("raw.jsonl")).expect("raw log"),
        );
        let started = Instant::now();
        let mut stops = 0u64;
        {
            let mut watch = Watch::new(
                (Role::Agent, 1, 0),
                &budget,
                Prices::of_table(agent.prices()),
                Default::default(),
                &settings,
                &mut ledger,
            );
            let mut parser = agent.parser();
            let mut events = Vec::new();
            for line in &lines {
                if with_raw_log {
                    raw_log.write_all(line.as_bytes()).expect("raw");
                    raw_log.write_all(b"\n").expect("raw");
                }
                events.clear();
                let _ = parser.line(line, &mut events);
                for event in &events {
                    if watch.on_event(event, Instant::now()).is_some() {
                        stops += 1;
                    }
                }
            }
            raw_log.flush().expect("flush");
            watch.flush_pending();
        }
        let secs = started.elapsed().as_secs_f64();
        let events = lines.len();
        let what = if with_raw_log {
            "parse + guards + ledger + raw stream log"
        } else {
            "parse + guards + ledger"
        };
        println!(
                        "ingest {} [{what}]: {events} events, {:.1} MB (avg {} B/event) in {secs:.3} s = {:.0} events/s, {:.0} MB/s on one core; guard stops: {stops}",
            agent.name(),
            bytes as f64 / 1e6,
            bytes / events as u64,
            events as f64 / secs,
            bytes as f64 / 1e6 / secs
        );
    }
    println!("target: >= 500000 events/s");
}
