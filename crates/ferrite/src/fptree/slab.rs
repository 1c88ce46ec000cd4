//! The leaf allocator interface of the FPTree, and a simple crash-safe slab that implements it
//! until PAllocator does (`../shared/specs/scm-and-pallocator.md` §2.4: the leak-free
//! interface with reference passing).
//!
//! ```text
//! slab at `base` (64-byte aligned) in a Space
//!   line 0   header: magic "FERRSLAB", version, block size, block count, blocks offset, crc
//!   line 1   recovery item: op (0 none, 1 alloc, 2 free), block, destination
//!   line 2.. allocation bitmap, one bit per block (rounded up to whole lines)
//!   then     blocks, each `block_size` bytes (a multiple of 64), 64-byte aligned
//! ```
//!
//! # Invariants
//! - S1: a block is allocated iff its bitmap bit is set; the DRAM free list holds exactly the
//!   blocks whose bit is clear.
//! - S2: when no operation is in flight the recovery item's op is 0.
//! - S3: `allocate(into)` requires `*into == 0`, so recovery can tell a finished allocation
//!   (`*into == block`) from an unfinished one.
//!
//! # Ordering
//! - P-SLAB-1: the recovery item's block and destination are persisted before its op word, and
//!   the op word before anything it protects.
//! - P-SLAB-2 (allocate): bitmap bit set and persisted, then the destination written and
//!   persisted (reference passing), then the op cleared.
//! - P-SLAB-3 (deallocate): the destination nulled and persisted, then the bit cleared and
//!   persisted, then the op cleared.
//! - Recovery completes an in-flight free, and rolls back an allocation whose destination does
//!   not hold the block (the block was never handed out). A crash at any point leaks nothing and
//!   frees nothing twice.
//!
//! # Concurrency
//! Single-threaded (`&mut self`).

use std::sync::atomic::Ordering;

use ferrite_pmem::Space;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::storage::{StorageError, StorageResult};

/// Where leaves come from. `allocate` writes the new block's offset into the persistent
/// location `into` (which must hold 0) and persists it before returning; `deallocate` nulls
/// `from` persistently. A crash at any point leaks nothing: the allocator's own recovery runs
/// before the tree's.
pub trait LeafAllocator {
    /// Size of every block handed out.
    fn block_size(&self) -> u64;
    /// Allocates a block and durably stores its offset at `into` (which must hold 0).
    fn allocate(&mut self, space: &Space, into: u64) -> StorageResult<u64>;
    /// Frees the block whose offset is stored at `from` and durably stores 0 there.
    fn deallocate(&mut self, space: &Space, from: u64) -> StorageResult<()>;
    /// Every allocated block, when the allocator can enumerate them (for leak checks).
    fn allocated(&self) -> Option<Vec<u64>>;
}

const SLAB_MAGIC: u64 = u64::from_le_bytes(*b"FERRSLAB");
const SLAB_VERSION: u32 = 1;
const OP_NONE: u64 = 0;
const OP_ALLOC: u64 = 1;
const OP_FREE: u64 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
struct SlabHeader {
    magic: u64,
    version: u32,
    block_size: u32,
    blocks: u64,
    blocks_off: u64,
    checksum: u32,
    reserved: [u8; 28],
}
const _: () = assert!(size_of::<SlabHeader>() == 64);

impl SlabHeader {
    fn crc(&self) -> u32 {
        let mut c = *self;
        c.magic = SLAB_MAGIC;
        c.checksum = 0;
        crc32c::crc32c(&c.as_bytes()[..36])
    }
}

/// A slab of equal-sized blocks in a region of a space (see the module docs).
#[derive(Debug)]
pub struct Slab {
    base: u64,
    block_size: u64,
    blocks: u64,
    blocks_off: u64,
    free: Vec<u64>,
}

fn corrupt(what: impl Into<String>, at: u64) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("slab at offset {at}") }
}

impl Slab {
    const REC: u64 = 64;
    const BITMAP: u64 = 128;

    fn op_off(&self) -> u64 {
        self.base + Self::REC
    }

