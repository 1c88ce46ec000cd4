//! [`TxnState`]: one serializable transaction's state (snapshot, read set, write buffer) and
//! its operations, for an engine's `EngineTxn` to delegate to.
//!
//! An engine's transaction holds a `TxnState` and, for each call, takes whatever lock makes
//! its [`Committed`] view stable, builds the view, and calls the matching method here. At
//! commit it calls [`TxnState::check_commit`] inside the critical section that then applies
//! [`TxnState::writes`] under the next timestamp (V3).
//!
//! # Invariants
//! - T1: every operation reads the transaction's view (O1, O2) and records what it read
//!   (RS1) before it buffers anything; a failed operation buffers nothing (it may leave a read
//!   behind, which can only make validation stricter).
//! - T2: `insert` checks U1 (primary key and unique indexes), `update` checks U1 for unique
//!   indexes on the updated image, `delete` needs the row to exist in the view.
//! - T3: a read-only state records no reads and refuses writes; it and a read-write state that
//!   buffered nothing need no validation (serialized at the snapshot).
//!
//! # Ordering and concurrency
//! DRAM only; one thread at a time. The engine's lock covers each call.

use std::sync::Arc;

use super::Committed;
use super::overlay;
use super::reads::ReadSet;
use super::unique::{check_at_commit, check_pk_free, check_unique_in_view};
use super::validate::validate;
use super::writes::WriteSet;
use crate::error::{Error, Result};
use crate::query::{Filter, LoweredScan};
use crate::schema::Table;
use crate::value::{Row, Value};

/// One transaction's state.
#[derive(Clone, Debug)]
pub(crate) struct TxnState {
    /// The snapshot it reads (C1).
    pub snapshot: u64,
    /// Read-only (T3).
    pub read_only: bool,
    /// What it read.
    pub reads: ReadSet,
    /// What it wrote.
    pub writes: WriteSet,
}

impl TxnState {
    /// A transaction reading `snapshot`.
    pub fn new(snapshot: u64, read_only: bool) -> Self {
        TxnState { snapshot, read_only, reads: ReadSet::new(!read_only), writes: WriteSet::new() }
    }

