//! Scaffolding shared by the FPTree tests (`fptree.rs`, `fptree_var.rs`, `fptree_persistent.rs`,
//! `fptree_scan.rs`, `fptree_persistent_index.rs`): pool sets with an allocator in a test
//! directory, the leak check's block comparison, flush/fence counts of one call, seeded
//! shuffles, the random fixed-key run against a `BTreeMap`, and the stored fixtures' hex format.
//!
//! Every pool set lives in `dir/set`; every allocator has one root slot. Random helpers take
//! the test's seed (printed by `seed()`) and draw only from it.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use ferrite::alloc::PAllocator;
use ferrite::fptree::persistent::{BoundForm, PIndex};
use ferrite::fptree::{FPTree, FPTreeVar};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PPtr, PoolSet, SplitMix64};
use proptest::test_runner::TestCaseError;

/// The test's seed (printed; `FERRITE_TEST_SEED` replays one).
pub fn seed() -> u64 {
    ferrite::pmem::internals::testing::test_seed()
}

/// A new pool set in `dir/set` with an allocator of one root slot.
pub fn create_alloc(dir: &TestDir, o: &Options) -> Arc<PAllocator> {
    let set = PoolSet::create(dir.join("set"), o).unwrap();
    Arc::new(PAllocator::create(Arc::new(set), 1).unwrap())
}

/// Opens (and recovers) the pool set in `dir/set` and its allocator.
pub fn open_alloc(dir: &TestDir, o: &Options) -> Arc<PAllocator> {
    let set = PoolSet::open(dir.join("set"), o).unwrap();
    Arc::new(PAllocator::open(Arc::new(set)).unwrap())
}

/// The sort key of a block.
pub fn key_of(p: &PPtr) -> (u64, u64) {
    (p.segment, p.offset)
}

/// The leak check's comparison: the allocator's allocated blocks are exactly `owned` (in any
/// order); `msg` says what `owned` is.
pub fn assert_allocated(a: &PAllocator, mut owned: Vec<PPtr>, msg: &str) {
    let mut allocated = a.check().unwrap().allocated;
    allocated.sort_by_key(key_of);
    owned.sort_by_key(key_of);
    assert_eq!(allocated, owned, "{msg}");
}

/// A new persistent index (either bound form) of `fanout` in a new pool set in `dir/set`.
pub fn create_pindex<B: BoundForm>(dir: &TestDir, o: &Options, fanout: u32) -> PIndex<B> {
    let a = create_alloc(dir, o);
    let slot = a.root_location();
    PIndex::create_with_fanout(a, slot, fanout).unwrap()
}

/// Drops the index, its allocator and pool set without a clean close (as after a crash) and
/// opens them again.
pub fn reopen_pindex<B: BoundForm>(dir: &TestDir, o: &Options, ix: PIndex<B>) -> PIndex<B> {
    drop(ix);
    let a = open_alloc(dir, o);
    let slot = a.root_location();
    PIndex::open(a, slot).unwrap()
}

/// N5: the allocator's allocated blocks are exactly the index's blocks.
pub fn assert_pindex_no_leak<B: BoundForm>(ix: &PIndex<B>) {
    let owned = ix.blocks().unwrap();
    assert_allocated(ix.allocator(), owned, "allocated blocks differ from the index's blocks");
}

/// The persistence counters' difference over one call of `f` (this thread's).
pub fn cost(f: &mut dyn FnMut()) -> Counters {
    let c = Counters::snapshot();
    f();
    Counters::snapshot() - c
}

/// Shuffles `v` in place from `r` (Fisher–Yates, last element first).
pub fn shuffle<T>(r: &mut SplitMix64, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, (r.next_u64() % (i as u64 + 1)) as usize);
    }
}

/// One operation of a short random sequence on a fixed-key tree and its model: `op` 0 or 1
/// inserts, 2 updates, 3 deletes `key` with value `v`; the returned flag must agree.
pub fn fixed_step(
    t: &FPTree,
    model: &mut BTreeMap<u64, u64>,
    op: u8,
    key: u64,
    v: u64,
) -> Result<(), TestCaseError> {
    match op {
        0 | 1 => {
            let fresh = !model.contains_key(&key);
            proptest::prop_assert_eq!(t.insert(key, v).unwrap(), fresh);
            model.entry(key).or_insert(v);
        }
        2 => {
            let had = model.contains_key(&key);
            proptest::prop_assert_eq!(t.update(key, v).unwrap(), had);
            if had {
                model.insert(key, v);
            }
        }
        _ => proptest::prop_assert_eq!(t.delete(key).unwrap(), model.remove(&key).is_some()),
    }
    Ok(())
}

