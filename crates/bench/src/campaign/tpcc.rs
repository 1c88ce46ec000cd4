//! TPC-C in the kill campaign.
//!
//! The child runs TPC-C's standard mix ([`Planner::plan`], one home warehouse) with the
//! transaction's time set to its sequence number `seq`, so the values the specification takes
//! from the clock are tagged: an order's `o_entry_d`, a delivered line's `ol_delivery_d`, a
//! history row's `h_date`. A Payment's history row is keyed `(1, seq)` (the loader uses
//! thread 0), unique over the campaign. The writes it acknowledges:
//! - New-Order that committed: the district's `d_next_o_id = o_id + 1`; the order
//!   `(w, d, o_id)` present with its `o_c_id`, `o_entry_d = seq` and `o_ol_cnt`; its
//!   `new_order` row present; each of its lines present with `ol_i_id` and `ol_quantity`.
//!   The 1 % New-Order that meets an unused item rolls back and acknowledges no write;
//! - Payment: the history row `(1, seq)` present with its `h_amount` and `h_date = seq`;
//! - Delivery: per delivered order, its `new_order` row absent, the order's
//!   `o_carrier_id`, and each of its lines with `ol_delivery_d = seq`;
//! - the read-only types: no write.
//!
//! Why no later transaction makes an acknowledged expectation false: the model keeps the
//! last write per key. A New-Order's `d_next_o_id` only grows through later New-Orders of the
//! district, which write the same key; its order row's named columns and its lines'
//! `ol_i_id`/`ol_quantity` never change (Delivery changes `o_carrier_id` and `ol_delivery_d`,
//! which New-Order does not name, and Delivery's own writes to those keys replace New-Order's
//! in the model); its `new_order` row is removed only by a Delivery, whose write (absent) to
//! that key replaces the model's; an order is delivered once, so Delivery's expectations
//! stay; history rows are never updated. Payment's updates of warehouse, district and
//! customer are increments that the invariants cover (condition 1), not named as writes.
//!
//! Invariants after each kill: TPC-C's consistency conditions 1–4
//! ([`crate::oltp::tpcc::consistency`]) and the row counts of [`TpccWorkload`]'s check, with
//! the counts taken from the applied acknowledgements: orders = loaded + New-Orders,
//! `new_order` = loaded undelivered + New-Orders − delivered orders, history = loaded +
//! Payments.

use ferrite::Value;

use super::{CampaignDriver, CampaignError, CampaignWorkload, Expect, Write, run_faultable};
use crate::keys::Rng;
use crate::oltp::tpcc::{
    self, DISTRICT, DISTRICTS, HISTORY, NEW_ORDER, NurandC, ORDER_LINE, ORDERS, Outcome, Planner,
    TpccScale, TpccTxn, TpccWorkload, TxnContext,
};
use crate::oltp::{OltpOps, OltpSession, OltpSubject, OltpWorkload, Range, Row};
use crate::subject::{OpError, TxnKind};
use crate::workload::{Check, WorkerReport};

/// The history thread of the campaign's Payments.
const HISTORY_THREAD: i64 = 1;

/// The workload string for `scale`, as [`super::workload`] parses it.
pub fn spec(scale: TpccScale) -> String {
    format!("tpcc:{},{},{}", scale.warehouses, scale.items, scale.customers)
}

