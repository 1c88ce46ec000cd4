//! A SOFORT table in PM: its descriptor, the MVCC array, one value array per column, one value
//! heap per `str`/`bytes` column, row-id allocation and the DRAM indexes
//! (`docs/design/sofort.md` §2.1, §7; spec §2.1).
//!
//! # Invariants
//! - Chunk `k` is usable (`k < chunks`) only when block `k` exists in the MVCC array and in
//!   every value array; row `r` lives in chunk `r / 512`.
//! - A row id is in at most one place: handed to one inserting transaction, in use, or in the
//!   reusable queue (once). Ids `>= next` are unused.
//! - The indexes hold `(key, row)` for every row in use that is not collected (all versions,
//!   uncommitted ones included), and nothing for rows in the reusable queue.
//! - A PM index (hybrid or persistent FPTree, `placement.rs`) holds an entry only for a row
//!   whose values and MVCC entry are durable (P-SOF-20), and loses it before the row's
//!   extents are freed or its id is reused (P-SOF-21).
//!
//! # Ordering
//! Rows are written with non-temporal stores (values) and `Release` stores (`CTS` then `DTS`);
//! nothing here flushes: the transaction's commit does (P-SOF-5), and the insert into a PM
//! index (P-SOF-20, in `txn.rs`).
//!
//! # Concurrency
//! Row-id allocation and chunk creation under the table's mutex; each heap under its own; each
//! DRAM index under an `RwLock` (a tree has its own leaf locks). MVCC words and value slots
//! are accessed lock-free.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use ferrite_pmem::{PPtr, Space};

use super::heap::Heap;
pub(super) use super::index::EntryBound;
use super::index::{Index, Rows, entry_in};
use super::ixkey::IxKey;
use super::layout::*;
use super::placement::{IndexStore, check_key_len, key_too_long};
use super::pm::{BlockArray, Init, Pm, corrupt, lock};
use super::rebuild::{IxState, LookupHelp, Pending, Step};
use super::{SofortError, SofortResult};
use crate::schema::{Table, TableSchema};
use crate::storage::StorageResult;
use crate::value::{Row, Type, Value};

/// Row ids handed out by a table.
#[derive(Debug, Default)]
pub(super) struct RowAlloc {
    pub next: u64,
    pub reusable: VecDeque<u64>,
}

/// Values shorter than this are written with ordinary stores and flushed at commit; longer
/// ones with non-temporal stores. A non-temporal store is drained by the next locked
/// instruction (every mutex of the write path), which costs a barrier's wait before the
/// commit's own; a flushed line waits for the commit's fence in parallel with the others.
pub(super) const NT_MIN: usize = 256;

/// The ranges a transaction wrote into row slots and value extents: what its commit must make
/// durable (`cached`: flushed by the commit; `nt`: non-temporal, flushed again only if the
/// transaction changed threads).
#[derive(Debug, Default)]
pub(super) struct Written {
    pub cached: Vec<(u64, u64)>,
    pub nt: Vec<(u64, u64)>,
}

/// With [`LookupHelp::Full`] a primary-key lookup on an index being rebuilt helps the rebuild
/// (inserts batches itself) until at most `HELP_FLOOR` rows are left, then scans them: below
/// that a scan costs less than waiting for the worker's last batches.
const HELP_FLOOR: usize = 4096;

/// With [`LookupHelp::Bounded`] a primary-key lookup on an index being rebuilt helps the
/// rebuild by at most `left / HELP_SHARE` rows, in whole batches, then scans the remainder
/// (`docs/design/sofort.md` §15.3): a remainder scan costs about 0.19 of a rebuild insert per
/// row (`ρ`, measured), and a lookup may spend a quarter of its scan's cost on helping (`f`),
/// so `f·ρ ≈ 1/21`: a lookup costs at most about 1.25 scans of the remainder it found, and
/// each one shrinks the remainder by about 4.8 %. Below `21 × BATCH` rows left it only scans.
const HELP_SHARE: usize = 21;

