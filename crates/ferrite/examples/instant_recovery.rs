//! Open-to-return and open-to-rebuilt times of SOFORT's synchronous and instant recovery
//! (`docs/design/sofort.md` §15) on a TATP-like database: `subscriber` (primary key `s_id`,
//! unique index on `sub_nbr`) and `access_info` (primary key, index on `s_id`), `N` rows
//! each (default 1 000 000), in a fresh directory under `/dev/shm` (removed at the end).
//!
//! ```text
//! cargo run --release -p ferrite --example instant_recovery -- [N] [runs]
//! ```
//!
//! Each run reopens the closed database once per mode: synchronous on one thread, synchronous
//! on the default threads (one per index, at most the machine's parallelism), instant on the
//! default threads. For instant it also times the first transaction (a primary-key lookup of
//! one subscriber: it helps the primary index's rebuild) and a first secondary-index read.

use std::time::{Duration, Instant};

use ferrite::{Database, EngineKind, Options, RecoveryMode, Scan, SofortConfig, TableSchema, Type};
use ferrite::{Value, row};

fn options(recovery: RecoveryMode, threads: u32) -> Options {
    Options::new()
        .engine(EngineKind::Sofort)
        .pmem(ferrite::pmem::Options::new().segment_size(256 << 20))
        .sofort(SofortConfig { recovery, recovery_threads: threads, ..SofortConfig::default() })
}

fn sub_nbr(s: i64) -> String {
    format!("{s:015}")
}

fn load(path: &std::path::Path, n: i64) -> ferrite::Result<Duration> {
    let t0 = Instant::now();
    let db = Database::create(path, options(RecoveryMode::Synchronous, 0))?;
    db.create_table(
        TableSchema::new("subscriber")
            .column("s_id", Type::I64)
            .column("sub_nbr", Type::Str)
            .column("vlr_location", Type::I64)
            .column("msc_location", Type::I64)
            .primary_key("s_id")
            .unique_index("by_nbr", ["sub_nbr"]),
    )?;
    db.create_table(
        TableSchema::new("access_info")
            .column("id", Type::I64)
            .column("s_id", Type::I64)
            .column("data1", Type::I64)
            .column("data3", Type::Str)
            .primary_key("id")
            .index("by_sid", ["s_id"]),
    )?;
    const BATCH: i64 = 10_000;
    let mut s = 0;
    while s < n {
        let mut tx = db.begin()?;
        for k in s..(s + BATCH).min(n) {
            tx.insert("subscriber", row![k, sub_nbr(k), k * 7 % 1000, k % 97])?;
            // About two access_info rows per subscriber on average, `n` in all.
            tx.insert("access_info", row![k, k / 2, k % 255, "abc"])?;
        }
        tx.commit()?;
        s += BATCH;
    }
    db.close()?;
    Ok(t0.elapsed())
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn run(path: &std::path::Path, label: &str, mode: RecoveryMode, threads: u32, n: i64) {
    let t0 = Instant::now();
    let db = Database::open(path, options(mode, threads)).expect("open");
    let opened = t0.elapsed();
    let mut first = None;
    let mut first_sec = None;
    if mode == RecoveryMode::Instant {
        let mut r = db.begin_read().expect("begin");
        let got = r.get("subscriber", n / 3).expect("get");
        assert!(got.is_some());
        first = Some(t0.elapsed());
        let got =
            r.scan("access_info", &Scan::index("by_sid").prefix(Value::I64(n / 5))).expect("scan");
        assert!(!got.is_empty());
        first_sec = Some(t0.elapsed());
    }
    let rep = db.wait_recovered().expect("rebuilt").expect("report");
    let rebuilt = t0.elapsed();
    let per_index: Vec<String> = rep
        .index_times
        .iter()
        .map(|(name, d)| format!("{name} {}", d.map_or("-".into(), ms)))
        .collect();
    println!(
        "{label:<22} open returned {:>8} ms | first pk lookup {:>8} | first index scan {:>8} | \
         all indexes {:>8} ms (report: first txn {} ms, rebuilt {} ms, live rows {}) | {}",
        ms(opened),
        first.map_or("-".into(), ms),
        first_sec.map_or("-".into(), ms),
        ms(rebuilt),
        ms(rep.time_to_first_transaction),
        ms(rep.time_to_index_rebuild),
        rep.live_rows,
        per_index.join(", ")
    );
    db.close().expect("close");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: i64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = std::path::PathBuf::from(format!("/dev/shm/ferrite-instant-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("db");
    let loaded = load(&path, n).expect("load");
    println!("loaded {n} subscribers + {n} access_info rows in {} ms", ms(loaded));
    for i in 0..runs {
        println!("run {i}:");
        run(&path, "synchronous, 1 thread", RecoveryMode::Synchronous, 1, n);
        run(&path, "synchronous, default", RecoveryMode::Synchronous, 0, n);
        run(&path, "instant, default", RecoveryMode::Instant, 0, n);
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
