//! Engines, as siblings behind one interface.
//!
//! [`crate::Database`] is a thin typed layer: it checks every request against the schema,
//! plans `select`s, encodes keys ([`crate::encoding`]) and applies projections, then dispatches
//! to an `Arc<dyn Engine>` (dynamic dispatch keeps the typed layer free of engine type
//! parameters; one virtual call per operation is noise next to a B-tree walk).
//!
//! Layout (conventions §1: an engine never imports another engine):
//! - [`api`]: the [`Engine`] and [`EngineTxn`] traits. It imports no engine.
//! - [`registry`]: builds the engine chosen in [`crate::Options`]; the only module that names
//!   every engine.
//! - [`common`]: what every serializable engine needs, generic over the engine's committed
//!   data ([`common::Committed`]): the write buffer overlaid on reads and scans, read-set and
//!   scan-range tracking, backward validation, primary-key and unique-index checks, and
//!   secondary-index maintenance. Engines may use it; it uses no engine.
//! - [`reference`]: the in-memory reference engine (the conformance suite's oracle).
//! - `sofort/`: the SOFORT column store.
//! - [`paged`]: the paged engine, a slotted-page B+-tree with its commit protocols under
//!   `paged/protocol/` (rollback journal, WAL).
//!
//! Adding an engine: a module here implementing [`Engine`] + [`EngineTxn`], a variant of
//! [`crate::EngineKind`] (one arm in its `info`), and one line in [`registry::open`]. The
//! conformance suite and the benchmark harness iterate [`crate::EngineKind::ALL`] and pick it
//! up by themselves; engine settings go into [`crate::Options`] (see
//! [`crate::Options::engine_settings`]).
//!
//! # Invariants, ordering, concurrency
//! See [`api`] for what every engine must keep, and each engine's module docs for its own.

pub(crate) mod api;
pub(crate) mod common;
pub(crate) mod paged;
pub(crate) mod reference;
pub(crate) mod registry;
pub(crate) mod sofort;

pub(crate) use api::{CommitMode, Engine, EngineTxn};