/// The batches a primary-key lookup helps when `left` rows of its index are unindexed
/// ([`HELP_FLOOR`], [`HELP_SHARE`]).
pub(super) fn help_batches(left: usize, help: LookupHelp) -> usize {
    match help {
        LookupHelp::Full => left.saturating_sub(HELP_FLOOR).div_ceil(super::rebuild::BATCH),
        LookupHelp::Bounded => left / HELP_SHARE / super::rebuild::BATCH,
    }
}

/// One table (see the module docs).
#[derive(Debug)]
pub struct PTable {
    pub(super) id: u16,
    pub(super) table: Table,
    pub(super) mvcc: BlockArray,
    pub(super) cols: Vec<BlockArray>,
    pub(super) heaps: Vec<Option<Heap>>,
    pub(super) rows: Mutex<RowAlloc>,
    pub(super) chunks: AtomicU64,
    pub(super) pk: IndexStore,
    pub(super) sec: Vec<IndexStore>,
    /// Whether any index is in PM (a tree).
    pub(super) pm_index: bool,
}

impl PTable {
    /// Loads a table from its descriptor at `g` (already validated) with its arrays and its
    /// indexes `ix` (the primary key's first; `None`: all in DRAM, empty).
    pub(super) fn load(
        pm: &Pm,
        id: u16,
        desc: PPtr,
        table: Table,
        ix: Option<Vec<IndexStore>>,
    ) -> StorageResult<PTable> {
        let at = |off: u64| PPtr::new(desc.segment, desc.offset + off);
        let mvcc = BlockArray::load(pm, at(T_MVCC_ROOT), MVCC_BLOCK, Init::Zero)?;
        let mut cols = Vec::new();
        let mut heaps = Vec::new();
        for (c, col) in table.schema.columns().iter().enumerate() {
            let c = c as u64;
            cols.push(BlockArray::load(pm, at(t_values_root(c)), VALUE_BLOCK, Init::None)?);
            heaps.push(match col.ty() {
                Type::Bytes | Type::Str => Some(Heap::load(pm, at(t_heap_root(c)))?),
                _ => None,
            });
        }
        let chunks = cols.iter().map(BlockArray::count).fold(mvcc.count(), u64::min);
        let mut ix = ix.unwrap_or_default().into_iter();
        let pk = ix.next().unwrap_or_else(IndexStore::dram);
        let sec: Vec<IndexStore> =
            table.indexes.iter().map(|_| ix.next().unwrap_or_else(IndexStore::dram)).collect();
        let pm_index = pk.is_pm() || sec.iter().any(IndexStore::is_pm);
        Ok(PTable {
            id,
            table,
            mvcc,
            cols,
            heaps,
            rows: Mutex::new(RowAlloc::default()),
            chunks: AtomicU64::new(chunks),
            pk,
            sec,
            pm_index,
        })
    }

    /// The table's id (its entry in the table directory).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The table's schema.
    pub fn schema(&self) -> &TableSchema {
        &self.table.schema
    }

    /// Where index `index` lives (`None`: the primary key; `None` back: no such index).
    pub fn index_placement(&self, index: Option<usize>) -> Option<crate::SofortIndexPlacement> {
        self.index(index).ok().map(IndexStore::placement)
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        self.table.name()
    }

    /// Complete chunks.
    pub(super) fn chunk_count(&self) -> u64 {
        self.chunks.load(Ordering::Acquire)
    }

    /// Global offset of row `r`'s MVCC entry.
    #[inline]
    pub(super) fn mvcc_at(&self, r: u64) -> StorageResult<u64> {
        let k = r / CHUNK_ROWS;
        match (k < self.chunk_count()).then(|| self.mvcc.block(k)).flatten() {
            Some(g) => Ok(g + (r % CHUNK_ROWS) * 16),
            None => Err(corrupt(format!("row {r} is outside the table"), self.name().to_owned())),
        }
    }

