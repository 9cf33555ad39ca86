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

use loopd::agent::gateway::{Access, Config, Credential, Gateway, Limits, NoChannel, Spend, Tag};
use loopd::agent::{AgentCli, ClaudeCode, Role};

/// A small answer: what a tool-use turn looks like on the wire.
fn small_answer() -> Vec<Bytes> {
    let ev = |name: &str, data: &str| Bytes::from(format!("event: {name}\ndata: {data}\n\n"));
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

/// About 1 MB of text deltas between a start and a stop.
fn big_answer() -> Vec<Bytes> {
    let mut out = small_answer();
    let tail = out.split_off(2);
    let text = "x".repeat(1000);
    let delta = Bytes::from(format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
    ));
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
    let small = small_answer();
    let big = big_answer();
    let app = axum::Router::new().fallback(move |body: String| {
        let chunks = if body.contains("go big") {
            big.clone()
        } else {
            small.clone()
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

const SMALL: &str = r#"{"model":"claude-haiku-5-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"go"}]}"#;
const BIG: &str = r#"{"model":"claude-haiku-5-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"go big"}]}"#;

/// One request, the whole answer read; returns its duration and size.
async fn call(client: &reqwest::Client, base: &str, token: &str, size: &str) -> (Duration, usize) {
    let t = Instant::now();
    let mut resp = client
        .post(format!("{base}/v1/messages?beta=true"))
        .header("x-api-key", token)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(if size == "big" { BIG } else { SMALL })
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
        let mut gateway = Gateway::start(Config {
            access: Access {
                credential: Credential::ApiKey("sk-bench".into()),
                upstream: base.clone(),
            },
            wire: ClaudeCode.wire(),
            limits: Limits::NONE,
            before: Spend::default(),
            channel: Arc::new(NoChannel),
            listener: None,
        })
        .expect("gateway");
        let via = gateway.base_url();
        let token = gateway.open_session(Tag {
            role: Role::Agent,
            attempt: 1,
            session: 0,
        });
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .expect("client");

        // Warm up both paths (connections, allocator).
        for _ in 0..50 {
            call(&client, &base, &token, "small").await;
            call(&client, &via, &token, "small").await;
        }
        // Interleaved, so both see the same machine noise.
        let mut direct = Vec::with_capacity(requests);
        let mut gated = Vec::with_capacity(requests);
        for _ in 0..requests {
            direct.push(call(&client, &base, &token, "small").await.0);
            gated.push(call(&client, &via, &token, "small").await.0);
        }
        let (d, g) = (median(direct), median(gated));
        gateway.settle(Duration::from_secs(5)).await;
        let metered = gateway.spent();
        while gateway.events().try_recv().is_ok() {}
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
            bytes += call(&client, &base, &token, "big").await.1;
        }
        let direct_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..rounds {
            call(&client, &via, &token, "big").await;
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
    });
}
