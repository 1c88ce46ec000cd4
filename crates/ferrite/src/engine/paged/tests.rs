//! Property tests of the paged B+-tree.
//!
//! - `agrees_with_a_btreemap`: random batches of inserts, puts, deletes, gets, bounded scans
//!   in both directions, commits and rollbacks on 512-byte pages (so splits, merges and
//!   overflow chains happen all the time), against `std::collections::BTreeMap`. After every
//!   batch: [`BTree::check`], the whole contents, and the page accounting (every page is in
//!   the tree or on the free list, and the store grows only when no freed page is left).
//! - `reopened_through_the_journal_agrees_with_a_btreemap` and `..._wal_...`: the same
//!   operations through the [`Pager`] on a PM store under each protocol (the WAL with several
//!   checkpoint intervals), in transactions that commit or are dropped, the pager dropped and
//!   reopened after every batch (closed first or not: a WAL then recovers from its frames);
//!   after every batch and every reopen, the tree against the model and the meta page's page
//!   accounting.
//! - `random_pages_never_panic` and `damaged_trees_never_panic`: arbitrary bytes given to
//!   every page accessor, and a valid tree with bytes flipped run through every tree
//!   operation: errors are allowed, panics and endless loops are not.
//!
//! Seeded: each run prints `FERRITE_TEST_SEED=...`; setting it replays the run.
//! `PROPTEST_CASES` sets the number of cases (pinned in CI by `scripts/test.sh`).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use ferrite_pmem::internals::testing::{TestDir, test_seed};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::btree::{BTree, TreeStats};
use super::page::{self, Header};
use super::pager::{Meta, Pager};
use super::pages::{MemPages, PageRead, PageSize, PageWrite};
use super::protocol::{Protocol, fash::Fash, test_protocol};
use crate::error::Error;
use crate::query::Direction;

const PAGE: usize = 512;

fn config() -> Config {
    Config { rng_seed: RngSeed::Fixed(test_seed()), failure_persistence: None, ..Config::default() }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u8>, Val),
    Put(Vec<u8>, Val),
    Delete(Vec<u8>),
    /// Insert (or put) `n` keys `prefix ++ i` (2 bytes, big-endian order): deep trees.
    Fill {
        prefix: Vec<u8>,
        n: u16,
        val: Val,
        put: bool,
    },
    /// Delete every key in the range: merges and shrinking.
    Clear {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    },
    Get(Vec<u8>),
    Scan {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        desc: bool,
        limit: usize,
    },
    Commit,
    Rollback,
}

/// A value: its length and a seed byte (values are derived, to keep failing cases short).
#[derive(Clone, Copy, Debug)]
struct Val(usize, u8);

impl Val {
    fn bytes(self) -> Vec<u8> {
        (0..self.0).map(|i| self.1.wrapping_add((i * 31) as u8)).collect()
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Short keys over a small alphabet: collisions, shared prefixes, zero bytes.
        8 => prop::collection::vec(prop_oneof![Just(0u8), Just(1), Just(b'a'), Just(0xFF)], 0..8),
        3 => prop::collection::vec(any::<u8>(), 0..=58),
        // Longer than the limit of 512-byte pages (58 bytes).
        1 => prop::collection::vec(any::<u8>(), 59..80),
    ]
}

