//! The progress guard: an agent repeating one tool call, an attempt that
//! changed nothing, and a diff that returns to an earlier attempt's state.
//!
//! Tool calls are identified by sha256 over the tool name and its input as
//! canonical JSON — object keys sorted at *every* depth, so `{"a":{"y":1,"x":2}}`
//! and `{"a":{"x":2,"y":1}}` are the same call ([`call_hash`], what the
//! journal records). The repeat detector compares a shell command by what
//! it runs ([`shell`]): quoting, whitespace, wrappers (`env`, `timeout 30`,
//! `nice`, …) and elements that do nothing (`true`, `:`, `sleep 0`, `cd .`)
//! are trivia, so `sleep 0; cat lager.py` repeated is `cat lager.py`
//! repeated (issue 40). A poll — a command that waits and then only looks
//! (`sleep 5; curl …/health`, `tail -f log`, an `until … sleep` loop) — is
//! exempt: waiting on a long build is not being stuck. And a re-run after a
//! change is a new question ([`RepeatDetector`]): running the tests after
//! each edit is never a repeat.

use std::collections::VecDeque;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::agent::events::ToolCall;
use crate::guard::shell;
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

/// What the repeat detector makes of one tool call: the Watch (from the
/// stream) and the Nudger (from the hook) judge every call alike, so they
/// count the same repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// What repeats are compared by: a shell command's canonical form
    /// ([`shell::Reading::canonical`]), any other call's [`call_hash`].
    pub repeat_hash: String,
    /// A poll: exempt from the count.
    pub polling: bool,
    /// What it does to the files: whether what follows it is a new
    /// question.
    pub effect: Effect,
}

/// What a call does to the files, for the repeat count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Changes no file (that matters): a read, a run whose output only
    /// the agent sees.
    Looks,
    /// May change files, and its text does not say what it writes: a shell
    /// command that writes (`sed -i`, `cp`, `git checkout`, `pytest >
    /// log`).
    Writes,
    /// Its input is what it writes: an edit, a write, a patch.
    Edits,
}

/// Judge a call; `patterns` are the polling patterns (`[guard]
/// poll_patterns`).
pub fn judge(call: &ToolCall, patterns: &[String]) -> Judged {
    let Some(command) = call.command() else {
        return Judged {
            repeat_hash: call_hash(call),
            polling: false,
            effect: if call.mutating() {
                Effect::Edits
            } else {
                Effect::Looks
            },
        };
    };
    let reading = shell::read(command);
    let mut h = Sha256::new();
    h.update(b"shell\0");
    h.update(reading.canonical().as_bytes());
    Judged {
        repeat_hash: hex::encode(h.finalize()),
        polling: reading.is_poll(patterns) || call.input.get("run_in_background").is_some(),
        effect: if reading.writes() {
            Effect::Writes
        } else {
            Effect::Looks
        },
    }
}

/// Is this a polling call (exempt from the repeat detector)? A shell
/// command that waits and then only looks (`sleep 5; cat status`, `tail
/// -f log`, `until curl …; do sleep 1; done`), with a polling pattern as
/// the leading command of what waits, or one sent to the background. `sleep
/// 0` waits for nothing: `sleep 0; cat x` is a read.
pub fn is_polling(call: &ToolCall, patterns: &[String]) -> bool {
    judge(call, patterns).polling
}

/// The same call K times among the last W calls means stuck — counted
/// since the last change another call made: after an edit, running the
/// tests again (or reading the file again) is a new question, and a shell
/// command that writes (`pytest > log`, `sed -i …`) is re-run after
/// another change as freely. An edit, whose input is exactly what it
/// writes, counts every repeat in the window: the same edit again, or two
/// edits undoing each other, is stuck whatever came between.
#[derive(Debug, Clone)]
pub struct RepeatDetector {
    window: usize,
    repeat: usize,
    recent: VecDeque<Seen>,
}

#[derive(Debug, Clone)]
struct Seen {
    hash: String,
    effect: Effect,
}

impl RepeatDetector {
    pub fn new(window: usize, repeat: usize) -> RepeatDetector {
        RepeatDetector {
            window,
            repeat,
            recent: VecDeque::with_capacity(window + 1),
        }
    }

