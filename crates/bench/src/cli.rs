//! `ferrite bench`: the arguments and the command (also the `ferrite-bench` binary).
//!
//! With no arguments it runs the quick suite (a few points, well under two minutes on two
//! cores) in a fresh directory under `/dev/shm`, and prints the side-by-side table. Exit codes:
//! 0 every point ran and passed its checks, 1 a point failed (engine error or a consistency
//! check), 2 bad arguments (returned as `Err`; the caller prints it and exits 2).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use ferrite::pmem::FlushKind;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::calibrate;
use crate::machine::{machine, utc_now, utc_stamp};
use crate::oltp::{TpcbScale, TpccScale};
use crate::plot::plots_from_csv;
use crate::report::{PointResult, Report, settings_of, shape_problems, summary};
use crate::runner::{self, Progress};
use crate::spec::{RunSpec, Stop, Warmup};
use crate::subject::{EngineId, Family, LatencyModel};
use crate::workload::{Distribution, WorkloadId, dist::DEFAULT_THETA};

/// Arguments of `ferrite bench`.
#[derive(Debug, Clone, Args)]
#[command(
    about = "Run benchmarks of Ferrite's engines against SQLite, LMDB and PMDK",
    long_about = "Run benchmarks of Ferrite's engines against SQLite, LMDB and PMDK.\n\n\
                  With no arguments: the quick suite (insert1, ycsb-a and TATP at 100 000 \
                  subscribers on every engine of this build that runs them, one thread, 3 s \
                  per point) in a fresh directory under /dev/shm, \
                  printed as a side-by-side table with a ratio column. `--list` shows the \
                  workloads and engines; `--calibrate` compares the baselines with the \
                  project's calibration anchors; `--smoke` is the quick shape-and-consistency \
                  pass CI runs. `ferrite bench restart --help`: the restart benchmark \
                  (SIGKILL at steady state, then time to first commit and throughput over \
                  time).",
    args_conflicts_with_subcommands = true
)]
pub struct BenchArgs {
    /// A benchmark of its own instead of the suite.
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// Workloads (comma-separated; groups: micro, ycsb, oltp, all). Default: insert1,ycsb-a,tatp.
    #[arg(long = "workload", short = 'w', value_delimiter = ',', value_name = "W")]
    pub workloads: Vec<String>,
    /// Engines (comma-separated; groups: all, ferrite, baselines, sqlite). Default: all.
    #[arg(long = "engine", short = 'e', value_delimiter = ',', value_name = "E")]
    pub engines: Vec<String>,
    /// Worker thread counts to sweep (comma-separated). Default: 1.
    #[arg(long, short = 't', value_delimiter = ',', value_name = "N")]
    pub threads: Vec<usize>,
    /// Timed phase per point, seconds. Default: 3.
    #[arg(long, value_name = "S", conflicts_with = "ops")]
    pub duration: Option<f64>,
    /// Timed phase per point, in transactions (instead of --duration).
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,
    /// Warm-up per point, seconds (with --duration). Default: 0.5.
    #[arg(long, value_name = "S", conflicts_with = "warmup_ops")]
    pub warmup: Option<f64>,
    /// Warm-up per point, in transactions. Default with --ops: a tenth of --ops.
    #[arg(long, value_name = "N")]
    pub warmup_ops: Option<u64>,
    /// Records loaded before timing (YCSB record count, micro-benchmark table size).
    /// Default: 100000 (calibration: 0, an empty table).
    #[arg(long, value_name = "K")]
    pub scale: Option<u64>,
    /// TPC-B scale: branches (10 tellers and --accounts-per-branch accounts each). Default: 1.
    #[arg(long, value_name = "N")]
    pub branches: Option<u32>,
    /// TPC-B accounts per branch. Default: 100000, the standard's (smoke: 1000).
    #[arg(long, value_name = "N")]
    pub accounts_per_branch: Option<u32>,
    /// TATP subscribers. Default: 100000 (smoke: 2000).
    #[arg(long, value_name = "N")]
    pub subscribers: Option<u32>,
    /// TPC-C warehouses (1 to 4095; about 100 MB of rows each). Default: 1 (the smoke pass
    /// loads one small warehouse: 1000 items, 30 customers per district).
    #[arg(long, value_name = "N")]
    pub warehouses: Option<u32>,
    /// Value size in bytes.
    #[arg(long, value_name = "B", default_value_t = 100)]
    pub value_size: usize,
    /// YCSB request distribution: zipfian (each workload's own; D: latest) or uniform.
    #[arg(long, value_name = "D", default_value = "zipfian")]
    pub distribution: Distribution,
    /// Zipfian constant.
    #[arg(long, value_name = "THETA", default_value_t = DEFAULT_THETA)]
    pub theta: f64,
    /// Injected PM latencies to sweep for Ferrite engines, ns (comma-separated); baselines run
    /// at 0 only.
    #[arg(long = "latency-ns", value_delimiter = ',', value_name = "L")]
    pub latency_ns: Vec<u64>,
    /// Where injected latency applies: barrier (per persist barrier) or line (per flushed line).
    #[arg(long, value_name = "M", default_value = "barrier")]
    pub latency_model: LatencyModel,
    /// Flush instruction for Ferrite's pools (clwb, clflushopt, clflush). Default: best.
    #[arg(long, env = "FERRITE_FLUSH", value_name = "K")]
    pub flush: Option<FlushKind>,
    /// Emulated latency of every block-file sync, µs (0 to 100000), waited after each
    /// fdatasync by the engines on the paged file store (paged-journal-file, paged-wal-file,
    /// paged-nvwal-file); one value for the run, recorded in the column sync_latency_us.
    /// Default: 0.
    #[arg(long, value_name = "L")]
    pub sync_latency_us: Option<u64>,
    /// Parent directory of the run's fresh data directory. Default: /dev/shm (else the temp
    /// directory).
    #[arg(long, env = "FERRITE_BENCH_DIR", value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Directory for results.json, results.csv and SVG plots. Default: a fresh directory under
    /// the temp directory (printed).
    #[arg(long, env = "FERRITE_BENCH_OUT", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Engine the ratio column compares with. Default: sqlite-wal-full if it runs, else the
    /// first engine.
    #[arg(long, value_name = "E")]
    pub ratio_to: Option<String>,
    /// Seed of every random choice.
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,
    /// Run every point N times (fresh database each time) and report the run with the median
    /// throughput, with the spread. Default: 1 (calibration: 3).
    #[arg(long, value_name = "N")]
    pub repeat: Option<usize>,
    /// Compare the baselines' single-insert throughput (and two persistence primitives) with
    /// the calibration anchors of the project's conventions.
    #[arg(long, conflicts_with_all = ["smoke", "plot", "list"])]
    pub calibrate: bool,
    /// CI smoke pass: every workload on every engine, 1 and 2 threads, 0 and 1000 ns injected,
    /// a few hundred transactions per point; checks output shape and consistency, never speed.
    #[arg(long, conflicts_with_all = ["plot", "list"])]
    pub smoke: bool,
    /// List workloads and engines and exit.
    #[arg(long)]
    pub list: bool,
    /// Draw the SVG plots of an existing results.csv (into --out, default: beside it) and exit.
    #[arg(long, value_name = "CSV")]
    pub plot: Option<PathBuf>,
    /// Keep the data directory after the run.
    #[arg(long)]
    pub keep: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// Benchmarks with arguments of their own.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchCommand {
    // The restart benchmark. About and long help come from `RestartArgs` (a doc comment here
    // would replace them).
    Restart(Box<crate::restart_cli::RestartArgs>),
    /// The restart benchmark's child (started by `restart`).
    #[command(hide = true)]
    RestartChild(crate::restart_cli::RestartChildArgs),
}

