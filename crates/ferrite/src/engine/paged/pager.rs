//! The pager (`docs/design/paged.md` §7): the meta page, the free-page list, one writer's
//! private dirty pages, and snapshots for readers, over a commit [`Protocol`].
//!
//! ```text
//!  page 0 (meta): magic u64 "FERRPAG1" | version u32 | page size u32 | compat u64 |
//!                 incompat u64 | page count u64 | free head u32 | free count u32 |
//!                 catalog root u32 | protocol u32 | commit seq u64 | crc32c u32 (over 8..64) |
//!                 0...   (protocol: 1 rollback journal, 2 WAL, 5 NVWAL; fixed at creation)
//!  free-list trunk: kind u8 (48) | 0 u8 x3 | next trunk u32 | n u32 | n page numbers u32
//! ```
//!
//! # Invariants
//! - G1: the meta page and every page a transaction changed reach the protocol in one
//!   [`Batch`]; so after any crash the meta page (page count, free list, catalog root) agrees
//!   with the trees (P2 of [`super::protocol`]).
//! - G2: the free list holds exactly the pages below the page count that no tree reaches; its
//!   trunk pages are themselves free pages (a page is handed out zeroed).
//! - G3: one writer at a time ([`Pager::begin_write`] gives `Busy` to a second); its writes go
//!   to private copies until commit, so readers and the committed state never see them.
//! - G4 (snapshots): a reader sees the pages as of the last commit before it began. A commit
//!   that overwrites a page keeps its previous image, tagged with the commit's sequence
//!   number, while a reader with an older snapshot is open; a reader takes the oldest image
//!   replaced after its snapshot, else the committed page.
//! - G5: after a failed commit the pager is poisoned: every later call returns `Poisoned`
//!   until the database is reopened (and recovered). A commit whose batch reached its commit
//!   point returns `Ok` even when a later step failed (an automatic checkpoint): it is
//!   committed and durable, and only the handle is poisoned ([R2]).
//! - G6 (cache): an image in the DRAM cache of committed pages is the page's latest committed
//!   image. A read that misses fills it while holding the protocol shared; a commit, holding
//!   it exclusively, replaces the images of the pages it changed (and adds them while there is
//!   room) once the protocol has made them durable. Recovery runs before the pager exists,
//!   so the cache starts empty and agrees with the store.
//!
//! # Ordering
//! - P-PG-3 (creation): the meta page (without its magic) and the empty catalog root are
//!   durable in the store before the magic is written; then the magic is made durable.
//!   Every later change goes through the protocol's rules.
//!
//! # Concurrency
//! The protocol sits behind a `RwLock`: reads of committed pages share it, a commit takes it
//! exclusively, and a reader looks up retained images while holding it shared, so it never
//! sees a commit half-applied. Lock order: protocol, then state, then cache (never two of the
//! last two at once).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use zerocopy::IntoBytes;

use super::bytes::{put_u32, u32_at};
use super::layout::{self, MetaHead};
use super::page::{self, Kind};
use super::pages::{META_PAGE, PageNo, PageRead, PageSize, PageWrite, next_page, writable};
use super::protocol::{Batch, Protocol};
use crate::error::{Error, Result};

/// "FERRPAG1".
const MAGIC: u64 = u64::from_le_bytes(*b"FERRPAG1");
/// Format version of the paged database.
pub(crate) const VERSION: u32 = 1;
/// The catalog tree's root, created with the database.
pub(crate) const CATALOG_ROOT: PageNo = 1;
/// Kind byte of a free-list trunk page.
const KIND_TRUNK: u8 = 48;
const TRUNK_HEAD: usize = 12;

/// What the meta page says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    /// Pages in the database, the meta page and free pages included.
    pub page_count: u64,
    /// First free-list trunk page (0: none).
    pub free_head: PageNo,
    /// Pages on the free list.
    pub free_count: u32,
    /// The catalog tree's root.
    pub catalog_root: PageNo,
    /// Sequence number of the last commit.
    pub seq: u64,
    /// The commit protocol the database was created with ([`Protocol::code`]).
    pub protocol: u32,
}

/// `Incompatible` unless the database was created with `protocol` (code `code` in its meta
/// page): a log of one protocol read by another would be ignored or misread.
pub(crate) fn check_protocol(code: u32, protocol: &Protocol) -> Result<()> {
    let name = |c: u32| match c {
        1 => "the rollback journal",
        2 => "the WAL",
        3 => "FASH",
        4 => "FAST",
        5 => "NVWAL",
        _ => "an unknown protocol",
    };
    if code == protocol.code() {
        return Ok(());
    }
    Err(Error::Incompatible {
        what: format!(
            "the database was created with {} (code {code}) and is opened with {}; open it with \
             the protocol it was created with",
            name(code),
            name(protocol.code())
        ),
        at: "paged meta page".into(),
    })
}

