//! The runner: for every point (workload × engine × threads × injected latency) it opens a
//! fresh subject in a fresh directory, loads the workload's data (untimed, separate session),
//! warms up, runs the timed phase on worker threads, and checks the workload's consistency.
//!
//! Measured per point: committed transactions and operations over the timed phase (throughput
//! is transactions over the longest worker's elapsed time), per-transaction latency from the
//! first attempt to the successful commit (HDR histogram, 3 significant digits), aborts
//! (attempts that failed with a conflict and were run again), busy retries (attempts refused
//! because another thread's read-write transaction was open, on an engine that admits one writer
//! at a time and refuses a second, as the paged engine does; run again after a back-off,
//! `back_off`), the same latency, aborts and busy retries per transaction type of the workload,
//! and for Ferrite engines
//! the persistence counters of `ferrite::pmem::Counters` summed over the workers' timed phases
//! (flushes, fences, bytes stored, block-file syncs, injected ns per transaction). Baselines get no counters
//! (`None`, printed `n/a`), and run only at zero injected latency.

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrite::pmem::Counters;
use hdrhistogram::Histogram;

use crate::report::{PointResult, TxnTypeResult};
pub use crate::spec::{Point, RunSpec, Stop, Warmup};
use crate::subject::{Family, OpError, SubjectSetup};
use crate::workload::{Thread, WorkerReport, WorkloadParams};

/// Progress callbacks (the CLI draws a bar; tests pass [`NoProgress`]).
pub trait Progress: Sync {
    /// A point starts.
    fn start(&self, _index: usize, _total: usize, _label: &str) {}
    /// The point entered a phase (`load`, `warm-up`, `run`, `check`).
    fn phase(&self, _phase: &str) {}
    /// A point ended.
    fn done(&self, _result: &PointResult) {}
}

/// No progress output.
#[derive(Debug)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// Operations per second a timed phase is assumed never to exceed when sizing pools (a run
/// that does exceed it fills a PMDK pool and reports "full").
const OPS_PER_SEC_BOUND: f64 = 1.5e6;

/// Most attempts of one transaction before the point fails, if it has also been retried for
/// [`MIN_RETRY_TIME`].
const MAX_ATTEMPTS: u64 = 100_000;

/// A transaction that fails [`MAX_ATTEMPTS`] times within this time is still retried: a writer
/// that holds a busy engine for long (a big OLTP transaction, a descheduled thread) must not fail
/// the point.
const MIN_RETRY_TIME: Duration = Duration::from_secs(10);

/// Busy retries in a row that only yield the CPU before the worker starts sleeping.
const BUSY_SPINS: u64 = 16;

/// Longest back-off sleep after a busy retry.
const BUSY_MAX_SLEEP: Duration = Duration::from_micros(256);

/// What a worker does before running a transaction again after its `failed`-th failed attempt
/// in a row. After a conflict it yields (the conflicting transaction has committed or will
/// soon). After a busy refusal it yields for [`BUSY_SPINS`] attempts, then sleeps 1, 2, 4 …
/// µs up to [`BUSY_MAX_SLEEP`]: the writer it waits for needs the CPU, and on a machine with
/// fewer cores than workers, workers that only yield keep the writer off the CPU.
fn back_off(busy: bool, failed: u64) {
    if !busy || failed <= BUSY_SPINS {
        std::thread::yield_now();
    } else {
        let shift = (failed - BUSY_SPINS - 1).min(8) as u32;
        std::thread::sleep(Duration::from_micros(1 << shift).min(BUSY_MAX_SLEEP));
    }
}

/// One committed transaction: its type, operations, and the attempts before it that failed
/// with a conflict (`aborts`) or were refused as busy (`busy`).
struct Committed {
    ty: usize,
    ops: u64,
    aborts: u64,
    busy: u64,
}

struct WorkerOut {
    txns: u64,
    ops: u64,
    aborts: u64,
    busy: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
    /// Per transaction type: latency, aborts and busy retries.
    per_type: Vec<(Histogram<u64>, u64, u64)>,
    counters: Counters,
    stopped_early: bool,
    report: WorkerReport,
}

fn new_hist() -> Histogram<u64> {
    // 1 ns .. 100 s, 3 significant digits; the bounds are constants, so this cannot fail.
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("histogram"))
}

