//! Stop latency: from the stream event that trips a cap to the last process
//! of the session's tree gone. The "agent" here is a script that prints a
//! `message_start` whose usage crosses the USD cap, while a child in its own
//! group and a `setsid` grandchild keep running — both honour SIGTERM.
//! Target: ≤ 100 ms.
//!
//! `cargo bench --bench stop_latency [-- RUNS]`

use std::time::{Duration, Instant};

use loopd::agent::events::Event;
use loopd::agent::session::{self, Observer, Role, SessionSpec, Verdict};
use loopd::agent::{Agent, ClaudeCode, Prices};
use loopd::config::{Caps, GuardSettings};
use loopd::guard::caps::Budget;
use loopd::guard::Watch;
use loopd::journal::Journal;
use loopd::outcome::Reason;

/// Wraps the real observer and notes when it asked to stop.
struct Timed<'a> {
    inner: Watch<'a>,
    tripped: Option<Instant>,
}

impl Observer for Timed<'_> {
    fn on_event(&mut self, event: &Event, at: Instant) -> Verdict {
        let v = self.inner.on_event(event, at);
        if v.is_some() && self.tripped.is_none() {
            self.tripped = Some(Instant::now());
        }
        v
    }
}

const AGENT: &str = r#"
sleep 1000 &
setsid sleep 1000 &
sleep 0.05
echo '{"type":"stream_event","event":{"type":"message_start","message":{"id":"m1","model":"claude-opus-5-5","usage":{"input_tokens":1000000,"output_tokens":1}}}}'
wait
"#;

fn main() {
    loopd::process::become_subreaper();
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(30);
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = Budget::new(Caps {
        limits: loopd::guard::caps::Limits {
            budget_usd: 0.5,
            max_turns: 100,
            max_tokens: u64::MAX / 2,
        },
        timeout: Duration::from_secs(60),
        attempt_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
    });
    let settings = GuardSettings::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let mut ledger = Journal::open(dir.path()).expect("journal");
        let spec = SessionSpec {
            role: Role::Agent,
            bin: "/bin/sh".into(),
            args: vec!["-c".into(), AGENT.into()],
            cwd: dir.path().to_path_buf(),
            env_set: vec![],
            env: loopd::sandbox::env::Environment::from_process(&[]),
            stdin: None,
            stream_log: dir.path().join(format!("stream-{i}.jsonl")),
            stderr_log: dir.path().join(format!("stderr-{i}.txt")),
            deadline: None,
            idle_timeout: Duration::from_secs(60),
            grace: settings.grace,
            scope: "bench".into(),
            sandbox: None,
        };
        let (_tx, mut rx) = tokio::sync::watch::channel(None);
        let mut obs = Timed {
            inner: Watch::new(
                (Role::Agent, 1, 0),
                &budget,
                Prices::of_table(ClaudeCode.prices()),
                Default::default(),
                &settings,
                &mut ledger,
            ),
            tripped: None,
        };
        let end = rt
            .block_on(session::run(
                &spec,
                ClaudeCode.parser().as_mut(),
                &mut obs,
                &mut rx,
                None,
            ))
            .expect("session");
        let done = Instant::now();
        assert_eq!(end.stopped, Some(Reason::BudgetUsd), "the cap tripped");
        let tripped = obs.tripped.expect("tripped");
        samples.push(done.duration_since(tripped));
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "stop latency over {runs} runs (cap event -> last process gone): median {:.1} ms, p95 {:.1} ms, max {:.1} ms (target: <= 100 ms)",
        ms(samples[runs / 2]),
        ms(samples[(runs * 95 / 100).min(runs - 1)]),
        ms(samples[runs - 1])
    );
}
