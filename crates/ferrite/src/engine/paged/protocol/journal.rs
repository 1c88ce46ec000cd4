//! The rollback journal (SQLite's rollback mode, spec `fast-fash-nvwal.md` §0.1; the
//! baseline both seeds compare against): before a page is overwritten in place, its original
//! image goes to the journal, synced, then the journal's header, synced; a crash in the
//! middle of a commit is undone at the next open by writing the originals back ("hot
//! journal").
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
//!   from the header's sync (P-PG-10) until its invalidation is durable (P-PG-12), and at no
//!   other time.
//! - J2: while the journal is hot, every page of the store that the interrupted commit may
//!   have overwritten has a record among the header's `nrec`, holding its image before that
//!   commit; pages at or past `pages_before` were new and need nothing.
//! - J3: the records a hot header counts are whole: each has the header's nonce, a matching
//!   checksum and a page below `pages_before`, because they were durable before the header
//!   was written (P-PG-14, SQLite's classic order: sync the records, then write the header
//!   with their count and sync again). A crash before the header's sync leaves no hot
//!   journal, and the store untouched; so a counted record that fails is media damage:
//!   recovery checks every record before writing any back and reports `Corrupted`, leaving
//!   the store and the journal as they are. (With one sync for records and header, a torn
//!   record under a durable header was a legal crash image, and recovery had to skip it: a
//!   hot journal of version 1, written so, is still recovered by that rule.)
//! - J4: the header's nonce changes with every commit, so a stale record never passes as the
//!   current commit's.
//! - J5: when a commit writes its header, the header on the medium is all zero. A header a
//!   crash tore (on PM, per 8-byte word: an invalidation cut short, or a header write) is not
//!   hot, but its words could complete an old header: were the next commit's header write
//!   torn in turn, its magic word over the rest of that old header would make the old
//!   header hot again, counting records the next commit had overwritten (found by
//!   `db-paged-journal`'s nested crashes once P-PG-14 made such a record `Corrupted`). So
//!   recovery zeroes a header that is neither hot nor zero (P-PG-12) before `open` returns.
//!
//! # Ordering (rules in `docs/design/persistence.md`)
//! - P-PG-14: the records are durable (one journal sync) before the header is written.
//! - P-PG-10: the header is durable (a second journal sync) before any page of the store is
//!   overwritten.
//! - P-PG-11: the new pages are durable before the journal is invalidated (one store sync).
//! - P-PG-12: the invalidation (the whole header zeroed) is durable before `commit`
//!   returns: that is the commit point.
//! - P-PG-13 (recovery): the originals written back are durable before the journal is
//!   invalidated (then P-PG-12).
//!
//! So a commit that overwrites pages issues four syncs (three if it only adds pages: no
//! records, no P-PG-14 sync).
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
use crate::engine::paged::store::log::LogFile;
use crate::engine::paged::store::{PageNo, PageStore};
use crate::error::{Error, Result};

/// "FERRJNL1".
const MAGIC: u64 = u64::from_le_bytes(*b"FERRJNL1");
/// Format version of the journal: 2 since records are synced before the header (P-PG-14).
/// The layout is version 1's; the version tells recovery which rule a hot journal was
/// written under (J3).
const VERSION: u32 = 2;
/// The first version whose hot header vouches for its records (J3).
const STRICT: u32 = 2;
/// Where the records begin (the header has a sector to itself).
const RECORDS: u64 = 512;
/// Bytes before a record's image.
const REC_HEAD: usize = size_of::<RecordHead>();
/// Bytes of the header that carry fields.
const HEAD: usize = size_of::<JournalHead>();

