//! PAllocator's big allocator (blocks of whole 4 KiB units above the largest small class, up
//! to `big_capacity()`): a model-based random test over every size range with reopens,
//! hand-built cases for coalescing and the choice of bucket, exact persist counts, bad input
//! and corrupt unit tables.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{MAX_SMALL, PAllocator};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;

/// 1 MiB segments: 15 pages of 64 KiB, i.e. 240 units of 4 KiB, the first 2 of which hold
/// the header and the unit table (512 + 240 × 32 bytes): 238 units of blocks.
const SEG: u64 = 1 << 20;
const UNIT: u64 = 4096;
const H: u64 = 2;
const N: u64 = 240;
const TABLE: u64 = 4096; // 256 pointer slots

fn opts() -> Options {
    Options::default().layout("alloc-big-test").segment_size(SEG).max_pool_size(256 << 20)
}

fn fresh(dir: &TestDir, slots: u32) -> (PAllocator, PPtr) {
    let set = PoolSet::create(dir.join("set"), &opts()).unwrap();
    let a = PAllocator::create(Arc::new(set), slots).unwrap();
    let table = a.allocate(TABLE, a.root_location()).unwrap();
    let g = a.pool().resolve_range(table, TABLE).unwrap();
    for i in 0..TABLE / 8 {
        a.pool()
            .store_u64(g + i * 8, if i % 2 == 0 { u64::MAX } else { 0 }, Ordering::Relaxed)
            .unwrap();
    }
    a.pool().persist(g, TABLE).unwrap();
    (a, table)
}

fn reopen(a: PAllocator, dir: &TestDir) -> PAllocator {
    a.close().unwrap();
    PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())).unwrap()
}

fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

fn stamp(a: &PAllocator, p: PPtr, size: u64, tag: u64) {
    let len = size.max(9);
    let g = a.pool().resolve_range(p, len).unwrap();
    a.pool().store_u64(g, tag, Ordering::Relaxed).unwrap();
    a.pool().write_bytes(g + len - 1, &[tag as u8]).unwrap();
    a.pool().persist(g, 8).unwrap();
    a.pool().persist(g + len - 1, 1).unwrap();
}

/// Contents of every model block, and the allocated blocks are exactly the table and the
/// model's blocks (no leak, nothing freed twice, no overlap: `check()` covers every unit).
fn verify(a: &PAllocator, table: PPtr, model: &BTreeMap<u64, (u64, u64)>) {
    let set = a.pool();
    let mut want = vec![table];
    for i in 0..TABLE / 16 {
        let p = set.load_pptr(set.resolve(slot(table, i)).unwrap()).unwrap();
        match model.get(&i) {
            None => assert!(p.is_null(), "slot {i} should be null, holds {p:?}"),
            Some(&(size, tag)) => {
                let len = size.max(9);
                let g = set.resolve_range(p, len).unwrap();
                assert_eq!(set.load_u64(g, Ordering::Acquire).unwrap(), tag, "slot {i}");
                let mut last = [0u8; 1];
                set.read_into(g + len - 1, &mut last).unwrap();
                assert_eq!(last[0], tag as u8, "slot {i}: last byte");
                want.push(p);
            }
        }
    }
    let r = a.check().unwrap();
    let mut got = r.allocated.clone();
    got.sort_by_key(|p| (p.segment, p.offset));
    want.sort_by_key(|p| (p.segment, p.offset));
    assert_eq!(got, want, "allocated blocks vs the model: {r:?}");
}

#[test]
fn geometry_and_routing() {
    let dir = TestDir::new("alloc-big-geometry");
    let (a, table) = fresh(&dir, 1);
    assert_eq!(a.big_capacity(), (N - H) * UNIT);
    // The smallest big request gets a whole number of units, unit-aligned.
    let p = a.allocate(MAX_SMALL + 1, slot(table, 0)).unwrap();
    assert_eq!(p.offset % UNIT, 0);
    assert_eq!(p.offset, H * UNIT, "the first block unit of a fresh big segment");
    let r = a.check().unwrap();
    assert_eq!((r.big_segments, r.big_used), (1, (1, 4 * UNIT)), "{r:?}");
    // The largest big request fills a segment; one byte more is a huge allocation (its own
    // segment file, `alloc_huge.rs`).
    let q = a.allocate(a.big_capacity(), slot(table, 1)).unwrap();
    assert_eq!(q.offset, H * UNIT);
    assert_ne!(q.segment, p.segment);
    let h = a.allocate(a.big_capacity() + 1, slot(table, 2)).unwrap();
    let r = a.check().unwrap();
    assert_eq!(r.huge, vec![(h, a.big_capacity() + 1)], "{r:?}");
    assert_eq!(r.big_segments, 2, "{r:?}");
}

