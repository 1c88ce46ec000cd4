//! The redo transaction of every allocator operation: building it (word reads that see the
//! transaction's own writes), committing it through the slot's recovery item, and replaying a
//! committed item at recovery.
//!
//! # Invariants
//! - A transaction holds absolute new values of 8-byte words, so applying it twice is the same
//!   as applying it once (replay is idempotent, also when recovery itself crashes).
//! - An armed item's header carries the entry count and a crc32c over the count and the
//!   entries; only an item whose header matches its entries is applied.
//! - Addresses are packed as `segment << 40 | offset`: a segment id below 2^24 and an offset
//!   below 2^40 (checked when logging; a replayed address is resolved with bounds checks, and
//!   one that does not resolve is `Corrupted`).
//!
//! # Ordering (P-ALLOC-1..3)
//! Entries and the checksummed header are persisted in one barrier (P-ALLOC-1: the commit);
//! the words are stored, flushed and fenced (P-ALLOC-2); the header is cleared and persisted
//! (P-ALLOC-3), also at the end of a replay.
//!
//! # Concurrency
//! A slot's item is used only under that slot's lock (recovery runs before the allocator is
//! shared).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use ferrite_pmem::PPtr;

use super::layout::{ENTRY_BYTES, MAX_REDO, REDO_TAG, RedoEntry, S_ENTRIES, S_LOG, SLOT_BYTES};
use super::{PAllocator, corrupt};
use crate::storage::{StorageError, StorageResult};

/// A redo transaction being built: the writes, with reads that see them, the caller's
/// location, and whether it writes words shared between slots.
pub(super) struct Txn {
    writes: Vec<RedoEntry>,
    overlay: HashMap<u64, u64>,
    /// The caller's location, the pointer it holds, the pointer the operation stores.
    caller: Option<(PPtr, PPtr, PPtr)>,
    shared: bool,
}

impl Txn {
    pub(super) fn new() -> Txn {
        Txn { writes: Vec::new(), overlay: HashMap::new(), caller: None, shared: false }
    }

    /// Sets the caller's location `loc` (which holds `expect`) to `new` with this transaction.
    /// Recovery completes it only while `loc` still holds `expect` (see `docs/design/allocator.md`,
    /// "Two persist barriers per operation"); it is not a redo entry.
    pub(super) fn set_caller(&mut self, loc: PPtr, expect: PPtr, new: PPtr) {
        self.caller = Some((loc, expect, new));
    }

    /// Marks the transaction as writing words other slots' operations also write (the
    /// free-segment list, a segment entering or leaving it, a huge segment's header): its
    /// journal is disarmed synchronously, before the global lock is released (P-ALLOC-7).
    pub(super) fn mark_shared(&mut self) {
        self.shared = true;
    }
}

/// Packs a (segment, offset) address into one redo-entry word.
pub(super) fn pack_addr(segment: u64, offset: u64) -> Option<u64> {
    (segment < (1 << 24) && offset < (1 << 40)).then_some(segment << 40 | offset)
}

/// The inverse of [`pack_addr`].
pub(super) fn unpack_addr(w: u64) -> (u64, u64) {
    (w >> 40, w & ((1 << 40) - 1))
}

/// The armed header of a log holding `entries`: the checksum makes the header commit only the
/// entries it was computed over (P-ALLOC-1).
pub(super) fn redo_header(entries: &[RedoEntry]) -> u64 {
    let n = entries.len() as u64;
    let mut bytes = Vec::with_capacity(8 + ENTRY_BYTES as usize * entries.len());
    bytes.extend_from_slice(&n.to_le_bytes());
    for e in entries {
        bytes.extend_from_slice(&e.addr.to_le_bytes());
        bytes.extend_from_slice(&e.value.to_le_bytes());
    }
    n | REDO_TAG << 16 | u64::from(crc32c::crc32c(&bytes)) << 32
}

