//! The simulated persistence domain: an observable model of what persistent memory would hold
//! after a crash, which the crash tester stands on (seed 001 ch. 7; spec
//! `../shared/specs/crash-testing.md` §1.2, §9–10; `../shared/specs/kolli-pelley.md` Part D).
//!
//! A sim pool (or pool set) runs the engine's code unchanged: reads and writes go to the
//! **working image** (ordinary memory, the pool's heap block or reservation), exactly as on a
//! mapped pool. Alongside, the domain keeps, per file:
//!
//! - the **durable image**: what survives a crash for certain, as copy-on-write 4 KiB pages;
//! - a **dirty-line bitmap**: lines stored to since they were last made durable;
//!
//! and, per thread, the **pending lines**: a flush captures the line's content at that moment
//! (axiom M3) into the flushing thread's pending set; that thread's next fence makes its
//! pending lines durable (M4: another thread's fence does not); a later store dirties the line
//! again. Non-temporal stores become pending at store time, for the words they wrote. File
//! operations (create, remove, hole punch) apply to both images at once and are durable
//! immediately. Under declared eADR a fence makes every dirty line durable.
//!
//! A [`CrashImage`](crate::CrashImage) is captured from the durable image plus a sparse
//! overlay of chosen lines: none (durable only), a subset of a thread's pending lines, a subset
//! of dirty lines with their newest content (early eviction, M5), optionally torn at 8-byte
//! granularity (only for targets that do not declare M2; M1 always holds).
//!
//! # Invariants
//! - D1: the durable image changes only at a fence (the fencing thread's pending lines, or
//!   every dirty line under eADR) and at file operations.
//! - D2: a line's dirty bit is set by every store to it and cleared only when a fence makes
//!   durable a content equal to the line's working content.
//! - D3: a captured image is a state some crash could produce: captures take the gate
//!   exclusively, so no store, flush or fence is half-applied.
//! - D4: the domain never reads memory its pools released: dropping a sim pool or pool set
//!   first gives each of its files a private copy of its working image (dirty lines are still
//!   "in the cache" after a close, so later captures need their content).
//!
//! # Concurrency
//! Stores and flushes hold the gate shared; fences, captures and file operations hold it
//! exclusively. Pending sets are per thread. Hooks run after the operation (before it, for
//! fences), outside every lock; a hook may capture images; events raised on a thread while it
//! runs a hook are not delivered again (no re-entrancy).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::region::{CACHE_LINE, Region};

/// Bytes per durable-image page (copy-on-write unit).
pub const PAGE: u64 = 4096;
const LINES_PER_PAGE: u64 = PAGE / CACHE_LINE;

/// Small per-process index of the calling thread (stable for the thread's life).
pub fn thread_index() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! { static IDX: Cell<u32> = const { Cell::new(0) }; }
    IDX.with(|c| {
        if c.get() == 0 {
            c.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        c.get()
    })
}

/// Where a persistence event came from: the caller's source location (`#[track_caller]`) and
/// the ordering rule it implements, if the caller named one (e.g. `"P-FPT-3"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    /// The engine's call site.
    pub location: &'static Location<'static>,
    /// The ordering rule, when given through a `*_rule` method.
    pub rule: Option<&'static str>,
}

