//! PM files: one pool set divided into growable byte files, the paged engine's PM medium
//! (`docs/design/paged.md` §6). File [`PAGES`] holds the PM page store's pages, file [`LOG`]
//! the rollback journal or the WAL when they live in PM. One pool set per database keeps the
//! crash tester's simulated set (one per target) and the kill tests working unchanged.
//!
//! ```text
//!  segment 0 data area                          segment k (k >= 1) data area
//!  +-----------------+------------------------+ +--------------------------------+
//!  | directory       | chunk 0 of file PAGES  | | one chunk of the file that the |
//!  | (DIR_BYTES)     |                        | | directory's entry k names      |
//!  +-----------------+------------------------+ +--------------------------------+
//!  directory: line 0 = magic u64 "FERRPGD1" | version u32 | segment size u64 | crc32c u32
//!             entry k (u64 at 64 + 8k, k >= 1): 0 = unassigned, else 1 + file << 32 | chunk
//! ```
//!
//! A file's bytes are its chunks in chunk order; its *capacity* is their total length. A file
//! has no persistent length: what is valid in it is for its user to know (the meta page's page
//! count, a journal header, checksummed WAL frames).
//!
//! # Invariants
//! - F1: every live segment but 0 has exactly one directory entry once the file that grew it
//!   returned from [`PmFiles::ensure`]; a live segment without an entry is an orphan of a grow
//!   that crashed before P-PG-2 and is removed at open (nothing of it was relied upon).
//! - F2: a file's chunk numbers are dense from 0 (for [`PAGES`], chunk 0 is segment 0's
//!   remainder); segments are never removed, so the chunks of a file never move and a byte
//!   offset always names the same PM bytes.
//! - F3: the directory's header line is immutable after creation and carries a CRC32C; its
//!   magic is stored last (P-PG-1), so a set without it is an unfinished creation.
//!
//! # Ordering
//! - P-PG-1 (creation): the directory's header (version, segment size, checksum) is durable
//!   before its magic.
//! - P-PG-2 (grow): the new segment is complete (P-PM-8, inside the pool set) before its
//!   directory entry is stored, and the entry is durable before `ensure` returns, so no write
//!   into the chunk can be relied upon before the chunk belongs to its file after a crash.
//! - Writes and syncs name the caller's rule: [`PmFiles::write_at`] starts write-back of the
//!   lines it stored, [`PmFiles::sync`] fences (every earlier write of this thread is durable
//!   when it returns). Both are `#[track_caller]`, so the crash tester attributes each persist
//!   to the protocol's call site, not to this module.
//!
//! # Concurrency
//! `Send + Sync`. Reads and writes take the chunk table's read lock for the offset lookup only;
//! `ensure` takes it exclusively to append chunks (after the segment and its entry exist).
//! Callers serialize writes to overlapping bytes (one writer at a time in the paged engine).

use std::sync::{RwLock, RwLockReadGuard};

use ferrite_pmem::PoolSet;

use crate::engine::paged::bytes::{put_u32, put_u64, u64_at};
use crate::error::{Error, Result};

/// The file that holds the PM page store's pages.
pub(crate) const PAGES: usize = 0;
/// The file that holds the journal or the WAL when they live in PM.
pub(crate) const LOG: usize = 1;
/// Number of files.
pub(crate) const FILES: usize = 2;

/// "FERRPGD1".
const DIR_MAGIC: u64 = u64::from_le_bytes(*b"FERRPGD1");
/// Format version of the directory.
const DIR_VERSION: u32 = 1;
/// Bytes at the start of segment 0's data area that hold the directory.
pub(crate) const DIR_BYTES: u64 = 32 << 10;
/// Directory entries (segment ids 1..MAX_IDS-1 can be assigned).
const MAX_IDS: u64 = (DIR_BYTES - 64) / 8;
const D_VERSION: u64 = 8;
const D_SEGSIZE: u64 = 16;
const D_CRC: u64 = 24;
const D_ENTRIES: u64 = 64;

/// One chunk: where its bytes are in the set's space, and how many.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    global: u64,
    len: u64,
}

