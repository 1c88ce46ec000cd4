//! Smoke pass of the harness (run by `scripts/test.sh`, hence by CI): every workload on every
//! engine of this build, 1 and 2 threads, 0 and 1000 ns of injected latency for Ferrite
//! engines, a couple of hundred transactions per point. It checks the output's shape (every
//! series has every point, baselines print `n/a` counters and appear only at 0 ns, the
//! non-persistent engine is labelled, JSON/CSV/SVG files are written and read back) and each
//! workload's consistency checks. It never checks speed.

use std::time::Duration;

use ferrite::pmem::internals::testing::TestDir;
use ferrite_bench::machine::{machine, utc_now};
use ferrite_bench::oltp::{TpcbScale, TpccScale};
use ferrite_bench::plot::plots_from_csv;
use ferrite_bench::report::{Report, settings_of, shape_problems, summary, table};
use ferrite_bench::runner::{self, NoProgress, RunSpec, Stop, Warmup};
use ferrite_bench::subject::{EngineId, Family, LatencyModel};
use ferrite_bench::workload::{Distribution, WorkloadId};

fn spec(dir: &TestDir, workloads: Vec<WorkloadId>, threads: Vec<usize>) -> RunSpec {
    RunSpec {
        workloads,
        engines: EngineId::smoke(),
        threads,
        latencies: vec![0, 1000],
        latency_model: LatencyModel::Barrier,
        flush: None,
        sync_latency_us: 0,
        stop: Stop::Txns(150),
        warmup: Warmup::Txns(15),
        scale: 1500,
        value_size: 100,
        distribution: Distribution::Zipfian,
        theta: 0.99,
        seed: 7,
        repeat: 1,
        dir: dir.path().to_path_buf(),
    }
}

fn report(spec: &RunSpec) -> Report {
    let mut r = Report {
        date: utc_now(),
        machine: machine(),
        command: "smoke test".into(),
        build: "test".into(),
        settings: settings_of(spec, "test directory"),
        ratio_to: Some(EngineId::SqliteWalFull.name()),
        results: runner::run(spec, &NoProgress),
    };
    r.compute_ratios();
    r
}

