//! TPC-B on the OLTP layer.
//!
//! Tables (TPC-B's four, records of about 100 bytes, history about 50):
//! `branch(bid, bbalance, filler)`, `teller(tid, bid, tbalance, filler)`,
//! `account(aid, bid, abalance, filler)`, `history(thread, seq, tid, bid, aid, delta, mtime,
//! filler)`. Scale: `branches`, with 10 tellers and `accounts_per_branch` (standard: 100 000)
//! accounts per branch; teller `tid` belongs to branch `tid / 10`, account `aid` to branch
//! `aid / accounts_per_branch`; every balance starts at 0. History has no key in TPC-B; here it
//! is keyed by (worker thread, per-thread sequence), so inserts never collide.
//!
//! The one transaction ([`transaction`]): a random teller (uniform), its branch, an account of
//! that branch (85 %) or of another branch chosen uniformly (15 %, when there are several), and
//! a delta uniform in ±999 999: add the delta to the account and read its new balance, add it
//! to the teller and to the branch, insert a history row.
//!
//! Consistency after the run ([`Tpcb::check`]): the sums of account, teller and branch
//! balances and of history deltas are equal, and equal to the deltas the workers report
//! committed; each branch's balance is the sum of its tellers'; history holds one row per
//! committed transaction; accounts, tellers and branches keep their counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite::Value;

use super::{
    ColType, OltpSession, OltpSubject, OltpWorker, OltpWorkload, Range, Row, Schema, TableDef,
    run_retrying,
};
use crate::keys::Rng;
use crate::subject::{OpError, TxnKind};
use crate::workload::{Check, WorkerReport, WorkloadParams, problems_check};

/// One line for `--list`.
pub const DESCRIPTION: &str = "TPC-B: add a delta to an account (read it back), its teller and \
                               branch, insert a history row; scale --branches (10 tellers and \
                               --accounts-per-branch, default 100000, accounts per branch)";

/// Tellers per branch.
pub const TELLERS_PER_BRANCH: i64 = 10;

/// Table ids.
pub const BRANCH: usize = 0;
/// Teller table.
pub const TELLER: usize = 1;
/// Account table.
pub const ACCOUNT: usize = 2;
/// History table.
pub const HISTORY: usize = 3;

/// Column positions.
const B_BALANCE: usize = 1;
const T_BID: usize = 1;
const T_BALANCE: usize = 2;
const A_BALANCE: usize = 2;
const H_DELTA: usize = 5;

/// Most worker threads (history keys give the thread 12 bits).
const MAX_THREADS: usize = 1 << 12;

/// The scale of a TPC-B run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TpcbScale {
    /// Branches (TPC-B's scale factor).
    pub branches: u32,
    /// Accounts per branch (the standard's 100 000; smaller for tests).
    pub accounts_per_branch: u32,
}

impl Default for TpcbScale {
    fn default() -> Self {
        TpcbScale { branches: 1, accounts_per_branch: 100_000 }
    }
}

impl TpcbScale {
    fn tellers(self) -> i64 {
        i64::from(self.branches) * TELLERS_PER_BRANCH
    }

    fn accounts(self) -> i64 {
        i64::from(self.branches) * i64::from(self.accounts_per_branch)
    }
}

/// A deliberately broken transaction, for the check's self-test.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// The real transaction.
    #[default]
    None,
    /// Skips the teller update.
    SkipTeller,
}

fn filler(n: usize) -> Value {
    Value::Str("x".repeat(n))
}

