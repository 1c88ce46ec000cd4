//! The suite must catch a broken engine: the reference engine with commit-time validation
//! switched off (`internals::ReferenceConfig { validation: false }`) lets lost updates, write
//! skew and phantoms through, and these tests assert that the suite reports each of them.
//! The same scenarios pass on the intact engine (`tests/reference_engine.rs`).

mod conformance;

use std::path::Path;

use conformance::{Subject, isolation, model, run_cases};
use ferrite::internals::{ReferenceConfig, reference_database};

fn broken(_dir: &Path) -> ferrite::Result<ferrite::Database> {
    Ok(reference_database(ReferenceConfig { validation: false }))
}

const BROKEN: Subject = Subject { name: "broken", create: broken, open: None };

/// Cases that only validation protects; every one must fail on the broken engine.
const NEED_VALIDATION: &[&str] = &[
    "lost_update",
    "lost_update_second_writer_commits_first",
    "write_skew",
    "write_skew_through_predicate",
    "phantom_primary_range",
    "phantom_index_range",
    "phantom_unindexed_predicate",
    "phantom_limited_scan",
    "delete_update_conflict",
];

#[test]
fn isolation_cases_fail_without_validation() {
    let failures = run_cases(&BROKEN, isolation::CASES);
    let failed: Vec<&str> = failures.iter().map(|(name, _)| *name).collect();
    for case in NEED_VALIDATION {
        assert!(failed.contains(case), "the suite did not catch the broken engine in {case}");
    }
    // What snapshots and the commit-time uniqueness check guarantee still holds without
    // validation.
    for case in [
        "dirty_read",
        "read_only_snapshot",
        "disjoint_writers_both_commit",
        "concurrent_insert_same_key",
        "concurrent_unique_value",
    ] {
        assert!(!failed.contains(&case), "{case} should not depend on validation");
    }
}

#[test]
fn interleaved_model_fails_without_validation() {
    // A fixed seed keeps this deterministic; any seed finds an anomaly within a few cases.
    let result = model::interleaved_with(&BROKEN, 0x5eed, 64);
    let message = result.expect_err("the interleaved model test accepted the broken engine");
    assert!(message.contains("not serializable"), "unexpected failure: {message}");
}

#[test]
fn serial_model_passes_without_validation() {
    // Without concurrency there is nothing to validate: the broken engine is still correct.
    model::serial_with(&BROKEN, 0x5eed, 16).unwrap_or_else(|e| panic!("{e}"));
}