#[test]
fn every_workload_on_every_engine() {
    let dir = TestDir::new("bench-smoke");
    // TPC-B with small branches (1000 accounts), TATP with 2000 subscribers and TPC-C with
    // one small warehouse (1000 items, 30 customers per district), like `ferrite bench
    // --smoke`; TPC-C runs on every engine but LMDB.
    let workloads: Vec<WorkloadId> = WorkloadId::all()
        .into_iter()
        .map(|w| match w {
            WorkloadId::Tpcb(_) => {
                WorkloadId::Tpcb(TpcbScale { branches: 2, accounts_per_branch: 1000 })
            }
            WorkloadId::Tatp(_) => WorkloadId::Tatp(2000),
            WorkloadId::Tpcc(_) => {
                WorkloadId::Tpcc(TpccScale { warehouses: 1, items: 1000, customers: 30 })
            }
            w => w,
        })
        .collect();
    let spec = spec(&dir, workloads, vec![1, 2]);
    let report = report(&spec);
    let out = dir.join("out");
    let (json, csv) = report.write_files(&out).expect("write results");
    let problems = shape_problems(&spec, &report, Some((&json, &csv)));
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    // The CSV's columns, by name (reading it back fills a missing column with its default).
    let text = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = text.lines().next().expect("a header").split(',').collect();
    assert_eq!(header.len(), 29, "{header:?}");
    for col in ["latency_ns", "sync_latency_us", "flushes_per_tx", "fences_per_tx", "syncs_per_tx"]
    {
        assert!(header.contains(&col), "{col} not in {header:?}");
    }

    // Per workload, drawn from the CSV: a thread plot, a throughput-over-latency plot and a
    // p99-over-latency plot; per micro-benchmark kind (insert, update, delete, each at 1, 8
    // and 32 operations per transaction), the log-log flushes and throughput over the size.
    let plots = plots_from_csv(&csv, &out).expect("plots");
    assert_eq!(plots.len(), 3 * WorkloadId::all().len() + 3 * 2, "{plots:?}");
    for p in &plots {
        let svg = std::fs::read_to_string(p).unwrap();
        let name = p.to_string_lossy();
        let y = if name.ends_with("-p99-latency.svg") {
            "p99 latency (µs)"
        } else if name.ends_with("-per-txn-flushes.svg") {
            "lines flushed per transaction"
        } else if name.ends_with("-per-txn-throughput.svg") {
            "operations/s"
        } else {
            "transactions/s"
        };
        assert!(svg.starts_with("<svg") && svg.contains(y), "{}", p.display());
    }

    // The table: ratios against SQLite WAL+FULL, n/a counters for baselines, labelled
    // non-persistent reference engine, baselines labelled in the latency sweep.
    let t = table(&report);
    assert!(t.contains("x sqlite-wal-full") && t.contains("1 (ref)"), "{t}");
    assert!(t.contains("non-persistent (in-memory)"), "{t}");
    assert!(t.contains("n/a") && t.contains("0 (baseline)"), "{t}");
    let s = summary(&report);
    assert!(s.contains("passed their workload consistency checks"), "{s}");
    // The per-type table lists every type of a point with more than one (TATP, TPC-C); shown
    // here on a copy of a point given a second, made-up type.
    let mut typed = report.clone();
    let r = typed.results.iter_mut().find(|r| r.error.is_none()).expect("a point");
    let mut second = r.txn_types.first().cloned().expect("every point has a type");
    second.name = "second-type".into();
    second.txns = 1;
    let first = r.txn_types[0].name.clone();
    r.txn_types.push(second);
    let t = ferrite_bench::report::types_table(&typed).expect("a typed point");
    assert!(t.contains("second-type") && t.contains(&first), "{t}");
    assert!(summary(&typed).contains("Per transaction type"));
    for r in &report.results {
        let ratio = r.ratio.expect("every row has a reference row");
        assert!(ratio.is_finite() && ratio > 0.0);
        if r.engine == "sqlite-wal-full" {
            assert!((ratio - 1.0).abs() < 1e-9);
        }
        if r.family == "ferrite" {
            assert!(r.config.contains_key("pmem.flush"), "{:?}", r.config);
            // The smoke engines keep their data in PM: no block file, no sync, no sync latency.
            assert_eq!((r.syncs_per_tx, r.sync_latency_us), (Some(0.0), 0), "{}", r.engine);
        } else {
            assert_eq!((r.syncs_per_tx, r.sync_latency_us), (None, 0), "{}", r.engine);
        }
        assert!(r.config.keys().any(|k| k.contains("version")), "{}: {:?}", r.engine, r.config);
    }
    // TPC-B ran on every engine that has an OLTP mapping (PMDK has none) and its
    // consistency checks held (balances, per-branch sums, history rows, table counts).
    let tpcb: Vec<_> = report.results.iter().filter(|r| r.workload == "tpcb").collect();
    for e in EngineId::smoke() {
        let n = tpcb.iter().filter(|r| r.engine == e.name()).count();
        assert_eq!(n > 0, e != EngineId::Pmdk, "{e}: {n} tpcb points");
    }
    for r in &tpcb {
        assert!(r.ok() && r.txns > 0, "{r:?}");
        assert!(r.checks.len() >= 4 && r.checks[0].name.starts_with("balances"), "{:?}", r.checks);
        assert_eq!(r.txn_types.len(), 1, "{:?}", r.txn_types);
        assert_eq!((r.txn_types[0].name.as_str(), r.txn_types[0].txns), ("tpcb", r.txns));
        assert_eq!(r.workload_params["accounts"], "2000");
    }
    // TATP likewise: every mapped engine, its checks held (row counts, call forwarding =
    // loaded + inserted - deleted, no orphan), seven transaction types reported.
    let tatp: Vec<_> = report.results.iter().filter(|r| r.workload == "tatp").collect();
    for e in EngineId::smoke() {
        let n = tatp.iter().filter(|r| r.engine == e.name()).count();
        assert_eq!(n > 0, e != EngineId::Pmdk, "{e}: {n} tatp points");
    }
    for r in &tatp {
        assert!(r.ok() && r.txns > 0, "{r:?}");
        assert!(r.checks.len() >= 5 && r.checks[0].name.starts_with("subscribers"), "{r:?}");
        assert!(r.checks[2].name.starts_with("call_forwarding"), "{:?}", r.checks);
        assert_eq!(r.txn_types.len(), 7, "{:?}", r.txn_types);
        assert_eq!(r.txn_types.iter().map(|t| t.txns).sum::<u64>(), r.txns);
        assert_eq!(r.workload_params["subscribers"], "2000");
    }
    // TPC-C: every engine with an OLTP mapping except LMDB (no non-unique index in its
    // key-value mapping), consistency conditions 1-4 and the row counts held, five types.
    let tpcc: Vec<_> = report.results.iter().filter(|r| r.workload == "tpcc").collect();
    for e in EngineId::smoke() {
        let n = tpcc.iter().filter(|r| r.engine == e.name()).count();
        let runs = e != EngineId::Pmdk && e != EngineId::Lmdb;
        assert_eq!(n > 0, runs, "{e}: {n} tpcc points");
    }
    for r in &tpcc {
        assert!(r.ok() && r.txns > 0, "{r:?}");
        let names: Vec<&str> = r.checks.iter().map(|c| c.name.as_str()).collect();
        for k in 1..=4 {
            let prefix = format!("TPC-C condition {k}:");
            assert!(names.iter().any(|n| n.starts_with(&prefix)), "{names:?}");
        }
        assert_eq!(r.txn_types.len(), 5, "{:?}", r.txn_types);
        assert_eq!(r.txn_types.iter().map(|t| t.txns).sum::<u64>(), r.txns);
        assert_eq!(r.workload_params["warehouses"], "1");
    }
    let sqlite = report.results.iter().find(|r| r.engine == "sqlite-wal-full").unwrap();
    for key in ["sqlite_version", "journal_mode", "synchronous", "compile_options"] {
        assert!(sqlite.config.contains_key(key), "{key}");
    }
    assert_eq!(sqlite.config["journal_mode"], "WAL");
    assert_eq!(sqlite.config["synchronous"], "FULL");
}

#[test]
fn duration_runs_and_exhausted_deletes_are_reported() {
    let dir = TestDir::new("bench-smoke-duration");
    let mut spec = spec(&dir, vec![WorkloadId::parse("delete8").unwrap()], vec![2]);
    spec.engines.retain(|e| e.family() == Family::Ferrite || *e == EngineId::Lmdb);
    spec.latencies = vec![0];
    spec.scale = 2000;
    spec.repeat = 2;
    spec.stop = Stop::Duration(Duration::from_secs(2));
    spec.warmup = Warmup::Txns(4);
    let report = report(&spec);
    for r in &report.results {
        assert!(r.ok(), "{r:?}");
        // 2000 records, 8 per transaction: the workers stop early, and say so.
        assert!(r.ops > 0 && r.ops <= 2000 - 4 * 8, "{}", r.ops);
        assert!(r.notes.iter().any(|n| n.contains("ran out of records")), "{:?}", r.notes);
        assert_eq!(r.tx_per_s_runs.len(), 2);
        assert!(r.tx_per_s_runs.contains(&r.tx_per_s));
    }
    let problems = shape_problems(&spec, &report, None);
    assert!(problems.is_empty(), "{problems:?}");
}
