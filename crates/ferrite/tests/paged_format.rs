//! The paged engine's stored format version 1 (directory, meta page, slotted pages, overflow
//! chains, catalog and row records, WAL frames; `docs/design/format.md`, "Paged engine"):
//! fixture images written by version 1, which this build must open with their content.
//!
//! - `paged-v1/pm-wal.hex`: the PM store (a pool set) under the WAL, dropped without close, so
//!   the last commits are WAL frames that open must replay.
//! - `paged-v1/file-journal.hex`: the file store (`pages`, `log`) under the rollback journal,
//!   closed.
//! - `paged-v1/pm-nvwal.hex`: the PM store under NVWAL (log version 1), dropped without close,
//!   so the commits are NVWAL frames (whole pages, then diffs) that open must replay.
//! - `paged-v1/file-nvwal.hex`: the file store under NVWAL (`pages`, and the pool set
//!   `log.pm/` holding the log), dropped without close: the page file holds the creation's
//!   pages only, the commits are frames in the PM log.
//!
//! Regenerate only for a new format version (a v1 fixture never changes once committed):
//! `cargo test -p ferrite --test paged_format -- --ignored generate` (writes only the
//! fixtures that do not exist yet).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrite::pmem::internals::testing::TestDir;
use ferrite::{
    Database, EngineKind, Error, Options, PagedConfig, PagedProtocol, PagedStore, Predicate,
    Projection, Row, Scan, TableSchema, Type, Value, row,
};

/// One fixture: its file, store and protocol.
struct Fixture {
    name: &'static str,
    store: PagedStore,
    protocol: PagedProtocol,
}

const FIXTURES: [Fixture; 4] = [
    Fixture { name: "pm-wal", store: PagedStore::Pm, protocol: PagedProtocol::Wal },
    Fixture { name: "file-journal", store: PagedStore::File, protocol: PagedProtocol::Journal },
    Fixture { name: "pm-nvwal", store: PagedStore::Pm, protocol: PagedProtocol::Nvwal },
    Fixture { name: "file-nvwal", store: PagedStore::File, protocol: PagedProtocol::Nvwal },
];

/// Segments of 256 KiB keep the PM fixture small.
const SEGMENT: u64 = 256 << 10;

fn options(f: &Fixture, protocol: PagedProtocol) -> Options {
    Options::new()
        .engine(EngineKind::Paged { protocol })
        .pmem(ferrite::pmem::Options::new().segment_size(SEGMENT))
        .paged(PagedConfig { store: f.store, checkpoint_frames: 0, ..PagedConfig::default() })
}

fn path_of(f: &Fixture) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/paged-v1/{}.hex", f.name))
}

fn schema() -> TableSchema {
    TableSchema::new("t")
        .column("k", Type::I64)
        .column("v", Type::Str)
        .column("n", Type::I64)
        .column("b", Type::Bytes)
        .primary_key("k")
        .unique_index("by_v", ["v"])
        .index("by_n", ["n"])
}

