//! Pieces shared by the FPTree crash targets (`fptree-fixed`, `fptree-var`, `fptree-pindex`,
//! `fptree-persistent`): plain functions and small types, no framework. Each target keeps its
//! own workload order, model and checks; these only hold the code they had written out alike.
//!
//! # Invariants
//! - Every target here lives on a simulated pool set of segment 0 ([`SEG0`]: the header page
//!   and the allocator's anchor) plus one segment of the target's size, with a table of
//!   persistent pointers ([`TABLE`] bytes) in the anchor's root: slot 1 holds the structure's
//!   root, slots 2.. hold recycled-garbage blocks during setup and ballast afterwards, the
//!   last word ([`READY_AT`]) says the table is ready once its nulls are durable.
//! - A helper changes nothing of a target's behaviour: the same persistence calls in the same
//!   order, the same random draws (so the same crash points, images and seeds).
//! - The persist sites of the shared setup are keyed by this file's lines; the targets excuse
//!   the garbage fill by [`GARBAGE_FILL`].
//!
//! # Ordering
//! Setup persists the table's nulls before its ready word, and each garbage block before it is
//! freed (rule P-APP-1: workload data durable before it counts as done or is published).
//!
//! # Concurrency
//! None: the helpers run on the workload's thread or on the tester's recovery thread.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, PPtr, PoolSet, SplitMix64};

use crate::target::{Ctx, ModelOp, ModelView};

/// Segment 0 holds only the anchor: it is created small (the allocator records the target's
/// segment size for the segments it adds), which keeps crash images small.
pub(crate) const SEG0: u64 = 4096 + 8192;
/// Table of persistent pointers: slot 1 = the structure's root, slots 2..[`SLOTS`] garbage
/// and ballast, the last word = the target's ready mark (in a line of its own: no later
/// persist writes it back by accident).
pub(crate) const TABLE: u64 = 2048;
pub(crate) const SLOTS: u64 = TABLE / 16 - 1;
pub(crate) const READY_AT: u64 = TABLE - 8;
/// The table slot of the tree's (or the index's) root.
pub(crate) const ROOT_SLOT: u64 = 1;

/// The excuse for the workload's own garbage fill (its persist is in [`garbage`]).
pub(crate) const GARBAGE_FILL: (&str, &str) = (
    "crates/crashtest/src/fptree_common.rs:",
    "the workload's own durable garbage in recycled blocks: without its persist the blocks are zeroed, which only makes the test weaker",
);

/// The sites every single-threaded FPTree target explains the same way: the workload's
/// garbage fill and the allocator's sites that only a second thread or a later operation
/// could expose.
pub(crate) const SINGLE_THREAD_BENIGN: &[(&str, &str)] = &[
    GARBAGE_FILL,
    crate::alloc::REPLAY_DISARM,
    crate::alloc::SINGLE_THREAD_SYNC_DISARM,
    crate::alloc::SINGLE_THREAD_COMMITTED,
];

/// The options of a target's pool set: segment 0 of [`SEG0`], room for one `seg` more.
pub(crate) fn opts(layout: &str, seg: u64) -> Options {
    Options::default().layout(layout).segment_size(SEG0).max_pool_size(SEG0 + seg)
}

/// Table slot `i`.
pub(crate) fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

/// Shuffles `v` in place from `rng` (Fisher–Yates, last element first).
pub(crate) fn shuffle<T>(rng: &mut SplitMix64, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
}

/// Appends `n` seeded operations on keys below `keys`: for each, a key, then a kind drawn
/// among `kinds` (each called with the key and the operation's index).
pub(crate) fn churn<Op>(
    rng: &mut SplitMix64,
    n: u64,
    keys: u64,
    kinds: &[fn(u64, u64) -> Op],
    ops: &mut Vec<Op>,
) {
    for i in 0..n {
        let k = rng.next_u64() % keys;
        ops.push(kinds[(rng.next_u64() % kinds.len() as u64) as usize](k, i));
    }
}

