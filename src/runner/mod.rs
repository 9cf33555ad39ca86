//! The test runners loopd knows, one module each: every file and variable
//! through which a runner reads configuration, plugins or code before it
//! collects a test (from the runner's own documentation, cited in each
//! module), and how to learn which executable or module it resolved.
//!
//! Two judges read this registry. The tamper gate
//! ([`crate::judges::tamper`]) protects every file of every entry, new or
//! changed — default-deny: a file here is the runner's unless a parsed
//! comparison ([`crate::judges::runner`], for files that hold more than the
//! runner's part) shows the change lies outside it. And each judge run
//! probes the runners its goal steps run ([`probe`]): a runner that
//! resolves elsewhere than at BASE_REF — a module named like it at the top
//! of the tree, another interpreter — is `runner_changed`.
//!
//! The variables are listed for the record and for `loopd check`: no agent
//! process can set one for the judge, whose environment is an allow-list
//! ([`crate::sandbox::env`]); the lead may pass one on purpose
//! (`[sandbox] env`).
//!
//! A new runner is a module here and a line in [`REGISTRY`].

mod cargo;
mod go;
mod jest;
mod lint;
mod mocha;
mod node;
mod npm;
mod pytest;
mod unittest;
mod vitest;

/// A file of BASE_REF by its path, as text (`None`: none there, or not
/// text loopd reads).
pub type ReadBase<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// One test runner's entry.
#[derive(Debug)]
pub struct Runner {
    /// As the docs and findings name it.
    pub name: &'static str,
    /// Where the lists below come from.
    pub docs: &'static [&'static str],
    /// Repository-relative globs of every file the runner (or what starts
    /// it) reads configuration, plugins or code from before it collects.
    pub files: &'static [&'static str],
    /// Environment variables it reads the same way.
    pub vars: &'static [&'static str],
    /// Whether one simple command (its words, environment assignments
    /// already taken off) runs this runner.
    pub runs: fn(&[&str]) -> bool,
    /// A shell command that prints where the runner of that command
    /// resolves (executable, module files), one `name<TAB>origin` per line.
    pub probe: fn(&[&str]) -> Option<String>,
    /// What one of its commands selects of the suite: the whole suite
    /// step (`[judge] suite`) is inferred from it.
    pub whole: fn(&[&str]) -> Option<Whole>,
    /// The test files one of its commands runs beyond every language's
    /// default names ([`crate::lang::Language::tests`]): files it names,
    /// names its configuration adds. Globs relative to where the command
    /// runs; the `fn` reads a file of BASE_REF there (its configuration).
    pub tests: fn(&[&str], &ReadBase<'_>) -> Vec<String>,
}

/// What a runner's command runs of the suite it finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whole {
    /// Every test the runner finds: the whole suite already.
    All,
    /// A selection (paths, names, a filter, a stop at the first
    /// failure): these are its words with the selection taken off.
    Without(Vec<String>),
}

/// The `tests` of a runner whose commands run only files of the
/// languages' default names (or whose configuration loopd does not read).
pub(crate) fn default_tests(_: &[&str], _: &ReadBase<'_>) -> Vec<String> {
    Vec::new()
}

/// The words of a command that are neither options nor an option's
/// value (`value`: the options that take the next word), up to and after
/// a `--`.
pub(crate) fn positionals<'a>(words: &[&'a str], value: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut it = words.iter().copied();
    while let Some(w) = it.next() {
        if w == "--" {
            out.extend(it.by_ref());
            break;
        }
        if w.starts_with('-') {
            if value.contains(&w) {
                it.next();
            }
            continue;
        }
        out.push(w);
    }
    out
}

/// A word that names test files: a path with an extension (escaped, a
/// file) or a glob (kept, the runner's own); `None` for anything else (a
/// directory, left to the runner's default names).
pub(crate) fn named_file(word: &str) -> Option<String> {
    let word = word.trim_start_matches("./");
    if word.is_empty() || word.starts_with('/') || word.split('/').any(|c| c == "..") {
        return None;
    }
    if word.contains(['*', '?', '[', '{']) {
        return Some(word.to_owned());
    }
    let name = word.rsplit('/').next().unwrap_or(word);
    name.contains('.').then(|| literal(word))
}

/// A path as a glob that matches exactly it.
pub(crate) fn literal(path: &str) -> String {
    globset::escape(path)
}

