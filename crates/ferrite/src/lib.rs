//! Ferrite: an embedded, transactional storage engine for persistent memory.
//!
//! Every Ferrite engine sits behind one typed API, so that the same workloads, benchmarks and
//! crash checks run on all of them:
//!
//! - [`Database::create`] / [`Database::open`] with the engine chosen in [`Options`]
//!   ([`EngineKind`]);
//! - typed tables ([`TableSchema`]: `i64`, `f64`, `bytes`, `str` columns, a one-column primary
//!   key, unique and non-unique secondary indexes);
//! - [`Database::begin`] for serializable read-write [`Transaction`]s and
//!   [`Database::begin_read`] for snapshot [`ReadTransaction`]s, with `get`, `select`
//!   (conjunctions of [`Predicate`]s and a [`Projection`]), ordered [`Scan`]s, `insert`,
//!   `update`, `delete`; code that only reads takes either through the [`Read`] trait;
//! - [`Transaction::commit`] (durable on return) and [`Transaction::commit_deferred`] with
//!   [`Database::wait_durable`] for engines that batch commits;
//! - typed [`Error`]s, of which only `Conflict` and `Busy` are retryable.
//!
//! The contract (isolation, durability acknowledgement, error semantics, what each engine does
//! to concurrent transactions) is written down in `docs/design/api.md`. The engines:
//! [`EngineKind::Sofort`], **the default**, persistent (a pool-set directory on persistent
//! memory or a DAX/tmpfs file system; a commit is durable when it returns; `open` recovers);
//! and [`EngineKind::Reference`], in memory and **not persistent**, the oracle of the
//! conformance suite (`tests/conformance/`). The persistence layer is [`ferrite_pmem`],
//! re-exported as [`pmem`].
//!
//! ```
//! use ferrite::{Database, Error, Options, Predicate, Projection, Scan, TableSchema, Type, row};
//!
//! // A new database directory (SOFORT, the default engine); small 8 MiB pool segments.
//! let dir = std::env::temp_dir().join(format!("ferrite-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let options = Options::default().pmem(ferrite::pmem::Options::new().segment_size(8 << 20));
//! let db = Database::create(&dir, options)?;
//! db.create_table(
//!     TableSchema::new("account")
//!         .column("id", Type::I64)
//!         .column("owner", Type::Str)
//!         .column("balance", Type::F64)
//!         .primary_key("id")
//!         .index("by_owner", ["owner"]),
//! )?;
//!
//! // A transfer, retried on conflict.
//! let mut tx = db.begin()?;
//! tx.insert("account", row![1, "ann", 100.0])?;
//! tx.insert("account", row![2, "bob", 5.0])?;
//! tx.commit()?;
//! loop {
//!     let mut tx = db.begin()?;
//!     let from = tx.get("account", 1)?.and_then(|r| r[2].as_f64()).unwrap_or(0.0);
//!     let to = tx.get("account", 2)?.and_then(|r| r[2].as_f64()).unwrap_or(0.0);
//!     tx.update("account", 1, [("balance", from - 10.0)])?;
//!     tx.update("account", 2, [("balance", to + 10.0)])?;
//!     match tx.commit() {
//!         Err(e) if e.is_retryable() => continue,
//!         other => break other?,
//!     }
//! }
//!
//! let mut r = db.begin_read()?;
//! let bobs = r.select("account", &[Predicate::eq("owner", "bob")], &Projection::columns(["balance"]))?;
//! assert_eq!(bobs, vec![row![15.0]]);
//! let richest_first = r.scan("account", &Scan::primary().descending().limit(1))?;
//! assert_eq!(richest_first.len(), 1);
//! drop(r);
//! db.close()?;
//! std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Error>(())
//! ```
#![forbid(unsafe_code)]

pub use ferrite_pmem as pmem;

// Building blocks: deliberately public with documented APIs (ARCHITECTURE.md, "Public surface").
pub mod alloc;
mod db;
mod encoding;
mod engine;
mod error;
pub mod fptree;
mod options;
mod query;
mod schema;
pub mod storage;
mod txn;
mod value;

pub use db::{Database, RecoveryReport, UnfinishedTransaction};
pub use engine::sofort::adaptive as adaptive_recovery;
pub use engine::sofort::adaptive::Strategy as RecoveryStrategy;
pub use engine::sofort::{LookupHelp, RecoveryMode};
pub use error::{Error, Result, SchemaError};
pub use options::{
    Concurrency, DEFAULT_UNFINISHED_TIMEOUT, EngineKind, IndexPlacementOverride, NvwalSync,
    Options, PagedConfig, PagedProtocol, PagedStore, SofortConfig, SofortIndexPlacement,
    WhileWriting,
};
pub use query::{Direction, Predicate, Projection, Scan};
pub use schema::{Column, IndexSchema, PRIMARY, TableSchema};
pub use txn::{CommitTicket, Read, ReadTransaction, Transaction};
pub use value::{Key, Row, Type, Value};

#[doc(hidden)]
pub mod internals;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn thread_safety_contract() {
        assert_send_sync::<Database>();
        assert_send::<Transaction>();
        assert_send::<ReadTransaction>();
        assert_send_sync::<Error>();
    }
}