    /// Count a call; `Some(StuckRepeat)` when it is the K-th of its kind in
    /// the window. A poll is not counted.
    pub fn observe(&mut self, call: &Judged) -> Option<Reason> {
        if call.polling {
            return None;
        }
        self.recent.push_back(Seen {
            hash: call.repeat_hash.clone(),
            effect: call.effect,
        });
        if self.recent.len() > self.window {
            self.recent.pop_front();
        }
        let mut same = 0;
        for seen in self.recent.iter().rev() {
            if seen.hash == call.repeat_hash {
                same += 1;
            } else if call.effect != Effect::Edits && seen.effect != Effect::Looks {
                break;
            }
        }
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
#[derive(Debug)]
struct SessionCalls {
    recent: RepeatDetector,
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
        let judged = judge(call, &s.poll_patterns);
        if judged.polling {
            return None;
        }
        if !self.sessions.contains_key(session_id) && self.sessions.len() >= MAX_NUDGE_SESSIONS {
            self.sessions.clear();
        }
        let calls = self
            .sessions
            .entry(session_id.to_owned())
            .or_insert_with(|| SessionCalls {
                recent: RepeatDetector::new(s.window, s.repeat),
                nudged: false,
            });
        let repeated = calls.recent.observe(&judged).is_some();
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

    /// A call that changes nothing, by its hash.
    fn looks(hash: &str) -> Judged {
        Judged {
            repeat_hash: hash.into(),
            polling: false,
            effect: Effect::Looks,
        }
    }

    /// A shell command that writes, by its hash.
    fn writes(hash: &str) -> Judged {
        Judged {
            effect: Effect::Writes,
            ..looks(hash)
        }
    }

    /// An edit, by its hash.
    fn edits(hash: &str) -> Judged {
        Judged {
            effect: Effect::Edits,
            ..looks(hash)
        }
    }

    #[test]
    fn k_in_window() {
        let mut d = RepeatDetector::new(5, 3);
        assert_eq!(d.observe(&looks("a")), None);
        assert_eq!(d.observe(&looks("b")), None);
        assert_eq!(d.observe(&looks("a")), None);
        assert_eq!(d.observe(&looks("c")), None);
        assert_eq!(d.observe(&looks("a")), Some(Reason::StuckRepeat));
        let mut d = RepeatDetector::new(5, 3);
        for h in ["a", "b", "c", "d", "e", "a", "f", "g", "h", "a"] {
            assert_eq!(
                d.observe(&looks(h)),
                None,
                "a repeats but never 3 times within 5"
            );
        }
    }

    /// Before this rule an honest test-edit loop was stopped at its third
    /// run (`pytest`, edit, `pytest`, edit, `pytest`: three in five).
    #[test]
    fn a_rerun_after_another_change_is_a_new_question() {
        let outcome = |calls: &[Judged]| {
            let mut d = RepeatDetector::new(5, 3);
            calls.iter().map(|c| d.observe(c)).collect::<Vec<_>>()
        };
        let stuck = |calls: &[Judged]| outcome(calls).iter().any(Option::is_some);
        let mut honest = Vec::new();
        for round in 0..6 {
            honest.push(looks("pytest"));
            honest.push(edits(&format!("edit {round}")));
            honest.push(writes("pytest > log"));
            honest.push(writes(&format!("sed -i s/{round}/x/ f")));
        }
        assert!(!stuck(&honest), "{:?}", outcome(&honest));
        // Nothing changed between: stuck, a look or a writer alike.
        assert!(stuck(&[looks("cat"), looks("cat"), looks("cat")]));
        assert!(stuck(&[writes("sed"), writes("sed"), writes("sed")]));
        // Only the writer itself changed something between the looks: the
        // writer is the repeat.
        let v = outcome(&[
            looks("cat"),
            writes("log"),
            looks("cat"),
            writes("log"),
            looks("cat"),
            writes("log"),
        ]);
        assert_eq!(v[5], Some(Reason::StuckRepeat), "{v:?}");
        // The same edit again and again is stuck, runs between or not…
        let v = outcome(&[
            edits("e"),
            looks("pytest"),
            edits("e"),
            looks("pytest"),
            edits("e"),
        ]);
        assert_eq!(v[4], Some(Reason::StuckRepeat), "{v:?}");
        // …and so are two edits that undo each other.
        let v = outcome(&[edits("a"), edits("b"), edits("a"), edits("b"), edits("a")]);
        assert_eq!(v[4], Some(Reason::StuckRepeat), "{v:?}");
        // A poll is not counted, and changes nothing.
        let poll = Judged {
            polling: true,
            ..writes("cat")
        };
        let v = outcome(&[looks("cat"), poll.clone(), poll, looks("cat"), looks("cat")]);
        assert_eq!(v[4], Some(Reason::StuckRepeat), "{v:?}");
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

    fn default_patterns() -> Vec<String> {
        crate::guard::DEFAULT_POLL_PATTERNS
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn bash(command: &str) -> ToolCall {
        call("Bash", json!({ "command": command }))
    }

    /// What the Watch does with a session's calls: the verdict of each.
    fn verdicts(calls: &[ToolCall], window: usize, repeat: usize) -> Vec<Option<Reason>> {
        let p = default_patterns();
        let mut d = RepeatDetector::new(window, repeat);
        calls.iter().map(|c| d.observe(&judge(c, &p))).collect()
    }

    /// Issue 40: `sleep 0` waits for nothing, so this is the same read
    /// eight times. Before the fix `is_polling` saw the word `sleep` and
    /// exempted every one of them (all eight verdicts were `None`).
    #[test]
    fn issue_40_sleep_0_then_the_same_read_eight_times_is_stuck() {
        let calls = vec![bash("sleep 0; cat lager.py"); 8];
        assert!(!is_polling(&calls[0], &default_patterns()));
        let v = verdicts(&calls, 5, 3);
        assert_eq!(v[..2], [None, None]);
        assert_eq!(v[2], Some(Reason::StuckRepeat), "{v:?}");
        // The hook nudges at the same call.
        let mut nudger = Nudger::new(NudgeSettings {
            window: 5,
            repeat: 3,
            poll_patterns: default_patterns(),
            escalate: None,
        });
        let nudges: Vec<bool> = calls
            .iter()
            .map(|c| nudger.observe("s", c).is_some())
            .collect();
        assert_eq!(nudges[..3], [false, false, true], "{nudges:?}");
    }

    #[test]
    fn trivially_varied_repeats_are_one_call() {
        let calls: Vec<ToolCall> = [
            "cat lager.py",
            "sleep 0;  cat 'lager.py'",
            "true && env X=1 timeout 30 \"cat\" lager.py",
        ]
        .iter()
        .map(|c| bash(c))
        .collect();
        assert_eq!(
            verdicts(&calls, 5, 3),
            [None, None, Some(Reason::StuckRepeat)]
        );
        // The journal still records each call as it was.
        assert_ne!(call_hash(&calls[0]), call_hash(&calls[1]));
    }

    #[test]
    fn waiting_for_a_server_or_a_log_is_never_stuck() {
        for poll in [
            "sleep 5; curl -s localhost:8000/health",
            "tail -f build.log",
            "until curl -sf localhost:8000/health; do sleep 1; done",
        ] {
            let v = verdicts(&vec![bash(poll); 10], 5, 3);
            assert!(v.iter().all(Option::is_none), "{poll}: {v:?}");
        }
        let background = call(
            "Bash",
            json!({"command": "cat lager.py", "run_in_background": true}),
        );
        assert!(verdicts(&vec![background; 10], 5, 3)
            .iter()
            .all(Option::is_none));
    }

    #[test]
    fn a_test_rerun_after_each_edit_is_not_stuck() {
        let codex = |id: u32, patch: String| {
            crate::agent::Agent::tool_call(
                &crate::agent::codex::Codex,
                format!("c{id}"),
                "apply_patch".into(),
                json!({ "input": patch }),
            )
        };
        let mut calls = Vec::new();
        for i in 0..4 {
            calls.push(bash("pytest -q"));
            calls.push(call(
                "Edit",
                json!({"file_path": "/r/lager.py", "old_string": format!("v{i}"), "new_string": format!("v{}", i + 1)}),
            ));
            calls.push(bash("pytest -q"));
            calls.push(codex(
                i,
                format!(
                    "*** Begin Patch\n*** Update File: lager.py\n@@\n-w{i}\n+w{}\n*** End Patch",
                    i + 1
                ),
            ));
            calls.push(bash("pytest -q > out.txt 2>&1; tail -n 30 out.txt"));
            calls.push(bash(&format!("sed -i 's/x{i}/x{}/' lager.py", i + 1)));
            calls.push(bash("pytest -q > out.txt 2>&1; tail -n 30 out.txt"));
        }
        let v = verdicts(&calls, 5, 3);
        assert!(v.iter().all(Option::is_none), "{v:?}");
        // Without the edits, the third run is stuck.
        let runs = vec![bash("pytest -q"); 3];
        assert_eq!(verdicts(&runs, 5, 3)[2], Some(Reason::StuckRepeat));
    }

    mod properties {
        //! Trivial variation never hides a repeat; honest polling and a
        //! re-run after an edit never stop.

        use super::*;
        use proptest::prelude::*;

        /// Commands that neither wait nor wrap nor do nothing.
        const NAMES: &[&str] = &[
            "cat", "pytest", "python3", "grep", "ls", "cargo", "npm", "git", "make", "ruff",
            "node", "go",
        ];
        /// Wrappers, as words (an assignment is never quoted: quoted, it
        /// is a command's name).
        const WRAPPERS: &[&[&str]] = &[
            &[],
            &[],
            &["env"],
            &["env", "X=1"],
            &["env", "-i", "Y=2"],
            &["X=1"],
            &["timeout", "30"],
            &["timeout", "-s", "KILL", "5m"],
            &["nice", "-n", "5"],
            &["nice"],
            &["command"],
            &["nohup"],
            &["stdbuf", "-oL"],
            &["ionice", "-c", "3"],
            &["timeout", "30", "nice", "-n", "5", "env", "X=1"],
        ];
        /// No-op list elements with the operator that follows them.
        const NOOP_PREFIXES: &[&str] = &[
            "sleep 0;",
            "sleep 0.0 ; ",
            "true && ",
            ": ;",
            "cd . && ",
            "true\n",
        ];
        const NOOPS: &[&str] = &["true", ":", "sleep 0", "cd ."];
        const SPACES: &[&str] = &[" ", "  ", "\t", " \t ", " \\\n "];
        const SUFFIXES: &[&str] = &["", "", " ; true", " || true", "\n", " # again", ";"];
        /// Redirections of the last command, each in spellings that mean
        /// the same (the first is the base's).
        const REDIRECTS: &[&[&str]] = &[
            &[
                " > out.txt 2>&1",
                " >out.txt 2>&1",
                " 1> 'out.txt'  2>&1",
                ">\"out.txt\" 2>&1",
            ],
            &[" 2>&1", "  2>&1", "\t2>&1"],
            &[" > /dev/null", " >/dev/null", " 1>/dev/null"],
        ];
        /// Test runs: what an agent re-runs after each edit.
        const TEST_RUNS: &[&[&str]] = &[
            &["pytest"],
            &["python3", "-m", "pytest"],
            &["cargo", "test"],
            &["npm", "test"],
            &["go", "test", "./..."],
            &["make", "test"],
        ];
        const JOINTS: &[&str] = &["&&", ";", "|", "||"];

        /// A base command: one to three simple commands joined by `&&`,
        /// `;`, `|` or `||`, the last one maybe redirected.
        #[derive(Debug, Clone)]
        struct Base {
            commands: Vec<Vec<String>>,
            joints: Vec<&'static str>,
            redirect: Option<&'static [&'static str]>,
        }

        impl Base {
            fn text(&self) -> String {
                let mut out = self.commands[0].join(" ");
                for (joint, command) in self.joints.iter().zip(&self.commands[1..]) {
                    out.push_str(&format!(" {joint} {}", command.join(" ")));
                }
                out.push_str(self.redirect.map_or("", |r| r[0]));
                out
            }
        }

        fn args() -> impl Strategy<Value = Vec<String>> {
            prop::collection::vec("[a-zA-Z0-9_./-]{1,8}", 0..4)
        }

        fn redirect() -> impl Strategy<Value = Option<&'static [&'static str]>> {
            prop::option::of(prop::sample::select(REDIRECTS))
        }

        /// A test run (with arguments, maybe redirected), as a [`Base`].
        fn test_run() -> impl Strategy<Value = Base> {
            (prop::sample::select(TEST_RUNS), args(), redirect()).prop_map(
                |(run, args, redirect)| Base {
                    commands: vec![run.iter().map(|w| w.to_string()).chain(args).collect()],
                    joints: Vec::new(),
                    redirect,
                },
            )
        }

        fn base() -> impl Strategy<Value = Base> {
            let command = (prop::sample::select(NAMES), args()).prop_map(|(name, args)| {
                std::iter::once(name.to_owned())
                    .chain(args)
                    .collect::<Vec<_>>()
            });
            prop::collection::vec(command, 1..=3)
                .prop_flat_map(|commands| {
                    let joints =
                        prop::collection::vec(prop::sample::select(JOINTS), commands.len() - 1);
                    (Just(commands), joints)
                })
                .prop_flat_map(|(commands, joints)| (Just(commands), Just(joints), redirect()))
                .prop_map(|(commands, joints, redirect)| Base {
                    commands,
                    joints,
                    redirect,
                })
        }

        /// Random choices, read off a tape (shrinks with the tape).
        struct Tape<'a> {
            bytes: &'a [u8],
            at: usize,
        }

        impl Tape<'_> {
            fn pick<T: Copy>(&mut self, from: &[T]) -> T {
                let b = self.bytes[self.at % self.bytes.len()];
                self.at += 1;
                from[usize::from(b) % from.len()]
            }
        }

        fn tape() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(any::<u8>(), 1..96)
        }

