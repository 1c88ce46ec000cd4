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

/// A persist site reached by the workload or by a recovery (coverage).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// Flushes issued there by the workload.
    pub flushes: u64,
    /// Fences issued there by the workload.
    pub fences: u64,
    /// Flushes issued there inside recoveries (depth 1 and 2).
    pub recovery_flushes: u64,
    /// Fences issued there inside recoveries.
    pub recovery_fences: u64,
    /// Flushes and fences there that changed what is durable (a flush of content that
    /// differed from the durable content, a fence that wrote such content), at any depth.
    pub effective: u64,
    /// Of those, the ones the workload issued (outside recovery).
    pub workload_effective: u64,
    /// Crashes simulated there (top level).
    pub crashes: u64,
}

impl SiteStats {
    /// Whether only recoveries reached the site (the workload never did).
    pub fn recovery_only(&self) -> bool {
        self.flushes == 0 && self.fences == 0
    }

    /// Whether nothing the workload issued there changed what is durable (the site is only
    /// reached in recovery, or the workload's flushes and fences there only wrote back what
    /// was durable already): dropping it leaves every top-level image as it was, and only a
    /// recovery can show that it is needed.
    pub fn matters_only_in_recovery(&self) -> bool {
        self.workload_effective == 0
    }
}

/// Why a run stopped before the end of its workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The image budget (`Config::budget`) was spent.
    Budget,
    /// The time limit (`Config::time`) passed.
    Time,
    /// A failure was found (`Config::stop_at_first_failure`).
    Failure,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Budget => "budget",
            Stop::Time => "time",
            Stop::Failure => "first failure",
        }
    }
}

/// The verdict of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every crash point the workload reached was examined, and no failure was found.
    Passed,
    /// A failure was found, or the workload itself failed.
    Failed,
    /// No failure was found, but the run stopped (budget or time) before the end of the
    /// workload: the crash points reached after the stop were not examined.
    Stopped(Stop),
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
    /// Crash points the workload reached (after a stop too).
    pub visited: u64,
    /// Crash points reached after the run stopped, never examined (not crashed, not skipped
    /// by the policy): `visited - unexamined` were examined.
    pub unexamined: u64,
    /// Visits that crashed.
    pub crashed: u64,
    /// Crash points reached inside the recoveries that were crashed (depth 2).
    pub nested_visited: u64,
    /// Of those, the ones crashed.
    pub nested_crashed: u64,
    /// Images recovered and checked (all depths, corrupted variants included).
    pub images: u64,
    /// Images tested inside recoveries (depth 2).
    pub nested_images: u64,
    /// Corrupted images recovered.
    pub corrupt_images: u64,
    /// Statistics per crash-point key.
    pub keys: BTreeMap<String, KeyStats>,
    /// Persist sites the workload or a recovery reached (flush and fence call sites).
    pub sites: BTreeMap<String, SiteStats>,
    /// Ordering rules the target declares and the workload never reached.
    pub rules_not_reached: Vec<String>,
    /// Fences seen.
    pub fences: u64,
    /// Block-file syncs seen.
    pub syncs: u64,
    /// Lines flushed twice by one thread without a fence between (a hint of a bug).
    pub double_flushes: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether exploration stopped early (budget, time or first failure).
    pub stopped_early: bool,
    /// Why it stopped early (the first reason met).
    pub stop: Option<Stop>,
    /// Failures.
    pub failures: Vec<Failure>,
    /// An error of the workload itself (not a crash-consistency failure).
    pub workload_error: Option<String>,
}

impl Report {
    /// Whether a failure was found or the workload itself failed.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty() || self.workload_error.is_some()
    }

    /// Passed, failed, or stopped by its budget or time without a failure.
    pub fn verdict(&self) -> Verdict {
        match self.stop {
            _ if self.failed() => Verdict::Failed,
            Some(s @ (Stop::Budget | Stop::Time)) => Verdict::Stopped(s),
            _ => Verdict::Passed,
        }
    }

    /// Whether the run examined every crash point its workload reached and found no failure
    /// (a run stopped by its budget or time has not passed: it checked only part).
    pub fn passed(&self) -> bool {
        self.verdict() == Verdict::Passed
    }

    /// Crash points examined (crashed or skipped by the policy) before any stop.
    pub fn examined(&self) -> u64 {
        self.visited - self.unexamined
    }

    /// Why this run is not a valid smoke run of a correct target: it failed, reached no fence
    /// (nor block-file sync),
    /// tested fewer than `floor` images, or never reached a declared rule. A smoke run may
    /// stop at its budget or time (it is bounded on purpose).
    pub fn smoke_problem(&self, floor: u64) -> Option<String> {
        if self.failed() {
            return Some("the run failed".into());
        }
        if self.fences == 0 && self.syncs == 0 {
            return Some("the workload reached no fence (nor block-file sync)".into());
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
        let verdict = match self.verdict() {
            Verdict::Passed => "PASSED".to_owned(),
            Verdict::Failed => "FAILED".to_owned(),
            Verdict::Stopped(s) => format!("STOPPED ({})", s.name()),
        };
        writeln!(
            f,
            "{}: {verdict} (seed {:#x}): {} crash points visited, {} crashed, {} distinct keys, {} images tested ({} nested, {} corrupted), {} fences{}, {:.2?}{}",
            self.target,
            self.seed,
            self.visited,
            self.crashed,
            self.keys.len(),
            self.images,
            self.nested_images,
            self.corrupt_images,
            self.fences,
            if self.syncs > 0 { format!(", {} syncs", self.syncs) } else { String::new() },
            self.elapsed,
            match self.stop {
                Some(s) if self.stopped_early => format!(" (stopped early: {})", s.name()),
                _ if self.stopped_early => " (stopped early)".to_owned(),
                _ => String::new(),
            }
        )?;
        if let Verdict::Stopped(s) = self.verdict() {
            writeln!(
                f,
                "  STOPPED ({}): checked {} of {} crash points the workload reached, no failure; the {} reached after the stop were not checked",
                s.name(),
                self.examined(),
                self.visited,
                self.unexamined
            )?;
        }
        if self.nested_visited > 0 {
            writeln!(
                f,
                "  inside recovery: {} crash points reached in crashed recoveries, {} crashed",
                self.nested_visited, self.nested_crashed
            )?;
        }
        let crashed = self.sites.values().filter(|s| s.crashes > 0).count();
        let in_recovery = self.sites.values().filter(|s| s.recovery_only()).count();
        writeln!(
            f,
            "  coverage: {} persist sites reached ({in_recovery} only inside recovery), {crashed} crashed at{}",
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
