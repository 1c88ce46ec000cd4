//! PAllocator ([C1], [C2]) against glibc `malloc`/`free` (the global allocator, through
//! `Vec::with_capacity` and drop) and, with the `pmdk` feature, PMDK's
//! `pmemobj_alloc`/`pmemobj_free` — the seed 001 §3.5 workloads, one and two threads:
//!
//! - `standalone_<size>` (64 B, 128 B, 1 KiB, 8 KiB, 64 KiB, 1 MiB): allocate n blocks
//!   (warm-up: faults every page), free them all, then time allocating all n again (`alloc`)
//!   and freeing all n (`free`). n = min(N, 256 MiB / size), so a phase holds at most 256 MiB
//!   of blocks: N for 64 B–1 KiB, 32 768 for 8 KiB, 4 096 for 64 KiB, 256 for 1 MiB.
//! - `huge_1MiB_in_1MiB_segments`: 256 allocations of 1 MiB in a pool set with 1 MiB segments,
//!   where 1 MiB is above `big_capacity()`: every block is a huge allocation (its own file).
//!   PAllocator only (PMDK and malloc have no such mode; their 1 MiB figures are in
//!   `standalone_1048576`).
//! - `random_mix_64_8192`: N allocations of uniform random sizes in 64 B … 8 KiB, then N
//!   frees, timed together (one operation = one allocation or one free);
//!   `random_mix_64_131072`: the same in 64 B … 128 KiB with n = 256 MiB / 64 KiB (the mean
//!   size) = 4 096.
//! - `two_threads_producer_consumer_64`: thread A allocates N blocks of 64 B into a ring of
//!   1 024 persistent slots, thread B frees each one (Larson-like); the hand-over is the ring
//!   itself (PM slots for PAllocator and PMDK) and two DRAM counters (produced, consumed),
//!   waited on by spinning then yielding. Throughput is blocks per second end to end.
//!   PAllocator's producer publishes block i only after its next allocation returned (that
//!   allocation's fences make block i's lazy disarm durable: "The caller's rule" of
//!   `docs/design/allocator.md`), and settles after its last one.
//! - `per_thread_mix_64_8192/<t>_threads`: each of t threads (1, 2) runs the 64 B … 8 KiB mix
//!   (N/2 allocations, then N/2 frees, its own seed) on its own slots; aggregate throughput.
//!   PAllocator with one allocator slot per thread (`own_slot`) and with both threads on one
//!   slot (`shared_slot`).
//! - `recovery`: `PAllocator::open` (journal replay, owner rebuild, orphan adoption) on pool
//!   sets holding 10 K, 100 K and 1 M live 64-byte blocks, and 1 GiB and 4 GiB of live blocks
//!   of the 64 B … 128 KiB mix; the time must not grow with the heap.
//! - file-system space (printed, not timed): `PoolSet::fs_footprint` of the 1 GiB heap after
//!   allocating it, after freeing nine blocks in ten, after `defragment()`, after freeing the
//!   rest and after a second `defragment()`; PMDK's pool file `st_blocks` at the same points.
//!
//! Ferrite's and PMDK's destinations are persistent (PAllocator: 16-byte `PPtr` slots in PM
//! tables; PMDK: `PMEMoid` slots in a persistent array), malloc's a DRAM `Vec` (a `Mutex` per
//! ring slot for the producer/consumer run). Pools live on `/dev/shm` (Emulated mode: real
//! `CLWB`/`SFENCE` on DRAM, no media latency); Ferrite's throughput pools are prefaulted, as
//! PMDK's. Flushes, fences and bytes stored per operation are printed for every PAllocator
//! workload (counted in a separate pass; threads sum their own counters). Run:
//! `cargo bench -p ferrite-bench --bench alloc` (add `--features pmdk` for PMDK); set
//! `FERRITE_BENCH_OPS` for another N (default 100 000).

use std::hint::{black_box, spin_loop};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use ferrite::alloc::{MAX_SMALL, PAllocator};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, Options, PPtr, PoolSet, SplitMix64};

