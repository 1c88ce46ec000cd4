//! The persistent inner index's crash target `fptree-pindex`: a bounded run passes (torn lines,
//! eviction, nested crashes included), and every persist site it reaches is needed (the
//! mutation check detects its loss) or explained as benign.

mod common;

#[test]
fn fptree_pindex_passes_and_every_persist_site_is_needed() {
    // The target's benign sites make no mutated run (they cannot change the verdict).
    let m = common::mutate_excusing("fptree-pindex", "crashtest-fptree-pindex", |_| false, |_| {});
    assert!(m.base.nested_images > 0, "{}", m.base);
    assert!(m.passed(), "{m}");
    // Every rule of the index has a persist site whose loss the tester detects.
    common::assert_detected(
        &m,
        &["P-FPT-14", "P-FPT-15", "P-FPT-16", "P-FPT-17", "P-FPT-18", "P-FPT-19"],
    );
}
