//! The conformance suite on SOFORT with instant recovery (`docs/design/sofort.md` §15): every
//! reopen in the suite (the durability group, the serial model test) returns before the
//! indexes are rebuilt. Two subjects:
//! - `sofort-instant`: the background rebuild runs freely (it races with the suite's reads);
//! - `sofort-instant-held`: the rebuild is held at watermark 0 (the `rebuild_hold` test hook),
//!   so every read after a reopen goes through the other access path (the partial index plus a
//!   scan of the unindexed rows) and every write meets pending indexes.

mod conformance;

use conformance::Subject;
use ferrite::{EngineKind, Options, RecoveryMode, SofortConfig};

fn instant(name: &'static str, hold: Option<u64>) -> Subject {
    let options = move || {
        Options::new().pmem(ferrite::pmem::Options::new().segment_size(2 << 20)).sofort(
            SofortConfig {
                recovery: RecoveryMode::Instant,
                rebuild_hold: hold,
                ..SofortConfig::default()
            },
        )
    };
    let mut subject = conformance::engines_with(options)
        .into_iter()
        .find(|s| s.name == EngineKind::Sofort.name())
        .expect("SOFORT is in every build");
    subject.name = name;
    subject
}

conformance_suite!(
    subjects = vec![instant("sofort-instant", None), instant("sofort-instant-held", Some(0))]
);
