//! Crash targets `db-sofort-threads` and `db-sofort-threads-parked`: SOFORT behind the public
//! `Database` API with two workload threads whose rows share cache lines (issue [R2] items 1
//! and 2; `docs/design/crash-testing.md` §13.8).
//!
//! # Invariants
//! - Thread t owns the item keys ≡ t (mod 2) and writes only those, so at most one
//!   transaction per thread is in flight and the two threads' write sets are disjoint; the
//!   threads insert consecutive keys, so their rows get neighbouring row ids and share MVCC
//!   lines (4 rows), value-slot lines (8 rows per column) and packed heap extents.
//! - A transaction enters the model just before its commit call and is done when `commit`
//!   returns `Ok`; a commit refused by a conflict is marked failed (absent from then on);
//!   aborted and dropped transactions never enter the model.
//!
//! # Ordering
//! The parked schedules name a persistence event of thread A (a fence of a given rule, seen
//! through the tester's step hook, `Ctx::set_step_hook`, before the fence takes effect) at
//! which A waits until thread B has run and acknowledged its transactions; then A goes on
//! and its fence lands what A flushed before B wrote.
//!
//! # Concurrency
//! Threads meet through a [`Gate`] (a mutex, a condition variable and flags; every wait
//! bounded by [`WAIT`]) and a `Barrier` per free-running round, never by sleeping. While one
//! thread's crash point is tested the tester pauses the other at its next persistence event;
//! a thread parked in the step hook holds no lock of the tester or the domain, so the other
//! thread's crash points are tested while it waits.
//!
//! **Workload**: the database on the tester's pool set with `db-sofort`'s options (four
//! transaction slots, DRAM indexes), `db-sofort`'s tables (`account`, left empty for the probe
//! after recovery, and `item(id, code, tag, payload)` with a unique index on `code` and one
//! on `tag`), one transaction inserting items 0..16 (row ids 0..16: lines are aligned), then:
//!
//! - `db-sofort-threads-parked` only, the deterministic schedules (each a [`Scenario`]): A
//!   commits a transaction and parks at its F1 fence (`P-SOF-5`: its flushes of MVCC,
//!   value-slot and heap lines captured, not yet durable), B commits two transactions on rows
//!   on those lines and returns, A is released; the same parked at A's F2 fence (`P-SOF-7`,
//!   a control: A's shared lines are durable before it parks); and a conflict (A reads a range
//!   of B's keys, B commits into it, A's commit is refused);
//! - then (both targets) rounds in which the threads meet at a barrier and each runs a seeded
//!   batch on its own keys: inserts of the next keys (values of 0–80 bytes, written with
//!   ordinary stores, or 256–600 bytes, written with non-temporal stores), updates and
//!   deletes of its recent rows, explicit rollbacks and aborts by drop.
//!
//! **Check**: `db-sofort`'s recovery and check ([`DbTarget`]): the engine's `check()`, the
//! index comparison, the probe, and the rows against the reference engine after the committed
//! transactions plus each subset of the in-flight ones (at most one per thread) applied whole.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use ferrite::{Database, EngineKind, Row, Scan, Value};
use ferrite_pmem::sim::{Event, EventKind, thread_index};
use ferrite_pmem::{CrashImage, SplitMix64};

use crate::db::{
    DbOp, DbTarget, Mirror, Recovered, Tab, Write, agrees_then_close, diff, expected_states,
    on_pool_set, pmem_options,
};
use crate::target::{Axioms, Ctx, ModelView, StepHook, Target};

/// The longest a thread waits for the other at a meeting point (a hang is reported as a
/// workload error, never waited out).
const WAIT: Duration = Duration::from_secs(300);
/// Items of the first transaction: keys 0..PREFILL, row ids 0..PREFILL.
const PREFILL: i64 = 16;
/// Free-running rounds of the registered targets.
pub const ROUNDS: u64 = 4;
/// Transactions per thread and free-running round.
const BATCH: u64 = 5;

/// A SOFORT target with two workload threads (see the module docs).
#[derive(Debug, Clone)]
pub struct DbSofortThreads {
    /// Run the deterministic parked schedules before the free-running rounds.
    parked: bool,
    /// Free-running rounds.
    rounds: u64,
    /// `db-sofort`'s recovery and check.
    db: DbTarget,
}

