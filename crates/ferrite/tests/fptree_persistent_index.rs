//! The persistent inner index (`fptree::persistent`) against a `BTreeMap` model: random
//! inserts, removes, lookups, successor/predecessor queries with reopens in the middle, at
//! fan-out 4 (deep trees: node splits, grows, chain detaches, shrinks) and 32; the leak check
//! against the allocator after every reopen; idempotent inserts; damaged nodes and roots give
//! typed errors; the stored index root v1 fixture opens with its content.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::fptree::persistent::{
    IX_A_NEW, IX_F_NODE, IX_ROOT, N_BITMAP, N_CHILDREN, N_KEYS, N_LEVEL, PINDEX_MAGIC,
    PINDEX_ROOT_SIZE, PINDEX_VERSION, PIndexRootImage, PNODE_SIZE, PNODE_TAG, PNodeImage,
    PersistentIndex,
};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;
use proptest::prelude::*;

mod common;
use common::fptree::{
    assert_pindex_no_leak, cost, create_alloc, create_pindex, open_alloc, reopen_pindex, seed,
    shuffle, write_fixture,
};

const SEG: u64 = 1 << 20;

fn opts() -> Options {
    Options::default().layout("pindex-test").segment_size(SEG)
}

fn new_index(dir: &TestDir, fanout: u32) -> PersistentIndex {
    create_pindex(dir, &opts(), fanout)
}

fn reopen(dir: &TestDir, ix: PersistentIndex) -> PersistentIndex {
    reopen_pindex(dir, &opts(), ix)
}

/// A synthetic leaf pointer (the index never dereferences leaves).
fn leaf(v: u64) -> PPtr {
    PPtr::new(3, 64 * (v + 1))
}

/// N5: the allocator's allocated blocks are exactly the index's blocks.
fn assert_no_leak(ix: &PersistentIndex) {
    assert_pindex_no_leak(ix);
}

fn assert_same(ix: &PersistentIndex, model: &BTreeMap<u64, PPtr>) {
    let want: Vec<(u64, PPtr)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(ix.entries_in_order().unwrap(), want);
    assert_eq!(ix.len().unwrap(), model.len() as u64);
    let r = ix.check().unwrap();
    assert_eq!(r.entries, model.len() as u64);
    assert_no_leak(ix);
}

/// One random operation against the model; returns a short description for messages.
fn step(ix: &mut PersistentIndex, model: &mut BTreeMap<u64, PPtr>, op: u8, k: u64, v: u64) {
    let ctx = format!("op {op} key {k}");
    match op % 6 {
        0 | 1 => {
            let l = leaf(v);
            let fresh = !model.contains_key(&k);
            if fresh {
                assert!(ix.insert(k, l).unwrap(), "{ctx}");
                model.insert(k, l);
            } else {
                let old = model[&k];
                // The same pair is a no-op (the tree's recovery re-calls insert); another leaf
                // for a present bound is refused without a change.
                assert!(!ix.insert(k, old).unwrap(), "{ctx}");
                if old != l {
                    assert!(matches!(ix.insert(k, l), Err(Error::InvalidArgument(_))), "{ctx}");
                }
            }
        }
        2 => {
            assert_eq!(ix.remove(k).unwrap(), model.remove(&k).is_some(), "{ctx}");
        }
        3 => {
            let want = model.range(..=k).next_back().map(|(b, l)| (*b, *l));
            assert_eq!(ix.lookup_with_bound(k).unwrap(), want, "{ctx}");
            assert_eq!(ix.lookup(k).unwrap(), want.map(|w| w.1), "{ctx}");
            // The neighbours a scan step takes from the routed bottom node are the model's.
            let near = ix.lookup_near(k, true, true).unwrap();
            assert_eq!(near.as_ref().map(|n| (n.bound, n.leaf)), want, "{ctx}");
            if let Some(n) = near {
                let b = n.bound;
                if let Some(next) = n.next {
                    assert_eq!(
                        model
                            .range((std::ops::Bound::Excluded(b), std::ops::Bound::Unbounded))
                            .next()
                            .map(|(b, l)| (*b, *l)),
                        Some(next)
                    );
                }
                if let Some(prev) = n.prev {
                    assert_eq!(model.range(..b).next_back().map(|(b, l)| (*b, *l)), Some(prev));
                }
            }
        }
        4 => {
            let want = model.range(k.saturating_add(1)..).next().map(|(b, l)| (*b, *l));
            let want = if k == u64::MAX { None } else { want };
            assert_eq!(ix.successor(k).unwrap(), want, "{ctx}");
        }
        _ => {
            let want = model.range(..k).next_back().map(|(b, l)| (*b, *l));
            assert_eq!(ix.predecessor(k).unwrap(), want, "{ctx}");
        }
    }
}

