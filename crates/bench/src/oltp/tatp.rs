//! TATP (Telecom Application Transaction Processing) on the OLTP layer.
//!
//! Tables, for `P` subscribers with `s_id` in `1..=P`:
//! - `subscriber(s_id, sub_nbr, bit_1..bit_10, hex_1..hex_10, byte2_1..byte2_10,
//!   msc_location, vlr_location)`, key `s_id`, unique index on `sub_nbr`;
//! - `access_info(s_id, ai_type, data1, data2, data3, data4)`, key `(s_id, ai_type)`, 1–4 rows
//!   per subscriber with distinct `ai_type` in 1..=4;
//! - `special_facility(s_id, sf_type, is_active, error_cntrl, data_a, data_b)`, key
//!   `(s_id, sf_type)`, 1–4 rows per subscriber with distinct `sf_type` in 1..=4, active with
//!   probability 85 %;
//! - `call_forwarding(s_id, sf_type, start_time, end_time, numberx)`, key
//!   `(s_id, sf_type, start_time)`, 0–3 rows per special facility with distinct `start_time`
//!   in {0, 8, 16} and `end_time = start_time + 1..=8`.
//!
//! `sub_nbr` is TATP's 15-digit subscriber number, zero-padded `s_id`; every engine stores it
//! as the `i64` number it spells ([`sub_nbr_string`] is its string form), so the unique index
//! is an integer index on every engine, LMDB's key-value mapping included.
//!
//! # Invariants
//! - The population is a pure function of (seed, `s_id`) ([`population`]): the check
//!   recomputes the loaded row counts instead of trusting the loader.
//! - The seven transactions ([`transaction`]) return `Ok(true)` on success and `Ok(false)` on
//!   a failure the specification expects (no destination found, no access row, no facility,
//!   duplicate or absent call forwarding); such a transaction still commits and is counted per
//!   type apart from aborts. `Err` is an engine error or a retryable conflict.
//! - Workers count the call-forwarding rows their committed transactions inserted and
//!   deleted; the check compares the table against the load plus those counts.
//!
//! # Concurrency
//! Each worker draws its own inputs from its own random stream; conflicts between workers are
//! the engines' business (retryable errors, retried by the runner).

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use ferrite::Value;

use super::{
    ColType, OltpOps, OltpSession, OltpSubject, OltpWorker, OltpWorkload, Range, Row, Schema,
    TableDef, run_retrying,
};
use crate::keys::Rng;
use crate::subject::{OpError, TxnKind};
use crate::workload::{Check, WorkerReport, WorkloadParams, problems_check};

/// One line for `--list`.
pub const DESCRIPTION: &str = "TATP: the seven telecom transactions (35/10/35/2/14/2/2), \
                               non-uniform subscriber choice, expected failures counted apart; \
                               scale --subscribers (default 100000)";

/// Default subscribers.
pub const DEFAULT_SUBSCRIBERS: u32 = 100_000;

/// Table ids.
pub const SUBSCRIBER: usize = 0;
/// Access info table.
pub const ACCESS_INFO: usize = 1;
/// Special facility table.
pub const SPECIAL_FACILITY: usize = 2;
/// Call forwarding table.
pub const CALL_FORWARDING: usize = 3;

/// Subscriber columns: `s_id`, `sub_nbr`, then these.
const S_BIT_1: usize = 2;
const S_VLR_LOCATION: usize = 33;
/// Special facility columns.
const SF_IS_ACTIVE: usize = 2;
const SF_DATA_A: usize = 4;
/// Call forwarding columns.
const CF_END_TIME: usize = 3;
const CF_NUMBERX: usize = 4;

/// Bits of `s_id` in keys (up to 2^34 − 1 subscribers).
const SID_BITS: u32 = 34;

const BITS: [&str; 10] =
    ["bit_1", "bit_2", "bit_3", "bit_4", "bit_5", "bit_6", "bit_7", "bit_8", "bit_9", "bit_10"];
const HEXES: [&str; 10] =
    ["hex_1", "hex_2", "hex_3", "hex_4", "hex_5", "hex_6", "hex_7", "hex_8", "hex_9", "hex_10"];
const BYTES: [&str; 10] = [
    "byte2_1", "byte2_2", "byte2_3", "byte2_4", "byte2_5", "byte2_6", "byte2_7", "byte2_8",
    "byte2_9", "byte2_10",
];

/// The transaction types, in mix order.
pub const TXN_TYPES: [&str; 7] = [
    "get_subscriber_data",
    "get_new_destination",
    "get_access_data",
    "update_subscriber_data",
    "update_location",
    "insert_call_forwarding",
    "delete_call_forwarding",
];

/// Cumulative mix in percent (35/10/35/2/14/2/2).
const MIX: [u64; 7] = [35, 45, 80, 82, 96, 98, 100];

/// Report counts: expected failures per type.
const MISS: [&str; 7] = [
    "miss_get_subscriber_data",
    "miss_get_new_destination",
    "miss_get_access_data",
    "miss_update_subscriber_data",
    "miss_update_location",
    "miss_insert_call_forwarding",
    "miss_delete_call_forwarding",
];
/// Report counts: committed transactions per type.
const DONE: [&str; 7] = [
    "txns_get_subscriber_data",
    "txns_get_new_destination",
    "txns_get_access_data",
    "txns_update_subscriber_data",
    "txns_update_location",
    "txns_insert_call_forwarding",
    "txns_delete_call_forwarding",
];