/// The test files a goal command runs beyond every language's default
/// names ([`Runner::tests`] of each runner it runs), as globs relative to
/// the repository's root, where goal commands start: what exists at
/// BASE_REF and matches is a test file as any other (the tamper gate's
/// policy). A `cd DIR` before a runner moves where its globs and reads
/// are; `read` gives a file of BASE_REF by its repository path.
pub fn tests_of(line: &str, read: &ReadBase<'_>) -> Vec<String> {
    tests_at(line, read, 0)
}

fn tests_at(line: &str, read: &ReadBase<'_>, depth: u32) -> Vec<String> {
    let mut dir = String::new();
    let mut out = Vec::new();
    for cmd in commands(line) {
        let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let inner = unwrapped(&words);
        if inner.first() == Some(&"cd") {
            dir = match inner.get(1) {
                Some(d) if !d.starts_with('/') && !d.contains("..") => join(&dir, d),
                // Out of the tree, or home: nothing below is the tree's.
                _ => "..".to_owned(),
            };
            continue;
        }
        if dir == ".." {
            continue;
        }
        // A runner behind a shell, a script of the tree or a package
        // script: what they run, read at BASE_REF (one level more each,
        // at most four).
        if let Some(inner_line) = script_of(inner, &dir, read) {
            if depth < 4 {
                out.extend(
                    tests_at(&inner_line, read, depth + 1)
                        .iter()
                        .map(|g| join(&dir, g)),
                );
            }
            continue;
        }
        for r in REGISTRY.iter().filter(|r| (r.runs)(inner)) {
            let read_here = |p: &str| read(&join(&dir, p));
            out.extend((r.tests)(inner, &read_here).iter().map(|g| join(&dir, g)));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What a command runs that is itself a command line: `sh -c '…'`, a
/// shell script of the tree (`bash scripts/test.sh`, `./test.sh`), or a
/// package script (`npm test`, `npm run NAME`, `yarn NAME`, `pnpm NAME`)
/// read from `package.json` at BASE_REF. `None` for anything else.
fn script_of(words: &[&str], dir: &str, read: &ReadBase<'_>) -> Option<String> {
    let shell = |w: &str| matches!(base(w), "sh" | "bash" | "dash" | "zsh");
    match words {
        [sh, c, line, ..] if shell(sh) && *c == "-c" => Some((*line).to_owned()),
        [sh, script, ..] if shell(sh) && !script.starts_with('-') => read(&join(dir, script)),
        [script, ..] if script.starts_with("./") && script.ends_with(".sh") => {
            read(&join(dir, script))
        }
        [pm, rest @ ..] if matches!(base(pm), "npm" | "yarn" | "pnpm" | "bun") => {
            let name = match rest {
                ["test" | "t", ..] => "test",
                ["run" | "run-script", name, ..] => name,
                [name, ..] if base(pm) != "npm" && !name.starts_with('-') => name,
                _ => return None,
            };
            let package: serde_json::Value =
                serde_json::from_str(&read(&join(dir, "package.json"))?).ok()?;
            package["scripts"][name].as_str().map(str::to_owned)
        }
        _ => None,
    }
}

/// `rel` under `dir` (both repository-relative, `./` and trailing `/`
/// taken off).
fn join(dir: &str, rel: &str) -> String {
    let rel = rel.trim_start_matches("./").trim_end_matches('/');
    let dir = dir.trim_start_matches("./").trim_end_matches('/');
    match (dir, rel) {
        ("" | ".", r) => r.to_owned(),
        (d, "" | ".") => d.to_owned(),
        (d, r) => format!("{d}/{r}"),
    }
}

/// The `whole` of a runner whose selections loopd does not read: no
/// suite is inferred from its commands (the lead names one).
pub(crate) fn cannot_tell(_: &[&str]) -> Option<Whole> {
    None
}

/// The whole suite a goal command narrows, as a command: `None` when
/// the command is not one simple command of a runner that can tell, or
/// when it runs the whole suite already. Environment assignments and
/// wrappers before the runner are kept (`PYTHONPATH=src uv run pytest
/// tests/test_a.py` → `PYTHONPATH=src uv run pytest`).
pub fn narrowed(line: &str) -> Option<String> {
    let mut cmds = split(line, true);
    if cmds.len() != 1 {
        return None;
    }
    let cmd = cmds.pop()?;
    let assigns = cmd.iter().take_while(|w| is_assignment(w)).count();
    let words: Vec<&str> = cmd[assigns..].iter().map(String::as_str).collect();
    let inner = unwrapped(&words);
    let runner = REGISTRY.iter().find(|r| (r.runs)(inner))?;
    let whole = (runner.whole)(inner)?;
    // An assignment may narrow too (`PYTEST_ADDOPTS="-k parse"`): its
    // selection is taken off the same way.
    let mut narrowed_by_env = false;
    let assignments: Vec<String> = cmd[..assigns]
        .iter()
        .map(|a| {
            let (name, value) = a.split_once('=').expect("an assignment");
            let value = match (runner.name, name) {
                ("pytest", "PYTEST_ADDOPTS") => {
                    let words: Vec<&str> = value.split_whitespace().collect();
                    let (kept, selected) = pytest::without_selection(&words);
                    narrowed_by_env |= selected;
                    kept.join(" ")
                }
                _ => value.to_owned(),
            };
            format!("{name}={}", shell_word(&value))
        })
        .collect();
    let rest = match whole {
        Whole::Without(rest) => rest,
        Whole::All if narrowed_by_env => inner.iter().map(|w| (*w).to_owned()).collect(),
        Whole::All => return None,
    };
    let wrappers = words[..words.len() - inner.len()]
        .iter()
        .map(|w| shell_word(w));
    let all: Vec<String> = assignments
        .into_iter()
        .chain(wrappers)
        .chain(rest.iter().map(|w| shell_word(w)))
        .collect();
    Some(all.join(" "))
}

/// A word as the shell reads it back: quoted only when it must be.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        w.to_owned()
    } else {
        crate::util::shell_quote(w)
    }
}

/// Split `words` (a runner's arguments) into what selects and what stays:
/// `value` options keep their next word, `select` options (and their
/// value, when `select_value`) select, any other word not starting with
/// `-` is a positional selection. Returns the kept words and whether
/// anything was selected.
pub(crate) fn drop_selection(
    words: &[&str],
    value: &[&str],
    select: &[&str],
    select_value: &[&str],
) -> (Vec<String>, bool) {
    let mut kept = Vec::new();
    let mut selected = false;
    let mut it = words.iter().copied();
    while let Some(w) = it.next() {
        let name = w.split_once('=').map_or(w, |(n, _)| n);
        let inline = w.contains('=');
        if select.contains(&name) {
            selected = true;
        } else if select_value.contains(&name) {
            selected = true;
            if !inline {
                it.next();
            }
        } else if value.contains(&name) {
            kept.push(w.to_owned());
            if !inline {
                if let Some(v) = it.next() {
                    kept.push(v.to_owned());
                }
            }
        } else if w.starts_with('-') {
            kept.push(w.to_owned());
        } else {
            selected = true;
        }
    }
    (kept, selected)
}

/// Every runner loopd knows.
pub const REGISTRY: &[&Runner] = &[
    &pytest::RUNNER,
    &unittest::RUNNER,
    &node::RUNNER,
    &jest::RUNNER,
    &vitest::RUNNER,
    &mocha::RUNNER,
    &go::RUNNER,
    &cargo::RUNNER,
    &npm::RUNNER,
    &lint::RUNNER,
];

/// Every runner's files, each with the runner's name: what the tamper gate
/// protects.
pub fn config_globs() -> impl Iterator<Item = (&'static str, &'static str)> {
    REGISTRY
        .iter()
        .flat_map(|r| r.files.iter().map(move |f| (*f, r.name)))
}

/// The simple commands of a shell line, each as its words with leading
/// `NAME=value` assignments taken off. A reading for naming runners, not
/// a shell: quoting is honoured only as far as not splitting inside it.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    split(line, false)
}

