//! Pool behaviour per backend: round trips, bounds and alignment errors, header validation
//! (every corruption → its typed error, the file unchanged), incomplete creation, clean and
//! unclean reopen, the second opener, full file systems, durability modes.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use ferrite_pmem::header::{POOL_MAGIC, PoolHeader, SHUTDOWN_STATE_OFF};
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{DurabilityMode, Error, Options, Pool};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const SIZE: u64 = 64 * 1024;

/// Runs `f` on a mapped pool and on a volatile pool.
fn each_backend(f: impl Fn(&Pool)) {
    let dir = TestDir::new("backend");
    let mapped = Pool::create(dir.join("p"), SIZE, &Options::default()).unwrap();
    assert!(mapped.is_mapped());
    f(&mapped);
    let volatile = Pool::create_volatile(SIZE, &Options::default()).unwrap();
    assert_eq!(volatile.mode(), DurabilityMode::Volatile);
    f(&volatile);
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, FromBytes, IntoBytes, KnownLayout, Immutable)]
struct Rec {
    a: u64,
    b: u32,
    c: [u8; 12],
}

#[test]
fn words_bytes_structs_round_trip() {
    each_backend(|p| {
        assert_eq!(p.size(), SIZE - 4096);
        p.store_u64(0, 0xdead_beef, Release).unwrap();
        assert_eq!(p.load_u64(0, Acquire).unwrap(), 0xdead_beef);
        assert_eq!(p.cas_u64(0, 1, 2, AcqRel, Acquire).unwrap(), Err(0xdead_beef));
        assert_eq!(p.cas_u64(0, 0xdead_beef, 5, AcqRel, Acquire).unwrap(), Ok(0xdead_beef));
        assert_eq!(p.fetch_or_u64(0, 0b1010, AcqRel).unwrap(), 5);
        assert_eq!(p.load_u64(0, Relaxed).unwrap(), 0b1111);

        // Unaligned bulk copies that cross word and line boundaries.
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        p.write_bytes(61, &data).unwrap();
        let mut back = vec![0u8; 300];
        p.read_into(61, &mut back).unwrap();
        assert_eq!(back, data);

        let r = Rec { a: u64::MAX - 1, b: 42, c: *b"hello world!" };
        p.write_struct(1003, &r).unwrap();
        assert_eq!(p.read_struct::<Rec>(1003).unwrap(), r);

        p.fill(2000, 77, 0xab).unwrap();
        let mut f = vec![0u8; 79];
        p.read_into(1999, &mut f).unwrap();
        assert_eq!(f[0], 0);
        assert!(f[1..78].iter().all(|&b| b == 0xab));
        assert_eq!(f[78], 0);

        let nt: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        p.copy_nt(4099, &nt).unwrap();
        p.fence();
        let mut back = vec![0u8; nt.len()];
        p.read_into(4099, &mut back).unwrap();
        assert_eq!(back, nt);

        // The last byte and word of the data area are addressable.
        let last = p.size() - 8;
        p.store_u64(last, 9, Relaxed).unwrap();
        assert_eq!(p.load_u64(last, Relaxed).unwrap(), 9);
        p.persist(last, 8).unwrap();
    });
}

#[test]
fn bounds_and_alignment_errors() {
    each_backend(|p| {
        let n = p.size();
        assert!(matches!(p.load_u64(n, Relaxed), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.store_u64(n - 4, 1, Relaxed), Err(Error::Misaligned { .. })));
        assert!(matches!(p.load_u64(3, Relaxed), Err(Error::Misaligned { off: 3, align: 8 })));
        assert!(matches!(p.load_u64(u64::MAX - 7, Relaxed), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.read_into(n - 2, &mut [0; 3]), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.write_bytes(u64::MAX, &[1]), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.flush(n, 1), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.persist(u64::MAX - 1, 4), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.copy_nt(n - 1, &[0; 2]), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.fill(n, 1, 0), Err(Error::OutOfBounds { .. })));
        assert!(matches!(p.read_struct::<Rec>(n - 8), Err(Error::OutOfBounds { .. })));
        // Orderings that std would panic on are refused with a typed error.
        assert!(matches!(p.load_u64(0, Release), Err(Error::InvalidArgument(_))));
        assert!(matches!(p.store_u64(0, 1, Acquire), Err(Error::InvalidArgument(_))));
        assert!(matches!(p.cas_u64(0, 0, 1, AcqRel, AcqRel), Err(Error::InvalidArgument(_))));
        // Zero-length accesses at the very end are fine.
        p.read_into(n, &mut []).unwrap();
        p.flush(n, 0).unwrap();
    });
}

