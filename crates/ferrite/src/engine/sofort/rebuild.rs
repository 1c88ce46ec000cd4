//! Instant recovery: the DRAM indexes rebuilt in the background after `open` returned
//! (`docs/design/sofort.md` §15; spec §7.1, §7.4; FIX-12).
//!
//! Recovery's classification scan lists each table's live rows in ascending row order
//! ([`Pending::rows`]); every index of the table starts empty with a **watermark** `wm` at 0.
//! A rebuild job (one per index) inserts `rows[wm..wm + batch]` and advances `wm`, batch by
//! batch, each batch under the index's write lock.
//!
//! # Invariants
//! - W1 (the effective index): while an index is pending, the entries it must hold are the
//!   entries of its partial `Index` plus `(key(r), r)` for every `r` in `rows[wm..]` not in
//!   `removed` (the *remainder*). Readers use exactly that union ([`IxState`]'s users in
//!   `table.rs`), `check` compares exactly that union with the rows.
//! - W2: a row of the remainder holds the values it held at classification (a row's values
//!   change only after it was collected and handed out again, and collecting it puts it into
//!   `removed` first, under the index's write lock, before the row id goes back to the
//!   reusable queue), and it has no entry in the partial index.
//! - W3 (FIX-12): a row inserted after open goes straight into the partial index; a row removed
//!   (GC, abort) while in the remainder is put into `removed` and never inserted by the rebuild;
//!   a double insert of one `(key, row)` is a no-op ([`Index::insert`]).
//! - W4: `wm <= hold <= rows.len()`; the rebuild (workers and helpers alike) never passes
//!   `hold` (a test hook; `rows.len()` normally).
//! - W5 (the test hook `wait_held`): a job is *parked* once a worker met its hold and put it in
//!   the held list; `wait_held` returns only when every job not ended is parked (none ready,
//!   none in a worker's hand) or no worker is left to run one. Reaching `wm >= hold` is not
//!   enough: at hold 0 it holds from the start, and a worker that takes a job after the test
//!   released the hold runs it to completion out of the ranked order (seen as a flaky ranking
//!   test under load, 2026-12-02).
//!
//! # Ordering
//! None: everything here is DRAM and rebuilt again by the next open; no PM is written.
//!
//! # Concurrency
//! The watermark, the removed set and the partial index sit under the index's one `RwLock`, so
//! a reader (read lock) sees them consistent. Workers take jobs from one queue under a mutex;
//! they park on one condition variable while held and are stopped (at their next batch) when
//! the store closes or is dropped.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::SofortResult;
use super::adaptive::{
    Allocator, Planner, RankSettings, Ranker, ReleasePolicy, ShapeCosts, Stmt, Strategy, StructSet,
    TableShape, UnitCosts,
};
use super::index::Index;
use super::pm::lock;
use super::table::{PTable, TableRef};
use super::txn::Inner;

/// Rows a rebuild step inserts under one write lock (readers wait at most one batch).
pub(super) const BATCH: usize = 256;

/// How `open` rebuilds the DRAM indexes (runtime only, not stored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecoveryMode {
    /// `open` returns when every index is rebuilt (the rebuild runs on `threads` threads).
    #[default]
    Synchronous,
    /// `open` returns once the persistent structures are recovered and the rows classified;
    /// the indexes are rebuilt by background threads while transactions run.
    Instant,
}

/// How a primary-key lookup on an index being rebuilt helps the rebuild (runtime only;
/// `docs/design/sofort.md` §15.3, where the measurements behind the default are).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LookupHelp {
    /// The lookup inserts at most `left / 21` rows (whole batches), then scans the remainder:
    /// each lookup costs at most about 1.25 remainder scans. The default: on TATP 1 M it
    /// answered the first transaction sooner than `Full` and, with adaptive recovery (whose
    /// released workers run at idle priority), kept throughput up where `Full` collapsed
    /// (`docs/benchmarks.md`, "SOFORT II (E2): lookup help").
    #[default]
    Bounded,
    /// The lookup inserts batches itself until at most 4 096 rows are left, then scans them:
    /// the first lookup waits for most of its index, later ones find it built.
    Full,
}

