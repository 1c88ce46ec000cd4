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
//! - R4 (serializability): a read-write transaction commits at timestamp `c` only if nothing it
//!   read changed between its snapshot `s` and `c`: no key it read or wrote, and no key inside a
//!   range it scanned (primary or index; an index entry counts as changed when its row's chain
//!   has a version newer than `s`), has a version in `(s, c)`. Its reads then equal what it
//!   would read at `c`, so committed read-write transactions are equivalent to running serially
//!   in commit order. First committer wins: the transaction that validates later aborts with
//!   `Conflict`.
//! - R5: read-only transactions (and read-write ones that wrote nothing) skip validation: they
//!   are serialized at their snapshot, which is a prefix of the commit order.
//! - R6: primary-key and unique-index uniqueness is checked at each write against the
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
//! Validation can be switched off (`internals::ReferenceConfig`) to build a deliberately broken
//! engine that the suite must catch.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{CommitMode, Engine, EngineTxn};
use crate::encoding::ByteRange;
use crate::error::{Error, Result, SchemaError};
use crate::options::EngineKind;
use crate::query::{AccessPath, Direction, Filter, LoweredScan, matches_all};
use crate::schema::{PRIMARY, Table};
use crate::value::{Key, Row, Value};

/// Knobs of the reference engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Validate read sets and write-write conflicts at commit (R4). Switched off only to build a
    /// broken engine for tests.
    pub validation: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { validation: true }
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
    config: Config,
    catalog: RwLock<BTreeMap<String, Arc<Table>>>,
    data: RwLock<Data>,
    /// Start timestamps of open transactions, with multiplicity (R3).
    snapshots: Mutex<BTreeMap<u64, usize>>,
}

#[derive(Default)]
struct Data {
    tables: BTreeMap<String, TableData>,
    /// Timestamp of the last commit (0: none yet).
    last_ts: u64,
}

struct TableData {
    rows: BTreeMap<Vec<u8>, Vec<Version>>,
    /// One map per secondary index: entry key -> encoded primary key.
    indexes: Vec<BTreeMap<Vec<u8>, Vec<u8>>>,
}

#[derive(Clone, Debug)]
struct Version {
    ts: u64,
    row: Option<Row>,
}

fn visible(chain: &[Version], ts: u64) -> Option<&Row> {
    chain.iter().rev().find(|v| v.ts <= ts).and_then(|v| v.row.as_ref())
}

fn latest_ts(chain: &[Version]) -> u64 {
    chain.last().map_or(0, |v| v.ts)
}

fn latest_row(chain: &[Version]) -> Option<&Row> {
    chain.last().and_then(|v| v.row.as_ref())
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

fn missing(what: String) -> Error {
    Error::Corrupted { what, at: "reference engine memory".into() }
}

impl Data {
    fn table(&self, name: &str) -> Result<&TableData> {
        self.tables.get(name).ok_or_else(|| missing(format!("table {name:?} has no data")))
    }
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
    pub(crate) fn new(config: Config) -> Self {
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
            start_ts,
            read_only,
            reads: Vec::new(),
            writes: BTreeMap::new(),
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
        let indexes = vec![BTreeMap::new(); table.indexes.len()];
        write(&self.shared.data)?
            .tables
            .insert(name.clone(), TableData { rows: BTreeMap::new(), indexes });
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
}

/// A buffered write: the row's final image in this transaction (`None`: deleted).
#[derive(Clone, Debug)]
struct Write {
    row: Option<Row>,
    /// The key had no row in this transaction's snapshot when it first wrote it.
    inserted: bool,
}

/// Something a read-write transaction read, validated at commit (R4).
#[derive(Clone, Debug)]
enum Read {
    Key { table: String, pk: Vec<u8> },
    Range { table: String, path: AccessPath, range: ByteRange },
}

struct RefTxn {
    shared: Arc<Shared>,
    start_ts: u64,
    read_only: bool,
    reads: Vec<Read>,
    writes: BTreeMap<String, BTreeMap<Vec<u8>, Write>>,
    finished: bool,
}

impl fmt::Debug for RefTxn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefTxn")
            .field("start_ts", &self.start_ts)
            .field("read_only", &self.read_only)
            .field("reads", &self.reads.len())
            .field("written_tables", &self.writes.len())
            .finish()
    }
}

