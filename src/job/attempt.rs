//! One attempt: the agent session (run once per attempt, whatever the
//! restarts), then the judges ([`super::judge`]), then the attempt's end —
//! each recorded in the journal before the next step acts on it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::{JobError, Run};
use crate::agent::events::SessionResult;
use crate::agent::gateway::record::Record;
use crate::agent::gateway::{channel, Tag};
use crate::agent::session::{Role, SessionEnd, SessionSpec};
use crate::agent::{CliLimits, Session};
use crate::critic::CriticVerdict;
use crate::goal::GoalReport;
use crate::guard::caps::Spend;
use crate::guard::{escalation, Watch};
use crate::journal::{AttemptEnd, Current, Ending, Event, SessionFinished};
use crate::judges::testcount::Counts;
use crate::outcome::Reason;
use crate::record::{round_usd, AttemptRecord};
use crate::util;

/// How long a session's last response may take to drain through the
/// gateway after the CLI is gone.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// What a session is asked: the prompt (the agent's, or the critic's
/// instruction), the critic's material on stdin, the verdict's schema.
/// How a critic session's result is read: its verdict, and its rulings on
/// the examiner's red tests ([`crate::critic::read_judgement`]).
pub(super) type Judgement<'a> = dyn Fn(Option<&SessionResult>) -> (CriticVerdict, Vec<crate::examiner::evidence::Ruling>)
    + Sync
    + 'a;

pub struct Ask<'a> {
    pub prompt: &'a str,
    pub material: Option<&'a str>,
    pub schema: Option<&'a str>,
}

/// What an attempt means for the loop.
pub enum Step {
    Accepted,
    /// Rejected; the journal holds the next prompt.
    Rejected,
    /// The job ends (or, suspended, pauses) with this.
    Stop(Ending),
}

/// The judges' conclusion about an attempt, before it is recorded.
pub enum Judged {
    Accepted,
    Rejected {
        feedback: super::Feedback,
        /// The gate that rejected it, if one did.
        gate: Option<Reason>,
        /// Gate findings, rendered, for the summary.
        findings: Vec<String>,
    },
    Stop(Ending),
}

