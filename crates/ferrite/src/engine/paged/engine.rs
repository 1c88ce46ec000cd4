//! The paged engine behind the `Database` API (`docs/design/paged.md` §9): tables and
//! secondary indexes as B+-trees ([`super::btree`]) in one pager ([`super::pager`]) over a
//! commit protocol ([`super::protocol`]) on PM or in files ([`super::store`]).
//!
//! - A table is a tree keyed by the encoded primary key, with the row ([`super::rows`]) as
//!   value. A secondary index is a tree keyed by its entry (the encoded index columns, then
//!   the encoded primary key) with the primary key as value.
//! - The catalog is a tree at [`super::pager::CATALOG_ROOT`]: table name to the roots and the
//!   schema; `open` reads it into DRAM.
//!
//! # Invariants
//! - E1: for every row and every index of its table, the index tree holds the row's entry,
//!   and holds no other entries; a commit writes a row and its entries in one batch (G1).
//! - E2 (isolation): one read-write transaction at a time (`Busy` for a second), which
//!   therefore reads and writes the latest state: serializable by construction. A read-only
//!   transaction reads the pager's snapshot of the last commit before it began.
//! - E3: an operation checks everything that can refuse it (missing row, duplicate key,
//!   oversized key) before it writes a page, so a refused operation has no effect. A write
//!   that fails after its checks (corruption, a full pool) leaves the transaction unable to
//!   commit: `commit` returns that error and nothing of the transaction is kept.
//! - E4: a table created after a read-only transaction began is empty in it.
//!
//! # Ordering
//! The protocol's (`P-PG-n`); a commit, and `create_table`, are durable when they return.
//!
//! # Concurrency
//! `Concurrency { writers: Busy, readers: Proceed }`. DDL takes the writer slot (so it gets
//! `Busy` while a read-write transaction is open) and the catalog's write lock after commit.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, RwLock};

use ferrite_pmem::{BlockFile, PoolSet};

use super::btree::BTree;
use super::pager::{Meta, Pager, ReadView, WriteView, check_protocol};
use super::pages::{PageNo, PageRead, PageSize};
use super::protocol::{Protocol, fash::Fash, journal::Journal, nvwal::Nvwal, wal::Wal};
use super::rows::{self, CatalogEntry};
use super::store::file::{FileStore, LOG_FILE, PAGES_FILE, PM_LOG_DIR};
use super::store::log::LogFile;
use super::store::pmfile::{PAGES, PmFiles};
use super::store::{PageStore, PmStore};
use crate::encoding::ByteRange;
use crate::engine::api::{CommitMode, Engine, EngineTxn};
use crate::engine::common::index::{diff, entries, same_values_range};
use crate::engine::common::unique::{duplicate_index, duplicate_pk};
use crate::error::{Error, Result, SchemaError};
use crate::options::{EngineKind, Options, PagedProtocol, PagedStore};
use crate::query::{AccessPath, Direction, Filter, LoweredScan, matches_all};
use crate::schema::Table;
use crate::value::{Row, Value};

