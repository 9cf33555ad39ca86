//! `loopd export`: the manifest and the workflow it writes are what the
//! platforms accept — checked offline against their published schemas by
//! `kubernetes-validate --strict` and `check-jsonschema` (both from
//! `.tools/venv`, installed by `scripts/install-test-tools.sh`) — and each
//! validator is shown to reject a misspelt field in the same output, so a
//! pass is never vacuous. The Kubernetes script is run for real with a fake
//! `loopd`: it clones once, and hands a hostile task over byte for byte.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{loopd_bin, manifest_dir};

/// The Kubernetes version the manifest is validated against: the first
/// with `podReplacementPolicy` GA (`backoffLimitPerIndex` and
/// `podFailurePolicy`'s `FailIndex` are GA since 1.33).
const KUBERNETES: &str = "1.34.0";

/// The virtual environment with the validators and PyYAML.
fn venv() -> PathBuf {
    let tools = std::env::var_os("LOOPD_TEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join(".tools"));
    let bin = tools.join("venv/bin");
    for tool in ["kubernetes-validate", "check-jsonschema", "python"] {
        assert!(
            bin.join(tool).is_file(),
            "{tool} is missing under {}: run `scripts/install-test-tools.sh`",
            bin.display()
        );
    }
    bin
}

/// A tool of the venv, kept off the network: any download it tried would
/// fail on the dead proxy, so a pass proves the schemas are the bundled ones.
fn tool(name: &str) -> Command {
    let mut cmd = Command::new(venv().join(name));
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
    ] {
        cmd.env(var, "http://127.0.0.1:9");
    }
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
    cmd
}

fn loopd(args: &[&str]) -> Output {
    Command::new(loopd_bin())
        .args(args)
        .env("LOOPD_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("loopd {args:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Export `jobs` (written to `dir/name`) to `dir/out`; the output's text.
fn export(dir: &Path, target: &str, name: &str, jobs: &str, extra: &[&str]) -> String {
    let file = dir.join(name);
    std::fs::write(&file, jobs).expect("write the jobs file");
    let out_file = dir.join(format!("{target}.yaml"));
    let mut args = vec![
        "export",
        target,
        "--jobs",
        file.to_str().expect("UTF-8 path"),
        "-o",
        out_file.to_str().expect("UTF-8 path"),
    ];
    args.extend(extra);
    let out = loopd(&args);
    assert!(out.status.success(), "loopd {args:?}: {}", text(&out));
    std::fs::read_to_string(&out_file).expect("the export")
}

/// Every document of a YAML file, as PyYAML reads it.
fn yaml_docs(file: &Path) -> Vec<Value> {
    let out = tool("python")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1], encoding='utf-8')))))",
        ])
        .arg(file)
        .output()
        .expect("python");
    assert!(out.status.success(), "PyYAML: {}", text(&out));
    serde_json::from_slice(&out.stdout).expect("JSON from PyYAML")
}

const JOBS: &str = r#"
[defaults]
budget_usd = 2.0
max_attempts = 3

[[job]]
repo = "https://github.com/acme/app.git"
ref = "main"
task = "Make the tests pass"
goal = ["python3 -m pytest -q", "ruff check ."]
rubric = "docs/rubric.md"

[[job]]
repo = "/srv/repos/lib"
task = "Fix the flaky test"
goal = ["make test"]
agent = "codex"
timeout = "2h"
max_turns = 50
max_tokens = 1000000
"#;

fn kubernetes_validate(file: &Path) -> Output {
    tool("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", KUBERNETES])
        .arg(file)
        .output()
        .expect("kubernetes-validate")
}

fn check_workflow(file: &Path) -> Output {
    tool("check-jsonschema")
        .args(["--builtin-schema", "vendor.github-workflows"])
        .arg(file)
        .output()
        .expect("check-jsonschema")
}

