//! FPTree, concurrent (`Sync`, `&self` operations): a hybrid PM/DRAM B+-tree whose leaves live in persistent memory
//! and whose inner nodes live in DRAM and are rebuilt from the leaf list at open (seed 001
//! ch. 4, §4.2–4.4; spec `../shared/specs/fptree.md` §3, §5.1–5.11, §6, §9). Layout, pointer
//! form and persist order: `docs/design/fptree.md`.
//!
//! One generic body `Tree<K: KeyKind>` serves two key kinds (`key.rs`): [`FPTree`] with `u64`
//! keys (the v1 leaf below, whose leaf steps are in this file) and [`FPTreeVar`] with byte keys
//! of up to [`MAX_KEY_LEN`] bytes (the v2 leaf of `layout_var.rs`: keys of up to 23 bytes inline,
//! longer ones in key blocks allocated into the slot; leaf steps, invariants V1–V3 and rules
//! P-FPT-20..26 in `var.rs`). A root records its kind (incompat flag); the other kind's root is
//! refused as `Incompatible`.
//!
//! The inner index is placed at creation ([`Tree::create_with`], `index.rs`): in DRAM, rebuilt
//! from the leaf list at every open (the hybrid FPTree, the default), or in PM (the fully
//! persistent variant, both key kinds: `persistent.rs`, opened by replaying its logs, no leaf
//! read; byte keys keep byte separators, `pbound.rs`). The root records the placement (incompat
//! bit 1 and the index root's pointer). With a persistent index a leaf's leak rule (byte keys,
//! V1) runs at its first lock in an open instead of at open (P-FPT-35).
//!
//! Values are `u64`. A leaf holds up to 32 entries in unsorted slots; a one-byte
//! fingerprint per slot (packed into `u64` words at the start of the leaf) filters key probes;
//! an 8-byte validity bitmap is the commit word of every insert, update and delete. The tree
//! lives on a [`PAllocator`] it shares (`Arc`): its root is a block allocated into a
//! persistent-pointer slot the caller owns, its leaves are blocks allocated through the
//! leak-free interface into the split log (and freed from the delete log). Leaves are linked by
//! 16-byte [`PPtr`]s; a pointer update that is not null → valid (a 16-byte store can tear) is
//! only ever made while a micro-log that redoes it is armed.
//!
//! # Invariants
//! - T1: the leaf list from `root.head` is ordered: every key of a leaf is smaller than every
//!   key of the next leaf; it holds no cycle.
//! - T2: a valid slot (bitmap bit set) holds a key, its value and `fp(key)`; bits ≥ 32 are 0.
//! - T3: only the only leaf may be empty (the last key of any other leaf removes the leaf).
//! - T4: when no operation is in flight both micro-logs are disarmed: the split log's new
//!   leaf and the delete log's leaf are null (their other pointers are stale and ignored).
//! - T5: the inner index maps each leaf's lower bound to the leaf: the head's bound is the
//!   lowest key (a persistent index re-keys the next leaf's entry in the same index change
//!   that removes a deleted head's, redone by delete recovery), another leaf's bound is a key
//!   no greater than its smallest key and greater than every key of the leaf before it. A key
//!   belongs to the leaf with the greatest bound ≤ key. (A head bound above keys routed to
//!   the head let a split's separator fall below the leaf's own bound: keys were lost.)
//! - T6: every block the allocator has handed out to the tree is its root or a leaf in the list
//!   (no leak). The logs guarantee it by construction; [`FPTree::blocks`] lets a caller that
//!   knows every user of the allocator verify it against [`PAllocator::check`].
//!
//! # Ordering (rules P-FPT-n of `docs/design/persistence.md`)
//! - P-FPT-1: a slot's key, value and fingerprint are persisted before the bitmap store that
//!   makes them valid. P-FPT-2: that bitmap store is the commit point (one 8-byte store).
//! - P-FPT-3..8: split (log the current leaf; allocate the new leaf into the log, which arms
//!   it; copy and persist it; persist its bitmap; persist the old leaf's complementary bitmap —
//!   the logical split; link the new leaf, a 16-byte store that recovery redoes while the log is
//!   armed; disarm by nulling the log's new-leaf segment word).
//! - P-FPT-9: a delete's cleared bitmap is its commit point.
//! - P-FPT-10..12: leaf deletion: persist the predecessor and the leaf's offset word, then the
//!   leaf's segment word, which arms the delete log; unlink the leaf (a 16-byte store redone by
//!   recovery while the log is armed); free it through the allocator, whose durable null of the
//!   log's leaf disarms the log.
//! - P-FPT-13: creation: `head` nulled (unless resuming), the root with magic 0 and empty logs,
//!   the first leaf, then the root magic.
//! - With a persistent index: P-FPT-27 (a split makes room in the index first, and inserts the
//!   new leaf's entry after the link and before the disarm), P-FPT-28 (a leaf deletion removes
//!   the entry after the unlink and before the free), P-FPT-29 (creation nulls the index
//!   pointer first and creates the index and the head's entry before the magic), P-FPT-35 (a
//!   byte-key leaf's leak rule at its first lock in an open), P-FPT-36 (a byte-key leaf
//!   deletion invalidates the last key and frees the key blocks after the entry's removal).
//!
//! Every value read from PM (pointers, bitmaps) is validated before use: a pointer resolves
//! through the pool set with checked arithmetic, a bitmap's bits ≥ 32 are refused, a walk is
//! bounded; a damaged tree is [`StorageError::Corrupted`] in every build profile.
//!
//! # Concurrency
//! Every operation takes `&self`; the tree is `Sync` (`docs/design/fptree.md`, "The
//! concurrent tree"). Writers lock the leaf (its `L_LOCK` word, a version lock tagged with this
//! open's epoch, VL5 of `vlock.rs`): pinned index lookup, `try_lock`, pin still valid (else
//! release and retry: no writer waits while holding a leaf lock), the change in the leaf's
//! persist order, unlock (after the persists: validated readers never see an unpersisted
//! change, conventions §2.6). Splits and leaf deletions also take the SMO mutex (the root has
//! one split and one delete log) after the leaf's lock; a deletion `try_lock`s the
//! predecessor. The new leaf of a split is born unlocked (DEFECT-2) and held locked by the
//! splitter until the split log is disarmed. Readers take no lock: pinned lookup, leaf
//! snapshot, copy, validation, pin check (conventions §2 rule 4). P-FPT-30: the epoch is
//! advanced durably at every open, so no lock word of an earlier process reads locked.
//! The allocator may be shared with other structures used by other threads.
//! `PAllocator::defragment` and `release_free_segments` (which unmap) must not run while a
//! tree operation is in flight. The named points of `hooks.rs` (writer routed / locked / busy,
//! reader routed / searched, scan routed / copied / key block, split linked) are where the
//! interleaving tests stop a thread (cargo feature `test-hooks`; nothing without it).

#[cfg(feature = "test-hooks")]
pub mod hooks;
#[cfg(not(feature = "test-hooks"))]
mod hooks;
mod index;
mod key;
mod layout;
mod layout_var;
pub mod olc;
mod pbound;
pub mod persistent;
mod scan;
mod stats;
mod var;
pub mod vlock;

use std::borrow::Borrow;
use std::ops::Bound::{self, Included, Unbounded};
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ferrite_pmem::{PPtr, PoolSet};

use self::hooks::Point;
use self::index::Index;
use self::olc::{IndexKey, OlcIndex};
use self::persistent::PIndex;
use self::vlock::{EPOCH_SHIFT, EpochWord, Locked, MAX_EPOCH, PmWord, TryLock, VersionLock};
use crate::alloc::PAllocator;
use crate::storage::{StorageError, StorageResult};

pub use index::{INCOMPAT_PERSISTENT_INDEX, IndexPlacement, R_INDEX, TreeOptions};
pub use key::{
    ByteKey, INLINE_MAX, KeyKind, MAX_KEY_LEN, U64Key, fingerprint_bytes, shortest_separator,
};
pub use layout::{
    FULL, L_BITMAP, L_FP, L_KV, L_LOCK, L_NEXT, LEAF_SIZE, LeafImage, M, MicroLog, R_DEL_CUR,
    R_DEL_PREV, R_EPOCH, R_HEAD, R_SPLIT_CUR, R_SPLIT_NEW, ROOT_MAGIC, ROOT_SIZE, ROOT_VERSION,
    RootHeader, RootImage,
};
pub use layout_var::{
    EMPTY_SLOT, INCOMPAT_BYTE_KEYS, INLINE_TAG, KeyForm, SlotKey, VAR_LEAF_SIZE, VAR_SLOT_BYTES,
    VL_SLOTS, VarLeafImage, decode_slot, encode_inline, encode_pointer, key_form, var_slot_offset,
};
pub use scan::Direction;

/// The fingerprint of `key`: the high byte of a Fibonacci hash. Stable across builds and
/// processes (it is persisted).
pub fn fingerprint(key: u64) -> u8 {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

fn corrupt(what: impl Into<String>, at: PPtr) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("fptree {at:?}") }
}

/// `p` moved by `off` bytes inside its block. Only applied to pointers resolved with a length
/// that covers `off` (so the sum stays inside the segment's data area and cannot overflow).
fn field(p: PPtr, off: u64) -> PPtr {
    PPtr::new(p.segment, p.offset + off)
}

/// A leaf: its persistent pointer and its global offset in the pool set's space (valid while
/// the set is open: segments never move, PS3).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    g: u64,
    p: PPtr,
}

/// Resolves a pointer read from PM to a whole, 64-byte aligned block of `len` bytes.
fn resolve_block(set: &PoolSet, p: PPtr, len: u64, what: &str) -> StorageResult<u64> {
    if p.is_null() {
        return Err(corrupt(format!("{what}: null pointer"), p));
    }
    if !p.offset.is_multiple_of(64) {
        return Err(corrupt(format!("{what}: pointer is not 64-byte aligned"), p));
    }
    set.resolve_range(p, len).map_err(|e| corrupt(format!("{what}: {e}"), p))
}

