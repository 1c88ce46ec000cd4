//! The simulated persistence domain, on fixed counter-examples: a store after a flush before
//! the fence, another thread's fence, non-temporal stores, grow, punch, eADR, pending subsets,
//! tearing, seeds, hooks and sites, trace replay, images opened as sim and mapped pools.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex};

use ferrite_pmem::header::HEADER_AREA;
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::sim::{Event, EventKind, WritebackOrder, replay};
use ferrite_pmem::{
    CrashImage, DurabilityMode, Error, ImageSpec, Options, PPtr, Pick, Pool, PoolSet,
    SIM_POOL_FILE, SimDomain,
};

const SIZE: u64 = 64 * 1024;

fn sim_pool() -> Pool {
    let p = Pool::create_sim(SIZE, &Options::default()).unwrap();
    assert_eq!(p.mode(), DurabilityMode::Simulated);
    p
}

/// The word at data offset `off` in `img` (a single-file image).
fn word(img: &CrashImage, off: u64) -> u64 {
    let b = img.file(SIM_POOL_FILE).unwrap().bytes();
    let at = (HEADER_AREA + off) as usize;
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn spec(pending: Pick, evict: Pick) -> ImageSpec {
    ImageSpec { pending, evict, ..ImageSpec::default() }
}

#[test]
fn store_after_flush_before_fence() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    p.store_u64(0, 1, Relaxed).unwrap();
    p.flush(0, 8).unwrap();
    p.store_u64(0, 2, Relaxed).unwrap(); // dirties the line again (M3)
    // Before the fence: durable 0; the pending line carries 1 (content at flush time); an
    // evicted line carries 2 (newest).
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 0);
    assert_eq!(word(&sim.capture(&spec(Pick::All, Pick::None)), 0), 1);
    assert_eq!(word(&sim.capture(&spec(Pick::None, Pick::All)), 0), 2);
    p.fence();
    // After the fence: 1 is durable, 2 is not, and the line is still dirty.
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 1);
    assert_eq!(word(&sim.capture(&spec(Pick::None, Pick::All)), 0), 2);
    assert!(sim.dirty_lines().contains(&(SIM_POOL_FILE.to_owned(), HEADER_AREA / 64)));
    p.persist(0, 8).unwrap();
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 2);
    assert!(!sim.dirty_lines().contains(&(SIM_POOL_FILE.to_owned(), HEADER_AREA / 64)));
}

#[test]
fn another_threads_fence_does_not_persist_my_flushes() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    let me = ferrite_pmem::sim::thread_index();
    p.store_u64(64, 7, Relaxed).unwrap();
    p.flush(64, 8).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            p.store_u64(128, 9, Relaxed).unwrap();
            p.persist(128, 8).unwrap(); // this thread's fence
        });
    });
    let d = sim.capture(&ImageSpec::durable());
    assert_eq!(word(&d, 64), 0, "another thread's fence persisted my flush");
    assert_eq!(word(&d, 128), 9);
    assert_eq!(sim.pending_of(me).len(), 1);
    // Picking the other threads' pending lines does not pick mine.
    let i = sim.capture(&ImageSpec { others_pending: Pick::All, ..ImageSpec::default() });
    assert_eq!(word(&i, 64), 0);
    p.fence();
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 64), 7);
}

/// Axiom M6 (`docs/design/persistence.md`): thread A flushes a line holding its word, thread B
/// stores its neighbouring word on the same line, flushes and fences; then A fences. Under
/// `Coherent` (the default) A's older capture does not land over B's durable content, in the
/// durable image nor in images that pick A's pending line; under `Strict` it does, and B's
/// word is lost from the durable image.
fn stale_writeback_after_a_neighbours_fence(order: WritebackOrder) -> (u64, u64) {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    sim.set_writeback_order(order);
    assert_eq!(sim.writeback_order(), order);
    p.store_u64(0, 1, Relaxed).unwrap();
    p.flush(0, 8).unwrap(); // A's capture: (1, 0)
    std::thread::scope(|s| {
        s.spawn(|| {
            p.store_u64(8, 2, Relaxed).unwrap();
            p.persist(0, 16).unwrap(); // B's capture (1, 2), durable at B's fence
        });
    });
    let picked = sim.capture(&spec(Pick::All, Pick::None));
    assert_eq!(word(&picked, 0), 1);
    p.fence(); // A's fence
    let d = sim.capture(&ImageSpec::durable());
    assert_eq!(word(&d, 0), 1);
    (word(&picked, 8), word(&d, 8))
}

