//! The restart benchmark (`ferrite_bench::restart`) end to end on a tiny TATP and a tiny
//! TPC-C: the warm child is killed by SIGKILL, the measuring child reopens the database,
//! commits, fills every bucket of its window, and the reopened database passes the engine's
//! check; the CSV has a row per bucket and the SVG a line per configuration.
//!
//! Children are this test binary re-executed (never `fork`) running only `restart_child`,
//! with the spec in `FERRITE_RESTART_CHILD`. Nothing here asserts a time: the windows are
//! short, and the kill and the end of the measurement also wait for fixed numbers of commits
//! (`warm_txns`, `after_txns`), so every assertion holds however slow the machine is.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ferrite::pmem::internals::testing::{TestDir, test_seed};
use ferrite_bench::oltp::TpccScale;
use ferrite_bench::restart::{
    self, ChildSpec, Plan, RestartConfig, RestartError, RestartWorkload, RunResult,
};

const CHILD: &str = "FERRITE_RESTART_CHILD";

/// One test at a time: a child spawned by one test inherits, between its fork and its exec,
/// the descriptors (and `flock`s) of a database another test has open.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The child's role: runs only when a parent set `CHILD` (a no-op in a normal run).
#[test]
fn restart_child() {
    let Some(spec) = std::env::var_os(CHILD) else { return };
    let spec = ChildSpec::decode(&spec.to_string_lossy()).expect("child spec");
    restart::run_child(&spec).expect("child");
}

fn launch(spec: &ChildSpec) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("current_exe"));
    c.args(["--exact", "restart_child", "--nocapture", "--quiet", "--test-threads=1"])
        .env(CHILD, spec.encode());
    c
}

fn plan(dir: &TestDir, seed: u64, workloads: Vec<RestartWorkload>) -> Plan {
    Plan {
        workloads,
        configs: vec![
            RestartConfig::parse("sync").unwrap(),
            RestartConfig::parse("few-slots=slots=8").unwrap(),
        ],
        threads: 2,
        warm: Duration::from_millis(20),
        warm_txns: 30,
        after: Duration::from_millis(50),
        after_txns: 30,
        bucket: Duration::from_millis(10),
        seed,
        dir: dir.path().join("dbs"),
    }
}

/// What every run must show, whatever the timing.
fn check_structure(p: &Plan, r: &RunResult) {
    let what = format!("{} {}", r.workload.tag(), r.config.name);
    assert_eq!(r.warm_signal, Some(9), "{what}: the warm child ends by SIGKILL");
    assert!(r.warm_commits >= p.warm_txns, "{what}: killed after {} commits", r.warm_commits);
    assert!(r.check.is_ok(), "{what}: the reopened database fails its check: {:?}", r.check);
    // Buckets cover open and the window after it, whole; more if the commits needed them.
    let min_buckets = (r.open + p.after).as_nanos().div_ceil(p.bucket.as_nanos()) as usize;
    assert!(r.buckets.len() >= min_buckets, "{what}: {} buckets", r.buckets.len());
    assert!(r.buckets.iter().sum::<u64>() >= p.after_txns, "{what}: {:?}", r.buckets);
    let first = r.first_commit.expect("a first commit");
    assert!(first >= r.open, "{what}: first commit before open returned");
    // No commit is counted in a bucket that ended before open returned.
    let before_open = (r.open.as_nanos() / p.bucket.as_nanos()) as usize;
    assert!(r.buckets[..before_open].iter().all(|&c| c == 0), "{what}: {:?}", r.buckets);
    assert_eq!(r.recovery.get("clean_shutdown"), Some(&0), "{what}: {:?}", r.recovery);
    assert!(r.recovery.get("live_rows").is_some_and(|&n| n > 0), "{what}: {:?}", r.recovery);
}

fn run_and_check(name: &str, workloads: Vec<RestartWorkload>) {
    let _serial = serial();
    let seed = test_seed();
    let dir = TestDir::new(name);
    let p = plan(&dir, seed, workloads);
    let mut seen = 0;
    let results = restart::run(&p, &launch, &mut |_| seen += 1).expect("restart benchmark");
    assert_eq!(results.len(), p.workloads.len() * p.configs.len());
    assert_eq!(seen, results.len());
    for r in &results {
        check_structure(&p, r);
    }
    let out = dir.path().join("out");
    let files = restart::write_outputs(&results, &out, "test\n").expect("outputs");
    let csv = std::fs::read_to_string(out.join("restart.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("workload,size,config,seconds_since_restart,tx_per_s"));
    let rows: Vec<&str> = lines.collect();
    let buckets: usize = results.iter().map(|r| r.buckets.len()).sum();
    assert_eq!(rows.len(), buckets, "a CSV row per bucket");
    for r in &results {
        let mine = rows.iter().filter(|l| l.contains(&format!(",{},", r.config.name)));
        let mine: Vec<_> = mine
            .filter(|l| l.starts_with(&format!("{},{},", r.workload.name(), r.workload.tag())))
            .collect();
        assert_eq!(mine.len(), r.buckets.len(), "{}", r.config.name);
    }
    let summary = std::fs::read_to_string(out.join("restart-summary.txt")).unwrap();
    assert!(summary.contains("time to first commit"), "{summary}");
    for w in &p.workloads {
        let svg = out.join(format!("restart-{}.svg", w.tag()));
        assert!(files.contains(&svg), "{files:?}");
        let text = std::fs::read_to_string(&svg).unwrap();
        for c in &p.configs {
            assert!(text.contains(&format!("{}: first commit at", c.name)), "{}", c.name);
        }
    }
    assert!(!p.dir.join(format!("{}-sync", p.workloads[0].tag())).exists(), "databases removed");
}

#[test]
fn a_tiny_tatp_restart_runs_end_to_end() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    run_and_check(
        "restart-tatp",
        vec![RestartWorkload::Tatp { subscribers: 50 }, RestartWorkload::Tatp { subscribers: 120 }],
    );
}

#[test]
fn a_tiny_tpcc_restart_runs_end_to_end() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let scale = TpccScale { warehouses: 1, items: 200, customers: 30 };
    run_and_check("restart-tpcc", vec![RestartWorkload::Tpcc(scale)]);
}

#[test]
fn bad_plans_are_usage_errors() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let dir = TestDir::new("restart-bad");
    let good = plan(&dir, 1, vec![RestartWorkload::Tatp { subscribers: 10 }]);
    let bad = [
        Plan { threads: 0, ..good.clone() },
        Plan { bucket: Duration::ZERO, ..good.clone() },
        Plan { after: Duration::ZERO, ..good.clone() },
        Plan { after: Duration::from_secs(1000), bucket: Duration::from_micros(1), ..good.clone() },
        Plan { configs: vec![], ..good.clone() },
        Plan { configs: vec![good.configs[0].clone(), good.configs[0].clone()], ..good.clone() },
        Plan { workloads: vec![RestartWorkload::Tatp { subscribers: 0 }], ..good.clone() },
        Plan {
            workloads: vec![RestartWorkload::Tpcc(TpccScale {
                warehouses: 0,
                items: 10,
                customers: 30,
            })],
            ..good.clone()
        },
    ];
    for p in bad {
        let r = restart::run(&p, &launch, &mut |_| {});
        assert!(matches!(r, Err(RestartError::Usage(_))), "{p:?}: {r:?}");
    }
    assert!(good.validate().is_ok());
}
