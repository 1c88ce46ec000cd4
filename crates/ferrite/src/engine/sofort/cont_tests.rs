//! Unit tests of continuable transactions (design §14): crash images at every fence of a
//! continuable transaction resume to exactly its completed statements, abort and timeout
//! paths, exact persist counts of one statement.
//!
//! Random tests print their seed; `FERRITE_TEST_SEED` replays one.

use super::*;

/// A continuable transaction's statements: one upsert or removal each.
fn statements(seed: u64, n: usize) -> Vec<Op> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|i| {
            let k = (rng.next_u64() % 12) as i64;
            if rng.next_u64().is_multiple_of(4) {
                Op::Del(k)
            } else {
                // Every fourth value is long enough for non-temporal stores.
                let len = if i % 4 == 3 { NT_MIN + 8 } else { 10 };
                Op::Put(k, format!("s{i}-{}", "y".repeat(len)), i as i64)
            }
        })
        .collect()
}

fn base() -> BTreeMap<i64, (String, i64)> {
    (0..8).map(|k| (k, (format!("base{k}"), k))).collect()
}

fn run_op(st: &SofortStore, tx: &mut TxHandle, o: &Op) {
    match o {
        Op::Put(k, v, x) => upsert(st, tx, *k, v, *x).unwrap(),
        Op::Del(k) => remove(st, tx, *k).unwrap(),
        Op::Abort => unreachable!("no aborts among statements"),
    }
}

/// A read record of statement `i` (the core stores the engine's payload as given).
fn read_rec(t: &PTable, i: usize) -> (u16, Vec<u8>) {
    (t.id, format!("read of statement {i}").into_bytes())
}

/// What `tx` itself sees of `kv` (its own writes included).
fn own_view(st: &SofortStore, tx: &mut TxHandle) -> BTreeMap<i64, (String, i64)> {
    let t = st.table("kv").unwrap();
    let sts = tx.sts();
    tx.scan_at(&t, None, Bound::Unbounded, Bound::Unbounded, true, usize::MAX, sts)
        .unwrap()
        .into_iter()
        .map(|(_, r)| {
            (r[0].as_i64().unwrap(), (r[1].as_str().unwrap().to_owned(), r[2].as_i64().unwrap()))
        })
        .collect()
}

fn store_with_base() -> SofortStore {
    let st = sim_store(3);
    st.create_table(kv_schema()).unwrap();
    let mut tx = st.begin(false).unwrap();
    for (k, (v, n)) in base() {
        upsert(&st, &mut tx, k, &v, n).unwrap();
    }
    tx.commit().unwrap();
    st
}

