//! Simulated block files: files read and written with `pread`/`pwrite` and made durable with
//! `fsync`, as a rollback journal, a WAL or a page file uses them (the model of SQLite's
//! crash-test VFS, at sector granularity). The public handle is
//! [`BlockFile`](crate::BlockFile); this module holds the domain's state of each file and the
//! primitives the handle calls.
//!
//! Per file the domain keeps:
//!
//! - the **durable content**: what survives a crash for certain (its length is the durable
//!   length);
//! - the **working content**: what reads return (every write and `set_len` applies to it at
//!   once);
//! - per 512-byte **sector** written since the last sync, the **versions** it had, in write
//!   order (each the sector's whole working content after one write);
//! - the **floor**: the smallest length the file had since the last sync (a truncation that is
//!   later extended again still zeroes what it cut, if its length change persists).
//!
//! A crash keeps, per sector written since the last sync, its durable content or any one of
//! its versions, each sector independently (writes persist in any order, and a write spanning
//! several sectors may tear between them, never inside one: axiom B1); and either the durable
//! length or the newest one. The candidates an [`ImageSpec`](crate::ImageSpec) picks from are
//! listed in [`crate::image`].
//!
//! # Invariants
//! - B-D1: the durable content of a file changes only at a sync of that file (it becomes the
//!   working content, and the file's versions are cleared), and at file creation and removal,
//!   which are durable at once. A sync of one file changes nothing of another (axiom B3).
//! - B-D2: every sector whose working content may differ from its durable content has at
//!   least one version, its last version equals its working content, and no sector at or past
//!   the working length keeps a version that starts there.
//! - B-D3: a file is open through at most one handle (the simulated `flock`); a handle names
//!   its file by name and id, so a handle of a removed file never reaches a new file of the
//!   same name.
//!
//! # Ordering
//! Writes since the last sync are unordered with respect to each other; a sync orders all of
//! its file's earlier writes before everything after it (axiom B2). Other files' writes and
//! persistent-memory lines are not ordered by it.
//!
//! # Concurrency
//! The block files live in the domain's gate (`Files::blocks`): writes, length changes, syncs,
//! creation and removal take it exclusively, reads and the length shared, so a capture (which
//! takes it exclusively) never sees half of one write. Hooks run outside the gate, after the
//! operation, except for syncs, which the hook sees before they take effect.

use std::collections::BTreeMap;
use std::panic::Location;

use super::domain::lock;
use super::{EventKind, SimDomain, Site};
use crate::error::{Error, Result};
use crate::image::{CrashImage, ImageFile, Pick, SplitMix64};

/// Bytes per sector: the unit a crash never tears (axiom B1).
pub const SECTOR: u64 = 512;

/// One simulated block file (see the module docs).
pub(crate) struct SimBlock {
    /// Distinguishes this file from earlier files of the same name (B-D3).
    pub id: u64,
    /// Whether a handle holds the file (the simulated `flock`).
    pub open: bool,
    pub durable: Vec<u8>,
    pub working: Vec<u8>,
    /// Smallest length since the last sync.
    pub floor: u64,
    /// Sector index → its versions since the last sync, oldest first (`SECTOR` bytes each).
    pub versions: BTreeMap<u64, Vec<Box<[u8]>>>,
}

/// One unsynced choice of a block file, as the tester sees it (the candidates of
/// [`ImageSpec::blocks`](crate::ImageSpec::blocks), in their order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsyncedInfo {
    /// Block file.
    pub file: String,
    /// The sector, or `None` for the file's pending length change.
    pub sector: Option<u64>,
    /// Index of the version among the sector's versions (0 = oldest); 0 for a length.
    pub version: usize,
}

fn sector_of(data: &[u8], sector: u64) -> Box<[u8]> {
    let mut v = vec![0u8; SECTOR as usize].into_boxed_slice();
    let start = (sector * SECTOR) as usize;
    if start < data.len() {
        let end = (start + SECTOR as usize).min(data.len());
        v[..end - start].copy_from_slice(&data[start..end]);
    }
    v
}

fn usize_of(n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::InvalidArgument(format!("block file size {n} too large")))
}

