//! Unit tests of the SOFORT core: visibility, exact persist counts, reopen (clean and after a
//! drop without close), crash images at every fence (with nested crashes in recovery),
//! recovery idempotence, GC and row reuse, typed errors.
//!
//! Random tests print their seed; `FERRITE_TEST_SEED` replays one.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::sim::{Event, EventKind, SimDomain, WritebackOrder};
use ferrite_pmem::{Counters, CrashImage, ImageSpec, Options, Pick, PoolSet, SplitMix64};

use super::layout::*;
use super::pm::lock;
use super::table::NT_MIN;
use super::*;
use crate::TableSchema;
use crate::encoding::encode_key;
use crate::storage::StorageError;
use crate::value::{Type, Value};

const SEG: u64 = 1 << 20;

fn opts() -> Options {
    Options::default().layout("sofort-test").segment_size(SEG)
}

fn sopts(slots: u32) -> SofortOptions {
    SofortOptions { slots, alloc_slots: 1 }
}

fn seed() -> u64 {
    ferrite_pmem::internals::testing::test_seed()
}

fn kv_schema() -> TableSchema {
    kv_schema_named("kv")
}

fn kv_schema_named(name: &str) -> TableSchema {
    TableSchema::new(name)
        .column("k", Type::I64)
        .column("v", Type::Str)
        .column("n", Type::I64)
        .primary_key("k")
        .index("by_n", ["n"])
}

fn pk(k: i64) -> Vec<u8> {
    encode_key([&Value::I64(k)])
}

fn row(k: i64, v: &str, n: i64) -> Vec<Value> {
    vec![Value::I64(k), Value::from(v), Value::I64(n)]
}

fn sim_store(slots: u32) -> SofortStore {
    let set = PoolSet::create_sim(&opts()).expect("sim set");
    SofortStore::create(set, sopts(slots)).expect("create")
}

/// Every visible row of `kv`, by key.
fn contents(st: &SofortStore) -> BTreeMap<i64, (String, i64)> {
    let t = st.table("kv").expect("kv");
    let mut tx = st.begin(true).expect("begin");
    let rows = tx
        .scan_at(&t, None, Bound::Unbounded, Bound::Unbounded, true, usize::MAX, tx.sts())
        .expect("scan");
    tx.commit().expect("read-only commit");
    rows.into_iter()
        .map(|(_, r)| {
            (r[0].as_i64().unwrap(), (r[1].as_str().unwrap().to_owned(), r[2].as_i64().unwrap()))
        })
        .collect()
}

fn upsert(st: &SofortStore, tx: &mut TxHandle, k: i64, v: &str, n: i64) -> SofortResult<()> {
    let t = st.table("kv").expect("kv");
    match tx.get(&t, &pk(k))? {
        Some((r, _)) => tx.update(&t, r, &row(k, v, n)).map(|_| ()),
        None => tx.insert(&t, &row(k, v, n)).map(|_| ()),
    }
}

fn remove(st: &SofortStore, tx: &mut TxHandle, k: i64) -> SofortResult<()> {
    let t = st.table("kv").expect("kv");
    if let Some((r, _)) = tx.get(&t, &pk(k))? {
        tx.delete(&t, r)?;
    }
    Ok(())
}

