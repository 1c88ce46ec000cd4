//! TPC-C (specification v5.11, in substance) on the OLTP layer.
//!
//! # Tables and keys
//! The nine tables with the specification's columns, each primary key packed into 63 bits
//! (`w` 12 bits: up to 4095 warehouses; `d` 4; `c` 12; `o` 32; `ol_number` 4; `i` 20):
//! `warehouse (w)`, `district (w, d)`, `customer (w, d, c)`, `new_order (w, d, o)`,
//! `orders (w, d, o)`, `order_line (w, d, o, ol_number)`, `item (i)`, `stock (w, i)`.
//! `history` has no key in the specification; here it is keyed by (`h_thread` 12 bits,
//! `h_seq` 48 bits): thread 0 is the loader, worker `i` is thread `i + 1`, and a worker
//! continues its sequence after the largest one stored (so a restarted run never collides).
//! Secondary indexes: `customer_by_name (c_w_id, c_d_id, c_last, c_first)` and
//! `orders_by_customer (o_w_id, o_d_id, o_c_id, o_id)`, both non-unique multi-column
//! indexes (strings included), which the Ferrite API and SQLite have natively.
//!
//! Money is `i64` cents (so consistency condition 1 is exact), rates (`*_tax`,
//! `c_discount`) are `f64`, dates are `i64` microseconds since the epoch. SQL NULL does not
//! exist in the layer: a null `o_carrier_id` or `ol_delivery_d` is stored as 0 (real values
//! are 1..=10 and positive dates).
//!
//! # Scale
//! [`TpccScale`]: warehouses (1–4 on the project's machines) and, for tests and the smoke
//! pass only, smaller item and customer counts (orders per district = customers per
//! district; the last 30 % of them undelivered, the specification's 900 of 3000). With fewer
//! than 1000 customers per district, last names are drawn from the numbers `0..customers`
//! (all of which exist), so a by-name lookup always finds someone.
//!
//! # Invariants
//! - Population ([`TpccWorkload::load`]) is a pure function of the seed and the scale; its
//!   NURand constants too ([`NurandC`]): `c_last` at run time uses a C that differs from the
//!   load's by 65..=119 (not 96 or 112), the specification's rule 2.1.6.1.
//! - [`transaction`] never commits by itself: it returns [`Outcome::RolledBack`] for the
//!   New-Order whose last item is unused (1 %), and the caller rolls back ([`run_txn`] does);
//!   that rollback is expected, counted apart (`rolled_back`), never an abort.
//! - [`consistency`] checks conditions 1–4 (specification 3.3.2.1–3.3.2.4) on any subject;
//!   the workload's check adds row counts against what the workers committed.
//!
//! # Concurrency
//! Worker `i` has home warehouse `i mod W + 1` and Stock-Level district `(i / W) mod 10 + 1`;
//! workers of one warehouse conflict (district counters, Delivery) and the engines resolve it
//! (retryable errors, retried by the runner). No keying or think time: this measures storage.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use ferrite::Value;

use super::{
    ColType, OltpOps, OltpSession, OltpSubject, OltpWorker, OltpWorkload, Range, Row, Schema,
    TableDef, run_retrying,
};
use crate::keys::Rng;
use crate::subject::{EngineId, OpError, TxnKind};
use crate::workload::{Check, WorkerReport, WorkloadParams, problems_check};

/// One line for `--list`.
pub const DESCRIPTION: &str = "TPC-C: New-Order, Payment, Order-Status, Delivery, Stock-Level \
                               (45/43/4/4/4), NURand, remote warehouses, 1 % rolled-back \
                               New-Order, consistency conditions 1-4 checked; scale \
                               --warehouses (default 1); not on LMDB";

/// Table ids.
pub const WAREHOUSE: usize = 0;
/// District table.
pub const DISTRICT: usize = 1;
/// Customer table.
pub const CUSTOMER: usize = 2;
/// History table.
pub const HISTORY: usize = 3;
/// New-order table.
pub const NEW_ORDER: usize = 4;
/// Orders table.
pub const ORDERS: usize = 5;
/// Order-line table.
pub const ORDER_LINE: usize = 6;
/// Item table.
pub const ITEM: usize = 7;
/// Stock table.
pub const STOCK: usize = 8;

