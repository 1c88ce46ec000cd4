//! The fully persistent FPTree's crash target `fptree-persistent`: a bounded run passes (torn
//! lines, eviction, nested crashes included; recovery matches the model, `check()` and the leak
//! check hold), and every persist site it reaches is needed (the mutation check detects its
//! loss) or explained as benign.

mod common;

#[test]
fn fptree_persistent_passes_and_every_persist_site_is_needed() {
    // The two sites named below that this run does not show needed are excused from their
    // mutated runs (each explores the whole workload and cannot change the verdict).
    let excused = |s: &str| {
        ferrite_crashtest::names_site("fptree/persistent.rs@ORDER(P-FPT-16): node, parent, kind", s)
            || ferrite_crashtest::names_site(
                "fptree/persistent.rs@ORDER(P-FPT-18): the segment word arms the log",
                s,
            )
            || (s.contains("fptree/mod.rs") && s.ends_with("#P-FPT-3"))
    };
    let m = common::mutate_excusing(
        "fptree-persistent",
        "crashtest-fptree-persistent",
        excused,
        |_| {},
    );
    assert!(m.base.nested_images > 0, "{}", m.base);
    assert!(m.base.passed(), "{}", m.base);
    // Two index sites are needed but not shown needed by this workload's bounded run: the
    // persists of the alloc log's node/parent/kind (P-FPT-16) and of the free log's arm word
    // (the second P-FPT-18 persist; seen undetected since 2026-11, while the first, its
    // parent/kind/offset, is detected). Each shares its cache line with words that the next
    // step (the allocator's redo, or the free's own persists) flushes, so only a crash in a
    // narrow window exposes the loss; the index's own target, which makes many more index
    // steps, detects both (`tests/fptree_pindex_target.rs`). Every other site must be detected, benign with a
    // reason, or without effect.
    // Likewise the split log's `cur` (P-FPT-3 in fptree/mod.rs, shared with the fixed tree):
    // since splits release the leaf and retry the insert (the concurrent tree), this
    // workload's bounded run no longer always lands a crash in its window; `fptree-fixed`
    // detects its loss in tests/tester.rs, as `fptree-var` notes too.
    let elsewhere = |s: &str| {
        (s.contains("fptree/persistent.rs")
            && (s.ends_with("#P-FPT-16") || s.ends_with("#P-FPT-18")))
            || (s.contains("fptree/mod.rs") && s.ends_with("#P-FPT-3"))
    };
    common::assert_every_site_needed(&m, elsewhere);
    // The tree's and the index's rules each have a persist site whose loss is detected.
    common::assert_detected(
        &m,
        &[
            "P-FPT-1", "P-FPT-2", "P-FPT-6", "P-FPT-7", "P-FPT-8", "P-FPT-10", "P-FPT-11",
            "P-FPT-13", "P-FPT-14", "P-FPT-15", "P-FPT-17", "P-FPT-18", "P-FPT-19",
        ],
    );
}
