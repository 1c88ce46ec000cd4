//! SOFORT's access to the pool: the allocator, staged allocations (P-SOF-2) and two-level
//! block arrays (the MVCC column, value columns, value heaps) with a lock-free DRAM mirror of
//! their block addresses (`docs/design/sofort.md` §2, §2.2).
//!
//! # Invariants
//! - A structural block is reachable from its target only once initialised and persisted; a
//!   block left in the staging slot by a crash is freed by [`Pm::recover_staging`] unless its
//!   target holds it.
//! - An array's blocks are created in index order, so its published blocks are a prefix
//!   `0..count`; the mirror holds the global offset of every published block (0: none).
//!
//! # Ordering
//! P-SOF-2 for every staged allocation (see [`Pm::staged_alloc`]).
//!
//! # Concurrency
//! Staged allocations serialize on one mutex; an array grows under its own mutex (taken
//! before the staging mutex); mirror reads are lock-free (`Acquire` on a published offset).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ferrite_pmem::{PPtr, PoolSet, Space};

use super::layout::*;
use crate::alloc::PAllocator;
use crate::storage::{StorageError, StorageResult};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn corrupt(what: impl Into<String>, at: impl Into<String>) -> StorageError {
    StorageError::corrupted(what, at)
}

/// The pool, the allocator and the catalog.
#[derive(Debug)]
pub(super) struct Pm {
    /// Shared with the store's PM indexes (FPTrees hold the allocator they grow from).
    pub alloc: Arc<PAllocator>,
    /// The catalog block.
    pub catalog: PPtr,
    /// Its global offset.
    pub cat: u64,
    staging: Mutex<()>,
}

impl Pm {
    pub fn new(alloc: Arc<PAllocator>, catalog: PPtr) -> StorageResult<Pm> {
        let cat = alloc.pool().resolve_range(catalog, CATALOG_BYTES)?;
        Ok(Pm { alloc, catalog, cat, staging: Mutex::new(()) })
    }

    #[inline]
    pub fn set(&self) -> &PoolSet {
        self.alloc.pool()
    }

    #[inline]
    pub fn s(&self) -> &Space {
        self.alloc.pool()
    }

    /// The global offset of `len` bytes at `p`; a bad pointer read from PM is `Corrupted`.
    pub fn at(&self, p: PPtr, len: u64, what: &str) -> StorageResult<u64> {
        self.set()
            .resolve_range(p, len)
            .map_err(|e| corrupt(format!("{what}: pointer {p:?}: {e}"), "SOFORT"))
    }

    /// A pointer inside the catalog.
    pub fn in_catalog(&self, off: u64) -> PPtr {
        PPtr::new(self.catalog.segment, self.catalog.offset + off)
    }

    /// Allocates a `size`-byte block, initialises it with `init` (which persists what it
    /// writes under P-SOF-2), and publishes it at `target` (which holds null): P-SOF-2.
    pub fn staged_alloc(
        &self,
        size: u64,
        target: PPtr,
        init: impl FnOnce(&Space, u64) -> StorageResult<()>,
    ) -> StorageResult<PPtr> {
        let _g = lock(&self.staging);
        let s = self.s();
        let tgt = self.set().resolve_range(target, 16)?;
        let st = self.cat + C_STAGING_TARGET;
        s.store_u64(st + 8, target.offset, Ordering::Relaxed)?;
        s.store_u64(st, target.segment, Ordering::Release)?;
        s.persist_rule("P-SOF-2", st, 16)?; // ORDER(P-SOF-2): the target is known before a block is staged
        let block = self.alloc.allocate(size, self.in_catalog(C_STAGING))?;
        let g = self.set().resolve_range(block, size)?;
        init(s, g)?;
        s.persist_pptr_m2(tgt, block)?; // ORDER(P-SOF-2): publication after the initialised block is durable
        s.persist_pptr_null(self.cat + C_STAGING)?; // ORDER(P-SOF-2): unstage after publication
        Ok(block)
    }

    /// Frees a block a crash left staged and unpublished (P-SOF-2).
    pub fn recover_staging(&self) -> StorageResult<()> {
        let s = self.s();
        let block = s.load_pptr(self.cat + C_STAGING)?;
        if block.is_null() {
            return Ok(());
        }
        let target = s.load_pptr(self.cat + C_STAGING_TARGET)?;
        let published = match self.set().resolve_range(target, 16) {
            Ok(t) => s.load_pptr(t)? == block,
            Err(_) => false,
        };
        if published {
            s.persist_pptr_null(self.cat + C_STAGING)?; // ORDER(P-SOF-2): finish an unstage
        } else {
            self.alloc.deallocate(self.in_catalog(C_STAGING))?;
        }
        Ok(())
    }
}

/// Initialiser of a block of `len` bytes at `g`: all-null pointers, persisted.
pub(super) fn init_null_ptrs(s: &Space, g: u64, len: u64) -> StorageResult<()> {
    for i in 0..len / 16 {
        s.store_u64(g + i * 16, u64::MAX, Ordering::Relaxed)?;
        s.store_u64(g + i * 16 + 8, 0, Ordering::Relaxed)?;
    }
    s.persist_rule("P-SOF-2", g, len)?; // ORDER(P-SOF-2): an empty directory before it is published
    Ok(())
}