/// Parses `tpcc` (1 warehouse at the specification's scale) or `tpcc:W,ITEMS,CUSTOMERS`.
pub fn parse_spec(name: &str) -> Result<Option<TpccScale>, CampaignError> {
    if name == "tpcc" {
        return Ok(Some(TpccScale::default()));
    }
    let Some(rest) = name.strip_prefix("tpcc:") else { return Ok(None) };
    let bad = || CampaignError::Usage(format!("bad TPC-C workload {name:?}"));
    let v: Vec<u32> =
        rest.split(',').map(|x| x.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    match v[..] {
        [warehouses, items, customers] => Ok(Some(TpccScale { warehouses, items, customers })),
        _ => Err(bad()),
    }
}

/// Column positions the acknowledgements name.
#[derive(Clone, Copy, Debug)]
struct Cols {
    d_next_o_id: usize,
    o_c_id: usize,
    o_entry_d: usize,
    o_carrier_id: usize,
    o_ol_cnt: usize,
    ol_i_id: usize,
    ol_delivery_d: usize,
    ol_quantity: usize,
    h_date: usize,
    h_amount: usize,
}

/// TPC-C as a campaign workload.
#[derive(Debug)]
pub struct TpccCampaign {
    tpcc: TpccWorkload,
    nc: NurandC,
    cols: Cols,
    new_orders: u64,
    delivered: u64,
    payments: u64,
}

impl TpccCampaign {
    /// TPC-C at `scale`, population seeded with `seed`.
    pub fn new(scale: TpccScale, seed: u64) -> TpccCampaign {
        let params = super::params(seed);
        let tpcc = TpccWorkload::new(scale, &params);
        let s = tpcc.schema();
        // The TPC-C schema is constant and has these columns (its unit tests pin them).
        let pos = |t: usize, c: &str| s.tables[t].position(c).unwrap_or(usize::MAX);
        let cols = Cols {
            d_next_o_id: pos(DISTRICT, "d_next_o_id"),
            o_c_id: pos(ORDERS, "o_c_id"),
            o_entry_d: pos(ORDERS, "o_entry_d"),
            o_carrier_id: pos(ORDERS, "o_carrier_id"),
            o_ol_cnt: pos(ORDERS, "o_ol_cnt"),
            ol_i_id: pos(ORDER_LINE, "ol_i_id"),
            ol_delivery_d: pos(ORDER_LINE, "ol_delivery_d"),
            ol_quantity: pos(ORDER_LINE, "ol_quantity"),
            h_date: pos(HISTORY, "h_date"),
            h_amount: pos(HISTORY, "h_amount"),
        };
        TpccCampaign {
            tpcc,
            nc: NurandC::new(seed),
            cols,
            new_orders: 0,
            delivered: 0,
            payments: 0,
        }
    }
}

impl CampaignWorkload for TpccCampaign {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn oltp(&self) -> &dyn OltpWorkload {
        &self.tpcc
    }

    fn driver(&self, seed: u64) -> Box<dyn CampaignDriver + '_> {
        // Home warehouse chosen by the child's seed, so the rounds visit every warehouse.
        let scale = self.tpcc.scale();
        let index = (seed % u64::from(scale.warehouses.max(1))) as usize;
        Box::new(TpccDriver {
            rng: Rng::new(seed, 0x7c7c),
            planner: Planner::new(scale, self.nc, index),
            cols: self.cols,
        })
    }

    fn applied(&mut self, writes: &[Write]) {
        let c = self.cols;
        for w in writes {
            match (w.table, &w.expect) {
                (ORDERS, Expect::Present(cols)) if cols.iter().any(|(i, _)| *i == c.o_ol_cnt) => {
                    self.new_orders += 1;
                }
                (NEW_ORDER, Expect::Absent) => self.delivered += 1,
                (HISTORY, Expect::Present(_)) => self.payments += 1,
                _ => {}
            }
        }
    }

    fn invariants(&self, subject: &dyn OltpSubject) -> Result<Vec<Check>, OpError> {
        let mut report = WorkerReport::default();
        report.add("new_orders", self.new_orders);
        report.add("delivered", self.delivered);
        report.add("payments", self.payments);
        self.tpcc.check(subject, std::slice::from_ref(&report))
    }
}

struct TpccDriver {
    rng: Rng,
    planner: Planner,
    cols: Cols,
}

fn int(v: i64) -> Value {
    Value::I64(v)
}

fn present(table: usize, key: Vec<i64>, cols: Vec<(usize, Value)>) -> Write {
    Write { table, key, expect: Expect::Present(cols) }
}

/// The oldest `new_order` of each district of `w_id`: what a Delivery run now delivers.
fn oldest_new_orders(ops: &mut dyn OltpOps, w_id: i64) -> Result<Vec<(i64, i64)>, OpError> {
    let mut out = Vec::new();
    for d_id in 1..=DISTRICTS {
        let mut oldest = None;
        let range = Range::primary(vec![int(w_id), int(d_id)]).limit(1);
        ops.scan(NEW_ORDER, &range, &mut |r| oldest = r.first().and_then(Value::as_i64))?;
        out.extend(oldest.map(|o| (d_id, o)));
    }
    Ok(out)
}