impl SimBlock {
    fn new(id: u64, content: Vec<u8>) -> SimBlock {
        SimBlock {
            id,
            open: false,
            floor: content.len() as u64,
            durable: content.clone(),
            working: content,
            versions: BTreeMap::new(),
        }
    }

    /// Whether the length differs from (or was cut below) the durable length since the sync.
    fn len_pending(&self) -> bool {
        self.working.len() != self.durable.len() || self.floor < self.durable.len() as u64
    }

    /// The number of unsynced choices (a length change, sector versions).
    fn candidates(&self) -> usize {
        usize::from(self.len_pending()) + self.versions.values().map(Vec::len).sum::<usize>()
    }

    /// Unsynced choices whose content differs from what is durable (the sync's `fresh`).
    fn fresh(&self) -> usize {
        let sectors = self
            .versions
            .iter()
            .filter(|(s, v)| v.last().is_some_and(|l| **l != *sector_of(&self.durable, **s)))
            .count();
        usize::from(self.len_pending()) + sectors
    }

    fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(()); // as `pwrite`: an empty write does not extend the file
        }
        let end = off.checked_add(data.len() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("a write of {} bytes at {off} overflows", data.len()))
        })?;
        let (o, e) = (usize_of(off)?, usize_of(end)?);
        if e > self.working.len() {
            self.working.resize(e, 0);
        }
        self.working[o..e].copy_from_slice(data);
        for s in off / SECTOR..end.div_ceil(SECTOR) {
            let now = sector_of(&self.working, s);
            let v = self.versions.entry(s).or_default();
            if v.last() != Some(&now) {
                v.push(now);
            }
        }
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> Result<()> {
        let n = usize_of(len)?;
        self.working.resize(n, 0);
        self.floor = self.floor.min(len);
        // B-D2: sectors past the new end lose their versions; the sector holding the end
        // keeps only what is left of its versions.
        let first_gone = len.div_ceil(SECTOR);
        self.versions.retain(|&s, _| s < first_gone);
        if !len.is_multiple_of(SECTOR) {
            let s = len / SECTOR;
            let cut = (len % SECTOR) as usize;
            if let Some(v) = self.versions.get_mut(&s) {
                for ver in v.iter_mut() {
                    ver[cut..].fill(0);
                }
                v.dedup();
            }
        }
        Ok(())
    }

    fn sync(&mut self) {
        self.durable.clone_from(&self.working);
        self.floor = self.working.len() as u64;
        self.versions.clear();
    }

    /// The file's crash content: the candidates `pick` chooses (numbered from `*i`).
    fn crash_content(&self, pick: &Pick, i: &mut usize, rng: &mut SplitMix64) -> Vec<u8> {
        let take_len = self.len_pending() && {
            let t = pick.chooses(*i, rng);
            *i += 1;
            t
        };
        let mut out = if take_len {
            let keep = (self.floor as usize).min(self.durable.len());
            let mut v = self.durable[..keep].to_vec();
            v.resize(self.working.len(), 0);
            v
        } else {
            self.durable.clone()
        };
        for (&s, versions) in &self.versions {
            let mut chosen = None;
            for v in versions {
                if pick.chooses(*i, rng) {
                    chosen = Some(v);
                }
                *i += 1;
            }
            let Some(v) = chosen else { continue };
            let start = (s * SECTOR) as usize;
            if start >= out.len() {
                continue;
            }
            let end = (start + SECTOR as usize).min(out.len());
            out[start..end].copy_from_slice(&v[..end - start]);
        }
        out
    }
}

impl SimDomain {
    #[track_caller]
    fn block_site() -> Site {
        Site { location: Location::caller(), rule: None }
    }

    /// Runs `f` on block file `name` with handle id `id` (`None`: whichever file has the name),
    /// under the gate taken exclusively.
    fn with_block<R>(
        &self,
        name: &str,
        id: Option<u64>,
        f: impl FnOnce(&mut SimBlock) -> Result<R>,
    ) -> Result<R> {
        let mut g = self.write_gate();
        match g.blocks.get_mut(name) {
            Some(b) if id.is_none_or(|i| i == b.id) => f(b),
            _ => Err(Error::NotFound { path: name.into() }),
        }
    }

