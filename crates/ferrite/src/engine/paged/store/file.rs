//! The file page store: pages in an ordinary file ([`BlockFile`]: `pread`, `pwrite`,
//! `fdatasync`) behind a DRAM page cache with a size limit (`docs/design/paged.md` §6.2; spec
//! `fast-fash-nvwal.md` §0.1, SQLite's pager over its VFS).
//!
//! # Invariants
//! - S1 and S2 of [`super`]: page `n` is bytes `[n * page_size, (n + 1) * page_size)` of the
//!   file; a written page is durable after the next `sync` (block-file axiom B2).
//! - C1: the cache holds only **clean** pages: a cached page equals what the file returns
//!   for it now (durable or not). `write_page` writes the file first and then the cache (a
//!   failed write drops the page from the cache), so eviction never writes anything and a
//!   crash loses nothing the file would not lose.
//! - C2: the cache holds at most `limit` pages (0: no cache); a miss past the limit evicts
//!   one page by the CLOCK rule (a page read or written since the hand last passed it gets a
//!   second chance).
//! - C3: a page past the end of the file is `Corrupted` (the pager only reads pages its meta
//!   page counts, each written by an earlier commit); the file grows by the writes
//!   themselves, `ensure` only extends its length.
//!
//! # Ordering
//! None of its own: `write_page` and `sync` pass the caller's rule to the block file, whose
//! `#[track_caller]` sites the crash tester reports at the protocol's line.
//!
//! # Concurrency
//! `Send + Sync`. The cache is behind one mutex, held for a lookup or an insert (a page copy),
//! never across file I/O. Readers of committed pages and the one writer call it concurrently;
//! they never touch the same page at once (the pager's protocol lock, [`super`]).

use std::collections::HashMap;
use std::sync::Mutex;

use ferrite_pmem::BlockFile;

use super::{PageNo, PageSize};
use crate::error::{Error, Result};

/// Name of the page file in a file-store database's directory.
pub(crate) const PAGES_FILE: &str = "pages";
/// Name of the protocol's log file (journal or WAL) in the same directory.
pub(crate) const LOG_FILE: &str = "log";
/// Name of NVWAL's log in the same directory: a PM pool set (a directory of segments), the
/// paper's setting of a database file on block storage with its log in PM.
pub(crate) const PM_LOG_DIR: &str = "log.pm";

/// One cached page.
#[derive(Debug)]
struct Slot {
    pgno: PageNo,
    data: Box<[u8]>,
    referenced: bool,
}

/// Clean pages by number, at most `limit`, evicted by CLOCK (C1, C2).
#[derive(Debug)]
pub(crate) struct PageCache {
    limit: usize,
    map: HashMap<PageNo, usize>,
    slots: Vec<Slot>,
    hand: usize,
    hits: u64,
    misses: u64,
}

impl PageCache {
    /// An empty cache of at most `limit` pages.
    pub(crate) fn new(limit: usize) -> PageCache {
        PageCache { limit, map: HashMap::new(), slots: Vec::new(), hand: 0, hits: 0, misses: 0 }
    }

    /// Copies page `pgno` into `out` if it is cached.
    fn get(&mut self, pgno: PageNo, out: &mut [u8]) -> bool {
        match self.map.get(&pgno) {
            Some(&i) => {
                let s = &mut self.slots[i];
                out.copy_from_slice(&s.data);
                s.referenced = true;
                self.hits += 1;
                true
            }
            None => {
                self.misses += 1;
                false
            }
        }
    }

    /// Caches `data` as page `pgno`'s content, evicting one page if the cache is full.
    fn put(&mut self, pgno: PageNo, data: &[u8]) {
        if self.limit == 0 {
            return;
        }
        if let Some(&i) = self.map.get(&pgno) {
            let s = &mut self.slots[i];
            s.data.copy_from_slice(data);
            s.referenced = true;
            return;
        }
        if self.slots.len() < self.limit {
            self.map.insert(pgno, self.slots.len());
            self.slots.push(Slot { pgno, data: data.into(), referenced: true });
            return;
        }
        // CLOCK: at most two sweeps (the first clears every reference bit it passes).
        loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let s = &mut self.slots[i];
            if s.referenced {
                s.referenced = false;
                continue;
            }
            self.map.remove(&s.pgno);
            s.pgno = pgno;
            s.data.copy_from_slice(data);
            s.referenced = true;
            self.map.insert(pgno, i);
            return;
        }
    }

    /// Forgets page `pgno` (its file content is unknown after a failed write).
    fn forget(&mut self, pgno: PageNo) {
        if let Some(i) = self.map.remove(&pgno) {
            // The last slot moves into the hole; its map entry follows it.
            self.slots.swap_remove(i);
            if i < self.slots.len() {
                self.map.insert(self.slots[i].pgno, i);
            }
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
        }
    }

    /// Pages cached now.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Lookups that found their page, and those that did not.
    pub(crate) fn hits_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

