//! The OLTP layer on any Ferrite engine, through the public `Database` API.
//!
//! Mapping: one table per table. A one-column primary key is the table's primary key; a
//! composite key is packed ([`TableDef::pack`]) into a leading `i64` column [`PK`], which is
//! the primary key (the API has one-column primary keys), followed by the real columns, key
//! columns included. Indexes are the API's (unique or not). `add` reads the row and updates
//! the column. A duplicate key reported by `commit` (a concurrent committer took the key) is
//! retryable, like a conflict. Scans are API scans: primary-key ranges as packed-key ranges, index ranges as
//! prefix bounds on the index.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use ferrite::{
    Database, Error, Key, Options, Read, RecoveryReport, Scan, TableSchema, Type, Value,
};

use super::{OltpBody, OltpOps, OltpSession, OltpSubject, Range, Row, Schema, TableDef, TableId};
use crate::subject::ferrite_db::{engine_err, info};
use crate::subject::{OpError, SubjectInfo, SubjectSetup, TxnKind};

/// Name of the packed-key column of a table with a composite key.
pub(super) const PK: &str = "pk_";

/// Creates the database in `dir` with `options` (the engine among them; the benchmark's are
/// [`options`]) and `schema`'s tables.
pub(super) fn open(
    options: Options,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    let mut info = info(&options, setup);
    let db = Database::create(dir.join("ferrite-db"), options).map_err(engine_err)?;
    for t in &schema.tables {
        let packed = t.key.len() > 1;
        let mut ts = TableSchema::new(t.name);
        if packed {
            ts = ts.column(PK, Type::I64);
        }
        for c in &t.columns {
            ts = ts.column(c.name, c.ty.ferrite());
        }
        ts = ts.primary_key(if packed { PK } else { t.columns[t.key[0]].name });
        for i in &t.indexes {
            let cols: Vec<&str> = i.columns.iter().map(|&c| t.columns[c].name).collect();
            ts = if i.unique { ts.unique_index(i.name, cols) } else { ts.index(i.name, cols) };
        }
        db.create_table(ts).map_err(engine_err)?;
    }
    info.config.insert(
        "oltp.mapping".into(),
        "one table per table; a composite primary key packed into a leading i64 column pk_; \
         indexes as API indexes; add = get + update"
            .into(),
    );
    Ok(Box::new(FerriteOltp { db, schema: Arc::clone(schema), info }))
}

/// Opens the database [`open`] created in `dir` (recovery runs inside `Database::open`) and
/// checks that every table of `schema` is there with its columns.
pub(super) fn reopen(
    options: Options,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    let info = info(&options, setup);
    let db = Database::open(dir.join("ferrite-db"), options).map_err(engine_err)?;
    for t in &schema.tables {
        let stored = db.table_schema(t.name).map_err(engine_err)?;
        let want = t.columns.len() + usize::from(t.key.len() > 1);
        if stored.columns().len() != want {
            return Err(OpError::Engine(format!(
                "{}: {} stored columns, the schema has {want}",
                t.name,
                stored.columns().len()
            )));
        }
    }
    Ok(Box::new(FerriteOltp { db, schema: Arc::clone(schema), info }))
}

struct FerriteOltp {
    db: Database,
    schema: Arc<Schema>,
    info: SubjectInfo,
}

impl OltpSubject for FerriteOltp {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn OltpSession + '_>, OpError> {
        Ok(Box::new(FerriteSession { s: self }))
    }

    fn engine_check(&self) -> Option<Result<String, OpError>> {
        Some(self.db.check().map_err(engine_err))
    }

    fn recovery_report(&self) -> Option<RecoveryReport> {
        self.db.recovery_report()
    }
}

struct FerriteSession<'a> {
    s: &'a FerriteOltp,
}

enum Txn {
    Read(ferrite::ReadTransaction),
    Write(ferrite::Transaction),
}

struct FerriteOps<'a> {
    txn: Txn,
    schema: &'a Schema,
}

