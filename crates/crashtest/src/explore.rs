//! Exploration and the in-process executor: where to crash, which images to build there, and
//! how each image is recovered and checked (seed 001 §7.2.1–7.2.6 and ch. 8's future work;
//! spec `../shared/specs/crash-testing.md` §3, §9, §10.5–10.7).
//!
//! The workload runs on a simulated domain whose hook is the explorer. At every **crash point**
//! — a fence that has lines pending (the stash of Alg. 7.3), a file operation, optionally every
//! flush, and the end of the workload — the explorer decides whether to crash there:
//!
//! - *call-stack-aware* (default): each crash-point key starts at probability 1 and halves after
//!   every crash there (Alg. 7.2), so a site visited n times is crashed about log2(n) times;
//! - *exhaustive*: every visit crashes.
//!
//! Keys are the `#[track_caller]` site of the persistence call plus its ordering-rule id
//! (`file:line:col#P-XXX-n`): stable across builds and address-space layouts.
//!
//! A crash builds images from the durable image plus: every subset of the crashing thread's
//! pending lines (all 2^k up to 8 lines; beyond, the empty and full sets, singletons,
//! all-but-one and seeded samples); with eviction on, each dirty line written back early on
//! its own (up to 8 dirty lines) plus `evict_samples` seeded samples that persist random
//! pending and dirty lines, dirty ones with their newest content; `tear_samples` seeded samples whose chosen
//! lines tear at 8-byte granularity (only for targets that do not declare axiom M2); and
//! `corrupt_samples` variants with flipped bits or truncated files, on which recovery must
//! return `Ok` or a typed error — never panic or hang.
//!
//! Each image is written to the current-image directory, then recovered and checked on a fresh
//! thread under `catch_unwind` and a watchdog; its DRAM state is dropped afterwards. With
//! `nested`, a sampled fraction of recoveries run with a hook on the domain they open, so the
//! recovery itself is crashed at its own crash points (depth 2) and each such image is
//! recovered again and checked against the same model.
//!
//! Threads: one crash is tested at a time; while it is, every other workload thread is paused
//! at its next persistence event (stores included). Multi-threaded runs are not reproducible
//! from the seed (scheduling differs); their failures replay from the saved image.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::time::{Duration, Instant};

use ferrite_pmem::sim::{Event, EventKind, set_new_domain_hook};
use ferrite_pmem::{CrashImage, ImageSpec, Pick, SimDomain, SplitMix64};

use crate::target::{Ctx, Expect, Log, ModelView, Target};

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

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
    /// Most depth-2 images per crashed recovery.
    pub nested_max: usize,
    /// Corrupted variants (bit flips, truncation) recovered per crash (0: off).
    pub corrupt_samples: usize,
    /// Persist sites (keys, see `Site::key`) whose flushes and fences are made no-ops
    /// (mutation checks).
    pub drop_sites: Vec<String>,
    /// How long one recovery plus check may take.
    pub watchdog: Duration,
    /// Where failures are saved.
    pub out_dir: PathBuf,
    /// Write every image to `<current_dir>/<target>-current` before recovering it, so that a
    /// process-killing crash in recovery leaves the image behind. Default: a per-process
    /// directory in `/dev/shm` (RAM: saving every image to a disk would dominate the run).
    pub save_each: bool,
    /// Where the current image is written (see `save_each`).
    pub current_dir: PathBuf,
    /// Stop at the first failure.
    pub stop_at_first_failure: bool,
    /// Called after every tested image.
    pub progress: Option<ProgressFn>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("seed", &self.seed)
            .field("budget", &self.budget)
            .field("time", &self.time)
            .field("exhaustive", &self.exhaustive)
            .field("stash", &self.stash)
            .field("evict_samples", &self.evict_samples)
            .field("tear_samples", &self.tear_samples)
            .field("nested", &self.nested)
            .field("corrupt_samples", &self.corrupt_samples)
            .field("drop_sites", &self.drop_sites)
            .field("out_dir", &self.out_dir)
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
            at_flush: false,
            stash: true,
            max_exhaustive_lines: 8,
            samples_beyond: 32,
            evict_samples: 2,
            tear_samples: 2,
            nested: true,
            nested_rate: 0.25,
            nested_max: 8,
            corrupt_samples: 0,
            drop_sites: Vec::new(),
            watchdog: Duration::from_secs(30),
            out_dir: std::env::temp_dir().join("ferrite-crashtest"),
            save_each: true,
            current_dir: {
                let shm = Path::new("/dev/shm");
                let root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
                root.join(format!("ferrite-crashtest-{}", std::process::id()))
            },
            stop_at_first_failure: true,
            progress: None,
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

