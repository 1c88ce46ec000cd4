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

pub mod adaptive;
mod cont;
pub(crate) mod engine;
mod heap;
mod index;
mod ixkey;
mod layout;
mod past;
mod placement;
mod pm;
mod rebuild;
mod recovery;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_instant;
#[cfg(test)]
mod tests_past;
mod txn;

use std::sync::Arc;
use std::time::Instant;

pub use cont::{ReadRecords, UnfinishedTxn};
pub use layout::{DEFAULT_SLOTS, HEAP_CHUNK, INF, K_MIN_TS, MAX_SLOTS};
pub use past::{
    DEFAULT_PERSIST_EVERY as DEFAULT_PAST_PERSIST_EVERY,
    DEFAULT_SAMPLE_EVERY as DEFAULT_PAST_SAMPLE_EVERY,
};
pub use rebuild::{LookupHelp, RebuildStatus, RecoveryMode, RecoveryOptions};
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

    /// Every transaction slot is taken, or a read waited `txn::LOCK_WAIT` for another
    /// transaction's commit to resolve a lock. Retryable: a slot frees when any transaction
    /// ends, a commit finishes (maps to `Error::Busy`, not to a storage error: nothing is wrong
    /// with the store).
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

    /// No unfinished transaction with this id (never was, or already resumed or aborted).
    #[error("no unfinished transaction {0:#x}")]
    UnknownTransaction(u64),
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
    /// The index rebuild started by `open` (`None` after `create`); its workers stop when the
    /// last handle goes.
    rebuild: Option<Arc<rebuild::RebuildOwner>>,
}

impl SofortStore {
    /// Formats a new store on the (new, empty) pool set `set`.
    pub fn create(set: ferrite_pmem::PoolSet, opts: SofortOptions) -> SofortResult<SofortStore> {
        let alloc = Arc::new(PAllocator::create(Arc::new(set), opts.alloc_slots)?);
        SofortStore::create_on(alloc, opts)
    }

    /// Formats a new store on `alloc`, an allocator already formatted on its pool set whose
    /// root pointer is null: the store's blocks may reuse blocks freed there before, with
    /// whatever bytes they held (crash tests of creation over recycled memory).
    /// `opts.alloc_slots` is not used (the allocator has its slots).
    pub fn create_on(alloc: Arc<PAllocator>, opts: SofortOptions) -> SofortResult<SofortStore> {
        let alloc = recovery::format(alloc, opts)?;
        Ok(SofortStore {
            inner: Arc::new(recovery::open(alloc, None, Default::default())?.0),
            rebuild: None,
        })
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
        SofortStore::open_with(set, &RecoveryOptions::default())
    }

    /// [`SofortStore::open_shared`] with recovery options: in [`RecoveryMode::Instant`] it
    /// returns before the DRAM indexes are rebuilt (`docs/design/sofort.md` §15); see
    /// [`SofortStore::wait_rebuilt`].
    pub fn open_with(
        set: Arc<ferrite_pmem::PoolSet>,
        opts: &RecoveryOptions,
    ) -> SofortResult<(SofortStore, RecoveryReport)> {
        let a0 = Instant::now();
        let alloc = Arc::new(PAllocator::open(set)?);
        let started = Instant::now();
        let instant = opts.mode == RecoveryMode::Instant;
        let (inner, mut report) = recovery::open(alloc, opts.hold.filter(|_| instant), opts.help)?;
        report.allocator = started - a0;
        if !instant {
            // The heaps' free maps before the first transaction (design §15.8).
            for t in inner.all_tables() {
                t.finish_heaps(inner.s(), &|| false)?;
            }
        }
        let inner = Arc::new(inner);
        // The past workload seeds the ranking (design §16.1); advisory, never an error.
        let past = inner.past.load(&inner.pm);
        report.past_statements = past.statements;
        report.past_ignored = u64::from(past.ignored.is_some());
        let rb = rebuild::Rebuild::start(&inner, opts);
        if !instant {
            let status = rb.wait();
            if let Some(e) = status.error {
                rb.stop();
                return Err(StorageError::corrupted(e, "SOFORT index rebuild").into());
            }
            report.index_rebuild = Some(started.elapsed());
            report.duration = started.elapsed();
        }
        let store = SofortStore { inner, rebuild: Some(Arc::new(rebuild::RebuildOwner(rb))) };
        Ok((store, report))
    }

