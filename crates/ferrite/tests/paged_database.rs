//! The paged engine (`docs/design/paged.md`) through the public `Database` API, under each
//! commit protocol:
//! - a damaged page (bytes flipped in the pool files of a closed database) is
//!   `Error::Corrupted` from every operation that reads it, and from `check`, never a panic;
//!   a damaged catalog or meta page makes `open` fail with `Corrupted`;
//! - threads: a writer thread commits round after round while reader threads hold read-only
//!   transactions begun at different rounds, each of which keeps its snapshot; a second
//!   writer gets `Busy` while the first is open. All in lockstep by channels: nothing depends
//!   on timing or scheduling.
//!
//! Pools are small (2 MiB segments) under `FERRITE_POOL_DIR` or `/dev/shm`.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use ferrite::pmem::internals::testing::TestDir;
use ferrite::{Database, EngineKind, Error, Options, Row, Scan, TableSchema, Type, row};

fn options(kind: EngineKind) -> Options {
    Options::new().engine(kind).pmem(ferrite::pmem::Options::new().segment_size(2 << 20))
}

/// Table `kv`: primary key `k`, an indexed `v`.
fn kv(db: &Database) {
    db.create_table(
        TableSchema::new("kv")
            .column("k", Type::I64)
            .column("v", Type::I64)
            .primary_key("k")
            .index("by_v", ["v"]),
    )
    .expect("create table");
}

// ---------------------------------------------------------------------------------------------
// Damaged pages

/// A closed database of `kind` with rows `0..300`.
fn populated(dir: &TestDir, kind: EngineKind) -> PathBuf {
    let path = dir.join("db");
    let db = Database::create(&path, options(kind)).expect("create");
    kv(&db);
    let mut tx = db.begin().expect("begin");
    for k in 0..300 {
        tx.insert("kv", row![k, k * 7]).expect("insert");
    }
    tx.commit().expect("commit");
    db.close().expect("close");
    path
}

/// Where page `no` of a closed database lies: (segment file, offset). The pages follow the
/// PM files' directory in segment 0, page 0 (the meta page) first, starting with its magic;
/// a clean close checkpoints the WAL, so the pages hold every commit.
fn page_at(path: &Path, no: usize) -> (PathBuf, usize) {
    for e in std::fs::read_dir(path).expect("read_dir") {
        let file = e.expect("entry").path();
        let bytes = std::fs::read(&file).expect("read");
        if bytes.windows(8).any(|w| w == b"FERRPGD1") {
            let meta = bytes.windows(8).position(|w| w == b"FERRPAG1").expect("the meta page");
            return (file, meta + no * 4096);
        }
    }
    panic!("no paged directory in {}", path.display());
}

/// Applies `damage` to page `no` of the closed database at `path`.
fn damage_page(path: &Path, no: usize, damage: impl FnOnce(&mut [u8])) {
    let (file, at) = page_at(path, no);
    let mut bytes = std::fs::read(&file).expect("read");
    damage(&mut bytes[at..at + 4096]);
    std::fs::write(&file, bytes).expect("write");
}

fn corrupted<T: std::fmt::Debug>(r: ferrite::Result<T>, what: &str) {
    assert!(matches!(r, Err(Error::Corrupted { .. })), "{what}: {r:?}");
}

/// The table `kv`'s tree has its root at page 2 (page 1 is the catalog's root; `create_table`
/// allocates the table's root, then its index's). A damaged header there (an unknown page
/// kind, a cell count past the page) is `Corrupted` for every read through the table: a
/// get, a primary and an index scan, the checks before an insert, and `check`.
#[test]
fn a_damaged_table_page_is_corrupted_through_every_operation() {
    type Damage = fn(&mut [u8]);
    let damages: [(&str, Damage); 2] =
        [("kind", |p| p[0] = 0xEE), ("cell count", |p| p[3..5].copy_from_slice(&[0xFF, 0x7F]))];
    for &kind in EngineKind::PAGED {
        for (what, damage) in damages {
            let what = format!("{}, {what}", kind.name());
            let dir = TestDir::new("paged-damaged-page");
            let path = populated(&dir, kind);
            damage_page(&path, 2, |p| {
                assert!(p[0] == 2 || p[0] == 10, "{what}: page 2 is a tree page ({})", p[0]);
                damage(p);
            });
            let db = Database::open(&path, options(kind)).expect("open: the catalog is intact");
            let mut r = db.begin_read().expect("begin_read");
            corrupted(r.get("kv", 17), &format!("{what}: get"));
            corrupted(r.scan("kv", &Scan::primary()), &format!("{what}: primary scan"));
            let by_v = Scan::index("by_v").range(0..=70);
            corrupted(r.scan("kv", &by_v), &format!("{what}: index scan"));
            drop(r);
            let mut tx = db.begin().expect("begin");
            corrupted(tx.insert("kv", row![1000, 1]), &format!("{what}: insert"));
            tx.abort();
            corrupted(db.check(), &format!("{what}: check"));
        }
    }
}

