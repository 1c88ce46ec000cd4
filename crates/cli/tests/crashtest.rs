//! `ferrite crashtest` end to end: the list, a seeded defect found (exit 1) and replayed from
//! the printed command, a twin passing (exit 0), usage errors (exit 2), a run stopped by its
//! budget (exit 3, never "PASSED").

use std::process::Command;

use ferrite_pmem::internals::testing::TestDir;

fn ferrite(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrite")).args(args).output().expect("run ferrite");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn list_shows_the_toys() {
    let (code, out, _) = ferrite(&["crashtest", "--list"]);
    assert_eq!(code, 0);
    for toy in ["toy-missing-flush", "toy-missing-fence", "toy-wrong-order", "toy-commit-first"] {
        assert!(out.lines().any(|l| l.starts_with(&format!("{toy}\t"))), "{toy} missing:\n{out}");
    }
    let (code, names, _) = ferrite(&["crashtest", "--list", "--names"]);
    assert_eq!(code, 0);
    assert!(names.lines().all(|l| !l.contains('\t')) && names.contains("toy-wrong-order-fixed"));
}

#[test]
fn a_failure_is_found_and_replays_with_the_printed_command() {
    let dir = TestDir::new("cli-crashtest");
    let out = dir.path().to_str().unwrap();
    let (code, stdout, stderr) =
        ferrite(&["crashtest", "toy-commit-first", "--seed", "7", "--quiet", "--out", out]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("FAILED") && stdout.contains("seed 0x7"), "{stdout}");
    let replay = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: "))
        .expect("a replay command is printed");
    let args: Vec<&str> = replay.split_whitespace().collect();
    assert_eq!(args[0], "ferrite");
    let (code, again, _) = ferrite(&args[1..]);
    assert_eq!(code, 1, "{again}");
    assert!(again.contains("FAILED") && again.contains("record 0"), "{again}");
}

#[test]
fn a_twin_passes_and_usage_errors_exit_2() {
    let dir = TestDir::new("cli-crashtest-ok");
    let out = dir.path().to_str().unwrap();
    let (code, stdout, _) =
        ferrite(&["crashtest", "toy-missing-fence-fixed", "--exhaustive", "--quiet", "--out", out]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("PASSED"));
    assert_eq!(ferrite(&["crashtest", "no-such-target"]).0, 2);
    assert_eq!(ferrite(&["crashtest"]).0, 2);
    assert_eq!(ferrite(&["crashtest", "toy-wrong-order", "--seed", "zz"]).0, 2);
    assert_eq!(ferrite(&["crashtest", "toy-wrong-order", "--replay", "/no/such/dir"]).0, 2);
}

#[test]
fn a_run_stopped_by_its_budget_says_how_much_it_checked_and_exits_3() {
    let dir = TestDir::new("cli-crashtest-budget");
    let out = dir.path().to_str().unwrap();
    let (code, stdout, _) = ferrite(&[
        "crashtest",
        "toy-commit-first-fixed",
        "--budget",
        "5",
        "--seed",
        "1",
        "--quiet",
        "--out",
        out,
    ]);
    assert_eq!(code, 3, "{stdout}");
    assert!(!stdout.contains("PASSED"), "{stdout}");
    assert!(stdout.contains("STOPPED (budget): checked "), "{stdout}");
}