        /// One word, quoted one of the ways that keep its value: as is,
        /// `'w'`, `"w"`, `\w\o\r\d`, or quoted from a cut on.
        fn quote(word: &str, t: &mut Tape) -> String {
            match t.pick(&[0, 1, 2, 3, 4]) {
                0 => word.to_owned(),
                1 => format!("'{word}'"),
                2 => format!("\"{word}\""),
                3 => word.chars().map(|c| format!("\\{c}")).collect(),
                _ => {
                    let cut = t.pick(&(0..=word.len()).collect::<Vec<_>>());
                    format!("{}'{}'", &word[..cut], &word[cut..])
                }
            }
        }

        fn words(words: &[&str], t: &mut Tape, out: &mut String) {
            for w in words {
                let quoted = if w.contains('=') {
                    (*w).to_owned()
                } else {
                    quote(w, t)
                };
                out.push_str(&quoted);
                out.push_str(t.pick(SPACES));
            }
        }

        /// `base`, trivially varied: no-op elements before, between and
        /// after, wrappers, whitespace, quoting.
        fn variant(base: &Base, t: &mut Tape) -> String {
            let mut out = String::from(t.pick(&["", " ", "\n"]));
            for _ in 0..t.pick(&[0, 0, 1, 2]) {
                out.push_str(t.pick(NOOP_PREFIXES));
                out.push_str(t.pick(SPACES));
            }
            for (i, command) in base.commands.iter().enumerate() {
                if i > 0 {
                    let joint = base.joints[i - 1];
                    out.push_str(joint);
                    out.push_str(t.pick(SPACES));
                    if matches!(joint, "&&" | ";") && t.pick(&[false, false, true]) {
                        out.push_str(t.pick(NOOPS));
                        out.push_str(&format!(" {joint} "));
                    }
                }
                words(t.pick(WRAPPERS), t, &mut out);
                let argv: Vec<&str> = command.iter().map(String::as_str).collect();
                words(&argv, t, &mut out);
            }
            if let Some(spellings) = base.redirect {
                out.push_str(t.pick(spellings));
            }
            out.push_str(t.pick(SUFFIXES));
            out
        }

