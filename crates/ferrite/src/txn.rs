//! Transactions: [`Transaction`] (read-write, serializable) and [`ReadTransaction`]
//! (read-only, snapshot), and the [`Read`] trait both implement, so that code that only reads
//! takes either.
//!
//! # Invariants
//! - Every operation checks its arguments against the schema first; a failed operation has no
//!   effect and the transaction stays usable, except after [`Error::Conflict`]: from then on
//!   every operation and `commit` return `Conflict` (this layer enforces it for every engine).
//! - A transaction sees its own earlier writes, in `get`, `select` and `scan` alike.
//! - Dropping a transaction that was not committed aborts it.
//!
//! # Ordering (durability)
//! [`Transaction::commit`] returns once the transaction is durable as the engine defines it
//! ([`crate::EngineKind::is_persistent`]; for the reference engine: committed in memory).
//! [`Transaction::commit_deferred`] may return once the transaction is committed and visible
//! but before it is durable; [`crate::Database::wait_durable`] waits for the ticket.
//!
//! # Concurrency
//! Transactions are `Send` but not `Sync`: one thread uses a transaction at a time. Whether a
//! thread may hold two transactions at once depends on the engine's
//! [`crate::Concurrency`] (never with `Block`).

use std::fmt;
use std::sync::Arc;

use crate::engine::{CommitMode, Engine, EngineTxn};
use crate::error::{Error, Result, SchemaError};
use crate::query::{AccessPath, Predicate, Projection, Scan, plan_select, project};
use crate::value::{Row, Value};

/// Proof that a transaction committed, to wait for its durability with
/// [`crate::Database::wait_durable`].
#[must_use = "a deferred commit is not known to be durable until the ticket is waited for"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommitTicket {
    pub(crate) db: u64,
    pub(crate) seq: u64,
}

impl CommitTicket {
    /// The commit's sequence number in its database (commit timestamps grow with commit order;
    /// a transaction that wrote nothing gets the number of the snapshot it read).
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}

/// The reads both kinds of transaction offer, so that code that only reads (a report, a check,
/// a benchmark's lookup) takes `&mut impl Read` or `&mut dyn Read` instead of matching on
/// [`Transaction`] and [`ReadTransaction`].
///
/// The inherent methods of both types are the same operations and take any key convertible
/// into a [`Value`]; this trait takes a [`Value`] so that it can be used as `dyn Read`. Import it
/// as `use ferrite::Read as _;` where it would clash with `std::io::Read`.
///
/// ```
/// use ferrite::{Database, EngineKind, Options, Read, Scan, TableSchema, Type, Value, row};
///
/// fn count(r: &mut dyn Read, table: &str) -> ferrite::Result<usize> {
///     Ok(r.scan(table, &Scan::primary())?.len())
/// }
///
/// // The in-memory reference engine ignores the path and writes nothing.
/// let db = Database::create("unused", Options::new().engine(EngineKind::Reference))?;
/// db.create_table(TableSchema::new("t").column("k", Type::I64).primary_key("k"))?;
/// let mut tx = db.begin()?;
/// tx.insert("t", row![1])?;
/// assert_eq!(count(&mut tx, "t")?, 1);          // a read-write transaction sees its insert
/// assert_eq!(count(&mut db.begin_read()?, "t")?, 0); // a snapshot does not
/// tx.commit()?;
/// let mut r = db.begin_read()?;
/// assert_eq!(Read::get(&mut r, "t", Value::I64(1))?, Some(row![1]));
/// # Ok::<(), ferrite::Error>(())
/// ```
pub trait Read {
    /// The row with primary key `key`, or `None`.
    fn get(&mut self, table: &str, key: Value) -> Result<Option<Row>>;

    /// The rows satisfying every predicate (a conjunction; none: every row), in primary-key
    /// order, with the projection's columns.
    fn select(
        &mut self,
        table: &str,
        predicates: &[Predicate],
        projection: &Projection,
    ) -> Result<Vec<Row>>;

    /// An ordered range scan over the primary key or an index (see [`Scan`]).
    fn scan(&mut self, table: &str, scan: &Scan) -> Result<Vec<Row>>;
}

