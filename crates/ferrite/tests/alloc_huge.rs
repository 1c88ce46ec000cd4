//! PAllocator's huge allocations (one segment file per block) and defragmentation (free
//! segments released, free pages punched): allocate, free, reopen; recovery of every crash
//! state of the huge protocol, built directly in the files; bad input; the pool set's
//! file-system footprint (`st_blocks`) after a free and after `defragment()`.
//!
//! The huge header's words are written here by offset, as `docs/design/allocator.md` ("Huge
//! allocations") draws them: state at 0, size at 8, checksum at 16, magic at 32.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{HUGE_HEADER, MAX_HUGE, MAX_SMALL, PAGE, PAllocator};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;

/// Small segments of 8 pages (7 usable).
const SEG: u64 = 8 * PAGE + 4096;
const TABLE: u64 = 4096;
const PENDING: u64 = 1;
const DEAD: u64 = 3;
/// A small segment header's holes hint (`defrag.rs`, `G_HOLES`).
const HOLES: u64 = 48;

fn opts() -> Options {
    Options::default().layout("alloc-huge-test").segment_size(SEG)
}

fn fresh(dir: &TestDir) -> (PAllocator, PPtr) {
    let set = PoolSet::create(dir.join("set"), &opts()).unwrap();
    let a = PAllocator::create(Arc::new(set), 2).unwrap();
    let table = a.allocate(TABLE, a.root_location()).unwrap();
    let g = a.pool().resolve_range(table, TABLE).unwrap();
    for i in 0..TABLE / 16 {
        a.pool().store_u64(g + i * 16, u64::MAX, Ordering::Relaxed).unwrap();
        a.pool().store_u64(g + i * 16 + 8, 0, Ordering::Relaxed).unwrap();
    }
    a.pool().persist(g, TABLE).unwrap();
    (a, table)
}

fn reopen(dir: &TestDir, a: PAllocator) -> PAllocator {
    drop(a); // as after a crash: no clean close
    PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())).unwrap()
}

fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

fn load(a: &PAllocator, p: PPtr) -> PPtr {
    a.pool().load_pptr(a.pool().resolve(p).unwrap()).unwrap()
}

fn store_word(a: &PAllocator, p: PPtr, v: u64) {
    let g = a.pool().resolve(p).unwrap();
    a.pool().store_u64(g, v, Ordering::Release).unwrap();
    a.pool().persist(g, 8).unwrap();
}

fn stamp(a: &PAllocator, p: PPtr, len: u64, tag: u64) {
    let g = a.pool().resolve_range(p, len).unwrap();
    a.pool().store_u64(g, tag, Ordering::Relaxed).unwrap();
    a.pool().store_u64(g + len / 8 * 8 - 8, tag, Ordering::Relaxed).unwrap();
    a.pool().persist(g, 8).unwrap();
    a.pool().persist(g + len / 8 * 8 - 8, 8).unwrap();
}

fn stamped(a: &PAllocator, p: PPtr, len: u64) -> (u64, u64) {
    let g = a.pool().resolve_range(p, len).unwrap();
    let s = a.pool();
    (
        s.load_u64(g, Ordering::Acquire).unwrap(),
        s.load_u64(g + len / 8 * 8 - 8, Ordering::Acquire).unwrap(),
    )
}

