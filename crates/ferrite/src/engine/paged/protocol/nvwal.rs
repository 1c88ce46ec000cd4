//! NVWAL (spec `fast-fash-nvwal.md` §3, §4; seed `003_*`, Kim et al., ASPLOS 2016): a
//! write-ahead log in PM whose frames hold only the changed byte range of a page
//! (differential logging, §4.2), packed into the blocks of a user-level heap (§4.1, Fig. 3),
//! committed with transaction-aware lazy synchronization (Algorithm 1, §4.3): every frame is
//! copied without a flush, all are flushed under one fence, then the commit mark is stored,
//! flushed and fenced. Pages in the store change only at a checkpoint (§4.5).
//!
//! The log is always PM file `LOG` of a [`PmFiles`]; the pages are in either store. On the
//! file store (the paper's setting, §4.5): the database file is a block file and the log a
//! pool set beside it (`store::file::PM_LOG_DIR`), so a commit writes PM only and a
//! checkpoint writes the pages into the file and `fdatasync`s it before the generation
//! changes (P-PG-44). On the PM store the pages are PM file `PAGES` of the same [`PmFiles`].
//! A log in a block file is refused (`InvalidArgument`).
//!
//! ```text
//!  PM file LOG:  0: header (one line)   4096: block 0 | block 1 | ...   (blocks of BS bytes)
//!   header: magic u64 "FERRNVW1" | version u32 | page size u32 | block size u32 | head u32 (0)
//!           | gen u32 | crc32c u32 (over bytes 8..28; gen and crc share one aligned word)
//!   block:  state u64 (free 0 | pending "NVBLKPND" | in use "NVBLKUSE") | next u64 (0: none,
//!           else block + 1) | 48 zero bytes | frames from byte 64, each 8-aligned
//!   frame:  commit u64 | ckpt (gen) u32 | page u32 | offset u32 | size u32 | checksum u64 |
//!           size payload bytes (page[offset..offset+size]) | zero padding to 8
//!           (size 0, page u32::MAX: a skip frame, "the rest of this block is unused")
//!   checksum of a frame = chain(checksum of the previous frame, bytes 8..24, payload); the
//!           first frame of a generation chains from seed(gen). chain = CRC-32 (IEEE) in the
//!           low half, CRC32C in the high half, each continued from the previous half.
//!   commit word = 0, or the commit mark: bit 0 set, bits 1..64 = the frame's checksum << 1
//!   BS = max(8 KiB, next power of two >= page size + 32 + 64): a full-page frame fits
//! ```
//!
//! Decisions the paper leaves open (§4.10, "must decide"), as made here:
//! - The checksum is cumulative, so a frame is valid only where the writer put it, after the
//!   frames that preceded it: a frame left by an aborted commit or an older generation never
//!   validates. Not CRC32C alone: a page that embeds the CRC32C of some of its bytes (the
//!   meta page) cancels out of a CRC32C over it (see `wal.rs`'s `frame_crc`); the IEEE half
//!   does not.
//! - The commit mark carries the frame's checksum, not a bare bit, so payload bytes of a
//!   later commit written over a stale frame's commit word cannot pose as its commit mark.
//! - The end of the log is found by the chain: the first frame that does not validate ends
//!   it; a block's unused tail is either shorter than a frame head, or starts with a skip
//!   frame, written (in the chain) when the next frame did not fit. Blocks are not zeroed.
//! - A page's diff is split into one frame per changed byte range, two ranges merged when
//!   fewer than `SPLIT_GAP` (64) equal bytes lie between them (a frame head costs 32): a
//!   slotted page's insert changes its header and offset array at the front and a record
//!   near the end, so one range would log the free space between (until 2026-11-29 it did:
//!   about 26 lines per single insert instead of 6). The base is the DRAM image of the
//!   page's last committed state; unchanged pages log nothing.
//!
//! # Invariants
//! - N1 (validity): a frame is valid iff the frames before it in the log are valid, its
//!   generation is the header's, its range lies in the page and the block, and its checksum
//!   matches the chain. The log's committed prefix ends after the last valid frame whose
//!   commit word is its commit mark.
//! - N2 (diffs): the first frame of a page in a generation is the whole page (offset 0, size
//!   = page size); each later one holds a range of bytes that differ from the page's image
//!   after the frames before it, and a commit's frames of a page cover every byte that
//!   differs. Applying a page's frames in log order gives its committed image.
//! - N3 (WAL index): in DRAM, for every page with a frame in the committed prefix, its
//!   committed image; `read_page` of any other page reads the store.
//! - N4 (heap): the block list starts at block 0 and follows `next` links through blocks in
//!   use; recovery cuts a link to a block that is not in use (or already in the list),
//!   truncates the list after the block holding the committed end, and frees every other
//!   block (pending ones, in-use ones no link reaches). Frames never span blocks.
//! - N5 (checkpoint): the store holds every page of the index before the header's generation
//!   changes, which invalidates every frame at once (N1).
//! - N6: a header without its magic is an unfinished creation (the magic is stored last) and
//!   is created anew; any other header whose checksum, version, page or block size fails is
//!   `Corrupted` / `Incompatible`, as is a block state word of no known value.
//! - N7 (no stale frame past the end): after recovery, no frame of the header's generation
//!   lies past the committed end. Such frames (the rest of a commit a crash interrupted, or
//!   commits behind a damaged or lost frame) would validate again once a later commit wrote
//!   the frames before them identically (the same page diffs over the same base: an
//!   application redoing what recovery dropped) and the chain ran on into them: the next
//!   open would replay commits the database it recovered did not hold. So recovery looks
//!   for a frame head of the generation (its generation field, at any 8-aligned offset) in
//!   the committed end's block past the end, in every block the list held after it, in
//!   every unlisted block not free and in the block a cut link pointed to; finding one, it
//!   checkpoints the committed prefix (P-PG-44) and starts a new generation (P-PG-45). Free
//!   blocks are not read (a heap is mostly free blocks): in lazy and eager modes a block is
//!   durably in use and linked before any commit mark in it is stored (P-PG-41, P-PG-43),
//!   so a free block holds no mark of this generation. In checksum mode, where the block's
//!   head line, its link and the mark share one fence, a crash can keep a mark in a block
//!   whose head line and link were both lost (a lost head line alone leaves the link, which
//!   recovery cuts, and that block is read); a later first commit repeating the lost
//!   commit's first frames exactly, into the same block (the lowest free one), could then
//!   revive its rest. That residue is left.
//!
//! # Ordering (rules in `docs/design/persistence.md`)
//! - P-PG-40 (creation): the header fields and block 0's head line (in use, no link) are
//!   durable before the magic, and the magic before the log is used.
//! - P-PG-41: a commit's frames are durable before its commit mark is stored. Lazy: stored
//!   without flushes, then all written back (contiguous frames' lines once), one fence
//!   (Algorithm 1 lines 22-28); eager: each frame flushed and fenced as it is stored;
//!   checksum: never flushed (relaxed durability; only links and new head lines are).
//!   The lazy fence is kept as Algorithm 1 has it, but it is not needed for crash
//!   consistency here: without it the frames and the mark become durable at the mark's fence,
//!   and an image with the mark but a missing frame fails the checksum chain (the mark is
//!   bound to the checksum that chains every frame), so the unacknowledged commit is dropped.
//!   The mutation check confirms it (`PAGED_BENIGN` in `crates/crashtest/src/db.rs`). The
//!   fence buys that recovery rejects a torn commit by construction rather than by a 64-bit
//!   checksum; dropping it would make a commit cost one fence.
//! - P-PG-42: the commit mark is durable before `commit` returns (lines 31-35). The commit
//!   point. (Checksum mode: it flushes the whole frame head, mark and checksum.)
//! - P-PG-43: a new block's link (in its predecessor's head line) and its own head line
//!   (pending, then in use with no link: stored, then written back with the block's first
//!   frame) are written back before the P-PG-41 fence, so both are durable before the commit
//!   mark. Not ordered between themselves (Algorithm 1 fences between the link and the in-use
//!   flag, lines 8-13, because Heapo trusts in-use blocks): N4's recovery frees an in-use
//!   block no link reaches and cuts a link to a block not in use, so either order repairs,
//!   and a fence of their own would order nothing recovery needs.
//! - P-PG-44 (checkpoint, and recovery's restart, N7): the checkpointed pages are durable in
//!   the store before the generation changes (N5).
//! - P-PG-45 (checkpoint, recovery's restart): the new generation is durable before any frame of it is stored.
//!   Frames are stored lazily and the cache may write them back at any time; a new frame
//!   over an old one under the old generation would break the old chain there, and recovery
//!   would replay an older committed prefix than the store holds (WAL's P-PG-22 hazard).
//!   `db-paged-nvwal`'s mutation run detects the fence's loss; `db-paged-nvwal-file`'s
//!   does not reach the image; the unit test `a_lost_generation_word_replays_an_older_prefix`
//!   builds it and shows the loss.
//! - Recovery persists nothing but N7's restart (P-PG-44, P-PG-45, as in a checkpoint): its
//!   repairs (cut links, freed blocks) are stores without flushes, redone by the next
//!   recovery if lost, and the next allocation overwrites the one link that can point past
//!   the end.
//!
//! So a commit that allocates no block issues exactly 2 fences (lazy), frames + 1 (eager),
//! 1 (checksum); a block allocation adds two line flushes and no fence.
//!
//! # Concurrency
//! One writer (the pager's protocol lock, taken exclusively) commits, checkpoints and
//! recovers (`&mut self`); `read_page` (`&self`, the lock shared) reads the DRAM index or the
//! store. Lazy synchronization relies on that single writer (§4.3).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use zerocopy::IntoBytes;

