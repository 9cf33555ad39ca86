//! The page itself: HTML with the stylesheet inline and the cost chart as
//! inline SVG. Every string from the job goes through [`escape`] (or
//! [`prose`], which escapes first); the only markup is what this file writes.

use std::fmt::Write as _;

use super::timeline::{AttemptTimeline, PhaseKind};
use super::{CacheTokens, Inputs, MARKER};
use crate::journal::AttemptEnd;
use crate::outcome::Outcome;
use crate::record::AttemptRecord;
use crate::report::{work_back, Branch, WorkBack};

pub(super) const CSS: &str = include_str!("style.css");

/// The most of one goal step's output the page shows.
const MAX_OUTPUT: usize = 16 * 1024;

/// Escape text for HTML content and attribute values (`&`, `<`, `>`, both
/// quotes): whatever the agent wrote stays text.
pub fn escape(s: &str) -> String {
    // Control characters and direction overrides first, as `\u{..}`: text
    // an agent wrote cannot reorder what the page shows or hide in it.
    let s = crate::util::printable(s);
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escaped text with `` `code` `` spans shown as code (loopd's sentences
/// quote commands and paths that way).
fn prose(s: &str) -> String {
    let escaped = escape(s);
    let parts: Vec<&str> = escaped.split('`').collect();
    if parts.len() < 3 {
        return escaped;
    }
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        let last = i == parts.len() - 1;
        match (i % 2 == 1, last) {
            (true, false) => {
                out.push_str("<code>");
                out.push_str(p);
                out.push_str("</code>");
            }
            // An unpaired backtick stays one.
            (true, true) => {
                out.push('`');
                out.push_str(p);
            }
            (false, _) => out.push_str(p),
        }
    }
    out
}

pub(super) fn usd(x: f64) -> String {
    format!("${x:.4}")
}

pub(super) fn ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {:02} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// `18000` → `18,000`.
pub(super) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn outcome_class(o: Outcome) -> &'static str {
    match o {
        Outcome::Accepted => "accepted",
        Outcome::Exhausted => "exhausted",
        Outcome::Stopped => "stopped",
        Outcome::Interrupted => "interrupted",
        Outcome::Error => "error",
        Outcome::NothingToFix => "nothing-to-fix",
        Outcome::NeedsHuman => "needs-human",
    }
}

/// The badge class an outcome is shown with.
pub(super) fn outcome_badge(o: Outcome) -> &'static str {
    match o {
        Outcome::Accepted => "ok",
        Outcome::Exhausted | Outcome::NeedsHuman => "warn",
        Outcome::Interrupted | Outcome::NothingToFix => "info",
        Outcome::Stopped | Outcome::Error => "fail",
    }
}

/// How an attempt ended: a CSS class and a few words.
fn attempt_state(
    inputs: &Inputs,
    a: &AttemptRecord,
    t: Option<&AttemptTimeline>,
) -> (&'static str, String) {
    if let Some(r) = a.stopped {
        return ("stopped", format!("stopped: {r}"));
    }
    match t.and_then(|t| t.end.as_ref()) {
        Some(AttemptEnd::Accepted) => return ("accepted", "accepted".into()),
        Some(AttemptEnd::Stopped { ending }) => {
            return ("stopped", format!("stopped: {}", ending.reason))
        }
        Some(AttemptEnd::Rejected { .. }) | None => {}
    }
    let last = inputs.summary.attempts.last().map(|l| l.n) == Some(a.n);
    if last && inputs.summary.outcome == Outcome::Accepted {
        return ("accepted", "accepted".into());
    }
    let why = match (a.rejected_by, a.goal_passed, a.failed_step.as_deref()) {
        (Some(r), _, _) => format!("rejected: {r}"),
        (None, false, Some(step)) => format!("rejected: goal red at `{step}`"),
        (None, false, None) => "rejected: goal not run".into(),
        (None, true, _) => format!("rejected: critic {}", a.critic),
    };
    ("rejected", why)
}

fn goal_text(a: &AttemptRecord) -> String {
    if a.goal_passed {
        "<span class=\"ok-text\">green</span>".into()
    } else {
        match a.failed_step.as_deref() {
            Some(step) => format!(
                "<span class=\"fail-text\">red at <code>{}</code></span>",
                escape(step)
            ),
            None => "<span class=\"muted\">not run</span>".into(),
        }
    }
}

fn critic_badge(label: &str) -> String {
    let class = match label {
        "PASS" => "ok",
        "FAIL" | "invalid" => "fail",
        _ => "info",
    };
    format!("<span class=\"badge {class}\">{}</span>", escape(label))
}