/// One persist site of a mutation check and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutationOutcome {
    /// Dropping the site's persists made the tester fail the target.
    Detected,
    /// Not detected, and the target explains why that is fine.
    Benign(String),
    /// Not detected and not explained: the crash test cannot tell this persist is needed.
    Undetected,
}

/// The result of a mutation check.
#[derive(Clone, Debug, Default)]
pub struct MutationReport {
    /// Target name.
    pub target: String,
    /// The unmutated run.
    pub base: Report,
    /// Every persist site the workload reached, and its outcome.
    pub sites: Vec<(String, MutationOutcome)>,
}

impl MutationReport {
    /// Whether every site was detected or is explained as benign, and the base run passed.
    pub fn passed(&self) -> bool {
        self.base.passed() && self.sites.iter().all(|(_, o)| *o != MutationOutcome::Undetected)
    }
}

impl fmt::Display for MutationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: mutation check {}",
            self.target,
            if self.passed() { "PASSED" } else { "FAILED" }
        )?;
        if !self.base.passed() {
            write!(f, "  the unmutated run failed:\n{}", self.base)?;
        }
        for (site, o) in &self.sites {
            match o {
                MutationOutcome::Detected => writeln!(f, "  detected   {site}")?,
                MutationOutcome::Benign(why) => writeln!(f, "  benign     {site}: {why}")?,
                MutationOutcome::Undetected => writeln!(f, "  UNDETECTED {site}")?,
            }
        }
        Ok(())
    }
}

/// A target with its types erased, for the registry and the CLI.
pub trait DynTarget: Send + Sync {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// One-line summary.
    fn summary(&self) -> &'static str;
    /// What the tester should find.
    fn expect(&self) -> Expect;
    /// The fewest images a smoke run must test.
    fn min_images(&self) -> u64;
    /// Runs an exploration.
    fn explore(&self, cfg: &Config) -> Report;
    /// Runs the mutation check.
    fn mutate(&self, cfg: &Config) -> MutationReport;
    /// Recovers and checks a saved failure directory; `Ok(())` if it now passes.
    fn replay(&self, dir: &Path, watchdog: Duration) -> Result<(), String>;
}

impl<T: Target> DynTarget for Arc<T> {
    fn name(&self) -> &'static str {
        T::name(self)
    }
    fn summary(&self) -> &'static str {
        T::summary(self)
    }
    fn expect(&self) -> Expect {
        T::expect(self)
    }
    fn min_images(&self) -> u64 {
        T::min_images(self)
    }
    fn explore(&self, cfg: &Config) -> Report {
        explore(self.clone(), cfg)
    }
    fn mutate(&self, cfg: &Config) -> MutationReport {
        mutate(self.clone(), cfg)
    }
    fn replay(&self, dir: &Path, watchdog: Duration) -> Result<(), String> {
        replay(self.clone(), dir, watchdog)
    }
}

struct State {
    rng: SplitMix64,
    /// Exponent k per key (depth-prefixed): crash probability 2^-k.
    exponent: BTreeMap<String, u32>,
    report: Report,
    started: Instant,
}

