//! What a run found: per-key and per-site statistics, failures, and the printed report.
//!
//! # Invariants
//! - `Report::passed` holds only for a run that found no failure and ran its workload to
//!   completion.
//!
//! # Concurrency
//! Plain values, filled in by the explorer under its state lock.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Per-key statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyStats {
    /// Visits of this crash point.
    pub visits: u64,
    /// Visits that crashed.
    pub crashes: u64,
    /// Images tested there.
    pub images: u64,
}

/// A persist site reached by the workload (coverage).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// Flushes issued there.
    pub flushes: u64,
    /// Fences issued there.
    pub fences: u64,
    /// Crashes simulated there.
    pub crashes: u64,
}

/// A failing image.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Crash-point key (for a crash inside recovery: `nested <key> after <key>`).
    pub key: String,
    /// The run's seed.
    pub seed: u64,
    /// Number of the image in the run (1-based).
    pub image: u64,
    /// Which lines the image holds beyond the durable image.
    pub spec: String,
    /// What went wrong (what the check expected and found, the panic, or the hang).
    pub message: String,
    /// Where the image, its model and the crash description were saved.
    pub saved: Option<PathBuf>,
    /// A command that replays this failure.
    pub replay: String,
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Target name.
    pub target: String,
    /// Seed.
    pub seed: u64,
    /// Crash points visited.
    pub visited: u64,
    /// Visits that crashed.
    pub crashed: u64,
    /// Images recovered and checked (all depths, corrupted variants included).
    pub images: u64,
    /// Images tested inside recoveries (depth 2).
    pub nested_images: u64,
    /// Corrupted images recovered.
    pub corrupt_images: u64,
    /// Statistics per crash-point key.
    pub keys: BTreeMap<String, KeyStats>,
    /// Persist sites the workload reached (flush and fence call sites).
    pub sites: BTreeMap<String, SiteStats>,
    /// Ordering rules the target declares and the workload never reached.
    pub rules_not_reached: Vec<String>,
    /// Fences seen.
    pub fences: u64,
    /// Lines flushed twice by one thread without a fence between (a hint of a bug).
    pub double_flushes: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether exploration stopped early (budget, time or first failure).
    pub stopped_early: bool,
    /// Failures.
    pub failures: Vec<Failure>,
    /// An error of the workload itself (not a crash-consistency failure).
    pub workload_error: Option<String>,
}

impl Report {
    /// Whether no failure was found and the workload ran to completion.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.workload_error.is_none()
    }

    /// Why this run is not a valid smoke run of a correct target: it failed, reached no fence,
    /// tested fewer than `floor` images, or never reached a declared rule.
    pub fn smoke_problem(&self, floor: u64) -> Option<String> {
        if !self.passed() {
            return Some("the run failed".into());
        }
        if self.fences == 0 {
            return Some("the workload reached no fence".into());
        }
        if self.images < floor {
            return Some(format!("{} images tested, fewer than the floor {floor}", self.images));
        }
        if !self.rules_not_reached.is_empty() {
            return Some(format!("rules never reached: {}", self.rules_not_reached.join(", ")));
        }
        None
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} (seed {:#x}): {} crash points visited, {} crashed, {} distinct keys, {} images tested ({} nested, {} corrupted), {} fences, {:.2?}{}",
            self.target,
            if self.passed() { "PASSED" } else { "FAILED" },
            self.seed,
            self.visited,
            self.crashed,
            self.keys.len(),
            self.images,
            self.nested_images,
            self.corrupt_images,
            self.fences,
            self.elapsed,
            if self.stopped_early { " (stopped early)" } else { "" }
        )?;
        let crashed = self.sites.values().filter(|s| s.crashes > 0).count();
        writeln!(
            f,
            "  coverage: {} persist sites reached, {crashed} crashed at{}",
            self.sites.len(),
            if self.rules_not_reached.is_empty() {
                String::new()
            } else {
                format!("; rules never reached: {}", self.rules_not_reached.join(", "))
            }
        )?;
        if self.double_flushes > 0 {
            writeln!(
                f,
                "  warning: {} lines flushed twice without a fence in between",
                self.double_flushes
            )?;
        }
        if let Some(e) = &self.workload_error {
            writeln!(f, "  workload error: {e}")?;
        }
        for x in &self.failures {
            writeln!(f, "  FAILURE at {} (image {}, {}):", x.key, x.image, x.spec)?;
            for line in x.message.lines() {
                writeln!(f, "    {line}")?;
            }
            if let Some(p) = &x.saved {
                writeln!(f, "    image saved in {}", p.display())?;
            }
            writeln!(f, "    replay: {}", x.replay)?;
        }
        Ok(())
    }
}
