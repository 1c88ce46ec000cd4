//! [`Space`]: a checked, flushable address space of persistent memory — the data area of a
//! [`Pool`](crate::Pool) or the reserved range of a [`PoolSet`](crate::PoolSet). Every access
//! primitive of the persistence layer is a method of `Space`; pools and pool sets dereference
//! to it, so engine code can be written once against `&Space`.
//!
//! # Invariants
//! - S1: every offset is checked against the space's length before a pointer is formed (see
//!   `region`); a bad offset is `Err`, never a fault, a panic or UB.
//! - S2: the memory behind a space stays mapped for the space's whole life: every space (the
//!   pool's own, a [`Space::view`], a clone) holds an `Arc` of the
//!   [`Mapping`](crate::mapping) that owns the memory, which is unmapped only when its last
//!   holder goes. Dropping a pool while a view of it is alive is therefore sound; the view
//!   keeps the memory (and the pool file's lock) until it is dropped. For a pool set, ranges
//!   without a live segment are anonymous memory, never `PROT_NONE`, so even a stale offset
//!   cannot fault.
//! - S3: a space starts on a cache-line boundary (64-byte aligned). [`Space::view`] refuses
//!   any other offset with [`Error::Misaligned`] in every build profile, so word alignment
//!   checks on offsets are alignment checks on addresses, and a flush never touches a line
//!   outside the space's memory.
//!
//! # Ordering
//! `flush` starts write-back of the lines of a range; `fence` completes the calling thread's
//! flushes and non-temporal stores and then injects the emulated persist latency, if any
//! (after the `SFENCE`, so younger stores are held back as a real barrier would hold them);
//! `persist = flush + fence` (P-PM-3). See `docs/design/persistence.md`.
//!
//! Every primitive is `#[track_caller]`: on a simulated pool the caller's location (and, with
//! the `*_rule` variants, the ordering rule it implements) identifies the persistence event for
//! the crash tester. On other pools the location is unused; the only cost is one predictable
//! branch on "is this pool simulated?".
//!
//! # Concurrency
//! `Space: Send + Sync`; every method takes `&self`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use std::panic::Location;

use crate::emulation::Emulator;
use crate::error::{Error, Result};
use crate::mapping::Mapping;
use crate::mode::{DurabilityMode, FlushKind};
use crate::region::{PersistCfg, Region};
use crate::sim::{SimDomain, Site};

/// A checked, flushable address space of persistent memory (see the module docs).
///
/// Cloning is cheap (a few reference counts) and, like [`Space::view`], keeps the memory
/// mapped: a structure can own its `Space` instead of borrowing the pool's.
#[derive(Clone)]
pub struct Space {
    pub(crate) region: Region,
    pub(crate) cfg: PersistCfg,
    pub(crate) emu: Option<Arc<Emulator>>,
    pub(crate) sim: Option<Arc<SimDomain>>,
    pub(crate) name: PathBuf,
    /// The owner of the memory `region` points into (S2).
    keep: Arc<Mapping>,
}

impl fmt::Debug for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Space")
            .field("name", &self.name)
            .field("len", &self.region.len())
            .field("mode", &self.cfg.mode)
            .field("flush", &self.cfg.flush)
            .field("eadr", &self.cfg.eadr)
            .field("emulation", &self.emu)
            .field("simulated", &self.sim.is_some())
            .finish()
    }
}

impl Space {
    /// A space over `[off, off + len)` of `keep`'s memory (checked; `off` 64-aligned, S3).
    pub(crate) fn new(
        keep: Arc<Mapping>,
        off: u64,
        len: u64,
        cfg: PersistCfg,
        emu: Option<Arc<Emulator>>,
        sim: Option<Arc<SimDomain>>,
        name: &Path,
    ) -> Result<Space> {
        let region = keep.region().sub(off, len)?;
        Ok(Space { region, cfg, emu, sim, name: name.to_path_buf(), keep })
    }