    /// Formats a slab of `len` bytes at `base` (64-aligned) with blocks of `block_size` bytes
    /// (a multiple of 64). Whatever the region held is overwritten; until the magic is
    /// persisted last, the slab reads as "not created" (magic 0) or as the old content.
    pub fn create(space: &Space, base: u64, len: u64, block_size: u64) -> StorageResult<Slab> {
        if !base.is_multiple_of(64)
            || block_size == 0
            || !block_size.is_multiple_of(64)
            || block_size > u64::from(u32::MAX)
        {
            return Err(StorageError::InvalidArgument(format!(
                "slab at {base} with block size {block_size}: both must be multiples of 64"
            )));
        }
        // blocks b must satisfy: 128 + ceil(b/512)*64 + b*block_size <= len
        let mut blocks = len.saturating_sub(Self::BITMAP) / block_size;
        while blocks > 0 && Self::BITMAP + blocks.div_ceil(512) * 64 + blocks * block_size > len {
            blocks -= 1;
        }
        if blocks == 0 {
            return Err(StorageError::InvalidArgument(format!(
                "slab of {len} bytes holds no {block_size}-byte block"
            )));
        }
        let blocks_off = base + Self::BITMAP + blocks.div_ceil(512) * 64;
        // The first persist writes the whole header page with magic 0: a torn image reads as
        // the old content or as a slab under creation, never as a valid slab.
        space.fill(base, blocks_off - base, 0)?;
        let mut h = SlabHeader {
            magic: 0,
            version: SLAB_VERSION,
            block_size: block_size as u32,
            blocks,
            blocks_off,
            checksum: 0,
            reserved: [0; 28],
        };
        h.checksum = h.crc();
        space.write_struct(base, &h)?;
        space.persist_rule("P-SLAB-1", base, blocks_off - base)?; // ORDER(P-SLAB-1): header, item and bitmap before the magic
        space.store_u64(base, SLAB_MAGIC, Ordering::Release)?;
        space.persist_rule("P-SLAB-1", base, 8)?; // ORDER(P-SLAB-1): the magic commits the slab
        let free = (0..blocks).rev().map(|i| blocks_off + i * block_size).collect();
        Ok(Slab { base, block_size, blocks, blocks_off, free })
    }

    /// Opens the slab at `base`, finishing or rolling back the operation in flight (recovery)
    /// and rebuilding the free list from the bitmap.
    pub fn open(space: &Space, base: u64) -> StorageResult<Slab> {
        let h: SlabHeader = space.read_struct(base)?;
        if h.magic != SLAB_MAGIC {
            return Err(corrupt(format!("bad magic {:#x}", h.magic), base));
        }
        if h.version != SLAB_VERSION {
            return Err(StorageError::Incompatible {
                what: format!("slab version {} (this build reads {SLAB_VERSION})", h.version),
                at: format!("slab at offset {base}"),
            });
        }
        if h.checksum != h.crc() {
            return Err(corrupt("header checksum mismatch", base));
        }
        let block_size = u64::from(h.block_size);
        // Checked arithmetic throughout: these fields may be garbage.
        let fits = (|| {
            let bitmap_end =
                h.blocks.div_ceil(512).checked_mul(64)?.checked_add(base + Self::BITMAP)?;
            let end = h.blocks.checked_mul(block_size)?.checked_add(h.blocks_off)?;
            Some(
                h.blocks_off == bitmap_end
                    && block_size.is_multiple_of(64)
                    && block_size > 0
                    && end <= space.len(),
            )
        })()
        .unwrap_or(false);
        if !fits {
            return Err(corrupt("header geometry does not fit the space", base));
        }
        let mut slab =
            Slab { base, block_size, blocks: h.blocks, blocks_off: h.blocks_off, free: Vec::new() };
        slab.recover(space)?;
        for i in (0..slab.blocks).rev() {
            if !slab.bit(space, i)? {
                slab.free.push(slab.blocks_off + i * block_size);
            }
        }
        Ok(slab)
    }

    fn index_of(&self, block: u64) -> Option<u64> {
        let rel = block.checked_sub(self.blocks_off)?;
        (rel % self.block_size == 0 && rel / self.block_size < self.blocks)
            .then_some(rel / self.block_size)
    }

    fn bit(&self, space: &Space, i: u64) -> StorageResult<bool> {
        let w = space.load_u64(self.base + Self::BITMAP + i / 64 * 8, Ordering::Acquire)?;
        Ok(w & (1 << (i % 64)) != 0)
    }

    fn set_bit(&self, space: &Space, i: u64, on: bool) -> StorageResult<()> {
        let word = self.base + Self::BITMAP + i / 64 * 8;
        if on {
            space.fetch_or_u64(word, 1 << (i % 64), Ordering::AcqRel)?;
        } else {
            space.fetch_and_u64(word, !(1 << (i % 64)), Ordering::AcqRel)?;
        }
        Ok(space.persist_rule("P-SLAB-2", word, 8)?) // ORDER(P-SLAB-2): the bitmap word
    }