#[test]
fn a_stale_writeback_lands_only_under_the_strict_order() {
    assert_eq!(SimDomain::new(false).writeback_order(), WritebackOrder::Coherent);
    let (picked, durable) = stale_writeback_after_a_neighbours_fence(WritebackOrder::Coherent);
    assert_eq!((picked, durable), (2, 2), "coherent: B's word stays durable");
    let (picked, durable) = stale_writeback_after_a_neighbours_fence(WritebackOrder::Strict);
    assert_eq!((picked, durable), (0, 0), "strict: A's stale capture lands over B's word");
}

/// Non-temporal words reach memory when their thread drains them (its fence): a write-back of
/// the line captured before them, landing later, cannot bring back the words they replaced.
/// Thread B flushes the line holding its word 0; thread A writes words 2..8 non-temporally
/// and fences; then B fences. Under `Coherent` A's words stay durable and B's word lands
/// beside them; under `Strict` B's older copy writes zeros over A's words. (The free-running
/// SOFORT target met this on a heap line shared by a small value and a large one.)
fn stale_writeback_after_non_temporal_words(order: WritebackOrder) -> (u64, u64) {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    sim.set_writeback_order(order);
    let (to_b, b_rx) = std::sync::mpsc::channel::<()>();
    let (to_a, a_rx) = std::sync::mpsc::channel::<()>();
    let p = &p;
    std::thread::scope(|s| {
        s.spawn(move || {
            p.store_u64(0, 5, Relaxed).unwrap();
            p.flush(0, 8).unwrap(); // B's capture: word 0 = 5, the rest 0
            to_a.send(()).unwrap();
            b_rx.recv().unwrap();
            p.fence(); // B's fence, after A's
        });
        a_rx.recv().unwrap();
        p.copy_nt(16, &[7u8; 48]).unwrap();
        p.fence(); // A's drain
        to_b.send(()).unwrap();
    });
    let d = sim.capture(&ImageSpec::durable());
    (word(&d, 0), word(&d, 16))
}

#[test]
fn a_stale_writeback_does_not_undo_drained_non_temporal_words() {
    let nt = u64::from_le_bytes([7; 8]);
    assert_eq!(stale_writeback_after_non_temporal_words(WritebackOrder::Coherent), (5, nt));
    assert_eq!(stale_writeback_after_non_temporal_words(WritebackOrder::Strict), (5, 0));
}

#[test]
fn new_domains_take_the_threads_writeback_order() {
    ferrite_pmem::sim::set_new_domain_writebacks(WritebackOrder::Strict);
    let strict = SimDomain::new(false).writeback_order();
    ferrite_pmem::sim::set_new_domain_writebacks(WritebackOrder::Coherent);
    assert_eq!(strict, WritebackOrder::Strict);
    assert_eq!(SimDomain::new(false).writeback_order(), WritebackOrder::Coherent);
}

#[test]
fn non_temporal_stores_are_pending_at_store_time() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    let me = ferrite_pmem::sim::thread_index();
    // A partial line: 16 bytes at an aligned offset are two words of line 1 of the data area.
    p.store_u64(64 + 40, 0xdead, Relaxed).unwrap(); // an ordinary store elsewhere in the line
    p.copy_nt(64 + 8, &[0xab; 16]).unwrap();
    let pend = sim.pending_of(me);
    assert_eq!(pend.len(), 1);
    assert!(pend[0].nt, "NT pending lines are partial");
    let img = sim.capture(&spec(Pick::All, Pick::None));
    assert_eq!(word(&img, 72), 0xabab_abab_abab_abab);
    assert_eq!(word(&img, 80), 0xabab_abab_abab_abab);
    assert_eq!(word(&img, 104), 0, "only the NT words are pending, not the line");
    p.fence();
    let d = sim.capture(&ImageSpec::durable());
    assert_eq!(word(&d, 80), 0xabab_abab_abab_abab);
    assert_eq!(word(&d, 104), 0);
}