fn corrupt(what: impl Into<String>, page: PageNo) -> Error {
    Error::Corrupted { what: what.into(), at: format!("paged database page {page}") }
}

impl Meta {
    /// The meta page image (the magic included unless `magic` is false).
    fn encode(&self, size: PageSize, magic: bool) -> Vec<u8> {
        let mut h = MetaHead {
            version: VERSION.into(),
            page_size: (size.bytes() as u32).into(),
            page_count: self.page_count.into(),
            free_head: self.free_head.into(),
            free_count: self.free_count.into(),
            catalog_root: self.catalog_root.into(),
            protocol: self.protocol.into(),
            seq: self.seq.into(),
            ..MetaHead::default()
        };
        h.crc = crc32c::crc32c(&h.as_bytes()[8..64]).into();
        if magic {
            h.magic = MAGIC.into();
        }
        let mut b = vec![0u8; size.bytes()];
        b[..size_of::<MetaHead>()].copy_from_slice(h.as_bytes());
        b
    }

    /// Reads a meta page. Errors: `Corrupted` (an unfinished creation, another file, a bad
    /// checksum or field), `Incompatible` (a newer version or unknown incompatible flags).
    pub(crate) fn decode(b: &[u8], size: PageSize) -> Result<Meta> {
        let Some(h) = layout::read::<MetaHead>(b) else {
            return Err(corrupt("meta page too short", META_PAGE));
        };
        match h.magic.get() {
            MAGIC => {}
            0 => {
                return Err(corrupt("no magic: the database's creation did not finish", META_PAGE));
            }
            _ => return Err(corrupt("not a paged database (bad magic)", META_PAGE)),
        }
        if crc32c::crc32c(&h.as_bytes()[8..64]) != h.crc.get() {
            return Err(corrupt("meta page checksum mismatch", META_PAGE));
        }
        let version = h.version.get();
        if version > VERSION || h.incompat.get() != 0 {
            return Err(Error::Incompatible {
                what: format!(
                    "paged database version {version}, incompatible flags {:#x} (this build \
                     reads version {VERSION} without flags)",
                    h.incompat.get()
                ),
                at: "meta page".into(),
            });
        }
        if h.page_size.get() as usize != size.bytes() {
            return Err(corrupt(
                format!(
                    "meta page says {}-byte pages, the store has {}",
                    h.page_size.get(),
                    size.bytes()
                ),
                META_PAGE,
            ));
        }
        let m = Meta {
            page_count: h.page_count.get(),
            free_head: h.free_head.get(),
            free_count: h.free_count.get(),
            catalog_root: h.catalog_root.get(),
            seq: h.seq.get(),
            protocol: h.protocol.get(),
        };
        if m.page_count < 2
            || m.page_count > u64::from(u32::MAX)
            || u64::from(m.catalog_root) >= m.page_count
            || m.catalog_root == META_PAGE
            || u64::from(m.free_head) >= m.page_count
            || u64::from(m.free_count) >= m.page_count
            || !(1..=5).contains(&m.protocol)
        {
            return Err(corrupt(format!("meta page fields out of range: {m:?}"), META_PAGE));
        }
        Ok(m)
    }

    /// The page size and protocol code a meta page's first [`Meta::HEAD`] bytes name, read
    /// before the store and the protocol are built (the protocol's recovery must not run on
    /// another protocol's log). The fields are checked again, with the checksum, when the
    /// pager reads the whole page.
    pub(crate) fn head_of(b: &[u8]) -> Result<(PageSize, u32)> {
        let Some(h) = layout::read::<MetaHead>(b) else {
            return Err(corrupt("meta page too short", META_PAGE));
        };
        if h.magic.get() == 0 {
            return Err(corrupt("no magic: the database's creation did not finish", META_PAGE));
        }
        let size = PageSize::new(h.page_size.get() as usize)
            .map_err(|_| corrupt(format!("bad page size {}", h.page_size.get()), META_PAGE))?;
        Ok((size, h.protocol.get()))
    }

    /// Bytes [`Meta::head_of`] reads.
    pub(crate) const HEAD: usize = size_of::<MetaHead>();
}

/// The pager (see the module docs). Shared by the engine and its transactions.
#[derive(Debug)]
pub(crate) struct Pager {
    size: PageSize,
    protocol: RwLock<Protocol>,
    state: Mutex<State>,
    /// G6: images of committed pages (latest state), so that a page is copied out of the
    /// store once, not at every read.
    cache: Mutex<Cache>,
    writer: AtomicBool,
    poisoned: AtomicBool,
}

/// A bounded map from page to its latest committed image (G6). Full: a new page replaces a
/// pseudo-randomly chosen one (random replacement: O(1), no bookkeeping on hits).
#[derive(Debug, Default)]
struct Cache {
    cap: usize,
    /// Page -> (image, its index in `order`).
    pages: HashMap<PageNo, (Arc<[u8]>, usize)>,
    /// The cached pages, for choosing a victim.
    order: Vec<PageNo>,
    /// xorshift state for the victim's index.
    rng: u64,
}

