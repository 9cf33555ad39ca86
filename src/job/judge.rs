//! Everything after the agent session, in order: `.git/` against its pin
//! (then put back) → the diff and the progress guard → the interdiff with
//! the previous attempt and the scope check → the hook's denials → the diff
//! gate (protected paths, skip markers) → the goal test → `.git/` and the
//! diff gate again (the goal ran the agent's code) → the test-count gate →
//! the pre-critic → judge integrity → the critic → the decision. Each
//! step's result is journaled; on a resume a step whose result the journal
//! holds is not run again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use super::attempt::Judged;
use super::{decide, Feedback, JobError, Run};
use crate::agent::session::Role;
use crate::config::Job;
use crate::critic::{self, CriticInput, CriticVerdict, Previous, Shown};
use crate::goal::{self, GoalReport, GoalStep, Mode};
use crate::guard::finding::{Check, Finding};
use crate::guard::held_out;
use crate::guard::precheck::{self, Lang};
use crate::guard::size;
use crate::guard::tamper;
use crate::guard::testcount::{self, Counts, Unreadable};
use crate::journal::{Ending, Event, Gate};
use crate::outcome::{Escalation, Reason};
use crate::workspace::{self, Diff, Interdiff, Snapshot};

/// Each attempt's tree (the changed files' contents), for the next
/// attempt's interdiff.
const SNAPSHOT: &str = "tree.json";

/// The most test files of BASE_REF a late attempt's special-casing check
/// reads for the values the failing tests expect.
const EXPECTED_FILES: usize = 500;

/// The most of the goal output and of the diff an escalation carries.
const ESCALATION_GOAL: usize = 8 * 1024;
const ESCALATION_DIFF: usize = 16 * 1024;

