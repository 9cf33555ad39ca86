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

/// The mark, beside the tests, that all of them were written.
const COMPLETE: &str = "complete";
/// The mark that the revision turn was taken (its tests, if any, written).
const REVISED: &str = "revised";

impl Run<'_> {
    /// Write and check the examiner's tests, with one revision turn when
    /// the check asks for it (`Some`: the job ends here — a cap, a signal).
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
        crate::util::private_dir(&home).map_err(io(&home))?;
        let files = home.join("files");
        let tests = files.join(examiner::DIR);
        let examination = |tests: Vec<String>, why: Option<String>| Examination {
            model: settings.model.clone(),
            mode: settings.mode,
            home: home.clone(),
            tests,
            dropped: Vec::new(),
            failing_at_base: Vec::new(),
            passing_at_base: Vec::new(),
            revised: false,
            why,
        };
        let written = if home.join(COMPLETE).is_file() {
            tracing::info!(home = %home.display(), "the examiner's tests are kept from an earlier run: not written again");
            test_files(&tests)
        } else {
            let material = self.examiner_material();
            let prompt = examiner::instruction(
                self.cli(Role::Examiner).agent.answer_with(),
                settings.framework,
            );
            match self
                .ask_examiner(&prompt, &material, &home, settings.framework)
                .await?
            {
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
        let Some(mut e) = self
            .check_at_base(&settings, &files, examination(written, None))
            .await?
        else {
            return Ok(self.signalled());
        };
        // One revision turn, told only ids and outcomes at BASE_REF: when a
        // test did not run, or none is red (none tests what the task asks).
        if (!e.dropped.is_empty() || e.failing_at_base.is_empty()) && !home.join(REVISED).is_file()
        {
            let material = format!(
                "{}{}",
                self.examiner_material(),
                examiner::revision_material(
                    settings.framework,
                    &read_tests(&tests, &e.tests),
                    &e.failing_at_base,
                    &e.passing_at_base,
                    &e.dropped
                )
            );
            let prompt = examiner::revision_instruction(
                self.cli(Role::Examiner).agent.answer_with(),
                settings.framework,
            );
            match self
                .ask_examiner(&prompt, &material, &home, settings.framework)
                .await?
            {
                Ok(Ok(answer)) => {
                    replace_tests(&tests, &answer).map_err(io(&tests))?;
                    std::fs::write(home.join(REVISED), b"").map_err(io(&home))?;
                    crate::util::crash_point("examiner:revised");
                    let revised = examination(answer.into_iter().map(|t| t.file).collect(), None);
                    let Some(again) = self.check_at_base(&settings, &files, revised).await? else {
                        return Ok(self.signalled());
                    };
                    e = again;
                }
                Ok(Err(why)) => {
                    // Nothing usable, or nothing to change: the tests stand.
                    tracing::info!(why = %why, "the examiner's revision changed nothing");
                    std::fs::write(home.join(REVISED), b"").map_err(io(&home))?;
                    crate::util::crash_point("examiner:revised");
                }
                Err(end) => return Ok(Some(end)),
            }
            e.revised = true;
        } else if home.join(REVISED).is_file() {
            e.revised = true;
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
            revised = e.revised,
            "the examiner's tests are checked at BASE_REF"
        );
        self.journal.append(Event::Examined(e))?;
        Ok(None)
    }

    /// The examiner's tests under `files` at BASE_REF: what runs, what is
    /// red (what the task asks for) and what is green (what must not
    /// break); what errors or skips is dropped. `None`: a signal cut it
    /// short.
    async fn check_at_base(
        &mut self,
        settings: &examiner::Settings,
        files: &Path,
        mut e: Examination,
    ) -> Result<Option<Examination>, JobError> {
        let step = GoalStep {
            name: "examiner".into(),
            run: settings.run.clone(),
            timeout: settings.timeout,
            report: Some(settings.framework.preset()),
        };
        let (report, _, _) = self
            .judge_only(
                self.base_oid,
                &self.dir.join("examiner-baseline"),
                &[step],
                Files::Dir(files),
                &[],
                self.job_deadline(),
            )
            .await?;
        if self.signalled().is_some() {
            return Ok(None);
        }
        // By test, never by case: a case's parameters are its expected
        // values, which neither the journal nor a prompt may carry.
        let results = report
            .steps
            .first()
            .and_then(|s| s.results.as_ref())
            .map(examiner::by_test)
            .unwrap_or_default();
        for (id, verdict) in results {
            match verdict {
                Verdict::Passed => e.passing_at_base.push(id),
                Verdict::Failed => e.failing_at_base.push(id),
                Verdict::Error | Verdict::Skipped => e.dropped.push(id),
            }
        }
        Ok(Some(e))
    }

    /// What the examiner reads: the task, the rubric, the repository at
    /// BASE_REF.
    fn examiner_material(&self) -> String {
        let files = self.ws.texts_at(self.base_oid, 24 << 10);
        examiner::material(&self.job.task, &self.job.rubric.text, &files)
    }

    /// An examiner session: its answer, or why there is none (`Err`: the
    /// job ends — a cap, a signal).
    async fn ask_examiner(
        &mut self,
        prompt: &str,
        material: &str,
        home: &Path,
        framework: examiner::Framework,
    ) -> Result<Result<Result<Vec<TestFile>, String>, Ending>, JobError> {
        if let Some(e) = self.may_start(Role::Examiner, material.len()) {
            return Ok(Err(e));
        }
        let schema = examiner::answer_schema().to_string();
        let ask = Ask {
            prompt,
            material: Some(material),
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
        Ok(Ok(examiner::read_answer(result.as_ref(), framework)))
    }
}

/// A write error under `path`, as the job's.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JobError {
    let path = path.to_path_buf();
    move |source| JobError::RunDir { path, source }
}

