//! Where the judge runs: the goal test (the baseline and every attempt's)
//! and the held-out steps. **The judge's world is not the agent's.**
//!
//! - **Hermetic** (where the system allows unprivileged user namespaces
//!   and overlays): every judge run gets a root of its own, a network of
//!   its own with nothing in it, a fresh `HOME` and `TMPDIR`, and — at the
//!   worktree's own path — a tree that is exactly what the user had at
//!   BASE_REF plus the judged change ([`crate::workspace::layers`]): its
//!   tracked files from git objects, the ignored entries present when the
//!   job started (no agent process ever writes those: the agent sees each
//!   as an overlay of its own), what the baseline built, the judged files,
//!   and for a held-out run the held-out files — under a scratch layer
//!   thrown away after the run. Nothing an agent process wrote outside the
//!   judged change (its `HOME`, its `TMPDIR`, an ignored file it made or
//!   changed, a `.pyc`) is there.
//! - **Shared** (no user namespace): the goal test runs in the worktree,
//!   after the files the judges do not see that changed since the baseline
//!   are set aside ([`crate::workspace::outside`]); said loudly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::{prepare, JobError, Run};
use crate::goal::{self, GoalReport, GoalStep, Mode};
use crate::judges::finding::is_test_file;
use crate::runner::Origins;
use crate::sandbox::{self, Overlay, Sandbox};
use crate::workspace::layers::{self, Ignored, Written};

/// Under the run directory: everything of the judge's world.
const JUDGE: &str = "judge";
/// BASE_REF's tracked files.
const BASE: &str = "base";
/// What the baseline's goal run wrote (its overlay's upper layers).
const BUILT: &str = "built";
/// The ignored entries of the worktree when the job started.
pub(super) const IGNORED_FILE: &str = "ignored.json";

/// The hermetic judge's setup, made once per job.
pub(super) struct Hermetic {
    /// `runs/<id>/judge`.
    dir: PathBuf,
    /// The worktree's ignored entries when the job started.
    pub ignored: Vec<Ignored>,
}

/// What one judge run did.
#[derive(Debug, Clone)]
pub(super) struct WorldRun {
    pub report: GoalReport,
    /// What it changed of its own tree (it ran the candidate's code).
    pub written: Vec<Written>,
    /// Where its runners resolved, probed in the same world before the
    /// steps ran.
    pub origins: Origins,
}

/// A runner probe's bound: it imports the runner and exits.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What a judge run's tree holds above BASE_REF.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Layers<'a> {
    /// The judged change (a layer [`layers::write_change`] wrote).
    pub change: Option<&'a Path>,
    /// The held-out files (a directory copied for this run).
    pub held_out: Option<&'a Path>,
    /// Keep what the run wrote as the layer later runs build on (the
    /// baseline only: BASE_REF's code, never an agent's).
    pub keep_built: bool,
}

impl Hermetic {
    /// The judge's directory and the ignored entries as the job started:
    /// read back from the run directory on a resume (the agent may have
    /// run since: the worktree is not asked again), listed now when no
    /// agent has run (`fresh`). `None` for a job that began with a shared
    /// judge: which ignored entries were the user's can no longer be told.
    pub(super) fn prepare(
        run_dir: &Path,
        ws: &crate::workspace::Workspace,
        base: git2::Oid,
        fresh: bool,
    ) -> Result<Option<Hermetic>, JobError> {
        let dir = run_dir.join(JUDGE);
        crate::util::private_dir(&dir).map_err(|source| JobError::RunDir {
            path: dir.clone(),
            source,
        })?;
        let file = dir.join(IGNORED_FILE);
        let recorded = crate::util::read_text(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<Vec<Ignored>>(&t).ok());
        let ignored = match recorded {
            Some(list) if !fresh => list,
            None if !fresh => return Ok(None),
            _ => {
                let (list, over) = layers::ignored_at_start(ws.git2(), ws.root())?;
                if over > 0 {
                    tracing::warn!(
                        shown = list.len(),
                        left_out = over,
                        "more ignored entries in the worktree than loopd shows a job: the rest are not in the judge's tree"
                    );
                }
                crate::util::write_atomic(
                    &file,
                    serde_json::to_string(&list)
                        .expect("ignored entries serialize")
                        .as_bytes(),
                )
                .map_err(|source| JobError::Write {
                    path: file.clone(),
                    source,
                })?;
                list
            }
        };
        layers::write_base(ws.git2(), base, &dir.join(BASE))?;
        Ok(Some(Hermetic { dir, ignored }))
    }

    /// The layer of attempt `n`'s judged change (`tree`), without `leave`
    /// (`part` names it: `all`, `old`).
    pub(super) fn change_layer(
        &self,
        ws: &crate::workspace::Workspace,
        tree: git2::Oid,
        delta: &layers::Delta,
        leave: &[String],
        name: &str,
    ) -> Result<PathBuf, JobError> {
        let dir = self.dir.join("change").join(name);
        layers::write_change(ws.git2(), tree, delta, leave, &dir)?;
        Ok(dir)
    }

