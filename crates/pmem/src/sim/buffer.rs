//! Memory a simulated domain owns: the working images of files whose pool is gone (a closed
//! pool's copy, D4) or that never had one (files rebuilt by [`replay`](super::replay)).
//!
//! # Invariants
//! - A [`SimBuffer`] is a zeroed, 4096-aligned heap block that stays allocated, at the same
//!   address, for as long as the buffer lives; a [`Region`] it hands out is valid exactly that
//!   long. The domain keeps the buffer in the same [`SimFile`](super::files::SimFile) as the
//!   region, and drops both together, so no region outlives its memory.
//!
//! # Concurrency
//! The block is only reached through `Region` (atomic word access and relaxed word loops),
//! never through references, so sharing it between threads cannot race.

use std::alloc::Layout;
use std::path::PathBuf;
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::region::Region;

/// An owned, zeroed, 4096-aligned heap block (see the module docs).
pub(crate) struct SimBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is only accessed through `Region` (atomics and word loops), never through
// references, so moving or sharing its owner between threads cannot create a data race.
unsafe impl Send for SimBuffer {}
// SAFETY: as above.
unsafe impl Sync for SimBuffer {}

impl SimBuffer {
    /// A zeroed block of `len` bytes (at least one).
    pub(crate) fn new(len: usize) -> Result<SimBuffer> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| Error::InvalidArgument(format!("sim file size {len} too large")))?;
        // SAFETY: `layout` has a non-zero size (`len.max(1)`).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(Error::PoolFull {
            path: PathBuf::from("<sim>"),
            requested: len as u64,
            available: 0,
        })?;
        Ok(SimBuffer { ptr, layout })
    }

    /// A region over the first `len` bytes of the block (which must not exceed its size),
    /// valid while the buffer lives (the caller keeps both in one `SimFile`).
    pub(crate) fn region(&self, len: usize) -> Result<Region> {
        if len > self.layout.size() {
            return Err(Error::InvalidArgument(format!("sim buffer smaller than {len}")));
        }
        // SAFETY: the block owns `layout.size() >= len` bytes, 4096-aligned, that stay
        // allocated while the buffer lives; the domain drops the region with the buffer.
        Ok(unsafe { Region::new(self.ptr, len) })
    }
}

impl Drop for SimBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with exactly this layout in `SimBuffer::new`; the region handed
        // out for it lives in the same `SimFile` and is dropped with it.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