    /// Whether commit has nothing to check or apply (T3).
    pub fn wrote_nothing(&self) -> bool {
        self.read_only || self.writes.is_empty()
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            Err(Error::InvalidArgument("a read-only transaction cannot write".into()))
        } else {
            Ok(())
        }
    }

    /// The row with primary key `pk` in this transaction's view.
    pub fn get<C: Committed + ?Sized>(
        &mut self,
        committed: &C,
        table: &Arc<Table>,
        pk: &[u8],
    ) -> Result<Option<Row>> {
        let row = overlay::get(&self.writes, committed, table, pk, self.snapshot)?;
        self.reads.key(table, pk);
        Ok(row)
    }

    /// Scans this transaction's view.
    pub fn scan<C: Committed + ?Sized>(
        &mut self,
        committed: &C,
        table: &Arc<Table>,
        scan: &LoweredScan,
        filters: &[Filter],
    ) -> Result<Vec<Row>> {
        let found = overlay::scan(&self.writes, committed, table, scan, filters, self.snapshot)?;
        self.reads.range(table, scan.path, found.examined);
        Ok(found.rows)
    }

    /// Inserts a checked row (T2).
    pub fn insert<C: Committed + ?Sized>(
        &mut self,
        committed: &C,
        table: &Arc<Table>,
        row: Row,
    ) -> Result<()> {
        self.writable()?;
        let pk = table.encode_pk(&row);
        self.reads.key(table, &pk);
        check_pk_free(&self.writes, committed, table, &row, &pk, self.snapshot)?;
        check_unique_in_view(
            &mut self.reads,
            &self.writes,
            committed,
            table,
            &row,
            &pk,
            self.snapshot,
        )?;
        self.writes.buffer(table, pk, Some(row), true);
        Ok(())
    }

    /// Sets columns of the row with primary key `pk` (T2).
    pub fn update<C: Committed + ?Sized>(
        &mut self,
        committed: &C,
        table: &Arc<Table>,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()> {
        self.writable()?;
        self.reads.key(table, pk);
        let Some(mut row) = overlay::get(&self.writes, committed, table, pk, self.snapshot)? else {
            return Err(Error::NotFound { table: table.name().to_owned(), key: key.clone() });
        };
        for (pos, v) in assignments {
            if let Some(cell) = row.get_mut(*pos) {
                *cell = v.clone();
            }
        }
        check_unique_in_view(
            &mut self.reads,
            &self.writes,
            committed,
            table,
            &row,
            pk,
            self.snapshot,
        )?;
        self.writes.buffer(table, pk.to_vec(), Some(row), false);
        Ok(())
    }

    /// Deletes the row with primary key `pk` (T2).
    pub fn delete<C: Committed + ?Sized>(
        &mut self,
        committed: &C,
        table: &Arc<Table>,
        pk: &[u8],
        key: &Value,
    ) -> Result<()> {
        self.writable()?;
        self.reads.key(table, pk);
        if overlay::get(&self.writes, committed, table, pk, self.snapshot)?.is_none() {
            return Err(Error::NotFound { table: table.name().to_owned(), key: key.clone() });
        }
        self.writes.buffer(table, pk.to_vec(), None, false);
        Ok(())
    }

    /// The commit-time checks, in order: uniqueness against the latest committed data (U2,
    /// always), then backward validation (V1) if `validation` is on. The caller holds commits
    /// out from here until it has applied the write set (V3).
    pub fn check_commit<C: Committed + ?Sized>(
        &self,
        committed: &C,
        validation: bool,
    ) -> Result<()> {
        check_at_commit(&self.writes, committed, self.snapshot)?;
        if validation {
            validate(&self.reads, &self.writes, committed, self.snapshot)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::ByteRange;
    use crate::engine::common::testing::{MapView, row, table};
    use crate::query::{AccessPath, Direction};

    #[test]
    fn a_transaction_sees_its_writes_and_commits_only_if_valid() {
        let t = Arc::new(table());
        let mut v = MapView::new(&t);
        v.commit(row(1, 1, "x"), 1);
        let mut tx = TxnState::new(1, false);
        tx.insert(&v, &t, row(2, 2, "y")).expect("insert");
        assert!(matches!(tx.insert(&v, &t, row(2, 3, "z")), Err(Error::DuplicateKey { .. })));
        tx.update(&v, &t, &t.encode_pk(&row(1, 0, "")), &Value::I64(1), &[(1, Value::I64(7))])
            .expect("update");
        let all = LoweredScan {
            path: AccessPath::Primary,
            range: ByteRange::all(),
            direction: Direction::Ascending,
            limit: None,
        };
        assert_eq!(tx.scan(&v, &t, &all, &[]).ok(), Some(vec![row(1, 7, "x"), row(2, 2, "y")]));
        assert!(tx.check_commit(&v, true).is_ok());
        // A concurrent commit of row 1 dooms it; without validation only the constraint
        // checks run, and they pass.
        v.commit(row(1, 1, "x2"), 2);
        assert!(matches!(tx.check_commit(&v, true), Err(Error::Conflict { .. })));
        assert!(tx.check_commit(&v, false).is_ok());
    }

    #[test]
    fn read_only_records_nothing_and_refuses_writes() {
        let t = Arc::new(table());
        let v = MapView::new(&t);
        let mut r = TxnState::new(0, true);
        assert_eq!(r.get(&v, &t, b"k").ok(), Some(None));
        assert!(r.reads.len() == 0 && r.wrote_nothing());
        assert!(matches!(r.insert(&v, &t, row(1, 1, "a")), Err(Error::InvalidArgument(_))));
        assert!(matches!(r.delete(&v, &t, b"k", &Value::I64(1)), Err(Error::InvalidArgument(_))));
    }
}
