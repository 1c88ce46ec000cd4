//! The byte-key FPTree's crash target `fptree-var`: a bounded run passes (recovery matches the
//! model, no key block leaks, the integrity check holds at every crash point), and every persist
//! site it reaches is needed (the mutation check detects its loss) or explained as benign.

use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn fptree_var_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-fptree-var");
    let t = find("fptree-var").expect("registered");
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        // Bounded by images only (a seconds cap would make how much is checked depend on the
        // machine's load).
        budget: Some(40_000),
        time: None,
        ..Config::default()
    };
    let m = t.mutate(&cfg);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    eprintln!("{}\n{m}", m.base);
    assert!(m.base.passed(), "{}", m.base);
    // Two persist sites outside the byte-key code are needed but are not always shown needed by
    // this workload's bounded run (the crash that exposes them must land in a narrow window):
    // the split log's `cur` (P-FPT-3 in fptree/mod.rs, shared with the fixed tree, whose target
    // `fptree-fixed` detects its loss in tests/tester.rs) and the allocator's lazy disarm
    // (P-ALLOC-3 outside recovery, detected by `alloc-small` in tests/tester.rs). Every other
    // site must be detected, benign with a reason, or without effect.
    // The lock-word epoch's persist at open (P-FPT-30, fptree/mod.rs) is not always shown
    // needed by this single-threaded run either (the root line holding it is written back by
    // the split log's persists soon after creation); `fptree-threads` (which reopens) and
    // `fptree-persistent` detect its loss.
    let elsewhere = |s: &str| {
        (s.contains("fptree/mod.rs") && (s.ends_with("#P-FPT-3") || s.ends_with("#P-FPT-30")))
            || (s.contains("alloc/redo.rs") && s.ends_with("#P-ALLOC-3"))
    };
    for (s, o) in &m.sites {
        assert!(
            matches!(
                o,
                MutationOutcome::Detected | MutationOutcome::Benign(_) | MutationOutcome::NoEffect
            ) || (elsewhere(s) && *o == MutationOutcome::Undetected),
            "{s}: {o:?}\n{m}"
        );
    }
    // The byte-key rules: each has a persist site whose loss was detected.
    for rule in ["P-FPT-21", "P-FPT-24", "P-FPT-25"] {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
    // The key-block paths of var.rs are reached (insert, update, delete, split, leaf deletion).
    assert!(m.sites.iter().any(|(s, _)| s.contains("fptree/var.rs")), "{m}");
}
