//! Everything after the agent session, in stages: `.git/` against its pin
//! (then put back) → the diff, the progress guard and the gates that judge
//! the change the session left ([`gate::Stage::Session`]) → the agent's
//! escalation, no progress, the interdiff, the hook's denials → the goal
//! test (in the judge's own world, or in the worktree followed by `.git/`
//! again) → the gates on what the goal did → on a green goal, the gates
//! before any model call, the held-out run and its gate → the critic →
//! judge integrity → the decision. The gates themselves are the table of
//! [`gate::GATES`]. Each step's result is journaled; on a resume a step
//! whose result the journal holds is not run again.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::attempt::Judged;
use super::gate::{self, Facts, Stage};
use super::{decide, Feedback, JobError, Run};
use crate::agent::session::Role;
use crate::config::Job;
use crate::critic::{self, CriticInput, CriticVerdict, Previous, Shown};
use crate::goal::{self, GoalReport, GoalStep, Mode};
use crate::journal::{Ending, Event, Gate};
use crate::judges::finding::Finding;
use crate::judges::precheck;
use crate::judges::size;
use crate::judges::tamper;
use crate::judges::testcount::{Counts, Unreadable};
use crate::outcome::{Escalation, Reason};
use crate::workspace::{self, Diff, Interdiff, Snapshot};

/// Each attempt's tree (the changed files' contents), for the next
/// attempt's interdiff.
const SNAPSHOT: &str = "tree.json";

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
        .filter_map(|(step, result)| Some((step.name.as_str(), result.counts(step.report?))))
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
            tracing::warn!(target: crate::live::SAID, step = %step, why = %why, "the test-count gate is off for this step");
            Some((step.to_owned(), why))
        })
        .collect()
}

