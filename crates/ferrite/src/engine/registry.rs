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
use super::{paged, reference, sofort};
use crate::error::{Error, Result};
use crate::options::{EngineKind, Options};

/// Creates (`create = true`) or opens the engine chosen in `options` at `path`.
pub(crate) fn open(path: &Path, options: &Options, create: bool) -> Result<Arc<dyn Engine>> {
    let kind = options.engine_kind();
    let built = match kind {
        EngineKind::Sofort => sofort::engine::build(path, options, create),
        EngineKind::Reference => reference::build(path, options, create),
        EngineKind::Paged { .. } => paged::engine::build(path, options, create),
    };
    match built {
        // A refused open of another engine's database says so ([R2]): without this, each
        // engine met the other's bytes where it expected its own and called them damage.
        Err(e) if !create && !matches!(e, Error::Incompatible { .. }) => match found_engine(path) {
            Some(found) if !found.1(kind) => Err(Error::Incompatible {
                what: format!(
                    "a {} database, opened with the {kind} engine: open it with the engine \
                         that created it ({e})",
                    found.0
                ),
                at: path.display().to_string(),
            }),
            _ => Err(e),
        },
        other => other,
    }
}

/// Which engine's database the files at `path` hold, as far as their first words tell, with
/// a test of whether an engine kind is that engine. Reads bytes only (the set is not opened:
/// a refused open changes nothing). `None`: not recognised.
#[allow(clippy::type_complexity)]
fn found_engine(path: &Path) -> Option<(&'static str, fn(EngineKind) -> bool)> {
    fn paged(k: EngineKind) -> bool {
        matches!(k, EngineKind::Paged { .. })
    }
    fn sofort(k: EngineKind) -> bool {
        k == EngineKind::Sofort
    }
    if path.join(paged::store::file::PAGES_FILE).is_file() {
        return Some(("paged-engine (file store)", paged));
    }
    let mut first = [0u8; 8];
    ferrite_pmem::PoolSet::peek_data(path, &mut first).ok()?;
    match &first {
        // SOFORT's pool starts with the persistent allocator's anchor; the paged engine's PM
        // store with its directory.
        b"FERRPALC" => Some(("SOFORT", sofort)),
        b"FERRPGD1" => Some(("paged-engine (PM store)", paged)),
        _ => None,
    }
}

/// Runs the persistent engine chosen in `options` on a pre-made pool set (the crash tester's
/// simulated ones): `create` formats a new database on the empty set, otherwise it is opened
/// and recovered. Engines that keep nothing return `Unsupported`.
pub(crate) fn on_pool_set(
    set: ferrite_pmem::PoolSet,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    match options.engine_kind() {
        EngineKind::Sofort => sofort::engine::on_pool_set(set, options, create),
        EngineKind::Reference => {
            Err(Error::Unsupported("the reference engine keeps nothing in a pool set".into()))
        }
        EngineKind::Paged { .. } => paged::engine::on_pool_set(set, options, create),
    }
}

/// Creates the engine chosen in `options` on `alloc`, a persistent allocator already formatted
/// on its pool set, with a null root (crash tests of creation over recycled memory). Only
/// SOFORT keeps its data in that allocator; other engines return `Unsupported`.
pub(crate) fn on_allocator(
    alloc: Arc<crate::alloc::PAllocator>,
    options: &Options,
) -> Result<Arc<dyn Engine>> {
    match options.engine_kind() {
        EngineKind::Sofort => sofort::engine::on_allocator(alloc, options),
        kind => Err(Error::Unsupported(format!("the {kind} engine does not use the allocator"))),
    }
}

/// Runs the engine chosen in `options` on a page file and a log file (the paged engine's
/// file store; the crash tester's simulated block files). Engines that keep no files return
/// `Unsupported`.
pub(crate) fn on_block_files(
    pages: ferrite_pmem::BlockFile,
    log: ferrite_pmem::BlockFile,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    match options.engine_kind() {
        EngineKind::Paged { .. } => paged::engine::on_block_files(pages, log, options, create),
        kind => Err(Error::Unsupported(format!("the {kind} engine keeps nothing in block files"))),
    }
}

/// Runs the engine chosen in `options` on a page file and a PM pool set for its log (NVWAL on
/// the paged engine's file store; the crash tester's simulated block file and pool set on one
/// domain). Other engines return `Unsupported`.
pub(crate) fn on_block_file_and_pool_set(
    pages: ferrite_pmem::BlockFile,
    log: ferrite_pmem::PoolSet,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    match options.engine_kind() {
        EngineKind::Paged { .. } => {
            paged::engine::on_block_file_and_pool_set(pages, log, options, create)
        }
        kind => Err(Error::Unsupported(format!("the {kind} engine keeps nothing in block files"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_the_engine_it_names() {
        for &kind in EngineKind::ALL {
            let dir = ferrite_pmem::internals::testing::TestDir::new(&format!("registry-{kind}"));
            let pm = ferrite_pmem::Options::new().segment_size(1 << 20);
            let engine = open(&dir.path().join("db"), &Options::new().engine(kind).pmem(pm), true);
            assert_eq!(engine.map(|e| e.kind()).ok(), Some(kind));
        }
    }
}
