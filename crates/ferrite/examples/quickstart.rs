//! Quick start: create a database in a fresh directory, define a table with indexes, insert,
//! query, scan, update in a retried transaction, read a snapshot, close, reopen and read it
//! back, then remove the directory.
//!
//! Run with `cargo run -p ferrite --example quickstart [engine]` (default engine: `sofort`,
//! persistent; `reference` is in memory and cannot be reopened).

use ferrite::{
    Database, Direction, Error, Options, Predicate, Projection, Read, Row, Scan, TableSchema, Type,
    Value, row,
};

/// Rows as `(v, v, ...)` tuples, with values in their display form.
fn show(rows: &[Row]) -> String {
    let tuples: Vec<String> = rows
        .iter()
        .map(|r| format!("({})", r.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")))
        .collect();
    tuples.join(" ")
}

/// The sum of a customer's order amounts as a transaction sees it. Taking `&mut dyn Read`
/// makes it work on a read-write `Transaction` and a `ReadTransaction` alike.
fn total_of(r: &mut dyn Read, customer: &str) -> Result<f64, Error> {
    let rows = r.select(
        "orders",
        &[Predicate::eq("customer", customer)],
        &Projection::columns(["amount"]),
    )?;
    Ok(rows.iter().filter_map(|r| r.first().and_then(Value::as_f64)).sum())
}

fn main() -> Result<(), Error> {
    let engine: ferrite::EngineKind =
        std::env::args().nth(1).unwrap_or_else(|| "sofort".into()).parse()?;
    // A fresh directory: `create` refuses a path where something is.
    let path = std::env::temp_dir().join(format!("ferrite-quickstart-{}", std::process::id()));
    // Small pool segments (8 MiB) for an example; the default is 128 MiB.
    let options =
        Options::new().engine(engine).pmem(ferrite::pmem::Options::new().segment_size(8 << 20));
    let db = Database::create(&path, options.clone())?;
    println!("engine {} (persistent: {})", db.engine(), db.engine().is_persistent());

    db.create_table(
        TableSchema::new("orders")
            .column("id", Type::I64)
            .column("customer", Type::Str)
            .column("amount", Type::F64)
            .column("note", Type::Bytes)
            .primary_key("id")
            .index("by_customer", ["customer", "amount"]),
    )?;

    // Load some rows; `commit` returns once they are durable.
    let mut tx = db.begin()?;
    for (id, customer, amount) in
        [(1, "ann", 12.5), (2, "bob", 3.0), (3, "ann", 40.0), (4, "cy", 7.25), (5, "ann", 1.0)]
    {
        tx.insert("orders", row![id, customer, amount, format!("order {id}").into_bytes()])?;
    }
    tx.commit()?;

    // Point read, a conjunctive select with a projection, and ordered scans.
    let mut r = db.begin_read()?;
    println!("order 3: {}", show(&r.get("orders", 3)?.into_iter().collect::<Vec<_>>()));
    let big_ann = r.select(
        "orders",
        &[Predicate::eq("customer", "ann"), Predicate::range("amount", 10.0..)],
        &Projection::columns(["id", "amount"]),
    )?;
    println!("ann's orders of at least 10: {}", show(&big_ann));
    let last_two = r.scan("orders", &Scan::primary().direction(Direction::Descending).limit(2))?;
    println!("two highest ids: {}", show(&last_two));
    let ann_by_amount =
        r.scan("orders", &Scan::index("by_customer").prefix("ann").columns(["amount"]))?;
    println!("ann's amounts, ascending: {}", show(&ann_by_amount));
    drop(r);

    // A read-modify-write, retried when a concurrent transaction wins a conflict.
    let total = loop {
        let mut tx = db.begin()?;
        let total = total_of(&mut tx, "ann")?;
        tx.update("orders", 5, [("amount", Value::from(total))])?;
        match tx.commit() {
            Ok(()) => break total,
            Err(e) if e.is_retryable() => continue,
            Err(e) => return Err(e),
        }
    };
    println!("order 5 now holds ann's total {total}");

    // A deferred commit: visible at once, durable once the ticket is waited for.
    let mut tx = db.begin()?;
    tx.delete("orders", 2)?;
    let ticket = tx.commit_deferred()?;
    db.wait_durable(&ticket)?;
    println!("deleted order 2 (commit #{})", ticket.sequence());

    let mut r = db.begin_read()?;
    println!("remaining ids: {}", show(&r.select("orders", &[], &Projection::columns(["id"]))?));
    println!("ann's total in a snapshot now: {}", total_of(&mut r, "ann")?);
    drop(r);
    db.close()?;

    // Reopen (recovering if needed) and read back what was committed.
    if engine.is_persistent() {
        let db = Database::open(&path, options)?;
        if let Some(report) = db.recovery_report() {
            println!(
                "reopened: {} live rows, first transaction after {:?}",
                report.live_rows, report.time_to_first_transaction
            );
        }
        let mut r = db.begin_read()?;
        println!(
            "after reopen, ids: {}",
            show(&r.select("orders", &[], &Projection::columns(["id"]))?)
        );
        drop(r);
        db.close()?;
        std::fs::remove_dir_all(&path).map_err(|e| Error::Io {
            op: "remove_dir_all",
            at: path.display().to_string(),
            source: e,
        })?;
    }
    Ok(())
}
