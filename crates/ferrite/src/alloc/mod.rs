//! PAllocator I: segments, the anchor, the small allocator and the leak-free interface, with
//! recovery that reads no block (seed 001 §3.4.1–3.4.4 and §3.4.7; spec
//! `../shared/specs/scm-and-pallocator.md` §2.4, §3.1–3.3, §3.7). Layouts and protocols:
//! `docs/design/allocator.md`.
//!
//! The allocator shares a [`PoolSet`] (`Arc`, so an engine can hold the set, the allocator and
//! its trees side by side). Segment 0's data area is the **anchor**: the entry point (the
//! application's root `PPtr`), the shared free-segment list, and one block per allocator
//! **slot** (a fixed count chosen at creation, never the creating machine's core count): the
//! slot's recovery item, its active/full segment lists and one list of partially free pages
//! per size class. Every other segment is a small-allocator segment: page 0 is its header
//! (owner, page counts, a page bitmap), the other 64 KiB pages each serve one of 40 size
//! classes, with an intrusive list of free blocks kept in 2-byte entries outside the blocks.
//!
//! Files: `layout.rs` (the on-media structs and classes), `redo.rs` (the redo transaction:
//! building, committing, replaying), `segments.rs` (segment and page lists, open's owner map,
//! releasing segments), `small.rs` (allocate and free of small blocks), `big.rs` (big blocks:
//! whole 4 KiB units of big segments, with a unit table per segment and per-slot size buckets;
//! its invariants B1–B4 are in its module docs), `check.rs` (the full integrity walk); this
//! file holds the type, creation, open and the public API (which routes a request by size:
//! small up to [`MAX_SMALL`], big up to [`PAllocator::big_capacity`], huge above).
//!
//! # Invariants
//! - A1: every segment but 0 is in exactly one list: a slot's active list (it has a free page),
//!   a slot's full list (it has none) or the free-segment list (it has no used page); its
//!   header's owner says which.
//! - A2: a page is used (bitmap bit set) iff it serves a class; a used page with free blocks is
//!   in its slot's list for that class, a full page is in no list.
//! - A3: every block of a used page is free (on the page's free list, exactly once) or
//!   allocated; `num_free` counts the free list.
//! - A4: when no operation is in flight every recovery item is disarmed.
//! - Values read from PM (links, counts, page states, redo addresses, the anchor's fields) are
//!   validated before they are used as offsets or indexes and combined with checked
//!   arithmetic: a corrupt pool is `StorageError::Corrupted` in every build profile.
//!
//! # Ordering (rules P-ALLOC-n)
//! Every operation — allocate, deallocate, taking a page, taking or creating a segment — is a
//! redo transaction in its slot's recovery item: the new values of every word it changes,
//! the caller's persistent pointer included, and a header word carrying their count and a
//! crc32c over them are persisted in one barrier, which commits the operation (P-ALLOC-1); the
//! words are written and persisted (P-ALLOC-2); the header is cleared (P-ALLOC-3). Recovery
//! re-applies an item whose header matches its entries (absolute values: idempotent), and
//! discards a disarmed item or one whose entries did not all become durable (checksum
//! mismatch: the operation never committed), so a crash at any point leaves the operation
//! entirely done or entirely undone: nothing leaks, nothing is freed twice. Content that
//! becomes reachable only through a transaction (a new page's header and free-block entries, a
//! new segment's header) is persisted before the transaction (P-ALLOC-4). A new segment file is
//! complete before it joins any list (P-PM-8); a segment in no list is an orphan of a crash and
//! is moved to the free-segment list at open. A released segment leaves the free-segment list
//! (committed) before its file is removed (P-ALLOC-6).
//!
//! # Concurrency
//! `PAllocator: Send + Sync`. A thread uses slot `thread index % slots` (or the slot it bound
//! with [`PAllocator::bind_thread_to_slot`]); each slot has a lock; a free is executed by the
//! slot that owns the block's segment. The free-segment list, segment creation and release are
//! under one global lock, taken after a slot lock (never two slot locks).

