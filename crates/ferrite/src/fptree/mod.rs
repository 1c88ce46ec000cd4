//! FPTree, single-threaded, fixed-size keys: a hybrid PM/DRAM B+-tree whose leaves live in
//! persistent memory and whose inner nodes live in DRAM and are rebuilt from the leaf list at
//! open (seed 001 ch. 4, §4.2–4.4; spec `../shared/specs/fptree.md` §3, §5.1–5.7, §5.11, §6).
//! Layout and persist order: `docs/design/fptree.md`.
//!
//! Keys and values are `u64`. A leaf holds up to 32 entries in unsorted slots; a one-byte
//! fingerprint per slot (packed into `u64` words at the start of the leaf) filters key probes;
//! an 8-byte validity bitmap is the commit word of every insert, update and delete. Leaves are
//! linked by 8-byte offsets (`POff`), so every list-pointer write is one failure-atomic store
//! (the fix of DEFECT-6). Splits and leaf deletions are made crash-safe by two micro-logs in
//! the root. Leaves come from a [`LeafAllocator`] with reference passing.
//!
//! # Invariants
//! - T1: the leaf list from `root.head` is ordered: every key of a leaf is smaller than every
//!   key of the next leaf; it holds no cycle.
//! - T2: a valid slot (bitmap bit set) holds a key, its value and `fp(key)`; bits ≥ 32 are 0.
//! - T3: only the only leaf may be empty (the last key of any other leaf removes the leaf).
//! - T4: when no operation is in flight both micro-logs are disarmed: the split log's new
//!   leaf and the delete log's leaf are 0 (their other pointers are stale and ignored).
//! - T5 (DRAM): the inner index maps each leaf's lower bound to the leaf: the head's bound is 0,
//!   another leaf's bound is a key no greater than its smallest key and greater than every key
//!   of the leaf before it. A key belongs to the leaf with the greatest bound ≤ key.
//! - T6: every block the allocator has handed out to the tree is a leaf in the list (no leak).
//!
//! # Ordering (rules P-FPT-n of `docs/design/persistence.md`)
//! - P-FPT-1: a slot's key, value and fingerprint are persisted before the bitmap store that
//!   makes them valid. P-FPT-2: that bitmap store is the commit point (one 8-byte store).
//! - P-FPT-3..7: split (log current leaf; allocate the new leaf into the log; copy and persist
//!   it; persist its bitmap; persist the old leaf's complementary bitmap — the logical split;
//!   link the new leaf). The log is armed by its `new` pointer, which the allocator persists
//!   after `cur`; P-FPT-8: nulling `new` disarms it (`cur` is stale and ignored while `new` is
//!   0).
//! - P-FPT-9: a delete's cleared bitmap is its commit point.
//! - P-FPT-10..12: leaf deletion: persist the predecessor (0 for the head), then the leaf,
//!   which arms the delete log; unlink the leaf with one 8-byte store (P-FPT-11); free it
//!   through the allocator, whose durable null of the log's leaf disarms the log (P-FPT-12).
//!   Recovery finishes an armed log; a disarmed log's predecessor is stale and ignored.
//! - P-FPT-13: creation: root fields and the first leaf are persisted before the root magic.
//!
//! # Concurrency
//! Single-threaded: every mutating method takes `&mut self`.

mod slab;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use ferrite_pmem::Space;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::storage::{StorageError, StorageResult};

pub use slab::{LeafAllocator, Slab};

/// Slots per leaf.
pub const M: usize = 32;
/// Bytes per leaf (9 cache lines).
pub const LEAF_SIZE: u64 = 576;
/// Bytes of the persistent root.
pub const ROOT_SIZE: u64 = 192;
const FULL: u64 = (1u64 << M) - 1;

const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"FERRFPT1");
const ROOT_VERSION: u32 = 1;

// Leaf field offsets.
const L_FP: u64 = 0;
const L_BITMAP: u64 = 32;
const L_LOCK: u64 = 40;
const L_NEXT: u64 = 48;
const L_KV: u64 = 64;

// Root field offsets.
const R_HEAD: u64 = 48;
const R_SPLIT_CUR: u64 = 64;
const R_SPLIT_NEW: u64 = 72;
const R_DEL_CUR: u64 = 128;
const R_DEL_PREV: u64 = 136;

