//! PAllocator I ([C1]) single-threaded, against glibc `malloc`/`free` (the global allocator,
//! through `Vec::with_capacity` and drop) and, with the `pmdk` feature,
//! PMDK's `pmemobj_alloc`/`pmemobj_free` — the seed 001 §3.5 workloads at one thread:
//!
//! - `standalone_<size>`: allocate N blocks (warm-up: faults every page), free them all, then
//!   time allocating all N again (`alloc`) and freeing all N (`free`), per size;
//! - `random_mix`: N allocations of uniform random sizes in 64 B … 8 KiB, then N frees, timed
//!   together (one operation = one allocation or one free);
//! - `recovery`: `PAllocator::open` (replay, owner rebuild, orphan adoption) on pool sets holding
//!   10 K, 100 K and 1 M live 64-byte blocks; the time must not grow with live blocks.
//!
//! Ferrite's and PMDK's destinations are persistent (PAllocator: 16-byte `PPtr` slots in PM
//! tables; PMDK: `PMEMoid` slots in its root object), malloc's a DRAM `Vec`. Pools live on
//! `/dev/shm` (Emulated mode: real `CLWB`/`SFENCE` on DRAM, no media latency). Flushes and
//! fences per operation are printed for PAllocator (counted in a separate pass). Run:
//! `cargo bench -p ferrite-bench --bench alloc` (add `--features pmdk` for PMDK); set
//! `FERRITE_BENCH_OPS` for another N (default 100 000).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrite::alloc::{MAX_SMALL, PAllocator};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PPtr, PoolSet, SplitMix64};

/// Slots per 15 KiB table (16-byte `PPtr`s).
const PER_TABLE: u64 = MAX_SMALL / 16;

