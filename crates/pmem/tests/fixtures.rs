//! Stored pool images of every released header version must keep opening (conventions §4).
//!
//! `pool-v1-clean.bin`: an 8 KiB version-1 pool, layout `fixture`, closed cleanly, with the
//! word 0x0123_4567_89ab_cdef at data offset 0 and the bytes `ferrite` at data offset 64.
//! Regenerate (only when a new version is added, never to paper over a break) with
//! `cargo test -p ferrite-pmem --test fixtures -- --ignored regenerate`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, Pool};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

#[test]
fn version_1_pool_opens() {
    let bytes = std::fs::read(fixture("pool-v1-clean.bin")).unwrap();
    let opts = Options::default().layout("fixture");
    // Through the file backend (on a copy: opening writes the shutdown state) ...
    let dir = TestDir::new("fixture");
    let copy = dir.join("p");
    std::fs::write(&copy, &bytes).unwrap();
    let p = Pool::open(&copy, &opts).unwrap();
    assert!(p.was_clean_shutdown());
    assert_eq!(p.header().version, 1);
    assert_eq!(p.load_u64(0, Ordering::Acquire).unwrap(), 0x0123_4567_89ab_cdef);
    let mut b = [0u8; 7];
    p.read_into(64, &mut b).unwrap();
    assert_eq!(&b, b"ferrite");
    p.close().unwrap();
    // ... and as an image.
    let p = Pool::open_image(&bytes, &opts).unwrap();
    assert_eq!(p.load_u64(0, Ordering::Acquire).unwrap(), 0x0123_4567_89ab_cdef);
}

#[test]
#[ignore = "writes the fixture files; run by hand when adding a format version"]
fn regenerate() {
    let opts = Options::default().layout("fixture");
    let p = Pool::create_volatile(8192, &opts).unwrap();
    p.store_u64(0, 0x0123_4567_89ab_cdef, Ordering::Release).unwrap();
    p.write_bytes(64, b"ferrite").unwrap();
    p.persist(0, 128).unwrap();
    let img = p.close_into_image().unwrap();
    std::fs::write(fixture("pool-v1-clean.bin"), img).unwrap();
}
