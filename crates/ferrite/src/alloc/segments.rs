//! Segment and page lists: taking, creating, returning and releasing segments, taking and
//! returning pages, the list walks, and rebuilding the segment-owner map at open.
//!
//! # Invariants
//! - Every link read from PM is validated before it is followed or combined with an offset
//!   (`seg_link`, `page_link`): a segment link is null or (segment ≠ 0, offset 0) naming a live
//!   segment at least as large as the anchor's segment size; a page link is null or a
//!   page-aligned offset of a block page (1 ≤ page < pages per segment) in such a segment.
//!   Anything else is `Corrupted`, never an overflow or a fault.
//! - A segment's counts word holds `used ≤ usable = pages per segment − 1`; a page's state
//!   holds a class < 40, its geometry's block count and `num_free ≤ num_blocks`
//!   (`counts`, `page_state`).
//! - A list walk is bounded (a cycle in a corrupt pool ends it with `Corrupted`).
//!
//! # Ordering
//! P-ALLOC-4: a fresh page's header and entries, and a fresh or adopted segment's header, are
//! persisted before the transaction that links them. P-ALLOC-6: a released segment leaves the
//! free-segment list in a committed transaction before the pool set removes it (P-PM-9 inside);
//! a crash in between leaves a segment in no list, which `open` adopts again.
//!
//! # Concurrency
//! A slot's lists are changed under its slot lock; the free-segment list, segment creation
//! and release under the global lock, taken after a slot lock and held until the transaction
//! that changes the list has committed and been disarmed: such transactions are marked shared
//! (P-ALLOC-7).

use std::collections::HashMap;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use ferrite_pmem::{PPtr, SegmentId};

use super::huge::Orphan;
use super::layout::*;
use super::redo::Txn;
use super::{OWNER_BIG, PAllocator, corrupt, lock};
use crate::storage::{StorageError, StorageResult};

/// Most segments a list walk visits before it calls the list cyclic.
const MAX_LIST: u64 = 1 << 20;

impl PAllocator {
    /// Whether `id` is a live segment large enough to be a small segment.
    fn small_segment_fits(&self, id: SegmentId) -> bool {
        id != 0 && self.addr(PPtr::new(id, 0), self.pages_per_segment * PAGE).is_ok()
    }

    /// The segment link (a list head or a header's `next`) at (`seg`, `off`), validated.
    pub(super) fn seg_link(&self, txn: &Txn, seg: u64, off: u64) -> StorageResult<PPtr> {
        let p = self.read_pptr(txn, seg, off)?;
        if p.is_null() || (p.offset == 0 && self.small_segment_fits(p.segment)) {
            Ok(p)
        } else {
            Err(corrupt(format!("a segment link to {p:?}"), PPtr::new(seg, off)))
        }
    }

    /// The page link (a class-list head or a page's `next`) at (`seg`, `off`), validated.
    pub(super) fn page_link(&self, txn: &Txn, seg: u64, off: u64) -> StorageResult<PPtr> {
        let p = self.read_pptr(txn, seg, off)?;
        let pg = p.offset / PAGE;
        if p.is_null()
            || (p.offset.is_multiple_of(PAGE)
                && pg >= 1
                && pg < self.pages_per_segment
                && self.small_segment_fits(p.segment))
        {
            Ok(p)
        } else {
            Err(corrupt(format!("a page link to {p:?}"), PPtr::new(seg, off)))
        }
    }

    /// Segment `id`'s (used, usable) page counts, validated.
    pub(super) fn counts(&self, txn: &Txn, id: SegmentId) -> StorageResult<(u64, u64)> {
        let w = self.read(txn, id, G_COUNTS)?;
        let (used, usable) = (w & 0xffff_ffff, w >> 32);
        if usable != self.pages_per_segment - 1 || used > usable {
            return Err(corrupt(
                format!("segment counts {used} used of {usable}"),
                PPtr::new(id, 0),
            ));
        }
        Ok((used, usable))
    }