    fn log(&self, space: &Space, op: u64, block: u64, dest: u64) -> StorageResult<()> {
        let rec = self.op_off();
        space.store_u64(rec + 8, block, Ordering::Relaxed)?;
        space.store_u64(rec + 16, dest, Ordering::Relaxed)?;
        space.persist_rule("P-SLAB-1", rec + 8, 16)?; // ORDER(P-SLAB-1): item body before its op
        space.store_u64(rec, op, Ordering::Release)?;
        Ok(space.persist_rule("P-SLAB-1", rec, 8)?) // ORDER(P-SLAB-1): the op arms the item
    }

    fn clear_log(&self, space: &Space) -> StorageResult<()> {
        space.store_u64(self.op_off(), OP_NONE, Ordering::Release)?;
        Ok(space.persist_rule("P-SLAB-1", self.op_off(), 8)?) // ORDER(P-SLAB-1): retire the item last
    }

    fn recover(&mut self, space: &Space) -> StorageResult<()> {
        let rec = self.op_off();
        let op = space.load_u64(rec, Ordering::Acquire)?;
        if op == OP_NONE {
            return Ok(());
        }
        let block = space.load_u64(rec + 8, Ordering::Acquire)?;
        let dest = space.load_u64(rec + 16, Ordering::Acquire)?;
        let i = self
            .index_of(block)
            .ok_or_else(|| corrupt(format!("recovery item names block {block}"), self.base))?;
        match op {
            OP_ALLOC => {
                // Finished iff the destination holds the block; otherwise it was never handed
                // out and its bit (set or not) is cleared.
                if space.load_u64(dest, Ordering::Acquire)? != block {
                    self.set_bit(space, i, false)?;
                }
            }
            OP_FREE => {
                if space.load_u64(dest, Ordering::Acquire)? == block {
                    space.store_u64(dest, 0, Ordering::Release)?;
                    space.persist_rule("P-SLAB-3", dest, 8)?; // ORDER(P-SLAB-3): redo: null the reference first
                }
                self.set_bit(space, i, false)?;
            }
            other => return Err(corrupt(format!("recovery item op {other}"), self.base)),
        }
        self.clear_log(space)
    }

    /// Number of blocks in the slab.
    pub fn capacity(&self) -> u64 {
        self.blocks
    }

    /// Number of free blocks.
    pub fn free_blocks(&self) -> u64 {
        self.free.len() as u64
    }

    /// `(start, end)` of the slab's region in its space.
    pub fn extent(&self) -> (u64, u64) {
        (self.base, self.blocks_off + self.blocks * self.block_size)
    }
}

impl LeafAllocator for Slab {
    fn block_size(&self) -> u64 {
        self.block_size
    }

    fn allocate(&mut self, space: &Space, into: u64) -> StorageResult<u64> {
        if space.load_u64(into, Ordering::Acquire)? != 0 {
            return Err(StorageError::InvalidArgument(format!(
                "allocate into {into}: it does not hold 0"
            )));
        }
        let block = *self.free.last().ok_or(StorageError::PoolFull {
            at: format!("slab at offset {}", self.base),
            requested: self.block_size,
            available: 0,
        })?;
        let i = self
            .index_of(block)
            .ok_or_else(|| corrupt("free list holds a foreign block", self.base))?;
        self.log(space, OP_ALLOC, block, into)?;
        self.set_bit(space, i, true)?;
        space.store_u64(into, block, Ordering::Release)?;
        space.persist_rule("P-SLAB-2", into, 8)?; // ORDER(P-SLAB-2): hand the block out (reference passing)
        self.clear_log(space)?;
        self.free.pop();
        Ok(block)
    }

    fn deallocate(&mut self, space: &Space, from: u64) -> StorageResult<()> {
        let block = space.load_u64(from, Ordering::Acquire)?;
        let i = self.index_of(block).ok_or_else(|| {
            StorageError::InvalidArgument(format!(
                "deallocate from {from}: {block} is not a block of this slab"
            ))
        })?;
        if !self.bit(space, i)? {
            return Err(StorageError::InvalidArgument(format!(
                "deallocate from {from}: block {block} is not allocated"
            )));
        }
        self.log(space, OP_FREE, block, from)?;
        space.store_u64(from, 0, Ordering::Release)?;
        space.persist_rule("P-SLAB-3", from, 8)?; // ORDER(P-SLAB-3): the reference goes before the block
        self.set_bit(space, i, false)?;
        self.clear_log(space)?;
        self.free.push(block);
        Ok(())
    }

    fn allocated(&self) -> Option<Vec<u64>> {
        let mut free = self.free.clone();
        free.sort_unstable();
        Some(
            (0..self.blocks)
                .map(|i| self.blocks_off + i * self.block_size)
                .filter(|b| free.binary_search(b).is_err())
                .collect(),
        )
    }
}