/// Builds the engine for the registry: at `path`, a pool-set directory (PM store) or a
/// directory of two files (file store), as [`PagedConfig::store`] says. NVWAL on the file
/// store keeps its log in a pool set instead of the log file ([`PM_LOG_DIR`]).
pub(crate) fn build(path: &Path, options: &Options, create: bool) -> Result<Arc<dyn Engine>> {
    match options.paged_config().store {
        PagedStore::Pm => {
            let pm = options.pmem_options();
            let set = if create { PoolSet::create(path, pm)? } else { PoolSet::open(path, pm)? };
            on_pool_set(set, options, create)
        }
        PagedStore::File if is_nvwal(options) => {
            let (pages, log) = (path.join(PAGES_FILE), path.join(PM_LOG_DIR));
            let pm = options.pmem_options();
            let (mut pages, set) = if create {
                create_dir(path)?;
                // The log first, as below.
                let set = PoolSet::create(&log, pm)?;
                (BlockFile::create(&pages)?, set)
            } else {
                let pages = BlockFile::open(&pages)?;
                let set = match PoolSet::open(&log, pm) {
                    Ok(set) => set,
                    Err(ferrite_pmem::Error::NotFound { .. }) => {
                        return Err(missing_log(path, LOG_FILE, "the NVWAL protocol"));
                    }
                    Err(e) => return Err(e.into()),
                };
                (pages, set)
            };
            // Emulated device latency of every fdatasync (pmem `sync_latency_ns`; 0: none).
            pages.set_sync_latency_ns(options.pmem_options().sync_latency());
            on_block_file_and_pool_set(pages, set, options, create)
        }
        PagedStore::File => {
            let (pages, log) = (path.join(PAGES_FILE), path.join(LOG_FILE));
            let (mut pages, mut log) = if create {
                create_dir(path)?;
                // The log first: a page file without its log is a creation that did not
                // finish (or a lost log), never taken for a whole database.
                let log = BlockFile::create(&log)?;
                (BlockFile::create(&pages)?, log)
            } else {
                let pages = BlockFile::open(&pages)?;
                let log = BlockFile::open(&log).map_err(|e| {
                    if path.join(PM_LOG_DIR).is_dir() {
                        missing_log(path, PM_LOG_DIR, "the protocol of these options")
                    } else {
                        Error::Corrupted {
                            what: format!("the page file has no log file beside it: {e}"),
                            at: path.display().to_string(),
                        }
                    }
                })?;
                (pages, log)
            };
            // Emulated device latency of every fdatasync (pmem `sync_latency_ns`; 0: none).
            let sync_ns = options.pmem_options().sync_latency();
            pages.set_sync_latency_ns(sync_ns);
            log.set_sync_latency_ns(sync_ns);
            on_block_files(pages, log, options, create)
        }
    }
}

fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| Error::Io {
        op: "create the database directory",
        at: path.display().to_string(),
        source: e,
    })
}

/// The error for a file-store database whose log is not the kind the options' protocol keeps:
/// `Incompatible` when the other kind (`other`) is there (NVWAL's PM log beside a page file
/// opened with another protocol, or a log file opened with NVWAL), else `Corrupted`.
fn missing_log(path: &Path, other: &str, opened_with: &str) -> Error {
    if path.join(other).exists() {
        Error::Incompatible {
            what: format!(
                "the database's log is {other:?}, which {opened_with} does not keep: open it \
                 with the protocol it was created with (NVWAL keeps its log in the pool set \
                 {PM_LOG_DIR:?}, the journal and the WAL in the file {LOG_FILE:?})"
            ),
            at: path.display().to_string(),
        }
    } else {
        Error::Corrupted {
            what: "the page file has no log beside it".into(),
            at: path.display().to_string(),
        }
    }
}

fn is_nvwal(options: &Options) -> bool {
    options.engine_kind() == EngineKind::Paged { protocol: PagedProtocol::Nvwal }
}

/// Runs the engine with its PM store on a pre-made pool set (the crash tester's simulated
/// ones).
pub(crate) fn on_pool_set(
    set: PoolSet,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    expect_store(options, PagedStore::Pm, "a pool set")?;
    // Opening the set marked it open: a refused open (not a paged database, another
    // protocol, a newer version, damage) puts a clean state back, so it changes nothing
    // ([R2]; SOFORT's glue does the same).
    let clean = !create && set.was_clean_shutdown();
    let files = Arc::new(if create {
        PmFiles::create(set)?
    } else {
        match PmFiles::open_or_return(set) {
            Ok(files) => files,
            Err(refused) => {
                let (e, set) = *refused;
                if clean {
                    let _ = set.close();
                }
                return Err(e);
            }
        }
    });
    let kept = Arc::clone(&files);
    let started = (|| {
        let mut head = [0u8; Meta::HEAD];
        if !create {
            files.read_at(PAGES, 0, &mut head)?;
        }
        let log = LogFile::Pm(files.clone());
        start(options, create, &head, log, |size| PageStore::Pm(PmStore::new(files, size)))
    })();
    if started.is_err()
        && clean
        && let Ok(files) = Arc::try_unwrap(kept)
    {
        let _ = files.into_set().close();
    }
    started
}

