//! [`Space`]: a checked, flushable address space of persistent memory — the data area of a
//! [`Pool`](crate::Pool) or the reserved range of a [`PoolSet`](crate::PoolSet). Every access
//! primitive of the persistence layer is a method of `Space`; pools and pool sets dereference
//! to it, so engine code can be written once against `&Space`.
//!
//! # Invariants
//! - S1: every offset is checked against the space's length before a pointer is formed (see
//!   `region`); a bad offset is `Err`, never a fault, a panic or UB.
//! - S2: the memory behind a space stays mapped for the space's whole life. For a pool set,
//!   ranges without a live segment are anonymous memory, never `PROT_NONE`, so even a stale
//!   offset cannot fault.
//!
//! # Ordering
//! `flush` starts write-back of the lines of a range; `fence` completes the calling thread's
//! flushes and non-temporal stores and then injects the emulated persist latency, if any
//! (after the `SFENCE`, so younger stores are held back as a real barrier would hold them);
//! `persist = flush + fence` (P-PM-3). See `docs/design/persistence.md`.
//!
//! # Concurrency
//! `Space: Send + Sync`; every method takes `&self`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::emulation::Emulator;
use crate::error::{Error, Result};
use crate::options::{DurabilityMode, FlushKind};
use crate::region::{PersistCfg, Region};

/// A checked, flushable address space of persistent memory (see the module docs).
pub struct Space {
    pub(crate) region: Region,
    pub(crate) cfg: PersistCfg,
    pub(crate) emu: Option<Arc<Emulator>>,
    pub(crate) name: PathBuf,
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
            .finish()
    }
}

impl Space {
    pub(crate) fn new(
        region: Region,
        cfg: PersistCfg,
        emu: Option<Arc<Emulator>>,
        name: &Path,
    ) -> Space {
        Space { region, cfg, emu, name: name.to_path_buf() }
    }

    fn at_name(&self, e: Error) -> Error {
        match e {
            Error::Io { op, source, .. } => Error::Io { op, path: self.name.clone(), source },
            other => other,
        }
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
    pub fn store_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<()> {
        self.region.store_u64(off, val, ord)
    }

    /// Atomic compare-and-swap at `off`: `Ok(Ok(previous))` when it stored `new`,
    /// `Ok(Err(actual))` when the word held something else.
    #[inline]
    pub fn cas_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>> {
        self.region.cas_u64(off, current, new, success, failure)
    }

    /// Atomic fetch-or at `off`; returns the previous value.
    #[inline]
    pub fn fetch_or_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<u64> {
        self.region.fetch_or_u64(off, val, ord)
    }

    /// Atomic fetch-and at `off`; returns the previous value.
    #[inline]
    pub fn fetch_and_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<u64> {
        self.region.fetch_and_u64(off, val, ord)
    }

    /// Copies `buf.len()` bytes at `off` into `buf` (relaxed word loads).
    pub fn read_into(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.region.read_into(off, buf)
    }

    /// Copies `data` to `off` (relaxed word stores). Not durable until flushed and fenced.
    pub fn write_bytes(&self, off: u64, data: &[u8]) -> Result<()> {
        self.region.write_bytes(off, data)
    }

    /// Sets `len` bytes at `off` to `byte`.
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<()> {
        self.region.fill(off, len, byte)
    }

    /// Reads a `T` at `off` through a local copy (no alignment needed).
    pub fn read_struct<T: FromBytes + IntoBytes>(&self, off: u64) -> Result<T> {
        let mut v = T::new_zeroed();
        self.region.read_into(off, v.as_mut_bytes())?;
        Ok(v)
    }

    /// Writes `val` at `off` through relaxed word stores.
    pub fn write_struct<T: IntoBytes + Immutable>(&self, off: u64, val: &T) -> Result<()> {
        self.region.write_bytes(off, val.as_bytes())
    }

    /// Non-temporal copy of `data` to `off`; durable after the caller's next [`Space::fence`]
    /// (P-PM-5).
    pub fn copy_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        let (lines, nt) = self.region.copy_nt(off, data, &self.cfg).map_err(|e| self.at_name(e))?;
        if let Some(emu) = &self.emu {
            emu.note(lines, nt);
        }
        Ok(())
    }

    /// Starts write-back of every line overlapping `[off, off + len)` with the pool's flush
    /// instruction (`msync` in `Msync` mode; counted as elided under eADR).
    #[inline]
    pub fn flush(&self, off: u64, len: u64) -> Result<()> {
        let lines = self.region.flush(off, len, &self.cfg).map_err(|e| self.at_name(e))?;
        if let Some(emu) = &self.emu {
            emu.note(lines, 0);
        }
        Ok(())
    }

    /// Store fence: this thread's earlier flushes and non-temporal stores are durable when it
    /// returns; then the emulated barrier latency, if configured, is injected.
    #[inline]
    pub fn fence(&self) {
        Region::fence(&self.cfg);
        if let Some(emu) = &self.emu {
            emu.on_fence();
        }
    }

    /// `flush` + `fence`: `[off, off + len)` is durable when it returns.
    #[inline]
    pub fn persist(&self, off: u64, len: u64) -> Result<()> {
        self.flush(off, len)?;
        self.fence();
        Ok(())
    }
}