#[test]
fn huge_blocks_allocate_free_and_survive_reopen() {
    let dir = TestDir::new("huge-basic");
    let (a, table) = fresh(&dir);
    let segs = a.pool().segment_count();
    // Above the big allocator's capacity (a bit under a segment): huge.
    assert!(a.big_capacity() < SEG);
    let sizes = [SEG, SEG + 100_000, 2 * SEG + 1, 3 << 20];
    for (i, &size) in sizes.iter().enumerate() {
        let p = a.allocate(size, slot(table, i as u64)).unwrap();
        assert_eq!(p.offset, HUGE_HEADER, "a huge block starts after its 4 KiB header");
        assert_eq!(load(&a, slot(table, i as u64)), p, "the pointer is durable at `into`");
        let info = a.pool().segments().into_iter().find(|s| s.id == p.segment).unwrap();
        assert_eq!(info.data_len, HUGE_HEADER + size.next_multiple_of(4096));
        stamp(&a, p, size, 0xB0 + i as u64);
    }
    assert_eq!(a.pool().segment_count(), segs + sizes.len());
    let r = a.check().unwrap();
    assert_eq!(r.huge.len(), sizes.len());
    assert_eq!(r.huge_bytes, sizes.iter().sum::<u64>());
    for (i, &size) in sizes.iter().enumerate() {
        let p = load(&a, slot(table, i as u64));
        assert!(r.huge.contains(&(p, size)) && r.allocated.contains(&p), "{r:?}");
    }
    let a = reopen(&dir, a);
    let r = a.check().unwrap();
    assert_eq!(r.huge.len(), sizes.len(), "live huge blocks survive recovery");
    for (i, &size) in sizes.iter().enumerate() {
        let p = load(&a, slot(table, i as u64));
        assert_eq!(stamped(&a, p, size), (0xB0 + i as u64, 0xB0 + i as u64));
    }
    // Free two; their files go at once.
    let gone = load(&a, slot(table, 1)).segment;
    a.deallocate(slot(table, 1)).unwrap();
    a.deallocate(slot(table, 3)).unwrap();
    assert!(load(&a, slot(table, 1)).is_null() && load(&a, slot(table, 3)).is_null());
    assert_eq!(a.pool().segment_count(), segs + 2);
    assert!(!dir.join("set").join(format!("seg-{gone:06}.pm")).exists(), "the file is removed");
    let a = reopen(&dir, a);
    let r = a.check().unwrap();
    assert_eq!(r.huge.len(), 2);
    assert_eq!(a.pool().segment_count(), segs + 2);
    // Small blocks keep working beside huge ones.
    let s = a.allocate(100, slot(table, 9)).unwrap();
    assert_eq!(a.check().unwrap().allocated.len(), 1 + 2 + 1, "{s:?}");
    a.deallocate(slot(table, 0)).unwrap();
    a.deallocate(slot(table, 2)).unwrap();
    assert!(a.check().unwrap().huge.is_empty());
}

/// Random huge and small allocations and frees against a model, with reopens.
#[test]
fn random_huge_and_small_with_reopens_match_the_model() {
    let seed = ferrite::pmem::internals::testing::test_seed();
    eprintln!("FERRITE_TEST_SEED={seed}");
    let mut rng = SplitMix64::new(seed);
    let dir = TestDir::new("huge-random");
    let (mut a, table) = fresh(&dir);
    let mut model = std::collections::BTreeMap::new();
    for step in 0..300u64 {
        let i = 1 + rng.next_u64() % 40;
        if let Some(&(size, tag)) = model.get(&i) {
            let p = load(&a, slot(table, i));
            assert_eq!(stamped(&a, p, size), (tag, tag), "slot {i} at step {step}");
            a.deallocate(slot(table, i)).unwrap();
            model.remove(&i);
        } else {
            let r = rng.next_u64();
            let size = if r.is_multiple_of(4) {
                MAX_SMALL + 1 + r % (600 * 1024)
            } else {
                1 + r % MAX_SMALL
            };
            let p = a.allocate(size, slot(table, i)).unwrap();
            stamp(&a, p, size.max(16), step + 1);
            model.insert(i, (size.max(16), step + 1));
        }
        if step % 60 == 59 {
            a = reopen(&dir, a);
            let r = a.check().unwrap();
            assert_eq!(r.allocated.len(), model.len() + 1, "step {step}: {r:?}");
        }
    }
}

