//! The rollback journal (SQLite's rollback mode, spec `fast-fash-nvwal.md` §0.1; the
//! baseline both seeds compare against): before a page is overwritten in place, its original
//! image goes to the journal; a crash in the middle of a commit is undone at the next open by
//! writing the originals back ("hot journal").
//!
//! ```text
//!  log file:  0: header (one 512-byte sector, 48 bytes used)       512: records
//!   header: magic u64 "FERRJNL1" | version u32 | page size u32 | pages_before u64 | nrec u64 |
//!           nonce u32 | crc32c u32 (over bytes 8..40 and the nonce)
//!   record i at 512 + i * (64 + page size):
//!           page number u32 | 0 u32 | nonce u32 | crc32 u32 (IEEE, over page number, nonce,
//!           image; see `record_crc` for why not CRC32C)
//!           | 48 zero bytes | the page's original image
//! ```
//!
//! # Invariants
//! - J1: the journal is *hot* iff its header has the magic and a matching checksum. It is hot
//!   from the first sync of a commit (P-PG-10) until its invalidation is durable (P-PG-12), and
//!   at no other time.
//! - J2: while the journal is hot, every page of the store that the interrupted commit may
//!   have overwritten has a record with the header's nonce and a matching checksum, holding
//!   its image before that commit; pages at or past `pages_before` were new and need nothing.
//! - J3: a record whose checksum or nonce does not match belongs to no hot journal: either an
//!   older commit's leftover, or this commit's record before its sync, when no store page had
//!   been overwritten yet (store writes begin after P-PG-10). Recovery skips it.
//! - J4: the header's nonce changes with every commit, so a stale record never passes as the
//!   current commit's.
//!
//! # Ordering (rules in `docs/design/persistence.md`)
//! - P-PG-10: the records and the header are durable before any page of the store is
//!   overwritten (one journal sync).
//! - P-PG-11: the new pages are durable before the journal is invalidated (one store sync).
//! - P-PG-12: the invalidation (the whole header zeroed) is durable before `commit`
//!   returns: that is the commit point.
//! - P-PG-13 (recovery): the originals written back are durable before the journal is
//!   invalidated (then P-PG-12 again).
//!
//! # Concurrency
//! The one writer commits and recovers; readers read the store, never the journal.
//!
//! The checksum over the header is what tells a complete header from a torn one (a mix of
//! this commit's words and the previous, invalidated header's): a torn header passes only on
//! a CRC32C collision (2^-32), as in SQLite's own journal.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{AfterCommit, Batch};
use zerocopy::IntoBytes;

use crate::engine::paged::layout::{self, JournalHead, RecordHead};
use crate::engine::paged::store::PageStore;
use crate::engine::paged::store::log::LogFile;
use crate::error::{Error, Result};

/// "FERRJNL1".
const MAGIC: u64 = u64::from_le_bytes(*b"FERRJNL1");
/// Format version of the journal.
const VERSION: u32 = 1;
/// Where the records begin (the header has a sector to itself).
const RECORDS: u64 = 512;
/// Bytes before a record's image.
const REC_HEAD: usize = size_of::<RecordHead>();
/// Bytes of the header that carry fields.
const HEAD: usize = size_of::<JournalHead>();

/// Where a commit stops, to model a crash in unit tests (the crash tester models real ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// After the journal is written and synced, before the store is touched.
    JournalSynced,
    /// After half of the batch's pages are written to the store.
    HalfWritten,
    /// After the store is synced, before the journal is invalidated.
    StoreSynced,
}

/// The rollback journal over a page store and a log file.
#[derive(Debug)]
pub(crate) struct Journal {
    store: PageStore,
    log: LogFile,
    nonce: u32,
    /// Test hook: stop a commit at this step, as a crash would (`None` in every real use).
    pub(crate) stop: Option<Stop>,
}

struct Header {
    page_size: u32,
    pages_before: u64,
    nrec: u64,
    nonce: u32,
}

impl Header {
    fn encode(&self) -> JournalHead {
        let mut h = JournalHead {
            magic: MAGIC.into(),
            version: VERSION.into(),
            page_size: self.page_size.into(),
            pages_before: self.pages_before.into(),
            nrec: self.nrec.into(),
            nonce: self.nonce.into(),
            ..JournalHead::default()
        };
        h.crc = crc32c::crc32c(&h.as_bytes()[8..36]).into();
        h
    }

    /// The header in `h`, if it is hot (J1): magic and checksum match.
    fn decode(h: &JournalHead) -> Option<(Header, u32)> {
        if h.magic.get() != MAGIC || crc32c::crc32c(&h.as_bytes()[8..36]) != h.crc.get() {
            return None;
        }
        let header = Header {
            page_size: h.page_size.get(),
            pages_before: h.pages_before.get(),
            nrec: h.nrec.get(),
            nonce: h.nonce.get(),
        };
        Some((header, h.version.get()))
    }
}

