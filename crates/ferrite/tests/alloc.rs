//! PAllocator I against a model of live blocks: random allocate/free sequences with block
//! contents, reopen (recovery), `check()` after every step group, exact persist counts, typed
//! errors that leave the pool unchanged, and threads.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{MAX_SMALL, PAllocator};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;
use proptest::prelude::*;

const SEG: u64 = 1 << 20;
const TABLE: u64 = 4096; // 256 pointer slots

fn opts() -> Options {
    Options::default().layout("alloc-test").segment_size(SEG)
}

fn seed() -> u64 {
    ferrite::pmem::internals::testing::test_seed()
}

/// A fresh allocator with a pointer table allocated into the root.
fn fresh(dir: &TestDir, slots: u32) -> (PAllocator, PPtr) {
    fresh_with(dir, slots, &opts())
}

fn fresh_with(dir: &TestDir, slots: u32, o: &Options) -> (PAllocator, PPtr) {
    let set = PoolSet::create(dir.join("set"), o).unwrap();
    let a = PAllocator::create(Arc::new(set), slots).unwrap();
    let table = null_table(&a);
    (a, table)
}

/// Allocates the table of persistent pointers into the root and nulls it durably (a null
/// pointer: segment word u64::MAX, offset 0).
fn null_table(a: &PAllocator) -> PPtr {
    let table = a.allocate(TABLE, a.root_location()).unwrap();
    let g = a.pool().resolve_range(table, TABLE).unwrap();
    for i in 0..TABLE / 8 {
        a.pool()
            .store_u64(g + i * 8, if i % 2 == 0 { u64::MAX } else { 0 }, Ordering::Relaxed)
            .unwrap();
    }
    a.pool().persist(g, TABLE).unwrap(); // ORDER(P-T-4): the test's pointer table durable (all null) before the allocator writes into it
    table
}

fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

/// Writes `tag` into the block's first word and its low byte into the block's last requested
/// byte (at least byte 8: every block is at least 64 bytes).
fn stamp(a: &PAllocator, p: PPtr, size: u64, tag: u64) {
    let len = size.max(9);
    let g = a.pool().resolve_range(p, len).unwrap();
    a.pool().fill(g, len, 0xEE).unwrap();
    a.pool().store_u64(g, tag, Ordering::Relaxed).unwrap();
    a.pool().write_bytes(g + len - 1, &[tag as u8]).unwrap();
    a.pool().persist(g, len).unwrap(); // ORDER(P-T-4): the block's stamp durable before the test relies on it after a reopen
}

fn verify(a: &PAllocator, table: PPtr, model: &BTreeMap<u64, (u64, u64)>) {
    let set = a.pool();
    for i in 0..TABLE / 16 {
        let loc = set.resolve(slot(table, i)).unwrap();
        let p = set.load_pptr(loc).unwrap();
        match model.get(&i) {
            None => assert!(p.is_null(), "slot {i} should be null, holds {p:?}"),
            Some(&(size, tag)) => {
                assert!(!p.is_null(), "slot {i} lost its block");
                let len = size.max(9);
                let g = set.resolve_range(p, len).unwrap();
                assert_eq!(set.load_u64(g, Ordering::Acquire).unwrap(), tag, "slot {i}: contents");
                let mut last = [0u8; 1];
                set.read_into(g + len - 1, &mut last).unwrap();
                assert_eq!(last[0], tag as u8, "slot {i}: last byte");
            }
        }
    }
    let r = a.check().unwrap();
    // Every allocated block is the table or a model block: no leak, no stray block.
    assert_eq!(r.allocated_blocks, model.len() as u64 + 1, "{r:?}");
}