fn val() -> impl Strategy<Value = Val> {
    let len = prop_oneof![6 => 0..40usize, 2 => 40..=128usize, 2 => 129..2000usize];
    (len, any::<u8>()).prop_map(|(l, b)| Val(l, b))
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (key(), val()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (key(), val()).prop_map(|(k, v)| Op::Put(k, v)),
        6 => key().prop_map(Op::Delete),
        1 => (key(), 1..400u16, val(), any::<bool>())
            .prop_map(|(mut prefix, n, val, put)| {
                prefix.truncate(40);
                Op::Fill { prefix, n, val, put }
            }),
        1 => (bound(), bound()).prop_map(|(lo, hi)| Op::Clear { lo, hi }),
        2 => key().prop_map(Op::Get),
        2 => (bound(), bound(), any::<bool>(), 1..100usize)
            .prop_map(|(lo, hi, desc, limit)| Op::Scan { lo, hi, desc, limit }),
        1 => Just(Op::Commit),
        1 => Just(Op::Rollback),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The model's answer to a scan (`BTreeMap::range` panics on inverted bounds; a tree scan
/// of them is empty).
fn model_scan(
    m: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    desc: bool,
    limit: usize,
) -> Vec<Vec<u8>> {
    let empty = match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    };
    if empty {
        return Vec::new();
    }
    let r = m.range::<Vec<u8>, _>((lo.as_ref(), hi.as_ref()));
    if desc {
        r.rev().take(limit).map(|e| e.0.clone()).collect()
    } else {
        r.take(limit).map(|e| e.0.clone()).collect()
    }
}

fn dir(desc: bool) -> Direction {
    if desc { Direction::Descending } else { Direction::Ascending }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

/// The tree's check and its whole contents against the model.
fn check_contents<R: PageRead>(
    t: &BTree,
    p: &R,
    model: &Model,
) -> Result<TreeStats, TestCaseError> {
    let stats = t.check(p).map_err(|e| TestCaseError::fail(format!("check: {e}")))?;
    prop_assert_eq!(stats.entries, model.len() as u64);
    let all: Vec<(Vec<u8>, Vec<u8>)> = t
        .range(p, Bound::Unbounded, Bound::Unbounded, Direction::Ascending)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    prop_assert!(all == want, "contents differ from the model");
    Ok(stats)
}

/// The tree's contents, its check, and the page accounting against the model.
fn verify(t: &BTree, p: &MemPages, model: &Model) -> Result<u64, TestCaseError> {
    let stats = check_contents(t, p, model)?;
    // Every page is the meta page, a tree page, or free: nothing leaks.
    prop_assert_eq!(1 + stats.pages() + u64::from(p.free_count()), u64::from(p.page_count()));
    Ok(stats.pages())
}

/// The store grows only when the free list is empty, so after each single-key operation its
/// size stays within that operation's transient pages of the largest live set seen before.
fn track(p: &MemPages, peak_live: &mut u32) -> Result<(), TestCaseError> {
    prop_assert!(
        p.page_count() <= *peak_live + 16,
        "{} pages, peak live {}",
        p.page_count(),
        *peak_live
    );
    *peak_live = (*peak_live).max(p.page_count() - p.free_count());
    Ok(())
}

/// Applies one tree operation (not `Commit` or `Rollback`, which belong to the caller's
/// pages) to `t` in `p` and to the model; `step` runs after every key a `Fill` or `Clear`
/// changes.
fn apply<P: PageWrite>(
    t: &BTree,
    p: &mut P,
    op: Op,
    model: &mut Model,
    step: &mut dyn FnMut(&P) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let max_key = BTree::limits(p).max_key;
    match op {
        Op::Insert(k, v) | Op::Put(k, v) if k.len() > max_key => {
            let r = t.insert(p, &k, &v.bytes());
            prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r);
            let r = t.put(p, &k, &v.bytes());
            prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r);
        }
        Op::Insert(k, v) => {
            let fresh = !model.contains_key(&k);
            prop_assert_eq!(t.insert(p, &k, &v.bytes()).unwrap(), fresh);
            if fresh {
                model.insert(k, v.bytes());
            }
        }
        Op::Put(k, v) => {
            let had = model.insert(k.clone(), v.bytes()).is_some();
            prop_assert_eq!(t.put(p, &k, &v.bytes()).unwrap(), had);
        }
        Op::Delete(k) => {
            prop_assert_eq!(t.delete(p, &k).unwrap(), model.remove(&k).is_some());
        }
        Op::Fill { prefix, n, val, put } => {
            for i in 0..n {
                let mut k = prefix.clone();
                k.push((i >> 8) as u8);
                k.push(i as u8);
                let v = Val(val.0 % 200, val.1.wrapping_add(i as u8)).bytes();
                if put {
                    let had = model.insert(k.clone(), v.clone()).is_some();
                    prop_assert_eq!(t.put(p, &k, &v).unwrap(), had);
                } else {
                    let fresh = !model.contains_key(&k);
                    prop_assert_eq!(t.insert(p, &k, &v).unwrap(), fresh);
                    if fresh {
                        model.insert(k, v);
                    }
                }
                step(p)?;
            }
        }
        Op::Clear { lo, hi } => {
            for k in model_scan(model, &lo, &hi, false, usize::MAX) {
                prop_assert!(t.delete(p, &k).unwrap());
                model.remove(&k);
                step(p)?;
            }
        }
        Op::Get(k) => {
            prop_assert_eq!(t.get(p, &k).unwrap(), model.get(&k).cloned());
        }
        Op::Scan { lo, hi, desc, limit } => {
            let got: Vec<Vec<u8>> = t
                .range(p, as_ref(&lo), as_ref(&hi), dir(desc))
                .unwrap()
                .take(limit)
                .map(|r| r.unwrap().0)
                .collect();
            prop_assert_eq!(got, model_scan(model, &lo, &hi, desc, limit));
        }
        Op::Commit | Op::Rollback => {
            return Err(TestCaseError::fail("commit and rollback are the caller's"));
        }
    }
    Ok(())
}

