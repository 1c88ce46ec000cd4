//! The redo transaction of every allocator operation: building it (word reads that see the
//! transaction's own writes), committing it through a journal in two barriers, and replaying
//! the journals at recovery (`docs/design/allocator.md`, "Two persist barriers per operation").
//!
//! # Invariants
//! - A transaction holds absolute new values of 8-byte words, so applying it twice is the same
//!   as applying it once (replay is idempotent, also when recovery itself crashes).
//! - An armed journal's header carries the entry count and a crc32c over its `seq` and slot,
//!   caller fields and entries, and its `check` word a crc32 (IEEE) of the same bytes; only a
//!   journal whose two checksums both match is applied (64 bits against a torn commit).
//! - Each operation of a slot takes the slot's next sequence number under the slot lock;
//!   `committed` (in the slot block) holds the last one committed. Of a slot's valid journals
//!   only the one with the highest `seq` can be incomplete, and only if that `seq` is at least
//!   `committed`: every other one is superseded (its operation completed before a later one of
//!   the same slot started).
//! - The caller's location is never a redo entry: recovery stores the new pointer there only
//!   while it still holds the expected one.
//! - Addresses are packed as `segment << 40 | offset`: a segment id below 2^24 and an offset
//!   below 2^40 (checked when logging; a replayed address is resolved with bounds checks, and
//!   one that does not resolve is `Corrupted`).
//!
//! # Ordering (P-ALLOC-1..3, 7)
//! The journal and the slot's `committed := seq` are persisted in one barrier (P-ALLOC-1: the
//! commit); the words and the caller's location are stored, flushed and fenced (P-ALLOC-2);
//! the journal is disarmed (P-ALLOC-3): stored and flushed, and fenced only for a transaction
//! that wrote shared words (which holds the global lock until then, P-ALLOC-7), for a slot's
//! own item (used by threads that hold no record), and in recovery. A lazy disarm becomes
//! durable at the calling thread's next fence.
//!
//! # Concurrency
//! A transaction commits under its slot's lock. A thread record is written only by the thread
//! leasing it (`journal.rs`), so a lazily disarmed line is never written by another thread
//! while its flush may be pending; a slot's item and `committed` are fenced by the thread that
//! wrote them before it releases the slot lock. Recovery runs before the allocator is shared.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use ferrite_pmem::{PPtr, PoolSet};

use super::layout::*;
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
    /// Recovery completes it only while `loc` still holds `expect`; it is not a redo entry.
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

fn push_entries(bytes: &mut Vec<u8>, entries: &[RedoEntry]) {
    for e in entries {
        bytes.extend_from_slice(&e.addr.to_le_bytes());
        bytes.extend_from_slice(&e.value.to_le_bytes());
    }
}

fn armed_header(n: u64, crc: u32) -> u64 {
    n | REDO_TAG << 16 | u64::from(crc) << 32
}

/// The armed header and the `check` word of a journal with head `h` (its `log` and `check`
/// ignored) and `entries`: the two checksums (crc32c in the header, crc32 with the IEEE
/// polynomial in `check`) make the header commit only the fields and entries they were
/// computed over (P-ALLOC-1). Two different polynomials: a torn mixture passes both only if
/// its difference is a multiple of both (degree 64), about 2^-64.
pub(super) fn journal_header(h: &JournalHead, entries: &[RedoEntry]) -> (u64, u64) {
    let n = entries.len() as u64;
    let mut bytes = Vec::with_capacity(64 + ENTRY_BYTES as usize * entries.len());
    for w in [n, h.seq_slot, h.caller, h.expect.segment, h.expect.offset] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    bytes.extend_from_slice(&h.new.segment.to_le_bytes());
    bytes.extend_from_slice(&h.new.offset.to_le_bytes());
    push_entries(&mut bytes, entries);
    (armed_header(n, crc32c::crc32c(&bytes)), u64::from(crc32fast::hash(&bytes)))
}

/// The armed header of a version-1 slot item holding `entries` (checksum over the count and
/// the entries only).
pub(super) fn v1_header(entries: &[RedoEntry]) -> u64 {
    let n = entries.len() as u64;
    let mut bytes = Vec::with_capacity(8 + ENTRY_BYTES as usize * entries.len());
    bytes.extend_from_slice(&n.to_le_bytes());
    push_entries(&mut bytes, entries);
    armed_header(n, crc32c::crc32c(&bytes))
}

/// An armed journal as read from PM.
pub(super) struct Journal {
    pub head: JournalHead,
    pub entries: Vec<RedoEntry>,
}

