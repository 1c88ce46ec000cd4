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
//! # Invariants
//! - PS1: bit `i` of segment 0's live-segment bitmap is set iff segment `i` belongs to the
//!   set; a set bit's file exists, is complete and carries the set's UUID, id, size and layout.
//! - PS2: every byte of the reservation is mapped read-write at all times (segments over it
//!   with `MAP_FIXED`, the rest anonymous), so no access through the space can fault, even one
//!   from a reader still inside a segment that was just removed (it reads zeros).
//! - PS3: virtual ranges are handed out by a bump pointer and never reused while the set is
//!   open; a segment's global offset never changes while it is live.
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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use zerocopy::{FromBytes, IntoBytes};

use crate::emulation::Emulator;
use crate::error::{Error, Result};
use crate::header::{
    HEADER_AREA, LAYOUT_MAX, MIN_POOL_SIZE, SEGMENT_BITMAP_OFF, SEGMENT_MAGIC, SHUTDOWN_STATE_OFF,
    STATE_CLEAN, STATE_OPEN, SegmentHeader, SegmentVerdict, validate_layout,
};
use crate::image::CrashImage;
use crate::options::{DurabilityMode, MAX_SEGMENTS, Options};
use crate::platform;
use crate::pool::{
    ModeDecision, RemoveOnError, check_size, map_deciding_mode, now_ns, resolve_flush,
};
use crate::pptr::{PPtr, SegmentId};
use crate::region::{PersistCfg, Region};
use crate::sim::SimDomain;
use crate::space::Space;

/// The owned reservation (unmapping it also unmaps every segment mapped into it).
struct Reservation {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the reservation is only accessed through `Region` (atomics and asm).
unsafe impl Send for Reservation {}
// SAFETY: as above.
unsafe impl Sync for Reservation {}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: exactly the range returned by `platform::reserve`; the pool set that used it
        // is being dropped.
        unsafe { platform::unmap(self.ptr, self.len) }
    }
}

/// Where a live segment sits: `base` is its global offset + 1 (0 = not live), `len` the length
/// of its data area. Published len-then-base (`Release`), read base-then-len (`Acquire`).
#[derive(Default)]
struct Slot {
    base: AtomicU64,
    len: AtomicU64,
}

struct Inner {
    next_voff: u64,
}

/// Description of one live segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Segment id.
    pub id: SegmentId,
    /// Size of the segment file (header page included).
    pub file_size: u64,
    /// Global offset of the segment's data area in the pool set's space.
    pub data_offset: u64,
    /// Length of the data area.
    pub data_len: u64,
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
    mode_reason: String,
    was_clean: bool,
    slots: Box<[Slot]>,
    by_addr: RwLock<BTreeMap<u64, SegmentId>>,
    inner: Mutex<Inner>,
    _reservation: Reservation,
    _lock: Option<File>,
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

fn seg_name(id: SegmentId) -> String {
    format!("seg-{id:06}.pm")
}

fn seg_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(seg_name(id))
}

fn sim_decision() -> ModeDecision {
    ModeDecision {
        mode: DurabilityMode::Simulated,
        reason: "simulated persistence domain (crash testing)".into(),
    }
}

fn parse_seg_name(name: &str) -> Option<SegmentId> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".pm")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn read_seg_header(file: &File, path: &Path) -> Result<Option<SegmentHeader>> {
    let mut buf = [0u8; size_of::<SegmentHeader>()];
    match file.read_exact_at(&mut buf, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Error::io("read", path, e)),
    }
    Ok(SegmentHeader::read_from_bytes(&buf).ok())
}

fn lock_or_poisoned<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What validation found in a pool set's files.
struct Judged {
    uuid: [u8; 16],
    layout: [u8; LAYOUT_MAX],
    was_clean: bool,
    /// Live segments: id → file size.
    live: BTreeMap<SegmentId, u64>,
    /// Files of this set (or incomplete ones) not in the bitmap: names to delete.
    orphans: Vec<String>,
}

/// A segment file as found (on disk or in a crash image): id, name, size, and its first bytes
/// (the whole header page for segment 0, the header for the others; `None` if shorter).
struct Found {
    id: SegmentId,
    name: String,
    size: u64,
    head: Option<Vec<u8>>,
}

