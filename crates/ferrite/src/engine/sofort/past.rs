//! The past workload (`WoPast` of seed 001 eq. 6.3): sampled statement counts recorded at
//! steady state and kept in a small PM block, so that adaptive recovery's first ranking after
//! a crash follows what the workload did before it (`docs/design/sofort.md` §16.1; spec §7
//! [GAP] "where the past workload lives", decided here).
//!
//! # Invariants
//! - The counts are per statement shape ([`Stmt`]: table id and index position, never a
//!   pointer), cumulative over the store's runs (seeded from the block at open), halved when
//!   their sum passes [`AGE_AT`] (old runs fade).
//! - The block holds two copies; the selector word names the valid one (its generation: copy
//!   `gen & 1`, 0 = none written yet). A copy is only written while the selector names the
//!   other one, and each copy carries its generation and a CRC32C over its head and entries:
//!   after any crash, the selected copy is the last one completely written (never a mix of
//!   two snapshots).
//! - The block is advisory: a bad pointer, magic, version or checksum is reported
//!   ([`PastLoad::ignored`]) and logged, never an error of `open`. A block whose magic or
//!   version this build does not know is never written (a newer build's block is left alone).
//!
//! # Ordering
//! P-SOF-2 (the block's creation through a staged allocation, published in the catalog's
//! mutable word [`C_PAST`]), P-SOF-50 (the inactive copy durable before the selector names it),
//! P-SOF-51 (the selector durable before the next write begins on the other copy).
//!
//! # Concurrency
//! Sampling is a thread-local countdown: a statement that is not sampled touches no shared
//! state but one relaxed load of the sampling rate. A sampled statement (1 in
//! [`DEFAULT_SAMPLE_EVERY`] by default) takes the counts' mutex for one increment; the thread
//! whose sample crosses the write threshold writes the block (writers are serialized by their
//! own mutex; a thread that finds a write running skips, the next threshold writes).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ferrite_pmem::PPtr;

use super::SofortResult;
use super::adaptive::Stmt;
use super::layout::C_PAST;
use super::pm::{Pm, lock};
use crate::storage::StorageResult;

/// "FERRPAST".
pub const PAST_MAGIC: u64 = u64::from_le_bytes(*b"FERRPAST");
/// Format version of the past block.
pub const PAST_VERSION: u32 = 1;
/// Entries one copy holds (the most frequent shapes are kept).
pub const PAST_CAPACITY: u32 = 250;
/// Bytes of one copy: a 64-byte head, then 16 bytes per entry.
pub const COPY_BYTES: u64 = 64 + PAST_CAPACITY as u64 * 16;
/// Bytes of the block: a 64-byte header line, then the two copies.
pub const PAST_BYTES: u64 = 64 + 2 * COPY_BYTES;
/// Header: magic at 0, `version | capacity << 32` at 8, the selector at 16.
const H_VERSION: u64 = 8;
const H_SELECTOR: u64 = 16;
/// Copy head: generation at 0, `entries | crc << 32` at 8, sampled statements at 16.
const K_GEN: u64 = 0;
const K_META: u64 = 8;
const K_TOTAL: u64 = 16;
const K_ENTRIES: u64 = 64;

const _: () = assert!(PAST_BYTES == 8192 && PAST_BYTES <= crate::alloc::MAX_SMALL);

/// Sample one statement in this many per thread by default.
pub const DEFAULT_SAMPLE_EVERY: u32 = 64;
/// Write the block every this many sampled statements by default.
pub const DEFAULT_PERSIST_EVERY: u64 = 4096;
/// When the sampled total passes this, every count is halved.
pub const AGE_AT: u64 = 1 << 24;

thread_local! {
    /// Statements since this thread's last sample (any store).
    static SINCE_SAMPLE: Cell<u32> = const { Cell::new(0) };
}

/// What `open` found of the past workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PastLoad {
    /// Sampled statements the loaded copy holds (0: none).
    pub statements: u64,
    /// Why a block was ignored (bad pointer, magic, version or checksum), if one was.
    pub ignored: Option<String>,
}

#[derive(Debug, Default)]
struct Counts {
    map: HashMap<Stmt, u64>,
    total: u64,
    /// Sampled since the last write began.
    unwritten: u64,
}

