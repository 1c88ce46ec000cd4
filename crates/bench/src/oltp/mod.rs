//! Typed OLTP workloads (TPC-B, TATP and TPC-C) on every engine, each through its native
//! interface.
//!
//! # The layer
//! A workload declares a [`Schema`]: tables ([`TableDef`]) of typed columns (`i64`, `f64`,
//! `str`, `bytes`; no NULL), a primary key of one or more non-negative `i64` columns, each
//! with a declared bit width (the widths add up to at most 63 bits), and secondary indexes
//! over any columns. Rows are `Vec<ferrite::Value>` in column order. Transactions run through
//! [`OltpSession::run`] against [`OltpOps`]: `get`/`update`/`add`/`delete` by primary key,
//! `insert`, and `scan` of a [`Range`] (an equality prefix of the primary key or of an index,
//! then an optional range on the next column, ascending or descending, with a limit). That
//! covers TPC-B, TATP (subscriber by `sub_nbr`, the 1–4 rows per subscriber) and TPC-C
//! (composite keys, customer by last name, the newest order of a customer, the oldest
//! new-order of a district, the order lines of 20 orders).
//!
//! Each engine runs the schema natively ([`open`]):
//! - **Ferrite** (every [`ferrite::EngineKind`]): one table per table; a one-column key is the
//!   primary key itself, a composite key is packed into a leading `i64` column `pk_`
//!   (the public API has one-column primary keys); indexes are the API's indexes; `add` is a
//!   `get` then an `update`.
//! - **SQLite**: `CREATE TABLE … (…, PRIMARY KEY (…)) WITHOUT ROWID` with the real composite
//!   key, `CREATE [UNIQUE] INDEX` per index, one prepared (cached) statement per operation
//!   shape, `add` as one `UPDATE … SET c = c + ?  … RETURNING c`; explicit transactions of
//!   `ferrite_baselines::sqlite` (`BEGIN IMMEDIATE` for writers).
//! - **LMDB**, a key-value mapping: one LMDB database per table, keyed by the packed primary
//!   key (`MDB_INTEGERKEY`), the value is the whole row in a small self-describing encoding
//!   ([`lmdb`]); a primary-key range is a range of packed keys. A unique index on one `i64`
//!   column (TATP's `sub_nbr`) is a second database from the column's value to the packed
//!   primary key; other indexes are not mapped (a schema with one is refused at open).
//! - PMDK runs none of these workloads ([`supports`]).
//!
//! # Invariants
//! - Packing is order-preserving: for keys of one table, packed order is key-tuple order, and
//!   an equality prefix plus a range on the next column is one interval of packed keys. A key
//!   component outside `0 .. 2^bits` is an error, never a silent wrap.
//! - A failed operation returns `Err`; the runner retries the whole transaction only for
//!   [`OpError::Retryable`]. A workload's expected, specified failures (TATP's) are not errors:
//!   the transaction commits and the worker counts them apart.
//! - Loading runs through a session of its own, dropped before timing; checks run after every
//!   worker has stopped.
//!
//! # Concurrency
//! A subject is shared by the worker threads; each thread opens its own session (a SQLite
//! connection, an LMDB reader handle). Engines serialize or validate concurrent transactions
//! themselves; conflicts surface as retryable errors.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use ferrite::Value;

use crate::subject::{EngineId, OpError, SubjectInfo, SubjectSetup, TxnKind};
use crate::workload::{Check, Instance, PointWorkload, Thread, WorkerReport};

mod ferrite_db;
pub mod lmdb;
mod sqlite;
pub mod tatp;
pub mod tpcb;
pub mod tpcc;

pub use tpcb::TpcbScale;
pub use tpcc::TpccScale;

/// A row: one value per column, in column order.
pub type Row = Vec<Value>;

/// Table number (position in the schema).
pub type TableId = usize;

/// Column type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    /// 64-bit signed integer.
    I64,
    /// 64-bit float.
    F64,
    /// UTF-8 string.
    Str,
    /// Byte string.
    Bytes,
}

impl ColType {
    fn ferrite(self) -> ferrite::Type {
        match self {
            ColType::I64 => ferrite::Type::I64,
            ColType::F64 => ferrite::Type::F64,
            ColType::Str => ferrite::Type::Str,
            ColType::Bytes => ferrite::Type::Bytes,
        }
    }

    fn matches(self, v: &Value) -> bool {
        matches!(
            (self, v),
            (ColType::I64, Value::I64(_))
                | (ColType::F64, Value::F64(_))
                | (ColType::Str, Value::Str(_))
                | (ColType::Bytes, Value::Bytes(_))
        )
    }
}

/// A column.
#[derive(Clone, Debug)]
pub struct Column {
    /// Name (an identifier).
    pub name: &'static str,
    /// Type.
    pub ty: ColType,
}