/// Validates a pool set's files without changing anything (PS1): segment 0 defines the uuid,
/// the layout, the shutdown state and the live set; every live segment must be present and
/// valid; unlisted files of this set are orphans; foreign files are refused.
fn judge(dir: &Path, seg0: &Found, others: &[Found], layout: &str) -> Result<Judged> {
    let path0 = dir.join(&seg0.name);
    if seg0.size < HEADER_AREA {
        return Err(if seg0.size == 0 {
            Error::Incomplete { path: path0 }
        } else {
            Error::TooSmall { path: path0, size: seg0.size, min: MIN_POOL_SIZE }
        });
    }
    let page = seg0
        .head
        .as_deref()
        .filter(|h| h.len() as u64 >= HEADER_AREA)
        .ok_or_else(|| Error::corrupt(&path0, "segment 0 header page unreadable"))?;
    let hdr0 = SegmentHeader::read_from_prefix(page)
        .map(|(h, _)| h)
        .map_err(|_| Error::corrupt(&path0, "unreadable header"))?;
    hdr0.validate(&path0, seg0.size, 0, None, layout)?;
    let uuid = hdr0.pool_uuid;
    let word = |off: u64| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&page[off as usize..off as usize + 8]);
        u64::from_le_bytes(w)
    };
    let was_clean = match word(SHUTDOWN_STATE_OFF) {
        STATE_CLEAN => true,
        STATE_OPEN => false,
        other => return Err(Error::corrupt(&path0, format!("unknown shutdown state {other:#x}"))),
    };
    let mut bitmap = BTreeSet::new();
    for w in 0..MAX_SEGMENTS / 64 {
        let bits = word(SEGMENT_BITMAP_OFF + w * 8);
        for b in 0..64 {
            if bits & (1 << b) != 0 {
                bitmap.insert(w * 64 + b);
            }
        }
    }
    if !bitmap.contains(&0) {
        return Err(Error::corrupt(&path0, "segment 0 is not in its own bitmap"));
    }
    let mut live = BTreeMap::new();
    live.insert(0, seg0.size);
    let mut orphans = Vec::new();
    for f in others {
        let path = dir.join(&f.name);
        let hdr =
            f.head.as_deref().and_then(|h| SegmentHeader::read_from_prefix(h).ok()).map(|(h, _)| h);
        if bitmap.contains(&f.id) {
            let hdr = hdr.ok_or_else(|| Error::corrupt(&path, "segment file truncated"))?;
            hdr.validate(&path, f.size, f.id, Some(uuid), layout)?;
            live.insert(f.id, f.size);
            continue;
        }
        // Not in the bitmap: an orphan of a crashed grow/remove if it is ours or incomplete;
        // a foreign or unreadable file is refused, never deleted.
        match hdr.map(|h| h.classify(&path, Some(uuid))) {
            None | Some(SegmentVerdict::Incomplete) | Some(SegmentVerdict::Ours) => {
                orphans.push(f.name.clone())
            }
            Some(SegmentVerdict::Foreign(found)) => {
                return Err(Error::ForeignSegment { path, expected: uuid, found });
            }
            Some(SegmentVerdict::Bad(e)) => return Err(e),
        }
    }
    if let Some(&id) = bitmap.iter().find(|id| !live.contains_key(id)) {
        return Err(Error::MissingSegment { path: dir.to_path_buf(), id });
    }
    Ok(Judged { uuid, layout: hdr0.layout, was_clean, live, orphans })
}

fn sim_site() -> crate::sim::Site {
    crate::sim::Site { location: std::panic::Location::caller(), rule: None }
}

