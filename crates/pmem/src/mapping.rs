//! The memory behind every [`Space`](crate::Space): a file mapping, a heap block or a pool
//! set's reservation, owned by one [`Mapping`] that is shared (`Arc`) by every space over it.
//!
//! # Invariants
//! - MP1: a `Mapping` owns `[ptr, ptr + len)`; the memory is released (unmapped or
//!   deallocated) only in `Mapping::drop`, that is when the last `Arc` goes.
//! - MP2: every `Space` holds an `Arc<Mapping>` of the memory its region points into. A view,
//!   a clone or the space of a dropped pool therefore never outlives its memory: dropping a
//!   `Pool` or `PoolSet` while a view is alive only drops one holder (S2 of `space`).
//! - MP3: the file (or, for a pool set, segment 0's file) that carries the opener's `flock`
//!   lives in the mapping, so the lock is held exactly as long as the memory is mapped: a
//!   second opener cannot map the same file while a view of the first one can still write.
//! - MP4: on a simulated domain, the domain gets private copies of the working images in the
//!   range before the memory is released (it may outlive the mapping and capture later),
//!   unless the mapping holds the domain's last reference (then both go together).
//! - MP5: a simulated pool set's reservation ([`Mapping::sim_reservation`]) is not unmapped
//!   but kept as a spare for the next one of its length, with every byte that may have been
//!   written (below its high-water mark, [`Mapping::note_used`]) zeroed first: a reservation
//!   handed out reads zeros everywhere, as a fresh one does. A crash tester opens one per
//!   image; faulting its pages in afresh each time was most of a recovery's system time.
//!
//! # Ordering
//! No persistence ordering: releasing memory is not a persistence event. A pool's `CLEAN`
//! shutdown state is persisted by `close`, not here.
//!
//! # Concurrency
//! `Mapping: Send + Sync`: its memory is only ever accessed through `Region` (atomics and
//! `asm!`), never through references.

use std::alloc::Layout;
use std::fmt;
use std::fs::File;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::platform;
use crate::region::Region;
use crate::sim::SimDomain;

/// How the memory of a [`Mapping`] was obtained, hence how it is released.
#[derive(Debug)]
enum Kind {
    /// `mmap` (a shared file mapping, or an anonymous reservation with segments mapped into
    /// it with `MAP_FIXED`): released with one `munmap` of the whole range.
    Mapped,
    /// `alloc_zeroed` with this layout.
    Heap(Layout),
}

/// Owner of the memory behind spaces (see the module invariants).
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    kind: Kind,
    /// The opener's locked file (MP3), if any.
    lock: Option<File>,
    /// The simulated domain to detach from before the memory goes (MP4).
    sim: Option<Arc<SimDomain>>,
    /// For a simulated pool set's reservation: the end of the part that may have been written
    /// (zeroed before the reservation is kept as a spare, MP5).
    used: Option<AtomicUsize>,
}

/// Released simulated reservations (address, length), zeroed, kept for reuse (MP5).
static SPARES: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// At most this many spare reservations are kept; more are unmapped.
const MAX_SPARES: usize = 16;

fn spares() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    SPARES.lock().unwrap_or_else(|p| p.into_inner())
}

// SAFETY: the memory is only accessed through `Region` (atomics and asm), never through
// references, so moving or sharing its owner between threads cannot create a data race.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("locked", &self.lock.is_some())
            .finish_non_exhaustive()
    }
}

impl Mapping {
    /// Takes ownership of the `mmap`ed range `[ptr, ptr + len)`.
    ///
    /// # Safety
    /// `ptr`/`len` must be exactly one range returned by `mmap` (a shared file mapping or a
    /// reservation), owned by nobody else, and accessed only through [`Region`].
    pub(crate) unsafe fn mapped(ptr: NonNull<u8>, len: usize, lock: Option<File>) -> Mapping {
        Mapping { ptr, len, kind: Kind::Mapped, lock, sim: None, used: None }
    }