impl OltpSession for FerriteSession<'_> {
    fn run(&mut self, kind: TxnKind, body: &mut OltpBody<'_>) -> Result<(), OpError> {
        let txn = match kind {
            TxnKind::ReadOnly => Txn::Read(self.s.db.begin_read().map_err(engine_err)?),
            TxnKind::ReadWrite => Txn::Write(self.s.db.begin().map_err(engine_err)?),
        };
        let mut ops = FerriteOps { txn, schema: &self.s.schema };
        body(&mut ops)?;
        match ops.txn {
            Txn::Read(_) => Ok(()),
            // A duplicate key found at commit (not at the write, which `insert` reports as
            // `false`) means a concurrent transaction committed the key after this one's
            // snapshot. The engines check uniqueness before validating reads, so a
            // transaction whose reads are stale (TPC-C: two New-Orders that read the same
            // `d_next_o_id`) fails this way instead of with `Conflict`; retrying re-reads and
            // decides again, as after a conflict.
            Txn::Write(t) => t.commit().map_err(|e| match e {
                Error::DuplicateKey { .. } => OpError::Retryable(format!("at commit: {e}")),
                e => engine_err(e),
            }),
        }
    }
}

fn packed(t: &TableDef) -> bool {
    t.key.len() > 1
}

/// The API's primary-key value of `key`.
fn pk(t: &TableDef, key: &[i64]) -> Result<Value, OpError> {
    if packed(t) {
        Ok(Value::I64(t.pack(key)? as i64))
    } else {
        // Checked against the declared width too, so every engine refuses the same keys.
        t.pack(key)?;
        Ok(Value::I64(key[0]))
    }
}

/// A stored row without the packed-key column.
fn strip(t: &TableDef, mut row: Row) -> Row {
    if packed(t) && !row.is_empty() {
        row.remove(0);
    }
    row
}

fn i64_bound(v: u64) -> Bound<Key> {
    match i64::try_from(v) {
        Ok(v) => Bound::Excluded(Key::from(Value::I64(v))),
        Err(_) => Bound::Unbounded,
    }
}

fn key_with(eq: &[Value], v: Option<&Value>) -> Key {
    let mut vals = eq.to_vec();
    vals.extend(v.cloned());
    Key::new(vals)
}

impl FerriteOps<'_> {
    fn writer(&mut self) -> Result<&mut ferrite::Transaction, OpError> {
        match &mut self.txn {
            Txn::Write(t) => Ok(t),
            Txn::Read(_) => Err(OpError::Engine("write in a read-only transaction".into())),
        }
    }

    fn reader(&mut self) -> &mut dyn Read {
        match &mut self.txn {
            Txn::Write(t) => t,
            Txn::Read(r) => r,
        }
    }
}

