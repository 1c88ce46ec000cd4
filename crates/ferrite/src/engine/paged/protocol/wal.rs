//! The write-ahead log (SQLite's WAL mode, spec `fast-fash-nvwal.md` §0.1 and §4.1's
//! "stock SQLite WAL"; the baseline NVWAL improves on): a commit appends each changed page as
//! a frame and syncs the log once; pages in the store change only at a checkpoint.
//!
//! ```text
//!  log file:  0: header (one 512-byte sector, 24 bytes used)        512: frames
//!   header: magic u64 "FERRWAL1" | version u32 | page size u32 | salt u32 |
//!           crc32c u32 (over bytes 8..20)
//!   (salt and checksum share one aligned 8-byte word: a restart changes only that word, so it
//!   is never torn, M1; on a block file the header is one sector)
//!   frame i at 512 + i * (64 + page size):
//!           page number u32 | commit u32 (1 on the last frame of a commit, else 0) |
//!           salt u32 | crc u32 | 48 zero bytes | the page image
//!   crc of frame i = CRC-32 (IEEE) continued from the crc of frame i-1 (frame 0: from the
//!                    salt's CRC32C); not CRC32C, which pages embed (see `frame_crc`)
//!                    over page number, commit, salt and the image
//! ```
//!
//! # Invariants
//! - W1 (validity): frame i is valid iff frames 0..i are valid, its salt is the header's and
//!   its crc matches the chain. The log's committed prefix ends after the last valid frame
//!   whose commit word is 1; frames after it belong to a commit that did not finish.
//! - W2 (the WAL index): in DRAM, for every page with a frame in the committed prefix, the
//!   newest such frame; `read_page` of any other page reads the store.
//! - W3 (checkpoint): the store holds every page as of the end of the committed prefix before
//!   the log restarts with a new salt, which invalidates every old frame at once (W1).
//! - W4: an all-zero header (or a log too short to hold one) is a new log. Any other header
//!   whose magic or checksum fails is damage, reported as `Corrupted`: a restart rewrites one
//!   word (M1) and creation happens before the database's own creation completes, so no crash
//!   leaves a torn header.
//! - W5 (no stale frame past the end): after recovery, no frame past the committed prefix
//!   carries the header's salt. Such frames (the rest of a commit a crash interrupted, or
//!   commits behind a damaged frame) would validate again once a later commit rewrote the
//!   frames before them identically and re-linked the chain (an application redoing the
//!   transaction recovery dropped): the next open would replay a transaction that the
//!   database it recovered did not hold. So recovery that sees one checkpoints the
//!   committed prefix (P-PG-21) and restarts the log under a new salt (P-PG-22) before any
//!   commit appends, as SQLite resets its WAL.
//!
//! # Ordering (rules in `docs/design/persistence.md`)
//! - P-PG-20: a commit's frames (its commit frame last in the chain) are durable before
//!   `commit` returns: one log sync per commit.
//! - P-PG-21 (checkpoint, and recovery's restart, W5): the checkpointed pages are durable in
//!   the store before the log restarts.
//! - P-PG-22: a new header (creation, restart) is durable before a frame of its salt is
//!   written: one log sync per restart. Without it, a crash in the first commit after a
//!   checkpoint can keep the old header while some of the new frames, written over old ones,
//!   reach the file: the old chain then breaks at the first overwritten frame, and recovery
//!   replays the committed prefix before it, **older** images than the store holds (W3),
//!   over the store: committed transactions vanish. `db-paged-wal-file` found this
//!   (checkpoints every 16 frames; a block-file crash kept one sector of a new frame);
//!   an earlier version of this module had dropped the sync because no target then committed
//!   after a checkpoint.
//!
//! # Concurrency
//! The one writer commits and checkpoints; `read_page` holds the index's read lock while it
//! reads a frame, and a checkpoint takes it exclusively only to restart the log after the
//! store is complete, so a reader sees each page's newest committed image throughout.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{AfterCommit, Batch};
use zerocopy::IntoBytes;

use crate::engine::paged::layout::{self, FrameHead, WalHead};
use crate::engine::paged::store::log::LogFile;
use crate::engine::paged::store::{PageNo, PageStore};
use crate::error::{Error, Result};

