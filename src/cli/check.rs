//! `loopd check`: validate `loopd.toml` and the rubric, print the resolved
//! job; with `--preflight`, run the goal test once as the baseline would.

use crate::cli::CliError;
use crate::config::{Job, JobFlags};
use crate::goal::{self, Preflight};
use crate::outcome::ExitStatus;
use crate::workspace::Workspace;

/// Validate `loopd.toml` and the rubric and print the job as `loopd run`
/// would run it. Nothing is run and nothing is written unless `--preflight`
/// asks to run the goal test.
///
/// Example: `loopd check -C ~/src/app --preflight`
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub flags: JobFlags,
    /// Print the resolved job as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also run the goal test once, as `loopd run`'s baseline would (no
    /// model is called): exit 2 when a step's program cannot run, 7 when
    /// every step passes already (unless `--allow-green`).
    #[arg(long)]
    pub preflight: bool,
}

pub fn check(args: CheckArgs) -> Result<ExitStatus, CliError> {
    let ws = Workspace::open(&args.flags.repo)?;
    let job = Job::resolve(&args.flags, ws.root()).map_err(|e| {
        let mut err = CliError::from(e);
        // The usual hint is "run `loopd check`": this is it.
        if err
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("loopd check"))
        {
            err.hint = None;
        }
        err
    })?;
    let mut located = job.clone();
    if let Err((what, hint)) = located.locate_clis() {
        eprintln!("warning: {what}; `loopd run` would exit 5\nhint: {hint}");
    }
    for step in &job.goal {
        if let Some(program) = goal::program_of(&step.run) {
            if !goal::program_resolves(&program, ws.root()) {
                eprintln!(
                    "warning: goal step `{}`: the program `{program}` was not found; `loopd run` would stop at the baseline (exit 2)\nhint: a typo, or a tool to install? `loopd check --preflight` runs the goal test once to be sure",
                    step.name
                );
            }
        }
        if step.report.is_none() && crate::judges::testcount::looks_like_tests(&step.run) {
            eprintln!(
                "warning: goal step `{}` seems to run tests but has no `report`: the test-count gate cannot check it\nhint: add `report = \"pytest\"` (or cargo, go, jest, vitest, node) to that [[goal]] step, or `report = \"none\"` to silence this",
                step.name
            );
        }
    }
    let preflight = if args.preflight {
        Some(preflight(&job, ws.root())?)
    } else {
        None
    };
    if args.json {
        crate::cli::out!(
            "{}",
            serde_json::to_string_pretty(&job).expect("the job serializes")
        );
        return Ok(preflight.map_or(ExitStatus::Success, |p| p.1));
    }
    let mut out = String::new();
    out.push_str(&format!("repository:    {}\n", job.repo.display()));
    out.push_str(&format!(
        "config:        {}\n",
        job.config_file
            .as_ref()
            .map_or("(none; flags and defaults)".into(), |p| p
                .display()
                .to_string())
    ));
    out.push_str(&format!("task:          {}\n", job.task));
    out.push_str("goal test:\n");
    for (i, s) in job.goal.iter().enumerate() {
        let report = match s.report {
            Some(p) => format!(
                "test count: {}",
                serde_json::to_value(p)
                    .expect("a preset serializes")
                    .as_str()
                    .unwrap_or("?")
            ),
            None => "no test count".to_owned(),
        };
        out.push_str(&format!(
            "  {}. {} — `{}` (timeout {}, {report})\n",
            i + 1,
            s.name,
            s.run,
            humantime::format_duration(s.timeout)
        ));
    }
    out.push_str(&match &job.suite {
        Some(s) => format!(
            "whole suite:   `{}` (timeout {}, {}): on a judge-only tree at BASE_REF and after a green goal; every test that passed at BASE_REF must still pass\n",
            s.step.run,
            humantime::format_duration(s.step.timeout),
            match &s.inferred_from {
                Some(step) => format!("inferred from goal step `{step}`, which narrows it; `[judge] suite = false` turns it off"),
                None => "[judge] suite".to_owned(),
            }
        ),
        None => "whole suite:   none (no goal step narrows a runner loopd reads; `[judge] suite` names one)\n".to_owned(),
    });
    if let Some(why) = &job.examiner_off {
        out.push_str(&format!(
            "examiner:      off ({why}); `[examiner] mode` sets it\n"
        ));
    }
    if let Some(e) = &job.examiner {
        out.push_str(&format!(
            "examiner:      `{}` on `{}` writes tests from the task before attempt 1; `{}` runs them on a judge-only tree ({}): {}\n",
            e.model,
            e.agent,
            e.run,
            e.mode.as_str(),
            match e.mode {
                crate::examiner::Mode::Evidence => "a red one goes to the critic with its source and output, and rejects the attempt unless the critic rules it wrong by quoting the task, the rubric or the docs; one that passed at BASE_REF and fails rejects; the agent learns its id and the critic's words, never the test",
                _ => "a red one rejects the attempt, the agent learns only its id",
            }
        ));
    }
    if !job.held_out.is_empty() {
        out.push_str(&format!(
            "held out:      after a green goal, on a judge-only tree; the next prompt learns: {}\n",
            job.guard.held_out_feedback.as_str()
        ));
        for h in &job.held_out {
            let files = match &h.commit {
                Some(c) => format!("the tree of commit {}", &c[..c.len().min(12)]),
                None => match crate::goal::held_out::measure(&h.files) {
                    Ok((n, _)) => format!("{n} files"),
                    Err(why) => why,
                },
            };
            out.push_str(&format!(
                "  - {} — `{}` (timeout {}), files from {} ({files}; no process of the job can read them)\n",
                h.step.name,
                h.step.run,
                humantime::format_duration(h.step.timeout),
                h.files.display()
            ));
        }
    }
    out.push_str(&format!(
        "rubric:        {} ({})\n",
        job.rubric.name, job.rubric_source
    ));
    for r in &job.rubric.rules {
        out.push_str(&format!("  rule {}: {}\n", r.id, r.text));
    }
    out.push_str("pre-critic:    deterministic checks on the added lines, before the critic\n");
    for line in job.rubric.precheck_plan.render() {
        out.push_str(&format!("  {line}\n"));
    }
    out.push_str(&format!("attempts:      {}\n", job.max_attempts));
    out.push_str(&format!(
        "agent:         {} ({}), model {}\n",
        job.agent,
        located.agent_bin.display(),
        job.agent_model
    ));
    out.push_str(&format!(
        "critic:        {} ({}), model {}{}\n",
        job.critic_agent,
        located.critic_bin.display(),
        job.critic_model,
        if job.critic_agent == job.agent {
            ""
        } else {
            " — another vendor's model judges"
        }
    ));
    out.push_str(&format!(
        "allowed tools: {}\n",
        job.allowed_tools.join(", ")
    ));
    let c = &job.caps;
    out.push_str(&format!(
        "caps:          ${} · {} turns · {} tokens · job {} · attempt {} · idle {}\n",
        c.limits.budget_usd,
        c.limits.max_turns,
        c.limits.max_tokens,
        humantime::format_duration(c.timeout),
        humantime::format_duration(c.attempt_timeout),
        humantime::format_duration(c.idle_timeout)
    ));
    let g = &job.guard;
    out.push_str(&format!(
        "stuck guard:   same call {} times in the last {} · grace {}\n",
        g.stuck_repeat,
        g.stuck_window,
        humantime::format_duration(g.grace)
    ));
    out.push_str(&format!(
        "size gate:     changes over {} KiB of diff are rejected before the critic\n",
        g.max_diff_kb
    ));
    let sb = &job.sandbox;
    out.push_str(&if sb.enabled {
        format!(
            "sandbox:       Landlock for the agent, the critic and the goal steps{}{}{}\n",
            if sb.require { " (required)" } else { "" },
            match sb.network {
                Some(crate::sandbox::Network::Open) => "; network: open",
                Some(crate::sandbox::Network::GatewayOnly) => {
                    "; network: the gateway only (required)"
                }
                None => "; network: the gateway only where the system allows a private network namespace, else open",
            },
            if sb.read_write.is_empty() {
                String::new()
            } else {
                format!(
                    "; also writable: {}",
                    sb.read_write
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )
    } else {
        "sandbox:       OFF ([sandbox] enabled = false)\n".to_owned()
    });
    if sb.enabled {
        let exe = std::env::current_exe().unwrap_or_else(|_| "loopd".into());
        let plan = crate::job::sandbox_plan(&located, &ws, &exe);
        out.push_str("the sandbox may read (and run):\n");
        out.push_str(&format!(
            "  the system: {} (but {})\n",
            crate::sandbox::SOFTWARE
                .iter()
                .chain(crate::sandbox::SYSTEM_STATE)
                .filter(|p| std::path::Path::new(p).exists())
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            crate::sandbox::ETC_SECRETS
                .iter()
                .filter(|p| std::path::Path::new(p).exists())
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for (p, why) in plan.read.iter().filter(|(_, why)| why != "the system") {
            out.push_str(&format!("  {}  ({why})\n", p.display()));
        }
        out.push_str("the sandbox may write:\n");
        for (p, why) in &plan.read_write {
            out.push_str(&format!("  {}  ({why})\n", p.display()));
        }
        out.push_str(&format!(
            "  a private HOME and TMPDIR under the run directory; the devices {}\n",
            crate::sandbox::DEVICES.join(", ")
        ));
    }
    // The whole environment of a job's processes: names only (a value can
    // be a secret of the lead's), and why each is there.
    out.push_str("environment:   every process of the job gets only these variables:\n");
    let env = job
        .environment()
        .with("HOME", "(a private home of the role)")
        .with("TMPDIR", "(a private temporary directory of the role)");
    for (name, source) in env.names() {
        out.push_str(&format!("  {name}  ({})\n", source.as_str()));
    }
    for name in &job.sandbox.env {
        if env.get(name).is_none() {
            out.push_str(&format!(
                "  {name}  ([sandbox] env / --env; not set in loopd's environment, so not passed)\n"
            ));
        }
    }
    if !job.protect.paths.is_empty() {
        out.push_str(&format!(
            "also protected: {}\n",
            job.protect.paths.join(", ")
        ));
    }
    // The lead's exceptions, each said with what it does not lift.
    for entry in &job.protect.allow {
        out.push_str(&format!(
            "protect.allow: {entry} (lifted: changes recorded, skip markers still refused)\n"
        ));
    }

    out.push_str(&format!("state dir:     {}\n", job.state_dir.display()));
    if let Some((line, _)) = &preflight {
        out.push_str(&format!("preflight:     {line}\n"));
    }
    crate::cli::out!("{}", out.trim_end_matches('\n'));
    Ok(preflight.map_or(ExitStatus::Success, |p| p.1))
}

/// Run the goal test once in the repository, as the baseline, and judge it
/// as `loopd run` would: one line for the report and the exit status.
fn preflight(job: &Job, root: &std::path::Path) -> Result<(String, ExitStatus), CliError> {
    // The job's environment (the allow-list), with a home and temporary
    // directory of its own, as a job's goal steps get.
    let scratch = std::env::temp_dir().join(format!("loopd-check-{}", std::process::id()));
    for d in ["home", "tmp"] {
        crate::util::private_dir(&scratch.join(d)).map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot make `{}`: {e}", scratch.join(d).display()),
            )
        })?;
    }
    let env = job
        .environment()
        .with("HOME", scratch.join("home"))
        .with("TMPDIR", scratch.join("tmp"));
    let limits = goal::Limits {
        env: &env,
        grace: job.guard.grace,
        deadline: None,
        stop: None,
        scope: "check",
        // The user's own goal test at their checkout, no agent involved.
        sandbox: None,
        results: None,
    };
    let report =
        crate::cli::runtime()?.block_on(goal::run(&job.goal, root, goal::Mode::All, &limits));
    if let Err(e) = std::fs::remove_dir_all(&scratch) {
        tracing::warn!(dir = %scratch.display(), error = %e, "cannot remove the preflight's scratch directory");
    }
    let report = report.map_err(|e| CliError::new(ExitStatus::Environment, e.to_string()))?;
    eprint!("{}", report.render());
    // What the test-count gate would read at this baseline.
    for (step, result) in job.goal.iter().zip(&report.steps) {
        let Some(preset) = step.report else { continue };
        match result.counts(preset) {
            Ok(c) => eprintln!(
                "test count at `{}`: {} ran ({} passed, {} failed), {} skipped, {} deselected{}",
                step.name,
                c.ran,
                c.passed,
                c.failed,
                c.skipped,
                c.deselected,
                if c.subtests > 0 {
                    format!(", {} subtests", c.subtests)
                } else {
                    String::new()
                }
            ),
            Err(why) => eprintln!(
                "warning: goal step `{}`: the test-count gate would be off for the whole job: {why}",
                step.name
            ),
        }
    }
    Ok(match report.preflight() {
        Preflight::Ready => {
            let red = report.failed_step().map_or("?", |s| s.name.as_str());
            (format!("ready — the goal test is red at `{red}`"), ExitStatus::Success)
        }
        Preflight::NotRunnable { step, command, code } => (
            format!("goal step `{step}` cannot run (`{command}` exited {code}): `loopd run` would stop at the baseline with exit 2"),
            ExitStatus::Usage,
        ),
        Preflight::AlreadyGreen if job.allow_green => (
            "the goal test is green already; the job goes on (allow_green)".into(),
            ExitStatus::Success,
        ),
        Preflight::AlreadyGreen => (
            "the goal test is green already: nothing to fix — `loopd run` would end with exit 7 (pass `--allow-green` for a rubric-only job)".into(),
            ExitStatus::NothingToFix,
        ),
    })
}
