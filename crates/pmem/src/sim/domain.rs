//! The domain itself: files, pending sets, hooks, traces and mutations, and the primitives
//! `Space` calls on every store, flush and fence (see the module docs of [`super`] for the
//! fault model and invariants D1–D4).
//!
//! # Invariants
//! - D1–D4 of [`super`]. A dropped site's flushes capture nothing and its fences drain
//!   nothing, in every domain that drops it (set per domain, or per thread for new domains).
//!
//! # Concurrency
//! Stores and flushes hold the gate shared; fences, captures and file operations hold it
//! exclusively. Pending sets are per thread, under one lock. Hooks run after the operation
//! (before it, for fences and closes), outside every lock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::buffer::SimBuffer;
use super::event::{IN_HOOK, new_domain_defaults};
use super::files::{Files, PendingSet, SimFile};
use super::{Event, EventKind, Hook, Site, TraceEvent, thread_index};
use crate::error::{Error, Result};
use crate::image::{PAGE, Page};
use crate::region::{CACHE_LINE, Region};

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
    /// Block-file syncs seen.
    pub syncs: u64,
}

/// How write-backs of one line by different threads land in a domain (`docs/design/
/// persistence.md` axiom M6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritebackOrder {
    /// A line's write-backs land in coherence order: a fence never makes durable a captured
    /// content of a line older than the content a write-back already made durable (the
    /// default; what x86 hardware does).
    #[default]
    Coherent,
    /// Every fence lands its thread's captured contents, even over newer content another
    /// thread's fence made durable since: the project's model before M6, stricter than the
    /// hardware, kept as a selectable mode.
    Strict,
}