#[test]
fn random_allocate_free_with_reopen_matches_the_model() {
    let seed = seed();
    let mut rng = SplitMix64::new(seed);
    let dir = TestDir::new("alloc-model");
    let (mut a, table) = fresh(&dir, 3);
    let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for step in 0..3_000u64 {
        let i = rng.next_u64() % (TABLE / 16);
        if let std::collections::btree_map::Entry::Vacant(e) = model.entry(i) {
            // Mostly small, some up to 8 KiB, rarely the largest class.
            let size = match rng.next_u64() % 20 {
                0 => 8193 + rng.next_u64() % (MAX_SMALL - 8193),
                1..=5 => 1 + rng.next_u64() % 8192,
                _ => 1 + rng.next_u64() % 512,
            };
            let p = a.allocate(size, slot(table, i)).unwrap();
            stamp(&a, p, size, step + 1);
            e.insert((size, step + 1));
        } else {
            a.deallocate(slot(table, i)).unwrap();
            model.remove(&i);
        }
        if step % 500 == 499 {
            verify(&a, table, &model);
            a.close().unwrap();
            a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap()))
                .unwrap();
            verify(&a, table, &model);
        }
    }
    // Free everything: every segment returns to the free list, and is reused.
    for &i in model.keys() {
        a.deallocate(slot(table, i)).unwrap();
    }
    model.clear();
    verify(&a, table, &model);
    let r = a.check().unwrap();
    assert_eq!(r.segments.0 + r.segments.1, 1, "only the table's segment stays owned: {r:?}");
    let segs = a.pool().segment_count();
    let p = a.allocate(100, slot(table, 0)).unwrap();
    assert!(!p.is_null());
    assert_eq!(a.pool().segment_count(), segs, "a cached free segment is reused, no new one");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Shrinkable sequences over 64 slots: allocate (sizes across all classes) into an empty
    /// slot or free a full one, with reopens (recovery) in between; contents and the set of
    /// live blocks match the model after every reopen and at the end.
    #[test]
    fn sequences_match_the_model(ops in proptest::collection::vec(
        (0u8..8, 0u64..64, prop_oneof![4 => 1u64..=512, 2 => 1u64..=8192, 1 => 8193..=MAX_SMALL]),
        1..300,
    )) {
        let dir = TestDir::new("alloc-prop");
        let (mut a, table) = fresh(&dir, 2);
        let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (step, (kind, i, size)) in ops.into_iter().enumerate() {
            let tag = step as u64 + 1;
            if kind == 0 {
                a.close().unwrap();
                a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())).unwrap();
                verify(&a, table, &model);
            } else if let std::collections::btree_map::Entry::Vacant(e) = model.entry(i) {
                let p = a.allocate(size, slot(table, i)).unwrap();
                stamp(&a, p, size, tag);
                e.insert((size, tag));
            } else {
                a.deallocate(slot(table, i)).unwrap();
                model.remove(&i);
            }
        }
        verify(&a, table, &model);
    }
}

#[test]
fn exact_persist_counts() {
    let dir = TestDir::new("alloc-counts");
    let (a, table) = fresh(&dir, 1);
    a.allocate(64, slot(table, 0)).unwrap(); // warms a 64-byte page
    let c = Counters::snapshot();
    a.allocate(64, slot(table, 1)).unwrap();
    let d = Counters::snapshot() - c;
    // Two barriers (docs/design/allocator.md, "Two persist barriers per operation"):
    // commit = the journal's head line and its entry line (2 entries) + the slot's `committed`
    // line, one fence; apply = the block's entry, the page state and `into` (3 lines), one
    // fence; the lazy disarm is one more flushed line and no fence.
    assert_eq!((d.lines_flushed(), d.fences), (7, 2), "allocate: {d:?}");
    let c = Counters::snapshot();
    a.deallocate(slot(table, 1)).unwrap();
    let d = Counters::snapshot() - c;
    // The same shape: journal (2 lines) + `committed`; entry, state, `from`; lazy disarm.
    assert_eq!((d.lines_flushed(), d.fences), (7, 2), "deallocate: {d:?}");
    // Off the common path: the first allocation of another class takes a page from the
    // slot's active segment. The page's header and entries are persisted first (P-ALLOC-4:
    // 1 fence), the page transaction (bitmap, counts, class head) commits in 2 fences and is
    // disarmed lazily (its words are the slot's own), then the allocation takes 2: 5 fences.
    let c = Counters::snapshot();
    a.allocate(15_000, slot(table, 2)).unwrap();
    let d = Counters::snapshot() - c;
    assert_eq!((d.lines_flushed(), d.fences), (16, 5), "allocate with a new page: {d:?}");
}

