//! Every operation, index maintenance, projection, and every error a caller can cause.

use std::ops::Bound;

use ferrite::{
    Database, Error, Key, Predicate, Projection, Scan, SchemaError, TableSchema, Type, Value, row,
};

use super::{Case, Ctx, Outcome, Subject, sorted};

/// Operation cases.
pub const CASES: &[Case] = &[
    Case { name: "create_table_and_schema", run: create_table_and_schema },
    Case { name: "insert_get_all_types", run: insert_get_all_types },
    Case { name: "update_delete", run: update_delete },
    Case { name: "failed_operation_keeps_transaction", run: failed_operation_keeps_transaction },
    Case { name: "abort_and_drop_discard", run: abort_and_drop_discard },
    Case { name: "unique_index", run: unique_index },
    Case { name: "index_maintenance", run: index_maintenance },
    Case { name: "select_predicates", run: select_predicates },
    Case { name: "projection", run: projection },
];

/// Error cases (schema misuse never panics and leaves the transaction usable).
pub const ERROR_CASES: &[Case] = &[
    Case { name: "schema_definition_errors", run: schema_definition_errors },
    Case { name: "schema_errors_in_operations", run: schema_errors_in_operations },
    Case { name: "not_found_and_duplicate", run: not_found_and_duplicate },
];

/// `people(id i64 pk, name str, email str unique, age i64 indexed, score f64, photo bytes)`.
pub fn people(db: &Database) -> Result<(), String> {
    db.create_table(
        TableSchema::new("people")
            .column("id", Type::I64)
            .column("name", Type::Str)
            .column("email", Type::Str)
            .column("age", Type::I64)
            .column("score", Type::F64)
            .column("photo", Type::Bytes)
            .primary_key("id")
            .unique_index("by_email", ["email"])
            .index("by_age", ["age"]),
    )
    .ctx("create table people")
}

fn person(id: i64, name: &str, age: i64) -> ferrite::Row {
    row![id, name, format!("{name}@example.org"), age, age as f64 / 2.0, name.as_bytes()]
}

fn create_table_and_schema(s: &Subject) -> Outcome {
    let f = s.fresh("schema")?;
    people(&f.db)?;
    f.db.create_table(TableSchema::new("kv").column("k", Type::Bytes).primary_key("k"))
        .ctx("create kv")?;
    ensure_eq!(
        f.db.table_names().ctx("table_names")?,
        vec!["kv".to_owned(), "people".into()],
        "names"
    );
    let schema = f.db.table_schema("people").ctx("schema")?;
    ensure_eq!(schema.primary_key_column(), Some("id"), "primary key");
    ensure_eq!(schema.columns().len(), 6, "columns");
    ensure_eq!(schema.indexes().len(), 2, "indexes");
    ensure!(schema.indexes()[0].is_unique() && !schema.indexes()[1].is_unique(), "uniqueness");
    ensure_err!(
        f.db.create_table(TableSchema::new("kv").column("k", Type::I64).primary_key("k")),
        Error::Schema(SchemaError::TableExists(_)),
        "duplicate table"
    );
    ensure_err!(f.db.table_schema("nope"), Error::Schema(SchemaError::UnknownTable(_)), "schema");
    Ok(())
}

fn insert_get_all_types(s: &Subject) -> Outcome {
    let f = s.fresh("insert")?;
    people(&f.db)?;
    f.db.create_table(
        TableSchema::new("blobs").column("k", Type::Bytes).column("v", Type::Str).primary_key("k"),
    )
    .ctx("create blobs")?;
    f.db.create_table(
        TableSchema::new("names").column("k", Type::Str).column("v", Type::F64).primary_key("k"),
    )
    .ctx("create names")?;

    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    tx.insert("people", person(-7, "bob", 41)).ctx("insert negative key")?;
    tx.insert("blobs", row![b"\x00\x01", "zero-one"]).ctx("insert bytes key")?;
    tx.insert("blobs", row![b"", "empty"]).ctx("insert empty bytes key")?;
    tx.insert("names", row!["", f64::NAN]).ctx("insert empty str key")?;
    tx.insert("names", row!["ü", -0.0]).ctx("insert utf-8 key")?;
    ensure_eq!(tx.get("people", 1).ctx("get own")?, Some(person(1, "ann", 30)), "own write");
    ensure_eq!(tx.get("people", 2).ctx("get missing")?, None, "missing key");
    tx.commit().ctx("commit")?;

    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.get("people", -7).ctx("get")?, Some(person(-7, "bob", 41)), "committed row");
    ensure_eq!(
        r.get("blobs", &b"\x00\x01"[..]).ctx("get")?,
        Some(row![b"\x00\x01", "zero-one"]),
        "bytes"
    );
    ensure_eq!(r.get("blobs", &b""[..]).ctx("get")?, Some(row![b"", "empty"]), "empty bytes");
    ensure_eq!(r.get("names", "").ctx("get")?, Some(row!["", f64::NAN]), "NaN round trip");
    ensure_eq!(r.get("names", "ü").ctx("get")?, Some(row!["ü", -0.0]), "-0.0 round trip");
    let mut tx = f.db.begin().ctx("begin")?;
    ensure_eq!(tx.get("people", 1).ctx("get")?, Some(person(1, "ann", 30)), "rw sees committed");
    tx.commit().ctx("commit reader")?;
    Ok(())
}

