//! Pool sets: grow under concurrent readers (no moved addresses, no faults), reopen of a
//! multi-segment set, foreign/missing/orphan segments, segment removal, persistent-pointer
//! resolution (also across two pool sets in one process), exact pointer persist counts.

use std::sync::Barrier;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};

use ferrite_pmem::header::SEGMENT_BITMAP_OFF;
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Counters, Error, Options, PPtr, PoolSet};

const SEG: u64 = 64 * 1024;

fn opts() -> Options {
    Options::default().layout("set-test").segment_size(SEG)
}

#[test]
fn create_grow_write_reopen() {
    let dir = TestDir::new("set-reopen");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    assert!(!set.was_clean_shutdown());
    assert_eq!(set.segment_count(), 1);
    let ids: Vec<u64> = (0..5).map(|_| set.grow().unwrap()).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    let big = set.add_segment(3 * SEG).unwrap();
    assert_eq!(big, 6);
    for info in set.segments() {
        assert_eq!(info.data_len + 4096, info.file_size);
        let p = PPtr::new(info.id, 64);
        let g = set.resolve(p).unwrap();
        assert_eq!(g, info.data_offset + 64);
        assert_eq!(set.to_pptr(g).unwrap(), p);
        set.store_u64(g, 1000 + info.id, Release).unwrap();
        set.persist(g, 8).unwrap();
        // The last word of the segment's data area is addressable, one past it is not.
        let last = PPtr::new(info.id, info.data_len - 8);
        assert!(set.resolve_range(last, 8).is_ok());
        assert!(set.resolve_range(last, 9).is_err());
    }
    let uuid = set.uuid();
    set.close().unwrap();

    let set = PoolSet::open(dir.join("s"), &opts()).unwrap();
    assert!(set.was_clean_shutdown());
    assert_eq!(set.uuid(), uuid);
    assert_eq!(set.segment_count(), 7);
    for id in 0..7 {
        let g = set.resolve(PPtr::new(id, 64)).unwrap();
        assert_eq!(set.load_u64(g, Acquire).unwrap(), 1000 + id);
    }
    assert_eq!(set.segments().last().unwrap().file_size, 3 * SEG);
}

/// Spins until every reader still running has finished a read pass after this call began;
/// returns when a reader has stopped (its panic then surfaces at the scope's join). Waits on
/// the readers' flags only, never on time.
fn wait_for_a_pass_of_each(reads: &[AtomicU64], running: &[AtomicBool]) {
    let start: Vec<u64> = reads.iter().map(|r| r.load(Acquire)).collect();
    for (i, r) in reads.iter().enumerate() {
        while r.load(Acquire) == start[i] && running[i].load(Acquire) {
            std::thread::yield_now();
        }
    }
}

/// Clears its flag when dropped, also when the reader panics.
struct Running<'a>(&'a AtomicBool);
impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Release);
    }
}

// Regression (flaky test): this test used to stop the readers after 40 grows and assert that
// some read had happened; on a loaded 2-core machine the grows could all finish before a
// reader was first scheduled (about 1 run in 6). Now the readers and the grower meet at a
// Barrier and the grower waits, before every grow and before stopping, until each reader has
// finished a read pass, so every reader reads interleaved with the grows on every run.
#[test]
fn grow_under_concurrent_readers() {
    const READERS: usize = 2;
    const GROWS: u64 = 40;
    let dir = TestDir::new("set-grow");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    let p0 = PPtr::new(0, 128);
    let g0 = set.resolve(p0).unwrap();
    set.store_u64(g0, 42, Release).unwrap();
    let stop = AtomicBool::new(false);
    let reads: [AtomicU64; READERS] = Default::default();
    let running: [AtomicBool; READERS] = std::array::from_fn(|_| AtomicBool::new(true));
    let start = Barrier::new(READERS + 1);
    std::thread::scope(|s| {
        for i in 0..READERS {
            let (set, stop, reads, running, start) = (&set, &stop, &reads, &running, &start);
            s.spawn(move || {
                let _running = Running(&running[i]);
                start.wait();
                let mut seen = Vec::new();
                loop {
                    let last = stop.load(Acquire);
                    // Segment 0 never moves and keeps its value.
                    assert_eq!(set.resolve(p0).unwrap(), g0, "segment 0 moved");
                    assert_eq!(set.load_u64(g0, Acquire).unwrap(), 42);
                    // Every segment seen once keeps its address and its stamp.
                    for info in set.segments() {
                        let g = set.resolve(PPtr::new(info.id, 0)).unwrap();
                        match seen.iter().find(|(id, _)| *id == info.id) {
                            Some(&(_, old)) => assert_eq!(old, g, "segment {} moved", info.id),
                            None => seen.push((info.id, g)),
                        }
                        let v = set.load_u64(g, Acquire).unwrap();
                        assert!(v == 0 || v == info.id + 7, "segment {} stamp {v}", info.id);
                    }
                    reads[i].fetch_add(1, Release);
                    if last {
                        break;
                    }
                }
            });
        }
        start.wait();
        for _ in 0..GROWS {
            wait_for_a_pass_of_each(&reads, &running);
            let id = set.grow().unwrap();
            let g = set.resolve(PPtr::new(id, 0)).unwrap();
            set.store_u64(g, id + 7, Release).unwrap();
        }
        wait_for_a_pass_of_each(&reads, &running);
        stop.store(true, Release);
    });
    assert_eq!(set.segment_count(), GROWS as usize + 1);
    for (i, r) in reads.iter().enumerate() {
        // One pass before every grow and one after the last: deterministic, not "some".
        assert!(r.load(Relaxed) > GROWS, "reader {i}: {} passes", r.load(Relaxed));
    }
}

