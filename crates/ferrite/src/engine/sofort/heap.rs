//! The value heap of one `str`/`bytes` column: append-only chunks of
//! [`HEAP_CHUNK`](super::layout::HEAP_CHUNK) bytes from PAllocator, and a DRAM map of free
//! extents (`docs/design/sofort.md` §2.1).
//!
//! # Invariants
//! - An extent is 8-aligned and a multiple of 8 bytes, inside one chunk.
//! - A byte of a chunk is in at most one of: a free extent, an extent referenced by a row
//!   that is in use and not yet collected. Free extents never overlap and never touch (they
//!   are merged with their neighbours).
//! - The map is DRAM only: at open it is the complement of the extents of live rows.
//! - Deferred map (instant recovery, `docs/design/sofort.md` §15.8): from open until
//!   [`Heap::finish`], the map holds only extents of chunks created after open (`>= base`),
//!   and an extent of an older chunk that is released goes to `released` instead; `finish`
//!   adds the complement of the older chunks' extents still referenced by the live rows of
//!   open (H1–H3 there).
//!
//! # Ordering
//! Values are written with non-temporal stores by the inserting transaction; they need no
//! flush and become durable at its commit's first fence (P-SOF-5). Chunks are created by
//! staged allocation (P-SOF-2) without initialisation.
//!
//! # Concurrency
//! One mutex per heap guards the free map and chunk creation; the chunk addresses are read
//! lock-free through the array's mirror.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::layout::*;
use super::pm::{BlockArray, Init, Pm, corrupt, lock};
use crate::storage::StorageResult;

/// Free extents, by address and by length.
#[derive(Debug, Default)]
pub(super) struct FreeMap {
    by_addr: BTreeMap<(u64, u64), u64>,
    by_len: BTreeSet<(u64, u64, u64)>,
    /// The deferred part of the map (module docs), until [`Heap::finish`].
    deferred: Option<Deferred>,
}

/// What a deferred free map waits for (`docs/design/sofort.md` §15.8).
#[derive(Debug)]
struct Deferred {
    /// Chunks below this existed at open; their free extents are not in the map yet.
    base: u64,
    /// The table's live rows at open (ascending): the rows whose extents in chunks below
    /// `base` are in use (H1).
    rows: Arc<[u64]>,
    /// Extents of chunks below `base` released since open (H2).
    released: Vec<(u64, u64, u64)>,
}

impl FreeMap {
    /// Adds a free extent, merging it with free neighbours.
    pub fn free(&mut self, chunk: u64, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut off, mut len) = (off, len);
        if let Some((&(c, o), &l)) = self.by_addr.range(..(chunk, off)).next_back()
            && c == chunk
            && o + l == off
        {
            self.remove(c, o, l);
            off = o;
            len += l;
        }
        if let Some(&l) = self.by_addr.get(&(chunk, off + len)) {
            self.remove(chunk, off + len, l);
            len += l;
        }
        self.by_addr.insert((chunk, off), len);
        self.by_len.insert((len, chunk, off));
    }

    fn remove(&mut self, chunk: u64, off: u64, len: u64) {
        self.by_addr.remove(&(chunk, off));
        self.by_len.remove(&(len, chunk, off));
    }

    /// Takes the smallest free extent of at least `len` bytes (best fit), splitting it.
    pub fn take(&mut self, len: u64) -> Option<(u64, u64)> {
        let &(l, c, o) = self.by_len.range((len, 0, 0)..).next()?;
        self.remove(c, o, l);
        if l > len {
            self.by_addr.insert((c, o + len), l - len);
            self.by_len.insert((l - len, c, o + len));
        }
        Some((c, o))
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.by_addr.values().sum()
    }

    /// Whether `[off, off + len)` of `chunk` overlaps a free extent.
    pub fn overlaps(&self, chunk: u64, off: u64, len: u64) -> bool {
        if let Some((&(c, o), &l)) = self.by_addr.range(..=(chunk, off)).next_back()
            && c == chunk
            && o + l > off
        {
            return true;
        }
        self.by_addr.range((chunk, off)..(chunk, off + len)).next().is_some()
    }
}

/// The heap of one column.
#[derive(Debug)]
pub(super) struct Heap {
    pub arr: BlockArray,
    pub free: Mutex<FreeMap>,
}

