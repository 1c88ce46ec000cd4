//! The byte-key fully persistent FPTree's crash target `fptree-persistent-var`: a bounded run
//! passes (torn lines, nested crashes; recovery matches the model, `check()` and the leak check
//! — leaves, key blocks, index nodes, separator blocks and the orphans of leaves whose leak
//! rule is pending — hold, before and after the first lock of most leaves), and every persist
//! site it reaches is needed (the mutation check detects its loss) or explained as benign.

mod common;

/// The site in `file` with `rule` on the lowest line (the first of a function's persists).
fn first_site(m: &ferrite_crashtest::MutationReport, file: &str, rule: &str) -> Option<String> {
    let line = |s: &str| -> Option<u64> { s.split(':').nth(1)?.parse().ok() };
    m.sites
        .iter()
        .map(|(s, _)| s.as_str())
        .filter(|s| s.contains(file) && s.ends_with(rule))
        .min_by_key(|s| line(s))
        .map(str::to_owned)
}

#[test]
fn fptree_persistent_var_passes_and_every_persist_site_is_needed() {
    let m = common::mutate_with("fptree-persistent-var", "crashtest-fptree-persistent-var", |c| {
        // Each image costs more than `fptree-var`'s (index nodes, separator blocks, and the
        // rewrites after recovery, with nested crashes inside them): half the budget and a
        // fifth of the nested rate keep the run near two minutes.
        c.budget = Some(20_000);
        c.nested_rate = 0.05;
    });
    assert!(m.base.nested_images > 0, "{}", m.base);
    assert!(m.base.passed(), "{}", m.base);
    // Sites needed but not always shown needed by this bounded run, each detected by another
    // target that reaches the same line (the code is shared): the split log's `cur` (P-FPT-3,
    // `fptree-fixed`; `fptree-var` and `fptree-persistent` excuse it alike), the predecessor's
    // unlink (P-FPT-11, `fptree-var`), the index's alloc-log persist (P-FPT-16) and first
    // creation persist (P-FPT-19) and the slot log's disarm (P-FPT-31) (`fptree-pindex` and
    // `fptree-pindex-var`). P-FPT-36 (the deleted leaf's bitmap before its key frees) is
    // needed — without it recovery can meet the last key's valid slot with its block freed
    // (the defect this target found) — but only this target reaches it, and its bounded run
    // does not always land a crash in that window with the bitmap's line not written back: it
    // is accepted by name as not shown, a gap stated in `docs/design/crash-testing.md`.
    let first_creation_persist = first_site(&m, "fptree/persistent.rs", "#P-FPT-19");
    let elsewhere = |s: &str| {
        (s.contains("fptree/mod.rs") && (s.ends_with("#P-FPT-3") || s.ends_with("#P-FPT-11")))
            || (s.contains("fptree/persistent.rs")
                && (s.ends_with("#P-FPT-16") || s.ends_with("#P-FPT-31")))
            || Some(s) == first_creation_persist.as_deref()
            || (s.contains("fptree/var.rs") && s.ends_with("#P-FPT-36"))
    };
    common::assert_every_site_needed(&m, elsewhere);
    common::assert_detected(
        &m,
        &["P-FPT-14", "P-FPT-15", "P-FPT-17", "P-FPT-21", "P-FPT-24", "P-FPT-25", "P-FPT-32"],
    );
}
