//! FPTree ([D1]) against DRAM baselines, on 1 M random `u64` keys (set `FERRITE_BENCH_KEYS` for
//! another count): insert, point lookup and full ordered scan against `std::collections::BTreeMap`;
//! recovery (`PAllocator::open` + `FPTree::open`: redo replay, segment lists, micro-log replay
//! and DRAM index rebuild from the leaf list) against the honest rebuild baseline of a DRAM-only
//! design — read every pair from the leaves, sort, and bulk-load a `BTreeMap`.
//!
//! The tree lives on PAllocator (one slot, 128 MiB segments) in a pool set on `/dev/shm`
//! (Emulated mode: real `CLWB`/`SFENCE` on DRAM, no PM media latency). Before timing, the
//! segments the inserts will need are created and touched (leaf-sized blocks allocated in a
//! chain and freed again), as the pools of the other benchmarks are prefaulted.
//! Run: `cargo bench -p ferrite-bench --bench fptree`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrite::alloc::PAllocator;
use ferrite::fptree::{FPTree, LEAF_SIZE, read_all_pairs};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet, SplitMix64};

fn keys() -> Vec<u64> {
    let n: u64 =
        std::env::var("FERRITE_BENCH_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let mut r = SplitMix64::new(42);
    (0..n).map(|_| r.next_u64()).collect()
}

/// A new pool set with an allocator whose segments already hold room for `n` random inserts
/// (~22 keys per leaf, generous headroom), created and touched outside any timing.
fn allocator(dir: &TestDir, name: &str, n: usize) -> Arc<PAllocator> {
    let set = PoolSet::create(dir.join(name), &Options::default()).expect("pool set");
    let a = PAllocator::create(Arc::new(set), 1).expect("allocator");
    // A chain of leaf-sized blocks (each one's first 16 bytes hold the next one's pointer),
    // allocated into the anchor's root and freed in reverse: the segments exist, are touched,
    // and the free lists are back to where they were.
    let set = a.pool().clone();
    let mut slots = vec![a.root_location()];
    for _ in 0..n / 10 + 64 {
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

fn build(a: &Arc<PAllocator>, keys: &[u64]) -> FPTree {
    let t = FPTree::create(a.clone(), a.root_location()).expect("tree");
    for (i, &k) in keys.iter().enumerate() {
        t.insert(k, i as u64).expect("insert");
    }
    t
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let n = keys.len();
    let dir = TestDir::new("bench-fptree");

    let mut g = c.benchmark_group(format!("fptree_{n}"));
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("insert/fptree", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let name = format!("ins{i}");
                let a = allocator(&dir, &name, n);
                let t = FPTree::create(a.clone(), a.root_location()).unwrap();
                let start = Instant::now();
                for (j, &k) in keys.iter().enumerate() {
                    t.insert(k, j as u64).unwrap();
                }
                total += start.elapsed();
                drop(t);
                drop(a);
                let _ = std::fs::remove_dir_all(dir.join(&name));
            }
            total
        });
    });
    g.bench_function("insert/btreemap", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut m = BTreeMap::new();
                let start = Instant::now();
                for (j, &k) in keys.iter().enumerate() {
                    m.insert(k, j as u64);
                }
                total += start.elapsed();
                black_box(&m);
            }
            total
        });
    });

    let a = allocator(&dir, "main", n);
    let t = build(&a, &keys);
    let slot: PPtr = a.root_location();
    let m: BTreeMap<u64, u64> = keys.iter().enumerate().map(|(j, &k)| (k, j as u64)).collect();
    let mut probe = keys.clone();
    let mut r = SplitMix64::new(7);
    for i in (1..probe.len()).rev() {
        probe.swap(i, (r.next_u64() % (i as u64 + 1)) as usize);
    }
    g.bench_function("lookup/fptree", |b| {
        b.iter(|| {
            for &k in &probe {
                black_box(t.get(k).unwrap());
            }
        })
    });
    g.bench_function("lookup/btreemap", |b| {
        b.iter(|| {
            for &k in &probe {
                black_box(m.get(&k));
            }
        })
    });
    g.bench_function("scan/fptree", |b| {
        b.iter(|| black_box(t.range(0, u64::MAX, usize::MAX).unwrap().len()))
    });
    g.bench_function("scan/btreemap", |b| {
        b.iter(|| black_box(m.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>().len()))
    });
    eprintln!("fptree: {} keys in {} leaves", t.len(), t.leaves());
    drop(t);

    // Recovery: what FPTree does at open, against a DRAM-only design's rebuild.
    g.bench_function("recover/fptree_open", |b| {
        b.iter(|| {
            let a = Arc::new(PAllocator::open(a.pool().clone()).unwrap());
            black_box(FPTree::open(a, slot).unwrap().leaves())
        })
    });
    g.bench_function("recover/bulk_load_btreemap_from_leaves", |b| {
        b.iter(|| {
            // What a DRAM-only design must do at restart: read every pair back from PM (one walk
            // of the leaf list), sort, and bulk-load a DRAM B-tree from the sorted pairs.
            let mut pairs = read_all_pairs(a.pool(), slot).unwrap();
            pairs.sort_unstable();
            let m: BTreeMap<u64, u64> = pairs.into_iter().collect();
            black_box(m.len())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .sample_size(10);
    targets = bench
}
criterion_main!(benches);
