//! The transactions (specification 2.4–2.8): their inputs ([`Planner`], the standard
//! mix), and their execution through [`OltpOps`] inside one transaction of the caller.
//! A New-Order that meets an unused item returns [`Outcome::RolledBack`]; the caller rolls
//! back.

use super::*;

/// How a transaction names its customer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustomerRef {
    /// By `c_id`.
    Id(i64),
    /// By `c_last`: the middle one (position ⌈n/2⌉) of the matches sorted by `c_first`.
    Last(String),
}

/// One order line of a New-Order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineInput {
    /// Item (an unused id rolls the transaction back).
    pub i_id: i64,
    /// Supplying warehouse.
    pub supply_w_id: i64,
    /// Quantity, 1..=10.
    pub quantity: i64,
}

/// One transaction with its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TpccTxn {
    /// New-Order (2.4).
    NewOrder {
        /// Home warehouse.
        w_id: i64,
        /// District.
        d_id: i64,
        /// Customer.
        c_id: i64,
        /// 5–15 lines.
        lines: Vec<LineInput>,
    },
    /// Payment (2.5).
    Payment {
        /// Home warehouse.
        w_id: i64,
        /// District.
        d_id: i64,
        /// The customer's warehouse.
        c_w_id: i64,
        /// The customer's district.
        c_d_id: i64,
        /// The customer.
        customer: CustomerRef,
        /// Cents, 100..=500 000.
        amount: i64,
    },
    /// Order-Status (2.6), read-only.
    OrderStatus {
        /// Warehouse.
        w_id: i64,
        /// District.
        d_id: i64,
        /// The customer.
        customer: CustomerRef,
    },
    /// Delivery (2.7): the oldest undelivered order of each of the 10 districts.
    Delivery {
        /// Warehouse.
        w_id: i64,
        /// 1..=10.
        carrier_id: i64,
    },
    /// Stock-Level (2.8), read-only.
    StockLevel {
        /// Warehouse.
        w_id: i64,
        /// District.
        d_id: i64,
        /// 10..=20.
        threshold: i64,
    },
}

impl TpccTxn {
    /// Position in [`TXN_TYPES`].
    pub fn type_index(&self) -> usize {
        match self {
            TpccTxn::NewOrder { .. } => 0,
            TpccTxn::Payment { .. } => 1,
            TpccTxn::OrderStatus { .. } => 2,
            TpccTxn::Delivery { .. } => 3,
            TpccTxn::StockLevel { .. } => 4,
        }
    }

    /// Read-only types run as read-only transactions.
    pub fn kind(&self) -> TxnKind {
        match self {
            TpccTxn::OrderStatus { .. } | TpccTxn::StockLevel { .. } => TxnKind::ReadOnly,
            _ => TxnKind::ReadWrite,
        }
    }
}

/// What a transaction did.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A committed New-Order: its order id, line count and total (cents, taxes and discount
    /// applied).
    NewOrder {
        /// Order id.
        o_id: i64,
        /// Lines.
        lines: i64,
        /// Total in cents.
        total: i64,
    },
    /// The New-Order met an unused item: the caller must roll back (expected, 1 %).
    RolledBack,
    /// Payment: the customer paid and its new balance (cents).
    Payment {
        /// Customer.
        c_id: i64,
        /// New balance.
        balance: i64,
    },
    /// Order-Status: the customer, its newest order and that order's line count.
    OrderStatus {
        /// Customer.
        c_id: i64,
        /// Newest order, if any.
        o_id: Option<i64>,
        /// Its lines.
        lines: usize,
    },
    /// Delivery: orders delivered (districts without a new order are skipped).
    Delivery {
        /// Delivered orders (one per district at most).
        delivered: i64,
    },
    /// Stock-Level: distinct items of the last 20 orders below the threshold.
    StockLevel {
        /// Low-stock items.
        low: usize,
    },
}

/// Context of one execution: the time, the history key of a Payment, a fault.
#[derive(Clone, Copy, Debug)]
pub struct TxnContext {
    /// Now, µs since the epoch.
    pub now: i64,
    /// History key `(thread, seq)` a Payment inserts.
    pub history: (i64, i64),
    /// Deliberate breakage (tests).
    pub fault: Fault,
}

/// The input planner of one worker.
#[derive(Clone, Debug)]
pub struct Planner {
    scale: TpccScale,
    nc: NurandC,
    /// Home warehouse.
    pub w_id: i64,
    /// Stock-Level district.
    pub d_id: i64,
}

impl Planner {
    /// The planner of worker `index`.
    pub fn new(scale: TpccScale, nc: NurandC, index: usize) -> Planner {
        let w = scale.warehouses.max(1) as usize;
        Planner {
            scale,
            nc,
            w_id: (index % w + 1) as i64,
            d_id: ((index / w) % DISTRICTS as usize + 1) as i64,
        }
    }

