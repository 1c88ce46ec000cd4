//! The big allocator: blocks of whole 4 KiB units (requests above [`MAX_SMALL`] up to
//! [`PAllocator::big_capacity`]) carved from big segments, with best fit over per-slot size
//! buckets and coalescing with both neighbours on free. Layout and protocol:
//! `docs/design/allocator.md`, "The big allocator".
//!
//! # Invariants
//! - B1: the units of a big segment after its header units (`h..n`) are covered by blocks
//!   laid end to end; a unit's info word is non-zero iff it is a block's first unit, and then
//!   holds the block's size in units, the used flag and [`BIG_TAG`]; a block's last unit holds
//!   its boundary tag (size | [`BIG_TAG`]).
//! - B2: every free block is on exactly one of its slot's bucket lists, the one of its size
//!   ([`big_bucket`]), doubly linked through the `next`/`prev` words of its first unit; no
//!   used block is on a list.
//! - B3: no two free blocks are adjacent (a free coalesces with both neighbours).
//! - B4: a big segment is on exactly one slot's big-segment list and its header says so
//!   (magic [`BIG_MAGIC`], owner `OWNER_BIG + slot`, an empty page bitmap); a segment whose
//!   blocks are all free after a free goes back to the free-segment list in that free's
//!   transaction (it may stay whole-free on the list only when a crash falls between taking
//!   it and the allocation that wanted it).
//! - Every value read from PM here (info and tag words, links, bucket heads) is validated
//!   before it becomes an offset: a bad one is `Corrupted`. B1 is what makes a pointer to the
//!   inside of a block or to a free block an `InvalidArgument` in O(1).
//!
//! # Ordering
//! Allocate and free are one redo transaction each (`redo.rs`), logging at most 17 words plus
//! the caller's location. Taking a segment zeroes its unit table unless its header says the
//! table is clean, and persists it (and, for a new segment, the header) before the
//! transaction that links it (P-ALLOC-4).
//!
//! # Concurrency
//! Allocation runs under the calling thread's slot lock, a free under the lock of the slot
//! owning the block's segment. Taking or returning a segment also holds the global lock until
//! its transaction commits (it writes the free-segment list: `mark_shared`).

use std::collections::HashSet;
use std::sync::MutexGuard;

use ferrite_pmem::{PPtr, SegmentId};

use super::defrag::G_HOLES;
use super::layout::*;
use super::redo::Txn;
use super::{OWNER_BIG, PAllocator, corrupt, lock};
use crate::storage::{StorageError, StorageResult};

/// Most free blocks a bucket walk visits before it calls the list cyclic.
const MAX_BUCKET_WALK: u64 = 1 << 24;

/// A block's info word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BigBlock {
    pub(super) units: u64,
    pub(super) used: bool,
}

impl PAllocator {
    /// (header units, total units) of a big segment: the header and unit table take the first
    /// `h` units, blocks cover `h..n`.
    pub(super) fn big_geometry(&self) -> (u64, u64) {
        let n = self.pages_per_segment * PAGE / UNIT;
        (unit_entry(n).div_ceil(UNIT), n)
    }

    /// The largest block a big segment can hold; larger requests are huge allocations.
    pub fn big_capacity(&self) -> u64 {
        let (h, n) = self.big_geometry();
        (n - h) * UNIT
    }

    fn ext_base(&self, slot: u32) -> u64 {
        ext_base(self.slots) + u64::from(slot) * EXT_BYTES
    }

    fn bucket_head(&self, slot: u32, b: usize) -> u64 {
        self.ext_base(slot) + X_BIG_FREE + b as u64 * 8
    }

