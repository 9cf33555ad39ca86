//! The metering gateway (issue 11): the real CLI talks to loopd's gateway,
//! the scripted model is the upstream. The credential reaches the upstream
//! and nothing the agent can read; every call is metered at the wire and
//! billed exactly; a nested `claude -p` is metered and capped like the
//! agent; no credential stops `loopd run` before anything runs.

use serde_json::Value;

use crate::support::model::{Role, ScriptedModel, Turn, Usage};
use crate::support::*;

fn metered_calls(summary: &Value) -> Vec<loopd::agent::gateway::MeteredCall> {
    journal(summary)
        .into_iter()
        .filter_map(|e| match e {
            loopd::journal::Event::MeteredCall(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn assert_nowhere(env: &TestEnv, model: &ScriptedModel, secret: &str) {
    assert!(
        !all_bodies(model).contains(secret),
        "the secret reached a model request body"
    );
    env.assert_no_secret_in_state(&[secret]);
}

/// (a) The agent's Bash tries every route to a credential: its
/// environment, every process's environment and command line, `ps`, the
/// settings file and the state dir. Neither the API key nor an OAuth token
/// set beside it shows up in any output or any request the model sees.
#[test]
fn the_agent_reaches_no_credential_by_any_route() {
    let env = TestEnv::new();
    let key = unique_secret("key");
    let oauth = unique_secret("oauth");
    let state = env.state.display().to_string();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash("env; echo MARK-$((40+2))-env")]),
            turn(vec![bash(
                "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a -E '^(ANTHROPIC|CLAUDE_CODE_OAUTH)'; echo MARK-$((40+2))-environ",
            )]),
            turn(vec![bash(
                "cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -a -o -E 'sk-ant-[A-Za-z0-9_-]+'; echo MARK-$((40+2))-cmdline",
            )]),
            turn(vec![bash(
                "ps auxe | grep -a -o -E '(ANTHROPIC|CLAUDE_CODE_OAUTH)[A-Z_]*=[^ ]*'; echo MARK-$((40+2))-ps",
            )]),
            turn(vec![bash(&format!(
                "cat {state}/runs/*/settings.json; grep -r -a -o -E 'sk-ant-[A-Za-z0-9_-]+' {state}; echo MARK-$((40+2))-state"
            ))]),
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let out = env
        .loopd(Some(&model))
        .env("ANTHROPIC_API_KEY", &key)
        .env("CLAUDE_CODE_OAUTH_TOKEN", &oauth)
        .args(["run", "--json", "--allowed-tools", "Read,Write,Bash"])
        .output()
        .expect("run loopd");
    let r = finish(out);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let bodies = all_bodies(&model);
    // The routes were really tried: their output reached the model.
    assert_contains_all(
        &bodies,
        // (a sum only a shell that ran the command prints: the command's
        // own text is repeated in later requests)
        &[
            "MARK-42-env",
            "MARK-42-environ",
            "MARK-42-cmdline",
            "MARK-42-ps",
            "MARK-42-state",
        ],
        "the agent's requests",
    );
    // The session's credential is the gateway's token...
    assert!(
        bodies.contains("ANTHROPIC_API_KEY=loopd-session-"),
        "the env output shows the session token"
    );
    // ...and the real key went upstream, on every request.
    assert!(model
        .requests()
        .iter()
        .all(|q| q.x_api_key.as_deref() == Some(key.as_str())));
    for secret in [&key, &oauth] {
        assert_nowhere(&env, &model, secret);
        assert!(!r.stdout.contains(secret.as_str()) && !r.stderr.contains(secret.as_str()));
    }
}

/// (c) A subscription token in `CLAUDE_CODE_OAUTH_TOKEN` reaches the
/// upstream as a bearer token with the OAuth beta flag, never as an API key
/// and never in the agent's environment.
#[test]
fn an_oauth_token_goes_upstream_as_a_bearer_and_nowhere_else() {
    let env = TestEnv::new();
    let token = unique_secret("oat");
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash("env")]),
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let out = env
        .loopd(Some(&model))
        .env_remove("ANTHROPIC_API_KEY")
        .env("CLAUDE_CODE_OAUTH_TOKEN", &token)
        .args(["run", "--json", "--allowed-tools", "Read,Write,Bash(env)"])
        .output()
        .expect("run loopd");
    let r = finish(out);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let requests = model.requests();
    assert_eq!(requests.len(), 5, "four agent calls and one critic call");
    for q in &requests {
        assert_eq!(
            q.authorization.as_deref(),
            Some(format!("Bearer {token}").as_str())
        );
        assert_eq!(q.x_api_key, None, "no API key header next to the bearer");
        assert!(
            q.anthropic_beta
                .as_deref()
                .is_some_and(|b| b.split(',').any(|f| f == "oauth-2025-04-20")),
            "{:?}",
            q.anthropic_beta
        );
    }
    let bodies = all_bodies(&model);
    assert!(bodies.contains("ANTHROPIC_API_KEY=loopd-session-"));
    assert!(!bodies.contains("CLAUDE_CODE_OAUTH_TOKEN="));
    assert_nowhere(&env, &model, &token);
}