    fn customer_id(&self, rng: &mut Rng) -> i64 {
        nurand(rng, 1023, self.nc.c_id, 1, self.scale.c() as u64) as i64
    }

    fn customer_ref(&self, rng: &mut Rng) -> CustomerRef {
        if rng.below(100) < 60 {
            let n = nurand(rng, 255, self.nc.c_last_run, 0, self.scale.last_name_max() as u64);
            CustomerRef::Last(last_name(n))
        } else {
            CustomerRef::Id(self.customer_id(rng))
        }
    }

    fn other_warehouse(&self, rng: &mut Rng) -> i64 {
        let w = self.scale.w();
        if w < 2 {
            return self.w_id;
        }
        let o = 1 + rng.below((w - 1) as u64) as i64;
        if o >= self.w_id { o + 1 } else { o }
    }

    /// Draws the next transaction.
    pub fn plan(&self, rng: &mut Rng) -> TpccTxn {
        let pick = rng.below(100);
        let ty = MIX.iter().position(|&m| pick < m).unwrap_or(0);
        let w_id = self.w_id;
        match ty {
            0 => {
                let d_id = uniform(rng, 1, DISTRICTS);
                let c_id = self.customer_id(rng);
                let n = uniform(rng, 5, 15);
                let rollback = rng.below(100) == 0;
                let lines = (1..=n)
                    .map(|k| {
                        let i_id = if rollback && k == n {
                            self.scale.items_i() + 1
                        } else {
                            nurand(rng, 8191, self.nc.ol_i_id, 1, u64::from(self.scale.items))
                                as i64
                        };
                        let supply_w_id = if self.scale.warehouses > 1 && rng.below(100) == 0 {
                            self.other_warehouse(rng)
                        } else {
                            w_id
                        };
                        LineInput { i_id, supply_w_id, quantity: uniform(rng, 1, 10) }
                    })
                    .collect();
                TpccTxn::NewOrder { w_id, d_id, c_id, lines }
            }
            1 => {
                let d_id = uniform(rng, 1, DISTRICTS);
                let (c_w_id, c_d_id) = if self.scale.warehouses > 1 && rng.below(100) < 15 {
                    (self.other_warehouse(rng), uniform(rng, 1, DISTRICTS))
                } else {
                    (w_id, d_id)
                };
                let customer = self.customer_ref(rng);
                TpccTxn::Payment {
                    w_id,
                    d_id,
                    c_w_id,
                    c_d_id,
                    customer,
                    amount: uniform(rng, 100, 500_000),
                }
            }
            2 => {
                let d_id = uniform(rng, 1, DISTRICTS);
                TpccTxn::OrderStatus { w_id, d_id, customer: self.customer_ref(rng) }
            }
            3 => TpccTxn::Delivery { w_id, carrier_id: uniform(rng, 1, 10) },
            _ => TpccTxn::StockLevel { w_id, d_id: self.d_id, threshold: uniform(rng, 10, 20) },
        }
    }
}

pub(super) fn missing(what: &str, key: &[i64]) -> OpError {
    OpError::Engine(format!("TPC-C: {what} {key:?} missing"))
}

pub(super) fn get_row(
    ops: &mut dyn OltpOps,
    t: usize,
    key: &[i64],
    what: &str,
) -> Result<Row, OpError> {
    let mut row = Row::new();
    if ops.get(t, key, &mut row)? { Ok(row) } else { Err(missing(what, key)) }
}

pub(super) fn col_i(row: &[Value], c: usize) -> Result<i64, OpError> {
    row.get(c)
        .and_then(Value::as_i64)
        .ok_or_else(|| OpError::Engine(format!("TPC-C: column {c} is not an i64")))
}

pub(super) fn col_f(row: &[Value], c: usize) -> Result<f64, OpError> {
    match row.get(c) {
        Some(Value::F64(x)) => Ok(*x),
        _ => Err(OpError::Engine(format!("TPC-C: column {c} is not an f64"))),
    }
}

pub(super) fn col_s(row: &[Value], c: usize) -> Result<&str, OpError> {
    match row.get(c) {
        Some(Value::Str(s)) => Ok(s),
        _ => Err(OpError::Engine(format!("TPC-C: column {c} is not a string"))),
    }
}

