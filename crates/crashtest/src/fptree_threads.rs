//! Crash targets `fptree-threads` and `fptree-threads-persistent`: the concurrent FPTree
//! (fixed keys; the DRAM inner index, or the persistent one at fan-out 4) with two workload
//! threads on shared leaves.
//!
//! The pool set and the table are `fptree-fixed`'s, or `fptree-persistent`'s for the
//! persistent index (their recovery and integrity checks are reused, including the
//! persistent one's placement check). The workload creates the allocator, the table and the tree, prefills it from one
//! thread (several leaves), then runs rounds in which both threads meet at a barrier and each
//! runs a batch of operations on its own keys (thread t owns the keys ≡ t mod 2, so the two
//! threads' keys share leaves): inserts that split shared leaves, updates, deletes, and in
//! some rounds both threads delete their halves of one key range, so that leaves empty and
//! are deleted (the predecessor's lock is contended by the other thread). Half-way the tree
//! is closed and reopened (a new lock-word epoch, P-FPT-30) and the rounds go on. While one
//! thread's crash point is tested the other is paused at its next persistence event, so an
//! image can hold two operations in flight, one per thread; each thread stores to a scratch
//! word right after `begin` (the caution of `docs/design/crash-testing.md` §13).
//!
//! The check: `fptree-fixed`'s recovery (allocator, micro-logs, index rebuild, `check()`,
//! leak check: allocated blocks = table + the tree's blocks; `fptree-persistent`'s for the
//! persistent index: its logs instead of the rebuild, the index's blocks in the leak check),
//! then per key: the committed
//! value, or the result of the one in-flight operation on that key (keys of different
//! threads are disjoint, so at most one is in flight per key). Recovery reads every pair by a
//! scan, which takes each leaf's lock-word snapshot: a word left odd in the epoch recovery
//! reuses (an epoch persist lost) makes that scan wait forever, which the tester reports.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrite::fptree::{FPTree, TreeOptions};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{CrashImage, PPtr};

use crate::fptree::{FptreeFixed, Recovered, TREE_SLOT, TreeOp, leak_check};
use crate::fptree_common::{SLOTS, TABLE, check_model_per_key, create_table, slot};
use crate::fptree_persistent::FptreePersistent;
use crate::target::{Ctx, ModelView, Target};

/// Keys 0..KEYS; thread t owns the keys ≡ t (mod 2).
const KEYS: u64 = 200;
/// Rounds per phase (two phases, a reopen between them), operations per thread and round.
const ROUNDS: u64 = 6;
const BATCH: u64 = 8;
/// Table slots whose offset words the threads store to right after `begin` (their segment
/// words stay null, so recovery sees empty slots).
const SCRATCH: u64 = SLOTS - 3;

/// The target, with the tree's inner index in DRAM (`fptree-threads`, the default) or in PM
/// (`fptree-threads-persistent`).
#[derive(Debug, Default)]
pub struct FptreeThreads {
    persistent: bool,
}

impl FptreeThreads {
    /// `fptree-threads-persistent`: the same workload on a tree whose index is in PM.
    pub fn persistent() -> FptreeThreads {
        FptreeThreads { persistent: true }
    }

    /// The pool options, segment size, table marker and tree options of the variant.
    fn layout(&self) -> (ferrite_pmem::Options, u64, u64, TreeOptions) {
        if self.persistent {
            use crate::fptree_persistent as p;
            (p::opts(), p::SEG, p::READY, p::tree_opts())
        } else {
            use crate::fptree as f;
            (f::opts(), f::SEG, f::READY, TreeOptions::default())
        }
    }
}

/// P-ALLOC-7 here: the tree allocates and frees blocks only in splits and leaf deletions,
/// under its SMO lock, through the allocator's one slot: its allocator transactions never
/// overlap, as with one thread.
const SMO_SERIAL_SYNC_DISARM: (&str, &str) = (
    "#P-ALLOC-7",
    "the tree's allocations and frees run one at a time under its SMO lock through one allocator slot: no other thread changes the shared words before this thread's next fence (alloc-threads detects it)",
);