    /// Page `page`'s state and class, validated (the class indexes `CLASSES`).
    pub(super) fn page_state(&self, txn: &Txn, page: PPtr) -> StorageResult<(PageState, usize)> {
        let st = PageState::unpack(self.read(txn, page.segment, page.offset + P_STATE)?);
        let c = usize::from(st.class);
        if c >= CLASSES.len()
            || u64::from(st.num_blocks) != page_geometry(c).0
            || st.num_free > st.num_blocks
        {
            return Err(corrupt(format!("page state {st:?}"), page));
        }
        Ok((st, c))
    }

    /// Walks every segment list to rebuild SegIDToAllocID; segments of the pool set that are
    /// in no list (an interrupted creation, or a release interrupted before the file went)
    /// are initialised and pushed onto the free list.
    pub(super) fn rebuild_owners(&self) -> StorageResult<()> {
        let mut owner = HashMap::new();
        let t = Txn::new();
        let mut walk = |head: (u64, u64), tag: u32| -> StorageResult<()> {
            let mut at = self.seg_link(&t, head.0, head.1)?;
            while !at.is_null() {
                if owner.len() as u64 > MAX_LIST || owner.insert(at.segment, tag).is_some() {
                    return Err(corrupt(
                        "a segment list has a cycle or a segment in two lists",
                        at,
                    ));
                }
                if self.read(&t, at.segment, G_MAGIC)? != SEG_MAGIC {
                    return Err(corrupt("a listed segment has no header", at));
                }
                at = self.seg_link(&t, at.segment, G_NEXT)?;
            }
            Ok(())
        };
        for i in 0..self.slots {
            let b = self.slot_base(i);
            walk((0, b + S_ASL), i + 1)?;
            walk((0, b + S_FSL), i + 1)?;
        }
        walk((0, A_FREE_SEGS), 0)?;
        // Big segments (`big.rs`): on their slot's big-segment list, never orphans.
        for i in 0..self.slots {
            for id in self.big_segments_of(i)? {
                if owner.len() as u64 > MAX_LIST || owner.insert(id, OWNER_BIG + i).is_some() {
                    return Err(corrupt("a big segment in two lists", PPtr::new(id, 0)));
                }
            }
        }
        let orphans: Vec<_> = self
            .set
            .segments()
            .into_iter()
            .filter(|s| s.id != 0 && !owner.contains_key(&s.id))
            .collect();
        *self.owner.write().unwrap_or_else(|p| p.into_inner()) = owner;
        for info in orphans {
            // A huge segment (live: kept; pending or dead: removed) or a headerless one of
            // another size (removed): one header read each (`huge.rs`).
            if !matches!(self.classify_orphan(&info)?, Orphan::Small) {
                continue;
            }
            let id = info.id;
            if !self.small_segment_fits(id) {
                return Err(corrupt(
                    "an orphan segment smaller than the anchor's size",
                    PPtr::new(id, 0),
                ));
            }
            // An orphan may be a released segment whose file survived a crash, with pages
            // punched while it was in use: it is marked as possibly holding holes.
            self.init_segment_header(id, 0, true)?;
            let _g = lock(&self.global);
            let mut txn = Txn::new();
            txn.mark_shared();
            let head = self.seg_link(&txn, 0, A_FREE_SEGS)?;
            self.write_pptr(&mut txn, id, G_NEXT, head)?;
            self.write_pptr(&mut txn, 0, A_FREE_SEGS, PPtr::new(id, 0))?;
            self.commit(0, txn)?;
            self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(id, 0);
        }
        Ok(())
    }

    /// Writes and persists a fresh small-segment header (P-ALLOC-4): not reachable until a
    /// transaction links the segment.
    /// `holes`: whether pages of the segment may be punched (`defrag.rs`).
    fn init_segment_header(&self, id: SegmentId, owner: u32, holes: bool) -> StorageResult<()> {
        let s = &*self.set;
        let g = self.addr(PPtr::new(id, 0), G_BYTES)?;
        let mut h = SegmentHeader::new(owner, self.pages_per_segment - 1);
        h.pad[1] = u64::from(holes); // G_HOLES (`defrag.rs`)
        s.write_struct(g, &h)?;
        Ok(s.persist_rule("P-ALLOC-4", g, G_BYTES)?) // ORDER(P-ALLOC-4): header before any link
    }