/// The customer row `customer` names in `(w_id, d_id)`.
pub(super) fn find_customer(
    ops: &mut dyn OltpOps,
    w_id: i64,
    d_id: i64,
    customer: &CustomerRef,
) -> Result<Row, OpError> {
    match customer {
        CustomerRef::Id(c_id) => get_row(ops, CUSTOMER, &[w_id, d_id, *c_id], "customer"),
        CustomerRef::Last(last) => {
            let mut rows: Vec<Row> = Vec::new();
            let range = Range::index(
                CUSTOMER_BY_NAME,
                vec![int(w_id), int(d_id), Value::Str(last.clone())],
            );
            ops.scan(CUSTOMER, &range, &mut |r| rows.push(r.to_vec()))?;
            if rows.is_empty() {
                return Err(OpError::Engine(format!(
                    "TPC-C: no customer named {last} in ({w_id}, {d_id})"
                )));
            }
            // Sorted by c_first by the index; position ⌈n/2⌉ (1-based).
            let mid = (rows.len() - 1) / 2;
            Ok(rows.swap_remove(mid))
        }
    }
}

/// Runs `txn` on `ops`. [`Outcome::RolledBack`] means the caller must roll back.
pub fn transaction(
    ops: &mut dyn OltpOps,
    txn: &TpccTxn,
    ctx: &TxnContext,
) -> Result<Outcome, OpError> {
    match txn {
        TpccTxn::NewOrder { w_id, d_id, c_id, lines } => {
            let (w_id, d_id, c_id) = (*w_id, *d_id, *c_id);
            let w = get_row(ops, WAREHOUSE, &[w_id], "warehouse")?;
            let d = get_row(ops, DISTRICT, &[w_id, d_id], "district")?;
            let o_id = col_i(&d, D_NEXT_O_ID)?;
            if ctx.fault != Fault::SkipDistrictUpdate {
                ops.update(DISTRICT, &[w_id, d_id], &[(D_NEXT_O_ID, int(o_id + 1))])?;
            }
            let c = get_row(ops, CUSTOMER, &[w_id, d_id, c_id], "customer")?;
            let all_local = lines.iter().all(|l| l.supply_w_id == w_id);
            let order = vec![
                int(o_id),
                int(d_id),
                int(w_id),
                int(c_id),
                int(ctx.now),
                int(0),
                int(lines.len() as i64),
                int(i64::from(all_local)),
            ];
            if !ops.insert(ORDERS, order)? {
                return Err(OpError::Engine(format!("TPC-C: order {w_id}/{d_id}/{o_id} exists")));
            }
            if !ops.insert(NEW_ORDER, vec![int(o_id), int(d_id), int(w_id)])? {
                return Err(OpError::Engine(format!(
                    "TPC-C: new order {w_id}/{d_id}/{o_id} exists"
                )));
            }
            let mut sum = 0i64;
            let mut item = Row::new();
            for (k, l) in lines.iter().enumerate() {
                if !ops.get(ITEM, &[l.i_id], &mut item)? {
                    return Ok(Outcome::RolledBack);
                }
                let price = col_i(&item, I_PRICE)?;
                let s = get_row(ops, STOCK, &[l.supply_w_id, l.i_id], "stock")?;
                let q = col_i(&s, S_QUANTITY)?;
                let new_q = if q >= l.quantity + 10 { q - l.quantity } else { q - l.quantity + 91 };
                let remote = i64::from(l.supply_w_id != w_id);
                ops.update(
                    STOCK,
                    &[l.supply_w_id, l.i_id],
                    &[
                        (S_QUANTITY, int(new_q)),
                        (S_YTD, int(col_i(&s, S_YTD)? + l.quantity)),
                        (S_ORDER_CNT, int(col_i(&s, S_ORDER_CNT)? + 1)),
                        (S_REMOTE_CNT, int(col_i(&s, S_REMOTE_CNT)? + remote)),
                    ],
                )?;
                let amount = l.quantity * price;
                sum += amount;
                // Brand/generic (shown to the terminal only).
                let _generic = col_s(&item, I_DATA)?.contains("ORIGINAL")
                    && col_s(&s, S_DATA)?.contains("ORIGINAL");
                let dist = col_s(&s, S_DIST_01 + (d_id - 1) as usize)?.to_owned();
                let line = vec![
                    int(o_id),
                    int(d_id),
                    int(w_id),
                    int(k as i64 + 1),
                    int(l.i_id),
                    int(l.supply_w_id),
                    int(0),
                    int(l.quantity),
                    int(amount),
                    text(dist),
                ];
                if !ops.insert(ORDER_LINE, line)? {
                    return Err(OpError::Engine(format!("TPC-C: line of {o_id} exists")));
                }
            }
            let factor =
                (1.0 - col_f(&c, C_DISCOUNT)?) * (1.0 + col_f(&w, W_TAX)? + col_f(&d, D_TAX)?);
            let total = (sum as f64 * factor).round() as i64;
            Ok(Outcome::NewOrder { o_id, lines: lines.len() as i64, total })
        }
        TpccTxn::Payment { w_id, d_id, c_w_id, c_d_id, customer, amount } => {
            let (w_id, d_id, amount) = (*w_id, *d_id, *amount);
            let w = get_row(ops, WAREHOUSE, &[w_id], "warehouse")?;
            if ctx.fault != Fault::SkipWarehouseYtd {
                ops.update(WAREHOUSE, &[w_id], &[(W_YTD, int(col_i(&w, W_YTD)? + amount))])?;
            }
            let d = get_row(ops, DISTRICT, &[w_id, d_id], "district")?;
            ops.update(DISTRICT, &[w_id, d_id], &[(D_YTD, int(col_i(&d, D_YTD)? + amount))])?;
            let c = find_customer(ops, *c_w_id, *c_d_id, customer)?;
            let c_id = col_i(&c, C_ID)?;
            let balance = col_i(&c, C_BALANCE)? - amount;
            let mut set = vec![
                (C_BALANCE, int(balance)),
                (C_YTD_PAYMENT, int(col_i(&c, C_YTD_PAYMENT)? + amount)),
                (C_PAYMENT_CNT, int(col_i(&c, C_PAYMENT_CNT)? + 1)),
            ];
            if col_s(&c, C_CREDIT)? == "BC" {
                let mut data = format!(
                    "{c_id} {c_d_id} {c_w_id} {d_id} {w_id} {}.{:02} | {}",
                    amount / 100,
                    amount % 100,
                    col_s(&c, C_DATA)?
                );
                data.truncate(500);
                set.push((C_DATA, text(data)));
            }
            ops.update(CUSTOMER, &[*c_w_id, *c_d_id, c_id], &set)?;
            let h_data = format!("{}    {}", col_s(&w, W_NAME)?, col_s(&d, D_NAME)?);
            let (thread, seq) = ctx.history;
            let h = vec![
                int(thread),
                int(seq),
                int(c_id),
                int(*c_d_id),
                int(*c_w_id),
                int(d_id),
                int(w_id),
                int(ctx.now),
                int(amount),
                text(h_data),
            ];
            if !ops.insert(HISTORY, h)? {
                return Err(OpError::Engine(format!("TPC-C: history ({thread}, {seq}) exists")));
            }
            Ok(Outcome::Payment { c_id, balance })
        }
        TpccTxn::OrderStatus { w_id, d_id, customer } => {
            let (w_id, d_id) = (*w_id, *d_id);
            let c = find_customer(ops, w_id, d_id, customer)?;
            let c_id = col_i(&c, C_ID)?;
            let mut o_id = None;
            let range = Range::index(ORDERS_BY_CUSTOMER, vec![int(w_id), int(d_id), int(c_id)])
                .descending()
                .limit(1);
            ops.scan(ORDERS, &range, &mut |r| o_id = r.get(O_ID).and_then(Value::as_i64))?;
            let mut lines = 0;
            if let Some(o) = o_id {
                let range = Range::primary(vec![int(w_id), int(d_id), int(o)]);
                lines = ops.scan(ORDER_LINE, &range, &mut |_| {})?;
            }
            Ok(Outcome::OrderStatus { c_id, o_id, lines })
        }
        TpccTxn::Delivery { w_id, carrier_id } => {
            let w_id = *w_id;
            let mut delivered = 0;
            for d_id in 1..=DISTRICTS {
                let mut oldest = None;
                let range = Range::primary(vec![int(w_id), int(d_id)]).limit(1);
                ops.scan(NEW_ORDER, &range, &mut |r| {
                    oldest = r.get(NO_O_ID).and_then(Value::as_i64);
                })?;
                let Some(o_id) = oldest else { continue };
                if !ops.delete(NEW_ORDER, &[w_id, d_id, o_id])? {
                    return Err(missing("new order", &[w_id, d_id, o_id]));
                }
                let o = get_row(ops, ORDERS, &[w_id, d_id, o_id], "order")?;
                let c_id = col_i(&o, O_C_ID)?;
                ops.update(ORDERS, &[w_id, d_id, o_id], &[(O_CARRIER_ID, int(*carrier_id))])?;
                let mut numbers = Vec::new();
                let mut sum = 0i64;
                let range = Range::primary(vec![int(w_id), int(d_id), int(o_id)]);
                ops.scan(ORDER_LINE, &range, &mut |r| {
                    numbers.extend(r.get(OL_NUMBER).and_then(Value::as_i64));
                    sum += r.get(OL_AMOUNT).and_then(Value::as_i64).unwrap_or(0);
                })?;
                for n in numbers {
                    ops.update(
                        ORDER_LINE,
                        &[w_id, d_id, o_id, n],
                        &[(OL_DELIVERY_D, int(ctx.now))],
                    )?;
                }
                let c = get_row(ops, CUSTOMER, &[w_id, d_id, c_id], "customer")?;
                ops.update(
                    CUSTOMER,
                    &[w_id, d_id, c_id],
                    &[
                        (C_BALANCE, int(col_i(&c, C_BALANCE)? + sum)),
                        (C_DELIVERY_CNT, int(col_i(&c, C_DELIVERY_CNT)? + 1)),
                    ],
                )?;
                delivered += 1;
            }
            Ok(Outcome::Delivery { delivered })
        }
        TpccTxn::StockLevel { w_id, d_id, threshold } => {
            let (w_id, d_id) = (*w_id, *d_id);
            let d = get_row(ops, DISTRICT, &[w_id, d_id], "district")?;
            let next = col_i(&d, D_NEXT_O_ID)?;
            let mut items = BTreeSet::new();
            let range = Range::primary(vec![int(w_id), int(d_id)])
                .between(Bound::Included(int((next - 20).max(0))), Bound::Excluded(int(next)));
            ops.scan(ORDER_LINE, &range, &mut |r| {
                items.extend(r.get(OL_I_ID).and_then(Value::as_i64));
            })?;
            let mut low = 0;
            let mut s = Row::new();
            for i in items {
                if ops.get(STOCK, &[w_id, i], &mut s)? && col_i(&s, S_QUANTITY)? < *threshold {
                    low += 1;
                }
            }
            Ok(Outcome::StockLevel { low })
        }
    }
}

