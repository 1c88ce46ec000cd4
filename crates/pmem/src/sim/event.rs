//! What a simulated domain reports: persistence events, the call site each comes from, and the
//! hooks that observe them (including the defaults every domain created on a thread starts
//! with, which the crash tester uses to reach into recoveries).
//!
//! # Invariants
//! - A [`Site`]'s key is stable across builds and address-space layouts: the caller's
//!   `file:line:column` (`#[track_caller]`), plus `#rule` when the caller named the ordering
//!   rule it implements. One call of a pmem primitive that issues several persists names
//!   each with its own rule label (e.g. `P-PM-10:offset`, `P-PM-10:segment`), so each is a
//!   site of its own.
//! - New-domain defaults are per thread: a domain takes the defaults of the thread that
//!   creates it, at creation, and later changes of the defaults do not affect it.
//!
//! # Concurrency
//! Hooks run on the thread that caused the event, outside the domain's locks; events raised on
//! a thread while it runs a hook are not delivered again (no re-entrancy).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::Location;
use std::sync::Arc;

use super::{SimDomain, WritebackOrder};

/// Where a persistence event came from: the caller's source location (`#[track_caller]`) and
/// the ordering rule it implements, if the caller named one (e.g. `"P-FPT-3"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    /// The engine's call site.
    pub location: &'static Location<'static>,
    /// The ordering rule, when given through a `*_rule` method.
    pub rule: Option<&'static str>,
}

impl Site {
    /// A stable key `file:line:column[#rule]` (independent of ASLR and build addresses).
    pub fn key(&self) -> String {
        match self.rule {
            Some(r) => format!(
                "{}:{}:{}#{r}",
                self.location.file(),
                self.location.line(),
                self.location.column()
            ),
            None => {
                format!(
                    "{}:{}:{}",
                    self.location.file(),
                    self.location.line(),
                    self.location.column()
                )
            }
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An ordinary store (word, bytes, CAS that succeeded, fetch-or/and).
    Store,
    /// A non-temporal store.
    NtStore,
    /// A flush of the lines of a range.
    Flush,
    /// A fence (the hook sees it **before** it takes effect: a crash point).
    Fence,
    /// A file was created (zero-filled).
    FileCreate,
    /// A file was removed.
    FileRemove,
    /// A hole was punched (range zeroed).
    FilePunch,
    /// A pool or pool set on the domain is being closed (dropped): raised **before** its
    /// working images are detached, so a hook there sees the last state the pool left (the
    /// crash tester's end-of-recovery crash point). Changes nothing durable. A simulated
    /// block file's handle raises it too when it is dropped (its file named in the event).
    Close,
    /// A block file was created (empty; durable at once).
    BlockCreate,
    /// A block file was removed (durable at once).
    BlockRemove,
    /// A write to a block file (`offset`, `len`): not durable until the file's next sync.
    BlockWrite,
    /// A block file's length was set to `len`: not durable until the file's next sync.
    BlockSetLen,
    /// A sync of a block file (the hook sees it **before** it takes effect: a crash point,
    /// with the file's unsynced writes still undecided). `pending` counts the file's unsynced
    /// choices (sector versions, a length change), `fresh` those that differ from what is
    /// durable.
    BlockSync,
}

impl EventKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            EventKind::Store => "store",
            EventKind::NtStore => "nt",
            EventKind::Flush => "flush",
            EventKind::Fence => "fence",
            EventKind::FileCreate => "create",
            EventKind::FileRemove => "remove",
            EventKind::FilePunch => "punch",
            EventKind::Close => "close",
            EventKind::BlockCreate => "bcreate",
            EventKind::BlockRemove => "bremove",
            EventKind::BlockWrite => "bwrite",
            EventKind::BlockSetLen => "blen",
            EventKind::BlockSync => "bsync",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<EventKind> {
        Some(match s {
            "store" => EventKind::Store,
            "nt" => EventKind::NtStore,
            "flush" => EventKind::Flush,
            "fence" => EventKind::Fence,
            "create" => EventKind::FileCreate,
            "remove" => EventKind::FileRemove,
            "punch" => EventKind::FilePunch,
            "close" => EventKind::Close,
            "bcreate" => EventKind::BlockCreate,
            "bremove" => EventKind::BlockRemove,
            "bwrite" => EventKind::BlockWrite,
            "blen" => EventKind::BlockSetLen,
            "bsync" => EventKind::BlockSync,
            _ => return None,
        })
    }
}

/// A persistence event as a hook sees it.
#[derive(Clone, Debug)]
pub struct Event {
    /// Sequence number in this domain (starts at 1).
    pub seq: u64,
    /// [`thread_index`] of the thread that caused it.
    pub thread: u32,
    /// What happened.
    pub kind: EventKind,
    /// File concerned (for fences: empty).
    pub file: String,
    /// Offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Where it came from.
    pub site: Site,
    /// For fences: how many lines the thread had pending (a fence with none cannot change the
    /// durable image outside eADR). For block-file syncs: how many unsynced choices the file
    /// had (see [`EventKind::BlockSync`]).
    pub pending: usize,
    /// For flushes: how many flushed lines hold content that differs from their durable
    /// content or from the content already pending for them; for fences: how many lines the
    /// fence changes in the durable image. A persist
    /// whose flushes and fences all have `fresh == 0` changed nothing durable (dropping it
    /// cannot be observed in that run).
    pub fresh: usize,
}

/// A hook: called with the domain and the event (see the module docs for when).
pub type Hook = Arc<dyn Fn(&SimDomain, &Event) + Send + Sync>;

/// What a domain created on this thread starts with (see [`set_new_domain_hook`] and
/// [`set_new_domain_drops`]).
#[derive(Clone, Default)]
pub(crate) struct NewDomainDefaults {
    pub hook: Option<Hook>,
    pub dropped: Vec<String>,
    pub writebacks: WritebackOrder,
}

thread_local! {
    pub(super) static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static NEW_DOMAIN: RefCell<NewDomainDefaults> = RefCell::new(NewDomainDefaults::default());
}

/// Sets the hook that every [`SimDomain`] created **on this thread** from now on starts with
/// (`None` to stop). The crash tester uses it to observe and crash a target's recovery, which
/// creates its own domain when it opens a crash image (nested crash simulation). It is per
/// thread, not global: domains created on other threads are not affected.
pub fn set_new_domain_hook(hook: Option<Hook>) {
    NEW_DOMAIN.with(|d| d.borrow_mut().hook = hook);
}

/// Sets the persist sites (keys, see [`Site::key`]) that every [`SimDomain`] created **on
/// this thread** from now on drops, as [`SimDomain::drop_persist`] does (empty to stop). The
/// crash tester's mutation check uses it so that a persist reached only inside recovery —
/// which runs on domains opened from crash images — is dropped there too.
pub fn set_new_domain_drops(sites: &[String]) {
    NEW_DOMAIN.with(|d| d.borrow_mut().dropped = sites.to_vec());
}

/// Sets how write-backs of one line land in every [`SimDomain`] created **on this thread**
/// from now on (see [`WritebackOrder`]; the default is `Coherent`). The crash tester's
/// `--strict-writebacks` uses it so that the domains recoveries open follow the run's mode.
pub fn set_new_domain_writebacks(order: WritebackOrder) {
    NEW_DOMAIN.with(|d| d.borrow_mut().writebacks = order);
}

/// The defaults a domain created now on this thread starts with.
pub(crate) fn new_domain_defaults() -> NewDomainDefaults {
    NEW_DOMAIN.with(|d| d.borrow().clone())
}
