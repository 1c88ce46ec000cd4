//! The page interface the B+-tree is written against, and [`MemPages`], an in-memory
//! implementation for tests.
//!
//! The tree sees pages only through two traits:
//! - [`PageRead`]: a read-only view (a transaction's or a snapshot's) that hands out a page's
//!   bytes as a cheap, shareable, immutable handle ([`PageRead::Page`]). A DRAM page cache
//!   implements it by handing out its cached buffers (`Arc<[u8]>`) without a copy; a
//!   PM-resident store copies the page once per fetch (conventions §2: no `&[u8]` over a
//!   mapping).
//! - [`PageWrite`]: a transaction's writable view. [`PageWrite::page_mut`] copies a page into
//!   the transaction's private dirty set on first write and returns that copy; every later
//!   read of the page through the same view sees the copy. [`PageWrite::allocate`] and
//!   [`PageWrite::free`] manage page numbers; freed pages are reused before the store grows.
//!
//! How dirty pages become durable (rollback journal, WAL, NVWAL, FASH/FAST slot-header
//! logging) is the business of the layer that implements these traits; the tree never asks.
//!
//! # Invariants
//! - PG-1: page numbers are `u32`; page 0 is the database's meta page, owned by the layer
//!   below. The tree never reads, writes, allocates or frees it; a child or overflow pointer
//!   to page 0 is corruption.
//! - PG-2: every page of a store has the same size, a power of two in 512..=65536
//!   ([`PageSize`]).
//! - PG-3: a handle returned by [`PageRead::page`] never changes, even if the page is written
//!   afterwards through the same view: writing gives the writer a fresh private copy.
//! - PG-4: a freshly allocated page is all zeros and already in the dirty set.
//!
//! # Ordering (durability)
//! None here. [`MemPages`] keeps everything in DRAM; `commit` only moves the dirty set into
//! the committed map.
//!
//! # Concurrency
//! A [`PageWrite`] view belongs to one transaction (`&mut self`). Page handles are immutable
//! and `Send + Sync`, so readers of a snapshot can share them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A page number. Page 0 is the meta page of the layer below (PG-1).
pub(crate) type PageNo = u32;

/// The meta page, never touched by the tree.
pub(crate) const META_PAGE: PageNo = 0;

/// A page size: a power of two in `512..=65536` (PG-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PageSize(u32);

impl PageSize {
    /// The smallest page size.
    pub(crate) const MIN: usize = 512;
    /// The largest page size (offsets inside a page still fit 16 bits with 0 meaning 65536).
    pub(crate) const MAX: usize = 65536;
    /// The default page size.
    pub(crate) const DEFAULT: PageSize = PageSize(4096);

    /// A page size of `bytes`, or `InvalidArgument` if it is not a power of two in
    /// `512..=65536`.
    pub(crate) fn new(bytes: usize) -> Result<PageSize> {
        if bytes.is_power_of_two() && (Self::MIN..=Self::MAX).contains(&bytes) {
            Ok(PageSize(bytes as u32))
        } else {
            Err(Error::InvalidArgument(format!(
                "page size {bytes}: must be a power of two in {}..={}",
                Self::MIN,
                Self::MAX
            )))
        }
    }

    /// The size in bytes.
    pub(crate) fn bytes(self) -> usize {
        self.0 as usize
    }
}

impl Default for PageSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A read-only view of pages: a transaction's (seeing its own writes) or a snapshot's.
pub(crate) trait PageRead {
    /// An immutable page buffer, cheap to clone (a reference count, not a copy). It stays
    /// valid and unchanged for as long as it is held (PG-3).
    type Page: Deref<Target = [u8]> + Clone;

    /// The size of every page.
    fn page_size(&self) -> PageSize;

    /// The bytes of page `no`. `Corrupted` if the page does not exist or is free (a pointer
    /// to it can only come from damaged data).
    fn page(&self, no: PageNo) -> Result<Self::Page>;
}

/// A transaction's writable view of pages.
pub(crate) trait PageWrite: PageRead {
    /// Page `no` for writing: copied into the transaction's dirty set on first write, the
    /// same private copy afterwards. `Corrupted` as for [`PageRead::page`].
    fn page_mut(&mut self, no: PageNo) -> Result<&mut [u8]>;

    /// A new page, zeroed and dirty (PG-4): a freed page if there is one, else a new page at
    /// the end of the store.
    fn allocate(&mut self) -> Result<PageNo>;

    /// Returns page `no` to the free list. The caller holds no reference to it afterwards.
    ///
    /// When a freed page may be handed out again is the implementation's decision: a store
    /// whose writes reach the committed page in place (FAST/FASH on PM) must not reuse a page
    /// freed by the open transaction before that transaction commits, and no store may reuse
    /// one while an older snapshot can still read it. [`MemPages`] keeps committed images
    /// apart from the dirty set, so it reuses freed pages at once.
    fn free(&mut self, no: PageNo) -> Result<()>;

