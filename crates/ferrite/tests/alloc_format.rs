//! PAllocator's on-media format: the stored version-1 fixture opens with the current code and
//! holds what it held when it was written, the current code writes exactly the version-1 bytes
//! for the same operations, and corrupted anchors, segment headers, pages, list links and redo
//! items are typed `Corrupted` (or `Incompatible`) errors in every build profile — never a
//! panic, an overflow or an out-of-bounds index.
//!
//! The fixture (`tests/fixtures/alloc-v1.txt`) stores only the allocator's bytes: the non-zero
//! 64-byte lines of every segment's data area. The test rebuilds a pool set of the recorded
//! segment size around them (the pool set's own header format is pinned by pmem's fixtures),
//! so the file stays a few KiB.
//!
//! The corruption fuzz loop prints its seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;

/// Three 64 KiB pages per segment (two usable in a small segment): the smallest segments that
/// make pages fill, segments move to the full list and back to the free list in a few
/// operations.
const SEG: u64 = 3 * 64 * 1024 + 4096;
const SLOTS: u32 = 3;
/// The pointer table: 64 slots of 16 bytes.
const TABLE: u64 = 1024;
const FIXTURE_V1: &str = "tests/fixtures/alloc-v1.txt";
const FIXTURE_V2: &str = "tests/fixtures/alloc-v2.txt";

fn opts() -> Options {
    Options::default().layout("alloc-fixture").segment_size(SEG)
}

fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

/// The fixture's operations: (table slot, size) allocations, each stamped with `0xF1_0000 + i`
/// in its first word; then the frees.
const ALLOCS: [(u64, u64); 10] = [
    (1, 1),
    (2, 64),
    (3, 100),
    (4, 1000),
    (5, 4096),
    (6, 15_360),
    (7, 8192),
    (8, 200),
    (9, 15_360),
    (10, 2048),
];
const FREES: [u64; 4] = [3, 9, 10, 8];

fn stamp_of(i: u64) -> u64 {
    0xF1_0000 + i
}

/// Runs the fixture's operations on a new pool set in `dir`; returns the closed set's dump.
fn build(dir: &Path) -> String {
    // The bytes depend on the slot that runs the operations: always slot 0.
    PAllocator::bind_thread_to_slot(0);
    let set = PoolSet::create(dir, &opts()).unwrap();
    let a = PAllocator::create(Arc::new(set), SLOTS).unwrap();
    let table = a.allocate(TABLE, a.root_location()).unwrap();
    let s = a.pool().clone();
    let g = s.resolve_range(table, TABLE).unwrap();
    for i in 0..TABLE / 16 {
        s.store_u64(g + i * 16, u64::MAX, Ordering::Relaxed).unwrap();
        s.store_u64(g + i * 16 + 8, 0, Ordering::Relaxed).unwrap();
    }
    s.persist(g, TABLE).unwrap();
    for (i, &(k, size)) in ALLOCS.iter().enumerate() {
        let p = a.allocate(size, slot(table, k)).unwrap();
        let b = s.resolve_range(p, 8).unwrap();
        s.store_u64(b, stamp_of(i as u64), Ordering::Relaxed).unwrap();
        s.persist(b, 8).unwrap();
    }
    for &k in &FREES {
        a.deallocate(slot(table, k)).unwrap();
    }
    a.check().unwrap();
    drop(s);
    let set = a.into_pool();
    let text = dump(&set);
    Arc::into_inner(set).unwrap().close().unwrap();
    text
}

/// The non-zero 64-byte lines of every segment's data area, as text.
fn dump(set: &PoolSet) -> String {
    let mut out = String::new();
    writeln!(out, "segment_size {SEG}").unwrap();
    for seg in set.segments() {
        writeln!(out, "segment {}", seg.id).unwrap();
        let mut line = [0u8; 64];
        for off in (0..seg.data_len).step_by(64) {
            set.read_into(seg.data_offset + off, &mut line).unwrap();
            if line.iter().any(|&b| b != 0) {
                let hex: String = line.iter().map(|b| format!("{b:02x}")).collect();
                writeln!(out, "{} {off:x} {hex}", seg.id).unwrap();
            }
        }
    }
    out
}

