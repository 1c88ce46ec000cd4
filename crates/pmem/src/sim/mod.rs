//! The simulated persistence domain: an observable model of what persistent memory would hold
//! after a crash, which the crash tester stands on (seed 001 ch. 7; spec
//! `../shared/specs/crash-testing.md` §1.2, §9–10; `../shared/specs/kolli-pelley.md` Part D).
//!
//! A sim pool (or pool set) runs the engine's code unchanged: reads and writes go to the
//! **working image** (ordinary memory, the pool's heap block or reservation), exactly as on a
//! mapped pool. Alongside, the domain keeps, per file:
//!
//! - the **durable image**: what survives a crash for certain, as copy-on-write 4 KiB pages;
//! - a **dirty-line bitmap**: lines stored to since they were last made durable;
//!
//! and, per thread, the **pending lines**: a flush captures the line's content at that moment
//! (axiom M3) into the flushing thread's pending set; that thread's next fence makes its
//! pending lines durable (M4: another thread's fence does not); a later store dirties the line
//! again. Each capture carries a **coherence stamp** taken with its content; by default
//! ([`WritebackOrder::Coherent`], axiom M6) a fence does not land a captured content older
//! than what another write-back of that line already made durable, as on x86 hardware, where a
//! line's write-backs reach the persistence domain in coherence order.
//! [`WritebackOrder::Strict`] (the model before M6) lands every capture at its thread's fence. Non-temporal stores become pending at store time, for the words they wrote. File
//! operations (create, remove, hole punch) apply to both images at once and are durable
//! immediately. Under declared eADR a fence makes every dirty line durable.
//!
//! Block files ([`BlockFile`](crate::BlockFile) on a domain, `blocks.rs`) are modelled apart
//! from pool files: per file a durable content, a working content, and per 512-byte sector the
//! versions it had since the file's last sync; a sync of the file makes its working content
//! durable (axioms B1–B3 of `docs/design/persistence.md`).
//!
//! A [`CrashImage`](crate::CrashImage) is captured from the durable image plus a sparse
//! overlay of chosen lines: none (durable only), a subset of a thread's pending lines, a subset
//! of dirty lines with their newest content (early eviction, M5), optionally torn at 8-byte
//! granularity (only for targets that do not declare M2; M1 always holds); and, for block
//! files, the durable content plus a chosen version (or none) of each unsynced sector and the
//! durable or newest length.
//!
//! # Invariants
//! - D1: the durable image changes only at a fence (the fencing thread's pending lines, or
//!   every dirty line under eADR) and at file operations.
//! - D2: a line's dirty bit is set by every store to it and cleared only when a fence makes
//!   durable a content equal to the line's working content.
//! - D3: a captured image is a state some crash could produce: captures take the gate
//!   exclusively, so no store, flush or fence is half-applied.
//! - D4: the domain never reads memory its pools released: dropping a sim pool or pool set
//!   first gives each of its files a private copy of its working image (dirty lines are still
//!   "in the cache" after a close, so later captures need their content).
//! - D7: stamps grow in the order contents were read (captures take them under the pending
//!   lock, fences that drain non-temporal words, eADR fences and hole punches under the
//!   exclusive gate); each durable word keeps the stamp of the write-back that last set it.
//!   Under `Coherent` a fence or an image writes a captured word only if its stamp is not
//!   below the word's durable stamp; non-temporal words always land, and take a fresh stamp
//!   at the fence that drains them (they reach memory then, after every older capture).

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

mod blocks;
mod buffer;
mod capture;
mod domain;
mod event;
mod files;
mod replay;
mod trace;

pub use crate::image::PAGE;
pub use blocks::{SECTOR, UnsyncedInfo};
pub use domain::{PendingInfo, SimDomain, SimStats, WritebackOrder};
pub use event::{
    Event, EventKind, Hook, Site, set_new_domain_drops, set_new_domain_hook,
    set_new_domain_writebacks,
};
pub use replay::{Replay, replay};
pub use trace::{TraceEvent, load_trace, save_trace};

/// Small per-process index of the calling thread (stable for the thread's life).
pub fn thread_index() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! { static IDX: Cell<u32> = const { Cell::new(0) }; }
    IDX.with(|c| {
        if c.get() == 0 {
            c.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        c.get()
    })
}