/// Slots per 15 KiB table (16-byte `PPtr`s).
const PER_TABLE: u64 = MAX_SMALL / 16;
/// Most bytes of blocks one phase of a standalone size or of the large mix holds.
const PHASE_BYTES: u64 = 256 << 20;
/// Slots of the producer/consumer ring.
const RING: u64 = 1024;

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
    // ORDER(P-APP-1): the block's contents durable before the benchmark counts it as written
    a.pool().persist(g, len).expect("persist");
}

/// The pool options of the benchmark's pool sets.
fn options(segment: Option<u64>, prefault: bool) -> Options {
    let o = Options::default().layout("bench-alloc").prefault(prefault);
    match segment {
        Some(s) => o.segment_size(s),
        None => o,
    }
}

/// An allocator with `n` persistent pointer slots: the root points at a directory of up to 960
/// tables of 960 slots each (all from the small allocator's largest class).
struct Heap {
    a: PAllocator,
    tables: Vec<PPtr>,
}

impl Heap {
    fn create(dir: &TestDir, name: &str, n: u64, slots: u32, opts: &Options) -> Heap {
        assert!(n <= PER_TABLE * PER_TABLE, "at most {} slots", PER_TABLE * PER_TABLE);
        let set = PoolSet::create(dir.join(name), opts).expect("pool set");
        let a = PAllocator::create(Arc::new(set), slots).expect("allocator");
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

/// Persistence work of one pass, summed over the threads that did it.
#[derive(Clone, Copy, Default)]
struct Tally {
    lines: u64,
    fences: u64,
    bytes: u64,
}

impl Tally {
    fn between(before: &Counters, after: &Counters) -> Tally {
        Tally {
            lines: after.lines_flushed() - before.lines_flushed(),
            fences: after.fences - before.fences,
            bytes: after.bytes_stored - before.bytes_stored,
        }
    }

    fn add(self, o: Tally) -> Tally {
        Tally {
            lines: self.lines + o.lines,
            fences: self.fences + o.fences,
            bytes: self.bytes + o.bytes,
        }
    }

    fn print(&self, what: &str, n: u64) {
        eprintln!(
            "pallocator {what}: {:.2} lines flushed, {:.2} fences, {:.1} bytes stored per operation",
            self.lines as f64 / n as f64,
            self.fences as f64 / n as f64,
            self.bytes as f64 / n as f64
        );
    }
}

fn counted(what: &str, n: u64, f: impl FnOnce()) {
    let c = Counters::snapshot();
    f();
    Tally::between(&c, &Counters::snapshot()).print(what, n);
}

/// Runs `work(t, state)` on `threads` threads that start together (after `setup(t)` made each
/// one's state); returns the wall time from the first start to the last end, and the
/// persistence work of the timed part summed over the threads.
fn run_threads<S>(
    threads: usize,
    setup: impl Fn(usize) -> S + Sync,
    work: impl Fn(usize, &mut S) + Sync,
) -> (Duration, Tally) {
    let barrier = Barrier::new(threads);
    let runs: Vec<(Instant, Instant, Tally)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, setup, work) = (&barrier, &setup, &work);
                s.spawn(move || {
                    let mut state = setup(t);
                    barrier.wait();
                    let c = Counters::snapshot();
                    let start = Instant::now();
                    work(t, &mut state);
                    let end = Instant::now();
                    let tally = Tally::between(&c, &Counters::snapshot());
                    drop(state);
                    (start, end, tally)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    let start = runs.iter().map(|r| r.0).min().expect("a thread");
    let end = runs.iter().map(|r| r.1).max().expect("a thread");
    (end - start, runs.iter().fold(Tally::default(), |a, r| a.add(r.2)))
}

/// Spins (then yields: the machine has two cores, shared) until `ready()`.
fn wait_until(ready: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        if spins < 256 {
            spins += 1;
            spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// An allocator the two-thread workloads drive through slot indexes.
trait Slots: Sync {
    /// Allocates `size` bytes into slot `i` (null).
    fn put(&self, i: u64, size: u64);
    /// Frees the block of slot `i`.
    fn take(&self, i: u64);
    /// Makes the calling thread's last allocation final before another thread changes its slot.
    fn settle(&self) {}
}

impl Slots for Heap {
    fn put(&self, i: u64, size: u64) {
        black_box(self.a.allocate(size, self.slot(i)).unwrap());
    }
    fn take(&self, i: u64) {
        self.a.deallocate(self.slot(i)).unwrap();
    }
    fn settle(&self) {
        self.a.settle();
    }
}

/// malloc's slots for the two-thread runs: a DRAM `Vec` per slot, behind a mutex (uncontended:
/// the ring hands each slot to one thread at a time).
struct MallocSlots(Vec<Mutex<Vec<u8>>>);

impl MallocSlots {
    fn new(n: u64) -> MallocSlots {
        MallocSlots((0..n).map(|_| Mutex::new(Vec::new())).collect())
    }
}

impl Slots for MallocSlots {
    fn put(&self, i: u64, size: u64) {
        *self.0[i as usize].lock().unwrap() = black_box(Vec::with_capacity(size as usize));
    }
    fn take(&self, i: u64) {
        *self.0[i as usize].lock().unwrap() = Vec::new();
    }
}

/// Producer (thread 0) allocates `n` 64-byte blocks into a ring of `RING` slots, consumer
/// (thread 1) frees them in order. `bind(t)` runs on each thread before the start.
fn producer_consumer(s: &impl Slots, n: u64, bind: impl Fn(usize) + Sync) -> (Duration, Tally) {
    let produced = AtomicU64::new(0);
    let consumed = AtomicU64::new(0);
    run_threads(2, bind, |t, _| {
        if t == 0 {
            for i in 0..n {
                wait_until(|| i < consumed.load(Ordering::Acquire) + RING);
                s.put(i % RING, 64);
                // Blocks before i are handed over: this allocation's fences settled them.
                produced.store(i, Ordering::Release);
            }
            s.settle();
            produced.store(n, Ordering::Release);
        } else {
            for j in 0..n {
                wait_until(|| produced.load(Ordering::Acquire) > j);
                s.take(j % RING);
                consumed.store(j + 1, Ordering::Release);
            }
        }
    })
}

/// Each thread t allocates `sizes[t]` into slots `t * len ..` then frees them.
fn per_thread_mix(
    s: &impl Slots,
    sizes: &[Vec<u64>],
    bind: impl Fn(usize) + Sync,
) -> (Duration, Tally) {
    run_threads(sizes.len(), bind, |t, _| {
        let len = sizes[t].len() as u64;
        let base = t as u64 * len;
        for (i, &size) in sizes[t].iter().enumerate() {
            s.put(base + i as u64, size);
        }
        for i in 0..len {
            s.take(base + i);
        }
    })
}

/// A criterion function timing `run` (which returns its own timed part) once per iteration.
fn timed(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut run: impl FnMut() -> Duration) {
    g.bench_function(name, |b| b.iter_custom(|iters| (0..iters).map(|_| run()).sum()));
}

fn standalone(c: &mut Criterion) {
    let big_n = ops();
    let dir = TestDir::new("bench-alloc");
    for size in [64u64, 128, 1024, 8192, 64 << 10, 1 << 20] {
        let n = big_n.min(PHASE_BYTES / size);
        eprintln!("standalone {size} B: n = {n}");
        let name = format!("standalone-{size}");
        let h = Heap::create(&dir, &name, n, 1, &options(None, true));
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
        g.sampling_mode(SamplingMode::Flat);
        g.throughput(Throughput::Elements(n));
        alloc_free_pallocator(&mut g, &h, size, n);
        let mut v: Vec<Vec<u8>> = (0..n).map(|_| Vec::new()).collect();
        malloc_all(&mut v, size as usize);
        free_all(&mut v);
        timed(&mut g, "alloc/malloc", || {
            let start = Instant::now();
            malloc_all(&mut v, size as usize);
            let d = start.elapsed();
            free_all(&mut v);
            d
        });
        timed(&mut g, "free/malloc", || {
            malloc_all(&mut v, size as usize);
            let start = Instant::now();
            free_all(&mut v);
            start.elapsed()
        });
        drop(v);
        #[cfg(feature = "pmdk")]
        pmdk::standalone(&mut g, &dir, size, n);
        g.finish();
        h.a.close().unwrap();
        let _ = std::fs::remove_dir_all(dir.join(&name));
    }
}

/// `alloc/pallocator` and `free/pallocator` of n blocks of `size` into the heap's slots.
fn alloc_free_pallocator(g: &mut BenchmarkGroup<'_, WallTime>, h: &Heap, size: u64, n: u64) {
    timed(g, "alloc/pallocator", || {
        let start = Instant::now();
        for i in 0..n {
            black_box(h.a.allocate(size, h.slot(i)).unwrap());
        }
        let d = start.elapsed();
        for i in 0..n {
            h.a.deallocate(h.slot(i)).unwrap();
        }
        d
    });
    timed(g, "free/pallocator", || {
        for i in 0..n {
            h.a.allocate(size, h.slot(i)).unwrap();
        }
        let start = Instant::now();
        for i in 0..n {
            h.a.deallocate(h.slot(i)).unwrap();
        }
        start.elapsed()
    });
}

fn huge(c: &mut Criterion) {
    let (size, n) = (1u64 << 20, PHASE_BYTES >> 20);
    let dir = TestDir::new("bench-alloc-huge");
    let h = Heap::create(&dir, "huge", n, 1, &options(Some(1 << 20), true));
    assert!(size > h.a.big_capacity(), "1 MiB must be a huge allocation here");
    eprintln!("huge 1 MiB in 1 MiB segments (big capacity {} B): n = {n}", h.a.big_capacity());
    for i in 0..n {
        h.a.allocate(size, h.slot(i)).unwrap();
    }
    for i in 0..n {
        h.a.deallocate(h.slot(i)).unwrap();
    }
    counted("allocate 1 MiB huge", n, || {
        for i in 0..n {
            h.a.allocate(size, h.slot(i)).unwrap();
        }
    });
    counted("deallocate 1 MiB huge", n, || {
        for i in 0..n {
            h.a.deallocate(h.slot(i)).unwrap();
        }
    });
    let mut g = c.benchmark_group("huge_1MiB_in_1MiB_segments");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(n));
    alloc_free_pallocator(&mut g, &h, size, n);
    g.finish();
    h.a.close().unwrap();
}

/// `n` sizes uniform in 64 B … `max`, seeded.
fn mix_sizes(seed: u64, n: u64, max: u64) -> Vec<u64> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| 64 + r.next_u64() % (max - 64 + 1)).collect()
}

fn random_mix(c: &mut Criterion) {
    for max in [8192u64, 128 << 10] {
        // The 8 KiB mix keeps N for continuity with the recorded figures.
        let n = if max == 8192 { ops() } else { ops().min(PHASE_BYTES / (max / 2)) };
        eprintln!("random mix 64 B … {max} B: n = {n}");
        let sizes = mix_sizes(0xA110C, n, max);
        let dir = TestDir::new("bench-alloc-mix");
        let h = Heap::create(&dir, "mix", n, 1, &options(None, true));
        let round = |h: &Heap| {
            for (i, &s) in sizes.iter().enumerate() {
                black_box(h.a.allocate(s, h.slot(i as u64)).unwrap());
            }
            for i in 0..n {
                h.a.deallocate(h.slot(i)).unwrap();
            }
        };
        round(&h); // warm-up
        counted(&format!("random mix 64 B … {max} B (allocate + deallocate)"), 2 * n, || {
            round(&h)
        });
        let mut g = c.benchmark_group(format!("random_mix_64_{max}"));
        g.sampling_mode(SamplingMode::Flat);
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
        h.a.close().unwrap();
    }
}

fn two_threads(c: &mut Criterion) {
    let n = ops();
    let dir = TestDir::new("bench-alloc-threads");

    // Producer/consumer.
    eprintln!("producer/consumer: n = {n} blocks of 64 B, ring of {RING} slots");
    let h = Heap::create(&dir, "pc", RING, 2, &options(None, true));
    let bind = |t: usize| PAllocator::bind_thread_to_slot(t as u32);
    producer_consumer(&h, n, bind); // warm-up
    let (_, tally) = producer_consumer(&h, n, bind);
    tally.print("producer/consumer 64 B (per block: allocate + deallocate)", n);
    let mut g = c.benchmark_group("two_threads_producer_consumer_64");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(n));
    timed(&mut g, "pallocator", || producer_consumer(&h, n, bind).0);
    let m = MallocSlots::new(RING);
    timed(&mut g, "malloc", || producer_consumer(&m, n, |_| {}).0);
    #[cfg(feature = "pmdk")]
    pmdk::producer_consumer(&mut g, &dir, n);
    g.finish();
    h.a.close().unwrap();

    // Per-thread mix: N/2 allocations and N/2 frees per thread.
    let per = n / 2;
    eprintln!("per-thread mix 64 B … 8 KiB: {per} allocations + {per} frees per thread");
    let sizes: Vec<Vec<u64>> = (0..2).map(|t| mix_sizes(0xA110C + t, per, 8192)).collect();
    let h = Heap::create(&dir, "mix-threads", 2 * per, 2, &options(None, true));
    let own = |t: usize| PAllocator::bind_thread_to_slot(t as u32);
    let shared = |_: usize| PAllocator::bind_thread_to_slot(0);
    per_thread_mix(&h, &sizes, own); // warm-up
    per_thread_mix(&h, &sizes, shared);
    for threads in [1usize, 2] {
        let sz = &sizes[..threads];
        let ops = 2 * per * threads as u64;
        let (_, t) = per_thread_mix(&h, sz, own);
        t.print(&format!("per-thread mix, {threads} thread(s), own slot"), ops);
        let mut g = c.benchmark_group(format!("per_thread_mix_64_8192/{threads}_threads"));
        g.sampling_mode(SamplingMode::Flat);
        g.throughput(Throughput::Elements(ops));
        timed(&mut g, "pallocator_own_slot", || per_thread_mix(&h, sz, own).0);
        if threads == 2 {
            let (_, t) = per_thread_mix(&h, sz, shared);
            t.print("per-thread mix, 2 threads, one shared slot", ops);
            timed(&mut g, "pallocator_shared_slot", || per_thread_mix(&h, sz, shared).0);
        }
        timed(&mut g, "malloc", || {
            run_threads(
                threads,
                |t| (0..sz[t].len()).map(|_| Vec::new()).collect::<Vec<Vec<u8>>>(),
                |t, v| {
                    for (p, &s) in v.iter_mut().zip(&sz[t]) {
                        *p = Vec::with_capacity(s as usize);
                    }
                    black_box(&mut *v);
                    free_all(v);
                },
            )
            .0
        });
        #[cfg(feature = "pmdk")]
        pmdk::per_thread_mix(&mut g, &dir, sz);
        g.finish();
    }
    h.a.close().unwrap();
}

/// Allocates the 64 B … 128 KiB mix into a new heap until `target` bytes are live; returns the
/// heap, the sizes allocated (slot i holds a block of `sizes[i]`) and the time it took.
fn fill_heap(dir: &TestDir, name: &str, target: u64) -> (Heap, Vec<u64>, Duration) {
    let max = 128 << 10;
    let room = target / (max / 2) * 5 / 4 + 1000;
    let all = mix_sizes(0x5EED1, room, max);
    let h = Heap::create(dir, name, room, 1, &options(None, false));
    let start = Instant::now();
    let mut live = 0;
    let mut sizes = Vec::new();
    for (i, &s) in all.iter().enumerate() {
        if live >= target {
            break;
        }
        h.a.allocate(s, h.slot(i as u64)).unwrap();
        live += s;
        sizes.push(s);
    }
    assert!(live >= target, "{room} slots were not enough");
    (h, sizes, start.elapsed())
}

fn recovery(c: &mut Criterion) {
    let dir = TestDir::new("bench-alloc-recovery");
    let opts = options(None, false);
    let mut g = c.benchmark_group("recovery");
    let open_bench = |g: &mut BenchmarkGroup<'_, WallTime>, name: &str, what: &str| {
        timed(g, &format!("pallocator_open/{what}"), || {
            let set = PoolSet::open(dir.join(name), &opts).unwrap();
            let start = Instant::now();
            let a = PAllocator::open(Arc::new(set)).unwrap();
            let d = start.elapsed();
            a.close().unwrap();
            d
        });
        timed(g, &format!("poolset_open/{what}"), || {
            let start = Instant::now();
            let set = PoolSet::open(dir.join(name), &opts).unwrap();
            let d = start.elapsed();
            set.close().unwrap();
            d
        });
    };
    for live in [10_000u64, 100_000, 1_000_000] {
        let name = format!("live-{live}");
        let h = Heap::create(&dir, &name, 1, 1, &opts);
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
        open_bench(&mut g, &name, &format!("{live}_live_blocks"));
        let _ = std::fs::remove_dir_all(dir.join(&name));
    }
    for gib in [1u64, 4] {
        let name = format!("heap-{gib}GiB");
        let (h, sizes, took) = fill_heap(&dir, &name, gib << 30);
        eprintln!(
            "recovery, {gib} GiB live of the 64 B … 128 KiB mix: {} blocks, {} segments, \
             filled in {:.2} s, footprint {} MiB",
            sizes.len(),
            h.a.pool().segment_count(),
            took.as_secs_f64(),
            h.a.pool().fs_footprint().unwrap() >> 20
        );
        let tables = h.tables.clone();
        h.a.close().unwrap();
        open_bench(&mut g, &name, &format!("{gib}GiB_live"));
        if gib == 1 {
            let set = PoolSet::open(dir.join(&name), &opts).unwrap();
            let h = Heap { a: PAllocator::open(Arc::new(set)).unwrap(), tables };
            footprint(&h, &sizes);
            #[cfg(feature = "pmdk")]
            pmdk::footprint(&dir, &sizes);
            h.a.close().unwrap();
        }
        let _ = std::fs::remove_dir_all(dir.join(&name));
    }
    g.finish();
}

