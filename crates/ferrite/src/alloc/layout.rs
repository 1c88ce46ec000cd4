//! On-media layout of PAllocator (anchor format version 2): the anchor, the per-slot blocks,
//! the thread records, the per-slot extension blocks, small-segment headers and page headers
//! as `#[repr(C)]` structs, the size classes and page geometry. Drawn in
//! `docs/design/allocator.md` ("Layouts"). Version 1 differs only in what it leaves zero (the
//! journal head's words after the header, `committed`, the records and the extension blocks)
//! and in its journal checksum; `open` upgrades it.
//!
//! # Invariants
//! - Every field offset the allocator uses is derived from these structs (`offset_of!`), and the
//!   asserts below pin each struct's size and each offset to the format: a change fails to
//!   compile rather than silently moving bytes (the stored fixtures
//!   `tests/fixtures/alloc-v1.txt` and `alloc-v2.txt` check the bytes themselves).
//! - Every `PPtr` field is 16-byte aligned, so both of its words share one cache line; null is
//!   segment word `u64::MAX`.
//! - Fields written while other threads read them are whole 8-byte words (conventions §2.3):
//!   the page state, the segment counts and the BlockEntry words (four `u16` per word).
//!
//! # Ordering and concurrency
//! This module only describes bytes; the protocols that write them (and their rules
//! P-ALLOC-n) live in `redo.rs`, `journal.rs`, `segments.rs`, `small.rs`, `big.rs`, `huge.rs`,
//! `defrag.rs` and `mod.rs`.

use core::mem::{offset_of, size_of};

use ferrite_pmem::PPtr;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// Bytes per page of a small segment (seed 001 §3.4.4).
pub const PAGE: u64 = 64 * 1024;
/// Most pages a segment can have (the page bitmap's size).
pub const MAX_PAGES: u64 = 2048;

/// The 40 size classes, all multiples of 64 bytes (spec ⟨P⟩ table of
/// `../shared/specs/scm-and-pallocator.md` §3.3).
pub const CLASSES: [u64; 40] = [
    64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960,
    1024, // 16 × 64
    1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048, // 8 × 128
    2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096, // 8 × 256
    4608, 5120, 6144, 7168, 8192, 10240, 12288, 15360, // 8 larger
];

/// The largest request the small allocator serves.
pub const MAX_SMALL: u64 = CLASSES[CLASSES.len() - 1];

/// The class of `size` (1..=MAX_SMALL bytes).
pub fn class_of(size: u64) -> Option<usize> {
    CLASSES.iter().position(|&c| c >= size)
}

/// Blocks per page of class `c`, and the offset of the first block: the page header (64 B) and
/// one 2-byte BlockEntry per block come first, blocks start 64-byte aligned.
///
/// `c` must be a class index (`< CLASSES.len()`): callers validate classes read from PM first.
pub fn page_geometry(c: usize) -> (u64, u64) {
    let size = CLASSES[c];
    let mut n = (PAGE - P_ENTRIES) / size;
    loop {
        let start = (P_ENTRIES + 2 * n).div_ceil(64) * 64;
        if start + n * size <= PAGE {
            return (n, start);
        }
        n -= 1;
    }
}

// ----- anchor (segment 0, data offset 0) -----

/// The anchor: segment 0's data area starts with it; the slot blocks follow.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Anchor {
    /// [`ANCHOR_MAGIC`] once creation finished (written last, P-ALLOC-5).
    pub magic: u64,
    /// Format version (low 32 bits) | slot count (high 32 bits).
    pub version_slots: u64,
    /// Page size (low 32 bits) | class count (high 32 bits).
    pub geometry: u64,
    /// Compatible feature flags (none yet).
    pub compat: u64,
    /// Incompatible feature flags: versions 1 and 2 reject any.
    pub incompat: u64,
    /// Bytes per small segment (the pool set's segment size at creation; restored at open).
    pub segment: u64,
    /// crc32c of bytes 8..48 (the words above, from `version_slots` to `segment`), as u64.
    pub crc: u64,
    /// Zero.
    pub pad0: u64,
    /// Entry point: the application's root `PPtr`.
    pub root: PPtr,
    /// Zero.
    pub pad1: [u64; 6],
    /// Head of the shared free-segment list.
    pub free_segs: PPtr,
    /// Zero; reserved.
    pub reserved: [u64; 110],
}