/// A deliberately broken worker, for the check's self-test.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// The real worker.
    #[default]
    None,
    /// Does not count the call-forwarding rows it inserts.
    UncountedInsert,
}

/// The TATP schema.
pub fn schema() -> Schema {
    let mut sub =
        TableDef::new("subscriber").column("s_id", ColType::I64).column("sub_nbr", ColType::I64);
    for name in BITS.iter().chain(&HEXES).chain(&BYTES) {
        sub = sub.column(name, ColType::I64);
    }
    let sub = sub
        .column("msc_location", ColType::I64)
        .column("vlr_location", ColType::I64)
        .key(&[("s_id", SID_BITS)])
        .index("subscriber_sub_nbr", &["sub_nbr"], true);
    let s = Schema::new(vec![
        sub,
        TableDef::new("access_info")
            .column("s_id", ColType::I64)
            .column("ai_type", ColType::I64)
            .column("data1", ColType::I64)
            .column("data2", ColType::I64)
            .column("data3", ColType::Str)
            .column("data4", ColType::Str)
            .key(&[("s_id", SID_BITS), ("ai_type", 3)]),
        TableDef::new("special_facility")
            .column("s_id", ColType::I64)
            .column("sf_type", ColType::I64)
            .column("is_active", ColType::I64)
            .column("error_cntrl", ColType::I64)
            .column("data_a", ColType::I64)
            .column("data_b", ColType::Str)
            .key(&[("s_id", SID_BITS), ("sf_type", 3)]),
        TableDef::new("call_forwarding")
            .column("s_id", ColType::I64)
            .column("sf_type", ColType::I64)
            .column("start_time", ColType::I64)
            .column("end_time", ColType::I64)
            .column("numberx", ColType::Str)
            .key(&[("s_id", SID_BITS), ("sf_type", 3), ("start_time", 5)]),
    ]);
    // The definition above is constant and valid (a unit test opens it).
    s.unwrap_or_else(|e| unreachable!("TATP schema: {e}"))
}

/// The 15-digit string form of a subscriber number.
pub fn sub_nbr_string(sub_nbr: i64) -> String {
    format!("{sub_nbr:015}")
}

/// TATP's `A` for `p` subscribers.
pub fn nonuniform_a(p: u64) -> u64 {
    if p > 10_000_000 {
        2_097_151
    } else if p > 1_000_000 {
        1_048_575
    } else {
        65_535
    }
}

/// The non-uniform subscriber id from its two draws: `a` in `0..=A`, `r` in `1..=p`.
pub fn nonuniform_sid(a: u64, r: u64, p: u64) -> i64 {
    ((a | r) % p.max(1) + 1) as i64
}

/// Draws a non-uniform subscriber id in `1..=p`.
pub fn draw_sid(rng: &mut Rng, p: u64) -> i64 {
    let a = rng.below(nonuniform_a(p) + 1);
    let r = 1 + rng.below(p.max(1));
    nonuniform_sid(a, r, p)
}

fn upper(rng: &mut Rng, n: usize) -> Value {
    Value::Str((0..n).map(|_| char::from(b'A' + rng.below(26) as u8)).collect())
}

fn digits(rng: &mut Rng, n: usize) -> String {
    (0..n).map(|_| char::from(b'0' + rng.below(10) as u8)).collect()
}

/// `n` distinct values of `from`, in ascending order (`from` ascending).
fn distinct(rng: &mut Rng, from: &[i64], n: usize) -> Vec<i64> {
    let mut v = from.to_vec();
    for i in 0..n.min(v.len()) {
        let j = i + rng.below((v.len() - i) as u64) as usize;
        v.swap(i, j);
    }
    v.truncate(n);
    v.sort_unstable();
    v
}

/// The rows of one subscriber.
#[derive(Clone, Debug, PartialEq)]
pub struct Population {
    /// The subscriber row.
    pub subscriber: Row,
    /// Its access info rows.
    pub access_info: Vec<Row>,
    /// Its special facility rows.
    pub special_facility: Vec<Row>,
    /// Its call forwarding rows.
    pub call_forwarding: Vec<Row>,
}

/// The rows of subscriber `s_id` for the run seeded with `seed`.
pub fn population(seed: u64, s_id: i64) -> Population {
    let mut rng = Rng::new(seed, (1 << 40) + s_id as u64);
    let i = Value::I64;
    let mut sub = vec![i(s_id), i(s_id)];
    sub.extend((0..10).map(|_| i(rng.below(2) as i64)));
    sub.extend((0..10).map(|_| i(rng.below(16) as i64)));
    sub.extend((0..10).map(|_| i(rng.below(256) as i64)));
    sub.push(i(i64::from(rng.next_u64() as u32)));
    sub.push(i(i64::from(rng.next_u64() as u32)));
    let n = 1 + rng.below(4) as usize;
    let access_info = distinct(&mut rng, &[1, 2, 3, 4], n)
        .into_iter()
        .map(|ai| {
            let (d1, d2) = (rng.below(256) as i64, rng.below(256) as i64);
            vec![i(s_id), i(ai), i(d1), i(d2), upper(&mut rng, 3), upper(&mut rng, 5)]
        })
        .collect();
    let n = 1 + rng.below(4) as usize;
    let mut special_facility = Vec::new();
    let mut call_forwarding = Vec::new();
    for sf in distinct(&mut rng, &[1, 2, 3, 4], n) {
        let active = i64::from(rng.below(100) < 85);
        let (err, da) = (rng.below(256) as i64, rng.below(256) as i64);
        special_facility.push(vec![i(s_id), i(sf), i(active), i(err), i(da), upper(&mut rng, 5)]);
        let n = rng.below(4) as usize;
        for start in distinct(&mut rng, &[0, 8, 16], n) {
            let end = start + 1 + rng.below(8) as i64;
            call_forwarding.push(vec![
                i(s_id),
                i(sf),
                i(start),
                i(end),
                Value::Str(digits(&mut rng, 15)),
            ]);
        }
    }
    Population { subscriber: sub, access_info, special_facility, call_forwarding }
}