/// Runs every point; a point that fails (an engine error) is reported with its error and the
/// run goes on.
pub fn run(spec: &RunSpec, progress: &dyn Progress) -> Vec<PointResult> {
    let points = spec.points();
    let repeat = spec.repeat.max(1);
    let total = points.len() * repeat;
    let mut out = Vec::with_capacity(points.len());
    for (i, p) in points.iter().enumerate() {
        let mut runs = Vec::with_capacity(repeat);
        for rep in 0..repeat {
            let mut label = point_label(p);
            if repeat > 1 {
                label.push_str(&format!(" (run {}/{repeat})", rep + 1));
            }
            progress.start(i * repeat + rep, total, &label);
            let dir = spec.dir.join(format!("p{i:03}-{rep}-{}", p.engine.name()));
            let r = run_point(spec, p, &dir, progress);
            let _ = std::fs::remove_dir_all(&dir);
            progress.done(&r);
            runs.push(r);
        }
        out.push(median_run(runs));
    }
    out
}

/// The run with the median throughput, carrying every run's throughput; a failed run wins
/// (failures are never hidden by repetition).
fn median_run(mut runs: Vec<PointResult>) -> PointResult {
    let all: Vec<f64> = runs.iter().map(|r| r.tx_per_s).collect();
    if let Some(i) = runs.iter().position(|r| !r.ok()) {
        let mut r = runs.swap_remove(i);
        r.tx_per_s_runs = all;
        return r;
    }
    runs.sort_by(|a, b| a.tx_per_s.total_cmp(&b.tx_per_s));
    let mid = (runs.len() - 1) / 2;
    let mut r = runs.swap_remove(mid);
    r.tx_per_s_runs = all;
    r
}

/// `workload engine tN [L ns]`.
pub fn point_label(p: &Point) -> String {
    let mut s = format!("{} {} t{}", p.workload.name(), p.engine.name(), p.threads);
    if p.latency_ns != 0 {
        s.push_str(&format!(" +{}ns", p.latency_ns));
    }
    s
}

fn share(total: u64, threads: usize, t: usize) -> u64 {
    let n = threads as u64;
    total / n + u64::from((t as u64) < total % n)
}

