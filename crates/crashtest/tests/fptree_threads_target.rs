//! The concurrent FPTree's crash target `fptree-threads`: a bounded run passes (two threads
//! on shared leaves; recovery matches the per-key model, nothing leaks, the integrity check
//! holds at every crash point), and the persist sites it reaches are needed (the mutation
//! check detects their loss) or explained.

mod common;

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
