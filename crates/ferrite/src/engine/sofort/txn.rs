//! Transactions of the SOFORT core: slots (`TxInfo`), TXIDs and the clock, visibility, insert
//! and delete at storage level, commit (F1, F1.5, F2, finalization), abort and cooperative GC
//! (`docs/design/sofort.md` §3–5; spec §2.4–2.5, §3, §4).
//!
//! # Invariants
//! - A slot is held by at most one transaction; `TxInfo.{status, txid, commit_ts}` change only
//!   under the slot's mutex, and a field holding a TXID is finalized or undone before its slot
//!   becomes `Invalid` (so a reader that finds the slot moved on re-reads the field).
//! - A slot's published minimum is `INF` when idle, `0` while starting, its STS while Active,
//!   its commit timestamp while Committed and finalizing; `CurMinSTS` never exceeds the STS of a
//!   transaction that is or will be active (FIX-2).
//! - A garbage entry `{ts, rows}` is collected only when `ts ≤ CurMinSTS`.
//!
//! # Ordering
//! Execution persists nothing. Commit: F1 (P-SOF-5) → entries outside the header line
//! (P-SOF-6) → header line with the commit word last (P-SOF-7) → `Committed` → finalization
//! stored, not flushed (P-SOF-8): the slot's next F1 flushes its lines right before its own
//! fence, so no thread ever carries an unfenced flush of an MVCC line that a stale write-back
//! could land from after a newer persist by another thread (M3, M4). Abort: P-SOF-9
//! (nothing). Clock ceiling: P-SOF-4; epoch bump: P-SOF-3.
//!
//! # Concurrency
//! MVCC words: `Acquire` loads (`DTS` before `CTS`, FIX-1), `Release` stores (`CTS` before
//! `DTS`), `AcqRel` CAS. The clock and published minima are `SeqCst`.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ferrite_pmem::sim::thread_index;
use ferrite_pmem::{PPtr, Space};

use super::adaptive::Stmt;
use super::cont::{ContShared, ContState};
use super::ixkey::IxKey;
use super::layout::*;
use super::placement::{IndexStore, placement_code, placement_of_code};
use super::pm::{Pm, corrupt, init_null_ptrs, lock};
use super::table::{PTable, TableRef, Written, entry_bounds};
use super::{SofortError, SofortResult};
use crate::SofortIndexPlacement;
use crate::engine::common::schema_codec as codec;
use crate::error::SchemaError;
use crate::schema::{Table, TableSchema};
use crate::storage::{StorageError, StorageResult};
use crate::value::{Row, Value};

/// Status of a slot's transaction (spec §2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Invalid,
    Active,
    Committed,
    Aborted,
}

#[derive(Debug)]
pub(super) struct TxInfo {
    pub status: Status,
    pub txid: u64,
    pub commit_ts: u64,
}

/// What only the holder of the slot touches.
#[derive(Debug, Default)]
pub(super) struct SlotLocal {
    /// `{ts, rows}`, oldest first.
    pub garbage: VecDeque<(u64, Vec<(u16, u64)>)>,
    /// MVCC lines of the last finalization: stored, not flushed (P-SOF-8); the slot's next
    /// F1 or `close` flushes and fences them.
    pub pending: Vec<u64>,
    /// An empty buffer kept for the next commit's lines (no allocation per commit).
    pub spare: Vec<u64>,
    pub epoch: u64,
    pub seq: u64,
    /// Global offsets of the area's extension blocks, in chain order.
    pub ext: Vec<u64>,
    /// Global offsets of the slot's continuation log blocks (continuable transactions).
    pub log: Vec<u64>,
}

/// Aligned to two cache lines (the adjacent-line prefetcher pairs lines): threads working in
/// different slots share no line.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Slot {
    /// Held by a transaction (taken by a CAS in `begin`, released when it ends).
    pub taken: AtomicBool,
    pub info: Mutex<TxInfo>,
    pub min_ts: AtomicU64,
    pub local: Mutex<SlotLocal>,
    /// Global offset of the slot's area.
    pub area: u64,
}

impl Slot {
    pub fn new(area: u64, epoch: u64, ext: Vec<u64>) -> Slot {
        Slot {
            taken: AtomicBool::new(false),
            info: Mutex::new(TxInfo { status: Status::Invalid, txid: 0, commit_ts: INF }),
            min_ts: AtomicU64::new(INF),
            local: Mutex::new(SlotLocal { epoch, ext, ..SlotLocal::default() }),
            area,
        }
    }
}

/// The shared state of a store.
#[derive(Debug)]
pub(super) struct Inner {
    pub pm: Pm,
    pub tables: RwLock<Vec<TableRef>>,
    pub table_dir: PPtr,
    pub ddl: Mutex<()>,
    pub slots: Box<[Slot]>,
    /// `CurrentTime`.
    pub clock: AtomicU64,
    pub ceiling: AtomicU64,
    pub ceiling_lock: Mutex<()>,
    /// Cached `CurMinSTS` (a lower bound; only grows).
    pub cur_min: AtomicU64,
    pub open_epoch: u64,
    /// The highest epoch persisted.
    pub epoch: Mutex<u64>,
    pub failure_time: u64,
    pub poisoned: AtomicBool,
    /// Continuable transactions (design §14).
    pub cont: ContShared,
    /// The restart workload, fed to adaptive recovery's ranking while a ranked rebuild runs.
    pub restart: super::adaptive::RestartWorkload,
    /// The past workload, sampled at steady state and kept in PM (`past.rs`).
    pub past: super::past::PastWorkload,
    /// The catalog's format version (1: descriptors without index area).
    pub version: u32,
    /// How long a read waits for a lock to resolve, in milliseconds ([`LOCK_WAIT`]; tests
    /// shorten it).
    pub lock_wait_ms: AtomicU64,
}

enum LockState {
    Own,
    Committed(u64),
    Uncommitted,
    Retry,
    Wait,
}

/// Who holds a TXID found in an MVCC field, as far as the field's owner can tell.
enum Locker {
    /// This transaction.
    Own,
    /// A committed transaction (finalizing) with this commit timestamp.
    Committed(u64),
    /// An active transaction with this (transient) commit timestamp (`INF`: none yet).
    Active(u64),
    /// An aborting transaction, or one of a previous run that never committed.
    Uncommitted,
    /// The locker finished: re-read the field.
    Retry,
}

/// What a version of a key means for a uniqueness check (see [`TxHandle::key_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// The version does not hold the key for anyone: dead, aborted, or created and deleted by
    /// this transaction.
    Free,
    /// The version is visible to this transaction: the key is taken (`DuplicateKey`).
    Visible,
    /// Another transaction holds the version (an uncommitted insert), or it was committed
    /// after this transaction's snapshot: the insert must abort (`Conflict`).
    Conflict,
}