/// Runs one point in `dir` (created, and left for the caller to remove).
pub fn run_point(spec: &RunSpec, p: &Point, dir: &Path, progress: &dyn Progress) -> PointResult {
    let params = WorkloadParams {
        scale: spec.scale,
        value_size: spec.value_size,
        distribution: spec.distribution,
        theta: spec.theta,
        seed: spec.seed,
        threads: p.threads,
        planned_txns: match (spec.stop, spec.warmup) {
            (Stop::Txns(n), Warmup::Txns(w)) => Some(n + w),
            (Stop::Txns(n), Warmup::Duration(d)) if d.is_zero() => Some(n),
            _ => None,
        },
    };
    let workload = p.workload.instantiate(&params);
    let mut result = PointResult::new(p, spec, workload.params());
    // Size caches and pools for the loaded data plus what the run may add: exactly the planned
    // operations with --ops, a generous rate bound for timed phases.
    let per_txn = workload.ops_per_txn().max(1);
    let timed_ops = |secs: f64| (secs * OPS_PER_SEC_BOUND) as u64;
    let ops_bound = match spec.warmup {
        Warmup::Txns(w) => w * per_txn,
        Warmup::Duration(d) => timed_ops(d.as_secs_f64()),
    } + match spec.stop {
        Stop::Txns(n) => n * per_txn,
        Stop::Duration(d) => timed_ops(d.as_secs_f64()),
    };
    let setup = SubjectSetup {
        tables: workload.tables(),
        data_bytes: workload.loaded_bytes() + workload.bytes_per_op().saturating_mul(ops_bound),
        latency_ns: p.latency_ns,
        latency_model: spec.latency_model,
        flush: spec.flush,
        sync_latency_ns: spec.sync_latency_us_of(p.engine) * 1000,
    };
    let txn_types = workload.txn_types();
    let instance = match workload.open(p.engine, dir, &setup) {
        Ok(s) => s,
        Err(e) => {
            result.error = Some(format!("open: {e}"));
            return result;
        }
    };
    result.set_subject(instance.info());

    progress.phase("load");
    let t_load = Instant::now();
    if let Err(e) = instance.load() {
        result.error = Some(format!("load: {e}"));
        return result;
    }
    result.load_seconds = t_load.elapsed().as_secs_f64();

    progress.phase("warm-up");
    let barrier = Barrier::new(p.threads);
    let failed = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let counters_apply = instance.info().family == Family::Ferrite;
    let outs: Vec<Result<WorkerOut, OpError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let (instance, barrier, failed, measuring, n_types) =
                    (instance.as_ref(), &barrier, &failed, &measuring, txn_types.len().max(1));
                s.spawn(move || -> Result<WorkerOut, OpError> {
                    // Runs the next planned transaction to its commit, retrying conflicts and
                    // busy refusals; `None` when the worker has nothing left to do.
                    let run_one = |th: &mut dyn Thread| -> Result<Option<Committed>, OpError> {
                        let Some(ty) = th.plan() else {
                            return Ok(None);
                        };
                        let (mut aborts, mut busy) = (0u64, 0u64);
                        let mut first_failure: Option<Instant> = None;
                        loop {
                            match th.execute() {
                                Ok(ops) => {
                                    th.committed();
                                    let ty = ty.min(n_types - 1);
                                    return Ok(Some(Committed { ty, ops, aborts, busy }));
                                }
                                Err(e) if e.is_retryable() => {
                                    let is_busy = matches!(e, OpError::Busy(_));
                                    if is_busy {
                                        busy += 1;
                                    } else {
                                        aborts += 1;
                                    }
                                    let attempts = aborts + busy;
                                    let since = *first_failure.get_or_insert_with(Instant::now);
                                    if attempts >= MAX_ATTEMPTS && since.elapsed() >= MIN_RETRY_TIME
                                    {
                                        return Err(OpError::Engine(format!(
                                            "a transaction failed {attempts} times ({busy} \
                                             busy) in {:.1} s: {e}",
                                            since.elapsed().as_secs_f64()
                                        )));
                                    }
                                    back_off(is_busy, if is_busy { busy } else { aborts });
                                }
                                Err(e) => return Err(e),
                            }
                        }
                    };
                    // Phase 1: session and warm-up (errors still reach the barrier).
                    let pre = (|| -> Result<_, OpError> {
                        let mut th = instance.thread(t)?;
                        let mut exhausted = false;
                        match spec.warmup {
                            Warmup::Duration(d) => {
                                let end = Instant::now() + d;
                                while Instant::now() < end && !failed.load(Ordering::Relaxed) {
                                    if run_one(th.as_mut())?.is_none() {
                                        exhausted = true;
                                        break;
                                    }
                                }
                            }
                            Warmup::Txns(n) => {
                                for _ in 0..share(n, p.threads, t) {
                                    if run_one(th.as_mut())?.is_none() {
                                        exhausted = true;
                                        break;
                                    }
                                }
                            }
                        }
                        Ok((th, exhausted))
                    })();
                    if pre.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    barrier.wait();
                    measuring.store(true, Ordering::Relaxed);
                    let (mut th, exhausted) = pre?;
                    if failed.load(Ordering::Relaxed) {
                        return Err(OpError::Engine("another worker failed".into()));
                    }
                    // Phase 2: timed.
                    let mut hist = new_hist();
                    let mut per_type: Vec<(Histogram<u64>, u64, u64)> =
                        (0..n_types).map(|_| (new_hist(), 0, 0)).collect();
                    let (mut txns, mut ops, mut aborts, mut busy) = (0u64, 0u64, 0u64, 0u64);
                    let mut stopped_early = exhausted;
                    let c0 = Counters::snapshot();
                    let start = Instant::now();
                    let quota = match spec.stop {
                        Stop::Txns(n) => share(n, p.threads, t),
                        Stop::Duration(_) => u64::MAX,
                    };
                    let deadline = match spec.stop {
                        Stop::Duration(d) => Some(start + d),
                        Stop::Txns(_) => None,
                    };
                    let mut end = start;
                    while !stopped_early && txns < quota {
                        if deadline.is_some_and(|d| end >= d) || failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let t0 = Instant::now();
                        let r = run_one(th.as_mut());
                        end = Instant::now();
                        match r {
                            Ok(Some(c)) => {
                                let ns = u64::try_from(end.duration_since(t0).as_nanos())
                                    .unwrap_or(u64::MAX)
                                    .max(1);
                                hist.saturating_record(ns);
                                per_type[c.ty].0.saturating_record(ns);
                                per_type[c.ty].1 += c.aborts;
                                per_type[c.ty].2 += c.busy;
                                aborts += c.aborts;
                                busy += c.busy;
                                txns += 1;
                                ops += c.ops;
                            }
                            Ok(None) => stopped_early = true,
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    let counters = Counters::snapshot() - c0;
                    let elapsed = end.duration_since(start);
                    let report = th.report();
                    drop(th);
                    Ok(WorkerOut {
                        txns,
                        ops,
                        aborts,
                        busy,
                        elapsed,
                        hist,
                        per_type,
                        counters,
                        stopped_early,
                        report,
                    })
                })
            })
            .collect();
        // Tell the progress display when timing starts.
        while !measuring.load(Ordering::Relaxed) && !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        progress.phase("run");
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(OpError::Engine("worker panicked".into()))))
            .collect()
    });

    let mut workers = Vec::with_capacity(outs.len());
    for o in outs {
        match o {
            Ok(w) => workers.push(w),
            Err(e) => {
                if result.error.is_none() || !e.to_string().contains("another worker failed") {
                    result.error = Some(format!("run: {e}"));
                }
            }
        }
    }
    if result.error.is_some() {
        return result;
    }

    let mut hist = new_hist();
    let mut per_type: Vec<(Histogram<u64>, u64, u64)> =
        (0..txn_types.len().max(1)).map(|_| (new_hist(), 0, 0)).collect();
    let mut counters = Counters::default();
    let mut elapsed = Duration::ZERO;
    for w in &workers {
        let _ = hist.add(&w.hist);
        for (sum, (h, a, b)) in per_type.iter_mut().zip(&w.per_type) {
            let _ = sum.0.add(h);
            sum.1 += a;
            sum.2 += b;
        }
        counters = counters + w.counters;
        elapsed = elapsed.max(w.elapsed);
        result.txns += w.txns;
        result.ops += w.ops;
        result.aborts += w.aborts;
        result.busy += w.busy;
    }
    if workers.iter().any(|w| w.stopped_early) {
        result.notes.push(
            "a worker ran out of records before the end (delete workloads consume the loaded \
             records: raise --scale)"
                .into(),
        );
    }
    result.seconds = elapsed.as_secs_f64();
    if result.seconds > 0.0 {
        result.tx_per_s = result.txns as f64 / result.seconds;
        result.ops_per_s = result.ops as f64 / result.seconds;
    }
    if result.txns > 0 {
        let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
        result.p50_us = us(0.50);
        result.p99_us = us(0.99);
        result.p999_us = us(0.999);
        result.max_us = hist.max() as f64 / 1000.0;
        result.mean_us = hist.mean() / 1000.0;
        result.txn_types = txn_types
            .iter()
            .zip(&per_type)
            .map(|(name, (h, aborts, busy))| {
                let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
                TxnTypeResult {
                    name: (*name).to_owned(),
                    txns: h.len(),
                    aborts: *aborts,
                    busy: *busy,
                    p50_us: us(0.50),
                    p99_us: us(0.99),
                    p999_us: us(0.999),
                }
            })
            .collect();
        if counters_apply {
            let per = |v: u64| Some(v as f64 / result.txns as f64);
            result.flushes_per_tx = per(counters.lines_flushed());
            result.fences_per_tx = per(counters.fences);
            result.syncs_per_tx = per(counters.syncs);
            result.bytes_per_tx = per(counters.bytes_stored + counters.nt_bytes);
            result.injected_ns_per_tx = per(counters.injected_ns);
            if counters.commit_ns > 0 {
                result.commit_us_per_tx = per(counters.commit_ns).map(|ns| ns / 1000.0);
            }
        }
    } else {
        result.notes.push("no transaction committed in the timed phase".into());
    }

    progress.phase("check");
    let reports: Vec<WorkerReport> = workers.into_iter().map(|w| w.report).collect();
    match instance.check(&reports) {
        Ok(c) => result.checks = c,
        Err(e) => result.error = Some(format!("check: {e}")),
    }
    result
}
