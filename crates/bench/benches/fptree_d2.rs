//! The [D2] FPTree benchmark, single-thread parts: the hybrid FPTree with 8-byte keys
//! (`FPTree`) and 16- and 64-byte string keys (`FPTreeVar`) against `BTreeMap` with the same
//! keys in the same order: insert, point lookup, update, delete, scan of 100 from a random start,
//! full ordered scans (both directions); restart (allocator recovery + tree open, and the tree
//! open alone) against rebuilding a DRAM tree by reinsertion of every pair read back from the
//! leaves; DRAM of the inner index as a share of the data and of the footprint, after the inserts and after
//! the restart; and the allocation share of an
//! insert (the leaf-group question): the time of one leaf allocation into a log slot, times the
//! number of splits, over the time of all inserts.
//!
//! Keys: `u64` from `SplitMix64(42)`; string keys are fixed-width random bytes from the same
//! generator (so their order is random too). 1 M keys by default, `FERRITE_BENCH_KEYS` for
//! another count; `FERRITE_BENCH_KINDS` (comma list of `u64`, `s16`, `s64`) to run fewer kinds.
//! Every figure is the best of `FERRITE_BENCH_REPS` (default 3) passes over all keys, except
//! inserts, deletes and restarts, which run once per kind on fresh trees (pools on `/dev/shm`,
//! Emulated mode with `CLWB`+`SFENCE`, prefaulted before timing). Flushed lines and fences per
//! operation come from the pmem counters of the same pass.
//!
//! Run: `cargo bench -p ferrite-bench --bench fptree_d2`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::ops::Bound::{Included, Unbounded};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_skiplist::SkipMap;
use ferrite::fptree::olc::IndexKey;

use ferrite::alloc::PAllocator;
use ferrite::fptree::{
    ByteKey, Direction, FPTree, FPTreeVar, IndexPlacement, LEAF_SIZE, Tree, TreeOptions, U64Key,
    VAR_LEAF_SIZE, read_all_pairs,
};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PoolSet, SplitMix64};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One index under test with keys of type `K`.
trait Index<K> {
    fn insert(&mut self, k: &K, v: u64);
    fn get(&self, k: &K) -> Option<u64>;
    fn update(&mut self, k: &K, v: u64);
    fn delete(&mut self, k: &K);
    /// Up to `n` pairs from `k` on, in `dir` order; returns a checksum.
    fn scan_from(&self, k: &K, n: usize, dir: Direction) -> u64;
    /// Every pair in `dir` order; returns the count.
    fn scan_all(&self, dir: Direction) -> usize;
}

impl Index<u64> for FPTree {
    fn insert(&mut self, k: &u64, v: u64) {
        assert!(FPTree::insert(self, *k, v).unwrap());
    }
    fn get(&self, k: &u64) -> Option<u64> {
        FPTree::get(self, *k).unwrap()
    }
    fn update(&mut self, k: &u64, v: u64) {
        assert!(FPTree::update(self, *k, v).unwrap());
    }
    fn delete(&mut self, k: &u64) {
        assert!(FPTree::delete(self, *k).unwrap());
    }
    fn scan_from(&self, k: &u64, n: usize, dir: Direction) -> u64 {
        let mut sum = 0u64;
        let r = match dir {
            Direction::Forward => (Included(*k), Unbounded),
            Direction::Backward => (Unbounded, Included(*k)),
        };
        self.scan(r, dir, n, |k, v| {
            sum = sum.wrapping_add(k ^ v);
            ControlFlow::Continue(())
        })
        .unwrap();
        sum
    }
    fn scan_all(&self, dir: Direction) -> usize {
        let mut sum = 0u64;
        let n = self
            .scan(.., dir, usize::MAX, |k, v| {
                sum = sum.wrapping_add(k ^ v);
                ControlFlow::Continue(())
            })
            .unwrap();
        black_box(sum);
        n
    }
}

