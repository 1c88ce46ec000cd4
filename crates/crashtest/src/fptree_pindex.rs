//! Crash targets `fptree-pindex` (`u64` bounds) and `fptree-pindex-var` (byte bounds): the
//! persistent inner index of the fully persistent FPTree variant (`ferrite::fptree::persistent`)
//! on PAllocator, alone (no leaves: its entries point at synthetic leaf addresses it never
//! dereferences), at fan-out 4 so that few entries make a deep index. One workload over key
//! ids serves both forms ([`PindexBound`]): the byte form maps an id to a bound of one of two
//! shapes — a 7-byte inline key, or a 30-byte key in a key block sharing a 24-byte stem with
//! every other long one, so that the bottom level's truncated separators and the copied ones
//! above go out of line (a separator's key block allocated into its slot under the slot log,
//! freed after its bit clears, with a detached chain or a shrunk root, dropped from a split
//! node's upper half; rules P-FPT-31..34).
//!
//! The pool set holds segment 0 (header and anchor) and one small segment with one page per
//! class the workload uses: the table of pointers, the index root block, the nodes (and for
//! byte bounds the key blocks' class). The workload:
//! 1. `setup`: the allocator, a table of persistent pointers in the anchor's root (slot 1: the
//!    index root slot; slots 2..: ballast), nulled and marked ready; then a root-sized and two
//!    node-sized blocks filled with durable garbage and freed, so that the index's first
//!    blocks hold their previous owner's bytes;
//! 2. `create`: the index into slot 1;
//! 3. every key once in a seeded order (node splits and grows to height 4), a re-insert of a
//!    present pair and a remove of an absent bound (both no-ops), seeded churn, contiguous
//!    ranges removed (bottom nodes empty out: single-entry chains detached, the root shrinks),
//!    more churn, then all but a few keys removed;
//! 4. `ballast`: node-sized blocks into table slots until one node's worth remains free;
//! 5. ascending inserts until one needs more nodes than remain: it fails with `PoolFull`
//!    (`nospace` in the model: no change of content; a split that completed before the failed
//!    allocation stays, invisible), then removes that free nodes and inserts that fit again.
//!
//! Recovery opens the image, recovers the allocator, then opens the index (its two logs only;
//! a creation that had not finished is finished). The check requires: `check()` passes (order,
//! ranges, levels, shape, logs disarmed); the allocator's allocated blocks are exactly the
//! table, the ballast and the index's blocks (no leak, nothing reachable is free); the entries
//! equal the committed operations applied in order, with the in-flight one fully applied or
//! not at all. The target declares no M2: lines are torn.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use ferrite::alloc::{class_of, page_geometry};
use ferrite::fptree::persistent::{BoundForm, PIndex};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, PPtr};

use crate::fptree_common::{
    ROOT_SLOT, Space, check_absent, check_model, churn, create_table, final_leak_check, finished,
    garbage, leak_check, open_or_finish, open_table, shuffle, slot,
};
use crate::target::{Ctx, ModelOp, ModelView, Target};

/// The table's slot of the index root (slots 2.. ballast, see `fptree_common`).
const INDEX_SLOT: u64 = ROOT_SLOT;
const FANOUT: u32 = 4;
const KEYS: u64 = 64;
const CHURN: u64 = 40;
/// Nodes' worth of blocks left free before the out-of-space phase.
const SPARE: u64 = 1;

/// What distinguishes the two targets: the bound form, its key of an id, the geometry.
pub trait PindexBound: BoundForm {
    /// The target's name.
    const TARGET: &'static str;
    /// Its summary.
    const SUMMARY: &'static str;
    /// The rules it exercises.
    const RULES: &'static [&'static str];
    /// The table's ready word.
    const READY: u64;
    /// The pool set's layout name.
    const LAYOUT: &'static str;
    /// Header page + one 64 KiB page per class: the table's, the index root's, the nodes' (and
    /// the key blocks').
    const SEG: u64;
    /// The bound of key id `id` (injective).
    fn bound(id: u64) -> Self;
    /// The id of a bound made by [`PindexBound::bound`].
    fn id(b: &Self) -> Option<u64>;
}