/// Random operations over a small key space (many splits and detaches per key) with a reopen
/// every `reopen_every` operations and full checks there.
fn random_run(seed: u64, fanout: u32, ops: usize, keys: u64, reopen_every: usize) {
    println!("seed {seed:#x} fan-out {fanout}");
    let dir = TestDir::new("pindex-model");
    let mut ix = new_index(&dir, fanout);
    let mut model = BTreeMap::new();
    let mut rng = SplitMix64::new(seed);
    let mut max_height = 0;
    for i in 0..ops {
        // Phases of growth and shrinkage, so that the tree gets deep and empties again.
        let grow = (i / 700) % 2 == 0;
        let op = match rng.next_u64() % 10 {
            0..=3 if grow => 0,
            0..=1 => 0,
            4..=5 if !grow => 2,
            4 => 2,
            x => (x % 4 + 2) as u8,
        };
        let k = rng.next_u64() % keys;
        step(&mut ix, &mut model, op, k, rng.next_u64() % 1000);
        if (i + 1) % reopen_every == 0 {
            max_height = max_height.max(ix.check().unwrap().height);
            assert_same(&ix, &model);
            ix = reopen(&dir, ix);
            assert_same(&ix, &model);
        }
    }
    assert_same(&ix, &model);
    // Empty it entirely: the root ends as an empty bottom node.
    let all: Vec<u64> = model.keys().copied().collect();
    for k in all {
        assert!(ix.remove(k).unwrap(), "seed {seed:#x}");
    }
    model.clear();
    assert_same(&ix, &model);
    assert_eq!(ix.check().unwrap().height, 1);
    assert_eq!(ix.first().unwrap(), None);
    println!("max height {max_height}");
    if fanout == 4 {
        assert!(max_height >= 4, "the run never built a deep tree (height {max_height})");
    }
}

#[test]
fn random_operations_match_the_model_at_fanout_4() {
    random_run(seed(), 4, 4000, 600, 500);
}

#[test]
fn random_operations_match_the_model_at_fanout_32() {
    random_run(seed() ^ 0x32, 32, 6000, 3000, 1500);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Short sequences over a tiny key space at fan-out 4, reopened at a random point and at
    /// the end.
    #[test]
    fn sequences_match_the_model(
        ops in proptest::collection::vec((0u8..6, 0u64..80, 0u64..50), 1..300),
        reopen_at in 0usize..300,
    ) {
        let dir = TestDir::new("pindex-prop");
        let mut ix = new_index(&dir, 4);
        let mut model = BTreeMap::new();
        for (i, &(op, k, v)) in ops.iter().enumerate() {
            step(&mut ix, &mut model, op, k, v);
            if i == reopen_at {
                ix = reopen(&dir, ix);
                assert_same(&ix, &model);
            }
        }
        ix = reopen(&dir, ix);
        assert_same(&ix, &model);
    }
}

#[test]
fn ascending_and_descending_fills_scan_both_ways() {
    let dir = TestDir::new("pindex-scan");
    let mut ix = new_index(&dir, 4);
    for k in (0..200u64).map(|k| k * 10) {
        assert!(ix.insert(k, leaf(k)).unwrap());
    }
    for k in (0..200u64).rev().map(|k| k * 10 + 5) {
        assert!(ix.insert(k, leaf(k)).unwrap());
    }
    ix = reopen(&dir, ix);
    // Walk up with successor and down with predecessor: every bound once, in order.
    let mut up = Vec::new();
    let mut at = ix.first().unwrap();
    while let Some((b, l)) = at {
        assert_eq!(l, leaf(b));
        up.push(b);
        at = ix.successor(b).unwrap();
    }
    let mut want: Vec<u64> = (0..200u64).flat_map(|k| [k * 10, k * 10 + 5]).collect();
    assert_eq!(up, want);
    let mut down = Vec::new();
    let mut at = ix.last().unwrap();
    while let Some((b, _)) = at {
        down.push(b);
        at = ix.predecessor(b).unwrap();
    }
    want.reverse();
    assert_eq!(down, want);
    // Keys between bounds route to the bound below them; below the first bound, nothing.
    assert_eq!(ix.lookup_with_bound(17).unwrap(), Some((15, leaf(15))));
    assert_eq!(ix.lookup_with_bound(u64::MAX).unwrap(), Some((1995, leaf(1995))));
    ix.remove(0).unwrap();
    assert_eq!(ix.lookup(3).unwrap(), None);
    assert_no_leak(&ix);
}

