//! The SOFORT engine behind the `Database` API: the glue between the typed layer
//! ([`Engine`]/[`EngineTxn`]) and the storage core ([`SofortStore`], [`TxHandle`]).
//! Design: `docs/design/sofort.md` §11.
//!
//! SOFORT writes in place: an insert locks a new version (`CTS = txid`), a delete locks the old
//! one (`DTS = txid`), and the core's reads already show a transaction its own writes. So this
//! glue buffers no writes (the `engine/common` overlay and write set do not fit); it adds what
//! the core leaves to the engine:
//!
//! - **Serializability** (spec Alg. 5.9 with FIX-3): a read-write transaction records every
//!   key it looked up and every range it scanned (narrowed to what a limited scan examined,
//!   with the scan's filters); inside `commit_with`, at the commit timestamp `c`, each is
//!   re-run over **committed** data only and compared with the same read at the snapshot
//!   ([`TxHandle::range_changed`]); any difference is `Conflict`. Own writes are left out of
//!   the comparison, so a transaction never conflicts with itself.
//! - **Uniqueness** of the primary key and unique indexes: checked under a per-table key lock
//!   held until the new version's index entries are in ([`TxHandle::key_state`]): a version
//!   visible to the transaction is `DuplicateKey`; one locked by another active transaction or
//!   committed after the snapshot is `Conflict`.
//! - Error mapping, `commit_deferred` (= a durable commit), `wait_durable` (returns at once),
//!   `close`, and the [`RecoveryReport`] of `open`.
//!
//! # Invariants
//! - G1: a read-write transaction that commits read, in every recorded read, the same committed
//!   versions at its snapshot and at its commit timestamp; with write-write conflicts caught by
//!   the core's `DTS` CAS, committed read-write transactions are equivalent to running serially
//!   in commit-timestamp order.
//! - G2: no two live versions share a primary key or a unique-index value: every insert of a
//!   key (and every update that changes a unique value) checks all versions holding it under
//!   the table's key lock, and leaves its own locked version in the index before releasing it.
//! - G3: a failed operation has no effect (checks run before the core writes; a failed update
//!   releases its delete lock).
//!
//! # Ordering (durability)
//! The core's (P-SOF-1..11): `commit` and `commit_deferred` both return after the commit point
//! (F2), so `wait_durable` has nothing to wait for. `close` makes pending finalizations durable
//! and marks the pool set cleanly closed (P-SOF-11); dropping the database does the same
//! silently.
//!
//! # Concurrency
//! Lock order: a table's key lock, then the core's locks (table, heap, staging, allocator). The
//! catalog map is read-locked per lookup; each transaction caches its tables. Readers never
//! wait for writers, except for a committer that already holds a commit timestamp `<=` the
//! reader's time (FIX-5), which finishes within its own `commit` call.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ferrite_pmem::PoolSet;

use super::ixkey::IxKey;
use super::table::entry_bounds;
use super::{
    KeyState, RecoveryOptions, SofortError, SofortOptions, SofortStore, TableRef, TxHandle,
};
use crate::db::{RecoveryReport, UnfinishedTransaction};
use crate::encoding::ByteRange;
use crate::engine::api::{CommitMode, Engine, EngineTxn};
use crate::engine::common::unique::{duplicate_index, duplicate_pk};
use crate::error::{Error, Result, SchemaError};
use crate::options::{EngineKind, Options};
use crate::query::{AccessPath, Direction, Filter, LoweredScan, matches_all};
use crate::schema::Table;
use crate::value::{Row, Value};

/// Builds the engine for the registry: creates a pool-set directory at `path` (`Io` of kind
/// `AlreadyExists` if something is there) or opens and recovers the one there.
pub(crate) fn build(path: &Path, options: &Options, create: bool) -> Result<Arc<dyn Engine>> {
    let t0 = Instant::now();
    let pm = options.pmem_options();
    let set = if create { PoolSet::create(path, pm)? } else { PoolSet::open(path, pm)? };
    Ok(Arc::new(Sofort::start(set, options, create, t0)?))
}

/// Runs the engine on a pre-made pool set (a simulated one for crash tests): `create` formats
/// a new database on the empty set, otherwise the set is opened and recovered.
pub(crate) fn on_pool_set(
    set: PoolSet,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    Ok(Arc::new(Sofort::start(set, options, create, Instant::now())?))
}

/// Creates a new database on `alloc`, an allocator already formatted on its pool set whose
/// root is null (crash tests of SOFORT's creation over blocks freed with stale bytes).
pub(crate) fn on_allocator(
    alloc: Arc<crate::alloc::PAllocator>,
    options: &Options,
) -> Result<Arc<dyn Engine>> {
    let t0 = Instant::now();
    let c = options.sofort_config();
    let opts = SofortOptions { slots: c.slots, alloc_slots: alloc.slots() };
    let store = SofortStore::create_on(alloc, opts).map_err(|e| map_err(e, ""))?;
    Ok(Arc::new(Sofort::finish_start(store, None, options, t0)?))
}