/// A leaf as it lies in persistent memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct LeafImage {
    /// One fingerprint byte per slot (written as whole `u64` words).
    pub fp: [u8; M],
    /// Validity bitmap; bit i = slot i valid.
    pub bitmap: u64,
    /// Reserved for the concurrent tree's leaf lock; zero here, reset at open.
    pub lock: u64,
    /// Offset of the next leaf (0: none).
    pub next: u64,
    /// Zero.
    pub reserved: u64,
    /// Key/value pairs.
    pub kv: [[u64; 2]; M],
}

const _: () = assert!(size_of::<LeafImage>() as u64 == LEAF_SIZE);
const _: () = assert!(std::mem::offset_of!(LeafImage, bitmap) as u64 == L_BITMAP);
const _: () = assert!(std::mem::offset_of!(LeafImage, lock) as u64 == L_LOCK);
const _: () = assert!(std::mem::offset_of!(LeafImage, next) as u64 == L_NEXT);
const _: () = assert!(std::mem::offset_of!(LeafImage, kv) as u64 == L_KV);

impl LeafImage {
    fn valid(&self) -> impl Iterator<Item = usize> + '_ {
        (0..M).filter(|&s| self.bitmap & (1 << s) != 0)
    }
}

/// The persistent root (3 cache lines).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
struct RootHeader {
    magic: u64,
    version: u32,
    slots: u32,
    leaf_size: u32,
    value_size: u32,
    compat: u64,
    incompat: u64,
    checksum: u32,
    reserved0: u32,
}
const _: () = assert!(size_of::<RootHeader>() == 48);

impl RootHeader {
    fn new() -> Self {
        let mut h = RootHeader {
            magic: 0,
            version: ROOT_VERSION,
            slots: M as u32,
            leaf_size: LEAF_SIZE as u32,
            value_size: 8,
            compat: 0,
            incompat: 0,
            checksum: 0,
            reserved0: 0,
        };
        h.checksum = h.crc();
        h
    }
    fn crc(&self) -> u32 {
        let mut c = *self;
        c.magic = ROOT_MAGIC;
        crc32c::crc32c(&c.as_bytes()[..40])
    }
}

/// The fingerprint of `key`: the high byte of a Fibonacci hash. Stable across builds and
/// processes (it is persisted).
pub fn fingerprint(key: u64) -> u8 {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// Every valid pair of the tree rooted at `root`, read by walking its leaf list (unsorted
/// within each leaf), without recovering or building an index: what a DRAM-only design would
/// have to read back at restart (the rebuild baseline of the benchmarks), and a tool for
/// inspecting an image. Typed errors on a damaged list, never a loop.
pub fn read_all_pairs(space: &Space, root: u64) -> StorageResult<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut at = space.load_u64(root + R_HEAD, Ordering::Acquire)?;
    let limit = space.len() / LEAF_SIZE + 1;
    let mut seen = 0;
    while at != 0 {
        seen += 1;
        if seen > limit {
            return Err(corrupt("the leaf list has a cycle", at));
        }
        let l: LeafImage = space.read_struct(at)?;
        out.extend(l.valid().map(|s| (l.kv[s][0], l.kv[s][1])));
        at = l.next;
    }
    Ok(out)
}

/// What [`FPTree::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Leaves in the list.
    pub leaves: u64,
    /// Keys in the tree.
    pub keys: u64,
}

/// A single-threaded FPTree with fixed-size keys (see the module docs).
#[derive(Debug)]
pub struct FPTree<'s, A: LeafAllocator> {
    space: &'s Space,
    root: u64,
    alloc: A,
    /// Lower bound → leaf offset (T5).
    index: BTreeMap<u64, u64>,
    len: u64,
    /// Leaked leaves freed at the last open.
    leaked_freed: u64,
    /// Set when a modification failed half-way: every later call returns `Poisoned`.
    poisoned: bool,
}

fn corrupt(what: impl Into<String>, at: u64) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("fptree offset {at}") }
}

impl<'s, A: LeafAllocator> FPTree<'s, A> {
    /// Creates a tree whose root lies at `root` (64-byte aligned, [`ROOT_SIZE`] bytes) in
    /// `space`, taking leaves from `alloc`. Whatever the root bytes held is overwritten
    /// (creation does not rely on zeroed memory); errors if a valid tree already lives there.
    pub fn create(space: &'s Space, root: u64, alloc: A) -> StorageResult<Self> {
        let h: RootHeader = space.read_struct(root)?;
        if h.magic == ROOT_MAGIC && h.checksum == h.crc() {
            return Err(StorageError::InvalidArgument(format!(
                "a tree already exists at offset {root}"
            )));
        }
        Self::open_inner(space, root, alloc, true)
    }

