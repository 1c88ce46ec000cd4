//! Exact persist counts of the paged engine's commit protocols (conventions §6): fences and
//! lines written back by one transaction, from `ferrite_pmem::Counters` deltas (per thread),
//! each number derived in a comment from the formats (`docs/design/format.md`, "Paged
//! engine") and the protocols (`docs/design/paged.md` §8).
//!
//! The workload: table `kv (k i64 primary key, v str)` with 100-byte values, rows inserted in
//! key order into the table's root leaf (page 2; no split: every row below fits one 4 KiB
//! page), on the PM store with 4 KiB pages and emulated durability.

use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Counters, DurabilityMode};
use ferrite::{Database, EngineKind, Options, PagedConfig, PagedProtocol, TableSchema, Type, row};

const PS: u64 = 4096;
const LINE: u64 = 64;
/// A leaf record: key_len u16 | local_len u16 | key (the i64's 8-byte memcomparable
/// encoding) | value (the row: k as 8 bytes, v as a u32 length and 100 bytes).
const REC: u64 = 2 + 2 + 8 + (8 + 4 + 100);

fn options(protocol: PagedProtocol) -> Options {
    let pm =
        ferrite::pmem::Options::new().segment_size(4 << 20).durability(DurabilityMode::Emulated);
    Options::new()
        .engine(EngineKind::Paged { protocol })
        .pmem(pm)
        .paged(PagedConfig { checkpoint_frames: 0, ..PagedConfig::default() })
}

fn kv(db: &Database) {
    db.create_table(
        TableSchema::new("kv").column("k", Type::I64).column("v", Type::Str).primary_key("k"),
    )
    .expect("create table");
}

fn insert(db: &Database, keys: std::ops::Range<i64>) {
    let mut tx = db.begin().expect("begin");
    for k in keys {
        tx.insert("kv", row![k, format!("{k:0100}")]).expect("insert");
    }
    tx.commit().expect("commit");
}

/// `(fences, lines written back)` of inserting `keys` in one transaction.
fn counts(db: &Database, keys: std::ops::Range<i64>) -> (u64, u64) {
    let before = Counters::snapshot();
    insert(db, keys);
    let d = Counters::snapshot() - before;
    (d.fences, d.lines_flushed())
}

/// A database at `path` (made with `opts`) holding rows 0..21 of `kv`: rows 0..20 inserted
/// and closed (the close checkpoints), reopened, row 20 inserted, so that the next commit is
/// in steady state (the NVWAL steps 2 below).
fn steady(path: &std::path::Path, opts: impl Fn() -> Options) -> Database {
    let db = Database::create(path, opts()).expect("create");
    kv(&db);
    insert(&db, 0..20);
    db.close().expect("close");
    let db = Database::open(path, opts()).expect("open");
    insert(&db, 20..21);
    db
}

/// Lines of `[at, at + len)`.
fn lines(at: u64, len: u64) -> u64 {
    (at + len).div_ceil(LINE) - at / LINE
}

fn pad8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// NVWAL (lazy synchronization), from a fresh generation: the database is populated with
/// `n0` rows and closed (the close checkpoints: the log restarts at block 0, byte 64 of
/// the heap, and the WAL index is empty), then reopened.
#[test]
fn nvwal_commits_make_exact_persist_counts() {
    let dir = TestDir::new("paged-counts-nvwal");
    let path = dir.join("db");
    let n0 = 20i64;
    let db = Database::create(&path, options(PagedProtocol::Nvwal)).expect("create");
    kv(&db);
    insert(&db, 0..n0);
    db.close().expect("close");
    let db = Database::open(&path, options(PagedProtocol::Nvwal)).expect("open");
    // Frame head 32 bytes; block head line 64; blocks of 8 KiB; block 0 at heap byte 4096.
    const HDR: u64 = 32;
    const BS: u64 = 8192;

    // 1. The first commit of the generation: the meta page (0) and the leaf (2) are logged
    // whole (4128-byte frames). Block 0's frames start at 64: the meta frame fills
    // [64, 4192); the leaf frame does not fit in the remaining 4000 bytes, so a skip frame
    // (32 bytes) goes at 4192 and a new block is taken: the leaf frame at its byte 64.
    // Written back: block 0 [64, 4224) = 65 lines; the new block [0, 4192) (its head line
    // with its first frame) = 66 lines; the link in block 0's head line (line 0, not among the
    // frames' lines) = 1; the commit mark = 1. Fences: the frames' and the mark's.
    let full = HDR + PS;
    let first = lines(64, full + HDR) + lines(0, 64 + full) + 1 + 1;
    assert_eq!(first, 65 + 66 + 1 + 1);
    assert_eq!(counts(&db, n0..n0 + 1), (2, first), "first commit of a generation");

    // 2. Steady state, one insert: diff frames, no allocation. The meta page changes its
    // commit sequence (byte 56, low byte) and its CRC32C (bytes 64..68): one 12-byte range
    // (the 7 equal bytes between are fewer than SPLIT_GAP = 64), a 32 + 16-byte frame. The
    // leaf (little-endian header: count at 3..5, content start at 5..7) with n records
    // before the transaction gets the new record's offset appended at 8 + 2n and the record
    // (REC bytes, first and last byte non-zero) right below the old content start, at
    // 4096 - (n + 1) * REC; the free gap between (far more than 64 equal bytes) splits the
    // diff into two frames: [3, 8 + 2n + 2) and the record. The three frames are contiguous
    // in the new block after the leaf's whole frame (at 64 + 4128 = 4192) and are written
    // back once, as one range; then the commit mark's line again (it was written back with
    // the frames, before the mark was stored). 2 fences.
    let head = |n: u64, k: u64| HDR + pad8(8 + 2 * (n + k) - 3);
    let frames = |n: u64, k: u64| HDR + 16 + head(n, k) + HDR + pad8(k * REC);
    let n = (n0 + 1) as u64;
    let at = 4192;
    let one = lines(at, frames(n, 1)) + 1;
    assert_eq!(frames(n, 1), 48 + (32 + 56) + (32 + 128));
    assert_eq!(one, 6 + 1);
    assert_eq!(counts(&db, n0 + 1..n0 + 2), (2, one), "one insert, steady state");

    // 3. Eight inserts in one transaction: the same frames, the leaf's two ranges now the
    // header through the eight new offsets, [3, 8 + 2(n + 8)), and the eight records,
    // contiguous below the old content start.
    let at = at + frames(n, 1);
    let n = n + 1;
    let eight = lines(at, frames(n, 8)) + 1;
    assert!(at + frames(n, 8) <= BS, "the frames fit the block: no allocation");
    assert_eq!(frames(n, 8), 48 + (32 + 72) + (32 + 992));
    assert_eq!(eight, 19 + 1);
    assert_eq!(counts(&db, n0 + 2..n0 + 10), (2, eight), "eight inserts");
    db.close().expect("close");
}

