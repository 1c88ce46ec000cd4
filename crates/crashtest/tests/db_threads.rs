//! SOFORT with two workload threads on shared lines (`db-sofort-threads`,
//! `db-sofort-threads-parked`; issue [R2] items 1 and 2, `docs/design/crash-testing.md`
//! §13.8): a bounded run of the free-running target, its mutation check, and the parked
//! schedule that shows a commit's stale flushed copy of a shared line landing over a
//! neighbour's newer, acknowledged commit.
//!
//! Every run prints its seed (the report's first line); `FERRITE_TEST_SEED` (decimal or `0x`
//! hex) replaces the default 0x5eed. Runs are bounded by images, with a seconds cap far above
//! what they need as a safety net. Two threads: a run is not reproducible from its seed (the
//! schedule differs), only its failures replay from their saved images.

use std::sync::Arc;
use std::time::Duration;

use ferrite_crashtest::db_threads::DbSofortThreads;
use ferrite_crashtest::{Config, MutationOutcome, Target};
use ferrite_pmem::internals::testing::TestDir;

/// A safety cap on seconds; the image budgets are what bound the runs.
const SAFETY: Duration = Duration::from_secs(600);

/// The run's seed: `FERRITE_TEST_SEED` or 0x5eed.
fn seed() -> u64 {
    let s = std::env::var("FERRITE_TEST_SEED").ok();
    let parsed = s.as_deref().and_then(|s| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    });
    let seed = parsed.unwrap_or(0x5eed);
    eprintln!("seed {seed:#x} (FERRITE_TEST_SEED={seed:#x} to run it again)");
    seed
}

fn cfg(dir: &TestDir, budget: u64) -> Config {
    Config {
        seed: seed(),
        out_dir: dir.path().to_path_buf(),
        budget: Some(budget),
        time: Some(SAFETY),
        ..Config::default()
    }
}

/// The free-running target: two threads commit interleaved consecutive keys (rows sharing
/// MVCC, value-slot and heap lines), updates and deletes of their recent rows, large values
/// and rollbacks. On today's code it finds the loss of issue [R2] item 2 on its own (seed
/// 0x5eed: three runs out of three, 2026-12): the run must either pass, or fail only with a
/// check failure (rows the acknowledgements do not allow, or a recovery that refuses the image;
/// never a workload error, a panic or a hang). Once item 2 is fixed this must assert a pass.
#[test]
fn db_sofort_threads_passes_a_bounded_run_or_finds_the_shared_line_loss() {
    let dir = TestDir::new("crashtest-db-threads");
    let t = Arc::new(DbSofortThreads::free(2));
    let r =
        ferrite_crashtest::explore(t.clone(), &Config { nested_rate: 0.05, ..cfg(&dir, 8_000) });
    eprint!("{r}");
    assert!(r.workload_error.is_none(), "{r}");
    match r.failures.first() {
        None => {
            assert!(r.passed(), "{r}");
            assert!(r.images >= t.min_images(), "{r}");
        }
        Some(f) => {
            eprintln!("found (issue [R2] item 2): {} at {}", f.message, f.key);
            // Rows lost or torn, or a recovery that refuses the image (seen: "value extent
            // ... overlaps another"); not a panic, a hang or a workload error.
            assert!(f.message.starts_with("check failed:"), "{f:?}");
        }
    }
}

/// Issue [R2] item 2 on today's code: thread A commits row 16 and parks at its F1 fence
/// (its flushes of the MVCC line of rows 16..20, the value-slot lines of rows 16..24 and its
/// `code` extent's line captured, not yet durable); thread B inserts rows 17 and 18 on those
/// lines and commits twice (its second commit makes its first's finalization durable and
/// rewrites its area); A is released, and its fence lands its stale copies over B's newer
/// durable lines (axioms M3, M4 of `docs/design/persistence.md`, which the simulated domain
/// models: a fence writes each pending line's captured content). A crash at A's fence
/// (the image with its pending lines) then recovers without B's acknowledged rows.
///
/// This test asserts the loss as found; once SOFORT keeps a shared line from being flushed by
/// one thread while another writes it (the fix of item 2), it fails here and must become an
/// assertion that the run passes.
#[test]
fn a_parked_commit_loses_the_neighbours_acknowledged_commit() {
    let dir = TestDir::new("crashtest-db-threads-parked");
    let t = Arc::new(DbSofortThreads::parked(0));
    // No nested crashes or eviction samples: the failure needs neither.
    let r = ferrite_crashtest::explore(
        t.clone(),
        &Config { exhaustive: true, nested: false, evict_samples: 0, ..cfg(&dir, 20_000) },
    );
    eprint!("{r}");
    assert!(r.workload_error.is_none(), "{r}");
    let f = r.failures.first().unwrap_or_else(|| panic!("the parked schedule lost nothing:\n{r}"));
    eprintln!("found: {} at {} ({})", f.message, f.key, f.spec);
    assert!(f.key.contains("#P-SOF-5"), "the loss shows at a fence of F1: {f:?}");
    assert!(f.message.contains("item"), "{f:?}");
}

/// The mutation check of `db-sofort-threads` (two free-running rounds, nested rate 0.05): every
/// persist site the run reaches is detected, benign (SOFORT's reasons), or without effect.
///
/// Ignored: its unmutated run must pass, and on today's code it loses acknowledged commits
/// (issue [R2] item 2; see the tests above). Run it once item 2 is fixed:
/// `cargo test -p ferrite-crashtest --profile ci --test db_threads -- --ignored`.
#[test]
#[ignore = "the unmutated run fails on today's code (issue [R2] item 2)"]
fn every_persist_site_of_db_sofort_threads_is_needed() {
    let dir = TestDir::new("crashtest-db-threads-mutate");
    let t = Arc::new(DbSofortThreads::free(2));
    let m = ferrite_crashtest::mutate(
        t.clone(),
        &Config { nested_rate: 0.05, watchdog: Duration::from_secs(10), ..cfg(&dir, 2_000) },
    );
    eprint!("{}{m}", m.base);
    assert!(m.base.passed(), "{}", m.base);
    for (s, o) in &m.sites {
        eprintln!("{s}: {o:?}");
    }
    let detected = m.sites.iter().filter(|(_, o)| *o == MutationOutcome::Detected).count();
    assert!(detected >= 15, "{m}");
    assert!(m.passed(), "{m}");
}