impl Cache {
    fn get(&self, no: PageNo) -> Option<Arc<[u8]>> {
        self.pages.get(&no).map(|(img, _)| img.clone())
    }

    fn contains(&self, no: PageNo) -> bool {
        self.pages.contains_key(&no)
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    /// Caches `img` as page `no`'s image, replacing a victim when full.
    fn put(&mut self, no: PageNo, img: Arc<[u8]>) {
        if let Some(e) = self.pages.get_mut(&no) {
            e.0 = img;
            return;
        }
        if self.cap == 0 {
            return;
        }
        while self.order.len() >= self.cap {
            self.evict();
        }
        self.pages.insert(no, (img, self.order.len()));
        self.order.push(no);
    }

    /// Drops one pseudo-randomly chosen page.
    fn evict(&mut self) {
        if self.order.is_empty() {
            return;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let i = (self.rng % self.order.len() as u64) as usize;
        let victim = self.order.swap_remove(i);
        self.pages.remove(&victim);
        if let Some(&moved) = self.order.get(i)
            && let Some(e) = self.pages.get_mut(&moved)
        {
            e.1 = i;
        }
    }

    /// Sets the capacity, dropping pages beyond it.
    fn resize(&mut self, cap: usize) {
        self.cap = cap;
        if self.rng == 0 {
            self.rng = 0x9E37_79B9_7F4A_7C15;
        }
        while self.order.len() > cap {
            self.evict();
        }
    }
}

/// Images of one page replaced by later commits: `(replaced at, image)`, ascending.
type Replaced = Vec<(u64, Arc<[u8]>)>;

#[derive(Debug)]
struct State {
    meta: Meta,
    free: BTreeSet<PageNo>,
    /// Open readers' snapshots, with multiplicity.
    readers: BTreeMap<u64, usize>,
    /// G4: for a page, images replaced by later commits, `(replaced at, image)` ascending.
    old: HashMap<PageNo, Replaced>,
}

impl Pager {
    /// Formats a new database on `protocol`'s (empty) store (P-PG-3).
    pub(crate) fn create(mut protocol: Protocol, size: PageSize) -> Result<Arc<Pager>> {
        if protocol.store().page_size() != size.bytes() {
            return Err(Error::InvalidArgument("store and pager page sizes differ".into()));
        }
        protocol.recover()?;
        let meta = Meta {
            page_count: 2,
            free_head: 0,
            free_count: 0,
            catalog_root: CATALOG_ROOT,
            seq: 0,
            protocol: protocol.code(),
        };
        let mut root = vec![0u8; size.bytes()];
        page::init(&mut root, Kind::Leaf, 0)?;
        let store = protocol.store();
        store.ensure(2)?;
        store.write_page(CATALOG_ROOT, &root, "P-PG-3")?; // ORDER(P-PG-3): the empty catalog root before the magic
        store.write_page(META_PAGE, &meta.encode(size, false), "P-PG-3")?; // ORDER(P-PG-3): the meta page without its magic first
        store.sync("P-PG-3")?; // ORDER(P-PG-3): meta and catalog root durable before the magic
        store.write_page(META_PAGE, &meta.encode(size, true), "P-PG-3")?; // ORDER(P-PG-3): the magic last: creation is complete
        store.sync("P-PG-3")?; // ORDER(P-PG-3): creation durable before the database is used
        Ok(Arc::new(Pager::with(protocol, size, meta, BTreeSet::new())))
    }

    /// Opens a database: recovers the protocol, reads the meta page and the free list.
    pub(crate) fn open(mut protocol: Protocol) -> Result<Arc<Pager>> {
        let size = PageSize::new(protocol.store().page_size())?;
        protocol.recover()?;
        let mut b = vec![0u8; size.bytes()];
        protocol.read_page(META_PAGE, &mut b)?;
        let meta = Meta::decode(&b, size)?;
        check_protocol(meta.protocol, &protocol)?;
        let free = read_free_list(&protocol, size, &meta)?;
        Ok(Arc::new(Pager::with(protocol, size, meta, free)))
    }

    fn with(protocol: Protocol, size: PageSize, meta: Meta, free: BTreeSet<PageNo>) -> Pager {
        Pager {
            size,
            protocol: RwLock::new(protocol),
            state: Mutex::new(State { meta, free, readers: BTreeMap::new(), old: HashMap::new() }),
            cache: Mutex::new(Cache::default()),
            writer: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
        }
    }

    fn check(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) { Err(Error::Poisoned) } else { Ok(()) }
    }

    fn state(&self) -> Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| Error::Poisoned)
    }

    fn protocol(&self) -> Result<RwLockReadGuard<'_, Protocol>> {
        self.protocol.read().map_err(|_| Error::Poisoned)
    }

    fn cache(&self) -> Result<MutexGuard<'_, Cache>> {
        self.cache.lock().map_err(|_| Error::Poisoned)
    }

    /// Keeps up to `pages` committed page images in DRAM (G6; 0, the default: none). The
    /// engine sets it for the PM store, whose reads otherwise copy every page out of PM; the
    /// file store has its own page cache below the protocol.
    pub(crate) fn set_cache_pages(&self, pages: usize) -> Result<()> {
        self.cache()?.resize(pages);
        Ok(())
    }

    /// Pages in the cache (for tests).
    #[cfg(test)]
    pub(crate) fn cached_pages(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    /// The committed meta page.
    pub(crate) fn meta(&self) -> Result<Meta> {
        Ok(self.state()?.meta)
    }

    /// The page size.
    pub(crate) fn page_size(&self) -> PageSize {
        self.size
    }

    /// Starts the one write transaction (G3). Errors: `Busy` while another is open.
    pub(crate) fn begin_write(self: &Arc<Self>) -> Result<WriteView> {
        self.check()?;
        if self.writer.swap(true, Ordering::AcqRel) {
            return Err(Error::Busy(
                "another read-write transaction is open (one writer at a time)".into(),
            ));
        }
        let begun = self
            .state()
            .map(|st| (st.meta, st.free.clone()))
            .and_then(|(meta, free)| Ok((meta, free, self.protocol()?.writes_in_place())));
        let (meta, free, cow) = match begun {
            Ok(b) => b,
            Err(e) => {
                self.writer.store(false, Ordering::Release);
                return Err(e);
            }
        };
        Ok(WriteView {
            cow,
            originals: BTreeMap::new(),
            pager: self.clone(),
            count: meta.page_count,
            meta,
            free,
            dirty: BTreeMap::new(),
            done: false,
        })
    }

    /// Starts a reader of the last commit's snapshot (G4).
    pub(crate) fn begin_read(self: &Arc<Self>) -> Result<ReadView> {
        self.check()?;
        // Registered under the protocol lock, shared: a commit holds it exclusively from the
        // moment it picks the images open readers need (G4) until it publishes its meta, so
        // a reader never registers in between. One that did got the old meta and none of the
        // old images, and read the new pages through it: a torn snapshot, or `Corrupted`
        // ("reference to a page outside the snapshot") when the commit grew the file ([R2];
        // regression test in `tests/engines_paged.rs`). It waits for such a commit, as every
        // page read does (G6).
        let _commits = self.protocol()?;
        let mut st = self.state()?;
        let seq = st.meta.seq;
        *st.readers.entry(seq).or_default() += 1;
        Ok(ReadView { pager: self.clone(), meta: st.meta })
    }

    /// The image of committed page `no` as snapshot `snapshot` sees it (`None`: the latest).
    fn committed(&self, no: PageNo, snapshot: Option<u64>) -> Result<Arc<[u8]>> {
        let proto = self.protocol()?;
        if let Some(s) = snapshot {
            let st = self.state()?;
            if let Some(v) = st.old.get(&no)
                && let Some((_, img)) = v.iter().find(|(replaced, _)| *replaced > s)
            {
                return Ok(img.clone());
            }
        }
        if let Some(img) = self.cache()?.get(no) {
            return Ok(img);
        }
        // Read straight into the shared buffer: collecting a `repeat_n` (exact length) into an
        // `Arc<[u8]>` allocates it once, so the page is copied once, out of the store (a `Vec`
        // turned into an `Arc` was a second 4 KiB copy per read, most of a read-only YCSB
        // transaction's time in a profile; `docs/benchmarks.md`, "Paged engine I").
        let mut b: Arc<[u8]> = std::iter::repeat_n(0u8, self.size.bytes()).collect();
        let Some(buf) = Arc::get_mut(&mut b) else {
            // A fresh Arc has no other owner; this branch is never taken.
            return Err(Error::Poisoned);
        };
        proto.read_page(no, buf)?;
        // G6: no commit runs while `proto` is held, so `b` is still the latest image.
        self.cache()?.put(no, b.clone());
        Ok(b)
    }

    fn end_reader(&self, seq: u64) {
        // A poisoned state only keeps retained images longer.
        if let Ok(mut st) = self.state.lock() {
            if let Some(n) = st.readers.get_mut(&seq) {
                *n -= 1;
                if *n == 0 {
                    st.readers.remove(&seq);
                }
            }
            trim(&mut st);
        }
    }

    /// Checkpoints the protocol (WAL) and reports errors; called at close.
    pub(crate) fn close(&self) -> Result<()> {
        self.check()?;
        self.protocol.write().map_err(|_| Error::Poisoned)?.checkpoint()
    }
}

