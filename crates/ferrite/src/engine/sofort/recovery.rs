//! Creation, open with recovery, and `check` of a SOFORT store (`docs/design/sofort.md` §6;
//! spec §5 with the changes the commit protocol implies).
//!
//! # Invariants
//! - Open validates the catalog, every table descriptor, every array directory and every area
//!   pointer (areas and their extension blocks pairwise disjoint) before it writes anything
//!   (the allocator's own recovery excepted): a corrupt or incompatible store is a typed error
//!   and stays as it was.
//! - After open: no MVCC field holds a TXID of a committed transaction; every TXID left is of
//!   an older epoch and uncommitted; every timestamp stored is `≤ failureTime < CurrentTime`;
//!   the indexes hold exactly the live rows (or, pending, will hold them once rebuilt:
//!   `rebuild.rs`); the reusable queues hold every other row of the complete chunks, once;
//!   the heaps' free maps are deferred over the live rows (`heap.rs`, design §15.8) and
//!   finished by the caller (before a synchronous open returns, in the background otherwise).
//!
//! # Ordering
//! P-SOF-1 (creation: magic last), P-SOF-2 (staging cleanup), P-SOF-3/P-SOF-4 (epoch and
//! ceiling, one line, persisted before any transaction), P-SOF-10 (roll-forward persisted
//! before the first transaction). Recovery is idempotent (§6 of the design).
//!
//! # Concurrency
//! Open and `format` run before the store is shared; `check` expects no transaction running.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ferrite_pmem::PPtr;
use zerocopy::{FromZeros, IntoBytes};

use super::cont::{self, ContShared};
use super::layout::*;
use super::placement::{IndexStore, placement_of_code};
use super::pm::{Pm, corrupt, init_null_ptrs, lock};
use super::table::{PTable, RowAlloc};
use super::txn::{Inner, Slot, Status, TxInfo};
use super::{SofortOptions, SofortResult};
use crate::alloc::PAllocator;
use crate::engine::common::schema_codec as codec;
use crate::storage::{StorageError, StorageResult};

/// What an open did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The epoch of this run.
    pub epoch: u64,
    /// Every timestamp stored before this open is at most this.
    pub failure_time: u64,
    /// Areas found committed (rolled forward, most of them as no-ops).
    pub committed_areas: u64,
    /// MVCC fields that still held a committed TXID and were set to its timestamp.
    pub rolled_forward: u64,
    /// MVCC fields holding an uncommitted TXID (undone).
    pub undone: u64,
    /// Live rows indexed.
    pub live_rows: u64,
    /// Rows in use that are garbage (queued for reuse).
    pub garbage_rows: u64,
    /// Tables.
    pub tables: u64,
    /// Unfinished continuable transactions kept for resumption (design: continuing
    /// transactions).
    pub unfinished: u64,
    /// MVCC fields holding the TXID of an unfinished transaction, kept as locks.
    pub kept_locks: u64,
    /// Versions deleted after the oldest unfinished transaction's snapshot, kept (not
    /// collected) until it ends.
    pub retained_rows: u64,
    /// Time the allocator's open took (pool set already mapped; not part of the times below).
    pub allocator: Duration,
    /// Time from the start of the store's open until the persistent structures were recovered
    /// (catalog and tables loaded, PM indexes opened (a hybrid tree rebuilds its inner nodes
    /// there), epoch and ceiling persisted, committed areas rolled forward): what a store does
    /// before the classification scan.
    pub rolled_forward_at: Duration,
    /// Time from the start of the store's open until the rows were classified (the full
    /// scan's end; allocator excluded): the persistent structures are recovered, the DRAM
    /// indexes not yet built.
    pub classified: Duration,
    /// Time from the start of the store's open until every DRAM index was rebuilt (`None`:
    /// an instant open whose background rebuild is not complete at `open`'s return; see
    /// [`super::SofortStore::wait_rebuilt`]).
    pub index_rebuild: Option<Duration>,
    /// Time of the whole open (allocator excluded).
    pub duration: Duration,
    /// Sampled statements of the past workload loaded from its PM block (`past.rs`).
    pub past_statements: u64,
    /// Past-workload blocks ignored (bad checksum, version or pointer; advisory data).
    pub past_ignored: u64,
}