impl Site {
    /// A stable key `file:line:column[#rule]` (independent of ASLR and build addresses).
    pub fn key(&self) -> String {
        match self.rule {
            Some(r) => format!(
                "{}:{}:{}#{r}",
                self.location.file(),
                self.location.line(),
                self.location.column()
            ),
            None => {
                format!(
                    "{}:{}:{}",
                    self.location.file(),
                    self.location.line(),
                    self.location.column()
                )
            }
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An ordinary store (word, bytes, CAS that succeeded, fetch-or/and).
    Store,
    /// A non-temporal store.
    NtStore,
    /// A flush of the lines of a range.
    Flush,
    /// A fence (the hook sees it **before** it takes effect: a crash point).
    Fence,
    /// A file was created (zero-filled).
    FileCreate,
    /// A file was removed.
    FileRemove,
    /// A hole was punched (range zeroed).
    FilePunch,
}

impl EventKind {
    fn name(self) -> &'static str {
        match self {
            EventKind::Store => "store",
            EventKind::NtStore => "nt",
            EventKind::Flush => "flush",
            EventKind::Fence => "fence",
            EventKind::FileCreate => "create",
            EventKind::FileRemove => "remove",
            EventKind::FilePunch => "punch",
        }
    }

    fn parse(s: &str) -> Option<EventKind> {
        Some(match s {
            "store" => EventKind::Store,
            "nt" => EventKind::NtStore,
            "flush" => EventKind::Flush,
            "fence" => EventKind::Fence,
            "create" => EventKind::FileCreate,
            "remove" => EventKind::FileRemove,
            "punch" => EventKind::FilePunch,
            _ => return None,
        })
    }
}

/// A persistence event as a hook sees it.
#[derive(Clone, Debug)]
pub struct Event {
    /// Sequence number in this domain (starts at 1).
    pub seq: u64,
    /// [`thread_index`] of the thread that caused it.
    pub thread: u32,
    /// What happened.
    pub kind: EventKind,
    /// File concerned (for fences: empty).
    pub file: String,
    /// Offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Where it came from.
    pub site: Site,
    /// For fences: how many lines the thread had pending (a fence with none cannot change the
    /// durable image outside eADR).
    pub pending: usize,
}

/// A recorded event (owned; can be saved, loaded and replayed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Sequence number.
    pub seq: u64,
    /// Thread index.
    pub thread: u32,
    /// Kind.
    pub kind: EventKind,
    /// File.
    pub file: String,
    /// Offset in the file.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Bytes written (stores and NT stores; empty otherwise).
    pub data: Vec<u8>,
    /// Site key.
    pub site: String,
}

impl TraceEvent {
    /// One text line: `seq thread kind file offset len site hexdata`.
    pub fn to_line(&self) -> String {
        let hex: String = self.data.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {} {} {} {} {} {} {}",
            self.seq,
            self.thread,
            self.kind.name(),
            if self.file.is_empty() { "-" } else { &self.file },
            self.offset,
            self.len,
            self.site.replace(' ', "_"),
            if hex.is_empty() { "-".to_owned() } else { hex }
        )
    }

    /// Parses a line written by [`TraceEvent::to_line`].
    pub fn from_line(line: &str) -> Result<TraceEvent> {
        let bad = || Error::InvalidArgument(format!("bad trace line {line:?}"));
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 8 {
            return Err(bad());
        }
        let data = if f[7] == "-" {
            Vec::new()
        } else {
            if !f[7].len().is_multiple_of(2) {
                return Err(bad());
            }
            (0..f[7].len() / 2)
                .map(|i| u8::from_str_radix(&f[7][2 * i..2 * i + 2], 16).map_err(|_| bad()))
                .collect::<Result<_>>()?
        };
        Ok(TraceEvent {
            seq: f[0].parse().map_err(|_| bad())?,
            thread: f[1].parse().map_err(|_| bad())?,
            kind: EventKind::parse(f[2]).ok_or_else(bad)?,
            file: if f[3] == "-" { String::new() } else { f[3].to_owned() },
            offset: f[4].parse().map_err(|_| bad())?,
            len: f[5].parse().map_err(|_| bad())?,
            site: f[6].to_owned(),
            data,
        })
    }
}

/// A hook: called with the domain and the event (see the module docs for when).
pub type Hook = Arc<dyn Fn(&SimDomain, &Event) + Send + Sync>;

pub(crate) type Page = [u8; PAGE as usize];

/// One simulated file.
pub(crate) struct SimFile {
    pub name: String,
    pub len: u64,
    /// Working image (where the engine's loads and stores go), when mapped.
    pub working: Option<Region>,
    /// The memory of `working` once its pool was closed ([`SimDomain::detach_range`]).
    pub owned: Option<crate::pool::HeapBlock>,
    /// Durable image, copy-on-write pages.
    pub durable: Vec<Arc<Page>>,
    /// Dirty-line bitmap (bit per line of the file).
    pub dirty: Box<[AtomicU64]>,
}

