//! Soundness regressions of the safe API: no sequence of safe calls may touch memory that is
//! no longer mapped. A failure here is a segfault, so each dangerous sequence runs in a child
//! process (this test binary re-executed with `--exact <test>`, its role chosen by the
//! `FERRITE_SOUNDNESS_CHILD` variable of the child's environment) and the parent asserts that
//! the child exited successfully.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::atomic::Ordering::{Acquire, Release};

use ferrite_pmem::internals::testing::{self, TestDir};
use ferrite_pmem::{Error, Options, Pool, PoolSet};

const ROLE: &str = "FERRITE_SOUNDNESS_CHILD";

/// Runs `child` in a re-executed child process (when this process is not already that child)
/// and asserts the child exited with status 0 (a segfault shows as signal 11).
fn in_child(name: &str, child: impl FnOnce()) {
    if std::env::var(ROLE).as_deref() == Ok(name) {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ROLE, name)
        .output()
        .expect("spawn the child test process");
    assert!(
        out.status.success(),
        "child {name} failed: status {:?}, signal {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        out.status.signal(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// Regression: `Space::view` returned an owned `Space` that did not keep the pool's mapping
// alive, so `drop(pool)` unmapped the memory the view still pointed into and the next access
// through the view segfaulted from safe code (verified: the child died with SIGSEGV before the
// fix). Views now hold the mapping; it is unmapped when its last holder goes.
#[test]
fn view_outlives_mapped_pool() {
    in_child("view_outlives_mapped_pool", || {
        let dir = TestDir::new("view-mapped");
        let pool = Pool::create(dir.join("p"), 64 * 1024, &Options::default()).unwrap();
        pool.store_u64(4096, 7, Release).unwrap();
        let v = pool.view(4096, 4096).unwrap();
        drop(pool);
        assert_eq!(v.load_u64(0, Acquire).unwrap(), 7);
        v.store_u64(8, 9, Release).unwrap();
        v.persist(0, 16).unwrap();
        assert_eq!(v.load_u64(8, Acquire).unwrap(), 9);
    });
}

// Regression: as above for a volatile (heap) pool: the heap block was freed with the pool.
#[test]
fn view_outlives_volatile_pool() {
    in_child("view_outlives_volatile_pool", || {
        // 4 MiB: large enough that the allocator returns the block to the kernel on free.
        let pool = Pool::create_volatile(4 << 20, &Options::default()).unwrap();
        pool.store_u64(64, 11, Release).unwrap();
        let v = pool.view(64, 64).unwrap();
        let c = (*pool).clone();
        drop(pool);
        assert_eq!(v.load_u64(0, Acquire).unwrap(), 11);
        assert_eq!(c.load_u64(64, Acquire).unwrap(), 11);
    });
}

// Regression: as above for a pool set: dropping the set unmapped its whole reservation (and
// every segment in it) under a live view of a segment.
#[test]
fn view_outlives_pool_set() {
    in_child("view_outlives_pool_set", || {
        let dir = TestDir::new("view-set");
        let opts = Options::default().segment_size(64 * 1024);
        let set = PoolSet::create(dir.join("s"), &opts).unwrap();
        let id = set.grow().unwrap();
        let info = set.segments().into_iter().find(|s| s.id == id).unwrap();
        set.store_u64(info.data_offset, 5, Release).unwrap();
        let v = set.view(info.data_offset, info.data_len).unwrap();
        drop(set);
        assert_eq!(v.load_u64(0, Acquire).unwrap(), 5);
        v.store_u64(0, 6, Release).unwrap();
        v.persist(0, 8).unwrap();
        assert_eq!(v.load_u64(0, Acquire).unwrap(), 6);
    });
}

/// The mapping carries the opener's lock: while a view of a dropped pool can still write, a
/// second opener is refused; once the view goes, the pool opens again (and the view's write
/// is in the file).
///
/// Runs in a child process of its own: the other tests of this binary spawn children, and a
/// child forked while this test's pool file is open holds the `flock` until its `exec`
/// closes the descriptor, so the reopen after `drop(v)` was refused as `Locked` about once
/// in many runs (seen in CI).
#[test]
fn a_view_keeps_the_pool_locked() {
    in_child("a_view_keeps_the_pool_locked", || {
        let dir = TestDir::new("view-lock");
        let pool = Pool::create(dir.join("p"), 64 * 1024, &Options::default()).unwrap();
        let v = pool.view(0, 4096).unwrap();
        drop(pool);
        let second = Pool::open(dir.join("p"), &Options::default());
        assert!(matches!(second, Err(Error::Locked { .. })));
        v.store_u64(0, 77, Release).unwrap();
        v.persist(0, 8).unwrap();
        drop(v);
        let pool = Pool::open(dir.join("p"), &Options::default()).unwrap();
        assert_eq!(pool.load_u64(0, Acquire).unwrap(), 77);
    });
}

// Regression: a view at an offset that is not a multiple of 64 was refused only by a
// `debug_assert!`; in release builds it produced a space whose 8-aligned offsets were
// misaligned addresses (undefined behaviour for `AtomicU64::from_ptr`) and whose flushes
// reached the line before the range. It is now `Misaligned` in every profile.
#[test]
fn misaligned_view_is_a_typed_error() {
    let pool = Pool::create_volatile(64 * 1024, &Options::default()).unwrap();
    for off in [1, 8, 32, 63, 65, 4096 + 8] {
        assert!(
            matches!(pool.view(off, 64), Err(Error::Misaligned { align: 64, .. })),
            "offset {off}"
        );
    }
    let v = pool.view(128, 4096).unwrap();
    assert!(matches!(v.view(8, 8), Err(Error::Misaligned { .. })));
    assert!(matches!(v.view(64, 4096), Err(Error::OutOfBounds { .. })));
    assert!(matches!(v.view(u64::MAX - 63, 64), Err(Error::OutOfBounds { .. })));
    assert_eq!(v.view(64, 64).unwrap().len(), 64);
}

// Regression (grow failure): when mapping a new segment failed, the range under it was left
// as the failed `MAP_FIXED` left it; on Linux before 6.12 that can be a hole, and any later
// access to the range through the set's space (safe code: any in-bounds offset is accepted)
// segfaulted. The injected failure removes the memory first, as such a kernel does; without
// the refill the child died with SIGSEGV (verified by disabling `fill_with_anon`'s call).
// The set must also be unchanged: no file, no bitmap bit, and the next grow succeeds there.
#[test]
fn failed_grow_leaves_no_hole() {
    in_child("failed_grow_leaves_no_hole", || {
        let dir = TestDir::new("grow-fail");
        let opts = Options::default().segment_size(64 * 1024);
        let set = PoolSet::create(dir.join("s"), &opts).unwrap();
        let hole = set.segments()[0].file_size; // where the next segment goes
        testing::fail_next_segment_map(&set);
        assert!(matches!(set.grow(), Err(Error::Io { op: "mmap", .. })));
        assert_eq!(set.segment_count(), 1);
        assert_eq!(std::fs::read_dir(dir.join("s")).unwrap().count(), 1, "file left behind");
        for off in (hole..hole + 64 * 1024).step_by(4096) {
            assert_eq!(set.load_u64(off, Acquire).unwrap(), 0);
            set.store_u64(off, 1, Release).unwrap();
        }
        let id = set.grow().unwrap();
        assert_eq!(id, 1, "the failed grow took no id");
        let info = set.segments().into_iter().find(|s| s.id == id).unwrap();
        assert_eq!(info.data_offset, hole + 4096, "the failed grow took no range");
        set.close().unwrap();
        let set = PoolSet::open(dir.join("s"), &opts).unwrap();
        assert_eq!(set.segment_count(), 2);
    });
}