fn cached(
    input: u64,
    output: u64,
    writes: u64,
    reads: u64,
    blocks: Vec<crate::support::model::Block>,
) -> Turn {
    Turn {
        blocks,
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: writes,
            cache_read_input_tokens: reads,
        },
        ..Turn::default()
    }
}

/// (d) The job's totals are the sum of the scripted usage, exactly, cache
/// writes and reads included, and one `metered_call` per model call.
#[test]
fn totals_equal_the_scripted_usage_exactly() {
    let env = TestEnv::new();
    let agent_turns = vec![
        cached(110, 31, 2_000, 0, vec![read("rechnung.py")]),
        cached(
            120,
            452,
            0,
            2_000,
            vec![write("rechnung.py", &clean_solution())],
        ),
        cached(130, 17, 300, 2_300, vec![text("Done.")]),
    ];
    let critic_turn = cached(
        900,
        60,
        4_000,
        7,
        vec![tool(
            "StructuredOutput",
            serde_json::json!({"verdict": "PASS", "violations": []}),
        )],
    );
    let scripted: Vec<(Usage, &str)> = agent_turns
        .iter()
        .map(|t| (t.usage, "haiku"))
        .chain([(critic_turn.usage, "sonnet")])
        .collect();
    let model = ScriptedModel::start(scenario(
        vec![session(agent_turns)],
        vec![session(vec![critic_turn])],
    ));
    let r = env.run(&model, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.summary();
    let input: u64 = scripted
        .iter()
        .map(|(u, _)| u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens)
        .sum();
    let output: u64 = scripted.iter().map(|(u, _)| u.output_tokens).sum();
    assert_eq!(s["totals"]["input_tokens"], input);
    assert_eq!(s["totals"]["output_tokens"], output);
    let usd: f64 = scripted
        .iter()
        .map(|(u, m)| {
            crate::support::price(m).cost(&loopd::agent::events::Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_creation_input_tokens: u.cache_creation_input_tokens,
                cache_read_input_tokens: u.cache_read_input_tokens,
            })
        })
        .sum();
    let total = s["totals"]["cost_usd"].as_f64().expect("cost");
    assert!((total - usd).abs() < 1e-6, "billed {total}, scripted {usd}");
    // One metered call per model call, each with its cache reads and writes.
    let calls = metered_calls(&s);
    assert_eq!(calls.len(), scripted.len());
    let mut got: Vec<(u64, u64, u64, u64)> = calls
        .iter()
        .map(|c| {
            (
                c.input_tokens,
                c.output_tokens,
                c.cache_creation_input_tokens,
                c.cache_read_input_tokens,
            )
        })
        .collect();
    let mut want: Vec<(u64, u64, u64, u64)> = scripted
        .iter()
        .map(|(u, _)| {
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_creation_input_tokens,
                u.cache_read_input_tokens,
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.role == loopd::agent::session::Role::Critic)
            .count(),
        1
    );
    // The sessions' billed spend is the metered one; the CLI's own figure
    // is kept beside it as a cross-check.
    let sessions = finished_sessions(&s);
    let billed: f64 = sessions.iter().map(|f| f.spend.cost_usd).sum();
    assert!((billed - usd).abs() < 1e-9);
    assert!(sessions.iter().all(|f| f.cli_cost_usd.is_some()));
    // `loopd report` shows each session's cache writes and reads.
    let job = s["job_id"].as_str().expect("job_id");
    let report = env.exec(&["report", job]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    assert_contains_all(
        &report.stdout,
        &[
            "Model calls (metered by the gateway)",
            "| 2300 | 4300 |",
            "| 4000 | 7 |",
        ],
        "the report",
    );
}

/// (b) A `claude -p` the agent starts from its Bash (past the hook, through
/// a variable) talks to the same gateway: its call is in the job's totals,
/// and the job's budget refuses its next call before it reaches upstream.
#[test]
fn a_nested_claude_is_metered_and_stopped_by_the_job_budget() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![
            session(vec![
                turn(vec![bash(
                    "C=claude; $C -p 'nested work' </dev/null; echo MARK-$((40+2))-nested",
                )]),
                turn(vec![read("rechnung.py")]),
                turn(vec![write("rechnung.py", &clean_solution())]),
                turn(vec![text("Done.")]),
            ]),
            // The nested session: one expensive call that wants another.
            session(vec![
                cached(50_000, 1_000, 0, 0, vec![bash("echo nested-two")]),
                turn(vec![text("nested done")]),
            ]),
        ],
        vec![pass()],
    ));
    let r = env.run(
        &model,
        &["--allowed-tools", "Read,Write,Bash", "--budget-usd", "0.5"],
    );
    let s = r.summary();
    let calls = metered_calls(&s);
    let nested: Vec<_> = calls.iter().filter(|c| c.input_tokens == 50_000).collect();
    assert_eq!(nested.len(), 1, "the nested call was metered: {calls:?}");
    let total = s["totals"]["cost_usd"].as_f64().expect("cost");
    assert!(
        total >= nested[0].cost_usd && nested[0].cost_usd > 0.2,
        "the nested call's ${} is in the totals (${total})",
        nested[0].cost_usd
    );
    assert!(total <= 0.5 + 1e-12, "never above the cap: {total}");
    // The nested session's second call did not fit beside the first: the
    // gateway refused it before upstream.
    assert_eq!(model.session(Role::Agent, 1).len(), 1);
    assert!(all_bodies(&model).contains("MARK-42-nested"));
}