impl TpccDriver {
    /// What `txn`, committed as `seq` with outcome `out`, wrote; `delivering` is what a
    /// Delivery found before it ran.
    fn writes(
        &self,
        ops: &mut dyn OltpOps,
        txn: &TpccTxn,
        out: &Outcome,
        delivering: &[(i64, i64)],
        seq: i64,
    ) -> Result<Vec<Write>, OpError> {
        let c = self.cols;
        let mut w = Vec::new();
        match (txn, out) {
            (TpccTxn::NewOrder { w_id, d_id, c_id, lines }, Outcome::NewOrder { o_id, .. }) => {
                let (w_id, d_id, o_id) = (*w_id, *d_id, *o_id);
                w.push(present(DISTRICT, vec![w_id, d_id], vec![(c.d_next_o_id, int(o_id + 1))]));
                w.push(present(
                    ORDERS,
                    vec![w_id, d_id, o_id],
                    vec![
                        (c.o_c_id, int(*c_id)),
                        (c.o_entry_d, int(seq)),
                        (c.o_ol_cnt, int(lines.len() as i64)),
                    ],
                ));
                w.push(present(NEW_ORDER, vec![w_id, d_id, o_id], Vec::new()));
                for (k, l) in lines.iter().enumerate() {
                    w.push(present(
                        ORDER_LINE,
                        vec![w_id, d_id, o_id, k as i64 + 1],
                        vec![(c.ol_i_id, int(l.i_id)), (c.ol_quantity, int(l.quantity))],
                    ));
                }
            }
            (TpccTxn::Payment { amount, .. }, Outcome::Payment { .. }) => {
                w.push(present(
                    HISTORY,
                    vec![HISTORY_THREAD, seq],
                    vec![(c.h_date, int(seq)), (c.h_amount, int(*amount))],
                ));
            }
            (TpccTxn::Delivery { w_id, carrier_id }, Outcome::Delivery { delivered }) => {
                if *delivered != delivering.len() as i64 {
                    return Err(OpError::Engine(format!(
                        "TPC-C campaign: Delivery delivered {delivered}, found {:?}",
                        delivering
                    )));
                }
                let mut order = Row::new();
                for &(d_id, o_id) in delivering {
                    let key = vec![*w_id, d_id, o_id];
                    w.push(Write { table: NEW_ORDER, key: key.clone(), expect: Expect::Absent });
                    if !ops.get(ORDERS, &key, &mut order)? {
                        return Err(OpError::Engine(format!("TPC-C: order {key:?} missing")));
                    }
                    let n = order.get(c.o_ol_cnt).and_then(Value::as_i64).unwrap_or(0);
                    w.push(present(ORDERS, key, vec![(c.o_carrier_id, int(*carrier_id))]));
                    for k in 1..=n {
                        w.push(present(
                            ORDER_LINE,
                            vec![*w_id, d_id, o_id, k],
                            vec![(c.ol_delivery_d, int(seq))],
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(w)
    }
}

/// The error of TPC-C's expected New-Order rollback inside the campaign's driver.
const EXPECTED_ROLLBACK: &str = "TPC-C campaign: expected rollback (unused item)";

impl CampaignDriver for TpccDriver {
    fn run(
        &mut self,
        session: &mut dyn OltpSession,
        seq: u64,
        intent: &mut dyn FnMut(&[Write]) -> Result<(), OpError>,
        rollback: bool,
    ) -> Result<Option<Vec<Write>>, OpError> {
        let txn = self.planner.plan(&mut self.rng);
        // The fault acknowledges a rolled-back Payment: its history row has a key of its own,
        // so no later write to the key can hide the loss.
        if rollback && !matches!(txn, TpccTxn::Payment { .. }) {
            return Ok(None);
        }
        let s = seq as i64;
        let ctx = TxnContext { now: s, history: (HISTORY_THREAD, s), fault: tpcc::Fault::None };
        let mut expected_rollback = false;
        let res = run_faultable(session, txn.kind(), rollback, &mut |ops| {
            expected_rollback = false;
            let delivering = match txn {
                TpccTxn::Delivery { w_id, .. } => oldest_new_orders(ops, w_id)?,
                _ => Vec::new(),
            };
            let out = tpcc::transaction(ops, &txn, &ctx)?;
            if out == Outcome::RolledBack {
                // It wrote nothing that survives: no intent, no write acknowledged.
                expected_rollback = true;
                return Err(OpError::Engine(EXPECTED_ROLLBACK.into()));
            }
            let writes = self.writes(ops, &txn, &out, &delivering, s)?;
            if txn.kind() == TxnKind::ReadWrite {
                intent(&writes)?;
            }
            Ok(writes)
        });
        match res {
            Err(OpError::Engine(m)) if expected_rollback && m == EXPECTED_ROLLBACK => {
                Ok(Some(Vec::new()))
            }
            other => other.map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_string_round_trips() {
        let scale = TpccScale { warehouses: 2, items: 200, customers: 30 };
        assert_eq!(spec(scale), "tpcc:2,200,30");
        assert_eq!(parse_spec(&spec(scale)).unwrap(), Some(scale));
        assert_eq!(parse_spec("tpcc").unwrap(), Some(TpccScale::default()));
        assert_eq!(parse_spec("tatp").unwrap(), None);
        for bad in ["tpcc:", "tpcc:1,2", "tpcc:1,2,x", "tpcc:1,2,3,4"] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
    }
}