macro_rules! impl_read {
    ($ty:ty) => {
        impl Read for $ty {
            fn get(&mut self, table: &str, key: Value) -> Result<Option<Row>> {
                self.core.get(table, key)
            }

            fn select(
                &mut self,
                table: &str,
                predicates: &[Predicate],
                projection: &Projection,
            ) -> Result<Vec<Row>> {
                self.core.select(table, predicates, projection)
            }

            fn scan(&mut self, table: &str, scan: &Scan) -> Result<Vec<Row>> {
                self.core.scan(table, scan)
            }
        }
    };
}

impl_read!(Transaction);
impl_read!(ReadTransaction);

/// What both kinds of transaction share.
struct Core {
    engine: Arc<dyn Engine>,
    txn: Box<dyn EngineTxn>,
    db: u64,
    /// Set by the first `Conflict`; the transaction is then doomed.
    doomed: Option<String>,
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("engine", &self.engine.kind())
            .field("txn", &self.txn)
            .field("doomed", &self.doomed)
            .finish()
    }
}

impl Core {
    fn live(&self) -> Result<()> {
        match &self.doomed {
            Some(reason) => Err(Error::conflict(reason.clone())),
            None => Ok(()),
        }
    }

    fn track<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(Error::Conflict { reason }) = &r {
            self.doomed = Some(reason.clone());
        }
        r
    }

    fn get(&mut self, table: &str, key: Value) -> Result<Option<Row>> {
        self.live()?;
        let t = self.engine.table(table)?;
        let pk = t.encode_pk_value(&key)?;
        let r = self.txn.get(&t, &pk);
        self.track(r)
    }

    fn select(
        &mut self,
        table: &str,
        predicates: &[Predicate],
        projection: &Projection,
    ) -> Result<Vec<Row>> {
        self.live()?;
        let t = self.engine.table(table)?;
        let plan = plan_select(&t, predicates)?;
        let positions = projection.resolve(&t)?;
        let r = self.txn.scan(&t, &plan.scan, &plan.filters);
        let mut rows = self.track(r)?;
        if matches!(plan.scan.path, AccessPath::Index(_)) {
            rows.sort_by(|a, b| t.pk_value(a).cmp(&t.pk_value(b)));
        }
        Ok(project(rows, positions.as_deref()))
    }

    fn scan(&mut self, table: &str, scan: &Scan) -> Result<Vec<Row>> {
        self.live()?;
        let t = self.engine.table(table)?;
        let lowered = scan.lower_for(&t)?;
        let positions = scan.projection_ref().resolve(&t)?;
        let r = self.txn.scan(&t, &lowered, &[]);
        Ok(project(self.track(r)?, positions.as_deref()))
    }
}

/// A read-write transaction: serializable, sees its own writes, aborted when dropped
/// uncommitted.
///
/// ```
/// use ferrite::{Database, EngineKind, Options, Predicate, Projection, Scan, TableSchema, Type, row};
/// // The in-memory reference engine ignores the path and writes nothing.
/// let db = Database::create("unused", Options::new().engine(EngineKind::Reference))?;
/// db.create_table(TableSchema::new("t").column("k", Type::I64).column("v", Type::Str).primary_key("k"))?;
/// let mut tx = db.begin()?;
/// tx.insert("t", row![1, "one"])?;
/// tx.insert("t", row![2, "two"])?;
/// tx.update("t", 2, [("v", "TWO")])?;
/// assert_eq!(tx.get("t", 2)?, Some(row![2, "TWO"]));          // sees its own writes
/// let desc = tx.scan("t", &Scan::primary().descending().limit(1))?;
/// assert_eq!(desc, vec![row![2, "TWO"]]);
/// let names = tx.select("t", &[Predicate::range("k", 1..=1)], &Projection::columns(["v"]))?;
/// assert_eq!(names, vec![row!["one"]]);
/// tx.commit()?;                                               // durable on return
/// # Ok::<(), ferrite::Error>(())
/// ```
#[must_use = "dropping a transaction aborts it"]
#[derive(Debug)]
pub struct Transaction {
    core: Core,
}

impl Transaction {
    pub(crate) fn new(engine: Arc<dyn Engine>, txn: Box<dyn EngineTxn>, db: u64) -> Self {
        Transaction { core: Core { engine, txn, db, doomed: None } }
    }

    /// The row with primary key `key`, or `None`.
    pub fn get(&mut self, table: &str, key: impl Into<Value>) -> Result<Option<Row>> {
        self.core.get(table, key.into())
    }

