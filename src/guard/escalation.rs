//! The agent's approved exit: `loopd escalate --test ID --reason TEXT`.
//!
//! An agent facing a task it cannot do honestly — a test that contradicts
//! the specification — either cheats or burns the remaining attempts, unless
//! it has a way to say so. `loopd escalate`, run from the agent's Bash tool,
//! tells the job's gateway (the one channel from the sandbox to loopd,
//! authenticated by the session's token — so only the job's own agent
//! session can); loopd journals it, stops the session, runs every gate on
//! the change the agent left (a tamper finding ends the job with its own
//! reason, escalation or not) and ends with `needs_human` (`escalated`). An
//! escalation is never accepted as a fix; the work is parked like any other
//! ending but acceptance, and `loopd resume JOB --note TEXT` carries the
//! human's answer into the next attempt.
//!
//! `[guard] escalation = false` in `loopd.toml` takes the exit away: the
//! gateway refuses it, and the prompt has no paragraph and the agent no
//! permission for the command.

use std::path::Path;

/// The command line the agent runs, as the prompt shows it.
pub fn command(loopd_exe: &Path) -> String {
    format!(
        "{} escalate",
        crate::util::shell_quote(&loopd_exe.to_string_lossy())
    )
}

/// The permission rule that lets the agent's Bash tool run it.
pub fn allowed_tool(loopd_exe: &Path) -> String {
    format!("Bash({} *)", command(loopd_exe))
}

/// The paragraph of the first prompt that explains the exit.
pub fn paragraph(loopd_exe: &Path) -> String {
    format!(
        "If the task cannot be done honestly — for example a test contradicts the specification or the docstring — do not special-case, skip or weaken anything. Run `{} --test <test id> --reason \"<why, quoting the spec>\"` instead: the job then ends, a human decides, and an escalation is never counted as a fix.",
        command(loopd_exe)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_allows_exactly_the_command() {
        let exe = Path::new("/opt/loopd/bin/loopd");
        assert_eq!(allowed_tool(exe), "Bash(/opt/loopd/bin/loopd escalate *)");
        assert!(paragraph(exe).contains("`/opt/loopd/bin/loopd escalate --test <test id>"));
    }
}
