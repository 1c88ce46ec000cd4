//! The conformance suite on the paged engine under each commit protocol (`paged-journal`,
//! `paged-wal`; `docs/design/paged.md`), reopened like every persistent engine. The paged
//! engine is not in `EngineKind::ALL` yet, so `tests/engines.rs` does not pick it up.

mod conformance;

use std::path::Path;
use std::sync::Arc;

use conformance::{Factory, Subject};
use ferrite::{Database, EngineKind, Options};

fn paged() -> Vec<Subject> {
    EngineKind::PAGED
        .iter()
        .map(|&kind| {
            let options = move || {
                Options::new()
                    .engine(kind)
                    .pmem(ferrite::pmem::Options::new().segment_size(2 << 20))
            };
            let create: Factory =
                Arc::new(move |dir: &Path| Database::create(dir.join("db"), options()));
            let open: Factory =
                Arc::new(move |dir: &Path| Database::open(dir.join("db"), options()));
            Subject { name: kind.name(), create, open: Some(open) }
        })
        .collect()
}

conformance_suite!(subjects = paged());
