//! Property tests of everything loopd parses that an agent process can
//! influence (issue 20): the gateway's request target, headers, request
//! bodies and SSE usage; the hook's input and the policy's decision on it;
//! the CLI's stream events; verdicts; escalations; job files; journals.
//!
//! Each property runs `LOOPD_FUZZ_CASES` cases (the suite: a short run; the
//! long run is `scripts/fuzz.sh`, a million cases per parser). The
//! properties: no panic, no hang (every case is bounded work), memory
//! bounded (the meter keeps at most its line limit), and what the gateway
//! forwards is exactly what it checked.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use loopd::agent::claude::wire::{Anthropic, MessagesMeter};
use loopd::agent::gateway::channel::{EscalationRequest, HookInput};
use loopd::agent::gateway::json::top_level_value;
use loopd::agent::gateway::target::{route, LOOPD_ENDPOINTS};
use loopd::agent::gateway::{Credential, Meter, Wire};

fn cases() -> u32 {
    std::env::var("LOOPD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Bytes that look like what a parser expects more often than random
/// bytes do: fragments of its own grammar, glued with noise.
fn fragments(words: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(words).prop_map(|w| w.as_bytes().to_vec()),
            1 => prop::collection::vec(any::<u8>(), 0..8),
        ],
        0..48,
    )
    .prop_map(|parts| parts.concat())
}

const JSON: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "\\u005f",
    "\\u0000",
    "\\ud800",
    " ",
    "\n",
    "0",
    "1",
    "-1",
    "1e5",
    "1.0",
    "18446744073709551616",
    "true",
    "null",
    "\"model\"",
    "\"max_tokens\"",
    "\"max\\u005ftokens\"",
    "\"tools\"",
    "\"type\"",
    "\"web_search_20250305\"",
    "\"custom\"",
    "\"mcp_servers\"",
    "\"container\"",
    "\"thinking\"",
    "\"budget_tokens\"",
    "\"messages\"",
    "\"claude-opus-5-5\"",
    "\"stream\"",
    "\"usage\"",
    "\"input_tokens\"",
    "\"output_tokens\"",
    "\"message_start\"",
    "\"message_delta\"",
    "\"message_stop\"",
    "\"message\"",
    "\"id\"",
];

#[test]
fn request_targets_route_exactly() {
    const T: &[&str] = &[
        "/",
        "v1",
        "messages",
        "count_tokens",
        ".",
        "..",
        "%2F",
        "%2e",
        "?",
        "&",
        "=",
        "beta",
        "true",
        "#",
        ";",
        "loopd",
        "hook",
        "pre-tool-use",
        "escalate",
        "http://h",
        ":80",
        "*",
        "//",
        "%00",
        "V1",
    ];
    let endpoints: Vec<_> = loopd::agent::claude::wire::ENDPOINTS
        .iter()
        .chain(LOOPD_ENDPOINTS)
        .copied()
        .collect();
    const METHODS: &[&str] = &["GET", "POST", "HEAD", "PUT", "OPTIONS", "CONNECT", "post"];
    runner()
        .run(
            &(fragments(T), prop::sample::select(METHODS)),
            |(bytes, method)| {
                let text = String::from_utf8_lossy(&bytes);
                let Ok(uri) = text.parse::<hyper::Uri>() else {
                    return Ok(());
                };
                let Ok(m) = hyper::Method::from_bytes(method.as_bytes()) else {
                    return Ok(());
                };
                if let Ok((e, query)) = route(&m, &uri, &endpoints) {
                    // Served only as exactly listed: this path, this
                    // method, a listed query.
                    prop_assert_eq!(uri.path(), e.path);
                    prop_assert_eq!(m.as_str(), e.method);
                    prop_assert!(uri.scheme().is_none() && uri.authority().is_none());
                    let q = query.as_deref().unwrap_or("");
                    prop_assert!(e.queries.contains(&q) && query.as_deref() != Some(""));
                    prop_assert_eq!(e.upstream(query.as_deref()), uri.to_string());
                }
                Ok(())
            },
        )
        .expect("routing");
}