/// What [`super::SofortStore::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Tables.
    pub tables: u64,
    /// Rows whose MVCC entry is not `{0, 0}` and that are not queued for reuse.
    pub rows_in_use: u64,
    /// Rows visible now (committed, not deleted).
    pub live_rows: u64,
    /// Rows queued for reuse.
    pub reusable: u64,
    /// Index entries (all indexes).
    pub index_entries: u64,
    /// Free heap bytes.
    pub heap_free: u64,
}

fn bad(what: impl Into<String>) -> StorageError {
    corrupt(what, "SOFORT catalog")
}

/// Formats a store on a fresh allocator (P-SOF-1).
pub(super) fn format(alloc: Arc<PAllocator>, opts: SofortOptions) -> SofortResult<Arc<PAllocator>> {
    if opts.slots == 0 || opts.slots > MAX_SLOTS {
        return Err(StorageError::InvalidArgument(format!(
            "{} transaction slots: between 1 and {MAX_SLOTS}",
            opts.slots
        ))
        .into());
    }
    let cat = alloc.allocate(CATALOG_BYTES, alloc.root_location())?;
    let pm = Pm::new(alloc, cat)?;
    let s = pm.s();
    let mut head = CatalogHead::new_zeroed();
    head.version = CATALOG_VERSION;
    head.header_len = CATALOG_BYTES as u32;
    head.slots = opts.slots;
    head.chunk_rows = CHUNK_ROWS as u32;
    head.max_tables = MAX_TABLES as u32;
    head.area_bytes = AREA_BYTES as u32;
    head.table_dir = PPtr::NULL;
    head.areas = PPtr::NULL;
    head.epoch = 0;
    head.ts_ceiling = K_MIN_TS + 1; // FIX-10
    head.staging = PPtr::NULL;
    head.staging_target = PPtr::NULL;
    s.write_struct(pm.cat, &head)?;
    s.persist_rule("P-SOF-1", pm.cat, CATALOG_BYTES)?; // ORDER(P-SOF-1): an empty catalog (no magic) before its parts
    pm.staged_alloc(DIR_BYTES, pm.in_catalog(C_TABLE_DIR), |s, g| init_null_ptrs(s, g, DIR_BYTES))?;
    let n = u64::from(opts.slots);
    let areas =
        pm.staged_alloc(n * 16, pm.in_catalog(C_AREAS), |s, g| init_null_ptrs(s, g, n * 16))?;
    for i in 0..n {
        let at = PPtr::new(areas.segment, areas.offset + i * 16);
        pm.staged_alloc(AREA_BYTES, at, |s, g| {
            s.fill(g, AREA_BYTES, 0)?;
            s.store_u64(g + A_EXT, u64::MAX, Ordering::Relaxed)?;
            s.persist_rule("P-SOF-2", g, AREA_BYTES)?; // ORDER(P-SOF-2): an empty area before it is published
            Ok(())
        })?;
    }
    let mut bytes = [0u8; CATALOG_BYTES as usize];
    s.read_into(pm.cat, &mut bytes)?;
    s.store_u64(pm.cat + C_CRC, u64::from(catalog_crc(&bytes)), Ordering::Relaxed)?;
    s.persist_rule("P-SOF-1", pm.cat + C_CRC, 8)?; // ORDER(P-SOF-1): the checksum before the magic
    s.store_u64(pm.cat + C_MAGIC, CATALOG_MAGIC, Ordering::Release)?;
    s.persist_rule("P-SOF-1", pm.cat + C_MAGIC, 8)?; // ORDER(P-SOF-1): the magic commits creation
    Ok(pm.alloc)
}