    /// A new segment file from the pool set (P-PM-8: complete before it is returned); no
    /// space left is `PoolFull`.
    pub(super) fn grow_segment(&self) -> StorageResult<SegmentId> {
        self.set.grow().map_err(|e| match e {
            ferrite_pmem::Error::PoolFull { requested, available, .. } => StorageError::PoolFull {
                at: "allocator (no segment left)".into(),
                requested,
                available,
            },
            other => other.into(),
        })
    }

    /// Gives slot `slot` an active segment: from the free-segment list, or a new one.
    fn take_segment(&self, slot: u32) -> StorageResult<()> {
        let _g = lock(&self.global);
        let mut txn = Txn::new();
        txn.mark_shared();
        let b = self.slot_base(slot);
        let mut seg = self.seg_link(&txn, 0, A_FREE_SEGS)?;
        if seg.is_null() {
            let id = self.grow_segment()?;
            // A crash from here until the commit leaves an orphan segment, moved to the free
            // list at the next open.
            self.init_segment_header(id, slot + 1, false)?;
            seg = PPtr::new(id, 0);
        } else {
            let next = self.seg_link(&txn, seg.segment, G_NEXT)?;
            self.write_pptr(&mut txn, 0, A_FREE_SEGS, next)?;
            // Small pages will dirty a big segment's unit table (`big.rs`, G_CLEAN).
            if self.read(&txn, seg.segment, G_CLEAN)? != 0 {
                self.write(&mut txn, seg.segment, G_CLEAN, 0)?;
            }
        }
        let head = self.seg_link(&txn, 0, b + S_ASL)?;
        self.write_pptr(&mut txn, seg.segment, G_NEXT, head)?;
        self.write(&mut txn, seg.segment, G_OWNER, u64::from(slot) + 1)?;
        self.write_pptr(&mut txn, 0, b + S_ASL, PPtr::new(seg.segment, 0))?;
        self.commit(slot, txn)?;
        self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(seg.segment, slot + 1);
        Ok(())
    }

