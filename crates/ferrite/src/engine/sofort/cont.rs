//! Continuable transactions (spec §6, `docs/design/sofort.md` §14): an opt-in transaction
//! whose every statement is durable when the statement ends (still invisible until commit),
//! and which `open` hands back after a crash, to be resumed or aborted.
//!
//! # Invariants
//! - A slot's continuation log names at most one transaction (`L_TXID`, 0: none). Its
//!   records up to the durable end (`L_STATE`) name every row the first `statements`
//!   statements created or deleted, and every read they recorded; each such lock and value was
//!   durable before the state word that covers its record (P-SOF-30, P-SOF-31).
//! - A log naming transaction `T` means `T` is unfinished unless `T`'s area holds a committed
//!   `T`; a commit clears the log before the slot's next commit can rewrite the area
//!   (the clear is flushed by that commit's F1, P-SOF-33), an abort clears it durably before it
//!   undoes anything (P-SOF-32).
//! - Recovery keeps exactly the locks the durable records name (`CTS == T` of a logged
//!   create, `DTS == T` of a logged delete); every other field holding `T` belongs to the
//!   statement that was running and is undone like any uncommitted TXID. An unfinished
//!   transaction keeps its TXID, its STS and its slot; versions deleted after the oldest such
//!   STS are not collected by recovery (they go to a slot's garbage list instead).
//! - Decoding a log never panics: a bad magic, version, checksum, tag, length or position is
//!   `Corrupted`.
//!
//! # Ordering
//! Statement end: records and the statement's locks and values flushed, fence (P-SOF-30);
//! then the state word (statement count and record end) persisted (P-SOF-31). Abort: the log
//! cleared and persisted before the undo stores (P-SOF-32). Commit: the clear is a store whose
//! line joins the slot's pending finalization lines (P-SOF-33). Non-continuable transactions
//! never touch a log.
//!
//! # Concurrency
//! A slot's log is written only by the holder of the slot (under the slot-local mutex for its
//! block list); the list of unfinished transactions is one mutex.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferrite_pmem::{PPtr, Space};

use super::layout::*;
use super::pm::{Pm, corrupt, lock};
use super::txn::{Inner, SlotLocal, TxHandle};
use super::{SofortError, SofortResult};
use crate::storage::{StorageError, StorageResult};

const K_CREATE: u8 = 1;
const K_DELETE: u8 = 2;
const K_READ: u8 = 3;
/// The rest of the block is unused: records go on in the next block.
const K_SKIP: u8 = 0x7f;

/// Read records `(table id, payload)`, in the order they were made.
pub type ReadRecords = Vec<(u16, Vec<u8>)>;

/// Longest payload of one record (a record never spans blocks).
pub const MAX_RECORD: u64 = L_NEXT - L_DATA - 16;

fn bad(what: impl Into<String>) -> StorageError {
    corrupt(what, "SOFORT continuation log")
}

/// What a continuable transaction has made durable so far (kept in its handle).
#[derive(Clone, Debug, Default)]
pub(super) struct ContState {
    /// Statements completed (the persisted counter).
    pub statements: u32,
    /// Durable end of the records.
    pub pos: u32,
    /// Created and deleted rows already logged; written ranges already flushed.
    pub created: usize,
    pub deleted: usize,
    pub cached: usize,
    pub nt: usize,
}

/// An unfinished transaction found by recovery, not yet resumed or aborted.
#[derive(Clone, Debug)]
pub(super) struct Recovered {
    pub slot: u32,
    pub txid: u64,
    pub sts: u64,
    pub statements: u32,
    pub pos: u32,
    pub created: Vec<(u16, u64)>,
    pub deleted: Vec<(u16, u64)>,
    /// Read records `(table id, payload)` (the engine's encoding).
    pub reads: ReadRecords,
    pub since: Instant,
}

/// What a caller sees of an unfinished transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfinishedTxn {
    pub txid: u64,
    pub statements: u32,
    pub since: Instant,
}

/// The shared continuation state of a store.
#[derive(Debug, Default)]
pub(super) struct ContShared {
    /// Global offset of the continuation directory (0: none yet).
    pub dir: Mutex<u64>,
    pub unfinished: Mutex<Vec<Recovered>>,
    /// TXIDs of the transactions recovery kept (sorted; fixed after open): the only older
    /// epoch TXIDs that may still be locks.
    pub recovered: Vec<u64>,
}