#[test]
fn bad_requests_are_typed_and_change_nothing() {
    let dir = TestDir::new("alloc-errors");
    let (a, table) = fresh(&dir, 2);
    let p = a.allocate(100, slot(table, 0)).unwrap();
    let before = a.check().unwrap();
    let inv = |r: Result<PPtr, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(inv(a.allocate(0, slot(table, 1))), "zero size");
    assert!(inv(a.allocate(ferrite::alloc::MAX_HUGE + 1, slot(table, 1))), "oversized");
    assert!(inv(a.allocate(64, slot(table, 0))), "into holds a pointer");
    assert!(inv(a.allocate(64, PPtr::new(table.segment, table.offset + 8))), "misaligned into");
    assert!(inv(a.allocate(64, PPtr::new(99, 0))), "into outside the pool");
    assert!(inv(a.allocate(64, PPtr::NULL)), "null into");
    let dinv = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(dinv(a.deallocate(slot(table, 1))), "from holds null");
    // A foreign pointer (into segment 0, the anchor) and a pointer into the middle of a block.
    let set = a.pool();
    let loc = set.resolve(slot(table, 2)).unwrap();
    set.persist_pptr(loc, PPtr::new(0, 64)).unwrap(); // ORDER(P-PM-10): a foreign pointer planted in the slot
    assert!(dinv(a.deallocate(slot(table, 2))), "foreign");
    set.persist_pptr_null(loc).unwrap(); // ORDER(P-PM-10): the slot back to null
    set.persist_pptr(loc, PPtr::new(p.segment, p.offset + 64)).unwrap(); // ORDER(P-PM-10): a pointer into a block's middle planted
    assert!(dinv(a.deallocate(slot(table, 2))), "not a block start");
    set.persist_pptr_null(loc).unwrap(); // ORDER(P-PM-10): the slot back to null
    // A double free through a second copy of the pointer.
    set.persist_pptr(loc, p).unwrap();
    a.deallocate(slot(table, 0)).unwrap();
    assert!(dinv(a.deallocate(slot(table, 2))), "double free");
    set.persist_pptr_null(loc).unwrap();
    let p = a.allocate(100, slot(table, 0)).unwrap();
    let after = a.check().unwrap();
    assert_eq!(before.allocated_blocks, after.allocated_blocks);
    assert!(!p.is_null());
}

#[test]
fn an_exhausted_pool_is_pool_full_and_unchanged() {
    let dir = TestDir::new("alloc-full");
    let set = PoolSet::create(dir.join("set"), &opts().max_pool_size(3 * SEG)).unwrap();
    let a = PAllocator::create(Arc::new(set), 1).unwrap();
    let table = null_table(&a);
    let mut n = 0;
    let err = loop {
        match a.allocate(MAX_SMALL, slot(table, n)) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < TABLE / 16, "never full");
    };
    assert!(matches!(err, Error::PoolFull { .. }), "{err:?}");
    let r = a.check().unwrap();
    assert_eq!(r.allocated_blocks, n + 1);
    a.deallocate(slot(table, 0)).unwrap();
    a.allocate(MAX_SMALL, slot(table, 0)).unwrap();
    a.check().unwrap();
}

