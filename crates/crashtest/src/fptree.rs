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

use ferrite::alloc::{PAllocator, class_of, page_geometry};
use ferrite::fptree::{FPTree, LEAF_SIZE, ROOT_SIZE};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, PPtr};

use crate::fptree_common::{
    ROOT_SLOT, check_absent, check_model, churn, create_table, final_leak_check, finished, garbage,
    open_or_finish, open_table, shuffle, slot,
};
pub(crate) use crate::fptree_common::{Space, leak_check};
use crate::target::{Ctx, ModelOp, ModelView, Target};

/// Header page + three 64 KiB pages: the table's class, the root's class, the leaves' class.
pub(crate) const SEG: u64 = 3 * 64 * 1024 + 64 * 1024 + 4096;
/// The table's slot of the tree's root (slots 2.. ballast, see `fptree_common`).
pub(crate) const TREE_SLOT: u64 = ROOT_SLOT;
const OPS: u64 = 400;
const KEYS: u64 = 240;
/// Leaves' worth of blocks left free before the out-of-space phase.
const SPARE: u64 = 2;
pub(crate) const READY: u64 = 0x5245_4144_595f_5442;

pub(crate) fn opts() -> Options {
    crate::fptree_common::opts("crashtest-fptree", SEG)
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

impl Space {
    /// Free leaf-sized blocks (the leaves' class has exactly one page).
    pub(crate) fn free_leaves(&self, t: &FPTree) -> u64 {
        self.free(t.leaves())
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
        crate::fptree_common::SINGLE_THREAD_BENIGN
    }

    fn workload(&self, ctx: &mut Ctx<TreeOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let tok = ctx.begin(TreeOp::Setup);
        let (a, table) = create_table(ctx, &opts(), SEG, READY)?;
        // Durable garbage in the blocks the tree will get first (the allocator reuses the most
        // recently freed block of a class).
        for (i, size) in [(2, ROOT_SIZE), (3, LEAF_SIZE)] {
            garbage(&a, table, i, size)?;
            a.deallocate(slot(table, i)).map_err(e)?;
        }
        ctx.done(tok);

        let tok = ctx.begin(TreeOp::Create);
        let mut t = FPTree::create(a.clone(), slot(table, TREE_SLOT)).map_err(e)?;
        ctx.done(tok);
        tree_workload(ctx, &a, table, &mut t)
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        let o = match open_table(image, &opts(), READY)? {
            Ok(o) => o,
            Err(why) => return Ok(Recovered::NoTree(why)),
        };
        let (a, tree_slot) = (&o.a, slot(o.table, TREE_SLOT));
        let (t, unfinished) = open_or_finish(
            o.root,
            "no root header",
            || FPTree::open(a.clone(), tree_slot),
            || FPTree::create(a.clone(), tree_slot),
        )?;
        t.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        let mut owned = o.owned;
        owned.extend(t.blocks());
        leak_check(a, owned)?;
        let pairs = t.range(0, u64::MAX, usize::MAX).map_err(|x| x.to_string())?;
        Ok(match finished(unfinished, "a tree", pairs)? {
            Some(pairs) => Recovered::Tree(pairs),
            None => Recovered::NoTree("the tree's creation had not finished".into()),
        })
    }

    fn check(&self, r: &Recovered, m: &ModelView<TreeOp>) -> Result<(), String> {
        match r {
            Recovered::NoTree(why) => check_absent(m, &TreeOp::Create, "tree", why),
            Recovered::Tree(pairs) => {
                let got: BTreeMap<u64, u64> = pairs.iter().copied().collect();
                check_model(&got, m, TreeOp::apply, |k| *k, ("tree", "pairs"))
            }
        }
    }
}

/// The workload of `fptree-fixed` and `fptree-persistent` after the tree's creation.
///
/// Every key once in a seeded order (splits everywhere), seeded churn, then contiguous ranges
/// deleted so that the head, a middle and the last leaves empty out and are deleted, more
/// churn, and finally all but a few keys deleted; then ballast, splits without space, deletes
/// and inserts that fit again; the tree's check and the leak check at the end.
pub(crate) fn tree_workload(
    ctx: &mut Ctx<TreeOp>,
    a: &PAllocator,
    table: PPtr,
    t: &mut FPTree,
) -> Result<(), String> {
    let e = |e: Error| e.to_string();
    let class = class_of(LEAF_SIZE).ok_or("no class for a leaf")?;
    let mut sp = Space { capacity: page_geometry(class).0, ballast: 0 };

    let mut keys: Vec<u64> = (0..KEYS).collect();
    shuffle(ctx.rng(), &mut keys);
    let mut ops: Vec<TreeOp> = keys.iter().map(|&k| TreeOp::Insert(k, k + 1)).collect();
    let kinds: [fn(u64, u64) -> TreeOp; 3] = [
        |k, i| TreeOp::Insert(k, 1000 + i),
        |k, i| TreeOp::Update(k, 2000 + i),
        |k, _| TreeOp::Delete(k),
    ];
    churn(ctx.rng(), OPS / 4, KEYS, &kinds, &mut ops);
    for range in [0..40, 100..140, KEYS - 40..KEYS] {
        ops.extend(range.map(TreeOp::Delete));
    }
    churn(ctx.rng(), OPS / 4, KEYS, &kinds, &mut ops);
    ops.extend((0..KEYS).filter(|k| k % 50 != 7).map(TreeOp::Delete));
    for op in ops {
        FptreeFixed::modify(ctx, t, &sp, op)?;
    }

    // Ballast: leave only SPARE leaves' worth of free blocks.
    sp.fill(ctx, a, table, LEAF_SIZE, |sp| Ok(sp.free_leaves(t) > SPARE), TreeOp::Ballast)?;
    // Ascending keys until a split finds no leaf (predicted: recorded as no-ops), an update
    // of the full last leaf, then deletes that free leaves, and inserts that fit again.
    let mut k = KEYS;
    let mut failed = 0;
    while failed == 0 {
        let full = t.needs_split(k).map_err(e)? && sp.free_leaves(t) == 0;
        FptreeFixed::modify(ctx, t, &sp, TreeOp::Insert(k, k + 1))?;
        if full {
            failed = k;
            FptreeFixed::modify(ctx, t, &sp, TreeOp::Update(k - 1, 5))?;
        }
        k += 1;
    }
    for d in (failed - 40..failed).rev() {
        FptreeFixed::modify(ctx, t, &sp, TreeOp::Delete(d))?;
    }
    for n in failed..failed + 40 {
        FptreeFixed::modify(ctx, t, &sp, TreeOp::Insert(n, n + 1))?;
    }
    t.check().map_err(e)?;
    final_leak_check(a, table, sp.ballast, t.blocks())
}