/// Regression ([R2] item 7): a reader that meets a row locked by a transaction holding a
/// commit timestamp at or below the reader's snapshot waits for that commit to finish. The wait
/// was a loop of 2^24 yields that ended in `Corrupted("a lock that never resolves")`: a
/// committer stalled that long (descheduled on a loaded machine, stopped in a debugger, on a
/// slow medium) made a healthy store report damage. Before the fix this test's read returned
/// `Corrupted` after the yields ran out; now the wait is bounded in time and ends in `Busy`,
/// and the read succeeds once the commit has finished.
#[test]
fn a_reader_waiting_on_a_stalled_committer_is_busy_not_corrupted() {
    let st = sim_store(4);
    let t = st.create_table(kv_schema()).unwrap();
    let mut w = st.begin(false).unwrap();
    let r = w.insert(&t, &row(7, "seven", 7)).unwrap();
    let mut reader = st.begin(true).unwrap();
    // The writer stalls inside its commit, its commit timestamp (at or below the reader's
    // snapshot) already taken: the state a committer is in between the slot mutex and F2.
    lock(&st.inner.slots[w.slot as usize].info).commit_ts = reader.sts;
    st.inner.lock_wait_ms.store(200, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let err = reader.visible(&t, r).unwrap_err();
    assert!(matches!(err, SofortError::Busy(_)), "{err:?}");
    assert!(err.to_string().contains("retry"), "{err}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(200));
    // The reader is still usable, and so is the writer: it commits, after which the row is
    // visible to a new snapshot and the read that was `Busy` resolves.
    lock(&st.inner.slots[w.slot as usize].info).commit_ts = INF;
    let c = w.commit().unwrap();
    assert!(!reader.visible(&t, r).unwrap(), "committed after the reader's snapshot");
    let mut later = st.begin(true).unwrap();
    assert!(later.visible(&t, r).unwrap() && c > reader.sts);
    reader.abort();
    later.abort();
}

#[test]
fn visibility_matrix() {
    let st = sim_store(8);
    let t = st.create_table(kv_schema()).unwrap();
    // A committed row.
    let mut a = st.begin(false).unwrap();
    let r0 = a.insert(&t, &row(1, "one", 1)).unwrap();
    let c0 = a.commit().unwrap();
    assert!(c0 > K_MIN_TS + 1);

    let mut old = st.begin(true).unwrap(); // snapshot before the changes below
    let mut w = st.begin(false).unwrap();
    let r1 = w.insert(&t, &row(2, "two", 2)).unwrap();
    w.delete(&t, r0).unwrap();
    // The writer sees its own insert, not its own delete.
    assert!(w.visible(&t, r1).unwrap());
    assert!(!w.visible(&t, r0).unwrap());
    // A read-only reader treats the uncommitted lock as not committed (FIX-5), no conflict.
    assert!(old.visible(&t, r0).unwrap());
    assert!(!old.visible(&t, r1).unwrap());
    // A read-write reader reads the same way (no conflict on reads; validation decides).
    let mut rw = st.begin(false).unwrap();
    assert!(!rw.visible(&t, r1).unwrap() && rw.visible(&t, r0).unwrap());
    assert!(!rw.is_doomed());
    // Its uniqueness view: the uncommitted insert conflicts, the visible row is taken.
    assert_eq!(rw.key_state(&t, r1).unwrap(), KeyState::Conflict);
    assert_eq!(rw.key_state(&t, r0).unwrap(), KeyState::Visible);
    rw.commit().unwrap();
    // Write-write conflict on the locked row.
    let mut ww = st.begin(false).unwrap();
    assert!(matches!(ww.delete(&t, r0), Err(SofortError::Conflict(_))));
    ww.abort();
    let c1 = w.commit().unwrap();
    assert!(c1 > c0);
    // The old snapshot still sees the deleted row and not the new one; a new one the reverse.
    assert!(old.visible(&t, r0).unwrap() && !old.visible(&t, r1).unwrap());
    let mut new = st.begin(true).unwrap();
    assert!(!new.visible(&t, r0).unwrap() && new.visible(&t, r1).unwrap());
    // Visibility at explicit times around the commit timestamps.
    assert!(!new.visible_at(&t, r1, c1 - 1).unwrap() && new.visible_at(&t, r1, c1).unwrap());
    assert!(new.visible_at(&t, r0, c0).unwrap() && !new.visible_at(&t, r0, c1).unwrap());
    assert!(!new.visible_at(&t, r0, c0 - 1).unwrap());
    assert_eq!(new.get(&t, &pk(2)).unwrap().map(|x| x.0), Some(r1));
    assert_eq!(new.get(&t, &pk(1)).unwrap(), None);
    old.commit().unwrap();
    new.commit().unwrap();
    // An aborted insert is invisible to everyone and its slot is reused.
    let mut ab = st.begin(false).unwrap();
    let r2 = ab.insert(&t, &row(3, "three", 3)).unwrap();
    ab.abort();
    let mut rd = st.begin(false).unwrap();
    assert!(!rd.visible(&t, r2).unwrap());
    assert_eq!(rd.insert(&t, &row(4, "four", 4)).unwrap(), r2, "aborted slot reused at once");
    rd.commit().unwrap();
    // Secondary index scan, both directions.
    let mut s = st.begin(true).unwrap();
    // Index keys are entries (index columns, then primary key): bound by n < 5.
    let n5 = encode_key([&Value::I64(5)]);
    let asc = s.scan_at(&t, Some(0), Bound::Unbounded, Bound::Excluded(&n5), true, 10, s.sts());
    let keys: Vec<i64> = asc.unwrap().iter().map(|(_, r)| r[0].as_i64().unwrap()).collect();
    assert_eq!(keys, vec![2, 4]);
    let desc = s.scan_at(&t, Some(0), Bound::Unbounded, Bound::Unbounded, false, 1, s.sts());
    assert_eq!(desc.unwrap()[0].1[0], Value::I64(4));
    drop(s);
    st.check().unwrap();
}

#[test]
fn fence_counts_of_single_row_transactions() {
    let st = sim_store(4);
    let t = st.create_table(kv_schema()).unwrap();
    let v = "x".repeat(100);
    // Warm up: the first chunk, heap chunk and area exist afterwards.
    let mut w = st.begin(false).unwrap();
    let r0 = w.insert(&t, &row(0, &v, 0)).unwrap();
    w.commit().unwrap();

    // Lines a row's value extent spans (values below NT_MIN are written with ordinary
    // stores and flushed at F1).
    let extent_lines = |r: u64| -> u64 {
        let s = st.inner.s();
        let x = t.extents(s, r).unwrap();
        assert_eq!(x.len(), 1, "one str column");
        let (c, chunk, off, len) = x[0];
        let g = t.heaps[c].as_ref().unwrap().arr.block(chunk).unwrap() + off;
        (g + len - 1) / 64 - g / 64 + 1
    };
    // Distinct MVCC lines of some rows: F1 flushes the lines of this transaction's rows and
    // those of the slot's previous finalization (stored, not flushed, P-SOF-8), each once.
    let mvcc_lines = |rows: &[u64]| -> u64 {
        let lines: std::collections::BTreeSet<u64> =
            rows.iter().map(|&r| t.mvcc_at(r).unwrap() / 64).collect();
        lines.len() as u64
    };

    // Single-row insert: F1 flushes the MVCC line (with the previous finalization's line,
    // here the same one: rows 0 and 1 share it), the three column slots (one line each: every
    // column has its own array) and the value's extent, then fences; F2 flushes the header
    // line and fences; the finalization only stores.
    let before = Counters::snapshot();
    let mut tx = st.begin(false).unwrap();
    let r = tx.insert(&t, &row(1, &v, 1)).unwrap();
    tx.commit().unwrap();
    let d = Counters::snapshot() - before;
    let x = extent_lines(r);
    assert!((2..=3).contains(&x), "a 104-byte extent spans 2 or 3 lines");
    assert_eq!(mvcc_lines(&[r0, r]), 1, "rows {r0} and {r} share an MVCC line");
    assert_eq!((d.fences, d.lines_flushed()), (2, 1 + 3 + x + 1), "insert: {d:?}");
    assert_eq!(d.nt_bytes, 0, "a 100-byte value is below NT_MIN: {d:?}");

    // Single-row update (delete + insert; both rows on one MVCC line, as the previous
    // finalization's row): the same.
    let before = Counters::snapshot();
    let mut tx = st.begin(false).unwrap();
    let prev = r;
    let r = tx.update(&t, r, &row(1, &v, 2)).unwrap();
    tx.commit().unwrap();
    let d = Counters::snapshot() - before;
    let x = extent_lines(r);
    assert_eq!(mvcc_lines(&[prev, r]), 1);
    assert_eq!((d.fences, d.lines_flushed()), (2, 1 + 3 + x + 1), "update: {d:?}");

    // An update whose versions sit on two MVCC lines: both lines at F1 (with the previous
    // finalization's line if it is a third one).
    let mut last = 0;
    for k in 2..4 {
        let mut tx = st.begin(false).unwrap();
        last = tx.insert(&t, &row(k, &v, k)).unwrap();
        tx.commit().unwrap();
    }
    let mut tx = st.begin(false).unwrap();
    let (old, _) = tx.get(&t, &pk(0)).unwrap().unwrap();
    let before = Counters::snapshot();
    let r = tx.update(&t, old, &row(0, &v, 9)).unwrap();
    tx.commit().unwrap();
    let d = Counters::snapshot() - before;
    let x = extent_lines(r);
    assert_eq!(mvcc_lines(&[old, r]), 2, "rows {old} and {r} on two lines");
    let m = mvcc_lines(&[old, r, last]);
    assert_eq!((d.fences, d.lines_flushed()), (2, m + 3 + x + 1), "two lines: {d:?}");

    // A value of NT_MIN bytes or more is written with non-temporal stores and not flushed.
    let big = "y".repeat(NT_MIN);
    let before = Counters::snapshot();
    let mut tx = st.begin(false).unwrap();
    let rb = tx.insert(&t, &row(10, &big, 10)).unwrap();
    tx.commit().unwrap();
    let d = Counters::snapshot() - before;
    let m = mvcc_lines(&[old, r, rb]);
    assert_eq!(d.nt_bytes, NT_MIN as u64, "big value: {d:?}");
    assert_eq!((d.fences, d.lines_flushed()), (2, m + 3 + 1), "big value: {d:?}");

    // Read-only and aborted transactions persist nothing.
    let before = Counters::snapshot();
    let mut ro = st.begin(true).unwrap();
    ro.get(&t, &pk(1)).unwrap().unwrap();
    ro.commit().unwrap();
    let mut ab = st.begin(false).unwrap();
    ab.insert(&t, &row(50, &v, 0)).unwrap();
    ab.abort();
    let d = Counters::snapshot() - before;
    assert_eq!((d.fences, d.lines_flushed()), (0, 0), "read-only + abort: {d:?}");
}

/// Regression ([R2] item 5): a finalization that failed after the commit point (the commit
/// word durable, the transaction visible) made `commit` return that error, so an application
/// that retried on `Err` applied the transaction twice. Before the fix this commit returned
/// `Err(Poisoned)`; now it returns its commit timestamp, the store is poisoned, and the
/// reopened store holds the commit (recovery rolls the committed area forward).
#[test]
fn a_finalization_that_fails_after_the_commit_point_leaves_a_successful_commit() {
    let dir = TestDir::new("sofort-fin-fails");
    let path = dir.join("db");
    let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(4)).unwrap();
    st.create_table(kv_schema()).unwrap();
    let mut tx = st.begin(false).unwrap();
    upsert(&st, &mut tx, 1, "one", 1).unwrap();
    super::txn::FAIL_FINALIZATION.with(|f| f.set(true));
    let committed = tx.commit();
    super::txn::FAIL_FINALIZATION.with(|f| f.set(false));
    assert!(committed.is_ok(), "past the commit point: {committed:?}");
    let after = st.begin(false).map(drop);
    assert!(
        matches!(after, Err(SofortError::Storage(StorageError::Poisoned))),
        "the store is poisoned: {after:?}"
    );
    drop(st);
    let (st, _) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
    assert_eq!(contents(&st).get(&1), Some(&("one".to_owned(), 1)));
    st.close().unwrap();
}

#[test]
fn reopen_after_close_and_after_drop_without_close() {
    let dir = TestDir::new("sofort-reopen");
    let path = dir.join("db");
    {
        let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(4)).unwrap();
        st.create_table(kv_schema()).unwrap();
        let mut tx = st.begin(false).unwrap();
        for k in 0..700 {
            upsert(&st, &mut tx, k, &format!("v{k}"), k % 7).unwrap();
        }
        tx.commit().unwrap();
        st.close().unwrap();
    }
    let (st, rep) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
    assert_eq!(rep.live_rows, 700);
    let c = contents(&st);
    assert_eq!(c.len(), 700);
    assert_eq!(c[&699], ("v699".to_owned(), 699 % 7));
    // Committed changes, then an uncommitted one; drop everything without close (a crash
    // as far as the pool is concerned: only what was persisted survives).
    let mut tx = st.begin(false).unwrap();
    upsert(&st, &mut tx, 5, "five", 55).unwrap();
    remove(&st, &mut tx, 6).unwrap();
    tx.commit().unwrap();
    let mut open = st.begin(false).unwrap();
    upsert(&st, &mut open, 7, "uncommitted", 0).unwrap();
    remove(&st, &mut open, 8).unwrap();
    open.abandon(); // no abort runs: its locks stay in PM
    drop(st);
    let (st, rep) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
    assert!(rep.undone >= 2, "{rep:?}");
    let c = contents(&st);
    assert_eq!(c[&5], ("five".to_owned(), 55));
    assert!(!c.contains_key(&6));
    assert_eq!(c[&7], ("v7".to_owned(), 0));
    assert_eq!(c[&8], ("v8".to_owned(), 1));
    assert_eq!(c.len(), 699);
    st.check().unwrap();
    st.close().unwrap();
}

