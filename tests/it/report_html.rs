//! `loopd report JOB --html FILE` (issue 15): the page of a real job, opened
//! in a real browser — headless Chromium (Debian's `chromium`, installed by
//! `scripts/install-test-tools.sh`) dumps the DOM it built and takes a
//! screenshot, and the test checks both. Plus where the command may write.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::model::{load_scenario, ScriptedModel};
use crate::support::{manifest_dir, send_signal, TestEnv};

/// Debian's `chromium`, from the system's directories (never a download).
fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/local/bin/chromium", "/bin/chromium"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("`chromium` is missing: run `scripts/install-test-tools.sh` (as root it installs the Debian package `chromium`)")
}

/// The colour scheme the page is asked for (`prefers-color-scheme`).
#[derive(Debug, Clone, Copy)]
enum Scheme {
    Light,
    Dark,
}

/// Run headless Chromium on `page` with `args`, in a private profile under
/// `dir`; its stdout. A browser that hangs is killed (its whole group) and
/// fails the test.
fn headless(dir: &Path, page: &Path, scheme: Scheme, args: &[&str]) -> String {
    use std::os::unix::process::CommandExt;
    let profile = dir.join("chromium-profile");
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        // Blink's PreferredColorScheme: 0 dark, 1 light.
        match scheme {
            Scheme::Dark => "--blink-settings=preferredColorScheme=0",
            Scheme::Light => "--blink-settings=preferredColorScheme=1",
        },
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(format!("file://{}", page.display()))
    .env_clear()
    .env("PATH", "/usr/bin:/bin")
    .env("HOME", dir)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let child = cmd.spawn().expect("spawn chromium");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.expect("chromium ran"),
        Err(_) => {
            send_signal(pid, 9);
            // The renderer and the other helpers are in the same group.
            send_signal(pid.wrapping_neg(), 9);
            panic!("headless chromium did not finish within 120 s");
        }
    };
    assert!(
        out.status.success(),
        "chromium {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a screenshot shows, roughly.
#[derive(Debug)]
struct Shot {
    width: u32,
    height: u32,
    /// Distinct colours.
    colours: usize,
    /// The top-left pixel: the page's background.
    background: [u8; 3],
    /// The share of pixels that differ from the background.
    differing: f64,
}

fn analyse(png_path: &Path) -> Shot {
    let file = std::fs::File::open(png_path).expect("open screenshot");
    let decoder = png::Decoder::new(std::io::BufReader::new(file));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a buffer size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "{info:?}");
    let channels = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected colour type {other:?}"),
    };
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| &p[..3])
        .collect();
    let background = pixels[0];
    let colours: std::collections::HashSet<&[u8]> = pixels.iter().copied().collect();
    let differing = pixels.iter().filter(|p| **p != background).count();
    Shot {
        width: info.width,
        height: info.height,
        colours: colours.len(),
        background: [background[0], background[1], background[2]],
        differing: differing as f64 / pixels.len() as f64,
    }
}

/// Perceived brightness, 0 to 255.
fn luma([r, g, b]: [u8; 3]) -> f64 {
    0.299 * f64::from(r) + 0.587 * f64::from(g) + 0.114 * f64::from(b)
}

