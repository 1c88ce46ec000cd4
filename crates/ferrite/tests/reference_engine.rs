//! The conformance suite on the reference engine (in memory, not persistent).

mod conformance;

use ferrite::{Database, EngineKind, Options};

conformance_suite!(
    reference,
    create = |dir| Database::create(dir.join("db"), Options::new().engine(EngineKind::Reference)),
    open = None,
);