impl DbSofortThreads {
    /// `db-sofort-threads`: the free-running rounds only.
    pub fn free(rounds: u64) -> DbSofortThreads {
        DbSofortThreads { parked: false, rounds, db: DbTarget::new(EngineKind::Sofort) }
    }

    /// `db-sofort-threads-parked`: the deterministic schedules, then `rounds` free rounds.
    pub fn parked(rounds: u64) -> DbSofortThreads {
        DbSofortThreads { parked: true, rounds, db: DbTarget::new(EngineKind::Sofort) }
    }
}

/// A thread parked at a persistence event until another releases it.
#[derive(Default)]
struct Gate {
    st: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Default)]
struct GateState {
    /// The thread and the rule of the fence at which it parks (once).
    armed: Option<(u32, &'static str)>,
    parked: bool,
    released: bool,
    /// The parked thread gave up waiting (a schedule that cannot finish).
    gave_up: bool,
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calling thread parks at its next fence of `rule`.
    fn arm(&self, rule: &'static str) {
        *self.lock() = GateState { armed: Some((thread_index(), rule)), ..GateState::default() };
    }

    /// The step hook: parks the armed thread at its fence (before the fence takes effect).
    fn on_event(&self, e: &Event) {
        if e.kind != EventKind::Fence {
            return;
        }
        let mut g = self.lock();
        if g.armed != e.site.rule.map(|r| (e.thread, r)) {
            return;
        }
        g.armed = None;
        g.parked = true;
        self.cv.notify_all();
        let start = Instant::now();
        while !g.released {
            let left = WAIT.saturating_sub(start.elapsed());
            if left.is_zero() {
                g.gave_up = true;
                return;
            }
            g = self.cv.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Waits until the armed thread is parked.
    fn wait_parked(&self) -> Result<(), String> {
        let start = Instant::now();
        let mut g = self.lock();
        while !g.parked {
            let left = WAIT.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "the other thread never reached its parking point in {WAIT:?}"
                ));
            }
            g = self.cv.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(())
    }

    fn release(&self) {
        self.lock().released = true;
        self.cv.notify_all();
    }

    /// After the parked thread's commit: whether it parked and was released in time.
    fn finish(&self, what: &str) -> Result<(), String> {
        let mut g = self.lock();
        let r = if g.armed.is_some() {
            Err(format!("{what}: the commit never reached its parking fence"))
        } else if g.gave_up {
            Err(format!("{what}: parked for {WAIT:?} without release"))
        } else {
            Ok(())
        };
        *g = GateState::default();
        r
    }
}

/// A thread's side of the workload: its keys and their rows.
struct Side {
    t: i64,
    /// The next key index: its next insert is key `2 next + t`.
    next: i64,
    mine: BTreeMap<i64, Row>,
    rng: SplitMix64,
}

impl Side {
    fn payload(&mut self, big: bool) -> Value {
        let len = if big { 256 + self.rng.next_u64() % 345 } else { self.rng.next_u64() % 81 };
        Value::Bytes((0..len).map(|_| self.rng.next_u64() as u8).collect())
    }

    fn row(&mut self, k: i64, big: bool) -> Row {
        let tag = (self.rng.next_u64() % 4) as i64;
        vec![Value::I64(k), format!("c{k}").into(), Value::I64(tag), self.payload(big)]
    }

    /// An insert of the thread's next key.
    fn insert(&mut self, big: bool) -> Write {
        let k = 2 * self.next + self.t;
        self.next += 1;
        Write::Insert(Tab::Item, self.row(k, big))
    }

    fn update(&mut self, k: i64, big: bool) -> Write {
        let mut row = self.mine.get(&k).cloned().unwrap_or_else(|| self.row(k, big));
        row[2] = Value::I64((self.rng.next_u64() % 4) as i64);
        row[3] = self.payload(big);
        Write::Update(Tab::Item, k, row)
    }

    /// A recent key of the thread not in `skip` (neighbours of its latest inserts).
    fn recent(&mut self, skip: &[i64]) -> Option<i64> {
        let keys: Vec<i64> =
            self.mine.keys().rev().filter(|k| !skip.contains(k)).take(4).copied().collect();
        (!keys.is_empty()).then(|| keys[(self.rng.next_u64() % keys.len() as u64) as usize])
    }

