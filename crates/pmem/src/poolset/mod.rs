//! Pool sets: a pool made of segment files in one directory, mapped into one reserved virtual
//! range so that addresses never move (seed 001 §3.3–3.4: PAllocator's multi-file pool of
//! 128 MB segments; spec `../shared/specs/scm-and-pallocator.md` §2.2 and §2.6).
//!
//! ```text
//!  dir/seg-000000.pm   segment 0: header page (header, shutdown state, live-segment bitmap)
//!  dir/seg-000001.pm   segment 1: header page, data area
//!  ...
//!
//!  reservation (anonymous, MAP_NORESERVE, read-write; never PROT_NONE)
//!  +-----------+--------------+-----------+----------------+-------------------------------+
//!  | seg 0     | seg 1        | (removed: | seg 3          |  free (anonymous)             |
//!  | hdr|data  | hdr|data     |  anon)    | hdr|data       |                               |
//!  +-----------+--------------+-----------+----------------+-------------------------------+
//!  0           ^ bump pointer advances; ranges are never reused within one open
//! ```
//!
//! The [`Space`] of a pool set addresses the whole reservation with **global offsets**, which
//! are valid only while the pool set is open: store [`PPtr`]s (segment id, offset in the
//! segment's data area) in persistent memory and [`PoolSet::resolve`] them.
//!
//! The module is split by job: `segment` (segment files), `validate` (judging a set's files
//! at open), `reserve` (the reservation and hole-free mapping), `resolve` (pointer
//! resolution), `grow` (adding and removing segments, punching holes); this file creates,
//! opens and closes sets.
//!
//! # Invariants
//! - PS1: bit `i` of segment 0's live-segment bitmap is set iff segment `i` belongs to the
//!   set; a set bit's file exists, is complete and carries the set's UUID, id, size and layout.
//! - PS2: every byte of the reservation is mapped read-write at all times (segments over it
//!   with `MAP_FIXED`, the rest anonymous), so no access through the space can fault, even one
//!   from a reader still inside a segment that was just removed (it reads zeros).
//! - PS3: virtual ranges are handed out by a bump pointer and never reused while the set is
//!   open; a segment's global offset never changes while it is live. Segment ids removed
//!   during an open are not handed out again until the next open (`grow`), so a stale
//!   pointer can reach neither another segment's range nor another segment's id.
//! - PS4: the reservation (and segment 0's locked file) belong to a shared mapping that every
//!   space of the set holds (`mapping`): a view may outlive the `PoolSet`.
//! - PS5: a failed grow leaves the set unchanged and its range mapped (`reserve`).
//!
//! # Ordering
//! - P-PM-1 per segment: its header is persisted before its magic.
//! - P-PM-8 (grow): the new segment file is complete (header + magic persisted, directory
//!   synced) **before** its bit is set and persisted in the bitmap. A crash in between leaves
//!   an orphan file (not in the bitmap), which the next open deletes.
//! - P-PM-9 (remove): the bit is cleared and persisted **before** the segment is unmapped and
//!   its file unlinked. A crash in between leaves an orphan file, deleted at the next open.
//!
//! # Concurrency
//! `PoolSet: Send + Sync`. Access and [`PoolSet::resolve`] are lock-free and may run
//! concurrently with [`PoolSet::grow`]/[`PoolSet::add_segment`]/[`PoolSet::remove_segment`],
//! which serialize among themselves on an internal mutex. Removing a segment is the caller's
//! promise that no live data remains in it; a concurrent reader still inside reads zeros
//! (PS2), never a fault or another segment's data (PS3).

mod grow;
mod reserve;
mod resolve;
mod segment;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use zerocopy::IntoBytes;

use crate::emulation::Emulator;
use crate::error::{Error, Result};
use crate::header::{
    HEADER_AREA, LAYOUT_MAX, SEGMENT_BITMAP_OFF, SEGMENT_MAGIC, SHUTDOWN_STATE_OFF, STATE_CLEAN,
    STATE_OPEN, SegmentHeader, validate_layout,
};
use crate::image::CrashImage;
use crate::mapping::Mapping;
use crate::mode::DurabilityMode;
use crate::options::{MAX_SEGMENTS, Options};
use crate::platform;
use crate::pool::{ModeDecision, check_size, map_deciding_mode, now_ns, resolve_flush};
use crate::pptr::SegmentId;
use crate::region::PersistCfg;
use crate::sim::SimDomain;
use crate::space::Space;

