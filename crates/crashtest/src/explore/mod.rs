//! Exploration and the in-process executor: where to crash, which images to build there, and
//! how each image is recovered and checked (seed 001 §7.2.1–7.2.6 and ch. 8's future work;
//! spec `../shared/specs/crash-testing.md` §3, §9, §10.5–10.7).
//!
//! The workload runs on a simulated domain whose hook is the explorer. At every **crash point**
//! — a fence that has lines pending (the stash of Alg. 7.3), a sync of a block file with
//! unsynced writes, a file operation, optionally every flush and block-file write, and the end
//! of the workload — the explorer decides whether to crash there:
//!
//! - *call-stack-aware* (default): each crash-point key starts at probability 1 and halves after
//!   every crash there (Alg. 7.2), so a site visited n times is crashed about log2(n)+1 times;
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
//! lines tear at 8-byte granularity (only for targets that do not declare axiom M2); the
//! subsets of the block files' unsynced choices (sector versions, length changes), chosen as
//! the pending lines are (with the pending lines none, plus one image with everything); and
//! `corrupt_samples` variants with flipped bits or truncated files, on which recovery must
//! return `Ok` or a typed error — never panic or hang.
//!
//! Each image is written to the current-image directory, then recovered and checked on a fresh
//! thread under `catch_unwind` and a watchdog; its DRAM state is dropped afterwards. Every
//! recovery runs with a hook on the domains it opens (`nested.rs`), which records the persist
//! sites recovery reaches; with `nested`, for a sampled fraction of recoveries it also crashes
//! the recovery at its own crash points (depth 2), with the same image set as above, and each
//! such image is recovered again and checked against the same model. Dropped persist sites
//! (mutation checks) apply in those domains too.
//!
//! # Invariants
//! - A crash point reached after the run stopped (budget, time, first failure) is counted as
//!   visited and unexamined, never as checked; a stopped run without a failure is `STOPPED`,
//!   not passed.
//!
//! Threads: one crash is tested at a time; while it is, every other workload thread is paused
//! at its next persistence event (stores included). Multi-threaded runs are not reproducible
//! from the seed (scheduling differs); their failures replay from the saved image.
//!
//! Files: `config.rs` (settings), `images.rs` (which images at a crash point), `executor.rs`
//! (recover and check each image), `nested.rs` (crashes inside recovery), `mutation.rs`
//! (mutation checks), `report.rs` (what a run found).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ferrite_pmem::sim::{Event, EventKind};
use ferrite_pmem::{SimDomain, SplitMix64};

use crate::target::{Ctx, Expect, Log, Target};

mod config;
mod executor;
mod images;
mod mutation;
mod nested;
mod report;

pub use config::{Config, ExcuseFn, Progress, ProgressFn};
pub use executor::replay;
pub use mutation::{MutationOutcome, MutationReport, mutate, names_site};
pub use report::{Failure, KeyStats, Report, SiteStats, Stop, Verdict};

use executor::panic_message;
use images::describe;

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
    /// The workload's step hook ([`Ctx::set_step_hook`]), shared with its `Ctx`.
    step: Arc<RwLock<Option<crate::target::StepHook>>>,
}

/// The rule of a site's label: `P-PM-10:offset` (one of several persists of one call) is a
/// step of rule `P-PM-10`.
fn rule_of(label: &str) -> &str {
    label.split_once(':').map_or(label, |(r, _)| r)
}

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Coverage: a flush, fence or block-file sync (counted with the fences) at `e`'s site,
    /// by the workload or inside a recovery.
    fn record_site(&self, e: &Event, in_recovery: bool) {
        if !matches!(e.kind, EventKind::Flush | EventKind::Fence | EventKind::BlockSync) {
            return;
        }
        let mut st = lock(&self.state);
        let s = st.report.sites.entry(e.site.key()).or_default();
        match (e.kind == EventKind::Flush, in_recovery) {
            (true, false) => s.flushes += 1,
            (false, false) => s.fences += 1,
            (true, true) => s.recovery_flushes += 1,
            (false, true) => s.recovery_fences += 1,
        }
        if e.fresh > 0 {
            s.effective += 1;
            if !in_recovery {
                s.workload_effective += 1;
            }
        }
    }

    fn on_event(self: &Arc<Self>, domain: &SimDomain, e: &Event) {
        let step = self.step.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(h) = step {
            h(e);
        }
        self.record_site(e, false);
        let point = match e.kind {
            EventKind::Fence => e.pending > 0,
            // A sync of a file with unsynced writes (they are still undecided here).
            EventKind::BlockSync => e.pending > 0,
            EventKind::FileCreate
            | EventKind::FileRemove
            | EventKind::FilePunch
            | EventKind::BlockCreate
            | EventKind::BlockRemove => true,
            EventKind::Flush | EventKind::BlockWrite | EventKind::BlockSetLen => self.cfg.at_flush,
            EventKind::Store | EventKind::NtStore | EventKind::Close => false,
        };
        if point {
            // The crashing thread's pending lines (block files' unsynced writes are
            // looked up by `specs_at`).
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
            // Reached, never examined: the report must not claim it.
            let mut st = lock(&self.state);
            st.report.visited += 1;
            st.report.unexamined += 1;
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
            let specs = self.specs_at(domain, thread, pending, rng);
            let draws: Vec<f64> = specs.iter().map(|_| rng.next_f64()).collect();
            (specs, draws)
        };
        let unsynced = domain.unsynced_blocks().len();
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
                describe(spec, pending, unsynced),
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

    /// Whether the budget or the time is spent (then the run stops, saying why).
    fn out_of_budget(&self) -> bool {
        let mut st = lock(&self.state);
        let why = if self.cfg.budget.is_some_and(|b| st.report.images >= b) {
            Some(Stop::Budget)
        } else if self.cfg.time.is_some_and(|t| st.started.elapsed() >= t) {
            Some(Stop::Time)
        } else {
            None
        };
        match why {
            Some(why) => {
                Self::halt(&self.stop, &mut st.report, why);
                true
            }
            None => false,
        }
    }

    /// Stops crashing, recording the first reason.
    fn halt(stop: &AtomicBool, report: &mut Report, why: Stop) {
        stop.store(true, Ordering::Relaxed);
        report.stopped_early = true;
        report.stop.get_or_insert(why);
    }
}

/// Explores `target` with `cfg` (see the module docs).
pub fn explore<T: Target>(target: Arc<T>, cfg: &Config) -> Report {
    let domain = Arc::new(SimDomain::new(false));
    domain.set_writeback_order(cfg.writebacks);
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
        step: Arc::new(RwLock::new(None)),
    });
    let hook_ex = explorer.clone();
    domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| hook_ex.on_event(d, e))));
    let mut ctx = Ctx {
        domain: domain.clone(),
        log,
        rng: SplitMix64::new(cfg.seed),
        step: explorer.step.clone(),
    };
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target.workload(&mut ctx)));
    // The end of the workload is a crash point too: everything fenced is durable.
    if !domain.files().is_empty() || !domain.block_files().is_empty() {
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
    st.report.syncs = stats.syncs;
    st.report.double_flushes = stats.double_flushes;
    let reached: BTreeSet<&str> = st
        .report
        .sites
        .keys()
        .filter_map(|k| k.rsplit_once('#').map(|(_, r)| rule_of(r)))
        .collect();
    let missing: Vec<String> =
        target.rules().iter().filter(|r| !reached.contains(*r)).map(|r| (*r).to_owned()).collect();
    st.report.rules_not_reached = missing;
    st.report.elapsed = st.started.elapsed();
    drop(ctx);
    std::mem::take(&mut st.report)
}