impl Drop for RefTxn {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.release(self.start_ts);
        }
    }
}

const NO_WRITES: &BTreeMap<Vec<u8>, Write> = &BTreeMap::new();

impl RefTxn {
    fn own(&self, table: &str) -> &BTreeMap<Vec<u8>, Write> {
        self.writes.get(table).unwrap_or(NO_WRITES)
    }

    fn record(&mut self, read: Read) {
        if !self.read_only {
            self.reads.push(read);
        }
    }

    /// The row with primary key `pk` as this transaction sees it (own writes, then snapshot).
    fn view_row(&self, data: &Data, table: &Table, pk: &[u8]) -> Result<Option<Row>> {
        if let Some(w) = self.own(table.name()).get(pk) {
            return Ok(w.row.clone());
        }
        let td = data.table(table.name())?;
        Ok(td.rows.get(pk).and_then(|c| visible(c, self.start_ts)).cloned())
    }

    /// Scans this transaction's view. Returns the rows and the range actually examined (the
    /// requested range, narrowed to the last returned key when the limit stopped the scan).
    fn scan_view(
        &self,
        data: &Data,
        table: &Table,
        scan: &LoweredScan,
        filters: &[Filter],
    ) -> Result<(Vec<Row>, ByteRange)> {
        let td = data.table(table.name())?;
        let asc = scan.direction == Direction::Ascending;
        let own = self.own(table.name());
        let ts = self.start_ts;
        let range = &scan.range;

        let index = match scan.path {
            AccessPath::Primary => None,
            AccessPath::Index(i) => {
                let ix = table.indexes.get(i).ok_or_else(|| missing(format!("index #{i}")))?;
                let map = td.indexes.get(i).ok_or_else(|| missing(format!("index #{i} data")))?;
                Some((ix, map))
            }
        };

        // Own writes in range, in scan order.
        let mut buffered: Vec<(Vec<u8>, &Row)> = own
            .iter()
            .filter_map(|(pk, w)| w.row.as_ref().map(|r| (pk, r)))
            .map(|(pk, r)| match index {
                None => (pk.clone(), r),
                Some((ix, _)) => (table.index_entry(ix, r, pk), r),
            })
            .filter(|(k, _)| range.contains(k))
            .collect();
        buffered.sort_by(|a, b| a.0.cmp(&b.0));
        if !asc {
            buffered.reverse();
        }

        // Committed rows in range, in scan order, minus keys this transaction wrote.
        let committed: Box<dyn Iterator<Item = (&[u8], &Row)> + '_> = if range.is_empty() {
            Box::new(std::iter::empty())
        } else {
            match index {
                None => {
                    let it = td.rows.range::<[u8], _>(range.as_slices());
                    let it: Box<dyn Iterator<Item = _>> =
                        if asc { Box::new(it) } else { Box::new(it.rev()) };
                    Box::new(it.filter(|(pk, _)| !own.contains_key(*pk)).filter_map(
                        move |(pk, chain)| visible(chain, ts).map(|r| (pk.as_slice(), r)),
                    ))
                }
                Some((ix, map)) => {
                    let it = map.range::<[u8], _>(range.as_slices());
                    let it: Box<dyn Iterator<Item = _>> =
                        if asc { Box::new(it) } else { Box::new(it.rev()) };
                    Box::new(it.filter(|(_, pk)| !own.contains_key(*pk)).filter_map(
                        move |(entry, pk)| {
                            let row = td.rows.get(pk).and_then(|c| visible(c, ts))?;
                            // Skip entries of other versions of the row (R2).
                            (table.index_entry(ix, row, pk) == *entry)
                                .then_some((entry.as_slice(), row))
                        },
                    ))
                }
            }
        };