struct Explorer<T: Target> {
    target: Arc<T>,
    cfg: Config,
    log: Arc<Mutex<Log<T::Op>>>,
    state: Mutex<State>,
    stop: AtomicBool,
    /// Held exclusively while a crash is tested; every other workload thread takes it shared
    /// at each of its events, so it pauses there.
    world: RwLock<()>,
}

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pending-line subsets to try for `k` pending lines.
fn subsets(k: usize, cfg: &Config, rng: &mut SplitMix64) -> Vec<Pick> {
    if !cfg.stash {
        return if k == 0 { vec![Pick::None] } else { vec![Pick::None, Pick::All] };
    }
    if k <= cfg.max_exhaustive_lines.min(16) {
        return (0..1u64 << k).map(Pick::Mask).collect();
    }
    let mut v = vec![Pick::None, Pick::All];
    // Singletons and all-but-one only while that stays affordable (a bulk persist of
    // thousands of lines gets the samples alone).
    if k <= 64 {
        for i in 0..k {
            v.push(Pick::Indices(vec![i]));
            v.push(Pick::Indices((0..k).filter(|&j| j != i).collect()));
        }
    }
    for _ in 0..cfg.samples_beyond {
        v.push(Pick::Indices((0..k).filter(|_| rng.next_u64() & 1 == 1).collect()));
    }
    v
}

fn describe(s: &ImageSpec, k: usize) -> String {
    let pending = match &s.pending {
        Pick::None => format!("none of {k} pending lines"),
        Pick::All => format!("all {k} pending lines"),
        Pick::Mask(m) => {
            format!(
                "pending lines {:?} of {k}",
                (0..k).filter(|i| m & (1 << i) != 0).collect::<Vec<_>>()
            )
        }
        Pick::Indices(v) => format!("pending lines {v:?} of {k}"),
        Pick::Random(p) => format!("each of {k} pending lines with p={p}"),
    };
    let mut d = pending;
    if s.evict != Pick::None {
        d.push_str(", dirty lines evicted early");
    }
    match (s.tear, s.tear_words) {
        (true, Some(w)) => d.push_str(&format!(", lines torn to words {w:#010b}")),
        (true, None) => d.push_str(", lines torn at 8 bytes"),
        _ => {}
    }
    if s.evict != Pick::None || s.tear {
        d.push_str(&format!(" (image seed {:#x})", s.seed));
    }
    d
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// What to do with an image.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Recover and check (depth 1), maybe crashing the recovery.
    Check { nest: bool },
    /// Recover and check an image taken inside a recovery (depth 2).
    Nested,
    /// Recover a corrupted image: `Ok` or a typed error, never a panic or a hang.
    Corrupt,
}

impl<T: Target> Explorer<T> {
    fn out(&self, tag: &str) -> PathBuf {
        self.cfg.out_dir.join(format!("{}-{tag}", self.target.name()))
    }