use reserve::{open_reservation, reservation_len, reserve, reserve_sim};
pub use resolve::SegmentInfo;
use resolve::Slot;
use segment::{create_segment_file, parse_seg_name, read_seg_header, seg_name, seg_path};
use validate::{Found, judge};

/// State changed only under the membership mutex.
struct Inner {
    /// Bump pointer: the global offset of the next segment (PS3).
    next_voff: u64,
    /// Ids removed during this open, not handed out again until reopen (a bitmap of
    /// `MAX_SEGMENTS` bits; see `grow`).
    retired: Box<[u64]>,
}

/// A pool made of segment files (see the module documentation).
pub struct PoolSet {
    space: Space,
    dir: PathBuf,
    uuid: [u8; 16],
    layout: [u8; LAYOUT_MAX],
    /// Size of the segments `grow` adds (settable through a shared handle).
    segment_size: AtomicU64,
    sync: bool,
    /// Populate segments when they are mapped ([`Options::prefault`]).
    prefault: bool,
    mode_reason: String,
    was_clean: bool,
    slots: Box<[Slot]>,
    /// One above the highest segment id ever published (bounds the walks of `segments`).
    slots_used: AtomicU64,
    by_addr: RwLock<BTreeMap<u64, SegmentId>>,
    inner: Mutex<Inner>,
    /// Test hook: the next segment mapping fails as a failing `MAP_FIXED` can (see
    /// `internals::testing::fail_next_segment_map`).
    fail_next_map: AtomicBool,
}

impl fmt::Debug for PoolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolSet")
            .field("dir", &self.dir)
            .field("segments", &self.segment_count())
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

fn sim_decision() -> ModeDecision {
    ModeDecision {
        mode: DurabilityMode::Simulated,
        reason: "simulated persistence domain (crash testing)".into(),
    }
}

fn lock_or_poisoned<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn sim_site() -> crate::sim::Site {
    crate::sim::Site { location: std::panic::Location::caller(), rule: None }
}