/// A record's checksum: CRC-32 (IEEE, `crc32fast`), deliberately not the CRC32C that pages
/// carry inside them. A block `data | crc32c(data)` cancels out of a CRC32C computed over it
/// (the CRC residue), so a CRC32C over a meta page (which embeds the CRC32C of its fields)
/// would not see those fields change: a record torn between two versions of the meta page
/// passed as whole (found by the crash tester, `db-paged-journal`).
fn record_crc(pgno: u32, nonce: u32, image: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&pgno.to_le_bytes());
    h.update(&nonce.to_le_bytes());
    h.update(image);
    h.finalize()
}

impl Journal {
    /// A journal for `store` kept in `log`. Call [`Journal::recover`] before any read.
    pub(crate) fn new(store: PageStore, log: LogFile) -> Journal {
        // J4: a fresh nonce per open (time and process id), then one more per commit.
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let nonce = (t as u32) ^ std::process::id().rotate_left(16);
        Journal { store, log, nonce, stop: None }
    }

    /// The page store.
    pub(crate) fn store(&self) -> &PageStore {
        &self.store
    }

    fn stride(&self) -> u64 {
        (REC_HEAD + self.store.page_size()) as u64
    }

    fn stopped(&self, at: Stop) -> Result<()> {
        if self.stop == Some(at) { Err(Error::Poisoned) } else { Ok(()) }
    }

    /// Commits `batch` (module docs: P-PG-10, 11, 12). On an error the handle must be
    /// poisoned by the caller: the store may hold part of the batch until the next open
    /// recovers.
    pub(crate) fn commit(&mut self, batch: &Batch<'_>) -> Result<AfterCommit> {
        let ps = self.store.page_size();
        self.nonce = self.nonce.wrapping_add(1);
        let nonce = self.nonce;
        let old: Vec<_> =
            batch.pages.iter().filter(|(p, _)| u64::from(*p) < batch.pages_before).collect();
        let nrec = old.len() as u64;
        self.log.ensure(RECORDS + nrec * self.stride())?;
        let mut rec = vec![0u8; REC_HEAD + ps];
        for (i, (pgno, _)) in old.iter().enumerate() {
            self.store.read_page(*pgno, &mut rec[REC_HEAD..])?;
            let head = RecordHead {
                pgno: (*pgno).into(),
                nonce: nonce.into(),
                crc: record_crc(*pgno, nonce, &rec[REC_HEAD..]).into(),
                ..RecordHead::default()
            };
            rec[..REC_HEAD].copy_from_slice(head.as_bytes());
            let at = RECORDS + i as u64 * self.stride();
            self.log.write_at(at, &rec, "P-PG-10")?; // ORDER(P-PG-10): an original, durable at the journal sync below
        }
        let header = Header { page_size: ps as u32, pages_before: batch.pages_before, nrec, nonce };
        self.log.write_at(0, header.encode().as_bytes(), "P-PG-10")?; // ORDER(P-PG-10): the header makes the journal hot at the sync below
        self.log.sync("P-PG-10")?; // ORDER(P-PG-10): originals and header durable before any page is overwritten
        self.stopped(Stop::JournalSynced)?;

        let end = batch.pages.iter().map(|(p, _)| u64::from(*p) + 1).max().unwrap_or(0);
        self.store.ensure(end)?;
        for (i, (pgno, image)) in batch.pages.iter().enumerate() {
            if i == batch.pages.len() / 2 {
                self.stopped(Stop::HalfWritten)?;
            }
            self.store.write_page(*pgno, image, "P-PG-11")?; // ORDER(P-PG-11): a new page in place, durable at the store sync below
        }
        self.store.sync("P-PG-11")?; // ORDER(P-PG-11): the new pages durable before the journal is invalidated
        self.stopped(Stop::StoreSynced)?;
        // The invalidation is the commit point; nothing runs after it.
        self.invalidate().map(|()| None)
    }

    /// Zeroes the header and syncs (P-PG-12).
    fn invalidate(&self) -> Result<()> {
        let zero = [0u8; HEAD];
        self.log.write_at(0, &zero, "P-PG-12")?; // ORDER(P-PG-12): the journal stops being hot
        self.log.sync("P-PG-12") // ORDER(P-PG-12): the commit point: the invalidation is durable before commit returns
    }