impl Drop for PoolSet {
    /// On a simulated domain, the segments' working images get private copies before the
    /// reservation is unmapped: the domain may outlive the set and capture images later.
    fn drop(&mut self) {
        if let Some(sim) = &self.space.sim {
            sim.detach_range(self._reservation.ptr.as_ptr() as usize, self._reservation.len);
        }
    }
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
        let base = reservation.ptr;
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
        let base = reservation.ptr;
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
            voff += size;
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
        let reservation = reserve(open_reservation(opts, &j, true)?, dir)?;
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
        reservation: Reservation,
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
        // SAFETY: the reservation is `len` bytes of page-aligned, read-write memory owned by
        // the PoolSet (dropped after `space`), accessed only through Region (PS2).
        let region = unsafe { Region::new(reservation.ptr, reservation.len) };
        let cfg = PersistCfg { mode: decision.mode, flush, eadr: opts.is_eadr() };
        let emu = Emulator::new(opts.latency()).map(Arc::new);
        let slots = (0..MAX_SEGMENTS).map(|_| Slot::default()).collect();
        Ok(PoolSet {
            space: Space::new(region, cfg, emu, sim, dir),
            dir: dir.to_path_buf(),
            uuid,
            layout,
            segment_size: AtomicU64::new(segment_size),
            sync: decision.mode == DurabilityMode::Pmem,
            mode_reason: decision.reason,
            was_clean,
            slots,
            by_addr: RwLock::new(BTreeMap::new()),
            inner: Mutex::new(Inner { next_voff: 0 }),
            _reservation: reservation,
            _lock: lock,
        })
    }

    /// Address of global offset `voff` (which must be inside the reservation).
    fn addr(&self, voff: u64) -> Result<NonNull<u8>> {
        if voff >= self.space.len() {
            return Err(Error::OutOfBounds { off: voff, len: 0, size: self.space.len() });
        }
        NonNull::new(self._reservation.ptr.as_ptr().wrapping_add(voff as usize))
            .ok_or(Error::OutOfBounds { off: voff, len: 0, size: self.space.len() })
    }

    fn inner_lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock_or_poisoned(&self.inner)
    }

    fn map_segment(&self, file: &File, path: &Path, voff: u64, size: u64) -> Result<()> {
        let end = voff.checked_add(size).filter(|&e| e <= self.space.len());
        if end.is_none() {
            return Err(Error::PoolFull {
                path: self.dir.clone(),
                requested: size,
                available: self.space.len().saturating_sub(voff),
            });
        }
        let addr = self.addr(voff)?;
        // SAFETY: `[addr, addr + size)` lies inside our reservation (checked above).
        unsafe { platform::map_fixed(addr, size as usize, file, self.sync) }.map_err(|e| {
            if self.sync {
                Error::ModeUnavailable {
                    path: path.to_path_buf(),
                    mode: DurabilityMode::Pmem,
                    reason: format!("MAP_SYNC refused: {}", platform::errno_name(e)),
                }
            } else {
                Error::io("mmap", path, std::io::Error::from_raw_os_error(e))
            }
        })
    }

    fn publish(&self, id: SegmentId, voff: u64, file_size: u64) {
        let slot = &self.slots[id as usize];
        slot.len.store(file_size - HEADER_AREA, Ordering::Relaxed);
        slot.base.store(voff + 1, Ordering::Release);
        let mut m = self.by_addr.write().unwrap_or_else(|p| p.into_inner());
        m.insert(voff, id);
    }

    fn persist_state(&self, state: u64) -> Result<()> {
        self.space.store_u64(SHUTDOWN_STATE_OFF, state, Ordering::Release)?;
        self.space.persist(SHUTDOWN_STATE_OFF, 8) // ORDER(P-PM-2): shutdown state of the set
    }

    /// Adds a segment of the default segment size; returns its id.
    pub fn grow(&self) -> Result<SegmentId> {
        self.add_segment(self.segment_size.load(Ordering::Relaxed))
    }

    /// Adds a segment of `size` bytes (a multiple of 4 KiB, at least 8 KiB; the data area is
    /// `size - 4096`), following P-PM-8. Concurrent access to other segments continues
    /// unaffected. Errors: [`Error::PoolFull`] when the reservation, the segment table or the
    /// file system is full; the pool set is then unchanged.
    pub fn add_segment(&self, size: u64) -> Result<SegmentId> {
        check_size(&self.dir, size)?;
        let mut inner = self.inner_lock();
        let voff = inner.next_voff;
        if voff.checked_add(size).is_none_or(|e| e > self.space.len()) {
            return Err(Error::PoolFull {
                path: self.dir.clone(),
                requested: size,
                available: self.space.len().saturating_sub(voff),
            });
        }
        let id = self.free_id()?;
        let name = seg_name(id);
        let path = seg_path(&self.dir, id);
        let mut guard = None;
        match &self.space.sim {
            Some(sim) => {
                let _ = sim.file_remove(&name, sim_site()); // an orphan, if any
                sim.file_create(&name, size, Some(self.space.region.sub(voff, size)?), sim_site())?;
            }
            None => {
                if path.exists() {
                    // Not in the bitmap and we hold the set's lock: an orphan. Remove it.
                    std::fs::remove_file(&path)
                        .map_err(|e| Error::io("remove orphan", &path, e))?;
                }
                let (file, g) = create_segment_file(&path, size, &self.dir)?;
                self.map_segment(&file, &path, voff, size)?;
                guard = Some(g);
            }
        }
        let undo_on_error = |e: Error| {
            if let Some(sim) = &self.space.sim {
                let _ = sim.file_remove(&name, sim_site());
            }
            if let Ok(addr) = self.addr(voff) {
                // SAFETY: [voff, voff + size) is inside our reservation (mapped above) and not
                // yet published to anyone.
                let _ = unsafe { platform::map_anon_fixed(addr, size as usize) };
            }
            e
        };
        let hdr = SegmentHeader::new(self.uuid, id, size, self.layout, now_ns());
        let r = &self.space;
        let write = || -> Result<()> {
            r.write_bytes(voff, hdr.as_bytes())?;
            r.persist_rule("P-PM-1", voff, size_of::<SegmentHeader>() as u64)?; // ORDER(P-PM-1): header before magic
            r.store_u64(voff, SEGMENT_MAGIC, Ordering::Release)?;
            r.persist_rule("P-PM-1", voff, 8)?; // ORDER(P-PM-1): the magic completes the segment
            self.sync_dir()?;
            let word = SEGMENT_BITMAP_OFF + id / 64 * 8;
            r.fetch_or_u64(word, 1 << (id % 64), Ordering::AcqRel)?;
            r.persist_rule("P-PM-8", word, 8) // ORDER(P-PM-8): the bitmap bit adds the complete segment
        };
        write().map_err(undo_on_error)?;
        if let Some(g) = guard {
            g.disarm();
        }
        self.publish(id, voff, size);
        inner.next_voff = voff + size;
        Ok(id)
    }

    fn free_id(&self) -> Result<SegmentId> {
        for w in 0..MAX_SEGMENTS / 64 {
            let bits = self.space.load_u64(SEGMENT_BITMAP_OFF + w * 8, Ordering::Acquire)?;
            if bits != u64::MAX {
                return Ok(w * 64 + u64::from(bits.trailing_ones()));
            }
        }
        Err(Error::PoolFull {
            path: self.dir.clone(),
            requested: 1,
            available: 0, // no free segment id
        })
    }

    /// Removes segment `id` (not 0) following P-PM-9: its bitmap bit is cleared and
    /// persisted, then its range is replaced by anonymous memory and its file unlinked.
    ///
    /// The caller promises that no live data remains in the segment (the allocator removes
    /// only empty segments). A reader still inside reads zeros, never faults (PS2).
    pub fn remove_segment(&self, id: SegmentId) -> Result<()> {
        if id == 0 {
            return Err(Error::InvalidArgument("segment 0 cannot be removed".into()));
        }
        let _inner = self.inner_lock();
        let slot = self.slots.get(id as usize).ok_or(Error::BadPointer {
            segment: id,
            offset: 0,
            reason: "no such segment",
        })?;
        let base = slot.base.load(Ordering::Acquire);
        if base == 0 {
            return Err(Error::BadPointer { segment: id, offset: 0, reason: "no such segment" });
        }
        let voff = base - 1;
        let size = slot.len.load(Ordering::Relaxed) + HEADER_AREA;
        let word = SEGMENT_BITMAP_OFF + id / 64 * 8;
        self.space.fetch_and_u64(word, !(1 << (id % 64)), Ordering::AcqRel)?;
        self.space.persist_rule("P-PM-9", word, 8)?; // ORDER(P-PM-9): leave the set before the file goes
        slot.base.store(0, Ordering::Release);
        {
            let mut m = self.by_addr.write().unwrap_or_else(|p| p.into_inner());
            m.remove(&voff);
        }
        let addr = self.addr(voff)?;
        // SAFETY: [voff, voff + size) is the segment's range inside our reservation; replacing it keeps PS2 (read-write, never PROT_NONE).
        unsafe { platform::map_anon_fixed(addr, size as usize) }
            .map_err(|e| Error::io("mmap", &self.dir, e))?;
        match &self.space.sim {
            Some(sim) => sim.file_remove(&seg_name(id), sim_site())?,
            None => {
                let path = seg_path(&self.dir, id);
                std::fs::remove_file(&path).map_err(|e| Error::io("unlink", &path, e))?;
            }
        }
        self.sync_dir()
    }

    /// Punches a hole of `len` bytes at `p` (both 4 KiB-aligned, inside one segment's data
    /// area): the range reads as zeros afterwards and its file space is released. Durable on
    /// return (a file operation). PAllocator's defragmentation uses it on free big blocks.
    pub fn punch_hole(&self, p: PPtr, len: u64) -> Result<()> {
        let global = self.resolve_range(p, len)?;
        if !p.offset.is_multiple_of(HEADER_AREA) || !len.is_multiple_of(HEADER_AREA) {
            return Err(Error::Misaligned { off: p.offset, align: HEADER_AREA });
        }
        if len == 0 {
            return Ok(());
        }
        let _inner = self.inner_lock();
        let file_off = HEADER_AREA + p.offset;
        match &self.space.sim {
            Some(sim) => sim.file_punch(&seg_name(p.segment), file_off, len, sim_site()),
            None => {
                let path = seg_path(&self.dir, p.segment);
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| Error::io("open", &path, e))?;
                platform::punch_hole(&f, file_off, len)
                    .map_err(|e| Error::io("punch", &path, e))?;
                // The mapping sees the hole; zero through it too for modes where the kernel
                // might keep stale cached pages (it does not on tmpfs or ext4; cheap insurance).
                debug_assert!(self.space.region.addr_of(global, len).is_ok());
                Ok(())
            }
        }
    }

    /// Resolves a persistent pointer to a global offset in [`PoolSet::space`]-relative terms
    /// (what `load_u64` & co. take). Null, unknown segments and offsets outside the segment's
    /// data area are [`Error::BadPointer`].
    #[inline]
    pub fn resolve(&self, p: PPtr) -> Result<u64> {
        self.resolve_range(p, 0)
    }

    /// Like [`PoolSet::resolve`], also checking that `len` bytes from the pointer lie inside
    /// the segment's data area.
    #[inline]
    pub fn resolve_range(&self, p: PPtr, len: u64) -> Result<u64> {
        let bad = |reason| Error::BadPointer { segment: p.segment, offset: p.offset, reason };
        if p.is_null() {
            return Err(bad("null pointer"));
        }
        let slot = self.slots.get(p.segment as usize).ok_or_else(|| bad("no such segment"))?;
        let base = slot.base.load(Ordering::Acquire);
        if base == 0 {
            return Err(bad("no such segment"));
        }
        let seg_len = slot.len.load(Ordering::Relaxed);
        match p.offset.checked_add(len) {
            Some(end) if end <= seg_len && (p.offset < seg_len || len == 0) => {
                Ok(base - 1 + HEADER_AREA + p.offset)
            }
            _ => Err(bad("offset outside the segment's data area")),
        }
    }

    /// The persistent pointer of a global offset (the inverse of [`PoolSet::resolve`]).
    pub fn to_pptr(&self, global: u64) -> Result<PPtr> {
        let m = self.by_addr.read().unwrap_or_else(|p| p.into_inner());
        let bad = Error::BadPointer {
            segment: u64::MAX,
            offset: global,
            reason: "address is not inside any segment's data area",
        };
        let (&voff, &id) = m.range(..=global).next_back().ok_or(bad)?;
        let len = self.slots[id as usize].len.load(Ordering::Relaxed);
        let data = voff + HEADER_AREA;
        if global < data || global >= data + len {
            return Err(Error::BadPointer {
                segment: u64::MAX,
                offset: global,
                reason: "address is not inside any segment's data area",
            });
        }
        Ok(PPtr::new(id, global - data))
    }

    /// The live segments, by id.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(id, s)| {
                let base = s.base.load(Ordering::Acquire);
                (base != 0).then(|| {
                    let len = s.len.load(Ordering::Relaxed);
                    SegmentInfo {
                        id: id as u64,
                        file_size: len + HEADER_AREA,
                        data_offset: base - 1 + HEADER_AREA,
                        data_len: len,
                    }
                })
            })
            .collect()
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

    /// Number of live segments.
    pub fn segment_count(&self) -> usize {
        self.by_addr.read().unwrap_or_else(|p| p.into_inner()).len()
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
}

