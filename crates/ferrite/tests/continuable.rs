//! Continuable transactions through the `Database` API (SOFORT design §14): a crash in the
//! middle of a statement, reopen, resume or abort, the timeout, and serializability of a
//! resumed transaction against commits made before and after the crash. Crashes are images
//! of a simulated pool set (what was durable), reopened with `database_on_pool_set`.

use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrite::internals::database_on_pool_set;
use ferrite::pmem::sim::{Event, EventKind, SimDomain};
use ferrite::pmem::{ImageSpec, Pick, PoolSet};
use ferrite::{
    Database, EngineKind, Error, Options, Predicate, Projection, TableSchema, Type, row,
};

fn pmem() -> ferrite::pmem::Options {
    ferrite::pmem::Options::default().layout("continuable-test").segment_size(1 << 20)
}

fn options() -> Options {
    Options::new().engine(EngineKind::Sofort).pmem(pmem())
}

/// A new database with table `t (k i64 primary key, v str)` holding keys 0..10.
fn fresh() -> (Database, Arc<SimDomain>) {
    let set = PoolSet::create_sim(&pmem()).unwrap();
    let domain = set.sim().unwrap().clone();
    let db = database_on_pool_set(set, &options(), true).unwrap();
    db.create_table(
        TableSchema::new("t").column("k", Type::I64).column("v", Type::Str).primary_key("k"),
    )
    .unwrap();
    let mut tx = db.begin().unwrap();
    for k in 0..10 {
        tx.insert("t", row![k, format!("v{k}")]).unwrap();
    }
    tx.commit().unwrap();
    (db, domain)
}

/// The database as a crash now would leave it (only what is durable), reopened.
fn crash(domain: &SimDomain, options: &Options) -> Database {
    let img = domain.capture(&ImageSpec::durable());
    let set = PoolSet::open_sim(&img, &pmem()).unwrap();
    database_on_pool_set(set, options, false).unwrap()
}

fn value(db: &Database, k: i64) -> Option<String> {
    let mut r = db.begin_read().unwrap();
    r.get("t", k).unwrap().map(|row| row[1].as_str().unwrap().to_owned())
}

/// Statements 1 and 2 complete, statement 3 interrupted (its update reached PM as far as
/// a crash lets it): after reopen the transaction is listed with 2 statements, its effects
/// are invisible to others, resumed it sees statements 1 and 2 and not 3, re-runs 3, commits.
#[test]
fn a_crash_in_a_statement_resumes_with_the_earlier_statements() {
    let (db, domain) = fresh();
    let mut tx = db.begin_continuable().unwrap();
    tx.insert("t", row![100, "first"]).unwrap();
    tx.delete("t", 1).unwrap();
    // Statement 3, interrupted at its first fence (P-SOF-30), with every dirty line evicted:
    // its lock and values reached PM, its counter bump did not.
    let slot = Arc::new(Mutex::new(None));
    let hook_slot = Arc::clone(&slot);
    domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
        let mut s = hook_slot.lock().unwrap();
        if e.kind == EventKind::Fence && s.is_none() {
            *s = Some(d.capture(&ImageSpec {
                evict: Pick::All,
                pending: Pick::All,
                ..ImageSpec::default()
            }));
        }
    })));
    tx.update("t", 2, [("v", "third")]).unwrap();
    domain.set_hook(None);
    let img = slot.lock().unwrap().take().expect("statement 3 fenced");
    drop(tx);
    drop(db);
    let db =
        database_on_pool_set(PoolSet::open_sim(&img, &pmem()).unwrap(), &options(), false).unwrap();
    let u = db.unfinished_transactions().unwrap();
    assert_eq!(u.len(), 1);
    assert_eq!((u[0].statements, u[0].read_only), (2, false));
    assert_eq!(value(&db, 100), None, "invisible until commit");
    assert_eq!(value(&db, 1).as_deref(), Some("v1"));
    db.check().unwrap();
    let mut tx = db.resume(u[0].id).unwrap();
    assert!(db.unfinished_transactions().unwrap().is_empty());
    assert!(matches!(db.resume(u[0].id), Err(Error::UnknownTransaction(_))));
    assert_eq!(tx.get("t", 100).unwrap(), Some(row![100, "first"]));
    assert_eq!(tx.get("t", 1).unwrap(), None);
    assert_eq!(tx.get("t", 2).unwrap(), Some(row![2, "v2"]), "statement 3 rolled back");
    tx.update("t", 2, [("v", "third")]).unwrap();
    tx.commit().unwrap();
    assert_eq!(value(&db, 100).as_deref(), Some("first"));
    assert_eq!(value(&db, 1), None);
    assert_eq!(value(&db, 2).as_deref(), Some("third"));
    db.check().unwrap();
}