    /// A seeded transaction of one to three writes on distinct keys of the thread.
    fn txn_writes(&mut self) -> Vec<Write> {
        let n = 1 + self.rng.next_u64() % 3;
        let mut out: Vec<Write> = Vec::new();
        for _ in 0..n {
            let used: Vec<i64> = out.iter().map(key_of).collect();
            let big = self.rng.next_u64().is_multiple_of(3);
            let w = match self.rng.next_u64() % 6 {
                0..=2 => self.insert(big),
                3 | 4 => match self.recent(&used) {
                    Some(k) => self.update(k, big),
                    None => self.insert(big),
                },
                _ => match self.recent(&used) {
                    Some(k) => Write::Delete(Tab::Item, k),
                    None => self.insert(big),
                },
            };
            out.push(w);
        }
        out
    }

    /// Applies committed writes to the thread's rows.
    fn apply(&mut self, writes: &[Write]) {
        let mut m = Mirror::new();
        m.insert(Tab::Item, std::mem::take(&mut self.mine));
        for w in writes {
            w.apply_mirror(&mut m);
        }
        self.mine = m.remove(&Tab::Item).unwrap_or_default();
    }

    /// Forgets the key indexes an aborted transaction's inserts took (they stay free).
    fn unuse(&mut self, writes: &[Write]) {
        let inserted = writes.iter().filter(|w| matches!(w, Write::Insert(..))).count() as i64;
        self.next -= inserted;
    }
}

fn key_of(w: &Write) -> i64 {
    match w {
        Write::Insert(_, row) => row[0].as_i64().unwrap_or(-1),
        Write::Update(_, k, _) | Write::Delete(_, k) => *k,
    }
}

/// The shared part of the workload: the database, the model and the transaction numbers.
struct Run<'a> {
    db: &'a Database,
    ctx: &'a Ctx<DbOp>,
    ids: AtomicU64,
}

impl Run<'_> {
    /// Runs `writes` in a new transaction and commits it (the model's transaction begins just
    /// before the commit); `before_commit` runs in between (arming a gate).
    fn commit(
        &self,
        side: &mut Side,
        writes: Vec<Write>,
        before_commit: impl FnOnce(),
    ) -> Result<(), String> {
        let mut tx = self.db.begin().map_err(|x| format!("begin: {x}"))?;
        for w in &writes {
            w.apply(&mut tx).map_err(|x| format!("thread {}: {w:?}: {x}", side.t))?;
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let tok = self.ctx.begin(DbOp::Txn(id, writes.clone()));
        before_commit();
        tx.commit().map_err(|x| format!("thread {}: txn {id}: commit: {x}", side.t))?;
        self.ctx.done(tok);
        side.apply(&writes);
        Ok(())
    }

    /// Runs `writes` and rolls back (explicitly or by drop): nothing of it may survive.
    fn roll_back(&self, side: &mut Side, writes: Vec<Write>, drop_it: bool) -> Result<(), String> {
        let mut tx = self.db.begin().map_err(|x| format!("begin: {x}"))?;
        for w in &writes {
            w.apply(&mut tx).map_err(|x| format!("thread {}: {w:?}: {x}", side.t))?;
        }
        if drop_it {
            drop(tx);
        } else {
            tx.abort();
        }
        side.unuse(&writes);
        Ok(())
    }

    /// One free-running batch of thread `side.t`.
    fn batch(&self, side: &mut Side) -> Result<(), String> {
        for _ in 0..BATCH {
            let writes = side.txn_writes();
            match side.rng.next_u64() % 8 {
                0 => self.roll_back(side, writes, false)?,
                1 => self.roll_back(side, writes, true)?,
                _ => self.commit(side, writes, || {})?,
            }
        }
        Ok(())
    }
}

/// A deterministic schedule: A commits `a` and parks at its fence of `rule`; B commits each
/// of `b`, then releases A.
struct Scenario {
    name: &'static str,
    rule: &'static str,
    a: fn(&mut Side) -> Vec<Write>,
    b: fn(&mut Side) -> Vec<Vec<Write>>,
}

