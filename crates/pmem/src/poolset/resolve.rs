//! Resolving persistent pointers: the table of live segments (id → where its range sits in
//! the reservation) and the reverse map (global offset → id).
//!
//! # Invariants
//! - A slot's `base` is the segment's global offset + 1 while the segment is live, 0
//!   otherwise; `len` is its data area's length. The reverse map holds exactly the live
//!   segments.
//! - Resolution checks the pointer against the slot (`offset + len` with checked arithmetic,
//!   inside the data area): a null, unknown, removed or out-of-range pointer is
//!   [`Error::BadPointer`], never a panic or an address outside the segment.
//! - A stale pointer cannot resolve into another segment: a removed id is not handed out
//!   again while the set is open (see `grow`), and a removed range is never reused while the
//!   set is open (PS3). Across opens, no thread holds pointers from the previous open, and a
//!   persistent pointer into a removed segment breaks the caller's promise of
//!   [`PoolSet::remove_segment`] (no live data remains in it).
//!
//! # Ordering
//! A slot is published len-then-base (`Release`) and read base-then-len (`Acquire`), so a
//! reader that sees a live base sees its length.
//!
//! # Concurrency
//! Resolution is lock-free; `to_pptr` and `segment_count` take the reverse map's read lock.
//! Publishing and unpublishing run under the set's membership mutex.

use std::sync::atomic::{AtomicU64, Ordering};

use zerocopy::{FromZeros, KnownLayout};

use crate::error::{Error, Result};
use crate::header::HEADER_AREA;
use crate::pptr::{PPtr, SegmentId};

use super::PoolSet;

/// Where a live segment sits: `base` is its global offset + 1 (0 = not live), `len` the length
/// of its data area. Published len-then-base (`Release`), read base-then-len (`Acquire`).
/// All zeros is a free slot: the table of [`MAX_SEGMENTS`](crate::MAX_SEGMENTS) slots is
/// allocated zeroed, so opening a pool set touches only the pages of the slots it uses.
#[derive(Default, FromZeros, KnownLayout)]
pub(super) struct Slot {
    pub(super) base: AtomicU64,
    pub(super) len: AtomicU64,
}

/// Description of one live segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Segment id.
    pub id: SegmentId,
    /// Size of the segment file (header page included).
    pub file_size: u64,
    /// Global offset of the segment's data area in the pool set's space.
    pub data_offset: u64,
    /// Length of the data area.
    pub data_len: u64,
}

impl PoolSet {
    pub(super) fn publish(&self, id: SegmentId, voff: u64, file_size: u64) {
        // A simulated reservation zeroes what its segments held before it is reused.
        self.space.mapping().note_used(usize::try_from(voff + file_size).unwrap_or(usize::MAX));
        let slot = &self.slots[id as usize];
        slot.len.store(file_size - HEADER_AREA, Ordering::Relaxed);
        slot.base.store(voff + 1, Ordering::Release);
        self.slots_used.fetch_max(id + 1, Ordering::AcqRel);
        let mut m = self.by_addr.write().unwrap_or_else(|p| p.into_inner());
        m.insert(voff, id);
    }

    /// Where live segment `id` sits: (global offset, file size), or `None` if it is not live.
    pub(super) fn locate(&self, id: SegmentId) -> Option<(u64, u64)> {
        let slot = self.slots.get(usize::try_from(id).ok()?)?;
        let base = slot.base.load(Ordering::Acquire);
        (base != 0).then(|| (base - 1, slot.len.load(Ordering::Relaxed) + HEADER_AREA))
    }

    /// Takes live segment `id` out of resolution (membership mutex held).
    pub(super) fn unpublish(&self, id: SegmentId, voff: u64) {
        if let Some(slot) = self.slots.get(id as usize) {
            slot.base.store(0, Ordering::Release);
        }
        let mut m = self.by_addr.write().unwrap_or_else(|p| p.into_inner());
        m.remove(&voff);
    }

    /// Resolves a persistent pointer to a global offset in the terms of the set's space
    /// (what `load_u64` & co. take). Null, unknown segments and offsets outside the segment's
    /// data area are [`Error::BadPointer`].
    #[inline]
    pub fn resolve(&self, p: PPtr) -> Result<u64> {
        self.resolve_range(p, 0)
    }

    /// Like [`PoolSet::resolve`], also checking that `len` bytes from the pointer lie inside
    /// the segment's data area.
    #[inline]
    pub fn resolve_range(&self, p: PPtr, len: u64) -> Result<u64> {
        let bad = |reason| Error::BadPointer { segment: p.segment, offset: p.offset, reason };
        if p.is_null() {
            return Err(bad("null pointer"));
        }
        let slot = self.slots.get(p.segment as usize).ok_or_else(|| bad("no such segment"))?;
        let base = slot.base.load(Ordering::Acquire);
        if base == 0 {
            return Err(bad("no such segment"));
        }
        let seg_len = slot.len.load(Ordering::Relaxed);
        match p.offset.checked_add(len) {
            Some(end) if end <= seg_len && (p.offset < seg_len || len == 0) => {
                Ok(base - 1 + HEADER_AREA + p.offset)
            }
            _ => Err(bad("offset outside the segment's data area")),
        }
    }

    /// The persistent pointer of a global offset (the inverse of [`PoolSet::resolve`]).
    pub fn to_pptr(&self, global: u64) -> Result<PPtr> {
        let m = self.by_addr.read().unwrap_or_else(|p| p.into_inner());
        let bad = Error::BadPointer {
            segment: u64::MAX,
            offset: global,
            reason: "address is not inside any segment's data area",
        };
        let (&voff, &id) = m.range(..=global).next_back().ok_or(bad)?;
        let len = self.slots[id as usize].len.load(Ordering::Relaxed);
        let data = voff + HEADER_AREA;
        if global < data || global >= data + len {
            return Err(Error::BadPointer {
                segment: u64::MAX,
                offset: global,
                reason: "address is not inside any segment's data area",
            });
        }
        Ok(PPtr::new(id, global - data))
    }

    /// The live segments, by id (a pass over the slots up to the highest id ever published,
    /// not over the whole table).
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let used = usize::try_from(self.slots_used.load(Ordering::Acquire)).unwrap_or(usize::MAX);
        self.slots[..used.min(self.slots.len())]
            .iter()
            .enumerate()
            .filter_map(|(id, s)| {
                let base = s.base.load(Ordering::Acquire);
                (base != 0).then(|| {
                    let len = s.len.load(Ordering::Relaxed);
                    SegmentInfo {
                        id: id as u64,
                        file_size: len + HEADER_AREA,
                        data_offset: base - 1 + HEADER_AREA,
                        data_len: len,
                    }
                })
            })
            .collect()
    }

    /// Number of live segments.
    pub fn segment_count(&self) -> usize {
        self.by_addr.read().unwrap_or_else(|p| p.into_inner()).len()
    }
}