/// Setup's first half: creates the pool set (`opts`, growing by `seg`), the allocator and the
/// table in the anchor's root; nulls every slot durably, then marks the table `ready`.
pub(crate) fn create_table<Op: ModelOp>(
    ctx: &Ctx<Op>,
    opts: &Options,
    seg: u64,
    ready: u64,
) -> Result<(Arc<PAllocator>, PPtr), String> {
    let e = |e: Error| e.to_string();
    let pe = |e: ferrite_pmem::Error| e.to_string();
    let set = ctx.create_pool_set(opts)?;
    set.set_segment_size(seg);
    let a = Arc::new(PAllocator::create(Arc::new(set), 1).map_err(e)?);
    let table = a.allocate(TABLE, a.root_location()).map_err(e)?;
    let set = a.pool().clone();
    let g = set.resolve_range(table, TABLE).map_err(pe)?;
    // A fresh block holds whatever its last owner left: null every slot durably, then say
    // the table is ready.
    for i in 1..SLOTS {
        set.store_u64(g + i * 16, PPtr::NULL.segment, Ordering::Relaxed).map_err(pe)?;
    }
    set.persist(g, TABLE).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
    set.store_u64(g + READY_AT, ready, Ordering::Release).map_err(pe)?;
    set.persist(g + READY_AT, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
    Ok((a, table))
}

/// Allocates a `size`-byte block into table slot `i` and fills it with durable garbage
/// (0xA5…), for the caller to free: the allocator reuses the most recently freed block of a
/// class, so the structure's first blocks hold their previous owner's bytes.
pub(crate) fn garbage(a: &PAllocator, table: PPtr, i: u64, size: u64) -> Result<(), String> {
    let pe = |e: ferrite_pmem::Error| e.to_string();
    let set = a.pool();
    let b = a.allocate(size, slot(table, i)).map_err(|e| e.to_string())?;
    let bg = set.resolve_range(b, size).map_err(pe)?;
    set.fill(bg, size, 0xA5).map_err(pe)?;
    set.persist(bg, size).map_err(pe) // ORDER(P-APP-1): workload data durable before it counts as done or is published
}

/// The workload's count of blocks of the class the out-of-space phase exhausts (that class
/// has exactly one page), for the prediction of `PoolFull`.
#[derive(Debug)]
pub(crate) struct Space {
    /// Blocks one page holds.
    pub(crate) capacity: u64,
    /// Ballast blocks allocated (in table slots 2..2 + `ballast`).
    pub(crate) ballast: u64,
}

impl Space {
    /// Free blocks when the structure uses `used` of them.
    pub(crate) fn free(&self, used: u64) -> u64 {
        self.capacity.saturating_sub(self.ballast + used)
    }

    /// Allocates `size`-byte ballast blocks into the next table slots, one operation
    /// `op(slot)` each, while `more` says another one is wanted.
    pub(crate) fn fill<Op: ModelOp>(
        &mut self,
        ctx: &Ctx<Op>,
        a: &PAllocator,
        table: PPtr,
        size: u64,
        mut more: impl FnMut(&Space) -> Result<bool, String>,
        op: impl Fn(u64) -> Op,
    ) -> Result<(), String> {
        while more(self)? {
            let i = 2 + self.ballast;
            if i >= SLOTS {
                return Err("the table has no slot left for ballast".into());
            }
            let tok = ctx.begin(op(i));
            a.allocate(size, slot(table, i)).map_err(|e| e.to_string())?;
            ctx.done(tok);
            self.ballast += 1;
        }
        Ok(())
    }
}

/// The workload's final leak check: the allocated blocks are exactly the structure's
/// `blocks`, the table and the first `ballast` ballast blocks.
pub(crate) fn final_leak_check(
    a: &PAllocator,
    table: PPtr,
    ballast: u64,
    mut owned: Vec<PPtr>,
) -> Result<(), String> {
    let set = a.pool();
    owned.push(table);
    owned.extend(
        (2..2 + ballast)
            .map(|i| slot(table, i))
            .filter_map(|s| set.resolve(s).ok().and_then(|g| set.load_pptr(g).ok())),
    );
    leak_check(a, owned)
}

/// T6: the allocator's allocated blocks are exactly `owned` (nothing leaked, nothing reachable
/// is free).
pub(crate) fn leak_check(a: &PAllocator, mut owned: Vec<PPtr>) -> Result<(), String> {
    let mut allocated = a.check().map_err(|x| format!("allocator check: {x}"))?.allocated;
    allocated.sort_by_key(|p| (p.segment, p.offset));
    owned.sort_by_key(|p| (p.segment, p.offset));
    if allocated == owned {
        return Ok(());
    }
    let stray: Vec<_> = allocated.iter().filter(|p| !owned.contains(p)).take(3).collect();
    let lost: Vec<_> = owned.iter().filter(|p| !allocated.contains(p)).take(3).collect();
    Err(format!(
        "leak check: {} blocks allocated, {} owned; allocated but unreachable (leaked) {stray:?}; reachable but free {lost:?}",
        allocated.len(),
        owned.len()
    ))
}

/// A recovered table: the allocator, the table, the blocks it owns so far (the table and
/// every non-null slot from 2 on) and the root slot's content.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) a: Arc<PAllocator>,
    pub(crate) table: PPtr,
    pub(crate) owned: Vec<PPtr>,
    pub(crate) root: PPtr,
}