/// The tests `names` under `dir`, with their text.
fn read_tests(dir: &Path, names: &[String]) -> Vec<TestFile> {
    names
        .iter()
        .filter_map(|f| {
            let content = std::fs::read_to_string(dir.join(f)).ok()?;
            Some(TestFile {
                file: f.clone(),
                content,
            })
        })
        .collect()
}

/// The revised set in place of the first: each file written anew, the
/// first set's others removed.
fn replace_tests(dir: &Path, tests: &[TestFile]) -> std::io::Result<()> {
    for old in test_files(dir) {
        if !tests.iter().any(|t| t.file == old) {
            std::fs::remove_file(dir.join(&old))?;
        }
    }
    write_tests(dir, tests)
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

/// The file the examiner's run on attempt `n` kept its output in: beside
/// its tests, never in the run directory (it quotes them).
pub(super) fn output_file(home: &Path, n: u32) -> std::path::PathBuf {
    home.join("runs").join(format!("attempt-{n}.txt"))
}

impl Run<'_> {
    /// Evidence mode: what the critic of attempt `n` is shown of the
    /// examiner's tests red on it and red at BASE_REF (the section of its
    /// input), and how its rulings are read. `None`: none to show.
    pub(super) fn evidence(&self, n: u32) -> Option<(String, crate::critic::Evidence)> {
        use crate::examiner::evidence::{self, Red, Redactor};
        let settings = self.job.examiner.as_ref()?;
        if settings.mode != examiner::Mode::Evidence {
            return None;
        }
        let state = self.journal.state();
        let e = state.examined.as_ref()?;
        let failing = super::gate::examiner_red(self).ok()?;
        let shown: Vec<String> = failing
            .into_iter()
            .filter(|id| e.failing_at_base.contains(id))
            .collect();
        if shown.is_empty() {
            return None;
        }
        let tests = e.home.join("files").join(examiner::DIR);
        let files = read_tests(&tests, &test_files(&tests));
        let red: Vec<Red> = shown
            .iter()
            .map(|id| Red {
                id: id.clone(),
                source: evidence::test_source(&files, id),
            })
            .collect();
        let output = std::fs::read_to_string(output_file(&e.home, n)).ok();
        let section = evidence::section(&red, output.as_deref(), settings.framework.fence());
        // And what the run printed of them: pytest's lines that quote a
        // test (`>`) and spell out what it compared (`E`).
        let quoted: String = output
            .as_deref()
            .unwrap_or("")
            .lines()
            .filter(|l| l.starts_with('>') || l.starts_with("E "))
            .map(|l| format!("{}\n", &l[1..]))
            .collect();
        // Whole files (the critic may quote a line the function refers
        // to) and what the run printed of them.
        let mut cut: Vec<&str> = files.iter().map(|t| t.content.as_str()).collect();
        cut.push(&quoted);
        let at_base = self.ws.texts_at(self.base_oid, 64 << 10);
        let known: Vec<&str> = at_base.iter().map(|(_, t)| t.as_str()).collect();
        let redactor = Redactor::new(&cut, &self.job.task, &known);
        let mut sources = vec![
            ("the task".to_owned(), self.job.task.clone()),
            ("the rubric".to_owned(), self.job.rubric.text.clone()),
        ];
        sources.extend(
            at_base
                .into_iter()
                .filter(|(p, _)| evidence::is_documentation(p)),
        );
        Some((
            section,
            crate::critic::Evidence {
                shown,
                sources,
                redactor,
            },
        ))
    }
}