    /// Global offset of row `r`'s slot of column `c`.
    #[inline]
    fn slot_at(&self, c: usize, r: u64) -> StorageResult<u64> {
        let k = r / CHUNK_ROWS;
        match self.cols.get(c).and_then(|a| a.block(k)) {
            Some(g) if k < self.chunk_count() => Ok(g + (r % CHUNK_ROWS) * 8),
            _ => Err(corrupt(format!("row {r} is outside the table"), self.name().to_owned())),
        }
    }

    /// Takes a row id: a reusable one, else the next, creating its chunk if needed.
    pub(super) fn take_row(&self, pm: &Pm) -> SofortResult<u64> {
        let mut a = lock(&self.rows);
        if let Some(r) = a.reusable.pop_front() {
            return Ok(r);
        }
        let r = a.next;
        if r >= MAX_ROWS {
            return Err(SofortError::Storage(crate::storage::StorageError::PoolFull {
                at: format!("table {:?}", self.name()),
                requested: 1,
                available: 0,
            }));
        }
        let k = r / CHUNK_ROWS;
        if k >= self.chunk_count() {
            self.mvcc.ensure(pm, k)?;
            for a in &self.cols {
                a.ensure(pm, k)?;
            }
            self.chunks.store(k + 1, Ordering::Release);
        }
        a.next = r + 1;
        Ok(r)
    }

    /// Returns row ids that no version needs any more.
    pub(super) fn give_back(&self, rows: impl IntoIterator<Item = u64>) {
        lock(&self.rows).reusable.extend(rows);
    }

    /// Writes `row`'s values into row `r`'s slots and value extents, adding the ranges written
    /// to `out` (for the commit's flushes). On error nothing stays allocated.
    ///
    /// Every extent is allocated (under its heap's mutex) before the first store: a locked
    /// instruction after a non-temporal store waits for the write-combining buffers to drain
    /// (see [`NT_MIN`]).
    pub(super) fn write_values(
        &self,
        pm: &Pm,
        r: u64,
        row: &[Value],
        out: &mut Written,
    ) -> SofortResult<()> {
        let s = pm.s();
        let mut on_stack = [0u64; 16];
        let mut on_heap;
        let words: &mut [u64] = if row.len() <= on_stack.len() {
            &mut on_stack[..row.len()]
        } else {
            on_heap = vec![0u64; row.len()];
            &mut on_heap
        };
        let undo = |words: &[u64], upto: usize| {
            for (c, &w) in words.iter().enumerate().take(upto) {
                self.release_ref(c, w);
            }
        };
        for (c, v) in row.iter().enumerate() {
            let w = match v {
                Value::I64(x) => Ok(*x as u64),
                Value::F64(x) => Ok(x.to_bits()),
                Value::Bytes(b) => self.alloc_heap(pm, c, b.len()),
                Value::Str(x) => self.alloc_heap(pm, c, x.len()),
            };
            match w {
                Ok(w) => words[c] = w,
                Err(e) => {
                    undo(words, c);
                    return Err(e);
                }
            }
        }
        // As in `read_row`: the row's slots are one line per column; ask for all of them
        // (and the first line of each new value) before the first store waits on one.
        for (c, &w) in words.iter().enumerate() {
            s.prefetch(self.slot_at(c, r)?);
            if matches!(row[c], Value::Bytes(_) | Value::Str(_)) {
                self.prefetch_heap(s, c, w);
            }
        }
        let mut write = || -> SofortResult<()> {
            for (c, v) in row.iter().enumerate() {
                let b = match v {
                    Value::Bytes(b) => b.as_slice(),
                    Value::Str(x) => x.as_bytes(),
                    _ => &[],
                };
                if !b.is_empty() {
                    let g = self.heap_at(c, words[c])?;
                    // Whole words straight from `b`, then the last partial word padded with
                    // zeros (extents are whole words).
                    let body = b.len() / 8 * 8;
                    let ext = extent_len(b.len() as u64);
                    let mut last = [0u8; 8];
                    last[..b.len() - body].copy_from_slice(&b[body..]);
                    let last = &last[..(ext as usize - body)];
                    if b.len() >= NT_MIN {
                        s.copy_nt(g, &b[..body])?;
                        if !last.is_empty() {
                            s.copy_nt(g + body as u64, last)?;
                        }
                        out.nt.push((g, ext));
                    } else {
                        s.write_bytes(g, &b[..body])?;
                        s.write_bytes(g + body as u64, last)?;
                        out.cached.push((g, ext));
                    }
                }
                let g = self.slot_at(c, r)?;
                s.store_u64(g, words[c], Ordering::Relaxed)?;
                out.cached.push((g, 8));
            }
            Ok(())
        };
        if let Err(e) = write() {
            undo(words, row.len());
            return Err(e);
        }
        Ok(())
    }

