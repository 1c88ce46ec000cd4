//! `ferrite crashtest`: list, run and replay crash targets.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use ferrite_crashtest::{Config, Progress, Verdict, find, registry};
use ferrite_pmem::sim::WritebackOrder;
use indicatif::{ProgressBar, ProgressStyle};

/// Exit status of a run stopped by `--budget` or `--time` before the end of the workload
/// without a failure (0: passed, 1: a failure, 2: usage or internal error).
pub const EXIT_STOPPED: u8 = 3;

#[derive(Debug, Args)]
pub struct CrashtestArgs {
    /// The target to run (see --list).
    name: Option<String>,
    /// List the targets as `name<TAB>summary`.
    #[arg(long)]
    list: bool,
    /// With --list: names only.
    #[arg(long, requires = "list")]
    names: bool,
    /// Seed of every random choice (printed in the report; default: a fresh one).
    #[arg(long, value_parser = parse_seed)]
    seed: Option<u64>,
    /// Stop crashing after this many images were tested (a run stopped before the end of
    /// its workload reports how much it checked and exits 3, never "PASSED").
    #[arg(long)]
    budget: Option<u64>,
    /// Stop crashing after this many seconds (as --budget: exit 3 if stopped).
    #[arg(long)]
    time: Option<u64>,
    /// Crash at every visit of every crash point (no call-stack halving).
    #[arg(long)]
    exhaustive: bool,
    /// Also crash at flushes.
    #[arg(long)]
    at_flush: bool,
    /// Let a fence land a thread's captured line over newer content of that line that another
    /// thread's fence made durable (the model before axiom M6; stricter than x86 hardware,
    /// whose write-backs of one line land in coherence order).
    #[arg(long)]
    strict_writebacks: bool,
    /// Do not try subsets of pending lines (only none and all).
    #[arg(long)]
    no_stash: bool,
    /// Seeded eviction samples per crash (0: no early eviction of dirty lines).
    #[arg(long, default_value_t = 2)]
    evict: usize,
    /// Seeded torn-line samples per crash, for targets without M2 (0: no tearing).
    #[arg(long, default_value_t = 2)]
    tear: usize,
    /// Do not crash recoveries (nested crashes are on by default, sampled).
    #[arg(long)]
    no_nested: bool,
    /// Fraction of recoveries crashed when nesting.
    #[arg(long, default_value_t = 0.25)]
    nested_rate: f64,
    /// Corrupted variants (bit flips, truncation) recovered per crash.
    #[arg(long, default_value_t = 0)]
    corrupt: usize,
    /// Mutation check: for every persist site the target reaches, run with that site dropped;
    /// each must be detected or explained as benign.
    #[arg(long)]
    mutate: bool,
    /// Seconds one recovery plus check may take.
    #[arg(long, default_value_t = 30)]
    watchdog: u64,
    /// Directory for failing images.
    #[arg(long, default_value = "crash-repros")]
    out: PathBuf,
    /// Recover and check a saved failure instead of exploring.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub(crate) fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("not a seed: {s:?} (decimal or 0x hex)"))
}

pub(crate) fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

pub fn run(a: &CrashtestArgs) -> anyhow::Result<ExitCode> {
    if a.list {
        for t in registry() {
            if a.names {
                println!("{}", t.name());
            } else {
                println!("{}\t{}", t.name(), t.summary());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(name) = &a.name else {
        bail!("name a target (ferrite crashtest --list shows them)");
    };
    let target = find(name).with_context(|| {
        format!("no crash target {name:?} (ferrite crashtest --list shows them)")
    })?;
    if let Some(dir) = &a.replay {
        return Ok(match target.replay(dir, Duration::from_secs(a.watchdog)) {
            Ok(()) => {
                println!("{name}: replay of {} PASSED", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) if e.starts_with("cannot load") || e.starts_with("cannot read") => {
                bail!("{e}");
            }
            Err(e) => {
                println!("{name}: replay of {} FAILED:\n  {e}", dir.display());
                ExitCode::from(1)
            }
        });
    }
    let seed = a.seed.unwrap_or_else(fresh_seed);
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else {
        let b = match a.budget {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        b.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} [{bar:30}] {pos} images {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let pb = bar.clone();
    let cfg = Config {
        seed,
        budget: a.budget,
        time: a.time.map(Duration::from_secs),
        exhaustive: a.exhaustive,
        at_flush: a.at_flush,
        writebacks: if a.strict_writebacks {
            WritebackOrder::Strict
        } else {
            WritebackOrder::Coherent
        },
        stash: !a.no_stash,
        evict_samples: a.evict,
        tear_samples: a.tear,
        nested: !a.no_nested,
        nested_rate: a.nested_rate,
        corrupt_samples: a.corrupt,
        watchdog: Duration::from_secs(a.watchdog),
        out_dir: a.out.clone(),
        // A recovery that kills the process leaves its image in `<out>/<target>-current/`.
        save_each: true,
        progress: Some(Arc::new(move |p: &Progress| {
            pb.set_position(p.images);
            pb.set_message(format!("{} crash points, {} failures", p.visited, p.failures));
        })),
        ..Config::default()
    };
    if !(0.0..=1.0).contains(&a.nested_rate) {
        bail!("--nested-rate must be between 0 and 1");
    }
    if a.mutate {
        let m = target.mutate(&Config { progress: None, ..cfg });
        bar.finish_and_clear();
        print!("{}{m}", m.base);
        return Ok(if m.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    let report = target.explore(&cfg);
    bar.finish_and_clear();
    print!("{report}");
    if let (Some(e), true) = (&report.workload_error, report.failures.is_empty()) {
        bail!("the workload of {name} failed: {e}");
    }
    Ok(match report.verdict() {
        Verdict::Passed => ExitCode::SUCCESS,
        Verdict::Failed => ExitCode::from(1),
        // No failure, but part of the workload's crash points were never checked.
        Verdict::Stopped(_) => ExitCode::from(EXIT_STOPPED),
    })
}