#[test]
fn random_sizes_with_reopens_match_the_model() {
    let seed = ferrite::pmem::internals::testing::test_seed();
    let mut rng = SplitMix64::new(seed);
    let dir = TestDir::new("alloc-big-model");
    let (mut a, table) = fresh(&dir, 2);
    let cap = a.big_capacity();
    let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for step in 0..2_500u64 {
        let i = 1 + rng.next_u64() % (TABLE / 16 - 1);
        if let std::collections::btree_map::Entry::Vacant(e) = model.entry(i) {
            let size = match rng.next_u64() % 20 {
                0..=5 => 1 + rng.next_u64() % MAX_SMALL,
                6..=15 => MAX_SMALL + 1 + rng.next_u64() % (128 * 1024),
                16..=18 => MAX_SMALL + 1 + rng.next_u64() % (cap / 2),
                _ => cap - rng.next_u64() % (4 * UNIT),
            };
            PAllocator::bind_thread_to_slot((rng.next_u64() % 2) as u32);
            let p = a.allocate(size, slot(table, i)).unwrap();
            stamp(&a, p, size, step + 1);
            e.insert((size, step + 1));
        } else {
            a.deallocate(slot(table, i)).unwrap();
            model.remove(&i);
        }
        if step % 250 == 249 {
            verify(&a, table, &model);
            a = reopen(a, &dir);
            verify(&a, table, &model);
        }
    }
    for &i in model.keys() {
        a.deallocate(slot(table, i)).unwrap();
    }
    model.clear();
    verify(&a, table, &model);
    let r = a.check().unwrap();
    assert_eq!(r.big_segments, 0, "every big segment went back to the free list: {r:?}");
    assert_eq!((r.big_used, r.big_free), ((0, 0), (0, 0)));
}

#[test]
fn free_blocks_coalesce_with_both_neighbours_and_segments_return() {
    let dir = TestDir::new("alloc-big-coalesce");
    let (a, table) = fresh(&dir, 1);
    let u = |p: PPtr| p.offset / UNIT;
    // Four blocks laid end to end from the segment's first block unit.
    let x1 = a.allocate(8 * UNIT, slot(table, 1)).unwrap();
    let x2 = a.allocate(4 * UNIT, slot(table, 2)).unwrap();
    let x3 = a.allocate(8 * UNIT, slot(table, 3)).unwrap();
    let x4 = a.allocate(4 * UNIT, slot(table, 4)).unwrap();
    assert_eq!([u(x1), u(x2), u(x3), u(x4)], [H, H + 8, H + 12, H + 20]);
    let rest = N - H - 24;
    a.deallocate(slot(table, 1)).unwrap();
    a.deallocate(slot(table, 3)).unwrap();
    let r = a.check().unwrap();
    assert_eq!(r.big_free, (3, (8 + 8 + rest) * UNIT), "x3 has a used neighbour on each side");
    // x2 between two free blocks: one free block of 20 units at H.
    a.deallocate(slot(table, 2)).unwrap();
    let r = a.check().unwrap();
    assert_eq!(r.big_free, (2, (20 + rest) * UNIT), "{r:?}");
    // Best fit: 20 units come from the 20-unit block, not from the larger rest.
    let y = a.allocate(20 * UNIT, slot(table, 1)).unwrap();
    assert_eq!(u(y), H);
    a.deallocate(slot(table, 1)).unwrap();
    // Freeing the last used block leaves one free block: the segment returns to the
    // free-segment list in the same transaction.
    let free_before = a.check().unwrap().segments.2;
    a.deallocate(slot(table, 4)).unwrap();
    let r = a.check().unwrap();
    assert_eq!((r.big_segments, r.big_free, r.segments.2), (0, (0, 0), free_before + 1), "{r:?}");
}