/// One transaction with its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TatpTxn {
    /// Reads the subscriber row.
    GetSubscriberData {
        /// Subscriber.
        s_id: i64,
    },
    /// Active facility `sf_type` joined with its call forwardings that started by
    /// `start_time` and end after `end_time`.
    GetNewDestination {
        /// Subscriber.
        s_id: i64,
        /// Facility type.
        sf_type: i64,
        /// 0, 8 or 16.
        start_time: i64,
        /// 1..=24.
        end_time: i64,
    },
    /// Reads access info `(s_id, ai_type)`.
    GetAccessData {
        /// Subscriber.
        s_id: i64,
        /// Access type.
        ai_type: i64,
    },
    /// Sets the subscriber's `bit_1` and the facility's `data_a`.
    UpdateSubscriberData {
        /// Subscriber.
        s_id: i64,
        /// Facility type.
        sf_type: i64,
        /// New `bit_1`.
        bit_1: i64,
        /// New `data_a`.
        data_a: i64,
    },
    /// Sets `vlr_location` of the subscriber numbered `sub_nbr`.
    UpdateLocation {
        /// Subscriber number.
        sub_nbr: i64,
        /// New location.
        vlr_location: i64,
    },
    /// Inserts a call forwarding for the subscriber numbered `sub_nbr`.
    InsertCallForwarding {
        /// Subscriber number.
        sub_nbr: i64,
        /// Facility type.
        sf_type: i64,
        /// 0, 8 or 16.
        start_time: i64,
        /// `start_time` + 1..=8.
        end_time: i64,
        /// 15 digits.
        numberx: String,
    },
    /// Deletes a call forwarding of the subscriber numbered `sub_nbr`.
    DeleteCallForwarding {
        /// Subscriber number.
        sub_nbr: i64,
        /// Facility type.
        sf_type: i64,
        /// 0, 8 or 16.
        start_time: i64,
    },
}

impl TatpTxn {
    /// Position in [`TXN_TYPES`].
    pub fn type_index(&self) -> usize {
        match self {
            TatpTxn::GetSubscriberData { .. } => 0,
            TatpTxn::GetNewDestination { .. } => 1,
            TatpTxn::GetAccessData { .. } => 2,
            TatpTxn::UpdateSubscriberData { .. } => 3,
            TatpTxn::UpdateLocation { .. } => 4,
            TatpTxn::InsertCallForwarding { .. } => 5,
            TatpTxn::DeleteCallForwarding { .. } => 6,
        }
    }

    /// Read-only types run as read-only transactions.
    pub fn kind(&self) -> TxnKind {
        if self.type_index() < 3 { TxnKind::ReadOnly } else { TxnKind::ReadWrite }
    }
}

/// Draws the next transaction for `p` subscribers.
pub fn plan(rng: &mut Rng, p: u64) -> TatpTxn {
    let pick = rng.below(100);
    let ty = MIX.iter().position(|&m| pick < m).unwrap_or(0);
    let s_id = draw_sid(rng, p);
    let start = |rng: &mut Rng| 8 * rng.below(3) as i64;
    let sf_type = 1 + rng.below(4) as i64;
    match ty {
        0 => TatpTxn::GetSubscriberData { s_id },
        1 => {
            let start_time = start(rng);
            TatpTxn::GetNewDestination {
                s_id,
                sf_type,
                start_time,
                end_time: 1 + rng.below(24) as i64,
            }
        }
        2 => TatpTxn::GetAccessData { s_id, ai_type: sf_type },
        3 => TatpTxn::UpdateSubscriberData {
            s_id,
            sf_type,
            bit_1: rng.below(2) as i64,
            data_a: rng.below(256) as i64,
        },
        4 => TatpTxn::UpdateLocation {
            sub_nbr: s_id,
            vlr_location: i64::from(rng.next_u64() as u32),
        },
        5 => {
            let start_time = start(rng);
            TatpTxn::InsertCallForwarding {
                sub_nbr: s_id,
                sf_type,
                start_time,
                end_time: start_time + 1 + rng.below(8) as i64,
                numberx: digits(rng, 15),
            }
        }
        _ => TatpTxn::DeleteCallForwarding { sub_nbr: s_id, sf_type, start_time: start(rng) },
    }
}

/// The `s_id` of the subscriber numbered `sub_nbr`, through the unique index.
fn sid_of(ops: &mut dyn OltpOps, sub_nbr: i64) -> Result<Option<i64>, OpError> {
    let mut sid = None;
    ops.scan(SUBSCRIBER, &Range::index(0, vec![Value::I64(sub_nbr)]).limit(1), &mut |row| {
        sid = row.first().and_then(Value::as_i64);
    })?;
    Ok(sid)
}