impl SimFile {
    fn new(name: &str, len: u64, zero: &Arc<Page>) -> SimFile {
        let pages = len.div_ceil(PAGE) as usize;
        let lines = len.div_ceil(CACHE_LINE) as usize;
        SimFile {
            name: name.to_owned(),
            len,
            working: None,
            owned: None,
            durable: vec![zero.clone(); pages],
            dirty: (0..lines.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(crate) fn durable_line(&self, line: u64) -> [u8; 64] {
        let page = &self.durable[(line / LINES_PER_PAGE) as usize];
        let at = ((line % LINES_PER_PAGE) * CACHE_LINE) as usize;
        let mut out = [0u8; 64];
        out.copy_from_slice(&page[at..at + 64]);
        out
    }

    fn write_durable(&mut self, line: u64, content: &[u8; 64], mask: u8) {
        let page = Arc::make_mut(&mut self.durable[(line / LINES_PER_PAGE) as usize]);
        let at = ((line % LINES_PER_PAGE) * CACHE_LINE) as usize;
        for w in 0..8 {
            if mask & (1 << w) != 0 {
                page[at + w * 8..at + w * 8 + 8].copy_from_slice(&content[w * 8..w * 8 + 8]);
            }
        }
    }

    pub(crate) fn working_line(&self, line: u64) -> Option<[u8; 64]> {
        let r = self.working.as_ref()?;
        let mut out = [0u8; 64];
        let off = line * CACHE_LINE;
        let n = (self.len - off).min(64) as usize;
        r.read_into(off, &mut out[..n]).ok()?;
        Some(out)
    }

    fn set_dirty(&self, line: u64) {
        if let Some(w) = self.dirty.get((line / 64) as usize) {
            w.fetch_or(1 << (line % 64), Ordering::Relaxed);
        }
    }

    fn clear_dirty(&self, line: u64) {
        if let Some(w) = self.dirty.get((line / 64) as usize) {
            w.fetch_and(!(1 << (line % 64)), Ordering::Relaxed);
        }
    }

    pub(crate) fn dirty_lines(&self) -> Vec<u64> {
        let mut v = Vec::new();
        for (i, w) in self.dirty.iter().enumerate() {
            let mut bits = w.load(Ordering::Relaxed);
            while bits != 0 {
                let b = u64::from(bits.trailing_zeros());
                v.push(i as u64 * 64 + b);
                bits &= bits - 1;
            }
        }
        v
    }
}

pub(crate) struct Files {
    /// Working start address → file name.
    pub by_addr: BTreeMap<usize, String>,
    pub files: BTreeMap<String, SimFile>,
}

impl Files {
    /// The file whose working image contains `addr`, and the offset in it.
    fn locate(&self, addr: usize) -> Option<(&SimFile, u64)> {
        let (&start, name) = self.by_addr.range(..=addr).next_back()?;
        let f = self.files.get(name)?;
        let off = (addr - start) as u64;
        (off < f.len).then_some((f, off))
    }
}

/// A line flushed (or stored non-temporally) by a thread and not yet fenced.
#[derive(Clone, Debug)]
pub(crate) struct PendingLine {
    pub file: String,
    pub line: u64,
    pub content: [u8; 64],
    /// Words of the line that are pending (bit w = bytes 8w..8w+8); full lines for flushes.
    pub mask: u8,
}

/// One thread's pending lines, in flush order, indexed by (file, line) so that flushing many
/// lines stays linear.
#[derive(Default)]
pub(crate) struct PendingSet {
    pub lines: Vec<PendingLine>,
    index: HashMap<(String, u64), usize>,
}

impl PendingSet {
    /// Adds (or updates) a pending line: a flush replaces content and covers the whole line
    /// (`full`); a non-temporal store adds `mask`'s words. Returns whether the line was already
    /// fully pending (a line flushed twice without a fence: a hint of a bug).
    fn upsert(&mut self, file: &str, line: u64, content: [u8; 64], mask: u8, full: bool) -> bool {
        match self.index.get(&(file.to_owned(), line)) {
            Some(&i) => {
                let l = &mut self.lines[i];
                let was_full = l.mask == 0xff;
                l.content = content;
                l.mask = if full { 0xff } else { l.mask | mask };
                was_full && full
            }
            None => {
                self.index.insert((file.to_owned(), line), self.lines.len());
                self.lines.push(PendingLine {
                    file: file.to_owned(),
                    line,
                    content,
                    mask: if full { 0xff } else { mask },
                });
                false
            }
        }
    }

    fn remove_file(&mut self, file: &str) {
        self.lines.retain(|l| l.file != file);
        self.index =
            self.lines.iter().enumerate().map(|(i, l)| ((l.file.clone(), l.line), i)).collect();
    }

    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }
}

/// A persisted line a thread has pending, as the tester sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingInfo {
    /// File.
    pub file: String,
    /// Line index in the file.
    pub line: u64,
    /// Whether it comes from non-temporal stores (partial line possible).
    pub nt: bool,
}

/// Counts kept by a domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events raised.
    pub events: u64,
    /// Fences seen.
    pub fences: u64,
    /// Lines flushed twice by one thread without a fence in between (a hint of a bug).
    pub double_flushes: u64,
    /// Images captured.
    pub images: u64,
}

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static NEW_DOMAIN_HOOK: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