#[cfg(test)]
thread_local! {
    /// Test hook: a commit on this thread fails its finalization (after the commit point).
    pub(super) static FAIL_FINALIZATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long a read waits for another transaction's lock in an MVCC field to resolve (a
/// committer that holds a commit timestamp, or a slot moving on) before it gives up with
/// `Busy`: a commit takes microseconds, so a wait this long means the committer is stalled
/// (descheduled, stopped in a debugger, blocked on a slow medium), not that the store is
/// damaged. The read changed nothing and may be retried.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// A bounded wait for a lock to resolve (see [`LOCK_WAIT`]): spins a little, then yields,
/// and reads the clock (and the limit, in ms) only every so many rounds, so a read that never
/// waits pays nothing for it.
struct LockWait<'a> {
    rounds: u32,
    started: Option<Instant>,
    limit_ms: &'a AtomicU64,
}

impl<'a> LockWait<'a> {
    fn new(limit_ms: &'a AtomicU64) -> LockWait<'a> {
        LockWait { rounds: 0, started: None, limit_ms }
    }

    /// Pauses before the next look at the field; `Busy` (with `what`) once the wait has
    /// lasted its limit.
    fn pause(&mut self, what: impl FnOnce() -> String) -> SofortResult<()> {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds < 64 {
            std::hint::spin_loop();
            return Ok(());
        }
        std::thread::yield_now();
        if self.rounds.is_multiple_of(64) {
            let started = *self.started.get_or_insert_with(Instant::now);
            let limit = Duration::from_millis(self.limit_ms.load(Ordering::Relaxed));
            if started.elapsed() >= limit {
                return Err(SofortError::Busy(format!(
                    "{} after waiting {limit:?} for another transaction to finish its commit; \
                     nothing was changed, retry",
                    what(),
                )));
            }
        }
        Ok(())
    }
}

impl Inner {
    #[inline]
    pub fn s(&self) -> &Space {
        self.pm.s()
    }

    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// A statement of the core: counted by the restart workload (while a ranked rebuild runs)
    /// and sampled into the past workload.
    #[inline]
    pub fn note(&self, q: super::adaptive::Stmt) {
        self.restart.note(q);
        self.past.note(&self.pm, q);
    }

    pub fn check_poison(&self) -> SofortResult<()> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(StorageError::Poisoned.into())
        } else {
            Ok(())
        }
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    pub fn table(&self, id: u16) -> StorageResult<TableRef> {
        self.tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(usize::from(id))
            .cloned()
            .ok_or_else(|| corrupt(format!("no table {id}"), "SOFORT"))
    }

    pub fn table_by_name(&self, name: &str) -> Option<TableRef> {
        let t = self.tables.read().unwrap_or_else(|p| p.into_inner());
        t.iter().find(|t| t.name() == name).cloned()
    }