#[test]
fn prefetch_is_only_a_hint() {
    each_backend(|p| {
        let n = p.size();
        p.store_u64(n - 8, 0xfeed, Release).unwrap();
        let before = ferrite_pmem::Counters::snapshot();
        // Inside, at the last byte, at the end and far beyond: no fault, no error, no effect.
        for off in [0, 4095, n - 1, n, n + 64, u64::MAX] {
            p.prefetch(off);
        }
        assert_eq!(p.load_u64(n - 8, Acquire).unwrap(), 0xfeed);
        let after = ferrite_pmem::Counters::snapshot();
        assert_eq!(after - before, Default::default(), "a prefetch counted as a store or persist");
    });
}

#[test]
fn reopen_after_clean_close_and_after_drop() {
    let dir = TestDir::new("reopen");
    let path = dir.join("p");
    let opts = Options::default().layout("reopen-test");
    let p = Pool::create(&path, SIZE, &opts).unwrap();
    assert!(!p.was_clean_shutdown());
    let uuid = p.uuid();
    p.store_u64(8, 1234, Release).unwrap();
    p.persist(8, 8).unwrap();
    p.close().unwrap();

    let p = Pool::open(&path, &opts).unwrap();
    assert!(p.was_clean_shutdown());
    assert_eq!(p.uuid(), uuid);
    assert_eq!(p.layout(), "reopen-test");
    assert_eq!(p.load_u64(8, Acquire).unwrap(), 1234);
    drop(p); // no close: the next opener must see an unclean shutdown

    let p = Pool::open(&path, &opts).unwrap();
    assert!(!p.was_clean_shutdown());
    p.close().unwrap();

    // Volatile: close into an image and reopen the image.
    let v = Pool::create_volatile(SIZE, &opts).unwrap();
    v.write_bytes(100, b"image").unwrap();
    let img = v.close_into_image().unwrap();
    let v = Pool::open_image(&img, &opts).unwrap();
    assert!(v.was_clean_shutdown());
    let mut b = [0u8; 5];
    v.read_into(100, &mut b).unwrap();
    assert_eq!(&b, b"image");
    let dirty = v.image();
    assert!(!Pool::open_image(&dirty, &opts).unwrap().was_clean_shutdown());
}

#[test]
fn second_opener_is_refused() {
    let dir = TestDir::new("lock");
    let path = dir.join("p");
    let p = Pool::create(&path, SIZE, &Options::default()).unwrap();
    assert!(matches!(Pool::open(&path, &Options::default()), Err(Error::Locked { .. })));
    drop(p);
    let p = Pool::open(&path, &Options::default()).unwrap();
    assert!(matches!(Pool::open(&path, &Options::default()), Err(Error::Locked { .. })));
    p.close().unwrap();
}

