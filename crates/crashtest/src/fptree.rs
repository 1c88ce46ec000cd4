//! Crash target `fptree-fixed`: the single-threaded FPTree with fixed-size keys on PAllocator,
//! on a simulated pool set ([D1], [S1]).
//!
//! The pool set cannot grow past two segments (its reservation holds exactly two): segment 0
//! (12 KiB: the pool set's header page and the allocator's anchor, 6 784 B for one slot) and one small segment with one page per size class the workload
//! uses — the table of pointers, the tree's root, the leaves. The workload:
//! 1. `setup`: creates the allocator, allocates a table of persistent pointers into the
//!    anchor's root (slot 1 will hold the tree's root; slots 2.. are ballast), nulls it and
//!    marks it ready (its last word, persisted after the nulls); then allocates a root-sized and a leaf-sized block, fills them with
//!    durable garbage and frees them, so that the tree's root and first leaf are blocks that
//!    hold their previous owner's bytes (creation must not rely on zeroed memory);
//! 2. `create`: creates the tree into slot 1;
//! 3. inserts every key once in a seeded order (splits everywhere), seeded churn, contiguous
//!    ranges deleted so that the head, a middle and the last leaves empty out and are deleted,
//!    more churn, then all but a few keys deleted;
//! 4. `ballast`: allocates leaf-sized blocks into table slots until only two leaves' worth of
//!    blocks remain free;
//! 5. inserts ascending keys until a split finds no leaf: that insert, and an update that
//!    needs a split, fail with `PoolFull` (`nospace` in the model: no effect); then deletes
//!    free leaves and inserts succeed again.
//!
//! Recovery opens the image, recovers the allocator (replaying its redo items), then the tree
//! (micro-logs, inner-node rebuild); a tree whose creation had not finished is finished (by
//! `open`, or by `create` when the root never got its header). The check requires: the tree's
//! integrity check passes (T1–T5); the allocator's check passes and its allocated blocks are
//! exactly the table, the ballast and the tree's blocks (T6: nothing leaked, nothing reachable
//! is free); and the contents equal the committed operations applied in order, with the
//! in-flight operation either fully applied or not at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{PAllocator, class_of, page_geometry};
use ferrite::fptree::{FPTree, LEAF_SIZE, ROOT_SIZE};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, PPtr, PoolSet};

use crate::target::{Ctx, ModelOp, ModelView, Target};

/// Header page + three 64 KiB pages: the table's class, the root's class, the leaves' class.
pub(crate) const SEG: u64 = 3 * 64 * 1024 + 64 * 1024 + 4096;
/// Table of persistent pointers: slot 1 = the tree's root, slots 2..[`SLOTS`] ballast, the
/// last word = [`READY`] (in a line of its own: no later persist writes it back by accident).
pub(crate) const TABLE: u64 = 2048;
pub(crate) const SLOTS: u64 = TABLE / 16 - 1;
pub(crate) const READY_AT: u64 = TABLE - 8;
pub(crate) const TREE_SLOT: u64 = 1;
const OPS: u64 = 400;
const KEYS: u64 = 240;
/// Leaves' worth of blocks left free before the out-of-space phase.
const SPARE: u64 = 2;
pub(crate) const READY: u64 = 0x5245_4144_595f_5442;

/// Segment 0 holds only the anchor: it is created small (the allocator records `SEG` as the
/// size of the segments it adds), which keeps crash images small.
const SEG0: u64 = 4096 + 8192;

pub(crate) fn opts() -> Options {
    Options::default().layout("crashtest-fptree").segment_size(SEG0).max_pool_size(SEG0 + SEG)
}

pub(crate) fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
}

/// One operation of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeOp {
    /// Creating the allocator and the table, and recycling two garbage blocks.
    Setup,
    /// Creating the tree (over recycled garbage).
    Create,
    /// Insert (no overwrite).
    Insert(u64, u64),
    /// Update an existing key.
    Update(u64, u64),
    /// Delete.
    Delete(u64),
    /// A leaf-sized ballast block allocated into table slot `i`.
    Ballast(u64),
    /// An insert or update of this key that needs a split and fails with `PoolFull`: no effect.
    NoSpace(u64),
}

impl TreeOp {
    pub(crate) fn apply(&self, m: &mut BTreeMap<u64, u64>) {
        match *self {
            TreeOp::Insert(k, v) => {
                m.entry(k).or_insert(v);
            }
            TreeOp::Update(k, v) => {
                if let Some(x) = m.get_mut(&k) {
                    *x = v;
                }
            }
            TreeOp::Delete(k) => {
                m.remove(&k);
            }
            TreeOp::Setup | TreeOp::Create | TreeOp::Ballast(_) | TreeOp::NoSpace(_) => {}
        }
    }
}