#[test]
fn upstream_headers_carry_the_real_credential_and_nothing_else() {
    const NAMES: &[&str] = &[
        "x-api-key",
        "authorization",
        "anthropic-beta",
        "anthropic-version",
        "host",
        "cookie",
        "x-forwarded-for",
        "proxy-authorization",
        "x-stainless-os",
        "content-type",
        "transfer-encoding",
        "x-claude-code-session-id",
        "X-Api-Key",
        "connection",
    ];
    runner()
        .run(
            &prop::collection::vec(
                (
                    prop::sample::select(NAMES),
                    prop::collection::vec(32u8..127, 0..40),
                ),
                0..12,
            ),
            |headers| {
                let mut map = hyper::HeaderMap::new();
                for (name, value) in headers {
                    if let (Ok(n), Ok(v)) = (
                        hyper::header::HeaderName::from_bytes(name.as_bytes()),
                        hyper::header::HeaderValue::from_bytes(&value),
                    ) {
                        map.append(n, v);
                    }
                }
                for cred in [
                    Credential::ApiKey("sk-real".into()),
                    Credential::OAuth("oat-real".into()),
                ] {
                    let out = Anthropic.upstream_headers(&map, &cred);
                    for (name, _) in out.iter() {
                        prop_assert!(
                            [
                                "x-api-key",
                                "authorization",
                                "anthropic-beta",
                                "anthropic-version",
                                "content-type",
                                "accept",
                                "user-agent",
                                "x-app",
                                "x-claude-code-session-id",
                            ]
                            .contains(&name.as_str())
                                || name.as_str().starts_with("x-stainless-"),
                            "{} forwarded",
                            name
                        );
                    }
                    match &cred {
                        Credential::ApiKey(_) => {
                            prop_assert_eq!(out.get_all("x-api-key").iter().count(), 1);
                            prop_assert_eq!(&out["x-api-key"], "sk-real");
                            prop_assert!(out.get("authorization").is_none());
                        }
                        Credential::OAuth(_) => {
                            prop_assert_eq!(out.get_all("authorization").iter().count(), 1);
                            prop_assert_eq!(&out["authorization"], "Bearer oat-real");
                            prop_assert!(out.get("x-api-key").is_none());
                        }
                        Credential::Bearer(_) => prop_assert!(false, "not generated"),
                    }
                }
                Ok(())
            },
        )
        .expect("headers");
}

#[test]
fn request_bodies_are_read_and_clamped_exactly() {
    runner()
        .run(&(fragments(JSON), 1u64..200_000), |(body, n)| {
            let asked = Anthropic.ask(&body);
            let _ = Anthropic.min_output(&body);
            let _ = top_level_value(&body, "max_tokens");
            if let Some(out) = Anthropic.with_max_tokens(&body, n) {
                // What goes upstream asks for exactly the granted bound, and
                // differs from the original in that one value only.
                let again = Anthropic.ask(&out).expect("a rewritten body reads back");
                prop_assert_eq!(again.max_tokens, n);
                let before = asked.expect("a rewritable body read");
                prop_assert_eq!(again.model, before.model);
            }
            Ok(())
        })
        .expect("bodies");
}

#[test]
fn a_valid_body_always_rewrites() {
    runner()
        .run(
            &(
                "[a-z0-9-]{1,20}",
                1u64..1_000_000,
                1u64..1_000_000,
                any::<bool>(),
                "[ \n\t]{0,3}",
            ),
            |(model, max, n, stream, ws)| {
                let body = format!(
                    "{{{ws}\"model\"{ws}:{ws}\"{model}\",{ws}\"messages\":[{{\"role\":\"user\",\"content\":\"max_tokens {max}\"}}],\"max_tokens\"{ws}:{ws}{max}{ws},\"stream\":{stream}}}"
                );
                let out = Anthropic
                    .with_max_tokens(body.as_bytes(), n)
                    .expect("a valid body rewrites");
                prop_assert_eq!(Anthropic.ask(&out).expect("reads").max_tokens, n);
                Ok(())
            },
        )
        .expect("valid bodies");
}

#[test]
fn sse_usage_is_read_in_bounded_memory() {
    const SSE: &[&str] = &[
        "event: message_start\n",
        "event: message_delta\n",
        "event: content_block_delta\n",
        "data: ",
        "\n",
        "\r\n",
        "\n\n",
        r#"{"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":5}}}"#,
        r#"{"type":"message_delta","usage":{"output_tokens":9}}"#,
        r#"{"type":"message_stop"}"#,
        r#"{"type":"content_block_delta","delta":{"text":"\"message_delta\""}}"#,
        "usage",
        ":",
    ];
    runner()
        .run(
            &(prop::collection::vec(fragments(SSE), 0..8), any::<bool>()),
            |(chunks, streaming)| {
                let mut m = MessagesMeter::new(streaming, "req".into());
                for c in &chunks {
                    m.feed(c);
                }
                let r = m.reading();
                prop_assert!(!r.complete || r.started || !streaming);
                Ok(())
            },
        )
        .expect("sse");
}