/// Options of an open (runtime only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryOptions {
    /// Synchronous or instant.
    pub mode: RecoveryMode,
    /// Rebuild threads (0: one per index, at most the machine's parallelism).
    pub threads: u32,
    /// Jobs to run first, in this order: `(table name, index)` (`None`: the primary key);
    /// every other index follows in table order, primary key first. (Where a ranking of
    /// indexes, spec §6, plugs in.)
    pub order: Vec<(String, Option<usize>)>,
    /// Adaptive recovery (seed 001 ch. 6, `adaptive.rs`): with a ranked strategy the jobs are
    /// taken in rank order (eq. 6.3 over the restart workload; `order` is then ignored), and an
    /// adaptive one releases threads as the best pending benefit falls. `None`: `order`, then
    /// table order, on `threads` threads for the whole rebuild.
    pub strategy: Option<Strategy>,
    /// Test hook: no index's rebuild passes this watermark until
    /// [`super::SofortStore::set_rebuild_hold`] moves it (W4).
    pub hold: Option<u64>,
    /// How primary-key lookups help a pending primary index.
    pub help: LookupHelp,
}

/// The rebuild state of a pending index (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Pending {
    /// The table's live rows at classification, ascending (shared by its indexes).
    pub rows: Arc<[u64]>,
    /// `rows[..wm]` are in the partial index.
    pub wm: usize,
    /// Rows of `rows[wm..]` removed since open (W3).
    pub removed: HashSet<u64>,
    /// W4.
    pub hold: usize,
    /// How lookups help (primary index only).
    pub help: LookupHelp,
}

impl Pending {
    /// Whether row `r` is in `rows[wm..]` (removed or not).
    pub fn unindexed(&self, r: u64) -> bool {
        self.rows[self.wm..].binary_search(&r).is_ok()
    }

    /// The remainder: rows of `rows[wm..]` not removed (W1).
    pub fn remainder(&self) -> impl Iterator<Item = u64> + '_ {
        self.rows[self.wm..].iter().copied().filter(|r| !self.removed.contains(r))
    }

    /// Rows still to index (an upper bound: removed ones included).
    pub fn left(&self) -> usize {
        self.rows.len() - self.wm
    }
}

/// An index with its rebuild state (`pending` is `None` once complete).
#[derive(Debug, Default)]
pub(super) struct IxState {
    pub ix: Index,
    pub pending: Option<Pending>,
}

/// What one rebuild step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The index is complete.
    Done,
    /// A batch went in; more is left.
    Progress,
    /// Held at the hook's watermark (W4).
    Held,
}

/// Inserts the next batch of at most `batch` rows of `index`'s remainder (W3: removed rows
/// are skipped) under the index's write lock, advancing the watermark.
pub(super) fn step(
    t: &PTable,
    s: &ferrite_pmem::Space,
    index: Option<usize>,
    batch: usize,
) -> SofortResult<Step> {
    // A PM index is complete at open: nothing to rebuild.
    let Some(set) = t.index(index)?.dram_state() else { return Ok(Step::Done) };
    let mut g = set.write().unwrap_or_else(|p| p.into_inner());
    let st = &mut *g;
    let Some(p) = st.pending.as_mut() else { return Ok(Step::Done) };
    if p.wm == p.rows.len() {
        st.pending = None;
        return Ok(Step::Done);
    }
    let end = p.wm.saturating_add(batch).min(p.hold);
    if end <= p.wm {
        return Ok(Step::Held);
    }
    for i in p.wm..end {
        let r = p.rows[i];
        // Passing a removed row: it leaves the set (from now on it is "indexed": a later
        // removal removes its direct entry, if it was reused).
        if p.removed.remove(&r) {
            continue;
        }
        // W2: the values are those of the classification; a failed read leaves `wm` (the
        // batch's inserts so far are repeated by a retry, as no-ops).
        let row = t.read_index_columns(s, r, index)?;
        st.ix.insert(t.index_key(index, &row), r);
    }
    p.wm = end;
    if p.wm == p.rows.len() {
        st.pending = None;
        return Ok(Step::Done);
    }
    Ok(Step::Progress)
}

/// One rebuild job: an index of a table.
#[derive(Debug)]
struct Job {
    table: TableRef,
    index: Option<usize>,
    slot: usize,
    /// The hold generation of its last step (a held job may go on once it changed).
    generation: u64,
}

