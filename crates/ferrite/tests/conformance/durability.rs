//! Durability acknowledgement and reopen: commit tickets, and (for persistent engines) that
//! what was committed survives close and reopen while what was not does not.

use ferrite::{Database, Error, Options, Predicate, Projection, Scan, TableSchema, Type, row};

use super::{Case, Ctx, Outcome, Subject};

/// Durability cases.
pub const CASES: &[Case] = &[
    Case { name: "commit_tickets", run: commit_tickets },
    Case { name: "reopen_keeps_committed_only", run: reopen_keeps_committed_only },
    Case { name: "reopen_after_drop", run: reopen_after_drop },
    Case { name: "deferred_commits_on_reopen", run: deferred_commits_on_reopen },
];

fn table(db: &Database) -> Result<(), String> {
    db.create_table(
        TableSchema::new("t")
            .column("k", Type::I64)
            .column("v", Type::Str)
            .primary_key("k")
            .unique_index("by_v", ["v"]),
    )
    .ctx("create")
}

/// `commit_deferred` returns a ticket; `wait_durable` accepts it and returns; tickets grow
/// with commit order; a ticket of another database is refused; a deferred commit is visible
/// to later transactions at once.
fn commit_tickets(s: &Subject) -> Outcome {
    let f = s.fresh("tickets")?;
    table(&f.db)?;
    let mut last = None;
    for k in 0..5 {
        let mut tx = f.db.begin().ctx("begin")?;
        tx.insert("t", row![k, format!("v{k}")]).ctx("insert")?;
        let ticket = tx.commit_deferred().ctx("commit_deferred")?;
        let mut r = f.db.begin_read().ctx("begin_read")?;
        ensure!(r.get("t", k).ctx("get")?.is_some(), "a deferred commit is visible at once");
        if let Some(prev) = last {
            ensure!(ticket.sequence() > prev, "tickets grow with commit order");
        }
        last = Some(ticket.sequence());
        if k % 2 == 0 {
            f.db.wait_durable(&ticket).ctx("wait_durable")?;
        }
    }
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("t", row![99, "x"]).ctx("insert")?;
    let ticket = tx.commit_deferred().ctx("commit_deferred")?;
    let other = s.fresh("tickets-other")?;
    ensure_err!(other.db.wait_durable(&ticket), Error::InvalidArgument(_), "foreign ticket");
    f.db.wait_durable(&ticket).ctx("wait_durable")?;
    f.db.wait_durable(&ticket).ctx("wait_durable twice")?;
    Ok(())
}

/// Persistent engines: rows committed with `commit` and with `commit_deferred` + `wait_durable`
/// survive `close` and `open`, with their schema and indexes; an aborted and an unfinished
/// transaction leave nothing. Non-persistent engines: `open` fails with `Unsupported`.
fn reopen_keeps_committed_only(s: &Subject) -> Outcome {
    let f = s.fresh("reopen")?;
    let Some(open) = s.open.clone() else {
        let kind = f.db.engine();
        ensure!(!kind.is_persistent(), "a persistent engine needs an `open` factory");
        return match Database::open(f.dir.join("db"), Options::new().engine(kind)) {
            Err(Error::Unsupported(_)) => Ok(()),
            other => Err(format!("open of a non-persistent engine: {other:?}")),
        };
    };
    table(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("t", row![1, "one"]).ctx("insert")?;
    tx.insert("t", row![2, "two"]).ctx("insert")?;
    tx.commit().ctx("commit")?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.update("t", 2, [("v", "TWO")]).ctx("update")?;
    tx.insert("t", row![3, "three"]).ctx("insert")?;
    let ticket = tx.commit_deferred().ctx("commit_deferred")?;
    f.db.wait_durable(&ticket).ctx("wait_durable")?;
    let mut aborted = f.db.begin().ctx("begin")?;
    aborted.insert("t", row![4, "four"]).ctx("insert")?;
    aborted.abort();
    let mut unfinished = f.db.begin().ctx("begin")?;
    unfinished.delete("t", 1).ctx("delete")?;
    drop(unfinished);
    f.db.close().ctx("close")?;

    let db = open(f.dir.path()).ctx("open")?;
    let want = vec![row![1, "one"], row![2, "TWO"], row![3, "three"]];
    let mut r = db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.scan("t", &Scan::primary()).ctx("scan")?, want, "committed rows after reopen");
    ensure_eq!(
        r.select("t", &[Predicate::eq("v", "TWO")], &Projection::columns(["k"])).ctx("select")?,
        vec![row![2]],
        "index after reopen"
    );
    ensure_eq!(db.table_schema("t").ctx("schema")?.indexes().len(), 1, "schema after reopen");
    drop(r);
    let mut tx = db.begin().ctx("begin")?;
    ensure_err!(tx.insert("t", row![9, "one"]), Error::DuplicateKey { .. }, "unique after reopen");
    tx.insert("t", row![4, "four"]).ctx("insert after reopen")?;
    tx.commit().ctx("commit after reopen")?;
    db.close().ctx("close")
}

