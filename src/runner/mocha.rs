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
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "mocha")
}

fn probe(words: &[&str]) -> Option<String> {
    Some(format!(
        "{}; printf 'package\\t%s\\n' \"$(node -p 'require.resolve(\"mocha/package.json\")' 2>/dev/null)\"",
        super::executable_probe(words.first()?)
    ))
}