/// Drops retained images no open reader can see (G4).
fn trim(st: &mut State) {
    let oldest = st.readers.keys().next().copied();
    st.old.retain(|_, v| {
        v.retain(|(replaced, _)| oldest.is_some_and(|s| s < *replaced));
        !v.is_empty()
    });
}

fn read_free_list(proto: &Protocol, size: PageSize, meta: &Meta) -> Result<BTreeSet<PageNo>> {
    let mut free = BTreeSet::new();
    let mut trunk = meta.free_head;
    let mut b = vec![0u8; size.bytes()];
    let cap = (size.bytes() - TRUNK_HEAD) / 4;
    let mut trunks = 0u64;
    while trunk != 0 {
        trunks += 1;
        if u64::from(trunk) >= meta.page_count || trunks > meta.page_count {
            return Err(corrupt("free-list trunk out of range or in a cycle", trunk));
        }
        proto.read_page(trunk, &mut b)?;
        let n = u32_at(&b, 8) as usize;
        if b[0] != KIND_TRUNK || n > cap {
            return Err(corrupt("not a free-list trunk page", trunk));
        }
        for i in 0..n {
            let p = u32_at(&b, TRUNK_HEAD + 4 * i);
            if p == META_PAGE || u64::from(p) >= meta.page_count || !free.insert(p) {
                return Err(corrupt(format!("free-list entry {p} out of range or twice"), trunk));
            }
        }
        trunk = u32_at(&b, 4);
    }
    if free.len() != meta.free_count as usize {
        return Err(corrupt(
            format!("free list holds {} pages, the meta page says {}", free.len(), meta.free_count),
            META_PAGE,
        ));
    }
    Ok(free)
}