const INDEX_RULES: [&str; 11] = [
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
];

impl PindexBound for u64 {
    const TARGET: &'static str = "fptree-pindex";
    const SUMMARY: &'static str = "FPTree persistent inner index (fan-out 4) on PAllocator: inserts with node splits and grows, removes with chain detaches and shrinks, splits without space";
    const RULES: &'static [&'static str] = &INDEX_RULES;
    const READY: u64 = 0x5245_4144_595f_5049;
    const LAYOUT: &'static str = "crashtest-pindex";
    const SEG: u64 = 3 * 64 * 1024 + 64 * 1024 + 4096;
    fn bound(id: u64) -> u64 {
        id
    }
    fn id(b: &u64) -> Option<u64> {
        Some(*b)
    }
}

/// The 24-byte stem the long byte bounds of the fourth shape share.
const STEM: &[u8] = b"~~~~~-separator-stem-~~~";

impl PindexBound for Box<[u8]> {
    const TARGET: &'static str = "fptree-pindex-var";
    const SUMMARY: &'static str = "FPTree persistent inner index of byte bounds (fan-out 4): inline and key-block separators, node splits, grows, detaches, shrinks, splits without space";
    const RULES: &'static [&'static str] = &[
        "P-FPT-14",
        "P-FPT-15",
        "P-FPT-16",
        "P-FPT-17",
        "P-FPT-18",
        "P-FPT-19",
        "P-FPT-31",
        "P-FPT-32",
        "P-FPT-34",
        "P-ALLOC-1",
        "P-ALLOC-2",
        "P-ALLOC-3",
        "P-ALLOC-4",
        "P-ALLOC-5",
    ];
    const READY: u64 = 0x5245_4144_595f_5056;
    const LAYOUT: &'static str = "crashtest-pindex-var";
    const SEG: u64 = 4 * 64 * 1024 + 64 * 1024 + 4096;
    /// Four shapes, by a hash of the id (ids of every phase get every shape): the six digits
    /// alone (inline), twice; the digits and a 24-byte tail (30 bytes, a key block; its
    /// neighbours' separators stay inline, so a node holding one splits without re-arming the
    /// slot log); the stem and the digits (30 bytes; these sort together after all others, so
    /// the separators between them are long too).
    fn bound(id: u64) -> Box<[u8]> {
        let digits = format!("{id:06}").into_bytes();
        match id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62 {
            0 | 1 => digits.into(),
            2 => [&digits[..], &[b'.'; 24][..]].concat().into(),
            _ => [STEM, &digits[..]].concat().into(),
        }
    }
    fn id(b: &Box<[u8]>) -> Option<u64> {
        let digits =
            if b.starts_with(b"~") { b.get(b.len().checked_sub(6)?..)? } else { b.get(..6)? };
        std::str::from_utf8(digits).ok()?.parse().ok()
    }
}

fn opts<B: PindexBound>() -> Options {
    crate::fptree_common::opts(B::LAYOUT, B::SEG)
}

/// The synthetic leaf pointer of value `v` (never dereferenced).
fn leaf(v: u64) -> PPtr {
    PPtr::new(7, 64 * (v + 1))
}

/// One operation of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexOp {
    /// The allocator, the table, recycled garbage blocks.
    Setup,
    /// Creating the index.
    Create,
    /// `insert(bound, leaf(v))` (a present identical pair: no-op).
    Insert(u64, u64),
    /// `remove(bound)` (absent: no-op).
    Remove(u64),
    /// A node-sized ballast block allocated into table slot `i`.
    Ballast(u64),
    /// An insert of this bound that needs more nodes than are free: `PoolFull`, no effect.
    NoSpace(u64),
}

