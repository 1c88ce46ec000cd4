//! SOFORT's instant recovery through the public API (`docs/design/sofort.md` §15): the
//! database is reopened with `RecoveryMode::Instant` and the background index rebuild held at
//! a watermark (the `rebuild_hold` test hook, no sleeps), so lookups, index scans, uniqueness
//! checks, inserts, updates, deletes, garbage collection and row reuse run while every index
//! is partial; every result is compared with a `BTreeMap` model, `check()` must pass while
//! held, and again after the rebuild is released and complete (indexes equal to the rows).
//!
//! Random; prints its seed (`FERRITE_TEST_SEED` replays one). Pools are small, under
//! `FERRITE_POOL_DIR` or `/dev/shm`.

use std::collections::BTreeMap;
use std::path::Path;

use ferrite::pmem::internals::testing::{TestDir, test_seed};
use ferrite::pmem::{DurabilityMode, SplitMix64};
use ferrite::{
    Database, EngineKind, Error, Options, RecoveryMode, Row, Scan, SofortConfig, TableSchema, Type,
    Value, row,
};

/// Rows loaded before the reopen (more than the primary-key lookups' help threshold, 4096,
/// so that lookups after the release may help the rebuild).
const ROWS: i64 = 5000;
/// Keys are drawn from `0..KEYS` (some absent).
const KEYS: i64 = 5600;

fn options(recovery: RecoveryMode, hold: Option<u64>) -> Options {
    let pm =
        ferrite::pmem::Options::new().segment_size(1 << 22).durability(DurabilityMode::Emulated);
    Options::new().engine(EngineKind::Sofort).pmem(pm).sofort(SofortConfig {
        slots: 8,
        recovery,
        recovery_threads: 2,
        rebuild_hold: hold,
        ..SofortConfig::default()
    })
}

/// The model: key → (name, group). `name` is unique (index `by_name`), `grp` is not
/// (`by_grp`).
type Model = BTreeMap<i64, (String, i64)>;

fn to_row(k: i64, (name, grp): &(String, i64)) -> Row {
    row![k, name.as_str(), *grp]
}

fn create(path: &Path) -> Model {
    let db = Database::create(path, options(RecoveryMode::Synchronous, None)).expect("create");
    db.create_table(
        TableSchema::new("sub")
            .column("id", Type::I64)
            .column("name", Type::Str)
            .column("grp", Type::I64)
            .primary_key("id")
            .unique_index("by_name", ["name"])
            .index("by_grp", ["grp"]),
    )
    .expect("table");
    // A second table with nothing in it: a rebuild job that completes at once.
    db.create_table(TableSchema::new("empty").column("id", Type::I64).primary_key("id"))
        .expect("table");
    let mut model = Model::new();
    for chunk in 0..(ROWS / 500) {
        let mut tx = db.begin().expect("begin");
        for k in chunk * 500..(chunk + 1) * 500 {
            let v = (format!("n{k}"), k % 37);
            tx.insert("sub", to_row(k, &v)).expect("insert");
            model.insert(k, v);
        }
        tx.commit().expect("commit");
    }
    // Garbage before the reopen (queued for reuse by the classification).
    let mut tx = db.begin().expect("begin");
    for k in (0..ROWS).step_by(50) {
        tx.delete("sub", k).expect("delete");
        model.remove(&k);
    }
    tx.commit().expect("commit");
    db.close().expect("close");
    model
}

fn name_taken(model: &Model, name: &str, except: i64) -> bool {
    model.iter().any(|(&k, v)| k != except && v.0 == name)
}

/// One random operation in its own transaction, checked against (and applied to) the model.
fn op(db: &Database, model: &mut Model, rng: &mut SplitMix64, step: usize) {
    let k = (rng.next_u64() % KEYS as u64) as i64;
    let name = format!("n{}", rng.next_u64() % (2 * KEYS as u64));
    let grp = (rng.next_u64() % 37) as i64;
    let mut tx = db.begin().expect("begin");
    match rng.next_u64() % 8 {
        0 | 1 => {
            let got = tx.get("sub", k).expect("get");
            assert_eq!(got, model.get(&k).map(|v| to_row(k, v)), "step {step}: get {k}");
        }
        2 => {
            let want_dup = model.contains_key(&k) || name_taken(model, &name, k);
            match tx.insert("sub", row![k, name.as_str(), grp]) {
                Ok(()) => {
                    assert!(!want_dup, "step {step}: insert {k} {name} should be a duplicate");
                    tx.commit().expect("commit");
                    model.insert(k, (name, grp));
                    return;
                }
                Err(Error::DuplicateKey { .. }) => {
                    assert!(want_dup, "step {step}: insert {k} {name} is no duplicate")
                }
                Err(e) => panic!("step {step}: insert {k}: {e}"),
            }
        }
        3 | 4 => {
            let r =
                tx.update("sub", k, [("name", Value::from(name.as_str())), ("grp", grp.into())]);
            match r {
                Ok(()) => {
                    assert!(model.contains_key(&k) && !name_taken(model, &name, k), "step {step}");
                    tx.commit().expect("commit");
                    model.insert(k, (name, grp));
                    return;
                }
                Err(Error::NotFound { .. }) => assert!(!model.contains_key(&k), "step {step}"),
                Err(Error::DuplicateKey { .. }) => {
                    assert!(name_taken(model, &name, k), "step {step}: update {k} {name}")
                }
                Err(e) => panic!("step {step}: update {k}: {e}"),
            }
        }
        5 => match tx.delete("sub", k) {
            Ok(()) => {
                assert!(model.remove(&k).is_some(), "step {step}: delete {k}");
                tx.commit().expect("commit");
                return;
            }
            Err(Error::NotFound { .. }) => assert!(!model.contains_key(&k), "step {step}"),
            Err(e) => panic!("step {step}: delete {k}: {e}"),
        },
        6 => {
            // A secondary-index scan of one group, either direction, maybe limited.
            let limit = (rng.next_u64() % 40) as usize + 1;
            let desc = rng.next_u64().is_multiple_of(2);
            let mut want: Vec<Row> =
                model.iter().filter(|(_, v)| v.1 == grp).map(|(&k, v)| to_row(k, v)).collect();
            let mut scan = Scan::index("by_grp").prefix(grp);
            if desc {
                want.reverse();
                scan = scan.descending();
            }
            want.truncate(limit);
            let got = tx.scan("sub", &scan.limit(limit)).expect("scan");
            assert_eq!(got, want, "step {step}: scan group {grp}");
        }
        _ => {
            // A primary-key range, or a range of the unique index.
            let (a, b) = (k, k + (rng.next_u64() % 300) as i64);
            if rng.next_u64().is_multiple_of(2) {
                let want: Vec<Row> = model.range(a..b).map(|(&k, v)| to_row(k, v)).collect();
                let got = tx.scan("sub", &Scan::primary().range(a..b)).expect("scan");
                assert_eq!(got, want, "step {step}: range {a}..{b}");
            } else {
                let mut by_name: Vec<(&String, i64)> =
                    model.iter().map(|(&k, v)| (&v.0, k)).filter(|(n, _)| **n >= name).collect();
                by_name.sort();
                let want: Vec<Row> =
                    by_name.iter().take(25).map(|&(_, k)| to_row(k, &model[&k])).collect();
                let scan = Scan::index("by_name")
                    .lower(std::ops::Bound::Included(Value::from(name.as_str()).into()));
                let got = tx.scan("sub", &scan.limit(25)).expect("scan");
                assert_eq!(got, want, "step {step}: names from {name}");
            }
        }
    }
    tx.abort();
}

