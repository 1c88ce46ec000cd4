//! Commit protocols (`docs/design/paged.md` §8): how a transaction's changed pages become
//! durable, and how `open` repairs an interrupted commit. Each protocol is a sibling module;
//! the pager talks to them through [`Protocol`], which dispatches statically so that the
//! crash tester attributes every persist to the protocol's own call site.
//!
//! - [`journal`]: SQLite's rollback journal (originals to the journal, sync, pages in place,
//!   sync, invalidate the journal).
//! - [`wal`]: SQLite's WAL (frames with a checksum chain and a commit frame, one log sync per
//!   commit, a DRAM index from page to newest frame, checkpoints).
//! - [`fash`]: FASH and FAST (pages in PM written in place, the slot headers' changes through
//!   a redo log with an 8-byte commit mark, or FAST's commit of one 8-byte header word).
//! - [`nvwal`]: NVWAL (spec §4): diff frames in a PM heap of blocks, lazy synchronization
//!   (two fences per commit), a DRAM index from page to its committed image, checkpoints.
//!   PM store only.
//!
//! Stores: the journal and the WAL run on both page stores, their log on the medium of the
//! pages (a PM file of the pool set, or a block file beside the page file); a "sync" is a
//! fence on PM and an `fdatasync` on a file (`docs/design/paged.md` §2).
//!
//! # Invariants
//! - P1: [`Protocol::read_page`] returns the page as the last durable commit left it (the
//!   pager keeps older images for older snapshots itself).
//! - P2: [`Protocol::commit`] returns once the batch is durable; a crash at any point of it
//!   leaves, after [`Protocol::recover`], either every page of the batch or none.
//!
//! # Ordering
//! Each protocol's module lists its rules (`P-PG-n`).
//!
//! # Concurrency
//! One writer at a time calls `commit`, `recover` and `checkpoint`; `read_page` may run on
//! other threads concurrently with a commit only for pages the commit does not change.

pub(crate) mod fash;
pub(crate) mod journal;
pub(crate) mod nvwal;
pub(crate) mod wal;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::store::{PageNo, PageStore};
use crate::error::{Error, Result};

/// Tests: a protocol over a PM store of `page_size`-byte pages at `path` (created or opened,
/// [`super::store::test_store`]): the WAL checkpointing every `wal` frames (`Some(0)`: only
/// at close), or the rollback journal (`None`). Not recovered yet.
#[cfg(test)]
pub(crate) fn test_protocol(
    path: &std::path::Path,
    create: bool,
    page_size: usize,
    wal: Option<u64>,
) -> Protocol {
    use super::store::log::LogFile;
    let (files, store) = super::store::test_store(path, create, page_size);
    match wal {
        Some(every) => Protocol::Wal(wal::Wal::new(store, LogFile::Pm(files), every)),
        None => Protocol::Journal(journal::Journal::new(store, LogFile::Pm(files))),
    }
}

/// One commit as the pager hands it down.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch<'a> {
    /// The pages the transaction changed, ascending by page number, each a whole page image
    /// (the meta page, page 0, among them when it changed).
    pub pages: &'a [(PageNo, &'a [u8])],
    /// Pages in the database before the commit (pages at or past it are new).
    pub pages_before: u64,
    /// Pages below `pages_before` that the committed state does not reference: free pages
    /// that hold no part of the committed free list. Their bytes are scratch, so the in-place
    /// protocols (FASH/FAST) write them directly (as they do pages at or past
    /// `pages_before`).
    pub spare: &'a BTreeSet<PageNo>,
    /// For some of the batch's pages, the image the committed state holds in the store (the
    /// pager keeps them for the in-place protocols, which compare against them; a page not
    /// here is read from the store).
    pub committed: &'a BTreeMap<PageNo, Arc<[u8]>>,
}

/// The outcome of a commit that reached its commit point: `None`, or the error of a later
/// step (see [`Protocol::commit`]). The batch is durable either way.
pub(crate) type AfterCommit = Option<Error>;

