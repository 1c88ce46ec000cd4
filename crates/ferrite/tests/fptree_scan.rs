//! Range scans of the FPTree (`FPTree::scan`, `FPTreeVar::scan`) in both directions with a
//! limit, against `BTreeMap::range` (and `.rev()`) as the model: random bounds (included,
//! excluded, unbounded), empty and inverted ranges, limits 0, 1, small and unlimited, every key
//! as a bound (so every leaf boundary is a scan start and end), byte keys of mixed lengths
//! (inline and in key blocks, many sharing prefixes), early stops by the callback, and reopen.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::ControlFlow;
use std::sync::Arc;

use ferrite::alloc::PAllocator;
use ferrite::fptree::{Direction, FPTree, FPTreeVar, TreeOptions};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, SplitMix64};

mod common;
use common::fptree::{create_alloc, open_alloc, seed};

fn opts() -> Options {
    Options::default().layout("fptree-scan-test").segment_size(1 << 20)
}

fn alloc(dir: &TestDir, create: bool) -> Arc<PAllocator> {
    if create { create_alloc(dir, &opts()) } else { open_alloc(dir, &opts()) }
}

fn fixed_tree(dir: &TestDir) -> FPTree {
    fixed_tree_with(dir, TreeOptions::default())
}

fn fixed_tree_with(dir: &TestDir, o: TreeOptions) -> FPTree {
    let a = alloc(dir, true);
    let slot = a.root_location();
    FPTree::create_with(a, slot, o).unwrap()
}

fn var_tree(dir: &TestDir) -> FPTreeVar {
    var_tree_with(dir, TreeOptions::default())
}

fn var_tree_with(dir: &TestDir, o: TreeOptions) -> FPTreeVar {
    let a = alloc(dir, true);
    let slot = a.root_location();
    FPTreeVar::create_with(a, slot, o).unwrap()
}

/// What the model says a scan returns.
fn model_scan<K: Ord + Clone + std::borrow::Borrow<Q>, Q: ?Sized + Ord>(
    m: &BTreeMap<K, u64>,
    b: (Bound<&Q>, Bound<&Q>),
    dir: Direction,
    limit: usize,
) -> Vec<(K, u64)> {
    // `BTreeMap::range` panics on an inverted or empty-excluded range: those hold nothing.
    let empty = match b {
        (Included(l), Included(h)) => l > h,
        (Included(l) | Excluded(l), Included(h) | Excluded(h)) => l >= h,
        _ => false,
    };
    if empty {
        return Vec::new();
    }
    let r = m.range::<Q, _>(b).map(|(k, v)| (k.clone(), *v));
    match dir {
        Direction::Forward => r.take(limit).collect(),
        Direction::Backward => r.rev().take(limit).collect(),
    }
}