/// Maps a core error; `table` names the table for `ValueTooLarge`.
fn map_err(e: SofortError, table: &str) -> Error {
    match e {
        SofortError::Storage(s) => s.into(),
        SofortError::Busy(m) => Error::Busy(m),
        SofortError::Conflict(m) => Error::conflict(m),
        SofortError::ValueTooLarge { column, len, max } => {
            Error::ValueTooLarge { table: table.to_owned(), column, len, max }
        }
        SofortError::Schema(s) => Error::Schema(s),
        SofortError::UnknownTransaction(id) => Error::UnknownTransaction(id),
    }
}

/// One table: its checked schema (the `Arc` handed to the typed layer), the core's table, and
/// the key lock of G2.
#[derive(Debug)]
struct TableEntry {
    schema: Arc<Table>,
    p: TableRef,
    key_lock: Mutex<()>,
}

impl TableEntry {
    fn new(p: TableRef) -> Arc<TableEntry> {
        Arc::new(TableEntry { schema: Arc::new(p.table.clone()), p, key_lock: Mutex::new(()) })
    }
}

#[derive(Debug, Default)]
struct Shared {
    tables: RwLock<BTreeMap<String, Arc<TableEntry>>>,
}

impl Shared {
    fn entry(&self, name: &str) -> Result<Arc<TableEntry>> {
        let map = self.tables.read().map_err(|_| Error::Poisoned)?;
        map.get(name).cloned().ok_or_else(|| SchemaError::UnknownTable(name.to_owned()).into())
    }
}

/// The engine.
pub(crate) struct Sofort {
    store: RwLock<Option<SofortStore>>,
    shared: Arc<Shared>,
    /// The report as of `open`'s return (the background rebuild's times are added on demand).
    report: Option<RecoveryReport>,
    /// How long an unfinished continuable transaction waits to be resumed.
    timeout: Duration,
    /// When `open` started.
    t0: Instant,
    /// The settings this handle was opened with (index placements of new tables).
    config: crate::SofortConfig,
}

impl fmt::Debug for Sofort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sofort").field("report", &self.report).finish_non_exhaustive()
    }
}

impl Sofort {
    fn start(set: PoolSet, options: &Options, create: bool, t0: Instant) -> Result<Sofort> {
        let err = |e| map_err(e, "");
        let clean = set.was_clean_shutdown();
        let (store, report) = if create {
            let c = options.sofort_config();
            let opts = SofortOptions { slots: c.slots, alloc_slots: c.alloc_slots };
            (SofortStore::create(set, opts).map_err(err)?, None)
        } else {
            // Opening the set marked it "open"; if SOFORT refuses it (corrupt, newer), put the
            // clean state back so that a refused open changes nothing.
            let set = Arc::new(set);
            let c = options.sofort_config();
            let (mode, threads) = match c.recovery_strategy {
                Some(s @ super::adaptive::Strategy::Synchronous { .. }) => {
                    (super::RecoveryMode::Synchronous, s.initial_threads())
                }
                Some(s) => (super::RecoveryMode::Instant, s.initial_threads()),
                None => (c.recovery, c.recovery_threads),
            };
            let ropts = RecoveryOptions {
                mode,
                threads,
                strategy: c.recovery_strategy,
                order: Vec::new(),
                hold: c.rebuild_hold,
                help: c.lookup_help,
            };
            let opened = SofortStore::open_with(Arc::clone(&set), &ropts);
            let (store, core) = match opened {
                Ok(x) => {
                    drop(set);
                    x
                }
                Err(e) => {
                    if clean && let Ok(set) = Arc::try_unwrap(set) {
                        let _ = set.close();
                    }
                    return Err(err(e));
                }
            };
            let total = t0.elapsed();
            let opened = total.saturating_sub(core.duration);
            let report = RecoveryReport {
                time_to_open: opened,
                time_to_index_rebuild: core.index_rebuild.map_or(Duration::ZERO, |d| opened + d),
                indexes_complete: core.index_rebuild.is_some(),
                index_times: Vec::new(),
                time_to_first_transaction: total,
                clean_shutdown: clean,
                committed_areas: core.committed_areas,
                rolled_forward: core.rolled_forward,
                undone: core.undone,
                live_rows: core.live_rows,
                garbage_rows: core.garbage_rows,
                tables: core.tables,
                past_statements: core.past_statements,
                past_ignored: core.past_ignored,
                recovery: match c.recovery_strategy {
                    Some(s) => s.to_string(),
                    None if mode == super::RecoveryMode::Instant => "instant".into(),
                    None => "synchronous".into(),
                },
            };
            (store, Some(report))
        };
        Sofort::finish_start(store, report, options, t0)
    }

