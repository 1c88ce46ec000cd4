//! Single-file pools: create, open and close a pool file, and access its data area.
//!
//! A pool is one file (or, for the volatile backend, one heap allocation) whose first 4 KiB
//! page is the [`PoolHeader`](crate::header::PoolHeader); offsets given to a pool's methods
//! are relative to the **data area** that follows it, so no caller can overwrite the header.
//!
//! # Invariants
//! - P1: an open pool holds an exclusive `flock` on its file for its whole lifetime; a second
//!   opener (in this or another process) gets [`Error::Locked`].
//! - P2: a pool file's space is allocated (`fallocate`) before it is mapped, so a store can
//!   never raise SIGBUS for lack of space on tmpfs; a full file system is [`Error::PoolFull`].
//! - P3: opening never modifies a file that fails validation.
//!
//! # Ordering
//! - P-PM-1 (creation): every header field and the shutdown state are persisted, then the
//!   8-byte magic is stored and persisted. A crash leaves either no magic (reported as
//!   [`Error::Incomplete`]) or a complete, checksummed header.
//! - P-PM-2 (shutdown state): `OPEN` is persisted at open before any data access is handed
//!   out; `CLEAN` is persisted by [`Pool::close`] only. Dropping a pool without `close` leaves
//!   `OPEN`, which the next opener reports as an unclean shutdown.
//!
//! # Concurrency
//! `Pool: Send + Sync`. All data access methods take `&self` and may be called from any number
//! of threads; they are atomics or asm over the mapping (see `region`).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use zerocopy::{FromBytes, IntoBytes};

use crate::arch;
use crate::emulation::Emulator;
use crate::error::{Error, Result};
use crate::header::{
    HEADER_AREA, MIN_POOL_SIZE, POOL_MAGIC, PoolHeader, SHUTDOWN_STATE_OFF, STATE_CLEAN,
    STATE_OPEN, validate_layout,
};
use crate::image::CrashImage;
use crate::mapping::Mapping;
use crate::mode::{DurabilityMode, FlushKind};
use crate::options::Options;
use crate::platform;
use crate::region::PersistCfg;
use crate::sim::SimDomain;
use crate::space::Space;
use std::sync::Arc;

/// Why a file got the durability mode it got (see `map_deciding_mode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeDecision {
    /// The mode.
    pub mode: DurabilityMode,
    /// One line explaining the choice (e.g. `MAP_SYNC refused: EOPNOTSUPP; tmpfs is RAM`).
    pub reason: String,
}

/// Maps `file` and decides its durability mode: the forced mode of `opts`, or `Pmem` when a
/// `MAP_SYNC` mapping succeeds, else `Emulated` on a RAM file system and `Msync` elsewhere.
fn map_file(
    file: &File,
    len: usize,
    path: &Path,
    opts: &Options,
) -> Result<(NonNull<u8>, ModeDecision)> {
    map_deciding_mode(path, opts, |sync| platform::map_shared(file, len, sync))
}

/// Decides the durability mode of the file at `path` by calling `map(sync)`: with `true` it
/// must try a `MAP_SYNC` mapping, with `false` a plain shared one (returning the errno on
/// failure).
pub(crate) fn map_deciding_mode<T>(
    path: &Path,
    opts: &Options,
    mut map: impl FnMut(bool) -> std::result::Result<T, i32>,
) -> Result<(T, ModeDecision)> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let fs = platform::fs_space(dir).map_err(|e| Error::io("statfs", dir, e))?;
    let fs_name = platform::fs_name(fs.fs_magic);
    let io = |e: i32| Error::io("mmap", path, std::io::Error::from_raw_os_error(e));
    match opts.durability_mode() {
        Some(DurabilityMode::Pmem) => match map(true) {
            Ok(p) => Ok((
                p,
                ModeDecision {
                    mode: DurabilityMode::Pmem,
                    reason: "forced; MAP_SYNC mapping succeeded".into(),
                },
            )),
            Err(e) => Err(Error::ModeUnavailable {
                path: path.to_path_buf(),
                mode: DurabilityMode::Pmem,
                reason: format!("MAP_SYNC refused: {} on {fs_name}", platform::errno_name(e)),
            }),
        },
        Some(m @ (DurabilityMode::Emulated | DurabilityMode::Msync)) => {
            let p = map(false).map_err(io)?;
            Ok((p, ModeDecision { mode: m, reason: format!("forced by options ({fs_name})") }))
        }
        Some(DurabilityMode::Volatile | DurabilityMode::Simulated) => Err(Error::InvalidArgument(
            "durability modes volatile and simulated are only for the heap and sim backends".into(),
        )),
        None => match map(true) {
            Ok(p) => Ok((
                p,
                ModeDecision {
                    mode: DurabilityMode::Pmem,
                    reason: format!("MAP_SYNC mapping succeeded on {fs_name}"),
                },
            )),
            Err(e) => {
                let p = map(false).map_err(io)?;
                Ok((p, decide_without_map_sync(e, fs.fs_magic)))
            }
        },
    }
}