/// A secondary index.
#[derive(Clone, Debug)]
pub struct IndexDef {
    /// Name (an identifier, unique in the schema).
    pub name: &'static str,
    /// Column positions, in index order.
    pub columns: Vec<usize>,
    /// Whether the tuple of its columns is unique.
    pub unique: bool,
}

/// A table: columns, the primary key (columns and bit widths), secondary indexes.
#[derive(Clone, Debug)]
pub struct TableDef {
    /// Name (an identifier).
    pub name: &'static str,
    /// Columns, in row order.
    pub columns: Vec<Column>,
    /// Primary-key column positions, in key order (each `i64`).
    pub key: Vec<usize>,
    /// Bits of each key component (same length as `key`; at most 63 in all).
    pub key_bits: Vec<u32>,
    /// Secondary indexes.
    pub indexes: Vec<IndexDef>,
    pending_key: Vec<(&'static str, u32)>,
    pending_indexes: Vec<(&'static str, Vec<&'static str>, bool)>,
}

impl TableDef {
    /// A table with no columns yet.
    pub fn new(name: &'static str) -> Self {
        TableDef {
            name,
            columns: Vec::new(),
            key: Vec::new(),
            key_bits: Vec::new(),
            indexes: Vec::new(),
            pending_key: Vec::new(),
            pending_indexes: Vec::new(),
        }
    }

    /// Adds a column.
    pub fn column(mut self, name: &'static str, ty: ColType) -> Self {
        self.columns.push(Column { name, ty });
        self
    }

    /// Sets the primary key: `(column, bits)` in key order.
    pub fn key(mut self, parts: &[(&'static str, u32)]) -> Self {
        self.pending_key = parts.to_vec();
        self
    }

    /// Adds a secondary index.
    pub fn index(mut self, name: &'static str, columns: &[&'static str], unique: bool) -> Self {
        self.pending_indexes.push((name, columns.to_vec(), unique));
        self
    }

    /// Position of column `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    fn resolve(mut self) -> Result<TableDef, String> {
        check_ident(self.name)?;
        for (i, c) in self.columns.iter().enumerate() {
            check_ident(c.name)?;
            if self.columns[..i].iter().any(|d| d.name == c.name) || c.name == ferrite_db::PK {
                return Err(format!("{}: column {} twice or reserved", self.name, c.name));
            }
        }
        if self.pending_key.is_empty() {
            return Err(format!("{}: no primary key", self.name));
        }
        for &(col, bits) in &self.pending_key {
            let pos =
                self.position(col).ok_or_else(|| format!("{}: no column {col}", self.name))?;
            if self.columns[pos].ty != ColType::I64 || bits == 0 || self.key.contains(&pos) {
                return Err(format!("{}: key column {col} must be i64, once, bits > 0", self.name));
            }
            self.key.push(pos);
            self.key_bits.push(bits);
        }
        if self.key_bits.iter().sum::<u32>() > 63 {
            return Err(format!("{}: key wider than 63 bits", self.name));
        }
        for (name, cols, unique) in std::mem::take(&mut self.pending_indexes) {
            check_ident(name)?;
            let columns = cols
                .iter()
                .map(|c| self.position(c).ok_or_else(|| format!("{}: no column {c}", self.name)))
                .collect::<Result<Vec<_>, _>>()?;
            if columns.is_empty() {
                return Err(format!("{}: index {name} has no column", self.name));
            }
            self.indexes.push(IndexDef { name, columns, unique });
        }
        self.pending_key.clear();
        Ok(self)
    }

    fn total_bits(&self) -> u32 {
        self.key_bits.iter().sum()
    }

    /// Shift of key component `i` in the packed key.
    fn shift(&self, i: usize) -> u32 {
        self.total_bits() - self.key_bits[..=i].iter().sum::<u32>()
    }

    fn component(&self, i: usize, v: i64) -> Result<u64, OpError> {
        let bits = self.key_bits[i];
        u64::try_from(v).ok().filter(|&u| u < 1u64 << bits).ok_or_else(|| {
            OpError::Engine(format!(
                "{}: key column {} = {v} is outside 0..2^{bits}",
                self.name, self.columns[self.key[i]].name
            ))
        })
    }

    /// The packed primary key of `key` (one value per key column).
    pub fn pack(&self, key: &[i64]) -> Result<u64, OpError> {
        if key.len() != self.key.len() {
            return Err(OpError::Engine(format!(
                "{}: key of {} values, expected {}",
                self.name,
                key.len(),
                self.key.len()
            )));
        }
        let mut packed = 0u64;
        for (i, &v) in key.iter().enumerate() {
            packed |= self.component(i, v)? << self.shift(i);
        }
        Ok(packed)
    }