impl ContShared {
    /// Whether `txid` (of an older epoch) belongs to a transaction recovery kept.
    pub fn is_recovered(&self, txid: u64) -> bool {
        !self.recovered.is_empty() && self.recovered.binary_search(&txid).is_ok()
    }
}

/// One record: `kind | table << 16 | stmt << 32`, `len | crc << 32`, payload padded to 8.
fn record(out: &mut Vec<u8>, kind: u8, table: u16, stmt: u32, payload: &[u8]) {
    let w0 = u64::from(kind) | u64::from(table) << 16 | u64::from(stmt) << 32;
    let len = payload.len() as u32;
    let crc = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&w0.to_le_bytes()), &len.to_le_bytes()),
        payload,
    );
    out.extend_from_slice(&w0.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len().next_multiple_of(8), 0);
}

fn rec_len(payload: u64) -> u64 {
    16 + payload.next_multiple_of(8)
}

fn null_or_zero(p: PPtr) -> bool {
    p.is_null() || (p.segment == 0 && p.offset == 0)
}

impl Inner {
    /// The continuation directory, made at the first use (P-SOF-2).
    fn cont_dir(&self) -> SofortResult<u64> {
        let mut d = lock(&self.cont.dir);
        if *d == 0 {
            let n = self.slots.len() as u64 * 16;
            let p = self.pm.staged_alloc(n, self.pm.in_catalog(C_CONT_DIR), |s, g| {
                super::pm::init_null_ptrs(s, g, n)
            })?;
            *d = self.pm.set().resolve_range(p, n)?;
        }
        Ok(*d)
    }

    /// Appends a log block to the slot's chain (its first block gets a header).
    fn add_log_block(&self, slot: u32, local: &mut SlotLocal) -> SofortResult<u64> {
        let target = match local.log.last() {
            None => self.pm.set().to_pptr(self.cont_dir()? + u64::from(slot) * 16)?,
            Some(&g) => self.pm.set().to_pptr(g + L_NEXT)?,
        };
        let first = local.log.is_empty();
        let b = self.pm.staged_alloc(LOG_BYTES, target, |s, g| {
            s.fill(g, L_DATA, 0)?;
            if first {
                s.store_u64(g + L_MAGIC, LOG_MAGIC, Ordering::Relaxed)?;
                s.store_u64(g + L_VERSION, LOG_VERSION, Ordering::Relaxed)?;
            }
            s.store_u64(g + L_NEXT, u64::MAX, Ordering::Relaxed)?;
            s.store_u64(g + L_NEXT + 8, 0, Ordering::Relaxed)?;
            s.persist_rule("P-SOF-2", g, L_DATA)?; // ORDER(P-SOF-2): an empty log header before publication
            s.persist_rule("P-SOF-2", g + L_NEXT, 16)?; // ORDER(P-SOF-2): a null next pointer before publication
            Ok(())
        })?;
        let g = self.pm.set().resolve_range(b, LOG_BYTES)?;
        local.log.push(g);
        Ok(g)
    }

    /// Starts a continuable read-write transaction: a normal one whose slot's log header names
    /// it (stored only: the first statement end makes it durable).
    pub fn begin_continuable(self: &Arc<Self>) -> SofortResult<TxHandle> {
        let mut h = Inner::begin(self, false)?;
        let slot = h.slot;
        let head = {
            let mut local = lock(&self.slots[slot as usize].local);
            match local.log.first() {
                Some(&g) => g,
                None => self.add_log_block(slot, &mut local)?,
            }
        };
        // The TXID last: the header line becomes durable in store order (M2), so a header
        // naming this transaction never shows a previous transaction's count and records.
        let s = self.s();
        let pos = log_pos(0, L_DATA);
        s.store_u64(head + L_STATE, u64::from(pos), Ordering::Release)?;
        s.store_u64(head + L_STS, h.sts, Ordering::Release)?;
        s.store_u64(head + L_TXID, h.txid, Ordering::Release)?;
        h.cont = Some(Box::new(ContState { pos, ..ContState::default() }));
        Ok(h)
    }

    /// Clears the slot's log header (stored, not flushed); returns its line.
    pub(super) fn clear_log(&self, slot: u32) -> StorageResult<Option<u64>> {
        let local = lock(&self.slots[slot as usize].local);
        let Some(&head) = local.log.first() else { return Ok(None) };
        self.s().store_u64(head + L_TXID, 0, Ordering::Release)?;
        Ok(Some(head))
    }