    /// The engine over `store` (created or opened at `t0`, with `report` if opened).
    fn finish_start(
        store: SofortStore,
        report: Option<RecoveryReport>,
        options: &Options,
        t0: Instant,
    ) -> Result<Sofort> {
        {
            let c = options.sofort_config();
            store.set_past_sampling(c.past_sample_every, c.past_persist_every);
        }
        let shared = Arc::new(Shared::default());
        {
            let mut map = shared.tables.write().map_err(|_| Error::Poisoned)?;
            for p in store.tables() {
                map.insert(p.name().to_owned(), TableEntry::new(p));
            }
        }
        let timeout = options.unfinished_timeout_value();
        let config = options.sofort_config();
        let mut engine =
            Sofort { store: RwLock::new(Some(store)), shared, report, timeout, t0, config };
        if let Some(r) = engine.report.as_mut() {
            // The first transaction can start now (with synchronous recovery, after the
            // rebuild; with instant recovery, the rebuild runs on).
            r.time_to_first_transaction = t0.elapsed();
            if r.indexes_complete {
                r.time_to_first_transaction =
                    r.time_to_first_transaction.max(r.time_to_index_rebuild);
            }
        }
        Ok(engine)
    }

    /// Drops the table handles (before the store closes: a table's PM indexes share the
    /// store's allocator and pool set, which close only when nothing else holds them).
    fn forget_tables(&self) {
        if let Ok(mut map) = self.shared.tables.write() {
            map.clear();
        }
    }

    fn with_store<T>(&self, f: impl FnOnce(&SofortStore) -> Result<T>) -> Result<T> {
        let g = self.store.read().map_err(|_| Error::Poisoned)?;
        match g.as_ref() {
            Some(s) => f(s),
            None => Err(Error::InvalidArgument("the database is closed".into())),
        }
    }

    fn start_txn(&self, read_only: bool) -> Result<Box<dyn EngineTxn>> {
        let h = self.with_store(|s| s.begin(read_only).map_err(|e| map_err(e, "")))?;
        Ok(Box::new(self.txn(h, read_only, Vec::new())))
    }

    fn txn(&self, h: TxHandle, read_only: bool, reads: Vec<ReadRec>) -> SofortTxn {
        SofortTxn {
            shared: Arc::clone(&self.shared),
            h: Some(h),
            read_only,
            cache: Vec::new(),
            logged: reads.len(),
            reads,
            keys: HashSet::new(),
        }
    }

    /// Decodes a resumed transaction's read records (§14); a record that does not decode or
    /// names an unknown table or index is `Corrupted`.
    fn decode_reads(&self, raw: Vec<(u16, Vec<u8>)>) -> Result<Vec<ReadRec>> {
        let map = self.shared.tables.read().map_err(|_| Error::Poisoned)?;
        raw.into_iter()
            .map(|(tid, bytes)| {
                let entry = map
                    .values()
                    .find(|e| e.p.id() == tid)
                    .cloned()
                    .ok_or_else(|| readrec::bad(format!("a read record names table {tid}")))?;
                let (index, range, filters) = readrec::decode(&bytes, &entry.schema)?;
                Ok(ReadRec { entry, index, range, filters })
            })
            .collect()
    }
}

impl Drop for Sofort {
    fn drop(&mut self) {
        // Dropping closes silently (api.md §1); a failure leaves an unclean shutdown state,
        // which the next open recovers from like from a crash.
        if let Ok(mut g) = self.store.write()
            && let Some(s) = g.take()
        {
            self.forget_tables();
            let _ = s.close();
        }
    }
}

impl Engine for Sofort {
    fn kind(&self) -> EngineKind {
        EngineKind::Sofort
    }

    fn create_table(&self, table: Table) -> Result<()> {
        let name = table.name().to_owned();
        let c = &self.config;
        let mut placements = vec![c.placement_of(&name, None)];
        placements.extend(table.indexes.iter().map(|ix| c.placement_of(&name, Some(&ix.name))));
        let p = self.with_store(|s| {
            s.create_table_with(table.schema, &placements).map_err(|e| map_err(e, &name))
        })?;
        self.shared.tables.write().map_err(|_| Error::Poisoned)?.insert(name, TableEntry::new(p));
        Ok(())
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        Ok(Arc::clone(&self.shared.entry(name)?.schema))
    }

    fn table_names(&self) -> Result<Vec<String>> {
        Ok(self.shared.tables.read().map_err(|_| Error::Poisoned)?.keys().cloned().collect())
    }

    fn begin(&self) -> Result<Box<dyn EngineTxn>> {
        self.start_txn(false)
    }

    fn begin_read(&self) -> Result<Box<dyn EngineTxn>> {
        self.start_txn(true)
    }