    /// The packed primary key of `row`.
    pub fn row_key(&self, row: &[Value]) -> Result<u64, OpError> {
        let mut key = [0i64; 8];
        if self.key.len() > key.len() {
            return Err(OpError::Engine(format!("{}: more than 8 key columns", self.name)));
        }
        for (slot, &pos) in key.iter_mut().zip(&self.key) {
            *slot = row.get(pos).and_then(Value::as_i64).ok_or_else(|| {
                OpError::Engine(format!("{}: key column {pos} is not an i64", self.name))
            })?;
        }
        self.pack(&key[..self.key.len()])
    }

    /// The packed keys `[start, end)` of a primary-key [`Range`]; `None` if it is empty.
    pub fn pack_range(&self, range: &Range) -> Result<Option<(u64, u64)>, OpError> {
        let n = range.eq.len();
        if n > self.key.len() || (n == self.key.len() && range.has_bounds()) {
            return Err(OpError::Engine(format!("{}: range longer than the key", self.name)));
        }
        let mut base = 0u64;
        for (i, v) in range.eq.iter().enumerate() {
            let v = v.as_i64().ok_or_else(|| OpError::Engine("key value not i64".into()))?;
            base |= self.component(i, v)? << self.shift(i);
        }
        // The prefix covers `base .. base + span`.
        let span = if n == 0 { 1u64 << self.total_bits() } else { 1u64 << self.shift(n - 1) };
        if n == self.key.len() {
            return Ok(Some((base, base + 1)));
        }
        let (shift, limit) = (self.shift(n), 1i128 << self.key_bits[n]);
        let bound = |b: &Bound<Value>, lower: bool| -> Result<i128, OpError> {
            let get = |v: &Value| {
                v.as_i64().map(i128::from).ok_or_else(|| OpError::Engine("bound not i64".into()))
            };
            Ok(match (b, lower) {
                (Bound::Unbounded, true) => 0,
                (Bound::Unbounded, false) => limit,
                (Bound::Included(v), true) | (Bound::Excluded(v), false) => get(v)?,
                (Bound::Excluded(v), true) | (Bound::Included(v), false) => get(v)? + 1,
            }
            .clamp(0, limit))
        };
        let (lo, hi) = (bound(&range.lo, true)?, bound(&range.hi, false)?);
        if lo >= hi {
            return Ok(None);
        }
        let at = |c: i128| if c == limit { base + span } else { base | ((c as u64) << shift) };
        Ok(Some((at(lo), at(hi))))
    }

    /// Checks that `row` has this table's arity and column types.
    pub fn check_row(&self, row: &[Value]) -> Result<(), OpError> {
        if row.len() != self.columns.len()
            || !self.columns.iter().zip(row).all(|(c, v)| c.ty.matches(v))
        {
            return Err(OpError::Engine(format!("{}: row does not fit the schema", self.name)));
        }
        Ok(())
    }
}

fn check_ident(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 48;
    if ok { Ok(()) } else { Err(format!("{name:?} is not an identifier")) }
}

/// A workload's tables, in [`TableId`] order.
#[derive(Clone, Debug)]
pub struct Schema {
    /// The tables.
    pub tables: Vec<TableDef>,
}

impl Schema {
    /// Resolves and checks the tables (names, key columns and widths, index columns).
    pub fn new(tables: Vec<TableDef>) -> Result<Schema, OpError> {
        let tables = tables
            .into_iter()
            .map(TableDef::resolve)
            .collect::<Result<Vec<_>, _>>()
            .map_err(OpError::Engine)?;
        let mut names: Vec<&str> = tables.iter().map(|t| t.name).collect();
        names.extend(tables.iter().flat_map(|t| t.indexes.iter().map(|i| i.name)));
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        if names.len() != n {
            return Err(OpError::Engine("table and index names must be distinct".into()));
        }
        Ok(Schema { tables })
    }

    /// Table `t`.
    pub fn table(&self, t: TableId) -> Result<&TableDef, OpError> {
        self.tables.get(t).ok_or_else(|| OpError::Engine(format!("no table #{t}")))
    }
}

/// What a scan reads: an equality prefix of the primary key (`index: None`) or of an index,
/// then an optional range on the next column, in order, up to a limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Range {
    /// The index (position in the table's indexes), or `None` for the primary key.
    pub index: Option<usize>,
    /// Values of the first columns.
    pub eq: Vec<Value>,
    /// Lower bound on the next column.
    pub lo: Bound<Value>,
    /// Upper bound on the next column.
    pub hi: Bound<Value>,
    /// Largest first.
    pub descending: bool,
    /// At most this many rows.
    pub limit: Option<usize>,
}

impl Range {
    /// Every row, in primary-key order.
    pub fn all() -> Range {
        Range::primary(Vec::new())
    }

    /// Rows whose primary key starts with `eq`.
    pub fn primary(eq: Vec<Value>) -> Range {
        Range {
            index: None,
            eq,
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
            descending: false,
            limit: None,
        }
    }