/// The mode a file gets when `MAP_SYNC` was refused with `errno` on a file system with
/// `fs_magic`.
pub(crate) fn decide_without_map_sync(errno: i32, fs_magic: u64) -> ModeDecision {
    let name = platform::fs_name(fs_magic);
    if platform::fs_is_ram(fs_magic) {
        ModeDecision {
            mode: DurabilityMode::Emulated,
            reason: format!(
                "MAP_SYNC refused: {}; {name} is RAM, so flush instructions run for their \
                 cost and data survives process crashes, not power loss",
                platform::errno_name(errno)
            ),
        }
    } else {
        ModeDecision {
            mode: DurabilityMode::Msync,
            reason: format!(
                "MAP_SYNC refused: {}; {name} is not DAX, so a flush is msync of its pages",
                platform::errno_name(errno)
            ),
        }
    }
}

pub(crate) fn resolve_flush(opts: &Options) -> Result<FlushKind> {
    match opts.flush_kind() {
        Some(k) if arch::flush_supported(k) => Ok(k),
        Some(k) => Err(Error::UnsupportedFlush(k)),
        None => arch::best_flush().ok_or(Error::UnsupportedFlush(FlushKind::Clflush)),
    }
}

pub(crate) fn check_size(path: &Path, size: u64) -> Result<usize> {
    if size < MIN_POOL_SIZE {
        return Err(Error::TooSmall { path: path.to_path_buf(), size, min: MIN_POOL_SIZE });
    }
    if !size.is_multiple_of(HEADER_AREA) {
        return Err(Error::InvalidArgument(format!(
            "pool size {size} is not a multiple of {HEADER_AREA} bytes"
        )));
    }
    usize::try_from(size).map_err(|_| Error::InvalidArgument(format!("pool size {size} too large")))
}

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A single-file (or volatile) pool. See the module documentation.
///
/// The memory and the file lock belong to a shared mapping (`mapping`, MP1–MP3) that every
/// [`Space`] of the pool holds: a [`Space::view`] may outlive the pool.
pub struct Pool {
    space: Space,
    /// The whole pool (header page included), for the header's own stores.
    whole: Space,
    mode_reason: String,
    path: PathBuf,
    header: PoolHeader,
    was_clean: bool,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.path)
            .field("size", &self.size())
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

