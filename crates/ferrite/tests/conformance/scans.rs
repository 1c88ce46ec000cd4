//! Ordered range scans: order of every key type, bounds, limits, both directions, prefixes of
//! composite indexes, and scans over a transaction's own writes.

use std::ops::Bound;

use ferrite::{Database, Key, Row, Scan, TableSchema, Type, Value, row};

use super::{Case, Ctx, Outcome, Subject};

/// Scan cases.
pub const CASES: &[Case] = &[
    Case { name: "primary_i64_order_and_bounds", run: primary_i64_order_and_bounds },
    Case { name: "str_and_bytes_order", run: str_and_bytes_order },
    Case { name: "f64_index_order", run: f64_index_order },
    Case { name: "index_order_with_duplicates", run: index_order_with_duplicates },
    Case { name: "composite_index_prefixes", run: composite_index_prefixes },
    Case { name: "scans_merge_own_writes", run: scans_merge_own_writes },
];

fn kv(db: &Database, name: &str, key: Type) -> Result<(), String> {
    db.create_table(
        TableSchema::new(name)
            .column("k", key)
            .column("v", Type::I64)
            .primary_key("k")
            .index("by_v", ["v"]),
    )
    .ctx("create table")
}

fn load(db: &Database, table: &str, rows: &[Row]) -> Result<(), String> {
    let mut tx = db.begin().ctx("begin")?;
    for r in rows {
        tx.insert(table, r.clone()).ctx("insert")?;
    }
    tx.commit().ctx("commit")
}

fn keys(rows: &[Row]) -> Vec<Value> {
    rows.iter().filter_map(|r| r.first().cloned()).collect()
}

fn primary_i64_order_and_bounds(s: &Subject) -> Outcome {
    let f = s.fresh("scan-i64")?;
    kv(&f.db, "t", Type::I64)?;
    let ks = [50, -3, i64::MAX, 0, -100, 3, 1, i64::MIN, 1000, -1, 2];
    let rows: Vec<Row> = ks.iter().map(|&k| row![k, 0]).collect();
    load(&f.db, "t", &rows)?;
    let mut sorted_keys: Vec<i64> = ks.to_vec();
    sorted_keys.sort_unstable();
    let within = |lo: Bound<i64>, hi: Bound<i64>| -> Vec<Value> {
        sorted_keys.iter().copied().filter(|k| (lo, hi).contains(k)).map(Value::from).collect()
    };
    use std::ops::RangeBounds;
    let mut r = f.db.begin_read().ctx("begin_read")?;
    let bounds: Vec<(Bound<i64>, Bound<i64>)> = vec![
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(-3), Bound::Excluded(3)),
        (Bound::Included(-3), Bound::Included(3)),
        (Bound::Excluded(-3), Bound::Included(3)),
        (Bound::Excluded(-3), Bound::Excluded(3)),
        (Bound::Unbounded, Bound::Excluded(0)),
        (Bound::Included(0), Bound::Unbounded),
        (Bound::Included(i64::MIN), Bound::Included(i64::MIN)),
        (Bound::Excluded(i64::MAX), Bound::Unbounded),
        (Bound::Unbounded, Bound::Excluded(i64::MIN)),
        (Bound::Included(5), Bound::Excluded(5)),
        (Bound::Included(7), Bound::Included(4)),
        (Bound::Included(4), Bound::Included(7)),
    ];
    let to_key = |b: Bound<i64>| b.map(Key::from);
    for (lo, hi) in bounds {
        let scan = Scan::primary().lower(to_key(lo)).upper(to_key(hi));
        let mut want = within(lo, hi);
        let asc = r.scan("t", &scan).ctx("scan")?;
        ensure_eq!(keys(&asc), want, "ascending {lo:?}..{hi:?}");
        want.reverse();
        let desc = r.scan("t", &scan.clone().descending()).ctx("scan")?;
        ensure_eq!(keys(&desc), want, "descending {lo:?}..{hi:?}");
        for limit in [0, 1, 3] {
            let got = r.scan("t", &scan.clone().descending().limit(limit)).ctx("scan")?;
            let w: Vec<Value> = want.iter().take(limit).cloned().collect();
            ensure_eq!(keys(&got), w, "descending {lo:?}..{hi:?} limit {limit}");
        }
        let mut want_asc = want.clone();
        want_asc.reverse();
        let got = r.scan("t", &scan.clone().limit(2)).ctx("scan")?;
        let w: Vec<Value> = want_asc.into_iter().take(2).collect();
        ensure_eq!(keys(&got), w, "ascending {lo:?}..{hi:?} limit 2");
    }
    // YCSB-E: a start key and a count.
    let got = r.scan("t", &Scan::primary().range(Key::from(-2)..).limit(4)).ctx("scan")?;
    ensure_eq!(keys(&got), vec![Value::from(-1), 0.into(), 1.into(), 2.into()], "YCSB-E scan");
    Ok(())
}