    /// The info word of unit `u` of big segment `seg`: `None` if the unit starts no block.
    pub(super) fn big_info(
        &self,
        txn: &Txn,
        seg: SegmentId,
        u: u64,
    ) -> StorageResult<Option<BigBlock>> {
        let (h, n) = self.big_geometry();
        let w = self.read(txn, seg, unit_entry(u) + U_INFO)?;
        if w == 0 {
            return Ok(None);
        }
        let units = w & 0xffff_ffff;
        if w & BIG_HOLE != 0 {
            return Err(corrupt(
                format!("big block info {w:#x} at unit {u}: the hole flag is reserved"),
                PPtr::new(seg, unit_entry(u)),
            ));
        }
        if w & !(0xffff_ffff | BIG_USED) != BIG_TAG || units == 0 || u < h || u + units > n {
            return Err(corrupt(
                format!("big block info {w:#x} at unit {u}"),
                PPtr::new(seg, unit_entry(u)),
            ));
        }
        Ok(Some(BigBlock { units, used: w & BIG_USED != 0 }))
    }

    /// The boundary tag at unit `u` of `seg` (the size of the block ending there), validated.
    fn big_tag(&self, txn: &Txn, seg: SegmentId, u: u64) -> StorageResult<u64> {
        let (h, _) = self.big_geometry();
        let w = self.read(txn, seg, unit_entry(u) + U_TAG)?;
        let units = w & 0xffff_ffff;
        if w & !0xffff_ffff != BIG_TAG || units == 0 || units > u + 1 - h {
            return Err(corrupt(
                format!("big block tag {w:#x} at unit {u}"),
                PPtr::new(seg, unit_entry(u) + U_TAG),
            ));
        }
        Ok(units)
    }

    /// The unit reference at (`seg`, `off`) (a bucket head or a free-list link), validated:
    /// null, or a block unit of a live big segment.
    pub(super) fn unit_link(
        &self,
        txn: &Txn,
        seg: SegmentId,
        off: u64,
    ) -> StorageResult<Option<(SegmentId, u64)>> {
        let w = self.read(txn, seg, off)?;
        if w == BIG_NIL {
            return Ok(None);
        }
        let (s, u) = (w >> 32, w & 0xffff_ffff);
        let (h, n) = self.big_geometry();
        let ok = u >= h
            && u < n
            && s != 0
            && self.addr(PPtr::new(s, 0), self.pages_per_segment * PAGE).is_ok()
            && self.read(txn, s, G_MAGIC)? == BIG_MAGIC;
        if !ok {
            return Err(corrupt(format!("a big free-list link {w:#x}"), PPtr::new(seg, off)));
        }
        Ok(Some((s, u)))
    }

    fn write_info(
        &self,
        txn: &mut Txn,
        seg: SegmentId,
        u: u64,
        units: u64,
        used: bool,
    ) -> StorageResult<()> {
        let w = units | BIG_TAG | if used { BIG_USED } else { 0 };
        self.write(txn, seg, unit_entry(u) + U_INFO, w)?;
        self.write(txn, seg, unit_entry(u + units - 1) + U_TAG, units | BIG_TAG)
    }

    /// Pushes the free block at (`seg`, `u`) of `units` units onto its bucket of slot `slot`.
    fn push_free(
        &self,
        txn: &mut Txn,
        slot: u32,
        seg: SegmentId,
        u: u64,
        units: u64,
    ) -> StorageResult<()> {
        let head_at = self.bucket_head(slot, big_bucket(units));
        let old = self.unit_link(txn, 0, head_at)?;
        let me = unit_ref(seg, u);
        self.write(txn, seg, unit_entry(u) + U_NEXT, old.map_or(BIG_NIL, |(s, v)| unit_ref(s, v)))?;
        self.write(txn, seg, unit_entry(u) + U_PREV, BIG_NIL)?;
        if let Some((s, v)) = old {
            self.write(txn, s, unit_entry(v) + U_PREV, me)?;
        }
        self.write(txn, 0, head_at, me)
    }

