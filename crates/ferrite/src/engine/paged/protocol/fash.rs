//! FASH and FAST: failure-atomic slotted paging (spec `fast-fash-nvwal.md` §1–§2, seed
//! `000_…` §3–§4). The pages live in PM and are the database: a commit writes the bytes a
//! transaction changed straight into the pages, and only what the committed pages *reference*
//! goes through a small redo log of slot headers.
//!
//! A page's header (the fixed part and the offset array) is its commit mark (spec §2.1): a
//! byte of the page means something only if the header reaches it. [`page::referenced`] names
//! those bytes in the committed image: the header, every record, the first four bytes of
//! every hole (the chain). Everything else (the gap, the bodies of holes and fragments) is
//! scratch. A commit compares each changed page with its committed image in PM and splits the
//! changed bytes into:
//! - **in place**: bytes the committed page does not reference, and every byte of a page the
//!   committed state does not reference at all (pages at or past the old page count, and
//!   spare free pages, [`Batch::spare`]). New records, new offsets past the old count, new
//!   pages: written directly (spec §2.3.2, "write rec into unreferenced space").
//! - **logged**: bytes the committed page references: the header fields and offsets that
//!   change, and anything the tree rewrote in place (a merge, a compaction, the meta page).
//!   They reach the page only after the commit mark, through the slot-header log (§2.3.5).
//!   The log holds the changed byte ranges of the headers rather than whole headers: the
//!   same redo, fewer bytes.
//!
//! Then:
//! - **FASH** (§2.3.5): the in-place bytes, the log entries and the log header are flushed
//!   under one fence; the commit mark (one aligned 8-byte word of the log's header, = the
//!   transaction's sequence number) is stored, flushed and fenced; the logged ranges are
//!   copied into the pages (eager checkpoint), flushed and fenced; the mark is cleared,
//!   flushed and fenced (truncate).
//! - **FAST** (§2.3.7 without RTM): when every logged byte of the transaction lies in one
//!   aligned 8-byte word of one page (for example an insert at the end of a leaf's offset
//!   array: the record and the new offset go in place, and only the header's first word, with
//!   the count and the content start, changes), that word *is* the commit: the in-place bytes
//!   are flushed and fenced, the word is stored (M1: failure-atomic), flushed and fenced. No
//!   log. Anything else takes the FASH path. The seed commits a whole header line with RTM
//!   (§2.3.1); this CPU has no TSX, and M1 is all real PM promises, so a header change wider
//!   than a word is logged.
//! - **FAST, same-line variant** (only where the medium is declared to keep axiom M2, stores
//!   to one line durable in program order: [`crate::PagedConfig::same_line_order`]): in-place
//!   bytes on the commit word's line are stored before the word and persisted with it by the
//!   word's one flush; only in-place bytes on other lines need the flush and fence before
//!   the word. An append to a leaf whose offset array ends on the header's first line then
//!   costs the record's lines plus one.
//!
//! The meta page changes in every commit (its sequence number); when the sequence number is
//! all that changed, the page is not written: the stored number is a lower bound, used only
//! to number snapshots within a process. So a single-page transaction stays single-page.
//!
//! Log file (file `LOG` of the database's PM files; `docs/design/format.md`):
//! ```text
//!  0: ShLogHead: commit u64 | seq u64 | count u32 | bytes u32 | crc32c u32 | 0 u32   (line 0)
//! 64: entries: ShEntryHead { page u32 | offset u32 | len u32 | 0 u32 } | len bytes | pad to 8
//! ```
//!
//! # Invariants
//! - I1: between commits the log's commit word is 0 and every page holds the committed state.
//! - I2: no byte that a committed page references changes before the commit word that
//!   commits the change is durable (FASH) or is that change's own word (FAST).
//! - I3: a non-zero commit word equals its header's `seq`, and the header's checksum matches
//!   the entries: the entries and the header are durable before the word is stored. A
//!   non-zero word with a header that does not match is corruption (typed), never redone.
//! - I4: redoing the log is idempotent, so recovery may crash and run again.
//!
//! # Ordering (rules in `docs/design/persistence.md`)
//! - P-PG-30 (FASH): the in-place bytes, the entries and the log header are durable before
//!   the commit word is stored (spec: S-data, S-log; one fence for both).
//! - P-PG-31 (FASH): the commit word is durable before the first logged byte reaches a
//!   page: the commit point (S-commit).
//! - P-PG-32 (FASH): the logged ranges are durable in the pages before the word is cleared
//!   (S-ckpt).
//! - P-PG-33 (FASH): the cleared word is durable before `commit` returns, so the next
//!   transaction's entries never meet a stale mark (S-trunc).
//! - P-PG-34 (FAST): the in-place bytes are durable before the commit word is stored
//!   (P-rec); under M2, those on the word's line are ordered by same-line order instead.
//! - P-PG-35 (FAST): the word is durable before `commit` returns: the commit point (P-hdr).
//! - Recovery (R-redo, R-trunc) runs the commit's own checkpoint on the logged pieces, under
//!   P-PG-32 and P-PG-33.
//!
//! # Concurrency
//! One writer commits and recovers (the pager's protocol lock, held exclusively); readers
//! read pages through the same lock, never during a commit, so no reader sees a page between
//! its in-place writes and its checkpoint (spec §2.3.5's lock scope).