    /// A reservation of `len` bytes (as [`platform::reserve`] makes) for a simulated pool set:
    /// a spare one of that length if there is one (all zeros, MP5), else a fresh one. Its
    /// writers report how far they wrote with [`Mapping::note_used`].
    pub(crate) fn sim_reservation(len: usize) -> std::io::Result<Mapping> {
        let spare = {
            let mut s = spares();
            s.iter().position(|&(_, l)| l == len).map(|i| s.swap_remove(i).0)
        };
        let ptr = match spare.and_then(|a| NonNull::new(a as *mut u8)) {
            Some(p) => p,
            None => platform::reserve(len)?,
        };
        Ok(Mapping {
            ptr,
            len,
            kind: Kind::Mapped,
            lock: None,
            sim: None,
            used: Some(AtomicUsize::new(0)),
        })
    }

    /// Notes that bytes below `end` may have been written (a simulated reservation zeroes them
    /// before it is reused, MP5; a no-op for other memory).
    pub(crate) fn note_used(&self, end: usize) {
        if let Some(u) = &self.used {
            u.fetch_max(end.min(self.len), Ordering::Relaxed);
        }
    }

    /// A zeroed, 4096-aligned heap block of `len` (> 0) bytes.
    pub(crate) fn heap(len: usize) -> Result<Mapping> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| Error::InvalidArgument(format!("pool size {len} too large")))?;
        // SAFETY: `layout` has a non-zero size (`len.max(1)`).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(Error::PoolFull {
            path: PathBuf::from("<volatile>"),
            requested: len as u64,
            available: 0,
        })?;
        Ok(Mapping { ptr, len, kind: Kind::Heap(layout), lock: None, sim: None, used: None })
    }

    /// Keeps `file` (the opener's locked file) as long as the memory (MP3).
    pub(crate) fn hold_lock(&mut self, file: File) {
        self.lock = Some(file);
    }

    /// Detaches `sim` from this memory before it is released (MP4).
    pub(crate) fn detach_on_drop(&mut self, sim: Arc<SimDomain>) {
        self.sim = Some(sim);
    }

    /// First byte of the memory.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the memory in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory is an `mmap` (as opposed to the heap).
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.kind, Kind::Mapped)
    }

    /// A region over the first `len` bytes of the memory (which must not exceed its size). The
    /// caller keeps this mapping alive alongside every use of the region (MP2).
    pub(crate) fn sub_region(&self, len: usize) -> Result<Region> {
        if len > self.len {
            return Err(Error::InvalidArgument(format!(
                "memory of {} bytes is smaller than {len}",
                self.len
            )));
        }
        // SAFETY: the mapping owns `self.len >= len` bytes at `ptr`, released only when it is
        // dropped (MP1); the caller keeps it alive while the region is used (MP2); the memory
        // is accessed only through Region.
        Ok(unsafe { Region::new(self.ptr, len) })
    }

    /// A region over the whole memory. The caller keeps an `Arc` of this mapping alongside
    /// every use of the region (MP2).
    pub(crate) fn region(&self) -> Region {
        // SAFETY: the mapping owns `len` bytes at `ptr` (page-aligned: an mmap or a
        // 4096-aligned heap block), released only when the mapping is dropped (MP1); the
        // caller keeps the mapping alive as long as the region is used (MP2); the memory is
        // accessed only through Region.
        unsafe { Region::new(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(mut sim) = self.sim.take() {
            // The only reference left (no other strong or weak one): the domain goes with
            // this memory, so no capture can read a copy of it (MP4 needs none).
            let last = Arc::get_mut(&mut sim).is_some();
            sim.detach_range(self.ptr.as_ptr() as usize, self.len, last);
        }
        if let Some(used) = &self.used {
            let mut s = spares();
            if s.len() < MAX_SPARES {
                let used = used.load(Ordering::Relaxed).min(self.len);
                // SAFETY: the range lies inside this reservation, which nothing else refers to
                // any more (MP1, MP2), so no access races with these writes.
                unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, used) };
                s.push((self.ptr.as_ptr() as usize, self.len));
                return;
            }
        }
        match self.kind {
            // SAFETY: exactly the range mapped at construction (`Mapping::mapped`), including
            // any segments mapped into it with MAP_FIXED; the last holder is going (MP1, MP2).
            Kind::Mapped => unsafe { platform::unmap(self.ptr, self.len) },
            // SAFETY: allocated with exactly this layout in `Mapping::heap`; no longer used.
            Kind::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
        }
    }
}