#[test]
fn pending_subsets_and_eviction_order() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    for (i, line) in [3u64, 1, 2].iter().enumerate() {
        p.store_u64(line * 64, 10 + i as u64, Relaxed).unwrap();
        p.flush(line * 64, 8).unwrap();
    }
    // Pending candidates are in flush order: line 3, line 1, line 2.
    let img = sim.capture(&spec(Pick::Mask(0b101), Pick::None));
    assert_eq!((word(&img, 3 * 64), word(&img, 64), word(&img, 2 * 64)), (10, 0, 12));
    let img = sim.capture(&spec(Pick::Indices(vec![1]), Pick::None));
    assert_eq!((word(&img, 3 * 64), word(&img, 64), word(&img, 2 * 64)), (0, 11, 0));
    p.fence();
    p.store_u64(5 * 64, 5, Relaxed).unwrap();
    p.store_u64(4 * 64, 4, Relaxed).unwrap();
    // Dirty candidates are in line order: line 4, line 5.
    let img = sim.capture(&spec(Pick::None, Pick::Mask(0b10)));
    assert_eq!((word(&img, 4 * 64), word(&img, 5 * 64)), (0, 5));
}

#[test]
fn tearing_is_at_8_byte_granularity_and_seeded() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    let new: Vec<u8> = (0..64).map(|i| 0x80 | i as u8).collect();
    p.write_bytes(0, &new).unwrap();
    p.flush(0, 64).unwrap();
    let mut seen_partial = false;
    for seed in 0..64 {
        let s = ImageSpec { pending: Pick::All, tear: true, seed, ..ImageSpec::default() };
        let a = sim.capture(&s).file(SIM_POOL_FILE).unwrap().bytes();
        let b = sim.capture(&s).file(SIM_POOL_FILE).unwrap().bytes();
        assert_eq!(a, b, "seed {seed} did not reproduce its image");
        let line = &a[HEADER_AREA as usize..HEADER_AREA as usize + 64];
        let mut words_new = 0;
        for w in 0..8 {
            let got = &line[w * 8..w * 8 + 8];
            let is_new = got == &new[w * 8..w * 8 + 8];
            assert!(is_new || got == [0u8; 8], "seed {seed}: word {w} is a mix: {got:?}");
            words_new += usize::from(is_new);
        }
        seen_partial |= words_new > 0 && words_new < 8;
    }
    assert!(seen_partial, "64 seeds never tore the line");
}

#[test]
fn random_picks_are_reproducible_from_the_seed() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    for line in 0..40u64 {
        p.store_u64(line * 64, line + 1, Relaxed).unwrap();
        if line % 2 == 0 {
            p.flush(line * 64, 8).unwrap();
        }
    }
    let s = |seed| ImageSpec {
        pending: Pick::Random(0.5),
        evict: Pick::Random(0.3),
        seed,
        ..ImageSpec::default()
    };
    let a = sim.capture(&s(42)).file(SIM_POOL_FILE).unwrap().bytes();
    assert_eq!(a, sim.capture(&s(42)).file(SIM_POOL_FILE).unwrap().bytes());
    assert_ne!(a, sim.capture(&s(43)).file(SIM_POOL_FILE).unwrap().bytes());
}

#[test]
fn eadr_fence_persists_every_dirty_line() {
    let p = Pool::create_sim(SIZE, &Options::default().eadr(true)).unwrap();
    let sim = p.sim().unwrap().clone();
    p.store_u64(0, 3, Relaxed).unwrap(); // never flushed
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 0);
    p.fence();
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 3);
}

#[test]
fn images_open_as_sim_and_mapped_pools_and_round_trip_files() {
    let dir = TestDir::new("sim-open");
    let opts = Options::default().layout("simtest");
    let p = Pool::create_sim(SIZE, &opts).unwrap();
    p.store_u64(8, 11, Relaxed).unwrap();
    p.persist(8, 8).unwrap();
    p.store_u64(16, 22, Relaxed).unwrap(); // not persisted
    let img = p.sim().unwrap().capture(&ImageSpec::durable());

    let s = Pool::open_sim(&img, &opts).unwrap();
    assert!(!s.was_clean_shutdown(), "a crash image is an unclean shutdown");
    assert_eq!(s.load_u64(8, Acquire).unwrap(), 11);
    assert_eq!(s.load_u64(16, Acquire).unwrap(), 0);
    assert!(s.sim().is_some(), "recovery on a sim pool can itself be crash-tested");

    let m = Pool::open_image_mapped(&img, dir.join("p"), &opts).unwrap();
    assert_eq!(m.load_u64(8, Acquire).unwrap(), 11);
    drop(m);

    img.save(dir.join("img")).unwrap();
    let back = CrashImage::load(dir.join("img")).unwrap();
    assert_eq!(back.file(SIM_POOL_FILE).unwrap().bytes(), img.file(SIM_POOL_FILE).unwrap().bytes());
    assert!(matches!(CrashImage::load(dir.join("none")), Err(Error::NotFound { .. })));
    std::fs::write(dir.join("img/image.txt"), "garbage").unwrap();
    assert!(matches!(CrashImage::load(dir.join("img")), Err(Error::Corrupt { .. })));
}

