//! Crash target `alloc-huge` (huge allocations and `defragment()`): a bounded run passes, and
//! every persist site it reaches is needed (dropping it is detected) or explained as benign.

use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn alloc_huge_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-alloc-huge");
    let t = find("alloc-huge").expect("registered");
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        // Bounded by images only (a seconds cap would make how much is checked depend on the
        // machine's load), large enough that the run reaches the end of the workload.
        budget: Some(20_000),
        time: None,
        // No mutated run for the target's benign sites: they cannot change the verdict
        // (`ferrite crashtest alloc-huge --mutate` runs them).
        excused: Some(std::sync::Arc::new(|_: &str| None)),
        ..Config::default()
    };
    let m = t.mutate(&cfg);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.passed(), "{m}");
    // The huge header's two persists (size before magic, magic before the transaction) are
    // each needed.
    let huge: Vec<_> = m.sites.iter().filter(|(s, _)| s.contains("P-ALLOC-10")).collect();
    assert!(huge.len() >= 2, "P-ALLOC-10 sites not reached:\n{m}");
    assert!(huge.iter().all(|(_, o)| *o == MutationOutcome::Detected), "{m}");
    for rule in ["P-ALLOC-1", "P-ALLOC-2", "P-ALLOC-3", "P-ALLOC-4", "P-PM-8", "P-PM-9"] {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
    eprintln!("{m}");
}