impl OltpOps for FerriteOps<'_> {
    fn get(&mut self, t: TableId, key: &[i64], row: &mut Row) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        let k = pk(td, key)?;
        match self.reader().get(td.name, k).map_err(engine_err)? {
            Some(r) => {
                *row = strip(td, r);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn insert(&mut self, t: TableId, mut row: Row) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        td.check_row(&row)?;
        let k = td.row_key(&row)?;
        if packed(td) {
            row.insert(0, Value::I64(k as i64));
        }
        match self.writer()?.insert(td.name, row) {
            Ok(()) => Ok(true),
            Err(Error::DuplicateKey { .. }) => Ok(false),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn update(&mut self, t: TableId, key: &[i64], set: &[(usize, Value)]) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        let k = pk(td, key)?;
        let mut assignments = Vec::with_capacity(set.len());
        for (c, v) in set {
            if td.key.contains(c) {
                return Err(OpError::Engine(format!("{}: update of a key column", td.name)));
            }
            let col = td.columns.get(*c).ok_or_else(|| OpError::Engine("no column".into()))?;
            assignments.push((col.name, v.clone()));
        }
        match self.writer()?.update(td.name, k, assignments) {
            Ok(()) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn add(
        &mut self,
        t: TableId,
        key: &[i64],
        column: usize,
        delta: i64,
    ) -> Result<Option<i64>, OpError> {
        let td = self.schema.table(t)?;
        let mut row = Row::new();
        if !self.get(t, key, &mut row)? {
            return Ok(None);
        }
        let old = row.get(column).and_then(Value::as_i64).ok_or_else(|| {
            OpError::Engine(format!("{}: column {column} is not an i64", td.name))
        })?;
        let new = old
            .checked_add(delta)
            .ok_or_else(|| OpError::Engine(format!("{}: overflow in add", td.name)))?;
        self.update(t, key, &[(column, Value::I64(new))])?;
        Ok(Some(new))
    }

    fn delete(&mut self, t: TableId, key: &[i64]) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        let k = pk(td, key)?;
        match self.writer()?.delete(td.name, k) {
            Ok(()) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn scan(
        &mut self,
        t: TableId,
        range: &Range,
        visit: &mut dyn FnMut(&[Value]),
    ) -> Result<usize, OpError> {
        let td = self.schema.table(t)?;
        let mut scan = match range.index {
            None => {
                let Some((start, end)) = td.pack_range(range)? else { return Ok(0) };
                Scan::primary()
                    .lower(Bound::Included(Key::from(Value::I64(start as i64))))
                    .upper(i64_bound(end))
            }
            Some(i) => {
                let idx = td
                    .indexes
                    .get(i)
                    .ok_or_else(|| OpError::Engine(format!("{}: no index #{i}", td.name)))?;
                let prefix = || {
                    if range.eq.is_empty() {
                        Bound::Unbounded
                    } else {
                        Bound::Included(key_with(&range.eq, None))
                    }
                };
                let lower = match &range.lo {
                    Bound::Unbounded => prefix(),
                    Bound::Included(v) => Bound::Included(key_with(&range.eq, Some(v))),
                    Bound::Excluded(v) => Bound::Excluded(key_with(&range.eq, Some(v))),
                };
                let upper = match &range.hi {
                    Bound::Unbounded => prefix(),
                    Bound::Included(v) => Bound::Included(key_with(&range.eq, Some(v))),
                    Bound::Excluded(v) => Bound::Excluded(key_with(&range.eq, Some(v))),
                };
                Scan::index(idx.name).lower(lower).upper(upper)
            }
        };
        if range.descending {
            scan = scan.descending();
        }
        if let Some(n) = range.limit {
            scan = scan.limit(n);
        }
        let rows = self.reader().scan(td.name, &scan).map_err(engine_err)?;
        let skip = usize::from(packed(td));
        for r in &rows {
            visit(r.get(skip..).unwrap_or(&[]));
        }
        Ok(rows.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::{ColType, OltpSubject, testing};
    use crate::subject::EngineId;
    use ferrite::EngineKind;
    use ferrite::pmem::internals::testing::TestDir;

    /// Regression: a key that a concurrent transaction committed after this one's snapshot is
    /// found only at commit, where the engines report `DuplicateKey`; the mapping used to pass
    /// that on as a plain engine error, so two TPC-C New-Orders that read the same
    /// `d_next_o_id` aborted a two-thread run instead of retrying.
    #[test]
    fn a_duplicate_found_at_commit_is_retryable() {
        let dir = TestDir::new("bench-oltp-dup-commit");
        let schema = Arc::new(
            Schema::new(vec![
                TableDef::new("t")
                    .column("a", ColType::I64)
                    .column("b", ColType::I64)
                    .key(&[("a", 8), ("b", 8)]),
            ])
            .unwrap(),
        );
        let setup = testing::setup(&schema, 1 << 20);
        let mut retryable = 0;
        for kind in EngineKind::all() {
            let path = dir.path().join(kind.name());
            let subject = crate::oltp::open(EngineId::Ferrite(kind), &path, &setup, &schema)
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            let subject: &dyn OltpSubject = subject.as_ref();
            let (mut first, mut second) = (subject.session().unwrap(), subject.session().unwrap());
            let row = vec![Value::I64(1), Value::I64(2)];
            let r = first.run(TxnKind::ReadWrite, &mut |ops| {
                // Begun first; another transaction commits the same key meanwhile.
                second.run(TxnKind::ReadWrite, &mut |o2| {
                    assert!(o2.insert(0, row.clone())?);
                    Ok(())
                })?;
                ops.insert(0, row.clone()).map(drop)
            });
            match r {
                // SOFORT reports a conflict at the write instead (retryable too).
                Err(OpError::Retryable(e)) => retryable += usize::from(e.contains("at commit")),
                // An engine with one writer at a time refuses the second `begin` (retryable).
                Err(OpError::Busy(_)) => {
                    assert_eq!(kind.concurrency().writers, ferrite::WhileWriting::Busy, "{kind}")
                }
                // An engine whose insert sees the committed key refuses it at the write.
                Ok(()) => {}
                Err(e) => panic!("{kind}: {e}"),
            }
        }
        assert!(retryable > 0, "no engine reached the commit-time check");
    }
}
