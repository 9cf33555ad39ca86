//! The `loopd` binary: arguments → logging → the command → one exit code.

use std::process::ExitCode;

use clap::Parser;
use loopd::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = std::env::var("LOOPD_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("loopd={default},warn")));
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false);
    // Under systemd, journald stamps every line itself.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.without_time().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let args = Cli::parse();
    init_logging(args.verbose, args.quiet);
    // Orphans of the agent's tools are re-parented here, not to init.
    if loopd::process::become_subreaper() {
        loopd::process::enable_stray_sweep();
    } else {
        tracing::debug!(
            "could not become a child subreaper; containment relies on the token sweep alone"
        );
    }
    match cli::dispatch(args) {
        Ok(status) => ExitCode::from(status.code()),
        Err(e) => {
            eprintln!("error: {}", e.message);
            if let Some(hint) = e.hint {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(e.status.code())
        }
    }
}
