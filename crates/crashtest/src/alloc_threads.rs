//! Crash target `alloc-threads`: PAllocator with two workload threads on two slots, each
//! freeing blocks that the other slot allocated.
//!
//! Thread t binds slot t (`PAllocator::bind_thread_to_slot`) and owns table slots
//! `1 + 24t ..= 24 + 24t` of the pointer table in the root. The threads meet at a barrier
//! before every round, so their operations overlap and both recovery items are armed at once
//! whenever their commits overlap; the tester pauses the other thread at its next persistence
//! event while it tests a crash, so an image can hold two armed items. In even rounds each
//! thread allocates into (or frees) one of its own table slots; in odd rounds each thread frees
//! the block the *other* thread allocated in the round before (most of the time): a free is
//! executed by the slot that owns the block's segment, so thread 0 commits through slot 1's
//! item while thread 1 commits through slot 0's, with page returns and segment hand-offs to
//! the shared free list crossing the slots. The schedule is drawn from the seed before the
//! threads start; which operations overlap is up to the scheduler (runs with threads are not
//! reproducible from the seed; their failures replay from the saved image).
//!
//! The random rounds end with a round that frees every block, then three fixed rounds.
//! Supersession: thread 0 allocates three blocks of one page and frees the first as its last
//! operation (its journal's disarm still pending); thread 1 then frees the second through
//! slot 0 and commits once more: only slot 0's durable `committed` tells recovery that thread
//! 0's journal is superseded (P-ALLOC-1). Hand-off: thread 0 frees the page's last block,
//! which returns the segment to the shared free list (a shared transaction), and stays idle
//! while thread 1 releases every free segment: had thread 0's disarm not been made durable
//! before the global lock went (P-ALLOC-7), recovery would replay it onto a removed segment.
//! Probes (persists at call sites of their own, P-APP-3) make the tester crash right after
//! each of these steps.
//!
//! The check after every crash is the one of `alloc-small` (`check()`, allocated blocks =
//! reachable blocks, stamps), but per table slot: with two operations in flight on different
//! slots, each may or may not have taken effect independently of the other. The target counts
//! the images whose durable state held two armed items ([`AllocThreads::both_armed`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use ferrite::alloc::PAllocator;
use ferrite::storage::StorageError as Error;
use ferrite_pmem::CrashImage;

use crate::alloc::{AllocOp, READY, Recovered, SLOTS, State, TABLE, opts, recover_table, slot_loc};
use crate::target::{Ctx, ModelView, Target};

/// Rounds of the workload.
const ROUNDS: u64 = 48;
/// Table slots per thread, and operations per thread and round.
const PER_THREAD: u64 = 24;
const BATCH: u64 = 6;
/// First "inbox" table slot: where a thread moves a block of the other thread before it
/// frees it.
const INBOX: u64 = 100;
/// First spare table slot: where a thread moves some of its own blocks right after
/// allocating them.
const SPARE: u64 = 50;
/// Table slots whose offset words the threads use as pause points (their segment words stay
/// null).
const SCRATCH: u64 = 250;

/// The target.
#[derive(Debug, Default)]
pub struct AllocThreads {
    images: AtomicU64,
    both_armed: AtomicU64,
}

impl AllocThreads {
    /// Images recovered so far, and how many of them held two armed recovery items.
    pub fn both_armed(&self) -> (u64, u64) {
        (self.images.load(Ordering::Relaxed), self.both_armed.load(Ordering::Relaxed))
    }
}

