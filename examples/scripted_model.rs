//! Run the scripted model on its own, for the demo or for poking at the CLI:
//! `cargo run --example scripted_model -- SCENARIO.toml [PORT]`.
//! Prints `http://127.0.0.1:PORT` on stdout, then serves until killed, and
//! writes every request it saw as JSON lines to `$SCRIPTED_MODEL_LOG` if set.

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
    let mut written = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if let Some(path) = &log {
            let requests = server.requests();
            if requests.len() > written {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("open log");
                for r in &requests[written..] {
                    writeln!(f, "{}", serde_json::to_string(r).expect("json")).expect("write log");
                }
                written = requests.len();
            }
        }
    }
}