#[test]
fn two_pool_sets_in_one_process_resolve_independently() {
    let dir = TestDir::new("set-two");
    let a = PoolSet::create(dir.join("a"), &opts()).unwrap();
    let b = PoolSet::create(dir.join("b"), &opts()).unwrap();
    a.grow().unwrap();
    b.grow().unwrap();
    let p = PPtr::new(1, 256);
    let (ga, gb) = (a.resolve(p).unwrap(), b.resolve(p).unwrap());
    a.store_u64(ga, 0xAAAA, Release).unwrap();
    b.store_u64(gb, 0xBBBB, Release).unwrap();
    assert_eq!(a.load_u64(a.resolve(p).unwrap(), Acquire).unwrap(), 0xAAAA);
    assert_eq!(b.load_u64(b.resolve(p).unwrap(), Acquire).unwrap(), 0xBBBB);
    assert_ne!(a.uuid(), b.uuid());
    // A pointer into a segment only one set has resolves only there.
    a.grow().unwrap();
    assert!(a.resolve(PPtr::new(2, 0)).is_ok());
    assert!(matches!(b.resolve(PPtr::new(2, 0)), Err(Error::BadPointer { .. })));
}

#[test]
fn bad_pointers_are_typed_errors() {
    let dir = TestDir::new("set-bad");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    for p in [PPtr::NULL, PPtr::new(9, 0), PPtr::new(0, SEG), PPtr::new(1 << 40, 0)] {
        assert!(matches!(set.resolve(p), Err(Error::BadPointer { .. })), "{p:?}");
    }
    assert!(matches!(set.to_pptr(0), Err(Error::BadPointer { .. })), "header page");
    assert!(matches!(set.to_pptr(1 << 29), Err(Error::BadPointer { .. })), "unmapped");
    assert!(matches!(set.remove_segment(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(set.remove_segment(5), Err(Error::BadPointer { .. })));
}

// Regression (segment-id reuse): a removed segment's id used to be handed to the next grow
// in the same open, so a `PPtr` into the removed segment that a thread still held resolved
// into the new segment: another segment's data. Ids removed during an open are now retired
// until the set is reopened, and the stale pointer is a typed `BadPointer`.
#[test]
fn remove_segment_then_reopen() {
    let dir = TestDir::new("set-remove");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    let (one, two) = (set.grow().unwrap(), set.grow().unwrap());
    let stale = PPtr::new(one, 0);
    let g1 = set.resolve(stale).unwrap();
    set.store_u64(g1, 5, Release).unwrap();
    set.remove_segment(one).unwrap();
    assert!(matches!(set.resolve(stale), Err(Error::BadPointer { .. })));
    assert!(matches!(set.remove_segment(one), Err(Error::BadPointer { .. })));
    // A stale global offset still reads (zeros), never faults.
    assert_eq!(set.load_u64(g1, Acquire).unwrap(), 0);
    assert!(!dir.join("s/seg-000001.pm").exists());
    // The next grow gets a fresh id and a fresh range: the stale pointer and the stale
    // offset reach neither the new segment nor anything else.
    let three = set.grow().unwrap();
    assert_ne!(three, one);
    let g3 = set.resolve(PPtr::new(three, 0)).unwrap();
    assert_ne!(g3, g1);
    set.store_u64(g3, 33, Release).unwrap();
    assert!(matches!(set.resolve(stale), Err(Error::BadPointer { .. })));
    assert_eq!(set.load_u64(g1, Acquire).unwrap(), 0);
    set.close().unwrap();
    // After a reopen no thread holds pointers of the previous open: the id is free again.
    let set = PoolSet::open(dir.join("s"), &opts()).unwrap();
    let ids: Vec<u64> = set.segments().iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![0, two, three]);
    assert_eq!(set.grow().unwrap(), one);
}

#[test]
fn reservation_full_is_pool_full_and_changes_nothing() {
    let dir = TestDir::new("set-full");
    let set = PoolSet::create(dir.join("s"), &opts().max_pool_size(4 * SEG)).unwrap();
    for _ in 0..3 {
        set.grow().unwrap();
    }
    assert!(matches!(set.grow(), Err(Error::PoolFull { .. })));
    assert_eq!(set.segment_count(), 4);
    assert_eq!(std::fs::read_dir(dir.join("s")).unwrap().count(), 4);
    assert!(matches!(set.add_segment(100), Err(Error::TooSmall { .. })));
    assert!(matches!(set.add_segment(SEG + 1), Err(Error::InvalidArgument(_))));
}

#[test]
fn second_opener_and_create_errors() {
    let dir = TestDir::new("set-lock");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    assert!(matches!(PoolSet::open(dir.join("s"), &opts()), Err(Error::Locked { .. })));
    assert!(matches!(PoolSet::create(dir.join("s"), &opts()), Err(Error::AlreadyExists { .. })));
    drop(set);
    assert!(matches!(
        PoolSet::open(dir.join("s"), &opts().layout("other")),
        Err(Error::WrongLayout { .. })
    ));
    assert!(matches!(PoolSet::open(dir.join("none"), &opts()), Err(Error::NotFound { .. })));
    assert!(matches!(PoolSet::create(dir.join("x/y/z"), &opts()), Err(Error::NotFound { .. })));
    assert!(matches!(
        PoolSet::create(dir.join("small"), &opts().max_pool_size(SEG / 2)),
        Err(Error::InvalidArgument(_))
    ));
    // Regression: rounding the reservation up to whole pages overflowed (a panic in builds
    // with overflow checks) for a maximum size near u64::MAX; it is a typed error now.
    assert!(matches!(
        PoolSet::create(dir.join("huge"), &opts().max_pool_size(u64::MAX)),
        Err(Error::InvalidArgument(_))
    ));
}

/// Sets bit `id` of the live-segment bitmap in segment 0's file to `on`.
fn set_bitmap_bit(seg0: &std::path::Path, id: u64, on: bool) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(seg0).unwrap();
    let off = SEGMENT_BITMAP_OFF + id / 64 * 8;
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, off).unwrap();
    let mut v = u64::from_le_bytes(w);
    if on {
        v |= 1 << (id % 64);
    } else {
        v &= !(1 << (id % 64));
    }
    f.write_all_at(&v.to_le_bytes(), off).unwrap();
}

