//! The concurrent FPTree's crash target `fptree-threads`: a bounded run passes (two threads
//! on shared leaves; recovery matches the per-key model, nothing leaks, the integrity check
//! holds at every crash point), and the persist sites it reaches are needed (the mutation
//! check detects their loss) or explained.

mod common;

#[test]
fn fptree_threads_passes_and_its_persist_sites_are_needed() {
    // Half the usual budget: two threads paused at persist points make each image dearer.
    let m = common::mutate_within("fptree-threads", "crashtest-fptree-threads", 20_000);
    assert!(m.base.passed(), "{}", m.base);
    for (s, o) in &m.sites {
        eprintln!("{s}: {o:?}");
    }
    // The lock-word epoch: losing its persist at an open must be caught (a word left odd in
    // the epoch the next open reuses keeps a leaf locked for ever).
    common::assert_detected(&m, &["P-FPT-30"]);
    common::assert_every_site_needed(&m, |_| false);
}
