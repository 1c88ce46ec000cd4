//! Workloads: what a benchmark does to a subject, and how it checks the result.
//!
//! A workload ([`Workload`]) declares its tables, loads them before timing (through its own
//! session, which is dropped before the workers start), hands each worker thread a
//! [`Worker`], and afterwards checks the subject's contents against what the workers report
//! having committed ([`Check`]). A worker plans one transaction at a time
//! ([`Worker::plan`]), executes it ([`Worker::execute`], again after a retryable failure), and
//! is told when it committed ([`Worker::committed`]).
//!
//! The registry is [`WorkloadId`]: adding a workload is a variant there plus one module.
//!
//! | Name | What (one transaction) |
//! |---|---|
//! | `insert1`, `insert8`, `insert32` | NVWAL/FAST insert micro-benchmark: 1, 8 or 32 inserts of random 8-byte keys |
//! | `update1`, `update8`, `update32` | as many updates of random loaded records |
//! | `delete1`, `delete8`, `delete32` | as many deletes of loaded records (each record once) |
//! | `ycsb-a` … `ycsb-f` | YCSB core workloads, one operation per transaction |
//! | `tpcb` | TPC-B (typed rows, [`crate::oltp`]): the one account/teller/branch/history transaction |
//! | `tatp` | TATP (typed rows, [`crate::oltp`]): the seven telecom transactions, expected failures counted apart |
//! | `tpcc` | TPC-C (typed rows, [`crate::oltp`]): the five order-entry transactions, consistency conditions 1–4; not on LMDB |
//!
//! The runner sees every workload through [`PointWorkload`] (open an [`Instance`] on an
//! engine, hand each thread a [`Thread`]), so key-value workloads ([`Workload`], on
//! [`Subject`]s) and the typed OLTP workloads of [`crate::oltp`] run through the same runner,
//! reports and checks.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::keys::{fill_value, key_of, value_matches};
use crate::oltp::{self, TpcbScale, TpccScale};
use crate::subject::{
    EngineId, OpError, Session, Subject, SubjectInfo, SubjectSetup, TableId, TxnKind,
};

pub mod dist;
mod micro;
mod ycsb;

pub use dist::Distribution;
pub use micro::MicroKind;
pub use ycsb::YcsbKind;

/// Parameters every workload takes.
#[derive(Clone, Debug)]
pub struct WorkloadParams {
    /// Records loaded before timing (YCSB's record count; the micro-benchmarks' table size).
    pub scale: u64,
    /// Value size, bytes.
    pub value_size: usize,
    /// Request distribution (YCSB).
    pub distribution: Distribution,
    /// Zipfian constant.
    pub theta: f64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Worker threads of the point.
    pub threads: usize,
    /// Transactions the point will run in total (warm-up included) when known (`--ops`), so
    /// that workloads that consume records (deletes) can load enough.
    pub planned_txns: Option<u64>,
}

/// Result of one consistency check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// Numbers behind it, or what failed.
    pub detail: String,
}

impl Check {
    /// A check that holds when `ok`.
    pub fn new(name: impl Into<String>, ok: bool, detail: impl Into<String>) -> Self {
        Check { name: name.into(), ok, detail: detail.into() }
    }
}

/// What one worker did, for the workload's checks.
#[derive(Clone, Debug, Default)]
pub struct WorkerReport {
    /// Worker number.
    pub thread: usize,
    /// Named counts of committed work (e.g. `inserted`, `reads`).
    pub counts: BTreeMap<&'static str, u64>,
    /// Consistency problems seen by committed transactions (at most a few are kept).
    pub problems: Vec<String>,
    /// Problems in total (including those not kept).
    pub problem_count: u64,
}

impl WorkerReport {
    /// Records a problem.
    pub fn problem(&mut self, p: String) {
        self.problem_count += 1;
        if self.problems.len() < 5 {
            self.problems.push(p);
        }
    }

    /// Adds `n` to a count.
    pub fn add(&mut self, name: &'static str, n: u64) {
        *self.counts.entry(name).or_default() += n;
    }

    /// A count (0 if never added).
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }
}