/// The schedule: `steps[round][thread]`, each a batch of operations.
fn schedule(rng: &mut ferrite_pmem::SplitMix64) -> Vec<[Vec<AllocOp>; 2]> {
    let mut held = vec![false; SLOTS as usize];
    let mut steps = Vec::new();
    for r in 0..ROUNDS {
        let mut round: [Vec<AllocOp>; 2] = [Vec::new(), Vec::new()];
        for (t, ops) in round.iter_mut().enumerate() {
            let t = t as u64;
            for k in 0..BATCH {
                let j = (r / 2 * BATCH + k) % PER_THREAD;
                if r % 2 == 0 {
                    let slot = 1 + t * PER_THREAD + j;
                    if held[slot as usize] {
                        ops.push(AllocOp::Free { slot });
                        held[slot as usize] = false;
                        continue;
                    }
                    let x = rng.next_u64();
                    let size = match x % 8 {
                        0 => 4097 + x % 11_000,
                        1..=2 => 1 + x % 4096,
                        _ => 1 + x % 600,
                    };
                    ops.push(AllocOp::Alloc { slot, size, tag: (r * 2 + t) * BATCH + k + 1 });
                    held[slot as usize] = true;
                    // A third of the allocations move at once to a spare slot (copy, then
                    // clear), before the slot's next commit: a replay of the applied
                    // allocation would put the block back (what catches a disarm that never
                    // became durable).
                    let spare = SPARE + t * PER_THREAD + j;
                    if x.is_multiple_of(3) && !held[spare as usize] {
                        ops.push(AllocOp::Copy { from: slot, to: spare });
                        ops.push(AllocOp::Clear { slot });
                        held[slot as usize] = false;
                        held[spare as usize] = true;
                    }
                } else {
                    // Blocks the other thread's slot allocated: moved into this thread's
                    // inbox (copy, then clear, as a structure takes a block out of its
                    // micro-log), then freed from there (by the other slot, their owner).
                    let other = 1 - t;
                    for from in [1 + other * PER_THREAD + j, SPARE + other * PER_THREAD + j] {
                        if held[from as usize] && !rng.next_u64().is_multiple_of(4) {
                            let to = INBOX + t * PER_THREAD + j;
                            ops.push(AllocOp::Copy { from, to });
                            ops.push(AllocOp::Clear { slot: from });
                            ops.push(AllocOp::Free { slot: to });
                            held[from as usize] = false;
                        }
                    }
                }
            }
        }
        steps.push(round);
    }
    // A round that frees every block each thread still holds.
    let free_all = |held: &mut Vec<bool>| {
        let mut round: [Vec<AllocOp>; 2] = [Vec::new(), Vec::new()];
        for (t, ops) in round.iter_mut().enumerate() {
            let t = t as u64;
            for base in [1, SPARE] {
                for slot in base + t * PER_THREAD..base + (t + 1) * PER_THREAD {
                    if std::mem::take(&mut held[slot as usize]) {
                        ops.push(AllocOp::Free { slot });
                    }
                }
            }
        }
        round
    };
    steps.push(free_all(&mut held));
    // Supersession (P-ALLOC-1's `committed`): thread 0 allocates three blocks of one page and
    // frees the first as its last operation of the round (a lazy disarm, no fence after it);
    // then thread 1 frees the second through slot 0 (their owner) and allocates one block
    // (its commit fences, so its own journal of slot 0 is disarmed and overwritten). Thread
    // 0's journal is still armed, and only slot 0's durable `committed` says that a later
    // operation changed the page since. The third block keeps the page in use (a page or
    // segment move would flush `committed`'s line for other reasons).
    let tag = (ROUNDS * 2 + 2) * BATCH + 1;
    let inbox = INBOX + PER_THREAD;
    let (a, b, c) = (1 + 3 * PER_THREAD / 4, 2 + 3 * PER_THREAD / 4, 3 + 3 * PER_THREAD / 4);
    let mine = 1 + PER_THREAD + PER_THREAD - 1;
    for x in [a, b, c, mine, inbox] {
        assert!(!held[x as usize], "the supersession round's slots are free");
    }
    steps.push([
        vec![
            AllocOp::Alloc { slot: a, size: 64, tag },
            AllocOp::Alloc { slot: b, size: 64, tag: tag + 1 },
            AllocOp::Alloc { slot: c, size: 64, tag: tag + 2 },
            AllocOp::Free { slot: a },
        ],
        Vec::new(),
    ]);
    steps.push([
        Vec::new(),
        vec![
            AllocOp::Copy { from: b, to: inbox },
            AllocOp::Clear { slot: b },
            AllocOp::Free { slot: inbox },
            AllocOp::Alloc { slot: mine, size: 64, tag: tag + 3 },
        ],
    ]);
    // Hand-off (P-ALLOC-7): thread 0 frees the page's last block as its last operation, so
    // the page and its segment go back to the shared free list in a shared transaction; then
    // (in the release phase, see `workload`) thread 1 releases every free segment while
    // thread 0 is idle. Had thread 0's journal stayed armed (a disarm not made durable before
    // the global lock went), recovery would replay it: the free list's head back to a removed
    // segment.
    steps.push([vec![AllocOp::Free { slot: c }], vec![AllocOp::Free { slot: mine }]]);
    steps
}