/// Each goal step with a test-count preset, and what its baseline output
/// reads as.
fn baseline_reads<'a>(
    steps: &'a [GoalStep],
    baseline: &'a GoalReport,
) -> impl Iterator<Item = (&'a str, Result<Counts, Unreadable>)> + 'a {
    steps
        .iter()
        .zip(&baseline.steps)
        .filter_map(|(step, result)| {
            Some((
                step.name.as_str(),
                testcount::read(step.report?, &result.output),
            ))
        })
}

/// The test counts of each goal step at baseline (steps with a report).
pub fn baseline_counts(job: &Job, baseline: &GoalReport) -> BTreeMap<String, Counts> {
    counts_of(&job.goal, baseline)
}

/// The test counts of `steps` (those with a report) in `report`.
pub(super) fn counts_of(steps: &[GoalStep], baseline: &GoalReport) -> BTreeMap<String, Counts> {
    baseline_reads(steps, baseline)
        .filter_map(|(step, read)| {
            let counts = read.ok()?;
            tracing::debug!(step = %step, ran = counts.ran, passed = counts.passed, skipped = counts.skipped, "baseline test count");
            Some((step.to_owned(), counts))
        })
        .collect()
}

/// The goal steps whose test-count gate is off for the job because their
/// baseline output cannot be read, each with why: said in the journal, the
/// live view, the summary, both reports and the critic's prompt, never
/// silently.
pub fn test_count_off(job: &Job, baseline: &GoalReport) -> BTreeMap<String, String> {
    baseline_reads(&job.goal, baseline)
        .filter_map(|(step, read)| {
            let why = read.err()?.explain();
            tracing::warn!(step = %step, why = %why, "the test-count gate is off for this step");
            Some((step.to_owned(), why))
        })
        .collect()
}

impl Run<'_> {
    pub(super) async fn judge(
        &mut self,
        n: u32,
        baseline: &GoalReport,
        counts: &BTreeMap<String, Counts>,
        dir: &Path,
        attempt_started: Instant,
    ) -> Result<Judged, JobError> {
        let stop = |e: Ending| Ok(Judged::Stop(e));
        // `.git/` first: what the agent wrote there is found, journaled, and
        // put back before loopd's own git computes the diff.
        self.git_dir_gate(n, false, dir)?;
        // What the agent made unreadable is made readable again before the
        // diff, and is a finding of the diff gate.
        let unlocked = crate::workspace::layers::unlock_unreadable(self.ws.root());
        let diff = self.take_diff(&dir.join("diff.patch"))?;
        let snapshot = self.ws.snapshot(&diff);
        self.write(
            &dir.join(SNAPSHOT),
            &serde_json::to_string(&snapshot).expect("a snapshot serializes"),
        )?;
        if self.current().diff.is_none() {
            // The tree the judges judge: what a commit of this attempt holds.
            let tree = self.ws.judged_tree(self.base_oid, &diff)?;
            self.journal.append(Event::DiffTaken {
                attempt: n,
                sha256: diff.sha256.clone(),
                tree: tree.map(|t| t.to_string()),
            })?;
        }
        // What the lead's exceptions let through, recorded before the gate
        // that lets it through (once: a resumed job holds it).
        if self.current().diff_gate.is_none() {
            let lifted = self
                .env
                .policy
                .compile()
                .map_err(JobError::Policy)?
                .lifted_changes(&diff);
            if !lifted.is_empty() {
                tracing::info!(attempt = n, files = ?lifted, "changed, allowed by [protect] allow: recorded, not rejected");
                self.journal.append(Event::ProtectionLifted {
                    attempt: n,
                    files: lifted,
                })?;
            }
        }
        // The deterministic gate on the diff; what `.git/` showed rejects
        // with it.
        self.check_gate(n, Gate::Diff, |run| {
            let mut findings = run.change_findings(&diff)?;
            findings.extend(size::findings(&diff, run.job.guard.max_diff_bytes()));
            findings.extend(unlocked.iter().map(|(path, fixed)| Finding {
                reason: Reason::UnreadablePath,
                path: path.clone(),
                line: None,
                rule: None,
                check: None,
                problem: format!(
                    "`{path}` was made unreadable to loopd by a process of this job{}",
                    if *fixed {
                        "; loopd made it readable again"
                    } else {
                        ", and loopd cannot read it"
                    }
                ),
                fix: format!(
                    "leave `{path}` readable: the judges must see everything the change holds"
                ),
            }));
            Ok(findings)
        })?;
        let current = self.current();
        let mut gate = current.git_dir_gate.clone().unwrap_or_default();
        gate.extend(current.diff_gate.clone().unwrap_or_default());
        // The agent's approved exit, once every gate on the change it left
        // has run: tampering is not hidden by escalating after it.
        let patch = diff.patch.as_deref().unwrap_or(
            "(the diff is larger than loopd keeps in memory: see diff.patch in the run directory)",
        );
        if let Some(e) = self.escalation(n, &gate, patch)? {
            return stop(e);
        }
        if let Some(e) = current.agent.as_ref().and_then(|a| a.failure.clone()) {
            return stop(e);
        }
        if let Some(reason) = self.budget.exceeded(&self.journal.state().spend()) {
            return stop(self.guard_ending(reason));
        }
        if let Some((sha, Some(reason))) = &current.diff {
            tracing::warn!(attempt = n, %reason, diff_sha256 = %sha, "no progress");
            return stop(self.guard_ending(*reason));
        }

        // What changed since the previous attempt, for the critic and the
        // report.
        let interdiff = self.interdiff(n, &snapshot, dir)?;
        if !gate.is_empty() {
            return Ok(self.reject_by_gates(n, gate, current.denied));
        }

        let (deadline, deadline_reason) = self.deadline(attempt_started);
        let hermetic = self.hermetic.is_some();
        let goal = match current.goal {
            Some(g) => g,
            None if hermetic => {
                let Some((goal, alone, written, origins)) = self.hermetic_goal(n, deadline).await?
                else {
                    return stop(self.signalled().expect("a signal cut the goal test short"));
                };
                self.write(&dir.join("goal.txt"), &goal.render())?;
                self.write(
                    &dir.join("goal.json"),
                    &serde_json::to_string_pretty(&goal).expect("a goal report serializes"),
                )?;
                self.journal.append(Event::GoalRun {
                    attempt: n,
                    report: goal.clone(),
                    artefacts: Default::default(),
                    alone,
                    written,
                    origins,
                })?;
                goal
            }
            None => {
                self.set_aside_strays(n, &diff, dir)?;
                let before = self.ws.untracked_blobs()?;
                let goal = goal::run(
                    &self.job.goal,
                    self.ws.root(),
                    Mode::FirstFailure,
                    &self.goal_limits(deadline),
                )
                .await?;
                self.write(&dir.join("goal.txt"), &goal.render())?;
                self.write(
                    &dir.join("goal.json"),
                    &serde_json::to_string_pretty(&goal).expect("a goal report serializes"),
                )?;
                // A goal test cut short by a signal has no result.
                if let Some(e) = self.signalled() {
                    return stop(e);
                }
                // The goal ran the agent's code: `.git/` again, and back.
                self.git_dir_gate(n, true, dir)?;
                let after = self.ws.untracked_blobs()?;
                let artefacts = self
                    .journal
                    .state()
                    .artefacts
                    .created_by_goal(&before, &after);
                if !artefacts.is_empty() {
                    tracing::info!(
                        attempt = n,
                        files = artefacts.len(),
                        "untracked files from the goal test: not part of the change"
                    );
                }
                self.journal.append(Event::GoalRun {
                    attempt: n,
                    report: goal.clone(),
                    artefacts,
                    alone: None,
                    written: Vec::new(),
                    origins: Default::default(),
                })?;
                goal
            }
        };
        // The goal ran the agent's code, which the hook never sees (a new
        // `conftest.py` runs before pytest collects the tests). A hermetic
        // judge ran it in a tree of its own: the worktree and `.git/` are
        // as the judges took them. Otherwise, `.git/` and the diff gate
        // again, on the tree the goal left, and the drift gate: the change
        // must be what it was before the goal test.
        let current = self.current();
        let after_goal = current.git_dir_after_goal.clone().unwrap_or_default();
        if !after_goal.is_empty() {
            return Ok(self.reject_by_gates(n, after_goal, current.denied));
        }
        let after_goal = if hermetic {
            self.written_by_goal(n)?
        } else {
            self.diff_after_goal(n, &diff, dir)?
        };
        if let Some(rejected) = after_goal {
            return Ok(rejected);
        }
        if let Some(e) = self.halted(deadline, deadline_reason) {
            return stop(e);
        }

        if goal.passed() {
            let test_count = self.gate(n, Gate::TestCount, |run| {
                Ok(run.test_count_findings(&run.job.goal, "goal step", &goal, counts, baseline))
            })?;
            if let Some(rejected) = test_count {
                return Ok(rejected);
            }
            // The pre-critic: what the rubric forbids and the added lines
            // show, decided without a model call.
            let precheck = self.gate(n, Gate::Precheck, |run| {
                let files = run
                    .ws
                    .changed_texts(run.base_oid, &diff, |p| Lang::of(p).is_some());
                let plan = &run.job.rubric.precheck_plan;
                let mut found = plan.run(&run.job.task, &diff.added, &files);
                // Runner markers on every attempt; names, expected values
                // and conventions from a late attempt on.
                let late = run.strict(n);
                let (failing, expected) = if late {
                    run.failing_and_expected(baseline)
                } else {
                    (Vec::new(), Vec::new())
                };
                let (cases, values) = run.test_cases_at_base();
                let mut fitted = precheck::fitting::findings(
                    &diff.added,
                    &files,
                    &cases,
                    &values,
                    &run.job.task,
                    late,
                );
                fitted.extend(precheck::fitting::test_patching(&diff.added, &files));
                fitted.extend(run.shadowing_modules(&diff));
                for mut f in
                    precheck::test_special_casing(&diff.added, &files, late, &failing, &expected)
                        .into_iter()
                        .chain(fitted)
                {
                    f.rule = run.job.rubric.tests_rule();
                    f.check = Some(Check::TestSpecialCasing);
                    found.push(f);
                }
                Ok(found)
            })?;
            if let Some(rejected) = precheck {
                return Ok(rejected);
            }
            // The tests the agent never saw, on a judge-only tree of the
            // judged change: before the critic, which costs a model call.
            if !self.job.held_out.is_empty() {
                let tree = self
                    .current()
                    .tree
                    .as_deref()
                    .and_then(|t| git2::Oid::from_str(t).ok());
                if let (None, Some(tree)) = (self.current().held_out, tree) {
                    let (report, files, overwrote) = self
                        .run_held_out(tree, &dir.join("held-out"), deadline)
                        .await?;
                    if let Some(e) = self.signalled() {
                        return stop(e);
                    }
                    // Outcomes and ids, decided now; the output is kept
                    // only where `full` feedback tells it anyway.
                    let outcomes = self.held_out_outcomes(&report);
                    self.journal.append(Event::HeldOutRun {
                        attempt: n,
                        report: self.held_out_kept(report, &outcomes),
                        files,
                        overwrote,
                        outcomes,
                    })?;
                }
                let held_out = self.gate(n, Gate::HeldOut, |run| Ok(run.held_out_findings()))?;
                if let Some(rejected) = held_out {
                    return Ok(rejected);
                }
                if let Some(e) = self.halted(deadline, deadline_reason) {
                    return stop(e);
                }
            }
        }

        let verdict = if goal.passed() {
            match self.current().critic {
                Some(done) => {
                    tracing::info!(attempt = n, "the critic already answered; not asking again");
                    if let Some(e) = done.failure.filter(|e| done.stopped == Some(e.reason)) {
                        return stop(e);
                    }
                    done.verdict.unwrap_or(CriticVerdict::Invalid {
                        why: "the critic session recorded no verdict".into(),
                    })
                }
                None => match self
                    .critic(
                        n,
                        baseline,
                        &goal,
                        counts,
                        (&diff, interdiff.as_ref()),
                        dir,
                        attempt_started,
                    )
                    .await?
                {
                    Ok(v) => v,
                    Err(e) => return stop(e),
                },
            }
        } else {
            CriticVerdict::Skipped
        };
        if let CriticVerdict::Invalid { why } = &verdict {
            tracing::warn!(attempt = n, why = %why, "the critic's verdict is invalid");
        }
        if let Some(reason) = self.budget.exceeded(&self.journal.state().spend()) {
            return stop(self.guard_ending(reason));
        }
        match decide(&goal, &verdict) {
            Ok(()) => match self.verify_integrity() {
                Some(e) => stop(e),
                None => Ok(Judged::Accepted),
            },
            Err(feedback) => {
                let denied = self.current().denied;
                let (gate, findings) = if denied.is_empty() {
                    (None, vec![])
                } else {
                    (
                        Some(Reason::ProtectedPath),
                        denied.iter().map(Finding::render).collect(),
                    )
                };
                Ok(Judged::Rejected {
                    feedback,
                    gate,
                    findings,
                })
            }
        }
    }

    /// The tamper gate's findings on a change: protected paths and skip
    /// markers, the runner's part of shared files, `append_only`.
    fn change_findings(&self, diff: &Diff) -> Result<Vec<Finding>, JobError> {
        let mut findings = self
            .env
            .policy
            .compile()
            .map_err(JobError::Policy)?
            .diff_findings(diff, self.job.rubric.tests_rule());
        findings.extend(self.runner_findings(diff));
        findings.extend(self.append_only_findings(diff));
        Ok(findings)
    }

    /// What a hermetic goal run changed of its own tree, as the gate after
    /// the goal: a protected path it wrote or deleted (a test of BASE_REF
    /// rewritten before the runner collected it, runner configuration) is
    /// `protected_path`; any other file of the change or of BASE_REF is
    /// `goal_changed_tree`. What it only created is its own.
    fn written_by_goal(&mut self, n: u32) -> Result<Option<Judged>, JobError> {
        self.gate(n, Gate::DiffAfterGoal, |run| {
            let written = run
                .journal
                .state()
                .current
                .as_ref()
                .map(|c| c.goal_written.clone())
                .unwrap_or_default();
            let policy = run.env.policy.compile().map_err(JobError::Policy)?;
            let rule = run.job.rubric.tests_rule();
            let mut findings = run.runner_changed();
            findings.extend(written
                .iter()
                .map(|w| {
                    let path = w.path().to_owned();
                    let what = match w {
                        crate::workspace::layers::Written::Changed(_) => "modified",
                        crate::workspace::layers::Written::Deleted(_) => "deleted",
                    };
                    let protected = policy.protected(&path).or_else(|| {
                        run.hermetic.as_ref()?.submodule_of(&path).map(|sub| {
                            format!("`{sub}` is a submodule, judged as it was checked out")
                        })
                    });
                    match protected {
                        Some(why) => Finding {
                            reason: Reason::ProtectedPath,
                            problem: format!("`{path}` was {what} while the goal test ran this attempt's code ({why})"),
                            fix: format!("leave `{path}` alone from code the tests run; fix the code, not the tests or how they run"),
                            path,
                            line: None,
                            rule,
                            check: None,
                        },
                        None => Finding {
                            reason: Reason::GoalChangedTree,
                            problem: format!("`{path}` changed while the goal test ran (its code {what} it): what would be committed is not what the judges saw run"),
                            fix: "leave the tree as it is from code the tests run: write outputs to ignored or temporary files, never to the change or the tests".into(),
                            path,
                            line: None,
                            rule: None,
                            check: None,
                        },
                    }
                }));
            Ok(findings)
        })
    }

    /// Each goal step whose runner resolved elsewhere in this attempt's
    /// runs than at BASE_REF ([`crate::runner::moved`]): `runner_changed`.
    fn runner_changed(&self) -> Vec<Finding> {
        let state = self.journal.state();
        let base = &state.baseline_origins;
        let Some(now) = state.current.as_ref().map(|c| &c.goal_origins) else {
            return Vec::new();
        };
        let root = format!("{}/", self.ws.root().display());
        let mut out = Vec::new();
        for (step, origins) in now {
            let name = step.strip_suffix(super::world::ALONE).unwrap_or(step);
            let Some(was) = base.get(name).filter(|b| !b.is_empty()) else {
                continue;
            };
            let moved = crate::runner::moved(was, origins, &root);
            if moved.is_empty() {
                continue;
            }
            tracing::warn!(step = %name, moved = moved.len(), "the goal step's runner resolved elsewhere than at BASE_REF");
            out.push(Finding {
                reason: Reason::RunnerChanged,
                path: moved
                    .iter()
                    .filter_map(|m| m.rsplit(" → ").next())
                    .find_map(|o| o.strip_prefix(&root))
                    .unwrap_or(name)
                    .to_owned(),
                line: None,
                rule: self.job.rubric.tests_rule(),
                check: None,
                problem: format!(
                    "the test runner of goal step `{name}` resolved elsewhere than at BASE_REF: {}; what ran as the tests is not the runner that ran at BASE_REF",
                    moved.join("; ")
                ),
                fix: "do not add modules or programs named like the test runner or what it loads, and do not change which interpreter runs it; fix the code under test".into(),
            });
        }
        out
    }

    /// The diff gate again after a goal test in the worktree, and the drift
    /// gate: the change must be what it was before the goal test.
    fn diff_after_goal(
        &mut self,
        n: u32,
        diff: &Diff,
        dir: &Path,
    ) -> Result<Option<Judged>, JobError> {
        self.gate(n, Gate::DiffAfterGoal, |run| {
            let after = run.take_diff(&dir.join("diff-after-goal.patch"))?;
            let mut findings = run.change_findings(&after)?;
            for f in &mut findings {
                f.problem = format!("{}, while the goal test ran this attempt's code", f.problem);
            }
            // Whatever else it changed would be committed unjudged.
            let named: Vec<String> = findings.iter().map(|f| f.path.clone()).collect();
            findings.extend(
                crate::guard::drift::findings(diff, &after)
                    .into_iter()
                    .filter(|f| !named.contains(&f.path)),
            );
            Ok(findings)
        })
    }

    /// Ask the critic, in a fresh session without tools.
    #[allow(clippy::too_many_arguments)]
    async fn critic(
        &mut self,
        n: u32,
        baseline: &GoalReport,
        goal: &GoalReport,
        counts: &BTreeMap<String, Counts>,
        (diff, interdiff): (&workspace::Diff, Option<&Interdiff>),
        dir: &Path,
        attempt_started: Instant,
    ) -> Result<Result<CriticVerdict, Ending>, JobError> {
        if let Some(e) = self.verify_integrity() {
            return Ok(Err(e));
        }
        let lifted = self.current().lifted;
        let mut gates = gates_statement(self.job, goal, counts, !lifted.is_empty());
        if self.strict(n) {
            gates.push_str(&format!("\n\n{}", late_attempt(n)));
        }
        let state = self.journal.state();
        let unnamed = state
            .current
            .as_ref()
            .and_then(|c| c.interdiff.as_ref())
            .map(|(_, unnamed)| unnamed.clone())
            .unwrap_or_default();
        let rejection = state.last_rejection();
        let lines = rejection.map(|r| r.lines()).unwrap_or_default();
        let previous = match (rejection, interdiff) {
            (Some(r), Some(i)) => Some(Previous {
                attempt: r.attempt,
                findings: &lines,
                goal_failed: r.goal_failed.as_deref(),
                interdiff: Shown {
                    patch: &i.patch,
                    files: &i.sections,
                },
                unnamed: &unnamed,
            }),
            _ => None,
        };
        let input = CriticInput {
            task: &self.job.task,
            baseline: &baseline.render(),
            goal_names: self.job.goal.iter().map(|s| s.name.as_str()).collect(),
            rubric: &self.job.rubric,
            base_ref: &self.base,
            change: Shown {
                patch: diff.patch.as_deref().unwrap_or(""),
                files: &diff.files,
            },
            bound: self.job.guard.max_diff_bytes(),
            gates: &gates,
            allowed: &lifted,
            previous,
            answer_with: self.critic.answer_with(),
        }
        .render();
        self.write(&dir.join("critic-input.txt"), &input)?;
        if let Some(e) = self.may_start(Role::Critic, input.len()) {
            return Ok(Err(e));
        }
        let schema = critic::verdict_schema().to_string();
        let ask = super::attempt::Ask {
            prompt: &critic::instruction(self.critic.answer_with()),
            material: Some(&input),
            schema: Some(&schema),
        };
        let done = self
            .session(
                Role::Critic,
                n,
                ask,
                dir,
                attempt_started,
                Some(critic::read_verdict),
            )
            .await?;
        let verdict = done.verdict.clone().unwrap_or(CriticVerdict::Invalid {
            why: "the critic session recorded no verdict".into(),
        });
        self.write(
            &dir.join("critic-verdict.json"),
            &serde_json::to_string_pretty(&verdict).expect("a verdict serializes"),
        )?;
        if let Some(reason) = done.stopped {
            return Ok(Err(self.guard_ending(reason)));
        }
        Ok(Ok(verdict))
    }

    /// The diff since BASE_REF, streamed to `path` as it is produced (then
    /// synced), in memory bounded by the job's size bound.
    fn take_diff(&self, path: &Path) -> Result<workspace::Diff, JobError> {
        let write_err = |source| JobError::Write {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::create(path).map_err(write_err)?;
        let mut out = std::io::BufWriter::new(file);
        let diff = self.ws.diff_since(
            self.base_oid,
            &self.journal.state().artefacts,
            workspace::DiffLimits::for_bound(self.job.guard.max_diff_bytes()),
            &mut out,
        )?;
        let file = out.into_inner().map_err(|e| write_err(e.into_error()))?;
        file.sync_all().map_err(write_err)?;
        if !diff.added_complete {
            tracing::warn!(
                patch_bytes = diff.patch_bytes,
                "the diff is larger than what is kept in memory; the size gate rejects it"
            );
        }
        Ok(diff)
    }

    /// The interdiff between the previous attempt's tree and this one, and
    /// the scope check: which files changed that no finding of the previous
    /// rejection named. Written to `interdiff.patch` and journaled once;
    /// `None` in attempt 1 (or when the previous tree was not kept).
    fn interdiff(
        &mut self,
        n: u32,
        snapshot: &Snapshot,
        dir: &Path,
    ) -> Result<Option<Interdiff>, JobError> {
        let Some(rejection) = self.journal.state().last_rejection().cloned() else {
            return Ok(None);
        };
        let from = rejection.attempt;
        let earlier_file = self.dir.join(format!("attempt-{from}")).join(SNAPSHOT);
        let earlier: Snapshot = match crate::util::read_text(&earlier_file)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
        {
            Some(s) => s,
            None => {
                tracing::warn!(attempt = n, file = %earlier_file.display(), "the previous attempt's tree was not kept; no interdiff");
                return Ok(None);
            }
        };
        let inter = workspace::interdiff(&earlier, snapshot, |p| {
            self.ws.base_content(self.base_oid, p)
        });
        self.write(&dir.join("interdiff.patch"), &inter.patch)?;
        if self.current().interdiff.is_none() {
            // The scope check needs findings that name files; a red goal
            // test names none.
            let named = rejection.named();
            let unnamed: Vec<String> = if rejection.goal_failed.is_some() || named.is_empty() {
                Vec::new()
            } else {
                inter
                    .files
                    .iter()
                    .filter(|f| !named.iter().any(|n| n == *f))
                    .cloned()
                    .collect()
            };
            if !unnamed.is_empty() {
                tracing::warn!(attempt = n, files = ?unnamed, "scope check: files changed that no finding named");
            }
            self.journal.append(Event::InterdiffTaken {
                attempt: n,
                from,
                files: inter.files.clone(),
                unnamed,
            })?;
        }
        Ok(Some(inter))
    }

    /// Whether attempt `n` is a late one: stricter judges.
    fn strict(&self, n: u32) -> bool {
        let from = self.job.guard.strict_from;
        from > 0 && n >= from
    }

    /// The agent's escalation in attempt `n`, as the job's ending: what the
    /// gateway received (journaled), once every gate on the change has run.
    /// A tamper finding among `gate` ends the job with its own reason, not
    /// resumable; otherwise the escalation is journaled with the latest goal
    /// output and the diff the agent left.
    fn escalation(
        &mut self,
        n: u32,
        gate: &[Finding],
        patch: &str,
    ) -> Result<Option<Ending>, JobError> {
        if !self.job.guard.escalation {
            return Ok(None);
        }
        let journaled = self
            .journal
            .state()
            .escalation
            .clone()
            .filter(|e| e.attempt == n);
        let esc = match journaled {
            Some(e) => e,
            None => {
                let Some((test, claim)) = self.current().escalation_request else {
                    return Ok(None);
                };
                if let Some(f) = gate
                    .iter()
                    .find(|f| matches!(f.reason, Reason::ProtectedPath | Reason::SkipMarker))
                {
                    tracing::error!(attempt = n, reason = %f.reason, path = %f.path, "the agent escalated after tampering; the tampering decides the ending");
                    return Ok(Some(Ending {
                        reason: f.reason,
                        detail: format!(
                            "the agent escalated at attempt {n} (`{}`), but its change tampers with what judges it: {}",
                            test.trim(),
                            f.render()
                        ),
                    }));
                }
                let goal_output = self
                    .journal
                    .state()
                    .last_goal
                    .as_ref()
                    .map(|g| goal::head_and_tail(g.render().trim_end(), ESCALATION_GOAL))
                    .unwrap_or_default();
                let e = Escalation {
                    attempt: n,
                    test: test.trim().to_owned(),
                    claim: claim.trim().to_owned(),
                    goal_output,
                    diff: goal::head_and_tail(patch, ESCALATION_DIFF),
                };
                self.journal.append(Event::Escalated {
                    escalation: e.clone(),
                })?;
                e
            }
        };
        tracing::warn!(attempt = n, test = %esc.test, claim = %esc.claim, "the agent escalated the task to a human");
        Ok(Some(Ending {
            reason: Reason::Escalated,
            detail: format!(
                "the agent escalated at attempt {n}: `{}` — {}",
                esc.test, esc.claim
            ),
        }))
    }

    /// Run a deterministic gate once — the journal keeps its findings, so a
    /// resumed job never runs it again — and reject the attempt when it
    /// found anything.
    fn gate(
        &mut self,
        n: u32,
        gate: Gate,
        check: impl FnOnce(&Self) -> Result<Vec<Finding>, JobError>,
    ) -> Result<Option<Judged>, JobError> {
        self.check_gate(n, gate, check)?;
        let current = self.current();
        let findings = current.gate(gate).cloned().unwrap_or_default();
        Ok((!findings.is_empty()).then(|| self.reject_by_gates(n, findings, current.denied)))
    }

    /// Run and journal a gate's check unless the journal holds its result.
    fn check_gate(
        &mut self,
        n: u32,
        gate: Gate,
        check: impl FnOnce(&Self) -> Result<Vec<Finding>, JobError>,
    ) -> Result<(), JobError> {
        if self.current().gate(gate).is_none() {
            let findings = check(self)?;
            self.journal.append(Event::GateChecked {
                attempt: n,
                gate,
                findings,
            })?;
        }
        Ok(())
    }

    /// Gate findings as the attempt's rejection (denials appended).
    fn reject_by_gates(&self, n: u32, mut findings: Vec<Finding>, denied: Vec<Finding>) -> Judged {
        // A protected path outranks a skip marker, which outranks a count.
        findings.sort_by_key(|f| match f.reason {
            Reason::ProtectedPath => 0,
            Reason::SkipMarker => 1,
            _ => 2,
        });
        for f in &findings {
            tracing::warn!(attempt = n, reason = %f.reason, path = %f.path, line = f.line.unwrap_or(0), problem = %f.problem, "gate finding");
        }
        let gate = findings.first().map(|f| f.reason);
        findings.extend(denied);
        Judged::Rejected {
            findings: findings.iter().map(Finding::render).collect(),
            feedback: Feedback::Gates(findings),
            gate,
        }
    }

    /// Compare `.git/` with its pin (once per stage of an attempt, except
    /// when a crash re-runs the goal: then again), journal what changed as
    /// findings, *then* put the pinned files back (always: a resume may land
    /// between the two).
    fn git_dir_gate(&mut self, n: u32, after_goal: bool, dir: &Path) -> Result<(), JobError> {
        let (gate, done, stage) = if after_goal {
            (
                Gate::GitDirAfterGoal,
                false,
                "while the goal test ran the agent's code",
            )
        } else {
            (
                Gate::GitDir,
                self.current().git_dir_gate.is_some(),
                "during the agent session",
            )
        };
        if !done {
            let changes = self.pin.changes().map_err(|source| JobError::GitDir {
                path: self.pin.git_dir().to_path_buf(),
                source,
            })?;
            let findings = tamper::git_dir_findings(&changes, stage);
            for f in &findings {
                tracing::warn!(attempt = n, path = %f.path, problem = %f.problem, "the git directory changed");
            }
            self.journal.append(Event::GateChecked {
                attempt: n,
                gate,
                findings,
            })?;
        }
        self.restore_git_dir(&dir.join("git-dir-changed"))
    }

    /// A Python file the change adds among the tests under the name of a
    /// module of BASE_REF (`tests/rechnung.py` beside `rechnung.py`): on
    /// the tests' `sys.path` it stands in for the code under test.
    fn shadowing_modules(&self, diff: &Diff) -> Vec<Finding> {
        let mut out = Vec::new();
        for c in diff
            .changes
            .iter()
            .filter(|c| c.status == workspace::ChangeKind::Added)
        {
            let Some((dir, name)) = c.path.rsplit_once('/') else {
                continue;
            };
            // A module (`tests/rechnung.py`), a package
            // (`tests/rechnung/__init__.py`) or an extension module
            // (`tests/rechnung.so`): each is imported before the real one.
            let (dir, stem) = match name {
                "__init__.py" => match dir.rsplit_once('/') {
                    Some((parent, package)) => (parent, package),
                    None => continue,
                },
                _ => match name.strip_suffix(".py").or_else(|| {
                    name.split_once('.')
                        .filter(|(_, e)| e.ends_with("so") || *e == "pyd")
                        .map(|(s, _)| s)
                }) {
                    Some(stem) => (dir, stem),
                    None => continue,
                },
            };
            if !dir.split('/').any(|d| d == "tests" || d == "test") {
                continue;
            }
            let shadowed = [
                format!("{stem}.py"),
                format!("src/{stem}.py"),
                format!("{stem}/__init__.py"),
                format!("src/{stem}/__init__.py"),
            ]
            .into_iter()
            .find(|p| {
                !matches!(
                    self.ws.base_content(self.base_oid, p),
                    workspace::Content::Deleted
                )
            });
            if let Some(module) = shadowed {
                out.push(Finding {
                    reason: Reason::Precheck,
                    path: c.path.clone(),
                    line: None,
                    rule: None,
                    check: None,
                    problem: format!("the change adds `{}` among the tests under the name of `{module}`: the tests would import it instead of the code under test", c.path),
                    fix: format!("remove `{}`; fix `{module}` itself", c.path),
                });
            }
        }
        out
    }

    /// Every assertion's inputs and expected values in the test files of
    /// BASE_REF (at most [`EXPECTED_FILES`] of them), and every value they
    /// spell out: what a change fitted to the tests repeats.
    fn test_cases_at_base(
        &self,
    ) -> (
        Vec<precheck::fitting::Case>,
        std::collections::HashSet<String>,
    ) {
        let mut cases = Vec::new();
        let mut values = std::collections::HashSet::new();
        for (path, _) in self
            .env
            .policy
            .files
            .iter()
            .filter(|(path, why)| {
                why.as_str() == crate::guard::tamper::TEST_AT_BASE && Lang::of(path).is_some()
            })
            .take(EXPECTED_FILES)
        {
            if let workspace::Content::Text { text } = self.ws.base_content(self.base_oid, path) {
                cases.extend(precheck::fitting::cases_in_tests(path, &text));
                values.extend(precheck::fitting::values_in_tests(path, &text));
            }
        }
        (cases, values)
    }

    /// The tests that failed at baseline, and the values they expect: from
    /// the runner's output and from the failing tests' own bodies in the
    /// test files of BASE_REF (at most [`EXPECTED_FILES`] of them).
    fn failing_and_expected(&self, baseline: &GoalReport) -> (Vec<String>, Vec<String>) {
        let failing: Vec<String> = baseline
            .steps
            .iter()
            .flat_map(|s| precheck::failing_tests(&s.output))
            .collect();
        let mut expected: Vec<String> = baseline
            .steps
            .iter()
            .flat_map(|s| precheck::failing_expected(&s.output))
            .collect();
        if !failing.is_empty() {
            let tests = self
                .env
                .policy
                .files
                .iter()
                .filter(|(path, why)| {
                    why.as_str() == crate::guard::tamper::TEST_AT_BASE && Lang::of(path).is_some()
                })
                .take(EXPECTED_FILES);
            for (path, _) in tests {
                if let workspace::Content::Text { text } = self.ws.base_content(self.base_oid, path)
                {
                    expected.extend(precheck::expected_in_tests(path, &text, &failing));
                }
            }
        }
        expected.sort();
        expected.dedup();
        (failing, expected)
    }

    /// `[protect] tests = "append_only"`: each existing test file the change
    /// modified, judged statement by statement (none without it: the diff
    /// gate refuses the whole file).
    fn append_only_findings(&self, diff: &Diff) -> Vec<Finding> {
        if !self.env.policy.append_only {
            return Vec::new();
        }
        // A test `[protect] allow` names may change whole: the lead said
        // so. (A policy that does not compile lifts nothing.)
        let policy = self.env.policy.compile().ok();
        let tests = &self.env.policy.files;
        let modified: Vec<&str> = diff
            .changes
            .iter()
            .filter(|c| c.status == workspace::ChangeKind::Modified && !c.submodule)
            .filter(|c| {
                tests.get(&c.path).map(String::as_str) == Some(crate::guard::tamper::TEST_AT_BASE)
                    && !policy.as_ref().is_some_and(|p| p.lifted(&c.path))
            })
            .map(|c| c.path.as_str())
            .collect();
        if modified.is_empty() {
            return Vec::new();
        }
        let files = self
            .ws
            .changed_texts(self.base_oid, diff, |p| modified.contains(&p));
        let rule = self.job.rubric.tests_rule();
        let added_module = |module: &str| module_in_change(diff, module, true);
        let mut out = Vec::new();
        for f in &files {
            match (&f.old, &f.new) {
                (Some(old), Some(new)) => out.extend(crate::guard::append_only::findings(
                    &f.path,
                    old,
                    new,
                    rule,
                    &added_module,
                )),
                _ => out.push(Finding {
                    reason: Reason::ProtectedPath,
                    path: f.path.clone(),
                    line: None,
                    rule,
                    check: None,
                    problem: format!("`{}` is an existing test file that is no longer text loopd can read (or is too large to load)", f.path),
                    fix: format!("restore `{}` as it is at BASE_REF and add new tests under new names", f.path),
                }),
            }
        }
        // A file the size bound kept out of `changed_texts` is not judged
        // as appended: it is refused.
        for p in &modified {
            if !files.iter().any(|f| f.path == *p) {
                out.push(Finding {
                    reason: Reason::ProtectedPath,
                    path: (*p).to_owned(),
                    line: None,
                    rule,
                    check: None,
                    problem: format!("`{p}` is an existing test file too large for loopd to compare statement by statement"),
                    fix: format!("restore `{p}` as it is at BASE_REF"),
                });
            }
        }
        out
    }

    /// The runner's configuration inside shared files (`package.json`'s
    /// scripts, `[tool.pytest]`, a conftest's hooks, ...), compared parsed.
    fn runner_findings(&self, diff: &Diff) -> Vec<Finding> {
        // A file `[protect] allow` names is the lead's exception here too
        // (a `conftest.py` the task says to change). A policy that does not
        // compile lifts nothing.
        let policy = self.env.policy.compile().ok();
        let files = self.ws.changed_texts(self.base_oid, diff, |p| {
            crate::guard::runner::wanted(p) && !policy.as_ref().is_some_and(|c| c.lifted(p))
        });
        // The words of the Python tests at BASE_REF, read once, and only
        // when a new conftest defines something to look up.
        let base_words: std::cell::OnceCell<BTreeSet<String>> = std::cell::OnceCell::new();
        let used_at_base = |name: &str| {
            base_words
                .get_or_init(|| {
                    let mut words = BTreeSet::new();
                    for (path, why) in &self.env.policy.files {
                        if why.as_str() != crate::guard::tamper::TEST_AT_BASE
                            || !path.ends_with(".py")
                        {
                            continue;
                        }
                        if let workspace::Content::Text { text } =
                            self.ws.base_content(self.base_oid, path)
                        {
                            words.extend(crate::guard::syntax::words(&text));
                        }
                    }
                    words
                })
                .contains(name)
        };
        let in_change = |module: &str| module_in_change(diff, module, false);
        crate::guard::runner::findings(
            &files,
            self.job.rubric.tests_rule(),
            &used_at_base,
            &in_change,
        )
    }

    /// The held-out gate: each red held-out step, told as `[guard]
    /// held_out_feedback` allows, and each held-out step whose test count
    /// dropped below its count at BASE_REF.
    fn held_out_findings(&self) -> Vec<Finding> {
        let rule = self.job.rubric.tests_rule();
        let Some(report) = self.current().held_out else {
            return vec![Finding {
                reason: Reason::HeldOutFailed,
                path: "held-out steps".into(),
                line: None,
                rule,
                check: None,
                problem:
                    "the held-out steps could not run: the change is too large to write as a tree"
                        .into(),
                fix: "make a smaller change".into(),
            }];
        };
        let overwrote = self.current().held_out_overwrote;
        if overwrote > 0 {
            // No name, no count: they may be held-out files', and which or
            // how many is the candidate's to choose. Under `none`, not even
            // how: the one bit every red held-out run is.
            if self.job.guard.held_out_feedback == held_out::Feedback::None {
                return vec![held_out::one_bit(rule)];
            }
            return vec![Finding {
                reason: Reason::HeldOutFailed,
                path: "held-out steps".into(),
                line: None,
                rule,
                check: None,
                problem: "the change's code, run by the held-out steps, wrote over or deleted files of the tree it ran in".into(),
                fix: "leave the tree alone from code the tests run: write outputs to temporary files".into(),
            }];
        }
        let outcomes = match self.current().held_out_outcomes {
            o if !o.is_empty() => o,
            // A journal of a loopd that kept the output: read it now.
            _ => self.held_out_outcomes(&report),
        };
        held_out::findings(
            &outcomes,
            self.job.guard.held_out_feedback,
            &|name| {
                report
                    .steps
                    .iter()
                    .find(|s| s.name == name)
                    .map(|s| goal::head_and_tail(&s.output, held_out::FULL_OUTPUT))
            },
            rule,
        )
    }

    /// The test-count gate for the steps of a green goal test (`label`:
    /// what a step is called in the finding).
    fn test_count_findings(
        &self,
        steps: &[GoalStep],
        label: &str,
        goal: &GoalReport,
        counts: &BTreeMap<String, Counts>,
        baseline: &GoalReport,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        for (step, result) in steps.iter().zip(&goal.steps) {
            // Where the runner wrote the report loopd asked for at
            // BASE_REF, the gate reads ids from it, not stdout.
            let base_ids = baseline
                .steps
                .iter()
                .find(|s| s.name == step.name)
                .and_then(|s| s.results.as_ref());
            if let Some(base_ids) = base_ids {
                out.extend(self.id_findings(label, step, base_ids, result));
                continue;
            }
            let (Some(preset), Some(base)) = (step.report, counts.get(&step.name)) else {
                continue;
            };
            let path = format!("{label} `{}`", step.name);
            match testcount::read(preset, &result.output) {
                Err(unreadable) => out.push(Finding {
                    reason: Reason::TestCountUnreadable,
                    path,
                    line: None,
                    rule: self.job.rubric.tests_rule(),
                    check: None,
                    problem: format!(
                        "the test count cannot be read, though {} tests ran at baseline: {unreadable}",
                        base.ran
                    ),
                    fix: "leave how the goal step's tests run and report as it was at baseline; fix the code, not the runner's output".into(),
                }),
                Ok(now) => {
                    if let Some(problem) = testcount::compare(base, &now) {
                        out.push(Finding {
                            reason: Reason::TestCountDropped,
                            path,
                            line: None,
                            rule: self.job.rubric.tests_rule(),
                            check: None,
                            problem: format!("the test count dropped: {problem}"),
                            fix: "run every test that ran at baseline, none skipped or deselected; fix the code, not the test selection".into(),
                        });
                    }
                }
            }
        }
        out
    }

    /// The test-count gate by ids ([`goal::results`]): each test that ran
    /// at BASE_REF still runs, each that passed still passes.
    fn id_findings(
        &self,
        label: &str,
        step: &GoalStep,
        base: &goal::results::Results,
        result: &goal::StepResult,
    ) -> Option<Finding> {
        let path = format!("{label} `{}`", step.name);
        let rule = self.job.rubric.tests_rule();
        let Some(now) = &result.results else {
            return Some(Finding {
                reason: Reason::TestCountUnreadable,
                path,
                line: None,
                rule,
                check: None,
                problem: format!(
                    "the runner wrote no report loopd could read where it wrote one at BASE_REF ({} tests by id): what ran cannot be told",
                    base.len()
                ),
                fix: "leave how the goal step's tests run and report as it was at baseline; fix the code, not the runner".into(),
            });
        };
        let mut problems = goal::results::compare(base, now, 10);
        // A step that exited 0 while its own report shows a failing test:
        // the exit, not the tests, was made green.
        let failing: Vec<&str> = now
            .iter()
            .filter(|(_, v)| v.failing())
            .map(|(id, _)| id.as_str())
            .collect();
        if result.passed && !failing.is_empty() {
            problems.push(format!(
                "the step exited 0, but {} test(s) fail in its report: {}",
                failing.len(),
                failing
                    .iter()
                    .take(10)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        (!problems.is_empty()).then(|| Finding {
            reason: Reason::TestCountDropped,
            path,
            line: None,
            rule,
            check: None,
            problem: format!("the tests of BASE_REF, by id, in the runner's own report: {}", problems.join("; ")),
            fix: "run every test that ran at baseline, none skipped or deselected, and keep each that passed green; fix the code, not the test selection".into(),
        })
    }

    /// Judge integrity: the config, the rubric and the policy are unchanged.
    pub(super) fn verify_integrity(&self) -> Option<Ending> {
        for (path, recorded) in &self.env.integrity {
            let now = tamper::file_sha256(path).unwrap_or_else(|e| format!("unreadable: {e}"));
            if &now != recorded {
                tracing::error!(path = %path.display(), "a judge's input changed during the job");
                return Some(Ending {
                    reason: Reason::ConfigTampered,
                    detail: format!("`{}` changed during the job (sha256 {} at start); the judges' inputs must not change", path.display(), recorded),
                });
            }
        }
        None
    }
}

/// Whether a module a statement imports — Python's `a.b.c`, or a
/// JavaScript specifier `./x/y.mjs` — is one the change touches (`added`:
/// one it adds): a changed path holds its top-level package as a
/// component, or its file is named like its last part. Errs towards yes.
fn module_in_change(diff: &Diff, module: &str, added: bool) -> bool {
    let parts: Vec<&str> = module
        .split(['.', '/'])
        .filter(|p| !p.is_empty() && !matches!(*p, "mjs" | "js" | "cjs" | "ts" | "py"))
        .collect();
    let (Some(top), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    diff.changes
        .iter()
        .filter(|c| !added || c.status == workspace::ChangeKind::Added)
        .any(|c| {
            let mut components = c.path.split('/');
            let file = c.path.rsplit('/').next().unwrap_or(&c.path);
            let stem = file.split('.').next().unwrap_or(file);
            stem == *last || components.any(|d| d == *top)
        })
}

/// What the critic is told from a late attempt on.
fn late_attempt(n: u32) -> String {
    format!(
        "This is attempt {n}: special-casing of tests typically emerges after failed attempts. Examine the test helpers, fixtures, conftest files, mocks and every conditional this change adds with extra care, and report as a violation any code that behaves differently under test, detects the test runner, or compares against test names or the literal values the tests expect."
    )
}

/// What the critic is told the code already established.
fn gates_statement(
    job: &Job,
    goal: &GoalReport,
    counts: &BTreeMap<String, Counts>,
    lifted: bool,
) -> String {
    let mut s = String::from(
        "The deterministic gates passed: no protected path (tests that existed at BASE_REF, test-runner configuration, loopd.toml, the rubric) was changed",
    );
    if lifted {
        s.push_str(" but the files the lead allowed (listed below)");
    }
    s.push_str(" and no skip marker was added");
    let lines: Vec<String> = job
        .goal
        .iter()
        .zip(&goal.steps)
        .filter_map(|(step, r)| {
            let base = counts.get(&step.name)?;
            let now = testcount::parse(step.report?, &r.output)?;
            Some(format!(
                "`{}`: {} tests ran and {} passed (baseline: {} ran)",
                step.name, now.ran, now.passed, base.ran
            ))
        })
        .collect();
    if !lines.is_empty() {
        s.push_str(&format!(
            "; the test count did not drop ({})",
            lines.join("; ")
        ));
    }
    let off: Vec<String> = job
        .goal
        .iter()
        .filter(|step| step.report.is_some() && !counts.contains_key(&step.name))
        .map(|step| format!("`{}`", step.name))
        .collect();
    if !off.is_empty() {
        s.push_str(&format!(
            "; but the test count could NOT be read at the baseline of {}, so for it no gate checked that every test still runs: check yourself that the change deselects, filters or skips no test",
            off.join(", ")
        ));
    }
    s.push_str(&format!(
        "; the change is within the {} bound, and you are shown all of it",
        size::human(job.guard.max_diff_bytes())
    ));
    s.push_str(". These are enforced in code; you need not re-check them, and no verdict can override them.");
    let on: Vec<String> = job
        .rubric
        .precheck_plan
        .checks
        .iter()
        .filter_map(|p| match p.state {
            precheck::State::On { rule } => Some(format!(
                "{} (rule {rule})",
                p.check.name().replace('_', " ")
            )),
            precheck::State::Off { .. } => None,
        })
        .collect();
    if !on.is_empty() {
        s.push_str(&format!(
            "\nA conservative pre-check found no {} in the added lines; it stays silent where it is unsure, so judge those rules in full.",
            on.join(", ")
        ));
    }
    s
}
