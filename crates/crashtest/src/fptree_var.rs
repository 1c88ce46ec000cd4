//! Crash targets `fptree-var`, `fptree-persistent-var` and `fptree-persistent-var-delete` (a
//! small workload of leaf deletions for an exhaustive run, [`FptreeVar::leaf_deletes`]): the single-threaded FPTree with
//! byte-string keys (`FPTreeVar`, v2 leaves: keys of up to 23 bytes inline, longer ones in key
//! blocks allocated through PAllocator's leak-free interface) on a simulated pool set ([D2]),
//! with its inner index in DRAM (`fptree-var`) or in PM at fan-out 4 (`fptree-persistent-var`:
//! byte separators, long ones in key blocks; the segment has two more pages, for the index
//! root's and the nodes' classes, and their first blocks hold recycled garbage too).
//!
//! The pool set cannot grow past two segments: segment 0 (the header page and the allocator's
//! anchor) and one segment with one page per size class the workload uses — the table of
//! pointers, the tree's root, the leaves and three key-block classes (64, 128 and 320 bytes).
//! The workload:
//! 1. `setup`: creates the allocator and a table of persistent pointers in the anchor's root
//!    (slot 1 will hold the tree's root), nulls it and marks it ready; then allocates a
//!    root-sized, a leaf-sized and a key-block-sized block, fills them with durable garbage and
//!    frees them, so the tree's root, its first leaf and its first key block hold their
//!    previous owner's bytes (whose first words read as a damaged slot form, 0xA5…);
//! 2. `create`: creates the tree into slot 1;
//! 3. inserts every key once in a seeded order — key ids map to keys of every form: empty,
//!    short inline, 23 bytes (the longest inline), 24 bytes (the shortest key block), 40, 100
//!    and 300 bytes, all sharing a long stem so that lookups compare key blocks — so that
//!    splits move long keys; every key updated once; seeded churn (inserts, updates, deletes);
//!    contiguous ranges deleted so that the head, a middle and the last leaves empty out and
//!    are deleted with their key blocks; more churn; then all but a few keys deleted.
//!
//! Recovery opens the image, recovers the allocator, then the tree (micro-logs, the rebuild's
//! leak rule for key blocks left by an interrupted insert, update or delete); a tree whose
//! creation had not finished is finished. With a persistent index the open walks no leaf: the
//! leak rule of a leaf runs at its first lock (P-FPT-35), so the orphan blocks of leaves not
//! locked yet are the tree's (`blocks()`); recovery therefore checks once, then rewrites every
//! fourth key with its own value (the first lock of most leaves, which repairs them, with
//! nested crashes inside), and checks again. The check requires: the tree's integrity check passes
//! (T1–T5, V1–V3); the allocator's allocated blocks are exactly the table and the tree's blocks
//! including every key block named by a valid slot (T6: no key block leaked, none reachable and
//! free); the contents equal the committed operations, with the in-flight one fully applied or
//! not at all.

use std::collections::BTreeMap;

use ferrite::fptree::persistent::{PVINDEX_ROOT_SIZE, PVNODE_SIZE};
use ferrite::fptree::{
    FPTreeVar, IndexPlacement, MAX_KEY_LEN, ROOT_SIZE, TreeOptions, VAR_LEAF_SIZE,
};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options};

use crate::fptree::leak_check;
use crate::fptree_common::{
    ROOT_SLOT, check_absent, check_model, churn, create_table, final_leak_check, finished, garbage,
    open_or_finish, open_table, shuffle, slot,
};
use crate::target::{Ctx, ModelOp, ModelView, Target};

/// Header page + seven 64 KiB pages: one per class (table, root, leaves, key blocks of 64, 128
/// and 320 bytes) and one more for the allocator's own use of the segment; with a persistent
/// index two more (the index root's class and the nodes').
const SEG: u64 = 7 * 64 * 1024 + 4096;
const PSEG: u64 = SEG + 2 * 64 * 1024;
/// The persistent index's fan-out: the smallest, for a deep index.
const FANOUT: u32 = 4;
/// The table's slot of the tree's root (see `fptree_common`).
const TREE_SLOT: u64 = ROOT_SLOT;
const OPS: u64 = 300;
const KEYS: u64 = 140;
/// `fptree-persistent-var`'s churn: less than `fptree-var`'s (its images cost more: index
/// nodes, separator blocks, the rewrites after recovery); the key ids are as many (fewer
/// leaves would make no index node split and no separator key block: tried, 84 ids).
const POPS: u64 = 120;
/// `fptree-persistent-var`'s key ids start here (see [`key`]); `fptree-var`'s are below.
pub const PVAR_IDS: u64 = 10_000;
const READY: u64 = 0x5245_4144_595f_5642;