// Column positions (a unit test checks them against the names).
const W_NAME: usize = 1;
const W_TAX: usize = 7;
const W_YTD: usize = 8;
const D_NAME: usize = 2;
const D_TAX: usize = 8;
const D_YTD: usize = 9;
const D_NEXT_O_ID: usize = 10;
const C_ID: usize = 0;
#[cfg(test)]
const C_LAST: usize = 5;
const C_CREDIT: usize = 13;
const C_DISCOUNT: usize = 15;
const C_BALANCE: usize = 16;
const C_YTD_PAYMENT: usize = 17;
const C_PAYMENT_CNT: usize = 18;
const C_DELIVERY_CNT: usize = 19;
const C_DATA: usize = 20;
const NO_O_ID: usize = 0;
const O_ID: usize = 0;
const O_C_ID: usize = 3;
const O_CARRIER_ID: usize = 5;
const O_OL_CNT: usize = 6;
const OL_NUMBER: usize = 3;
const OL_I_ID: usize = 4;
const OL_DELIVERY_D: usize = 6;
const OL_AMOUNT: usize = 8;
const I_PRICE: usize = 3;
const I_DATA: usize = 4;
const S_QUANTITY: usize = 2;
const S_DIST_01: usize = 3;
const S_YTD: usize = 13;
const S_ORDER_CNT: usize = 14;
const S_REMOTE_CNT: usize = 15;
const S_DATA: usize = 16;

/// Index positions.
const CUSTOMER_BY_NAME: usize = 0;
const ORDERS_BY_CUSTOMER: usize = 0;

/// Districts per warehouse.
pub const DISTRICTS: i64 = 10;
/// Most warehouses (12 key bits).
pub const MAX_WAREHOUSES: u32 = 4095;
/// Most worker threads (history keys give the thread 12 bits; thread 0 is the loader).
const MAX_THREADS: usize = 4094;

/// The transaction types, in mix order.
pub const TXN_TYPES: [&str; 5] =
    ["new_order", "payment", "order_status", "delivery", "stock_level"];
/// Cumulative mix in percent (45/43/4/4/4).
const MIX: [u64; 5] = [45, 88, 92, 96, 100];
/// Report counts: committed transactions per type.
const DONE: [&str; 5] =
    ["txns_new_order", "txns_payment", "txns_order_status", "txns_delivery", "txns_stock_level"];

/// The scale of a TPC-C run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TpccScale {
    /// Warehouses (the specification's scale factor).
    pub warehouses: u32,
    /// Items, and stock rows per warehouse (specification: 100 000; smaller for tests).
    pub items: u32,
    /// Customers per district, and orders per district at load (specification: 3000).
    pub customers: u32,
}

impl Default for TpccScale {
    fn default() -> Self {
        TpccScale { warehouses: 1, items: 100_000, customers: 3000 }
    }
}

impl TpccScale {
    /// The same scale with every count at least 1 (customers at least 10) and warehouses
    /// within the key width.
    pub fn clamped(self) -> TpccScale {
        TpccScale {
            warehouses: self.warehouses.clamp(1, MAX_WAREHOUSES),
            items: self.items.clamp(1, (1 << 20) - 2),
            customers: self.customers.clamp(10, 4095),
        }
    }

    fn w(self) -> i64 {
        i64::from(self.warehouses)
    }

    fn items_i(self) -> i64 {
        i64::from(self.items)
    }

    fn c(self) -> i64 {
        i64::from(self.customers)
    }

    /// Orders per district loaded as undelivered (the specification's 900 of 3000).
    pub fn undelivered(self) -> i64 {
        self.c() * 3 / 10
    }

    /// The largest loaded order id that is delivered (the specification's 2100).
    fn last_delivered(self) -> i64 {
        self.c() - self.undelivered()
    }

    /// Customers (and loaded orders, and loaded history rows) in all.
    pub fn customers_total(self) -> i64 {
        self.w() * DISTRICTS * self.c()
    }

    /// Largest last-name number drawn (999, or fewer customers' worth).
    fn last_name_max(self) -> i64 {
        (self.c() - 1).min(999)
    }
}