/// The TPC-B schema.
pub fn schema() -> Schema {
    let s = Schema::new(vec![
        TableDef::new("branch")
            .column("bid", ColType::I64)
            .column("bbalance", ColType::I64)
            .column("filler", ColType::Str)
            .key(&[("bid", 32)]),
        TableDef::new("teller")
            .column("tid", ColType::I64)
            .column("bid", ColType::I64)
            .column("tbalance", ColType::I64)
            .column("filler", ColType::Str)
            .key(&[("tid", 36)]),
        TableDef::new("account")
            .column("aid", ColType::I64)
            .column("bid", ColType::I64)
            .column("abalance", ColType::I64)
            .column("filler", ColType::Str)
            .key(&[("aid", 48)]),
        TableDef::new("history")
            .column("thread", ColType::I64)
            .column("seq", ColType::I64)
            .column("tid", ColType::I64)
            .column("bid", ColType::I64)
            .column("aid", ColType::I64)
            .column("delta", ColType::I64)
            .column("mtime", ColType::I64)
            .column("filler", ColType::Str)
            .key(&[("thread", 12), ("seq", 48)]),
    ]);
    // The definition above is constant and valid (a unit test opens it).
    s.unwrap_or_else(|e| unreachable!("TPC-B schema: {e}"))
}

/// The branch row `bid` as loaded.
pub fn branch_row(bid: i64) -> Row {
    vec![Value::I64(bid), Value::I64(0), filler(84)]
}

/// The teller row `tid` as loaded.
pub fn teller_row(tid: i64) -> Row {
    vec![Value::I64(tid), Value::I64(tid / TELLERS_PER_BRANCH), Value::I64(0), filler(76)]
}

/// The account row `aid` as loaded.
pub fn account_row(aid: i64, scale: TpcbScale) -> Row {
    let bid = aid / i64::from(scale.accounts_per_branch.max(1));
    vec![Value::I64(aid), Value::I64(bid), Value::I64(0), filler(76)]
}

/// The inputs of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TpcbInput {
    /// Account.
    pub aid: i64,
    /// Teller.
    pub tid: i64,
    /// The teller's branch.
    pub bid: i64,
    /// Amount.
    pub delta: i64,
}

/// Draws the inputs of one transaction.
pub fn plan(rng: &mut Rng, scale: TpcbScale) -> TpcbInput {
    let branches = u64::from(scale.branches.max(1));
    let tid = rng.below(branches * TELLERS_PER_BRANCH as u64) as i64;
    let bid = tid / TELLERS_PER_BRANCH;
    let mut account_branch = bid;
    if branches > 1 && rng.below(100) < 15 {
        let other = rng.below(branches - 1) as i64;
        account_branch = if other >= bid { other + 1 } else { other };
    }
    let apb = u64::from(scale.accounts_per_branch.max(1));
    let aid = account_branch * apb as i64 + rng.below(apb) as i64;
    let delta = rng.below(1_999_999) as i64 - 999_999;
    TpcbInput { aid, tid, bid, delta }
}

/// The TPC-B transaction: returns the account's new balance. `thread` and `seq` key the
/// history row; `mtime` is its timestamp.
pub fn transaction(
    ops: &mut dyn super::OltpOps,
    input: &TpcbInput,
    thread: i64,
    seq: i64,
    mtime: i64,
    fault: Fault,
) -> Result<i64, OpError> {
    let missing = |what: &str, id: i64| OpError::Engine(format!("TPC-B: {what} {id} missing"));
    let balance = ops
        .add(ACCOUNT, &[input.aid], A_BALANCE, input.delta)?
        .ok_or_else(|| missing("account", input.aid))?;
    if fault != Fault::SkipTeller {
        ops.add(TELLER, &[input.tid], T_BALANCE, input.delta)?
            .ok_or_else(|| missing("teller", input.tid))?;
    }
    ops.add(BRANCH, &[input.bid], B_BALANCE, input.delta)?
        .ok_or_else(|| missing("branch", input.bid))?;
    let row = vec![
        Value::I64(thread),
        Value::I64(seq),
        Value::I64(input.tid),
        Value::I64(input.bid),
        Value::I64(input.aid),
        Value::I64(input.delta),
        Value::I64(mtime),
        filler(10),
    ];
    if !ops.insert(HISTORY, row)? {
        return Err(OpError::Engine(format!("TPC-B: history ({thread}, {seq}) exists")));
    }
    Ok(balance)
}

/// TPC-B for one point.
#[derive(Debug)]
pub struct Tpcb {
    scale: TpcbScale,
    schema: Arc<Schema>,
    seed: u64,
    fault: Fault,
}