/// A pool set divided into [`FILES`] growable byte files (see the module docs).
#[derive(Debug)]
pub(crate) struct PmFiles {
    set: PoolSet,
    /// Global offset of the directory (segment 0's data area).
    dir: u64,
    /// Size of every segment but 0 (file size, header page included).
    seg_size: u64,
    chunks: RwLock<[Vec<Chunk>; FILES]>,
}

fn poisoned() -> Error {
    Error::Poisoned
}

impl PmFiles {
    /// Formats a new, empty pool set (segment 0 only): writes the directory (P-PG-1). File
    /// [`PAGES`] starts with segment 0's remainder; file [`LOG`] is empty.
    pub(crate) fn create(set: PoolSet) -> Result<PmFiles> {
        let seg0 = segment0(&set)?;
        if seg0.data_len < DIR_BYTES + 4096 {
            return Err(Error::InvalidArgument(format!(
                "pool segments of {} bytes are too small for the paged engine (at least {})",
                seg0.file_size,
                DIR_BYTES + 2 * 4096
            )));
        }
        let seg_size = set.segment_size();
        let dir = seg0.data_offset;
        set.fill(dir, DIR_BYTES, 0)?;
        set.store_u64(
            dir + D_VERSION,
            u64::from(DIR_VERSION),
            std::sync::atomic::Ordering::Relaxed,
        )?;
        set.store_u64(dir + D_SEGSIZE, seg_size, std::sync::atomic::Ordering::Relaxed)?;
        let crc = header_crc(DIR_VERSION, seg_size);
        set.store_u64(dir + D_CRC, u64::from(crc), std::sync::atomic::Ordering::Relaxed)?;
        set.persist_rule("P-PG-1", dir, DIR_BYTES)?; // ORDER(P-PG-1): the directory (header and empty entries) before its magic
        set.store_u64(dir, DIR_MAGIC, std::sync::atomic::Ordering::Release)?;
        set.persist_rule("P-PG-1", dir, 8)?; // ORDER(P-PG-1): the magic last: creation is complete
        let first = Chunk { global: dir + DIR_BYTES, len: seg0.data_len - DIR_BYTES };
        Ok(PmFiles { set, dir, seg_size, chunks: RwLock::new([vec![first], Vec::new()]) })
    }

    /// Opens a pool set formatted by [`PmFiles::create`]: checks the directory, removes
    /// orphan segments (F1), rebuilds the chunk tables. Errors: `Corrupted` for a missing or
    /// damaged directory or a segment the directory contradicts; `Incompatible` for a newer
    /// directory version.
    pub(crate) fn open(set: PoolSet) -> Result<PmFiles> {
        PmFiles::open_or_return(set).map_err(|b| b.0)
    }

    /// [`PmFiles::open`], handing the set back with the error, so that a refused open can
    /// close it as it found it (opening the set marked it open).
    pub(crate) fn open_or_return(
        set: PoolSet,
    ) -> std::result::Result<PmFiles, Box<(Error, PoolSet)>> {
        match PmFiles::read_directory(&set) {
            Ok((dir, seg_size, chunks)) => {
                Ok(PmFiles { set, dir, seg_size, chunks: RwLock::new(chunks) })
            }
            Err(e) => Err(Box::new((e, set))),
        }
    }

    /// The set back, for a clean close after a refused open.
    pub(crate) fn into_set(self) -> PoolSet {
        self.set
    }

