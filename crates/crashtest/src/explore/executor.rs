//! The in-process executor: each image is saved, recovered and checked on a fresh thread
//! under `catch_unwind` and a watchdog; failures are saved with their model for replay.
//!
//! # Invariants
//! - Nothing the executor does touches the workload's pool: images are copies, and recovery
//!   opens them on new domains.
//! - A failure is saved (image, note, model) before it is reported, so it replays from the
//!   saved files alone.
//!
//! # Concurrency
//! One image at a time; recovery runs on its own thread, abandoned (and reported) if it
//! outlives the watchdog, and then moved to the idle scheduling class (it may spin for ever).

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use ferrite_pmem::CrashImage;
use ferrite_pmem::sim::{
    WritebackOrder, set_new_domain_drops, set_new_domain_hook, set_new_domain_writebacks,
};

use super::{Explorer, Failure, Kind, Progress, Stop, lock};
use crate::target::{ModelView, Target};

pub(super) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

impl<T: Target> Explorer<T> {
    pub(super) fn test(
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
                Self::halt(&self.stop, &mut st.report, Stop::Failure);
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

    /// Recovers (and checks, unless corrupted) on a fresh thread. That thread's new domains
    /// (the ones recovery opens) drop the run's dropped persist sites too, and, except for
    /// corrupted images, start with the recovery hook: coverage of recovery's persist sites
    /// and, with `nest`, crashes inside the recovery (`nested.rs`).
    fn recover_and_check(
        self: &Arc<Self>,
        image: CrashImage,
        model: ModelView<T::Op>,
        key: &str,
        kind: Kind,
    ) -> Result<(), String> {
        let nest = matches!(kind, Kind::Check { nest: true });
        let hook = (kind != Kind::Corrupt).then(|| self.recovery_hook(key, &model, nest));
        let drops = self.cfg.drop_sites.clone();
        let writebacks = self.cfg.writebacks;
        let target = self.target.clone();
        // The nested images are recovered on threads of their own, each with the watchdog: a
        // recovery crashed inside gets one watchdog period per nested image, but only while
        // images keep finishing (a hang shows one period after the last one, not after all of
        // them: that was 17 periods, 510 s, for a hung recovery of `fptree-fixed`'s check).
        let periods = if nest { 1 + self.cfg.nested_max.min(1 << 16) as u32 } else { 1 };
        let ex = self.clone();
        let progress = move || lock(&ex.state).report.images;
        run_guarded_while(self.cfg.watchdog, periods, progress, move || {
            set_new_domain_hook(hook);
            set_new_domain_drops(&drops);
            set_new_domain_writebacks(writebacks);
            let recovered = target.recover(&image);
            set_new_domain_hook(None);
            set_new_domain_drops(&[]);
            set_new_domain_writebacks(WritebackOrder::default());
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
}

/// Runs `f` on a fresh thread under `catch_unwind`; gives up after `watchdog`.
///
/// A thread given up on cannot be stopped, and a hung recovery often spins for ever (a
/// yielding lock wait on a leaf that a dropped persist left locked, in a mutation check of
/// `fptree-fixed`); it used to take a core from every later test of the process. It is moved
/// to the idle scheduling class, so it runs only where nothing else wants the CPU.
pub(super) fn run_guarded(
    watchdog: Duration,
    f: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    run_guarded_while(watchdog, 1, || 0, f)
}

/// [`run_guarded`] for up to `periods` watchdog periods, each after the first only if the one
/// before saw `progress()` change (work `f` waits on finished); gives up after a period
/// without.
fn run_guarded_while(
    watchdog: Duration,
    periods: u32,
    progress: impl Fn() -> u64,
    f: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    // The recovery thread's kernel id while it runs (`None` before and once it is done): held
    // locked while the watchdog lowers it, so the id cannot be reused in between.
    let running = Arc::new(Mutex::new(None));
    let running_in = running.clone();
    let spawned = std::thread::Builder::new().name("crashtest-recovery".into()).spawn(move || {
        *lock(&running_in) = Some(ferrite_pmem::platform::current_thread_id());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        *lock(&running_in) = None;
        let _ = tx.send(r.map_err(|p| panic_message(p.as_ref())));
    });
    if let Err(e) = spawned {
        return Err(format!("internal error: cannot start the recovery thread: {e}"));
    }
    let mut seen = progress();
    let mut waited = Duration::ZERO;
    let outcome = loop {
        let r = rx.recv_timeout(watchdog);
        waited = waited.saturating_add(watchdog);
        match r {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = progress();
                if waited < watchdog.saturating_mul(periods) && now != seen {
                    seen = now;
                    continue;
                }
                break r;
            }
            _ => break r,
        }
    };
    match outcome {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(panic)) => Err(format!("recovery or check panicked: {panic}")),
        Err(_) => {
            if let Some(tid) = *lock(&running) {
                // Best effort: where the class cannot be changed the thread keeps spinning.
                let _ = ferrite_pmem::platform::idle_thread(tid);
            }
            Err(format!(
                "recovery or check did not finish within {waited:?} (hung; its thread is abandoned)"
            ))
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