/// Most leaves a walk can meet before it must have found a cycle: one per `leaf_size` bytes
/// of every live segment.
fn walk_limit(set: &PoolSet, leaf_size: u64) -> u64 {
    set.segments().iter().map(|s| s.data_len / leaf_size).sum::<u64>() + 1
}

/// Stores a 16-byte pointer at global offset `g` (16-aligned): offset word, then the segment
/// word (the commit word) with `Release`. Not failure-atomic by itself: callers persist it and
/// either store null → valid with the offset durable first, or are covered by an armed log.
fn store_pptr(set: &PoolSet, g: u64, p: PPtr) -> StorageResult<()> {
    set.store_u64(g + 8, p.offset, Ordering::Relaxed)?;
    set.store_u64(g, p.segment, Ordering::Release)?;
    Ok(())
}

/// What the root slot leads to.
enum RootState {
    /// A complete tree (magic, version, checksum verified).
    Valid,
    /// A creation this build started and did not finish (header written with magic 0).
    Resumable,
    /// No header: a creation that crashed before its first persist (the block still holds
    /// what its previous owner left), or a damaged root.
    NoHeader,
}

/// The incompatible-feature flags this build knows: a key kind's leaf format (bit 0), the
/// persistent inner index (bit 1), in any combination.
const KNOWN_INCOMPAT: u64 = INCOMPAT_BYTE_KEYS | INCOMPAT_PERSISTENT_INDEX;

/// The placement a root's flags record.
fn placement_of(incompat: u64) -> IndexPlacement {
    if incompat & INCOMPAT_PERSISTENT_INDEX != 0 {
        IndexPlacement::Persistent
    } else {
        IndexPlacement::Dram
    }
}

/// The root flags of a tree of kind `K` with `placement` (every combination is built: byte
/// keys with a persistent index have flags 0b11). A `Result` so that a combination a later
/// format drops can be refused here.
fn flags_of<K: KeyKind>(placement: IndexPlacement) -> StorageResult<u64> {
    match placement {
        IndexPlacement::Dram => Ok(K::INCOMPAT),
        IndexPlacement::Persistent => Ok(K::INCOMPAT | INCOMPAT_PERSISTENT_INDEX),
    }
}

/// `Incompatible` for a tree of the other key kind (never read with the wrong leaf layout).
fn wrong_kind<K: KeyKind>(h: &RootHeader, at: PPtr) -> StorageError {
    let other = if h.incompat & INCOMPAT_BYTE_KEYS != 0 { "byte keys" } else { "u64 keys" };
    if h.incompat & INCOMPAT_BYTE_KEYS == K::INCOMPAT {
        // The kind matches: the placement's combination with it is what is refused.
        return StorageError::Incompatible {
            what: format!("an fptree of {other} with root flags {:#x}", h.incompat),
            at: format!("fptree {at:?}"),
        };
    }
    StorageError::Incompatible {
        what: format!("an fptree of {other} opened as a tree of {}", K::NAME),
        at: format!("fptree {at:?}"),
    }
}

fn root_state<K: KeyKind>(h: &RootHeader, at: PPtr) -> StorageResult<RootState> {
    if h.magic == ROOT_MAGIC {
        if h.version != ROOT_VERSION || h.incompat & !KNOWN_INCOMPAT != 0 {
            return Err(StorageError::Incompatible {
                what: format!("fptree root version {} incompat {:#x}", h.version, h.incompat),
                at: format!("fptree {at:?}"),
            });
        }
        if h.checksum != h.crc() {
            return Err(corrupt("root checksum mismatch", at));
        }
        if flags_of::<K>(placement_of(h.incompat)).ok() != Some(h.incompat) {
            return Err(wrong_kind::<K>(h, at));
        }
        if h.slots as usize != M || u64::from(h.leaf_size) != K::LEAF_SIZE || h.value_size != 8 {
            return Err(StorageError::Incompatible {
                what: format!("fptree with {} slots of {} bytes", h.slots, h.leaf_size),
                at: format!("fptree {at:?}"),
            });
        }
        return Ok(RootState::Valid);
    }
    for p in [IndexPlacement::Dram, IndexPlacement::Persistent] {
        if let Ok(flags) = flags_of::<K>(p)
            && *h == RootHeader::in_progress_of(K::LEAF_SIZE as u32, flags)
        {
            return Ok(RootState::Resumable);
        }
    }
    if h.magic == 0 && h.checksum == h.crc() {
        // An unfinished creation of the other kind: finishing it as this kind would misread it.
        return Err(wrong_kind::<K>(h, at));
    }
    if h.checksum == h.crc() {
        // A header whose checksum holds but whose magic is neither 0 nor ours: damage.
        return Err(corrupt(format!("bad root magic {:#x}", h.magic), at));
    }
    Ok(RootState::NoHeader)
}

/// Every valid pair of the tree whose root pointer is stored at `root_slot`, read by walking
/// its leaf list (unsorted within each leaf), without recovering or building an index: what a
/// DRAM-only design would have to read back at restart (the rebuild baseline of the
/// benchmarks), and a tool for inspecting an image. Typed errors on a damaged list, never a
/// loop.
pub fn read_all_pairs(set: &PoolSet, root_slot: PPtr) -> StorageResult<Vec<(u64, u64)>> {
    let slot = set.resolve_range(root_slot, 16)?;
    let root = set.load_pptr(slot)?;
    let rg = resolve_block(set, root, ROOT_SIZE, "root")?;
    let h: RootHeader = set.read_struct(rg)?;
    if h.incompat & INCOMPAT_BYTE_KEYS != 0 {
        return Err(wrong_kind::<U64Key>(&h, root));
    }
    let mut out = Vec::new();
    let mut at = set.load_pptr(rg + R_HEAD)?;
    let limit = walk_limit(set, LEAF_SIZE);
    let mut seen = 0;
    while !at.is_null() {
        seen += 1;
        if seen > limit {
            return Err(corrupt("the leaf list has a cycle", at));
        }
        let g = resolve_block(set, at, LEAF_SIZE, "leaf")?;
        let l: LeafImage = set.read_struct(g)?;
        out.extend(l.valid().map(|s| (l.kv[s][0], l.kv[s][1])));
        at = l.next;
    }
    Ok(out)
}

/// What [`Tree::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Leaves in the list.
    pub leaves: u64,
    /// Keys in the tree.
    pub keys: u64,
}

/// A concurrent FPTree over keys of kind `K` (see the module docs): [`FPTree`] for `u64`
/// keys, [`FPTreeVar`] for byte keys. Each kind has thin methods with its natural argument
/// types (`insert(u64, u64)`, `insert(&[u8], u64)`, ...) over one generic body.
#[derive(Debug)]
pub struct Tree<K: KeyKind> {
    alloc: Arc<PAllocator>,
    /// The allocator's pool set, held directly (one pointer less on every access).
    set: Arc<PoolSet>,
    /// Where the caller keeps the root pointer.
    root_slot: PPtr,
    /// The root block, and its global offset.
    root: PPtr,
    rg: u64,
    /// Lower bound → leaf (T5), in DRAM (bounds are owned copies, never pointers into PM key
    /// blocks; values are leaf global offsets, the `PPtr` derived when a split or a leaf
    /// deletion needs it) or in PM (`index.rs`).
    index: Index<K>,
    /// Number of keys; [`LEN_UNKNOWN`] until counted (a persistent-index tree opens without
    /// walking its leaves and counts them at the first `len()`).
    len: AtomicU64,
    /// Set once the key count is known (at open for the DRAM placement; for the persistent
    /// one by the first `len()` or modification, before any modification runs).
    counted: OnceLock<()>,
    /// Set when a modification failed half-way (in any thread): every later call returns
    /// `Poisoned`.
    poisoned: AtomicBool,
    /// The structure-modification lock: held by splits and leaf deletions (the root has one
    /// split log and one delete log), taken while holding the leaf's lock.
    smo: Mutex<()>,
    /// This open's lock-word epoch (VL5 of `vlock.rs`, rule P-FPT-30); 0 until [`Tree::start`].
    epoch: u64,
}

/// `Tree::len` not counted yet.
const LEN_UNKNOWN: u64 = u64::MAX;

/// What one attempt of a modification under a leaf lock did.
enum Step<T> {
    /// Changed the leaf: unlock with a new version; the operation's result.
    Done(T),
    /// Changed nothing: unlock unchanged; the operation's result.
    Unchanged(T),
    /// Split the leaf: unlock it (changed) and run the operation again.
    Split,
    /// Lost a race for a neighbour: unlock unchanged, pause, run again.
    Retry,
    /// Deleted the leaf, which the step already unlocked (obsolete) and freed.
    Deleted(T),
}

/// One round of a retry loop: a spin hint, then yielding (as the version lock's waits).
#[inline]
fn pause(round: &mut u32) {
    if *round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *round = round.saturating_add(1);
}

/// The FPTree with fixed 8-byte keys (v1 leaves).
pub type FPTree = Tree<U64Key>;
/// The FPTree with byte-string keys of up to [`MAX_KEY_LEN`] bytes (v2 leaves).
pub type FPTreeVar = Tree<ByteKey>;

/// What the rebuild learns from one leaf (after the kind's repairs).
#[doc(hidden)]
#[derive(Debug)]
pub struct LeafSummary<O> {
    /// The next leaf.
    pub next: PPtr,
    /// Valid keys.
    pub count: u64,
    /// The smallest and the largest valid key (`None`: the leaf is empty).
    pub min_max: Option<(O, O)>,
}

impl<K: IndexKey> Tree<K> {
    /// Creates a tree whose root block is allocated from `alloc` into `root_slot` (a 16-aligned
    /// persistent-pointer location the caller owns, e.g. [`PAllocator::root_location`] or a
    /// slot of the caller's own table), so that several trees can share one allocator.
    ///
    /// `root_slot` must hold null, or a root whose creation did not finish: a `create` that
    /// crashed is finished by calling `create` (or `open`) again with the same slot. Errors:
    /// `InvalidArgument` if a tree already lives there; `Incompatible` if an unfinished
    /// creation of the other key kind lives there; `PoolFull` if the allocator cannot give the
    /// root or the first leaf (from a null slot, nothing stays allocated and the slot stays
    /// null; a resumed creation keeps its root for the next try).
    pub fn create(alloc: Arc<PAllocator>, root_slot: PPtr) -> StorageResult<Tree<K>> {
        Self::create_with(alloc, root_slot, TreeOptions::default())
    }