    pub fn all_tables(&self) -> Vec<TableRef> {
        self.tables.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    // ----- DDL -----

    pub fn create_table(
        &self,
        schema: TableSchema,
        placements: &[SofortIndexPlacement],
    ) -> SofortResult<TableRef> {
        self.check_poison()?;
        let table = Table::new(schema)?;
        let _g = lock(&self.ddl);
        if self.table_by_name(table.name()).is_some() {
            return Err(SchemaError::TableExists(table.name().to_owned()).into());
        }
        let id = self.tables.read().unwrap_or_else(|p| p.into_inner()).len() as u64;
        if id >= MAX_TABLES {
            return Err(StorageError::InvalidArgument(format!(
                "a store holds at most {MAX_TABLES} tables"
            ))
            .into());
        }
        let schema_bytes = codec::encode(&table)?;
        let ncols = table.arity() as u64;
        // The index area (format version 2): one entry per index, the primary key's first.
        let codes: Vec<u64> = if self.version == CATALOG_VERSION_1 {
            Vec::new()
        } else {
            (0..=table.indexes.len())
                .map(|i| placement_code(placements.get(i).copied().unwrap_or_default()))
                .collect()
        };
        let ix_off =
            if codes.is_empty() { 0 } else { t_index_area(ncols, schema_bytes.len() as u64) };
        let size = if codes.is_empty() {
            TABLE_HEAD + T_COLUMN * ncols + schema_bytes.len() as u64
        } else {
            ix_off + IX_ENTRY * codes.len() as u64
        };
        if size > crate::alloc::MAX_SMALL {
            return Err(StorageError::InvalidArgument(format!(
                "the table definition needs {size} bytes; at most {} fit",
                crate::alloc::MAX_SMALL
            ))
            .into());
        }
        let mut head = TableHead {
            magic: TABLE_MAGIC,
            table_id: id as u32,
            ncols: ncols as u32,
            schema_len: schema_bytes.len() as u32,
            crc: 0,
            chunk_rows: CHUNK_ROWS as u32,
            heap_chunk: HEAP_CHUNK as u32,
            mvcc_root: PPtr::NULL,
            ix_off: ix_off as u32,
            ix_count: codes.len() as u32,
            _pad: 0,
        };
        let code_bytes: Vec<u8> = codes.iter().flat_map(|c| c.to_le_bytes()).collect();
        head.crc = table_crc(zerocopy::IntoBytes::as_bytes(&head), &schema_bytes, &code_bytes);
        let target = PPtr::new(self.table_dir.segment, self.table_dir.offset + id * 16);
        let desc = self.pm.staged_alloc(size, target, |s, g| {
            s.write_struct(g, &head)?;
            for c in 0..ncols {
                for off in [t_values_root(c), t_heap_root(c)] {
                    s.store_u64(g + off, u64::MAX, Ordering::Relaxed)?;
                    s.store_u64(g + off + 8, 0, Ordering::Relaxed)?;
                }
            }
            s.write_bytes(g + TABLE_HEAD + T_COLUMN * ncols, &schema_bytes)?;
            for (i, &code) in codes.iter().enumerate() {
                let e = IndexEntry { root: PPtr::NULL, placement: code, _pad: 0 };
                s.write_struct(g + ix_off + i as u64 * IX_ENTRY, &e)?;
            }
            s.persist_rule("P-SOF-2", g, size)?; // ORDER(P-SOF-2): the descriptor before the directory entry
            Ok(())
        })?;
        // The trees are created after the descriptor is published (durable on return); a
        // crash in between leaves null or unfinished root slots that the next open finishes
        // (`IndexStore::open`): the table has no row yet.
        let ix = if codes.is_empty() {
            None
        } else {
            let mut stores = Vec::new();
            for (i, &code) in codes.iter().enumerate() {
                let slot = PPtr::new(desc.segment, desc.offset + ix_off + i as u64 * IX_ENTRY);
                let p = placement_of_code(code).unwrap_or_default();
                stores.push(IndexStore::open(&self.pm.alloc, slot, p)?);
            }
            Some(stores)
        };
        let t = Arc::new(PTable::load(&self.pm, id as u16, desc, table, ix)?);
        self.tables.write().unwrap_or_else(|p| p.into_inner()).push(t.clone());
        Ok(t)
    }

    // ----- slots, clock, GC -----

    pub fn begin(self: &Arc<Self>, read_only: bool) -> SofortResult<TxHandle> {
        self.check_poison()?;
        let slot = self.take_slot().ok_or_else(|| {
            SofortError::Busy(format!("all {} transaction slots are taken", self.slots.len()))
        })?;
        match self.start(slot) {
            Ok((txid, sts)) => Ok(TxHandle {
                inner: self.clone(),
                slot,
                txid,
                sts,
                read_only,
                committed_only: false,
                doomed: false,
                created: Vec::new(),
                deleted: Vec::new(),
                written: Written::default(),
                thread: thread_index(),
                moved: false,
                done: false,
                cont: None,
            }),
            Err(e) => {
                self.set_invalid(slot);
                self.release_slot(slot);
                Err(e)
            }
        }
    }

    /// Takes a free slot: the one this thread used last if it is free, else the lowest free
    /// one. A slot is taken by a CAS on its own flag, so threads that keep to their slots
    /// share no line here (a shared free list was a mutex every transaction took twice).
    fn take_slot(&self) -> Option<u32> {
        thread_local! { static LAST: std::cell::Cell<u32> = const { std::cell::Cell::new(0) }; }
        let try_take = |i: usize| {
            self.slots.get(i).is_some_and(|s| {
                !s.taken.load(Ordering::Relaxed)
                    && s.taken
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
            })
        };
        let hint = LAST.with(|c| c.get()) as usize;
        let slot = if try_take(hint) {
            hint
        } else {
            (0..self.slots.len()).find(|&i| i != hint && try_take(i))?
        };
        LAST.with(|c| c.set(slot as u32));
        Some(slot as u32)
    }

    /// Returns slot `slot` (its transaction has ended and the slot is `Invalid`).
    fn release_slot(&self, slot: u32) {
        if let Some(s) = self.slots.get(slot as usize) {
            s.taken.store(false, Ordering::Release);
        }
    }

    fn start(&self, slot: u32) -> SofortResult<(u64, u64)> {
        let s = &self.slots[slot as usize];
        let mut local = lock(&s.local);
        if local.seq > MAX_SEQ {
            self.bump_epoch(&mut local)?;
        }
        let id = txid(local.epoch, local.seq, slot);
        local.seq += 1;
        let sts = {
            let mut i = lock(&s.info);
            // FIX-2: announce the start before reading the clock.
            s.min_ts.store(0, Ordering::SeqCst);
            let sts = self.clock.load(Ordering::SeqCst);
            *i = TxInfo { status: Status::Active, txid: id, commit_ts: INF };
            s.min_ts.store(sts, Ordering::SeqCst);
            sts
        };
        self.collect(&mut local)?;
        Ok((id, sts))
    }

    fn bump_epoch(&self, local: &mut SlotLocal) -> SofortResult<()> {
        let mut e = lock(&self.epoch);
        let new = *e + 1;
        if new > MAX_EPOCH {
            return Err(StorageError::Incompatible {
                what: "every TXID epoch is used".into(),
                at: "SOFORT catalog".into(),
            }
            .into());
        }
        let s = self.s();
        s.store_u64(self.pm.cat + C_EPOCH, new, Ordering::Release)?;
        s.persist_rule("P-SOF-3", self.pm.cat + C_EPOCH, 8)?; // ORDER(P-SOF-3): the epoch before any TXID of it
        *e = new;
        local.epoch = new;
        local.seq = 0;
        Ok(())
    }

    fn set_invalid(&self, slot: u32) {
        let s = &self.slots[slot as usize];
        let mut i = lock(&s.info);
        i.status = Status::Invalid;
        i.commit_ts = INF;
        s.min_ts.store(INF, Ordering::SeqCst);
    }

    /// `CurMinSTS`: the clock (read first) and every slot's published minimum (FIX-2).
    fn refresh_min(&self) -> u64 {
        let now = self.clock.load(Ordering::SeqCst);
        let m = self.slots.iter().map(|s| s.min_ts.load(Ordering::SeqCst)).fold(now, u64::min);
        self.cur_min.fetch_max(m, Ordering::AcqRel).max(m)
    }

    /// Cooperative GC of the slot's garbage list (spec Alg. 5.13).
    fn collect(&self, local: &mut SlotLocal) -> SofortResult<()> {
        let Some(&(ts, _)) = local.garbage.front() else { return Ok(()) };
        let mut min = self.cur_min.load(Ordering::Acquire);
        if ts > min {
            min = self.refresh_min();
        }
        while local.garbage.front().is_some_and(|(ts, _)| *ts <= min) {
            let Some((_, rows)) = local.garbage.pop_front() else { break };
            for (t, r) in rows {
                self.collect_row(&*self.table(t)?, r)?;
            }
        }
        Ok(())
    }

    /// Spec Alg. 5.14: index entries out, extents freed, the row id reusable.
    fn collect_row(&self, t: &PTable, r: u64) -> SofortResult<()> {
        let s = self.s();
        let row = t.read_key_columns(s, r)?;
        t.index_remove(r, &row)?; // P-SOF-21: entries gone before the extents and the row id
        t.release_extents(s, r)?;
        t.give_back([r]);
        Ok(())
    }

    /// Undoes the creation of row `r` (never committed): tagged dead (`CTS = INF`,
    /// `DTS = tag`), its index entries removed (P-SOF-21: durably, for PM indexes, before the
    /// extents and the row id are given back).
    fn undo_create(&self, t: &PTable, r: u64, tag: u64) -> SofortResult<()> {
        let s = self.s();
        let off = t.mvcc_at(r)?;
        s.store_u64(off, INF, Ordering::Release)?;
        s.store_u64(off + 8, tag, Ordering::Release)?;
        let row = t.read_key_columns(s, r)?;
        t.index_remove(r, &row)?;
        t.release_extents(s, r)?;
        t.give_back([r]);
        Ok(())
    }

    /// Whether a slot holds TXID `txid` for a live transaction (an unfinished one that
    /// recovery kept, or one resumed from it).
    pub(super) fn holds(&self, txid: u64) -> bool {
        self.slots.get(slot_of(txid)).is_some_and(|s| {
            let i = lock(&s.info);
            i.txid == txid && i.status != Status::Invalid
        })
    }

    /// Increment-and-fetch of `CurrentTime`, raising the persisted ceiling first when the
    /// new timestamp would pass it (FIX-9).
    fn next_commit_ts(&self) -> SofortResult<u64> {
        let c = self.clock.fetch_add(1, Ordering::SeqCst) + 1;
        if c > self.ceiling.load(Ordering::Acquire) {
            let _g = lock(&self.ceiling_lock);
            if c > self.ceiling.load(Ordering::Acquire) {
                let new = c.saturating_add(TS_CEILING_STEP).min(INF - 1);
                let s = self.s();
                s.store_u64(self.pm.cat + C_CEILING, new, Ordering::Release)?;
                s.persist_rule("P-SOF-4", self.pm.cat + C_CEILING, 8)?; // ORDER(P-SOF-4): the ceiling before a timestamp above the old one
                self.ceiling.store(new, Ordering::Release);
            }
        }
        Ok(c)
    }

    /// The slot's area has room for `n` entries (extension blocks allocated if not).
    fn ensure_area(&self, slot: u32, n: u64) -> SofortResult<()> {
        let s = &self.slots[slot as usize];
        let mut local = lock(&s.local);
        let beyond = n.saturating_sub(INLINE_ENTRIES + AREA_MORE_ENTRIES);
        let need = beyond.div_ceil(EXT_ENTRIES) as usize;
        while local.ext.len() < need {
            let target = match local.ext.last() {
                None => self.pm.set().to_pptr(s.area + A_EXT)?,
                Some(&g) => self.pm.set().to_pptr(g + EXT_NEXT)?,
            };
            let b = self
                .pm
                .staged_alloc(EXT_BYTES, target, |s, g| init_null_ptrs(s, g + EXT_NEXT, 16))?;
            local.ext.push(self.pm.set().resolve_range(b, EXT_BYTES)?);
        }
        Ok(())
    }

    /// Global offset of entry `i` (≥ 4) of a slot's area.
    fn entry_at(&self, area: u64, ext: &[u64], i: u64) -> StorageResult<u64> {
        let j = i - INLINE_ENTRIES;
        if j < AREA_MORE_ENTRIES {
            return Ok(area + A_MORE + j * 8);
        }
        let k = j - AREA_MORE_ENTRIES;
        ext.get((k / EXT_ENTRIES) as usize)
            .map(|g| g + (k % EXT_ENTRIES) * 8)
            .ok_or_else(|| corrupt("area extension missing", "SOFORT area"))
    }

    /// The durable part of a commit: F1, F1.5, F2 (the commit point), `Committed`, then the
    /// finalization. Returns whether the commit point was reached when it fails.
    fn persist_commit(&self, h: &TxHandle, c: u64) -> (bool, SofortResult<()>) {
        let s = self.s();
        let slot = &self.slots[h.slot as usize];
        let mut local = lock(&slot.local);
        let me = thread_index();
        let mut lines = std::mem::take(&mut local.spare);
        lines.clear();
        // The previous finalization's lines: stored, never flushed (P-SOF-8), so no thread
        // holds a write-back of them that could land later with older content.
        let prev = std::mem::take(&mut local.pending);
        let step = |lines: &mut Vec<u64>| -> SofortResult<()> {
            // F1 (P-SOF-5).
            for &(t, r) in h.created.iter().chain(&h.deleted) {
                lines.push(self.table(t)?.mvcc_at(r)? & !63);
            }
            lines.sort_unstable();
            lines.dedup();
            for &l in lines.iter() {
                s.flush_rule("P-SOF-5", l, 64)?; // ORDER(P-SOF-5): every lock durable before the area can commit
            }
            for &l in prev.iter().filter(|l| lines.binary_search(l).is_err()) {
                s.flush_rule("P-SOF-5", l, 64)?; // ORDER(P-SOF-5): the previous finalization durable before its area is rewritten
            }
            for &(g, len) in &h.written.cached {
                s.flush_rule("P-SOF-5", g, len)?; // ORDER(P-SOF-5): values written with ordinary stores
            }
            if h.moved || me != h.thread {
                for &(g, len) in &h.written.nt {
                    s.flush_rule("P-SOF-5", g, len)?; // ORDER(P-SOF-5): values written on another thread (M4)
                }
            }
            s.fence_rule("P-SOF-5"); // ORDER(P-SOF-5): locks, values, previous finalization durable
            // F1.5 (P-SOF-6).
            let entries = || h.created.iter().chain(&h.deleted).map(|&(t, r)| entry(t, r));
            let n = (h.created.len() + h.deleted.len()) as u64;
            if n > INLINE_ENTRIES {
                let mut runs: Vec<(u64, u64)> = Vec::new();
                for (i, e) in entries().enumerate().skip(INLINE_ENTRIES as usize) {
                    let g = self.entry_at(slot.area, &local.ext, i as u64)?;
                    s.store_u64(g, e, Ordering::Relaxed)?;
                    match runs.last_mut() {
                        Some((start, len)) if *start + *len == g => *len += 8,
                        _ => runs.push((g, 8)),
                    }
                }
                for (g, len) in runs {
                    s.flush_rule("P-SOF-6", g, len)?; // ORDER(P-SOF-6): entries beyond the header line before it
                }
                s.fence_rule("P-SOF-6"); // ORDER(P-SOF-6): entries durable before the commit word
            }
            // F2 (P-SOF-7): txid first (kills the old commit word), the commit word last.
            let a = slot.area;
            let counts = h.created.len() as u64 | (h.deleted.len() as u64) << 32;
            s.store_u64(a + A_TXID, h.txid, Ordering::Release)?;
            s.store_u64(a + A_COMMIT_TS, c, Ordering::Release)?;
            s.store_u64(a + A_COUNTS, counts, Ordering::Release)?;
            for (i, e) in entries().take(INLINE_ENTRIES as usize).enumerate() {
                s.store_u64(a + A_INLINE + i as u64 * 8, e, Ordering::Release)?;
            }
            s.store_u64(a + A_COMMIT, h.txid, Ordering::Release)?;
            s.flush_rule("P-SOF-7", a, 64)?; // ORDER(P-SOF-7): the header line, commit word last (M2)
            s.fence_rule("P-SOF-7"); // ORDER(P-SOF-7): the commit point
            Ok(())
        };
        if let Err(e) = step(&mut lines) {
            // Not committed: the previous finalization still waits for a fence.
            local.pending = prev;
            return (false, Err(e));
        }
        // Visible only now (spec §3.11).
        {
            let mut i = lock(&slot.info);
            i.status = Status::Committed;
            slot.min_ts.store(c, Ordering::SeqCst);
        }
        // Finalization (P-SOF-8): stores only. Its lines are flushed by the slot's next F1 (or
        // `close`), on whatever thread runs it, right before that thread's fence. An unfenced
        // flush here would stay pending on this thread until its own next fence, which may
        // come after another thread has written and persisted newer content on these lines
        // (a later lock or finalization): the old content would then overwrite it (M3, M4).
        let fin = || -> SofortResult<()> {
            #[cfg(test)]
            if FAIL_FINALIZATION.with(|f| f.get()) {
                return Err(StorageError::Poisoned.into());
            }
            for &(t, r) in &h.created {
                s.store_u64(self.table(t)?.mvcc_at(r)?, c, Ordering::Release)?;
            }
            for &(t, r) in &h.deleted {
                s.store_u64(self.table(t)?.mvcc_at(r)? + 8, c, Ordering::Release)?;
            }
            Ok(())
        };
        let r = fin();
        if h.cont.is_some()
            && let Some(&head) = local.log.first()
        {
            // P-SOF-33: the log's clear rides with the finalization: flushed by the slot's
            // next F1, before that commit's F2 can rewrite the area.
            if let Err(e) = s.store_u64(head + L_TXID, 0, Ordering::Release) {
                local.pending = lines;
                return (true, Err(e.into()));
            }
            lines.push(head);
        }
        local.pending = lines;
        let mut prev = prev;
        prev.clear();
        local.spare = prev;
        if !h.deleted.is_empty() {
            local.garbage.push_back((c, h.deleted.clone()));
        }
        (true, r)
    }

    /// Makes every pending finalization durable (P-SOF-11) and closes the pool cleanly.
    pub fn close(self) -> SofortResult<()> {
        let s = self.s();
        for slot in self.slots.iter() {
            for &l in &lock(&slot.local).pending {
                s.flush_rule("P-SOF-11", l, 64)?; // ORDER(P-SOF-11): pending finalizations before a clean close
            }
        }
        s.fence_rule("P-SOF-11"); // ORDER(P-SOF-11): finalizations durable
        // The tables' trees share the allocator: drop them before closing it.
        let Inner { pm, tables, .. } = self;
        drop(tables);
        match Arc::try_unwrap(pm.alloc) {
            Ok(alloc) => Ok(alloc.close()?),
            Err(_) => Err(StorageError::InvalidArgument(
                "the allocator is still shared: a table handle is still held".into(),
            )
            .into()),
        }
    }
}

/// A transaction of the SOFORT core. Dropping an unfinished one aborts it.
pub struct TxHandle {
    pub(super) inner: Arc<Inner>,
    pub(super) slot: u32,
    pub(super) txid: u64,
    pub(super) sts: u64,
    pub(super) read_only: bool,
    /// Validation view: this transaction's own locks count as uncommitted (its creations
    /// invisible, its deletions not effective), so a re-run read sees committed data only.
    pub(super) committed_only: bool,
    /// `willAbort`: a conflict was met; the transaction can only abort.
    pub(super) doomed: bool,
    pub(super) created: Vec<(u16, u64)>,
    pub(super) deleted: Vec<(u16, u64)>,
    /// Ranges written into rows (flushed at commit; the non-temporal ones only if the
    /// transaction changed threads).
    pub(super) written: Written,
    pub(super) thread: u32,
    pub(super) moved: bool,
    pub(super) done: bool,
    /// Continuable transactions: what is durable so far (design §14).
    pub(super) cont: Option<Box<ContState>>,
}

impl std::fmt::Debug for TxHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxHandle")
            .field("slot", &self.slot)
            .field("txid", &format_args!("{:#x}", self.txid))
            .field("sts", &self.sts)
            .field("read_only", &self.read_only)
            .field("doomed", &self.doomed)
            .field("created", &self.created.len())
            .field("deleted", &self.deleted.len())
            .finish()
    }
}

