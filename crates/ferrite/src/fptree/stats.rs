//! Size figures of the FPTree's DRAM side, for benchmarks and capacity planning.
//!
//! # Invariants
//! None stored: every figure is computed from the tree's current DRAM index on each call.
//!
//! # Ordering and concurrency
//! Reads DRAM only (`&self`); no persistent-memory access, no flush or fence.

use super::Tree;
use super::index::Index;
use super::olc::IndexKey;

impl<K: IndexKey> Tree<K> {
    /// The DRAM bytes the inner index holds ([`super::olc::OlcIndex::memory_bytes`]: its node
    /// arena, key words and directories as allocated, so partly filled chunks count whole).
    /// A tree whose index is in PM ([`IndexPlacement::Persistent`](super::IndexPlacement::Persistent)) holds no DRAM index: 0.
    pub fn index_dram_bytes(&self) -> u64 {
        match &self.index {
            Index::Dram(m) => m.memory_bytes(),
            Index::Persistent(_) => 0,
        }
    }
}
