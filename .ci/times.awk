# The time table of a CI log: where the test time went, per test binary, slowest first; the
# cargo build time of each test command; and every test that ran over 60 seconds, with its
# reason from .ci/slow-tests.txt.
#
# Usage: awk -f .ci/times.awk .ci/slow-tests.txt LOG
#
# LOG is `.ci/run`'s combined output. `scripts/test.sh` prints `=== test command: LABEL` before
# each cargo command. Two formats are read:
# - cargo-nextest (`PASS [  12.345s] (n/N) BINARY TEST`): each test's own time; a binary's row
#   sums its tests' times (tests of several binaries run at once, so the sum is not wall time)
#   and names its slowest test.
# - libtest under `cargo test` (`Running TARGET (PATH)`, `test result: ... finished in Xs`): each
#   binary's own wall time (binaries run one after another). A binary is labelled with its
#   package (the crate of the last `unittests src/lib.rs` line, or `src/main.rs` with `-bin`)
#   and its target; libtest names the tests that run over 60 s.

FNR == NR {
  # .ci/slow-tests.txt: `test name | reason`; `#` starts a comment line.
  if ($0 ~ /^[[:space:]]*(#|$)/) next
  name = $0; sub(/[[:space:]]*\|.*$/, "", name); sub(/^[[:space:]]+/, "", name)
  why = substr($0, index($0, "|") + 1); sub(/^[[:space:]]+/, "", why)
  reason[name] = why
  next
}

{
  line = $0
  # Lines may carry a timestamp prefix `[   12.3] `: drop it.
  sub(/^\[[[:space:]]*[0-9.]+\][[:space:]]/, "", line)
}

line ~ /^=== test command: / {
  section = substr(line, length("=== test command: ") + 1)
  in_summary = 0
  next
}

# nextest's summary repeats the failed and slow tests' lines: count each test once.
line ~ /^[[:space:]]+Summary \[/ { in_summary = 1; next }


line ~ /^[[:space:]]+Finished `[^`]+` profile/ {
  # `Finished `ci` profile [...] target(s) in 7m 31s` (or `in 0.16s`).
  t = line; sub(/.* in /, "", t)
  secs = 0
  if (t ~ /m/) { m = t; sub(/m.*/, "", m); secs += m * 60; sub(/^[0-9]+m[[:space:]]*/, "", t) }
  sub(/s.*/, "", t); secs += t
  if (section != "") {
    if (!(section in build)) bname[++nb] = section
    build[section] += secs
  }
  next
}

# nextest: `        PASS [   0.145s] (169/610) ferrite engine::sofort::tests::x`
!in_summary && line ~ /^[[:space:]]+(PASS|FAIL|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT|ABORT|LEAK|LEAK-FAIL) \[[[:space:]]*[0-9.]+s\] / {
  r = line; sub(/^[[:space:]]+/, "", r)
  status = r; sub(/ .*/, "", status)
  t = r; sub(/^[A-Z-]+ \[[[:space:]]*/, "", t); sub(/s\].*/, "", t)
  rest = r; sub(/^[^]]*\][[:space:]]+\([^)]*\)[[:space:]]+/, "", rest)
  bin = rest; sub(/ .*/, "", bin)
  test = rest; sub(/^[^ ]+ /, "", test)
  key = bin SUBSEP section
  if (!(key in nx_sum)) { nx_keys[++nk] = key; nx_bin[nk] = bin; nx_sec[nk] = section }
  nx_sum[key] += t; nx_n[key]++
  if (t + 0 > nx_max[key] + 0) { nx_max[key] = t + 0; nx_maxname[key] = test }
  if (status != "PASS") nx_bad[key]++
  nx_total += t
  if (t + 0 > 60) { nslow++; slow_name[nslow] = test; slow_bin[nslow] = bin; slow_secs[nslow] = t + 0 }
  next
}

line ~ /^[[:space:]]+Running / {
  r = line; sub(/^[[:space:]]+Running /, "", r)
  target = r; sub(/ \(.*$/, "", target)
  path = r; sub(/^.*\(/, "", path); sub(/\)$/, "", path)
  file = path; sub(/^.*\//, "", file); sub(/-[0-9a-f]+$/, "", file)
  if (target ~ /^unittests src\/lib\.rs$/) pkg = file
  else if (target ~ /^unittests src\/main\.rs$/) pkg = file "-bin"
  current = pkg " " target
  next
}

line ~ /^[[:space:]]+Doc-tests / {
  d = line; sub(/^[[:space:]]+Doc-tests /, "", d)
  current = d " doc-tests"
  next
}

line ~ /^test .* has been running for over 60 seconds/ {
  n = line; sub(/^test /, "", n); sub(/ has been running.*$/, "", n)
  nslow++; slow_name[nslow] = n; slow_bin[nslow] = current; slow_secs[nslow] = -1
  next
}

line ~ /^test result: / {
  t = line; sub(/.*finished in /, "", t); sub(/s.*$/, "", t)
  p = line; sub(/^test result: [A-Za-z]+\. /, "", p); sub(/ passed.*/, "", p)
  f = line; sub(/.* passed; /, "", f); sub(/ failed.*/, "", f)
  nbins++
  bin_time[nbins] = t + 0; bin_label[nbins] = current; bin_section[nbins] = section
  bin_tests[nbins] = p + f
  lt_total += t
  next
}

END {
  if (nk > 0) {
    printf "\n=== test time table (nextest): per test binary, the sum of its tests' own times, slowest first\n"
    printf "%9s %6s  %-44s %9s  %-52s %s\n", "seconds", "tests", "binary", "slowest", "its slowest test", "test command"
    for (a = 1; a <= nk; a++) used[a] = 0
    for (k = 1; k <= nk; k++) {
      best = 0
      for (a = 1; a <= nk; a++) if (!used[a] && (best == 0 || nx_sum[nx_keys[a]] > nx_sum[nx_keys[best]])) best = a
      used[best] = 1
      key = nx_keys[best]
      name = nx_maxname[key]; if (length(name) > 52) name = substr(name, 1, 49) "..."
      flag = (key in nx_bad) ? "  (" nx_bad[key] " not passed)" : ""
      printf "%9.1f %6d  %-44s %9.1f  %-52s %s%s\n", nx_sum[key], nx_n[key], nx_bin[best], nx_max[key], name, nx_sec[best], flag
    }
    printf "%9.1f         all tests (summed; they ran in parallel)\n", nx_total
  }
  if (nbins > 0) {
    printf "\n=== test time table (libtest): each test binary's own time, slowest first\n"
    printf "%9s %6s  %-58s %s\n", "seconds", "tests", "binary", "test command"
    for (a = 1; a <= nbins; a++) used2[a] = 0
    for (k = 1; k <= nbins; k++) {
      best = 0
      for (a = 1; a <= nbins; a++) if (!used2[a] && (best == 0 || bin_time[a] > bin_time[best])) best = a
      used2[best] = 1
      printf "%9.1f %6d  %-58s %s\n", bin_time[best], bin_tests[best], bin_label[best], bin_section[best]
    }
    printf "%9.1f         all test binaries\n", lt_total
  }
  if (nb > 0) {
    printf "\nbuild time of each test command (cargo's \"Finished ... in\"):\n"
    for (k = 1; k <= nb; k++) printf "%9.1f  %s\n", build[bname[k]], bname[k]
  }
  if (nslow > 0) {
    printf "\ntests that ran over 60 s, with their reasons (.ci/slow-tests.txt):\n"
    for (k = 1; k <= nslow; k++) {
      why = (slow_name[k] in reason) ? reason[slow_name[k]] : "NO REASON RECORDED: add one to .ci/slow-tests.txt, or make the test faster"
      secs = slow_secs[k] >= 0 ? sprintf("%.0f s", slow_secs[k]) : "> 60 s"
      printf "  %s [%s, %s]: %s\n", slow_name[k], slow_bin[k], secs, why
    }
  } else {
    printf "\nno test ran over 60 s.\n"
  }
}