fn run(batches: Vec<Vec<Op>>) -> Result<(), TestCaseError> {
    let mut p = MemPages::new(PageSize::new(PAGE).unwrap());
    let t = BTree::create(&mut p).unwrap();
    p.commit();
    let (mut model, mut committed) = (Model::new(), Model::new());
    let mut peak_live = p.page_count();
    for batch in batches {
        for op in batch {
            match op {
                Op::Commit => {
                    p.commit();
                    committed = model.clone();
                }
                Op::Rollback => {
                    p.rollback();
                    model = committed.clone();
                }
                op => apply(&t, &mut p, op, &mut model, &mut |p| track(p, &mut peak_live))?,
            }
            track(&p, &mut peak_live)?;
        }
        verify(&t, &p, &model)?;
    }
    // Emptying the tree frees every page but the root; dropping it frees the root too.
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for k in keys {
        prop_assert!(t.delete(&mut p, &k).unwrap());
    }
    prop_assert_eq!(verify(&t, &p, &Model::new())?, 1);
    t.drop_tree(&mut p).unwrap();
    prop_assert_eq!(p.free_count() + 1, p.page_count());
    Ok(())
}

/// One batch of the pager test: its operations, whether its last transaction commits (else
/// it is dropped, which rolls it back), and whether the pager is closed (the WAL
/// checkpointed) before the reopen that follows, or only dropped (the WAL recovered from its
/// frames).
type PagerBatch = (Vec<Op>, bool, bool);

/// The committed state, read through a fresh reader: the tree against the model, and the
/// page accounting of the meta page (meta page, catalog tree, the tree, free pages).
fn verify_committed(pager: &Arc<Pager>, t: &BTree, model: &Model) -> Result<Meta, TestCaseError> {
    let r = pager.begin_read().unwrap();
    let meta = r.meta();
    let stats = check_contents(t, &r, model)?;
    let catalog = BTree::open(meta.catalog_root).check(&r).unwrap().pages();
    prop_assert_eq!(
        1 + catalog + stats.pages() + u64::from(meta.free_count),
        meta.page_count,
        "pages leaked or counted twice: {:?}",
        meta
    );
    Ok(meta)
}

/// The B+-tree through the pager on a PM store under a protocol (`wal`: see
/// [`test_protocol`]): batches of operations in transactions, committed or rolled back, with
/// the whole pager dropped and reopened after every batch.
fn run_pager(wal: Option<u64>, batches: Vec<PagerBatch>) -> Result<(), TestCaseError> {
    run_pager_on(&|path, create| test_protocol(path, create, PAGE, wal), batches)
}