    /// The checks and tables of [`PmFiles::open`]: the directory's offset, the segment size
    /// and every file's chunks.
    fn read_directory(set: &PoolSet) -> Result<(u64, u64, [Vec<Chunk>; FILES])> {
        let seg0 = segment0(set)?;
        let at = format!("{} (paged directory)", set.dir().display());
        let corrupt = |what: String| Error::Corrupted { what, at: at.clone() };
        if seg0.data_len < DIR_BYTES + 4096 {
            return Err(corrupt(format!("segment 0 of {} bytes is too small", seg0.file_size)));
        }
        let dir = seg0.data_offset;
        let load = |off: u64| set.load_u64(dir + off, std::sync::atomic::Ordering::Acquire);
        if load(0)? != DIR_MAGIC {
            return Err(corrupt(
                "no paged directory (not a paged database, or its creation did not finish)".into(),
            ));
        }
        let version = load(D_VERSION)?;
        let seg_size = load(D_SEGSIZE)?;
        let crc = load(D_CRC)?;
        let version32 =
            u32::try_from(version).map_err(|_| corrupt("bad directory version".into()))?;
        if u64::from(header_crc(version32, seg_size)) != crc {
            return Err(corrupt("directory header checksum mismatch".into()));
        }
        if version32 > DIR_VERSION {
            return Err(Error::Incompatible {
                what: format!(
                    "paged directory version {version32} (this build reads {DIR_VERSION})"
                ),
                at,
            });
        }
        set.set_segment_size(seg_size);
        let mut slots: [Vec<Option<Chunk>>; FILES] = [vec![None], Vec::new()];
        slots[PAGES][0] = Some(Chunk { global: dir + DIR_BYTES, len: seg0.data_len - DIR_BYTES });
        // The whole entry table, read once (entry k at byte 8k; entry 0 is unused).
        let mut table = vec![0u8; (DIR_BYTES - D_ENTRIES) as usize];
        set.read_into(dir + D_ENTRIES, &mut table)?;
        let entry_of = |id: u64| u64_at(&table, 8 * id as usize);
        let mut orphans = Vec::new();
        let live = set.segments();
        for seg in live.iter().filter(|s| s.id != 0) {
            if seg.id >= MAX_IDS {
                return Err(corrupt(format!("segment {} beyond the directory", seg.id)));
            }
            let entry = entry_of(seg.id);
            if entry == 0 {
                orphans.push(seg.id);
                continue;
            }
            let v = entry - 1;
            let (file, chunk) = ((v >> 32) as usize, (v & 0xFFFF_FFFF) as usize);
            if file >= FILES || chunk > MAX_IDS as usize {
                return Err(corrupt(format!("segment {}: bad directory entry {entry:#x}", seg.id)));
            }
            if seg.file_size != seg_size {
                return Err(corrupt(format!(
                    "segment {} has {} bytes, the directory says {seg_size}",
                    seg.id, seg.file_size
                )));
            }
            let list = &mut slots[file];
            if list.len() <= chunk {
                list.resize(chunk + 1, None);
            }
            if list[chunk].is_some() {
                return Err(corrupt(format!("file {file} chunk {chunk} named twice")));
            }
            list[chunk] = Some(Chunk { global: seg.data_offset, len: seg.data_len });
        }
        // Entries naming segments that are not live: a segment is never removed (F2). Every
        // entry word is read, however far past the highest live segment it lies.
        let ids: std::collections::BTreeSet<u64> = live.iter().map(|s| s.id).collect();
        for id in 1..MAX_IDS {
            if entry_of(id) != 0 && !ids.contains(&id) {
                return Err(corrupt(format!("directory names segment {id}, which is missing")));
            }
        }
        let mut chunks: [Vec<Chunk>; FILES] = [Vec::new(), Vec::new()];
        for (file, list) in slots.into_iter().enumerate() {
            for (i, c) in list.into_iter().enumerate() {
                chunks[file]
                    .push(c.ok_or_else(|| corrupt(format!("file {file} misses chunk {i}")))?);
            }
        }
        for id in orphans {
            // F1: grown but never entered (a crash between P-PM-8 and P-PG-2).
            tracing::info!(segment = id, "paged: removing an orphan segment");
            set.remove_segment(id)?;
        }
        Ok((dir, seg_size, chunks))
    }

    /// The pool set (for its directory, mode and sim domain).
    pub(crate) fn set(&self) -> &PoolSet {
        &self.set
    }