    /// Unlinks the free block at (`seg`, `u`) of `units` units from its bucket of slot `slot`.
    fn unlink_free(
        &self,
        txn: &mut Txn,
        slot: u32,
        seg: SegmentId,
        u: u64,
        units: u64,
    ) -> StorageResult<()> {
        let me = unit_ref(seg, u);
        let next = self.unit_link(txn, seg, unit_entry(u) + U_NEXT)?;
        let prev = self.unit_link(txn, seg, unit_entry(u) + U_PREV)?;
        let next_w = next.map_or(BIG_NIL, |(s, v)| unit_ref(s, v));
        match prev {
            None => {
                let head_at = self.bucket_head(slot, big_bucket(units));
                if self.read(txn, 0, head_at)? != me {
                    return Err(corrupt(
                        "a free big block without a predecessor is not its bucket's head",
                        PPtr::new(seg, u * UNIT),
                    ));
                }
                self.write(txn, 0, head_at, next_w)?;
            }
            Some((s, v)) => {
                if self.read(txn, s, unit_entry(v) + U_NEXT)? != me {
                    return Err(corrupt(
                        "a big free list's links disagree",
                        PPtr::new(s, v * UNIT),
                    ));
                }
                self.write(txn, s, unit_entry(v) + U_NEXT, next_w)?;
            }
        }
        if let Some((s, v)) = next {
            self.write(
                txn,
                s,
                unit_entry(v) + U_PREV,
                prev.map_or(BIG_NIL, |(a, b)| unit_ref(a, b)),
            )?;
        }
        Ok(())
    }

    /// The best-fitting free block of at least `r` units of slot `slot`: the smallest in the
    /// first bucket (from `r`'s own) that holds one large enough.
    fn find_fit(
        &self,
        txn: &Txn,
        slot: u32,
        r: u64,
    ) -> StorageResult<Option<(SegmentId, u64, u64)>> {
        for b in big_bucket(r)..BIG_BUCKETS {
            let mut best: Option<(SegmentId, u64, u64)> = None;
            let mut at = self.unit_link(txn, 0, self.bucket_head(slot, b))?;
            let mut walked = 0u64;
            while let Some((s, u)) = at {
                walked += 1;
                if walked > MAX_BUCKET_WALK {
                    return Err(corrupt("a big free list has a cycle", PPtr::new(s, u * UNIT)));
                }
                let blk = match self.big_info(txn, s, u)? {
                    Some(blk) if !blk.used && big_bucket(blk.units) == b => blk,
                    _ => {
                        return Err(corrupt(
                            format!("bucket {b} lists a block that is not free of its size"),
                            PPtr::new(s, u * UNIT),
                        ));
                    }
                };
                if blk.units >= r && best.is_none_or(|(_, _, bu)| blk.units < bu) {
                    best = Some((s, u, blk.units));
                    if blk.units == r {
                        break;
                    }
                }
                at = self.unit_link(txn, s, unit_entry(u) + U_NEXT)?;
            }
            if best.is_some() {
                return Ok(best);
            }
        }
        Ok(None)
    }

    /// Allocates a big block of at least `size` bytes into `into` (slot lock held).
    pub(super) fn allocate_big(&self, slot: u32, size: u64, into: PPtr) -> StorageResult<PPtr> {
        let r = size.div_ceil(UNIT);
        for _ in 0..2 {
            let mut txn = Txn::new();
            let Some((seg, u, units)) = self.find_fit(&txn, slot, r)? else {
                self.take_big_segment(slot)?;
                continue;
            };
            // Slot-private: the block leaves its bucket, its first `r` units become the used
            // block, the rest (if any) a free block in its own bucket.
            self.unlink_free(&mut txn, slot, seg, u, units)?;
            self.write_info(&mut txn, seg, u, r, true)?;
            if units > r {
                self.write_info(&mut txn, seg, u + r, units - r, false)?;
                self.push_free(&mut txn, slot, seg, u + r, units - r)?;
            }
            let block = PPtr::new(seg, u * UNIT);
            txn.set_caller(into, PPtr::NULL, block);
            self.commit(slot, txn)?;
            return Ok(block);
        }
        Err(corrupt("a freshly taken big segment cannot serve its request", PPtr::new(0, 0)))
    }

