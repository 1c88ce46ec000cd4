//! Crash target `alloc-small`: PAllocator's small allocator on a simulated pool set ([C1]).
//!
//! Segments are tiny (five 64 KiB pages, four usable) so that pages fill and empty, segments
//! move between the active, full and free lists and new segments are created (file operations
//! included) many times in one short workload. The workload allocates a 4 KiB table of
//! persistent pointers into the root, then allocates seeded sizes (64 B–8 KiB, some up to the
//! largest class) into table slots — stamping each block — and frees them again. Every 50
//! operations it releases every free segment (`release_free_segments(0)`): the segment leaves
//! the free list in a transaction, then the pool set removes its file (P-PM-9), so segment
//! removal and the reuse of segment ids by later growth are crash-tested too.
//!
//! Some allocations are then moved by the application, as a data structure links a block
//! allocated into its micro-log and clears the log: the pointer is copied to another slot
//! (persisted), then the first slot is nulled (persisted). A recovery that replayed a stale,
//! already applied operation would put the block back into the first slot: this is what
//! catches a disarm that was never made durable.
//!
//! The check after every crash: the allocator opens (recovery replays armed items and adopts
//! orphan segments), its full `check()` passes, the allocated blocks are exactly the table and
//! the blocks the table points to (no leak, nothing freed twice), every slot holds a block iff
//! the committed operations (plus, maybe, the in-flight one) say so, and every committed block
//! still holds its stamp.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, PPtr, PoolSet};

use crate::target::{Ctx, ModelOp, ModelView, Target};

pub(crate) const SEG: u64 = 5 * 64 * 1024 + 4096;
pub(crate) const TABLE: u64 = 4096;
pub(crate) const SLOTS: u64 = TABLE / 16;
const OPS: u64 = 500;
/// Word 0 of the table: written (after the null slots are durable) to say the table is ready.
pub(crate) const READY: u64 = 0x5245_4144_595f_5442;

pub(crate) fn opts() -> Options {
    Options::default().layout("crashtest-alloc").segment_size(SEG)
}

/// One operation of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocOp {
    /// Creating the allocator.
    Create,
    /// Allocating the pointer table into the root.
    Table,
    /// Allocating `size` bytes into table slot `slot` and stamping it with `tag`.
    Alloc { slot: u64, size: u64, tag: u64 },
    /// Freeing the block of table slot `slot`.
    Free { slot: u64 },
    /// The application copies slot `from`'s pointer into the empty slot `to`.
    Copy { from: u64, to: u64 },
    /// The application nulls slot `slot` (its block stays referenced by another slot).
    Clear { slot: u64 },
}

impl ModelOp for AllocOp {
    fn encode(&self) -> String {
        match self {
            AllocOp::Create => "create".into(),
            AllocOp::Table => "table".into(),
            AllocOp::Alloc { slot, size, tag } => format!("alloc {slot} {size} {tag}"),
            AllocOp::Free { slot } => format!("free {slot}"),
            AllocOp::Copy { from, to } => format!("copy {from} {to}"),
            AllocOp::Clear { slot } => format!("clear {slot}"),
        }
    }
    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(' ').collect();
        Some(match f.as_slice() {
            ["create"] => AllocOp::Create,
            ["table"] => AllocOp::Table,
            ["alloc", a, b, c] => AllocOp::Alloc {
                slot: a.parse().ok()?,
                size: b.parse().ok()?,
                tag: c.parse().ok()?,
            },
            ["free", a] => AllocOp::Free { slot: a.parse().ok()? },
            ["copy", a, b] => AllocOp::Copy { from: a.parse().ok()?, to: b.parse().ok()? },
            ["clear", a] => AllocOp::Clear { slot: a.parse().ok()? },
            _ => return None,
        })
    }
}

/// The model's state after some operations: whether the table exists, slot → (size, tag).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) created: bool,
    pub(crate) table: bool,
    pub(crate) slots: BTreeMap<u64, (u64, u64)>,
}