    /// Opens the tree at `root`: replays the micro-logs, rebuilds the DRAM index from the leaf
    /// list, frees leaked leaves. A root whose magic is zero is a tree whose creation did not
    /// finish; it is (re)initialised. Run the allocator's own recovery first (opening a
    /// [`Slab`] does).
    pub fn open(space: &'s Space, root: u64, alloc: A) -> StorageResult<Self> {
        Self::open_inner(space, root, alloc, false)
    }

    fn open_inner(space: &'s Space, root: u64, alloc: A, create: bool) -> StorageResult<Self> {
        if !root.is_multiple_of(64) {
            return Err(StorageError::InvalidArgument(format!(
                "root offset {root} is not 64-byte aligned"
            )));
        }
        if alloc.block_size() < LEAF_SIZE {
            return Err(StorageError::InvalidArgument(format!(
                "allocator blocks of {} bytes cannot hold a {LEAF_SIZE}-byte leaf",
                alloc.block_size()
            )));
        }
        let mut t = FPTree {
            space,
            root,
            alloc,
            index: BTreeMap::new(),
            len: 0,
            leaked_freed: 0,
            poisoned: false,
        };
        let h: RootHeader = space.read_struct(root)?;
        if create || h.magic == 0 {
            t.init(create)?;
        } else {
            t.validate_root(&h)?;
            t.recover_split()?;
            t.recover_delete()?;
        }
        t.rebuild()?;
        Ok(t)
    }

    fn validate_root(&self, h: &RootHeader) -> StorageResult<()> {
        if h.magic != ROOT_MAGIC {
            return Err(corrupt(format!("bad root magic {:#x}", h.magic), self.root));
        }
        if h.version != ROOT_VERSION || h.incompat != 0 {
            return Err(StorageError::Incompatible {
                what: format!("fptree root version {} incompat {:#x}", h.version, h.incompat),
                at: format!("fptree offset {}", self.root),
            });
        }
        if h.checksum != h.crc() {
            return Err(corrupt("root checksum mismatch", self.root));
        }
        if h.slots as usize != M || u64::from(h.leaf_size) != LEAF_SIZE || h.value_size != 8 {
            return Err(StorageError::Incompatible {
                what: format!("fptree with {} slots of {} bytes", h.slots, h.leaf_size),
                at: format!("fptree offset {}", self.root),
            });
        }
        Ok(())
    }

    /// Creation (P-FPT-13), resumable: the first persist writes the whole root with magic 0
    /// (a torn root reads as garbage or as an unfinished creation), the magic comes last. If
    /// the header an earlier, interrupted creation wrote is valid, its `head` (0, or a leaf it
    /// allocated) is kept; otherwise the root held garbage and `head` is cleared.
    /// `fresh` (a `create`): never trust what the root held.
    fn init(&mut self, fresh: bool) -> StorageResult<()> {
        let s = self.space;
        let r = self.root;
        let h: RootHeader = s.read_struct(r)?;
        let ours = !fresh && h.magic == 0 && h.checksum == RootHeader::new().checksum && {
            let mut w = RootHeader::new();
            w.magic = 0;
            h.as_bytes() == w.as_bytes()
        };
        let head = if ours { s.load_u64(r + R_HEAD, Ordering::Acquire)? } else { 0 };
        if !ours {
            // `head` = 0 is durable before a valid header can be: a torn header persist below
            // must never pair a valid header with a garbage `head`.
            s.store_u64(r + R_HEAD, 0, Ordering::Release)?;
            s.persist_rule("P-FPT-13", r + R_HEAD, 8)?; // ORDER(P-FPT-13): head cleared before the header
        }
        s.write_struct(r, &RootHeader::new())?;
        s.fill(r + 48, ROOT_SIZE - 48, 0)?;
        s.store_u64(r + R_HEAD, head, Ordering::Relaxed)?;
        s.persist_rule("P-FPT-13", r, ROOT_SIZE)?; // ORDER(P-FPT-13): root fields and empty logs
        if head == 0 {
            self.alloc.allocate(s, r + R_HEAD)?;
        }
        let head = s.load_u64(r + R_HEAD, Ordering::Acquire)?;
        s.fill(head, LEAF_SIZE, 0)?;
        s.persist_rule("P-FPT-13", head, LEAF_SIZE)?; // ORDER(P-FPT-13): an empty first leaf
        s.store_u64(r, ROOT_MAGIC, Ordering::Release)?;
        Ok(s.persist_rule("P-FPT-13", r, 8)?) // ORDER(P-FPT-13): the magic commits creation
    }