fn update_delete(s: &Subject) -> Outcome {
    let f = s.fresh("update")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    for (id, name) in [(1, "ann"), (2, "bob"), (3, "cy")] {
        tx.insert("people", person(id, name, 20 + id)).ctx("insert")?;
    }
    tx.commit().ctx("commit")?;

    let mut tx = f.db.begin().ctx("begin")?;
    tx.update("people", 1, [("age", Value::from(99)), ("name", Value::from("ANN"))])
        .ctx("update")?;
    let mut expect = person(1, "ann", 21);
    expect[1] = Value::from("ANN");
    expect[3] = Value::from(99);
    ensure_eq!(tx.get("people", 1).ctx("get")?, Some(expect.clone()), "update seen by own txn");
    tx.update("people", 1, [("score", 1.5)]).ctx("second update")?;
    expect[4] = Value::from(1.5);
    tx.delete("people", 2).ctx("delete")?;
    ensure_eq!(tx.get("people", 2).ctx("get deleted")?, None, "own delete");
    // Delete then insert the same key in one transaction; insert then delete another.
    tx.delete("people", 3).ctx("delete 3")?;
    tx.insert("people", person(3, "cy2", 50)).ctx("reinsert 3")?;
    tx.insert("people", person(4, "dee", 60)).ctx("insert 4")?;
    tx.delete("people", 4).ctx("delete 4")?;
    tx.commit().ctx("commit")?;

    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.get("people", 1).ctx("get")?, Some(expect), "updated row");
    ensure_eq!(r.get("people", 2).ctx("get")?, None, "deleted row");
    ensure_eq!(r.get("people", 3).ctx("get")?, Some(person(3, "cy2", 50)), "reinserted row");
    ensure_eq!(r.get("people", 4).ctx("get")?, None, "inserted and deleted row");
    Ok(())
}

fn failed_operation_keeps_transaction(s: &Subject) -> Outcome {
    let f = s.fresh("failed-op")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    ensure_err!(tx.insert("people", person(1, "ann", 30)), Error::DuplicateKey { .. }, "dup");
    ensure_err!(tx.update("people", 9, [("age", 1)]), Error::NotFound { .. }, "update missing");
    ensure_err!(tx.insert("people", row![2]), Error::Schema(_), "arity");
    tx.insert("people", person(2, "bob", 31)).ctx("insert after errors")?;
    tx.commit().ctx("commit after failed operations")?;
    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(
        r.scan("people", &Scan::primary()).ctx("scan")?,
        vec![person(1, "ann", 30), person(2, "bob", 31)],
        "failed operations had no effect, the others committed"
    );
    Ok(())
}

fn abort_and_drop_discard(s: &Subject) -> Outcome {
    let f = s.fresh("abort")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    tx.commit().ctx("commit")?;

    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(2, "bob", 30)).ctx("insert")?;
    tx.update("people", 1, [("age", 5)]).ctx("update")?;
    tx.abort();
    {
        let mut tx = f.db.begin().ctx("begin")?;
        tx.delete("people", 1).ctx("delete")?;
        tx.insert("people", person(3, "cy", 30)).ctx("insert")?;
        // dropped here without commit
    }
    let r = f.db.begin_read().ctx("begin_read")?;
    drop(r);
    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(
        r.scan("people", &Scan::primary()).ctx("scan")?,
        vec![person(1, "ann", 30)],
        "aborted and dropped transactions left no trace"
    );
    ensure_eq!(
        r.scan("people", &Scan::index("by_age")).ctx("index scan")?,
        vec![person(1, "ann", 30)],
        "aborted writes left no index entries"
    );
    Ok(())
}