impl Index<Vec<u8>> for FPTreeVar {
    fn insert(&mut self, k: &Vec<u8>, v: u64) {
        assert!(FPTreeVar::insert(self, k, v).unwrap());
    }
    fn get(&self, k: &Vec<u8>) -> Option<u64> {
        FPTreeVar::get(self, k).unwrap()
    }
    fn update(&mut self, k: &Vec<u8>, v: u64) {
        assert!(FPTreeVar::update(self, k, v).unwrap());
    }
    fn delete(&mut self, k: &Vec<u8>) {
        assert!(FPTreeVar::delete(self, k).unwrap());
    }
    fn scan_from(&self, k: &Vec<u8>, n: usize, dir: Direction) -> u64 {
        let mut sum = 0u64;
        let r = match dir {
            Direction::Forward => (Included(&k[..]), Unbounded),
            Direction::Backward => (Unbounded, Included(&k[..])),
        };
        self.scan(r, dir, n, |k, v| {
            sum = sum.wrapping_add(u64::from(k[0]) ^ v);
            ControlFlow::Continue(())
        })
        .unwrap();
        sum
    }
    fn scan_all(&self, dir: Direction) -> usize {
        let mut sum = 0u64;
        let n = self
            .scan(.., dir, usize::MAX, |k, v| {
                sum = sum.wrapping_add(k.len() as u64 ^ v);
                ControlFlow::Continue(())
            })
            .unwrap();
        black_box(sum);
        n
    }
}

/// The DRAM baseline; its checksums mirror the trees'.
trait KeyBytes: Ord + Clone {
    fn word(&self) -> u64;
}
impl KeyBytes for u64 {
    fn word(&self) -> u64 {
        *self
    }
}
impl KeyBytes for Vec<u8> {
    fn word(&self) -> u64 {
        u64::from(self[0])
    }
}

impl<K: KeyBytes> Index<K> for BTreeMap<K, u64> {
    fn insert(&mut self, k: &K, v: u64) {
        assert!(BTreeMap::insert(self, k.clone(), v).is_none());
    }
    fn get(&self, k: &K) -> Option<u64> {
        BTreeMap::get(self, k).copied()
    }
    fn update(&mut self, k: &K, v: u64) {
        *self.get_mut(k).unwrap() = v;
    }
    fn delete(&mut self, k: &K) {
        assert!(self.remove(k).is_some());
    }
    fn scan_from(&self, k: &K, n: usize, dir: Direction) -> u64 {
        let f = |s: u64, (k, v): (&K, &u64)| s.wrapping_add(k.word() ^ v);
        match dir {
            Direction::Forward => self.range(k..).take(n).fold(0, f),
            Direction::Backward => self.range(..=k).rev().take(n).fold(0, f),
        }
    }
    fn scan_all(&self, dir: Direction) -> usize {
        let f = |s: u64, (k, v): (&K, &u64)| s.wrapping_add(k.word() ^ v);
        let s = match dir {
            Direction::Forward => self.iter().fold(0, f),
            Direction::Backward => self.iter().rev().fold(0, f),
        };
        black_box(s);
        self.len()
    }
}

/// A timed pass: its time and the flushed lines and fences it caused.
#[derive(Clone, Copy)]
struct Pass {
    t: Duration,
    lines: u64,
    fences: u64,
}

fn timed(f: impl FnOnce()) -> Pass {
    let c = Counters::snapshot();
    let s = Instant::now();
    f();
    let t = s.elapsed();
    let d = Counters::snapshot() - c;
    Pass { t, lines: d.lines_flushed(), fences: d.fences }
}

fn best(reps: usize, mut f: impl FnMut()) -> Pass {
    (0..reps).map(|_| timed(&mut f)).min_by_key(|p| p.t).unwrap()
}

/// One result row.
struct Row {
    op: &'static str,
    ops: usize,
    tree: Pass,
    map: Option<Pass>,
}