impl PAllocator {
    /// The global offset of `len` bytes at `p` (bounds-checked by the pool set).
    pub(super) fn addr(&self, p: PPtr, len: u64) -> StorageResult<u64> {
        Ok(self.set.resolve_range(p, len)?)
    }

    /// The word at (`seg`, `off`) as `txn` would leave it.
    pub(super) fn read(&self, txn: &Txn, seg: u64, off: u64) -> StorageResult<u64> {
        if let Some(w) = pack_addr(seg, off).and_then(|k| txn.overlay.get(&k)) {
            return Ok(*w);
        }
        let g = self.addr(PPtr::new(seg, off), 8)?;
        Ok(self.set.load_u64(g, Ordering::Acquire)?)
    }

    /// Logs the new value `v` of the word at (`seg`, `off`).
    pub(super) fn write(&self, txn: &mut Txn, seg: u64, off: u64, v: u64) -> StorageResult<()> {
        self.addr(PPtr::new(seg, off), 8)?;
        let k = pack_addr(seg, off)
            .ok_or_else(|| corrupt("address too large to log", PPtr::new(seg, off)))?;
        txn.writes.push(RedoEntry { addr: k, value: v });
        txn.overlay.insert(k, v);
        Ok(())
    }

    /// The raw `PPtr` at (`seg`, `off`) (not validated: see `segments.rs` for links).
    pub(super) fn read_pptr(&self, txn: &Txn, seg: u64, off: u64) -> StorageResult<PPtr> {
        let next =
            off.checked_add(8).ok_or_else(|| corrupt("pointer offset", PPtr::new(seg, off)))?;
        Ok(PPtr::new(self.read(txn, seg, off)?, self.read(txn, seg, next)?))
    }

    /// Logs `p` into the `PPtr` at (`seg`, `off`): the offset word first, the segment word
    /// (the commit word of a pointer) last.
    pub(super) fn write_pptr(
        &self,
        txn: &mut Txn,
        seg: u64,
        off: u64,
        p: PPtr,
    ) -> StorageResult<()> {
        let next =
            off.checked_add(8).ok_or_else(|| corrupt("pointer offset", PPtr::new(seg, off)))?;
        self.write(txn, seg, next, p.offset)?;
        self.write(txn, seg, off, p.segment)
    }

    /// Commits `txn` through slot `slot`'s recovery item (P-ALLOC-1..3).
    pub(super) fn commit(&self, slot: u32, mut txn: Txn) -> StorageResult<()> {
        if let Some((loc, _, new)) = txn.caller.take() {
            self.write_pptr(&mut txn, loc.segment, loc.offset, new)?;
        }
        if txn.writes.is_empty() {
            return Ok(());
        }
        if txn.writes.len() as u64 > MAX_REDO {
            return Err(StorageError::InvalidArgument(format!(
                "operation of {} writes exceeds the log",
                txn.writes.len()
            )));
        }
        let s = &*self.set;
        let b = self.addr(PPtr::new(0, self.slot_base(slot)), SLOT_BYTES)?;
        for (i, e) in txn.writes.iter().enumerate() {
            s.store_u64(b + S_ENTRIES + i as u64 * ENTRY_BYTES, e.addr, Ordering::Relaxed)?;
            s.store_u64(b + S_ENTRIES + i as u64 * ENTRY_BYTES + 8, e.value, Ordering::Relaxed)?;
        }
        s.store_u64(b + S_LOG, redo_header(&txn.writes), Ordering::Release)?;
        let len = S_ENTRIES + txn.writes.len() as u64 * ENTRY_BYTES;
        s.persist_rule("P-ALLOC-1", b, len)?; // ORDER(P-ALLOC-1): entries and checksummed header in one barrier: the commit
        self.apply(&txn.writes)?;
        s.store_u64(b + S_LOG, 0, Ordering::Release)?;
        s.persist_rule("P-ALLOC-3", b + S_LOG, 8)?; // ORDER(P-ALLOC-3): disarm only after the writes are durable
        Ok(())
    }

