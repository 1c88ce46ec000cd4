//! The nine TPC-C tables (specification 1.3) as a typed schema, and which engines run it.
//! The schema is constant: the column positions in `mod.rs` are checked against it by
//! this file's test.

use super::*;

/// The TPC-C schema.
pub fn schema() -> Schema {
    use ColType::{F64, I64, Str};
    let mut warehouse = TableDef::new("warehouse").column("w_id", I64).column("w_name", Str);
    for c in ["w_street_1", "w_street_2", "w_city", "w_state", "w_zip"] {
        warehouse = warehouse.column(c, Str);
    }
    let warehouse = warehouse.column("w_tax", F64).column("w_ytd", I64).key(&[("w_id", 12)]);
    let mut district =
        TableDef::new("district").column("d_id", I64).column("d_w_id", I64).column("d_name", Str);
    for c in ["d_street_1", "d_street_2", "d_city", "d_state", "d_zip"] {
        district = district.column(c, Str);
    }
    let district = district
        .column("d_tax", F64)
        .column("d_ytd", I64)
        .column("d_next_o_id", I64)
        .key(&[("d_w_id", 12), ("d_id", 4)]);
    let mut customer = TableDef::new("customer")
        .column("c_id", I64)
        .column("c_d_id", I64)
        .column("c_w_id", I64)
        .column("c_first", Str)
        .column("c_middle", Str)
        .column("c_last", Str);
    for c in ["c_street_1", "c_street_2", "c_city", "c_state", "c_zip", "c_phone"] {
        customer = customer.column(c, Str);
    }
    let customer = customer
        .column("c_since", I64)
        .column("c_credit", Str)
        .column("c_credit_lim", I64)
        .column("c_discount", F64)
        .column("c_balance", I64)
        .column("c_ytd_payment", I64)
        .column("c_payment_cnt", I64)
        .column("c_delivery_cnt", I64)
        .column("c_data", Str)
        .key(&[("c_w_id", 12), ("c_d_id", 4), ("c_id", 12)])
        .index("customer_by_name", &["c_w_id", "c_d_id", "c_last", "c_first"], false);
    let history = TableDef::new("history")
        .column("h_thread", I64)
        .column("h_seq", I64)
        .column("h_c_id", I64)
        .column("h_c_d_id", I64)
        .column("h_c_w_id", I64)
        .column("h_d_id", I64)
        .column("h_w_id", I64)
        .column("h_date", I64)
        .column("h_amount", I64)
        .column("h_data", Str)
        .key(&[("h_thread", 12), ("h_seq", 48)]);
    let new_order = TableDef::new("new_order")
        .column("no_o_id", I64)
        .column("no_d_id", I64)
        .column("no_w_id", I64)
        .key(&[("no_w_id", 12), ("no_d_id", 4), ("no_o_id", 32)]);
    let orders = TableDef::new("orders")
        .column("o_id", I64)
        .column("o_d_id", I64)
        .column("o_w_id", I64)
        .column("o_c_id", I64)
        .column("o_entry_d", I64)
        .column("o_carrier_id", I64)
        .column("o_ol_cnt", I64)
        .column("o_all_local", I64)
        .key(&[("o_w_id", 12), ("o_d_id", 4), ("o_id", 32)])
        .index("orders_by_customer", &["o_w_id", "o_d_id", "o_c_id", "o_id"], false);
    let order_line = TableDef::new("order_line")
        .column("ol_o_id", I64)
        .column("ol_d_id", I64)
        .column("ol_w_id", I64)
        .column("ol_number", I64)
        .column("ol_i_id", I64)
        .column("ol_supply_w_id", I64)
        .column("ol_delivery_d", I64)
        .column("ol_quantity", I64)
        .column("ol_amount", I64)
        .column("ol_dist_info", Str)
        .key(&[("ol_w_id", 12), ("ol_d_id", 4), ("ol_o_id", 32), ("ol_number", 4)]);
    let item = TableDef::new("item")
        .column("i_id", I64)
        .column("i_im_id", I64)
        .column("i_name", Str)
        .column("i_price", I64)
        .column("i_data", Str)
        .key(&[("i_id", 20)]);
    let mut stock = TableDef::new("stock")
        .column("s_i_id", I64)
        .column("s_w_id", I64)
        .column("s_quantity", I64);
    for c in DIST_COLUMNS {
        stock = stock.column(c, Str);
    }
    let stock = stock
        .column("s_ytd", I64)
        .column("s_order_cnt", I64)
        .column("s_remote_cnt", I64)
        .column("s_data", Str)
        .key(&[("s_w_id", 12), ("s_i_id", 20)]);
    let s = Schema::new(vec![
        warehouse, district, customer, history, new_order, orders, order_line, item, stock,
    ]);
    // The definition above is constant and valid (a unit test opens it).
    s.unwrap_or_else(|e| unreachable!("TPC-C schema: {e}"))
}

pub(super) const DIST_COLUMNS: [&str; 10] = [
    "s_dist_01",
    "s_dist_02",
    "s_dist_03",
    "s_dist_04",
    "s_dist_05",
    "s_dist_06",
    "s_dist_07",
    "s_dist_08",
    "s_dist_09",
    "s_dist_10",
];