/// The whole page.
pub fn render(inputs: &Inputs) -> String {
    let s = &inputs.summary;
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n{MARKER}: written by loopd; `loopd report --html` may replace this file -->\n\
         <html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"color-scheme\" content=\"light dark\">\n\
         <meta name=\"generator\" content=\"loopd {}\">\n\
         <title>loopd {}: {}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n",
        env!("CARGO_PKG_VERSION"),
        escape(&s.job_id),
        s.outcome_word(),
    );
    header(&mut h, inputs);
    work_back_section(&mut h, inputs);
    attempts_table(&mut h, inputs);
    cost_chart(&mut h, inputs);
    baseline(&mut h, inputs);
    for a in &s.attempts {
        attempt_section(&mut h, inputs, a);
    }
    // Attempts the journal saw start but the summary does not list (the job
    // ended mid-attempt): their timeline is all there is.
    for (n, t) in &inputs.timelines {
        if !s.attempts.iter().any(|a| a.n == *n) {
            let _ = write!(
                h,
                "<section class=\"attempt unfinished\" id=\"attempt-{n}\">\n\
                 <h2>Attempt {n} <span class=\"badge info\">did not end</span></h2>\n"
            );
            timeline_table(&mut h, t);
            h.push_str("</section>\n");
        }
    }
    let _ = write!(
        h,
        "<footer>Written by loopd {} from <code>{}</code>. One file: no network, no script.</footer>\n\
         </body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        escape(&s.run_dir.to_string_lossy())
    );
    h
}

fn header(h: &mut String, inputs: &Inputs) {
    let s = &inputs.summary;
    let word = s.outcome_word();
    let badge = outcome_badge(s.outcome);
    let _ = write!(
        h,
        "<header class=\"outcome outcome-{cls}\" id=\"outcome\">\n\
         <h1>loopd job <code>{id}</code></h1>\n\
         <p class=\"verdict\"><span class=\"badge {badge}\" id=\"outcome-word\">{word}</span> \
         <code id=\"reason\">{reason}</code> — <span id=\"detail\">{detail}</span></p>\n\
         <dl class=\"facts\">\n",
        cls = outcome_class(s.outcome),
        id = escape(&s.job_id),
        reason = escape(s.reason.as_str()),
        detail = prose(&s.detail),
    );
    let mut fact = |k: &str, v: String| {
        let _ = writeln!(h, "<dt>{k}</dt><dd>{v}</dd>");
    };
    fact(
        "repository",
        format!("<code>{}</code>", escape(&s.repo.to_string_lossy())),
    );
    fact("BASE_REF", format!("<code>{}</code>", escape(&s.base_ref)));
    if let Some(b) = &inputs.branch {
        fact("branch", format!("<code>{}</code>", escape(&b.branch)));
    }
    fact(
        "task",
        format!("<span class=\"task\">{}</span>", escape(&s.task)),
    );
    fact(
        "when",
        format!(
            "{} → {} ({})",
            escape(&s.started_at),
            escape(&s.finished_at),
            ms(s.totals.wall_ms)
        ),
    );
    let budget = match inputs.budget_usd {
        Some(b) if b > 0.0 => format!(
            " of {} budget ({:.0}%)",
            usd(b),
            s.totals.cost_usd / b * 100.0
        ),
        _ => String::new(),
    };
    fact(
        "cost",
        format!(
            "{}{budget} · {} turns · {} input / {} output tokens",
            usd(s.totals.cost_usd),
            s.totals.turns,
            count(s.totals.input_tokens),
            count(s.totals.output_tokens)
        ),
    );
    let of = inputs
        .max_attempts
        .map(|m| format!(" of {m}"))
        .unwrap_or_default();
    fact("attempts", format!("{}{of}", s.attempts.len()));
    h.push_str("</dl>\n</header>\n");
}

fn work_back_section(h: &mut String, inputs: &Inputs) {
    let s = &inputs.summary;
    h.push_str("<section id=\"work-back\">\n<h2>Getting the work back</h2>\n");
    let branch = inputs.branch.as_ref().map(|b| Branch {
        branch: &b.branch,
        commit_accepted: b.commit_accepted.as_deref(),
    });
    match work_back(branch.as_ref(), s, inputs.failure.as_ref()) {
        WorkBack::Parked { restore } => {
            let _ = write!(
                h,
                "<p>The work is parked in a stash (pinned by <code>refs/loopd/stash/{}</code>, \
                 untracked files included). Restore it with:</p>\n\
                 <pre class=\"cmd\" id=\"restore\"><code>{}</code></pre>\n",
                escape(&s.job_id),
                escape(&restore)
            );
        }
        WorkBack::NotParked { restore } => {
            let _ = writeln!(h, "<p id=\"restore\">{}</p>", prose(&restore));
        }
        WorkBack::Committed { branch, merge } => {
            let commit = inputs
                .branch
                .as_ref()
                .and_then(|b| b.commit_accepted.as_deref())
                .map(|c| format!(" (commit <code>{}</code>)", escape(c)))
                .unwrap_or_default();
            let _ = write!(
                h,
                "<p>The change is committed on <code>{}</code>{commit}. Merge it with:</p>\n\
                 <pre class=\"cmd\" id=\"restore\"><code>{}</code></pre>\n",
                escape(&branch),
                escape(&merge)
            );
        }
        WorkBack::WorkingTree => {
            let _ = writeln!(
                h,
                "<p id=\"restore\">The change is in the working tree of <code>{}</code>.</p>",
                escape(&s.repo.to_string_lossy())
            );
        }
    }
    if let Some((branch, commit)) = &inputs.pushed {
        let _ = writeln!(
            h,
            "<p>Pushed <code>{}</code> to <code>{}</code>.</p>",
            escape(commit),
            escape(branch)
        );
    }
    if let Some((number, url)) = &inputs.pull_request {
        // A link only to where a pull request can be; anything else is text.
        let shown = if url.starts_with("https://") {
            format!("<a href=\"{0}\">{0}</a>", escape(url))
        } else {
            format!("<code>{}</code>", escape(url))
        };
        let _ = writeln!(
            h,
            "<p id=\"pull-request\">Pull request #{number}: {shown}</p>"
        );
    }
    let _ = writeln!(
        h,
        "<p class=\"muted\">Every file of the job: <code>{}</code></p>\n</section>",
        escape(&s.run_dir.to_string_lossy())
    );
}