impl Heap {
    pub fn load(pm: &Pm, root: ferrite_pmem::PPtr) -> StorageResult<Heap> {
        Ok(Heap {
            arr: BlockArray::load(pm, root, HEAP_CHUNK, Init::None)?,
            free: Mutex::new(FreeMap::default()),
        })
    }

    /// Defers the free map (instant recovery, module docs): until [`Heap::finish`], only
    /// chunks created from now on hand out extents; `rows` are the table's live rows.
    pub fn defer(&self, rows: Arc<[u64]>) {
        *lock(&self.free) = FreeMap {
            deferred: Some(Deferred { base: self.arr.count(), rows, released: Vec::new() }),
            ..FreeMap::default()
        };
    }

    /// The chunks that existed at open and the live rows of open, while the map is deferred.
    pub fn deferred_rows(&self) -> Option<(u64, Arc<[u64]>)> {
        lock(&self.free).deferred.as_ref().map(|d| (d.base, Arc::clone(&d.rows)))
    }

    /// Extents kept aside while deferred (`None`: not deferred).
    #[cfg(test)]
    pub fn released(&self) -> Option<usize> {
        lock(&self.free).deferred.as_ref().map(|d| d.released.len())
    }

    /// Ends the deferral: `used` holds the extents in chunks below `base` that the live rows of
    /// open reference now (any order; read after [`Heap::defer`], H3). The chunks below `base`
    /// get the complement of `used` plus the extents released since open that `used` holds.
    pub fn finish(&self, base: u64, mut used: Vec<(u64, u64, u64)>) -> StorageResult<()> {
        used.sort_unstable();
        let mut m = FreeMap::default();
        let mut at = (0u64, 0u64);
        for &(c, o, l) in &used {
            if c >= base || o % 8 != 0 || o + l > HEAP_CHUNK || (c, o) < at {
                return Err(corrupt(
                    format!("value extent {c}:{o}+{l} overlaps another or lies outside the heap"),
                    "SOFORT heap",
                ));
            }
            while at.0 < c {
                m.free(at.0, at.1, HEAP_CHUNK - at.1);
                at = (at.0 + 1, 0);
            }
            m.free(c, at.1, o - at.1);
            at = (c, o + l);
        }
        while at.0 < base {
            m.free(at.0, at.1, HEAP_CHUNK - at.1);
            at = (at.0 + 1, 0);
        }
        let mut f = lock(&self.free);
        let Some(d) = f.deferred.take() else { return Ok(()) };
        // H2: a released extent `used` still holds (read before its row was collected) is
        // free; one it does not hold is already in the complement (its row was reused first).
        for (c, o, l) in d.released {
            if used.binary_search(&(c, o, l)).is_ok() {
                m.free(c, o, l);
            }
        }
        for ((c, o), l) in m.by_addr {
            f.free(c, o, l);
        }
        Ok(())
    }

    /// Reserves an extent of `len` (8-aligned) bytes, growing the heap if needed.
    pub fn alloc(&self, pm: &Pm, len: u64) -> StorageResult<(u64, u64)> {
        let mut f = lock(&self.free);
        if let Some(x) = f.take(len) {
            return Ok(x);
        }
        let n = self.arr.count();
        self.arr.ensure(pm, n)?;
        f.free(n, 0, HEAP_CHUNK);
        f.take(len).ok_or_else(|| corrupt("a new heap chunk has no room", "SOFORT heap"))
    }

    /// Returns an extent (while deferred, one of a chunk older than open is kept aside, H2).
    pub fn release(&self, chunk: u64, off: u64, len: u64) {
        let mut f = lock(&self.free);
        if let Some(d) = f.deferred.as_mut()
            && chunk < d.base
        {
            d.released.push((chunk, off, len));
            return;
        }
        f.free(chunk, off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_map_merges_and_best_fits() {
        let mut m = FreeMap::default();
        m.free(0, 0, 64);
        m.free(0, 128, 64);
        m.free(0, 64, 64); // joins both
        assert_eq!(m.by_addr.len(), 1);
        assert_eq!(m.free_bytes(), 192);
        m.free(1, 0, 16);
        assert_eq!(m.take(16), Some((1, 0)));
        assert_eq!(m.take(24), Some((0, 0)));
        assert_eq!(m.free_bytes(), 168);
        assert!(m.overlaps(0, 24, 8) && !m.overlaps(0, 16, 8));
        assert_eq!(m.take(1000), None);
    }
}