fn str_and_bytes_order(s: &Subject) -> Outcome {
    let f = s.fresh("scan-str")?;
    kv(&f.db, "s", Type::Str)?;
    kv(&f.db, "b", Type::Bytes)?;
    let strs = ["b", "", "ab", "a\u{0}", "B", "é", "aa", "a", "a\u{0}\u{0}"];
    load(&f.db, "s", &strs.iter().map(|k| row![*k, 0]).collect::<Vec<_>>())?;
    let bytes: [&[u8]; 8] = [&[0xff], &[0], &[], &[0, 0], &[1], &[0, 1], &[0xff, 0], &[0, 0xff]];
    load(&f.db, "b", &bytes.iter().map(|k| row![*k, 0]).collect::<Vec<_>>())?;

    let mut want_s: Vec<Value> = strs.iter().map(|k| Value::from(*k)).collect();
    want_s.sort_by(|a, b| a.as_str().map(str::as_bytes).cmp(&b.as_str().map(str::as_bytes)));
    let mut want_b: Vec<Value> = bytes.iter().map(|k| Value::from(*k)).collect();
    want_b.sort_by(|a, b| a.as_bytes().cmp(&b.as_bytes()));

    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(keys(&r.scan("s", &Scan::primary()).ctx("scan")?), want_s, "str keys by byte order");
    ensure_eq!(
        keys(&r.scan("b", &Scan::primary()).ctx("scan")?),
        want_b,
        "bytes keys by byte order"
    );
    let mut rev = want_b.clone();
    rev.reverse();
    ensure_eq!(keys(&r.scan("b", &Scan::primary().descending()).ctx("scan")?), rev, "bytes desc");
    let got = r.scan("s", &Scan::primary().range("a".."b")).ctx("scan")?;
    let w: Vec<Value> = want_s
        .iter()
        .filter(|v| **v >= Value::from("a") && **v < Value::from("b"))
        .cloned()
        .collect();
    ensure_eq!(keys(&got), w, "str range");
    // A key prefix compares whole values: prefix("a") is the value "a", not every string
    // starting with 'a'.
    let got = r.scan("s", &Scan::primary().prefix("a")).ctx("scan")?;
    ensure_eq!(keys(&got), vec![Value::from("a")], "prefix is a value prefix");
    let got = r
        .scan("b", &Scan::primary().range(Key::from(&[0u8][..])..=Key::from(&[0u8, 0xff][..])))
        .ctx("scan")?;
    let w: Vec<Value> = vec![
        Value::from(&[0u8][..]),
        Value::from(&[0u8, 0][..]),
        Value::from(&[0u8, 1][..]),
        Value::from(&[0u8, 0xff][..]),
    ];
    ensure_eq!(keys(&got), w, "bytes range with 0x00 and 0xff");
    Ok(())
}