impl Journal {
    /// Whether its header and `check` word match its fields and entries (the commit barrier
    /// completed).
    pub fn valid(&self) -> bool {
        journal_header(&self.head, &self.entries) == (self.head.log, self.head.check)
    }
}

/// The journal at segment-0 offset `at`, if armed. Errors: `Corrupted` for an armed header
/// without the tag or with a count outside 0..=MAX_REDO.
pub(super) fn read_journal(set: &PoolSet, at: u64) -> StorageResult<Option<Journal>> {
    let g = set
        .resolve_range(PPtr::new(0, at), J_ENTRIES + MAX_REDO * ENTRY_BYTES)
        .map_err(|_| corrupt("a journal outside segment 0", PPtr::new(0, at)))?;
    let head: JournalHead = set.read_struct(g)?;
    if head.log == 0 {
        return Ok(None);
    }
    let n = head.log & 0xffff;
    if (head.log >> 16) & 0xffff != REDO_TAG || n > MAX_REDO {
        return Err(corrupt(format!("journal header {:#x}", head.log), PPtr::new(0, at)));
    }
    let mut entries = Vec::with_capacity(n as usize);
    for i in 0..n {
        let e = g + J_ENTRIES + i * ENTRY_BYTES;
        let addr = set.load_u64(e, Ordering::Acquire)?;
        let value = set.load_u64(e + 8, Ordering::Acquire)?;
        entries.push(RedoEntry { addr, value });
    }
    Ok(Some(Journal { head, entries }))
}

/// Segment-0 offsets of every journal of an allocator with `slots` slots: the slot items,
/// then the thread records.
pub(super) fn journal_offsets(slots: u32) -> impl Iterator<Item = u64> {
    let items = (0..u64::from(slots)).map(|i| A_SLOTS + i * SLOT_BYTES + S_LOG);
    let records = 0..u64::from(record_count(slots));
    items.chain(records.map(move |r| records_base(slots) + r * RECORD_BYTES))
}