/// Each state a crash can leave between the steps of the huge protocol, built directly.
#[test]
fn recovery_decides_each_crash_state_from_the_header() {
    let dir = TestDir::new("huge-recovery");
    let (a, table) = fresh(&dir);
    let live = a.allocate(SEG + 200_000, slot(table, 1)).unwrap();
    // (a) Crash after the pending header, before the transaction: `into` null, state pending.
    let pending = a.allocate(SEG + 300_000, slot(table, 2)).unwrap();
    store_word(&a, PPtr::new(pending.segment, 0), PENDING);
    a.pool().persist_pptr_null(a.pool().resolve(slot(table, 2)).unwrap()).unwrap();
    // (b) Crash after a free committed, before the file went: state dead, `from` null.
    let dead = a.allocate(SEG + 300_000, slot(table, 3)).unwrap();
    store_word(&a, PPtr::new(dead.segment, 0), DEAD);
    a.pool().persist_pptr_null(a.pool().resolve(slot(table, 3)).unwrap()).unwrap();
    // (c) Crash after the file was added, before its header: no magic, a size other than the
    //     small segments'.
    let bare = a.pool().add_segment(HUGE_HEADER + 8 * 4096 + 4096).unwrap();
    // (d) The same with the small segment size: adopted as a free small segment.
    let bare_small = a.pool().add_segment(SEG).unwrap();
    let a = reopen(&dir, a);
    let ids: Vec<u64> = a.pool().segments().iter().map(|s| s.id).collect();
    assert!(ids.contains(&live.segment), "a live huge segment stays");
    assert!(!ids.contains(&pending.segment), "a pending huge segment is removed");
    assert!(!ids.contains(&dead.segment), "a dead huge segment is removed");
    assert!(!ids.contains(&bare), "a headerless segment of another size is removed");
    assert!(ids.contains(&bare_small), "a headerless small-size segment is adopted");
    let r = a.check().unwrap();
    assert_eq!(r.huge, vec![(live, SEG + 200_000)]);
    assert_eq!(r.segments.2, 1, "the adopted segment is free: {r:?}");
    assert!(load(&a, slot(table, 2)).is_null() && load(&a, slot(table, 3)).is_null());
    assert_eq!(load(&a, slot(table, 1)), live);
    // The pool works on: the removed ids are not in the way of new huge segments.
    a.allocate(SEG + 50_000, slot(table, 2)).unwrap();
    a.deallocate(slot(table, 1)).unwrap();
    assert_eq!(a.check().unwrap().huge.len(), 1);
}

/// A huge header with its magic but bad values is `Corrupted` at open, never a panic.
#[test]
fn corrupt_huge_headers_are_typed_errors() {
    for (what, off, value) in [
        ("state", 0, 7),
        ("size (checksum mismatch)", 8, 12_345),
        ("checksum", 16, 1),
        ("state zero", 0, 0),
    ] {
        let dir = TestDir::new("huge-corrupt");
        let (a, table) = fresh(&dir);
        let p = a.allocate(SEG + 100_000, slot(table, 1)).unwrap();
        store_word(&a, PPtr::new(p.segment, off), value);
        drop(a);
        match PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())) {
            Err(Error::Corrupted { .. }) => {}
            other => panic!("corrupt {what}: {other:?}"),
        }
    }
}

