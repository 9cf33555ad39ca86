//! `loopd export kubernetes|github-actions --jobs FILE`: the thin edge of
//! [`crate::export`] — flags to options, the file or stdout, errors to exit
//! codes (2: the jobs file or a flag is wrong; 5: the output cannot be
//! written).

use std::path::PathBuf;

use crate::cli::CliError;
use crate::export::{self, github_actions, kubernetes, ExportError};
use crate::outcome::ExitStatus;

/// Write what runs many jobs beyond one machine — a Kubernetes Indexed Job
/// or a GitHub Actions matrix workflow — from one jobs file. Each job runs
/// `loopd run --job-id ID` with an id derived from the file's content, so a
/// retried pod or a re-run workflow continues the same job.
///
/// Example: `loopd export kubernetes --jobs jobs.toml --image registry.example/loopd:0.1.0 -o loopd.yaml`
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub target: Target,
}

#[derive(Debug, clap::Subcommand)]
pub enum Target {
    Kubernetes(KubernetesArgs),
    GithubActions(GithubActionsArgs),
    GithubFollow(GithubFollowArgs),
}

/// The jobs file and the output, shared by both targets.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// The jobs file: `[[job]]` tables (repo, task, goal, caps) and an
    /// optional `[defaults]`; TOML, or JSON when the name ends in `.json`.
    #[arg(long, value_name = "FILE")]
    pub jobs: PathBuf,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// A ConfigMap with the script and a batch/v1 Indexed Job, one pod per job,
/// with a pod failure policy from loopd's exit codes. Apply with `kubectl
/// apply -f`.
#[derive(Debug, clap::Args)]
pub struct KubernetesArgs {
    #[command(flatten)]
    pub common: Common,
    /// The container image: loopd, git, the agent CLIs and the projects'
    /// toolchains [default: `loopd:<this version>`].
    #[arg(long, value_name = "IMG")]
    pub image: Option<String>,
    /// How many jobs run at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallelism: u32,
    /// Retries of one job after an interruption or an environment error
    /// (exit 4 or 5), before its index fails.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub backoff_limit_per_index: u32,
    /// The ReadWriteMany PersistentVolumeClaim holding the state dirs and
    /// checkouts (it must exist).
    #[arg(long, value_name = "PVC", default_value = "loopd-state")]
    pub claim: String,
    /// The Secret whose keys are credential variables (`ANTHROPIC_API_KEY`,
    /// …), mounted as files (it must exist).
    #[arg(long, value_name = "NAME", default_value = "loopd-credentials")]
    pub secret: String,
    /// The Job's name [default: `loopd-<hash of the jobs file>`].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The namespace of both objects [default: kubectl's].
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
}

/// A workflow (schedule and manual dispatch) with a matrix over the jobs,
/// each job's state cached between runs, and a batch report at the end.
/// Copy it to `.github/workflows/`.
#[derive(Debug, clap::Args)]
pub struct GithubActionsArgs {
    #[command(flatten)]
    pub common: Common,
    /// When the workflow runs, as a cron schedule (UTC).
    #[arg(long, value_name = "CRON", default_value = "0 2 * * *")]
    pub cron: String,
    /// The most jobs of one matrix that run at once [default: as many as GitHub gives].
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<u32>,
    #[command(flatten)]
    pub runner: RunnerArgs,
}

/// Where a workflow runs and how its runner gets loopd, shared by both
/// GitHub targets.
#[derive(Debug, clap::Args)]
pub struct RunnerArgs {
    /// How the runner gets loopd: a shell command (one line).
    #[arg(
        long,
        value_name = "CMD",
        default_value = "cargo install --locked loopd"
    )]
    pub install: String,
    /// The runner label the jobs run on (a self-hosted one for repositories
    /// given as absolute paths).
    #[arg(long, value_name = "LABEL", default_value = "ubuntu-latest")]
    pub runs_on: String,
}

/// The workflow in which `loopd ci` follows the pull requests it opened
/// (and those labelled `[ci] follow_label`): subscribed to failed checks,
/// comments, reviews and review comments, with the least permissions each
/// needs. Copy it to `.github/workflows/`. See docs/ci.md.
#[derive(Debug, clap::Args)]
pub struct GithubFollowArgs {
    #[command(flatten)]
    pub runner: RunnerArgs,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

impl From<ExportError> for CliError {
    fn from(e: ExportError) -> Self {
        let hint = e.hint();
        CliError {
            status: ExitStatus::Usage,
            message: e.to_string(),
            hint,
        }
    }
}

pub fn export(args: ExportArgs) -> Result<ExitStatus, CliError> {
    let (text, output) = match args.target {
        Target::Kubernetes(a) => {
            let file = export::load(&a.common.jobs)?;
            let opts = kubernetes::Options {
                image: a
                    .image
                    .unwrap_or_else(|| format!("loopd:{}", env!("CARGO_PKG_VERSION"))),
                parallelism: a.parallelism,
                backoff_limit_per_index: a.backoff_limit_per_index,
                claim: a.claim,
                secret: a.secret,
                name: a.name,
                namespace: a.namespace,
            };
            (kubernetes::manifest(&file, &opts)?, a.common.output)
        }
        Target::GithubActions(a) => {
            let file = export::load(&a.common.jobs)?;
            let opts = github_actions::Options {
                cron: a.cron,
                max_parallel: a.max_parallel,
                install: a.runner.install,
                runs_on: a.runner.runs_on,
            };
            (github_actions::workflow(&file, &opts)?, a.common.output)
        }
        Target::GithubFollow(a) => (
            github_actions::follow_workflow(&a.runner.install, &a.runner.runs_on)?,
            a.output,
        ),
    };
    match output {
        Some(path) if path.as_os_str() != "-" => {
            // Never over a file loopd did not write: not a device, a link,
            // a FIFO, the jobs file itself, anything without the header.
            if path.symlink_metadata().is_ok() && !export::is_ours(&path) {
                return Err(CliError::new(
                    ExitStatus::Usage,
                    format!(
                        "`{}` exists and is not a file `loopd export` wrote; refusing to overwrite it",
                        path.display()
                    ),
                )
                .hint("choose another path, or move that file away first"));
            }
            crate::util::write_atomic(&path, text.as_bytes()).map_err(|e| {
                CliError::new(
                    ExitStatus::Environment,
                    format!("cannot write `{}`: {e}", path.display()),
                )
            })?;
        }
        _ => crate::cli::out!("{}", text.trim_end_matches('\n')),
    }
    Ok(ExitStatus::Success)
}
