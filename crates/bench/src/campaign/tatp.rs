//! TATP in the kill campaign.
//!
//! The child runs TATP's standard mix ([`crate::oltp::tatp::plan`]) with the values that the
//! specification leaves free tagged with the transaction's sequence number `seq`:
//! UPDATE_LOCATION sets `vlr_location = seq`; INSERT_CALL_FORWARDING writes
//! `numberx = seq` (15 digits); UPDATE_SUBSCRIBER_DATA sets `bit_1 = seq mod 2` and
//! `data_a = (seq / 2) mod 256` (in the specification's ranges, so not unique: see the
//! campaign's module docs). The writes it acknowledges:
//! - UPDATE_LOCATION (always finds its subscriber): the subscriber's `vlr_location`;
//! - UPDATE_SUBSCRIBER_DATA: the subscriber's `bit_1`, and the facility's `data_a` if the
//!   facility exists (else the transaction reports the expected failure, the subscriber's
//!   update still commits);
//! - INSERT_CALL_FORWARDING that inserted: the row present with its `end_time` and `numberx`;
//! - DELETE_CALL_FORWARDING that deleted: the row absent;
//! - the read-only types and the expected failures that wrote nothing: no write.
//!
//! Invariants after each kill: TATP's own check ([`Tatp`]'s `check`): one subscriber row per
//! subscriber with `sub_nbr = s_id`, `access_info` and `special_facility` at their loaded
//! counts, `call_forwarding` = loaded + inserted − deleted, where inserted and deleted count
//! the acknowledged call-forwarding writes plus the in-flight one when it is found
//! committed, every call forwarding under its facility.
//!
//! `sub_nbr` equals `s_id` in TATP's population, so the rows of a transaction addressed by
//! subscriber number are keyed by it.

use ferrite::Value;

use super::{CampaignDriver, CampaignWorkload, Expect, Write, run_faultable};
use crate::keys::Rng;
use crate::oltp::tatp::{self, CALL_FORWARDING, SPECIAL_FACILITY, SUBSCRIBER, Tatp, TatpTxn};
use crate::oltp::{OltpOps, OltpSession, OltpSubject, OltpWorkload, Row};
use crate::subject::{OpError, TxnKind};
use crate::workload::{Check, WorkerReport};

/// Column positions the acknowledgements name.
#[derive(Clone, Copy, Debug)]
struct Cols {
    bit_1: usize,
    vlr_location: usize,
    data_a: usize,
    end_time: usize,
    numberx: usize,
}

/// TATP as a campaign workload.
#[derive(Debug)]
pub struct TatpCampaign {
    tatp: Tatp,
    subscribers: u32,
    cols: Cols,
    inserted: u64,
    deleted: u64,
}

impl TatpCampaign {
    /// TATP with `subscribers` subscribers, population seeded with `seed`.
    pub fn new(subscribers: u32, seed: u64) -> TatpCampaign {
        let params = super::params(seed);
        let tatp = Tatp::new(subscribers, &params);
        let s = tatp.schema();
        // The TATP schema is constant and has these columns (its unit tests pin them).
        let pos = |t: usize, c: &str| s.tables[t].position(c).unwrap_or(usize::MAX);
        let cols = Cols {
            bit_1: pos(SUBSCRIBER, "bit_1"),
            vlr_location: pos(SUBSCRIBER, "vlr_location"),
            data_a: pos(SPECIAL_FACILITY, "data_a"),
            end_time: pos(CALL_FORWARDING, "end_time"),
            numberx: pos(CALL_FORWARDING, "numberx"),
        };
        TatpCampaign { tatp, subscribers: subscribers.max(1), cols, inserted: 0, deleted: 0 }
    }
}

impl CampaignWorkload for TatpCampaign {
    fn name(&self) -> &'static str {
        "tatp"
    }

    fn oltp(&self) -> &dyn OltpWorkload {
        &self.tatp
    }

    fn driver(&self, seed: u64) -> Box<dyn CampaignDriver + '_> {
        Box::new(TatpDriver {
            rng: Rng::new(seed, 0x7a7b),
            subscribers: u64::from(self.subscribers),
            cols: self.cols,
        })
    }

    fn applied(&mut self, writes: &[Write]) {
        for w in writes.iter().filter(|w| w.table == CALL_FORWARDING) {
            match w.expect {
                Expect::Present(_) => self.inserted += 1,
                Expect::Absent => self.deleted += 1,
            }
        }
    }

    fn invariants(&self, subject: &dyn OltpSubject) -> Result<Vec<Check>, OpError> {
        let mut report = WorkerReport::default();
        report.add("cf_inserted", self.inserted);
        report.add("cf_deleted", self.deleted);
        self.tatp.check(subject, std::slice::from_ref(&report))
    }
}

