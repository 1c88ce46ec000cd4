//! The persistent inner index's crash target `fptree-pindex`: a bounded run passes (torn lines,
//! eviction, nested crashes included), and every persist site it reaches is needed (the
//! mutation check detects its loss) or explained as benign.

use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn fptree_pindex_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-fptree-pindex");
    let t = find("fptree-pindex").expect("registered");
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        // Bounded by images only (a seconds cap would make how much is checked depend on the
        // machine's load).
        budget: Some(40_000),
        time: None,
        ..Config::default()
    };
    let m = t.mutate(&cfg);
    eprintln!("{}\n{m}", m.base);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.base.nested_images > 0, "{}", m.base);
    assert!(m.passed(), "{m}");
    // Every rule of the index has a persist site whose loss the tester detects.
    for rule in ["P-FPT-14", "P-FPT-15", "P-FPT-16", "P-FPT-17", "P-FPT-18", "P-FPT-19"] {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
}