    /// The owner of this space's memory.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.keep
    }

    fn at_name(&self, e: Error) -> Error {
        match e {
            Error::Io { op, source, .. } => Error::Io { op, path: self.name.clone(), source },
            other => other,
        }
    }

    #[inline]
    #[track_caller]
    fn site(rule: Option<&'static str>) -> Site {
        Site { location: Location::caller(), rule }
    }

    /// Runs the store `f` of `len` bytes at `off`, through the sim domain if there is one.
    #[inline(always)]
    fn stored<R>(
        &self,
        off: u64,
        len: u64,
        site: Site,
        f: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        match &self.sim {
            None => f(),
            Some(sim) => {
                let addr = self.region.addr_of(off, len)?;
                sim.store(addr, len, site, false, f)
            }
        }
    }

    /// A space over `[off, off + len)` of this one, sharing its persistence configuration,
    /// emulation and simulated domain. Offsets in the view are relative to `off`, so a
    /// structure that stores 8-byte offsets (`POff`) can live in one segment of a pool set
    /// with offsets that stay valid across opens.
    ///
    /// The view keeps the memory mapped (S2): it may outlive the pool or pool set it came
    /// from, and the pool's file stays locked until the view is dropped too. A view into a
    /// pool-set segment that is later removed reads zeros and its stores are lost (the range
    /// becomes anonymous memory, PS2 of `poolset`); it never faults and never reaches another
    /// segment, because a removed range is not reused while the memory is mapped.
    ///
    /// Errors: [`Error::Misaligned`] unless `off` is a multiple of 64 (S3);
    /// [`Error::OutOfBounds`] unless the range lies inside this space.
    pub fn view(&self, off: u64, len: u64) -> Result<Space> {
        Ok(Space {
            region: self.region.sub(off, len)?,
            cfg: self.cfg,
            emu: self.emu.clone(),
            sim: self.sim.clone(),
            name: self.name.clone(),
            keep: Arc::clone(&self.keep),
        })
    }

    /// The simulated persistence domain, when this space belongs to a sim pool.
    pub fn sim(&self) -> Option<&Arc<SimDomain>> {
        self.sim.as_ref()
    }

    /// Length of the addressable range in bytes.
    pub fn len(&self) -> u64 {
        self.region.len()
    }

    /// Whether the space is empty (never true for an open pool).
    pub fn is_empty(&self) -> bool {
        self.region.len() == 0
    }

    /// Durability mode in effect.
    pub fn mode(&self) -> DurabilityMode {
        self.cfg.mode
    }

    /// Flush instruction in use.
    pub fn flush_kind(&self) -> FlushKind {
        self.cfg.flush
    }

    /// Whether eADR is declared (flushes elided).
    pub fn eadr(&self) -> bool {
        self.cfg.eadr
    }

    /// Atomic 8-byte load at `off` (8-aligned). `Release`/`AcqRel` are refused.
    #[inline]
    pub fn load_u64(&self, off: u64, ord: Ordering) -> Result<u64> {
        self.region.load_u64(off, ord)
    }

    /// Atomic 8-byte store at `off` (8-aligned; failure-atomic by axiom M1). Not durable until
    /// flushed and fenced. `Acquire`/`AcqRel` are refused.
    #[inline]
    #[track_caller]
    pub fn store_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<()> {
        let site = Self::site(None);
        self.stored(off, 8, site, || self.region.store_u64(off, val, ord))
    }

    /// Atomic compare-and-swap at `off`: `Ok(Ok(previous))` when it stored `new`,
    /// `Ok(Err(actual))` when the word held something else.
    #[inline]
    #[track_caller]
    pub fn cas_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>> {
        let site = Self::site(None);
        self.stored(off, 8, site, || self.region.cas_u64(off, current, new, success, failure))
    }

    /// Atomic fetch-or at `off`; returns the previous value.
    #[inline]
    #[track_caller]
    pub fn fetch_or_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<u64> {
        let site = Self::site(None);
        self.stored(off, 8, site, || self.region.fetch_or_u64(off, val, ord))
    }

    /// Atomic fetch-and at `off`; returns the previous value.
    #[inline]
    #[track_caller]
    pub fn fetch_and_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<u64> {
        let site = Self::site(None);
        self.stored(off, 8, site, || self.region.fetch_and_u64(off, val, ord))
    }

    /// Hints the processor to cache the line holding `off` (a later load of it is likely);
    /// no effect on contents, ordering or persistence. Out-of-range offsets are ignored.
    #[inline(always)]
    pub fn prefetch(&self, off: u64) {
        self.region.prefetch(off)
    }

    /// Copies `buf.len()` bytes at `off` into `buf` (relaxed word loads).
    pub fn read_into(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.region.read_into(off, buf)
    }

    /// Copies `data` to `off` (relaxed word stores). Not durable until flushed and fenced.
    #[track_caller]
    pub fn write_bytes(&self, off: u64, data: &[u8]) -> Result<()> {
        let site = Self::site(None);
        self.stored(off, data.len() as u64, site, || self.region.write_bytes(off, data))
    }

    /// Sets `len` bytes at `off` to `byte`.
    #[track_caller]
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<()> {
        let site = Self::site(None);
        self.stored(off, len, site, || self.region.fill(off, len, byte))
    }

    /// Reads a `T` at `off` through a local copy (no alignment needed).
    pub fn read_struct<T: FromBytes + IntoBytes>(&self, off: u64) -> Result<T> {
        let mut v = T::new_zeroed();
        self.region.read_into(off, v.as_mut_bytes())?;
        Ok(v)
    }

    /// Writes `val` at `off` through relaxed word stores.
    #[track_caller]
    pub fn write_struct<T: IntoBytes + Immutable>(&self, off: u64, val: &T) -> Result<()> {
        let site = Self::site(None);
        let bytes = val.as_bytes();
        self.stored(off, bytes.len() as u64, site, || self.region.write_bytes(off, bytes))
    }

    /// Non-temporal copy of `data` to `off`; durable after the caller's next [`Space::fence`]
    /// (P-PM-5).
    #[track_caller]
    pub fn copy_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        let site = Self::site(None);
        let (lines, nt) = match &self.sim {
            None => self.region.copy_nt(off, data, &self.cfg).map_err(|e| self.at_name(e))?,
            Some(sim) => {
                // The same split as the region's copy: an unaligned head and tail are ordinary
                // stores that get flushed; the aligned middle is non-temporal (pending at once).
                let addr = self.region.addr_of(off, data.len() as u64)?;
                let n = data.len() as u64;
                let head = ((8 - addr % 8) % 8).min(data.len()) as u64;
                let body = (n - head) / 8 * 8;
                let r =
                    sim.store(addr, n, site, false, || self.region.copy_nt(off, data, &self.cfg))?;
                if body > 0 {
                    sim.store(addr + head as usize, body, site, true, || Ok(()))?;
                }
                if head > 0 {
                    sim.flush(addr, head, site);
                }
                if n - head - body > 0 {
                    sim.flush(addr + (head + body) as usize, n - head - body, site);
                }
                r
            }
        };
        if let Some(emu) = &self.emu {
            emu.note(lines, nt);
        }
        Ok(())
    }

    /// Starts write-back of every line overlapping `[off, off + len)` with the pool's flush
    /// instruction (`msync` in `Msync` mode; counted as elided under eADR).
    #[inline]
    #[track_caller]
    pub fn flush(&self, off: u64, len: u64) -> Result<()> {
        self.flush_site(off, len, Self::site(None))
    }

    /// [`Space::flush`] naming the ordering rule it implements (e.g. `"P-FPT-3"`).
    #[inline]
    #[track_caller]
    pub fn flush_rule(&self, rule: &'static str, off: u64, len: u64) -> Result<()> {
        self.flush_site(off, len, Self::site(Some(rule)))
    }

    #[inline(always)]
    fn flush_site(&self, off: u64, len: u64, site: Site) -> Result<()> {
        let lines = self.region.flush(off, len, &self.cfg).map_err(|e| self.at_name(e))?;
        if let Some(sim) = &self.sim {
            sim.flush(self.region.addr_of(off, len)?, len, site);
        }
        if let Some(emu) = &self.emu {
            emu.note(lines, 0);
        }
        Ok(())
    }

    /// Store fence: this thread's earlier flushes and non-temporal stores are durable when it
    /// returns; then the emulated barrier latency, if configured, is injected.
    #[inline]
    #[track_caller]
    pub fn fence(&self) {
        self.fence_site(Self::site(None));
    }

    /// [`Space::fence`] naming the ordering rule it implements.
    #[inline]
    #[track_caller]
    pub fn fence_rule(&self, rule: &'static str) {
        self.fence_site(Self::site(Some(rule)));
    }

    #[inline(always)]
    fn fence_site(&self, site: Site) {
        Region::fence(&self.cfg);
        if let Some(sim) = &self.sim {
            sim.fence(site);
        }
        if let Some(emu) = &self.emu {
            emu.on_fence();
        }
    }

    /// `flush` + `fence`: `[off, off + len)` is durable when it returns.
    #[inline]
    #[track_caller]
    pub fn persist(&self, off: u64, len: u64) -> Result<()> {
        let site = Self::site(None);
        self.flush_site(off, len, site)?;
        self.fence_site(site);
        Ok(())
    }

    /// [`Space::persist`] naming the ordering rule it implements.
    #[inline]
    #[track_caller]
    pub fn persist_rule(&self, rule: &'static str, off: u64, len: u64) -> Result<()> {
        let site = Self::site(Some(rule));
        self.flush_site(off, len, site)?;
        self.fence_site(site);
        Ok(())
    }
}