fn fixed_scan(
    t: &FPTree,
    b: (Bound<u64>, Bound<u64>),
    dir: Direction,
    limit: usize,
) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let n = t
        .scan(b, dir, limit, |k, v| {
            out.push((k, v));
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(n, out.len());
    out
}

fn var_scan(
    t: &FPTreeVar,
    b: (Bound<&[u8]>, Bound<&[u8]>),
    dir: Direction,
    limit: usize,
) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    let n = t
        .scan(b, dir, limit, |k, v| {
            out.push((k.to_vec(), v));
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(n, out.len());
    out
}

fn bound_of<T>(r: &mut SplitMix64, x: T) -> Bound<T> {
    match r.next_u64() % 5 {
        0 => Unbounded,
        1 | 2 => Included(x),
        _ => Excluded(x),
    }
}

fn limit_of(r: &mut SplitMix64) -> usize {
    match r.next_u64() % 6 {
        0 => 0,
        1 => 1,
        2 => usize::MAX,
        _ => (r.next_u64() % 70) as usize,
    }
}

fn dir_of(r: &mut SplitMix64) -> Direction {
    if r.next_u64().is_multiple_of(2) { Direction::Forward } else { Direction::Backward }
}

#[test]
fn fixed_key_scans_match_the_model_with_random_bounds_limits_and_reopen() {
    fixed_model(TreeOptions::default(), "fptree-scan-fixed");
}

/// The same scans on the fully persistent variant (leaves walked through the persistent
/// index's successor and predecessor; fan-out 4 for a deep index).
#[test]
fn fixed_key_scans_of_the_persistent_variant_match_the_model() {
    let o = TreeOptions { index_fanout: 4, ..TreeOptions::persistent() };
    fixed_model(o, "fptree-scan-fixed-pindex");
}

fn fixed_model(o: TreeOptions, name: &str) {
    let seed = seed();
    println!("seed {seed:#x}");
    let mut r = SplitMix64::new(seed);
    let dir = TestDir::new(name);
    let mut t = fixed_tree_with(&dir, o);
    let mut m = BTreeMap::new();
    for round in 0..6 {
        // Inserts and deletes in a small domain: splits, leaf removals, holes in leaves.
        for _ in 0..1500 {
            let k = r.next_u64() % 4000;
            if r.next_u64().is_multiple_of(4) {
                assert_eq!(t.delete(k).unwrap(), m.remove(&k).is_some());
            } else {
                let v = r.next_u64();
                assert_eq!(t.insert(k, v).unwrap(), !m.contains_key(&k));
                m.entry(k).or_insert(v);
            }
        }
        if round % 2 == 1 {
            drop(t);
            let a = alloc(&dir, false);
            let slot = a.root_location();
            t = FPTree::open(a, slot).unwrap();
        }
        for _ in 0..400 {
            let (x, y) = (r.next_u64() % 4100, r.next_u64() % 4100);
            let (x, y) = if r.next_u64().is_multiple_of(8) { (y, x) } else { (x.min(y), x.max(y)) };
            let b = (bound_of(&mut r, x), bound_of(&mut r, y));
            let (d, limit) = (dir_of(&mut r), limit_of(&mut r));
            let want = model_scan(&m, (b.0.as_ref(), b.1.as_ref()), d, limit);
            assert_eq!(fixed_scan(&t, b, d, limit), want, "{b:?} {d:?} {limit} (seed {seed:#x})");
        }
        let all = fixed_scan(&t, (Unbounded, Unbounded), Direction::Backward, usize::MAX);
        assert_eq!(all, m.iter().rev().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
    }
}

#[test]
fn every_key_is_a_scan_start_and_end_so_every_leaf_boundary_is_crossed() {
    edges(TreeOptions::default(), "fptree-scan-edges");
}

#[test]
fn every_leaf_boundary_of_the_persistent_variant_is_crossed() {
    let o = TreeOptions { index_fanout: 4, ..TreeOptions::persistent() };
    edges(o, "fptree-scan-edges-pindex");
}

fn edges(o: TreeOptions, name: &str) {
    let dir = TestDir::new(name);
    let t = fixed_tree_with(&dir, o);
    let mut m = BTreeMap::new();
    // Even keys 0..2000 in order: many leaves; every odd probe falls between two keys.
    for k in (0..2000u64).step_by(2) {
        t.insert(k, k * 3).unwrap();
        m.insert(k, k * 3);
    }
    assert!(t.leaves() > 20);
    for x in 0..2001u64 {
        for b in [
            (Included(x), Unbounded),
            (Excluded(x), Unbounded),
            (Unbounded, Included(x)),
            (Unbounded, Excluded(x)),
            (Included(x), Included(x)),
            (Excluded(x), Excluded(x + 3)),
        ] {
            for d in [Direction::Forward, Direction::Backward] {
                let want = model_scan(&m, (b.0.as_ref(), b.1.as_ref()), d, 3);
                assert_eq!(fixed_scan(&t, b, d, 3), want, "{b:?} {d:?}");
            }
        }
    }
    // Extremes of the key space.
    t.insert(u64::MAX, 1).unwrap();
    m.insert(u64::MAX, 1);
    for d in [Direction::Forward, Direction::Backward] {
        let b = (Included(u64::MAX), Included(u64::MAX));
        assert_eq!(fixed_scan(&t, b, d, 9), vec![(u64::MAX, 1)]);
        let b = (Excluded(u64::MAX), Unbounded);
        assert!(fixed_scan(&t, b, d, 9).is_empty());
        let b = (Unbounded, Excluded(0));
        assert!(fixed_scan(&t, b, d, 9).is_empty());
    }
    // The wrapper keeps its meaning: inclusive bounds, ascending.
    assert_eq!(t.range(10, 16, 10).unwrap(), vec![(10, 30), (12, 36), (14, 42), (16, 48)]);
    assert!(t.range(16, 10, 10).unwrap().is_empty());
}

#[test]
fn empty_trees_inverted_ranges_zero_limits_and_early_stops() {
    let dir = TestDir::new("fptree-scan-empty");
    let t = fixed_tree(&dir);
    let calls = |t: &FPTree, b: (Bound<u64>, Bound<u64>), d, limit| {
        t.scan(b, d, limit, |_, _| panic!("no key expected")).unwrap()
    };
    assert_eq!(calls(&t, (Unbounded, Unbounded), Direction::Forward, 5), 0);
    assert_eq!(calls(&t, (Unbounded, Unbounded), Direction::Backward, 5), 0);
    for k in 0..500u64 {
        t.insert(k, k).unwrap();
    }
    for d in [Direction::Forward, Direction::Backward] {
        assert_eq!(calls(&t, (Unbounded, Unbounded), d, 0), 0);
        assert_eq!(calls(&t, (Included(9), Included(8)), d, 5), 0);
        assert_eq!(calls(&t, (Included(9), Excluded(9)), d, 5), 0);
        assert_eq!(calls(&t, (Excluded(9), Included(9)), d, 5), 0);
        assert_eq!(calls(&t, (Excluded(9), Excluded(10)), d, 5), 0);
    }
    // The callback stops the scan: exactly the keys it accepted are counted.
    let mut seen = Vec::new();
    let n = t
        .scan(.., Direction::Backward, usize::MAX, |k, _| {
            seen.push(k);
            if seen.len() == 40 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .unwrap();
    assert_eq!(n, 40);
    assert_eq!(seen, (460..500).rev().collect::<Vec<_>>());
}

/// Keys of 0 to 40 bytes over a three-letter alphabet (shared prefixes, keys that are prefixes
/// of others, inline ≤ 23 bytes and key blocks above), and a few long ones up to 300 bytes.
fn var_key(r: &mut SplitMix64) -> Vec<u8> {
    let len = match r.next_u64() % 10 {
        0 => 24 + (r.next_u64() % 280) as usize,
        1..=3 => (r.next_u64() % 41) as usize,
        _ => (r.next_u64() % 6) as usize,
    };
    (0..len).map(|_| b"abc"[(r.next_u64() % 3) as usize]).collect()
}

#[test]
fn byte_key_scans_match_the_model_with_mixed_lengths_and_reopen() {
    var_model(TreeOptions::default(), "fptree-scan-var");
}

/// The same byte-key scans on the fully persistent variant (leaves walked through the index's
/// successor and predecessor over byte separators; fan-out 4 for a deep index).
#[test]
fn byte_key_scans_of_the_persistent_variant_match_the_model() {
    var_model(TreeOptions { index_fanout: 4, ..TreeOptions::persistent() }, "fptree-scan-pvar");
}

fn var_model(o: TreeOptions, name: &str) {
    let seed = seed();
    println!("seed {seed:#x}");
    let mut r = SplitMix64::new(seed);
    let dir = TestDir::new(name);
    let mut t = var_tree_with(&dir, o);
    let mut m: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for round in 0..4 {
        for _ in 0..1200 {
            let k = var_key(&mut r);
            if r.next_u64().is_multiple_of(4) {
                assert_eq!(t.delete(&k).unwrap(), m.remove(&k).is_some());
            } else {
                let v = r.next_u64();
                assert_eq!(t.insert(&k, v).unwrap(), !m.contains_key(&k));
                m.entry(k).or_insert(v);
            }
        }
        if round % 2 == 1 {
            drop(t);
            let a = alloc(&dir, false);
            let slot = a.root_location();
            t = FPTreeVar::open(a, slot).unwrap();
        }
        for _ in 0..300 {
            // Bounds: existing keys (leaf boundaries included) or fresh byte strings.
            let pick = |r: &mut SplitMix64| -> Vec<u8> {
                if r.next_u64().is_multiple_of(2) && !m.is_empty() {
                    let i = (r.next_u64() % m.len() as u64) as usize;
                    m.keys().nth(i).unwrap().clone()
                } else {
                    var_key(r)
                }
            };
            let (x, y) = (pick(&mut r), pick(&mut r));
            let (x, y) = if r.next_u64().is_multiple_of(8) {
                (y, x)
            } else if x <= y {
                (x, y)
            } else {
                (y, x)
            };
            let b = (bound_of(&mut r, &x[..]), bound_of(&mut r, &y[..]));
            let (d, limit) = (dir_of(&mut r), limit_of(&mut r));
            let want = model_scan::<Vec<u8>, [u8]>(&m, b, d, limit);
            assert_eq!(var_scan(&t, b, d, limit), want, "{b:?} {d:?} {limit} (seed {seed:#x})");
        }
        let all = var_scan(&t, (Unbounded, Unbounded), Direction::Forward, usize::MAX);
        assert_eq!(all, m.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>());
        let lo: &[u8] = b"b";
        let got = t.range(lo, b"bz", usize::MAX).unwrap();
        let want: Vec<(Box<[u8]>, u64)> = m
            .range::<[u8], _>((Included(lo), Included(&b"bz"[..])))
            .map(|(k, v)| (k[..].into(), *v))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn reopen_finds_leaf_ranges_of_keys_whose_prefixes_tie() {
    // Regression guard for the open walk's key ranges, which compare byte keys by their inline
    // bytes and 6-byte block prefixes and read key blocks only on a tie: here most keys share
    // their first 6+ bytes, some inline keys are prefixes of long ones, so ties are the rule.
    // A wrong order would give a leaf a wrong bound, which `check` (T5) and the scans catch.
    let seed = seed();
    println!("seed {seed:#x}");
    let mut r = SplitMix64::new(seed);
    let dir = TestDir::new("fptree-scan-ties");
    let t = var_tree(&dir);
    let mut m: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for i in 0..3000u64 {
        let mut k = b"stem-stem-".to_vec();
        let len = match r.next_u64() % 3 {
            0 => (r.next_u64() % 24) as usize,
            _ => 24 + (r.next_u64() % 40) as usize,
        };
        k.truncate(len.min(k.len()));
        while k.len() < len {
            k.push(b"xy"[(r.next_u64() % 2) as usize]);
        }
        if t.insert(&k, i).unwrap() {
            m.insert(k, i);
        }
    }
    drop(t);
    let a = alloc(&dir, false);
    let slot = a.root_location();
    let t = FPTreeVar::open(a, slot).unwrap();
    let report = t.check().unwrap();
    assert_eq!(report.keys, m.len() as u64);
    assert!(report.leaves > 10, "{report:?}");
    for d in [Direction::Forward, Direction::Backward] {
        let want = model_scan::<Vec<u8>, [u8]>(&m, (Unbounded, Unbounded), d, usize::MAX);
        assert_eq!(var_scan(&t, (Unbounded, Unbounded), d, usize::MAX), want, "seed {seed:#x}");
    }
    for (k, v) in &m {
        assert_eq!(t.get(k).unwrap(), Some(*v));
    }
}
