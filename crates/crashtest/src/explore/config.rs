//! Exploration settings ([`Config`], one preset per mode) and progress reporting.
//!
//! # Invariants
//! - `Config::for_mode(m)` adds exactly one kind of image to the mode before it (`Threads` is
//!   the default configuration, everything on).
//!
//! # Concurrency
//! Plain values; the progress callback is called from whichever thread tested the image.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrite_pmem::sim::WritebackOrder;

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// A mutation check's excuse for a site (its key, followed by ` [recovery only]` for a site
/// only recoveries reach): `Some(reason)` if its mutated run is not needed (`Config::excused`).
pub type ExcuseFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Exploration settings.
#[derive(Clone)]
pub struct Config {
    /// Seed of every random choice (crash decisions, sampled images, the workload's RNG).
    pub seed: u64,
    /// Stop crashing after this many images were tested.
    pub budget: Option<u64>,
    /// Stop crashing after this much time.
    pub time: Option<Duration>,
    /// Crash at every visit of every crash point (instead of halving probabilities per key).
    pub exhaustive: bool,
    /// How write-backs of one line by different threads land in the workload's domain and in
    /// every domain a recovery opens (`WritebackOrder`: `Coherent`, the hardware's order and
    /// the default, or `Strict`, the stricter model before axiom M6; `docs/design/
    /// persistence.md`). Matters only where several threads flush one line.
    pub writebacks: WritebackOrder,
    /// Also crash at flushes.
    pub at_flush: bool,
    /// Try subsets of the pending lines (the stash). Off: only "none" and "all".
    pub stash: bool,
    /// Enumerate all subsets up to this many pending lines.
    pub max_exhaustive_lines: usize,
    /// Random subsets sampled beyond that.
    pub samples_beyond: usize,
    /// Images per crash that also evict random dirty lines early (0: off).
    pub evict_samples: usize,
    /// Images per crash with torn lines, for targets without M2 (0: off).
    pub tear_samples: usize,
    /// Crash recoveries too (depth 2), for a sampled fraction of images.
    pub nested: bool,
    /// Fraction of images whose recovery is crashed when `nested` is on.
    pub nested_rate: f64,
    /// Key crash points inside a recovery by the pair (top-level crash point, site inside
    /// recovery) instead of the inner site alone, so that the call-stack policy crashes every
    /// such pair on its first visit (more images; the mutation check uses it for sites only
    /// recoveries reach).
    pub nested_by_outer: bool,
    /// Crash a recovery (depth 2) only at its crash points after it reached a dropped persist
    /// site (`drop_sites`) that would have changed what is durable there (any flush at such a
    /// site; a fence with lines it would have made durable). Before that point the recovery
    /// runs exactly as in an unmutated run, so its images are those of the unmutated code and
    /// cannot show the dropped persist; the mutation check uses it for the sites that matter
    /// only in recovery, where the nested images are most of the cost.
    pub nested_after_drop: bool,
    /// Most images tested at one crash point inside a recovery (depth 2); the images are
    /// those of a top-level crash point (stash subsets, eviction, tearing), in that order.
    pub nested_max: usize,
    /// Corrupted variants (bit flips, truncation) recovered per crash (0: off).
    pub corrupt_samples: usize,
    /// Persist sites (keys, see `Site::key`) whose flushes and fences are made no-ops
    /// (mutation checks), in the workload's domain and in every domain a recovery opens.
    pub drop_sites: Vec<String>,
    /// How long one recovery plus check may take.
    pub watchdog: Duration,
    /// The watchdog of the mutation check's mutated runs (at most `watchdog`). A dropped
    /// persist often shows as a recovery that hangs (a lock word left held); a healthy
    /// recovery of the project's targets takes milliseconds, so a few seconds tell the hang
    /// without waiting the full watchdog once per such site.
    pub mutant_watchdog: Duration,
    /// Sites of a mutation check whose mutated run is not made, with the reason: the caller
    /// (a test) accepts them undetected in any case, because another target or test shows
    /// them needed, so their runs cannot change its verdict. The target's own benign sites
    /// are excused too when this is set. `None` (the default, and `ferrite crashtest
    /// --mutate`): every site is run. Reported as `MutationOutcome::Excused`.
    pub excused: Option<ExcuseFn>,
    /// Make the mutated runs of excused sites anyway (`excused` then only labels nothing:
    /// every site gets its run and its real outcome). Default: the environment variable
    /// `FERRITE_CRASHTEST_RUN_EXCUSED` set to `1`; the long tier (`scripts/long.sh`) sets it,
    /// so the sites CI's tests excuse are still run, and their excuses kept honest.
    pub run_excused: bool,
    /// Where failures are saved.
    pub out_dir: PathBuf,
    /// Write every image to `<current_dir>/<target>-current` before recovering it, so that a
    /// process-killing crash in recovery leaves the image behind. Off by default: writing
    /// and removing every image was two fifths of a bounded run's time, almost all of it in
    /// the kernel (`docs/design/crash-testing.md` §6); `ferrite crashtest` turns it on, and a
    /// run is reproducible from its seed, so a test whose process died is rerun there.
    pub save_each: bool,
    /// Where the current image is written (see `save_each`). Default: a per-process
    /// directory in `/dev/shm` (RAM: saving every image to a disk would dominate the run).
    pub current_dir: PathBuf,
    /// Stop at the first failure.
    pub stop_at_first_failure: bool,
    /// Called after every tested image.
    pub progress: Option<ProgressFn>,
    /// How many mutated runs of a mutation check run at once (each on its own thread, with
    /// its own `out_dir` and `current_dir` below the configured ones). Default: the
    /// environment variable `FERRITE_CRASHTEST_JOBS` if set, else the machine's available
    /// parallelism, at most 4. Results do not depend on it.
    pub mutation_jobs: usize,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("seed", &self.seed)
            .field("budget", &self.budget)
            .field("time", &self.time)
            .field("exhaustive", &self.exhaustive)
            .field("writebacks", &self.writebacks)
            .field("stash", &self.stash)
            .field("evict_samples", &self.evict_samples)
            .field("tear_samples", &self.tear_samples)
            .field("nested", &self.nested)
            .field("corrupt_samples", &self.corrupt_samples)
            .field("drop_sites", &self.drop_sites)
            .field("out_dir", &self.out_dir)
            .field("mutation_jobs", &self.mutation_jobs)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 0x5eed,
            budget: None,
            time: None,
            exhaustive: false,
            writebacks: WritebackOrder::Coherent,
            at_flush: false,
            stash: true,
            max_exhaustive_lines: 8,
            samples_beyond: 32,
            evict_samples: 2,
            tear_samples: 2,
            nested: true,
            nested_rate: 0.25,
            nested_max: 16,
            nested_by_outer: false,
            nested_after_drop: false,
            corrupt_samples: 0,
            drop_sites: Vec::new(),
            watchdog: Duration::from_secs(30),
            mutant_watchdog: Duration::from_secs(5),
            excused: None,
            run_excused: std::env::var("FERRITE_CRASHTEST_RUN_EXCUSED").is_ok_and(|v| v == "1"),
            out_dir: std::env::temp_dir().join("ferrite-crashtest"),
            save_each: false,
            current_dir: {
                let shm = Path::new("/dev/shm");
                let root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
                root.join(format!("ferrite-crashtest-{}", std::process::id()))
            },
            stop_at_first_failure: true,
            progress: None,
            mutation_jobs: std::env::var("FERRITE_CRASHTEST_JOBS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
                }),
        }
    }
}

impl Config {
    /// The configuration of one exploration mode (each adds to the ones before it; `Threads`
    /// is everything).
    pub fn for_mode(mode: crate::target::Mode) -> Config {
        use crate::target::Mode::*;
        let base = Config {
            stash: false,
            evict_samples: 0,
            tear_samples: 0,
            nested: false,
            ..Config::default()
        };
        match mode {
            Base => base,
            Stash => Config { stash: true, ..base },
            Evict => Config { stash: true, evict_samples: 4, ..base },
            Tear => Config { stash: true, tear_samples: 4, ..base },
            Nested => Config { stash: true, nested: true, nested_rate: 1.0, ..base },
            Threads => Config::default(),
        }
    }
}

/// Progress of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Crash points visited.
    pub visited: u64,
    /// Images recovered and checked.
    pub images: u64,
    /// Failures found.
    pub failures: u64,
}