    /// The unfinished transactions recovery found and nobody has claimed yet.
    pub fn unfinished(&self) -> Vec<UnfinishedTxn> {
        lock(&self.cont.unfinished)
            .iter()
            .map(|r| UnfinishedTxn { txid: r.txid, statements: r.statements, since: r.since })
            .collect()
    }

    /// Claims unfinished transaction `txid`: a handle that carries on (same TXID, STS and
    /// slot), and its read records `(table id, payload)` for the engine's validation.
    pub fn resume(self: &Arc<Self>, txid: u64) -> SofortResult<(TxHandle, ReadRecords)> {
        self.check_poison()?;
        let r = {
            let mut u = lock(&self.cont.unfinished);
            let i = u
                .iter()
                .position(|r| r.txid == txid)
                .ok_or(SofortError::UnknownTransaction(txid))?;
            u.swap_remove(i)
        };
        let cont = ContState {
            statements: r.statements,
            pos: r.pos,
            created: r.created.len(),
            deleted: r.deleted.len(),
            cached: 0,
            nt: 0,
        };
        let h = TxHandle::resumed(self.clone(), r.slot, r.txid, r.sts, r.created, r.deleted, cont);
        Ok((h, r.reads))
    }

    /// Writes `recs` (whole records) at the log position `pos`, moving to the next block (made
    /// if needed) when a record does not fit. Returns the new end and the ranges to flush.
    fn append_log(
        &self,
        slot: u32,
        pos: u32,
        recs: &[Vec<u8>],
    ) -> SofortResult<(u32, Vec<(u64, u64)>)> {
        let s = self.s();
        let mut local = lock(&self.slots[slot as usize].local);
        let (mut b, mut off) = unlog_pos(pos);
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for r in recs {
            let len = r.len() as u64;
            if off + len > L_NEXT {
                let g = *local.log.get(b as usize).ok_or_else(|| bad("log block missing"))?;
                if off + 8 <= L_NEXT {
                    s.store_u64(g + off, u64::from(K_SKIP), Ordering::Relaxed)?;
                    ranges.push((g + off, 8));
                }
                b += 1;
                off = 0;
                if local.log.len() <= b as usize {
                    self.add_log_block(slot, &mut local)?;
                }
            }
            let g = *local.log.get(b as usize).ok_or_else(|| bad("log block missing"))?;
            s.write_bytes(g + off, r)?;
            match ranges.last_mut() {
                Some((start, l)) if *start + *l == g + off => *l += len,
                _ => ranges.push((g + off, len)),
            }
            off += len;
        }
        if b > 0xffff {
            return Err(StorageError::InvalidArgument(
                "a continuable transaction's log is full".into(),
            )
            .into());
        }
        Ok((log_pos(b, off), ranges))
    }
}

impl TxHandle {
    /// Whether this is a continuable transaction.
    pub fn is_continuable(&self) -> bool {
        self.cont.is_some()
    }

