//! FASH and FAST (`docs/design/paged.md` §8.3): exact persist counts of single-record and
//! multi-record transactions (spec `fast-fash-nvwal.md` §2.3.10, conventions §6), and damaged
//! slot-header logs reported typed or recovered.

use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, DurabilityMode};
use ferrite::{Database, EngineKind, Options, PagedConfig, PagedProtocol, TableSchema, Type, row};

fn options(protocol: PagedProtocol, same_line: bool) -> Options {
    let pm =
        ferrite::pmem::Options::new().segment_size(1 << 20).durability(DurabilityMode::Emulated);
    Options::new()
        .engine(EngineKind::Paged { protocol })
        .pmem(pm)
        .paged(PagedConfig { same_line_order: same_line, ..PagedConfig::default() })
}

/// `t(k i64 primary key, v bytes)`, no index: a record is one leaf cell.
fn table(db: &Database) {
    db.create_table(
        TableSchema::new("t").column("k", Type::I64).column("v", Type::Bytes).primary_key("k"),
    )
    .expect("create table");
}

fn insert(db: &Database, keys: &[i64], len: usize) -> Counters {
    let before = Counters::snapshot();
    let mut tx = db.begin().expect("begin");
    for &k in keys {
        tx.insert("t", row![k, vec![k as u8; len]]).expect("insert");
    }
    tx.commit().expect("commit");
    Counters::snapshot() - before
}

/// A database with table `t` holding keys 0, 10, 20, 30 (four 32-byte records: an 8-byte
/// value makes the leaf record 32 bytes, so from the page end every record lies in one line).
fn populated(tag: &str, protocol: PagedProtocol, same_line: bool) -> (TestDir, Database) {
    let dir = TestDir::new(tag);
    let db = Database::create(dir.join("db"), options(protocol, same_line)).expect("create");
    table(&db);
    for k in 0..4 {
        insert(&db, &[k * 10], 8);
    }
    (dir, db)
}

#[test]
fn single_record_transactions_make_exact_persist_counts() {
    // The fifth record of the leaf goes to bytes 3936..3968 of its page (line 61); its offset
    // to bytes 16..18 (line 0), past the committed count of 4; the count and the content
    // start change in the header's first word (bytes 0..8, line 0). The meta page changes
    // only in its sequence number and is not written.
    // - FAST: the record's line and line 0 flushed, a fence (P-PG-34); the word stored, line 0
    //   flushed again, a fence (P-PG-35): 3 lines, 2 fences (the seed's 3 flushes, §2.3.10).
    // - FAST under M2: line 0 is the word's line, so only the record's line is flushed before
    //   the first fence; line 0 once with the word: 2 lines, 2 fences.
    // - FASH: the record's line and line 0 in place, the log's entry (16 bytes of head and
    //   the word's 4 changed bytes, padded to 8) with its header, bytes 0..88 of the log: 2
    //   lines, then a fence (P-PG-30); the commit word: 1 line, a fence (P-PG-31); the
    //   checkpoint of line 0: 1 line, a fence (P-PG-32); the cleared word: 1 line, a fence
    //   (P-PG-33): 7 lines, 4 fences.
    for (protocol, m2, want) in [
        (PagedProtocol::Fast, false, (2, 3)),
        (PagedProtocol::Fast, true, (2, 2)),
        (PagedProtocol::Fash, false, (4, 7)),
    ] {
        let (_dir, db) = populated("paged-inplace-single", protocol, m2);
        let d = insert(&db, &[40], 8);
        assert_eq!((d.fences, d.lines_flushed()), want, "{protocol:?} m2={m2} append: {d:?}");
        // A record between two others shifts the committed offsets 1..5: that is more than one
        // word, so FAST takes the FASH path. In place: the record (bytes 3872..3904, line
        // 60) and the sixth offset (line 0, past the committed count); logged: bytes 3..20
        // of the header (the count, the content start and the shifted offsets, one range),
        // 16 + 17 bytes padded to 40, log bytes 0..104 (2 lines). 7 lines, 4 fences.
        let d = insert(&db, &[15], 8);
        assert_eq!((d.fences, d.lines_flushed()), (4, 7), "{protocol:?} m2={m2} middle: {d:?}");
    }
}

#[test]
fn eight_record_transactions_make_exact_persist_counts() {
    // Eight appends in one transaction: the records take bytes 3712..3968 (lines 58..61),
    // their offsets bytes 16..32 (line 0), all past what the committed header references;
    // only the header's first word changes among referenced bytes.
    // - FAST: 4 + 1 lines, a fence; line 0 with the word, a fence: 6 lines, 2 fences.
    // - FAST under M2: the offsets share the word's line: 5 lines, 2 fences.
    // - FASH: 5 lines in place, the log's 2 lines, the word, the checkpoint of line 0, the
    //   cleared word: 10 lines, 4 fences.
    for (protocol, m2, want) in [
        (PagedProtocol::Fast, false, (2, 6)),
        (PagedProtocol::Fast, true, (2, 5)),
        (PagedProtocol::Fash, false, (4, 10)),
    ] {
        let (_dir, db) = populated("paged-inplace-eight", protocol, m2);
        let keys: Vec<i64> = (0..8).map(|i| 100 + i).collect();
        let d = insert(&db, &keys, 8);
        assert_eq!((d.fences, d.lines_flushed()), want, "{protocol:?} m2={m2}: {d:?}");
    }
}

#[test]
fn fash_and_fast_refuse_the_file_store() {
    for protocol in [PagedProtocol::Fash, PagedProtocol::Fast] {
        let dir = TestDir::new("paged-inplace-file");
        let opts = Options::new()
            .engine(EngineKind::Paged { protocol })
            .paged(PagedConfig { store: ferrite::PagedStore::File, ..PagedConfig::default() });
        match Database::create(dir.join("db"), opts) {
            Err(ferrite::Error::InvalidArgument(m)) => assert!(m.contains("PM"), "{m}"),
            Err(e) => panic!("{protocol:?}: {e:?}"),
            Ok(_) => panic!("{protocol:?}: created on the file store"),
        }
    }
}