/// The key of id `i`: id 0 is the empty key; otherwise (for long keys) a stem, the id in four
/// digits (so keys are distinct), padded to a length chosen by `i % 7` that covers every slot
/// form and three key-block classes.
pub fn key(i: u64) -> Vec<u8> {
    if i == 0 {
        return Vec::new();
    }
    let len = [2usize, 9, 23, 24, 40, 100, 300][(i % 7) as usize];
    // The stem is shared by all keys of 24 bytes or more: their 6-byte prefixes are equal, so
    // a lookup must read and compare the key block. From id [`PVAR_IDS`] on (the ids of
    // `fptree-persistent-var`) the 300-byte keys share a longer one, so that the bounds between
    // their leaves (and the index's separators) are key blocks too.
    let mut k = match len {
        300 if i >= PVAR_IDS => b"stem-of-a-long-key/with-a-longer-stem/".to_vec(),
        24.. => b"stem-of-a-long-key/".to_vec(),
        _ => Vec::new(),
    };
    k.extend_from_slice(format!("{i:04}").as_bytes());
    k.resize(len.max(k.len()), b'.');
    debug_assert!(k.len() <= MAX_KEY_LEN);
    k
}

/// One operation of the model (keys by id, see [`key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarOp {
    /// Creating the allocator and the table, and recycling garbage blocks.
    Setup,
    /// Creating the tree (over recycled garbage).
    Create,
    /// Insert (no overwrite).
    Insert(u64, u64),
    /// Update an existing key.
    Update(u64, u64),
    /// Delete.
    Delete(u64),
}

impl VarOp {
    fn apply(&self, m: &mut BTreeMap<Vec<u8>, u64>) {
        match *self {
            VarOp::Insert(k, v) => {
                m.entry(key(k)).or_insert(v);
            }
            VarOp::Update(k, v) => {
                if let Some(x) = m.get_mut(&key(k)) {
                    *x = v;
                }
            }
            VarOp::Delete(k) => {
                m.remove(&key(k));
            }
            VarOp::Setup | VarOp::Create => {}
        }
    }
}

impl ModelOp for VarOp {
    fn encode(&self) -> String {
        match self {
            VarOp::Setup => "setup".to_owned(),
            VarOp::Create => "create".to_owned(),
            VarOp::Insert(k, v) => format!("insert {k} {v}"),
            VarOp::Update(k, v) => format!("update {k} {v}"),
            VarOp::Delete(k) => format!("delete {k}"),
        }
    }
    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(' ').collect();
        match f.as_slice() {
            ["insert", k, v] => Some(VarOp::Insert(k.parse().ok()?, v.parse().ok()?)),
            ["update", k, v] => Some(VarOp::Update(k.parse().ok()?, v.parse().ok()?)),
            ["delete", k] => Some(VarOp::Delete(k.parse().ok()?)),
            ["setup"] => Some(VarOp::Setup),
            ["create"] => Some(VarOp::Create),
            _ => None,
        }
    }
}

/// What recovery found.
#[derive(Debug)]
pub enum Recovered {
    /// No tree yet (an unfinished pool set, allocator, table or tree creation).
    NoTree(String),
    /// The recovered pairs, in key order.
    Tree(Vec<(Vec<u8>, u64)>),
}

/// The target: `fptree-var` (default) or, with `persistent`, `fptree-persistent-var`; with
/// `leaf_deletes` too, `fptree-persistent-var-delete`.
#[derive(Debug, Default)]
pub struct FptreeVar {
    /// The inner index in PM (fan-out 4).
    pub persistent: bool,
    /// The small workload of leaf deletions only ([`FptreeVar::leaf_deletes`]).
    pub leaf_deletes: bool,
}