/// Runs `txn`: `Ok(true)` on success, `Ok(false)` on a failure the specification expects.
pub fn transaction(ops: &mut dyn OltpOps, txn: &TatpTxn) -> Result<bool, OpError> {
    let mut row = Row::new();
    match *txn {
        TatpTxn::GetSubscriberData { s_id } => ops.get(SUBSCRIBER, &[s_id], &mut row),
        TatpTxn::GetNewDestination { s_id, sf_type, start_time, end_time } => {
            if !ops.get(SPECIAL_FACILITY, &[s_id, sf_type], &mut row)?
                || row.get(SF_IS_ACTIVE).and_then(Value::as_i64) != Some(1)
            {
                return Ok(false);
            }
            let range = Range::primary(vec![Value::I64(s_id), Value::I64(sf_type)])
                .between(Bound::Unbounded, Bound::Included(Value::I64(start_time)));
            let mut found = 0;
            ops.scan(CALL_FORWARDING, &range, &mut |cf| {
                let end = cf.get(CF_END_TIME).and_then(Value::as_i64).unwrap_or(i64::MIN);
                if end > end_time && matches!(cf.get(CF_NUMBERX), Some(Value::Str(_))) {
                    found += 1;
                }
            })?;
            Ok(found > 0)
        }
        TatpTxn::GetAccessData { s_id, ai_type } => {
            ops.get(ACCESS_INFO, &[s_id, ai_type], &mut row)
        }
        TatpTxn::UpdateSubscriberData { s_id, sf_type, bit_1, data_a } => {
            if !ops.update(SUBSCRIBER, &[s_id], &[(S_BIT_1, Value::I64(bit_1))])? {
                return Ok(false);
            }
            ops.update(SPECIAL_FACILITY, &[s_id, sf_type], &[(SF_DATA_A, Value::I64(data_a))])
        }
        TatpTxn::UpdateLocation { sub_nbr, vlr_location } => match sid_of(ops, sub_nbr)? {
            Some(s_id) => {
                ops.update(SUBSCRIBER, &[s_id], &[(S_VLR_LOCATION, Value::I64(vlr_location))])
            }
            None => Ok(false),
        },
        TatpTxn::InsertCallForwarding { sub_nbr, sf_type, start_time, end_time, ref numberx } => {
            let Some(s_id) = sid_of(ops, sub_nbr)? else { return Ok(false) };
            let mut types = Vec::new();
            ops.scan(SPECIAL_FACILITY, &Range::primary(vec![Value::I64(s_id)]), &mut |sf| {
                types.extend(sf.get(1).and_then(Value::as_i64));
            })?;
            if !types.contains(&sf_type) {
                return Ok(false);
            }
            let i = Value::I64;
            ops.insert(
                CALL_FORWARDING,
                vec![i(s_id), i(sf_type), i(start_time), i(end_time), Value::Str(numberx.clone())],
            )
        }
        TatpTxn::DeleteCallForwarding { sub_nbr, sf_type, start_time } => {
            match sid_of(ops, sub_nbr)? {
                Some(s_id) => ops.delete(CALL_FORWARDING, &[s_id, sf_type, start_time]),
                None => Ok(false),
            }
        }
    }
}

/// TATP for one point.
#[derive(Debug)]
pub struct Tatp {
    subscribers: u32,
    schema: Arc<Schema>,
    seed: u64,
    fault: Fault,
    loaded: OnceLock<[u64; 4]>,
}

impl Tatp {
    /// TATP with `subscribers` subscribers (at least 1) and the point's parameters (seed).
    pub fn new(subscribers: u32, p: &WorkloadParams) -> Self {
        Tatp {
            subscribers: subscribers.max(1),
            schema: Arc::new(schema()),
            seed: p.seed,
            fault: Fault::None,
            loaded: OnceLock::new(),
        }
    }

    /// The same workload with a broken worker (tests of the check).
    #[doc(hidden)]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Rows loaded per table (recomputed from the generator, once).
    pub fn loaded_counts(&self) -> [u64; 4] {
        *self.loaded.get_or_init(|| {
            let mut c = [0u64; 4];
            for s_id in 1..=i64::from(self.subscribers) {
                let p = population(self.seed, s_id);
                c[0] += 1;
                c[1] += p.access_info.len() as u64;
                c[2] += p.special_facility.len() as u64;
                c[3] += p.call_forwarding.len() as u64;
            }
            c
        })
    }
}

/// Subscribers loaded per transaction (about ten rows each).
const LOAD_BATCH: i64 = 100;