/// "FERRWAL1".
const MAGIC: u64 = u64::from_le_bytes(*b"FERRWAL1");
/// Format version of the WAL.
const VERSION: u32 = 1;
/// Where the frames begin.
const FRAMES: u64 = 512;
/// Bytes before a frame's image.
const FRAME_HEAD: usize = size_of::<FrameHead>();
/// Bytes of the header that carry fields.
const HEAD: usize = size_of::<WalHead>();
/// Default frames between checkpoints (SQLite's auto-checkpoint).
pub(crate) const DEFAULT_CHECKPOINT_FRAMES: u64 = 1000;

/// The WAL over a page store and a log file.
#[derive(Debug)]
pub(crate) struct Wal {
    store: PageStore,
    log: LogFile,
    /// Checkpoint when the log holds this many frames after a commit (0: only at close).
    checkpoint_frames: u64,
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    salt: u32,
    /// Frames in the committed prefix.
    frames: u64,
    /// The chain's crc after the last committed frame.
    crc: u32,
    /// W2: page -> frame number.
    index: HashMap<PageNo, u64>,
}

fn header(page_size: u32, salt: u32) -> WalHead {
    let mut h = WalHead {
        magic: MAGIC.into(),
        version: VERSION.into(),
        page_size: page_size.into(),
        salt: salt.into(),
        ..WalHead::default()
    };
    h.crc = crc32c::crc32c(&h.as_bytes()[8..20]).into();
    h
}

/// A frame's checksum, continued from the previous frame's: CRC-32 (IEEE, `crc32fast`), not
/// the CRC32C that pages carry inside them (a block `data | crc32c(data)` cancels out of a
/// CRC32C over it; see the journal's `record_crc`).
fn frame_crc(prev: u32, head: &[u8], image: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(prev);
    h.update(&head[0..12]);
    h.update(image);
    h.finalize()
}

fn seed_crc(salt: u32) -> u32 {
    crc32c::crc32c(&salt.to_le_bytes())
}

fn fresh_salt(old: u32) -> u32 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    old.wrapping_add(1) ^ ((t as u32) & 0xFFFF_0000)
}

fn lock_err() -> Error {
    Error::Poisoned
}

impl Wal {
    /// A WAL for `store` kept in `log`; checkpoints after `checkpoint_frames` frames (0: only
    /// at [`Wal::checkpoint`]). Call [`Wal::recover`] before any read.
    pub(crate) fn new(store: PageStore, log: LogFile, checkpoint_frames: u64) -> Wal {
        Wal { store, log, checkpoint_frames, state: RwLock::new(State::default()) }
    }

    /// The page store.
    pub(crate) fn store(&self) -> &PageStore {
        &self.store
    }

    fn stride(&self) -> u64 {
        (FRAME_HEAD + self.store.page_size()) as u64
    }

    /// Frames in the committed prefix (for tests and reports).
    pub(crate) fn frames(&self) -> Result<u64> {
        Ok(self.state.read().map_err(|_| lock_err())?.frames)
    }

    /// Copies the newest committed image of `pgno` into `out` (W2).
    pub(crate) fn read_page(&self, pgno: PageNo, out: &mut [u8]) -> Result<()> {
        let st = self.state.read().map_err(|_| lock_err())?;
        match st.index.get(&pgno) {
            Some(&f) => {
                if out.len() != self.store.page_size() {
                    return Err(Error::InvalidArgument(format!(
                        "a page buffer of {} bytes for {}-byte pages",
                        out.len(),
                        self.store.page_size()
                    )));
                }
                self.log.read_at(FRAMES + f * self.stride() + FRAME_HEAD as u64, out)
            }
            None => self.store.read_page(pgno, out),
        }
    }