/// `fptree-persistent-var-delete`'s key ids: `DELETE_KEYS` ids from [`PVAR_IDS`] in steps of
/// seven, so that every key has 40 bytes (`key(i)` with `i % 7 == 4`: a 64-byte key block).
const DELETE_KEYS: u64 = 48;

impl FptreeVar {
    /// `fptree-persistent-var`.
    pub fn persistent() -> FptreeVar {
        FptreeVar { persistent: true, leaf_deletes: false }
    }

    /// `fptree-persistent-var-delete`: `fptree-persistent-var`'s pool, tree and recovery with
    /// a small workload made for an exhaustive run (every visit of every crash point crashed):
    /// 48 keys of 40 bytes (all in key blocks) inserted in order (two leaves: the lowest 16
    /// keys and a full leaf of 32), then the middle third deleted (from the second leaf: no
    /// leaf empties), then the lowest 16 (the head leaf empties and is deleted, its last key
    /// in a key block), then all but the last four. A leaf deletion frees
    /// that key's block after the leaf's bitmap is persisted empty (P-FPT-36); an exhaustive
    /// run crashes at every fence of that free, where a lost bitmap persist leaves recovery a
    /// valid slot whose block is gone. `fptree-persistent-var`'s sampled run reaches the same
    /// sites but need not crash inside that window (the allocator's fences there are visited
    /// by every free of the run).
    pub fn leaf_deletes() -> FptreeVar {
        FptreeVar { persistent: true, leaf_deletes: true }
    }

    fn opts(&self) -> Options {
        if self.persistent {
            crate::fptree_common::opts("crashtest-fptree-pvar", PSEG)
        } else {
            crate::fptree_common::opts("crashtest-fptree-var", SEG)
        }
    }

    fn seg(&self) -> u64 {
        if self.persistent { PSEG } else { SEG }
    }

    /// Key ids and churn operations of the run.
    fn size(&self) -> (u64, u64) {
        if self.persistent { (KEYS, POPS) } else { (KEYS, OPS) }
    }

    fn tree_opts(&self) -> TreeOptions {
        if self.persistent {
            TreeOptions { index: IndexPlacement::Persistent, index_fanout: FANOUT }
        } else {
            TreeOptions::default()
        }
    }
}

fn modify(ctx: &Ctx<VarOp>, t: &mut FPTreeVar, op: VarOp) -> Result<(), String> {
    let tok = ctx.begin(op);
    let r = match op {
        VarOp::Insert(k, v) => t.insert(&key(k), v).map(drop),
        VarOp::Update(k, v) => t.update(&key(k), v).map(drop),
        VarOp::Delete(k) => t.delete(&key(k)).map(drop),
        _ => Err(Error::InvalidArgument(format!("not a tree modification: {op:?}"))),
    };
    r.map_err(|e| format!("{op:?}: {e}"))?;
    ctx.done(tok);
    Ok(())
}

/// `fptree-persistent-var-delete`'s operations after creation (see
/// [`FptreeVar::leaf_deletes`]).
fn leaf_deletes(
    ctx: &Ctx<VarOp>,
    a: &std::sync::Arc<ferrite::alloc::PAllocator>,
    table: ferrite_pmem::PPtr,
    t: &mut FPTreeVar,
) -> Result<(), String> {
    let id = |j: u64| PVAR_IDS + 7 * j;
    for j in 0..DELETE_KEYS {
        modify(ctx, t, VarOp::Insert(id(j), j + 1))?;
    }
    let middle = DELETE_KEYS / 3..DELETE_KEYS * 2 / 3;
    for j in middle.clone().chain((0..DELETE_KEYS - 4).filter(|j| !middle.contains(j))) {
        modify(ctx, t, VarOp::Delete(id(j)))?;
    }
    t.check().map_err(|e| e.to_string())?;
    final_leak_check(a, table, 0, t.blocks())
}

