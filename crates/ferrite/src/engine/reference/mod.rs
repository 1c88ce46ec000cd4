//! The reference engine: in memory, **not persistent**, serializable. It is the oracle the
//! conformance suite and the model tests compare against and the first engine the benchmark
//! harness runs; it keeps nothing on disk and nothing survives the process.
//!
//! Design: one `BTreeMap` per table from encoded primary key to a *version chain*, one
//! `BTreeMap` per secondary index from index entry (encoded index columns, then encoded primary
//! key) to encoded primary key. Every commit gets a timestamp; a transaction reads the snapshot
//! of the last commit before it began. Read-write transactions buffer their writes, record what
//! they read (keys, and the key ranges of scans, so that phantoms are seen), and validate at
//! commit (optimistic concurrency control, backward validation).
//!
//! # Invariants
//! - R1: a chain's versions have strictly increasing timestamps, each `<= last_ts`; a version
//!   holds a row or a tombstone. The row a transaction with snapshot `s` sees is the newest
//!   version with `ts <= s` (absent if none, or a tombstone).
//! - R2: for every retained live version of a row and every index, the index holds that row's
//!   entry; it may also hold entries of versions no longer retained only until garbage collection
//!   of that chain (readers check an entry against the version they see, so stale entries are
//!   skipped).
//! - R3: garbage collection of a chain keeps its newest version and, for every open
//!   transaction's snapshot, the version that snapshot sees (a tombstone with nothing older kept
//!   is dropped: seeing nothing is seeing a tombstone). So a chain holds at most one version per
//!   open snapshot plus one. Chains are collected when a commit writes them; a chain nobody
//!   writes again keeps what it held at its last write.
//! - R4 (serializability, V1 of [`crate::engine::common::validate`]): a read-write transaction commits at timestamp `c` only if nothing it
//!   read changed between its snapshot `s` and `c`: no key it read or wrote, and no key inside a
//!   range it scanned (primary or index; an index entry counts as changed when its row's chain
//!   has a version newer than `s`), has a version in `(s, c)`. Its reads then equal what it
//!   would read at `c`, so committed read-write transactions are equivalent to running serially
//!   in commit order. First committer wins: the transaction that validates later aborts with
//!   `Conflict`.
//! - R5: read-only transactions (and read-write ones that wrote nothing) skip validation: they
//!   are serialized at their snapshot, which is a prefix of the commit order.
//! - R6 (U1/U2 of [`crate::engine::common::unique`]): primary-key and unique-index uniqueness is checked at each write against the
//!   transaction's view, and again at commit against the latest committed data (so a concurrent
//!   committer that took the key makes this commit fail with `DuplicateKey`). This check runs
//!   even when validation is switched off: it is a constraint, not isolation.
//!
//! # Ordering (durability)
//! None: this engine is volatile. A commit is "durable" once it is applied under the data lock,
//! which is also when it becomes visible; `commit` and `commit_deferred` behave the same and
//! `wait_durable` returns at once.
//!
//! # Concurrency
//! Lock order: catalog, then data, then the snapshot registry; no thread holds the data lock
//! across calls. Reads take the data lock shared for one operation; commits take it exclusively
//! for validation and apply. No transaction ever waits for another transaction, so one thread
//! may drive several transactions step by step (the conformance suite's interleavings).
//! Validation can be switched off (`internals::ReferenceConfig`, set in `Options`) to build a
//! deliberately broken engine that the suite must catch.
//!
//! # Layout
//! The serializable machinery (write buffer overlaid on reads and scans, read set, backward
//! validation, uniqueness checks, index diffs) is the engine-independent code of
//! [`crate::engine::common`]; this engine supplies its committed data through
//! [`store::View`] (an implementation of [`crate::engine::common::Committed`]) and keeps in
//! [`store`] what is its own: version chains, index maps, apply and garbage collection.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::engine::api::{CommitMode, Engine, EngineTxn};
use crate::engine::common::txn::TxnState;
use crate::error::{Error, Result, SchemaError};
use crate::options::{EngineKind, Options, ReferenceConfig};
use crate::query::{Filter, LoweredScan};
use crate::schema::Table;
use crate::value::{Row, Value};

mod store;

use store::{Data, TableData, View};

/// Builds the engine for the registry: a new, empty engine on `create`; `open` fails, since
/// nothing was kept.
pub(crate) fn build(path: &Path, options: &Options, create: bool) -> Result<Arc<dyn Engine>> {
    if create {
        Ok(Arc::new(Reference::new(options.reference_config())))
    } else {
        Err(Error::Unsupported(format!(
            "the reference engine keeps nothing on disk, so there is no database at {} to \
             open; create a new one",
            path.display()
        )))
    }
}

/// The reference engine.
pub(crate) struct Reference {
    shared: Arc<Shared>,
}

