//! The paged engine's crash targets (`db-paged-journal`, `db-paged-wal`): each protocol's
//! generic `Database` target run exhaustively on a small workload, and the mutation check
//! that drops each of its persist sites in turn (`docs/design/paged.md` §10).

use std::sync::Arc;
use std::time::Duration;

use ferrite::EngineKind;
use ferrite_crashtest::db::DbTarget;
use ferrite_crashtest::{Config, MutationOutcome, Target};
use ferrite_pmem::internals::testing::TestDir;

const SAFETY: Duration = Duration::from_secs(600);

fn paged() -> impl Iterator<Item = EngineKind> {
    EngineKind::PAGED
        .iter()
        .copied()
        .filter(|k| std::env::var("PAGED_ONLY").map_or(true, |o| k.name() == o))
}

fn cfg(dir: &TestDir, budget: u64) -> Config {
    Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(budget),
        time: Some(SAFETY),
        ..Config::default()
    }
}

#[test]
fn both_protocols_are_crash_targets() {
    let names: Vec<&str> = paged().map(|k| k.name()).collect();
    assert_eq!(names, ["paged-journal", "paged-wal"]);
}

/// Every crash point of a 6-transaction workload, without nested crashes (the next test runs
/// them): the rollback journal's commit has about 200 pending lines per crash point, each
/// explored as none, all, singletons, all-but-one and seeded subsets.
#[test]
fn small_workload_passes_exhaustively() {
    let dir = TestDir::new("crashtest-paged-exhaustive");
    for kind in paged() {
        let t = Arc::new(DbTarget::with_txns(kind, 6));
        let r = ferrite_crashtest::explore(
            t.clone(),
            &Config { exhaustive: true, nested_rate: 0.0, ..cfg(&dir, 20_000) },
        );
        eprint!("{r}");
        assert!(r.passed(), "{r}");
        assert!(!r.stopped_early, "{}: budget too small for an exhaustive run:\n{r}", t.name());
        assert_eq!(r.crashed, r.visited, "exhaustive mode crashes at every visit");
        assert!(r.images >= t.min_images(), "{r}");
    }
}

/// Sampled crash points with a quarter of the recoveries crashed again (the hot-journal
/// rollback and the WAL scan crashed in the middle) and two corrupted images per crash point
/// (which must give typed errors, never panics), bounded by an image budget: no failure in
/// what was explored. (This is also the smoke run of the registered `db-paged-*` targets, which
/// `tests/tester.rs` leaves to this file.)
#[test]
fn nested_crashes_inside_recovery_find_no_failure() {
    let dir = TestDir::new("crashtest-paged-nested");
    for kind in paged() {
        let t = Arc::new(DbTarget::with_txns(kind, 12));
        let r = ferrite_crashtest::explore(
            t.clone(),
            &Config { nested_rate: 0.25, corrupt_samples: 2, ..cfg(&dir, 6_000) },
        );
        eprint!("{r}");
        assert!(!r.failed(), "{r}");
        assert!(r.images >= 500, "{r}");
        assert!(r.nested_images > 0 && r.corrupt_images > 0, "{r}");
    }
}

/// Every persist site the paged targets reach is needed: dropping it makes the tester find a
/// failure.
#[test]
fn every_persist_site_of_the_paged_targets_is_needed() {
    let dir = TestDir::new("crashtest-paged-mutate");
    for kind in paged() {
        let t = Arc::new(DbTarget::with_txns(kind, 12));
        let m = ferrite_crashtest::mutate(
            t.clone(),
            &Config { nested_rate: 0.25, ..cfg(&dir, 10_000) },
        );
        eprint!("{}{m}", m.base);
        assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
        assert!(m.passed(), "{m}");
        let detected = m.sites.iter().filter(|(_, o)| *o == MutationOutcome::Detected).count();
        assert!(detected >= 5, "{m}");
    }
}
