//! The persistent inner index with byte bounds (`PersistentIndexVar`) against a `BTreeMap`
//! model: random inserts, removes, lookups and neighbour queries with reopens, at fan-out 4
//! (deep trees) and 32, over keys of every form (empty, inline up to 23 bytes, key blocks up to
//! 4 096 bytes, long shared prefixes so that truncated separators still go out of line); the
//! leak check against the allocator (nodes and separator key blocks) at every reopen; the
//! head re-key; the prepare/insert reservation; damaged separator blocks as typed errors.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use ferrite::fptree::persistent::{
    N_BITMAP, N_KEYS, PVNODE_SIZE, PVNODE_TAG, PersistentIndex, PersistentIndexVar,
};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, SplitMix64};
use ferrite::storage::StorageError as Error;

mod common;
use common::fptree::{
    assert_pindex_no_leak, create_alloc, create_pindex, open_alloc, reopen_pindex, seed,
};

const SEG: u64 = 4 << 20;

fn opts() -> Options {
    Options::default().layout("pindex-var-test").segment_size(SEG)
}

fn new_index(dir: &TestDir, fanout: u32) -> PersistentIndexVar {
    create_pindex(dir, &opts(), fanout)
}

fn reopen(dir: &TestDir, ix: PersistentIndexVar) -> PersistentIndexVar {
    reopen_pindex(dir, &opts(), ix)
}

fn leaf(v: u64) -> PPtr {
    PPtr::new(3, 64 * (v + 1))
}

/// Key `i` of a key space of every form: short inline keys, 23/24-byte edges, long keys that
/// share a 300-byte stem (their separators are long too), and a few 4 096-byte keys.
fn key(i: u64) -> Vec<u8> {
    let tail: [u8; 8] = std::array::from_fn(|j| (i >> (56 - 8 * j)) as u8);
    match i % 6 {
        0 => tail[4..].to_vec(),
        1 => {
            let mut k = vec![b'm'; 15];
            k.extend_from_slice(&tail);
            k
        }
        2 => {
            let mut k = vec![b'n'; 16];
            k.extend_from_slice(&tail);
            k
        }
        3 | 4 => {
            let mut k = vec![b'p'; 300];
            k.extend_from_slice(&tail);
            k.extend_from_slice(&[i as u8; 20]);
            k
        }
        _ => {
            let mut k = vec![b'z'; 4088];
            k.extend_from_slice(&tail);
            k
        }
    }
}

fn assert_no_leak(ix: &PersistentIndexVar) {
    assert_pindex_no_leak(ix);
}

fn assert_same(ix: &PersistentIndexVar, model: &BTreeMap<Vec<u8>, PPtr>) {
    let want: Vec<(Box<[u8]>, PPtr)> =
        model.iter().map(|(k, v)| (k.clone().into_boxed_slice(), *v)).collect();
    assert_eq!(ix.entries_in_order().unwrap(), want);
    assert_eq!(ix.len().unwrap(), model.len() as u64);
    let r = ix.check().unwrap();
    assert_eq!(r.entries, model.len() as u64);
    assert_no_leak(ix);
}

type Hit = Option<(Box<[u8]>, PPtr)>;

fn boxed(h: Option<(&Vec<u8>, &PPtr)>) -> Hit {
    h.map(|(k, l)| (k.clone().into_boxed_slice(), *l))
}