    /// Appends `batch` as frames and syncs the log (P-PG-20); then checkpoints if the log
    /// holds `checkpoint_frames` frames. On an error the caller poisons the handle.
    pub(crate) fn commit(&mut self, batch: &Batch<'_>) -> Result<AfterCommit> {
        if batch.pages.is_empty() {
            return Ok(None);
        }
        let ps = self.store.page_size();
        let stride = self.stride();
        let (salt, start, mut crc) = {
            let st = self.state.read().map_err(|_| lock_err())?;
            (st.salt, st.frames, st.crc)
        };
        let n = batch.pages.len() as u64;
        self.log.ensure(FRAMES + (start + n) * stride)?;
        let mut frame = vec![0u8; FRAME_HEAD + ps];
        for (i, (pgno, image)) in batch.pages.iter().enumerate() {
            let last = i + 1 == batch.pages.len();
            let mut head = FrameHead {
                pgno: (*pgno).into(),
                commit: u32::from(last).into(),
                salt: salt.into(),
                ..FrameHead::default()
            };
            crc = frame_crc(crc, &head.as_bytes()[..12], image);
            head.crc = crc.into();
            frame[..FRAME_HEAD].copy_from_slice(head.as_bytes());
            frame[FRAME_HEAD..].copy_from_slice(image);
            let at = FRAMES + (start + i as u64) * stride;
            self.log.write_at(at, &frame, "P-PG-20")?; // ORDER(P-PG-20): a frame, durable at the log sync below
        }
        self.log.sync("P-PG-20")?; // ORDER(P-PG-20): the commit's frames durable before commit returns
        {
            let mut st = self.state.write().map_err(|_| lock_err())?;
            for (i, (pgno, _)) in batch.pages.iter().enumerate() {
                st.index.insert(*pgno, start + i as u64);
            }
            st.frames = start + n;
            st.crc = crc;
        }
        // The commit point is behind: a failed checkpoint is reported as such, not as a
        // failed commit (the log still holds every frame; the next open checkpoints).
        if self.checkpoint_frames > 0 && start + n >= self.checkpoint_frames {
            return Ok(self.checkpoint().err());
        }
        Ok(None)
    }

    /// Copies every page's newest committed frame into the store, syncs it (P-PG-21), and
    /// restarts the log with a new salt (P-PG-22). Returns the pages copied.
    pub(crate) fn checkpoint(&mut self) -> Result<u64> {
        super::injected_checkpoint_failure()?;
        let (mut pages, salt) = {
            let st = self.state.read().map_err(|_| lock_err())?;
            (st.index.iter().map(|(&p, &f)| (p, f)).collect::<Vec<_>>(), st.salt)
        };
        if pages.is_empty() {
            return Ok(0);
        }
        self.backfill(&mut pages)?;
        let mut st = self.state.write().map_err(|_| lock_err())?;
        self.restart(&mut st, fresh_salt(salt))?;
        Ok(pages.len() as u64)
    }

    /// Copies each `(page, frame)` into the store and syncs it (P-PG-21): the first step of
    /// a checkpoint, and of recovery's restart (W5).
    fn backfill(&self, pages: &mut [(PageNo, u64)]) -> Result<()> {
        if pages.is_empty() {
            return Ok(());
        }
        pages.sort_unstable();
        let end = pages.iter().map(|(p, _)| u64::from(*p) + 1).max().unwrap_or(0);
        self.store.ensure(end)?;
        let mut image = vec![0u8; self.store.page_size()];
        for &(pgno, f) in pages.iter() {
            self.log.read_at(FRAMES + f * self.stride() + FRAME_HEAD as u64, &mut image)?;
            self.store.write_page(pgno, &image, "P-PG-21")?; // ORDER(P-PG-21): a checkpointed page, durable at the store sync below
        }
        self.store.sync("P-PG-21") // ORDER(P-PG-21): the store is complete before the log restarts
    }

    /// Writes a new header with `salt` and syncs it (P-PG-22); the log is then empty.
    fn restart(&self, st: &mut State, salt: u32) -> Result<()> {
        self.log.ensure(FRAMES)?;
        let h = header(self.store.page_size() as u32, salt);
        self.log.write_at(0, h.as_bytes(), "P-PG-22")?; // ORDER(P-PG-22): the new header, made durable below
        self.log.sync("P-PG-22")?; // ORDER(P-PG-22): the new header durable before a frame of its salt overwrites an old frame
        *st = State { salt, frames: 0, crc: seed_crc(salt), index: HashMap::new() };
        Ok(())
    }