fn attempts_table(h: &mut String, inputs: &Inputs) {
    let s = &inputs.summary;
    h.push_str("<section id=\"attempts\">\n<h2>Attempts</h2>\n");
    if s.attempts.is_empty() {
        h.push_str("<p class=\"muted\">No attempt ran.</p>\n</section>\n");
        return;
    }
    h.push_str(
        "<table class=\"attempts\">\n<thead><tr><th>attempt</th><th>ended</th><th>goal test</th>\
         <th>gates</th><th>critic</th><th class=\"num\">cost</th><th class=\"num\">turns</th>\
         <th class=\"num\">input</th><th class=\"num\">output</th><th class=\"num\">cache read</th>\
         <th class=\"num\">cache write</th><th class=\"num\">took</th></tr></thead>\n<tbody>\n",
    );
    let mut cache_total = None::<CacheTokens>;
    for a in &s.attempts {
        let t = inputs.timelines.get(&a.n);
        let (class, state) = attempt_state(inputs, a, t);
        let gates = match a.rejected_by {
            Some(r) => format!("<span class=\"fail-text\">{}</span>", escape(r.as_str())),
            None => "passed".into(),
        };
        let cache = inputs.cache.get(&a.n);
        if let Some(c) = cache {
            let tot = cache_total.get_or_insert_with(CacheTokens::default);
            tot.read += c.read;
            tot.write += c.write;
        }
        let (read, write) = match cache {
            Some(c) => (count(c.read), count(c.write)),
            None => ("—".into(), "—".into()),
        };
        let took = t.map_or("—".into(), |t| ms(t.duration_ms()));
        let _ = writeln!(
            h,
            "<tr class=\"attempt-row {class}\" id=\"attempt-row-{n}\" data-attempt=\"{n}\">\
             <td><a href=\"#attempt-{n}\">{n}</a></td><td>{state}</td><td>{goal}</td><td>{gates}</td>\
             <td>{critic}</td><td class=\"num\">{cost}</td><td class=\"num\">{turns}</td>\
             <td class=\"num\">{input}</td><td class=\"num\">{output}</td><td class=\"num\">{read}</td>\
             <td class=\"num\">{write}</td><td class=\"num\">{took}</td></tr>",
            n = a.n,
            state = prose(&state),
            goal = goal_text(a),
            critic = critic_badge(&a.critic),
            cost = usd(a.cost_usd),
            turns = a.turns,
            input = count(a.input_tokens),
            output = count(a.output_tokens),
        );
    }
    let (read, write) = match cache_total {
        Some(c) => (count(c.read), count(c.write)),
        None => ("—".into(), "—".into()),
    };
    let _ = write!(
        h,
        "</tbody>\n<tfoot><tr><td>total</td><td></td><td></td><td></td><td></td>\
         <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td><td class=\"num\">{read}</td><td class=\"num\">{write}</td>\
         <td class=\"num\">{}</td></tr></tfoot>\n</table>\n",
        usd(s.totals.cost_usd),
        s.totals.turns,
        count(s.totals.input_tokens),
        count(s.totals.output_tokens),
        ms(s.totals.wall_ms)
    );
    h.push_str(
        "<p class=\"muted\">Tokens and cost include the critic. Cache reads and writes come from \
         the CLI's result events; “—” means its stream log is not there.</p>\n</section>\n",
    );
}