    /// The submodule `path` lies in, if any.
    pub(super) fn submodule_of(&self, path: &str) -> Option<&str> {
        self.ignored
            .iter()
            .filter(|e| e.submodule)
            .map(|e| e.path.as_str())
            .find(|s| path.strip_prefix(s).is_some_and(|r| r.starts_with('/')))
    }

    /// Everything of the judge's world but the record of the ignored
    /// entries (disk the job no longer needs once it ends; a resumed job
    /// writes the base again and builds from scratch).
    pub(super) fn clear(&self) {
        for part in [BASE, BUILT, "change", "agent"] {
            if let Err(e) = layers::remove_tree(&self.dir.join(part)) {
                tracing::warn!(dir = %self.dir.join(part).display(), error = %e, "cannot remove the judge's layers");
            }
        }
        let _ = std::fs::remove_file(self.dir.join(BASE).with_extension("done"));
    }

    /// The agent's view of the ignored entries: each directory an overlay
    /// over the real one with an upper layer of the job's own (kept for the
    /// job: the agent's builds go on from one session to the next), each
    /// file read-only. Nothing the agent does reaches the real ones.
    pub(super) fn agent_view(&self, root: &Path) -> (Vec<Overlay>, Vec<PathBuf>) {
        let mut overlays = Vec::new();
        let mut files = Vec::new();
        for (i, e) in self
            .ignored
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.submodule)
        {
            let target = root.join(&e.path);
            if e.dir {
                let scratch = self.dir.join("agent").join(i.to_string());
                overlays.push(Overlay {
                    target: target.clone(),
                    lowers: vec![target],
                    upper: scratch.join("upper"),
                    work: scratch.join("work"),
                    rule: false,
                });
            } else {
                files.push(target);
            }
        }
        (overlays, files)
    }
}

