//! Unit tests of the background index rebuild (`rebuild.rs`): the watermark bookkeeping of
//! FIX-12 (rows collected and reused while their index is pending), helping, and the job
//! order. The rebuild is held at a watermark with the `hold` hook (no sleeps).

use std::sync::Arc;

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, PoolSet};

use super::*;
use crate::TableSchema;
use crate::encoding::{ByteRange, encode_key};
use crate::value::{Type, Value};

pub(super) fn pool_opts() -> Options {
    Options::default().layout("sofort-instant").segment_size(1 << 21)
}

fn schema() -> TableSchema {
    TableSchema::new("t")
        .column("k", Type::I64)
        .column("g", Type::I64)
        .primary_key("k")
        .index("by_g", ["g"])
}

/// A store of one slot (each `begin` collects what the previous commit deleted) with `n`
/// rows `(k, k % 10)`, closed.
pub(super) fn populated(dir: &TestDir, n: i64) -> std::path::PathBuf {
    let path = dir.join("db");
    let st = SofortStore::create(
        PoolSet::create(&path, &pool_opts()).expect("pool"),
        SofortOptions { slots: 1, alloc_slots: 1 },
    )
    .expect("create");
    st.set_past_sampling(0, 0); // no past workload: the ranking tests below expect none
    let t = st.create_table(schema()).expect("table");
    let mut tx = st.begin(false).expect("begin");
    for k in 0..n {
        tx.insert(&t, &[Value::I64(k), Value::I64(k % 10)]).expect("insert");
    }
    tx.commit().expect("commit");
    st.close().expect("close");
    path
}

fn open(path: &std::path::Path, opts: RecoveryOptions) -> SofortStore {
    SofortStore::open_with(Arc::new(PoolSet::open(path, &pool_opts()).expect("pool")), &opts)
        .expect("open")
        .0
}

fn instant(hold: Option<u64>) -> RecoveryOptions {
    RecoveryOptions { mode: RecoveryMode::Instant, threads: 1, hold, ..Default::default() }
}

fn pk(k: i64) -> Vec<u8> {
    encode_key([&Value::I64(k)])
}

/// The keys of the rows visible now with `g` in index `by_g`.
pub(super) fn group(st: &SofortStore, g: i64) -> Vec<i64> {
    let t = st.table("t").expect("t");
    let range = ByteRange::prefix(encode_key([&Value::I64(g)]));
    let (lo, hi) = range.as_slices();
    let mut tx = st.begin(true).expect("begin");
    let rows = tx.scan_at(&t, Some(0), lo, hi, true, usize::MAX, tx.sts()).expect("scan");
    tx.commit().expect("commit");
    rows.iter().map(|(_, r)| r[0].as_i64().expect("k")).collect()
}

/// FIX-12: rows of the unindexed range deleted, collected (their index entries "removed"
/// before the rebuild reached them) and reused by new rows with other keys, all while the
/// rebuild is held at 0. The rebuild must skip them (no stale entry for a collected row), the
/// reused ids must be indexed once with their new keys, and lookups before and after the
/// release must agree with the rows.
#[test]
fn rows_collected_and_reused_before_the_rebuild_reaches_them() {
    let dir = TestDir::new("sofort-fix12");
    let path = populated(&dir, 512); // one full chunk: nothing reusable at open
    let st = open(&path, instant(Some(0)));
    st.wait_rebuild_held();
    let t = st.table("t").expect("t");
    // Delete 502..512 (the end of the live list, far above the watermark).
    let mut tx = st.begin(false).expect("begin");
    let mut freed = Vec::new();
    for k in 502..512 {
        let (r, _) = tx.get(&t, &pk(k)).expect("get").expect("present");
        tx.delete(&t, r).expect("delete");
        freed.push(r);
    }
    tx.commit().expect("commit");
    // One slot: this begin collects them (index entries out, ids reusable).
    let mut tx = st.begin(false).expect("begin");
    {
        let g = t.pk.dram_state().expect("a DRAM index").read().expect("lock");
        let p = g.pending.as_ref().expect("pending");
        assert_eq!(p.wm, 0);
        assert_eq!(p.removed.len(), 10, "collected rows of the remainder are marked removed");
    }
    // Reuse the ids for keys 1000..1010 in group 3.
    let mut reused = Vec::new();
    for k in 1000..1010 {
        reused.push(tx.insert(&t, &[Value::I64(k), Value::I64(3)]).expect("insert"));
    }
    tx.commit().expect("commit");
    reused.sort_unstable();
    freed.sort_unstable();
    assert_eq!(reused, freed, "the new rows reuse the collected ids");
    // Held: the partial index holds only the direct inserts; reads use the remainder.
    assert_eq!(t.pk.dram_state().expect("a DRAM index").read().expect("lock").ix.len(), 10);
    let mut want: Vec<i64> = (0..502).filter(|k| k % 10 == 3).collect();
    want.extend(1000..1010);
    assert_eq!(group(&st, 3), want);
    assert!(group(&st, 9).iter().all(|&k| k < 502));
    let mut tx = st.begin(true).expect("begin");
    assert!(tx.get(&t, &pk(505)).expect("get").is_none());
    assert!(tx.get(&t, &pk(1005)).expect("get").is_some());
    tx.commit().expect("commit");
    st.check().expect("check while held (the effective index)");
    // Release: the rebuild skips the removed rows and indexes the rest once.
    st.set_rebuild_hold(None);
    let status = st.wait_rebuilt();
    assert!(status.complete && status.error.is_none(), "{status:?}");
    assert!(t.pk.dram_state().expect("a DRAM index").read().expect("lock").pending.is_none());
    assert_eq!(t.pk.dram_state().expect("a DRAM index").read().expect("lock").ix.len(), 512);
    assert_eq!(group(&st, 3), want);
    let rep = st.check().expect("check");
    assert_eq!(rep.index_entries, 1024);
    st.close().expect("close");
}

