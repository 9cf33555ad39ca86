//! The house without cycles (issue: the journal is the truth): the crate's
//! top-level modules form layers, and a module may use only modules of its
//! own layer or below — never one above, and never in a cycle. Read from the
//! source (`crate::module` paths, `use crate::{..}` groups), so a new
//! upward import fails here, named, before it spreads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Bottom to top. Every top-level module appears exactly once.
const LAYERS: &[&[&str]] = &[
    &["util"],
    &["outcome", "process", "sandbox", "runner", "lang"],
    &["workspace", "agent", "notify"],
    &["guard", "judges", "goal", "rubric", "critic", "examiner"],
    &["record"],
    &["journal"],
    &["report", "report_html", "breaker", "lessons"],
    &["config", "live"],
    &["job"],
    &["ci", "daemon", "export"],
    &["cli"],
];

fn top_level_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_owned()
}

/// Every top-level module a file refers to through `crate::`.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c, d::{e, f}}`: the first name of each item.
            let mut depth = 0;
            let mut item_start = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        if !name.is_empty() {
                            out.insert(std::mem::take(&mut name));
                        }
                        item_start = true;
                        continue;
                    }
                    _ => {}
                }
                if item_start {
                    if c.is_alphanumeric() || c == '_' {
                        name.push(c);
                    } else if !name.is_empty() {
                        out.insert(std::mem::take(&mut name));
                        item_start = false;
                    }
                }
            }
            if !name.is_empty() {
                out.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// Every `.rs` file under `src`.
fn rs_files(src: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files
}

/// Every cycle of `g`, each as `a → b → a`: a depth-first search for a
/// back edge.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut c = path[i..].to_vec();
            c.push(m.to_owned());
            cycles.push(c.join(" → "));
            return;
        }
        if done.contains(m) {
            return;
        }
        path.push(m.to_owned());
        for d in g.get(m).into_iter().flatten() {
            visit(d, g, path, done, cycles);
        }
        path.pop();
        done.insert(m.to_owned());
    }
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for m in g.keys() {
        visit(m, g, &mut Vec::new(), &mut done, &mut out);
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = crate::support::manifest_dir().join("src");
    let files = rs_files(&src);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let module = top_level_of(&src, &f);
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("read");
        let deps = g.entry(module.clone()).or_default();
        for r in references(&text) {
            if r != module {
                deps.insert(r);
            }
        }
    }
    g
}

#[test]
fn the_references_parser_reads_groups_and_paths() {
    let r = references(
        "use crate::{agent::session::{Role, StopRequest}, util, guard::caps::Spend};\n\
         // crate::cli in a comment does not count\n\
         let x = crate::report::round_usd(1.0);",
    );
    let want: BTreeSet<String> = ["agent", "util", "guard", "report"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(r, want);
}

#[test]
fn modules_use_only_their_layer_and_below_and_form_no_cycle() {
    let g = graph();
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (*m, i)))
        .collect();
    let mut problems = Vec::new();
    for (m, deps) in &g {
        let Some(&lm) = layer_of.get(m.as_str()) else {
            problems.push(format!("`{m}` is in no layer: add it to LAYERS"));
            continue;
        };
        for d in deps {
            match layer_of.get(d.as_str()) {
                Some(&ld) if ld > lm => problems.push(format!(
                    "`{m}` (layer {lm}) uses `{d}` (layer {ld}), a layer above it"
                )),
                Some(_) => {}
                None => problems.push(format!("`{m}` uses `{d}`, which is in no layer")),
            }
        }
    }
    // Cycles, within a layer too.
    problems.extend(cycles(&g).into_iter().map(|c| format!("import cycle: {c}")));
    assert!(
        problems.is_empty(),
        "the module layers are broken:\n{}\n\ngraph: {g:#?}",
        problems.join("\n")
    );
}

