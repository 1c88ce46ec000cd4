//! Page stores: numbered pages of one size on a medium, and `sync` (`docs/design/paged.md`
//! §6). The tree and the pager above know nothing of the medium; the protocols below the pager
//! decide when to write and sync.
//!
//! - [`PageStore::Pm`]: pages resident in PM ([`pmfile::PmFiles`], file [`pmfile::PAGES`]),
//!   read by copying them out (never a reference into the mapping, conventions §2) and written
//!   in place;
//! - [`PageStore::File`]: pages in an ordinary file behind a DRAM page cache with a size
//!   limit ([`file::FileStore`]; `pread`/`pwrite`/`fdatasync`).
//!
//! Both protocols (journal, WAL) run on both stores; a database's log file lives on the
//! medium of its pages ([`log::LogFile`]).
//!
//! # Invariants
//! - S1: page `n` occupies bytes `[n * page_size, (n + 1) * page_size)` of its file; the page
//!   size is fixed for the store's life.
//! - S2: a page written with `write_page` is durable once a later `sync` on the same thread
//!   returns; before that, after a crash it may hold its old or its new content (and, on PM,
//!   any mix of the two at 8-byte granularity, or in whole lines under M2).
//!
//! # Ordering
//! The stores only carry out writes and syncs; the rule each one serves is named by its
//! caller (`rule`), and the methods are `#[track_caller]`, so every persist is attributed to
//! the protocol's call site.
//!
//! # Concurrency
//! `Send + Sync`; reads of different pages and of committed pages proceed concurrently with
//! the one writer's writes to other pages. Callers never read a page while it is written.

pub(crate) mod file;
pub(crate) mod log;
pub(crate) mod pmfile;

use std::sync::Arc;

pub(crate) use super::pages::{PageNo, PageSize};
use crate::error::{Error, Result};
use file::FileStore;
use pmfile::{PAGES, PmFiles};

/// Tests: PM files on a pool set of 256 KiB segments at `path` (created or opened), and a
/// PM page store of `page_size`-byte pages on them.
#[cfg(test)]
pub(crate) fn test_store(
    path: &std::path::Path,
    create: bool,
    page_size: usize,
) -> (Arc<PmFiles>, PageStore) {
    use ferrite_pmem::PoolSet;
    let opts = ferrite_pmem::Options::new().segment_size(256 << 10);
    let files = if create {
        PmFiles::create(PoolSet::create(path, &opts).expect("create the pool set")).expect("format")
    } else {
        PmFiles::open(PoolSet::open(path, &opts).expect("open the pool set")).expect("open")
    };
    let files = Arc::new(files);
    let size = PageSize::new(page_size).expect("a page size");
    (files.clone(), PageStore::Pm(PmStore::new(files, size)))
}

/// Pages resident in PM: file [`PAGES`] of a [`PmFiles`].
#[derive(Debug)]
pub(crate) struct PmStore {
    files: Arc<PmFiles>,
    page_size: usize,
}

impl PmStore {
    /// A store of `page_size` pages on `files`.
    pub(crate) fn new(files: Arc<PmFiles>, page_size: PageSize) -> PmStore {
        PmStore { files, page_size: page_size.bytes() }
    }

    /// Byte offset of page `pgno` in file [`PAGES`].
    pub(crate) fn offset(&self, pgno: PageNo) -> u64 {
        u64::from(pgno) * self.page_size as u64
    }

    /// The PM files underneath (byte-granular access for the in-place protocols).
    pub(crate) fn files(&self) -> &Arc<PmFiles> {
        &self.files
    }
}

/// A page store (see the module docs).
#[derive(Debug)]
pub(crate) enum PageStore {
    /// Pages resident in PM.
    Pm(PmStore),
    /// Pages in a file behind a DRAM page cache.
    File(FileStore),
}

impl PageStore {
    /// The page size in bytes.
    pub(crate) fn page_size(&self) -> usize {
        match self {
            PageStore::Pm(s) => s.page_size,
            PageStore::File(s) => s.page_size(),
        }
    }

