//! loopd supervises a coding agent (Claude Code in print mode, `claude -p`,
//! or OpenAI's Codex CLI, `codex exec`) on a git repository until a deterministic goal test is green *and* a critic
//! in a fresh session accepts the diff — or until a guard stops it, in which
//! case the work is parked safely and a human gets a report.
//!
//! # The loops, inside out
//! 1. **Agent session** ([`agent::session`]): one run of the agent CLI, its
//!    event stream read as it arrives into typed [`agent::events`]; every event
//!    passes the guards ([`guard::Watch`]) and may stop the session mid-turn.
//! 2. **Attempt loop** ([`job`]): agent → progress check → goal test
//!    ([`goal`]) → only when green, the pre-critic ([`judges::precheck`], no
//!    model call) and then the critic ([`critic`], from attempt 2 on with the
//!    interdiff, [`workspace::interdiff`]) → the code decides; a rejection
//!    becomes the next prompt.
//! 3. **Circuit breaker** ([`breaker`]): every ending but acceptance parks the
//!    work in a stash pinned by a ref ([`workspace`]) and writes
//!    `failure.json` outside the repository ([`report`]).
//!
//! # Durability
//! Every fact of a job is appended to its [`journal`] (fsync'd) before
//! anything acts on it; a job's state is a fold over the journal, and a
//! resume after `kill -9` replays it: what it records as finished is never
//! run or billed again. `state.json` and `summary.json` are views.
//!
//! # Where the guards live
//! Caps (turns, tokens, USD, before spending): [`guard::caps`], enforced on
//! the wire by the metering gateway every session talks to
//! ([`agent::gateway`]: the credential stays in loopd, every call is metered
//! and journaled, a call the budget cannot cover is refused). Repeated tool
//! calls (with the nudge before the stop), no progress, oscillation:
//! [`guard::progress`], which reads shell commands with
//! [`guard::shell`]. The agent's approved exit, `loopd escalate`:
//! [`guard::escalation`]. Wall clock, attempt
//! and idle timeouts: [`agent::session`]. Process trees: [`process`].
//! Protected paths, skip markers, submodules: [`judges::tamper`]. The size
//! bound of a change the critic judges: [`judges::size`].
//!
//! # The module layers
//! Bottom to top; a module uses only its own layer and those below, never in
//! a cycle (checked by a test, `tests/it/layers.rs`):
//!
//! | layer | modules | owns |
//! | --- | --- | --- |
//! | 0 | [`util`] | atomic writes, ids, clock, shell quoting, crash points |
//! | 1 | [`outcome`], [`process`], [`sandbox`], [`runner`], [`lang`] | reasons → exit codes (the one place); process trees; the Landlock sandbox of a job's processes; the test runners loopd knows (their files, variables, probes); the programming languages loopd reads (one module per language, registered in `lang::LANGUAGES`: grammar, comments, names, terminal writers, handler shapes) |
//! | 2 | [`workspace`], [`agent`], [`notify`] | git (the diff, the pinned `.git/`, held credentials); the agent CLI seam (one module per CLI: `agent::claude`, `agent::codex`) and the vendor-neutral metering gateway; webhooks |
//! | 3 | [`guard`], [`judges`], [`goal`], [`rubric`], [`critic`], [`examiner`] | the live guards of a session; the judges of a change and their settings; the examiner's tests |
//! | 4 | [`record`] | what a job leaves for its views: the summary, its attempts and totals, the failure record, where the work was parked |
//! | 5 | [`journal`] | the job's truth, folded into those records |
//! | 6 | [`report`], [`report_html`], [`breaker`], [`lessons`] | views (`report.html`: the page a human reads), parking, what a repository taught |
//! | 7 | [`config`], [`live`] | `loopd.toml` + flags → a validated job; live progress lines from the journal |
//! | 8 | [`job`] | the attempt loop, phase by phase |
//! | 9 | [`daemon`], [`ci`], [`export`] | the queue and approvals; the CI autofix; many jobs as a Kubernetes Indexed Job or a GitHub Actions matrix |
//! | 10 | [`cli`] | arguments → a command → an exit status |
//!
//! Exit codes are decided in one place: [`outcome`].

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod agent;

pub mod breaker;
pub mod ci;
pub mod cli;
pub mod config;
pub mod critic;
pub mod daemon;
pub mod examiner;
pub mod export;
pub mod goal;
pub mod guard;
pub mod job;
pub mod journal;
pub mod judges;
pub mod lang;
pub mod lessons;
pub mod live;
pub mod notify;
pub mod outcome;
pub mod process;
pub mod record;
pub mod report;
pub mod report_html;
pub mod rubric;
pub mod runner;
pub mod sandbox;
pub mod util;
pub mod workspace;
