//! SOFORT through the public `Database` API: exact persist counts of single-row transactions,
//! bad input at open (corrupt, truncated, newer, locked: a typed error and no byte changed),
//! oversized values, a full pool, and the recovery report.
//!
//! Pools are small (1-2 MiB segments) under `FERRITE_POOL_DIR` or `/dev/shm`.

use std::collections::BTreeMap;
use std::path::Path;

use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, DurabilityMode};
use ferrite::{
    Database, EngineKind, Error, Options, RecoveryMode, Scan, SofortConfig, TableSchema, Type, row,
};

fn options(segment: u64) -> Options {
    let pm =
        ferrite::pmem::Options::new().segment_size(segment).durability(DurabilityMode::Emulated);
    Options::new().engine(EngineKind::Sofort).pmem(pm)
}

fn kv(db: &Database) {
    db.create_table(
        TableSchema::new("kv")
            .column("k", Type::I64)
            .column("v", Type::Str)
            .primary_key("k")
            .index("by_v", ["v"]),
    )
    .expect("create table");
}

fn value(k: i64) -> String {
    format!("{k:0100}")
}

fn insert(db: &Database, k: i64) -> ferrite::Result<()> {
    let mut tx = db.begin()?;
    tx.insert("kv", row![k, value(k)])?;
    tx.commit()
}

/// Every file of the database directory with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

/// A database with 40 committed rows, closed cleanly; returns its directory.
fn populated(tag: &str, segment: u64) -> (TestDir, std::path::PathBuf) {
    let dir = TestDir::new(tag);
    let path = dir.join("db");
    let db = Database::create(&path, options(segment)).expect("create");
    kv(&db);
    for k in 0..40 {
        insert(&db, k).expect("insert");
    }
    db.close().expect("close");
    (dir, path)
}

/// Where the SOFORT catalog (magic `FERRSOF1`) lies: (segment file, offset).
fn catalog(path: &Path) -> (String, usize) {
    for (name, bytes) in files(path) {
        if let Some(at) = bytes.windows(8).position(|w| w == b"FERRSOF1") {
            return (name, at);
        }
    }
    panic!("no SOFORT catalog in {}", path.display());
}