impl Run<'_> {
    /// Run (or resume) attempt `n`.
    pub(super) async fn attempt(
        &mut self,
        n: u32,
        prompt: &str,
        baseline: &GoalReport,
        counts: &BTreeMap<String, Counts>,
    ) -> Result<Step, JobError> {
        let dir = self.dir.join(format!("attempt-{n}"));
        util::private_dir(&dir).map_err(|source| JobError::RunDir {
            path: dir.clone(),
            source,
        })?;
        self.write(&dir.join("prompt.txt"), prompt)?;
        let attempt_started = Instant::now();
        let agent_done = self.current().agent.is_some();
        if agent_done {
            tracing::info!(
                attempt = n,
                "resuming after the attempt's finished agent session"
            );
        } else {
            tracing::info!(attempt = n, max = self.job.max_attempts, "attempt started");
            if let Some(e) = self.may_start(Role::Agent, prompt.len()) {
                return self.end_attempt(n, Judged::Stop(e));
            }
            let ask = Ask {
                prompt,
                material: None,
                schema: None,
            };
            let finished = self
                .session(Role::Agent, n, ask, &dir, attempt_started, None)
                .await?;
            // A session cut short by a signal did not finish its work.
            if let Some(e) = finished
                .failure
                .as_ref()
                .filter(|e| e.reason == Reason::Signal)
            {
                return self.end_attempt(n, Judged::Stop(e.clone()));
            }
        }
        let judged = self
            .judge(n, baseline, counts, &dir, attempt_started)
            .await?;
        self.end_attempt(n, judged)
    }

    /// The attempt in progress, as the journal has it.
    pub(super) fn current(&self) -> Current {
        self.journal
            .state()
            .current
            .clone()
            .expect("an attempt is in progress")
    }

    /// Record the attempt's end, unless the job is only being suspended (a
    /// shutdown): then the attempt stays open and a resume continues it.
    fn end_attempt(&mut self, n: u32, judged: Judged) -> Result<Step, JobError> {
        if let Judged::Stop(e) = &judged {
            if e.reason == Reason::Signal && self.stop_request().is_some_and(|r| r.suspend()) {
                return Ok(Step::Stop(e.clone()));
            }
        }
        let mut record = record_of(&self.current(), n, &self.dir);
        let (end, step) = match judged {
            Judged::Accepted => (AttemptEnd::Accepted, Step::Accepted),
            Judged::Rejected {
                feedback,
                gate,
                findings,
            } => {
                record.rejected_by = gate;
                record.gate_findings = findings;
                let next_prompt =
                    super::next_prompt(&self.job.task, &feedback, &self.job.rubric.render_rules());
                (AttemptEnd::Rejected { next_prompt }, Step::Rejected)
            }
            Judged::Stop(ending) => {
                record.stopped = Some(ending.reason);
                (
                    AttemptEnd::Stopped {
                        ending: ending.clone(),
                    },
                    Step::Stop(ending),
                )
            }
        };
        self.journal.append(Event::AttemptEnded { record, end })?;
        Ok(step)
    }

    /// Refuse a session the budget cannot cover (budget before cost): its
    /// first call — the CLI's own request, plus `input` bytes of ours —
    /// could not get through the gateway.
    pub(super) fn may_start(&self, role: Role, input: usize) -> Option<Ending> {
        let spent = self.journal.state().spend();
        let cli = self.cli(role);
        let bytes = cli.agent.first_request_bytes(role) + input as u64;
        let model = &cli.model;
        let price = cli
            .prices
            .of(model)
            .expect("a job's models are priced (checked when it is resolved)");
        self.budget.can_start(&spent, price, bytes).err().map(|reason| Ending {
            reason,
            detail: format!("not starting another session on `{model}`: the remaining budget cannot cover even one call ({})", self.spend_line()),
        })
    }

    pub(super) fn limits(&self) -> CliLimits {
        let spent = self.journal.state().spend();
        CliLimits {
            max_budget_usd: self.budget.remaining_usd(&spent),
            max_turns: self.budget.remaining_turns(&spent),
        }
    }

    /// Run one session under the guards and journal its end. `verdict`
    /// reads a critic's verdict from the session's result.
    pub(super) async fn session(
        &mut self,
        role: Role,
        attempt: u32,
        ask: Ask<'_>,
        dir: &Path,
        attempt_started: Instant,
        verdict: Option<&Judgement<'_>>,
    ) -> Result<SessionFinished, JobError> {
        self.session_result(role, attempt, ask, dir, attempt_started, verdict)
            .await
            .map(|(finished, _)| finished)
    }

    /// [`Run::session`], with the CLI's result (the examiner's answer is
    /// read from it, never journaled).
    pub(super) async fn session_result(
        &mut self,
        role: Role,
        attempt: u32,
        ask: Ask<'_>,
        dir: &Path,
        attempt_started: Instant,
        verdict: Option<&Judgement<'_>>,
    ) -> Result<(SessionFinished, Option<SessionResult>), JobError> {
        let deadline = self.deadline(attempt_started);
        let number = self.journal.state().sessions;
        let cli = self.cli(role);
        let mut tools = Vec::new();
        if role == Role::Agent {
            tools.clone_from(&self.job.allowed_tools);
            if self.job.guard.escalation {
                tools.push(escalation::allowed_tool(&self.loopd_exe));
            }
        }
        let limits = self.limits();
        let gateway = self
            .env
            .gateway
            .as_mut()
            .expect("the gateway serves while the job runs");
        // A refusal left from an earlier session is not this one's; the
        // earlier session's token stops working now.
        let _ = gateway.take_refusal();
        let token = gateway.open_session(
            Tag {
                role,
                attempt,
                session: number,
            },
            cli.vendor,
        );
        let base_url = gateway.base_url();
        let command = cli
            .agent
            .command(&Session {
                role,
                model: &cli.model,
                prompt: ask.prompt,
                material: ask.material,
                allowed_tools: &tools,
                schema: ask.schema,
                limits,
                hook_command: &self.env.hook_command,
                loopd: &self.loopd_exe,
                gateway_url: &base_url,
                token: &token,
                home: &cli.home,
            })
            .map_err(|source| JobError::Write {
                path: cli.home.clone(),
                source,
            })?;
        let mut env_set = command.env;
        // The hook and `loopd escalate` reach loopd through the gateway;
        // the CLI's provider reads the token from the same variable.
        env_set.push((channel::GATEWAY_VAR.into(), base_url.into()));
        env_set.push((channel::TOKEN_VAR.into(), token.into()));
        let spec = SessionSpec {
            role,
            bin: cli.bin.clone(),
            args: command.args,
            cwd: cli.cwd.clone(),
            env_set,
            env: cli.env.clone(),
            stdin: command.stdin,
            stream_log: dir.join(format!("{}-stream.jsonl", role.as_str())),
            stderr_log: dir.join(format!("{}-stderr.txt", role.as_str())),
            deadline: Some(deadline),
            idle_timeout: self.job.caps.idle_timeout,
            grace: self.job.guard.grace,
            scope: self.id.clone(),
            sandbox: cli.sandbox.clone(),
        };
        self.journal.append(Event::SessionStarted {
            attempt,
            role,
            session: number,
        })?;
        let mut stop = self.stop.clone();
        let before = self.journal.state().spend();
        let (end, live, tool_calls) = {
            let mut watch = Watch::new(
                (role, attempt, number),
                &self.budget,
                cli.prices.clone(),
                before,
                &self.job.guard,
                &mut self.journal,
            );
            let mut parser = cli.agent.parser();
            let end = cli
                .agent
                .run_session(
                    &spec,
                    parser.as_mut(),
                    &mut watch,
                    &mut stop,
                    Some(gateway.events()),
                )
                .await?;
            watch.flush_pending();
            (end, watch.live, watch.tool_calls)
        };
        // The session's processes are gone: its token goes too. Its last
        // response may still be draining through the gateway; what the
        // gateway saw is journaled before the session's end.
        gateway.close_session();
        gateway.settle(SETTLE).await;
        let mut late = Vec::new();
        while let Ok(event) = gateway.events().try_recv() {
            late.push(event);
        }
        let refusal = gateway.take_refusal();
        let refused = gateway.refused();
        for event in late {
            self.journal_gateway(role, event)?;
        }
        // The gateway's meter is the authority on cost and tokens; the turns
        // are at least what the CLI or the stream counted.
        let metered = self.journal.state().metered_of(number);
        let spend = Spend {
            turns: metered
                .turns
                .max(live.turns)
                .max(end.result.as_ref().map_or(0, |r| r.num_turns)),
            ..metered
        };
        let cli_cost_usd = end.result.as_ref().and_then(|r| r.total_cost_usd);
        if let Some(cli) = cli_cost_usd {
            if (cli - spend.cost_usd).abs() > 1e-6_f64.max(0.01 * spend.cost_usd) {
                tracing::warn!(
                    role = role.as_str(),
                    metered_usd = spend.cost_usd,
                    cli_usd = cli,
                    "the CLI's cost disagrees with the metered cost; billing the metered one"
                );
            }
        }
        let failure = match (&refusal, end.stopped) {
            // The gateway refused a call: the session failed for the cap,
            // whatever the CLI made of the refusal.
            (Some(r), None) if !end.result.as_ref().is_some_and(|r| r.completed) => Some(Ending {
                reason: r.reason,
                detail: format!("the gateway refused a model call: {}", r.message),
            }),
            _ => self.session_failure(number, &end, &spend),
        };
        if refused > 0 {
            tracing::warn!(target: crate::live::SAID, role = role.as_str(),
                refused,
                "the gateway refused requests of this session"
            );
        }
        let (verdict, rulings) = match verdict {
            Some(read) => {
                let (v, r) = read(end.result.as_ref());
                (Some(v), r)
            }
            None => (None, Vec::new()),
        };
        let finished = SessionFinished {
            attempt,
            role,
            session: number,
            spend,
            cost_usd_estimate: live.cost_usd,
            cli_cost_usd,
            tool_calls,
            wall_ms: end.wall.as_millis() as u64,
            terminal_reason: end.result.as_ref().and_then(|r| r.terminal_reason.clone()),
            is_error: end.result.as_ref().map(|r| r.is_error),
            stopped: end.stopped,
            exit_code: end.exit_code,
            leftover_processes: end.leftovers,
            failure,
            verdict,
            rulings,
        };
        self.journal
            .append(Event::SessionFinished(finished.clone()))?;
        tracing::info!(
            role = role.as_str(),
            attempt,
            cost_usd = round_usd(spend.cost_usd),
            turns = spend.turns,
            tool_calls,
            stopped = finished.stopped.map_or("no", |r| r.as_str()),
            "session ended"
        );
        Ok((finished, end.result))
    }

    /// Journal what the gateway reported after a session's stream ended
    /// (an escalation only from the agent's own session, as the watch
    /// takes it).
    fn journal_gateway(&mut self, role: Role, record: Record) -> Result<(), JobError> {
        if matches!(record, Record::Escalated { .. }) && role != Role::Agent {
            return Ok(());
        }
        self.journal.append(Event::from(record))?;
        Ok(())
    }

    /// Map a session's end to the reason the job stops with, if it failed.
    fn session_failure(&self, number: u32, end: &SessionEnd, spend: &Spend) -> Option<Ending> {
        if let Some(reason) = end.stopped {
            let mut e = self.guard_ending(reason);
            if matches!(
                reason,
                Reason::BudgetUsd | Reason::MaxTurns | Reason::MaxTokens
            ) {
                // The journal holds this session's calls so far as
                // unfinished: counted once, as the session's own reading.
                let spent = self.journal.state().spend_without(number).plus(spend);
                e.detail = format!(
                    "the {reason} cap was reached: spent ${:.4} of ${}, {} of {} turns, {} of {} tokens",
                    spent.cost_usd,
                    self.job.caps.limits.budget_usd,
                    spent.turns,
                    self.job.caps.limits.max_turns,
                    spent.tokens(),
                    self.job.caps.limits.max_tokens
                );
            }
            return Some(e);
        }
        let cli_limit = |r: &SessionResult| match r.terminal_reason.as_deref() {
            Some("max_turns") => Some(Reason::MaxTurns),
            Some("budget_exhausted") => Some(Reason::BudgetUsd),
            _ => None,
        };
        match &end.result {
            Some(r) if r.completed => None,
            Some(r) => match cli_limit(r) {
                Some(reason) => Some(Ending {
                    reason,
                    detail: format!(
                        "the CLI's own limit stopped the session ({}); {}",
                        r.error_text(),
                        self.spend_line()
                    ),
                }),
                None => Some(Ending {
                    reason: Reason::AgentError,
                    detail: format!("the agent CLI failed: {}", end.failure()),
                }),
            },
            None => Some(Ending {
                reason: Reason::AgentError,
                detail: format!("the agent CLI failed: {}", end.failure()),
            }),
        }
    }
}