/// The model after `ops` (aborts ignored).
fn apply(m: &mut BTreeMap<i64, (String, i64)>, ops: &[Op]) {
    for o in ops {
        match o {
            Op::Put(k, v, x) => {
                m.insert(*k, (v.clone(), *x));
            }
            Op::Del(k) => {
                m.remove(k);
            }
            Op::Abort => {}
        }
    }
}

/// A deterministic workload on `kv`: the model after each transaction that commits.
struct Workload {
    txns: Vec<Vec<Op>>,
}

#[derive(Clone, Debug)]
enum Op {
    Put(i64, String, i64),
    Del(i64),
    Abort,
}

impl Workload {
    fn new(seed: u64, n: usize) -> Workload {
        let mut rng = SplitMix64::new(seed);
        let mut txns = Vec::new();
        for i in 0..n {
            let len = match i % 7 {
                3 => 6,   // beyond the header line (F1.5)
                5 => 130, // beyond the area (an extension block)
                _ => 1 + (rng.next_u64() % 2) as usize,
            };
            let mut ops = Vec::new();
            for _ in 0..len {
                let k = (rng.next_u64() % 40) as i64;
                if rng.next_u64().is_multiple_of(4) {
                    ops.push(Op::Del(k));
                } else {
                    let v = "v".repeat((rng.next_u64() % 40) as usize);
                    ops.push(Op::Put(k, v, (rng.next_u64() % 5) as i64));
                }
            }
            if i % 11 == 4 {
                ops.push(Op::Abort);
            }
            txns.push(ops);
        }
        Workload { txns }
    }

    /// The model after the first `n` transactions.
    fn model(&self, n: usize) -> BTreeMap<i64, (String, i64)> {
        let mut m = BTreeMap::new();
        for ops in &self.txns[..n] {
            if ops.iter().any(|o| matches!(o, Op::Abort)) {
                continue;
            }
            apply(&mut m, ops);
        }
        m
    }

    /// Runs transaction `i` (every third one moves to another thread to commit).
    fn run(&self, st: &SofortStore, i: usize) {
        let mut tx = st.begin(false).unwrap();
        for o in &self.txns[i] {
            match o {
                Op::Put(k, v, x) => upsert(st, &mut tx, *k, v, *x).unwrap(),
                Op::Del(k) => remove(st, &mut tx, *k).unwrap(),
                Op::Abort => {
                    tx.abort();
                    return;
                }
            }
        }
        if i % 3 == 2 {
            std::thread::scope(|s| s.spawn(move || tx.commit().unwrap()).join().unwrap());
        } else {
            tx.commit().unwrap();
        }
    }
}

/// Captures crash images at every fence (see [`capturing_hook_every`]).
fn capturing_hook(
    images: Arc<Mutex<Vec<(u64, CrashImage)>>>,
    acked: Arc<AtomicU64>,
    seed: u64,
) -> ferrite_pmem::sim::Hook {
    capturing_hook_every(images, acked, seed, 1)
}