fn step(ix: &mut PersistentIndexVar, model: &mut BTreeMap<Vec<u8>, PPtr>, op: u8, i: u64, v: u64) {
    let k = key(i);
    let ctx = format!("op {op} key {i} ({} bytes)", k.len());
    match op % 7 {
        0 | 1 => {
            let l = leaf(v);
            if let Some(&old) = model.get(&k) {
                assert!(!ix.insert(&k, old).unwrap(), "{ctx}");
                if old != l {
                    assert!(matches!(ix.insert(&k, l), Err(Error::InvalidArgument(_))), "{ctx}");
                }
            } else {
                // Half of the inserts go through the tree's prepare-then-insert path.
                if v.is_multiple_of(2) {
                    ix.prepare_insert(&k).unwrap();
                }
                assert!(ix.insert(&k, l).unwrap(), "{ctx}");
                model.insert(k, l);
            }
        }
        2 => assert_eq!(ix.remove(&k).unwrap(), model.remove(&k).is_some(), "{ctx}"),
        3 => {
            let want = boxed(model.range(..=k.clone()).next_back());
            assert_eq!(ix.lookup_with_bound(&k).unwrap(), want, "{ctx}");
            // The neighbours a scan step takes from the routed bottom node are the model's.
            let near = ix.lookup_near(&k, true, true).unwrap();
            assert_eq!(near.as_ref().map(|n| (n.bound.clone(), n.leaf)), want, "{ctx}");
            if let Some(n) = near {
                let b = n.bound.to_vec();
                if let Some(next) = n.next {
                    let after = (std::ops::Bound::Excluded(&b), std::ops::Bound::Unbounded);
                    assert_eq!(boxed(model.range::<Vec<u8>, _>(after).next()), Some(next), "{ctx}");
                }
                if let Some(prev) = n.prev {
                    assert_eq!(
                        boxed(model.range::<Vec<u8>, _>(..&b).next_back()),
                        Some(prev),
                        "{ctx}"
                    );
                }
            }
            // A key just above it (an extension) routes to the same bound or a greater one.
            let mut up = k.clone();
            up.push(0);
            let want = boxed(model.range(..=up.clone()).next_back());
            assert_eq!(ix.lookup_with_bound(&up).unwrap(), want, "{ctx}");
        }
        4 => {
            let want = boxed(
                model
                    .range::<Vec<u8>, _>((
                        std::ops::Bound::Excluded(&k),
                        std::ops::Bound::Unbounded,
                    ))
                    .next(),
            );
            assert_eq!(ix.successor(&k).unwrap(), want, "{ctx}");
        }
        5 => {
            let want = boxed(model.range::<Vec<u8>, _>(..&k).next_back());
            assert_eq!(ix.predecessor(&k).unwrap(), want, "{ctx}");
        }
        _ => {
            // A prepared insert that is never made: the next modification gives the
            // reservation back (the tree's failed split), nothing leaks.
            if !model.contains_key(&k) {
                ix.prepare_insert(&k).unwrap();
            }
        }
    }
}

fn random_run(seed: u64, fanout: u32, ops: usize, keys: u64, reopen_every: usize) {
    println!("seed {seed:#x} fan-out {fanout}");
    let dir = TestDir::new("pindex-var-model");
    let mut ix = new_index(&dir, fanout);
    let mut model = BTreeMap::new();
    let mut rng = SplitMix64::new(seed);
    let mut max_height = 0;
    let mut max_blocks = 0;
    for i in 0..ops {
        let grow = (i / 500) % 2 == 0;
        let op = match rng.next_u64() % 12 {
            0..=3 if grow => 0,
            0..=1 => 0,
            4..=5 if !grow => 2,
            4 => 2,
            11 => 6,
            x => (x % 4 + 2) as u8,
        };
        step(&mut ix, &mut model, op, rng.next_u64() % keys, rng.next_u64() % 1000);
        if (i + 1) % reopen_every == 0 {
            let r = ix.check().unwrap();
            max_height = max_height.max(r.height);
            max_blocks = max_blocks.max(r.key_blocks);
            ix.release_reserved().unwrap(); // a pending reservation is the index's, but unchecked
            assert_same(&ix, &model);
            ix = reopen(&dir, ix);
            assert_same(&ix, &model);
        }
    }
    let all: Vec<Vec<u8>> = model.keys().cloned().collect();
    for k in all {
        assert!(ix.remove(&k).unwrap(), "seed {seed:#x}");
    }
    model.clear();
    assert_same(&ix, &model);
    assert_eq!(ix.check().unwrap().height, 1);
    println!("max height {max_height}, most separator key blocks {max_blocks}");
    assert!(max_blocks > 0, "no separator went out of line");
    if fanout == 4 {
        assert!(max_height >= 4, "the run never built a deep tree (height {max_height})");
    }
}

#[test]
fn random_operations_match_the_model_at_fanout_4() {
    random_run(seed(), 4, 3000, 400, 400);
}

#[test]
fn random_operations_match_the_model_at_fanout_32() {
    random_run(seed() ^ 0x32, 32, 3000, 1500, 1000);
}

#[test]
fn ascending_and_descending_fills_scan_both_ways() {
    let dir = TestDir::new("pindex-var-scan");
    let mut ix = new_index(&dir, 4);
    let mut want: Vec<Vec<u8>> = (0..240u64).map(key).collect();
    for k in &want {
        assert!(ix.insert(k, leaf(k.len() as u64)).unwrap());
    }
    ix = reopen(&dir, ix);
    want.sort();
    let mut up = Vec::new();
    let mut at = ix.first().unwrap();
    while let Some((b, _)) = at {
        at = ix.successor(&b).unwrap();
        up.push(b.into_vec());
    }
    assert_eq!(up, want);
    let mut down = Vec::new();
    let mut at = ix.last().unwrap();
    while let Some((b, _)) = at {
        at = ix.predecessor(&b).unwrap();
        down.push(b.into_vec());
    }
    want.reverse();
    assert_eq!(down, want);
    assert!(ix.check().unwrap().key_blocks > 0);
    assert_no_leak(&ix);
}