/// Crash images at every fence of a continuable transaction (durable only, pending lines,
/// every dirty line evicted, random mixes): recovery keeps the transaction unfinished with
/// `s` completed statements, where `s` is the number acknowledged (or one more, when the
/// crash fell in the acknowledging persist itself); its effects stay invisible to others; it
/// sees exactly its first `s` statements and their read records; resumed, it re-runs the
/// rest and commits to the model. Images taken after `commit` returned show it committed and
/// no unfinished transaction. Every eighth image is also recovered twice (idempotence).
#[test]
fn crash_images_of_a_continuable_transaction_resume_to_its_completed_statements() {
    let seed = seed();
    eprintln!("seed {seed:#x}");
    let ops = statements(seed, 10);
    let n = ops.len();
    let st = store_with_base();
    let t = st.table("kv").unwrap();
    let domain = st.inner.pm.set().sim().unwrap().clone();
    let images = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicU64::new(0));
    domain.set_hook(Some(capturing_hook(images.clone(), acked.clone(), seed)));
    let mut tx = st.begin_continuable().unwrap();
    for (i, o) in ops.iter().enumerate() {
        run_op(&st, &mut tx, o);
        tx.statement_end(&[read_rec(&t, i)]).unwrap();
        acked.store(i as u64 + 1, Ordering::SeqCst);
    }
    tx.commit().unwrap();
    acked.store(n as u64 + 1, Ordering::SeqCst);
    // The slot's next commit flushes the log's clear (P-SOF-33).
    let mut after = st.begin(false).unwrap();
    upsert(&st, &mut after, 500, "after", 0).unwrap();
    after.commit().unwrap();
    domain.set_hook(None);
    let mut all = base();
    apply(&mut all, &ops);
    let mut all_after = all.clone();
    all_after.insert(500, ("after".into(), 0));
    assert_eq!(contents(&st), all_after);
    drop(t);
    drop(st);

    let images = std::mem::take(&mut *images.lock().unwrap());
    assert!(images.len() > 40, "{} images", images.len());
    let (mut resumed, mut committed) = (0, 0);
    for (k, (a, img)) in images.iter().enumerate() {
        let a = *a as usize;
        let ctx = format!("seed {seed:#x} image {k} (acked {a})");
        let open = |img: &CrashImage| {
            let set = PoolSet::open_sim(img, &opts()).unwrap();
            SofortStore::open(set).unwrap_or_else(|e| panic!("{ctx}: {e}")).0
        };
        let st = open(img);
        st.check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        if k % 8 == 0 {
            // Recovery of the recovered (durable) state gives the same answer.
            let again = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
            let st2 = open(&again);
            assert_eq!(st2.unfinished().len(), st.unfinished().len(), "{ctx}");
            assert_eq!(contents(&st2), contents(&st), "{ctx}");
        }
        let u = st.unfinished();
        let got = contents(&st);
        if u.is_empty() {
            // Never started durably, or committed (only once every statement completed).
            let done = got == all || got == all_after;
            assert!(a == 0 && got == base() || a >= n && done, "{ctx}: {got:?}");
            committed += usize::from(done);
            continue;
        }
        assert!(a < n + 1, "{ctx}: unfinished after commit returned");
        assert_eq!(u.len(), 1, "{ctx}");
        let s = u[0].statements as usize;
        assert!(s == a || s == a + 1 && s <= n, "{ctx}: {s} statements");
        assert_eq!(got, base(), "{ctx}: an unfinished transaction's effects are invisible");
        let (mut tx, reads) = st.resume(u[0].txid).unwrap();
        assert!(matches!(st.resume(u[0].txid), Err(SofortError::UnknownTransaction(_))));
        let t = st.table("kv").unwrap();
        assert_eq!(reads, (0..s).map(|i| read_rec(&t, i)).collect::<Vec<_>>(), "{ctx}");
        let mut want = base();
        apply(&mut want, &ops[..s]);
        assert_eq!(own_view(&st, &mut tx), want, "{ctx}: the resumed transaction's view");
        for (i, o) in ops.iter().enumerate().skip(s) {
            run_op(&st, &mut tx, o);
            tx.statement_end(&[read_rec(&t, i)]).unwrap();
        }
        tx.commit().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(contents(&st), all, "{ctx}");
        st.check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        resumed += 1;
    }
    eprintln!("{} images: {resumed} resumed, {committed} committed", images.len());
    assert!(resumed > 20 && committed > 0, "{resumed} resumed, {committed} committed");
}

/// A crashed continuable transaction with two completed statements, its third running
/// (its lock durable); returns the crash image and its ops.
fn crashed_in_statement_3() -> CrashImage {
    let st = store_with_base();
    let t = st.table("kv").unwrap();
    let mut tx = st.begin_continuable().unwrap();
    upsert(&st, &mut tx, 100, "first", 1).unwrap();
    tx.statement_end(&[]).unwrap();
    remove(&st, &mut tx, 1).unwrap();
    tx.statement_end(&[read_rec(&t, 1)]).unwrap();
    upsert(&st, &mut tx, 2, "third", 3).unwrap();
    let img = st
        .inner
        .pm
        .set()
        .sim()
        .unwrap()
        .capture(&ImageSpec { evict: Pick::All, ..ImageSpec::default() });
    tx.abandon();
    img
}

#[test]
fn an_aborted_unfinished_transaction_is_gone_after_the_next_crash() {
    let img = crashed_in_statement_3();
    let st = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap().0;
    let u = st.unfinished();
    assert_eq!((u.len(), u[0].statements), (1, 2));
    let (tx, _) = st.resume(u[0].txid).unwrap();
    tx.abort();
    assert!(st.unfinished().is_empty());
    assert_eq!(contents(&st), base());
    st.check().unwrap();
    // The abort cleared the log durably (P-SOF-32) before undoing: a crash now finds nothing.
    let img2 = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
    let (st2, rep) = SofortStore::open(PoolSet::open_sim(&img2, &opts()).unwrap()).unwrap();
    assert_eq!(rep.unfinished, 0, "{rep:?}");
    assert!(st2.unfinished().is_empty());
    assert_eq!(contents(&st2), base());
    st2.check().unwrap();
}