/// Runs the engine with its file store on the page file `pages` and the log file `log`
/// (real files, or the crash tester's simulated ones). Not NVWAL, whose log is in PM
/// ([`on_block_file_and_pool_set`]).
pub(crate) fn on_block_files(
    pages: BlockFile,
    log: BlockFile,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    expect_store(options, PagedStore::File, "block files")?;
    if is_nvwal(options) {
        return Err(Error::InvalidArgument(
            "NVWAL keeps its log in a PM pool set, not in a block file".into(),
        ));
    }
    let head = file_head(&pages, create)?;
    start(options, create, &head, LogFile::Block(log), |size| {
        PageStore::File(FileStore::new(pages, size, options.paged_config().cache_pages))
    })
}

/// Runs NVWAL with its file store on the page file `pages` and its log in PM files of the
/// pool set `log` (real ones, or the crash tester's simulated block file and pool set on one
/// domain). Other protocols return `InvalidArgument`.
pub(crate) fn on_block_file_and_pool_set(
    pages: BlockFile,
    log: PoolSet,
    options: &Options,
    create: bool,
) -> Result<Arc<dyn Engine>> {
    expect_store(options, PagedStore::File, "a block file and a pool set")?;
    if !is_nvwal(options) {
        return Err(Error::InvalidArgument(
            "only NVWAL keeps its log in a pool set beside a page file".into(),
        ));
    }
    let head = file_head(&pages, create)?;
    let files = Arc::new(if create { PmFiles::create(log)? } else { PmFiles::open(log)? });
    start(options, create, &head, LogFile::Pm(files), |size| {
        PageStore::File(FileStore::new(pages, size, options.paged_config().cache_pages))
    })
}

/// The head of the meta page in the page file `pages` (zeros at creation).
fn file_head(pages: &BlockFile, create: bool) -> Result<[u8; Meta::HEAD]> {
    let mut head = [0u8; Meta::HEAD];
    if !create && pages.read_at(0, &mut head)? < head.len() {
        return Err(Error::Corrupted {
            what: "the page file is shorter than a meta page: its creation did not finish".into(),
            at: "paged file store".into(),
        });
    }
    Ok(head)
}

/// `InvalidArgument` unless `options` choose the store `want`, the one `medium` holds.
fn expect_store(options: &Options, want: PagedStore, medium: &str) -> Result<()> {
    let chosen = options.paged_config().store;
    if chosen == want {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{medium} can hold only a paged database of the {} store; the options choose the {} store",
        want.name(),
        chosen.name()
    )))
}

/// The common part of opening: the page size (from the options at creation, else from the
/// meta page's `head`), the store, the protocol (checked against the meta page before its
/// recovery runs), the pager and the catalog.
fn start(
    options: &Options,
    create: bool,
    head: &[u8],
    log: LogFile,
    store: impl FnOnce(PageSize) -> PageStore,
) -> Result<Arc<dyn Engine>> {
    let kind = options.engine_kind();
    let EngineKind::Paged { protocol } = kind else {
        return Err(Error::InvalidArgument(format!("{kind} is not a paged engine")));
    };
    let cfg = options.paged_config();
    let (size, code) =
        if create { (PageSize::new(cfg.page_size)?, 0) } else { Meta::head_of(head)? };
    let store = store(size);
    let proto = match protocol {
        PagedProtocol::Journal => Protocol::Journal(Journal::new(store, log)),
        PagedProtocol::Wal => Protocol::Wal(Wal::new(store, log, cfg.checkpoint_frames)),
        PagedProtocol::Fash => Protocol::Fash(Fash::new(store, false, false)?),
        PagedProtocol::Fast => Protocol::Fash(Fash::new(store, true, cfg.same_line_order)?),
        PagedProtocol::Nvwal => {
            Protocol::Nvwal(Nvwal::new(store, log, cfg.checkpoint_frames, cfg.nvwal_sync)?)
        }
    };
    if !create {
        check_protocol(code, &proto)?;
    }
    // The PM store's reads copy pages out of PM: the pager keeps committed images in DRAM
    // (the file store caches below the protocol instead).
    let cache = if matches!(proto.store(), PageStore::Pm(_)) { cfg.cache_pages } else { 0 };
    let pager = if create { Pager::create(proto, size)? } else { Pager::open(proto)? };
    pager.set_cache_pages(cache)?;
    let mut catalog = BTreeMap::new();
    {
        let r = pager.begin_read()?;
        let tree = BTree::open(r.meta().catalog_root);
        for kv in tree.range(&r, Bound::Unbounded, Bound::Unbounded, Direction::Ascending)? {
            let (k, v) = kv?;
            let name = String::from_utf8(k).map_err(|_| Error::Corrupted {
                what: "a catalog key is not UTF-8".into(),
                at: "paged catalog".into(),
            })?;
            let e = rows::decode_entry(&name, &v)?;
            catalog.insert(name, Arc::new(Entry::from(e, 0)));
        }
    }
    Ok(Arc::new(Paged { kind, shared: Arc::new(Shared { pager, catalog: RwLock::new(catalog) }) }))
}