fn print_rows(kind: &str, n: usize, rows: &[Row]) {
    println!("\n## {kind}, {n} keys");
    println!("| operation | FPTree ns/op | BTreeMap ns/op | ratio | lines/op | fences/op |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        let per = |p: &Pass| p.t.as_nanos() as f64 / r.ops as f64;
        let (m, ratio) = match &r.map {
            Some(m) => (format!("{:.1}", per(m)), format!("{:.2}×", per(&r.tree) / per(m))),
            None => ("".into(), "".into()),
        };
        println!(
            "| {} | {:.1} | {m} | {ratio} | {:.2} | {:.2} |",
            r.op,
            per(&r.tree),
            r.tree.lines as f64 / r.ops as f64,
            r.tree.fences as f64 / r.ops as f64
        );
    }
}

/// A new pool set whose allocator already has segments touched for about `bytes` of blocks
/// (leaf-sized blocks allocated in a chain and freed again, outside any timing).
fn allocator(dir: &TestDir, name: &str, bytes: u64) -> Arc<PAllocator> {
    let set = PoolSet::create(dir.join(name), &Options::default()).expect("pool set");
    let a = PAllocator::create(Arc::new(set), 1).expect("allocator");
    let set = a.pool().clone();
    let mut slots = vec![a.root_location()];
    for _ in 0..bytes / LEAF_SIZE + 64 {
        let b = a.allocate(LEAF_SIZE, *slots.last().unwrap()).expect("prefault");
        let g = set.resolve_range(b, LEAF_SIZE).unwrap();
        set.fill(g, LEAF_SIZE, 0).unwrap();
        // ORDER(P-APP-1): the block's first word, the next allocation's location, is null and
        // durable before the allocator is asked to allocate into it.
        set.persist_pptr_null(g).unwrap();
        slots.push(b);
    }
    slots.pop();
    for s in slots.into_iter().rev() {
        a.deallocate(s).expect("prefault free");
    }
    Arc::new(a)
}

/// Times `count` allocations of `size`-byte blocks into one log slot (each followed, untimed,
/// by the slot's durable null as the tree's disarm does); returns ns per allocation and the
/// lines and fences of one. The blocks are freed afterwards.
fn leaf_allocation(a: &Arc<PAllocator>, size: u64, count: usize) -> (f64, f64, f64) {
    let set = a.pool().clone();
    let slot = a.root_location();
    let sg = set.resolve_range(slot, 16).unwrap();
    let mut got = Vec::with_capacity(count);
    let mut t = Duration::ZERO;
    let (mut lines, mut fences) = (0, 0);
    for _ in 0..count {
        let p = timed(|| got.push(a.allocate(size, slot).unwrap()));
        t += p.t;
        lines += p.lines;
        fences += p.fences;
        // ORDER(P-APP-1): the slot is null and durable again before the next allocation into
        // it (the tree's disarm does the same).
        set.persist_pptr_null(sg).unwrap();
    }
    for p in got {
        set.store_u64(sg + 8, p.offset, std::sync::atomic::Ordering::Relaxed).unwrap();
        set.store_u64(sg, p.segment, std::sync::atomic::Ordering::Release).unwrap();
        a.deallocate(slot).unwrap();
    }
    let c = count as f64;
    (t.as_nanos() as f64 / c, lines as f64 / c, fences as f64 / c)
}

fn shuffled<T: Clone>(v: &[T], seed: u64) -> Vec<T> {
    let mut p = v.to_vec();
    let mut r = SplitMix64::new(seed);
    for i in (1..p.len()).rev() {
        p.swap(i, (r.next_u64() % (i as u64 + 1)) as usize);
    }
    p
}