impl State {
    pub(crate) fn apply(&mut self, op: &AllocOp) {
        match *op {
            AllocOp::Create => self.created = true,
            AllocOp::Table => self.table = true,
            AllocOp::Alloc { slot, size, tag } => {
                self.slots.insert(slot, (size, tag));
            }
            AllocOp::Free { slot } | AllocOp::Clear { slot } => {
                self.slots.remove(&slot);
            }
            AllocOp::Copy { from, to } => {
                if let Some(&b) = self.slots.get(&from) {
                    self.slots.insert(to, b);
                }
            }
        }
    }
}

/// What recovery found.
#[derive(Debug)]
pub enum Recovered {
    /// No allocator (the pool or the allocator's creation did not finish).
    None(String),
    /// The allocator opened and checked: the table pointer, each slot's block (and its stamp
    /// word), and whether the allocated blocks are exactly the reachable ones.
    Alloc {
        /// The root points at a table marked ready (a table allocated but not yet initialized
        /// counts as reachable for the leak check, but not as a table).
        table: bool,
        /// Slot → stamp word of its block.
        slots: BTreeMap<u64, u64>,
        /// A leak or a stray block, if any.
        leak: Option<String>,
    },
}

/// The target.
#[derive(Debug, Default)]
pub struct AllocSmall;

