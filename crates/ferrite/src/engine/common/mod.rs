//! Machinery every serializable engine needs, lifted out of the reference engine so that
//! SOFORT and the paged engine reuse it instead of copying it.
//!
//! An engine describes its committed data to this module through one trait, [`Committed`]
//! (rows visible at a snapshot, ranges of an access path, and when a key last changed); the
//! modules here do the rest, knowing nothing about how the engine stores rows:
//!
//! - [`writes`]: the write buffer ([`writes::WriteSet`]), a transaction's own inserts, updates
//!   and deletes, keyed by table and encoded primary key;
//! - [`overlay`]: reads and scans through the write buffer: a transaction's own writes merged
//!   into what [`Committed`] returns, in scan order, limits applied after merging;
//! - [`reads`]: the read set ([`reads::ReadSet`]): keys read and key ranges scanned (narrowed
//!   to what a limited scan examined), per access path;
//! - [`validate`]: backward validation at commit against "has this key / range changed since
//!   snapshot `s`";
//! - [`unique`]: primary-key and unique-index checks, in the transaction's view at each write
//!   and against the latest committed data at commit;
//! - [`index`]: secondary-index maintenance: a row's index entries, and the entries to insert
//!   and remove when a row changes;
//! - [`txn`]: [`txn::TxnState`], all of the above bundled as one transaction's state, which an
//!   engine's `EngineTxn` delegates to while holding whatever lock makes its [`Committed`]
//!   view stable.
//!
//! # Invariants (the contract of [`Committed`])
//! - C1: timestamps are commit sequence numbers: every commit gets a larger one than every
//!   earlier commit; 0 means "before the first commit". A snapshot `s` sees exactly the commits
//!   with timestamp `<= s`.
//! - C2: [`Committed::range`] yields, in the requested direction, one [`Visible`] per row
//!   visible at the snapshot whose key on the access path lies in the range; for an index the
//!   key is the row's current index entry at that snapshot (entries of other versions are
//!   skipped).
//! - C3: [`Committed::entries`] yields every entry the engine still holds in the range,
//!   including entries of versions no snapshot sees any more, and [`Committed::latest_change`]
//!   is the timestamp of the newest commit that wrote the key (`None`: the engine holds no
//!   version of it). Validation is sound if every commit after `s` that changed what a range
//!   returns at any snapshot `>= s` leaves an entry in the range whose key has
//!   `latest_change > s`, for as long as a transaction with snapshot `s` is open.
//! - C4: the view is stable while the lifted code runs: the engine holds whatever lock keeps
//!   commits out (for validation and the commit-time checks: until it has applied the commit).
//!
//! # Ordering (durability)
//! None here: these modules only read the engine's view and DRAM buffers. The engine's commit
//! protocol makes the validated write set durable.
//!
//! # Concurrency
//! A [`txn::TxnState`] belongs to one transaction and is used by one thread at a time; a
//! [`Committed`] view is shared (`&self`) and read-only.

use std::borrow::Cow;

use crate::encoding::ByteRange;
use crate::error::Result;
use crate::query::{AccessPath, Direction};
use crate::schema::Table;
use crate::value::Row;

pub(crate) mod index;
pub(crate) mod overlay;
pub(crate) mod reads;
pub(crate) mod schema_codec;
pub(crate) mod txn;
pub(crate) mod unique;
pub(crate) mod validate;
pub(crate) mod writes;

#[cfg(test)]
pub(crate) mod testing;

/// One row visible at a snapshot, as an access path returns it.
#[derive(Clone, Debug)]
pub(crate) struct Visible<'a> {
    /// The key on the access path: the encoded primary key, or the index entry.
    pub key: Cow<'a, [u8]>,
    /// The encoded primary key.
    pub pk: Cow<'a, [u8]>,
    /// The row.
    pub row: Cow<'a, Row>,
}

/// Rows of a range, in scan order.
pub(crate) type VisibleIter<'a> = Box<dyn Iterator<Item = Result<Visible<'a>>> + 'a>;

/// For each entry of a range, in ascending order, the encoded primary key of its row.
pub(crate) type EntryIter<'a> = Box<dyn Iterator<Item = Result<Cow<'a, [u8]>>> + 'a>;

/// An engine's committed data, as the lifted machinery reads it (see the module invariants
/// C1-C4). Rows and keys may be borrowed from the engine's storage (`Cow::Borrowed`) or built
/// for the caller (`Cow::Owned`, e.g. materialized from PM columns).
///
/// Implementations return errors (a corrupt pool, a missing table) and never panic; they accept
/// an empty range and return nothing for it.
pub(crate) trait Committed {
    /// Timestamp of the newest commit (C1).
    fn last_commit(&self) -> u64;

    /// The row with primary key `pk` visible at `snapshot`.
    fn get(&self, table: &Table, pk: &[u8], snapshot: u64) -> Result<Option<Cow<'_, Row>>>;

    /// The rows visible at `snapshot` whose key on `path` lies in `range`, in `direction` (C2).
    fn range<'a>(
        &'a self,
        table: &'a Table,
        path: AccessPath,
        range: &ByteRange,
        direction: Direction,
        snapshot: u64,
    ) -> Result<VisibleIter<'a>>;

    /// Timestamp of the newest commit that wrote `pk` (C3).
    fn latest_change(&self, table: &Table, pk: &[u8]) -> Result<Option<u64>>;

    /// The newest committed row with primary key `pk` (`None`: absent or deleted).
    fn latest_row(&self, table: &Table, pk: &[u8]) -> Result<Option<Cow<'_, Row>>>;

    /// For every entry the engine holds on `path` within `range` (ascending, C3), the primary
    /// key of its row.
    fn entries<'a>(
        &'a self,
        table: &'a Table,
        path: AccessPath,
        range: &ByteRange,
    ) -> Result<EntryIter<'a>>;

    /// Whether a commit after `since` changed what `range` on `path` holds: some entry in the
    /// range belongs to a key written after `since`, or to a key the engine holds no version of
    /// (an entry that does not resolve counts as changed). An engine with a cheaper test (a
    /// per-range version counter) may override it, keeping C3's guarantee.
    fn range_changed(
        &self,
        table: &Table,
        path: AccessPath,
        range: &ByteRange,
        since: u64,
    ) -> Result<bool> {
        if range.is_empty() {
            return Ok(false);
        }
        for pk in self.entries(table, path, range)? {
            match self.latest_change(table, &pk?)? {
                Some(ts) if ts <= since => {}
                _ => return Ok(true),
            }
        }
        Ok(false)
    }
}