/// Runs every phase on `tree` and `map` with `keys`; `reopen` drops the tree and opens it
/// again (returns the new tree, the allocator open's and the tree open's time).
#[allow(clippy::too_many_arguments)]
fn run<K: KeyBytes, T: Index<K>>(
    kind: &str,
    keys: &[K],
    tree: &mut T,
    map: &mut BTreeMap<K, u64>,
    reps: usize,
    mut after_insert: impl FnMut(&mut T, &mut Vec<Row>),
) {
    let n = keys.len();
    let probe = shuffled(keys, 7);
    let mut rows = Vec::new();
    let ti = timed(|| keys.iter().enumerate().for_each(|(i, k)| tree.insert(k, i as u64)));
    let mi = timed(|| keys.iter().enumerate().for_each(|(i, k)| Index::insert(map, k, i as u64)));
    rows.push(Row { op: "insert (random order, empty tree)", ops: n, tree: ti, map: Some(mi) });
    after_insert(tree, &mut rows);
    let lookup = |t: &dyn Fn(&K) -> Option<u64>| {
        best(reps, || probe.iter().for_each(|k| assert!(black_box(t(k)).is_some())))
    };
    let tl = lookup(&|k| tree.get(k));
    let ml = lookup(&|k| Index::get(map, k));
    rows.push(Row { op: "point lookup (random order)", ops: n, tree: tl, map: Some(ml) });
    let starts: Vec<K> = probe.iter().take(n.min(100_000)).cloned().collect();
    for (op, dir) in [
        ("scan of 100, random start, forward", Direction::Forward),
        ("scan of 100, random start, backward", Direction::Backward),
    ] {
        let ts = best(reps, || {
            starts.iter().for_each(|k| {
                black_box(tree.scan_from(k, 100, dir));
            })
        });
        let ms = best(reps, || {
            starts.iter().for_each(|k| {
                black_box(map.scan_from(k, 100, dir));
            })
        });
        rows.push(Row { op, ops: starts.len() * 100, tree: ts, map: Some(ms) });
    }
    for (op, dir) in [
        ("full ordered scan, forward (per key)", Direction::Forward),
        ("full ordered scan, backward (per key)", Direction::Backward),
    ] {
        let ts = best(reps, || assert_eq!(tree.scan_all(dir), n));
        let ms = best(reps, || assert_eq!(map.scan_all(dir), n));
        rows.push(Row { op, ops: n, tree: ts, map: Some(ms) });
    }
    let tu = timed(|| probe.iter().for_each(|k| tree.update(k, 1)));
    let mu = timed(|| probe.iter().for_each(|k| Index::update(map, k, 1)));
    rows.push(Row { op: "update (random order)", ops: n, tree: tu, map: Some(mu) });
    let td = timed(|| probe.iter().for_each(|k| tree.delete(k)));
    let md = timed(|| probe.iter().for_each(|k| Index::delete(map, k)));
    rows.push(Row { op: "delete (random order, down to empty)", ops: n, tree: td, map: Some(md) });
    print_rows(kind, n, &rows);
}

fn restart_row(op: &'static str, leaves: usize, t: Duration) -> Row {
    Row { op, ops: leaves, tree: Pass { t, lines: 0, fences: 0 }, map: None }
}

/// A tree of kind `K` in `placement` on a prefaulted allocator of about `bytes`; `None` (with a
/// printed note) when this build refuses the combination.
fn new_tree<K: IndexKey>(
    dir: &TestDir,
    name: &str,
    bytes: u64,
    placement: IndexPlacement,
) -> Option<Tree<K>> {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let unique = format!("{name}-{}", MADE.fetch_add(1, Ordering::Relaxed));
    let a = allocator(dir, &unique, bytes);
    let slot = a.root_location();
    let opts = TreeOptions { index: placement, ..TreeOptions::default() };
    match Tree::<K>::create_with(a, slot, opts) {
        Ok(t) => Some(t),
        Err(e) => {
            println!("\n({name}, {placement:?} placement: not run: {e})");
            None
        }
    }
}

fn placement_name(p: IndexPlacement) -> &'static str {
    match p {
        IndexPlacement::Dram => "hybrid: inner nodes in DRAM",
        IndexPlacement::Persistent => "fully persistent: inner nodes in PM",
    }
}

/// Drops `t` without a clean close, recovers the allocator and opens the tree again (swapped
/// into `t`); returns (allocator recovery + open, allocator recovery, open).
fn restart<K: IndexKey>(t: &mut Tree<K>, n: usize) -> (Duration, Duration, Duration) {
    let set = t.allocator().pool().clone();
    let root_slot = t.root_slot();
    let total = Instant::now();
    let alloc = Arc::new(PAllocator::open(set).unwrap());
    let alloc_t = total.elapsed();
    let s = Instant::now();
    let mut t2 = Tree::<K>::open(alloc, root_slot).unwrap();
    let open_t = s.elapsed();
    let total_t = total.elapsed();
    assert_eq!(t2.len(), n as u64);
    std::mem::swap(t, &mut t2);
    drop(t2);
    (total_t, alloc_t, open_t)
}

