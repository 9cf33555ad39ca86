//! `loopd export github-actions`: a jobs file as a scheduled workflow. Each
//! job is one entry of a matrix (GitHub takes at most 256 per matrix, so
//! more jobs are split over `loopd-1`, `loopd-2`, …); each entry restores
//! its job's state from the cache, checks out its repository, runs its
//! `loopd run --job-id ID`, and saves the state again whatever happened —
//! so a re-run continues the journal instead of paying again. A last job,
//! `report`, renders every run into one HTML page.

use crate::export::yaml::{self, Node};
use crate::export::{github_repository, run_command, ExportError, Job, JobsFile, Places};

/// GitHub's limit on the entries of one matrix.
pub const MATRIX_MAX: usize = 256;

/// The agent CLIs the runner installs: every registered agent's package at
/// the version the suite tests (`scripts/install-test-tools.sh`; a test
/// keeps the two equal), since a repository's `loopd.toml` may pick any
/// of them as agent or critic.
pub fn agent_packages() -> String {
    crate::agent::packages()
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The actions the workflow uses, pinned by major version: a major version
/// is the maintainers' promise of compatibility, and GitHub's own actions
/// move their major tag with fixes. Pin them by commit instead if your
/// policy requires it.
const CHECKOUT: &str = "actions/checkout@v4";
const CACHE_RESTORE: &str = "actions/cache/restore@v4";
const CACHE_SAVE: &str = "actions/cache/save@v4";
const UPLOAD: &str = "actions/upload-artifact@v4";
const DOWNLOAD: &str = "actions/download-artifact@v4";

/// Where a run keeps its state on the runner (the cached directory), its
/// credential file (never cached, removed after the run) and its checkout
/// (under the workspace, where `actions/checkout` writes; cached too).
const STATE: &str = "${{ runner.temp }}/loopd/state";
const CHECKOUT_DIR: &str = "checkout";

/// The export's settings (the CLI's flags).
#[derive(Debug, Clone)]
pub struct Options {
    pub cron: String,
    /// Per matrix job; `None`: as many as GitHub gives.
    pub max_parallel: Option<u32>,
    /// How the runner gets loopd (a shell command).
    pub install: String,
    pub runs_on: String,
}

/// A GitHub expression in text from the jobs file would be evaluated when
/// the workflow runs — `${{ github.token }}` in a task would hand the token
/// to the model. Refused rather than escaped: no task needs one.
fn no_expression(file: &JobsFile) -> Result<(), ExportError> {
    for job in &file.jobs {
        let mut texts: Vec<(&str, &str)> = vec![("repo", &job.repo), ("task", &job.task)];
        texts.extend(job.goal.iter().map(|g| ("goal", g.as_str())));
        for (field, t) in [
            ("ref", &job.git_ref),
            ("rubric", &job.rubric),
            ("agent", &job.agent),
            ("timeout", &job.timeout),
        ] {
            if let Some(t) = t {
                texts.push((field, t));
            }
        }
        if let Some((field, _)) = texts.iter().find(|(_, t)| t.contains("${{")) {
            return Err(ExportError::Target {
                file: file.path.clone(),
                problem: format!(
                    "{}: `{field}` holds `${{{{`, which GitHub would evaluate as an expression when the workflow runs; rephrase it",
                    super::at_job(job.index)
                ),
            });
        }
    }
    Ok(())
}

fn check_options(opts: &Options) -> Result<(), ExportError> {
    let fields = opts.cron.split_whitespace().count();
    if fields != 5 || opts.cron.contains('\n') {
        return Err(ExportError::Option {
            option: "--cron",
            problem: format!(
                "`{}` is not a cron schedule of five fields, e.g. \"0 2 * * *\"",
                crate::util::printable(&opts.cron)
            ),
        });
    }
    if opts.max_parallel == Some(0) {
        return Err(ExportError::Option {
            option: "--max-parallel",
            problem: "0 would never run a job".into(),
        });
    }
    if opts.install.trim().is_empty() {
        return Err(ExportError::Option {
            option: "--install",
            problem: "is empty: the runner needs loopd".into(),
        });
    }
    if opts.runs_on.trim().is_empty() || opts.runs_on.chars().any(char::is_control) {
        return Err(ExportError::Option {
            option: "--runs-on",
            problem: "is not a runner label".into(),
        });
    }
    Ok(())
}

/// The places of a run on the runner, as shell words of the step's shell.
const PLACES: Places<'static> = Places {
    checkout: "\"$GITHUB_WORKSPACE\"/checkout",
    state_dir: "\"$RUNNER_TEMP\"/loopd/state",
    credential_file: "\"$RUNNER_TEMP\"/loopd-credentials",
};