#[test]
fn bad_huge_requests_are_typed_and_change_nothing() {
    let dir = TestDir::new("huge-bad");
    let (a, table) = fresh(&dir);
    let p = a.allocate(SEG + 100_000, slot(table, 1)).unwrap();
    let before = a.check().unwrap();
    let segs = a.pool().segment_count();
    let inv = |r: Result<PPtr, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(inv(a.allocate(MAX_HUGE + 1, slot(table, 2))), "oversized");
    assert!(inv(a.allocate(u64::MAX, slot(table, 2))), "overflowing size");
    assert!(inv(a.allocate(SEG + 100_000, slot(table, 1))), "into holds a pointer");
    assert!(
        inv(a.allocate(SEG + 100_000, PPtr::new(table.segment, table.offset + 8))),
        "misaligned"
    );
    let dinv = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
    let set = a.pool();
    let loc = set.resolve(slot(table, 2)).unwrap();
    for bad in [
        PPtr::new(p.segment, 0),
        PPtr::new(p.segment, HUGE_HEADER + 64),
        PPtr::new(p.segment, HUGE_HEADER + 4096),
    ] {
        set.persist_pptr(loc, bad).unwrap();
        assert!(dinv(a.deallocate(slot(table, 2))), "{bad:?} is not a huge block's start");
        set.persist_pptr_null(loc).unwrap();
    }
    // A double free through a second copy of the pointer.
    set.persist_pptr(loc, p).unwrap();
    a.deallocate(slot(table, 1)).unwrap();
    assert!(dinv(a.deallocate(slot(table, 2))), "double free");
    assert_eq!(load(&a, slot(table, 2)), p, "a refused free leaves `from` alone");
    set.persist_pptr_null(loc).unwrap();
    // A request larger than the reservation: PoolFull, nothing added.
    let p = a.allocate(SEG + 100_000, slot(table, 1)).unwrap();
    assert!(matches!(a.allocate(MAX_HUGE, slot(table, 3)), Err(Error::PoolFull { .. })));
    assert!(load(&a, slot(table, 3)).is_null());
    assert_eq!(a.pool().segment_count(), segs);
    let after = a.check().unwrap();
    assert_eq!(after.huge.len(), before.huge.len());
    assert_eq!(after.allocated_blocks, before.allocated_blocks);
    assert_eq!(after.huge[0], (p, SEG + 100_000));
}

/// What freeing gives back to the file system: a huge block's whole file at once; free small
/// segments and free pages of used segments only with `defragment()`.
#[test]
fn footprint_shrinks_after_free_and_defragment() {
    let dir = TestDir::new("huge-footprint");
    let (a, table) = fresh(&dir);
    let base = a.pool().fs_footprint().unwrap();
    a.allocate(4 << 20, slot(table, 1)).unwrap();
    let with_huge = a.pool().fs_footprint().unwrap();
    assert!(with_huge >= base + (4 << 20), "{base} → {with_huge}");
    a.deallocate(slot(table, 1)).unwrap();
    assert_eq!(a.pool().fs_footprint().unwrap(), base, "the huge file is gone");

    // Fill many pages with 8 KiB blocks (7 per page), then free all but one block per
    // segment: the segments stay in use with mostly free pages.
    let n = 240;
    for k in 0..n {
        a.allocate(8192, slot(table, 10 + k)).unwrap();
    }
    let full = a.pool().fs_footprint().unwrap();
    let keep: Vec<u64> = (0..n).filter(|k| k % 49 == 0).collect();
    for k in 0..n {
        if !keep.contains(&k) {
            a.deallocate(slot(table, 10 + k)).unwrap();
        }
    }
    assert_eq!(a.pool().fs_footprint().unwrap(), full, "freeing alone gives nothing back");
    let r = a.defragment().unwrap();
    let after = a.pool().fs_footprint().unwrap();
    eprintln!("footprint {full} → {after} bytes; {r:?}");
    assert!(r.pages_punched > 0 && r.bytes_returned() > 0, "{r:?}");
    assert!(after + r.pages_punched * PAGE / 2 <= full, "{full} → {after}: {r:?}");
    a.check().unwrap();
    // Punched pages are backed again and reused.
    for k in 0..n {
        if !keep.contains(&k) {
            let p = a.allocate(8192, slot(table, 10 + k)).unwrap();
            stamp(&a, p, 8192, k);
        }
    }
    assert!(a.pool().fs_footprint().unwrap() > after);
    let a = reopen(&dir, a);
    for k in 0..n {
        if !keep.contains(&k) {
            assert_eq!(stamped(&a, load(&a, slot(table, 10 + k)), 8192), (k, k));
        }
    }
    // Free everything small but the table: defragment releases the free segments.
    for k in 0..n {
        a.deallocate(slot(table, 10 + k)).unwrap();
    }
    let before = a.pool().fs_footprint().unwrap();
    let r = a.defragment().unwrap();
    assert!(r.segments_released > 0, "{r:?}");
    let after = a.pool().fs_footprint().unwrap();
    assert!(after + r.segment_bytes / 2 <= before, "{before} → {after}: {r:?}");
    assert_eq!(a.check().unwrap().allocated.len(), 1);
}