    /// At open: reads the header (W4), scans the valid frames (W1) and rebuilds the index
    /// (W2); if a frame of the log's salt lies past the committed end, checkpoints and
    /// restarts the log (W5). Returns whether the log held committed frames. Errors:
    /// `Corrupted` for a log of another page size, `Incompatible` for a newer version.
    pub(crate) fn recover(&mut self) -> Result<bool> {
        let ps = self.store.page_size();
        let mut st = self.state.write().map_err(|_| lock_err())?;
        let mut h = WalHead::default();
        if self.log.capacity()? >= FRAMES {
            self.log.read_at(0, h.as_mut_bytes())?;
        }
        if h.as_bytes().iter().all(|&b| b == 0) {
            // W4: a new log.
            self.restart(&mut st, fresh_salt(0))?;
            return Ok(false);
        }
        if h.magic.get() != MAGIC || crc32c::crc32c(&h.as_bytes()[8..20]) != h.crc.get() {
            return Err(Error::Corrupted {
                what: "WAL header: bad magic or checksum".into(),
                at: "WAL header".into(),
            });
        }
        let version = h.version.get();
        if version > VERSION {
            return Err(Error::Incompatible {
                what: format!("WAL version {version} (this build reads {VERSION})"),
                at: "WAL header".into(),
            });
        }
        if h.page_size.get() as usize != ps {
            return Err(Error::Corrupted {
                what: format!("WAL of {}-byte pages in a store of {ps}-byte pages", h.page_size),
                at: "WAL header".into(),
            });
        }
        let salt = h.salt.get();
        let stride = self.stride();
        let room = self.log.capacity()?.saturating_sub(FRAMES) / stride;
        let mut frame = vec![0u8; FRAME_HEAD + ps];
        let (mut crc, mut committed, mut committed_crc) = (seed_crc(salt), 0u64, seed_crc(salt));
        let mut pending: Vec<(PageNo, u64)> = Vec::new();
        let mut index = HashMap::new();
        for i in 0..room {
            self.log.read_at(FRAMES + i * stride, &mut frame)?;
            let head = layout::read::<FrameHead>(&frame).unwrap_or_default();
            if head.salt.get() != salt {
                break;
            }
            let next = frame_crc(crc, &head.as_bytes()[..12], &frame[FRAME_HEAD..]);
            if next != head.crc.get() {
                break;
            }
            crc = next;
            pending.push((head.pgno.get(), i));
            if head.commit.get() == 1 {
                index.extend(pending.drain(..));
                committed = i + 1;
                committed_crc = crc;
            }
        }
        // W5: a frame of this salt past the committed end (the rest of an interrupted commit,
        // or frames behind a damaged one) must never validate again: checkpoint what is
        // committed and restart the log under a new salt before any commit appends.
        let stale = self.frame_of_salt(salt, committed, room)?;
        tracing::info!(
            frames = committed,
            pages = index.len(),
            stale = stale.is_some(),
            "paged: WAL recovered"
        );
        if let Some(at) = stale {
            let pages = index.len();
            self.backfill(&mut index.into_iter().collect::<Vec<_>>())?;
            self.restart(&mut st, fresh_salt(salt))?;
            tracing::info!(at, pages, "paged: WAL restarted at recovery (frames past its end)");
        } else {
            *st = State { salt, frames: committed, crc: committed_crc, index };
        }
        Ok(committed > 0)
    }