use super::{AfterCommit, Batch};
use crate::engine::paged::layout::{self, NvwalBlockHead, NvwalFrameHead, NvwalHead};
use crate::engine::paged::store::log::LogFile;
use crate::engine::paged::store::pmfile::{LOG, PmFiles};
use crate::engine::paged::store::{PageNo, PageStore};
use crate::error::{Error, Result};
use crate::options::NvwalSync;

/// "FERRNVW1".
const MAGIC: u64 = u64::from_le_bytes(*b"FERRNVW1");
/// Format version of the NVWAL log.
const VERSION: u32 = 1;
/// Where block 0 begins in file `LOG` (the header has the page before it).
const BLOCKS: u64 = 4096;
/// Bytes of a block's head line; frames start here.
const BLOCK_HEAD: u64 = size_of::<NvwalBlockHead>() as u64;
/// Bytes of a frame head.
const HDR: u64 = size_of::<NvwalFrameHead>() as u64;
/// Bytes of the header.
const HEAD: u64 = size_of::<NvwalHead>() as u64;
/// Offset of the header's generation word (gen | crc).
const GEN_WORD: u64 = 24;
/// A cache line (chunks of PM files start at page boundaries, so file offsets and PM lines
/// agree).
const LINE: u64 = 64;
/// Block states.
const FREE: u64 = 0;
const PENDING: u64 = u64::from_le_bytes(*b"NVBLKPND");
const IN_USE: u64 = u64::from_le_bytes(*b"NVBLKUSE");
/// The page number of a skip frame.
const SKIP: u32 = u32::MAX;

/// The block size for `page_size`-byte pages: a full-page frame fits in one block.
pub(crate) fn block_size(page_size: usize) -> u64 {
    (page_size as u64 + HDR + BLOCK_HEAD).next_power_of_two().max(8192)
}

fn pad8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Continues the checksum chain `prev` over a frame's head fields and payload.
fn chain(prev: u64, fields: &[u8], payload: &[u8]) -> u64 {
    let mut h = crc32fast::Hasher::new_with_initial(prev as u32);
    h.update(fields);
    h.update(payload);
    let lo = h.finalize();
    let hi = crc32c::crc32c_append(crc32c::crc32c_append((prev >> 32) as u32, fields), payload);
    u64::from(hi) << 32 | u64::from(lo)
}

/// The chain value a generation's first frame continues.
fn seed(generation: u32) -> u64 {
    chain(0, &generation.to_le_bytes(), &MAGIC.to_le_bytes())
}

/// The commit mark of a frame whose checksum is `chk`.
fn mark(chk: u64) -> u64 {
    chk << 1 | 1
}

/// The header's generation word (gen in the low half, the header's CRC32C in the high half).
fn gen_word(page_size: u32, block_size: u32, generation: u32) -> u64 {
    let h = header(page_size, block_size, generation);
    u64::from(h.generation.get()) | u64::from(h.crc.get()) << 32
}

fn header(page_size: u32, block_size: u32, generation: u32) -> NvwalHead {
    let mut h = NvwalHead {
        magic: MAGIC.into(),
        version: VERSION.into(),
        page_size: page_size.into(),
        block_size: block_size.into(),
        head: 0.into(),
        generation: generation.into(),
        ..NvwalHead::default()
    };
    h.crc = crc32c::crc32c(&h.as_bytes()[8..28]).into();
    h
}

fn fresh_gen() -> u32 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u32 & 0xFFFF_FF00).max(0x100)
}

/// `ranges` (ascending within a block) with adjacent or overlapping ones merged, widened to whole lines, so
/// that each line is written back once.
fn coalesce(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(at, len) in ranges {
        let (a, e) = (at / LINE * LINE, (at + len).div_ceil(LINE) * LINE);
        match out.last_mut() {
            Some((pa, pn)) if *pa <= a && a <= *pa + *pn => *pn = (*pn).max(e - *pa),
            _ => out.push((a, e - a)),
        }
    }
    out
}

/// The range `[lo, hi]` of bytes where `a` and `b` differ, if any.
pub(crate) fn diff_range(a: &[u8], b: &[u8]) -> Option<(usize, usize)> {
    let lo = a.iter().zip(b).position(|(x, y)| x != y)?;
    let hi = a.iter().zip(b).rposition(|(x, y)| x != y)?;
    Some((lo, hi))
}

/// Unchanged bytes worth a frame of their own: a run of at least this many splits a page's
/// diff into two frames (a frame head is 32 bytes plus up to 7 of padding, so a shorter run
/// is cheaper logged than skipped).
pub(crate) const SPLIT_GAP: usize = 64;

/// The byte ranges `[lo, hi]` (inclusive) in which `a` and `b` differ, ascending, two ranges
/// merged when fewer than [`SPLIT_GAP`] equal bytes lie between them. A slotted page's
/// insert changes its header and offset array at the front and a record near the end, with
/// free space between: two ranges, not one spanning the free space.
pub(crate) fn diff_ranges(a: &[u8], b: &[u8]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let Some((mut i, end)) = diff_range(a, b) else { return out };
    while i <= end {
        // `i` differs: extend while the equal run ahead is shorter than SPLIT_GAP.
        let lo = i;
        let mut hi = i;
        let mut j = i + 1;
        while j <= end {
            if a[j] != b[j] {
                hi = j;
            } else if j - hi >= SPLIT_GAP {
                break;
            }
            j += 1;
        }
        out.push((lo, hi));
        // The next differing byte after the run.
        i = match (j..=end).find(|&k| a[k] != b[k]) {
            Some(k) => k,
            None => break,
        };
    }
    out
}

/// The NVWAL over a PM page store and PM file `LOG`.
#[derive(Debug)]
pub(crate) struct Nvwal {
    store: PageStore,
    files: Arc<PmFiles>,
    /// Checkpoint when the log holds this many page frames after a commit (0: only at close).
    checkpoint_frames: u64,
    sync: NvwalSync,
    page_size: usize,
    block_size: u64,
    st: State,
}

#[derive(Debug, Default)]
struct State {
    generation: u32,
    /// The chain's value after the last committed frame.
    chk: u64,
    /// N4: the block list, block 0 first; the committed end lies in its last block.
    list: Vec<u32>,
    /// Where the next frame goes in the last block of `list`.
    off: u64,
    /// Blocks not in the list.
    free: BTreeSet<u32>,
    /// Blocks the log's capacity holds.
    blocks: u32,
    /// N3: page -> committed image.
    index: HashMap<PageNo, Vec<u8>>,
    /// Page frames in the committed prefix.
    frames: u64,
}

/// A frame to log: page, offset, the image.
type Logged<'a> = (PageNo, usize, usize, &'a [u8]);

impl Nvwal {
    /// NVWAL for `store` with its log in `log`; checkpoints after `checkpoint_frames` page
    /// frames (0: only at [`Nvwal::checkpoint`]); commits as `sync` says. Call
    /// [`Nvwal::recover`] before any read. Errors: `InvalidArgument` for a log that is not in PM (the store may be either).
    pub(crate) fn new(
        store: PageStore,
        log: LogFile,
        checkpoint_frames: u64,
        sync: NvwalSync,
    ) -> Result<Nvwal> {
        let LogFile::Pm(files) = log else {
            return Err(Error::InvalidArgument(
                "NVWAL keeps its log in PM files (a pool set), not in a block file".into(),
            ));
        };
        let page_size = store.page_size();
        Ok(Nvwal {
            store,
            files,
            checkpoint_frames,
            sync,
            page_size,
            block_size: block_size(page_size),
            st: State::default(),
        })
    }

