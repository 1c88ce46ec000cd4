//! What one hole punch and one re-backing of a 64 KiB allocator page cost on this machine's
//! pool directory (default `/dev/shm`): a tiny timed loop for `docs/design/allocator.md`
//! ("Defragmentation"), not a test.
//!
//! `cargo run --release -p ferrite-pmem --example punch_cost`

use std::sync::atomic::Ordering;
use std::time::Instant;

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, PPtr, PoolSet};

const PAGE: u64 = 64 * 1024;
const PAGES: u64 = 512; // 32 MiB

fn per_page(label: &str, set: &PoolSet, id: u64, f: impl Fn(&PoolSet, PPtr)) {
    let t = Instant::now();
    for k in 0..PAGES {
        f(set, PPtr::new(id, 4096 + k * PAGE));
    }
    let ns = t.elapsed().as_nanos() as f64 / PAGES as f64;
    println!("{label:<44} {ns:>9.0} ns per 64 KiB page");
}

fn main() {
    let dir = TestDir::new("punch-cost");
    let set = PoolSet::create(dir.join("s"), &Options::default().layout("punch-cost")).unwrap();
    let id = set.add_segment(4096 + 4096 + PAGES * PAGE).unwrap();
    let touch = |s: &PoolSet, p: PPtr| {
        let g = s.resolve_range(p, PAGE).unwrap();
        for off in (0..PAGE).step_by(4096) {
            s.store_u64(g + off, 1, Ordering::Relaxed).unwrap();
        }
    };
    per_page("write every 4 KiB of a backed page", &set, id, touch);
    per_page("punch a written page", &set, id, |s, p| s.punch_hole(p, PAGE).unwrap());
    per_page("punch a page that is already a hole", &set, id, |s, p| {
        s.punch_hole(p, PAGE).unwrap()
    });
    per_page("allocate_range over a hole", &set, id, |s, p| s.allocate_range(p, PAGE).unwrap());
    per_page("allocate_range over a backed page", &set, id, |s, p| {
        s.allocate_range(p, PAGE).unwrap()
    });
    per_page("write every 4 KiB of a re-backed page", &set, id, touch);
    println!("file-system footprint at the end: {} bytes", set.fs_footprint().unwrap());
}
