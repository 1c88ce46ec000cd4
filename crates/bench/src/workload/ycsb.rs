//! YCSB core workloads A–F, one operation per transaction (as YCSB's client issues them).
//!
//! | Workload | Mix | Request distribution |
//! |---|---|---|
//! | A | 50 % read, 50 % update | Zipfian |
//! | B | 95 % read, 5 % update | Zipfian |
//! | C | 100 % read | Zipfian |
//! | D | 95 % read, 5 % insert | latest (Zipfian over recency) |
//! | E | 95 % scan (length uniform in 1..=100), 5 % insert | Zipfian (scan start) |
//! | F | 50 % read, 50 % read-modify-write | Zipfian |
//!
//! `--distribution uniform` replaces every request distribution (D's too) with the uniform one.
//! Records: `scale` loaded (YCSB's `recordcount`), keys [`key_of`]`(index)` (YCSB's hashed
//! inserts), values of the configured size (YCSB's default is 10 × 100 bytes; the harness
//! stores one value of `--value-size` bytes). Inserts take the next index from a shared
//! counter; reads only choose among records whose insert has committed (YCSB's acknowledged
//! counter), so a read never legitimately misses. Reads are read-only transactions; updates,
//! inserts and read-modify-writes read-write ones; scans read-only ones.
//!
//! Checks: no read, update, read-modify-write or scan missed a record, every value read
//! belongs to its key and has the configured size, scans return ascending keys starting at
//! their start key, the table holds exactly `scale + inserts` records, and every loaded and
//! inserted record is there (all up to 200 000, an even sample above).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::dist::{Distribution, Zipfian};
use super::{
    Check, Worker, WorkerReport, Workload, WorkloadParams, count_records, load_records,
    problems_check, verify_records,
};
use crate::keys::{Rng, fill_value, key_of, value_matches};
use crate::subject::{OpError, Session, Subject, TxnKind};

/// The six core workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum YcsbKind {
    /// Update heavy.
    A,
    /// Read mostly.
    B,
    /// Read only.
    C,
    /// Read latest.
    D,
    /// Short ranges.
    E,
    /// Read-modify-write.
    F,
}

impl YcsbKind {
    /// All six.
    pub const ALL: [YcsbKind; 6] =
        [YcsbKind::A, YcsbKind::B, YcsbKind::C, YcsbKind::D, YcsbKind::E, YcsbKind::F];

    /// Lower-case letter.
    pub fn letter(self) -> char {
        match self {
            YcsbKind::A => 'a',
            YcsbKind::B => 'b',
            YcsbKind::C => 'c',
            YcsbKind::D => 'd',
            YcsbKind::E => 'e',
            YcsbKind::F => 'f',
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            YcsbKind::A => "YCSB A: 50% read, 50% update, Zipfian",
            YcsbKind::B => "YCSB B: 95% read, 5% update, Zipfian",
            YcsbKind::C => "YCSB C: 100% read, Zipfian",
            YcsbKind::D => "YCSB D: 95% read latest, 5% insert",
            YcsbKind::E => "YCSB E: 95% short scan (1-100), 5% insert, Zipfian",
            YcsbKind::F => "YCSB F: 50% read, 50% read-modify-write, Zipfian",
        }
    }

    /// Proportions of (read, update, insert, scan, read-modify-write).
    fn mix(self) -> [f64; 5] {
        match self {
            YcsbKind::A => [0.5, 0.5, 0.0, 0.0, 0.0],
            YcsbKind::B => [0.95, 0.05, 0.0, 0.0, 0.0],
            YcsbKind::C => [1.0, 0.0, 0.0, 0.0, 0.0],
            YcsbKind::D => [0.95, 0.0, 0.05, 0.0, 0.0],
            YcsbKind::E => [0.0, 0.0, 0.05, 0.95, 0.0],
            YcsbKind::F => [0.5, 0.0, 0.0, 0.0, 0.5],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "reads",
            Op::Update => "updates",
            Op::Insert => "inserts",
            Op::Scan => "scans",
            Op::ReadModifyWrite => "rmws",
        }
    }
}

const TABLE: usize = 0;
/// YCSB's default `maxscanlength`.
const MAX_SCAN: u64 = 100;
const VERIFY_MAX: u64 = 200_000;

/// Indices of committed inserts: reads choose below `prefix`, the first index whose insert
/// has not committed yet (YCSB's acknowledged counter).
#[derive(Debug)]
struct Acked {
    prefix: AtomicU64,
    done: Mutex<BTreeSet<u64>>,
}

impl Acked {
    fn ack(&self, index: u64) {
        let mut done = self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        done.insert(index);
        let mut p = self.prefix.load(Ordering::Acquire);
        while done.remove(&p) {
            p += 1;
        }
        self.prefix.store(p, Ordering::Release);
    }
}