use std::collections::BTreeSet;
use std::sync::Arc;

use zerocopy::IntoBytes;

use super::{AfterCommit, Batch};
use crate::engine::paged::layout::{self, ShEntryHead, ShLogHead};
use crate::engine::paged::page;
use crate::engine::paged::pager::Meta;
use crate::engine::paged::pages::{META_PAGE, PageNo, PageSize};
use crate::engine::paged::store::PageStore;
use crate::engine::paged::store::pmfile::{LOG, PAGES, PmFiles};
use crate::error::{Error, Result};

/// Cache line size.
const LINE: u64 = 64;
/// Where the log's entries begin.
const ENTRIES: u64 = 64;
/// Logged pieces of one page closer than this are logged as one range (the bytes between
/// hold their committed values or this transaction's; redoing them is harmless).
const MERGE_GAP: usize = 16;

fn corrupt(what: impl Into<String>) -> Error {
    Error::Corrupted { what: what.into(), at: "slot-header log".into() }
}

/// What the commits so far did (for reports and the persist-count tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FashStats {
    /// Commits through the slot-header log.
    pub logged: u64,
    /// Commits by one 8-byte word (FAST).
    pub in_place: u64,
    /// Bytes written in place.
    pub in_place_bytes: u64,
    /// Bytes logged (entry payloads).
    pub log_bytes: u64,
}

/// The FASH/FAST protocol (see the module docs).
#[derive(Debug)]
pub(crate) struct Fash {
    store: PageStore,
    fast: bool,
    same_line: bool,
    /// The next transaction's sequence number (never 0).
    seq: u64,
    stats: FashStats,
}