#[test]
fn the_first_bucket_that_can_serve_gives_its_best_fit() {
    let dir = TestDir::new("alloc-big-buckets");
    let (a, table) = fresh(&dir, 1);
    let u = |p: PPtr| p.offset / UNIT;
    // Free holes of 12 and 7 units separated by used guards (buckets: 12 → [12, 16),
    // 7 → [6, 8)), then the large rest.
    let sizes = [12, 1 + 4, 7, 4];
    let mut at = Vec::new();
    for (k, s) in sizes.iter().enumerate() {
        at.push(a.allocate(s * UNIT, slot(table, 1 + k as u64)).unwrap());
    }
    assert_eq!(u(at[0]), H);
    assert_eq!(u(at[2]), H + 17);
    a.deallocate(slot(table, 1)).unwrap(); // 12 units at H
    a.deallocate(slot(table, 3)).unwrap(); // 7 units at H + 17
    // 6 units: bucket [6, 8) holds the 7-unit block, the best (only) fit there.
    let p = a.allocate(6 * UNIT, slot(table, 10)).unwrap();
    assert_eq!(u(p), H + 17);
    // 9 units: bucket [8, 12) is empty; the next bucket holding a block is [12, 16): the
    // 12-unit block, not the larger rest. Its 3-unit remainder stays free.
    let q = a.allocate(9 * UNIT, slot(table, 11)).unwrap();
    assert_eq!(u(q), H);
    // Two remainders are free now: 1 unit at H + 23 and 3 units at H + 9, both too small
    // for any big request (at least 4 units): 4 units come from the rest after the last
    // guard, at H + 28.
    let s = a.allocate(MAX_SMALL + 1, slot(table, 12)).unwrap();
    assert_eq!(u(s), H + 28);
    let r = a.check().unwrap();
    assert_eq!(r.big_free.0, 3, "the two remainders and the rest: {r:?}");
}

#[test]
fn exact_persist_counts() {
    let dir = TestDir::new("alloc-big-counts");
    let (a, table) = fresh(&dir, 1);
    a.allocate(4 * UNIT, slot(table, 0)).unwrap(); // takes the big segment: block at H
    let c = Counters::snapshot();
    a.allocate(4 * UNIT, slot(table, 1)).unwrap(); // block at H + 4, from the free rest
    let d = Counters::snapshot() - c;
    // Two barriers (docs/design/allocator.md, "Two persist barriers per operation"). 8
    // journal entries: the rest leaves its bucket (the bucket head := nil), the block's info
    // and tag, the new rest's info, tag, next and prev and the bucket head; the caller's
    // location is in the journal's head (`set_caller`), not an entry. Lines: the head line and
    // 2 entry lines (8 × 16 B from byte 64) + the slot's `committed` line, one fence; the
    // words in 6 lines (the extension block's bucket head, the unit entries of units H+4,
    // H+7, H+8 and N−1 — lines 11, 12, 13 and 127 of the table's segment — and the caller's
    // slot), one fence; the lazy disarm's line, no fence.
    assert_eq!((d.lines_flushed(), d.fences), (11, 2), "allocate: {d:?}");
    let c = Counters::snapshot();
    a.deallocate(slot(table, 1)).unwrap();
    let d = Counters::snapshot() - c;
    // The freed block coalesces with the free rest on its right (its left neighbour, the
    // block at H, is used). 7 journal entries: the rest leaves its bucket (head := nil), the
    // rest's info := 0, the merged block's info and tag, its next and prev, the bucket head.
    // Lines: head + 2 entry lines + `committed`, one fence; the words in 5 lines (extension
    // block, units H+4, H+8, N−1, the caller's slot), one fence; the lazy disarm.
    assert_eq!((d.lines_flushed(), d.fences), (10, 2), "deallocate: {d:?}");
}

