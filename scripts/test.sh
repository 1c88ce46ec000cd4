#!/usr/bin/env bash
# The test command of README.md and .ci/run: every crate's tests in the CI profile (optimised,
# debug assertions on), with property-test case counts pinned, built once.
#
# One build serves every test: the workspace is built with the FPTree's step hooks (cargo
# feature `ferrite/test-hooks`, which `tests/fptree_interleave.rs` needs; without a hook
# installed a hook point does nothing) and, where Debian's libpmemobj is installed, the PMDK
# baseline (`ferrite-bench/pmdk`; CI installs it and sets FERRITE_REQUIRE_PMDK=1). The
# benchmark crates' code without PMDK is compiled and linted by CI's clippy pass.
#
# Tests run under cargo-nextest where it is installed (it is on the CI machines: every test in
# a process of its own, both cores busy across test binaries, each test's time printed), else
# under `cargo test`; the same tests either way. FERRITE_NO_NEXTEST=1 forces `cargo test`.
# Extra arguments go to the runner (a test-name filter works with both).
#
# The long tier (exhaustive crash runs, every mutation check, the 1,000-kill campaign) is
# `scripts/long.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-64}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

label() { printf '\n=== test command: %s\n' "$*"; }

features=ferrite/test-hooks
if pkg-config --exists libpmemobj 2>/dev/null; then
  features+=",ferrite-bench/pmdk"
elif [ "${FERRITE_REQUIRE_PMDK:-0}" = 1 ]; then
  echo "FERRITE_REQUIRE_PMDK=1 but libpmemobj is missing: apt-get install libpmemobj-dev pkg-config" >&2
  exit 1
else
  echo "note: libpmemobj-dev not installed: the PMDK baseline (feature pmdk) is not tested"
fi

if [ "${FERRITE_NO_NEXTEST:-0}" != 1 ] && cargo nextest --version >/dev/null 2>&1; then
  label "workspace tests (cargo nextest, features $features)"
  cargo nextest run --workspace --cargo-profile ci --locked --features "$features" \
    --profile ci "$@"
  label "doc tests (cargo test --doc)"
  cargo test --workspace --doc --profile ci --locked --features "$features" "$@"
else
  label "workspace tests (cargo test, features $features)"
  cargo test --workspace --profile ci --locked --features "$features" "$@"
fi

# Model checks of the FPTree's version lock and leaf-lock protocol (crates/ferrite,
# fptree/vlock.rs) under loom: its own cfg, so its own target directory (preemptions are
# bounded in the tests; seconds once built).
label "loom model checks (cfg loom)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test -p ferrite --lib --profile ci --locked vlock