/// The restart rows and summary line of one tree (`reinsert`: the time to rebuild a DRAM map
/// by reinsertion, where measured).
fn restart_rows(
    leaves: usize,
    (total_t, alloc_t, open_t): (Duration, Duration, Duration),
    reinsert: Option<Duration>,
    rows: &mut Vec<Row>,
    extra: &mut Vec<String>,
) {
    rows.push(restart_row("restart: allocator recovery + tree open (per leaf)", leaves, total_t));
    rows.push(restart_row("restart: allocator recovery alone (per leaf)", leaves, alloc_t));
    rows.push(restart_row("restart: tree open alone (per leaf)", leaves, open_t));
    let mut line = format!(
        "restart {:.1} ms (allocator {:.1} ms, tree {:.1} ms)",
        total_t.as_secs_f64() * 1e3,
        alloc_t.as_secs_f64() * 1e3,
        open_t.as_secs_f64() * 1e3
    );
    if let Some(re) = reinsert {
        rows.push(restart_row(
            "rebuild a BTreeMap by reinsertion from the leaves (per leaf)",
            leaves,
            re,
        ));
        line += &format!(
            "; reinsertion {:.1} ms = {:.1}× the restart",
            re.as_secs_f64() * 1e3,
            re.as_secs_f64() / total_t.as_secs_f64()
        );
    }
    extra.push(line);
}

/// The inner index's DRAM as a share of the data (keys and values: the measure) and of
/// the tree's footprint (PM leaves, key bytes kept out of the leaves, and the DRAM index: the
/// seed's measure), after the inserts (`idx`: nodes split as keys arrived) and after the restart
/// (`idx_open`: the index bulk-loaded from the leaves, full nodes).
fn index_line(t_leaves: u64, (idx, idx_open): (u64, u64), n: usize, data: u64, pm: u64) -> String {
    let pct = |x: u64, of: u64| x as f64 * 100.0 / of as f64;
    format!(
        "leaves {t_leaves} ({:.1} keys per leaf); inner index ≈ {idx} B of DRAM = {:.2} % of the data \
         ({data} B of keys and values), {:.2} % of the footprint ({pm} B of PM + the index); \
         after the restart (bulk-loaded) {idx_open} B = {:.2} % of the data, {:.2} % of the footprint",
        n as f64 / t_leaves as f64,
        pct(idx, data),
        pct(idx, pm + idx),
        pct(idx_open, data),
        pct(idx_open, pm + idx_open),
    )
}

fn string_keys(n: usize, width: usize) -> Vec<Vec<u8>> {
    let mut r = SplitMix64::new(42);
    (0..n)
        .map(|_| {
            (0..width.div_ceil(8)).flat_map(|_| r.next_u64().to_le_bytes()).take(width).collect()
        })
        .collect()
}

// ----- two threads -----

/// An ordered map that several threads use at once.
trait Shared<K>: Sync {
    fn insert(&self, k: &K, v: u64);
    fn get(&self, k: &K) -> Option<u64>;
    fn update(&self, k: &K, v: u64);
    fn delete(&self, k: &K);
    /// Up to `n` pairs from `k` on, forward; returns a checksum.
    fn scan_from(&self, k: &K, n: usize) -> u64;
}

impl Shared<u64> for FPTree {
    fn insert(&self, k: &u64, v: u64) {
        assert!(FPTree::insert(self, *k, v).unwrap());
    }
    fn get(&self, k: &u64) -> Option<u64> {
        FPTree::get(self, *k).unwrap()
    }
    fn update(&self, k: &u64, v: u64) {
        assert!(FPTree::update(self, *k, v).unwrap());
    }
    fn delete(&self, k: &u64) {
        assert!(FPTree::delete(self, *k).unwrap());
    }
    fn scan_from(&self, k: &u64, n: usize) -> u64 {
        let mut sum = 0u64;
        self.scan((Included(*k), Unbounded), Direction::Forward, n, |k, v| {
            sum = sum.wrapping_add(k ^ v);
            ControlFlow::Continue(())
        })
        .unwrap();
        sum
    }
}