impl Drop for TxHandle {
    fn drop(&mut self) {
        self.finish_abort();
    }
}

impl TxHandle {
    /// The TXID.
    pub fn txid(&self) -> u64 {
        self.txid
    }

    /// The start timestamp (the snapshot).
    pub fn sts(&self) -> u64 {
        self.sts
    }

    /// Whether a conflict doomed the transaction.
    pub fn is_doomed(&self) -> bool {
        self.doomed
    }

    /// Rows created `(table id, row id)`, in order.
    pub fn created(&self) -> &[(u16, u64)] {
        &self.created
    }

    /// Rows deleted `(table id, row id)`, in order.
    pub fn deleted(&self) -> &[(u16, u64)] {
        &self.deleted
    }

    /// A handle for an unfinished transaction recovery kept (design §14): the same TXID, STS
    /// and slot; its locks and values are durable already, so nothing is left to flush but
    /// its MVCC lines (the commit's F1 does).
    pub(super) fn resumed(
        inner: Arc<Inner>,
        slot: u32,
        txid: u64,
        sts: u64,
        created: Vec<(u16, u64)>,
        deleted: Vec<(u16, u64)>,
        cont: ContState,
    ) -> TxHandle {
        TxHandle {
            inner,
            slot,
            txid,
            sts,
            read_only: false,
            committed_only: false,
            doomed: false,
            created,
            deleted,
            written: Written::default(),
            thread: thread_index(),
            moved: false,
            done: false,
            cont: Some(Box::new(cont)),
        }
    }