    /// The index rebuild's progress (complete at once after `create`).
    pub fn rebuild_status(&self) -> RebuildStatus {
        match &self.rebuild {
            Some(rb) => rb.0.status(),
            None => RebuildStatus { complete: true, ..RebuildStatus::default() },
        }
    }

    /// Waits until the index rebuild of an instant open ended (at once otherwise) and returns
    /// its outcome (`error`: an index that could not be rebuilt stays readable through its
    /// remainder, W1 of `docs/design/sofort.md` §15).
    pub fn wait_rebuilt(&self) -> RebuildStatus {
        match &self.rebuild {
            Some(rb) => rb.0.wait(),
            None => self.rebuild_status(),
        }
    }

    /// Test hook: no index rebuild passes watermark `hold` (rows of its table's live list
    /// indexed) until called again (`None`: released). Use [`RecoveryOptions::hold`] to hold
    /// from the start.
    #[doc(hidden)]
    pub fn set_rebuild_hold(&self, hold: Option<u64>) {
        if let Some(rb) = &self.rebuild {
            rb.0.set_hold(hold);
        }
    }

    /// Test hook: waits until every index's rebuild is complete or held at its hold.
    #[doc(hidden)]
    pub fn wait_rebuild_held(&self) {
        if let Some(rb) = &self.rebuild {
            rb.0.wait_held();
        }
    }

    /// Whether transactions or other handles of the store are open (then `close` refuses).
    /// A caller that must not lose the store on a refusal asks first: `close` consumes it.
    pub fn in_use(&self) -> bool {
        // This handle's reference, and the rebuild's (its workers reach the store through it).
        let ours = 1 + usize::from(self.rebuild.is_some());
        Arc::strong_count(&self.inner) != ours
            || self.rebuild.as_ref().is_some_and(|rb| Arc::strong_count(rb) != 1)
    }

    /// Makes every finalization durable and closes the pool set cleanly (P-SOF-11). Errors:
    /// `InvalidArgument` while transactions or other handles are open (nothing is closed).
    /// An unfinished index rebuild is stopped (nothing of it is persistent).
    pub fn close(self) -> SofortResult<()> {
        if self.in_use() {
            return Err(StorageError::InvalidArgument(
                "transactions or other handles of the store are still open".into(),
            )
            .into());
        }
        let SofortStore { inner, rebuild } = self;
        drop(rebuild); // stops and joins the workers, releasing their reference
        // The past workload is advisory: a failed write does not keep the store open.
        let _ = inner.past.persist(&inner.pm); // ORDER(P-SOF-50): the block's write persists its copy, then the selector (P-SOF-51)
        match Arc::try_unwrap(inner) {
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

    /// Sets the past workload's sampling: one statement in `every` per thread (0: off), the
    /// block written every `persist_every` sampled statements (0: only at close and by
    /// [`SofortStore::persist_past`]). Runtime only.
    pub fn set_past_sampling(&self, every: u32, persist_every: u64) {
        self.inner.past.configure(every, persist_every);
    }

    /// Writes the past workload's block now (design §16.1).
    pub fn persist_past(&self) -> SofortResult<()> {
        self.inner.past.persist(&self.inner.pm) // ORDER(P-SOF-50): the copy, then the selector (P-SOF-51)
    }

    /// The past workload's counts now (loaded at open plus sampled since), most frequent
    /// first, each shape named as `past::shape_name` does.
    pub fn past_workload(&self) -> Vec<(String, u64)> {
        self.inner.past.snapshot().iter().map(|(q, n)| (past::shape_name(q), *n)).collect()
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
    /// Starts a continuable read-write transaction (design §14).
    pub fn begin_continuable(&self) -> SofortResult<TxHandle> {
        txn::Inner::begin_continuable(&self.inner)
    }

    /// Unfinished transactions recovery kept that nobody claimed yet.
    pub fn unfinished(&self) -> Vec<UnfinishedTxn> {
        self.inner.unfinished()
    }

    /// Claims unfinished transaction `txid` (its handle and its read records).
    pub fn resume(&self, txid: u64) -> SofortResult<(TxHandle, ReadRecords)> {
        txn::Inner::resume(&self.inner, txid)
    }

    pub fn check(&self) -> SofortResult<CheckReport> {
        self.inner.check()
    }

    /// `CurrentTime` (for tests and reports).
    pub fn current_time(&self) -> u64 {
        self.inner.now()
    }
}
