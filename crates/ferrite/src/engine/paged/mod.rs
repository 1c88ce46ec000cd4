//! The paged engine: every table and every secondary index is a B+-tree of
//! slotted pages, in the way of SQLite, so that the commit protocols of the FAST/FASH and
//! NVWAL papers (spec `fast-fash-nvwal.md`) and the classic rollback journal and WAL can run
//! under the same tree.
//!
//! Layering, top to bottom:
//! - [`btree`]: the B+-tree, identified by a root page number that never changes. It knows
//!   keys (memcomparable byte strings, [`crate::encoding`]) and values, and reaches storage
//!   only through the page traits.
//! - [`page`] and [`overflow`]: the slotted page format (SQLite's b-tree page header, spec
//!   §0.1; FAST's slotted page, §2.2) and the overflow chains of large values.
//! - [`pages`]: the page interface ([`pages::PageRead`], [`pages::PageWrite`]): a
//!   transaction's view that copies a page on first write into a private dirty set, and
//!   allocates and frees page numbers. [`pages::MemPages`] implements it in DRAM for tests.
//! - [`protocol`]: the commit protocols that make a transaction's dirty pages durable
//!   atomically: the rollback journal and the WAL ([G1]); NVWAL, FASH and FAST *(planned,
//!   [G2])*. The meta page (page 0) belongs to the pager above them ([`pager`]): page count,
//!   free-page list, catalog root, protocol.
//! - [`store`]: page stores (PM-resident pages in a pool set; pages in a file behind a DRAM
//!   page cache) and the log files the protocols keep beside them.
//!
//! # Invariants
//! - P1: the tree's code never depends on how pages become durable: it calls only the page
//!   traits (spec §5, "build the slotted page so that header = commit mark holds").
//! - P2: a tree's root page number is fixed at creation (a root split moves the root's
//!   content into two new children and keeps the root page), so a catalog stores it once.
//! - P3: page 0 is never part of a tree.
//! - P4: every page, record and overflow chain read from storage is validated before use; bad
//!   bytes give `Error::Corrupted`, never a panic. Bad input (an oversized key or value)
//!   gives `Error::InvalidArgument` before anything changes.
//! - P5: an operation that returns an error may leave the transaction's pages partly
//!   changed; the caller rolls the transaction back (as SQLite's statement rollback does).
//!
//! # Ordering (durability)
//! The tree writes only private page copies; the commit protocols carry the `P-PG-n` rules
//! of `docs/design/persistence.md` ([`protocol`]).
//!
//! # Concurrency
//! One writer per page view (`&mut`); readers share immutable page handles, so a snapshot's
//! pages stay unchanged while a writer copies them (spec §2.1: a single writer, as SQLite).

// Items without a caller yet: page operations [G2]'s in-place protocols need (hole
// rebuilding, `set_right`, the leaf-record limit for FAST's cap), `drop_tree` (no table drop
// in the API yet), the page cache's statistics (for reports), and `MemPages`, the tests' page
// store. Remove this once [G2] lands and the rest is wired or deleted.
#![allow(dead_code)]

pub(crate) mod btree;
pub(crate) mod bytes;
pub(crate) mod engine;
pub(crate) mod layout;
pub(crate) mod overflow;
pub(crate) mod page;
pub(crate) mod pager;
pub(crate) mod pages;
pub(crate) mod protocol;
pub(crate) mod rows;
pub(crate) mod store;

#[cfg(test)]
mod tests;
