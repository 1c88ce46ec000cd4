//! The full integrity walk (`PAllocator::check`): invariants A1–A4 of the module docs, with the
//! counts and every allocated block (for tests, tools and crash checks; recovery never walks
//! pages).
//!
//! # Invariants
//! Every link and word it reads is validated as in `segments.rs` and `small.rs`; a violation
//! is `Corrupted` naming what and where, never a panic.
//!
//! # Concurrency
//! Read-only and lock-free: run it while no operation is in flight (a concurrent operation
//! can make it report a transient inconsistency).

use std::collections::{BTreeMap, HashSet};

use ferrite_pmem::{PPtr, SegmentId};

use super::layout::*;
use super::redo::Txn;
use super::{PAllocator, corrupt};
use crate::storage::StorageResult;

/// Counts returned by [`PAllocator::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocReport {
    /// Small segments, by list: active, full, free.
    pub segments: (u64, u64, u64),
    /// Used pages per class.
    pub pages: BTreeMap<u64, u64>,
    /// Allocated small blocks.
    pub allocated_blocks: u64,
    /// Bytes of allocated small blocks (by class size).
    pub allocated_bytes: u64,
    /// Allocated huge blocks: (block, requested size), by segment.
    pub huge: Vec<(PPtr, u64)>,
    /// Bytes of the huge blocks (requested sizes; each file is rounded up to 4 KiB plus a
    /// 4 KiB huge header and the pool set's 4 KiB segment header).
    pub huge_bytes: u64,
    /// Free blocks in used pages.
    pub free_blocks: u64,
    /// Every allocated block, small, big and huge (for leak checks).
    pub allocated: Vec<PPtr>,
    /// Big segments (on the slots' big-segment lists).
    pub big_segments: u64,
    /// Allocated big blocks, and their bytes (whole units); also counted in
    /// `allocated_blocks` and `allocated_bytes`.
    pub big_used: (u64, u64),
    /// Free big blocks, and their bytes.
    pub big_free: (u64, u64),
}

/// Which list a segment was found in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    Active,
    Full,
    Free,
}

