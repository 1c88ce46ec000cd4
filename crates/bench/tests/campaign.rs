//! The kill campaign (`ferrite_bench::campaign`): a short campaign passes; the verifier
//! reports a dropped commit as a loss (with its key and sequence number) and a broken TATP
//! invariant as a violation.
//!
//! Children are this test binary re-executed (never `fork`) running only `campaign_child`,
//! with the spec in `FERRITE_CAMPAIGN_CHILD`. Seeds are printed and `FERRITE_TEST_SEED`
//! replays them. No verdict depends on timing: whatever moment the kill lands on, every rule
//! of the verifier holds for a correct engine.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use ferrite::pmem::internals::testing::{TestDir, test_seed};
use ferrite::{EngineKind, Value};
use ferrite_bench::campaign::{Campaign, ChildSpec, Config, Expect, Fault, Summary, Write};
use ferrite_bench::oltp::TpccScale;
use ferrite_bench::oltp::run_retrying;
use ferrite_bench::oltp::tatp::{ACCESS_INFO, SUBSCRIBER, population};
use ferrite_bench::oltp::tpcc::{self, DISTRICT};
use ferrite_bench::subject::TxnKind;

const CHILD: &str = "FERRITE_CAMPAIGN_CHILD";

/// The tests run one at a time: a child spawned by one test inherits, between its fork and
/// its exec, the descriptors of a database another test has open, and with them that
/// database's `flock`, so the other test's next open could find it "locked by another
/// opener" (seen here as a flaky failure when they ran in parallel).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The child's role: runs only when a parent set `CHILD` (a no-op in a normal run).
#[test]
fn campaign_child() {
    let Some(spec) = std::env::var_os(CHILD) else { return };
    let spec = ChildSpec::decode(&spec.to_string_lossy()).expect("child spec");
    ferrite_bench::campaign::run_child(&spec).expect("child");
}

fn launch(spec: &ChildSpec) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("current_exe"));
    c.args(["--exact", "campaign_child", "--nocapture", "--quiet", "--test-threads=1"])
        .env(CHILD, spec.encode());
    c
}

fn sofort() -> EngineKind {
    "sofort".parse().expect("this build has the SOFORT engine")
}

fn config(dir: &TestDir, seed: u64) -> Config {
    let mut cfg = Config::new("tatp", sofort(), dir.path().to_path_buf(), seed);
    cfg.subscribers = 50;
    cfg.max_acks = 60;
    cfg.jitter_us = 300;
    cfg
}

/// Creates, loads and runs a whole campaign; prints and returns its summary.
fn run_to_end(cfg: Config) -> Summary {
    let mut c = Campaign::create(cfg).expect("create and load");
    c.run(&launch, &mut |_, _| {}).expect("campaign");
    let s = c.summary().clone();
    println!("{}", s.report());
    s
}

#[test]
fn a_short_campaign_passes() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-short");
    let mut cfg = config(&dir, seed);
    cfg.kills = 3;
    let s = run_to_end(cfg);
    assert!(s.passed(), "seed {seed:#x}: {}", s.report());
    assert_eq!(s.kills + s.exits, 3);
    assert!(s.acked >= 3 && s.acked_writes > 0 && s.keys_checked > 0, "{}", s.report());
    assert_eq!((s.recovery_ns.len(), s.first_commit_ns.len()), (3, 3));
    // One post-crash first transaction per round, each after its round's open.
    assert_eq!(s.recovery_first_ns.len(), 3);
    assert!(s.recovery_first_ns.iter().zip(&s.recovery_ns).all(|(first, open)| first >= open));
}

/// A child that acknowledges a transaction it rolled back (its last one, so no later write
/// can hide the loss): the verifier reports exactly that write, by key and sequence number.
#[test]
fn a_dropped_commit_is_reported_as_a_loss() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-dropped");
    let mut cfg = config(&dir, seed);
    cfg.kills = 1;
    cfg.max_acks = u64::MAX / 2; // never reached: the child stops by itself
    cfg.child_max_commits = 20;
    cfg.fault = Fault::AckRolledBack;
    let s = run_to_end(cfg);
    assert_eq!((s.kills, s.exits, s.acked), (0, 1, 21), "seed {seed:#x}: {}", s.report());
    assert_eq!(s.losses.len(), 1, "seed {seed:#x}: {}", s.report());
    let loss = &s.losses[0];
    // Sequence numbers start at 1; the 20 real commits took 1..=20.
    assert_eq!((loss.table, loss.seq), ("subscriber", 21), "{loss}");
    assert!(loss.expected.contains("vlr_location=I64(21)"), "{loss}");
    assert!(!loss.found.contains("I64(21)"), "{loss}");
    assert!(s.violations.is_empty(), "{}", s.report());
    assert!(!s.passed());
}