#[test]
fn threads_allocate_and_free_concurrently() {
    let dir = TestDir::new("alloc-threads");
    let (a, table) = fresh(&dir, 4);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let a = &a;
            s.spawn(move || {
                for round in 0..200u64 {
                    let i = t * 64 + round % 64;
                    let loc = slot(table, i);
                    let held =
                        !a.pool().load_pptr(a.pool().resolve(loc).unwrap()).unwrap().is_null();
                    if held {
                        a.deallocate(loc).unwrap();
                    } else {
                        let p = a.allocate(64 + (round % 7) * 300, loc).unwrap();
                        stamp(a, p, 64, t);
                    }
                }
            });
        }
    });
    let r = a.check().unwrap();
    assert!(r.allocated_blocks >= 1);
    // Reopen keeps the slot count and recovers cleanly.
    a.close().unwrap();
    let a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())).unwrap();
    assert_eq!(a.slots(), 4);
    assert_eq!(a.check().unwrap().allocated_blocks, r.allocated_blocks);
}

#[test]
fn bad_anchors_are_typed() {
    let dir = TestDir::new("alloc-anchor");
    let set = PoolSet::create(dir.join("set"), &opts()).unwrap();
    assert!(
        matches!(PAllocator::open(Arc::new(set)), Err(Error::Corrupted { .. })),
        "no allocator yet"
    );
    let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
    assert!(matches!(PAllocator::create(Arc::new(set), 0), Err(Error::InvalidArgument(_))));
    let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
    let a = PAllocator::create(Arc::new(set), 2).unwrap();
    let set = a.into_pool();
    let g = set.resolve(PPtr::new(0, 8)).unwrap();
    set.store_u64(g, 99, Ordering::Relaxed).unwrap(); // version
    assert!(matches!(
        PAllocator::open(set),
        Err(Error::Incompatible { .. } | Error::Corrupted { .. })
    ));
}

/// Regression: the page count per segment came from the options the pool set was opened with,
/// so reopening with another segment size misread every segment. The anchor now records the
/// segment size and `open` restores it, whatever the options say.
#[test]
fn reopening_with_another_segment_size_uses_the_anchors() {
    let dir = TestDir::new("alloc-segsize");
    let (a, table) = fresh(&dir, 1);
    let mut model = BTreeMap::new();
    for i in 0..40u64 {
        let size = 4096 + i * 100;
        let p = a.allocate(size, slot(table, i)).unwrap();
        stamp(&a, p, size, i + 1);
        model.insert(i, (size, i + 1));
    }
    let before = a.check().unwrap();
    assert!(before.segments.0 + before.segments.1 >= 1);
    a.close().unwrap();
    let other = Options::default().layout("alloc-test").segment_size(4 * SEG);
    let a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &other).unwrap())).unwrap();
    assert_eq!(a.pool().segment_size(), SEG);
    verify(&a, table, &model);
    // New segments are grown at the recorded size.
    for i in 40..120u64 {
        let p = a.allocate(8192, slot(table, i)).unwrap();
        stamp(&a, p, 8192, i + 1);
        model.insert(i, (8192, i + 1));
    }
    verify(&a, table, &model);
    assert!(a.pool().segments().iter().all(|s| s.data_len <= SEG), "{:?}", a.pool().segments());
    a.check().unwrap();
}

/// Regression: returning an empty segment to the free-segment list released the global lock
/// before its transaction committed, so a concurrent segment take could pop the old head the
/// pending transaction then linked behind the returned segment: one segment in two lists.
/// Tiny segments (two usable pages) make every thread return and take segments constantly.
#[test]
fn threads_returning_and_taking_segments_keep_the_lists_apart() {
    let dir = TestDir::new("alloc-seg-race");
    let o = Options::default().layout("alloc-test").segment_size(3 * 64 * 1024 + 4096);
    let (a, table) = fresh_with(&dir, 4, &o);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let a = &a;
            s.spawn(move || {
                for _ in 0..150 {
                    // Fill more than one page of 8 KiB blocks (7 per page), then free them all:
                    // the thread's segment empties and goes back to the shared list.
                    for k in 0..10 {
                        a.allocate(8192, slot(table, t * 16 + k)).unwrap();
                    }
                    for k in 0..10 {
                        a.deallocate(slot(table, t * 16 + k)).unwrap();
                    }
                }
            });
        }
    });
    let r = a.check().unwrap();
    assert_eq!(r.allocated_blocks, 1, "{r:?}");
}