/// What a new block of an array is initialised with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Init {
    /// Zero-filled and persisted (MVCC blocks: `{0, 0}` = unused).
    Zero,
    /// Nothing (value blocks and heap chunks: only live rows give their bytes meaning).
    None,
}

/// A two-level array of fixed-size blocks rooted at a pointer in PM.
#[derive(Debug)]
pub(super) struct BlockArray {
    root: PPtr,
    block: u64,
    init: Init,
    mirror: Box<[OnceLock<Box<[AtomicU64]>>]>,
    count: AtomicU64,
    grow: Mutex<Dirs>,
}

#[derive(Debug, Default)]
struct Dirs {
    l1: Option<PPtr>,
    l2: Vec<Option<PPtr>>,
}

impl BlockArray {
    fn empty(root: PPtr, block: u64, init: Init) -> BlockArray {
        BlockArray {
            root,
            block,
            init,
            mirror: (0..FANOUT).map(|_| OnceLock::new()).collect(),
            count: AtomicU64::new(0),
            grow: Mutex::new(Dirs { l1: None, l2: vec![None; FANOUT as usize] }),
        }
    }

    /// Loads the array rooted at `root` (validating every pointer).
    pub fn load(pm: &Pm, root: PPtr, block: u64, init: Init) -> StorageResult<BlockArray> {
        let a = BlockArray::empty(root, block, init);
        let s = pm.s();
        let l1 = s.load_pptr(pm.at(root, 16, "array root")?)?;
        if l1.is_null() {
            return Ok(a);
        }
        let g1 = pm.at(l1, DIR_BYTES, "array directory")?;
        let mut dirs = Dirs { l1: Some(l1), l2: vec![None; FANOUT as usize] };
        let mut count = 0u64;
        let mut gap = false;
        for i in 0..FANOUT {
            let l2 = s.load_pptr(g1 + i * 16)?;
            if l2.is_null() {
                gap = true;
                continue;
            }
            dirs.l2[i as usize] = Some(l2);
            let g2 = pm.at(l2, DIR_BYTES, "array directory")?;
            for j in 0..FANOUT {
                let b = s.load_pptr(g2 + j * 16)?;
                if b.is_null() {
                    gap = true;
                    continue;
                }
                if gap {
                    return Err(corrupt("an array block after a missing one", format!("{root:?}")));
                }
                let g = pm.at(b, block, "array block")?;
                a.slot(i * FANOUT + j).store(g, Ordering::Release);
                count += 1;
            }
        }
        a.count.store(count, Ordering::Release);
        *lock(&a.grow) = dirs;
        Ok(a)
    }

    fn slot(&self, i: u64) -> &AtomicU64 {
        let l2 = self.mirror[(i / FANOUT) as usize]
            .get_or_init(|| (0..FANOUT).map(|_| AtomicU64::new(0)).collect());
        &l2[(i % FANOUT) as usize]
    }

    /// Blocks published.
    #[inline]
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// The global offset of block `i`, if published.
    #[inline]
    pub fn block(&self, i: u64) -> Option<u64> {
        if i >= FANOUT * FANOUT {
            return None;
        }
        let g = self.mirror[(i / FANOUT) as usize].get()?[(i % FANOUT) as usize]
            .load(Ordering::Acquire);
        (g != 0).then_some(g)
    }

    /// Makes sure blocks `0..=i` exist (creating the missing ones in order).
    pub fn ensure(&self, pm: &Pm, i: u64) -> StorageResult<()> {
        if i < self.count() {
            return Ok(());
        }
        if i >= FANOUT * FANOUT {
            return Err(StorageError::PoolFull {
                at: "SOFORT array directory".into(),
                requested: self.block,
                available: 0,
            });
        }
        let mut dirs = lock(&self.grow);
        while self.count() <= i {
            let n = self.count();
            let l1 = match dirs.l1 {
                Some(p) => p,
                None => {
                    let p = pm.staged_alloc(DIR_BYTES, self.root, |s, g| {
                        init_null_ptrs(s, g, DIR_BYTES)
                    })?;
                    dirs.l1 = Some(p);
                    p
                }
            };
            let hi = (n / FANOUT) as usize;
            let l2 = match dirs.l2[hi] {
                Some(p) => p,
                None => {
                    let at = PPtr::new(l1.segment, l1.offset + hi as u64 * 16);
                    let p =
                        pm.staged_alloc(DIR_BYTES, at, |s, g| init_null_ptrs(s, g, DIR_BYTES))?;
                    dirs.l2[hi] = Some(p);
                    p
                }
            };
            let at = PPtr::new(l2.segment, l2.offset + (n % FANOUT) * 16);
            let init = self.init;
            let block = self.block;
            let b = pm.staged_alloc(block, at, |s, g| match init {
                Init::Zero => {
                    s.fill(g, block, 0)?;
                    s.persist_rule("P-SOF-2", g, block)?; // ORDER(P-SOF-2): an MVCC block is all {0,0} before it is published
                    Ok(())
                }
                Init::None => Ok(()),
            })?;
            let g = pm.set().resolve_range(b, block)?;
            self.slot(n).store(g, Ordering::Release);
            self.count.store(n + 1, Ordering::Release);
        }
        Ok(())
    }
}