#[test]
fn open_reads_only_the_root_block() {
    // "No rebuild at open": opening a large index reads no node. A damaged node is therefore
    // not noticed by open (only by the operation that reaches it), which this test uses: every
    // node's tag is destroyed and open still succeeds.
    let dir = TestDir::new("pindex-open");
    let mut ix = new_index(&dir, 4);
    for k in 0..300u64 {
        ix.insert(k * 3, leaf(k)).unwrap();
    }
    let nodes: Vec<PPtr> = ix.blocks().unwrap()[1..].to_vec();
    let set = ix.allocator().pool().clone();
    for n in &nodes {
        set.store_u64(set.resolve(*n).unwrap(), 0, Ordering::Relaxed).unwrap();
    }
    drop(set);
    let ix = reopen(&dir, ix);
    assert!(matches!(ix.lookup(5), Err(Error::Corrupted { .. })));
    assert!(matches!(ix.check(), Err(Error::Corrupted { .. })));
}

#[test]
fn damaged_nodes_and_roots_are_corrupted_not_panics() {
    let seed = seed();
    println!("seed {seed:#x}");
    let mut rng = SplitMix64::new(seed);
    for case in 0..6 {
        let dir = TestDir::new("pindex-damage");
        let mut ix = new_index(&dir, 4);
        for k in 0..120u64 {
            ix.insert(k * 7, leaf(k)).unwrap();
        }
        let blocks = ix.blocks().unwrap();
        let set = ix.allocator().pool().clone();
        let node = blocks[1 + (rng.next_u64() as usize % (blocks.len() - 1))];
        let g = set.resolve(node).unwrap();
        let rg = set.resolve(blocks[0]).unwrap();
        match case {
            0 => set.store_u64(g + N_BITMAP, u64::MAX, Ordering::Relaxed).unwrap(),
            1 => set.store_u64(g + N_LEVEL, 1000, Ordering::Relaxed).unwrap(),
            2 => set.store_u64(g + N_LEVEL, 7, Ordering::Relaxed).unwrap(),
            3 => set.store_u64(g + N_BITMAP, 0, Ordering::Relaxed).unwrap(),
            // A root pointer into nowhere, and a child pointer to the node itself (a cycle).
            4 => set.store_u64(rg + IX_ROOT + 8, 1 << 40, Ordering::Relaxed).unwrap(),
            _ => {
                let r = set.load_pptr(rg + IX_ROOT).unwrap();
                let root_g = set.resolve(r).unwrap();
                for c in 0..4 {
                    set.store_u64(root_g + 320 + c * 16, r.segment, Ordering::Relaxed).unwrap();
                    set.store_u64(root_g + 328 + c * 16, r.offset, Ordering::Relaxed).unwrap();
                }
            }
        }
        drop(set);
        let ix = reopen(&dir, ix);
        let results = [
            ix.check().map(drop),
            ix.entries_in_order().map(drop),
            ix.blocks().map(drop),
            (0..120u64).try_for_each(|k| ix.lookup(k * 7).map(drop)),
        ];
        assert!(
            results.iter().any(|r| matches!(r, Err(Error::Corrupted { .. }))),
            "case {case}: {results:?}"
        );
        for r in results {
            assert!(matches!(r, Ok(()) | Err(Error::Corrupted { .. })), "case {case}: {r:?}");
        }
    }
}