    fn head(&self) -> StorageResult<u64> {
        Ok(self.space.load_u64(self.root + R_HEAD, Ordering::Acquire)?)
    }

    fn leaf(&self, at: u64) -> StorageResult<LeafImage> {
        self.space.read_struct(at).map_err(|e| corrupt(format!("unreadable leaf: {e}"), at))
    }

    // ----- recovery -----

    /// Algorithm 4.4: finish or discard an interrupted split.
    fn recover_split(&mut self) -> StorageResult<()> {
        let s = self.space;
        let cur = s.load_u64(self.root + R_SPLIT_CUR, Ordering::Acquire)?;
        let new = s.load_u64(self.root + R_SPLIT_NEW, Ordering::Acquire)?;
        if new == 0 {
            // Disarmed, or the allocation did not finish (the allocator's recovery reclaimed
            // the block): nothing was split. `cur` may be stale.
            return Ok(());
        }
        if cur == 0 {
            return Err(corrupt(
                "the split log names a new leaf but no leaf being split",
                self.root,
            ));
        }
        let leaf = self.leaf(cur)?;
        if leaf.bitmap & FULL == FULL {
            self.split_from_copy(cur, new)?; // steps 5..10
        } else {
            let nb = self.leaf(new)?.bitmap;
            self.split_from_bitmaps(cur, new, nb)?; // steps 8..10
        }
        Ok(())
    }

    /// Algorithm 4.7, reshaped: an armed delete log (`cur != 0`) is always finished. Its
    /// predecessor (0: the leaf was the head) was persisted before `cur` armed the log
    /// (P-FPT-10), so the unlink can be redone (idempotent) and the leaf freed; the allocator's
    /// free disarms the log (P-FPT-12). A disarmed log's `prev` is stale and ignored.
    fn recover_delete(&mut self) -> StorageResult<()> {
        let s = self.space;
        let cur = s.load_u64(self.root + R_DEL_CUR, Ordering::Acquire)?;
        if cur == 0 {
            return Ok(());
        }
        let prev = s.load_u64(self.root + R_DEL_PREV, Ordering::Acquire)?;
        let next = self.leaf(cur)?.next;
        if prev != 0 {
            self.store_next(prev, next)?;
        } else if self.head()? == cur {
            self.store_head(next)?;
        }
        self.free_logged_leaf()
    }