/// Captures crash images at every fence: durable only, with the fencing thread's pending
/// lines, with every dirty line evicted, and a random mix.
/// (At every `every`-th fence only, for workloads with many fences.)
fn capturing_hook_every(
    images: Arc<Mutex<Vec<(u64, CrashImage)>>>,
    acked: Arc<AtomicU64>,
    seed: u64,
    every: u64,
) -> ferrite_pmem::sim::Hook {
    let n = Arc::new(AtomicU64::new(0));
    Arc::new(move |d: &SimDomain, e: &Event| {
        if e.kind != EventKind::Fence {
            return;
        }
        let a = acked.load(Ordering::SeqCst);
        let i = n.fetch_add(1, Ordering::Relaxed);
        if !i.is_multiple_of(every) {
            return;
        }
        let specs = [
            ImageSpec::durable(),
            ImageSpec { pending: Pick::All, ..ImageSpec::default() },
            ImageSpec { pending: Pick::All, evict: Pick::All, ..ImageSpec::default() },
            ImageSpec {
                pending: Pick::Random(0.5),
                evict: Pick::Random(0.5),
                seed: seed ^ i,
                ..ImageSpec::default()
            },
        ];
        let mut v = images.lock().unwrap();
        for s in &specs {
            v.push((a, d.capture(s)));
        }
    })
}

#[test]
fn crash_images_at_every_fence_recover_to_a_prefix() {
    crash_images_recover_to_a_prefix(seed());
}

/// Regression: the seed that found the stale finalization flush (see
/// `a_stale_finalization_flush_cannot_undo_a_later_commit`). Transaction 13 finalized the
/// MVCC line of key 38's version on the main thread (flush, no fence); transaction 14 deleted
/// that version and committed on another thread; transaction 17, on a third thread, rewrote
/// the slot's area; transaction 18's fence on the main thread then made the old flush durable
/// over the delete, and images from then on showed key 38's deleted version again.
///
/// Runs under the strict write-back order (the domain's model before axiom M6, under which
/// the defect was found): under the default coherent order a line's older write-back cannot
/// land over a newer one, so the old code would pass. P-SOF-8 is kept: it is right under both.
#[test]
fn crash_images_of_seed_0x18eb018b783001de_recover_to_a_prefix() {
    ferrite_pmem::sim::set_new_domain_writebacks(WritebackOrder::Strict);
    crash_images_recover_to_a_prefix(0x18eb_018b_7830_01de);
    ferrite_pmem::sim::set_new_domain_writebacks(WritebackOrder::Coherent);
}

/// As `crash_images_at_every_fence_recover_to_a_prefix`, with both indexes of `kv` in PM:
/// recovery must delete the entries of rows an uncommitted or aborted transaction inserted
/// (durable at once) and of deleted rows whose collection a crash interrupted (P-SOF-20/21).
/// The trees fence several times per insert: a shorter workload, images at every third fence.
#[test]
fn crash_images_with_hybrid_indexes_recover_to_a_prefix() {
    crash_images_placed(seed(), &[crate::SofortIndexPlacement::Hybrid; 2], 10, 3);
}

/// The same with persistent trees (inner nodes in PM too), and the primary key in DRAM.
#[test]
fn crash_images_with_persistent_indexes_recover_to_a_prefix() {
    use crate::SofortIndexPlacement as P;
    crash_images_placed(seed(), &[P::Dram, P::Persistent], 10, 3);
    crash_images_placed(seed() ^ 1, &[P::Persistent, P::Persistent], 10, 3);
}

fn crash_images_recover_to_a_prefix(seed: u64) {
    crash_images_placed(seed, &[], 24, 1);
}

fn crash_images_placed(
    seed: u64,
    placements: &[crate::SofortIndexPlacement],
    txns: usize,
    every: u64,
) {
    let w = Workload::new(seed, txns);
    let st = sim_store(2);
    st.create_table_with(kv_schema(), placements).unwrap();
    let domain = {
        // The store's pool set is the only holder of the domain; reach it through a table op.
        let t = st.table("kv").unwrap();
        drop(t);
        st.inner.pm.set().sim().unwrap().clone()
    };
    let images = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicU64::new(0));
    domain.set_hook(Some(capturing_hook_every(images.clone(), acked.clone(), seed, every)));
    for i in 0..w.txns.len() {
        w.run(&st, i);
        acked.store(i as u64 + 1, Ordering::SeqCst);
    }
    domain.set_hook(None);
    assert_eq!(contents(&st), w.model(w.txns.len()));
    st.check().unwrap();
    drop(st);
    let images = std::mem::take(&mut *images.lock().unwrap());
    assert!(images.len() > 100, "{} images", images.len());
    let mut nested = 0;
    for (k, (a, img)) in images.iter().enumerate() {
        let a = *a as usize;
        let set = PoolSet::open_sim(img, &opts()).unwrap();
        let rec_domain = set.sim().unwrap().clone();
        // Nested crashes: capture at every fence of this recovery (every 16th image; with
        // `every > 1`, every `16 * every`-th image at every `4 * every`-th fence: opening
        // trees fences often).
        let inner_images = Arc::new(Mutex::new(Vec::new()));
        if (k as u64).is_multiple_of(16 * every) {
            rec_domain.set_hook(Some(capturing_hook_every(
                inner_images.clone(),
                Arc::new(AtomicU64::new(0)),
                seed,
                if every == 1 { 1 } else { 4 * every },
            )));
        }
        let (st, _) = SofortStore::open(set).unwrap_or_else(|e| panic!("image {k}: {e}"));
        rec_domain.set_hook(None);
        let got = contents(&st);
        let ok = got == w.model(a) || (a < w.txns.len() && got == w.model(a + 1));
        assert!(ok, "image {k} (acked {a}): {got:?}\nvs {:?}", w.model(a));
        st.check().unwrap_or_else(|e| panic!("image {k}: {e}"));
        // The store is usable after recovery.
        let mut tx = st.begin(false).unwrap();
        upsert(&st, &mut tx, 1000, "after", 0).unwrap();
        tx.commit().unwrap();
        drop(st);
        // Recovery again from the states a crash during the first recovery leaves: the same
        // contents (idempotence).
        for (_, img2) in inner_images.lock().unwrap().iter() {
            let set = PoolSet::open_sim(img2, &opts()).unwrap();
            let (st2, _) = SofortStore::open(set).unwrap();
            assert_eq!(contents(&st2), got, "nested image of {k}");
            st2.check().unwrap();
            nested += 1;
        }
    }
    eprintln!("{} images, {nested} nested", images.len());
    assert!(nested > 10, "{nested} nested images");
    if !placements.is_empty() {
        // The workload reached the new rule's fences and left garbage entries behind.
        assert!(images.len() > 100, "{} images", images.len());
    }
}