    /// Creates an empty block file, durable at once; with `open`, held by the caller's handle.
    /// Returns its id.
    pub(crate) fn block_create(&self, name: &str, open: bool, site: Site) -> Result<u64> {
        let id = {
            let mut g = self.write_gate();
            if g.blocks.contains_key(name) {
                return Err(Error::AlreadyExists { path: name.into() });
            }
            g.next_block_id += 1;
            let id = g.next_block_id;
            let mut b = SimBlock::new(id, Vec::new());
            b.open = open;
            g.blocks.insert(name.to_owned(), b);
            id
        };
        self.emit(EventKind::BlockCreate, name, 0, 0, site, 0, None);
        Ok(id)
    }

    /// Takes the simulated lock of block file `name`: its id, or `Locked` if a handle holds it.
    pub(crate) fn block_open(&self, name: &str) -> Result<u64> {
        self.with_block(name, None, |b| {
            if b.open {
                return Err(Error::Locked { path: name.into() });
            }
            b.open = true;
            Ok(b.id)
        })
    }

    /// Releases the lock a handle took (the handle is dropped): raises `Close` first, so a
    /// hook sees the last state the handle left.
    #[track_caller]
    pub(crate) fn block_close(&self, name: &str, id: u64) {
        let held = {
            let g = self.read_gate();
            g.blocks.get(name).is_some_and(|b| b.id == id && b.open)
        };
        if !held {
            return;
        }
        self.emit(EventKind::Close, name, 0, 0, Self::block_site(), 0, None);
        let _ = self.with_block(name, Some(id), |b| {
            b.open = false;
            Ok(())
        });
    }

    /// Removes block file `name` (durable at once). A handle still open on it gets `NotFound`
    /// from then on.
    pub(crate) fn block_remove(&self, name: &str, site: Site) -> Result<()> {
        {
            let mut g = self.write_gate();
            g.blocks.remove(name).ok_or_else(|| Error::NotFound { path: name.into() })?;
        }
        self.emit(EventKind::BlockRemove, name, 0, 0, site, 0, None);
        Ok(())
    }

    /// Reads into `buf` from `off` of the working content; bytes past the end read as zero.
    /// Returns how many bytes came from the file.
    pub(crate) fn block_read(
        &self,
        name: &str,
        id: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let g = self.read_gate();
        let b = match g.blocks.get(name) {
            Some(b) if b.id == id => b,
            _ => return Err(Error::NotFound { path: name.into() }),
        };
        let len = b.working.len() as u64;
        let n = if off >= len { 0 } else { (len - off).min(buf.len() as u64) as usize };
        if n > 0 {
            let o = off as usize;
            buf[..n].copy_from_slice(&b.working[o..o + n]);
        }
        buf[n..].fill(0);
        Ok(n)
    }

    /// Writes `data` at `off` (extending the file if needed); not durable before a sync.
    pub(crate) fn block_write(
        &self,
        name: &str,
        id: Option<u64>,
        off: u64,
        data: &[u8],
        site: Site,
    ) -> Result<()> {
        self.with_block(name, id, |b| b.write(off, data))?;
        let traced = self.tracing().then(|| data.to_vec());
        self.emit(EventKind::BlockWrite, name, off, data.len() as u64, site, 0, traced);
        Ok(())
    }

    /// Sets the length (zero-extending or truncating); not durable before a sync.
    pub(crate) fn block_set_len(
        &self,
        name: &str,
        id: Option<u64>,
        len: u64,
        site: Site,
    ) -> Result<()> {
        self.with_block(name, id, |b| b.set_len(len))?;
        self.emit(EventKind::BlockSetLen, name, 0, len, site, 0, None);
        Ok(())
    }

    /// The working length.
    pub(crate) fn block_len(&self, name: &str, id: u64) -> Result<u64> {
        let g = self.read_gate();
        match g.blocks.get(name) {
            Some(b) if b.id == id => Ok(b.working.len() as u64),
            _ => Err(Error::NotFound { path: name.into() }),
        }
    }