pub(crate) fn slot_loc(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

/// The allocator's disarm after a replay inside recovery, as the allocator targets name it
/// benign: replaying a committed item is idempotent, so an item left armed by a lost disarm is
/// replayed again, with the same words, by the next recovery. Only operations after recovery
/// (which the tester does not run yet) could expose its loss.
pub(crate) const REPLAY_DISARM: (&str, &str) = (
    "#P-ALLOC-3 [recovery only]",
    "the disarm after a replay in recovery: replaying a committed item is idempotent, so an item left armed by a lost disarm is replayed again, with the same words, by the next recovery; only operations after recovery (which this target does not run) could expose it",
);

/// P-ALLOC-7 in a single-threaded workload: the synchronous disarm of a shared transaction
/// protects it from *another* thread's later change of the shared words while this thread's
/// disarm is still pending; with one thread, its own next fence comes first.
pub(crate) const SINGLE_THREAD_SYNC_DISARM: (&str, &str) = (
    "#P-ALLOC-7",
    "one thread: the synchronous disarm of a shared transaction guards against another thread changing the shared words before this thread's next fence; a single thread's next fence always comes first (alloc-threads detects it)",
);

/// P-ALLOC-9 in a single-threaded workload: the slot's `committed` supersedes a journal whose
/// disarm is still pending in *another* thread; with one thread every older journal is
/// already disarmed or overwritten.
pub(crate) const SINGLE_THREAD_COMMITTED: (&str, &str) = (
    "#P-ALLOC-9",
    "one thread: the slot's durable `committed` supersedes an armed journal of another thread whose disarm is still pending; with one thread the older journal is always overwritten or disarmed first (alloc-threads detects it)",
);

impl Target for AllocSmall {
    type Op = AllocOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "alloc-small"
    }
    fn summary(&self) -> &'static str {
        "PAllocator small allocator on a sim pool set: allocations into a pointer table, frees, page and segment moves"
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-ALLOC-1", "P-ALLOC-2", "P-ALLOC-3", "P-ALLOC-4", "P-ALLOC-5", "P-PM-8", "P-PM-9"]
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[REPLAY_DISARM, SINGLE_THREAD_SYNC_DISARM, SINGLE_THREAD_COMMITTED]
    }

    fn workload(&self, ctx: &mut Ctx<AllocOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let set = ctx.create_pool_set(&opts())?;
        let t = ctx.begin(AllocOp::Create);
        // One slot for the whole run (not the slot of whatever CPU the thread is on), so that a
        // run is reproducible from its seed.
        PAllocator::bind_thread_to_slot(0);
        let a = PAllocator::create(Arc::new(set), 2).map_err(e)?;
        ctx.done(t);
        let t = ctx.begin(AllocOp::Table);
        let table = a.allocate(TABLE, a.root_location()).map_err(e)?;
        let set = a.pool();
        let g = set.resolve_range(table, TABLE).map_err(pe)?;
        // The application's own protocol: a fresh block holds whatever its last owner left,
        // so the slots (16-byte persistent pointers, slot 0 reserved) are made null and
        // durable first, and only then does word 0 say the table is ready.
        for i in 1..SLOTS {
            set.store_u64(g + i * 16, u64::MAX, Ordering::Relaxed).map_err(pe)?;
        }
        set.persist(g, TABLE).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        set.store_u64(g, READY, Ordering::Release).map_err(pe)?;
        set.persist(g, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        ctx.done(t);
        let mut held = vec![false; SLOTS as usize];
        for step in 0..OPS {
            let i = 1 + ctx.rng().next_u64() % 48;
            let op = if held[i as usize] {
                AllocOp::Free { slot: i }
            } else {
                let r = ctx.rng().next_u64();
                let size = match r % 16 {
                    0 => 8192 + r % 7000,
                    1..=4 => 1 + r % 8192,
                    _ => 1 + r % 700,
                };
                AllocOp::Alloc { slot: i, size, tag: step + 1 }
            };
            let tok = ctx.begin(op);
            match op {
                AllocOp::Alloc { slot, size, tag } => {
                    let p = a.allocate(size, slot_loc(table, slot)).map_err(e)?;
                    let b = set.resolve_range(p, size.max(8)).map_err(pe)?;
                    set.store_u64(b, tag, Ordering::Relaxed).map_err(pe)?;
                    set.persist(b, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                }
                AllocOp::Free { slot } => a.deallocate(slot_loc(table, slot)).map_err(e)?,
                _ => {}
            }
            ctx.done(tok);
            held[i as usize] = matches!(op, AllocOp::Alloc { .. });
            // Now and then the free segments go back to the file system (the pool set removes
            // their files): the blocks and the model do not change.
            if step % 50 == 49 {
                a.release_free_segments(0).map_err(e)?;
            }
            // Every third allocation moves to an empty slot (copy, then clear the original).
            let free_slot = (1..=48).map(|k| 1 + (i - 1 + k) % 48).find(|&j| !held[j as usize]);
            if let (AllocOp::Alloc { .. }, 0, Some(j)) = (op, step % 3, free_slot) {
                let from = set.resolve(slot_loc(table, i)).map_err(pe)?;
                let to = set.resolve(slot_loc(table, j)).map_err(pe)?;
                let tok = ctx.begin(AllocOp::Copy { from: i, to: j });
                let p = set.load_pptr(from).map_err(pe)?;
                set.persist_pptr(to, p).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                ctx.done(tok);
                let tok = ctx.begin(AllocOp::Clear { slot: i });
                set.persist_pptr_null(from).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                ctx.done(tok);
                held[i as usize] = false;
                held[j as usize] = true;
            }
        }
        a.check().map_err(e)?;
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        recover_table(image, |_| {})
    }

    fn check(&self, r: &Recovered, m: &ModelView<AllocOp>) -> Result<(), String> {
        let mut without = State::default();
        for op in &m.committed {
            without.apply(op);
        }
        let mut with = without.clone();
        for op in &m.in_flight {
            with.apply(op);
        }
        let (table, slots, leak) = match r {
            Recovered::None(why) if !without.created => {
                let _ = why;
                return Ok(());
            }
            Recovered::None(why) => {
                return Err(format!(
                    "the allocator's creation committed, but recovery found: {why}"
                ));
            }
            Recovered::Alloc { table, slots, leak } => (*table, slots, leak),
        };
        if let Some(l) = leak {
            return Err(format!("leak check: {l}"));
        }
        let matches = |st: &State| -> Result<(), String> {
            if table != st.table {
                return Err(format!("root pointer set: {table}, expected {}", st.table));
            }
            let got: Vec<u64> = slots.keys().copied().collect();
            let want: Vec<u64> = st.slots.keys().copied().collect();
            if got != want {
                return Err(format!("slots holding blocks {got:?}, expected {want:?}"));
            }
            Ok(())
        };
        matches(&without).or_else(|e1| {
            matches(&with).map_err(|e2| format!("{e1}; with the in-flight {:?}: {e2}", m.in_flight))
        })?;
        // Committed blocks keep their stamps (an in-flight allocation may not be stamped yet).
        for (slot, &(_, tag)) in &without.slots {
            if let Some(&got) = slots.get(slot) {
                let in_flight_here = m.in_flight.iter().any(|op| matches!(op, AllocOp::Alloc { slot: s, .. } | AllocOp::Free { slot: s } | AllocOp::Clear { slot: s } | AllocOp::Copy { to: s, .. } if s == slot));
                if got != tag && !in_flight_here {
                    return Err(format!(
                        "slot {slot}'s block holds {got:#x}, its stamp was {tag:#x}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Opens the image's pool set and allocator (recovery), checks the allocator and reads the
/// pointer table: what both allocator targets compare with their models.
/// `inspect` sees the pool set before the allocator recovers it.
pub(crate) fn recover_table(
    image: &CrashImage,
    inspect: impl FnOnce(&PoolSet),
) -> Result<Recovered, String> {
    let set = match PoolSet::open_sim(image, &opts()) {
        Ok(s) => s,
        Err(ferrite_pmem::Error::Incomplete { .. }) => {
            return Ok(Recovered::None("no pool".into()));
        }
        Err(x) => return Err(format!("the pool set does not open: {x}")),
    };
    inspect(&set);
    let a = match PAllocator::open(Arc::new(set)) {
        Ok(a) => a,
        Err(Error::Corrupted { what, .. }) if what.contains("creation did not finish") => {
            return Ok(Recovered::None(what));
        }
        Err(x) => return Err(format!("the allocator does not open: {x}")),
    };
    let report = a.check().map_err(|x| format!("allocator check after recovery: {x}"))?;
    let s = a.pool();
    let root = s.resolve(a.root_location()).map_err(|x| x.to_string())?;
    let table = s.load_pptr(root).map_err(|x| x.to_string())?;
    let mut slots = BTreeMap::new();
    let mut reachable = Vec::new();
    let mut ready = false;
    if !table.is_null() {
        reachable.push(table);
        let g = s
            .resolve_range(table, TABLE)
            .map_err(|x| format!("the root points outside the pool: {x}"))?;
        ready = s.load_u64(g, Ordering::Acquire).map_err(|x| x.to_string())? == READY;
    }
    if ready {
        let g = s.resolve_range(table, TABLE).map_err(|x| x.to_string())?;
        for i in 1..SLOTS {
            let p = s.load_pptr(g + i * 16).map_err(|x| x.to_string())?;
            if !p.is_null() {
                let b = s
                    .resolve_range(p, 8)
                    .map_err(|x| format!("slot {i} points outside the pool: {x}"))?;
                slots.insert(i, s.load_u64(b, Ordering::Acquire).map_err(|x| x.to_string())?);
                reachable.push(p);
            }
        }
    }
    let mut allocated = report.allocated.clone();
    allocated.sort_by_key(|p| (p.segment, p.offset));
    reachable.sort_by_key(|p| (p.segment, p.offset));
    // During a move a block is reachable from two slots.
    reachable.dedup();
    let leak = (allocated != reachable).then(|| {
        let stray: Vec<_> = allocated.iter().filter(|p| !reachable.contains(p)).take(3).collect();
        let lost: Vec<_> = reachable.iter().filter(|p| !allocated.contains(p)).take(3).collect();
        format!(
            "{} blocks allocated, {} reachable; allocated but unreachable (leaked) {stray:?}; reachable but free {lost:?}",
            allocated.len(),
            reachable.len()
        )
    });
    Ok(Recovered::Alloc { table: ready, slots, leak })
}
