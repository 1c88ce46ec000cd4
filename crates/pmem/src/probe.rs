//! Platform probe behind `ferrite info`: which persistence features the CPU has, which
//! durability mode a directory would give a pool and why, and what a persist barrier and a
//! read of a just-flushed line cost there (measured, never assumed).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::arch::{self, CpuFeatures};
use crate::error::{Error, Result};
use crate::mode::{DurabilityMode, FlushKind};
use crate::options::Options;
use crate::platform;
use crate::pool::{self, ModeDecision, PoolSummary};
use crate::region::{CACHE_LINE, PersistCfg, Region};

/// What the probe found for one path.
#[derive(Debug)]
pub struct PathReport {
    /// The directory probed (the path itself, or the directory of a pool file).
    pub dir: PathBuf,
    /// File system name (`tmpfs`, `ext4`, ...).
    pub fs_name: &'static str,
    /// `statfs` magic.
    pub fs_magic: u64,
    /// Bytes available.
    pub available: u64,
    /// Bytes in total.
    pub total: u64,
    /// `Ok` if a `MAP_SYNC` mapping succeeded, else the errno name.
    pub map_sync: std::result::Result<(), &'static str>,
    /// The mode a pool created here gets (honouring forced options) and why.
    pub decision: ModeDecision,
    /// Flush instruction a pool would use.
    pub flush: FlushKind,
    /// Whether flushes would be elided (eADR declared).
    pub eadr: bool,
    /// Measured cost of one persist barrier (8-byte store + flush of its line + fence), ns.
    pub persist_barrier_ns: f64,
    /// Measured cost of a dependent load from a line just flushed with `flush`, ns.
    pub read_after_flush_ns: f64,
    /// Measured cost of the same dependent load from a cached line, ns.
    pub cached_read_ns: f64,
    /// When the path is a pool file: its validated header, or why it failed validation.
    pub pool: Option<Result<PoolSummary>>,
}

/// Features of this CPU and the flush instruction a pool would pick.
pub fn cpu() -> (CpuFeatures, Option<FlushKind>) {
    (arch::cpu_features(), arch::best_flush())
}

struct RemoveFile(PathBuf);
impl Drop for RemoveFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Probes `path` (a directory, or a pool file whose directory is probed). Creates and removes
/// a 1 MiB scratch file there.
pub fn probe_path(path: &Path, opts: &Options) -> Result<PathReport> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound { path: path.to_path_buf() },
        _ => Error::io("stat", path, e),
    })?;
    let (dir, pool) = if meta.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        (dir.to_path_buf(), Some(pool::inspect(path, None)))
    };
    let space = platform::fs_space(&dir).map_err(|e| Error::io("statvfs", &dir, e))?;
    let flush = match opts.flush_kind() {
        Some(k) if arch::flush_supported(k) => k,
        Some(k) => return Err(Error::UnsupportedFlush(k)),
        None => arch::best_flush().ok_or(Error::UnsupportedFlush(FlushKind::Clflush))?,
    };

    const LEN: usize = 1 << 20;
    let scratch = dir.join(format!(".ferrite-probe-{}", std::process::id()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&scratch)
        .map_err(|e| Error::io("create", &scratch, e))?;
    let _cleanup = RemoveFile(scratch.clone());
    platform::allocate_space(&file, LEN as u64).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC) => Error::PoolFull {
            path: scratch.clone(),
            requested: LEN as u64,
            available: space.available,
        },
        _ => Error::io("fallocate", &scratch, e),
    })?;
    let sync = platform::map_shared(&file, LEN, true);
    let map_sync = sync.map(|_| ()).map_err(platform::errno_name);
    let auto = match sync {
        Ok(_) => ModeDecision {
            mode: DurabilityMode::Pmem,
            reason: format!("MAP_SYNC mapping succeeded on {}", platform::fs_name(space.fs_magic)),
        },
        Err(e) => pool::decide_without_map_sync(e, space.fs_magic),
    };
    let decision = match opts.durability_mode() {
        None => auto,
        Some(DurabilityMode::Pmem) if sync.is_err() => {
            return Err(Error::ModeUnavailable {
                path: dir,
                mode: DurabilityMode::Pmem,
                reason: format!("MAP_SYNC refused: {}", map_sync.err().unwrap_or("?")),
            });
        }
        Some(m) => ModeDecision { mode: m, reason: "forced by options".into() },
    };
    let ptr = match sync {
        Ok(p) => p,
        Err(_) => platform::map_shared(&file, LEN, false)
            .map_err(|e| Error::io("mmap", &scratch, std::io::Error::from_raw_os_error(e)))?,
    };
    struct Unmap(std::ptr::NonNull<u8>);
    impl Drop for Unmap {
        fn drop(&mut self) {
            // SAFETY: exactly the mapping made above, no longer used once this guard drops
            // (it is declared after, so dropped before, nothing else uses `region`).
            unsafe { platform::unmap(self.0, 1 << 20) }
        }
    }
    let _unmap = Unmap(ptr);
    // SAFETY: `ptr` maps LEN bytes, page-aligned, kept until `_unmap` drops at the end of
    // this function; accessed only through the region.
    let region = unsafe { Region::new(ptr, LEN) };
    let cfg = PersistCfg { mode: decision.mode, flush, eadr: opts.is_eadr() };
    let (persist_barrier_ns, read_after_flush_ns, cached_read_ns) = measure(&region, &cfg)?;
    Ok(PathReport {
        dir,
        fs_name: platform::fs_name(space.fs_magic),
        fs_magic: space.fs_magic,
        available: space.available,
        total: space.total,
        map_sync,
        decision,
        flush,
        eadr: opts.is_eadr(),
        persist_barrier_ns,
        read_after_flush_ns,
        cached_read_ns,
        pool,
    })
}