#[test]
fn recovery_is_idempotent_on_one_image() {
    let st = sim_store(2);
    st.create_table(kv_schema()).unwrap();
    let w = Workload::new(7, 12);
    for i in 0..12 {
        w.run(&st, i);
    }
    let mut open = st.begin(false).unwrap();
    upsert(&st, &mut open, 3, "in flight", 0).unwrap();
    let d = st.inner.pm.set().sim().unwrap().clone();
    let img = d.capture(&ImageSpec { evict: Pick::All, ..ImageSpec::default() });
    open.abandon();
    drop(st);
    let first = {
        let (st, rep) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
        assert!(rep.undone >= 1, "{rep:?}");
        let c = contents(&st);
        // Drop without close, then recover the recovered image again.
        let again = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
        drop(st);
        let (st2, rep2) = SofortStore::open(PoolSet::open_sim(&again, &opts()).unwrap()).unwrap();
        assert_eq!(contents(&st2), c);
        assert_eq!(rep2.rolled_forward, 0, "{rep2:?}");
        st2.check().unwrap();
        c
    };
    let (st, _) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    assert_eq!(contents(&st), first);
    assert_eq!(first, w.model(12));
}

#[test]
fn gc_reuses_row_slots_and_heap_space() {
    let st = sim_store(1);
    let t = st.create_table(kv_schema()).unwrap();
    let mut tx = st.begin(false).unwrap();
    for k in 0..10 {
        tx.insert(&t, &row(k, &"a".repeat(200), 0)).unwrap();
    }
    tx.commit().unwrap();
    for round in 0..300 {
        let mut tx = st.begin(false).unwrap();
        for k in 0..10 {
            upsert(&st, &mut tx, k, &"b".repeat(100 + round % 50), round as i64).unwrap();
        }
        tx.commit().unwrap();
    }
    // With one slot, every start collects what the previous commit deleted: the table never
    // grows past its first chunk, and the heap stays at its first chunk.
    assert_eq!(t.chunk_count(), 1);
    assert!(t.heaps[1].as_ref().unwrap().arr.count() <= 2);
    let rep = st.check().unwrap();
    assert_eq!(rep.live_rows, 10);
    assert!(super::pm::lock(&t.rows).next <= 20, "{rep:?}");
    let c = contents(&st);
    assert_eq!(c[&3].1, 299);
}

#[test]
fn busy_when_every_slot_is_taken_and_value_limits() {
    let st = sim_store(2);
    let t = st.create_table(kv_schema()).unwrap();
    let a = st.begin(false).unwrap();
    let b = st.begin(true).unwrap();
    assert!(matches!(st.begin(false), Err(SofortError::Busy(_))));
    drop(a);
    let mut c = st.begin(false).unwrap();
    let big = "z".repeat(HEAP_CHUNK as usize + 1);
    assert!(matches!(c.insert(&t, &row(1, &big, 0)), Err(SofortError::ValueTooLarge { .. })));
    let max = "z".repeat(HEAP_CHUNK as usize);
    c.insert(&t, &row(1, &max, 0)).unwrap();
    c.insert(&t, &row(2, "", 0)).unwrap();
    assert!(matches!(
        c.insert(&t, &[Value::I64(3)]),
        Err(SofortError::Schema(crate::error::SchemaError::Arity { .. }))
    ));
    c.commit().unwrap();
    drop(b);
    assert!(matches!(
        st.create_table(kv_schema()),
        Err(SofortError::Schema(crate::error::SchemaError::TableExists(_)))
    ));
    let got = contents(&st);
    assert_eq!(got[&1].0.len(), HEAP_CHUNK as usize);
    assert_eq!(got[&2].0, "");
}

/// Every placement: the same contents after a clean close and after a drop without close
/// with an uncommitted transaction, its placement kept, and `check` passing.
#[test]
fn every_placement_reopens_with_its_indexes() {
    use crate::SofortIndexPlacement as P;
    let dir = TestDir::new("sofort-placed");
    for (i, ps) in [[P::Hybrid, P::Hybrid], [P::Persistent, P::Dram], [P::Dram, P::Persistent]]
        .into_iter()
        .enumerate()
    {
        let path = dir.join(&format!("db{i}"));
        let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(4)).unwrap();
        st.create_table_with(kv_schema(), &ps).unwrap();
        let mut tx = st.begin(false).unwrap();
        for k in 0..300 {
            upsert(&st, &mut tx, k, &format!("v{k}"), k % 7).unwrap();
        }
        tx.commit().unwrap();
        let mut tx = st.begin(false).unwrap();
        for k in 0..50 {
            remove(&st, &mut tx, k * 3).unwrap();
        }
        tx.commit().unwrap();
        let mut aborted = st.begin(false).unwrap();
        upsert(&st, &mut aborted, 1, "aborted", 0).unwrap();
        aborted.abort();
        let before = contents(&st);
        st.check().unwrap();
        st.close().unwrap();
        let (st, rep) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
        assert_eq!(rep.live_rows, 250, "{ps:?}");
        let t = st.table("kv").unwrap();
        assert_eq!(
            (t.index_placement(None), t.index_placement(Some(0))),
            (Some(ps[0]), Some(ps[1]))
        );
        assert_eq!(contents(&st), before, "{ps:?}");
        st.check().unwrap();
        // A secondary-index lookup through the placed index.
        let mut ro = st.begin(true).unwrap();
        // The entries starting with `n = 3` (index column, then primary key), as the engine
        // asks for a prefix.
        let n3 = encode_key([&Value::I64(3)]);
        let end = crate::encoding::prefix_successor(&n3).unwrap();
        let (lo, hi) = (Bound::Included(&n3[..]), Bound::Excluded(&end[..]));
        let rows = ro.scan_at(&t, Some(0), lo, hi, true, usize::MAX, ro.sts()).unwrap();
        let back = ro.scan_at(&t, Some(0), lo, hi, false, 5, ro.sts()).unwrap();
        let mut rev: Vec<_> = rows.iter().rev().take(5).cloned().collect();
        rev.truncate(5);
        assert_eq!(back, rev, "{ps:?}");
        ro.commit().unwrap();
        let want = before.values().filter(|v| v.1 == 3).count();
        assert_eq!(rows.len(), want, "{ps:?}");
        // An uncommitted insert and delete left in PM by a drop without close.
        let mut open = st.begin(false).unwrap();
        upsert(&st, &mut open, 1000, "uncommitted", 3).unwrap();
        remove(&st, &mut open, 1).unwrap();
        open.abandon();
        drop(t);
        drop(st);
        let (st, rep) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
        assert!(rep.undone >= 2 && rep.garbage_rows >= 1, "{rep:?}");
        assert_eq!(contents(&st), before, "{ps:?}");
        st.check().unwrap();
        st.close().unwrap();
    }
}