/// A deliberately broken transaction, for the check's self-test.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// The real transactions.
    #[default]
    None,
    /// New-Order does not advance `d_next_o_id`.
    SkipDistrictUpdate,
    /// Payment does not add to `w_ytd`.
    SkipWarehouseYtd,
}

mod check;
mod population;
mod schema;
mod txn;

pub use check::*;
pub use population::*;
pub use schema::*;
pub use txn::*;

// ---------------------------------------------------------------------------------------
// The workload.

/// TPC-C for one point.
#[derive(Debug)]
pub struct TpccWorkload {
    scale: TpccScale,
    schema: Arc<Schema>,
    seed: u64,
    nc: NurandC,
    fault: Fault,
}

impl TpccWorkload {
    /// TPC-C at `scale` with the point's parameters (seed).
    pub fn new(scale: TpccScale, p: &WorkloadParams) -> Self {
        TpccWorkload {
            scale: scale.clamped(),
            schema: Arc::new(schema()),
            seed: p.seed,
            nc: NurandC::new(p.seed),
            fault: Fault::None,
        }
    }

    /// The same workload with broken transactions (tests of the consistency check).
    #[doc(hidden)]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// The scale (clamped).
    pub fn scale(&self) -> TpccScale {
        self.scale
    }
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Rows inserted per loading transaction (about).
const LOAD_BATCH: usize = 2000;

fn load_batch(session: &mut dyn OltpSession, rows: &[(usize, Row)]) -> Result<(), OpError> {
    run_retrying(session, TxnKind::ReadWrite, &mut |ops| {
        for (t, row) in rows {
            if !ops.insert(*t, row.clone())? {
                return Err(OpError::Engine(format!("load: a row of table {t} exists: {row:?}")));
            }
        }
        Ok(())
    })
}

/// Bytes of one warehouse's rows at the specification's sizes (stock ~330, customer ~650,
/// order line ~90, order ~70, history ~80; with key and index overhead), and an item (~90).
const WAREHOUSE_BYTES: u64 = 100 << 20;

impl OltpWorkload for TpccWorkload {
    fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("warehouses".into(), self.scale.warehouses.to_string()),
            ("items".into(), self.scale.items.to_string()),
            ("customers_per_district".into(), self.scale.customers.to_string()),
            (
                "nurand_c".into(),
                format!(
                    "c_last load {} run {}, c_id {}, ol_i_id {}",
                    self.nc.c_last_load, self.nc.c_last_run, self.nc.c_id, self.nc.ol_i_id
                ),
            ),
            ("seed".into(), self.seed.to_string()),
        ])
    }

    fn txn_types(&self) -> Vec<&'static str> {
        TXN_TYPES.to_vec()
    }

    fn loaded_bytes(&self) -> u64 {
        let sc = self.scale;
        let per_w = WAREHOUSE_BYTES * u64::from(sc.items) / 100_000 / 3
            + WAREHOUSE_BYTES * 2 / 3 * u64::from(sc.customers) / 3000;
        u64::from(sc.warehouses) * per_w + u64::from(sc.items) * 120
    }

    fn ops_per_txn(&self) -> u64 {
        // New-Order ~50 operations, Payment ~8, Delivery ~150: about 30 on average.
        30
    }

    fn bytes_per_txn(&self) -> u64 {
        // New-Order adds ~1.5 KB of rows and rewrites ~10 stock rows (copying engines).
        3000
    }

    fn load(&self, subject: &dyn OltpSubject) -> Result<(), OpError> {
        let mut s = subject.session()?;
        let sc = self.scale;
        let now = now_us();
        let mut batch: Vec<(usize, Row)> = Vec::with_capacity(LOAD_BATCH + 64);
        let mut push = |s: &mut dyn OltpSession, t: usize, row: Row| -> Result<(), OpError> {
            batch.push((t, row));
            if batch.len() >= LOAD_BATCH {
                load_batch(s, &batch)?;
                batch.clear();
            }
            Ok(())
        };
        for i in 1..=sc.items_i() {
            push(s.as_mut(), ITEM, item_row(self.seed, i))?;
        }
        for w in 1..=sc.w() {
            push(s.as_mut(), WAREHOUSE, warehouse_row(self.seed, w))?;
            for i in 1..=sc.items_i() {
                push(s.as_mut(), STOCK, stock_row(self.seed, w, i))?;
            }
            for d in 1..=DISTRICTS {
                push(s.as_mut(), DISTRICT, district_row(self.seed, sc, w, d))?;
                let p = district_population(self.seed, sc, &self.nc, w, d, now);
                for (t, rows) in [
                    (CUSTOMER, p.customers),
                    (HISTORY, p.history),
                    (ORDERS, p.orders),
                    (ORDER_LINE, p.order_lines),
                    (NEW_ORDER, p.new_orders),
                ] {
                    for row in rows {
                        push(s.as_mut(), t, row)?;
                    }
                }
            }
        }
        if !batch.is_empty() {
            load_batch(s.as_mut(), &batch)?;
        }
        Ok(())
    }

    fn worker(&self, index: usize) -> Box<dyn OltpWorker + '_> {
        Box::new(TpccWorker {
            w: self,
            thread: index as i64 + 1,
            planner: Planner::new(self.scale, self.nc, index),
            rng: Rng::new(self.seed, 9000 + index as u64),
            txn: TpccTxn::Delivery { w_id: 1, carrier_id: 1 },
            outcome: None,
            seq: None,
            report: WorkerReport { thread: index, ..WorkerReport::default() },
        })
    }

    fn check(
        &self,
        subject: &dyn OltpSubject,
        reports: &[WorkerReport],
    ) -> Result<Vec<Check>, OpError> {
        let (mut out, totals) = consistency_totals(subject, &self.scale)?;
        let sum = |name: &str| reports.iter().map(|r| r.get(name)).sum::<u64>();
        let loaded = self.scale.customers_total() as u64;
        let loaded_no = (self.scale.w() * DISTRICTS * self.scale.undelivered()) as u64;
        let (new_orders, delivered) = (sum("new_orders"), sum("delivered"));
        out.push(Check::new(
            "orders = loaded + committed New-Orders",
            totals.orders == loaded + new_orders,
            format!("{} orders; loaded {loaded}, committed {new_orders}", totals.orders),
        ));
        out.push(Check::new(
            "new_order rows = loaded undelivered + New-Orders - delivered",
            Some(totals.new_orders) == (loaded_no + new_orders).checked_sub(delivered),
            format!(
                "{} rows; loaded {loaded_no}, committed {new_orders}, delivered {delivered}",
                totals.new_orders
            ),
        ));
        let mut history = 0u64;
        let mut s = subject.session()?;
        run_retrying(s.as_mut(), TxnKind::ReadOnly, &mut |ops| {
            history = ops.scan(HISTORY, &Range::all(), &mut |_| {})? as u64;
            Ok(())
        })?;
        let payments = sum("payments");
        out.push(Check::new(
            "history = one row per customer + committed Payments",
            history == loaded + payments,
            format!("{history} rows; loaded {loaded}, payments {payments}"),
        ));
        let (txns, rolled) = (sum(DONE[0]), sum("rolled_back"));
        // 1 % is expected; more than 5 % (plus a few, for short runs) means New-Orders roll
        // back for another reason.
        out.push(Check::new(
            "expected New-Order rollbacks (about 1 %, counted apart from aborts)",
            rolled <= txns / 20 + 3,
            format!(
                "{rolled} of {txns} New-Orders rolled back ({:.2} %); {} deliveries skipped an \
                 empty district",
                if txns > 0 { 100.0 * rolled as f64 / txns as f64 } else { 0.0 },
                sum("delivery_skipped")
            ),
        ));
        out.push(problems_check("no worker saw a problem", reports));
        Ok(out)
    }
}