    fn chunks(&self) -> Result<RwLockReadGuard<'_, [Vec<Chunk>; FILES]>> {
        self.chunks.read().map_err(|_| poisoned())
    }

    /// Bytes file `file` can hold without growing.
    pub(crate) fn capacity(&self, file: usize) -> Result<u64> {
        Ok(self.chunks()?[file].iter().map(|c| c.len).sum())
    }

    /// Grows file `file` by whole segments until it holds at least `len` bytes (P-PG-2).
    /// Errors: `PoolFull` (the set and the file are then as they were, but for segments
    /// already added and entered, which stay the file's).
    pub(crate) fn ensure(&self, file: usize, len: u64) -> Result<()> {
        if self.capacity(file)? >= len {
            return Ok(());
        }
        let mut chunks = self.chunks.write().map_err(|_| poisoned())?;
        while chunks[file].iter().map(|c| c.len).sum::<u64>() < len {
            let id = self.set.add_segment(self.seg_size)?;
            if id >= MAX_IDS {
                // Out of directory entries: give the segment back (it has no entry, so a
                // crash here leaves an orphan that open removes).
                let _ = self.set.remove_segment(id);
                return Err(Error::PoolFull {
                    at: self.set.dir().display().to_string(),
                    requested: len,
                    available: chunks[file].iter().map(|c| c.len).sum(),
                });
            }
            let info = self.set.segments().into_iter().find(|s| s.id == id).ok_or_else(|| {
                Error::Corrupted {
                    what: format!("segment {id} missing right after it was added"),
                    at: self.set.dir().display().to_string(),
                }
            })?;
            let chunk = chunks[file].len() as u64;
            let entry = self.dir + D_ENTRIES + 8 * id;
            self.set.store_u64(
                entry,
                1 + ((file as u64) << 32 | chunk),
                std::sync::atomic::Ordering::Release,
            )?;
            self.set.persist_rule("P-PG-2", entry, 8)?; // ORDER(P-PG-2): the segment belongs to its file before any write into it is relied upon
            chunks[file].push(Chunk { global: info.data_offset, len: info.data_len });
        }
        Ok(())
    }

    /// Splits `[off, off + len)` of `file` into pieces `(global offset, piece length, offset
    /// in the caller's buffer)`. Errors: `Corrupted` when the range passes the capacity.
    fn pieces(&self, file: usize, off: u64, len: u64) -> Result<Pieces> {
        let chunks = self.chunks()?;
        let mut out = Pieces::default();
        let (mut pos, mut done, mut base) = (off, 0u64, 0u64);
        for c in chunks[file].iter() {
            if done == len {
                break;
            }
            if pos < base + c.len {
                let at = pos - base;
                let n = (c.len - at).min(len - done);
                out.push((c.global + at, n, done as usize));
                pos += n;
                done += n;
            }
            base += c.len;
        }
        if done < len {
            return Err(Error::Corrupted {
                what: format!(
                    "access of {len} bytes at {off} passes the end of PM file {file} ({base} bytes)"
                ),
                at: self.set.dir().display().to_string(),
            });
        }
        Ok(out)
    }

    /// Copies `buf.len()` bytes at `off` of `file` into `buf`. Errors: `Corrupted` past the
    /// capacity.
    pub(crate) fn read_at(&self, file: usize, off: u64, buf: &mut [u8]) -> Result<()> {
        for (g, n, at) in self.pieces(file, off, buf.len() as u64)? {
            self.set.read_into(g, &mut buf[at..at + n as usize])?;
        }
        Ok(())
    }

    /// Stores `data` at `off` of `file` and starts write-back of its lines, naming the
    /// caller's ordering rule `rule`; durable after the next [`PmFiles::sync`] on this thread.
    /// Errors: `Corrupted` past the capacity (grow first with [`PmFiles::ensure`]).
    #[track_caller]
    pub(crate) fn write_at(
        &self,
        file: usize,
        off: u64,
        data: &[u8],
        rule: &'static str,
    ) -> Result<()> {
        for (g, n, at) in self.pieces(file, off, data.len() as u64)? {
            self.set.write_bytes(g, &data[at..at + n as usize])?;
            self.set.flush_rule(rule, g, n)?; // ORDER(P-PG-0): write-back of a file write starts here; the caller's rule orders it by its sync
        }
        Ok(())
    }

    /// Stores `data` at `off` of `file` without starting write-back (a lazy write: durable
    /// after a later [`PmFiles::flush_at`] of its lines and a sync, or whenever the cache
    /// evicts them). Errors: `Corrupted` past the capacity.
    pub(crate) fn store_at(&self, file: usize, off: u64, data: &[u8]) -> Result<()> {
        for (g, n, at) in self.pieces(file, off, data.len() as u64)? {
            self.set.write_bytes(g, &data[at..at + n as usize])?;
        }
        Ok(())
    }

    /// Starts write-back of the lines overlapping `[off, off + len)` of `file` (the caller's
    /// rule `rule`); durable after the next [`PmFiles::sync`] on this thread.
    #[track_caller]
    pub(crate) fn flush_at(
        &self,
        file: usize,
        off: u64,
        len: u64,
        rule: &'static str,
    ) -> Result<()> {
        for (g, n, _) in self.pieces(file, off, len)? {
            self.set.flush_rule(rule, g, n)?; // ORDER(P-PG-0): write-back starts here; the caller's rule orders it by its sync
        }
        Ok(())
    }

    /// The aligned 8-byte store `value` at `off` of `file` (M1: failure-atomic), not yet
    /// flushed: a commit word. Errors: `Corrupted` past the capacity or for an unaligned `off`.
    pub(crate) fn store_word(&self, file: usize, off: u64, value: u64) -> Result<()> {
        match self.pieces(file, off, 8)?.single() {
            Some((g, 8, _)) if g % 8 == 0 => {
                Ok(self.set.store_u64(g, value, std::sync::atomic::Ordering::Release)?)
            }
            _ => Err(Error::Corrupted {
                what: format!("an 8-byte word at {off} of PM file {file} is not aligned"),
                at: self.set.dir().display().to_string(),
            }),
        }
    }

    /// Loads the aligned 8-byte word at `off` of `file`.
    pub(crate) fn load_word(&self, file: usize, off: u64) -> Result<u64> {
        match self.pieces(file, off, 8)?.single() {
            Some((g, 8, _)) if g % 8 == 0 => {
                Ok(self.set.load_u64(g, std::sync::atomic::Ordering::Acquire)?)
            }
            _ => Err(Error::Corrupted {
                what: format!("an 8-byte word at {off} of PM file {file} is not aligned"),
                at: self.set.dir().display().to_string(),
            }),
        }
    }

    /// Fences: every write of this thread is durable when it returns (the caller's `rule`).
    #[track_caller]
    pub(crate) fn sync(&self, rule: &'static str) {
        self.set.fence_rule(rule); // ORDER(P-PG-0): the caller's sync point; its rule says what it orders
    }
}

