//! Micro-benchmarks of the persistence primitives ([A2]): persist of 1/4/16 dirty lines per
//! flush instruction, a bare fence, non-temporal copy bandwidth, and a one-line persist barrier
//! with 0 and 1 µs of injected latency. Pools live on `/dev/shm` (Emulated mode) unless
//! `FERRITE_POOL_DIR` says otherwise.
//!
//! Run: `cargo bench -p ferrite-bench --bench pmem` (figures go to `docs/benchmarks.md`).

use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{FlushKind, Options, Pool, flush_supported};

const POOL: u64 = 8 << 20;

fn pool(dir: &TestDir, name: &str, opts: &Options) -> Pool {
    let p = Pool::create(dir.join(name), POOL, opts).expect("create bench pool");
    // Prefault the whole data area.
    p.fill(0, p.size(), 0).expect("prefault");
    p
}

fn persist_lines(c: &mut Criterion) {
    let dir = TestDir::new("bench-persist");
    let mut g = c.benchmark_group("store+persist");
    for kind in FlushKind::ALL.into_iter().filter(|k| flush_supported(*k)) {
        let p = pool(&dir, kind.name(), &Options::default().flush(kind));
        for lines in [1u64, 4, 16] {
            g.throughput(Throughput::Elements(lines));
            let mut slot = 0u64;
            g.bench_with_input(BenchmarkId::new(kind.name(), lines), &lines, |b, &lines| {
                b.iter(|| {
                    // Dirty `lines` lines (one word each), then persist them.
                    let base = (slot % 1024) * lines * 64;
                    slot += 1;
                    for l in 0..lines {
                        p.store_u64(base + l * 64, slot, Ordering::Relaxed).unwrap();
                    }
                    // ORDER(P-APP-1): the persist is what this benchmark measures
                    p.persist(base, lines * 64).unwrap();
                });
            });
        }
    }
    g.finish();
}

fn fence(c: &mut Criterion) {
    let p = Pool::create_volatile(64 * 1024, &Options::default()).unwrap();
    c.bench_function("fence", |b| b.iter(|| p.fence()));
}

fn copy_nt(c: &mut Criterion) {
    let dir = TestDir::new("bench-nt");
    let p = pool(&dir, "nt", &Options::default());
    let mut g = c.benchmark_group("copy_nt+fence");
    for size in [4096usize, 64 * 1024] {
        let data = vec![0x5au8; size];
        g.throughput(Throughput::Bytes(size as u64));
        let mut i = 0u64;
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| {
                let off = (i * size as u64) % (POOL - 8192 - size as u64);
                i += 1;
                p.copy_nt(off, black_box(&data)).unwrap();
                p.fence();
            });
        });
    }
    g.finish();
}

fn injected_barrier(c: &mut Criterion) {
    let dir = TestDir::new("bench-inject");
    let mut g = c.benchmark_group("barrier_injected");
    for ns in [0u64, 1000] {
        let p = pool(&dir, &format!("b{ns}"), &Options::default().barrier_latency_ns(ns));
        let mut i = 0u64;
        g.bench_with_input(BenchmarkId::from_parameter(format!("{ns}ns")), &ns, |b, _| {
            b.iter(|| {
                let off = (i % 4096) * 64;
                i += 1;
                p.store_u64(off, i, Ordering::Relaxed).unwrap();
                p.persist(off, 8).unwrap();
            });
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = persist_lines, fence, copy_nt, injected_barrier
}
criterion_main!(benches);
