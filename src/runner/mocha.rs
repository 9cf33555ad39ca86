//! mocha.
//!
//! Sources: mocha's "Configuring Mocha" (`.mocharc.{js,cjs,yaml,yml,json,
//! jsonc}`, the `mocha` key of `package.json`, `--require`/`--file` run
//! code first) and `test/mocha.opts` of older versions.

use super::node::NODE_VARS;
use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "mocha",
    docs: &["https://mochajs.org/#configuring-mocha-nodejs"],
    files: &["**/.mocharc*", "**/mocha.opts", "**/karma.conf.*"],
    vars: NODE_VARS,
    runs,
    probe,
    whole: super::cannot_tell,
    tests,
};

/// The files a mocha command names, as words or `--spec` values: tests,
/// whatever their names.
fn tests(words: &[&str], _: &super::ReadBase<'_>) -> Vec<String> {
    const VALUE: &[&str] = &[
        "--require",
        "-r",
        "--file",
        "--reporter",
        "-R",
        "--reporter-option",
        "-O",
        "--timeout",
        "-t",
        "--slow",
        "-s",
        "--grep",
        "-g",
        "--fgrep",
        "-f",
        "--ui",
        "-u",
        "--config",
        "--package",
        "--ignore",
        "--exclude",
        "--extension",
        "--jobs",
        "-j",
        "--retries",
        "--node-option",
        "-n",
    ];
    let args = words.get(1..).unwrap_or_default();
    let specs = args
        .windows(2)
        .filter(|w| w[0] == "--spec")
        .map(|w| w[1])
        .chain(args.iter().filter_map(|w| w.strip_prefix("--spec=")));
    let value: Vec<&str> = VALUE.iter().chain(&["--spec"]).copied().collect();
    super::positionals(args, &value)
        .into_iter()
        .chain(specs)
        .filter_map(super::named_file)
        .collect()
}

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "mocha")
}

fn probe(words: &[&str]) -> Option<String> {
    Some(format!(
        "{}; printf 'package\\t%s\\n' \"$(node -p 'require.resolve(\"mocha/package.json\")' 2>/dev/null)\"",
        super::executable_probe(words.first()?)
    ))
}
