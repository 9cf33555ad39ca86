//! The metering gateway's cost on loopback: the latency it adds per request
//! (median over many small streamed answers, gateway minus direct; target:
//! under 1 ms) and its throughput on a 1 MB streamed answer, both against a
//! local upstream that answers at once.
//!
//! `cargo bench --bench gateway [-- REQUESTS]`

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::response::Response;
use std::sync::Arc;

use loopd::agent::gateway::{
    Access, Config, Credential, Gateway, Limits, NoChannel, Spend, Tag, Vendor,
};
use loopd::agent::{Agent, Prices, Role};

/// One wire protocol as the bench drives it: the agent whose wire it is,
/// the path called, the token's header, a small and a big request, and the
/// upstream's answers.
struct Proto {
    agent: &'static dyn Agent,
    path: &'static str,
    auth: fn(&str) -> (&'static str, String),
    small: &'static str,
    big: &'static str,
    answer: fn() -> Vec<Bytes>,
    delta: fn(&str) -> Bytes,
    /// How many leading chunks of `answer` come before the big answer's
    /// text.
    head: usize,
}

fn ev(name: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// A small Anthropic answer: what a tool-use turn looks like on the wire.
fn messages_answer() -> Vec<Bytes> {
    vec![
        ev(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_b","type":"message","role":"assistant","model":"claude-haiku-5-5","content":[],"usage":{"input_tokens":1200,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":9000}}}"#,
        ),
        ev(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Reading the file first."}}"#,
        ),
        ev(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        ev(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}"#,
        ),
        ev("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

/// A small Responses answer: created, one message, completed with usage.
fn responses_answer() -> Vec<Bytes> {
    vec![
        ev(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_b","model":"gpt-5-codex"}}"#,
        ),
        ev(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"Reading the file first."}"#,
        ),
        ev(
            "response.output_item.done",
            r#"{"type":"response.output_item.done","item":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Reading the file first."}]}}"#,
        ),
        ev(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_b","usage":{"input_tokens":10200,"input_tokens_details":{"cached_tokens":9000},"output_tokens":42,"total_tokens":10242}}}"#,
        ),
    ]
}

const PROTOS: &[Proto] = &[
    Proto {
        agent: &loopd::agent::ClaudeCode,
        path: "/v1/messages?beta=true",
        auth: |t| ("x-api-key", t.to_owned()),
        small: r#"{"model":"claude-haiku-5-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"go"}]}"#,
        big: r#"{"model":"claude-haiku-5-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"go big"}]}"#,
        answer: messages_answer,
        delta: |text| {
            ev("content_block_delta", &format!("{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}"))
        },
        head: 2,
    },
    Proto {
        agent: &loopd::agent::codex::Codex,
        path: "/v1/responses",
        auth: |t| ("authorization", format!("Bearer {t}")),
        small: r#"{"model":"gpt-5-codex","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}],"tools":[]}"#,
        big: r#"{"model":"gpt-5-codex","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go big"}]}],"tools":[]}"#,
        answer: responses_answer,
        delta: |text| {
            ev(
                "response.output_text.delta",
                &format!("{{\"type\":\"response.output_text.delta\",\"delta\":\"{text}\"}}"),
            )
        },
        head: 1,
    },
];

/// About 1 MB of text deltas between a start and a stop.
fn big_answer(p: &Proto) -> Vec<Bytes> {
    let mut out = (p.answer)();
    let tail = out.split_off(p.head);
    let delta = (p.delta)(&"x".repeat(1000));
    let mut size = 0;
    while size < 1 << 20 {
        size += delta.len();
        out.push(delta.clone());
    }
    out.extend(tail);
    out
}

fn sse(chunks: Vec<Bytes>) -> Response {
    let stream =
        futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("response")
}

async fn upstream() -> String {
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: String| {
        let p = PROTOS
            .iter()
            .find(|p| p.path.split('?').next() == Some(uri.path()))
            .expect("a known path");
        let chunks = if body.contains("go big") {
            big_answer(p)
        } else {
            (p.answer)()
        };
        async move { sse(chunks) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// One request, the whole answer read; returns its duration and size.
async fn call(
    client: &reqwest::Client,
    p: &Proto,
    base: &str,
    token: &str,
    big: bool,
) -> (Duration, usize) {
    let t = Instant::now();
    let (name, value) = (p.auth)(token);
    let mut resp = client
        .post(format!("{base}{}", p.path))
        .header(name, value)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(if big { p.big } else { p.small })
        .send()
        .await
        .expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
    let mut n = 0;
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        n += chunk.len();
    }
    (t.elapsed(), n)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let requests: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let base = upstream().await;
        for p in PROTOS {
            bench(p, &base, requests).await;
        }
    });
}

async fn bench(p: &Proto, base: &str, requests: usize) {
    let mut gateway = Gateway::start(Config {
        vendors: vec![Vendor {
            name: p.agent.name(),
            wire: p.agent.wire(),
            access: Access {
                credential: match p.agent.name() {
                    "claude" => Credential::ApiKey("sk-bench".into()),
                    _ => Credential::Bearer("sk-bench".into()),
                },
                upstream: base.to_owned(),
            },
            prices: Prices::of_table(p.agent.prices()),
        }],
        limits: Limits::NONE,
        before: Spend::default(),
        channel: Arc::new(NoChannel),
        listener: None,
    })
    .expect("gateway");
    let via = gateway.base_url();
    let token = gateway.open_session(
        Tag {
            role: Role::Agent,
            attempt: 1,
            session: 0,
        },
        0,
    );
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");

    // Warm up both paths (connections, allocator).
    for _ in 0..50 {
        call(&client, p, base, &token, false).await;
        call(&client, p, &via, &token, false).await;
    }
    // Interleaved, so both see the same machine noise.
    let mut direct = Vec::with_capacity(requests);
    let mut gated = Vec::with_capacity(requests);
    for _ in 0..requests {
        direct.push(call(&client, p, base, &token, false).await.0);
        gated.push(call(&client, p, &via, &token, false).await.0);
    }
    let (d, g) = (median(direct), median(gated));
    gateway.settle(Duration::from_secs(5)).await;
    let metered = gateway.spent();
    while gateway.events().try_recv().is_ok() {}
    let name = p.agent.name();
    println!("[{name}, {}]", p.path);
    println!("requests:            {requests} small streamed answers each way");
    println!("median direct:       {:>8.1} µs", d.as_secs_f64() * 1e6);
    println!("median via gateway:  {:>8.1} µs", g.as_secs_f64() * 1e6);
    println!(
        "added per request:   {:>8.1} µs (target < 1000 µs)",
        (g.as_secs_f64() - d.as_secs_f64()) * 1e6
    );
    assert!(metered.turns >= requests as u64, "every call was metered");

    let rounds = 20;
    let mut bytes = 0;
    let t = Instant::now();
    for _ in 0..rounds {
        bytes += call(&client, p, base, &token, true).await.1;
    }
    let direct_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..rounds {
        call(&client, p, &via, &token, true).await;
    }
    let gated_s = t.elapsed().as_secs_f64();
    let mb = bytes as f64 / (1 << 20) as f64;
    println!(
        "1 MB streamed ({} B) x {rounds}: direct {:>7.1} MB/s, via gateway {:>7.1} MB/s",
        bytes / rounds,
        mb / direct_s,
        mb / gated_s
    );
    while gateway.events().try_recv().is_ok() {}
}
