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

use crate::error::Result;
use crate::mapping::Mapping;
use crate::region::Region;

/// An owned, zeroed, 4096-aligned heap block (see the module docs): a heap [`Mapping`] that the
/// domain owns, so the memory's allocation and release live in one place (`mapping.rs`).
pub(crate) struct SimBuffer(Mapping);

impl SimBuffer {
    /// A zeroed block of `len` bytes (at least one).
    pub(crate) fn new(len: usize) -> Result<SimBuffer> {
        Mapping::heap(len).map(SimBuffer)
    }

    /// A region over the first `len` bytes of the block (which must not exceed its size),
    /// valid while the buffer lives (the caller keeps both in one `SimFile`).
    pub(crate) fn region(&self, len: usize) -> Result<Region> {
        self.0.sub_region(len)
    }
}