    /// Rows whose entry in index `index` starts with `eq`.
    pub fn index(index: usize, eq: Vec<Value>) -> Range {
        Range { index: Some(index), ..Range::primary(eq) }
    }

    /// Bounds on the column after the prefix.
    pub fn between(mut self, lo: Bound<Value>, hi: Bound<Value>) -> Range {
        self.lo = lo;
        self.hi = hi;
        self
    }

    /// Largest first.
    pub fn descending(mut self) -> Range {
        self.descending = true;
        self
    }

    /// At most `n` rows.
    pub fn limit(mut self, n: usize) -> Range {
        self.limit = Some(n);
        self
    }

    fn has_bounds(&self) -> bool {
        !matches!((&self.lo, &self.hi), (Bound::Unbounded, Bound::Unbounded))
    }
}

/// The operations inside one transaction.
pub trait OltpOps {
    /// Copies the row with primary key `key` into `row`; `false` if there is none.
    fn get(&mut self, t: TableId, key: &[i64], row: &mut Row) -> Result<bool, OpError>;
    /// Inserts; `false` (and no effect) if the primary key or a unique index value exists.
    fn insert(&mut self, t: TableId, row: Row) -> Result<bool, OpError>;
    /// Sets columns (never key columns) of the row `key`; `false` if there is none.
    fn update(&mut self, t: TableId, key: &[i64], set: &[(usize, Value)]) -> Result<bool, OpError>;
    /// Adds `delta` to the `i64` column `column` of row `key` and returns the new value;
    /// `None` if there is no such row.
    fn add(
        &mut self,
        t: TableId,
        key: &[i64],
        column: usize,
        delta: i64,
    ) -> Result<Option<i64>, OpError>;
    /// Deletes; `false` if there is no such row.
    fn delete(&mut self, t: TableId, key: &[i64]) -> Result<bool, OpError>;
    /// Visits the rows of `range` in order; returns how many.
    fn scan(
        &mut self,
        t: TableId,
        range: &Range,
        visit: &mut dyn FnMut(&[Value]),
    ) -> Result<usize, OpError>;
}

/// The body of a transaction.
pub type OltpBody<'b> = dyn FnMut(&mut dyn OltpOps) -> Result<(), OpError> + 'b;

/// One thread's connection.
pub trait OltpSession {
    /// Runs `body` in one transaction of `kind`: commits (durably, as the engine defines it)
    /// if it returns `Ok`, rolls back otherwise.
    fn run(&mut self, kind: TxnKind, body: &mut OltpBody<'_>) -> Result<(), OpError>;
}

/// An opened engine with a workload's schema.
pub trait OltpSubject: Send + Sync {
    /// What it is.
    fn info(&self) -> &SubjectInfo;
    /// A new session for the calling thread.
    fn session(&self) -> Result<Box<dyn OltpSession + '_>, OpError>;
    /// Called after loading, before warm-up and timing.
    fn before_timing(&self) -> Result<(), OpError> {
        Ok(())
    }
    /// The engine's own invariant check (Ferrite's `Database::check`), with no transaction
    /// open: `None` if the engine has none, else its one-line summary or the broken invariant.
    fn engine_check(&self) -> Option<Result<String, OpError>> {
        None
    }
    /// What the engine's `open` recovered and how long it took (Ferrite's
    /// `Database::recovery_report`): `None` for engines without one and for a fresh database.
    fn recovery_report(&self) -> Option<ferrite::RecoveryReport> {
        None
    }
}

/// Whether `engine` runs the OLTP workloads.
pub fn supports(engine: EngineId) -> bool {
    !matches!(engine, EngineId::Pmdk)
}

/// Opens a fresh instance of `engine` in `dir` (created) with `schema`.
pub fn open(
    engine: EngineId,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    match engine {
        EngineId::Ferrite(_)
        | EngineId::SofortPlaced(_)
        | EngineId::NvwalSynced(_)
        | EngineId::PagedFile(_) => {
            let options = engine
                .ferrite_options(setup)
                .ok_or_else(|| OpError::Engine(format!("{engine}: no options")))?;
            open_ferrite(options, dir, setup, schema)
        }
        EngineId::SqliteWalFull | EngineId::SqliteWalNormal | EngineId::SqliteJournalFull => {
            make_dir(dir)?;
            sqlite::open(engine, dir, setup, schema)
        }
        EngineId::Lmdb => {
            make_dir(dir)?;
            lmdb::open(dir, setup, schema)
        }
        EngineId::Pmdk => Err(OpError::Engine("PMDK runs no OLTP workload".into())),
    }
}

/// Opens the existing instance of a persistent Ferrite engine that [`open`] made in `dir`
/// (recovering it after a crash), checking that it holds `schema`'s tables. Other engines
/// and the in-memory reference engine are refused.
pub fn reopen(
    engine: EngineId,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    match engine {
        EngineId::Ferrite(_)
        | EngineId::SofortPlaced(_)
        | EngineId::NvwalSynced(_)
        | EngineId::PagedFile(_) => {
            let options = engine
                .ferrite_options(setup)
                .ok_or_else(|| OpError::Engine(format!("{engine}: no options")))?;
            reopen_ferrite(options, dir, setup, schema)
        }
        _ => Err(OpError::Engine(format!(
            "{engine}: only a persistent Ferrite engine can be reopened"
        ))),
    }
}

/// Creates a fresh Ferrite database in `dir` (created) with `schema`, opened with `options`
/// as they are (the engine among them): the restart benchmark's configurations.
pub fn open_ferrite(
    options: ferrite::Options,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    make_dir(dir)?;
    ferrite_db::open(options, dir, setup, schema)
}

fn make_dir(dir: &Path) -> Result<(), OpError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| OpError::Engine(format!("create {}: {e}", dir.display())))
}

