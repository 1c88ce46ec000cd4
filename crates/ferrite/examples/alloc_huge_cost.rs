//! What one huge allocation and one huge free cost (a segment file created, mapped and
//! removed each time), and what one `defragment()` pass costs over a mostly free heap, on the
//! pool directory (default `/dev/shm`): a tiny timed loop for `docs/design/allocator.md`, not
//! a test.
//!
//! `cargo run --release -p ferrite --example alloc_huge_cost`

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ferrite::alloc::PAllocator;
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet};

fn main() {
    let dir = TestDir::new("alloc-huge-cost");
    let opts = Options::default().layout("alloc-huge-cost").segment_size(8 << 20);
    let a =
        PAllocator::create(Arc::new(PoolSet::create(dir.join("set"), &opts).unwrap()), 1).unwrap();
    let table = a.allocate(4096, a.root_location()).unwrap();
    let g = a.pool().resolve_range(table, 4096).unwrap();
    for i in 0..256 {
        a.pool().store_u64(g + i * 16, u64::MAX, Ordering::Relaxed).unwrap();
        a.pool().store_u64(g + i * 16 + 8, 0, Ordering::Relaxed).unwrap();
    }
    // ORDER(P-APP-1): the table's slots are null and durable before any allocation into them
    a.pool().persist(g, 4096).unwrap();
    let slot = |i: u64| PPtr::new(table.segment, table.offset + 16 * i);
    // Huge means above the big allocator's capacity (a bit under the 8 MiB segment here).
    for size in [a.big_capacity() + 1, 16 << 20, 64 << 20] {
        let n = 50;
        let (mut alloc_ns, mut free_ns) = (0u128, 0u128);
        for _ in 0..n {
            let t = Instant::now();
            a.allocate(size, slot(1)).unwrap();
            alloc_ns += t.elapsed().as_nanos();
            let t = Instant::now();
            a.deallocate(slot(1)).unwrap();
            free_ns += t.elapsed().as_nanos();
        }
        println!(
            "huge {:>6} KiB: allocate {:>7} ns, free {:>7} ns",
            size >> 10,
            alloc_ns / n,
            free_ns / n
        );
    }
    // A heap of 8 KiB blocks (255 live at a time, eight rounds), all but one in seven freed.
    let blocks = 255u64;
    for round in 0..8u64 {
        for i in 1..=blocks {
            a.allocate(8192, slot(i)).unwrap();
        }
        for i in 1..=blocks {
            if round == 7 && i % 7 == 0 {
                continue;
            }
            a.deallocate(slot(i)).unwrap();
        }
    }
    let before = a.pool().fs_footprint().unwrap();
    let t = Instant::now();
    let r = a.defragment().unwrap();
    let ns = t.elapsed().as_nanos();
    let after = a.pool().fs_footprint().unwrap();
    println!("defragment: {ns} ns, {r:?}; footprint {before} → {after} bytes");
    let t = Instant::now();
    let r2 = a.defragment().unwrap();
    println!("defragment again: {} ns, {r2:?}", t.elapsed().as_nanos());
}