impl Run<'_> {
    /// Run `steps` as the judge, in a world of their own (see the module
    /// doc) named `label` under the judge's directory, removed after
    /// (except what the baseline built, with `layers.keep_built`).
    pub(super) async fn judge_run(
        &mut self,
        label: &str,
        layers: Layers<'_>,
        steps: &[GoalStep],
        mode: Mode,
        deadline: Instant,
    ) -> Result<WorldRun, JobError> {
        let judge = self
            .hermetic
            .as_ref()
            .map(|h| h.dir.clone())
            .expect("judge_run is called for a hermetic judge only");
        let dir = judge.join(label);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JobError::RunDir { path, source }
        };
        layers::remove_tree(&dir).map_err(io(&dir))?;
        crate::util::private_dir(&dir).map_err(io(&dir))?;
        let result = self.judge_run_in(&dir, layers, steps, mode, deadline).await;
        if layers.keep_built && result.is_ok() {
            let built = judge.join(BUILT);
            layers::remove_tree(&built).map_err(io(&built))?;
            std::fs::rename(dir.join("scratch"), &built).map_err(io(&built))?;
        }
        if let Err(e) = layers::remove_tree(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a judge run's tree");
        }
        result
    }

    async fn judge_run_in(
        &mut self,
        dir: &Path,
        l: Layers<'_>,
        steps: &[GoalStep],
        mode: Mode,
        deadline: Instant,
    ) -> Result<WorldRun, JobError> {
        let h = self.hermetic.as_ref().expect("a hermetic judge");
        let root = self.ws.root().to_path_buf();
        let built = h.dir.join(BUILT);
        let scratch = dir.join("scratch");
        // The worktree's path: the held-out files over the change over
        // what the baseline built over BASE_REF, under a fresh scratch.
        let mut lowers: Vec<PathBuf> = [l.held_out, l.change]
            .into_iter()
            .flatten()
            .map(Path::to_path_buf)
            .collect();
        // What the run writes is judged against the judged layers alone:
        // a file only the baseline's build made is a cache, the run's to
        // rewrite.
        let judged: Vec<PathBuf> = lowers.iter().cloned().chain([h.dir.join(BASE)]).collect();
        let built_tree = built.join("tree/upper");
        if built_tree.is_dir() {
            lowers.push(built_tree);
        }
        lowers.push(h.dir.join(BASE));
        let mut overlays = vec![Overlay {
            target: root.clone(),
            lowers,
            upper: scratch.join("tree/upper"),
            work: scratch.join("tree/work"),
            rule: true,
        }];
        let mut read_only = Vec::new();
        // A submodule's tree is judged as the worktree holds it: what the
        // run writes there is checked like the tree's own.
        let mut live = Vec::new();
        for (i, e) in h.ignored.iter().enumerate() {
            let target = root.join(&e.path);
            if !e.dir {
                read_only.push(target);
                continue;
            }
            let mut lowers = Vec::new();
            let built_entry = built.join(format!("ignored/{i}/upper"));
            if built_entry.is_dir() {
                lowers.push(built_entry);
            }
            lowers.push(target.clone());
            if e.submodule {
                live.push((
                    e.path.clone(),
                    scratch.join(format!("ignored/{i}/upper")),
                    target.clone(),
                ));
            }
            overlays.push(Overlay {
                target,
                lowers,
                upper: scratch.join(format!("ignored/{i}/upper")),
                work: scratch.join(format!("ignored/{i}/work")),
                rule: false,
            });
        }
        // The repository's git directory, read-only (a test may run git).
        read_only.extend(
            self.ws
                .git_dirs()
                .into_iter()
                .filter(|d| d.starts_with(&root)),
        );
        read_only.push(root.join(".git"));
        let (home, tmp) = (dir.join("home"), dir.join("tmp"));
        // Where the runners write the reports loopd asks for: outside the
        // tree, in this run's own fresh temporary directory.
        let results = tmp.join("loopd-results");
        // Made before the namespaces: the root shows only what exists.
        for d in [&home, &tmp, &results] {
            crate::util::private_dir(d).map_err(|source| JobError::RunDir {
                path: d.clone(),
                source,
            })?;
        }
        let plan = prepare::judge_plan(self.job, &self.ws, &self.loopd_exe);
        let network = self.env.network == sandbox::Network::GatewayOnly;
        let spec = prepare::ns_spec(
            &self.loopd_exe,
            &plan,
            dir.join("root"),
            &[&home, &tmp],
            read_only,
            network,
        );
        let spec = sandbox::NsSpec { overlays, ..spec };
        let (ns, _listener) = sandbox::Namespaces::create(&spec).map_err(JobError::Sandbox)?;
        let sandbox = Sandbox::build(&plan, &home, &tmp, Some(Arc::new(ns)))
            .map_err(JobError::Sandbox)?
            .ok_or(JobError::SandboxRequired("a hermetic judge"))?;
        let env = prepare::environment(self.job, &home, &tmp);
        let limits = goal::Limits {
            sandbox: Some(&sandbox),
            env: &env,
            results: Some(&results),
            ..self.goal_limits(deadline)
        };
        // Where the runners resolve, in this world, before anything of the
        // candidate's runs as a test: what `runner_changed` compares.
        let origins = probe_runners(steps, &root, &limits).await?;
        let report = goal::run(steps, &root, mode, &limits).await?;
        // What the run changed of its tree (it ran the candidate's code).
        let mut written = layers::written(&scratch.join("tree/upper"), &judged);
        for (path, upper, lower) in live {
            written.extend(
                layers::written(&upper, &[lower])
                    .into_iter()
                    .map(|w| match w {
                        Written::Changed(p) => Written::Changed(format!("{path}/{p}")),
                        Written::Deleted(p) => Written::Deleted(format!("{path}/{p}")),
                    }),
            );
        }
        Ok(WorldRun {
            report,
            written,
            origins,
        })
    }
}

/// Run each step's runner probe ([`crate::runner::probe`]) where the steps
/// will run: each probed step with what its probe printed (nothing, when
/// it failed: at BASE_REF, nothing to compare with; later, a runner that
/// no longer loads).
async fn probe_runners(
    steps: &[GoalStep],
    root: &Path,
    limits: &goal::Limits<'_>,
) -> Result<Origins, JobError> {
    let probes: Vec<GoalStep> = steps
        .iter()
        .filter_map(|s| {
            crate::runner::probe(&s.run).map(|run| GoalStep {
                name: s.name.clone(),
                run,
                timeout: PROBE_TIMEOUT,
                report: None,
            })
        })
        .collect();
    if probes.is_empty() {
        return Ok(Origins::new());
    }
    let report = goal::run(&probes, root, Mode::All, limits).await?;
    Ok(report
        .steps
        .iter()
        .map(|r| (r.name.clone(), crate::runner::origins(&r.output)))
        .collect())
}

