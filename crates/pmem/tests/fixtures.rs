//! Stored pool images of every released header version must keep opening (conventions §4).
//!
//! - `pool-v1-clean.bin`: an 8 KiB version-1 pool, layout `fixture`, closed cleanly, with the
//!   word 0x0123_4567_89ab_cdef at data offset 0 and the bytes `ferrite` at data offset 64.
//! - `poolset-v1/seg-00000{0,1}.pm`: a version-1 pool set of two 8 KiB segments, layout
//!   `fixture`, closed cleanly; the word 0x0123_4567_89ab_cdef at offset 0 of segment 0's
//!   data area and the bytes `ferrite` at offset 64 of segment 1's.
//!
//! Each test opens a copy and checks every header field, so a change of an on-media layout
//! fails here. A fixture is written once per format version, never rewritten to paper over a
//! break: a new version adds new files, by a generator like the two `#[ignore]`d ones below
//! (`cargo test -p ferrite-pmem --test fixtures -- --ignored --exact regenerate_pool_set`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use ferrite_pmem::header::{
    HEADER_AREA, POOL_VERSION, PoolHeader, SEGMENT_BITMAP_OFF, SEGMENT_MAGIC, SEGMENT_VERSION,
    SHUTDOWN_STATE_OFF, STATE_CLEAN, SegmentHeader,
};
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Options, PPtr, Pool, PoolSet};
use zerocopy::FromBytes;

const SET_SEGMENT: u64 = 8192;

fn set_opts() -> Options {
    Options::default().layout("fixture").segment_size(SET_SEGMENT).max_pool_size(1 << 20)
}

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
    let h = *p.header();
    assert_eq!(h, PoolHeader::read_from_prefix(&bytes).unwrap().0);
    assert_eq!((h.version, POOL_VERSION, h.header_size), (1, 1, 128));
    assert_eq!((h.compat_flags, h.incompat_flags), (0, 0));
    assert_eq!((h.pool_size, h.data_offset), (8192, HEADER_AREA));
    assert_eq!(h.layout_str(), Ok("fixture"));
    assert_eq!(h.checksum, h.compute_checksum());
    assert_eq!(p.file_size(), 8192);
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
fn version_1_pool_set_opens() {
    let src = fixture("poolset-v1");
    let dir = TestDir::new("fixture-set");
    let copy = dir.join("s");
    std::fs::create_dir(&copy).unwrap();
    let mut uuid = None;
    for (id, name) in ["seg-000000.pm", "seg-000001.pm"].into_iter().enumerate() {
        let bytes = std::fs::read(src.join(name)).unwrap();
        assert_eq!(bytes.len() as u64, SET_SEGMENT);
        // Every field of the stored segment header, as format.md describes it.
        let h = SegmentHeader::read_from_prefix(&bytes).unwrap().0;
        assert_eq!(
            (h.magic, h.version, SEGMENT_VERSION, h.header_size),
            (SEGMENT_MAGIC, 1, 1, 128)
        );
        assert_eq!((h.compat_flags, h.incompat_flags), (0, 0));
        assert_eq!((h.segment_id, h.segment_size, h.data_offset), (id as u64, SET_SEGMENT, 4096));
        assert_eq!(h.layout_str(), Ok("fixture"));
        assert_eq!(h.checksum, h.compute_checksum());
        assert_eq!((h.reserved0, h.reserved1), (0, 0));
        assert_eq!(*uuid.get_or_insert(h.pool_uuid), h.pool_uuid, "one pool uuid");
        if id == 0 {
            let word = |off: u64| {
                u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().unwrap())
            };
            assert_eq!(word(SHUTDOWN_STATE_OFF), STATE_CLEAN);
            assert_eq!(word(SEGMENT_BITMAP_OFF), 0b11, "live-segment bitmap");
        }
        std::fs::write(copy.join(name), &bytes).unwrap();
    }
    let set = PoolSet::open(&copy, &set_opts()).unwrap();
    assert!(set.was_clean_shutdown());
    assert_eq!(Some(set.uuid()), uuid);
    let ids: Vec<u64> = set.segments().iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![0, 1]);
    let g0 = set.resolve(PPtr::new(0, 0)).unwrap();
    assert_eq!(set.load_u64(g0, Ordering::Acquire).unwrap(), 0x0123_4567_89ab_cdef);
    let mut b = [0u8; 7];
    set.read_into(set.resolve(PPtr::new(1, 64)).unwrap(), &mut b).unwrap();
    assert_eq!(&b, b"ferrite");
    set.close().unwrap();
}

#[test]
#[ignore = "writes the fixture files; run by hand when adding a format version"]
fn regenerate_pool_set() {
    let dir = TestDir::new("fixture-gen");
    let set = PoolSet::create(dir.join("s"), &set_opts()).unwrap();
    assert_eq!(set.grow().unwrap(), 1);
    let g0 = set.resolve(PPtr::new(0, 0)).unwrap();
    set.store_u64(g0, 0x0123_4567_89ab_cdef, Ordering::Release).unwrap();
    set.persist(g0, 8).unwrap();
    let g1 = set.resolve(PPtr::new(1, 64)).unwrap();
    set.write_bytes(g1, b"ferrite").unwrap();
    set.persist(g1, 7).unwrap();
    set.close().unwrap();
    let out = fixture("poolset-v1");
    std::fs::create_dir_all(&out).unwrap();
    for name in ["seg-000000.pm", "seg-000001.pm"] {
        std::fs::copy(dir.join("s").join(name), out.join(name)).unwrap();
    }
}

#[test]
#[ignore = "writes the fixture files; run by hand when adding a format version"]
fn regenerate_pool() {
    let opts = Options::default().layout("fixture");
    let p = Pool::create_volatile(8192, &opts).unwrap();
    p.store_u64(0, 0x0123_4567_89ab_cdef, Ordering::Release).unwrap();
    p.write_bytes(64, b"ferrite").unwrap();
    p.persist(0, 128).unwrap();
    let img = p.close_into_image().unwrap();
    std::fs::write(fixture("pool-v1-clean.bin"), img).unwrap();
}