pub(super) struct Ycsb {
    kind: YcsbKind,
    records: u64,
    value_size: usize,
    distribution: Distribution,
    theta: f64,
    seed: u64,
    zipf: Zipfian,
    next_insert: AtomicU64,
    acked: Acked,
}

impl Ycsb {
    pub(super) fn new(kind: YcsbKind, p: &WorkloadParams) -> Self {
        let records = p.scale.max(1);
        Ycsb {
            kind,
            records,
            value_size: p.value_size,
            distribution: p.distribution,
            theta: p.theta,
            seed: p.seed,
            zipf: Zipfian::new(records, p.theta),
            next_insert: AtomicU64::new(records),
            acked: Acked { prefix: AtomicU64::new(records), done: Mutex::new(BTreeSet::new()) },
        }
    }

    fn distribution_name(&self) -> String {
        match (self.distribution, self.kind) {
            (Distribution::Uniform, _) => "uniform".into(),
            (Distribution::Zipfian, YcsbKind::D) => format!("latest (zipfian θ={})", self.theta),
            (Distribution::Zipfian, _) => format!("zipfian θ={}", self.theta),
        }
    }
}

impl Workload for Ycsb {
    fn tables(&self) -> Vec<&'static str> {
        vec!["usertable"]
    }

    fn params(&self) -> BTreeMap<String, String> {
        let [r, u, i, s, m] = self.kind.mix();
        BTreeMap::from([
            ("record_count".into(), self.records.to_string()),
            ("value_bytes".into(), self.value_size.to_string()),
            ("key_bytes".into(), "8".into()),
            ("distribution".into(), self.distribution_name()),
            ("mix".into(), format!("read {r} update {u} insert {i} scan {s} rmw {m}")),
            ("ops_per_txn".into(), "1".into()),
            ("max_scan_length".into(), MAX_SCAN.to_string()),
        ])
    }

    fn loaded_bytes(&self) -> u64 {
        self.records * (self.value_size as u64 + 8)
    }

    fn ops_per_txn(&self) -> u64 {
        1
    }

    fn bytes_per_op(&self) -> u64 {
        // Inserts are 5 % of the operations of D and E: size for 1 in 16.
        if self.kind.mix()[2] > 0.0 { (self.value_size as u64 + 8) / 16 + 1 } else { 0 }
    }

    fn load(&self, subject: &dyn Subject) -> Result<(), OpError> {
        load_records(subject, TABLE, 0..self.records, self.value_size)
    }

    fn worker(&self, index: usize) -> Box<dyn Worker + '_> {
        Box::new(YcsbWorker {
            w: self,
            rng: Rng::new(self.seed, 1000 + index as u64),
            zipf: self.zipf.clone(),
            op: Op::Read,
            index: 0,
            scan_len: 0,
            version: 0,
            buf: Vec::with_capacity(self.value_size),
            value: Vec::with_capacity(self.value_size),
            attempt_problems: Vec::new(),
            attempt_rows: 0,
            report: WorkerReport { thread: index, ..WorkerReport::default() },
        })
    }

    fn check(
        &self,
        subject: &dyn Subject,
        reports: &[WorkerReport],
    ) -> Result<Vec<Check>, OpError> {
        let sum = |name: &str| reports.iter().map(|r| r.get(name)).sum::<u64>();
        let inserts = sum("inserts");
        let mut checks = vec![problems_check(
            "reads, updates and scans found the loaded records, values well-formed",
            reports,
        )];
        let expected = self.records + inserts;
        let count = count_records(subject, TABLE)?;
        checks.push(Check::new(
            "record count",
            count == expected,
            format!(
                "{count} records, expected {expected} ({} loaded + {inserts} inserted)",
                self.records
            ),
        ));
        let issued = self.next_insert.load(Ordering::Acquire) - self.records;
        checks.push(Check::new(
            "every insert acknowledged",
            issued == inserts && self.acked.prefix.load(Ordering::Acquire) == expected,
            format!("{issued} insert indices issued, {inserts} committed"),
        ));
        let step = expected.div_ceil(VERIFY_MAX).max(1);
        let (checked, wrong, ex) = verify_records(
            subject,
            TABLE,
            &mut (0..expected).step_by(step as usize).map(|i| (i, true)),
            self.value_size,
        )?;
        checks.push(Check::new(
            "loaded and inserted records present",
            wrong == 0,
            format!("{checked} read back, {wrong} wrong {ex:?}"),
        ));
        let ops: Vec<String> = [Op::Read, Op::Update, Op::Insert, Op::Scan, Op::ReadModifyWrite]
            .iter()
            .map(|o| format!("{} {}", sum(o.name()), o.name()))
            .collect();
        checks.push(Check::new(
            "operation mix",
            true,
            format!("{} (scans returned {} rows)", ops.join(", "), sum("scan_rows")),
        ));
        Ok(checks)
    }
}