mod big;
mod check;
mod defrag;
mod huge;
mod journal;
mod layout;
mod redo;
mod segments;
mod small;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use ferrite_pmem::{PPtr, PoolSet, SegmentId};
use zerocopy::FromZeros;

use crate::storage::{StorageError, StorageResult};

pub use check::AllocReport;
pub use defrag::DefragReport;
pub use huge::{HUGE_HEADER, MAX_HUGE};
use layout::*;
pub use layout::{CLASSES, MAX_SMALL, PAGE, class_of, page_geometry};

/// Segment-owner codes of the transient owner map (SegIDToAllocID): 0 is the free-segment
/// list, `slot + 1` a small segment of `slot`, `OWNER_BIG + slot` a big segment of `slot`,
/// [`OWNER_HUGE`] a huge segment.
const OWNER_BIG: u32 = 0x1_0000;
/// Owner code of a huge segment.
const OWNER_HUGE: u32 = u32::MAX;

/// Slots a new allocator gets by default.
pub const DEFAULT_SLOTS: u32 = 4;
/// Most slots an allocator can have (the slot blocks fill the anchor's first 64 KiB).
pub const MAX_ALLOC_SLOTS: u32 = MAX_SLOTS;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn corrupt(what: impl Into<String>, at: PPtr) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("allocator {at:?}") }
}

/// The persistent allocator (see the module docs).
#[derive(Debug)]
pub struct PAllocator {
    set: Arc<PoolSet>,
    slots: u32,
    slot_locks: Vec<Mutex<()>>,
    global: Mutex<()>,
    /// Segment → owner slot + 1 (0: the free-segment list): SegIDToAllocID.
    owner: RwLock<HashMap<SegmentId, u32>>,
    pages_per_segment: u64,
    poisoned: AtomicBool,
    /// This instance's id (thread records are leased per instance).
    id: u64,
    /// Thread records not leased by a live thread.
    records: Arc<journal::Records>,
    /// Per slot: the sequence number of its last committed operation.
    seqs: Vec<AtomicU64>,
}

