//! FPTree with byte-string keys (`FPTreeVar`, v2 leaves) on PAllocator against a
//! `BTreeMap<Vec<u8>, u64>` model, with reopen (allocator recovery, micro-log replay, the
//! rebuild's leak rule), the leak check T6 (key blocks included) against the allocator, the key
//! length limits (0, 1, 23, 24, 4 096 accepted; 4 097 refused before any write), flush/fence
//! counts, interrupted key-block work repaired at open, wrong-kind opens, damaged slots, a full
//! pool, and the stored byte-key fixture.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::fptree::{
    EMPTY_SLOT, FPTree, FPTreeVar, INCOMPAT_BYTE_KEYS, INLINE_MAX, MAX_KEY_LEN, ROOT_MAGIC,
    ROOT_SIZE, ROOT_VERSION, VAR_LEAF_SIZE, var_slot_offset,
};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;
use proptest::prelude::*;

mod common;
use common::fptree::{
    assert_allocated, close_tree, cost, create_alloc, leave_interrupted_key_block_work, open_alloc,
    seed, var_head_leaf, var_slot_words, write_fixture,
};

const SEG: u64 = 1 << 20;

fn opts() -> Options {
    Options::default().layout("fptree-var-test").segment_size(SEG)
}

fn new_tree_with(dir: &TestDir, o: &Options) -> FPTreeVar {
    let a = create_alloc(dir, o);
    let slot = a.root_location();
    FPTreeVar::create(a, slot).unwrap()
}

fn new_tree(dir: &TestDir) -> FPTreeVar {
    new_tree_with(dir, &opts())
}

/// Drops `t` without a clean close (as after a crash) and opens everything again.
fn reopen(dir: &TestDir, t: FPTreeVar) -> FPTreeVar {
    drop(t);
    let a = open_alloc(dir, &opts());
    let slot = a.root_location();
    FPTreeVar::open(a, slot).unwrap()
}

/// T6: the allocator's allocated blocks are exactly the tree's blocks (root, leaves, key
/// blocks) and `extra` ones.
fn assert_no_leak(a: &PAllocator, t: &FPTreeVar, extra: &[PPtr]) {
    let owned = t.blocks().into_iter().chain(extra.iter().copied()).collect();
    assert_allocated(
        a,
        owned,
        "allocated blocks differ from the tree's blocks (a leaked or a stray block)",
    );
}

type Model = BTreeMap<Vec<u8>, u64>;

fn all(t: &FPTreeVar) -> Vec<(Vec<u8>, u64)> {
    let top = vec![0xFF; MAX_KEY_LEN];
    t.range(&[], &top, usize::MAX).unwrap().into_iter().map(|(k, v)| (k.into_vec(), v)).collect()
}

fn assert_same(t: &FPTreeVar, model: &Model) {
    let want: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(all(t), want);
    assert_eq!(t.len(), model.len() as u64);
    let c = t.check().unwrap();
    assert_eq!(c.keys, model.len() as u64);
    assert_no_leak(t.allocator(), t, &[]);
}

/// The lengths every random key set covers: empty, one byte, both sides of the inline limit,
/// the 6-byte prefix, and the longest key.
const EDGE_LENGTHS: [usize; 12] = [0, 1, 6, 7, 8, 22, 23, 24, 25, 64, 1000, MAX_KEY_LEN];

/// `n` distinct candidate keys: a small alphabet and a few shared stems make shared prefixes,
/// keys that are prefixes of others, and long keys that agree in their first six bytes (so
/// lookups must compare key blocks) common.
fn key_set(rng: &mut SplitMix64, n: usize) -> Vec<Vec<u8>> {
    let stems: [&[u8]; 4] = [b"", b"user", b"\x00\x00\x00\x00\x00\x00\x00", b"\xff\xfe"];
    let mut keys = std::collections::BTreeSet::new();
    for len in EDGE_LENGTHS {
        keys.insert(vec![b'k'; len]);
    }
    while keys.len() < n {
        let len = match rng.next_u64() % 10 {
            0..=4 => (rng.next_u64() % 24) as usize,
            5..=7 => 24 + (rng.next_u64() % 40) as usize,
            8 => EDGE_LENGTHS[(rng.next_u64() % 12) as usize],
            _ => (rng.next_u64() % 600) as usize,
        };
        let stem = stems[(rng.next_u64() % 4) as usize];
        let mut k: Vec<u8> = stem.iter().copied().take(len).collect();
        while k.len() < len {
            k.push(b"ab\x00\xff"[(rng.next_u64() % 4) as usize]);
        }
        keys.insert(k);
    }
    let mut v: Vec<Vec<u8>> = keys.into_iter().collect();
    // A fixed order of candidates (sorted), picked at random below.
    v.truncate(n);
    v
}