/// Persistent engines: dropping the handle without `close` (what a crash of the owner looks
/// like to the next opener in the same process) keeps every commit acknowledged as durable.
fn reopen_after_drop(s: &Subject) -> Outcome {
    let Some(open) = s.open.clone() else { return Ok(()) };
    let f = s.fresh("reopen-drop")?;
    table(&f.db)?;
    for k in 0..20 {
        let mut tx = f.db.begin().ctx("begin")?;
        tx.insert("t", row![k, format!("v{k}")]).ctx("insert")?;
        tx.commit().ctx("commit")?;
    }
    let dir = f.dir;
    drop(f.db);
    let db = open(dir.path()).ctx("open")?;
    let mut r = db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.scan("t", &Scan::primary()).ctx("scan")?.len(), 20, "rows after reopen");
    Ok(())
}

/// Persistent engines: deferred commits never waited for survive `close` (it makes everything
/// durable). After a drop without close, each deferred transaction is whole or absent, and the
/// ones present are a prefix of the commit order (a later one never survives without an
/// earlier one it may depend on).
fn deferred_commits_on_reopen(s: &Subject) -> Outcome {
    let Some(open) = s.open.clone() else { return Ok(()) };
    let f = s.fresh("deferred-reopen")?;
    table(&f.db)?;
    let deferred = |db: &Database, ks: std::ops::Range<i64>| -> Result<(), String> {
        for k in ks {
            let mut tx = db.begin().ctx("begin")?;
            tx.insert("t", row![k, format!("v{k}")]).ctx("insert")?;
            tx.insert("t", row![1000 + k, format!("w{k}")]).ctx("insert")?;
            // Deliberately never waited for.
            let _ticket = tx.commit_deferred().ctx("commit_deferred")?;
        }
        Ok(())
    };
    deferred(&f.db, 0..10)?;
    let dir = f.dir;
    f.db.close().ctx("close")?;
    let db = open(dir.path()).ctx("open after close")?;
    let mut r = db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.scan("t", &Scan::primary()).ctx("scan")?.len(), 20, "deferred rows after close");
    drop(r);
    deferred(&db, 10..20)?;
    drop(db);
    let db = open(dir.path()).ctx("open after drop")?;
    let mut r = db.begin_read().ctx("begin_read")?;
    let mut present = Vec::new();
    for k in 0..20i64 {
        let a = r.get("t", k).ctx("get")?.is_some();
        let b = r.get("t", 1000 + k).ctx("get")?.is_some();
        ensure_eq!(a, b, "transaction {k} is partial after reopen");
        present.push(a);
    }
    ensure!(present[..10].iter().all(|&p| p), "a deferred commit made durable by close was lost");
    ensure!(
        present.windows(2).all(|w| w[0] || !w[1]),
        "the surviving deferred commits are not a prefix: {present:?}"
    );
    Ok(())
}
