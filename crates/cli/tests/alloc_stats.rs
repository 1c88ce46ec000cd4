//! `ferrite alloc-stats` end to end: a healthy allocator is summarised (big blocks too) and
//! passes its check (exit 0), a damaged page header is found by the check (exit 1), a missing pool set or a
//! wrong layout is an error (exit 2).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{PAGE, PAllocator};
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, PPtr, PoolSet};

/// The tests of this file run one at a time: a child spawned by one test briefly shares (until
/// its exec) the descriptors another test holds, and with them the pool set's `flock`, so a
/// concurrent open in this process could see the set as locked.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn ferrite(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrite")).args(args).output().expect("run ferrite");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn opts() -> Options {
    Options::default().layout("cli-alloc").segment_size(1 << 20)
}

/// A pool set with a 4 KiB table in the root and `n` 100-byte blocks in its slots; returns
/// the table.
fn populate(dir: &TestDir, n: u64) -> PPtr {
    let a = PAllocator::create(Arc::new(PoolSet::create(dir.join("set"), &opts()).unwrap()), 2)
        .unwrap();
    let table = a.allocate(4096, a.root_location()).unwrap();
    // Null pointers (segment word u64::MAX, offset 0) in every slot.
    let g = a.pool().resolve_range(table, 4096).unwrap();
    for i in 0..4096 / 8 {
        let w = if i % 2 == 0 { u64::MAX } else { 0 };
        a.pool().store_u64(g + i * 8, w, Ordering::Relaxed).unwrap();
    }
    a.pool().persist(g, 4096).unwrap();
    for i in 0..n {
        a.allocate(100, PPtr::new(table.segment, table.offset + 16 * i)).unwrap();
    }
    a.close().unwrap();
    table
}

#[test]
fn a_healthy_allocator_is_summarised() {
    let _serial = serial();
    let dir = TestDir::new("cli-alloc-ok");
    populate(&dir, 10);
    let set = dir.join("set");
    let (code, out, err) =
        ferrite(&["alloc-stats", set.to_str().unwrap(), "--layout", "cli-alloc"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("slots         2"), "{out}");
    assert!(out.contains("11 allocated"), "{out}");
    assert!(out.contains("small segs    1 active, 0 full, 0 free"), "{out}");
    assert!(out.contains("     128:      1,") && out.contains("    4096:      1,"), "{out}");
    assert!(out.contains("check         passed"), "{out}");
}

#[test]
fn big_blocks_are_summarised() {
    let _serial = serial();
    let dir = TestDir::new("cli-alloc-big");
    let table = populate(&dir, 2);
    let a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())).unwrap();
    // 20 000 bytes are 5 units of 4 KiB; the rest of the 238-unit segment stays one free block.
    a.allocate(20_000, PPtr::new(table.segment, table.offset + 16 * 5)).unwrap();
    a.close().unwrap();
    let set = dir.join("set");
    let (code, out, err) =
        ferrite(&["alloc-stats", set.to_str().unwrap(), "--layout", "cli-alloc"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("big segs      1 (blocks of 4 KiB units up to 952 KiB)"), "{out}");
    assert!(out.contains("big blocks    1 used (20480 bytes), 1 free (954368 bytes)"), "{out}");
    assert!(out.contains("4 allocated"), "{out}");
}

#[test]
fn huge_blocks_are_listed() {
    let _serial = serial();
    let dir = TestDir::new("cli-alloc-huge");
    let table = populate(&dir, 2);
    let a = PAllocator::open(Arc::new(PoolSet::open(dir.join("set"), &opts()).unwrap())).unwrap();
    let p = a.allocate(3 << 20, PPtr::new(table.segment, table.offset + 16 * 5)).unwrap();
    a.close().unwrap();
    let set = dir.join("set");
    let (code, out, err) =
        ferrite(&["alloc-stats", set.to_str().unwrap(), "--layout", "cli-alloc"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("huge blocks   1 (3145728 bytes requested"), "{out}");
    assert!(out.contains(&format!("segment {:>6}: 3145728 bytes", p.segment)), "{out}");
    assert!(out.contains("3 allocated"), "{out}");
}

#[test]
fn a_damaged_page_header_fails_the_check() {
    let _serial = serial();
    let dir = TestDir::new("cli-alloc-bad");
    let table = populate(&dir, 3);
    // Bump the free count of the table's page: open does not read pages, check() does.
    let set = PoolSet::open(dir.join("set"), &opts()).unwrap();
    let state = PPtr::new(table.segment, table.offset / PAGE * PAGE + 16);
    let g = set.resolve(state).unwrap();
    let w = set.load_u64(g, Ordering::Acquire).unwrap();
    set.store_u64(g, w + (1 << 16), Ordering::Relaxed).unwrap();
    set.persist(g, 8).unwrap();
    set.close().unwrap();
    let p = dir.join("set");
    let (code, out, err) = ferrite(&["alloc-stats", p.to_str().unwrap(), "--layout", "cli-alloc"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("check         FAILED: corrupted"), "{out}");
}

#[test]
fn missing_pools_and_wrong_layouts_are_errors() {
    let _serial = serial();
    let dir = TestDir::new("cli-alloc-missing");
    let p = dir.join("nothing");
    let (code, _, err) = ferrite(&["alloc-stats", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("opening pool set"), "{err}");
    populate(&dir, 1);
    let p = dir.join("set");
    let (code, _, err) = ferrite(&["alloc-stats", p.to_str().unwrap(), "--layout", "other"]);
    assert_eq!(code, 2);
    assert!(err.contains("layout"), "{err}");
}
