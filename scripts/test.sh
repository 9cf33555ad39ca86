#!/usr/bin/env bash
# The test command (README "Run the tests"; `.ci/run` calls exactly this).
# Installs what the tests need on a fresh machine — the pinned Claude Code
# CLI from npm, pytest and ruff from PyPI, into ./.tools — then runs every
# test: unit tests and the integration tests against the real CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-tools.sh >/dev/null
cargo build --locked --examples
# `failpoints` compiles in the named crash points the crash walks kill at.
cargo test --locked --features failpoints --lib --test it --test fuzz
