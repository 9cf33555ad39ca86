//! Peak memory of computing an attempt's diff when the agent added one huge
//! text file (issue: a 200 MB file took loopd to 1.5 GB RSS), printed — no
//! timed assertions. The peak is the process's high-water mark (`VmHWM` in
//! `/proc/self/status`) around the diff, which streams `diff.patch` to disk.
//!
//! `cargo bench --bench diff_memory [-- MEGABYTES]` (default 200)

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use loopd::workspace::{Artefacts, DiffLimits, Workspace};

fn status_kb(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("status");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

fn main() {
    let mb: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let repo = git2::Repository::init(root).expect("init");
    std::fs::write(root.join("app.py"), "x = 1\n").expect("write");
    let mut index = repo.index().expect("index");
    index.add_path(Path::new("app.py")).expect("add");
    index.write().expect("write the index");
    let tree = repo
        .find_tree(index.write_tree().expect("tree"))
        .expect("tree");
    let sig = git2::Signature::now("bench", "bench@example.invalid").expect("sig");
    let base = repo
        .commit(Some("HEAD"), &sig, &sig, "base", &tree, &[])
        .expect("commit");

    // The agent's change: one small fix and one huge text file.
    std::fs::write(root.join("app.py"), "x = 2\n").expect("write");
    let mut big =
        std::io::BufWriter::new(std::fs::File::create(root.join("big.txt")).expect("big"));
    let line = b"padding padding padding padding padding padding padding padding padding pad\n";
    let mut written = 0u64;
    while written < mb * 1024 * 1024 {
        big.write_all(line).expect("write");
        written += line.len() as u64;
    }
    big.flush().expect("flush");
    drop(big);

    let ws = Workspace::open(root).expect("open");
    let before = status_kb("VmHWM:");
    let started = Instant::now();
    let out_dir = tempfile::tempdir().expect("tmp");
    let patch_file = out_dir.path().join("diff.patch");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&patch_file).expect("patch"));
    let limits = DiffLimits::for_bound(loopd::guard::DEFAULT_MAX_DIFF_KB * 1024);
    let diff = ws
        .diff_since(base, &Artefacts::default(), limits, &mut out)
        .expect("diff");
    drop(out);
    let size = diff.size();
    let elapsed = started.elapsed();
    let peak = status_kb("VmHWM:");
    let patch_bytes = std::fs::metadata(&patch_file).map(|m| m.len()).unwrap_or(0);
    println!("added file:        {mb} MB of text ({written} bytes)");
    println!("peak RSS before:   {:.1} MB", before as f64 / 1024.0);
    println!("peak RSS after:    {:.1} MB (VmHWM)", peak as f64 / 1024.0);
    println!(
        "diff.patch:        {:.1} MB",
        patch_bytes as f64 / 1048576.0
    );
    println!("changed files:     {}", diff.changes.len());
    println!(
        "change size:       {:.1} MB (what the size gate compares)",
        size as f64 / 1048576.0
    );
    println!("time:              {:.2} s", elapsed.as_secs_f64());
}
