//! Crashes inside recovery (depth 2): a hook on the domains a recovery opens crashes the
//! recovery at its own crash points, and each such image is recovered again and checked
//! against the same model.
//!
//! # Invariants
//! - Depth 3 and beyond are not explored: recoveries of depth-2 images run without the hook.
//!
//! # Concurrency
//! The hook runs on the recovery thread; the workload is paused meanwhile.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use ferrite_pmem::sim::{Event, EventKind};
use ferrite_pmem::{ImageSpec, Pick, SimDomain};

use super::images::describe;
use super::{Explorer, Kind, lock};
use crate::target::{ModelView, Target};

impl<T: Target> Explorer<T> {
    /// A crash point inside a recovery (depth 2).
    pub(super) fn nested_point(
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