pub const ANCHOR_MAGIC: u64 = u64::from_le_bytes(*b"FERRPALC");
/// The format this build writes.
pub const ANCHOR_VERSION: u32 = 2;
/// The format `open` upgrades from.
pub const ANCHOR_VERSION_1: u32 = 1;
pub const A_MAGIC: u64 = offset_of!(Anchor, magic) as u64;
pub const A_VERSION_SLOTS: u64 = offset_of!(Anchor, version_slots) as u64;
pub const A_GEOMETRY: u64 = offset_of!(Anchor, geometry) as u64;
pub const A_SEGMENT: u64 = offset_of!(Anchor, segment) as u64;
pub const A_CRC: u64 = offset_of!(Anchor, crc) as u64;
pub const A_ROOT: u64 = offset_of!(Anchor, root) as u64;
pub const A_FREE_SEGS: u64 = offset_of!(Anchor, free_segs) as u64;
/// Start of the slot blocks.
pub const A_SLOTS: u64 = size_of::<Anchor>() as u64;
/// The anchor bytes the checksum covers: `version_slots` up to (not including) `crc`.
pub const A_CRC_RANGE: std::ops::Range<usize> = A_VERSION_SLOTS as usize..A_CRC as usize;

/// The anchor's geometry word for this build.
pub const GEOMETRY: u64 = PAGE | (CLASSES.len() as u64) << 32;

impl Anchor {
    /// An anchor of the current version with `slots` slots and null pointers, its checksum
    /// set, its magic still 0 (creation stores the magic last).
    pub fn new(slots: u32, segment: u64) -> Anchor {
        let mut a = Anchor::new_zeroed();
        a.version_slots = u64::from(ANCHOR_VERSION) | u64::from(slots) << 32;
        a.geometry = GEOMETRY;
        a.segment = segment;
        a.root = PPtr::NULL;
        a.free_segs = PPtr::NULL;
        a.crc = u64::from(a.checksum());
        a
    }

    /// crc32c of the checksummed bytes.
    pub fn checksum(&self) -> u32 {
        crc32c::crc32c(&self.as_bytes()[A_CRC_RANGE])
    }

    /// Format version.
    pub fn version(&self) -> u32 {
        self.version_slots as u32
    }

    /// This anchor with its version word set to `version` and its checksum recomputed.
    pub fn with_version(mut self, version: u32) -> Anchor {
        self.version_slots = u64::from(version) | self.version_slots & !0xffff_ffff;
        self.crc = u64::from(self.checksum());
        self
    }

    /// Slot count.
    pub fn slots(&self) -> u32 {
        (self.version_slots >> 32) as u32
    }
}

// ----- journals: a slot's item and the thread records -----

/// Most word writes one operation may log (the largest, a free that empties a page of a full
/// segment and returns the segment, logs 20; the caller's location is not an entry).
pub const MAX_REDO: u64 = 24;

/// The first line of a journal (a slot's item or a thread record): the header word and the
/// fields the header's checksum covers besides the entries (`redo.rs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct JournalHead {
    /// 0 when disarmed; when armed, count (bits 0..16) | [`REDO_TAG`] (bits 16..32) | crc32c
    /// (bits 32..64) of the count, `seq_slot`, the caller fields and the entries (version 1: of
    /// the count and the entries).
    pub log: u64,
    /// The operation's sequence number in its slot (bits 8..64) | the slot it ran in (bits
    /// 0..8) ([`JournalHead::seq`], [`JournalHead::slot`]; version 1: zero).
    pub seq_slot: u64,
    /// The second checksum: crc32 (IEEE polynomial) of the same bytes as the header's
    /// crc32c, zero-extended. Both must match: 64 bits of check against a torn commit.
    pub check: u64,
    /// Packed address (`redo.rs`) of the caller's location, or [`NO_CALLER`].
    pub caller: u64,
    /// The pointer the caller's location held before the operation.
    pub expect: PPtr,
    /// The pointer the operation stores there.
    pub new: PPtr,
}