#[cfg(test)]
thread_local! {
    /// Test hook: checkpoints run on this thread fail at their start with `PoolFull`, as a
    /// full pool refuses the store's growth ([R2]: a failure after the commit point).
    pub(crate) static FAIL_CHECKPOINTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The start of every checkpoint (WAL, NVWAL, FASH): `Err` only when a test injects a
/// failure ([`FAIL_CHECKPOINTS`]); nothing in other builds.
#[inline]
pub(crate) fn injected_checkpoint_failure() -> Result<()> {
    #[cfg(test)]
    if FAIL_CHECKPOINTS.with(|f| f.get()) {
        return Err(Error::PoolFull {
            at: "a checkpoint (failure injected by a test)".into(),
            requested: 0,
            available: 0,
        });
    }
    Ok(())
}

/// A commit protocol over a page store (see the module docs).
#[derive(Debug)]
pub(crate) enum Protocol {
    /// The rollback journal.
    Journal(journal::Journal),
    /// The write-ahead log.
    Wal(wal::Wal),
    /// FASH or FAST: pages in PM, written in place, slot headers logged.
    Fash(fash::Fash),
    /// NVWAL.
    Nvwal(nvwal::Nvwal),
}

impl Protocol {
    /// The code the meta page records for this protocol (1 journal, 2 WAL, 5 NVWAL; 3 and 4
    /// are FASH's and FAST's).
    pub(crate) fn code(&self) -> u32 {
        match self {
            Protocol::Journal(_) => 1,
            Protocol::Wal(_) => 2,
            Protocol::Fash(f) => {
                if f.is_fast() {
                    4
                } else {
                    3
                }
            }
            Protocol::Nvwal(_) => 5,
        }
    }

    /// Whether commits write into the committed pages in place (FASH, FAST): the tree then
    /// defragments a page by copying it to a new page ([`super::pages::PageWrite::defrag_by_copy`]).
    pub(crate) fn writes_in_place(&self) -> bool {
        matches!(self, Protocol::Fash(_))
    }

    /// The page store underneath.
    pub(crate) fn store(&self) -> &PageStore {
        match self {
            Protocol::Journal(j) => j.store(),
            Protocol::Wal(w) => w.store(),
            Protocol::Fash(f) => f.store(),
            Protocol::Nvwal(n) => n.store(),
        }
    }

    /// Copies the latest committed image of page `pgno` into `out` (P1).
    pub(crate) fn read_page(&self, pgno: PageNo, out: &mut [u8]) -> Result<()> {
        match self {
            Protocol::Journal(j) => j.store().read_page(pgno, out),
            Protocol::Wal(w) => w.read_page(pgno, out),
            Protocol::Fash(f) => f.store().read_page(pgno, out),
            Protocol::Nvwal(n) => n.read_page(pgno, out),
        }
    }

    /// Makes `batch` durable (P2). `Err`: the batch did not reach its commit point (the
    /// caller poisons the handle; recovery rolls it back or never sees it). `Ok(after)`: the
    /// batch is committed and durable; `after` is the error of a step past the commit point
    /// (WAL's and NVWAL's automatic checkpoint, FASH's checkpoint and truncation), which the
    /// caller must not report as a failed commit ([R2]: a retrying application would apply
    /// it twice): it poisons the handle and reports success, and the next open finishes the
    /// step from the log.
    pub(crate) fn commit(&mut self, batch: &Batch<'_>) -> Result<AfterCommit> {
        match self {
            Protocol::Journal(j) => j.commit(batch),
            Protocol::Wal(w) => w.commit(batch),
            Protocol::Fash(f) => f.commit(batch),
            Protocol::Nvwal(n) => n.commit(batch),
        }
    }

    /// Repairs what an interrupted commit left (at open, before any read). Returns whether
    /// there was anything to repair.
    pub(crate) fn recover(&mut self) -> Result<bool> {
        match self {
            Protocol::Journal(j) => j.recover(),
            Protocol::Wal(w) => w.recover(),
            Protocol::Fash(f) => f.recover(),
            Protocol::Nvwal(n) => n.recover(),
        }
    }

    /// Moves what the protocol keeps outside the store into it (WAL, NVWAL: a checkpoint;
    /// the journal keeps nothing). Called at close.
    pub(crate) fn checkpoint(&mut self) -> Result<()> {
        match self {
            Protocol::Journal(_) | Protocol::Fash(_) => Ok(()),
            Protocol::Wal(w) => w.checkpoint().map(|_| ()),
            Protocol::Nvwal(n) => n.checkpoint().map(|_| ()),
        }
    }
}