#[test]
fn the_kubernetes_manifest_validates_and_a_misspelt_field_does_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let yaml = export(
        tmp.path(),
        "kubernetes",
        "jobs.toml",
        JOBS,
        &["--namespace", "batch", "--parallelism", "2"],
    );
    let file = tmp.path().join("kubernetes.yaml");
    let out = kubernetes_validate(&file);
    assert!(
        out.status.success(),
        "kubernetes-validate: {}\n{yaml}",
        text(&out)
    );
    assert_eq!(
        text(&out).matches("passed").count(),
        2,
        "both objects: {}",
        text(&out)
    );

    // What the schema cannot say, read back through PyYAML.
    let docs = yaml_docs(&file);
    assert_eq!(docs.len(), 2);
    let (cm, job) = (&docs[0], &docs[1]);
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(job["kind"], "Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 2);
    assert_eq!(spec["parallelism"], 2);
    assert_eq!(spec["backoffLimitPerIndex"], 3);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert!(
        pod["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("grace")
            >= 30
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert!(container.get("envFrom").is_none());
    assert!(
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .all(|e| e["name"] == "HOME"),
        "no credential in the environment: {container}"
    );
    let secret = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v.get("secret").is_some())
        .expect("the Secret volume");
    assert_eq!(secret["secret"]["defaultMode"], 0o400);
    let rules = spec["podFailurePolicy"]["rules"].as_array().expect("rules");
    assert_eq!(rules[0]["action"], "Ignore");
    assert_eq!(
        rules[1]["onExitCodes"]["values"],
        serde_json::json!([1, 2, 3, 6, 7])
    );
    assert_eq!(rules[2]["onExitCodes"]["values"], serde_json::json!([4, 5]));
    let script = cm["data"]["run.sh"].as_str().expect("the script");
    assert!(script.contains("exec loopd run --job-id j"), "{script}");

    // The same output with one field misspelt (in the pod template, and at
    // the top of the Job's spec) is refused: the validation is strict.
    for (from, to) in [
        ("\n      restartPolicy:", "\n      restartPolicyy:"),
        ("\n  backoffLimitPerIndex:", "\n  backoffLimitPerIndx:"),
    ] {
        assert_eq!(yaml.matches(from).count(), 1, "{from}");
        let bad = tmp.path().join("bad.yaml");
        std::fs::write(&bad, yaml.replace(from, to)).expect("write");
        let out = kubernetes_validate(&bad);
        assert!(
            !out.status.success(),
            "kubernetes-validate accepted `{to}`: {}",
            text(&out)
        );
        assert!(
            text(&out).contains(to.trim().trim_end_matches(':')),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn the_workflow_validates_and_a_misspelt_field_does_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let yaml = export(
        tmp.path(),
        "github-actions",
        "jobs.toml",
        JOBS,
        &["--max-parallel", "4", "--cron", "30 1 * * 1-5"],
    );
    let file = tmp.path().join("github-actions.yaml");
    let out = check_workflow(&file);
    assert!(
        out.status.success(),
        "check-jsonschema: {}\n{yaml}",
        text(&out)
    );

    let w = &yaml_docs(&file)[0];
    assert_eq!(w["on"]["schedule"][0]["cron"], "30 1 * * 1-5");
    assert!(w["on"].get("workflow_dispatch").is_some());
    assert_eq!(
        w["permissions"],
        serde_json::json!({"contents": "read", "actions": "read"})
    );
    let job = &w["jobs"]["loopd-1"];
    assert_eq!(job["strategy"]["fail-fast"], false);
    assert_eq!(job["strategy"]["max-parallel"], 4);
    assert_eq!(job["concurrency"]["cancel-in-progress"], false);
    let include = job["strategy"]["matrix"]["include"]
        .as_array()
        .expect("include");
    assert_eq!(include.len(), 2);
    assert_eq!(include[0]["github"], "acme/app");
    assert_eq!(
        include[1]["github"], "",
        "not on github.com: a plain git clone"
    );
    let steps = job["steps"].as_array().expect("steps");
    let uses: Vec<&str> = steps.iter().filter_map(|s| s["uses"].as_str()).collect();
    let major = regex::Regex::new(r"^v\d+$").expect("regex");
    assert!(uses.len() >= 4, "{uses:?}");
    for u in &uses {
        let (_, version) = u.split_once('@').expect("pinned");
        assert!(
            major.is_match(version),
            "{u} is not pinned by major version"
        );
    }
    for always in ["Save the job's state", "Upload the run", "Summary"] {
        let s = steps
            .iter()
            .find(|s| s["name"] == always)
            .unwrap_or_else(|| panic!("{always}"));
        assert_eq!(s["if"], "always()", "{always}");
    }
    let report = &w["jobs"]["report"];
    assert_eq!(report["needs"], serde_json::json!(["loopd-1"]));
    assert_eq!(report["if"], "always()");
    assert!(yaml.contains("loopd report --html index.html --batch artifacts/"));
    // No secret is written into the workflow, only read from `secrets.*`.
    assert!(!yaml.contains("sk-"));

    // Misspelt where they stand in the workflow (not in the header's
    // comments, which name them too).
    for (from, to) in [
        ("\n      fail-fast:", "\n      fail-fst:"),
        ("\n    runs-on:", "\n    run-on:"),
    ] {
        assert!(yaml.contains(from), "{from}");
        let bad = tmp.path().join("bad.yaml");
        std::fs::write(&bad, yaml.replacen(from, to, 1)).expect("write");
        let out = check_workflow(&bad);
        assert!(
            !out.status.success(),
            "check-jsonschema accepted `{to}`: {}",
            text(&out)
        );
    }
}

#[test]
fn three_hundred_jobs_are_two_matrix_jobs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let jobs: String = (0..300)
        .map(|i| format!("[[job]]\nrepo = \"https://github.com/acme/app{i}.git\"\ntask = \"Task {i}\"\ngoal = [\"make test\"]\n"))
        .collect();
    export(tmp.path(), "github-actions", "many.toml", &jobs, &[]);
    let file = tmp.path().join("github-actions.yaml");
    let out = check_workflow(&file);
    assert!(out.status.success(), "check-jsonschema: {}", text(&out));
    let w = &yaml_docs(&file)[0];
    let sizes: Vec<usize> = ["loopd-1", "loopd-2"]
        .iter()
        .map(|j| {
            w["jobs"][j]["strategy"]["matrix"]["include"]
                .as_array()
                .expect("include")
                .len()
        })
        .collect();
    assert_eq!(sizes, [256, 44]);
    assert!(w["jobs"].get("loopd-3").is_none());
    assert_eq!(
        w["jobs"]["report"]["needs"],
        serde_json::json!(["loopd-1", "loopd-2"])
    );
    let ids: Vec<&str> = ["loopd-1", "loopd-2"]
        .iter()
        .flat_map(|j| {
            w["jobs"][j]["strategy"]["matrix"]["include"]
                .as_array()
                .expect("include")
                .iter()
        })
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    let prefix = ids[0].trim_end_matches("-0");
    let want: Vec<String> = (0..300).map(|i| format!("{prefix}-{i}")).collect();
    assert_eq!(ids, want, "every job once, in the file's order");
}

/// The ids of a Kubernetes export, job by job (from the script's arms).
fn kubernetes_ids(yaml_file: &Path) -> Vec<String> {
    let docs = yaml_docs(yaml_file);
    let script = docs[0]["data"]["run.sh"]
        .as_str()
        .expect("script")
        .to_owned();
    let re = regex::Regex::new(r"exec loopd run --job-id (\S+) ").expect("regex");
    re.captures_iter(&script).map(|c| c[1].to_owned()).collect()
}

#[test]
fn ids_are_stable_for_a_file_and_new_for_a_changed_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("kubernetes.yaml");
    export(tmp.path(), "kubernetes", "jobs.toml", JOBS, &[]);
    let first = kubernetes_ids(&file);
    export(tmp.path(), "kubernetes", "jobs.toml", JOBS, &[]);
    let again = kubernetes_ids(&file);
    assert_eq!(first.len(), 2);
    assert_eq!(first, again, "the same file, the same ids");
    let workflow = export(tmp.path(), "github-actions", "jobs.toml", JOBS, &[]);
    for id in &first {
        assert!(
            id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{id}"
        );
        assert!(
            workflow.contains(&format!("id: {id}\n")),
            "the workflow names the same jobs: {id}"
        );
    }
    export(
        tmp.path(),
        "kubernetes",
        "jobs.toml",
        &JOBS.replace("max_attempts = 3", "max_attempts = 4"),
        &[],
    );
    let changed = kubernetes_ids(&file);
    assert_eq!(changed.len(), 2);
    for (a, b) in first.iter().zip(&changed) {
        assert_ne!(a, b, "a changed file is new jobs");
    }
}

#[test]
fn a_misspelt_key_in_the_jobs_file_exits_2_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("jobs.toml");
    std::fs::write(&file, JOBS.replace("timeout = \"2h\"", "timout = \"2h\"")).expect("write");
    for target in ["kubernetes", "github-actions"] {
        let out = loopd(&["export", target, "--jobs", file.to_str().expect("path")]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        for needle in [
            "jobs.toml",
            "job 1 (the 2nd [[job]])",
            "unknown key `timout`",
            "hint: did you mean `timeout`?",
        ] {
            assert!(err.contains(needle), "`{needle}` not in:\n{err}");
        }
        assert!(out.stdout.is_empty(), "nothing written on an error");
    }
    let out = loopd(&[
        "export",
        "kubernetes",
        "--jobs",
        tmp.path().join("missing.toml").to_str().expect("path"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// Run a program in `dir` (git for the fixture).
fn run_in(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}", text(&out));
}

/// The exported script, run as a pod would (the volume and the Secret's
/// directory moved into a temp dir, `loopd` a fake that records its
/// arguments): job 0 is cloned at its ref and gets its hostile task byte for
/// byte; a retry keeps the checkout; a half clone left by a killed pod is
/// replaced; an index without a job exits 2.
#[test]
fn the_kubernetes_script_clones_once_and_passes_the_task_intact() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let origin = tmp.path().join("origin");
    std::fs::create_dir(&origin).expect("origin");
    run_in(&origin, "git", &["init", "-q", "-b", "main"]);
    std::fs::write(origin.join("README"), "main\n").expect("write");
    run_in(&origin, "git", &["add", "README"]);
    run_in(&origin, "git", &["commit", "-q", "-m", "main"]);
    run_in(&origin, "git", &["checkout", "-q", "-b", "feature"]);
    std::fs::write(origin.join("README"), "feature\n").expect("write");
    run_in(&origin, "git", &["commit", "-q", "-am", "feature"]);
    run_in(&origin, "git", &["checkout", "-q", "main"]);

    let hostile = "Fix it. $(touch pwned) `touch pwned2` \"dq\" 'sq' \\ ;; esac\n\tline two \u{2028} \u{85} é 日本 🦀\r\nend $HOME";
    let jobs = format!(
        "[[job]]\nrepo = {repo}\nref = \"feature\"\ntask = {task}\ngoal = [{task}]\n\n[[job]]\nrepo = {repo}\ntask = \"second\"\ngoal = [\"true\"]\n",
        repo = toml::Value::String(origin.display().to_string()),
        task = toml::Value::String(hostile.into()),
    );
    let yaml = export(tmp.path(), "kubernetes", "jobs.toml", &jobs, &[]);
    let manifest = tmp.path().join("kubernetes.yaml");
    let out = kubernetes_validate(&manifest);
    assert!(
        out.status.success(),
        "kubernetes-validate: {}\n{yaml}",
        text(&out)
    );
    let script = yaml_docs(&manifest)[0]["data"]["run.sh"]
        .as_str()
        .expect("script")
        .to_owned();

    // The workflow carries the same command line through its matrix.
    let workflow = export(tmp.path(), "github-actions", "jobs.toml", &jobs, &[]);
    let out = check_workflow(&tmp.path().join("github-actions.yaml"));
    assert!(
        out.status.success(),
        "check-jsonschema: {}\n{workflow}",
        text(&out)
    );
    // …and its step evaluates it as the runner would (`eval "$LOOPD_RUN"`
    // in bash), handing the task over intact.
    let w = &yaml_docs(&tmp.path().join("github-actions.yaml"))[0];
    let run = w["jobs"]["loopd-1"]["strategy"]["matrix"]["include"][0]["run"]
        .as_str()
        .expect("the matrix run");
    let eval = Command::new("bash")
        .args([
            "--noprofile",
            "--norc",
            "-c",
            "loopd() { printf '%s\\0' \"$@\"; }; eval \"$LOOPD_RUN\"",
        ])
        .env("LOOPD_RUN", run)
        .env("GITHUB_WORKSPACE", "/ws")
        .env("RUNNER_TEMP", "/rt")
        .output()
        .expect("bash");
    assert!(eval.status.success(), "{}", text(&eval));
    let args: Vec<String> = String::from_utf8(eval.stdout)
        .expect("UTF-8")
        .split_terminator('\0')
        .map(str::to_owned)
        .collect();
    assert_eq!(
        &args[3..9],
        [
            "-C",
            "/ws/checkout",
            "--state-dir",
            "/rt/loopd/state",
            "--credential-file",
            "/rt/loopd-credentials"
        ]
    );
    assert_eq!(&args[9..], ["--task", hostile, "--goal", hostile]);

    let volume = tmp.path().join("volume");
    let secrets = tmp.path().join("secrets");
    let moved = script
        .replacen(
            "volume=/var/lib/loopd\n",
            &format!("volume='{}'\n", volume.display()),
            1,
        )
        .replacen(
            "credentials=/var/run/secrets/loopd\n",
            &format!("credentials='{}'\n", secrets.display()),
            1,
        );
    assert_ne!(
        moved, script,
        "the script sets the volume and credential paths at its top"
    );
    let script_file = tmp.path().join("run.sh");
    std::fs::write(&script_file, &moved).expect("write");
    let n = Command::new("sh")
        .arg("-n")
        .arg(&script_file)
        .output()
        .expect("sh -n");
    assert!(n.status.success(), "sh -n: {}", text(&n));

    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let record = tmp.path().join("args");
    let fake = bin.join("loopd");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\npwd > '{}.cwd'\nprintf '%s\\0' \"$@\" > '{}'\nexit 0\n",
            record.display(),
            record.display()
        ),
    )
    .expect("fake loopd");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let pod = |index: &str| {
        Command::new("sh")
            .arg(&script_file)
            .current_dir(tmp.path())
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
            )
            .env("HOME", tmp.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("JOB_COMPLETION_INDEX", index)
            .output()
            .expect("sh run.sh")
    };
    let out = pod("0");
    assert!(out.status.success(), "{}", text(&out));
    let args: Vec<String> = String::from_utf8(std::fs::read(&record).expect("loopd ran"))
        .expect("UTF-8")
        .split_terminator('\0')
        .map(str::to_owned)
        .collect();
    let id = args[2].clone();
    let checkout = volume.join("checkouts").join(&id);
    assert_eq!(
        args,
        [
            "run",
            "--job-id",
            &id,
            "-C",
            &checkout.display().to_string(),
            "--state-dir",
            &volume.join("state").display().to_string(),
            "--credential-file",
            &secrets.display().to_string(),
            "--task",
            hostile,
            "--goal",
            hostile,
        ]
    );
    assert_eq!(
        std::fs::read_to_string(checkout.join("README")).expect("cloned"),
        "feature\n",
        "at its ref"
    );
    assert_eq!(
        std::fs::read_to_string(format!("{}.cwd", record.display()))
            .expect("cwd")
            .trim(),
        checkout.display().to_string()
    );
    assert!(
        !tmp.path().join("pwned").exists()
            && !checkout.join("pwned").exists()
            && !checkout.join("pwned2").exists()
    );

    // A retried pod keeps the checkout as the job left it.
    std::fs::write(checkout.join("work-in-progress"), "x").expect("write");
    let out = pod("0");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        checkout.join("work-in-progress").exists(),
        "the checkout was kept"
    );

    // A half clone of job 1 (a pod killed mid-clone) is never used.
    let second = volume.join("checkouts").join(id.replace("-0", "-1"));
    let partial = PathBuf::from(format!("{}.partial", second.display()));
    std::fs::create_dir_all(partial.join("half")).expect("partial");
    let out = pod("1");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(second.join("README")).expect("cloned"),
        "main\n",
        "the default branch"
    );
    assert!(!second.join("half").exists() && !partial.exists());

    let out = pod("2");
    assert_eq!(
        out.status.code(),
        Some(2),
        "an index without a job: {}",
        text(&out)
    );
    let out = pod("");
    assert_eq!(out.status.code(), Some(2), "no index: {}", text(&out));

    // A repository that cannot be cloned is an environment error (5): retried.
    let broken = moved.replace(
        &origin.display().to_string(),
        &tmp.path().join("nowhere").display().to_string(),
    );
    std::fs::remove_dir_all(&volume).expect("clean");
    std::fs::write(&script_file, broken).expect("write");
    let out = pod("1");
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
}