impl ModelOp for TreeOp {
    fn encode(&self) -> String {
        match self {
            TreeOp::Setup => "setup".to_owned(),
            TreeOp::Create => "create".to_owned(),
            TreeOp::Insert(k, v) => format!("insert {k} {v}"),
            TreeOp::Update(k, v) => format!("update {k} {v}"),
            TreeOp::Delete(k) => format!("delete {k}"),
            TreeOp::Ballast(i) => format!("ballast {i}"),
            TreeOp::NoSpace(k) => format!("nospace {k}"),
        }
    }
    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(' ').collect();
        match f.as_slice() {
            ["insert", k, v] => Some(TreeOp::Insert(k.parse().ok()?, v.parse().ok()?)),
            ["update", k, v] => Some(TreeOp::Update(k.parse().ok()?, v.parse().ok()?)),
            ["delete", k] => Some(TreeOp::Delete(k.parse().ok()?)),
            ["ballast", i] => Some(TreeOp::Ballast(i.parse().ok()?)),
            ["nospace", k] => Some(TreeOp::NoSpace(k.parse().ok()?)),
            ["setup"] => Some(TreeOp::Setup),
            ["create"] => Some(TreeOp::Create),
            _ => None,
        }
    }
}

/// What recovery found.
#[derive(Debug)]
pub enum Recovered {
    /// No tree yet: the pool set, the allocator or the table is unfinished, or the tree's
    /// creation had not finished (recovery finished it, found it empty and leak-free).
    NoTree(String),
    /// The recovered pairs.
    Tree(Vec<(u64, u64)>),
}

/// The target.
#[derive(Debug, Default)]
pub struct FptreeFixed;

/// The workload's view of a table slot's block count, for the out-of-space prediction.
pub(crate) struct Space {
    /// Leaf-sized blocks one page holds (the leaves' class has exactly one page).
    pub(crate) capacity: u64,
    pub(crate) ballast: u64,
}

impl Space {
    pub(crate) fn free_leaves(&self, t: &FPTree) -> u64 {
        self.capacity.saturating_sub(self.ballast + t.leaves())
    }
}

impl FptreeFixed {
    /// Runs `op` on the tree, predicting a `PoolFull` (a split with no free leaf) so that the
    /// model records a no-op for it.
    pub(crate) fn modify(
        ctx: &Ctx<TreeOp>,
        t: &mut FPTree,
        sp: &Space,
        op: TreeOp,
    ) -> Result<(), String> {
        let key = match op {
            TreeOp::Insert(k, _) | TreeOp::Update(k, _) | TreeOp::Delete(k) => k,
            _ => return Err(format!("not a tree modification: {op:?}")),
        };
        let present = t.get(key).map_err(|e| e.to_string())?.is_some();
        let splits = match op {
            TreeOp::Insert(..) => !present && t.needs_split(key).map_err(|e| e.to_string())?,
            TreeOp::Update(..) => present && t.needs_split(key).map_err(|e| e.to_string())?,
            _ => false,
        };
        let full = splits && sp.free_leaves(t) == 0;
        let tok = ctx.begin(if full { TreeOp::NoSpace(key) } else { op });
        let r = match op {
            TreeOp::Insert(k, v) => t.insert(k, v).map(drop),
            TreeOp::Update(k, v) => t.update(k, v).map(drop),
            TreeOp::Delete(k) => t.delete(k).map(drop),
            _ => Ok(()),
        };
        match (r, full) {
            (Ok(()), false) | (Err(Error::PoolFull { .. }), true) => {}
            (r, _) => return Err(format!("{op:?}: {r:?}, predicted no space: {full}")),
        }
        ctx.done(tok);
        Ok(())
    }
}