    /// As [`Tree::create`], with the inner index placed as `opts` says (recorded in the root:
    /// [`Tree::open`] reads it back). [`IndexPlacement::Persistent`] is the fully persistent
    /// variant (both key kinds: byte keys get byte separators). A resumed creation keeps the
    /// placement its root header records.
    pub fn create_with(
        alloc: Arc<PAllocator>,
        root_slot: PPtr,
        opts: TreeOptions,
    ) -> StorageResult<Tree<K>> {
        flags_of::<K>(opts.index)?;
        if opts.index == IndexPlacement::Persistent
            && (!(persistent::PN_MIN_FANOUT..=persistent::PN_MAX_SLOTS)
                .contains(&opts.index_fanout)
                || !opts.index_fanout.is_multiple_of(2))
        {
            return Err(StorageError::InvalidArgument(format!(
                "index fan-out {}: an even number in 4..=32",
                opts.index_fanout
            )));
        }
        let set = alloc.pool().clone();
        let slot = set
            .resolve_range(root_slot, 16)
            .map_err(|e| StorageError::InvalidArgument(format!("root slot {root_slot:?}: {e}")))?;
        let root = set.load_pptr(slot)?;
        if root.is_null() {
            let root = alloc.allocate(ROOT_SIZE, root_slot)?;
            let mut t = Tree::new(alloc, root_slot, root)?;
            return match t.init(true, opts).and_then(|()| t.start()) {
                Ok(()) => Ok(t),
                Err(e @ StorageError::PoolFull { .. }) => {
                    // The first leaf or the index did not fit: give the first leaf (if it
                    // was allocated) and the root back, leaving the slot null. (The index's
                    // own creation leaves its slot null on `PoolFull`.)
                    if !set.load_pptr(t.rg + R_HEAD)?.is_null() {
                        t.alloc.deallocate(field(root, R_HEAD))?;
                    }
                    t.alloc.deallocate(root_slot)?;
                    Err(e)
                }
                Err(e) => Err(e),
            };
        }
        let mut t = Tree::new(alloc, root_slot, root)?;
        let h: RootHeader = set.read_struct(t.rg)?;
        match root_state::<K>(&h, root)? {
            RootState::Valid => Err(StorageError::InvalidArgument(format!(
                "a tree already exists at {root:?} (root slot {root_slot:?})"
            ))),
            RootState::Resumable => {
                // The header records the placement this creation started with.
                let opts = TreeOptions { index: placement_of(h.incompat), ..opts };
                t.init(false, opts)?;
                t.start()?;
                Ok(t)
            }
            RootState::NoHeader => {
                // The creation crashed before its first persist: nothing of the tree exists
                // but the root block, whose content is its previous owner's.
                t.init(true, opts)?;
                t.start()?;
                Ok(t)
            }
        }
    }

    /// Opens the tree whose root pointer is stored at `root_slot`: replays the micro-logs,
    /// finishes interrupted key-block work (byte keys) and rebuilds the DRAM index from the
    /// leaf list. Run the allocator's recovery first ([`PAllocator::open`] does). A root whose
    /// creation did not finish but wrote its header is finished here.
    ///
    /// Errors: `InvalidArgument` if the slot holds null (no tree was created there);
    /// `Corrupted` (what starts with `"no root header"`) if the root block holds no header —
    /// a creation that crashed before its first persist (finish it with [`Tree::create`]) or
    /// damage; `Incompatible` for a tree of the other key kind (never misread) or a foreign
    /// format; `Corrupted` for a damaged tree.
    pub fn open(alloc: Arc<PAllocator>, root_slot: PPtr) -> StorageResult<Tree<K>> {
        let set = alloc.pool().clone();
        let slot = set
            .resolve_range(root_slot, 16)
            .map_err(|e| StorageError::InvalidArgument(format!("root slot {root_slot:?}: {e}")))?;
        let root = set.load_pptr(slot)?;
        if root.is_null() {
            return Err(StorageError::InvalidArgument(format!(
                "no tree: root slot {root_slot:?} holds null"
            )));
        }
        let mut t = Tree::new(alloc, root_slot, root)?;
        let h: RootHeader = set.read_struct(t.rg)?;
        match root_state::<K>(&h, root)? {
            RootState::Valid => {
                if placement_of(h.incompat) == IndexPlacement::Persistent {
                    // Open order: allocator (done) → the index's logs → the tree's logs,
                    // which may insert or remove index entries (idempotently).
                    let ix = PIndex::open(t.alloc.clone(), field(root, R_INDEX))?;
                    t.index = Index::persistent(ix);
                }
                t.recover_split()?;
                t.recover_delete()?;
            }
            RootState::Resumable => {
                let opts = TreeOptions { index: placement_of(h.incompat), ..Default::default() };
                t.init(false, opts)?;
            }
            RootState::NoHeader => {
                return Err(corrupt(
                    "no root header (a creation that crashed before its first persist, or damage)",
                    root,
                ));
            }
        }
        t.start()?;
        Ok(t)
    }

    /// The last step of every creation and open, before the tree is handed out: the DRAM
    /// index is built (`rebuild`), then this open's lock-word epoch is made durable.
    fn start(&mut self) -> StorageResult<()> {
        self.rebuild()?;
        self.advance_epoch()
    }

    /// P-FPT-30: the root's epoch word (`R_EPOCH`) moves to the next epoch, durably, before any
    /// thread can lock a leaf, so every lock word written in this open carries an epoch that
    /// no later open uses again (VL5). When the field is exhausted (or holds a value no build
    /// writes) every leaf's lock word is first stored 0 and persisted, then the epoch restarts
    /// at 1: a walk of the leaves once in [`vlock::MAX_EPOCH`] opens.
    fn advance_epoch(&mut self) -> StorageResult<()> {
        let set = self.set.clone();
        let at = self.rg + R_EPOCH;
        let last = set.load_u64(at, Ordering::Acquire)?;
        let next = if last < vlock::MAX_EPOCH {
            last + 1
        } else {
            self.walk_leaves(|leaf| {
                set.store_u64(leaf.g + L_LOCK, 0, Ordering::Relaxed)?;
                Ok(set.flush_rule("P-FPT-30", leaf.g + L_LOCK, 8)?) // ORDER(P-FPT-30): lock words of old epochs cleared before the epoch restarts
            })?;
            set.fence_rule("P-FPT-30"); // ORDER(P-FPT-30): the cleared words are durable before epoch 1
            1
        };
        set.store_u64(at, next, Ordering::Release)?;
        set.persist_rule("P-FPT-30", at, 8)?; // ORDER(P-FPT-30): the epoch is durable before any leaf is locked in it
        self.epoch = next;
        Ok(())
    }

    /// Where the inner index lives (recorded in the root at creation).
    pub fn placement(&self) -> IndexPlacement {
        self.index.placement()
    }

    fn new(alloc: Arc<PAllocator>, root_slot: PPtr, root: PPtr) -> StorageResult<Tree<K>> {
        let rg = resolve_block(alloc.pool(), root, ROOT_SIZE, "root")?;
        Ok(Tree {
            set: alloc.pool().clone(),
            alloc,
            root_slot,
            root,
            rg,
            index: Index::Dram(Box::default()),
            len: AtomicU64::new(0),
            counted: OnceLock::new(),
            poisoned: AtomicBool::new(false),
            smo: Mutex::new(()),
            epoch: 0,
        })
    }

    fn set(&self) -> &PoolSet {
        &self.set
    }

    /// The leaf at global offset `g` (a leaf of the index), with its persistent pointer.
    fn leaf_at(&self, g: u64) -> StorageResult<Leaf> {
        let p =
            self.set.to_pptr(g).map_err(|e| corrupt(format!("leaf at {g:#x}: {e}"), self.root))?;
        Ok(Leaf { g, p })
    }

    /// Creation (P-FPT-13), resumable: the first persist writes the whole root with magic 0
    /// (a torn root reads as no header or as an unfinished creation), the magic comes last. A
    /// resumed creation (`fresh == false`: the root holds this build's header with magic 0)
    /// keeps its `head` (null, or the first leaf it allocated); otherwise the root held
    /// another owner's bytes and `head` is nulled durably before any header can be valid.
    ///
    /// The persistent variant (P-FPT-13 extended): the index root's slot is nulled with
    /// `head` in the first persist; after the first leaf, the index is created into the slot
    /// (its own resumable creation, P-FPT-19) and the head registered under bound 0
    /// (idempotent), all before the magic.
    fn init(&mut self, fresh: bool, opts: TreeOptions) -> StorageResult<()> {
        let r = self.rg;
        let set = self.alloc.pool().clone();
        let flags = flags_of::<K>(opts.index)?;
        let persistent = opts.index == IndexPlacement::Persistent;
        let (head, ix_root) = if fresh {
            // A torn header persist below must never pair a valid header with a `head` (or an
            // index root) left by the block's previous owner, nor a valid checksum with the
            // previous owner's magic (which would read as a damaged tree): null `head` (its
            // segment word), the index root's and the magic first. Magic and `head` are in
            // line 0, the index root in line 2; any order of their persistence is harmless.
            set.store_u64(r, 0, Ordering::Relaxed)?;
            set.store_u64(r + R_HEAD, PPtr::NULL.segment, Ordering::Release)?;
            let len = if persistent {
                set.store_u64(r + R_INDEX, PPtr::NULL.segment, Ordering::Release)?;
                ROOT_SIZE
            } else {
                64
            };
            set.persist_rule("P-FPT-13", r, len)?; // ORDER(P-FPT-13): magic, head (and index root) nulled before the header
            (PPtr::NULL, PPtr::NULL)
        } else {
            let ix = if persistent { set.load_pptr(r + R_INDEX)? } else { PPtr::NULL };
            (set.load_pptr(r + R_HEAD)?, ix)
        };
        let mut img = RootImage::in_progress_of(head, K::LEAF_SIZE as u32, flags);
        if persistent {
            // The index root's pointer is written with its current value (never a transient
            // zero, which would read as a pointer to segment 0).
            img.delete.reserved[0] = ix_root.segment;
            img.delete.reserved[1] = ix_root.offset;
        }
        set.write_struct(r, &img)?;
        set.persist_rule("P-FPT-13", r, ROOT_SIZE)?; // ORDER(P-FPT-13): header (magic 0), head and empty logs
        let head = if head.is_null() {
            self.alloc.allocate(K::LEAF_SIZE, field(self.root, R_HEAD))?
        } else {
            head
        };
        let hg = resolve_block(&set, head, K::LEAF_SIZE, "first leaf")?;
        K::write_empty_leaf(&set, hg)?;
        set.persist_rule("P-FPT-13", hg, K::LEAF_SIZE)?; // ORDER(P-FPT-13): an empty first leaf
        if persistent {
            let slot = field(self.root, R_INDEX);
            let mut ix = if ix_root.is_null() {
                PIndex::create_with_fanout(self.alloc.clone(), slot, opts.index_fanout)?
            } else {
                match PIndex::open(self.alloc.clone(), slot) {
                    Ok(ix) => ix,
                    Err(StorageError::Corrupted { what, .. })
                        if what.starts_with("no index root header") =>
                    {
                        // The index's creation crashed before its first persist: finish it.
                        PIndex::create_with_fanout(self.alloc.clone(), slot, opts.index_fanout)?
                    }
                    Err(e) => return Err(e),
                }
            };
            ix.insert_k(K::lowest().borrow(), head)?; // idempotent: a resumed creation may have done it (P-FPT-29)
            self.index = Index::persistent(ix);
        }
        set.store_u64(r, ROOT_MAGIC, Ordering::Release)?;
        Ok(set.persist_rule("P-FPT-13", r, 8)?) // ORDER(P-FPT-13): the magic commits creation
    }

