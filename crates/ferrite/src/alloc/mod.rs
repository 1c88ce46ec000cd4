//! PAllocator I: segments, the anchor, the small allocator and the leak-free interface, with
//! recovery that reads no block (seed 001 §3.4.1–3.4.4 and §3.4.7; spec
//! `../shared/specs/scm-and-pallocator.md` §2.4, §3.1–3.3, §3.7). Layouts and protocols:
//! `docs/design/allocator.md`.
//!
//! The allocator shares a [`PoolSet`] (`Arc`, so an engine can hold the set, the allocator and its trees side by side). Segment 0's data area is the **anchor**: the entry point
//! (the application's root `PPtr`), the shared free-segment list, and one block per allocator
//! **slot** (a fixed count chosen at creation, never the creating machine's core count): the
//! slot's recovery item, its active/full segment lists and one list of partially free pages
//! per size class. Every other segment is a small-allocator segment: page 0 is its header
//! (owner, page counts, a page bitmap), the other 64 KiB pages each serve one of 40 size
//! classes, with an intrusive list of free blocks kept in 2-byte entries outside the blocks.
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
//! is moved to the free-segment list at open.
//!
//! # Concurrency
//! `PAllocator: Send + Sync`. A thread uses slot `thread index % slots`; each slot has a lock;
//! a free is executed by the slot that owns the block's segment. The free-segment list and
//! segment creation are under one global lock, taken after a slot lock (never two slot locks).

mod layout;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use ferrite_pmem::{PPtr, PoolSet, SegmentId};

use crate::storage::{StorageError, StorageResult};

use layout::*;
pub use layout::{CLASSES, MAX_SMALL, PAGE, class_of, page_geometry};

/// Slots a new allocator gets by default.
pub const DEFAULT_SLOTS: u32 = 4;

/// A word write of a transaction: (packed address, value).
type Write = (u64, u64);

/// A redo transaction being built: the writes, with reads that see them.
struct Txn {
    writes: Vec<Write>,
    overlay: HashMap<u64, u64>,
}

impl Txn {
    fn new() -> Txn {
        Txn { writes: Vec::new(), overlay: HashMap::new() }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn corrupt(what: impl Into<String>, at: PPtr) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("allocator {at:?}") }
}

/// Counts returned by [`PAllocator::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocReport {
    /// Small segments, by list: active, full, free.
    pub segments: (u64, u64, u64),
    /// Used pages per class.
    pub pages: BTreeMap<u64, u64>,
    /// Allocated blocks, and their bytes (by class size).
    pub allocated_blocks: u64,
    /// Bytes of allocated blocks.
    pub allocated_bytes: u64,
    /// Free blocks in used pages.
    pub free_blocks: u64,
    /// Every allocated block (for leak checks).
    pub allocated: Vec<PPtr>,
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
}

thread_local! {
    static SLOT_HINT: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);

impl PAllocator {
    // ----- creation and recovery -----