#[test]
fn every_crash_during_creation_is_incomplete_or_valid() {
    // Crash at every fence of Pool creation: the image must open (valid, magic written) or be
    // refused as Incomplete — never Corrupt.
    let sim = Arc::new(SimDomain::new(false));
    let images = Arc::new(Mutex::new(Vec::new()));
    let sink = images.clone();
    sim.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
        if e.kind == EventKind::Fence {
            let mut v = sink.lock().unwrap();
            v.push(d.capture(&ImageSpec::durable()));
            v.push(d.capture(&ImageSpec { pending: Pick::All, ..ImageSpec::default() }));
        }
    })));
    let p = Pool::create_sim_with(sim, SIZE, &Options::default()).unwrap();
    drop(p);
    let images = images.lock().unwrap();
    assert!(images.len() >= 4, "creation reached {} crash images", images.len());
    let (mut ok, mut incomplete) = (0, 0);
    for img in images.iter() {
        match Pool::open_sim(img, &Options::default()) {
            Ok(_) => ok += 1,
            Err(Error::Incomplete { .. }) => incomplete += 1,
            Err(e) => panic!("crash during creation gave {e}"),
        }
    }
    assert!(ok > 0 && incomplete > 0, "ok {ok}, incomplete {incomplete}");
}

#[test]
fn hooks_see_sites_and_rules() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    sim.set_hook(Some(Arc::new(move |_: &SimDomain, e: &Event| {
        sink.lock().unwrap().push((e.kind, e.site.key(), e.offset, e.len));
    })));
    p.store_u64(0, 1, Relaxed).unwrap();
    p.persist_rule("P-TEST-1", 0, 8).unwrap();
    sim.set_hook(None);
    let seen = seen.lock().unwrap();
    let kinds: Vec<EventKind> = seen.iter().map(|e| e.0).collect();
    assert_eq!(kinds, vec![EventKind::Store, EventKind::Flush, EventKind::Fence]);
    assert!(seen[0].1.starts_with(file!()), "site {} is not this test's line", seen[0].1);
    assert!(seen[1].1.ends_with("#P-TEST-1") && seen[2].1.ends_with("#P-TEST-1"));
    assert_eq!((seen[0].2, seen[0].3), (HEADER_AREA, 8), "offsets are file offsets");
}

/// One persist site (`persist` is `#[track_caller]`, so every call of this helper is the same
/// site: the line inside it).
fn persist_word(p: &Pool, off: u64) {
    p.persist(off, 8).unwrap();
}

#[test]
fn dropped_persist_site_is_a_no_op_for_durability() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    p.store_u64(0, 5, Relaxed).unwrap();
    sim.record_trace();
    persist_word(&p, 0);
    let t = sim.take_trace();
    let key = t.iter().find(|e| e.kind == EventKind::Fence).unwrap().site.clone();
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 5);
    sim.drop_persist(&key);
    p.store_u64(0, 6, Relaxed).unwrap();
    persist_word(&p, 0); // mutated: neither the flush nor the fence counts
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 5);
    p.persist(0, 8).unwrap(); // another site still persists
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 6);
}

