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