    /// Reserves an extent for a `len`-byte value of column `c`; returns its reference.
    fn alloc_heap(&self, pm: &Pm, c: usize, len: usize) -> SofortResult<u64> {
        let heap = self.heaps.get(c).and_then(Option::as_ref).ok_or_else(|| {
            SofortError::Storage(corrupt("a string column without a heap", self.name()))
        })?;
        let len = len as u64;
        if len > HEAP_CHUNK {
            return Err(SofortError::ValueTooLarge {
                column: self.table.column_name(c).to_owned(),
                len,
                max: HEAP_CHUNK,
            });
        }
        if len == 0 {
            return Ok(pack_ref(0, 0, 0));
        }
        let (chunk, off) = heap.alloc(pm, extent_len(len))?;
        Ok(pack_ref(chunk, off, len))
    }

    /// Global offset of the extent of heap reference `w` of column `c`.
    fn heap_at(&self, c: usize, w: u64) -> StorageResult<u64> {
        let (chunk, off, _) = unpack_ref(w);
        self.heaps
            .get(c)
            .and_then(Option::as_ref)
            .and_then(|h| h.arr.block(chunk))
            .map(|g| g + off)
            .ok_or_else(|| corrupt("heap chunk missing", self.name()))
    }

    /// Frees the extent of heap reference `w` of column `c` (no-op for inline columns).
    fn release_ref(&self, c: usize, w: u64) {
        if let Some(Some(h)) = self.heaps.get(c) {
            let (chunk, off, len) = unpack_ref(w);
            if len > 0 {
                h.release(chunk, off, extent_len(len));
            }
        }
    }

    /// The heap extents (column, chunk, offset, extent length) of row `r`.
    pub(super) fn extents(&self, s: &Space, r: u64) -> StorageResult<Vec<(usize, u64, u64, u64)>> {
        let mut out = Vec::new();
        for (c, h) in self.heaps.iter().enumerate() {
            if h.is_some() {
                let w = s.load_u64(self.slot_at(c, r)?, Ordering::Acquire)?;
                let (chunk, off, len) = unpack_ref(w);
                if len > 0 {
                    out.push((c, chunk, off, extent_len(len)));
                }
            }
        }
        Ok(out)
    }

    /// Defers every heap's free map over the table's live rows of open (`heap.rs`; design
    /// §15.8).
    pub(super) fn defer_heaps(&self, live: &Arc<[u64]>) {
        for h in self.heaps.iter().flatten() {
            h.defer(Arc::clone(live));
        }
    }

    /// Ends the deferral of every heap's free map: reads the extents the live rows of open
    /// reference now in the chunks older than open (H3 of design §15.8). Stops early (the
    /// heap stays deferred, which is safe: H1) when `cancel` says so.
    pub(super) fn finish_heaps(&self, s: &Space, cancel: &dyn Fn() -> bool) -> StorageResult<()> {
        for (c, h) in self.heaps.iter().enumerate() {
            let Some(h) = h else { continue };
            let Some((base, rows)) = h.deferred_rows() else { continue };
            let mut used = Vec::new();
            for (i, &r) in rows.iter().enumerate() {
                if i % 65_536 == 0 && cancel() {
                    return Ok(());
                }
                let (chunk, off, len) =
                    unpack_ref(s.load_u64(self.slot_at(c, r)?, Ordering::Acquire)?);
                if len > 0 && chunk < base {
                    used.push((chunk, off, extent_len(len)));
                }
            }
            h.finish(base, used)?;
        }
        Ok(())
    }

