//! Crash target `alloc-big`: PAllocator's big allocator on a simulated pool set.
//!
//! Segments are the tiny ones of `alloc-small` (five 64 KiB pages: 80 units of 4 KiB, the
//! first holding the header and the unit table, so a big segment holds 79 units = 316 KiB).
//! The workload allocates mostly big blocks (16 KiB … 160 KiB, now and then a whole segment)
//! and some small ones into a table of persistent pointers and frees them again, so big
//! blocks split, coalesce with one or both neighbours, move between size buckets, and big
//! segments are taken from the free-segment list (or created) and returned to it whole, many
//! times, alternating with small use of the same segments. Every 25 operations the free
//! segments are released to the file system. A third of the allocations are moved by the
//! application (copy to an empty slot, then clear), which is what exposes a stale replay.
//!
//! The model, recovery and check are `alloc-small`'s (`alloc.rs`): after every crash the
//! allocator opens, `check()` passes (it covers the big segments' unit tables and bucket
//! lists), the allocated blocks are exactly the table and the blocks it points to, the slots
//! match the committed operations (or those plus the one in flight) and committed blocks
//! keep their stamps.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::{MAX_SMALL, PAllocator};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::CrashImage;

use crate::alloc::{
    AllocOp, AllocSmall, READY, Recovered, SLOTS, TABLE, opts, recover_table, slot_loc,
};
use crate::target::{Ctx, ModelView, Target};

const OPS: u64 = 80;
/// Table slots the workload uses (1..=USED).
const USED: u64 = 40;

/// The target.
#[derive(Debug, Default)]
pub struct AllocBig;

impl Target for AllocBig {
    type Op = AllocOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "alloc-big"
    }
    fn summary(&self) -> &'static str {
        "PAllocator big allocator on a sim pool set: splits, coalescing, bucket moves, big segments taken and returned"
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-ALLOC-1", "P-ALLOC-2", "P-ALLOC-3", "P-ALLOC-4", "P-ALLOC-5", "P-PM-8", "P-PM-9"]
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[
            crate::alloc::REPLAY_DISARM,
            crate::alloc::SINGLE_THREAD_SYNC_DISARM,
            crate::alloc::SINGLE_THREAD_COMMITTED,
        ]
    }

    fn workload(&self, ctx: &mut Ctx<AllocOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let set = ctx.create_pool_set(&opts())?;
        let t = ctx.begin(AllocOp::Create);
        let a = PAllocator::create(Arc::new(set), 2).map_err(e)?;
        ctx.done(t);
        PAllocator::bind_thread_to_slot(0);
        let cap = a.big_capacity();
        let t = ctx.begin(AllocOp::Table);
        let table = a.allocate(TABLE, a.root_location()).map_err(e)?;
        let set = a.pool();
        let g = set.resolve_range(table, TABLE).map_err(pe)?;
        for i in 1..SLOTS {
            set.store_u64(g + i * 16, u64::MAX, Ordering::Relaxed).map_err(pe)?;
        }
        set.persist(g, TABLE).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        set.store_u64(g, READY, Ordering::Release).map_err(pe)?;
        set.persist(g, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
        ctx.done(t);
        let mut held = vec![false; SLOTS as usize];
        let mut bigs = 0u64;
        for step in 0..OPS {
            if step % 50 == 0 {
                // Slot 1 takes a segment for one small block and returns it when the block is
                // freed: the next big segment taken is one whose unit table small use may have
                // dirtied (it is zeroed first).
                PAllocator::bind_thread_to_slot(1);
                let s = SLOTS - 1;
                for op in [AllocOp::Alloc { slot: s, size: 100, tag: 0 }, AllocOp::Free { slot: s }]
                {
                    let tok = ctx.begin(op);
                    match op {
                        AllocOp::Alloc { slot, size, .. } => {
                            a.allocate(size, slot_loc(table, slot)).map_err(e)?;
                        }
                        _ => a.deallocate(slot_loc(table, s)).map_err(e)?,
                    }
                    ctx.done(tok);
                }
                PAllocator::bind_thread_to_slot(0);
            }
            let i = 1 + ctx.rng().next_u64() % USED;
            let op = if held[i as usize] {
                AllocOp::Free { slot: i }
            } else {
                let r = ctx.rng().next_u64();
                let size = match r % 16 {
                    0 => cap - r % (3 * 4096),
                    1..=3 => 1 + r % MAX_SMALL,
                    _ => MAX_SMALL + 1 + r % (160 * 1024),
                };
                AllocOp::Alloc { slot: i, size, tag: step + 1 }
            };
            let tok = ctx.begin(op);
            match op {
                AllocOp::Alloc { slot, size, tag } => {
                    let p = a.allocate(size, slot_loc(table, slot)).map_err(e)?;
                    bigs += u64::from(size > MAX_SMALL);
                    let b = set.resolve_range(p, size.max(8)).map_err(pe)?;
                    set.store_u64(b, tag, Ordering::Relaxed).map_err(pe)?;
                    set.persist(b, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                }
                AllocOp::Free { slot } => a.deallocate(slot_loc(table, slot)).map_err(e)?,
                _ => {}
            }
            ctx.done(tok);
            held[i as usize] = matches!(op, AllocOp::Alloc { .. });
            if step % 25 == 24 {
                a.release_free_segments(0).map_err(e)?;
            }
            let free_slot = (1..=USED).map(|k| 1 + (i - 1 + k) % USED).find(|&j| !held[j as usize]);
            if let (AllocOp::Alloc { .. }, 0, Some(j)) = (op, step % 3, free_slot) {
                let from = set.resolve(slot_loc(table, i)).map_err(pe)?;
                let to = set.resolve(slot_loc(table, j)).map_err(pe)?;
                let tok = ctx.begin(AllocOp::Copy { from: i, to: j });
                let p = set.load_pptr(from).map_err(pe)?;
                set.persist_pptr(to, p).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                ctx.done(tok);
                let tok = ctx.begin(AllocOp::Clear { slot: i });
                set.persist_pptr_null(from).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                ctx.done(tok);
                held[i as usize] = false;
                held[j as usize] = true;
            }
        }
        a.check().map_err(e)?;
        if bigs == 0 {
            return Err("the workload made no big allocation".into());
        }
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        recover_table(image, |_| {})
    }

    fn check(&self, r: &Recovered, m: &ModelView<AllocOp>) -> Result<(), String> {
        AllocSmall.check(r, m)
    }
}