/// Reads and validates the catalog.
fn read_catalog(pm: &Pm) -> StorageResult<CatalogHead> {
    let s = pm.s();
    let mut bytes = [0u8; CATALOG_BYTES as usize];
    s.read_into(pm.cat, &mut bytes)?;
    let head: CatalogHead = s.read_struct(pm.cat)?;
    if head.magic != CATALOG_MAGIC {
        return Err(bad(if head.magic == 0 {
            "the store's creation did not finish (no magic)".to_owned()
        } else {
            format!("bad magic {:#x}", head.magic)
        }));
    }
    if !(head.version == CATALOG_VERSION || head.version == CATALOG_VERSION_1) || head.incompat != 0
    {
        return Err(StorageError::Incompatible {
            what: format!(
                "SOFORT format version {} incompat {:#x} (this build reads versions \
                 {CATALOG_VERSION_1} and {CATALOG_VERSION})",
                head.version, head.incompat
            ),
            at: "SOFORT catalog".into(),
        });
    }
    if head.crc != catalog_crc(&bytes) {
        return Err(bad("checksum mismatch"));
    }
    if head.header_len != CATALOG_BYTES as u32
        || head.slots == 0
        || head.slots > MAX_SLOTS
        || u64::from(head.chunk_rows) != CHUNK_ROWS
        || u64::from(head.max_tables) != MAX_TABLES
        || u64::from(head.area_bytes) != AREA_BYTES
    {
        return Err(bad("geometry out of range"));
    }
    if head.epoch >= MAX_EPOCH {
        return Err(StorageError::Incompatible {
            what: "every TXID epoch is used".into(),
            at: "SOFORT catalog".into(),
        });
    }
    if !is_ts(head.ts_ceiling) || head.ts_ceiling >= INF - TS_CEILING_STEP {
        return Err(bad(format!("timestamp ceiling {:#x}", head.ts_ceiling)));
    }
    Ok(head)
}

fn load_table(pm: &Pm, id: u16, desc: PPtr) -> StorageResult<PTable> {
    let s = pm.s();
    let g = pm.at(desc, TABLE_HEAD, "table descriptor")?;
    let head: TableHead = s.read_struct(g)?;
    let at = format!("SOFORT table {id}");
    if head.magic != TABLE_MAGIC
        || head.table_id != u32::from(id)
        || u64::from(head.chunk_rows) != CHUNK_ROWS
        || u64::from(head.heap_chunk) != HEAP_CHUNK
    {
        return Err(corrupt("bad descriptor header", at));
    }
    let ncols = u64::from(head.ncols);
    let schema_at = TABLE_HEAD + T_COLUMN * ncols;
    let mut size = schema_at + u64::from(head.schema_len);
    let nix = u64::from(head.ix_count);
    if nix > 0 {
        // The index area right after the schema (16-aligned), as `create_table` places it.
        if u64::from(head.ix_off) != t_index_area(ncols, u64::from(head.schema_len)) {
            return Err(corrupt("index area misplaced", at));
        }
        size = u64::from(head.ix_off) + IX_ENTRY * nix;
    } else if head.ix_off != 0 {
        return Err(corrupt("an index area offset without entries", at));
    }
    let g = pm.at(desc, size, "table descriptor")?;
    let mut schema = vec![0u8; head.schema_len as usize];
    s.read_into(g + schema_at, &mut schema)?;
    let mut codes = Vec::new();
    let mut placements = Vec::new();
    for i in 0..nix {
        let code = s.load_u64(
            g + u64::from(head.ix_off) + i * IX_ENTRY + IX_PLACEMENT,
            Ordering::Acquire,
        )?;
        codes.push(code);
        placements.extend_from_slice(&code.to_le_bytes());
    }
    if head.crc != table_crc(head.as_bytes(), &schema, &placements) {
        return Err(corrupt("descriptor checksum mismatch", at));
    }
    let table = codec::decode(&schema)?;
    if table.arity() as u64 != ncols {
        return Err(corrupt("column count mismatch", at));
    }
    let ix = if nix == 0 {
        None
    } else {
        if nix != 1 + table.indexes.len() as u64 {
            return Err(corrupt("index area entries differ from the schema's indexes", at));
        }
        let mut stores = Vec::new();
        for (i, &code) in codes.iter().enumerate() {
            let p = placement_of_code(code).ok_or_else(|| {
                corrupt(format!("index {i}: unknown placement {code}"), at.clone())
            })?;
            let slot =
                PPtr::new(desc.segment, desc.offset + u64::from(head.ix_off) + i as u64 * IX_ENTRY);
            stores.push(IndexStore::open(&pm.alloc, slot, p)?);
        }
        Some(stores)
    };
    PTable::load(pm, id, desc, table, ix)
}