/// Recovery's first half: opens the image's pool set, recovers the allocator, reads the table.
/// `Ok(Err(why))` when there is no structure yet because the pool set, the allocator or the
/// table is unfinished (the allocator then passes the leak check with what exists).
pub(crate) fn open_table(
    image: &CrashImage,
    opts: &Options,
    ready: u64,
) -> Result<Result<Opened, String>, String> {
    let set = match PoolSet::open_sim(image, opts) {
        Ok(s) => s,
        Err(ferrite_pmem::Error::Incomplete { .. }) => return Ok(Err("no pool set".into())),
        Err(x) => return Err(format!("the pool set does not open: {x}")),
    };
    let a = match PAllocator::open(Arc::new(set)) {
        Ok(a) => Arc::new(a),
        Err(Error::Corrupted { what, .. }) if what.contains("creation did not finish") => {
            return Ok(Err(what));
        }
        Err(x) => return Err(format!("the allocator does not open: {x}")),
    };
    a.check().map_err(|x| format!("allocator check after recovery: {x}"))?;
    let s = a.pool().clone();
    let pe = |x: ferrite_pmem::Error| x.to_string();
    let table = s.load_pptr(s.resolve(a.root_location()).map_err(pe)?).map_err(pe)?;
    let mut owned = Vec::new();
    if table.is_null() {
        leak_check(&a, owned)?;
        return Ok(Err("no table".into()));
    }
    owned.push(table);
    let g = s
        .resolve_range(table, TABLE)
        .map_err(|x| format!("the root points outside the pool: {x}"))?;
    if s.load_u64(g + READY_AT, Ordering::Acquire).map_err(pe)? != ready {
        leak_check(&a, owned)?;
        return Ok(Err("table not ready".into()));
    }
    // The garbage blocks' slots hold a block only while setup runs; ballast stays.
    for i in 2..SLOTS {
        let p = s.load_pptr(g + i * 16).map_err(pe)?;
        if !p.is_null() {
            owned.push(p);
        }
    }
    let root = s.load_pptr(g + ROOT_SLOT * 16).map_err(pe)?;
    Ok(Ok(Opened { a, table, owned, root }))
}

/// Opens the structure whose root slot holds `root`, or finishes its creation with `create`
/// when the root was never allocated or `open` finds no header (its error starts with
/// `no_header`). Returns the structure and whether its creation had to be finished.
pub(crate) fn open_or_finish<T>(
    root: PPtr,
    no_header: &str,
    open: impl FnOnce() -> Result<T, Error>,
    create: impl FnOnce() -> Result<T, Error>,
) -> Result<(T, bool), String> {
    if !root.is_null() {
        match open() {
            Ok(t) => return Ok((t, false)),
            Err(Error::Corrupted { what, .. }) if what.starts_with(no_header) => {}
            Err(x) => return Err(format!("open: {x}")),
        }
    }
    // The creation had not allocated its root, or had not written its header: finish it here
    // (recovery may create), so that crashes inside `create` are explored too.
    create().map(|t| (t, true)).map_err(|x| format!("finishing the creation: {x}"))
}

/// After recovery: `None` if the structure's creation had to be finished (then it must be
/// empty), else its recovered `items`. `what` names it in the error ("a tree").
pub(crate) fn finished<P: Debug>(
    unfinished: bool,
    what: &str,
    items: Vec<P>,
) -> Result<Option<Vec<P>>, String> {
    if !unfinished {
        return Ok(Some(items));
    }
    if !items.is_empty() {
        return Err(format!("{what} whose creation was finished holds {items:?}"));
    }
    Ok(None)
}