#[test]
fn trace_replay_rebuilds_the_same_state() {
    let dir = TestDir::new("sim-trace");
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    // Recording starts before the workload, so the replay needs the pool file: record the
    // whole life of a second pool instead.
    drop((p, sim));
    let d = Arc::new(SimDomain::new(false));
    d.record_trace();
    let p = Pool::create_sim_with(d.clone(), SIZE, &Options::default()).unwrap();
    p.store_u64(0, 1, Relaxed).unwrap();
    p.persist(0, 8).unwrap();
    p.store_u64(64, 2, Relaxed).unwrap();
    p.flush(64, 8).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            p.write_bytes(200, b"other thread").unwrap();
            p.flush(200, 12).unwrap(); // left pending on that thread
        });
    });
    p.copy_nt(512, &[9u8; 64]).unwrap();
    p.store_u64(1024, 3, Relaxed).unwrap(); // dirty only
    let trace = d.take_trace();
    ferrite_pmem::sim::save_trace(dir.join("t"), &trace).unwrap();
    let loaded = ferrite_pmem::sim::load_trace(dir.join("t")).unwrap();
    assert_eq!(loaded, trace);
    let r = replay(&loaded, false).unwrap();
    let me = ferrite_pmem::sim::thread_index();
    for s in [
        ImageSpec::durable(),
        ImageSpec { pending: Pick::All, ..ImageSpec::default() },
        ImageSpec { others_pending: Pick::All, ..ImageSpec::default() },
        ImageSpec { evict: Pick::All, ..ImageSpec::default() },
    ] {
        let s = ImageSpec { thread: Some(me), ..s };
        let a = d.capture(&s).file(SIM_POOL_FILE).unwrap().bytes();
        let b = r.domain.capture(&s).file(SIM_POOL_FILE).unwrap().bytes();
        assert!(a == b, "replayed state differs for {s:?}");
    }
    assert_eq!(d.dirty_lines(), r.domain.dirty_lines());
}

#[test]
fn pool_set_grow_remove_punch_on_the_sim() {
    let opts = Options::default().segment_size(64 * 1024);
    let set = PoolSet::create_sim(&opts).unwrap();
    let sim = set.sim().unwrap().clone();
    let id = set.grow().unwrap();
    let g = set.resolve(PPtr::new(id, 4096)).unwrap();
    set.store_u64(g, 77, Release).unwrap();
    set.persist(g, 8).unwrap();
    let img = sim.capture(&ImageSpec::durable());
    assert_eq!(img.files.len(), 2, "the grown segment is in the durable image at once");
    let reopened = PoolSet::open_sim(&img, &opts).unwrap();
    let g2 = reopened.resolve(PPtr::new(id, 4096)).unwrap();
    assert_eq!(reopened.load_u64(g2, Acquire).unwrap(), 77);
    drop(reopened);

    // Punch: both images read zeros.
    set.punch_hole(PPtr::new(id, 4096), 4096).unwrap();
    assert_eq!(set.load_u64(g, Acquire).unwrap(), 0);
    let img = sim.capture(&ImageSpec::durable());
    let reopened = PoolSet::open_sim(&img, &opts).unwrap();
    assert_eq!(
        reopened.load_u64(reopened.resolve(PPtr::new(id, 4096)).unwrap(), Acquire).unwrap(),
        0
    );
    drop(reopened);
    assert!(matches!(set.punch_hole(PPtr::new(id, 100), 4096), Err(Error::Misaligned { .. })));

    // Remove: gone from both images.
    set.remove_segment(id).unwrap();
    assert_eq!(sim.files().len(), 1);
    let img = sim.capture(&ImageSpec::durable());
    assert_eq!(PoolSet::open_sim(&img, &opts).unwrap().segment_count(), 1);
}

#[test]
fn crash_in_the_middle_of_grow_leaves_an_orphan_that_open_drops() {
    let opts = Options::default().segment_size(64 * 1024);
    let sim = Arc::new(SimDomain::new(false));
    let set = PoolSet::create_sim_with(sim.clone(), &opts).unwrap();
    let images = Arc::new(Mutex::new(Vec::new()));
    let sink = images.clone();
    sim.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
        if e.kind == EventKind::Fence {
            // Before this fence takes effect, and after (its pending lines persisted).
            let mut v = sink.lock().unwrap();
            v.push(d.capture(&ImageSpec::durable()));
            v.push(d.capture(&ImageSpec { pending: Pick::All, ..ImageSpec::default() }));
        }
    })));
    set.grow().unwrap();
    sim.set_hook(None);
    let images = images.lock().unwrap();
    let counts: Vec<usize> = images
        .iter()
        .map(|img| {
            PoolSet::open_sim(img, &opts).expect("every crash of grow opens").segment_count()
        })
        .collect();
    // Before the bitmap bit is durable the new segment is an orphan (1 segment); after, it is
    // live (2 segments). Both happen.
    assert!(counts.contains(&1) && counts.contains(&2), "{counts:?}");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
}