/// Walks an area's extension chain.
fn load_ext(pm: &Pm, area: u64) -> StorageResult<Vec<u64>> {
    let s = pm.s();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut p = s.load_pptr(area + A_EXT)?;
    while !p.is_null() {
        let g = pm.at(p, EXT_BYTES, "area extension")?;
        if !seen.insert(g) {
            return Err(corrupt("an area extension chain loops", "SOFORT area"));
        }
        out.push(g);
        p = s.load_pptr(g + EXT_NEXT)?;
    }
    Ok(out)
}

/// Deletes a garbage row's entries from the table's PM indexes (P-SOF-20, P-SOF-21; design
/// §13.3). An entry exists only if the row's values were durable before it was inserted and
/// stayed so, so the key computed from them finds it; a row whose values cannot be read (a
/// torn or never-flushed write) has no entry. Deleting `key ‖ r` is safe whatever the key:
/// only row `r` has entries ending in `r`, and it is garbage.
fn remove_garbage_entries(t: &PTable, s: &ferrite_pmem::Space, r: u64) -> SofortResult<()> {
    match t.read_key_columns(s, r) {
        Ok(row) => t.index_remove_in(r, &row, true),
        Err(_) => Ok(()),
    }
}

/// Opens and recovers a store (see the module docs).
/// The DRAM indexes are left pending over the live rows, held at `hold` (`rebuild.rs`, W4):
/// the caller starts their rebuild. PM indexes are opened with their tables.
pub(super) fn open(
    alloc: Arc<PAllocator>,
    hold: Option<u64>,
    help: super::rebuild::LookupHelp,
) -> SofortResult<(Inner, RecoveryReport)> {
    let t0 = Instant::now();
    let root = alloc.pool().resolve_range(alloc.root_location(), 16)?;
    let cat = alloc.pool().load_pptr(root)?;
    if cat.is_null() {
        return Err(bad("no catalog in the allocator's root: not a SOFORT store").into());
    }
    let pm = Pm::new(alloc, cat).map_err(|e| bad(format!("catalog pointer: {e}")))?;
    let head = read_catalog(&pm)?;
    let s = pm.s();

    // ----- read-only loading -----
    let dir = pm.at(head.table_dir, DIR_BYTES, "table directory")?;
    let mut tables = Vec::new();
    let mut end = false;
    for i in 0..MAX_TABLES {
        let p = s.load_pptr(dir + i * 16)?;
        if p.is_null() {
            end = true;
        } else if end {
            return Err(bad("a table after a missing one").into());
        } else {
            tables.push(Arc::new(load_table(&pm, i as u16, p)?));
        }
    }
    let n = u64::from(head.slots);
    let areas_at = pm.at(head.areas, n * 16, "area array")?;
    let mut areas = Vec::new();
    for i in 0..n {
        let a = pm.at(s.load_pptr(areas_at + i * 16)?, AREA_BYTES, "area")?;
        areas.push((a, load_ext(&pm, a)?));
    }
    // Every area and extension block belongs to one slot: two that overlap would let two
    // transactions write their entries over each other (for example an extension pointer
    // whose creation-time null was never made durable reads as segment 0, offset 0, the same
    // block for every area).
    let mut blocks: Vec<(u64, u64)> = areas
        .iter()
        .flat_map(|(a, ext)| {
            std::iter::once((*a, AREA_BYTES)).chain(ext.iter().map(|&g| (g, EXT_BYTES)))
        })
        .collect();
    // Continuation logs (design §14): read-only here; blocks join the overlap check.
    let failure_time = head.ts_ceiling.max(K_MIN_TS + 1);
    let logs = cont::load(&pm, &areas, head.epoch, failure_time)?;
    blocks.extend(logs.extents());
    blocks.sort_unstable();
    if blocks.windows(2).any(|w| w[0].0.saturating_add(w[0].1) > w[1].0) {
        return Err(bad("two transaction areas or area extensions overlap").into());
    }

    // ----- writes -----
    pm.recover_staging()?;
    let epoch = head.epoch + 1;
    let clock = failure_time + 1; // FIX-8
    let ceiling = clock + TS_CEILING_STEP;
    s.store_u64(pm.cat + C_EPOCH, epoch, Ordering::Release)?;
    s.store_u64(pm.cat + C_CEILING, ceiling, Ordering::Release)?;
    s.persist_rule("P-SOF-3", pm.cat + C_EPOCH, 16)?; // ORDER(P-SOF-3): epoch and ceiling (P-SOF-4) before any transaction

    let mut report = RecoveryReport {
        epoch,
        failure_time,
        tables: tables.len() as u64,
        ..RecoveryReport::default()
    };
    // Conditional roll-forward of committed areas.
    let mut lines = Vec::new();
    for (a, ext) in &areas {
        let txid = s.load_u64(a + A_TXID, Ordering::Acquire)?;
        if txid == 0 || s.load_u64(a + A_COMMIT, Ordering::Acquire)? != txid {
            continue;
        }
        let c = s.load_u64(a + A_COMMIT_TS, Ordering::Acquire)?;
        if !is_txid(txid) || epoch_of(txid) >= epoch || !is_ts(c) || c > failure_time {
            return Err(
                corrupt(format!("committed area {txid:#x} at {c:#x}"), "SOFORT area").into()
            );
        }
        report.committed_areas += 1;
        let counts = s.load_u64(a + A_COUNTS, Ordering::Acquire)?;
        let creates = counts & 0xffff_ffff;
        let total = creates + (counts >> 32);
        let cap = INLINE_ENTRIES + AREA_MORE_ENTRIES + EXT_ENTRIES * ext.len() as u64;
        if total > cap {
            return Err(corrupt("area entries beyond its extensions", "SOFORT area").into());
        }
        for i in 0..total {
            let g = if i < INLINE_ENTRIES {
                a + A_INLINE + i * 8
            } else if i < INLINE_ENTRIES + AREA_MORE_ENTRIES {
                a + A_MORE + (i - INLINE_ENTRIES) * 8
            } else {
                let k = i - INLINE_ENTRIES - AREA_MORE_ENTRIES;
                ext[(k / EXT_ENTRIES) as usize] + (k % EXT_ENTRIES) * 8
            };
            let (tid, r) = unentry(s.load_u64(g, Ordering::Acquire)?);
            let t = tables
                .get(usize::from(tid))
                .ok_or_else(|| corrupt(format!("area names table {tid}"), "SOFORT area"))?;
            let field = t.mvcc_at(r)? + if i < creates { 0 } else { 8 };
            if s.load_u64(field, Ordering::Acquire)? == txid {
                s.store_u64(field, c, Ordering::Release)?;
                lines.push(field & !63);
                report.rolled_forward += 1;
            }
        }
    }
    // Logs of transactions that committed: cleared before any area is rewritten.
    for &h in &logs.finished {
        s.store_u64(h + L_TXID, 0, Ordering::Release)?;
        lines.push(h);
    }
    // Locks of unfinished transactions: exactly those their durable records name.
    let mut keep: HashSet<(u16, u64, u64)> = HashSet::new();
    for u in &logs.unfinished {
        for (list, field) in [(&u.created, 0), (&u.deleted, 8)] {
            for &(tid, r) in list {
                let t = tables
                    .get(usize::from(tid))
                    .ok_or_else(|| corrupt(format!("log names table {tid}"), "SOFORT log"))?;
                let f = t.mvcc_at(r)? + field;
                if s.load_u64(f, Ordering::Acquire)? != u.txid {
                    return Err(corrupt(
                        format!("row {r}: a logged lock of {:#x} is not held", u.txid),
                        t.name().to_owned(),
                    )
                    .into());
                }
                keep.insert((tid, r + field / 8 * MAX_ROWS, u.txid));
            }
        }
    }
    let min_sts = logs.unfinished.iter().map(|u| u.sts).min().unwrap_or(INF);
    let mut retained: Vec<(u16, u64)> = Vec::new();
    let mut retained_ts = 0;
    lines.sort_unstable();
    lines.dedup();
    for &l in &lines {
        s.flush_rule("P-SOF-10", l, 64)?; // ORDER(P-SOF-10): roll-forward durable before any area is rewritten
    }
    s.fence_rule("P-SOF-10"); // ORDER(P-SOF-10): roll-forward durable
    report.rolled_forward_at = t0.elapsed();

    // Full scan: resolve, classify, rebuild.
    for t in &tables {
        let rows = t.chunk_count() * CHUNK_ROWS;
        let mut reusable = Vec::new();
        let mut live = Vec::new();
        for r in 0..rows {
            let off = t.mvcc_at(r)?;
            let mut cts = s.load_u64(off, Ordering::Acquire)?;
            let mut dts = s.load_u64(off + 8, Ordering::Acquire)?;
            if cts == 0 && dts == 0 {
                reusable.push(r);
                continue;
            }
            for f in [cts, dts] {
                if (is_txid(f) && epoch_of(f) >= epoch)
                    || (is_ts(f) && f != INF && f > failure_time)
                {
                    return Err(corrupt(
                        format!("row {r}: MVCC field {f:#x} from the future"),
                        t.name().to_owned(),
                    )
                    .into());
                }
            }
            let kept_c = is_txid(cts) && keep.contains(&(t.id, r, cts));
            let kept_d = is_txid(dts) && keep.contains(&(t.id, r + MAX_ROWS, dts));
            let kept = kept_c || kept_d;
            report.kept_locks += u64::from(kept_c) + u64::from(kept_d);
            if is_txid(cts) && !kept_c {
                // A creation that never committed (stored, not flushed: re-derived the same way).
                s.store_u64(off, INF, Ordering::Release)?;
                cts = INF;
                report.undone += 1;
            }
            if is_txid(dts) && !kept_d {
                s.store_u64(off + 8, INF, Ordering::Release)?;
                dts = INF;
                report.undone += 1;
            }
            // A version an unfinished transaction's snapshot may see: kept.
            let retain = is_ts(cts) && cts != INF && is_ts(dts) && dts != INF && dts > min_sts;
            if retain {
                retained.push((t.id, r));
                retained_ts = retained_ts.max(dts);
                report.retained_rows += 1;
            }
            if (is_ts(cts) && cts != INF && dts == INF) || kept || retain {
                // Indexed by the rebuild (`rebuild.rs`; before `open` returns or after).
                live.push(r);
                report.live_rows += 1;
            } else {
                if t.pm_index {
                    remove_garbage_entries(t, s, r)?;
                }
                reusable.push(r);
                report.garbage_rows += 1;
            }
        }
        *lock(&t.rows) = RowAlloc { next: rows, reusable: reusable.into() };
        // The heaps' free maps: deferred over the live rows, finished by the caller (before
        // `open` returns, or in the background; design §15.8).
        let live: Arc<[u64]> = live.into();
        t.defer_heaps(&live);
        t.set_pending(live, hold, help);
    }
    report.classified = t0.elapsed();

    let slots: Box<[Slot]> = areas.into_iter().map(|(a, ext)| Slot::new(a, epoch, ext)).collect();
    for (slot, blocks) in slots.iter().zip(logs.blocks) {
        lock(&slot.local).log = blocks;
    }
    report.unfinished = logs.unfinished.len() as u64;
    for u in &logs.unfinished {
        let slot = &slots[u.slot as usize];
        slot.taken.store(true, Ordering::Release);
        *lock(&slot.info) = TxInfo { status: Status::Active, txid: u.txid, commit_ts: INF };
        slot.min_ts.store(u.sts, Ordering::SeqCst);
    }
    if let Some(u) = logs.unfinished.iter().min_by_key(|u| u.sts)
        && !retained.is_empty()
    {
        lock(&slots[u.slot as usize].local).garbage.push_back((retained_ts, retained));
    }
    let inner = Inner {
        pm,
        tables: RwLock::new(tables),
        table_dir: head.table_dir,
        ddl: Mutex::new(()),
        slots,
        clock: AtomicU64::new(clock),
        ceiling: AtomicU64::new(ceiling),
        ceiling_lock: Mutex::new(()),
        cur_min: AtomicU64::new(clock.min(min_sts)),
        open_epoch: epoch,
        epoch: Mutex::new(epoch),
        failure_time,
        poisoned: AtomicBool::new(false),
        cont: ContShared {
            dir: Mutex::new(logs.dir),
            recovered: {
                let mut v: Vec<u64> = logs.unfinished.iter().map(|u| u.txid).collect();
                v.sort_unstable();
                v
            },
            unfinished: Mutex::new(logs.unfinished),
        },
        restart: Default::default(),
        past: Default::default(),
        version: head.version,
        lock_wait_ms: AtomicU64::new(super::txn::LOCK_WAIT.as_millis() as u64),
    };
    report.duration = t0.elapsed();
    Ok((inner, report))
}

