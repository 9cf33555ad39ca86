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
//!    ([`goal`]) → only when green, the critic ([`critic`]) → the code decides;
//!    a rejection becomes the next prompt.
//! 3. **Circuit breaker** ([`breaker`]): every ending but acceptance parks the
//!    work in a stash pinned by a ref ([`workspace`]) and writes
//!    `failure.json` outside the repository ([`report`]).
//!
//! # Where the guards live
//! Caps (turns, tokens, USD, before spending): [`guard::caps`]. Repeated tool
//! calls, no progress, oscillation: [`guard::progress`]. Wall clock, attempt
//! and idle timeouts: [`agent::session`]. Process trees: [`process`].
//!
//! Exit codes are decided in one place: [`outcome`].

pub mod agent;
pub mod approval;
pub mod breaker;
pub mod ci;
pub mod cli;
pub mod config;
pub mod critic;
pub mod daemon;
pub mod goal;
pub mod guard;
pub mod job;
pub mod journal;
pub mod notify;
pub mod outcome;
pub mod process;
pub mod report;
pub mod rubric;
pub mod util;
pub mod workspace;