#[test]
fn concurrent_stores_and_captures_give_whole_store_states() {
    // Two threads each write 32-byte records [i; 4 words] with one write_bytes call; captures
    // with every dirty line evicted must only ever see whole records (the gate).
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let p = &p;
            s.spawn(move || {
                for i in 1..2000u64 {
                    let v = (t << 32) | i;
                    let rec: Vec<u8> = (0..4).flat_map(|_| v.to_le_bytes()).collect();
                    p.write_bytes(t * 64, &rec).unwrap();
                }
            });
        }
        for _ in 0..200 {
            let img = sim.capture(&spec(Pick::None, Pick::All));
            for t in 0..2u64 {
                let w: Vec<u64> = (0..4).map(|k| word(&img, t * 64 + k * 8)).collect();
                assert!(w.iter().all(|&x| x == w[0]), "torn record {w:?}");
            }
        }
    });
}

/// Regression: the domain kept pointers into a pool's memory after the pool was dropped, so an
/// image captured afterwards (the crash tester's end-of-workload crash point, with a line still
/// dirty because a persist was deliberately dropped) read unmapped memory and the process died
/// with SIGSEGV. Closing now gives the domain private copies of the working images.
#[test]
fn images_captured_after_the_pool_is_dropped_read_a_copy() {
    let p = sim_pool();
    let sim = p.sim().unwrap().clone();
    p.store_u64(0, 7, Relaxed).unwrap(); // dirty, never flushed
    p.store_u64(64, 8, Relaxed).unwrap();
    p.flush(64, 8).unwrap(); // pending, never fenced
    drop(p);
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 0), 0);
    assert_eq!(word(&sim.capture(&spec(Pick::None, Pick::All)), 0), 7);
    assert_eq!(word(&sim.capture(&spec(Pick::All, Pick::None)), 64), 8);

    let opts = Options::default().segment_size(64 * 1024);
    let set = PoolSet::create_sim(&opts).unwrap();
    let sim = set.sim().unwrap().clone();
    let g = set.resolve(PPtr::new(0, 0)).unwrap();
    set.store_u64(g, 9, Relaxed).unwrap();
    let id = set.grow().unwrap();
    let g1 = set.resolve(PPtr::new(id, 0)).unwrap();
    set.store_u64(g1, 10, Relaxed).unwrap();
    drop(set);
    let img = sim.capture(&spec(Pick::None, Pick::All));
    let reopened = PoolSet::open_sim(&img, &opts).unwrap();
    assert_eq!(reopened.load_u64(reopened.resolve(PPtr::new(0, 0)).unwrap(), Acquire).unwrap(), 9);
    assert_eq!(
        reopened.load_u64(reopened.resolve(PPtr::new(id, 0)).unwrap(), Acquire).unwrap(),
        10
    );
}

/// Regression for the reuse of simulated pool sets' reservations (MP5 of `mapping.rs`): a
/// crash tester opens an image, lets recovery write, drops it and opens the next image, which
/// gets the same reservation back. A reservation kept with its old bytes would show the next
/// opener a grown segment that already holds the previous opener's words, where a fresh one
/// reads zeros.
#[test]
fn a_reopened_sim_pool_set_never_sees_an_earlier_openers_bytes() {
    let opts = Options::default().segment_size(64 * 1024);
    let set = PoolSet::create_sim(&opts).unwrap();
    let img = set.sim().unwrap().capture(&ImageSpec::durable());
    for round in 0..4 {
        let s = PoolSet::open_sim(&img, &opts).unwrap();
        let id = s.grow().unwrap();
        for off in [0, 4096, 64 * 1024 - 2 * HEADER_AREA] {
            let g = s.resolve(PPtr::new(id, off)).unwrap();
            assert_eq!(s.load_u64(g, Acquire).unwrap(), 0, "round {round}, offset {off}");
            s.store_u64(g, u64::MAX - round, Relaxed).unwrap();
        }
    }
}

/// Environment variable that selects a child role of a test that re-executes this binary.
const CHILD_ROLE: &str = "FERRITE_SIM_TEST_CHILD";