#[test]
fn bad_big_pointers_are_typed_and_change_nothing() {
    let dir = TestDir::new("alloc-big-errors");
    let (a, table) = fresh(&dir, 2);
    let p = a.allocate(10 * UNIT, slot(table, 1)).unwrap();
    let q = a.allocate(5 * UNIT, slot(table, 2)).unwrap();
    a.deallocate(slot(table, 2)).unwrap();
    let set = a.pool();
    let put = |i: u64, v: PPtr| set.persist_pptr(set.resolve(slot(table, i)).unwrap(), v).unwrap();
    let before = a.check().unwrap();
    let inv = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
    for (what, bad) in [
        ("inside a block (next unit)", PPtr::new(p.segment, p.offset + UNIT)),
        ("inside a block (last unit)", PPtr::new(p.segment, p.offset + 9 * UNIT)),
        ("misaligned", PPtr::new(p.segment, p.offset + 64)),
        ("the segment header", PPtr::new(p.segment, 0)),
        ("the unit table", PPtr::new(p.segment, UNIT)),
        ("a freed block (double free)", q),
        ("past the segment", PPtr::new(p.segment, N * UNIT)),
    ] {
        put(3, bad);
        assert!(inv(a.deallocate(slot(table, 3))), "{what}: {bad:?}");
        put(3, PPtr::NULL);
        assert_eq!(a.check().unwrap(), before, "{what}: the pool changed");
    }
    // A real double free: the pointer copied, freed once through each copy.
    put(4, p);
    a.deallocate(slot(table, 1)).unwrap();
    assert!(inv(a.deallocate(slot(table, 4))), "double free of a big block");
    put(4, PPtr::NULL);
    assert!(a.check().unwrap().allocated.iter().all(|&b| b != p));
    assert!(matches!(a.allocate(0, slot(table, 5)), Err(Error::InvalidArgument(_))));
    assert!(matches!(a.allocate(u64::MAX, slot(table, 5)), Err(Error::InvalidArgument(_))));
}

/// Corrupt words in a big segment's unit table and a slot's bucket heads: open, check,
/// allocate and free return `Ok` or a typed error, never panic (seeded).
#[test]
fn corrupt_unit_tables_are_typed_errors() {
    let seed = ferrite::pmem::internals::testing::test_seed();
    let mut rng = SplitMix64::new(seed);
    for round in 0..60 {
        let dir = TestDir::new("alloc-big-corrupt");
        let (a, table) = fresh(&dir, 1);
        let mut blocks = Vec::new();
        for k in 0..6u64 {
            blocks.push(a.allocate((4 + k * 3) * UNIT, slot(table, 1 + k)).unwrap());
        }
        a.deallocate(slot(table, 2)).unwrap();
        a.deallocate(slot(table, 4)).unwrap();
        let seg = blocks[0].segment;
        let set = a.pool().clone();
        drop(a);
        for _ in 0..1 + rng.next_u64() % 3 {
            // A word of the unit table (units H..N: info, tag, links) or a bucket head
            // (segment 0 offset 98 304 + 16 + 8 b: slot 0's extension block).
            let (s, off) = if rng.next_u64().is_multiple_of(4) {
                (0, 98_304 + 16 + 8 * (rng.next_u64() % 31))
            } else {
                (seg, 512 + 32 * (H + rng.next_u64() % 40) + 8 * (rng.next_u64() % 4))
            };
            let v = match rng.next_u64() % 4 {
                0 => rng.next_u64(),
                1 => 0,
                2 => (0xB16 << 48) | (rng.next_u64() % 300),
                _ => seg << 32 | (rng.next_u64() % 300),
            };
            let g = set.resolve(PPtr::new(s, off)).unwrap();
            set.store_u64(g, v, Ordering::Relaxed).unwrap();
        }
        let typed = |e: &Error| {
            matches!(e, Error::Corrupted { .. } | Error::InvalidArgument(_) | Error::Poisoned)
        };
        let a = match PAllocator::open(set) {
            Ok(a) => a,
            Err(e) => {
                assert!(typed(&e), "round {round}: open: {e}");
                continue;
            }
        };
        if let Err(e) = a.check() {
            assert!(typed(&e), "round {round}: check: {e}");
        }
        for i in [1, 3, 5, 6] {
            if let Err(e) = a.deallocate(slot(table, i)) {
                assert!(typed(&e), "round {round}: free: {e}");
            }
        }
        for k in 0..4 {
            if let Err(e) = a.allocate((5 + k * 7) * UNIT, slot(table, 20 + k)) {
                assert!(typed(&e), "round {round}: allocate: {e}");
            }
        }
    }
}