/// Opens the database [`open_ferrite`] (or [`open`]) made in `dir` with `options` (recovering
/// it after a crash), checking that it holds `schema`'s tables.
pub fn reopen_ferrite(
    options: ferrite::Options,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    if !options.engine_kind().is_persistent() {
        return Err(OpError::Engine(format!(
            "{}: only a persistent Ferrite engine can be reopened",
            options.engine_kind()
        )));
    }
    ferrite_db::reopen(options, dir, setup, schema)
}

/// An OLTP workload for one point.
pub trait OltpWorkload: Send + Sync {
    /// The tables.
    fn schema(&self) -> &Arc<Schema>;
    /// Parameters as printed with results.
    fn params(&self) -> BTreeMap<String, String>;
    /// Transaction type names ([`OltpWorker::plan`] returns an index into them).
    fn txn_types(&self) -> Vec<&'static str>;
    /// Upper estimate of the bytes loaded.
    fn loaded_bytes(&self) -> u64;
    /// Operations per transaction, on average.
    fn ops_per_txn(&self) -> u64;
    /// Bytes one transaction adds at most, on average.
    fn bytes_per_txn(&self) -> u64;
    /// Loads the tables through a session of its own.
    fn load(&self, subject: &dyn OltpSubject) -> Result<(), OpError>;
    /// The worker of thread `index`.
    fn worker(&self, index: usize) -> Box<dyn OltpWorker + '_>;
    /// Checks the subject against what the workers report.
    fn check(
        &self,
        subject: &dyn OltpSubject,
        reports: &[WorkerReport],
    ) -> Result<Vec<Check>, OpError>;
}

/// One worker thread of an [`OltpWorkload`].
pub trait OltpWorker {
    /// Plans the next transaction; its type, or `None` when there is nothing left.
    fn plan(&mut self) -> Option<usize>;
    /// Executes the planned transaction once; returns its operations.
    fn execute(&mut self, session: &mut dyn OltpSession) -> Result<u64, OpError>;
    /// The planned transaction committed.
    fn committed(&mut self);
    /// What this worker committed.
    fn report(&self) -> WorkerReport;
}

/// An OLTP workload as the runner sees it.
pub fn point(w: Box<dyn OltpWorkload>) -> Box<dyn PointWorkload> {
    Box::new(OltpPoint(w))
}

struct OltpPoint(Box<dyn OltpWorkload>);

impl PointWorkload for OltpPoint {
    fn tables(&self) -> Vec<&'static str> {
        self.0.schema().tables.iter().map(|t| t.name).collect()
    }
    fn params(&self) -> BTreeMap<String, String> {
        self.0.params()
    }
    fn loaded_bytes(&self) -> u64 {
        self.0.loaded_bytes()
    }
    fn ops_per_txn(&self) -> u64 {
        self.0.ops_per_txn()
    }
    fn bytes_per_op(&self) -> u64 {
        self.0.bytes_per_txn() / self.0.ops_per_txn().max(1)
    }
    fn txn_types(&self) -> Vec<&'static str> {
        self.0.txn_types()
    }
    fn open(
        &self,
        engine: EngineId,
        dir: &Path,
        setup: &SubjectSetup,
    ) -> Result<Box<dyn Instance + '_>, OpError> {
        let subject = open(engine, dir, setup, self.0.schema())?;
        Ok(Box::new(OltpInstance { subject, workload: self.0.as_ref() }))
    }
}

struct OltpInstance<'w> {
    subject: Box<dyn OltpSubject>,
    workload: &'w dyn OltpWorkload,
}