/// A table: its schema and roots, and the commit that created it (E4; 0: before this open).
#[derive(Debug)]
struct Entry {
    schema: Arc<Table>,
    root: PageNo,
    index_roots: Vec<PageNo>,
    created: u64,
}

impl Entry {
    fn from(e: CatalogEntry, created: u64) -> Entry {
        Entry { schema: Arc::new(e.table), root: e.root, index_roots: e.index_roots, created }
    }
}

#[derive(Debug)]
struct Shared {
    pager: Arc<Pager>,
    catalog: RwLock<BTreeMap<String, Arc<Entry>>>,
}

impl Shared {
    fn entry(&self, name: &str) -> Result<Arc<Entry>> {
        self.catalog
            .read()
            .map_err(|_| Error::Poisoned)?
            .get(name)
            .cloned()
            .ok_or_else(|| SchemaError::UnknownTable(name.to_owned()).into())
    }
}

/// The paged engine.
pub(crate) struct Paged {
    kind: EngineKind,
    shared: Arc<Shared>,
}

impl fmt::Debug for Paged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paged").field("kind", &self.kind).finish_non_exhaustive()
    }
}

impl Engine for Paged {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn create_table(&self, table: Table) -> Result<()> {
        let name = table.name().to_owned();
        if self.shared.entry(&name).is_ok() {
            return Err(SchemaError::TableExists(name).into());
        }
        let mut w = self.shared.pager.begin_write()?;
        // Checked again under the writer lock, in the catalog tree itself: the check above
        // is only a fast refusal, and another thread's create of the same name may have
        // committed between it and the lock (its in-memory entry may not be in yet either).
        let catalog = BTree::open(w.meta().catalog_root);
        if catalog.get(&w, name.as_bytes())?.is_some() {
            return Err(SchemaError::TableExists(name).into());
        }
        let limit = BTree::limits(&w).max_key;
        if name.len() > limit {
            return Err(Error::InvalidArgument(format!(
                "table name of {} bytes: the paged engine's limit is {limit}",
                name.len()
            )));
        }
        let root = BTree::create(&mut w)?.root();
        let mut index_roots = Vec::with_capacity(table.indexes.len());
        for _ in &table.indexes {
            index_roots.push(BTree::create(&mut w)?.root());
        }
        let e = CatalogEntry { table, root, index_roots };
        let value = rows::encode_entry(&e)?;
        if !catalog.insert(&mut w, name.as_bytes(), &value)? {
            // Not reachable under the writer lock after the check above; refused all the same
            // rather than committing trees no catalog entry reaches.
            return Err(SchemaError::TableExists(name).into());
        }
        let seq = w.commit()?;
        let mut cat = self.shared.catalog.write().map_err(|_| Error::Poisoned)?;
        cat.insert(name, Arc::new(Entry::from(e, seq)));
        Ok(())
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        Ok(self.shared.entry(name)?.schema.clone())
    }

    fn table_names(&self) -> Result<Vec<String>> {
        Ok(self.shared.catalog.read().map_err(|_| Error::Poisoned)?.keys().cloned().collect())
    }

    fn begin(&self) -> Result<Box<dyn EngineTxn>> {
        let w = self.shared.pager.begin_write()?;
        Ok(Box::new(PagedTxn { shared: self.shared.clone(), view: View::Write(w), failed: None }))
    }

