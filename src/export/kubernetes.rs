//! `loopd export kubernetes`: a jobs file as one batch/v1 Indexed Job and
//! the ConfigMap holding its script. Pod `i` runs job `i`
//! (`$JOB_COMPLETION_INDEX`): it clones the repository once onto the
//! shared volume and `exec`s `loopd run --job-id ID`, so loopd is PID 1's
//! direct program and gets the kubelet's SIGTERM itself.
//!
//! Kubernetes decides what to do with a failed pod from loopd's exit code
//! ([`decision`], in a `podFailurePolicy`): retry what a retry can fix,
//! fail the index at once when it cannot, and never count an eviction.

use crate::export::yaml::{self, Node};
use crate::export::{run_command, ExportError, Job, JobsFile, Places};
use crate::outcome::{ExitStatus, Reason};
use crate::util::shell_quote;

/// Where the shared volume is mounted: state dirs and checkouts.
pub const VOLUME: &str = "/var/lib/loopd";
/// Where the Secret's keys are mounted, one file per credential variable.
pub const CREDENTIALS: &str = "/var/run/secrets/loopd";
/// Where the ConfigMap's script is mounted.
const SCRIPT_DIR: &str = "/etc/loopd";
const SCRIPT_KEY: &str = "run.sh";
/// The container's name, which the pod failure policy's exit codes refer to.
const CONTAINER: &str = "loopd";
/// The fixed non-root uid (and gid, and fsGroup) of the pod.
pub const UID: i64 = 10001;
/// SIGTERM to SIGKILL. loopd stops its agent with its own grace (`[guard]
/// grace`, 5 s by default), then parks the work — a stash, `failure.json`,
/// the journal fsync'd — on a network volume that may be slow; the systemd
/// units give it 30 s on a local disk. Twice that here.
pub const GRACE_SECONDS: i64 = 60;
/// A ConfigMap holds at most 1 MiB; leave room for its metadata.
const MAX_SCRIPT_BYTES: usize = 1_000_000;

/// What Kubernetes does with a pod that exited with a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The index succeeded (exit 0): no rule, Kubernetes' own meaning.
    Succeed,
    /// The index fails now, whatever its backoff limit: a retry would end
    /// the same way (the journal says so, or the configuration is wrong).
    FailIndex,
    /// A retry can help: counted against `backoffLimitPerIndex`.
    Count,
}

/// The decision for each of loopd's exit statuses. No wildcard: a new exit
/// status does not compile until it has one, and the unit test below holds
/// the generated policy to this table for every reason code.
pub fn decision(status: ExitStatus) -> Option<Decision> {
    match status {
        ExitStatus::Success | ExitStatus::Accepted => Some(Decision::Succeed),
        // The job ended and its journal says how: a retry of `loopd run
        // --job-id` would print the same summary. Exhausted, a guard, a
        // human needed, nothing to fix — and a usage error, which no retry
        // changes.
        ExitStatus::Exhausted
        | ExitStatus::Usage
        | ExitStatus::Guard
        | ExitStatus::NeedsHuman
        | ExitStatus::NothingToFix => Some(Decision::FailIndex),
        // Interrupted (SIGTERM: a drain, an eviction, a node going away) or
        // the environment failed (a transient git or API error): the journal
        // continues where it stopped, nothing finished is billed again.
        ExitStatus::Signal | ExitStatus::Environment => Some(Decision::Count),
        // `loopd hook` only: never the exit of `loopd run`.
        ExitStatus::Hook(_) => None,
    }
}

/// Every exit status `loopd run` can end with: each reason's, and the usage
/// error of a command line that does not parse.
fn run_exit_statuses() -> Vec<ExitStatus> {
    let mut out: Vec<ExitStatus> = Reason::ALL.iter().map(|r| ExitStatus::from(*r)).collect();
    out.push(ExitStatus::Usage);
    out.push(ExitStatus::Environment);
    out.sort_by_key(|s| s.code());
    out.dedup();
    out
}

