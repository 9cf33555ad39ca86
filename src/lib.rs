//! loopd supervises a coding agent (Claude Code in print mode, `claude -p`)
//! on a git repository until a deterministic goal test is green *and* a critic
//! in a fresh session accepts the diff — or until a guard stops it, in which
//! case the work is parked safely and a human gets a report.
//!
//! # The loops, inside out
//! 1. **Agent session** ([`agent::session`]): one `claude -p` run, its
//!    stream-json read as it arrives into typed [`agent::events`]; every event
//!    passes the guards ([`guard::Watch`]) and may stop the session mid-turn.
//! 2. **Attempt loop** ([`job`]): agent → progress check → goal test
//!    ([`goal`]) → only when green, the pre-critic ([`guard::precheck`], no
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
//! Caps (turns, tokens, USD, before spending): [`guard::caps`]. Repeated tool
//! calls, no progress, oscillation: [`guard::progress`]. Wall clock, attempt
//! and idle timeouts: [`agent::session`]. Process trees: [`process`].
//! Protected paths, skip markers, submodules: [`guard::tamper`]. The size
//! bound of a change the critic judges: [`guard::size`].
//!
//! # The module layers
//! Bottom to top; a module uses only its own layer and those below, never in
//! a cycle (checked by a test, `tests/it/layers.rs`):
//!
//! | layer | modules | owns |
//! | --- | --- | --- |
//! | 0 | [`util`] | atomic writes, ids, clock, shell quoting, crash points |
//! | 1 | [`outcome`], [`process`], [`sandbox`] | reasons → exit codes (the one place); process trees; the Landlock sandbox of a job's processes |
//! | 2 | [`workspace`], [`agent`], [`notify`] | git (the diff, the pinned `.git/`, held credentials); the agent CLI seam (Claude Code); webhooks |
//! | 3 | [`guard`], [`goal`], [`rubric`], [`critic`] | the judges and their settings |
//! | 4 | [`report`], [`breaker`], [`journal`], [`lessons`] | views, parking, the job's truth, what a repository taught |
//! | 5 | [`config`] | `loopd.toml` + flags → a validated job |
//! | 6 | [`job`] | the attempt loop, phase by phase |
//! | 7 | [`daemon`], [`ci`] | the queue and approvals; the CI autofix |
//! | 8 | [`cli`] | arguments → a command → an exit status |
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
pub mod goal;
pub mod guard;
pub mod sandbox;
pub mod job;
pub mod journal;
pub mod lessons;
pub mod notify;
pub mod outcome;
pub mod process;
pub mod report;
pub mod rubric;
pub mod util;
pub mod workspace;
