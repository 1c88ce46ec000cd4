//! `ferrite info` end to end: the items the command promises are printed, bad input is a
//! usage error (exit 2), and a damaged pool file is reported as invalid.

use std::process::Command;

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, Pool};

fn ferrite(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .env_remove("FERRITE_FLUSH")
        .env_remove("FERRITE_MODE")
        .env_remove("FERRITE_EADR")
        .output()
        .expect("run ferrite");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn info_prints_features_mode_and_costs() {
    let dir = TestDir::new("cli-info");
    let (code, out, err) = ferrite(&["info", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "stderr: {err}");
    for item in [
        "clwb",
        "clflushopt",
        "invariant-tsc",
        "best flush instruction",
        "MAP_SYNC:",
        "durability mode:",
        "guarantee:",
        "free of",
        "persist barrier",
        "line just flushed",
    ] {
        assert!(out.contains(item), "missing {item:?} in:\n{out}");
    }
    // The probe cleans up after itself.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn info_on_a_pool_file_validates_its_header() {
    let dir = TestDir::new("cli-pool");
    let path = dir.join("p");
    Pool::create(&path, 64 * 1024, &Options::default().layout("cli")).unwrap().close().unwrap();
    let (code, out, _) = ferrite(&["info", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("Pool file: valid") && out.contains("layout: cli"), "{out}");
    assert!(out.contains("last shutdown: clean"), "{out}");

    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let (code, out, _) = ferrite(&["info", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("Pool file: INVALID"), "{out}");
}

#[test]
fn bad_input_is_a_usage_error() {
    assert_eq!(ferrite(&["info", "--flush", "nope"]).0, 2);
    assert_eq!(ferrite(&["nosuchcommand"]).0, 2);
    let (code, _, err) = ferrite(&["info", "/definitely/not/here"]);
    assert_eq!(code, 2);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn info_prints_the_effective_configuration() {
    let dir = TestDir::new("cli-config");
    let (code, out, err) = ferrite(&[
        "info",
        dir.path().to_str().unwrap(),
        "--barrier-ns",
        "500",
        "--bandwidth-mbps",
        "1500",
        "--segment-size",
        "1048576",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Effective configuration"), "{out}");
    assert!(out.contains("500 ns per barrier"), "{out}");
    assert!(out.contains("1500 MB/s"), "{out}");
    assert!(out.contains("segment size: 1048576 bytes"), "{out}");
    assert!(out.contains("emulation clock:"), "{out}");
}