    /// At open: rolls back a hot journal's commit (J1-J3, P-PG-13, P-PG-12). Returns whether
    /// the journal was hot. Errors: `Corrupted` for a hot journal of another page size;
    /// `Incompatible` for a newer journal version.
    pub(crate) fn recover(&mut self) -> Result<bool> {
        if self.log.capacity()? < RECORDS {
            return Ok(false);
        }
        let mut hb = JournalHead::default();
        self.log.read_at(0, hb.as_mut_bytes())?;
        let Some((h, version)) = Header::decode(&hb) else { return Ok(false) };
        self.nonce = self.nonce.wrapping_add(h.nonce).wrapping_add(1);
        if version > VERSION {
            return Err(Error::Incompatible {
                what: format!("rollback journal version {version} (this build reads {VERSION})"),
                at: "journal header".into(),
            });
        }
        let ps = self.store.page_size();
        if h.page_size as usize != ps {
            return Err(Error::Corrupted {
                what: format!(
                    "hot journal of {}-byte pages in a store of {ps}-byte pages",
                    h.page_size
                ),
                at: "journal header".into(),
            });
        }
        let room = self.log.capacity()?.saturating_sub(RECORDS) / self.stride();
        let mut rec = vec![0u8; REC_HEAD + ps];
        let mut restored = 0u64;
        for i in 0..h.nrec.min(room) {
            self.log.read_at(RECORDS + i * self.stride(), &mut rec)?;
            let head = layout::read::<RecordHead>(&rec).unwrap_or_default();
            let (pgno, nonce, crc) = (head.pgno.get(), head.nonce.get(), head.crc.get());
            // J3: a record of another commit, or torn before the journal sync.
            if nonce != h.nonce || crc != record_crc(pgno, nonce, &rec[REC_HEAD..]) {
                continue;
            }
            if u64::from(pgno) >= h.pages_before {
                continue; // cannot be an original (J2); ignore it
            }
            self.store.ensure(u64::from(pgno) + 1)?;
            self.store.write_page(pgno, &rec[REC_HEAD..], "P-PG-13")?; // ORDER(P-PG-13): an original written back, durable at the sync below
            restored += 1;
        }
        self.store.sync("P-PG-13")?; // ORDER(P-PG-13): the originals durable before the journal is invalidated
        tracing::info!(restored, of = h.nrec, "paged: rolled back a hot journal");
        self.invalidate()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use ferrite_pmem::internals::testing::TestDir;

    use super::*;

    const PS: usize = 512;

    fn open(path: &std::path::Path, create: bool) -> Journal {
        let (files, store) = crate::engine::paged::store::test_store(path, create, PS);
        Journal::new(store, LogFile::Pm(files))
    }

    fn page(fill: u8) -> Vec<u8> {
        vec![fill; PS]
    }

    fn read(j: &Journal, pgno: u32) -> u8 {
        let mut out = page(0);
        j.store().read_page(pgno, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == out[0]), "page {pgno} is a mix");
        out[0]
    }

    fn commit(j: &mut Journal, pages: &[(u32, u8)], before: u64) -> Result<()> {
        let images: Vec<(u32, Vec<u8>)> = pages.iter().map(|&(p, f)| (p, page(f))).collect();
        let refs: Vec<(u32, &[u8])> = images.iter().map(|(p, v)| (*p, v.as_slice())).collect();
        let after = j.commit(&Batch {
            pages: &refs,
            pages_before: before,
            spare: &Default::default(),
            committed: &Default::default(),
        })?;
        assert!(after.is_none(), "the journal runs nothing after its commit point");
        Ok(())
    }

    #[test]
    fn a_commit_is_in_place_and_leaves_no_hot_journal() {
        let dir = TestDir::new("paged-journal");
        let mut j = open(&dir.join("db"), true);
        assert!(!j.recover().unwrap());
        commit(&mut j, &[(0, 1), (1, 1), (2, 1)], 0).unwrap();
        commit(&mut j, &[(1, 2), (3, 2)], 3).unwrap();
        assert_eq!([read(&j, 0), read(&j, 1), read(&j, 2), read(&j, 3)], [1, 2, 1, 2]);
        drop(j);
        let mut j = open(&dir.join("db"), false);
        assert!(!j.recover().unwrap(), "a finished commit leaves no hot journal");
        assert_eq!([read(&j, 0), read(&j, 1), read(&j, 2), read(&j, 3)], [1, 2, 1, 2]);
    }