impl fmt::Debug for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reference").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

struct Shared {
    config: ReferenceConfig,
    catalog: RwLock<BTreeMap<String, Arc<Table>>>,
    data: RwLock<Data>,
    /// Start timestamps of open transactions, with multiplicity (R3).
    snapshots: Mutex<BTreeMap<u64, usize>>,
}

fn read<T>(lock: &RwLock<T>) -> Result<RwLockReadGuard<'_, T>> {
    lock.read().map_err(|_| Error::Poisoned)
}

fn write<T>(lock: &RwLock<T>) -> Result<RwLockWriteGuard<'_, T>> {
    lock.write().map_err(|_| Error::Poisoned)
}

fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    m.lock().map_err(|_| Error::Poisoned)
}

impl Shared {
    fn release(&self, start_ts: u64) {
        // A poisoned registry only leaves an entry behind: garbage is then kept longer.
        if let Ok(mut snaps) = self.snapshots.lock()
            && let Some(n) = snaps.get_mut(&start_ts)
        {
            *n -= 1;
            if *n == 0 {
                snaps.remove(&start_ts);
            }
        }
    }
}

impl Reference {
    /// A new, empty engine.
    pub(crate) fn new(config: ReferenceConfig) -> Self {
        Reference {
            shared: Arc::new(Shared {
                config,
                catalog: RwLock::new(BTreeMap::new()),
                data: RwLock::new(Data::default()),
                snapshots: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    fn start(&self, read_only: bool) -> Result<Box<dyn EngineTxn>> {
        let data = read(&self.shared.data)?;
        let start_ts = data.last_ts;
        // Registered while the data lock is held, so no commit can collect garbage this
        // snapshot needs between reading `last_ts` and registering (R3).
        *lock(&self.shared.snapshots)?.entry(start_ts).or_insert(0) += 1;
        drop(data);
        Ok(Box::new(RefTxn {
            shared: Arc::clone(&self.shared),
            state: TxnState::new(start_ts, read_only),
            finished: false,
        }))
    }
}

impl Engine for Reference {
    fn kind(&self) -> EngineKind {
        EngineKind::Reference
    }

    fn create_table(&self, table: Table) -> Result<()> {
        let mut catalog = write(&self.shared.catalog)?;
        let name = table.name().to_owned();
        if catalog.contains_key(&name) {
            return Err(SchemaError::TableExists(name).into());
        }
        write(&self.shared.data)?.tables.insert(name.clone(), TableData::new(&table));
        catalog.insert(name, Arc::new(table));
        Ok(())
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        read(&self.shared.catalog)?
            .get(name)
            .cloned()
            .ok_or_else(|| SchemaError::UnknownTable(name.to_owned()).into())
    }

    fn table_names(&self) -> Result<Vec<String>> {
        Ok(read(&self.shared.catalog)?.keys().cloned().collect())
    }

    fn begin(&self) -> Result<Box<dyn EngineTxn>> {
        self.start(false)
    }

    fn begin_read(&self) -> Result<Box<dyn EngineTxn>> {
        self.start(true)
    }

    fn wait_durable(&self, seq: u64) -> Result<()> {
        let last = read(&self.shared.data)?.last_ts;
        if seq <= last {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "commit ticket {seq} was never issued (last {last})"
            )))
        }
    }

    fn close(&self) -> Result<()> {
        // Nothing to flush; surface a poisoned state as an error.
        read(&self.shared.data).map(drop)
    }

    fn check(&self) -> Result<String> {
        read(&self.shared.data).map(drop)?;
        Ok("reference: in memory, nothing stored to check".into())
    }
}

/// A transaction: the lifted state ([`TxnState`]) plus this engine's snapshot registration.
struct RefTxn {
    shared: Arc<Shared>,
    state: TxnState,
    finished: bool,
}

impl fmt::Debug for RefTxn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefTxn")
            .field("start_ts", &self.state.snapshot)
            .field("read_only", &self.state.read_only)
            .field("reads", &self.state.reads.len())
            .field("writes", &self.state.writes.len())
            .finish()
    }
}

impl Drop for RefTxn {
    fn drop(&mut self) {
        self.finish();
    }
}

impl RefTxn {
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.shared.release(self.state.snapshot);
        }
    }
}

impl EngineTxn for RefTxn {
    fn get(&mut self, table: &Arc<Table>, pk: &[u8]) -> Result<Option<Row>> {
        let data = read(&self.shared.data)?;
        self.state.get(&View { data: &data }, table, pk)
    }

    fn scan(
        &mut self,
        table: &Arc<Table>,
        scan: &LoweredScan,
        filters: &[Filter],
    ) -> Result<Vec<Row>> {
        let data = read(&self.shared.data)?;
        self.state.scan(&View { data: &data }, table, scan, filters)
    }