impl std::ops::Deref for PoolSet {
    type Target = Space;
    /// The whole reservation, addressed by global offsets (see [`PoolSet::resolve`]).
    fn deref(&self) -> &Space {
        &self.space
    }
}

/// The reservation of a new set; sim sets default to at most 1 GiB.
fn reservation_len(opts: &Options, seg_size: u64, sim: bool) -> Result<u64> {
    let page = platform::page_size() as u64;
    let want = match (sim, opts.max_pool_size_explicit()) {
        (_, Some(n)) => n,
        (true, None) => opts.max_pool_size_bytes().min(1 << 30),
        (false, None) => opts.max_pool_size_bytes(),
    };
    let len = want.div_ceil(page) * page;
    if len < seg_size {
        return Err(Error::InvalidArgument(format!(
            "max pool size {len} is smaller than the segment size {seg_size}"
        )));
    }
    Ok(len)
}

/// The reservation of an existing set: the configured one, but at least the live segments
/// plus one more default segment.
fn open_reservation(opts: &Options, j: &Judged, sim: bool) -> Result<u64> {
    let total: u64 = j.live.values().sum();
    let need = total
        .checked_add(opts.segment_size_bytes())
        .ok_or_else(|| Error::InvalidArgument("pool set too large".into()))?;
    let page = platform::page_size() as u64;
    Ok(reservation_len(opts, 0, sim)?.max(need.div_ceil(page) * page))
}