    /// Frees row `r`'s extents (its version is collected).
    pub(super) fn release_extents(&self, s: &Space, r: u64) -> StorageResult<()> {
        for (c, chunk, off, len) in self.extents(s, r)? {
            if let Some(Some(h)) = self.heaps.get(c) {
                h.release(chunk, off, len);
            }
        }
        Ok(())
    }

    /// Reads row `r`'s values. Bad stored references are `Corrupted`.
    pub(super) fn read_row(&self, s: &Space, r: u64) -> StorageResult<Row> {
        self.read_columns(s, r, |_| true)
    }

    /// Reads what the indexes need of row `r`: its primary-key and index columns, every
    /// other column a placeholder `I64(0)` (for [`PTable::keys`] only; garbage collection
    /// reads no other column).
    pub(super) fn read_key_columns(&self, s: &Space, r: u64) -> StorageResult<Row> {
        let t = &self.table;
        self.read_columns(s, r, |c| c == t.pk || t.indexes.iter().any(|ix| ix.columns.contains(&c)))
    }

    /// Reads the columns of index `index`'s entries (`None`: the primary key's; a secondary
    /// index's entry holds its columns and the primary key): what [`PTable::key_of`] reads.
    /// The others are `I64(0)`. The rebuild and the remainder scan read a row per entry, so
    /// they skip the other indexes' columns (a string column costs a heap read).
    pub(super) fn read_index_columns(
        &self,
        s: &Space,
        r: u64,
        index: Option<usize>,
    ) -> StorageResult<Row> {
        let t = &self.table;
        let ix = index.and_then(|i| t.indexes.get(i));
        self.read_columns(s, r, |c| c == t.pk || ix.is_some_and(|ix| ix.columns.contains(&c)))
    }

    /// Reads the columns `want` selects; the others are `I64(0)`.
    fn read_columns(&self, s: &Space, r: u64, want: impl Fn(usize) -> bool) -> StorageResult<Row> {
        let cols = self.table.schema.columns();
        // A row's column slots lie in as many arrays (and lines), and a variable-length
        // value's bytes in yet another line: ask for all of them before waiting on any, so
        // their misses overlap instead of following one another.
        for c in (0..cols.len()).filter(|&c| want(c)) {
            s.prefetch(self.slot_at(c, r)?);
        }
        let mut words = Vec::with_capacity(cols.len());
        for (c, col) in cols.iter().enumerate() {
            if !want(c) {
                words.push(None);
                continue;
            }
            let w = s.load_u64(self.slot_at(c, r)?, Ordering::Acquire)?;
            if matches!(col.ty(), Type::Bytes | Type::Str) {
                self.prefetch_heap(s, c, w);
            }
            words.push(Some(w));
        }
        let mut row = Vec::with_capacity(cols.len());
        for ((c, col), w) in cols.iter().enumerate().zip(words) {
            let Some(w) = w else {
                row.push(Value::I64(0));
                continue;
            };
            row.push(match col.ty() {
                Type::I64 => Value::I64(w as i64),
                Type::F64 => Value::F64(f64::from_bits(w)),
                Type::Bytes => Value::Bytes(self.read_heap(s, c, w)?),
                Type::Str => {
                    Value::Str(String::from_utf8(self.read_heap(s, c, w)?).map_err(|_| {
                        corrupt(format!("row {r} column {c}: not UTF-8"), self.name())
                    })?)
                }
            });
        }
        Ok(row)
    }

