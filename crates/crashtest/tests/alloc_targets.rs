//! The allocator's crash targets beyond `alloc-small` (whose check is in `tester.rs`): the
//! two-thread target and the pool-set target pass a bounded run, and every persist site they
//! reach is needed (the mutation check detects its loss) or explained as benign.

use std::sync::Arc;

use ferrite_crashtest::alloc_threads::AllocThreads;
use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

fn cfg(dir: &TestDir) -> Config {
    Config {
        out_dir: dir.path().to_path_buf(),
        // Bounded by images only (a seconds cap would make how much is checked depend on the
        // machine's load); large enough that the run reaches the end of the workload, since a
        // run stopped early is not a pass.
        budget: Some(40_000),
        time: None,
        // A mutation check makes no run for the target's benign sites: their outcome cannot
        // change the verdict (`ferrite crashtest alloc-threads --mutate` runs them).
        excused: Some(Arc::new(|_: &str| None)),
        ..Config::default()
    }
}

#[test]
fn alloc_threads_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-alloc-threads");
    let t = find("alloc-threads").expect("registered");
    let m = t.mutate(&cfg(&dir));
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.passed(), "{m}");
    for rule in ["P-ALLOC-1", "P-ALLOC-2", "P-ALLOC-3", "P-ALLOC-4"] {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
}

/// How often the run's images held both recovery items armed: printed, not asserted (which
/// commits overlap is up to the scheduler; the deterministic two-armed recovery is tested in
/// `crates/ferrite/tests/alloc.rs`, `two_armed_items_recover_together`).
#[test]
fn alloc_threads_reports_images_with_two_armed_items() {
    let dir = TestDir::new("crashtest-alloc-threads-armed");
    let t = Arc::new(AllocThreads::default());
    let r = ferrite_crashtest::explore(t.clone(), &cfg(&dir));
    assert!(r.passed(), "{r}");
    let (images, both) = t.both_armed();
    assert!(images > 0);
    eprintln!("alloc-threads: {both} of {images} recovered images held two armed recovery items");
}