        let mut out = Vec::new();
        let mut examined = range.clone();
        if scan.limit == Some(0) {
            return Ok((out, ByteRange::empty()));
        }
        let mut committed = committed.peekable();
        let mut buffered = buffered.into_iter().peekable();
        loop {
            let take_buffered = match (committed.peek(), buffered.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((ck, _)), Some((bk, _))) => {
                    if asc {
                        bk.as_slice() < *ck
                    } else {
                        bk.as_slice() > *ck
                    }
                }
            };
            let next = if take_buffered {
                buffered.next()
            } else {
                committed.next().map(|(k, r)| (k.to_vec(), r))
            };
            let Some((key, row)) = next else { break };
            if matches_all(filters, row) {
                out.push(row.clone());
                if scan.limit.is_some_and(|n| out.len() >= n) {
                    examined = range.narrowed(&key, asc);
                    break;
                }
            }
        }
        Ok((out, examined))
    }

    /// Fails with `DuplicateKey` if another row in this transaction's view has `row`'s values
    /// in a unique index; records the probed ranges.
    fn check_unique_in_view(
        &mut self,
        data: &Data,
        table: &Table,
        row: &Row,
        pk: &[u8],
    ) -> Result<()> {
        for (i, ix) in table.indexes.iter().enumerate().filter(|(_, ix)| ix.unique) {
            let prefix = table.index_prefix(ix, row);
            let scan = LoweredScan {
                path: AccessPath::Index(i),
                range: ByteRange::prefix(prefix),
                direction: Direction::Ascending,
                limit: None,
            };
            let (holders, range) = self.scan_view(data, table, &scan, &[])?;
            self.record(Read::Range { table: table.name().to_owned(), path: scan.path, range });
            if holders.iter().any(|h| table.encode_pk(h) != pk) {
                return Err(duplicate(table, &ix.name, table.index_values(ix, row)));
            }
        }
        Ok(())
    }

    fn buffer(&mut self, table: &Table, pk: Vec<u8>, row: Option<Row>, inserted: bool) {
        let w = self.writes.entry(table.name().to_owned()).or_default();
        match w.get_mut(&pk) {
            // Keep `inserted` from the first write of the key.
            Some(existing) => existing.row = row,
            None => {
                w.insert(pk, Write { row, inserted });
            }
        }
    }

    /// Checks uniqueness against the latest committed data (R6).
    fn check_unique_committed(
        &self,
        data: &Data,
        tables: &BTreeMap<String, Arc<Table>>,
    ) -> Result<()> {
        for (name, writes) in &self.writes {
            let (Some(table), Ok(td)) = (tables.get(name), data.table(name)) else {
                return Err(missing(format!("table {name:?}")));
            };
            for (pk, w) in writes {
                let Some(row) = &w.row else { continue };
                if w.inserted
                    && let Some(chain) = td.rows.get(pk)
                    && latest_ts(chain) > self.start_ts
                    && latest_row(chain).is_some()
                {
                    let key = table.pk_value(row).cloned().map(Key::from).unwrap_or_default();
                    return Err(duplicate_key(table, PRIMARY, key));
                }
                for (ix, map) in table.indexes.iter().zip(&td.indexes).filter(|(ix, _)| ix.unique) {
                    let prefix = table.index_prefix(ix, row);
                    let range = ByteRange::prefix(prefix.clone());
                    if range.is_empty() {
                        continue;
                    }
                    for (_, other) in map.range::<[u8], _>(range.as_slices()) {
                        if other == pk {
                            continue;
                        }
                        let current = match writes.get(other) {
                            Some(own) => own.row.as_ref(),
                            None => td.rows.get(other).and_then(|c| latest_row(c)),
                        };
                        if current.is_some_and(|r| table.index_prefix(ix, r) == prefix) {
                            return Err(duplicate(table, &ix.name, table.index_values(ix, row)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// R4: nothing this transaction read or wrote changed since its snapshot.
    fn validate(&self, data: &Data) -> Result<()> {
        if data.last_ts == self.start_ts {
            return Ok(()); // nothing committed since the snapshot
        }
        let changed =
            |chain: Option<&Vec<Version>>| chain.is_some_and(|c| latest_ts(c) > self.start_ts);
        for r in &self.reads {
            match r {
                Read::Key { table, pk } => {
                    if changed(data.table(table)?.rows.get(pk)) {
                        return Err(Error::conflict(format!(
                            "table {table:?}: a row this transaction read was changed by a \
                             transaction that committed first"
                        )));
                    }
                }
                Read::Range { table, path, range } => {
                    if range.is_empty() {
                        continue;
                    }
                    let td = data.table(table)?;
                    let hit = match path {
                        AccessPath::Primary => td
                            .rows
                            .range::<[u8], _>(range.as_slices())
                            .any(|(_, c)| latest_ts(c) > self.start_ts),
                        AccessPath::Index(i) => td.indexes.get(*i).is_some_and(|map| {
                            map.range::<[u8], _>(range.as_slices()).any(|(_, pk)| {
                                td.rows.get(pk).is_none_or(|c| latest_ts(c) > self.start_ts)
                            })
                        }),
                    };
                    if hit {
                        return Err(Error::conflict(format!(
                            "table {table:?}: a range this transaction scanned was changed by a \
                             transaction that committed first"
                        )));
                    }
                }
            }
        }
        for (table, writes) in &self.writes {
            let td = data.table(table)?;
            if writes.keys().any(|pk| changed(td.rows.get(pk))) {
                return Err(Error::conflict(format!(
                    "table {table:?}: a row this transaction wrote was changed by a transaction \
                     that committed first"
                )));
            }
        }
        Ok(())
    }

    fn apply(&self, data: &mut Data, tables: &BTreeMap<String, Arc<Table>>, ts: u64) -> Result<()> {
        for (name, writes) in &self.writes {
            let table = tables.get(name).ok_or_else(|| missing(format!("table {name:?}")))?;
            let td = data
                .tables
                .get_mut(name)
                .ok_or_else(|| missing(format!("table {name:?} has no data")))?;
            for (pk, w) in writes {
                let exists = td.rows.get(pk).and_then(|c| latest_row(c)).is_some();
                if w.row.is_none() && !exists {
                    continue; // inserted and deleted again, or (validation off) already gone
                }
                td.rows.entry(pk.clone()).or_default().push(Version { ts, row: w.row.clone() });
                if let Some(row) = &w.row {
                    for (ix, map) in table.indexes.iter().zip(td.indexes.iter_mut()) {
                        map.insert(table.index_entry(ix, row, pk), pk.clone());
                    }
                }
            }
        }
        Ok(())
    }

    fn collect_garbage(
        &self,
        data: &mut Data,
        tables: &BTreeMap<String, Arc<Table>>,
        active: &[u64],
    ) {
        for (name, writes) in &self.writes {
            let (Some(table), Some(td)) = (tables.get(name), data.tables.get_mut(name)) else {
                continue;
            };
            for pk in writes.keys() {
                collect_chain(td, table, pk, active);
            }
        }
    }

    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.shared.release(self.start_ts);
        }
    }
}

/// R3 for one chain: keep the newest version and, for every active snapshot, the version it
/// sees; drop the oldest kept version too if it is a tombstone (seeing nothing is the same as
/// seeing a tombstone). Index entries no kept version uses go with the dropped versions.
fn collect_chain(td: &mut TableData, table: &Table, pk: &[u8], active: &[u64]) {
    let Some(chain) = td.rows.get_mut(pk) else { return };
    let mut keep = vec![false; chain.len()];
    if let Some(last) = keep.last_mut() {
        *last = true;
    }
    for &s in active {
        if let Some(k) = chain.iter().rposition(|v| v.ts <= s).and_then(|i| keep.get_mut(i)) {
            *k = true;
        }
    }
    if let Some(first) = keep.iter().position(|&k| k)
        && chain.get(first).is_some_and(|v| v.row.is_none())
        && let Some(k) = keep.get_mut(first)
    {
        *k = false;
    }
    let mut removed = Vec::new();
    for (v, k) in std::mem::take(chain).into_iter().zip(keep) {
        if k {
            chain.push(v);
        } else if let Some(row) = v.row {
            removed.push(row);
        }
    }
    for old in &removed {
        for (ix, map) in table.indexes.iter().zip(td.indexes.iter_mut()) {
            let entry = table.index_entry(ix, old, pk);
            let still_used = chain
                .iter()
                .filter_map(|v| v.row.as_ref())
                .any(|r| table.index_entry(ix, r, pk) == entry);
            if !still_used {
                map.remove(&entry);
            }
        }
    }
    if chain.is_empty() {
        td.rows.remove(pk);
    }
}

fn duplicate(table: &Table, index: &str, values: Vec<Value>) -> Error {
    duplicate_key(table, index, Key::new(values))
}

fn duplicate_key(table: &Table, index: &str, key: Key) -> Error {
    Error::DuplicateKey { table: table.name().to_owned(), index: index.to_owned(), key }
}

impl EngineTxn for RefTxn {
    fn get(&mut self, table: &Table, pk: &[u8]) -> Result<Option<Row>> {
        let row = {
            let data = read(&self.shared.data)?;
            self.view_row(&data, table, pk)?
        };
        self.record(Read::Key { table: table.name().to_owned(), pk: pk.to_vec() });
        Ok(row)
    }

    fn scan(&mut self, table: &Table, scan: &LoweredScan, filters: &[Filter]) -> Result<Vec<Row>> {
        let (rows, range) = {
            let data = read(&self.shared.data)?;
            self.scan_view(&data, table, scan, filters)?
        };
        self.record(Read::Range { table: table.name().to_owned(), path: scan.path, range });
        Ok(rows)
    }

    fn insert(&mut self, table: &Table, row: Row) -> Result<()> {
        let pk = table.encode_pk(&row);
        let shared = Arc::clone(&self.shared);
        let data = read(&shared.data)?;
        self.record(Read::Key { table: table.name().to_owned(), pk: pk.clone() });
        if self.view_row(&data, table, &pk)?.is_some() {
            let key = table.pk_value(&row).cloned().map(Key::from).unwrap_or_default();
            return Err(duplicate_key(table, PRIMARY, key));
        }
        self.check_unique_in_view(&data, table, &row, &pk)?;
        drop(data);
        self.buffer(table, pk, Some(row), true);
        Ok(())
    }

    fn update(
        &mut self,
        table: &Table,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        let data = read(&shared.data)?;
        self.record(Read::Key { table: table.name().to_owned(), pk: pk.to_vec() });
        let Some(mut row) = self.view_row(&data, table, pk)? else {
            return Err(Error::NotFound { table: table.name().to_owned(), key: key.clone() });
        };
        for (pos, v) in assignments {
            if let Some(cell) = row.get_mut(*pos) {
                *cell = v.clone();
            }
        }
        self.check_unique_in_view(&data, table, &row, pk)?;
        drop(data);
        self.buffer(table, pk.to_vec(), Some(row), false);
        Ok(())
    }

    fn delete(&mut self, table: &Table, pk: &[u8], key: &Value) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        let data = read(&shared.data)?;
        self.record(Read::Key { table: table.name().to_owned(), pk: pk.to_vec() });
        if self.view_row(&data, table, pk)?.is_none() {
            return Err(Error::NotFound { table: table.name().to_owned(), key: key.clone() });
        }
        drop(data);
        self.buffer(table, pk.to_vec(), None, false);
        Ok(())
    }

    fn commit(mut self: Box<Self>, _mode: CommitMode) -> Result<u64> {
        if self.read_only || self.writes.values().all(BTreeMap::is_empty) {
            // R5: serialized at the snapshot.
            self.finish();
            return Ok(self.start_ts);
        }
        let shared = Arc::clone(&self.shared);
        // Schemas first: lock order is catalog, then data.
        let tables: BTreeMap<String, Arc<Table>> = {
            let catalog = read(&shared.catalog)?;
            self.writes
                .keys()
                .filter_map(|n| catalog.get(n).map(|t| (n.clone(), Arc::clone(t))))
                .collect()
        };
        let mut data = write(&shared.data)?;
        let checked = self
            .check_unique_committed(&data, &tables)
            .and_then(|()| if shared.config.validation { self.validate(&data) } else { Ok(()) });
        if let Err(e) = checked {
            self.finish();
            return Err(e);
        }
        let ts = data.last_ts + 1;
        self.apply(&mut data, &tables, ts)?;
        data.last_ts = ts;
        self.finish();
        let active: Vec<u64> = lock(&shared.snapshots)?.keys().copied().collect();
        self.collect_garbage(&mut data, &tables, &active);
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
        let e = Reference::new(Config::default());
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
}