/// For each slot, the journal recovery replays: the valid one with the highest `seq`, if that
/// `seq` is at least the slot's `committed`. Also returns every armed journal's offset.
pub(super) fn live_journals(
    set: &PoolSet,
    slots: u32,
) -> StorageResult<(Vec<Option<Journal>>, Vec<u64>)> {
    let mut best: Vec<Option<Journal>> = (0..slots).map(|_| None).collect();
    let mut armed = Vec::new();
    for at in journal_offsets(slots) {
        let Some(j) = read_journal(set, at)? else { continue };
        armed.push(at);
        if !j.valid() {
            continue; // its commit barrier did not complete: nothing outside it was written
        }
        let Some(b) = best.get_mut(j.head.slot() as usize) else {
            return Err(corrupt(format!("a journal of slot {}", j.head.slot()), PPtr::new(0, at)));
        };
        if b.as_ref().is_none_or(|o| o.head.seq() < j.head.seq()) {
            *b = Some(j);
        }
    }
    for (slot, b) in best.iter_mut().enumerate() {
        let c = set
            .resolve_range(PPtr::new(0, A_SLOTS + slot as u64 * SLOT_BYTES + S_COMMITTED), 8)
            .map_err(|_| corrupt("slot blocks outside segment 0", PPtr::new(0, 0)))?;
        let committed = set.load_u64(c, Ordering::Acquire)?;
        if committed > MAX_SEQ {
            return Err(corrupt(
                format!("slot {slot}'s committed {committed:#x}"),
                PPtr::new(0, 0),
            ));
        }
        if b.as_ref().is_some_and(|j| j.head.seq() < committed) {
            *b = None; // superseded: a later operation of the slot committed
        }
    }
    Ok((best, armed))
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

    /// Commits `txn` for slot `slot` (slot lock held) in two barriers (P-ALLOC-1, 2) and
    /// disarms its journal (P-ALLOC-3: lazily on the common path).
    pub(super) fn commit(&self, slot: u32, txn: Txn) -> StorageResult<()> {
        if txn.writes.is_empty() && txn.caller.is_none() {
            return Ok(());
        }
        let n = txn.writes.len() as u64;
        if n > MAX_REDO {
            return Err(StorageError::InvalidArgument(format!(
                "operation of {n} writes exceeds the log"
            )));
        }
        let s = &*self.set;
        let record = self.my_record();
        let at = match record {
            Some(r) => records_base(self.slots) + u64::from(r) * RECORD_BYTES,
            None => self.slot_base(slot) + S_LOG,
        };
        let j = self.addr(PPtr::new(0, at), J_ENTRIES + MAX_REDO * ENTRY_BYTES)?;
        let c = self.addr(PPtr::new(0, self.slot_base(slot) + S_COMMITTED), 8)?;
        let seq = self.seqs[slot as usize].load(Ordering::Relaxed) + 1;
        if seq > MAX_SEQ {
            return Err(corrupt("the slot's sequence numbers are exhausted", PPtr::new(0, 0)));
        }
        self.seqs[slot as usize].store(seq, Ordering::Relaxed);
        let (caller, expect, new) = match txn.caller {
            Some((loc, expect, new)) => {
                let k = pack_addr(loc.segment, loc.offset)
                    .ok_or_else(|| corrupt("caller location too large to log", loc))?;
                // A null location's offset word may hold anything (null is the segment word):
                // log the words it really holds, so that recovery recognises a torn write of
                // the new pointer over them.
                let expect = if expect.is_null() {
                    self.read_pptr(&Txn::new(), loc.segment, loc.offset)?
                } else {
                    expect
                };
                (k, expect, new)
            }
            None => (NO_CALLER, PPtr::NULL, PPtr::NULL),
        };
        let seq_slot = JournalHead::pack_seq(seq, slot);
        let mut head = JournalHead { log: 0, seq_slot, check: 0, caller, expect, new };
        (head.log, head.check) = journal_header(&head, &txn.writes);
        for (i, e) in txn.writes.iter().enumerate() {
            let at = j + J_ENTRIES + i as u64 * ENTRY_BYTES;
            s.store_u64(at, e.addr, Ordering::Relaxed)?;
            s.store_u64(at + 8, e.value, Ordering::Relaxed)?;
        }
        let words = [
            (J_SEQ, seq_slot),
            (J_CHECK, head.check),
            (J_CALLER, caller),
            (J_EXPECT, expect.segment),
            (J_EXPECT + 8, expect.offset),
            (J_NEW, new.segment),
            (J_NEW + 8, new.offset),
            (J_LOG, head.log),
        ];
        for (off, w) in words {
            s.store_u64(j + off, w, Ordering::Release)?;
        }
        s.store_u64(c, seq, Ordering::Release)?;
        s.flush_rule("P-ALLOC-1", j, J_ENTRIES + n * ENTRY_BYTES)?; // ORDER(P-ALLOC-1): the journal ...
        s.flush_rule("P-ALLOC-9", c, 8)?; // ORDER(P-ALLOC-9): ... and the slot's committed seq ...
        s.fence_rule("P-ALLOC-1"); // ORDER(P-ALLOC-1): ... in one barrier: the commit
        let caller = txn.caller.map(|(loc, _, new)| (loc, new));
        self.apply(&txn.writes, caller)?;
        s.store_u64(j + J_LOG, 0, Ordering::Release)?;
        s.flush_rule("P-ALLOC-3", j, 8)?; // ORDER(P-ALLOC-3): disarm after the writes are durable
        if record.is_none() || txn.shared {
            s.fence_rule("P-ALLOC-7"); // ORDER(P-ALLOC-7): synchronous disarm (shared words, or a slot item)
        }
        Ok(())
    }

    /// Stores the logged words and the caller's new pointer (`loc`, `new`) and makes them
    /// durable (P-ALLOC-2). An address that does not resolve (only possible for a replayed
    /// journal of a corrupt pool) is `Corrupted`.
    fn apply(&self, writes: &[RedoEntry], caller: Option<(PPtr, PPtr)>) -> StorageResult<()> {
        let s = &*self.set;
        let mut lines: Vec<u64> = Vec::with_capacity(writes.len() + 1);
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
        if let Some((loc, new)) = caller {
            let g = self.caller_addr(loc)?;
            s.store_u64(g + 8, new.offset, Ordering::Release)?;
            s.store_u64(g, new.segment, Ordering::Release)?; // the segment word last
            lines.push(g & !63);
        }
        lines.sort_unstable();
        lines.dedup();
        for l in lines {
            s.flush_rule("P-ALLOC-2", l, 64)?; // ORDER(P-ALLOC-2): the logged words and the caller's pointer
        }
        s.fence_rule("P-ALLOC-2"); // ORDER(P-ALLOC-2): durable before the journal is disarmed
        Ok(())
    }

    /// The global offset of a caller's location (16-aligned, inside the pool).
    fn caller_addr(&self, loc: PPtr) -> StorageResult<u64> {
        match self.addr(loc, 16) {
            Ok(g) if g.is_multiple_of(16) => Ok(g),
            _ => Err(corrupt("a journal's caller location", loc)),
        }
    }

    /// Recovery of a version-2 allocator: replays, for each slot, the journal that may be
    /// incomplete (the caller's location only while it holds the expected pointer), disarms
    /// every journal in one barrier, and continues each slot's sequence numbers.
    pub(super) fn recover_journals(&self) -> StorageResult<()> {
        let s = &*self.set;
        let (live, armed) = live_journals(s, self.slots)?;
        for (slot, j) in live.into_iter().enumerate() {
            let c = self.addr(PPtr::new(0, self.slot_base(slot as u32) + S_COMMITTED), 8)?;
            let mut seq = s.load_u64(c, Ordering::Acquire)?;
            if let Some(j) = j {
                seq = seq.max(j.head.seq());
                let caller = if j.head.caller == NO_CALLER {
                    None
                } else {
                    let (seg, off) = unpack_addr(j.head.caller);
                    let loc = PPtr::new(seg, off);
                    let g = self.caller_addr(loc)?;
                    let now = PPtr::new(
                        s.load_u64(g, Ordering::Acquire)?,
                        s.load_u64(g + 8, Ordering::Acquire)?,
                    );
                    let (e, n) = (j.head.expect, j.head.new);
                    let holds = |p: PPtr| if p.is_null() { now.is_null() } else { now == p };
                    // Before P-ALLOC-2's fence the location holds the expected pointer, the new
                    // one, or a mix of their words (the two words may tear, M1 only).
                    let mix = (now.segment == e.segment || now.segment == n.segment)
                        && (now.offset == e.offset || now.offset == n.offset);
                    ((holds(e) || mix) && !holds(n)).then_some((loc, n))
                };
                self.apply(&j.entries, caller)?;
            }
            self.seqs[slot].store(seq, Ordering::Relaxed);
        }
        if armed.is_empty() {
            return Ok(());
        }
        for &at in &armed {
            let g = self.addr(PPtr::new(0, at), 8)?;
            s.store_u64(g, 0, Ordering::Release)?;
            s.flush_rule("P-ALLOC-3", g, 8)?; // ORDER(P-ALLOC-3): disarm after the replay ...
        }
        s.fence_rule("P-ALLOC-3"); // ORDER(P-ALLOC-3): ... durable before the allocator is used
        Ok(())
    }

    /// Re-applies slot `slot`'s version-1 item if it committed (recovery of a version-1 pool,
    /// before its upgrade): its header is armed and its checksum over the count and the
    /// entries matches. A mismatch is a commit whose barrier did not complete: the operation
    /// did not happen and wrote nothing outside the item, so the item is discarded.
    pub(super) fn replay_v1(&self, slot: u32) -> StorageResult<()> {
        let s = &*self.set;
        let at = self.slot_base(slot) + S_LOG;
        let Some(j) = read_journal(s, at)? else { return Ok(()) };
        if j.entries.is_empty() {
            return Err(corrupt("a version-1 item without entries", PPtr::new(0, at)));
        }
        if v1_header(&j.entries) == j.head.log {
            self.apply(&j.entries, None)?;
        }
        let g = self.addr(PPtr::new(0, at), 8)?;
        s.store_u64(g, 0, Ordering::Release)?;
        Ok(s.persist_rule("P-ALLOC-3", g, 8)?) // ORDER(P-ALLOC-3): disarm after the redo
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
    fn the_header_commits_only_its_entries_and_fields() {
        let a = [RedoEntry { addr: 1, value: 2 }, RedoEntry { addr: 3, value: 4 }];
        let h = JournalHead {
            log: 0,
            seq_slot: JournalHead::pack_seq(9, 1),
            check: 0,
            caller: NO_CALLER,
            expect: PPtr::NULL,
            new: PPtr::NULL,
        };
        assert_eq!((h.seq(), h.slot()), (9, 1));
        let w = journal_header(&h, &a);
        assert_eq!(w.0 & 0xffff, 2);
        assert_eq!((w.0 >> 16) & 0xffff, REDO_TAG);
        assert!(w.1 != 0 && w.1 >> 32 == 0, "the check word is a zero-extended crc32");
        let b = [RedoEntry { addr: 1, value: 2 }, RedoEntry { addr: 3, value: 5 }];
        let differ = |x: (u64, u64)| x.0 != w.0 && x.1 != w.1;
        assert!(differ(journal_header(&h, &b)));
        assert!(differ(journal_header(&h, &a[..1])));
        let seq = JournalHead { seq_slot: JournalHead::pack_seq(10, 1), ..h };
        assert!(differ(journal_header(&seq, &a)), "seq");
        let slot = JournalHead { seq_slot: JournalHead::pack_seq(9, 2), ..h };
        assert!(differ(journal_header(&slot, &a)), "slot");
        let moved = JournalHead { new: PPtr::new(3, 64), ..h };
        assert!(differ(journal_header(&moved, &a)), "caller's new pointer");
        assert_ne!(v1_header(&a), v1_header(&b));
    }
}
