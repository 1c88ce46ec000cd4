//! `ferrite bench restart`: the restart benchmark's arguments and command ([`crate::restart`]
//! has the logic), and its hidden child role `restart-child`.
//!
//! The children are this binary re-executed with the words that led to `restart` (`bench` for
//! `ferrite`, nothing for `ferrite-bench`) followed by `restart-child SPEC`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use clap::Args;

use crate::machine::{machine, utc_now, utc_stamp};
use crate::oltp::TpccScale;
use crate::restart::{self, ChildSpec, Plan, RestartConfig, RestartWorkload, parse_duration};

/// Arguments of `ferrite bench restart`.
#[derive(Debug, Clone, Args)]
#[command(
    about = "Restart benchmark: SIGKILL at steady state, then time to open, to first commit, \
             and throughput over time after restart (CSV, SVG, summary)",
    long_about = "Restart benchmark of the SOFORT engine.\n\n\
                  Per workload size and configuration: loads a fresh database on a file-backed \
                  pool set (under /dev/shm by default), runs the workload in a child process \
                  for --warm (reporting its steady-state throughput), kills it with SIGKILL, \
                  then in a fresh process opens the database (recovery) and measures the time \
                  until `open` returns, until the first transaction of the workload commits \
                  (both from just before `open`), the recovery report's own times, and the \
                  committed transactions per --bucket for --after seconds after `open`; then \
                  runs the engine's check. Writes restart.csv (seconds since restart, tx/s, \
                  configuration), restart-summary.txt and restart-<size>.svg (one line per \
                  configuration, a marker at each first commit) into --out.\n\n\
                  Configurations: --config NAME (a preset: sync, instant, adaptive) or \
                  --config NAME=SETTING=VALUE,... (settings: slots, alloc_slots, \
                  prefault=true|false, recovery=sync|instant, recovery_threads=N, \
                  placement=dram|hybrid|persistent, past_sample=N, strategy=LABEL of the seed's Table 6.1 \
                  such as rk.Q1.R1, !rk.Q1.R1, rk.Qad.R2ad); repeat the \
                  flag to compare several. Durations: 5s, 100ms, 250us or plain seconds."
)]
pub struct RestartArgs {
    /// Workload: tatp or tpcc.
    #[arg(long, default_value = "tatp", value_name = "W")]
    pub workload: String,
    /// TATP subscribers (comma-separated sizes to run in turn).
    #[arg(long, value_delimiter = ',', value_name = "N", default_value = "1000000")]
    pub scale: Vec<u32>,
    /// TPC-C warehouses (comma-separated sizes to run in turn).
    #[arg(long, value_delimiter = ',', value_name = "N", default_value = "1")]
    pub warehouses: Vec<u32>,
    /// TPC-C items per warehouse (test scale; the specification's 100000 by default).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub items: u32,
    /// TPC-C customers per district (test scale; the specification's 3000 by default).
    #[arg(long, value_name = "N", default_value_t = 3000)]
    pub customers: u32,
    /// Worker threads, before the kill and after the restart.
    #[arg(long, short = 't', value_name = "N", default_value_t = 2)]
    pub threads: usize,
    /// How long the child runs before the kill (steady state: the second half's throughput).
    #[arg(long, value_name = "D", default_value = "5s")]
    pub warm: String,
    /// The child commits at least this many transactions before the kill.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub warm_txns: u64,
    /// How long the workload runs after `open` returned.
    #[arg(long, value_name = "D", default_value = "10s")]
    pub after: String,
    /// The restarted process commits at least this many transactions (it runs past --after
    /// until it has).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub after_txns: u64,
    /// Width of a throughput bucket.
    #[arg(long, value_name = "D", default_value = "100ms")]
    pub bucket: String,
    /// A configuration: NAME (preset) or NAME=SETTING=VALUE,... (repeatable). Default: sync.
    #[arg(long = "config", value_name = "C")]
    pub configs: Vec<String>,
    /// Seed of the population and the workers.
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,
    /// Parent directory of the run's databases. Default: /dev/shm (else the temp directory).
    #[arg(long, env = "FERRITE_BENCH_DIR", value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Directory for restart.csv, restart-summary.txt and the SVG plots. Default: a fresh
    /// directory under the temp directory (printed).
    #[arg(long, env = "FERRITE_BENCH_OUT", value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Arguments of the hidden `restart-child`.
#[derive(Debug, Clone, Args)]
pub struct RestartChildArgs {
    /// The child's spec, as `ChildSpec::encode` wrote it.
    pub spec: String,
}

/// The plan `args` describe (its `dir` is the caller's).
pub fn plan(args: &RestartArgs, dir: PathBuf) -> anyhow::Result<Plan> {
    let workloads = match args.workload.as_str() {
        "tatp" => {
            args.scale.iter().map(|&subscribers| RestartWorkload::Tatp { subscribers }).collect()
        }
        "tpcc" => args
            .warehouses
            .iter()
            .map(|&warehouses| {
                RestartWorkload::Tpcc(TpccScale {
                    warehouses,
                    items: args.items,
                    customers: args.customers,
                })
            })
            .collect(),
        w => bail!("--workload {w:?}: tatp or tpcc"),
    };
    let configs = if args.configs.is_empty() {
        vec![RestartConfig::parse("sync")?]
    } else {
        args.configs.iter().map(|c| RestartConfig::parse(c)).collect::<Result<Vec<_>, _>>()?
    };
    let plan = Plan {
        workloads,
        configs,
        threads: args.threads,
        warm: parse_duration(&args.warm).context("--warm")?,
        warm_txns: args.warm_txns,
        after: parse_duration(&args.after).context("--after")?,
        after_txns: args.after_txns,
        bucket: parse_duration(&args.bucket).context("--bucket")?,
        seed: args.seed,
        dir,
    };
    plan.validate()?;
    Ok(plan)
}

/// Runs `ferrite bench restart`.
pub fn run(args: &RestartArgs) -> anyhow::Result<ExitCode> {
    let parent = crate::cli::data_parent(args.dir.as_deref())?;
    let stamp = utc_stamp();
    let dir = parent.join(format!("ferrite-restart-{}-{stamp}", std::process::id()));
    let plan = plan(args, dir.clone())?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("ferrite-restart").join(&stamp));
    let exe = std::env::current_exe().context("current_exe")?;
    // The words between the program and `restart` (`bench` under `ferrite`).
    let prefix: Vec<String> = std::env::args().skip(1).take_while(|a| a != "restart").collect();
    let launch = |spec: &ChildSpec| {
        let mut c = Command::new(&exe);
        c.args(&prefix).arg("restart-child").arg(spec.encode());
        c
    };
    let configs: Vec<String> = plan.configs.iter().map(ToString::to_string).collect();
    let header = format!(
        "Restart benchmark, {}\nMachine: {:?}\nCommand: {}\nBuild: {}\nThreads {}, warm {:?} \
         (at least {} commits), after {:?} (at least {} commits), bucket {:?}, seed {}\n\
         Configurations: {}\n\
         Databases under {}\n\n",
        utc_now(),
        machine(),
        std::env::args().collect::<Vec<_>>().join(" "),
        if cfg!(debug_assertions) {
            "debug assertions ON (figures NOT representative)"
        } else {
            "release"
        },
        plan.threads,
        plan.warm,
        plan.warm_txns,
        plan.after,
        plan.after_txns,
        plan.bucket,
        plan.seed,
        configs.join("; "),
        dir.display()
    );
    eprint!("{header}");
    let res = restart::run(&plan, &launch, &mut |r| {
        eprint!("{}", restart::summary(std::slice::from_ref(r)));
    });
    let _ = std::fs::remove_dir_all(&dir);
    let results = res?;
    let files = restart::write_outputs(&results, &out, &header)?;
    print!("{header}{}", restart::summary(&results));
    for f in &files {
        println!("Wrote {}", f.display());
    }
    Ok(if results.iter().all(|r| r.check.is_ok()) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Runs the hidden child role.
pub fn run_child(args: &RestartChildArgs) -> anyhow::Result<ExitCode> {
    let spec = ChildSpec::decode(&args.spec)?;
    restart::run_child(&spec)?;
    Ok(ExitCode::SUCCESS)
}