    pub(super) fn live(&self) -> SofortResult<()> {
        if self.done {
            return Err(StorageError::InvalidArgument("the transaction has ended".into()).into());
        }
        self.inner.check_poison()
    }

    fn writable(&mut self) -> SofortResult<()> {
        self.live()?;
        if self.read_only {
            return Err(
                StorageError::InvalidArgument("a write in a read-only transaction".into()).into()
            );
        }
        if self.doomed {
            return Err(SofortError::Conflict("the transaction already met a conflict".into()));
        }
        if thread_index() != self.thread {
            self.moved = true;
        }
        Ok(())
    }

    /// Dooms the transaction (`willAbort`): an engine-level check met a conflict.
    pub fn doom(&mut self) {
        self.doomed = true;
    }

    fn conflict(&mut self, what: String) -> SofortError {
        self.doomed = true;
        SofortError::Conflict(what)
    }

    fn locker(&self, field: u64) -> Locker {
        if field == self.txid {
            return Locker::Own;
        }
        let inner = &self.inner;
        // An older epoch's TXID is uncommitted unless its slot still holds it: an unfinished
        // continuable transaction that recovery kept (design §14).
        // A recovered one whose slot moved on has ended: its fields were finalized or undone
        // before the slot was released, so a re-read finds the new value.
        if epoch_of(field) < inner.open_epoch && !inner.cont.is_recovered(field) {
            return Locker::Uncommitted;
        }
        let Some(s) = inner.slots.get(slot_of(field)) else { return Locker::Uncommitted };
        let i = lock(&s.info);
        if i.txid != field || i.status == Status::Invalid {
            return Locker::Retry;
        }
        match i.status {
            Status::Committed => Locker::Committed(i.commit_ts),
            Status::Active => Locker::Active(i.commit_ts),
            _ => Locker::Uncommitted,
        }
    }