impl Target for FptreeFixed {
    type Op = TreeOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "fptree-fixed"
    }
    fn summary(&self) -> &'static str {
        "FPTree (single-threaded, fixed keys) on PAllocator: inserts, updates, deletes, splits, leaf deletions, splits without space"
    }
    fn rules(&self) -> &'static [&'static str] {
        &[
            "P-FPT-1",
            "P-FPT-2",
            "P-FPT-3",
            "P-FPT-4",
            "P-FPT-5",
            "P-FPT-6",
            "P-FPT-7",
            "P-FPT-8",
            "P-FPT-9",
            "P-FPT-10",
            "P-FPT-11",
            "P-FPT-13",
            "P-ALLOC-1",
            "P-ALLOC-2",
            "P-ALLOC-3",
            "P-ALLOC-4",
            "P-ALLOC-5",
        ]
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "crates/crashtest/src/fptree.rs:",
                "the workload's own durable garbage in recycled blocks: without its persist the blocks are zeroed, which only makes the test weaker",
            ),
            crate::alloc::REPLAY_DISARM,
            crate::alloc::SINGLE_THREAD_SYNC_DISARM,
            crate::alloc::SINGLE_THREAD_COMMITTED,
        ]
    }

    fn workload(&self, ctx: &mut Ctx<TreeOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let tok = ctx.begin(TreeOp::Setup);
        let set = ctx.create_pool_set(&opts())?;
        set.set_segment_size(SEG);
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
        set.store_u64(g + READY_AT, READY, Ordering::Release).map_err(pe)?;
        set.persist(g + READY_AT, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        // Durable garbage in the blocks the tree will get first (the allocator reuses the most
        // recently freed block of a class).
        for (i, size) in [(2, ROOT_SIZE), (3, LEAF_SIZE)] {
            let b = a.allocate(size, slot(table, i)).map_err(e)?;
            let bg = set.resolve_range(b, size).map_err(pe)?;
            set.fill(bg, size, 0xA5).map_err(pe)?;
            set.persist(bg, size).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
            a.deallocate(slot(table, i)).map_err(e)?;
        }
        ctx.done(tok);

        let tok = ctx.begin(TreeOp::Create);
        let mut t = FPTree::create(a.clone(), slot(table, TREE_SLOT)).map_err(e)?;
        ctx.done(tok);
        let class = class_of(LEAF_SIZE).ok_or("no class for a leaf")?;
        let mut sp = Space { capacity: page_geometry(class).0, ballast: 0 };

        // Every key once in a seeded order (splits everywhere), seeded churn, then contiguous
        // ranges deleted so that the head, a middle and the last leaves empty out and are
        // deleted, more churn, and finally all but a few keys deleted.
        let mut keys: Vec<u64> = (0..KEYS).collect();
        for i in (1..keys.len()).rev() {
            keys.swap(i, (ctx.rng().next_u64() % (i as u64 + 1)) as usize);
        }
        let mut ops: Vec<TreeOp> = keys.iter().map(|&k| TreeOp::Insert(k, k + 1)).collect();
        let churn = |ctx: &mut Ctx<TreeOp>, n: u64, ops: &mut Vec<TreeOp>| {
            for i in 0..n {
                let k = ctx.rng().next_u64() % KEYS;
                ops.push(match ctx.rng().next_u64() % 3 {
                    0 => TreeOp::Insert(k, 1000 + i),
                    1 => TreeOp::Update(k, 2000 + i),
                    _ => TreeOp::Delete(k),
                });
            }
        };
        churn(ctx, OPS / 4, &mut ops);
        for range in [0..40, 100..140, KEYS - 40..KEYS] {
            ops.extend(range.map(TreeOp::Delete));
        }
        churn(ctx, OPS / 4, &mut ops);
        ops.extend((0..KEYS).filter(|k| k % 50 != 7).map(TreeOp::Delete));
        for op in ops {
            Self::modify(ctx, &mut t, &sp, op)?;
        }

        // Ballast: leave only SPARE leaves' worth of free blocks.
        while sp.free_leaves(&t) > SPARE {
            let i = 2 + sp.ballast;
            if i >= SLOTS {
                return Err("the table has no slot left for ballast".into());
            }
            let tok = ctx.begin(TreeOp::Ballast(i));
            a.allocate(LEAF_SIZE, slot(table, i)).map_err(e)?;
            ctx.done(tok);
            sp.ballast += 1;
        }
        // Ascending keys until a split finds no leaf (predicted: recorded as no-ops), an update
        // of the full last leaf, then deletes that free leaves, and inserts that fit again.
        let mut k = KEYS;
        let mut failed = 0;
        while failed == 0 {
            let full = t.needs_split(k).map_err(e)? && sp.free_leaves(&t) == 0;
            Self::modify(ctx, &mut t, &sp, TreeOp::Insert(k, k + 1))?;
            if full {
                failed = k;
                Self::modify(ctx, &mut t, &sp, TreeOp::Update(k - 1, 5))?;
            }
            k += 1;
        }
        for d in (failed - 40..failed).rev() {
            Self::modify(ctx, &mut t, &sp, TreeOp::Delete(d))?;
        }
        for n in failed..failed + 40 {
            Self::modify(ctx, &mut t, &sp, TreeOp::Insert(n, n + 1))?;
        }
        t.check().map_err(e)?;
        let mut owned: Vec<PPtr> = t.blocks();
        owned.push(table);
        owned.extend(
            (2..2 + sp.ballast)
                .map(|i| slot(table, i))
                .filter_map(|s| set.resolve(s).ok().and_then(|g| set.load_pptr(g).ok())),
        );
        leak_check(&a, owned)
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        let set = match PoolSet::open_sim(image, &opts()) {
            Ok(s) => s,
            Err(ferrite_pmem::Error::Incomplete { .. }) => {
                return Ok(Recovered::NoTree("no pool set".into()));
            }
            Err(x) => return Err(format!("the pool set does not open: {x}")),
        };
        let a = match PAllocator::open(Arc::new(set)) {
            Ok(a) => Arc::new(a),
            Err(Error::Corrupted { what, .. }) if what.contains("creation did not finish") => {
                return Ok(Recovered::NoTree(what));
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
            return Ok(Recovered::NoTree("no table".into()));
        }
        owned.push(table);
        let g = s
            .resolve_range(table, TABLE)
            .map_err(|x| format!("the root points outside the pool: {x}"))?;
        if s.load_u64(g + READY_AT, Ordering::Acquire).map_err(pe)? != READY {
            leak_check(&a, owned)?;
            return Ok(Recovered::NoTree("table not ready".into()));
        }
        for i in 2..SLOTS {
            let p = s.load_pptr(g + i * 16).map_err(pe)?;
            if !p.is_null() {
                owned.push(p);
            }
        }
        let tree_slot = slot(table, TREE_SLOT);
        let root = s.load_pptr(g + TREE_SLOT * 16).map_err(pe)?;
        let (t, unfinished) = if root.is_null() {
            // The tree's creation had not allocated its root: finish it here (recovery may
            // create), so that crashes inside `create` are explored too.
            (FPTree::create(a.clone(), tree_slot).map_err(|x| format!("create: {x}"))?, true)
        } else {
            match FPTree::open(a.clone(), tree_slot) {
                Ok(t) => (t, false),
                Err(Error::Corrupted { what, .. }) if what.starts_with("no root header") => (
                    FPTree::create(a.clone(), tree_slot)
                        .map_err(|x| format!("finishing the creation: {x}"))?,
                    true,
                ),
                Err(x) => return Err(x.to_string()),
            }
        };
        t.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        owned.extend(t.blocks());
        leak_check(&a, owned)?;
        let pairs = t.range(0, u64::MAX, usize::MAX).map_err(|x| x.to_string())?;
        if unfinished {
            if !pairs.is_empty() {
                return Err(format!("a tree whose creation was finished holds {pairs:?}"));
            }
            return Ok(Recovered::NoTree("the tree's creation had not finished".into()));
        }
        Ok(Recovered::Tree(pairs))
    }

    fn check(&self, r: &Recovered, m: &ModelView<TreeOp>) -> Result<(), String> {
        let created = m.committed.contains(&TreeOp::Create);
        let pairs = match r {
            Recovered::NoTree(_) if !created => return Ok(()),
            Recovered::NoTree(why) => {
                return Err(format!(
                    "expected {} committed operations (the tree's creation committed), found no tree: {why}",
                    m.committed.len()
                ));
            }
            Recovered::Tree(pairs) => pairs,
        };
        let mut without = BTreeMap::new();
        for op in &m.committed {
            op.apply(&mut without);
        }
        let got: BTreeMap<u64, u64> = pairs.iter().copied().collect();
        if got == without {
            return Ok(());
        }
        let mut with = without.clone();
        for op in &m.in_flight {
            op.apply(&mut with);
        }
        if got == with {
            return Ok(());
        }
        let diff = |a: &BTreeMap<u64, u64>| -> String {
            let missing: Vec<_> = a.iter().filter(|(k, v)| got.get(k) != Some(v)).take(4).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| a.get(k) != Some(v)).take(4).collect();
            format!("missing or different {missing:?}, unexpected {extra:?}")
        };
        Err(format!(
            "the tree holds {} pairs; expected the {} committed operations ({} pairs: {}) or with the in-flight {:?} ({} pairs: {})",
            got.len(),
            m.committed.len(),
            without.len(),
            diff(&without),
            m.in_flight,
            with.len(),
            diff(&with)
        ))
    }
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