/// The workflow installs every registered agent CLI at the version the
/// suite tests: each agent's pinned package is what the install script
/// installs (`"<name>@$VAR"` with `VAR=<version>`), and the exported
/// workflow's install step names them all.
#[test]
fn the_workflow_pins_the_agent_clis_the_suite_tests() {
    let script = std::fs::read_to_string(manifest_dir().join("scripts/install-test-tools.sh"))
        .expect("install script");
    let packages = loopd::agent::packages();
    assert!(
        packages.len() >= 2,
        "claude and codex are npm packages: {packages:?}"
    );
    for p in &packages {
        let var = script
            .split(&format!("\"{}@$", p.name))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("scripts/install-test-tools.sh installs {}", p.name));
        let pinned = script
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{var}=")))
            .unwrap_or_else(|| panic!("{var}= in scripts/install-test-tools.sh"));
        assert_eq!(
            pinned, p.version,
            "{} in the install script and in the agent's module",
            p.name
        );
    }
    let installs = loopd::export::github_actions::agent_packages();
    let words: Vec<&str> = installs.split(' ').collect();
    for name in ["@anthropic-ai/claude-code", "@openai/codex"] {
        let pinned = packages
            .iter()
            .find(|p| p.name == name)
            .expect(name)
            .to_string();
        assert!(
            words.contains(&pinned.as_str()),
            "the workflow installs {pinned}: {installs}"
        );
    }
    assert_eq!(words.len(), packages.len(), "{installs}");
}

