//! Huge allocations: every request above the big allocator's capacity gets its own segment file
//! (spec `../shared/specs/scm-and-pallocator.md` §3.5), freed by removing the file. Layout and
//! protocol: `docs/design/allocator.md`, "Huge allocations".
//!
//! # Invariants
//! - A huge segment's data area is a 4 KiB **huge header** followed by the block: the block's
//!   pointer is `{segment, 4096}` (4 KiB aligned) and the data area is exactly
//!   `4096 + round_up(size, 4096)` bytes.
//! - The header's magic sits at the same offset as a small segment's magic (32), so one word
//!   tells a small header, a huge header and no header apart.
//! - State `LIVE` ⇔ the block is allocated ⇔ the owner map says [`OWNER_HUGE`] (after open);
//!   `PENDING` and `DEAD` segments exist only between the steps of one operation or after a
//!   crash, and `open` removes them.
//! - Values read from a huge header (magic, state, size, checksum) are validated before use: a
//!   header that has the magic but bad values is `Corrupted`, never a panic.
//!
//! # Ordering (P-ALLOC-10..11)
//! Allocate: the segment file is complete (P-PM-8); the header's size, checksum and state
//! `PENDING` are persisted before its magic, the magic before the transaction (P-ALLOC-10); one
//! shared transaction sets the state `LIVE` and stores the block's pointer at `into`
//! (P-ALLOC-11). Free: one shared transaction sets the state `DEAD` and nulls `from`; only then
//! does the pool set remove the file (P-ALLOC-12, P-PM-9 inside). Recovery (after the
//! journals are replayed) keeps `LIVE` segments and removes `PENDING` and `DEAD` ones.
//!
//! # Concurrency
//! Allocate and free run under the calling thread's slot lock, then the global lock, held until
//! the transaction has committed (its journal disarmed synchronously, P-ALLOC-7) and, for a
//! free, until the file is gone. A free re-reads `from` and the owner map under the global
//! lock, so two concurrent frees of one block cannot both succeed.

use std::sync::atomic::Ordering;

use ferrite_pmem::{PPtr, SegmentId, SegmentInfo};

use super::layout::G_MAGIC;
use super::redo::Txn;
use super::{OWNER_HUGE, PAllocator, corrupt, lock};
use crate::storage::{StorageError, StorageResult};

/// Bytes of the huge header at the start of a huge segment's data area; the block follows.
pub const HUGE_HEADER: u64 = 4096;
/// The huge header's magic.
pub const HUGE_MAGIC: u64 = u64::from_le_bytes(*b"FERRHUGE");
/// The largest huge request (1 TiB): larger sizes are `InvalidArgument` before any file is made.
pub const MAX_HUGE: u64 = 1 << 40;

/// Offset of the state word (one of `PENDING`, `LIVE`, `DEAD`).
const H_STATE: u64 = 0;
/// Offset of the requested size.
const H_SIZE: u64 = 8;
/// Offset of the checksum: crc32c over the size and the segment id.
const H_CRC: u64 = 16;
/// Offset of the magic: a small segment header's magic offset.
const H_MAGIC: u64 = G_MAGIC;
const _: () = assert!(H_MAGIC == 32 && H_MAGIC + 8 <= HUGE_HEADER);

/// The file exists and its header is written; no transaction has made it live.
const PENDING: u64 = 1;
/// The block is allocated.
const LIVE: u64 = 2;
/// The block was freed; the file is about to be removed.
const DEAD: u64 = 3;

/// Bytes of the pool set's own header page in every segment file.
const FILE_HEADER: u64 = 4096;

/// What `open` did with a segment that no list reaches.
pub(super) enum Orphan {
    /// A live huge segment: recorded as [`OWNER_HUGE`].
    Huge,
    /// A pending or dead huge segment, or a headerless one of another size: removed.
    Removed,
    /// A headerless (or small-headed) segment of the small segment size: to be adopted.
    Small,
}

