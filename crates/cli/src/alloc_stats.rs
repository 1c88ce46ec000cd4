//! `ferrite alloc-stats POOL`: open a PAllocator pool set, run its full `check()` and print
//! what it holds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use ferrite::alloc::{PAGE, PAllocator, page_geometry};
use ferrite::storage::StorageError as Error;
use ferrite_pmem::{Options, PoolSet};

#[derive(Debug, Args)]
pub struct AllocStatsArgs {
    /// The pool-set directory.
    pool: PathBuf,
    /// Layout name the pool set was created with.
    #[arg(long, default_value = ferrite_pmem::DEFAULT_LAYOUT)]
    layout: String,
}

/// Opens the pool set (which, like any open, replays armed recovery items and adopts orphan
/// segments), checks the allocator, prints a summary. Exit 0: the check passed; 1: the check
/// found an inconsistency; 2: the pool set or allocator does not open.
pub fn run(args: &AllocStatsArgs) -> anyhow::Result<ExitCode> {
    let opts = Options::default().layout(args.layout.clone());
    let set = PoolSet::open(&args.pool, &opts)
        .with_context(|| format!("opening pool set {}", args.pool.display()))?;
    let a = PAllocator::open(Arc::new(set)).context("opening the allocator")?;
    let set = a.pool();
    println!("pool set      {}", args.pool.display());
    println!("mode          {:?} ({})", set.mode(), set.mode_reason());
    println!(
        "segments      {} of {} KiB (small segments: {} usable pages of {} KiB)",
        set.segment_count(),
        set.segment_size() / 1024,
        a.usable_pages_per_segment(),
        PAGE / 1024
    );
    println!("slots         {}", a.slots());
    let r = match a.check() {
        Ok(r) => r,
        Err(e @ Error::Corrupted { .. }) => {
            println!("check         FAILED: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e).context("checking the allocator"),
    };
    let (active, full, free) = r.segments;
    println!("small segs    {active} active, {full} full, {free} free");
    println!(
        "blocks        {} allocated ({} bytes by class size or units), {} small free in used pages",
        r.allocated_blocks, r.allocated_bytes, r.free_blocks
    );
    println!(
        "big segs      {} (blocks of 4 KiB units up to {} KiB)",
        r.big_segments,
        a.big_capacity() / 1024
    );
    println!(
        "big blocks    {} used ({} bytes), {} free ({} bytes)",
        r.big_used.0, r.big_used.1, r.big_free.0, r.big_free.1
    );
    println!(
        "huge blocks   {} ({} bytes requested, one segment file each)",
        r.huge.len(),
        r.huge_bytes
    );
    for (p, size) in &r.huge {
        println!("  segment {:>6}: {size} bytes", p.segment);
    }
    if !r.pages.is_empty() {
        println!("pages by class (class bytes: pages, blocks per page)");
        for (&size, &pages) in &r.pages {
            let c = ferrite::alloc::class_of(size).unwrap_or(0);
            println!("  {size:>6}: {pages:>6}, {}", page_geometry(c).0);
        }
    }
    println!("check         passed");
    Ok(ExitCode::SUCCESS)
}