    /// Ends a statement of a continuable transaction (no-op otherwise): logs the rows it
    /// created and deleted and its `reads` (`(table id, payload)`), flushes them with its
    /// locks and values, fences (P-SOF-30), then persists the statement counter and the
    /// records' end (P-SOF-31), whose line also carries the header's TXID and STS.
    pub fn statement_end(&mut self, reads: &[(u16, Vec<u8>)]) -> SofortResult<()> {
        let Some(c) = self.cont.as_deref().cloned() else { return Ok(()) };
        self.live()?;
        if reads.iter().any(|(_, p)| p.len() as u64 > MAX_RECORD) {
            return Err(StorageError::InvalidArgument(format!(
                "a read record of a continuable transaction holds at most {MAX_RECORD} bytes"
            ))
            .into());
        }
        let inner = self.inner.clone();
        let s = inner.s();
        let stmt = c.statements;
        let next = stmt.checked_add(1).ok_or_else(|| {
            StorageError::InvalidArgument("a continuable transaction of 2^32 statements".into())
        })?;
        let mut recs = Vec::new();
        let mut lines = Vec::new();
        for (kind, list, from) in
            [(K_CREATE, &self.created, c.created), (K_DELETE, &self.deleted, c.deleted)]
        {
            for &(t, r) in list.iter().skip(from) {
                let mut rec = Vec::with_capacity(24);
                record(&mut rec, kind, t, stmt, &r.to_le_bytes());
                recs.push(rec);
                lines.push(inner.table(t)?.mvcc_at(r)? & !63);
            }
        }
        for (t, p) in reads {
            let mut rec = Vec::with_capacity(p.len() + 16);
            record(&mut rec, K_READ, *t, stmt, p);
            recs.push(rec);
        }
        let (pos, ranges) = inner.append_log(self.slot, c.pos, &recs)?;
        let head = *lock(&inner.slots[self.slot as usize].local)
            .log
            .first()
            .ok_or_else(|| bad("log block missing"))?;
        lines.sort_unstable();
        lines.dedup();
        for &l in &lines {
            s.flush_rule("P-SOF-30", l, 64)?; // ORDER(P-SOF-30): the statement's locks before its records count
        }
        for &(g, len) in self.written.cached.iter().skip(c.cached) {
            s.flush_rule("P-SOF-30", g, len)?; // ORDER(P-SOF-30): values written with ordinary stores
        }
        if self.moved || ferrite_pmem::sim::thread_index() != self.thread {
            for &(g, len) in self.written.nt.iter().skip(c.nt) {
                s.flush_rule("P-SOF-30", g, len)?; // ORDER(P-SOF-30): values written on another thread (M4)
            }
        }
        // The header's TXID and STS (stored at begin) share the state word's line and were
        // stored before it: with M2 they are durable no later than it (P-SOF-31 flushes it).
        for &(g, len) in &ranges {
            s.flush_rule("P-SOF-30", g, len)?; // ORDER(P-SOF-30): the statement's records
        }
        s.fence_rule("P-SOF-30"); // ORDER(P-SOF-30): records, locks, values durable before the counter
        let state = u64::from(next) << 32 | u64::from(pos);
        s.store_u64(head + L_STATE, state, Ordering::Release)?;
        s.persist_rule("P-SOF-31", head + L_STATE, 8)?; // ORDER(P-SOF-31): the statement is complete
        self.cont = Some(Box::new(ContState {
            statements: next,
            pos,
            created: self.created.len(),
            deleted: self.deleted.len(),
            cached: self.written.cached.len(),
            nt: self.written.nt.len(),
        }));
        Ok(())
    }

    /// Statements completed (continuable transactions; 0 otherwise).
    pub fn statements(&self) -> u32 {
        self.cont.as_ref().map_or(0, |c| c.statements)
    }
}

/// What recovery found in the continuation logs.
#[derive(Debug, Default)]
pub(super) struct Logs {
    /// Global offset of the directory (0: none).
    pub dir: u64,
    /// Per slot: its log blocks in chain order.
    pub blocks: Vec<Vec<u64>>,
    /// Unfinished transactions.
    pub unfinished: Vec<Recovered>,
    /// Header lines of logs whose transaction committed: cleared by recovery (P-SOF-10).
    pub finished: Vec<u64>,
}

impl Logs {
    /// Every log block, for the overlap check of open.
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let dir = (self.dir != 0).then_some((self.dir, self.blocks.len() as u64 * 16));
        dir.into_iter().chain(self.blocks.iter().flatten().map(|&g| (g, LOG_BYTES)))
    }
}

/// Reads every continuation log (read-only; recovery's first phase). `areas` are the slots'
/// areas (to tell a committed transaction from an unfinished one), `epoch` the epoch of the
/// run that crashed, `failure_time` the bound of every stored timestamp.
pub(super) fn load(
    pm: &Pm,
    areas: &[(u64, Vec<u64>)],
    epoch: u64,
    failure_time: u64,
) -> StorageResult<Logs> {
    let s = pm.s();
    let p = s.load_pptr(pm.cat + C_CONT_DIR)?;
    let mut logs = Logs::default();
    if null_or_zero(p) {
        return Ok(logs);
    }
    let n = areas.len() as u64;
    logs.dir = pm.at(p, n * 16, "continuation directory")?;
    let mut seen = std::collections::HashSet::new();
    for (slot, (area, _)) in areas.iter().enumerate() {
        let mut blocks = Vec::new();
        let mut p = s.load_pptr(logs.dir + slot as u64 * 16)?;
        while !p.is_null() {
            let g = pm.at(p, LOG_BYTES, "continuation log block")?;
            if !seen.insert(g) {
                return Err(bad("a log chain loops or two logs share a block"));
            }
            blocks.push(g);
            p = s.load_pptr(g + L_NEXT)?;
        }
        if let Some(&head) = blocks.first() {
            if s.load_u64(head + L_MAGIC, Ordering::Acquire)? != LOG_MAGIC {
                return Err(bad(format!("slot {slot}: bad magic")));
            }
            let v = s.load_u64(head + L_VERSION, Ordering::Acquire)?;
            if v != LOG_VERSION {
                return Err(StorageError::Incompatible {
                    what: format!("continuation log version {v} (this build reads {LOG_VERSION})"),
                    at: "SOFORT continuation log".into(),
                });
            }
            let txid = s.load_u64(head + L_TXID, Ordering::Acquire)?;
            if txid != 0 {
                let committed = s.load_u64(area + A_TXID, Ordering::Acquire)? == txid
                    && s.load_u64(area + A_COMMIT, Ordering::Acquire)? == txid;
                if !is_txid(txid) || epoch_of(txid) > epoch || slot_of(txid) != slot {
                    return Err(bad(format!("slot {slot}: TXID {txid:#x}")));
                }
                if committed {
                    logs.finished.push(head);
                } else {
                    let r = read_log(s, slot as u32, txid, &blocks, failure_time)?;
                    logs.unfinished.push(r);
                }
            }
        }
        logs.blocks.push(blocks);
    }
    Ok(logs)
}

