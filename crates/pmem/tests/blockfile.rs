//! Block files: the real backend (reads past the end, locking, sync, length, removal,
//! counters) and the crash model of simulated ones (unsynced writes lost or kept per sector,
//! torn writes, intermediate versions, length changes, sync, hooks, images saved and reopened,
//! traces replayed, dropped syncs), plus a seeded random check of every image against a model
//! of the versions each sector had.

use std::sync::{Arc, Mutex};

use ferrite_pmem::internals::testing::{TestDir, test_seed};
use ferrite_pmem::sim::{EventKind, SECTOR, replay};
use ferrite_pmem::{
    BlockFile, Counters, CrashImage, Error, ImageSpec, Pick, SimDomain, SplitMix64,
};

const S: usize = SECTOR as usize;

fn blocks(p: Pick) -> ImageSpec {
    ImageSpec { blocks: p, ..ImageSpec::default() }
}

fn sim() -> Arc<SimDomain> {
    Arc::new(SimDomain::new(false))
}

/// The bytes of block file `name` in `img`.
fn bytes(img: &CrashImage, name: &str) -> Vec<u8> {
    img.block(name).expect("block file in image").bytes()
}

#[test]
fn real_file_reads_writes_syncs_and_locks() {
    let dir = TestDir::new("blockfile-real");
    let path = dir.join("wal");
    let f = BlockFile::create(&path).unwrap();
    assert!(matches!(BlockFile::create(&path), Err(Error::AlreadyExists { .. })));
    assert!(matches!(BlockFile::open(&path), Err(Error::Locked { .. })));
    let before = Counters::snapshot();
    f.write_at(100, b"hello").unwrap();
    f.sync().unwrap();
    let d = Counters::snapshot() - before;
    assert_eq!((d.file_bytes_written, d.syncs), (5, 1));
    assert_eq!(f.len().unwrap(), 105);
    let mut buf = [0xffu8; 10];
    // A read running past the end: the file's bytes, then zeros, and the count says so.
    assert_eq!(f.read_at(100, &mut buf).unwrap(), 5);
    assert_eq!(&buf, b"hello\0\0\0\0\0");
    assert_eq!(f.read_at(1000, &mut buf).unwrap(), 0);
    assert_eq!(buf, [0; 10]);
    // An empty write does not extend the file.
    f.write_at(4096, &[]).unwrap();
    assert_eq!(f.len().unwrap(), 105);
    f.set_len(102).unwrap();
    assert_eq!(f.len().unwrap(), 102);
    assert!(!f.is_empty().unwrap());
    drop(f);
    let g = BlockFile::open(&path).unwrap();
    assert_eq!(g.read_at(100, &mut buf[..2]).unwrap(), 2);
    assert_eq!(&buf[..2], b"he");
    assert!(g.sim().is_none());
    drop(g);
    BlockFile::remove(&path).unwrap();
    assert!(matches!(BlockFile::open(&path), Err(Error::NotFound { .. })));
    assert!(matches!(BlockFile::remove(&path), Err(Error::NotFound { .. })));
}

