//! The pool set's reservation: one range of address space taken at open, into which segments
//! are mapped with `MAP_FIXED` (conventions §2.7: mappings never move).
//!
//! # Invariants
//! - PS2 (of the pool set): every byte of the reservation is mapped read-write at all times
//!   that a caller can observe: segments over it, anonymous memory everywhere else. The
//!   reservation is anonymous read-write `MAP_NORESERVE` memory, not `PROT_NONE` (a
//!   deliberate difference from conventions §2.7): the set's [`Space`](crate::Space) accepts
//!   any in-bounds offset from safe code, so a `PROT_NONE` range would be a fault reachable
//!   without `unsafe`.
//! - A failed `MAP_FIXED` may already have removed what was mapped at the target (Linux
//!   before 6.12 unmaps first), so every failure path of mapping a segment and every removal
//!   refills the range with anonymous memory ([`PoolSet::fill_with_anon`]) before returning:
//!   a failed grow leaves no hole. If even that fails, the process aborts rather than keep a
//!   hole that safe code could fault on.
//! - Sizes are combined with checked arithmetic; a range outside the reservation is refused
//!   before any `mmap`.
//!
//! # Ordering
//! None: mapping is not a persistence event.
//!
//! # Concurrency
//! `map_segment` and `fill_with_anon` run under the set's membership mutex, on a range no
//! published pointer or `SegmentInfo` refers to (a new segment's range before it is
//! published, or a removed one after it was unpublished). `MAP_FIXED` replaces a range
//! atomically for other threads when it succeeds.

use std::fs::File;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::mapping::Mapping;
use crate::mode::DurabilityMode;
use crate::options::Options;
use crate::platform;

use super::PoolSet;
use super::validate::Judged;

/// The reservation of a new set; sim sets default to at most 1 GiB.
pub(super) fn reservation_len(opts: &Options, seg_size: u64, sim: bool) -> Result<u64> {
    let want = match (sim, opts.max_pool_size_explicit()) {
        (_, Some(n)) => n,
        (true, None) => opts.max_pool_size_bytes().min(1 << 30),
        (false, None) => opts.max_pool_size_bytes(),
    };
    let len = round_up_to_page(want)
        .ok_or_else(|| Error::InvalidArgument(format!("max pool size {want} too large")))?;
    if len < seg_size {
        return Err(Error::InvalidArgument(format!(
            "max pool size {len} is smaller than the segment size {seg_size}"
        )));
    }
    Ok(len)
}

/// The reservation of an existing set: the configured one, but at least the live segments
/// plus one more default segment.
pub(super) fn open_reservation(opts: &Options, j: &Judged, sim: bool) -> Result<u64> {
    let too_large = || Error::InvalidArgument("pool set too large for one reservation".into());
    let need = j.total.checked_add(opts.segment_size_bytes()).ok_or_else(too_large)?;
    Ok(reservation_len(opts, 0, sim)?.max(round_up_to_page(need).ok_or_else(too_large)?))
}

/// `n` rounded up to a multiple of the page size, `None` on overflow.
fn round_up_to_page(n: u64) -> Option<u64> {
    let page = platform::page_size() as u64;
    n.div_ceil(page).checked_mul(page)
}

/// Reserves `len` bytes of address space (anonymous, read-write, `MAP_NORESERVE`).
pub(super) fn reserve(len: u64, dir: &Path) -> Result<Mapping> {
    let ulen = usize::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("reservation of {len} bytes too large")))?;
    let ptr = platform::reserve(ulen).map_err(|e| Error::io("reserve address space", dir, e))?;
    // SAFETY: `ptr/ulen` is the fresh anonymous mapping just made, owned by nobody else.
    Ok(unsafe { Mapping::mapped(ptr, ulen, None) })
}

/// [`reserve`] for a simulated pool set: the reservation may be a spare one (MP5 of
/// `mapping.rs`); the set notes each segment it places there ([`PoolSet::publish`]).
pub(super) fn reserve_sim(len: u64, dir: &Path) -> Result<Mapping> {
    let ulen = usize::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("reservation of {len} bytes too large")))?;
    Mapping::sim_reservation(ulen).map_err(|e| Error::io("reserve address space", dir, e))
}

impl PoolSet {
    /// Address of the range `[voff, voff + len)` of the reservation, checked to lie inside it.
    pub(super) fn addr(&self, voff: u64, len: u64) -> Result<NonNull<u8>> {
        let addr = self.space.region.addr_of(voff, len)?;
        NonNull::new(addr as *mut u8).ok_or(Error::OutOfBounds {
            off: voff,
            len,
            size: self.space.len(),
        })
    }

    /// With [`Options::prefault`](crate::Options::prefault), populates the pages of the
    /// segment just mapped at `[voff, voff + size)`. Best effort: a failure leaves the pages to
    /// fault as usual.
    pub(super) fn prefault_segment(&self, voff: u64, size: u64) {
        if !self.prefault {
            return;
        }
        if let Ok(addr) = self.addr(voff, size) {
            // SAFETY: a segment file is mapped over `[addr, addr + size)` (the caller just
            // mapped it), with its space allocated at creation (`allocate_space`).
            let _ = unsafe { platform::populate_write(addr, size as usize) };
        }
    }

    /// Maps `size` bytes of the segment `file` at `voff`. On failure the range is refilled
    /// with anonymous memory before the error is returned (no hole, PS2).
    pub(super) fn map_segment(&self, file: &File, path: &Path, voff: u64, size: u64) -> Result<()> {
        let addr = self.addr(voff, size).map_err(|_| Error::PoolFull {
            path: self.dir.clone(),
            requested: size,
            available: self.space.len().saturating_sub(voff),
        })?;
        let len = size as usize; // fits: the range lies inside the reservation
        let r = if self.fail_next_map.swap(false, Ordering::Relaxed) {
            // Test hook: behave like the worst failing MAP_FIXED, which has already removed
            // the reservation's memory under the range.
            // SAFETY: the range is inside our reservation (checked) and unpublished; it is
            // refilled below before anything else runs on this thread.
            unsafe { platform::unmap(addr, len) };
            Err(libc::ENOMEM)
        } else {
            // SAFETY: `[addr, addr + size)` lies inside our reservation (checked above) and
            // is not published to anyone; no Rust reference covers it.
            unsafe { platform::map_fixed(addr, len, file, self.sync) }
        };
        if r.is_ok() {
            self.prefault_segment(voff, size);
        }
        r.map_err(|e| {
            self.fill_with_anon(addr, len);
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

    /// Replaces `[addr, addr + len)` (inside the reservation, unpublished) with fresh
    /// anonymous memory, so that it reads zeros and can never fault (PS2). Retried a few
    /// times; if the kernel still refuses, the range may be a hole that safe code could fault
    /// on, so the process aborts with a message instead of continuing unsoundly.
    pub(super) fn fill_with_anon(&self, addr: NonNull<u8>, len: usize) {
        for _ in 0..3 {
            // SAFETY: the caller passes a range inside our reservation that no published
            // pointer refers to; replacing it keeps it read-write (PS2).
            if unsafe { platform::map_anon_fixed(addr, len) }.is_ok() {
                return;
            }
        }
        eprintln!(
            "ferrite-pmem: cannot refill {len} bytes of the pool set {} with anonymous memory; \
             aborting rather than leave a hole in its address space",
            self.dir.display()
        );
        std::process::abort();
    }
}