impl IndexOp {
    fn apply(&self, m: &mut BTreeMap<u64, PPtr>) {
        match *self {
            IndexOp::Insert(k, v) => {
                m.entry(k).or_insert(leaf(v));
            }
            IndexOp::Remove(k) => {
                m.remove(&k);
            }
            IndexOp::Setup | IndexOp::Create | IndexOp::Ballast(_) | IndexOp::NoSpace(_) => {}
        }
    }
}

impl ModelOp for IndexOp {
    fn encode(&self) -> String {
        match self {
            IndexOp::Setup => "setup".to_owned(),
            IndexOp::Create => "create".to_owned(),
            IndexOp::Insert(k, v) => format!("insert {k} {v}"),
            IndexOp::Remove(k) => format!("remove {k}"),
            IndexOp::Ballast(i) => format!("ballast {i}"),
            IndexOp::NoSpace(k) => format!("nospace {k}"),
        }
    }
    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(' ').collect();
        match f.as_slice() {
            ["insert", k, v] => Some(IndexOp::Insert(k.parse().ok()?, v.parse().ok()?)),
            ["remove", k] => Some(IndexOp::Remove(k.parse().ok()?)),
            ["ballast", i] => Some(IndexOp::Ballast(i.parse().ok()?)),
            ["nospace", k] => Some(IndexOp::NoSpace(k.parse().ok()?)),
            ["setup"] => Some(IndexOp::Setup),
            ["create"] => Some(IndexOp::Create),
            _ => None,
        }
    }
}

/// What recovery found.
#[derive(Debug)]
pub enum Recovered {
    /// No index yet (the pool set, the allocator or the table is unfinished, or the index's
    /// creation had not finished: recovery finished it and found it empty and leak-free).
    NoIndex(String),
    /// The recovered entries in bound order, by key id.
    Index(Vec<(u64, PPtr)>),
}

/// The target over bounds of form `B`: [`FptreePindex`] (`u64`), [`FptreePindexVar`] (bytes).
#[derive(Debug)]
pub struct PindexTarget<B>(PhantomData<B>);

impl<B> Default for PindexTarget<B> {
    fn default() -> Self {
        PindexTarget(PhantomData)
    }
}

/// `fptree-pindex`.
pub type FptreePindex = PindexTarget<u64>;
/// `fptree-pindex-var`.
pub type FptreePindexVar = PindexTarget<Box<[u8]>>;

impl Space {
    /// Free node-sized blocks (the nodes' class has exactly one page).
    fn free_nodes<B: BoundForm>(&self, ix: &PIndex<B>) -> Result<u64, String> {
        Ok(self.free(ix.check().map_err(|e| e.to_string())?.nodes))
    }
}

/// The entries of `ix` by key id.
fn entries_by_id<B: PindexBound>(ix: &PIndex<B>) -> Result<Vec<(u64, PPtr)>, String> {
    ix.entries_in_order()
        .map_err(|x| x.to_string())?
        .into_iter()
        .map(|(b, l)| B::id(&b).map(|i| (i, l)).ok_or_else(|| format!("a bound {b:?} of no id")))
        .collect()
}