    /// A sync of block file `name`: the hook sees it first (a crash point with the file's
    /// unsynced choices still undecided), then its working content becomes durable — unless
    /// the site is dropped (mutation checks).
    pub(crate) fn block_sync(&self, name: &str, id: Option<u64>, site: Site) -> Result<()> {
        let (pending, fresh) = {
            let g = self.read_gate();
            match g.blocks.get(name) {
                Some(b) if id.is_none_or(|i| i == b.id) => (b.candidates(), b.fresh()),
                _ => return Err(Error::NotFound { path: name.into() }),
            }
        };
        lock(&self.stats).syncs += 1;
        self.emit_as(
            super::thread_index(),
            EventKind::BlockSync,
            name,
            0,
            0,
            site,
            (pending, fresh),
            None,
        );
        if self.is_dropped(&site) {
            return Ok(());
        }
        self.with_block(name, id, |b| {
            b.sync();
            Ok(())
        })
    }

    /// Adds block file `name` holding `content` (durable and working), not open (opening a
    /// crash image; no event).
    fn block_insert(&self, name: &str, content: Vec<u8>) -> Result<()> {
        let mut g = self.write_gate();
        if g.blocks.contains_key(name) {
            return Err(Error::AlreadyExists { path: name.into() });
        }
        g.next_block_id += 1;
        let id = g.next_block_id;
        g.blocks.insert(name.to_owned(), SimBlock::new(id, content));
        Ok(())
    }

    /// Adds every block file of `image` to this domain, its content durable (e.g. to the
    /// domain of a pool opened with `Pool::open_sim` from the same image, so one domain sees
    /// both). Open them with [`BlockFile::open_sim`](crate::BlockFile::open_sim).
    pub fn add_block_files(&self, image: &CrashImage) -> Result<()> {
        for f in &image.blocks {
            self.block_insert(&f.name, f.bytes())?;
        }
        Ok(())
    }

    /// A new domain (no eADR) holding the block files of `image`, for a recovery that uses
    /// block files only. Like every new domain it starts with the calling thread's defaults
    /// (the tester's recovery hook).
    pub fn open_block_image(image: &CrashImage) -> Result<std::sync::Arc<SimDomain>> {
        let d = std::sync::Arc::new(SimDomain::new(false));
        d.add_block_files(image)?;
        Ok(d)
    }

    /// Names and working lengths of the domain's block files.
    pub fn block_files(&self) -> Vec<(String, u64)> {
        self.read_gate().blocks.iter().map(|(n, b)| (n.clone(), b.working.len() as u64)).collect()
    }

    /// The unsynced choices of every block file, in the order
    /// [`ImageSpec::blocks`](crate::ImageSpec::blocks) numbers them.
    pub fn unsynced_blocks(&self) -> Vec<UnsyncedInfo> {
        let g = self.read_gate();
        let mut out = Vec::new();
        for (name, b) in &g.blocks {
            if b.len_pending() {
                out.push(UnsyncedInfo { file: name.clone(), sector: None, version: 0 });
            }
            for (&s, v) in &b.versions {
                for version in 0..v.len() {
                    out.push(UnsyncedInfo { file: name.clone(), sector: Some(s), version });
                }
            }
        }
        out
    }

    /// The durable content of block file `name` (for tests and tools).
    pub fn durable_block(&self, name: &str) -> Result<Vec<u8>> {
        let g = self.read_gate();
        g.blocks.get(name).map(|b| b.durable.clone()).ok_or(Error::NotFound { path: name.into() })
    }

    /// The block files of a capture (the gate is held by the caller): per file the durable
    /// content plus the unsynced choices `pick` chooses.
    pub(crate) fn capture_blocks(
        blocks: &BTreeMap<String, SimBlock>,
        pick: &Pick,
        rng: &mut SplitMix64,
    ) -> Vec<ImageFile> {
        let mut i = 0;
        blocks
            .iter()
            .map(|(name, b)| ImageFile::from_bytes(name, &b.crash_content(pick, &mut i, rng)))
            .collect()
    }
}