struct YcsbWorker<'a> {
    w: &'a Ycsb,
    rng: Rng,
    zipf: Zipfian,
    op: Op,
    index: u64,
    scan_len: u64,
    version: u64,
    buf: Vec<u8>,
    value: Vec<u8>,
    attempt_problems: Vec<String>,
    attempt_rows: u64,
    report: WorkerReport,
}

impl YcsbWorker<'_> {
    fn choose(&mut self) -> u64 {
        let n = self.w.acked.prefix.load(Ordering::Acquire);
        match (self.w.distribution, self.w.kind) {
            (Distribution::Uniform, _) => self.rng.below(n),
            (Distribution::Zipfian, YcsbKind::D) => n - 1 - self.zipf.next(&mut self.rng, n),
            (Distribution::Zipfian, _) => self.zipf.next(&mut self.rng, n),
        }
    }
}

impl Worker for YcsbWorker<'_> {
    fn plan(&mut self) -> bool {
        let [r, u, i, s, _] = self.w.kind.mix();
        let x = self.rng.unit();
        self.op = if x < r {
            Op::Read
        } else if x < r + u {
            Op::Update
        } else if x < r + u + i {
            Op::Insert
        } else if x < r + u + i + s {
            Op::Scan
        } else {
            Op::ReadModifyWrite
        };
        self.version += 1;
        self.index = match self.op {
            Op::Insert => self.w.next_insert.fetch_add(1, Ordering::AcqRel),
            _ => self.choose(),
        };
        if self.op == Op::Scan {
            self.scan_len = 1 + self.rng.below(MAX_SCAN);
        }
        true
    }

    fn execute(&mut self, session: &mut dyn Session) -> Result<u64, OpError> {
        let (op, index, size, version, scan_len) =
            (self.op, self.index, self.w.value_size, self.version, self.scan_len);
        let key = key_of(index);
        let buf = &mut self.buf;
        let value = &mut self.value;
        let problems = &mut self.attempt_problems;
        let rows = &mut self.attempt_rows;
        let kind = match op {
            Op::Read | Op::Scan => TxnKind::ReadOnly,
            _ => TxnKind::ReadWrite,
        };
        session.run(kind, &mut |ops| {
            problems.clear();
            *rows = 0;
            match op {
                Op::Read | Op::ReadModifyWrite => {
                    if !ops.get(TABLE, key, buf)? {
                        problems.push(format!("read of record {index} missed"));
                        return Ok(());
                    }
                    if !value_matches(key, buf, size) {
                        problems.push(format!("record {index}: malformed value"));
                    }
                    if op == Op::ReadModifyWrite {
                        fill_value(value, key, version, size);
                        if !ops.update(TABLE, key, value)? {
                            problems.push(format!("rmw of record {index} found no key"));
                        }
                    }
                }
                Op::Update => {
                    fill_value(value, key, version, size);
                    if !ops.update(TABLE, key, value)? {
                        problems.push(format!("update of record {index} found no key"));
                    }
                }
                Op::Insert => {
                    fill_value(value, key, version, size);
                    if !ops.insert(TABLE, key, value)? {
                        problems.push(format!("insert of record {index} found the key present"));
                    }
                }
                Op::Scan => {
                    let mut prev: Option<u64> = None;
                    let mut bad = None;
                    let n = ops.scan(TABLE, key, scan_len as usize, &mut |k, v| {
                        let ordered = match prev {
                            None => k == key,
                            Some(p) => k > p,
                        };
                        if bad.is_none() && (!ordered || !value_matches(k, v, size)) {
                            bad = Some(k);
                        }
                        prev = Some(k);
                    })?;
                    *rows = n as u64;
                    if n == 0 {
                        problems.push(format!("scan from record {index} returned nothing"));
                    } else if n as u64 > scan_len {
                        problems.push(format!("scan returned {n} rows, limit {scan_len}"));
                    }
                    if let Some(k) = bad {
                        problems.push(format!(
                            "scan from record {index}: key {k:#x} out of order or malformed"
                        ));
                    }
                }
            }
            Ok(())
        })?;
        Ok(1)
    }

    fn committed(&mut self) {
        self.report.add(self.op.name(), 1);
        self.report.add("ops", 1);
        if self.op == Op::Scan {
            self.report.add("scan_rows", self.attempt_rows);
        }
        if self.op == Op::Insert {
            self.w.acked.ack(self.index);
        }
        for p in self.attempt_problems.drain(..) {
            self.report.problem(p);
        }
    }

    fn report(&self) -> WorkerReport {
        self.report.clone()
    }
}
