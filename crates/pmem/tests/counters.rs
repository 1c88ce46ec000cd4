//! Exact flush/fence/byte counts, each flush path forced through `Options`, eADR elision,
//! msync mode, thread-locality of the counters, and a model-based test of bulk access.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{Counters, DurabilityMode, Error, FlushKind, Options, Pool, flush_supported};
use proptest::prelude::*;

const SIZE: u64 = 256 * 1024;

fn delta(f: impl FnOnce()) -> Counters {
    let before = Counters::snapshot();
    f();
    Counters::snapshot() - before
}

#[test]
fn each_flush_instruction_forced_and_counted() {
    let dir = TestDir::new("flushkinds");
    for kind in FlushKind::ALL {
        if !flush_supported(kind) {
            eprintln!("skipping {kind}: not supported by this CPU");
            continue;
        }
        let opts = Options::default().flush(kind);
        let mapped = Pool::create(dir.join(kind.name()), SIZE, &opts).unwrap();
        let volatile = Pool::create_volatile(SIZE, &opts).unwrap();
        for p in [&mapped, &volatile] {
            assert_eq!(p.flush_kind(), kind);
            let d = delta(|| p.persist(128, 5 * 64).unwrap());
            assert_eq!(d.lines_flushed_with(kind), 5, "{kind}: {d:?}");
            assert_eq!(d.lines_flushed(), 5, "{kind}: only {kind} may run: {d:?}");
            assert_eq!(d.fences, 1);
        }
    }
}

#[test]
fn unsupported_flush_is_a_typed_error() {
    for kind in FlushKind::ALL {
        if flush_supported(kind) {
            continue;
        }
        let r = Pool::create_volatile(SIZE, &Options::default().flush(kind));
        assert!(matches!(r, Err(Error::UnsupportedFlush(k)) if k == kind));
    }
}

#[test]
fn default_flush_is_the_best_available() {
    let p = Pool::create_volatile(SIZE, &Options::default()).unwrap();
    assert_eq!(Some(p.flush_kind()), ferrite_pmem::best_flush());
}

#[test]
fn persist_of_n_lines_is_n_flushes_and_one_fence() {
    let dir = TestDir::new("exact");
    let mapped = Pool::create(dir.join("p"), SIZE, &Options::default()).unwrap();
    let volatile = Pool::create_volatile(SIZE, &Options::default()).unwrap();
    for p in [&mapped, &volatile] {
        for n in 1..=32u64 {
            let d = delta(|| p.persist(64 * 10, n * 64).unwrap());
            assert_eq!((d.lines_flushed(), d.fences), (n, 1), "{n} aligned lines");
        }
        // Ranges that are not line-aligned count every line they touch.
        let cases = [(63, 2, 2), (0, 1, 1), (64, 64, 1), (65, 64, 2), (1, 127, 2), (100, 300, 6)];
        for (off, len, lines) in cases {
            let d = delta(|| p.persist(off, len).unwrap());
            assert_eq!((d.lines_flushed(), d.fences), (lines, 1), "persist({off}, {len})");
        }
        let d = delta(|| p.flush(0, 0).unwrap());
        assert_eq!(d.lines_flushed(), 0);
        let d = delta(|| p.fence());
        assert_eq!((d.lines_flushed(), d.fences), (0, 1));
    }
}

#[test]
fn bytes_stored_and_nt_bytes() {
    let p = Pool::create_volatile(SIZE, &Options::default()).unwrap();
    let d = delta(|| {
        p.store_u64(0, 1, Relaxed).unwrap();
        p.write_bytes(8, &[0u8; 100]).unwrap();
        p.fill(200, 30, 1).unwrap();
    });
    assert_eq!(d.bytes_stored, 8 + 100 + 30);
    let d = delta(|| {
        assert!(p.cas_u64(0, 99, 2, AcqRel, Acquire).unwrap().is_err());
    });
    assert_eq!(d.bytes_stored, 0, "a failed CAS stores nothing");
    // 8-aligned copy: all non-temporal, nothing flushed.
    let d = delta(|| p.copy_nt(1024, &[7u8; 256]).unwrap());
    assert_eq!((d.nt_bytes, d.bytes_stored, d.lines_flushed()), (256, 0, 0));
    // Unaligned copy: head and tail are ordinary stores, flushed.
    let d = delta(|| p.copy_nt(2048 + 3, &[7u8; 64]).unwrap());
    assert_eq!(d.nt_bytes + d.bytes_stored, 64);
    assert_eq!(d.bytes_stored, 5 + 3);
    assert_eq!(d.lines_flushed(), 2);
}