/// A punched page is backed with file space in full (`allocate_range`) before a class takes
/// it, also after a reopen — not only the few 4 KiB pages its header and entries touch — so a
/// full file system is `PoolFull` at the take, never SIGBUS at a store (conventions §2.8).
#[test]
fn a_punched_page_is_backed_in_full_before_reuse() {
    let dir = TestDir::new("huge-reback");
    let (a, table) = fresh(&dir);
    // A page of 64-byte blocks beside the table's page, emptied again: the page is free, the
    // segment stays (the table is in it).
    for k in 1..=200 {
        a.allocate(64, slot(table, k)).unwrap();
    }
    for k in 1..=200 {
        a.deallocate(slot(table, k)).unwrap();
    }
    let r = a.defragment().unwrap();
    assert!(r.pages_punched > 0, "{r:?}");
    let seg = table.segment;
    let holes = a.pool().resolve(PPtr::new(seg, HOLES)).unwrap();
    assert_eq!(a.pool().load_u64(holes, Ordering::Acquire).unwrap(), 1, "the hint is set");
    let a = reopen(&dir, a);
    let before = a.pool().fs_footprint().unwrap();
    a.allocate(64, slot(table, 1)).unwrap();
    let after = a.pool().fs_footprint().unwrap();
    assert!(after >= before + PAGE, "a taken page is backed in full: {before} → {after}");
    a.check().unwrap();
}

/// Regression: a small segment whose pages `defragment` punched, emptied and taken from the
/// free-segment list by the big allocator, used to be written (unit table, big blocks) with
/// its holes still in place — on a full file system a store there is SIGBUS (conventions
/// §2.8). The big allocator backs the whole segment before it links it, and clears the hint.
#[test]
fn a_punched_segment_taken_for_big_blocks_is_backed_in_full() {
    let dir = TestDir::new("huge-big-reback");
    let (a, table) = fresh(&dir);
    // 8 KiB blocks (7 per page) until some sit in a second segment; all of that segment's
    // blocks but one are freed, so its other pages are free and get punched.
    let mut k = 1;
    let mut second = Vec::new();
    while second.len() < 20 {
        let p = a.allocate(8192, slot(table, k)).unwrap();
        if p.segment != table.segment {
            second.push(k);
        }
        k += 1;
    }
    for &k in &second[1..] {
        a.deallocate(slot(table, k)).unwrap();
    }
    let r = a.defragment().unwrap();
    assert!(r.pages_punched >= 2, "{r:?}");
    let seg = load(&a, slot(table, second[0])).segment;
    let holes = a.pool().resolve(PPtr::new(seg, HOLES)).unwrap();
    assert_eq!(a.pool().load_u64(holes, Ordering::Acquire).unwrap(), 1, "the hint is set");
    // The last block goes: the segment is empty and joins the free-segment list.
    a.deallocate(slot(table, second[0])).unwrap();
    let before = a.pool().fs_footprint().unwrap();
    let p = a.allocate(MAX_SMALL + 1, slot(table, 255)).unwrap();
    assert_eq!(p.segment, seg, "the big allocator took the punched segment");
    let after = a.pool().fs_footprint().unwrap();
    assert!(
        after >= before + r.pages_punched * PAGE,
        "the punched pages are backed again: {before} → {after}, {r:?}"
    );
    assert_eq!(a.pool().load_u64(holes, Ordering::Acquire).unwrap(), 0, "the hint is cleared");
    let a = reopen(&dir, a);
    a.check().unwrap();
}
