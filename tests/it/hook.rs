//! The guard as a standalone Claude Code hook (`hooks/settings.json`), in a
//! session loopd does not run: the real CLI, the shipped settings file.

use std::process::Command;

use serde_json::json;

use crate::support::model::{Role, ScriptedModel};
use crate::support::*;

#[test]
fn the_shipped_hook_settings_protect_tests_in_a_plain_claude_session() {
    let env = TestEnv::new();
    let loopd_dir = std::path::Path::new(env!("CARGO_BIN_EXE_loopd"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let mut path = std::env::split_paths(&tools_path()).collect::<Vec<_>>();
    path.insert(0, loopd_dir);
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![read("tests/test_rechnung.py"), read("rechnung.py")]),
            turn(vec![tool(
                "Edit",
                json!({"file_path": "{cwd}/tests/test_rechnung.py", "old_string": "Decimal(\"7.50\")", "new_string": "Decimal(\"5.50\")"}),
            )]),
            turn(vec![tool(
                "Edit",
                json!({"file_path": "{cwd}/rechnung.py", "old_string": "import os\n", "new_string": ""}),
            )]),
            turn(vec![text("Done.")]),
        ])],
        vec![],
    ));
    let out = Command::new("claude")
        .args([
            "-p",
            "--output-format",
            "json",
            "--setting-sources",
            "",
            "--no-session-persistence",
            "--permission-mode",
            "acceptEdits",
            "--settings",
        ])
        .arg(manifest_dir().join("hooks/settings.json"))
        .args(["--", "fix the tests"])
        .current_dir(&env.repo)
        .env_clear()
        .env("PATH", std::env::join_paths(path).expect("PATH"))
        .env("HOME", &env.home)
        .env("ANTHROPIC_BASE_URL", model.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run claude");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        env.read_repo("tests/test_rechnung.py"),
        fixture("rechnung/repo/tests/test_rechnung.py"),
        "the test edit was denied"
    );
    assert!(
        !env.read_repo("rechnung.py").contains("import os"),
        "the code edit went through"
    );
    let after_denial = model.session(Role::Agent, 0)[2].body.to_string();
    assert!(
        after_denial.contains(
            "loopd: `tests/test_rechnung.py` is protected (a test that exists at BASE_REF)"
        ),
        "the agent was told why: {after_denial}"
    );
}

#[test]
fn check_warns_about_a_test_step_without_a_report() {
    let env = TestEnv::new();
    let r = finish(
        env.loopd(None)
            .args(["check", "--goal", "make test"])
            .output()
            .expect("loopd"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("goal step `make test` seems to run tests but has no `report`"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("hint:"));
}