    /// Whether a page that would need compacting is copied to a new page instead (spec
    /// §2.3.8, copy-on-write defragmentation): true where writes reach the committed pages in
    /// place (FASH/FAST), so that no record the committed page references moves.
    fn defrag_by_copy(&self) -> bool {
        false
    }
}

/// The writable bytes of a dirty page's buffer: the buffer itself when nobody else holds it,
/// else a private copy put in its place first (a reader, a cursor or a snapshot may still hold
/// the old buffer; PG-3). `Corrupted` only if the copy were shared, which cannot happen.
pub(crate) fn writable(slot: &mut Arc<[u8]>, no: PageNo) -> Result<&mut [u8]> {
    if Arc::get_mut(slot).is_none() {
        *slot = Arc::from(&slot[..]);
    }
    Arc::get_mut(slot).ok_or_else(|| missing(no, "a shared"))
}

/// The next page number for a view whose free set is `free` and whose store holds `count`
/// pages: the lowest free page, else `count` (and `count` grows). `PoolFull` past 2^32 pages.
pub(crate) fn next_page(free: &mut BTreeSet<PageNo>, count: &mut u64) -> Result<PageNo> {
    if let Some(no) = free.pop_first() {
        return Ok(no);
    }
    let no = u32::try_from(*count).map_err(|_| Error::PoolFull {
        at: "page store (2^32 pages)".into(),
        requested: 1,
        available: 0,
    })?;
    *count += 1;
    Ok(no)
}

fn missing(no: PageNo, why: &str) -> Error {
    Error::Corrupted { what: format!("reference to {why} page"), at: format!("page {no}") }
}

/// An in-memory page store with one transaction at a time: the committed pages, the open
/// transaction's dirty copies, and a free list (lowest page number reused first, so runs are
/// deterministic). Page 0 (the meta page) exists from the start and is never handed out.
#[derive(Debug)]
pub(crate) struct MemPages {
    size: PageSize,
    /// Committed images; `None` for a page that is free in the committed state.
    committed: Vec<Option<Arc<[u8]>>>,
    /// The transaction's pages: written copies and new pages.
    dirty: BTreeMap<PageNo, Arc<[u8]>>,
    /// Free page numbers of the transaction's view.
    free: BTreeSet<PageNo>,
    /// Number of pages of the transaction's view (high-water mark, page 0 included).
    count: u32,
    /// The committed free list and count, for [`MemPages::rollback`].
    committed_free: BTreeSet<PageNo>,
    committed_count: u32,
    /// What [`PageWrite::defrag_by_copy`] answers (tests of the copy-on-write path).
    pub(crate) cow: bool,
}

impl MemPages {
    /// An empty store of pages of `size`, holding only the meta page.
    pub(crate) fn new(size: PageSize) -> MemPages {
        let zero: Arc<[u8]> = vec![0u8; size.bytes()].into();
        MemPages {
            size,
            committed: vec![Some(zero)],
            dirty: BTreeMap::new(),
            free: BTreeSet::new(),
            count: 1,
            committed_free: BTreeSet::new(),
            committed_count: 1,
            cow: false,
        }
    }

    /// Pages in the store, free ones and the meta page included.
    pub(crate) fn page_count(&self) -> u32 {
        self.count
    }

    /// Pages on the free list.
    pub(crate) fn free_count(&self) -> u32 {
        self.free.len() as u32
    }

    /// Pages dirtied by the open transaction.
    pub(crate) fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    /// Makes the transaction's pages the committed state.
    pub(crate) fn commit(&mut self) {
        self.committed.resize(self.count as usize, None);
        for (no, page) in std::mem::take(&mut self.dirty) {
            self.committed[no as usize] = Some(page);
        }
        for &no in &self.free {
            self.committed[no as usize] = None;
        }
        self.committed_free = self.free.clone();
        self.committed_count = self.count;
    }

    /// Drops the transaction's pages, returning to the committed state.
    pub(crate) fn rollback(&mut self) {
        self.dirty.clear();
        self.free = self.committed_free.clone();
        self.count = self.committed_count;
    }

    /// Overwrites page `no`'s bytes in the transaction's view (tests: corrupting a page).
    #[cfg(test)]
    pub(crate) fn poke(&mut self, no: PageNo, bytes: &[u8]) {
        let page = self.page_mut(no).expect("page exists");
        let n = bytes.len().min(page.len());
        page[..n].copy_from_slice(&bytes[..n]);
    }