pub(super) const ROLLBACK: &str = "TPC-C: expected rollback (unused item)";

/// Runs `txn` as one transaction of `session`, retrying retryable failures; an expected
/// rollback ([`Outcome::RolledBack`]) is rolled back and returned as `Ok`.
pub fn run_txn(
    session: &mut dyn OltpSession,
    txn: &TpccTxn,
    ctx: &TxnContext,
) -> Result<Outcome, OpError> {
    let mut out = None;
    let r = run_retrying(session, txn.kind(), &mut |ops| {
        out = None;
        let o = transaction(ops, txn, ctx)?;
        let rolled_back = o == Outcome::RolledBack;
        out = Some(o);
        if rolled_back { Err(OpError::Engine(ROLLBACK.into())) } else { Ok(()) }
    });
    match (r, out) {
        (Ok(()), Some(o)) => Ok(o),
        (Err(_), Some(Outcome::RolledBack)) => Ok(Outcome::RolledBack),
        (Err(e), _) => Err(e),
        (Ok(()), None) => Err(OpError::Engine("TPC-C: no outcome".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::tpcc::test_util::*;

    #[test]
    fn inputs_follow_the_mix_and_rules() {
        let seed = 23;
        println!("seed {seed}");
        let scale = TpccScale { warehouses: 4, ..TpccScale::default() };
        let nc = NurandC::new(seed);
        let p = Planner::new(scale, nc, 5);
        assert_eq!((p.w_id, p.d_id), (2, 2), "thread 5 of 4 warehouses");
        assert_eq!(Planner::new(TINY, nc, 0).w_id, 1);
        assert_eq!(Planner::new(TINY, nc, 3).w_id, 2);
        let mut rng = Rng::new(seed, 2);
        let n = 200_000;
        let mut per_type = [0u32; 5];
        let (mut lines, mut remote_lines, mut rollbacks, mut new_orders) = (0, 0, 0, 0);
        let (mut payments, mut remote_pay, mut by_name) = (0, 0, 0);
        for _ in 0..n {
            let t = p.plan(&mut rng);
            per_type[t.type_index()] += 1;
            match &t {
                TpccTxn::NewOrder { w_id, d_id, c_id, lines: ls } => {
                    new_orders += 1;
                    assert_eq!(*w_id, 2);
                    assert!((1..=10).contains(d_id) && (1..=3000).contains(c_id));
                    assert!((5..=15).contains(&ls.len()));
                    for (k, l) in ls.iter().enumerate() {
                        lines += 1;
                        assert!((1..=10).contains(&l.quantity) && (1..=4).contains(&l.supply_w_id));
                        if l.supply_w_id != 2 {
                            remote_lines += 1;
                        }
                        if l.i_id == 100_001 {
                            assert_eq!(k, ls.len() - 1, "only the last line is unused");
                            rollbacks += 1;
                        } else {
                            assert!((1..=100_000).contains(&l.i_id));
                        }
                    }
                }
                TpccTxn::Payment { w_id, d_id, c_w_id, c_d_id, customer, amount } => {
                    payments += 1;
                    assert!((100..=500_000).contains(amount));
                    assert!((1..=10).contains(d_id) && (1..=10).contains(c_d_id));
                    if c_w_id != w_id {
                        remote_pay += 1;
                    } else {
                        assert_eq!(c_d_id, d_id);
                    }
                    if let CustomerRef::Last(s) = customer {
                        by_name += 1;
                        assert!(s.len() >= 9, "{s}");
                    }
                }
                TpccTxn::OrderStatus { d_id, .. } => assert!((1..=10).contains(d_id)),
                TpccTxn::Delivery { carrier_id, .. } => assert!((1..=10).contains(carrier_id)),
                TpccTxn::StockLevel { d_id, threshold, .. } => {
                    assert_eq!(*d_id, 2);
                    assert!((10..=20).contains(threshold));
                }
            }
        }
        let want = [45.0, 43.0, 4.0, 4.0, 4.0];
        for t in 0..5 {
            let pct = f64::from(per_type[t]) * 100.0 / f64::from(n);
            assert!((pct - want[t]).abs() < 0.7, "{}: {pct} %", TXN_TYPES[t]);
        }
        // 1 % each, 15 % and 60 %, within wide margins (deterministic for the seed).
        let pct = |a: u32, b: u32| f64::from(a) * 100.0 / f64::from(b);
        assert!((0.8..1.2).contains(&pct(remote_lines, lines)), "{}", pct(remote_lines, lines));
        assert!((0.7..1.3).contains(&pct(rollbacks, new_orders)), "{}", pct(rollbacks, new_orders));
        assert!((14.0..16.0).contains(&pct(remote_pay, payments)));
        assert!((58.5..61.5).contains(&pct(by_name, payments)));
        // One warehouse: never remote.
        let one = Planner::new(TpccScale::default(), nc, 0);
        for _ in 0..20_000 {
            match one.plan(&mut rng) {
                TpccTxn::NewOrder { lines, .. } => {
                    assert!(lines.iter().all(|l| l.supply_w_id == 1))
                }
                TpccTxn::Payment { c_w_id, .. } => assert_eq!(c_w_id, 1),
                _ => {}
            }
        }
    }

    /// Each transaction on a tiny loaded database, on every engine, against values worked out
    /// from the generator's rows.
    #[test]
    fn transactions_by_hand_on_every_engine() {
        let seed = 31;
        println!("seed {seed}");
        let dir = TestDir::new("bench-tpcc-txn");
        let wl = TpccWorkload::new(TINY, &params(seed));
        let nc = NurandC::new(seed);
        let ctx = |seq| TxnContext { now: 5555, history: (9, seq), fault: Fault::None };
        for engine in tpcc_engines() {
            let subject = loaded(&wl, &dir, engine);
            let mut s = subject.session().unwrap();
            let run = |s: &mut Box<dyn OltpSession + '_>, t: &TpccTxn, seq: i64| {
                run_txn(s.as_mut(), t, &ctx(seq)).unwrap_or_else(|e| panic!("{engine}: {e}"))
            };
            // New-Order in (1, 3) for customer 5: item 1 from warehouse 1, item 2 from 2.
            let lines = vec![
                LineInput { i_id: 1, supply_w_id: 1, quantity: 3 },
                LineInput { i_id: 2, supply_w_id: 2, quantity: 2 },
            ];
            let no = TpccTxn::NewOrder { w_id: 1, d_id: 3, c_id: 5, lines: lines.clone() };
            let (p1, p2) = (geti(&item_row(seed, 1), I_PRICE), geti(&item_row(seed, 2), I_PRICE));
            let Outcome::NewOrder { o_id, lines: n, total } = run(&mut s, &no, 0) else { panic!() };
            assert_eq!((o_id, n), (21, 2), "{engine}: d_next_o_id was 21");
            let (w, d) = (warehouse_row(seed, 1), district_row(seed, TINY, 1, 3));
            let c = &district_population(seed, TINY, &nc, 1, 3, 0).customers[4];
            let factor = (1.0 - col_f(c, C_DISCOUNT).unwrap())
                * (1.0 + col_f(&w, W_TAX).unwrap() + col_f(&d, D_TAX).unwrap());
            assert_eq!(total, ((3 * p1 + 2 * p2) as f64 * factor).round() as i64);
            // A New-Order whose last item is unused rolls back: nothing of it remains.
            let mut bad = lines.clone();
            bad.push(LineInput { i_id: 51, supply_w_id: 1, quantity: 1 });
            let rb = TpccTxn::NewOrder { w_id: 1, d_id: 3, c_id: 6, lines: bad };
            assert_eq!(run(&mut s, &rb, 0), Outcome::RolledBack, "{engine}");
            // Payment from (1, 3) for customer (2, 4, 7) by id, 12.34.
            let pay = TpccTxn::Payment {
                w_id: 1,
                d_id: 3,
                c_w_id: 2,
                c_d_id: 4,
                customer: CustomerRef::Id(7),
                amount: 1234,
            };
            assert_eq!(
                run(&mut s, &pay, 0),
                Outcome::Payment { c_id: 7, balance: -2234 },
                "{engine}"
            );
            // Customers with shared last names: the middle one by first name.
            run_retrying(s.as_mut(), TxnKind::ReadWrite, &mut |ops| {
                let base = district_population(seed, TINY, &nc, 1, 2, 0).customers[0].clone();
                for (c_id, first, last) in [
                    (31, "D", "TESTNAME"),
                    (32, "B", "TESTNAME"),
                    (33, "A", "TESTNAME"),
                    (34, "C", "TESTNAME"),
                    (41, "Z", "TRIO"),
                    (42, "X", "TRIO"),
                    (43, "Y", "TRIO"),
                ] {
                    let mut r = base.clone();
                    r[0] = int(c_id);
                    r[3] = text(first.into());
                    r[C_LAST] = text(last.into());
                    assert!(ops.insert(CUSTOMER, r)?);
                }
                Ok(())
            })
            .unwrap();
            let by_name = |last: &str| TpccTxn::Payment {
                w_id: 1,
                d_id: 2,
                c_w_id: 1,
                c_d_id: 2,
                customer: CustomerRef::Last(last.into()),
                amount: 100,
            };
            // A, B, C, D: position 2 is B (32); X, Y, Z: position 2 is Y (43).
            assert!(matches!(
                run(&mut s, &by_name("TESTNAME"), 1),
                Outcome::Payment { c_id: 32, .. }
            ));
            assert!(matches!(run(&mut s, &by_name("TRIO"), 2), Outcome::Payment { c_id: 43, .. }));
            // A unique name: customer 4 is named by number 3.
            assert!(matches!(
                run(&mut s, &by_name(&last_name(3)), 3),
                Outcome::Payment { c_id: 4, .. }
            ));
            // Order-Status: customer 5's newest order is 21 with 2 lines; by name too.
            let os = TpccTxn::OrderStatus { w_id: 1, d_id: 3, customer: CustomerRef::Id(5) };
            assert_eq!(
                run(&mut s, &os, 0),
                Outcome::OrderStatus { c_id: 5, o_id: Some(21), lines: 2 }
            );
            let os = TpccTxn::OrderStatus {
                w_id: 1,
                d_id: 3,
                customer: CustomerRef::Last(last_name(4)),
            };
            assert_eq!(
                run(&mut s, &os, 0),
                Outcome::OrderStatus { c_id: 5, o_id: Some(21), lines: 2 }
            );
            let os = TpccTxn::OrderStatus {
                w_id: 1,
                d_id: 2,
                customer: CustomerRef::Last("TRIO".into()),
            };
            assert_eq!(
                run(&mut s, &os, 0),
                Outcome::OrderStatus { c_id: 43, o_id: None, lines: 0 }
            );
            // Stock-Level over orders 2..=21 of (1, 3): distinct items below the threshold,
            // stock quantities as loaded except item 1 (ordered above).
            let pop = district_population(seed, TINY, &nc, 1, 3, 0);
            let mut items: BTreeSet<i64> = pop
                .order_lines
                .iter()
                .filter(|l| geti(l, 0) >= 2)
                .map(|l| geti(l, OL_I_ID))
                .collect();
            items.extend([1, 2]);
            let q1 = geti(&stock_row(seed, 1, 1), S_QUANTITY);
            let q1_new = if q1 >= 13 { q1 - 3 } else { q1 - 3 + 91 };
            let qty =
                |i: i64| if i == 1 { q1_new } else { geti(&stock_row(seed, 1, i), S_QUANTITY) };
            for threshold in [10, 15, 20, 60, 101] {
                let want = items.iter().filter(|&&i| qty(i) < threshold).count();
                let sl = TpccTxn::StockLevel { w_id: 1, d_id: 3, threshold };
                assert_eq!(
                    run(&mut s, &sl, 0),
                    Outcome::StockLevel { low: want },
                    "{engine} {threshold}"
                );
            }
            // Delivery of warehouse 1: order 15 of every district.
            let dl = TpccTxn::Delivery { w_id: 1, carrier_id: 7 };
            assert_eq!(run(&mut s, &dl, 0), Outcome::Delivery { delivered: 10 }, "{engine}");
            let get = |ops: &mut dyn OltpOps, t: usize, k: &[i64]| -> Result<Row, OpError> {
                let mut row = Row::new();
                assert!(ops.get(t, k, &mut row)?, "{engine}: {t} {k:?}");
                Ok(row)
            };
            run_retrying(s.as_mut(), TxnKind::ReadOnly, &mut |ops| {
                // New-Order effects.
                assert_eq!(geti(&get(ops, DISTRICT, &[1, 3])?, D_NEXT_O_ID), 22);
                let o = get(ops, ORDERS, &[1, 3, 21])?;
                assert_eq!((geti(&o, O_C_ID), geti(&o, O_OL_CNT), geti(&o, 7)), (5, 2, 0));
                let s1 = get(ops, STOCK, &[1, 1])?;
                assert_eq!(geti(&s1, S_QUANTITY), q1_new);
                assert_eq!(
                    (geti(&s1, S_YTD), geti(&s1, S_ORDER_CNT), geti(&s1, S_REMOTE_CNT)),
                    (3, 1, 0)
                );
                let s2 = get(ops, STOCK, &[2, 2])?;
                assert_eq!(
                    (geti(&s2, S_YTD), geti(&s2, S_ORDER_CNT), geti(&s2, S_REMOTE_CNT)),
                    (2, 1, 1)
                );
                let l2 = get(ops, ORDER_LINE, &[1, 3, 21, 2])?;
                assert_eq!(
                    (geti(&l2, OL_I_ID), geti(&l2, 5), geti(&l2, OL_AMOUNT)),
                    (2, 2, 2 * p2)
                );
                assert_eq!(l2[9], stock_row(seed, 2, 2)[S_DIST_01 + 2], "s_dist_03");
                // The rolled-back New-Order left nothing.
                assert!(!ops.get(ORDERS, &[1, 3, 22], &mut Row::new())?);
                assert!(!ops.get(NEW_ORDER, &[1, 3, 22], &mut Row::new())?);
                assert_eq!(geti(&get(ops, STOCK, &[1, 1])?, S_ORDER_CNT), 1);
                // Payment effects: 12.34 + 1.00 + 1.00 + 1.00 into warehouse 1.
                assert_eq!(geti(&get(ops, WAREHOUSE, &[1])?, W_YTD), 30_000_000 + 1234 + 300);
                assert_eq!(geti(&get(ops, DISTRICT, &[1, 3])?, D_YTD), 3_000_000 + 1234);
                assert_eq!(geti(&get(ops, DISTRICT, &[1, 2])?, D_YTD), 3_000_000 + 300);
                assert_eq!(geti(&get(ops, WAREHOUSE, &[2])?, W_YTD), 30_000_000);
                let c = get(ops, CUSTOMER, &[2, 4, 7])?;
                assert_eq!(
                    (geti(&c, C_BALANCE), geti(&c, C_YTD_PAYMENT), geti(&c, C_PAYMENT_CNT)),
                    (-2234, 2234, 2)
                );
                let h = get(ops, HISTORY, &[9, 0])?;
                assert_eq!((geti(&h, 2), geti(&h, 3), geti(&h, 4), geti(&h, 8)), (7, 4, 2, 1234));
                assert_eq!(geti(&get(ops, CUSTOMER, &[1, 2, 32])?, C_BALANCE), -1100);
                // Delivery effects, district 4: order 15 delivered, its customer credited.
                for d in 1..=10 {
                    assert!(!ops.get(NEW_ORDER, &[1, d, 15], &mut Row::new())?, "{engine} {d}");
                    assert!(ops.get(NEW_ORDER, &[1, d, 16], &mut Row::new())?);
                }
                let pop4 = district_population(seed, TINY, &nc, 1, 4, 0);
                let o = get(ops, ORDERS, &[1, 4, 15])?;
                assert_eq!(geti(&o, O_CARRIER_ID), 7);
                let c_id = geti(&pop4.orders[14], O_C_ID);
                let sum: i64 = pop4
                    .order_lines
                    .iter()
                    .filter(|l| geti(l, 0) == 15)
                    .map(|l| geti(l, OL_AMOUNT))
                    .sum();
                let c = get(ops, CUSTOMER, &[1, 4, c_id])?;
                assert_eq!((geti(&c, C_BALANCE), geti(&c, C_DELIVERY_CNT)), (-1000 + sum, 1));
                let mut dates = Vec::new();
                ops.scan(ORDER_LINE, &Range::primary(vec![int(1), int(4), int(15)]), &mut |l| {
                    dates.push(geti(l, OL_DELIVERY_D));
                })?;
                assert!(!dates.is_empty() && dates.iter().all(|&d| d == 5555), "{dates:?}");
                Ok(())
            })
            .unwrap();
            drop(s);
            let checks = consistency(subject.as_ref(), &TINY).unwrap();
            assert!(checks.iter().all(|c| c.ok), "{engine}: {checks:?}");
        }
    }
}