/// What the Job controller does with a pod that ended: the generated
/// `podFailurePolicy` and `backoffLimitPerIndex` read as Kubernetes reads
/// them (rules in order, the first match acts; no match counts).
struct Controller {
    rules: Vec<Value>,
    backoff_limit_per_index: u64,
}

#[derive(Debug, PartialEq)]
enum Verdict {
    Succeeded,
    Failed,
    Again,
}

impl Controller {
    fn of(job: &Value) -> Controller {
        let spec = &job["spec"];
        Controller {
            rules: spec["podFailurePolicy"]["rules"]
                .as_array()
                .expect("podFailurePolicy rules")
                .clone(),
            backoff_limit_per_index: spec["backoffLimitPerIndex"]
                .as_u64()
                .expect("backoffLimitPerIndex"),
        }
    }

    /// After a pod of the index ended with `code` (128 + n when a signal
    /// killed it), `disrupted` when the node evicted or drained it;
    /// `failures` counts the index's counted failures so far.
    fn decide(&self, code: i64, disrupted: bool, failures: &mut u64) -> Verdict {
        if code == 0 {
            return Verdict::Succeeded;
        }
        let matched = self.rules.iter().find(|r| {
            if let Some(on) = r.get("onExitCodes") {
                let values: Vec<i64> = on["values"]
                    .as_array()
                    .expect("values")
                    .iter()
                    .map(|v| v.as_i64().expect("an exit code"))
                    .collect();
                let hit = values.contains(&code);
                match on["operator"].as_str() {
                    Some("In") => hit,
                    Some("NotIn") => !hit,
                    other => panic!("operator {other:?}"),
                }
            } else {
                disrupted
                    && r["onPodConditions"]
                        .as_array()
                        .expect("onPodConditions")
                        .iter()
                        .any(|c| c["type"] == "DisruptionTarget")
            }
        });
        match matched.map(|r| r["action"].as_str().expect("action")) {
            Some("FailIndex") | Some("FailJob") => Verdict::Failed,
            Some("Ignore") => Verdict::Again,
            Some("Count") | None => {
                *failures += 1;
                if *failures > self.backoff_limit_per_index {
                    Verdict::Failed
                } else {
                    Verdict::Again
                }
            }
            Some(other) => panic!("action {other}"),
        }
    }
}