impl<B: PindexBound> PindexTarget<B> {
    /// Runs `op`, predicting a `PoolFull` (more node allocations than free nodes) so that the
    /// model records a no-op for it, and checking the returned flag against the model.
    fn modify(
        ctx: &Ctx<IndexOp>,
        ix: &mut PIndex<B>,
        model: &mut BTreeMap<u64, PPtr>,
        sp: &Space,
        op: IndexOp,
    ) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let full = match op {
            IndexOp::Insert(k, _) => {
                ix.allocations_for_k(B::bound(k).borrow()).map_err(e)? > sp.free_nodes(ix)?
            }
            IndexOp::Remove(_) => false,
            _ => return Err(format!("not an index modification: {op:?}")),
        };
        let tok = ctx.begin(match op {
            IndexOp::Insert(k, _) if full => IndexOp::NoSpace(k),
            op => op,
        });
        let r = match op {
            IndexOp::Insert(k, v) => ix.insert_k(B::bound(k).borrow(), leaf(v)),
            IndexOp::Remove(k) => ix.remove_k(B::bound(k).borrow()),
            _ => Ok(false),
        };
        // A present bound with another leaf is refused without a change (the model's insert
        // keeps the first leaf too).
        let (changed, refused) = match op {
            IndexOp::Insert(k, v) => {
                (!model.contains_key(&k), model.get(&k).is_some_and(|&l| l != leaf(v)))
            }
            IndexOp::Remove(k) => (model.contains_key(&k), false),
            _ => (false, false),
        };
        match (r, full) {
            (Ok(c), false) if c == changed && !refused => {}
            (Err(Error::InvalidArgument(_)), false) if refused => {}
            (Err(Error::PoolFull { .. }), true) => {}
            (r, _) => {
                return Err(format!(
                    "{op:?}: {r:?}, expected a change: {changed}, refused: {refused}, no space: {full}"
                ));
            }
        }
        ctx.done(tok);
        if !full {
            op.apply(model);
        }
        Ok(())
    }
}