/// [`run_pager`] under FASH (`fast` false) or FAST.
fn run_pager_in_place(fast: bool, batches: Vec<PagerBatch>) -> Result<(), TestCaseError> {
    run_pager_on(
        &|path, create| {
            let (_, store) = super::store::test_store(path, create, PAGE);
            Protocol::Fash(Fash::new(store, fast, false).unwrap())
        },
        batches,
    )
}

fn run_pager_on(
    protocol: &dyn Fn(&std::path::Path, bool) -> Protocol,
    batches: Vec<PagerBatch>,
) -> Result<(), TestCaseError> {
    let dir = TestDir::new("paged-reopen");
    let path = dir.join("db");
    let size = PageSize::new(PAGE).unwrap();
    let mut pager = Pager::create(protocol(&path, true), size).unwrap();
    // A cache smaller than the tree, so that reads both hit and evict (G6).
    pager.set_cache_pages(8).unwrap();
    let mut w = pager.begin_write().unwrap();
    let t = BTree::create(&mut w).unwrap();
    w.commit().unwrap();
    let (mut model, mut committed) = (Model::new(), Model::new());
    for (ops, commit_last, close) in batches {
        let mut w = pager.begin_write().unwrap();
        for op in ops {
            match op {
                Op::Commit => {
                    w.commit().unwrap();
                    w = pager.begin_write().unwrap();
                    committed = model.clone();
                }
                Op::Rollback => {
                    drop(w);
                    w = pager.begin_write().unwrap();
                    model = committed.clone();
                }
                op => apply(&t, &mut w, op, &mut model, &mut |_| Ok(()))?,
            }
        }
        if commit_last {
            w.commit().unwrap();
            committed = model.clone();
        } else {
            drop(w);
            model = committed.clone();
        }
        let meta = verify_committed(&pager, &t, &committed)?;
        if close {
            pager.close().unwrap();
        }
        drop(pager);
        pager = Pager::open(protocol(&path, false)).unwrap();
        pager.set_cache_pages(8).unwrap();
        // FASH/FAST do not write a meta page whose only change is the sequence number.
        prop_assert_eq!(Meta { seq: meta.seq, ..pager.meta().unwrap() }, meta);
        verify_committed(&pager, &t, &committed)?;
    }
    Ok(())
}

fn pager_batches() -> impl Strategy<Value = Vec<PagerBatch>> {
    let batch = (prop::collection::vec(op(), 1..40), any::<bool>(), any::<bool>());
    prop::collection::vec(batch, 1..8)
}

/// Fewer cases than the in-memory tests: each one formats a pool set and reopens it.
fn pager_config() -> Config {
    let c = config();
    Config { cases: (c.cases / 4).max(4), ..c }
}

/// A valid tree of a few hundred entries (some overflowed), committed.
fn sample_tree() -> (MemPages, BTree) {
    let mut p = MemPages::new(PageSize::new(PAGE).unwrap());
    let t = BTree::create(&mut p).unwrap();
    for i in 0..300u32 {
        let k = format!("k{:05}", i * 37 % 1000).into_bytes();
        let v = vec![i as u8; (i as usize * 11) % 300];
        t.insert(&mut p, &k, &v).unwrap();
    }
    p.commit();
    (p, t)
}

