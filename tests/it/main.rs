//! One integration-test binary (jj's layout): every test drives the real
//! `loopd` binary and the real Claude Code CLI against the scripted model on
//! a fixture repository built by `fixtures/rechnung/make-repo.sh`.

#[path = "../support/mod.rs"]
mod support;

mod agents;
mod attacks;
mod boundary;
mod ci;
mod crash;
mod daemon;
mod export;
mod gateway;
mod guards;
mod hook;
mod job_id;
mod layers;
mod lessons;
mod live;
mod meta;
mod precheck;
mod report_html;
mod run_loop;
mod sandbox;
mod systemd;
mod way_out;