#[derive(Debug, Default)]
struct Writer {
    /// The block's global offset (0: not made yet).
    block: u64,
    /// A block this build must not write (unknown magic or version, bad pointer), or a
    /// failed write: recording goes on in DRAM only.
    disabled: bool,
}

/// The past workload of a store (see the module docs).
#[derive(Debug)]
pub(super) struct PastWorkload {
    every: AtomicU32,
    persist_every: AtomicU64,
    counts: Mutex<Counts>,
    writer: Mutex<Writer>,
    /// Blocks written since open (for tests and reports).
    writes: AtomicU64,
}

impl Default for PastWorkload {
    fn default() -> Self {
        PastWorkload {
            every: AtomicU32::new(DEFAULT_SAMPLE_EVERY),
            persist_every: AtomicU64::new(DEFAULT_PERSIST_EVERY),
            counts: Mutex::default(),
            writer: Mutex::default(),
            writes: AtomicU64::new(0),
        }
    }
}

fn encode(q: &Stmt) -> u64 {
    let (kind, table, index) = match *q {
        Stmt::Get { table } => (0u64, table, 0u64),
        Stmt::Scan { table, index } => (1, table, index.map_or(0, |i| u64::from(i) + 1)),
        Stmt::Insert { table } => (2, table, 0),
        Stmt::Write { table } => (3, table, 0),
    };
    kind | u64::from(table & 0xff_ffff) << 8 | index << 32
}

fn decode(w: u64) -> Option<Stmt> {
    let table = ((w >> 8) & 0xff_ffff) as u32;
    let index = (w >> 32) as u32;
    match (w & 0xff, index) {
        (0, 0) => Some(Stmt::Get { table }),
        (1, i) => Some(Stmt::Scan { table, index: i.checked_sub(1) }),
        (2, 0) => Some(Stmt::Insert { table }),
        (3, 0) => Some(Stmt::Write { table }),
        _ => None,
    }
}

/// A copy's checksum: generation, entry count, total and the entries' bytes.
fn copy_crc(generation: u64, n: u32, total: u64, entries: &[u8]) -> u32 {
    let mut head = [0u8; 20];
    head[..8].copy_from_slice(&generation.to_le_bytes());
    head[8..12].copy_from_slice(&n.to_le_bytes());
    head[12..].copy_from_slice(&total.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&head), entries)
}