/// Decodes one unfinished transaction's log.
fn read_log(
    s: &Space,
    slot: u32,
    txid: u64,
    blocks: &[u64],
    failure_time: u64,
) -> StorageResult<Recovered> {
    let head = blocks[0];
    let sts = s.load_u64(head + L_STS, Ordering::Acquire)?;
    if !is_ts(sts) || sts == INF || sts > failure_time {
        return Err(bad(format!("slot {slot}: start timestamp {sts:#x}")));
    }
    let state = s.load_u64(head + L_STATE, Ordering::Acquire)?;
    let statements = (state >> 32) as u32;
    let pos = state as u32;
    let end = unlog_pos(pos);
    if end.0 as usize >= blocks.len() || end.1 > L_NEXT || (end.0 == 0 && end.1 < L_DATA) {
        return Err(bad(format!("slot {slot}: records end at {pos:#x}")));
    }
    let mut r = Recovered {
        slot,
        txid,
        sts,
        statements,
        pos,
        created: Vec::new(),
        deleted: Vec::new(),
        reads: Vec::new(),
        since: Instant::now(),
    };
    let (mut b, mut off) = (0u64, L_DATA);
    while (b, off) < end {
        if off + 8 > L_NEXT {
            (b, off) = (b + 1, 0);
            continue;
        }
        let g = blocks[b as usize];
        let w0 = s.load_u64(g + off, Ordering::Acquire)?;
        let kind = w0 as u8;
        if kind == K_SKIP {
            (b, off) = (b + 1, 0);
            continue;
        }
        if off + 16 > L_NEXT {
            return Err(bad(format!("slot {slot}: a record header crosses its block")));
        }
        let w1 = s.load_u64(g + off + 8, Ordering::Acquire)?;
        let len = w1 & 0xffff_ffff;
        let total = rec_len(len);
        if off + total > L_NEXT || (b, off + total) > end {
            return Err(bad(format!("slot {slot}: a record of {len} bytes overruns the log")));
        }
        let mut payload = vec![0u8; len as usize];
        s.read_into(g + off + 16, &mut payload)?;
        let crc = crc32c::crc32c_append(
            crc32c::crc32c_append(crc32c::crc32c(&w0.to_le_bytes()), &(len as u32).to_le_bytes()),
            &payload,
        );
        if crc != (w1 >> 32) as u32 {
            return Err(bad(format!("slot {slot}: record checksum mismatch")));
        }
        let table = (w0 >> 16) as u16;
        let stmt = (w0 >> 32) as u32;
        if stmt >= statements {
            return Err(bad(format!(
                "slot {slot}: a record of statement {stmt} below the end of {statements}"
            )));
        }
        let row = || -> StorageResult<u64> {
            let bytes: [u8; 8] = payload
                .as_slice()
                .try_into()
                .map_err(|_| bad(format!("slot {slot}: a row record of {len} bytes")))?;
            let row = u64::from_le_bytes(bytes);
            if row >= MAX_ROWS {
                return Err(bad(format!("slot {slot}: row {row}")));
            }
            Ok(row)
        };
        match kind {
            K_CREATE => r.created.push((table, row()?)),
            K_DELETE => r.deleted.push((table, row()?)),
            K_READ => r.reads.push((table, payload)),
            k => return Err(bad(format!("slot {slot}: record kind {k}"))),
        }
        off += total;
    }
    Ok(r)
}