/// File-system space of a heap whose slot i holds a block of `sizes[i]`, through frees and
/// `defragment()` (printed).
fn footprint(h: &Heap, sizes: &[u64]) {
    let n = sizes.len() as u64;
    let fp = |what: &str| {
        eprintln!(
            "footprint pallocator, {what}: {:.1} MiB in {} segments",
            h.a.pool().fs_footprint().unwrap() as f64 / 1_048_576.0,
            h.a.pool().segment_count()
        );
    };
    let defrag = |what: &str| {
        let start = Instant::now();
        let r = h.a.defragment().unwrap();
        eprintln!(
            "defragment ({what}) took {:.1} ms: {} segments released ({} MiB), {} pages punched ({} MiB)",
            start.elapsed().as_secs_f64() * 1e3,
            r.segments_released,
            r.segment_bytes >> 20,
            r.pages_punched,
            r.punched_bytes >> 20
        );
    };
    fp(&format!("{n} blocks allocated"));
    let kept: u64 = sizes.iter().step_by(10).sum();
    for i in (0..n).filter(|i| i % 10 != 0) {
        h.a.deallocate(h.slot(i)).unwrap();
    }
    fp(&format!("nine in ten freed ({} MiB still live)", kept >> 20));
    defrag("nine in ten freed");
    fp("after defragment");
    for i in (0..n).step_by(10) {
        h.a.deallocate(h.slot(i)).unwrap();
    }
    fp("all freed");
    defrag("all freed");
    fp("after defragment");
    let r = h.a.check().unwrap();
    eprintln!("check after the frees: {} blocks allocated (the slot tables)", r.allocated_blocks);
}