/// P-ALLOC-9 here: as [`SMO_SERIAL_SYNC_DISARM`], no journal of another thread is pending.
const SMO_SERIAL_COMMITTED: (&str, &str) = (
    "#P-ALLOC-9",
    "the tree's allocations and frees run one at a time under its SMO lock through one allocator slot: an older journal is always overwritten or disarmed first (alloc-threads detects it)",
);

/// The schedule of one phase: `rounds[r][t]`, thread t's batch in round r.
fn schedule(rng: &mut ferrite_pmem::SplitMix64, phase: u64) -> Vec<[Vec<TreeOp>; 2]> {
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        let mut round: [Vec<TreeOp>; 2] = [Vec::new(), Vec::new()];
        // Every third round both threads delete their halves of one range of 48 keys (wider
        // than a leaf: a leaf or more empties and is deleted); the others are random churn.
        let range = (r % 3 == 2).then(|| {
            let a = rng.next_u64() % (KEYS - 48);
            a..a + 48
        });
        for (t, ops) in round.iter_mut().enumerate() {
            let t = t as u64;
            match &range {
                Some(range) => ops.extend(range.clone().filter(|k| k % 2 == t).map(TreeOp::Delete)),
                None => {
                    for i in 0..BATCH {
                        let k = (rng.next_u64() % (KEYS / 2)) * 2 + t;
                        let v = ((phase * ROUNDS + r) * 2 + t) * 100 + i + 1;
                        ops.push(match rng.next_u64() % 4 {
                            0 | 1 => TreeOp::Insert(k, v),
                            2 => TreeOp::Update(k, v),
                            _ => TreeOp::Delete(k),
                        });
                    }
                }
            }
        }
        rounds.push(round);
    }
    rounds
}

fn run(t: &FPTree, op: TreeOp) -> Result<(), Error> {
    match op {
        TreeOp::Insert(k, v) => t.insert(k, v).map(drop),
        TreeOp::Update(k, v) => t.update(k, v).map(drop),
        TreeOp::Delete(k) => t.delete(k).map(drop),
        _ => Ok(()),
    }
}

