//! The progress guard: an agent repeating one tool call, an attempt that
//! changed nothing, and a diff that returns to an earlier attempt's state.
//!
//! Tool calls are identified by sha256 over the tool name and its input as
//! canonical JSON — object keys sorted at *every* depth, so `{"a":{"y":1,"x":2}}`
//! and `{"a":{"x":2,"y":1}}` are the same call. Polling commands (sleep, wait,
//! tailing a log) are exempt: waiting on a long build is not being stuck.

use std::collections::VecDeque;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::agent::events::ToolCall;
use crate::outcome::Reason;

/// Write `value` as canonical JSON: no whitespace, keys sorted at every depth.
pub fn canonical_json(value: &Value, out: &mut String) {
    let mut bytes = Vec::with_capacity(128);
    write_canonical(value, &mut bytes).expect("writing to memory cannot fail");
    out.push_str(std::str::from_utf8(&bytes).expect("JSON is UTF-8"));
}

/// [`canonical_json`] into any writer: the hash streams it, never building
/// the text (a shell command can carry a whole file).
fn write_canonical(value: &Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.write_all(b"{")?;
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, k)?;
                out.write_all(b":")?;
                write_canonical(&map[k], out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(v, out)?;
            }
            out.write_all(b"]")
        }
        other => Ok(serde_json::to_writer(out, other)?),
    }
}

/// sha256 of a tool call: its name and its input as canonical JSON — a
/// shell command by its text alone, so an agent whose hook and stream name
/// the shell differently (`Bash`, `exec_command`) counts one call once.
pub fn call_hash(call: &ToolCall) -> String {
    let mut h = Hashing(Sha256::new());
    match call.command() {
        // What `hash_of("shell", {"command": command})` hashes, without
        // building the object.
        Some(command) => {
            h.0.update(b"shell\0{\"command\":");
            serde_json::to_writer(&mut h, command).expect("hashing cannot fail");
            h.0.update(b"}");
        }
        None => {
            h.0.update(call.name.as_bytes());
            h.0.update([0u8]);
            write_canonical(&call.input, &mut h).expect("hashing cannot fail");
        }
    }
    hex::encode(h.0.finalize())
}

/// sha256 of a name and a value as canonical JSON, hex.
pub fn hash_of(tool: &str, input: &Value) -> String {
    let mut h = Hashing(Sha256::new());
    h.0.update(tool.as_bytes());
    h.0.update([0u8]);
    write_canonical(input, &mut h).expect("hashing cannot fail");
    hex::encode(h.0.finalize())
}

/// A hash as a writer: what is written is hashed.
struct Hashing(Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Is this a polling call (exempt from the repeat detector)? A shell
/// command that waits, or one sent to the background.
pub fn is_polling(call: &ToolCall, patterns: &[String]) -> bool {
    let Some(cmd) = call.command() else {
        return false;
    };
    let input = &call.input;
    let cmd = cmd.trim_start();
    patterns.iter().any(|p| {
        cmd == p.as_str()
            || cmd
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.starts_with(char::is_whitespace))
    }) || input.get("run_in_background").is_some()
}

/// The same call K times among the last W calls means stuck.
#[derive(Debug, Clone)]
pub struct RepeatDetector {
    window: usize,
    repeat: usize,
    recent: VecDeque<String>,
}

impl RepeatDetector {
    pub fn new(window: usize, repeat: usize) -> RepeatDetector {
        RepeatDetector {
            window,
            repeat,
            recent: VecDeque::with_capacity(window + 1),
        }
    }

    /// Record a call (by hash); `Some(StuckRepeat)` when it is the K-th in the window.
    pub fn observe(&mut self, hash: &str) -> Option<Reason> {
        self.recent.push_back(hash.to_owned());
        if self.recent.len() > self.window {
            self.recent.pop_front();
        }
        let same = self.recent.iter().filter(|h| *h == hash).count();
        (same >= self.repeat).then_some(Reason::StuckRepeat)
    }
}

/// The nudge's settings: the stop's window and repeat count, the polling
/// exemptions, and the escalation command to suggest.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NudgeSettings {
    pub window: usize,
    pub repeat: usize,
    pub poll_patterns: Vec<String>,
    /// The escalation command, when the agent has that exit.
    #[serde(default)]
    pub escalate: Option<String>,
}