    fn head(&self) -> StorageResult<PPtr> {
        Ok(self.set().load_pptr(self.rg + R_HEAD)?)
    }

    fn resolve_leaf(&self, p: PPtr) -> StorageResult<Leaf> {
        Ok(Leaf { g: resolve_block(self.set(), p, K::LEAF_SIZE, "leaf")?, p })
    }

    /// A leaf's bitmap, with bits beyond the last slot refused (T2).
    fn checked_bitmap(&self, leaf: Leaf) -> StorageResult<u64> {
        let b = self.set().load_u64(leaf.g + L_BITMAP, Ordering::Acquire)?;
        if b & !FULL != 0 {
            return Err(corrupt(format!("bitmap {b:#x} has bits beyond slot {M}"), leaf.p));
        }
        Ok(b)
    }

    // ----- recovery -----

    /// Algorithm 4.4: finish or discard an interrupted split.
    fn recover_split(&mut self) -> StorageResult<()> {
        let set = self.set();
        let new = set.load_pptr(self.rg + R_SPLIT_NEW)?;
        if new.is_null() {
            // Disarmed, or the allocation did not commit (the allocator's recovery discarded
            // it): nothing was split. `cur` may be stale.
            return Ok(());
        }
        let cur = set.load_pptr(self.rg + R_SPLIT_CUR)?;
        if cur.is_null() || cur == new {
            return Err(corrupt("the split log names a new leaf but no other leaf", self.root));
        }
        let (cur, new) = (self.resolve_leaf(cur)?, self.resolve_leaf(new)?);
        if self.checked_bitmap(cur)? == FULL {
            self.split_from_copy(cur, new)?; // from the copy on
        } else {
            let nb = self.checked_bitmap(new)?;
            self.split_from_bitmaps(cur, new, nb, None)?; // from the logical split on
        }
        Ok(())
    }

    /// Algorithm 4.7, reshaped: an armed delete log (`cur` not null) is always finished. Its
    /// predecessor (null: the leaf was the head) was persisted before `cur` armed the log
    /// (P-FPT-10), so the unlink can be redone (idempotent, and it repairs a torn link), the
    /// leaf's key blocks and the leaf freed; the allocator's free of the leaf disarms the log
    /// (P-FPT-12). A disarmed log's `prev` is stale and ignored.
    fn recover_delete(&mut self) -> StorageResult<()> {
        let set = self.set();
        let cur = set.load_pptr(self.rg + R_DEL_CUR)?;
        if cur.is_null() {
            return Ok(());
        }
        let prev = set.load_pptr(self.rg + R_DEL_PREV)?;
        let cur = self.resolve_leaf(cur)?;
        let next = set.load_pptr(cur.g + L_NEXT)?;
        if !next.is_null() {
            // Validate before redoing anything: a damaged log must not overwrite a link.
            self.resolve_leaf(next)?;
        }
        if prev.is_null() {
            self.store_head(next)?;
        } else {
            let prev = self.resolve_leaf(prev)?;
            self.store_next(prev, next)?;
        }
        if let Index::Persistent(_) = self.index {
            self.remove_entry_of(cur)?; // P-FPT-28, redone: idempotent
            self.index.lower_head()?; // the new head's bound the lowest (T5), redone
        }
        K::release_leaf_keys(self, cur)?; // after the entry's removal (P-FPT-36)
        self.free_logged_leaf().map_err(|e| match e {
            StorageError::InvalidArgument(why) => {
                corrupt(format!("the delete log names no allocated leaf: {why}"), cur.p)
            }
            e => e,
        })
    }

    /// Delete recovery with a persistent index: removes the entry naming the logged `leaf`,
    /// if it is still there. The leaf keeps its last key while the log is armed (DEFECT-5,
    /// option (b)) until the entry is removed, so the key routes to the leaf's entry; a leaf
    /// with no valid key had its entry removed already (byte keys invalidate the last key
    /// after the removal, P-FPT-36; fixed keys never do). No walk: O(the index's height).
    fn remove_entry_of(&mut self, leaf: Leaf) -> StorageResult<()> {
        let mut pairs = Vec::new();
        K::leaf_pairs(self, leaf, (Unbounded, Unbounded), &mut pairs)?;
        let found = match pairs.first() {
            Some((k, _)) => {
                let (b, g) = self.route_bound(k.borrow())?;
                (g == leaf.g).then_some(b)
            }
            None => None,
        };
        match found {
            Some(b) => self.index.remove(b.borrow()),
            None => Ok(()),
        }
    }

    /// Rebuilds the DRAM index from the leaf list (Algorithm 4.13; lock words are not reset:
    /// the epoch of P-FPT-30 makes every earlier word read unlocked), finishing interrupted key-block work (byte keys: the leak rule), checking pointers,
    /// bitmaps, order and cycles.
    ///
    /// A tree with a persistent index rebuilds nothing (its index is in PM) and walks no leaf:
    /// its key count is left to be counted at the first [`Tree::len`].
    fn rebuild(&mut self) -> StorageResult<()> {
        if let Index::Persistent(_) = self.index {
            self.len.store(LEN_UNKNOWN, Ordering::Relaxed);
            return Ok(());
        }
        let mut len = 0u64;
        let mut at = self.head()?;
        if at.is_null() {
            return Err(corrupt("the tree has no leaf", self.root));
        }
        let set = self.set.clone();
        let limit = walk_limit(&set, K::LEAF_SIZE);
        let mut prev_max: Option<K::Owned> = None;
        let mut first = true;
        let mut seen = 0u64;
        // (bound, leaf) in key order: the index is built from it in one go at the end.
        let mut bounds: Vec<(K::Owned, u64)> = Vec::new();
        while !at.is_null() {
            seen += 1;
            if seen > limit {
                return Err(corrupt("the leaf list has a cycle", at));
            }
            let leaf = self.resolve_leaf(at)?;
            // The walk is a pointer chase over scattered leaves: request the next leaf's lines
            // before this one is read whole, so its misses overlap this leaf's work (a hint
            // only; the next pointer is validated when the walk gets there).
            if let Ok(next) = set.load_pptr(leaf.g + L_NEXT)
                && let Ok(ng) = set.resolve_range(next, K::LEAF_SIZE)
            {
                for line in 0..K::LEAF_SIZE.div_ceil(64) {
                    set.prefetch(ng + 64 * line);
                }
            }
            let s = K::rebuild_leaf(self, leaf)?;
            match s.min_max {
                Some((mn, mx)) => {
                    let bound = match &prev_max {
                        _ if first => K::lowest(),
                        Some(pm) => K::separator(pm.borrow(), mn.borrow()).ok_or_else(|| {
                            corrupt(format!("leaf starts at key {mn:?}, not above {pm:?}"), at)
                        })?,
                        None => return Err(corrupt("a leaf after an empty leaf", at)),
                    };
                    bounds.push((bound, leaf.g));
                    prev_max = Some(mx);
                }
                None if first && s.next.is_null() => {
                    bounds.push((K::lowest(), leaf.g)); // the only leaf, empty (T3)
                }
                None => return Err(corrupt("an empty leaf that is not the only leaf", at)),
            }
            len += s.count;
            first = false;
            at = s.next;
        }
        // Sorted and distinct (each bound is above the previous leaf's keys): a bulk build.
        self.index = Index::Dram(Box::new(OlcIndex::bulk_load(bounds)?));
        self.len.store(len, Ordering::Relaxed);
        let _ = self.counted.set(());
        Ok(())
    }

    /// Calls `f` on every leaf of the list, in order (bounded: a cycle is `Corrupted`).
    fn walk_leaves(&self, mut f: impl FnMut(Leaf) -> StorageResult<()>) -> StorageResult<()> {
        let mut at = self.head()?;
        let limit = walk_limit(self.set(), K::LEAF_SIZE);
        let mut seen = 0u64;
        while !at.is_null() {
            seen += 1;
            if seen > limit {
                return Err(corrupt("the leaf list has a cycle", at));
            }
            let leaf = self.resolve_leaf(at)?;
            f(leaf)?;
            at = self.set().load_pptr(leaf.g + L_NEXT)?;
        }
        Ok(())
    }

    /// The keys of the tree, counted by a walk of the leaf list's bitmaps.
    fn count_keys(&self) -> StorageResult<u64> {
        let mut n = 0u64;
        self.walk_leaves(|leaf| {
            n += u64::from(self.checked_bitmap(leaf)?.count_ones());
            Ok(())
        })?;
        Ok(n)
    }