impl Target for FptreeThreads {
    type Op = TreeOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        if self.persistent { "fptree-threads-persistent" } else { "fptree-threads" }
    }
    fn summary(&self) -> &'static str {
        if self.persistent {
            "the concurrent FPTree (fixed keys, index in PM at fan-out 4): two threads on shared leaves, splits and leaf deletions under contention, a reopen (new lock-word epoch)"
        } else {
            "the concurrent FPTree (fixed keys, DRAM index): two threads on shared leaves, splits and leaf deletions under contention, a reopen (new lock-word epoch)"
        }
    }
    fn rules(&self) -> &'static [&'static str] {
        if self.persistent {
            &[
                "P-FPT-1", "P-FPT-2", "P-FPT-3", "P-FPT-4", "P-FPT-5", "P-FPT-6", "P-FPT-7",
                "P-FPT-8", "P-FPT-9", "P-FPT-10", "P-FPT-11", "P-FPT-13", "P-FPT-14", "P-FPT-15",
                "P-FPT-16", "P-FPT-17", "P-FPT-18", "P-FPT-19", "P-FPT-30",
            ]
        } else {
            &[
                "P-FPT-1", "P-FPT-2", "P-FPT-3", "P-FPT-4", "P-FPT-5", "P-FPT-6", "P-FPT-7",
                "P-FPT-8", "P-FPT-9", "P-FPT-10", "P-FPT-11", "P-FPT-13", "P-FPT-30",
            ]
        }
    }
    fn reproducible(&self) -> bool {
        false // two workload threads: see the module docs
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[crate::alloc::REPLAY_DISARM, SMO_SERIAL_SYNC_DISARM, SMO_SERIAL_COMMITTED]
    }

    fn workload(&self, ctx: &mut Ctx<TreeOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let phases = [schedule(ctx.rng(), 0), schedule(ctx.rng(), 1)];
        let mut prefill: Vec<u64> = (0..KEYS).filter(|k| k % 5 != 0).collect();
        for i in (1..prefill.len()).rev() {
            prefill.swap(i, (ctx.rng().next_u64() % (i as u64 + 1)) as usize);
        }
        let (o, seg, ready, topts) = self.layout();
        let tok = ctx.begin(TreeOp::Setup);
        let (a, table) = create_table(ctx, &o, seg, ready)?;
        let set = a.pool().clone();
        let g = set.resolve_range(table, TABLE).map_err(pe)?;
        ctx.done(tok);
        let tok = ctx.begin(TreeOp::Create);
        let mut tree = FPTree::create_with(a.clone(), slot(table, TREE_SLOT), topts).map_err(e)?;
        ctx.done(tok);
        for k in prefill {
            let tok = ctx.begin(TreeOp::Insert(k, k + 1));
            tree.insert(k, k + 1).map_err(e)?;
            ctx.done(tok);
        }
        let scratch = g + SCRATCH * 16 + 8;
        for (phase, rounds) in phases.iter().enumerate() {
            if phase == 1 {
                // A new open: a new lock-word epoch (P-FPT-30), and leaves whose words the
                // first phase left in PM (odd or even) are locked again.
                drop(tree);
                tree = FPTree::open(a.clone(), slot(table, TREE_SLOT)).map_err(e)?;
            }
            let barrier = Barrier::new(2);
            let failed = AtomicBool::new(false);
            let (t, ctx, set, barrier, failed) = (&tree, &*ctx, &set, &barrier, &failed);
            let results: Vec<Result<(), String>> = std::thread::scope(|s| {
                let workers: Vec<_> = (0..2usize)
                    .map(|me| {
                        s.spawn(move || -> Result<(), String> {
                            let mut first_error = Ok(());
                            let mut n = 0u64;
                            for round in rounds {
                                // Every round starts together; after a failure the thread
                                // keeps meeting the barrier but does nothing.
                                barrier.wait();
                                if failed.load(Ordering::Acquire) {
                                    continue;
                                }
                                for &op in &round[me] {
                                    let tok = ctx.begin(op);
                                    // A pause point right after `begin` (changes nothing the
                                    // check reads).
                                    n += 1;
                                    let r = set
                                        .store_u64(scratch + me as u64 * 16, n, Ordering::Relaxed)
                                        .map_err(pe)
                                        .and_then(|()| run(t, op).map_err(e));
                                    match r {
                                        Ok(()) => ctx.done(tok),
                                        Err(x) => {
                                            failed.store(true, Ordering::Release);
                                            first_error = Err(format!("thread {me}: {op:?}: {x}"));
                                            break;
                                        }
                                    }
                                }
                            }
                            first_error
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().unwrap_or_else(|_| Err("a workload thread panicked".into())))
                    .collect()
            });
            for r in results {
                r?;
            }
        }
        tree.check().map_err(e)?;
        let mut owned: Vec<PPtr> = tree.blocks();
        owned.push(table);
        leak_check(&a, owned)
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        if self.persistent { FptreePersistent.recover(image) } else { FptreeFixed.recover(image) }
    }

    fn check(&self, r: &Recovered, m: &ModelView<TreeOp>) -> Result<(), String> {
        let created = m.committed.contains(&TreeOp::Create);
        let pairs = match r {
            Recovered::NoTree(_) if !created => return Ok(()),
            Recovered::NoTree(why) => {
                return Err(format!("the tree's creation committed, found no tree: {why}"));
            }
            Recovered::Tree(pairs) => pairs,
        };
        let got: BTreeMap<u64, u64> = pairs.iter().copied().collect();
        check_model_per_key(&got, m, TreeOp::apply, |op| match *op {
            TreeOp::Insert(k, _) | TreeOp::Update(k, _) | TreeOp::Delete(k) => Some(k),
            _ => None,
        })
    }
}
