//! Size figures of the FPTree's DRAM side, for benchmarks and capacity planning.
//!
//! # Invariants
//! None stored: every figure is computed from the tree's current DRAM index on each call.
//!
//! # Ordering and concurrency
//! Reads DRAM only (`&self`); no persistent-memory access, no flush or fence.

use std::mem::size_of;

use super::index::Index;
use super::{KeyKind, Tree};

/// Bytes of a heap allocation of `n` bytes, as glibc's malloc serves it: 8 bytes of header,
/// rounded up to 16, at least 32 (an estimate of the allocator, not a measurement).
fn malloc_bytes(n: usize) -> usize {
    if n == 0 { 0 } else { (n + 8).div_ceil(16).max(2) * 16 }
}

impl<K: KeyKind> Tree<K> {
    /// An estimate of the DRAM bytes the inner index holds: the standard library's B-tree
    /// leaves hold up to 11 entries (bound, leaf offset) plus a parent pointer and two lengths
    /// and are on average about two thirds full after random inserts, inner B-tree nodes add
    /// about a twelfth; each byte-key bound adds its own heap allocation. An estimate (the
    /// B-tree's node layout is not a stable interface), documented in `docs/design/fptree.md`.
    /// A tree whose index is in PM ([`IndexPlacement::Persistent`](super::IndexPlacement::Persistent)) holds no DRAM index: 0.
    pub fn index_dram_bytes(&self) -> u64 {
        let index = match &self.index {
            Index::Dram(m) => m,
            Index::Persistent(_) => return 0,
        };
        let per_entry = size_of::<K::Owned>() + size_of::<u64>();
        // Eleven entries and about 16 bytes of header per B-tree leaf, 2/3 full, +1/12 inner.
        let entries = (index.len() * (per_entry * 11 + 16)).div_ceil(11);
        let nodes = entries * 3 / 2 * 13 / 12;
        let heap: usize = index
            .keys()
            .map(|k| malloc_bytes(size_of_val::<K::Key>(std::borrow::Borrow::borrow(k))))
            .sum();
        // For `u64` bounds `size_of_val` is 8 but they are inline: count only owned heap data.
        let heap = if size_of::<K::Owned>() == size_of::<u64>() { 0 } else { heap };
        (nodes + heap) as u64
    }
}