/// One transaction's changes, classified.
#[derive(Debug, Default)]
struct Plan<'a> {
    /// `(page, offset, bytes)` written in place.
    in_place: Vec<(PageNo, usize, &'a [u8])>,
    /// `(page, offset, bytes)` that go through the log.
    logged: Vec<(PageNo, usize, &'a [u8])>,
}

impl Fash {
    /// FASH (`fast` false) or FAST over `store`, which must be the PM store (its log is file
    /// `LOG` of the same PM files). `same_line`: the medium keeps axiom M2 (FAST's same-line
    /// variant). Errors: `InvalidArgument` for the file store.
    pub(crate) fn new(store: PageStore, fast: bool, same_line: bool) -> Result<Fash> {
        if !matches!(store, PageStore::Pm(_)) {
            return Err(Error::InvalidArgument(
                "FASH and FAST keep their pages in PM: they need the PM store".into(),
            ));
        }
        Ok(Fash { store, fast, same_line, seq: 1, stats: FashStats::default() })
    }

    /// The page store.
    pub(crate) fn store(&self) -> &PageStore {
        &self.store
    }

    /// Whether this is FAST.
    pub(crate) fn is_fast(&self) -> bool {
        self.fast
    }

    /// What the commits so far did.
    pub(crate) fn stats(&self) -> FashStats {
        self.stats
    }

    fn files(&self) -> Result<Arc<PmFiles>> {
        match &self.store {
            PageStore::Pm(s) => Ok(s.files().clone()),
            PageStore::File(_) => Err(Error::InvalidArgument("FASH needs the PM store".into())),
        }
    }

    fn page_off(&self, no: PageNo) -> u64 {
        u64::from(no) * self.store.page_size() as u64
    }

    /// Splits the batch's changes into in-place and logged pieces (the module docs).
    fn plan<'a>(&self, batch: &Batch<'a>) -> Result<Plan<'a>> {
        let ps = self.store.page_size();
        let size = PageSize::new(ps)?;
        let mut plan = Plan::default();
        let mut scratch = vec![0u8; ps];
        for &(no, img) in batch.pages {
            if img.len() != ps {
                return Err(Error::InvalidArgument(format!("a page image of {} bytes", img.len())));
            }
            let fresh = u64::from(no) >= batch.pages_before || batch.spare.contains(&no);
            // What the page holds now, also for a page past the old count: it may hold bytes
            // of a transaction that did not commit, so only a comparison with them tells
            // which bytes to write (`commit` grew the store to hold every page). The pager
            // hands over the committed images it read; other pages are read here.
            let old: &[u8] = match batch.committed.get(&no) {
                Some(o) if o.len() == ps => o,
                _ => {
                    self.store.read_page(no, &mut scratch)?;
                    &scratch
                }
            };
            if no == META_PAGE && only_seq_changed(old, img, size) {
                continue;
            }
            let referenced: Vec<(usize, usize)> = if fresh {
                Vec::new()
            } else if no == META_PAGE {
                vec![(0, ps)]
            } else {
                // A page that is not a well-formed slotted page (an overflow page, a free-list
                // trunk) is referenced whole.
                page::referenced(old).unwrap_or_else(|_| vec![(0, ps)])
            };
            let mut logged: Vec<(usize, usize)> = Vec::new();
            for (a, b) in diff_runs(old, img) {
                split_run(a, b, &referenced, &mut |x, y, inside| {
                    if inside {
                        match logged.last_mut() {
                            Some(last) if x <= last.1 + MERGE_GAP => last.1 = y,
                            _ => logged.push((x, y)),
                        }
                    } else {
                        plan.in_place.push((no, x, &img[x..y]));
                    }
                });
            }
            plan.logged.extend(logged.into_iter().map(|(x, y)| (no, x, &img[x..y])));
        }
        Ok(plan)
    }

    /// The one aligned word all logged bytes lie in, if there is one: `(page, offset)`.
    fn single_word(plan: &Plan<'_>) -> Option<(PageNo, usize)> {
        let mut word = None;
        for &(no, off, bytes) in &plan.logged {
            let (first, last) = (off / 8, (off + bytes.len() - 1) / 8);
            if first != last || word.is_some_and(|w| w != (no, first * 8)) {
                return None;
            }
            word = Some((no, first * 8));
        }
        word
    }

    /// Makes `batch` durable (P2 of [`super`]).
    pub(crate) fn commit(&mut self, batch: &Batch<'_>) -> Result<AfterCommit> {
        let top = batch.pages.iter().map(|&(no, _)| u64::from(no) + 1).max().unwrap_or(0);
        self.store.ensure(top)?;
        let plan = self.plan(batch)?;
        self.stats.in_place_bytes += plan.in_place.iter().map(|p| p.2.len() as u64).sum::<u64>();
        if self.fast
            && let Some(word) = Self::single_word(&plan)
        {
            return self.commit_word(batch, &plan, word).map(|()| None);
        }
        if plan.logged.is_empty() {
            // Nothing the committed state references changes (only scratch bytes did).
            self.write_in_place(&plan, None, "P-PG-34")?;
            self.files()?.sync("P-PG-34"); // ORDER(P-PG-34): the scratch bytes are durable before commit returns
            return Ok(None);
        }
        self.commit_logged(&plan)
    }

    /// Stores the in-place pieces and starts write-back of their lines, except the lines of
    /// `skip` (a line the caller flushes later). Returns the number of lines flushed.
    fn write_in_place(
        &self,
        plan: &Plan<'_>,
        skip: Option<u64>,
        rule: &'static str,
    ) -> Result<usize> {
        let files = self.files()?;
        let mut lines = BTreeSet::new();
        for &(no, off, bytes) in &plan.in_place {
            let at = self.page_off(no) + off as u64;
            files.store_at(PAGES, at, bytes)?;
            lines.extend(at / LINE..(at + bytes.len() as u64).div_ceil(LINE));
        }
        if let Some(l) = skip {
            lines.remove(&l);
        }
        for_spans(&lines, |first, n| {
            files.flush_at(PAGES, first * LINE, n * LINE, rule) // ORDER(P-PG-30): in-place bytes durable before the commit word (the caller's rule: P-PG-30 FASH, P-PG-34 FAST)
        })?;
        Ok(lines.len())
    }

    /// FAST: the transaction's one referenced word is its commit (P-PG-34, P-PG-35).
    fn commit_word(
        &mut self,
        batch: &Batch<'_>,
        plan: &Plan<'_>,
        (no, off): (PageNo, usize),
    ) -> Result<()> {
        let img = batch
            .pages
            .iter()
            .find(|p| p.0 == no)
            .map(|p| p.1)
            .ok_or_else(|| corrupt("the commit word's page left the batch"))?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&img[off..off + 8]);
        let at = self.page_off(no) + off as u64;
        let line = at / LINE;
        let files = self.files()?;
        let skip = self.same_line.then_some(line);
        if self.write_in_place(plan, skip, "P-PG-34")? > 0 {
            files.sync("P-PG-34"); // ORDER(P-PG-34): the records (and offsets) are durable before the word that references them is stored
        }
        files.store_word(PAGES, at, u64::from_le_bytes(w))?;
        files.flush_at(PAGES, line * LINE, LINE, "P-PG-35")?; // ORDER(P-PG-35): the commit word's line (under M2 with the in-place bytes stored on it before the word)
        files.sync("P-PG-35"); // ORDER(P-PG-35): the commit point: the word is durable before commit returns
        self.stats.in_place += 1;
        Ok(())
    }

    /// FASH: in-place bytes and the log, the commit word, the checkpoint, the truncation.
    /// The commit point is the mark: a failed checkpoint after it is returned as
    /// `Ok(Some(error))` (the log still holds the pieces; recovery checkpoints them).
    fn commit_logged(&mut self, plan: &Plan<'_>) -> Result<AfterCommit> {
        self.log_and_mark(plan)?;
        Ok(self.checkpoint(plan.logged.iter().map(|&(n, o, b)| (n, o, b))).err())
    }

    /// FASH up to its commit point (spec §2.3.5 phases 1–3): the in-place bytes, the log, and
    /// the commit word, each durable.
    fn log_and_mark(&mut self, plan: &Plan<'_>) -> Result<()> {
        self.write_in_place(plan, None, "P-PG-30")?;
        let mut entries = Vec::new();
        for &(no, off, bytes) in &plan.logged {
            let head = ShEntryHead {
                page: no.into(),
                offset: (off as u32).into(),
                len: (bytes.len() as u32).into(),
                _zero: 0.into(),
            };
            entries.extend_from_slice(head.as_bytes());
            entries.extend_from_slice(bytes);
            entries.resize(entries.len().next_multiple_of(8), 0);
        }
        let seq = self.seq;
        let head = ShLogHead {
            commit: 0.into(),
            seq: seq.into(),
            count: (plan.logged.len() as u32).into(),
            bytes: u32::try_from(entries.len())
                .map_err(|_| Error::InvalidArgument("a transaction's log exceeds 4 GiB".into()))?
                .into(),
            crc: 0.into(),
            _zero: 0.into(),
        };
        let head = ShLogHead { crc: head_crc(&head, &entries).into(), ..head };
        let files = self.files()?;
        files.ensure(LOG, ENTRIES + entries.len() as u64)?;
        files.store_at(LOG, ENTRIES, &entries)?;
        files.store_at(LOG, 8, &head.as_bytes()[8..])?;
        files.flush_at(LOG, 0, ENTRIES + entries.len() as u64, "P-PG-30")?; // ORDER(P-PG-30): entries and header durable before the commit word
        files.sync("P-PG-30"); // ORDER(P-PG-30): in-place bytes and the log durable before the commit word is stored
        files.store_word(LOG, 0, seq)?;
        files.flush_at(LOG, 0, 8, "P-PG-31")?; // ORDER(P-PG-31): the commit word
        files.sync("P-PG-31"); // ORDER(P-PG-31): the commit point: durable before any logged byte reaches a page
        self.seq += 1;
        self.stats.logged += 1;
        self.stats.log_bytes += plan.logged.iter().map(|p| p.2.len() as u64).sum::<u64>();
        Ok(())
    }

    /// The eager checkpoint of a committed log (spec §2.3.5 phases 4–5), at commit and in
    /// recovery alike (R-redo and R-trunc are the same steps): copies the logged pieces into
    /// their pages, makes them durable, then clears the commit word durably.
    fn checkpoint<'b>(
        &self,
        pieces: impl Iterator<Item = (PageNo, usize, &'b [u8])>,
    ) -> Result<()> {
        super::injected_checkpoint_failure()?;
        let files = self.files()?;
        let mut lines = BTreeSet::new();
        for (no, off, bytes) in pieces {
            let at = self.page_off(no) + off as u64;
            files.store_at(PAGES, at, bytes)?;
            lines.extend(at / LINE..(at + bytes.len() as u64).div_ceil(LINE));
        }
        for_spans(&lines, |first, n| {
            files.flush_at(PAGES, first * LINE, n * LINE, "P-PG-32") // ORDER(P-PG-32): the logged pieces written into their pages
        })?;
        files.sync("P-PG-32"); // ORDER(P-PG-32): the checkpointed pieces durable before the log is truncated
        files.store_word(LOG, 0, 0)?;
        files.flush_at(LOG, 0, 8, "P-PG-33")?; // ORDER(P-PG-33): the cleared commit word
        files.sync("P-PG-33"); // ORDER(P-PG-33): the truncation durable before the next transaction's entries are written
        Ok(())
    }

    /// Redoes a committed log left by a crash (spec §2.3.9), then truncates it. Returns
    /// whether there was anything to redo. Errors: `Corrupted` for a committed log whose
    /// header or entries do not match (I3).
    pub(crate) fn recover(&mut self) -> Result<bool> {
        let files = self.files()?;
        if files.capacity(LOG)? < ENTRIES {
            return Ok(false);
        }
        let mut b = [0u8; 32];
        files.read_at(LOG, 0, &mut b)?;
        let head: ShLogHead = layout::read(&b).ok_or_else(|| corrupt("short header"))?;
        let commit = files.load_word(LOG, 0)?;
        self.seq = head.seq.get().max(commit).saturating_add(1).max(1);
        if commit == 0 {
            return Ok(false);
        }
        if commit != head.seq.get() {
            return Err(corrupt(format!(
                "commit mark {commit} does not match the header's sequence {}",
                head.seq.get()
            )));
        }
        let len = u64::from(head.bytes.get());
        if ENTRIES + len > files.capacity(LOG)? {
            return Err(corrupt(format!("{len} bytes of entries pass the end of the log")));
        }
        let mut entries = vec![0u8; len as usize];
        files.read_at(LOG, ENTRIES, &mut entries)?;
        if head_crc(&head, &entries) != head.crc.get() {
            return Err(corrupt("a committed log's checksum does not match its entries"));
        }
        let pieces = parse_entries(&entries, head.count.get(), self.store.page_size())?;
        let pages = self.store.capacity()?;
        if let Some(p) = pieces.iter().find(|p| u64::from(p.0) >= pages) {
            return Err(corrupt(format!("an entry for page {} past the store's end", p.0)));
        }
        self.checkpoint(pieces.iter().map(|(n, o, b)| (*n, *o, &b[..])))?;
        Ok(true)
    }
}