    fn insert(&mut self, table: &Arc<Table>, row: Row) -> Result<()> {
        let data = read(&self.shared.data)?;
        self.state.insert(&View { data: &data }, table, row)
    }

    fn update(
        &mut self,
        table: &Arc<Table>,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()> {
        let data = read(&self.shared.data)?;
        self.state.update(&View { data: &data }, table, pk, key, assignments)
    }

    fn delete(&mut self, table: &Arc<Table>, pk: &[u8], key: &Value) -> Result<()> {
        let data = read(&self.shared.data)?;
        self.state.delete(&View { data: &data }, table, pk, key)
    }

    fn commit(mut self: Box<Self>, _mode: CommitMode) -> Result<u64> {
        if self.state.wrote_nothing() {
            // R5: serialized at the snapshot.
            self.finish();
            return Ok(self.state.snapshot);
        }
        let shared = Arc::clone(&self.shared);
        // Checks and apply are one critical section under the exclusive data lock (V3).
        let mut data = write(&shared.data)?;
        let checked = self.state.check_commit(&View { data: &data }, shared.config.validation);
        if let Err(e) = checked {
            self.finish();
            return Err(e);
        }
        let ts = data.last_ts + 1;
        data.apply(&self.state.writes, ts)?;
        data.last_ts = ts;
        self.finish();
        let active: Vec<u64> = lock(&shared.snapshots)?.keys().copied().collect();
        data.collect_garbage(&self.state.writes, &active);
        Ok(ts)
    }

    fn abort(mut self: Box<Self>) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TableSchema;
    use crate::value::Type;

    fn engine() -> (Reference, Arc<Table>) {
        let e = Reference::new(ReferenceConfig::default());
        let schema = TableSchema::new("t")
            .column("k", Type::I64)
            .column("v", Type::I64)
            .primary_key("k")
            .index("by_v", ["v"]);
        e.create_table(Table::new(schema).expect("valid")).expect("create");
        let t = e.table("t").expect("table");
        (e, t)
    }

    fn versions(e: &Reference) -> (usize, usize) {
        let data = e.shared.data.read().expect("lock");
        let td = data.tables.get("t").expect("t");
        let n: usize = td.rows.values().map(Vec::len).sum();
        (n, td.indexes.iter().map(BTreeMap::len).sum())
    }

    #[test]
    fn garbage_is_collected_when_no_snapshot_needs_it() {
        let (e, t) = engine();
        let pk = t.encode_pk(&[Value::I64(1), Value::I64(0)]);
        let mut tx = e.begin().expect("begin");
        tx.insert(&t, vec![Value::I64(1), Value::I64(0)]).expect("insert");
        tx.commit(CommitMode::Durable).expect("commit");
        let reader = e.begin_read().expect("reader");
        for v in 1..5 {
            let mut tx = e.begin().expect("begin");
            tx.update(&t, &pk, &Value::I64(1), &[(1, Value::I64(v))]).expect("update");
            tx.commit(CommitMode::Durable).expect("commit");
        }
        // The reader pins version 1; the newest version is kept too.
        assert_eq!(versions(&e), (2, 2));
        drop(reader);
        let mut tx = e.begin().expect("begin");
        tx.delete(&t, &pk, &Value::I64(1)).expect("delete");
        tx.commit(CommitMode::Durable).expect("commit");
        assert_eq!(versions(&e), (0, 0));
    }

    #[test]
    fn switched_off_validation_lets_conflicting_writers_through() {
        // The knob the broken-engine self-test relies on, reached through `Options`.
        for validation in [true, false] {
            let options = Options::new().with_reference(ReferenceConfig { validation });
            let e = build(Path::new("unused"), &options, true).expect("build");
            let schema = TableSchema::new("t").column("k", Type::I64).primary_key("k");
            e.create_table(Table::new(schema).expect("valid")).expect("create");
            let t = e.table("t").expect("table");
            let pk = t.encode_pk(&[Value::I64(1)]);
            let mut setup = e.begin().expect("setup");
            setup.insert(&t, vec![Value::I64(1)]).expect("insert");
            setup.commit(CommitMode::Durable).expect("setup commits");
            let mut c = e.begin().expect("c");
            let mut d = e.begin().expect("d");
            c.delete(&t, &pk, &Value::I64(1)).expect("c deletes");
            d.delete(&t, &pk, &Value::I64(1)).expect("d deletes");
            c.commit(CommitMode::Durable).expect("c commits");
            let second = d.commit(CommitMode::Durable);
            assert_eq!(second.is_ok(), !validation, "validation {validation}: {second:?}");
        }
        assert!(build(Path::new("unused"), &Options::new(), false).is_err());
    }
}