/// Runs `ferrite bench` with `args`.
pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        Some(BenchCommand::Restart(a)) => return crate::restart_cli::run(a),
        Some(BenchCommand::RestartChild(a)) => return crate::restart_cli::run_child(a),
        None => {}
    }
    if args.list {
        print_list();
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(csv) = &args.plot {
        let out = args.out.clone().unwrap_or_else(|| {
            csv.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        });
        let files = plots_from_csv(csv, &out).map_err(anyhow::Error::msg)?;
        if files.is_empty() {
            println!("{}: no thread or latency sweep to plot", csv.display());
        }
        for f in files {
            println!("{}", f.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mode = if args.calibrate {
        Mode::Calibrate
    } else if args.smoke {
        Mode::Smoke
    } else {
        Mode::Run
    };
    let (spec_base, ratio_to) = build_spec(args, mode)?;
    let parent = data_parent(args.dir.as_deref())?;
    let stamp = utc_stamp();
    let run_dir = parent.join(format!("ferrite-bench-{}-{stamp}", std::process::id()));
    std::fs::create_dir(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let _cleanup = Cleanup { dir: run_dir.clone(), keep: args.keep };
    let out_dir =
        args.out.clone().unwrap_or_else(|| std::env::temp_dir().join("ferrite-bench").join(&stamp));
    let spec = RunSpec { dir: run_dir.clone(), ..spec_base };

    eprintln!(
        "ferrite bench: data in {} ({}), results to {}",
        run_dir.display(),
        if args.keep {
            "kept: --keep"
        } else {
            "removed at the end; an interrupted run leaves it behind"
        },
        out_dir.display()
    );
    let medium = describe_medium(&run_dir, args.flush);
    let progress = Bar::new((spec.points().len() * spec.repeat) as u64, args.no_progress);
    let results = runner::run(&spec, &progress);
    progress.finish();

    let mut report = Report {
        date: utc_now(),
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        build: if cfg!(debug_assertions) {
            "debug assertions ON (not a release build): figures are NOT representative; \
             use `cargo run --release`"
                .into()
        } else {
            "release".into()
        },
        settings: settings_of(&spec, &medium),
        ratio_to: Some(ratio_to),
        results,
    };
    report.compute_ratios();
    let files =
        report.write_files(&out_dir).with_context(|| format!("writing {}", out_dir.display()))?;
    let plots = plots_from_csv(&files.1, &out_dir).unwrap_or_else(|e| {
        eprintln!("warning: plots: {e}");
        Vec::new()
    });

    print!("{}", summary(&report));
    println!("Results: {} and {}", files.0.display(), files.1.display());
    for p in &plots {
        println!("Plot: {}", p.display());
    }
    let mut ok = report.results.iter().all(PointResult::ok);

    match mode {
        Mode::Calibrate => {
            let mut rows = calibrate::baseline_rows(&report.results);
            match calibrate::pmdk_raw_row(&run_dir, 500_000) {
                Ok(r) => rows.extend(r),
                Err(e) => eprintln!("warning: PMDK raw transaction not measured: {e}"),
            }
            match calibrate::primitive_rows(&run_dir, 200_000) {
                Ok(p) => rows.extend(p),
                Err(e) => eprintln!("warning: primitives not measured: {e}"),
            }
            println!();
            println!(
                "Calibration (insert1: one insert per transaction, 8-byte keys, {}-byte values, \
                 1 thread, {} preloaded records; primitives on a ferrite-pmem pool in {}):",
                spec.value_size,
                spec.scale,
                run_dir.display()
            );
            print!("{}", calibrate::table(&rows));
            if spec.value_size != 100 {
                println!(
                    "Note: the anchors are for 100-byte values; this run used {}.",
                    spec.value_size
                );
            }
            let path = out_dir.join("calibration.json");
            std::fs::write(&path, serde_json::to_string_pretty(&rows)?)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("Calibration: {}", path.display());
        }
        Mode::Smoke => {
            let problems = shape_problems(&spec, &report, Some((&files.0, &files.1)));
            if problems.is_empty() {
                println!(
                    "Smoke: {} points, every series complete, output shape and consistency checks ok.",
                    report.results.len()
                );
            } else {
                ok = false;
                println!("Smoke: {} problems:", problems.len());
                for p in problems {
                    println!("  {p}");
                }
            }
        }
        Mode::Run => {}
    }
    if args.keep {
        println!("Data kept in {}", run_dir.display());
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Run,
    Calibrate,
    Smoke,
}

/// The parent directory of a run's data: `dir`, else `/dev/shm` (else the temp directory).
pub(crate) fn data_parent(dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    let parent = match dir {
        Some(d) => d.to_path_buf(),
        None => {
            let shm = PathBuf::from("/dev/shm");
            if shm.is_dir() { shm } else { std::env::temp_dir() }
        }
    };
    if !parent.is_dir() {
        bail!("--dir {}: not a directory", parent.display());
    }
    Ok(parent)
}

struct Cleanup {
    dir: PathBuf,
    keep: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn print_list() {
    println!("Workloads:");
    for w in WorkloadId::all() {
        println!("  {:<12} {}", w.name(), w.describe());
    }
    println!(
        "  groups: micro, ycsb, oltp, all; insertN/updateN/deleteN take any N in 1..=1024; \
         tpcb takes --branches and --accounts-per-branch, tatp --subscribers, tpcc \
         --warehouses; PMDK runs no OLTP workload, LMDB no TPC-C (its key-value mapping has \
         no non-unique index)"
    );
    println!();
    println!("Engines:");
    for e in EngineId::all() {
        println!("  {:<20} {}", e.name(), e.describe());
    }
    println!("  groups: all, ferrite, baselines, sqlite");
}

/// Largest `--sync-latency-us`: 100 ms, a sync far slower than any flash device's.
const MAX_SYNC_LATENCY_US: u64 = 100_000;

fn positive_secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    if !(0.0..=86_400.0).contains(&v) {
        bail!("{name} {v}: expected seconds between 0 and 86400");
    }
    Ok(Duration::from_secs_f64(v))
}

/// The spec `args` describe (its `dir` is filled in by the caller) and the ratio reference.
fn build_spec(args: &BenchArgs, mode: Mode) -> anyhow::Result<(RunSpec, String)> {
    let mut workloads = if !args.workloads.is_empty() {
        WorkloadId::parse_list(&args.workloads).map_err(anyhow::Error::msg)?
    } else {
        match mode {
            Mode::Run => WorkloadId::parse_list(&["insert1,ycsb-a,tatp".into()])
                .map_err(anyhow::Error::msg)?,
            Mode::Calibrate => vec![WorkloadId::parse("insert1").map_err(anyhow::Error::msg)?],
            Mode::Smoke => WorkloadId::all(),
        }
    };
    let tpcb = TpcbScale {
        branches: args.branches.unwrap_or(1),
        accounts_per_branch: args.accounts_per_branch.unwrap_or(if mode == Mode::Smoke {
            1000
        } else {
            TpcbScale::default().accounts_per_branch
        }),
    };
    if !(1..=1_000_000).contains(&tpcb.branches)
        || !(1..=100_000_000).contains(&tpcb.accounts_per_branch)
    {
        bail!("--branches: 1 to 1000000; --accounts-per-branch: 1 to 100000000");
    }
    let subscribers = args.subscribers.unwrap_or(if mode == Mode::Smoke {
        2000
    } else {
        crate::oltp::tatp::DEFAULT_SUBSCRIBERS
    });
    if !(1..=100_000_000).contains(&subscribers) {
        bail!("--subscribers: 1 to 100000000");
    }
    let warehouses = args.warehouses.unwrap_or(1);
    if !(1..=crate::oltp::tpcc::MAX_WAREHOUSES).contains(&warehouses) {
        bail!("--warehouses: 1 to {}", crate::oltp::tpcc::MAX_WAREHOUSES);
    }
    let tpcc = if mode == Mode::Smoke {
        TpccScale { warehouses, items: 1000, customers: 30 }
    } else {
        TpccScale { warehouses, ..TpccScale::default() }
    };
    for w in &mut workloads {
        match w {
            WorkloadId::Tpcb(s) => *s = tpcb,
            WorkloadId::Tatp(n) => *n = subscribers,
            WorkloadId::Tpcc(s) => *s = tpcc,
            _ => {}
        }
    }
    let engines = if !args.engines.is_empty() {
        EngineId::parse_list(&args.engines).map_err(anyhow::Error::msg)?
    } else if mode == Mode::Calibrate {
        EngineId::baselines()
    } else if mode == Mode::Smoke {
        // The smoke pass checks every engine, the in-memory oracle included (labelled).
        EngineId::smoke()
    } else {
        EngineId::defaults()
    };
    if mode == Mode::Calibrate && engines.iter().any(|e| e.family() == Family::Ferrite) {
        bail!("--calibrate runs baselines only (the anchors are theirs)");
    }
    if !args.engines.is_empty() {
        // An engine asked for by name that does not run a workload gets no point there: say so.
        for w in &workloads {
            for e in engines.iter().filter(|&&e| !w.supports(e)) {
                eprintln!(
                    "note: {e} does not run {w} ({}); skipped",
                    if matches!(e, EngineId::Lmdb) {
                        "its key-value mapping has no non-unique index"
                    } else {
                        "no OLTP mapping"
                    }
                );
            }
        }
    }
    let threads = if !args.threads.is_empty() {
        args.threads.clone()
    } else if mode == Mode::Smoke {
        vec![1, 2]
    } else {
        vec![1]
    };
    if let Some(&t) = threads.iter().find(|&&t| t == 0 || t > 1024) {
        bail!("--threads {t}: expected 1 to 1024");
    }
    if mode == Mode::Calibrate && threads != [1] {
        bail!("--calibrate runs one thread (the anchors are single-threaded)");
    }
    let latencies = if !args.latency_ns.is_empty() {
        args.latency_ns.clone()
    } else if mode == Mode::Smoke {
        vec![0, 1000]
    } else {
        vec![0]
    };
    if let Some(&l) = latencies.iter().find(|&&l| l > 10_000_000) {
        bail!("--latency-ns {l}: at most 10000000 (10 ms)");
    }
    let sync_latency_us = args.sync_latency_us.unwrap_or(0);
    if sync_latency_us > MAX_SYNC_LATENCY_US {
        bail!("--sync-latency-us {sync_latency_us}: at most {MAX_SYNC_LATENCY_US} (100 ms)");
    }
    if sync_latency_us != 0 && !engines.iter().any(|e| matches!(e, EngineId::PagedFile(_))) {
        eprintln!(
            "note: --sync-latency-us applies to the engines on the paged file store only \
             (paged-journal-file, paged-wal-file, paged-nvwal-file), none of which runs here"
        );
    }
    let stop = match (args.duration, args.ops) {
        (_, Some(0)) => bail!("--ops 0: expected at least 1"),
        (_, Some(n)) => Stop::Txns(n),
        (Some(d), None) => {
            let d = positive_secs("--duration", d)?;
            if d.is_zero() {
                bail!("--duration 0: expected a positive number of seconds");
            }
            Stop::Duration(d)
        }
        (None, None) if mode == Mode::Smoke => Stop::Txns(200),
        (None, None) => Stop::Duration(Duration::from_secs(3)),
    };
    let warmup = match (args.warmup, args.warmup_ops, stop) {
        (Some(w), _, _) => Warmup::Duration(positive_secs("--warmup", w)?),
        (None, Some(n), _) => Warmup::Txns(n),
        (None, None, Stop::Txns(n)) => Warmup::Txns(n / 10),
        (None, None, Stop::Duration(_)) => Warmup::Duration(Duration::from_millis(500)),
    };
    if args.value_size > 1 << 20 {
        bail!("--value-size {}: at most 1048576", args.value_size);
    }
    if !(args.theta > 0.0 && args.theta < 1.0) {
        bail!("--theta {}: expected 0 < theta < 1", args.theta);
    }
    let scale = match (args.scale, mode) {
        (Some(s), _) => s,
        (None, Mode::Calibrate) => 0,
        (None, Mode::Smoke) => 2000,
        (None, Mode::Run) => 100_000,
    };
    if scale > 1 << 32 {
        bail!("--scale {scale}: at most 4294967296 records");
    }
    let repeat = args.repeat.unwrap_or(if mode == Mode::Calibrate { 3 } else { 1 });
    if !(1..=100).contains(&repeat) {
        bail!("--repeat {repeat}: expected 1 to 100");
    }
    let ratio_to = match &args.ratio_to {
        Some(r) => {
            let e = EngineId::parse(r).map_err(anyhow::Error::msg)?;
            if !engines.contains(&e) {
                bail!("--ratio-to {r}: not among the engines of this run");
            }
            e.name()
        }
        None if engines.contains(&EngineId::SqliteWalFull) => EngineId::SqliteWalFull.name(),
        None => engines[0].name(),
    };
    let spec = RunSpec {
        workloads,
        engines,
        threads,
        latencies,
        latency_model: args.latency_model,
        flush: args.flush,
        sync_latency_us,
        stop,
        warmup,
        scale,
        value_size: args.value_size,
        distribution: args.distribution,
        theta: args.theta,
        seed: args.seed,
        repeat,
        dir: PathBuf::new(),
    };
    Ok((spec, ratio_to))
}

/// What the run directory is, what Ferrite's pools would get there, and what "durable" means
/// for the baselines on it.
fn describe_medium(dir: &Path, flush: Option<FlushKind>) -> String {
    let mut opts = ferrite::pmem::Options::default();
    if let Some(f) = flush {
        opts = opts.flush(f);
    }
    match ferrite::pmem::probe::probe_path(dir, &opts) {
        Ok(r) => {
            let ram = ferrite::pmem::platform::fs_is_ram(r.fs_magic);
            let mut s = format!(
                "{} on {}: Ferrite pools get {} mode ({}; flush {}, measured persist barrier \
                 {:.0} ns)",
                dir.display(),
                r.fs_name,
                r.decision.mode,
                r.decision.mode.guarantee(),
                r.flush,
                r.persist_barrier_ns
            );
            if ram {
                s.push_str(
                    ". fsync on this RAM file system is nearly free: SQLite's and LMDB's \
                     durable commits cost far less than on a disk, and survive a process \
                     crash only, not a power loss",
                );
            }
            s
        }
        Err(e) => format!("{} (probe failed: {e})", dir.display()),
    }
}

/// The progress bar (hidden when stderr is not a terminal or with `--no-progress`).
struct Bar {
    pb: ProgressBar,
    label: Mutex<String>,
}

impl Bar {
    fn new(total: u64, hidden: bool) -> Bar {
        let pb = if hidden {
            ProgressBar::hidden()
        } else {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        };
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
        {
            pb.set_style(style);
        }
        pb.enable_steady_tick(Duration::from_millis(150));
        Bar { pb, label: Mutex::new(String::new()) }
    }

    fn finish(&self) {
        self.pb.finish_and_clear();
    }
}

impl Progress for Bar {
    fn start(&self, index: usize, _total: usize, label: &str) {
        self.pb.set_position(index as u64);
        if let Ok(mut l) = self.label.lock() {
            *l = label.to_owned();
        }
        self.pb.set_message(label.to_owned());
    }

    fn phase(&self, phase: &str) {
        let l = self.label.lock().map(|l| l.clone()).unwrap_or_default();
        self.pb.set_message(format!("{l} [{phase}]"));
    }

    fn done(&self, r: &PointResult) {
        self.pb.inc(1);
        if let Some(e) = &r.error {
            self.pb.println(format!("{} {} t{}: ERROR {e}", r.workload, r.engine, r.threads));
        } else if !r.ok() {
            self.pb.println(format!(
                "{} {} t{}: consistency check FAILED",
                r.workload, r.engine, r.threads
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn spec(argv: &[&str]) -> anyhow::Result<(RunSpec, String)> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))?;
        let mode = if cli.args.calibrate {
            Mode::Calibrate
        } else if cli.args.smoke {
            Mode::Smoke
        } else {
            Mode::Run
        };
        build_spec(&cli.args, mode)
    }

    #[test]
    fn defaults_are_the_quick_suite() {
        let (s, r) = spec(&[]).unwrap();
        let names: Vec<String> = s.workloads.iter().map(|w| w.name()).collect();
        assert_eq!(names, ["insert1", "ycsb-a", "tatp"]);
        assert_eq!(s.engines, EngineId::defaults());
        // SOFORT is the first row; the in-memory reference engine only runs on request.
        assert_eq!(s.engines[0], EngineId::Ferrite(ferrite::EngineKind::Sofort));
        assert!(!s.engines.contains(&EngineId::Ferrite(ferrite::EngineKind::Reference)));
        assert_eq!(s.threads, vec![1]);
        assert_eq!(s.stop, Stop::Duration(Duration::from_secs(3)));
        assert_eq!(r, "sqlite-wal-full");
        // Baselines appear once, Ferrite engines once per latency.
        let (s, _) = spec(&["--latency-ns", "0,300,1000", "-e", "reference,lmdb"]).unwrap();
        assert_eq!(s.points().len(), 3 * (3 + 1), "three workloads");
        assert_eq!(s.sync_latency_us, 0);
    }

    #[test]
    fn sync_latency_applies_to_the_file_store_engines_only() {
        let (s, _) =
            spec(&["-w", "insert1", "-e", "paged-wal-file,paged-wal", "--sync-latency-us", "50"])
                .unwrap();
        assert_eq!(s.sync_latency_us, 50);
        let file = EngineId::PagedFile(ferrite::PagedProtocol::Wal);
        let pm =
            EngineId::Ferrite(ferrite::EngineKind::Paged { protocol: ferrite::PagedProtocol::Wal });
        assert_eq!(s.engines, [file, pm]);
        assert_eq!((s.sync_latency_us_of(file), s.sync_latency_us_of(pm)), (50, 0));
        assert!(s.has_file_store());
        assert_eq!(spec(&["--sync-latency-us", "100000"]).unwrap().0.sync_latency_us, 100_000);
    }

    #[test]
    fn bad_flags_are_errors_not_panics() {
        for bad in [
            &["--threads", "0"][..],
            &["--workload", "nope"],
            &["--engine", "nope"],
            &["--duration", "-1"],
            &["--duration", "0"],
            &["--ops", "0"],
            &["--theta", "1.5"],
            &["--ratio-to", "lmdb", "-e", "reference"],
            &["--calibrate", "-e", "reference"],
            &["--calibrate", "-t", "2"],
            &["--duration", "1", "--ops", "5"],
            &["--latency-ns", "x"],
            &["--value-size", "99999999"],
            &["--distribution", "pareto"],
            &["--repeat", "0"],
            &["--sync-latency-us", "x"],
            &["--sync-latency-us", "-1"],
            &["--sync-latency-us", "100001"],
            &["--sync-latency-us", "1,2"],
        ] {
            assert!(spec(bad).is_err(), "{bad:?} accepted");
        }
        // A build without PMDK refuses it (a build with it runs it); both answers are also
        // checked in one build by `subject::tests::names_round_trip_and_aliases`.
        assert_eq!(spec(&["-e", "pmdk"]).is_ok(), ferrite_baselines::PMDK_AVAILABLE);
    }

    #[test]
    fn smoke_and_calibrate_defaults() {
        let (s, _) = spec(&["--smoke"]).unwrap();
        let names = |v: &[WorkloadId]| v.iter().map(|w| w.name()).collect::<Vec<_>>();
        assert_eq!(names(&s.workloads), names(&WorkloadId::all()));
        // The smoke pass loads small TPC-B branches; --branches applies to tpcb.
        let small = TpcbScale { branches: 1, accounts_per_branch: 1000 };
        assert!(s.workloads.contains(&WorkloadId::Tpcb(small)));
        let (b, _) = spec(&["-w", "tpcb", "--branches", "3"]).unwrap();
        assert_eq!(
            b.workloads,
            [WorkloadId::Tpcb(TpcbScale { branches: 3, ..TpcbScale::default() })]
        );
        assert!(spec(&["-w", "tpcb", "--branches", "0"]).is_err());
        // TATP: small in the smoke pass, --subscribers applies to tatp.
        assert!(s.workloads.contains(&WorkloadId::Tatp(2000)));
        let (t, _) = spec(&["-w", "oltp", "--subscribers", "1000000"]).unwrap();
        assert_eq!(
            t.workloads,
            [
                WorkloadId::Tpcb(TpcbScale::default()),
                WorkloadId::Tatp(1_000_000),
                WorkloadId::Tpcc(TpccScale::default())
            ]
        );
        let (t, _) = spec(&["-w", "tatp"]).unwrap();
        assert_eq!(t.workloads, [WorkloadId::Tatp(100_000)]);
        assert!(spec(&["-w", "tatp", "--subscribers", "0"]).is_err());
        // TPC-C: one small warehouse in the smoke pass, --warehouses applies to tpcc.
        let tiny = TpccScale { warehouses: 1, items: 1000, customers: 30 };
        assert!(s.workloads.contains(&WorkloadId::Tpcc(tiny)));
        let (t, _) = spec(&["-w", "tpcc", "--warehouses", "4"]).unwrap();
        assert_eq!(
            t.workloads,
            [WorkloadId::Tpcc(TpccScale { warehouses: 4, ..TpccScale::default() })]
        );
        assert!(spec(&["-w", "tpcc", "--warehouses", "0"]).is_err());
        assert!(spec(&["-w", "tpcc", "--warehouses", "4096"]).is_err());
        assert_eq!(s.threads, vec![1, 2]);
        assert_eq!(s.stop, Stop::Txns(200));
        let (c, r) = spec(&["--calibrate"]).unwrap();
        assert_eq!(c.engines, EngineId::baselines());
        assert_eq!(c.scale, 0);
        assert_eq!(r, "sqlite-wal-full");
    }
}