    /// Gives slot `slot` a big segment whose units are one free block: from the free-segment
    /// list, or a new one. Holds the global lock until the transaction commits.
    fn take_big_segment(&self, slot: u32) -> StorageResult<()> {
        let _g = lock(&self.global);
        let (h, n) = self.big_geometry();
        let owner = OWNER_BIG + slot;
        let mut txn = Txn::new();
        txn.mark_shared();
        let seg = self.seg_link(&txn, 0, A_FREE_SEGS)?;
        let id = if seg.is_null() {
            let id = self.grow_segment()?;
            // P-ALLOC-4: the header and a zero table, durable while unreachable. A crash from
            // here to the commit leaves an orphan, which open adopts as a free small segment.
            let s = &*self.set;
            let g = self.addr(PPtr::new(id, 0), unit_entry(n))?;
            let mut hdr = SegmentHeader::new(owner, self.pages_per_segment - 1);
            hdr.magic = BIG_MAGIC;
            s.write_struct(g, &hdr)?;
            s.fill(g + BIG_TABLE, unit_entry(n) - BIG_TABLE, 0)?;
            s.persist_rule("P-ALLOC-4", g, unit_entry(n))?; // ORDER(P-ALLOC-4): header and table before the link
            id
        } else {
            let id = seg.segment;
            let (used, _) = self.counts(&txn, id)?;
            if used != 0 {
                return Err(corrupt("a segment on the free list has used pages", seg));
            }
            let next = self.seg_link(&txn, id, G_NEXT)?;
            self.write_pptr(&mut txn, 0, A_FREE_SEGS, next)?;
            if self.read(&txn, id, G_HOLES)? != 0 {
                // `defragment` punched pages of it while it was a small segment (or it is an
                // adopted orphan that may have holes): big blocks and the unit table may lie
                // anywhere in it, so the whole segment gets file space again before use
                // (conventions §2.8: a store into a hole on a full file system is SIGBUS).
                self.back_range(PPtr::new(id, 0), self.pages_per_segment * PAGE)?;
                self.write(&mut txn, id, G_HOLES, 0)?;
            }
            let clean = self.read(&txn, id, G_CLEAN)?;
            if clean != TABLE_CLEAN {
                // P-ALLOC-4: a table dirtied by small pages (or never written) is zeroed and
                // durable before the link; the segment is free meanwhile (nobody reads it).
                let s = &*self.set;
                let g = self.addr(PPtr::new(id, BIG_TABLE), unit_entry(n) - BIG_TABLE)?;
                s.fill(g, unit_entry(n) - BIG_TABLE, 0)?;
                s.persist_rule("P-ALLOC-4", g, unit_entry(n) - BIG_TABLE)?; // ORDER(P-ALLOC-4): a zero table before the link
            }
            if clean != 0 {
                self.write(&mut txn, id, G_CLEAN, 0)?;
            }
            self.write(&mut txn, id, G_OWNER, u64::from(owner))?;
            self.write(&mut txn, id, G_MAGIC, BIG_MAGIC)?;
            id
        };
        let head_at = self.ext_base(slot) + X_BIG_SEGMENTS;
        let head = self.seg_link(&txn, 0, head_at)?;
        self.write_pptr(&mut txn, id, G_NEXT, head)?;
        self.write_pptr(&mut txn, 0, head_at, PPtr::new(id, 0))?;
        self.write_info(&mut txn, id, h, n - h, false)?;
        self.push_free(&mut txn, slot, id, h, n - h)?;
        self.commit(slot, txn)?;
        self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(id, owner);
        Ok(())
    }