/// The free list as trunk pages (G2): the lowest free pages carry the list of all of them.
fn free_trunks(size: PageSize, free: &BTreeSet<PageNo>) -> Vec<(PageNo, Vec<u8>)> {
    let cap = (size.bytes() - TRUNK_HEAD) / 4;
    let all: Vec<PageNo> = free.iter().copied().collect();
    let k = all.len().div_ceil(cap);
    (0..k)
        .map(|t| {
            let mut b = vec![0u8; size.bytes()];
            b[0] = KIND_TRUNK;
            put_u32(&mut b, 4, if t + 1 < k { all[t + 1] } else { 0 });
            let part = &all[t * cap..((t + 1) * cap).min(all.len())];
            put_u32(&mut b, 8, part.len() as u32);
            for (i, p) in part.iter().enumerate() {
                put_u32(&mut b, TRUNK_HEAD + 4 * i, *p);
            }
            (all[t], b)
        })
        .collect()
}

/// The free pages of `free` that hold none of its list ([`free_trunks`] puts the list on the
/// first pages of the set): what a commit may overwrite without the committed state noticing.
fn spare_pages(size: PageSize, free: &BTreeSet<PageNo>) -> BTreeSet<PageNo> {
    let cap = (size.bytes() - TRUNK_HEAD) / 4;
    let trunks = free.len().div_ceil(cap);
    free.iter().skip(trunks).copied().collect()
}

/// A reader's view: the snapshot of the last commit before it began (G4).
#[derive(Debug)]
pub(crate) struct ReadView {
    pager: Arc<Pager>,
    meta: Meta,
}

impl ReadView {
    /// The meta page of the snapshot.
    pub(crate) fn meta(&self) -> Meta {
        self.meta
    }
}

impl Drop for ReadView {
    fn drop(&mut self) {
        self.pager.end_reader(self.meta.seq);
    }
}

impl PageRead for ReadView {
    type Page = Arc<[u8]>;

    fn page_size(&self) -> PageSize {
        self.pager.size
    }

    fn page(&self, no: PageNo) -> Result<Arc<[u8]>> {
        if no == META_PAGE || u64::from(no) >= self.meta.page_count {
            return Err(corrupt("reference to a page outside the snapshot", no));
        }
        self.pager.check()?;
        self.pager.committed(no, Some(self.meta.seq))
    }
}

/// The writer's view: committed pages plus its private copies (G3).
#[derive(Debug)]
pub(crate) struct WriteView {
    pager: Arc<Pager>,
    /// Defragment by copying (the protocol writes pages in place).
    cow: bool,
    /// With `cow`: the committed image of every page this transaction changed, as it was read
    /// (the protocol compares the new image with it instead of reading the store again).
    originals: BTreeMap<PageNo, Arc<[u8]>>,
    meta: Meta,
    count: u64,
    free: BTreeSet<PageNo>,
    dirty: BTreeMap<PageNo, Arc<[u8]>>,
    done: bool,
}

impl WriteView {
    /// The meta page as this transaction started from.
    pub(crate) fn meta(&self) -> Meta {
        self.meta
    }

    /// Pages changed so far.
    pub(crate) fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    /// Drops every change since `begin_write`, keeping the transaction open (a failed
    /// operation's partial changes, P5 of [`super`], are undone by the engine this way only
    /// when it aborts the whole transaction).
    pub(crate) fn discard(&mut self) -> Result<()> {
        self.dirty.clear();
        self.originals.clear();
        self.count = self.meta.page_count;
        self.free = self.pager.state()?.free.clone();
        Ok(())
    }