/// [`commands`], keeping the leading assignments when `assignments`.
fn split(line: &str, assignments: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let chars = line.chars();
    let flush = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    let end = |words: &mut Vec<String>, out: &mut Vec<Vec<String>>| {
        let cmd: Vec<String> = std::mem::take(words)
            .into_iter()
            .skip_while(|w| !assignments && is_assignment(w))
            .collect();
        if !cmd.is_empty() {
            out.push(cmd);
        }
    };
    for c in chars {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, ';' | '&' | '|' | '(' | ')' | '\n') => {
                flush(&mut word, &mut words);
                end(&mut words, &mut out);
            }
            (None, c) if c.is_whitespace() => flush(&mut word, &mut words),
            (None, c) => word.push(c),
        }
    }
    flush(&mut word, &mut words);
    end(&mut words, &mut out);
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The last path component of a word (`./node_modules/.bin/jest` → `jest`).
pub(crate) fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Words after a wrapper that runs its argument as the command
/// (`npx jest`, `uv run pytest`, `poetry run pytest`, `env A=1 go test`).
pub(crate) fn unwrapped<'a>(words: &'a [&'a str]) -> &'a [&'a str] {
    let mut w = words;
    loop {
        let skip = match (w.first().map(|x| base(x)), w.get(1).copied()) {
            (Some("npx" | "bunx" | "exec" | "time" | "nice" | "command"), _) => 1,
            // `timeout [-s SIG] [-k DUR] DURATION cmd…`
            (Some("timeout"), _) => {
                let mut k = 1;
                while let Some(o) = w.get(k).filter(|o| o.starts_with('-')) {
                    k += if matches!(*o, "-s" | "-k" | "--signal" | "--kill-after") {
                        2
                    } else {
                        1
                    };
                }
                k + 1
            }
            (Some("env"), _) => {
                1 + w[1..]
                    .iter()
                    .take_while(|x| is_assignment(x) || x.starts_with('-'))
                    .count()
            }
            (Some("uv" | "poetry" | "pdm" | "hatch" | "pipenv" | "rye"), Some("run")) => 2,
            (Some("pnpm" | "yarn"), Some("exec" | "dlx")) => 2,
            _ => 0,
        };
        if skip == 0 || skip >= w.len() {
            return w;
        }
        w = &w[skip..];
    }
}

/// Which registered runners a goal command runs, each with the words of
/// the simple command that runs it.
pub fn runners_of(line: &str) -> Vec<(&'static Runner, Vec<String>)> {
    let mut out = Vec::new();
    for cmd in commands(line) {
        let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let inner = unwrapped(&words);
        if let Some(r) = REGISTRY.iter().find(|r| (r.runs)(inner)) {
            out.push((*r, inner.iter().map(|w| w.to_string()).collect()));
        }
    }
    out
}

/// The probe of a goal command: a shell script that prints where each of
/// its runners resolves, `None` when it runs none loopd knows.
pub fn probe(line: &str) -> Option<String> {
    let parts: Vec<String> = runners_of(line)
        .into_iter()
        .filter_map(|(r, words)| {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            (r.probe)(&words).map(|p| {
                let tag = crate::util::shell_quote(&format!("s/^/{}:/", r.name));
                format!("{{ {p}; }} | sed {tag}")
            })
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Where an executable named by a goal command resolves, and its size and
/// modification time: the probe of runners that are programs.
pub(crate) fn executable_probe(word: &str) -> String {
    format!("{} && {COMPLETE}", resolve(word))
}

/// The `executable` line of a word, leaving its resolved path in `$r`.
pub(crate) fn resolve(word: &str) -> String {
    let q = crate::util::shell_quote(word);
    format!(
        "p=$(command -v {q}) && r=$(readlink -f \"$p\") && printf 'executable\\t%s %s\\n' \"$r\" \"$(stat -L -c '%s %Y' \"$r\")\""
    )
}

/// The last line of every probe that got to its end: a runner that loads
/// code of the change which ends the process (an `os._exit(0)` on import)
/// stops its probe short of it.
pub(crate) const COMPLETE: &str = "printf 'probed\\tcomplete\\n'";

/// How each goal step's runners resolved in one judge run: step →
/// `runner:name` → origin (what the journal keeps).
pub type Origins = std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// How one judge run's runners resolved, from a probe's output:
/// `runner:name` → origin.
pub fn origins(output: &str) -> std::collections::BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What resolves differently in `now` than at BASE_REF (`base`): a name
/// both know that resolves elsewhere, or a name only `now` has that
/// resolves inside the tree (`root`). Each as `name: was → now`.
pub fn moved(
    base: &std::collections::BTreeMap<String, String>,
    now: &std::collections::BTreeMap<String, String>,
    root: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, origin) in now {
        match base.get(name) {
            Some(was) if was != origin => out.push(format!("{name}: {was} → {origin}")),
            None if origin.starts_with(root) => {
                out.push(format!("{name}: (not loaded at BASE_REF) → {origin}"))
            }
            _ => {}
        }
    }
    // The runner itself must still resolve (a module may fall out of what
    // it loads; its executable and interpreter may not).
    for (name, was) in base {
        let own = name.ends_with(":executable")
            || name.ends_with(":interpreter")
            || name.ends_with(":probed");
        if own && !now.contains_key(name) {
            out.push(format!("{name}: {was} → (does not resolve)"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