#[test]
fn foreign_missing_and_orphan_segments() {
    let dir = TestDir::new("set-foreign");
    let (a, b) = (dir.join("a"), dir.join("b"));
    let sa = PoolSet::create(&a, &opts()).unwrap();
    sa.grow().unwrap();
    sa.close().unwrap();
    let sb = PoolSet::create(&b, &opts()).unwrap();
    sb.grow().unwrap();
    sb.grow().unwrap();
    sb.close().unwrap();

    // A listed segment replaced by another set's file: foreign, nothing changed.
    let saved = std::fs::read(a.join("seg-000001.pm")).unwrap();
    std::fs::copy(b.join("seg-000001.pm"), a.join("seg-000001.pm")).unwrap();
    assert!(matches!(PoolSet::open(&a, &opts()), Err(Error::ForeignSegment { .. })));
    std::fs::write(a.join("seg-000001.pm"), &saved).unwrap();
    // An unlisted foreign file is refused too, and is not deleted.
    std::fs::copy(b.join("seg-000002.pm"), a.join("seg-000002.pm")).unwrap();
    assert!(matches!(PoolSet::open(&a, &opts()), Err(Error::ForeignSegment { .. })));
    assert!(a.join("seg-000002.pm").exists());
    std::fs::remove_file(a.join("seg-000002.pm")).unwrap();

    // A listed segment whose file is gone: missing.
    std::fs::rename(a.join("seg-000001.pm"), dir.join("moved")).unwrap();
    assert!(matches!(PoolSet::open(&a, &opts()), Err(Error::MissingSegment { id: 1, .. })));
    std::fs::rename(dir.join("moved"), a.join("seg-000001.pm")).unwrap();

    // A crashed remove (bit cleared, file still there): the orphan is deleted at open.
    set_bitmap_bit(&a.join("seg-000000.pm"), 1, false);
    let s = PoolSet::open(&a, &opts()).unwrap();
    assert_eq!(s.segment_count(), 1);
    assert!(!a.join("seg-000001.pm").exists());
    drop(s);

    // A crashed grow before the magic (incomplete file, not listed): deleted at open.
    std::fs::write(a.join("seg-000003.pm"), vec![0u8; SEG as usize]).unwrap();
    let s = PoolSet::open(&a, &opts()).unwrap();
    assert!(!a.join("seg-000003.pm").exists());
    drop(s);

    // An incomplete file that the bitmap lists: corrupt (grow sets the bit only after the
    // magic, so this cannot come from a crash).
    std::fs::write(a.join("seg-000004.pm"), vec![0u8; SEG as usize]).unwrap();
    set_bitmap_bit(&a.join("seg-000000.pm"), 4, true);
    assert!(matches!(PoolSet::open(&a, &opts()), Err(Error::Incomplete { .. })));
    assert!(a.join("seg-000004.pm").exists(), "a refused open deletes nothing");
}