/// One worker thread's part of a workload.
pub trait Worker {
    /// Plans the next transaction; `false` when there is nothing left to do (the worker stops).
    fn plan(&mut self) -> bool;
    /// Executes the planned transaction once and returns how many operations it holds.
    fn execute(&mut self, session: &mut dyn Session) -> Result<u64, OpError>;
    /// The planned transaction committed.
    fn committed(&mut self);
    /// What this worker committed.
    fn report(&self) -> WorkerReport;
}

/// A workload instance for one point.
pub trait Workload: Send + Sync {
    /// Tables, in [`TableId`] order.
    fn tables(&self) -> Vec<&'static str>;
    /// Parameters as printed with results.
    fn params(&self) -> BTreeMap<String, String>;
    /// Upper estimate of the bytes of data loaded (sizes caches and pools).
    fn loaded_bytes(&self) -> u64;
    /// Operations per transaction (for YCSB, 1).
    fn ops_per_txn(&self) -> u64;
    /// Bytes of data one operation adds at most, on average (sizes pools for timed runs).
    fn bytes_per_op(&self) -> u64;
    /// Loads the tables (before timing, through its own session).
    fn load(&self, subject: &dyn Subject) -> Result<(), OpError>;
    /// The worker of thread `index` (of the point's `threads`).
    fn worker(&self, index: usize) -> Box<dyn Worker + '_>;
    /// Checks the subject against what the workers report.
    fn check(&self, subject: &dyn Subject, reports: &[WorkerReport])
    -> Result<Vec<Check>, OpError>;
}

/// What the runner needs from a workload at one point, whatever its data model.
pub trait PointWorkload: Send + Sync {
    /// Table names (for sizing and the settings).
    fn tables(&self) -> Vec<&'static str>;
    /// Parameters as printed with results.
    fn params(&self) -> BTreeMap<String, String>;
    /// Upper estimate of the bytes of data loaded (sizes caches and pools).
    fn loaded_bytes(&self) -> u64;
    /// Operations per transaction (on average).
    fn ops_per_txn(&self) -> u64;
    /// Bytes of data one operation adds at most, on average.
    fn bytes_per_op(&self) -> u64;
    /// Names of the transaction types ([`Thread::plan`] returns an index into them); latency
    /// is also recorded per type.
    fn txn_types(&self) -> Vec<&'static str>;
    /// Opens a fresh instance of `engine` in `dir` with this workload's tables.
    fn open(
        &self,
        engine: EngineId,
        dir: &Path,
        setup: &SubjectSetup,
    ) -> Result<Box<dyn Instance + '_>, OpError>;
}

/// A workload bound to an opened engine, for one point.
pub trait Instance: Sync {
    /// What the engine is.
    fn info(&self) -> &SubjectInfo;
    /// Loads the data (untimed, through a session of its own, dropped before timing) and
    /// prepares the engine for timing.
    fn load(&self) -> Result<(), OpError>;
    /// The calling thread's part: a session of its own and the workload's worker `index`.
    fn thread(&self, index: usize) -> Result<Box<dyn Thread + '_>, OpError>;
    /// Checks the engine's contents against what the threads report.
    fn check(&self, reports: &[WorkerReport]) -> Result<Vec<Check>, OpError>;
}

/// One worker thread of an [`Instance`].
pub trait Thread {
    /// Plans the next transaction and returns its type; `None` when there is nothing left.
    fn plan(&mut self) -> Option<usize>;
    /// Executes the planned transaction once; returns how many operations it holds.
    fn execute(&mut self) -> Result<u64, OpError>;
    /// The planned transaction committed.
    fn committed(&mut self);
    /// What this thread committed.
    fn report(&self) -> WorkerReport;
}

/// A key-value [`Workload`] as a [`PointWorkload`].
struct KvPoint(Box<dyn Workload>);

