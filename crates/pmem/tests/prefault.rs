//! `Options::prefault`: a segment's pages are populated when it is mapped. Alone in its test
//! binary (its own process), because it reads the process's shared-memory RSS.

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, PoolSet};

/// `RssShmem` of this process in KiB (`None` off Linux or without the field).
fn rss_shmem_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssShmem:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_prefaulted_segment_is_resident_before_any_store() {
    const SEG: u64 = 32 << 20;
    let dir = TestDir::new("pmem-prefault");
    let Some(before) = rss_shmem_kib() else {
        eprintln!("no RssShmem in /proc/self/status: nothing to measure here");
        return;
    };
    // Off: creating the set touches only its header pages.
    let plain = PoolSet::create(dir.join("plain"), &Options::new().segment_size(SEG)).unwrap();
    let after_plain = rss_shmem_kib().unwrap();
    // On: the whole segment is populated by the mapping (on a RAM file system, where shared
    // pages count as RssShmem; elsewhere they are file pages and this test measures nothing).
    let fs_is_ram = dir.path().starts_with("/dev/shm");
    let on =
        PoolSet::create(dir.join("on"), &Options::new().segment_size(SEG).prefault(true)).unwrap();
    let after_on = rss_shmem_kib().unwrap();
    eprintln!("RssShmem KiB: start {before}, plain {after_plain}, prefaulted {after_on}");
    assert!(after_plain - before < (SEG >> 10) / 4, "a plain set was populated");
    if fs_is_ram {
        assert!(after_on - after_plain >= (SEG >> 10) * 9 / 10, "the prefaulted set was not");
    }
    // Both work the same.
    for set in [&plain, &on] {
        let info = set.segments().into_iter().next().expect("one segment");
        let g = set.resolve(ferrite_pmem::PPtr::new(info.id, info.data_len - 8)).unwrap();
        set.store_u64(g, 7, std::sync::atomic::Ordering::Release).unwrap();
        assert_eq!(set.load_u64(g, std::sync::atomic::Ordering::Acquire).unwrap(), 7);
    }
}