/// The fixture without its comment lines.
fn fixture_text(which: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(which);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect()
}

/// Rebuilds a pool set in `dir` from the fixture text: a new set of the recorded segment size,
/// grown to the recorded segments, each data area overwritten with the stored lines.
fn restore(dir: &Path, text: &str) -> Arc<PoolSet> {
    let mut lines = text.lines();
    let size: u64 = lines
        .next()
        .and_then(|l| l.strip_prefix("segment_size "))
        .and_then(|v| v.parse().ok())
        .expect("segment_size line");
    let set = PoolSet::create(dir, &Options::default().layout("alloc-fixture").segment_size(size))
        .unwrap();
    for l in lines {
        if let Some(id) = l.strip_prefix("segment ") {
            let id: u64 = id.parse().unwrap();
            if id != 0 {
                assert_eq!(set.grow().unwrap(), id, "segments are recreated in order");
            }
            continue;
        }
        let f: Vec<&str> = l.split(' ').collect();
        let (id, off) = (f[0].parse::<u64>().unwrap(), u64::from_str_radix(f[1], 16).unwrap());
        let bytes: Vec<u8> =
            (0..64).map(|i| u8::from_str_radix(&f[2][2 * i..2 * i + 2], 16).unwrap()).collect();
        let g = set.resolve_range(PPtr::new(id, off), 64).unwrap();
        set.write_bytes(g, &bytes).unwrap();
        set.persist(g, 64).unwrap();
    }
    Arc::new(set)
}

/// Writes the version-1 fixture. Run it only to add a fixture for a NEW format version (keep
/// the old file and its test: old pools must still open):
/// `cargo test -p ferrite --test alloc_format -- --ignored generate_v2_fixture`. (The
/// version-1 fixture was generated the same way by the version-1 code; it is kept to prove
/// that version-1 pools still open.)
#[test]
#[ignore = "writes tests/fixtures/alloc-v2.txt; run by hand for a new format version"]
fn generate_v2_fixture() {
    let dir = TestDir::new("alloc-fixture-gen");
    let text = build(&dir.join("set"));
    let header = "# PAllocator anchor format version 2: the non-zero 64-byte lines of each segment's\n\
                  # data area (segment id, offset in hex, 64 bytes in hex) after the operations of\n\
                  # crates/ferrite/tests/alloc_format.rs::build. Generated by the ignored test\n\
                  # generate_v2_fixture; never edit by hand.\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE_V2);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, format!("{header}{text}")).unwrap();
}

/// The stored version-1 pool opens with the current code (upgraded to version 2) and holds
/// what was written: three slots, the table in the root, every live block with its stamp, the
/// freed ones null, and the lists `check()` expects.
#[test]
fn the_v1_fixture_opens_and_holds_its_blocks() {
    fixture_opens_and_holds_its_blocks(FIXTURE_V1);
}

/// The same for the stored version-2 pool.
#[test]
fn the_v2_fixture_opens_and_holds_its_blocks() {
    fixture_opens_and_holds_its_blocks(FIXTURE_V2);
}

fn fixture_opens_and_holds_its_blocks(which: &str) {
    let dir = TestDir::new("alloc-fixture-open");
    holds_the_fixture_blocks(restore(&dir.join("set"), &fixture_text(which)));
}