    /// Commits (G1): the changed pages, the free list and the meta page in one batch. Returns
    /// the commit's sequence number. A transaction that changed nothing commits nothing.
    pub(crate) fn commit(mut self) -> Result<u64> {
        let pager = self.pager.clone();
        pager.check()?;
        if self.dirty.is_empty() && self.count == self.meta.page_count {
            self.done = true;
            pager.writer.store(false, Ordering::Release);
            return Ok(self.meta.seq);
        }
        let size = pager.size;
        let mut pages: BTreeMap<PageNo, Arc<[u8]>> = std::mem::take(&mut self.dirty);
        let committed_free = pager.state()?.free.clone();
        let mut meta = self.meta;
        if self.free != committed_free {
            for (no, img) in free_trunks(size, &self.free) {
                pages.insert(no, img.into());
            }
            meta.free_head = self.free.first().copied().unwrap_or(0);
            meta.free_count = self.free.len() as u32;
        }
        meta.page_count = self.count;
        meta.seq += 1;
        pages.insert(META_PAGE, meta.encode(size, true).into());
        let result = (|| {
            let mut proto = pager.protocol.write().map_err(|_| Error::Poisoned)?;
            // G4: images that open readers may still need, read before they are replaced.
            let keep: Vec<(PageNo, Arc<[u8]>)> = if pager.state()?.readers.is_empty() {
                Vec::new()
            } else {
                let mut v = Vec::new();
                for &no in pages.keys().filter(|&&no| u64::from(no) < self.meta.page_count) {
                    if let Some(img) = pager.cache()?.get(no) {
                        v.push((no, img));
                        continue;
                    }
                    let mut b = vec![0u8; size.bytes()];
                    proto.read_page(no, &mut b)?;
                    v.push((no, Arc::<[u8]>::from(b)));
                }
                v
            };
            let images: Vec<(PageNo, &[u8])> = pages.iter().map(|(n, p)| (*n, &p[..])).collect();
            let spare = spare_pages(size, &committed_free);
            let started = std::time::Instant::now();
            let after = proto.commit(&Batch {
                pages: &images,
                pages_before: self.meta.page_count,
                spare: &spare,
                committed: &self.originals,
            })?;
            ferrite_pmem::Counters::add_commit_ns(started.elapsed().as_nanos() as u64);
            // G6: the batch's images are the committed ones now (still under the protocol's
            // write lock, so no reader sees the cache and the store disagree).
            let mut cache = pager.cache()?;
            for (no, img) in &pages {
                if cache.contains(*no) || cache.len() < cache.cap {
                    cache.put(*no, img.clone());
                }
            }
            drop(cache);
            let mut st = pager.state()?;
            for (no, img) in keep {
                st.old.entry(no).or_default().push((meta.seq, img));
            }
            st.meta = meta;
            st.free = std::mem::take(&mut self.free);
            trim(&mut st);
            Ok((meta.seq, after))
        })();
        // G5, and [R2]: a step after the commit point that failed poisons the handle, but
        // the commit stands and is reported as done (the next open finishes the step).
        let result = match result {
            Ok((seq, None)) => Ok(seq),
            Ok((seq, Some(e))) => {
                tracing::error!(
                    error = %e,
                    seq,
                    "paged commit: a step after the commit point failed; the transaction is \
                     committed, the handle is poisoned until the database is reopened"
                );
                pager.poisoned.store(true, Ordering::Release);
                Ok(seq)
            }
            Err(e) => {
                pager.poisoned.store(true, Ordering::Release);
                Err(e)
            }
        };
        self.done = true;
        pager.writer.store(false, Ordering::Release);
        result
    }

    fn live(&self, no: PageNo) -> Result<()> {
        if no == META_PAGE || u64::from(no) >= self.count || self.free.contains(&no) {
            return Err(corrupt("reference to the meta page, a free page or past the end", no));
        }
        Ok(())
    }
}

impl Drop for WriteView {
    fn drop(&mut self) {
        if !self.done {
            self.pager.writer.store(false, Ordering::Release);
        }
    }
}

impl PageRead for WriteView {
    type Page = Arc<[u8]>;

    fn page_size(&self) -> PageSize {
        self.pager.size
    }

    fn page(&self, no: PageNo) -> Result<Arc<[u8]>> {
        self.live(no)?;
        match self.dirty.get(&no) {
            Some(p) => Ok(p.clone()),
            None => self.pager.committed(no, None),
        }
    }
}

impl PageWrite for WriteView {
    fn page_mut(&mut self, no: PageNo) -> Result<&mut [u8]> {
        self.live(no)?;
        if !self.dirty.contains_key(&no) {
            let img = self.pager.committed(no, None)?;
            if self.cow {
                // Kept apart: `writable` below then copies the page before the first write.
                self.originals.entry(no).or_insert_with(|| img.clone());
            }
            self.dirty.insert(no, img);
        }
        let slot = self.dirty.get_mut(&no).ok_or_else(|| corrupt("dirty page vanished", no))?;
        writable(slot, no)
    }