/// Key 1000's value: 3 000 bytes, over a quarter of a 4 KiB page, so it lives in an overflow
/// chain.
fn big() -> Vec<u8> {
    (0..3000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn row_of(k: i64) -> Row {
    let b = if k == 1000 { big() } else { vec![k as u8; 8] };
    row![k, format!("v{k}"), k % 7, b]
}

/// The content: keys 0..120 and 1000 inserted in one transaction; then, in a second, every
/// key divisible by 5 below 120 deleted and key 7 updated (n = 99).
fn model() -> BTreeMap<i64, Row> {
    let mut m: BTreeMap<i64, Row> = (0..120).chain([1000]).map(|k| (k, row_of(k))).collect();
    m.retain(|k, _| *k >= 120 || k % 5 != 0);
    m.insert(7, row![7, "v7", 99, vec![7u8; 8]]);
    m
}

fn fill(db: &Database) {
    db.create_table(schema()).unwrap();
    let mut tx = db.begin().unwrap();
    for k in (0..120).chain([1000]) {
        tx.insert("t", row_of(k)).unwrap();
    }
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    for k in (0..120).filter(|k| k % 5 == 0) {
        tx.delete("t", k).unwrap();
    }
    tx.update("t", 7, [("n", Value::from(99))]).unwrap();
    tx.commit().unwrap();
}

fn assert_content(db: &Database, what: &str) {
    let want = model();
    let mut r = db.begin_read().unwrap();
    let rows = r.scan("t", &Scan::primary()).unwrap();
    let got: BTreeMap<i64, Row> = rows
        .into_iter()
        .map(|row| match row.first() {
            Some(Value::I64(k)) => (*k, row),
            other => panic!("{what}: a row without an i64 key: {other:?}"),
        })
        .collect();
    assert_eq!(got, want, "{what}: the rows");
    // The indexes: by_n (non-unique) and by_v (unique).
    let n3 = r.select("t", &[Predicate::eq("n", 3)], &Projection::All).unwrap();
    let want_n3: Vec<&Row> = want.values().filter(|row| row[2] == Value::I64(3)).collect();
    assert_eq!(n3.iter().collect::<Vec<_>>(), want_n3, "{what}: by_n = 3");
    let v = r.select("t", &[Predicate::eq("v", "v1000")], &Projection::All).unwrap();
    assert_eq!(v, vec![row_of(1000)], "{what}: by_v = v1000 (an overflow value)");
    drop(r);
    db.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
}

#[test]
fn v1_fixtures_open_with_their_content() {
    for f in &FIXTURES {
        let dir = TestDir::new(&format!("paged-fixture-{}", f.name));
        let db_dir = dir.path().join("db");
        common::fixture::unpack(&path_of(f), &db_dir);
        let db = Database::open(&db_dir, options(f, f.protocol)).unwrap();
        assert_content(&db, f.name);
        // Still writable, and the write survives a reopen.
        let mut tx = db.begin().unwrap();
        tx.insert("t", row_of(5000)).unwrap();
        tx.commit().unwrap();
        db.close().unwrap();
        let db = Database::open(&db_dir, options(f, f.protocol)).unwrap();
        let mut r = db.begin_read().unwrap();
        assert_eq!(r.get("t", 5000).unwrap(), Some(row_of(5000)), "{}", f.name);
    }
}

#[test]
fn v1_fixtures_refuse_the_other_protocol() {
    for f in &FIXTURES {
        let dir = TestDir::new(&format!("paged-fixture-other-{}", f.name));
        let db_dir = dir.path().join("db");
        common::fixture::unpack(&path_of(f), &db_dir);
        let other = if f.protocol == PagedProtocol::Wal {
            PagedProtocol::Journal
        } else {
            PagedProtocol::Wal
        };
        assert!(
            matches!(Database::open(&db_dir, options(f, other)), Err(Error::Incompatible { .. })),
            "{}",
            f.name
        );
        // The refusal changed nothing.
        let db = Database::open(&db_dir, options(f, f.protocol)).unwrap();
        assert_content(&db, f.name);
    }
}

/// Writes the v1 fixtures (by hand, for a new format version only).
#[test]
#[ignore = "writes the stored fixtures; run by hand for a new format version"]
fn generate() {
    for f in FIXTURES.iter().filter(|f| !path_of(f).exists()) {
        let dir = TestDir::new(&format!("paged-fixture-gen-{}", f.name));
        let db_dir = dir.path().join("db");
        let db = Database::create(&db_dir, options(f, f.protocol)).unwrap();
        fill(&db);
        assert_content(&db, f.name);
        if f.protocol != PagedProtocol::Journal {
            // Dropped, not closed: the commits stay in the log (no checkpoint at 0 frames).
            drop(db);
        } else {
            db.close().unwrap();
        }
        let header = format!(
            "# Paged engine format v1 fixture `{}`: {} store, {} protocol; content in \
             crates/ferrite/tests/paged_format.rs (`model`).\n# Generated by `generate` there; \
             never edit.\n",
            f.name,
            f.store.name(),
            f.protocol.name()
        );
        common::fixture::write_files(&db_dir, &header, &path_of(f), |_| true);
    }
}