/// Runs the test `name` of this binary again in a child process with [`CHILD_ROLE`] set to
/// `name`, and returns its exit status (a crash of the child cannot take the parent down).
fn run_child(name: &str) -> std::process::ExitStatus {
    let exe = std::env::current_exe().expect("test binary path");
    std::process::Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, name)
        .status()
        .expect("child test process starts")
}

/// Regression (item 1b of S1): `replay` returned a `Replay` whose public `domain` field
/// pointed into heap blocks held by a private sibling field, so moving the domain out of the
/// `Replay` freed the memory of its working images and the next capture that evicts a dirty
/// line read freed memory. With a 1 MiB file (allocated by `mmap`, so freeing it unmaps it)
/// the child died with SIGSEGV before the fix (checked by reverting it); now the domain owns
/// the memory of its replayed files and the child exits normally.
#[test]
fn replayed_domain_moved_out_of_its_replay_stays_valid() {
    const NAME: &str = "replayed_domain_moved_out_of_its_replay_stays_valid";
    if std::env::var(CHILD_ROLE).as_deref() != Ok(NAME) {
        let status = run_child(NAME);
        assert!(status.success(), "the child capturing from a moved-out replay died: {status}");
        return;
    }
    // Child: record a pool's whole life, with one line left dirty at the end.
    let d = Arc::new(SimDomain::new(false));
    d.record_trace();
    let p = Pool::create_sim_with(d.clone(), 1 << 20, &Options::default()).unwrap();
    p.store_u64(4096, 0xfeed, Relaxed).unwrap(); // dirty, never flushed
    let trace = d.take_trace();
    let domain: SimDomain = {
        let r = replay(&trace, false).unwrap();
        r.domain // the rest of the Replay is dropped here
    };
    let img = domain.capture(&spec(Pick::None, Pick::All));
    assert_eq!(word(&img, 4096), 0xfeed);
}

fn persist_64(p: &Pool) {
    p.persist(64, 8).unwrap();
}

/// Domains created on a thread take that thread's defaults (hook, dropped sites): this is how
/// the crash tester observes a recovery's domain and drops a persist inside recovery. A flush
/// reports how many lines it would change (`fresh`), and closing a pool raises `Close` first.
#[test]
fn new_domains_take_the_threads_defaults_and_report_fresh_lines_and_closes() {
    let p = sim_pool();
    persist_word(&p, 0);
    let img = p.sim().unwrap().capture(&ImageSpec::durable());
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    ferrite_pmem::sim::set_new_domain_hook(Some(Arc::new(move |_: &SimDomain, e: &Event| {
        sink.lock().unwrap().push((e.kind, e.site.key(), e.fresh));
    })));
    // The site key of `persist_64`: learnt from one call on a scratch domain.
    let scratch = sim_pool();
    let seen = Arc::new(Mutex::new(String::new()));
    let s2 = seen.clone();
    scratch.sim().unwrap().set_hook(Some(Arc::new(move |_: &SimDomain, e: &Event| {
        if e.kind == EventKind::Fence {
            *s2.lock().unwrap() = e.site.key();
        }
    })));
    persist_64(&scratch);
    let key = seen.lock().unwrap().clone();
    ferrite_pmem::sim::set_new_domain_drops(std::slice::from_ref(&key));
    let q = Pool::open_sim(&img, &Options::default()).unwrap();
    ferrite_pmem::sim::set_new_domain_hook(None);
    ferrite_pmem::sim::set_new_domain_drops(&[]);
    q.store_u64(64, 5, Relaxed).unwrap();
    persist_64(&q); // dropped: the site is in the thread's defaults
    let sim = q.sim().unwrap().clone();
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 64), 0, "the dropped persist persisted");
    q.store_u64(128, 6, Relaxed).unwrap();
    persist_word(&q, 128); // not dropped
    assert_eq!(word(&sim.capture(&ImageSpec::durable()), 128), 6);
    persist_word(&q, 128); // again: nothing new to write back
    drop(q);
    let ev = events.lock().unwrap();
    let flushes: Vec<usize> =
        ev.iter().filter(|(k, s, _)| *k == EventKind::Flush && *s != key).map(|e| e.2).collect();
    // The open-state persist (already durable), the first persist of 128, the second.
    assert_eq!(flushes[flushes.len() - 2..], [1, 0], "{ev:?}");
    assert_eq!(ev.last().map(|e| e.0), Some(EventKind::Close), "{ev:?}");
}