impl Target for AllocThreads {
    type Op = AllocOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "alloc-threads"
    }
    fn summary(&self) -> &'static str {
        "PAllocator with two threads on two slots (both recovery items armed at once), each freeing blocks the other slot allocated"
    }
    fn rules(&self) -> &'static [&'static str] {
        &[
            "P-ALLOC-1",
            "P-ALLOC-2",
            "P-ALLOC-3",
            "P-ALLOC-4",
            "P-ALLOC-5",
            "P-ALLOC-7",
            "P-ALLOC-8",
            "P-ALLOC-9",
            "P-PM-8",
        ]
    }
    fn reproducible(&self) -> bool {
        false // two workload threads: see the module docs
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[
            crate::alloc::REPLAY_DISARM,
            ("#P-APP-3", "a probe: a persist of a word nothing reads, made only to be crashed at"),
            (
                "#P-ALLOC-8",
                "the fence of a thread that exits: it makes the thread's last disarm durable, which matters only if another thread later leases its record or moves a block it allocated; in this workload each thread's last operation is a free (whose replay is conditional on the location still holding the block) or an allocation followed by its stamp's own fence, and no thread starts after them (`a_thread_that_exits_makes_its_last_allocation_final` in crates/ferrite/tests/alloc.rs shows the fence needed)",
            ),
        ]
    }

    fn workload(&self, ctx: &mut Ctx<AllocOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let steps = schedule(ctx.rng());
        let set = ctx.create_pool_set(&opts())?;
        // The table lives in slot 1 (not the slot of whatever CPU this thread is on), so that
        // slot 0's segments are all free after the last random round.
        PAllocator::bind_thread_to_slot(1);
        let t = ctx.begin(AllocOp::Create);
        let a = PAllocator::create(Arc::new(set), 2).map_err(e)?;
        ctx.done(t);
        let t = ctx.begin(AllocOp::Table);
        let table = a.allocate(TABLE, a.root_location()).map_err(e)?;
        let set = a.pool().clone();
        let g = set.resolve_range(table, TABLE).map_err(pe)?;
        for i in 1..SLOTS {
            set.store_u64(g + i * 16, u64::MAX, Ordering::Relaxed).map_err(pe)?;
        }
        set.persist(g, TABLE).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        set.store_u64(g, READY, Ordering::Release).map_err(pe)?;
        set.persist(g, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        ctx.done(t);
        // The offset words of the (null) table slots SCRATCH and SCRATCH + 1.
        let scratch = g + SCRATCH * 16 + 8;
        // A probe: a persist of the (null) table slot SCRATCH + 2's offset word at a call site
        // of its own (each call of `probe` is a site: `#[track_caller]`). The tester crashes
        // every first visit of a site (hot sites only now and then), so a probe makes the
        // crash right after a given step certain instead of up to the schedule and the
        // sampling.
        #[track_caller]
        fn probe(set: &ferrite_pmem::PoolSet, w: u64, v: u64) -> Result<(), String> {
            set.store_u64(w, v, Ordering::Relaxed).map_err(|e| e.to_string())?;
            set.persist_rule("P-APP-3", w, 8).map_err(|e| e.to_string()) // ORDER(P-APP-3): a crash point of its own (the word is never read)
        }
        let probe_word = scratch + 32;
        // After the table is published, before the threads start.
        probe(&set, probe_word, 1)?;
        let barrier = Barrier::new(2);
        let failed = AtomicBool::new(false);
        let ctx = &*ctx;
        let (a, set, steps, barrier, failed) = (&a, &set, &steps, &barrier, &failed);
        let run = move |op: AllocOp| -> Result<(), String> {
            match op {
                AllocOp::Alloc { slot, size, tag } => {
                    let p = a.allocate(size, slot_loc(table, slot)).map_err(e)?;
                    let b = set.resolve_range(p, 8).map_err(pe)?;
                    set.store_u64(b, tag, Ordering::Relaxed).map_err(pe)?;
                    set.persist(b, 8).map_err(pe) // ORDER(P-APP-1): workload data durable before it counts as done or is published
                }
                AllocOp::Free { slot } => a.deallocate(slot_loc(table, slot)).map_err(e),
                AllocOp::Copy { from, to } => {
                    let f = set.resolve(slot_loc(table, from)).map_err(pe)?;
                    let t = set.resolve(slot_loc(table, to)).map_err(pe)?;
                    let p = set.load_pptr(f).map_err(pe)?;
                    set.persist_pptr(t, p).map_err(pe) // ORDER(P-APP-1): workload data durable before it counts as done or is published
                }
                AllocOp::Clear { slot } => {
                    let f = set.resolve(slot_loc(table, slot)).map_err(pe)?;
                    set.persist_pptr_null(f).map_err(pe) // ORDER(P-APP-1): workload data durable before it counts as done or is published
                }
                AllocOp::Create | AllocOp::Table => Ok(()),
            }
        };
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2usize)
                .map(|me| {
                    s.spawn(move || -> Result<(), String> {
                        PAllocator::bind_thread_to_slot(me as u32);
                        let mut first_error = Ok(());
                        let mut tok_count = 0u64;
                        for (r, round) in steps.iter().enumerate() {
                            // Every round starts together; after a failure the thread keeps
                            // meeting the barrier (so the other never waits forever) but
                            // does nothing.
                            barrier.wait();
                            if failed.load(Ordering::Acquire) {
                                continue;
                            }
                            for &op in &round[me] {
                                let tok = ctx.begin(op);
                                // A pause point right after `begin`: while the other thread
                                // tests a crash, this thread must not make an effect of an
                                // operation that began after that crash's model was taken
                                // (a store is applied before its event pauses the thread;
                                // this one changes nothing the check reads).
                                let paused = set
                                    .store_u64(
                                        scratch + me as u64 * 16,
                                        tok_count,
                                        Ordering::Relaxed,
                                    )
                                    .map_err(pe);
                                tok_count += 1;
                                match paused.and_then(|()| run(op)) {
                                    Ok(()) => ctx.done(tok),
                                    Err(x) => {
                                        failed.store(true, Ordering::Release);
                                        first_error = Err(format!("thread {me}: {op:?}: {x}"));
                                        break;
                                    }
                                }
                            }
                            // The supersession round (the last but one): thread 0 is idle at
                            // the barrier with its disarm pending.
                            if me == 1 && r + 2 == steps.len() && first_error.is_ok() {
                                first_error = probe(set, probe_word, 2);
                            }
                        }
                        // The release phase (see `schedule`): thread 1 releases every free
                        // segment while thread 0, whose last operation returned a segment,
                        // waits; then a probe crashes right after it.
                        barrier.wait();
                        if me == 1 && first_error.is_ok() && !failed.load(Ordering::Acquire) {
                            first_error = match a.release_free_segments(0).map_err(e) {
                                Ok(0) => Err("the release phase found no free segment".into()),
                                Ok(_) => probe(set, probe_word, 3),
                                Err(x) => Err(x),
                            };
                        }
                        barrier.wait();
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
        a.check().map_err(e)?;
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        self.images.fetch_add(1, Ordering::Relaxed);
        recover_table(image, |set| {
            if PAllocator::armed_items(set).is_ok_and(|v| v.len() == 2) {
                self.both_armed.fetch_add(1, Ordering::Relaxed);
            }
        })
    }

    fn check(&self, r: &Recovered, m: &ModelView<AllocOp>) -> Result<(), String> {
        let mut without = State::default();
        for op in &m.committed {
            without.apply(op);
        }
        let (table, slots, leak) = match r {
            Recovered::None(_) if !without.created => return Ok(()),
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
        let table_in_flight = m.in_flight.iter().any(|op| matches!(op, AllocOp::Table));
        if table != without.table && !table_in_flight {
            return Err(format!("root pointer set: {table}, expected {}", without.table));
        }
        // Per table slot: the committed state, or that plus the one in-flight operation that
        // writes the slot (a thread's operations on a slot are sequential, and an operation
        // in flight reads only slots no other operation in flight writes).
        for s in 1..SLOTS {
            let got = slots.get(&s).copied();
            let want = without.slots.get(&s).map(|&(_, tag)| tag);
            let flight = m.in_flight.iter().find(|op| match op {
                AllocOp::Alloc { slot, .. } | AllocOp::Free { slot } | AllocOp::Clear { slot } => {
                    *slot == s
                }
                AllocOp::Copy { to, .. } => *to == s,
                _ => false,
            });
            let with = flight.map(|op| {
                let mut st = without.clone();
                st.apply(op);
                st.slots.get(&s).map(|&(_, tag)| tag)
            });
            // A block allocated in flight may not be stamped yet.
            let unstamped = matches!(flight, Some(AllocOp::Alloc { .. }));
            let same = |w: Option<u64>| match (got, w) {
                (None, None) => true,
                (Some(stamp), Some(tag)) => stamp == tag,
                _ => false,
            };
            let ok = same(want)
                || with.is_some_and(|w| same(w) || (unstamped && got.is_some() && w.is_some()));
            if !ok {
                return Err(format!(
                    "table slot {s}: holds a block stamped {got:?}, expected {want:?} (committed) or {with:?} (with the in-flight {flight:?})"
                ));
            }
        }
        Ok(())
    }
}