/// Pages in a block file behind a [`PageCache`] (see the module docs).
#[derive(Debug)]
pub(crate) struct FileStore {
    file: BlockFile,
    page_size: usize,
    cache: Mutex<PageCache>,
}

impl FileStore {
    /// A store of `page_size` pages in `file`, caching up to `cache_pages` of them.
    pub(crate) fn new(file: BlockFile, page_size: PageSize, cache_pages: usize) -> FileStore {
        FileStore {
            file,
            page_size: page_size.bytes(),
            cache: Mutex::new(PageCache::new(cache_pages)),
        }
    }

    pub(crate) fn page_size(&self) -> usize {
        self.page_size
    }

    fn offset(&self, pgno: PageNo) -> u64 {
        u64::from(pgno) * self.page_size as u64
    }

    fn cache(&self) -> Result<std::sync::MutexGuard<'_, PageCache>> {
        self.cache.lock().map_err(|_| Error::Poisoned)
    }

    /// Whole pages in the file now.
    pub(crate) fn capacity(&self) -> Result<u64> {
        Ok(self.file.len()? / self.page_size as u64)
    }

    /// Extends the file to hold pages `0..pages` (C3; a length change, durable at the next
    /// sync like a write).
    #[track_caller]
    pub(crate) fn ensure(&self, pages: u64) -> Result<()> {
        let want = pages * self.page_size as u64;
        if self.file.len()? < want {
            self.file.set_len(want)?;
        }
        Ok(())
    }

    /// Copies page `pgno` into `out`: from the cache, else from the file (then cached).
    pub(crate) fn read_page(&self, pgno: PageNo, out: &mut [u8]) -> Result<()> {
        if self.cache()?.get(pgno, out) {
            return Ok(());
        }
        let n = self.file.read_at(self.offset(pgno), out)?;
        if n < out.len() {
            return Err(Error::Corrupted {
                what: format!(
                    "page {pgno} lies past the end of the page file ({n} of its bytes exist)"
                ),
                at: "paged file store".into(),
            });
        }
        self.cache()?.put(pgno, out);
        Ok(())
    }

    /// Writes page `pgno` to the file, then to the cache (C1).
    #[track_caller]
    pub(crate) fn write_page(&self, pgno: PageNo, data: &[u8], rule: &'static str) -> Result<()> {
        match self.file.write_at_rule(rule, self.offset(pgno), data) {
            Ok(()) => {
                self.cache()?.put(pgno, data);
                Ok(())
            }
            Err(e) => {
                self.cache()?.forget(pgno);
                Err(e.into())
            }
        }
    }

    /// Makes every earlier write of the file durable (`fdatasync`), for the caller's rule.
    #[track_caller]
    pub(crate) fn sync(&self, rule: &'static str) -> Result<()> {
        Ok(self.file.sync_rule(rule)?) // ORDER(P-PG-0): the caller's sync point; its rule says what it orders
    }

    /// The cache's size and hit counts (pages cached, hits, misses).
    pub(crate) fn cache_stats(&self) -> Result<(usize, u64, u64)> {
        let c = self.cache()?;
        let (h, m) = c.hits_misses();
        Ok((c.len(), h, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(b: u8) -> Vec<u8> {
        vec![b; 64]
    }

    #[test]
    fn the_cache_keeps_at_most_its_limit_and_gives_referenced_pages_a_second_chance() {
        let mut c = PageCache::new(3);
        let mut out = page(0);
        for p in 0..3u32 {
            c.put(p, &page(p as u8));
        }
        assert_eq!(c.len(), 3);
        // Every page is referenced: the hand clears all three, then evicts page 0.
        c.put(3, &page(3));
        assert_eq!(c.len(), 3);
        assert!(!c.get(0, &mut out));
        // Page 1 is read again (referenced); the next miss evicts page 2, not page 1.
        assert!(c.get(1, &mut out));
        assert_eq!(out, page(1));
        c.put(4, &page(4));
        assert!(c.get(1, &mut out), "a referenced page survives one sweep");
        assert!(!c.get(2, &mut out), "the unreferenced page was evicted");
        assert!(c.get(3, &mut out) && out == page(3));
        assert!(c.get(4, &mut out) && out == page(4));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_put_of_a_cached_page_replaces_it_and_forget_drops_it() {
        let mut c = PageCache::new(2);
        let mut out = page(0);
        c.put(7, &page(1));
        c.put(7, &page(2));
        assert_eq!(c.len(), 1);
        assert!(c.get(7, &mut out) && out == page(2));
        c.put(8, &page(3));
        c.forget(7);
        assert!(!c.get(7, &mut out));
        assert!(c.get(8, &mut out) && out == page(3), "the other page stays findable");
        c.forget(8);
        assert_eq!(c.len(), 0);
        c.put(9, &page(4));
        assert!(c.get(9, &mut out) && out == page(4));
    }

    #[test]
    fn a_zero_limit_caches_nothing() {
        let mut c = PageCache::new(0);
        let mut out = page(0);
        c.put(1, &page(1));
        assert!(!c.get(1, &mut out));
        assert_eq!(c.len(), 0);
    }
}