#[test]
fn random_operations_with_reopen_match_a_btreemap() {
    let seed = seed();
    println!("seed {seed:#x}");
    let mut rng = SplitMix64::new(seed);
    let keys = key_set(&mut rng, 700);
    let dir = TestDir::new("fptree-var-random");
    let mut t = new_tree(&dir);
    let mut model = Model::new();
    for step in 0..12_000u64 {
        let key = &keys[(rng.next_u64() % keys.len() as u64) as usize];
        match rng.next_u64() % 10 {
            0..=4 => {
                let fresh = !model.contains_key(key);
                assert_eq!(t.insert(key, step).unwrap(), fresh, "seed {seed:#x}");
                model.entry(key.clone()).or_insert(step);
            }
            5 | 6 => {
                let had = model.contains_key(key);
                assert_eq!(t.update(key, step).unwrap(), had, "seed {seed:#x}");
                if had {
                    model.insert(key.clone(), step);
                }
            }
            7 | 8 => {
                assert_eq!(t.delete(key).unwrap(), model.remove(key).is_some(), "seed {seed:#x}")
            }
            _ => {
                assert_eq!(t.get(key).unwrap(), model.get(key).copied(), "seed {seed:#x}");
                let hi = &keys[(rng.next_u64() % keys.len() as u64) as usize];
                let lim = 1 + (rng.next_u64() % 50) as usize;
                let want: Vec<(Vec<u8>, u64)> = if key <= hi {
                    model
                        .range(key.clone()..=hi.clone())
                        .take(lim)
                        .map(|(k, v)| (k.clone(), *v))
                        .collect()
                } else {
                    Vec::new()
                };
                let got: Vec<(Vec<u8>, u64)> = t
                    .range(key, hi, lim)
                    .unwrap()
                    .into_iter()
                    .map(|(k, v)| (k.into_vec(), v))
                    .collect();
                assert_eq!(got, want, "seed {seed:#x}");
            }
        }
        if step % 2_000 == 0 {
            assert_same(&t, &model);
            t = reopen(&dir, t);
            assert_same(&t, &model);
        }
    }
    assert!(t.leaves() > 5, "{} leaves", t.leaves());
    assert_same(&t, &model);
    t = reopen(&dir, t);
    assert_same(&t, &model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Short random sequences over a tiny key space of mixed lengths (many splits and leaf
    /// deletions per key), each with a reopen in the middle and at the end.
    #[test]
    fn sequences_match_the_model(
        ops in proptest::collection::vec((0u8..4, 0usize..120), 1..300),
        key_seed in any::<u64>(),
    ) {
        let keys = key_set(&mut SplitMix64::new(key_seed), 120);
        let dir = TestDir::new("fptree-var-prop");
        let mut t = new_tree(&dir);
        let mut model = Model::new();
        let half = ops.len() / 2;
        for (i, (op, k)) in ops.into_iter().enumerate() {
            if i == half {
                t = reopen(&dir, t);
            }
            let key = &keys[k];
            let v = i as u64 + 1;
            match op {
                0 | 1 => {
                    let fresh = !model.contains_key(key);
                    prop_assert_eq!(t.insert(key, v).unwrap(), fresh);
                    model.entry(key.clone()).or_insert(v);
                }
                2 => {
                    let had = model.contains_key(key);
                    prop_assert_eq!(t.update(key, v).unwrap(), had);
                    if had { model.insert(key.clone(), v); }
                }
                _ => prop_assert_eq!(t.delete(key).unwrap(), model.remove(key).is_some()),
            }
        }
        t.check().unwrap();
        let t = reopen(&dir, t);
        let want: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
        prop_assert_eq!(all(&t), want);
        t.check().unwrap();
        assert_no_leak(t.allocator(), &t, &[]);
    }
}

#[test]
fn key_lengths_at_the_limits() {
    let dir = TestDir::new("fptree-var-limits");
    let t = new_tree(&dir);
    let mut model = Model::new();
    for (i, len) in [0usize, 1, 23, 24, MAX_KEY_LEN].into_iter().enumerate() {
        let k = vec![0xA5; len];
        assert!(t.insert(&k, i as u64).unwrap(), "length {len}");
        assert_eq!(t.get(&k).unwrap(), Some(i as u64), "length {len}");
        model.insert(k, i as u64);
    }
    assert_same(&t, &model);
    // 4 097 bytes: refused by every operation, before anything is stored or persisted.
    let long = vec![0xA5; MAX_KEY_LEN + 1];
    let c = Counters::snapshot();
    assert!(matches!(t.insert(&long, 1), Err(Error::InvalidArgument(_))));
    assert!(matches!(t.update(&long, 1), Err(Error::InvalidArgument(_))));
    assert!(matches!(t.delete(&long), Err(Error::InvalidArgument(_))));
    assert!(matches!(t.get(&long), Err(Error::InvalidArgument(_))));
    let d = Counters::snapshot() - c;
    assert_eq!((d.bytes_stored, d.lines_flushed(), d.fences), (0, 0, 0));
    // Refusing a key does not poison the handle.
    assert!(t.update(&[0xA5; 24], 99).unwrap());
    model.insert(vec![0xA5; 24], 99);
    assert_same(&t, &model);
    let t = reopen(&dir, t);
    assert_same(&t, &model);
    const { assert!(MAX_KEY_LEN == 4096 && INLINE_MAX == 23) };
}

#[test]
fn exact_flush_and_fence_counts() {
    let dir = TestDir::new("fptree-var-counts");
    let t = new_tree(&dir);
    for k in 0..10u8 {
        t.insert(&[k; 3], u64::from(k)).unwrap();
    }
    let d = cost;
    // An inline key costs what a fixed key costs: slot and fingerprint + fence, bitmap + fence.
    let inline = b"sixteen-byte-key";
    let c = d(&mut || assert!(t.insert(inline, 1).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (3, 2), "inline insert");
    let c = d(&mut || assert!(t.update(inline, 2).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (3, 2), "inline update");
    let c = d(&mut || assert!(t.delete(inline).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (1, 1), "inline delete");
    // A long key: the allocator's transaction, then key bytes, slot and fingerprint in one
    // epoch, then the bitmap.
    let long = [7u8; 100];
    // A first key block of the class, so that the measured insert starts no new page.
    t.insert(&[8u8; 100], 0).unwrap();
    let c = d(&mut || assert!(t.insert(&long, 1).unwrap()));
    // The allocator's redo transaction (7 lines, 2 fences), then the block's two lines, the slot
    // and the fingerprint in one epoch (4 lines, 1 fence), then the bitmap (1 line, 1 fence).
    assert_eq!((c.lines_flushed(), c.fences), (12, 4), "long insert");
    // An update reuses the block, no allocation: the copy's offset, value and length words and
    // the fingerprint (2 lines, 1 fence), then its segment word (1 line, 1 fence: P-FPT-26),
    // the bitmap (1, 1), and the old slot's reference nulled (1, 1: P-FPT-23).
    let c = d(&mut || assert!(t.update(&long, 2).unwrap()));
    assert_eq!((c.lines_flushed(), c.fences), (5, 4), "long update");
    assert_no_leak(t.allocator(), &t, &[]);
    // Lookups persist nothing, for either form.
    let c = d(&mut || {
        assert_eq!(t.get(&long).unwrap(), Some(2));
        assert_eq!(t.get(&[3; 3]).unwrap(), Some(3));
    });
    assert_eq!((c.lines_flushed(), c.fences, c.bytes_stored), (0, 0, 0), "get");
    let c = d(&mut || assert!(t.delete(&long).unwrap()));
    // The bitmap commit (1 line, 1 fence), then the allocator's free transaction, which nulls
    // the slot (7 lines, 2 fences).
    assert_eq!((c.lines_flushed(), c.fences), (8, 3), "long delete");
    assert_no_leak(t.allocator(), &t, &[]);
}

#[test]
fn splits_and_leaf_deletions_with_long_keys_in_every_position() {
    let dir = TestDir::new("fptree-var-positions");
    let mut t = new_tree(&dir);
    let mut model = Model::new();
    // Long keys sharing a 40-byte stem (equal length-and-prefix words: every probe reads the
    // key block), inserted ascending, then descending, then inline keys between them.
    let key = |i: u64, len: usize| {
        let mut k = vec![b's'; 40];
        k.extend_from_slice(format!("{i:08}").as_bytes());
        k.resize(len, b'x');
        k
    };
    for i in 0..150u64 {
        let k = key(i * 2, 48 + (i as usize % 5) * 100);
        assert!(t.insert(&k, i).unwrap());
        model.insert(k, i);
    }
    for i in (0..150u64).rev() {
        let k = key(i * 2 + 1, 48);
        assert!(t.insert(&k, i).unwrap());
        model.insert(k, i);
    }
    for i in 0..60u64 {
        let k = format!("s{i:03}").into_bytes();
        assert!(t.insert(&k, i).unwrap());
        model.insert(k, i);
    }
    assert!(t.leaves() > 10);
    assert_same(&t, &model);
    // Updates of every key (some of them split a full leaf first).
    let ks: Vec<Vec<u8>> = model.keys().cloned().collect();
    for (i, k) in ks.iter().enumerate() {
        assert!(t.update(k, 1000 + i as u64).unwrap());
        model.insert(k.clone(), 1000 + i as u64);
    }
    assert_same(&t, &model);
    // Empty the head leaf, a middle stretch and the last leaf.
    let n = ks.len();
    for range in [0..40, n / 2 - 30..n / 2 + 30, n - 40..n] {
        for k in &ks[range] {
            assert_eq!(t.delete(k).unwrap(), model.remove(k).is_some());
        }
        assert_same(&t, &model);
        t = reopen(&dir, t);
        assert_same(&t, &model);
    }
    for k in &ks {
        t.delete(k).unwrap();
        model.remove(k);
    }
    assert_eq!(t.leaves(), 1);
    assert_same(&t, &model);
    // The empty key and the largest keys.
    let top = vec![0xFF; MAX_KEY_LEN];
    assert!(t.insert(&top, 1).unwrap() && t.insert(&[], 2).unwrap());
    assert_eq!(all(&t), vec![(vec![], 2), (top.clone(), 1)]);
    assert!(t.range(b"b", b"a", 10).unwrap().is_empty());
    assert!(t.range(&[], &top, 0).unwrap().is_empty());
}

/// The images a crash leaves inside a long-key insert (a block allocated into an invalid slot)
/// and inside an update (the block named by a valid and an invalid slot of the same leaf) are
/// repaired at open: the first block is freed, the second is kept and the stale reference
/// dropped, nothing leaks and nothing is freed twice.
#[test]
fn interrupted_key_block_work_is_finished_at_open() {
    let dir = TestDir::new("fptree-var-leftovers");
    let t = new_tree(&dir);
    let mut model = Model::new();
    let (kept, lost) = leave_interrupted_key_block_work(&t, &mut model);
    // Before the repair, the check sees the stale references (V1).
    assert!(matches!(t.check(), Err(Error::Corrupted { .. })));
    let t = reopen(&dir, t);
    assert_same(&t, &model);
    let set = t.allocator().pool().clone();
    let leaf = var_head_leaf(&t);
    assert_eq!(var_slot_words(&set, leaf, 0)[0], EMPTY_SLOT[0], "the stale reference is dropped");
    assert_eq!(var_slot_words(&set, leaf, 1)[0], EMPTY_SLOT[0], "the orphan block is freed");
    assert_eq!(t.get(&lost).unwrap(), None);
    assert_eq!(t.get(&kept).unwrap(), Some(7));
}

/// Regression (a rebuild that wrote lock words): `var::rebuild_leaf` stored 0 into every leaf
/// lock word it found non-zero, although no recovery may write one (`docs/design/fptree.md`,
/// lock words and epochs: a word of an earlier open reads unlocked in the next open's epoch,
/// P-FPT-30); the fixed-key rebuild writes none. Here a crashed process of epoch `e` left
/// every leaf's word odd (locked) and written back: after a reopen each word is exactly as it
/// was (nothing wrote it), and every leaf takes writes (each one's first key updated, one key
/// deleted and inserted again) without waiting, in both index placements.
#[test]
fn lock_words_left_odd_by_a_crash_are_free_after_reopen_and_not_rewritten() {
    use ferrite::fptree::vlock::EPOCH_SHIFT;
    use ferrite::fptree::{L_BITMAP, L_LOCK, L_NEXT, R_EPOCH, TreeOptions};
    for topts in [TreeOptions::default(), TreeOptions::persistent()] {
        let dir = TestDir::new("fptree-var-odd-locks");
        let a = create_alloc(&dir, &opts());
        let slot = a.root_location();
        let t = FPTreeVar::create_with(a, slot, topts).unwrap();
        let mut model = Model::new();
        // 40-byte keys (key blocks) and short inline ones, enough for several leaves.
        for i in 0..150u64 {
            let mut k = format!("key-{i:05}").into_bytes();
            if i % 2 == 0 {
                k.resize(40, b'~');
            }
            t.insert(&k, i).unwrap();
            model.insert(k, i);
        }
        let set = t.allocator().pool().clone();
        let root = set.resolve(t.root()).unwrap();
        let e = set.load_u64(root + R_EPOCH, Ordering::Acquire).unwrap();
        let mut leaves = vec![var_head_leaf(&t)];
        loop {
            let next = set.load_pptr(leaves[leaves.len() - 1] + L_NEXT).unwrap();
            if next.is_null() {
                break;
            }
            leaves.push(set.resolve(next).unwrap());
        }
        assert!(leaves.len() > 3, "{topts:?}: {} leaves", leaves.len());
        let odd = (e << EPOCH_SHIFT) | 9;
        for &g in &leaves {
            set.store_u64(g + L_LOCK, odd, Ordering::Relaxed).unwrap();
        }
        drop(set);
        let t = reopen(&dir, t);
        let set = t.allocator().pool().clone();
        for &g in &leaves {
            let w = set.load_u64(g + L_LOCK, Ordering::Acquire).unwrap();
            assert_eq!(w, odd, "{topts:?}: the open wrote leaf {g:#x}'s lock word");
        }
        assert_same(&t, &model);
        // Every leaf is usable: a key of each (its first valid slot's, found by its value)
        // updated, deleted and inserted again.
        let pairs = all(&t);
        let firsts: Vec<(Vec<u8>, u64)> = leaves
            .iter()
            .map(|&g| {
                let bitmap = set.load_u64(g + L_BITMAP, Ordering::Acquire).unwrap();
                assert_ne!(bitmap, 0, "leaf {g:#x} is empty");
                let v = var_slot_words(&set, g, bitmap.trailing_zeros() as usize)[2];
                pairs.iter().find(|p| p.1 == v).unwrap().clone()
            })
            .collect();
        for (k, v) in firsts {
            assert!(t.update(&k, v + 1000).unwrap(), "{topts:?}");
            model.insert(k.clone(), v + 1000);
            assert!(t.delete(&k).unwrap());
            assert!(t.insert(&k, v + 2000).unwrap());
            model.insert(k, v + 2000);
        }
        assert_same(&t, &model);
    }
}

#[test]
fn a_full_pool_refuses_long_keys_and_the_tree_stays_usable() {
    // The pool set cannot grow: the anchor's segment and one small segment.
    let seg = 6 * 64 * 1024 + 4096;
    let o = Options::default().layout("fptree-var-test").segment_size(seg).max_pool_size(2 * seg);
    let dir = TestDir::new("fptree-var-full");
    let t = new_tree_with(&dir, &o);
    let mut model = Model::new();
    let mut i = 0u64;
    let key = |i: u64| {
        let mut k = format!("{i:08}").into_bytes();
        k.resize(1000, b'-');
        k
    };
    loop {
        match t.insert(&key(i), i) {
            Ok(true) => {
                model.insert(key(i), i);
                i += 1;
            }
            Err(Error::PoolFull { .. }) => break,
            other => panic!("unexpected {other:?}"),
        }
        assert!(i < 100_000, "the pool never filled");
    }
    assert!(i > 10, "{i} keys");
    // Nothing half-done: no block leaked, the handle is not poisoned.
    assert_same(&t, &model);
    assert!(matches!(t.insert(&key(i), 0), Err(Error::PoolFull { .. })));
    // Inline keys need no key block: they fit while the leaf has room.
    let mut inline_ok = 0;
    for j in 0..4u64 {
        match t.insert(format!("i{j}").as_bytes(), j) {
            Ok(true) => {
                model.insert(format!("i{j}").into_bytes(), j);
                inline_ok += 1;
            }
            Err(Error::PoolFull { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_same(&t, &model);
    for d in 0..5 {
        assert!(t.delete(&key(d)).unwrap());
        model.remove(&key(d));
    }
    // Key 0's leaf has room again and its freed block can be reused.
    assert!(t.insert(&key(0), 77).unwrap(), "a freed key block is reused");
    model.insert(key(0), 77);
    assert_same(&t, &model);
    drop(t);
    let a = open_alloc(&dir, &o);
    let slot = a.root_location();
    let t = FPTreeVar::open(a, slot).unwrap();
    assert_same(&t, &model);
    println!("{i} long keys, {inline_ok} inline keys after the pool filled");
}

/// A byte-key tree is never read with the fixed layout, nor the reverse: opening (or creating
/// on) the other kind's root is `Incompatible`, and the tree is unchanged afterwards.
#[test]
fn the_other_key_kind_is_refused() {
    let dir = TestDir::new("fptree-var-kind");
    let a = create_alloc(&dir, &opts());
    let tab = a.allocate(32, a.root_location()).unwrap();
    let g = a.pool().resolve_range(tab, 32).unwrap();
    a.pool().persist_pptr_null(g).unwrap();
    a.pool().persist_pptr_null(g + 16).unwrap();
    let (s0, s1) = (tab, PPtr::new(tab.segment, tab.offset + 16));
    let v = FPTreeVar::create(a.clone(), s0).unwrap();
    let f = FPTree::create(a.clone(), s1).unwrap();
    for i in 0..100u64 {
        v.insert(format!("key-{i:040}").as_bytes(), i).unwrap();
        f.insert(i, i).unwrap();
    }
    let blocks: Vec<PPtr> = v.blocks().into_iter().chain(f.blocks()).chain([tab]).collect();
    drop((v, f));
    for r in [FPTree::open(a.clone(), s0).map(|_| ()), FPTree::create(a.clone(), s0).map(|_| ())] {
        assert!(matches!(r, Err(Error::Incompatible { .. })), "{r:?}");
    }
    for r in
        [FPTreeVar::open(a.clone(), s1).map(|_| ()), FPTreeVar::create(a.clone(), s1).map(|_| ())]
    {
        assert!(matches!(r, Err(Error::Incompatible { .. })), "{r:?}");
    }
    // The byte-key root carries the flag in its header (docs/design/format.md).
    let s = a.pool();
    let r = s.resolve_range(s.load_pptr(s.resolve(s0).unwrap()).unwrap(), ROOT_SIZE).unwrap();
    assert_eq!(s.load_u64(r + 32, Ordering::Relaxed).unwrap(), INCOMPAT_BYTE_KEYS);
    let geo = s.load_u64(r + 16, Ordering::Relaxed).unwrap();
    assert_eq!((geo as u32, (geo >> 32) as u32), (VAR_LEAF_SIZE as u32, 8));
    let v = FPTreeVar::open(a.clone(), s0).unwrap();
    let f = FPTree::open(a.clone(), s1).unwrap();
    assert_eq!((v.len(), f.len()), (100, 100));
    v.check().unwrap();
    f.check().unwrap();
    assert_allocated(&a, blocks, "allocated blocks differ from both trees' blocks and the table");
}

#[test]
fn damaged_slots_are_typed_errors() {
    type Damage = (&'static str, fn(&PoolSet, u64));
    let damages: [Damage; 6] = [
        ("first word neither null, pointer nor inline", |s, h| {
            s.store_u64(h + var_slot_offset(0), 0xC0 << 56, Ordering::Relaxed).unwrap()
        }),
        ("inline padding", |s, h| {
            s.store_u64(h + var_slot_offset(1) + 24, 1 << 63, Ordering::Relaxed).unwrap()
        }),
        ("pointer length too long", |s, h| {
            s.store_u64(h + var_slot_offset(3) + 24, 5000, Ordering::Relaxed).unwrap()
        }),
        ("pointer length inline", |s, h| {
            s.store_u64(h + var_slot_offset(3) + 24, 5, Ordering::Relaxed).unwrap()
        }),
        ("pointer outside the pool", |s, h| {
            s.store_u64(h + var_slot_offset(3) + 8, u64::MAX - 63, Ordering::Relaxed).unwrap()
        }),
        ("pointer to an unknown segment in an invalid slot", |s, h| {
            s.store_u64(h + var_slot_offset(20), 4242, Ordering::Relaxed).unwrap();
            s.store_u64(h + var_slot_offset(20) + 8, 64, Ordering::Relaxed).unwrap();
        }),
    ];
    for (what, damage) in damages {
        let dir = TestDir::new("fptree-var-damage");
        let t = new_tree(&dir);
        // Slots 0..2 inline, 3 a key block; the rest free.
        for k in [&b"a"[..], b"bb", b"ccc", &[b'd'; 90]] {
            t.insert(k, 1).unwrap();
        }
        let set = t.allocator().pool().clone();
        let h = var_head_leaf(&t);
        drop(t);
        damage(&set, h);
        set.persist(h, VAR_LEAF_SIZE).unwrap();
        drop(set);
        let a = open_alloc(&dir, &opts());
        let slot = a.root_location();
        match FPTreeVar::open(a.clone(), slot) {
            Err(Error::Corrupted { .. }) => {}
            other => panic!("{what}: expected Corrupted, got {other:?}"),
        }
    }
}

// ----- the stored byte-key fixture -----

/// The fixture: the non-zero 64-byte lines of every segment file of a small pool set holding
/// one byte-key tree, as text (`file <name> <length>` then `<offset hex> <128 hex digits>`).
fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fptree-v1-bytekeys/pool-set.hex")
}

const FIXTURE_SEG: u64 = 5 * 64 * 1024 + 4096;

fn fixture_opts() -> Options {
    Options::default().layout("fptree-fixture").segment_size(FIXTURE_SEG)
}

/// The fixture's keys: key 0 is the empty key; key `i` > 0 is `i` in three decimal digits,
/// padded with the letter `b'a' + i % 26` to `3 + (i × 13) % 70` bytes (3 to 72: both inline
/// and key-block keys, all distinct).
fn fixture_key(i: u64) -> Vec<u8> {
    if i == 0 {
        return Vec::new();
    }
    let mut k = format!("{i:03}").into_bytes();
    k.resize(3 + ((i * 13) % 70) as usize, b'a' + (i % 26) as u8);
    k
}

/// The content: every key inserted in a scrambled order, then every key with `i % 5 == 0`
/// deleted and every key with `i % 3 == 0` updated to `i × 11`.
fn fixture_model() -> Model {
    common::fptree::var_fixture_model(120, fixture_key)
}

/// Regenerates the fixture (run by hand, only for a new format version:
/// `cargo test -p ferrite --test fptree_var -- --ignored generate_fptree_bytekeys_fixture`).
/// A committed fixture never changes: it is what later readers are tested against.
#[test]
#[ignore = "writes the stored fixture; run by hand for a new format version"]
fn generate_fptree_bytekeys_fixture() {
    let dir = TestDir::new("fptree-var-fixture-gen");
    let t = {
        let a = create_alloc(&dir, &fixture_opts());
        let slot = a.root_location();
        let t = FPTreeVar::create(a, slot).unwrap();
        common::fptree::fill_var_fixture(&t, 120, fixture_key);
        assert_same(&t, &fixture_model());
        t
    };
    close_tree(t);
    write_fixture(
        &dir.join("set"),
        "# FPTree root v1 + INCOMPAT_BYTE_KEYS fixture: a pool set (PAllocator anchor, one byte-key tree in the anchor's root).\n# Generated by `generate_fptree_bytekeys_fixture` in crates/ferrite/tests/fptree_var.rs; never edit.\n",
        &fixture_path(),
    );
}

/// Rebuilds the fixture's segment files in `dir`.
fn unpack_fixture(dir: &Path) {
    common::fptree::unpack_fixture(&fixture_path(), dir);
}

#[test]
fn the_bytekeys_fixture_opens_with_its_content() {
    let dir = TestDir::new("fptree-var-fixture");
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
    assert_eq!((geo as u32, (geo >> 32) as u32), (VAR_LEAF_SIZE as u32, 8));
    assert_eq!(s.load_u64(r + 32, Ordering::Relaxed).unwrap(), INCOMPAT_BYTE_KEYS);
    assert!(matches!(FPTree::open(a.clone(), slot), Err(Error::Incompatible { .. })));
    let t = FPTreeVar::open(a, slot).unwrap();
    let model = fixture_model();
    assert_same(&t, &model);
    assert!(t.leaves() > 2, "{} leaves", t.leaves());
    assert!(model.keys().any(|k| k.len() <= INLINE_MAX) && model.keys().any(|k| k.len() > 24));
}
