#!/usr/bin/env bash
# The test command of README.md and .ci/run: every crate's tests in the CI profile
# (optimised, debug assertions on), with property-test case counts pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-64}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
cargo test --workspace --profile ci --locked "$@"