/// The counts, most frequent first (ties by shape).
fn sorted(map: &HashMap<Stmt, u64>) -> Vec<(Stmt, u64)> {
    let mut v: Vec<(Stmt, u64)> = map.iter().map(|(q, n)| (*q, *n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// The text name of a shape (reports and test hooks): `get t0`, `scan t1 primary`,
/// `scan t1 i0`, `insert t0`, `write t0`.
pub fn shape_name(q: &Stmt) -> String {
    match *q {
        Stmt::Get { table } => format!("get t{table}"),
        Stmt::Scan { table, index: None } => format!("scan t{table} primary"),
        Stmt::Scan { table, index: Some(i) } => format!("scan t{table} i{i}"),
        Stmt::Insert { table } => format!("insert t{table}"),
        Stmt::Write { table } => format!("write t{table}"),
    }
}

impl PastWorkload {
    /// Sets the sampling (`every` statements per thread, 0: off) and the write threshold
    /// (sampled statements between block writes, 0: only at close and on request).
    pub fn configure(&self, every: u32, persist_every: u64) {
        self.every.store(every, Ordering::Relaxed);
        self.persist_every.store(persist_every, Ordering::Relaxed);
    }

    /// Counts statement `q` if this thread's countdown samples it; writes the block when the
    /// sample crosses the threshold. Never fails (the data is advisory).
    #[inline]
    pub fn note(&self, pm: &Pm, q: Stmt) {
        let every = self.every.load(Ordering::Relaxed);
        if every == 0 {
            return;
        }
        let sampled = SINCE_SAMPLE.with(|c| {
            let n = c.get() + 1;
            let due = n >= every;
            c.set(if due { 0 } else { n });
            due
        });
        if sampled {
            self.count(pm, q);
        }
    }

    #[cold]
    fn count(&self, pm: &Pm, q: Stmt) {
        let due = {
            let mut c = lock(&self.counts);
            *c.map.entry(q).or_default() += 1;
            c.total += 1;
            if c.total > AGE_AT {
                c.map.retain(|_, n| {
                    *n /= 2;
                    *n > 0
                });
                c.total = c.map.values().sum();
            }
            c.unwritten += 1;
            let every = self.persist_every.load(Ordering::Relaxed);
            every > 0 && c.unwritten >= every
        };
        if due && let Ok(mut w) = self.writer.try_lock() {
            self.write(pm, &mut w);
        }
    }

    /// The counts now, most frequent first (ties by shape).
    pub fn snapshot(&self) -> Vec<(Stmt, u64)> {
        sorted(&lock(&self.counts).map)
    }

    /// Blocks written since open.
    #[cfg(test)]
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes the block now (at close, and on request) if anything was sampled since the
    /// last write. Errors only of the write itself; a disabled block is a no-op.
    pub fn persist(&self, pm: &Pm) -> SofortResult<()> {
        let mut w = lock(&self.writer);
        if w.disabled || lock(&self.counts).unwritten == 0 {
            return Ok(());
        }
        Ok(self.write_block(pm, &mut w)?)
    }

    fn write(&self, pm: &Pm, w: &mut Writer) {
        if w.disabled {
            return;
        }
        if let Err(e) = self.write_block(pm, w) {
            tracing::warn!(
                "SOFORT past workload: writing the block failed ({e}); not written again in this run"
            );
            w.disabled = true;
        }
    }

    /// One double-buffered write (P-SOF-50, P-SOF-51); makes the block first if needed.
    fn write_block(&self, pm: &Pm, w: &mut Writer) -> StorageResult<()> {
        let s = pm.s();
        if w.block == 0 {
            let p = pm.staged_alloc(PAST_BYTES, pm.in_catalog(C_PAST), |s, g| {
                s.fill(g, 64, 0)?;
                s.store_u64(
                    g + H_VERSION,
                    u64::from(PAST_VERSION) | u64::from(PAST_CAPACITY) << 32,
                    Ordering::Relaxed,
                )?;
                s.store_u64(g, PAST_MAGIC, Ordering::Relaxed)?;
                s.persist_rule("P-SOF-2", g, 64)?; // ORDER(P-SOF-2): an empty past block (selector 0) before it is published
                Ok(())
            })?;
            w.block = pm.set().resolve_range(p, PAST_BYTES)?;
        }
        let (mut snap, total) = {
            let mut c = lock(&self.counts);
            c.unwritten = 0;
            (sorted(&c.map), c.total)
        };
        snap.truncate(PAST_CAPACITY as usize);
        let sel = s.load_u64(w.block + H_SELECTOR, Ordering::Acquire)?;
        let generation = sel + 1;
        let copy = w.block + 64 + (generation & 1) * COPY_BYTES;
        let mut entries = Vec::with_capacity(snap.len() * 16);
        for (q, n) in &snap {
            entries.extend_from_slice(&encode(q).to_le_bytes());
            entries.extend_from_slice(&n.to_le_bytes());
        }
        let n = snap.len() as u32;
        let crc = copy_crc(generation, n, total, &entries);
        s.write_bytes(copy + K_ENTRIES, &entries)?;
        s.store_u64(copy + K_GEN, generation, Ordering::Relaxed)?;
        s.store_u64(copy + K_META, u64::from(n) | u64::from(crc) << 32, Ordering::Relaxed)?;
        s.store_u64(copy + K_TOTAL, total, Ordering::Relaxed)?;
        s.persist_rule("P-SOF-50", copy, K_ENTRIES + entries.len() as u64)?; // ORDER(P-SOF-50): the inactive copy is durable before the selector names it
        s.store_u64(w.block + H_SELECTOR, generation, Ordering::Release)?;
        s.persist_rule("P-SOF-51", w.block + H_SELECTOR, 8)?; // ORDER(P-SOF-51): the selector is durable before the next write begins on the other copy
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// At open: reads the block (if any) and seeds the counts with its valid copy. Never
    /// fails: what cannot be used is reported in [`PastLoad::ignored`] and logged.
    pub fn load(&self, pm: &Pm) -> PastLoad {
        let mut w = lock(&self.writer);
        match read_block(pm) {
            Ok(None) => PastLoad::default(),
            Ok(Some((block, Ok(entries)))) => {
                w.block = block;
                let mut c = lock(&self.counts);
                for (q, n) in &entries {
                    *c.map.entry(*q).or_default() += n;
                }
                c.total = c.map.values().sum();
                PastLoad { statements: c.total, ignored: None }
            }
            Ok(Some((block, Err(why)))) => {
                // A bad copy: the block stays ours (the next write goes to the other copy).
                w.block = block;
                tracing::warn!("SOFORT past workload ignored: {why}");
                PastLoad { statements: 0, ignored: Some(why) }
            }
            Err(why) => {
                w.disabled = true;
                tracing::warn!("SOFORT past workload ignored (and not written in this run): {why}");
                PastLoad { statements: 0, ignored: Some(why) }
            }
        }
    }
}

/// The published block: `None` if there is none; `Err` for a block this build must not
/// write; else its offset and its selected copy's entries (or why they are unusable).
type ReadBlock = Result<Option<(u64, Result<Vec<(Stmt, u64)>, String>)>, String>;

fn read_block(pm: &Pm) -> ReadBlock {
    let s = pm.s();
    let p = s.load_pptr(pm.cat + C_PAST).map_err(|e| format!("pointer: {e}"))?;
    if p.is_null() || p == PPtr::new(0, 0) {
        return Ok(None);
    }
    let g = pm.set().resolve_range(p, PAST_BYTES).map_err(|e| format!("pointer {p:?}: {e}"))?;
    let rd = |off: u64| s.load_u64(off, Ordering::Acquire).map_err(|e| format!("read: {e}"));
    if rd(g)? != PAST_MAGIC {
        return Err("bad magic".into());
    }
    let v = rd(g + H_VERSION)?;
    if v != u64::from(PAST_VERSION) | u64::from(PAST_CAPACITY) << 32 {
        return Err(format!(
            "version {} with capacity {} (this build reads version {PAST_VERSION}, capacity {PAST_CAPACITY})",
            v as u32,
            v >> 32
        ));
    }
    let sel = rd(g + H_SELECTOR)?;
    if sel == 0 {
        return Ok(Some((g, Ok(Vec::new()))));
    }
    let copy = g + 64 + (sel & 1) * COPY_BYTES;
    let entries = (|| {
        let generation = rd(copy + K_GEN)?;
        let meta = rd(copy + K_META)?;
        let total = rd(copy + K_TOTAL)?;
        let (n, crc) = (meta as u32, (meta >> 32) as u32);
        if generation != sel || n > PAST_CAPACITY {
            return Err(format!(
                "copy {} names generation {generation} (selector {sel}), {n} entries",
                sel & 1
            ));
        }
        let mut bytes = vec![0u8; n as usize * 16];
        s.read_into(copy + K_ENTRIES, &mut bytes).map_err(|e| format!("read: {e}"))?;
        if copy_crc(generation, n, total, &bytes) != crc {
            return Err(format!("bad checksum of copy {} (generation {sel})", sel & 1));
        }
        bytes
            .chunks_exact(16)
            .map(|e| {
                let w = u64::from_le_bytes(e[..8].try_into().unwrap_or_default());
                let c = u64::from_le_bytes(e[8..].try_into().unwrap_or_default());
                decode(w).map(|q| (q, c)).ok_or_else(|| format!("unknown statement shape {w:#x}"))
            })
            .collect()
    })();
    Ok(Some((g, entries)))
}

/// Test hook: the global offset of the published block (0: none).
#[cfg(test)]
pub(super) fn block_at(pm: &Pm) -> u64 {
    let s = pm.s();
    match s.load_pptr(pm.cat + C_PAST) {
        Ok(p) if !p.is_null() && p != PPtr::new(0, 0) => {
            pm.set().resolve_range(p, PAST_BYTES).unwrap_or(0)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_round_trip_through_their_encoding() {
        for q in [
            Stmt::Get { table: 0 },
            Stmt::Get { table: 0xff_ffff },
            Stmt::Scan { table: 3, index: None },
            Stmt::Scan { table: 3, index: Some(0) },
            Stmt::Scan { table: 3, index: Some(7) },
            Stmt::Insert { table: 9 },
            Stmt::Write { table: 1 },
        ] {
            assert_eq!(decode(encode(&q)), Some(q), "{q:?}");
        }
        assert_eq!(decode(4), None, "unknown kind");
        assert_eq!(decode(1 << 32), None, "a get with an index");
    }
}
