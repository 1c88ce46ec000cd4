//! The insert micro-benchmark of NVWAL and FAST/FASH (and its update and delete variants):
//! transactions of `n` inserts (updates, deletes) of 8-byte keys with values of the configured
//! size, `n` = 1, 8, 32 in the papers' figures.
//!
//! - **insert**: `scale` records are loaded first; worker `t` inserts records
//!   `(t + 1) · 2^40 + 0, 1, 2, …`, whose keys ([`key_of`]) are random-looking and distinct.
//!   One transaction = exactly `n` inserts and a commit.
//! - **update**: `scale` records loaded; each transaction replaces the values of `n` records
//!   picked uniformly at random (each value carries a fresh version).
//! - **delete**: enough records loaded (`scale`, or what `--ops` needs); worker `t` of `T`
//!   deletes records `t, t + T, t + 2T, …` in order, `n` per transaction, and stops when its
//!   share runs out (the report says so).
//!
//! Checks: the table holds exactly the records it should (count), every record the workers
//! inserted is there with a well-formed value, every deleted one is gone, every other loaded
//! one is still there (all of them up to 200 000 records, an even sample above), and no
//! operation met a missing or duplicate key.

use std::collections::BTreeMap;

use super::{
    Check, Worker, WorkerReport, Workload, WorkloadParams, count_records, load_records,
    problems_check, verify_records,
};
use crate::keys::{Rng, fill_value, key_of};
use crate::subject::{OpError, Session, Subject, TxnKind};

/// Which operation the micro-benchmark repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MicroKind {
    /// Inserts of new keys.
    Insert,
    /// Updates of loaded keys.
    Update,
    /// Deletes of loaded keys.
    Delete,
}

impl MicroKind {
    /// Name prefix (`insert`, `update`, `delete`).
    pub fn name(self) -> &'static str {
        match self {
            MicroKind::Insert => "insert",
            MicroKind::Update => "update",
            MicroKind::Delete => "delete",
        }
    }

    pub(super) fn describe(self, n: u32) -> String {
        let what = match self {
            MicroKind::Insert => "inserts of new random 8-byte keys",
            MicroKind::Update => "updates of random loaded records",
            MicroKind::Delete => "deletes of loaded records",
        };
        format!("NVWAL/FAST micro-benchmark: {n} {what} per transaction")
    }
}

const TABLE: usize = 0;
/// Most records a check reads back one by one; above it, an even sample of this many.
const VERIFY_MAX: u64 = 200_000;

pub(super) struct Micro {
    kind: MicroKind,
    n: u32,
    loaded: u64,
    value_size: usize,
    seed: u64,
    threads: usize,
}

impl Micro {
    pub(super) fn new(kind: MicroKind, n: u32, p: &WorkloadParams) -> Self {
        let per_txn = u64::from(n);
        let loaded = match kind {
            MicroKind::Insert => p.scale,
            MicroKind::Update => p.scale.max(1),
            MicroKind::Delete => {
                // Each thread needs its share of the planned transactions, plus slack for the
                // uneven split.
                let needed =
                    p.planned_txns.map(|t| (t + p.threads as u64 * 2) * per_txn).unwrap_or(0);
                p.scale.max(needed).max(per_txn * p.threads as u64)
            }
        };
        Micro { kind, n, loaded, value_size: p.value_size, seed: p.seed, threads: p.threads.max(1) }
    }

    fn base(thread: usize) -> u64 {
        (thread as u64 + 1) << 40
    }
}

/// Up to `VERIFY_MAX` indices evenly spread over `0..n`.
fn sample(n: u64) -> impl Iterator<Item = u64> {
    let step = n.div_ceil(VERIFY_MAX).max(1);
    (0..n).step_by(step as usize)
}