    fn begin_read(&self) -> Result<Box<dyn EngineTxn>> {
        let r = self.shared.pager.begin_read()?;
        Ok(Box::new(PagedTxn { shared: self.shared.clone(), view: View::Read(r), failed: None }))
    }

    fn wait_durable(&self, seq: u64) -> Result<()> {
        let last = self.shared.pager.meta()?.seq;
        if seq > last {
            return Err(Error::InvalidArgument(format!(
                "commit {seq} is not a commit of this database (last {last})"
            )));
        }
        Ok(())
    }

    fn close(&self) -> Result<()> {
        self.shared.pager.close()
    }

    fn check(&self) -> Result<String> {
        let r = self.shared.pager.begin_read()?;
        let meta = r.meta();
        let cat = BTree::open(meta.catalog_root).check(&r)?;
        let tables: Vec<Arc<Entry>> =
            self.shared.catalog.read().map_err(|_| Error::Poisoned)?.values().cloned().collect();
        let mut rows_total = 0u64;
        let mut tree_pages = cat.pages();
        for e in tables.iter().filter(|e| e.created <= meta.seq) {
            let t = &e.schema;
            tree_pages += BTree::open(e.root).check(&r)?.pages();
            let mut n = 0u64;
            for kv in BTree::open(e.root).range(
                &r,
                Bound::Unbounded,
                Bound::Unbounded,
                Direction::Ascending,
            )? {
                let (pk, v) = kv?;
                let row = rows::decode(t, &v)?;
                if t.encode_pk(&row) != pk {
                    return Err(broken(t, "a row under another primary key"));
                }
                for ie in entries(t, &row, &pk) {
                    let got = BTree::open(e.index_roots[ie.index]).get(&r, &ie.key)?;
                    if got.as_deref() != Some(&pk[..]) {
                        return Err(broken(t, "a row without its index entry"));
                    }
                }
                n += 1;
            }
            for &root in &e.index_roots {
                let s = BTree::open(root).check(&r)?;
                tree_pages += s.pages();
                // Every row has its entries (above), so a count above the rows' is an entry
                // of no row.
                if s.entries != n {
                    return Err(broken(t, "an index with entries of no row"));
                }
            }
            rows_total += n;
        }
        if tree_pages + u64::from(meta.free_count) + 1 > meta.page_count {
            return Err(Error::Corrupted {
                what: format!(
                    "{tree_pages} tree pages and {} free pages in a database of {} pages",
                    meta.free_count, meta.page_count
                ),
                at: "paged meta page".into(),
            });
        }
        Ok(format!(
            "paged: {} tables, {rows_total} rows, {} pages ({tree_pages} in trees, {} free), commit {}",
            tables.len(),
            meta.page_count,
            meta.free_count,
            meta.seq
        ))
    }
}

fn broken(t: &Table, what: &str) -> Error {
    Error::Corrupted { what: what.into(), at: format!("paged table {:?}", t.name()) }
}

enum View {
    Write(WriteView),
    Read(ReadView),
}

/// A transaction of the paged engine.
struct PagedTxn {
    shared: Arc<Shared>,
    view: View,
    /// E3: the error of a write that failed after its checks.
    failed: Option<String>,
}

impl fmt::Debug for PagedTxn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, seq) = match &self.view {
            View::Write(w) => ("read-write", w.meta().seq),
            View::Read(r) => ("read-only", r.meta().seq),
        };
        f.debug_struct("PagedTxn").field("kind", &kind).field("snapshot", &seq).finish()
    }
}

fn bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

/// The row with primary key `pk`, in `pages`.
fn get_row<R: PageRead>(pages: &R, e: &Entry, pk: &[u8]) -> Result<Option<Row>> {
    BTree::open(e.root).get(pages, pk)?.map(|v| rows::decode(&e.schema, &v)).transpose()
}