#[test]
fn a_damaged_header_or_armed_garbage_log_is_refused() {
    let dir = TestDir::new("pindex-header");
    let ix = new_index(&dir, 4);
    let set = ix.allocator().pool().clone();
    let rg = set.resolve(ix.blocks().unwrap()[0]).unwrap();
    // A flipped geometry byte breaks the checksum.
    set.store_u64(rg + 16, 0xdead, Ordering::Relaxed).unwrap();
    drop(set);
    drop(ix);
    let a = open_alloc(&dir, &opts());
    let slot = a.root_location();
    assert!(matches!(PersistentIndex::open(a.clone(), slot), Err(Error::Corrupted { .. })));
    // A valid header but an alloc log armed with a pointer into nowhere.
    let dir2 = TestDir::new("pindex-log");
    let ix = new_index(&dir2, 4);
    let set = ix.allocator().pool().clone();
    let rg = set.resolve(ix.blocks().unwrap()[0]).unwrap();
    assert_eq!(set.load_u64(rg, Ordering::Relaxed).unwrap(), PINDEX_MAGIC);
    set.store_u64(rg + IX_A_NEW + 8, 1 << 40, Ordering::Relaxed).unwrap();
    set.store_u64(rg + IX_A_NEW, 0, Ordering::Relaxed).unwrap();
    drop(set);
    let r = reopen_result(&dir2, ix);
    assert!(matches!(r, Err(Error::Corrupted { .. })), "{:?}", r.map(drop));
    // The free log armed with a node that is not a node.
    let dir3 = TestDir::new("pindex-flog");
    let ix = new_index(&dir3, 4);
    let set = ix.allocator().pool().clone();
    let rg = set.resolve(ix.blocks().unwrap()[0]).unwrap();
    set.store_u64(rg + IX_F_NODE + 8, 64, Ordering::Relaxed).unwrap();
    set.store_u64(rg + IX_F_NODE, 0, Ordering::Relaxed).unwrap();
    set.store_u64(rg + IX_F_NODE + 32, 3, Ordering::Relaxed).unwrap();
    drop(set);
    assert!(matches!(reopen_result(&dir3, ix), Err(Error::Corrupted { .. })));
}