    fn live(&self, no: PageNo) -> Result<Option<&Arc<[u8]>>> {
        if no == META_PAGE {
            return Err(missing(no, "the meta"));
        }
        if no >= self.count {
            return Err(missing(no, "a nonexistent"));
        }
        if self.free.contains(&no) {
            return Err(missing(no, "a free"));
        }
        if let Some(p) = self.dirty.get(&no) {
            return Ok(Some(p));
        }
        match self.committed.get(no as usize) {
            Some(Some(p)) => Ok(Some(p)),
            _ => Ok(None),
        }
    }
}

impl PageRead for MemPages {
    type Page = Arc<[u8]>;

    fn page_size(&self) -> PageSize {
        self.size
    }

    fn page(&self, no: PageNo) -> Result<Arc<[u8]>> {
        self.live(no)?.cloned().ok_or_else(|| missing(no, "an unwritten"))
    }
}

impl PageWrite for MemPages {
    fn page_mut(&mut self, no: PageNo) -> Result<&mut [u8]> {
        let current = self.live(no)?.cloned().ok_or_else(|| missing(no, "an unwritten"))?;
        writable(self.dirty.entry(no).or_insert(current), no)
    }

    fn allocate(&mut self) -> Result<PageNo> {
        let mut count = u64::from(self.count);
        let no = next_page(&mut self.free, &mut count)?;
        self.count = u32::try_from(count).map_err(|_| Error::PoolFull {
            at: "page store (2^32 pages)".into(),
            requested: 1,
            available: 0,
        })?;
        self.dirty.insert(no, vec![0u8; self.size.bytes()].into());
        Ok(no)
    }

    fn free(&mut self, no: PageNo) -> Result<()> {
        self.live(no)?;
        self.dirty.remove(&no);
        self.free.insert(no);
        Ok(())
    }

    fn defrag_by_copy(&self) -> bool {
        self.cow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes() {
        assert_eq!(PageSize::default().bytes(), 4096);
        for ok in [512, 1024, 4096, 65536] {
            assert_eq!(PageSize::new(ok).unwrap().bytes(), ok);
        }
        for bad in [0, 256, 513, 3000, 131072] {
            assert!(matches!(PageSize::new(bad), Err(Error::InvalidArgument(_))), "{bad}");
        }
    }

    #[test]
    fn copy_on_write_keeps_handles_unchanged() {
        let mut p = MemPages::new(PageSize::new(512).unwrap());
        let a = p.allocate().unwrap();
        assert_eq!(a, 1);
        p.page_mut(a).unwrap()[0] = 7;
        p.commit();
        let before = p.page(a).unwrap();
        p.page_mut(a).unwrap()[0] = 9;
        assert_eq!(before[0], 7, "a held handle never changes");
        assert_eq!(p.page(a).unwrap()[0], 9, "the view sees its own write");
        p.rollback();
        assert_eq!(p.page(a).unwrap()[0], 7);
    }

    #[test]
    fn freed_pages_are_reused_first() {
        let mut p = MemPages::new(PageSize::new(512).unwrap());
        let pages: Vec<_> = (0..4).map(|_| p.allocate().unwrap()).collect();
        assert_eq!(pages, [1, 2, 3, 4]);
        p.free(3).unwrap();
        p.free(2).unwrap();
        assert_eq!(p.free_count(), 2);
        assert_eq!(p.allocate().unwrap(), 2);
        assert_eq!(p.allocate().unwrap(), 3);
        assert_eq!(p.allocate().unwrap(), 5);
        assert_eq!(p.page_count(), 6);
        assert!(p.page(3).unwrap().iter().all(|&b| b == 0), "reused pages are zeroed");
    }

    #[test]
    fn bad_page_numbers_are_corruption() {
        let mut p = MemPages::new(PageSize::new(512).unwrap());
        let a = p.allocate().unwrap();
        p.free(a).unwrap();
        for no in [META_PAGE, a, 99] {
            assert!(matches!(p.page(no), Err(Error::Corrupted { .. })), "{no}");
            assert!(matches!(p.page_mut(no), Err(Error::Corrupted { .. })), "{no}");
            assert!(matches!(p.free(no), Err(Error::Corrupted { .. })), "{no}");
        }
    }

    #[test]
    fn rollback_restores_the_free_list() {
        let mut p = MemPages::new(PageSize::new(512).unwrap());
        let a = p.allocate().unwrap();
        p.commit();
        p.free(a).unwrap();
        let b = p.allocate().unwrap();
        assert_eq!(a, b);
        p.rollback();
        assert_eq!(p.page_count(), 2);
        assert_eq!(p.free_count(), 0);
        p.page(a).unwrap();
    }
}