/// The hook denies starting `claude` from the agent's Bash outright.
#[test]
fn the_hook_denies_starting_claude_from_the_agents_bash() {
    let env = TestEnv::scripted();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn(vec![bash("claude -p 'nested work' </dev/null")]),
            turn(vec![read("rechnung.py")]),
            turn(vec![write("rechnung.py", &clean_solution())]),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &["--allowed-tools", "Read,Write,Bash"]);
    let second = &model.session(Role::Agent, 0)[1];
    assert!(
        second.body.to_string().contains("is not allowed"),
        "the denial reached the model"
    );
    assert_eq!(
        model.session_count(Role::Agent),
        1,
        "no nested session started"
    );
    // A denied tool call rejects the attempt; the job goes on or ends, but
    // never as an agent error.
    assert_ne!(r.summary()["reason"], "agent_error", "{}", r.stderr);
}

/// (e) No credential: exit 5 with the hint, before the baseline runs and
/// before any model call. Bedrock/Vertex modes are refused the same way.
#[test]
fn no_credential_exits_five_before_the_baseline() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![agent_writes(&clean_solution())],
        vec![pass()],
    ));
    let out = env
        .loopd(Some(&model))
        .env_remove("ANTHROPIC_API_KEY")
        .args(["run", "--json"])
        .output()
        .expect("run loopd");
    let r = finish(out);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert_contains_all(
        &r.stderr,
        &["set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN"],
        "stderr",
    );
    assert!(model.requests().is_empty());
    assert!(
        !env.state_files()
            .iter()
            .any(|(p, _)| p.ends_with("baseline.txt") || p.ends_with("ledger.jsonl")),
        "nothing of a job ran"
    );
    let out = env
        .loopd(Some(&model))
        .env("CLAUDE_CODE_USE_BEDROCK", "1")
        .args(["run", "--json"])
        .output()
        .expect("run loopd");
    let r = finish(out);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(r.stderr.contains("CLAUDE_CODE_USE_BEDROCK"), "{}", r.stderr);
    assert!(model.requests().is_empty());
}