/// Largest sequence number a journal can carry (56 bits: at 10 million operations per second
/// in one slot, more than 200 years).
pub const MAX_SEQ: u64 = (1 << 56) - 1;

impl JournalHead {
    /// The `seq_slot` word of operation `seq` in slot `slot` (`seq <= MAX_SEQ`, `slot < 256`).
    pub const fn pack_seq(seq: u64, slot: u32) -> u64 {
        seq << 8 | slot as u64 & 0xff
    }

    /// The operation's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq_slot >> 8
    }

    /// The slot the operation ran in.
    pub fn slot(&self) -> u32 {
        (self.seq_slot & 0xff) as u32
    }
}

/// `JournalHead::caller` of an operation without a caller's location.
pub const NO_CALLER: u64 = u64::MAX;
pub const J_LOG: u64 = offset_of!(JournalHead, log) as u64;
pub const J_SEQ: u64 = offset_of!(JournalHead, seq_slot) as u64;
pub const J_CHECK: u64 = offset_of!(JournalHead, check) as u64;
pub const J_CALLER: u64 = offset_of!(JournalHead, caller) as u64;
pub const J_EXPECT: u64 = offset_of!(JournalHead, expect) as u64;
pub const J_NEW: u64 = offset_of!(JournalHead, new) as u64;
/// Offset of a journal's entries (its second line).
pub const J_ENTRIES: u64 = size_of::<JournalHead>() as u64;

/// A thread record (segment 0, [`records_base`] + i × [`RECORD_BYTES`]): a journal leased by
/// one thread at a time (P-ALLOC-8).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Record {
    /// The journal's first line.
    pub head: JournalHead,
    /// The redo entries.
    pub entries: [RedoEntry; MAX_REDO as usize],
    /// Zero.
    pub pad: [u64; 8],
}

/// Thread records per slot (a pool with `n` slots has `min(8 n, MAX_RECORDS)`).
pub const RECORDS_PER_SLOT: u32 = 8;
/// Most thread records a pool has.
pub const MAX_RECORDS: u32 = 64;
/// Bytes per record.
pub const RECORD_BYTES: u64 = size_of::<Record>() as u64;

/// Thread records of a pool with `slots` slots (fixed by the slot count, which is fixed at
/// creation).
pub const fn record_count(slots: u32) -> u32 {
    let n = slots * RECORDS_PER_SLOT;
    if n < MAX_RECORDS { n } else { MAX_RECORDS }
}

/// Segment 0 offset of record 0: right after the slot blocks.
pub const fn records_base(slots: u32) -> u64 {
    A_SLOTS + slots as u64 * SLOT_BYTES
}

/// Per-slot extension block (segment 0, [`ext_base`] + slot × [`EXT_BYTES`]): the big
/// allocator's per-slot roots (`big.rs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SlotExt {
    /// Head of the slot's list of big segments (linked through their headers' `next`).
    pub big_segments: PPtr,
    /// Heads of the slot's free big-block lists, one per size bucket ([`big_bucket`]): a
    /// packed unit reference ([`unit_ref`]) or [`BIG_NIL`]. One word each, so a head update
    /// logs one word.
    pub big_free: [u64; BIG_BUCKETS],
    /// Zero.
    pub pad: [u64; 31],
}

impl SlotExt {
    /// An extension block with empty lists.
    pub fn new() -> SlotExt {
        SlotExt { big_segments: PPtr::NULL, big_free: [BIG_NIL; BIG_BUCKETS], pad: [0; 31] }
    }
}