#[test]
fn eadr_elides_flushes_keeps_fences() {
    let p = Pool::create_volatile(SIZE, &Options::default().eadr(true)).unwrap();
    assert!(p.eadr());
    let d = delta(|| p.persist(0, 4 * 64).unwrap());
    assert_eq!((d.lines_flushed(), d.elided_lines, d.fences), (0, 4, 1));
}

#[test]
fn msync_mode_syncs_covering_pages() {
    let dir = TestDir::new("msync");
    let p =
        Pool::create(dir.join("p"), SIZE, &Options::default().durability(DurabilityMode::Msync))
            .unwrap();
    let d = delta(|| p.persist(4090, 10).unwrap()); // straddles two pages of the data area
    assert_eq!((d.msync_calls, d.msync_pages, d.lines_flushed(), d.fences), (1, 2, 0, 1));
}

#[test]
fn counters_are_per_thread() {
    let p = Pool::create_volatile(SIZE, &Options::default()).unwrap();
    let before = Counters::snapshot();
    std::thread::scope(|s| {
        s.spawn(|| {
            let d = delta(|| p.persist(0, 640).unwrap());
            assert_eq!(d.lines_flushed(), 10);
        });
    });
    assert_eq!(Counters::snapshot() - before, Counters::default());
}

#[test]
fn concurrent_word_access() {
    let p = Pool::create_volatile(SIZE, &Options::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let p = &p;
            s.spawn(move || {
                for i in 0..10_000u64 {
                    p.fetch_or_u64(0, 1 << t, AcqRel).unwrap();
                    p.store_u64(64 * (t + 1), i, Relaxed).unwrap();
                    p.persist(64 * (t + 1), 8).unwrap();
                }
            });
        }
    });
    assert_eq!(p.load_u64(0, Acquire).unwrap(), 0b1111);
    for t in 0..4 {
        assert_eq!(p.load_u64(64 * (t + 1), Acquire).unwrap(), 9_999);
    }
}

proptest! {
    /// Random writes and reads (any offset and length, including out of bounds) against a
    /// plain byte-vector model.
    #[test]
    fn bulk_access_matches_a_byte_model(
        ops in proptest::collection::vec((0u64..9000, 0usize..300, any::<u8>(), any::<bool>()), 1..60)
    ) {
        let p = Pool::create_volatile(3 * 4096, &Options::default()).unwrap();
        let n = p.size();
        let mut model = vec![0u8; n as usize];
        for (off, len, seed, nt) in ops {
            let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            let r = if nt { p.copy_nt(off, &data) } else { p.write_bytes(off, &data) };
            if off + len as u64 <= n {
                prop_assert!(r.is_ok());
                model[off as usize..off as usize + len].copy_from_slice(&data);
            } else {
                let is_oob = matches!(r, Err(Error::OutOfBounds { .. }));
                prop_assert!(is_oob);
            }
            p.fence();
            let mut buf = vec![0u8; len];
            let r = p.read_into(off, &mut buf);
            if off + len as u64 <= n {
                prop_assert!(r.is_ok());
                prop_assert_eq!(&buf[..], &model[off as usize..off as usize + len]);
            } else {
                prop_assert!(r.is_err());
            }
        }
        let mut all = vec![0u8; n as usize];
        p.read_into(0, &mut all).unwrap();
        prop_assert_eq!(all, model);
    }
}