/// The simulated persistence domain of one pool or pool set (see the module docs).
pub struct SimDomain {
    pub(crate) gate: RwLock<Files>,
    pub(crate) pending: Mutex<HashMap<u32, PendingSet>>,
    pub(super) hook: RwLock<Option<Hook>>,
    pub(super) trace: Mutex<Option<Vec<TraceEvent>>>,
    pub(super) dropped: RwLock<HashSet<String>>,
    pub(super) seq: AtomicU64,
    /// The coherence clock: advanced under the pending lock by every capture (D7).
    pub(super) coh: AtomicU64,
    /// [`WritebackOrder::Strict`] when set.
    pub(super) strict: AtomicBool,
    pub(super) stats: Mutex<SimStats>,
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

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimDomain {
    /// A new, empty domain. Pass it to `Pool::create_sim_with`/`PoolSet::create_sim_with` after
    /// installing a hook, to observe a pool's creation too. `eadr` must match the pool's
    /// options (a fence then makes every dirty line durable).
    ///
    /// The domain starts with the defaults set on the calling thread (a hook, dropped persist
    /// sites: [`set_new_domain_hook`](super::set_new_domain_hook),
    /// [`set_new_domain_drops`](super::set_new_domain_drops)).
    pub fn new(eadr: bool) -> SimDomain {
        let defaults = new_domain_defaults();
        SimDomain {
            gate: RwLock::new(Files {
                by_addr: BTreeMap::new(),
                files: BTreeMap::new(),
                blocks: BTreeMap::new(),
                next_block_id: 0,
            }),
            pending: Mutex::new(HashMap::new()),
            hook: RwLock::new(defaults.hook),
            trace: Mutex::new(None),
            dropped: RwLock::new(defaults.dropped.into_iter().collect()),
            seq: AtomicU64::new(0),
            coh: AtomicU64::new(0),
            strict: AtomicBool::new(defaults.writebacks == WritebackOrder::Strict),
            stats: Mutex::new(SimStats::default()),
            eadr,
            zero: Arc::new([0u8; PAGE as usize]),
        }
    }

    /// Sets how write-backs of one line by different threads land from now on (see
    /// [`WritebackOrder`]). Domains start with the calling thread's default
    /// ([`set_new_domain_writebacks`](super::set_new_domain_writebacks)).
    pub fn set_writeback_order(&self, order: WritebackOrder) {
        self.strict.store(order == WritebackOrder::Strict, Ordering::Relaxed);
    }

    /// How write-backs of one line land (see [`WritebackOrder`]).
    pub fn writeback_order(&self) -> WritebackOrder {
        if self.strict.load(Ordering::Relaxed) {
            WritebackOrder::Strict
        } else {
            WritebackOrder::Coherent
        }
    }

    /// The next coherence stamp. Callers hold the pending lock, or the gate exclusively, so
    /// stamps follow the order in which contents were read (D7).
    pub(super) fn next_stamp(&self) -> u64 {
        self.coh.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The words of `mask` that a pending line captured at `stamp` writes over its line's
    /// durable words (whose stamps are `durable`): all of them under `Strict` and for
    /// non-temporal words; under `Coherent` those no write-back has made durable with newer
    /// content (D7).
    pub(super) fn landing_mask(&self, stamp: u64, nt: bool, mask: u8, durable: &[u64; 8]) -> u8 {
        if nt || self.strict.load(Ordering::Relaxed) {
            return mask;
        }
        (0..8).filter(|&w| mask & (1 << w) != 0 && stamp >= durable[w]).fold(0, |m, w| m | 1 << w)
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

    pub(super) fn is_dropped(&self, site: &Site) -> bool {
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

    /// Creates a zero-filled file whose working image is `buffer`, which the file owns from
    /// now on (replayed files: their memory lives exactly as long as the file).
    pub(crate) fn file_create_owned(
        &self,
        name: &str,
        len: u64,
        buffer: SimBuffer,
        site: Site,
    ) -> Result<()> {
        let n = usize::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("sim file size {len} too large")))?;
        let region = buffer.region(n)?;
        {
            let mut g = self.write_gate();
            if g.files.contains_key(name) {
                return Err(Error::AlreadyExists { path: name.into() });
            }
            let mut f = SimFile::new(name, len, &self.zero);
            g.by_addr.insert(region.base_addr(), name.to_owned());
            f.working = Some(region);
            f.owned = Some(buffer);
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
            stamps: HashMap::new(),
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
    ///
    /// Hooks see a [`EventKind::Close`] first (the last state the pool left, working images
    /// still readable), if any file of the domain lives in the range.
    ///
    /// With `last` (the caller holds the only reference to the domain, which goes with the
    /// memory, so nothing can capture from it any more) the files are detached without the
    /// copies: a crash tester recovers every image on a domain of its own, and copying its
    /// pools out just before both are freed was a share of every recovery's cost.
    #[track_caller]
    pub(crate) fn detach_range(&self, start: usize, len: usize, last: bool) {
        let closing = {
            let g = self.read_gate();
            g.by_addr.range(start..start.saturating_add(len)).next().is_some()
        };
        if closing {
            let site = Site { location: Location::caller(), rule: None };
            self.emit(EventKind::Close, "", 0, 0, site, 0, None);
        }
        let mut g = self.write_gate();
        let Files { by_addr, files, .. } = &mut *g;
        let names: Vec<(usize, String)> =
            by_addr.range(start..start.saturating_add(len)).map(|(&a, n)| (a, n.clone())).collect();
        for (addr, name) in names {
            by_addr.remove(&addr);
            let Some(f) = files.get_mut(&name) else { continue };
            let Some(r) = f.working.take() else { continue };
            if last {
                continue;
            }
            let n = f.len as usize;
            let copy = SimBuffer::new(n).and_then(|b| {
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
                // A punch is newer than every write-back captured before it (D7).
                let stamp = self.next_stamp();
                f.set_stamps(line, 0xff, stamp);
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

    pub(super) fn add_nt_pending(&self, me: u32, file: &SimFile, off: u64, len: u64) {
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
            v.upsert(&file.name, line, content, mask, false, self.next_stamp());
            at = line_end;
        }
    }

    /// A flush of `[addr, addr + len)`: captures the lines' contents into this thread's
    /// pending set.
    pub(crate) fn flush(&self, addr: usize, len: u64, site: Site) {
        self.flush_as(thread_index(), addr, len, site);
    }

    pub(super) fn flush_as(&self, me: u32, addr: usize, len: u64, site: Site) {
        if len == 0 {
            return;
        }
        let dropped = self.is_dropped(&site);
        let located = {
            let g = self.read_gate();
            g.locate(addr).map(|(file, off)| {
                let end = (off + len).min(file.len);
                let mut fresh = 0;
                if !dropped && !self.eadr {
                    let mut p = lock(&self.pending);
                    let v = p.entry(me).or_default();
                    let mut doubles = 0;
                    for line in off / CACHE_LINE..end.div_ceil(CACHE_LINE) {
                        let content = file.working_line(line).unwrap_or([0; 64]);
                        // Fresh: the flush makes a difference to what becomes durable —
                        // new content, or content replacing a different pending one.
                        let before = v.content_of(&file.name, line);
                        fresh += usize::from(
                            content != file.durable_line(line)
                                || before.is_some_and(|b| b != content),
                        );
                        let stamp = self.next_stamp();
                        doubles +=
                            u64::from(v.upsert(&file.name, line, content, 0xff, true, stamp));
                    }
                    drop(p);
                    if doubles > 0 {
                        lock(&self.stats).double_flushes += doubles;
                    }
                }
                (file.name.clone(), off, end - off, fresh)
            })
        };
        if let Some((name, off, n, fresh)) = located {
            self.emit_as(me, EventKind::Flush, &name, off, n, site, (0, fresh), None);
        }
    }

    /// A fence by the calling thread: the hook sees it first (a crash point, with the
    /// thread's pending lines not yet durable), then the pending lines become durable.
    pub(crate) fn fence(&self, site: Site) {
        self.fence_as(thread_index(), site);
    }

    pub(super) fn fence_as(&self, me: u32, site: Site) {
        let (pending, fresh) = self.fence_effect(me);
        lock(&self.stats).fences += 1;
        self.emit_as(me, EventKind::Fence, "", 0, 0, site, (pending, fresh), None);
        if self.is_dropped(&site) {
            return;
        }
        let mut g = self.write_gate();
        let lines = lock(&self.pending).remove(&me).unwrap_or_default();
        for l in lines.lines {
            if let Some(f) = g.files.get_mut(&l.file) {
                // Words whose newer content is durable already are left (D7): this write-back
                // carried them as they were before that content, and landed first.
                let mask = self.landing_mask(l.stamp, l.nt, l.mask, &f.stamps_of(l.line));
                if mask == 0 {
                    continue;
                }
                f.write_durable(l.line, &l.content, mask);
                // Non-temporal words reach memory at this drain: newer than every capture.
                let stamp = if l.nt { self.next_stamp() } else { l.stamp };
                f.set_stamps(l.line, mask, stamp);
                if mask == 0xff && f.working_line(l.line).is_none_or(|w| w == l.content) {
                    f.clear_dirty(l.line);
                }
            }
        }
        if self.eadr {
            for f in g.files.values_mut() {
                for line in f.dirty_lines() {
                    if let Some(w) = f.working_line(line) {
                        f.write_durable(line, &w, 0xff);
                        let stamp = self.next_stamp();
                        f.set_stamps(line, 0xff, stamp);
                    }
                    f.clear_dirty(line);
                }
            }
        }
    }

    /// What a fence by `me` would do now: its pending lines, and how many lines it would
    /// change in the durable image (pending content, or under eADR the working content of
    /// dirty lines, that differs from the durable content).
    fn fence_effect(&self, me: u32) -> (usize, usize) {
        let g = self.read_gate();
        let p = lock(&self.pending);
        let Some(v) = p.get(&me) else {
            return (0, if self.eadr { Self::eadr_fresh(&g) } else { 0 });
        };
        let mut fresh = 0;
        for l in &v.lines {
            if let Some(f) = g.files.get(&l.file) {
                let mask = self.landing_mask(l.stamp, l.nt, l.mask, &f.stamps_of(l.line));
                let durable = f.durable_line(l.line);
                fresh += usize::from((0..8).any(|w| {
                    mask & (1 << w) != 0 && l.content[w * 8..w * 8 + 8] != durable[w * 8..w * 8 + 8]
                }));
            }
        }
        if self.eadr {
            fresh += Self::eadr_fresh(&g);
        }
        (v.len(), fresh)
    }

    fn eadr_fresh(g: &Files) -> usize {
        g.files
            .values()
            .map(|f| {
                f.dirty_lines()
                    .into_iter()
                    .filter(|&l| f.working_line(l).is_some_and(|w| w != f.durable_line(l)))
                    .count()
            })
            .sum()
    }

    pub(super) fn tracing(&self) -> bool {
        lock(&self.trace).is_some()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit(
        &self,
        kind: EventKind,
        file: &str,
        offset: u64,
        len: u64,
        site: Site,
        pending: usize,
        data: Option<Vec<u8>>,
    ) {
        self.emit_as(thread_index(), kind, file, offset, len, site, (pending, 0), data);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_as(
        &self,
        thread: u32,
        kind: EventKind,
        file: &str,
        offset: u64,
        len: u64,
        site: Site,
        (pending, fresh): (usize, usize),
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
            let ev = Event {
                seq,
                thread,
                kind,
                file: file.to_owned(),
                offset,
                len,
                site,
                pending,
                fresh,
            };
            h(self, &ev);
        }
    }
}