/// The exit codes of `loopd run` with `d`, ascending.
fn codes_with(d: Decision) -> Vec<Node> {
    run_exit_statuses()
        .into_iter()
        .filter(|s| decision(*s) == Some(d))
        .map(|s| Node::Int(i64::from(s.code())))
        .collect()
}

/// The `podFailurePolicy`: an eviction or drain first (ignored, whatever it
/// exited with), then the exit codes a retry cannot help, then those it can.
fn pod_failure_policy() -> Node {
    let on_codes = |codes: Vec<Node>| {
        Node::map([
            ("containerName", CONTAINER.into()),
            ("operator", "In".into()),
            ("values", Node::Seq(codes)),
        ])
    };
    Node::map([(
        "rules",
        Node::seq([
            Node::map([
                ("action", "Ignore".into()),
                (
                    "onPodConditions",
                    Node::seq([Node::map([
                        ("type", "DisruptionTarget".into()),
                        ("status", "True".into()),
                    ])]),
                ),
            ]),
            Node::map([
                ("action", "FailIndex".into()),
                ("onExitCodes", on_codes(codes_with(Decision::FailIndex))),
            ]),
            Node::map([
                ("action", "Count".into()),
                ("onExitCodes", on_codes(codes_with(Decision::Count))),
            ]),
        ]),
    )])
}

/// The export's settings (the CLI's flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// The image with loopd, the agent CLIs, git and the projects' toolchains.
    pub image: String,
    pub parallelism: u32,
    pub backoff_limit_per_index: u32,
    /// A ReadWriteMany PersistentVolumeClaim: state dirs and checkouts.
    pub claim: String,
    /// The Secret whose keys are credential variables.
    pub secret: String,
    /// The Job's name; `None`: `loopd-<hash>`.
    pub name: Option<String>,
    pub namespace: Option<String>,
}

/// A DNS-1123 label (a Job's, a namespace's name): lowercase letters,
/// digits and `-`, starting and ending with a letter or digit.
fn dns_label(option: &'static str, s: &str, max: usize) -> Result<(), ExportError> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(ExportError::Option {
            option,
            problem: format!(
                "`{}` is not a Kubernetes name: at most {max} lowercase letters, digits and `-`, starting and ending with a letter or digit",
                crate::util::printable(s)
            ),
        })
    }
}

/// A DNS-1123 subdomain (a claim's, a Secret's name): labels joined by `.`.
fn dns_subdomain(option: &'static str, s: &str) -> Result<(), ExportError> {
    if s.len() > 253 || s.split('.').any(|l| dns_label(option, l, 63).is_err()) {
        return Err(ExportError::Option {
            option,
            problem: format!(
                "`{}` is not a Kubernetes object name (lowercase letters, digits, `-` and `.`)",
                crate::util::printable(s)
            ),
        });
    }
    Ok(())
}

/// One `case` arm of the script: clone job `job`'s repository once, then
/// `exec` its `loopd run` in the checkout.
pub fn case_arm(job: &Job) -> String {
    // The script's own variables, set at its top (never text of the file).
    let checkout = format!("\"$checkouts\"/{}", job.id);
    let places = Places {
        checkout: &checkout,
        state_dir: "\"$state\"",
        credential_file: "\"$credentials\"",
    };
    format!(
        "{index})\n  clone {repo} {git_ref} {checkout}\n  cd {checkout}\n  exec {command}\n  ;;\n",
        index = job.index,
        repo = shell_quote(&job.repo),
        git_ref = shell_quote(job.git_ref.as_deref().unwrap_or("")),
        command = run_command(job, &places),
    )
}

