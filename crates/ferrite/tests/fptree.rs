//! FPTree (single-threaded, fixed keys) on PAllocator against a `BTreeMap` model, with reopen
//! (allocator recovery, micro-log replay and inner-node rebuild), the leak check T6 against the
//! allocator, exact flush/fence counts, edge cases, out-of-space splits, two trees on one
//! allocator, damaged trees, and the stored v1 fixture.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::fptree::{
    FPTree, L_BITMAP, L_NEXT, LEAF_SIZE, R_DEL_CUR, R_DEL_PREV, R_HEAD, R_SPLIT_CUR, R_SPLIT_NEW,
    ROOT_MAGIC, ROOT_SIZE, ROOT_VERSION, read_all_pairs,
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
    Options::default().layout("fptree-test").segment_size(SEG)
}

/// A new pool set in `dir/set` with an allocator (one slot) and a tree rooted in the anchor.
fn new_tree_with(dir: &TestDir, o: &Options) -> FPTree {
    let a = create_alloc(dir, o);
    let slot = a.root_location();
    FPTree::create(a, slot).unwrap()
}

fn new_tree(dir: &TestDir) -> FPTree {
    new_tree_with(dir, &opts())
}

/// Drops `t` (and with it the allocator and the pool set, without a clean close: as after a
/// crash) and opens everything again.
fn reopen(dir: &TestDir, t: FPTree) -> FPTree {
    drop(t);
    let a = open_alloc(dir, &opts());
    let slot = a.root_location();
    FPTree::open(a, slot).unwrap()
}

/// T6: the allocator's allocated blocks are exactly the trees' blocks and `extra` ones.
fn assert_no_leak(a: &PAllocator, trees: &[&FPTree], extra: &[PPtr]) {
    let owned = trees.iter().flat_map(|t| t.blocks()).chain(extra.iter().copied()).collect();
    assert_allocated(
        a,
        owned,
        "allocated blocks differ from the trees' blocks (a leak or a stray block)",
    );
}

fn assert_same(t: &FPTree, model: &BTreeMap<u64, u64>) {
    let all = t.range(0, u64::MAX, usize::MAX).unwrap();
    let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, want);
    assert_eq!(t.len(), model.len() as u64);
    let c = t.check().unwrap();
    assert_eq!(c.keys, model.len() as u64);
    assert_no_leak(t.allocator(), &[t], &[]);
}

#[test]
fn random_operations_with_reopen_match_a_btreemap() {
    let dir = TestDir::new("fptree-random");
    let t = new_tree(&dir);
    fixed_random_ops(seed(), t, 20_000, 3_000, |t| reopen(&dir, t), assert_same);
}

#[test]
fn insert_does_not_overwrite() {
    let dir = TestDir::new("fptree-overwrite");
    let t = new_tree(&dir);
    assert!(t.insert(5, 50).unwrap());
    assert!(!t.insert(5, 51).unwrap());
    assert_eq!(t.get(5).unwrap(), Some(50));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Short random sequences over a tiny key space (many splits and leaf deletions per key),
    /// each ending with a reopen.
    #[test]
    fn sequences_match_the_model(ops in proptest::collection::vec((0u8..4, 0u64..300), 1..400)) {
        let dir = TestDir::new("fptree-prop");
        let t = new_tree(&dir);
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
        assert_no_leak(t.allocator(), &[&t], &[]);
    }
}