    /// The page store.
    pub(crate) fn store(&self) -> &PageStore {
        &self.store
    }

    /// Page frames in the committed prefix (for tests and reports).
    pub(crate) fn frames(&self) -> u64 {
        self.st.frames
    }

    /// Blocks in the block list (for tests).
    pub(crate) fn blocks_in_use(&self) -> usize {
        self.st.list.len()
    }

    fn block(&self, b: u32) -> u64 {
        BLOCKS + u64::from(b) * self.block_size
    }

    fn corrupt(what: String, at: u64) -> Error {
        Error::Corrupted { what, at: format!("NVWAL log (PM file LOG) at byte {at}") }
    }

    /// Copies the newest committed image of `pgno` into `out` (N3).
    pub(crate) fn read_page(&self, pgno: PageNo, out: &mut [u8]) -> Result<()> {
        match self.st.index.get(&pgno) {
            Some(img) => {
                if out.len() != img.len() {
                    return Err(Error::InvalidArgument(format!(
                        "a page buffer of {} bytes for {}-byte pages",
                        out.len(),
                        img.len()
                    )));
                }
                out.copy_from_slice(img);
                Ok(())
            }
            None => self.store.read_page(pgno, out),
        }
    }

    /// Logs `batch` as diff frames and commits them (P-PG-41, P-PG-42, P-PG-43: Algorithm 1);
    /// then checkpoints if the log holds `checkpoint_frames` page frames. On an error the
    /// caller poisons the handle.
    pub(crate) fn commit(&mut self, batch: &Batch<'_>) -> Result<AfterCommit> {
        let ps = self.page_size;
        // §4.2: a changed page is logged whole on its first logging in this generation, later
        // as one frame per changed byte range (ranges closer than SPLIT_GAP merged).
        let mut logged: Vec<Logged<'_>> = Vec::with_capacity(batch.pages.len());
        for &(pgno, img) in batch.pages {
            if img.len() != ps || pgno == SKIP {
                return Err(Error::InvalidArgument(format!(
                    "page {pgno} of {} bytes for {ps}-byte pages",
                    img.len()
                )));
            }
            match self.st.index.get(&pgno) {
                None => logged.push((pgno, 0, ps, img)),
                Some(base) => {
                    for (lo, hi) in diff_ranges(base, img) {
                        logged.push((pgno, lo, hi + 1 - lo, img));
                    }
                }
            }
        }
        if logged.is_empty() {
            return Ok(None);
        }
        let generation = self.st.generation;
        let mut chk = self.st.chk;
        let mut off = self.st.off;
        let eager = self.sync == NvwalSync::Eager;
        // Byte ranges to write back (lazy): frames, a new block's head line with its first
        // frame; and the links to new blocks.
        let mut stored: Vec<(u64, u64)> = Vec::with_capacity(logged.len() + 1);
        let mut links: Vec<u64> = Vec::new();
        let mut last = 0u64;
        let mut fresh = false;
        let mut buf = Vec::with_capacity(ps + 2 * HDR as usize);
        // Algorithm 1 lines 1-20: copy every frame (no flush in lazy and checksum modes).
        for &(pgno, lo, len, img) in &logged {
            let total = HDR + pad8(len as u64);
            if off + total > self.block_size {
                if self.block_size - off >= HDR {
                    let at = self.block(self.tail()) + off;
                    chk = self.store_frame(&mut buf, at, generation, SKIP, 0, &[], chk)?;
                    if eager {
                        self.files.flush_at(LOG, at, HDR, "P-PG-41")?; // ORDER(P-PG-41): eager: the skip frame written back before the next frame
                        self.files.sync("P-PG-41"); // ORDER(P-PG-41): eager: the skip frame durable before the next frame
                    }
                    stored.push((at, HDR));
                }
                let link = self.allocate()?;
                if eager {
                    self.files.flush_at(LOG, link, 8, "P-PG-43")?; // ORDER(P-PG-43): eager: the link to the new block, durable at the next frame's fence
                } else {
                    links.push(link);
                }
                (off, fresh) = (BLOCK_HEAD, true);
            }
            let at = self.block(self.tail()) + off;
            chk = self.store_frame(&mut buf, at, generation, pgno, lo, &img[lo..lo + len], chk)?;
            // A new block's head line (P-PG-43) is written back with its first frame.
            let range = if fresh { (at - BLOCK_HEAD, total + BLOCK_HEAD) } else { (at, total) };
            if fresh && self.sync == NvwalSync::Checksum {
                links.push(at - BLOCK_HEAD);
            }
            if eager {
                self.files.flush_at(LOG, range.0, range.1, "P-PG-41")?; // ORDER(P-PG-41): eager: this frame written back as soon as it is copied
                self.files.sync("P-PG-41"); // ORDER(P-PG-41): eager: this frame durable before the next one and the commit mark
            }
            stored.push(range);
            (last, off, fresh) = (at, off + total, false);
        }
        if !eager {
            // Lines 22-28 (lazy): one batch of write-backs, contiguous frames' lines once; a
            // link on a line of them is written back with them. (Checksum mode: the links and
            // new head lines only, so that the chain can reach later commits.)
            let lazy = self.sync == NvwalSync::Lazy;
            let lines = if lazy { coalesce(&stored) } else { Vec::new() };
            for &link in &links {
                if !lines.iter().any(|&(a, n)| a <= link && link < a + n) {
                    self.files.flush_at(LOG, link, 8, "P-PG-43")?; // ORDER(P-PG-43): the link to a new block, durable at the frames' fence
                }
            }
        }
        if self.sync == NvwalSync::Lazy {
            for &(at, len) in &coalesce(&stored) {
                self.files.flush_at(LOG, at, len, "P-PG-41")?; // ORDER(P-PG-41): every frame written back before the commit mark is stored
            }
            self.files.sync("P-PG-41"); // ORDER(P-PG-41): the frames (and new blocks' lines, P-PG-43) durable before the commit mark
        }
        // Checksum mode (§4.4): frames reach PM when the cache evicts them; the chain
        // verifies them at recovery.
        // Lines 29-35: the commit mark, one aligned word (M1).
        self.files.store_word(LOG, last, mark(chk))?;
        let span = if self.sync == NvwalSync::Checksum { HDR } else { 8 };
        self.files.flush_at(LOG, last, span, "P-PG-42")?; // ORDER(P-PG-42): the commit mark (checksum mode: with the chain's checksum) written back
        self.files.sync("P-PG-42"); // ORDER(P-PG-42): the commit mark durable before commit returns: the commit point
        for (i, &(pgno, _, _, img)) in logged.iter().enumerate() {
            // A page's frames are adjacent in `logged`: its image once.
            if i == 0 || logged[i - 1].0 != pgno {
                self.st.index.insert(pgno, img.to_vec());
            }
        }
        self.st.chk = chk;
        self.st.off = off;
        self.st.frames += logged.len() as u64;
        // Past the commit point: a failed checkpoint is not a failed commit (as in WAL).
        if self.checkpoint_frames > 0 && self.st.frames >= self.checkpoint_frames {
            return Ok(self.checkpoint().err());
        }
        Ok(None)
    }

    /// The last block of the list.
    fn tail(&self) -> u32 {
        self.st.list.last().copied().unwrap_or(0)
    }

    /// Stores one frame at `at` without a flush; returns its checksum.
    #[allow(clippy::too_many_arguments)]
    fn store_frame(
        &self,
        buf: &mut Vec<u8>,
        at: u64,
        generation: u32,
        pgno: PageNo,
        offset: usize,
        payload: &[u8],
        prev: u64,
    ) -> Result<u64> {
        let mut head = NvwalFrameHead {
            ckpt: generation.into(),
            pgno: pgno.into(),
            offset: (offset as u32).into(),
            size: (payload.len() as u32).into(),
            ..NvwalFrameHead::default()
        };
        let chk = chain(prev, &head.as_bytes()[8..24], payload);
        head.checksum = chk.into();
        buf.clear();
        buf.extend_from_slice(head.as_bytes());
        buf.extend_from_slice(payload);
        buf.resize(HDR as usize + pad8(payload.len() as u64) as usize, 0);
        self.files.store_at(LOG, at, buf)?;
        Ok(chk)
    }

