//! The byte-key fully persistent FPTree's crash target `fptree-persistent-var`: a bounded run
//! passes (torn lines, nested crashes; recovery matches the model, `check()` and the leak check
//! — leaves, key blocks, index nodes, separator blocks and the orphans of leaves whose leak
//! rule is pending — hold, before and after the first lock of most leaves), and every persist
//! site it reaches is needed (the mutation check detects its loss) or explained as benign; and
//! `fptree-persistent-var-delete`'s exhaustive run needs the deleted leaf's bitmap persist
//! (P-FPT-36), which the sampled run need not show.

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
    // P-FPT-36 (the deleted leaf's bitmap before its key frees), which only the byte-key
    // trees with a persistent index reach: this sampled run need not crash inside the free
    // after it (the allocator's fences there are visited by every free of the run), so it is
    // shown needed by the exhaustive run of `fptree-persistent-var-delete` with its sites
    // dropped (below); only then may this run leave it undetected.
    let shown = shows_p_fpt_36_needed("crashtest-fptree-pvar-delete-m");
    // Sites needed but not always shown needed by this bounded run, each detected by another
    // target that reaches the same line (the code is shared): the split log's `cur` (P-FPT-3,
    // `fptree-fixed`; `fptree-var` and `fptree-persistent` excuse it alike), the predecessor's
    // unlink (P-FPT-11, `fptree-var`), the index's alloc-log persist (P-FPT-16) and first
    // creation persist (P-FPT-19) and the slot log's disarm (P-FPT-31) (`fptree-pindex` and
    // `fptree-pindex-var`), and P-FPT-36 once shown above. The ones this run leaves undetected
    // are excused from their mutated runs (each explores the whole workload and cannot change
    // the verdict).
    let excused = move |s: &str| {
        (s.contains("fptree/mod.rs") && s.ends_with("#P-FPT-3"))
            || ferrite_crashtest::names_site(
                "fptree/persistent.rs@ORDER(P-FPT-19): magic and root nulled before the header",
                s,
            )
            || ferrite_crashtest::names_site(
                "fptree/persistent.rs@ORDER(P-FPT-31): disarm after the slot's commit or free",
                s,
            )
            || (shown && s.ends_with("#P-FPT-36"))
    };
    let m = common::mutate_excusing(
        "fptree-persistent-var",
        "crashtest-fptree-persistent-var",
        excused,
        |c| {
            // Each image costs more than `fptree-var`'s (index nodes, separator blocks, and the
            // rewrites after recovery, with nested crashes inside them): half the budget and a
            // fifth of the nested rate.
            c.budget = Some(20_000);
            c.nested_rate = 0.05;
        },
    );
    assert!(m.base.nested_images > 0, "{}", m.base);
    assert!(m.base.passed(), "{}", m.base);
    let p36: Vec<&String> =
        m.sites.iter().map(|(s, _)| s).filter(|s| s.ends_with("#P-FPT-36")).collect();
    assert!(!p36.is_empty(), "no P-FPT-36 site reached:\n{m}");
    let first_creation_persist = first_site(&m, "fptree/persistent.rs", "#P-FPT-19");
    let elsewhere = |s: &str| {
        (s.contains("fptree/mod.rs") && (s.ends_with("#P-FPT-3") || s.ends_with("#P-FPT-11")))
            || (s.contains("fptree/persistent.rs")
                && (s.ends_with("#P-FPT-16") || s.ends_with("#P-FPT-31")))
            || Some(s) == first_creation_persist.as_deref()
            || (shown && s.ends_with("#P-FPT-36"))
    };
    common::assert_every_site_needed(&m, elsewhere);
    common::assert_detected(
        &m,
        &["P-FPT-14", "P-FPT-15", "P-FPT-17", "P-FPT-21", "P-FPT-24", "P-FPT-25", "P-FPT-32"],
    );
}

/// `fptree-persistent-var-delete`'s exhaustive run in the base mode (every visit of every
/// crash point crashed; the durable image and all pending lines; no subsets, eviction,
/// tearing or crashes inside recovery, which the other targets' runs cover) passes, and with
/// the P-FPT-36 persist sites it reached made no-ops it fails: whether it does is returned.
/// The lost persist shows in the durable image at a fence of the free of a deleted leaf's
/// last key block: recovery meets that key's valid slot with its block freed.
fn shows_p_fpt_36_needed(dir: &str) -> bool {
    let dir = ferrite_pmem::internals::testing::TestDir::new(dir);
    let t = ferrite_crashtest::find("fptree-persistent-var-delete").expect("registered");
    let cfg = ferrite_crashtest::Config {
        out_dir: dir.path().to_path_buf(),
        exhaustive: true,
        budget: Some(common::BUDGET),
        time: None,
        ..ferrite_crashtest::Config::for_mode(ferrite_crashtest::Mode::Base)
    };
    let r = t.explore(&cfg);
    eprintln!("{r}");
    assert!(r.passed() && !r.stopped_early && r.crashed == r.visited, "{r}");
    let drop: Vec<String> = r.sites.keys().filter(|s| s.ends_with("#P-FPT-36")).cloned().collect();
    assert!(!drop.is_empty(), "the run reached no P-FPT-36 site:\n{r}");
    let m = t.explore(&ferrite_crashtest::Config { drop_sites: drop, ..cfg });
    eprintln!("{m}");
    m.failed()
}

/// P-FPT-36 shown needed deterministically, alone (the check above runs it too, before it
/// excuses P-FPT-36 from its own mutated runs): leaf deletions whose last key is in a key block, every fence of
/// each deleted leaf's key-block free crashed.
#[test]
fn fptree_persistent_var_delete_needs_the_bitmap_persist_before_the_key_frees() {
    assert!(
        shows_p_fpt_36_needed("crashtest-fptree-pvar-delete"),
        "dropping the bitmap persist before the key frees went unnoticed"
    );
}
