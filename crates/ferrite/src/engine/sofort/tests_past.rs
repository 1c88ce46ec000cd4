//! Unit tests of the persisted past workload (`past.rs`, design §16.1): the ranking after a
//! reopen follows the past, and a damaged block is ignored, reported and replaced.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite_pmem::PoolSet;
use ferrite_pmem::internals::testing::TestDir;

use super::tests_instant::{group, pool_opts, populated};
use super::*;

fn open(path: &std::path::Path, opts: RecoveryOptions) -> (SofortStore, RecoveryReport) {
    SofortStore::open_with(Arc::new(PoolSet::open(path, &pool_opts()).expect("pool")), &opts)
        .expect("open")
}

/// Held at 0 with the ranked one-thread strategy `rk.Q1.R1`.
fn ranked_held() -> RecoveryOptions {
    RecoveryOptions {
        mode: RecoveryMode::Instant,
        threads: 1,
        hold: Some(0),
        strategy: Some("rk.Q1.R1".parse().expect("label")),
        ..Default::default()
    }
}

/// The order in which the released rebuild completed the two indexes.
fn rebuild_order(st: &SofortStore) -> Vec<String> {
    st.wait_rebuild_held();
    st.set_rebuild_hold(None);
    let status = st.wait_rebuilt();
    assert!(status.complete && status.error.is_none(), "{status:?}");
    let mut done: Vec<(std::time::Instant, String)> =
        status.indexes.iter().map(|(n, at)| (at.expect("complete"), n.clone())).collect();
    done.sort();
    done.into_iter().map(|(_, n)| n).collect()
}

/// A past of scans on `by_g` only, sampled and written at close, ranks `by_g` first at the
/// next restart (no restart statement runs before the rebuild is released: the order is the
/// past's, eq. 6.2 with `WoPast`). Without the past (a store that never sampled) the two
/// indexes tie (equal rebuild costs) and the primary key, the lower id, goes first.
#[test]
fn the_ranking_after_reopen_follows_the_persisted_past() {
    let dir = TestDir::new("sofort-past-rank");
    let path = populated(&dir, 600);
    // Without a past: by rebuild cost, ties by id.
    let (st, rep) = open(&path, ranked_held());
    assert_eq!((rep.past_statements, rep.past_ignored), (0, 0), "{rep:?}");
    assert_eq!(rebuild_order(&st), ["t.primary", "t.by_g"]);
    // A steady state of scans on by_g, every statement sampled.
    st.set_past_sampling(1, 0);
    for i in 0..50 {
        assert_eq!(group(&st, i % 10).len(), 60);
    }
    assert_eq!(st.past_workload(), [("scan t0 i0".to_owned(), 50)]);
    st.close().expect("close"); // writes the block
    let (st, rep) = open(&path, ranked_held());
    assert_eq!((rep.past_statements, rep.past_ignored), (50, 0), "{rep:?}");
    assert_eq!(st.past_workload(), [("scan t0 i0".to_owned(), 50)], "seeded from the block");
    assert_eq!(rebuild_order(&st), ["t.by_g", "t.primary"], "the past's index first");
    st.check().expect("check");
    st.close().expect("close");
}

/// The block is written by the thread whose sample reaches `persist_every` (no close needed:
/// a crash after it keeps the counts), double-buffered: each write flips the selector.
#[test]
fn the_block_is_written_every_n_sampled_statements() {
    let dir = TestDir::new("sofort-past-every");
    let path = populated(&dir, 20);
    let (st, _) = open(&path, RecoveryOptions::default());
    st.set_past_sampling(1, 4);
    for i in 0..10 {
        group(&st, i % 10);
    }
    assert_eq!(st.inner.past.writes(), 2, "after the 4th and the 8th sample");
    let block = past::block_at(&st.inner.pm);
    let sel = st.inner.pm.s().load_u64(block + 16, Ordering::Acquire).expect("selector");
    assert_eq!(sel, 2, "two generations");
    drop(st); // a crash: no write at close
    let (st, rep) = open(&path, RecoveryOptions::default());
    assert_eq!((rep.past_statements, rep.past_ignored), (8, 0), "the second write's counts");
    st.close().expect("close");
}

/// Damage to the block is never an error of `open`: a bad checksum of the selected copy is
/// ignored (reported, counted, logged) and the next write replaces it; an unknown version is
/// ignored and left alone (a newer build's block is not overwritten).
#[test]
fn a_damaged_past_block_is_ignored_and_reported() {
    let dir = TestDir::new("sofort-past-bad");
    let path = populated(&dir, 20);
    let (st, _) = open(&path, RecoveryOptions::default());
    st.set_past_sampling(1, 0);
    for i in 0..5 {
        group(&st, i);
    }
    st.persist_past().expect("write");
    let block = past::block_at(&st.inner.pm);
    assert_ne!(block, 0);
    let s = st.inner.pm.s();
    let sel = s.load_u64(block + 16, Ordering::Acquire).expect("selector");
    // One count of the selected copy's first entry changed: the checksum no longer matches.
    let entry = block + 64 + (sel & 1) * past::COPY_BYTES + 64 + 8;
    s.store_u64(entry, 1_000_000, Ordering::Relaxed).expect("store");
    s.persist(entry, 8).expect("persist"); // ORDER(P-SOF-50): test: the damaged entry is what open reads
    drop(st);
    let (st, rep) = open(&path, RecoveryOptions::default());
    assert_eq!((rep.past_statements, rep.past_ignored), (0, 1), "{rep:?}");
    assert!(st.past_workload().is_empty(), "nothing of the bad copy is used");
    st.check().expect("the store itself is intact");
    st.set_past_sampling(1, 0);
    group(&st, 1);
    st.close().expect("close writes the other copy");
    let (st, rep) = open(&path, RecoveryOptions::default());
    assert_eq!((rep.past_statements, rep.past_ignored), (1, 0), "{rep:?}");
    // An unknown version: ignored, and not overwritten by this build.
    let s = st.inner.pm.s();
    s.store_u64(block + 8, 2 | u64::from(past::PAST_CAPACITY) << 32, Ordering::Relaxed)
        .expect("store");
    s.persist(block + 8, 8).expect("persist"); // ORDER(P-SOF-50): test: the damaged header is what open reads
    drop(st);
    let (st, rep) = open(&path, RecoveryOptions::default());
    assert_eq!((rep.past_statements, rep.past_ignored), (0, 1), "{rep:?}");
    st.set_past_sampling(1, 0);
    group(&st, 2);
    st.close().expect("close");
    let (st, rep) = open(&path, RecoveryOptions::default());
    assert_eq!(rep.past_ignored, 1, "still the unknown version: {rep:?}");
    let v = st.inner.pm.s().load_u64(block + 8, Ordering::Acquire).expect("version");
    assert_eq!(v as u32, 2, "left alone");
    st.close().expect("close");
}