impl Run<'_> {
    /// Judge an attempt: the gates of [`gate::GATES`] stage by stage, the
    /// goal test and the held-out run between them, then the critic.
    pub(super) async fn judge(
        &mut self,
        n: u32,
        baseline: &GoalReport,
        counts: &BTreeMap<String, Counts>,
        dir: &Path,
        attempt_started: Instant,
    ) -> Result<Judged, JobError> {
        let stop = |e: Ending| Ok(Judged::Stop(e));
        let (diff, snapshot, unlocked) = self.take_change(n, dir)?;
        // The change's texts, read once for every gate.
        let texts = self.ws.changed_texts(self.base_oid, &diff, |_| true);
        let mut facts = Facts {
            n,
            diff: &diff,
            texts: &texts,
            unlocked: &unlocked,
            dir,
            baseline,
            counts,
            goal: None,
        };
        self.check_stage(Stage::Session, &facts)?;
        let interdiff = match self.after_session(n, &diff, &snapshot, dir)? {
            Ok(interdiff) => interdiff,
            Err(judged) => return Ok(judged),
        };
        let (deadline, deadline_reason) = self.deadline(attempt_started);
        let goal = match self.goal_run(n, &diff, dir, deadline).await? {
            Ok(goal) => goal,
            Err(judged) => return Ok(judged),
        };
        facts.goal = Some(&goal);
        if let Some(rejected) = self.pass_stage(Stage::Goal, &facts)? {
            return Ok(rejected);
        }
        if let Some(e) = self.halted(deadline, deadline_reason) {
            return stop(e);
        }
        if goal.passed() {
            if let Some(judged) = self.green(&facts, deadline, deadline_reason).await? {
                return Ok(judged);
            }
        }
        let shown = (&diff, interdiff.as_ref());
        let verdict = match self
            .verdict(n, baseline, &goal, counts, shown, dir, attempt_started)
            .await?
        {
            Ok(v) => v,
            Err(e) => return stop(e),
        };
        if let Some(reason) = self.budget.exceeded(&self.journal.state().spend()) {
            return stop(self.guard_ending(reason));
        }
        if goal.passed() {
            if let Some(rejected) = self.after_verdict(&facts, &verdict)? {
                return Ok(rejected);
            }
        }
        Ok(self.decision(&goal, &verdict))
    }

    /// The gates on what the critic answered ([`Stage::Verdict`]): their
    /// findings reject with the critic's own violations after them.
    fn after_verdict(
        &mut self,
        facts: &Facts<'_>,
        verdict: &CriticVerdict,
    ) -> Result<Option<Judged>, JobError> {
        let Some(Judged::Rejected {
            feedback: Feedback::Gates(found),
            gate,
            mut findings,
        }) = self.pass_stage(Stage::Verdict, facts)?
        else {
            return Ok(None);
        };
        let violations = verdict.violations().to_vec();
        findings.extend(violations.iter().map(critic::Violation::render));
        Ok(Some(Judged::Rejected {
            feedback: Feedback::GatesAndCritic(found, violations),
            gate,
            findings,
        }))
    }

    /// The change the agent session left: `.git/` first (what the agent
    /// wrote there is found, journaled, and put back before loopd's own git
    /// computes the diff), what the agent made unreadable made readable
    /// again (a finding of the diff gate), then the diff, its snapshot for
    /// the next attempt's interdiff, and the judged tree.
    #[allow(clippy::type_complexity)]
    fn take_change(
        &mut self,
        n: u32,
        dir: &Path,
    ) -> Result<(Diff, Snapshot, Vec<(String, bool)>), JobError> {
        self.git_dir_gate(n, false, dir)?;
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
        if self.current().gate(&Gate::DIFF).is_none() {
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
        Ok((diff, snapshot, unlocked))
    }

    /// What decides before the goal test, once the session's gates ran:
    /// the agent's approved exit (after every gate on the change it left:
    /// tampering is not hidden by escalating after it), the session's own
    /// failure, the budget, no progress; then the interdiff with the
    /// previous attempt (for the critic and the report), and the gates'
    /// findings with `.git/`'s as the rejection.
    fn after_session(
        &mut self,
        n: u32,
        diff: &Diff,
        snapshot: &Snapshot,
        dir: &Path,
    ) -> Result<Result<Option<Interdiff>, Judged>, JobError> {
        let current = self.current();
        let mut found = current.gate(&Gate::GIT_DIR).cloned().unwrap_or_default();
        for g in gate::of(Stage::Session, self) {
            found.extend(current.gate(&g.id()).cloned().unwrap_or_default());
        }
        let patch = diff.patch.as_deref().unwrap_or(
            "(the diff is larger than loopd keeps in memory: see diff.patch in the run directory)",
        );
        if let Some(e) = self.escalation(n, &found, patch)? {
            return Ok(Err(Judged::Stop(e)));
        }
        if let Some(e) = current.agent.as_ref().and_then(|a| a.failure.clone()) {
            return Ok(Err(Judged::Stop(e)));
        }
        if let Some(reason) = self.budget.exceeded(&self.journal.state().spend()) {
            return Ok(Err(Judged::Stop(self.guard_ending(reason))));
        }
        if let Some((sha, Some(reason))) = &current.diff {
            tracing::warn!(target: crate::live::SAID, attempt = n, %reason, diff_sha256 = %sha, "no progress");
            return Ok(Err(Judged::Stop(self.guard_ending(*reason))));
        }
        let interdiff = self.interdiff(n, snapshot, dir)?;
        if !found.is_empty() {
            return Ok(Err(self.reject_by_gates(n, found, current.denied)));
        }
        Ok(Ok(interdiff))
    }

    /// The goal test, once per attempt (a resumed job reads its report from
    /// the journal): in the judge's own world, or in the worktree, where
    /// `.git/` is checked again after it (the goal ran the agent's code).
    /// `Err`: a signal cut it short, or `.git/` changed while it ran.
    async fn goal_run(
        &mut self,
        n: u32,
        diff: &Diff,
        dir: &Path,
        deadline: Instant,
    ) -> Result<Result<GoalReport, Judged>, JobError> {
        let goal = match self.current().goal {
            Some(g) => g,
            None if self.hermetic.is_some() => {
                let Some((goal, alone, written, origins)) = self.hermetic_goal(n, deadline).await?
                else {
                    let e = self.signalled().expect("a signal cut the goal test short");
                    return Ok(Err(Judged::Stop(e)));
                };
                self.write_goal(dir, &goal)?;
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
                self.set_aside_strays(n, diff, dir)?;
                let before = self.ws.untracked_blobs()?;
                let goal = goal::run(
                    &self.job.goal,
                    self.ws.root(),
                    Mode::FirstFailure,
                    &self.goal_limits(deadline),
                )
                .await?;
                self.write_goal(dir, &goal)?;
                // A goal test cut short by a signal has no result.
                if let Some(e) = self.signalled() {
                    return Ok(Err(Judged::Stop(e)));
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
        // What `.git/` showed after the goal rejects before any gate judges
        // what the goal did.
        let current = self.current();
        match current.gate(&Gate::GIT_DIR_AFTER_GOAL) {
            Some(found) if !found.is_empty() => {
                Ok(Err(self.reject_by_gates(n, found.clone(), current.denied)))
            }
            _ => Ok(Ok(goal)),
        }
    }

    /// The goal report, for humans and for machines, in the run directory.
    fn write_goal(&self, dir: &Path, goal: &GoalReport) -> Result<(), JobError> {
        self.write(&dir.join("goal.txt"), &goal.render())?;
        self.write(
            &dir.join("goal.json"),
            &serde_json::to_string_pretty(goal).expect("a goal report serializes"),
        )
    }

    /// A green goal test's gates, then the held-out run and its gate:
    /// everything deterministic before the critic, which costs a model
    /// call. `Some`: the attempt ends here.
    async fn green(
        &mut self,
        facts: &Facts<'_>,
        deadline: Instant,
        deadline_reason: Reason,
    ) -> Result<Option<Judged>, JobError> {
        if let Some(rejected) = self.pass_stage(Stage::GreenGoal, facts)? {
            return Ok(Some(rejected));
        }
        if self.job.suite.is_some() {
            if let Some(e) = self.suite_once(facts.n, facts.dir, deadline).await? {
                return Ok(Some(Judged::Stop(e)));
            }
            if let Some(rejected) = self.pass_stage(Stage::Suite, facts)? {
                return Ok(Some(rejected));
            }
        }
        let examined = self.examined();
        if self.job.held_out.is_empty() && examined.is_none() {
            return Ok(None);
        }
        if !self.job.held_out.is_empty() {
            if let Some(e) = self.held_out_once(facts.n, facts.dir, deadline).await? {
                return Ok(Some(Judged::Stop(e)));
            }
            if let Some(rejected) = self.pass_stage(Stage::HeldOut, facts)? {
                return Ok(Some(rejected));
            }
        }
        if let Some(files) = examined {
            if let Some(e) = self
                .examiner_once(facts.n, facts.dir, &files, deadline)
                .await?
            {
                return Ok(Some(Judged::Stop(e)));
            }
            if let Some(rejected) = self.pass_stage(Stage::Examiner, facts)? {
                return Ok(Some(rejected));
            }
        }
        Ok(self.halted(deadline, deadline_reason).map(Judged::Stop))
    }

    /// This attempt's judged tree, as the journal names it (`None`: the
    /// change was too large to write as a tree).
    fn judged_tree(&self) -> Option<git2::Oid> {
        self.current()
            .tree
            .as_deref()
            .and_then(|t| git2::Oid::from_str(t).ok())
    }

    /// The held-out steps on a judge-only tree of the judged change, once
    /// per attempt: outcomes and ids decided now, the output kept only where
    /// `full` feedback tells it anyway. `Some`: a signal cut it short.
    async fn held_out_once(
        &mut self,
        n: u32,
        dir: &Path,
        deadline: Instant,
    ) -> Result<Option<Ending>, JobError> {
        let tree = self.judged_tree();
        if let (None, Some(tree)) = (self.current().held_out, tree) {
            let (report, files, overwrote) = self
                .run_held_out(tree, &dir.join("held-out"), deadline)
                .await?;
            if let Some(e) = self.signalled() {
                return Ok(Some(e));
            }
            let outcomes = self.held_out_outcomes(&report);
            self.journal.append(Event::HeldOutRun {
                attempt: n,
                report: self.held_out_kept(report, &outcomes),
                files,
                overwrote,
                outcomes,
            })?;
        }
        Ok(None)
    }

    /// The whole suite on a judge-only tree of the judged change, once per
    /// attempt (a resumed job reads the run it journaled). `Some`: a
    /// signal cut it short.
    async fn suite_once(
        &mut self,
        n: u32,
        dir: &Path,
        deadline: Instant,
    ) -> Result<Option<Ending>, JobError> {
        let tree = self.judged_tree();
        let step = self.job.suite.as_ref().map(|s| s.step.clone());
        if let (None, Some(tree), Some(step)) = (self.current().suite, tree, step) {
            // The tests that passed at BASE_REF, on the change without the
            // test code it adds or appends (code there could patch what
            // they test).
            let delta = crate::workspace::layers::delta(self.ws.git2(), self.base_oid, tree)?;
            let leave_out = self.left_out_tests(&delta);
            let (report, _, written) = self
                .judge_only(
                    tree,
                    &dir.join("suite"),
                    &[step],
                    super::world::Files::None,
                    &leave_out,
                    deadline,
                )
                .await?;
            if let Some(e) = self.signalled() {
                return Ok(Some(e));
            }
            self.journal.append(Event::SuiteRun {
                attempt: n,
                report,
                written,
            })?;
        }
        Ok(None)
    }

    /// The examiner's tests' directory, when they judge this job: written,
    /// checked at BASE_REF, and one of them kept.
    fn examined(&self) -> Option<std::path::PathBuf> {
        let e = self.journal.state().examined.as_ref()?;
        e.kept().next().map(|_| e.home.join("files"))
    }

    /// The examiner's tests on a judge-only tree of the judged change, once
    /// per attempt: ids and outcomes journaled, never their output.
    async fn examiner_once(
        &mut self,
        n: u32,
        dir: &Path,
        files: &Path,
        deadline: Instant,
    ) -> Result<Option<Ending>, JobError> {
        let tree = self.judged_tree();
        let settings = self.job.examiner.clone();
        if let (None, Some(tree), Some(settings)) = (self.current().examiner, tree, settings) {
            let step = goal::GoalStep {
                name: "examiner".into(),
                run: settings.run,
                timeout: settings.timeout,
                report: Some(settings.framework.preset()),
            };
            let (report, _, written) = self
                .judge_only(
                    tree,
                    &dir.join("examiner"),
                    &[step],
                    super::world::Files::Dir(files),
                    &[],
                    deadline,
                )
                .await?;
            if let Some(e) = self.signalled() {
                return Ok(Some(e));
            }
            // Evidence mode shows the critic the red tests' output: kept
            // beside them, never in the run directory.
            if settings.mode == crate::examiner::Mode::Evidence {
                if let (Some(step), Some(e)) =
                    (report.steps.first(), self.journal.state().examined.as_ref())
                {
                    let file = super::examine::output_file(&e.home, n);
                    let kept = file
                        .parent()
                        .map_or(Ok(()), crate::util::private_dir)
                        .and_then(|()| crate::util::write_atomic(&file, step.output.as_bytes()));
                    if let Err(err) = kept {
                        tracing::warn!(file = %file.display(), error = %err, "cannot keep the examiner's run output: the critic is not shown it");
                    }
                }
            }
            // Only the kept tests' outcomes, by test: what the change's
            // code ran in the runner could have named other "tests" after
            // the examiner's source, and a case's parameters are values.
            let kept: std::collections::BTreeSet<String> = self
                .journal
                .state()
                .examined
                .as_ref()
                .map(|e| e.kept().cloned().collect())
                .unwrap_or_default();
            let step = report.steps.first();
            let disowned = step.is_some_and(crate::examiner::report_disowned);
            if disowned {
                tracing::warn!(attempt = n, "the examiner's report says every test passed while its runner failed, was killed or timed out: not the runner's report");
            }
            let results = step
                .and_then(|s| s.results.as_ref())
                .filter(|_| !disowned)
                .map(|r| {
                    let mut by = crate::examiner::by_test(r);
                    by.retain(|id, _| kept.contains(id));
                    by
                });
            self.journal.append(Event::ExaminerRun {
                attempt: n,
                results,
                written,
                disowned,
            })?;
        }
        Ok(None)
    }

    /// The critic's verdict on a green attempt (asked once: a resumed job
    /// reads the one it gave); a red attempt is not shown to it.
    #[allow(clippy::too_many_arguments)]
    async fn verdict(
        &mut self,
        n: u32,
        baseline: &GoalReport,
        goal: &GoalReport,
        counts: &BTreeMap<String, Counts>,
        shown: (&Diff, Option<&Interdiff>),
        dir: &Path,
        attempt_started: Instant,
    ) -> Result<Result<CriticVerdict, Ending>, JobError> {
        if !goal.passed() {
            return Ok(Ok(CriticVerdict::Skipped));
        }
        let verdict = match self.current().critic {
            Some(done) => {
                tracing::info!(attempt = n, "the critic already answered; not asking again");
                if let Some(e) = done.failure.filter(|e| done.stopped == Some(e.reason)) {
                    return Ok(Err(e));
                }
                done.verdict.unwrap_or(CriticVerdict::Invalid {
                    why: "the critic session recorded no verdict".into(),
                })
            }
            None => match self
                .critic(n, baseline, goal, counts, shown, dir, attempt_started)
                .await?
            {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            },
        };
        if let CriticVerdict::Invalid { why } = &verdict {
            tracing::warn!(attempt = n, why = %why, "the critic's verdict is invalid");
        }
        Ok(Ok(verdict))
    }

    /// The goal's and the critic's verdicts as the attempt's end: accepted
    /// (once judge integrity holds), or rejected with the critic's findings
    /// and the hook's denials.
    fn decision(&self, goal: &GoalReport, verdict: &CriticVerdict) -> Judged {
        match decide(goal, verdict) {
            Ok(()) => match self.verify_integrity() {
                Some(e) => Judged::Stop(e),
                None => Judged::Accepted,
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
                Judged::Rejected {
                    feedback,
                    gate,
                    findings,
                }
            }
        }
    }

    /// Run each gate of a stage that the journal holds no result of, and
    /// journal what it found; reject nothing yet.
    fn check_stage(&mut self, stage: Stage, facts: &Facts<'_>) -> Result<(), JobError> {
        let gates: Vec<&'static dyn gate::Gate> = gate::of(stage, self).collect();
        for g in gates {
            self.check_gate(facts.n, g, facts)?;
        }
        Ok(())
    }

    /// Run a stage's gates in order — each once: the journal keeps its
    /// findings, so a resumed job never runs it again — and reject the
    /// attempt at the first that found anything.
    fn pass_stage(&mut self, stage: Stage, facts: &Facts<'_>) -> Result<Option<Judged>, JobError> {
        let gates: Vec<&'static dyn gate::Gate> = gate::of(stage, self).collect();
        for g in gates {
            self.check_gate(facts.n, g, facts)?;
            let current = self.current();
            let findings = current.gate(&g.id()).cloned().unwrap_or_default();
            if !findings.is_empty() {
                return Ok(Some(self.reject_by_gates(
                    facts.n,
                    findings,
                    current.denied,
                )));
            }
        }
        Ok(None)
    }

    /// Run and journal a gate's check unless the journal holds its result.
    fn check_gate(
        &mut self,
        n: u32,
        gate: &dyn gate::Gate,
        facts: &Facts<'_>,
    ) -> Result<(), JobError> {
        let id = gate.id();
        if self.current().gate(&id).is_none() {
            let findings = gate.check(self, facts)?;
            self.journal.append(Event::GateChecked {
                attempt: n,
                gate: id,
                findings,
            })?;
        }
        Ok(())
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
        let evidence = self.evidence(n);
        let kept_out = evidence.as_ref().map(|(_, e)| {
            format!(
                "\n# Tests written from the task alone, red on this change\n{} examiner test(s) were shown here with their source and output: {}. They are kept out of the run directory.\n",
                e.shown.len(),
                e.shown.join(", ")
            )
        });
        let mut input = CriticInput {
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
            examiner: kept_out.as_deref(),
        };
        // The run directory gets the input without the examiner's tests;
        // the critic gets them.
        self.write(&dir.join("critic-input.txt"), &input.render())?;
        input.examiner = evidence.as_ref().map(|(section, _)| section.as_str());
        let input = input.render();
        if let Some(e) = self.may_start(Role::Critic, input.len()) {
            return Ok(Err(e));
        }
        let schema = critic::verdict_schema_with(evidence.is_some()).to_string();
        let ask = super::attempt::Ask {
            prompt: &critic::instruction(self.critic.answer_with()),
            material: Some(&input),
            schema: Some(&schema),
        };
        // A critic shown the examiner's tests may quote them: its logs go
        // beside them, never to the run directory.
        let logs = match (&evidence, self.journal.state().examined.as_ref()) {
            (Some(_), Some(e)) => {
                let logs = e.home.join("runs").join(format!("critic-{n}"));
                crate::util::private_dir(&logs).map_err(|source| JobError::RunDir {
                    path: logs.clone(),
                    source,
                })?;
                logs
            }
            _ => dir.to_path_buf(),
        };
        let shown = evidence.map(|(_, e)| e);
        let read = |r: Option<&crate::agent::events::SessionResult>| {
            critic::read_judgement(r, shown.as_ref())
        };
        let done = self
            .session(Role::Critic, n, ask, &logs, attempt_started, Some(&read))
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
    pub(super) fn take_diff(&self, path: &Path) -> Result<workspace::Diff, JobError> {
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
                tracing::warn!(target: crate::live::SAID, attempt = n, files = ?unnamed, "scope check: files changed that no finding named");
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
    pub(super) fn strict(&self, n: u32) -> bool {
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
        tracing::warn!(target: crate::live::SAID, attempt = n, test = %esc.test, claim = %esc.claim, "the agent escalated the task to a human");
        Ok(Some(Ending {
            reason: Reason::Escalated,
            detail: format!(
                "the agent escalated at attempt {n}: `{}` — {}",
                esc.test, esc.claim
            ),
        }))
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
            tracing::warn!(target: crate::live::SAID, attempt = n, reason = %f.reason, path = %f.path, line = f.line.unwrap_or(0), problem = %f.problem, "gate finding");
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
                Gate::GIT_DIR_AFTER_GOAL,
                false,
                "while the goal test ran the agent's code",
            )
        } else {
            (
                Gate::GIT_DIR,
                self.current().gate(&Gate::GIT_DIR).is_some(),
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
                tracing::warn!(target: crate::live::SAID, attempt = n, path = %f.path, problem = %f.problem, "the git directory changed");
            }
            self.journal.append(Event::GateChecked {
                attempt: n,
                gate,
                findings,
            })?;
        }
        self.restore_git_dir(&dir.join("git-dir-changed"))
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
            let now = r.counts(step.report?).ok()?;
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