/// The slot an unfinished transaction holds is not handed out, its locks hold against
/// writers of the new run (an older-epoch TXID that a slot still holds is not stolen), and
/// a crash after resumption finds it again with what it did since.
#[test]
fn an_unfinished_transaction_holds_its_slot_and_locks_across_crashes() {
    let img = crashed_in_statement_3();
    let (st, rep) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    assert_eq!((rep.unfinished, rep.kept_locks), (1, 2), "{rep:?}");
    let t = st.table("kv").unwrap();
    let id = st.unfinished()[0].txid;
    // Three slots, one held: two more transactions fit, a third is Busy.
    let mut a = st.begin(false).unwrap();
    let b = st.begin(true).unwrap();
    assert!(matches!(st.begin(true), Err(SofortError::Busy(_))));
    drop(b);
    // Row 1 is locked by the unfinished delete: a new writer conflicts.
    let (r1, _) = a.get(&t, &pk(1)).unwrap().expect("key 1 is visible to others");
    assert!(matches!(a.delete(&t, r1), Err(SofortError::Conflict(_))));
    a.abort();
    // Key 100 is held by the unfinished insert.
    let mut c = st.begin(false).unwrap();
    let r100 = t
        .pk_rows(c.space(), &super::super::ixkey::IxKey::new(&pk(100)))
        .unwrap()
        .expect("key 100 has a version")
        .as_slice()[0];
    assert_eq!(c.key_state(&t, r100).unwrap(), KeyState::Conflict);
    c.abort();
    // Resume, one more statement, crash again: two plus one statements, same id.
    let (mut tx, _) = st.resume(id).unwrap();
    upsert(&st, &mut tx, 101, "fourth", 4).unwrap();
    tx.statement_end(&[]).unwrap();
    let img2 = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
    tx.abandon();
    let st2 = SofortStore::open(PoolSet::open_sim(&img2, &opts()).unwrap()).unwrap().0;
    let u = st2.unfinished();
    assert_eq!((u.len(), u[0].txid, u[0].statements), (1, id, 3));
    let (mut tx, _) = st2.resume(id).unwrap();
    let mut want = base();
    want.insert(100, ("first".into(), 1));
    want.remove(&1);
    want.insert(101, ("fourth".into(), 4));
    assert_eq!(own_view(&st2, &mut tx), want);
    tx.commit().unwrap();
    assert_eq!(contents(&st2), want);
    st2.check().unwrap();
}

/// Versions deleted after an unfinished transaction's snapshot survive recovery (they are
/// not collected while it may read them): the resumed transaction still reads its snapshot.
#[test]
fn a_resumed_transaction_reads_its_old_snapshot() {
    let st = store_with_base();
    let t = st.table("kv").unwrap();
    let mut tx = st.begin_continuable().unwrap();
    upsert(&st, &mut tx, 100, "mine", 0).unwrap();
    tx.statement_end(&[]).unwrap();
    // Another transaction deletes key 3 and commits after tx's snapshot.
    let mut d = st.begin(false).unwrap();
    remove(&st, &mut d, 3).unwrap();
    d.commit().unwrap();
    let img = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
    tx.abandon();
    drop(t);
    drop(st);
    let (st, rep) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    assert_eq!(rep.retained_rows, 1, "{rep:?}");
    st.check().unwrap();
    let (mut tx, _) = st.resume(st.unfinished()[0].txid).unwrap();
    let view = own_view(&st, &mut tx);
    assert!(view.contains_key(&3), "key 3 is in the resumed snapshot: {view:?}");
    tx.commit().unwrap();
    // Once it ended, the kept version is collected when its slot is next taken (here: all
    // three slots at once): its row becomes reusable and its two index entries go.
    let c1 = st.check().unwrap();
    let all: Vec<TxHandle> = (0..3).map(|_| st.begin(true).unwrap()).collect();
    drop(all);
    let c2 = st.check().unwrap();
    assert_eq!((c2.reusable, c2.index_entries), (c1.reusable + 1, c1.index_entries - 2));
    assert!(!contents(&st).contains_key(&3));
}

/// Exact persist counts of one continuable statement (an insert of a short row): P-SOF-30
/// flushes the row's MVCC line, its three column slots, its value's extent and the record,
/// then fences; P-SOF-31 persists the state word (the header line, one fence).
/// A non-continuable transaction's statements persist nothing (its counts are pinned in
/// `fence_counts_of_single_row_transactions`, unchanged by this mode).
#[test]
fn persist_counts_of_one_continuable_statement() {
    let st = store_with_base();
    let t = st.table("kv").unwrap();
    // Warm up: the continuation directory and the slot's log block exist afterwards.
    let mut w = st.begin_continuable().unwrap();
    w.statement_end(&[]).unwrap();
    w.abort();
    let mut tx = st.begin_continuable().unwrap();
    let before = Counters::snapshot();
    let r = tx.insert(&t, &row(100, "ten bytes!", 1)).unwrap();
    let d0 = Counters::snapshot() - before;
    assert_eq!((d0.fences, d0.lines_flushed()), (0, 0), "execution persists nothing");
    let before = Counters::snapshot();
    tx.statement_end(&[]).unwrap();
    let d = Counters::snapshot() - before;
    let s = st.inner.s();
    let x = t.extents(s, r).unwrap();
    let (c, chunk, off, len) = x[0];
    let g = t.heaps[c].as_ref().unwrap().arr.block(chunk).unwrap() + off;
    let extent_lines = (g + len - 1) / 64 - g / 64 + 1;
    // The create record: 24 bytes at the log's first data offset (64: one line).
    assert_eq!(d.fences, 2, "{d:?}");
    assert_eq!(d.lines_flushed(), 1 + 3 + extent_lines + 1 + 1, "{d:?}");
    tx.commit().unwrap();
}