fn f64_index_order(s: &Subject) -> Outcome {
    let f = s.fresh("scan-f64")?;
    f.db.create_table(
        TableSchema::new("m")
            .column("id", Type::I64)
            .column("x", Type::F64)
            .primary_key("id")
            .index("by_x", ["x"]),
    )
    .ctx("create")?;
    let xs = [2.5, f64::NAN, -0.0, f64::NEG_INFINITY, 0.0, -1.5, f64::INFINITY, 1e-300];
    let rows: Vec<Row> = xs.iter().enumerate().map(|(i, &x)| row![i as i64, x]).collect();
    load(&f.db, "m", &rows)?;
    let mut want: Vec<Value> = xs.iter().map(|&x| Value::from(x)).collect();
    want.sort();
    let xs_of = |rows: Vec<Row>| -> Vec<Value> {
        rows.into_iter().filter_map(|r| r.get(1).cloned()).collect()
    };
    let mut r = f.db.begin_read().ctx("begin_read")?;
    let got = r.scan("m", &Scan::index("by_x")).ctx("scan")?;
    ensure_eq!(xs_of(got), want, "f64 in IEEE totalOrder (-inf < -0.0 < 0.0 < inf < NaN)");
    let got = r.scan("m", &Scan::index("by_x").range(-1.5..=0.0)).ctx("scan")?;
    ensure_eq!(xs_of(got), vec![Value::from(-1.5), (-0.0).into(), 0.0.into()], "f64 range");
    let got = r.scan("m", &Scan::index("by_x").descending().limit(2)).ctx("scan")?;
    ensure_eq!(xs_of(got), vec![Value::from(f64::NAN), f64::INFINITY.into()], "f64 desc");
    Ok(())
}

fn index_order_with_duplicates(s: &Subject) -> Outcome {
    let f = s.fresh("scan-dup")?;
    kv(&f.db, "t", Type::I64)?;
    let rows: Vec<Row> = (0..20).map(|k| row![(k * 7) % 20 - 10, k % 4 - 1]).collect();
    load(&f.db, "t", &rows)?;
    let mut by_v = rows.clone();
    by_v.sort_by(|a, b| (&a[1], &a[0]).cmp(&(&b[1], &b[0])));
    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.scan("t", &Scan::index("by_v")).ctx("scan")?, by_v, "by (value, primary key)");
    let mut rev = by_v.clone();
    rev.reverse();
    ensure_eq!(r.scan("t", &Scan::index("by_v").descending()).ctx("scan")?, rev, "descending");
    let want: Vec<Row> = by_v.iter().filter(|r| r[1] == Value::from(0)).cloned().collect();
    ensure_eq!(r.scan("t", &Scan::index("by_v").prefix(0)).ctx("scan")?, want, "equal values");
    let want: Vec<Row> = by_v
        .iter()
        .filter(|r| r[1] > Value::from(-1) && r[1] <= Value::from(1))
        .take(3)
        .cloned()
        .collect();
    let scan =
        Scan::index("by_v").lower(Bound::Excluded(Key::from(-1))).upper(Bound::Included(1.into()));
    ensure_eq!(r.scan("t", &scan.clone().limit(3)).ctx("scan")?, want, "range with limit");
    let want: Vec<Row> = rev
        .iter()
        .filter(|r| r[1] > Value::from(-1) && r[1] <= Value::from(1))
        .take(3)
        .cloned()
        .collect();
    ensure_eq!(r.scan("t", &scan.descending().limit(3)).ctx("scan")?, want, "desc range limit");
    Ok(())
}