struct TatpDriver {
    rng: Rng,
    subscribers: u64,
    cols: Cols,
}

/// `txn` with its free values tagged with `seq` (module docs).
fn tag(txn: TatpTxn, seq: u64) -> TatpTxn {
    let s = seq as i64;
    match txn {
        TatpTxn::UpdateSubscriberData { s_id, sf_type, .. } => {
            TatpTxn::UpdateSubscriberData { s_id, sf_type, bit_1: s & 1, data_a: (s >> 1) & 255 }
        }
        TatpTxn::UpdateLocation { sub_nbr, .. } => {
            TatpTxn::UpdateLocation { sub_nbr, vlr_location: s }
        }
        TatpTxn::InsertCallForwarding { sub_nbr, sf_type, start_time, end_time, .. } => {
            TatpTxn::InsertCallForwarding {
                sub_nbr,
                sf_type,
                start_time,
                end_time,
                numberx: format!("{seq:015}"),
            }
        }
        other => other,
    }
}

impl TatpDriver {
    /// What `txn` wrote, given its outcome (`ok`: no expected failure).
    fn writes(
        &self,
        ops: &mut dyn OltpOps,
        txn: &TatpTxn,
        ok: bool,
    ) -> Result<Vec<Write>, OpError> {
        let present = |table, key: Vec<i64>, cols: Vec<(usize, Value)>| Write {
            table,
            key,
            expect: Expect::Present(cols),
        };
        let c = self.cols;
        Ok(match *txn {
            TatpTxn::UpdateSubscriberData { s_id, sf_type, bit_1, data_a } => {
                let mut w = Vec::new();
                // A failure means no subscriber (nothing written) or no facility (the
                // subscriber's bit was written): look.
                if ok || ops.get(SUBSCRIBER, &[s_id], &mut Row::new())? {
                    w.push(present(SUBSCRIBER, vec![s_id], vec![(c.bit_1, Value::I64(bit_1))]));
                }
                if ok {
                    w.push(present(
                        SPECIAL_FACILITY,
                        vec![s_id, sf_type],
                        vec![(c.data_a, Value::I64(data_a))],
                    ));
                }
                w
            }
            TatpTxn::UpdateLocation { sub_nbr, vlr_location } if ok => {
                vec![present(
                    SUBSCRIBER,
                    vec![sub_nbr],
                    vec![(c.vlr_location, Value::I64(vlr_location))],
                )]
            }
            TatpTxn::InsertCallForwarding {
                sub_nbr,
                sf_type,
                start_time,
                end_time,
                ref numberx,
            } if ok => {
                vec![present(
                    CALL_FORWARDING,
                    vec![sub_nbr, sf_type, start_time],
                    vec![
                        (c.end_time, Value::I64(end_time)),
                        (c.numberx, Value::Str(numberx.clone())),
                    ],
                )]
            }
            TatpTxn::DeleteCallForwarding { sub_nbr, sf_type, start_time } if ok => {
                vec![Write {
                    table: CALL_FORWARDING,
                    key: vec![sub_nbr, sf_type, start_time],
                    expect: Expect::Absent,
                }]
            }
            _ => Vec::new(),
        })
    }
}

impl CampaignDriver for TatpDriver {
    fn run(
        &mut self,
        session: &mut dyn OltpSession,
        seq: u64,
        intent: &mut dyn FnMut(&[Write]) -> Result<(), OpError>,
        rollback: bool,
    ) -> Result<Option<Vec<Write>>, OpError> {
        let txn = tag(tatp::plan(&mut self.rng, self.subscribers), seq);
        // The fault acknowledges a rolled-back UPDATE_LOCATION: its write is always there and
        // tagged, so the loss it causes cannot hide behind an equal older value.
        if rollback && !matches!(txn, TatpTxn::UpdateLocation { .. }) {
            return Ok(None);
        }
        run_faultable(session, txn.kind(), rollback, &mut |ops| {
            let ok = tatp::transaction(ops, &txn)?;
            let writes = self.writes(ops, &txn, ok)?;
            if txn.kind() == TxnKind::ReadWrite {
                intent(&writes)?;
            }
            Ok(writes)
        })
        .map(Some)
    }
}
