//! Model-based property tests: random transactions checked against a serial model (a
//! `BTreeMap` per table), with `proptest` generating and shrinking the inputs.
//!
//! - [`serial`]: transactions one after another (read-write ones commit, abort or are dropped;
//!   read-only ones read). Every operation's result must equal the model's, including errors
//!   (`NotFound`, `DuplicateKey`), scans over every index in both directions with limits, and
//!   selects; at the end every table and index is compared whole. On persistent engines the
//!   sequence also closes (or drops) and reopens the database at random points, and every
//!   reopen is followed by the whole comparison.
//! - [`interleaved`]: up to three sessions whose operations interleave in one thread. The check
//!   is commit-order serializability: when a read-write transaction commits, replaying its
//!   operations on the model of everything committed before it must reproduce every result it
//!   saw (a transaction whose writes all failed may instead match the state it began with); a
//!   read-only transaction must match the state committed when it began. `Conflict` (or
//!   `DuplicateKey` at commit) aborts a transaction; an engine may abort as often as it likes
//!   here, the isolation scenarios check that it does not abort needlessly.
//!
//! Seeds: `FERRITE_TEST_SEED` (decimal or `0x` hex) replays a run; otherwise a random seed is
//! printed. `PROPTEST_CASES` sets the number of cases (defaults below).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::{Bound, RangeBounds as _};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use ferrite::{
    Database, Error, Key, Predicate, Projection, Read, ReadTransaction, Row, Scan, TableSchema,
    Transaction, Type, Value,
};

use super::{Ctx, Subject};

/// Default number of cases of each property when `PROPTEST_CASES` is unset.
pub const DEFAULT_CASES: u32 = 256;

// ---------------------------------------------------------------------------------------------
// Schema and model

/// A table of the model schema.
#[derive(Clone, Debug)]
struct Def {
    name: &'static str,
    columns: &'static [(&'static str, Type)],
    /// (name, column positions, unique)
    indexes: &'static [(&'static str, &'static [usize], bool)],
}

const TABLES: &[Def] = &[
    Def {
        name: "t",
        columns: &[("k", Type::I64), ("a", Type::I64), ("b", Type::Str), ("c", Type::F64)],
        indexes: &[("by_a", &[1], false), ("by_b", &[2], true), ("by_ac", &[1, 3], false)],
    },
    Def {
        name: "s",
        columns: &[("k", Type::Str), ("v", Type::Bytes)],
        indexes: &[("by_v", &[1], false)],
    },
];

fn create_tables(db: &Database) -> Result<(), String> {
    for def in TABLES {
        let mut schema = TableSchema::new(def.name);
        for &(c, ty) in def.columns {
            schema = schema.column(c, ty);
        }
        schema = schema.primary_key(def.columns[0].0);
        for &(name, cols, unique) in def.indexes {
            let cols: Vec<&str> = cols.iter().map(|&c| def.columns[c].0).collect();
            schema =
                if unique { schema.unique_index(name, cols) } else { schema.index(name, cols) };
        }
        db.create_table(schema).ctx("create table")?;
    }
    Ok(())
}

/// The serial model: rows by primary key, per table.
#[derive(Clone, Debug, Default)]
struct Model {
    tables: Vec<BTreeMap<Value, Row>>,
}

/// What an operation returned, comparable between engine and model.
#[derive(Clone, Debug, PartialEq)]
enum Observed {
    Done,
    Row(Option<Row>),
    Rows(Vec<Row>),
    NotFound,
    Duplicate,
    Conflict,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(usize, Row),
    Update(usize, Value, Vec<(usize, Value)>),
    Delete(usize, Value),
    Get(usize, Value),
    Scan {
        table: usize,
        index: Option<usize>,
        lower: Bound<Key>,
        upper: Bound<Key>,
        desc: bool,
        limit: Option<usize>,
    },
    Select(usize, Vec<(usize, Bound<Value>, Bound<Value>)>),
}

impl Op {
    fn is_write(&self) -> bool {
        matches!(self, Op::Insert(..) | Op::Update(..) | Op::Delete(..))
    }
}

fn cmp_prefix(values: &[Value], bound: &Key) -> std::cmp::Ordering {
    for (a, b) in values.iter().zip(bound.values()) {
        match a.cmp(b) {
            std::cmp::Ordering::Equal => {}
            other => return other,
        }
    }
    std::cmp::Ordering::Equal
}