/// Sets the hook that every [`SimDomain`] created **on this thread** from now on starts with
/// (`None` to stop). The crash tester uses it to crash a target's recovery, which creates its
/// own domain when it opens a crash image (nested crash simulation). It is per thread, not
/// global: domains created on other threads are not affected.
pub fn set_new_domain_hook(hook: Option<Hook>) {
    NEW_DOMAIN_HOOK.with(|h| *h.borrow_mut() = hook);
}

/// The simulated persistence domain of one pool or pool set (see the module docs).
pub struct SimDomain {
    pub(crate) gate: RwLock<Files>,
    pub(crate) pending: Mutex<HashMap<u32, PendingSet>>,
    hook: RwLock<Option<Hook>>,
    trace: Mutex<Option<Vec<TraceEvent>>>,
    dropped: RwLock<HashSet<String>>,
    seq: AtomicU64,
    stats: Mutex<SimStats>,
    pub(crate) eadr: bool,
    pub(crate) zero: Arc<Page>,
}

impl fmt::Debug for SimDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: Vec<(String, u64)> =
            self.read_gate().files.values().map(|f| (f.name.clone(), f.len)).collect();
        f.debug_struct("SimDomain").field("files", &files).field("eadr", &self.eadr).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimDomain {
    /// A new, empty domain. Pass it to `Pool::create_sim_with`/`PoolSet::create_sim_with` after
    /// installing a hook, to observe a pool's creation too. `eadr` must match the pool's
    /// options (a fence then makes every dirty line durable).
    pub fn new(eadr: bool) -> SimDomain {
        SimDomain {
            gate: RwLock::new(Files { by_addr: BTreeMap::new(), files: BTreeMap::new() }),
            pending: Mutex::new(HashMap::new()),
            hook: RwLock::new(NEW_DOMAIN_HOOK.with(|h| h.borrow().clone())),
            trace: Mutex::new(None),
            dropped: RwLock::new(HashSet::new()),
            seq: AtomicU64::new(0),
            stats: Mutex::new(SimStats::default()),
            eadr,
            zero: Arc::new([0u8; PAGE as usize]),
        }
    }

    pub(crate) fn read_gate(&self) -> RwLockReadGuard<'_, Files> {
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write_gate(&self) -> RwLockWriteGuard<'_, Files> {
        self.gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Installs (or with `None` removes) this domain's hook.
    pub fn set_hook(&self, hook: Option<Hook>) {
        *self.hook.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// Starts recording every event (with the bytes of stores) until [`SimDomain::take_trace`].
    pub fn record_trace(&self) {
        *lock(&self.trace) = Some(Vec::new());
    }

    /// Stops recording and returns the events recorded.
    pub fn take_trace(&self) -> Vec<TraceEvent> {
        lock(&self.trace).take().unwrap_or_default()
    }

    /// Makes every flush and fence at `site_key` (see [`Site::key`]) a no-op for durability —
    /// the flush does not capture, the fence does not drain — to check that a crash test
    /// notices a missing persist there (mutation testing). The real instructions still run.
    pub fn drop_persist(&self, site_key: &str) {
        self.dropped.write().unwrap_or_else(|p| p.into_inner()).insert(site_key.to_owned());
    }

    fn is_dropped(&self, site: &Site) -> bool {
        let d = self.dropped.read().unwrap_or_else(|p| p.into_inner());
        !d.is_empty() && d.contains(&site.key())
    }

    /// Counters of this domain.
    pub fn stats(&self) -> SimStats {
        *lock(&self.stats)
    }

    pub(crate) fn count_image(&self) {
        lock(&self.stats).images += 1;
    }

    /// Names and sizes of the domain's files.
    pub fn files(&self) -> Vec<(String, u64)> {
        self.read_gate().files.values().map(|f| (f.name.clone(), f.len)).collect()
    }

    /// The lines `thread` has flushed (or stored non-temporally) and not yet fenced.
    pub fn pending_of(&self, thread: u32) -> Vec<PendingInfo> {
        lock(&self.pending)
            .get(&thread)
            .map(|v| {
                v.lines
                    .iter()
                    .map(|p| PendingInfo { file: p.file.clone(), line: p.line, nt: p.mask != 0xff })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The dirty lines (stored to and not yet durable with that content), per file.
    pub fn dirty_lines(&self) -> Vec<(String, u64)> {
        let g = self.read_gate();
        g.files
            .values()
            .flat_map(|f| f.dirty_lines().into_iter().map(|l| (f.name.clone(), l)))
            .collect()
    }

    /// The durable content of `len` bytes at `offset` of `file` (for tests and tools).
    pub fn durable_bytes(&self, file: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        let g = self.read_gate();
        let f = g
            .files
            .get(file)
            .ok_or_else(|| Error::InvalidArgument(format!("no sim file {file:?}")))?;
        if offset.checked_add(len as u64).is_none_or(|e| e > f.len) {
            return Err(Error::OutOfBounds { off: offset, len: len as u64, size: f.len });
        }
        let mut out = vec![0u8; len];
        for (i, b) in out.iter_mut().enumerate() {
            let at = offset + i as u64;
            *b = f.durable[(at / PAGE) as usize][(at % PAGE) as usize];
        }
        Ok(out)
    }

    // ----- file operations (durable immediately, both images) -----

    /// Creates a zero-filled file whose working image is `working` (may be `None` for a file
    /// that is not mapped, e.g. while replaying).
    pub(crate) fn file_create(
        &self,
        name: &str,
        len: u64,
        working: Option<Region>,
        site: Site,
    ) -> Result<()> {
        {
            let mut g = self.write_gate();
            if g.files.contains_key(name) {
                return Err(Error::AlreadyExists { path: name.into() });
            }
            let mut f = SimFile::new(name, len, &self.zero);
            if let Some(r) = working {
                g.by_addr.insert(r.base_addr(), name.to_owned());
                f.working = Some(r);
            }
            g.files.insert(name.to_owned(), f);
        }
        self.emit(EventKind::FileCreate, name, 0, len, site, 0, None);
        Ok(())
    }

    /// Adds an existing durable image as a file (opening a crash image).
    pub(crate) fn file_insert(
        &self,
        name: &str,
        len: u64,
        durable: Vec<Arc<Page>>,
        working: Option<Region>,
    ) {
        let mut g = self.write_gate();
        let lines = len.div_ceil(CACHE_LINE) as usize;
        let f = SimFile {
            name: name.to_owned(),
            len,
            working,
            owned: None,
            durable,
            dirty: (0..lines.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        };
        if let Some(r) = &f.working {
            g.by_addr.insert(r.base_addr(), name.to_owned());
        }
        g.files.insert(name.to_owned(), f);
    }

    /// The pool or pool set whose memory is `[start, start + len)` is being closed (unmapped
    /// or freed): every file whose working image lives there gets a private copy of it, so
    /// that images captured later (a crash after the close: dirty lines are still in the
    /// cache) read that copy and never the released memory. The files no longer receive
    /// stores (their addresses may be reused by the next mapping).
    pub(crate) fn detach_range(&self, start: usize, len: usize) {
        let mut g = self.write_gate();
        let Files { by_addr, files } = &mut *g;
        let names: Vec<(usize, String)> =
            by_addr.range(start..start.saturating_add(len)).map(|(&a, n)| (a, n.clone())).collect();
        for (addr, name) in names {
            by_addr.remove(&addr);
            let Some(f) = files.get_mut(&name) else { continue };
            let Some(r) = f.working.take() else { continue };
            let n = f.len as usize;
            let copy = crate::pool::HeapBlock::new(n).and_then(|b| {
                let nr = b.region(n)?;
                let mut buf = vec![0u8; n];
                r.read_into(0, &mut buf)?;
                nr.write_bytes(0, &buf)?;
                Ok((b, nr))
            });
            // Without memory for the copy the working content is gone: captures then treat
            // the file's dirty lines as never written back (the durable content stands).
            if let Ok((b, nr)) = copy {
                f.working = Some(nr);
                f.owned = Some(b);
            }
        }
    }

    /// Removes a file from both images.
    pub(crate) fn file_remove(&self, name: &str, site: Site) -> Result<()> {
        {
            let mut g = self.write_gate();
            let f = g.files.remove(name).ok_or_else(|| Error::NotFound { path: name.into() })?;
            if let Some(r) = f.working {
                g.by_addr.remove(&r.base_addr());
            }
            let mut p = lock(&self.pending);
            for v in p.values_mut() {
                v.remove_file(name);
            }
        }
        self.emit(EventKind::FileRemove, name, 0, 0, site, 0, None);
        Ok(())
    }

    /// Zeroes `[offset, offset + len)` of a file in both images (a hole punch).
    pub(crate) fn file_punch(&self, name: &str, offset: u64, len: u64, site: Site) -> Result<()> {
        {
            let mut g = self.write_gate();
            let f = g.files.get_mut(name).ok_or_else(|| Error::NotFound { path: name.into() })?;
            if offset.checked_add(len).is_none_or(|e| e > f.len) {
                return Err(Error::OutOfBounds { off: offset, len, size: f.len });
            }
            if let Some(r) = &f.working {
                r.fill(offset, len, 0)?;
            }
            let zero = [0u8; 64];
            let first = offset / CACHE_LINE;
            let last = (offset + len).div_ceil(CACHE_LINE);
            for line in first..last {
                let lo = (line * CACHE_LINE).max(offset);
                let hi = ((line + 1) * CACHE_LINE).min(offset + len);
                // Only whole words are zeroed through the mask; partial words byte by byte.
                let mut content = f.durable_line(line);
                content[(lo - line * CACHE_LINE) as usize..(hi - line * CACHE_LINE) as usize]
                    .copy_from_slice(&zero[..(hi - lo) as usize]);
                f.write_durable(line, &content, 0xff);
                if f.working_line(line).is_none_or(|w| w == content) {
                    f.clear_dirty(line);
                }
            }
        }
        self.emit(EventKind::FilePunch, name, offset, len, site, 0, None);
        Ok(())
    }

    // ----- the primitives (called by `Space`) -----

    /// A store of `len` bytes at working address `addr`: `f` performs it; the lines become dirty.
    #[inline]
    pub(crate) fn store<R>(
        &self,
        addr: usize,
        len: u64,
        site: Site,
        nt: bool,
        f: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let (r, located) = {
            let g = self.read_gate();
            let r = f()?;
            let located = g.locate(addr).map(|(file, off)| {
                let first = off / CACHE_LINE;
                let last =
                    (off + len.max(1)).div_ceil(CACHE_LINE).min(file.len.div_ceil(CACHE_LINE));
                if nt {
                    self.add_nt_pending(thread_index(), file, off, len.min(file.len - off));
                } else {
                    for line in first..last {
                        file.set_dirty(line);
                    }
                }
                let data = if self.tracing() {
                    let mut d = vec![0u8; len.min(file.len - off) as usize];
                    file.working.as_ref().and_then(|w| w.read_into(off, &mut d).ok());
                    Some(d)
                } else {
                    None
                };
                (file.name.clone(), off, data)
            });
            (r, located)
        };
        if let Some((name, off, data)) = located {
            let kind = if nt { EventKind::NtStore } else { EventKind::Store };
            self.emit(kind, &name, off, len, site, 0, data);
        }
        Ok(r)
    }

    fn add_nt_pending(&self, me: u32, file: &SimFile, off: u64, len: u64) {
        let mut p = lock(&self.pending);
        let v = p.entry(me).or_default();
        let mut at = off;
        while at < off + len {
            let line = at / CACHE_LINE;
            let line_end = ((line + 1) * CACHE_LINE).min(off + len);
            let mut mask = 0u8;
            for w in 0..8u64 {
                let (ws, we) = (line * CACHE_LINE + w * 8, line * CACHE_LINE + w * 8 + 8);
                if ws < line_end && we > at {
                    mask |= 1 << w;
                }
            }
            let content = file.working_line(line).unwrap_or([0; 64]);
            v.upsert(&file.name, line, content, mask, false);
            at = line_end;
        }
    }

    /// A flush of `[addr, addr + len)`: captures the lines' contents into this thread's
    /// pending set.
    pub(crate) fn flush(&self, addr: usize, len: u64, site: Site) {
        self.flush_as(thread_index(), addr, len, site);
    }

    fn flush_as(&self, me: u32, addr: usize, len: u64, site: Site) {
        if len == 0 {
            return;
        }
        let dropped = self.is_dropped(&site);
        let located = {
            let g = self.read_gate();
            g.locate(addr).map(|(file, off)| {
                let end = (off + len).min(file.len);
                if !dropped && !self.eadr {
                    let mut p = lock(&self.pending);
                    let v = p.entry(me).or_default();
                    let mut doubles = 0;
                    for line in off / CACHE_LINE..end.div_ceil(CACHE_LINE) {
                        let content = file.working_line(line).unwrap_or([0; 64]);
                        doubles += u64::from(v.upsert(&file.name, line, content, 0xff, true));
                    }
                    drop(p);
                    if doubles > 0 {
                        lock(&self.stats).double_flushes += doubles;
                    }
                }
                (file.name.clone(), off, end - off)
            })
        };
        if let Some((name, off, n)) = located {
            self.emit_as(me, EventKind::Flush, &name, off, n, site, 0, None);
        }
    }

    /// A fence by the calling thread: the hook sees it first (a crash point, with the
    /// thread's pending lines not yet durable), then the pending lines become durable.
    pub(crate) fn fence(&self, site: Site) {
        self.fence_as(thread_index(), site);
    }

    fn fence_as(&self, me: u32, site: Site) {
        let pending = lock(&self.pending).get(&me).map_or(0, PendingSet::len);
        lock(&self.stats).fences += 1;
        self.emit_as(me, EventKind::Fence, "", 0, 0, site, pending, None);
        if self.is_dropped(&site) {
            return;
        }
        let mut g = self.write_gate();
        let lines = lock(&self.pending).remove(&me).unwrap_or_default();
        for l in lines.lines {
            if let Some(f) = g.files.get_mut(&l.file) {
                f.write_durable(l.line, &l.content, l.mask);
                if l.mask == 0xff && f.working_line(l.line).is_none_or(|w| w == l.content) {
                    f.clear_dirty(l.line);
                }
            }
        }
        if self.eadr {
            for f in g.files.values_mut() {
                for line in f.dirty_lines() {
                    if let Some(w) = f.working_line(line) {
                        f.write_durable(line, &w, 0xff);
                    }
                    f.clear_dirty(line);
                }
            }
        }
    }

    fn tracing(&self) -> bool {
        lock(&self.trace).is_some()
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        kind: EventKind,
        file: &str,
        offset: u64,
        len: u64,
        site: Site,
        pending: usize,
        data: Option<Vec<u8>>,
    ) {
        self.emit_as(thread_index(), kind, file, offset, len, site, pending, data);
    }

    #[allow(clippy::too_many_arguments)]
    fn emit_as(
        &self,
        thread: u32,
        kind: EventKind,
        file: &str,
        offset: u64,
        len: u64,
        site: Site,
        pending: usize,
        data: Option<Vec<u8>>,
    ) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.stats).events += 1;
        {
            let mut t = lock(&self.trace);
            if let Some(t) = t.as_mut() {
                t.push(TraceEvent {
                    seq,
                    thread,
                    kind,
                    file: file.to_owned(),
                    offset,
                    len,
                    data: data.unwrap_or_default(),
                    site: site.key(),
                });
            }
        }
        let hook = self.hook.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(h) = hook {
            if IN_HOOK.with(|c| c.replace(true)) {
                return; // already inside a hook on this thread
            }
            struct Reset;
            impl Drop for Reset {
                fn drop(&mut self) {
                    IN_HOOK.with(|c| c.set(false));
                }
            }
            let _reset = Reset;
            let ev = Event { seq, thread, kind, file: file.to_owned(), offset, len, site, pending };
            h(self, &ev);
        }
    }
}

/// Saves a trace as text, one event per line (see [`TraceEvent::to_line`]).
pub fn save_trace(path: impl AsRef<std::path::Path>, events: &[TraceEvent]) -> Result<()> {
    let path = path.as_ref();
    let mut out = String::from("ferrite-trace 1\n");
    for e in events {
        out.push_str(&e.to_line());
        out.push('\n');
    }
    std::fs::write(path, out).map_err(|e| Error::io("write", path, e))
}

/// Loads a trace written by [`save_trace`].
pub fn load_trace(path: impl AsRef<std::path::Path>) -> Result<Vec<TraceEvent>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
    let mut lines = text.lines();
    if lines.next() != Some("ferrite-trace 1") {
        return Err(Error::corrupt(path, "not a ferrite trace (version 1)"));
    }
    lines.filter(|l| !l.is_empty()).map(TraceEvent::from_line).collect()
}

/// A domain rebuilt by [`replay`], with the heap memory its files' working images live in.
pub struct Replay {
    /// The rebuilt domain: capture images from it as from the original.
    pub domain: SimDomain,
    _bufs: Vec<crate::pool::HeapBlock>,
}

impl fmt::Debug for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replay").field("domain", &self.domain).finish()
    }
}

