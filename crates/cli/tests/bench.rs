//! `ferrite bench` is wired into the CLI: it lists the harness's workloads and engines, and a
//! usage error exits 2 (the harness itself is tested in `crates/bench`).

use std::process::Command;

#[test]
fn bench_lists_workloads_and_engines_and_rejects_bad_flags() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_ferrite")).args(["bench", "--list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("insert1") && text.contains("ycsb-a"), "{text}");
    assert!(text.contains("sqlite-wal-full") && text.contains("lmdb"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["bench", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `ferrite bench restart` end to end on a tiny TATP: its children are the `ferrite` binary
/// itself (`bench restart-child`); it writes the CSV (a row per bucket), the summary and the
/// SVG, and the reopened database passes its check. Fixed commit counts (`--warm-txns`,
/// `--after-txns`) make it independent of the machine's speed; no time is asserted. Bad
/// arguments are usage errors (exit 2), and `--help` describes the benchmark.
#[test]
fn bench_restart_runs_a_tiny_tatp_and_rejects_bad_arguments() {
    use ferrite_pmem::internals::testing::TestDir;
    let dir = TestDir::new("cli-bench-restart");
    let (dbs, out) = (dir.path().join("dbs"), dir.path().join("out"));
    std::fs::create_dir_all(&dbs).unwrap();
    let ferrite = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_ferrite")).args(args).output().unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code(), text)
    };
    let (code, text) = ferrite(&[
        "bench",
        "restart",
        "--scale",
        "60",
        "--warm",
        "10ms",
        "--warm-txns",
        "20",
        "--after",
        "30ms",
        "--after-txns",
        "20",
        "--bucket",
        "10ms",
        "--dir",
        dbs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    for want in ["warm child ended by signal 9", "time to first commit", "check after the run: ok"]
    {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    let csv = std::fs::read_to_string(out.join("restart.csv")).unwrap();
    assert!(csv.lines().count() >= 4, "{csv}");
    assert!(csv.lines().skip(1).all(|l| l.starts_with("tatp,tatp-60,sync,")), "{csv}");
    assert!(out.join("restart-tatp-60.svg").is_file());
    assert_eq!(std::fs::read_dir(&dbs).unwrap().count(), 0, "databases removed");
    for bad in [
        &["bench", "restart", "--threads", "0"][..],
        &["bench", "restart", "--bucket", "5m"],
        &["bench", "restart", "--config", "x=color=red"],
        &["bench", "restart", "--config", "nope"],
        &["bench", "restart", "--workload", "ycsb"],
        &["bench", "restart", "--no-such-flag"],
    ] {
        let (code, text) = ferrite(bad);
        assert_eq!(code, Some(2), "{bad:?}: {text}");
        assert!(!text.contains("panicked"), "{bad:?}: {text}");
    }
    let (code, text) = ferrite(&["bench", "restart", "--help"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("SIGKILL") && text.contains("--after"), "{text}");
}
