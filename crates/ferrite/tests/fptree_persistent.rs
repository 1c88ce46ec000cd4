//! The fully persistent FPTree variant (`IndexPlacement::Persistent`: inner nodes in PM, no
//! rebuild at open) against a `BTreeMap` model with reopens, the leak check against
//! `PAllocator::check` (leaves and index nodes), exact flush/fence counts, an open that reads
//! no leaf, out-of-space splits, damaged roots as typed errors, and the stored fixture.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::fptree::{
    FPTree, FPTreeVar, INCOMPAT_PERSISTENT_INDEX, IndexPlacement, L_BITMAP, L_NEXT, R_HEAD,
    R_INDEX, ROOT_SIZE, RootHeader, TreeOptions,
};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;
use proptest::prelude::*;

mod common;
use common::fptree::{
    assert_allocated, close_tree, cost, create_alloc, fill_fixed_fixture, fixed_fixture_model,
    fixed_random_ops, fixed_step, open_alloc, seed, write_fixture,
};

const SEG: u64 = 1 << 20;

fn opts() -> Options {
    Options::default().layout("fptree-ptest").segment_size(SEG)
}

fn popts(fanout: u32) -> TreeOptions {
    TreeOptions { index: IndexPlacement::Persistent, index_fanout: fanout }
}

fn new_tree_with(dir: &TestDir, o: &Options, fanout: u32) -> FPTree {
    let a = create_alloc(dir, o);
    let slot = a.root_location();
    let t = FPTree::create_with(a, slot, popts(fanout)).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent);
    t
}

fn new_tree(dir: &TestDir, fanout: u32) -> FPTree {
    new_tree_with(dir, &opts(), fanout)
}

/// Drops `t` without a clean close (as after a crash) and opens everything again.
fn reopen_with(dir: &TestDir, t: FPTree, o: &Options) -> FPTree {
    drop(t);
    let a = open_alloc(dir, o);
    let slot = a.root_location();
    let t = FPTree::open(a, slot).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent, "the placement is read from the root");
    t
}

fn reopen(dir: &TestDir, t: FPTree) -> FPTree {
    reopen_with(dir, t, &opts())
}

/// T6 and N5: the allocator's allocated blocks are exactly the tree's (root, leaves, index root
/// and nodes) and `extra`.
fn assert_no_leak(t: &FPTree, extra: &[PPtr]) {
    let owned = t.blocks().into_iter().chain(extra.iter().copied()).collect();
    assert_allocated(t.allocator(), owned, "allocated blocks differ from the tree's blocks");
}

fn assert_same(t: &FPTree, model: &BTreeMap<u64, u64>) {
    let all = t.range(0, u64::MAX, usize::MAX).unwrap();
    let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, want);
    assert_eq!(t.len(), model.len() as u64);
    let c = t.check().unwrap();
    assert_eq!(c.keys, model.len() as u64);
    assert_eq!(c.leaves, t.leaves());
    assert_no_leak(t, &[]);
}

fn random_run(fanout: u32, steps: u64, space: u64) {
    let dir = TestDir::new("fptree-persistent-random");
    let t = new_tree(&dir, fanout);
    let (t, mut model) =
        fixed_random_ops(seed(), t, steps, space, |t| reopen(&dir, t), assert_same);
    // Delete everything: leaf deletions at every position, index detaches and shrinks.
    let keys: Vec<u64> = model.keys().copied().collect();
    for k in keys {
        assert!(t.delete(k).unwrap());
        model.remove(&k);
    }
    assert_same(&t, &model);
    assert_eq!(t.leaves(), 1);
    let t = reopen(&dir, t);
    assert_same(&t, &model);
}

#[test]
fn random_operations_with_reopen_match_a_btreemap_fanout_4() {
    random_run(4, 20_000, 3_000);
}