#[test]
fn create_errors() {
    let dir = TestDir::new("create");
    let path = dir.join("p");
    let o = Options::default();
    assert!(matches!(Pool::create(&path, 4096, &o), Err(Error::TooSmall { .. })));
    assert!(matches!(Pool::create(&path, 10_000, &o), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        Pool::create(&path, SIZE, &o.clone().layout("")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Pool::create(&path, SIZE, &o.clone().durability(DurabilityMode::Volatile)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!path.exists(), "a refused create leaves no file behind");
    Pool::create(&path, SIZE, &o).unwrap().close().unwrap();
    assert!(matches!(Pool::create(&path, SIZE, &o), Err(Error::AlreadyExists { .. })));
    assert!(matches!(
        Pool::create(dir.join("missing/dir/p"), SIZE, &o),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(Pool::open(dir.join("nope"), &o), Err(Error::NotFound { .. })));
    assert!(matches!(Pool::create_volatile(100, &o), Err(Error::TooSmall { .. })));
}

#[test]
fn pool_full_when_the_file_system_cannot_back_it() {
    let dir = TestDir::new("full");
    let avail = ferrite_pmem::platform::fs_space(dir.path()).unwrap().available;
    let size = (avail / 4096 + 1024) * 4096; // 4 MiB more than is available
    let path = dir.join("p");
    match Pool::create(&path, size, &Options::default()) {
        Err(Error::PoolFull { requested, available, .. }) => {
            assert_eq!(requested, size);
            assert!(available < requested);
        }
        other => panic!("expected PoolFull, got {other:?}"),
    }
    assert!(!path.exists());
}

// ----- header validation -----

fn read_header(path: &Path) -> PoolHeader {
    let f = std::fs::File::open(path).unwrap();
    let mut b = [0u8; 128];
    f.read_exact_at(&mut b, 0).unwrap();
    PoolHeader::read_from_bytes(&b).unwrap()
}

fn write_at(path: &Path, off: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, off).unwrap();
}

/// A fresh, cleanly closed pool file.
fn fresh(dir: &TestDir, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    Pool::create(&path, SIZE, &Options::default().layout("hdr")).unwrap().close().unwrap();
    path
}

/// Opens a damaged file, expects an error matching `check`, and verifies that the failed open
/// left the file byte-for-byte unchanged (P3). Also runs the same image through the volatile
/// backend's `open_image`.
fn expect_refused(path: &Path, layout: &str, check: impl Fn(&Error) -> bool) {
    let before = std::fs::read(path).unwrap();
    let opts = Options::default().layout(layout);
    let err = Pool::open(path, &opts).expect_err("damaged pool opened");
    assert!(check(&err), "mapped backend: unexpected error {err:?}");
    assert_eq!(std::fs::read(path).unwrap(), before, "a refused open changed the file");
    let err = Pool::open_image(&before, &opts).expect_err("damaged image opened");
    assert!(check(&err), "volatile backend: unexpected error {err:?}");
}

#[test]
fn header_corruptions_map_to_typed_errors() {
    let dir = TestDir::new("hdr");
    let corrupt = |e: &Error| matches!(e, Error::Corrupt { .. });
    let version = |e: &Error| matches!(e, Error::WrongVersion { .. });

    // Bad magic.
    let p = fresh(&dir, "magic");
    write_at(&p, 0, b"NOTAPOOL");
    expect_refused(&p, "hdr", corrupt);

    // Zero magic: creation never finished.
    let p = fresh(&dir, "incomplete");
    write_at(&p, 0, &[0; 8]);
    expect_refused(&p, "hdr", |e| matches!(e, Error::Incomplete { .. }));

    // Checksum damaged.
    let p = fresh(&dir, "crc");
    let mut h = read_header(&p);
    h.checksum ^= 1;
    write_at(&p, 0, h.as_bytes());
    expect_refused(&p, "hdr", corrupt);

    // A field damaged without fixing the checksum.
    let p = fresh(&dir, "field");
    let mut h = read_header(&p);
    h.uuid[3] ^= 0x40;
    write_at(&p, 0, h.as_bytes());
    expect_refused(&p, "hdr", corrupt);

    // A newer version written correctly (checksum valid): a version error.
    let p = fresh(&dir, "newer");
    let mut h = read_header(&p);
    h.version = 2;
    h.checksum = h.compute_checksum();
    write_at(&p, 0, h.as_bytes());
    expect_refused(&p, "hdr", version);

    // An unknown incompatible feature flag: a version error.
    let p = fresh(&dir, "incompat");
    let mut h = read_header(&p);
    h.incompat_flags = 1 << 5;
    h.checksum = h.compute_checksum();
    write_at(&p, 0, h.as_bytes());
    expect_refused(&p, "hdr", version);

    // Unknown *compatible* flags are accepted.
    let p = fresh(&dir, "compat");
    let mut h = read_header(&p);
    h.compat_flags = 1 << 9;
    h.checksum = h.compute_checksum();
    write_at(&p, 0, h.as_bytes());
    Pool::open(&p, &Options::default().layout("hdr")).unwrap().close().unwrap();

    // Wrong layout.
    let p = fresh(&dir, "layout");
    expect_refused(
        &p,
        "other",
        |e| matches!(e, Error::WrongLayout { expected, found, .. } if expected == "other" && found == "hdr"),
    );

    // Truncated and extended files.
    let p = fresh(&dir, "trunc");
    OpenOptions::new().write(true).open(&p).unwrap().set_len(SIZE - 4096).unwrap();
    expect_refused(&p, "hdr", corrupt);
    let p = fresh(&dir, "extend");
    OpenOptions::new().write(true).open(&p).unwrap().set_len(SIZE + 4096).unwrap();
    expect_refused(&p, "hdr", corrupt);

    // Garbage shutdown state.
    let p = fresh(&dir, "state");
    write_at(&p, SHUTDOWN_STATE_OFF, &0x1234u64.to_le_bytes());
    expect_refused(&p, "hdr", corrupt);

    // Non-zero reserved bytes.
    let p = fresh(&dir, "reserved");
    write_at(&p, 120, &[1]);
    expect_refused(&p, "hdr", corrupt);

    // Tiny and empty files.
    let p = dir.join("tiny");
    std::fs::write(&p, [0u8; 100]).unwrap();
    expect_refused(&p, "hdr", |e| matches!(e, Error::TooSmall { .. }));
    let p = dir.join("empty");
    std::fs::write(&p, []).unwrap();
    expect_refused(&p, "hdr", |e| matches!(e, Error::Incomplete { .. }));

    // A file of the right size full of random bytes (magic forced valid).
    let p = dir.join("noise");
    let mut noise: Vec<u8> =
        (0..SIZE).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
    noise[..8].copy_from_slice(&POOL_MAGIC.to_le_bytes());
    std::fs::write(&p, &noise).unwrap();
    expect_refused(&p, "hdr", |e| matches!(e, Error::Corrupt { .. } | Error::WrongVersion { .. }));
}

#[test]
fn inspect_reads_without_changing() {
    let dir = TestDir::new("inspect");
    let p = fresh(&dir, "p");
    let before = std::fs::read(&p).unwrap();
    let s = ferrite_pmem::inspect(&p, None).unwrap();
    assert!(s.clean);
    assert_eq!(s.header.layout_str().unwrap(), "hdr");
    assert_eq!(std::fs::read(&p).unwrap(), before);
    write_at(&p, 0, b"XXXXXXXX");
    assert!(matches!(ferrite_pmem::inspect(&p, None), Err(Error::Corrupt { .. })));
}

// ----- durability modes -----

#[test]
fn tmpfs_gets_emulated_mode_and_refuses_forced_pmem() {
    let dir = TestDir::new("modes");
    let on_ram = ferrite_pmem::platform::fs_is_ram(
        ferrite_pmem::platform::fs_space(dir.path()).unwrap().fs_magic,
    );
    let p = Pool::create(dir.join("auto"), SIZE, &Options::default()).unwrap();
    if on_ram {
        assert_eq!(p.mode(), DurabilityMode::Emulated, "{}", p.mode_reason());
        assert!(p.mode_reason().contains("MAP_SYNC refused"), "{}", p.mode_reason());
        let forced = Pool::create(
            dir.join("pmem"),
            SIZE,
            &Options::default().durability(DurabilityMode::Pmem),
        );
        match forced {
            Err(Error::ModeUnavailable { mode: DurabilityMode::Pmem, reason, .. }) => {
                assert!(reason.contains("MAP_SYNC refused"), "{reason}");
            }
            other => panic!("forced Pmem on tmpfs: {other:?}"),
        }
    } else {
        eprintln!("pool dir is not tmpfs: mode {} ({})", p.mode(), p.mode_reason());
    }
    let m = Pool::create(
        dir.join("msync"),
        SIZE,
        &Options::default().durability(DurabilityMode::Msync),
    )
    .unwrap();
    assert_eq!(m.mode(), DurabilityMode::Msync);
}
