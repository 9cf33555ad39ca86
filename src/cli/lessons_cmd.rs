//! `loopd lessons`: what a repository taught earlier jobs, and forgetting it.

use crate::cli::daemon::state_dir_or_default;
use crate::cli::CliError;
use crate::lessons::{self, LessonsError};
use crate::outcome::ExitStatus;
use crate::workspace::Workspace;

/// List the lessons loopd learned on a repository — the findings later
/// attempts had to fix, most often seen first; the first ten (2 KB at most)
/// go into the first prompt of every later job there.
///
/// Example: `loopd lessons -C ~/src/app`, then `loopd lessons forget 1a2b3c4d`
#[derive(Debug, clap::Args)]
pub struct LessonsArgs {
    /// Repository the lessons are about.
    #[arg(
        short = 'C',
        long = "repo",
        value_name = "DIR",
        default_value = ".",
        global = true
    )]
    pub repo: std::path::PathBuf,
    #[arg(long, value_name = "DIR", env = "LOOPD_STATE_DIR", global = true)]
    pub state_dir: Option<std::path::PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub action: Option<LessonsAction>,
}

#[derive(Debug, clap::Subcommand)]
pub enum LessonsAction {
    /// Remove one lesson by its id; later jobs no longer carry it.
    Forget { id: String },
}

impl From<LessonsError> for CliError {
    fn from(e: LessonsError) -> Self {
        let status = match e {
            LessonsError::NoSuchLesson { .. } => ExitStatus::Usage,
            _ => ExitStatus::Environment,
        };
        let hint = e.hint();
        let err = CliError::new(status, e);
        match hint {
            Some(h) => err.hint(h),
            None => err,
        }
    }
}

pub fn lessons(args: LessonsArgs) -> Result<ExitStatus, CliError> {
    let ws = Workspace::open(&args.repo)?;
    let head = ws.head_commit()?;
    let key = lessons::repo_key(ws.git2(), head)?;
    let state_dir = state_dir_or_default(args.state_dir);
    if let Some(LessonsAction::Forget { id }) = args.action {
        let gone = lessons::update(&state_dir, &key, |l| lessons::forget(l, &id))?;
        eprintln!("forgot lesson {}: {}", gone.id, gone.text);
        return Ok(ExitStatus::Success);
    }
    let all = lessons::load(&state_dir, &key)?;
    if args.json {
        crate::cli::out!(
            "{}",
            serde_json::to_string_pretty(&all).expect("lessons serialize")
        );
        return Ok(ExitStatus::Success);
    }
    if all.lessons.is_empty() {
        crate::cli::out!(
            "no lessons yet for `{}` (root commit {key})",
            ws.root().display()
        );
        return Ok(ExitStatus::Success);
    }
    let used: Vec<&str> = lessons::most_seen(&all)
        .iter()
        .map(|l| l.id.as_str())
        .collect();
    let mut sorted: Vec<&lessons::Lesson> = all.lessons.iter().collect();
    sorted.sort_by(|a, b| b.seen.cmp(&a.seen).then(b.last_seen.cmp(&a.last_seen)));
    let mut out = format!(
        "lessons for `{}` (root commit {key}):\n",
        ws.root().display()
    );
    for l in sorted {
        let rule = l.rule.map(|r| format!("rule {r}, ")).unwrap_or_default();
        out.push_str(&format!(
            "{} {} {}\n    ({rule}seen in {} job(s), last {}; {})\n",
            l.id,
            if used.contains(&l.id.as_str()) {
                "*"
            } else {
                " "
            },
            l.text,
            l.seen,
            l.jobs.last().map_or("?", String::as_str),
            l.key
        ));
    }
    out.push_str("* = in the first prompt of the next job");
    crate::cli::out!("{out}");
    Ok(ExitStatus::Success)
}