impl Instance for OltpInstance<'_> {
    fn info(&self) -> &SubjectInfo {
        self.subject.info()
    }
    fn load(&self) -> Result<(), OpError> {
        self.workload.load(self.subject.as_ref())?;
        self.subject.before_timing()
    }
    fn thread(&self, index: usize) -> Result<Box<dyn Thread + '_>, OpError> {
        Ok(Box::new(OltpThread {
            session: self.subject.session()?,
            worker: self.workload.worker(index),
        }))
    }
    fn check(&self, reports: &[WorkerReport]) -> Result<Vec<Check>, OpError> {
        self.workload.check(self.subject.as_ref(), reports)
    }
}

struct OltpThread<'a> {
    session: Box<dyn OltpSession + 'a>,
    worker: Box<dyn OltpWorker + 'a>,
}

impl Thread for OltpThread<'_> {
    fn plan(&mut self) -> Option<usize> {
        self.worker.plan()
    }
    fn execute(&mut self) -> Result<u64, OpError> {
        self.worker.execute(self.session.as_mut())
    }
    fn committed(&mut self) {
        self.worker.committed();
    }
    fn report(&self) -> WorkerReport {
        self.worker.report()
    }
}

/// Runs `body` in a transaction of `kind` on `session`, retrying retryable failures.
pub fn run_retrying(
    session: &mut dyn OltpSession,
    kind: TxnKind,
    body: &mut OltpBody<'_>,
) -> Result<(), OpError> {
    crate::workload::retry(|| session.run(kind, body))
}

/// What the OLTP workloads' tests share: the subject setup, the workload parameters and the
/// engines that have an OLTP mapping.
#[cfg(test)]
pub(crate) mod testing {
    use super::{EngineId, Schema, SubjectSetup, supports};
    use crate::subject::LatencyModel;
    use crate::workload::{Distribution, WorkloadParams};

    /// A setup for `schema`'s tables with `data_bytes` of data, no injected latency.
    pub fn setup(schema: &Schema, data_bytes: u64) -> SubjectSetup {
        SubjectSetup {
            tables: schema.tables.iter().map(|t| t.name).collect(),
            data_bytes,
            latency_ns: 0,
            latency_model: LatencyModel::Barrier,
            flush: None,
            sync_latency_ns: 0,
        }
    }

    /// One thread, uniform keys, the given seed.
    pub fn params(seed: u64) -> WorkloadParams {
        WorkloadParams {
            scale: 0,
            value_size: 0,
            distribution: Distribution::Uniform,
            theta: 0.99,
            seed,
            threads: 1,
            planned_txns: None,
        }
    }