    /// The rows satisfying every predicate (a conjunction; none: every row), in primary-key
    /// order, with the projection's columns.
    pub fn select(
        &mut self,
        table: &str,
        predicates: &[Predicate],
        projection: &Projection,
    ) -> Result<Vec<Row>> {
        self.core.select(table, predicates, projection)
    }

    /// An ordered range scan over the primary key or an index (see [`Scan`]).
    pub fn scan(&mut self, table: &str, scan: &Scan) -> Result<Vec<Row>> {
        self.core.scan(table, scan)
    }

    /// Inserts a row (one value per column, in schema order).
    ///
    /// Errors: `Schema` (arity, types, unknown table), `DuplicateKey` (primary key or unique
    /// index, also when a concurrent transaction committed the key first).
    pub fn insert(&mut self, table: &str, row: Row) -> Result<()> {
        self.core.live()?;
        let t = self.core.engine.table(table)?;
        t.check_row(&row)?;
        let r = self.core.txn.insert(&t, row);
        self.core.track(r)
    }

    /// Sets columns of the row with primary key `key`:
    /// `tx.update("t", 7, [("balance", Value::from(10.5)), ("name", Value::from("x"))])`.
    ///
    /// Errors: `NotFound`, `Schema` (unknown column, type, `PrimaryKeyUpdate`), `DuplicateKey`
    /// (unique index).
    pub fn update<I, S, V>(
        &mut self,
        table: &str,
        key: impl Into<Value>,
        assignments: I,
    ) -> Result<()>
    where
        I: IntoIterator<Item = (S, V)>,
        S: AsRef<str>,
        V: Into<Value>,
    {
        self.core.live()?;
        let t = self.core.engine.table(table)?;
        let key = key.into();
        let pk = t.encode_pk_value(&key)?;
        let mut resolved = Vec::new();
        for (column, value) in assignments {
            let pos = t.column(column.as_ref())?;
            if pos == t.pk {
                return Err(SchemaError::PrimaryKeyUpdate {
                    table: t.name().to_owned(),
                    column: column.as_ref().to_owned(),
                }
                .into());
            }
            let value = value.into();
            t.check_value(pos, &value)?;
            resolved.push((pos, value));
        }
        let r = self.core.txn.update(&t, &pk, &key, &resolved);
        self.core.track(r)
    }

    /// Deletes the row with primary key `key`. Errors: `NotFound`, `Schema`.
    pub fn delete(&mut self, table: &str, key: impl Into<Value>) -> Result<()> {
        self.core.live()?;
        let t = self.core.engine.table(table)?;
        let key = key.into();
        let pk = t.encode_pk_value(&key)?;
        let r = self.core.txn.delete(&t, &pk, &key);
        self.core.track(r)
    }

    /// Commits and returns once the transaction is durable. On `Err` nothing was committed;
    /// `Conflict` and `Busy` are retryable. A step that fails **after** the commit point (an
    /// automatic checkpoint of the paged WAL or NVWAL, FASH's checkpoint, SOFORT's
    /// finalization) does not turn the commit into an `Err`: the transaction did commit, so
    /// `commit` returns `Ok`, logs the failure (`tracing`, level error) and poisons the
    /// database handle: later calls return `Poisoned`, and reopening finishes the step.
    pub fn commit(self) -> Result<()> {
        self.finish(CommitMode::Durable).map(drop)
    }

    /// Commits and returns once the transaction is committed (visible to later transactions,
    /// its outcome decided) but possibly before it is durable; wait for the ticket with
    /// [`crate::Database::wait_durable`]. Engines that do not batch commits return after
    /// durability, like [`Transaction::commit`].
    pub fn commit_deferred(self) -> Result<CommitTicket> {
        let db = self.core.db;
        self.finish(CommitMode::Deferred).map(|seq| CommitTicket { db, seq })
    }

    fn finish(self, mode: CommitMode) -> Result<u64> {
        let Core { txn, doomed, .. } = self.core;
        if let Some(reason) = doomed {
            txn.abort();
            return Err(Error::conflict(reason));
        }
        txn.commit(mode)
    }

    /// Rolls the transaction back (dropping it does the same).
    pub fn abort(self) {
        self.core.txn.abort();
    }
}

/// A read-only transaction: reads one consistent snapshot of committed data, which includes
/// every transaction whose commit returned before `begin_read` was called and nothing
/// uncommitted; it never conflicts. Dropping it ends it.
#[must_use = "a read transaction does nothing unless it is read from"]
#[derive(Debug)]
pub struct ReadTransaction {
    core: Core,
}