    /// Formats a new allocator with `slots` slots (1..=47) on the (new) pool set `set`.
    pub fn create(set: Arc<PoolSet>, slots: u32) -> StorageResult<PAllocator> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(StorageError::InvalidArgument(format!(
                "{slots} slots: between 1 and {MAX_SLOTS}"
            )));
        }
        let seg0 =
            set.segments().first().copied().ok_or_else(|| corrupt("no segment 0", PPtr::NULL))?;
        if seg0.data_len < A_SLOTS + u64::from(slots) * SLOT_BYTES {
            return Err(StorageError::InvalidArgument(format!(
                "segment 0 holds {} bytes, the anchor needs {}",
                seg0.data_len,
                A_SLOTS + u64::from(slots) * SLOT_BYTES
            )));
        }
        let pages = Self::pages_of(&set)?;
        let a = Self::anchor_base(&set)?;
        let s = &*set;
        // P-ALLOC-5: everything but the magic, persisted; the magic last.
        let end = A_SLOTS + u64::from(slots) * SLOT_BYTES;
        s.fill(a, end, 0)?;
        // Every PPtr of the anchor starts null (segment word u64::MAX).
        for off in [A_ROOT, A_FREE_SEGS] {
            s.store_u64(a + off, u64::MAX, Ordering::Relaxed)?;
        }
        for i in 0..u64::from(slots) {
            let b = a + A_SLOTS + i * SLOT_BYTES;
            for off in [S_ASL, S_FSL] {
                s.store_u64(b + off, u64::MAX, Ordering::Relaxed)?;
            }
            for c in 0..CLASSES.len() as u64 {
                s.store_u64(b + S_PLM + c * 16, u64::MAX, Ordering::Relaxed)?;
            }
        }
        s.store_u64(
            a + A_VERSION_SLOTS,
            u64::from(ANCHOR_VERSION) | u64::from(slots) << 32,
            Ordering::Relaxed,
        )?;
        s.store_u64(a + A_COMPAT, 0, Ordering::Relaxed)?; // no compatible features yet
        s.store_u64(a + A_INCOMPAT, 0, Ordering::Relaxed)?;
        s.store_u64(a + A_GEOMETRY, PAGE | (CLASSES.len() as u64) << 32, Ordering::Relaxed)?;
        s.store_u64(a + A_SEGMENT, set.segment_size(), Ordering::Relaxed)?;
        s.store_u64(a + A_CRC, u64::from(Self::anchor_crc(s, a)?), Ordering::Relaxed)?;
        s.persist_rule("P-ALLOC-5", a, end)?; // ORDER(P-ALLOC-5): the whole anchor before its magic
        s.store_u64(a + A_MAGIC, ANCHOR_MAGIC, Ordering::Release)?;
        s.persist_rule("P-ALLOC-5", a + A_MAGIC, 8)?; // ORDER(P-ALLOC-5): the magic commits creation
        Ok(PAllocator {
            set,
            slots,
            slot_locks: (0..slots).map(|_| Mutex::new(())).collect(),
            global: Mutex::new(()),
            owner: RwLock::new(HashMap::new()),
            pages_per_segment: pages,
            poisoned: AtomicBool::new(false),
        })
    }

    /// Opens the allocator on `set` and recovers it: replays every armed recovery item,
    /// rebuilds the segment-owner map by walking the segment lists, and moves orphan segments
    /// (created by an interrupted segment creation) to the free-segment list. Reads no block
    /// and no page: the cost grows with the number of segments and slots, not with live blocks.
    pub fn open(set: Arc<PoolSet>) -> StorageResult<PAllocator> {
        let a = Self::anchor_base(&set)?;
        let s = &*set;
        let magic = s.load_u64(a + A_MAGIC, Ordering::Acquire)?;
        if magic != ANCHOR_MAGIC {
            return Err(corrupt(
                if magic == 0 {
                    "the allocator's creation did not finish (no magic)".to_owned()
                } else {
                    format!("bad anchor magic {magic:#x}")
                },
                PPtr::new(0, A_MAGIC),
            ));
        }
        let vs = s.load_u64(a + A_VERSION_SLOTS, Ordering::Acquire)?;
        let incompat = s.load_u64(a + A_INCOMPAT, Ordering::Acquire)?;
        if vs as u32 != ANCHOR_VERSION || incompat != 0 {
            return Err(StorageError::Incompatible {
                what: format!("allocator anchor version {} incompat {incompat:#x}", vs as u32),
                at: "allocator anchor".into(),
            });
        }
        let crc = s.load_u64(a + A_CRC, Ordering::Acquire)?;
        if crc != u64::from(Self::anchor_crc(s, a)?) {
            return Err(corrupt("anchor checksum mismatch", PPtr::new(0, A_CRC)));
        }
        let slots = (vs >> 32) as u32;
        let geometry = s.load_u64(a + A_GEOMETRY, Ordering::Acquire)?;
        if slots == 0 || slots > MAX_SLOTS || geometry != PAGE | (CLASSES.len() as u64) << 32 {
            return Err(corrupt(
                format!("anchor geometry: {slots} slots, {geometry:#x}"),
                PPtr::new(0, A_GEOMETRY),
            ));
        }
        // The anchor's segment size wins over the options the pool set was opened with: every
        // small segment has the same page count.
        let segment = s.load_u64(a + A_SEGMENT, Ordering::Acquire)?;
        set.set_segment_size(segment);
        let pages = Self::pages_of(&set).map_err(|_| {
            corrupt(format!("anchor segment size {segment}"), PPtr::new(0, A_SEGMENT))
        })?;
        let alloc = PAllocator {
            set,
            slots,
            slot_locks: (0..slots).map(|_| Mutex::new(())).collect(),
            global: Mutex::new(()),
            owner: RwLock::new(HashMap::new()),
            pages_per_segment: pages,
            poisoned: AtomicBool::new(false),
        };
        for i in 0..slots {
            alloc.replay(i)?;
        }
        alloc.rebuild_owners()?;
        Ok(alloc)
    }

    fn anchor_base(set: &PoolSet) -> StorageResult<u64> {
        Ok(set.resolve_range(PPtr::new(0, 0), A_SLOTS)?)
    }

    fn anchor_crc(s: &ferrite_pmem::Space, a: u64) -> StorageResult<u32> {
        let mut b = [0u8; (A_CRC - 8) as usize];
        s.read_into(a + 8, &mut b)?;
        Ok(crc32c::crc32c(&b))
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

    // ----- words and pointers -----

    fn addr(&self, p: PPtr, len: u64) -> StorageResult<u64> {
        Ok(self.set.resolve_range(p, len)?)
    }

    fn read(&self, txn: &Txn, seg: u64, off: u64) -> StorageResult<u64> {
        if let Some(w) = pack_addr(seg, off).and_then(|k| txn.overlay.get(&k)) {
            return Ok(*w);
        }
        let g = self.addr(PPtr::new(seg, off), 8)?;
        Ok(self.set.load_u64(g, Ordering::Acquire)?)
    }

    fn write(&self, txn: &mut Txn, seg: u64, off: u64, v: u64) -> StorageResult<()> {
        self.addr(PPtr::new(seg, off), 8)?;
        let k = pack_addr(seg, off)
            .ok_or_else(|| corrupt("address too large to log", PPtr::new(seg, off)))?;
        txn.writes.push((k, v));
        txn.overlay.insert(k, v);
        Ok(())
    }

    fn read_pptr(&self, txn: &Txn, seg: u64, off: u64) -> StorageResult<PPtr> {
        Ok(PPtr::new(self.read(txn, seg, off)?, self.read(txn, seg, off + 8)?))
    }

    fn write_pptr(&self, txn: &mut Txn, seg: u64, off: u64, p: PPtr) -> StorageResult<()> {
        self.write(txn, seg, off + 8, p.offset)?;
        self.write(txn, seg, off, p.segment)
    }

    fn slot_base(&self, slot: u32) -> u64 {
        A_SLOTS + u64::from(slot) * SLOT_BYTES
    }

    // ----- the redo transaction (P-ALLOC-1..3) -----

    fn commit(&self, slot: u32, txn: Txn) -> StorageResult<()> {
        if txn.writes.is_empty() {
            return Ok(());
        }
        if txn.writes.len() as u64 > MAX_REDO {
            return Err(StorageError::InvalidArgument(format!(
                "operation of {} writes exceeds the log",
                txn.writes.len()
            )));
        }
        let s = &*self.set;
        let b = self.addr(PPtr::new(0, self.slot_base(slot)), SLOT_BYTES)?;
        for (i, &(k, v)) in txn.writes.iter().enumerate() {
            s.store_u64(b + S_ENTRIES + i as u64 * 16, k, Ordering::Relaxed)?;
            s.store_u64(b + S_ENTRIES + i as u64 * 16 + 8, v, Ordering::Relaxed)?;
        }
        s.store_u64(b + S_LOG, redo_header(&txn.writes), Ordering::Release)?;
        let len = S_ENTRIES + txn.writes.len() as u64 * 16;
        s.persist_rule("P-ALLOC-1", b, len)?; // ORDER(P-ALLOC-1): entries and checksummed header in one barrier: the commit
        self.apply(&txn.writes)?;
        s.store_u64(b + S_LOG, 0, Ordering::Release)?;
        s.persist_rule("P-ALLOC-3", b + S_LOG, 8)?; // ORDER(P-ALLOC-3): disarm only after the writes are durable
        Ok(())
    }

    fn apply(&self, writes: &[Write]) -> StorageResult<()> {
        let s = &*self.set;
        let mut lines: Vec<u64> = Vec::with_capacity(writes.len());
        for &(k, v) in writes {
            let (seg, off) = unpack_addr(k);
            let g = self.addr(PPtr::new(seg, off), 8)?;
            s.store_u64(g, v, Ordering::Release)?;
            lines.push(g & !63);
        }
        lines.sort_unstable();
        lines.dedup();
        for l in lines {
            s.flush_rule("P-ALLOC-2", l, 64)?; // ORDER(P-ALLOC-2): the logged words
        }
        s.fence_rule("P-ALLOC-2"); // ORDER(P-ALLOC-2): durable before the item is disarmed
        Ok(())
    }

    /// Re-applies slot `slot`'s item if it committed (recovery): its header is armed and its
    /// checksum matches the entries. A header whose checksum does not match is a commit whose
    /// barrier did not complete (some entry lines, or the header, never became durable): the
    /// operation did not happen and wrote nothing outside the item, so the item is discarded.
    fn replay(&self, slot: u32) -> StorageResult<()> {
        let s = &*self.set;
        let b = self.addr(PPtr::new(0, self.slot_base(slot)), SLOT_BYTES)?;
        let h = s.load_u64(b + S_LOG, Ordering::Acquire)?;
        if h == 0 {
            return Ok(());
        }
        let n = h & 0xffff;
        if (h >> 16) & 0xffff != REDO_TAG || n == 0 || n > MAX_REDO {
            return Err(corrupt(
                format!("recovery item of slot {slot}: header {h:#x}"),
                PPtr::new(0, self.slot_base(slot)),
            ));
        }
        let mut writes = Vec::with_capacity(n as usize);
        for i in 0..n {
            let k = s.load_u64(b + S_ENTRIES + i * 16, Ordering::Acquire)?;
            let v = s.load_u64(b + S_ENTRIES + i * 16 + 8, Ordering::Acquire)?;
            writes.push((k, v));
        }
        if redo_header(&writes) == h {
            self.apply(&writes)?;
        }
        // Disarmed either way. (After a discard the disarm need not be durable — a crash before
        // the slot's next commit leaves the same mismatching item, discarded again — but one
        // path for both cases costs one barrier per recovered slot.)
        s.store_u64(b + S_LOG, 0, Ordering::Release)?;
        Ok(s.persist_rule("P-ALLOC-3", b + S_LOG, 8)?) // ORDER(P-ALLOC-3): disarm after the redo
    }

    /// Walks every segment list to rebuild SegIDToAllocID; segments of the pool set that are
    /// in no list (an interrupted creation) are initialised and pushed onto the free list.
    fn rebuild_owners(&self) -> StorageResult<()> {
        let mut owner = HashMap::new();
        let t = Txn::new();
        let mut walk = |head: PPtr, tag: u32| -> StorageResult<()> {
            let mut at = head;
            let mut n = 0;
            while !at.is_null() {
                n += 1;
                if n > MAX_PAGES * 64 || owner.insert(at.segment, tag).is_some() {
                    return Err(corrupt(
                        "a segment list has a cycle or a segment in two lists",
                        at,
                    ));
                }
                at = self.read_pptr(&t, at.segment, G_NEXT)?;
            }
            Ok(())
        };
        for i in 0..self.slots {
            let b = self.slot_base(i);
            walk(self.read_pptr(&t, 0, b + S_ASL)?, i + 1)?;
            walk(self.read_pptr(&t, 0, b + S_FSL)?, i + 1)?;
        }
        walk(self.read_pptr(&t, 0, A_FREE_SEGS)?, 0)?;
        let orphans: Vec<SegmentId> = self
            .set
            .segments()
            .iter()
            .map(|s| s.id)
            .filter(|&id| id != 0 && !owner.contains_key(&id))
            .collect();
        *self.owner.write().unwrap_or_else(|p| p.into_inner()) = owner;
        for id in orphans {
            self.init_segment_header(id, 0)?;
            let _g = lock(&self.global);
            let mut txn = Txn::new();
            let head = self.read_pptr(&txn, 0, A_FREE_SEGS)?;
            self.write_pptr(&mut txn, id, G_NEXT, head)?;
            self.write_pptr(&mut txn, 0, A_FREE_SEGS, PPtr::new(id, 0))?;
            self.commit(0, txn)?;
            self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(id, 0);
        }
        Ok(())
    }

    // ----- segments and pages -----

    /// Writes and persists a fresh small-segment header (P-ALLOC-4): not reachable until a
    /// transaction links the segment.
    fn init_segment_header(&self, id: SegmentId, owner: u32) -> StorageResult<()> {
        let s = &*self.set;
        let g = self.addr(PPtr::new(id, 0), G_BITMAP + MAX_PAGES / 8)?;
        s.fill(g, G_BITMAP + MAX_PAGES / 8, 0)?;
        s.store_u64(g + G_NEXT, u64::MAX, Ordering::Relaxed)?;
        s.store_u64(g + G_OWNER, u64::from(owner), Ordering::Relaxed)?;
        s.store_u64(g + G_COUNTS, (self.pages_per_segment - 1) << 32, Ordering::Relaxed)?;
        s.store_u64(g + G_MAGIC, SEG_MAGIC, Ordering::Relaxed)?;
        Ok(s.persist_rule("P-ALLOC-4", g, G_BITMAP + MAX_PAGES / 8)?) // ORDER(P-ALLOC-4): header before any link
    }

    /// Gives slot `slot` an active segment: from the free-segment list, or a new one.
    fn take_segment(&self, slot: u32) -> StorageResult<()> {
        let _g = lock(&self.global);
        let mut txn = Txn::new();
        let b = self.slot_base(slot);
        let mut seg = self.read_pptr(&txn, 0, A_FREE_SEGS)?;
        if seg.is_null() {
            let id = self.set.grow().map_err(|e| match e {
                ferrite_pmem::Error::PoolFull { requested, available, .. } => {
                    StorageError::PoolFull {
                        at: "allocator (no segment left)".into(),
                        requested,
                        available,
                    }
                }
                other => other.into(),
            })?;
            // A crash from here until the commit leaves an orphan segment, moved to the free
            // list at the next open.
            self.init_segment_header(id, slot + 1)?;
            seg = PPtr::new(id, 0);
        } else {
            let next = self.read_pptr(&txn, seg.segment, G_NEXT)?;
            self.write_pptr(&mut txn, 0, A_FREE_SEGS, next)?;
        }
        let head = self.read_pptr(&txn, 0, b + S_ASL)?;
        self.write_pptr(&mut txn, seg.segment, G_NEXT, head)?;
        self.write(&mut txn, seg.segment, G_OWNER, u64::from(slot) + 1)?;
        self.write_pptr(&mut txn, 0, b + S_ASL, PPtr::new(seg.segment, 0))?;
        self.commit(slot, txn)?;
        self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(seg.segment, slot + 1);
        Ok(())
    }

    /// Gives class `c` of slot `slot` a page with free blocks at the head of its list.
    fn take_page(&self, slot: u32, c: usize) -> StorageResult<()> {
        let b = self.slot_base(slot);
        loop {
            let t = Txn::new();
            let seg = self.read_pptr(&t, 0, b + S_ASL)?;
            if seg.is_null() {
                self.take_segment(slot)?;
                continue;
            }
            let id = seg.segment;
            let mut page = None;
            for w in 0..self.pages_per_segment.div_ceil(64) {
                let bits = self.read(&t, id, G_BITMAP + w * 8)?;
                let mut free = !bits;
                if w == 0 {
                    free &= !1; // page 0 is the header
                }
                if free != 0 {
                    let p = w * 64 + u64::from(free.trailing_zeros());
                    if p < self.pages_per_segment {
                        page = Some(p);
                    }
                    break;
                }
            }
            let Some(p) = page else {
                return Err(corrupt("an active segment has no free page", seg));
            };
            // P-ALLOC-4: the page's header and free list, persisted while unreachable.
            let (n, start) = page_geometry(c);
            let s = &*self.set;
            let g = self.addr(PPtr::new(id, p * PAGE), PAGE)?;
            let head = self.read_pptr(&t, 0, b + S_PLM + c as u64 * 16)?;
            s.store_u64(g + P_NEXT + 8, head.offset, Ordering::Relaxed)?;
            s.store_u64(g + P_NEXT, head.segment, Ordering::Relaxed)?;
            let state = PageState {
                next_free: start as u16,
                num_free: n as u16,
                class: c as u8,
                num_blocks: n as u16,
            };
            s.store_u64(g + P_STATE, state.pack(), Ordering::Relaxed)?;
            let size = CLASSES[c];
            let mut entries = vec![0u8; (2 * n) as usize];
            for k in 0..n {
                let next = if k + 1 < n { start + (k + 1) * size } else { 0 };
                entries[(2 * k) as usize..(2 * k + 2) as usize]
                    .copy_from_slice(&(next as u16).to_le_bytes());
            }
            s.write_bytes(g + P_ENTRIES, &entries)?;
            s.persist_rule("P-ALLOC-4", g, P_ENTRIES + 2 * n)?; // ORDER(P-ALLOC-4): the page before the link
            // The link, atomically with the segment's bookkeeping.
            let mut txn = Txn::new();
            let word = G_BITMAP + p / 64 * 8;
            let bits = self.read(&txn, id, word)?;
            self.write(&mut txn, id, word, bits | 1 << (p % 64))?;
            let counts = self.read(&txn, id, G_COUNTS)?;
            let used = (counts & 0xffff_ffff) + 1;
            self.write(&mut txn, id, G_COUNTS, counts & !0xffff_ffff | used)?;
            self.write_pptr(&mut txn, 0, b + S_PLM + c as u64 * 16, PPtr::new(id, p * PAGE))?;
            if used == counts >> 32 {
                // The segment is full: active list → full list.
                self.move_segment(&mut txn, slot, id, S_ASL, S_FSL)?;
            }
            return self.commit(slot, txn);
        }
    }

    /// Moves segment `id` of slot `slot` from list `from` to the head of list `to` (slot-block
    /// offsets), within `txn`.
    fn move_segment(
        &self,
        txn: &mut Txn,
        slot: u32,
        id: SegmentId,
        from: u64,
        to: u64,
    ) -> StorageResult<()> {
        let b = self.slot_base(slot);
        self.unlink_segment(txn, 0, b + from, id)?;
        let head = self.read_pptr(txn, 0, b + to)?;
        self.write_pptr(txn, id, G_NEXT, head)?;
        self.write_pptr(txn, 0, b + to, PPtr::new(id, 0))
    }

    /// Unlinks segment `id` from the list whose head `PPtr` is at (0, `head_off`).
    fn unlink_segment(
        &self,
        txn: &mut Txn,
        head_seg: u64,
        head_off: u64,
        id: SegmentId,
    ) -> StorageResult<()> {
        let next = self.read_pptr(txn, id, G_NEXT)?;
        let (mut at_seg, mut at_off) = (head_seg, head_off);
        for _ in 0..MAX_PAGES * 64 {
            let cur = self.read_pptr(txn, at_seg, at_off)?;
            if cur.is_null() {
                break;
            }
            if cur.segment == id {
                return self.write_pptr(txn, at_seg, at_off, next);
            }
            (at_seg, at_off) = (cur.segment, G_NEXT);
        }
        Err(corrupt("a segment is not in the list its owner says", PPtr::new(id, 0)))
    }

    /// Unlinks page `page` from class list `c` of slot `slot`.
    fn unlink_page(&self, txn: &mut Txn, slot: u32, c: usize, page: PPtr) -> StorageResult<()> {
        let next = self.read_pptr(txn, page.segment, page.offset + P_NEXT)?;
        let (mut at_seg, mut at_off) = (0, self.slot_base(slot) + S_PLM + c as u64 * 16);
        for _ in 0..MAX_PAGES * 1024 {
            let cur = self.read_pptr(txn, at_seg, at_off)?;
            if cur.is_null() {
                break;
            }
            if cur == page {
                return self.write_pptr(txn, at_seg, at_off, next);
            }
            (at_seg, at_off) = (cur.segment, cur.offset + P_NEXT);
        }
        Err(corrupt("a page with free blocks is not in its class list", page))
    }

    // ----- the leak-free interface -----

    fn my_slot(&self) -> u32 {
        let hint = SLOT_HINT.with(|h| {
            if h.get() == u32::MAX {
                h.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed));
            }
            h.get()
        });
        hint % self.slots
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

    /// Allocates a block of at least `size` bytes (1..=[`MAX_SMALL`]) and durably stores its
    /// pointer at `into`, a persistent location (16-aligned, inside the pool set) that must
    /// hold the null pointer. On return the pointer is durable; a crash before that leaves
    /// `into` null and the block free (seed 001 §3.2.3: reference passing).
    ///
    /// Errors (the pool unchanged): `InvalidArgument` for a zero or oversized size, or an
    /// `into` that is not a null pointer inside the pool; `PoolFull` when no segment can be
    /// added.
    pub fn allocate(&self, size: u64, into: PPtr) -> StorageResult<PPtr> {
        if size == 0 || size > MAX_SMALL {
            return Err(StorageError::InvalidArgument(format!(
                "allocation of {size} bytes: the small allocator serves 1..={MAX_SMALL} (big and huge allocations come later)"
            )));
        }
        if !into.offset.is_multiple_of(16) || self.addr(into, 16).is_err() {
            return Err(StorageError::InvalidArgument(format!(
                "allocate into {into:?}: not a 16-aligned location in the pool"
            )));
        }
        if !self.read_pptr(&Txn::new(), into.segment, into.offset)?.is_null() {
            return Err(StorageError::InvalidArgument(format!(
                "allocate into {into:?}: it does not hold the null pointer"
            )));
        }
        let c = class_of(size)
            .ok_or_else(|| StorageError::InvalidArgument(format!("no class for {size} bytes")))?;
        self.guard(|| {
            let slot = self.my_slot();
            let _l = lock(&self.slot_locks[slot as usize]);
            let plm = self.slot_base(slot) + S_PLM + c as u64 * 16;
            if self.read_pptr(&Txn::new(), 0, plm)?.is_null() {
                self.take_page(slot, c)?;
            }
            let mut txn = Txn::new();
            let page = self.read_pptr(&txn, 0, plm)?;
            let st = PageState::unpack(self.read(&txn, page.segment, page.offset + P_STATE)?);
            let (n, start) = page_geometry(c);
            let b = u64::from(st.next_free);
            if st.num_free == 0
                || b < start
                || (b - start) % CLASSES[c] != 0
                || (b - start) / CLASSES[c] >= n
            {
                return Err(corrupt("a listed page has no valid free block", page));
            }
            let k = (b - start) / CLASSES[c];
            let next = self.entry(&txn, page, k)?;
            if next == ALLOCATED {
                return Err(corrupt("a free list reaches an allocated block", page));
            }
            // Pop: head = entry k; entry k = ALLOCATED (O(1) double-free detection); one less free.
            self.set_entry(&mut txn, page, k, ALLOCATED)?;
            let state = PageState { next_free: next, num_free: st.num_free - 1, ..st };
            self.write(&mut txn, page.segment, page.offset + P_STATE, state.pack())?;
            let block = PPtr::new(page.segment, page.offset + b);
            self.write_pptr(&mut txn, into.segment, into.offset, block)?;
            if state.num_free == 0 {
                let after = self.read_pptr(&txn, page.segment, page.offset + P_NEXT)?;
                self.write_pptr(&mut txn, 0, plm, after)?;
            }
            self.commit(slot, txn)?;
            Ok(block)
        })
    }

    /// BlockEntry `k` of `page`.
    fn entry(&self, txn: &Txn, page: PPtr, k: u64) -> StorageResult<u16> {
        let w = self.read(txn, page.segment, page.offset + P_ENTRIES + k / 4 * 8)?;
        Ok((w >> (16 * (k % 4))) as u16)
    }

    /// Sets BlockEntry `k` of `page` within `txn` (a logged write of its 8-byte word).
    fn set_entry(&self, txn: &mut Txn, page: PPtr, k: u64, v: u16) -> StorageResult<()> {
        let off = page.offset + P_ENTRIES + k / 4 * 8;
        let w = self.read(txn, page.segment, off)?;
        let shift = 16 * (k % 4);
        self.write(txn, page.segment, off, (w & !(0xffff << shift)) | u64::from(v) << shift)
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
        let p = self.read_pptr(&Txn::new(), from.segment, from.offset)?;
        if p.is_null() {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate from {from:?}: it holds the null pointer"
            )));
        }
        let owner = self.owner.read().unwrap_or_else(|e| e.into_inner()).get(&p.segment).copied();
        let Some(slot) = owner.filter(|&o| o > 0).map(|o| o - 1) else {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate {p:?}: not a block of this allocator"
            )));
        };
        self.guard(|| {
            let _l = lock(&self.slot_locks[slot as usize]);
            // A concurrent free of the same location got here first: `p` may already be free
            // or even reallocated to someone else.
            if self.read_pptr(&Txn::new(), from.segment, from.offset)? != p {
                return Err(StorageError::InvalidArgument(format!(
                    "deallocate from {from:?}: freed concurrently"
                )));
            }
            let (page, c, k, st) = self.locate(p)?;
            let mut txn = Txn::new();
            // Push: entry k = old head; head = block; one more free.
            self.set_entry(&mut txn, page, k, st.next_free)?;
            let state = PageState {
                next_free: (p.offset - page.offset) as u16,
                num_free: st.num_free + 1,
                ..st
            };
            self.write(&mut txn, page.segment, page.offset + P_STATE, state.pack())?;
            self.write(&mut txn, from.segment, from.offset, u64::MAX)?; // null: one 8-byte store
            let plm = self.slot_base(slot) + S_PLM + c as u64 * 16;
            if st.num_free == 0 {
                // The page was full: it rejoins its class list.
                let head = self.read_pptr(&txn, 0, plm)?;
                self.write_pptr(&mut txn, page.segment, page.offset + P_NEXT, head)?;
                self.write_pptr(&mut txn, 0, plm, page)?;
            }
            // Held until the commit when the free-segment list is part of the transaction.
            let mut global = None;
            if state.num_free == state.num_blocks {
                self.return_page(&mut txn, slot, c, page, &mut global)?;
            }
            self.commit(slot, txn)?;
            if global.is_some() {
                self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(page.segment, 0);
            }
            Ok(())
        })
    }

    /// The page, class, block index and page state of allocated block `p`; an error if `p` is
    /// not an allocated block.
    fn locate(&self, p: PPtr) -> StorageResult<(PPtr, usize, u64, PageState)> {
        let bad = |why: &str| StorageError::InvalidArgument(format!("deallocate {p:?}: {why}"));
        let pg = p.offset / PAGE;
        if pg == 0 || pg >= self.pages_per_segment {
            return Err(bad("not in a block page"));
        }
        let t = Txn::new();
        let page = PPtr::new(p.segment, pg * PAGE);
        let bits = self.read(&t, p.segment, G_BITMAP + pg / 64 * 8)?;
        if bits & (1 << (pg % 64)) == 0 {
            return Err(bad("its page is not in use"));
        }
        let st = PageState::unpack(self.read(&t, page.segment, page.offset + P_STATE)?);
        let c = st.class as usize;
        if c >= CLASSES.len() {
            return Err(corrupt(format!("page of class {c}"), page));
        }
        let (n, start) = page_geometry(c);
        let rel = p.offset - page.offset;
        if rel < start
            || !(rel - start).is_multiple_of(CLASSES[c])
            || (rel - start) / CLASSES[c] >= n
        {
            return Err(bad("not the start of a block"));
        }
        // A free block (double free) has a free-list link, not ALLOCATED, in its entry.
        let k = (rel - start) / CLASSES[c];
        if self.entry(&t, page, k)? != ALLOCATED {
            return Err(bad("the block is already free (a double free)"));
        }
        Ok((page, c, k, st))
    }

    /// A completely free page leaves its class list and goes back to its segment; a segment
    /// that was full becomes active; an empty segment goes to the free-segment list.
    ///
    /// When the segment goes to the free-segment list, the global lock is taken and left in
    /// `global`: the caller holds it until the transaction commits (a concurrent segment take
    /// must not read the list head this transaction is about to replace), then records the
    /// new owner.
    fn return_page<'a>(
        &'a self,
        txn: &mut Txn,
        slot: u32,
        c: usize,
        page: PPtr,
        global: &mut Option<MutexGuard<'a, ()>>,
    ) -> StorageResult<()> {
        self.unlink_page(txn, slot, c, page)?;
        let id = page.segment;
        let pg = page.offset / PAGE;
        let word = G_BITMAP + pg / 64 * 8;
        let bits = self.read(txn, id, word)?;
        self.write(txn, id, word, bits & !(1 << (pg % 64)))?;
        let counts = self.read(txn, id, G_COUNTS)?;
        let used = counts & 0xffff_ffff;
        let usable = counts >> 32;
        self.write(txn, id, G_COUNTS, counts & !0xffff_ffff | (used - 1))?;
        if used == usable {
            self.move_segment(txn, slot, id, S_FSL, S_ASL)?;
        }
        if used == 1 {
            *global = Some(lock(&self.global));
            self.unlink_segment(txn, 0, self.slot_base(slot) + S_ASL, id)?;
            let head = self.read_pptr(txn, 0, A_FREE_SEGS)?;
            self.write_pptr(txn, id, G_NEXT, head)?;
            self.write(txn, id, G_OWNER, 0)?;
            self.write_pptr(txn, 0, A_FREE_SEGS, PPtr::new(id, 0))?;
        }
        Ok(())
    }

    // ----- integrity -----

    /// Verifies A1–A4 by walking every list, segment and page (a full walk, for tests, tools
    /// and crash checks; recovery never does this) and returns the counts and every allocated
    /// block.
    pub fn check(&self) -> StorageResult<AllocReport> {
        let t = Txn::new();
        let mut r = AllocReport::default();
        for i in 0..self.slots {
            let b = self.slot_base(i);
            if self.read(&t, 0, b + S_LOG)? != 0 {
                return Err(corrupt(format!("slot {i}'s recovery item is armed"), PPtr::new(0, b)));
            }
        }
        let mut seen: HashSet<SegmentId> = HashSet::new();
        // (segment, owner, owned by a slot)
        let mut segs: Vec<(SegmentId, u32, bool)> = Vec::new();
        let (mut active, mut full_n, mut free_n) = (0u64, 0u64, 0u64);
        let mut collect = |head: PPtr, owner: u32, full: Option<bool>| -> StorageResult<()> {
            let mut at = head;
            while !at.is_null() {
                if !seen.insert(at.segment) {
                    return Err(corrupt("a segment in two lists, or a cycle", at));
                }
                if self.read(&t, at.segment, G_MAGIC)? != SEG_MAGIC {
                    return Err(corrupt("a listed segment has no header", at));
                }
                if self.read(&t, at.segment, G_OWNER)? != u64::from(owner) {
                    return Err(corrupt("a segment's owner is not its list's", at));
                }
                let counts = self.read(&t, at.segment, G_COUNTS)?;
                let (used, usable) = (counts & 0xffff_ffff, counts >> 32);
                match full {
                    Some(true) if used != usable => {
                        return Err(corrupt("a segment in a full list has free pages", at));
                    }
                    Some(false) if used == usable => {
                        return Err(corrupt("a segment in an active list is full", at));
                    }
                    None if used != 0 => {
                        return Err(corrupt("a segment in the free list has used pages", at));
                    }
                    _ => {}
                }
                match full {
                    Some(false) => active += 1,
                    Some(true) => full_n += 1,
                    None => free_n += 1,
                }
                segs.push((at.segment, owner, full.is_some()));
                at = self.read_pptr(&t, at.segment, G_NEXT)?;
            }
            Ok(())
        };
        for i in 0..self.slots {
            let b = self.slot_base(i);
            collect(self.read_pptr(&t, 0, b + S_ASL)?, i + 1, Some(false))?;
            collect(self.read_pptr(&t, 0, b + S_FSL)?, i + 1, Some(true))?;
        }
        collect(self.read_pptr(&t, 0, A_FREE_SEGS)?, 0, None)?;
        for s in self.set.segments() {
            if s.id != 0 && !seen.contains(&s.id) {
                return Err(corrupt("a segment in no list", PPtr::new(s.id, 0)));
            }
        }
        // Pages: every page listed in a class list, and every used page.
        let mut listed: HashSet<PPtr> = HashSet::new();
        for i in 0..self.slots {
            for c in 0..CLASSES.len() {
                let mut at = self.read_pptr(&t, 0, self.slot_base(i) + S_PLM + c as u64 * 16)?;
                while !at.is_null() {
                    if !listed.insert(at) {
                        return Err(corrupt("a page listed twice, or a cycle", at));
                    }
                    let st = PageState::unpack(self.read(&t, at.segment, at.offset + P_STATE)?);
                    if st.class as usize != c || st.num_free == 0 {
                        return Err(corrupt("a listed page of another class, or full", at));
                    }
                    if self.owner.read().unwrap_or_else(|p| p.into_inner()).get(&at.segment)
                        != Some(&(i + 1))
                    {
                        return Err(corrupt("a page listed by a slot that does not own it", at));
                    }
                    at = self.read_pptr(&t, at.segment, at.offset + P_NEXT)?;
                }
            }
        }
        for &(id, _, owned) in &segs {
            let counts = self.read(&t, id, G_COUNTS)?;
            let mut used = 0;
            for pg in 1..self.pages_per_segment {
                if self.read(&t, id, G_BITMAP + pg / 64 * 8)? & (1 << (pg % 64)) == 0 {
                    continue;
                }
                used += 1;
                let page = PPtr::new(id, pg * PAGE);
                let st = PageState::unpack(self.read(&t, id, page.offset + P_STATE)?);
                let c = st.class as usize;
                if c >= CLASSES.len() {
                    return Err(corrupt("a used page of no class", page));
                }
                let (n, start) = page_geometry(c);
                if u64::from(st.num_blocks) != n || st.num_free > st.num_blocks {
                    return Err(corrupt("a page's counts are wrong", page));
                }
                if (st.num_free > 0) != listed.contains(&page) {
                    return Err(corrupt(
                        "a page with free blocks not listed, or a full page listed",
                        page,
                    ));
                }
                let mut free = vec![false; n as usize];
                let mut at = st.next_free;
                let mut count = 0;
                while at != 0 {
                    let rel = u64::from(at);
                    if rel < start
                        || (rel - start) % CLASSES[c] != 0
                        || (rel - start) / CLASSES[c] >= n
                    {
                        return Err(corrupt(format!("free list entry {rel} is not a block"), page));
                    }
                    let k = (rel - start) / CLASSES[c];
                    if free[k as usize] {
                        return Err(corrupt("a block twice on a free list", page));
                    }
                    free[k as usize] = true;
                    count += 1;
                    at = self.entry(&t, page, k)?;
                }
                if count != u64::from(st.num_free) {
                    return Err(corrupt(
                        format!("free list of {count} blocks, counted {}", st.num_free),
                        page,
                    ));
                }
                *r.pages.entry(CLASSES[c]).or_default() += 1;
                r.free_blocks += count;
                for (k, f) in free.iter().enumerate() {
                    if !f && self.entry(&t, page, k as u64)? != ALLOCATED {
                        return Err(corrupt(
                            format!("block {k} is neither on the free list nor marked allocated"),
                            page,
                        ));
                    }
                    if !f {
                        r.allocated
                            .push(PPtr::new(id, page.offset + start + k as u64 * CLASSES[c]));
                        r.allocated_blocks += 1;
                        r.allocated_bytes += CLASSES[c];
                    }
                }
            }
            if counts & 0xffff_ffff != used {
                return Err(corrupt(
                    format!(
                        "segment counts {used} used pages, header says {}",
                        counts & 0xffff_ffff
                    ),
                    PPtr::new(id, 0),
                ));
            }
            if !owned && used != 0 {
                return Err(corrupt("a free segment has used pages", PPtr::new(id, 0)));
            }
        }
        r.segments = (active, full_n, free_n);
        Ok(r)
    }
}