fn poke(path: &Path, file: &str, at: usize, bytes: &[u8]) {
    let f = path.join(file);
    let mut b = std::fs::read(&f).expect("read");
    b[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(&f, b).expect("write");
}

/// Opens `path`, expecting an error that `expect` accepts, and checks that no byte changed.
fn open_fails(path: &Path, what: &str, expect: fn(&Error) -> bool) {
    let before = files(path);
    match Database::open(path, options(1 << 20)) {
        Ok(_) => panic!("{what}: open succeeded"),
        Err(e) => assert!(expect(&e), "{what}: unexpected error {e} ({e:?})"),
    }
    let after = files(path);
    for (name, b) in &before {
        let a = after.get(name).map(Vec::as_slice).unwrap_or_default();
        let diff: Vec<usize> =
            (0..b.len().max(a.len())).filter(|&i| b.get(i) != a.get(i)).collect();
        assert!(
            diff.is_empty(),
            "{what}: a failed open changed {name} at {:?}",
            &diff[..diff.len().min(16)]
        );
    }
    assert_eq!(before.len(), after.len(), "{what}: files added or removed");
}

#[test]
fn single_row_transactions_make_exact_persist_counts() {
    // The commit protocol (docs/design/sofort.md §4.4): F1 flushes the row's MVCC line(s),
    // one line per column slot (every column has its own array) and the value's extent
    // (written with ordinary stores below 256 bytes), with the MVCC line(s) of the slot's
    // previous finalization (which only stores), then fences; F2 writes the slot's header
    // line (commit word last), flushes it and fences. Steady state: the chunk and heap chunk
    // exist.
    let dir = TestDir::new("sofort-counts");
    let db = Database::create(dir.join("db"), options(1 << 20)).expect("create");
    kv(&db);
    for k in 0..4 {
        insert(&db, k).expect("warm-up");
    }
    // Row 100 is the fifth row: its MVCC line is the second one (the previous finalization's,
    // row 3, is the first); its 104-byte extent (100 bytes padded to words) follows four
    // others in the first heap chunk, at offset 416: lines 6, 7 and 8 of the chunk.
    let before = Counters::snapshot();
    insert(&db, 100).expect("insert");
    let d = Counters::snapshot() - before;
    assert_eq!((d.fences, d.lines_flushed()), (2, 2 + 2 + 3 + 1), "single-row insert: {d:?}");
    assert_eq!(d.nt_bytes, 0, "no non-temporal stores for small values: {d:?}");

    // Update of row 100 (row id 4): its new version takes row id 5, on the same MVCC line
    // (four 16-byte entries per line), which is also the previous finalization's: one line
    // flushed at F1; the new extent at offset 520 spans lines 8 and 9.
    let before = Counters::snapshot();
    let mut tx = db.begin().expect("begin");
    tx.update("kv", 100, [("v", value(7))]).expect("update");
    tx.commit().expect("commit");
    let d = Counters::snapshot() - before;
    assert_eq!((d.fences, d.lines_flushed()), (2, 1 + 2 + 2 + 1), "single-row update: {d:?}");

    // (When the two versions lie on two MVCC lines, both are flushed at F1; the core's unit
    // test pins that case.)

    // Read-only transactions and aborts persist nothing.
    let before = Counters::snapshot();
    let mut r = db.begin_read().expect("begin_read");
    assert!(r.get("kv", 100).expect("get").is_some());
    drop(r);
    let mut tx = db.begin().expect("begin");
    tx.insert("kv", row![200, value(200)]).expect("insert");
    tx.abort();
    let d = Counters::snapshot() - before;
    assert_eq!((d.fences, d.lines_flushed()), (0, 0), "read-only and abort: {d:?}");
    db.close().expect("close");
}

#[test]
fn corrupt_catalogs_are_typed_errors_and_change_nothing() {
    let (_dir, path) = populated("sofort-corrupt", 1 << 20);
    let (file, at) = catalog(&path);
    let original = std::fs::read(path.join(&file)).expect("read");

    poke(&path, &file, at, b"XERRSOF1");
    open_fails(&path, "bad magic", |e| matches!(e, Error::Corrupted { .. }));
    std::fs::write(path.join(&file), &original).expect("restore");

    // A byte inside the checksummed part (the compat flags at offset 16).
    poke(&path, &file, at + 16, &[0x40]);
    open_fails(&path, "bad crc", |e| matches!(e, Error::Corrupted { .. }));
    std::fs::write(path.join(&file), &original).expect("restore");

    // Format version 3 (offset 8): a newer format is refused before the checksum is checked.
    poke(&path, &file, at + 8, &3u32.to_le_bytes());
    open_fails(&path, "newer version", |e| matches!(e, Error::Incompatible { .. }));
    std::fs::write(path.join(&file), &original).expect("restore");

    // Restored: it opens, and every row is there.
    let db = Database::open(&path, options(1 << 20)).expect("open restored");
    let mut r = db.begin_read().expect("begin_read");
    assert_eq!(r.scan("kv", &Scan::primary()).expect("scan").len(), 40);
}

#[test]
fn truncated_or_missing_segments_are_typed_errors_and_change_nothing() {
    // 1 MiB segments and ~1.3 MiB of data (40 rows of 100-byte values are small, so add
    // larger ones) make the set grow to several segments.
    let dir = TestDir::new("sofort-truncated");
    let path = dir.join("db");
    let db = Database::create(&path, options(1 << 20)).expect("create");
    kv(&db);
    for k in 0..160 {
        let mut tx = db.begin().expect("begin");
        tx.insert("kv", row![k, "x".repeat(12_000)]).expect("insert");
        tx.commit().expect("commit");
    }
    db.close().expect("close");
    let names: Vec<String> = files(&path).into_keys().collect();
    assert!(names.len() >= 2, "expected several segments: {names:?}");
    let last = names.last().expect("a segment").clone();
    let original = std::fs::read(path.join(&last)).expect("read");

    std::fs::write(path.join(&last), &original[..original.len() / 2]).expect("truncate");
    open_fails(&path, "segment cut short", |e| {
        matches!(e, Error::Corrupted { .. } | Error::Incompatible { .. })
    });

    std::fs::remove_file(path.join(&last)).expect("remove");
    open_fails(&path, "segment missing", |e| matches!(e, Error::Corrupted { .. }));

    std::fs::write(path.join(&last), &original).expect("restore");
    let db = Database::open(&path, options(1 << 20)).expect("open restored");
    let mut r = db.begin_read().expect("begin_read");
    assert_eq!(r.scan("kv", &Scan::primary()).expect("scan").len(), 160);
}

#[test]
fn a_second_opener_gets_locked_and_changes_nothing() {
    let (_dir, path) = populated("sofort-locked", 1 << 20);
    let db = Database::open(&path, options(1 << 20)).expect("first open");
    let before = files(&path);
    match Database::open(&path, options(1 << 20)) {
        Err(Error::Locked { .. }) => {}
        other => panic!("second open: {other:?}"),
    }
    assert!(files(&path) == before, "the second opener changed the files");
    // Creating over an existing database is refused too.
    match Database::create(&path, options(1 << 20)) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {}
        other => panic!("create over a database: {other:?}"),
    }
    insert(&db, 1000).expect("the first opener still works");
    db.close().expect("close");
    // A missing database is `Io` of kind `NotFound`.
    match Database::open(path.join("nope"), options(1 << 20)) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        other => panic!("open of nothing: {other:?}"),
    }
}