impl OltpWorkload for Tatp {
    fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("subscribers".into(), self.subscribers.to_string()),
            ("a".into(), nonuniform_a(u64::from(self.subscribers)).to_string()),
            ("seed".into(), self.seed.to_string()),
        ])
    }

    fn txn_types(&self) -> Vec<&'static str> {
        TXN_TYPES.to_vec()
    }

    fn loaded_bytes(&self) -> u64 {
        // A subscriber row (~300 bytes) and about 9 smaller rows.
        u64::from(self.subscribers) * 900
    }

    fn ops_per_txn(&self) -> u64 {
        2
    }

    fn bytes_per_txn(&self) -> u64 {
        // 20 % writers rewriting a row of up to ~300 bytes.
        200
    }

    fn load(&self, subject: &dyn OltpSubject) -> Result<(), OpError> {
        let mut s = subject.session()?;
        let n = i64::from(self.subscribers);
        let mut start = 1;
        while start <= n {
            let end = (start + LOAD_BATCH).min(n + 1);
            run_retrying(s.as_mut(), TxnKind::ReadWrite, &mut |ops| {
                for s_id in start..end {
                    let p = population(self.seed, s_id);
                    let tables = [
                        (SUBSCRIBER, vec![p.subscriber]),
                        (ACCESS_INFO, p.access_info),
                        (SPECIAL_FACILITY, p.special_facility),
                        (CALL_FORWARDING, p.call_forwarding),
                    ];
                    for (t, rows) in tables {
                        for row in rows {
                            if !ops.insert(t, row)? {
                                return Err(OpError::Engine(format!(
                                    "load: a row of subscriber {s_id} in table {t} exists"
                                )));
                            }
                        }
                    }
                }
                Ok(())
            })?;
            start = end;
        }
        Ok(())
    }

    fn worker(&self, index: usize) -> Box<dyn OltpWorker + '_> {
        Box::new(TatpWorker {
            w: self,
            rng: Rng::new(self.seed, 7000 + index as u64),
            txn: TatpTxn::GetSubscriberData { s_id: 1 },
            outcome: false,
            report: WorkerReport { thread: index, ..WorkerReport::default() },
        })
    }

    fn check(
        &self,
        subject: &dyn OltpSubject,
        reports: &[WorkerReport],
    ) -> Result<Vec<Check>, OpError> {
        let mut s = subject.session()?;
        let mut counts = [0u64; 4];
        let mut facilities: HashSet<(i64, i64)> = HashSet::new();
        let mut orphans: Vec<(i64, i64, i64)> = Vec::new();
        let mut bad_nbr = 0u64;
        let mut orphan_count = 0u64;
        run_retrying(s.as_mut(), TxnKind::ReadOnly, &mut |ops| {
            counts = [0; 4];
            facilities.clear();
            orphans.clear();
            (bad_nbr, orphan_count) = (0, 0);
            let int = |row: &[Value], c: usize| row.get(c).and_then(Value::as_i64).unwrap_or(-1);
            counts[SUBSCRIBER] = ops.scan(SUBSCRIBER, &Range::all(), &mut |row| {
                if int(row, 0) != int(row, 1) {
                    bad_nbr += 1;
                }
            })? as u64;
            counts[ACCESS_INFO] = ops.scan(ACCESS_INFO, &Range::all(), &mut |_| {})? as u64;
            counts[SPECIAL_FACILITY] = ops.scan(SPECIAL_FACILITY, &Range::all(), &mut |row| {
                facilities.insert((int(row, 0), int(row, 1)));
            })? as u64;
            counts[CALL_FORWARDING] = ops.scan(CALL_FORWARDING, &Range::all(), &mut |row| {
                if !facilities.contains(&(int(row, 0), int(row, 1))) {
                    orphan_count += 1;
                    if orphans.len() < 3 {
                        orphans.push((int(row, 0), int(row, 1), int(row, 2)));
                    }
                }
            })? as u64;
            Ok(())
        })?;
        let loaded = self.loaded_counts();
        let sum = |name: &str| reports.iter().map(|r| r.get(name)).sum::<u64>();
        let (inserted, deleted) = (sum("cf_inserted"), sum("cf_deleted"));
        let want_cf = (loaded[CALL_FORWARDING] + inserted).checked_sub(deleted);
        let mut out = vec![
            Check::new(
                "subscribers: one row per subscriber, sub_nbr = s_id",
                counts[SUBSCRIBER] == u64::from(self.subscribers) && bad_nbr == 0,
                format!(
                    "{} rows for {} subscribers, {bad_nbr} with a wrong sub_nbr",
                    counts[SUBSCRIBER], self.subscribers
                ),
            ),
            Check::new(
                "access_info and special_facility keep their loaded counts",
                counts[ACCESS_INFO] == loaded[ACCESS_INFO]
                    && counts[SPECIAL_FACILITY] == loaded[SPECIAL_FACILITY],
                format!(
                    "access_info {} (loaded {}), special_facility {} (loaded {})",
                    counts[ACCESS_INFO],
                    loaded[ACCESS_INFO],
                    counts[SPECIAL_FACILITY],
                    loaded[SPECIAL_FACILITY]
                ),
            ),
            Check::new(
                "call_forwarding = loaded + inserted - deleted",
                want_cf == Some(counts[CALL_FORWARDING]),
                format!(
                    "{} rows; loaded {}, inserted {inserted}, deleted {deleted}",
                    counts[CALL_FORWARDING], loaded[CALL_FORWARDING]
                ),
            ),
            Check::new(
                "every call_forwarding row has its special_facility",
                orphan_count == 0,
                if orphan_count == 0 {
                    format!("{} rows", counts[CALL_FORWARDING])
                } else {
                    format!("{orphan_count} orphans, e.g. {orphans:?}")
                },
            ),
        ];
        // Expected failures: committed, reported per type, never an abort.
        let rates: Vec<String> = (0..TXN_TYPES.len())
            .filter(|&t| sum(DONE[t]) > 0 && t != 0 && t != 4)
            .map(|t| {
                let (miss, done) = (sum(MISS[t]), sum(DONE[t]));
                format!(
                    "{} {miss}/{done} ({:.1} %)",
                    TXN_TYPES[t],
                    100.0 * miss as f64 / done as f64
                )
            })
            .collect();
        let unexpected = sum(MISS[0]) + sum(MISS[4]);
        out.push(Check::new(
            "expected failures (committed, counted apart from aborts)",
            unexpected == 0,
            if rates.is_empty() { "none ran".to_string() } else { rates.join(", ") }
                + &if unexpected > 0 {
                    format!("; {unexpected} subscriber reads missed a subscriber")
                } else {
                    String::new()
                },
        ));
        out.push(problems_check("no worker saw a problem", reports));
        Ok(out)
    }
}