impl PoolSet {
    /// Creates a pool set in `dir` (which must not exist, or be an empty directory) with one
    /// segment of `opts.segment_size_bytes()`.
    pub fn create(dir: impl AsRef<Path>, opts: &Options) -> Result<PoolSet> {
        let dir = dir.as_ref();
        let layout = validate_layout(opts.layout_name())?;
        let flush = resolve_flush(opts)?;
        let seg_size = opts.segment_size_bytes();
        check_size(dir, seg_size)?;
        let reserve_len = reservation_len(opts, seg_size, false)?;
        match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(Error::AlreadyExists { path: dir.to_path_buf() });
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(Error::NotFound { path: dir.to_path_buf() });
                }
                Err(e) => return Err(Error::io("mkdir", dir, e)),
            },
            Err(e) => return Err(Error::io("read_dir", dir, e)),
        }
        let path = seg_path(dir, 0);
        let (file, guard) = create_segment_file(&path, seg_size, dir)?;
        let reservation = reserve(reserve_len, dir)?;
        let base = reservation.ptr();
        // SAFETY: `base` starts our reservation of `reserve_len >= seg_size` bytes, which
        // nothing references.
        let map = |sync| unsafe { platform::map_fixed(base, seg_size as usize, &file, sync) };
        let (_, decision) = map_deciding_mode(&path, opts, map)?;
        let mut uuid = [0u8; 16];
        platform::random_bytes(&mut uuid).map_err(|e| Error::io("getrandom", &path, e))?;
        let set = PoolSet::assemble(
            dir,
            reservation,
            Some(file),
            opts,
            flush,
            decision,
            uuid,
            layout,
            seg_size,
            false,
            None,
        )?;
        set.prefault_segment(0, seg_size);
        set.init_segment0(seg_size)?;
        guard.disarm();
        Ok(set)
    }

    /// Creates a pool set on the **simulated persistence domain** (see `sim`): segments are
    /// simulated files, every store, flush, fence and file operation is observable through
    /// [`PoolSet::sim`]. Its reservation defaults to 1 GiB (`Options::max_pool_size` to
    /// change it): keep sim pool sets small.
    pub fn create_sim(opts: &Options) -> Result<PoolSet> {
        PoolSet::create_sim_with(Arc::new(SimDomain::new(opts.is_eadr())), opts)
    }

    /// [`PoolSet::create_sim`] on a given (empty) domain, e.g. one whose hook is already
    /// installed.
    pub fn create_sim_with(sim: Arc<SimDomain>, opts: &Options) -> Result<PoolSet> {
        let dir = Path::new("<sim>");
        if !sim.files().is_empty() {
            return Err(Error::InvalidArgument("the sim domain already holds files".into()));
        }
        let layout = validate_layout(opts.layout_name())?;
        let flush = resolve_flush(opts)?;
        let seg_size = opts.segment_size_bytes();
        check_size(dir, seg_size)?;
        let reservation = reserve(reservation_len(opts, seg_size, true)?, dir)?;
        let set = PoolSet::assemble(
            dir,
            reservation,
            None,
            opts,
            flush,
            sim_decision(),
            [0x5a; 16],
            layout,
            seg_size,
            false,
            Some(sim.clone()),
        )?;
        sim.file_create(
            &seg_name(0),
            seg_size,
            Some(set.space.region.sub(0, seg_size)?),
            sim_site(),
        )?;
        set.prefault_segment(0, seg_size);
        set.init_segment0(seg_size)?;
        Ok(set)
    }

    /// P-PM-1 for segment 0, whose header page also holds the shutdown state and bitmap.
    fn init_segment0(&self, seg_size: u64) -> Result<()> {
        let hdr = SegmentHeader::new(self.uuid, 0, seg_size, self.layout, now_ns());
        let r = &self.space;
        r.write_bytes(0, hdr.as_bytes())?;
        r.store_u64(SHUTDOWN_STATE_OFF, STATE_OPEN, Ordering::Relaxed)?;
        r.store_u64(SEGMENT_BITMAP_OFF, 1, Ordering::Relaxed)?;
        r.persist_rule("P-PM-1", 0, HEADER_AREA)?; // ORDER(P-PM-1): header, state and bitmap before the magic
        r.store_u64(0, SEGMENT_MAGIC, Ordering::Release)?;
        r.persist_rule("P-PM-1", 0, 8)?; // ORDER(P-PM-1): the magic commits segment 0
        self.sync_dir()?;
        self.publish(0, 0, seg_size);
        self.inner_lock().next_voff = seg_size;
        Ok(())
    }

    fn sync_dir(&self) -> Result<()> {
        if self.space.sim.is_some() {
            return Ok(());
        }
        platform::sync_dir(&self.dir).map_err(|e| Error::io("fsync", &self.dir, e))
    }

    /// Opens the pool set in `dir`: validates every segment, rejects foreign and missing ones,
    /// deletes orphans left by a crashed grow or remove (P-PM-8, P-PM-9), maps the live
    /// segments. Nothing is changed when validation fails.
    pub fn open(dir: impl AsRef<Path>, opts: &Options) -> Result<PoolSet> {
        let dir = dir.as_ref();
        let flush = resolve_flush(opts)?;
        let path0 = seg_path(dir, 0);
        let file0 = match OpenOptions::new().read(true).write(true).open(&path0) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotFound { path: path0 });
            }
            Err(e) => return Err(Error::io("open", &path0, e)),
        };
        if !platform::try_lock_exclusive(&file0).map_err(|e| Error::io("flock", &path0, e))? {
            return Err(Error::Locked { path: dir.to_path_buf() });
        }
        let size0 = file0.metadata().map_err(|e| Error::io("stat", &path0, e))?.len();
        let mut page = vec![0u8; HEADER_AREA as usize];
        let head0 = file0.read_exact_at(&mut page, 0).ok().map(|()| page);
        let seg0 = Found { id: 0, name: seg_name(0), size: size0, head: head0 };
        let mut others = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io("read_dir", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("read_dir", dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let Some(id) = parse_seg_name(&name) else { continue };
            if id == 0 {
                continue;
            }
            let path = entry.path();
            let f = File::open(&path).map_err(|e| Error::io("open", &path, e))?;
            let size = f.metadata().map_err(|e| Error::io("stat", &path, e))?.len();
            let head = read_seg_header(&f, &path)?.map(|h| h.as_bytes().to_vec());
            others.push(Found { id, name, size, head });
        }
        let j = judge(dir, &seg0, &others, opts.layout_name())?;

        // Map segment 0 (deciding the mode), then the others in id order.
        let reservation = reserve(open_reservation(opts, &j, false)?, dir)?;
        let base = reservation.ptr();
        // SAFETY: `base` starts our fresh reservation, which is larger than every live segment
        // together (open_reservation).
        let map0 = |sync| unsafe { platform::map_fixed(base, size0 as usize, &file0, sync) };
        let (_, decision) = map_deciding_mode(&path0, opts, map0)?;
        let set = PoolSet::assemble(
            dir,
            reservation,
            Some(file0),
            opts,
            flush,
            decision,
            j.uuid,
            j.layout,
            opts.segment_size_bytes(),
            j.was_clean,
            None,
        )?;
        set.prefault_segment(0, size0);
        set.publish(0, 0, size0);
        let mut voff = size0;
        for (&id, &size) in j.live.iter().skip(1) {
            let path = seg_path(dir, id);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| Error::io("open", &path, e))?;
            set.map_segment(&f, &path, voff, size)?;
            set.publish(id, voff, size);
            voff += size; // no overflow: map_segment checked the range against the reservation
        }
        set.inner_lock().next_voff = voff;
        for name in &j.orphans {
            let o = dir.join(name);
            std::fs::remove_file(&o).map_err(|e| Error::io("remove orphan", &o, e))?;
        }
        if !j.orphans.is_empty() {
            set.sync_dir()?;
        }
        set.persist_state(STATE_OPEN)?;
        Ok(set)
    }

    /// Opens the pool set of a crash image on a new simulated domain whose durable image is
    /// the crash image, with the validation of [`PoolSet::open`] (orphans are dropped).
    pub fn open_sim(image: &CrashImage, opts: &Options) -> Result<PoolSet> {
        let dir = Path::new("<sim>");
        let flush = resolve_flush(opts)?;
        let name0 = seg_name(0);
        let f0 = image.file(&name0).ok_or_else(|| Error::NotFound { path: dir.join(&name0) })?;
        let seg0 = Found {
            id: 0,
            name: name0.clone(),
            size: f0.len,
            head: Some(f0.prefix(HEADER_AREA as usize)),
        };
        let others: Vec<Found> = image
            .files
            .iter()
            .filter_map(|f| {
                let id = parse_seg_name(&f.name).filter(|&id| id != 0)?;
                let head = (f.len >= size_of::<SegmentHeader>() as u64)
                    .then(|| f.prefix(size_of::<SegmentHeader>()));
                Some(Found { id, name: f.name.clone(), size: f.len, head })
            })
            .collect();
        let j = judge(dir, &seg0, &others, opts.layout_name())?;
        let reservation = reserve_sim(open_reservation(opts, &j, true)?, dir)?;
        let sim = Arc::new(SimDomain::new(opts.is_eadr()));
        let set = PoolSet::assemble(
            dir,
            reservation,
            None,
            opts,
            flush,
            sim_decision(),
            j.uuid,
            j.layout,
            opts.segment_size_bytes(),
            j.was_clean,
            Some(sim.clone()),
        )?;
        let mut voff = 0;
        for (&id, &size) in &j.live {
            let name = seg_name(id);
            let file =
                image.file(&name).ok_or_else(|| Error::NotFound { path: dir.join(&name) })?;
            let region = set.space.region.sub(voff, size)?;
            set.space.mapping().note_used(usize::try_from(voff + size).unwrap_or(usize::MAX));
            let pages = file.copy_into(&region)?;
            sim.file_insert(&name, size, pages, Some(region));
            set.publish(id, voff, size);
            voff += size;
        }
        set.inner_lock().next_voff = voff;
        set.persist_state(STATE_OPEN)?;
        Ok(set)
    }

    /// Writes a crash image's segment files into `dir` (which must not exist, or be empty)
    /// and opens it as a mapped pool set with [`PoolSet::open`].
    pub fn open_image_mapped(
        image: &CrashImage,
        dir: impl AsRef<Path>,
        opts: &Options,
    ) -> Result<PoolSet> {
        let dir = dir.as_ref();
        if std::fs::read_dir(dir).is_ok_and(|mut e| e.next().is_some()) {
            return Err(Error::AlreadyExists { path: dir.to_path_buf() });
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
        for f in &image.files {
            if parse_seg_name(&f.name).is_none() {
                continue;
            }
            let path = dir.join(&f.name);
            std::fs::write(&path, f.bytes()).map_err(|e| Error::io("write", &path, e))?;
        }
        PoolSet::open(dir, opts)
    }

    /// The simulated persistence domain, for sets made by [`PoolSet::create_sim`] or
    /// [`PoolSet::open_sim`].
    pub fn sim(&self) -> Option<&Arc<SimDomain>> {
        self.space.sim()
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        dir: &Path,
        mut reservation: Mapping,
        lock: Option<File>,
        opts: &Options,
        flush: crate::FlushKind,
        decision: ModeDecision,
        uuid: [u8; 16],
        layout: [u8; LAYOUT_MAX],
        segment_size: u64,
        was_clean: bool,
        sim: Option<Arc<SimDomain>>,
    ) -> Result<PoolSet> {
        let cfg = PersistCfg { mode: decision.mode, flush, eadr: opts.is_eadr() };
        let emu = Emulator::new(opts.latency()).map(Arc::new);
        let prefault = opts.is_prefault() && sim.is_none();
        let slots =
            <[Slot] as zerocopy::FromZeros>::new_box_zeroed_with_elems(MAX_SEGMENTS as usize)
                .map_err(|_| {
                    Error::InvalidArgument("no memory for the segment table".to_string())
                })?;
        if let Some(lock) = lock {
            reservation.hold_lock(lock);
        }
        if let Some(sim) = &sim {
            reservation.detach_on_drop(Arc::clone(sim));
        }
        let len = reservation.len() as u64;
        let keep = Arc::new(reservation);
        Ok(PoolSet {
            space: Space::new(keep, 0, len, cfg, emu, sim, dir)?,
            dir: dir.to_path_buf(),
            uuid,
            layout,
            segment_size: AtomicU64::new(segment_size),
            sync: decision.mode == DurabilityMode::Pmem,
            prefault,
            mode_reason: decision.reason,
            was_clean,
            slots,
            slots_used: AtomicU64::new(0),
            by_addr: RwLock::new(BTreeMap::new()),
            inner: Mutex::new(Inner {
                next_voff: 0,
                retired: vec![0; (MAX_SEGMENTS / 64) as usize].into_boxed_slice(),
            }),
            fail_next_map: AtomicBool::new(false),
        })
    }

    fn inner_lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock_or_poisoned(&self.inner)
    }

    /// Test hook (`internals::testing::fail_next_segment_map`): the next segment mapping of
    /// this set fails after removing the memory under its range, as a failing `MAP_FIXED` may.
    pub(crate) fn inject_map_failure(&self) {
        self.fail_next_map.store(true, Ordering::Relaxed);
    }

    fn persist_state(&self, state: u64) -> Result<()> {
        self.space.store_u64(SHUTDOWN_STATE_OFF, state, Ordering::Release)?;
        self.space.persist(SHUTDOWN_STATE_OFF, 8) // ORDER(P-PM-2): shutdown state of the set
    }

    /// Size of the segments [`PoolSet::grow`] adds.
    pub fn segment_size(&self) -> u64 {
        self.segment_size.load(Ordering::Relaxed)
    }

    /// Sets the size of the segments [`PoolSet::grow`] adds from now on (validated there, as
    /// by [`PoolSet::add_segment`]). The pool set does not persist it: a layer that needs
    /// uniform segments records its own size and restores it at open (the allocator does).
    pub fn set_segment_size(&self, bytes: u64) {
        self.segment_size.store(bytes, Ordering::Relaxed);
    }

    /// The pool-set directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pool set's identity (in every segment header).
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// Why the set got its durability mode.
    pub fn mode_reason(&self) -> &str {
        &self.mode_reason
    }

    /// Whether the previous opener closed the set with [`PoolSet::close`].
    pub fn was_clean_shutdown(&self) -> bool {
        self.was_clean
    }

    /// Closes the set cleanly (persists the `CLEAN` shutdown state, P-PM-2).
    pub fn close(self) -> Result<()> {
        self.persist_state(STATE_CLEAN)
    }

    /// Reads the first `out.len()` bytes of segment 0's data area of the set at `dir` from
    /// the file, without opening the set: no lock, no mapping, nothing written (P3). For
    /// telling whose data a set holds when an open was refused; the bytes are not validated.
    /// Errors: `Io` when segment 0 is missing or shorter.
    pub fn peek_data(dir: &Path, out: &mut [u8]) -> Result<()> {
        let path = segment::seg_path(dir, 0);
        let f = File::open(&path).map_err(|e| Error::io("open", &path, e))?;
        f.read_exact_at(out, HEADER_AREA).map_err(|e| Error::io("read", &path, e))
    }
}

impl std::ops::Deref for PoolSet {
    type Target = Space;
    /// The whole reservation, addressed by global offsets (see [`PoolSet::resolve`]).
    fn deref(&self) -> &Space {
        &self.space
    }
}