/// Each attempt's cost as a bar that starts where the previous attempt's
/// ended, so the last bar ends at the total and the dashed line is the
/// budget the whole job had: how close the job came to it, at a glance.
fn cost_chart(h: &mut String, inputs: &Inputs) {
    const LEFT: f64 = 100.0;
    const WIDTH: f64 = 760.0;
    const PLOT: f64 = 470.0;
    const TOP: f64 = 26.0;
    const ROW: f64 = 28.0;
    const BAR: f64 = 18.0;
    let s = &inputs.summary;
    h.push_str("<section id=\"cost\">\n<h2>Cost against the budget</h2>\n");
    let spent: f64 = s
        .attempts
        .iter()
        .map(|a| a.cost_usd)
        .sum::<f64>()
        .max(s.totals.cost_usd);
    let budget = inputs.budget_usd.filter(|b| *b > 0.0);
    let max = budget.unwrap_or(0.0).max(spent);
    let max = if max > 0.0 { max } else { 1.0 };
    let x = |v: f64| LEFT + v.max(0.0) / max * PLOT;
    let rows = s.attempts.len() as f64 + 1.0;
    let height = TOP + rows * ROW + 8.0;
    let _ = writeln!(
        h,
        "<svg class=\"chart\" id=\"cost-chart\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" \
         aria-label=\"cost per attempt against the budget\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    let _ = writeln!(
        h,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{}\" y2=\"{}\"/>",
        TOP - 6.0,
        height - 4.0
    );
    let mut offset = 0.0;
    for (i, a) in s.attempts.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        let t = inputs.timelines.get(&a.n);
        let (class, _) = attempt_state(inputs, a, t);
        let width = (x(offset + a.cost_usd) - x(offset)).max(0.0);
        let _ = write!(
            h,
            "<g class=\"cost-row\" id=\"cost-row-{n}\">\
             <text x=\"{lx}\" y=\"{ty:.1}\" text-anchor=\"end\">attempt {n}</text>\
             <rect class=\"cost-bar {class}\" id=\"cost-bar-{n}\" data-attempt=\"{n}\" data-cost-usd=\"{cost}\" \
             x=\"{bx:.2}\" y=\"{y:.1}\" width=\"{width:.2}\" height=\"{BAR}\" rx=\"2\">\
             <title>attempt {n}: {shown}</title></rect>",
            n = a.n,
            lx = LEFT - 8.0,
            ty = y + BAR - 5.0,
            cost = a.cost_usd,
            bx = x(offset),
            shown = usd(a.cost_usd),
        );
        // The critic's share, at the bar's end (it ran last).
        let critic = t.map_or(0.0, |t| t.critic_cost_usd).min(a.cost_usd);
        if critic > 0.0 {
            let cw = x(offset + a.cost_usd) - x(offset + a.cost_usd - critic);
            let _ = write!(
                h,
                "<rect class=\"cost-critic\" x=\"{:.2}\" y=\"{y:.1}\" width=\"{cw:.2}\" height=\"{BAR}\" rx=\"2\">\
                 <title>critic: {}</title></rect>",
                x(offset + a.cost_usd) - cw,
                usd(critic)
            );
        }
        let _ = writeln!(
            h,
            "<text class=\"value\" x=\"{:.2}\" y=\"{:.1}\">{}</text></g>",
            x(offset + a.cost_usd) + 6.0,
            y + BAR - 5.0,
            usd(a.cost_usd)
        );
        offset += a.cost_usd;
    }
    let y = TOP + s.attempts.len() as f64 * ROW;
    let of_budget = budget
        .map(|b| format!(" of {} ({:.0}%)", usd(b), s.totals.cost_usd / b * 100.0))
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "<g id=\"cost-total-row\"><text x=\"{lx}\" y=\"{ty:.1}\" text-anchor=\"end\">total</text>\
         <rect class=\"cost-total\" x=\"{LEFT}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{BAR}\" rx=\"2\"/>\
         <text class=\"value\" x=\"{vx:.2}\" y=\"{ty:.1}\">{total}{of_budget}</text></g>",
        lx = LEFT - 8.0,
        ty = y + BAR - 5.0,
        w = x(s.totals.cost_usd) - LEFT,
        vx = x(s.totals.cost_usd) + 6.0,
        total = usd(s.totals.cost_usd),
    );
    if let Some(b) = budget {
        let bx = x(b);
        let _ = writeln!(
            h,
            "<line class=\"budget-line\" id=\"budget-line\" data-budget-usd=\"{b}\" x1=\"{bx:.2}\" x2=\"{bx:.2}\" \
             y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"budget-label\" x=\"{bx:.2}\" y=\"12\" \
             text-anchor=\"middle\">budget {}</text>",
            TOP - 8.0,
            height - 4.0,
            usd(b)
        );
    }
    h.push_str("</svg>\n");
    h.push_str(
        "<p class=\"legend\"><span><span class=\"swatch agent\"></span>agent</span>\
         <span><span class=\"swatch critic\"></span>critic</span>",
    );
    match budget {
        Some(_) => {
            h.push_str("<span><span class=\"swatch budget\"></span>budget (the whole job)</span>")
        }
        None => h.push_str("<span>budget unknown (no <code>job.json</code>)</span>"),
    }
    h.push_str("</p>\n</section>\n");
}