/// Regression: a continuable transaction that only read commits without an area (nothing
/// names it committed), so its commit must clear the log durably (P-SOF-32), or the next
/// recovery would hand back a transaction the client saw commit.
#[test]
fn a_continuable_transaction_that_wrote_nothing_is_not_unfinished_after_commit() {
    let st = store_with_base();
    let t = st.table("kv").unwrap();
    let mut tx = st.begin_continuable().unwrap();
    assert!(tx.get(&t, &pk(1)).unwrap().is_some());
    tx.statement_end(&[read_rec(&t, 0)]).unwrap();
    tx.commit().unwrap();
    let img = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
    let (st2, rep) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    assert_eq!(rep.unfinished, 0, "{rep:?}");
    st2.check().unwrap();
}

/// Regression: the slot's next continuable transaction reuses the log; its header stores
/// put the TXID last, so a crash with the header line evicted in any store-order prefix (M2)
/// never shows the new TXID with the previous transaction's count and records (which would
/// name locks the new one does not hold: `Corrupted`).
#[test]
fn a_reused_log_header_never_mixes_two_transactions() {
    let st = store_with_base();
    let t = st.table("kv").unwrap();
    let mut t1 = st.begin_continuable().unwrap();
    upsert(&st, &mut t1, 100, "t1", 0).unwrap();
    t1.statement_end(&[read_rec(&t, 0)]).unwrap();
    t1.commit().unwrap();
    // An image at every store of the next begin, every dirty line evicted: each store-order
    // prefix of the header line.
    let domain = st.inner.pm.set().sim().unwrap().clone();
    let images = Arc::new(Mutex::new(Vec::new()));
    let sink = images.clone();
    domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
        if e.kind == EventKind::Store {
            let spec = ImageSpec { evict: Pick::All, ..ImageSpec::default() };
            sink.lock().unwrap().push(d.capture(&spec));
        }
    })));
    let t2 = st.begin_continuable().unwrap();
    domain.set_hook(None);
    let images = std::mem::take(&mut *images.lock().unwrap());
    assert!(images.len() >= 3, "{} images", images.len());
    let img = domain.capture(&ImageSpec { evict: Pick::All, ..ImageSpec::default() });
    drop(t2);
    for (k, img) in images.iter().chain([&img]).enumerate() {
        let (st2, rep) = SofortStore::open(PoolSet::open_sim(img, &opts()).unwrap())
            .unwrap_or_else(|e| panic!("image {k}: {e}"));
        let u = st2.unfinished();
        assert!(u.len() <= 1 && u.iter().all(|u| u.statements == 0), "{u:?} {rep:?}");
        assert!(contents(&st2).contains_key(&100));
        st2.check().unwrap();
    }
}

/// A damaged continuation log is `Corrupted` at open, never a panic: a flipped payload byte
/// (checksum), a state word ending beyond the chain, a bad magic.
#[test]
fn a_damaged_continuation_log_is_corrupted() {
    let img = crashed_in_statement_3();
    let (st, _) = SofortStore::open(PoolSet::open_sim(&img, &opts()).unwrap()).unwrap();
    let head = lock_log_head(&st);
    let s = st.inner.s();
    let state = s.load_u64(head + L_STATE, Ordering::Acquire).unwrap();
    let first = s.load_u64(head + L_DATA + 16, Ordering::Acquire).unwrap();
    let damage = [
        (head + L_DATA + 16, first ^ 1),
        (head + L_STATE, state | 0x7fff_0000),
        (head + L_MAGIC, 0x1234),
    ];
    for (off, v) in damage {
        let old = s.load_u64(off, Ordering::Acquire).unwrap();
        s.store_u64(off, v, Ordering::Release).unwrap();
        // ORDER(P-APP-1): the test's damage is durable before the image is taken
        s.persist(off, 8).unwrap();
        let bad = st.inner.pm.set().sim().unwrap().capture(&ImageSpec::durable());
        match SofortStore::open(PoolSet::open_sim(&bad, &opts()).unwrap()) {
            Err(SofortError::Storage(StorageError::Corrupted { .. })) => {}
            other => panic!("damage at {off:#x}: {other:?}"),
        }
        s.store_u64(off, old, Ordering::Release).unwrap();
        // ORDER(P-APP-1): the damage undone before the next one
        s.persist(off, 8).unwrap();
    }
}

/// The first block of the log of the (one) slot holding an unfinished transaction.
fn lock_log_head(st: &SofortStore) -> u64 {
    let u = st.unfinished();
    let slot = &st.inner.slots[u[0].txid as usize & ((1 << SLOT_BITS) - 1)];
    slot.local.lock().unwrap().log[0]
}