/// The script every pod runs: the fixed places, `clone`, and one arm per job.
pub fn script(file: &JobsFile) -> String {
    let mut s = format!(
        r#"#!/bin/sh
# Written by `loopd export kubernetes` from {file} (sha256 {hash}).
# Every pod of the Indexed Job runs this; $JOB_COMPLETION_INDEX picks its job.
set -eu
volume={VOLUME}
state="$volume/state"
checkouts="$volume/checkouts"
credentials={CREDENTIALS}

# clone REPO REF DIR: the repository at REF (empty: the remote's default
# branch) in DIR, once. It is cloned into a temporary directory on the same
# volume and renamed into place, so a pod killed mid-clone never leaves a
# half checkout; a checkout already there (a retried pod) is kept as it is,
# and loopd continues the job in it. A clone that fails exits 5, an
# environment error: Kubernetes retries it within the backoff limit.
clone() {{
  [ -e "$3" ] && return 0
  mkdir -p "$checkouts"
  rm -rf "$3.partial"
  git clone --quiet -- "$1" "$3.partial" || exit 5
  if [ -n "$2" ]; then
    git -C "$3.partial" -c advice.detachedHead=false checkout --quiet "$2" -- || exit 5
  fi
  mv "$3.partial" "$3"
}}

case "${{JOB_COMPLETION_INDEX:-}}" in
"#,
        file = crate::util::printable(&file.path.display().to_string()).replace('\n', " "),
        hash = file.sha256,
    );
    for job in &file.jobs {
        s.push_str(&case_arm(job));
    }
    s.push_str(&format!(
        "*)\n  echo \"loopd: no job has the index '${{JOB_COMPLETION_INDEX:-}}' (this script holds {n})\" >&2\n  exit 2\n  ;;\nesac\n",
        n = file.jobs.len()
    ));
    s
}

/// The manifest: header comments, the ConfigMap, the Job.
pub fn manifest(file: &JobsFile, opts: &Options) -> Result<String, ExportError> {
    let default_name = format!("loopd-{}", file.short_hash());
    let name = opts.name.clone().unwrap_or(default_name);
    // The ConfigMap carries the file's hash whatever the Job is called: an
    // edited file never rewrites the script a running Job's retries read.
    dns_label("--name", &name, 63 - 1 - super::HASH_HEX)?;
    if let Some(ns) = &opts.namespace {
        dns_label("--namespace", ns, 63)?;
    }
    dns_subdomain("--claim", &opts.claim)?;
    dns_subdomain("--secret", &opts.secret)?;
    if opts.image.is_empty()
        || opts
            .image
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ExportError::Option {
            option: "--image",
            problem: format!(
                "`{}` is not an image reference",
                crate::util::printable(&opts.image)
            ),
        });
    }
    for (option, n) in [
        ("--parallelism", opts.parallelism),
        ("--backoff-limit-per-index", opts.backoff_limit_per_index),
    ] {
        if n > 100_000 {
            return Err(ExportError::Option {
                option,
                problem: format!("{n} is more than Kubernetes takes"),
            });
        }
    }
    if opts.parallelism == 0 {
        return Err(ExportError::Option {
            option: "--parallelism",
            problem: "0 pods would never run a job".into(),
        });
    }
    let config_map = if name.ends_with(file.short_hash()) {
        format!("{name}-script")
    } else {
        format!("{name}-{}", file.short_hash())
    };
    let text = script(file);
    if text.len() > MAX_SCRIPT_BYTES {
        return Err(ExportError::Target {
            file: file.path.clone(),
            problem: format!(
                "its script is {} bytes; a ConfigMap holds at most 1 MiB: split the file",
                text.len()
            ),
        });
    }
    let metadata = |name: &str| {
        let mut m = Node::map([("name", name.into())]);
        if let Some(ns) = &opts.namespace {
            m.push("namespace", ns.into());
        }
        m.push("labels", labels(&name_label(file)));
        m.push(
            "annotations",
            Node::map([
                ("loopd/jobs-file", file.path.display().to_string().into()),
                ("loopd/jobs-sha256", file.sha256.clone().into()),
            ]),
        );
        m
    };
    let cm = Node::map([
        ("apiVersion", "v1".into()),
        ("kind", "ConfigMap".into()),
        ("metadata", metadata(&config_map)),
        ("data", Node::map([(SCRIPT_KEY, text.into())])),
    ]);
    let job = Node::map([
        ("apiVersion", "batch/v1".into()),
        ("kind", "Job".into()),
        ("metadata", metadata(&name)),
        (
            "spec",
            Node::map([
                ("completionMode", "Indexed".into()),
                ("completions", file.jobs.len().into()),
                ("parallelism", opts.parallelism.into()),
                ("backoffLimitPerIndex", opts.backoff_limit_per_index.into()),
                ("podReplacementPolicy", "Failed".into()),
                ("podFailurePolicy", pod_failure_policy()),
                (
                    "template",
                    Node::map([
                        (
                            "metadata",
                            Node::map([("labels", labels(&name_label(file)))]),
                        ),
                        ("spec", pod_spec(opts, &config_map)),
                    ]),
                ),
            ]),
        ),
    ]);
    Ok(yaml::documents(
        &header(file, opts, &name, &config_map),
        &[cm, job],
    ))
}