/// Removes a half-created pool file unless disarmed.
pub(crate) struct RemoveOnError<'a>(pub(crate) Option<&'a Path>);
impl Drop for RemoveOnError<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Pool {
    /// Creates a pool file of `size` bytes (a multiple of 4 KiB, at least 8 KiB) at `path`,
    /// which must not exist. The data area is `size - 4096` bytes.
    ///
    /// Errors: [`Error::AlreadyExists`], [`Error::TooSmall`], [`Error::InvalidArgument`],
    /// [`Error::PoolFull`] when the file system cannot back `size`, [`Error::ModeUnavailable`]
    /// / [`Error::UnsupportedFlush`] for forced options the platform lacks, [`Error::Io`].
    pub fn create(path: impl AsRef<Path>, size: u64, opts: &Options) -> Result<Pool> {
        let path = path.as_ref();
        let len = check_size(path, size)?;
        let layout = validate_layout(opts.layout_name())?;
        let flush = resolve_flush(opts)?;
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let space = match platform::fs_space(dir) {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotFound { path: dir.to_path_buf() });
            }
            Err(e) => return Err(Error::io("statvfs", dir, e)),
        };
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
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotFound { path: path.to_path_buf() });
            }
            Err(e) => return Err(Error::io("create", path, e)),
        };
        let mut guard = RemoveOnError(Some(path));
        if !platform::try_lock_exclusive(&file).map_err(|e| Error::io("flock", path, e))? {
            guard.0 = None; // someone else owns this brand-new file: leave it alone
            return Err(Error::Locked { path: path.to_path_buf() });
        }
        if let Err(e) = platform::allocate_space(&file, size) {
            return Err(match e.raw_os_error() {
                Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT) => Error::PoolFull {
                    path: path.to_path_buf(),
                    requested: size,
                    available: platform::fs_space(dir).map(|s| s.available).unwrap_or(0),
                },
                _ => Error::io("fallocate", path, e),
            });
        }
        let (ptr, decision) = map_file(&file, len, path, opts)?;
        // SAFETY: `ptr/len` is the shared mapping just made, owned by nobody else.
        let backing = unsafe { Mapping::mapped(ptr, len, Some(file)) };
        let mut uuid = [0u8; 16];
        platform::random_bytes(&mut uuid).map_err(|e| Error::io("getrandom", path, e))?;
        let header = PoolHeader::new(size, layout, uuid, now_ns());
        let pool = Pool::assemble(backing, len, path, header, decision, flush, opts, false, None)?;
        pool.write_new_header()?;
        guard.0 = None;
        Ok(pool)
    }

    /// Opens an existing pool file.
    ///
    /// Errors: [`Error::NotFound`], [`Error::Locked`], [`Error::Incomplete`],
    /// [`Error::Corrupt`], [`Error::WrongVersion`], [`Error::WrongLayout`],
    /// [`Error::TooSmall`], [`Error::ModeUnavailable`], [`Error::UnsupportedFlush`],
    /// [`Error::Io`]. A file that fails validation is left unchanged.
    pub fn open(path: impl AsRef<Path>, opts: &Options) -> Result<Pool> {
        let path = path.as_ref();
        let flush = resolve_flush(opts)?;
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotFound { path: path.to_path_buf() });
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        if !platform::try_lock_exclusive(&file).map_err(|e| Error::io("flock", path, e))? {
            return Err(Error::Locked { path: path.to_path_buf() });
        }
        let size = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        let prefix = read_header_from_file(&file, path, size)?;
        let (header, was_clean) = check_header(path, &prefix, size, Some(opts.layout_name()))?;
        let len = check_size(path, size)?;
        let (ptr, decision) = map_file(&file, len, path, opts)?;
        // SAFETY: `ptr/len` is the shared mapping just made, owned by nobody else.
        let backing = unsafe { Mapping::mapped(ptr, len, Some(file)) };
        let pool =
            Pool::assemble(backing, len, path, header, decision, flush, opts, was_clean, None)?;
        pool.persist_state(STATE_OPEN)?;
        Ok(pool)
    }

    /// Creates a volatile pool of `size` bytes on the heap (same header and rules as a file
    /// pool; nothing survives the process). For unit tests and in-memory images.
    pub fn create_volatile(size: u64, opts: &Options) -> Result<Pool> {
        let path = Path::new("<volatile>");
        let len = check_size(path, size)?;
        let layout = validate_layout(opts.layout_name())?;
        let flush = resolve_flush(opts)?;
        let backing = Mapping::heap(len)?;
        let mut uuid = [0u8; 16];
        platform::random_bytes(&mut uuid).map_err(|e| Error::io("getrandom", path, e))?;
        let header = PoolHeader::new(size, layout, uuid, now_ns());
        let pool = Pool::assemble(
            backing,
            len,
            path,
            header,
            volatile_decision(),
            flush,
            opts,
            false,
            None,
        )?;
        pool.write_new_header()?;
        Ok(pool)
    }

    /// Opens a pool image (the bytes of a whole pool, header included) as a volatile pool,
    /// with the same validation as [`Pool::open`]. The image is copied.
    pub fn open_image(image: &[u8], opts: &Options) -> Result<Pool> {
        let path = Path::new("<volatile>");
        let size = image.len() as u64;
        let (header, was_clean) = check_header(path, image, size, Some(opts.layout_name()))?;
        let len = check_size(path, size)?;
        let flush = resolve_flush(opts)?;
        let backing = Mapping::heap(len)?;
        let pool = Pool::assemble(
            backing,
            len,
            path,
            header,
            volatile_decision(),
            flush,
            opts,
            was_clean,
            None,
        )?;
        pool.whole.region.write_bytes(0, image)?;
        pool.persist_state(STATE_OPEN)?;
        Ok(pool)
    }

    /// Creates a pool of `size` bytes on the **simulated persistence domain** (heap memory
    /// plus a durable image; see `sim`), for the crash tester. Every store, flush and fence —
    /// including those of creation itself — is observable through [`Pool::sim`].
    pub fn create_sim(size: u64, opts: &Options) -> Result<Pool> {
        Pool::create_sim_with(Arc::new(SimDomain::new(opts.is_eadr())), size, opts)
    }

    /// [`Pool::create_sim`] on a given (empty) domain, e.g. one whose hook is already
    /// installed so that the tester sees the creation's own persists.
    pub fn create_sim_with(sim: Arc<SimDomain>, size: u64, opts: &Options) -> Result<Pool> {
        let path = Path::new("<sim>");
        if !sim.files().is_empty() {
            return Err(Error::InvalidArgument("the sim domain already holds files".into()));
        }
        let len = check_size(path, size)?;
        let layout = validate_layout(opts.layout_name())?;
        let flush = resolve_flush(opts)?;
        let backing = Mapping::heap(len)?;
        let header = PoolHeader::new(size, layout, [0x5a; 16], 0);
        let pool = Pool::assemble(
            backing,
            len,
            path,
            header,
            sim_decision(),
            flush,
            opts,
            false,
            Some(sim),
        )?;
        pool.write_new_header()?;
        Ok(pool)
    }

    /// Opens the single-file pool of a crash image on a new simulated domain whose durable
    /// image is the crash image (so recovery can itself be crash-tested), with the validation
    /// of [`Pool::open`].
    pub fn open_sim(image: &CrashImage, opts: &Options) -> Result<Pool> {
        let path = Path::new("<sim>");
        let file =
            image.file(SIM_POOL_FILE).ok_or_else(|| Error::NotFound { path: path.into() })?;
        let size = file.len;
        let prefix = file.prefix(HEADER_PREFIX as usize);
        let (header, was_clean) = check_header(path, &prefix, size, Some(opts.layout_name()))?;
        let len = check_size(path, size)?;
        let flush = resolve_flush(opts)?;
        let backing = Mapping::heap(len)?;
        // The region is used by the domain only until the mapping detaches it (MP4).
        let region = backing.region();
        let pages = file.copy_into(&region)?;
        let sim = Arc::new(SimDomain::new(opts.is_eadr()));
        sim.file_insert(SIM_POOL_FILE, size, pages, Some(region));
        let pool = Pool::assemble(
            backing,
            len,
            path,
            header,
            sim_decision(),
            flush,
            opts,
            was_clean,
            Some(sim),
        )?;
        pool.persist_state(STATE_OPEN)?;
        Ok(pool)
    }

    /// Opens the single-file pool of a crash image as a mapped pool: the image's file is
    /// written to `path` (which must not exist) and opened with [`Pool::open`].
    pub fn open_image_mapped(
        image: &CrashImage,
        path: impl AsRef<Path>,
        opts: &Options,
    ) -> Result<Pool> {
        let path = path.as_ref();
        let file =
            image.file(SIM_POOL_FILE).ok_or_else(|| Error::NotFound { path: path.into() })?;
        if path.exists() {
            return Err(Error::AlreadyExists { path: path.to_path_buf() });
        }
        std::fs::write(path, file.bytes()).map_err(|e| Error::io("write", path, e))?;
        Pool::open(path, opts)
    }

    /// The simulated persistence domain, for a pool made by [`Pool::create_sim`] or
    /// [`Pool::open_sim`].
    pub fn sim(&self) -> Option<&Arc<SimDomain>> {
        self.space.sim()
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        mut backing: Mapping,
        len: usize,
        path: &Path,
        header: PoolHeader,
        decision: ModeDecision,
        flush: FlushKind,
        opts: &Options,
        was_clean: bool,
        sim: Option<Arc<SimDomain>>,
    ) -> Result<Pool> {
        let cfg = PersistCfg { mode: decision.mode, flush, eadr: opts.is_eadr() };
        let emu = Emulator::new(opts.latency()).map(Arc::new);
        if let Some(sim) = &sim {
            if sim.files().is_empty() {
                sim.file_create(
                    SIM_POOL_FILE,
                    len as u64,
                    Some(backing.region()),
                    crate::sim::Site { location: std::panic::Location::caller(), rule: None },
                )?;
            }
            backing.detach_on_drop(Arc::clone(sim));
        }
        let keep = Arc::new(backing);
        let len = len as u64;
        let data = len.saturating_sub(HEADER_AREA);
        Ok(Pool {
            space: Space::new(
                keep.clone(),
                HEADER_AREA,
                data,
                cfg,
                emu.clone(),
                sim.clone(),
                path,
            )?,
            whole: Space::new(keep, 0, len, cfg, emu, sim, path)?,
            mode_reason: decision.reason,
            path: path.to_path_buf(),
            header,
            was_clean,
        })
    }

    /// P-PM-1: header and state first, magic last.
    fn write_new_header(&self) -> Result<()> {
        let w = &self.whole;
        w.write_bytes(0, self.header.as_bytes())?;
        w.store_u64(SHUTDOWN_STATE_OFF, STATE_OPEN, Ordering::Relaxed)?;
        w.persist_rule("P-PM-1", 0, SHUTDOWN_STATE_OFF + 8)?; // ORDER(P-PM-1): header before magic
        w.store_u64(0, POOL_MAGIC, Ordering::Release)?;
        w.persist_rule("P-PM-1", 0, 8) // ORDER(P-PM-1): the magic commits creation
    }

    fn persist_state(&self, state: u64) -> Result<()> {
        self.whole.store_u64(SHUTDOWN_STATE_OFF, state, Ordering::Release)?;
        self.whole.persist_rule("P-PM-2", SHUTDOWN_STATE_OFF, 8) // ORDER(P-PM-2): shutdown state
    }

    /// Closes the pool cleanly: persists the `CLEAN` shutdown state (P-PM-2), unmaps it and
    /// releases its lock. Dropping a pool without `close` releases it too but leaves it marked
    /// as not cleanly shut down.
    pub fn close(self) -> Result<()> {
        self.persist_state(STATE_CLEAN)
    }

    /// Closes a pool cleanly and returns its image (for volatile pools and tests).
    pub fn close_into_image(self) -> Result<Vec<u8>> {
        self.persist_state(STATE_CLEAN)?;
        Ok(self.image())
    }

    /// A copy of the whole pool (header included) as it is in memory now.
    pub fn image(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.whole.len() as usize];
        // Cannot fail: the range is exactly the whole pool.
        let _ = self.whole.read_into(0, &mut v);
        v
    }

    // ----- identity and configuration -----

    /// The pool file (`<volatile>` for volatile pools).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Size of the data area in bytes (the pool size minus the 4 KiB header page).
    pub fn size(&self) -> u64 {
        self.space.len()
    }
    /// Total size of the pool file in bytes.
    pub fn file_size(&self) -> u64 {
        self.whole.len()
    }
    /// The validated header.
    pub fn header(&self) -> &PoolHeader {
        &self.header
    }
    /// Pool identity.
    pub fn uuid(&self) -> [u8; 16] {
        self.header.uuid
    }
    /// Layout name.
    pub fn layout(&self) -> &str {
        self.header.layout_str().unwrap_or("")
    }
    /// Why the pool got its durability mode.
    pub fn mode_reason(&self) -> &str {
        &self.mode_reason
    }
    /// Whether the previous opener closed the pool with [`Pool::close`]. `false` for a new
    /// pool and after a crash or a drop without `close`: the engine should run recovery.
    pub fn was_clean_shutdown(&self) -> bool {
        self.was_clean
    }
    /// Whether the pool is backed by a file mapping (as opposed to the heap).
    pub fn is_mapped(&self) -> bool {
        self.whole.mapping().is_mapped()
    }
}