/// Bytes per extension block.
pub const EXT_BYTES: u64 = size_of::<SlotExt>() as u64;
/// Segment 0 offset of slot 0's extension block: right after the records.
pub const fn ext_base(slots: u32) -> u64 {
    records_base(slots) + record_count(slots) as u64 * RECORD_BYTES
}
pub const X_BIG_SEGMENTS: u64 = offset_of!(SlotExt, big_segments) as u64;
pub const X_BIG_FREE: u64 = offset_of!(SlotExt, big_free) as u64;

/// Bytes of segment 0 an anchor with `slots` slots occupies.
pub const fn anchor_end(slots: u32) -> u64 {
    ext_base(slots) + slots as u64 * EXT_BYTES
}

// ----- slot block -----

/// One redo entry: a packed (segment, offset) address (`segment << 40 | offset`, see `redo.rs`)
/// and the new value of the word there.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RedoEntry {
    /// Packed address.
    pub addr: u64,
    /// New value.
    pub value: u64,
}

/// A slot's block in the anchor (18 lines): its recovery item and its lists.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SlotBlock {
    /// The slot item's first line (the journal of threads that hold no record).
    pub head: JournalHead,
    /// The redo entries, line-aligned so that a log of up to four writes (an allocation) is
    /// one line.
    pub entries: [RedoEntry; MAX_REDO as usize],
    /// Active-segments list head.
    pub active: PPtr,
    /// Full-segments list head.
    pub full: PPtr,
    /// The sequence number of the slot's last committed operation (P-ALLOC-1).
    pub committed: u64,
    /// Zero.
    pub pad1: [u64; 3],
    /// One page-list head per class (pages of the class with a free block).
    pub classes: [PPtr; CLASSES.len()],
}

impl SlotBlock {
    /// A disarmed slot block with empty lists.
    pub fn new() -> SlotBlock {
        let mut b = SlotBlock::new_zeroed();
        b.head.caller = NO_CALLER;
        b.head.expect = PPtr::NULL;
        b.head.new = PPtr::NULL;
        b.active = PPtr::NULL;
        b.full = PPtr::NULL;
        b.classes = [PPtr::NULL; CLASSES.len()];
        b
    }
}

/// Bytes per slot block.
pub const SLOT_BYTES: u64 = size_of::<SlotBlock>() as u64;
/// Most slots an anchor page can hold.
pub const MAX_SLOTS: u32 = ((PAGE - A_SLOTS) / SLOT_BYTES) as u32;
pub const S_LOG: u64 = offset_of!(SlotBlock, head) as u64 + J_LOG;
pub const S_ENTRIES: u64 = offset_of!(SlotBlock, entries) as u64;
pub const S_COMMITTED: u64 = offset_of!(SlotBlock, committed) as u64;
pub const S_ASL: u64 = offset_of!(SlotBlock, active) as u64;
pub const S_FSL: u64 = offset_of!(SlotBlock, full) as u64;
pub const S_PLM: u64 = offset_of!(SlotBlock, classes) as u64;
/// Bytes per redo entry.
pub const ENTRY_BYTES: u64 = size_of::<RedoEntry>() as u64;
/// Bytes per `PPtr`.
pub const PPTR_BYTES: u64 = size_of::<PPtr>() as u64;
/// Tag of an armed header ("RL").
pub const REDO_TAG: u64 = 0x524C;

/// Offset of class `c`'s page-list head in a slot block.
pub const fn class_head(c: usize) -> u64 {
    S_PLM + c as u64 * PPTR_BYTES
}

// ----- small segment header (data offset 0 of the segment: its page 0) -----