#[cfg(feature = "pmdk")]
mod pmdk {
    //! PMDK's side: `pmemobj_alloc` into `PMEMoid` slots of a persistent array and
    //! `pmemobj_free` of them (both persist the slot: PMDK's own leak-free interface), through
    //! the baselines' shim; from two threads through `SharedSlots` (no wrapper lock). Pool
    //! creation and a warm-up round are outside timing.

    use std::time::Instant;

    use criterion::BenchmarkGroup;
    use criterion::measurement::WallTime;
    use ferrite::pmem::internals::testing::TestDir;
    use ferrite_baselines::pmdk::{AllocBench, SharedSlots};

    use super::{RING, Slots, producer_consumer as pc, timed};

    impl Slots for SharedSlots<'_> {
        fn put(&self, i: u64, size: u64) {
            self.alloc(i as usize, size).unwrap();
        }
        fn take(&self, i: u64) {
            self.free(i as usize).unwrap();
        }
    }

    pub fn standalone(g: &mut BenchmarkGroup<'_, WallTime>, dir: &TestDir, size: u64, n: u64) {
        let sizes = vec![size; n as usize];
        let path = dir.join(&format!("pmdk-{size}"));
        let b = AllocBench::create(&path, &sizes).expect("pmdk pool");
        b.alloc_all().unwrap();
        b.free_all().unwrap();
        timed(g, "alloc/pmdk", || {
            let d = b.alloc_all().unwrap();
            b.free_all().unwrap();
            d
        });
        timed(g, "free/pmdk", || {
            b.alloc_all().unwrap();
            b.free_all().unwrap()
        });
        drop(b);
        let _ = std::fs::remove_file(path);
    }

    pub fn random_mix(g: &mut BenchmarkGroup<'_, WallTime>, dir: &TestDir, sizes: &[u64]) {
        let path = dir.join("pmdk-mix");
        let b = AllocBench::create(&path, sizes).expect("pmdk pool");
        b.alloc_all().unwrap();
        b.free_all().unwrap();
        timed(g, "pmdk", || b.alloc_all().unwrap() + b.free_all().unwrap());
        drop(b);
        let _ = std::fs::remove_file(path);
    }

    pub fn producer_consumer(g: &mut BenchmarkGroup<'_, WallTime>, dir: &TestDir, n: u64) {
        let path = dir.join("pmdk-pc");
        let mut b = AllocBench::create(&path, &[64; RING as usize]).expect("pmdk pool");
        let s = b.shared();
        pc(&s, n, |_| {});
        timed(g, "pmdk", || pc(&s, n, |_| {}).0);
        drop(s);
        drop(b);
        let _ = std::fs::remove_file(path);
    }

    pub fn per_thread_mix(g: &mut BenchmarkGroup<'_, WallTime>, dir: &TestDir, sizes: &[Vec<u64>]) {
        let path = dir.join("pmdk-mix-threads");
        let all: Vec<u64> = sizes.concat();
        let mut b = AllocBench::create(&path, &all).expect("pmdk pool");
        let s = b.shared();
        super::per_thread_mix(&s, sizes, |_| {});
        timed(g, "pmdk", || super::per_thread_mix(&s, sizes, |_| {}).0);
        drop(s);
        drop(b);
        let _ = std::fs::remove_file(path);
    }

    /// PMDK's pool file through the same steps as `super::footprint` (without defragment:
    /// PMDK has none).
    pub fn footprint(dir: &TestDir, sizes: &[u64]) {
        let path = dir.join("pmdk-footprint");
        let mut b = AllocBench::create(&path, sizes).expect("pmdk pool");
        let fp = |b: &AllocBench, what: &str| {
            eprintln!(
                "footprint pmdk, {what}: {:.1} MiB",
                b.fs_footprint().unwrap() as f64 / 1_048_576.0
            );
        };
        fp(&b, "pool created (prefaulted)");
        let start = Instant::now();
        b.alloc_all().unwrap();
        eprintln!("pmdk: the 1 GiB heap allocated in {:.2} s", start.elapsed().as_secs_f64());
        fp(&b, &format!("{} blocks allocated", sizes.len()));
        {
            let s = b.shared();
            for i in (0..sizes.len()).filter(|i| i % 10 != 0) {
                s.free(i).unwrap();
            }
        }
        fp(&b, "nine in ten freed");
        {
            let s = b.shared();
            for i in (0..sizes.len()).step_by(10) {
                s.free(i).unwrap();
            }
        }
        fp(&b, "all freed");
        drop(b);
        let _ = std::fs::remove_file(path);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    targets = standalone, huge, random_mix, two_threads, recovery
}
criterion_main!(benches);