    fn on_event(self: &Arc<Self>, domain: &SimDomain, e: &Event) {
        if matches!(e.kind, EventKind::Flush | EventKind::Fence) {
            let mut st = lock(&self.state);
            let s = st.report.sites.entry(e.site.key()).or_default();
            if e.kind == EventKind::Flush {
                s.flushes += 1;
            } else {
                s.fences += 1;
            }
        }
        let point = match e.kind {
            EventKind::Fence => e.pending > 0,
            EventKind::FileCreate | EventKind::FileRemove | EventKind::FilePunch => true,
            EventKind::Flush => self.cfg.at_flush,
            EventKind::Store | EventKind::NtStore => false,
        };
        if point {
            let pending = match e.kind {
                EventKind::Fence => e.pending,
                _ => domain.pending_of(e.thread).len(),
            };
            self.crash_point(domain, e.thread, &e.site.key(), pending);
        } else {
            // Pause here while another thread tests a crash.
            drop(self.world.read().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// Decides whether to crash at `key` (call-stack halving per depth-prefixed key).
    fn fire(&self, key: &str) -> bool {
        let mut st = lock(&self.state);
        let k = *st.exponent.get(key).unwrap_or(&0);
        let fire = self.cfg.exhaustive || k == 0 || st.rng.next_u64() < (u64::MAX >> k.min(63));
        if fire {
            *st.exponent.entry(key.to_owned()).or_insert(0) += 1;
        }
        fire
    }

    fn crash_point(self: &Arc<Self>, domain: &SimDomain, thread: u32, key: &str, pending: usize) {
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        let _world = self.world.write().unwrap_or_else(|p| p.into_inner());
        {
            let mut st = lock(&self.state);
            st.report.visited += 1;
            st.report.keys.entry(key.to_owned()).or_default().visits += 1;
        }
        if !self.fire(key) {
            return;
        }
        let (specs, nest_draws) = {
            let mut st = lock(&self.state);
            st.report.crashed += 1;
            st.report.keys.entry(key.to_owned()).or_default().crashes += 1;
            if let Some(s) = st.report.sites.get_mut(key) {
                s.crashes += 1;
            }
            let State { rng, .. } = &mut *st;
            let mut specs: Vec<ImageSpec> = subsets(pending, &self.cfg, rng)
                .into_iter()
                .map(|pick| ImageSpec {
                    thread: Some(thread),
                    pending: pick,
                    ..ImageSpec::default()
                })
                .collect();
            let n_dirty = domain.dirty_lines().len();
            let dirty = n_dirty > 0;
            if dirty && self.cfg.evict_samples > 0 {
                // Each dirty line written back early on its own (systematic for small sets),
                // then seeded random combinations.
                if n_dirty <= self.cfg.max_exhaustive_lines {
                    for i in 0..n_dirty {
                        specs.push(ImageSpec {
                            thread: Some(thread),
                            evict: Pick::Indices(vec![i]),
                            ..ImageSpec::default()
                        });
                    }
                }
                for _ in 0..self.cfg.evict_samples {
                    specs.push(ImageSpec {
                        thread: Some(thread),
                        pending: Pick::Random(0.5),
                        evict: Pick::Random(0.5),
                        seed: rng.next_u64(),
                        ..ImageSpec::default()
                    });
                }
            }
            if !self.target.axioms().m2 && (dirty || pending > 0) && self.cfg.tear_samples > 0 {
                // Each 8-byte word of the pending lines persisting on its own, and each word
                // alone missing (systematic for small stashes), then seeded random tears.
                if pending > 0 && pending <= 4 {
                    for w in 0..8 {
                        for words in [1u8 << w, !(1u8 << w)] {
                            specs.push(ImageSpec {
                                thread: Some(thread),
                                pending: Pick::All,
                                tear: true,
                                tear_words: Some(words),
                                ..ImageSpec::default()
                            });
                        }
                    }
                }
                for _ in 0..self.cfg.tear_samples {
                    specs.push(ImageSpec {
                        thread: Some(thread),
                        pending: Pick::All,
                        evict: if self.cfg.evict_samples > 0 {
                            Pick::Random(0.5)
                        } else {
                            Pick::None
                        },
                        tear: true,
                        seed: rng.next_u64(),
                        ..ImageSpec::default()
                    });
                }
            }
            let draws: Vec<f64> = specs.iter().map(|_| rng.next_f64()).collect();
            (specs, draws)
        };
        let model = lock(&self.log).view();
        for (spec, draw) in specs.iter().zip(nest_draws) {
            if self.out_of_budget() {
                return;
            }
            let image = domain.capture(spec);
            let nest = self.cfg.nested && draw < self.cfg.nested_rate;
            self.test(
                image.clone(),
                &model,
                key.to_owned(),
                describe(spec, pending),
                Kind::Check { nest },
            );
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            for c in 0..self.cfg.corrupt_samples {
                let corrupted = self.corrupt(image.clone(), c);
                self.test(corrupted.0, &model, key.to_owned(), corrupted.1, Kind::Corrupt);
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        }
    }

    /// A corrupted copy of `image`: random bit flips, or a truncated file.
    fn corrupt(&self, mut image: CrashImage, n: usize) -> (CrashImage, String) {
        let mut st = lock(&self.state);
        let rng = &mut st.rng;
        if image.files.is_empty() {
            return (image, "no files".into());
        }
        let fi = (rng.next_u64() % image.files.len() as u64) as usize;
        let f = &mut image.files[fi];
        if n % 4 == 3 && f.len > 0 {
            let len = rng.next_u64() % f.len;
            f.truncate(len);
            let what = format!("file {} truncated to {len} bytes", f.name);
            return (image, what);
        }
        let flips = 1 + rng.next_u64() % 8;
        let hot = 4096u64.min(f.len.max(1));
        let mut at = Vec::new();
        for _ in 0..flips {
            // Half of the flips land in the first page (headers, roots), half anywhere.
            let off = if rng.next_u64() & 1 == 0 {
                rng.next_u64() % hot
            } else {
                rng.next_u64() % f.len.max(1)
            };
            f.xor_byte(off, 1 << (rng.next_u64() % 8));
            at.push(off);
        }
        let name = image.files[fi].name.clone();
        (image, format!("{flips} bit flips in {name} at {at:?}"))
    }

    fn out_of_budget(&self) -> bool {
        let st = lock(&self.state);
        let out = self.cfg.budget.is_some_and(|b| st.report.images >= b)
            || self.cfg.time.is_some_and(|t| st.started.elapsed() >= t);
        drop(st);
        if out {
            self.stop.store(true, Ordering::Relaxed);
            lock(&self.state).report.stopped_early = true;
        }
        out
    }

    fn test(
        self: &Arc<Self>,
        mut image: CrashImage,
        model: &ModelView<T::Op>,
        key: String,
        spec: String,
        kind: Kind,
    ) {
        let n = {
            let mut st = lock(&self.state);
            st.report.images += 1;
            match kind {
                Kind::Nested => st.report.nested_images += 1,
                Kind::Corrupt => st.report.corrupt_images += 1,
                Kind::Check { .. } => {}
            }
            if let Some(s) = st.report.keys.get_mut(&key) {
                s.images += 1;
            }
            st.report.images
        };
        image.note = format!(
            "target {}\nkey {key}\nseed {}\nimage {n}\nspec {spec}",
            self.target.name(),
            self.cfg.seed
        );
        if self.cfg.save_each {
            let dir = self.cfg.current_dir.join(format!("{}-current", self.target.name()));
            let _ = std::fs::remove_dir_all(&dir);
            let _ = save_case(&dir, &image, model);
        }
        let verdict = self.recover_and_check(image.clone(), model.clone(), &key, kind);
        if let Err(message) = verdict {
            let dir = self.out(&format!("s{:x}-i{n}", self.cfg.seed));
            let _ = std::fs::remove_dir_all(&dir);
            let saved = save_case(&dir, &image, model).ok().map(|()| dir.clone());
            let replay =
                format!("ferrite crashtest {} --replay {}", self.target.name(), dir.display());
            let mut st = lock(&self.state);
            st.report.failures.push(Failure {
                key,
                seed: self.cfg.seed,
                image: n,
                spec,
                message,
                saved,
                replay,
            });
            if self.cfg.stop_at_first_failure {
                self.stop.store(true, Ordering::Relaxed);
                st.report.stopped_early = true;
            }
        }
        if let Some(p) = &self.cfg.progress {
            let st = lock(&self.state);
            p(&Progress {
                visited: st.report.visited,
                images: st.report.images,
                failures: st.report.failures.len() as u64,
            });
        }
    }

    /// Recovers (and checks, unless corrupted) on a fresh thread; with `nest`, that thread's
    /// new domains start with a hook that crashes the recovery at its crash points.
    fn recover_and_check(
        self: &Arc<Self>,
        image: CrashImage,
        model: ModelView<T::Op>,
        key: &str,
        kind: Kind,
    ) -> Result<(), String> {
        let nest = matches!(kind, Kind::Check { nest: true });
        let hook: Option<ferrite_pmem::sim::Hook> = nest.then(|| {
            let ex = self.clone();
            let outer = key.to_owned();
            let m = model.clone();
            let left = Arc::new(Mutex::new(self.cfg.nested_max));
            Arc::new(move |d: &SimDomain, e: &Event| ex.nested_point(d, e, &outer, &m, &left)) as _
        });
        let target = self.target.clone();
        let watchdog = if nest {
            self.cfg.watchdog.saturating_mul(1 + self.cfg.nested_max as u32)
        } else {
            self.cfg.watchdog
        };
        run_guarded(watchdog, move || {
            set_new_domain_hook(hook);
            let recovered = target.recover(&image);
            set_new_domain_hook(None);
            match kind {
                Kind::Corrupt => {
                    // Any typed error is fine; recovery that returns is fine.
                    drop(recovered);
                    Ok(())
                }
                _ => {
                    let recovered = recovered.map_err(|e| format!("recovery failed: {e}"))?;
                    target.check(&recovered, &model).map_err(|e| format!("check failed: {e}"))
                }
            }
        })
    }

    /// A crash point inside a recovery (depth 2).
    fn nested_point(
        self: &Arc<Self>,
        domain: &SimDomain,
        e: &Event,
        outer: &str,
        model: &ModelView<T::Op>,
        left: &Mutex<usize>,
    ) {
        let point = match e.kind {
            EventKind::Fence => e.pending > 0,
            EventKind::FileCreate | EventKind::FileRemove | EventKind::FilePunch => true,
            _ => false,
        };
        if !point || self.stop.load(Ordering::Relaxed) {
            return;
        }
        let inner = e.site.key();
        let key = format!("nested {inner} after {outer}");
        if !self.fire(&format!("depth2 {inner}")) {
            return;
        }
        for pick in [Pick::None, Pick::All] {
            {
                let mut l = lock(left);
                if *l == 0 {
                    return;
                }
                *l -= 1;
            }
            if self.out_of_budget() {
                return;
            }
            let spec = ImageSpec { thread: Some(e.thread), pending: pick, ..ImageSpec::default() };
            let image = domain.capture(&spec);
            let desc = format!("crash inside recovery at {inner}: {}", describe(&spec, e.pending));
            self.test(image, model, key.clone(), desc, Kind::Nested);
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }
}

/// Runs `f` on a fresh thread under `catch_unwind`; gives up after `watchdog`.
fn run_guarded(
    watchdog: Duration,
    f: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new().name("crashtest-recovery".into()).spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r.map_err(|p| panic_message(p.as_ref())));
    });
    if let Err(e) = spawned {
        return Err(format!("internal error: cannot start the recovery thread: {e}"));
    }
    match rx.recv_timeout(watchdog) {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(panic)) => Err(format!("recovery or check panicked: {panic}")),
        Err(_) => Err(format!(
            "recovery or check did not finish within {watchdog:?} (hung; its thread is abandoned)"
        )),
    }
}

/// Saves an image, its model and its description into `dir`.
fn save_case<Op: crate::target::ModelOp>(
    dir: &Path,
    image: &CrashImage,
    model: &ModelView<Op>,
) -> Result<(), String> {
    image.save(dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("model.txt"), model.encode()).map_err(|e| e.to_string())
}

/// Explores `target` with `cfg` (see the module docs).
pub fn explore<T: Target>(target: Arc<T>, cfg: &Config) -> Report {
    let domain = Arc::new(SimDomain::new(false));
    for site in &cfg.drop_sites {
        domain.drop_persist(site);
    }
    let log = Arc::new(Mutex::new(Log { ops: Vec::new() }));
    let explorer = Arc::new(Explorer {
        target: target.clone(),
        cfg: cfg.clone(),
        log: log.clone(),
        state: Mutex::new(State {
            rng: SplitMix64::new(cfg.seed ^ 0xC0FF_EE00_D15E_A5E5),
            exponent: BTreeMap::new(),
            report: Report {
                target: target.name().to_owned(),
                seed: cfg.seed,
                ..Report::default()
            },
            started: Instant::now(),
        }),
        stop: AtomicBool::new(false),
        world: RwLock::new(()),
    });
    let hook_ex = explorer.clone();
    domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| hook_ex.on_event(d, e))));
    let mut ctx = Ctx { domain: domain.clone(), log, rng: SplitMix64::new(cfg.seed) };
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target.workload(&mut ctx)));
    // The end of the workload is a crash point too: everything fenced is durable.
    if !domain.files().is_empty() {
        explorer.crash_point(&domain, ferrite_pmem::sim::thread_index(), "end-of-workload", 0);
    }
    domain.set_hook(None);
    if cfg.save_each {
        // Only a process that died in a recovery needs the current image.
        let _ = std::fs::remove_dir_all(cfg.current_dir.join(format!("{}-current", target.name())));
        let _ = std::fs::remove_dir(&cfg.current_dir);
    }
    let mut st = lock(&explorer.state);
    st.report.workload_error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(p) => Some(format!("workload panicked: {}", panic_message(p.as_ref()))),
    };
    let stats = domain.stats();
    st.report.fences = stats.fences;
    st.report.double_flushes = stats.double_flushes;
    let reached: BTreeSet<&str> =
        st.report.sites.keys().filter_map(|k| k.rsplit_once('#').map(|(_, r)| r)).collect();
    let missing: Vec<String> =
        target.rules().iter().filter(|r| !reached.contains(*r)).map(|r| (*r).to_owned()).collect();
    st.report.rules_not_reached = missing;
    st.report.elapsed = st.started.elapsed();
    drop(ctx);
    std::mem::take(&mut st.report)
}

