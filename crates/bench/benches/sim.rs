//! Crash-image throughput of the simulated persistence domain ([A3]): how many images per
//! second can be captured, and captured and opened as a new sim pool (the part of a crash test
//! before recovery runs), on 1 MiB and 64 MiB pools whose every page is durable and distinct,
//! with one line pending and one dirty line per image.
//!
//! Run: `cargo bench -p ferrite-bench --bench sim`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ferrite::pmem::{ImageSpec, Options, Pick, Pool};

fn prepared(size: u64) -> Pool {
    let p = Pool::create_sim(size, &Options::default()).expect("sim pool");
    // Make every page durable and distinct, so no page is the shared zero page.
    for page in 0..p.size() / 4096 {
        p.store_u64(page * 4096, page + 1, Ordering::Relaxed).unwrap();
    }
    p.persist(0, p.size()).unwrap();
    p
}

fn images(c: &mut Criterion) {
    let mut g = c.benchmark_group("crash_image");
    for (name, size) in [("1MiB", 1u64 << 20), ("64MiB", 64 << 20)] {
        let p = prepared(size);
        let sim = p.sim().unwrap().clone();
        let spec = ImageSpec { pending: Pick::All, evict: Pick::All, ..ImageSpec::default() };
        g.throughput(Throughput::Elements(1));
        let mut i = 0u64;
        g.bench_with_input(BenchmarkId::new("capture", name), &size, |b, _| {
            b.iter(|| {
                // One pending and one dirty line per image, and a fence that has to copy the
                // page the previous image shares (copy-on-write).
                i += 1;
                let off = (i * 4096) % (p.size() - 4096);
                p.store_u64(off, i, Ordering::Relaxed).unwrap();
                p.flush(off, 8).unwrap();
                p.store_u64(off + 64, i, Ordering::Relaxed).unwrap();
                let img = sim.capture(&spec);
                p.fence();
                img
            });
        });
        g.bench_with_input(BenchmarkId::new("capture+open_sim", name), &size, |b, _| {
            b.iter(|| {
                i += 1;
                let off = (i * 4096) % (p.size() - 4096);
                p.store_u64(off, i, Ordering::Relaxed).unwrap();
                p.flush(off, 8).unwrap();
                let img = sim.capture(&spec);
                p.fence();
                Pool::open_sim(&img, &Options::default()).expect("image opens")
            });
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = images
}
criterion_main!(benches);