    /// Prefetches the lines of the value `w` of column `c` (a hint: a bad reference is
    /// ignored here and reported by [`PTable::read_heap`]).
    fn prefetch_heap(&self, s: &Space, c: usize, w: u64) {
        let (chunk, off, len) = unpack_ref(w);
        if let Some(g) = self.heaps.get(c).and_then(Option::as_ref).and_then(|h| h.arr.block(chunk))
        {
            // The first lines only: a long value's copy streams well enough by itself.
            let start = g.wrapping_add(off);
            let lines = (start % 64 + len).div_ceil(64).min(4);
            for i in 0..lines {
                s.prefetch((start & !63).wrapping_add(i * 64));
            }
        }
    }

    fn read_heap(&self, s: &Space, c: usize, w: u64) -> StorageResult<Vec<u8>> {
        let (chunk, off, len) = unpack_ref(w);
        let mut b = vec![0u8; len as usize];
        if len == 0 {
            return Ok(b);
        }
        let g = self
            .heaps
            .get(c)
            .and_then(Option::as_ref)
            .and_then(|h| h.arr.block(chunk))
            .filter(|_| off % 8 == 0 && off + extent_len(len) <= HEAP_CHUNK)
            .ok_or_else(|| {
                corrupt(format!("column {c}: bad value reference {chunk}:{off}+{len}"), self.name())
            })?;
        s.read_into(g + off, &mut b)?;
        Ok(b)
    }

    // ----- indexes -----

    /// The primary key and the secondary-index entries (index columns, then the primary key:
    /// the API's entry order) of a row.
    pub(super) fn keys(&self, row: &[Value]) -> (IxKey, Vec<IxKey>) {
        let pk = self.table.encode_pk(row);
        let sec = self
            .table
            .indexes
            .iter()
            .map(|ix| IxKey::new(&self.table.index_entry(ix, row, &pk)))
            .collect();
        (IxKey::new(&pk), sec)
    }

    /// The indexes, the primary key's first, with their names (for errors).
    fn indexes(&self) -> impl Iterator<Item = (&IndexStore, &str)> {
        std::iter::once((&self.pk, "the primary key"))
            .chain(self.sec.iter().zip(self.table.indexes.iter().map(|ix| ix.name.as_str())))
    }

    /// `ValueTooLarge` if a key of `keys` does not fit its PM index (checked before the row is
    /// written: the insert then has no effect).
    pub(super) fn check_keys(&self, keys: &(IxKey, Vec<IxKey>)) -> SofortResult<()> {
        let all = std::iter::once(&keys.0).chain(&keys.1);
        for ((ix, name), k) in self.indexes().zip(all) {
            if ix.is_pm()
                && let Err(len) = check_key_len(k)
            {
                return Err(key_too_long(name, len));
            }
        }
        Ok(())
    }