#[test]
fn exact_flush_and_fence_counts() {
    let dir = TestDir::new("fptree-counts");
    let t = new_tree(&dir);
    for k in 0..10 {
        t.insert(k * 10, k).unwrap();
    }
    let d = cost;
    // Insert without a split: pair and fingerprint (2 lines) + fence, bitmap + fence.
    let c = d(&mut || assert!(t.insert(55, 1).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (3, 2), "insert");
    // Update without a split: the same, out of place.
    let c = d(&mut || assert!(t.update(55, 2).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (3, 2), "update");
    // Delete that leaves keys in the leaf: the bitmap only.
    let c = d(&mut || assert!(t.delete(55).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (1, 1), "delete");
    // Lookups persist nothing.
    let c = d(&mut || assert_eq!(t.get(30).unwrap(), Some(3)));
    assert_eq!((c.lines_flushed(), c.fences, c.bytes_stored), (0, 0, 0), "get");
}

#[test]
fn splits_and_leaf_deletions_in_every_position() {
    let dir = TestDir::new("fptree-positions");
    let mut t = new_tree(&dir);
    let mut model = BTreeMap::new();
    // Ascending, then descending streams (the case that broke NV-Tree).
    for k in 0..200u64 {
        t.insert(k * 2, k).unwrap();
        model.insert(k * 2, k);
    }
    for k in (0..200u64).rev() {
        t.insert(k * 2 + 1, k).unwrap();
        model.insert(k * 2 + 1, k);
    }
    assert!(t.leaves() > 10);
    assert_same(&t, &model);
    // Update that splits a full leaf, then the key moves to the new leaf.
    let full_leaf_key = 399;
    t.update(full_leaf_key, 7).unwrap();
    model.insert(full_leaf_key, 7);
    assert_same(&t, &model);
    // Empty the head leaf, a middle leaf and the last leaf completely.
    for range in [0..40u64, 180..230, 360..400] {
        for k in range {
            assert_eq!(t.delete(k).unwrap(), model.remove(&k).is_some());
        }
        assert_same(&t, &model);
        t = reopen(&dir, t);
        assert_same(&t, &model);
    }
    // Delete everything: the only leaf stays, empty.
    for k in 0..400 {
        t.delete(k).unwrap();
        model.remove(&k);
    }
    assert_eq!(t.leaves(), 1);
    assert_same(&t, &model);
    assert!(t.insert(u64::MAX, 1).unwrap() && t.insert(0, 2).unwrap());
    assert_eq!(t.range(0, u64::MAX, 10).unwrap(), vec![(0, 2), (u64::MAX, 1)]);
    assert_eq!(t.range(5, 1, 10).unwrap(), vec![]);
}

#[test]
fn reopen_after_a_clean_close() {
    let dir = TestDir::new("fptree-close");
    let mut model = BTreeMap::new();
    {
        let t = new_tree(&dir);
        for k in 0..1000u64 {
            let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            t.insert(key, k).unwrap();
            model.insert(key, k);
        }
        let a = t.allocator().clone();
        drop(t);
        Arc::try_unwrap(a).unwrap().close().unwrap();
    }
    let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
    assert!(set.was_clean_shutdown());
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let slot = a.root_location();
    let t = FPTree::open(a, slot).unwrap();
    assert_same(&t, &model);
    let mut pairs = read_all_pairs(t.allocator().pool(), slot).unwrap();
    pairs.sort_unstable();
    assert_eq!(pairs, model.into_iter().collect::<Vec<_>>());
}

/// A pointer table of `n` null slots allocated into the anchor's root (the way an engine keeps
/// the roots of several trees).
fn table(a: &PAllocator, n: u64) -> PPtr {
    let t = a.allocate(n * 16, a.root_location()).unwrap();
    let g = a.pool().resolve_range(t, n * 16).unwrap();
    for i in 0..n {
        a.pool().persist_pptr_null(g + i * 16).unwrap();
    }
    t
}

fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

#[test]
fn two_trees_share_one_allocator() {
    let seed = seed();
    let mut rng = SplitMix64::new(seed);
    let dir = TestDir::new("fptree-two");
    let set = PoolSet::create(dir.join("set"), &opts()).unwrap();
    let a = Arc::new(PAllocator::create(Arc::new(set), 2).unwrap());
    let tab = table(&a, 4);
    let t = [
        FPTree::create(a.clone(), slot(tab, 0)).unwrap(),
        FPTree::create(a.clone(), slot(tab, 1)).unwrap(),
    ];
    let mut m = [BTreeMap::new(), BTreeMap::new()];
    for step in 0..6_000u64 {
        let i = (rng.next_u64() % 2) as usize;
        let k = rng.next_u64() % 1_000;
        if rng.next_u64().is_multiple_of(3) {
            assert_eq!(t[i].delete(k).unwrap(), m[i].remove(&k).is_some());
        } else {
            assert_eq!(t[i].insert(k, step).unwrap(), !m[i].contains_key(&k));
            m[i].entry(k).or_insert(step);
        }
    }
    for i in 0..2 {
        assert_eq!(
            t[i].range(0, u64::MAX, usize::MAX).unwrap(),
            m[i].iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
        );
        t[i].check().unwrap();
    }
    assert_no_leak(&a, &[&t[0], &t[1]], &[tab]);
    // A second create on an occupied slot is refused.
    assert!(matches!(FPTree::create(a.clone(), slot(tab, 0)), Err(Error::InvalidArgument(_))));
    drop(t);
    drop(a);
    let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let t = [
        FPTree::open(a.clone(), slot(tab, 0)).unwrap(),
        FPTree::open(a.clone(), slot(tab, 1)).unwrap(),
    ];
    for i in 0..2 {
        assert_eq!(
            t[i].range(0, u64::MAX, usize::MAX).unwrap(),
            m[i].iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
        );
    }
    assert_no_leak(&a, &[&t[0], &t[1]], &[tab]);
}

/// Item 6 of S1: the pool set cannot grow (its reservation holds two segments: the anchor's and
/// one small segment with one page per class the tree uses), so a split runs out of leaves.
#[test]
fn a_split_without_space_is_pool_full_and_the_tree_stays_usable() {
    let seg = 3 * 64 * 1024 + 4096; // header page + 2 pages: the root's class and the leaves'
    let o = Options::default().layout("fptree-test").segment_size(seg).max_pool_size(2 * seg);
    let dir = TestDir::new("fptree-full");
    let t = new_tree_with(&dir, &o);
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
    // The failed split changed nothing, left its log disarmed, leaked nothing.
    assert_same(&t, &model);
    assert!(matches!(t.insert(failed_at, 0), Err(Error::PoolFull { .. })));
    assert!(matches!(t.update(failed_at - 1, 0), Err(Error::PoolFull { .. })));
    assert_eq!(t.get(failed_at - 1).unwrap(), Some(failed_at - 1));
    // Deletes need no space; emptying leaves frees them, and inserts work again.
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
    drop(t);
    let set = PoolSet::open(dir.join("set"), &o).unwrap();
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let slot = a.root_location();
    let t = FPTree::open(a, slot).unwrap();
    assert_same(&t, &model);
}

#[test]
fn creation_without_space_leaves_the_slot_null() {
    let seg = 2 * 64 * 1024 + 4096; // one usable page: the root fits, the first leaf does not
    let o = Options::default().layout("fptree-test").segment_size(seg).max_pool_size(2 * seg);
    let dir = TestDir::new("fptree-full-create");
    let set = PoolSet::create(dir.join("set"), &o).unwrap();
    let a = Arc::new(PAllocator::create(Arc::new(set), 1).unwrap());
    let slot = a.root_location();
    assert!(matches!(FPTree::create(a.clone(), slot), Err(Error::PoolFull { .. })));
    assert!(a.pool().load_pptr(a.pool().resolve(slot).unwrap()).unwrap().is_null());
    assert!(a.check().unwrap().allocated.is_empty());
}

/// An interrupted creation is finished by `create` (a root block that never got its header) or
/// by `open` (a header with magic 0), and leaks nothing.
#[test]
fn interrupted_creations_are_finished() {
    let dir = TestDir::new("fptree-resume");
    let set = PoolSet::create(dir.join("set"), &opts()).unwrap();
    let a = Arc::new(PAllocator::create(Arc::new(set), 1).unwrap());
    let tab = table(&a, 2);
    let set = a.pool().clone();
    // 1: the root block was allocated, nothing written: it holds its previous owner's bytes.
    let r = a.allocate(ROOT_SIZE, slot(tab, 0)).unwrap();
    let g = set.resolve_range(r, ROOT_SIZE).unwrap();
    set.fill(g, ROOT_SIZE, 0xA5).unwrap();
    match FPTree::open(a.clone(), slot(tab, 0)) {
        Err(Error::Corrupted { what, .. }) => assert!(what.starts_with("no root header"), "{what}"),
        other => panic!("unexpected {other:?}"),
    }
    let t0 = FPTree::create(a.clone(), slot(tab, 0)).unwrap();
    assert_eq!(t0.root(), r);
    assert!(t0.insert(1, 1).unwrap());
    // 2: a creation that persisted its header (magic 0) and allocated its first leaf.
    let t1 = FPTree::create(a.clone(), slot(tab, 1)).unwrap();
    let rg = set.resolve(t1.root()).unwrap();
    drop(t1);
    set.store_u64(rg, 0, Ordering::Relaxed).unwrap();
    let t1 = FPTree::open(a.clone(), slot(tab, 1)).unwrap();
    assert_eq!(set.load_u64(rg, Ordering::Relaxed).unwrap(), ROOT_MAGIC);
    assert!(t1.is_empty());
    t0.check().unwrap();
    t1.check().unwrap();
    assert_no_leak(&a, &[&t0, &t1], &[tab]);
    // A null slot is no tree.
    let t2 = a.allocate(16, slot(tab, 0)).map(drop);
    assert!(matches!(t2, Err(Error::InvalidArgument(_))), "slot 0 holds the first tree's root");
    drop((t0, t1));
    let empty = PoolSet::create(dir.join("set2"), &opts()).unwrap();
    let b = Arc::new(PAllocator::create(Arc::new(empty), 1).unwrap());
    let loc = b.root_location();
    assert!(matches!(FPTree::open(b, loc), Err(Error::InvalidArgument(_))));
}

/// Item 1c of S1: every pointer, bitmap and header read from PM is validated; a damaged tree is
/// a typed error in every build profile (this file runs with overflow checks on), never a panic,
/// an overflow or a loop. Before the fix, a delete log naming a predecessor near `u64::MAX`
/// overflowed `prev + L_NEXT` in recovery.
#[test]
fn damaged_trees_are_typed_errors() {
    type Damage = (&'static str, fn(&PoolSet, u64, u64));
    let damages: [Damage; 12] = [
        ("root checksum", |s, r, _| s.store_u64(r + 16, 99, Ordering::Relaxed).unwrap()),
        ("root magic", |s, r, _| s.store_u64(r, 0x1234, Ordering::Relaxed).unwrap()),
        ("root version", |s, r, _| s.store_u64(r + 8, 7, Ordering::Relaxed).unwrap()),
        ("head null", |s, r, _| s.persist_pptr_null(r + R_HEAD).unwrap()),
        ("head far", |s, r, _| s.persist_pptr(r + R_HEAD, PPtr::new(1, u64::MAX - 63)).unwrap()),
        ("head unknown segment", |s, r, _| s.persist_pptr(r + R_HEAD, PPtr::new(9999, 0)).unwrap()),
        ("head misaligned", |s, r, h| {
            let p = s.to_pptr(h).unwrap();
            s.persist_pptr(r + R_HEAD, PPtr::new(p.segment, p.offset + 8)).unwrap()
        }),
        ("leaf cycle", |s, _, h| {
            let p = s.to_pptr(h).unwrap();
            s.persist_pptr(h + L_NEXT, p).unwrap()
        }),
        ("bitmap bit 40", |s, _, h| {
            s.store_u64(h + L_BITMAP, 1 << 40 | 1, Ordering::Relaxed).unwrap()
        }),
        ("split log new far", |s, r, _| {
            s.persist_pptr(r + R_SPLIT_NEW, PPtr::new(1, u64::MAX - 8)).unwrap()
        }),
        ("delete log prev far", |s, r, h| {
            let p = s.to_pptr(h).unwrap();
            s.persist_pptr(r + R_DEL_PREV, PPtr::new(p.segment, u64::MAX - 48)).unwrap();
            s.persist_pptr(r + R_DEL_CUR, p).unwrap();
        }),
        ("delete log cur garbage", |s, r, _| {
            s.persist_pptr(r + R_DEL_CUR, PPtr::new(1, 64)).unwrap()
        }),
    ];
    for (what, damage) in damages {
        let dir = TestDir::new("fptree-damage");
        let t = new_tree(&dir);
        for k in 0..100 {
            t.insert(k, k).unwrap();
        }
        let set = t.allocator().pool().clone();
        let r = set.resolve(t.root()).unwrap();
        let head = set.load_pptr(r + R_HEAD).unwrap();
        let h = set.resolve(head).unwrap();
        drop(t);
        damage(&set, r, h);
        drop(set);
        let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
        let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
        let slot = a.root_location();
        match FPTree::open(a.clone(), slot) {
            Err(Error::Corrupted { .. } | Error::Incompatible { .. }) => {}
            other => panic!("{what}: expected a typed error, got {other:?}"),
        }
        // The raw walk validates the same pointers: it returns, whatever it finds.
        let _ = read_all_pairs(a.pool(), slot);
    }
    // A root pointer that leads outside the pool, or is misaligned.
    let dir = TestDir::new("fptree-damage-root");
    let t = new_tree(&dir);
    let a = t.allocator().clone();
    drop(t);
    let loc = a.pool().resolve(a.root_location()).unwrap();
    for bad in [PPtr::new(1, u64::MAX - 100), PPtr::new(1, 8), PPtr::new(77, 0)] {
        a.pool().persist_pptr(loc, bad).unwrap();
        assert!(
            matches!(FPTree::open(a.clone(), a.root_location()), Err(Error::Corrupted { .. })),
            "{bad:?}"
        );
        assert!(
            matches!(FPTree::create(a.clone(), a.root_location()), Err(Error::Corrupted { .. })),
            "{bad:?}"
        );
    }
    // A root slot outside the pool is an argument error.
    assert!(matches!(
        FPTree::open(a.clone(), PPtr::new(0, u64::MAX - 4)),
        Err(Error::InvalidArgument(_))
    ));
    const { assert!(LEAF_SIZE == 576 && ROOT_SIZE == 192 && R_SPLIT_CUR == 64) };
}

// ----- the stored v1 fixture -----

/// The fixture: the non-zero 64-byte lines of every segment file of a small pool set holding
/// one tree, as text (`file <name> <length>` then `<offset hex> <128 hex digits>` lines).
fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fptree-v1/pool-set.hex")
}

const FIXTURE_SEG: u64 = 3 * 64 * 1024 + 4096;

fn fixture_opts() -> Options {
    Options::default().layout("fptree-fixture").segment_size(FIXTURE_SEG)
}

/// The content the fixture was generated with: keys 0, 7, 14, ... (300 of them) inserted in a
/// scrambled order, value = key × 3 + 1; then every key divisible by 5 deleted.
fn fixture_model() -> BTreeMap<u64, u64> {
    fixed_fixture_model()
}

/// Regenerates `tests/fixtures/fptree-v1/pool-set.hex` (run by hand, only when a new format
/// version is introduced: `cargo test -p ferrite --test fptree -- --ignored generate_fptree_v1_fixture`).
/// A v1 fixture must never change once committed: it is what v1 readers are tested against.
#[test]
#[ignore = "writes the stored fixture; run by hand for a new format version"]
fn generate_fptree_v1_fixture() {
    let dir = TestDir::new("fptree-fixture-gen");
    let t = {
        let set = PoolSet::create(dir.join("set"), &fixture_opts()).unwrap();
        let a = Arc::new(PAllocator::create(Arc::new(set), 1).unwrap());
        let slot = a.root_location();
        let t = FPTree::create(a, slot).unwrap();
        fill_fixed_fixture(&t);
        assert_same(&t, &fixture_model());
        t
    };
    close_tree(t);
    write_fixture(
        &dir.join("set"),
        "# FPTree root v1 fixture: a pool set (PAllocator anchor v1, one tree in the anchor's root).\n# Generated by `generate_fptree_v1_fixture` in crates/ferrite/tests/fptree.rs; never edit.\n",
        &fixture_path(),
    );
}

/// Rebuilds the fixture's segment files in `dir`.
fn unpack_fixture(dir: &Path) {
    common::fptree::unpack_fixture(&fixture_path(), dir);
}

#[test]
fn the_v1_fixture_opens_with_its_content() {
    let dir = TestDir::new("fptree-fixture");
    let path = dir.join("set");
    unpack_fixture(&path);
    let set = PoolSet::open(&path, &fixture_opts()).unwrap();
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let slot = a.root_location();
    // The root's on-media header, field by field (docs/design/format.md).
    let s = a.pool();
    let root = s.load_pptr(s.resolve(slot).unwrap()).unwrap();
    let r = s.resolve_range(root, ROOT_SIZE).unwrap();
    assert_eq!(s.load_u64(r, Ordering::Relaxed).unwrap(), ROOT_MAGIC);
    let vs = s.load_u64(r + 8, Ordering::Relaxed).unwrap();
    assert_eq!((vs as u32, (vs >> 32) as u32), (ROOT_VERSION, 32));
    let geo = s.load_u64(r + 16, Ordering::Relaxed).unwrap();
    assert_eq!((geo as u32, (geo >> 32) as u32), (LEAF_SIZE as u32, 8));
    assert!(s.load_pptr(r + R_SPLIT_NEW).unwrap().is_null());
    assert!(s.load_pptr(r + R_DEL_CUR).unwrap().is_null());
    let t = FPTree::open(a, slot).unwrap();
    assert_same(&t, &fixture_model());
    assert!(t.leaves() > 5, "{} leaves", t.leaves());
}