    fn allocate(&mut self) -> Result<PageNo> {
        let no = next_page(&mut self.free, &mut self.count)?;
        self.dirty.insert(no, vec![0u8; self.pager.size.bytes()].into());
        Ok(no)
    }

    fn free(&mut self, no: PageNo) -> Result<()> {
        self.live(no)?;
        self.dirty.remove(&no);
        self.free.insert(no);
        Ok(())
    }

    fn defrag_by_copy(&self) -> bool {
        self.cow
    }
}

#[cfg(test)]
mod tests {
    use ferrite_pmem::internals::testing::TestDir;

    use super::*;
    use crate::engine::paged::btree::BTree;
    use crate::engine::paged::protocol::test_protocol;

    const PS: usize = 512;

    fn protocol(path: &std::path::Path, create: bool, wal: bool) -> Protocol {
        test_protocol(path, create, PS, wal.then_some(8))
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    #[test]
    fn trees_survive_reopen_and_free_pages_are_reused() {
        for wal in [false, true] {
            let dir = TestDir::new("paged-pager");
            let path = dir.join("db");
            let pager =
                Pager::create(protocol(&path, true, wal), PageSize::new(PS).unwrap()).unwrap();
            let mut w = pager.begin_write().unwrap();
            let tree = BTree::create(&mut w).unwrap();
            for i in 0..300 {
                tree.insert(&mut w, &key(i), &[7u8; 40]).unwrap();
            }
            w.commit().unwrap();
            let grown = pager.meta().unwrap().page_count;
            let mut w = pager.begin_write().unwrap();
            for i in 0..300 {
                assert!(tree.delete(&mut w, &key(i)).unwrap());
            }
            w.commit().unwrap();
            let m = pager.meta().unwrap();
            assert!(m.free_count > 10, "wal={wal}: {m:?}");
            pager.close().unwrap();
            drop(pager);
            let pager = Pager::open(protocol(&path, false, wal)).unwrap();
            assert_eq!(pager.meta().unwrap(), m, "wal={wal}");
            let mut w = pager.begin_write().unwrap();
            for i in 0..300 {
                tree.insert(&mut w, &key(i), &[8u8; 40]).unwrap();
            }
            tree.check(&w).unwrap();
            w.commit().unwrap();
            assert_eq!(pager.meta().unwrap().page_count, grown, "wal={wal}: free pages reused");
            let r = pager.begin_read().unwrap();
            assert_eq!(tree.get(&r, &key(5)).unwrap(), Some(vec![8u8; 40]));
        }
    }

    /// The cache keeps at most its capacity, returns the latest image put for a page, and its
    /// victim bookkeeping stays consistent through evictions, replacements and a resize.
    #[test]
    fn the_page_cache_is_bounded_and_returns_the_latest_image() {
        let img = |b: u8| -> Arc<[u8]> { vec![b; 8].into() };
        let mut c = Cache::default();
        c.put(1, img(1));
        assert_eq!(c.len(), 0, "capacity 0 caches nothing");
        c.resize(10);
        for round in 0..3u8 {
            for no in 0..40u32 {
                c.put(no, img(no as u8 ^ round));
                assert_eq!(c.get(no).as_deref(), Some(&[no as u8 ^ round; 8][..]));
                assert!(c.len() <= 10);
                for (i, p) in c.order.iter().enumerate() {
                    assert_eq!(c.pages[p].1, i, "page {p}'s index");
                }
                assert_eq!(c.pages.len(), c.order.len());
            }
        }
        assert_eq!(c.len(), 10);
        c.resize(3);
        assert_eq!((c.len(), c.pages.len()), (3, 3));
    }

    #[test]
    fn one_writer_and_readers_keep_their_snapshot() {
        // Without the cache of committed pages, with one smaller than the tree, and with one
        // that holds it all (G6).
        for cache in [0, 3, 1000] {
            one_writer_and_readers_keep_their_snapshot_with(cache);
        }
    }

    fn one_writer_and_readers_keep_their_snapshot_with(cache: usize) {
        let dir = TestDir::new("paged-pager-snap");
        let pager =
            Pager::create(protocol(&dir.join("db"), true, false), PageSize::new(PS).unwrap())
                .unwrap();
        pager.set_cache_pages(cache).unwrap();
        let mut w = pager.begin_write().unwrap();
        assert!(matches!(pager.begin_write(), Err(Error::Busy(_))));
        let tree = BTree::create(&mut w).unwrap();
        for i in 0..50 {
            tree.insert(&mut w, &key(i), b"old").unwrap();
        }
        w.commit().unwrap();
        let before = pager.begin_read().unwrap();
        let mut w = pager.begin_write().unwrap();
        for i in 0..200 {
            tree.put(&mut w, &key(i), b"new").unwrap();
        }
        // Uncommitted writes are invisible to a reader that starts now.
        let during = pager.begin_read().unwrap();
        assert_eq!(tree.get(&during, &key(1)).unwrap(), Some(b"old".to_vec()));
        w.commit().unwrap();
        let after = pager.begin_read().unwrap();
        for i in 0..200 {
            let old = (i < 50).then(|| b"old".to_vec());
            assert_eq!(tree.get(&before, &key(i)).unwrap(), old, "{i}");
            assert_eq!(tree.get(&during, &key(i)).unwrap(), old, "{i}");
            assert_eq!(tree.get(&after, &key(i)).unwrap(), Some(b"new".to_vec()), "{i}");
        }
        tree.check(&before).unwrap();
        drop((before, during));
        assert!(
            pager.state().unwrap().old.is_empty(),
            "retained images are dropped with their readers"
        );
        // A dropped writer rolls back and frees the writer slot.
        let mut w = pager.begin_write().unwrap();
        tree.put(&mut w, &key(1), b"gone").unwrap();
        drop(w);
        let r = pager.begin_read().unwrap();
        assert_eq!(tree.get(&r, &key(1)).unwrap(), Some(b"new".to_vec()));
        drop(after);
        assert!(pager.cached_pages() <= cache, "{} > {cache}", pager.cached_pages());
        if cache == 1000 {
            assert!(pager.cached_pages() > 3, "the tree's pages are cached");
        }
    }

    /// A reader on another thread keeps its snapshot while the writer commits, round by round
    /// in lockstep (channels, no timing): every read sees the values of the snapshot it began
    /// with, and a reader that begins after a commit sees that commit.
    #[test]
    fn a_reader_on_another_thread_keeps_its_snapshot_across_commits() {
        use std::sync::mpsc;
        let dir = TestDir::new("paged-pager-threads");
        for (wal, cache) in [(false, 0), (true, 0), (false, 1000), (true, 5)] {
            let path = dir.join(&format!("{}-{cache}", if wal { "wal" } else { "journal" }));
            let pager =
                Pager::create(protocol(&path, true, wal), PageSize::new(PS).unwrap()).unwrap();
            pager.set_cache_pages(cache).unwrap();
            let mut w = pager.begin_write().unwrap();
            let tree = BTree::create(&mut w).unwrap();
            for i in 0..100 {
                tree.insert(&mut w, &key(i), &[0u8]).unwrap();
            }
            w.commit().unwrap();
            let (to_reader, rounds) = mpsc::channel::<u8>();
            let (to_writer, acks) = mpsc::channel::<()>();
            let reader_pager = pager.clone();
            let reader = std::thread::spawn(move || {
                let snap = reader_pager.begin_read().unwrap();
                to_writer.send(()).unwrap();
                while let Ok(round) = rounds.recv() {
                    for i in 0..100 {
                        assert_eq!(tree.get(&snap, &key(i)).unwrap(), Some(vec![0u8]), "wal={wal}");
                    }
                    let fresh = reader_pager.begin_read().unwrap();
                    assert_eq!(
                        tree.get(&fresh, &key(7)).unwrap(),
                        Some(vec![round; 30]),
                        "wal={wal}"
                    );
                    to_writer.send(()).unwrap();
                }
            });
            acks.recv().unwrap();
            for round in 1..=5u8 {
                let mut w = pager.begin_write().unwrap();
                for i in 0..100 {
                    tree.put(&mut w, &key(i), &[round; 30]).unwrap();
                }
                w.commit().unwrap();
                to_reader.send(round).unwrap();
                acks.recv().unwrap();
            }
            drop(to_reader);
            reader.join().unwrap();
            assert!(
                pager.state().unwrap().old.is_empty(),
                "wal={wal}: images dropped with the reader"
            );
        }
    }

    #[test]
    fn a_bad_meta_page_is_a_typed_error() {
        let dir = TestDir::new("paged-pager-meta");
        let size = PageSize::new(PS).unwrap();
        let meta = Meta {
            page_count: 2,
            free_head: 0,
            free_count: 0,
            catalog_root: 1,
            seq: 0,
            protocol: 1,
        };
        let good = meta.encode(size, true);
        assert_eq!(Meta::decode(&good, size).unwrap(), meta);
        let unfinished = meta.encode(size, false);
        assert!(matches!(Meta::decode(&unfinished, size), Err(Error::Corrupted { .. })));
        let mut bad = good.clone();
        bad[33] ^= 1;
        assert!(matches!(Meta::decode(&bad, size), Err(Error::Corrupted { .. })));
        let mut newer = good.clone();
        put_u32(&mut newer, 8, VERSION + 1);
        let crc = crc32c::crc32c(&newer[8..64]);
        put_u32(&mut newer, 64, crc);
        assert!(matches!(Meta::decode(&newer, size), Err(Error::Incompatible { .. })));
        assert!(matches!(
            Meta::decode(&good, PageSize::new(4096).unwrap()),
            Err(Error::Corrupted { .. })
        ));
        drop(dir);
    }
}