fn name_label(file: &JobsFile) -> String {
    format!("jobs-{}", file.short_hash())
}

fn labels(instance: &str) -> Node {
    Node::map([
        ("app.kubernetes.io/name", "loopd".into()),
        ("app.kubernetes.io/instance", instance.into()),
        ("app.kubernetes.io/managed-by", "loopd-export".into()),
    ])
}

fn pod_spec(opts: &Options, config_map: &str) -> Node {
    Node::map([
        ("restartPolicy", "Never".into()),
        ("terminationGracePeriodSeconds", GRACE_SECONDS.into()),
        ("automountServiceAccountToken", false.into()),
        ("enableServiceLinks", false.into()),
        (
            "securityContext",
            Node::map([
                ("runAsNonRoot", true.into()),
                ("runAsUser", UID.into()),
                ("runAsGroup", UID.into()),
                ("fsGroup", UID.into()),
                ("fsGroupChangePolicy", "OnRootMismatch".into()),
                (
                    "seccompProfile",
                    Node::map([("type", "RuntimeDefault".into())]),
                ),
            ]),
        ),
        (
            "containers",
            Node::seq([Node::map([
                ("name", CONTAINER.into()),
                ("image", opts.image.clone().into()),
                (
                    "command",
                    Node::seq([
                        "/bin/sh".into(),
                        format!("{SCRIPT_DIR}/{SCRIPT_KEY}").into(),
                    ]),
                ),
                (
                    "env",
                    Node::seq([Node::map([
                        ("name", "HOME".into()),
                        ("value", "/tmp".into()),
                    ])]),
                ),
                (
                    "securityContext",
                    Node::map([
                        ("allowPrivilegeEscalation", false.into()),
                        (
                            "capabilities",
                            Node::map([("drop", Node::seq(["ALL".into()]))]),
                        ),
                        ("readOnlyRootFilesystem", true.into()),
                        ("runAsNonRoot", true.into()),
                    ]),
                ),
                (
                    "volumeMounts",
                    Node::seq([
                        Node::map([("name", "state".into()), ("mountPath", VOLUME.into())]),
                        Node::map([
                            ("name", "credentials".into()),
                            ("mountPath", CREDENTIALS.into()),
                            ("readOnly", true.into()),
                        ]),
                        Node::map([
                            ("name", "script".into()),
                            ("mountPath", SCRIPT_DIR.into()),
                            ("readOnly", true.into()),
                        ]),
                        Node::map([("name", "tmp".into()), ("mountPath", "/tmp".into())]),
                    ]),
                ),
            ])]),
        ),
        (
            "volumes",
            Node::seq([
                Node::map([
                    ("name", "state".into()),
                    (
                        "persistentVolumeClaim",
                        Node::map([("claimName", opts.claim.clone().into())]),
                    ),
                ]),
                Node::map([
                    ("name", "credentials".into()),
                    (
                        "secret",
                        // 0400: the owner reads; the kubelet adds group read
                        // for the fsGroup, which the pod's user is in.
                        Node::map([
                            ("secretName", opts.secret.clone().into()),
                            ("defaultMode", 0o400i64.into()),
                        ]),
                    ),
                ]),
                Node::map([
                    ("name", "script".into()),
                    (
                        "configMap",
                        Node::map([
                            ("name", config_map.into()),
                            ("defaultMode", 0o444i64.into()),
                        ]),
                    ),
                ]),
                Node::map([
                    ("name", "tmp".into()),
                    ("emptyDir", Node::map(Vec::<(String, Node)>::new())),
                ]),
            ]),
        ),
    ])
}

