//! The engine registry: builds the engine chosen in [`Options`]. This is the only module that
//! names every engine; adding one is one line here and one variant of [`EngineKind`].
//!
//! # Invariants
//! - Every [`EngineKind`] has exactly one builder, and it gets the whole [`Options`] (its own
//!   settings included); `create = true` makes a new database, `false` opens an existing one
//!   (recovering it) or fails with a typed error.
//!
//! # Ordering and concurrency
//! None of its own; each engine documents what creating and opening persist.

use std::path::Path;
use std::sync::Arc;

use super::api::Engine;
use super::reference;
use crate::error::Result;
use crate::options::{EngineKind, Options};

/// Creates (`create = true`) or opens the engine chosen in `options` at `path`.
pub(crate) fn open(path: &Path, options: &Options, create: bool) -> Result<Arc<dyn Engine>> {
    match options.engine_kind() {
        EngineKind::Reference => reference::build(path, options, create),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_the_engine_it_names() {
        for &kind in EngineKind::ALL {
            let dir = ferrite_pmem::internals::testing::TestDir::new(&format!("registry-{kind}"));
            let engine = open(&dir.path().join("db"), &Options::new().engine(kind), true);
            assert_eq!(engine.map(|e| e.kind()).ok(), Some(kind));
        }
    }
}