/// `steps` random operations on `t` (keys below `space`; half inserts, updates, deletes,
/// lookups with a bounded range) against a `BTreeMap`; every 2 500 steps `same` compares the
/// tree with the model, `reopen` reopens it as after a crash, and `same` compares again.
/// Returns the tree and the model after a last comparison.
pub fn fixed_random_ops(
    seed: u64,
    mut t: FPTree,
    steps: u64,
    space: u64,
    mut reopen: impl FnMut(FPTree) -> FPTree,
    same: fn(&FPTree, &BTreeMap<u64, u64>),
) -> (FPTree, BTreeMap<u64, u64>) {
    let mut rng = SplitMix64::new(seed);
    let mut model = BTreeMap::new();
    for step in 0..steps {
        let key = rng.next_u64() % space;
        match rng.next_u64() % 10 {
            0..=4 => {
                let fresh = !model.contains_key(&key);
                assert_eq!(t.insert(key, step).unwrap(), fresh, "seed {seed:#x} step {step}");
                model.entry(key).or_insert(step);
            }
            5 | 6 => {
                let had = model.contains_key(&key);
                assert_eq!(t.update(key, step).unwrap(), had, "seed {seed:#x} step {step}");
                if had {
                    model.insert(key, step);
                }
            }
            7 | 8 => assert_eq!(
                t.delete(key).unwrap(),
                model.remove(&key).is_some(),
                "seed {seed:#x} step {step}"
            ),
            _ => {
                assert_eq!(t.get(key).unwrap(), model.get(&key).copied(), "seed {seed:#x}");
                let hi = key + rng.next_u64() % 200;
                let lim = 1 + (rng.next_u64() % 50) as usize;
                let want: Vec<(u64, u64)> =
                    model.range(key..=hi).take(lim).map(|(k, v)| (*k, *v)).collect();
                assert_eq!(t.range(key, hi, lim).unwrap(), want, "seed {seed:#x} step {step}");
            }
        }
        if step % 2_500 == 0 {
            same(&t, &model);
            t = reopen(t);
            same(&t, &model);
        }
    }
    same(&t, &model);
    (t, model)
}

/// The global offset of a byte-key tree's head leaf.
pub fn var_head_leaf(t: &FPTreeVar) -> u64 {
    let set = t.allocator().pool();
    let r = set.resolve(t.root()).unwrap();
    set.resolve(set.load_pptr(r + ferrite::fptree::R_HEAD).unwrap()).unwrap()
}

/// The four words of slot `slot` of the v2 leaf at `leaf`.
pub fn var_slot_words(set: &PoolSet, leaf: u64, slot: usize) -> [u64; 4] {
    let s = leaf + ferrite::fptree::var_slot_offset(slot);
    [0, 1, 2, 3].map(|i| set.load_u64(s + 8 * i, std::sync::atomic::Ordering::Acquire).unwrap())
}