/// Opens the allocator on `set` (a restored fixture) and checks the fixture's blocks.
fn holds_the_fixture_blocks(set: Arc<PoolSet>) {
    let a = PAllocator::open(set).unwrap();
    assert_eq!(a.slots(), SLOTS);
    assert_eq!(a.pool().segment_size(), SEG);
    let s = a.pool();
    let table = s.load_pptr(s.resolve(a.root_location()).unwrap()).unwrap();
    assert_eq!(table, PPtr::new(1, 0x100c0), "the table: the first 1 KiB block of segment 1");
    let mut live = BTreeMap::new();
    for (i, &(k, _)) in ALLOCS.iter().enumerate() {
        let p = s.load_pptr(s.resolve(slot(table, k)).unwrap()).unwrap();
        if FREES.contains(&k) {
            assert!(p.is_null(), "slot {k} was freed, holds {p:?}");
            continue;
        }
        let got = s.load_u64(s.resolve_range(p, 8).unwrap(), Ordering::Acquire).unwrap();
        assert_eq!(got, stamp_of(i as u64), "slot {k} ({p:?}) lost its stamp");
        live.insert(k, p);
    }
    // Pinned addresses: class pages are taken in order, two usable pages per segment.
    let want_live = [
        (1, PPtr::new(1, 0x20800)),
        (2, PPtr::new(1, 0x20840)),
        (4, PPtr::new(1, 0x104c0)),
        (5, PPtr::new(2, 0x20080)),
        (6, PPtr::new(3, 0x10080)),
        (7, PPtr::new(3, 0x20080)),
    ];
    assert_eq!(live, BTreeMap::from(want_live));
    let r = a.check().unwrap();
    assert_eq!(r.allocated_blocks, 1 + live.len() as u64, "{r:?}");
    let mut allocated = r.allocated.clone();
    allocated.sort_by_key(|p| (p.segment, p.offset));
    let mut want: Vec<PPtr> = live.values().copied().chain([table]).collect();
    want.sort_by_key(|p| (p.segment, p.offset));
    assert_eq!(allocated, want);
    assert_eq!(r.segments, (1, 2, 1), "active, full, free small segments: {r:?}");
    assert_eq!(r.free_blocks, 1074, "{r:?}");
    let classes: Vec<u64> = r.pages.keys().copied().collect();
    assert_eq!(classes, [64, 1024, 4096, 8192, 15_360], "{r:?}");
    // The allocator keeps working on the old pool.
    let p = a.allocate(300, slot(table, 3)).unwrap();
    assert!(!p.is_null());
    a.deallocate(slot(table, 3)).unwrap();
    a.check().unwrap();
}

/// The current code writes exactly the version-2 bytes for the fixture's operations: a layout
/// or protocol change that alters the media shows up here, and needs a new format version (and
/// fixture), not a silent edit.
#[test]
fn the_current_code_writes_the_v2_bytes() {
    let dir = TestDir::new("alloc-fixture-same");
    let now = build(&dir.join("set"));
    let want = fixture_text(FIXTURE_V2);
    if now != want {
        let first = now
            .lines()
            .zip(want.lines())
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("now:     {a}\nfixture: {b}"))
            .unwrap_or_else(|| "one is a prefix of the other".into());
        panic!("the allocator's bytes differ from the v2 fixture; first difference:\n{first}");
    }
}

// ----- corrupted pools -----

/// Version-1 offsets (docs/design/format.md): anchor fields, slot blocks, segment and page
/// headers.
mod v1 {
    pub const A_VERSION_SLOTS: u64 = 8;
    pub const A_SEGMENT: u64 = 40;
    pub const A_CRC: u64 = 48;
    pub const A_ROOT: u64 = 64;
    pub const A_FREE_SEGS: u64 = 128;
    pub const SLOT0: u64 = 1024;
    pub const SLOT_BYTES: u64 = 1152;
    pub const S_ENTRIES: u64 = 64;
    pub const S_ASL: u64 = 448;
    pub const S_PLM: u64 = 512;
    pub const G_NEXT: u64 = 0;
    pub const G_COUNTS: u64 = 24;
    pub const P_STATE: u64 = 16;
}

fn seed() -> u64 {
    ferrite::pmem::internals::testing::test_seed()
}

/// The fixture restored into `dir`, with `words` (segment, data offset, value) written over
/// it; with `fix_crc` the anchor's checksum is recomputed so the corruption passes it.
fn corrupted(dir: &Path, words: &[(u64, u64, u64)], fix_crc: bool) -> Arc<PoolSet> {
    let set = restore(dir, &fixture_text(FIXTURE_V2));
    for &(seg, off, v) in words {
        let g = set.resolve_range(PPtr::new(seg, off), 8).unwrap();
        set.store_u64(g, v, Ordering::Relaxed).unwrap();
        set.persist(g, 8).unwrap();
    }
    if fix_crc {
        let g = set.resolve_range(PPtr::new(0, 0), 64).unwrap();
        let mut b = [0u8; 40];
        set.read_into(g + 8, &mut b).unwrap();
        set.store_u64(g + v1::A_CRC, u64::from(crc32c::crc32c(&b)), Ordering::Relaxed).unwrap();
        set.persist(g + v1::A_CRC, 8).unwrap();
    }
    set
}