#[test]
fn oversized_values_are_typed_errors_without_effect() {
    let dir = TestDir::new("sofort-oversized");
    let db = Database::create(dir.join("db"), options(1 << 20)).expect("create");
    kv(&db);
    insert(&db, 1).expect("insert");
    let big = "x".repeat(15_361);
    let mut tx = db.begin().expect("begin");
    match tx.insert("kv", row![2, big.clone()]) {
        Err(Error::ValueTooLarge { table, column, len: 15_361, max: 15_360 }) => {
            assert_eq!((table.as_str(), column.as_str()), ("kv", "v"));
        }
        other => panic!("oversized insert: {other:?}"),
    }
    assert!(matches!(tx.update("kv", 1, [("v", big)]), Err(Error::ValueTooLarge { .. })));
    // Neither failed operation had an effect; the transaction is usable.
    assert_eq!(tx.get("kv", 1).expect("get"), Some(row![1, value(1)]));
    assert_eq!(tx.get("kv", 2).expect("get"), None);
    tx.insert("kv", row![2, "x".repeat(15_360)]).expect("the largest value fits");
    tx.update("kv", 1, [("v", "one")]).expect("update");
    tx.commit().expect("commit");
    let mut r = db.begin_read().expect("begin_read");
    assert_eq!(r.get("kv", 1).expect("get"), Some(row![1, "one"]));
    // Schema misuse is a typed error as well.
    assert!(matches!(r.get("nope", 1), Err(Error::Schema(_))));
    assert!(matches!(r.get("kv", "not an i64"), Err(Error::Schema(_))));
}

#[test]
fn a_full_pool_is_pool_full_and_the_database_stays_usable() {
    let dir = TestDir::new("sofort-full");
    let path = dir.join("db");
    let pm = ferrite::pmem::Options::new()
        .segment_size(1 << 20)
        .max_pool_size(3 << 20)
        .durability(DurabilityMode::Emulated);
    let opts = Options::new().engine(EngineKind::Sofort).pmem(pm);
    let db = Database::create(&path, opts.clone()).expect("create");
    kv(&db);
    for k in 0..10 {
        insert(&db, k).expect("insert");
    }
    // One transaction inserting large values until the pool is full.
    let mut tx = db.begin().expect("begin");
    let mut full = None;
    for k in 1000..2000 {
        if let Err(e) = tx.insert("kv", row![k, "y".repeat(15_000)]) {
            full = Some(e);
            break;
        }
    }
    assert!(matches!(full, Some(Error::PoolFull { .. })), "expected PoolFull: {full:?}");
    tx.abort();
    // Earlier commits are intact; the aborted transaction left nothing.
    let mut r = db.begin_read().expect("begin_read");
    assert_eq!(r.scan("kv", &Scan::primary()).expect("scan").len(), 10);
    drop(r);
    // Small transactions still succeed (the aborted one's space is free again).
    for k in 10..20 {
        insert(&db, k).expect("a small insert after PoolFull");
    }
    db.close().expect("close");
    let db = Database::open(&path, opts).expect("reopen");
    let mut r = db.begin_read().expect("begin_read");
    assert_eq!(r.scan("kv", &Scan::primary()).expect("scan").len(), 20);
}

