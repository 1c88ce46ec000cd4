//! Internals for Ferrite's own tests, tester and benchmarks; exempt from semver.
//!
//! Engine-related items: the reference engine's test knob ([`ReferenceConfig`]), set in
//! [`Options`] like any per-engine setting, so a test database is built by the registry
//! through `Database::create` like every other.

use crate::db::Database;
use crate::options::{EngineKind, Options};

pub use crate::options::ReferenceConfig;

/// `options` with the reference engine's settings replaced by `config`.
pub fn with_reference_config(options: Options, config: ReferenceConfig) -> Options {
    options.with_reference(config)
}

/// A new in-memory reference database built with `config` (the reference engine ignores the
/// path and keeps nothing).
pub fn reference_database(config: ReferenceConfig) -> crate::Result<Database> {
    let options = with_reference_config(Options::new().engine(EngineKind::Reference), config);
    Database::create("in-memory", options)
}

/// Runs a persistent engine (the one chosen in `options`) on a pre-made pool set, e.g. a
/// simulated one of the crash tester: `create` formats a new database on the empty set;
/// otherwise the set is opened and the database recovered. The reference engine returns
/// `Unsupported`.
pub fn database_on_pool_set(
    set: ferrite_pmem::PoolSet,
    options: &Options,
    create: bool,
) -> crate::Result<Database> {
    Ok(Database::from_engine(crate::engine::registry::on_pool_set(set, options, create)?))
}

/// Creates a new database (SOFORT; other engines return `Unsupported`) on `alloc`, a
/// persistent allocator already formatted on its pool set whose root pointer is null, e.g. one
/// on which a crash target allocated, filled and freed blocks first, so that the database's
/// blocks reuse memory holding stale bytes. The allocator's slots are used, not
/// `SofortConfig::alloc_slots`.
pub fn database_on_allocator(
    alloc: std::sync::Arc<crate::alloc::PAllocator>,
    options: &Options,
) -> crate::Result<Database> {
    Ok(Database::from_engine(crate::engine::registry::on_allocator(alloc, options)?))
}

/// Runs the paged engine of the file store ([`crate::PagedStore::File`]) on a page file and
/// a log file, e.g. the crash tester's simulated block files: `create` formats a new database
/// in the empty files; otherwise it is opened and recovered. Other engines return
/// `Unsupported`.
pub fn database_on_block_files(
    pages: ferrite_pmem::BlockFile,
    log: ferrite_pmem::BlockFile,
    options: &Options,
    create: bool,
) -> crate::Result<Database> {
    Ok(Database::from_engine(crate::engine::registry::on_block_files(pages, log, options, create)?))
}

/// Runs NVWAL on the paged engine's file store ([`crate::PagedStore::File`]) on a page file
/// and a pool set for its log, e.g. the crash tester's simulated block file and pool set on
/// one domain: `create` formats a new database; otherwise it is opened and recovered. Other
/// protocols return `InvalidArgument`, other engines `Unsupported`.
pub fn database_on_block_file_and_pool_set(
    pages: ferrite_pmem::BlockFile,
    log: ferrite_pmem::PoolSet,
    options: &Options,
    create: bool,
) -> crate::Result<Database> {
    Ok(Database::from_engine(crate::engine::registry::on_block_file_and_pool_set(
        pages, log, options, create,
    )?))
}

/// The SOFORT storage core, for tests and tools that work below the `Database` API.
pub mod sofort {
    pub use crate::engine::sofort::{
        CheckReport, DEFAULT_SLOTS, HEAP_CHUNK, INF, K_MIN_TS, KeyState, MAX_SLOTS, PTable,
        RecoveryReport, SofortError, SofortOptions, SofortResult, SofortStore, TableRef, TxHandle,
    };
}
