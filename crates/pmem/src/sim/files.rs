//! The per-file state of a simulated domain: working image, durable pages, dirty-line bitmap,
//! and the per-thread pending lines.
//!
//! # Invariants
//! - A file's `working` region is valid while the file lives: it points into its pool's
//!   memory while that pool is open (the pool detaches the file before releasing it, D4), or
//!   into the file's own `owned` buffer, which is dropped with the file.
//! - `durable` always covers `len` bytes (whole pages); `dirty` has one bit per line.
//!
//! # Concurrency
//! Guarded by the domain's gate (`Files`) and pending lock; dirty bits are atomics so that
//! stores holding the gate shared can set them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::blocks::SimBlock;
use super::buffer::SimBuffer;
use crate::image::{PAGE, Page};
use crate::region::{CACHE_LINE, Region};

const LINES_PER_PAGE: u64 = PAGE / CACHE_LINE;

/// One simulated file.
pub(crate) struct SimFile {
    pub name: String,
    pub len: u64,
    /// Working image (where the engine's loads and stores go), when mapped.
    pub working: Option<Region>,
    /// The memory of `working` once its pool was closed ([`SimDomain::detach_range`]).
    pub owned: Option<SimBuffer>,
    /// Durable image, copy-on-write pages.
    pub durable: Vec<Arc<Page>>,
    /// Dirty-line bitmap (bit per line of the file).
    pub dirty: Box<[AtomicU64]>,
    /// Per line, per 8-byte word, the coherence stamp of its durable content when a write-back
    /// set it (the stamp of the flush that captured it, or a fresh one for non-temporal words
    /// and eADR fences; absent: older than every capture). Under
    /// [`WritebackOrder::Coherent`](super::WritebackOrder) a write-back does not land a word
    /// over a newer durable one (D7).
    pub stamps: HashMap<u64, [u64; 8]>,
}

impl SimFile {
    pub(super) fn new(name: &str, len: u64, zero: &Arc<Page>) -> SimFile {
        let pages = len.div_ceil(PAGE) as usize;
        let lines = len.div_ceil(CACHE_LINE) as usize;
        SimFile {
            name: name.to_owned(),
            len,
            working: None,
            owned: None,
            durable: vec![zero.clone(); pages],
            dirty: (0..lines.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            stamps: HashMap::new(),
        }
    }

    /// The coherence stamps of a line's durable words (0: set by no write-back).
    pub(crate) fn stamps_of(&self, line: u64) -> [u64; 8] {
        self.stamps.get(&line).copied().unwrap_or([0; 8])
    }

    /// Records `stamp` for the words of `mask` of `line`.
    pub(super) fn set_stamps(&mut self, line: u64, mask: u8, stamp: u64) {
        let s = self.stamps.entry(line).or_insert([0; 8]);
        for (w, word) in s.iter_mut().enumerate() {
            if mask & (1 << w) != 0 {
                *word = stamp;
            }
        }
    }

    pub(crate) fn durable_line(&self, line: u64) -> [u8; 64] {
        let page = &self.durable[(line / LINES_PER_PAGE) as usize];
        let at = ((line % LINES_PER_PAGE) * CACHE_LINE) as usize;
        let mut out = [0u8; 64];
        out.copy_from_slice(&page[at..at + 64]);
        out
    }

    pub(super) fn write_durable(&mut self, line: u64, content: &[u8; 64], mask: u8) {
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

    pub(super) fn set_dirty(&self, line: u64) {
        if let Some(w) = self.dirty.get((line / 64) as usize) {
            w.fetch_or(1 << (line % 64), Ordering::Relaxed);
        }
    }

    pub(super) fn clear_dirty(&self, line: u64) {
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
    /// Simulated block files, by name (a namespace of their own; see `blocks.rs`).
    pub blocks: BTreeMap<String, SimBlock>,
    /// The id of the last block file created or inserted.
    pub next_block_id: u64,
}

impl Files {
    /// The file whose working image contains `addr`, and the offset in it.
    pub(super) fn locate(&self, addr: usize) -> Option<(&SimFile, u64)> {
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
    /// The coherence stamp of `content`: taken with the content under the pending lock, so
    /// a larger stamp never carries older content of the line (D7).
    pub stamp: u64,
    /// Whether the last addition came from non-temporal stores (written back by no flush:
    /// it lands at the fence whatever its stamp).
    pub nt: bool,
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
    pub(super) fn upsert(
        &mut self,
        file: &str,
        line: u64,
        content: [u8; 64],
        mask: u8,
        full: bool,
        stamp: u64,
    ) -> bool {
        match self.index.get(&(file.to_owned(), line)) {
            Some(&i) => {
                let l = &mut self.lines[i];
                let was_full = l.mask == 0xff;
                l.content = content;
                l.mask = if full { 0xff } else { l.mask | mask };
                l.stamp = stamp;
                l.nt = !full;
                was_full && full
            }
            None => {
                self.index.insert((file.to_owned(), line), self.lines.len());
                self.lines.push(PendingLine {
                    file: file.to_owned(),
                    line,
                    content,
                    mask: if full { 0xff } else { mask },
                    stamp,
                    nt: !full,
                });
                false
            }
        }
    }

    pub(super) fn remove_file(&mut self, file: &str) {
        self.lines.retain(|l| l.file != file);
        self.index =
            self.lines.iter().enumerate().map(|(i, l)| ((l.file.clone(), l.line), i)).collect();
    }

    /// The content pending for `(file, line)`, if the line is pending.
    pub(super) fn content_of(&self, file: &str, line: u64) -> Option<[u8; 64]> {
        self.index.get(&(file.to_owned(), line)).map(|&i| self.lines[i].content)
    }

    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }
}