/// The rollback journal and the WAL, one insert in steady state (for comparison): the
/// transaction changes the meta page (0) and the leaf (2), both existing pages.
#[test]
fn journal_and_wal_single_inserts_make_exact_persist_counts() {
    // Rollback journal: each original as a record (64-byte head + 4096-byte image = 65
    // lines), sync (P-PG-14); the header (1 line), sync (P-PG-10); the two pages in place
    // (64 lines each), sync; the header zeroed (1 line), sync: 4 fences, 130 + 1 + 128 + 1
    // lines.
    // WAL: each page as a frame (64-byte head + image = 65 lines), one sync: 1 fence, 130.
    for (protocol, want) in
        [(PagedProtocol::Journal, (4, 130 + 1 + 128 + 1)), (PagedProtocol::Wal, (1, 130))]
    {
        let dir = TestDir::new("paged-counts-g1");
        let db = Database::create(dir.join("db"), options(protocol)).expect("create");
        kv(&db);
        insert(&db, 0..10);
        insert(&db, 10..11);
        assert_eq!(counts(&db, 11..12), want, "{}", protocol.name());
        db.close().expect("close");
    }
}

/// NVWAL's eager and checksum variants, one insert in steady state, placed as in
/// `nvwal_commits_make_exact_persist_counts` step 2: the meta frame (48 bytes) at 4192 of the
/// second block, the leaf's two frames (32 + 56 and 32 + 128 bytes) right after it.
#[test]
fn nvwal_variants_make_exact_persist_counts() {
    for (sync, want) in [
        // Eager: each frame written back and fenced as it is copied, then the mark: 4 fences;
        // the meta frame [4192, 4240) = lines 65-66 (2), the leaf's head frame [4240, 4328) =
        // lines 66-67 (2, line 66 again), its record frame [4328, 4488) = lines 67-70 (4),
        // the mark 1.
        (ferrite::NvwalSync::Eager, (4, 2 + 2 + 4 + 1)),
        // Checksum: no frame written back; the commit frame's head [4328, 4360) (mark and
        // checksum), which straddles lines 67 and 68: two lines, one fence.
        (ferrite::NvwalSync::Checksum, (1, 2)),
    ] {
        let dir = TestDir::new("paged-counts-nvwal-variants");
        let path = dir.join("db");
        let opts = || {
            let o = options(PagedProtocol::Nvwal);
            let cfg = PagedConfig { nvwal_sync: sync, ..o.paged_config() };
            o.paged(cfg)
        };
        let db = steady(&path, opts);
        assert_eq!(counts(&db, 21..22), want, "{sync:?}");
        db.close().expect("close");
    }
}

/// The file store, one insert in steady state (the NVWAL paper's setting against its
/// baseline): NVWAL's commit writes the PM log only, exactly as on the PM store (step 2 of
/// `nvwal_commits_make_exact_persist_counts`: 2 fences, 6 + 1 lines) and touches no file;
/// the WAL writes both pages as frames (a 64-byte head and the 4096-byte image each) to its
/// log file and syncs it once, with no fence. A checkpoint then writes NVWAL's logged pages
/// into the page file and syncs it once.
#[test]
fn on_the_file_store_nvwal_commits_touch_no_file() {
    for (protocol, want) in
        [(PagedProtocol::Nvwal, (2, 6 + 1, 0, 0)), (PagedProtocol::Wal, (0, 0, 1, 2 * (64 + PS)))]
    {
        let dir = TestDir::new("paged-counts-file");
        let path = dir.join("db");
        let opts = || {
            let o = options(protocol);
            let cfg = PagedConfig { store: ferrite::PagedStore::File, ..o.paged_config() };
            o.paged(cfg)
        };
        let db = steady(&path, opts);
        let before = Counters::snapshot();
        insert(&db, 21..22);
        let d = Counters::snapshot() - before;
        let got = (d.fences, d.lines_flushed(), d.syncs, d.file_bytes_written);
        assert_eq!(got, want, "{}", protocol.name());
        if protocol == PagedProtocol::Nvwal {
            // Close checkpoints: the meta page and the leaf, written and synced once.
            let before = Counters::snapshot();
            db.close().expect("close");
            let d = Counters::snapshot() - before;
            assert_eq!((d.syncs, d.file_bytes_written), (1, 2 * PS), "the checkpoint");
        } else {
            db.close().expect("close");
        }
    }
}