/// Whether meta pages `old` and `new` differ only in their commit sequence (and checksum).
fn only_seq_changed(old: &[u8], new: &[u8], size: PageSize) -> bool {
    match (Meta::decode(old, size), Meta::decode(new, size)) {
        (Ok(a), Ok(b)) => Meta { seq: b.seq, ..a } == b,
        _ => false,
    }
}

/// CRC32C of the header's bytes 8..24 and the entries.
fn head_crc(head: &ShLogHead, entries: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head.as_bytes()[8..24]), entries)
}

/// The `count` entries in `b`, checked against the page size.
fn parse_entries(b: &[u8], count: u32, page_size: usize) -> Result<Vec<(PageNo, usize, Vec<u8>)>> {
    let mut out = Vec::with_capacity(count as usize);
    let mut at = 0usize;
    for _ in 0..count {
        let h: ShEntryHead =
            layout::read(b.get(at..).unwrap_or_default()).ok_or_else(|| corrupt("short entry"))?;
        let (off, len) = (h.offset.get() as usize, h.len.get() as usize);
        let start = at + size_of::<ShEntryHead>();
        if off + len > page_size || start + len > b.len() {
            return Err(corrupt(format!("entry of {len} bytes at {off} of page {}", h.page)));
        }
        out.push((h.page.get(), off, b[start..start + len].to_vec()));
        at = (start + len).next_multiple_of(8);
    }
    if at != b.len() {
        return Err(corrupt("entries do not fill the logged bytes"));
    }
    Ok(out)
}