    /// Allocates a block and appends it to the list (Algorithm 1 lines 6-13; P-PG-43): taken
    /// pending, linked from the list's last block, marked in use. Returns the link's offset.
    /// Nothing is flushed here: the caller writes the link back, and the new head line with
    /// the block's first frame, before the frames' fence.
    fn allocate(&mut self) -> Result<u64> {
        let prev = self.tail();
        let b = match self.st.free.pop_first() {
            Some(b) => b,
            None => {
                // Grow by whole segments: the blocks they add past `b` are free (zero).
                let b = self.st.blocks;
                self.files.ensure(LOG, self.block(b) + self.block_size)?;
                let now = u32::try_from((self.files.capacity(LOG)? - BLOCKS) / self.block_size)
                    .unwrap_or(u32::MAX);
                self.st.free.extend(b + 1..now);
                self.st.blocks = now.max(b + 1);
                b
            }
        };
        let (at, link) = (self.block(b), self.block(prev) + 8);
        self.files.store_word(LOG, at, PENDING)?;
        self.files.store_word(LOG, at + 8, 0)?;
        self.files.store_word(LOG, link, u64::from(b) + 1)?;
        self.files.store_word(LOG, at, IN_USE)?;
        self.st.list.push(b);
        Ok(link)
    }

    /// Copies every logged page's committed image into the store and syncs it (P-PG-44),
    /// then starts a new generation (P-PG-45) and frees every block but block 0. Returns the
    /// pages copied.
    pub(crate) fn checkpoint(&mut self) -> Result<u64> {
        super::injected_checkpoint_failure()?;
        if self.st.index.is_empty() {
            return Ok(0);
        }
        self.restart()
    }

    /// The checkpoint's steps, also run by recovery when it saw a frame of the generation
    /// past the committed end (N7), then possibly with an empty index: the indexed pages into
    /// the store (P-PG-44), a new generation (P-PG-45), every block but block 0 freed.
    /// Returns the pages copied.
    fn restart(&mut self) -> Result<u64> {
        let mut pages: Vec<PageNo> = self.st.index.keys().copied().collect();
        pages.sort_unstable();
        if let Some(&last) = pages.last() {
            self.store.ensure(u64::from(last) + 1)?;
            for &pgno in &pages {
                let img = &self.st.index[&pgno];
                self.store.write_page(pgno, img, "P-PG-44")?; // ORDER(P-PG-44): a checkpointed page, durable at the store sync below
            }
            self.store.sync("P-PG-44")?; // ORDER(P-PG-44): the store complete before the generation changes
        }
        let generation = self.st.generation.wrapping_add(1).max(1);
        let word = gen_word(self.page_size as u32, self.block_size as u32, generation);
        self.files.store_word(LOG, GEN_WORD, word)?;
        self.files.flush_at(LOG, GEN_WORD, 8, "P-PG-45")?; // ORDER(P-PG-45): the new generation written back
        self.files.sync("P-PG-45"); // ORDER(P-PG-45): the new generation durable before a frame of it is stored
        // Free the blocks from the tail back (§4.5). Unflushed: if lost, recovery frees them
        // again (N4): no link of the new generation reaches them.
        for &b in self.st.list[1..].iter().rev() {
            self.files.store_word(LOG, self.block(b), FREE)?;
            self.st.free.insert(b);
        }
        self.st.list.truncate(1);
        self.st.off = BLOCK_HEAD;
        self.st.generation = generation;
        self.st.chk = seed(generation);
        self.st.index.clear();
        self.st.frames = 0;
        Ok(pages.len() as u64)
    }

    /// Creates the log (P-PG-40): the header and block 0 in use, then the magic.
    fn create(&self) -> Result<()> {
        let f = &self.files;
        f.ensure(LOG, BLOCKS + self.block_size)?;
        let mut h = header(self.page_size as u32, self.block_size as u32, fresh_gen());
        h.magic = 0.into();
        f.store_at(LOG, 0, h.as_bytes())?;
        f.store_word(LOG, BLOCKS + 8, 0)?;
        f.store_word(LOG, BLOCKS, IN_USE)?;
        f.flush_at(LOG, 0, HEAD, "P-PG-40")?; // ORDER(P-PG-40): the header fields before the magic
        f.flush_at(LOG, BLOCKS, 16, "P-PG-40")?; // ORDER(P-PG-40): block 0 in use before the magic
        f.sync("P-PG-40"); // ORDER(P-PG-40): header and block 0 durable before the magic is stored
        f.store_word(LOG, 0, MAGIC)?;
        f.flush_at(LOG, 0, 8, "P-PG-40")?; // ORDER(P-PG-40): the magic written back
        f.sync("P-PG-40"); // ORDER(P-PG-40): creation complete before the log is used
        Ok(())
    }

    /// Reads and checks the header (N6), creating the log if it has no magic.
    fn header(&self) -> Result<NvwalHead> {
        let mut h = NvwalHead::default();
        if self.files.capacity(LOG)? >= BLOCKS + self.block_size {
            self.files.read_at(LOG, 0, h.as_mut_bytes())?;
        }
        if h.magic.get() == 0 {
            // A new log, or a creation that did not finish (the magic is stored last).
            self.create()?;
            self.files.read_at(LOG, 0, h.as_mut_bytes())?;
        }
        if h.magic.get() != MAGIC || crc32c::crc32c(&h.as_bytes()[8..28]) != h.crc.get() {
            return Err(Self::corrupt("NVWAL header: bad magic or checksum".into(), 0));
        }
        let version = h.version.get();
        if version > VERSION {
            return Err(Error::Incompatible {
                what: format!("NVWAL version {version} (this build reads {VERSION})"),
                at: "NVWAL header".into(),
            });
        }
        if h.page_size.get() as usize != self.page_size
            || u64::from(h.block_size.get()) != self.block_size
            || h.head.get() != 0
        {
            return Err(Self::corrupt(
                format!(
                    "NVWAL header of {}-byte pages, {}-byte blocks, head {} in a store of \
                     {}-byte pages (blocks of {})",
                    h.page_size, h.block_size, h.head, self.page_size, self.block_size
                ),
                0,
            ));
        }
        Ok(h)
    }