fn in_prefix_range(values: &[Value], lower: &Bound<Key>, upper: &Bound<Key>) -> bool {
    use std::cmp::Ordering::*;
    let lo = match lower {
        Bound::Included(b) => cmp_prefix(values, b) != Less,
        Bound::Excluded(b) => cmp_prefix(values, b) == Greater,
        Bound::Unbounded => true,
    };
    let hi = match upper {
        Bound::Included(b) => cmp_prefix(values, b) != Greater,
        Bound::Excluded(b) => cmp_prefix(values, b) == Less,
        Bound::Unbounded => true,
    };
    lo && hi
}

fn in_value_range(v: &Value, lower: &Bound<Value>, upper: &Bound<Value>) -> bool {
    (lower.as_ref(), upper.as_ref()).contains(v)
}

impl Model {
    fn new() -> Self {
        Model { tables: vec![BTreeMap::new(); TABLES.len()] }
    }

    fn unique_clash(&self, t: usize, row: &Row, except: &Value) -> bool {
        let def = &TABLES[t];
        def.indexes.iter().filter(|ix| ix.2).any(|&(_, cols, _)| {
            let key: Vec<&Value> = cols.iter().map(|&c| &row[c]).collect();
            self.tables[t].iter().any(|(pk, other)| {
                pk != except && cols.iter().map(|&c| &other[c]).eq(key.iter().copied())
            })
        })
    }