    /// A commit stopped at each step (a crash, as far as a volatile test can model one: every
    /// write before the stop survives) is rolled back at the next open, or, stopped after
    /// the store sync, rolled back too (the commit point is the invalidation).
    #[test]
    fn an_interrupted_commit_is_rolled_back_at_open() {
        for stop in [Stop::JournalSynced, Stop::HalfWritten, Stop::StoreSynced] {
            let dir = TestDir::new("paged-journal-stop");
            let mut j = open(&dir.join("db"), true);
            commit(&mut j, &[(0, 1), (1, 1), (2, 1), (3, 1)], 0).unwrap();
            j.stop = Some(stop);
            let r = commit(&mut j, &[(0, 9), (1, 9), (2, 9), (3, 9), (4, 9)], 4);
            assert!(r.is_err(), "{stop:?}");
            drop(j);
            let mut j = open(&dir.join("db"), false);
            assert!(j.recover().unwrap(), "{stop:?}: the journal is hot");
            for p in 0..4 {
                assert_eq!(read(&j, p), 1, "{stop:?}: page {p}");
            }
            assert!(!j.recover().unwrap(), "{stop:?}: recovery invalidated the journal");
            // The database goes on.
            commit(&mut j, &[(2, 5)], 4).unwrap();
            assert_eq!(read(&j, 2), 5);
        }
    }

    /// A crash while a commit writes its journal keeps only part of what it wrote: modelled
    /// here as every length `cut` (in 8-byte words, PM's unit, M1) of the new journal, with
    /// the previous commit's journal (its header invalidated, its records of an older nonce)
    /// still in the bytes after the cut. The store was not touched yet (P-PG-10), so at every
    /// cut the next open must leave the previous commit's pages: a header that did not
    /// survive whole is not hot and is ignored (J1); a hot header restores only the records
    /// of its own nonce with a matching checksum (J3), so neither a record cut in the middle
    /// nor the older commit's records (whose images predate the previous commit) are written
    /// back. Never a panic, and the journal is not hot after recovery.
    #[test]
    fn a_journal_cut_short_is_ignored_or_rolled_back() {
        let dir = TestDir::new("paged-journal-cut");
        let path = dir.join("db");
        let mut j = open(&path, true);
        commit(&mut j, &[(0, 1), (1, 1), (2, 1), (3, 1)], 0).unwrap();
        // The previous commit: journals the four pages (images of fill 1), leaves fill 2.
        commit(&mut j, &[(0, 2), (1, 2), (2, 2), (3, 2)], 4).unwrap();
        let full = (RECORDS + 4 * j.stride()) as usize;
        let mut old = vec![0u8; full];
        j.log.read_at(0, &mut old).unwrap();
        j.stop = Some(Stop::JournalSynced);
        commit(&mut j, &[(0, 9), (1, 9), (2, 9), (3, 9), (4, 9)], 4).unwrap_err();
        let mut new = vec![0u8; full];
        j.log.read_at(0, &mut new).unwrap();
        assert_ne!(old[RECORDS as usize..], new[RECORDS as usize..], "records of another nonce");
        drop(j);
        for cut in (0..=full).step_by(8) {
            let j = open(&path, false);
            let mut mix = new[..cut].to_vec();
            mix.extend_from_slice(&old[cut..]);
            j.log.write_at(0, &mix, "P-PG-0").unwrap();
            j.log.sync("P-PG-0").unwrap(); // ORDER(P-PG-0): test: the cut journal is what the next open reads
            drop(j);
            let mut j = open(&path, false);
            let hot = j.recover().unwrap();
            assert_eq!(
                hot,
                cut >= 40,
                "cut {cut}: hot iff the header's fields and checksum survived"
            );
            for p in 0..4 {
                assert_eq!(read(&j, p), 2, "cut {cut}: page {p}");
            }
            assert!(!j.recover().unwrap(), "cut {cut}: recovery invalidated the journal");
        }
        // The database goes on from the previous commit.
        let mut j = open(&path, false);
        commit(&mut j, &[(1, 5)], 4).unwrap();
        assert_eq!([read(&j, 0), read(&j, 1)], [2, 5]);
    }

    #[test]
    fn a_damaged_record_is_skipped_and_a_damaged_header_is_not_hot() {
        let dir = TestDir::new("paged-journal-bad");
        let mut j = open(&dir.join("db"), true);
        commit(&mut j, &[(0, 1), (1, 1)], 0).unwrap();
        j.stop = Some(Stop::StoreSynced);
        commit(&mut j, &[(0, 7), (1, 7)], 2).unwrap_err();
        // Record 1's image damaged: page 1 is left as the commit wrote it; page 0 restored.
        let at = RECORDS + j.stride() + REC_HEAD as u64 + 5;
        j.log.write_at(at, &[0xEE], "P-PG-0").unwrap();
        j.stop = None;
        assert!(j.recover().unwrap());
        assert_eq!((read(&j, 0), read(&j, 1)), (1, 7));
        // A header whose checksum fails is not hot.
        j.stop = Some(Stop::StoreSynced);
        commit(&mut j, &[(0, 3)], 2).unwrap_err();
        j.log.write_at(20, &[0xFF], "P-PG-0").unwrap();
        assert!(!j.recover().unwrap());
        assert_eq!(read(&j, 0), 3);
    }
}