fn unique_index(s: &Subject) -> Outcome {
    let f = s.fresh("unique")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    tx.insert("people", person(2, "bob", 30)).ctx("non-unique index may repeat")?;
    let mut dup = person(3, "cy", 1);
    dup[2] = Value::from("ann@example.org");
    match tx.insert("people", dup.clone()) {
        Err(Error::DuplicateKey { index, key, .. }) => {
            ensure_eq!(index, "by_email", "index named in DuplicateKey");
            ensure_eq!(key, Key::from("ann@example.org"), "key named in DuplicateKey");
        }
        other => return Err(format!("duplicate in unique index (own write): {other:?}")),
    }
    tx.commit().ctx("commit")?;

    let mut tx = f.db.begin().ctx("begin")?;
    ensure_err!(tx.insert("people", dup), Error::DuplicateKey { .. }, "dup of committed value");
    ensure_err!(
        tx.update("people", 2, [("email", "ann@example.org")]),
        Error::DuplicateKey { .. },
        "update into a taken unique value"
    );
    tx.update("people", 1, [("email", "ann@example.org")]).ctx("keep own value")?;
    // Swap two unique values through a temporary one, and free a value by deleting its row.
    tx.update("people", 1, [("email", "tmp")]).ctx("swap 1")?;
    tx.update("people", 2, [("email", "ann@example.org")]).ctx("swap 2")?;
    tx.update("people", 1, [("email", "bob@example.org")]).ctx("swap 3")?;
    tx.commit().ctx("commit swap")?;

    let mut tx = f.db.begin().ctx("begin")?;
    tx.delete("people", 1).ctx("delete")?;
    let mut reuse = person(5, "eve", 3);
    reuse[2] = Value::from("bob@example.org");
    tx.insert("people", reuse).ctx("reuse a value freed in the same transaction")?;
    tx.commit().ctx("commit reuse")?;

    let mut r = f.db.begin_read().ctx("begin_read")?;
    let emails =
        r.scan("people", &Scan::index("by_email").columns(["email", "id"])).ctx("scan by_email")?;
    ensure_eq!(
        emails,
        vec![row!["ann@example.org", 2], row!["bob@example.org", 5]],
        "unique index after swaps"
    );
    Ok(())
}

fn index_maintenance(s: &Subject) -> Outcome {
    let f = s.fresh("index")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    for id in 0..10 {
        tx.insert("people", person(id, &format!("p{id}"), id % 3)).ctx("insert")?;
    }
    tx.commit().ctx("commit")?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.update("people", 0, [("age", 2)]).ctx("move 0 from age 0 to 2")?;
    tx.update("people", 4, [("name", "renamed")]).ctx("update unindexed column")?;
    tx.delete("people", 3).ctx("delete 3 (age 0)")?;
    tx.insert("people", person(10, "p10", 0)).ctx("insert age 0")?;
    // Uncommitted changes are visible to the writer's own index scans ...
    let ids = |rows: Vec<ferrite::Row>| -> Vec<i64> {
        rows.iter().filter_map(|r| r.first().and_then(Value::as_i64)).collect()
    };
    let own = tx.scan("people", &Scan::index("by_age").prefix(0)).ctx("own index scan")?;
    ensure_eq!(ids(own), vec![6, 9, 10], "age 0 in the writer");
    tx.commit().ctx("commit")?;

    let mut r = f.db.begin_read().ctx("begin_read")?;
    for (age, expect) in [(0, vec![6, 9, 10]), (1, vec![1, 4, 7]), (2, vec![0, 2, 5, 8])] {
        let rows = r.scan("people", &Scan::index("by_age").prefix(age)).ctx("index scan")?;
        ensure_eq!(ids(rows.clone()), expect, "index entries for age {age}");
        for row in &rows {
            let by_pk = r.get("people", row[0].clone()).ctx("get")?;
            ensure_eq!(Some(row.clone()), by_pk, "index scan returns the current row");
        }
    }
    let sel = r.select("people", &[Predicate::eq("age", 1)], &Projection::All).ctx("select")?;
    ensure_eq!(ids(sel), vec![1, 4, 7], "select through the index");
    let by_email = r
        .select("people", &[Predicate::eq("email", "p3@example.org")], &Projection::All)
        .ctx("select deleted email")?;
    ensure!(by_email.is_empty(), "deleted row left a unique-index entry: {by_email:?}");
    Ok(())
}

