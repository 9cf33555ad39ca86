//! The `loopd` binary: arguments → logging → the command → one exit code.

use std::process::ExitCode;

use clap::Parser;
use loopd::cli::{self, Cli};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

/// With live progress lines on (`run`, `resume`, `ci` without `-q` or
/// `-v`), stderr gets warnings and errors only and the INFO lines go to the
/// job's `loopd.log`: each step is said once. `-v` brings them back to
/// stderr; `LOOPD_LOG` sets the stderr filter whole.
fn init_logging(verbose: u8, quiet: bool, live: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) if live => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = std::env::var("LOOPD_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| {
            let said = if live && verbose == 0 {
                format!(",{}=off", loopd::live::SAID)
            } else {
                String::new()
            };
            EnvFilter::new(format!("loopd={default}{said},warn"))
        });
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false);
    // Under systemd, journald stamps every line itself.
    let stderr = if std::env::var_os("JOURNAL_STREAM").is_some() {
        stderr.without_time().with_filter(filter).boxed()
    } else {
        stderr.with_filter(filter).boxed()
    };
    let file = (live && verbose == 0).then(|| {
        fmt::layer()
            .with_writer(|| loopd::util::log_file::Writer)
            .with_ansi(false)
            .with_target(false)
            .with_filter(EnvFilter::new("loopd=info,warn"))
    });
    tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .init();
}

fn main() -> ExitCode {
    // The namespace helper loopd runs on itself: before anything else, in a
    // fresh process that holds no secret and starts no thread.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .get(1)
        .is_some_and(|a| a == loopd::sandbox::NAMESPACE_HELPER_ARG)
    {
        return ExitCode::from(loopd::sandbox::namespace_helper(&argv[2..]));
    }
    let args = Cli::parse();
    // The commands that hold credentials and supervise the agent: first,
    // before any secret is read, out of reach of same-user processes.
    let holds_secrets = matches!(
        args.command,
        cli::Command::Run(_)
            | cli::Command::Resume(_)
            | cli::Command::Daemon(_)
            | cli::Command::Ci(_)
            | cli::Command::Approve(_)
    );
    let undumpable = holds_secrets && loopd::util::make_undumpable();
    let live = !args.quiet
        && matches!(
            args.command,
            cli::Command::Run(_) | cli::Command::Resume(_) | cli::Command::Ci(_)
        );
    init_logging(args.verbose, args.quiet, live);
    if holds_secrets && !undumpable {
        tracing::warn!("could not make loopd non-dumpable: processes of the same user may read its environment");
    }
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
