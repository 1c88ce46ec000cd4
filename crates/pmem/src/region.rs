//! Checked access to a range of persistent memory, and the flush/fence machinery.
//!
//! # Invariants
//! - R1: a [`Region`] covers `[base, base + len)`, which stays mapped (or allocated) and
//!   writable for as long as the region is used; `base` is 64-byte aligned.
//! - R2: no Rust reference (`&[u8]`, `&T`) is ever created over the range. Words are accessed
//!   through `AtomicU64::from_ptr` (a transient `&AtomicU64`, which permits shared mutation),
//!   single bytes through `AtomicU8::from_ptr`, flushes and non-temporal stores through
//!   `asm!` (conventions §2 rules 1–2).
//! - R3: every access is bounds-checked (`off + len <= len`, no overflow) and word accesses are
//!   alignment-checked before any pointer is formed; a bad offset is an `Err`, never UB or a
//!   panic, even when the offset was read optimistically from garbage (rule 4).
//!
//! # Ordering
//! Bulk copies (`read_into`, `write_bytes`, `fill`) use relaxed word accesses; a caller that
//! publishes data orders it with a `Release` store of its own (or a fence). `flush` starts
//! write-back of every line overlapping the range; `fence` completes the calling thread's
//! flushes and non-temporal stores. `persist = flush + fence`: no leading fence is needed
//! because `CLWB`/`CLFLUSHOPT` are ordered with older stores to the same line (Intel SDM,
//! AMD APM), and `CLFLUSH` with all older stores. See `docs/design/persistence.md` (P-PM-n).
//!
//! # Concurrency
//! All methods take `&self` and may run concurrently from any thread. Concurrent writers of
//! the same word race only in the sense of atomics (last writer wins); a field written while
//! others read it must be accessed with one width (rule 3).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::arch;
use crate::counters;
use crate::error::{Error, Result};
use crate::mode::{DurabilityMode, FlushKind};
use crate::platform;

/// Cache-line size assumed by the flush logic and the on-media layouts.
pub const CACHE_LINE: u64 = 64;

/// How a region's flushes and fences behave (fixed per pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PersistCfg {
    pub mode: DurabilityMode,
    pub flush: FlushKind,
    pub eadr: bool,
}