        /// A wait, then a look (or a loop that waits between looks).
        fn poll() -> impl Strategy<Value = String> {
            let file = "[a-z]{1,8}\\.(log|txt|json)";
            let port = 1024u16..65535;
            let wait = (1u32..600, prop::sample::select(&["", "s", "m", ".5"][..]))
                .prop_map(|(n, unit)| format!("sleep {n}{unit}"));
            let look = prop_oneof![
                file.prop_map(|f| format!("cat {f}")),
                file.prop_map(|f| format!("tail -n 50 {f}")),
                file.prop_map(|f| format!("test -f {f}")),
                port.clone()
                    .prop_map(|p| format!("curl -s localhost:{p}/health")),
                Just("git status --short".to_owned()),
                Just("ls -la out/".to_owned()),
                Just("ps aux | grep -v grep | grep server".to_owned()),
                Just("pgrep -f uvicorn".to_owned()),
            ];
            let sep = prop::sample::select(&["; ", " && ", "\n"][..]);
            prop_oneof![
                (wait.clone(), sep, look).prop_map(|(w, s, l)| format!("{w}{s}{l}")),
                (port.clone(), 1u32..10).prop_map(|(p, n)| format!(
                    "until curl -sf localhost:{p}/health; do sleep {n}; done"
                )),
                (file, 1u32..10)
                    .prop_map(|(f, n)| format!("while ! test -f {f}; do sleep {n}; done; cat {f}")),
                file.prop_map(|f| format!("tail -f {f}")),
                port.prop_map(|p| format!(
                    "timeout 120 bash -c 'until curl -s localhost:{p}; do sleep 1; done'"
                )),
                wait,
                Just("wait".to_owned()),
            ]
        }