    /// How a lock in an MVCC field reads at `at` (FIX-5 for every reader): a committed locker
    /// by its timestamp; an active locker that already holds a commit timestamp `<= at` is
    /// waited for (it commits or aborts within its `commit` call); any other locker is not
    /// committed at `at` (creation invisible, deletion not effective). Read-write
    /// transactions read the same way: a locker that commits later gets a larger timestamp
    /// than theirs or is caught by their validation (commit timestamps are taken under the
    /// slot mutex, so a reader never misses one `<= at`).
    fn lock_state(&self, field: u64, at: u64) -> LockState {
        match self.locker(field) {
            Locker::Own if self.committed_only => LockState::Uncommitted,
            Locker::Own => LockState::Own,
            Locker::Committed(c) => LockState::Committed(c),
            Locker::Active(c) if c <= at => LockState::Wait,
            Locker::Active(_) | Locker::Uncommitted => LockState::Uncommitted,
            Locker::Retry => LockState::Retry,
        }
    }

    /// Whether row `r` of `t` is visible at `at` to this transaction (spec Alg. 5.1/5.2 with
    /// FIX-1, and FIX-5's rule for every reader: see `lock_state`). Reads never conflict;
    /// write-write conflicts are caught by `delete`, read-write ones by the engine's
    /// validation ([`TxHandle::range_changed`]).
    pub fn visible_at(&mut self, t: &PTable, r: u64, at: u64) -> SofortResult<bool> {
        self.live()?;
        let s = self.inner.s();
        let off = t.mvcc_at(r)?;
        let mut wait = LockWait::new(&self.inner.lock_wait_ms);
        let busy = || format!("table {:?} row {r}: a lock did not resolve", t.name());
        loop {
            let dts = s.load_u64(off + 8, Ordering::Acquire)?;
            let cts = s.load_u64(off, Ordering::Acquire)?;
            if cts == 0 || dts == 0 {
                return Ok(false);
            }
            if is_ts(dts) {
                if at >= dts {
                    return Ok(false);
                }
            } else {
                match self.lock_state(dts, at) {
                    LockState::Own => return Ok(false),
                    LockState::Committed(c) if at >= c => return Ok(false),
                    LockState::Committed(_) | LockState::Uncommitted => {}
                    LockState::Retry | LockState::Wait => {
                        wait.pause(busy)?;
                        continue;
                    }
                }
            }
            if is_ts(cts) {
                return Ok(at >= cts);
            }
            return match self.lock_state(cts, at) {
                LockState::Own => Ok(true),
                LockState::Committed(c) => Ok(at >= c),
                LockState::Uncommitted => Ok(false),
                LockState::Retry | LockState::Wait => {
                    wait.pause(busy)?;
                    continue;
                }
            };
        }
    }

    /// Whether row `r` is visible in this transaction's snapshot.
    pub fn visible(&mut self, t: &PTable, r: u64) -> SofortResult<bool> {
        let at = self.sts;
        self.visible_at(t, r, at)
    }

    /// The store's persistent space (for index reads that may scan rows: `rebuild.rs`).
    pub(super) fn space(&self) -> &Space {
        self.inner.s()
    }

    /// Row `r`'s values (whatever its visibility).
    pub fn read_row(&self, t: &PTable, r: u64) -> SofortResult<Row> {
        Ok(t.read_row(self.inner.s(), r)?)
    }

    /// The row with encoded primary key `pk` visible at `at`, with its row id.
    pub fn get_at(&mut self, t: &PTable, pk: &[u8], at: u64) -> SofortResult<Option<(u64, Row)>> {
        self.inner.note(Stmt::Get { table: t.id.into() });
        let Some(rows) = t.pk_rows(self.inner.s(), &IxKey::new(pk))? else { return Ok(None) };
        for &r in rows.as_slice() {
            if self.visible_at(t, r, at)? {
                let row = t.read_row(self.inner.s(), r)?;
                if t.key_of(None, &row) == pk {
                    return Ok(Some((r, row)));
                }
            }
        }
        Ok(None)
    }

    /// The row with encoded primary key `pk` in this transaction's snapshot.
    pub fn get(&mut self, t: &PTable, pk: &[u8]) -> SofortResult<Option<(u64, Row)>> {
        let at = self.sts;
        self.get_at(t, pk, at)
    }