impl Shared<Vec<u8>> for FPTreeVar {
    fn insert(&self, k: &Vec<u8>, v: u64) {
        assert!(FPTreeVar::insert(self, k, v).unwrap());
    }
    fn get(&self, k: &Vec<u8>) -> Option<u64> {
        FPTreeVar::get(self, k).unwrap()
    }
    fn update(&self, k: &Vec<u8>, v: u64) {
        assert!(FPTreeVar::update(self, k, v).unwrap());
    }
    fn delete(&self, k: &Vec<u8>) {
        assert!(FPTreeVar::delete(self, k).unwrap());
    }
    fn scan_from(&self, k: &Vec<u8>, n: usize) -> u64 {
        let mut sum = 0u64;
        self.scan((Included(&k[..]), Unbounded), Direction::Forward, n, |k, v| {
            sum = sum.wrapping_add(u64::from(k[0]) ^ v);
            ControlFlow::Continue(())
        })
        .unwrap();
        sum
    }
}

impl<K: KeyBytes + Send + Sync + 'static> Shared<K> for SkipMap<K, u64> {
    fn insert(&self, k: &K, v: u64) {
        SkipMap::insert(self, k.clone(), v);
    }
    fn get(&self, k: &K) -> Option<u64> {
        SkipMap::get(self, k).map(|e| *e.value())
    }
    fn update(&self, k: &K, v: u64) {
        // A skip list entry's value is immutable: an update replaces the entry.
        SkipMap::insert(self, k.clone(), v);
    }
    fn delete(&self, k: &K) {
        assert!(SkipMap::remove(self, k).is_some());
    }
    fn scan_from(&self, k: &K, n: usize) -> u64 {
        self.range(k.clone()..)
            .take(n)
            .fold(0u64, |s, e| s.wrapping_add(e.key().word() ^ e.value()))
    }
}

/// Runs `f(thread, key)` over `keys` split among `threads` threads (thread i takes every
/// key at an index ≡ i mod threads), all started at a barrier; returns the wall time from the
/// barrier to the last thread's end and the flushed lines and fences of all threads.
fn parallel<K: Sync>(threads: usize, keys: &[K], f: &(dyn Fn(&K) + Sync)) -> Pass {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let c = Counters::snapshot();
                    keys.iter().skip(i).step_by(threads).for_each(f);
                    Counters::snapshot() - c
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let cs: Vec<Counters> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let t = start.elapsed();
        Pass {
            t,
            lines: cs.iter().map(Counters::lines_flushed).sum(),
            fences: cs.iter().map(|c| c.fences).sum(),
        }
    })
}

