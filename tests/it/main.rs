//! One integration-test binary (jj's layout): most tests drive the real
//! `loopd` binary on a fixture repository built by
//! `fixtures/rechnung/make-repo.sh`, its agent the scripted agent of test
//! builds or a real CLI, against the scripted model; `README.md` here says
//! which test uses which, and why.

#[path = "../support/mod.rs"]
mod support;

mod agents;
mod allow;
mod attack40;
mod attack40b;
mod attack41;
mod attack41b;
mod attack41c;
mod attack42;
mod attack42b;
mod attack42c;
mod attack42d;
mod attacks;
mod boundary;
mod ci;
mod corpus;
mod crash;
mod daemon;
mod examiner;
mod export;
mod gates;
mod gateway;
mod guards;
mod held_out;
mod hermetic;
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
mod suite;
mod systemd;
mod way_out;