    /// The rows visible at `at` whose key in `index` (`None`: the primary key; `Some(i)`:
    /// secondary index `i`: its entry, index columns then primary key) lies in `(lower, upper)`, in key
    /// order (then row id), at most `limit`.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_at(
        &mut self,
        t: &PTable,
        index: Option<usize>,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        ascending: bool,
        limit: usize,
        at: u64,
    ) -> SofortResult<Vec<(u64, Row)>> {
        let ix = index.map(|i| u32::try_from(i).unwrap_or(u32::MAX));
        self.inner.note(Stmt::Scan { table: t.id.into(), index: ix });
        let batch_len = t.scan_batch(index, 64)?;
        let (mut lo, mut hi) = entry_bounds(lower, upper);
        let mut out = Vec::new();
        while out.len() < limit {
            let batch = t.candidates(self.inner.s(), index, &lo, &hi, ascending, batch_len)?;
            for (k, r) in &batch {
                if out.len() >= limit {
                    break;
                }
                if self.visible_at(t, *r, at)? {
                    let row = t.read_row(self.inner.s(), *r)?;
                    if *k == *t.key_of(index, &row) {
                        out.push((*r, row));
                    }
                }
            }
            match batch.last() {
                Some(last) if batch.len() == batch_len => {
                    if ascending {
                        lo = Bound::Excluded(last.clone());
                    } else {
                        hi = Bound::Excluded(last.clone());
                    }
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// Inserts a new version (spec Alg. 5.6 without the persistent create set): values, then
    /// `CTS = txid`, `DTS = INF`, then index entries. Returns its row id.
    pub fn insert(&mut self, t: &PTable, row: &[Value]) -> SofortResult<u64> {
        self.writable()?;
        self.inner.note(Stmt::Insert { table: t.id.into() });
        t.table.check_row(row)?;
        let keys = t.keys(row);
        if t.pm_index {
            t.check_keys(&keys)?;
        }
        let inner = self.inner.clone();
        let s = inner.s();
        let r = t.take_row(&inner.pm)?;
        let cached = self.written.cached.len();
        let nt = self.written.nt.len();
        if let Err(e) = t.write_values(&inner.pm, r, row, &mut self.written) {
            t.give_back([r]);
            return Err(e);
        }
        let off = t.mvcc_at(r)?;
        s.store_u64(off, self.txid, Ordering::Release)?;
        s.store_u64(off + 8, INF, Ordering::Release)?;
        if t.pm_index {
            // P-SOF-20: a PM index entry is durable as soon as it is inserted; recovery must
            // find the row in use and compute its key from durable values to delete it if the
            // transaction does not commit.
            for &(g, len) in &self.written.cached[cached..] {
                s.flush_rule("P-SOF-20", g, len)?; // ORDER(P-SOF-20): the row's values before its PM index entries
            }
            s.flush_rule("P-SOF-20", off & !63, 64)?; // ORDER(P-SOF-20): the row's MVCC lock before its PM index entries
            s.fence_rule("P-SOF-20"); // ORDER(P-SOF-20): values (non-temporal ones drained too) and lock durable
        }
        if let Err(e) = t.index_add_keys(r, keys) {
            // As an abort of this one creation: the row is tagged dead, its entries removed,
            // its extents and id given back (their non-temporal stores drained first,
            // P-SOF-12; P-SOF-20's fence drained them already for PM indexes).
            if !t.pm_index {
                self.drain_nt(nt)?;
            }
            let tag = inner.cur_min.load(Ordering::Acquire).max(inner.failure_time + 1);
            inner.undo_create(t, r, tag)?;
            return Err(e);
        }
        self.created.push((t.id, r));
        Ok(r)
    }

    /// Locks row `r` for deletion (`CAS(DTS, INF or an older-epoch TXID → txid)`). Anything
    /// else in `DTS` is a write-write conflict.
    pub fn delete(&mut self, t: &PTable, r: u64) -> SofortResult<()> {
        self.writable()?;
        self.inner.note(Stmt::Write { table: t.id.into() });
        let s = self.inner.s();
        let off = t.mvcc_at(r)? + 8;
        let mut cur = INF;
        loop {
            match s.cas_u64(off, cur, self.txid, Ordering::AcqRel, Ordering::Acquire)? {
                Ok(_) => break,
                Err(a) if a == self.txid => {
                    return Err(StorageError::InvalidArgument(format!(
                        "row {r} is already deleted by this transaction"
                    ))
                    .into());
                }
                Err(a)
                    if is_txid(a)
                        && epoch_of(a) < self.inner.open_epoch
                        && a != cur
                        && !self.inner.cont.is_recovered(a) =>
                {
                    cur = a
                }
                Err(_) => {
                    return Err(self.conflict(format!(
                        "row {r} of {:?} is locked or deleted by another transaction",
                        t.name()
                    )));
                }
            }
        }
        self.deleted.push((t.id, r));
        Ok(())
    }

    /// Replaces version `r` with a new one holding `row` (spec §3.10: delete + insert).
    /// If the insert fails (a value too large, a full pool), the delete is undone: a failed
    /// update has no effect.
    pub fn update(&mut self, t: &PTable, r: u64, row: &[Value]) -> SofortResult<u64> {
        self.inner.note(Stmt::Write { table: t.id.into() });
        t.table.check_row(row)?;
        self.delete(t, r)?;
        match self.insert(t, row) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.undelete(t, r)?;
                Err(e)
            }
        }
    }

    /// Undoes this transaction's latest `delete` of row `r` (its lock released).
    fn undelete(&mut self, t: &PTable, r: u64) -> SofortResult<()> {
        if self.deleted.last() == Some(&(t.id, r)) {
            self.deleted.pop();
            let off = t.mvcc_at(r)? + 8;
            let s = self.inner.s();
            let _ = s.cas_u64(off, self.txid, INF, Ordering::AcqRel, Ordering::Acquire)?;
        }
        Ok(())
    }

    /// What version `r` of `t` means for inserting its key (a uniqueness check; the engine
    /// runs it under its per-table key lock, see [`KeyState`]).
    pub fn key_state(&mut self, t: &PTable, r: u64) -> SofortResult<KeyState> {
        let sts = self.sts;
        if self.visible_at(t, r, sts)? {
            return Ok(KeyState::Visible);
        }
        let s = self.inner.s();
        let off = t.mvcc_at(r)?;
        let mut wait = LockWait::new(&self.inner.lock_wait_ms);
        loop {
            let cts = s.load_u64(off, Ordering::Acquire)?;
            if is_ts(cts) || cts == 0 {
                // Committed (or dead): it conflicts only if committed after the snapshot.
                let newer = cts != INF && cts != 0 && cts > sts;
                return Ok(if newer { KeyState::Conflict } else { KeyState::Free });
            }
            return Ok(match self.locker(cts) {
                Locker::Own | Locker::Uncommitted => KeyState::Free,
                Locker::Committed(c) if c <= sts => KeyState::Free,
                Locker::Committed(_) | Locker::Active(_) => KeyState::Conflict,
                Locker::Retry => {
                    wait.pause(|| format!("table {:?} row {r}: a lock did not resolve", t.name()))?;
                    continue;
                }
            });
        }
    }

    /// Validation of one read (spec Alg. 5.9 with FIX-3, as a comparison of two snapshots):
    /// whether the **committed** rows (this transaction's own writes ignored) of `index`'s
    /// range `(lower, upper)` that pass `keep` differ between the snapshot and `at` (the commit
    /// timestamp). A version changed if it is visible at one time and not at the other. A
    /// locker holding a commit timestamp `<= at` is waited for, so a concurrent committer that
    /// precedes `at` is never missed (FIX-3's case).
    #[allow(clippy::too_many_arguments)]
    pub fn range_changed(
        &mut self,
        t: &PTable,
        index: Option<usize>,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        keep: &dyn Fn(&[Value]) -> bool,
        at: u64,
    ) -> SofortResult<bool> {
        let batch_len = t.scan_batch(index, 256)?;
        let sts = self.sts;
        self.committed_only = true;
        let (mut lo, hi) = entry_bounds(lower, upper);
        let mut result = Ok(false);
        'outer: loop {
            let batch = match t.candidates(self.inner.s(), index, &lo, &hi, true, batch_len) {
                Ok(b) => b,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            for (k, r) in &batch {
                let before = self.visible_at(t, *r, sts);
                let after = self.visible_at(t, *r, at);
                match (before, after) {
                    (Ok(a), Ok(b)) if a == b => {}
                    (Ok(_), Ok(_)) => {
                        let row = match t.read_row(self.inner.s(), *r) {
                            Ok(row) => row,
                            Err(e) => {
                                result = Err(e.into());
                                break 'outer;
                            }
                        };
                        if *k == *t.key_of(index, &row) && keep(&row) {
                            result = Ok(true);
                            break 'outer;
                        }
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        result = Err(e);
                        break 'outer;
                    }
                }
            }
            match batch.last() {
                Some(last) if batch.len() == batch_len => lo = Bound::Excluded(last.clone()),
                _ => break,
            }
        }
        self.committed_only = false;
        result
    }

    /// Commits without validation (for tests and callers that validated already).
    pub fn commit(self) -> SofortResult<u64> {
        self.commit_with(|_, _| Ok(()))
    }

    /// Commits: read-only → nothing persisted, returns the STS; else takes the commit
    /// timestamp `c`, runs `validate(self, c)` (the engine's serializability check; an error
    /// aborts), makes the transaction durable (F1, F1.5, F2) and finalizes it. Returns `c`.
    pub fn commit_with(
        mut self,
        validate: impl FnOnce(&mut TxHandle, u64) -> SofortResult<()>,
    ) -> SofortResult<u64> {
        if let Err(e) = self.live() {
            self.finish_abort();
            return Err(e);
        }
        if self.doomed {
            self.finish_abort();
            return Err(SofortError::Conflict("the transaction met a conflict".into()));
        }
        if self.created.is_empty() && self.deleted.is_empty() {
            if self.cont.is_some()
                && let Err(e) = self.clear_log_durably()
            {
                self.inner.poison();
                self.finish_abort();
                return Err(e);
            }
            self.done = true;
            self.inner.set_invalid(self.slot);
            self.inner.release_slot(self.slot);
            return Ok(self.sts);
        }
        let inner = self.inner.clone();
        let n = (self.created.len() + self.deleted.len()) as u64;
        if self.created.len() as u64 > MAX_ENTRIES || self.deleted.len() as u64 > MAX_ENTRIES {
            self.finish_abort();
            return Err(
                StorageError::InvalidArgument(format!("{n} rows in one transaction")).into()
            );
        }
        if let Err(e) = inner.ensure_area(self.slot, n) {
            self.finish_abort();
            return Err(e);
        }
        // The timestamp is taken and published under the slot mutex: a reader that locks the
        // mutex after reading a clock value `>= c` then finds `commit_ts = c` and waits
        // (FIX-5), instead of the `INF` of a locker that has not stored it yet.
        let c = {
            let mut info = lock(&inner.slots[self.slot as usize].info);
            match inner.next_commit_ts() {
                Ok(c) => {
                    info.commit_ts = c;
                    c
                }
                Err(e) => {
                    drop(info);
                    inner.poison();
                    self.finish_abort();
                    return Err(e);
                }
            }
        };
        let v = validate(&mut self, c);
        if let Err(e) = v.and_then(|()| {
            if self.doomed {
                Err(SofortError::Conflict("validation met a conflict".into()))
            } else {
                Ok(())
            }
        }) {
            self.finish_abort();
            return Err(e);
        }
        // ORDER(P-SOF-5): F1, F1.5 and F2, each persist named inside (the finalization persists nothing)
        let (committed, r) = inner.persist_commit(&self, c);
        if !committed {
            inner.poison();
            self.finish_abort();
            return Err(r.err().unwrap_or(StorageError::Poisoned.into()));
        }
        self.done = true;
        inner.set_invalid(self.slot);
        inner.release_slot(self.slot);
        if let Err(e) = r {
            // Past the commit point (durable and visible): the failure is the handle's, not
            // the transaction's. Reporting `Err` here made a retrying application apply the
            // transaction twice ([R2]); the store is poisoned and the next open finalizes.
            tracing::error!(
                error = %e,
                commit_ts = c,
                "SOFORT commit: finalization failed after the commit point; the transaction is \
                 committed, the store is poisoned until it is reopened"
            );
            inner.poison();
        }
        Ok(c)
    }

    /// Ends the handle without undoing anything, as a crash would leave it (tests only).
    #[cfg(test)]
    pub(super) fn abandon(mut self) {
        self.done = true;
    }

    /// Rolls back (spec Alg. 5.10; P-SOF-9: nothing is persisted).
    pub fn abort(mut self) {
        self.finish_abort();
    }

    fn finish_abort(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        {
            let mut i = lock(&self.inner.slots[self.slot as usize].info);
            i.status = Status::Aborted;
        }
        if self.cont.is_some() && self.clear_log_durably().is_err() {
            self.inner.poison();
        }
        if self.undo().is_err() {
            self.inner.poison();
        }
        self.inner.set_invalid(self.slot);
        self.inner.release_slot(self.slot);
    }

    /// P-SOF-32: a continuable transaction's log is cleared durably before its undo
    /// stores, so recovery never keeps locks that the abort has started to release; and at a
    /// commit that wrote nothing (no area names it, so nothing else tells recovery it ended).
    fn clear_log_durably(&self) -> SofortResult<()> {
        if let Some(head) = self.inner.clear_log(self.slot)? {
            let s = self.inner.s();
            s.persist_rule("P-SOF-32", head + L_TXID, 8)?; // ORDER(P-SOF-32): the log no longer names the transaction before any undo store
        }
        Ok(())
    }

    /// P-SOF-12: this transaction's values written with non-temporal stores (from the
    /// `from`-th range on) are durable before their extents go back to the heap. Those
    /// stores stay pending on the writing thread until its next fence, outside coherence
    /// (M4; M6 does not cover them): released undrained, they could land over the value of
    /// a later transaction that reuses the extent and commits first ([R2] item 3). Ranges
    /// written on another thread are flushed here too, as F1 does (P-SOF-5). Costs one fence
    /// per abort that wrote such values, none otherwise.
    fn drain_nt(&self, from: usize) -> SofortResult<()> {
        let ranges = self.written.nt.get(from..).unwrap_or_default();
        if ranges.is_empty() {
            return Ok(());
        }
        let s = self.inner.s();
        if self.moved || thread_index() != self.thread {
            for &(g, len) in ranges {
                s.flush_rule("P-SOF-12", g, len)?; // ORDER(P-SOF-12): values written on another thread (M4)
            }
        }
        s.fence_rule("P-SOF-12"); // ORDER(P-SOF-12): non-temporal values drained before their extents are freed
        Ok(())
    }

    fn undo(&self) -> SofortResult<()> {
        let inner = &*self.inner;
        let s = inner.s();
        if !self.created.is_empty() {
            self.drain_nt(0)?;
        }
        // Deletions first (spec §3.12): a created-then-deleted row ends up tagged.
        for &(t, r) in &self.deleted {
            let off = inner.table(t)?.mvcc_at(r)? + 8;
            let _ = s.cas_u64(off, self.txid, INF, Ordering::AcqRel, Ordering::Acquire)?;
        }
        // FIX-8: the tag is a timestamp after the failure time.
        let tag = inner.cur_min.load(Ordering::Acquire).max(inner.failure_time + 1);
        for &(t, r) in &self.created {
            inner.undo_create(&*inner.table(t)?, r, tag)?;
        }
        Ok(())
    }
}