    /// The first frame in `from..room` whose head carries `salt`, if any (W5).
    fn frame_of_salt(&self, salt: u32, from: u64, room: u64) -> Result<Option<u64>> {
        let mut head = FrameHead::default();
        for i in from..room {
            self.log.read_at(FRAMES + i * self.stride(), head.as_mut_bytes())?;
            if head.salt.get() == salt {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use ferrite_pmem::internals::testing::TestDir;

    use crate::engine::paged::bytes::u32_at;

    use super::*;

    const PS: usize = 512;

    fn open(path: &std::path::Path, create: bool, every: u64) -> Wal {
        try_open(path, create, every).unwrap()
    }

    fn try_open(path: &std::path::Path, create: bool, every: u64) -> Result<Wal> {
        let (files, store) = crate::engine::paged::store::test_store(path, create, PS);
        let mut w = Wal::new(store, LogFile::Pm(files), every);
        w.recover()?;
        Ok(w)
    }

    fn read(w: &Wal, pgno: u32) -> u8 {
        let mut out = vec![0u8; PS];
        w.read_page(pgno, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == out[0]), "page {pgno} is a mix");
        out[0]
    }

    fn commit(w: &mut Wal, pages: &[(u32, u8)]) {
        let images: Vec<(u32, Vec<u8>)> = pages.iter().map(|&(p, f)| (p, vec![f; PS])).collect();
        let refs: Vec<(u32, &[u8])> = images.iter().map(|(p, v)| (*p, v.as_slice())).collect();
        let after = w
            .commit(&Batch {
                pages: &refs,
                pages_before: 0,
                spare: &Default::default(),
                committed: &Default::default(),
            })
            .unwrap();
        assert!(after.is_none(), "a checkpoint failed: {after:?}");
    }

    #[test]
    fn commits_are_read_from_the_log_and_survive_reopen() {
        let dir = TestDir::new("paged-wal");
        let path = dir.join("db");
        let mut w = open(&path, true, 0);
        commit(&mut w, &[(0, 1), (1, 1)]);
        commit(&mut w, &[(1, 2), (2, 2)]);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        assert_eq!(w.frames().unwrap(), 4);
        drop(w);
        let mut w = open(&path, false, 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        assert_eq!(w.checkpoint().unwrap(), 3);
        assert_eq!(w.frames().unwrap(), 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        commit(&mut w, &[(2, 3)]);
        drop(w);
        let w = open(&path, false, 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 3));
    }

    /// A commit whose commit frame is damaged is not committed, nor is any commit after a
    /// damaged frame. Recovery that sees such frames past the committed end checkpoints the
    /// commits before them and restarts the log (W5): the log is then empty and the store
    /// holds them.
    #[test]
    fn a_commit_without_its_commit_frame_is_ignored() {
        let build = |name: &str| {
            let dir = TestDir::new(name);
            let path = dir.join("db");
            let mut w = open(&path, true, 0);
            commit(&mut w, &[(0, 1), (1, 1)]);
            commit(&mut w, &[(0, 2), (1, 2), (2, 2)]);
            (dir, path, w)
        };
        // The second commit's last (commit) frame damaged: the whole commit is gone, the
        // first stays, now in the store.
        let (_dir, path, w) = build("paged-wal-torn");
        let stride = w.stride();
        w.log.write_at(FRAMES + 4 * stride + 100, &[0xAB], "P-PG-0").unwrap();
        drop(w);
        let w = open(&path, false, 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 1, 0));
        assert_eq!(w.frames().unwrap(), 0, "restarted: frames 2..5 carried the salt");
        drop(w);
        let w = open(&path, false, 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 1, 0));
        // A frame in the middle of the first commit damaged: nothing is committed, and
        // nothing was checkpointed, so the store still has zeros.
        let (_dir, path, w) = build("paged-wal-torn-first");
        w.log.write_at(FRAMES + 100, &[0xAB], "P-PG-0").unwrap();
        drop(w);
        let w = open(&path, false, 0);
        assert_eq!(w.frames().unwrap(), 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (0, 0, 0));
    }

    /// A frame whose checksum word is wrong (its image intact) ends the valid log there
    /// (W1): for each frame of four commits in turn, recovery keeps exactly the commits that
    /// end before it, and ignores the rest, later commits whose own frames are intact
    /// included (the chain breaks). The bad frame carries the salt, so recovery moves the
    /// kept commits into the store and restarts the log (W5); a commit after that recovery
    /// starts the new log, and the ignored frames stay ignored at the next open.
    #[test]
    fn a_frame_with_a_wrong_checksum_ends_the_log_there() {
        let dir = TestDir::new("paged-wal-crc");
        let path = dir.join("db");
        let commits: [&[(u32, u8)]; 4] =
            [&[(0, 1), (1, 1)], &[(0, 2), (2, 2)], &[(1, 3), (2, 3), (3, 3)], &[(0, 4)]];
        let mut w = open(&path, true, 0);
        for c in commits {
            commit(&mut w, c);
        }
        let stride = w.stride();
        let mut log = vec![0u8; (FRAMES + 8 * stride) as usize];
        w.log.read_at(0, &mut log).unwrap();
        drop(w);
        for bad in 0..8u64 {
            let w = open(&path, false, 0);
            w.log.write_at(0, &log, "P-PG-0").unwrap();
            let at = FRAMES + bad * stride + 12;
            let crc = u32_at(&log, at as usize);
            w.log.write_at(at, &(crc ^ 0x100).to_le_bytes(), "P-PG-0").unwrap();
            w.log.sync("P-PG-0").unwrap(); // ORDER(P-PG-0): test: the damaged log is what the next open reads
            drop(w);
            // The commits that end at or before the bad frame, and what they leave.
            let (mut kept, mut end, mut want) = (0, 0u64, [0u8; 5]);
            for c in commits {
                if end + c.len() as u64 > bad {
                    break;
                }
                end += c.len() as u64;
                kept += 1;
                for &(p, v) in c {
                    want[p as usize] = v;
                }
            }
            let mut w = open(&path, false, 0);
            assert_eq!(w.frames().unwrap(), 0, "bad frame {bad}: {kept} commits, restarted");
            for p in 0..4 {
                assert_eq!(read(&w, p), want[p as usize], "bad frame {bad}: page {p}");
            }
            commit(&mut w, &[(3, 5), (4, 5)]);
            drop(w);
            let w = open(&path, false, 0);
            assert_eq!(w.frames().unwrap(), 2, "bad frame {bad}: the new commit starts the log");
            want[3] = 5;
            want[4] = 5;
            for p in 0..5 {
                assert_eq!(read(&w, p), want[p as usize], "bad frame {bad}: page {p} after");
            }
        }
    }

    /// Regression ([R2] item 8): recovery stopped at a damaged frame but left the frames
    /// after it with the log's salt. Once the next commit rewrote the damaged frame
    /// identically (the application redid the transaction recovery had dropped), the chain
    /// ran on into those frames, and the next open replayed a transaction that the database
    /// recovered before had not held: commit C (page 1 = 3) came back. Before the fix the
    /// last open read page 1 as 3 and counted 4 frames; now recovery restarts the log when it
    /// sees a frame of its salt past the committed end (W5), so C stays gone.
    #[test]
    fn a_dropped_commit_does_not_return_after_an_identical_redo() {
        let dir = TestDir::new("paged-wal-redo");
        let path = dir.join("db");
        let mut w = open(&path, true, 0);
        commit(&mut w, &[(0, 1), (1, 1)]); // A: frames 0, 1
        commit(&mut w, &[(0, 2)]); // B: frame 2
        commit(&mut w, &[(1, 3)]); // C: frame 3
        // Media damage in B's image: recovery keeps A only.
        let at = FRAMES + 2 * w.stride() + FRAME_HEAD as u64 + 7;
        w.log.write_at(at, &[0xEE], "P-PG-0").unwrap();
        w.log.sync("P-PG-0").unwrap(); // ORDER(P-PG-0): test: the damaged log is what the next open reads
        drop(w);
        let mut w = open(&path, false, 0);
        assert_eq!((read(&w, 0), read(&w, 1)), (1, 1), "A only");
        // The application redoes B: the same page image, so the same frame as before.
        commit(&mut w, &[(0, 2)]);
        drop(w);
        let w = open(&path, false, 0);
        assert_eq!((read(&w, 0), read(&w, 1)), (2, 1), "A and the redone B, not C");
    }

    #[test]
    fn the_log_checkpoints_itself_and_a_damaged_header_is_a_typed_error() {
        let dir = TestDir::new("paged-wal-ckpt");
        let path = dir.join("db");
        let mut w = open(&path, true, 4);
        for round in 1..=5u8 {
            commit(&mut w, &[(0, round), (1, round)]);
        }
        // Checkpoints after 4 frames: 5 commits of 2 frames leave 2 frames in the log.
        assert_eq!(w.frames().unwrap(), 2);
        assert_eq!((read(&w, 0), read(&w, 1)), (5, 5));
        drop(w);
        let w = open(&path, false, 4);
        assert_eq!(w.frames().unwrap(), 2);
        assert_eq!((read(&w, 0), read(&w, 1)), (5, 5));
        w.log.write_at(13, &[0xFF], "P-PG-0").unwrap();
        drop(w);
        let err = try_open(&path, false, 4).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }
}