    /// Pages the store holds without growing.
    pub(crate) fn capacity(&self) -> Result<u64> {
        match self {
            PageStore::Pm(s) => Ok(s.files.capacity(PAGES)? / s.page_size as u64),
            PageStore::File(s) => s.capacity(),
        }
    }

    /// Grows the store until it holds pages `0..pages`. Errors: `PoolFull` (PM), `Io`.
    #[track_caller]
    pub(crate) fn ensure(&self, pages: u64) -> Result<()> {
        match self {
            PageStore::Pm(s) => s.files.ensure(PAGES, pages * s.page_size as u64),
            PageStore::File(s) => s.ensure(pages),
        }
    }

    /// Copies page `pgno` into `out` (`out.len()` is the page size). Errors: `Corrupted` for a
    /// page past the store's capacity; `InvalidArgument` for a buffer of another size.
    pub(crate) fn read_page(&self, pgno: PageNo, out: &mut [u8]) -> Result<()> {
        self.check_len(out.len())?;
        match self {
            PageStore::Pm(s) => s.files.read_at(PAGES, s.offset(pgno), out),
            PageStore::File(s) => s.read_page(pgno, out),
        }
    }

    /// Writes page `pgno` (S2: durable after the next `sync` of this thread), for the caller's
    /// ordering rule `rule`. Errors: `Corrupted` past the capacity (call `ensure` first).
    #[track_caller]
    pub(crate) fn write_page(&self, pgno: PageNo, data: &[u8], rule: &'static str) -> Result<()> {
        self.check_len(data.len())?;
        match self {
            PageStore::Pm(s) => s.files.write_at(PAGES, s.offset(pgno), data, rule),
            PageStore::File(s) => s.write_page(pgno, data, rule),
        }
    }

    /// Makes every earlier `write_page` of this thread durable (the caller's rule `rule`).
    #[track_caller]
    pub(crate) fn sync(&self, rule: &'static str) -> Result<()> {
        match self {
            PageStore::Pm(s) => {
                s.files.sync(rule); // ORDER(P-PG-0): the caller's sync point; its rule says what it orders
                Ok(())
            }
            PageStore::File(s) => s.sync(rule), // ORDER(P-PG-0): the caller's sync point; its rule says what it orders
        }
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len == self.page_size() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "a page buffer of {len} bytes for {}-byte pages",
                self.page_size()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::PoolSet;
    use ferrite_pmem::internals::testing::TestDir;

    #[test]
    fn pm_pages_round_trip_and_grow() {
        let dir = TestDir::new("paged-store-pm");
        let opts = ferrite_pmem::Options::new().segment_size(256 << 10);
        let files =
            Arc::new(PmFiles::create(PoolSet::create(dir.join("db"), &opts).unwrap()).unwrap());
        let store = PageStore::Pm(PmStore::new(files, PageSize::DEFAULT));
        let cap = store.capacity().unwrap();
        assert!(cap >= 50, "{cap}");
        store.ensure(cap + 100).unwrap();
        assert!(store.capacity().unwrap() >= cap + 100);
        for pgno in [0u32, 1, cap as u32 - 1, cap as u32, cap as u32 + 99] {
            let page = vec![pgno as u8 ^ 0x5a; 4096];
            store.write_page(pgno, &page, "P-PG-0").unwrap();
        }
        store.sync("P-PG-0").unwrap(); // ORDER(P-PG-0): test pages durable before they are read back
        let mut out = vec![0u8; 4096];
        for pgno in [0u32, 1, cap as u32 - 1, cap as u32, cap as u32 + 99] {
            store.read_page(pgno, &mut out).unwrap();
            assert!(out.iter().all(|&b| b == pgno as u8 ^ 0x5a), "page {pgno}");
        }
        let mut small = vec![0u8; 100];
        assert!(matches!(store.read_page(0, &mut small), Err(Error::InvalidArgument(_))));
        let far = store.capacity().unwrap() as u32;
        assert!(matches!(store.read_page(far, &mut out), Err(Error::Corrupted { .. })));
    }
}