fn ops() -> u64 {
    std::env::var("FERRITE_BENCH_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

/// Null `PPtr`s in `len` bytes at `p`.
fn nulls(a: &PAllocator, p: PPtr, len: u64) {
    let g = a.pool().resolve_range(p, len).expect("resolve");
    for i in 0..len / 8 {
        let w = if i % 2 == 0 { u64::MAX } else { 0 };
        a.pool().store_u64(g + i * 8, w, Ordering::Relaxed).expect("store");
    }
    a.pool().persist(g, len).expect("persist");
}

/// An allocator with `n` persistent pointer slots: the root points at a directory of up to 960
/// tables of 960 slots each (all from the small allocator's largest class).
struct Heap {
    a: PAllocator,
    tables: Vec<PPtr>,
}

impl Heap {
    fn create(dir: &TestDir, name: &str, n: u64) -> Heap {
        assert!(n <= PER_TABLE * PER_TABLE, "at most {} slots", PER_TABLE * PER_TABLE);
        let set = PoolSet::create(dir.join(name), &Options::default().layout("bench-alloc"))
            .expect("pool set");
        let a = PAllocator::create(Arc::new(set), 1).expect("allocator");
        let directory = a.allocate(MAX_SMALL, a.root_location()).expect("directory");
        nulls(&a, directory, MAX_SMALL);
        let mut tables = Vec::new();
        for t in 0..n.div_ceil(PER_TABLE) {
            let at = PPtr::new(directory.segment, directory.offset + 16 * t);
            let table = a.allocate(MAX_SMALL, at).expect("table");
            nulls(&a, table, MAX_SMALL);
            tables.push(table);
        }
        Heap { a, tables }
    }

    fn slot(&self, i: u64) -> PPtr {
        let t = self.tables[(i / PER_TABLE) as usize];
        PPtr::new(t.segment, t.offset + 16 * (i % PER_TABLE))
    }
}

/// One malloc'd block per slot: `Vec::with_capacity` asks the global allocator (the system
/// allocator: glibc `malloc`, alignment 1) for exactly `size` bytes; dropping it frees them.
fn malloc_all(v: &mut [Vec<u8>], size: usize) {
    for p in v.iter_mut() {
        *p = Vec::with_capacity(size);
    }
    black_box(v);
}

fn free_all(v: &mut [Vec<u8>]) {
    for p in v.iter_mut() {
        *p = Vec::new();
    }
}

fn counted(what: &str, n: u64, f: impl FnOnce()) {
    let c = Counters::snapshot();
    f();
    let d = Counters::snapshot() - c;
    eprintln!(
        "pallocator {what}: {:.2} lines flushed, {:.2} fences, {:.1} bytes stored per operation",
        d.lines_flushed() as f64 / n as f64,
        d.fences as f64 / n as f64,
        d.bytes_stored as f64 / n as f64
    );
}

fn standalone(c: &mut Criterion) {
    let n = ops();
    let dir = TestDir::new("bench-alloc");
    for size in [128u64, 1024, 8192] {
        let h = Heap::create(&dir, &format!("standalone-{size}"), n);
        // Warm-up (not timed): every page faulted, every page list built.
        for i in 0..n {
            h.a.allocate(size, h.slot(i)).unwrap();
        }
        for i in 0..n {
            h.a.deallocate(h.slot(i)).unwrap();
        }
        counted(&format!("allocate {size} B"), n, || {
            for i in 0..n {
                h.a.allocate(size, h.slot(i)).unwrap();
            }
        });
        counted(&format!("deallocate {size} B"), n, || {
            for i in 0..n {
                h.a.deallocate(h.slot(i)).unwrap();
            }
        });
        let mut g = c.benchmark_group(format!("standalone_{size}"));
        g.throughput(Throughput::Elements(n));
        g.bench_function("alloc/pallocator", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    for i in 0..n {
                        black_box(h.a.allocate(size, h.slot(i)).unwrap());
                    }
                    total += start.elapsed();
                    for i in 0..n {
                        h.a.deallocate(h.slot(i)).unwrap();
                    }
                }
                total
            })
        });
        g.bench_function("free/pallocator", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    for i in 0..n {
                        h.a.allocate(size, h.slot(i)).unwrap();
                    }
                    let start = Instant::now();
                    for i in 0..n {
                        h.a.deallocate(h.slot(i)).unwrap();
                    }
                    total += start.elapsed();
                }
                total
            })
        });
        let mut v: Vec<Vec<u8>> = (0..n).map(|_| Vec::new()).collect();
        malloc_all(&mut v, size as usize);
        free_all(&mut v);
        g.bench_function("alloc/malloc", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    malloc_all(&mut v, size as usize);
                    total += start.elapsed();
                    free_all(&mut v);
                }
                total
            })
        });
        g.bench_function("free/malloc", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    malloc_all(&mut v, size as usize);
                    let start = Instant::now();
                    free_all(&mut v);
                    total += start.elapsed();
                }
                total
            })
        });
        #[cfg(feature = "pmdk")]
        pmdk::standalone(&mut g, &dir, size, n);
        g.finish();
        h.a.close().unwrap();
        let _ = std::fs::remove_dir_all(dir.join(&format!("standalone-{size}")));
    }
}

/// The sizes of the random mix: uniform in 64 B … 8 KiB, seeded.
fn mix_sizes(n: u64) -> Vec<u64> {
    let mut r = SplitMix64::new(0xA110C);
    (0..n).map(|_| 64 + r.next_u64() % (8192 - 64 + 1)).collect()
}

fn random_mix(c: &mut Criterion) {
    let n = ops();
    let sizes = mix_sizes(n);
    let dir = TestDir::new("bench-alloc-mix");
    let h = Heap::create(&dir, "mix", n);
    let round = |h: &Heap| {
        for (i, &s) in sizes.iter().enumerate() {
            black_box(h.a.allocate(s, h.slot(i as u64)).unwrap());
        }
        for i in 0..n {
            h.a.deallocate(h.slot(i)).unwrap();
        }
    };
    round(&h); // warm-up
    counted("random mix (allocate + deallocate)", 2 * n, || round(&h));
    let mut g = c.benchmark_group("random_mix_64_8192");
    g.throughput(Throughput::Elements(2 * n));
    g.bench_function("pallocator", |b| b.iter(|| round(&h)));
    let mut v: Vec<Vec<u8>> = (0..n).map(|_| Vec::new()).collect();
    let malloc_round = |v: &mut [Vec<u8>]| {
        for (p, &s) in v.iter_mut().zip(&sizes) {
            *p = Vec::with_capacity(s as usize);
        }
        black_box(&mut *v);
        free_all(v);
    };
    malloc_round(&mut v);
    g.bench_function("malloc", |b| b.iter(|| malloc_round(&mut v)));
    #[cfg(feature = "pmdk")]
    pmdk::random_mix(&mut g, &dir, &sizes);
    g.finish();
}