/// Leaves in the head leaf of a fresh byte-key tree `t` the images a crash leaves inside a
/// long-key insert (`lost`'s block allocated into slot 1, its bit never set) and inside an
/// update (`kept`'s block named by valid slot 5, value 7, and by invalid slot 0), durably.
/// Returns `(kept, lost)`; `model` gets the tree's content (`kept` → 7, `"inline"` → 3).
pub fn leave_interrupted_key_block_work(
    t: &FPTreeVar,
    model: &mut BTreeMap<Vec<u8>, u64>,
) -> (Vec<u8>, Vec<u8>) {
    use std::sync::atomic::Ordering;
    let kept = vec![b'k'; 200];
    let lost = vec![b'l'; 300];
    t.insert(&kept, 1).unwrap();
    t.insert(&lost, 2).unwrap();
    t.insert(b"inline", 3).unwrap();
    model.insert(b"inline".to_vec(), 3);
    let set = t.allocator().pool().clone();
    let leaf = var_head_leaf(t);
    // Slots are taken lowest first: kept in 0, lost in 1, inline in 2.
    assert_eq!(var_slot_words(&set, leaf, 0)[3] & 0xFFFF, 200);
    let bm = set.load_u64(leaf + ferrite::fptree::L_BITMAP, Ordering::Acquire).unwrap();
    let mut w = var_slot_words(&set, leaf, 0);
    w[2] = 7;
    let s5 = leaf + ferrite::fptree::var_slot_offset(5);
    for (i, x) in w.iter().enumerate() {
        set.store_u64(s5 + 8 * i as u64, *x, Ordering::Relaxed).unwrap();
    }
    let fp = set.load_u64(leaf, Ordering::Acquire).unwrap().to_le_bytes();
    let mut fp2 = fp;
    fp2[5] = fp[0];
    set.store_u64(leaf, u64::from_le_bytes(fp2), Ordering::Relaxed).unwrap();
    set.store_u64(leaf + ferrite::fptree::L_BITMAP, (bm & !0b11) | (1 << 5), Ordering::Release)
        .unwrap();
    set.persist(leaf, ferrite::fptree::VAR_LEAF_SIZE).unwrap(); // ORDER(P-T-3): the interrupted state a test leaves durable
    model.insert(kept.clone(), 7);
    (kept, lost)
}

/// The content of the byte-key fixtures over keys `key(0..n)` (distinct): every key with
/// value `i × 3 + 1`, the ones with `i % 5 == 0` deleted, `i % 3 == 0` updated to `i × 11`.
pub fn var_fixture_model(n: u64, key: fn(u64) -> Vec<u8>) -> BTreeMap<Vec<u8>, u64> {
    (0..n)
        .filter(|i| i % 5 != 0)
        .map(|i| (key(i), if i % 3 == 0 { i * 11 } else { i * 3 + 1 }))
        .collect()
}

/// Writes [`var_fixture_model`] into `t` the way the fixtures were made: the keys inserted in
/// an order scrambled by seed 1, then the deletes, then the updates, each in that order.
pub fn fill_var_fixture(t: &FPTreeVar, n: u64, key: fn(u64) -> Vec<u8>) {
    let mut order: Vec<u64> = (0..n).collect();
    shuffle(&mut SplitMix64::new(1), &mut order);
    for &i in &order {
        t.insert(&key(i), i * 3 + 1).unwrap();
    }
    for &i in order.iter().filter(|&&i| i % 5 == 0) {
        t.delete(&key(i)).unwrap();
    }
    for &i in order.iter().filter(|&&i| i % 3 == 0) {
        t.update(&key(i), i * 11).unwrap();
    }
}

/// The content of the fixed-key fixtures: keys `i * 7` for `i < 300`, value `k * 3 + 1`,
/// the multiples of 5 deleted again.
pub fn fixed_fixture_model() -> BTreeMap<u64, u64> {
    (0..300u64).map(|i| i * 7).filter(|k| k % 5 != 0).map(|k| (k, k * 3 + 1)).collect()
}

/// Writes [`fixed_fixture_model`] into `t` the way the stored fixed-key fixtures were made
/// (shuffled inserts with seed 1, then the deletes), so that a regenerated fixture is the same
/// tree.
pub fn fill_fixed_fixture(t: &FPTree) {
    let mut keys: Vec<u64> = (0..300u64).map(|i| i * 7).collect();
    shuffle(&mut SplitMix64::new(1), &mut keys);
    for &k in &keys {
        t.insert(k, k * 3 + 1).unwrap();
    }
    for &k in &keys {
        if k % 5 == 0 {
            t.delete(k).unwrap();
        }
    }
}

/// Drops the tree and closes its allocator's pool set (the last handle on it).
pub fn close_tree<K: ferrite::fptree::olc::IndexKey>(t: ferrite::fptree::Tree<K>) {
    let a = t.allocator().clone();
    drop(t);
    Arc::try_unwrap(a).unwrap().close().unwrap();
}

/// The stored fixture of a closed pool set in `set_dir` (its segment files, in the format of
/// [`super::fixture`]), beginning with `header`, written to `path`.
pub fn write_fixture(set_dir: &Path, header: &str, path: &Path) {
    super::fixture::write_files(set_dir, header, path, |n| n.starts_with("seg-"));
}

/// Rebuilds the segment files of the fixture stored at `path` in `dir`.
pub fn unpack_fixture(path: &Path, dir: &Path) {
    super::fixture::unpack(path, dir);
}