/// One session's recent calls, as the hook's questions showed them.
#[derive(Debug, Default)]
struct SessionCalls {
    recent: VecDeque<String>,
    nudged: bool,
}

/// The nudge before a `stuck_repeat` stop, decided in loopd from the
/// hook's questions (which reach it through the gateway): the first call of
/// a session that repeats `repeat` times within `window` is denied with
/// what to do instead. The session's [`crate::guard::Watch`] counts the same
/// calls from the stream and lets exactly that one through; a further
/// repeat stops the session with `stuck_repeat`. Polling calls are exempt,
/// as they are from the stop. Kept in memory: nothing a job's process can
/// write holds a count.
#[derive(Debug)]
pub struct Nudger {
    settings: NudgeSettings,
    /// By the CLI's session id (bounded: a session is one of a job's few).
    sessions: std::collections::HashMap<String, SessionCalls>,
}

/// The most sessions whose calls are kept (the oldest are forgotten).
const MAX_NUDGE_SESSIONS: usize = 64;

impl Nudger {
    pub fn new(settings: NudgeSettings) -> Nudger {
        Nudger {
            settings,
            sessions: std::collections::HashMap::new(),
        }
    }

    /// Count this call; the nudge to deny it with, when it is the one.
    pub fn observe(&mut self, session_id: &str, call: &ToolCall) -> Option<String> {
        let s = &self.settings;
        let tool = &call.name;
        if is_polling(call, &s.poll_patterns) {
            return None;
        }
        if !self.sessions.contains_key(session_id) && self.sessions.len() >= MAX_NUDGE_SESSIONS {
            self.sessions.clear();
        }
        let calls = self.sessions.entry(session_id.to_owned()).or_default();
        let mut detector = RepeatDetector {
            window: s.window,
            repeat: s.repeat,
            recent: std::mem::take(&mut calls.recent),
        };
        let repeated = detector.observe(&call_hash(call)).is_some();
        calls.recent = detector.recent;
        (repeated && !calls.nudged).then(|| {
            calls.nudged = true;
            let escalate = s
                .escalate
                .as_ref()
                .map(|c| format!(", or — if the task cannot be done honestly — run `{c} --test <test id> --reason \"...\"`"))
                .unwrap_or_default();
            format!(
                "loopd: this is the {} identical {tool} call among your last {} tool calls; repeating it will not change its result. Read the error or output it gave, then try a different approach{escalate}. Repeating this call once more ends the session (stuck_repeat).",
                ordinal(s.repeat),
                s.window
            )
        })
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// States of the working tree (diff hashes) after each attempt.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DiffHistory {
    states: Vec<String>,
}

impl DiffHistory {
    /// Record the state an attempt left. `StuckNoProgress` when it equals the
    /// previous attempt's, `JudgesDisagree` when it returns to an earlier one.
    pub fn observe(&mut self, diff_sha256: &str) -> Option<Reason> {
        let verdict = match self.states.iter().rposition(|s| s == diff_sha256) {
            Some(i) if i + 1 == self.states.len() => Some(Reason::StuckNoProgress),
            Some(_) => Some(Reason::JudgesDisagree),
            None => None,
        };
        self.states.push(diff_sha256.to_owned());
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_at_every_depth() {
        let a = json!({"file_path": "/x", "opts": {"b": [ {"z": 1, "y": 2} ], "a": null}});
        let b = json!({"opts": {"a": null, "b": [ {"y": 2, "z": 1} ]}, "file_path": "/x"});
        assert_eq!(hash_of("Read", &a), hash_of("Read", &b));
        assert_ne!(hash_of("Read", &a), hash_of("Write", &a));
        let mut s = String::new();
        canonical_json(&a, &mut s);
        assert_eq!(
            s,
            r#"{"file_path":"/x","opts":{"a":null,"b":[{"y":2,"z":1}]}}"#
        );
    }

    /// Hashes outlive a process (the journal keeps them and a resumed job
    /// compares against them): their bytes are pinned here.
    #[test]
    fn hashes_are_stable_across_versions() {
        let a = json!({"file_path": "/x", "opts": {"b": [ {"z": 1, "y": 2} ], "a": null}});
        assert_eq!(
            hash_of("Read", &a),
            "f6442d000a3e3bb57a6ea91aaed5b7ea16a93571916f9c3bd005cb4696374d69"
        );
        let command = "echo \"é\" \\\\ \n\u{1}";
        let shell = call("Bash", json!({ "command": command }));
        assert_eq!(
            call_hash(&shell),
            "1fcbc65644a75ca6efee0b5d9eee88efd96d463a23a01a6482806c9c51863158"
        );
        assert_eq!(
            call_hash(&shell),
            hash_of("shell", &json!({ "command": command }))
        );
    }

    #[test]
    fn k_in_window() {
        let mut d = RepeatDetector::new(5, 3);
        assert_eq!(d.observe("a"), None);
        assert_eq!(d.observe("b"), None);
        assert_eq!(d.observe("a"), None);
        assert_eq!(d.observe("c"), None);
        assert_eq!(d.observe("a"), Some(Reason::StuckRepeat));
        let mut d = RepeatDetector::new(5, 3);
        for h in ["a", "b", "c", "d", "e", "a", "f", "g", "h", "a"] {
            assert_eq!(d.observe(h), None, "a repeats but never 3 times within 5");
        }
    }

    fn call(tool: &str, input: Value) -> ToolCall {
        crate::agent::claude::tool_call("t".into(), tool.into(), input)
    }

    #[test]
    fn a_shell_command_is_one_call_whatever_the_tool_is_called() {
        let claude = call(
            "Bash",
            json!({"command": "pytest -q", "description": "run"}),
        );
        let codex = crate::agent::Agent::tool_call(
            &crate::agent::codex::Codex,
            "c".into(),
            "exec_command".into(),
            json!({"cmd": "pytest -q"}),
        );
        assert_eq!(call_hash(&claude), call_hash(&codex));
    }

    #[test]
    fn polling_is_exempt() {
        let p: Vec<String> = crate::guard::DEFAULT_POLL_PATTERNS
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(is_polling(&call("Bash", json!({"command": "sleep 5"})), &p));
        assert!(is_polling(
            &call("Bash", json!({"command": "tail -f build.log"})),
            &p
        ));
        assert!(!is_polling(
            &call("Bash", json!({"command": "sleeper --fast"})),
            &p
        ));
        assert!(!is_polling(
            &call("Read", json!({"file_path": "sleep 5"})),
            &p
        ));
    }

    #[test]
    fn the_hook_nudges_once_per_session_and_never_for_polling() {
        let mut nudger = Nudger::new(NudgeSettings {
            window: 5,
            repeat: 3,
            poll_patterns: vec!["sleep".into()],
            escalate: Some("loopd escalate".into()),
        });
        let read = json!({"file_path": "/r/x.py"});
        let mut observe =
            |s: &str, tool: &str, input: &Value| nudger.observe(s, &call(tool, input.clone()));
        assert_eq!(observe("s1", "Read", &read), None);
        assert_eq!(observe("s1", "Read", &read), None);
        assert_eq!(
            observe("s2", "Read", &read),
            None,
            "another session counts apart"
        );
        let m = observe("s1", "Read", &read).expect("the 3rd identical call is nudged");
        assert!(
            m.contains("3rd identical Read") && m.contains("loopd escalate --test"),
            "{m}"
        );
        assert_eq!(observe("s1", "Read", &read), None, "only once per session");
        let poll = json!({"command": "sleep 1"});
        for _ in 0..4 {
            assert_eq!(observe("s3", "Bash", &poll), None);
        }
    }

    #[test]
    fn diff_history() {
        let mut h = DiffHistory::default();
        assert_eq!(h.observe("A"), None);
        assert_eq!(h.observe("B"), None);
        assert_eq!(h.observe("A"), Some(Reason::JudgesDisagree));
        let mut h = DiffHistory::default();
        assert_eq!(h.observe("A"), None);
        assert_eq!(h.observe("A"), Some(Reason::StuckNoProgress));
    }
}
