//! Baseline engines that Ferrite's benchmarks run side by side with Ferrite's own engines, each
//! configured to be its best honest self and reporting the settings it actually runs with
//! (conventions §6):
//!
//! | Module | Engine | Transactions | Durable on commit |
//! |---|---|---|---|
//! | [`sqlite`] | SQLite (bundled amalgamation via `rusqlite`), WAL or rollback journal, `synchronous` FULL or NORMAL | `BEGIN IMMEDIATE`/`BEGIN` … `COMMIT`, prepared statements | per [`sqlite::SqliteConfig::durability`] |
//! | [`lmdb`] | LMDB (bundled C sources via `lmdb-master-sys`) | LMDB write/read transactions | yes: [`lmdb::DURABILITY`] |
//! | `pmdk` (feature `pmdk`) | PMDK libpmemobj (Debian's library, C shim) | one pmemobj transaction per write batch | yes: `pmdk::DURABILITY` |
//!
//! Every engine offers the same small shape: tables of 8-byte keys (below 2^63) and byte
//! values, read-write transactions as closures (`write(|txn| …)`) that commit when the closure
//! returns `Ok` and roll back otherwise, read-only transactions (`read(|txn| …)`), and inside a
//! transaction `get`, `insert` (`false` if the key exists), `update` and `delete` (`false` if it
//! does not), ordered `scan` from a key (LMDB also `scan_range` up to an end key), and `count`.
//! SQLite can also be created with the caller's schema (`Sqlite::create_with_schema`) and run
//! any prepared statement inside its transactions (`SqliteTxn::execute`, `SqliteTxn::query`),
//! which the typed OLTP workloads of `ferrite-bench` use.
//!
//! This crate depends on no Ferrite crate; it is the only crate besides `ferrite-pmem` that may
//! contain `unsafe` (FFI), and every `unsafe` block carries a `SAFETY` comment.

mod error;
pub mod lmdb;
#[cfg(feature = "pmdk")]
pub mod pmdk;
pub mod sqlite;

pub use error::{Error, Result};

/// Whether this build includes the PMDK baseline (cargo feature `pmdk`).
pub const PMDK_AVAILABLE: bool = cfg!(feature = "pmdk");