impl PointWorkload for KvPoint {
    fn tables(&self) -> Vec<&'static str> {
        self.0.tables()
    }
    fn params(&self) -> BTreeMap<String, String> {
        self.0.params()
    }
    fn loaded_bytes(&self) -> u64 {
        self.0.loaded_bytes()
    }
    fn ops_per_txn(&self) -> u64 {
        self.0.ops_per_txn()
    }
    fn bytes_per_op(&self) -> u64 {
        self.0.bytes_per_op()
    }
    fn txn_types(&self) -> Vec<&'static str> {
        vec!["txn"]
    }
    fn open(
        &self,
        engine: EngineId,
        dir: &Path,
        setup: &SubjectSetup,
    ) -> Result<Box<dyn Instance + '_>, OpError> {
        let subject = engine.open(dir, setup)?;
        Ok(Box::new(KvInstance { subject, workload: self.0.as_ref() }))
    }
}

struct KvInstance<'w> {
    subject: Box<dyn Subject>,
    workload: &'w dyn Workload,
}

impl Instance for KvInstance<'_> {
    fn info(&self) -> &SubjectInfo {
        self.subject.info()
    }
    fn load(&self) -> Result<(), OpError> {
        self.workload.load(self.subject.as_ref())?;
        self.subject.before_timing()
    }
    fn thread(&self, index: usize) -> Result<Box<dyn Thread + '_>, OpError> {
        Ok(Box::new(KvThread {
            session: self.subject.session()?,
            worker: self.workload.worker(index),
        }))
    }
    fn check(&self, reports: &[WorkerReport]) -> Result<Vec<Check>, OpError> {
        self.workload.check(self.subject.as_ref(), reports)
    }
}

struct KvThread<'a> {
    session: Box<dyn Session + 'a>,
    worker: Box<dyn Worker + 'a>,
}

impl Thread for KvThread<'_> {
    fn plan(&mut self) -> Option<usize> {
        self.worker.plan().then_some(0)
    }
    fn execute(&mut self) -> Result<u64, OpError> {
        self.worker.execute(self.session.as_mut())
    }
    fn committed(&mut self) {
        self.worker.committed();
    }
    fn report(&self) -> WorkerReport {
        self.worker.report()
    }
}

/// Every workload of the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadId {
    /// The NVWAL/FAST micro-benchmark: `ops` inserts, updates or deletes per transaction.
    Micro(MicroKind, u32),
    /// A YCSB core workload.
    Ycsb(YcsbKind),
    /// TPC-B at the given scale.
    Tpcb(TpcbScale),
    /// TATP with the given number of subscribers.
    Tatp(u32),
    /// TPC-C at the given scale.
    Tpcc(TpccScale),
}

impl WorkloadId {
    /// Every workload, in table order.
    pub fn all() -> Vec<WorkloadId> {
        let mut v = Vec::new();
        for kind in [MicroKind::Insert, MicroKind::Update, MicroKind::Delete] {
            for n in [1, 8, 32] {
                v.push(WorkloadId::Micro(kind, n));
            }
        }
        v.extend(YcsbKind::ALL.iter().map(|&k| WorkloadId::Ycsb(k)));
        v.push(WorkloadId::Tpcb(TpcbScale::default()));
        v.push(WorkloadId::Tatp(oltp::tatp::DEFAULT_SUBSCRIBERS));
        v.push(WorkloadId::Tpcc(TpccScale::default()));
        v
    }

    /// Whether `engine` runs this workload (the OLTP workloads have no PMDK mapping; TPC-C
    /// none on LMDB, whose key-value mapping has no non-unique index).
    pub fn supports(self, engine: EngineId) -> bool {
        match self {
            WorkloadId::Micro(..) | WorkloadId::Ycsb(_) => true,
            WorkloadId::Tpcb(_) | WorkloadId::Tatp(_) => oltp::supports(engine),
            WorkloadId::Tpcc(_) => oltp::tpcc::supports(engine),
        }
    }

    /// Registry name (`insert1`, `ycsb-a`).
    pub fn name(self) -> String {
        match self {
            WorkloadId::Micro(kind, n) => format!("{}{n}", kind.name()),
            WorkloadId::Ycsb(k) => format!("ycsb-{}", k.letter()),
            WorkloadId::Tpcb(_) => "tpcb".into(),
            WorkloadId::Tatp(_) => "tatp".into(),
            WorkloadId::Tpcc(_) => "tpcc".into(),
        }
    }

