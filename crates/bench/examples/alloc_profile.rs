//! A driver for profiling the allocator benchmark's 64 B allocate/free (`benches/alloc.rs`,
//! `standalone_64`) without the rest of the benchmark: `rounds` rounds of allocating n blocks
//! of `size` bytes into persistent slots and freeing them, on PAllocator or (feature `pmdk`)
//! PMDK, and the mean ns per operation of each phase. Usage:
//!
//! ```text
//! cargo build --release -p ferrite-bench --features pmdk --example alloc_profile
//! perf record -e cpu-clock -g target/release/examples/alloc_profile pallocator 50
//! ```
//!
//! Arguments: `pallocator` or `pmdk`, rounds (default 20), n (default 100 000), size (64; 0
//! for the benchmark's 64 B–128 KiB random mix, seeded as there).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrite::alloc::{MAX_SMALL, PAllocator};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet};

const PER_TABLE: u64 = MAX_SMALL / 16;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map_or("pallocator", String::as_str).to_owned();
    let arg = |i: usize, d: u64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let (rounds, n, size) = (arg(2, 20), arg(3, 100_000), arg(4, 64));
    let dir = TestDir::new("alloc-profile");
    let (alloc, free) = match which.as_str() {
        "pallocator" => pallocator(&dir, rounds, n, size),
        #[cfg(feature = "pmdk")]
        "pmdk" => pmdk(&dir, rounds, n, size),
        other => {
            eprintln!("unknown allocator {other}: pallocator or pmdk (with --features pmdk)");
            std::process::exit(2);
        }
    };
    let per = |d: Duration| d.as_nanos() as f64 / (rounds * n) as f64;
    println!(
        "{which}, {rounds} rounds of {n} × {size} B: allocate {:.0} ns/op, free {:.0} ns/op",
        per(alloc),
        per(free)
    );
}

fn pallocator(dir: &TestDir, rounds: u64, n: u64, size: u64) -> (Duration, Duration) {
    assert!(n <= PER_TABLE * PER_TABLE, "at most {} blocks", PER_TABLE * PER_TABLE);
    let opts = Options::default().layout("alloc-profile").prefault(true);
    let set = PoolSet::create(dir.join("pool"), &opts).expect("pool set");
    let a = PAllocator::create(Arc::new(set), 1).expect("allocator");
    let null_table = |p: PPtr| {
        let g = a.pool().resolve_range(p, MAX_SMALL).expect("resolve");
        for i in 0..MAX_SMALL / 8 {
            let w = if i % 2 == 0 { u64::MAX } else { 0 };
            a.pool().store_u64(g + i * 8, w, Ordering::Relaxed).expect("store");
        }
        // ORDER(P-APP-1): the table's slots are null and durable before any allocation into them
        a.pool().persist(g, MAX_SMALL).expect("persist");
    };
    let directory = a.allocate(MAX_SMALL, a.root_location()).expect("directory");
    null_table(directory);
    let tables: Vec<PPtr> = (0..n.div_ceil(PER_TABLE))
        .map(|t| {
            let at = PPtr::new(directory.segment, directory.offset + 16 * t);
            let table = a.allocate(MAX_SMALL, at).expect("table");
            null_table(table);
            table
        })
        .collect();
    let slot = |i: u64| {
        let t = tables[(i / PER_TABLE) as usize];
        PPtr::new(t.segment, t.offset + 16 * (i % PER_TABLE))
    };
    let sizes = sizes(n, size);
    let (mut alloc, mut free) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let start = Instant::now();
        for i in 0..n {
            a.allocate(sizes[i as usize], slot(i)).expect("allocate");
        }
        alloc += start.elapsed();
        let start = Instant::now();
        for i in 0..n {
            a.deallocate(slot(i)).expect("deallocate");
        }
        free += start.elapsed();
    }
    a.close().expect("close");
    (alloc, free)
}

/// `n` sizes: all `size`, or (size 0) uniform in 64 B … 128 KiB from the benchmark's seed.
fn sizes(n: u64, size: u64) -> Vec<u64> {
    let mut r = ferrite::pmem::SplitMix64::new(0xA110C);
    (0..n).map(|_| if size == 0 { 64 + r.next_u64() % (131_072 - 64 + 1) } else { size }).collect()
}

#[cfg(feature = "pmdk")]
fn pmdk(dir: &TestDir, rounds: u64, n: u64, size: u64) -> (Duration, Duration) {
    let b = ferrite_baselines::pmdk::AllocBench::create(&dir.join("pmdk"), &sizes(n, size))
        .expect("pmdk pool");
    let (mut alloc, mut free) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        alloc += b.alloc_all().expect("alloc");
        free += b.free_all().expect("free");
    }
    (alloc, free)
}
