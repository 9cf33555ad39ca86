//! `loopd completions` and `loopd man`: the shell completion scripts and
//! the man pages, generated from the same clap definitions as `--help`, so
//! they cannot drift from the command line.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, CliError};
use crate::outcome::ExitStatus;

/// Print a shell completion script (bash, zsh or fish) on stdout.
///
/// Example: `loopd completions bash > ~/.local/share/bash-completion/completions/loopd`
///
/// zsh: `loopd completions zsh > ~/.zfunc/_loopd` (with `~/.zfunc` in
/// `fpath`); fish: `loopd completions fish > ~/.config/fish/completions/loopd.fish`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells `loopd completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Print a man page (roff) on stdout: loopd(1), or a subcommand's.
///
/// Example: `loopd man > ~/.local/share/man/man1/loopd.1 && man loopd`
///
/// The page's SUBCOMMANDS section names one page per subcommand, e.g.
/// loopd-run(1): `loopd man run > ~/.local/share/man/man1/loopd-run.1`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// A subcommand (and its subcommands: `hook pre-tool-use`) whose page to print.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn completions(args: CompletionsArgs) -> Result<ExitStatus, CliError> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "loopd", &mut script);
    print(&script)
}

pub fn man(args: ManArgs) -> Result<ExitStatus, CliError> {
    let mut cmd = Cli::command();
    // Building the whole tree names every subcommand as its page is named
    // (`loopd-run`), which the parent page's SUBCOMMANDS section refers to.
    cmd.build();
    for name in &args.command {
        cmd = cmd
            .find_subcommand(name)
            .filter(|sub| !sub.is_hide_set())
            .cloned()
            .ok_or_else(|| {
                CliError::new(ExitStatus::Usage, format!("no subcommand `{name}`"))
                    .hint("`loopd man` lists the subcommands under SUBCOMMANDS")
            })?;
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .source(format!("loopd {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)
        .map_err(|e| CliError::new(ExitStatus::Environment, format!("cannot render: {e}")))?;
    print(&page)
}

fn print(bytes: &[u8]) -> Result<ExitStatus, CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| {
            CliError::new(
                ExitStatus::Environment,
                format!("cannot write to stdout: {e}"),
            )
        })?;
    Ok(ExitStatus::Success)
}