/// One index of an exported Job, played on this machine: the pod is the
/// exported script, run with the volume and the Secret's mount moved into a
/// temp dir, the real `loopd` on PATH and the scripted model upstream.
struct Index {
    env: crate::support::TestEnv,
    script: PathBuf,
    volume: PathBuf,
    controller: Controller,
    id: String,
}

impl Index {
    fn export(env: crate::support::TestEnv, job: &str) -> Index {
        let dir = env.tmp.path().join("export");
        std::fs::create_dir_all(&dir).expect("dir");
        let jobs = format!(
            "[[job]]\nrepo = {}\n{job}",
            toml::Value::String(env.repo.display().to_string())
        );
        export(
            &dir,
            "kubernetes",
            "jobs.toml",
            &jobs,
            &["--backoff-limit-per-index", "2"],
        );
        let manifest = dir.join("kubernetes.yaml");
        let docs = yaml_docs(&manifest);
        let job = docs.iter().find(|d| d["kind"] == "Job").expect("a Job");
        let volume = env.tmp.path().join("volume");
        let secrets = env.tmp.path().join("secrets");
        std::fs::create_dir_all(&secrets).expect("secrets");
        std::fs::write(secrets.join("ANTHROPIC_API_KEY"), crate::support::API_KEY).expect("key");
        let script = docs[0]["data"]["run.sh"]
            .as_str()
            .expect("script")
            .replacen(
                "volume=/var/lib/loopd\n",
                &format!("volume='{}'\n", volume.display()),
                1,
            )
            .replacen(
                "credentials=/var/run/secrets/loopd\n",
                &format!("credentials='{}'\n", secrets.display()),
                1,
            );
        let path = env.tmp.path().join("run.sh");
        std::fs::write(&path, script).expect("script");
        let bin = env.tmp.path().join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        std::os::unix::fs::symlink(loopd_bin(), bin.join("loopd")).expect("loopd on PATH");
        Index {
            id: kubernetes_ids(&manifest)[0].clone(),
            controller: Controller::of(job),
            env,
            script: path,
            volume,
        }
    }