/// The top-level modules a text names in backticks, in `→`-separated
/// layers (docs/architecture.md) or in the rows of a table whose second
/// cell lists them (src/lib.rs).
fn named_layers(groups: Vec<&str>) -> Vec<BTreeSet<String>> {
    let known: BTreeSet<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    groups
        .into_iter()
        .map(|g| {
            g.split('`')
                .skip(1)
                .step_by(2)
                .map(|w| w.trim_matches(['[', ']']))
                .filter(|w| known.contains(w))
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

#[test]
fn the_architecture_page_and_lib_rs_name_the_layers_the_code_has() {
    let want: Vec<BTreeSet<String>> = LAYERS
        .iter()
        .map(|l| l.iter().map(|m| (*m).to_owned()).collect())
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let body = page.split_once(':').map_or(page.as_str(), |(_, b)| b);
    // Only the first mention of a module counts: a layer's parenthesis
    // may name a lower one (`job`'s `held_out` is its own module).
    let mut seen = BTreeSet::new();
    let page_layers: Vec<BTreeSet<String>> = named_layers(body.split('→').collect())
        .into_iter()
        .map(|l| l.into_iter().filter(|m| seen.insert(m.clone())).collect())
        .collect();
    assert_eq!(
        page_layers, want,
        "docs/architecture.md names other layers than LAYERS"
    );
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("lib.rs");
    let rows: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .filter_map(|l| l.split(" | ").nth(1))
        .collect();
    assert_eq!(
        named_layers(rows),
        want,
        "src/lib.rs's table names other layers than LAYERS"
    );
}

/// A file's module path: `src/agent/gateway/spend.rs` → `agent::gateway::spend`,
/// `src/agent/gateway/mod.rs` → `agent::gateway`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts
}

/// Every module path a file names through `crate::`, `super::` or `self::`
/// (groups included), resolved against the file's own module path `at`:
/// the leading lowercase segments only (`crate::judges::tamper::Finding` →
/// `judges::tamper`).
fn module_references(text: &str, at: &[String]) -> BTreeSet<Vec<String>> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let mut out = BTreeSet::new();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        // A path starts where an identifier starts.
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let (mut base, mut tail): (Vec<String>, &str) =
            if let Some(t) = rest.strip_prefix("crate::") {
                (Vec::new(), t)
            } else if rest.starts_with("super::") {
                let mut base = at.to_vec();
                let mut t = rest;
                while let Some(after) = t.strip_prefix("super::") {
                    base.pop();
                    t = after;
                }
                (base, t)
            } else if let Some(t) = rest.strip_prefix("self::") {
                (at.to_vec(), t)
            } else {
                i += 1;
                continue;
            };
        let mut prefixes = vec![base.clone()];
        // Segments, then (for a group) the first segment of each item.
        loop {
            let seg: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if seg.is_empty() {
                if let Some(group) = tail.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for item in group[..end].split(',') {
                        let name: String = item
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if name.starts_with(|c: char| c.is_ascii_lowercase()) && name != "self" {
                            let mut p = base.clone();
                            p.push(name);
                            prefixes.push(p);
                        }
                    }
                }
                break;
            }
            if !seg.starts_with(|c: char| c.is_ascii_lowercase()) {
                break;
            }
            base.push(seg.clone());
            prefixes.push(base.clone());
            tail = &tail[seg.len()..];
            match tail.strip_prefix("::") {
                Some(t) => tail = t,
                None => break,
            }
        }
        out.extend(prefixes.into_iter().filter(|p| !p.is_empty()));
        i += 1;
    }
    out
}

/// Inside every folder, the files (and sub-folders) are a graph too: a
/// sibling may use a sibling, but never in a cycle (`judges/precheck ↔
/// judges/tamper` was one: what both need is a module of its own). A child
/// using its folder's `mod.rs` (a shared type like `agent::Role`) is not a
/// sibling edge.
#[test]
fn the_files_inside_each_folder_form_no_cycle() {
    let src = crate::support::manifest_dir().join("src");
    let files = rs_files(&src);
    // folder → sibling → siblings it uses
    let mut folders: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in &files {
        let at = module_path(&src, f);
        if at.len() < 2 {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read");
        let refs = module_references(&text, &at);
        // Every folder this file sits in, below the top level.
        for depth in 1..at.len() {
            let folder = at[..depth].to_vec();
            let me = at[depth].clone();
            let deps = folders
                .entry(folder.clone())
                .or_default()
                .entry(me.clone())
                .or_default();
            for r in &refs {
                if r.len() > depth && r[..depth] == folder[..] && r[depth] != me {
                    deps.insert(r[depth].clone());
                }
            }
        }
    }
    let mut found_cycles = Vec::new();
    for (folder, g) in &folders {
        let found = cycles(g);
        found_cycles.extend(
            found
                .into_iter()
                .map(|c| format!("inside `{}`: {c}", folder.join("/"))),
        );
    }
    assert!(
        found_cycles.is_empty(),
        "files inside a folder import each other in a cycle:\n{}",
        found_cycles.join("\n")
    );
}

#[test]
fn module_references_resolve_super_self_and_groups() {
    let at: Vec<String> = ["guard", "precheck"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = module_references(
        "use super::finding::{Check, Finding};\nuse super::{caps, tamper::Compiled};\nuse crate::agent::events::ToolCall;\nlet x = self::inner::f();",
        &at,
    );
    for want in [
        &["guard", "finding"][..],
        &["guard", "caps"],
        &["guard", "tamper"],
        &["agent", "events"],
        &["guard", "precheck", "inner"],
    ] {
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        assert!(r.contains(&want), "{want:?} in {r:?}");
    }
}