/// Runs the mutation check: an unmutated run, then one run per persist site it reached with
/// that site's flushes and fences made no-ops; each must fail, or be listed as benign by the
/// target.
pub fn mutate<T: Target>(target: Arc<T>, cfg: &Config) -> MutationReport {
    let base = explore(target.clone(), cfg);
    let mut sites = Vec::new();
    if base.passed() {
        for site in base.sites.keys() {
            let r = explore(
                target.clone(),
                &Config { drop_sites: vec![site.clone()], progress: None, ..cfg.clone() },
            );
            let outcome = if !r.passed() {
                MutationOutcome::Detected
            } else if let Some((_, why)) =
                target.benign_sites().iter().find(|(pat, _)| site.contains(pat))
            {
                MutationOutcome::Benign((*why).to_owned())
            } else {
                MutationOutcome::Undetected
            };
            sites.push((site.clone(), outcome));
        }
    }
    MutationReport { target: target.name().to_owned(), base, sites }
}

/// Recovers and checks the failure saved in `dir` (an image directory with `model.txt`).
pub fn replay<T: Target>(target: Arc<T>, dir: &Path, watchdog: Duration) -> Result<(), String> {
    let image = CrashImage::load(dir).map_err(|e| format!("cannot load {}: {e}", dir.display()))?;
    let text = std::fs::read_to_string(dir.join("model.txt"))
        .map_err(|e| format!("cannot read {}: {e}", dir.join("model.txt").display()))?;
    let model = ModelView::<T::Op>::decode(&text)?;
    let corrupt = image
        .note
        .lines()
        .any(|l| l.starts_with("spec") && (l.contains("bit flips") || l.contains("truncated")));
    run_guarded(watchdog, move || {
        let recovered = target.recover(&image);
        if corrupt {
            return Ok(());
        }
        let recovered = recovered.map_err(|e| format!("recovery failed: {e}"))?;
        target.check(&recovered, &model).map_err(|e| format!("check failed: {e}"))
    })
}
