//! Exploration and the in-process executor: where to crash, which images to build there, and
//! how each image is recovered and checked (seed 001 §7.2.1–7.2.4; spec
//! `../shared/specs/crash-testing.md` §3, §9, §10.5).
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
//! A crash builds images from the durable image plus **subsets of the crashing thread's pending
//! lines** (all 2^k subsets up to 8 lines; beyond that the empty set, the full set, every
//! singleton, every all-but-one and seeded random samples). Each image is written to the
//! current-image directory, then recovered and checked on a fresh thread under `catch_unwind`
//! and a watchdog; its DRAM state is dropped afterwards. A failing image is saved with its model
//! and a one-line replay command. Every random choice derives from the run's seed.
//!
//! The workload thread is suspended while its crash point is tested (suspend–test–resume,
//! §7.2.1) — in process, never with `fork`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use ferrite_pmem::sim::{Event, EventKind};
use ferrite_pmem::{CrashImage, ImageSpec, Pick, SimDomain, SplitMix64};

use crate::target::{Ctx, Log, ModelView, Target};

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Exploration settings.
#[derive(Clone)]
pub struct Config {
    /// Seed of every random choice (crash decisions, sampled subsets, the workload's RNG).
    pub seed: u64,
    /// Stop crashing after this many images were tested.
    pub budget: Option<u64>,
    /// Stop crashing after this much time.
    pub time: Option<Duration>,
    /// Crash at every visit of every crash point (instead of halving probabilities per key).
    pub exhaustive: bool,
    /// Also crash at flushes (images then include the just-flushed line as pending).
    pub at_flush: bool,
    /// Try subsets of the pending lines (the stash). Off: only the durable image and the image
    /// with every pending line.
    pub stash: bool,
    /// Enumerate all subsets up to this many pending lines.
    pub max_exhaustive_lines: usize,
    /// Random subsets sampled beyond that.
    pub samples_beyond: usize,
    /// How long one recovery plus check may take.
    pub watchdog: Duration,
    /// Where failures (and the current image) are saved.
    pub out_dir: PathBuf,
    /// Write every image to `<out_dir>/<target>-current` before recovering it, so that a
    /// process-killing crash in recovery leaves the image behind.
    pub save_each: bool,
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
            watchdog: Duration::from_secs(30),
            out_dir: std::env::temp_dir().join("ferrite-crashtest"),
            save_each: true,
            stop_at_first_failure: true,
            progress: None,
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

/// A failing image.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Crash-point key.
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
    /// Crash points visited (fences with pending lines, file operations, flushes if enabled,
    /// the end of the workload).
    pub visited: u64,
    /// Visits that crashed.
    pub crashed: u64,
    /// Images recovered and checked.
    pub images: u64,
    /// Statistics per crash-point key.
    pub keys: BTreeMap<String, KeyStats>,
    /// Fences seen (with or without pending lines).
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
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} (seed {:#x}): {} crash points visited, {} crashed, {} distinct keys, {} images tested, {} fences, {:.2?}{}",
            self.target,
            if self.passed() { "PASSED" } else { "FAILED" },
            self.seed,
            self.visited,
            self.crashed,
            self.keys.len(),
            self.images,
            self.fences,
            self.elapsed,
            if self.stopped_early { " (stopped early)" } else { "" }
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

/// A target with its types erased, for the registry and the CLI.
pub trait DynTarget: Send + Sync {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// One-line summary.
    fn summary(&self) -> &'static str;
    /// Runs an exploration.
    fn explore(&self, cfg: &Config) -> Report;
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
    fn explore(&self, cfg: &Config) -> Report {
        explore(self.clone(), cfg)
    }
    fn replay(&self, dir: &Path, watchdog: Duration) -> Result<(), String> {
        replay(self.clone(), dir, watchdog)
    }
}

struct State {
    rng: SplitMix64,
    /// Exponent k per key: crash probability 2^-k.
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
    for i in 0..k {
        v.push(Pick::Indices(vec![i]));
        v.push(Pick::Indices((0..k).filter(|&j| j != i).collect()));
    }
    for _ in 0..cfg.samples_beyond {
        v.push(Pick::Indices((0..k).filter(|_| rng.next_u64() & 1 == 1).collect()));
    }
    v
}

fn describe(p: &Pick, k: usize) -> String {
    match p {
        Pick::None => format!("durable image, none of {k} pending lines"),
        Pick::All => format!("all {k} pending lines"),
        Pick::Mask(m) => format!(
            "pending lines {:?} of {k}",
            (0..k).filter(|i| m & (1 << i) != 0).collect::<Vec<_>>()
        ),
        Pick::Indices(v) => format!("pending lines {v:?} of {k}"),
        Pick::Random(p) => format!("each of {k} pending lines with p={p}"),
    }
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

/// Recovers and checks `image` against `model` on a fresh thread, under `catch_unwind` and a
/// watchdog.
pub(crate) fn test_image<T: Target>(
    target: &Arc<T>,
    image: CrashImage,
    model: ModelView<T::Op>,
    watchdog: Duration,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let t = target.clone();
    let spawned = std::thread::Builder::new().name("crashtest-recovery".into()).spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let recovered = t.recover(&image).map_err(|e| format!("recovery failed: {e}"))?;
            let verdict = t.check(&recovered, &model).map_err(|e| format!("check failed: {e}"));
            drop(recovered);
            verdict
        }));
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

impl<T: Target> Explorer<T> {
    fn out(&self, tag: &str) -> PathBuf {
        self.cfg.out_dir.join(format!("{}-{tag}", self.target.name()))
    }

    fn on_event(&self, domain: &SimDomain, e: &Event) {
        let point = match e.kind {
            EventKind::Fence => e.pending > 0,
            EventKind::FileCreate | EventKind::FileRemove | EventKind::FilePunch => true,
            EventKind::Flush => self.cfg.at_flush,
            EventKind::Store | EventKind::NtStore => false,
        };
        if point {
            self.crash_point(domain, e.thread, &e.site.key(), self.pending_count(domain, e));
        }
    }

    fn pending_count(&self, domain: &SimDomain, e: &Event) -> usize {
        match e.kind {
            EventKind::Fence => e.pending,
            _ => domain.pending_of(e.thread).len(),
        }
    }

    fn crash_point(&self, domain: &SimDomain, thread: u32, key: &str, pending: usize) {
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        let picks = {
            let mut st = lock(&self.state);
            st.report.visited += 1;
            let stats = st.report.keys.entry(key.to_owned()).or_default();
            stats.visits += 1;
            let k = *st.exponent.get(key).unwrap_or(&0);
            let fire = self.cfg.exhaustive || k == 0 || st.rng.next_u64() < (u64::MAX >> k.min(63));
            if !fire {
                return;
            }
            st.report.keys.entry(key.to_owned()).or_default().crashes += 1;
            st.report.crashed += 1;
            *st.exponent.entry(key.to_owned()).or_insert(0) += 1;
            let State { rng, .. } = &mut *st;
            subsets(pending, &self.cfg, rng)
        };
        let model = lock(&self.log).view();
        for pick in picks {
            if self.out_of_budget() {
                self.stop.store(true, Ordering::Relaxed);
                lock(&self.state).report.stopped_early = true;
                return;
            }
            let spec = ImageSpec {
                thread: Some(thread),
                pending: pick.clone(),
                tear: false,
                seed: self.cfg.seed,
                ..ImageSpec::default()
            };
            let image = domain.capture(&spec);
            self.test(image, model.clone(), key, describe(&pick, pending));
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    fn out_of_budget(&self) -> bool {
        let st = lock(&self.state);
        self.cfg.budget.is_some_and(|b| st.report.images >= b)
            || self.cfg.time.is_some_and(|t| st.started.elapsed() >= t)
    }

    fn test(&self, mut image: CrashImage, model: ModelView<T::Op>, key: &str, spec: String) {
        let n = {
            let mut st = lock(&self.state);
            st.report.images += 1;
            if let Some(s) = st.report.keys.get_mut(key) {
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
            let dir = self.out("current");
            let _ = std::fs::remove_dir_all(&dir);
            let _ = save_case(&dir, &image, &model);
        }
        let verdict = test_image(&self.target, image.clone(), model.clone(), self.cfg.watchdog);
        if let Err(message) = verdict {
            let dir = self.out(&format!("s{:x}-i{n}", self.cfg.seed));
            let _ = std::fs::remove_dir_all(&dir);
            let saved = save_case(&dir, &image, &model).ok().map(|()| dir.clone());
            let replay =
                format!("ferrite crashtest {} --replay {}", self.target.name(), dir.display());
            let mut st = lock(&self.state);
            st.report.failures.push(Failure {
                key: key.to_owned(),
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
    let mut st = lock(&explorer.state);
    st.report.workload_error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(p) => Some(format!("workload panicked: {}", panic_message(p.as_ref()))),
    };
    // A workload stopped by the budget may not have finished cleanly; that is not an error of
    // the target.
    let stats = domain.stats();
    st.report.fences = stats.fences;
    st.report.double_flushes = stats.double_flushes;
    st.report.elapsed = st.started.elapsed();
    drop(ctx);
    std::mem::take(&mut st.report)
}

/// Recovers and checks the failure saved in `dir` (an image directory with `model.txt`).
pub fn replay<T: Target>(target: Arc<T>, dir: &Path, watchdog: Duration) -> Result<(), String> {
    let image = CrashImage::load(dir).map_err(|e| format!("cannot load {}: {e}", dir.display()))?;
    let text = std::fs::read_to_string(dir.join("model.txt"))
        .map_err(|e| format!("cannot read {}: {e}", dir.join("model.txt").display()))?;
    let model = ModelView::<T::Op>::decode(&text)?;
    test_image(&target, image, model, watchdog)
}
