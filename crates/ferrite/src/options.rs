//! Database options: which engine, and the persistence layer's options.
//!
//! Every engine is chosen here ([`EngineKind`]) and describes what it does to concurrent
//! transactions ([`Concurrency`]) and whether it keeps anything across a restart
//! ([`EngineKind::is_persistent`]). Environment variables never reach this type directly.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The engine behind a [`crate::Database`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// The in-memory reference engine: **not persistent** (nothing survives the process), a
    /// `BTreeMap` per table and index, multi-version snapshots and optimistic, serializable
    /// validation at commit. It is the test oracle and the baseline of the benchmark harness.
    #[default]
    Reference,
}

impl EngineKind {
    /// Every engine this build knows.
    pub const ALL: &'static [EngineKind] = &[EngineKind::Reference];

    /// Stable lower-case name (`reference`).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Reference => "reference",
        }
    }

    /// Whether committed data survives closing the database (and a crash). `false` for
    /// [`EngineKind::Reference`]: its "durable" means "committed in memory".
    pub fn is_persistent(self) -> bool {
        match self {
            EngineKind::Reference => false,
        }
    }

    /// What the engine does to a transaction that starts or reads while a read-write
    /// transaction is open.
    pub fn concurrency(self) -> Concurrency {
        match self {
            EngineKind::Reference => {
                Concurrency { writers: WhileWriting::Proceed, readers: WhileWriting::Proceed }
            }
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineKind {
    type Err = Error;

    /// Parses a name as [`EngineKind::name`] prints it (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Error> {
        EngineKind::ALL.iter().copied().find(|k| k.name().eq_ignore_ascii_case(s)).ok_or_else(
            || {
                let names: Vec<&str> = EngineKind::ALL.iter().map(|k| k.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown engine {s:?} (expected one of {})",
                    names.join(", ")
                ))
            },
        )
    }
}

/// What a transaction meets while another, read-write transaction is open.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhileWriting {
    /// It proceeds without waiting. A read-only transaction reads its snapshot; a read-write
    /// transaction runs optimistically, and a conflict aborts one of the two (see
    /// `docs/design/api.md` for which).
    Proceed,
    /// `begin` (or the first conflicting operation) returns [`Error::Busy`] at once.
    Busy,
    /// `begin` (or the operation) waits until the writer finishes. A thread must then never
    /// hold two transactions at once: it would wait for itself.
    Block,
}

/// An engine's concurrency contract (see [`EngineKind::concurrency`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Concurrency {
    /// What a second read-write transaction (`begin`) meets while one is open.
    pub writers: WhileWriting,
    /// What a read-only transaction (`begin_read`) meets while a read-write one is open.
    pub readers: WhileWriting,
}

/// Options of a database: the engine and the persistence layer's options.
///
/// ```
/// use ferrite::{EngineKind, Options};
/// let opts = Options::new()
///     .engine("reference".parse()?)
///     .pmem(ferrite::pmem::Options::new().layout("my-app"));
/// assert_eq!(opts.engine_kind(), EngineKind::Reference);
/// # Ok::<(), ferrite::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Options {
    engine: EngineKind,
    pmem: ferrite_pmem::Options,
}

impl Options {
    /// Default options: the default engine and default persistence options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Chooses the engine.
    pub fn engine(mut self, engine: EngineKind) -> Self {
        self.engine = engine;
        self
    }

    /// Sets the persistence layer's options (durability mode, flush instruction, layout name),
    /// used by persistent engines when they create or open their pools.
    pub fn pmem(mut self, pmem: ferrite_pmem::Options) -> Self {
        self.pmem = pmem;
        self
    }

    /// The chosen engine.
    pub fn engine_kind(&self) -> EngineKind {
        self.engine
    }

    /// The persistence layer's options.
    pub fn pmem_options(&self) -> &ferrite_pmem::Options {
        &self.pmem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &k in EngineKind::ALL {
            assert_eq!(k.name().parse::<EngineKind>().ok(), Some(k));
            assert_eq!(k.name().to_uppercase().parse::<EngineKind>().ok(), Some(k));
        }
        assert!(matches!("nope".parse::<EngineKind>(), Err(Error::InvalidArgument(_))));
        assert!(!EngineKind::Reference.is_persistent());
    }
}
