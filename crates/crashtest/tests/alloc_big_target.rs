//! The big allocator's crash target `alloc-big`: a bounded run passes, and every persist site
//! it reaches is needed (the mutation check detects its loss) or explained as benign.

use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn alloc_big_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-alloc-big");
    let t = find("alloc-big").expect("registered");
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        // Bounded by images only (a seconds cap would make how much is checked depend on the
        // machine's load).
        budget: Some(4_500),
        time: None,
        // No mutated run for the target's benign sites: they cannot change the verdict
        // (`ferrite crashtest alloc-big --mutate` runs them).
        excused: Some(std::sync::Arc::new(|_: &str| None)),
        ..Config::default()
    };
    let m = t.mutate(&cfg);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    eprintln!("{m}");
    assert!(m.passed(), "{m}");
    for rule in ["P-ALLOC-1", "P-ALLOC-2", "P-ALLOC-3", "P-ALLOC-4"] {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
    // The big allocator's own persist sites (segment take: header and table) are reached.
    assert!(m.sites.iter().any(|(s, _)| s.contains("alloc/big.rs")), "{m}");
}