struct TpccWorker<'a> {
    w: &'a TpccWorkload,
    thread: i64,
    planner: Planner,
    rng: Rng,
    txn: TpccTxn,
    outcome: Option<Outcome>,
    seq: Option<i64>,
    report: WorkerReport,
}

impl TpccWorker<'_> {
    /// The next history sequence number of this thread: after the largest one stored.
    fn next_seq(&mut self, session: &mut dyn OltpSession) -> Result<i64, OpError> {
        if let Some(s) = self.seq {
            return Ok(s);
        }
        let thread = self.thread;
        let mut last = -1;
        run_retrying(session, TxnKind::ReadOnly, &mut |ops| {
            last = -1;
            let range = Range::primary(vec![int(thread)]).descending().limit(1);
            ops.scan(HISTORY, &range, &mut |r| {
                last = r.get(1).and_then(Value::as_i64).unwrap_or(-1);
            })?;
            Ok(())
        })?;
        self.seq = Some(last + 1);
        Ok(last + 1)
    }
}

impl OltpWorker for TpccWorker<'_> {
    fn plan(&mut self) -> Option<usize> {
        if self.thread as usize > MAX_THREADS {
            return None;
        }
        self.txn = self.planner.plan(&mut self.rng);
        Some(self.txn.type_index())
    }

    fn execute(&mut self, session: &mut dyn OltpSession) -> Result<u64, OpError> {
        let seq =
            if matches!(self.txn, TpccTxn::Payment { .. }) { self.next_seq(session)? } else { 0 };
        let ctx = TxnContext { now: now_us(), history: (self.thread, seq), fault: self.w.fault };
        let txn = &self.txn;
        let mut out = None;
        let mut rolled_back = false;
        session
            .run(txn.kind(), &mut |ops| {
                rolled_back = false;
                let o = transaction(ops, txn, &ctx)?;
                if o == Outcome::RolledBack {
                    rolled_back = true;
                    return Err(OpError::Engine(ROLLBACK.into()));
                }
                out = Some(o);
                Ok(())
            })
            .or_else(|e| if rolled_back { Ok(()) } else { Err(e) })?;
        self.outcome = if rolled_back { Some(Outcome::RolledBack) } else { out };
        Ok(match &self.txn {
            TpccTxn::NewOrder { lines, .. } => 4 + 4 * lines.len() as u64,
            TpccTxn::Payment { .. } => 8,
            TpccTxn::OrderStatus { .. } => 3,
            TpccTxn::Delivery { .. } => 100,
            TpccTxn::StockLevel { .. } => 20,
        })
    }

    fn committed(&mut self) {
        let t = self.txn.type_index();
        self.report.add("txns", 1);
        self.report.add(DONE[t], 1);
        match self.outcome.take() {
            Some(Outcome::RolledBack) => self.report.add("rolled_back", 1),
            Some(Outcome::NewOrder { .. }) => self.report.add("new_orders", 1),
            Some(Outcome::Payment { .. }) => {
                self.report.add("payments", 1);
                self.seq = self.seq.map(|s| s + 1);
            }
            Some(Outcome::Delivery { delivered }) => {
                self.report.add("delivered", delivered as u64);
                self.report.add("delivery_skipped", (DISTRICTS - delivered) as u64);
            }
            _ => {}
        }
    }

    fn report(&self) -> WorkerReport {
        self.report.clone()
    }
}