    /// The pod's command, as the kubelet starts it.
    fn pod(&self, model: &ScriptedModel, vars: &[(&str, &str)]) -> Command {
        let mut path = std::ffi::OsString::from(self.env.tmp.path().join("bin"));
        path.push(":");
        path.push(crate::support::tools_path());
        let mut cmd = self.env.loopd(Some(model));
        cmd.env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("LOOPD_STATE_DIR")
            .env("PATH", path)
            .env("JOB_COMPLETION_INDEX", "0")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        // `env.loopd` built the environment from a clear one; the pod runs
        // the script in exactly that.
        let mut sh = Command::new("sh");
        sh.arg(&self.script).env_clear();
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                sh.env(k, v);
            }
        }
        sh
    }

    /// The pod's exit as the kubelet reports it (128 + n for signal n).
    fn exit_code(status: std::process::ExitStatus) -> i64 {
        use std::os::unix::process::ExitStatusExt;
        status
            .code()
            .map(i64::from)
            .unwrap_or_else(|| 128 + i64::from(status.signal().expect("a signal")))
    }

    fn run_dir(&self) -> PathBuf {
        self.volume.join("state/runs").join(&self.id)
    }

    fn billed(&self) -> (f64, u64, u64) {
        crate::support::billed(&self.run_dir())
    }

    fn summary(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.run_dir().join("summary.json")).expect("summary.json"),
        )
        .expect("json")
    }
}

use crate::support::model::{Role, ScriptedModel};
use crate::support::{
    agent_writes, clean_solution, fail, pass, scenario, session, stalled, turn, write,
};