/// Every tree operation on a possibly damaged tree: any result but a panic.
fn exercise(p: &mut MemPages, t: BTree) {
    let _ = t.check(p);
    for k in [&b"k00370"[..], b"", b"zzz", b"k5"] {
        let _ = t.get(p, k);
    }
    for desc in [false, true] {
        if let Ok(c) = t.range(p, Bound::Included(b"k001"), Bound::Excluded(b"k9"), dir(desc)) {
            let _ = c.take(2000).count();
        }
    }
    let _ = t.insert(p, b"k00371", &[7; 40]);
    let _ = t.put(p, b"k00370", &[8; 400]);
    let _ = t.delete(p, b"k00740");
    let _ = t.delete(p, b"k00407");
    let _ = t.drop_tree(p);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn agrees_with_a_btreemap(batches in prop::collection::vec(prop::collection::vec(op(), 1..40), 1..12)) {
        run(batches)?;
    }

    #[test]
    fn random_pages_never_panic(bytes in prop::collection::vec(any::<u8>(), PAGE), kind in prop_oneof![Just(page::KIND_LEAF), Just(page::KIND_INTERIOR), any::<u8>()], count in 0u16..40) {
        let mut b = bytes;
        // Mostly plausible headers, so the accessors get past the first check.
        b[0] = kind;
        b[3..5].copy_from_slice(&count.to_le_bytes());
        let _ = page::check(&b);
        if let Ok(h) = Header::read(&b) {
            for i in 0..=h.count {
                let _ = page::key_at(&b, &h, i);
                let _ = page::leaf_cell(&b, &h, i);
                let _ = page::interior_cell(&b, &h, i);
                let _ = page::child_at(&b, &h, i);
                let _ = page::cell_bytes(&b, &h, i);
            }
            let _ = page::search(&b, &h, b"key");
            let _ = page::child_index(&b, &h, b"key");
            let _ = page::cells(&b, &h);
            let _ = page::free_bytes(&b, &h);
            let _ = page::used_bytes(&b, &h);
            let mut w = b.clone();
            let _ = page::insert_cell(&mut w, 0, &page::encode_leaf(b"k", page::LeafValue::Inline(b"v")));
            let _ = page::replace_cell(&mut w, 0, &page::encode_interior(3, b"key"));
            let _ = page::remove_cell(&mut w, 0);
            let _ = page::compact(&mut b.clone());
            let _ = page::rebuild_holes(&mut b.clone());
        }
        // The same bytes as a whole tree: the root and its would-be children.
        let mut p = MemPages::new(PageSize::new(PAGE).unwrap());
        for _ in 0..4 {
            let no = p.allocate().unwrap();
            p.poke(no, &b);
        }
        exercise(&mut p, BTree::open(1));
    }

    #[test]
    fn damaged_trees_never_panic(flips in prop::collection::vec((any::<u32>(), 0usize..PAGE, any::<u8>()), 1..8)) {
        let (mut p, t) = sample_tree();
        for (no, at, x) in flips {
            // Any page but the meta page; the sample tree has no free pages.
            let no = 1 + no % (p.page_count() - 1);
            let mut b = p.page(no).unwrap().to_vec();
            b[at] ^= x | 1;
            p.poke(no, &b);
        }
        exercise(&mut p, t);
    }
}

proptest! {
    #![proptest_config(pager_config())]

    #[test]
    fn reopened_through_the_journal_agrees_with_a_btreemap(batches in pager_batches()) {
        run_pager(None, batches)?;
    }

    #[test]
    fn reopened_through_fash_and_fast_agrees_with_a_btreemap(fast in any::<bool>(), batches in pager_batches()) {
        run_pager_in_place(fast, batches)?;
    }

    #[test]
    fn reopened_through_the_wal_agrees_with_a_btreemap(every in prop_oneof![Just(0u64), Just(8), Just(64)], batches in pager_batches()) {
        run_pager(Some(every), batches)?;
    }
}

#[test]
fn the_sample_tree_has_every_kind_of_page() {
    let (p, t) = sample_tree();
    let s = t.check(&p).unwrap();
    assert!(s.height >= 3 && s.overflow > 0, "{s:?}");
    assert_eq!(p.free_count(), 0);
}

#[test]
fn freed_pages_are_reused_before_the_store_grows() {
    let mut p = MemPages::new(PageSize::new(PAGE).unwrap());
    let t = BTree::create(&mut p).unwrap();
    let fill = |p: &mut MemPages| {
        for i in 0..400u32 {
            t.insert(p, format!("{i:08}").as_bytes(), &[1; 100]).unwrap();
        }
    };
    fill(&mut p);
    let grown = p.page_count();
    for i in 0..400u32 {
        t.delete(&mut p, format!("{i:08}").as_bytes()).unwrap();
    }
    fill(&mut p);
    assert_eq!(p.page_count(), grown, "the same inserts again reuse the freed pages");
    assert_eq!(p.free_count(), 0);
}