#[test]
fn pointer_persist_counts() {
    let dir = TestDir::new("set-pptr");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    let loc = set.resolve(PPtr::new(0, 64)).unwrap();
    assert!(set.load_pptr(loc).unwrap().segment == 0); // zeroed memory: segment 0, offset 0
    set.persist_pptr_null(loc).unwrap();
    assert!(set.load_pptr(loc).unwrap().is_null());
    let target = PPtr::new(0, 4096);
    let c = Counters::snapshot();
    set.persist_pptr(loc, target).unwrap();
    let d = Counters::snapshot() - c;
    assert_eq!((d.lines_flushed(), d.fences), (2, 2), "offset persisted before segment");
    assert_eq!(set.load_pptr(loc).unwrap(), target);
    let c = Counters::snapshot();
    set.persist_pptr_m2(loc + 16, target).unwrap();
    let d = Counters::snapshot() - c;
    assert_eq!((d.lines_flushed(), d.fences), (1, 1), "M2 variant: one line, one fence");
    let c = Counters::snapshot();
    set.persist_pptr_null(loc).unwrap();
    let d = Counters::snapshot() - c;
    assert_eq!((d.lines_flushed(), d.fences, d.bytes_stored), (1, 1, 8));
    assert!(matches!(set.persist_pptr(loc + 8, target), Err(Error::Misaligned { .. })));
}

/// A punched range gives its file space back (`st_blocks` through `fs_footprint`), reads zeros,
/// and `allocate_range` backs it again before it is written (conventions §2.8), without
/// changing what it reads.
#[test]
fn punch_gives_space_back_and_allocate_range_backs_it_again() {
    let dir = TestDir::new("set-punch");
    let set = PoolSet::create(dir.join("s"), &opts()).unwrap();
    let id = set.add_segment(16 * 4096).unwrap();
    let at = PPtr::new(id, 4096);
    let g = set.resolve_range(at, 8 * 4096).unwrap();
    for k in 0..8 {
        set.store_u64(g + k * 4096, 0xAB + k, Release).unwrap();
    }
    set.persist(g, 8 * 4096).unwrap();
    let full = set.fs_footprint().unwrap();
    set.punch_hole(at, 8 * 4096).unwrap();
    let punched = set.fs_footprint().unwrap();
    assert_eq!(full - punched, 8 * 4096, "the punched pages no longer hold file space");
    assert_eq!(set.load_u64(g, Acquire).unwrap(), 0, "a hole reads zeros");
    set.allocate_range(at, 8 * 4096).unwrap();
    assert_eq!(set.fs_footprint().unwrap(), full, "backed again before reuse");
    assert_eq!(set.load_u64(g + 4096, Acquire).unwrap(), 0, "backing does not change contents");
    // Backing an already backed range changes nothing; bad arguments are typed errors.
    set.allocate_range(at, 8 * 4096).unwrap();
    assert_eq!(set.fs_footprint().unwrap(), full);
    assert!(matches!(set.allocate_range(PPtr::new(id, 100), 4096), Err(Error::Misaligned { .. })));
    assert!(set.allocate_range(PPtr::new(id, 4096), 1 << 30).is_err());
    assert!(set.allocate_range(PPtr::new(99, 0), 4096).is_err());
    set.store_u64(g, 7, Release).unwrap();
    set.persist(g, 8).unwrap();
    assert_eq!(set.load_u64(g, Acquire).unwrap(), 7);
    let sim = PoolSet::create_sim(&opts()).unwrap();
    assert!(matches!(sim.fs_footprint(), Err(Error::InvalidArgument(_))));
}