impl Workload for Micro {
    fn tables(&self) -> Vec<&'static str> {
        vec!["micro"]
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("ops_per_txn".into(), self.n.to_string()),
            ("operation".into(), self.kind.name().into()),
            ("loaded_records".into(), self.loaded.to_string()),
            ("key_bytes".into(), "8".into()),
            ("value_bytes".into(), self.value_size.to_string()),
        ])
    }

    fn loaded_bytes(&self) -> u64 {
        self.loaded * (self.value_size as u64 + 8)
    }

    fn ops_per_txn(&self) -> u64 {
        u64::from(self.n)
    }

    fn bytes_per_op(&self) -> u64 {
        match self.kind {
            MicroKind::Insert => self.value_size as u64 + 8,
            MicroKind::Update | MicroKind::Delete => 0,
        }
    }

    fn load(&self, subject: &dyn Subject) -> Result<(), OpError> {
        load_records(subject, TABLE, 0..self.loaded, self.value_size)
    }

    fn worker(&self, index: usize) -> Box<dyn Worker + '_> {
        Box::new(MicroWorker {
            w: self,
            thread: index,
            rng: Rng::new(self.seed, index as u64 + 1),
            next: 0,
            planned: Vec::with_capacity(self.n as usize),
            version: 0,
            value: Vec::with_capacity(self.value_size),
            attempt_problems: Vec::new(),
            report: WorkerReport { thread: index, ..WorkerReport::default() },
        })
    }

    fn check(
        &self,
        subject: &dyn Subject,
        reports: &[WorkerReport],
    ) -> Result<Vec<Check>, OpError> {
        let mut checks = vec![problems_check("every operation found its key state", reports)];
        let count = count_records(subject, TABLE)?;
        let done: u64 = reports.iter().map(|r| r.get("ops")).sum();
        let expected = match self.kind {
            MicroKind::Insert => self.loaded + done,
            MicroKind::Update => self.loaded,
            MicroKind::Delete => self.loaded - done.min(self.loaded),
        };
        checks.push(Check::new(
            "record count",
            count == expected,
            format!(
                "{count} records, expected {expected} ({} loaded, {done} {}s)",
                self.loaded,
                self.kind.name()
            ),
        ));
        match self.kind {
            MicroKind::Insert => {
                let mut inserted = reports.iter().flat_map(|r| {
                    let base = Self::base(r.thread);
                    let n = r.get("ops");
                    let step = n.div_ceil(VERIFY_MAX / self.threads as u64).max(1);
                    (0..n).step_by(step as usize).map(move |s| (base + s, true))
                });
                let (checked, wrong, ex) =
                    verify_records(subject, TABLE, &mut inserted, self.value_size)?;
                checks.push(Check::new(
                    "the table holds every inserted key",
                    wrong == 0,
                    format!("{checked} inserted records read back, {wrong} wrong {ex:?}"),
                ));
                let (checked, wrong, ex) = verify_records(
                    subject,
                    TABLE,
                    &mut sample(self.loaded).map(|i| (i, true)),
                    self.value_size,
                )?;
                checks.push(Check::new(
                    "loaded records intact",
                    wrong == 0,
                    format!("{checked} read back, {wrong} wrong {ex:?}"),
                ));
            }
            MicroKind::Update => {
                let (checked, wrong, ex) = verify_records(
                    subject,
                    TABLE,
                    &mut sample(self.loaded).map(|i| (i, true)),
                    self.value_size,
                )?;
                checks.push(Check::new(
                    "every record present with a value of its key",
                    wrong == 0,
                    format!("{checked} read back, {wrong} wrong {ex:?}"),
                ));
            }
            MicroKind::Delete => {
                let t = self.threads as u64;
                let deleted: Vec<u64> = (0..self.threads)
                    .map(|i| reports.iter().find(|r| r.thread == i).map_or(0, |r| r.get("ops")))
                    .collect();
                let (checked, wrong, ex) = verify_records(
                    subject,
                    TABLE,
                    &mut sample(self.loaded).map(|i| (i, i / t >= deleted[(i % t) as usize])),
                    self.value_size,
                )?;
                checks.push(Check::new(
                    "deleted records gone, others present",
                    wrong == 0,
                    format!("{checked} read back, {wrong} wrong {ex:?}"),
                ));
            }
        }
        Ok(checks)
    }
}

struct MicroWorker<'a> {
    w: &'a Micro,
    thread: usize,
    rng: Rng,
    /// Insert: next sequence number; delete: next position in this thread's stream.
    next: u64,
    planned: Vec<u64>,
    version: u64,
    value: Vec<u8>,
    attempt_problems: Vec<String>,
    report: WorkerReport,
}

impl Worker for MicroWorker<'_> {
    fn plan(&mut self) -> bool {
        let n = u64::from(self.w.n);
        self.planned.clear();
        self.version += 1;
        match self.w.kind {
            MicroKind::Insert => {
                let base = Micro::base(self.thread);
                self.planned.extend((self.next..self.next + n).map(|s| base + s));
                self.next += n;
            }
            MicroKind::Update => {
                for _ in 0..n {
                    let i = self.rng.below(self.w.loaded);
                    self.planned.push(i);
                }
            }
            MicroKind::Delete => {
                let t = self.w.threads as u64;
                let last = self.thread as u64 + t * (self.next + n - 1);
                if last >= self.w.loaded {
                    return false;
                }
                self.planned.extend((self.next..self.next + n).map(|j| self.thread as u64 + t * j));
                self.next += n;
            }
        }
        true
    }

    fn execute(&mut self, session: &mut dyn Session) -> Result<u64, OpError> {
        self.attempt_problems.clear();
        let kind = self.w.kind;
        let size = self.w.value_size;
        let version = self.version;
        let planned = &self.planned;
        let value = &mut self.value;
        let problems = &mut self.attempt_problems;
        session.run(TxnKind::ReadWrite, &mut |ops| {
            problems.clear();
            for &i in planned.iter() {
                let k = key_of(i);
                let ok = match kind {
                    MicroKind::Insert => {
                        fill_value(value, k, version, size);
                        ops.insert(TABLE, k, value)?
                    }
                    MicroKind::Update => {
                        fill_value(value, k, version, size);
                        ops.update(TABLE, k, value)?
                    }
                    MicroKind::Delete => ops.delete(TABLE, k)?,
                };
                if !ok {
                    problems.push(format!(
                        "{} of record {i} (key {k:#x}) found {}",
                        kind.name(),
                        if kind == MicroKind::Insert { "the key present" } else { "no key" }
                    ));
                }
            }
            Ok(())
        })?;
        Ok(u64::from(self.w.n))
    }

    fn committed(&mut self) {
        self.report.add("ops", u64::from(self.w.n));
        self.report.add("txns", 1);
        for p in self.attempt_problems.drain(..) {
            self.report.problem(p);
        }
    }

    fn report(&self) -> WorkerReport {
        self.report.clone()
    }
}