/// Helpers of the tests of this module and its submodules.
#[cfg(test)]
pub(crate) mod test_util {
    use super::*;
    pub(crate) use crate::oltp;
    pub(crate) use crate::oltp::testing::{engines, params};
    pub(crate) use crate::subject::SubjectSetup;
    pub(crate) use ferrite::pmem::internals::testing::TestDir;

    /// Two warehouses of 50 items and 20 customers per district (orders 15..=20 undelivered).
    pub(crate) const TINY: TpccScale = TpccScale { warehouses: 2, items: 50, customers: 20 };

    pub(crate) fn setup(schema: &Schema) -> SubjectSetup {
        crate::oltp::testing::setup(schema, 8 << 20)
    }

    pub(crate) fn tpcc_engines() -> impl Iterator<Item = EngineId> {
        engines().filter(|&e| supports(e))
    }

    pub(crate) fn geti(row: &[Value], c: usize) -> i64 {
        row[c].as_i64().unwrap()
    }

    pub(crate) fn loaded(
        w: &TpccWorkload,
        dir: &TestDir,
        engine: EngineId,
    ) -> Box<dyn OltpSubject> {
        let path = dir.path().join(format!("{engine}-{:?}", w.fault));
        let subject = oltp::open(engine, &path, &setup(&w.schema), &w.schema)
            .unwrap_or_else(|e| panic!("{engine}: {e}"));
        w.load(subject.as_ref()).unwrap_or_else(|e| panic!("{engine}: load: {e}"));
        subject
    }
}
