//! Consistency conditions 1–4 (specification 3.3.2.1–3.3.2.4), read in one read-only
//! transaction per warehouse.

use super::*;

/// Row totals seen by [`consistency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Orders.
    pub orders: u64,
    /// New orders.
    pub new_orders: u64,
    /// Order lines.
    pub order_lines: u64,
}

/// Consistency conditions 1–4 on `subject` loaded at `scale`, and the row totals.
pub fn consistency_totals(
    subject: &dyn OltpSubject,
    scale: &TpccScale,
) -> Result<(Vec<Check>, Totals), OpError> {
    let scale = scale.clamped();
    let mut s = subject.session()?;
    let mut bad: [Vec<String>; 4] = Default::default();
    let mut bad_n = [0u64; 4];
    let mut totals = Totals::default();
    for w_id in 1..=scale.w() {
        let mut wt = Totals::default();
        let mut wbad: [Vec<String>; 4] = Default::default();
        run_retrying(s.as_mut(), TxnKind::ReadOnly, &mut |ops| {
            wt = Totals::default();
            wbad = Default::default();
            let w = get_row(ops, WAREHOUSE, &[w_id], "warehouse")?;
            let mut districts = Vec::new();
            ops.scan(DISTRICT, &Range::primary(vec![int(w_id)]), &mut |r| {
                districts.push(r.to_vec())
            })?;
            let mut d_sum = 0i64;
            for d in &districts {
                d_sum += col_i(d, D_YTD)?;
            }
            if col_i(&w, W_YTD)? != d_sum || districts.len() as i64 != DISTRICTS {
                wbad[0].push(format!(
                    "w {w_id}: w_ytd {} but {} districts sum to {d_sum}",
                    col_i(&w, W_YTD)?,
                    districts.len()
                ));
            }
            for d in &districts {
                let d_id = col_i(d, 0)?;
                let next = col_i(d, D_NEXT_O_ID)?;
                let prefix = || Range::primary(vec![int(w_id), int(d_id)]);
                let (mut max_o, mut ol_sum, mut n_o) = (0i64, 0i64, 0u64);
                ops.scan(ORDERS, &prefix(), &mut |r| {
                    let o = r.get(O_ID).and_then(Value::as_i64).unwrap_or(-1);
                    max_o = max_o.max(o);
                    ol_sum += r.get(O_OL_CNT).and_then(Value::as_i64).unwrap_or(-1_000_000);
                    n_o += 1;
                })?;
                let (mut min_no, mut max_no, mut n_no) = (i64::MAX, 0i64, 0u64);
                ops.scan(NEW_ORDER, &prefix(), &mut |r| {
                    let o = r.get(NO_O_ID).and_then(Value::as_i64).unwrap_or(-1);
                    min_no = min_no.min(o);
                    max_no = max_no.max(o);
                    n_no += 1;
                })?;
                let n_ol = ops.scan(ORDER_LINE, &prefix(), &mut |_| {})? as u64;
                wt.orders += n_o;
                wt.new_orders += n_no;
                wt.order_lines += n_ol;
                if next - 1 != max_o || (n_no > 0 && max_no != max_o) {
                    wbad[1].push(format!(
                        "({w_id}, {d_id}): d_next_o_id - 1 = {}, max(o_id) = {max_o}, \
                         max(no_o_id) = {}",
                        next - 1,
                        if n_no > 0 { max_no.to_string() } else { "none".into() }
                    ));
                }
                if n_no > 0 && (max_no - min_no + 1) as u64 != n_no {
                    wbad[2].push(format!(
                        "({w_id}, {d_id}): new orders {min_no}..={max_no} but {n_no} rows"
                    ));
                }
                if ol_sum as u64 != n_ol {
                    wbad[3].push(format!(
                        "({w_id}, {d_id}): sum(o_ol_cnt) = {ol_sum}, {n_ol} order lines"
                    ));
                }
            }
            Ok(())
        })?;
        totals.orders += wt.orders;
        totals.new_orders += wt.new_orders;
        totals.order_lines += wt.order_lines;
        for (i, v) in wbad.into_iter().enumerate() {
            bad_n[i] += v.len() as u64;
            bad[i].extend(v.into_iter().take(3usize.saturating_sub(bad[i].len())));
        }
    }
    let names = [
        "TPC-C condition 1: w_ytd = sum(d_ytd)",
        "TPC-C condition 2: d_next_o_id - 1 = max(o_id) = max(no_o_id)",
        "TPC-C condition 3: new orders of a district are contiguous",
        "TPC-C condition 4: sum(o_ol_cnt) = order lines, per district",
    ];
    let checks = (0..4)
        .map(|i| {
            let detail = if bad_n[i] == 0 {
                format!("{} warehouses, {} districts", scale.w(), scale.w() * DISTRICTS)
            } else {
                format!("{} violations, e.g. {}", bad_n[i], bad[i].join("; "))
            };
            Check::new(names[i], bad_n[i] == 0, detail)
        })
        .collect();
    Ok((checks, totals))
}

