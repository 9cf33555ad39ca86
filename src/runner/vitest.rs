//! vitest.
//!
//! Sources: vitest's "Configuring Vitest" (`vitest.config.*`, else
//! `vite.config.*`; `vitest.workspace.*` / projects; `setupFiles`,
//! `globalSetup`, `alias`, plugins run first) and Vite's `.env` files.

use super::node::NODE_VARS;
use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "vitest",
    docs: &[
        "https://vitest.dev/config/",
        "https://vite.dev/guide/env-and-mode",
    ],
    files: &[
        "**/vitest.config.*",
        "**/vitest.workspace.*",
        "**/vitest.projects.*",
        "**/vitest.setup.*",
        "**/vite.config.*",
    ],
    vars: NODE_VARS,
    runs,
    probe,
    whole: super::cannot_tell,
    tests: super::default_tests,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "vitest")
}

fn probe(words: &[&str]) -> Option<String> {
    Some(format!(
        "{}; printf 'package\\t%s\\n' \"$(node -p 'require.resolve(\"vitest/package.json\")' 2>/dev/null)\"",
        super::executable_probe(words.first()?)
    ))
}
