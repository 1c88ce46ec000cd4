//! Defragmentation: giving file-system space back. Free segments are released (their files
//! removed, P-ALLOC-6) and the free pages of the small segments slots still own are punched
//! (`PoolSet::punch_hole`). Design and costs: `docs/design/allocator.md`, "Defragmentation".
//!
//! # Invariants
//! - Only a page whose bitmap bit is clear is punched: it serves no class, is in no list, and
//!   holds nothing the allocator or an application reads (a page's header and entries are
//!   written afresh when it is taken).
//! - A page is backed again (`PoolSet::allocate_range`) before it is initialised for a class
//!   (`take_page`, conventions §2.8), so a store into a punched page never needs file space
//!   the file system may not have: a full file system is `PoolFull` at the take, not SIGBUS.
//!
//! # Ordering (P-ALLOC-13)
//! A page is punched only while its bit is clear in the durable bitmap: the transaction that
//! returned it has committed (its P-ALLOC-2 fence is behind it), so a crash cannot bring back a
//! state in which the punched page was in use. A punch is a file operation, durable on return;
//! a crash before it leaves a free page that still holds file space (no allocator state
//! depends on it; the next pass punches it).
//!
//! # Concurrency
//! The free segments are released under the global lock (as `release_free_segments`). The
//! pages of slot `s`'s segments are punched under `s`'s lock, one slot at a time: pages are
//! taken and returned, and segments move, only under the owning slot's lock, so no page can
//! be taken while it is being punched. Never two slot locks at once.

use std::sync::atomic::Ordering;

use ferrite_pmem::PPtr;

use super::layout::{G_MAGIC, G_NEXT, P_STATE, PAGE, S_ASL, bitmap_word};
use super::redo::Txn;
use super::{PAllocator, lock};
use crate::storage::{StorageError, StorageResult};

/// The small-segment header word that says pages of the segment may be punched (`pad[1]` of
/// `SegmentHeader`; `pad[0]` is the big allocator's clean-table mark): 0 for a segment created
/// by growth (its file is fully allocated), 1 once `defragment` is about to punch one of its
/// pages, or for an adopted orphan. Cleared only by the big allocator, in the transaction
/// that takes the segment, after it backed the whole segment again (`big.rs`).
pub(super) const G_HOLES: u64 = G_MAGIC + 16;
const _: () = assert!(G_HOLES == 48);

/// What one [`PAllocator::defragment`] pass gave back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DefragReport {
    /// Free segments whose files were removed.
    pub segments_released: u64,
    /// Bytes of those files.
    pub segment_bytes: u64,
    /// Free pages of owned small segments that were punched (a page that was already a hole
    /// is punched again and counted again: the pass keeps no record of earlier passes).
    pub pages_punched: u64,
    /// Bytes of those pages.
    pub punched_bytes: u64,
}

impl DefragReport {
    /// Bytes the pass gave back at most (released files and punched pages; see
    /// `PoolSet::fs_footprint` for what the file system actually holds).
    pub fn bytes_returned(&self) -> u64 {
        self.segment_bytes + self.punched_bytes
    }
}

impl PAllocator {
    /// Gives file-system space back: releases every free segment (its file is removed, as
    /// [`PAllocator::release_free_segments`]`(0)`) and punches a hole over every free page of
    /// the small segments the slots own. Blocks, pointers and the allocator's state do not
    /// change; a punched page is backed again when a class takes it.
    ///
    /// Cost: one transaction and one file removal per free segment, one `fallocate` punch per
    /// free page of the owned segments (a few µs each on tmpfs, see the design doc), and a
    /// read of each owned segment's page bitmap. Runs only when called: nothing punches on the
    /// allocate or free path.
    pub fn defragment(&self) -> StorageResult<DefragReport> {
        self.guard(|| {
            let mut r = DefragReport::default();
            let seg_bytes = self.set.segment_size();
            {
                let slot = self.my_slot();
                let _l = lock(&self.slot_locks[slot as usize]);
                r.segments_released = self.release_segments(slot, 0)? as u64;
                r.segment_bytes = r.segments_released * seg_bytes;
            }
            for slot in 0..self.slots {
                let _l = lock(&self.slot_locks[slot as usize]);
                r.pages_punched += self.punch_free_pages(slot)?;
            }
            r.punched_bytes = r.pages_punched * PAGE;
            Ok(r)
        })
    }

    /// Punches every free page of slot `slot`'s active segments (a full segment has none);
    /// returns how many (slot lock held).
    fn punch_free_pages(&self, slot: u32) -> StorageResult<u64> {
        let t = Txn::new();
        let mut punched = 0;
        let mut at = self.seg_link(&t, 0, self.slot_base(slot) + S_ASL)?;
        let mut seen = 0u64;
        while !at.is_null() {
            seen += 1;
            if seen > 1 << 20 {
                return Err(super::corrupt("an active-segment list has a cycle", at));
            }
            let id = at.segment;
            let mut pg = 1;
            while pg < self.pages_per_segment {
                let bits = self.read(&t, id, bitmap_word(pg))?;
                if bits & (1 << (pg % 64)) == 0 {
                    self.mark_holes(id)?;
                    // P-ALLOC-13: the bit is clear in the durable bitmap (the returning
                    // transaction committed): nothing reads this page until it is taken again.
                    self.set.punch_hole(PPtr::new(id, pg * PAGE), PAGE)?;
                    punched += 1;
                }
                pg += 1;
            }
            at = self.seg_link(&t, id, G_NEXT)?;
        }
        Ok(punched)
    }

    /// Marks segment `id` as possibly holding punched pages, durably, before its first punch.
    fn mark_holes(&self, id: u64) -> StorageResult<()> {
        let g = self.addr(PPtr::new(id, G_HOLES), 8)?;
        if self.set.load_u64(g, Ordering::Acquire)? == 0 {
            self.set.store_u64(g, 1, Ordering::Release)?;
            self.set.persist_rule("P-ALLOC-13", g, 8)?; // ORDER(P-ALLOC-13): the hint is durable before any page of the segment is punched
        }
        Ok(())
    }

    /// Backs page `page` with file space again if it may be a hole: its segment is marked
    /// (`G_HOLES`) and its state word reads zero (a punched page reads zeros; a page that
    /// served a class and was not punched since keeps a non-zero state). Slot lock held.
    pub(super) fn back_page(&self, t: &Txn, page: PPtr) -> StorageResult<()> {
        if self.read(t, page.segment, G_HOLES)? == 0
            || self.read(t, page.segment, page.offset + P_STATE)? != 0
        {
            return Ok(());
        }
        self.back_range(page, PAGE)
    }

    /// Allocates file space for `len` bytes at `at` (a punched range is backed again);
    /// `PoolFull` when the file system has no room.
    pub(super) fn back_range(&self, at: PPtr, len: u64) -> StorageResult<()> {
        self.set.allocate_range(at, len).map_err(|e| match e {
            ferrite_pmem::Error::PoolFull { requested, available, .. } => StorageError::PoolFull {
                at: "allocator (no file space to back a punched range)".into(),
                requested,
                available,
            },
            other => other.into(),
        })
    }
}