/// Consistency conditions 1–4 (specification 3.3.2.1–3.3.2.4) on `subject` loaded at
/// `scale`: one [`Check`] per condition. Usable on any subject with the TPC-C schema, e.g.
/// after a restart.
pub fn consistency(subject: &dyn OltpSubject, scale: &TpccScale) -> Result<Vec<Check>, OpError> {
    consistency_totals(subject, scale).map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::tpcc::test_util::*;

    /// The checks hold after a real run (two workers one after the other on the same data, as
    /// after a restart) and fail on a New-Order that skips its district update and on a
    /// Payment that skips the warehouse, on every engine.
    #[test]
    fn checks_fail_on_broken_runs() {
        let dir = TestDir::new("bench-tpcc-broken");
        let seed = 37;
        println!("seed {seed}");
        for fault in [Fault::None, Fault::SkipDistrictUpdate, Fault::SkipWarehouseYtd] {
            let wl = TpccWorkload::new(TINY, &params(seed)).with_fault(fault);
            for engine in tpcc_engines() {
                let subject = loaded(&wl, &dir, engine);
                let mut reports = Vec::new();
                let mut failures = 0;
                for _restart in 0..2 {
                    let mut s = subject.session().unwrap();
                    let mut worker = wl.worker(0);
                    for _ in 0..150 {
                        assert!(worker.plan().is_some());
                        match worker.execute(s.as_mut()) {
                            Ok(_) => worker.committed(),
                            // Without the district update, the next New-Order of a district
                            // finds its order id taken.
                            Err(e) if fault == Fault::SkipDistrictUpdate => {
                                assert!(e.to_string().contains("exists"), "{engine}: {e}");
                                failures += 1;
                            }
                            Err(e) => panic!("{engine}: {e}"),
                        }
                    }
                    reports.push(worker.report());
                }
                let sum = |n: &str| reports.iter().map(|r| r.get(n)).sum::<u64>();
                assert!(DONE.iter().all(|d| sum(d) > 0), "every type ran: {reports:?}");
                let checks = wl.check(subject.as_ref(), &reports).unwrap();
                let failed: Vec<&str> =
                    checks.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect();
                match fault {
                    Fault::None => {
                        assert!(failed.is_empty(), "{engine}: {checks:?}");
                        assert!(sum("payments") > 0 && sum("delivered") > 0, "{reports:?}");
                        println!("{engine}: {}", checks[7].detail);
                    }
                    Fault::SkipDistrictUpdate => {
                        assert!(failures > 0);
                        assert_eq!(
                            failed,
                            ["TPC-C condition 2: d_next_o_id - 1 = max(o_id) = max(no_o_id)"],
                            "{engine}: {checks:?}"
                        );
                    }
                    Fault::SkipWarehouseYtd => {
                        assert_eq!(
                            failed,
                            ["TPC-C condition 1: w_ytd = sum(d_ytd)"],
                            "{engine}: {checks:?}"
                        );
                    }
                }
            }
        }
    }
}