#[test]
fn open_reports_recovery_times() {
    let (_dir, path) = populated("sofort-report", 1 << 20);
    let created = Database::create(path.with_extension("new"), options(1 << 20)).expect("create");
    assert!(created.recovery_report().is_none(), "create recovers nothing");
    drop(created);
    std::fs::remove_dir_all(path.with_extension("new")).expect("cleanup");

    let db = Database::open(&path, options(1 << 20)).expect("open");
    let r = db.recovery_report().expect("a report");
    assert!(r.clean_shutdown, "{r:?}");
    assert_eq!((r.tables, r.live_rows, r.undone), (1, 40, 0), "{r:?}");
    assert!(r.time_to_open <= r.time_to_index_rebuild, "{r:?}");
    assert!(r.time_to_index_rebuild <= r.time_to_first_transaction, "{r:?}");
    // A drop without close still reopens with every commit.
    insert(&db, 1000).expect("insert");
    drop(db);
    let db = Database::open(&path, options(1 << 20)).expect("reopen");
    let r = db.recovery_report().expect("a report");
    assert_eq!((r.live_rows, r.recovery.as_str()), (41, "synchronous"), "{r:?}");
    drop(db);
    // The report names how the indexes were recovered: instant, or the Table 6.1 label.
    for (config, want) in [
        (SofortConfig { recovery: RecoveryMode::Instant, ..Default::default() }, "instant"),
        (
            SofortConfig {
                recovery_strategy: Some("rk.Qad.R2ad".parse().expect("a label")),
                ..Default::default()
            },
            "rk.Qad.R2ad",
        ),
    ] {
        let db = Database::open(&path, options(1 << 20).sofort(config)).expect("reopen");
        db.wait_recovered().expect("rebuilt");
        assert_eq!(db.recovery_report().expect("a report").recovery, want);
        db.close().expect("close");
    }
}

#[test]
fn check_summarises_a_sound_database() {
    let (_dir, path) = populated("sofort-check", 1 << 20);
    let db = Database::open(&path, options(1 << 20)).expect("open");
    let summary = db.check().expect("a sound database checks");
    assert!(summary.starts_with("sofort:") && summary.contains("40 live"), "{summary}");
    let reference = Database::create("unused", Options::new().engine(EngineKind::Reference))
        .expect("reference");
    assert!(reference.check().expect("reference").starts_with("reference:"));
}

/// Regression ([R2] item 9): `close` with a transaction still open took the store out of
/// the engine before it found the transaction, then returned `InvalidArgument` with the store
/// half closed: the open transaction's commit failed ("the database is closed"), its writes
/// were lost, and nothing closed the pool cleanly (the next open recovered as after a crash).
/// Now `close` refuses with everything left open: the transaction commits, and when it is
/// dropped (the engine's last handle) the store closes cleanly.
#[test]
fn close_with_an_open_transaction_refuses_and_leaves_the_database_open() {
    let (_dir, path) = populated("sofort-close-live", 1 << 20);
    let db = Database::open(&path, options(1 << 20)).expect("open");
    let mut tx = db.begin().expect("begin");
    tx.insert("kv", row![500i64, value(500)]).expect("insert");
    let err = db.close().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(err.to_string().contains("still open"), "{err}");
    tx.insert("kv", row![501i64, value(501)]).expect("the transaction goes on");
    tx.commit().expect("commit after the refused close");
    let db = Database::open(&path, options(1 << 20)).expect("reopen");
    let r = db.recovery_report().expect("a report");
    assert!(r.clean_shutdown, "closed cleanly when the last transaction ended: {r:?}");
    assert_eq!(r.live_rows, 42, "{r:?}");
    db.close().expect("close");
}