/// Maximal runs `[a, b)` where `old` and `new` differ.
fn diff_runs(old: &[u8], new: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let n = old.len().min(new.len());
    let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let mut i = 0;
    while i < n {
        // Skip equal 64-byte blocks, then equal 8-byte words, quickly.
        if i % 64 == 0 && i + 64 <= n && old[i..i + 64] == new[i..i + 64] {
            i += 64;
            continue;
        }
        if i % 8 == 0 && i + 8 <= n && word(old, i) == word(new, i) {
            i += 8;
            continue;
        }
        if old[i] == new[i] {
            i += 1;
            continue;
        }
        let a = i;
        while i < n && old[i] != new[i] {
            i += 1;
        }
        runs.push((a, i));
    }
    runs
}

/// Calls `f(x, y, inside)` for the pieces of `[a, b)` inside and outside the sorted,
/// non-overlapping extents `refs`.
fn split_run(a: usize, b: usize, refs: &[(usize, usize)], f: &mut impl FnMut(usize, usize, bool)) {
    let mut at = a;
    for &(off, len) in refs {
        let end = off + len;
        if end <= at {
            continue;
        }
        if off >= b {
            break;
        }
        if off > at {
            f(at, off, false);
            at = off;
        }
        let stop = end.min(b);
        f(at, stop, true);
        at = stop;
        if at >= b {
            return;
        }
    }
    if at < b {
        f(at, b, false);
    }
}