fn baseline(h: &mut String, inputs: &Inputs) {
    let Some(b) = &inputs.baseline else {
        return;
    };
    h.push_str(
        "<section id=\"baseline\">\n<h2>Baseline: the goal test before attempt 1</h2>\n\
         <table class=\"steps\"><thead><tr><th>step</th><th>command</th><th>result</th>\
         <th class=\"num\">took</th></tr></thead>\n<tbody>\n",
    );
    for st in &b.steps {
        let result = match (st.passed, st.timed_out, st.exit_code) {
            (true, _, _) => "<span class=\"ok-text\">passed</span>".to_owned(),
            (false, true, _) => "<span class=\"fail-text\">timed out</span>".to_owned(),
            (false, false, Some(c)) => format!("<span class=\"fail-text\">exit {c}</span>"),
            (false, false, None) => "<span class=\"fail-text\">killed</span>".to_owned(),
        };
        let _ = writeln!(
            h,
            "<tr class=\"step\"><td><code>{}</code></td><td><code>{}</code></td><td>{result}</td>\
             <td class=\"num\">{}</td></tr>",
            escape(&st.name),
            escape(&st.command),
            ms(st.duration_ms)
        );
    }
    h.push_str("</tbody></table>\n");
    for (step, why) in &inputs.summary.test_count_off {
        let _ = writeln!(
            h,
            "<p class=\"fail-text\"><strong>The test-count gate was off for <code>{}</code></strong>: {}</p>",
            escape(step),
            escape(why)
        );
    }
    if let Some(line) = crate::report::suite_line(&inputs.summary) {
        let _ = writeln!(h, "<p class=\"suite\">{}</p>", escape(&line));
    }
    if let Some(line) = crate::report::examiner_line(&inputs.summary) {
        let _ = writeln!(h, "<p class=\"examiner\">{}</p>", escape(&line));
    }
    for st in b.steps.iter().filter(|s| !s.output.trim().is_empty()) {
        let _ = writeln!(
            h,
            "<details class=\"patch\"><summary>Output of <code>{}</code></summary>\
             <pre class=\"output\"><code>{}</code></pre></details>",
            escape(&st.name),
            escape(&crate::goal::head_and_tail(
                st.output.trim_end(),
                MAX_OUTPUT
            ))
        );
    }
    h.push_str("</section>\n");
}