/// A damaged catalog root (page 1) or meta page (page 0): `open` fails with `Corrupted`.
#[test]
fn a_damaged_catalog_or_meta_page_fails_open() {
    for &kind in EngineKind::PAGED {
        for (no, what) in [(0, "meta page checksum"), (1, "catalog page kind")] {
            let dir = TestDir::new("paged-damaged-open");
            let path = populated(&dir, kind);
            // The meta page's page count (covered by its checksum), or the catalog's kind.
            damage_page(&path, no, |p| p[if no == 0 { 33 } else { 0 }] ^= 0x5A);
            let r = Database::open(&path, options(kind));
            assert!(
                matches!(r, Err(Error::Corrupted { .. })),
                "{} {what}: {:?}",
                kind.name(),
                r.err()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Threads

/// Rows before round 0's end.
const N: i64 = 100;
const ROUNDS: i64 = 4;

/// The table after round `r`: keys `0..N + r`, every `v` equal to `r` (round `r` sets every
/// existing row's `v` to `r` and inserts key `N + r - 1`).
fn snapshot(r: i64) -> Vec<Row> {
    (0..N + r).map(|k| row![k, r]).collect()
}

enum ToWriter {
    /// Open a transaction and write round `r`, then report `Open`.
    Write(i64),
    /// Commit it, then report `Committed`.
    Commit,
}

enum ToReader {
    /// Begin a read-only transaction now; it must see round `r`.
    Begin(i64),
    /// Every held transaction still sees its round; a new one sees round `r`.
    Check(i64),
}

/// Checks that `tx` sees exactly the table after round `r`: by primary scan, by index scan
/// (every row under `v = r`, none under `r + 1`), and by single gets.
fn sees(tx: &mut ferrite::ReadTransaction, r: i64, who: &str) {
    assert_eq!(tx.scan("kv", &Scan::primary()).expect("scan"), snapshot(r), "{who}");
    let by_v = tx.scan("kv", &Scan::index("by_v").range(r..=r)).expect("index scan");
    assert_eq!(by_v, snapshot(r), "{who}: index");
    let next = tx.scan("kv", &Scan::index("by_v").range(r + 1..=r + 1)).expect("index scan");
    assert!(next.is_empty(), "{who}: a later round's values");
    assert_eq!(tx.get("kv", N + r).expect("get"), None, "{who}: a later round's row");
    assert_eq!(tx.get("kv", 0).expect("get"), Some(row![0, r]), "{who}");
}

/// The writer thread: each round in one transaction, reported open before it commits.
fn writer(db: &Database, cmds: mpsc::Receiver<ToWriter>, events: mpsc::Sender<i64>) {
    while let Ok(ToWriter::Write(r)) = cmds.recv() {
        let mut tx = db.begin().expect("the writer's begin");
        for k in 0..N + r - 1 {
            tx.update("kv", k, [("v", r)]).expect("update");
        }
        tx.insert("kv", row![N + r - 1, r]).expect("insert");
        events.send(r).expect("report open");
        match cmds.recv() {
            Ok(ToWriter::Commit) => tx.commit().expect("commit"),
            _ => return,
        }
        events.send(r).expect("report committed");
    }
}

/// A reader thread: holds every transaction it began, with the round it must see.
fn reader(db: &Database, name: &str, cmds: mpsc::Receiver<ToReader>, done: mpsc::Sender<()>) {
    let mut held: Vec<(i64, ferrite::ReadTransaction)> = Vec::new();
    while let Ok(cmd) = cmds.recv() {
        match cmd {
            ToReader::Begin(r) => {
                let mut tx = db.begin_read().expect("begin_read");
                sees(&mut tx, r, &format!("{name}: begun at round {r}"));
                held.push((r, tx));
            }
            ToReader::Check(latest) => {
                for (r, tx) in &mut held {
                    sees(tx, *r, &format!("{name}: held since round {r}, now {latest}"));
                }
                let mut fresh = db.begin_read().expect("begin_read");
                sees(&mut fresh, latest, &format!("{name}: fresh at round {latest}"));
            }
        }
        done.send(()).expect("reply");
    }
}

/// Round by round: the writer opens its transaction and writes; a second writer gets
/// `Busy`; one reader begins a snapshot while the writer is open (it sees the last commit);
/// the writer commits; both readers check every snapshot they hold and a fresh one. Each step
/// waits for the previous one's reply, so every interleaving is fixed.
#[test]
fn readers_keep_their_snapshots_while_a_writer_thread_commits() {
    for &kind in EngineKind::PAGED {
        let name = kind.name();
        let dir = TestDir::new("paged-threads");
        let db = Database::create(dir.join("db"), options(kind)).expect("create");
        kv(&db);
        let mut tx = db.begin().expect("begin");
        for k in 0..N {
            tx.insert("kv", row![k, 0]).expect("insert");
        }
        tx.commit().expect("commit");
        std::thread::scope(|s| {
            let (to_writer, writer_cmds) = mpsc::channel();
            let (writer_events, from_writer) = mpsc::channel();
            let db = &db;
            s.spawn(move || writer(db, writer_cmds, writer_events));
            let mut readers = Vec::new();
            for i in 0..2 {
                let (to_reader, cmds) = mpsc::channel();
                let (done, replies) = mpsc::channel();
                s.spawn(move || reader(db, &format!("{name} reader {i}"), cmds, done));
                readers.push((to_reader, replies));
            }
            let ask = |i: usize, cmd: ToReader| {
                readers[i].0.send(cmd).expect("send to a reader");
                readers[i].1.recv().expect("a reader failed");
            };
            ask(0, ToReader::Begin(0));
            for r in 1..=ROUNDS {
                to_writer.send(ToWriter::Write(r)).expect("send to the writer");
                assert_eq!(from_writer.recv().expect("the writer failed"), r);
                match db.begin() {
                    Err(e @ Error::Busy(_)) => assert!(e.is_retryable(), "{name}"),
                    other => panic!("{name}: a second writer: {other:?}"),
                }
                ask(r as usize % 2, ToReader::Begin(r - 1));
                to_writer.send(ToWriter::Commit).expect("send to the writer");
                assert_eq!(from_writer.recv().expect("the writer failed"), r);
                ask(0, ToReader::Check(r));
                ask(1, ToReader::Check(r));
            }
            drop(to_writer);
            drop(readers);
        });
        // Every snapshot ended with its reader: the writer slot is free and the tree sound.
        let mut tx = db.begin().expect("begin after the threads");
        assert_eq!(tx.get("kv", N + ROUNDS - 1).expect("get"), Some(row![N + ROUNDS - 1, ROUNDS]));
        tx.abort();
        db.check().expect("check");
        db.close().expect("close");
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrent creates

/// Regression ([R2] item 4): `create_table` checked the name before it took the writer lock,
/// and ignored the catalog tree's refusal of a present key. Two threads creating one name could
/// both pass the check; the second, once the first had committed, built its own trees, found
/// the name taken in the catalog tree, committed anyway and put its trees in the in-memory
/// catalog: both creates said `Ok`, and every later commit to the table went to trees no
/// catalog entry reaches, gone at reopen. Now the name is checked again in the catalog tree
/// under the writer lock: exactly one create succeeds, the other is `TableExists`, and the
/// rows committed after it are there after a reopen.
#[test]
fn concurrent_creates_of_one_name_make_one_table() {
    const ROUNDS: i64 = 150;
    for &kind in EngineKind::PAGED {
        let name = kind.name();
        let dir = TestDir::new("paged-create-race");
        let path = dir.join("db");
        let db = Database::create(&path, options(kind)).expect("create");
        for r in 0..ROUNDS {
            let table = format!("t{r}");
            let barrier = std::sync::Barrier::new(2);
            let create = || {
                barrier.wait();
                loop {
                    let schema = TableSchema::new(table.as_str())
                        .column("k", Type::I64)
                        .column("v", Type::I64)
                        .primary_key("k");
                    match db.create_table(schema) {
                        // One writer at a time: the other create waits its turn.
                        Err(Error::Busy(_)) => std::thread::yield_now(),
                        other => break other,
                    }
                }
            };
            let (a, b) = std::thread::scope(|s| {
                let a = s.spawn(create);
                let b = s.spawn(create);
                (a.join().expect("thread a"), b.join().expect("thread b"))
            });
            let exists = |x: &ferrite::Result<()>| matches!(x, Err(Error::Schema(ferrite::SchemaError::TableExists(t))) if *t == table);
            assert!(
                (a.is_ok() && exists(&b)) || (b.is_ok() && exists(&a)),
                "{name} round {r}: one create succeeds, the other is TableExists: {a:?}, {b:?}"
            );
            let mut tx = db.begin().expect("begin");
            tx.insert(&table, row![r, r * 3]).expect("insert");
            tx.commit().expect("commit");
        }
        db.close().expect("close");
        let db = Database::open(&path, options(kind)).expect("reopen");
        for r in 0..ROUNDS {
            let mut tx = db.begin_read().expect("begin_read");
            let rows = tx.scan(&format!("t{r}"), &Scan::primary()).expect("scan");
            assert_eq!(rows, vec![row![r, r * 3]], "{name}: table t{r} after reopen");
        }
        db.close().expect("close");
    }
}
