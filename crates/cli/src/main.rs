//! The `ferrite` command line.
//!
//! Exit codes: 0 success, 1 a check found a failure (later subcommands), 2 usage or internal
//! error. Environment variables only seed defaults of flags; they are listed in
//! `docs/configuration.md`.
#![forbid(unsafe_code)]

mod alloc_stats;
mod campaign;
mod crashtest;
mod info;

use std::process::ExitCode;

/// The binary's Rust heap: mimalloc. Ferrite builds rows of owned values (`Vec`, `String`)
/// per operation, and glibc's allocator took about a fifth of the cycles of a TPC-C run
/// (`docs/benchmarks.md`); C libraries linked in (SQLite, LMDB) keep their own allocation.
#[global_allocator]
static HEAP: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Ferrite: a transactional storage engine for persistent memory.
#[derive(Debug, Parser)]
#[command(name = "ferrite", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print CPU persistence features, the durability mode a path would get and why, and the
    /// measured cost of a persist barrier and of a read after a flush.
    Info(info::InfoArgs),
    /// Crash-test a registered target: crash it at its persist points, recover every crash
    /// image and check it against the target's model (exit 0 passed, 1 failure found).
    Crashtest(crashtest::CrashtestArgs),
    // About and long help come from `BenchArgs`.
    Bench(Box<ferrite_bench::cli::BenchArgs>),
    /// Open a PAllocator pool set (recovering it, as any open does), run its full check and
    /// print segments, pages per class and blocks (exit 0 passed, 1 inconsistent).
    AllocStats(alloc_stats::AllocStatsArgs),
    /// Kill -9 campaign: a child runs an OLTP workload on a file-backed database and
    /// acknowledges commits through a pipe; it is killed with SIGKILL at seeded moments, the
    /// database is reopened and verified (nothing acknowledged lost, the workload's
    /// invariants), and again (exit 0 passed, 1 a loss or violation).
    Campaign(campaign::CampaignArgs),
    /// The campaign's child (started by `ferrite campaign`).
    #[command(hide = true)]
    CampaignChild(campaign::CampaignChildArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Crashtest(args) => crashtest::run(&args),
        Command::AllocStats(args) => alloc_stats::run(&args),
        Command::Bench(args) => ferrite_bench::cli::run(&args),
        Command::Campaign(args) => campaign::run(&args),
        Command::CampaignChild(args) => campaign::run_child(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrite: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