    fn apply(&mut self, op: &Op) -> Observed {
        match op {
            Op::Insert(t, row) => {
                let pk = row[0].clone();
                if self.tables[*t].contains_key(&pk) || self.unique_clash(*t, row, &pk) {
                    return Observed::Duplicate;
                }
                self.tables[*t].insert(pk, row.clone());
                Observed::Done
            }
            Op::Update(t, key, assignments) => {
                let Some(mut row) = self.tables[*t].get(key).cloned() else {
                    return Observed::NotFound;
                };
                for (c, v) in assignments {
                    row[*c] = v.clone();
                }
                if self.unique_clash(*t, &row, key) {
                    return Observed::Duplicate;
                }
                self.tables[*t].insert(key.clone(), row);
                Observed::Done
            }
            Op::Delete(t, key) => match self.tables[*t].remove(key) {
                Some(_) => Observed::Done,
                None => Observed::NotFound,
            },
            Op::Get(t, key) => Observed::Row(self.tables[*t].get(key).cloned()),
            Op::Scan { table, index, lower, upper, desc, limit } => {
                let def = &TABLES[*table];
                let key_cols: Vec<usize> = match index {
                    None => vec![0],
                    Some(i) => def.indexes[*i].1.to_vec(),
                };
                let mut entries: Vec<(Vec<Value>, &Row)> = self.tables[*table]
                    .values()
                    .map(|r| (key_cols.iter().map(|&c| r[c].clone()).collect::<Vec<Value>>(), r))
                    .filter(|(k, _)| in_prefix_range(k, lower, upper))
                    .collect();
                entries.sort_by(|a, b| (&a.0, &a.1[0]).cmp(&(&b.0, &b.1[0])));
                if *desc {
                    entries.reverse();
                }
                let n = limit.unwrap_or(usize::MAX);
                Observed::Rows(entries.into_iter().take(n).map(|(_, r)| r.clone()).collect())
            }
            Op::Select(t, preds) => Observed::Rows(
                self.tables[*t]
                    .values()
                    .filter(|r| preds.iter().all(|(c, lo, hi)| in_value_range(&r[*c], lo, hi)))
                    .cloned()
                    .collect(),
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running operations on an engine

fn observe<T>(r: ferrite::Result<T>, ok: impl FnOnce(T) -> Observed) -> Result<Observed, String> {
    match r {
        Ok(v) => Ok(ok(v)),
        Err(Error::NotFound { .. }) => Ok(Observed::NotFound),
        Err(Error::DuplicateKey { .. }) => Ok(Observed::Duplicate),
        Err(Error::Conflict { .. }) => Ok(Observed::Conflict),
        Err(e) => Err(format!("unexpected error {e} ({e:?})")),
    }
}

fn predicates(t: usize, preds: &[(usize, Bound<Value>, Bound<Value>)]) -> Vec<Predicate> {
    preds
        .iter()
        .map(|(c, lo, hi)| {
            let col = TABLES[t].columns[*c].0;
            match (lo, hi) {
                (Bound::Included(a), Bound::Included(b)) if a == b => Predicate::eq(col, a.clone()),
                _ => Predicate::Range(col.into(), lo.clone(), hi.clone()),
            }
        })
        .collect()
}

fn scan_of(
    table: usize,
    index: Option<usize>,
    lower: &Bound<Key>,
    upper: &Bound<Key>,
    desc: bool,
    limit: Option<usize>,
) -> Scan {
    let mut s = match index {
        None => Scan::primary(),
        Some(i) => Scan::index(TABLES[table].indexes[i].0),
    };
    s = s.lower(lower.clone()).upper(upper.clone());
    if desc {
        s = s.descending();
    }
    if let Some(n) = limit {
        s = s.limit(n);
    }
    s
}

/// A read on either kind of transaction (through `ferrite::Read`).
fn run_read(tx: &mut dyn Read, op: &Op) -> Result<Observed, String> {
    match op {
        Op::Get(t, k) => observe(tx.get(TABLES[*t].name, k.clone()), Observed::Row),
        Op::Scan { table, index, lower, upper, desc, limit } => {
            let s = scan_of(*table, *index, lower, upper, *desc, *limit);
            observe(tx.scan(TABLES[*table].name, &s), Observed::Rows)
        }
        Op::Select(t, preds) => {
            let p = predicates(*t, preds);
            observe(tx.select(TABLES[*t].name, &p, &Projection::All), Observed::Rows)
        }
        _ => Err(format!("{op:?} is not a read")),
    }
}

fn run_op(tx: &mut Transaction, op: &Op) -> Result<Observed, String> {
    let done = |()| Observed::Done;
    match op {
        Op::Insert(t, row) => observe(tx.insert(TABLES[*t].name, row.clone()), done),
        Op::Update(t, k, asg) => {
            let asg: Vec<(&str, Value)> =
                asg.iter().map(|(c, v)| (TABLES[*t].columns[*c].0, v.clone())).collect();
            observe(tx.update(TABLES[*t].name, k.clone(), asg), done)
        }
        Op::Delete(t, k) => observe(tx.delete(TABLES[*t].name, k.clone()), done),
        _ => run_read(tx, op),
    }
}

/// Compares every table and index of the database with the model.
fn check_whole(db: &Database, model: &Model) -> Result<(), String> {
    let mut r = db.begin_read().ctx("final begin_read")?;
    for (t, def) in TABLES.iter().enumerate() {
        let mut ops = vec![(None, false), (None, true)];
        ops.extend((0..def.indexes.len()).flat_map(|i| [(Some(i), false), (Some(i), true)]));
        for (index, desc) in ops {
            let op = Op::Scan {
                table: t,
                index,
                lower: Bound::Unbounded,
                upper: Bound::Unbounded,
                desc,
                limit: None,
            };
            let got = run_read(&mut r, &op)?;
            let want = model.clone().apply(&op);
            if got != want {
                return Err(format!("final state: {op:?}: got {got:?}, model {want:?}"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Strategies

fn value_of(t: usize, c: usize) -> BoxedStrategy<Value> {
    match (t, c) {
        (0, 0) => (-3i64..6).prop_map(Value::from).boxed(),
        (0, 1) => (0i64..3).prop_map(Value::from).boxed(),
        (0, 2) => prop::sample::select(vec!["p", "q", "r", "s", "t", "u", "v", "w"])
            .prop_map(Value::from)
            .boxed(),
        (0, 3) => prop::sample::select(vec![-1.5, -0.0, 0.0, 2.5, f64::INFINITY, f64::NAN])
            .prop_map(Value::from)
            .boxed(),
        (1, 0) => prop::sample::select(vec!["", "a", "ab", "b", "\u{0}", "é"])
            .prop_map(Value::from)
            .boxed(),
        _ => prop::sample::select(vec![
            vec![],
            vec![0u8],
            vec![0, 0],
            vec![0, 1],
            vec![1],
            vec![0xff],
        ])
        .prop_map(Value::from)
        .boxed(),
    }
}

fn row_of(t: usize) -> BoxedStrategy<Row> {
    let cols: Vec<BoxedStrategy<Value>> =
        (0..TABLES[t].columns.len()).map(|c| value_of(t, c)).collect();
    cols.prop_map(|v| v).boxed()
}

fn bound_of<T: std::fmt::Debug + Clone + 'static>(s: BoxedStrategy<T>) -> BoxedStrategy<Bound<T>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => s.clone().prop_map(Bound::Included),
        2 => s.prop_map(Bound::Excluded),
    ]
    .boxed()
}

fn key_of(t: usize, cols: Vec<usize>) -> BoxedStrategy<Key> {
    (0..=cols.len())
        .prop_flat_map(move |n| {
            let parts: Vec<BoxedStrategy<Value>> =
                cols[..n].iter().map(|&c| value_of(t, c)).collect();
            parts.prop_map(Key::new)
        })
        .boxed()
}

fn op_of(t: usize, read_only: bool) -> BoxedStrategy<Op> {
    let def = &TABLES[t];
    let ncols = def.columns.len();
    let nix = def.indexes.len();
    let get = value_of(t, 0).prop_map(move |k| Op::Get(t, k));
    let scan = (prop::option::of(0..nix), any::<bool>(), prop::option::of(0usize..4))
        .prop_flat_map(move |(index, desc, limit)| {
            let cols = match index {
                None => vec![0],
                Some(i) => TABLES[t].indexes[i].1.to_vec(),
            };
            (bound_of(key_of(t, cols.clone())), bound_of(key_of(t, cols))).prop_map(
                move |(lower, upper)| Op::Scan { table: t, index, lower, upper, desc, limit },
            )
        });
    let pred = (0..ncols).prop_flat_map(move |c| {
        prop_oneof![
            value_of(t, c).prop_map(move |v| (c, Bound::Included(v.clone()), Bound::Included(v))),
            (bound_of(value_of(t, c)), bound_of(value_of(t, c)))
                .prop_map(move |(lo, hi)| (c, lo, hi)),
        ]
    });
    let select = prop::collection::vec(pred, 0..3).prop_map(move |p| Op::Select(t, p));
    if read_only {
        return prop_oneof![get, scan, select].boxed();
    }
    let insert = row_of(t).prop_map(move |r| Op::Insert(t, r));
    let assignment = (1..ncols).prop_flat_map(move |c| value_of(t, c).prop_map(move |v| (c, v)));
    let update = (value_of(t, 0), prop::collection::vec(assignment, 1..3))
        .prop_map(move |(k, a)| Op::Update(t, k, a));
    let delete = value_of(t, 0).prop_map(move |k| Op::Delete(t, k));
    prop_oneof![3 => insert, 2 => update, 1 => delete, 2 => get, 2 => scan, 2 => select].boxed()
}

fn any_op(read_only: bool) -> BoxedStrategy<Op> {
    prop_oneof![3 => op_of(0, read_only), 1 => op_of(1, read_only)].boxed()
}

#[derive(Clone, Debug)]
enum End {
    Commit,
    Abort,
    Drop,
}

#[derive(Clone, Debug)]
struct TxnPlan {
    read_only: bool,
    ops: Vec<Op>,
    end: End,
}

fn txn_plan() -> impl Strategy<Value = TxnPlan> {
    prop_oneof![
        4 => (prop::collection::vec(any_op(false), 1..10),
              prop_oneof![6 => Just(End::Commit), 1 => Just(End::Abort), 1 => Just(End::Drop)])
            .prop_map(|(ops, end)| TxnPlan { read_only: false, ops, end }),
        1 => prop::collection::vec(any_op(true), 1..6)
            .prop_map(|ops| TxnPlan { read_only: true, ops, end: End::Commit }),
    ]
}

#[derive(Clone, Debug)]
enum Action {
    Op(Op),
    Commit,
    Abort,
}

#[derive(Clone, Debug)]
struct Step {
    session: usize,
    /// Used when this step begins the session's transaction.
    read_only: bool,
    action: Action,
}

fn step() -> impl Strategy<Value = Step> {
    let action = prop_oneof![
        8 => any_op(false).prop_map(Action::Op),
        2 => Just(Action::Commit),
        1 => Just(Action::Abort),
    ];
    (0usize..3, prop::bool::weighted(0.2), action).prop_map(|(session, read_only, action)| Step {
        session,
        read_only,
        action,
    })
}

// ---------------------------------------------------------------------------------------------
// Runner

/// The seed: `FERRITE_TEST_SEED`, or a fresh random one.
pub fn seed() -> u64 {
    if let Ok(s) = std::env::var("FERRITE_TEST_SEED") {
        let s = s.trim();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        };
        if let Some(v) = parsed {
            return v;
        }
        eprintln!("FERRITE_TEST_SEED={s:?} is not a number; using a random seed");
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_CASES)
}

fn runner(seed: u64, cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 1024,
        max_shrink_time: 30_000,
        ..Config::default()
    };
    // SplitMix64 expands the seed into ChaCha's 32 bytes.
    let mut x = seed;
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = (z >> (8 * i)) as u8;
        }
    }
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

fn report<T: std::fmt::Debug>(
    name: &str,
    subject: &Subject,
    seed: u64,
    r: Result<(), TestError<T>>,
) -> Result<(), String> {
    match r {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, input)) => Err(format!(
            "{} {name} failed (replay: FERRITE_TEST_SEED={seed}): {reason}\nminimal input: {input:#?}",
            subject.name
        )),
        Err(TestError::Abort(reason)) => {
            Err(format!("{} {name} aborted (seed {seed}): {reason}", subject.name))
        }
    }
}

/// The serial model test, with the seed from the environment.
pub fn serial(subject: &Subject) -> Result<(), String> {
    let seed = seed();
    eprintln!("{} model_serial: seed {seed} (replay with FERRITE_TEST_SEED={seed})", subject.name);
    serial_with(subject, seed, cases())
}

/// One step of the serial sequence.
#[derive(Clone, Debug)]
enum Item {
    Txn(TxnPlan),
    /// Persistent engines: `close` (true) or drop (false) the database, then reopen it and
    /// compare it whole with the model. A no-op on engines that keep nothing.
    Reopen(bool),
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![6 => txn_plan().prop_map(Item::Txn), 1 => any::<bool>().prop_map(Item::Reopen)]
}

/// The serial model test with an explicit seed and case count.
pub fn serial_with(subject: &Subject, seed: u64, cases: u32) -> Result<(), String> {
    let mut runner = runner(seed, cases);
    let strategy = prop::collection::vec(item(), 1..12);
    let r = runner.run(&strategy, |items| run_serial(subject, &items).map_err(TestCaseError::fail));
    report("model_serial", subject, seed, r)
}

fn run_serial(subject: &Subject, items: &[Item]) -> Result<(), String> {
    let super::Fixture { mut db, dir } = subject.fresh("model-serial")?;
    create_tables(&db)?;
    let mut model = Model::new();
    for (i, item) in items.iter().enumerate() {
        let plan = match item {
            Item::Txn(plan) => plan,
            Item::Reopen(close) => {
                let Some(open) = subject.open.as_ref() else { continue };
                if *close {
                    db.close().map_err(|e| format!("item {i}: close: {e}"))?;
                } else {
                    drop(db);
                }
                db = open(dir.path()).map_err(|e| format!("item {i}: reopen: {e}"))?;
                check_whole(&db, &model).map_err(|e| format!("item {i}: after reopen: {e}"))?;
                continue;
            }
        };
        run_plan(&db, i, plan, &mut model)?;
    }
    check_whole(&db, &model)
}

fn run_plan(db: &Database, i: usize, plan: &TxnPlan, model: &mut Model) -> Result<(), String> {
    {
        if plan.read_only {
            let mut r = db.begin_read().ctx("begin_read")?;
            for (j, op) in plan.ops.iter().enumerate() {
                let got =
                    run_read(&mut r, op).map_err(|e| format!("txn {i} op {j} {op:?}: {e}"))?;
                let want = model.clone().apply(op);
                if got != want {
                    return Err(format!(
                        "txn {i} (read-only) op {j} {op:?}: got {got:?}, model {want:?}"
                    ));
                }
            }
            return Ok(());
        }
        let mut tx = db.begin().ctx("begin")?;
        let mut work = model.clone();
        for (j, op) in plan.ops.iter().enumerate() {
            let got = run_op(&mut tx, op).map_err(|e| format!("txn {i} op {j} {op:?}: {e}"))?;
            let want = work.apply(op);
            if got != want {
                return Err(format!("txn {i} op {j} {op:?}: got {got:?}, model {want:?}"));
            }
        }
        match plan.end {
            End::Commit => {
                tx.commit()
                    .map_err(|e| format!("txn {i}: commit without concurrency failed: {e}"))?;
                *model = work;
            }
            End::Abort => tx.abort(),
            End::Drop => drop(tx),
        }
    }
    Ok(())
}

/// The interleaved model test, with the seed from the environment.
pub fn interleaved(subject: &Subject) -> Result<(), String> {
    let seed = seed();
    eprintln!(
        "{} model_interleaved: seed {seed} (replay with FERRITE_TEST_SEED={seed})",
        subject.name
    );
    interleaved_with(subject, seed, cases())
}

/// The interleaved model test with an explicit seed and case count.
pub fn interleaved_with(subject: &Subject, seed: u64, cases: u32) -> Result<(), String> {
    let mut runner = runner(seed, cases);
    let strategy = prop::collection::vec(step(), 1..60);
    let r = runner
        .run(&strategy, |steps| run_interleaved(subject, &steps).map_err(TestCaseError::fail));
    report("model_interleaved", subject, seed, r)
}

enum Handle {
    Rw(Transaction),
    Ro(ReadTransaction),
}

struct Session {
    handle: Handle,
    /// The committed state when it began.
    begin_model: Model,
    log: Vec<(Op, Observed)>,
    id: usize,
}

fn replay(model: &Model, log: &[(Op, Observed)]) -> Result<Model, String> {
    let mut m = model.clone();
    for (j, (op, seen)) in log.iter().enumerate() {
        let want = m.apply(op);
        if &want != seen {
            return Err(format!("op {j} {op:?}: saw {seen:?}, serial replay gives {want:?}"));
        }
    }
    Ok(m)
}

fn describe(log: &[(Op, Observed)]) -> String {
    let mut s = String::new();
    for (op, seen) in log {
        let _ = writeln!(s, "    {op:?} -> {seen:?}");
    }
    s
}

fn run_interleaved(subject: &Subject, steps: &[Step]) -> Result<(), String> {
    let f = subject.fresh("model-interleaved")?;
    create_tables(&f.db)?;
    let two_writers = super::writers_proceed(&f.db);
    let mut model = Model::new();
    let mut sessions: Vec<Option<Session>> = vec![None, None, None];
    let mut next_id = 0;
    for (n, st) in steps.iter().enumerate() {
        // Engines that admit one writer at a time run the sessions one by one.
        let session = if two_writers { st.session } else { 0 };
        let slot = &mut sessions[session];
        if slot.is_none() {
            if matches!(st.action, Action::Commit | Action::Abort) {
                continue;
            }
            let handle = if st.read_only {
                Handle::Ro(f.db.begin_read().ctx("begin_read")?)
            } else {
                Handle::Rw(f.db.begin().ctx("begin")?)
            };
            *slot =
                Some(Session { handle, begin_model: model.clone(), log: Vec::new(), id: next_id });
            next_id += 1;
        }
        let Some(mut s) = slot.take() else { continue };
        let ctx = |e: String| format!("step {n} (txn {}): {e}", s.id);
        match (&mut s.handle, &st.action) {
            (Handle::Ro(r), Action::Op(op)) => {
                if op.is_write() {
                    *slot = Some(s);
                    continue;
                }
                let seen = run_read(r, op).map_err(ctx)?;
                s.log.push((op.clone(), seen));
                *slot = Some(s);
            }
            (Handle::Ro(_), _) => {
                // A read-only transaction sees the state committed when it began.
                replay(&s.begin_model, &s.log).map_err(|e| {
                    format!(
                        "read-only txn {} is not a snapshot of its start: {e}\n{}",
                        s.id,
                        describe(&s.log)
                    )
                })?;
            }
            (Handle::Rw(tx), Action::Op(op)) => {
                let seen = run_op(tx, op).map_err(ctx)?;
                if seen == Observed::Conflict {
                    continue; // doomed: dropped (aborted) here
                }
                s.log.push((op.clone(), seen));
                *slot = Some(s);
            }
            (Handle::Rw(_), Action::Abort) => {}
            (Handle::Rw(_), Action::Commit) => {
                let Handle::Rw(tx) = s.handle else { continue };
                match tx.commit() {
                    Ok(()) => {
                        let wrote =
                            s.log.iter().any(|(op, seen)| op.is_write() && *seen == Observed::Done);
                        match replay(&model, &s.log) {
                            Ok(next) => model = next,
                            Err(e) if !wrote && replay(&s.begin_model, &s.log).is_ok() => {
                                let _ = e; // a transaction that wrote nothing: serialized at its start
                            }
                            Err(e) => {
                                return Err(format!(
                                    "step {n}: committed txn {} is not serializable at its commit: {e}\n{}",
                                    s.id,
                                    describe(&s.log)
                                ));
                            }
                        }
                    }
                    Err(Error::Conflict { .. } | Error::DuplicateKey { .. }) => {}
                    Err(e) => {
                        return Err(format!("step {n}: txn {} commit: unexpected {e:?}", s.id));
                    }
                }
            }
        }
    }
    for s in sessions.into_iter().flatten() {
        if let Handle::Ro(_) = s.handle {
            replay(&s.begin_model, &s.log).map_err(|e| {
                format!("read-only txn {} is not a snapshot: {e}\n{}", s.id, describe(&s.log))
            })?;
        }
    }
    check_whole(&f.db, &model)
}
