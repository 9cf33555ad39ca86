//! Running the held-out goal steps ([`crate::goal::held_out`]) for a job:
//! at BASE_REF once (what their test counts are compared with) and on each
//! attempt whose visible goal and gates are green, each time on a
//! judge-only tree under the run directory that is removed right after.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use super::{prepare, JobError, Run};

use super::world::Files;
use crate::goal::held_out::{copy_files, MAX_BYTES};
use crate::goal::held_out::{known_ids, CountCheck, Feedback, Outcome};
use crate::goal::{self, GoalReport, GoalStep, Mode};
use crate::judges::testcount;

/// The largest held-out file whose words name its tests (bigger ones are
/// data, not tests).
const MAX_TEST_FILE: u64 = 1 << 20;

impl Run<'_> {
    /// Each held-out step of `report` as the journal keeps it: passed or
    /// not, the failing ids the held-out files define, and the count
    /// gate's verdict against BASE_REF's counts — no output, no number.
    pub(super) fn held_out_outcomes(&self, report: &GoalReport) -> Vec<Outcome> {
        let names = self.held_out_test_names();
        let known = |n: &str| names.contains(n);
        let steps = self.held_out_steps();
        let state = self.journal.state();
        let base = match (&state.held_out_baseline, state.held_out_counts.is_empty()) {
            // A journal of a loopd that kept BASE_REF's output: count it.
            (Some(report), true) => super::judge::counts_of(&steps, report),
            _ => state.held_out_counts.clone(),
        };
        let base_ids = |name: &str| {
            state
                .held_out_baseline
                .as_ref()?
                .steps
                .iter()
                .find(|s| s.name == name)?
                .results
                .clone()
        };
        report
            .steps
            .iter()
            .map(|r| {
                let step = steps.iter().find(|s| s.name == r.name);
                // By ids where the runner wrote its report at BASE_REF.
                let by_ids = base_ids(&r.name).map(|base| match &r.results {
                    None => CountCheck::Unreadable,
                    Some(now) if !goal::results::compare(&base, now, 1).is_empty() => {
                        CountCheck::Dropped
                    }
                    Some(_) => CountCheck::Held,
                });
                let mut failing = r.read(None).failing.clone();
                // The report's failing tests by their name (`module::name[param]`).
                failing.extend(r.results.iter().flatten().filter_map(|(id, v)| {
                    let name = id.rsplit("::").next()?;
                    let name = name.split('[').next().unwrap_or(name);
                    v.failing().then(|| name.to_owned())
                }));
                let count =
                    by_ids.unwrap_or(match (step.and_then(|s| s.report), base.get(&r.name)) {
                        (Some(preset), Some(base)) => match r.counts(preset) {
                            Err(_) => CountCheck::Unreadable,
                            Ok(now) if testcount::compare(base, &now).is_some() => {
                                CountCheck::Dropped
                            }
                            Ok(_) => CountCheck::Held,
                        },
                        _ => CountCheck::NotCounted,
                    });
                Outcome {
                    name: r.name.clone(),
                    passed: r.passed,
                    timed_out: r.timed_out,
                    failing: known_ids(&failing, &known),
                    count,
                }
            })
            .collect()
    }

    /// A held-out report as the journal keeps it: each step's output
    /// replaced by what loopd read of it, unless `full` feedback tells the
    /// output anyway (then `docs/judging.md` says what that exposes).
    pub(super) fn held_out_kept(&self, mut report: GoalReport, outcomes: &[Outcome]) -> GoalReport {
        if self.job.guard.held_out_feedback == Feedback::Full {
            return report;
        }
        for step in &mut report.steps {
            // What the output said goes with it: the expected values of a
            // failing held-out test are the hidden tests' own.
            step.read = None;
            let failing = outcomes
                .iter()
                .find(|o| o.name == step.name)
                .map(|o| o.failing.join(", "))
                .unwrap_or_default();
            step.output = format!(
                "loopd: a held-out step's output is not kept (it may quote the hidden tests); {}\n",
                match (step.passed, failing.is_empty()) {
                    (true, _) => "it passed".to_owned(),
                    (false, true) =>
                        "it failed; no failing test of the held-out files was named".to_owned(),
                    (false, false) => format!("failing held-out tests: {failing}"),
                }
            );
        }
        report
    }

    /// The held-out steps as goal steps.
    pub(super) fn held_out_steps(&self) -> Vec<GoalStep> {
        self.job.held_out.iter().map(|h| h.step.clone()).collect()
    }

    /// Run every held-out step on a judge-only tree made of `tree` (a
    /// judged tree, or BASE_REF's commit) and the held-out files, under
    /// `dir` (removed before and after). Returns the report and how many
    /// held-out files the tree held.
    /// (`&mut self`: a shared `Run` is not `Send` across an await.)
    pub(super) async fn run_held_out(
        &mut self,
        tree: git2::Oid,
        dir: &Path,
        deadline: Instant,
    ) -> Result<(GoalReport, usize, usize), JobError> {
        let steps = self.held_out_steps();
        self.judge_only(tree, dir, &steps, Files::HeldOut, &[], deadline)
            .await
    }

    /// Run `steps` on a judge-only tree made of `tree` and `files` (the
    /// held-out files for the held-out steps, the examiner's tests for
    /// theirs, none for the whole suite), under `dir` (removed before and
    /// after). Returns the report,
    /// how many held-out files the tree held and how many paths of its
    /// tree the run changed. The change's files `leave_out` names are not
    /// in the tree (the whole suite runs without the test files the
    /// change adds, as the goal's old tests do).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn judge_only(
        &mut self,
        tree: git2::Oid,
        dir: &Path,
        steps: &[GoalStep],
        files: Files<'_>,
        leave_out: &[String],
        deadline: Instant,
    ) -> Result<(GoalReport, usize, usize), JobError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JobError::RunDir { path, source }
        };
        if dir.exists() {
            // What a crash in the middle left: never judged from.
            crate::workspace::layers::remove_tree(dir).map_err(io(dir))?;
        }
        crate::util::private_dir(dir).map_err(io(dir))?;
        let result = if self.hermetic.is_some() {
            self.hermetic_held_out(tree, dir, steps, files, leave_out, deadline)
                .await
        } else {
            self.held_out_in(tree, dir, steps, files, leave_out, deadline)
                .await
        };
        // Thrown away whatever happened: nothing of it is read again.
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the judge-only tree");
        }
        result
    }

    /// With a hermetic judge: the held-out files gathered under `dir`, as
    /// the top layer of a judge run over the judged change (none at
    /// BASE_REF) — at the worktree's path, with the ignored entries of the
    /// job's start, in a network of its own.
    async fn hermetic_held_out(
        &mut self,
        tree: git2::Oid,
        dir: &Path,
        steps: &[GoalStep],
        files: Files<'_>,
        leave_out: &[String],
        deadline: Instant,
    ) -> Result<(GoalReport, usize, usize), JobError> {
        let files_dir = dir.join("files");
        let with_files = !matches!(files, Files::None);
        let files = self.gather(files, &files_dir, dir)?;
        let change = if tree == self.base_oid {
            None
        } else {
            let h = self.hermetic.as_ref().expect("a hermetic judge");
            let delta = crate::workspace::layers::delta(self.ws.git2(), self.base_oid, tree)?;
            let name = match leave_out.is_empty() {
                true => format!("judge-only-{tree}"),
                false => format!("judge-only-{tree}-old"),
            };
            Some(h.change_layer(&self.ws, tree, &delta, leave_out, &name)?)
        };
        let layers = super::world::Layers {
            change: change.as_deref(),
            held_out: with_files.then_some(files_dir.as_path()),
            keep_built: false,
        };
        let label = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "held-out".into());
        let (report, written) = self
            .judge_run(&format!("{label}-run"), layers, steps, Mode::All, deadline)
            .await
            .map(|r| (r.report, r.written))?;
        for s in &report.steps {
            tracing::info!(step = %s.name, passed = s.passed, ms = s.duration_ms, "judge-only step");
        }
        if !written.is_empty() {
            tracing::warn!(
                paths = written.len(),
                run = %label,
                "the candidate's code changed the judge-only run's tree"
            );
        }
        Ok((report, files, written.len()))
    }

    /// Copy `files` into `into`: how many files it holds.
    fn gather(&self, files: Files<'_>, into: &Path, scratch: &Path) -> Result<usize, JobError> {
        match files {
            Files::None => Ok(0),
            Files::HeldOut => self.gather_held_out(into, scratch),
            Files::Dir(from) => {
                std::fs::create_dir_all(into).map_err(|source| JobError::RunDir {
                    path: into.to_path_buf(),
                    source,
                })?;
                Ok(copy_files(from, into)?.files.len())
            }
        }
    }

    /// Copy every held-out source into `into` (a ref's tree written apart
    /// under `scratch` first); how many files it holds.
    fn gather_held_out(&self, into: &Path, scratch: &Path) -> Result<usize, JobError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JobError::RunDir { path, source }
        };
        std::fs::create_dir_all(into).map_err(io(into))?;
        let mut files = BTreeSet::new();
        for (i, (from, commit)) in held_out_sources(self.job).into_iter().enumerate() {
            let from = match commit {
                None => from,
                Some(commit) => {
                    let src = scratch.join(format!("source-{i}"));
                    let repo = git2::Repository::open(&from).map_err(|source| {
                        crate::workspace::WorkspaceError::Git {
                            operation: "open the held-out repository",
                            path: from.clone(),
                            source,
                        }
                    })?;
                    let oid = git2::Oid::from_str(&commit).map_err(|source| {
                        crate::workspace::WorkspaceError::Git {
                            operation: "read the held-out commit",
                            path: from.clone(),
                            source,
                        }
                    })?;
                    crate::workspace::write_tree_of(&repo, oid, &src)?;
                    src
                }
            };
            let copied = copy_files(&from, into)?;
            for s in &copied.skipped {
                tracing::warn!(dir = %from.display(), path = %s, "a held-out entry that is not a regular file or a directory was not copied");
            }
            files.extend(copied.files);
        }
        Ok(files.len())
    }

    /// [`Run::run_held_out`] inside its (made) directory.
    async fn held_out_in(
        &mut self,
        tree: git2::Oid,
        dir: &Path,
        steps: &[GoalStep],
        files: Files<'_>,
        leave_out: &[String],
        deadline: Instant,
    ) -> Result<(GoalReport, usize, usize), JobError> {
        let root = dir.join("tree");
        self.ws.write_tree(tree, &root)?;
        for p in leave_out {
            let path = root.join(p);
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot leave a file out of the judge-only tree");
            }
        }
        let files = self.gather(files, &root, dir)?;
        let sandbox = prepare::held_out_sandbox(
            self.job,
            &self.loopd_exe,
            &root,
            &dir.join("home"),
            &dir.join("tmp"),
        )?;
        // Its own home and temporary directory, the only ones its root
        // holds; the runners' reports in the latter.
        let env = prepare::environment(self.job, &dir.join("home"), &dir.join("tmp"));
        let results = dir.join("tmp").join("loopd-results");
        crate::util::private_dir(&results).map_err(|source| JobError::RunDir {
            path: results.clone(),
            source,
        })?;
        let limits = goal::Limits {
            sandbox: Some(&sandbox),
            env: &env,
            results: Some(&results),
            ..self.goal_limits(deadline)
        };
        let report = goal::run(steps, &root, Mode::All, &limits).await?;
        for s in &report.steps {
            tracing::info!(step = %s.name, passed = s.passed, ms = s.duration_ms, "judge-only step");
        }
        Ok((report, files, 0))
    }

    /// The names of the tests the held-out files define (`def test_…`,
    /// `test("…")`/`it("…")`, `func Test…`, a `#[test] fn`): a failing
    /// test's name the held-out step's output shows is passed on only if it
    /// is one of these. The candidate's code runs in that step and can
    /// print anything, so a word that is merely *in* the files (a comment,
    /// a string, an expected value) must never pass as an id.
    pub(super) fn held_out_test_names(&self) -> BTreeSet<String> {
        static DEF: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        let def = crate::util::once_regex(
            &DEF,
            r#"(?m)^\s*(?:async\s+)?def\s+(test\w*)\s*\(|\b(?:test|it)\s*\(\s*['"`]([^'"`\n]+)['"`]|^\s*func\s+(Test\w+)\s*\(|#\[test\]\s*(?:async\s+)?fn\s+(\w+)"#,
        );
        let mut names = BTreeSet::new();
        let mut budget = MAX_BYTES;
        let mut read = |text: &str| {
            for c in def.captures_iter(text) {
                if let Some(n) = (1..=4).find_map(|k| c.get(k)) {
                    names.insert(n.as_str().trim().to_owned());
                }
            }
        };
        for (from, commit) in held_out_sources(self.job) {
            if let Some(commit) = commit {
                let Ok(repo) = git2::Repository::open(&from) else {
                    continue;
                };
                let Some(tree) = git2::Oid::from_str(&commit)
                    .ok()
                    .and_then(|o| repo.find_commit(o).ok())
                    .and_then(|c| c.tree().ok())
                else {
                    continue;
                };
                tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
                    if let Some(b) = entry.to_object(&repo).ok().and_then(|o| o.into_blob().ok()) {
                        let len = b.size() as u64;
                        if len <= MAX_TEST_FILE.min(budget) {
                            budget -= len;
                            read(&String::from_utf8_lossy(b.content()));
                        }
                    }
                    git2::TreeWalkResult::Ok
                })
                .ok();
                continue;
            }
            let mut stack = vec![from];
            while let Some(d) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in entries.flatten() {
                    let p = e.path();
                    let Ok(m) = std::fs::symlink_metadata(&p) else {
                        continue;
                    };
                    if m.is_dir() {
                        stack.push(p);
                    } else if m.is_file() && m.len() <= MAX_TEST_FILE.min(budget) {
                        budget -= m.len();
                        if let Ok(bytes) = crate::util::read_untrusted(&p, MAX_TEST_FILE) {
                            read(&String::from_utf8_lossy(&bytes));
                        }
                    }
                }
            }
        }
        names
    }
}

/// Where each held-out step's files come from, once each: a directory, or
/// a repository and the commit its `ref` was pinned to.
fn held_out_sources(job: &crate::config::Job) -> Vec<(std::path::PathBuf, Option<String>)> {
    let mut out: Vec<(std::path::PathBuf, Option<String>)> = Vec::new();
    for h in &job.held_out {
        let source = (h.files.clone(), h.commit.clone());
        if !out.contains(&source) {
            out.push(source);
        }
    }
    out
}