/// Two slots' recovery items armed at the same time, deterministically: each of two threads
/// (bound to slots 0 and 1) stops at the first fence of its allocation's write-back (P-ALLOC-2,
/// so its item is committed and durable, its words not yet), the threads meet there, and the
/// durable image is captured before either goes on. Recovering that image replays both
/// operations: both pointers are in place and `check()` finds every block allocated once.
#[test]
fn two_armed_items_recover_together() {
    use ferrite::pmem::sim::{Event, EventKind};
    use ferrite::pmem::{CrashImage, ImageSpec, SimDomain};
    use std::cell::Cell;
    use std::sync::{Barrier, Mutex};

    thread_local! { static STOP_AT_WRITE_BACK: Cell<bool> = const { Cell::new(false) }; }
    let o = Options::default().layout("alloc-test").segment_size(5 * 64 * 1024 + 4096);
    let o = o.max_pool_size(8 << 20);
    let domain = Arc::new(SimDomain::new(false));
    let set = PoolSet::create_sim_with(domain.clone(), &o).unwrap();
    let a = PAllocator::create(Arc::new(set), 2).unwrap();
    let table = null_table(&a);
    let met = Arc::new((Barrier::new(2), Barrier::new(2)));
    let image: Arc<Mutex<Option<CrashImage>>> = Arc::new(Mutex::new(None));
    {
        let (met, image) = (met.clone(), image.clone());
        domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
            if e.kind != EventKind::Fence
                || e.site.rule != Some("P-ALLOC-2")
                || !STOP_AT_WRITE_BACK.with(|s| s.replace(false))
            {
                return;
            }
            // Both items are armed and durable here; neither operation's words are.
            if met.0.wait().is_leader() {
                *image.lock().unwrap() = Some(d.capture(&ImageSpec::durable()));
            }
            met.1.wait();
        })));
    }
    let blocks: Vec<PPtr> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let a = &a;
                s.spawn(move || {
                    PAllocator::bind_thread_to_slot(t as u32);
                    // Warm the slot's 64-byte class (its page), so the next allocation is one
                    // transaction.
                    a.allocate(64, slot(table, 10 + t)).unwrap();
                    STOP_AT_WRITE_BACK.with(|s| s.set(true));
                    a.allocate(64, slot(table, 1 + t)).unwrap()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    domain.set_hook(None);
    let image = image.lock().unwrap().take().expect("both threads met at their write-back");
    let set = PoolSet::open_sim(&image, &o).unwrap();
    assert_eq!(PAllocator::armed_items(&set).unwrap(), [0, 1], "both items armed in the image");
    let r = PAllocator::open(Arc::new(set)).unwrap();
    let s = r.pool();
    for t in 0..2u64 {
        let p = s.load_pptr(s.resolve(slot(table, 1 + t)).unwrap()).unwrap();
        assert_eq!(p, blocks[t as usize], "slot {t}'s allocation was replayed");
    }
    let report = r.check().unwrap();
    assert_eq!(report.allocated_blocks, 5, "the table, two warm-ups, two replayed: {report:?}");
    assert!(PAllocator::armed_items(s).unwrap().is_empty(), "recovery disarmed both");
}

/// Releasing free segments: the pool set loses their files, the allocator stays consistent
/// across a reopen, and later growth reuses the released ids.
#[test]
fn free_segments_are_released_and_ids_reused() {
    let dir = TestDir::new("alloc-release");
    let o = Options::default().layout("alloc-test").segment_size(3 * 64 * 1024 + 4096);
    let (a, table) = fresh_with(&dir, 1, &o);
    for k in 0..40 {
        a.allocate(MAX_SMALL, slot(table, k)).unwrap();
    }
    let grown = a.pool().segment_count();
    for k in 0..40 {
        a.deallocate(slot(table, k)).unwrap();
    }
    let free = a.check().unwrap().segments.2;
    assert!(free >= 3, "{:?}", a.check().unwrap());
    assert_eq!(a.release_free_segments(1).unwrap() as u64, free - 1);
    assert_eq!(a.check().unwrap().segments.2, 1);
    assert_eq!(a.pool().segment_count() as u64, grown as u64 - (free - 1));
    assert_eq!(a.release_free_segments(1).unwrap(), 0, "nothing beyond the kept one");
    a.close().unwrap();
    let a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &o).unwrap())).unwrap();
    assert_eq!(a.check().unwrap().allocated_blocks, 1);
    for k in 0..40 {
        a.allocate(MAX_SMALL, slot(table, k)).unwrap();
    }
    assert_eq!(a.pool().segment_count(), grown, "released ids are reused by growth");
    assert_eq!(a.check().unwrap().allocated_blocks, 41);
}