/// Lookups while the rebuild runs unheld (6000 rows: the first ones find more than
/// `HELP_ABOVE` rows left and help the rebuild, unless the worker got there first; which of
/// the two inserted a batch does not change any answer, and the test asserts only answers).
#[test]
fn lookups_during_an_unheld_rebuild_find_every_row() {
    let dir = TestDir::new("sofort-help");
    let path = populated(&dir, 6000);
    let st = open(&path, instant(None));
    let t = st.table("t").expect("t");
    let mut tx = st.begin(true).expect("begin");
    for k in [0, 5999, 3000, 6000] {
        let got = tx.get(&t, &pk(k)).expect("get");
        assert_eq!(got.map(|(_, r)| r[0].as_i64()), (k < 6000).then_some(Some(k)));
    }
    tx.commit().expect("commit");
    assert!(st.wait_rebuilt().complete);
    st.check().expect("check");
    st.close().expect("close");
}

/// The job order: jobs named in `order` run first (one thread: strictly in order).
#[test]
fn jobs_run_in_the_supplied_order() {
    let dir = TestDir::new("sofort-order");
    let path = populated(&dir, 100);
    let opts = RecoveryOptions { order: vec![("t".into(), Some(0))], ..instant(None) };
    let st = open(&path, opts);
    let status = st.wait_rebuilt();
    let names: Vec<&str> = status.indexes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["t.by_g", "t.primary"]);
    let (a, b) = (status.indexes[0].1.expect("done"), status.indexes[1].1.expect("done"));
    assert!(a <= b, "one thread runs the first job first");
    st.close().expect("close");
}

/// Adaptive recovery's ranking (`rk.Q1.R1`, eq. 6.3): with no past workload the two equal
/// indexes tie and the primary key (the lower id) would go first; statements of the restart
/// workload that scan `by_g` while the rebuild is held make `by_g` the best-ranked job, so the
/// one rebuild thread completes it first once released.
#[test]
fn a_ranked_rebuild_serves_the_restart_workload_first() {
    let dir = TestDir::new("sofort-ranked");
    let path = populated(&dir, 600);
    let strategy: adaptive::Strategy = "rk.Q1.R1".parse().expect("label");
    let st = open(&path, RecoveryOptions { strategy: Some(strategy), ..instant(Some(0)) });
    st.wait_rebuild_held();
    for g in 0..10 {
        let want: Vec<i64> = (0..600).filter(|k| k % 10 == g).collect();
        assert_eq!(group(&st, g), want);
    }
    st.set_rebuild_hold(None);
    let status = st.wait_rebuilt();
    assert!(status.complete && status.error.is_none(), "{status:?}");
    let at = |name: &str| {
        status.indexes.iter().find(|(n, _)| n == name).and_then(|(_, at)| *at).expect(name)
    };
    assert!(at("t.by_g") < at("t.primary"), "by_g first: {status:?}");
    st.check().expect("check");
    st.close().expect("close");
}

/// The same without restart statements: the tie goes to the lower id (the primary key), so
/// the order above is the restart workload's doing.
#[test]
fn a_ranked_rebuild_without_statements_breaks_ties_by_id() {
    let dir = TestDir::new("sofort-ranked-tie");
    let path = populated(&dir, 600);
    let strategy: adaptive::Strategy = "rk.Q1.R1".parse().expect("label");
    let st = open(&path, RecoveryOptions { strategy: Some(strategy), ..instant(Some(0)) });
    st.wait_rebuild_held();
    st.set_rebuild_hold(None);
    let status = st.wait_rebuilt();
    let at = |name: &str| {
        status.indexes.iter().find(|(n, _)| n == name).and_then(|(_, at)| *at).expect(name)
    };
    assert!(at("t.primary") < at("t.by_g"), "primary first: {status:?}");
    st.close().expect("close");
}