impl Inner {
    /// Checks the invariants of a quiescent store (no transaction running).
    pub fn check(&self) -> SofortResult<CheckReport> {
        self.pm.alloc.check()?;
        let s = self.s();
        let now = self.now();
        let mut rep = CheckReport::default();
        for t in self.all_tables() {
            rep.tables += 1;
            let name = t.name().to_owned();
            let fail = |what: String| -> SofortResult<CheckReport> {
                Err(corrupt(what, name.clone()).into())
            };
            let queued: Vec<u64> = lock(&t.rows).reusable.iter().copied().collect();
            let next = lock(&t.rows).next;
            let qset: HashSet<u64> = queued.iter().copied().collect();
            if qset.len() != queued.len() {
                return fail("a row is queued for reuse twice".into());
            }
            if queued.iter().any(|&r| r >= next) || next > t.chunk_count() * CHUNK_ROWS {
                return fail("row allocation beyond the table".into());
            }
            // While an index is rebuilt (instant open), it must hold its partial index plus
            // its remainder (W1 of `rebuild.rs`).
            let mut expect_pk = super::index::Index::default();
            let mut expect_sec: Vec<super::index::Index> =
                t.sec.iter().map(|_| super::index::Index::default()).collect();
            let mut extents = Vec::new();
            for r in 0..next {
                let off = t.mvcc_at(r)?;
                let dts = s.load_u64(off + 8, Ordering::Acquire)?;
                let cts = s.load_u64(off, Ordering::Acquire)?;
                if qset.contains(&r) || (cts == 0 && dts == 0) {
                    continue;
                }
                let stray = |f: u64| is_txid(f) && !self.holds(f);
                if stray(cts) || stray(dts) {
                    return fail(format!("row {r} is locked with no transaction running"));
                }
                rep.rows_in_use += 1;
                if is_ts(cts) && cts <= now && dts > now {
                    rep.live_rows += 1;
                }
                let row = t.read_row(s, r)?;
                let (k, sec) = t.keys(&row);
                expect_pk.insert(k, r);
                for (e, k) in expect_sec.iter_mut().zip(sec) {
                    e.insert(k, r);
                }
                for (c, chunk, o, l) in t.extents(s, r)? {
                    extents.push((c, chunk, o, l));
                }
            }
            let indexes = std::iter::once(None).chain((0..expect_sec.len()).map(Some));
            for (ix, expect) in indexes.zip(std::iter::once(&expect_pk).chain(&expect_sec)) {
                let name = match ix {
                    None => "primary index".to_owned(),
                    Some(i) => format!("secondary index {i}"),
                };
                let verdict = match t.effective_index(s, ix)? {
                    // A DRAM index, with the remainder of a pending rebuild (W1).
                    Some(got) if !got.is_consistent() => {
                        Err("the index's structure is inconsistent".to_owned())
                    }
                    Some(got) if got != *expect => {
                        Err(format!("{} entries, {} rows in use", got.len(), expect.len()))
                    }
                    Some(got) => Ok(got.len() as u64),
                    None => t.index(ix)?.check_against(expect)?,
                };
                match verdict {
                    Ok(n) => rep.index_entries += n,
                    Err(what) => return fail(format!("{name}: {what}")),
                }
            }
            extents.sort_unstable();
            for w in extents.windows(2) {
                let (a, b) = (w[0], w[1]);
                if a.0 == b.0 && a.1 == b.1 && a.2 + a.3 > b.2 {
                    return fail(format!("two rows share heap bytes {a:?} {b:?}"));
                }
            }
            for &(c, chunk, o, l) in &extents {
                if let Some(Some(h)) = t.heaps.get(c)
                    && lock(&h.free).overlaps(chunk, o, l)
                {
                    return fail(format!("a used extent {chunk}:{o}+{l} is also free"));
                }
            }
            for h in t.heaps.iter().flatten() {
                rep.heap_free += lock(&h.free).free_bytes();
            }
            rep.reusable += queued.len() as u64;
        }
        Ok(rep)
    }
}