/// One matrix entry: what the steps need of the job.
fn entry(job: &Job) -> Node {
    Node::map([
        ("id", job.id.clone().into()),
        ("repo", job.repo.clone().into()),
        ("ref", job.git_ref.clone().unwrap_or_default().into()),
        (
            "github",
            github_repository(&job.repo).unwrap_or_default().into(),
        ),
        ("run", run_command(job, &PLACES).into()),
    ])
}

fn step(name: &str, fields: impl IntoIterator<Item = (&'static str, Node)>) -> Node {
    let mut s = Node::map([("name", name.into())]);
    for (k, v) in fields {
        s.push(k, v);
    }
    s
}

fn with(entries: impl IntoIterator<Item = (&'static str, Node)>) -> Node {
    Node::map(entries)
}

/// The cache entry of a job: one per attempt (a cache key is written
/// once), restored by its prefix, the newest first.
const CACHE_KEY: &str = "loopd-${{ matrix.id }}-${{ github.run_id }}-${{ github.run_attempt }}";
const CACHE_PREFIX: &str = "loopd-${{ matrix.id }}-";

fn cache_paths() -> Node {
    format!("{STATE}\n{CHECKOUT_DIR}\n").into()
}

/// The steps of every matrix entry.
fn steps(opts: &Options) -> Node {
    let credential_vars = crate::agent::credential_vars();
    let not_restored = "steps.restore.outputs.cache-matched-key == ''";
    let mut write_env: Vec<(String, Node)> = credential_vars
        .iter()
        .map(|v| (v.to_string(), Node::Str(format!("${{{{ secrets.{v} }}}}"))))
        .collect();
    write_env.push(("NAMES".into(), credential_vars.join(" ").into()));
    Node::seq([
        step(
            "Restore the job's state (a re-run continues its journal)",
            [
                ("id", "restore".into()),
                ("uses", CACHE_RESTORE.into()),
                ("with", with([("path", cache_paths()), ("key", CACHE_KEY.into()), ("restore-keys", CACHE_PREFIX.into())])),
            ],
        ),
        step(
            "Check out the repository",
            [
                ("if", format!("{not_restored} && matrix.github != ''").into()),
                ("uses", CHECKOUT.into()),
                (
                    "with",
                    with([
                        ("repository", "${{ matrix.github }}".into()),
                        ("ref", "${{ matrix.ref }}".into()),
                        ("path", CHECKOUT_DIR.into()),
                        // Another repository may be private: a token of yours,
                        // else the workflow's own (this repository only).
                        ("token", "${{ secrets.LOOPD_CHECKOUT_TOKEN || github.token }}".into()),
                        ("persist-credentials", false.into()),
                    ]),
                ),
            ],
        ),
        step(
            "Clone the repository",
            [
                ("if", format!("{not_restored} && matrix.github == ''").into()),
                ("env", with([("REPO", "${{ matrix.repo }}".into()), ("REF", "${{ matrix.ref }}".into())])),
                (
                    "run",
                    format!(
                        "git clone --quiet -- \"$REPO\" {CHECKOUT_DIR}\nif [ -n \"$REF\" ]; then\n  git -C {CHECKOUT_DIR} -c advice.detachedHead=false checkout --quiet \"$REF\" --\nfi\n"
                    )
                    .into(),
                ),
            ],
        ),
        step(
            "Install loopd and the agent CLIs",
            [("run", format!("npm install --global {}\n{}\n", agent_packages(), opts.install.trim_end()).into())],
        ),
        step(
            "Write the credential file",
            [
                ("env", Node::Map(write_env)),
                (
                    "run",
                    "umask 077\nfile=\"$RUNNER_TEMP/loopd-credentials\"\n: > \"$file\"\nfor name in $NAMES; do\n  value=$(printenv \"$name\" || true)\n  if [ -n \"$value\" ]; then\n    printf '%s=%s\\n' \"$name\" \"$value\" >> \"$file\"\n  fi\ndone\n".into(),
                ),
            ],
        ),
        step(
            "loopd run",
            [
                ("id", "run".into()),
                ("working-directory", CHECKOUT_DIR.into()),
                ("env", with([("LOOPD_RUN", "${{ matrix.run }}".into())])),
                (
                    "run",
                    "set +e\neval \"$LOOPD_RUN\"\ncode=$?\necho \"exit-code=$code\" >> \"$GITHUB_OUTPUT\"\nexit \"$code\"\n".into(),
                ),
            ],
        ),
        step(
            "Remove the credential file",
            [("if", "always()".into()), ("run", "rm -f \"$RUNNER_TEMP/loopd-credentials\"\n".into())],
        ),
        step(
            "Save the job's state",
            [
                ("if", "always()".into()),
                ("uses", CACHE_SAVE.into()),
                ("with", with([("path", cache_paths()), ("key", CACHE_KEY.into())])),
            ],
        ),
        step(
            "Upload the run",
            [
                ("id", "upload".into()),
                ("if", "always()".into()),
                ("uses", UPLOAD.into()),
                (
                    "with",
                    with([
                        ("name", "loopd-${{ matrix.id }}".into()),
                        ("path", format!("{STATE}/runs/${{{{ matrix.id }}}}/").into()),
                        ("if-no-files-found", "ignore".into()),
                        ("overwrite", true.into()),
                    ]),
                ),
            ],
        ),
        step(
            "Summary",
            [
                ("if", "always()".into()),
                (
                    "env",
                    with([
                        ("ID", "${{ matrix.id }}".into()),
                        ("REPO", "${{ matrix.repo }}".into()),
                        ("CODE", "${{ steps.run.outputs.exit-code }}".into()),
                        ("ARTIFACT_URL", "${{ steps.upload.outputs.artifact-url }}".into()),
                        ("RUN_URL", "${{ github.server_url }}/${{ github.repository }}/actions/runs/${{ github.run_id }}".into()),
                    ]),
                ),
                (
                    "run",
                    r####"summary="$RUNNER_TEMP/loopd/state/runs/$ID/summary.json"
if [ -f "$summary" ] && command -v jq >/dev/null; then
  outcome=$(jq -r '"\(.outcome) (\(.reason))"' "$summary")
elif [ -f "$summary" ]; then
  outcome="see summary.json"
else
  outcome="no summary: the job did not run (see the log)"
fi
{
  echo "### loopd \`$ID\`"
  echo
  echo "- repository: \`$REPO\`"
  echo "- outcome: $outcome; exit code ${CODE:-none} (docs/exit-codes.md)"
  echo "- the run's files: ${ARTIFACT_URL:-$RUN_URL#artifacts}"
} >> "$GITHUB_STEP_SUMMARY"
"####
                    .into(),
                ),
            ],
        ),
    ])
}

/// The matrix jobs and `report`, with their header comments.
pub fn workflow(file: &JobsFile, opts: &Options) -> Result<String, ExportError> {
    check_options(opts)?;
    no_expression(file)?;
    let chunks: Vec<&[Job]> = file.jobs.chunks(MATRIX_MAX).collect();
    let mut jobs = Vec::new();
    let mut names = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let name = format!("loopd-{}", i + 1);
        let mut strategy = Node::map([("fail-fast", false.into())]);
        if let Some(n) = opts.max_parallel {
            strategy.push("max-parallel", n.into());
        }
        strategy.push(
            "matrix",
            Node::map([("include", Node::seq(chunk.iter().map(entry)))]),
        );
        let job = Node::map([
            ("name", "${{ matrix.id }}".into()),
            ("runs-on", opts.runs_on.clone().into()),
            (
                "concurrency",
                Node::map([
                    ("group", "loopd-${{ matrix.id }}".into()),
                    ("cancel-in-progress", false.into()),
                ]),
            ),
            ("strategy", strategy),
            ("steps", steps(opts)),
        ]);
        jobs.push((name.clone(), job));
        names.push(Node::Str(name));
    }
    let report = Node::map([
        ("needs", Node::Seq(names)),
        ("if", "always()".into()),
        ("runs-on", opts.runs_on.clone().into()),
        (
            "steps",
            Node::seq([
                step("Install loopd", [("run", format!("{}\n", opts.install.trim_end()).into())]),
                step(
                    "Download every run",
                    [
                        ("uses", DOWNLOAD.into()),
                        ("continue-on-error", true.into()),
                        ("with", with([("pattern", "loopd-j*".into()), ("path", "artifacts".into())])),
                    ],
                ),
                step(
                    "Render the batch report",
                    [("run", "mkdir -p artifacts\nloopd report --html index.html --batch artifacts/\n".into())],
                ),
                step(
                    "Upload the report",
                    [
                        ("id", "page".into()),
                        ("uses", UPLOAD.into()),
                        ("with", with([("name", "loopd-batch-report".into()), ("path", "index.html".into()), ("overwrite", true.into())])),
                    ],
                ),
                step(
                    "Link the report",
                    [
                        ("if", "steps.page.outputs.artifact-url != ''".into()),
                        ("env", with([("URL", "${{ steps.page.outputs.artifact-url }}".into())])),
                        ("run", "echo \"**loopd:** [every job's report]($URL) (download, unzip, open index.html)\" >> \"$GITHUB_STEP_SUMMARY\"\n".into()),
                    ],
                ),
            ]),
        ),
    ]);
    jobs.push(("report".into(), report));
    let doc = Node::map([
        ("name", "loopd".into()),
        (
            "on",
            Node::map([
                (
                    "schedule",
                    Node::seq([Node::map([("cron", opts.cron.clone().into())])]),
                ),
                ("workflow_dispatch", Node::map(Vec::<(String, Node)>::new())),
            ]),
        ),
        (
            "permissions",
            Node::map([("contents", "read".into()), ("actions", "read".into())]),
        ),
        ("jobs", Node::Map(jobs)),
    ]);
    Ok(yaml::document(&header(file, chunks.len()), &doc))
}

fn header(file: &JobsFile, matrix_jobs: usize) -> Vec<String> {
    let path = crate::util::printable(&file.path.display().to_string()).replace('\n', " ");
    let secrets = crate::agent::credential_vars().join(", ");
    vec![
        "Copy to .github/workflows/loopd.yml.".to_owned(),
        format!("Written by `loopd export github-actions` from {path}"),
        format!("(sha256 {}): {} jobs in {matrix_jobs} matrix job(s) of at most {MATRIX_MAX} (GitHub's limit).", file.sha256, file.jobs.len()),
        String::new(),
        "Set the secret(s) your agents use, as repository secrets of the same name:".into(),
        format!("  {secrets}; and LOOPD_CHECKOUT_TOKEN to check out private repositories."),
        String::new(),
        "Why each part:".into(),
        "- Ids come from the jobs file's bytes, so a re-run runs the same jobs: the job's state dir".into(),
        "  and checkout are restored from actions/cache (keyed on the id) and `loopd run --job-id`".into(),
        "  continues its journal, or, when the job ended, prints its summary and exits with its code".into(),
        "  without spending. The state is saved again whatever happened (if: always()).".into(),
        "- fail-fast: false: one job's failure says nothing about another's.".into(),
        "- concurrency per job id, never cancelling: the scheduled run and a manual one never run".into(),
        "  one journal at once. (A group per repository would not do: GitHub keeps one pending job".into(),
        "  per group and cancels the others.)".into(),
        "- The credential goes from secrets into a file under $RUNNER_TEMP (umask 077), read once by".into(),
        "  `--credential-file` and removed after the run: never in loopd's environment.".into(),
        "- Checkouts keep no token (persist-credentials: false).".into(),
        "- permissions: read only; loopd pushes nothing here. Exit codes (docs/exit-codes.md): 0".into(),
        "  is a green job, anything else a red one; re-run failed jobs to continue interrupted (4)".into(),
        "  or environment (5) failures — an ended job re-runs at no cost.".into(),
        "- Actions are pinned by major version tag (v4); pin by commit if your policy requires it.".into(),
        "- `report` renders every run into one page, also when some failed.".into(),
        "See docs/many-repositories.md.".into(),
    ]
}

/// The workflow in which `loopd ci` follows pull requests
/// ([`crate::ci::follow`]): the example workflow, the source of truth a
/// test reads, with how the runner gets loopd and where it runs put in.
const FOLLOW: &str = include_str!("../../examples/github/loopd-follow.yml");

/// What the example installs, replaced by the options.
const FOLLOW_INSTALL: &str = "          npm install -g @anthropic-ai/claude-code@2.1.328\n          cargo install --locked --git \"${{ vars.LOOPD_GIT_URL }}\" loopd\n";
const FOLLOW_RUNS_ON: &str = "    runs-on: ubuntu-latest\n";
/// What the base push's job installs (loopd alone), replaced by the option.
const FOLLOW_INSTALL_LOOPD: &str =
    "          cargo install --locked --git \"${{ vars.LOOPD_GIT_URL }}\" loopd\n";

/// `loopd export github-follow`: the follow workflow, every agent CLI the
/// registry knows installed, loopd installed by `install`, on `runs_on`.
/// A line break or a GitHub expression in either is refused: each lands
/// in the workflow's text, where it would be YAML or be evaluated.
pub fn follow_workflow(install: &str, runs_on: &str) -> Result<String, ExportError> {
    for (option, value) in [("--install", install), ("--runs-on", runs_on)] {
        if value.contains(['\n', '\r']) || value.contains("${{") || value.trim().is_empty() {
            return Err(ExportError::Option {
                option,
                problem: format!(
                    "`{value}` must be one line without a GitHub expression (`${{{{ … }}}}`)"
                ),
            });
        }
    }
    debug_assert!(FOLLOW.contains(FOLLOW_INSTALL) && FOLLOW.contains(FOLLOW_RUNS_ON));
    // The round's job installs the agent CLIs and loopd; the base push's
    // job, loopd alone. Both run on `runs_on`.
    let body = FOLLOW
        .replace(
            FOLLOW_INSTALL,
            &format!(
                "          npm install -g {}\n          {install}\n",
                agent_packages()
            ),
        )
        .replace(FOLLOW_INSTALL_LOOPD, &format!("          {install}\n"))
        .replace(
            FOLLOW_RUNS_ON,
            &format!("    runs-on: {}\n", yaml::scalar_text(runs_on)),
        );
    // The example's first line says where to copy it; the export's says
    // who wrote it (`loopd export` overwrites only its own files).
    let body = body
        .split_once('\n')
        .map_or(body.as_str(), |(_, rest)| rest);
    Ok(format!(
        "{}github-follow`: copy to .github/workflows/loopd-follow.yml.\n{body}",
        super::HEADER
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::parse;
    use std::path::Path;

    fn opts() -> Options {
        Options {
            cron: "0 2 * * *".into(),
            max_parallel: Some(8),
            install: "cargo install --locked loopd".into(),
            runs_on: "ubuntu-latest".into(),
        }
    }

    #[test]
    fn an_expression_in_the_jobs_file_is_refused() {
        let text =
            "[[job]]\nrepo = \"/r\"\ntask = \"leak ${{ github.token }}\"\ngoal = [\"true\"]\n";
        let file = parse(Path::new("jobs.toml"), text.as_bytes()).expect("valid");
        let err = workflow(&file, &opts()).expect_err("refused");
        assert!(err.to_string().contains("`task` holds `${{`"), "{err}");
    }

    #[test]
    fn jobs_are_split_into_matrices_of_at_most_256() {
        let text = "[[job]]\nrepo = \"https://github.com/a/b\"\ntask = \"t\"\ngoal = [\"true\"]\n"
            .repeat(513);
        let file = parse(Path::new("jobs.toml"), text.as_bytes()).expect("valid");
        let w = workflow(&file, &opts()).expect("exports");
        for job in ["loopd-1:", "loopd-2:", "loopd-3:"] {
            assert!(w.contains(&format!("\n  {job}\n")), "{job}");
        }
        assert!(!w.contains("loopd-4:"));
        assert!(w.contains("needs:\n      - loopd-1\n      - loopd-2\n      - loopd-3\n"));
        assert_eq!(w.matches("\n          - id: ").count(), 513);
    }

    #[test]
    fn options_are_checked() {
        let file = parse(
            Path::new("jobs.toml"),
            b"[[job]]\nrepo = \"/r\"\ntask = \"t\"\ngoal = [\"true\"]\n",
        )
        .expect("valid");
        for (o, want) in [
            (
                Options {
                    cron: "daily".into(),
                    ..opts()
                },
                "--cron",
            ),
            (
                Options {
                    max_parallel: Some(0),
                    ..opts()
                },
                "--max-parallel",
            ),
            (
                Options {
                    install: " ".into(),
                    ..opts()
                },
                "--install",
            ),
        ] {
            match workflow(&file, &o) {
                Err(ExportError::Option { option, .. }) => assert_eq!(option, want),
                other => panic!("{want}: {other:?}"),
            }
        }
    }
}