/// Up to `limit` rows of `range` on `path` that pass `filters`, in `direction`.
fn scan_rows<R: PageRead>(
    pages: &R,
    e: &Entry,
    path: AccessPath,
    range: &ByteRange,
    direction: Direction,
    limit: Option<usize>,
    filters: &[Filter],
) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    if range.is_empty() || limit == Some(0) {
        return Ok(out);
    }
    let root = match path {
        AccessPath::Primary => e.root,
        AccessPath::Index(i) => *e
            .index_roots
            .get(i)
            .ok_or_else(|| crate::engine::common::index::no_index(&e.schema, i))?,
    };
    for kv in BTree::open(root).range(pages, bound(&range.lower), bound(&range.upper), direction)? {
        let (_, v) = kv?;
        let row = match path {
            AccessPath::Primary => rows::decode(&e.schema, &v)?,
            AccessPath::Index(_) => get_row(pages, e, &v)?
                .ok_or_else(|| broken(&e.schema, "an index entry of a missing row"))?,
        };
        if matches_all(filters, &row) {
            out.push(row);
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
        }
    }
    Ok(out)
}

/// E3: `ValueTooLarge` if a key the row needs exceeds the tree's key limit.
fn check_key_sizes<R: PageRead>(pages: &R, t: &Table, pk: &[u8], keys: &[Vec<u8>]) -> Result<()> {
    let max = BTree::limits(pages).max_key;
    let over = |len: usize, column: &str| Error::ValueTooLarge {
        table: t.name().to_owned(),
        column: column.to_owned(),
        len: len as u64,
        max: max as u64,
    };
    if pk.len() > max {
        return Err(over(pk.len(), t.column_name(t.pk)));
    }
    if let Some(k) = keys.iter().find(|k| k.len() > max) {
        return Err(over(k.len(), "an indexed column"));
    }
    Ok(())
}

/// U1 for the paged engine: `DuplicateKey` if a row other than `pk` holds `row`'s values in
/// a unique index (`only`: the indexes to check; `None`: every unique index).
fn check_unique<R: PageRead>(
    pages: &R,
    e: &Entry,
    row: &[Value],
    pk: &[u8],
    only: Option<&[usize]>,
) -> Result<()> {
    let t = &e.schema;
    for (i, ix) in t.indexes.iter().enumerate() {
        if !ix.unique || only.is_some_and(|o| !o.contains(&i)) {
            continue;
        }
        let range = same_values_range(t, i, row)?;
        for kv in BTree::open(e.index_roots[i]).range(
            pages,
            bound(&range.lower),
            bound(&range.upper),
            Direction::Ascending,
        )? {
            let (_, holder) = kv?;
            if holder != pk {
                return Err(duplicate_index(t, i, row));
            }
        }
    }
    Ok(())
}

impl PagedTxn {
    fn entry(&self, table: &Arc<Table>) -> Result<Option<Arc<Entry>>> {
        let e = self.shared.entry(table.name())?;
        let seq = match &self.view {
            View::Write(w) => w.meta().seq,
            View::Read(r) => r.meta().seq,
        };
        Ok((e.created <= seq).then_some(e))
    }

    fn writer(&mut self) -> Result<&mut WriteView> {
        match &mut self.view {
            View::Write(w) => Ok(w),
            View::Read(_) => {
                Err(Error::InvalidArgument("a read-only transaction cannot write".into()))
            }
        }
    }

    /// Runs the writes of an operation whose checks passed; a failure dooms the transaction
    /// (E3).
    fn apply(&mut self, f: impl FnOnce(&mut WriteView) -> Result<()>) -> Result<()> {
        let r = f(self.writer()?);
        if let Err(e) = &r {
            self.failed.get_or_insert_with(|| e.to_string());
        }
        r
    }
}

impl EngineTxn for PagedTxn {
    fn get(&mut self, table: &Arc<Table>, pk: &[u8]) -> Result<Option<Row>> {
        let Some(e) = self.entry(table)? else { return Ok(None) };
        match &self.view {
            View::Write(w) => get_row(w, &e, pk),
            View::Read(r) => get_row(r, &e, pk),
        }
    }