fn reserve(len: u64, dir: &Path) -> Result<Reservation> {
    let ulen = usize::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("reservation of {len} bytes too large")))?;
    let ptr = platform::reserve(ulen).map_err(|e| Error::io("reserve address space", dir, e))?;
    Ok(Reservation { ptr, len: ulen })
}

/// A half-created segment file, removed on drop unless disarmed.
struct SegmentGuard<'a>(RemoveOnError<'a>);
impl SegmentGuard<'_> {
    fn disarm(mut self) {
        self.0.0 = None;
    }
}

/// Creates `path` exclusively, locks nothing (the set's lock is on segment 0), allocates
/// `size` bytes of space.
fn create_segment_file<'a>(
    path: &'a Path,
    size: u64,
    dir: &Path,
) -> Result<(File, SegmentGuard<'a>)> {
    let space = platform::fs_space(dir).map_err(|e| Error::io("statvfs", dir, e))?;
    if size > space.available {
        return Err(Error::PoolFull {
            path: path.to_path_buf(),
            requested: size,
            available: space.available,
        });
    }
    let file = match OpenOptions::new().read(true).write(true).create_new(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(Error::AlreadyExists { path: path.to_path_buf() });
        }
        Err(e) => return Err(Error::io("create", path, e)),
    };
    let guard = SegmentGuard(RemoveOnError(Some(path)));
    if path.file_name().is_some_and(|n| n == "seg-000000.pm")
        && !platform::try_lock_exclusive(&file).map_err(|e| Error::io("flock", path, e))?
    {
        return Err(Error::Locked { path: path.to_path_buf() });
    }
    platform::allocate_space(&file, size).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT) => Error::PoolFull {
            path: path.to_path_buf(),
            requested: size,
            available: space.available,
        },
        _ => Error::io("fallocate", path, e),
    })?;
    Ok((file, guard))
}