    /// Rebuilds the DRAM index from the leaf list (Algorithm 4.13, fixed keys), resetting
    /// every lock word, checking order and cycles, then frees leaked leaves (T6).
    fn rebuild(&mut self) -> StorageResult<()> {
        self.index.clear();
        self.len = 0;
        let s = self.space;
        let mut at = self.head()?;
        if at == 0 {
            return Err(corrupt("the tree has no leaf", self.root));
        }
        let limit = s.len() / LEAF_SIZE + 1;
        let mut prev_max: Option<u64> = None;
        let mut first = true;
        let mut seen = 0u64;
        while at != 0 {
            seen += 1;
            if seen > limit {
                return Err(corrupt("the leaf list has a cycle", at));
            }
            let l = self.leaf(at)?;
            if l.lock != 0 {
                s.store_u64(at + L_LOCK, 0, Ordering::Relaxed)?;
            }
            if l.bitmap & !FULL != 0 {
                return Err(corrupt(
                    format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap),
                    at,
                ));
            }
            let keys: Vec<u64> = l.valid().map(|s| l.kv[s][0]).collect();
            let (min, max) = (keys.iter().min().copied(), keys.iter().max().copied());
            if let (Some(pm), Some(mn)) = (prev_max, min)
                && mn <= pm
            {
                return Err(corrupt(format!("leaf starts at key {mn}, not above {pm}"), at));
            }
            match min {
                Some(mn) => {
                    self.index.insert(if first { 0 } else { mn }, at);
                }
                None if first && l.next == 0 => {
                    self.index.insert(0, at); // the only leaf, empty (T3)
                }
                None => return Err(corrupt("an empty leaf that is not the only leaf", at)),
            }
            self.len += keys.len() as u64;
            prev_max = max.or(prev_max);
            first = false;
            at = l.next;
        }
        // T6: free every block the allocator handed out that is not a leaf of the list.
        if let Some(all) = self.alloc.allocated() {
            let mut leaves: Vec<u64> = self.index.values().copied().collect();
            leaves.sort_unstable();
            for b in all {
                if leaves.binary_search(&b).is_err() {
                    // Free the leaked block through the delete log, armed with no predecessor
                    // and a leaf that is not the head: its recovery just frees it.
                    self.arm_delete_log(b, 0)?;
                    self.free_logged_leaf()?;
                    self.leaked_freed += 1;
                }
            }
        }
        Ok(())
    }

    /// Leaked leaves freed by the last open (0 for a tree whose logs did their job).
    pub fn leaked_freed(&self) -> u64 {
        self.leaked_freed
    }

    // ----- lookups -----

    /// The leaf that holds (or would hold) `key`.
    fn route(&self, key: u64) -> StorageResult<(u64, u64)> {
        self.index
            .range(..=key)
            .next_back()
            .map(|(&b, &l)| (b, l))
            .ok_or_else(|| corrupt("the index has no leaf with bound 0", self.root))
    }

    /// The slot of `key` in the leaf at `leaf`, probing full keys only where fingerprints
    /// match.
    fn find_in_leaf(&self, leaf: u64, key: u64) -> StorageResult<Option<usize>> {
        let mut line0 = [0u8; 40];
        self.space.read_into(leaf, &mut line0)?;
        let mut bm = [0u8; 8];
        bm.copy_from_slice(&line0[32..40]);
        let bitmap = u64::from_le_bytes(bm);
        let f = fingerprint(key);
        for (slot, &fp) in line0[..M].iter().enumerate() {
            if bitmap & (1 << slot) != 0
                && fp == f
                && self.space.load_u64(leaf + L_KV + slot as u64 * 16, Ordering::Acquire)? == key
            {
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }

    /// The value stored under `key`.
    pub fn get(&self, key: u64) -> StorageResult<Option<u64>> {
        if self.poisoned {
            return Err(StorageError::Poisoned);
        }
        let (_, leaf) = self.route(key)?;
        match self.find_in_leaf(leaf, key)? {
            Some(slot) => Ok(Some(
                self.space.load_u64(leaf + L_KV + slot as u64 * 16 + 8, Ordering::Acquire)?,
            )),
            None => Ok(None),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of leaves.
    pub fn leaves(&self) -> u64 {
        self.index.len() as u64
    }

    /// The allocator (for its statistics).
    pub fn allocator(&self) -> &A {
        &self.alloc
    }

    /// Up to `limit` pairs with `lo <= key <= hi`, in ascending key order.
    pub fn range(&self, lo: u64, hi: u64, limit: usize) -> StorageResult<Vec<(u64, u64)>> {
        if self.poisoned {
            return Err(StorageError::Poisoned);
        }
        let mut out = Vec::new();
        if lo > hi || limit == 0 {
            return Ok(out);
        }
        let (start, _) = self.route(lo)?;
        for (&bound, &leaf) in self.index.range(start..) {
            if bound > hi {
                break;
            }
            let l = self.leaf(leaf)?;
            let mut kv: Vec<(u64, u64)> = l
                .valid()
                .map(|s| (l.kv[s][0], l.kv[s][1]))
                .filter(|(k, _)| *k >= lo && *k <= hi)
                .collect();
            kv.sort_unstable();
            for p in kv {
                out.push(p);
                if out.len() == limit {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    // ----- modifications -----

    /// Writes `(key, value)` into free slot `slot` of `leaf` and persists it with its
    /// fingerprint, still invisible (P-FPT-1).
    fn write_slot(&self, leaf: u64, slot: usize, key: u64, value: u64) -> StorageResult<()> {
        let s = self.space;
        let kv = leaf + L_KV + slot as u64 * 16;
        s.store_u64(kv, key, Ordering::Relaxed)?;
        s.store_u64(kv + 8, value, Ordering::Relaxed)?;
        let word = leaf + L_FP + (slot as u64 / 8) * 8;
        let mut bytes = s.load_u64(word, Ordering::Acquire)?.to_le_bytes();
        bytes[slot % 8] = fingerprint(key);
        s.store_u64(word, u64::from_le_bytes(bytes), Ordering::Relaxed)?;
        s.flush_rule("P-FPT-1", kv, 16)?; // ORDER(P-FPT-1): the pair before the bitmap
        s.flush_rule("P-FPT-1", word, 8)?; // ORDER(P-FPT-1): its fingerprint before the bitmap
        s.fence_rule("P-FPT-1"); // ORDER(P-FPT-1): both durable before the commit store
        Ok(())
    }

    /// The commit point of an insert, update or delete (P-FPT-2 / P-FPT-9).
    fn publish_bitmap(&self, leaf: u64, bitmap: u64, rule: &'static str) -> StorageResult<()> {
        self.space.store_u64(leaf + L_BITMAP, bitmap, Ordering::Release)?;
        Ok(self.space.persist_rule(rule, leaf + L_BITMAP, 8)?) // ORDER(P-FPT-2/9): the single commit store
    }

    /// The leaf a key goes to after a possible split of its full leaf: returns (target leaf,
    /// its bitmap).
    fn make_room(&mut self, bound: u64, leaf: u64, key: u64) -> StorageResult<(u64, u64)> {
        let bitmap = self.space.load_u64(leaf + L_BITMAP, Ordering::Acquire)?;
        if bitmap & FULL != FULL {
            return Ok((leaf, bitmap));
        }
        let (split_key, new) = self.split(leaf)?;
        self.index.insert(split_key + 1, new);
        debug_assert!(split_key + 1 > bound);
        let target = if key > split_key { new } else { leaf };
        Ok((target, self.space.load_u64(target + L_BITMAP, Ordering::Acquire)?))
    }

    /// Runs a modification; a failure other than a clean `PoolFull` poisons the handle
    /// (conventions §4: after a failed persist or a broken invariant mid-operation, every call
    /// returns `Poisoned` until the tree is reopened, which runs recovery).
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> StorageResult<T>) -> StorageResult<T> {
        if self.poisoned {
            return Err(StorageError::Poisoned);
        }
        let r = f(self);
        if let Err(e) = &r
            && !matches!(e, StorageError::PoolFull { .. })
        {
            self.poisoned = true;
        }
        r
    }

    /// Inserts `key → value`; `Ok(false)` (and no change) if `key` is present. `PoolFull` when
    /// a split needs a leaf the allocator cannot give (the tree is unchanged).
    pub fn insert(&mut self, key: u64, value: u64) -> StorageResult<bool> {
        self.guarded(|t| t.insert_inner(key, value))
    }

    fn insert_inner(&mut self, key: u64, value: u64) -> StorageResult<bool> {
        let (bound, leaf) = self.route(key)?;
        if self.find_in_leaf(leaf, key)?.is_some() {
            return Ok(false);
        }
        let (target, bitmap) = self.make_room(bound, leaf, key)?;
        let slot = (!bitmap & FULL).trailing_zeros() as usize;
        self.write_slot(target, slot, key, value)?;
        self.publish_bitmap(target, bitmap | (1 << slot), "P-FPT-2")?;
        self.len += 1;
        Ok(true)
    }

    /// Replaces the value of `key` out of place (Algorithm 4.8); `Ok(false)` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> StorageResult<bool> {
        self.guarded(|t| t.update_inner(key, value))
    }

    fn update_inner(&mut self, key: u64, value: u64) -> StorageResult<bool> {
        let (bound, leaf) = self.route(key)?;
        let Some(prev_slot) = self.find_in_leaf(leaf, key)? else { return Ok(false) };
        // A full copy keeps slot positions, so prev_slot is right in either leaf.
        let (target, bitmap) = self.make_room(bound, leaf, key)?;
        let slot = (!bitmap & FULL).trailing_zeros() as usize;
        self.write_slot(target, slot, key, value)?;
        self.publish_bitmap(target, (bitmap & !(1 << prev_slot)) | (1 << slot), "P-FPT-2")?;
        Ok(true)
    }

    /// Deletes `key`; `Ok(false)` if absent (checked first: DEFECT-10).
    pub fn delete(&mut self, key: u64) -> StorageResult<bool> {
        self.guarded(|t| t.delete_inner(key))
    }

    fn delete_inner(&mut self, key: u64) -> StorageResult<bool> {
        let (bound, leaf) = self.route(key)?;
        let Some(slot) = self.find_in_leaf(leaf, key)? else { return Ok(false) };
        let bitmap = self.space.load_u64(leaf + L_BITMAP, Ordering::Acquire)?;
        if bitmap.count_ones() == 1 && self.index.len() > 1 {
            // The leaf empties: unlink and free it instead (its last key goes with it).
            let prev = self.index.range(..bound).next_back().map(|(_, &l)| l);
            self.delete_leaf(leaf, prev)?;
            self.index.remove(&bound);
            if bound == 0 {
                // The next leaf became the head: its bound becomes 0 (T5).
                if let Some((&b, &l)) = self.index.iter().next() {
                    self.index.remove(&b);
                    self.index.insert(0, l);
                }
            }
        } else {
            self.publish_bitmap(leaf, bitmap & !(1 << slot), "P-FPT-9")?;
        }
        self.len -= 1;
        Ok(true)
    }

    // ----- split (Algorithm 4.3) -----

    fn split(&mut self, leaf: u64) -> StorageResult<(u64, u64)> {
        let s = self.space;
        s.store_u64(self.root + R_SPLIT_CUR, leaf, Ordering::Release)?;
        s.persist_rule("P-FPT-3", self.root + R_SPLIT_CUR, 8)?; // ORDER(P-FPT-3): log the leaf being split
        let new = match self.alloc.allocate(s, self.root + R_SPLIT_NEW) {
            Ok(n) => n, // the allocator persisted R_SPLIT_NEW
            Err(e @ StorageError::PoolFull { .. }) => {
                // Nothing was split: retire the log so the tree stays usable.
                self.reset_split_log()?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let (split_key, _) = self.split_from_copy(leaf, new)?;
        Ok((split_key, new))
    }

    /// Steps 5..10: copy `leaf` into `new`, then the bitmaps, link, reset.
    fn split_from_copy(&mut self, leaf: u64, new: u64) -> StorageResult<(u64, u64)> {
        let s = self.space;
        let l = self.leaf(leaf)?;
        s.write_struct(new, &l)?;
        s.persist_rule("P-FPT-4", new, LEAF_SIZE)?; // ORDER(P-FPT-4): a full copy of the leaf
        let mut keys: Vec<u64> = l.valid().map(|slot| l.kv[slot][0]).collect();
        keys.sort_unstable();
        let split_key = keys[M / 2 - 1];
        let right: u64 =
            l.valid().filter(|&slot| l.kv[slot][0] > split_key).fold(0, |b, slot| b | (1 << slot));
        s.store_u64(new + L_BITMAP, right, Ordering::Release)?;
        s.persist_rule("P-FPT-5", new + L_BITMAP, 8)?; // ORDER(P-FPT-5): the new leaf keeps the upper half
        self.split_from_bitmaps(leaf, new, right)?;
        Ok((split_key, new))
    }

    /// Steps 8..10: the old leaf keeps the complement, is linked to the new leaf, the log is
    /// retired.
    fn split_from_bitmaps(&mut self, leaf: u64, new: u64, right: u64) -> StorageResult<()> {
        let s = self.space;
        s.store_u64(leaf + L_BITMAP, !right & FULL, Ordering::Release)?;
        s.persist_rule("P-FPT-6", leaf + L_BITMAP, 8)?; // ORDER(P-FPT-6): the logical split point
        s.store_u64(leaf + L_NEXT, new, Ordering::Release)?;
        s.persist_rule("P-FPT-7", leaf + L_NEXT, 8)?; // ORDER(P-FPT-7): link the new leaf (one 8-byte store)
        self.reset_split_log()
    }

    /// Retires the split log: `new` armed it, so nulling `new` disarms it; `cur` stays stale and
    /// is ignored while `new` is 0 (the next split rewrites `cur` before `new` is armed).
    fn reset_split_log(&self) -> StorageResult<()> {
        let s = self.space;
        s.store_u64(self.root + R_SPLIT_NEW, 0, Ordering::Release)?;
        Ok(s.persist_rule("P-FPT-8", self.root + R_SPLIT_NEW, 8)?) // ORDER(P-FPT-8): disarm the split log
    }

    // ----- leaf deletion (Algorithm 4.6) -----

    fn delete_leaf(&mut self, leaf: u64, prev: Option<u64>) -> StorageResult<()> {
        self.arm_delete_log(leaf, prev.unwrap_or(0))?;
        let next = self.leaf(leaf)?.next;
        match prev {
            None => self.store_head(next)?,
            Some(p) => self.store_next(p, next)?,
        }
        self.free_logged_leaf() // the free disarms the log (P-FPT-12)
    }

    /// P-FPT-10: the predecessor first, then the leaf, which arms the log.
    fn arm_delete_log(&self, leaf: u64, prev: u64) -> StorageResult<()> {
        let s = self.space;
        s.store_u64(self.root + R_DEL_PREV, prev, Ordering::Release)?;
        s.persist_rule("P-FPT-10", self.root + R_DEL_PREV, 8)?; // ORDER(P-FPT-10): predecessor before arming
        s.store_u64(self.root + R_DEL_CUR, leaf, Ordering::Release)?;
        Ok(s.persist_rule("P-FPT-10", self.root + R_DEL_CUR, 8)?) // ORDER(P-FPT-10): the leaf arms the log
    }

    fn store_head(&self, next: u64) -> StorageResult<()> {
        self.space.store_u64(self.root + R_HEAD, next, Ordering::Release)?;
        Ok(self.space.persist_rule("P-FPT-11", self.root + R_HEAD, 8)?) // ORDER(P-FPT-11): unlink the head (8-byte store)
    }

    fn store_next(&self, prev: u64, next: u64) -> StorageResult<()> {
        self.space.store_u64(prev + L_NEXT, next, Ordering::Release)?;
        Ok(self.space.persist_rule("P-FPT-11", prev + L_NEXT, 8)?) // ORDER(P-FPT-11): unlink (8-byte store)
    }

    /// Frees the leaf named by the delete log; the allocator nulls the log entry durably, which
    /// disarms the log (P-FPT-12).
    fn free_logged_leaf(&mut self) -> StorageResult<()> {
        self.alloc.deallocate(self.space, self.root + R_DEL_CUR)
    }

    // ----- integrity -----

    /// Checks every invariant (T1–T6) against persistent memory; `Err(Corrupted)` says which
    /// one failed and where.
    pub fn check(&self) -> StorageResult<CheckReport> {
        let s = self.space;
        for (off, what) in [(R_SPLIT_NEW, "split"), (R_DEL_CUR, "delete")] {
            if s.load_u64(self.root + off, Ordering::Acquire)? != 0 {
                return Err(corrupt(format!("the {what} log is not retired"), self.root + off));
            }
        }
        let mut at = self.head()?;
        let mut listed = Vec::new();
        let mut prev_max: Option<u64> = None;
        let mut keys = 0u64;
        let limit = s.len() / LEAF_SIZE + 1;
        while at != 0 {
            if listed.len() as u64 > limit {
                return Err(corrupt("the leaf list has a cycle", at));
            }
            let l = self.leaf(at)?;
            if l.bitmap & !FULL != 0 {
                return Err(corrupt("bitmap bits beyond the last slot", at));
            }
            let mut leaf_keys = Vec::new();
            for slot in l.valid() {
                let k = l.kv[slot][0];
                if l.fp[slot] != fingerprint(k) {
                    return Err(corrupt(
                        format!("slot {slot}: fingerprint of key {k} is wrong"),
                        at,
                    ));
                }
                leaf_keys.push(k);
            }
            leaf_keys.sort_unstable();
            if leaf_keys.windows(2).any(|w| w[0] == w[1]) {
                return Err(corrupt("a key appears twice in one leaf", at));
            }
            if let (Some(pm), Some(&mn)) = (prev_max, leaf_keys.first())
                && mn <= pm
            {
                return Err(corrupt(format!("key {mn} follows key {pm}"), at));
            }
            if leaf_keys.is_empty() && (!listed.is_empty() || l.next != 0) {
                return Err(corrupt("an empty leaf that is not the only leaf", at));
            }
            prev_max = leaf_keys.last().copied().or(prev_max);
            keys += leaf_keys.len() as u64;
            // T5: the index routes every key of this leaf here.
            for &k in &leaf_keys {
                if self.route(k)?.1 != at {
                    return Err(corrupt(format!("the index routes key {k} elsewhere"), at));
                }
            }
            listed.push(at);
            at = l.next;
        }
        let mut indexed: Vec<u64> = self.index.values().copied().collect();
        indexed.sort_unstable();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        if indexed != sorted {
            return Err(corrupt(
                "the DRAM index and the leaf list name different leaves",
                self.root,
            ));
        }
        if let Some(mut all) = self.alloc.allocated() {
            all.sort_unstable();
            if all != sorted {
                return Err(corrupt(
                    format!(
                        "{} blocks allocated but {} leaves in the list (a leak or a stray leaf)",
                        all.len(),
                        sorted.len()
                    ),
                    self.root,
                ));
            }
        }
        if keys != self.len {
            return Err(corrupt(
                format!("{keys} keys in the leaves, {} counted", self.len),
                self.root,
            ));
        }
        Ok(CheckReport { leaves: listed.len() as u64, keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable() {
        // Golden values: persisted fingerprints must never change across builds.
        assert_eq!(fingerprint(0), 0);
        assert_eq!(fingerprint(1), 0x9E);
        assert_eq!(fingerprint(42), 0xF5);
        assert_eq!(fingerprint(7), 0x53);
        assert_eq!(fingerprint(u64::MAX), 0x61);
    }
}