/// The header of a small segment.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SegmentHeader {
    /// Next segment of the list the segment is in.
    pub next: PPtr,
    /// Slot + 1 of the owner; 0 in the free-segment list.
    pub owner: u64,
    /// Used pages (low 32 bits) | usable pages (high 32 bits).
    pub counts: u64,
    /// [`SEG_MAGIC`] once initialised.
    pub magic: u64,
    /// `pad[0]`: the big allocator's clean-table mark ([`G_CLEAN`]); `pad[1]`: 1 once a
    /// page of the segment may have been punched (`defrag.rs`, a hint that only decides
    /// whether file space is allocated again before use); `pad[2]` zero.
    pub pad: [u64; 3],
    /// Bit p set iff page p serves a class.
    pub bitmap: [u64; (MAX_PAGES / 64) as usize],
}

impl SegmentHeader {
    /// A fresh header: no used page, in no list yet.
    pub fn new(owner: u32, usable_pages: u64) -> SegmentHeader {
        let mut h = SegmentHeader::new_zeroed();
        h.next = PPtr::NULL;
        h.owner = u64::from(owner);
        h.counts = usable_pages << 32;
        h.magic = SEG_MAGIC;
        h
    }
}

pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"FERRSMSG");
pub const G_NEXT: u64 = offset_of!(SegmentHeader, next) as u64;
pub const G_OWNER: u64 = offset_of!(SegmentHeader, owner) as u64;
pub const G_COUNTS: u64 = offset_of!(SegmentHeader, counts) as u64;
pub const G_MAGIC: u64 = offset_of!(SegmentHeader, magic) as u64;
pub const G_BITMAP: u64 = offset_of!(SegmentHeader, bitmap) as u64;
pub const G_BYTES: u64 = size_of::<SegmentHeader>() as u64;

/// Offset of the bitmap word holding page `pg`'s bit.
pub const fn bitmap_word(pg: u64) -> u64 {
    G_BITMAP + pg / 64 * 8
}

// ----- big segments (`big.rs`) -----

/// Bytes per unit of a big segment: big blocks are whole units, unit-aligned (hole punching
/// works on 4 KiB pages).
pub const UNIT: u64 = 4096;
/// Magic of a big segment's header (at [`G_MAGIC`]; the header is otherwise a
/// [`SegmentHeader`] with an empty bitmap and zero used pages).
pub const BIG_MAGIC: u64 = u64::from_le_bytes(*b"FERRBGSG");
/// The header word (the first pad word) saying that a segment on the free-segment list has a
/// clean unit table: [`TABLE_CLEAN`] there means every info word is zero but the first block
/// unit's (a big segment returned whole); anything else means the table must be zeroed before
/// the segment serves big blocks again.
pub const G_CLEAN: u64 = offset_of!(SegmentHeader, pad) as u64;
/// The value of [`G_CLEAN`] for a clean table.
pub const TABLE_CLEAN: u64 = u64::from_le_bytes(*b"BGCLEAN!");
/// Offset of a big segment's unit table (after the 320-byte header).
pub const BIG_TABLE: u64 = 512;
/// Size buckets of the free big-block lists.
pub const BIG_BUCKETS: usize = 31;
/// A null unit reference.
pub const BIG_NIL: u64 = u64::MAX;
/// Tag bits of every info and boundary-tag word (a zero info word is "not a block start").
pub const BIG_TAG: u64 = 0xB16 << 48;
/// Info-word flag: the block is allocated.
pub const BIG_USED: u64 = 1 << 32;
/// Info-word flag reserved for defragmentation (the block's pages are punched); always 0 in
/// this version, rejected as `Corrupted` when set.
pub const BIG_HOLE: u64 = 1 << 33;

/// One unit's entry in a big segment's unit table.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct UnitEntry {
    /// At a block's first unit: size in units | [`BIG_USED`] | [`BIG_TAG`]; 0 at every other unit.
    pub info: u64,
    /// At a block's last unit: size in units | [`BIG_TAG`] (the boundary tag); stale elsewhere.
    pub tag: u64,
    /// At a free block's first unit: the next free block of its bucket ([`unit_ref`] or [`BIG_NIL`]).
    pub next: u64,
    /// At a free block's first unit: the previous free block of its bucket, or [`BIG_NIL`].
    pub prev: u64,
}