/// The jobs not taken by a worker, and how many are in a worker's hand.
#[derive(Debug, Default)]
struct Queue {
    ready: VecDeque<Job>,
    held: Vec<Job>,
    /// Jobs taken from `ready` and not yet parked in `held` or ended (W5).
    in_hand: usize,
    /// Worker threads still running their loop (W5).
    workers: usize,
}

/// The state the workers share with the store.
#[derive(Debug)]
pub(super) struct Rebuild {
    inner: Arc<Inner>,
    queue: Mutex<Queue>,
    state: Mutex<State>,
    cv: Condvar,
    cancel: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The thread finishing the heaps' deferred free maps (instant open; design §15.8): its
    /// error, if any.
    heaps: Mutex<Option<JoinHandle<Option<String>>>>,
    /// With a strategy: whether jobs go in rank order (`rk`) or referenced-first (`¬rk`).
    ranked: Option<bool>,
}

/// Progress of the jobs (under `Rebuild::state`).
#[derive(Debug, Default)]
struct State {
    /// Per job, in job order: its name and when it completed.
    done: Vec<(String, Option<Instant>)>,
    /// Jobs not ended (complete or failed).
    running: usize,
    /// The first error of a job.
    error: Option<String>,
    /// Bumped whenever the hold moves (wakes held workers).
    generation: u64,
    /// A strategy's planner runs (`adaptive.rs`).
    ranked: bool,
    /// Test hook: the heaps' deferred free maps are not finished while a hold is set (so a
    /// held test runs its transactions on deferred heaps; design §15.8).
    heaps_held: bool,
}

/// The rebuild's outcome so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildStatus {
    /// Per index (`table.primary` or `table.<index name>`): when its rebuild completed.
    pub indexes: Vec<(String, Option<Instant>)>,
    /// Whether every index is complete.
    pub complete: bool,
    /// The first error a job met (its index stays pending; readers use W1's remainder).
    pub error: Option<String>,
}