    /// Gives class `c` of slot `slot` a page with free blocks at the head of its list.
    pub(super) fn take_page(&self, slot: u32, c: usize) -> StorageResult<()> {
        let b = self.slot_base(slot);
        loop {
            let t = Txn::new();
            let seg = self.seg_link(&t, 0, b + S_ASL)?;
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
            // A free page may have been punched (`defrag.rs`): back it with file space again
            // before its first store (conventions §2.8), so a full file system is `PoolFull`
            // here rather than SIGBUS at the store.
            self.back_page(&t, PPtr::new(id, p * PAGE))?;
            // P-ALLOC-4: the page's header and free list, persisted while unreachable.
            let (n, start) = page_geometry(c);
            let s = &*self.set;
            let g = self.addr(PPtr::new(id, p * PAGE), PAGE)?;
            let head = self.page_link(&t, 0, b + class_head(c))?;
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
            let word = bitmap_word(p);
            let bits = self.read(&txn, id, word)?;
            self.write(&mut txn, id, word, bits | 1 << (p % 64))?;
            let (used, usable) = self.counts(&txn, id)?;
            let used = used + 1;
            self.write(&mut txn, id, G_COUNTS, usable << 32 | used)?;
            self.write_pptr(&mut txn, 0, b + class_head(c), PPtr::new(id, p * PAGE))?;
            if used == usable {
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
        self.unlink_segment(txn, (0, b + from), id)?;
        let head = self.seg_link(txn, 0, b + to)?;
        self.write_pptr(txn, id, G_NEXT, head)?;
        self.write_pptr(txn, 0, b + to, PPtr::new(id, 0))
    }

    /// Unlinks segment `id` from the list whose head `PPtr` is at `head` (segment, offset).
    pub(super) fn unlink_segment(
        &self,
        txn: &mut Txn,
        head: (u64, u64),
        id: SegmentId,
    ) -> StorageResult<()> {
        let next = self.seg_link(txn, id, G_NEXT)?;
        let mut at = head;
        for _ in 0..MAX_LIST {
            let cur = self.seg_link(txn, at.0, at.1)?;
            if cur.is_null() {
                break;
            }
            if cur.segment == id {
                return self.write_pptr(txn, at.0, at.1, next);
            }
            at = (cur.segment, G_NEXT);
        }
        Err(corrupt("a segment is not in the list its owner says", PPtr::new(id, 0)))
    }

    /// Unlinks page `page` from class list `c` of slot `slot`.
    fn unlink_page(&self, txn: &mut Txn, slot: u32, c: usize, page: PPtr) -> StorageResult<()> {
        let next = self.page_link(txn, page.segment, page.offset + P_NEXT)?;
        let mut at = (0, self.slot_base(slot) + class_head(c));
        for _ in 0..MAX_LIST * MAX_PAGES {
            let cur = self.page_link(txn, at.0, at.1)?;
            if cur.is_null() {
                break;
            }
            if cur == page {
                return self.write_pptr(txn, at.0, at.1, next);
            }
            at = (cur.segment, cur.offset + P_NEXT);
        }
        Err(corrupt("a page with free blocks is not in its class list", page))
    }

    /// A completely free page leaves its class list and goes back to its segment; a segment
    /// that was full becomes active; an empty segment goes to the free-segment list.
    ///
    /// When the segment goes to the free-segment list, the global lock is taken and left in
    /// `global`: the caller holds it until the transaction commits (a concurrent segment take
    /// must not read the list head this transaction is about to replace), then records the
    /// new owner.
    pub(super) fn return_page<'a>(
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
        let word = bitmap_word(pg);
        let bits = self.read(txn, id, word)?;
        self.write(txn, id, word, bits & !(1 << (pg % 64)))?;
        let (used, usable) = self.counts(txn, id)?;
        if used == 0 {
            return Err(corrupt("a segment with a used page counts none", PPtr::new(id, 0)));
        }
        self.write(txn, id, G_COUNTS, usable << 32 | (used - 1))?;
        if used == usable {
            self.move_segment(txn, slot, id, S_FSL, S_ASL)?;
        }
        if used == 1 {
            *global = Some(lock(&self.global));
            txn.mark_shared();
            self.unlink_segment(txn, (0, self.slot_base(slot) + S_ASL), id)?;
            let head = self.seg_link(txn, 0, A_FREE_SEGS)?;
            self.write_pptr(txn, id, G_NEXT, head)?;
            self.write(txn, id, G_OWNER, 0)?;
            self.write_pptr(txn, 0, A_FREE_SEGS, PPtr::new(id, 0))?;
        }
        Ok(())
    }

    /// Releases the free segments after the first `keep` of the free-segment list (see
    /// [`PAllocator::release_free_segments`]).
    pub(super) fn release_segments(&self, slot: u32, keep: usize) -> StorageResult<usize> {
        let _g = lock(&self.global);
        let mut prev = (0, A_FREE_SEGS);
        let mut cur = self.seg_link(&Txn::new(), prev.0, prev.1)?;
        for _ in 0..keep {
            if cur.is_null() {
                return Ok(0);
            }
            prev = (cur.segment, G_NEXT);
            cur = self.seg_link(&Txn::new(), prev.0, prev.1)?;
        }
        let mut released = 0;
        while !cur.is_null() {
            let mut txn = Txn::new();
            txn.mark_shared();
            let next = self.seg_link(&txn, cur.segment, G_NEXT)?;
            self.write_pptr(&mut txn, prev.0, prev.1, next)?;
            self.commit(slot, txn)?;
            self.owner.write().unwrap_or_else(|p| p.into_inner()).remove(&cur.segment);
            // P-ALLOC-6: out of every list (committed) before the file goes; a crash here
            // leaves a segment in no list, adopted again at open.
            self.set.remove_segment(cur.segment)?;
            released += 1;
            cur = next;
        }
        Ok(released)
    }
}