impl Tpcb {
    /// TPC-B at `scale` with the point's parameters (seed).
    pub fn new(scale: TpcbScale, p: &WorkloadParams) -> Self {
        let scale = TpcbScale {
            branches: scale.branches.max(1),
            accounts_per_branch: scale.accounts_per_branch.max(1),
        };
        Tpcb { scale, schema: Arc::new(schema()), seed: p.seed, fault: Fault::None }
    }

    /// The same workload with a broken transaction (tests of the consistency check).
    #[doc(hidden)]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }
}

const LOAD_BATCH: i64 = 1000;

fn load_rows(
    session: &mut dyn OltpSession,
    table: usize,
    n: i64,
    row: &dyn Fn(i64) -> Row,
) -> Result<(), OpError> {
    let mut start = 0;
    while start < n {
        let end = (start + LOAD_BATCH).min(n);
        run_retrying(session, TxnKind::ReadWrite, &mut |ops| {
            for i in start..end {
                if !ops.insert(table, row(i))? {
                    return Err(OpError::Engine(format!("load: row {i} of table {table} exists")));
                }
            }
            Ok(())
        })?;
        start = end;
    }
    Ok(())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

impl OltpWorkload for Tpcb {
    fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("branches".into(), self.scale.branches.to_string()),
            ("tellers".into(), self.scale.tellers().to_string()),
            ("accounts".into(), self.scale.accounts().to_string()),
            ("seed".into(), self.seed.to_string()),
        ])
    }

    fn txn_types(&self) -> Vec<&'static str> {
        vec!["tpcb"]
    }

    fn loaded_bytes(&self) -> u64 {
        (self.scale.accounts() + self.scale.tellers() + i64::from(self.scale.branches)) as u64 * 160
    }

    fn ops_per_txn(&self) -> u64 {
        4
    }

    fn bytes_per_txn(&self) -> u64 {
        // A history row plus three rewritten rows (engines that copy on update).
        600
    }

    fn load(&self, subject: &dyn OltpSubject) -> Result<(), OpError> {
        let mut s = subject.session()?;
        let scale = self.scale;
        load_rows(s.as_mut(), BRANCH, i64::from(scale.branches), &branch_row)?;
        load_rows(s.as_mut(), TELLER, scale.tellers(), &teller_row)?;
        load_rows(s.as_mut(), ACCOUNT, scale.accounts(), &|aid| account_row(aid, scale))
    }

    fn worker(&self, index: usize) -> Box<dyn OltpWorker + '_> {
        Box::new(TpcbWorker {
            w: self,
            thread: index as i64,
            rng: Rng::new(self.seed, 5000 + index as u64),
            input: TpcbInput::default(),
            seq: 0,
            report: WorkerReport { thread: index, ..WorkerReport::default() },
        })
    }

    fn check(
        &self,
        subject: &dyn OltpSubject,
        reports: &[WorkerReport],
    ) -> Result<Vec<Check>, OpError> {
        let mut s = subject.session()?;
        let mut sums = [0i128; 4];
        let mut counts = [0u64; 4];
        let mut teller_by_branch: BTreeMap<i64, i128> = BTreeMap::new();
        let mut branch: BTreeMap<i64, i128> = BTreeMap::new();
        run_retrying(s.as_mut(), TxnKind::ReadOnly, &mut |ops| {
            sums = [0; 4];
            counts = [0; 4];
            teller_by_branch.clear();
            branch.clear();
            let mut bad = 0u64;
            for (t, col) in
                [(BRANCH, B_BALANCE), (TELLER, T_BALANCE), (ACCOUNT, A_BALANCE), (HISTORY, H_DELTA)]
            {
                ops.scan(t, &Range::all(), &mut |row| {
                    let v = row.get(col).and_then(Value::as_i64);
                    let Some(v) = v else {
                        bad += 1;
                        return;
                    };
                    sums[t] += i128::from(v);
                    counts[t] += 1;
                    let id = row.first().and_then(Value::as_i64).unwrap_or(-1);
                    if t == TELLER {
                        let bid = row.get(T_BID).and_then(Value::as_i64).unwrap_or(-1);
                        *teller_by_branch.entry(bid).or_default() += i128::from(v);
                    } else if t == BRANCH {
                        branch.insert(id, i128::from(v));
                    }
                })?;
            }
            if bad > 0 {
                return Err(OpError::Engine(format!("{bad} rows without an i64 balance")));
            }
            Ok(())
        })?;
        let txns: u64 = reports.iter().map(|r| r.get("txns")).sum();
        let committed: i128 = reports
            .iter()
            .map(|r| i128::from(r.get("delta_plus")) - i128::from(r.get("delta_minus")))
            .sum();
        let [b, t, a, h] = sums;
        let mut out = vec![Check::new(
            "balances: accounts = tellers = branches = history = committed deltas",
            a == t && t == b && b == h && h == committed,
            format!("accounts {a}, tellers {t}, branches {b}, history {h}, committed {committed}"),
        )];
        let wrong: Vec<String> = branch
            .iter()
            .filter(|(bid, bal)| teller_by_branch.get(bid).copied().unwrap_or(0) != **bal)
            .take(3)
            .map(|(bid, bal)| {
                format!(
                    "branch {bid}: {bal} but its tellers {}",
                    teller_by_branch.get(bid).copied().unwrap_or(0)
                )
            })
            .collect();
        out.push(Check::new(
            "each branch balance = sum of its tellers'",
            wrong.is_empty(),
            if wrong.is_empty() { format!("{} branches", branch.len()) } else { wrong.join("; ") },
        ));
        out.push(Check::new(
            "history: one row per committed transaction",
            counts[HISTORY] == txns,
            format!("{} rows, {txns} committed", counts[HISTORY]),
        ));
        let sc = self.scale;
        out.push(Check::new(
            "branches, tellers, accounts keep their counts",
            counts[BRANCH] == u64::from(sc.branches)
                && counts[TELLER] == sc.tellers() as u64
                && counts[ACCOUNT] == sc.accounts() as u64,
            format!(
                "{} branches, {} tellers, {} accounts",
                counts[BRANCH], counts[TELLER], counts[ACCOUNT]
            ),
        ));
        out.push(problems_check("no worker saw a problem", reports));
        Ok(out)
    }
}

