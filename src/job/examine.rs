//! The examiner's phase, once per job between the baseline and attempt 1
//! ([`crate::examiner`]): its session, its tests written where no process
//! of the job reads them, and their check at BASE_REF. A resumed job reads
//! the journal's [`Examination`]; one whose session ended before that was
//! journaled finds the tests under their key and does not pay again.

use std::path::Path;
use std::time::Instant;

use super::attempt::Ask;
use super::world::Files;
use super::{JobError, Run};
use crate::agent::Role;
use crate::examiner::{self, TestFile};
use crate::goal::results::Verdict;
use crate::goal::GoalStep;
use crate::journal::Ending;
use crate::journal::{Event, Examination};
use crate::judges::testcount::Preset;

/// The mark, beside the tests, that all of them were written.
const COMPLETE: &str = "complete";

impl Run<'_> {
    /// Write and check the examiner's tests (`Some`: the job ends here — a
    /// cap, a signal).
    pub(super) async fn examine(&mut self) -> Result<Option<Ending>, JobError> {
        let Some(settings) = self.job.examiner.clone() else {
            return Ok(None);
        };
        if self.journal.state().examined.is_some() {
            return Ok(None);
        }
        let home = examiner::home(
            &self.job.state_dir,
            &self.base,
            &self.job.task,
            &settings.model,
        );
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JobError::RunDir { path, source }
        };
        crate::util::private_dir(&home).map_err(io(&home))?;
        let files = home.join("files");
        let tests = files.join(examiner::DIR);
        let examination = |tests: Vec<String>, why: Option<String>| Examination {
            model: settings.model.clone(),
            home: home.clone(),
            tests,
            dropped: Vec::new(),
            failing_at_base: Vec::new(),
            passing_at_base: Vec::new(),
            why,
        };
        let written = if home.join(COMPLETE).is_file() {
            tracing::info!(home = %home.display(), "the examiner's tests are kept from an earlier run: not written again");
            test_files(&tests)
        } else {
            match self.ask_examiner(&home).await? {
                Ok(Ok(answer)) => {
                    write_tests(&tests, &answer).map_err(io(&tests))?;
                    std::fs::write(home.join(COMPLETE), b"").map_err(io(&home))?;
                    crate::util::crash_point("examiner:written");
                    answer.into_iter().map(|t| t.file).collect()
                }
                Ok(Err(why)) => {
                    tracing::warn!(why = %why, "the examiner wrote no test: the job goes on without");
                    self.journal
                        .append(Event::Examined(examination(Vec::new(), Some(why))))?;
                    return Ok(None);
                }
                Err(e) => return Ok(Some(e)),
            }
        };
        // At BASE_REF: what runs, what is red (what the task asks for) and
        // what is green (what must not break); what errors is dropped.
        let step = GoalStep {
            name: "examiner".into(),
            run: settings.run.clone(),
            timeout: settings.timeout,
            report: Some(Preset::Pytest),
        };
        let (report, _, _) = self
            .judge_only(
                self.base_oid,
                &self.dir.join("examiner-baseline"),
                &[step],
                Files::Dir(&files),
                &[],
                self.job_deadline(),
            )
            .await?;
        if let Some(e) = self.signalled() {
            return Ok(Some(e));
        }
        // By test, never by case: a case's parameters are its expected
        // values, which neither the journal nor a prompt may carry.
        let results = report
            .steps
            .first()
            .and_then(|s| s.results.as_ref())
            .map(examiner::by_test)
            .unwrap_or_default();
        let mut e = examination(written, None);
        for (id, verdict) in results {
            match verdict {
                Verdict::Passed => e.passing_at_base.push(id),
                Verdict::Failed => e.failing_at_base.push(id),
                Verdict::Error | Verdict::Skipped => e.dropped.push(id),
            }
        }
        if e.kept().next().is_none() {
            e.why = Some("none of the examiner's tests ran at BASE_REF".into());
            tracing::warn!(
                "none of the examiner's tests ran at BASE_REF: the job goes on without them"
            );
        }
        tracing::info!(
            tests = e.tests.len(),
            failing_at_base = e.failing_at_base.len(),
            passing_at_base = e.passing_at_base.len(),
            dropped = e.dropped.len(),
            "the examiner's tests are checked at BASE_REF"
        );
        self.journal.append(Event::Examined(e))?;
        Ok(None)
    }

    /// The examiner's session: its answer, or why there is none (`Err`:
    /// the job ends — a cap, a signal).
    async fn ask_examiner(
        &mut self,
        home: &Path,
    ) -> Result<Result<Result<Vec<TestFile>, String>, Ending>, JobError> {
        let files = self.ws.texts_at(self.base_oid, 24 << 10);
        let material = examiner::material(&self.job.task, &self.job.rubric.text, &files);
        if let Some(e) = self.may_start(Role::Examiner, material.len()) {
            return Ok(Err(e));
        }
        let schema = examiner::answer_schema().to_string();
        let prompt = examiner::instruction(self.critic.answer_with());
        let ask = Ask {
            prompt: &prompt,
            material: Some(&material),
            schema: Some(&schema),
        };
        // Its logs beside its tests: never in the run directory.
        let (done, result) = self
            .session_result(Role::Examiner, 0, ask, home, Instant::now(), None)
            .await?;
        // What the CLI kept of the session in the home it shares with the
        // critic goes: the critic starts from an empty one anyway.
        let cli_home = self.cli(Role::Examiner).home;
        if let Ok(entries) = std::fs::read_dir(&cli_home) {
            for entry in entries.flatten() {
                let p = entry.path();
                let gone = if p.is_dir() && !p.is_symlink() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                if let Err(e) = gone {
                    tracing::warn!(path = %p.display(), error = %e, "cannot empty the examiner's CLI home");
                }
            }
        }
        if let Some(e) = self.signalled() {
            return Ok(Err(e));
        }
        if let Some(reason) = done.stopped {
            return Ok(Err(self.guard_ending(reason)));
        }
        Ok(Ok(examiner::read_answer(result.as_ref())))
    }
}

/// Write the tests under `dir` (made private first).
fn write_tests(dir: &Path, tests: &[TestFile]) -> std::io::Result<()> {
    crate::util::private_dir(dir)?;
    for t in tests {
        crate::util::write_atomic(&dir.join(&t.file), t.content.as_bytes())?;
    }
    Ok(())
}

/// The test files kept under `dir`, by name.
fn test_files(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}