/// Calls `f(first, n)` for each run of consecutive lines in `lines`.
fn for_spans(lines: &BTreeSet<u64>, mut f: impl FnMut(u64, u64) -> Result<()>) -> Result<()> {
    let mut it = lines.iter().copied();
    let Some(mut first) = it.next() else { return Ok(()) };
    let mut n = 1;
    for l in it {
        if l == first + n {
            n += 1;
        } else {
            f(first, n)?;
            (first, n) = (l, 1);
        }
    }
    f(first, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::paged::page::{self, Kind};
    use crate::engine::paged::store::test_store;
    use ferrite_pmem::internals::testing::TestDir;

    const PS: usize = 1024;

    fn fash(path: &std::path::Path, create: bool, fast: bool) -> Fash {
        let (_, store) = test_store(path, create, PS);
        let mut f = Fash::new(store, fast, false).expect("PM store");
        f.recover().expect("recover");
        f
    }

    fn leaf(keys: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; PS];
        page::init(&mut b, Kind::Leaf, 0).unwrap();
        for (i, &k) in keys.iter().enumerate() {
            assert!(
                page::insert_cell(
                    &mut b,
                    i,
                    &page::encode_leaf(&[k], page::LeafValue::Inline(&[k; 20]))
                )
                .unwrap()
            );
        }
        b
    }

    fn commit(f: &mut Fash, pages: &[(PageNo, Vec<u8>)], before: u64) {
        let refs: Vec<(PageNo, &[u8])> = pages.iter().map(|(n, p)| (*n, &p[..])).collect();
        let after = f
            .commit(&Batch {
                pages: &refs,
                pages_before: before,
                spare: &BTreeSet::new(),
                committed: &Default::default(),
            })
            .unwrap();
        assert!(after.is_none(), "a checkpoint failed: {after:?}");
    }

    fn read(f: &Fash, no: PageNo) -> Vec<u8> {
        let mut b = vec![0u8; PS];
        f.store().read_page(no, &mut b).unwrap();
        b
    }

    /// Page 1 holds keys 1, 3; page 2 keys 5, 7 (committed, checkpointed).
    fn base(f: &mut Fash) {
        commit(f, &[(1, leaf(&[1, 3])), (2, leaf(&[5, 7]))], 1);
    }

    #[test]
    fn an_append_commits_by_one_word_under_fast_and_through_the_log_under_fash() {
        for fast in [false, true] {
            let dir = TestDir::new("fash-word");
            let mut f = fash(&dir.join("p"), true, fast);
            base(&mut f);
            let s0 = f.stats();
            commit(&mut f, &[(1, leaf(&[1, 3, 4]))], 3); // an append: record and offset in place
            let s = f.stats();
            assert_eq!(
                (s.in_place - s0.in_place, s.logged - s0.logged),
                if fast { (1, 0) } else { (0, 1) }
            );
            commit(&mut f, &[(1, leaf(&[1, 2, 3, 4]))], 3); // a middle insert shifts offsets
            assert_eq!(f.stats().logged - s.logged, 1, "a shifted offset array is logged");
            drop(f);
            let f = fash(&dir.join("p"), false, fast);
            assert_eq!(read(&f, 1), leaf(&[1, 2, 3, 4]));
            assert_eq!(read(&f, 2), leaf(&[5, 7]));
        }
    }

    /// Regression (found by `db-paged-fash` on 512-byte pages): a page past the old page
    /// count was diffed against zeros, but it may hold the bytes of a transaction that did
    /// not commit; where the new image had a zero byte, the stale byte stayed.
    #[test]
    fn a_new_page_over_stale_bytes_gets_its_whole_image() {
        let dir = TestDir::new("fash-stale");
        let mut f = fash(&dir.join("p"), true, true);
        base(&mut f);
        f.store().ensure(4).unwrap();
        f.files().unwrap().store_at(PAGES, f.page_off(3), &[0xab; PS]).unwrap();
        let p3 = leaf(&[9]);
        commit(&mut f, &[(3, p3.clone())], 3);
        assert_eq!(read(&f, 3), p3);
    }

    #[test]
    fn a_committed_log_is_redone_and_repairs_torn_headers() {
        let dir = TestDir::new("fash-redo");
        let mut f = fash(&dir.join("p"), true, false);
        base(&mut f);
        let (p1, p2) = (leaf(&[0, 1, 3]), leaf(&[2, 5, 7]));
        let refs: Vec<(PageNo, &[u8])> = vec![(1, &p1[..]), (2, &p2[..])];
        let batch = Batch {
            pages: &refs,
            pages_before: 3,
            spare: &BTreeSet::new(),
            committed: &Default::default(),
        };
        let plan = f.plan(&batch).unwrap();
        assert!(!plan.logged.is_empty());
        f.log_and_mark(&plan).unwrap(); // the crash: after the commit mark, before the checkpoint
        // Torn headers, as a crash inside the checkpoint leaves them (each byte old or new):
        // page 1 with its first 4 new bytes, page 2 with its new offsets but the old count.
        let files = f.files().unwrap();
        files.store_at(PAGES, f.page_off(1), &p1[..4]).unwrap();
        files.store_at(PAGES, f.page_off(2) + 8, &p2[8..16]).unwrap();
        assert_ne!(read(&f, 2), p2);
        drop((plan, files, f));
        let f = fash(&dir.join("p"), false, false);
        assert_eq!(read(&f, 1), p1);
        assert_eq!(read(&f, 2), p2);
    }

    #[test]
    fn a_damaged_committed_log_is_a_typed_error_and_changes_nothing() {
        for damage in ["crc", "seq", "entry"] {
            let dir = TestDir::new("fash-damaged");
            let mut f = fash(&dir.join("p"), true, false);
            base(&mut f);
            let p1 = leaf(&[0, 1, 3]);
            let refs: Vec<(PageNo, &[u8])> = vec![(1, &p1[..])];
            let batch = Batch {
                pages: &refs,
                pages_before: 3,
                spare: &BTreeSet::new(),
                committed: &Default::default(),
            };
            let plan = f.plan(&batch).unwrap();
            f.log_and_mark(&plan).unwrap();
            let files = f.files().unwrap();
            match damage {
                "crc" => files.store_at(LOG, ENTRIES + 16, &[0xff]).unwrap(),
                "seq" => files.store_word(LOG, 0, 12345).unwrap(),
                _ => files.store_at(LOG, ENTRIES, &[0xff, 0xff, 0, 0]).unwrap(),
            }
            let before = (read(&f, 1), read(&f, 2));
            drop((plan, files, f));
            let (_, store) = test_store(&dir.join("p"), false, PS);
            let mut f = Fash::new(store, false, false).unwrap();
            match f.recover() {
                Err(Error::Corrupted { .. }) => {}
                other => panic!("{damage}: {other:?}"),
            }
            assert_eq!((read(&f, 1), read(&f, 2)), before, "{damage}: a refused log changed pages");
        }
    }

    #[test]
    fn runs_split_at_referenced_extents() {
        let refs = [(0, 10), (20, 5)];
        let mut got = Vec::new();
        split_run(5, 30, &refs, &mut |x, y, i| got.push((x, y, i)));
        assert_eq!(got, [(5, 10, true), (10, 20, false), (20, 25, true), (25, 30, false)]);
        got.clear();
        split_run(12, 18, &refs, &mut |x, y, i| got.push((x, y, i)));
        assert_eq!(got, [(12, 18, false)]);
    }

    #[test]
    fn diff_runs_find_every_changed_byte() {
        let old = vec![0u8; 64];
        let mut new = old.clone();
        new[0] = 1;
        new[9] = 1;
        new[10] = 1;
        new[63] = 1;
        assert_eq!(diff_runs(&old, &new), [(0, 1), (9, 11), (63, 64)]);
        assert!(diff_runs(&old, &old).is_empty());
    }
}