    fn wait_durable(&self, seq: u64) -> Result<()> {
        // Every commit is durable when it returns (deferred ones too).
        let now = self.with_store(|s| Ok(s.current_time()))?;
        if seq <= now {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("commit ticket {seq} was never issued")))
        }
    }

    fn close(&self) -> Result<()> {
        let mut g = self.store.write().map_err(|_| Error::Poisoned)?;
        // Refused with everything left open while transactions are (no new one can begin
        // while the lock is held): the store stays usable by them, and closes cleanly when
        // the engine's last handle, theirs, is dropped. Taking it first, as before, closed it
        // half way (regression test in `tests/sofort.rs`).
        if g.as_ref().is_some_and(SofortStore::in_use) {
            return Err(Error::InvalidArgument(
                "transactions of the database are still open: end them first (the database \
                 closes when the last of them is dropped)"
                    .into(),
            ));
        }
        match g.take() {
            Some(s) => {
                drop(g);
                self.forget_tables();
                s.close().map_err(|e| map_err(e, ""))
            }
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<String> {
        let r = self.with_store(|s| s.check().map_err(|e| map_err(e, "")))?;
        Ok(format!(
            "sofort: allocator and {} tables checked: {} rows in use, {} live, {} reusable, {} index entries, {} free heap bytes",
            r.tables, r.rows_in_use, r.live_rows, r.reusable, r.index_entries, r.heap_free
        ))
    }

    fn recovery_report(&self) -> Option<RecoveryReport> {
        let mut r = self.report.clone()?;
        // The rebuild's progress (for instant recovery, in the background).
        let Ok(status) = self.with_store(|s| Ok(s.rebuild_status())) else { return Some(r) };
        r.index_times = status
            .indexes
            .iter()
            .map(|(n, at)| (n.clone(), at.map(|i| i.saturating_duration_since(self.t0))))
            .collect();
        if status.complete && !r.indexes_complete {
            r.indexes_complete = true;
            r.time_to_index_rebuild = r
                .index_times
                .iter()
                .filter_map(|(_, d)| *d)
                .fold(r.time_to_first_transaction, Duration::max);
        }
        Some(r)
    }

    fn wait_recovered(&self) -> Result<()> {
        let status = self.with_store(|s| Ok(s.wait_rebuilt()))?;
        match status.error {
            Some(e) => {
                Err(crate::storage::StorageError::corrupted(e, "SOFORT index rebuild").into())
            }
            None => Ok(()),
        }
    }

    fn past_workload(&self) -> Vec<(String, u64)> {
        self.with_store(|s| Ok(s.past_workload())).unwrap_or_default()
    }

    fn persist_past_workload(&self) -> Result<()> {
        self.with_store(|s| s.persist_past().map_err(|e| map_err(e, "")))
    }

    fn hold_rebuild(&self, hold: Option<u64>) {
        let _ = self.with_store(|s| {
            s.set_rebuild_hold(hold);
            if hold.is_some() {
                s.wait_rebuild_held();
            }
            Ok(())
        });
    }

    fn begin_continuable(&self) -> Result<Box<dyn EngineTxn>> {
        let h = self.with_store(|s| s.begin_continuable().map_err(|e| map_err(e, "")))?;
        Ok(Box::new(self.txn(h, false, Vec::new())))
    }

    fn unfinished(&self) -> Result<Vec<UnfinishedTransaction>> {
        self.with_store(|s| {
            Ok(s.unfinished()
                .into_iter()
                .map(|u| UnfinishedTransaction {
                    id: u.txid,
                    statements: u.statements,
                    read_only: false,
                    found_at: u.since,
                })
                .collect())
        })
    }

    fn resume(&self, id: u64) -> Result<Box<dyn EngineTxn>> {
        let (h, raw) = self.with_store(|s| s.resume(id).map_err(|e| map_err(e, "")))?;
        match self.decode_reads(raw) {
            Ok(reads) => Ok(Box::new(self.txn(h, false, reads))),
            Err(e) => {
                // Kept unfinished would only fail again: the records are damaged.
                drop(h);
                Err(e)
            }
        }
    }

    fn reap_unfinished(&self, now: Instant) -> Result<Vec<u64>> {
        let due: Vec<u64> = self
            .unfinished()?
            .into_iter()
            .filter(|u| u.found_at + self.timeout <= now)
            .map(|u| u.id)
            .collect();
        let mut done = Vec::new();
        for id in due {
            match self.with_store(|s| s.resume(id).map_err(|e| map_err(e, ""))) {
                Ok((h, _)) => {
                    h.abort();
                    done.push(id);
                }
                // Claimed meanwhile by a client: not ours to abort.
                Err(Error::UnknownTransaction(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

/// One recorded read of a read-write transaction (validated at commit, G1).
#[derive(Debug)]
struct ReadRec {
    entry: Arc<TableEntry>,
    index: Option<usize>,
    range: ByteRange,
    filters: Vec<Filter>,
}

/// A transaction.
struct SofortTxn {
    shared: Arc<Shared>,
    /// `None` once committed or aborted.
    h: Option<TxHandle>,
    read_only: bool,
    /// Tables used so far (looked up by `Arc` identity, then by name).
    cache: Vec<Arc<TableEntry>>,
    reads: Vec<ReadRec>,
    /// Reads already in the continuation log (continuable transactions, §14).
    logged: usize,
    /// Primary keys already recorded, `(table id, key)`.
    keys: HashSet<(u16, Vec<u8>)>,
}

impl fmt::Debug for SofortTxn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SofortTxn")
            .field("h", &self.h)
            .field("read_only", &self.read_only)
            .field("reads", &self.reads.len())
            .finish()
    }
}

fn ended() -> Error {
    Error::InvalidArgument("the transaction has ended".into())
}

impl SofortTxn {
    fn entry(&mut self, table: &Arc<Table>) -> Result<Arc<TableEntry>> {
        if let Some(e) = self.cache.iter().find(|e| Arc::ptr_eq(&e.schema, table)) {
            return Ok(Arc::clone(e));
        }
        let e = self.shared.entry(table.name())?;
        self.cache.push(Arc::clone(&e));
        Ok(e)
    }

    /// Ends a statement of a continuable transaction (§14): its new reads and writes durable.
    /// A failure dooms the transaction. Returns `r`, the statement's own outcome.
    fn end<T>(&mut self, r: Result<T>) -> Result<T> {
        let Some(h) = self.h.as_mut() else { return r };
        if !h.is_continuable() || h.is_doomed() {
            return r;
        }
        let recs: Vec<(u16, Vec<u8>)> = self.reads[self.logged..]
            .iter()
            .map(|rd| (rd.entry.p.id(), readrec::encode(rd.index, &rd.range, &rd.filters)))
            .collect();
        if let Err(e) = h.statement_end(&recs) {
            h.doom();
            return Err(map_err(e, ""));
        }
        self.logged = self.reads.len();
        r
    }

    fn record_key(&mut self, e: &Arc<TableEntry>, pk: &[u8]) {
        if !self.read_only && self.keys.insert((e.p.id(), pk.to_vec())) {
            let range = ByteRange {
                lower: Bound::Included(pk.to_vec()),
                upper: Bound::Included(pk.to_vec()),
            };
            self.reads.push(ReadRec { entry: Arc::clone(e), index: None, range, filters: vec![] });
        }
    }

    fn record_range(
        &mut self,
        e: &Arc<TableEntry>,
        index: Option<usize>,
        range: ByteRange,
        f: &[Filter],
    ) {
        if !self.read_only && !range.is_empty() {
            let filters = f.to_vec();
            self.reads.push(ReadRec { entry: Arc::clone(e), index, range, filters });
        }
    }

    /// Checks the primary key (if `pk`) and the unique indexes `unique` for `row`, ignoring
    /// version `skip` (the row an update replaces). The caller holds the table's key lock.
    /// The unique-index probes are recorded as reads; the primary-key probe is recorded by
    /// the caller only when the write does not take place (see [`SofortTxn::insert`]).
    fn check_unique(
        &mut self,
        e: &Arc<TableEntry>,
        row: &[Value],
        pk: Option<&[u8]>,
        unique: &[usize],
        skip: Option<u64>,
    ) -> Result<()> {
        if let Some(pk) = pk {
            let key = IxKey::new(pk);
            let h = self.h.as_ref().ok_or_else(ended)?;
            let rows = e.p.pk_rows(h.space(), &key).map_err(|x| map_err(x, e.p.name()))?;
            if let Some(rows) = rows {
                let cands = rows.as_slice().iter().map(|&r| (key.clone(), r));
                self.probe(e, None, cands, row, skip)?;
            }
        }
        for &i in unique {
            let ix = &e.schema.indexes[i];
            let range = ByteRange::prefix(e.schema.index_prefix(ix, row));
            let (lo, hi) = range.as_slices();
            let (lo, hi) = entry_bounds(lo, hi);
            let h = self.h.as_ref().ok_or_else(ended)?;
            let cands =
                e.p.candidates(h.space(), Some(i), &lo, &hi, true, usize::MAX)
                    .map_err(|x| map_err(x, e.p.name()))?;
            self.record_range(e, Some(i), range, &[]);
            self.probe(e, Some(i), cands, row, skip)?;
        }
        Ok(())
    }

    /// One uniqueness probe of `index` over its entries `cands` that may hold `row`'s key.
    fn probe(
        &mut self,
        e: &Arc<TableEntry>,
        index: Option<usize>,
        cands: impl IntoIterator<Item = (IxKey, u64)>,
        row: &[Value],
        skip: Option<u64>,
    ) -> Result<()> {
        let t = &e.p;
        let h = self.h.as_mut().ok_or_else(ended)?;
        for (k, r) in cands {
            if Some(r) == skip {
                continue;
            }
            let state = h.key_state(t, r).map_err(|x| map_err(x, t.name()))?;
            if state == KeyState::Free {
                continue;
            }
            // A candidate read before a collected slot was reused may hold another key.
            let held = h.read_row(t, r).map_err(|x| map_err(x, t.name()))?;
            if k != *t.key_of(index, &held) {
                continue;
            }
            return Err(match (state, index) {
                (KeyState::Visible, None) => duplicate_pk(&e.schema, row),
                (KeyState::Visible, Some(i)) => duplicate_index(&e.schema, i, row),
                _ => {
                    h.doom();
                    Error::conflict(format!(
                        "a concurrent transaction inserted the same key into {:?}",
                        t.name()
                    ))
                }
            });
        }
        Ok(())
    }

    /// [`EngineTxn::insert`] without the read record.
    fn insert_row(&mut self, e: &Arc<TableEntry>, pk: &[u8], row: &[Value]) -> Result<()> {
        let unique: Vec<usize> = e
            .schema
            .indexes
            .iter()
            .enumerate()
            .filter(|(_, ix)| ix.unique)
            .map(|(i, _)| i)
            .collect();
        let _g = e.key_lock.lock().map_err(|_| Error::Poisoned)?;
        self.check_unique(e, row, Some(pk), &unique, None)?;
        let h = self.h.as_mut().ok_or_else(ended)?;
        h.insert(&e.p, row).map_err(|x| map_err(x, e.p.name()))?;
        Ok(())
    }

    /// [`EngineTxn::update`] without the read record.
    fn update_row(
        &mut self,
        e: &Arc<TableEntry>,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()> {
        let name = e.p.name();
        let h = self.h.as_mut().ok_or_else(ended)?;
        let Some((r, mut new)) = h.get(&e.p, pk).map_err(|x| map_err(x, name))? else {
            return Err(Error::NotFound { table: name.to_owned(), key: key.clone() });
        };
        // The new version in place of the old one, keeping only the replaced values (a copy
        // of the whole row cost one allocation per string column).
        let replaced: Vec<(usize, Value)> = assignments
            .iter()
            .filter_map(|(pos, v)| {
                new.get_mut(*pos).map(|cell| (*pos, std::mem::replace(cell, v.clone())))
            })
            .collect();
        let s = &e.schema;
        // Conservative: floats compare by bits, so -0.0 against 0.0 (equal, but maybe not as
        // keys) and NaNs count as changed and get the uniqueness check.
        let differs = |c: &usize| {
            replaced.iter().any(|(pos, old)| {
                pos == c
                    && new.get(*c).is_some_and(|v| match (v, old) {
                        (Value::F64(a), Value::F64(b)) => a.to_bits() != b.to_bits(),
                        _ => v != old,
                    })
            })
        };
        let changed: Vec<usize> = s
            .indexes
            .iter()
            .enumerate()
            .filter(|(_, ix)| ix.unique && ix.columns.iter().any(differs))
            .map(|(i, _)| i)
            .collect();
        let _g = if changed.is_empty() {
            None
        } else {
            let g = e.key_lock.lock().map_err(|_| Error::Poisoned)?;
            self.check_unique(e, &new, None, &changed, Some(r))?;
            Some(g)
        };
        let h = self.h.as_mut().ok_or_else(ended)?;
        h.update(&e.p, r, &new).map_err(|x| map_err(x, name))?;
        Ok(())
    }
}

impl EngineTxn for SofortTxn {
    fn get(&mut self, table: &Arc<Table>, pk: &[u8]) -> Result<Option<Row>> {
        let e = self.entry(table)?;
        let h = self.h.as_mut().ok_or_else(ended)?;
        let found = h.get(&e.p, pk).map_err(|x| map_err(x, table.name()))?;
        self.record_key(&e, pk);
        self.end(Ok(found.map(|(_, row)| row)))
    }

    fn scan(
        &mut self,
        table: &Arc<Table>,
        scan: &LoweredScan,
        filters: &[Filter],
    ) -> Result<Vec<Row>> {
        if scan.limit == Some(0) || scan.range.is_empty() {
            return Ok(Vec::new());
        }
        let e = self.entry(table)?;
        let index = match scan.path {
            AccessPath::Primary => None,
            AccessPath::Index(i) => Some(i),
        };
        let asc = scan.direction == Direction::Ascending;
        let want = scan.limit.unwrap_or(usize::MAX);
        // With filters the limit counts rows that pass them, so the core scans unlimited.
        let core_limit = if filters.is_empty() { want } else { usize::MAX };
        let h = self.h.as_mut().ok_or_else(ended)?;
        let (lo, hi) = scan.range.as_slices();
        let sts = h.sts();
        let found = h
            .scan_at(&e.p, index, lo, hi, asc, core_limit, sts)
            .map_err(|x| map_err(x, table.name()))?;
        let mut rows = Vec::new();
        let mut examined = scan.range.clone();
        for (_, row) in found {
            if matches_all(filters, &row) {
                rows.push(row);
                if rows.len() >= want {
                    let k = e.p.key_of(index, &rows[rows.len() - 1]);
                    examined = scan.range.narrowed(&k, asc);
                    break;
                }
            }
        }
        self.record_range(&e, index, examined, filters);
        self.end(Ok(rows))
    }

    /// The primary-key probe is recorded as a read only when the insert fails: a new
    /// version holds the key for this transaction, and any other transaction that inserts it
    /// meets that version (or this one meets theirs) under the key lock and conflicts, so the
    /// absence it read cannot change before the commit (design §11).
    fn insert(&mut self, table: &Arc<Table>, row: Row) -> Result<()> {
        let e = self.entry(table)?;
        let pk = e.schema.encode_pk(&row);
        let r = self.insert_row(&e, &pk, &row);
        if r.is_err() {
            self.record_key(&e, &pk);
        }
        self.end(r)
    }

    /// Updates record the key read only when the update fails: a successful one holds the
    /// old version's `DTS` lock, so no other transaction can delete or replace the key's
    /// version before this one commits (design §11).
    fn update(
        &mut self,
        table: &Arc<Table>,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()> {
        let e = self.entry(table)?;
        let r = self.update_row(&e, pk, key, assignments);
        if r.is_err() {
            self.record_key(&e, pk);
        }
        self.end(r)
    }

    /// As for updates, the key read is recorded only when the delete fails.
    fn delete(&mut self, table: &Arc<Table>, pk: &[u8], key: &Value) -> Result<()> {
        let e = self.entry(table)?;
        let h = self.h.as_mut().ok_or_else(ended)?;
        let r = match h.get(&e.p, pk).map_err(|x| map_err(x, table.name())) {
            Ok(Some((r, _))) => h.delete(&e.p, r).map_err(|x| map_err(x, table.name())),
            Ok(None) => Err(Error::NotFound { table: table.name().to_owned(), key: key.clone() }),
            Err(x) => Err(x),
        };
        if r.is_err() {
            self.record_key(&e, pk);
        }
        self.end(r)
    }

    fn commit(mut self: Box<Self>, _mode: CommitMode) -> Result<u64> {
        // Deferred = durable: SOFORT's commit point is a single persisted line, so there is
        // nothing to batch and no dependency to track.
        let h = self.h.take().ok_or_else(ended)?;
        let reads = std::mem::take(&mut self.reads);
        h.commit_with(|h, c| {
            for rd in &reads {
                let (lo, hi) = rd.range.as_slices();
                let keep = |row: &[Value]| matches_all(&rd.filters, row);
                if h.range_changed(&rd.entry.p, rd.index, lo, hi, &keep, c)? {
                    return Err(SofortError::Conflict(format!(
                        "a concurrent commit changed what this transaction read in {:?}",
                        rd.entry.p.name()
                    )));
                }
            }
            Ok(())
        })
        .map_err(|e| map_err(e, ""))
    }

    fn abort(mut self: Box<Self>) {
        if let Some(h) = self.h.take() {
            h.abort();
        }
    }
}

/// The payload of a read record in a continuation log (§14), version 1: `u8` version, `u16`
/// index (`u16::MAX`: the primary key), the range's two bounds, `u16` filter count, per filter
/// `u16` column and two value bounds. A bound is `u8` tag (0 unbounded, 1 included, 2
/// excluded) and, unless unbounded, its bytes (`u32` length) or value (`u8` type: 0 i64, 1
/// f64, 2 bytes, 3 str; 8 bytes or `u32` length + bytes). Decoding checks every length, tag,
/// index and column: anything else is `Corrupted`, never a panic.
mod readrec {
    use std::ops::Bound;

    use crate::encoding::ByteRange;
    use crate::error::Error;
    use crate::query::Filter;
    use crate::schema::Table;
    use crate::value::Value;

    const VERSION: u8 = 1;

    pub(super) fn bad(what: String) -> Error {
        Error::Corrupted { what, at: "SOFORT read record".into() }
    }

    fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }

    fn put_value(out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::I64(x) => {
                out.push(0);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Value::F64(x) => {
                out.push(1);
                out.extend_from_slice(&x.to_bits().to_le_bytes());
            }
            Value::Bytes(b) => {
                out.push(2);
                put_bytes(out, b);
            }
            Value::Str(s) => {
                out.push(3);
                put_bytes(out, s.as_bytes());
            }
        }
    }

    fn put_bound<T>(out: &mut Vec<u8>, b: &Bound<T>, put: impl Fn(&mut Vec<u8>, &T)) {
        match b {
            Bound::Unbounded => out.push(0),
            Bound::Included(x) => {
                out.push(1);
                put(out, x);
            }
            Bound::Excluded(x) => {
                out.push(2);
                put(out, x);
            }
        }
    }

    pub(super) fn encode(index: Option<usize>, range: &ByteRange, filters: &[Filter]) -> Vec<u8> {
        let mut out = vec![VERSION];
        out.extend_from_slice(&(index.map_or(u16::MAX, |i| i as u16)).to_le_bytes());
        put_bound(&mut out, &range.lower, |o, b: &Vec<u8>| put_bytes(o, b));
        put_bound(&mut out, &range.upper, |o, b: &Vec<u8>| put_bytes(o, b));
        out.extend_from_slice(&(filters.len() as u16).to_le_bytes());
        for f in filters {
            out.extend_from_slice(&(f.column as u16).to_le_bytes());
            put_bound(&mut out, &f.lower, put_value);
            put_bound(&mut out, &f.upper, put_value);
        }
        out
    }

    struct Reader<'a>(&'a [u8]);

    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Result<&[u8], Error> {
            if self.0.len() < n {
                return Err(bad(format!("{} bytes left, {n} needed", self.0.len())));
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Ok(a)
        }
        fn u8(&mut self) -> Result<u8, Error> {
            Ok(self.take(1)?[0])
        }
        fn u16(&mut self) -> Result<u16, Error> {
            let b = self.take(2)?;
            Ok(u16::from_le_bytes([b[0], b[1]]))
        }
        fn u64(&mut self) -> Result<u64, Error> {
            let b = self.take(8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_le_bytes(a))
        }
        fn bytes(&mut self) -> Result<Vec<u8>, Error> {
            let b = self.take(4)?;
            let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            Ok(self.take(n)?.to_vec())
        }
        fn value(&mut self) -> Result<Value, Error> {
            Ok(match self.u8()? {
                0 => Value::I64(self.u64()? as i64),
                1 => Value::F64(f64::from_bits(self.u64()?)),
                2 => Value::Bytes(self.bytes()?),
                3 => Value::Str(
                    String::from_utf8(self.bytes()?)
                        .map_err(|_| bad("a string not UTF-8".into()))?,
                ),
                t => return Err(bad(format!("value type {t}"))),
            })
        }
        fn bound<T>(
            &mut self,
            get: impl Fn(&mut Self) -> Result<T, Error>,
        ) -> Result<Bound<T>, Error> {
            Ok(match self.u8()? {
                0 => Bound::Unbounded,
                1 => Bound::Included(get(self)?),
                2 => Bound::Excluded(get(self)?),
                t => return Err(bad(format!("bound tag {t}"))),
            })
        }
    }

    pub(super) type Decoded = (Option<usize>, ByteRange, Vec<Filter>);

    pub(super) fn decode(bytes: &[u8], table: &Table) -> Result<Decoded, Error> {
        let mut r = Reader(bytes);
        let v = r.u8()?;
        if v != VERSION {
            return Err(bad(format!("read record version {v}")));
        }
        let index = match r.u16()? {
            u16::MAX => None,
            i if usize::from(i) < table.indexes.len() => Some(usize::from(i)),
            i => return Err(bad(format!("index {i} of {:?}", table.name()))),
        };
        let lower = r.bound(Reader::bytes)?;
        let upper = r.bound(Reader::bytes)?;
        let n = r.u16()?;
        let mut filters = Vec::with_capacity(usize::from(n).min(64));
        for _ in 0..n {
            let column = usize::from(r.u16()?);
            if column >= table.arity() {
                return Err(bad(format!("column {column} of {:?}", table.name())));
            }
            let lower = r.bound(Reader::value)?;
            let upper = r.bound(Reader::value)?;
            filters.push(Filter { column, lower, upper });
        }
        if !r.0.is_empty() {
            return Err(bad(format!("{} bytes after the record", r.0.len())));
        }
        Ok((index, ByteRange { lower, upper }, filters))
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use super::readrec;
    use crate::encoding::ByteRange;
    use crate::query::Filter;
    use crate::schema::{Table, TableSchema};
    use crate::value::{Type, Value};

    fn table() -> Table {
        let s = TableSchema::new("t")
            .column("k", Type::I64)
            .column("v", Type::Str)
            .column("f", Type::F64)
            .column("b", Type::Bytes)
            .primary_key("k")
            .index("by_v", ["v"]);
        Table::new(s).unwrap()
    }

    /// Read records round-trip; every prefix of one, and seeded random bytes, decode to a
    /// typed error or a record, never a panic.
    #[test]
    fn read_records_round_trip_and_never_panic() {
        let t = table();
        let range = ByteRange { lower: Bound::Included(vec![1, 2]), upper: Bound::Unbounded };
        let filters = vec![
            Filter { column: 1, lower: Bound::Included(Value::from("a")), upper: Bound::Unbounded },
            Filter {
                column: 2,
                lower: Bound::Excluded(Value::F64(0.5)),
                upper: Bound::Included(Value::F64(2.0)),
            },
            Filter {
                column: 3,
                lower: Bound::Unbounded,
                upper: Bound::Excluded(Value::Bytes(vec![9])),
            },
            Filter { column: 0, lower: Bound::Included(Value::I64(-3)), upper: Bound::Unbounded },
        ];
        let bytes = readrec::encode(Some(0), &range, &filters);
        let (index, r, f) = readrec::decode(&bytes, &t).unwrap();
        assert_eq!((index, r.lower, r.upper), (Some(0), range.lower, range.upper));
        assert_eq!(format!("{f:?}"), format!("{filters:?}"));
        for n in 0..bytes.len() {
            assert!(readrec::decode(&bytes[..n], &t).is_err(), "prefix of {n} bytes");
        }
        let seed = ferrite_pmem::internals::testing::test_seed();
        eprintln!("seed {seed:#x}");
        let mut rng = ferrite_pmem::SplitMix64::new(seed);
        for _ in 0..20_000 {
            let mut b = bytes.clone();
            let i = rng.next_u64() as usize % b.len();
            b[i] = rng.next_u64() as u8;
            let _ = readrec::decode(&b, &t);
            let junk: Vec<u8> = (0..rng.next_u64() % 64).map(|_| rng.next_u64() as u8).collect();
            let _ = readrec::decode(&junk, &t);
        }
    }
}
