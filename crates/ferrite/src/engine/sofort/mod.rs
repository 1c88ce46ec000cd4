//! SOFORT, the persistent storage core (issue [E1] phase 1): columns and an MVCC column per
//! table in PM, updated in place, with a small persistent area per transaction slot and no
//! write-ahead log (seed 001 ch. 5; spec `../shared/specs/sofort.md` §0–5; design and proofs
//! in `docs/design/sofort.md`).
//!
//! # Invariants
//! - A row version is visible at `t` iff `CTS ≤ t < DTS` with both fields resolved to
//!   timestamps (§4.2 of the design; FIX-1, FIX-5); row id = version id.
//! - A committed transaction's area names every row it locked, and every lock it took was
//!   durable before its commit word (F1 before F2): recovery rolls committed transactions
//!   forward field by field (`== txid`) and treats every other TXID of an older epoch as
//!   uncommitted.
//! - Nothing is persisted while a transaction executes; a read-write commit makes two fences
//!   (three with more than four rows written), an abort none.
//! - Bad or corrupt stored data is a typed error (`Corrupted`, `Incompatible`), never a panic;
//!   every offset read from PM is resolved through checked pool calls.
//!
//! # Ordering
//! Rules P-SOF-1..11 (`docs/design/persistence.md`); axiom M2 is declared (commit word and
//! `CTS`/`DTS` pairs share a line with what they order).
//!
//! # Concurrency
//! [`SofortStore`] is `Send + Sync`; a [`TxHandle`] is `Send` and used by one thread at a time
//! (it may move between threads: values it wrote on another thread are flushed by the
//! committing thread). Locks: per table (row ids, chunks), per heap, per index (`RwLock`), per
//! slot (`TxInfo`), one for staged allocations.

mod codec;
pub(crate) mod engine;
mod heap;
mod index;
mod ixkey;
mod layout;
mod placement;
mod pm;
mod recovery;
mod table;
#[cfg(test)]
mod tests;
mod txn;

use std::sync::Arc;

pub use layout::{DEFAULT_SLOTS, HEAP_CHUNK, INF, K_MIN_TS, MAX_SLOTS};
pub use recovery::{CheckReport, RecoveryReport};
pub use table::{PTable, TableRef};
pub use txn::{KeyState, TxHandle};

use crate::alloc::PAllocator;
use crate::error::SchemaError;
use crate::storage::StorageError;

/// Result type of the SOFORT core.
pub type SofortResult<T> = std::result::Result<T, SofortError>;

/// An error of the SOFORT core. The engine glue maps it to `crate::Error` one to one
/// (`Storage` through `From<StorageError>`).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SofortError {
    /// Stored data failed validation, the pool is full, an argument is invalid, the handle is
    /// poisoned, or the persistence layer failed.
    #[error(transparent)]
    Storage(#[from] StorageError),

    /// Every transaction slot is taken. Retryable: a slot frees when any transaction ends
    /// (maps to `Error::Busy`, not to a storage error: nothing is wrong with the store).
    #[error("busy: {0}")]
    Busy(String),

    /// A lock held by another transaction (write-write conflict, or a read-write
    /// transaction meeting an uncommitted version): the transaction must abort. Retryable.
    #[error("transaction conflict: {0}")]
    Conflict(String),

    /// A `str`/`bytes` value longer than one heap chunk.
    #[error("column {column:?}: a value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge {
        /// The column.
        column: String,
        /// The value's length.
        len: u64,
        /// The limit.
        max: u64,
    },

    /// DDL misuse (a table that exists, an invalid definition, an unknown table).
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

impl From<ferrite_pmem::Error> for SofortError {
    fn from(e: ferrite_pmem::Error) -> Self {
        SofortError::Storage(StorageError::Pmem(e))
    }
}

/// Options of a new store (stored in the catalog; `open` reads them back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SofortOptions {
    /// Transaction slots: the most transactions open at once (1..=[`MAX_SLOTS`]).
    pub slots: u32,
    /// Slots of the allocator.
    pub alloc_slots: u32,
}

impl Default for SofortOptions {
    fn default() -> Self {
        SofortOptions { slots: DEFAULT_SLOTS, alloc_slots: crate::alloc::DEFAULT_SLOTS }
    }
}

/// A SOFORT store on a pool set (see the module docs).
#[derive(Debug, Clone)]
pub struct SofortStore {
    inner: Arc<txn::Inner>,
}

impl SofortStore {
    /// Formats a new store on the (new, empty) pool set `set`.
    pub fn create(set: ferrite_pmem::PoolSet, opts: SofortOptions) -> SofortResult<SofortStore> {
        let alloc = Arc::new(PAllocator::create(Arc::new(set), opts.alloc_slots)?);
        let alloc = recovery::format(alloc, opts)?;
        Ok(SofortStore { inner: Arc::new(recovery::open(alloc)?.0) })
    }

    /// Opens (and recovers) the store on `set`. Returns what recovery did.
    pub fn open(set: ferrite_pmem::PoolSet) -> SofortResult<(SofortStore, RecoveryReport)> {
        SofortStore::open_shared(Arc::new(set))
    }

    /// [`SofortStore::open`] on a shared pool set: when it fails, the caller still holds the
    /// set (to mark it cleanly closed again, so a refused open changes nothing).
    pub fn open_shared(
        set: Arc<ferrite_pmem::PoolSet>,
    ) -> SofortResult<(SofortStore, RecoveryReport)> {
        let alloc = Arc::new(PAllocator::open(set)?);
        let (inner, report) = recovery::open(alloc)?;
        Ok((SofortStore { inner: Arc::new(inner) }, report))
    }

    /// Makes every finalization durable and closes the pool set cleanly (P-SOF-11). Errors:
    /// `InvalidArgument` while transactions or other handles are open (nothing is closed).
    pub fn close(self) -> SofortResult<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner.close(),
            Err(_) => Err(StorageError::InvalidArgument(
                "transactions or other handles of the store are still open".into(),
            )
            .into()),
        }
    }

    /// Creates a table (durable on return). Errors: `Schema(TableExists)`,
    /// `Schema(InvalidDefinition)`, `PoolFull`.
    pub fn create_table(&self, schema: crate::TableSchema) -> SofortResult<TableRef> {
        self.inner.create_table(schema, &[])
    }

    /// [`SofortStore::create_table`] with each index placed as `placements` says: the primary
    /// key's first, then the secondary indexes in schema order (missing ones: DRAM). Stored in
    /// the table's descriptor. A store of format version 1 keeps every index in DRAM (its
    /// descriptors have no room for placements). Errors: as `create_table`.
    pub fn create_table_with(
        &self,
        schema: crate::TableSchema,
        placements: &[crate::SofortIndexPlacement],
    ) -> SofortResult<TableRef> {
        self.inner.create_table(schema, placements)
    }

    /// The table `name`.
    pub fn table(&self, name: &str) -> Option<TableRef> {
        self.inner.table_by_name(name)
    }

    /// Every table, by id.
    pub fn tables(&self) -> Vec<TableRef> {
        self.inner.all_tables()
    }

    /// Starts a transaction. Errors: `Busy` when every slot is taken, `Poisoned`.
    pub fn begin(&self, read_only: bool) -> SofortResult<TxHandle> {
        txn::Inner::begin(&self.inner, read_only)
    }

    /// Checks the store's invariants (allocator, rows, heaps, indexes).
    pub fn check(&self) -> SofortResult<CheckReport> {
        self.inner.check()
    }

    /// `CurrentTime` (for tests and reports).
    pub fn current_time(&self) -> u64 {
        self.inner.now()
    }
}