/// The summary's record of an attempt, derived from what the journal holds.
fn record_of(c: &Current, n: u32, run_dir: &Path) -> AttemptRecord {
    let sessions = c.agent.iter().chain(c.critic.iter());
    let spend = sessions.fold(Spend::default(), |acc, s| acc.plus(&s.spend));
    let verdict = c
        .critic
        .as_ref()
        .and_then(|s| s.verdict.clone())
        .unwrap_or(CriticVerdict::Skipped);
    AttemptRecord {
        n,
        goal_passed: c.goal.as_ref().is_some_and(|g| g.passed()),
        held_out_passed: c.held_out.as_ref().map(|r| r.passed()),
        // Green, or (evidence mode) red only where the critic ruled the
        // tests wrong.
        examiner_passed: c.examiner.as_ref().map(|(results, _)| {
            let green = results.as_ref().is_some_and(|r| {
                r.values()
                    .all(|v| *v == crate::goal::results::Verdict::Passed)
            });
            let clean = |g: crate::journal::Gate| c.gate(&g).is_some_and(|f| f.is_empty());
            green
                || (clean(crate::journal::Gate::EXAMINER)
                    && clean(crate::journal::Gate::EXAMINER_EVIDENCE))
        }),
        suite: c.suite.as_ref().map(|(r, _)| crate::record::SuiteRun {
            regressed: c
                .gate(&crate::journal::Gate::SUITE)
                .is_some_and(|f| !f.is_empty()),
            ms: r.steps.iter().map(|s| s.duration_ms).sum(),
        }),
        failed_step: c
            .goal
            .as_ref()
            .and_then(|g| g.failed_step().map(|s| s.name.clone())),
        critic: verdict.label().into(),
        critic_note: match &verdict {
            CriticVerdict::Invalid { why } => Some(why.clone()),
            _ => None,
        },
        violations: verdict.violations().to_vec(),
        gate_findings: vec![],
        rejected_by: None,
        interdiff_files: c
            .interdiff
            .as_ref()
            .map(|i| i.0.clone())
            .unwrap_or_default(),
        scope_warnings: c
            .interdiff
            .as_ref()
            .map(|i| i.1.clone())
            .unwrap_or_default(),
        allowed_changes: c.lifted.clone(),
        denied_tool_calls: c.denied.len(),
        cost_usd: round_usd(spend.cost_usd),
        turns: spend.turns,
        input_tokens: spend.input_tokens,
        output_tokens: spend.output_tokens,
        diff_sha256: c.diff.as_ref().map(|d| d.0.clone()).unwrap_or_default(),
        stopped: None,
        prompt_file: run_dir.join(format!("attempt-{n}")).join("prompt.txt"),
    }
}