/// The check when recovery found no structure: fine unless its creation (`create`) committed.
/// `noun` names the structure ("tree").
pub(crate) fn check_absent<Op: PartialEq>(
    m: &ModelView<Op>,
    create: &Op,
    noun: &str,
    why: &str,
) -> Result<(), String> {
    if !m.committed.contains(create) {
        return Ok(());
    }
    Err(format!(
        "expected {} committed operations (the {noun}'s creation committed), found no {noun}: {why}",
        m.committed.len()
    ))
}

/// The state the committed operations of `m` leave, applied in order (`apply`).
fn committed_state<Op, K: Ord, V>(
    m: &ModelView<Op>,
    apply: &impl Fn(&Op, &mut BTreeMap<K, V>),
) -> BTreeMap<K, V> {
    let mut state = BTreeMap::new();
    for op in &m.committed {
        apply(op, &mut state);
    }
    state
}

/// The model check of targets with several workload threads, each operation on one key
/// (`key_of`; `None`: no key, e.g. creation) and at most one in flight per key (the threads'
/// keys are disjoint): per key, `got` holds the committed operations' value (`apply`), or
/// that with the one in-flight operation on the key applied. With at most one operation in
/// flight it is [`check_model`]'s all-or-nothing, per key.
pub(crate) fn check_model_per_key<
    Op: Debug,
    K: Ord + Clone + Debug,
    V: Clone + PartialEq + Debug,
>(
    got: &BTreeMap<K, V>,
    m: &ModelView<Op>,
    apply: impl Fn(&Op, &mut BTreeMap<K, V>),
    key_of: impl Fn(&Op) -> Option<K>,
) -> Result<(), String> {
    let without = committed_state(m, &apply);
    let keys: BTreeSet<K> = without
        .keys()
        .chain(got.keys())
        .cloned()
        .chain(m.in_flight.iter().filter_map(&key_of))
        .collect();
    for k in keys {
        let want = without.get(&k).cloned();
        let flight: Vec<&Op> =
            m.in_flight.iter().filter(|op| key_of(op) == Some(k.clone())).collect();
        if flight.len() > 1 {
            return Err(format!("key {k:?}: two operations in flight {flight:?}"));
        }
        let with = flight.first().map(|op| {
            let mut w = without.clone();
            apply(op, &mut w);
            w.get(&k).cloned()
        });
        let have = got.get(&k).cloned();
        if have != want && Some(&have) != with.as_ref() {
            return Err(format!(
                "key {k:?}: holds {have:?}, expected {want:?} (committed) or {with:?} (with the in-flight {flight:?})"
            ));
        }
    }
    Ok(())
}

/// The model check: `got` equals the committed operations applied in order (`apply`), or
/// those and the in-flight ones. On a mismatch, the error shows up to four differing entries
/// each way with their keys through `show`; `noun` and `unit` name the structure and its
/// entries ("tree", "pairs").
pub(crate) fn check_model<Op: Debug, K: Ord + Clone, V: Clone + PartialEq + Debug, D: Debug>(
    got: &BTreeMap<K, V>,
    m: &ModelView<Op>,
    apply: impl Fn(&Op, &mut BTreeMap<K, V>),
    show: impl Fn(&K) -> D,
    (noun, unit): (&str, &str),
) -> Result<(), String> {
    let without = committed_state(m, &apply);
    if *got == without {
        return Ok(());
    }
    let mut with = without.clone();
    for op in &m.in_flight {
        apply(op, &mut with);
    }
    if *got == with {
        return Ok(());
    }
    let diff = |a: &BTreeMap<K, V>| -> String {
        let missing: Vec<_> = a
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .take(4)
            .map(|(k, v)| (show(k), v))
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(k, v)| a.get(*k) != Some(v))
            .take(4)
            .map(|(k, v)| (show(k), v))
            .collect();
        format!("missing or different {missing:?}, unexpected {extra:?}")
    };
    Err(format!(
        "the {noun} holds {} {unit}; expected the {} committed operations ({} {unit}: {}) or with the in-flight {:?} ({} {unit}: {})",
        got.len(),
        m.committed.len(),
        without.len(),
        diff(&without),
        m.in_flight,
        with.len(),
        diff(&with)
    ))
}