/// Measures (persist barrier, read after flush, cached read) in ns on `region`.
fn measure(region: &Region, cfg: &PersistCfg) -> Result<(f64, f64, f64)> {
    // Persist barrier: store 8 bytes, flush the line, fence; rotate over 256 lines.
    let iters: u64 = if cfg.mode == DurabilityMode::Msync { 200 } else { 200_000 };
    let barrier = |n: u64| -> Result<f64> {
        let t = Instant::now();
        for i in 0..n {
            let off = (i % 256) * CACHE_LINE;
            region.store_u64(off, i, Ordering::Relaxed)?;
            region.flush(off, 8, cfg)?;
            Region::fence(cfg);
        }
        Ok(t.elapsed().as_nanos() as f64 / n as f64)
    };
    barrier(iters / 10)?; // warm-up
    let persist_ns = barrier(iters)?;

    // Read after flush: a pointer chase through 1024 lines (64 KiB) in a random cyclic order,
    // so each load depends on the previous one and no two overlap.
    const LINES: u64 = 1024;
    let base = 512 * 1024;
    let mut order: Vec<u64> = (0..LINES).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for w in 0..LINES as usize {
        let from = order[w];
        let to = order[(w + 1) % LINES as usize];
        region.store_u64(base + from * CACHE_LINE, base + to * CACHE_LINE, Ordering::Relaxed)?;
    }
    let chase = || -> Result<f64> {
        let mut off = base + order[0] * CACHE_LINE;
        let t = Instant::now();
        for _ in 0..LINES {
            off = region.load_u64(off, Ordering::Relaxed)?;
        }
        let ns = t.elapsed().as_nanos() as f64 / LINES as f64;
        std::hint::black_box(off);
        Ok(ns)
    };
    let rounds = if cfg.mode == DurabilityMode::Msync { 3 } else { 50 };
    let mut flushed = Vec::with_capacity(rounds);
    let mut cached = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        region.flush(base, LINES * CACHE_LINE, cfg)?;
        Region::fence(cfg);
        flushed.push(chase()?);
        cached.push(chase()?);
    }
    Ok((persist_ns, median(&mut flushed), median(&mut cached)))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