/// A two-slot allocator on a simulated pool set with a null-initialised table in the root
/// (allocated through slot 1).
fn sim_alloc() -> (Arc<ferrite::pmem::SimDomain>, Options, PAllocator, PPtr) {
    let o = Options::default().layout("alloc-test").segment_size(5 * 64 * 1024 + 4096);
    let o = o.max_pool_size(8 << 20);
    let domain = Arc::new(ferrite::pmem::SimDomain::new(false));
    let set = PoolSet::create_sim_with(domain.clone(), &o).unwrap();
    PAllocator::bind_thread_to_slot(1);
    let a = PAllocator::create(Arc::new(set), 2).unwrap();
    let table = null_table(&a);
    (domain, o, a, table)
}

/// Moves the block of table slot `from` to `to` the way a data structure does (copy, persist,
/// then null the old slot, persist), on the calling thread.
fn move_block(a: &PAllocator, table: PPtr, from: u64, to: u64) {
    let s = a.pool();
    let p = s.load_pptr(s.resolve(slot(table, from)).unwrap()).unwrap();
    s.persist_pptr(s.resolve(slot(table, to)).unwrap(), p).unwrap();
    s.persist_pptr_null(s.resolve(slot(table, from)).unwrap()).unwrap();
}

/// Whether recovering `image` puts a block back into table slot `k`.
fn slot_holds_a_block(image: &ferrite::pmem::CrashImage, o: &Options, table: PPtr, k: u64) -> bool {
    let r = PAllocator::open(Arc::new(PoolSet::open_sim(image, o).unwrap())).unwrap();
    let s = r.pool();
    let back = !s.load_pptr(s.resolve(slot(table, k)).unwrap()).unwrap().is_null();
    r.check().unwrap();
    back
}

/// P-ALLOC-8: a thread allocates and exits without any persist of its own after the
/// allocation (its journal's disarm is flushed, not fenced); then another thread moves the
/// block. The exiting thread's fence makes the disarm durable, so recovery leaves the move
/// alone. With that fence dropped (found by its rule in a first run), recovery replays the
/// allocation over the move and the block is referenced twice: the fence is needed.
#[test]
fn a_thread_that_exits_makes_its_last_allocation_final() {
    use ferrite::pmem::ImageSpec;
    use ferrite::pmem::sim::{Event, EventKind, SimDomain};
    use std::sync::Mutex;

    let run = |drop: Option<&str>| -> (Vec<String>, bool) {
        let (domain, o, a, table) = sim_alloc();
        if let Some(k) = drop {
            domain.drop_persist(k);
        }
        let keys = Arc::new(Mutex::new(Vec::new()));
        {
            let keys = keys.clone();
            domain.set_hook(Some(Arc::new(move |_: &SimDomain, e: &Event| {
                if e.kind == EventKind::Fence && e.site.rule == Some("P-ALLOC-8") {
                    keys.lock().unwrap().push(e.site.key());
                }
            })));
        }
        // An explicit join: a scope's end does not wait for the thread's TLS destructors
        // (where the exit fence runs), `join` does (a first version raced here).
        std::thread::scope(|s| {
            s.spawn(|| {
                PAllocator::bind_thread_to_slot(0);
                a.allocate(64, slot(table, 1)).unwrap();
            })
            .join()
            .unwrap();
        });
        domain.set_hook(None);
        move_block(&a, table, 1, 2);
        let image = domain.capture(&ImageSpec::durable());
        let keys = keys.lock().unwrap().clone();
        (keys, slot_holds_a_block(&image, &o, table, 1))
    };
    let (keys, back) = run(None);
    assert!(!back, "the moved block came back into the slot it was allocated into");
    assert_eq!(keys.len(), 1, "one exit fence: {keys:?}");
    let (_, back) = run(Some(&keys[0]));
    assert!(back, "without the exit fence the allocation is replayed over the move");
}

