//! Crash target `alloc-huge`: PAllocator's huge allocations and its defragmentation on a
//! simulated pool set ([C2]).
//!
//! `alloc-small`'s workload and check (a pointer table in the root, seeded allocations into its
//! slots with stamps, frees, application moves; see `alloc.rs`), with two additions:
//! - about one allocation in six is **huge**: larger than a whole small segment (so it stays
//!   huge whatever the big allocator's capacity), its own segment file with a pending, live or
//!   dead huge header (P-ALLOC-10..11, P-PM-8 and P-PM-9 inside); freeing it removes the file;
//! - every 40 operations `defragment()` releases the free segments (P-ALLOC-6) and punches the
//!   free pages of the segments still in use (a file operation in the sim domain, which zeroes
//!   the page in the working and the durable image): a page punched while a block lived in it
//!   would lose that block's stamp, and a punched page reused without being initialised would
//!   break `check()`.
//!
//! The check after every crash is `alloc-small`'s: the allocator opens (recovery keeps live huge
//! segments and removes pending and dead ones), `check()` passes, the allocated blocks — huge
//! ones included — are exactly the reachable ones, slots match the committed operations (or
//! those plus the one in flight), and committed blocks keep their stamps.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::storage::StorageError as Error;
use ferrite_pmem::CrashImage;

use crate::alloc::{
    AllocOp, AllocSmall, READY, REPLAY_DISARM, Recovered, SEG, SLOTS, TABLE, opts, recover_table,
    slot_loc,
};
use crate::target::{Ctx, ModelView, Target};

const OPS: u64 = 150;

/// The persist of a segment's "may hold holes" hint before its first punch: it decides only
/// whether a page taken later is backed with file space again (`PoolSet::allocate_range`),
/// which the sim domain's files never need (they are always backed), so its loss changes
/// nothing a recovery here can see. On real files its effect is tested by
/// `a_punched_page_is_backed_in_full_before_reuse` (`crates/ferrite/tests/alloc_huge.rs`).
const HOLES_HINT: (&str, &str) = (
    "#P-ALLOC-13",
    "the holes hint only decides whether a taken page is backed again with file space, which the sim's files never need; tested on real files by a_punched_page_is_backed_in_full_before_reuse",
);

/// The target.
#[derive(Debug, Default)]
pub struct AllocHuge;

impl Target for AllocHuge {
    type Op = AllocOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        "alloc-huge"
    }
    fn summary(&self) -> &'static str {
        "PAllocator huge allocations (one segment file each) beside small ones, and defragment() (segment release, page punching), on a sim pool set"
    }
    fn rules(&self) -> &'static [&'static str] {
        // P-ALLOC-11 and -12 commit through P-ALLOC-1..3 (shared transactions: P-ALLOC-7);
        // P-ALLOC-13's punch of free pages only is a file operation, its hint a persist site.
        &[
            "P-ALLOC-1",
            "P-ALLOC-2",
            "P-ALLOC-3",
            "P-ALLOC-4",
            "P-ALLOC-5",
            "P-ALLOC-7",
            "P-ALLOC-9",
            "P-ALLOC-10",
            "P-ALLOC-13",
            "P-PM-8",
            "P-PM-9",
        ]
    }
    fn min_images(&self) -> u64 {
        200
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[REPLAY_DISARM, HOLES_HINT, crate::alloc::SINGLE_THREAD_COMMITTED]
    }

    fn workload(&self, ctx: &mut Ctx<AllocOp>) -> Result<(), String> {
        let e = |e: Error| e.to_string();
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let set = ctx.create_pool_set(&opts())?;
        let t = ctx.begin(AllocOp::Create);
        let a = PAllocator::create(Arc::new(set), 2).map_err(e)?;
        ctx.done(t);
        let t = ctx.begin(AllocOp::Table);
        // The table is itself a huge block (only its first TABLE bytes are used): the run's
        // first commits — where the call-stack-aware explorer crashes with probability 1,
        // since every operation commits through the same persist sites — are then the huge
        // protocol's, so a crash between its header and its transaction is always tested.
        let table = a.allocate(SEG + TABLE, a.root_location()).map_err(e)?;
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
        let (mut huge_allocs, mut punched) = (0u64, 0u64);
        for step in 0..OPS {
            let i = 1 + ctx.rng().next_u64() % 32;
            let op = if held[i as usize] {
                AllocOp::Free { slot: i }
            } else {
                let r = ctx.rng().next_u64();
                let size = match r % 6 {
                    0 => SEG + r % (160 * 1024),
                    1 | 2 => 1 + r % 15_000,
                    _ => 1 + r % 700,
                };
                AllocOp::Alloc { slot: i, size, tag: step + 1 }
            };
            let tok = ctx.begin(op);
            match op {
                AllocOp::Alloc { slot, size, tag } => {
                    let p = a.allocate(size, slot_loc(table, slot)).map_err(e)?;
                    huge_allocs += u64::from(size > SEG);
                    let b = set.resolve_range(p, size.max(8)).map_err(pe)?;
                    set.store_u64(b, tag, Ordering::Relaxed).map_err(pe)?;
                    set.persist(b, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                }
                AllocOp::Free { slot } => a.deallocate(slot_loc(table, slot)).map_err(e)?,
                _ => {}
            }
            ctx.done(tok);
            held[i as usize] = matches!(op, AllocOp::Alloc { .. });
            // Space goes back to the file system: free segment files removed, free pages
            // punched. Neither the blocks nor the model change.
            if step % 40 == 39 {
                punched += a.defragment().map_err(e)?.pages_punched;
            }
            // Every third allocation moves to an empty slot (copy, then clear the original).
            let free_slot = (1..=32).map(|k| 1 + (i - 1 + k) % 32).find(|&j| !held[j as usize]);
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
        // The workload must have exercised what this target is for.
        if huge_allocs == 0 || punched == 0 {
            return Err(format!(
                "the workload made {huge_allocs} huge allocations and punched {punched} pages: nothing to test"
            ));
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