#[test]
fn the_html_report_of_a_real_job_renders_in_headless_chromium() {
    // The demo's scenario: attempt 1 is rejected by the pre-critic (a debug
    // print, rechnung.py:18), attempt 2 is accepted by the critic.
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(load_scenario(
        &manifest_dir().join("fixtures/scenarios/demo.toml"),
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let job = s["job_id"].as_str().expect("job_id");
    let out = env.tmp.path().join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let page = out.join("job.html");
    let w = env.exec(&["report", job, "--html", &page.to_string_lossy()]);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let html = std::fs::read_to_string(&page).expect("the page");
    // Self-contained: nothing to fetch, nothing to run.
    assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("src="));

    // The DOM as the browser built it.
    let dom = headless(env.tmp.path(), &page, Scheme::Light, &["--dump-dom"]);
    assert!(dom.contains("</html>"), "{dom}");
    for n in 1..=2 {
        assert_eq!(
            dom.matches(&format!("id=\"attempt-row-{n}\"")).count(),
            1,
            "row {n}"
        );
        assert_eq!(
            dom.matches(&format!("id=\"attempt-{n}\"")).count(),
            1,
            "section {n}"
        );
        assert!(
            dom.contains(&format!("id=\"timeline-{n}\"")),
            "timeline {n}"
        );
    }
    assert!(!dom.contains("id=\"attempt-3\""));
    assert_eq!(
        dom.matches("class=\"cost-bar ").count(),
        2,
        "one bar per attempt"
    );
    assert!(dom.contains("id=\"budget-line\""));
    assert!(dom.contains("id=\"outcome-word\">accepted</span>"));
    assert!(dom.contains("<code id=\"reason\">accepted</code>"));
    // Each phase of the timeline: agent, gates, both goal steps, the critic.
    for class in ["phase-agent", "phase-gate", "phase-goal", "phase-critic"] {
        assert!(dom.contains(class), "no {class}");
    }
    assert!(dom.contains("goal step <code>pytest</code>"));
    // The pre-critic's finding, with file:line; the critic's PASS.
    assert!(
        dom.contains("<code>rechnung.py:18</code>"),
        "the finding's file:line"
    );
    assert!(dom.contains("<span class=\"badge ok\">PASS</span>"));
    // The interdiff of attempt 2 removes the debug print, coloured.
    assert!(dom.contains("id=\"interdiff-2\""));
    let interdiff = &dom[dom.find("id=\"interdiff-2\"").expect("interdiff")..];
    let interdiff = &interdiff[..interdiff.find("</details>").expect("its end")];
    assert!(
        interdiff
            .split("<span class=\"l del\">")
            .skip(1)
            .any(|l| l.starts_with('-')
                && l[..l.find("</span>").expect("end")].contains("print(\"DEBUG net_total\"")),
        "the removed debug print, as a removed line: {interdiff}"
    );
    // The cost bars carry the costs the summary reports.
    let cost = |n: usize| s["attempts"][n]["cost_usd"].as_f64().expect("cost");
    for (i, n) in [(0, 1), (1, 2)] {
        assert!(
            dom.contains(&format!(
                "id=\"cost-bar-{n}\" data-attempt=\"{n}\" data-cost-usd=\"{}\"",
                cost(i)
            )),
            "bar {n}"
        );
    }
    // How to get the work back: a foreground job leaves it in the tree.
    assert!(dom.contains("The change is in the working tree"));

    // A screenshot: it rendered, at the size asked, and it is not blank.
    let shot = env.tmp.path().join("report.png");
    headless(
        env.tmp.path(),
        &page,
        Scheme::Light,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,2000",
        ],
    );
    let bytes = std::fs::metadata(&shot).expect("the screenshot").len();
    assert!(
        bytes > 20_000,
        "a {bytes}-byte screenshot is too small to hold the page"
    );
    let light = analyse(&shot);
    assert_eq!((light.width, light.height), (1200, 2000));
    assert!(light.colours > 16, "blank or unstyled: {light:?}");
    assert!(light.differing > 0.02, "mostly background: {light:?}");
    assert!(luma(light.background) > 200.0, "a light page: {light:?}");
    // Asked for dark, the same page is dark, and as legible.
    let shot = env.tmp.path().join("report-dark.png");
    headless(
        env.tmp.path(),
        &page,
        Scheme::Dark,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,1000",
        ],
    );
    let dark = analyse(&shot);
    assert!(luma(dark.background) < 60.0, "a dark page: {dark:?}");
    assert!(dark.colours > 16 && dark.differing > 0.02, "{dark:?}");
}