fn recovery(c: &mut Criterion) {
    let dir = TestDir::new("bench-alloc-recovery");
    let mut g = c.benchmark_group("recovery");
    for live in [10_000u64, 100_000, 1_000_000] {
        let name = format!("live-{live}");
        let h = Heap::create(&dir, &name, 1);
        let scratch = h.slot(0);
        let g0 = h.a.pool().resolve(scratch).unwrap();
        for _ in 0..live {
            // Allocated, then dropped from the slot without a free: the allocator holds `live`
            // blocks (recovery does not look at reachability, only at its own metadata).
            h.a.allocate(64, scratch).unwrap();
            h.a.pool().store_u64(g0, u64::MAX, Ordering::Relaxed).unwrap();
        }
        let r = h.a.check().unwrap();
        assert_eq!(r.allocated_blocks, live + 2);
        eprintln!(
            "recovery, {live} live blocks: {} segments, {} small segments active",
            h.a.pool().segment_count(),
            r.segments.0
        );
        h.a.close().unwrap();
        let opts = Options::default().layout("bench-alloc");
        g.bench_function(format!("pallocator_open/{live}_live_blocks"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let set = PoolSet::open(dir.join(&name), &opts).unwrap();
                    let start = Instant::now();
                    let a = PAllocator::open(Arc::new(set)).unwrap();
                    total += start.elapsed();
                    a.close().unwrap();
                }
                total
            })
        });
        g.bench_function(format!("poolset_open/{live}_live_blocks"), |b| {
            b.iter(|| PoolSet::open(dir.join(&name), &opts).unwrap().close().unwrap())
        });
        let _ = std::fs::remove_dir_all(dir.join(&name));
    }
    g.finish();
}

#[cfg(feature = "pmdk")]
mod pmdk {
    //! PMDK's side: `pmemobj_alloc` into `PMEMoid` slots of the root object and `pmemobj_free`
    //! of them (both persist the slot: PMDK's own leak-free interface), through the baselines'
    //! shim. Pool creation and a warm-up round are outside timing.

    use std::time::Duration;

    use criterion::BenchmarkGroup;
    use criterion::measurement::WallTime;
    use ferrite::pmem::internals::testing::TestDir;
    use ferrite_baselines::pmdk::AllocBench;

    pub fn standalone(g: &mut BenchmarkGroup<'_, WallTime>, dir: &TestDir, size: u64, n: u64) {
        let sizes = vec![size; n as usize];
        let b = AllocBench::create(&dir.join(&format!("pmdk-{size}")), &sizes).expect("pmdk pool");
        b.alloc_all().unwrap();
        b.free_all().unwrap();
        g.bench_function("alloc/pmdk", |x| {
            x.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += b.alloc_all().unwrap();
                    b.free_all().unwrap();
                }
                total
            })
        });
        g.bench_function("free/pmdk", |x| {
            x.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    b.alloc_all().unwrap();
                    total += b.free_all().unwrap();
                }
                total
            })
        });
    }

    pub fn random_mix(g: &mut BenchmarkGroup<'_, WallTime>, dir: &TestDir, sizes: &[u64]) {
        let b = AllocBench::create(&dir.join("pmdk-mix"), sizes).expect("pmdk pool");
        b.alloc_all().unwrap();
        b.free_all().unwrap();
        g.bench_function("pmdk", |x| {
            x.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += b.alloc_all().unwrap();
                    total += b.free_all().unwrap();
                }
                total
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    targets = standalone, random_mix, recovery
}
criterion_main!(benches);