impl PAllocator {
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
        // (segment, owned by a slot)
        let mut segs: Vec<(SegmentId, bool)> = Vec::new();
        let (mut active, mut full_n, mut free_n) = (0u64, 0u64, 0u64);
        let mut collect = |head: (u64, u64), owner: u32, list: List| -> StorageResult<()> {
            let mut at = self.seg_link(&t, head.0, head.1)?;
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
                let (used, usable) = self.counts(&t, at.segment)?;
                match list {
                    List::Full if used != usable => {
                        return Err(corrupt("a segment in a full list has free pages", at));
                    }
                    List::Active if used == usable => {
                        return Err(corrupt("a segment in an active list is full", at));
                    }
                    List::Free if used != 0 => {
                        return Err(corrupt("a segment in the free list has used pages", at));
                    }
                    _ => {}
                }
                match list {
                    List::Active => active += 1,
                    List::Full => full_n += 1,
                    List::Free => free_n += 1,
                }
                segs.push((at.segment, list != List::Free));
                at = self.seg_link(&t, at.segment, G_NEXT)?;
            }
            Ok(())
        };
        for i in 0..self.slots {
            let b = self.slot_base(i);
            collect((0, b + S_ASL), i + 1, List::Active)?;
            collect((0, b + S_FSL), i + 1, List::Full)?;
        }
        collect((0, A_FREE_SEGS), 0, List::Free)?;
        self.check_big(&mut r, &mut seen)?;
        for s in self.set.segments() {
            if s.id != 0 && !seen.contains(&s.id) {
                let Some((block, size)) = self.check_huge(&s)? else {
                    return Err(corrupt("a segment in no list", PPtr::new(s.id, 0)));
                };
                r.huge.push((block, size));
                r.huge_bytes += size;
                r.allocated.push(block);
            }
        }
        let huge_owned = self
            .owner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|&&o| o == super::OWNER_HUGE)
            .count();
        if huge_owned != r.huge.len() {
            return Err(corrupt(
                format!(
                    "the owner map holds {huge_owned} huge segments, {} are live",
                    r.huge.len()
                ),
                PPtr::NULL,
            ));
        }
        // Pages: every page listed in a class list, and every used page.
        let mut listed: HashSet<PPtr> = HashSet::new();
        for i in 0..self.slots {
            for c in 0..CLASSES.len() {
                let mut at = self.page_link(&t, 0, self.slot_base(i) + class_head(c))?;
                while !at.is_null() {
                    if !listed.insert(at) {
                        return Err(corrupt("a page listed twice, or a cycle", at));
                    }
                    let (st, pc) = self.page_state(&t, at)?;
                    if pc != c || st.num_free == 0 {
                        return Err(corrupt("a listed page of another class, or full", at));
                    }
                    if self.owner_of(at.segment) != Some(i + 1) {
                        return Err(corrupt("a page listed by a slot that does not own it", at));
                    }
                    at = self.page_link(&t, at.segment, at.offset + P_NEXT)?;
                }
            }
        }
        for &(id, owned) in &segs {
            let (counted, _) = self.counts(&t, id)?;
            let mut used = 0;
            for pg in 1..self.pages_per_segment {
                if self.read(&t, id, bitmap_word(pg))? & (1 << (pg % 64)) == 0 {
                    continue;
                }
                used += 1;
                let page = PPtr::new(id, pg * PAGE);
                let (st, c) = self.page_state(&t, page)?;
                let (n, start) = page_geometry(c);
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
                    let Some(k) = Self::block_index(c, rel) else {
                        return Err(corrupt(format!("free list entry {rel} is not a block"), page));
                    };
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
            if counted != used {
                return Err(corrupt(
                    format!("segment counts {used} used pages, header says {counted}"),
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

impl PAllocator {
    /// B1–B4 of `big.rs` for every slot: each big segment's units are covered by blocks end
    /// to end (interior info words zero, boundary tags matching), no two free blocks are
    /// adjacent, and the free blocks are exactly the blocks on the slot's bucket lists, each
    /// once, in the bucket of its size, with `prev` links matching. Adds the big segments to
    /// `seen` and the allocated big blocks to the report.
    fn check_big(&self, r: &mut AllocReport, seen: &mut HashSet<SegmentId>) -> StorageResult<()> {
        let t = Txn::new();
        let (h, n) = self.big_geometry();
        let owner_map = |id| self.owner_of(id);
        for i in 0..self.slots {
            // (segment, unit) → size of every free block of the slot.
            let mut free: BTreeMap<(SegmentId, u64), u64> = BTreeMap::new();
            for id in self.big_segments_of(i)? {
                let at = PPtr::new(id, 0);
                if !seen.insert(id) {
                    return Err(corrupt("a big segment in two lists", at));
                }
                if owner_map(id) != Some(super::OWNER_BIG + i) {
                    return Err(corrupt("a big segment's owner map entry is not its slot", at));
                }
                let (used, _) = self.counts(&t, id)?;
                if used != 0
                    || (1..self.pages_per_segment)
                        .any(|pg| self.read(&t, id, bitmap_word(pg)).map_or(true, |w| w != 0))
                {
                    return Err(corrupt("a big segment's page bitmap is not empty", at));
                }
                r.big_segments += 1;
                let mut u = h;
                let mut prev_free = false;
                while u < n {
                    let Some(b) = self.big_info(&t, id, u)? else {
                        return Err(corrupt(
                            "a big unit covered by no block",
                            PPtr::new(id, u * 4096),
                        ));
                    };
                    let tag = self.read(&t, id, unit_entry(u + b.units - 1) + U_TAG)?;
                    if tag != b.units | BIG_TAG {
                        return Err(corrupt("a big block's boundary tag", PPtr::new(id, u * 4096)));
                    }
                    for v in u + 1..u + b.units {
                        if self.read(&t, id, unit_entry(v) + U_INFO)? != 0 {
                            return Err(corrupt(
                                "an info word inside a big block",
                                PPtr::new(id, v * 4096),
                            ));
                        }
                    }
                    let bytes = b.units * UNIT;
                    if b.used {
                        r.allocated.push(PPtr::new(id, u * UNIT));
                        r.allocated_blocks += 1;
                        r.allocated_bytes += bytes;
                        r.big_used.0 += 1;
                        r.big_used.1 += bytes;
                    } else {
                        if prev_free {
                            return Err(corrupt(
                                "two adjacent free big blocks",
                                PPtr::new(id, u * UNIT),
                            ));
                        }
                        free.insert((id, u), b.units);
                        r.big_free.0 += 1;
                        r.big_free.1 += bytes;
                    }
                    prev_free = !b.used;
                    u += b.units;
                }
            }
            let mut listed: HashSet<(SegmentId, u64)> = HashSet::new();
            for b in 0..BIG_BUCKETS {
                let head =
                    ext_base(self.slots) + u64::from(i) * EXT_BYTES + X_BIG_FREE + b as u64 * 8;
                let mut prev = BIG_NIL;
                let mut at = self.unit_link(&t, 0, head)?;
                while let Some((s, u)) = at {
                    let p = PPtr::new(s, u * UNIT);
                    if !listed.insert((s, u)) {
                        return Err(corrupt("a free big block listed twice, or a cycle", p));
                    }
                    match free.get(&(s, u)) {
                        Some(&units) if big_bucket(units) == b => {}
                        Some(_) => return Err(corrupt("a free big block in the wrong bucket", p)),
                        None => {
                            return Err(corrupt(
                                "a bucket lists a block that is not free in its slot",
                                p,
                            ));
                        }
                    }
                    if self.read(&t, s, unit_entry(u) + U_PREV)? != prev {
                        return Err(corrupt("a big free list's prev link", p));
                    }
                    prev = unit_ref(s, u);
                    at = self.unit_link(&t, s, unit_entry(u) + U_NEXT)?;
                }
            }
            if let Some(&(s, u)) = free.keys().find(|k| !listed.contains(k)) {
                return Err(corrupt("a free big block on no bucket list", PPtr::new(s, u * UNIT)));
            }
        }
        Ok(())
    }
}
