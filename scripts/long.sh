#!/usr/bin/env bash
# The long tier: the checks too long for CI (`.ci/run`, about 30 minutes on the 2-core
# machines), run by hand or on a schedule; `docs/design/crash-testing.md` ("What CI checks and
# what the long tier checks") says what each part adds to CI, and `docs/benchmarks.md` ("CI
# cost") records a whole run's time. It builds as the README's test command does (CI profile,
# step hooks, the PMDK baseline where libpmemobj is installed), then:
#
#  1. every crash test of `crates/crashtest`, the ignored ones too (SOFORT's and its variants'
#     mutation checks at their full size, the exhaustive runs of the continuable variants),
#     with every mutated run made (FERRITE_CRASHTEST_RUN_EXCUSED=1: the sites CI's checks
#     excuse as benign or as shown needed elsewhere are run too, and must still be accepted);
#  2. the process-kill test with 2,000 kills instead of 30;
#  3. the kill -9 campaign with 1,000 kills, of TATP and of TPC-C;
#  4. an exhaustive crash run (every visit of every crash point, no nested crashes) of every
#     registered target that must pass, on its registered workload;
#  5. the persistent FPTree with 10 M keys, inner index in DRAM and in PM, reopened.
#
# Exit status: 0 only if every part passed. Usage: scripts/long.sh [PART...] (parts 1-5;
# default all).
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-64}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
start=$(date +%s)
target_dir="${CARGO_TARGET_DIR:-target}"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(1 2 3 4 5)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }

step_names=()
step_starts=()
step() {
  step_names+=("$*")
  step_starts+=("$(date +%s)")
  printf '\n=== %s (%ss)\n' "$*" "$(($(date +%s) - start))"
}
summary() {
  local rc=$? now i next
  now=$(date +%s)
  printf '\n=== long tier: step times (seconds)\n'
  for i in "${!step_names[@]}"; do
    next=${step_starts[$((i + 1))]:-$now}
    printf '%7d  %s\n' "$((next - step_starts[i]))" "${step_names[i]}"
  done
  printf '%7d  total (exit %d)\n' "$((now - start))" "$rc"
}
trap summary EXIT

features=ferrite/test-hooks
if pkg-config --exists libpmemobj 2>/dev/null; then
  features+=",ferrite-bench/pmdk"
fi
nextest=0
if [ "${FERRITE_NO_NEXTEST:-0}" != 1 ] && cargo nextest --version >/dev/null 2>&1; then
  nextest=1
fi

step "build (CI profile, features $features)"
cargo build --workspace --profile ci --locked --features "$features" --bins
ferrite="$target_dir/ci/ferrite"

if want 1; then
  step "1. every crash test, the ignored ones too, every mutated run made"
  if [ $nextest = 1 ]; then
    FERRITE_CRASHTEST_RUN_EXCUSED=1 cargo nextest run -p ferrite-crashtest --cargo-profile ci \
      --locked --features "$features" --profile ci --run-ignored all
  else
    FERRITE_CRASHTEST_RUN_EXCUSED=1 cargo test -p ferrite-crashtest --profile ci --locked \
      --features "$features" -- --include-ignored
  fi
fi

if want 2; then
  step "2. process kills: 2,000 SIGKILLs of a committing child, each reopened and verified"
  FERRITE_KILL_ROUNDS=2000 cargo test -p ferrite-crashtest --profile ci --locked \
    --features "$features" --test kill
fi

if want 3; then
  step "3. kill -9 campaigns: 1,000 kills of TATP, 1,000 of TPC-C"
  "$ferrite" campaign --kills 1000 --subscribers 10000 --seed 1
  "$ferrite" campaign --workload tpcc --kills 1000 --warehouses 1 --seed 2
fi

if want 4; then
  step "4. exhaustive crash runs of every registered target that must pass"
  out=$(mktemp -d)
  failed=()
  for t in $("$ferrite" crashtest --list --names); do
    # The seeded-defect toys must fail (tests/tester.rs shows each found); their fixed twins
    # must pass.
    if [[ $t == toy-* && $t != *-fixed ]]; then continue; fi
    t0=$(date +%s)
    if "$ferrite" crashtest "$t" --exhaustive --no-nested --seed 0x5eed --quiet --out "$out" \
      >"$out/$t.log" 2>&1; then
      printf '%6ds  PASSED  %s\n' "$(($(date +%s) - t0))" "$t"
    else
      printf '%6ds  FAILED  %s (exit %d)\n' "$(($(date +%s) - t0))" "$t" "$?"
      tail -30 "$out/$t.log"
      failed+=("$t")
    fi
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "exhaustive runs failed: ${failed[*]} (failing images and logs in $out)"
    exit 1
  fi
  rm -rf "$out"
fi

if want 5; then
  step "5. the persistent FPTree with 10 M keys (DRAM and PM inner index), reopened"
  FERRITE_MEASURE_KEYS=10000000 cargo test -p ferrite --profile ci --locked \
    --features "$features" --test fptree_persistent -- --ignored --exact measure --nocapture
fi

step "done"