    /// Adjusts the key count (an unknown one, from a damaged list, stays unknown).
    fn add_len(&self, d: i64) {
        let _ = self.len.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n != LEN_UNKNOWN).then(|| n.wrapping_add_signed(d))
        });
    }

    /// Makes sure the key count is known before the first modification: the persistent
    /// placement opens without walking its leaves, so the first `len()` or modification
    /// counts them, while every other modifier waits in `get_or_init` (none has changed a
    /// leaf yet, so the count is exact). A damaged list leaves it unknown.
    #[inline]
    fn ensure_counted(&self) {
        self.counted.get_or_init(|| {
            let n = self.count_keys().unwrap_or(LEN_UNKNOWN);
            self.len.store(n, Ordering::Relaxed);
        });
    }

    fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }

    /// The lock word of the leaf at `g`, seen in this open's epoch (VL5).
    #[inline]
    fn leaf_word(&self, g: u64) -> StorageResult<EpochWord<PmWord<'_>>> {
        EpochWord::new(PmWord::new(&self.set, g + L_LOCK), self.epoch)
    }

    /// P-FPT-35, the leak rule at a leaf's first lock in an open of a tree with a persistent
    /// index (which walks no leaf at open): `l` taken from count 0 of this epoch means no
    /// lock of this open has held the leaf since its word was last of an earlier epoch (or
    /// it was released unchanged, and the rule runs again, finding nothing). Runs before the
    /// leaf is changed in this open; the new leaf of a split is locked without it (it is
    /// written whole from the split, nothing pending).
    fn first_lock_repair(&self, g: u64, l: &Locked) -> StorageResult<()> {
        if matches!(self.index, Index::Persistent(_)) && l.raw() == (self.epoch << EPOCH_SHIFT) | 1
        {
            K::repair_leaf(self, self.leaf_at(g)?)?;
        }
        Ok(())
    }

    /// Whether the leak rule of `leaf` may still be pending in this open (P-FPT-35): a tree
    /// with a persistent index whose leaf word is not of this open's epoch.
    fn repair_pending(&self, leaf: Leaf) -> StorageResult<bool> {
        if !matches!(self.index, Index::Persistent(_)) || self.epoch == 0 {
            return Ok(false);
        }
        let raw = self.set.load_u64(leaf.g + L_LOCK, Ordering::Acquire)?;
        Ok((raw >> EPOCH_SHIFT) & MAX_EPOCH != self.epoch)
    }

    /// The SMO lock (a panic while holding it leaves PM as the logs describe: used as is).
    fn smo(&self) -> MutexGuard<'_, ()> {
        self.smo.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the leaf that routes `key` (the leaf-lock protocol: pinned lookup, lock, pin
    /// still valid). Never waits while holding a lock: a busy leaf or a failed pin releases
    /// and retries from the lookup.
    fn lock_leaf(&self, key: &K::Key) -> StorageResult<(u64, Locked)> {
        let mut round = 0u32;
        loop {
            let (g, pin) = self.index.lookup_pinned(&self.set, key)?;
            hooks::at(Point::WriterRouted, g);
            let w = self.leaf_word(g)?;
            if let TryLock::Acquired(l) = w.try_lock()? {
                hooks::at(Point::WriterLocked, g);
                if self.index.still_valid(&pin) {
                    if let Err(e) = self.first_lock_repair(g, &l) {
                        self.poisoned.store(true, Ordering::Relaxed);
                        w.unlock(l)?;
                        return Err(e);
                    }
                    return Ok((g, l));
                }
                w.unlock_unchanged(l)?;
            } else {
                hooks::at(Point::WriterBusy, g);
            }
            pause(&mut round);
        }
    }

    // ----- lookups -----

    /// The leaf (global offset) that holds (or would hold) `key`.
    #[inline]
    fn route(&self, key: &K::Key) -> StorageResult<u64> {
        self.index.route(&self.set, key)
    }

    /// As [`Tree::route`], with a copy of the leaf's bound.
    fn route_bound(&self, key: &K::Key) -> StorageResult<(K::Owned, u64)> {
        self.index.route_bound(&self.set, key)
    }

    /// A lock-free read (the seqlock recipe over the leaf's lock word): pinned lookup, leaf
    /// snapshot, the search on relaxed loads, leaf validation, pin still valid. Anything read
    /// before the validation is garbage: an error from it is a retry, not an answer; the
    /// second pin check rejects a leaf deleted and reused between snapshot and validation.
    fn get_k(&self, key: &K::Key) -> StorageResult<Option<u64>> {
        if self.is_poisoned() {
            return Err(StorageError::Poisoned);
        }
        K::validate(key)?;
        let mut round = 0u32;
        loop {
            let (leaf, pin) = self.index.lookup_pinned(&self.set, key)?;
            hooks::at(Point::ReaderRouted, leaf);
            let w = self.leaf_word(leaf)?;
            if let Some(v) = w.read_begin()? {
                let found = K::find(self, leaf, key);
                hooks::at(Point::ReaderSearched, leaf);
                let r = match found {
                    Ok(Some(slot)) => K::value(self, leaf, slot).map(Some),
                    other => other.map(|_| None),
                };
                if w.validate(v)? && self.index.still_valid(&pin) {
                    return r;
                }
            }
            pause(&mut round);
        }
    }

    /// Number of keys. A tree with a persistent index counts them at the first call after
    /// open (a walk of the leaf list's bitmaps: open itself walks nothing); a damaged list
    /// counts as 0 (and [`Tree::check`] reports it).
    pub fn len(&self) -> u64 {
        self.ensure_counted();
        match self.len.load(Ordering::Relaxed) {
            LEN_UNKNOWN => 0,
            n => n,
        }
    }

    /// Whether the tree holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of leaves (for a persistent index: counted at the first call after open).
    pub fn leaves(&self) -> u64 {
        self.index.leaves()
    }

    /// The allocator the tree lives on (shared).
    pub fn allocator(&self) -> &Arc<PAllocator> {
        &self.alloc
    }

    /// Where the caller keeps the root pointer.
    pub fn root_slot(&self) -> PPtr {
        self.root_slot
    }

    /// The root block.
    pub fn root(&self) -> PPtr {
        self.root
    }

    /// Every block the tree owns: its root, then its leaves in key order, then (byte keys) the
    /// key blocks of the valid slots. A caller that knows every user of the allocator checks
    /// T6 (no leak) by comparing the union of their blocks with [`PAllocator::check`]'s
    /// allocated blocks.
    ///
    /// With a persistent index: the root, the leaves of the list, the key blocks, then the
    /// index's own blocks (its root and nodes). Damage shows as missing blocks in the
    /// caller's comparison.
    pub fn blocks(&self) -> Vec<PPtr> {
        let leaves: Vec<u64> = match &self.index {
            Index::Dram(_) => match self.index.entries(&self.set) {
                Ok(e) => e.into_iter().map(|(_, g)| g).collect(),
                Err(_) => Vec::new(),
            },
            Index::Persistent(_) => {
                let mut v = Vec::new();
                let _ = self.walk_leaves(|l| {
                    v.push(l.g);
                    Ok(())
                });
                v
            }
        };
        let mut out: Vec<PPtr> = std::iter::once(self.root)
            .chain(leaves.iter().filter_map(|&g| self.set.to_pptr(g).ok()))
            .collect();
        for &g in &leaves {
            if let Ok(leaf) = self.leaf_at(g) {
                // A damaged leaf shows as missing blocks in the caller's comparison.
                let _ = K::key_blocks(self, leaf, &mut out);
                // Blocks of interrupted inserts and deletes whose leak rule waits for the
                // leaf's first lock in this open (P-FPT-35) are the tree's.
                if self.repair_pending(leaf).unwrap_or(false) {
                    let _ = K::pending_blocks(self, leaf, &mut out);
                }
            }
        }
        out.extend(self.index.blocks().unwrap_or_default());
        out
    }

    fn needs_split_k(&self, key: &K::Key) -> StorageResult<bool> {
        if self.is_poisoned() {
            return Err(StorageError::Poisoned);
        }
        let leaf = self.route(key)?;
        Ok(self.set().load_u64(leaf + L_BITMAP, Ordering::Acquire)? & FULL == FULL)
    }

    // ----- modifications -----

    /// The commit point of an insert, update or delete (P-FPT-2 / P-FPT-9).
    #[inline]
    fn publish_bitmap(&self, leaf: u64, bitmap: u64, rule: &'static str) -> StorageResult<()> {
        let set = self.set();
        set.store_u64(leaf + L_BITMAP, bitmap, Ordering::Release)?;
        Ok(set.persist_rule(rule, leaf + L_BITMAP, 8)?) // ORDER(P-FPT-2/9): the single commit store
    }

    /// Runs a modification on the locked leaf `leaf` and releases it: with a new version if
    /// `f` changed it, unchanged otherwise. A failure other than a clean `PoolFull` poisons
    /// the handle (conventions §4: after a failed persist or a broken invariant
    /// mid-operation, every call returns `Poisoned` until the tree is reopened, which runs
    /// recovery); the leaf is then released with a new version (readers retry and see the
    /// poisoned handle on their next call).
    fn locked_step<T>(
        &self,
        leaf: u64,
        l: Locked,
        f: impl FnOnce(&Self, &mut Option<Locked>) -> StorageResult<Step<T>>,
    ) -> StorageResult<Step<T>> {
        let w = self.leaf_word(leaf)?;
        let mut held = Some(l);
        let r = f(self, &mut held);
        if let Err(e) = &r
            && !matches!(e, StorageError::PoolFull { .. })
        {
            self.poisoned.store(true, Ordering::Relaxed);
        }
        // `None`: the step released the lock itself (a deleted leaf, unlocked obsolete).
        if let Some(l) = held {
            match &r {
                Ok(Step::Unchanged(_) | Step::Retry) => w.unlock_unchanged(l)?,
                _ => {
                    w.unlock(l)?;
                }
            }
        }
        r
    }

    /// Runs `op` on the locked leaf of `key` until it finishes (a split or a lost race for a
    /// neighbour releases the leaf and starts over from the lookup).
    fn modify<T>(
        &self,
        key: &K::Key,
        op: impl Fn(&Self, u64, &mut Option<Locked>) -> StorageResult<Step<T>>,
    ) -> StorageResult<T> {
        if self.is_poisoned() {
            return Err(StorageError::Poisoned);
        }
        K::validate(key)?; // before anything is written (K4); not a reason to poison
        self.ensure_counted();
        let mut round = 0u32;
        loop {
            if self.is_poisoned() {
                return Err(StorageError::Poisoned);
            }
            let (leaf, l) = self.lock_leaf(key)?;
            match self.locked_step(leaf, l, |t, held| op(t, leaf, held))? {
                Step::Done(v) | Step::Unchanged(v) | Step::Deleted(v) => return Ok(v),
                Step::Split => round = 0,
                Step::Retry => pause(&mut round),
            }
        }
    }

    /// Splits the full, locked `leaf` under the SMO lock (the new leaf is linked and in the
    /// index when this returns; the caller unlocks `leaf` and retries).
    fn split_locked(&self, leaf: u64) -> StorageResult<Step<bool>> {
        let _smo = self.smo();
        self.split(self.leaf_at(leaf)?)?;
        Ok(Step::Split)
    }

    fn insert_k(&self, key: &K::Key, value: u64) -> StorageResult<bool> {
        self.modify(key, |t, leaf, _| {
            if K::find(t, leaf, key)?.is_some() {
                return Ok(Step::Unchanged(false));
            }
            let bitmap = t.set().load_u64(leaf + L_BITMAP, Ordering::Acquire)?;
            if bitmap & FULL == FULL {
                return t.split_locked(leaf);
            }
            let slot = (!bitmap & FULL).trailing_zeros() as usize;
            K::write_new(t, leaf, slot, key, value)?;
            t.publish_bitmap(leaf, bitmap | (1 << slot), "P-FPT-2")?;
            t.add_len(1);
            Ok(Step::Done(true))
        })
    }

    fn update_k(&self, key: &K::Key, value: u64) -> StorageResult<bool> {
        self.modify(key, |t, leaf, _| {
            let Some(prev_slot) = K::find(t, leaf, key)? else {
                return Ok(Step::Unchanged(false));
            };
            let bitmap = t.set().load_u64(leaf + L_BITMAP, Ordering::Acquire)?;
            if bitmap & FULL == FULL {
                // Out of place needs a free slot: split, then retry in the key's half.
                return t.split_locked(leaf);
            }
            let slot = (!bitmap & FULL).trailing_zeros() as usize;
            K::write_moved(t, leaf, slot, prev_slot, key, value)?;
            t.publish_bitmap(leaf, (bitmap & !(1 << prev_slot)) | (1 << slot), "P-FPT-2")?;
            K::release_moved(t, leaf, prev_slot)?;
            Ok(Step::Done(true))
        })
    }

    fn delete_k(&self, key: &K::Key) -> StorageResult<bool> {
        self.modify(key, |t, leaf, held| {
            let Some(slot) = K::find(t, leaf, key)? else { return Ok(Step::Unchanged(false)) };
            let bitmap = t.set().load_u64(leaf + L_BITMAP, Ordering::Acquire)?;
            if bitmap.count_ones() == 1 && !t.only_leaf(leaf)? {
                // The leaf empties: unlink and free it instead (its last key goes with it).
                let smo = t.smo();
                if !t.only_leaf(leaf)? {
                    return match t.delete_locked_leaf(key, leaf, held)? {
                        true => {
                            drop(smo);
                            t.add_len(-1);
                            Ok(Step::Deleted(true))
                        }
                        false => Ok(Step::Retry),
                    };
                }
            }
            t.publish_bitmap(leaf, bitmap & !(1 << slot), "P-FPT-9")?;
            K::release_deleted(t, leaf, slot)?;
            t.add_len(-1);
            Ok(Step::Done(true))
        })
    }

    /// Leaf deletion under the leaf's lock and the SMO lock: the predecessor is locked with
    /// `try_lock` (busy: `false`, the caller releases everything and retries); the leaf is
    /// unlocked obsolete before it is freed, the predecessor after the unlink.
    fn delete_locked_leaf(
        &self,
        key: &K::Key,
        leaf: u64,
        held: &mut Option<Locked>,
    ) -> StorageResult<bool> {
        // Bounds change only under the SMO lock, which is held.
        let (bound, g) = self.route_bound(key)?;
        if g != leaf {
            return Err(corrupt("a locked leaf no longer routes its key", self.root));
        }
        let prev = match self.index.prev(&self.set, bound.borrow())? {
            Some(g) => {
                let w = self.leaf_word(g)?;
                match w.try_lock()? {
                    TryLock::Acquired(l) => {
                        if let Err(e) = self.first_lock_repair(g, &l) {
                            w.unlock(l)?;
                            return Err(e);
                        }
                        Some((self.leaf_at(g)?, l))
                    }
                    TryLock::Busy | TryLock::Obsolete => return Ok(false),
                }
            }
            None => None,
        };
        let leaf = self.leaf_at(leaf)?;
        if let Some((p, _)) = &prev
            && self.set().load_pptr(p.g + L_NEXT)? != leaf.p
        {
            return Err(corrupt("the index's predecessor does not link the leaf", leaf.p));
        }
        let r = self.delete_leaf(leaf, prev.as_ref().map(|(p, _)| *p), bound.borrow(), held);
        if let Some((p, l)) = prev {
            self.leaf_word(p.g)?.unlock(l)?;
        }
        r.map(|()| true)
    }

    /// Whether the leaf at `leaf` is the tree's only leaf (the head, with no next leaf).
    fn only_leaf(&self, leaf: u64) -> StorageResult<bool> {
        match &self.index {
            Index::Dram(m) => Ok(m.len() == 1),
            Index::Persistent(_) => Ok(self.set().load_pptr(leaf + L_NEXT)?.is_null()
                && self.head()? == self.leaf_at(leaf)?.p),
        }
    }

    // ----- split (Algorithm 4.3) -----

    /// Splits the full `leaf`: returns the new right leaf's bound and the new leaf.
    fn split(&self, leaf: Leaf) -> StorageResult<(K::Owned, Leaf)> {
        let set = self.alloc.pool().clone();
        if let Index::Persistent(_) = self.index {
            // The bound the split will produce (the separator of the 16th and 17th smallest
            // keys, as `split_copy` computes it), so that the index makes room for it now:
            // once the split is durable its index insert must not fail for want of space. A
            // `PoolFull` here changes nothing visible.
            let mut pairs = Vec::new();
            K::leaf_pairs(self, leaf, (Unbounded, Unbounded), &mut pairs)?;
            if pairs.len() != M {
                return Err(corrupt("splitting a leaf that is not full", leaf.p));
            }
            let bound = K::separator(pairs[M / 2 - 1].0.borrow(), pairs[M / 2].0.borrow())
                .ok_or_else(|| corrupt("the halves of a split overlap", leaf.p))?;
            self.index.prepare(bound.borrow())?;
        }
        store_pptr(&set, self.rg + R_SPLIT_CUR, leaf.p)?;
        set.persist_rule("P-FPT-3", self.rg + R_SPLIT_CUR, 16)?; // ORDER(P-FPT-3): log the leaf being split
        // The allocator durably stores the new leaf's pointer into the log, which arms it. A
        // `PoolFull` leaves the log's new leaf null (disarmed): nothing was split, and a key
        // block the index reserved for the bound is given back.
        let new = match self.alloc.allocate(K::LEAF_SIZE, field(self.root, R_SPLIT_NEW)) {
            Ok(new) => new,
            Err(e) => {
                self.index.unprepare()?;
                return Err(e);
            }
        };
        let new = self.resolve_leaf(new)?;
        let bound = self.split_from_copy(leaf, new)?;
        Ok((bound, new))
    }

    /// From the copy on: write the new leaf from `leaf` (full), then the bitmaps, link, reset.
    /// Returns the new leaf's bound.
    ///
    /// In a running tree (not in recovery, which runs before the epoch is set) the new leaf
    /// is locked from the copy until the split log is disarmed: the index names it from
    /// P-FPT-27 on, and a change to it while the log is armed would be undone by a recovery
    /// that redoes the split from the logical split (the old leaf's bitmap is recomputed as
    /// the complement of the new leaf's).
    fn split_from_copy(&self, leaf: Leaf, new: Leaf) -> StorageResult<K::Owned> {
        let (left_max, right_min, right) = K::split_copy(self, leaf, new)?;
        let bound = K::separator(left_max.borrow(), right_min.borrow())
            .ok_or_else(|| corrupt("the halves of a split overlap", leaf.p))?;
        let held = if self.epoch != 0 {
            // Unreachable until the index insert: the lock is free (born unlocked).
            match self.leaf_word(new.g)?.try_lock()? {
                TryLock::Acquired(l) => Some(l),
                _ => return Err(corrupt("a new leaf is locked before it is linked", new.p)),
            }
        } else {
            None
        };
        let r = self.split_from_bitmaps(leaf, new, right, Some(bound.clone()));
        if let Some(l) = held {
            self.leaf_word(new.g)?.unlock(l)?;
        }
        r.map(|()| bound)
    }

    /// From the logical split on: the old leaf keeps the complement, gives up its references
    /// to the moved key blocks (byte keys), is linked to the new leaf; the log is retired.
    ///
    /// The new leaf's entry goes into the index after the link is durable and before the
    /// disarm (P-FPT-27), so that split recovery, which redoes these steps while the log is
    /// armed, also redoes the (idempotent) index insert. `bound` is `None` in recovery: it is
    /// recomputed from the two halves (the left's largest key, the right's smallest).
    fn split_from_bitmaps(
        &self,
        leaf: Leaf,
        new: Leaf,
        right: u64,
        bound: Option<K::Owned>,
    ) -> StorageResult<()> {
        let set = self.set();
        set.store_u64(leaf.g + L_BITMAP, !right & FULL, Ordering::Release)?;
        set.persist_rule("P-FPT-6", leaf.g + L_BITMAP, 8)?; // ORDER(P-FPT-6): the logical split point
        K::after_logical_split(self, leaf, right)?;
        // valid → valid: two 8-byte stores that may tear; the armed log redoes them.
        store_pptr(set, leaf.g + L_NEXT, new.p)?;
        set.persist_rule("P-FPT-7", leaf.g + L_NEXT, 16)?; // ORDER(P-FPT-7): link the new leaf before disarming
        let bound = match bound {
            Some(b) => Some(b),
            None if matches!(self.index, Index::Persistent(_)) => {
                let (mut l, mut r) = (Vec::new(), Vec::new());
                K::leaf_pairs(self, leaf, (Unbounded, Unbounded), &mut l)?;
                K::leaf_pairs(self, new, (Unbounded, Unbounded), &mut r)?;
                match (l.last(), r.first()) {
                    (Some((lm, _)), Some((rm, _))) => Some(
                        K::separator(lm.borrow(), rm.borrow())
                            .ok_or_else(|| corrupt("the halves of a split overlap", leaf.p))?,
                    ),
                    _ => return Err(corrupt("a split half is empty", leaf.p)),
                }
            }
            None => None, // DRAM: the rebuild after recovery enters it
        };
        if let Some(b) = bound {
            self.index.insert(b, new.g, new.p)?; // P-FPT-27: after the link, before the disarm
        }
        hooks::at(Point::SplitLinked, new.g);
        self.reset_split_log()
    }

    /// Retires the split log: `new` armed it, so nulling its segment word disarms it; `cur`
    /// stays stale and is ignored while `new` is null (the next split rewrites `cur` before
    /// `new` is armed).
    fn reset_split_log(&self) -> StorageResult<()> {
        let set = self.set();
        set.store_u64(self.rg + R_SPLIT_NEW, PPtr::NULL.segment, Ordering::Release)?;
        Ok(set.persist_rule("P-FPT-8", self.rg + R_SPLIT_NEW, 8)?) // ORDER(P-FPT-8): disarm the split log
    }

    // ----- leaf deletion (Algorithm 4.6) -----

    /// Deletes `leaf` (whose index bound is `bound`): arm, unlink, release its key blocks,
    /// remove its index entry (P-FPT-28: after the unlink, before the free), free it.
    ///
    /// The leaf's lock (`held`) is released obsolete after the index removal and before the
    /// free: after the free the block may belong to another owner, whose word must not be
    /// written, and every thread that reached the leaf restarts.
    fn delete_leaf(
        &self,
        leaf: Leaf,
        prev: Option<Leaf>,
        bound: &K::Key,
        held: &mut Option<Locked>,
    ) -> StorageResult<()> {
        self.arm_delete_log(leaf, prev.map_or(PPtr::NULL, |p| p.p))?;
        let next = self.set().load_pptr(leaf.g + L_NEXT)?;
        match prev {
            None => self.store_head(next)?,
            Some(p) => self.store_next(p, next)?,
        }
        self.index.remove(bound)?; // P-FPT-28: the entry goes before the leaf is freed
        // Byte keys: the last key's slot is made invalid (P-FPT-36) and every key block freed
        // only after the entry is gone: until then delete recovery routes the last key to it.
        K::release_leaf_keys(self, leaf)?;
        if let Some(l) = held.take() {
            self.leaf_word(leaf.g)?.unlock_obsolete(l)?;
        }
        self.free_logged_leaf() // the free disarms the log (P-FPT-12)
    }

    /// P-FPT-10: the predecessor and the leaf's offset word first, then the leaf's segment
    /// word, which arms the log (null → valid with the offset durable first: no torn `cur`).
    fn arm_delete_log(&self, leaf: Leaf, prev: PPtr) -> StorageResult<()> {
        let set = self.set();
        let cur = self.rg + R_DEL_CUR;
        store_pptr(set, self.rg + R_DEL_PREV, prev)?;
        set.store_u64(cur + 8, leaf.p.offset, Ordering::Relaxed)?;
        set.persist_rule("P-FPT-10", cur, 32)?; // ORDER(P-FPT-10): predecessor and offset before arming
        set.store_u64(cur, leaf.p.segment, Ordering::Release)?;
        Ok(set.persist_rule("P-FPT-10", cur, 8)?) // ORDER(P-FPT-10): the leaf's segment word arms the log
    }

    /// `head = next` (valid → valid or null: redone by recovery while the delete log is armed).
    fn store_head(&self, next: PPtr) -> StorageResult<()> {
        let set = self.set();
        store_pptr(set, self.rg + R_HEAD, next)?;
        Ok(set.persist_rule("P-FPT-11", self.rg + R_HEAD, 16)?) // ORDER(P-FPT-11): unlink the head before the free
    }

    /// `prev.next = next` (as [`Tree::store_head`]).
    fn store_next(&self, prev: Leaf, next: PPtr) -> StorageResult<()> {
        let set = self.set();
        store_pptr(set, prev.g + L_NEXT, next)?;
        Ok(set.persist_rule("P-FPT-11", prev.g + L_NEXT, 16)?) // ORDER(P-FPT-11): unlink before the free
    }

    /// Frees the leaf named by the delete log; the allocator nulls the log entry durably, which
    /// disarms the log (P-FPT-12).
    fn free_logged_leaf(&self) -> StorageResult<()> {
        self.alloc.deallocate(field(self.root, R_DEL_CUR))
    }

    // ----- integrity -----

    /// Checks T1–T5 (and for byte keys V1–V3) against persistent memory (T6 needs every user
    /// of the allocator: see [`Tree::blocks`]); `Err(Corrupted)` says which one failed and
    /// where.
    pub fn check(&self) -> StorageResult<CheckReport> {
        let set = self.set();
        for (off, what) in [(R_SPLIT_NEW, "split"), (R_DEL_CUR, "delete")] {
            let p = set.load_pptr(self.rg + off)?;
            if !p.is_null() {
                return Err(corrupt(format!("the {what} log is not retired"), p));
            }
        }
        let mut at = self.head()?;
        let mut listed: Vec<Leaf> = Vec::new();
        let mut prev_max: Option<K::Owned> = None;
        let mut keys = 0u64;
        let mut key_blocks = Vec::new();
        let limit = walk_limit(set, K::LEAF_SIZE);
        let mut pairs = Vec::new();
        // Each listed leaf's (smallest, largest) key.
        let mut spans: Vec<Option<(K::Owned, K::Owned)>> = Vec::new();
        while !at.is_null() {
            if listed.len() as u64 > limit {
                return Err(corrupt("the leaf list has a cycle", at));
            }
            let leaf = self.resolve_leaf(at)?;
            self.checked_bitmap(leaf)?;
            K::check_leaf(self, leaf, self.repair_pending(leaf)?)?;
            K::key_blocks(self, leaf, &mut key_blocks)?;
            pairs.clear();
            K::leaf_pairs(self, leaf, (Unbounded, Unbounded), &mut pairs)?;
            if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(corrupt("a key appears twice in one leaf", at));
            }
            if let (Some(pm), Some((mn, _))) = (&prev_max, pairs.first())
                && mn <= pm
            {
                return Err(corrupt(format!("key {mn:?} follows key {pm:?}"), at));
            }
            let next = set.load_pptr(leaf.g + L_NEXT)?;
            if pairs.is_empty() && (!listed.is_empty() || !next.is_null()) {
                return Err(corrupt("an empty leaf that is not the only leaf", at));
            }
            keys += pairs.len() as u64;
            // T5: the index routes every key of this leaf here.
            for (k, _) in &pairs {
                if self.route(k.borrow())? != leaf.g {
                    return Err(corrupt(format!("the index routes key {k:?} elsewhere"), at));
                }
            }
            spans.push(pairs.first().map(|p| p.0.clone()).zip(pairs.last().map(|p| p.0.clone())));
            if let Some((mx, _)) = pairs.pop() {
                prev_max = Some(mx);
            }
            listed.push(leaf);
            at = next;
        }
        // V2: no key block is named by two valid slots, in one leaf or in two.
        key_blocks.sort_by_key(|p| (p.segment, p.offset));
        if let Some(w) = key_blocks.windows(2).find(|w| w[0] == w[1]) {
            return Err(corrupt("a key block is named by two valid slots", w[0]));
        }
        self.index.check()?;
        let entries = self.index.entries(&self.set)?;
        if !entries.iter().map(|e| e.1).eq(listed.iter().map(|l| l.g)) {
            return Err(corrupt("the index and the leaf list name different leaves", self.root));
        }
        // T5 on the bounds themselves: every leaf but the head starts at or above its bound,
        // and every leaf ends below the next leaf's bound; the head's bound is the lowest.
        for (i, (bound, _)) in entries.iter().enumerate() {
            let low_ok = match &spans[i] {
                _ if i == 0 => *bound == K::lowest(),
                Some((mn, _)) => bound <= mn,
                None => false,
            };
            let high_ok = match i.checked_sub(1).map(|j| &spans[j]) {
                Some(Some((_, mx))) => mx < bound,
                Some(None) => false,
                None => true,
            };
            if !low_ok || !high_ok {
                return Err(corrupt(
                    format!("index bound {bound:?} does not fit leaf {i} of the list"),
                    listed[i].p,
                ));
            }
        }
        let counted = self.len.load(Ordering::Relaxed);
        if counted != LEN_UNKNOWN && keys != counted {
            return Err(corrupt(
                format!("{keys} keys in the leaves, {counted} counted"),
                self.root,
            ));
        }
        Ok(CheckReport { leaves: listed.len() as u64, keys })
    }
}