impl<B: PindexBound> Target for PindexTarget<B> {
    type Op = IndexOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        B::TARGET
    }
    fn summary(&self) -> &'static str {
        B::SUMMARY
    }
    fn rules(&self) -> &'static [&'static str] {
        B::RULES
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        crate::fptree_common::SINGLE_THREAD_BENIGN
    }

    fn workload(&self, ctx: &mut Ctx<IndexOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let tok = ctx.begin(IndexOp::Setup);
        let (a, table) = create_table(ctx, &opts::<B>(), B::SEG, B::READY)?;
        // Durable garbage in the blocks the index gets first (the allocator reuses the most
        // recently freed block of a class): the root block and the first two nodes.
        for (i, size) in [(2, B::ROOT_SIZE), (3, B::NODE_SIZE), (4, B::NODE_SIZE)] {
            garbage(&a, table, i, size)?;
        }
        for i in [4, 3, 2] {
            a.deallocate(slot(table, i)).map_err(e)?;
        }
        ctx.done(tok);

        let tok = ctx.begin(IndexOp::Create);
        let mut ix = PIndex::<B>::create_with_fanout(a.clone(), slot(table, INDEX_SLOT), FANOUT)
            .map_err(e)?;
        ctx.done(tok);
        let class = class_of(B::NODE_SIZE).ok_or("no class for a node")?;
        let mut sp = Space { capacity: page_geometry(class).0, ballast: 0 };
        let mut model = BTreeMap::new();

        let mut keys: Vec<u64> = (0..KEYS).map(|k| k * 4).collect();
        shuffle(ctx.rng(), &mut keys);
        let mut ops: Vec<IndexOp> = keys.iter().map(|&k| IndexOp::Insert(k, k)).collect();
        // No-ops the tree's recovery relies on: a present identical pair, an absent bound.
        ops.push(IndexOp::Insert(keys[0], keys[0]));
        ops.push(IndexOp::Remove(1));
        let kinds: [fn(u64, u64) -> IndexOp; 2] =
            [|k, i| IndexOp::Insert(k, 1000 + i), |k, _| IndexOp::Remove(k)];
        churn(ctx.rng(), CHURN, KEYS * 4, &kinds, &mut ops);
        for range in [0..KEYS, 100..164, KEYS * 4 - 64..KEYS * 4] {
            ops.extend(range.map(IndexOp::Remove));
        }
        churn(ctx.rng(), CHURN, KEYS * 4, &kinds, &mut ops);
        ops.extend((0..KEYS * 4).filter(|k| k % 37 != 5).map(IndexOp::Remove));
        for op in ops {
            Self::modify(ctx, &mut ix, &mut model, &sp, op)?;
        }
        // Keys are distinct from here on: refill to a deep index first.
        for k in (0..KEYS).map(|k| 1000 + 2 * k) {
            Self::modify(ctx, &mut ix, &mut model, &sp, IndexOp::Insert(k, k))?;
        }

        // Ballast: leave SPARE nodes' worth of free blocks.
        sp.fill(
            ctx,
            &a,
            table,
            B::NODE_SIZE,
            |sp| Ok(sp.free_nodes(&ix)? > SPARE),
            IndexOp::Ballast,
        )?;
        // Ascending inserts until one needs more nodes than are free (a no-op in the model),
        // then removes that free nodes, and inserts that fit again.
        let mut k = 2000;
        let mut failed = None;
        while failed.is_none() {
            if k > 2000 + 8 * u64::from(FANOUT) * KEYS {
                return Err("no insert ran out of nodes".into());
            }
            let full =
                ix.allocations_for_k(B::bound(k).borrow()).map_err(e)? > sp.free_nodes(&ix)?;
            Self::modify(ctx, &mut ix, &mut model, &sp, IndexOp::Insert(k, k))?;
            if full {
                failed = Some(k);
            }
            k += 1;
        }
        for d in (1000..1000 + 2 * KEYS).step_by(2).take(40) {
            Self::modify(ctx, &mut ix, &mut model, &sp, IndexOp::Remove(d))?;
        }
        for n in k..k + 12 {
            Self::modify(ctx, &mut ix, &mut model, &sp, IndexOp::Insert(n, n))?;
        }
        ix.check().map_err(e)?;
        let got: BTreeMap<u64, PPtr> = entries_by_id(&ix)?.into_iter().collect();
        if got != model {
            return Err("the index differs from the workload's model".into());
        }
        final_leak_check(&a, table, sp.ballast, ix.blocks().map_err(e)?)
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        let o = match open_table(image, &opts::<B>(), B::READY)? {
            Ok(o) => o,
            Err(why) => return Ok(Recovered::NoIndex(why)),
        };
        let (a, ix_slot) = (&o.a, slot(o.table, INDEX_SLOT));
        let (ix, unfinished) = open_or_finish(
            o.root,
            "no index root header",
            || PIndex::<B>::open(a.clone(), ix_slot),
            || PIndex::<B>::create_with_fanout(a.clone(), ix_slot, FANOUT),
        )?;
        if ix.fanout() != FANOUT {
            return Err(format!("fan-out {} after recovery", ix.fanout()));
        }
        ix.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        let mut owned = o.owned;
        owned.extend(ix.blocks().map_err(|x| x.to_string())?);
        leak_check(a, owned)?;
        let entries = ix.entries_in_order().map_err(|x| x.to_string())?;
        // The ordered neighbours agree with the walk (the scans' path).
        let mut at = ix.first().map_err(|x| x.to_string())?;
        for want in &entries {
            if at.as_ref() != Some(want) {
                return Err(format!("successor walk found {at:?} where {want:?} is"));
            }
            at = ix.successor_k(want.0.borrow()).map_err(|x| x.to_string())?;
        }
        let entries = entries_by_id(&ix)?;
        if at.is_some() {
            return Err(format!("successor walk found {at:?} after the last entry"));
        }
        Ok(match finished(unfinished, "an index", entries)? {
            Some(entries) => Recovered::Index(entries),
            None => Recovered::NoIndex("the index's creation had not finished".into()),
        })
    }

    fn check(&self, r: &Recovered, m: &ModelView<IndexOp>) -> Result<(), String> {
        match r {
            Recovered::NoIndex(why) => check_absent(m, &IndexOp::Create, "index", why),
            Recovered::Index(entries) => {
                let got: BTreeMap<u64, PPtr> = entries.iter().copied().collect();
                check_model(&got, m, IndexOp::apply, |k| *k, ("index", "entries"))
            }
        }
    }
}
