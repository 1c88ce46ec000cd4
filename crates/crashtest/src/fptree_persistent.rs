//! Crash target `fptree-persistent`: the fully persistent FPTree variant (fixed keys, inner
//! index in PM at fan-out 4, so that a few hundred keys make a three-level index) on a
//! simulated pool set ([D2] deliverable 4).
//!
//! The workload is `fptree-fixed`'s (module `fptree`), on a segment with one more page (the
//! index nodes' class; the index root shares the tree root's class) and with one more recycled
//! garbage block per class the index uses (a second root-sized block and a node-sized one), so
//! that neither the index root nor its first node can rely on zeroed memory:
//! setup, creation (tree root, first leaf, index root, first node, head entry, magic), every
//! key inserted in a seeded order (leaf splits with index inserts, node splits and grows),
//! churn, contiguous range deletes (leaf deletions with index removes, node detaches and root
//! shrinks), more churn, nearly everything deleted, ballast, inserts until a split finds no
//! leaf (`PoolFull`, recorded as a no-op: the index room made before it stays invisible),
//! deletes and inserts again.
//!
//! Recovery: the allocator, then `FPTree::open` (the index's logs, then the tree's, which
//! redo the index insert of an armed split and the index remove of an armed leaf deletion), or
//! `create_with` for a creation that never wrote its header. The tree must say it has a
//! persistent index, pass `check()` (T1–T5 with the index cross-checked against the leaf list,
//! plus the index's N1–N4), pass the leak check (allocated = table + ballast + the tree's
//! blocks, which include the index's), and hold the committed operations ± the one in flight
//! (the same model and check as `fptree-fixed`).

use ferrite::fptree::persistent::PNODE_SIZE;
use ferrite::fptree::{FPTree, IndexPlacement, LEAF_SIZE, ROOT_SIZE, TreeOptions};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options};

use crate::fptree::{FptreeFixed, Recovered, TreeOp, leak_check, tree_workload};
use crate::fptree_common::{
    ROOT_SLOT, create_table, finished, garbage, open_or_finish, open_table, slot,
};
use crate::target::{Ctx, ModelView, Target};

/// Header page + four 64 KiB pages: the table's class, the roots' class (tree root and index
/// root), the leaves' class, the index nodes' class.
pub(crate) const SEG: u64 = 4 * 64 * 1024 + 64 * 1024 + 4096;
const TREE_SLOT: u64 = ROOT_SLOT;
pub(crate) const READY: u64 = 0x5245_4144_595f_5450;
/// Index fan-out: the smallest, for a deep index from few leaves.
const FANOUT: u32 = 4;

pub(crate) fn opts() -> Options {
    crate::fptree_common::opts("crashtest-fptree-p", SEG)
}

pub(crate) fn tree_opts() -> TreeOptions {
    TreeOptions { index: IndexPlacement::Persistent, index_fanout: FANOUT }
}

/// The target.
#[derive(Debug, Default)]
pub struct FptreePersistent;

impl Target for FptreePersistent {
    type Op = TreeOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "fptree-persistent"
    }
    fn summary(&self) -> &'static str {
        "FPTree with its inner index in PM (fan-out 4): splits with index inserts and grows, leaf deletions with index detaches and shrinks, splits without space"
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
            "P-FPT-14",
            "P-FPT-15",
            "P-FPT-16",
            "P-FPT-17",
            "P-FPT-18",
            "P-FPT-19",
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
        // Durable garbage in the blocks creation gets first: the tree root and the index root
        // (one class), the first leaf, the first index node. All are allocated before any is
        // freed, so that they are distinct blocks.
        let garbage_blocks = [(2, ROOT_SIZE), (3, ROOT_SIZE), (4, LEAF_SIZE), (5, PNODE_SIZE)];
        for (i, size) in garbage_blocks {
            garbage(&a, table, i, size)?;
        }
        for (i, _) in garbage_blocks {
            a.deallocate(slot(table, i)).map_err(e)?;
        }
        ctx.done(tok);

        let tok = ctx.begin(TreeOp::Create);
        let mut t =
            FPTree::create_with(a.clone(), slot(table, TREE_SLOT), tree_opts()).map_err(e)?;
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
            || FPTree::create_with(a.clone(), tree_slot, tree_opts()),
        )?;
        if t.placement() != IndexPlacement::Persistent {
            return Err(format!("the recovered tree's index is {:?}", t.placement()));
        }
        t.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        let mut owned = o.owned;
        owned.extend(t.blocks());
        leak_check(a, owned)?;
        let pairs = t.range(0, u64::MAX, usize::MAX).map_err(|x| x.to_string())?;
        if pairs.len() as u64 != t.len() {
            return Err(format!("{} pairs, len() says {}", pairs.len(), t.len()));
        }
        Ok(match finished(unfinished, "a tree", pairs)? {
            Some(pairs) => Recovered::Tree(pairs),
            None => Recovered::NoTree("the tree's creation had not finished".into()),
        })
    }

    fn check(&self, r: &Recovered, m: &ModelView<TreeOp>) -> Result<(), String> {
        FptreeFixed.check(r, m)
    }
}