struct TatpWorker<'a> {
    w: &'a Tatp,
    rng: Rng,
    txn: TatpTxn,
    outcome: bool,
    report: WorkerReport,
}

impl OltpWorker for TatpWorker<'_> {
    fn plan(&mut self) -> Option<usize> {
        self.txn = plan(&mut self.rng, u64::from(self.w.subscribers));
        Some(self.txn.type_index())
    }

    fn execute(&mut self, session: &mut dyn OltpSession) -> Result<u64, OpError> {
        let txn = &self.txn;
        let mut outcome = false;
        session.run(txn.kind(), &mut |ops| {
            outcome = transaction(ops, txn)?;
            Ok(())
        })?;
        self.outcome = outcome;
        Ok(match txn.type_index() {
            0 | 2 | 4 => 1,
            _ => 2,
        })
    }

    fn committed(&mut self) {
        let t = self.txn.type_index();
        self.report.add("txns", 1);
        self.report.add(DONE[t], 1);
        if !self.outcome {
            self.report.add(MISS[t], 1);
        } else if t == 5 && self.w.fault != Fault::UncountedInsert {
            self.report.add("cf_inserted", 1);
        } else if t == 6 {
            self.report.add("cf_deleted", 1);
        }
    }

    fn report(&self) -> WorkerReport {
        self.report.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp;
    use crate::subject::SubjectSetup;
    use ferrite::pmem::internals::testing::TestDir;

    use crate::oltp::testing::{engines, params};

    fn setup(schema: &Schema) -> SubjectSetup {
        crate::oltp::testing::setup(schema, 4 << 20)
    }

    fn int(row: &[Value], c: usize) -> i64 {
        row[c].as_i64().unwrap()
    }

    #[test]
    fn schema_positions_match_names() {
        let s = schema();
        let sub = &s.tables[SUBSCRIBER];
        assert_eq!(sub.columns.len(), 34);
        assert_eq!(sub.position("bit_1"), Some(S_BIT_1));
        assert_eq!(sub.position("vlr_location"), Some(S_VLR_LOCATION));
        assert_eq!(sub.indexes[0].columns, vec![1]);
        assert_eq!(s.tables[SPECIAL_FACILITY].position("is_active"), Some(SF_IS_ACTIVE));
        assert_eq!(s.tables[SPECIAL_FACILITY].position("data_a"), Some(SF_DATA_A));
        assert_eq!(s.tables[CALL_FORWARDING].position("end_time"), Some(CF_END_TIME));
        assert_eq!(s.tables[CALL_FORWARDING].position("numberx"), Some(CF_NUMBERX));
        assert_eq!(sub_nbr_string(42), "000000000000042");
        assert_eq!(MIX[6], 100);
    }

    #[test]
    fn population_follows_the_rules() {
        let seed = 5;
        println!("seed {seed}");
        let s = schema();
        let mut seen_counts = [[false; 5]; 2];
        let (mut active, mut facilities) = (0, 0);
        for s_id in 1..=300 {
            let p = population(seed, s_id);
            assert_eq!(p, population(seed, s_id), "a pure function of (seed, s_id)");
            let sub = &p.subscriber;
            s.tables[SUBSCRIBER].check_row(sub).unwrap();
            assert_eq!((int(sub, 0), int(sub, 1)), (s_id, s_id));
            for c in 0..30 {
                let max = [2, 16, 256][c / 10];
                assert!((0..max).contains(&int(sub, 2 + c)), "{s_id} column {c}");
            }
            assert!((0..1 << 32).contains(&int(sub, 32)) && (0..1 << 32).contains(&int(sub, 33)));
            // Access info: 1..=4 rows, distinct types in 1..=4, data in range.
            let ai: Vec<i64> = p.access_info.iter().map(|r| int(r, 1)).collect();
            assert!((1..=4).contains(&ai.len()) && ai.windows(2).all(|w| w[0] < w[1]), "{ai:?}");
            assert!(ai.iter().all(|t| (1..=4).contains(t)));
            seen_counts[0][ai.len()] = true;
            for r in &p.access_info {
                s.tables[ACCESS_INFO].check_row(r).unwrap();
                assert_eq!(int(r, 0), s_id);
                assert!((0..256).contains(&int(r, 2)) && (0..256).contains(&int(r, 3)));
                for (c, n) in [(4, 3), (5, 5)] {
                    let Value::Str(x) = &r[c] else { panic!() };
                    assert!(x.len() == n && x.bytes().all(|b| b.is_ascii_uppercase()), "{x}");
                }
            }
            // Special facilities: 1..=4, distinct, 85 % active.
            let sf: Vec<i64> = p.special_facility.iter().map(|r| int(r, 1)).collect();
            assert!((1..=4).contains(&sf.len()) && sf.windows(2).all(|w| w[0] < w[1]), "{sf:?}");
            assert!(sf.iter().all(|t| (1..=4).contains(t)));
            seen_counts[1][sf.len()] = true;
            for r in &p.special_facility {
                s.tables[SPECIAL_FACILITY].check_row(r).unwrap();
                assert!((0..=1).contains(&int(r, 2)));
                active += int(r, 2);
                facilities += 1;
                assert!((0..256).contains(&int(r, 3)) && (0..256).contains(&int(r, 4)));
                // Its call forwardings: 0..=3, distinct start in {0, 8, 16}.
                let cf: Vec<&Row> =
                    p.call_forwarding.iter().filter(|c| int(c, 1) == int(r, 1)).collect();
                assert!(cf.len() <= 3);
                let starts: Vec<i64> = cf.iter().map(|c| int(c, 2)).collect();
                assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
                for c in cf {
                    s.tables[CALL_FORWARDING].check_row(c).unwrap();
                    let (start, end) = (int(c, 2), int(c, 3));
                    assert!([0, 8, 16].contains(&start) && (start + 1..=start + 8).contains(&end));
                    let Value::Str(x) = &c[4] else { panic!() };
                    assert!(x.len() == 15 && x.bytes().all(|b| b.is_ascii_digit()));
                }
            }
            assert!(p.call_forwarding.iter().all(|c| sf.contains(&int(c, 1))));
        }
        assert_eq!(seen_counts, [[false, true, true, true, true]; 2], "1 to 4 rows all occur");
        // 85 % active, within a wide margin (deterministic for the seed).
        let pct = 100 * active / facilities;
        assert!((75..=95).contains(&pct), "{pct} % of {facilities}");
    }

    #[test]
    fn nonuniform_generator_by_hand() {
        // ((a | r) % p) + 1 on fixed draws.
        assert_eq!(nonuniform_sid(0, 1, 10), 2);
        assert_eq!(nonuniform_sid(4, 3, 10), 8);
        assert_eq!(nonuniform_sid(8, 10, 10), 1);
        assert_eq!(nonuniform_sid(65_535, 5, 100), 36);
        assert_eq!(nonuniform_sid(0, 100, 100), 1);
        assert_eq!(nonuniform_a(100_000), 65_535);
        assert_eq!(nonuniform_a(1_000_000), 65_535);
        assert_eq!(nonuniform_a(1_000_001), 1_048_575);
        assert_eq!(nonuniform_a(10_000_001), 2_097_151);
        let seed = 9;
        println!("seed {seed}");
        let mut rng = Rng::new(seed, 0);
        for p in [1, 7, 1000, 100_000] {
            for _ in 0..5000 {
                assert!((1..=p as i64).contains(&draw_sid(&mut rng, p)), "p = {p}");
            }
        }
        // The mix and the inputs' ranges.
        let mut per_type = [0u32; 7];
        let n = 100_000;
        for _ in 0..n {
            let t = plan(&mut rng, 1000);
            per_type[t.type_index()] += 1;
            let (sid, sf, start) = match t {
                TatpTxn::GetSubscriberData { s_id } => (s_id, 1, 0),
                TatpTxn::GetNewDestination { s_id, sf_type, start_time, end_time } => {
                    assert!((1..=24).contains(&end_time));
                    (s_id, sf_type, start_time)
                }
                TatpTxn::GetAccessData { s_id, ai_type } => (s_id, ai_type, 0),
                TatpTxn::UpdateSubscriberData { s_id, sf_type, bit_1, data_a } => {
                    assert!((0..=1).contains(&bit_1) && (0..256).contains(&data_a));
                    (s_id, sf_type, 0)
                }
                TatpTxn::UpdateLocation { sub_nbr, .. } => (sub_nbr, 1, 0),
                TatpTxn::InsertCallForwarding {
                    sub_nbr, sf_type, start_time, end_time, ..
                } => {
                    assert!((start_time + 1..=start_time + 8).contains(&end_time));
                    (sub_nbr, sf_type, start_time)
                }
                TatpTxn::DeleteCallForwarding { sub_nbr, sf_type, start_time } => {
                    (sub_nbr, sf_type, start_time)
                }
            };
            assert!((1..=1000).contains(&sid) && (1..=4).contains(&sf));
            assert!([0, 8, 16].contains(&start));
        }
        let want = [35, 10, 35, 2, 14, 2, 2];
        for t in 0..7 {
            let pct = f64::from(per_type[t]) * 100.0 / f64::from(n);
            assert!((pct - f64::from(want[t])).abs() < 1.0, "{}: {pct} %", TXN_TYPES[t]);
        }
    }

    /// A tiny database by hand, each transaction type on every engine, results by hand.
    #[test]
    fn transactions_by_hand_on_every_engine() {
        let dir = TestDir::new("bench-tatp-txn");
        let schema = Arc::new(schema());
        let i = Value::I64;
        let s = |x: &str| Value::Str(x.into());
        for engine in engines() {
            let subject =
                oltp::open(engine, &dir.path().join(engine.name()), &setup(&schema), &schema)
                    .unwrap_or_else(|e| panic!("{engine}: {e}"));
            let mut ses = subject.session().unwrap();
            run_retrying(ses.as_mut(), TxnKind::ReadWrite, &mut |ops| {
                for sid in [1, 2] {
                    assert!(ops.insert(SUBSCRIBER, population(1, sid).subscriber)?);
                }
                assert!(
                    ops.insert(ACCESS_INFO, vec![i(1), i(2), i(10), i(20), s("ABC"), s("DEFGH")])?
                );
                for (sid, sf, active) in [(1, 1, 1), (1, 2, 0), (2, 3, 1)] {
                    let row = vec![i(sid), i(sf), i(active), i(0), i(5), s("XXXXX")];
                    assert!(ops.insert(SPECIAL_FACILITY, row)?);
                }
                for (sf, start, end) in [(1, 0, 5), (1, 8, 12), (2, 0, 8)] {
                    let row = vec![i(1), i(sf), i(start), i(end), s("123456789012345")];
                    assert!(ops.insert(CALL_FORWARDING, row)?);
                }
                Ok(())
            })
            .unwrap();
            let mut run = |t: TatpTxn| -> bool {
                let mut out = None;
                run_retrying(ses.as_mut(), t.kind(), &mut |ops| {
                    out = Some(transaction(ops, &t)?);
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{engine}: {t:?}: {e}"));
                out.unwrap()
            };
            use TatpTxn::*;
            let gnd = |s_id, sf_type, start_time, end_time| GetNewDestination {
                s_id,
                sf_type,
                start_time,
                end_time,
            };
            let cases = [
                (GetSubscriberData { s_id: 2 }, true),
                (GetSubscriberData { s_id: 3 }, false),
                // Rows of (1, 1) starting by 8: ends 5 and 12; one ends after 6.
                (gnd(1, 1, 8, 6), true),
                // Starting by 0: the row ending at 5, not after 5.
                (gnd(1, 1, 0, 5), false),
                (gnd(1, 1, 16, 11), true),
                (gnd(1, 2, 16, 1), false), // inactive facility
                (gnd(2, 1, 16, 1), false), // no facility
                (gnd(2, 3, 16, 1), false), // active, no call forwarding
                (GetAccessData { s_id: 1, ai_type: 2 }, true),
                (GetAccessData { s_id: 1, ai_type: 3 }, false),
                (UpdateSubscriberData { s_id: 1, sf_type: 1, bit_1: 1, data_a: 77 }, true),
                (UpdateSubscriberData { s_id: 2, sf_type: 4, bit_1: 1, data_a: 78 }, false),
                (UpdateLocation { sub_nbr: 2, vlr_location: 12_345 }, true),
                (UpdateLocation { sub_nbr: 9, vlr_location: 1 }, false),
            ];
            for (t, want) in cases {
                assert_eq!(run(t.clone()), want, "{engine}: {t:?}");
            }
            let icf = |sub_nbr, sf_type, start_time| InsertCallForwarding {
                sub_nbr,
                sf_type,
                start_time,
                end_time: start_time + 4,
                numberx: "000000000000007".into(),
            };
            let dcf = |sub_nbr, sf_type, start_time| DeleteCallForwarding {
                sub_nbr,
                sf_type,
                start_time,
            };
            for (t, want) in [
                (icf(1, 2, 16), true),
                (icf(1, 2, 16), false), // duplicate
                (icf(1, 3, 0), false),  // no facility 3 for subscriber 1
                (icf(2, 3, 0), true),
                (icf(3, 1, 0), false), // no subscriber 3
                (dcf(1, 1, 0), true),
                (dcf(1, 1, 0), false), // already gone
                (dcf(2, 3, 8), false),
            ] {
                assert_eq!(run(t.clone()), want, "{engine}: {t:?}");
            }
            let mut row = Row::new();
            run_retrying(ses.as_mut(), TxnKind::ReadOnly, &mut |ops| {
                assert!(ops.get(SUBSCRIBER, &[1], &mut row)?);
                assert_eq!(int(&row, S_BIT_1), 1);
                assert!(ops.get(SUBSCRIBER, &[2], &mut row)?);
                assert_eq!(int(&row, S_VLR_LOCATION), 12_345);
                assert_eq!(int(&row, S_BIT_1), 1, "set although facility 4 is absent");
                assert!(ops.get(SPECIAL_FACILITY, &[1, 1], &mut row)?);
                assert_eq!(int(&row, SF_DATA_A), 77);
                let mut cf = Vec::new();
                ops.scan(CALL_FORWARDING, &Range::all(), &mut |r| {
                    cf.push((int(r, 0), int(r, 1), int(r, 2), int(r, 3)));
                })?;
                assert_eq!(cf, [(1, 1, 8, 12), (1, 2, 0, 8), (1, 2, 16, 20), (2, 3, 0, 4)]);
                Ok(())
            })
            .unwrap();
        }
    }

    /// The check holds after a real run and catches a worker that does not count the call
    /// forwarding rows it inserted, on every engine.
    #[test]
    fn check_fails_on_an_uncounted_insert() {
        let dir = TestDir::new("bench-tatp-broken");
        let seed = 3;
        println!("seed {seed}");
        for fault in [Fault::None, Fault::UncountedInsert] {
            let w = Tatp::new(200, &params(seed)).with_fault(fault);
            for engine in engines() {
                let path = dir.path().join(format!("{engine}-{fault:?}"));
                let subject = oltp::open(engine, &path, &setup(&w.schema), &w.schema).unwrap();
                w.load(subject.as_ref()).unwrap();
                let mut s = subject.session().unwrap();
                let mut worker = w.worker(0);
                for _ in 0..1500 {
                    assert!(worker.plan().is_some());
                    worker.execute(s.as_mut()).unwrap();
                    worker.committed();
                }
                drop(s);
                let report = worker.report();
                assert_eq!(report.get("txns"), 1500);
                assert!(DONE.iter().all(|d| report.get(d) > 0), "every type ran: {report:?}");
                assert!(report.get("cf_deleted") > 0, "{report:?}");
                let checks = w.check(subject.as_ref(), std::slice::from_ref(&report)).unwrap();
                let failed: Vec<&str> =
                    checks.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect();
                match fault {
                    Fault::None => {
                        assert!(failed.is_empty(), "{engine}: {checks:?}");
                        assert!(report.get("cf_inserted") > 0, "{report:?}");
                        assert!(report.get(MISS[1]) > 0, "some destinations are not found");
                        println!("{engine}: {}", checks[4].detail);
                    }
                    Fault::UncountedInsert => {
                        assert_eq!(failed, ["call_forwarding = loaded + inserted - deleted"]);
                    }
                }
            }
        }
    }
}