/// A key longer than a PM index holds is `ValueTooLarge` before anything is written; the
/// transaction stays usable, and the same key in a DRAM index is fine.
#[test]
fn a_key_too_long_for_a_pm_index_is_a_typed_error() {
    use crate::SofortIndexPlacement as P;
    let schema = |name: &str| {
        TableSchema::new(name).column("k", Type::Str).column("n", Type::I64).primary_key("k")
    };
    let st = sim_store(2);
    let t = st.create_table_with(schema("s"), &[P::Persistent]).unwrap();
    let dram = st.create_table(schema("d")).unwrap();
    let long = vec![Value::from("x".repeat(5000).as_str()), Value::I64(1)];
    let mut tx = st.begin(false).unwrap();
    let err = tx.insert(&t, &long).unwrap_err();
    assert!(matches!(err, SofortError::ValueTooLarge { .. }), "{err:?}");
    tx.insert(&t, &[Value::from("short"), Value::I64(2)]).unwrap();
    tx.insert(&dram, &long).unwrap();
    tx.commit().unwrap();
    st.check().unwrap();
    assert_eq!(st.check().unwrap().index_entries, 2);
}

/// The descriptor's offset of `kv`'s index area entry `i` (its placement word).
fn placement_word(st: &SofortStore, i: u64) -> (u64, u64) {
    let pm = &st.inner.pm;
    let d = pm.s().load_pptr(pm.set().resolve(st.inner.table_dir).unwrap()).unwrap();
    let g = pm.set().resolve(d).unwrap();
    let head: TableHead = pm.s().read_struct(g).unwrap();
    (g, u64::from(head.ix_off) + i * IX_ENTRY + IX_PLACEMENT)
}

/// A placement code no build writes, under a valid checksum, is `Corrupted`; so is a
/// placement changed without its checksum.
#[test]
fn an_unknown_placement_in_a_descriptor_is_corrupted() {
    use crate::SofortIndexPlacement as P;
    let dir = TestDir::new("sofort-placement-code");
    for fix_crc in [true, false] {
        let path = dir.join(&format!("db{fix_crc}"));
        let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(2)).unwrap();
        st.create_table_with(kv_schema(), &[P::Hybrid, P::Dram]).unwrap();
        let (g, off) = placement_word(&st, 1);
        let s = st.inner.pm.s();
        s.store_u64(g + off, 7, Ordering::Release).unwrap();
        if fix_crc {
            let mut head: TableHead = s.read_struct(g).unwrap();
            let ncols = u64::from(head.ncols);
            let mut schema = vec![0u8; head.schema_len as usize];
            s.read_into(g + TABLE_HEAD + T_COLUMN * ncols, &mut schema).unwrap();
            let codes: Vec<u8> =
                [IX_HYBRID, 7].iter().flat_map(|c: &u64| c.to_le_bytes()).collect();
            head.crc = table_crc(zerocopy::IntoBytes::as_bytes(&head), &schema, &codes);
            s.write_struct(g, &head).unwrap();
        }
        // ORDER(P-APP-1): the test's damage is durable before the store is reopened
        s.persist(g, off + 8).unwrap();
        st.close().unwrap();
        let err = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
        let SofortError::Storage(StorageError::Corrupted { what, .. }) = &err else {
            panic!("{err:?}")
        };
        assert!(what.contains(if fix_crc { "unknown placement" } else { "checksum" }), "{what}");
    }
}

/// A store of format version 1 (no index areas) still opens; its new tables keep every
/// index in DRAM whatever is asked (descriptors as version 1 wrote them: no area, the old
/// checksum), so that a version-1 build never meets an index area.
#[test]
fn a_version_1_store_opens_and_places_new_indexes_in_dram() {
    use crate::SofortIndexPlacement as P;
    let dir = TestDir::new("sofort-v1");
    let path = dir.join("db");
    let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(2)).unwrap();
    // Make it a version-1 catalog (the same bytes but the version) with its checksum.
    let pm = &st.inner.pm;
    let w = catalog_word(&st, 8);
    poke(&st, 8, (w & !0xffff_ffff) | u64::from(CATALOG_VERSION_1));
    let mut bytes = [0u8; CATALOG_BYTES as usize];
    pm.s().read_into(pm.cat, &mut bytes).unwrap();
    let crc = catalog_word(&st, C_CRC);
    poke(&st, C_CRC, (crc & !0xffff_ffff) | u64::from(catalog_crc(&bytes)));
    st.close().unwrap();
    let (st, _) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
    assert_eq!(catalog_word(&st, 8) & 0xffff_ffff, u64::from(CATALOG_VERSION_1));
    let t = st.create_table_with(kv_schema(), &[P::Hybrid, P::Persistent]).unwrap();
    assert_eq!(
        (t.index_placement(None), t.index_placement(Some(0))),
        (Some(P::Dram), Some(P::Dram))
    );
    let (g, _) = placement_word(&st, 0);
    let head: TableHead = st.inner.pm.s().read_struct(g).unwrap();
    assert_eq!((head.ix_off, head.ix_count), (0, 0), "a version-1 descriptor");
    let mut tx = st.begin(false).unwrap();
    upsert(&st, &mut tx, 1, "one", 1).unwrap();
    tx.commit().unwrap();
    drop(t);
    st.close().unwrap();
    let (st, rep) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
    assert_eq!(rep.live_rows, 1);
    assert_eq!(contents(&st).len(), 1);
    st.check().unwrap();
}

fn catalog_word(st: &SofortStore, off: u64) -> u64 {
    st.inner.pm.s().load_u64(st.inner.pm.cat + off, Ordering::Acquire).unwrap()
}

fn poke(st: &SofortStore, off: u64, v: u64) {
    let pm = &st.inner.pm;
    pm.s().store_u64(pm.cat + off, v, Ordering::Release).unwrap();
    // ORDER(P-APP-1): the test's damage is durable before the store is reopened
    pm.s().persist(pm.cat + off, 8).unwrap();
}

