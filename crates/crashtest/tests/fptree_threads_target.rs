//! The concurrent FPTree's crash target `fptree-threads`: a bounded run passes (two threads
//! on shared leaves; recovery matches the per-key model, nothing leaks, the integrity check
//! holds at every crash point), and the persist sites it reaches are needed (the mutation
//! check detects their loss) or explained.

use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn fptree_threads_passes_and_its_persist_sites_are_needed() {
    let dir = TestDir::new("crashtest-fptree-threads");
    let t = find("fptree-threads").expect("registered");
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        // Bounded by images only (a seconds cap would make how much is checked depend on the
        // machine's load).
        budget: Some(20_000),
        time: None,
        ..Config::default()
    };
    let m = t.mutate(&cfg);
    eprintln!("{}\n{m}", m.base);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.base.passed(), "{}", m.base);
    // The lock-word epoch: losing its persist at an open must be caught (a word left odd in
    // the epoch the next open reuses keeps a leaf locked for ever).
    assert!(
        m.sites.iter().any(|(s, o)| s.contains("P-FPT-30") && *o == MutationOutcome::Detected),
        "P-FPT-30 not detected:\n{m}"
    );
    for (s, o) in &m.sites {
        eprintln!("{s}: {o:?}");
    }
}