/// An operation's name, its count and its pass.
type OpPass = (&'static str, usize, Pass);

/// Insert, point lookup, scan of 100, update and delete on `map` with `threads` threads; one
/// pass each (lookups and scans: best of `reps`).
fn threaded_ops<K: Sync + Clone, M: Shared<K>>(
    map: &M,
    keys: &[K],
    threads: usize,
    reps: usize,
) -> Vec<OpPass> {
    let probe = shuffled(keys, 7);
    let starts: Vec<K> = probe.iter().take(keys.len().min(100_000)).cloned().collect();
    let n = keys.len();
    let mut out = Vec::new();
    out.push(("insert (random order, empty)", n, parallel(threads, keys, &|k| map.insert(k, 5))));
    let look = (0..reps)
        .map(|_| parallel(threads, &probe, &|k| assert!(black_box(map.get(k)).is_some())))
        .min_by_key(|p| p.t)
        .unwrap();
    out.push(("point lookup (random order)", n, look));
    let scan = (0..reps)
        .map(|_| {
            parallel(threads, &starts, &|k| {
                black_box(map.scan_from(k, 100));
            })
        })
        .min_by_key(|p| p.t)
        .unwrap();
    out.push(("scan of 100 from a random start (per key)", starts.len() * 100, scan));
    out.push(("update (random order)", n, parallel(threads, &probe, &|k| map.update(k, 1))));
    out.push((
        "delete (random order, down to empty)",
        n,
        parallel(threads, &probe, &|k| map.delete(k)),
    ));
    out
}

/// The two-thread table of one key kind: each tree placement and the skip list, with 1 and 2
/// threads, ns per operation of aggregate throughput (wall time / operations).
fn threads_table<K: Sync + Clone + KeyBytes + Send + 'static, T: Shared<K>>(
    kind: &str,
    keys: &[K],
    reps: usize,
    mut tree: impl FnMut(IndexPlacement) -> Option<T>,
) {
    let mut cols: Vec<(String, Vec<OpPass>)> = Vec::new();
    for placement in [IndexPlacement::Dram, IndexPlacement::Persistent] {
        for threads in [1, 2] {
            if let Some(t) = tree(placement) {
                let name = match placement {
                    IndexPlacement::Dram => "FPTree hybrid",
                    IndexPlacement::Persistent => "FPTree persistent",
                };
                cols.push((format!("{name}, {threads}T"), threaded_ops(&t, keys, threads, reps)));
            }
        }
    }
    for threads in [1, 2] {
        let m: SkipMap<K, u64> = SkipMap::new();
        cols.push((format!("SkipMap, {threads}T"), threaded_ops(&m, keys, threads, reps)));
    }
    println!(
        "\n## {kind}, {} keys: 1 and 2 threads (ns per operation of aggregate throughput)",
        keys.len()
    );
    print!("| operation |");
    for (c, _) in &cols {
        print!(" {c} |");
    }
    println!(" lines/op (tree 2T) |");
    println!("|---|{}---|", "---|".repeat(cols.len()));
    for row in 0..cols[0].1.len() {
        let (op, ops, _) = cols[0].1[row];
        print!("| {op} |");
        for (_, r) in &cols {
            print!(" {:.1} |", r[row].2.t.as_nanos() as f64 / ops as f64);
        }
        let two = &cols[1].1[row].2;
        println!(" {:.2} |", two.lines as f64 / ops as f64);
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists benchmarks: nothing to list in a plain main.
    }
    let n: usize = env_or("FERRITE_BENCH_KEYS", 1_000_000);
    let reps: usize = env_or("FERRITE_BENCH_REPS", 3);
    let kinds: String = env_or("FERRITE_BENCH_KINDS", "u64,s16,s64".to_string());
    let parts: String = env_or("FERRITE_BENCH_PARTS", "hybrid,persistent,threads".to_string());
    let placements: Vec<IndexPlacement> =
        [("hybrid", IndexPlacement::Dram), ("persistent", IndexPlacement::Persistent)]
            .into_iter()
            .filter(|(name, _)| parts.split(',').any(|p| p == *name))
            .map(|(_, p)| p)
            .collect();
    let dir = TestDir::new("bench-fptree-d2");
    println!("# FPTree II benchmark: {n} keys, best of {reps} (lookups, scans)");
    let mut r = SplitMix64::new(42);
    let u64_keys: Vec<u64> = (0..n).map(|_| r.next_u64()).collect();

    if kinds.split(',').any(|k| k == "u64") {
        for &placement in &placements {
            let Some(mut t) = new_tree::<U64Key>(&dir, "u64", n as u64 / 10 * LEAF_SIZE, placement)
            else {
                continue;
            };
            let mut m = BTreeMap::new();
            let mut leaves = 0;
            let mut extra = Vec::new();
            let kind = format!("8-byte keys (FPTree, {})", placement_name(placement));
            run(&kind, &u64_keys, &mut t, &mut m, reps, |t, rows| {
                leaves = t.leaves() as usize;
                let idx = t.index_dram_bytes();
                let times = restart(t, n);
                let pm = t.leaves() * LEAF_SIZE;
                extra.push(index_line(
                    t.leaves(),
                    (idx, t.index_dram_bytes()),
                    n,
                    n as u64 * 16,
                    pm,
                ));
                // The DRAM-only design: read every pair back from the leaves, insert one by one.
                let s = Instant::now();
                let mut re = BTreeMap::new();
                for (k, v) in read_all_pairs(t.allocator().pool(), t.root_slot()).unwrap() {
                    re.insert(k, v);
                }
                let reinsert_t = s.elapsed();
                assert_eq!(re.len(), n);
                drop(re);
                restart_rows(leaves, times, Some(reinsert_t), rows, &mut extra);
            });
            for e in &extra {
                println!("{e}");
            }
            drop(t);
            if placement != IndexPlacement::Dram {
                continue;
            }
            // The leaf-group question: what share of all inserts is the splits' leaf allocation?
            let insert_ns_total = {
                let b = allocator(&dir, "u64-ins", n as u64 / 10 * LEAF_SIZE);
                let s = b.root_location();
                let t = FPTree::create(b.clone(), s).unwrap();
                let p = timed(|| u64_keys.iter().for_each(|&k| assert!(t.insert(k, k).unwrap())));
                p.t.as_nanos() as f64
            };
            let b = allocator(&dir, "u64-alloc", leaves as u64 * LEAF_SIZE);
            let (ns, lines, fences) = leaf_allocation(&b, LEAF_SIZE, leaves);
            println!(
                "leaf allocation into a log slot: {ns:.0} ns, {lines:.2} lines, {fences:.2} fences each; \
                 {leaves} splits × {ns:.0} ns = {:.1} ms = {:.1} % of {:.1} ms of inserts",
                leaves as f64 * ns / 1e6,
                leaves as f64 * ns * 100.0 / insert_ns_total,
                insert_ns_total / 1e6
            );
        }
    }

    for (name, width) in [("s16", 16usize), ("s64", 64)] {
        if !kinds.split(',').any(|k| k == name) {
            continue;
        }
        let keys = string_keys(n, width);
        let bytes =
            n as u64 / 10 * VAR_LEAF_SIZE + if width > 23 { n as u64 * width as u64 } else { 0 };
        for &placement in &placements {
            let Some(mut t) = new_tree::<ByteKey>(&dir, name, bytes, placement) else { continue };
            let mut m = BTreeMap::new();
            let mut extra = Vec::new();
            let form = if width == 16 { "inline" } else { "key blocks" };
            let kind =
                format!("{width}-byte keys (FPTreeVar, {form}, {})", placement_name(placement));
            run(&kind, &keys, &mut t, &mut m, reps, |t, rows| {
                let leaves = t.leaves() as usize;
                let data = n as u64 * (width as u64 + 8);
                let idx = t.index_dram_bytes();
                let times = restart(t, n);
                let out_of_leaf = if width > 23 { n as u64 * width as u64 } else { 0 };
                let pm = t.leaves() * VAR_LEAF_SIZE + out_of_leaf;
                extra.push(index_line(t.leaves(), (idx, t.index_dram_bytes()), n, data, pm));
                restart_rows(leaves, times, None, rows, &mut extra);
            });
            for e in &extra {
                println!("{e}");
            }
        }
    }

    if parts.split(',').any(|p| p == "threads") {
        if kinds.split(',').any(|k| k == "u64") {
            threads_table("8-byte keys", &u64_keys, reps, |p| {
                new_tree::<U64Key>(&dir, "u64-mt", n as u64 / 10 * LEAF_SIZE, p)
            });
        }
        for (name, width) in [("s16", 16usize), ("s64", 64)] {
            if !kinds.split(',').any(|k| k == name) {
                continue;
            }
            let keys = string_keys(n, width);
            let bytes = n as u64 / 10 * VAR_LEAF_SIZE
                + if width > 23 { n as u64 * width as u64 } else { 0 };
            threads_table(&format!("{width}-byte keys"), &keys, reps, |p| {
                new_tree::<ByteKey>(&dir, &format!("{name}-mt"), bytes, p)
            });
        }
    }
}