#[test]
fn stream_events_verdicts_escalations_and_hook_input_parse_without_panic() {
    const EV: &[&str] = &[
        r#"{"type":"#,
        r#""system""#,
        r#""assistant""#,
        r#""user""#,
        r#""result""#,
        r#""stream_event""#,
        r#","message":{"content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]}"#,
        r#","event":{"type":"message_start","message":{"id":"m","model":"x","usage":{}}}"#,
        r#","structured_output":{"verdict":"PASS","violations":[]}"#,
        r#","subtype":"success""#,
        r#","tool_name":"Write","tool_input":{"file_path":"/x/tests/t.py","content":"y"}"#,
        r#","session_id":"s""#,
        r#""test":"t","reason":"r""#,
        r#""type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'ls'","exit_code":0}"#,
        r#""type":"item.started","item":{"id":"item_2","type":"file_change","changes":[{"path":"a","kind":"add"}]}"#,
        r#""type":"item.completed","item":{"type":"agent_message","text":"{\"verdict\":\"PASS\",\"violations\":[]}"}"#,
        r#""type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":9,"output_tokens":1}"#,
        r#""type":"turn.failed","error":{"message":"x"}"#,
        "}",
        "{",
        "\"",
        ",",
    ];
    runner()
        .run(&fragments(EV), |bytes| {
            let text = String::from_utf8_lossy(&bytes);
            for agent in loopd::agent::AGENTS {
                let mut out = Vec::new();
                let _ = agent.parser().line(&text, &mut out);
                for event in out {
                    if let loopd::agent::events::Event::Result(r) = event {
                        let _ = loopd::critic::read_verdict(Some(&r));
                    }
                }
            }
            if let Ok(req) = serde_json::from_slice::<EscalationRequest>(&bytes) {
                let _ = req.check();
            }
            let _ = serde_json::from_slice::<HookInput>(&bytes);
            let _ = loopd::journal::parse(&text);
            let _ = loopd::daemon::spool::parse_job(&text, "20261201-000000000-abcd");
            Ok(())
        })
        .expect("events");
}

#[test]
fn the_policy_decides_any_tool_call_without_panic() {
    const CMD: &[&str] = &[
        "echo x > tests/test_rechnung.py",
        "rm -rf ",
        "tests/",
        " && ",
        " ; ",
        "$(",
        ")",
        "`",
        "'",
        "\"",
        "git ",
        "update-ref ",
        "commit",
        "--amend",
        "cp ",
        "mv ",
        "ln -s ",
        "/proc/self/cwd/",
        "../",
        "python3 -c '",
        "open(",
        "sed -i ",
        "cat <<EOF\n",
        "EOF\n",
        "tee ",
        "loopd.toml",
        ".git/",
        "\\",
        "*",
        "~",
        "\n",
        "|",
        "&",
        ">>",
        "2>&1",
    ];
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(root.join("tests")).expect("tests");
    let policy = loopd::judges::tamper::Policy {
        repo: root.clone(),
        base_ref: "0".repeat(40),
        files: [(
            "tests/test_rechnung.py".to_owned(),
            "a test at BASE_REF".to_owned(),
        )]
        .into(),
        patterns: vec![("**/pytest.ini".into(), "test-runner configuration".into())],
        outside: Default::default(),
        skip_markers: vec![r"pytest\.mark\.skip".into()],
        git_dirs: vec![root.join(".git")],
        allow_submodules: false,
        append_only: false,
        allow: vec![],
    };
    let compiled = policy.compile().expect("compile");
    const TOOLS: &[&str] = &[
        "Bash",
        "Write",
        "Edit",
        "MultiEdit",
        "NotebookEdit",
        "Read",
        "exec_command",
        "apply_patch",
    ];
    runner()
        .run(
            &(fragments(CMD), prop::sample::select(TOOLS)),
            |(bytes, tool)| {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let input = serde_json::json!({"command": s, "file_path": format!("{}/{s}", root.display()),
                    "content": s, "edits": [{"old_string": s, "new_string": s}]});
                                for agent in loopd::agent::AGENTS {
                    let call = agent.tool_call("t".into(), tool.to_owned(), input.clone());
                    let _ = compiled.check_tool(&call, Path::new(&root));
                }
                Ok(())
            },
        )
        .expect("policy");
}
