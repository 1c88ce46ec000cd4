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

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{PAllocator, class_of, page_geometry};
use ferrite::fptree::persistent::PNODE_SIZE;
use ferrite::fptree::{FPTree, IndexPlacement, LEAF_SIZE, ROOT_SIZE, TreeOptions};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, PPtr, PoolSet};

use crate::fptree::{FptreeFixed, Recovered, Space, TreeOp, leak_check};
use crate::target::{Ctx, ModelView, Target};

/// Header page + four 64 KiB pages: the table's class, the roots' class (tree root and index
/// root), the leaves' class, the index nodes' class.
const SEG: u64 = 4 * 64 * 1024 + 64 * 1024 + 4096;
const TABLE: u64 = 2048;
const SLOTS: u64 = TABLE / 16 - 1;
const READY_AT: u64 = TABLE - 8;
const TREE_SLOT: u64 = 1;
const OPS: u64 = 400;
const KEYS: u64 = 240;
const SPARE: u64 = 2;
const READY: u64 = 0x5245_4144_595f_5450;
const SEG0: u64 = 4096 + 8192;
/// Index fan-out: the smallest, for a deep index from few leaves.
const FANOUT: u32 = 4;

fn opts() -> Options {
    Options::default().layout("crashtest-fptree-p").segment_size(SEG0).max_pool_size(SEG0 + SEG)
}

fn tree_opts() -> TreeOptions {
    TreeOptions { index: IndexPlacement::Persistent, index_fanout: FANOUT }
}

fn slot(table: PPtr, i: u64) -> PPtr {
    PPtr::new(table.segment, table.offset + i * 16)
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
        &[
            (
                "crates/crashtest/src/fptree_persistent.rs:",
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
        for i in 1..SLOTS {
            set.store_u64(g + i * 16, PPtr::NULL.segment, Ordering::Relaxed).map_err(pe)?;
        }
        set.persist(g, TABLE).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        set.store_u64(g + READY_AT, READY, Ordering::Release).map_err(pe)?;
        set.persist(g + READY_AT, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        // Durable garbage in the blocks creation gets first: the tree root and the index root
        // (one class), the first leaf, the first index node. All are allocated before any is
        // freed, so that they are distinct blocks.
        let garbage = [(2, ROOT_SIZE), (3, ROOT_SIZE), (4, LEAF_SIZE), (5, PNODE_SIZE)];
        for (i, size) in garbage {
            let b = a.allocate(size, slot(table, i)).map_err(e)?;
            let bg = set.resolve_range(b, size).map_err(pe)?;
            set.fill(bg, size, 0xA5).map_err(pe)?;
            set.persist(bg, size).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        }
        for (i, _) in garbage {
            a.deallocate(slot(table, i)).map_err(e)?;
        }
        ctx.done(tok);

        let tok = ctx.begin(TreeOp::Create);
        let mut t =
            FPTree::create_with(a.clone(), slot(table, TREE_SLOT), tree_opts()).map_err(e)?;
        ctx.done(tok);
        let class = class_of(LEAF_SIZE).ok_or("no class for a leaf")?;
        let mut sp = Space { capacity: page_geometry(class).0, ballast: 0 };

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
            FptreeFixed::modify(ctx, &mut t, &sp, op)?;
        }

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
        let mut k = KEYS;
        let mut failed = 0;
        while failed == 0 {
            let full = t.needs_split(k).map_err(e)? && sp.free_leaves(&t) == 0;
            FptreeFixed::modify(ctx, &mut t, &sp, TreeOp::Insert(k, k + 1))?;
            if full {
                failed = k;
                FptreeFixed::modify(ctx, &mut t, &sp, TreeOp::Update(k - 1, 5))?;
            }
            k += 1;
        }
        for d in (failed - 40..failed).rev() {
            FptreeFixed::modify(ctx, &mut t, &sp, TreeOp::Delete(d))?;
        }
        for n in failed..failed + 40 {
            FptreeFixed::modify(ctx, &mut t, &sp, TreeOp::Insert(n, n + 1))?;
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
        let create = || {
            FPTree::create_with(a.clone(), tree_slot, tree_opts())
                .map_err(|x| format!("finishing the creation: {x}"))
        };
        let (t, unfinished) = if root.is_null() {
            (create()?, true)
        } else {
            match FPTree::open(a.clone(), tree_slot) {
                Ok(t) => (t, false),
                Err(Error::Corrupted { what, .. }) if what.starts_with("no root header") => {
                    (create()?, true)
                }
                Err(x) => return Err(x.to_string()),
            }
        };
        if t.placement() != IndexPlacement::Persistent {
            return Err(format!("the recovered tree's index is {:?}", t.placement()));
        }
        t.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        owned.extend(t.blocks());
        leak_check(&a, owned)?;
        let pairs = t.range(0, u64::MAX, usize::MAX).map_err(|x| x.to_string())?;
        if pairs.len() as u64 != t.len() {
            return Err(format!("{} pairs, len() says {}", pairs.len(), t.len()));
        }
        if unfinished {
            if !pairs.is_empty() {
                return Err(format!("a tree whose creation was finished holds {pairs:?}"));
            }
            return Ok(Recovered::NoTree("the tree's creation had not finished".into()));
        }
        Ok(Recovered::Tree(pairs))
    }

    fn check(&self, r: &Recovered, m: &ModelView<TreeOp>) -> Result<(), String> {
        FptreeFixed.check(r, m)
    }
}