    /// One line for `--list`.
    pub fn describe(self) -> String {
        match self {
            WorkloadId::Micro(kind, n) => kind.describe(n),
            WorkloadId::Ycsb(k) => k.describe().into(),
            WorkloadId::Tpcb(_) => oltp::tpcb::DESCRIPTION.into(),
            WorkloadId::Tatp(_) => oltp::tatp::DESCRIPTION.into(),
            WorkloadId::Tpcc(_) => oltp::tpcc::DESCRIPTION.into(),
        }
    }

    /// Parses a name (case-insensitive); `insertN`/`updateN`/`deleteN` accept any N from 1 to
    /// 1024.
    pub fn parse(s: &str) -> Result<WorkloadId, String> {
        let l = s.to_ascii_lowercase();
        if let Some(k) = YcsbKind::ALL.iter().find(|k| format!("ycsb-{}", k.letter()) == l) {
            return Ok(WorkloadId::Ycsb(*k));
        }
        if l == "tpcb" {
            return Ok(WorkloadId::Tpcb(TpcbScale::default()));
        }
        if l == "tatp" {
            return Ok(WorkloadId::Tatp(oltp::tatp::DEFAULT_SUBSCRIBERS));
        }
        if l == "tpcc" {
            return Ok(WorkloadId::Tpcc(TpccScale::default()));
        }
        for kind in [MicroKind::Insert, MicroKind::Update, MicroKind::Delete] {
            if let Some(n) = l.strip_prefix(kind.name()) {
                return match n.parse::<u32>() {
                    Ok(n) if (1..=1024).contains(&n) => Ok(WorkloadId::Micro(kind, n)),
                    _ => Err(format!(
                        "{s:?}: {} takes 1 to 1024 operations per transaction",
                        kind.name()
                    )),
                };
            }
        }
        let names: Vec<String> = WorkloadId::all().into_iter().map(WorkloadId::name).collect();
        Err(format!(
            "unknown workload {s:?} (expected one of {}, or the groups micro, ycsb, oltp, all)",
            names.join(", ")
        ))
    }

    /// Parses a comma-separated list with the groups `micro`, `ycsb`, `oltp`, `all`.
    pub fn parse_list(items: &[String]) -> Result<Vec<WorkloadId>, String> {
        let mut out = Vec::new();
        for item in items.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty())
        {
            let group: Vec<WorkloadId> = match item.to_ascii_lowercase().as_str() {
                "all" => WorkloadId::all(),
                "micro" => WorkloadId::all()
                    .into_iter()
                    .filter(|w| matches!(w, WorkloadId::Micro(..)))
                    .collect(),
                "ycsb" => YcsbKind::ALL.iter().map(|&k| WorkloadId::Ycsb(k)).collect(),
                "oltp" => vec![
                    WorkloadId::Tpcb(TpcbScale::default()),
                    WorkloadId::Tatp(oltp::tatp::DEFAULT_SUBSCRIBERS),
                    WorkloadId::Tpcc(TpccScale::default()),
                ],
                _ => vec![WorkloadId::parse(item)?],
            };
            for w in group {
                if !out.contains(&w) {
                    out.push(w);
                }
            }
        }
        if out.is_empty() {
            return Err("no workload given".into());
        }
        Ok(out)
    }

    /// A fresh instance for one point.
    pub fn instantiate(self, p: &WorkloadParams) -> Box<dyn PointWorkload> {
        match self {
            WorkloadId::Micro(kind, n) => {
                Box::new(KvPoint(Box::new(micro::Micro::new(kind, n, p))))
            }
            WorkloadId::Ycsb(k) => Box::new(KvPoint(Box::new(ycsb::Ycsb::new(k, p)))),
            WorkloadId::Tpcb(scale) => oltp::point(Box::new(oltp::tpcb::Tpcb::new(scale, p))),
            WorkloadId::Tatp(n) => oltp::point(Box::new(oltp::tatp::Tatp::new(n, p))),
            WorkloadId::Tpcc(scale) => {
                oltp::point(Box::new(oltp::tpcc::TpccWorkload::new(scale, p)))
            }
        }
    }
}

impl std::fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Records loaded per transaction.
const LOAD_BATCH: u64 = 1000;

