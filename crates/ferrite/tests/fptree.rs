//! FPTree (single-threaded, fixed keys) against a `BTreeMap` model, with reopen (recovery and
//! inner-node rebuild), exact flush/fence counts, edge cases and bad roots.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use ferrite::fptree::{FPTree, LEAF_SIZE, ROOT_SIZE, Slab};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, Pool, SplitMix64};
use ferrite::storage::StorageError as Error;
use proptest::prelude::*;

const ROOT: u64 = 64;
const SLAB: u64 = 4096;

fn pool(size: u64) -> Pool {
    Pool::create_volatile(size, &Options::default()).unwrap()
}

fn new_tree(p: &Pool) -> FPTree<'_, Slab> {
    let slab = Slab::create(p, SLAB, p.size() - SLAB, 640).unwrap();
    FPTree::create(p, ROOT, slab).unwrap()
}

fn reopen(p: &Pool) -> FPTree<'_, Slab> {
    let slab = Slab::open(p, SLAB).unwrap();
    FPTree::open(p, ROOT, slab).unwrap()
}

fn seed() -> u64 {
    let s = std::env::var("FERRITE_TEST_SEED")
        .ok()
        .and_then(|v| match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        })
        .unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    eprintln!("FERRITE_TEST_SEED={s:#x}");
    s
}

fn assert_same(t: &FPTree<'_, Slab>, model: &BTreeMap<u64, u64>) {
    let all = t.range(0, u64::MAX, usize::MAX).unwrap();
    let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, want);
    assert_eq!(t.len(), model.len() as u64);
    let c = t.check().unwrap();
    assert_eq!(c.keys, model.len() as u64);
}

#[test]
fn random_operations_with_reopen_match_a_btreemap() {
    let seed = seed();
    let mut rng = SplitMix64::new(seed);
    let p = pool(4 << 20);
    let mut t = new_tree(&p);
    let mut model = BTreeMap::new();
    for step in 0..20_000u64 {
        let key = rng.next_u64() % 3_000;
        match rng.next_u64() % 10 {
            0..=4 => {
                let fresh = !model.contains_key(&key);
                assert_eq!(t.insert(key, step).unwrap(), fresh);
                model.entry(key).or_insert(step);
            }
            5 | 6 => {
                let had = model.contains_key(&key);
                assert_eq!(t.update(key, step).unwrap(), had);
                if had {
                    model.insert(key, step);
                }
            }
            7 | 8 => assert_eq!(t.delete(key).unwrap(), model.remove(&key).is_some()),
            _ => {
                assert_eq!(t.get(key).unwrap(), model.get(&key).copied());
                let hi = key + rng.next_u64() % 200;
                let lim = 1 + (rng.next_u64() % 50) as usize;
                let want: Vec<(u64, u64)> =
                    model.range(key..=hi).take(lim).map(|(k, v)| (*k, *v)).collect();
                assert_eq!(t.range(key, hi, lim).unwrap(), want);
            }
        }
        if step % 2_500 == 0 {
            assert_same(&t, &model);
            drop(t);
            t = reopen(&p);
            assert_eq!(t.leaked_freed(), 0);
            assert_same(&t, &model);
        }
    }
    assert_same(&t, &model);
}

#[test]
fn insert_does_not_overwrite() {
    let p = pool(1 << 20);
    let mut t = new_tree(&p);
    assert!(t.insert(5, 50).unwrap());
    assert!(!t.insert(5, 51).unwrap());
    assert_eq!(t.get(5).unwrap(), Some(50));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Short random sequences over a tiny key space (many splits and leaf deletions per key),
    /// each ending with a reopen.
    #[test]
    fn sequences_match_the_model(ops in proptest::collection::vec((0u8..4, 0u64..300), 1..400)) {
        let p = pool(1 << 20);
        let mut t = new_tree(&p);
        let mut model = BTreeMap::new();
        for (i, (op, key)) in ops.into_iter().enumerate() {
            let v = i as u64 + 1;
            match op {
                0 | 1 => {
                    let fresh = !model.contains_key(&key);
                    prop_assert_eq!(t.insert(key, v).unwrap(), fresh);
                    model.entry(key).or_insert(v);
                }
                2 => {
                    let had = model.contains_key(&key);
                    prop_assert_eq!(t.update(key, v).unwrap(), had);
                    if had { model.insert(key, v); }
                }
                _ => prop_assert_eq!(t.delete(key).unwrap(), model.remove(&key).is_some()),
            }
        }
        t.check().unwrap();
        drop(t);
        let t = reopen(&p);
        let all = t.range(0, u64::MAX, usize::MAX).unwrap();
        let want: Vec<(u64, u64)> = model.into_iter().collect();
        prop_assert_eq!(all, want);
        t.check().unwrap();
    }
}