// ----- the fixed-key tree: its public methods and its leaf operations (v1 leaf) -----

impl Tree<U64Key> {
    /// Inserts `key → value`; `Ok(false)` (and no change) if `key` is present. `PoolFull` when
    /// a split needs a leaf the allocator cannot give (the tree is unchanged and usable).
    pub fn insert(&self, key: u64, value: u64) -> StorageResult<bool> {
        self.insert_k(&key, value)
    }

    /// Replaces the value of `key` out of place (Algorithm 4.8); `Ok(false)` if absent.
    /// `PoolFull` as for [`FPTree::insert`] (the old value stays).
    pub fn update(&self, key: u64, value: u64) -> StorageResult<bool> {
        self.update_k(&key, value)
    }

    /// Deletes `key`; `Ok(false)` if absent (checked first: DEFECT-10). Never needs space.
    pub fn delete(&self, key: u64) -> StorageResult<bool> {
        self.delete_k(&key)
    }

    /// The value stored under `key`.
    pub fn get(&self, key: u64) -> StorageResult<Option<u64>> {
        self.get_k(&key)
    }

    /// Up to `limit` pairs with `lo <= key <= hi`, in ascending key order.
    /// (A wrapper of [`FPTree::scan`], which also scans backwards.)
    pub fn range(&self, lo: u64, hi: u64, limit: usize) -> StorageResult<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        self.scan(lo..=hi, Direction::Forward, limit, |k, v| {
            out.push((k, v));
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Whether inserting `key` (absent) would split its leaf, i.e. needs a new leaf from the
    /// allocator (for capacity planning and tests).
    pub fn needs_split(&self, key: u64) -> StorageResult<bool> {
        self.needs_split_k(&key)
    }

    fn read_leaf(&self, l: Leaf) -> StorageResult<LeafImage> {
        self.set().read_struct(l.g).map_err(|e| corrupt(format!("unreadable leaf: {e}"), l.p))
    }

    /// The slot of `key` in `leaf`, probing full keys only where fingerprints match.
    #[inline]
    fn fixed_find(&self, leaf: u64, key: u64) -> StorageResult<Option<usize>> {
        let set = self.set();
        let mut line0 = [0u8; 40];
        set.read_into(leaf, &mut line0)?;
        let mut bm = [0u8; 8];
        bm.copy_from_slice(&line0[32..40]);
        let bitmap = u64::from_le_bytes(bm);
        let f = fingerprint(key);
        for (slot, &fp) in line0[..M].iter().enumerate() {
            if bitmap & (1 << slot) != 0
                && fp == f
                && set.load_u64(leaf + L_KV + slot as u64 * 16, Ordering::Acquire)? == key
            {
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }

    fn fixed_value(&self, leaf: u64, slot: usize) -> StorageResult<u64> {
        Ok(self.set().load_u64(leaf + L_KV + slot as u64 * 16 + 8, Ordering::Acquire)?)
    }

    /// Writes `(key, value)` into free slot `slot` of `leaf` and persists it with its
    /// fingerprint, still invisible (P-FPT-1).
    #[inline]
    fn fixed_write_slot(&self, leaf: u64, slot: usize, key: u64, value: u64) -> StorageResult<()> {
        let set = self.set();
        let kv = leaf + L_KV + slot as u64 * 16;
        set.store_u64(kv, key, Ordering::Relaxed)?;
        set.store_u64(kv + 8, value, Ordering::Relaxed)?;
        let word = leaf + L_FP + (slot as u64 / 8) * 8;
        let mut bytes = set.load_u64(word, Ordering::Acquire)?.to_le_bytes();
        bytes[slot % 8] = fingerprint(key);
        set.store_u64(word, u64::from_le_bytes(bytes), Ordering::Relaxed)?;
        set.flush_rule("P-FPT-1", kv, 16)?; // ORDER(P-FPT-1): the pair before the bitmap
        set.flush_rule("P-FPT-1", word, 8)?; // ORDER(P-FPT-1): its fingerprint before the bitmap
        set.fence_rule("P-FPT-1"); // ORDER(P-FPT-1): both durable before the commit store
        Ok(())
    }

    /// Copies the full `leaf` into `new` and gives `new` the upper half: returns the left
    /// half's largest key, the right half's smallest and the right half's bitmap.
    fn fixed_split_copy(&self, leaf: Leaf, new: Leaf) -> StorageResult<(u64, u64, u64)> {
        let set = self.set();
        let mut l = self.read_leaf(leaf)?;
        // DEFECT-2: the copy must not carry the old leaf's lock word (held by this split):
        // the new leaf is born unlocked (0 reads as count 0 of this epoch, VL5).
        l.lock = 0;
        set.write_struct(new.g, &l)?;
        set.persist_rule("P-FPT-4", new.g, LEAF_SIZE)?; // ORDER(P-FPT-4): a full copy of the leaf
        let mut keys = [0u64; M];
        let mut n = 0;
        for slot in l.valid() {
            keys[n] = l.kv[slot][0];
            n += 1;
        }
        if n != M {
            return Err(corrupt("splitting a leaf that is not full", leaf.p));
        }
        keys.sort_unstable();
        let (split_key, right_min) = (keys[M / 2 - 1], keys[M / 2]);
        let right: u64 =
            l.valid().filter(|&slot| l.kv[slot][0] > split_key).fold(0, |b, slot| b | (1 << slot));
        set.store_u64(new.g + L_BITMAP, right, Ordering::Release)?;
        set.persist_rule("P-FPT-5", new.g + L_BITMAP, 8)?; // ORDER(P-FPT-5): the new leaf keeps the upper half
        Ok((split_key, right_min, right))
    }

    /// One leaf of the rebuild: check its bitmap, find its key range. Its lock word is left
    /// as it is: a word of an earlier open reads unlocked in this open's epoch (VL5,
    /// P-FPT-30), so the walk dirties no line.
    fn fixed_rebuild_leaf(&self, leaf: Leaf) -> StorageResult<LeafSummary<u64>> {
        let l = self.read_leaf(leaf)?;
        if l.bitmap & !FULL != 0 {
            return Err(corrupt(
                format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap),
                leaf.p,
            ));
        }
        // The key range by a min and a max over the valid slots (no sort).
        let (mut mn, mut mx) = (u64::MAX, 0u64);
        let mut bits = l.bitmap;
        while bits != 0 {
            let k = l.kv[bits.trailing_zeros() as usize][0];
            bits &= bits - 1;
            mn = mn.min(k);
            mx = mx.max(k);
        }
        let min_max = (l.bitmap != 0).then_some((mn, mx));
        Ok(LeafSummary { next: l.next, count: u64::from(l.bitmap.count_ones()), min_max })
    }

    /// The valid pairs of `leaf` within `bounds`, sorted, appended to `out`.
    fn fixed_pairs(
        &self,
        leaf: Leaf,
        bounds: (Bound<&u64>, Bound<&u64>),
        out: &mut Vec<(u64, u64)>,
    ) -> StorageResult<()> {
        let l = self.read_leaf(leaf)?;
        let start = out.len();
        out.extend(l.valid().map(|s| (l.kv[s][0], l.kv[s][1])).filter(|(k, _)| bounds.contains(k)));
        out[start..].sort_unstable();
        Ok(())
    }

    /// T2 for one leaf: every valid slot's fingerprint.
    fn fixed_check_leaf(&self, leaf: Leaf) -> StorageResult<()> {
        let l = self.read_leaf(leaf)?;
        for slot in l.valid() {
            let k = l.kv[slot][0];
            if l.fp[slot] != fingerprint(k) {
                return Err(corrupt(
                    format!("slot {slot}: fingerprint of key {k} is wrong"),
                    leaf.p,
                ));
            }
        }
        Ok(())
    }
}

// ----- the byte-key tree: its public methods (leaf operations in `var.rs`) -----

impl Tree<ByteKey> {
    /// Inserts `key → value`; `Ok(false)` (and no change) if `key` is present.
    /// `InvalidArgument` for a key longer than [`MAX_KEY_LEN`] (nothing written). `PoolFull`
    /// when a split or the key's block needs space the allocator cannot give (the tree is
    /// unchanged and usable).
    pub fn insert(&self, key: &[u8], value: u64) -> StorageResult<bool> {
        self.insert_k(key, value)
    }

    /// Replaces the value of `key` out of place; `Ok(false)` if absent. The key (inline or its
    /// block) is reused, never copied. `PoolFull` only when a split needs a leaf.
    pub fn update(&self, key: &[u8], value: u64) -> StorageResult<bool> {
        self.update_k(key, value)
    }

    /// Deletes `key` and frees its key block; `Ok(false)` if absent (checked first).
    pub fn delete(&self, key: &[u8]) -> StorageResult<bool> {
        self.delete_k(key)
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> StorageResult<Option<u64>> {
        self.get_k(key)
    }

    /// Up to `limit` pairs with `lo <= key <= hi` (bytewise), in ascending key order.
    pub fn range(
        &self,
        lo: &[u8],
        hi: &[u8],
        limit: usize,
    ) -> StorageResult<Vec<(Box<[u8]>, u64)>> {
        // (A wrapper of [`FPTreeVar::scan`], which also scans backwards.)
        let mut out = Vec::new();
        self.scan((Included(lo), Included(hi)), Direction::Forward, limit, |k, v| {
            out.push((k.into(), v));
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Whether inserting `key` (absent) would split its leaf.
    pub fn needs_split(&self, key: &[u8]) -> StorageResult<bool> {
        self.needs_split_k(key)
    }
}

/// The tree is shared by reference between threads (`&self` operations).
const _: () = {
    const fn sync<T: Send + Sync>() {}
    sync::<FPTree>();
    sync::<FPTreeVar>();
};

#[cfg(test)]
mod tests {
    use zerocopy::{FromBytes, IntoBytes};

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

    #[test]
    fn the_in_progress_header_is_recognised_and_a_zeroed_one_is_not() {
        let h = RootHeader::in_progress();
        assert!(matches!(root_state::<U64Key>(&h, PPtr::NULL), Ok(RootState::Resumable)));
        let mut done = h;
        done.magic = ROOT_MAGIC;
        assert!(matches!(root_state::<U64Key>(&done, PPtr::NULL), Ok(RootState::Valid)));
        let zero = RootHeader::read_from_bytes(&[0u8; 48]).unwrap();
        assert!(matches!(root_state::<U64Key>(&zero, PPtr::NULL), Ok(RootState::NoHeader)));
        let mut flipped = done;
        flipped.magic ^= 1 << 40;
        assert!(matches!(
            root_state::<U64Key>(&flipped, PPtr::NULL),
            Err(StorageError::Corrupted { .. })
        ));
        assert_eq!(RootImage::in_progress(PPtr::NULL).as_bytes().len() as u64, ROOT_SIZE);
    }
}