impl Target for FptreeVar {
    type Op = VarOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        match (self.persistent, self.leaf_deletes) {
            (true, true) => "fptree-persistent-var-delete",
            (true, false) => "fptree-persistent-var",
            (false, _) => "fptree-var",
        }
    }
    fn summary(&self) -> &'static str {
        if self.leaf_deletes {
            return "FPTree with byte keys and its inner index in PM: a small workload of leaf deletions whose last key is in a key block (for an exhaustive run: P-FPT-36)";
        }
        if self.persistent {
            return "FPTree with byte keys and its inner index in PM (fan-out 4, byte separators, long ones in key blocks): inserts, updates, deletes, splits with index inserts, leaf deletions with index removes, the leaf leak rule at the first lock after open";
        }
        "FPTree with byte keys (inline and key blocks) on PAllocator: inserts, updates, deletes, splits and leaf deletions moving and freeing key blocks"
    }
    fn rules(&self) -> &'static [&'static str] {
        if self.leaf_deletes {
            return &["P-FPT-2", "P-FPT-9", "P-FPT-10", "P-FPT-21", "P-FPT-36"];
        }
        if self.persistent {
            // The rules with persist sites of their own that this workload reaches (P-FPT-27,
            // 28, 33 and 35 are orders between other rules' sites; detaches, P-FPT-18, are
            // the index target's).
            return &[
                "P-FPT-1",
                "P-FPT-2",
                "P-FPT-3",
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
                "P-FPT-19",
                "P-FPT-21",
                "P-FPT-23",
                "P-FPT-24",
                "P-FPT-25",
                "P-FPT-26",
                "P-FPT-31",
                "P-FPT-32",
                "P-FPT-34",
                "P-FPT-36",
                "P-ALLOC-1",
                "P-ALLOC-2",
                "P-ALLOC-3",
                "P-ALLOC-4",
            ];
        }
        &[
            "P-FPT-1",
            "P-FPT-2",
            "P-FPT-3",
            "P-FPT-6",
            "P-FPT-7",
            "P-FPT-8",
            "P-FPT-9",
            "P-FPT-10",
            "P-FPT-11",
            "P-FPT-13",
            "P-FPT-21",
            "P-FPT-23",
            "P-FPT-24",
            "P-FPT-25",
            "P-FPT-26",
            "P-ALLOC-1",
            "P-ALLOC-2",
            "P-ALLOC-3",
            "P-ALLOC-4",
        ]
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[
            crate::fptree_common::GARBAGE_FILL,
            (
                "#P-FPT-23 [recovery only]",
                "the rebuild's drop of a second reference to a key block (an update interrupted before P-FPT-23): if lost, the next recovery finds the same second reference beside the valid one and drops it again; only operations after recovery (which this target does not run) could expose it, as for the allocator's replay disarm",
            ),
            crate::alloc::REPLAY_DISARM,
            crate::alloc::SINGLE_THREAD_SYNC_DISARM,
            crate::alloc::SINGLE_THREAD_COMMITTED,
        ]
    }

    fn workload(&self, ctx: &mut Ctx<VarOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let tok = ctx.begin(VarOp::Setup);
        let (a, table) = create_table(ctx, &self.opts(), self.seg(), READY)?;
        // Durable garbage in the blocks the tree gets first (the allocator reuses the most
        // recently freed block of a class), with a persistent index its root and first node.
        let mut blocks = vec![(2, ROOT_SIZE), (3, VAR_LEAF_SIZE), (4, 100)];
        if self.persistent {
            blocks.extend([(5, PVINDEX_ROOT_SIZE), (6, PVNODE_SIZE)]);
        }
        for (i, size) in blocks {
            garbage(&a, table, i, size)?;
            a.deallocate(slot(table, i)).map_err(e)?;
        }
        ctx.done(tok);

        let tok = ctx.begin(VarOp::Create);
        let mut t = FPTreeVar::create_with(a.clone(), slot(table, TREE_SLOT), self.tree_opts())
            .map_err(e)?;
        ctx.done(tok);

        if self.leaf_deletes {
            return leaf_deletes(ctx, &a, table, &mut t);
        }
        let (keys_n, ops_n) = self.size();
        let mut keys: Vec<u64> = (0..keys_n).collect();
        shuffle(ctx.rng(), &mut keys);
        let mut ops: Vec<VarOp> = keys.iter().map(|&k| VarOp::Insert(k, k + 1)).collect();
        let kinds: [fn(u64, u64) -> VarOp; 3] = [
            |k, i| VarOp::Insert(k, 1000 + i),
            |k, i| VarOp::Update(k, 2000 + i),
            |k, _| VarOp::Delete(k),
        ];
        // Every key updated once (many updates right after the splits: inline and key-block
        // keys, copies into slots that held other keys).
        ops.extend(keys.iter().map(|&k| VarOp::Update(k, 500 + k)));
        churn(ctx.rng(), ops_n / 2, keys_n, &kinds, &mut ops);
        for range in [0..35, 60..95, KEYS - 35..KEYS] {
            ops.extend(range.map(VarOp::Delete));
        }
        churn(ctx.rng(), ops_n / 2, keys_n, &kinds, &mut ops);
        ops.extend((0..keys_n).filter(|k| k % 40 != 7).map(VarOp::Delete));
        let base = if self.persistent { PVAR_IDS } else { 0 };
        for op in ops {
            let op = match op {
                VarOp::Insert(k, v) => VarOp::Insert(base + k, v),
                VarOp::Update(k, v) => VarOp::Update(base + k, v),
                VarOp::Delete(k) => VarOp::Delete(base + k),
                op => op,
            };
            modify(ctx, &mut t, op)?;
        }
        t.check().map_err(e)?;
        final_leak_check(&a, table, 0, t.blocks())
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        let o = match open_table(image, &self.opts(), READY)? {
            Ok(o) => o,
            Err(why) => return Ok(Recovered::NoTree(why)),
        };
        let (a, tree_slot) = (&o.a, slot(o.table, TREE_SLOT));
        let (t, unfinished) = open_or_finish(
            o.root,
            "no root header",
            || FPTreeVar::open(a.clone(), tree_slot),
            || FPTreeVar::create_with(a.clone(), tree_slot, self.tree_opts()),
        )?;
        if t.placement() != self.tree_opts().index {
            return Err(format!("the recovered tree's index is {:?}", t.placement()));
        }
        t.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        let mut owned = o.owned.clone();
        owned.extend(t.blocks());
        leak_check(a, owned)?;
        let top = vec![0xFF; MAX_KEY_LEN];
        let pairs: Vec<(Vec<u8>, u64)> = t
            .range(&[], &top, usize::MAX)
            .map_err(|x| x.to_string())?
            .into_iter()
            .map(|(k, v)| (k.into_vec(), v))
            .collect();
        // Every key is found by a point lookup too (fingerprints and key-block compares).
        for (k, v) in &pairs {
            if t.get(k).map_err(|x| x.to_string())? != Some(*v) {
                return Err(format!("key {k:?} is listed with {v} but its lookup disagrees"));
            }
        }
        if self.persistent {
            // P-FPT-35: the first lock of a leaf in this open runs its leak rule. Every eighth
            // key rewritten with its value locks most leaves (16 to 32 keys each); then the
            // tree is checked again (those leaves are held to V1 now) and the orphans they
            // named must be gone.
            for (k, v) in pairs.iter().step_by(8) {
                if !t.update(k, *v).map_err(|x| format!("rewrite after recovery: {x}"))? {
                    return Err(format!("key {k:?} vanished from its rewrite"));
                }
            }
            t.check().map_err(|x| format!("integrity check after the rewrites: {x}"))?;
            let mut owned = o.owned;
            owned.extend(t.blocks());
            leak_check(a, owned)?;
        }
        Ok(match finished(unfinished, "a tree", pairs)? {
            Some(pairs) => Recovered::Tree(pairs),
            None => Recovered::NoTree("the tree's creation had not finished".into()),
        })
    }

    fn check(&self, r: &Recovered, m: &ModelView<VarOp>) -> Result<(), String> {
        match r {
            Recovered::NoTree(why) => check_absent(m, &VarOp::Create, "tree", why),
            Recovered::Tree(pairs) => {
                let got: BTreeMap<Vec<u8>, u64> = pairs.iter().cloned().collect();
                let show = |k: &Vec<u8>| String::from_utf8_lossy(k).into_owned();
                check_model(&got, m, VarOp::apply, show, ("tree", "pairs"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_cover_every_form() {
        let ks: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
        let distinct: std::collections::BTreeSet<&Vec<u8>> = ks.iter().collect();
        assert_eq!(distinct.len(), ks.len());
        let lens: std::collections::BTreeSet<usize> = ks.iter().map(Vec::len).collect();
        for l in [0, 4, 9, 23, 24, 40, 100, 300] {
            assert!(lens.contains(&l), "no key of {l} bytes");
        }
    }
}