#[test]
fn corrupt_or_newer_catalogs_are_typed_errors() {
    let dir = TestDir::new("sofort-corrupt");
    type Case = (u64, fn(u64) -> u64, &'static str);
    let cases: [Case; 4] = [
        (C_MAGIC, |_| 0, "corrupted"),
        (C_MAGIC, |m| m ^ 1, "corrupted"),
        (8, |w| w + 1, "incompatible"),       // version
        (32, |w| w ^ (1 << 40), "corrupted"), // slots/chunk rows: checksum
    ];
    for (i, (off, f, kind)) in cases.into_iter().enumerate() {
        let path = dir.join(&format!("db{i}"));
        let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(2)).unwrap();
        st.create_table(kv_schema()).unwrap();
        let w = catalog_word(&st, off);
        poke(&st, off, f(w));
        st.close().unwrap();
        let err = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
        let ok = match kind {
            "corrupted" => matches!(err, SofortError::Storage(StorageError::Corrupted { .. })),
            _ => matches!(err, SofortError::Storage(StorageError::Incompatible { .. })),
        };
        assert!(ok, "case {i}: {err:?}");
        // Nothing changed: the bad word is still there, and restoring it opens the store.
        let set = PoolSet::open(&path, &opts()).unwrap();
        let alloc = crate::alloc::PAllocator::open(Arc::new(set)).unwrap();
        let root = alloc.pool().resolve(alloc.root_location()).unwrap();
        let cat = alloc.pool().load_pptr(root).unwrap();
        let g = alloc.pool().resolve(cat).unwrap();
        assert_eq!(alloc.pool().load_u64(g + off, Ordering::Acquire).unwrap(), f(w));
        alloc.pool().store_u64(g + off, w, Ordering::Release).unwrap();
        // ORDER(P-APP-1): the test's damage is durable before the store is reopened
        alloc.pool().persist(g + off, 8).unwrap();
        alloc.close().unwrap();
        let (st, _) = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
        assert!(st.table("kv").is_some());
    }
    // A table descriptor whose schema bytes are damaged.
    let path = dir.join("desc");
    let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(2)).unwrap();
    st.create_table(kv_schema()).unwrap();
    let pm = &st.inner.pm;
    let d = pm.s().load_pptr(pm.set().resolve(st.inner.table_dir).unwrap()).unwrap();
    let g = pm.set().resolve(d).unwrap() + TABLE_HEAD + 3 * T_COLUMN;
    let b = pm.s().load_u64(g, Ordering::Acquire).unwrap();
    pm.s().store_u64(g, b ^ 0xff00, Ordering::Release).unwrap();
    // ORDER(P-APP-1): the test's damage is durable before the store is reopened
    pm.s().persist(g, 8).unwrap();
    st.close().unwrap();
    let err = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
    assert!(matches!(err, SofortError::Storage(StorageError::Corrupted { .. })), "{err:?}");
}

/// Regression: an area's extension pointer is null as `u64::MAX` in its segment word; when
/// creation's persist of the empty areas was lost, every area read an extension at segment 0,
/// offset 0 (the same block for all), and the next transaction with more entries than an area
/// holds would have written them there. Open now refuses areas whose blocks overlap: here two
/// areas name one (well-formed) extension block.
#[test]
fn areas_sharing_an_extension_block_are_corrupted() {
    let dir = TestDir::new("sofort-ext-overlap");
    let path = dir.join("db");
    let st = SofortStore::create(PoolSet::create(&path, &opts()).unwrap(), sopts(2)).unwrap();
    let pm = &st.inner.pm;
    let (a0, a1) = (st.inner.slots[0].area, st.inner.slots[1].area);
    let target = pm.set().to_pptr(a0 + A_EXT).unwrap();
    let ext =
        pm.staged_alloc(EXT_BYTES, target, |s, g| pm::init_null_ptrs(s, g + EXT_NEXT, 16)).unwrap();
    // ORDER(P-APP-1): the test's damage is durable before the store is reopened
    pm.s().persist_pptr(a1 + A_EXT, ext).unwrap();
    st.close().unwrap();
    let err = SofortStore::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
    assert!(matches!(err, SofortError::Storage(StorageError::Corrupted { .. })), "{err:?}");
}

#[test]
fn a_full_pool_is_pool_full_and_earlier_commits_stay() {
    let dir = TestDir::new("sofort-full");
    let path = dir.join("db");
    let o = opts().max_pool_size(3 * SEG);
    let st = SofortStore::create(PoolSet::create(&path, &o).unwrap(), sopts(2)).unwrap();
    st.create_table(kv_schema()).unwrap();
    let big = "f".repeat(4000);
    let mut k = 0i64;
    let err = loop {
        let mut tx = st.begin(false).unwrap();
        let r = (0..8).try_for_each(|j| upsert(&st, &mut tx, k * 8 + j, &big, j));
        match r {
            Ok(()) => {
                tx.commit().unwrap();
                k += 1;
            }
            Err(e) => {
                tx.abort();
                break e;
            }
        }
        assert!(k < 10_000, "never full");
    };
    assert!(matches!(err, SofortError::Storage(StorageError::PoolFull { .. })), "{err:?}");
    assert_eq!(contents(&st).len() as i64, k * 8);
    st.check().unwrap();
    // Still usable: replacing values reuses freed space after GC.
    let mut tx = st.begin(false).unwrap();
    remove(&st, &mut tx, 0).unwrap();
    tx.commit().unwrap();
    drop(st);
    let (st, _) = SofortStore::open(PoolSet::open(&path, &o).unwrap()).unwrap();
    assert_eq!(contents(&st).len() as i64, k * 8 - 1);
    let mut tx = st.begin(false).unwrap();
    upsert(&st, &mut tx, 0, &big, 0).unwrap();
    tx.commit().unwrap();
    st.check().unwrap();
}

