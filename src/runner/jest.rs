//! jest.
//!
//! Sources: jest's "Configuring Jest" (`jest.config.{js,ts,mjs,cjs,json}`,
//! the `jest` key of `package.json`; `setupFiles`, `globalSetup`,
//! `moduleNameMapper`, `transform` name code it runs first), "Manual
//! mocks" (`__mocks__` directories replace modules: a test-tree folder)
//! and its use of Babel's configuration.

use super::node::NODE_VARS;
use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "jest",
    docs: &[
        "https://jestjs.io/docs/configuration",
        "https://jestjs.io/docs/manual-mocks",
    ],
    files: &[
        "**/jest.config.*",
        "**/jest.setup.*",
        "**/jest-preset.*",
        "**/jest.preset.*",
    ],
    vars: NODE_VARS,
    runs,
    probe,
    whole: super::cannot_tell,
    tests: super::default_tests,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "jest")
}

fn probe(words: &[&str]) -> Option<String> {
    Some(format!(
        "{}; printf 'package\\t%s\\n' \"$(node -p 'require.resolve(\"jest/package.json\")' 2>/dev/null)\"",
        super::executable_probe(words.first()?)
    ))
}