fn select_predicates(s: &Subject) -> Outcome {
    let f = s.fresh("select")?;
    people(&f.db)?;
    let make = |id: i64| -> ferrite::Row {
        let name = format!("n{}", id.rem_euclid(4));
        let age = id.rem_euclid(5);
        row![id, name.clone(), format!("{id}@x"), age, age as f64 / 2.0, name.as_bytes()]
    };
    let mut tx = f.db.begin().ctx("begin")?;
    for id in -5..15 {
        tx.insert("people", make(id)).ctx("insert")?;
    }
    tx.commit().ctx("commit")?;
    let all: Vec<ferrite::Row> = (-5..15).map(make).collect();
    let expect = |p: &dyn Fn(&ferrite::Row) -> bool| -> Vec<ferrite::Row> {
        all.iter().filter(|r| p(r)).cloned().collect()
    };
    let int = |r: &ferrite::Row, i: usize| r[i].as_i64().unwrap_or(i64::MIN);
    let mut r = f.db.begin_read().ctx("begin_read")?;
    let cases: Vec<(Vec<Predicate>, Vec<ferrite::Row>)> = vec![
        (vec![], all.clone()),
        (vec![Predicate::eq("id", 3)], expect(&|r| int(r, 0) == 3)),
        (vec![Predicate::range("id", -2..3)], expect(&|r| (-2..3).contains(&int(r, 0)))),
        (vec![Predicate::range("id", ..=-4)], expect(&|r| int(r, 0) <= -4)),
        (vec![Predicate::range("id", 10..)], expect(&|r| int(r, 0) >= 10)),
        (vec![Predicate::eq("age", 2)], expect(&|r| int(r, 3) == 2)),
        (
            vec![Predicate::range("age", 1..=2), Predicate::range("id", 0..10)],
            expect(&|r| (1..=2).contains(&int(r, 3)) && (0..10).contains(&int(r, 0))),
        ),
        (
            vec![Predicate::eq("name", "n1"), Predicate::range("age", 3..)],
            expect(&|r| r[1] == Value::from("n1") && int(r, 3) >= 3),
        ),
        (vec![Predicate::range("score", 0.5..1.5)], expect(&|r| (1..3).contains(&int(r, 3)))),
        (vec![Predicate::eq("id", 3), Predicate::eq("id", 4)], vec![]),
        (
            vec![Predicate::Range(
                "id".into(),
                Bound::Included(5.into()),
                Bound::Included(2.into()),
            )],
            vec![],
        ),
        (vec![Predicate::eq("email", "3@x")], expect(&|r| int(r, 0) == 3)),
        (vec![Predicate::range("email", "3@x"..)], expect(&|r| r[2] >= Value::from("3@x"))),
        (vec![Predicate::eq("photo", b"n2")], expect(&|r| r[1] == Value::from("n2"))),
    ];
    for (preds, want) in cases {
        let got = r.select("people", &preds, &Projection::All).ctx("select")?;
        ensure_eq!(got, want, "select {preds:?} (rows in primary-key order)");
    }
    Ok(())
}

fn projection(s: &Subject) -> Outcome {
    let f = s.fresh("projection")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    tx.insert("people", person(2, "bob", 40)).ctx("insert")?;
    let p = Projection::columns(["age", "id", "age"]);
    ensure_eq!(
        tx.select("people", &[], &p).ctx("select")?,
        vec![row![30, 1, 30], row![40, 2, 40]],
        "projection order and repetition"
    );
    ensure_eq!(
        tx.scan("people", &Scan::index("by_age").descending().columns(["name"])).ctx("scan")?,
        vec![row!["bob"], row!["ann"]],
        "scan projection"
    );
    ensure_eq!(
        sorted(tx.select("people", &[], &Projection::columns(["email"])).ctx("select")?),
        vec![row!["ann@example.org"], row!["bob@example.org"]],
        "single column"
    );
    tx.commit().ctx("commit")
}

fn schema_definition_errors(s: &Subject) -> Outcome {
    let f = s.fresh("ddl-errors")?;
    let bad = [
        TableSchema::new("t").column("k", Type::I64),
        TableSchema::new("t").column("k", Type::I64).primary_key("x"),
        TableSchema::new("t").column("k", Type::F64).primary_key("k"),
        TableSchema::new("t").column("k", Type::I64).column("k", Type::Str).primary_key("k"),
        TableSchema::new("t").column("k", Type::I64).primary_key("k").index("i", ["nope"]),
        TableSchema::new("t").column("k", Type::I64).primary_key("k").index("i", ["k", "k"]),
        TableSchema::new("").column("k", Type::I64).primary_key("k"),
    ];
    for schema in bad {
        ensure_err!(
            f.db.create_table(schema.clone()),
            Error::Schema(SchemaError::InvalidDefinition { .. }),
            "invalid definition {schema:?}"
        );
    }
    ensure_eq!(f.db.table_names().ctx("names")?, Vec::<String>::new(), "nothing was created");
    Ok(())
}