/// The parked schedules, in order (they start right after the prefill: row ids 0..16 taken,
/// item keys 0..16 present, each thread's next key 16 + t).
const SCENARIOS: [Scenario; 3] = [
    // Row 16 (A) and rows 17, 18 (B): one MVCC line (rows 16..20), one slot line per column
    // (rows 16..24), neighbouring `code` extents. B's second commit flushes its first's
    // finalization and rewrites B's area, so only the MVCC line keeps B's first commit.
    Scenario {
        name: "insert beside a parked insert (F1)",
        rule: "P-SOF-5",
        a: |s| vec![s.insert(false)],
        b: |s| vec![vec![s.insert(false)], vec![s.insert(true)]],
    },
    // Rows 1, 2, 3 share an MVCC line: A deletes key 2 (thread 0's), B deletes key 1 and
    // updates key 3 (a delete lock on the same line, and a new version).
    Scenario {
        name: "delete and update beside a parked delete (F1)",
        rule: "P-SOF-5",
        a: |_| vec![Write::Delete(Tab::Item, 2)],
        b: |s| vec![vec![Write::Delete(Tab::Item, 1)], vec![s.update(3, true)]],
    },
    // A control: parked after its F1 fence, between its area's flush and fence (a line of its
    // slot's own): B's rows beside A's (rows 4..8) cannot be lost.
    Scenario {
        name: "update beside a parked commit point (F2)",
        rule: "P-SOF-7",
        a: |s| vec![s.update(4, false)],
        b: |s| vec![vec![s.update(5, false)], vec![s.insert(false), s.update(7, true)]],
    },
];

impl DbSofortThreads {
    fn scenario(
        &self,
        run: &Run<'_>,
        gate: &Gate,
        sides: &mut [Side; 2],
        sc: &Scenario,
    ) -> Result<(), String> {
        let [a_side, b_side] = sides;
        let a_writes = (sc.a)(a_side);
        let b_txns = (sc.b)(b_side);
        std::thread::scope(|s| {
            let a = s.spawn(|| {
                let r = run.commit(a_side, a_writes, || gate.arm(sc.rule));
                let parked = gate.finish(sc.name);
                r.and(parked)
            });
            let b = s.spawn(|| {
                // Releases A on every path out.
                struct Release<'g>(&'g Gate);
                impl Drop for Release<'_> {
                    fn drop(&mut self) {
                        self.0.release();
                    }
                }
                let _release = Release(gate);
                gate.wait_parked()?;
                for w in b_txns {
                    run.commit(b_side, w, || {})?;
                }
                Ok::<(), String>(())
            });
            let ra = a.join().unwrap_or_else(|_| Err("thread A panicked".into()));
            let rb = b.join().unwrap_or_else(|_| Err("thread B panicked".into()));
            ra.and(rb).map_err(|e| format!("schedule {:?}: {e}", sc.name))
        })
    }

    /// A conflict: A reads a range of B's keys and inserts one of its own; B commits an
    /// insert into that range; A's commit must be refused (the model marks it failed) —
    /// or, if it commits, it is in the model like any other.
    fn conflict(&self, run: &Run<'_>, sides: &mut [Side; 2]) -> Result<(), String> {
        let [a_side, b_side] = sides;
        let lo = 2 * b_side.next.min(a_side.next);
        let mut tx = run.db.begin().map_err(|x| format!("begin: {x}"))?;
        tx.scan(Tab::Item.name(), &Scan::primary().range(lo..lo + 40))
            .map_err(|x| format!("conflict scan: {x}"))?;
        let mine = vec![a_side.insert(false)];
        for w in &mine {
            w.apply(&mut tx).map_err(|x| format!("conflict: {w:?}: {x}"))?;
        }
        // B on a thread of its own (its commit flushes and fences there).
        let b_writes = vec![b_side.insert(true)];
        std::thread::scope(|s| {
            s.spawn(|| run.commit(b_side, b_writes, || {}))
                .join()
                .unwrap_or_else(|_| Err("thread B panicked".into()))
        })?;
        let id = run.ids.fetch_add(1, Ordering::Relaxed);
        let tok = run.ctx.begin(DbOp::Txn(id, mine.clone()));
        match tx.commit() {
            Ok(()) => {
                run.ctx.done(tok);
                a_side.apply(&mine);
            }
            Err(ferrite::Error::Conflict { .. }) => {
                run.ctx.failed(tok);
                a_side.unuse(&mine);
            }
            Err(x) => return Err(format!("conflict: commit: {x}")),
        }
        Ok(())
    }
}

