//! Internals for Ferrite's own tests, tester and benchmarks; exempt from semver.

use std::sync::Arc;

use crate::db::Database;
use crate::engine::reference::{Config, Reference};

/// Knobs of the reference engine that no user should turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReferenceConfig {
    /// Validate read sets and write-write conflicts at commit. `false` builds a **broken**
    /// engine (lost updates, write skew, phantoms) that the conformance suite must reject.
    pub validation: bool,
}

impl Default for ReferenceConfig {
    fn default() -> Self {
        ReferenceConfig { validation: true }
    }
}

/// A new in-memory reference database built with `config`.
pub fn reference_database(config: ReferenceConfig) -> Database {
    Database::from_engine(Arc::new(Reference::new(Config { validation: config.validation })))
}

/// The SOFORT storage core (issue [E1] phase 1), reachable for tests and tools until the
/// engine glue puts it behind the `Database` API.
pub mod sofort {
    pub use crate::engine::sofort::{
        CheckReport, DEFAULT_SLOTS, HEAP_CHUNK, INF, K_MIN_TS, MAX_SLOTS, PTable, RecoveryReport,
        SofortError, SofortOptions, SofortResult, SofortStore, TableRef, TxHandle,
    };
}