/// A checked view of `[base, base + len)` (see the module invariants).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a Region is a pointer + length; every access through it is atomic (or asm), so
// sharing it between threads cannot create a data race in Rust's sense (R2).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// # Safety
    /// `[base, base + len)` must stay valid for reads and writes for as long as the region (or
    /// a copy of it) is used, and must be accessed by everyone only through atomics or the
    /// asm of `arch` (R1, R2). `base` must be 64-byte aligned.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Region {
        debug_assert_eq!(base.as_ptr() as usize % CACHE_LINE as usize, 0);
        Region { base, len }
    }

    /// A sub-view `[off, off + len)` of this region. `off` must be a multiple of
    /// [`CACHE_LINE`], so the sub-view keeps R1's alignment in every build profile: a
    /// misaligned base would make 8-aligned offsets misaligned addresses (`AtomicU64::from_ptr`
    /// on them is undefined behaviour) and let a flush reach the line before the range.
    pub fn sub(&self, off: u64, len: u64) -> Result<Region> {
        if !off.is_multiple_of(CACHE_LINE) {
            return Err(Error::Misaligned { off, align: CACHE_LINE });
        }
        let p = self.check(off, len)?;
        // SAFETY: `p` is derived from the non-null `base` by an in-bounds offset.
        let p = unsafe { NonNull::new_unchecked(p) };
        // SAFETY: the sub-range lies inside this region (checked), which is valid by R1.
        Ok(unsafe { Region::new(p, len as usize) })
    }

    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Address of the first byte of the region.
    pub fn base_addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Address of `off`, after checking that `[off, off + len)` is inside the region.
    #[inline]
    pub fn addr_of(&self, off: u64, len: u64) -> Result<usize> {
        self.check(off, len).map(|p| p as usize)
    }

    /// Bounds check; returns the address of `off`.
    #[inline(always)]
    fn check(&self, off: u64, len: u64) -> Result<*mut u8> {
        match off.checked_add(len) {
            Some(end) if end <= self.len as u64 => {
                // SAFETY: `off <= self.len`, so the result stays inside (or one past) the
                // allocation of R1.
                Ok(unsafe { self.base.as_ptr().add(off as usize) })
            }
            _ => Err(Error::OutOfBounds { off, len, size: self.len as u64 }),
        }
    }

    #[inline(always)]
    fn word(&self, off: u64) -> Result<&AtomicU64> {
        if !off.is_multiple_of(8) {
            return Err(Error::Misaligned { off, align: 8 });
        }
        let p = self.check(off, 8)?;
        // SAFETY: in bounds and 8-aligned (checked above; base is 64-aligned), valid for the
        // region's lifetime (R1), and only ever accessed atomically (R2).
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// # Safety
    /// `p` must lie inside a checked range of a live region (R1).
    #[inline(always)]
    unsafe fn load_byte(p: *mut u8) -> u8 {
        // SAFETY: guaranteed by the caller; the transient reference is not kept.
        unsafe { AtomicU8::from_ptr(p) }.load(Ordering::Relaxed)
    }

    /// # Safety
    /// As [`Region::load_byte`].
    #[inline(always)]
    unsafe fn store_byte(p: *mut u8, v: u8) {
        // SAFETY: guaranteed by the caller; the transient reference is not kept.
        unsafe { AtomicU8::from_ptr(p) }.store(v, Ordering::Relaxed)
    }

    /// Hints the processor to bring the line holding `off` into the cache. No effect on
    /// contents or ordering; an offset outside the region is ignored.
    #[inline(always)]
    pub fn prefetch(&self, off: u64) {
        if off < self.len as u64 {
            #[cfg(target_arch = "x86_64")]
            {
                let p = self.base.as_ptr().wrapping_add(off as usize);
                // SAFETY: SSE is part of the x86-64 baseline; `p` lies inside the mapping
                // (R1), and a prefetch neither faults nor reads or writes memory as far as
                // the program can observe.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        p.cast_const().cast::<i8>(),
                    )
                };
            }
        }
    }

    #[inline]
    pub fn load_u64(&self, off: u64, ord: Ordering) -> Result<u64> {
        if matches!(ord, Ordering::Release | Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!("load with {ord:?} ordering")));
        }
        Ok(self.word(off)?.load(ord))
    }

    #[inline]
    pub fn store_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<()> {
        if matches!(ord, Ordering::Acquire | Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!("store with {ord:?} ordering")));
        }
        self.word(off)?.store(val, ord);
        counters::add_stored(8);
        Ok(())
    }

    #[inline]
    pub fn cas_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>> {
        if matches!(failure, Ordering::Release | Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!("CAS failure ordering {failure:?}")));
        }
        let r = self.word(off)?.compare_exchange(current, new, success, failure);
        if r.is_ok() {
            counters::add_stored(8);
        }
        Ok(r)
    }

    #[inline]
    pub fn fetch_or_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<u64> {
        let r = self.word(off)?.fetch_or(val, ord);
        counters::add_stored(8);
        Ok(r)
    }

    #[inline]
    pub fn fetch_and_u64(&self, off: u64, val: u64, ord: Ordering) -> Result<u64> {
        let r = self.word(off)?.fetch_and(val, ord);
        counters::add_stored(8);
        Ok(r)
    }

    /// Copies `buf.len()` bytes at `off` into `buf` with relaxed loads.
    // Bytes are copied in memory order, so native-endian conversion is the identity here.
    #[allow(clippy::host_endian_bytes)]
    pub fn read_into(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let mut p = self.check(off, buf.len() as u64)?;
        let mut i = 0;
        let n = buf.len();
        while i < n && !(p as usize).is_multiple_of(8) {
            // SAFETY: `p` is inside the checked range (i < n).
            buf[i] = unsafe { Self::load_byte(p) };
            // SAFETY: stays within the checked range (i < n).
            p = unsafe { p.add(1) };
            i += 1;
        }
        while n - i >= 8 {
            // SAFETY: `p` is 8-aligned and `p..p+8` lies in the checked range (R1, R2).
            let w = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.load(Ordering::Relaxed);
            buf[i..i + 8].copy_from_slice(&w.to_ne_bytes());
            // SAFETY: stays within the checked range.
            p = unsafe { p.add(8) };
            i += 8;
        }
        while i < n {
            // SAFETY: `p` is inside the checked range (i < n).
            buf[i] = unsafe { Self::load_byte(p) };
            // SAFETY: stays within the checked range (or one past its end).
            p = unsafe { p.add(1) };
            i += 1;
        }
        Ok(())
    }

    /// Copies `data` to `off` with relaxed stores.
    #[allow(clippy::host_endian_bytes)]
    pub fn write_bytes(&self, off: u64, data: &[u8]) -> Result<()> {
        let mut p = self.check(off, data.len() as u64)?;
        let n = data.len();
        let mut i = 0;
        while i < n && !(p as usize).is_multiple_of(8) {
            // SAFETY: `p` is inside the checked range (i < n).
            unsafe { Self::store_byte(p, data[i]) };
            // SAFETY: stays within the checked range.
            p = unsafe { p.add(1) };
            i += 1;
        }
        while n - i >= 8 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&data[i..i + 8]);
            // SAFETY: `p` is 8-aligned and `p..p+8` lies in the checked range.
            unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
                .store(u64::from_ne_bytes(w), Ordering::Relaxed);
            // SAFETY: stays within the checked range.
            p = unsafe { p.add(8) };
            i += 8;
        }
        while i < n {
            // SAFETY: `p` is inside the checked range (i < n).
            unsafe { Self::store_byte(p, data[i]) };
            // SAFETY: stays within the checked range (or one past its end).
            p = unsafe { p.add(1) };
            i += 1;
        }
        counters::add_stored(n as u64);
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte` with relaxed stores.
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<()> {
        let mut p = self.check(off, len)?;
        let end = p as usize + len as usize;
        let word = u64::from_le_bytes([byte; 8]);
        while (p as usize) < end && !(p as usize).is_multiple_of(8) {
            // SAFETY: `p` is inside the checked range (p < end).
            unsafe { Self::store_byte(p, byte) };
            // SAFETY: stays within the checked range.
            p = unsafe { p.add(1) };
        }
        while end - (p as usize) >= 8 {
            // SAFETY: 8-aligned and inside the checked range.
            unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.store(word, Ordering::Relaxed);
            // SAFETY: stays within the checked range.
            p = unsafe { p.add(8) };
        }
        while (p as usize) < end {
            // SAFETY: `p` is inside the checked range (p < end).
            unsafe { Self::store_byte(p, byte) };
            // SAFETY: stays within the checked range (or one past its end).
            p = unsafe { p.add(1) };
        }
        counters::add_stored(len);
        Ok(())
    }

    /// Copies `data` to `off` with non-temporal stores for the 8-byte-aligned middle and
    /// ordinary stores (flushed here) for an unaligned head and tail. Nothing is durable until
    /// the caller's next [`Region::fence`]. In `Msync` mode the covering pages are synced.
    /// Returns (lines flushed, bytes stored non-temporally).
    #[allow(clippy::host_endian_bytes)]
    pub fn copy_nt(&self, off: u64, data: &[u8], cfg: &PersistCfg) -> Result<(u64, u64)> {
        let start = self.check(off, data.len() as u64)?;
        let n = data.len();
        let head = ((8 - (start as usize % 8)) % 8).min(n);
        let body = (n - head) / 8 * 8;
        let tail = n - head - body;
        if head > 0 {
            self.write_bytes(off, &data[..head])?;
        }
        let mut p = start.wrapping_add(head);
        let mut i = head;
        while i < head + body {
            let mut w = [0u8; 8];
            w.copy_from_slice(&data[i..i + 8]);
            // SAFETY: `p` is 8-aligned and inside the checked range; movnti writes 8 bytes and
            // no reference covers them (R2).
            unsafe { arch::movnti(p.cast::<u64>(), u64::from_ne_bytes(w)) };
            // SAFETY: stays within the checked range.
            p = unsafe { p.add(8) };
            i += 8;
        }
        counters::add_nt(body as u64);
        if tail > 0 {
            self.write_bytes(off + (head + body) as u64, &data[head + body..])?;
        }
        if cfg.mode == DurabilityMode::Msync {
            self.flush(off, n as u64, cfg)?;
            return Ok((0, body as u64));
        }
        let mut lines = 0;
        if head > 0 {
            lines += self.flush(off, head as u64, cfg)?;
        }
        if tail > 0 {
            lines += self.flush(off + (head + body) as u64, tail as u64, cfg)?;
        }
        Ok((lines, body as u64))
    }

    /// Starts write-back of every cache line overlapping `[off, off + len)`; returns the number
    /// of lines written back (0 in `Msync` mode and under eADR).
    #[inline]
    pub fn flush(&self, off: u64, len: u64, cfg: &PersistCfg) -> Result<u64> {
        let p = self.check(off, len)?;
        if len == 0 {
            return Ok(0);
        }
        if cfg.mode == DurabilityMode::Msync {
            // SAFETY: the range is inside this region's live mapping (checked, R1).
            let pages = unsafe { platform::msync_range(p, len as usize) }
                .map_err(|e| Error::io("msync", "<pool>", e))?;
            counters::add_msync(pages);
            return Ok(0);
        }
        let first = (p as usize) & !(CACHE_LINE as usize - 1);
        let end = p as usize + len as usize;
        let lines = (end - first).div_ceil(CACHE_LINE as usize) as u64;
        if cfg.eadr {
            counters::add_elided(lines);
            return Ok(0);
        }
        let mut line = first as *const u8;
        // Each asm call below is given an address inside the checked range: `first` is the
        // start of the line containing `p` (base is 64-aligned, so it is not below base) and
        // every later line starts before `end`.
        match cfg.flush {
            FlushKind::Clwb => {
                for _ in 0..lines {
                    // SAFETY: `line` is inside the live region (see above); CLWB support was
                    // checked when the pool was opened.
                    unsafe { arch::clwb(line) };
                    line = line.wrapping_add(CACHE_LINE as usize);
                }
            }
            FlushKind::Clflushopt => {
                for _ in 0..lines {
                    // SAFETY: as above, for CLFLUSHOPT.
                    unsafe { arch::clflushopt(line) };
                    line = line.wrapping_add(CACHE_LINE as usize);
                }
            }
            FlushKind::Clflush => {
                for _ in 0..lines {
                    // SAFETY: as above, for CLFLUSH.
                    unsafe { arch::clflush(line) };
                    line = line.wrapping_add(CACHE_LINE as usize);
                }
            }
        }
        counters::add_flushed(cfg.flush, lines);
        Ok(lines)
    }

    /// Store fence: completes this thread's flushes and non-temporal stores.
    #[inline]
    pub fn fence(_cfg: &PersistCfg) {
        arch::sfence();
        counters::add_fence();
    }
}