/// Loads records `indices` of `table` (value version 0) in transactions of 1000 inserts,
/// through a session of its own.
pub(crate) fn load_records(
    subject: &dyn Subject,
    table: TableId,
    indices: std::ops::Range<u64>,
    value_size: usize,
) -> Result<(), OpError> {
    let mut session = subject.session()?;
    let mut value = Vec::with_capacity(value_size);
    let mut start = indices.start;
    while start < indices.end {
        let end = (start + LOAD_BATCH).min(indices.end);
        retry(|| {
            session.run(TxnKind::ReadWrite, &mut |ops| {
                for i in start..end {
                    let k = key_of(i);
                    fill_value(&mut value, k, 0, value_size);
                    if !ops.insert(table, k, &value)? {
                        return Err(OpError::Engine(format!("load: key of record {i} exists")));
                    }
                }
                Ok(())
            })
        })?;
        start = end;
    }
    Ok(())
}

/// Runs `f` until it does not fail with a retryable error (a conflict or a busy engine; at
/// most 10 000 times).
pub(crate) fn retry<T>(mut f: impl FnMut() -> Result<T, OpError>) -> Result<T, OpError> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.is_retryable() && tries < 10_000 => {
                tries += 1;
                if tries > 100 {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                } else {
                    std::thread::yield_now();
                }
            }
            other => return other,
        }
    }
}

/// Counts the records of `table`.
pub(crate) fn count_records(subject: &dyn Subject, table: TableId) -> Result<u64, OpError> {
    let mut session = subject.session()?;
    let mut n = 0;
    retry(|| {
        session.run(TxnKind::ReadOnly, &mut |ops| {
            n = ops.count(table)?;
            Ok(())
        })
    })?;
    Ok(n)
}

/// Checks, in read-only transactions of 1000 reads, that each record index `i` in `indices`
/// is present with a well-formed value iff `expect(i)`; returns (checked, wrong, first few
/// wrong).
pub(crate) fn verify_records(
    subject: &dyn Subject,
    table: TableId,
    indices: &mut dyn Iterator<Item = (u64, bool)>,
    value_size: usize,
) -> Result<(u64, u64, Vec<String>), OpError> {
    let mut session = subject.session()?;
    let mut checked = 0u64;
    let mut wrong = 0u64;
    let mut examples = Vec::new();
    let mut buf = Vec::new();
    let mut batch: Vec<(u64, bool)> = Vec::with_capacity(1000);
    loop {
        batch.clear();
        batch.extend((&mut *indices).take(1000));
        if batch.is_empty() {
            break;
        }
        let mut results: Vec<(u64, Option<bool>)> = Vec::with_capacity(batch.len());
        retry(|| {
            results.clear();
            session.run(TxnKind::ReadOnly, &mut |ops| {
                for &(i, _) in &batch {
                    let k = key_of(i);
                    let found = ops.get(table, k, &mut buf)?;
                    results.push((i, found.then(|| value_matches(k, &buf, value_size))));
                }
                Ok(())
            })
        })?;
        for (&(i, expect), &(_, got)) in batch.iter().zip(&results) {
            checked += 1;
            let ok = match got {
                Some(well_formed) => expect && well_formed,
                None => !expect,
            };
            if !ok {
                wrong += 1;
                if examples.len() < 3 {
                    examples.push(match got {
                        None => format!("record {i} (key {:#x}) missing", key_of(i)),
                        Some(false) => format!("record {i} has a malformed value"),
                        Some(true) => format!("record {i} present but should be absent"),
                    });
                }
            }
        }
    }
    Ok((checked, wrong, examples))
}

/// The problems workers saw, as one check.
pub(crate) fn problems_check(name: &str, reports: &[WorkerReport]) -> Check {
    let total: u64 = reports.iter().map(|r| r.problem_count).sum();
    let examples: Vec<&str> =
        reports.iter().flat_map(|r| r.problems.iter().map(String::as_str)).take(3).collect();
    Check::new(
        name,
        total == 0,
        if total == 0 { "none".to_owned() } else { format!("{total}: {}", examples.join("; ")) },
    )
}