fn attempt_section(h: &mut String, inputs: &Inputs, a: &AttemptRecord) {
    let t = inputs.timelines.get(&a.n);
    let (class, state) = attempt_state(inputs, a, t);
    let badge = match class {
        "accepted" => "ok",
        "stopped" => "fail",
        _ => "warn",
    };
    let _ = writeln!(
        h,
        "<section class=\"attempt {class}\" id=\"attempt-{n}\" data-attempt=\"{n}\">\n\
         <h2>Attempt {n} <span class=\"badge {badge}\">{}</span></h2>",
        prose(&state),
        n = a.n
    );
    match t {
        Some(t) => {
            if t.resumed {
                h.push_str("<p class=\"muted\">A later loopd process resumed this attempt from the journal.</p>\n");
            }
            timeline_table(h, t);
        }
        None => {
            h.push_str("<p class=\"muted\">No timeline: no journal entries for this attempt.</p>\n")
        }
    }
    findings(h, a, t);
    // The critic.
    let _ = write!(
        h,
        "<h3>Critic</h3>\n<p class=\"critic\">{}",
        critic_badge(&a.critic)
    );
    if let Some(note) = &a.critic_note {
        let _ = write!(h, " {}", prose(note));
    }
    if a.critic == "skipped" {
        h.push_str(
            " <span class=\"muted\">(not asked: the goal test or a gate decided first)</span>",
        );
    }
    h.push_str("</p>\n");
    if !a.violations.is_empty() {
        h.push_str(
            "<table class=\"violations\"><thead><tr><th>rule</th><th>where</th><th>problem</th>\
             <th>fix</th></tr></thead>\n<tbody>\n",
        );
        for v in &a.violations {
            let _ = writeln!(
                h,
                "<tr class=\"violation\"><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                v.rule,
                escape(&v.file),
                prose(&v.problem),
                prose(&v.fix)
            );
        }
        h.push_str("</tbody></table>\n");
    }
    if !a.scope_warnings.is_empty() {
        let _ = write!(
            h,
            "<p class=\"scope\">Scope warning: changed, but no finding of attempt {} named them:",
            a.n.saturating_sub(1)
        );
        for f in &a.scope_warnings {
            let _ = write!(h, " <code>{}</code>", escape(f));
        }
        h.push_str("</p>\n");
    }
    if !a.allowed_changes.is_empty() {
        h.push_str("<p class=\"allowed\">Changed, allowed by <code>[protect] allow</code> (recorded, not rejected):");
        for f in &a.allowed_changes {
            let _ = write!(h, " <code>{}</code>", escape(f));
        }
        h.push_str("</p>\n");
    }
    let last = inputs.summary.attempts.last().map(|l| l.n) == Some(a.n);
    if let Some(d) = inputs.interdiffs.get(&a.n).filter(|d| !d.trim().is_empty()) {
        let files = if a.interdiff_files.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                a.interdiff_files
                    .iter()
                    .map(|f| format!("<code>{}</code>", escape(f)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        patch(
            h,
            &format!("interdiff-{}", a.n),
            &format!("Interdiff from attempt {}{files}", a.n.saturating_sub(1)),
            d,
            true,
        );
    }
    match inputs.diffs.get(&a.n) {
        Some(d) if !d.trim().is_empty() => {
            patch(h, &format!("diff-{}", a.n), "Diff since BASE_REF", d, last)
        }
        Some(_) => h.push_str("<p class=\"muted\">The agent left no change.</p>\n"),
        None => h.push_str("<p class=\"muted\">No <code>diff.patch</code> for this attempt.</p>\n"),
    }
    h.push_str("</section>\n");
}

fn timeline_table(h: &mut String, t: &AttemptTimeline) {
    let total = t.duration_ms().max(1) as f64;
    let _ = write!(
        h,
        "<h3>Timeline <span class=\"muted\">({})</span></h3>\n\
         <table class=\"timeline\" id=\"timeline-{}\"><thead><tr><th>phase</th><th>result</th>\
         <th class=\"num\">at</th><th class=\"num\">took</th><th></th></tr></thead>\n<tbody>\n",
        ms(t.duration_ms()),
        t.n
    );
    for p in &t.phases {
        let status = match p.passed {
            Some(true) => "ok",
            Some(false) => "fail",
            None => "info",
        };
        let left = p.start_ms as f64 / total * 100.0;
        let width = (p.duration_ms as f64 / total * 100.0)
            .min(100.0 - left)
            .max(0.0);
        let _ = writeln!(
            h,
            "<tr class=\"phase phase-{kind} {status}\"><td>{label}</td><td class=\"result\">{note}</td>\
             <td class=\"num\">{at}</td><td class=\"num\">{took}</td><td class=\"bar\"><div class=\"track\">\
             <span class=\"seg seg-{kind}\" style=\"left:{left:.2}%;width:{width:.2}%\"></span></div></td></tr>",
            kind = p.kind.class(),
            label = prose(&p.label),
            note = prose(&p.note),
            at = ms(p.start_ms),
            took = ms(p.duration_ms),
        );
    }
    if t.phases.is_empty() {
        h.push_str("<tr><td colspan=\"5\" class=\"muted\">no phase recorded</td></tr>\n");
    }
    h.push_str("</tbody></table>\n");
    let kinds = [
        PhaseKind::Agent,
        PhaseKind::Gate,
        PhaseKind::Goal,
        PhaseKind::Critic,
    ];
    h.push_str("<p class=\"legend\">");
    for k in kinds {
        let _ = write!(
            h,
            "<span><span class=\"swatch {0}\"></span>{0}</span>",
            k.class()
        );
    }
    h.push_str("</p>\n");
}

fn findings(h: &mut String, a: &AttemptRecord, t: Option<&AttemptTimeline>) {
    let structured = t.map(|t| (&t.findings, &t.denied));
    match structured {
        Some((found, denied)) if !found.is_empty() || !denied.is_empty() => {
            h.push_str(
                "<h3>Gate findings</h3>\n<table class=\"findings\"><thead><tr><th>gate</th><th>where</th>\
                 <th>rule</th><th>problem</th><th>fix</th></tr></thead>\n<tbody>\n",
            );
            let rows = found
                .iter()
                .map(|(g, f)| (g.label(), f))
                .chain(denied.iter().map(|f| ("hook (denied tool call)", f)));
            for (gate, f) in rows {
                let at = match f.line {
                    Some(l) => format!("{}:{l}", f.path),
                    None => f.path.clone(),
                };
                let rule = f.rule.map(|r| r.to_string()).unwrap_or_default();
                let _ = writeln!(
                    h,
                    "<tr class=\"finding\" data-reason=\"{reason}\"><td>{gate}</td><td><code>{at}</code></td>\
                     <td class=\"num\">{rule}</td><td>{problem}</td><td>{fix}</td></tr>",
                    reason = escape(f.reason.as_str()),
                    gate = prose(gate),
                    at = escape(&at),
                    problem = prose(&f.problem),
                    fix = prose(&f.fix),
                );
            }
            h.push_str("</tbody></table>\n");
        }
        // No journal entries for them: the summary's rendered lines.
        _ if !a.gate_findings.is_empty() => {
            h.push_str("<h3>Gate findings</h3>\n<ul class=\"findings\">\n");
            for f in &a.gate_findings {
                let _ = writeln!(h, "<li class=\"finding\">{}</li>", prose(f));
            }
            h.push_str("</ul>\n");
        }
        _ => {}
    }
    if a.denied_tool_calls > 0 && t.is_none_or(|t| t.denied.is_empty()) {
        let _ = writeln!(
            h,
            "<p>loopd's hook denied {} tool call(s).</p>",
            a.denied_tool_calls
        );
    }
}

/// A patch, each line coloured by what it is.
fn patch(h: &mut String, id: &str, title: &str, text: &str, open: bool) {
    let (mut added, mut removed) = (0usize, 0usize);
    let mut body = String::with_capacity(text.len() + text.len() / 2);
    for line in text.lines() {
        let class = if line.starts_with("diff --git") {
            "file"
        } else if line.starts_with("+++ ")
            || line.starts_with("--- ")
            || line.starts_with("index ")
            || line.starts_with("new file")
            || line.starts_with("deleted file")
            || line.starts_with("old mode")
            || line.starts_with("new mode")
            || line.starts_with("similarity")
            || line.starts_with("rename ")
            || line.starts_with("Binary files")
            || line.starts_with('\\')
        {
            "meta"
        } else if line.starts_with("@@") {
            "hunk"
        } else if line.starts_with('+') {
            added += 1;
            "add"
        } else if line.starts_with('-') {
            removed += 1;
            "del"
        } else {
            "ctx"
        };
        let _ = write!(body, "<span class=\"l {class}\">{}</span>", escape(line));
    }
    let _ = writeln!(
        h,
        "<details class=\"patch\" id=\"{id}\"{open}><summary>{title} \
         <span class=\"muted\">(<span class=\"ok-text\">+{added}</span> \
         <span class=\"fail-text\">−{removed}</span>)</span></summary>\
         <pre class=\"diff\"><code>{body}</code></pre></details>",
        open = if open { " open" } else { "" },
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::{Summary, Totals};
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    pub(crate) fn record(n: u32, cost: f64) -> AttemptRecord {
        AttemptRecord {
            n,
            goal_passed: true,
            held_out_passed: None,
            suite: None,
            examiner_passed: None,
            failed_step: None,
            critic: "PASS".into(),
            critic_note: None,
            violations: vec![],
            gate_findings: vec![],
            rejected_by: None,
            interdiff_files: vec![],
            scope_warnings: vec![],
            allowed_changes: vec![],
            denied_tool_calls: 0,
            cost_usd: cost,
            turns: 3,
            input_tokens: 1000,
            output_tokens: 100,
            diff_sha256: "0".repeat(64),
            stopped: None,
            prompt_file: PathBuf::from("/state/runs/j/attempt-1/prompt.txt"),
        }
    }

    pub(crate) fn summary(costs: &[f64]) -> Summary {
        Summary {
            job_id: "20261130-120000000-abcd".into(),
            repo: PathBuf::from("/src/app"),
            base_ref: "1".repeat(40),
            task: "Make the tests pass".into(),
            outcome: Outcome::Accepted,
            reason: crate::outcome::Reason::Accepted,
            detail: "accepted at attempt 2".into(),
            attempts: costs
                .iter()
                .enumerate()
                .map(|(i, c)| record(i as u32 + 1, *c))
                .collect(),
            totals: Totals {
                cost_usd: costs.iter().sum(),
                turns: 6,
                input_tokens: 2000,
                output_tokens: 200,
                wall_ms: 12_345,
            },
            escalation: None,
            sandbox: None,
            network: None,
            judge: None,
            test_count_off: Default::default(),
            suite: None,
            examiner: None,
            stash_commit: None,
            failure_report: None,
            run_dir: PathBuf::from("/state/runs/20261130-120000000-abcd"),
            started_at: "2026-11-30T12:00:00Z".into(),
            finished_at: "2026-11-30T12:00:12Z".into(),
        }
    }

    fn inputs(summary: Summary) -> Inputs {
        Inputs {
            summary,
            failure: None,
            branch: None,
            budget_usd: Some(1.0),
            max_attempts: Some(5),
            baseline: None,
            timelines: BTreeMap::new(),
            cache: BTreeMap::new(),
            diffs: BTreeMap::new(),
            interdiffs: BTreeMap::new(),
            pull_request: None,
            pushed: None,
        }
    }

    /// The `width` of the element with `id`.
    fn width_of(html: &str, id: &str) -> f64 {
        let at = html
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {id}"));
        let rest = &html[at..];
        let w = &rest[rest.find("width=\"").expect("width") + 7..];
        w[..w.find('"').expect("quote")].parse().expect("a number")
    }

    #[test]
    fn a_diff_cannot_inject_markup() {
        let mut i = inputs(summary(&[0.01]));
        let evil = "diff --git a/x.py b/x.py\n+</script><img src=x onerror=alert(1)>\n-\"quoted\" & 'single'\n";
        i.diffs.insert(1, evil.into());
        i.interdiffs.insert(1, evil.into());
        i.summary.task = "<b>bold</b> `</code><script>alert(2)</script>`".into();
        i.summary.attempts[0]
            .violations
            .push(crate::critic::Violation {
                rule: 1,
                file: "<svg onload=alert(3)>".into(),
                problem: "`<iframe>`".into(),
                fix: "x".into(),
            });
        let html = render(&i);
        for bad in ["<img", "<script", "<iframe", "<svg onload", "<b>bold"] {
            assert!(!html.contains(bad), "{bad} survived:\n{html}");
        }
        assert!(html.contains(
            "<span class=\"l add\">+&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;</span>"
        ));
        assert!(html
            .contains("<span class=\"l del\">-&quot;quoted&quot; &amp; &#39;single&#39;</span>"));
        assert!(html.contains("<code>&lt;iframe&gt;</code>"));
        // No script at all, and nothing loaded from elsewhere.
        assert!(!html.contains("<script"));
        assert!(
            !html.contains("src=\"http") && !html.contains("@import") && !html.contains("url(")
        );
    }

    #[test]
    fn bars_scale_with_cost_and_the_budget_line_sits_at_the_budget() {
        let i = inputs(summary(&[0.1, 0.3]));
        let html = render(&i);
        assert_eq!(html.matches("class=\"cost-bar").count(), 2);
        let (w1, w2) = (width_of(&html, "cost-bar-1"), width_of(&html, "cost-bar-2"));
        assert!((w2 / w1 - 3.0).abs() < 0.01, "{w1} {w2}");
        // The budget ($1) is the scale's end: 470 units for $1.
        assert!((w1 - 47.0).abs() < 0.01, "{w1}");
        assert!(html.contains("id=\"budget-line\" data-budget-usd=\"1\" x1=\"570.00\""));
        // Bar 2 starts where bar 1 ends.
        assert!(html
            .contains("id=\"cost-bar-2\" data-attempt=\"2\" data-cost-usd=\"0.3\" x=\"147.00\""));
        // Over budget, the scale grows to the spend and the line moves left.
        let mut over = inputs(summary(&[1.0, 1.0]));
        over.budget_usd = Some(1.0);
        let html = render(&over);
        assert!(
            html.contains("id=\"budget-line\" data-budget-usd=\"1\" x1=\"335.00\""),
            "{html}"
        );
    }

    #[test]
    fn missing_inputs_are_said_not_guessed() {
        let mut i = inputs(summary(&[0.0]));
        i.budget_usd = None;
        i.max_attempts = None;
        i.summary.attempts[0].gate_findings =
            vec!["tests/t.py:3 (gate skip_marker): `@skip` added".into()];
        let html = render(&i);
        // Without the journal, the findings are the summary's lines.
        assert!(html.contains(
            "<li class=\"finding\">tests/t.py:3 (gate skip_marker): <code>@skip</code> added</li>"
        ));
        assert!(html.contains("budget unknown"));
        assert!(!html.contains("id=\"budget-line\""));
        assert!(html.contains("No timeline"));
        assert!(html.contains("No <code>diff.patch</code>"));
        assert!(html.contains("—"), "unknown cache tokens");
        // A zero cost draws a zero-width bar, not a NaN.
        assert!(html.contains("id=\"cost-bar-1\""));
        assert!(!html.contains("NaN") && !html.contains("=\"inf"));
        let none = render(&inputs(summary(&[])));
        assert!(none.contains("No attempt ran"));
        assert_eq!(none.matches("class=\"cost-bar").count(), 0);
    }

    #[test]
    fn every_attempt_has_a_row_and_a_section_and_the_outcome_is_said() {
        let mut i = inputs(summary(&[0.01, 0.02, 0.03]));
        i.summary.attempts[0].goal_passed = false;
        i.summary.attempts[0].failed_step = Some("pytest".into());
        i.summary.attempts[0].critic = "skipped".into();
        i.summary.attempts[1].rejected_by = Some(crate::outcome::Reason::Precheck);
        let html = render(&i);
        for n in 1..=3 {
            assert!(html.contains(&format!("id=\"attempt-row-{n}\"")));
            assert!(html.contains(&format!("id=\"attempt-{n}\"")));
        }
        assert!(html.contains("red at <code>pytest</code>"));
        assert!(html.contains("rejected: precheck"));
        assert!(html.contains("id=\"outcome-word\">accepted</span>"));
        assert!(html.starts_with(&format!("<!DOCTYPE html>\n{MARKER}")));
    }

    #[test]
    fn the_work_back_is_the_stash_or_the_branch() {
        let mut parked = inputs(summary(&[0.01]));
        parked.summary.outcome = Outcome::Exhausted;
        parked.summary.stash_commit = Some("c0ffee".into());
        let html = render(&parked);
        assert!(
            html.contains("git -C /src/app stash apply c0ffee"),
            "{html}"
        );
        let mut branch = inputs(summary(&[0.01]));
        branch.branch = Some(super::super::BranchInfo {
            branch: "loopd/j".into(),
            commit_accepted: Some("abc123".into()),
        });
        let html = render(&branch);
        assert!(html.contains("git -C /src/app merge loopd/j"));
        assert!(html.contains("<code>abc123</code>"));
    }

    #[test]
    fn prose_quotes_code_and_keeps_a_lone_backtick() {
        assert_eq!(prose("run `a<b` now"), "run <code>a&lt;b</code> now");
        assert_eq!(prose("a ` b"), "a ` b");
        assert_eq!(prose("`x` and `y"), "<code>x</code> and `y");
    }

    #[test]
    fn durations_and_counts_read_well() {
        assert_eq!(ms(250), "250 ms");
        assert_eq!(ms(12_345), "12.3 s");
        assert_eq!(ms(125_000), "2 min 05 s");
        assert_eq!(count(18_000), "18,000");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