#[test]
fn every_page_size_works() {
    for size in [512, 1024, 4096, 65536] {
        let mut p = MemPages::new(PageSize::new(size).unwrap());
        let t = BTree::create(&mut p).unwrap();
        let limits = BTree::limits(&p);
        let mut model = Model::new();
        for i in 0..3000u32 {
            // Keys up to the limit, values from empty to four times the inline limit.
            let mut k = format!("{:08}", i.wrapping_mul(2_654_435_761) % 100_000).into_bytes();
            k.resize(8 + (i as usize * 7) % (limits.max_key - 7), b'x');
            let v = Val((i as usize * 131) % (4 * limits.max_inline), i as u8).bytes();
            t.put(&mut p, &k, &v).unwrap();
            model.insert(k, v);
        }
        let keys: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
        for k in keys {
            assert!(t.delete(&mut p, &k).unwrap());
            model.remove(&k);
        }
        verify(&t, &p, &model).unwrap();
        t.drop_tree(&mut p).unwrap();
        assert_eq!(p.free_count() + 1, p.page_count(), "{size}");
    }
}

/// Regression ([R2] item 5): a failure after the commit point (WAL's and NVWAL's automatic
/// checkpoint, FASH's checkpoint of every logged commit) made the pager's commit return that
/// error, although the batch was durable and the next open recovered it: an application told
/// "not committed" that retried applied the transaction twice. Before the fix the commit
/// here returned `Err(PoolFull)` under each of the three protocols; now it returns `Ok`, the
/// handle is poisoned (G5), and the reopened pager holds the commit.
#[test]
fn a_checkpoint_that_fails_after_the_commit_point_leaves_a_successful_commit() {
    use super::protocol::{FAIL_CHECKPOINTS, nvwal::Nvwal};
    use super::store::log::LogFile;
    use crate::options::NvwalSync;
    let size = PageSize::new(PAGE).unwrap();
    for name in ["wal", "nvwal", "fash"] {
        let dir = TestDir::new("paged-ckpt-fails");
        let path = dir.join("db");
        let protocol = |create: bool| match name {
            "wal" => test_protocol(&path, create, PAGE, Some(1)),
            "nvwal" => {
                let (files, store) = super::store::test_store(&path, create, PAGE);
                Protocol::Nvwal(Nvwal::new(store, LogFile::Pm(files), 1, NvwalSync::Eager).unwrap())
            }
            _ => {
                let (_, store) = super::store::test_store(&path, create, PAGE);
                Protocol::Fash(Fash::new(store, false, false).unwrap())
            }
        };
        let pager = Pager::create(protocol(true), size).unwrap();
        let mut w = pager.begin_write().unwrap();
        let t = BTree::create(&mut w).unwrap();
        assert!(t.insert(&mut w, b"a", b"first").unwrap());
        w.commit().unwrap();
        let mut w = pager.begin_write().unwrap();
        assert!(t.insert(&mut w, b"b", b"second").unwrap());
        FAIL_CHECKPOINTS.with(|f| f.set(true));
        let committed = w.commit();
        FAIL_CHECKPOINTS.with(|f| f.set(false));
        assert!(committed.is_ok(), "{name}: the commit point was reached: {committed:?}");
        assert!(
            matches!(pager.begin_write(), Err(Error::Poisoned)),
            "{name}: the failed checkpoint poisons the handle"
        );
        drop(pager);
        let pager = Pager::open(protocol(false)).unwrap();
        let r = pager.begin_read().unwrap();
        assert_eq!(t.get(&r, b"a").unwrap().as_deref(), Some(&b"first"[..]), "{name}");
        assert_eq!(t.get(&r, b"b").unwrap().as_deref(), Some(&b"second"[..]), "{name}");
    }
}