impl std::ops::Deref for Pool {
    type Target = Space;
    /// The pool's data area: every access primitive (`load_u64`, `persist`, ...) with offsets
    /// relative to the start of the data area.
    fn deref(&self) -> &Space {
        &self.space
    }
}

/// Name of the single file of a sim pool (and of a single-file crash image).
pub const SIM_POOL_FILE: &str = "pool";

fn sim_decision() -> ModeDecision {
    ModeDecision {
        mode: DurabilityMode::Simulated,
        reason: "simulated persistence domain (crash testing)".into(),
    }
}

fn volatile_decision() -> ModeDecision {
    ModeDecision { mode: DurabilityMode::Volatile, reason: "heap memory (volatile backend)".into() }
}

fn too_small_or_incomplete(path: &Path, size: u64) -> Error {
    if size == 0 {
        Error::Incomplete { path: path.to_path_buf() }
    } else {
        Error::TooSmall { path: path.to_path_buf(), size, min: MIN_POOL_SIZE }
    }
}

fn check_state(path: &Path, state: u64) -> Result<bool> {
    match state {
        STATE_CLEAN => Ok(true),
        STATE_OPEN => Ok(false),
        other => Err(Error::corrupt(path, format!("unknown shutdown state {other:#018x}"))),
    }
}