#[test]
fn the_html_report_is_written_only_where_it_may_be() {
    let env = TestEnv::new();
    let job = "20261130-120000000-abcd";
    let run_dir = env.state.join("runs").join(job);
    std::fs::create_dir_all(&run_dir).expect("run dir");
    let summary = loopd::record::Summary {
        job_id: job.into(),
        repo: env.repo.clone(),
        base_ref: "1".repeat(40),
        task: "Make the tests pass".into(),
        outcome: loopd::outcome::Outcome::Exhausted,
        reason: loopd::outcome::Reason::AttemptsExhausted,
        detail: "no attempt was accepted".into(),
        attempts: vec![],
        totals: loopd::record::Totals::default(),
        escalation: None,
        sandbox: None,
        network: None,
        judge: None,
        test_count_off: Default::default(),
        suite: None,
        examiner: None,
        stash_commit: Some("c0ffee".into()),
        failure_report: None,
        run_dir: run_dir.clone(),
        started_at: "2026-11-30T12:00:00Z".into(),
        finished_at: "2026-11-30T12:00:01Z".into(),
    };
    std::fs::write(
        run_dir.join("summary.json"),
        serde_json::to_string(&summary).expect("json"),
    )
    .expect("summary");

    // Inside the repository: refused, nothing written.
    let inside = env.repo.join("report.html");
    let r = env.exec(&["report", job, "--html", &inside.to_string_lossy()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("inside the job's repository"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    assert!(!inside.exists());
    // A relative path from inside the repository is inside it too.
    let r = env.exec(&["report", job, "--html", "sub-report.html"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!env.repo.join("sub-report.html").exists());

    // A file loopd did not write: refused, untouched.
    let notes = env.tmp.path().join("notes.html");
    std::fs::write(&notes, "<!DOCTYPE html>\n<p>mine</p>\n").expect("notes");
    let r = env.exec(&["report", job, "--html", &notes.to_string_lossy()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("not a report loopd wrote"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&notes).expect("notes"),
        "<!DOCTYPE html>\n<p>mine</p>\n"
    );

    // A directory that does not exist: refused with the path named.
    let r = env.exec(&["report", job, "--html", "/nonexistent-dir/x.html"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("/nonexistent-dir"), "{}", r.stderr);

    // Outside: written; written again over its own page.
    let page = env.tmp.path().join("page.html");
    for _ in 0..2 {
        let r = env.exec(&["report", job, "--html", &page.to_string_lossy()]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let html = std::fs::read_to_string(&page).expect("page");
        assert!(html.starts_with("<!DOCTYPE html>\n<!-- loopd report"));
        assert!(html.contains("stash apply c0ffee"), "the way back: {html}");
        assert!(html.contains("No attempt ran"));
    }

    // `-`: the page on stdout, nothing else there.
    let r = env.exec(&["report", job, "--html", "-"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("<!DOCTYPE html>\n"));
    assert!(r.stdout.trim_end().ends_with("</html>"));

    // --html and --format are one choice.
    let r = env.exec(&["report", job, "--html", "-", "--format", "json"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // The Markdown account is unchanged by all this.
    let r = env.exec(&["report", job]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with(&format!("# loopd job {job}")),
        "{}",
        r.stdout
    );
}

/// A `summary.json` as a job writes it, from the library's own type.
fn write_summary(
    run_dir: &Path,
    repo: &Path,
    reason: loopd::outcome::Reason,
    cost_usd: f64,
) -> loopd::record::Summary {
    let job = run_dir
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let summary = loopd::record::Summary {
        job_id: job,
        repo: repo.to_path_buf(),
        base_ref: "1".repeat(40),
        task: "Make the tests pass <script>alert(1)</script>".into(),
        outcome: reason.outcome(),
        reason,
        detail: "as the test says".into(),
        attempts: vec![],
        totals: loopd::record::Totals {
            cost_usd,
            ..Default::default()
        },
        escalation: None,
        sandbox: None,
        network: None,
        judge: None,
        test_count_off: Default::default(),
        suite: None,
        examiner: None,
        stash_commit: None,
        failure_report: None,
        run_dir: run_dir.to_path_buf(),
        started_at: "2026-11-30T23:00:00Z".into(),
        finished_at: "2026-11-30T23:10:00Z".into(),
    };
    std::fs::create_dir_all(run_dir).expect("run dir");
    std::fs::write(
        run_dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).expect("json"),
    )
    .expect("summary");
    summary
}

#[test]
fn one_page_for_the_night_indexes_every_job_of_a_batch() {
    use loopd::outcome::Reason;
    // A real job (the demo: accepted at attempt 2), its run dir downloaded
    // as an artifact that holds a state dir.
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(load_scenario(
        &manifest_dir().join("fixtures/scenarios/demo.toml"),
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let real = r.summary()["job_id"].as_str().expect("job_id").to_owned();
    let night = env.tmp.path().join("night");
    let artifact = night.join(format!("loopd-{real}/runs"));
    std::fs::create_dir_all(&artifact).expect("artifact");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(env.state.join("runs").join(&real))
        .arg(&artifact)
        .status()
        .expect("cp");
    assert!(cp.success());
    // The others as the other layouts: an artifact holding a run dir, a
    // state dir, and one artifact whose summary is broken.
    let escalated = "20261130-230000000-e5c1";
    let mut esc = write_summary(
        &night.join(format!("loopd-{escalated}/{escalated}")),
        &env.repo,
        Reason::Escalated,
        0.5,
    );
    esc.escalation = Some(loopd::outcome::Escalation {
        attempt: 1,
        test: "tests/test_x.py::test_y".into(),
        claim: "the test asks for the impossible".into(),
        goal_output: "1 failed".into(),
        diff: String::new(),
    });
    std::fs::write(
        night.join(format!("loopd-{escalated}/{escalated}/summary.json")),
        serde_json::to_string(&esc).expect("json"),
    )
    .expect("summary");
    let exhausted = "20261130-230500000-0ex1";
    write_summary(
        &night.join(format!("state/runs/{exhausted}")),
        &env.repo,
        Reason::AttemptsExhausted,
        1.25,
    );
    let broken = night.join("loopd-broken/20261130-231000000-bad0");
    std::fs::create_dir_all(&broken).expect("broken");
    std::fs::write(broken.join("summary.json"), "{\"job_id\": ").expect("broken");

    let out = env.tmp.path().join("out");
    std::fs::create_dir_all(&out).expect("out");
    let index = out.join("index.html");
    let args = [
        "report",
        "--html",
        &index.to_string_lossy(),
        "--batch",
        &night.to_string_lossy(),
    ];
    for _ in 0..2 {
        // Twice: the second run replaces the pages the first wrote.
        let w = env.exec(&args);
        assert_eq!(w.code, 0, "{}", w.stderr);
    }
    let html = std::fs::read_to_string(&index).expect("the index");
    assert!(html.starts_with("<!DOCTYPE html>\n<!-- loopd report"));
    assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("src="));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    // Needs a human, then stopped or failed (the unreadable first), then
    // accepted.
    let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s}:\n{html}"));
    assert!(at(&format!("data-job=\"{escalated}\"")) < at("id=\"not-accepted\""));
    assert!(at("id=\"not-accepted\"") < at("data-job=\"20261130-231000000-bad0\""));
    assert!(at("data-job=\"20261130-231000000-bad0\"") < at(&format!("data-job=\"{exhausted}\"")));
    assert!(at(&format!("data-job=\"{exhausted}\"")) < at("id=\"accepted\""));
    assert!(at("id=\"accepted\"") < at(&format!("data-job=\"{real}\"")));
    assert!(html.contains("summary.json does not parse"), "{html}");
    assert!(html.contains("<dd id=\"total-jobs\">4 (1 unreadable)</dd>"));
    assert!(html.contains("<dd id=\"total-accepted\">1</dd>"));
    assert!(
        html.contains("<dd id=\"total-attempts\">2</dd>"),
        "the demo's two"
    );
    // Each readable job's own page beside the index, linked by its name,
    // the single-job page (the real one with its timeline).
    for job in [escalated, exhausted, real.as_str()] {
        assert!(
            html.contains(&format!("<a href=\"{job}.html\">{job}</a>")),
            "{job}"
        );
        let page = std::fs::read_to_string(out.join(format!("{job}.html"))).expect("page");
        assert!(
            page.starts_with("<!DOCTYPE html>\n<!-- loopd report"),
            "{job}"
        );
        assert!(page.contains(&format!("<code>{job}</code>")), "{job}");
    }
    let page = std::fs::read_to_string(out.join(format!("{real}.html"))).expect("page");
    assert!(page.contains("id=\"timeline-2\"") && page.contains("id=\"interdiff-2\""));
    assert!(!out.join("20261130-231000000-bad0.html").exists());
    // The browser builds the same rows: four jobs, three links.
    let dom = headless(env.tmp.path(), &index, Scheme::Light, &["--dump-dom"]);
    assert_eq!(dom.matches("<tr class=\"job ").count(), 4, "{dom}");
    assert_eq!(dom.matches("<a href=\"").count(), 3, "{dom}");

    // `-`: the index alone, without links to pages that were not written.
    let r = env.exec(&["report", "--html", "-", "--batch", &night.to_string_lossy()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("<!DOCTYPE html>\n") && !r.stdout.contains("<a href"));

    // A page that would replace a file loopd did not write: refused before
    // anything is written.
    let other = env.tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("other");
    std::fs::write(other.join(format!("{exhausted}.html")), "mine").expect("mine");
    let other_index = other.join("index.html");
    let r = env.exec(&[
        "report",
        "--html",
        &other_index.to_string_lossy(),
        "--batch",
        &night.to_string_lossy(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("not a report loopd wrote"),
        "{}",
        r.stderr
    );
    assert!(!other_index.exists() && !other.join(format!("{escalated}.html")).exists());
    // Nor inside a job's repository.
    let inside = env.repo.join("night.html");
    let r = env.exec(&[
        "report",
        "--html",
        &inside.to_string_lossy(),
        "--batch",
        &night.to_string_lossy(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("inside the job's repository"),
        "{}",
        r.stderr
    );
    assert!(!inside.exists());

    // A DIR with no run dir, or none at all: usage, named, with a hint.
    let empty = env.tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("sub")).expect("empty");
    for dir in [empty, env.tmp.path().join("absent")] {
        let r = env.exec(&["report", "--html", "-", "--batch", &dir.to_string_lossy()]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains(&*dir.to_string_lossy()), "{}", r.stderr);
        assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    }
    // --batch needs --html, and takes no JOB.
    let r = env.exec(&["report", "--batch", &night.to_string_lossy()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = env.exec(&[
        "report",
        &real,
        "--html",
        "-",
        "--batch",
        &night.to_string_lossy(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // Without --batch, JOB is still required.
    let r = env.exec(&["report", "--html", "-"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}