fn composite_index_prefixes(s: &Subject) -> Outcome {
    let f = s.fresh("scan-prefix")?;
    f.db.create_table(
        TableSchema::new("orders")
            .column("id", Type::I64)
            .column("w", Type::I64)
            .column("d", Type::I64)
            .column("o", Type::I64)
            .primary_key("id")
            .unique_index("by_wdo", ["w", "d", "o"]),
    )
    .ctx("create")?;
    let mut rows = Vec::new();
    let mut id = 0;
    for w in 1..=2 {
        for d in 1..=3 {
            for o in [9, 3, 7, 1, 5] {
                id += 1;
                rows.push(row![id, w, d, o]);
            }
        }
    }
    load(&f.db, "orders", &rows)?;
    let wdo = |rows: Vec<Row>| -> Vec<(i64, i64, i64)> {
        rows.iter()
            .map(|r| {
                let g = |i: usize| r.get(i).and_then(Value::as_i64).unwrap_or(-1);
                (g(1), g(2), g(3))
            })
            .collect()
    };
    let mut r = f.db.begin_read().ctx("begin_read")?;
    // Delivery: the oldest order of (w, d).
    let got = r.scan("orders", &Scan::index("by_wdo").prefix((1, 2)).limit(1)).ctx("scan")?;
    ensure_eq!(wdo(got), vec![(1, 2, 1)], "oldest order of (1, 2)");
    let got = r
        .scan("orders", &Scan::index("by_wdo").prefix((1, 2)).descending().limit(1))
        .ctx("scan")?;
    ensure_eq!(wdo(got), vec![(1, 2, 9)], "newest order of (1, 2)");
    // Stock-Level: orders of (w, d) in [lo, hi).
    let got = r
        .scan("orders", &Scan::index("by_wdo").range(Key::from((2, 3, 3))..Key::from((2, 3, 9))))
        .ctx("scan")?;
    ensure_eq!(wdo(got), vec![(2, 3, 3), (2, 3, 5), (2, 3, 7)], "range inside a prefix");
    let got = r
        .scan("orders", &Scan::index("by_wdo").range(Key::from((1, 2))..=Key::from((1, 3))))
        .ctx("scan")?;
    ensure_eq!(got.len(), 10, "inclusive prefix bounds cover whole groups");
    let got = r
        .scan("orders", &Scan::index("by_wdo").lower(Bound::Excluded(Key::from((1, 3)))).limit(2))
        .ctx("scan")?;
    ensure_eq!(wdo(got), vec![(2, 1, 1), (2, 1, 3)], "excluded prefix skips the whole group");
    let got = r
        .scan(
            "orders",
            &Scan::index("by_wdo").upper(Bound::Excluded(Key::from(2))).descending().limit(1),
        )
        .ctx("scan")?;
    ensure_eq!(wdo(got), vec![(1, 3, 9)], "excluded upper prefix");
    let got = r.scan("orders", &Scan::index("by_wdo").prefix(Key::empty())).ctx("scan")?;
    ensure_eq!(got.len(), rows.len(), "empty prefix is everything");
    Ok(())
}

fn scans_merge_own_writes(s: &Subject) -> Outcome {
    let f = s.fresh("scan-own")?;
    kv(&f.db, "t", Type::I64)?;
    let base: Vec<Row> = (0..10).map(|k| row![k * 10, k % 3]).collect();
    load(&f.db, "t", &base)?;
    let mut tx = f.db.begin().ctx("begin")?;
    tx.insert("t", row![15, 1]).ctx("insert")?;
    tx.insert("t", row![-5, 2]).ctx("insert")?;
    tx.insert("t", row![95, 0]).ctx("insert")?;
    tx.update("t", 30, [("v", 2)]).ctx("update")?;
    tx.delete("t", 40).ctx("delete")?;
    tx.delete("t", 0).ctx("delete")?;
    let mut view: Vec<Row> = base
        .iter()
        .filter(|r| r[0] != Value::from(40) && r[0] != Value::from(0))
        .map(|r| if r[0] == Value::from(30) { row![30, 2] } else { r.clone() })
        .chain([row![15, 1], row![-5, 2], row![95, 0]])
        .collect();
    view.sort();
    ensure_eq!(tx.scan("t", &Scan::primary()).ctx("scan")?, view, "primary scan of own view");
    let mut rev = view.clone();
    rev.reverse();
    ensure_eq!(tx.scan("t", &Scan::primary().descending()).ctx("scan")?, rev, "descending");
    let w: Vec<Row> = view.iter().filter(|r| r[0] >= Value::from(10)).take(3).cloned().collect();
    ensure_eq!(tx.scan("t", &Scan::primary().range(10..).limit(3)).ctx("scan")?, w, "limit");
    let mut by_v = view.clone();
    by_v.sort_by(|a, b| (&a[1], &a[0]).cmp(&(&b[1], &b[0])));
    ensure_eq!(tx.scan("t", &Scan::index("by_v")).ctx("scan")?, by_v, "index scan of own view");
    let w: Vec<Row> =
        by_v.iter().rev().filter(|r| r[1] == Value::from(2)).take(2).cloned().collect();
    ensure_eq!(
        tx.scan("t", &Scan::index("by_v").prefix(2).descending().limit(2)).ctx("scan")?,
        w,
        "index prefix desc limit over own writes"
    );
    tx.commit().ctx("commit")?;
    let mut r = f.db.begin_read().ctx("begin_read")?;
    ensure_eq!(r.scan("t", &Scan::index("by_v")).ctx("scan")?, by_v, "after commit");
    Ok(())
}
