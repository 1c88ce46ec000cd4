//! The concurrent FPTree's crash target `fptree-threads`: a bounded run passes (two threads
//! on shared leaves; recovery matches the per-key model, nothing leaks, the integrity check
//! holds at every crash point), and the persist sites it reaches are needed (the mutation
//! check detects their loss) or explained; and `fptree-threads-persistent`, the same workload
//! with the inner index in PM, passes a bounded run and needs its epoch persist.

mod common;

use ferrite_crashtest::{Config, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn fptree_threads_passes_and_its_persist_sites_are_needed() {
    let m = common::mutate_with("fptree-threads", "crashtest-fptree-threads", |cfg| {
        // Half the usual budget: two threads paused at persist points make each image dearer.
        cfg.budget = Some(20_000);
        // A dropped epoch persist (P-FPT-30) shows as a recovery that hangs on a leaf left
        // locked; the watchdog reports it. A healthy recovery here takes about a millisecond,
        // so 5 s (not the default 30 s, paid once per nesting level) still leaves a margin of
        // thousands while keeping the detection cheap.
        cfg.watchdog = std::time::Duration::from_secs(5);
    });
    assert!(m.base.passed(), "{}", m.base);
    for (s, o) in &m.sites {
        eprintln!("{s}: {o:?}");
    }
    // The lock-word epoch: losing its persist at an open must be caught (a word left odd in
    // the epoch the next open reuses keeps a leaf locked for ever).
    common::assert_detected(&m, &["P-FPT-30"]);
    common::assert_every_site_needed(&m, |_| false);
}

/// The same workload on a tree whose inner index is in PM (`fptree-threads-persistent`): a
/// bounded run passes (recovery through the index's and the tree's logs, no leaf walk at
/// open), and its mutation check, narrowed to the rule this placement leans on most: with no
/// leaf walk at open, only the epoch persist (P-FPT-30) keeps a lock word written back odd
/// from locking its leaf in the next open; dropping it must be detected. (The full mutation
/// check, a run per reached site, is not made here; the tree's other persist sites are the
/// DRAM run's, checked above, and the index's, which `fptree-persistent` and
/// `fptree-pindex` check.)
#[test]
fn fptree_threads_persistent_passes_and_needs_its_epoch_persist() {
    let dir = TestDir::new("crashtest-fptree-threads-p");
    let t = find("fptree-threads-persistent").expect("registered");
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(20_000),
        time: None,
        watchdog: std::time::Duration::from_secs(5),
        ..Config::default()
    };
    let r = t.explore(&cfg);
    eprintln!("{r}");
    assert_eq!(r.smoke_problem(t.min_images()), None, "{r}");
    assert!(r.passed() && r.nested_images > 0, "{r}");
    let epoch: Vec<String> = r.sites.keys().filter(|s| s.ends_with("#P-FPT-30")).cloned().collect();
    assert!(!epoch.is_empty(), "the run reached no epoch persist:\n{r}");
    let m =
        t.explore(&Config { drop_sites: epoch, stop_at_first_failure: true, nested: false, ..cfg });
    eprintln!("{m}");
    assert!(m.failed(), "dropping the epoch persist went unnoticed:\n{m}");
}