#[test]
fn sim_handles_lock_and_removal_is_seen() {
    let d = sim();
    let f = BlockFile::create_sim(&d, "log").unwrap();
    assert!(matches!(BlockFile::create_sim(&d, "log"), Err(Error::AlreadyExists { .. })));
    assert!(matches!(BlockFile::open_sim(&d, "log"), Err(Error::Locked { .. })));
    assert!(matches!(BlockFile::open_sim(&d, "nope"), Err(Error::NotFound { .. })));
    let before = Counters::snapshot();
    f.write_at(0, &[1; 10]).unwrap();
    f.write_at(4096, &[]).unwrap(); // as on a real file: no extension
    f.sync().unwrap();
    let c = Counters::snapshot() - before;
    assert_eq!((c.file_bytes_written, c.syncs), (10, 1));
    assert_eq!(d.stats().syncs, 1);
    drop(f);
    let f = BlockFile::open_sim(&d, "log").unwrap();
    let mut b = [0u8; 12];
    assert_eq!(f.read_at(0, &mut b).unwrap(), 10);
    assert_eq!(&b[..], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
    BlockFile::remove_sim(&d, "log").unwrap();
    assert!(matches!(f.write_at(0, b"x"), Err(Error::NotFound { .. })));
    // A new file of the same name is not reached through the old handle.
    let g = BlockFile::create_sim(&d, "log").unwrap();
    assert!(matches!(f.len(), Err(Error::NotFound { .. })));
    assert_eq!(g.len().unwrap(), 0);
    assert_eq!(d.block_files(), vec![("log".to_owned(), 0)]);
}

#[test]
fn an_unsynced_write_is_lost_or_kept_and_a_sync_makes_it_durable() {
    let d = sim();
    let f = BlockFile::create_sim(&d, "f").unwrap();
    f.write_at(0, &[7; S]).unwrap();
    f.sync().unwrap();
    f.write_at(0, &[8; S]).unwrap();
    assert_eq!(d.unsynced_blocks().len(), 1);
    assert_eq!(bytes(&d.capture(&ImageSpec::durable()), "f"), vec![7; S]);
    assert_eq!(bytes(&d.capture(&blocks(Pick::All)), "f"), vec![8; S]);
    f.sync().unwrap();
    assert!(d.unsynced_blocks().is_empty());
    assert_eq!(bytes(&d.capture(&ImageSpec::durable()), "f"), vec![8; S]);
    assert_eq!(d.durable_block("f").unwrap(), vec![8; S]);
}

#[test]
fn a_write_over_two_sectors_tears_between_them_in_all_four_ways() {
    let d = sim();
    let f = BlockFile::create_sim(&d, "f").unwrap();
    f.write_at(0, &[1; 2 * S]).unwrap();
    f.sync().unwrap();
    f.write_at(0, &[2; 2 * S]).unwrap();
    let u = d.unsynced_blocks();
    assert_eq!(u.len(), 2, "{u:?}");
    let mut seen = std::collections::BTreeSet::new();
    for m in 0..4u64 {
        let b = bytes(&d.capture(&blocks(Pick::Mask(m))), "f");
        assert_eq!(b.len(), 2 * S);
        // Each sector is whole: old or new, never a mix (B1).
        let halves = (b[0], b[S]);
        assert!(b[..S].iter().all(|&x| x == halves.0) && b[S..].iter().all(|&x| x == halves.1));
        seen.insert(halves);
    }
    let want: std::collections::BTreeSet<_> = [(1, 1), (1, 2), (2, 1), (2, 2)].into();
    assert_eq!(seen, want);
}

#[test]
fn a_sector_written_several_times_may_keep_an_intermediate_version() {
    let d = sim();
    let f = BlockFile::create_sim(&d, "f").unwrap();
    f.write_at(0, &[0; S]).unwrap();
    f.sync().unwrap();
    for v in 1..=3u8 {
        f.write_at(0, &[v; 8]).unwrap();
    }
    // The same content twice in a row is one version.
    f.write_at(0, &[3; 8]).unwrap();
    assert_eq!(d.unsynced_blocks().len(), 3);
    let first = |p| bytes(&d.capture(&blocks(p)), "f")[0];
    assert_eq!(first(Pick::None), 0);
    assert_eq!(first(Pick::Indices(vec![0])), 1);
    assert_eq!(first(Pick::Indices(vec![1])), 2);
    // The newest picked version wins.
    assert_eq!(first(Pick::Indices(vec![0, 2])), 3);
    assert_eq!(first(Pick::All), 3);
}

#[test]
fn an_unsynced_length_change_may_or_may_not_happen() {
    let d = sim();
    let f = BlockFile::create_sim(&d, "f").unwrap();
    // An extending write: its length is a candidate of its own, before the sectors.
    f.write_at(0, &[5; 100]).unwrap();
    let u = d.unsynced_blocks();
    assert_eq!((u.len(), u[0].sector, u[1].sector), (2, None, Some(0)), "{u:?}");
    assert_eq!(bytes(&d.capture(&ImageSpec::durable()), "f").len(), 0);
    assert_eq!(bytes(&d.capture(&blocks(Pick::Mask(0b01))), "f"), vec![0; 100]);
    assert_eq!(bytes(&d.capture(&blocks(Pick::Mask(0b11))), "f"), vec![5; 100]);
    // The sector without the length: the data lies past the durable end, so it is cut.
    assert_eq!(bytes(&d.capture(&blocks(Pick::Mask(0b10))), "f").len(), 0);
    f.sync().unwrap();
    // Truncation, then an extension back over the cut bytes: if the length change persists,
    // the cut bytes read as zeros, not as the old content.
    f.set_len(10).unwrap();
    f.set_len(100).unwrap();
    let u = d.unsynced_blocks();
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(bytes(&d.capture(&ImageSpec::durable()), "f"), vec![5; 100]);
    let mut want = vec![5; 10];
    want.resize(100, 0);
    assert_eq!(bytes(&d.capture(&blocks(Pick::All)), "f"), want);
    // A truncation drops the versions of the sectors it removes.
    f.set_len(2 * SECTOR).unwrap();
    f.sync().unwrap();
    f.write_at(SECTOR, &[9; S]).unwrap();
    f.set_len(SECTOR + 4).unwrap();
    let u = d.unsynced_blocks();
    assert_eq!(u.len(), 2, "{u:?}");
    let b = bytes(&d.capture(&blocks(Pick::All)), "f");
    assert_eq!(b.len(), S + 4);
    assert_eq!(&b[S..], &[9; 4]);
    assert_eq!(bytes(&d.capture(&ImageSpec::durable()), "f").len(), 2 * S);
}

#[test]
fn a_sync_is_a_crash_point_seen_before_it_takes_effect_and_orders_only_its_file() {
    let d = sim();
    // (kind, file, pending, fresh, the file's durable content when the hook ran)
    type Seen = Vec<(EventKind, String, usize, usize, Vec<u8>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let s2 = seen.clone();
    d.set_hook(Some(Arc::new(move |d: &SimDomain, e| {
        let durable = d.durable_block(&e.file).unwrap_or_default();
        s2.lock().unwrap().push((e.kind, e.file.clone(), e.pending, e.fresh, durable));
    })));
    let a = BlockFile::create_sim(&d, "a").unwrap();
    let b = BlockFile::create_sim(&d, "b").unwrap();
    a.write_at(0, &[1; 4]).unwrap();
    b.write_at(0, &[2; 4]).unwrap();
    a.sync_rule("P-TEST-1").unwrap();
    d.set_hook(None);
    let ev = seen.lock().unwrap().clone();
    let kinds: Vec<_> = ev.iter().map(|e| e.0).collect();
    use EventKind::*;
    assert_eq!(kinds, vec![BlockCreate, BlockCreate, BlockWrite, BlockWrite, BlockSync]);
    let sync = &ev[4];
    // Length and sector 0 of `a` pending, not yet durable when the hook runs.
    assert_eq!((sync.1.as_str(), sync.2, sync.3, sync.4.len()), ("a", 2, 2, 0));
    assert_eq!(d.durable_block("a").unwrap(), vec![1; 4]);
    // `b` stays unsynced (B3).
    assert_eq!(d.durable_block("b").unwrap(), Vec::<u8>::new());
    assert_eq!(d.unsynced_blocks().iter().filter(|u| u.file == "b").count(), 2);
}

#[test]
fn a_dropped_sync_makes_nothing_durable() {
    let d = sim();
    let f = BlockFile::create_sim(&d, "f").unwrap();
    let key: Arc<Mutex<String>> = Arc::default();
    let k2 = key.clone();
    d.set_hook(Some(Arc::new(move |_: &SimDomain, e| {
        if e.kind == EventKind::BlockSync {
            *k2.lock().unwrap() = e.site.key();
        }
    })));
    let sync = |f: &BlockFile| f.sync_rule("P-TEST-2").unwrap();
    f.write_at(0, b"x").unwrap();
    sync(&f);
    d.set_hook(None);
    let key = key.lock().unwrap().clone();
    assert!(key.ends_with("#P-TEST-2") && key.contains("blockfile.rs"), "{key}");
    f.write_at(1, b"y").unwrap();
    d.drop_persist(&key);
    sync(&f);
    assert_eq!(d.durable_block("f").unwrap(), b"x");
}

#[test]
fn images_with_block_files_save_load_and_reopen() {
    let dir = TestDir::new("blockfile-image");
    let d = sim();
    let f = BlockFile::create_sim(&d, "journal").unwrap();
    f.write_at(0, b"durable").unwrap();
    f.sync().unwrap();
    f.write_at(0, b"NEWER").unwrap();
    let img = d.capture(&blocks(Pick::All));
    img.save(dir.join("img")).unwrap();
    let back = CrashImage::load(dir.join("img")).unwrap();
    assert_eq!(bytes(&back, "journal"), b"NEWERle");
    assert!(back.files.is_empty());
    let d2 = SimDomain::open_block_image(&back).unwrap();
    let g = BlockFile::open_sim(&d2, "journal").unwrap();
    let mut buf = [0u8; 7];
    assert_eq!(g.read_at(0, &mut buf).unwrap(), 7);
    assert_eq!(&buf, b"NEWERle");
    // The reopened content is durable: nothing is unsynced.
    assert!(d2.unsynced_blocks().is_empty());
    assert!(matches!(d2.add_block_files(&back), Err(Error::AlreadyExists { .. })));
}

#[test]
fn a_trace_of_block_events_replays_to_the_same_images() {
    let d = sim();
    d.record_trace();
    let f = BlockFile::create_sim(&d, "f").unwrap();
    f.write_at(0, &[1; 700]).unwrap();
    f.sync().unwrap();
    f.write_at(300, &[2; 700]).unwrap();
    f.set_len(900).unwrap();
    let g = BlockFile::create_sim(&d, "g").unwrap();
    g.write_at(5, b"abc").unwrap();
    drop(g);
    BlockFile::remove_sim(&d, "g").unwrap();
    let t = d.take_trace();
    let r = replay(&t, false).unwrap();
    assert_eq!(r.domain.unsynced_blocks(), d.unsynced_blocks());
    for m in 0..8 {
        let a = d.capture(&blocks(Pick::Mask(m)));
        let b = r.domain.capture(&blocks(Pick::Mask(m)));
        assert_eq!(bytes(&a, "f"), bytes(&b, "f"), "mask {m:#b}");
        assert!(b.block("g").is_none());
    }
}

/// Random writes, length changes and syncs on two files, checked against a model that keeps,
/// per sector, every content it had since the file's last sync: every image (random picks)
/// must have the durable or the newest length and give each sector its durable content or one
/// of those contents (cut by a truncation: a prefix followed by zeros).
#[test]
fn random_images_hold_only_durable_or_written_sector_contents() {
    let seed = test_seed();
    let mut rng = SplitMix64::new(seed);
    let d = sim();
    let names = ["x", "y"];
    let files: Vec<BlockFile> =
        names.iter().map(|n| BlockFile::create_sim(&d, n).unwrap()).collect();
    // Model per file: durable bytes, working bytes, and every sector content since the sync.
    type Model = (Vec<u8>, Vec<u8>, std::collections::BTreeMap<u64, Vec<Vec<u8>>>);
    let mut model: Vec<Model> = vec![Default::default(); 2];
    let sector = |b: &[u8], s: u64| -> Vec<u8> {
        let mut v = vec![0u8; S];
        let st = (s * SECTOR) as usize;
        if st < b.len() {
            let e = (st + S).min(b.len());
            v[..e - st].copy_from_slice(&b[st..e]);
        }
        v
    };
    for step in 0..400 {
        let fi = (rng.next_u64() % 2) as usize;
        let (f, m) = (&files[fi], &mut model[fi]);
        match rng.next_u64() % 10 {
            0..=5 => {
                let off = rng.next_u64() % (6 * SECTOR);
                let len = 1 + rng.next_u64() % (2 * SECTOR);
                let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                f.write_at(off, &data).unwrap();
                let end = (off + len) as usize;
                if m.1.len() < end {
                    m.1.resize(end, 0);
                }
                m.1[off as usize..end].copy_from_slice(&data);
                for s in off / SECTOR..(off + len).div_ceil(SECTOR) {
                    let c = sector(&m.1, s);
                    m.2.entry(s).or_default().push(c);
                }
            }
            6 => {
                let len = rng.next_u64() % (6 * SECTOR);
                f.set_len(len).unwrap();
                m.1.resize(len as usize, 0);
            }
            _ => {
                f.sync().unwrap();
                m.0 = m.1.clone();
                m.2.clear();
            }
        }
        let img = d.capture(&ImageSpec {
            blocks: Pick::Random(0.5),
            seed: rng.next_u64(),
            ..ImageSpec::default()
        });
        for (i, n) in names.iter().enumerate() {
            let b = bytes(&img, n);
            let m = &model[i];
            assert!(
                b.len() == m.0.len() || b.len() == m.1.len(),
                "seed {seed:#x} step {step}: file {n} length {} not durable {} or newest {}",
                b.len(),
                m.0.len(),
                m.1.len()
            );
            for s in 0..(b.len() as u64).div_ceil(SECTOR) {
                let got = sector(&b, s);
                let st = (s * SECTOR) as usize;
                let keep = (b.len() - st).min(S);
                // The content, or (where a truncation cut the sector since the sync) its
                // prefix up to the cut followed by zeros.
                let ok = |c: &[u8]| {
                    let diff = (0..keep).find(|&i| c[i] != got[i]).unwrap_or(keep);
                    got[diff..keep].iter().all(|&x| x == 0)
                };
                let durable = ok(&sector(&m.0, s));
                let written = m.2.get(&s).is_some_and(|v| v.iter().any(|c| ok(c)));
                assert!(
                    durable || written,
                    "seed {seed:#x} step {step}: file {n} sector {s} holds content never written"
                );
            }
        }
    }
}
