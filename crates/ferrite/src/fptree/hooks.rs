//! Step hooks for interleaving tests of the concurrent tree (`tests/fptree_interleave.rs`,
//! `docs/design/fptree.md`, "Tests and what they catch"): named points in the writers', the
//! readers', the scans' and the split's code where a test stops a thread and runs other
//! operations, deterministically (no sleeps, no timing).
//!
//! # Invariants
//! - H1: without the cargo feature `test-hooks` (every normal build) [`at`] is an empty
//!   `#[inline(always)]` function of two values the call sites compute anyway (a leaf's global
//!   offset): it compiles to nothing, and the flush/fence counts and the code of the hot
//!   paths are those of a build without hooks.
//! - H2: with the feature, a hook belongs to the thread that installed it ([`install`]); other
//!   threads (and the hooked thread's own operations run from inside its hook) run unhooked:
//!   the hook is taken out of its thread-local slot while it runs and put back after.
//!
//! # Ordering
//! None of its own: a hook runs on the calling thread between two steps of the tree's code;
//! what it does (block on a channel, run another operation) is ordered by the test.
//!
//! # Concurrency
//! A hook is thread-local (`RefCell` in a `thread_local!`); a test that stops a thread passes
//! messages through channels it owns.

/// A named point in the tree's code (each call passes the global offset of the leaf it is
/// about, `g`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub enum Point {
    /// A writer found its leaf `g` (pinned index lookup), before it tries the leaf's lock.
    WriterRouted,
    /// A writer holds the lock of leaf `g`, before it rechecks its pin.
    WriterLocked,
    /// A writer found leaf `g` locked or obsolete; it releases nothing (it holds nothing),
    /// pauses and starts again from the lookup.
    WriterBusy,
    /// A reader (`get`) found its leaf `g`, before the leaf's lock-word snapshot.
    ReaderRouted,
    /// A reader searched leaf `g` for its key (the slot is known), before it loads the value
    /// and validates the leaf.
    ReaderSearched,
    /// A scan step found its leaf `g`, before the leaf's lock-word snapshot.
    ScanRouted,
    /// A scan step copied leaf `g` (and read its reach from the index), before it validates
    /// the leaf and checks its pin.
    ScanCopied,
    /// A byte-key scan is about to read a key block named by a slot of its copy of leaf `g`
    /// (inside the copy: the leaf is not validated yet).
    ScanKeyBlock,
    /// A split linked its new leaf `g` and entered it in the index, before the split log is
    /// disarmed (the old and the new leaf are locked).
    SplitLinked,
}

#[cfg(not(feature = "test-hooks"))]
/// Without the feature: nothing (H1).
#[inline(always)]
pub(crate) fn at(_point: Point, _g: u64) {}

#[cfg(feature = "test-hooks")]
mod on {
    use std::cell::RefCell;

    use super::Point;

    type Hook = Box<dyn FnMut(Point, u64)>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    /// Removes the calling thread's hook when dropped.
    #[must_use = "the hook is removed when the guard is dropped"]
    #[derive(Debug)]
    pub struct Installed(());

    impl Drop for Installed {
        fn drop(&mut self) {
            HOOK.with(|h| h.borrow_mut().take());
        }
    }

    /// Installs `f` as the calling thread's hook (replacing any other) until the returned
    /// guard is dropped. `f(point, g)` runs at every [`Point`] this thread passes, except
    /// inside `f` itself (H2).
    pub fn install(f: impl FnMut(Point, u64) + 'static) -> Installed {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
        Installed(())
    }

    /// Runs the calling thread's hook at `point`, if it has one (H2: unhooked inside).
    pub(crate) fn at(point: Point, g: u64) {
        let Some(mut f) = HOOK.with(|h| h.borrow_mut().take()) else { return };
        f(point, g);
        HOOK.with(|h| {
            let mut slot = h.borrow_mut();
            if slot.is_none() {
                *slot = Some(f);
            }
        });
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) use on::at;
#[cfg(feature = "test-hooks")]
pub use on::{Installed, install};