fn contents(db: &Database) -> Model {
    let mut r = db.begin_read().expect("begin");
    r.scan("sub", &Scan::primary())
        .expect("scan")
        .into_iter()
        .map(|row| {
            let k = row[0].as_i64().expect("id");
            (k, (row[1].as_str().expect("name").to_owned(), row[2].as_i64().expect("grp")))
        })
        .collect()
}

/// Opens instantly with the rebuild held at `hold`, runs `ops` operations (then `check`),
/// releases the rebuild and runs `ops` more, checks everything, then reopens synchronously.
fn run(seed: u64, hold: u64, ops: usize) {
    eprintln!("seed {seed:#x} hold {hold} (FERRITE_TEST_SEED to replay)");
    let mut rng = SplitMix64::new(seed);
    let dir = TestDir::new("sofort-instant");
    let path = dir.join("db");
    let mut model = create(&path);
    let db = Database::open(&path, options(RecoveryMode::Instant, Some(hold))).expect("open");
    db.hold_rebuild(Some(hold)); // returns once every index reached its hold
    let rep = db.recovery_report().expect("report");
    assert!(!rep.indexes_complete, "{rep:?}");
    for step in 0..ops {
        op(&db, &mut model, &mut rng, step);
    }
    db.check().expect("check while the rebuild is held");
    assert_eq!(contents(&db), model);
    db.hold_rebuild(None);
    for step in ops..2 * ops {
        op(&db, &mut model, &mut rng, step);
    }
    let rep = db.wait_recovered().expect("rebuilt").expect("report");
    assert!(rep.indexes_complete, "{rep:?}");
    assert_eq!(rep.index_times.len(), 4, "{rep:?}");
    assert!(rep.index_times.iter().all(|(_, t)| t.is_some()), "{rep:?}");
    assert!(rep.time_to_first_transaction <= rep.time_to_index_rebuild, "{rep:?}");
    db.check().expect("check after the rebuild");
    assert_eq!(contents(&db), model);
    db.close().expect("close");
    let db = Database::open(&path, options(RecoveryMode::Synchronous, None)).expect("reopen");
    assert_eq!(contents(&db), model);
    db.check().expect("check after a synchronous reopen");
}

/// Held before the first row: every lookup uses the whole remainder (the other access path).
#[test]
fn held_at_zero_every_read_scans_the_remainder() {
    run(test_seed(), 0, 150);
}

/// Held in the middle of the live rows (a random watermark).
#[test]
fn held_at_a_random_watermark() {
    let seed = test_seed();
    run(seed, seed % ROWS as u64, 150);
}

/// An instant open returns before the rebuild ends; closing (or dropping) the database with
/// the rebuild still held stops it, and the next open (instant, not held) rebuilds again.
#[test]
fn closing_during_the_rebuild_stops_it() {
    let dir = TestDir::new("sofort-instant-close");
    let path = dir.join("db");
    let model = create(&path);
    let db = Database::open(&path, options(RecoveryMode::Instant, Some(10))).expect("open");
    db.hold_rebuild(Some(10));
    assert!(!db.recovery_report().expect("report").indexes_complete);
    db.close().expect("close with the rebuild held");
    let db = Database::open(&path, options(RecoveryMode::Instant, Some(100))).expect("open");
    drop(db); // dropping stops the held rebuild too (no hang)
    let db = Database::open(&path, options(RecoveryMode::Instant, None)).expect("open");
    let rep = db.wait_recovered().expect("rebuilt").expect("report");
    assert!(rep.indexes_complete && rep.live_rows == model.len() as u64, "{rep:?}");
    assert_eq!(contents(&db), model);
    db.check().expect("check");
}