fn is_corrupted<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Corrupted { .. }))
}

/// The `seq_slot` word, armed header and `check` word of a version-2 journal of slot `slot`
/// with sequence number `seq`, no caller's location, and `entries` (docs/design/allocator.md,
/// "A journal's first line": crc32c in the header and crc32 in `check`, both over the count,
/// `seq_slot`, caller, expect, new and the entries).
fn journal_header(seq: u64, slot: u64, entries: &[(u64, u64)]) -> (u64, u64, u64) {
    let n = entries.len() as u64;
    let seq_slot = seq << 8 | slot;
    let mut bytes = Vec::new();
    for w in [n, seq_slot, u64::MAX, u64::MAX, 0, u64::MAX, 0] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    for &(k, v) in entries {
        bytes.extend_from_slice(&k.to_le_bytes());
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let header = n | 0x524C << 16 | u64::from(crc32c::crc32c(&bytes)) << 32;
    (seq_slot, header, u64::from(crc32fast::hash(&bytes)))
}

/// Regression: values read from PM fed unchecked additions and indexes (a list link's offset
/// plus a field offset, a page's free count plus one, a segment's used count minus one), so a
/// corrupt pool panicked with an overflow in checked builds and computed wild addresses in
/// release builds. Each corrupted field is now a `Corrupted` error.
#[test]
fn corrupted_fields_are_typed_errors() {
    let dir = TestDir::new("alloc-corrupt");
    let n = std::sync::atomic::AtomicU64::new(0);
    let fresh = |words: &[(u64, u64, u64)], fix_crc: bool| {
        let i = n.fetch_add(1, Ordering::Relaxed);
        PAllocator::bind_thread_to_slot(0);
        corrupted(&dir.join(&format!("set{i}")), words, fix_crc)
    };
    let table = PPtr::new(1, 0x100c0);
    let page64 = 0x20000; // segment 1's page of 64-byte blocks (listed in slot 0's class 0)

    // A page's state word (free-list head, counts, class) that is garbage.
    let a = PAllocator::open(fresh(&[(1, page64 + v1::P_STATE, u64::MAX)], false)).unwrap();
    assert!(is_corrupted(a.check()));
    assert!(is_corrupted(a.allocate(64, slot(table, 20))));
    // A free-list head that is not the start of a block.
    let a = PAllocator::open(fresh(&[(1, page64 + v1::P_STATE, 0x03e0_0000_03de_0001)], false))
        .unwrap();
    assert!(is_corrupted(a.check()));
    assert!(is_corrupted(a.allocate(64, slot(table, 20))));
    // A segment header's page counts.
    let a = PAllocator::open(fresh(&[(1, v1::G_COUNTS, u64::MAX)], false)).unwrap();
    assert!(is_corrupted(a.check()));
    assert!(is_corrupted(a.deallocate(slot(table, 1)).map(|_| ())) || a.check().is_err());
    // A class-list link whose offset overflows when a field offset is added.
    let cls = v1::SLOT0 + v1::S_PLM;
    let a = PAllocator::open(fresh(&[(0, cls + 8, u64::MAX - 7)], false)).unwrap();
    assert!(is_corrupted(a.check()));
    assert!(is_corrupted(a.allocate(64, slot(table, 20))));
    // Segment-list links: an unknown segment, an offset inside a segment, segment 0.
    for bad in [(9999, 0), (1, 4096), (0, 0), (1, u64::MAX - 7)] {
        let words = [(0, v1::SLOT0 + v1::S_ASL, bad.0), (0, v1::SLOT0 + v1::S_ASL + 8, bad.1)];
        assert!(is_corrupted(PAllocator::open(fresh(&words, false))), "active head {bad:?}");
        let words = [(0, v1::A_FREE_SEGS, bad.0), (0, v1::A_FREE_SEGS + 8, bad.1)];
        assert!(is_corrupted(PAllocator::open(fresh(&words, false))), "free head {bad:?}");
    }
    // A segment's next link making a cycle (segment 4 is the free list's only segment).
    let words = [(4, v1::G_NEXT, 4), (4, v1::G_NEXT + 8, 0)];
    assert!(is_corrupted(PAllocator::open(fresh(&words, false))), "cycle");
    // A committed journal (its checksum matches; its seq is above anything slot 1 committed)
    // whose address is outside the pool, or not 8-byte aligned.
    for addr in [9999 << 40, 1 << 40 | ((1 << 40) - 8), 1 << 40 | 0x10003] {
        let item = v1::SLOT0 + v1::SLOT_BYTES; // slot 1's item
        let seq = 1 << 40;
        let (seq_slot, h, check) = journal_header(seq, 1, &[(addr, 7)]);
        let words = [
            (0, item + 8, seq_slot),
            (0, item + 16, check),
            (0, item + v1::S_ENTRIES, addr),
            (0, item + v1::S_ENTRIES + 8, 7),
            (0, item, h),
        ];
        assert!(is_corrupted(PAllocator::open(fresh(&words, false))), "redo address {addr:#x}");
        // The same journal with a `check` word that does not match (the header's crc32c
        // does): a commit that did not complete, discarded, never replayed.
        let mut torn = words;
        torn[1].2 = check ^ 1;
        let a = PAllocator::open(fresh(&torn, false)).expect("a torn journal is discarded");
        a.check().unwrap();
    }
    // An armed header of an impossible count.
    let words = [(0, v1::SLOT0, 200 | 0x524C << 16)];
    assert!(is_corrupted(PAllocator::open(fresh(&words, false))), "redo count");
    // Anchor fields that pass the checksum (recomputed) but not validation: a segment size
    // without two pages, one larger than the segments are, more slots than fit.
    for (off, v) in [
        (v1::A_SEGMENT, 0),
        (v1::A_SEGMENT, u64::MAX),
        (v1::A_SEGMENT, 4 * SEG),
        (v1::A_VERSION_SLOTS, 1 | 57 << 32),
        (v1::A_VERSION_SLOTS, 1 | 56 << 32),
    ] {
        assert!(
            is_corrupted(PAllocator::open(fresh(&[(0, off, v)], true))),
            "anchor {off} = {v:#x}"
        );
    }
    // Without the recomputed checksum any anchor change is caught by it.
    assert!(is_corrupted(PAllocator::open(fresh(&[(0, v1::A_SEGMENT, 0)], false))));
}

/// Seeded fuzzing of the anchor, the slot blocks, the segment headers and the page headers:
/// after 1–4 corrupted words (the anchor checksum recomputed half the time), open, check,
/// allocate and free return `Ok` or a typed error of the allocator — never panic, never an
/// unexpected error kind.
#[test]
fn corruption_fuzz_never_panics() {
    let seed = seed();
    let mut rng = SplitMix64::new(seed);
    let dir = TestDir::new("alloc-fuzz");
    PAllocator::bind_thread_to_slot(0);
    for round in 0..150u64 {
        let mut words = Vec::new();
        for _ in 0..1 + rng.next_u64() % 4 {
            let (seg, off) = match rng.next_u64() % 4 {
                0 => (0, rng.next_u64() % (v1::A_ROOT + 80) / 8 * 8), // anchor words
                1 => (0, v1::SLOT0 + rng.next_u64() % (u64::from(SLOTS) * v1::SLOT_BYTES) / 8 * 8),
                2 => (1 + rng.next_u64() % 4, rng.next_u64() % 320 / 8 * 8), // segment headers
                _ => (
                    1 + rng.next_u64() % 4,
                    0x10000 * (1 + rng.next_u64() % 2) + rng.next_u64() % 128 / 8 * 8,
                ),
            };
            let g = rng.next_u64();
            let v = match g % 5 {
                0 => 0,
                1 => u64::MAX,
                2 => g >> 3,
                3 => u64::MAX - (g % 64),
                _ => 1 << (g % 64),
            };
            words.push((seg, off, v));
        }
        let set = corrupted(&dir.join(&format!("set{round}")), &words, rng.next_u64() & 1 == 0);
        let what = format!("round {round}, words {words:?}");
        let ok_kind = |e: &Error| {
            matches!(
                e,
                Error::Corrupted { .. }
                    | Error::Incompatible { .. }
                    | Error::InvalidArgument(_)
                    | Error::PoolFull { .. }
                    | Error::Poisoned
            )
        };
        let a = match PAllocator::open(set) {
            Ok(a) => a,
            Err(e) => {
                assert!(ok_kind(&e), "{what}: open: {e:?}");
                continue;
            }
        };
        if let Err(e) = a.check() {
            assert!(ok_kind(&e), "{what}: check: {e:?}");
        }
        // The application's table, if the root still reaches it.
        let s = a.pool().clone();
        let Ok(root) = s.resolve(a.root_location()) else { continue };
        let table = s.load_pptr(root).unwrap();
        if table != PPtr::new(1, 0x100c0) {
            continue;
        }
        for (k, size) in [(20, 64), (21, 1000), (22, 15_360), (23, 200)] {
            if let Err(e) = a.allocate(size, slot(table, k)) {
                assert!(ok_kind(&e), "{what}: allocate {size}: {e:?}");
            }
        }
        for k in [1, 2, 4, 20] {
            if let Err(e) = a.deallocate(slot(table, k)) {
                assert!(ok_kind(&e), "{what}: deallocate slot {k}: {e:?}");
            }
        }
        drop(a);
        drop(s);
    }
}

/// An upgrade from version 1 rewrites two anchor words in one line (the version word and the
/// checksum) after persisting everything else; a crash can leave either one new. `open`
/// recognises both states as an interrupted upgrade (the checksum matches the words with the
/// other version) and finishes it, and the pool then opens as version 2 and holds its blocks.
#[test]
fn an_interrupted_upgrade_finishes_at_open() {
    const EXT_BASE: u64 = 16_768; // 3 slots: slot blocks, then 24 records of 512 B
    const EXT_BYTES: u64 = 512;
    for new_word in [v1::A_VERSION_SLOTS, v1::A_CRC] {
        let dir = TestDir::new("alloc-upgrade-torn");
        let set = restore(&dir.join("set"), &fixture_text(FIXTURE_V1));
        let g =
            set.resolve_range(PPtr::new(0, 0), EXT_BASE + u64::from(SLOTS) * EXT_BYTES).unwrap();
        // What the upgrade persists first: the extension blocks' empty lists (a null
        // big-segment list head, then 31 bucket heads of u64::MAX; the records area stays
        // zero: every journal disarmed).
        for i in 0..u64::from(SLOTS) {
            let x = g + EXT_BASE + i * EXT_BYTES;
            set.store_u64(x, u64::MAX, Ordering::Relaxed).unwrap();
            for b in 0..31 {
                set.store_u64(x + 16 + b * 8, u64::MAX, Ordering::Relaxed).unwrap();
            }
        }
        set.persist(g + EXT_BASE, u64::from(SLOTS) * EXT_BYTES).unwrap();
        // Then only one of the two anchor words.
        let mut words = [0u8; 40];
        set.read_into(g + 8, &mut words).unwrap();
        let v2 = 2 | u64::from(SLOTS) << 32;
        words[..8].copy_from_slice(&v2.to_le_bytes());
        let crc = u64::from(crc32c::crc32c(&words));
        let (off, v) = if new_word == v1::A_CRC { (v1::A_CRC, crc) } else { (new_word, v2) };
        set.store_u64(g + off, v, Ordering::Relaxed).unwrap();
        set.persist(g + off, 8).unwrap();
        drop(set);
        let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
        let a = PAllocator::open(Arc::new(set)).unwrap();
        a.check().unwrap();
        a.close().unwrap();
        let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
        let g = set.resolve_range(PPtr::new(0, 0), 64).unwrap();
        assert_eq!(set.load_u64(g + v1::A_VERSION_SLOTS, Ordering::Acquire).unwrap(), v2);
        assert_eq!(set.load_u64(g + v1::A_CRC, Ordering::Acquire).unwrap(), crc, "finished");
        holds_the_fixture_blocks(Arc::new(set));
    }
}