/// The tree's head re-key: after the head's entry (the empty bound) goes, the new first entry
/// — a long bound in a key block — is re-keyed to the empty key; its block is freed with it.
#[test]
fn the_first_entry_is_rekeyed_to_the_empty_key_and_its_block_freed() {
    let dir = TestDir::new("pindex-var-rekey");
    let mut ix = new_index(&dir, 4);
    ix.insert(b"", leaf(0)).unwrap();
    let long = vec![b'q'; 500];
    ix.insert(&long, leaf(1)).unwrap();
    for i in 0..40u64 {
        ix.insert(&key(i * 6 + 3), leaf(i + 2)).unwrap(); // long 'p' keys, below the 'q' key
    }
    let before = ix.check().unwrap().key_blocks;
    ix.remove(b"").unwrap();
    let first = ix.first().unwrap().unwrap();
    assert!(first.0.len() > 23, "the new first bound is a key block");
    assert!(ix.lower_first(b"").unwrap());
    assert!(!ix.lower_first(b"").unwrap(), "a second re-key is a no-op");
    assert_eq!(ix.first().unwrap().unwrap(), (Box::default(), first.1));
    assert_eq!(ix.check().unwrap().key_blocks, before - 1);
    assert_no_leak(&ix);
    let ix = reopen(&dir, ix);
    assert_eq!(ix.lookup(b"a").unwrap(), Some(first.1));
    assert_no_leak(&ix);
}

#[test]
fn a_u64_index_and_a_byte_index_refuse_each_other() {
    let dir = TestDir::new("pindex-var-kind");
    let ix = new_index(&dir, 4);
    drop(ix);
    let a = open_alloc(&dir, &opts());
    let slot = a.root_location();
    assert!(matches!(PersistentIndex::open(a, slot), Err(Error::Incompatible { .. })));
    let dir = TestDir::new("pindex-var-kind2");
    let a = create_alloc(&dir, &opts());
    let slot = a.root_location();
    drop(PersistentIndex::create_with_fanout(a, slot, 4).unwrap());
    let a = open_alloc(&dir, &opts());
    let slot = a.root_location();
    assert!(matches!(PersistentIndexVar::open(a, slot), Err(Error::Incompatible { .. })));
}

/// Damaged separators: a key block pointer into nowhere, a key slot whose first word has no
/// valid form, a length out of range, a key block whose bytes disagree with the slot's prefix
/// — every read is `Corrupted`, never a panic.
#[test]
fn damaged_separator_blocks_are_corrupted_not_panics() {
    for case in 0..4 {
        let dir = TestDir::new("pindex-var-damage");
        let mut ix = new_index(&dir, 4);
        for i in 0..60u64 {
            ix.insert(&key(i * 6 + 3), leaf(i)).unwrap();
        }
        let blocks = ix.blocks().unwrap();
        let set = ix.allocator().pool().clone();
        // The first node with a valid pointer-form slot.
        let (g, s) = blocks[1..]
            .iter()
            .filter_map(|p| {
                let g = set.resolve(*p).ok()?;
                (set.load_u64(g, Ordering::Relaxed).ok()? == PVNODE_TAG).then_some(g)
            })
            .find_map(|g| {
                let bm = set.load_u64(g + N_BITMAP, Ordering::Relaxed).unwrap();
                (0..32u64)
                    .find(|&s| {
                        bm & (1 << s) != 0
                            && set.load_u64(g + N_KEYS + s * 32, Ordering::Relaxed).unwrap() >> 63
                                == 0
                    })
                    .map(|s| (g, s))
            })
            .expect("a node with a key block");
        let at = g + N_KEYS + s * 32;
        match case {
            0 => set.store_u64(at + 8, 1 << 40, Ordering::Relaxed).unwrap(),
            1 => set.store_u64(at, 0xC0 << 56, Ordering::Relaxed).unwrap(),
            2 => set.store_u64(at + 24, 9000, Ordering::Relaxed).unwrap(),
            _ => {
                let b = set.load_pptr(at).unwrap();
                set.store_u64(set.resolve(b).unwrap(), 0, Ordering::Relaxed).unwrap();
            }
        }
        drop(set);
        let ix = reopen(&dir, ix);
        let results = [
            ix.check().map(drop),
            ix.entries_in_order().map(drop),
            ix.blocks().map(drop),
            (0..60u64).try_for_each(|i| ix.lookup(&key(i * 6 + 3)).map(drop)),
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
fn node_geometry_is_as_drawn() {
    assert_eq!(PVNODE_SIZE, 1600);
    let dir = TestDir::new("pindex-var-geom");
    let ix = new_index(&dir, 4);
    assert_eq!(ix.blocks().unwrap().len(), 2);
    assert_no_leak(&ix);
}