/// Whether `engine` runs TPC-C: every engine with an OLTP mapping except LMDB, whose
/// key-value mapping has no non-unique index (TPC-C needs two).
pub fn supports(engine: EngineId) -> bool {
    crate::oltp::supports(engine) && engine != EngineId::Lmdb
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::tpcc::test_util::*;

    #[test]
    fn schema_positions_match_names() {
        let s = schema();
        let pos = |t: usize, name: &str| s.tables[t].position(name);
        assert_eq!(pos(WAREHOUSE, "w_name"), Some(W_NAME));
        assert_eq!(pos(WAREHOUSE, "w_tax"), Some(W_TAX));
        assert_eq!(pos(WAREHOUSE, "w_ytd"), Some(W_YTD));
        assert_eq!(pos(DISTRICT, "d_name"), Some(D_NAME));
        assert_eq!(pos(DISTRICT, "d_tax"), Some(D_TAX));
        assert_eq!(pos(DISTRICT, "d_ytd"), Some(D_YTD));
        assert_eq!(pos(DISTRICT, "d_next_o_id"), Some(D_NEXT_O_ID));
        assert_eq!(pos(CUSTOMER, "c_id"), Some(C_ID));
        assert_eq!(pos(CUSTOMER, "c_last"), Some(C_LAST));
        assert_eq!(pos(CUSTOMER, "c_credit"), Some(C_CREDIT));
        assert_eq!(pos(CUSTOMER, "c_discount"), Some(C_DISCOUNT));
        assert_eq!(pos(CUSTOMER, "c_balance"), Some(C_BALANCE));
        assert_eq!(pos(CUSTOMER, "c_ytd_payment"), Some(C_YTD_PAYMENT));
        assert_eq!(pos(CUSTOMER, "c_payment_cnt"), Some(C_PAYMENT_CNT));
        assert_eq!(pos(CUSTOMER, "c_delivery_cnt"), Some(C_DELIVERY_CNT));
        assert_eq!(pos(CUSTOMER, "c_data"), Some(C_DATA));
        assert_eq!(pos(NEW_ORDER, "no_o_id"), Some(NO_O_ID));
        assert_eq!(pos(ORDERS, "o_id"), Some(O_ID));
        assert_eq!(pos(ORDERS, "o_c_id"), Some(O_C_ID));
        assert_eq!(pos(ORDERS, "o_carrier_id"), Some(O_CARRIER_ID));
        assert_eq!(pos(ORDERS, "o_ol_cnt"), Some(O_OL_CNT));
        assert_eq!(pos(ORDER_LINE, "ol_number"), Some(OL_NUMBER));
        assert_eq!(pos(ORDER_LINE, "ol_i_id"), Some(OL_I_ID));
        assert_eq!(pos(ORDER_LINE, "ol_delivery_d"), Some(OL_DELIVERY_D));
        assert_eq!(pos(ORDER_LINE, "ol_amount"), Some(OL_AMOUNT));
        assert_eq!(pos(ITEM, "i_price"), Some(I_PRICE));
        assert_eq!(pos(ITEM, "i_data"), Some(I_DATA));
        assert_eq!(pos(STOCK, "s_quantity"), Some(S_QUANTITY));
        assert_eq!(pos(STOCK, "s_dist_01"), Some(S_DIST_01));
        assert_eq!(pos(STOCK, "s_ytd"), Some(S_YTD));
        assert_eq!(pos(STOCK, "s_order_cnt"), Some(S_ORDER_CNT));
        assert_eq!(pos(STOCK, "s_remote_cnt"), Some(S_REMOTE_CNT));
        assert_eq!(pos(STOCK, "s_data"), Some(S_DATA));
        let names: Vec<&str> = s.tables.iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "warehouse",
                "district",
                "customer",
                "history",
                "new_order",
                "orders",
                "order_line",
                "item",
                "stock"
            ]
        );
        let c = &s.tables[CUSTOMER];
        assert_eq!(c.indexes[CUSTOMER_BY_NAME].columns, [2, 1, 5, 3], "(w, d, c_last, c_first)");
        assert_eq!(s.tables[ORDERS].indexes[ORDERS_BY_CUSTOMER].columns, [2, 1, 3, 0]);
        // Keys hold the largest values of the scale's limits.
        let max_w = i64::from(MAX_WAREHOUSES);
        assert!(s.tables[ORDER_LINE].pack(&[max_w, 10, i64::from(u32::MAX), 15]).is_ok());
        assert!(s.tables[STOCK].pack(&[max_w, (1 << 20) - 1]).is_ok());
        assert!(s.tables[CUSTOMER].pack(&[max_w, 10, 4095]).is_ok());
        assert!(s.tables[HISTORY].pack(&[4095, (1 << 48) - 1]).is_ok());
    }

    /// LMDB does not run TPC-C: the registry says so, and opening the schema is refused.
    #[test]
    fn lmdb_is_refused_cleanly() {
        use crate::workload::WorkloadId;
        assert!(!supports(EngineId::Lmdb));
        assert!(!WorkloadId::Tpcc(TINY).supports(EngineId::Lmdb));
        assert!(!WorkloadId::Tpcc(TINY).supports(EngineId::Pmdk));
        assert!(WorkloadId::Tpcc(TINY).supports(EngineId::SqliteWalFull));
        if EngineId::available().contains(&EngineId::Lmdb) {
            let dir = TestDir::new("bench-tpcc-lmdb");
            let schema = Arc::new(schema());
            let r = oltp::open(EngineId::Lmdb, dir.path(), &setup(&schema), &schema);
            let e = r.err().expect("LMDB refuses the TPC-C schema").to_string();
            assert!(e.contains("index"), "{e}");
        }
    }
}