fn schema_errors_in_operations(s: &Subject) -> Outcome {
    let f = s.fresh("op-errors")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    use Error::Schema as S;
    ensure_err!(tx.insert("nope", person(2, "b", 1)), S(SchemaError::UnknownTable(_)), "table");
    ensure_err!(tx.get("nope", 1), S(SchemaError::UnknownTable(_)), "get unknown table");
    ensure_err!(tx.insert("people", row![2, "b"]), S(SchemaError::Arity { .. }), "arity");
    let mut wrong = person(2, "b", 1);
    wrong[3] = Value::from("old");
    ensure_err!(tx.insert("people", wrong), S(SchemaError::TypeMismatch { .. }), "type");
    ensure_err!(tx.get("people", "one"), S(SchemaError::TypeMismatch { .. }), "key type");
    ensure_err!(tx.delete("people", 1.5), S(SchemaError::TypeMismatch { .. }), "key type");
    ensure_err!(tx.update("people", 1, [("zz", 1)]), S(SchemaError::UnknownColumn { .. }), "col");
    ensure_err!(tx.update("people", 1, [("age", "x")]), S(SchemaError::TypeMismatch { .. }), "ty");
    ensure_err!(tx.update("people", 1, [("id", 2)]), S(SchemaError::PrimaryKeyUpdate { .. }), "pk");
    ensure_err!(
        tx.select("people", &[Predicate::eq("zz", 1)], &Projection::All),
        S(SchemaError::UnknownColumn { .. }),
        "predicate column"
    );
    ensure_err!(
        tx.select("people", &[Predicate::range("age", "a".."b")], &Projection::All),
        S(SchemaError::TypeMismatch { .. }),
        "predicate type"
    );
    ensure_err!(
        tx.select("people", &[], &Projection::columns(["zz"])),
        S(SchemaError::UnknownColumn { .. }),
        "projection column"
    );
    ensure_err!(tx.scan("people", &Scan::index("zz")), S(SchemaError::UnknownIndex { .. }), "ix");
    ensure_err!(
        tx.scan("people", &Scan::primary().prefix((1, 2))),
        S(SchemaError::KeyArity { .. }),
        "key longer than the primary key"
    );
    ensure_err!(
        tx.scan("people", &Scan::index("by_age").range(Key::from("a")..)),
        S(SchemaError::TypeMismatch { .. }),
        "scan bound type"
    );
    ensure_err!(
        tx.scan("people", &Scan::primary().columns(["zz"])),
        S(SchemaError::UnknownColumn { .. }),
        "scan projection"
    );
    ensure_eq!(tx.get("people", 1).ctx("get")?, Some(person(1, "ann", 30)), "txn still usable");
    tx.commit().ctx("commit after schema errors")?;
    Ok(())
}

fn not_found_and_duplicate(s: &Subject) -> Outcome {
    let f = s.fresh("nf-dup")?;
    people(&f.db)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("people", person(1, "ann", 30)).ctx("insert")?;
    tx.commit().ctx("commit")?;
    let mut tx = f.db.begin().ctx("begin")?;
    match tx.delete("people", 2) {
        Err(Error::NotFound { table, key }) => {
            ensure_eq!(table, "people", "table in NotFound");
            ensure_eq!(key, Value::from(2), "key in NotFound");
        }
        other => return Err(format!("delete missing: {other:?}")),
    }
    ensure_err!(tx.update("people", 2, [("age", 1)]), Error::NotFound { .. }, "update missing");
    match tx.insert("people", person(1, "x", 1)) {
        Err(e @ Error::DuplicateKey { .. }) => {
            ensure!(!e.is_retryable(), "DuplicateKey must not be retryable");
            if let Error::DuplicateKey { index, key, .. } = e {
                ensure_eq!(index, ferrite::PRIMARY, "primary key named");
                ensure_eq!(key, Key::from(1), "key named");
            }
        }
        other => return Err(format!("insert duplicate primary key: {other:?}")),
    }
    tx.delete("people", 1).ctx("delete")?;
    ensure_err!(tx.delete("people", 1), Error::NotFound { .. }, "delete twice");
    tx.commit().ctx("commit")
}
