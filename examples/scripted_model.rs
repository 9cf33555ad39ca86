//! Run the scripted model on its own, for the demo or for poking at the CLI:
//! `cargo run --example scripted_model -- SCENARIO.toml [PORT]`.
//! Prints `http://127.0.0.1:PORT` on stdout, then serves until killed, and
//! writes every request it saw as JSON lines to `$SCRIPTED_MODEL_LOG` if set,
//! and every request that reached it on the wire at all (any method and
//! path, with the credential it carried) to `$SCRIPTED_MODEL_WIRE_LOG`.

#[path = "../tests/support/model.rs"]
#[allow(dead_code)]
mod model;

use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args
        .next()
        .expect("usage: scripted_model SCENARIO.toml [PORT]");
    let port: u16 = args
        .next()
        .map(|p| p.parse().expect("PORT is a number"))
        .unwrap_or(0);
    let server = model::ScriptedModel::start_on(model::load_scenario(scenario.as_ref()), port);
    println!("{}", server.base_url());
    std::io::stdout().flush().expect("flush stdout");
    let log = std::env::var_os("SCRIPTED_MODEL_LOG");
    let wire_log = std::env::var_os("SCRIPTED_MODEL_WIRE_LOG");
    let (mut written, mut wire_written) = (0, 0);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if let Some(path) = &log {
            written = append(path, &server.requests(), written);
        }
        if let Some(path) = &wire_log {
            wire_written = append(path, &server.wire(), wire_written);
        }
    }
}

/// Append the items after the first `written` as JSON lines; the new count.
fn append<T: serde::Serialize>(path: &std::ffi::OsStr, items: &[T], written: usize) -> usize {
    if items.len() > written {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open log");
        for r in &items[written..] {
            writeln!(f, "{}", serde_json::to_string(r).expect("json")).expect("write log");
        }
    }
    items.len()
}
