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

/// The SOFORT storage core (issue [E1] phase 1), reachable for tests and tools until the
/// engine glue puts it behind the `Database` API.
pub mod sofort {
    pub use crate::engine::sofort::{
        CheckReport, DEFAULT_SLOTS, HEAP_CHUNK, INF, K_MIN_TS, MAX_SLOTS, PTable, RecoveryReport,
        SofortError, SofortOptions, SofortResult, SofortStore, TableRef, TxHandle,
    };
}
