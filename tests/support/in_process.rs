//! The in-process job harness: a whole job — [`loopd::job::run`] with the
//! scripted agent — driven from the test's own process, with no `loopd`
//! process around it. For what the loop decides (the gates, their order,
//! what is accepted and why): the job runs exactly as `loopd run` runs it
//! (the same resolution of flags and `loopd.toml`, the same gateway,
//! sandbox, hook and goal runners), in the test's world — its HOME, state
//! dir, tools and credential are given to the job as its host environment
//! ([`loopd::util::Host`]), never read from this process's.
//!
//! What it does not prove stays with the tests that start `loopd`: the
//! CLI's flags parsing into exit codes, signals, `kill -9` at the crash
//! points, the foreground job's records (`status`, `--job-id`), the live
//! lines and the real agent CLIs.

use std::sync::Arc;

use clap::Parser;
use serde_json::Value;

use super::model::ScriptedModel;
use super::{loopd_bin, TestEnv};

/// `loopd run`'s job flags, parsed as the CLI parses them.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    job: loopd::config::JobFlags,
}

impl TestEnv {
    /// Run one job on this environment's repository in this process, as
    /// `loopd run --json ARGS` would against `model`, with `extra`
    /// variables in its environment: the summary, as `--json` prints it.
    pub fn run_in_process(
        &self,
        model: &ScriptedModel,
        args: &[&str],
        extra: &[(&str, std::ffi::OsString)],
    ) -> Value {
        let repo = self.repo.to_string_lossy().into_owned();
        let state = self.state.to_string_lossy().into_owned();
        let argv = ["loopd", "-C", &repo, "--state-dir", &state]
            .into_iter()
            .chain(args.iter().copied());
        let flags = Flags::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("the job's flags {args:?}: {e}"))
            .job;
        let ws = loopd::workspace::Workspace::open(&flags.repo).expect("the repository opens");
        let mut job = loopd::config::Job::resolve(&flags, ws.root())
            .unwrap_or_else(|e| panic!("the job resolves: {e}"));
        let host = loopd::util::Host::from_vars(
            self.loopd_env(Some(model))
                .into_iter()
                .chain(extra.iter().map(|(k, v)| ((*k).into(), v.clone()))),
        );
        job.host = Arc::new(host.clone());
        job.locate_clis()
            .unwrap_or_else(|(what, hint)| panic!("{what} ({hint})"));
        loopd::job::ready(&ws, &job).expect("a clean tree and a state dir");
        // The model's credential and address, as `loopd run` picks them
        // from its environment when it starts.
        let get = |k: &str| host.var(k);
        let access = loopd::agent::AGENTS
            .iter()
            .filter_map(|a| a.access(&get).ok().map(|x| (a.name(), x)))
            .collect();
        let (_stop, stop) = tokio::sync::watch::channel(None);
        let control = loopd::job::Control {
            stop,
            loopd_exe: loopd_bin(),
            access,
            job_id: None,
            progress: false,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let summary = rt
            .block_on(loopd::job::run(&job, ws, control))
            .unwrap_or_else(|e| panic!("the job runs to an ending: {e}"));
        serde_json::to_value(&summary).expect("the summary serializes")
    }
}