/// The exported Job, played by a Job controller on this machine: each
/// index's pod is started again exactly when the generated policy says
/// so, and what a restarted job ends with — outcome, spend, model calls —
/// is what an uninterrupted one ends with. `kill -9` at a crash point (exit
/// 137, counted) and a failed API call (exit 5, counted) are retried and
/// continue; an eviction (exit 4 with `DisruptionTarget`) is retried
/// without counting; a job that decided — exhausted (1), a configuration
/// error (2), a guard (3), nothing to fix (7) — fails its index on its
/// first pod; a failure past `backoffLimitPerIndex` fails it. Needs a human
/// (6) is held to `FailIndex` by the policy's unit test.
#[test]
fn the_job_controller_retries_exactly_what_loopd_run_continues() {
    let accepted = |job: &Index| {
        let s = job.summary();
        (
            s["outcome"].as_str().expect("outcome").to_owned(),
            job.billed(),
        )
    };
    let job_toml = "task = \"Make python3 -m pytest and ruff check . pass.\"\ngoal = [\"python3 -m pytest -q\", \"ruff check .\"]\n";
    let play =
        |index: &Index, model: &ScriptedModel, pods: &[&[(&str, &str)]]| -> (Verdict, usize) {
            let mut failures = 0;
            for (n, vars) in pods.iter().enumerate() {
                let out = index.pod(model, vars).output().expect("the pod");
                let code = Index::exit_code(out.status);
                match index.controller.decide(code, false, &mut failures) {
                    Verdict::Again => continue,
                    v => return (v, n + 1),
                }
            }
            (Verdict::Again, pods.len())
        };

    // The reference: one pod, accepted.
    let reference = Index::export(crate::support::TestEnv::scripted(), job_toml);
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    assert_eq!(play(&reference, &model, &[&[]]), (Verdict::Succeeded, 1));
    let expected = accepted(&reference);
    assert_eq!(expected.0, "accepted");

    // `kill -9` at a session boundary and at the summary: counted, retried,
    // and the retry ends as the uninterrupted run did, billed once.
    for point in [
        "journal:session_finished#1",
        "journal:goal_run#1",
        "summary:written#1",
    ] {
        let index = Index::export(crate::support::TestEnv::scripted(), job_toml);
        let model = ScriptedModel::start(scenario(
            vec![agent_writes(&clean_solution())],
            vec![pass()],
        ));
        let crash: &[(&str, &str)] = &[("LOOPD_CRASH_AT", point)];
        assert_eq!(
            play(&index, &model, &[crash, &[]]),
            (Verdict::Succeeded, 2),
            "{point}"
        );
        assert_eq!(accepted(&index), expected, "after kill -9 at {point}");
        assert_eq!(
            (
                model.session_count(Role::Agent),
                model.session_count(Role::Critic)
            ),
            (1, 1),
            "each session reached the model once ({point})"
        );
    }

    // A failed API call: exit 5, counted; the next pod continues the job.
    let index = Index::export(crate::support::TestEnv::scripted(), job_toml);
    let broken = crate::support::model::Turn {
        error: Some(crate::support::model::HttpError {
            status: 400,
            message: "mock bad request".into(),
        }),
        ..Default::default()
    };
    let model = ScriptedModel::start(scenario(
        vec![session(vec![broken]), agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let first = index.pod(&model, &[]).output().expect("pod");
    assert_eq!(
        Index::exit_code(first.status),
        5,
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let mut failures = 0;
    assert_eq!(
        index.controller.decide(5, false, &mut failures),
        Verdict::Again
    );
    assert_eq!(failures, 1, "an environment failure counts");
    let second = index.pod(&model, &[]).output().expect("pod");
    assert_eq!(
        Index::exit_code(second.status),
        0,
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(index.summary()["outcome"], "accepted");

    // An eviction: SIGTERM, exit 4, the DisruptionTarget condition — not
    // counted; the next pod continues with the work the first one parked.
    let index = Index::export(crate::support::TestEnv::scripted(), job_toml);
    let partial = fixture_text().replace("quantity + unit_price", "quantity * unit_price");
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![write("rechnung.py", &partial)]),
                stalled(120_000),
            ]),
            agent_writes(&clean_solution()),
        ],
        vec![pass()],
    ));
    let pod = index
        .pod(&model, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pod");
    crate::support::wait_for_requests(&model, 0, 2);
    // The kubelet signals the container's first process: the script has
    // `exec`ed loopd, so that is loopd.
    crate::support::send_signal(pod.id(), libc::SIGTERM);
    let out = pod.wait_with_output().expect("pod");
    let code = Index::exit_code(out.status);
    assert_eq!(code, 4, "{}", String::from_utf8_lossy(&out.stderr));
    let mut failures = 0;
    assert_eq!(
        index.controller.decide(code, true, &mut failures),
        Verdict::Again
    );
    assert_eq!(failures, 0, "an eviction is not the job's failure");
    assert_eq!(play(&index, &model, &[&[]]), (Verdict::Succeeded, 1));
    assert_eq!(index.summary()["outcome"], "accepted");
    assert_eq!(
        index.summary()["attempts"]
            .as_array()
            .expect("attempts")
            .len(),
        2
    );

    // A job that decided: exhausted (exit 1) fails the index at once — a
    // second pod would only print the same summary.
    let index = Index::export(
        crate::support::TestEnv::scripted(),
        &format!("{job_toml}max_attempts = 1\n"),
    );
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![fail(1, "rechnung.py", "the change is wrong", "do it right")],
    ));
    assert_eq!(play(&index, &model, &[&[], &[]]), (Verdict::Failed, 1));
    assert_eq!(index.summary()["outcome"], "exhausted");

    // The other endings a job decides fail the index on the first pod:
    // a configuration error (2), a guard (3: a budget that cannot cover one
    // call), nothing to fix (7: the goal is green already).
    for (job, code) in [
        (format!("{job_toml}rubric = \"no-such-rubric.toml\"\n"), 2),
        (format!("{job_toml}budget_usd = 0.000001\n"), 3),
        (
            "task = \"Keep it green.\"\ngoal = [\"true\"]\n".to_owned(),
            7,
        ),
    ] {
        let index = Index::export(crate::support::TestEnv::scripted(), &job);
        let model = ScriptedModel::start(scenario(vec![], vec![]));
        let out = index.pod(&model, &[]).output().expect("pod");
        assert_eq!(
            Index::exit_code(out.status),
            code,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            play(&index, &model, &[&[], &[]]),
            (Verdict::Failed, 1),
            "exit {code}"
        );
        assert!(
            model.requests().is_empty(),
            "exit {code}: nothing reached the model"
        );
    }

    // Past backoffLimitPerIndex (2): the third counted failure fails it.
    let index = Index::export(crate::support::TestEnv::scripted(), job_toml);
    let mut failures = 0;
    let verdicts: Vec<Verdict> = [137, 5, 137]
        .iter()
        .map(|c| index.controller.decide(*c, false, &mut failures))
        .collect();
    assert_eq!(verdicts, [Verdict::Again, Verdict::Again, Verdict::Failed]);
}