impl ReadTransaction {
    pub(crate) fn new(engine: Arc<dyn Engine>, txn: Box<dyn EngineTxn>, db: u64) -> Self {
        ReadTransaction { core: Core { engine, txn, db, doomed: None } }
    }

    /// The row with primary key `key`, or `None`.
    pub fn get(&mut self, table: &str, key: impl Into<Value>) -> Result<Option<Row>> {
        self.core.get(table, key.into())
    }

    /// The rows satisfying every predicate, in primary-key order, with the projection's
    /// columns.
    pub fn select(
        &mut self,
        table: &str,
        predicates: &[Predicate],
        projection: &Projection,
    ) -> Result<Vec<Row>> {
        self.core.select(table, predicates, projection)
    }

    /// An ordered range scan over the primary key or an index (see [`Scan`]).
    pub fn scan(&mut self, table: &str, scan: &Scan) -> Result<Vec<Row>> {
        self.core.scan(table, scan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::EngineKind;
    use crate::query::{Filter, LoweredScan};
    use crate::schema::{Table, TableSchema};
    use crate::value::Type;

    /// An engine whose every read conflicts, to test that `Conflict` dooms a transaction.
    #[derive(Debug)]
    struct Conflicting(Arc<Table>);

    #[derive(Debug)]
    struct ConflictingTxn {
        committed: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Engine for Conflicting {
        fn kind(&self) -> EngineKind {
            EngineKind::Reference
        }
        fn create_table(&self, _: crate::schema::Table) -> Result<()> {
            Ok(())
        }
        fn table(&self, _: &str) -> Result<Arc<Table>> {
            Ok(Arc::clone(&self.0))
        }
        fn table_names(&self) -> Result<Vec<String>> {
            Ok(vec![])
        }
        fn begin(&self) -> Result<Box<dyn EngineTxn>> {
            Err(Error::Busy("unused".into()))
        }
        fn begin_read(&self) -> Result<Box<dyn EngineTxn>> {
            Err(Error::Busy("unused".into()))
        }
        fn wait_durable(&self, _: u64) -> Result<()> {
            Ok(())
        }
        fn close(&self) -> Result<()> {
            Ok(())
        }
        fn check(&self) -> Result<String> {
            Ok("test engine: nothing stored".into())
        }
    }

    impl EngineTxn for ConflictingTxn {
        fn get(&mut self, _: &Arc<Table>, _: &[u8]) -> Result<Option<Row>> {
            Err(Error::conflict("test"))
        }
        fn scan(&mut self, _: &Arc<Table>, _: &LoweredScan, _: &[Filter]) -> Result<Vec<Row>> {
            Ok(vec![])
        }
        fn insert(&mut self, _: &Arc<Table>, _: Row) -> Result<()> {
            Ok(())
        }
        fn update(
            &mut self,
            _: &Arc<Table>,
            _: &[u8],
            _: &Value,
            _: &[(usize, Value)],
        ) -> Result<()> {
            Ok(())
        }
        fn delete(&mut self, _: &Arc<Table>, _: &[u8], _: &Value) -> Result<()> {
            Ok(())
        }
        fn commit(self: Box<Self>, _: CommitMode) -> Result<u64> {
            self.committed.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(1)
        }
        fn abort(self: Box<Self>) {}
    }

    #[test]
    fn conflict_dooms_the_transaction() {
        let schema = TableSchema::new("t").column("k", Type::I64).primary_key("k");
        let engine = Arc::new(Conflicting(Arc::new(Table::new(schema).expect("valid"))));
        let committed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let txn = Box::new(ConflictingTxn { committed: Arc::clone(&committed) });
        let mut tx = Transaction::new(engine, txn, 1);
        assert!(matches!(tx.get("t", 1), Err(Error::Conflict { .. })));
        // Every later operation and the commit report the conflict; nothing reaches the engine.
        assert!(matches!(tx.scan("t", &Scan::primary()), Err(Error::Conflict { .. })));
        assert!(matches!(tx.insert("t", vec![Value::I64(1)]), Err(Error::Conflict { .. })));
        assert!(matches!(tx.commit(), Err(Error::Conflict { .. })));
        assert!(!committed.load(std::sync::atomic::Ordering::Relaxed));
    }
}