    /// Frees big block `p`, whose pointer is stored at `from`, in slot `slot` (the owner of
    /// its segment): coalesces it with free neighbours; a segment left with one free block
    /// goes back to the free-segment list in the same transaction.
    pub(super) fn deallocate_big(&self, slot: u32, from: PPtr, p: PPtr) -> StorageResult<()> {
        let _l = lock(&self.slot_locks[slot as usize]);
        if self.read_pptr(&Txn::new(), from.segment, from.offset)? != p
            || self.owner_of(p.segment) != Some(OWNER_BIG + slot)
        {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate from {from:?}: freed concurrently"
            )));
        }
        let bad = |why: &str| StorageError::InvalidArgument(format!("deallocate {p:?}: {why}"));
        let (h, n) = self.big_geometry();
        let u = p.offset / UNIT;
        if !p.offset.is_multiple_of(UNIT) || u < h || u >= n {
            return Err(bad("not the start of a big block"));
        }
        let mut txn = Txn::new();
        let id = p.segment;
        let units = match self.big_info(&txn, id, u)? {
            None => return Err(bad("not the start of a big block")),
            Some(b) if !b.used => return Err(bad("the block is already free (a double free)")),
            Some(b) => b.units,
        };
        if self.big_tag(&txn, id, u + units - 1)? != units {
            return Err(corrupt("a big block's boundary tag disagrees with its info", p));
        }
        let (mut start, mut total) = (u, units);
        if u > h {
            let m = self.big_tag(&txn, id, u - 1)?;
            let l = u - m;
            match self.big_info(&txn, id, l)? {
                Some(b) if b.units == m => {
                    if !b.used {
                        self.unlink_free(&mut txn, slot, id, l, m)?;
                        self.write(&mut txn, id, unit_entry(u) + U_INFO, 0)?;
                        start = l;
                        total += m;
                    }
                }
                _ => return Err(corrupt("a boundary tag names no block", PPtr::new(id, l * UNIT))),
            }
        }
        if u + units < n {
            let r = u + units;
            match self.big_info(&txn, id, r)? {
                Some(b) => {
                    if !b.used {
                        self.unlink_free(&mut txn, slot, id, r, b.units)?;
                        self.write(&mut txn, id, unit_entry(r) + U_INFO, 0)?;
                        total += b.units;
                    }
                }
                None => {
                    return Err(corrupt(
                        "a unit after a block starts no block",
                        PPtr::new(id, r * UNIT),
                    ));
                }
            }
        }
        self.write_info(&mut txn, id, start, total, false)?;
        txn.set_caller(from, p, PPtr::NULL);
        let mut global: Option<MutexGuard<'_, ()>> = None;
        if start == h && total == n - h {
            self.return_big_segment(&mut txn, slot, id, &mut global)?;
        } else {
            self.push_free(&mut txn, slot, id, start, total)?;
        }
        self.commit(slot, txn)?;
        if global.is_some() {
            self.owner.write().unwrap_or_else(|p| p.into_inner()).insert(id, 0);
        }
        Ok(())
    }

    /// Within `txn`: big segment `id` of slot `slot`, now one free block (not on a bucket
    /// list), leaves the slot's big-segment list and joins the free-segment list as a free
    /// small-format segment with a clean table. Takes the global lock into `global`: the
    /// caller holds it until the commit.
    fn return_big_segment<'a>(
        &'a self,
        txn: &mut Txn,
        slot: u32,
        id: SegmentId,
        global: &mut Option<MutexGuard<'a, ()>>,
    ) -> StorageResult<()> {
        *global = Some(lock(&self.global));
        txn.mark_shared();
        self.unlink_segment(txn, (0, self.ext_base(slot) + X_BIG_SEGMENTS), id)?;
        let head = self.seg_link(txn, 0, A_FREE_SEGS)?;
        self.write_pptr(txn, id, G_NEXT, head)?;
        self.write(txn, id, G_OWNER, 0)?;
        self.write(txn, id, G_MAGIC, SEG_MAGIC)?;
        self.write(txn, id, G_CLEAN, TABLE_CLEAN)?;
        self.write_pptr(txn, 0, A_FREE_SEGS, PPtr::new(id, 0))
    }

    /// Walks slot `slot`'s big-segment list (open: rebuilding the owner map), validating each
    /// link and header.
    pub(super) fn big_segments_of(&self, slot: u32) -> StorageResult<Vec<SegmentId>> {
        let t = Txn::new();
        let mut v = Vec::new();
        let mut seen = HashSet::new();
        let mut at = self.seg_link(&t, 0, self.ext_base(slot) + X_BIG_SEGMENTS)?;
        while !at.is_null() {
            if !seen.insert(at.segment) {
                return Err(corrupt("a big-segment list has a cycle", at));
            }
            if self.read(&t, at.segment, G_MAGIC)? != BIG_MAGIC
                || self.read(&t, at.segment, G_OWNER)? != u64::from(OWNER_BIG + slot)
            {
                return Err(corrupt("a listed big segment has no big header of its slot", at));
            }
            v.push(at.segment);
            at = self.seg_link(&t, at.segment, G_NEXT)?;
        }
        Ok(v)
    }
}