#[test]
fn exact_flush_and_fence_counts() {
    let p = pool(1 << 20);
    let mut t = new_tree(&p);
    for k in 0..10 {
        t.insert(k * 10, k).unwrap();
    }
    let d = |f: &mut dyn FnMut()| {
        let c = Counters::snapshot();
        f();
        Counters::snapshot() - c
    };
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
    let p = pool(1 << 20);
    let mut t = new_tree(&p);
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
        drop(t);
        t = reopen(&p);
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
fn reopen_of_a_mapped_pool_after_close() {
    let dir = TestDir::new("fptree-reopen");
    let path = dir.join("p");
    let mut model = BTreeMap::new();
    {
        let p = Pool::create(&path, 2 << 20, &Options::default().layout("fptree-test")).unwrap();
        let mut t = new_tree(&p);
        for k in 0..1000u64 {
            let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            t.insert(key, k).unwrap();
            model.insert(key, k);
        }
        drop(t);
        p.close().unwrap();
    }
    let p = Pool::open(&path, &Options::default().layout("fptree-test")).unwrap();
    let t = reopen(&p);
    assert_same(&t, &model);
}

#[test]
fn bad_roots_and_arguments_are_typed_errors() {
    let p = pool(1 << 20);
    let t = new_tree(&p);
    drop(t);
    // A second create at the same root is refused.
    let slab = Slab::open(&p, SLAB).unwrap();
    assert!(matches!(FPTree::create(&p, ROOT, slab), Err(Error::InvalidArgument(_))));
    // A damaged root checksum is corruption, not a panic.
    p.store_u64(ROOT + 16, 99, Ordering::Relaxed).unwrap(); // leaf size and value size
    let slab = Slab::open(&p, SLAB).unwrap();
    assert!(matches!(
        FPTree::open(&p, ROOT, slab),
        Err(Error::Corrupted { .. } | Error::Incompatible { .. })
    ));
    // Garbage where a root should be.
    p.store_u64(ROOT, 0x1234, Ordering::Relaxed).unwrap();
    let slab = Slab::open(&p, SLAB).unwrap();
    assert!(matches!(FPTree::open(&p, ROOT, slab), Err(Error::Corrupted { .. })));
    // Misaligned root, too-small blocks, damaged slab.
    let q = pool(1 << 20);
    let slab = Slab::create(&q, SLAB, 1 << 19, 640).unwrap();
    assert!(matches!(FPTree::open(&q, ROOT + 8, slab), Err(Error::InvalidArgument(_))));
    let slab = Slab::create(&q, SLAB, 1 << 19, 64).unwrap();
    assert!(matches!(FPTree::open(&q, ROOT, slab), Err(Error::InvalidArgument(_))));
    assert!(matches!(Slab::create(&q, 100, 1 << 19, 640), Err(Error::InvalidArgument(_))));
    q.store_u64(SLAB + 8, 7, Ordering::Relaxed).unwrap();
    assert!(matches!(
        Slab::open(&q, SLAB),
        Err(Error::Corrupted { .. } | Error::Incompatible { .. })
    ));
    // A leaf cycle is reported, not looped on.
    let r = pool(1 << 20);
    let mut t = new_tree(&r);
    for k in 0..100 {
        t.insert(k, k).unwrap();
    }
    drop(t);
    let head = r.load_u64(ROOT + 48, Ordering::Relaxed).unwrap();
    r.store_u64(head + 48, head, Ordering::Relaxed).unwrap(); // head.next = head
    let slab = Slab::open(&r, SLAB).unwrap();
    assert!(matches!(FPTree::open(&r, ROOT, slab), Err(Error::Corrupted { .. })));
    const { assert!(ROOT_SIZE <= SLAB - ROOT && LEAF_SIZE <= 640) };
}

#[test]
fn a_full_slab_is_pool_full_and_changes_nothing() {
    let p = pool(64 * 1024);
    let slab = Slab::create(&p, SLAB, 16 * 1024, 640).unwrap();
    let mut t = FPTree::create(&p, ROOT, slab).unwrap();
    let mut model = BTreeMap::new();
    let mut k = 0u64;
    loop {
        match t.insert(k, k) {
            Ok(true) => {
                model.insert(k, k);
                k += 1;
            }
            Err(Error::PoolFull { .. }) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(k > 100);
    // The failed split changed nothing and retired its log: the tree stays usable.
    t.check().unwrap();
    assert_same(&t, &model);
    for d in 0..40 {
        assert!(t.delete(d).unwrap());
        model.remove(&d);
    }
    assert!(t.insert(k, k).unwrap());
    model.insert(k, k);
    assert_same(&t, &model);
    drop(t);
    let t = reopen(&p);
    assert_same(&t, &model);
}
