//! The small allocator: popping a block off a class page's free list into the caller's
//! pointer, pushing a freed block back and nulling the caller's pointer, and locating the page
//! of a block being freed (with O(1) double-free detection).
//!
//! # Invariants
//! - A free block's BlockEntry holds the in-page offset of the next free block (0 = end); an
//!   allocated block's holds [`ALLOCATED`] (never a 64-byte aligned offset).
//! - Every value read from a page (its state, a free-list link) is validated against the
//!   class geometry before it is used as an index or offset: a bad one is `Corrupted`.
//!
//! # Ordering
//! Each allocation or free is one redo transaction (P-ALLOC-1..3, `redo.rs`); a page taken
//! for it is initialised first (P-ALLOC-4, `segments.rs`).
//!
//! # Concurrency
//! An allocation runs under the calling thread's slot lock; a free under the lock of the slot
//! owning the block's segment.

use ferrite_pmem::PPtr;

use super::layout::*;
use super::redo::Txn;
use super::{PAllocator, corrupt, lock};
use crate::storage::{StorageError, StorageResult};

impl PAllocator {
    /// BlockEntry `k` of `page`.
    pub(super) fn entry(&self, txn: &Txn, page: PPtr, k: u64) -> StorageResult<u16> {
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

    /// The index of the block at in-page offset `rel` of a page of class `c`, if `rel` is the
    /// start of one of its blocks.
    pub(super) fn block_index(c: usize, rel: u64) -> Option<u64> {
        let (n, start) = page_geometry(c);
        let d = rel.checked_sub(start)?;
        (d.is_multiple_of(CLASSES[c]) && d / CLASSES[c] < n).then(|| d / CLASSES[c])
    }

    /// Pops a block of class `c` into `into` (slot lock held).
    pub(super) fn allocate_small(&self, slot: u32, c: usize, into: PPtr) -> StorageResult<PPtr> {
        let plm = self.slot_base(slot) + class_head(c);
        if self.page_link(&Txn::new(), 0, plm)?.is_null() {
            self.take_page(slot, c)?;
        }
        let mut txn = Txn::new();
        let page = self.page_link(&txn, 0, plm)?;
        if page.is_null() {
            return Err(corrupt("a class list is empty after taking a page", PPtr::new(0, plm)));
        }
        let (st, pc) = self.page_state(&txn, page)?;
        let b = u64::from(st.next_free);
        let k = match Self::block_index(c, b) {
            Some(k) if st.num_free > 0 && pc == c => k,
            _ => return Err(corrupt("a listed page has no valid free block", page)),
        };
        let next = self.entry(&txn, page, k)?;
        if next == ALLOCATED {
            return Err(corrupt("a free list reaches an allocated block", page));
        }
        // Pop: head = entry k; entry k = ALLOCATED (O(1) double-free detection); one less free.
        self.set_entry(&mut txn, page, k, ALLOCATED)?;
        let state = PageState { next_free: next, num_free: st.num_free - 1, ..st };
        self.write(&mut txn, page.segment, page.offset + P_STATE, state.pack())?;
        let block = PPtr::new(page.segment, page.offset + b);
        txn.set_caller(into, PPtr::NULL, block);
        if state.num_free == 0 {
            let after = self.page_link(&txn, page.segment, page.offset + P_NEXT)?;
            self.write_pptr(&mut txn, 0, plm, after)?;
        }
        self.commit(slot, txn)?;
        Ok(block)
    }

    /// Frees block `p`, whose pointer is stored at `from`, in slot `slot` (the owner of its
    /// segment).
    pub(super) fn deallocate_small(&self, slot: u32, from: PPtr, p: PPtr) -> StorageResult<()> {
        let _l = lock(&self.slot_locks[slot as usize]);
        // A concurrent free of the same location got here first: `p` may already be free
        // or even reallocated to someone else; or its segment changed hands.
        if self.read_pptr(&Txn::new(), from.segment, from.offset)? != p
            || self.owner_of(p.segment) != Some(slot + 1)
        {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate from {from:?}: freed concurrently"
            )));
        }
        let (page, c, k, st) = self.locate(p)?;
        if st.num_free >= st.num_blocks {
            return Err(corrupt("a page with an allocated block counts every block free", page));
        }
        let mut txn = Txn::new();
        // Push: entry k = old head; head = block; one more free.
        self.set_entry(&mut txn, page, k, st.next_free)?;
        let state = PageState {
            next_free: (p.offset - page.offset) as u16,
            num_free: st.num_free + 1,
            ..st
        };
        self.write(&mut txn, page.segment, page.offset + P_STATE, state.pack())?;
        txn.set_caller(from, p, PPtr::NULL);
        let plm = self.slot_base(slot) + class_head(c);
        if st.num_free == 0 {
            // The page was full: it rejoins its class list.
            let head = self.page_link(&txn, 0, plm)?;
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
        let bits = self.read(&t, p.segment, bitmap_word(pg))?;
        if bits & (1 << (pg % 64)) == 0 {
            return Err(bad("its page is not in use"));
        }
        let (st, c) = self.page_state(&t, page)?;
        let Some(k) = Self::block_index(c, p.offset - page.offset) else {
            return Err(bad("not the start of a block"));
        };
        // A free block (double free) has a free-list link, not ALLOCATED, in its entry.
        if self.entry(&t, page, k)? != ALLOCATED {
            return Err(bad("the block is already free (a double free)"));
        }
        Ok((page, c, k, st))
    }
}