/// Regression test: a damaged index whose nodes share children (every level's four slots point
/// at one node below, under separators below the looked-up key, over bottom nodes whose keys are
/// all above it) made a floor search try every path: 4^levels node visits, unbounded in the
/// height. Searches now stop after a fixed number of visits with `Corrupted`.
#[test]
fn shared_children_cannot_make_a_search_run_away() {
    let dir = TestDir::new("pindex-dag");
    let mut ix = new_index(&dir, 4);
    for k in 0..600u64 {
        ix.insert(1000 + k, leaf(k)).unwrap();
    }
    let height = ix.check().unwrap().height;
    assert!(height >= 7, "height {height}");
    let set = ix.allocator().pool().clone();
    let nodes: Vec<(u64, u64)> = ix.blocks().unwrap()[1..]
        .iter()
        .map(|n| {
            let g = set.resolve(*n).unwrap();
            (g, set.load_u64(g + N_LEVEL, Ordering::Relaxed).unwrap())
        })
        .collect();
    let ptrs: Vec<PPtr> = ix.blocks().unwrap()[1..].to_vec();
    for &(g, level) in &nodes {
        if level == 0 {
            continue;
        }
        let below = ptrs[nodes.iter().position(|&(_, l)| l == level - 1).unwrap()];
        for s in 0..4u64 {
            set.store_u64(g + N_KEYS + s * 8, s, Ordering::Relaxed).unwrap();
            set.store_u64(g + N_CHILDREN + s * 16, below.segment, Ordering::Relaxed).unwrap();
            set.store_u64(g + N_CHILDREN + s * 16 + 8, below.offset, Ordering::Relaxed).unwrap();
        }
        set.store_u64(g + N_BITMAP, 0b1111, Ordering::Relaxed).unwrap();
    }
    drop(set);
    let ix = reopen(&dir, ix);
    match ix.lookup(500) {
        Err(Error::Corrupted { what, .. }) => {
            assert!(what.contains("visited more nodes"), "{what}")
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(ix.check(), Err(Error::Corrupted { .. })));
}

fn reopen_result(dir: &TestDir, ix: PersistentIndex) -> Result<PersistentIndex, Error> {
    drop(ix);
    let a = open_alloc(dir, &opts());
    let slot = a.root_location();
    PersistentIndex::open(a, slot)
}

#[test]
fn creation_arguments_are_checked() {
    let dir = TestDir::new("pindex-args");
    let a = create_alloc(&dir, &opts());
    let slot = a.root_location();
    for f in [0, 2, 5, 34] {
        assert!(matches!(
            PersistentIndex::create_with_fanout(a.clone(), slot, f),
            Err(Error::InvalidArgument(_))
        ));
    }
    let mut ix = PersistentIndex::create(a.clone(), slot).unwrap();
    assert_eq!(ix.fanout(), 32);
    assert!(matches!(PersistentIndex::create(a.clone(), slot), Err(Error::InvalidArgument(_))));
    assert!(matches!(ix.insert(1, PPtr::NULL), Err(Error::InvalidArgument(_))));
    assert!(matches!(ix.insert(1, PPtr::new(0, 65)), Err(Error::InvalidArgument(_))));
    assert!(!ix.remove(1).unwrap());
    assert!(ix.is_empty().unwrap());
}

#[test]
fn exact_flush_and_fence_counts() {
    let dir = TestDir::new("pindex-counts");
    let mut ix = new_index(&dir, 32);
    for k in 1..=10u64 {
        ix.insert(k * 10, leaf(k)).unwrap();
    }
    let d = cost;
    // Insert without a split: key and child (2 lines) + fence, bitmap + fence (P-FPT-14).
    let c = d(&mut || assert!(ix.insert(55, leaf(55)).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (3, 2), "insert");
    // The identical pair again: a no-op that persists nothing.
    let c = d(&mut || assert!(!ix.insert(55, leaf(55)).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences, c.bytes_stored), (0, 0, 0), "repeated insert");
    // Remove that leaves entries in the node: the bitmap only.
    let c = d(&mut || assert!(ix.remove(55).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (1, 1), "remove");
    let c = d(&mut || assert!(!ix.remove(55).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences, c.bytes_stored), (0, 0, 0), "absent remove");
    // Lookups and neighbours persist nothing.
    let c = d(&mut || {
        assert_eq!(ix.lookup(57).unwrap(), Some(leaf(5)));
        assert_eq!(ix.successor(50).unwrap(), Some((60, leaf(6))));
        assert_eq!(ix.predecessor(50).unwrap(), Some((40, leaf(4))));
    });
    assert_eq!((c.lines_flushed(), c.fences, c.bytes_stored), (0, 0, 0), "lookups");
    // Two levels: an insert below the leftmost separator lowers it first (1 line, 1 fence).
    for k in 11..=40u64 {
        ix.insert(k * 10, leaf(k)).unwrap();
    }
    assert_eq!(ix.check().unwrap().height, 2);
    let c = d(&mut || assert!(ix.insert(5, leaf(0)).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (4, 3), "insert below the leftmost separator");
}

#[test]
fn pool_full_leaves_the_index_unchanged_and_usable() {
    let dir = TestDir::new("pindex-full");
    let a = create_alloc(&dir, &opts().max_pool_size(2 * SEG));
    let slot = a.root_location();
    let mut ix = PersistentIndex::create_with_fanout(a, slot, 4).unwrap();
    let mut model = BTreeMap::new();
    let mut k = 0u64;
    let failed = loop {
        let need = ix.allocations_for(k).unwrap();
        match ix.insert(k, leaf(k)) {
            Ok(true) => {
                model.insert(k, leaf(k));
            }
            Err(Error::PoolFull { .. }) => break k,
            r => panic!("insert {k}: {r:?} (needed {need} nodes)"),
        }
        k += 1;
        assert!(k < 1 << 20, "the pool never filled");
    };
    assert!(ix.allocations_for(failed).unwrap() > 0);
    assert_same(&ix, &model);
    // Removes free nodes; inserts fit again; a reopen finds the same entries and no leak.
    for r in 0..failed / 2 {
        assert!(ix.remove(r).unwrap());
        model.remove(&r);
    }
    for n in failed..failed + 20 {
        assert!(ix.insert(n, leaf(n)).unwrap());
        model.insert(n, leaf(n));
    }
    drop(ix);
    let a = open_alloc(&dir, &opts().max_pool_size(2 * SEG));
    let slot = a.root_location();
    let ix = PersistentIndex::open(a, slot).unwrap();
    assert_same(&ix, &model);
}

// ----- the stored index root v1 fixture -----

/// The fixture: the non-zero 64-byte lines of every segment file of a small pool set holding
/// one index (fan-out 4) in the anchor's root, as text (`file <name> <length>` then
/// `<offset hex> <128 hex digits>` lines), the same form as the tree's fixture.
fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fptree-pindex-v1/pool-set.hex")
}

const FIXTURE_SEG: u64 = 3 * 64 * 1024 + 4096;

fn fixture_opts() -> Options {
    Options::default().layout("pindex-fixture").segment_size(FIXTURE_SEG)
}

/// The content the fixture was generated with: bounds 0, 5, 10, ... (80 of them) inserted in a
/// scrambled order, leaf(bound); then every bound divisible by 3 removed.
fn fixture_model() -> BTreeMap<u64, PPtr> {
    (0..80u64).map(|i| i * 5).filter(|k| k % 3 != 0).map(|k| (k, leaf(k))).collect()
}

/// Regenerates `tests/fixtures/fptree-pindex-v1/pool-set.hex` (run by hand, only when a new
/// format version is introduced: `cargo test -p ferrite --test fptree_persistent_index --
/// --ignored generate_pindex_v1_fixture`). A v1 fixture never changes once committed.
#[test]
#[ignore = "writes the stored fixture; run by hand for a new format version"]
fn generate_pindex_v1_fixture() {
    let dir = TestDir::new("pindex-fixture-gen");
    let ix = {
        let a = create_alloc(&dir, &fixture_opts());
        let slot = a.root_location();
        let mut ix = PersistentIndex::create_with_fanout(a, slot, 4).unwrap();
        let mut keys: Vec<u64> = (0..80u64).map(|i| i * 5).collect();
        shuffle(&mut SplitMix64::new(1), &mut keys);
        for &k in &keys {
            ix.insert(k, leaf(k)).unwrap();
        }
        for &k in &keys {
            if k % 3 == 0 {
                ix.remove(k).unwrap();
            }
        }
        assert_same(&ix, &fixture_model());
        ix
    };
    let a = ix.allocator().clone();
    drop(ix);
    Arc::try_unwrap(a).unwrap().close().unwrap();
    write_fixture(
        &dir.join("set"),
        "# FPTree persistent index root v1 fixture: a pool set (PAllocator anchor v2, one index of fan-out 4 in the anchor's root).\n# Generated by `generate_pindex_v1_fixture` in crates/ferrite/tests/fptree_persistent_index.rs; never edit.\n",
        &fixture_path(),
    );
}

/// Rebuilds the fixture's segment files in `dir`.
fn unpack_fixture(dir: &Path) {
    common::fptree::unpack_fixture(&fixture_path(), dir);
}

#[test]
fn the_v1_fixture_opens_with_its_content() {
    let dir = TestDir::new("pindex-fixture");
    let path = dir.join("set");
    unpack_fixture(&path);
    let set = PoolSet::open(&path, &fixture_opts()).unwrap();
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let slot = a.root_location();
    // The index root and a node, field by field (docs/design/format.md).
    let s = a.pool().clone();
    let rb = s.load_pptr(s.resolve(slot).unwrap()).unwrap();
    let r: PIndexRootImage = s.read_struct(s.resolve_range(rb, PINDEX_ROOT_SIZE).unwrap()).unwrap();
    assert_eq!(r.header.magic, PINDEX_MAGIC);
    assert_eq!((r.header.version, r.header.fanout), (PINDEX_VERSION, 4));
    assert_eq!((r.header.node_size, r.header.key_size), (PNODE_SIZE as u32, 8));
    assert_eq!((r.header.compat, r.header.incompat), (0, 0));
    assert_eq!(r.header.checksum, r.header.crc());
    assert!(r.alloc_log.new.is_null() && r.free_log.node.is_null());
    let n: PNodeImage = s.read_struct(s.resolve_range(r.root, PNODE_SIZE).unwrap()).unwrap();
    assert_eq!(n.tag, PNODE_TAG);
    assert!(n.level >= 2 && n.bitmap != 0 && n.bitmap < 16, "{n:?}");
    let mut ix = PersistentIndex::open(a, slot).unwrap();
    let mut model = fixture_model();
    assert_same(&ix, &model);
    assert_eq!(ix.lookup_with_bound(11).unwrap(), Some((10, leaf(10))));
    // It stays writable.
    for k in [1, 2, 3, 400] {
        assert!(ix.insert(k, leaf(k)).unwrap());
        model.insert(k, leaf(k));
    }
    assert!(ix.remove(10).unwrap());
    model.remove(&10);
    assert_same(&ix, &model);
}

#[test]
fn readers_share_the_index_across_threads() {
    // Lookups and neighbour queries take `&self`: two threads read one index at once (no
    // writer: modifications take `&mut self`), each checking every answer against the model.
    let dir = TestDir::new("pindex-readers");
    let mut ix = new_index(&dir, 4);
    let mut model = BTreeMap::new();
    for k in 0..300u64 {
        ix.insert(k * 3, leaf(k)).unwrap();
        model.insert(k * 3, leaf(k));
    }
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (ix, model, start) = (&ix, &model, &start);
            s.spawn(move || {
                start.wait();
                for k in (t..900).step_by(2) {
                    let want = model.range(..=k).next_back().map(|(b, l)| (*b, *l));
                    assert_eq!(ix.lookup_with_bound(k).unwrap(), want, "key {k}");
                    let next = model.range(k + 1..).next().map(|(b, l)| (*b, *l));
                    assert_eq!(ix.successor(k).unwrap(), next, "key {k}");
                }
            });
        }
    });
}