/// Rebuilds a domain from a recorded trace: files are created, stores written, flushes and
/// fences applied **as the thread that recorded them** (pending sets keyed by the recorded
/// thread index), so the working image, the durable image, the dirty lines and every
/// thread's pending lines equal the recording domain's after the same events. Sites of the
/// replayed events are not preserved (hooks on the replay see this function's location).
pub fn replay(events: &[TraceEvent], eadr: bool) -> Result<Replay> {
    let domain = SimDomain::new(eadr);
    let mut bufs = Vec::new();
    let site = Site { location: Location::caller(), rule: None };
    let bad = |e: &TraceEvent, why: &str| {
        Error::InvalidArgument(format!("trace event {} cannot be replayed: {why}", e.seq))
    };
    for e in events {
        match e.kind {
            EventKind::FileCreate => {
                let block = crate::pool::HeapBlock::new(e.len.max(1) as usize)?;
                let region = block.region(e.len as usize)?;
                domain.file_create(&e.file, e.len, Some(region), site)?;
                bufs.push(block);
            }
            EventKind::FileRemove => domain.file_remove(&e.file, site)?,
            EventKind::FilePunch => domain.file_punch(&e.file, e.offset, e.len, site)?,
            EventKind::Store | EventKind::NtStore => {
                let (addr, region) = {
                    let g = domain.read_gate();
                    let f = g.files.get(&e.file).ok_or_else(|| bad(e, "unknown file"))?;
                    let w = f.working.ok_or_else(|| bad(e, "file not mapped"))?;
                    (w.addr_of(e.offset, e.data.len() as u64)?, w)
                };
                let nt = e.kind == EventKind::NtStore;
                let data = &e.data;
                if nt {
                    region.write_bytes(e.offset, data)?;
                    let g = domain.read_gate();
                    if let Some(f) = g.files.get(&e.file) {
                        domain.add_nt_pending(e.thread, f, e.offset, data.len() as u64);
                    }
                } else {
                    domain.store(addr, data.len() as u64, site, false, || {
                        region.write_bytes(e.offset, data)
                    })?;
                }
            }
            EventKind::Flush => {
                let addr = {
                    let g = domain.read_gate();
                    let f = g.files.get(&e.file).ok_or_else(|| bad(e, "unknown file"))?;
                    let w = f.working.ok_or_else(|| bad(e, "file not mapped"))?;
                    w.addr_of(e.offset, e.len)?
                };
                domain.flush_as(e.thread, addr, e.len, site);
            }
            EventKind::Fence => domain.fence_as(e.thread, site),
        }
    }
    Ok(Replay { domain, _bufs: bufs })
}