#[test]
fn random_operations_with_reopen_match_a_btreemap_default_fanout() {
    random_run(32, 20_000, 20_000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Short random sequences over a tiny key space (many splits and leaf deletions per key,
    /// the head leaf's entry removed and re-routed), each ending with a reopen.
    #[test]
    fn sequences_match_the_model(ops in proptest::collection::vec((0u8..4, 0u64..300), 1..400)) {
        let dir = TestDir::new("fptree-persistent-prop");
        let t = new_tree(&dir, 4);
        let mut model = BTreeMap::new();
        for (i, (op, key)) in ops.into_iter().enumerate() {
            fixed_step(&t, &mut model, op, key, i as u64 + 1)?;
        }
        t.check().unwrap();
        let t = reopen(&dir, t);
        let all = t.range(0, u64::MAX, usize::MAX).unwrap();
        let want: Vec<(u64, u64)> = model.into_iter().collect();
        prop_assert_eq!(all, want);
        t.check().unwrap();
        assert_no_leak(&t, &[]);
    }
}

/// Regression: deleting the head leaf removed its index entry and left the next leaf's entry,
/// with a bound above keys the tree then routed to that leaf (keys below every bound go to the
/// first entry). At that leaf's next split the separator fell below its own entry's bound, the
/// new entry sorted before it, and every key from the old bound up routed to the wrong leaf
/// (seen: 24 of 360 keys unreachable). The fix re-keys the new head's entry to the lowest bound
/// in the same index change that removes the old head's (as the DRAM index always did).
fn keys_below_the_old_bound_of_a_new_head_stay_reachable(reopen_between: bool) {
    let dir = TestDir::new("fptree-persistent-head");
    let mut t = new_tree(&dir, 4);
    let mut model = BTreeMap::new();
    // Three leaves' worth of keys 1000.., then the head leaf's keys deleted: the head goes.
    for k in 1000..1060u64 {
        assert!(t.insert(k, k).unwrap());
        model.insert(k, k);
    }
    let head_keys: Vec<u64> =
        t.range(0, u64::MAX, usize::MAX).unwrap().into_iter().map(|e| e.0).take(8).collect();
    let leaves = t.leaves();
    let mut k = 1000;
    while t.leaves() == leaves {
        assert!(t.delete(k).unwrap(), "key {k}");
        model.remove(&k);
        k += 1;
    }
    assert!(k > head_keys[0]);
    if reopen_between {
        t = reopen(&dir, t);
    }
    // Keys far below the new head's bound, enough to split it twice.
    for k in (0..360u64).rev() {
        assert!(t.insert(k, k + 7).unwrap(), "key {k}");
        model.insert(k, k + 7);
    }
    for (k, v) in &model {
        assert_eq!(t.get(*k).unwrap(), Some(*v), "key {k} lost");
    }
    assert_same(&t, &model);
    let t = reopen(&dir, t);
    assert_same(&t, &model);
}

#[test]
fn keys_below_the_old_bound_of_a_new_head_stay_reachable_u64() {
    keys_below_the_old_bound_of_a_new_head_stay_reachable(false);
}

#[test]
fn keys_below_the_old_bound_of_a_new_head_stay_reachable_after_a_reopen() {
    keys_below_the_old_bound_of_a_new_head_stay_reachable(true);
}

/// The persistent variant's costs, pinned: a plain insert, update and delete cost what the
/// hybrid tree's do; a split adds its index insert (P-FPT-27: slot 2 lines + fence, bitmap
/// 1 line + fence); a leaf deletion adds its index remove (P-FPT-28: bitmap 1 line + fence).
#[test]
fn exact_flush_and_fence_counts() {
    let d = cost;
    let mut costs = Vec::new();
    for placement in [IndexPlacement::Dram, IndexPlacement::Persistent] {
        let dir = TestDir::new("fptree-persistent-counts");
        let a = create_alloc(&dir, &opts());
        let slot = a.root_location();
        let o = TreeOptions { index: placement, index_fanout: 32 };
        let t = FPTree::create_with(a, slot, o).unwrap();
        // Keys 0, 10, ..., 630 ascending: leaves half full after their splits.
        for k in 0..64 {
            t.insert(k * 10, k).unwrap();
        }
        let insert = d(&mut || assert!(t.insert(5, 1).unwrap()));
        let update = d(&mut || assert!(t.update(5, 2).unwrap()));
        let delete = d(&mut || assert!(t.delete(5).unwrap()));
        // Fill the head leaf with odd keys below 10 and 100, then split it.
        let mut odd = (1..100u64).step_by(2);
        while !t.needs_split(1).unwrap() {
            t.insert(odd.nth(1).unwrap(), 0).unwrap();
        }
        let leaves = t.leaves();
        let split = d(&mut || assert!(t.insert(1, 1).unwrap()));
        assert_eq!(t.leaves(), leaves + 1);
        // Delete from the top until a delete removes the last leaf: that one is measured.
        let all: Vec<u64> = t.range(0, u64::MAX, usize::MAX).unwrap().iter().map(|p| p.0).collect();
        let mut leaf_delete = None;
        for &k in all.iter().rev() {
            let before = t.leaves();
            let c = d(&mut || assert!(t.delete(k).unwrap()));
            if t.leaves() + 1 == before {
                leaf_delete = Some(c);
                break;
            }
        }
        let leaf_delete = leaf_delete.expect("a leaf deletion");
        let get = d(&mut || assert_eq!(t.get(10).unwrap(), Some(1)));
        t.check().unwrap();
        assert_no_leak_any(&t);
        costs.push(
            [insert, update, delete, split, leaf_delete, get]
                .map(|c| (c.lines_flushed(), c.fences)),
        );
    }
    let (dram, pers) = (costs[0], costs[1]);
    println!("hybrid {dram:?}\npersistent {pers:?}");
    assert_eq!(dram[..3], [(3, 2), (3, 2), (1, 1)], "hybrid insert, update, delete");
    assert_eq!(pers[..3], [(3, 2), (3, 2), (1, 1)], "persistent insert, update, delete");
    assert_eq!(
        pers[3],
        (dram[3].0 + 3, dram[3].1 + 2),
        "split: the index insert's 3 lines, 2 fences"
    );
    assert_eq!(pers[4], (dram[4].0 + 1, dram[4].1 + 1), "leaf deletion: the index bitmap");
    assert_eq!(pers[5], (0, 0), "lookup");
    // The absolute figures (the hybrid's are pinned in tests/fptree.rs's counterparts).
    assert_eq!(pers[3], (27, 12), "persistent split + insert");
    assert_eq!(pers[4], (11, 6), "persistent leaf deletion");
    assert_eq!(dram[3..5], [(24, 10), (10, 5)], "hybrid split + insert, leaf deletion");
}

fn assert_no_leak_any(t: &FPTree) {
    assert_allocated(t.allocator(), t.blocks(), "allocated blocks differ from the tree's blocks");
}

/// Open of a persistent-index tree reads the tree root and the index root (and replays their
/// logs) and walks no leaf: a leaf damaged so that any read of it fails validation does not
/// stop the open, nor lookups elsewhere; the hybrid tree's open (which walks every leaf) does
/// fail on the same damage, and `check` of the persistent tree finds it.
#[test]
fn open_reads_no_leaf() {
    for placement in [IndexPlacement::Persistent, IndexPlacement::Dram] {
        let dir = TestDir::new("fptree-persistent-noread");
        let a = create_alloc(&dir, &opts());
        let slot = a.root_location();
        let o = TreeOptions { index: placement, index_fanout: 4 };
        let t = FPTree::create_with(a, slot, o).unwrap();
        for k in 0..2_000u64 {
            t.insert(k, k + 1).unwrap();
        }
        // Damage the last leaf: a bitmap bit beyond slot 32 (validation refuses the leaf).
        let s = t.allocator().pool().clone();
        let mut at = s.load_pptr(s.resolve(t.root()).unwrap() + R_HEAD).unwrap();
        let mut last = 0;
        while !at.is_null() {
            last = s.resolve(at).unwrap();
            at = s.load_pptr(last + L_NEXT).unwrap();
        }
        let b = s.load_u64(last + L_BITMAP, Ordering::Relaxed).unwrap();
        s.store_u64(last + L_BITMAP, b | 1 << 40, Ordering::Relaxed).unwrap();
        s.persist(last + L_BITMAP, 8).unwrap();
        drop(t);
        drop(s);
        let a = open_alloc(&dir, &opts());
        match placement {
            IndexPlacement::Persistent => {
                let t = FPTree::open(a, slot).expect("open must not read the damaged leaf");
                assert_eq!(t.get(5).unwrap(), Some(6));
                assert_eq!(t.get(1_000).unwrap(), Some(1_001));
                assert!(matches!(t.check(), Err(Error::Corrupted { .. })));
            }
            IndexPlacement::Dram => {
                assert!(matches!(FPTree::open(a, slot), Err(Error::Corrupted { .. })));
            }
        }
    }
}

/// Item 6 of S1 for the persistent variant: a split that finds no leaf is `PoolFull`, the index
/// room it made stays invisible, nothing leaks and the tree stays usable.
#[test]
fn a_split_without_space_is_pool_full_and_the_tree_stays_usable() {
    // Header page + 3 pages: the roots' class, the leaves', the index nodes'.
    let seg = 4 * 64 * 1024 + 4096;
    let o = Options::default().layout("fptree-ptest").segment_size(seg).max_pool_size(2 * seg);
    let dir = TestDir::new("fptree-persistent-full");
    let t = new_tree_with(&dir, &o, 4);
    let mut model = BTreeMap::new();
    let mut k = 0u64;
    let failed_at = loop {
        let before = t.leaves();
        let split = t.needs_split(k).unwrap();
        match t.insert(k, k) {
            Ok(true) => {
                model.insert(k, k);
                k += 1;
            }
            Err(Error::PoolFull { .. }) => {
                assert!(split, "only a split needs space");
                assert_eq!(t.leaves(), before);
                break k;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(failed_at > 100, "{failed_at} keys");
    assert_same(&t, &model);
    assert!(matches!(t.insert(failed_at, 0), Err(Error::PoolFull { .. })));
    assert!(matches!(t.update(failed_at - 1, 0), Err(Error::PoolFull { .. })));
    for d in 0..64 {
        assert!(t.delete(d).unwrap());
        model.remove(&d);
    }
    assert_same(&t, &model);
    for n in failed_at..failed_at + 40 {
        assert!(t.insert(n, n).unwrap());
        model.insert(n, n);
    }
    assert_same(&t, &model);
    let t = reopen_with(&dir, t, &o);
    assert_same(&t, &model);
}

/// Bad input: a damaged index root is a typed error at open (never a panic); unknown flag
/// combinations are `Incompatible`; byte keys have no persistent placement yet; a bad fan-out
/// is `InvalidArgument`.
#[test]
fn damaged_and_foreign_roots_are_typed_errors() {
    let dir = TestDir::new("fptree-persistent-bad");
    let t = new_tree(&dir, 4);
    for k in 0..500u64 {
        t.insert(k, k).unwrap();
    }
    let a = t.allocator().clone();
    let slot = t.root_slot();
    let s = a.pool().clone();
    let rg = s.resolve(t.root()).unwrap();
    let ix = s.load_pptr(rg + R_INDEX).unwrap();
    let ixg = s.resolve(ix).unwrap();
    drop(t);
    let fresh = |a: &Arc<PAllocator>| FPTree::open(a.clone(), slot);
    // The index root's magic flipped: Corrupted (bad checksum) or no header, never a panic.
    let magic = s.load_u64(ixg, Ordering::Relaxed).unwrap();
    s.store_u64(ixg, magic ^ 1, Ordering::Relaxed).unwrap();
    assert!(matches!(fresh(&a), Err(Error::Corrupted { .. })));
    s.store_u64(ixg, magic, Ordering::Relaxed).unwrap();
    // The index root pointer outside the pool: Corrupted.
    s.store_u64(rg + R_INDEX + 8, 1 << 50, Ordering::Relaxed).unwrap();
    assert!(matches!(fresh(&a), Err(Error::Corrupted { .. })));
    s.store_u64(rg + R_INDEX + 8, ix.offset, Ordering::Relaxed).unwrap();
    // The index's root node damaged: open replays no log and succeeds, lookups are Corrupted.
    let node = s.load_pptr(ixg + 48).unwrap();
    let ng = s.resolve(node).unwrap();
    let tag = s.load_u64(ng, Ordering::Relaxed).unwrap();
    s.store_u64(ng, 0, Ordering::Relaxed).unwrap();
    let t = fresh(&a).unwrap();
    assert!(matches!(t.get(7), Err(Error::Corrupted { .. })));
    assert!(matches!(t.check(), Err(Error::Corrupted { .. })));
    drop(t);
    s.store_u64(ng, tag, Ordering::Relaxed).unwrap();
    // The flags of a byte-key tree with a persistent index over this u64 tree's root,
    // checksum recomputed: the fixed-key handle refuses the kind, the byte-key handle the
    // index's bound form (its header's key size).
    let mut h: RootHeader = s.read_struct(rg).unwrap();
    let good = h;
    h.incompat = INCOMPAT_PERSISTENT_INDEX | 1;
    h.checksum = h.crc();
    s.write_struct(rg, &h).unwrap();
    assert!(matches!(fresh(&a), Err(Error::Incompatible { .. })));
    assert!(matches!(FPTreeVar::open(a.clone(), slot), Err(Error::Incompatible { .. })));
    // An unknown flag bit: Incompatible.
    h.incompat = INCOMPAT_PERSISTENT_INDEX | 1 << 5;
    h.checksum = h.crc();
    s.write_struct(rg, &h).unwrap();
    assert!(matches!(fresh(&a), Err(Error::Incompatible { .. })));
    s.write_struct(rg, &good).unwrap();
    let t = fresh(&a).unwrap();
    assert_eq!(t.len(), 500);
    t.check().unwrap();
    // A bad fan-out is refused for both kinds, before anything is allocated.
    drop(t);
    let dir2 = TestDir::new("fptree-persistent-bad2");
    let a2 = create_alloc(&dir2, &opts());
    let slot2 = a2.root_location();
    assert!(matches!(
        FPTreeVar::create_with(a2.clone(), slot2, popts(3)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        FPTree::create_with(a2.clone(), slot2, popts(5)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(a2.check().unwrap().allocated.is_empty(), "nothing allocated by refused creations");
}

/// An interrupted persistent creation (the root's header written, the index not yet created)
/// is finished by `open`, which creates the index and registers the head: nothing leaks.
#[test]
fn an_interrupted_creation_is_finished_with_its_index() {
    let dir = TestDir::new("fptree-persistent-resume");
    let a = create_alloc(&dir, &opts());
    let slot = a.root_location();
    let t = FPTree::create_with(a.clone(), slot, popts(4)).unwrap();
    let s = a.pool().clone();
    let rg = s.resolve(t.root()).unwrap();
    drop(t);
    // Undo the end of the creation: free the index's node and root (each from the pointer
    // that names it, which the allocator nulls) and clear the magic, as a crash after the
    // header and the first leaf and before the index's creation leaves it.
    let ix = s.load_pptr(rg + R_INDEX).unwrap();
    a.deallocate(PPtr::new(ix.segment, ix.offset + 48)).unwrap();
    let root = s.load_pptr(s.resolve(slot).unwrap()).unwrap();
    a.deallocate(PPtr::new(root.segment, root.offset + R_INDEX)).unwrap();
    assert!(s.load_pptr(rg + R_INDEX).unwrap().is_null());
    s.store_u64(rg, 0, Ordering::Relaxed).unwrap();
    s.persist(rg, 8).unwrap();
    drop(s);
    let t = FPTree::open(a, slot).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent);
    t.check().unwrap();
    assert_no_leak(&t, &[]);
    let t = t;
    for k in 0..300 {
        t.insert(k, k).unwrap();
    }
    let t = reopen(&dir, t);
    assert_eq!(t.len(), 300);
    t.check().unwrap();
    assert_no_leak(&t, &[]);
}

// ----- the stored fixture of a persistent-index tree -----

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fptree-v1-pindex/pool-set.hex")
}

const FIXTURE_SEG: u64 = 4 * 64 * 1024 + 4096;

fn fixture_opts() -> Options {
    Options::default().layout("fptree-fixture").segment_size(FIXTURE_SEG)
}

/// Keys 0, 7, 14, ... (300 of them) inserted in a scrambled order, value = key × 3 + 1; then
/// every key divisible by 5 deleted. Index fan-out 4 (a three-level index).
fn fixture_model() -> BTreeMap<u64, u64> {
    fixed_fixture_model()
}

/// Regenerates `tests/fixtures/fptree-v1-pindex/pool-set.hex` (by hand, only for a new format:
/// `cargo test -p ferrite --test fptree_persistent -- --ignored generate_fixture`). Once
/// committed it never changes.
#[test]
#[ignore = "writes the stored fixture; run by hand for a new format version"]
fn generate_fixture() {
    let dir = TestDir::new("fptree-pindex-fixture-gen");
    let t = {
        let a = create_alloc(&dir, &fixture_opts());
        let slot = a.root_location();
        let t = FPTree::create_with(a, slot, popts(4)).unwrap();
        fill_fixed_fixture(&t);
        assert_same(&t, &fixture_model());
        t
    };
    close_tree(t);
    write_fixture(
        &dir.join("set"),
        "# FPTree root v1 + persistent index (incompat bit 1) fixture: a pool set (PAllocator anchor v1, one tree in the anchor's root).\n# Generated by `generate_fixture` in crates/ferrite/tests/fptree_persistent.rs; never edit.\n",
        &fixture_path(),
    );
}

fn unpack_fixture(dir: &Path) {
    common::fptree::unpack_fixture(&fixture_path(), dir);
}

#[test]
fn the_fixture_opens_with_its_content() {
    let dir = TestDir::new("fptree-pindex-fixture");
    let path = dir.join("set");
    unpack_fixture(&path);
    let set = PoolSet::open(&path, &fixture_opts()).unwrap();
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let slot = a.root_location();
    let s = a.pool();
    let root = s.load_pptr(s.resolve(slot).unwrap()).unwrap();
    let r = s.resolve_range(root, ROOT_SIZE).unwrap();
    let h: RootHeader = s.read_struct(r).unwrap();
    assert_eq!(h.incompat, INCOMPAT_PERSISTENT_INDEX);
    assert!(!s.load_pptr(r + R_INDEX).unwrap().is_null());
    let t = FPTree::open(a.clone(), slot).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent);
    assert_same(&t, &fixture_model());
    assert!(t.leaves() > 5, "{} leaves", t.leaves());
    // The hybrid reader of the same image is the same build: a DRAM-placement open is not a
    // separate entry point; older builds refuse the flag (`Incompatible`).
    let _ = FPTreeVar::open(a, slot).map(drop).unwrap_err();
}

/// Indicative figures (not a benchmark: ci profile, shared machine): open time, lookup and
/// insert cost of the hybrid and the persistent placement at `FERRITE_MEASURE_KEYS` (default
/// 200 000) random keys. Run by hand:
/// `cargo test -p ferrite --profile ci --test fptree_persistent -- --ignored measure --nocapture`.
#[test]
#[ignore = "prints timings; run by hand"]
fn measure() {
    let n: u64 =
        std::env::var("FERRITE_MEASURE_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let o = Options::default().layout("fptree-pmeasure").segment_size(64 << 20);
    for placement in [IndexPlacement::Dram, IndexPlacement::Persistent] {
        let dir = TestDir::new("fptree-persistent-measure");
        let a = create_alloc(&dir, &o);
        let slot = a.root_location();
        let t = FPTree::create_with(a, slot, TreeOptions { index: placement, index_fanout: 32 })
            .unwrap();
        let mut r = SplitMix64::new(7);
        let keys: Vec<u64> = (0..n).map(|_| r.next_u64()).collect();
        let t0 = std::time::Instant::now();
        for &k in &keys {
            t.insert(k, k).unwrap();
        }
        let ins = t0.elapsed().as_nanos() as f64 / n as f64;
        let t0 = std::time::Instant::now();
        for &k in &keys {
            assert_eq!(t.get(k).unwrap(), Some(k));
        }
        let get = t0.elapsed().as_nanos() as f64 / n as f64;
        let leaves = t.leaves();
        drop(t);
        let a = open_alloc(&dir, &o);
        let t0 = std::time::Instant::now();
        let t = FPTree::open(a, slot).unwrap();
        let open = t0.elapsed();
        assert_eq!(t.placement(), placement);
        // The reopened tree answers for a sample of the keys (the long tier runs this at
        // 10 M keys: `scripts/long.sh`).
        for &k in keys.iter().step_by(997) {
            assert_eq!(t.get(k).unwrap(), Some(k));
        }
        println!(
            "{placement:?}: {n} keys, {leaves} leaves: insert {ins:.0} ns, lookup {get:.0} ns, open {open:?} ({:.1} ns per leaf)",
            open.as_nanos() as f64 / leaves as f64
        );
    }
}