    /// At open: checks the header (N6), repairs the heap (N4), scans the valid frames (N1)
    /// and rebuilds the index from them (N2, N3); if a frame of the generation lies past the
    /// committed end, checkpoints and starts a new generation (N7). Returns whether the log
    /// held committed frames. Persists nothing but a creation and N7's restart.
    pub(crate) fn recover(&mut self) -> Result<bool> {
        let h = self.header()?;
        let generation = h.generation.get();
        let bs = self.block_size;
        let blocks = u32::try_from((self.files.capacity(LOG)? - BLOCKS) / bs)
            .map_err(|_| Self::corrupt("more blocks than a u32 numbers".into(), 0))?;
        // The heap's states and links.
        let mut heads = Vec::with_capacity(blocks as usize);
        for b in 0..blocks {
            let mut line = [0u8; 16];
            self.files.read_at(LOG, self.block(b), &mut line)?;
            let head = layout::read::<NvwalBlockHead>(&[&line[..], &[0u8; 48]].concat())
                .unwrap_or_default();
            let state = head.state.get();
            if ![FREE, PENDING, IN_USE].contains(&state) {
                return Err(Self::corrupt(
                    format!("block {b}: unknown state word {state:#x}"),
                    self.block(b),
                ));
            }
            heads.push((state, head.next.get()));
        }
        if heads.first().map(|h| h.0) != Some(IN_USE) {
            return Err(Self::corrupt("block 0 (the head) is not in use".into(), BLOCKS));
        }
        // N4: the list, cut at a link to a block that is not in use or already listed.
        let mut list = vec![0u32];
        let mut listed = vec![false; blocks as usize];
        listed[0] = true;
        // The block a cut link pointed to (N7 scans it whatever its state).
        let mut cut = None;
        loop {
            let at = *list.last().unwrap_or(&0);
            let next = heads[at as usize].1;
            if next == 0 {
                break;
            }
            let to = next - 1;
            if to >= u64::from(blocks) || heads[to as usize].0 != IN_USE || listed[to as usize] {
                // Unflushed: the next allocation from this block overwrites the link, and a
                // recovery before it cuts it again.
                self.files.store_word(LOG, self.block(at) + 8, 0)?;
                cut = u32::try_from(to).ok().filter(|&b| b < blocks);
                break;
            }
            listed[to as usize] = true;
            list.push(to as u32);
        }
        // N1: scan the chain of frames.
        let ps = self.page_size;
        let (mut pos, mut off, mut chk) = (0usize, BLOCK_HEAD, seed(generation));
        let mut end = (0usize, BLOCK_HEAD, chk, 0u64);
        let (mut frames, mut index) = (0u64, HashMap::<PageNo, Vec<u8>>::new());
        let mut pending: Vec<(PageNo, usize, Vec<u8>)> = Vec::new();
        let mut hb = [0u8; HDR as usize];
        loop {
            if bs - off < HDR {
                if pos + 1 == list.len() {
                    break;
                }
                (pos, off) = (pos + 1, BLOCK_HEAD);
                continue;
            }
            let at = self.block(list[pos]) + off;
            self.files.read_at(LOG, at, &mut hb)?;
            let head = layout::read::<NvwalFrameHead>(&hb).unwrap_or_default();
            let (size, offset, pgno) =
                (head.size.get() as usize, head.offset.get() as usize, head.pgno.get());
            let total = HDR + pad8(size as u64);
            let fits = if size == 0 { pgno == SKIP && offset == 0 } else { offset + size <= ps };
            if head.ckpt.get() != generation || !fits || off + total > bs {
                break;
            }
            let mut payload = vec![0u8; size];
            self.files.read_at(LOG, at + HDR, &mut payload)?;
            let next = chain(chk, &hb[8..24], &payload);
            if next != head.checksum.get() {
                break;
            }
            chk = next;
            if size == 0 {
                // A skip frame: the frames go on in the next block.
                if pos + 1 == list.len() {
                    break;
                }
                (pos, off) = (pos + 1, BLOCK_HEAD);
                continue;
            }
            off += total;
            frames += 1;
            pending.push((pgno, offset, payload));
            if head.commit.get() == mark(chk) {
                for (pgno, offset, data) in pending.drain(..) {
                    if offset == 0 && data.len() == ps {
                        index.insert(pgno, data);
                    } else if let Some(img) = index.get_mut(&pgno) {
                        img[offset..offset + data.len()].copy_from_slice(&data);
                    } else {
                        return Err(Self::corrupt(
                            format!("a diff frame of page {pgno} without a whole-page frame"),
                            at,
                        ));
                    }
                }
                end = (pos, off, chk, frames);
            }
        }
        // N7: a frame of this generation past the committed end, in the end block's tail, a
        // block the list held after it, an unlisted block not free, or a cut link's block.
        let (pos, off, chk, frames) = end;
        let mut kept = vec![false; blocks as usize];
        for &b in &list[..=pos] {
            kept[b as usize] = true;
        }
        let mut scan = vec![(list[pos], off)];
        for b in 0..blocks {
            if !kept[b as usize] && (heads[b as usize].0 != FREE || cut == Some(b)) {
                scan.push((b, BLOCK_HEAD));
            }
        }
        let stale = self.frame_of_generation(generation, &scan)?;
        // N4: the list ends at the committed end's block; every other block is free.
        list.truncate(pos + 1);
        let mut free = BTreeSet::new();
        let keep: BTreeSet<u32> = list.iter().copied().collect();
        for b in 0..blocks {
            if keep.contains(&b) {
                continue;
            }
            if heads[b as usize].0 != FREE {
                // Unflushed: a lost store is redone by the next recovery.
                self.files.store_word(LOG, self.block(b), FREE)?;
            }
            free.insert(b);
        }
        tracing::info!(
            frames,
            pages = index.len(),
            blocks = list.len(),
            stale = stale.is_some(),
            "paged: NVWAL recovered"
        );
        self.st = State { generation, chk, list, off, free, blocks, index, frames };
        if let Some(at) = stale {
            // N7: the committed prefix into the store, then a new generation.
            let pages = self.restart()?;
            tracing::info!(at, pages, "paged: NVWAL restarted at recovery (frames past its end)");
        }
        Ok(frames > 0)
    }

