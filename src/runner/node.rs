//! node's own test runner (`node --test`).
//!
//! Sources: node's "Command-line API" (`NODE_OPTIONS`, `--env-file`,
//! `node.config.json` with `--experimental-config-file`, `.noderc`),
//! "Modules: Packages" (`package.json` `type`, `imports`, `exports` —
//! judged as a shared file) and the test runner's docs (`--test` runs the
//! files it finds by its own patterns).

use super::{base, Runner};

/// Files every node-based runner reads before it runs a test: shared by
/// the entries of node, jest, vitest, mocha and the package managers.
const NODE_FILES: &[&str] = &[
    "**/.npmrc",
    "**/.noderc",
    "**/node.config.json",
    "**/.node-version",
    "**/.nvmrc",
    "**/.env",
    "**/.env.*",
    "**/tsconfig.json",
    "**/tsconfig.*.json",
    "**/jsconfig.json",
    "**/babel.config.*",
    "**/.babelrc",
    "**/.babelrc.*",
    "**/.swcrc",
    "**/node_modules/**",
];

pub(super) const NODE_VARS: &[&str] = &[
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_ENV",
    "NODE_TEST_CONTEXT",
    "NODE_V8_COVERAGE",
    "NODE_EXTRA_CA_CERTS",
    "NODE_REPL_EXTERNAL_MODULE",
    "TS_NODE_PROJECT",
    "BABEL_ENV",
];

pub const RUNNER: Runner = Runner {
    name: "node --test",
    docs: &[
        "https://nodejs.org/api/cli.html",
        "https://nodejs.org/api/test.html",
    ],
    files: NODE_FILES,
    vars: NODE_VARS,
    runs,
    probe,
    whole,
    tests,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "node")
        && words
            .iter()
            .any(|w| *w == "--test" || w.starts_with("--test="))
}

fn probe(words: &[&str]) -> Option<String> {
    Some(super::executable_probe(words.first()?))
}

/// What a `node --test` command selects: test files named on it, and the
/// name patterns and `--test-only`. Without them: the same command over
/// node's default test files.
fn whole(words: &[&str]) -> Option<super::Whole> {
    let (kept, selected) = super::drop_selection(words.get(1..)?, VALUE, SELECT, SELECT_VALUE);
    if !selected {
        return Some(super::Whole::All);
    }
    Some(super::Whole::Without(
        std::iter::once(words[0].to_owned()).chain(kept).collect(),
    ))
}

/// The files a `node --test` command names (paths or node's own globs):
/// tests, whatever their names. A word without an extension (a
/// directory) is left to node's default names.
fn tests(words: &[&str], _: &super::ReadBase<'_>) -> Vec<String> {
    let value: Vec<&str> = VALUE.iter().chain(SELECT_VALUE).copied().collect();
    super::positionals(words.get(1..).unwrap_or_default(), &value)
        .into_iter()
        .filter(|w| *w != "--test" && !w.starts_with("--test="))
        .filter_map(super::named_file)
        .collect()
}

/// Options of node that take the next word as their value.
const VALUE: &[&str] = &[
    "--import",
    "--require",
    "-r",
    "--loader",
    "--experimental-loader",
    "--test-reporter",
    "--test-reporter-destination",
    "--test-concurrency",
    "--test-timeout",
    "--env-file",
    "--conditions",
    "-C",
    "--input-type",
];
const SELECT: &[&str] = &["--test-only"];
const SELECT_VALUE: &[&str] = &["--test-name-pattern", "--test-skip-pattern", "--test-shard"];
