//! The daemon's footprint and latencies, printed (no timed assertions):
//! - idle resident memory (target ≤ 15 MB) and CPU/wake-ups over a quiet
//!   period (target: none from polling);
//! - latency from `loopd submit` returning to the job running (≤ 50 ms);
//! - `loopd status --json` over 1,000 queued jobs (≤ 100 ms).
//!
//! `cargo bench --bench daemon [-- IDLE_SECONDS]` (default 60)

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LOOPD: &str = env!("CARGO_BIN_EXE_loopd");

fn proc_status(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

/// utime + stime in clock ticks, over all threads.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
}

/// Context switches of every thread: each is a wake-up.
fn switches(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
        .map(|t| {
            let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            s.lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches")
                        || l.starts_with("nonvoluntary_ctxt_switches")
                })
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

fn git(repo: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.invalid")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.invalid")
        .status()
        .expect("git")
        .success();
    assert!(ok, "git {args:?}");
}

fn loopd(state: &Path, repo: &Path) -> Command {
    let mut c = Command::new(LOOPD);
    c.env("LOOPD_STATE_DIR", state)
        .env("LOOPD_AGENT_BIN", "/bin/true")
        // The daemon picks a credential at start (none: exit 5); no model
        // is ever called here.
        .env("ANTHROPIC_API_KEY", "sk-bench-not-a-real-key")
        .env("LOOPD_LOG", "warn")
        .current_dir(repo);
    c
}

fn main() {
    let idle_secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(60);
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    let state = tmp.path().join("state");
    std::fs::create_dir_all(&repo).expect("repo");
    std::fs::write(
        repo.join("loopd.toml"),
        "task = \"bench\"\n[[goal]]\nrun = \"true\"\n",
    )
    .expect("config");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "bench"]);

    let mut daemon = loopd(&state, &repo)
        .args(["daemon"])
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon");
    let pid = daemon.id();
    std::thread::sleep(Duration::from_millis(500));
    let rss = proc_status(pid, "VmRSS:");
    let (t0, s0) = (cpu_ticks(pid), switches(pid));
    std::thread::sleep(Duration::from_secs(idle_secs));
    let (t1, s1) = (cpu_ticks(pid), switches(pid));
    println!(
        "idle daemon: resident memory {:.1} MB (target <= 15 MB)",
        rss as f64 / 1024.0
    );
    println!("idle daemon over {idle_secs} s: {} clock ticks of CPU, {} context switches (target: no wake-ups from polling)", t1 - t0, s1 - s0);

    // Submit -> running: the job's state file says `running`.
    let mut lat = Vec::new();
    for _ in 0..20 {
        let out = loopd(&state, &repo)
            .args(["submit", "--json"])
            .output()
            .expect("submit");
        let submitted = Instant::now();
        let id: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let id = id["job_id"].as_str().expect("id").to_owned();
        let state_file = state.join("runs").join(&id).join("state.json");
        loop {
            if std::fs::read_to_string(&state_file).is_ok_and(|t| t.contains("\"state\"")) {
                break;
            }
            assert!(
                submitted.elapsed() < Duration::from_secs(10),
                "job never started"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        lat.push(submitted.elapsed());
        // Let it finish (the agent is /bin/true: an agent error) before the next.
        while !state.join("spool/done").join(format!("{id}.json")).exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    lat.sort();
    println!(
        "submit -> running over {} jobs: median {:.1} ms, max {:.1} ms (target <= 50 ms)",
        lat.len(),
        lat[lat.len() / 2].as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3
    );
    unsafe_kill(pid);
    let _ = daemon.wait();

    // `loopd status` over 1,000 queued jobs (the daemon is down: they stay queued).
    for _ in 0..1000 {
        let ok = loopd(&state, &repo)
            .args(["submit"])
            .stdout(Stdio::null())
            .status()
            .expect("submit")
            .success();
        assert!(ok);
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = loopd(&state, &repo)
            .args(["status", "--json"])
            .output()
            .expect("status");
        times.push(t.elapsed());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(v.as_array().expect("list").len() >= 1000);
    }
    times.sort();
    println!(
        "status --json over 1000 queued jobs: median {:.1} ms, max {:.1} ms (target <= 100 ms)",
        times[2].as_secs_f64() * 1e3,
        times[4].as_secs_f64() * 1e3
    );
}

fn unsafe_kill(pid: u32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) on our own child.
    unsafe { kill(pid as i32, 15) };
}