/// The pieces of one access: `(global offset, length, offset in the caller's buffer)`. Most
/// accesses lie in one chunk; the first piece is held inline, so they allocate nothing.
#[derive(Debug, Default)]
struct Pieces {
    head: Option<(u64, u64, usize)>,
    rest: Vec<(u64, u64, usize)>,
}

impl Pieces {
    fn push(&mut self, p: (u64, u64, usize)) {
        if self.head.is_none() {
            self.head = Some(p);
        } else {
            self.rest.push(p);
        }
    }

    /// The only piece, if there is exactly one.
    fn single(&self) -> Option<(u64, u64, usize)> {
        if self.rest.is_empty() { self.head } else { None }
    }
}

impl IntoIterator for Pieces {
    type Item = (u64, u64, usize);
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<Self::Item>, std::vec::IntoIter<Self::Item>>;

    fn into_iter(self) -> Self::IntoIter {
        self.head.into_iter().chain(self.rest)
    }
}

fn segment0(set: &PoolSet) -> Result<ferrite_pmem::SegmentInfo> {
    set.segments().into_iter().find(|s| s.id == 0).ok_or_else(|| Error::Corrupted {
        what: "pool set without segment 0".into(),
        at: set.dir().display().to_string(),
    })
}

fn header_crc(version: u32, seg_size: u64) -> u32 {
    let mut b = [0u8; 12];
    put_u32(&mut b, 0, version);
    put_u64(&mut b, 4, seg_size);
    crc32c::crc32c(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::internals::testing::TestDir;

    fn opts() -> ferrite_pmem::Options {
        ferrite_pmem::Options::new().segment_size(256 << 10)
    }

    #[test]
    fn writes_span_chunks_and_survive_reopen() {
        let dir = TestDir::new("paged-pmfile");
        let path = dir.join("db");
        let files = PmFiles::create(PoolSet::create(&path, &opts()).unwrap()).unwrap();
        let first = files.capacity(PAGES).unwrap();
        assert_eq!(first, (256 << 10) - 4096 - DIR_BYTES);
        assert_eq!(files.capacity(LOG).unwrap(), 0);
        // A write across the end of chunk 0 and into a grown chunk, and one into the log.
        files.ensure(PAGES, first + 10_000).unwrap();
        files.ensure(LOG, 5).unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        files.write_at(PAGES, first - 10_000, &data, "P-PG-0").unwrap();
        files.write_at(LOG, 0, b"hello", "P-PG-0").unwrap();
        files.sync("P-PG-0"); // ORDER(P-PG-0): test writes durable before the reopen
        let cap_pages = files.capacity(PAGES).unwrap();
        let cap_log = files.capacity(LOG).unwrap();
        drop(files);
        let files = PmFiles::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
        assert_eq!(files.capacity(PAGES).unwrap(), cap_pages);
        assert_eq!(files.capacity(LOG).unwrap(), cap_log);
        let mut back = vec![0u8; data.len()];
        files.read_at(PAGES, first - 10_000, &mut back).unwrap();
        assert_eq!(back, data);
        let mut log = [0u8; 5];
        files.read_at(LOG, 0, &mut log).unwrap();
        assert_eq!(&log, b"hello");
    }

    #[test]
    fn access_past_the_capacity_is_a_typed_error() {
        let dir = TestDir::new("paged-pmfile-bounds");
        let files = PmFiles::create(PoolSet::create(dir.join("db"), &opts()).unwrap()).unwrap();
        let cap = files.capacity(PAGES).unwrap();
        let mut buf = [0u8; 16];
        assert!(matches!(files.read_at(PAGES, cap - 8, &mut buf), Err(Error::Corrupted { .. })));
        assert!(matches!(files.read_at(LOG, 0, &mut buf), Err(Error::Corrupted { .. })));
        assert!(matches!(files.write_at(PAGES, cap, &buf, "P-PG-0"), Err(Error::Corrupted { .. })));
    }

    #[test]
    fn a_set_without_a_directory_is_refused() {
        let dir = TestDir::new("paged-pmfile-nodir");
        let path = dir.join("db");
        PoolSet::create(&path, &opts()).unwrap().close().unwrap();
        let err = PmFiles::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }

    #[test]
    fn a_damaged_directory_header_is_refused() {
        let dir = TestDir::new("paged-pmfile-crc");
        let path = dir.join("db");
        let files = PmFiles::create(PoolSet::create(&path, &opts()).unwrap()).unwrap();
        let d = files.dir;
        files.set.store_u64(d + D_SEGSIZE, 12345, std::sync::atomic::Ordering::Relaxed).unwrap();
        files.set.persist(d, 64).unwrap(); // ORDER(P-PG-1): test: the damaged header is what open reads
        drop(files);
        let err = PmFiles::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }

    /// Regression: open used to read the directory's entries only up to the highest live
    /// segment id + 64, so an entry naming a missing segment further out went unnoticed (and
    /// the file it names silently lost a chunk). Every entry word is read now.
    #[test]
    fn an_entry_naming_a_missing_segment_is_refused_however_far_out() {
        for id in [1, 65, 1000, MAX_IDS - 1] {
            let dir = TestDir::new("paged-pmfile-missing");
            let path = dir.join("db");
            let files = PmFiles::create(PoolSet::create(&path, &opts()).unwrap()).unwrap();
            let entry = files.dir + D_ENTRIES + 8 * id;
            let word = 1 + ((LOG as u64) << 32);
            files.set.store_u64(entry, word, std::sync::atomic::Ordering::Relaxed).unwrap();
            files.set.persist(entry, 8).unwrap(); // ORDER(P-PG-2): test: the stray entry is what open reads
            drop(files);
            let err = PmFiles::open(PoolSet::open(&path, &opts()).unwrap()).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "entry {id}: {err}");
        }
    }

    #[test]
    fn an_orphan_segment_is_removed_at_open() {
        let dir = TestDir::new("paged-pmfile-orphan");
        let path = dir.join("db");
        let files = PmFiles::create(PoolSet::create(&path, &opts()).unwrap()).unwrap();
        // A grow that crashed between P-PM-8 and P-PG-2: a live segment without an entry.
        files.set.add_segment(256 << 10).unwrap();
        assert_eq!(files.set.segment_count(), 2);
        drop(files);
        let files = PmFiles::open(PoolSet::open(&path, &opts()).unwrap()).unwrap();
        assert_eq!(files.set.segment_count(), 1);
        assert_eq!(files.capacity(LOG).unwrap(), 0);
    }
}