/// The gateway's own refusal: a call whose worst case (its request's size
/// in input tokens, as cache writes, and the smallest output bound) does not
/// fit beside what was spent never reaches upstream: the first call
/// ($0.0027 on haiku) leaves too little for the second's reservation
/// (about $0.0076 for the CLI's ~56 KB request), under a cap of $0.0095 —
/// so the job ends with the budget reason, not as an agent error, and
/// under the cap.
#[test]
fn a_call_the_budget_cannot_cover_is_refused_and_ends_the_job_on_budget() {
    let env = TestEnv::new();
    let model = ScriptedModel::start(scenario(
        vec![session(vec![
            turn_usage(vec![read("rechnung.py")], 24_000, 600),
            turn(vec![text("Done.")]),
        ])],
        vec![pass()],
    ));
    let r = env.run(&model, &["--budget-usd", "0.0095"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let s = r.summary();
    assert_eq!(s["reason"], "budget_usd", "{}", r.stderr);
    assert_eq!(
        model.requests().len(),
        1,
        "the second call never reached upstream"
    );
    let agent = finished_sessions(&s)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("an agent session ran: {}", r.stderr));
    let failure = agent.failure.as_ref().expect("the session failed");
    assert_eq!(failure.reason.as_str(), "budget_usd");
    assert!(
        failure.detail.contains("gateway refused"),
        "{}",
        failure.detail
    );
    let total = s["totals"]["cost_usd"].as_f64().expect("cost");
    assert!((total - 0.0027).abs() < 1e-9, "billed {total}");
}

// ---- the gateway in-process: the wire's edges (issue 20) --------------------

mod in_process {
    use std::sync::Arc;
    use std::time::Duration;

    use loopd::agent::gateway::{
        Access, Config, Credential, Gateway, Limits, NoChannel, Settled, Spend, Tag, Vendor,
    };
    use loopd::agent::{Agent, ClaudeCode, Prices, Role};

    use crate::support::model::ScriptedModel;
    use crate::support::scenario;

    fn gateway(model: &ScriptedModel, budget_usd: f64) -> Gateway {
        Gateway::start(Config {
            vendors: vec![Vendor {
                name: ClaudeCode.name(),
                wire: ClaudeCode.wire(),
                access: Access {
                    credential: Credential::ApiKey("sk-ant-real".into()),
                    upstream: model.base_url(),
                },
                prices: Prices::of_table(ClaudeCode.prices()),
            }],
            limits: Limits {
                budget_usd,
                max_turns: 10_000,
                max_tokens: u64::MAX,
            },
            before: Spend::default(),
            channel: Arc::new(NoChannel),
            listener: None,
        })
        .expect("gateway")
    }

    fn tag() -> Tag {
        Tag {
            role: Role::Agent,
            attempt: 1,
            session: 0,
        }
    }

    fn burst(output: u64, stall_ms: u64) -> String {
        serde_json::json!({"model": "claude-opus-5-5", "max_tokens": 60000, "stream": true,
            "messages": [{"role": "user", "content": format!("LOOPD-BURST output={output} stall_ms={stall_ms}")}]})
        .to_string()
    }

    fn bill(model: &ScriptedModel) -> f64 {
        model
            .bursts()
            .iter()
            .map(|b| {
                crate::support::price(&b.model).cost(&loopd::agent::events::Usage {
                    input_tokens: b.usage.input_tokens,
                    output_tokens: b.usage.output_tokens,
                    ..Default::default()
                })
            })
            .sum()
    }

    /// Sixteen calls at once, each worth more than the whole budget, half
    /// of them abandoned mid-stream: the upstream's own bill stays under the
    /// cap, and loopd never bills less than the upstream did.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_and_aborted_calls_never_pass_the_cap() {
        let model = ScriptedModel::start(scenario(vec![], vec![]));
        for budget in [0.3, 1.0, 3.0] {
            let mut gw = gateway(&model, budget);
            let before = bill(&model);
            let token = gw.open_session(tag(), 0);
            let url = format!("{}/v1/messages?beta=true", gw.base_url());
            let client = reqwest::Client::new();
            let mut tasks = Vec::new();
            for i in 0..16 {
                let (client, url, token) = (client.clone(), url.clone(), token.clone());
                tasks.push(tokio::spawn(async move {
                    let resp = client
                        .post(&url)
                        .header("x-api-key", &token)
                        .header("content-type", "application/json")
                        .body(burst(60_000, 200))
                        .send()
                        .await
                        .expect("send");
                    let status = resp.status().as_u16();
                    let mut resp = resp;
                    if i % 2 == 0 {
                        while resp.chunk().await.ok().flatten().is_some() {}
                    } else {
                        // One chunk, then gone.
                        let _ = resp.chunk().await;
                        drop(resp);
                    }
                    status
                }));
            }
            for t in tasks {
                t.await.expect("task");
            }
            gw.settle(Duration::from_secs(10)).await;
            let billed = bill(&model) - before;
            let spent = gw.spent();
            assert!(
                billed <= budget + 1e-9,
                "budget {budget}: the upstream billed {billed}"
            );
            assert!(
                spent.cost_usd + 1e-9 >= billed,
                "budget {budget}: loopd billed {} < {billed}",
                spent.cost_usd
            );
            assert!(
                spent.cost_usd <= budget + 1e-9,
                "budget {budget}: {}",
                spent.cost_usd
            );
            let mut aborted = 0;
            while let Ok(e) = gw.events().try_recv() {
                if let loopd::agent::gateway::record::Record::Metered(c) = e {
                    if c.settled == Settled::Reserved {
                        aborted += 1;
                    }
                }
            }
            assert!(
                billed == 0.0 || aborted > 0 || spent.turns > 0,
                "budget {budget}"
            );
        }
    }

    /// A real PNG, `w` x `h` pixels of one colour: a few hundred bytes.
    fn flat_png(w: u32, h: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(png::ColorType::Grayscale);
        e.set_depth(png::BitDepth::One);
        e.set_compression(png::Compression::High);
        let mut writer = e.write_header().expect("png header");
        writer
            .write_image_data(&vec![0; (w as usize).div_ceil(8) * h as usize])
            .expect("png data");
        writer.finish().expect("png end");
        out
    }

    /// A burst call carrying `n` copies of `png`, half of them in a tool
    /// result (where Claude Code puts screenshots and the images its Read
    /// tool opens), with a small output bound.
    fn burst_with_images(png: &[u8], n: usize) -> String {
        let image = serde_json::json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
            "data": crate::support::gitserver::base64(png)}});
        let mut content = vec![
            serde_json::json!({"type": "text", "text": "LOOPD-BURST output=1000 stall_ms=200"}),
        ];
        content.extend(std::iter::repeat_n(image.clone(), n / 2));
        content.push(
            serde_json::json!({"type": "tool_result", "tool_use_id": "toolu_1",
            "content": vec![image; n - n / 2]}),
        );
        serde_json::json!({"model": "claude-opus-5-5", "max_tokens": 1024, "stream": true,
            "messages": [{"role": "user", "content": content}]})
        .to_string()
    }

    /// Issue 39, finding 8: parallel calls, each with many small PNGs of
    /// many pixels, under a $0.50 budget. Reserved by their bytes (a token
    /// is at least a byte), several fit at once and the upstream billed
    /// $1.23; reserved by their pixels, the upstream's own bill — which
    /// counts the images by the provider's formula — stays under the cap.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_calls_full_of_small_images_never_pass_the_cap() {
        let model = ScriptedModel::start(scenario(vec![], vec![]));
        let budget = 0.5;
        let gw = gateway(&model, budget);
        let token = gw.open_session(tag(), 0);
        let url = format!("{}/v1/messages?beta=true", gw.base_url());
        let png = flat_png(1568, 1568);
        assert!(png.len() < 2_000, "{} bytes", png.len());
        let body = burst_with_images(&png, 12);
        let client = reqwest::Client::new();
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let (client, url, token, body) =
                (client.clone(), url.clone(), token.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut resp = client
                    .post(&url)
                    .header("x-api-key", &token)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("send");
                let status = resp.status().as_u16();
                while resp.chunk().await.ok().flatten().is_some() {}
                status
            }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.expect("task"));
        }
        gw.settle(Duration::from_secs(10)).await;
        let bursts = model.bursts();
        assert!(!bursts.is_empty(), "no call got through: {statuses:?}");
        assert!(statuses.contains(&400), "none refused: {statuses:?}");
        // The upstream counted the images (12 x 1568 x 1568 / 750).
        assert!(
            bursts[0].usage.input_tokens > 12 * 3_000,
            "{:?}",
            bursts[0].usage
        );
        let billed = bill(&model);
        let spent = gw.spent();
        assert!(billed <= budget + 1e-9, "the upstream billed {billed}");
        assert!(
            spent.cost_usd + 1e-9 >= billed,
            "loopd billed {} < {billed}",
            spent.cost_usd
        );
        assert!(spent.cost_usd <= budget + 1e-9, "{}", spent.cost_usd);
    }

    /// Every target but the exact endpoints is refused before it reaches
    /// the upstream: dot segments, encodings, case, slashes, queries,
    /// methods, absolute and authority forms, with and without the token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_other_target_is_refused_before_the_upstream() {
        let model = ScriptedModel::start(scenario(vec![], vec![]));
        let gw = gateway(&model, 100.0);
        let token = gw.open_session(tag(), 0);
        let addr = gw.base_url().trim_start_matches("http://").to_owned();
        let mut targets = Vec::new();
        for prefix in [
            "", "/", "//", "/./", "/x/../", "/v1/../", "/%2e/", "/V1/", "/v1%2F",
        ] {
            for path in [
                "v1/messages",
                "messages",
                "v1/messages/",
                "v1/messages/.",
                "v1/messages/batches",
                "v1/complete",
                "v1/models",
                "api/oauth/claude_cli/create_api_key",
                "v1/messages%00",
                "v1/messages;beta=true",
                "v1/messages?beta=true&beta=true",
                "v1/messages?BETA=true",
                "v1/messages?beta=true%26x",
            ] {
                targets.push(format!("{prefix}{path}"));
            }
        }
        // (A fragment is no part of a request target: hyper's parser drops
        // it, and what is left is matched — `/v1/messages#x` is a plain,
        // metered call.)
        targets.retain(|t| t != "/v1/messages");
        targets.push(format!("http://{addr}/v1/messages"));
        targets.push("*".into());
        let mut refused = 0;
        for target in &targets {
            for method in ["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"] {
                use std::io::{Read, Write};
                let mut s = std::net::TcpStream::connect(&addr).expect("connect");
                let body = burst(10, 0);
                let req = format!(
                    "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nx-api-key: {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(req.as_bytes()).expect("write");
                let mut resp = String::new();
                let _ = s.read_to_string(&mut resp);
                let status = resp.split(' ').nth(1).unwrap_or("");
                assert!(
                    status == "403" || status == "400",
                    "{method} {target}: {}",
                    resp.lines().next().unwrap_or("")
                );
                refused += 1;
            }
        }
        assert!(refused > 700, "{refused}");
        assert!(model.wire().is_empty(), "{:?}", model.wire());
        // Without the token even the exact endpoint is refused.
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/messages", gw.base_url()))
            .header("x-api-key", "loopd-session-guess")
            .body(burst(10, 0))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 401);
        assert!(model.wire().is_empty());
    }
}