impl Run<'_> {
    /// The test code the tests that existed at BASE_REF run without: the
    /// files the change adds to the test tree, and the protected test
    /// files it changes (under `[protect] tests = "append_only"`), which
    /// those tests then run as they were at BASE_REF — a new test that
    /// runs first and rewires what the old ones call (a patch started and
    /// never stopped, a shared setting set, a package variable assigned)
    /// reaches them only through the file it was appended to. A new data
    /// file `[protect] allow` names is the lead's, not the agent's own
    /// test code: the old tests run with it (a fixture an allowed test now
    /// reads), as with a test the lead allowed to change. New code is
    /// never the lead's: a module under an allowed glob that the runner
    /// would import stays out, as any new test code. A policy that does
    /// not compile lifts nothing.
    pub(super) fn left_out_tests(&self, delta: &layers::Delta) -> Vec<String> {
        let policy = self.env.policy.compile().ok();
        let lifted = |p: &str| policy.as_ref().is_some_and(|c| c.lifted(p));
        let mut out = delta.new_test_files(is_test_file);
        out.retain(|p| !lifted(p) || crate::judges::tree::Lang::of(p).is_some());
        out.extend(
            delta
                .changed
                .iter()
                .filter(|p| {
                    self.env.policy.files.get(p.as_str()).map(String::as_str)
                        == Some(crate::judges::tamper::TEST_AT_BASE)
                        && !lifted(p)
                })
                .cloned(),
        );
        out
    }

    /// Attempt `n`'s goal test in the judge's world: first the tests that
    /// existed at BASE_REF **alone** — the change without the test code it
    /// adds ([`Self::left_out_tests`]), so that no test code of the agent's
    /// (a conftest, a package `__init__`, a `TestMain`, a test appended
    /// first) runs beside them, whatever its spelling — then, when the
    /// change adds such code and that run is green, the whole change. The report that decides, and the run of
    /// the old tests alone when it was a run of its own; `None` when a
    /// signal cut a run short.
    #[allow(clippy::type_complexity)]
    pub(super) async fn hermetic_goal(
        &mut self,
        n: u32,
        deadline: Instant,
    ) -> Result<Option<(GoalReport, Option<GoalReport>, Vec<Written>, Origins)>, JobError> {
        let tree = self
            .current()
            .tree
            .as_deref()
            .and_then(|t| git2::Oid::from_str(t).ok())
            .ok_or(JobError::NoJudgedTree { attempt: n })?;
        let (all, old, new_tests) = {
            let h = self.hermetic.as_ref().expect("a hermetic judge");
            let delta = layers::delta(self.ws.git2(), self.base_oid, tree)?;
            let new_tests = self.left_out_tests(&delta);
            let all = h.change_layer(&self.ws, tree, &delta, &[], &format!("{n}-all"))?;
            let old = match new_tests.is_empty() {
                true => None,
                false => {
                    Some(h.change_layer(&self.ws, tree, &delta, &new_tests, &format!("{n}-old"))?)
                }
            };
            (all, old, new_tests)
        };
        let steps = self.job.goal.clone();
        let layers = |change| Layers {
            change: Some(change),
            ..Layers::default()
        };
        let Some(old) = old else {
            let run = self
                .judge_run(
                    &format!("attempt-{n}"),
                    layers(&all),
                    &steps,
                    Mode::FirstFailure,
                    deadline,
                )
                .await?;
            return Ok(self.signalled().is_none().then_some((
                run.report,
                None,
                run.written,
                run.origins,
            )));
        };
        let WorldRun {
            report: mut alone,
            mut written,
            origins: alone_origins,
        } = self
            .judge_run(
                &format!("attempt-{n}-alone"),
                layers(&old),
                &steps,
                Mode::FirstFailure,
                deadline,
            )
            .await?;
        if self.signalled().is_some() {
            return Ok(None);
        }
        // Each run's runners are compared with BASE_REF's: the alone run's
        // under their step's name with ` (alone)`.
        let mut origins: Origins = alone_origins
            .into_iter()
            .map(|(step, o)| (format!("{step}{}", super::ALONE), o))
            .collect();
        if !alone.passed() {
            if let Some(step) = alone.steps.iter_mut().find(|s| !s.passed) {
                step.output = format!(
                    "loopd: the tests that existed at BASE_REF ran on the change without the test code it adds ({}; an existing test file as it was at BASE_REF): they must pass on their own, with no test code of the change beside them\n{}",
                    new_tests.join(", "),
                    step.output
                );
            }
            tracing::info!(
                attempt = n,
                new_test_files = new_tests.len(),
                "the tests of BASE_REF are red without the change's new test files"
            );
            return Ok(Some((alone.clone(), Some(alone), written, origins)));
        }
        let whole = self
            .judge_run(
                &format!("attempt-{n}"),
                layers(&all),
                &steps,
                Mode::FirstFailure,
                deadline,
            )
            .await?;
        written.extend(whole.written);
        written.sort_by(|a, b| a.path().cmp(b.path()));
        written.dedup();
        origins.extend(whole.origins);
        Ok(self
            .signalled()
            .is_none()
            .then_some((whole.report, Some(alone), written, origins)))
    }
}

/// What a judge-only tree holds besides the judged tree.
#[derive(Clone, Copy)]
pub(super) enum Files<'a> {
    None,
    /// Every held-out step's files.
    HeldOut,
    /// A directory's files (the examiner's tests).
    Dir(&'a Path),
}