fn header_crc(size: u64, id: SegmentId) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&size.to_le_bytes());
    b[8..].copy_from_slice(&id.to_le_bytes());
    u64::from(crc32c::crc32c(&b))
}

/// The data-area length of a huge block of `size` bytes, if it is representable.
fn data_len_of(size: u64) -> Option<u64> {
    size.checked_next_multiple_of(4096)?.checked_add(HUGE_HEADER)
}

fn pool_full(e: ferrite_pmem::Error) -> StorageError {
    match e {
        ferrite_pmem::Error::PoolFull { requested, available, .. } => StorageError::PoolFull {
            at: "allocator (no space for a huge segment)".into(),
            requested,
            available,
        },
        other => other.into(),
    }
}

impl PAllocator {
    /// Reads and validates the huge header of segment `id` (whose data area is `data_len`
    /// bytes): `Ok(None)` if it has no huge magic, else its (state, size).
    fn huge_header(&self, id: SegmentId, data_len: u64) -> StorageResult<Option<(u64, u64)>> {
        let t = Txn::new();
        if data_len < HUGE_HEADER || self.read(&t, id, H_MAGIC)? != HUGE_MAGIC {
            return Ok(None);
        }
        let at = PPtr::new(id, 0);
        let state = self.read(&t, id, H_STATE)?;
        let size = self.read(&t, id, H_SIZE)?;
        if self.read(&t, id, H_CRC)? != header_crc(size, id) {
            return Err(corrupt("a huge header's checksum does not match its size", at));
        }
        if size == 0 || size > MAX_HUGE || data_len_of(size) != Some(data_len) {
            return Err(corrupt(
                format!("a huge header's size {size} does not fit its {data_len}-byte segment"),
                at,
            ));
        }
        if !matches!(state, PENDING | LIVE | DEAD) {
            return Err(corrupt(format!("a huge header's state {state}"), at));
        }
        Ok(Some((state, size)))
    }

    /// The data-area length of live segment `id`.
    fn data_len(&self, id: SegmentId) -> Option<u64> {
        self.set.segments().into_iter().find(|s| s.id == id).map(|s| s.data_len)
    }

    /// Allocates a huge block of `size` bytes (above [`PAllocator::big_capacity`]) into `into`
    /// (already checked to be a null location of the pool): its own segment file, P-ALLOC-10/10.
    pub(super) fn allocate_huge(&self, size: u64, into: PPtr) -> StorageResult<PPtr> {
        let Some(data_len) = data_len_of(size).filter(|_| size <= MAX_HUGE) else {
            return Err(StorageError::InvalidArgument(format!(
                "allocation of {size} bytes: at most {MAX_HUGE}"
            )));
        };
        let slot = self.my_slot();
        let _l = lock(&self.slot_locks[slot as usize]);
        // P-PM-8 inside: the file is complete before it joins the pool set. A crash from here
        // until the header's magic is durable leaves a headerless segment, removed (or adopted
        // when it has the small segment size) at open.
        let id = self.set.add_segment(data_len + FILE_HEADER).map_err(pool_full)?;
        let block = PPtr::new(id, HUGE_HEADER);
        if let Err(e) = self.write_huge_header(id, size) {
            // No transaction refers to the segment yet: it goes again (best effort; a failure
            // here leaves a pending or headerless segment, which open removes).
            let _ = self.set.remove_segment(id);
            return Err(e);
        }
        // A failed commit poisons the handle and leaves the segment to open, which decides
        // from the header (live: the transaction committed; pending: it did not).
        let _g = lock(&self.global);
        let mut txn = Txn::new();
        txn.mark_shared();
        self.write(&mut txn, id, H_STATE, LIVE)?;
        txn.set_caller(into, PPtr::NULL, block);
        self.commit(slot, txn)?;
        self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(id, OWNER_HUGE);
        Ok(block)
    }