    /// Adds row `r`'s entries `keys` (from [`PTable::keys`]) to every index. On error the
    /// entries added are removed again (as far as possible) and the error returned.
    pub(super) fn index_add_keys(&self, r: u64, keys: (IxKey, Vec<IxKey>)) -> SofortResult<()> {
        let (pk, sec) = keys;
        if !self.pm_index {
            // DRAM only: inserts cannot fail; the keys move in without a copy.
            self.pk.insert(pk, r)?;
            for (ix, k) in self.sec.iter().zip(sec) {
                ix.insert(k, r)?;
            }
            return Ok(());
        }
        let all: Vec<IxKey> = std::iter::once(pk).chain(sec).collect();
        for (i, ((ix, _), k)) in self.indexes().zip(&all).enumerate() {
            if let Err(e) = ix.insert(k.clone(), r) {
                for ((ix, _), k) in self.indexes().zip(&all).take(i) {
                    let _ = ix.remove(k, r);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes row `r`'s entries from every index (`pm_only`: from the PM indexes only).
    /// Idempotent.
    pub(super) fn index_remove_in(&self, r: u64, row: &[Value], pm_only: bool) -> SofortResult<()> {
        let (pk, sec) = self.keys(row);
        for ((ix, _), k) in self.indexes().zip(std::iter::once(pk).chain(sec)) {
            if !pm_only || ix.is_pm() {
                ix.remove(&k, r)?;
            }
        }
        Ok(())
    }

    /// Removes row `r`'s entries from every index (idempotent; durable for PM indexes when it
    /// returns: P-SOF-21).
    pub(super) fn index_remove(&self, r: u64, row: &[Value]) -> SofortResult<()> {
        self.index_remove_in(r, row, false)
    }

    /// The DRAM indexes with their rebuild states, the primary index's first (PM indexes are
    /// complete at open and never pending).
    pub(super) fn index_sets(&self) -> impl Iterator<Item = &RwLock<IxState>> {
        std::iter::once(&self.pk).chain(&self.sec).filter_map(IndexStore::dram_state)
    }

    /// Starts every DRAM index's rebuild over `rows` (the live rows, ascending), holding it at
    /// `hold` (W4 of `rebuild.rs`), primary-key lookups helping it as `help` says.
    pub(super) fn set_pending(&self, rows: Arc<[u64]>, hold: Option<u64>, help: LookupHelp) {
        for set in self.index_sets() {
            let hold = super::rebuild::hold_at(hold, rows.len());
            set.write().unwrap_or_else(|p| p.into_inner()).pending = Some(Pending {
                rows: Arc::clone(&rows),
                wm: 0,
                removed: Default::default(),
                hold,
                help,
            });
        }
    }

    /// Whether `index` is being rebuilt.
    pub(super) fn is_pending(&self, index: Option<usize>) -> SofortResult<bool> {
        Ok(self
            .index(index)?
            .dram_state()
            .is_some_and(|l| l.read().unwrap_or_else(|p| p.into_inner()).pending.is_some()))
    }

    /// The batch size for iterating over `index`: `normal`, or everything at once while the
    /// index is rebuilt (each call of [`PTable::candidates`] then scans the remainder).
    pub(super) fn scan_batch(&self, index: Option<usize>, normal: usize) -> SofortResult<usize> {
        Ok(if self.is_pending(index)? { usize::MAX } else { normal })
    }

    /// The entries `(key, row)` of the remainder of pending index `index` (W1) that pass
    /// `keep`, in no order.
    fn remainder_entries(
        &self,
        s: &Space,
        index: Option<usize>,
        p: &Pending,
        keep: impl Fn(&IxKey, u64) -> bool,
    ) -> StorageResult<Vec<(IxKey, u64)>> {
        let mut out = Vec::new();
        for r in p.remainder() {
            let k = self.index_key(index, &self.read_index_columns(s, r, index)?);
            if keep(&k, r) {
                out.push((k, r));
            }
        }
        Ok(out)
    }

    /// The entries DRAM index `index` must hold now, with its remainder (W1; for `check`);
    /// `None` for a PM index.
    pub(super) fn effective_index(
        &self,
        s: &Space,
        index: Option<usize>,
    ) -> SofortResult<Option<Index>> {
        let Some(lock) = self.index(index)?.dram_state() else { return Ok(None) };
        let g = lock.read().unwrap_or_else(|p| p.into_inner());
        let mut ix = g.ix.clone();
        if let Some(p) = &g.pending {
            for (k, r) in self.remainder_entries(s, index, p, |_, _| true)? {
                ix.insert(k, r);
            }
        }
        Ok(Some(ix))
    }

    /// The key of row `row` in index `index`.
    pub(super) fn index_key(&self, index: Option<usize>, row: &[Value]) -> IxKey {
        IxKey::new(&self.key_of(index, row))
    }

    /// The index `index` (`None`: primary), for range iteration.
    pub(super) fn index(&self, index: Option<usize>) -> SofortResult<&IndexStore> {
        match index {
            None => Ok(&self.pk),
            Some(i) => self.sec.get(i).ok_or_else(|| {
                SofortError::Storage(crate::storage::StorageError::InvalidArgument(format!(
                    "table {:?} has no index #{i}",
                    self.name()
                )))
            }),
        }
    }

    /// The key of row `row` in index `index` (an entry: index columns, then primary key).
    pub(super) fn key_of(&self, index: Option<usize>, row: &[Value]) -> Vec<u8> {
        match index.and_then(|i| self.table.indexes.get(i)) {
            None => self.table.encode_pk(row),
            Some(ix) => self.table.index_entry(ix, row, &self.table.encode_pk(row)),
        }
    }

    /// Up to `max` candidates `(key, row)` of `index` within the entry bounds `(lo, hi)`, in
    /// entry order (descending if not `ascending`).
    pub(super) fn candidates(
        &self,
        s: &Space,
        index: Option<usize>,
        lo: &EntryBound,
        hi: &EntryBound,
        ascending: bool,
        max: usize,
    ) -> SofortResult<Vec<(IxKey, u64)>> {
        match (lo, hi) {
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b))
                if a > b
                    || (a == b
                        && !(matches!(lo, Bound::Included(_))
                            && matches!(hi, Bound::Included(_)))) =>
            {
                return Ok(Vec::new());
            }
            _ => {}
        }
        let store = self.index(index)?;
        let Some(lock) = store.dram_state() else {
            return store.candidates(lo, hi, ascending, max);
        };
        let set = lock.read().unwrap_or_else(|p| p.into_inner());
        let mut out = set.ix.candidates(lo, hi, ascending, max);
        if let Some(p) = &set.pending {
            // The other access path (W1): the remainder's entries in the bounds, merged.
            out.extend(self.remainder_entries(s, index, p, |k, r| entry_in(lo, hi, k, r))?);
            out.sort_unstable();
            out.dedup();
            if !ascending {
                out.reverse();
            }
            out.truncate(max);
        }
        Ok(out)
    }

    /// The row ids of the versions holding primary key `pk` (one descent of the index). While
    /// the primary index is rebuilt, helps the rebuild by [`help_batches`] of the rows left at
    /// its start (as its [`LookupHelp`] says), then adds the matching rows of the remainder (W1).
    pub(super) fn pk_rows(&self, s: &Space, pk: &IxKey) -> SofortResult<Option<Rows>> {
        let Some(lock) = self.pk.dram_state() else { return self.pk.rows(pk) };
        let mut budget: Option<usize> = None;
        loop {
            {
                let g = lock.read().unwrap_or_else(|p| p.into_inner());
                match &g.pending {
                    None => return Ok(g.ix.rows(pk)),
                    Some(p) => {
                        let left = budget.get_or_insert_with(|| help_batches(p.left(), p.help));
                        if *left == 0 || p.wm >= p.hold {
                            let mut rows: Vec<u64> =
                                g.ix.rows(pk).map(|r| r.as_slice().to_vec()).unwrap_or_default();
                            rows.extend(
                                self.remainder_entries(s, None, p, |k, _| k == pk)?
                                    .into_iter()
                                    .map(|e| e.1),
                            );
                            rows.sort_unstable();
                            rows.dedup();
                            return Ok(Rows::from_sorted(rows));
                        }
                        *left -= 1;
                    }
                }
            }
            if super::rebuild::step(self, s, None, super::rebuild::BATCH)? == Step::Done {
                return Ok(lock.read().unwrap_or_else(|p| p.into_inner()).ix.rows(pk));
            }
        }
    }
}

/// The entry bounds of a key range: keys in `(lower, upper)`, any row id.
pub(super) fn entry_bounds(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> (EntryBound, EntryBound) {
    let lo = match lower {
        Bound::Included(k) => Bound::Included((IxKey::new(k), 0)),
        Bound::Excluded(k) => Bound::Excluded((IxKey::new(k), u64::MAX)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let hi = match upper {
        Bound::Included(k) => Bound::Included((IxKey::new(k), u64::MAX)),
        Bound::Excluded(k) => Bound::Excluded((IxKey::new(k), 0)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (lo, hi)
}

/// Shared handle to a table.
pub type TableRef = Arc<PTable>;
