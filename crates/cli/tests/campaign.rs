//! `ferrite campaign` end to end: a short campaign (children are the `ferrite` binary itself,
//! as `campaign-child`) passes and prints its summary; the in-memory engine and an unknown
//! workload are usage errors (exit 2). The seed is printed and `FERRITE_TEST_SEED` replays it.

use std::process::Command;

use ferrite_pmem::internals::testing::{TestDir, test_seed};

fn ferrite(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrite")).args(args).output().expect("run ferrite");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_short_campaign_passes_and_cleans_up() {
    let seed = format!("{:#x}", test_seed());
    let dir = TestDir::new("cli-campaign");
    let d = dir.path().to_str().unwrap();
    let (code, out, err) =
        ferrite(&["campaign", "--kills", "3", "--subscribers", "50", "--seed", &seed, "--dir", d]);
    assert_eq!(code, 0, "seed {seed}\n{out}\n{err}");
    for want in ["Kills: 3", "Lost: 0", "Invariant violations: 0", "Open to first commit", "PASSED"]
    {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    assert!(out.contains(&format!("seed {seed}")), "{out}");
    assert!(!dir.path().join("db").exists(), "the database is removed without --keep");
}

#[test]
fn a_short_tpcc_campaign_passes() {
    let seed = format!("{:#x}", test_seed());
    let dir = TestDir::new("cli-campaign-tpcc");
    let d = dir.path().to_str().unwrap();
    let (code, out, err) = ferrite(&[
        "campaign",
        "--workload",
        "tpcc",
        "--items",
        "200",
        "--customers",
        "30",
        "--kills",
        "3",
        "--max-acks",
        "60",
        "--seed",
        &seed,
        "--dir",
        d,
    ]);
    assert_eq!(code, 0, "seed {seed}\n{out}\n{err}");
    for want in ["tpcc on", "1 warehouses, 200 items", "Kills: 3", "Lost: 0", "PASSED"] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
}

#[test]
fn refusals_are_usage_errors() {
    let dir = TestDir::new("cli-campaign-refused");
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = ferrite(&["campaign", "--engine", "reference", "--dir", d]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("in memory"), "{err}");
    let (code, _, err) = ferrite(&["campaign", "--workload", "nope", "--dir", d]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown campaign workload"), "{err}");
    // Regression: `--kills 0` checked nothing and printed "Result: PASSED".
    let (code, out, err) = ferrite(&["campaign", "--kills", "0", "--dir", d]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("kills must be at least 1") && !out.contains("PASSED"), "{out}\n{err}");
}