/// Where a commit stops, to model a crash in unit tests (the crash tester models real ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// After the records are synced, before the header is written.
    RecordsSynced,
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

    /// Commits `batch` (module docs: P-PG-14, 10, 11, 12). On an error the handle must be
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
            self.log.write_at(at, &rec, "P-PG-14")?; // ORDER(P-PG-14): an original, durable at the records' sync below
        }
        if nrec > 0 {
            self.log.sync("P-PG-14")?; // ORDER(P-PG-14): the records durable before the header that counts them is written: a hot header vouches for them (J3)
        }
        self.stopped(Stop::RecordsSynced)?;
        let header = Header { page_size: ps as u32, pages_before: batch.pages_before, nrec, nonce };
        self.log.write_at(0, header.encode().as_bytes(), "P-PG-10")?; // ORDER(P-PG-10): the header makes the journal hot at the sync below
        self.log.sync("P-PG-10")?; // ORDER(P-PG-10): the header (and with it the journal) durable before any page is overwritten
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

    /// At open: rolls back a hot journal's commit (J1-J3, P-PG-13, P-PG-12), or zeroes a
    /// torn header (J5, P-PG-12). Returns whether the journal was hot. Errors: `Corrupted`
    /// for a hot journal of another page size, or one with a damaged record (J3; nothing is
    /// written then); `Incompatible` for a newer journal version.
    pub(crate) fn recover(&mut self) -> Result<bool> {
        if self.log.capacity()? < RECORDS {
            return Ok(false);
        }
        let mut hb = JournalHead::default();
        self.log.read_at(0, hb.as_mut_bytes())?;
        let Some((h, version)) = Header::decode(&hb) else {
            // J5: a torn header (an invalidation or a header write a crash cut) is zeroed
            // before any commit writes records under it.
            if hb.as_bytes().iter().any(|&b| b != 0) {
                tracing::info!("paged: zeroed a torn journal header");
                self.invalidate()?;
            }
            return Ok(false);
        };
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
        // J3: every record the hot header counts is whole (P-PG-14 made them durable before
        // the header); one that is not is media damage. All are checked before the first
        // page is written back, so a damaged journal is reported with the store untouched.
        // A version-1 journal (one sync for records and header) may hold a record torn at a
        // crash: it is skipped, as that version's recovery did (the store was not touched).
        let strict = version >= STRICT;
        let room = self.log.capacity()?.saturating_sub(RECORDS) / self.stride();
        if h.nrec > room && strict {
            return Err(Error::Corrupted {
                what: format!(
                    "hot journal header counts {} records, the journal holds {room}",
                    h.nrec
                ),
                at: "journal header".into(),
            });
        }
        let mut rec = vec![0u8; REC_HEAD + ps];
        let mut whole = Vec::new();
        for i in 0..h.nrec.min(room) {
            match self.record(i, &h, &mut rec)? {
                Ok(_) => whole.push(i),
                Err(e) if strict => return Err(e),
                Err(_) => {}
            }
        }
        for &i in &whole {
            let pgno = self.record(i, &h, &mut rec)??;
            self.store.ensure(u64::from(pgno) + 1)?;
            self.store.write_page(pgno, &rec[REC_HEAD..], "P-PG-13")?; // ORDER(P-PG-13): an original written back, durable at the sync below
        }
        self.store.sync("P-PG-13")?; // ORDER(P-PG-13): the originals durable before the journal is invalidated
        tracing::info!(
            restored = whole.len(),
            of = h.nrec,
            version,
            "paged: rolled back a hot journal"
        );
        self.invalidate()?;
        Ok(true)
    }

    /// Reads record `i` of the hot journal `h` into `rec` and returns its page, or (inner
    /// `Err`) the `Corrupted` error of a record that is not the one the header vouches for
    /// (J3): another nonce, a checksum that fails, or a page that did not exist before the
    /// commit (J2). The outer `Err` is a failed read.
    fn record(&self, i: u64, h: &Header, rec: &mut [u8]) -> Result<Result<PageNo>> {
        let at = RECORDS + i * self.stride();
        self.log.read_at(at, rec)?;
        let head = layout::read::<RecordHead>(rec).unwrap_or_default();
        let (pgno, nonce, crc) = (head.pgno.get(), head.nonce.get(), head.crc.get());
        let problem = if nonce != h.nonce {
            format!("record {i} of {} belongs to another commit (nonce {nonce:#x})", h.nrec)
        } else if crc != record_crc(pgno, nonce, &rec[REC_HEAD..]) {
            format!("record {i} of {} (page {pgno}) fails its checksum", h.nrec)
        } else if u64::from(pgno) >= h.pages_before {
            format!(
                "record {i} of {} is of page {pgno}, past the {} pages before the commit",
                h.nrec, h.pages_before
            )
        } else {
            return Ok(Ok(pgno));
        };
        Ok(Err(Error::Corrupted {
            what: format!("hot journal damaged, nothing rolled back: {problem}"),
            at: format!("journal byte {at}"),
        }))
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

    /// A journal in `dir` after pages 0 and 1 were committed with fill 1, then a commit of
    /// fill 7 stopped at `stop` (its journal hot from `JournalSynced` on).
    fn interrupted(dir: &TestDir, stop: Stop) -> Journal {
        let mut j = open(&dir.join("db"), true);
        commit(&mut j, &[(0, 1), (1, 1)], 0).unwrap();
        j.stop = Some(stop);
        commit(&mut j, &[(0, 7), (1, 7)], 2).unwrap_err();
        j
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
    /// the store sync, rolled back too (the commit point is the invalidation). Stopped after
    /// the records' sync, before the header, the journal is not hot and the store untouched.
    #[test]
    fn an_interrupted_commit_is_rolled_back_at_open() {
        for stop in [Stop::RecordsSynced, Stop::JournalSynced, Stop::HalfWritten, Stop::StoreSynced]
        {
            let dir = TestDir::new("paged-journal-stop");
            let mut j = open(&dir.join("db"), true);
            commit(&mut j, &[(0, 1), (1, 1), (2, 1), (3, 1)], 0).unwrap();
            j.stop = Some(stop);
            let r = commit(&mut j, &[(0, 9), (1, 9), (2, 9), (3, 9), (4, 9)], 4);
            assert!(r.is_err(), "{stop:?}");
            drop(j);
            let mut j = open(&dir.join("db"), false);
            let hot = stop != Stop::RecordsSynced;
            assert_eq!(j.recover().unwrap(), hot, "{stop:?}: the journal is hot iff its header is");
            for p in 0..4 {
                assert_eq!(read(&j, p), 1, "{stop:?}: page {p}");
            }
            assert!(!j.recover().unwrap(), "{stop:?}: recovery invalidated the journal");
            // The database goes on.
            commit(&mut j, &[(2, 5)], 4).unwrap();
            assert_eq!(read(&j, 2), 5);
        }
    }

    /// A crash while a commit writes its journal keeps only part of what it wrote, in the
    /// order P-PG-14 and P-PG-10 impose, modelled in 8-byte words (PM's unit, M1): first any
    /// length `cut` of the new records, with the previous commit's journal (its header
    /// zeroed, its records of an older nonce) in the bytes after the cut; then, the records
    /// whole, any length of the new header over the zeroed one. The store was not touched
    /// yet (P-PG-10), so at every cut the next open must leave the previous commit's pages: a
    /// header that did not survive whole is not hot and is ignored (J1); a whole one finds
    /// every record it counts whole (J3) and rolls back. Never a panic, never `Corrupted`,
    /// and the journal is not hot after recovery.
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
        assert!(old[..HEAD].iter().all(|&b| b == 0), "the previous header is invalidated");
        j.stop = Some(Stop::JournalSynced);
        commit(&mut j, &[(0, 9), (1, 9), (2, 9), (3, 9), (4, 9)], 4).unwrap_err();
        let mut new = vec![0u8; full];
        j.log.read_at(0, &mut new).unwrap();
        assert_ne!(old[RECORDS as usize..], new[RECORDS as usize..], "records of another nonce");
        drop(j);
        let header = (0..RECORDS as usize).step_by(8).map(|cut| (false, cut));
        let records = (RECORDS as usize..=full).step_by(8).map(|cut| (true, cut));
        for (in_records, cut) in records.chain(header) {
            let mix = if in_records {
                [&old[..RECORDS as usize], &new[RECORDS as usize..cut], &old[cut..]].concat()
            } else {
                [&new[..cut], &old[cut..RECORDS as usize], &new[RECORDS as usize..]].concat()
            };
            let j = open(&path, false);
            j.log.write_at(0, &mix, "P-PG-0").unwrap();
            j.log.sync("P-PG-0").unwrap(); // ORDER(P-PG-0): test: the cut journal is what the next open reads
            drop(j);
            let mut j = open(&path, false);
            let hot = j.recover().unwrap_or_else(|e| panic!("cut {cut}: {e}"));
            assert_eq!(
                hot,
                !in_records && cut >= 40,
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

    /// Regression ([R2] item 8): a record of a hot journal that failed its checksum was
    /// skipped, its page left as the interrupted commit wrote it, while the other records
    /// were written back: a half rolled-back commit, reported as a successful recovery.
    /// Records and header shared one sync then, so a torn record could not be told from a
    /// damaged one. Now the records are durable before the header (P-PG-14), a counted record
    /// that fails is damage: `Corrupted`, with the store and the journal left as they are.
    /// Before the fix `recover` returned `Ok(true)` and page 0 was rolled back to 1, page 1
    /// kept the commit's 7.
    #[test]
    fn a_damaged_record_is_corruption_and_a_damaged_header_is_not_hot() {
        let dir = TestDir::new("paged-journal-bad");
        let mut j = interrupted(&dir, Stop::StoreSynced);
        // Record 1's image damaged: nothing is rolled back, and it stays so.
        let at = RECORDS + j.stride() + REC_HEAD as u64 + 5;
        let mut b = [0u8; 1];
        j.log.read_at(at, &mut b).unwrap();
        j.log.write_at(at, &[b[0] ^ 0x10], "P-PG-0").unwrap();
        j.stop = None;
        for _ in 0..2 {
            let err = j.recover().unwrap_err();
            assert!(
                matches!(&err, Error::Corrupted { what, .. } if what.contains("record 1 of 2")),
                "{err}"
            );
            assert_eq!((read(&j, 0), read(&j, 1)), (7, 7), "nothing written back");
        }
        // Repaired, the journal rolls the commit back whole.
        j.log.write_at(at, &b, "P-PG-0").unwrap();
        assert!(j.recover().unwrap());
        assert_eq!((read(&j, 0), read(&j, 1)), (1, 1));
        // A header whose checksum fails is not hot.
        j.stop = Some(Stop::StoreSynced);
        commit(&mut j, &[(0, 3)], 2).unwrap_err();
        j.log.write_at(20, &[0xFF], "P-PG-0").unwrap();
        assert!(!j.recover().unwrap());
        assert_eq!(read(&j, 0), 3);
    }

    /// J5, the image `db-paged-journal`'s nested crashes found: a commit's invalidation torn
    /// (on PM per word: only the header's word 1, version and page size, zeroed, so not hot)
    /// left the old header's other words on the medium; the next commit synced its records
    /// (P-PG-14) over the old ones, and its header write was cut after word 1, which equals
    /// the old header's. The image then held the old header whole, hot, counting records of
    /// another nonce: `Corrupted` for a crash. Recovery now zeroes a header that is neither
    /// hot nor zero, so the second header write lands on zeros; without that the last
    /// `recover` below fails with `Corrupted`.
    #[test]
    fn a_torn_header_is_zeroed_so_that_an_old_header_cannot_return() {
        let dir = TestDir::new("paged-journal-torn-header");
        let mut j = interrupted(&dir, Stop::StoreSynced);
        let mut old = [0u8; HEAD];
        j.log.read_at(0, &mut old).unwrap();
        // The invalidation torn: only word 1 (version and page size) zeroed.
        let mut torn = old;
        torn[8..16].fill(0);
        j.log.write_at(0, &torn, "P-PG-0").unwrap();
        j.stop = None;
        assert!(!j.recover().unwrap(), "a torn header is not hot");
        let mut now = [0u8; HEAD];
        j.log.read_at(0, &mut now).unwrap();
        assert_eq!(now, [0u8; HEAD], "recovery zeroed it");
        assert_eq!((read(&j, 0), read(&j, 1)), (7, 7), "the commit stands");
        // The next commit's records synced, its header cut after word 1.
        j.stop = Some(Stop::RecordsSynced);
        commit(&mut j, &[(0, 8), (1, 8)], 2).unwrap_err();
        j.log.write_at(8, &old[8..16], "P-PG-0").unwrap();
        j.stop = None;
        assert!(!j.recover().unwrap_or_else(|e| panic!("{e}")), "no old header returns");
        assert_eq!((read(&j, 0), read(&j, 1)), (7, 7));
    }

    /// A hot journal of version 1 (one sync for records and header) is recovered by that
    /// version's rule: a record torn at the crash is skipped, not `Corrupted` (its page had
    /// not been overwritten); a header of a version newer than this build's is
    /// `Incompatible`.
    #[test]
    fn a_version_1_hot_journal_skips_a_failing_record() {
        let dir = TestDir::new("paged-journal-v1");
        let mut j = interrupted(&dir, Stop::JournalSynced);
        let rewrite = |j: &Journal, version: u32| {
            let mut hb = JournalHead::default();
            j.log.read_at(0, hb.as_mut_bytes()).unwrap();
            hb.version = version.into();
            hb.crc = crc32c::crc32c(&hb.as_bytes()[8..36]).into();
            j.log.write_at(0, hb.as_bytes(), "P-PG-0").unwrap();
        };
        rewrite(&j, VERSION + 1);
        let err = j.recover().unwrap_err();
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        rewrite(&j, 1);
        // Record 0 torn (page 0's store page untouched: the commit stopped before).
        j.log.write_at(RECORDS + REC_HEAD as u64, &[0xEE; 8], "P-PG-0").unwrap();
        // The commit went on to overwrite page 1 only.
        j.store().write_page(1, &page(7), "P-PG-0").unwrap();
        assert!(j.recover().unwrap());
        assert_eq!((read(&j, 0), read(&j, 1)), (1, 1));
    }
}
