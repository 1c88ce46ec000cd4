#!/usr/bin/env bash
# The test command of README.md and .ci/run: every crate's tests in the CI profile
# (optimised, debug assertions on), with property-test case counts pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-64}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
cargo test --workspace --profile ci --locked "$@"

# Step-by-step interleavings of the concurrent FPTree: they need ferrite's step hooks (cargo
# feature `test-hooks`, compiled to nothing without it), so the target is skipped above.
cargo test -p ferrite --profile ci --locked --features test-hooks --test fptree_interleave "$@"

# Model checks of the FPTree's version lock and leaf-lock protocol (crates/ferrite,
# fptree/vlock.rs) under loom: its own cfg, so its own target directory (preemptions are
# bounded in the tests; well under a minute once built).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test -p ferrite --lib --profile ci --locked vlock

# The PMDK baseline (cargo feature `pmdk`) needs Debian's libpmemobj-dev: test the benchmark
# crates with it when it is installed (CI installs it and sets FERRITE_REQUIRE_PMDK=1).
if pkg-config --exists libpmemobj 2>/dev/null; then
  cargo test --profile ci --locked -p ferrite-baselines -p ferrite-bench \
    --features ferrite-baselines/pmdk,ferrite-bench/pmdk "$@"
elif [ "${FERRITE_REQUIRE_PMDK:-0}" = 1 ]; then
  echo "FERRITE_REQUIRE_PMDK=1 but libpmemobj is missing: apt-get install libpmemobj-dev pkg-config" >&2
  exit 1
else
  echo "note: libpmemobj-dev not installed: the PMDK baseline (feature pmdk) was not tested"
fi