impl Target for DbSofortThreads {
    type Op = DbOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        if self.parked { "db-sofort-threads-parked" } else { "db-sofort-threads" }
    }
    fn summary(&self) -> &'static str {
        if self.parked {
            "SOFORT through the API, two threads on shared lines: deterministic schedules (a commit parked between its flush and its fence while the other thread commits beside it; a conflict), then free-running rounds"
        } else {
            "SOFORT through the API, two threads on shared MVCC, value-slot and heap lines: inserts of interleaved consecutive keys, updates, deletes, large values, rollbacks"
        }
    }
    fn axioms(&self) -> Axioms {
        self.db.axioms()
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-SOF-1", "P-SOF-2", "P-SOF-5", "P-SOF-6", "P-SOF-7", "P-SOF-10", "P-SOF-11"]
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        self.db.benign_sites()
    }
    fn reproducible(&self) -> bool {
        false // two workload threads
    }
    fn min_images(&self) -> u64 {
        200
    }

    fn workload(&self, ctx: &mut Ctx<DbOp>) -> Result<(), String> {
        let options = self.db.options();
        let e = |what: &str, e: ferrite::Error| format!("{what}: {e}");
        let set = ctx.create_pool_set(&pmem_options())?;
        let t = ctx.begin(DbOp::Create);
        let db = on_pool_set(set, &options, true).map_err(|x| e("create", x))?;
        ctx.done(t);
        for tab in [Tab::Account, Tab::Item] {
            let t = ctx.begin(DbOp::Table(tab));
            db.create_table(tab.schema()).map_err(|x| e("create_table", x))?;
            ctx.done(t);
        }
        let mut sides = [0i64, 1].map(|t| Side {
            t,
            next: PREFILL / 2,
            mine: BTreeMap::new(),
            rng: ctx.fork_rng(),
        });
        let gate = Arc::new(Gate::default());
        let run = Run { db: &db, ctx, ids: AtomicU64::new(1) };
        // The prefill: keys 0..PREFILL in order, each row on its own thread's side.
        {
            let mut tx = db.begin().map_err(|x| e("begin", x))?;
            let mut writes = Vec::new();
            for k in 0..PREFILL {
                let side = &mut sides[(k % 2) as usize];
                let w = Write::Insert(Tab::Item, side.row(k, k % 3 == 0));
                w.apply(&mut tx).map_err(|x| e("prefill", x))?;
                writes.push(w);
            }
            let id = run.ids.fetch_add(1, Ordering::Relaxed);
            let tok = ctx.begin(DbOp::Txn(id, writes.clone()));
            tx.commit().map_err(|x| e("prefill commit", x))?;
            ctx.done(tok);
            for w in &writes {
                sides[(key_of(w) % 2) as usize].apply(std::slice::from_ref(w));
            }
        }
        if self.parked {
            let hook_gate = gate.clone();
            let hook: StepHook = Arc::new(move |ev: &Event| hook_gate.on_event(ev));
            ctx.set_step_hook(Some(hook));
            let r = SCENARIOS
                .iter()
                .try_for_each(|sc| self.scenario(&run, &gate, &mut sides, sc))
                .and_then(|()| self.conflict(&run, &mut sides));
            ctx.set_step_hook(None);
            r?;
        }
        // Free-running rounds: both threads start each round together.
        let barrier = Barrier::new(2);
        let [s0, s1] = &mut sides;
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let workers: Vec<_> = [s0, s1]
                .into_iter()
                .map(|side| {
                    let (run, barrier) = (&run, &barrier);
                    s.spawn(move || {
                        let mut first = Ok(());
                        for _ in 0..self.rounds {
                            barrier.wait();
                            if first.is_ok() {
                                first = run.batch(side);
                            }
                        }
                        first
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err("a workload thread panicked".into())))
                .collect()
        });
        for r in results {
            r?;
        }
        // The engine agrees with the threads' rows before any crash.
        let mut mirror = Mirror::new();
        for side in &sides {
            mirror.entry(Tab::Item).or_default().extend(side.mine.clone());
        }
        agrees_then_close(db, &mirror, &[Tab::Account, Tab::Item])
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        self.db.recover(image)
    }

    fn check(&self, r: &Recovered, m: &ModelView<DbOp>) -> Result<(), String> {
        self.db.check(r, m).map_err(|why| {
            // `db-sofort`'s check stops at the first kind of problem (an index, the engine's
            // check): say also which rows differ from the committed state, so that a lost or
            // torn row names its key (and so its thread: keys ≡ t mod 2).
            let Recovered::Db { tables, .. } = r else { return why };
            match expected_states(m) {
                Ok(states) if !states.is_empty() && !why.contains("found, against") => {
                    format!(
                        "{why}; rows against the committed state: {}",
                        diff(&states[0].1, tables)
                    )
                }
                _ => why,
            }
        })
    }
}