/// Reads and returns the header and the shutdown-state word of a pool file with `pread`,
/// without mapping or changing it.
fn read_header_from_file(file: &File, path: &Path, size: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; size.min(HEADER_PREFIX) as usize];
    file.read_exact_at(&mut buf, 0).map_err(|e| Error::io("read", path, e))?;
    Ok(buf)
}

/// Bytes of a pool's start that validation reads: the header and the shutdown-state word.
const HEADER_PREFIX: u64 = SHUTDOWN_STATE_OFF + 8;

/// Validates the start (`prefix`, at least [`HEADER_PREFIX`] bytes unless the pool is
/// smaller) of a pool of `size` bytes for an opener expecting `layout` (`None`: any layout).
/// Returns the header and whether the last shutdown was clean.
fn check_header(
    path: &Path,
    prefix: &[u8],
    size: u64,
    layout: Option<&str>,
) -> Result<(PoolHeader, bool)> {
    if size < HEADER_PREFIX || (prefix.len() as u64) < HEADER_PREFIX {
        return Err(too_small_or_incomplete(path, size));
    }
    let header = PoolHeader::read_from_prefix(prefix)
        .map(|(h, _)| h)
        .map_err(|_| Error::corrupt(path, "unreadable header"))?;
    let own;
    let layout = match layout {
        Some(l) => l,
        None => {
            own = header.layout_str().unwrap_or("?").to_owned();
            own.as_str()
        }
    };
    header.validate(path, size, layout)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(&prefix[SHUTDOWN_STATE_OFF as usize..HEADER_PREFIX as usize]);
    let clean = check_state(path, u64::from_le_bytes(w))?;
    Ok((header, clean))
}

/// What [`inspect`] found in a pool file.
#[derive(Clone, Debug)]
pub struct PoolSummary {
    /// The header.
    pub header: PoolHeader,
    /// Whether the last opener closed it cleanly.
    pub clean: bool,
}

/// Reads and validates a pool file's header without locking, mapping or changing it (for
/// `ferrite info`). `layout = None` accepts any layout.
pub fn inspect(path: impl AsRef<Path>, layout: Option<&str>) -> Result<PoolSummary> {
    let path = path.as_ref();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(Error::NotFound { path: path.to_path_buf() });
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let size = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let prefix = read_header_from_file(&file, path, size)?;
    let (header, clean) = check_header(path, &prefix, size, layout)?;
    Ok(PoolSummary { header, clean })
}