/// The caller's rule (docs/design/allocator.md): after `allocate` returns, another thread may
/// move the block out of its location only once the allocating thread has fenced. Here the
/// allocating thread stays alive and makes no persist; the main thread moves the block; the
/// durable image is taken before the allocating thread does anything else. Without `settle`
/// recovery replays the allocation over the move (the hazard the rule exists for, shown
/// here so that the rule is not a claim); with `settle` it does not.
#[test]
fn another_thread_moves_a_block_safely_after_settle() {
    use ferrite::pmem::ImageSpec;
    use std::sync::mpsc::channel;

    let run = |settle: bool| -> bool {
        let (domain, o, a, table) = sim_alloc();
        let (allocated, wait_allocated) = channel();
        let (release, wait_release) = channel::<()>();
        let a = &a;
        let image = std::thread::scope(|s| {
            s.spawn(move || {
                PAllocator::bind_thread_to_slot(0);
                a.allocate(64, slot(table, 1)).unwrap();
                if settle {
                    a.settle();
                }
                allocated.send(()).unwrap();
                wait_release.recv().unwrap();
            });
            wait_allocated.recv().unwrap();
            move_block(a, table, 1, 2);
            let image = domain.capture(&ImageSpec::durable());
            release.send(()).unwrap();
            image
        });
        slot_holds_a_block(&image, &o, table, 1)
    };
    assert!(run(false), "without settle the allocation is replayed over another thread's move");
    assert!(!run(true), "after settle the move stands");
}

/// Per-core slots (spec §3.6): a thread pinned to CPU c, not bound to a slot, allocates in slot
/// c % slots — its block lies in a segment whose header names that slot as owner. With two
/// CPUs the two threads use two slots.
#[test]
fn an_unbound_thread_allocates_in_its_cpus_slot() {
    let dir = TestDir::new("alloc-per-core");
    let (a, table) = fresh(&dir, 4);
    let mut cpus = ferrite::pmem::platform::allowed_cpus().expect("affinity");
    cpus.truncate(4);
    assert!(!cpus.is_empty());
    let owners: Vec<(u32, u64)> = std::thread::scope(|s| {
        let a = &a;
        let workers: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                s.spawn(move || {
                    ferrite::pmem::platform::pin_current_thread(cpu).expect("pin");
                    let slot_now = a.current_slot();
                    let p = a.allocate(64, slot(table, 1 + u64::from(cpu))).unwrap();
                    let owner = a.pool().resolve(PPtr::new(p.segment, 16)).unwrap();
                    (slot_now, a.pool().load_u64(owner, Ordering::Acquire).unwrap())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (&cpu, &(slot_now, owner)) in cpus.iter().zip(&owners) {
        assert_eq!(slot_now, cpu % 4, "CPU {cpu}");
        assert_eq!(owner, u64::from(slot_now) + 1, "CPU {cpu}: the block's segment owner");
    }
    a.check().unwrap();
}