pub const U_INFO: u64 = offset_of!(UnitEntry, info) as u64;
pub const U_TAG: u64 = offset_of!(UnitEntry, tag) as u64;
pub const U_NEXT: u64 = offset_of!(UnitEntry, next) as u64;
pub const U_PREV: u64 = offset_of!(UnitEntry, prev) as u64;
/// Bytes per unit entry.
pub const UNIT_ENTRY_BYTES: u64 = size_of::<UnitEntry>() as u64;

/// Offset of unit `u`'s entry in a big segment.
pub const fn unit_entry(u: u64) -> u64 {
    BIG_TABLE + u * UNIT_ENTRY_BYTES
}

/// A packed reference to unit `unit` of segment `seg` (a free-list link or bucket head).
pub const fn unit_ref(seg: u64, unit: u64) -> u64 {
    seg << 32 | unit
}

/// The size bucket of a free block of `units` units: two buckets per power of two
/// (`[2^k, 1.5·2^k)` and `[1.5·2^k, 2^(k+1))`), the last one open-ended.
pub const fn big_bucket(units: u64) -> usize {
    if units <= 1 {
        return 0;
    }
    let k = 63 - units.leading_zeros() as u64;
    let half = (units >> (k - 1)) & 1;
    let b = 2 * k + half;
    if b as usize >= BIG_BUCKETS { BIG_BUCKETS - 1 } else { b as usize }
}

// ----- page header -----

/// The header of a 64 KiB page; the BlockEntry array follows it.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PageHeader {
    /// Next page of the class list the page is in.
    pub next: PPtr,
    /// The [`PageState`] word.
    pub state: u64,
    /// Zero.
    pub pad: [u64; 5],
}

pub const P_NEXT: u64 = offset_of!(PageHeader, next) as u64;
pub const P_STATE: u64 = offset_of!(PageHeader, state) as u64;
/// The BlockEntry array (one `u16` per block, four per word).
pub const P_ENTRIES: u64 = size_of::<PageHeader>() as u64;
/// BlockEntry of an allocated block (not a 64-byte aligned offset, so never a free-list link).
pub const ALLOCATED: u16 = 0xFFFF;

/// The page state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageState {
    /// In-page offset of the first free block (0: none).
    pub next_free: u16,
    /// Free blocks.
    pub num_free: u16,
    /// Size class.
    pub class: u8,
    /// Blocks in the page.
    pub num_blocks: u16,
}

impl PageState {
    pub fn pack(self) -> u64 {
        u64::from(self.next_free)
            | u64::from(self.num_free) << 16
            | u64::from(self.class) << 32
            | u64::from(self.num_blocks) << 48
    }
    pub fn unpack(w: u64) -> PageState {
        PageState {
            next_free: w as u16,
            num_free: (w >> 16) as u16,
            class: (w >> 32) as u8,
            num_blocks: (w >> 48) as u16,
        }
    }
}

// ----- the format, pinned -----

const _: () = assert!(size_of::<Anchor>() == 1024);
const _: () = assert!(A_MAGIC == 0 && A_VERSION_SLOTS == 8 && A_GEOMETRY == 16);
const _: () = assert!(offset_of!(Anchor, compat) == 24 && offset_of!(Anchor, incompat) == 32);
const _: () = assert!(A_SEGMENT == 40 && A_CRC == 48 && A_ROOT == 64 && A_FREE_SEGS == 128);
const _: () = assert!(offset_of!(Anchor, reserved) == 144);
const _: () = assert!(size_of::<RedoEntry>() == 16);
const _: () = assert!(size_of::<SlotBlock>() == 1152 && SLOT_BYTES.is_multiple_of(64));
const _: () = assert!(S_LOG == 0 && S_ENTRIES == 64 && S_ASL == 448 && S_FSL == 464);
const _: () = assert!(S_PLM == 512 && class_head(CLASSES.len()) == SLOT_BYTES);
const _: () = assert!(S_COMMITTED == 480);
const _: () = assert!(MAX_SLOTS == 56 && SLOT_BYTES.is_multiple_of(64));
const _: () = assert!(size_of::<JournalHead>() == 64 && J_EXPECT == 32 && J_NEW == 48);
const _: () = assert!(J_LOG == 0 && J_SEQ == 8 && J_CHECK == 16 && J_CALLER == 24);
const _: () = assert!(MAX_SLOTS < 256);
const _: () =
    assert!(size_of::<Record>() == 512 && offset_of!(Record, entries) as u64 == J_ENTRIES);
