//! npm, yarn and pnpm scripts (`npm test`, `yarn test`, `pnpm run test`):
//! the package manager decides what runs (`scripts` in `package.json`,
//! judged as a shared file) and with which options (`.npmrc`'s
//! `node-options`, `script-shell`, `ignore-scripts`; yarn's `.yarnrc.yml`
//! `yarnPath` — yarn itself — and plugins under `.yarn/`; pnpm's
//! `.pnpmfile.cjs` hooks and workspace file).
//!
//! Sources: npm's "npmrc" and "config" pages, yarn's "Configuration
//! (.yarnrc.yml)", pnpm's ".npmrc" and ".pnpmfile.cjs" pages.

use super::node::NODE_VARS;
use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "npm scripts",
    docs: &[
        "https://docs.npmjs.com/cli/configuring-npm/npmrc",
        "https://yarnpkg.com/configuration/yarnrc",
        "https://pnpm.io/pnpmfile",
    ],
    files: &[
        "**/.yarnrc",
        "**/.yarnrc.yml",
        "**/.yarn/**",
        "**/.pnp.cjs",
        "**/.pnp.loader.mjs",
        "**/.pnpmfile.cjs",
        "**/pnpm-workspace.yaml",
        "**/lerna.json",
        "**/nx.json",
        "**/turbo.json",
    ],
    vars: NODE_VARS,
    runs,
    probe,
    whole: super::cannot_tell,
    tests: super::default_tests,
};

fn runs(words: &[&str]) -> bool {
    words
        .first()
        .is_some_and(|w| matches!(base(w), "npm" | "yarn" | "pnpm" | "bun"))
        && words
            .get(1)
            .is_some_and(|w| matches!(*w, "test" | "t" | "tst" | "run" | "run-script"))
}

fn probe(words: &[&str]) -> Option<String> {
    Some(format!(
        "{}; {}",
        super::executable_probe(words.first()?),
        super::executable_probe("node")
    ))
}