        /// A window and a repeat count: K of W.
        fn k_of_w() -> impl Strategy<Value = (usize, usize)> {
            (2usize..=4).prop_flat_map(|k| (Just(k), k..=8))
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// K trivially varied repeats of a command hash alike and stop.
            #[test]
            fn trivially_varied_repeats_stop(base in base(), bytes in tape(), (k, w) in k_of_w()) {
                let p = default_patterns();
                let want = judge(&bash(&base.text()), &p);
                prop_assert!(!want.polling, "{:?}", base.text());
                let mut t = Tape { bytes: &bytes, at: 0 };
                let mut d = RepeatDetector::new(w, k);
                for i in 1..=k {
                    let text = variant(&base, &mut t);
                    let got = judge(&bash(&text), &p);
                    prop_assert_eq!(&got.repeat_hash, &want.repeat_hash, "{:?} vs {:?}", text, base.text());
                    let verdict = d.observe(&got);
                    prop_assert_eq!(verdict, (i == k).then_some(Reason::StuckRepeat), "{:?}", text);
                }
            }

            /// Honest polling is polling, and never stops, however long.
            #[test]
            fn honest_polling_never_stops(poll in poll(), (k, w) in k_of_w()) {
                let c = bash(&poll);
                prop_assert!(is_polling(&c, &default_patterns()), "{:?}", poll);
                let v = verdicts(&vec![c; 3 * w], w, k);
                prop_assert!(v.iter().all(Option::is_none), "{:?}", poll);
            }

            /// Running the tests (however varied) after each edit never
            /// stops, whatever the edits are made with.
            #[test]
            fn a_rerun_after_each_edit_never_stops(
                run in test_run(),
                bytes in tape(),
                edits in prop::collection::vec(0u8..4, 1..12),
                (k, w) in k_of_w(),
            ) {
                let mut t = Tape { bytes: &bytes, at: 0 };
                let mut calls = Vec::new();
                for (i, how) in edits.iter().enumerate() {
                    calls.push(bash(&variant(&run, &mut t)));
                    calls.push(match how {
                        0 => call("Edit", json!({"file_path": "/r/a.py", "old_string": format!("v{i}"), "new_string": format!("v{}", i + 1)})),
                        1 => call("Write", json!({"file_path": "/r/a.py", "content": format!("v{i}")})),
                        2 => call("Read", json!({"file_path": "/r/a.py"})),
                        _ => bash(&format!("sed -i 's/v{i}/v{}/' a.py", i + 1)),
                    });
                    if *how == 2 {
                        // A look at the file, then the edit.
                        calls.push(call("Edit", json!({"file_path": "/r/a.py", "old_string": format!("v{i}"), "new_string": format!("v{}", i + 1)})));
                    }
                }
                let v = verdicts(&calls, w, k);
                prop_assert!(v.iter().all(Option::is_none), "{:?}", v);
            }
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