/// The same, without a child: an acknowledgement for a write that never reached the
/// database (fed directly) is a loss naming its key and sequence number.
#[test]
fn an_ack_without_its_commit_is_a_loss() {
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-fed");
    let mut c = Campaign::create(config(&dir, seed)).expect("create and load");
    c.verify(None).unwrap();
    assert!(c.summary().passed(), "{}", c.summary().report());
    let vlr = population(seed, 3).subscriber[33].clone();
    let w = |v: i64| Write {
        table: SUBSCRIBER,
        key: vec![3],
        expect: Expect::Present(vec![(33, Value::I64(v))]),
    };
    // An ack that matches the database is no loss.
    c.feed_ack(6, vec![w(vlr.as_i64().unwrap())]);
    c.verify(None).unwrap();
    assert!(c.summary().passed(), "{}", c.summary().report());
    c.feed_ack(7, vec![w(-7)]);
    c.verify(None).unwrap();
    let s = c.summary();
    assert_eq!(s.losses.len(), 1, "{}", s.report());
    assert_eq!(
        (s.losses[0].table, s.losses[0].key.as_slice(), s.losses[0].seq),
        ("subscriber", &[3i64][..], 7)
    );
    // An in-flight transaction whose write is not there did not commit: no loss, no
    // violation; one whose write is there is applied.
    let before = s.losses.len();
    c.verify(Some((8, vec![w(-8)]))).unwrap();
    assert_eq!(c.summary().losses.len(), before + 1, "only the old loss again");
    assert_eq!(c.summary().in_flight_applied, 0);
}

/// A TATP invariant broken behind the campaign's back (an access_info row deleted) is
/// reported as a violation.
#[test]
fn a_broken_invariant_is_a_violation() {
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-invariant");
    let mut c = Campaign::create(config(&dir, seed)).expect("create and load");
    let ai = population(seed, 5).access_info[0].clone();
    let key = [ai[0].as_i64().unwrap(), ai[1].as_i64().unwrap()];
    {
        let subject = c.reopen().unwrap();
        let mut s = subject.session().unwrap();
        run_retrying(s.as_mut(), TxnKind::ReadWrite, &mut |ops| {
            assert!(ops.delete(ACCESS_INFO, &key)?);
            Ok(())
        })
        .unwrap();
    }
    c.verify(None).unwrap();
    let s = c.summary();
    assert!(s.losses.is_empty());
    assert_eq!(s.violations.len(), 1, "{}", s.report());
    assert!(s.violations[0].contains("access_info and special_facility"), "{}", s.report());
}

#[test]
fn an_in_memory_engine_is_refused() {
    let _serial = serial();
    let dir = TestDir::new("campaign-reference");
    let cfg = Config::new("tatp", EngineKind::Reference, dir.path().to_path_buf(), 1);
    let e = Campaign::create(cfg).unwrap_err().to_string();
    assert!(e.contains("in memory"), "{e}");
}

#[test]
fn writes_round_trip_through_the_protocol() {
    let ws = vec![
        Write { table: 3, key: vec![1, 2, 16], expect: Expect::Absent },
        Write {
            table: 0,
            key: vec![9],
            expect: Expect::Present(vec![
                (3, Value::I64(-4)),
                (4, Value::Str("000000000000042".into())),
            ]),
        },
        Write { table: 1, key: vec![0], expect: Expect::Present(vec![]) },
    ];
    let text = ferrite_bench::campaign::encode_writes(&ws).unwrap();
    assert_eq!(text, "3:1,2,16:- 0:9:+3=i-4&4=s000000000000042 1:0:+");
    assert_eq!(ferrite_bench::campaign::decode_writes(&text).unwrap(), ws);
    for bad in ["x:1:-", "0:1", "0:a:-", "0:1:*", "0:1:+3=x1", "0:1:+3"] {
        assert!(ferrite_bench::campaign::decode_writes(bad).is_err(), "{bad}");
    }
    let bad = Write {
        table: 0,
        key: vec![1],
        expect: Expect::Present(vec![(1, Value::Str("a b".into()))]),
    };
    assert!(ferrite_bench::campaign::encode_writes(&[bad]).is_err());
}