/// The resumed transaction read key 5 before the crash; a transaction of the new run changes
/// it and commits first: the resumed commit is a `Conflict` (its read records survived).
/// A change elsewhere does not stop it.
#[test]
fn a_resumed_transaction_conflicts_with_a_later_commit_on_what_it_read() {
    for touch_read_key in [true, false] {
        let (db, domain) = fresh();
        let mut tx = db.begin_continuable().unwrap();
        assert_eq!(tx.get("t", 5).unwrap(), Some(row![5, "v5"]));
        tx.insert("t", row![50, "depends on 5"]).unwrap();
        let db2 = crash(&domain, &options());
        drop(tx);
        drop(db);
        let id = db2.unfinished_transactions().unwrap()[0].id;
        let mut u = db2.begin().unwrap();
        let k = if touch_read_key { 5 } else { 6 };
        u.update("t", k, [("v", "changed")]).unwrap();
        u.commit().unwrap();
        let tx = db2.resume(id).unwrap();
        let r = tx.commit();
        if touch_read_key {
            assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
            assert_eq!(value(&db2, 50), None);
        } else {
            r.unwrap();
            assert_eq!(value(&db2, 50).as_deref(), Some("depends on 5"));
        }
        db2.check().unwrap();
    }
}

/// A delete committed before the crash but after the continuable transaction's snapshot, of
/// a key it read: recovery keeps the deleted version (its snapshot may read it), so
/// validation at the resumed commit still sees the change: `Conflict`.
#[test]
fn a_delete_before_the_crash_of_a_key_it_read_makes_the_resumed_commit_conflict() {
    let (db, domain) = fresh();
    let mut tx = db.begin_continuable().unwrap();
    assert!(tx.get("t", 7).unwrap().is_some());
    tx.insert("t", row![70, "saw 7"]).unwrap();
    let mut d = db.begin().unwrap();
    d.delete("t", 7).unwrap();
    d.commit().unwrap();
    let db2 = crash(&domain, &options());
    drop(tx);
    drop(db);
    let id = db2.unfinished_transactions().unwrap()[0].id;
    let mut tx = db2.resume(id).unwrap();
    assert!(tx.get("t", 7).unwrap().is_some(), "its snapshot still holds key 7");
    assert!(matches!(tx.commit(), Err(Error::Conflict { .. })));
    db2.check().unwrap();
}

/// A scan with a filter is a read record too: an insert into its range after the crash that
/// passes the filter conflicts; one that fails the filter does not.
#[test]
fn a_scan_before_the_crash_is_validated_with_its_filter() {
    for passes in [true, false] {
        let (db, domain) = fresh();
        let mut tx = db.begin_continuable().unwrap();
        let preds = [
            Predicate::range("k", (Bound::Included(20i64), Bound::Excluded(30i64))),
            Predicate::eq("v", "match"),
        ];
        assert!(tx.select("t", &preds, &Projection::All).unwrap().is_empty());
        tx.insert("t", row![60, "none matched"]).unwrap();
        let db2 = crash(&domain, &options());
        drop(tx);
        drop(db);
        let id = db2.unfinished_transactions().unwrap()[0].id;
        let mut u = db2.begin().unwrap();
        u.insert("t", row![25, if passes { "match" } else { "other" }]).unwrap();
        u.commit().unwrap();
        let r = db2.resume(id).unwrap().commit();
        assert_eq!(r.is_err(), passes, "{r:?}");
    }
}

/// Unclaimed transactions are aborted once the timeout has passed (driven by a chosen time,
/// no sleeping); aborting or resuming an id twice is `UnknownTransaction`.
#[test]
fn the_timeout_and_explicit_aborts_end_unfinished_transactions() {
    let (db, domain) = fresh();
    let mut a = db.begin_continuable().unwrap();
    a.insert("t", row![200, "a"]).unwrap();
    let mut b = db.begin_continuable().unwrap();
    b.delete("t", 3).unwrap();
    let opts = options().unfinished_timeout(Duration::from_secs(60));
    let db2 = crash(&domain, &opts);
    drop((a, b));
    drop(db);
    let u = db2.unfinished_transactions().unwrap();
    assert_eq!(u.len(), 2);
    let t0 = u.iter().map(|x| x.found_at).max().unwrap();
    assert!(db2.reap_unfinished(t0 + Duration::from_secs(59)).unwrap().is_empty());
    let first = u[0].id;
    db2.abort_unfinished(first).unwrap();
    assert!(matches!(db2.abort_unfinished(first), Err(Error::UnknownTransaction(_))));
    let reaped = db2.reap_unfinished(t0 + Duration::from_secs(60)).unwrap();
    assert_eq!(reaped, vec![u[1].id]);
    assert!(db2.unfinished_transactions().unwrap().is_empty());
    assert!(matches!(db2.resume(u[1].id), Err(Error::UnknownTransaction(_))));
    assert_eq!(value(&db2, 200), None);
    assert_eq!(value(&db2, 3).as_deref(), Some("v3"));
    db2.check().unwrap();
}

/// Engines without continuable transactions say so with a typed error.
#[test]
fn the_reference_engine_has_no_continuable_transactions() {
    let db = Database::create("unused", Options::new().engine(EngineKind::Reference)).unwrap();
    assert!(matches!(db.begin_continuable(), Err(Error::Unsupported(_))));
    assert!(matches!(db.unfinished_transactions(), Err(Error::Unsupported(_))));
    assert!(matches!(db.resume(1), Err(Error::Unsupported(_))));
}