struct TpcbWorker<'a> {
    w: &'a Tpcb,
    thread: i64,
    rng: Rng,
    input: TpcbInput,
    seq: i64,
    report: WorkerReport,
}

impl OltpWorker for TpcbWorker<'_> {
    fn plan(&mut self) -> Option<usize> {
        if self.thread as usize >= MAX_THREADS {
            return None;
        }
        self.input = plan(&mut self.rng, self.w.scale);
        Some(0)
    }

    fn execute(&mut self, session: &mut dyn OltpSession) -> Result<u64, OpError> {
        let (input, thread, seq, fault) = (self.input, self.thread, self.seq, self.w.fault);
        let mtime = now_us();
        session.run(TxnKind::ReadWrite, &mut |ops| {
            transaction(ops, &input, thread, seq, mtime, fault).map(drop)
        })?;
        Ok(4)
    }

    fn committed(&mut self) {
        self.seq += 1;
        self.report.add("txns", 1);
        if self.input.delta >= 0 {
            self.report.add("delta_plus", self.input.delta as u64);
        } else {
            self.report.add("delta_minus", self.input.delta.unsigned_abs());
        }
    }

    fn report(&self) -> WorkerReport {
        self.report.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::{self, OltpOps};
    use crate::subject::SubjectSetup;
    use ferrite::pmem::internals::testing::TestDir;

    use crate::oltp::testing::{engines, params};

    fn setup(schema: &Schema) -> SubjectSetup {
        crate::oltp::testing::setup(schema, 1 << 20)
    }

    #[test]
    fn schema_positions_match_names() {
        let s = schema();
        assert_eq!(s.tables[BRANCH].position("bbalance"), Some(B_BALANCE));
        assert_eq!(s.tables[TELLER].position("bid"), Some(T_BID));
        assert_eq!(s.tables[TELLER].position("tbalance"), Some(T_BALANCE));
        assert_eq!(s.tables[ACCOUNT].position("abalance"), Some(A_BALANCE));
        assert_eq!(s.tables[HISTORY].position("delta"), Some(H_DELTA));
        for (t, name) in [(BRANCH, "branch"), (TELLER, "teller"), (ACCOUNT, "account")] {
            assert_eq!(s.tables[t].name, name);
        }
    }

    #[test]
    fn generator_rows_by_hand() {
        // 2 branches of 5 accounts: account 7 is in branch 1, teller 12 in branch 1.
        let sc = TpcbScale { branches: 2, accounts_per_branch: 5 };
        assert_eq!((sc.tellers(), sc.accounts()), (20, 10));
        let a = account_row(7, sc);
        assert_eq!(a[..3], [Value::I64(7), Value::I64(1), Value::I64(0)]);
        assert_eq!(account_row(4, sc)[1], Value::I64(0));
        assert_eq!(teller_row(12)[..3], [Value::I64(12), Value::I64(1), Value::I64(0)]);
        assert_eq!(teller_row(9)[1], Value::I64(0));
        assert_eq!(branch_row(1)[..2], [Value::I64(1), Value::I64(0)]);
        // Record sizes near TPC-B's 100 bytes: three 8-byte integers and 76 filler bytes.
        assert!(matches!(&a[3], Value::Str(s) if s.len() == 76));
        let sch = schema();
        for (t, row) in [(BRANCH, branch_row(0)), (TELLER, teller_row(0)), (ACCOUNT, a)] {
            sch.tables[t].check_row(&row).unwrap();
        }
    }

    #[test]
    fn inputs_follow_the_rules() {
        let seed = 11;
        println!("seed {seed}");
        let sc = TpcbScale { branches: 4, accounts_per_branch: 50 };
        let mut rng = Rng::new(seed, 0);
        let (mut remote, n) = (0, 20_000);
        for _ in 0..n {
            let i = plan(&mut rng, sc);
            assert!((0..40).contains(&i.tid));
            assert_eq!(i.bid, i.tid / 10, "the teller's branch");
            assert!((0..200).contains(&i.aid));
            assert!((-999_999..=999_999).contains(&i.delta));
            if i.aid / 50 != i.bid {
                remote += 1;
            }
        }
        // 15 % remote accounts, within a wide margin (deterministic for the seed).
        assert!((2_400..3_600).contains(&remote), "{remote} of {n}");
        // One branch: always local.
        let one = TpcbScale { branches: 1, accounts_per_branch: 50 };
        for _ in 0..1000 {
            let i = plan(&mut rng, one);
            assert_eq!((i.bid, i.aid / 50), (0, 0));
        }
        // The same seed gives the same inputs.
        assert_eq!(plan(&mut Rng::new(seed, 3), sc), plan(&mut Rng::new(seed, 3), sc));
    }

    /// Two transactions by hand on every engine: balances move by the deltas, history grows.
    #[test]
    fn transaction_by_hand_on_every_engine() {
        let dir = TestDir::new("bench-tpcb-txn");
        let sc = TpcbScale { branches: 2, accounts_per_branch: 5 };
        let w = Tpcb::new(sc, &params(1));
        for engine in engines() {
            let subject =
                oltp::open(engine, &dir.path().join(engine.name()), &setup(&w.schema), &w.schema)
                    .unwrap_or_else(|e| panic!("{engine}: {e}"));
            w.load(subject.as_ref()).unwrap();
            let mut s = subject.session().unwrap();
            let mut balances = Vec::new();
            for (seq, input) in [
                TpcbInput { aid: 3, tid: 12, bid: 1, delta: -5 },
                TpcbInput { aid: 3, tid: 2, bid: 0, delta: 7 },
            ]
            .iter()
            .enumerate()
            {
                s.run(TxnKind::ReadWrite, &mut |ops| {
                    balances.push(transaction(ops, input, 0, seq as i64, 0, Fault::None)?);
                    Ok(())
                })
                .unwrap();
            }
            assert_eq!(balances, [-5, 2], "{engine}");
            let mut row = Row::new();
            s.run(TxnKind::ReadOnly, &mut |ops: &mut dyn OltpOps| {
                let mut get = |t: usize, k: &[i64], col: usize| -> Result<i64, OpError> {
                    assert!(ops.get(t, k, &mut row)?, "{engine}: {t} {k:?}");
                    Ok(row[col].as_i64().unwrap())
                };
                assert_eq!(get(ACCOUNT, &[3], A_BALANCE)?, 2);
                assert_eq!(get(TELLER, &[12], T_BALANCE)?, -5);
                assert_eq!(get(TELLER, &[2], T_BALANCE)?, 7);
                assert_eq!(get(BRANCH, &[1], B_BALANCE)?, -5);
                assert_eq!(get(BRANCH, &[0], B_BALANCE)?, 7);
                assert_eq!(get(HISTORY, &[0, 1], H_DELTA)?, 7);
                let mut seen = Vec::new();
                ops.scan(HISTORY, &Range::primary(vec![Value::I64(0)]), &mut |r| {
                    seen.push((r[1].as_i64().unwrap(), r[4].as_i64().unwrap()));
                })?;
                assert_eq!(seen, [(0, 3), (1, 3)]);
                assert!(!ops.get(ACCOUNT, &[10], &mut row)?, "no account 10");
                Ok(())
            })
            .unwrap();
            // A missing account fails the transaction and leaves nothing behind.
            let r = s.run(TxnKind::ReadWrite, &mut |ops| {
                let i = TpcbInput { aid: 9, tid: 0, bid: 0, delta: 1 };
                transaction(ops, &i, 0, 2, 0, Fault::None).map(drop)?;
                transaction(ops, &TpcbInput { aid: 10, ..i }, 0, 3, 0, Fault::None).map(drop)
            });
            assert!(r.is_err(), "{engine}");
            drop(s);
            let reports = [WorkerReport {
                counts: BTreeMap::from([("txns", 2), ("delta_plus", 7), ("delta_minus", 5)]),
                ..WorkerReport::default()
            }];
            let checks = w.check(subject.as_ref(), &reports).unwrap();
            assert!(checks.iter().all(|c| c.ok), "{engine}: {checks:?}");
        }
    }

    /// The check catches a transaction that skips the teller update, on every engine.
    #[test]
    fn check_fails_on_a_broken_transaction() {
        let dir = TestDir::new("bench-tpcb-broken");
        let sc = TpcbScale { branches: 2, accounts_per_branch: 20 };
        for fault in [Fault::None, Fault::SkipTeller] {
            let w = Tpcb::new(sc, &params(3)).with_fault(fault);
            for engine in engines() {
                let path = dir.path().join(format!("{engine}-{fault:?}"));
                let subject = oltp::open(engine, &path, &setup(&w.schema), &w.schema).unwrap();
                w.load(subject.as_ref()).unwrap();
                let mut s = subject.session().unwrap();
                let mut worker = w.worker(0);
                for _ in 0..50 {
                    assert_eq!(worker.plan(), Some(0));
                    worker.execute(s.as_mut()).unwrap();
                    worker.committed();
                }
                drop(s);
                let checks = w.check(subject.as_ref(), &[worker.report()]).unwrap();
                let failed: Vec<&str> =
                    checks.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect();
                match fault {
                    Fault::None => assert!(failed.is_empty(), "{engine}: {checks:?}"),
                    Fault::SkipTeller => {
                        assert!(failed.len() == 2, "{engine}: {checks:?}");
                        assert!(failed[0].starts_with("balances"), "{failed:?}");
                        assert!(failed[1].starts_with("each branch"), "{failed:?}");
                    }
                }
            }
        }
    }
}