/// The header: what was exported, and what each choice is for.
fn header(file: &JobsFile, opts: &Options, name: &str, config_map: &str) -> Vec<String> {
    let codes = |d| {
        codes_with(d)
            .iter()
            .map(|n| match n {
                Node::Int(c) => c.to_string(),
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let path = crate::util::printable(&file.path.display().to_string()).replace('\n', " ");
    [
        format!("Written by `loopd export kubernetes` from {path}"),
        format!("(sha256 {}): {} jobs, ids j{}-0 … j{}-{}.", file.sha256, file.jobs.len(), file.short_hash(), file.short_hash(), file.jobs.len() - 1),
        String::new(),
        format!("Before `kubectl apply -f`: the PersistentVolumeClaim `{}` (ReadWriteMany:", opts.claim),
        "pods of any node share it) and the Secret `".to_owned() + &opts.secret + "`, whose keys are credential",
        "variables (e.g. `kubectl create secret generic ".to_owned() + &opts.secret + " --from-literal=ANTHROPIC_API_KEY=...`).",
        format!("The image `{}` must hold loopd, git, the agent CLIs and the projects' toolchains.", opts.image),
        String::new(),
        format!("ConfigMap {config_map}: the script. Pod i runs job i ($JOB_COMPLETION_INDEX): it clones the"),
        format!("  repository once into {VOLUME}/checkouts/<id> (a temporary directory, then a rename:"),
        "  a killed clone never leaves half a checkout) and execs `loopd run --job-id <id>`.".into(),
        "  The same file always gives the same ids, so a retried pod continues its job's journal".into(),
        "  (an ended job prints its summary and exits with its code): nothing finished is paid twice.".into(),
        "  The ConfigMap's name carries the file's hash: an edited file is new jobs, never a new script".into(),
        "  under a running Job.".into(),
        format!("Job {name}: Indexed, one completion per job, {} at a time.", opts.parallelism),
        "  podFailurePolicy, from loopd's exit codes (docs/exit-codes.md):".into(),
        "    DisruptionTarget (an eviction, a drain, preemption): Ignore, not the job's failure;".into(),
        format!("    exit {}: FailIndex, a retry cannot help (exhausted, a usage error, a guard,", codes(Decision::FailIndex)),
        "      needs a human, nothing to fix: the journal would end the same way);".into(),
        format!("    exit {}: Count, retried up to backoffLimitPerIndex = {} (interrupted, or a", codes(Decision::Count), opts.backoff_limit_per_index),
        "      transient git or API failure; any other code, e.g. OOMKilled, is counted too).".into(),
        "  podReplacementPolicy Failed: a retry starts only once the old pod is gone, so two".into(),
        "    loopd never run one journal.".into(),
        format!("  terminationGracePeriodSeconds {GRACE_SECONDS}: loopd stops its agent with its own 5 s grace, then"),
        "    parks the work (stash, failure.json, the journal) on the volume before it exits 4.".into(),
        format!("  The credential is the Secret mounted read-only at {CREDENTIALS} (defaultMode 0400) and"),
        "    read once by `--credential-file`: never in this manifest, never an environment variable.".into(),
        "    The agent's sandbox cannot read that directory.".into(),
        format!("  Non-root (uid {UID}), no privilege escalation, every capability dropped, seccomp"),
        "    RuntimeDefault, a read-only root filesystem (HOME and /tmp are an emptyDir), no service".into(),
        "    account token (the agent runs code in this pod: it gets no Kubernetes credential).".into(),
        format!("  fsGroup {UID} with fsGroupChangePolicy OnRootMismatch: the volume is the pod's group's,"),
        "    and the kubelet does not reopen loopd's 0700 state dir to the group on every start.".into(),
        "See docs/many-repositories.md.".into(),
    ]
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::parse;
    use std::path::Path;

    /// Every exit status `loopd run` can end with has a decision, and the
    /// generated policy lists exactly its code under that decision: a new
    /// reason with a new exit code fails here until it is decided.
    #[test]
    fn the_pod_failure_policy_is_the_decision_table() {
        let statuses = run_exit_statuses();
        // Retried by the engine exactly where `loopd run --job-id`
        // continues the job rather than printing its ending again.
        for s in &statuses {
            assert_eq!(
                decision(*s) == Some(Decision::Count),
                s.retryable(),
                "{s:?}: the engine's retry and loopd's continuation disagree"
            );
        }
        let codes: Vec<u8> = statuses.iter().map(|s| s.code()).collect();
        assert_eq!(
            codes,
            [0, 1, 2, 3, 4, 5, 6, 7],
            "loopd run's exit codes changed: decide each in `decision`"
        );
        let policy = pod_failure_policy();
        let rule = |action: &str| -> Vec<i64> {
            let Node::Map(top) = &policy else {
                panic!("a map")
            };
            let Node::Seq(rules) = &top[0].1 else {
                panic!("rules")
            };
            rules
                .iter()
                .find_map(|r| {
                    let Node::Map(r) = r else { return None };
                    (r[0].1 == Node::Str(action.into())).then(|| match &r[1].1 {
                        Node::Map(on) => match &on[2].1 {
                            Node::Seq(v) => v
                                .iter()
                                .map(|n| match n {
                                    Node::Int(i) => *i,
                                    _ => -1,
                                })
                                .collect(),
                            _ => vec![],
                        },
                        _ => vec![],
                    })
                })
                .unwrap_or_default()
        };
        assert_eq!(rule("FailIndex"), [1, 2, 3, 6, 7]);
        assert_eq!(rule("Count"), [4, 5]);
        for s in statuses {
            let d = decision(s).unwrap_or_else(|| panic!("exit {} has no decision", s.code()));
            let listed_fail = rule("FailIndex").contains(&i64::from(s.code()));
            let listed_count = rule("Count").contains(&i64::from(s.code()));
            match d {
                Decision::Succeed => assert!(s.code() == 0 && !listed_fail && !listed_count),
                Decision::FailIndex => assert!(listed_fail && !listed_count, "{}", s.code()),
                Decision::Count => assert!(listed_count && !listed_fail, "{}", s.code()),
            }
        }
        assert_eq!(decision(ExitStatus::Hook(2)), None);
        // The eviction rule comes first: a drained pod exits 4 too.
        let Node::Map(top) = &policy else { panic!() };
        let Node::Seq(rules) = &top[0].1 else {
            panic!()
        };
        assert_eq!(
            rules[0],
            Node::map([
                ("action", "Ignore".into()),
                (
                    "onPodConditions",
                    Node::seq([Node::map([
                        ("type", "DisruptionTarget".into()),
                        ("status", "True".into())
                    ])])
                ),
            ])
        );
    }

    fn hostile_file() -> crate::export::JobsFile {
        let hostile = "$(rm -rf ~) `touch /tmp/pwned` \"q\" 'q' \\\n;exec sh\n  ;;\nesac";
        let text = format!(
            "[[job]]\nrepo = \"https://example.com/it's $(x).git\"\nref = \"feat/$(x)\"\ntask = {}\ngoal = [{}, \"true\"]\nrubric = \"docs/it's.md\"\n",
            toml::Value::String(hostile.into()),
            toml::Value::String(hostile.into()),
        );
        parse(Path::new("jobs.toml"), text.as_bytes()).expect("valid")
    }

    /// A hostile task, goal, repository and ref: the script parses (`sh -n`),
    /// and its arm hands `clone` and `loopd` each argument byte for byte.
    #[test]
    fn a_hostile_job_stays_data_in_the_script() {
        let file = hostile_file();
        let job = &file.jobs[0];
        let tmp = tempfile::tempdir().expect("tempdir");
        let script_path = tmp.path().join("run.sh");
        std::fs::write(&script_path, script(&file)).expect("write");
        let n = std::process::Command::new("sh")
            .arg("-n")
            .arg(&script_path)
            .output()
            .expect("sh -n");
        assert!(
            n.status.success(),
            "sh -n: {}",
            String::from_utf8_lossy(&n.stderr)
        );

        // The arm alone, with `clone` and `loopd` recording their arguments.
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let out = tmp.path().join("args");
        let fake = bin.join("loopd");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\0' \"$@\" > {}\n",
                shell_quote(&out.display().to_string())
            ),
        )
        .expect("fake");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let checkouts = tmp.path().join("checkouts");
        std::fs::create_dir_all(checkouts.join(&job.id)).expect("checkout");
        let cloned = tmp.path().join("cloned");
        let harness = format!(
            "set -eu\ncheckouts={c}\nstate=/the/state\ncredentials=/the/credentials\nclone() {{ printf '%s\\0' \"$@\" > {cl}; }}\ncase 0 in\n{arm}esac\n",
            c = shell_quote(&checkouts.display().to_string()),
            cl = shell_quote(&cloned.display().to_string()),
            arm = case_arm(job),
        );
        let run = std::process::Command::new("sh")
            .arg("-c")
            .arg(&harness)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .expect("sh -c");
        assert!(
            run.status.success(),
            "{}\n{harness}",
            String::from_utf8_lossy(&run.stderr)
        );
        let split = |p: &Path| -> Vec<String> {
            String::from_utf8(std::fs::read(p).expect("recorded"))
                .expect("UTF-8")
                .split_terminator('\0')
                .map(str::to_owned)
                .collect()
        };
        let checkout = format!("{}/{}", checkouts.display(), job.id);
        assert_eq!(
            split(&cloned),
            [
                job.repo.as_str(),
                job.git_ref.as_deref().expect("ref"),
                checkout.as_str()
            ]
        );
        let mut want: Vec<String> = [
            "run",
            "--job-id",
            &job.id,
            "-C",
            &checkout,
            "--state-dir",
            "/the/state",
            "--credential-file",
            "/the/credentials",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        want.extend(crate::export::run_args(job));
        assert_eq!(split(&out), want);
        assert!(want.contains(&job.task));
        assert!(!Path::new("/tmp/pwned").exists());
    }

    #[test]
    fn names_and_options_are_checked() {
        let file = hostile_file();
        let opts = Options {
            image: "loopd:0.1.0".into(),
            parallelism: 4,
            backoff_limit_per_index: 3,
            claim: "loopd-state".into(),
            secret: "loopd-credentials".into(),
            name: None,
            namespace: None,
        };
        let m = manifest(&file, &opts).expect("exports");
        assert!(
            m.contains(&format!("name: loopd-{}\n", file.short_hash())),
            "{m}"
        );
        assert!(
            m.contains(&format!("name: loopd-{}-script\n", file.short_hash())),
            "{m}"
        );
        for (o, want) in [
            (
                Options {
                    name: Some("Bad_Name".into()),
                    ..opts.clone()
                },
                "--name",
            ),
            (
                Options {
                    name: Some("x".repeat(53)),
                    ..opts.clone()
                },
                "--name",
            ),
            (
                Options {
                    namespace: Some("-ns".into()),
                    ..opts.clone()
                },
                "--namespace",
            ),
            (
                Options {
                    claim: "a/b".into(),
                    ..opts.clone()
                },
                "--claim",
            ),
            (
                Options {
                    image: "a b".into(),
                    ..opts.clone()
                },
                "--image",
            ),
            (
                Options {
                    parallelism: 0,
                    ..opts.clone()
                },
                "--parallelism",
            ),
        ] {
            match manifest(&file, &o) {
                Err(ExportError::Option { option, .. }) => assert_eq!(option, want),
                other => panic!("{want}: {other:?}"),
            }
        }
        let named = manifest(
            &file,
            &Options {
                name: Some("nightly".into()),
                ..opts
            },
        )
        .expect("exports");
        assert!(
            named.contains(&format!("name: nightly-{}\n", file.short_hash())),
            "{named}"
        );
    }
}
