//! Recovery under observation (depth 2): every recovery the tester runs opens its image on a
//! new domain that starts with a hook from here. The hook records the persist sites recovery
//! reaches (so the mutation check can drop a persist that runs only inside recovery), and,
//! for a sampled fraction of recoveries, crashes the recovery at its own crash points — the
//! same images as at a top-level crash (stash subsets, eviction, tearing) — and recovers and
//! checks each such image again against the same model.
//!
//! # Invariants
//! - Crash points inside recovery are those of the workload (a fence with lines pending that
//!   would change the durable image, a block-file sync that would, a file operation, a flush
//!   or block-file write with `at_flush`) plus the end of recovery: the close of a pool or
//!   block file recovery opened (`EventKind::Close`), where everything recovery left pending,
//!   dirty or unsynced is still undecided.
//! - Depth 3 and beyond are not explored: recoveries of depth-2 images are observed (sites)
//!   but not crashed.
//! - Whether a crash point inside recovery is crashed follows the call-stack policy on the
//!   key `depth2 <inner site>` (probability halves per crash there; with `nested_by_outer`
//!   the key also names the top-level crash point whose image is being recovered), or every
//!   visit with `exhaustive`; at most `nested_max` images are tested per crash point.
//! - With `nested_after_drop` (mutation runs of a site that matters only in recovery), a
//!   recovery is crashed only after it reached a dropped site whose persist would have
//!   changed the durable image (a flush there, or a fence there with lines to make durable):
//!   before, it runs as the unmutated code does, and its images are the unmutated code's.
//!
//! # Concurrency
//! The hook runs on the recovery thread while the workload is paused at its crash point.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrite_pmem::SimDomain;
use ferrite_pmem::sim::{Event, EventKind, Hook};

use super::images::describe;
use super::{Explorer, Kind, State, lock};
use crate::target::{ModelView, Target};

impl<T: Target> Explorer<T> {
    /// The hook every domain of one recovery starts with: coverage of recovery's persist
    /// sites, and, with `nest`, crashes inside the recovery (see the module docs).
    pub(super) fn recovery_hook(
        self: &Arc<Self>,
        outer: &str,
        model: &ModelView<T::Op>,
        nest: bool,
    ) -> Hook {
        let ex = self.clone();
        let outer = outer.to_owned();
        let model = model.clone();
        // Whether this recovery has diverged from the unmutated code (see the module docs).
        let armed = AtomicBool::new(!self.cfg.nested_after_drop);
        Arc::new(move |d: &SimDomain, e: &Event| {
            ex.record_site(e, true);
            if !nest {
                return;
            }
            if !armed.load(Ordering::Relaxed) && ex.diverges(e) {
                armed.store(true, Ordering::Relaxed);
            }
            if armed.load(Ordering::Relaxed) {
                ex.nested_point(d, e, &outer, &model);
            }
        })
    }

    /// Whether `e` is a dropped persist that would have changed what is durable: a flush at a
    /// dropped site (the simulator does not tell whether a dropped flush held new content, so
    /// every one counts), or a fence there that would have written pending lines.
    fn diverges(&self, e: &Event) -> bool {
        let fresh = match e.kind {
            EventKind::Flush => true,
            EventKind::Fence | EventKind::BlockSync => e.fresh > 0,
            _ => false,
        };
        fresh && self.cfg.drop_sites.iter().any(|s| *s == e.site.key())
    }

    /// A crash point inside a recovery (depth 2).
    fn nested_point(
        self: &Arc<Self>,
        domain: &SimDomain,
        e: &Event,
        outer: &str,
        model: &ModelView<T::Op>,
    ) {
        let point = match e.kind {
            // Only a fence that would change the durable image: recovery re-persists much
            // that is already durable (an open-state word, an idempotent redo), and a crash
            // before such a fence gives the same images as one after it.
            EventKind::Fence | EventKind::BlockSync => e.pending > 0 && e.fresh > 0,
            EventKind::FileCreate
            | EventKind::FileRemove
            | EventKind::FilePunch
            | EventKind::BlockCreate
            | EventKind::BlockRemove
            | EventKind::Close => true,
            EventKind::Flush | EventKind::BlockWrite | EventKind::BlockSetLen => self.cfg.at_flush,
            EventKind::Store | EventKind::NtStore => false,
        };
        if !point || self.stop.load(Ordering::Relaxed) {
            return;
        }
        let inner = if e.kind == EventKind::Close {
            format!("end-of-recovery {}", e.site.key())
        } else {
            e.site.key()
        };
        let pending = match e.kind {
            EventKind::Fence => e.pending,
            _ => domain.pending_of(e.thread).len(),
        };
        {
            let mut st = lock(&self.state);
            st.report.nested_visited += 1;
        }
        let policy_key = if self.cfg.nested_by_outer {
            format!("depth2 {inner} after {outer}")
        } else {
            format!("depth2 {inner}")
        };
        if !self.fire(&policy_key) {
            return;
        }
        let specs = {
            let mut st = lock(&self.state);
            st.report.nested_crashed += 1;
            let State { rng, .. } = &mut *st;
            self.specs_at(domain, e.thread, pending, rng)
        };
        let key = format!("nested {inner} after {outer}");
        let unsynced = domain.unsynced_blocks().len();
        for spec in specs.iter().take(self.cfg.nested_max) {
            if self.out_of_budget() {
                return;
            }
            let image = domain.capture(spec);
            let desc =
                format!("crash inside recovery at {inner}: {}", describe(spec, pending, unsynced));
            self.test(image, model, key.clone(), desc, Kind::Nested);
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }
}