fn fixture_text() -> String {
    crate::support::fixture("rechnung/repo/rechnung.py")
}

/// What the attack on `loopd export` found, each refused: `-o` over a file
/// it did not write (a user's file, the jobs file itself, a link, a FIFO),
/// a jobs file that is a FIFO (refused at once, never waited on), and a
/// file name that would end the header's comment (U+2028) and inject YAML.
#[test]
fn export_never_overwrites_a_file_it_did_not_write_nor_waits_on_a_fifo() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let jobs = tmp.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nrepo = \"/srv/repo\"\ntask = \"t\"\ngoal = [\"true\"]\n",
    )
    .expect("jobs");
    let run = |out: &Path| {
        loopd(&[
            "export",
            "kubernetes",
            "--jobs",
            jobs.to_str().expect("UTF-8"),
            "-o",
            out.to_str().expect("UTF-8"),
        ])
    };
    let mine = tmp.path().join("notes.txt");
    std::fs::write(&mine, "mine\n").expect("write");
    let fifo = tmp.path().join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo on a NUL-terminated path of this test.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let link = tmp.path().join("link.yaml");
    std::os::unix::fs::symlink(&mine, &link).expect("link");
    for target in [&mine, &jobs, &fifo, &link] {
        let out = run(target);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: {}",
            target.display(),
            text(&out)
        );
        assert!(
            text(&out).contains("refusing to overwrite"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(std::fs::read_to_string(&mine).expect("mine"), "mine\n");
    assert!(std::fs::read_to_string(&jobs)
        .expect("jobs")
        .starts_with("[[job]]"));
    assert!(std::fs::symlink_metadata(&link)
        .expect("link")
        .file_type()
        .is_symlink());
    // Its own output it writes, and writes again.
    let manifest = tmp.path().join("k.yaml");
    assert!(run(&manifest).status.success());
    let again = run(&manifest);
    assert!(again.status.success(), "{}", text(&again));

    // A FIFO as the jobs file: an error at once, not a hang.
    let started = std::time::Instant::now();
    let out = loopd(&[
        "export",
        "kubernetes",
        "--jobs",
        fifo.to_str().expect("UTF-8"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "waited on the FIFO"
    );

    // A file name with a line separator stays inside the header's comment.
    let odd = tmp
        .path()
        .join("p\u{2028}{kind: Pod, metadata: {name: pwn}}\u{2028}#.toml");
    std::fs::copy(&jobs, &odd).expect("copy");
    let out_file = tmp.path().join("odd.yaml");
    let out = loopd(&[
        "export",
        "kubernetes",
        "--jobs",
        odd.to_str().expect("UTF-8"),
        "-o",
        out_file.to_str().expect("UTF-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let kinds: Vec<String> = yaml_docs(&out_file)
        .iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Job"], "no document was injected");
}