    fn scan(
        &mut self,
        table: &Arc<Table>,
        scan: &LoweredScan,
        filters: &[Filter],
    ) -> Result<Vec<Row>> {
        let Some(e) = self.entry(table)? else { return Ok(Vec::new()) };
        let (p, r, d, l) = (scan.path, &scan.range, scan.direction, scan.limit);
        match &self.view {
            View::Write(w) => scan_rows(w, &e, p, r, d, l, filters),
            View::Read(v) => scan_rows(v, &e, p, r, d, l, filters),
        }
    }

    fn insert(&mut self, table: &Arc<Table>, row: Row) -> Result<()> {
        let e = self.entry(table)?.ok_or_else(|| SchemaError::UnknownTable(table.name().into()))?;
        let t = &e.schema;
        let pk = t.encode_pk(&row);
        let ies = entries(t, &row, &pk);
        {
            let w = self.writer()?;
            let keys: Vec<Vec<u8>> = ies.iter().map(|ie| ie.key.clone()).collect();
            check_key_sizes(w, t, &pk, &keys)?;
            if BTree::open(e.root).get(w, &pk)?.is_some() {
                return Err(duplicate_pk(t, &row));
            }
            check_unique(w, &e, &row, &pk, None)?;
        }
        let value = rows::encode(&row);
        self.apply(|w| {
            BTree::open(e.root).insert(w, &pk, &value)?;
            for ie in &ies {
                BTree::open(e.index_roots[ie.index]).insert(w, &ie.key, &pk)?;
            }
            Ok(())
        })
    }

    fn update(
        &mut self,
        table: &Arc<Table>,
        pk: &[u8],
        key: &Value,
        assignments: &[(usize, Value)],
    ) -> Result<()> {
        let e = self.entry(table)?.ok_or_else(|| SchemaError::UnknownTable(table.name().into()))?;
        let t = &e.schema;
        let (d, new) = {
            let w = self.writer()?;
            let Some(old) = get_row(w, &e, pk)? else {
                return Err(Error::NotFound { table: t.name().to_owned(), key: key.clone() });
            };
            let mut new = old.clone();
            for (pos, v) in assignments {
                if let Some(slot) = new.get_mut(*pos) {
                    *slot = v.clone();
                }
            }
            let d = diff(t, pk, Some(&old), Some(&new));
            let keys: Vec<Vec<u8>> = d.insert.iter().map(|ie| ie.key.clone()).collect();
            check_key_sizes(w, t, pk, &keys)?;
            let changed: Vec<usize> = d.insert.iter().map(|ie| ie.index).collect();
            check_unique(w, &e, &new, pk, Some(&changed))?;
            (d, new)
        };
        let value = rows::encode(&new);
        self.apply(|w| {
            BTree::open(e.root).put(w, pk, &value)?;
            for ie in &d.remove {
                BTree::open(e.index_roots[ie.index]).delete(w, &ie.key)?;
            }
            for ie in &d.insert {
                BTree::open(e.index_roots[ie.index]).insert(w, &ie.key, pk)?;
            }
            Ok(())
        })
    }

    fn delete(&mut self, table: &Arc<Table>, pk: &[u8], key: &Value) -> Result<()> {
        let e = self.entry(table)?.ok_or_else(|| SchemaError::UnknownTable(table.name().into()))?;
        let t = &e.schema;
        let old = {
            let w = self.writer()?;
            get_row(w, &e, pk)?
                .ok_or_else(|| Error::NotFound { table: t.name().to_owned(), key: key.clone() })?
        };
        let ies = entries(t, &old, pk);
        self.apply(|w| {
            for ie in &ies {
                BTree::open(e.index_roots[ie.index]).delete(w, &ie.key)?;
            }
            BTree::open(e.root).delete(w, pk)?;
            Ok(())
        })
    }

    fn commit(self: Box<Self>, _mode: CommitMode) -> Result<u64> {
        let PagedTxn { view, failed, .. } = *self;
        match view {
            View::Read(r) => Ok(r.meta().seq),
            View::Write(w) => {
                if let Some(why) = failed {
                    drop(w);
                    return Err(Error::InvalidArgument(format!(
                        "the transaction cannot commit: a write failed earlier ({why}); nothing \
                         of it was kept"
                    )));
                }
                w.commit()
            }
        }
    }

    fn abort(self: Box<Self>) {}
}
