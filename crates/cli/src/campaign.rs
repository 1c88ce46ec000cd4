//! `ferrite campaign`: the kill -9 campaign (logic and verification rules in
//! `ferrite_bench::campaign`), and its hidden child role `ferrite campaign-child`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use clap::Args;
use ferrite::EngineKind;
use ferrite_bench::campaign::{self, Campaign, ChildSpec, Config};
use ferrite_bench::oltp::TpccScale;

use crate::crashtest::{fresh_seed, parse_seed};

#[derive(Debug, Args)]
pub struct CampaignArgs {
    /// The workload the child runs: tatp or tpcc.
    #[arg(long, default_value = "tatp")]
    workload: String,
    /// Rounds: each kills the child with SIGKILL (or lets it stop by itself), then reopens
    /// and verifies the database.
    #[arg(long, default_value_t = 20)]
    kills: u64,
    /// Seed of the population, the kill points and the children's transactions (printed;
    /// default: a fresh one).
    #[arg(long, value_parser = parse_seed)]
    seed: Option<u64>,
    /// Directory for the database (created as DIR/db; default: a fresh directory under
    /// /dev/shm). The database is removed at the end unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the database at the end.
    #[arg(long)]
    keep: bool,
    /// A persistent Ferrite engine.
    #[arg(long, default_value = "sofort")]
    engine: String,
    /// TATP subscribers.
    #[arg(long, default_value_t = 1000)]
    subscribers: u32,
    /// TPC-C warehouses.
    #[arg(long, default_value_t = 1)]
    warehouses: u32,
    /// TPC-C items (test scale; the specification's 100 000 by default).
    #[arg(long, default_value_t = 100_000)]
    items: u32,
    /// TPC-C customers per district (test scale; the specification's 3 000 by default).
    #[arg(long, default_value_t = 3000)]
    customers: u32,
    /// Each round kills the child after a seeded number of acknowledged commits in 1..=N.
    #[arg(long, default_value_t = 400)]
    max_acks: u64,
    /// A seeded quarter of the kills waits a seeded 0..N µs after the chosen ack first.
    #[arg(long, default_value_t = 2000)]
    jitter_us: u64,
}

/// The hidden child role: runs as the parent's spec says, acknowledging on stdout.
#[derive(Debug, Args)]
pub struct CampaignChildArgs {
    /// The child's spec, as `ChildSpec::encode` wrote it.
    spec: String,
}

pub fn run(args: &CampaignArgs) -> anyhow::Result<ExitCode> {
    let engine: EngineKind = args.engine.parse().context("--engine")?;
    if !engine.is_persistent() {
        bail!(
            "--engine {engine}: the engine is in memory, nothing survives a kill; use a \
             persistent engine (sofort)"
        );
    }
    let seed = args.seed.unwrap_or_else(fresh_seed);
    let (root, fresh) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => {
            let shm = PathBuf::from("/dev/shm");
            let base = if shm.is_dir() { shm } else { std::env::temp_dir() };
            (base.join(format!("ferrite-campaign-{}", std::process::id())), true)
        }
    };
    std::fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    let (workload, scale) = if args.workload == "tpcc" {
        let scale =
            TpccScale { warehouses: args.warehouses, items: args.items, customers: args.customers }
                .clamped();
        let text = format!(
            "{} warehouses, {} items, {} customers per district",
            scale.warehouses, scale.items, scale.customers
        );
        (campaign::tpcc::spec(scale), text)
    } else {
        (args.workload.clone(), format!("{} subscribers", args.subscribers))
    };
    let mut cfg = Config::new(&workload, engine, root.clone(), seed);
    cfg.kills = args.kills;
    cfg.subscribers = args.subscribers;
    cfg.max_acks = args.max_acks;
    cfg.jitter_us = args.jitter_us;
    println!(
        "Campaign: {} on {engine}, {scale}, {} kills, acks per round 1..={}, jitter \
         0..{} µs on a quarter of the kills, seed {seed:#x}, database {}",
        args.workload,
        args.kills,
        args.max_acks,
        args.jitter_us,
        root.join("db").display()
    );
    let exe = std::env::current_exe().context("current_exe")?;
    let launch = |spec: &ChildSpec| {
        let mut c = Command::new(&exe);
        c.arg("campaign-child").arg(spec.encode());
        c
    };
    let result = (|| -> anyhow::Result<Campaign> {
        let mut c = Campaign::create(cfg)?;
        let every = (args.kills / 10).max(1);
        c.run(&launch, &mut |round, s| {
            if round % every == 0 || round == args.kills {
                eprintln!(
                    "round {round}/{}: {} acked, {} lost, {} violations",
                    args.kills,
                    s.acked,
                    s.losses.len(),
                    s.violations.len()
                );
            }
        })?;
        Ok(c)
    })();
    let cleanup = || {
        if args.keep {
            println!("Kept: {}", root.join("db").display());
        } else if fresh {
            let _ = std::fs::remove_dir_all(&root);
        } else {
            let _ = std::fs::remove_dir_all(root.join("db"));
        }
    };
    let c = match result {
        Ok(c) => c,
        Err(e) => {
            cleanup();
            return Err(e);
        }
    };
    print!("{}", c.summary().report());
    cleanup();
    Ok(if c.summary().passed() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn run_child(args: &CampaignChildArgs) -> anyhow::Result<ExitCode> {
    let spec = ChildSpec::decode(&args.spec)?;
    campaign::run_child(&spec)?;
    Ok(ExitCode::SUCCESS)
}