#[test]
fn threads_commit_disjoint_and_conflicting_transactions() {
    let st = sim_store(8);
    st.create_table(kv_schema()).unwrap();
    let mut tx = st.begin(false).unwrap();
    upsert(&st, &mut tx, 5000, "shared", 0).unwrap();
    tx.commit().unwrap();
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for th in 0..2i64 {
            let st = &st;
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                let mut done = 0;
                while done < 200 {
                    let mut tx = st.begin(false).unwrap();
                    let r = upsert(st, &mut tx, th * 1000 + done % 20, "t", done)
                        .and_then(|()| upsert(st, &mut tx, 5000, "shared", th));
                    match r.and_then(|()| tx.commit().map(|_| ())) {
                        Ok(()) => done += 1,
                        Err(SofortError::Conflict(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let c = contents(&st);
    assert_eq!(c.len(), 41);
    st.check().unwrap();
}

/// Regression (found by seed `0x18eb018b783001de` of the crash-image test): a flush captures a
/// line's content when it runs and only the flushing thread's fence makes it durable (M3, M4),
/// so an unfenced flush can land *after* newer content another thread wrote and persisted on
/// the same line. The finalization used to flush its MVCC lines without a fence (P-SOF-8);
/// when the slot's next transactions committed on other threads, that stale flush stayed
/// pending on the first thread and its next fence wrote it over a later committed delete
/// whose area had been reused since: the deleted version came back. Here: T0 finalizes rows
/// 0..3 (one MVCC line) on this thread; T1 deletes row 0 here and commits on another thread;
/// T2 commits on a third thread (rewriting the area that named T1's delete); T3 commits here,
/// on another MVCC line. Its fence must not bring back row 0.
///
/// Under the strict write-back order (see the test above): the old code fails only there.
#[test]
fn a_stale_finalization_flush_cannot_undo_a_later_commit() {
    let st = sim_store(1);
    let t = st.create_table(kv_schema()).unwrap();
    let domain = st.inner.pm.set().sim().unwrap().clone();
    domain.set_writeback_order(WritebackOrder::Strict);
    let on_another_thread = |tx: TxHandle| {
        std::thread::scope(|s| s.spawn(move || tx.commit().unwrap()).join().unwrap());
    };
    // T0: keys 0..7, rows 0..7 (MVCC lines of rows 0..3 and 4..7), committed on this thread.
    let mut tx = st.begin(false).unwrap();
    let rows: Vec<u64> = (0..8).map(|k| tx.insert(&t, &row(k, "x", k)).unwrap()).collect();
    assert_eq!(rows, (0..8).collect::<Vec<u64>>());
    tx.commit().unwrap();
    // T1: delete key 0 here, commit elsewhere.
    let mut tx = st.begin(false).unwrap();
    remove(&st, &mut tx, 0).unwrap();
    on_another_thread(tx);
    // T2: delete key 4 (the other line) here, commit on a third thread: the slot's area now
    // names T2, not T1.
    let mut tx = st.begin(false).unwrap();
    remove(&st, &mut tx, 4).unwrap();
    on_another_thread(tx);
    // T3: delete key 5 (the other line again), committed on this thread.
    let mut tx = st.begin(false).unwrap();
    remove(&st, &mut tx, 5).unwrap();
    tx.commit().unwrap();
    let want: BTreeMap<i64, (String, i64)> =
        [1, 2, 3, 6, 7].into_iter().map(|k| (k, ("x".to_owned(), k))).collect();
    assert_eq!(contents(&st), want);
    // A crash now: only what is durable survives.
    let img = domain.capture(&ImageSpec::durable());
    drop(st);
    let (st, _) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    assert_eq!(contents(&st), want, "a committed delete was undone by a stale flush");
    st.check().unwrap();
}

#[path = "cont_tests.rs"]
mod cont;

/// Regression ([R2] item 3): values of at least `NT_MIN` bytes are written with non-temporal
/// stores, which stay pending on the writing thread until its next fence (M4; M6 does not
/// order them, they bypass the cache). An aborted transaction (`abort`, or a commit refused
/// after a write conflict) gave its extents back to the heap with those stores still
/// pending: another thread's transaction took the same extent, wrote its own value and
/// committed, and the aborting thread's next fence (here: its next commit) landed the aborted
/// bytes over the committed value. Before the fix the reopened store read key 2's value as
/// key 1's aborted bytes (`"aaa…acccccccc"` instead of `"ccc…"`, in both cases); with
/// P-SOF-12 the abort drains its non-temporal stores before the extents go back. The second
/// half is P-SOF-12's mutation check: with its fence dropped (every persist at a P-SOF-12
/// site made a no-op by the domain) the loss comes back.
#[test]
fn an_aborted_large_value_cannot_land_over_a_later_commit_in_its_extent() {
    let big = |c: char| c.to_string().repeat(NT_MIN + 64);
    for how in ["abort", "refused commit"] {
        let (got, dropped) = nt_abort_schedule(how, false);
        assert_eq!(dropped, 0, "{how}");
        assert_eq!(got.get(&2).map(|(v, _)| v.clone()), Some(big('c')), "{how}: key 2's value");
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), [0, 2, 3], "{how}");
        assert_eq!(got[&0], ("zero".to_owned(), if how == "abort" { 0 } else { 10 }), "{how}");
        let (got, dropped) = nt_abort_schedule(how, true);
        assert!(dropped > 0, "{how}: no P-SOF-12 persist was reached");
        assert_ne!(got.get(&2).map(|(v, _)| v.clone()), Some(big('c')), "{how}: P-SOF-12 dropped");
    }
}

/// The schedule of the test above; returns the contents recovered from the durable image
/// at the end, and how many P-SOF-12 persists were dropped (with `drop_p_sof_12`).
fn nt_abort_schedule(how: &str, drop_p_sof_12: bool) -> (BTreeMap<i64, (String, i64)>, u64) {
    let big = |c: char| c.to_string().repeat(NT_MIN + 64);
    let st = sim_store(2);
    let t = st.create_table(kv_schema()).unwrap();
    let domain = st.inner.pm.set().sim().unwrap().clone();
    let dropped = Arc::new(AtomicU64::new(0));
    if drop_p_sof_12 {
        let n = dropped.clone();
        domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
            // Fences reach the hook before they take effect: dropping the site here drops
            // this fence too.
            if e.site.rule == Some("P-SOF-12") {
                d.drop_persist(&e.site.key());
                n.fetch_add(1, Ordering::Relaxed);
            }
        })));
    }
    let mut tx = st.begin(false).unwrap();
    tx.insert(&t, &row(0, "zero", 0)).unwrap();
    tx.commit().unwrap();
    // This thread writes key 1's large value, then aborts, or meets a write conflict on
    // key 0 (updated by a commit after its snapshot) and has its commit refused.
    let mut tx = st.begin(false).unwrap();
    tx.insert(&t, &row(1, &big('a'), 1)).unwrap();
    match how {
        "abort" => tx.abort(),
        _ => {
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut u = st.begin(false).unwrap();
                    upsert(&st, &mut u, 0, "zero", 10).unwrap();
                    u.commit().unwrap();
                })
                .join()
                .unwrap()
            });
            let (r, _) = tx.get(&t, &pk(0)).unwrap().unwrap();
            assert!(tx.delete(&t, r).is_err(), "{how}: no write conflict");
            assert!(tx.commit().is_err(), "{how}: a conflicting transaction committed");
        }
    }
    // Another thread takes the freed extent for key 2's value of the same size and commits
    // (its own fence makes its value durable).
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut tx = st.begin(false).unwrap();
            tx.insert(&t, &row(2, &big('c'), 2)).unwrap();
            tx.commit().unwrap();
        })
        .join()
        .unwrap()
    });
    // This thread's next fence: a small commit.
    let mut tx = st.begin(false).unwrap();
    tx.insert(&t, &row(3, "three", 3)).unwrap();
    tx.commit().unwrap();
    domain.set_hook(None);
    let img = domain.capture(&ImageSpec::durable());
    drop(st);
    let (st, _) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    let got = contents(&st);
    if !drop_p_sof_12 {
        st.check().unwrap();
    }
    (got, dropped.load(Ordering::Relaxed))
}