/// A segment goes from big use to small use and back through the free-segment list. With
/// 16 MiB segments the unit table (512 + 4 080 × 32 bytes) reaches into page 1, which small
/// blocks then fill with garbage: the table must be zeroed before the segment serves big
/// blocks again (without that, `check()` and the allocation meet garbage info words).
#[test]
fn segments_move_between_small_and_big_use() {
    let dir = TestDir::new("alloc-big-reuse");
    let o =
        Options::default().layout("alloc-big-test").segment_size(16 << 20).max_pool_size(128 << 20);
    let set = PoolSet::create(dir.join("set"), &o).unwrap();
    let a = PAllocator::create(Arc::new(set), 2).unwrap();
    PAllocator::bind_thread_to_slot(0);
    let table = a.allocate(TABLE, a.root_location()).unwrap(); // slot 0's small segment 1
    let g = a.pool().resolve_range(table, TABLE).unwrap();
    for i in 0..TABLE / 8 {
        a.pool()
            .store_u64(g + i * 8, if i % 2 == 0 { u64::MAX } else { 0 }, Ordering::Relaxed)
            .unwrap();
    }
    a.pool().persist(g, TABLE).unwrap();
    // Big use of segment 2, returned whole (clean table).
    let p = a.allocate(a.big_capacity(), slot(table, 1)).unwrap();
    assert_eq!(p.segment, table.segment + 1);
    a.deallocate(slot(table, 1)).unwrap();
    // Slot 1 takes it for small pages; page 1 (inside the unit table's range) fills with
    // garbage; everything is freed again and the segment is free (dirty).
    PAllocator::bind_thread_to_slot(1);
    for k in 0..4 {
        let q = a.allocate(MAX_SMALL, slot(table, 10 + k)).unwrap();
        assert_eq!((q.segment, q.offset >> 16), (p.segment, 1), "slot 1's first page");
        let g = a.pool().resolve_range(q, MAX_SMALL).unwrap();
        a.pool().fill(g, MAX_SMALL, 0xB1).unwrap();
        a.pool().persist(g, MAX_SMALL).unwrap();
    }
    for k in 0..4 {
        a.deallocate(slot(table, 10 + k)).unwrap();
    }
    assert_eq!(a.check().unwrap().segments.2, 1);
    let segs = a.pool().segment_count();
    // Big again, from slot 0: the free segment, its table zeroed first.
    PAllocator::bind_thread_to_slot(0);
    let mut model = BTreeMap::new();
    for k in 0..6u64 {
        let size = (4 + 150 * k) * UNIT + 1;
        let q = a.allocate(size, slot(table, 100 + k)).unwrap();
        assert_eq!(q.segment, p.segment);
        stamp(&a, q, size, k + 1);
        model.insert(100 + k, (size, k + 1));
    }
    assert_eq!(a.pool().segment_count(), segs, "the free segment serves big blocks");
    verify(&a, table, &model);
    for k in [1, 3, 5, 0, 2, 4] {
        a.deallocate(slot(table, 100 + k)).unwrap();
    }
    model.clear();
    let r = a.check().unwrap();
    assert_eq!((r.big_segments, r.segments.2), (0, 1), "{r:?}");
    a.close().unwrap();
    let a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &o).unwrap())).unwrap();
    verify(&a, table, &model);
}

/// Two threads on slots 0 and 1 free each other's big blocks (each free runs under the lock
/// of the slot owning the block's segment) while allocating their own; they meet at a barrier
/// between rounds, so what each round does is fixed, only the interleaving inside it is not.
#[test]
fn threads_free_each_others_big_blocks() {
    let dir = TestDir::new("alloc-big-threads");
    let (a, table) = fresh(&dir, 2);
    let a = Arc::new(a);
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let (a, barrier) = (a.clone(), barrier.clone());
            std::thread::spawn(move || {
                PAllocator::bind_thread_to_slot(t as u32);
                let mine = |k: u64, round: u64| 1 + t * 120 + (round % 2) * 60 + k;
                let theirs = |k: u64, round: u64| 1 + (1 - t) * 120 + (round % 2) * 60 + k;
                for round in 0..30u64 {
                    for k in 0..8 {
                        let size = MAX_SMALL + 1 + ((round * 7 + k * 13 + t) % 40) * UNIT;
                        a.allocate(size, slot(table, mine(k, round))).unwrap();
                    }
                    barrier.wait();
                    if round > 0 {
                        // The other thread's blocks of the previous round: cross-slot frees.
                        for k in 0..8 {
                            a.deallocate(slot(table, theirs(k, round - 1))).unwrap();
                        }
                    }
                    barrier.wait();
                }
                for k in 0..8 {
                    a.deallocate(slot(table, mine(k, 29))).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let r = a.check().unwrap();
    assert_eq!(r.allocated, vec![table], "{r:?}");
    assert_eq!(r.big_segments, 0, "every big segment went back: {r:?}");
}
