//! The engine interface behind [`crate::Database`]: the [`Engine`] and [`EngineTxn`] traits.
//!
//! This file names no engine: engines implement these traits in their own modules, and
//! [`super::registry`] is the one place that builds each of them.
//!
//! # Invariants an engine must keep
//! - Rows and keys reaching an engine are checked: a row has one value per column, each of the
//!   column's type; a key range is encoded with [`crate::encoding`] (E1, E2).
//! - A failed operation has no effect; [`crate::Error::Conflict`] dooms the transaction (every
//!   later call returns it again; the typed layer enforces that part).
//! - Read-write transactions are serializable; read-only transactions read a consistent
//!   snapshot of committed data. A transaction sees its own writes.
//! - `commit(CommitMode::Durable)` returns once the transaction is durable (for a persistent
//!   engine: would survive a crash); `CommitMode::Deferred` may return earlier with a ticket,
//!   and `wait_durable(ticket)` returns once that transaction and every transaction it depends
//!   on are durable.
//!
//! # Ordering (durability)
//! Each engine documents its own; this interface only fixes when `commit` and `wait_durable`
//! return (above).
//!
//! # Concurrency
//! `Engine: Send + Sync`; `EngineTxn: Send`, used by one thread at a time. What a transaction
//! meets while a writer is open is the engine's [`crate::Concurrency`].

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::options::EngineKind;
use crate::query::{Filter, LoweredScan};
use crate::schema::Table;
use crate::value::{Row, Value};

/// How `commit` acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitMode {
    /// Return once the transaction is durable.
    Durable,
    /// Return once the transaction is committed (visible, its outcome decided); durability may
    /// follow later, awaited with [`Engine::wait_durable`].
    Deferred,
}

/// A database engine.
pub(crate) trait Engine: Send + Sync + fmt::Debug {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;

    /// Adds a checked table. DDL runs outside transactions; the engine documents when it is
    /// durable. Errors: `Schema(TableExists)`.
    fn create_table(&self, table: Table) -> Result<()>;

    /// The table `name`. Errors: `Schema(UnknownTable)`.
    fn table(&self, name: &str) -> Result<Arc<Table>>;

    /// The names of every table, sorted.
    fn table_names(&self) -> Result<Vec<String>>;

    /// Starts a read-write transaction.
    fn begin(&self) -> Result<Box<dyn EngineTxn>>;

    /// Starts a read-only transaction.
    fn begin_read(&self) -> Result<Box<dyn EngineTxn>>;

    /// Returns once the transaction that got commit sequence number `seq` is durable.
    fn wait_durable(&self, seq: u64) -> Result<()>;

    /// Makes everything committed durable and reports any error; called by
    /// `Database::close`.
    fn close(&self) -> Result<()>;

    /// Checks the engine's stored invariants (run it with no transaction open) and returns a
    /// one-line summary of what it checked. Errors: `Corrupted` naming the first broken
    /// invariant. With transactions open, their in-flight rows may be reported as broken.
    fn check(&self) -> Result<String>;

    /// What the open that built this engine recovered and how long it took (`None`: created,
    /// or an engine that keeps nothing).
    fn recovery_report(&self) -> Option<crate::db::RecoveryReport> {
        None
    }

    /// Starts a continuable read-write transaction (SOFORT design §14): each statement is
    /// durable at its end, and after a crash the transaction can be resumed.
    fn begin_continuable(&self) -> Result<Box<dyn EngineTxn>> {
        Err(unsupported(self.kind()))
    }

    /// The unfinished continuable transactions `open` found and nobody claimed yet.
    fn unfinished(&self) -> Result<Vec<crate::db::UnfinishedTransaction>> {
        Err(unsupported(self.kind()))
    }

    /// Claims unfinished transaction `id`. Errors: `UnknownTransaction`.
    fn resume(&self, id: u64) -> Result<Box<dyn EngineTxn>> {
        let _ = id;
        Err(unsupported(self.kind()))
    }

    /// Aborts every unfinished transaction whose timeout has passed at `now`; returns their
    /// ids.
    fn reap_unfinished(&self, now: std::time::Instant) -> Result<Vec<u64>> {
        let _ = now;
        Err(unsupported(self.kind()))
    }

    /// Returns once recovery is complete (background index rebuilds ended). Errors: an index
    /// that could not be rebuilt.
    fn wait_recovered(&self) -> Result<()> {
        Ok(())
    }

    /// Test hook: holds background index rebuilds at `hold` rows (see
    /// `Database::hold_rebuild`).
    fn hold_rebuild(&self, _hold: Option<u64>) {}

    /// Test hook: the past workload's sampled counts now (see `Database::past_workload`).
    fn past_workload(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// Test hook: writes the past workload's block now (see
    /// `Database::persist_past_workload`).
    fn persist_past_workload(&self) -> Result<()> {
        Ok(())
    }
}

fn unsupported(kind: EngineKind) -> crate::Error {
    crate::Error::Unsupported(format!("the {} engine has no continuable transactions", kind.name()))
}

/// One transaction of an engine. Writes are only called on read-write transactions.
///
/// Tables come as the `Arc` the engine handed out ([`Engine::table`]), so that a transaction
/// can keep the schemas of what it read and wrote until commit without a catalog lookup.
pub(crate) trait EngineTxn: Send + fmt::Debug {
    /// The row with primary key `pk` (encoded), as this transaction sees it.
    fn get(&mut self, table: &Arc<Table>, pk: &[u8]) -> Result<Option<Row>>;

    /// The rows of `scan`'s range (in its order) that pass every filter, at most `scan.limit`.
    fn scan(
        &mut self,
        table: &Arc<Table>,
        scan: &LoweredScan,
        filters: &[Filter],
    ) -> Result<Vec<Row>>;

    /// Inserts a checked row. Errors: `DuplicateKey` (primary or unique index).
    fn insert(&mut self, table: &Arc<Table>, row: Row) -> Result<()>;

    /// Sets columns of the row with primary key `pk` (`key` is its value, for errors); the
    /// assignments are checked and never touch the primary key. Errors: `NotFound`,
    /// `DuplicateKey` (unique index).
    fn update(
        &mut self,
        table: &Arc<Table>,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()>;

    /// Deletes the row with primary key `pk`. Errors: `NotFound`.
    fn delete(&mut self, table: &Arc<Table>, pk: &[u8], key: &Value) -> Result<()>;

    /// Commits; returns the commit sequence number (for `wait_durable`).
    fn commit(self: Box<Self>, mode: CommitMode) -> Result<u64>;

    /// Rolls back. Dropping an unfinished transaction must do the same.
    fn abort(self: Box<Self>);
}