/// An in-flight transaction found half there (one of its writes holds where the model says
/// otherwise, another does not) is a partial transaction: a violation, not a loss.
#[test]
fn a_partial_in_flight_transaction_is_a_violation() {
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-partial");
    let mut c = Campaign::create(config(&dir, seed)).expect("create and load");
    let vlr = |s_id: i64| population(seed, s_id).subscriber[33].as_i64().unwrap();
    let w = |s_id: i64, v: i64| Write {
        table: SUBSCRIBER,
        key: vec![s_id],
        expect: Expect::Present(vec![(33, Value::I64(v))]),
    };
    c.feed_ack(1, vec![w(4, vlr(4))]);
    // Half of transaction 2 reaches the database: subscriber 4, not subscriber 5.
    {
        let subject = c.reopen().unwrap();
        let mut s = subject.session().unwrap();
        run_retrying(s.as_mut(), TxnKind::ReadWrite, &mut |ops| {
            assert!(ops.update(SUBSCRIBER, &[4], &[(33, Value::I64(-2))])?);
            Ok(())
        })
        .unwrap();
    }
    c.verify(Some((2, vec![w(4, -2), w(5, -2)]))).unwrap();
    let s = c.summary();
    assert!(s.losses.is_empty(), "{}", s.report());
    assert_eq!(s.violations.len(), 1, "{}", s.report());
    assert!(s.violations[0].contains("in-flight seq 2 is partial"), "{}", s.report());
    assert_eq!(s.in_flight_applied, 0);
}

/// TPC-C at a test scale: 1 warehouse, 200 items, 30 customers per district.
fn tpcc_config(dir: &TestDir, seed: u64) -> Config {
    let scale = TpccScale { warehouses: 1, items: 200, customers: 30 };
    let mut cfg = config(dir, seed);
    cfg.workload = ferrite_bench::campaign::tpcc::spec(scale);
    cfg
}

#[test]
fn a_short_tpcc_campaign_passes() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-tpcc-short");
    let mut cfg = tpcc_config(&dir, seed);
    cfg.kills = 3;
    let s = run_to_end(cfg);
    assert!(s.passed(), "seed {seed:#x}: {}", s.report());
    assert_eq!(s.kills + s.exits, 3);
    assert!(s.acked >= 3 && s.keys_checked > 0, "{}", s.report());
}

/// A TPC-C child that acknowledges a Payment it rolled back: the verifier reports its
/// history row (a key of its own, tagged with the sequence number) as lost.
#[test]
fn a_dropped_tpcc_commit_is_reported_as_a_loss() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-tpcc-dropped");
    let mut cfg = tpcc_config(&dir, seed);
    cfg.kills = 1;
    cfg.max_acks = u64::MAX / 2; // never reached: the child stops by itself
    cfg.child_max_commits = 20;
    cfg.fault = Fault::AckRolledBack;
    let s = run_to_end(cfg);
    assert_eq!((s.kills, s.exits), (0, 1), "seed {seed:#x}: {}", s.report());
    assert_eq!(s.losses.len(), 1, "seed {seed:#x}: {}", s.report());
    let loss = &s.losses[0];
    // The fault waits for the next Payment, so its seq is 21 or later (read-only or
    // non-Payment draws in between are skipped without a number).
    assert_eq!((loss.table, loss.key.as_slice()), ("history", &[1, loss.seq as i64][..]));
    assert!(loss.seq >= 21, "{loss}");
    assert!(loss.found.contains("absent"), "{loss}");
    // The history row count (loaded + acknowledged Payments) is one short too.
    assert!(s.violations.iter().any(|v| v.contains("history")), "{}", s.report());
    assert!(!s.passed());
}

/// A consistency condition broken behind the campaign's back (a district's next order id
/// bumped) is reported as a violation of condition 2.
#[test]
fn a_broken_tpcc_condition_is_a_violation() {
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new("campaign-tpcc-invariant");
    let mut c = Campaign::create(tpcc_config(&dir, seed)).expect("create and load");
    c.verify(None).unwrap();
    assert!(c.summary().passed(), "{}", c.summary().report());
    {
        let subject = c.reopen().unwrap();
        let next = tpcc::schema().tables[DISTRICT].position("d_next_o_id").unwrap();
        let mut s = subject.session().unwrap();
        run_retrying(s.as_mut(), TxnKind::ReadWrite, &mut |ops| {
            assert!(ops.update(DISTRICT, &[1, 3], &[(next, Value::I64(999))])?);
            Ok(())
        })
        .unwrap();
    }
    c.verify(None).unwrap();
    let s = c.summary();
    assert!(s.losses.is_empty(), "{}", s.report());
    assert_eq!(s.violations.len(), 1, "{}", s.report());
    assert!(s.violations[0].contains("condition 2"), "{}", s.report());
}