impl Rebuild {
    /// Starts the jobs of every pending index of `inner`'s tables, `opts.order` first, on
    /// `opts.threads` threads.
    pub fn start(inner: &Arc<Inner>, opts: &RecoveryOptions) -> Arc<Rebuild> {
        let mut jobs: Vec<(String, TableRef, Option<usize>)> = Vec::new();
        for t in inner.all_tables() {
            for ix in std::iter::once(None).chain((0..t.sec.len()).map(Some)) {
                // Only DRAM indexes are rebuilt (a PM index is complete at open).
                if t.index(ix).ok().and_then(|s| s.dram_state()).is_none() {
                    continue;
                }
                let name = match ix {
                    None => format!("{}.primary", t.name()),
                    Some(i) => format!("{}.{}", t.name(), t.table.indexes[i].name),
                };
                jobs.push((name, Arc::clone(&t), ix));
            }
        }
        let rank = |(_, t, ix): &(String, TableRef, Option<usize>)| {
            opts.order.iter().position(|(n, i)| n == t.name() && i == ix).unwrap_or(usize::MAX)
        };
        jobs.sort_by_key(rank); // stable: the default order among unranked jobs
        let threads = match (opts.mode, opts.threads) {
            // Synchronous on one thread: the opening thread runs the jobs (in `wait`), as E1's
            // open did; no thread is spawned.
            (RecoveryMode::Synchronous, 1) => 0,
            (_, 0) => std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len()),
            (_, n) => (n as usize).min(jobs.len()),
        };
        let ranked = opts.strategy.map(Strategy::ranked);
        if ranked.is_some() {
            inner.restart.start(planner(&jobs, opts.strategy, &inner.past.snapshot()));
        }
        let mut state = State {
            running: jobs.len(),
            ranked: ranked.is_some(),
            heaps_held: opts.hold.is_some(),
            ..State::default()
        };
        let mut queue = Queue::default();
        for (slot, (name, table, index)) in jobs.into_iter().enumerate() {
            state.done.push((name, None));
            queue.ready.push_back(Job { table, index, slot, generation: 0 });
        }
        let rb = Arc::new(Rebuild {
            inner: Arc::clone(inner),
            queue: Mutex::new(queue),
            state: Mutex::new(state),
            cv: Condvar::new(),
            cancel: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            heaps: Mutex::new(None),
            ranked,
        });
        if opts.mode == RecoveryMode::Instant {
            let w = Arc::clone(&rb);
            let spawned = std::thread::Builder::new()
                .name("sofort-heaps".into())
                .spawn(move || w.finish_heaps().err().map(|e| e.to_string()));
            // No thread: `wait` finishes the heaps.
            if let Ok(h) = spawned {
                *lock(&rb.heaps) = Some(h);
            }
        }
        let mut handles = lock(&rb.threads);
        for i in 0..threads {
            let w = Arc::clone(&rb);
            // Counted before it starts, so that `wait_held` never sees it gone before it ran.
            lock(&rb.queue).workers += 1;
            let spawned =
                std::thread::Builder::new().name(format!("sofort-rebuild-{i}")).spawn(move || {
                    w.work(i);
                    lock(&w.queue).workers -= 1;
                    let _st = lock(&w.state);
                    w.cv.notify_all();
                });
            match spawned {
                Ok(h) => handles.push(h),
                // No thread: the jobs left are run by the threads that started, or (none
                // started) by the caller of `wait`.
                Err(_) => {
                    lock(&rb.queue).workers -= 1;
                    break;
                }
            }
        }
        drop(handles);
        rb
    }

    /// A worker: takes ready jobs until none is left or the rebuild is stopped. A job held at
    /// its hold (W4) goes to the held list and the worker takes the next ready one; with only
    /// held jobs left, it parks until the hold moves.
    fn work(&self, worker: usize) {
        let mut idle = false;
        while !self.cancel.load(Ordering::Acquire) {
            match self.budget(worker) {
                Budget::Keep => {}
                Budget::Idle if !idle => {
                    idle = true;
                    // Best effort: at normal priority the rebuild only ends sooner.
                    let tid = ferrite_pmem::platform::current_thread_id();
                    let _ = ferrite_pmem::platform::idle_thread(tid);
                }
                Budget::Idle => {}
                Budget::Release => return,
            }
            let job = self.take();
            let Some(mut job) = job else {
                let mut st = lock(&self.state);
                let mut q = lock(&self.queue);
                if q.held.is_empty() {
                    return; // every job is taken or ended
                }
                // A job held under an older hold may go on now; else wait for a move.
                if q.held.iter().all(|j| j.generation == st.generation) {
                    drop(q);
                    let seen = st.generation;
                    while st.generation == seen && !self.cancel.load(Ordering::Acquire) {
                        st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    q = lock(&self.queue);
                }
                let held = std::mem::take(&mut q.held);
                q.ready.extend(held);
                continue;
            };
            let held = self.run(&mut job);
            {
                let mut q = lock(&self.queue);
                if held {
                    q.held.push(job);
                }
                q.in_hand -= 1;
            }
            // Tell waiters (a test waiting for every job to be parked, W5); under the state
            // lock, so a waiter between its check and its wait cannot miss it.
            let _st = lock(&self.state);
            self.cv.notify_all();
        }
    }

    /// Runs one job until it ends (complete, failed, or stopped: `false`) or is held
    /// (`true`, with the generation of the hold it met).
    fn run(&self, job: &mut Job) -> bool {
        let s = self.inner.s();
        loop {
            if self.cancel.load(Ordering::Acquire) {
                return false;
            }
            job.generation = lock(&self.state).generation;
            match step(&job.table, s, job.index, BATCH) {
                Ok(Step::Done) => {
                    self.finish(job, Some(Instant::now()), None);
                    return false;
                }
                Ok(Step::Progress) => {}
                Ok(Step::Held) => return true,
                Err(e) => {
                    self.finish(job, None, Some(e.to_string()));
                    return false;
                }
            }
        }
    }

    /// The next ready job: with a strategy, the best-ranked one (`rk`) or the first one some
    /// statement referenced (`¬rk`); else the first.
    fn take(&self) -> Option<Job> {
        let mut q = lock(&self.queue);
        let order = match self.ranked {
            None => None,
            Some(true) => self.inner.restart.with(|p| p.ranker.next_to_rebuild(usize::MAX)),
            Some(false) => self.inner.restart.with(|p| p.ranker.next_unranked(usize::MAX)),
        };
        let mut job = None;
        if let Some(order) = order {
            for id in order {
                if let Some(at) = q.ready.iter().position(|j| j.slot == id) {
                    job = q.ready.remove(at);
                    break;
                }
            }
        }
        let job = job.or_else(|| q.ready.pop_front());
        if job.is_some() {
            q.in_hand += 1;
        }
        job
    }

    /// Whether worker `worker` goes on (adaptive allocation, `adaptive::Allocator`). The
    /// caller of [`Rebuild::wait`] (`usize::MAX`) always does.
    fn budget(&self, worker: usize) -> Budget {
        if worker == usize::MAX {
            return Budget::Keep;
        }
        self.inner
            .restart
            .with(|p| {
                let best = p.ranker.next_to_rebuild(1).first().map(|&s| p.ranker.benefit(s));
                let Some(a) = p.alloc.as_mut() else { return Budget::Keep };
                let b = a.budget(best);
                if worker < b.dedicated as usize {
                    Budget::Keep
                } else if b.idle && worker == 0 {
                    Budget::Idle
                } else {
                    Budget::Release
                }
            })
            .unwrap_or(Budget::Keep)
    }

    fn finish(&self, job: &Job, at: Option<Instant>, error: Option<String>) {
        let mut st = lock(&self.state);
        st.done[job.slot].1 = at;
        st.running -= 1;
        if st.ranked {
            if st.running == 0 {
                self.inner.restart.stop();
            } else if at.is_some() {
                self.inner.restart.with(|p| p.ranker.mark_built(job.slot));
            }
        }
        if st.error.is_none() {
            st.error = error;
        }
        drop(st);
        self.cv.notify_all();
    }

    /// The outcome so far.
    pub fn status(&self) -> RebuildStatus {
        let st = lock(&self.state);
        RebuildStatus {
            indexes: st.done.clone(),
            complete: st.done.iter().all(|d| d.1.is_some()),
            error: st.error.clone(),
        }
    }

    /// Waits until every job ended (complete, failed or stopped). With no worker thread (a
    /// synchronous open on one thread, or none could be spawned), runs the jobs on the calling
    /// thread.
    pub fn wait(&self) -> RebuildStatus {
        let heaps = self.join_heaps();
        if lock(&self.threads).is_empty() {
            self.work(usize::MAX);
        }
        let mut st = lock(&self.state);
        while st.running > 0 && !self.cancel.load(Ordering::Acquire) {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(e) = heaps {
            st.error.get_or_insert(e);
        }
        drop(st);
        self.status()
    }

    /// Finishes every table's deferred heap maps (design §15.8), stopping at the next batch
    /// of rows once the rebuild is stopped.
    pub(super) fn finish_heaps(&self) -> SofortResult<()> {
        let cancel = || self.cancel.load(Ordering::Acquire);
        let mut st = lock(&self.state);
        while st.heaps_held && !cancel() {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        for t in self.inner.all_tables() {
            t.finish_heaps(self.inner.s(), &cancel)?;
        }
        Ok(())
    }

    /// Waits for the heaps' thread (or, with none, finishes the heaps here); its error.
    fn join_heaps(&self) -> Option<String> {
        let h = lock(&self.heaps).take();
        match h {
            Some(h) => h.join().unwrap_or_else(|_| Some("the heap thread panicked".into())),
            None => self.finish_heaps().err().map(|e| e.to_string()),
        }
    }

    /// Test hook: moves every pending index's hold to `hold` (`None`: released) and wakes the
    /// held workers.
    pub fn set_hold(&self, hold: Option<u64>) {
        for t in self.inner.all_tables() {
            for set in t.index_sets() {
                let mut g = set.write().unwrap_or_else(|p| p.into_inner());
                if let Some(p) = g.pending.as_mut() {
                    p.hold = hold_at(hold, p.rows.len()).max(p.wm);
                }
            }
        }
        {
            let mut st = lock(&self.state);
            st.generation += 1;
            st.heaps_held = hold.is_some();
        }
        self.cv.notify_all();
    }

    /// Test hook: waits until every job is complete or held at its hold (W4) and parked (W5),
    /// so a test sees the watermarks it asked for and a release of the hold finds every job
    /// parked.
    pub fn wait_held(&self) {
        let all_held = || {
            self.inner.all_tables().iter().all(|t| {
                t.index_sets().all(|set| {
                    let g = set.read().unwrap_or_else(|p| p.into_inner());
                    g.pending.as_ref().is_none_or(|p| p.wm >= p.hold)
                })
            })
        };
        let parked = || {
            let q = lock(&self.queue);
            q.in_hand == 0 && (q.ready.is_empty() || q.workers == 0)
        };
        let mut st = lock(&self.state);
        while st.running > 0 && !(all_held() && parked()) {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Test hook: how many jobs are parked at their hold (W5).
    #[cfg(test)]
    pub(super) fn parked(&self) -> usize {
        lock(&self.queue).held.len()
    }

    /// Stops the workers at their next batch and joins them (the indexes left pending stay
    /// correct through W1).
    pub fn stop(&self) {
        self.cancel.store(true, Ordering::Release);
        {
            // Under the state lock: a worker between its generation check and its wait
            // cannot miss this wake-up.
            let _st = lock(&self.state);
            self.cv.notify_all();
        }
        let handles = std::mem::take(&mut *lock(&self.threads));
        for h in handles {
            let _ = h.join();
        }
        if let Some(h) = lock(&self.heaps).take() {
            let _ = h.join();
        }
    }
}

/// What a worker does next under adaptive allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Budget {
    /// Goes on at normal priority.
    Keep,
    /// Goes on at idle priority (the last thread, once every dedicated one is released).
    Idle,
    /// Exits (its core goes back to the queries).
    Release,
}

/// The ranking of `jobs` (structure id = job slot) for `strategy`: costs from each table's live
/// rows, `past` the past workload loaded at open (`past.rs`; empty: the first order is by
/// rebuild cost and the restart workload takes over as statements arrive).
fn planner(
    jobs: &[(String, TableRef, Option<usize>)],
    strategy: Option<Strategy>,
    past: &[(Stmt, u64)],
) -> Planner {
    let mut tables: Vec<TableShape> = Vec::new();
    for (slot, (_, t, ix)) in jobs.iter().enumerate() {
        let at = usize::from(t.id);
        if tables.len() <= at {
            tables
                .resize(at + 1, TableShape { rows: 0, primary: usize::MAX, secondary: Vec::new() });
        }
        let shape = &mut tables[at];
        shape.rows = shape.rows.max(pending_rows(t, *ix));
        match ix {
            None => shape.primary = slot,
            Some(i) => {
                let unique = t.table.indexes.get(*i).is_some_and(|d| d.unique);
                if shape.secondary.len() <= *i {
                    shape.secondary.resize(*i + 1, (usize::MAX, false));
                }
                shape.secondary[*i] = (slot, unique);
            }
        }
    }
    let model = ShapeCosts { tables, units: UnitCosts::default() };
    let ranker = Ranker::new(model, jobs.len(), StructSet::new(), past, RankSettings::default());
    let alloc = match strategy {
        Some(Strategy::Adaptive { recovery_threads }) => {
            Some(Allocator::new(recovery_threads, ReleasePolicy::default()))
        }
        _ => None,
    };
    Planner { ranker, alloc }
}

/// The rows index `ix` of `t` has left to index at the start (0 if it is complete).
fn pending_rows(t: &PTable, ix: Option<usize>) -> u64 {
    t.index(ix).ok().and_then(|s| s.dram_state()).map_or(0, |set| {
        let g = set.read().unwrap_or_else(|p| p.into_inner());
        g.pending.as_ref().map_or(0, |p| p.rows.len() as u64)
    })
}

/// A pending index's hold for a requested watermark (W4).
pub(super) fn hold_at(hold: Option<u64>, len: usize) -> usize {
    hold.map_or(len, |h| usize::try_from(h).unwrap_or(usize::MAX).min(len))
}

/// Stops the workers when the last handle of the store goes (they hold the store's shared
/// state, which would otherwise outlive every handle until the rebuild completes).
#[derive(Debug)]
pub(super) struct RebuildOwner(pub Arc<Rebuild>);

impl Drop for RebuildOwner {
    fn drop(&mut self) {
        self.0.stop();
    }
}