thread_local! {
    /// The slot the thread bound itself to (`u32::MAX`: none).
    static SLOT_HINT: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

impl PAllocator {
    // ----- creation and recovery -----

    /// Formats a new allocator with `slots` slots (1..=[`MAX_ALLOC_SLOTS`]) on the (new) pool
    /// set `set`.
    pub fn create(set: Arc<PoolSet>, slots: u32) -> StorageResult<PAllocator> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(StorageError::InvalidArgument(format!(
                "{slots} slots: between 1 and {MAX_SLOTS}"
            )));
        }
        let seg0 =
            set.segments().first().copied().ok_or_else(|| corrupt("no segment 0", PPtr::NULL))?;
        let end = anchor_end(slots);
        if seg0.data_len < end {
            return Err(StorageError::InvalidArgument(format!(
                "segment 0 holds {} bytes, the anchor needs {end}",
                seg0.data_len
            )));
        }
        let pages = Self::pages_of(&set)?;
        let a = set.resolve_range(PPtr::new(0, 0), end)?;
        let s = &*set;
        // P-ALLOC-5: everything but the magic, persisted; the magic last.
        s.write_struct(a, &Anchor::new(slots, set.segment_size()))?;
        Self::write_v2_areas(s, a, slots, true)?;
        s.persist_rule("P-ALLOC-5", a, end)?; // ORDER(P-ALLOC-5): the whole anchor before its magic
        s.store_u64(a + A_MAGIC, ANCHOR_MAGIC, Ordering::Release)?;
        s.persist_rule("P-ALLOC-5", a + A_MAGIC, 8)?; // ORDER(P-ALLOC-5): the magic commits creation
        Ok(Self::instance(set, slots, pages))
    }

    /// Writes (without persisting) the structures of a version-2 anchor at global offset `a`
    /// beyond the anchor struct: the slot blocks (when `slot_blocks`; an upgrade keeps the
    /// version-1 ones, whose new words are already zero), the thread records and the
    /// extension blocks.
    fn write_v2_areas(s: &PoolSet, a: u64, slots: u32, slot_blocks: bool) -> StorageResult<()> {
        if slot_blocks {
            let block = SlotBlock::new();
            for i in 0..u64::from(slots) {
                s.write_struct(a + A_SLOTS + i * SLOT_BYTES, &block)?;
            }
        }
        let record = Record::new_zeroed();
        for r in 0..u64::from(record_count(slots)) {
            s.write_struct(a + records_base(slots) + r * RECORD_BYTES, &record)?;
        }
        let ext = SlotExt::new();
        for i in 0..u64::from(slots) {
            s.write_struct(a + ext_base(slots) + i * EXT_BYTES, &ext)?;
        }
        Ok(())
    }

    /// Opens the allocator on `set` and recovers it: replays every armed recovery item,
    /// rebuilds the segment-owner map by walking the segment lists, and moves orphan segments
    /// (created by an interrupted segment creation) to the free-segment list. Reads no block
    /// and no page: the cost grows with the number of segments and slots, not with live blocks.
    ///
    /// Errors: `Corrupted` for an anchor that fails validation (no magic: "creation did not
    /// finish"), a bad link, count or redo item; `Incompatible` for another format version or
    /// an unknown incompat flag.
    pub fn open(set: Arc<PoolSet>) -> StorageResult<PAllocator> {
        let a = set
            .resolve_range(PPtr::new(0, 0), A_SLOTS)
            .map_err(|_| corrupt("segment 0 is too small for an anchor", PPtr::new(0, 0)))?;
        let anchor: Anchor = set.read_struct(a)?;
        if anchor.magic != ANCHOR_MAGIC {
            return Err(corrupt(
                if anchor.magic == 0 {
                    "the allocator's creation did not finish (no magic)".to_owned()
                } else {
                    format!("bad anchor magic {:#x}", anchor.magic)
                },
                PPtr::new(0, A_MAGIC),
            ));
        }
        // An upgrade from version 1 rewrites the version word and the checksum, which share a
        // line: a crash may leave either one new. Such an anchor's checksum matches its words
        // with the other version; the upgrade's other writes were persisted before.
        let torn_upgrade = anchor.crc != u64::from(anchor.checksum())
            && [ANCHOR_VERSION_1, ANCHOR_VERSION].iter().any(|&v| {
                let mut other = anchor;
                other.version_slots = u64::from(v) | anchor.version_slots & !0xffff_ffff;
                other.version() != anchor.version() && anchor.crc == u64::from(other.checksum())
            });
        let version = if torn_upgrade { ANCHOR_VERSION } else { anchor.version() };
        if !matches!(version, ANCHOR_VERSION | ANCHOR_VERSION_1) || anchor.incompat != 0 {
            return Err(StorageError::Incompatible {
                what: format!(
                    "allocator anchor version {} incompat {:#x}",
                    anchor.version(),
                    anchor.incompat
                ),
                at: "allocator anchor".into(),
            });
        }
        if !torn_upgrade && anchor.crc != u64::from(anchor.checksum()) {
            return Err(corrupt("anchor checksum mismatch", PPtr::new(0, A_CRC)));
        }
        let slots = anchor.slots();
        if slots == 0 || slots > MAX_SLOTS || anchor.geometry != GEOMETRY {
            return Err(corrupt(
                format!("anchor geometry: {slots} slots, {:#x}", anchor.geometry),
                PPtr::new(0, A_GEOMETRY),
            ));
        }
        let end = anchor_end(slots);
        if set.resolve_range(PPtr::new(0, 0), end).is_err() {
            return Err(if version == ANCHOR_VERSION_1 {
                StorageError::Incompatible {
                    what: format!(
                        "a version-1 allocator whose segment 0 is smaller than the {end} bytes version 2 needs"
                    ),
                    at: "allocator anchor".into(),
                }
            } else {
                corrupt(
                    format!("{slots} slots' anchor does not fit in segment 0"),
                    PPtr::new(0, A_VERSION_SLOTS),
                )
            });
        }
        // The anchor's segment size wins over the options the pool set was opened with: every
        // small segment has the same page count.
        set.set_segment_size(anchor.segment);
        let pages = Self::pages_of(&set).map_err(|_| {
            corrupt(format!("anchor segment size {}", anchor.segment), PPtr::new(0, A_SEGMENT))
        })?;
        let alloc = Self::instance(set, slots, pages);
        if version == ANCHOR_VERSION_1 && !torn_upgrade {
            for i in 0..slots {
                alloc.replay_v1(i)?;
            }
            alloc.upgrade(anchor, false)?;
        } else if torn_upgrade {
            alloc.upgrade(anchor, true)?;
        }
        alloc.recover_journals()?;
        alloc.rebuild_owners()?;
        Ok(alloc)
    }

    /// Upgrades a version-1 anchor (its items replayed and disarmed) to version 2: the new
    /// areas are written and persisted, then the version word and the checksum (P-ALLOC-5).
    /// `finish`: a previous upgrade got as far as one of those two words; only they are
    /// rewritten.
    fn upgrade(&self, anchor: Anchor, finish: bool) -> StorageResult<()> {
        let s = &*self.set;
        let a = self.addr(PPtr::new(0, 0), anchor_end(self.slots))?;
        if !finish {
            Self::write_v2_areas(s, a, self.slots, false)?;
            let from = records_base(self.slots);
            // ORDER(P-ALLOC-5): the new areas before the version that makes them meaningful
            s.persist_rule("P-ALLOC-5", a + from, anchor_end(self.slots) - from)?;
        }
        let v2 = anchor.with_version(ANCHOR_VERSION);
        s.store_u64(a + A_VERSION_SLOTS, v2.version_slots, Ordering::Release)?;
        s.store_u64(a + A_CRC, v2.crc, Ordering::Release)?;
        Ok(s.persist_rule("P-ALLOC-5", a, 64)?) // ORDER(P-ALLOC-5): the upgraded version word and checksum
    }

    /// The transient state of an allocator over `set` with `slots` slots.
    fn instance(set: Arc<PoolSet>, slots: u32, pages: u64) -> PAllocator {
        PAllocator {
            records: journal::Records::new(&set, slots),
            set,
            slots,
            slot_locks: (0..slots).map(|_| Mutex::new(())).collect(),
            global: Mutex::new(()),
            owner: RwLock::new(HashMap::new()),
            pages_per_segment: pages,
            poisoned: AtomicBool::new(false),
            id: journal::next_instance_id(),
            seqs: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Pages per small segment (page 0 is the header).
    fn pages_of(set: &PoolSet) -> StorageResult<u64> {
        let seg = set.segment_size();
        let pages = ((seg.saturating_sub(4096)) / PAGE).min(MAX_PAGES);
        if pages < 2 {
            return Err(StorageError::InvalidArgument(format!(
                "segments of {seg} bytes hold fewer than two {PAGE}-byte pages"
            )));
        }
        Ok(pages)
    }

    /// The pool set (for resolving pointers and reading blocks).
    pub fn pool(&self) -> &Arc<PoolSet> {
        &self.set
    }

    /// Consumes the allocator, returning its pool set (the set closes when its last holder
    /// drops it).
    pub fn into_pool(self) -> Arc<PoolSet> {
        self.set
    }

    /// Closes the allocator and its pool set cleanly (the set records a clean shutdown).
    /// Errors: `InvalidArgument` if another holder still shares the pool set (nothing is
    /// closed; the set closes when its last holder drops it, as after a crash).
    pub fn close(self) -> StorageResult<()> {
        match Arc::try_unwrap(self.set) {
            Ok(set) => Ok(set.close()?),
            Err(_) => Err(StorageError::InvalidArgument(
                "the pool set is still shared: drop its other holders before closing".into(),
            )),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Pages of a small segment that hold blocks (its first page is the segment header).
    pub fn usable_pages_per_segment(&self) -> u64 {
        self.pages_per_segment - 1
    }

    /// The location of the application's root pointer (a `PPtr` in the anchor), to allocate
    /// into or store into.
    pub fn root_location(&self) -> PPtr {
        PPtr::new(0, A_ROOT)
    }

    /// Binds the calling thread to slot `slot % slots` of every allocator it uses (instead of
    /// the round-robin assignment at its first call). For workers that know their role, and
    /// for tests that need two threads on two given slots.
    pub fn bind_thread_to_slot(slot: u32) {
        SLOT_HINT.with(|h| h.set(slot));
    }

    /// The slots of `set`'s allocator whose last operation may be incomplete, read without
    /// opening (or recovering) it: those with a journal that recovery would replay (armed,
    /// valid, and not superseded by a later committed operation of the slot). For crash tests
    /// and tools. Errors: as [`PAllocator::open`] for an anchor that fails validation.
    pub fn armed_items(set: &PoolSet) -> StorageResult<Vec<u32>> {
        let a = set
            .resolve_range(PPtr::new(0, 0), A_SLOTS)
            .map_err(|_| corrupt("segment 0 is too small for an anchor", PPtr::new(0, 0)))?;
        let anchor: Anchor = set.read_struct(a)?;
        if anchor.magic != ANCHOR_MAGIC || anchor.crc != u64::from(anchor.checksum()) {
            return Err(corrupt("no valid anchor", PPtr::new(0, 0)));
        }
        if anchor.version() != ANCHOR_VERSION {
            return Err(corrupt("not a version-2 anchor", PPtr::new(0, A_VERSION_SLOTS)));
        }
        let (live, _) = redo::live_journals(set, anchor.slots().min(MAX_SLOTS))?;
        Ok((0..).zip(live).filter_map(|(i, j)| j.map(|_| i)).collect())
    }

    /// Makes the calling thread's last allocator operation final: a fence on the pool set, so
    /// that its journal's disarm is durable. Needed only before *another* thread changes the
    /// location an allocation on this thread wrote, when this thread has made no persist since
    /// (see "The caller's rule" in `docs/design/allocator.md`).
    pub fn settle(&self) {
        self.set.fence_rule("P-ALLOC-3"); // ORDER(P-ALLOC-3): the lazy disarm made durable
    }

    fn slot_base(&self, slot: u32) -> u64 {
        A_SLOTS + u64::from(slot) * SLOT_BYTES
    }

    /// The owner (slot + 1, 0: the free-segment list) of segment `id`.
    fn owner_of(&self, id: SegmentId) -> Option<u32> {
        self.owner.read().unwrap_or_else(|e| e.into_inner()).get(&id).copied()
    }

    // ----- the leak-free interface -----

    /// The slot an operation started now on the calling thread would use: the one the thread
    /// bound with [`PAllocator::bind_thread_to_slot`], else its current CPU's
    /// (`sched_getcpu() % slots`), else one handed out round-robin at its first call. A hint
    /// (the thread may move to another CPU before its next call), for tools and tests.
    pub fn current_slot(&self) -> u32 {
        self.my_slot()
    }

    /// The calling thread's slot (see [`PAllocator::current_slot`]).
    fn my_slot(&self) -> u32 {
        let hint = SLOT_HINT.with(|h| h.get());
        if hint != u32::MAX {
            return hint % self.slots;
        }
        if let Some(cpu) = ferrite_pmem::platform::current_cpu() {
            return cpu % self.slots;
        }
        static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);
        thread_local! {
            static FALLBACK: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
        }
        let f = FALLBACK.with(|f| {
            if f.get() == u32::MAX {
                f.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % (u32::MAX - 1));
            }
            f.get()
        });
        f % self.slots
    }

    fn guard<T>(&self, f: impl FnOnce() -> StorageResult<T>) -> StorageResult<T> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(StorageError::Poisoned);
        }
        let r = f();
        if let Err(e) = &r
            && !matches!(e, StorageError::PoolFull { .. } | StorageError::InvalidArgument(_))
        {
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    /// Allocates a block of at least `size` bytes (1..=[`MAX_HUGE`]) and durably stores its
    /// pointer at `into`, a persistent location (16-aligned, inside the pool set) that must
    /// hold the null pointer. On return the pointer is durable; a crash before that leaves
    /// `into` null and the block free (seed 001 §3.2.3: reference passing). A request above
    /// the big allocator's capacity is **huge**: its own segment file, the block at
    /// `{segment, HUGE_HEADER}` (4 KiB aligned).
    ///
    /// Errors (the pool unchanged): `InvalidArgument` for a zero or oversized size, or an
    /// `into` that is not a null pointer inside the pool; `PoolFull` when no segment can be
    /// added.
    pub fn allocate(&self, size: u64, into: PPtr) -> StorageResult<PPtr> {
        if size == 0 || size > MAX_HUGE {
            return Err(StorageError::InvalidArgument(format!(
                "allocation of {size} bytes: between 1 and {MAX_HUGE}"
            )));
        }
        if !into.offset.is_multiple_of(16) || self.addr(into, 16).is_err() {
            return Err(StorageError::InvalidArgument(format!(
                "allocate into {into:?}: not a 16-aligned location in the pool"
            )));
        }
        if !self.read_pptr(&redo::Txn::new(), into.segment, into.offset)?.is_null() {
            return Err(StorageError::InvalidArgument(format!(
                "allocate into {into:?}: it does not hold the null pointer"
            )));
        }
        if size > self.big_capacity() {
            return self.guard(|| self.allocate_huge(size, into));
        }
        self.guard(|| {
            let slot = self.my_slot();
            let _l = lock(&self.slot_locks[slot as usize]);
            match class_of(size) {
                Some(c) => self.allocate_small(slot, c, into),
                None => self.allocate_big(slot, size, into),
            }
        })
    }

    /// Frees the block whose pointer is stored at `from` and durably nulls `from`.
    ///
    /// Errors (the pool unchanged): `InvalidArgument` when `from` is not a location in the
    /// pool, holds null, or points at something that is not an allocated block of this
    /// allocator (a foreign or stale pointer, or a double free).
    pub fn deallocate(&self, from: PPtr) -> StorageResult<()> {
        if !from.offset.is_multiple_of(16) || self.addr(from, 16).is_err() {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate from {from:?}: not a 16-aligned location in the pool"
            )));
        }
        let p = self.read_pptr(&redo::Txn::new(), from.segment, from.offset)?;
        if p.is_null() {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate from {from:?}: it holds the null pointer"
            )));
        }
        match self.owner_of(p.segment) {
            Some(OWNER_HUGE) => self.guard(|| self.deallocate_huge(from, p)),
            Some(o) if (1..=self.slots).contains(&o) => {
                self.guard(|| self.deallocate_small(o - 1, from, p))
            }
            Some(o) if (OWNER_BIG..OWNER_BIG + self.slots).contains(&o) => {
                self.guard(|| self.deallocate_big(o - OWNER_BIG, from, p))
            }
            _ => Err(StorageError::InvalidArgument(format!(
                "deallocate {p:?}: not a block of this allocator"
            ))),
        }
    }

    /// Returns the free segments beyond the first `keep` of the free-segment list to the file
    /// system (the pool set removes their files, P-PM-9) and reports how many went. Each leaves
    /// the list in a committed transaction first (P-ALLOC-6): a crash before its file is
    /// removed leaves a segment in no list, which the next open adopts as free again. Segment
    /// ids are reused by later growth, so a stale pointer into a released segment may later
    /// resolve into a new one: as with any use after free, the allocator's own state is safe
    /// (a free through such a pointer is checked like any other) but the caller's is not.
    ///
    /// Cost: one transaction and one file removal per released segment, under the global lock.
    pub fn release_free_segments(&self, keep: usize) -> StorageResult<usize> {
        self.guard(|| {
            let slot = self.my_slot();
            let _l = lock(&self.slot_locks[slot as usize]);
            self.release_segments(slot, keep)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn the_anchor_checksum_covers_version_to_segment_size() {
        let a = Anchor::new(2, 1 << 20);
        assert_eq!(&a.as_bytes()[A_CRC_RANGE].len(), &40);
        assert_eq!(a.crc, u64::from(a.checksum()));
    }
}
