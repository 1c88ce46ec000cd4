//! Crash target `fptree-fixed`: the single-threaded FPTree with fixed-size keys on a slab of
//! leaves ([D1]). The workload inserts, updates and deletes seeded random keys over a small key
//! space, so that leaves split and empty out (head, middle and last leaves) many times.
//!
//! Recovery opens the image, recovers the slab (the allocator runs first), recovers the tree
//! (micro-logs, inner-node rebuild, leaked-leaf freeing) and reads every pair. The check
//! requires: the tree's integrity check passes (order, fingerprints, bitmaps, reachability,
//! retired logs, no leaked leaf — T1–T6); no leaked leaf had to be freed (the logs did their
//! job); and the contents equal the committed operations applied in order, with the in-flight
//! operation either fully applied or not at all.

use std::collections::BTreeMap;

use ferrite::fptree::{FPTree, Slab};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, Options, Pool};

use crate::target::{Ctx, ModelOp, ModelView, Target};

const POOL: u64 = 256 * 1024;
const ROOT: u64 = 64;
const SLAB: u64 = 4096;
const BLOCK: u64 = 640;
const OPS: u64 = 400;
const KEYS: u64 = 240;

fn opts() -> Options {
    Options::default().layout("crashtest-fptree")
}

/// One operation of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeOp {
    /// Creating the slab and the tree over durable garbage.
    Create,
    /// Insert (no overwrite).
    Insert(u64, u64),
    /// Update an existing key.
    Update(u64, u64),
    /// Delete.
    Delete(u64),
}

impl TreeOp {
    fn apply(&self, m: &mut BTreeMap<u64, u64>) {
        match *self {
            TreeOp::Create => {}
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
        }
    }
}

impl ModelOp for TreeOp {
    fn encode(&self) -> String {
        match self {
            TreeOp::Create => "create".to_owned(),
            TreeOp::Insert(k, v) => format!("insert {k} {v}"),
            TreeOp::Update(k, v) => format!("update {k} {v}"),
            TreeOp::Delete(k) => format!("delete {k}"),
        }
    }
    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(' ').collect();
        match f.as_slice() {
            ["insert", k, v] => Some(TreeOp::Insert(k.parse().ok()?, v.parse().ok()?)),
            ["update", k, v] => Some(TreeOp::Update(k.parse().ok()?, v.parse().ok()?)),
            ["delete", k] => Some(TreeOp::Delete(k.parse().ok()?)),
            ["create"] => Some(TreeOp::Create),
            _ => None,
        }
    }
}

/// What recovery found.
#[derive(Debug)]
pub enum Recovered {
    /// No complete pool (its creation was interrupted).
    NoPool,
    /// No slab or tree yet: their region still reads as the garbage the workload wrote first,
    /// or as a creation in progress (magic 0).
    NoTree(String),
    /// The recovered pairs, and how many leaked leaves recovery had to free.
    Tree {
        /// All pairs in key order.
        pairs: Vec<(u64, u64)>,
        /// Leaked leaves freed at open.
        leaked: u64,
    },
}

/// The target.
#[derive(Debug, Default)]
pub struct FptreeFixed;

impl Target for FptreeFixed {
    type Op = TreeOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "fptree-fixed"
    }
    fn summary(&self) -> &'static str {
        "FPTree (single-threaded, fixed keys) on a slab: inserts, updates, deletes, splits, leaf deletions"
    }
    fn rules(&self) -> &'static [&'static str] {
        &[
            "P-FPT-1", "P-FPT-2", "P-FPT-3", "P-FPT-4", "P-FPT-5", "P-FPT-6", "P-FPT-7", "P-FPT-8",
            "P-FPT-9", "P-FPT-10", "P-FPT-11", "P-FPT-13", "P-SLAB-1", "P-SLAB-2", "P-SLAB-3",
        ]
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "crates/crashtest/src/fptree.rs:",
            "the workload's own durable-garbage prefill: without its persist the pool is zeroed, which only makes the test weaker",
        )]
    }

    fn workload(&self, ctx: &mut Ctx<TreeOp>) -> Result<(), String> {
        let pool = ctx.create_pool(POOL, &opts())?;
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        // Durable garbage first: the tree and the slab must not rely on zeroed memory.
        pool.fill(0, pool.size(), 0xA5).map_err(pe)?;
        pool.persist(0, pool.size()).map_err(pe)?;
        let tok = ctx.begin(TreeOp::Create);
        let slab = Slab::create(&pool, SLAB, POOL - 4096 - SLAB, BLOCK).map_err(e)?;
        let mut t = FPTree::create(&pool, ROOT, slab).map_err(e)?;
        ctx.done(tok);
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
            let tok = ctx.begin(op);
            match op {
                TreeOp::Insert(k, v) => t.insert(k, v).map(drop),
                TreeOp::Update(k, v) => t.update(k, v).map(drop),
                TreeOp::Delete(k) => t.delete(k).map(drop),
                TreeOp::Create => Ok(()),
            }
            .map_err(e)?;
            ctx.done(tok);
        }
        t.check().map_err(e)?;
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        let pool = match Pool::open_sim(image, &opts()) {
            Ok(p) => p,
            Err(ferrite_pmem::Error::Incomplete { .. }) => return Ok(Recovered::NoPool),
            Err(e) => return Err(format!("the pool does not open: {e}")),
        };
        let e = |e: Error| e.to_string();
        let slab = match Slab::open(&pool, SLAB) {
            Ok(s) => s,
            Err(Error::Corrupted { what, .. }) => {
                return Ok(Recovered::NoTree(format!("slab: {what}")));
            }
            Err(x) => return Err(format!("the slab does not open: {x}")),
        };
        let t = match FPTree::open(&pool, ROOT, slab) {
            Ok(t) => t,
            Err(Error::Corrupted { what, .. }) if what.starts_with("bad root magic") => {
                return Ok(Recovered::NoTree(format!("root: {what}")));
            }
            Err(x) => return Err(x.to_string()),
        };
        t.check().map_err(|x| format!("integrity check after recovery: {x}"))?;
        let pairs = t.range(0, u64::MAX, usize::MAX).map_err(e)?;
        Ok(Recovered::Tree { pairs, leaked: t.leaked_freed() })
    }

    fn check(&self, r: &Recovered, m: &ModelView<TreeOp>) -> Result<(), String> {
        let (pairs, leaked) = match r {
            // Before its creation committed, the region may hold the garbage written first.
            Recovered::NoPool | Recovered::NoTree(_) if m.committed.is_empty() => return Ok(()),
            Recovered::NoPool => {
                return Err(format!(
                    "expected {} committed operations, found no pool",
                    m.committed.len()
                ));
            }
            Recovered::NoTree(why) => {
                return Err(format!(
                    "expected {} committed operations (the tree's creation committed), found no tree: {why}",
                    m.committed.len()
                ));
            }
            Recovered::Tree { pairs, leaked } => (pairs, *leaked),
        };
        if leaked != 0 {
            return Err(format!(
                "recovery had to free {leaked} leaked leaves (a log did not do its job)"
            ));
        }
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