    /// Stores the logged words and makes them durable (P-ALLOC-2). An address that does not
    /// resolve (only possible for a replayed item of a corrupt pool) is `Corrupted`.
    fn apply(&self, writes: &[RedoEntry]) -> StorageResult<()> {
        let s = &*self.set;
        let mut lines: Vec<u64> = Vec::with_capacity(writes.len());
        for e in writes {
            let (seg, off) = unpack_addr(e.addr);
            let g = self.addr(PPtr::new(seg, off), 8).map_err(|_| {
                corrupt(format!("a redo entry's address {:#x}", e.addr), PPtr::new(seg, off))
            })?;
            if !g.is_multiple_of(8) {
                return Err(corrupt("a misaligned redo entry", PPtr::new(seg, off)));
            }
            s.store_u64(g, e.value, Ordering::Release)?;
            lines.push(g & !63);
        }
        lines.sort_unstable();
        lines.dedup();
        for l in lines {
            s.flush_rule("P-ALLOC-2", l, 64)?; // ORDER(P-ALLOC-2): the logged words
        }
        s.fence_rule("P-ALLOC-2"); // ORDER(P-ALLOC-2): durable before the item is disarmed
        Ok(())
    }

    /// Re-applies slot `slot`'s item if it committed (recovery): its header is armed and its
    /// checksum matches the entries. A header whose checksum does not match is a commit whose
    /// barrier did not complete (some entry lines, or the header, never became durable): the
    /// operation did not happen and wrote nothing outside the item, so the item is discarded.
    pub(super) fn replay(&self, slot: u32) -> StorageResult<()> {
        let s = &*self.set;
        let b = self.addr(PPtr::new(0, self.slot_base(slot)), SLOT_BYTES)?;
        let h = s.load_u64(b + S_LOG, Ordering::Acquire)?;
        if h == 0 {
            return Ok(());
        }
        let n = h & 0xffff;
        if (h >> 16) & 0xffff != REDO_TAG || n == 0 || n > MAX_REDO {
            return Err(corrupt(
                format!("recovery item of slot {slot}: header {h:#x}"),
                PPtr::new(0, self.slot_base(slot)),
            ));
        }
        let mut writes = Vec::with_capacity(n as usize);
        for i in 0..n {
            let e = b + S_ENTRIES + i * ENTRY_BYTES;
            let addr = s.load_u64(e, Ordering::Acquire)?;
            let value = s.load_u64(e + 8, Ordering::Acquire)?;
            writes.push(RedoEntry { addr, value });
        }
        if redo_header(&writes) == h {
            self.apply(&writes)?;
        }
        // Disarmed either way. (After a discard the disarm need not be durable — a crash before
        // the slot's next commit leaves the same mismatching item, discarded again — but one
        // path for both cases costs one barrier per recovered slot.)
        s.store_u64(b + S_LOG, 0, Ordering::Release)?;
        Ok(s.persist_rule("P-ALLOC-3", b + S_LOG, 8)?) // ORDER(P-ALLOC-3): disarm after the redo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_pack_and_unpack() {
        assert_eq!(unpack_addr(pack_addr(7, 123_456).unwrap()), (7, 123_456));
        assert_eq!(pack_addr(1 << 24, 0), None);
        assert_eq!(pack_addr(0, 1 << 40), None);
    }

    #[test]
    fn the_header_commits_only_its_entries() {
        let a = [RedoEntry { addr: 1, value: 2 }, RedoEntry { addr: 3, value: 4 }];
        let h = redo_header(&a);
        assert_eq!(h & 0xffff, 2);
        assert_eq!((h >> 16) & 0xffff, REDO_TAG);
        let b = [RedoEntry { addr: 1, value: 2 }, RedoEntry { addr: 3, value: 5 }];
        assert_ne!(redo_header(&b), h);
        assert_ne!(redo_header(&a[..1]), h);
    }
}