const _: () = assert!(size_of::<SlotExt>() == 512 && records_base(3) == 4480);
const _: () = assert!(record_count(1) == 8 && record_count(3) == 24 && record_count(56) == 64);
const _: () = assert!(ext_base(3) == 16_768 && anchor_end(1) == 6784);
const _: () = assert!(anchor_end(MAX_SLOTS) == 126_976);
const _: () = assert!(size_of::<SegmentHeader>() == 320);
const _: () = assert!(G_NEXT == 0 && G_OWNER == 16 && G_COUNTS == 24 && G_MAGIC == 32);
const _: () = assert!(G_BITMAP == 64 && G_BITMAP + MAX_PAGES / 8 == G_BYTES);
const _: () = assert!(size_of::<PageHeader>() == 64);
const _: () = assert!(size_of::<UnitEntry>() == 32 && U_INFO == 0 && U_TAG == 8);
const _: () = assert!(U_NEXT == 16 && U_PREV == 24 && G_CLEAN == 40 && BIG_TABLE >= G_BYTES);
const _: () = assert!(offset_of!(SlotExt, big_free) == 16 && X_BIG_SEGMENTS == 0);
const _: () = assert!(P_NEXT == 0 && P_STATE == 16 && P_ENTRIES == 64);
const _: () = assert!(G_BYTES <= PAGE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_classes_all_multiples_of_64_ascending() {
        assert_eq!(CLASSES.len(), 40);
        assert!(CLASSES.iter().all(|c| c % 64 == 0));
        assert!(CLASSES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(64), Some(0));
        assert_eq!(class_of(65), Some(1));
        assert_eq!(class_of(15_360), Some(39));
        assert_eq!(class_of(15_361), None);
    }

    #[test]
    fn page_geometry_fits_and_aligns() {
        for (c, &size) in CLASSES.iter().enumerate() {
            let (n, start) = page_geometry(c);
            assert!(n >= 4, "class {c}: {n} blocks");
            assert_eq!(start % 64, 0);
            assert!(start >= 64 + 2 * n);
            assert!(start + n * size <= PAGE);
            // u16 offsets suffice.
            assert!(start + (n - 1) * size < 65536);
        }
        assert_eq!(page_geometry(0), (992, 2048)); // 64-byte blocks fill the page exactly
    }

    #[test]
    fn state_word_round_trips() {
        let s = PageState { next_free: 4160, num_free: 17, class: 39, num_blocks: 1006 };
        assert_eq!(PageState::unpack(s.pack()), s);
    }

    #[test]
    fn new_structs_hold_the_format_words() {
        let a = Anchor::new(3, 1 << 20);
        let b = a.as_bytes();
        assert_eq!(&b[8..16], &(2u64 | 3 << 32).to_le_bytes());
        assert_eq!(&b[64..72], &u64::MAX.to_le_bytes(), "null root");
        assert_eq!(a.crc, u64::from(crc32c::crc32c(&b[8..48])));
        assert_eq!(a.slots(), 3);
        let s = SlotBlock::new();
        let sb = s.as_bytes();
        assert!(sb[..8].iter().all(|&x| x == 0), "a disarmed item");
        assert_eq!(&sb[512..520], &u64::MAX.to_le_bytes(), "null class heads");
        let h = SegmentHeader::new(2, 7);
        assert_eq!(&h.as_bytes()[24..32], &(7u64 << 32).to_le_bytes());
    }
}