    /// Every engine of this build with an OLTP mapping, but the paged engine on the file
    /// store ([`EngineId::PagedFile`]): the same engines and the same adapter as on the PM
    /// store, whose store the conformance suite checks (`crates/ferrite/tests/engines_paged.rs`);
    /// running every OLTP test on them too would cost CI time for no new path.
    pub fn engines() -> impl Iterator<Item = EngineId> {
        EngineId::available()
            .into_iter()
            .filter(|&e| supports(e) && !matches!(e, EngineId::PagedFile(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders() -> TableDef {
        TableDef::new("orders")
            .column("w", ColType::I64)
            .column("d", ColType::I64)
            .column("o", ColType::I64)
            .column("c", ColType::I64)
            .key(&[("w", 4), ("d", 4), ("o", 8)])
            .index("orders_by_c", &["w", "d", "c"], false)
    }

    #[test]
    fn packing_is_order_preserving_and_ranges_are_intervals() {
        let s = Schema::new(vec![orders()]).unwrap();
        let t = s.table(0).unwrap();
        assert_eq!(t.pack(&[1, 2, 3]).unwrap(), (1 << 12) | (2 << 8) | 3);
        assert_eq!(t.pack(&[15, 15, 255]).unwrap(), 0xffff);
        assert!(t.pack(&[16, 0, 0]).is_err(), "out of range is an error");
        assert!(t.pack(&[-1, 0, 0]).is_err());
        assert!(t.pack(&[1, 2]).is_err(), "short key");
        let v = |x: i64| Value::I64(x);
        // Prefix (w=1, d=2): every o.
        let r = Range::primary(vec![v(1), v(2)]);
        assert_eq!(t.pack_range(&r).unwrap(), Some((0x1200, 0x1300)));
        // Prefix w=1, d in [3, 5).
        let r = Range::primary(vec![v(1)]).between(Bound::Included(v(3)), Bound::Excluded(v(5)));
        assert_eq!(t.pack_range(&r).unwrap(), Some((0x1300, 0x1500)));
        // d > 14 runs to the end of the w = 1 prefix.
        let r = Range::primary(vec![v(1)]).between(Bound::Excluded(v(14)), Bound::Unbounded);
        assert_eq!(t.pack_range(&r).unwrap(), Some((0x1f00, 0x2000)));
        // Everything, and an empty range.
        assert_eq!(t.pack_range(&Range::all()).unwrap(), Some((0, 0x10000)));
        let r = Range::primary(vec![v(1)]).between(Bound::Included(v(5)), Bound::Excluded(v(5)));
        assert_eq!(t.pack_range(&r).unwrap(), None);
        // A whole key is one point.
        assert_eq!(
            t.pack_range(&Range::primary(vec![v(1), v(2), v(3)])).unwrap(),
            Some((0x1203, 0x1204))
        );
        assert_eq!(t.row_key(&[v(1), v(2), v(3), v(9)]).unwrap(), 0x1203);
        assert_eq!(t.indexes[0].columns, vec![0, 1, 3]);
    }

    /// The same reads on every engine return the same rows: composite keys, prefix ranges,
    /// bounds, descending order, limits, an index lookup by a non-key column; `add`, `update`,
    /// `delete` and a refused duplicate.
    #[test]
    fn every_engine_answers_the_same() {
        use ferrite::pmem::internals::testing::TestDir;
        let dir = TestDir::new("bench-oltp-layer");
        let with_index = Arc::new(Schema::new(vec![orders()]).unwrap());
        let plain = Arc::new(
            Schema::new(vec![{
                let mut t = orders();
                t.pending_indexes.clear();
                t
            }])
            .unwrap(),
        );
        let setup = testing::setup(&with_index, 1 << 20);
        let v = |x: i64| Value::I64(x);
        let mut answers: Vec<(EngineId, Vec<Vec<i64>>)> = Vec::new();
        for engine in testing::engines() {
            // LMDB maps no non-unique index: it gets the same table without one, and skips index
            // reads (its unique-index mapping is tested by TATP).
            let lmdb = engine == EngineId::Lmdb;
            let schema = if lmdb { &plain } else { &with_index };
            if lmdb {
                assert!(open(engine, &dir.path().join("refused"), &setup, &with_index).is_err());
            }
            let subject = open(engine, &dir.path().join(engine.name()), &setup, schema)
                .unwrap_or_else(|e| panic!("{engine}: {e}"));
            let mut s = subject.session().unwrap();
            run_retrying(s.as_mut(), TxnKind::ReadWrite, &mut |ops| {
                for w in 1..=2 {
                    for d in 1..=3 {
                        for o in 1..=4 {
                            assert!(ops.insert(0, vec![v(w), v(d), v(o), v(10 * o % 7)])?);
                        }
                    }
                }
                assert!(!ops.insert(0, vec![v(1), v(1), v(1), v(0)])?, "duplicate key");
                assert_eq!(ops.add(0, &[1, 2, 3], 3, 100)?, Some(102));
                assert_eq!(ops.add(0, &[1, 2, 9], 3, 1)?, None);
                assert!(ops.update(0, &[2, 3, 4], &[(3, v(-1))])?);
                assert!(ops.update(0, &[2, 3, 4], &[(0, v(5))]).is_err(), "key column");
                assert!(ops.delete(0, &[2, 1, 1])?);
                assert!(!ops.delete(0, &[2, 1, 1])?);
                assert!(ops.insert(0, vec![v(16), v(0), v(0), v(0)]).is_err(), "key too wide");
                Ok(())
            })
            .unwrap();
            let mut out = Vec::new();
            let ranges = [
                Range::all(),
                Range::primary(vec![v(1), v(2)]),
                Range::primary(vec![v(1)]).between(Bound::Excluded(v(1)), Bound::Included(v(2))),
                Range::primary(vec![v(2), v(3)]).between(Bound::Included(v(2)), Bound::Unbounded),
                Range::primary(vec![v(1), v(1)]).limit(2),
                Range::primary(vec![v(2)]).between(Bound::Included(v(3)), Bound::Excluded(v(3))),
            ];
            let idx = [
                Range::index(0, vec![v(1), v(2), v(6)]),
                Range::index(0, vec![v(1), v(3)]).between(Bound::Included(v(2)), Bound::Unbounded),
                Range::primary(vec![v(1), v(3)]).descending().limit(2),
            ];
            run_retrying(s.as_mut(), TxnKind::ReadOnly, &mut |ops| {
                out.clear();
                let reads = ranges.iter().chain(if lmdb { &idx[..0] } else { &idx[..] });
                for r in reads {
                    let mut rows = Vec::new();
                    ops.scan(0, r, &mut |row| {
                        rows.extend(row.iter().map(|x| x.as_i64().unwrap()));
                    })?;
                    out.push(rows);
                }
                let mut row = Row::new();
                assert!(ops.get(0, &[1, 2, 3], &mut row)?);
                assert_eq!(row, vec![v(1), v(2), v(3), v(102)]);
                assert!(ops.insert(0, vec![v(3), v(0), v(0), v(0)]).is_err(), "read-only");
                Ok(())
            })
            .unwrap();
            answers.push((engine, out.clone()));
        }
        let (first, want) = &answers[0];
        // By hand: c = 10*o % 7 is 3, 6, 2, 5 for o = 1..4.
        assert_eq!(want[1], [1, 2, 1, 3, 1, 2, 2, 6, 1, 2, 3, 102, 1, 2, 4, 5]);
        assert_eq!(want[2].len(), 4 * 4, "d = 2 of w = 1");
        assert_eq!(want[3], [2, 3, 2, 6, 2, 3, 3, 2, 2, 3, 4, -1]);
        assert_eq!(want[4], [1, 1, 1, 3, 1, 1, 2, 6]);
        assert!(want[5].is_empty());
        assert_eq!(want[0].len(), 23 * 4);
        assert_eq!(want[6], [1, 2, 2, 6], "index (w, d, c) = (1, 2, 6)");
        assert_eq!(want[7], [1, 3, 3, 2, 1, 3, 1, 3, 1, 3, 4, 5, 1, 3, 2, 6], "c >= 2 by c");
        assert_eq!(want[8], [1, 3, 4, 5, 1, 3, 3, 2], "descending");
        for (engine, got) in &answers {
            assert_eq!(got[..], want[..got.len()], "{engine} differs from {first}");
        }
    }

    /// A unique index on one `i64` column behaves the same on every engine, LMDB's mapping
    /// (a second database) included: a taken value is refused, updates move the entry, deletes
    /// remove it, equality and range reads through it.
    #[test]
    fn unique_index_on_every_engine() {
        use ferrite::pmem::internals::testing::TestDir;
        let dir = TestDir::new("bench-oltp-unique");
        let schema = Arc::new(
            Schema::new(vec![
                TableDef::new("people")
                    .column("id", ColType::I64)
                    .column("phone", ColType::I64)
                    .column("name", ColType::Str)
                    .key(&[("id", 20)])
                    .index("people_phone", &["phone"], true),
            ])
            .unwrap(),
        );
        let setup = testing::setup(&schema, 1 << 20);
        let v = |x: i64| Value::I64(x);
        let s = |x: &str| Value::Str(x.into());
        for engine in testing::engines() {
            let subject = open(engine, &dir.path().join(engine.name()), &setup, &schema)
                .unwrap_or_else(|e| panic!("{engine}: {e}"));
            let mut ses = subject.session().unwrap();
            let ids = |ops: &mut dyn OltpOps, r: Range| -> Result<Vec<i64>, OpError> {
                let mut out = Vec::new();
                ops.scan(0, &r, &mut |row| out.push(row[0].as_i64().unwrap()))?;
                Ok(out)
            };
            run_retrying(ses.as_mut(), TxnKind::ReadWrite, &mut |ops| {
                for (id, phone) in [(1, 500), (2, 300), (3, 400)] {
                    assert!(ops.insert(0, vec![v(id), v(phone), s("a")])?);
                }
                assert!(!ops.insert(0, vec![v(4), v(300), s("b")])?, "{engine}: phone taken");
                assert!(ops.update(0, &[2], &[(1, v(700))])?, "{engine}: move 300 to 700");
                assert!(ops.insert(0, vec![v(4), v(300), s("c")])?, "{engine}: 300 is free");
                assert!(ops.delete(0, &[1])?);
                assert!(ops.insert(0, vec![v(5), v(500), s("d")])?, "{engine}: 500 is free");
                assert_eq!(ids(ops, Range::index(0, vec![v(700)]))?, [2], "{engine}");
                assert_eq!(ids(ops, Range::index(0, vec![v(1)]))?, [0i64; 0], "{engine}");
                let r = Range::index(0, vec![])
                    .between(Bound::Excluded(v(300)), Bound::Included(v(700)));
                assert_eq!(ids(ops, r)?, [3, 5, 2], "{engine}: by phone");
                let r = Range::index(0, vec![]).between(Bound::Unbounded, Bound::Unbounded);
                assert_eq!(ids(ops, r.limit(2))?, [4, 3], "{engine}");
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn bad_schemas_are_errors() {
        let bad = |t: TableDef| Schema::new(vec![t]).is_err();
        assert!(bad(TableDef::new("t").column("a", ColType::I64)), "no key");
        assert!(bad(TableDef::new("t").column("a", ColType::Str).key(&[("a", 8)])), "str key");
        assert!(bad(TableDef::new("t").column("a", ColType::I64).key(&[("a", 64)])), "too wide");
        assert!(bad(TableDef::new("t").column("a", ColType::I64).key(&[("b", 8)])), "no column");
        assert!(bad(TableDef::new("t t").column("a", ColType::I64).key(&[("a", 8)])), "name");
        assert!(bad(orders().index("x", &["nope"], false)));
        assert!(Schema::new(vec![orders(), orders()]).is_err(), "duplicate table");
    }
}