    /// The log offset of the first 8-aligned position, in the given `(block, from)` ranges
    /// (each to the block's end), that could head a frame of `generation`: its generation
    /// field holds it (N7). Payload bytes can match too; a false match costs only a restart.
    fn frame_of_generation(&self, generation: u32, ranges: &[(u32, u64)]) -> Result<Option<u64>> {
        let mut buf = Vec::new();
        for &(b, from) in ranges {
            if from + HDR > self.block_size {
                continue;
            }
            buf.resize((self.block_size - from) as usize, 0);
            self.files.read_at(LOG, self.block(b) + from, &mut buf)?;
            let hit = (0..=buf.len() - HDR as usize).step_by(8).find(|&o| {
                u32::from_le_bytes([buf[o + 8], buf[o + 9], buf[o + 10], buf[o + 11]]) == generation
            });
            if let Some(o) = hit {
                return Ok(Some(self.block(b) + from + o as u64));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use ferrite_pmem::internals::testing::{TestDir, test_seed};

    use super::*;

    const PS: usize = 512;

    fn open(path: &std::path::Path, create: bool, every: u64, sync: NvwalSync) -> Nvwal {
        try_open(path, create, every, sync).unwrap()
    }

    fn try_open(
        path: &std::path::Path,
        create: bool,
        every: u64,
        sync: NvwalSync,
    ) -> Result<Nvwal> {
        let (files, store) = crate::engine::paged::store::test_store(path, create, PS);
        let mut w = Nvwal::new(store, LogFile::Pm(files), every, sync)?;
        w.recover()?;
        Ok(w)
    }

    fn page(w: &Nvwal, pgno: u32) -> Vec<u8> {
        let mut out = vec![0u8; PS];
        w.read_page(pgno, &mut out).unwrap();
        out
    }

    fn read(w: &Nvwal, pgno: u32) -> u8 {
        let out = page(w, pgno);
        assert!(out.iter().all(|&b| b == out[0]), "page {pgno} is a mix");
        out[0]
    }

    fn commit_images(w: &mut Nvwal, images: &[(u32, Vec<u8>)]) {
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

    fn commit(w: &mut Nvwal, pages: &[(u32, u8)]) {
        let images: Vec<(u32, Vec<u8>)> = pages.iter().map(|&(p, f)| (p, vec![f; PS])).collect();
        commit_images(w, &images);
    }

    /// The log offsets of the committed frames' heads, in log order (skips excluded).
    fn frame_heads(w: &Nvwal) -> Vec<u64> {
        let mut out = Vec::new();
        let (mut pos, mut off) = (0usize, BLOCK_HEAD);
        let mut n = 0;
        while n < w.st.frames {
            if w.block_size - off < HDR {
                (pos, off) = (pos + 1, BLOCK_HEAD);
                continue;
            }
            let at = w.block(w.st.list[pos]) + off;
            let mut hb = [0u8; HDR as usize];
            w.files.read_at(LOG, at, &mut hb).unwrap();
            let h = layout::read::<NvwalFrameHead>(&hb).unwrap();
            if h.size.get() == 0 {
                (pos, off) = (pos + 1, BLOCK_HEAD);
                continue;
            }
            out.push(at);
            off += HDR + pad8(u64::from(h.size.get()));
            n += 1;
        }
        out
    }

    fn poke(w: &Nvwal, at: u64, data: &[u8]) {
        w.files.write_at(LOG, at, data, "P-PG-0").unwrap();
        w.files.sync("P-PG-0"); // ORDER(P-PG-0): test: the damaged log is what the next open reads
    }

    #[test]
    fn block_size_holds_a_full_page_frame() {
        assert_eq!(block_size(512), 8192);
        assert_eq!(block_size(4096), 8192);
        assert_eq!(block_size(8192), 16384);
        assert_eq!(block_size(65536), 131072);
        for ps in [512, 4096, 8192, 65536] {
            assert!(block_size(ps) >= ps as u64 + HDR + BLOCK_HEAD);
        }
    }

    #[test]
    fn diff_ranges() {
        let a = vec![0u8; 16];
        let mut b = a.clone();
        assert_eq!(diff_range(&a, &b), None);
        b[0] = 1;
        assert_eq!(diff_range(&a, &b), Some((0, 0)));
        b[15] = 1;
        assert_eq!(diff_range(&a, &b), Some((0, 15)));
        b[0] = 0;
        b[7] = 3;
        assert_eq!(diff_range(&a, &b), Some((7, 15)));
    }

    #[test]
    fn diff_ranges_split_at_long_equal_runs() {
        let a = vec![0u8; 512];
        let mut b = a.clone();
        assert!(super::diff_ranges(&a, &b).is_empty());
        b[3] = 1;
        b[9] = 1;
        assert_eq!(super::diff_ranges(&a, &b), [(3, 9)]);
        // A run of SPLIT_GAP equal bytes splits; one byte fewer does not.
        b[9 + SPLIT_GAP + 1] = 1;
        assert_eq!(super::diff_ranges(&a, &b), [(3, 9), (9 + SPLIT_GAP + 1, 9 + SPLIT_GAP + 1)]);
        let mut c = a.clone();
        c[3] = 1;
        c[3 + SPLIT_GAP] = 1;
        assert_eq!(super::diff_ranges(&a, &c), [(3, 3 + SPLIT_GAP)]);
        b[511] = 2;
        b[400] = 2;
        assert_eq!(super::diff_ranges(&a, &b).len(), 4);
        // Random edits: applying the ranges of b over a gives b, and every range starts and
        // ends at a differing byte.
        let seed = test_seed();
        let mut rng = ferrite_pmem::SplitMix64::new(seed);
        for _ in 0..200 {
            let mut b = a.clone();
            for _ in 0..rng.next_u64() % 20 {
                let at = (rng.next_u64() % 512) as usize;
                b[at] = rng.next_u64() as u8 | 1;
            }
            let mut c = a.clone();
            for (lo, hi) in super::diff_ranges(&a, &b) {
                assert!(a[lo] != b[lo] && a[hi] != b[hi], "seed {seed:#x}");
                c[lo..=hi].copy_from_slice(&b[lo..=hi]);
            }
            assert_eq!(c, b, "seed {seed:#x}");
        }
    }

    #[test]
    fn commits_are_read_from_the_log_and_survive_reopen() {
        let dir = TestDir::new("paged-nvwal");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        commit(&mut w, &[(0, 1), (1, 1)]);
        commit(&mut w, &[(1, 2), (2, 2)]);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        assert_eq!(w.frames(), 4);
        drop(w);
        let mut w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        assert_eq!(w.frames(), 4);
        assert_eq!(w.checkpoint().unwrap(), 3);
        assert_eq!(w.frames(), 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        commit(&mut w, &[(2, 3)]);
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 3));
        assert_eq!(w.frames(), 1);
    }

    /// NVWAL on the file store at `dir` (page file `pages`, its log in the pool set `log.pm`;
    /// created or opened), recovered.
    fn open_on_file(dir: &std::path::Path, create: bool, every: u64) -> Nvwal {
        use crate::engine::paged::pages::PageSize;
        use crate::engine::paged::store::file::FileStore;
        use ferrite_pmem::{BlockFile, PoolSet};
        let opts = ferrite_pmem::Options::new().segment_size(256 << 10);
        let (pages, set) = if create {
            let set = PoolSet::create(dir.join("log.pm"), &opts).unwrap();
            (BlockFile::create(dir.join("pages")).unwrap(), set)
        } else {
            (
                BlockFile::open(dir.join("pages")).unwrap(),
                PoolSet::open(dir.join("log.pm"), &opts).unwrap(),
            )
        };
        let files =
            Arc::new(if create { PmFiles::create(set) } else { PmFiles::open(set) }.unwrap());
        let store = PageStore::File(FileStore::new(pages, PageSize::new(PS).unwrap(), 0));
        let mut w = Nvwal::new(store, LogFile::Pm(files), every, NvwalSync::Lazy).unwrap();
        w.recover().unwrap();
        w
    }

    #[test]
    fn on_the_file_store_commits_stay_in_pm_until_a_checkpoint_syncs_the_page_file() {
        let dir = TestDir::new("paged-nvwal-file");
        let mut w = open_on_file(dir.path(), true, 0);
        let before = ferrite_pmem::Counters::snapshot();
        commit(&mut w, &[(0, 1), (1, 1)]);
        commit(&mut w, &[(1, 2), (2, 2)]);
        let d = ferrite_pmem::Counters::snapshot() - before;
        // Commits write the PM log only: no page-file write, no fdatasync.
        assert_eq!((d.syncs, d.file_bytes_written), (0, 0), "{d:?}");
        assert_eq!(w.frames(), 4);
        drop(w);
        // Recovery replays the PM log over the (empty) page file.
        let mut w = open_on_file(dir.path(), false, 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 2));
        let before = ferrite_pmem::Counters::snapshot();
        w.checkpoint().unwrap();
        let d = ferrite_pmem::Counters::snapshot() - before;
        // The checkpoint: three pages into the page file, one fdatasync.
        assert_eq!((d.syncs, d.file_bytes_written), (1, 3 * PS as u64), "{d:?}");
        assert_eq!(w.frames(), 0);
        commit(&mut w, &[(2, 3)]);
        drop(w);
        let w = open_on_file(dir.path(), false, 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 2, 3));
        assert_eq!(w.frames(), 1);
        // The page file holds the checkpointed images, not the later commit's.
        let f = ferrite_pmem::BlockFile::open(dir.join("pages"));
        assert!(matches!(f, Err(ferrite_pmem::Error::Locked { .. })), "the store holds it");
        drop(w);
        let f = ferrite_pmem::BlockFile::open(dir.join("pages")).unwrap();
        let mut b = vec![0u8; PS];
        assert_eq!(f.read_at(2 * PS as u64, &mut b).unwrap(), PS);
        assert!(b.iter().all(|&x| x == 2));
    }

    #[test]
    fn a_log_in_a_block_file_is_refused_with_a_typed_error() {
        let dir = TestDir::new("paged-nvwal-block-log");
        let pages = ferrite_pmem::BlockFile::create(dir.join("pages")).unwrap();
        let log = ferrite_pmem::BlockFile::create(dir.join("log")).unwrap();
        let size = crate::engine::paged::pages::PageSize::new(PS).unwrap();
        let store =
            PageStore::File(crate::engine::paged::store::file::FileStore::new(pages, size, 0));
        let err = Nvwal::new(store, LogFile::Block(log), 0, NvwalSync::Lazy).unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("PM")), "{err}");
    }

    /// A commit whose mark is cleared, or is not its frame's, is not committed. Its frames
    /// lie past the committed end, so recovery moves the commits before them into the store
    /// and starts a new generation (N7).
    #[test]
    fn a_commit_without_its_commit_mark_is_ignored() {
        let build = |name: &str| {
            let dir = TestDir::new(name);
            let path = dir.join("db");
            let mut w = open(&path, true, 0, NvwalSync::Lazy);
            commit(&mut w, &[(0, 1), (1, 1)]);
            commit(&mut w, &[(0, 2), (1, 2), (2, 2)]);
            let heads = frame_heads(&w);
            assert_eq!(heads.len(), 5);
            (dir, path, w, heads)
        };
        // The second commit's mark cleared: it is gone, the first stays, now in the store.
        let (_dir, path, w, heads) = build("paged-nvwal-torn");
        poke(&w, heads[4], &0u64.to_le_bytes());
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 1, 0));
        assert_eq!(w.frames(), 0, "a new generation: frames 2..5 were of the old one");
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 1, 0));
        // Then, on a copy, also the first commit's mark replaced by one that is not the
        // frame's (bit 0 set, other bits wrong): not a commit, and nothing was checkpointed:
        // the store has zeros.
        let (_dir, path, w, heads) = build("paged-nvwal-torn-first");
        poke(&w, heads[4], &0u64.to_le_bytes());
        poke(&w, heads[1], &1u64.to_le_bytes());
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (0, 0, 0));
    }

    /// A frame whose checksum is wrong ends the valid log there (N1): for each frame of four
    /// commits in turn, recovery keeps exactly the commits that end before it. The bad frame
    /// is of the generation, so recovery moves the kept commits into the store and starts a
    /// new generation (N7); a commit after that recovery starts the new generation's log, and
    /// the ignored frames stay ignored at the next open.
    #[test]
    fn a_frame_with_a_wrong_checksum_ends_the_log_there() {
        let dir = TestDir::new("paged-nvwal-crc");
        let path = dir.join("db");
        let commits: [&[(u32, u8)]; 4] =
            [&[(0, 1), (1, 1)], &[(0, 2), (2, 2)], &[(1, 3), (2, 3), (3, 3)], &[(0, 4)]];
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        for c in commits {
            commit(&mut w, c);
        }
        let heads = frame_heads(&w);
        assert_eq!(heads.len(), 8);
        let cap = w.files.capacity(LOG).unwrap();
        let mut log = vec![0u8; cap as usize];
        w.files.read_at(LOG, 0, &mut log).unwrap();
        drop(w);
        for (bad, &head) in heads.iter().enumerate() {
            let w = open(&path, false, 0, NvwalSync::Lazy);
            w.files.write_at(LOG, 0, &log, "P-PG-0").unwrap();
            let at = head + 24;
            let mut word = [0u8; 8];
            word.copy_from_slice(&log[at as usize..at as usize + 8]);
            word[0] ^= 0x10;
            poke(&w, at, &word);
            drop(w);
            let (mut kept, mut end, mut want) = (0, 0usize, [0u8; 5]);
            for c in commits {
                if end + c.len() > bad {
                    break;
                }
                end += c.len();
                kept += 1;
                for &(p, v) in c {
                    want[p as usize] = v;
                }
            }
            let mut w = open(&path, false, 0, NvwalSync::Lazy);
            assert_eq!(w.frames(), 0, "bad frame {bad}: {kept} commits, a new generation");
            for p in 0..4 {
                assert_eq!(read(&w, p), want[p as usize], "bad frame {bad}: page {p}");
            }
            commit(&mut w, &[(3, 5), (4, 5)]);
            drop(w);
            let w = open(&path, false, 0, NvwalSync::Lazy);
            assert_eq!(w.frames(), 2, "bad frame {bad}: the new commit starts the log");
            want[3] = 5;
            want[4] = 5;
            for p in 0..5 {
                assert_eq!(read(&w, p), want[p as usize], "bad frame {bad}: page {p} after");
            }
        }
    }

    /// Regression ([R2] item 8): recovery stopped at a damaged frame but left the frames
    /// after it in the generation. Once the next commit rewrote the damaged frame
    /// identically (the application redid the commit recovery had dropped: the same page
    /// image over the same base, so the same diff frame at the same place), the chain ran on
    /// into them, and the next open replayed commit C, which the database recovered before
    /// had not held. Before the fix the last open read page 1 as 3; now recovery starts a
    /// new generation when it sees a frame of the current one past the committed end (N7).
    #[test]
    fn a_dropped_commit_does_not_return_after_an_identical_redo() {
        let dir = TestDir::new("paged-nvwal-redo");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        commit(&mut w, &[(0, 1), (1, 1)]); // A
        commit(&mut w, &[(0, 2)]); // B: one frame, page 0's diff over A
        commit(&mut w, &[(1, 3)]); // C
        let heads = frame_heads(&w);
        assert_eq!(heads.len(), 4);
        // Media damage in B's payload: recovery keeps A only.
        let at = heads[2] + HDR + 7;
        let mut b = [0u8; 1];
        w.files.read_at(LOG, at, &mut b).unwrap();
        poke(&w, at, &[b[0] ^ 0x40]);
        drop(w);
        let mut w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1)), (1, 1), "A only");
        commit(&mut w, &[(0, 2)]); // B again
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1)), (2, 1), "A and the redone B, not C");
    }

    /// Regression ([R2] item 8), without damage: in checksum mode a commit's frames need not
    /// be written back before its mark, so a crash can keep commit T's mark and second frame
    /// but lose its first (T was never acknowledged: its fence did not return). A later
    /// commit that logs T's first frame alone (the same page, the same image) gets the same
    /// checksum, its mark lands there, and T's second frame chains from it: before the fix
    /// the next open applied the rest of T (page 1 = 2), a commit never acknowledged and
    /// absent from the database the application went on with.
    #[test]
    fn the_rest_of_a_lost_commit_does_not_return_after_a_commit_of_its_prefix() {
        let dir = TestDir::new("paged-nvwal-prefix");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Checksum);
        commit(&mut w, &[(0, 1), (1, 1)]); // A
        let cap = w.files.capacity(LOG).unwrap() as usize;
        let mut before = vec![0u8; cap];
        w.files.read_at(LOG, 0, &mut before).unwrap();
        commit(&mut w, &[(0, 2), (1, 2)]); // T: two diff frames
        let heads = frame_heads(&w);
        assert_eq!(heads.len(), 4);
        // The crash image: T's first frame as before T (its lines not written back).
        let (lo, hi) = (heads[2] as usize, heads[3] as usize);
        let mut image = vec![0u8; cap];
        w.files.read_at(LOG, 0, &mut image).unwrap();
        image[lo..hi].copy_from_slice(&before[lo..hi]);
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Checksum);
        poke(&w, 0, &image);
        drop(w);
        let mut w = open(&path, false, 0, NvwalSync::Checksum);
        assert_eq!((read(&w, 0), read(&w, 1)), (1, 1), "A only");
        commit(&mut w, &[(0, 2)]); // T's first page alone
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Checksum);
        assert_eq!((read(&w, 0), read(&w, 1)), (2, 1), "page 1 as A left it");
    }

    /// Many commits of full pages fill several blocks; the heap is repaired at open: a
    /// pending block and an unreachable in-use block are freed, a link to a free block is
    /// cut (the commits behind it lost, the prefix kept and, as frames of the generation lay
    /// behind the cut, checkpointed), and an unknown state word is a typed error.
    #[test]
    fn the_heap_spans_blocks_and_is_repaired_at_open() {
        let dir = TestDir::new("paged-nvwal-heap");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        // 40 new pages, one per commit: 40 full frames of 544 bytes, 14 per 8 KiB block.
        for p in 0..40u32 {
            commit(&mut w, &[(p, p as u8 + 1)]);
        }
        assert_eq!(w.blocks_in_use(), 3);
        let list = w.st.list.clone();
        assert_eq!(list, [0, 1, 2]);
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 40);
        for p in 0..40u32 {
            assert_eq!(read(&w, p), p as u8 + 1);
        }
        // Block 3 pending, block 4 in use but unlinked: both freed.
        w.files.ensure(LOG, w.block(5)).unwrap();
        w.files.store_word(LOG, w.block(3), PENDING).unwrap();
        w.files.store_word(LOG, w.block(4), IN_USE).unwrap();
        drop(w);
        let mut w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 40);
        assert!(w.st.free.contains(&3) && w.st.free.contains(&4));
        assert_eq!(w.files.load_word(LOG, w.block(3)).unwrap(), FREE);
        assert_eq!(w.files.load_word(LOG, w.block(4)).unwrap(), FREE);
        commit(&mut w, &[(0, 9)]);
        // Block 2 (the third) marked free: the link to it is cut, the 13 frames in it lost.
        w.files.store_word(LOG, w.block(2), FREE).unwrap();
        drop(w);
        // Those frames are of the generation: recovery moves the 28 kept ones into the store
        // and starts a new one (N7).
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 0);
        assert_eq!(w.blocks_in_use(), 1);
        assert_eq!(read(&w, 27), 28);
        assert_eq!(read(&w, 28), 0);
        assert_eq!(read(&w, 0), 1);
        w.files.store_word(LOG, w.block(1), 0x1234).unwrap();
        drop(w);
        let err = try_open(&path, false, 0, NvwalSync::Lazy).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }

    /// The heap grows by whole segments when every block is in the list; the blocks a new
    /// segment adds are free at once, and the log survives reopen.
    #[test]
    fn the_heap_grows_past_its_first_segment() {
        let dir = TestDir::new("paged-nvwal-grow");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        let first = w.st.blocks;
        for p in 0..(first * 14 + 20) {
            commit(&mut w, &[(p, p as u8 | 1)]);
        }
        assert!(w.st.blocks > first + 1, "grown: {} blocks", w.st.blocks);
        assert!(!w.st.free.is_empty(), "the new segment's other blocks are free");
        let frames = w.frames();
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), frames);
        for p in [0, first * 7, first * 14 + 19] {
            assert_eq!(read(&w, p), p as u8 | 1, "page {p}");
        }
    }

    /// A skip frame at a block's unused tail hides a stale frame there: a frame left at the
    /// tail, chained from the committed end, must not be taken for the continuation when a
    /// later commit moves on to the next block. (Such a frame is left by a commit that failed
    /// after storing it; the handle is then poisoned, and the next open, seeing it past the
    /// committed end, starts a new generation (N7), as the second part shows. The skip frame
    /// guards the chain within a generation.)
    #[test]
    fn a_stale_frame_at_a_block_tail_is_skipped() {
        let dir = TestDir::new("paged-nvwal-skip");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        for p in 0..14u32 {
            commit(&mut w, &[(p, 1)]);
        }
        // 14 full frames of 544 bytes fill block 0 to 7680: a 15th does not fit.
        let tail = w.st.off;
        assert_eq!(tail, 7680);
        assert!(w.block_size - tail >= HDR);
        // A stale small frame at the tail: page 0's diff, chained from the end.
        let stale = |w: &Nvwal| {
            let mut img = vec![1u8; PS];
            img[3] = 7;
            let mut buf = Vec::new();
            let at = w.block(0) + tail;
            w.store_frame(&mut buf, at, w.st.generation, 0, 3, &img[3..4], w.st.chk).unwrap();
            poke(w, at, &buf);
        };
        stale(&w);
        // A full frame does not fit at the tail: a skip frame over the stale one, then block 1.
        commit(&mut w, &[(20, 2)]);
        assert_eq!(w.blocks_in_use(), 2);
        drop(w);
        let mut w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 15);
        assert_eq!(read(&w, 20), 2);
        assert_eq!(read(&w, 0), 1);
        // The stale frame found by an open instead: a new generation, nothing lost.
        w.checkpoint().unwrap();
        for p in 0..14u32 {
            commit(&mut w, &[(p, 3)]);
        }
        assert_eq!(w.st.off, tail);
        stale(&w);
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 0);
        assert_eq!((read(&w, 0), read(&w, 13), read(&w, 20)), (3, 3, 2));
    }

    /// Random page edits over many commits (seeded: `FERRITE_TEST_SEED` replays): each
    /// commit changes some pages (some at byte 0, some at the last byte, some both, some not
    /// at all); after every few commits a reopen must reconstruct exactly the DRAM images.
    #[test]
    fn diff_frames_reconstruct_random_edits() {
        let seed = test_seed();
        let mut rng = seed | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let dir = TestDir::new("paged-nvwal-diff");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        let mut model: HashMap<u32, Vec<u8>> = HashMap::new();
        for round in 0..200 {
            let mut images = Vec::new();
            let n = 1 + next() % 4;
            let mut pages = BTreeSet::new();
            for _ in 0..n {
                pages.insert((next() % 8) as u32);
            }
            for p in pages {
                let mut img = model.get(&p).cloned().unwrap_or_else(|| vec![0u8; PS]);
                match next() % 5 {
                    0 => img[0] = img[0].wrapping_add(1),
                    1 => img[PS - 1] = img[PS - 1].wrapping_add(1),
                    2 => {
                        img[0] ^= 0x80;
                        img[PS - 1] ^= 0x80;
                    }
                    3 => {}
                    _ => {
                        let lo = (next() % PS as u64) as usize;
                        let len = 1 + (next() % (PS - lo) as u64) as usize;
                        for b in &mut img[lo..lo + len] {
                            *b = next() as u8;
                        }
                    }
                }
                model.insert(p, img.clone());
                images.push((p, img));
            }
            commit_images(&mut w, &images);
            if round % 17 == 0 {
                drop(w);
                w = open(&path, false, 0, NvwalSync::Lazy);
            }
            for (p, img) in &model {
                assert_eq!(&page(&w, *p), img, "seed {seed:#x} round {round} page {p}");
            }
        }
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        for (p, img) in &model {
            assert_eq!(&page(&w, *p), img, "seed {seed:#x} at the end, page {p}");
        }
        // Unchanged pages logged nothing: a commit of the same images adds no frame.
        let mut w = w;
        let frames = w.frames();
        let images: Vec<(u32, Vec<u8>)> = model.iter().map(|(p, i)| (*p, i.clone())).collect();
        commit_images(&mut w, &images);
        assert_eq!(w.frames(), frames);
    }

    #[test]
    fn checkpoints_start_a_new_generation_and_a_damaged_header_is_a_typed_error() {
        let dir = TestDir::new("paged-nvwal-ckpt");
        let path = dir.join("db");
        let mut w = open(&path, true, 4, NvwalSync::Lazy);
        for p in 0..40u32 {
            commit(&mut w, &[(p % 20, p as u8 + 1)]);
        }
        let generation = w.st.generation;
        // Checkpoints after 4 frames: 40 single-frame commits leave none in the log.
        assert_eq!(w.frames(), 0);
        assert_eq!(w.blocks_in_use(), 1);
        commit(&mut w, &[(0, 99), (1, 99)]);
        drop(w);
        let mut w = open(&path, false, 4, NvwalSync::Lazy);
        assert_eq!(w.st.generation, generation);
        assert_eq!(w.frames(), 2);
        for p in 0..20u32 {
            let want = if p < 2 { 99 } else { p as u8 + 21 };
            assert_eq!(read(&w, p), want, "page {p}");
        }
        w.checkpoint().unwrap();
        drop(w);
        let w = open(&path, false, 4, NvwalSync::Lazy);
        assert_eq!(w.frames(), 0, "stale frames of the old generation are not applied");
        assert_eq!(read(&w, 0), 99);
        poke(&w, 9, &[0xFF]);
        drop(w);
        let err = try_open(&path, false, 4, NvwalSync::Lazy).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }

    /// Why P-PG-45 persists the new generation before any frame of it is stored: an image
    /// that keeps the old generation in the header but one line of a new frame written over
    /// an old frame past the old generation's first commit replays the old log up to there,
    /// an older state than the checkpoint left in the store: commit B is lost.
    #[test]
    fn a_lost_generation_word_replays_an_older_prefix() {
        let dir = TestDir::new("paged-nvwal-gen");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Lazy);
        commit(&mut w, &[(0, 1), (1, 1)]); // A: frames at block 0 + 64 and + 608
        commit(&mut w, &[(0, 2)]); // B: a whole-page diff at 1152
        let cap = w.files.capacity(LOG).unwrap() as usize;
        let mut old = vec![0u8; cap];
        w.files.read_at(LOG, 0, &mut old).unwrap();
        w.checkpoint().unwrap(); // the store holds B: page 0 = 2
        commit(&mut w, &[(5, 5), (6, 6), (7, 7)]); // C: frames at 64, 608, 1152
        let mut new = vec![0u8; cap];
        w.files.read_at(LOG, 0, &mut new).unwrap();
        drop(w);
        // The crash image: the old log (old generation word) but one line of C's third frame.
        let line = BLOCKS as usize + 1152 + 64;
        let mut image = old.clone();
        image[line..line + 64].copy_from_slice(&new[line..line + 64]);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        poke(&w, 0, &image);
        drop(w);
        // Recovery keeps the old generation's commit A; B's frame, past A's end, makes it
        // checkpoint A and start a new generation (N7), which writes A's older page 0 over
        // the 2 the store held: B is lost.
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 0, "A replayed, checkpointed, a new generation");
        assert_eq!(read(&w, 0), 1, "page 0 as of A, though the store held B's 2: B is lost");
        let mut stored = vec![0u8; PS];
        w.store.read_page(0, &mut stored).unwrap();
        assert_eq!(stored[0], 1);
    }

    #[test]
    fn the_eager_variant_commits_the_same_log() {
        let dir = TestDir::new("paged-nvwal-eager");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Eager);
        for p in 0..30u32 {
            commit(&mut w, &[(p % 7, p as u8), (100, p as u8)]);
        }
        drop(w);
        // Opened with the lazy variant: the same format.
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!(w.frames(), 60);
        assert_eq!(read(&w, 100), 29);
        assert_eq!(read(&w, 1), 29);
    }

    /// The checksum variant: frames are never flushed; a commit whose frames were not
    /// written back (here: a frame's line lost, simulated by damaging it) is aborted at
    /// recovery, and so is every later commit (prefix semantics: no later diff applies on a
    /// missing base).
    #[test]
    fn the_checksum_variant_loses_commits_after_a_lost_frame_as_a_prefix() {
        let dir = TestDir::new("paged-nvwal-cs");
        let path = dir.join("db");
        let mut w = open(&path, true, 0, NvwalSync::Checksum);
        commit(&mut w, &[(0, 1), (1, 1)]);
        commit(&mut w, &[(0, 2), (2, 2)]);
        commit(&mut w, &[(1, 3)]);
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Checksum);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (2, 3, 2));
        // The second commit's first frame (page 0's diff) lost its payload line: the second
        // and the third commit are gone, though the third's frames are intact.
        let heads = frame_heads(&w);
        assert_eq!(heads.len(), 5);
        let mut b = [0u8; 1];
        w.files.read_at(LOG, heads[2] + HDR, &mut b).unwrap();
        poke(&w, heads[2] + HDR, &[b[0] ^ 1]);
        drop(w);
        // The lost commits' frames lie past the kept end: the first commit is checkpointed
        // and a new generation begins (N7).
        let mut w = open(&path, false, 0, NvwalSync::Checksum);
        assert_eq!(w.frames(), 0);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 1, 0));
        commit(&mut w, &[(2, 4)]);
        drop(w);
        let w = open(&path, false, 0, NvwalSync::Lazy);
        assert_eq!((read(&w, 0), read(&w, 1), read(&w, 2)), (1, 1, 4));
    }
}