    /// Writes segment `id`'s pending huge header for a block of `size` bytes (P-ALLOC-10).
    fn write_huge_header(&self, id: SegmentId, size: u64) -> StorageResult<()> {
        let s = &*self.set;
        let h = self.addr(PPtr::new(id, 0), HUGE_HEADER)?;
        s.store_u64(h + H_STATE, PENDING, Ordering::Relaxed)?;
        s.store_u64(h + H_SIZE, size, Ordering::Relaxed)?;
        s.store_u64(h + H_CRC, header_crc(size, id), Ordering::Relaxed)?;
        s.persist_rule("P-ALLOC-10", h, H_CRC + 8)?; // ORDER(P-ALLOC-10): state, size and checksum before the magic
        s.store_u64(h + H_MAGIC, HUGE_MAGIC, Ordering::Release)?;
        s.persist_rule("P-ALLOC-10", h + H_MAGIC, 8)?; // ORDER(P-ALLOC-10): a complete pending header before the transaction
        Ok(())
    }

    /// Frees huge block `p`, whose pointer is at `from` (P-ALLOC-12).
    pub(super) fn deallocate_huge(&self, from: PPtr, p: PPtr) -> StorageResult<()> {
        let bad = |why: &str| {
            StorageError::InvalidArgument(format!("deallocate {p:?} from {from:?}: {why}"))
        };
        if p.offset != HUGE_HEADER {
            return Err(bad("not the start of a huge block"));
        }
        let slot = self.my_slot();
        let _l = lock(&self.slot_locks[slot as usize]);
        let _g = lock(&self.global);
        if self.read_pptr(&Txn::new(), from.segment, from.offset)? != p
            || self.owner_of(p.segment) != Some(OWNER_HUGE)
        {
            return Err(bad("freed concurrently"));
        }
        let data_len =
            self.data_len(p.segment).ok_or_else(|| corrupt("a huge segment is missing", p))?;
        match self.huge_header(p.segment, data_len)? {
            Some((LIVE, _)) => {}
            _ => return Err(corrupt("a huge segment the owner map holds is not live", p)),
        }
        let mut txn = Txn::new();
        txn.mark_shared();
        self.write(&mut txn, p.segment, H_STATE, DEAD)?;
        txn.set_caller(from, p, PPtr::NULL);
        self.commit(slot, txn)?;
        self.owner.write().unwrap_or_else(|e| e.into_inner()).remove(&p.segment);
        // P-ALLOC-12: dead (committed) before the file goes; a crash in between leaves a dead
        // segment, removed at open.
        Ok(self.set.remove_segment(p.segment)?)
    }

    /// Decides what `open` does with segment `info`, which no list reaches (after the journals
    /// were replayed): a live huge segment is kept, a pending or dead one removed, a
    /// headerless one adopted if it has the small segment size and removed otherwise. Reads
    /// one header.
    pub(super) fn classify_orphan(&self, info: &SegmentInfo) -> StorageResult<Orphan> {
        match self.huge_header(info.id, info.data_len)? {
            Some((LIVE, _)) => {
                self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(info.id, OWNER_HUGE);
                Ok(Orphan::Huge)
            }
            Some(_) => {
                self.set.remove_segment(info.id)?;
                Ok(Orphan::Removed)
            }
            None if info.file_size == self.set.segment_size() => Ok(Orphan::Small),
            None => {
                self.set.remove_segment(info.id)?;
                Ok(Orphan::Removed)
            }
        }
    }

    /// Validates the huge segment `info` for `check()`: its block and size if it is live.
    pub(super) fn check_huge(&self, info: &SegmentInfo) -> StorageResult<Option<(PPtr, u64)>> {
        match self.huge_header(info.id, info.data_len)? {
            Some((LIVE, size)) => {
                if self.owner_of(info.id) != Some(OWNER_HUGE) {
                    return Err(corrupt(
                        "a live huge segment the owner map does not hold",
                        PPtr::new(info.id, 0),
                    ));
                }
                Ok(Some((PPtr::new(info.id, HUGE_HEADER), size)))
            }
            Some((state, _)) => Err(corrupt(
                format!("a huge segment in state {state} outside an operation"),
                PPtr::new(info.id, 0),
            )),
            None => Ok(None),
        }
    }
}
