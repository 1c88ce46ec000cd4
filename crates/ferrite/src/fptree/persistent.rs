//! The persistent inner index of the fully persistent FPTree variant: a B+-tree of lower
//! bounds → leaf pointers whose nodes live in persistent memory, so that a tree opens without
//! rebuilding its inner nodes (design: `docs/design/fptree.md`, "Persistent inner nodes (part
//! II)" and "Byte separators in the persistent index"; layout: `docs/design/format.md`). One
//! generic body [`PIndex<B>`] serves both stored forms of a bound (`pbound.rs`): `u64` bounds
//! ([`PersistentIndex`], unchanged on media) and byte bounds ([`PersistentIndexVar`]: 32-byte
//! key slots, keys over 23 bytes in key blocks allocated into the slot).
//!
//! The index maps each leaf's lower bound to the leaf's [`PPtr`] and answers "the leaf with the
//! greatest bound ≤ key" ([`PersistentIndex::lookup`]), as the hybrid tree's DRAM `BTreeMap`
//! does. It owns its own blocks (an index root and the nodes), never the leaves it points to.
//!
//! # Invariants
//! - N1 (node): a node is a PAllocator block of [`PNODE_SIZE`] bytes with tag [`PNODE_TAG`],
//!   a level (0 = bottom: its children are leaves), a validity bitmap (bit i: slot i valid; no
//!   bit at or above the index's fan-out) and unsorted slots of (key, child). Keys of one node
//!   are distinct.
//! - N2 (ranges): sort a node's valid entries by key: k0 < k1 < … . Every bound stored in the
//!   subtree of child i is ≥ k(i) and < k(i+1) (and within the node's own range). An insert
//!   below k0 lowers k0 first. A lookup below k0 routes to child 0 (only the root's k0 can be
//!   above a looked-up key: a parent's range starts at the child's separator).
//! - N3 (shape): a child's level is its parent's level − 1; a node other than the root has at
//!   least one valid entry; a root above level 0 has at least one.
//! - N4 (logs): when no operation is in flight, the alloc log's `new` and the free log's `node`
//!   are null (their other fields are stale and ignored).
//! - N5 (ownership): every block the allocator handed out to the index is its root block or a
//!   node reachable from `root` — or, while a log is armed, the node that log names (and, for a
//!   detach, the single-entry chain below it). [`PersistentIndex::blocks`] lists them for the
//!   caller's leak check against [`PAllocator::check`].
//!
//! # Operations and ordering (rules P-FPT-14..19 of `docs/design/persistence.md`)
//! - Insert into a node: key and child into a free slot, persisted, then one 8-byte bitmap
//!   store, persisted: the commit (P-FPT-14). Remove: one bitmap store, persisted (P-FPT-14).
//! - Inserts split top-down: a full root first grows (a new root with one entry above it), then
//!   every full node on the path is split while its parent has room. A split or a grow is one
//!   step of the **alloc log**: node, parent and kind persisted (P-FPT-16), the new node
//!   allocated into the log (the allocator's redo arms it), written and persisted (P-FPT-15),
//!   published (split: inserted into the parent, P-FPT-14; grow: the index root's `root`
//!   switched, P-FPT-17), the split node keeps its lower half (P-FPT-17), `new` nulled: disarm
//!   (P-FPT-17). Recovery redoes the step from the logged node, whose content is unchanged
//!   until the step's last bitmap store.
//! - A remove that would empty a node detaches the highest single-entry ancestor chain from its
//!   parent, and a root above level 0 left with one entry is replaced by its child (shrink).
//!   Both are steps of the **free log**: parent and kind and the node's offset word persisted,
//!   then its segment word (the arm, P-FPT-18); the parent's bit cleared (detach) or `root`
//!   switched (shrink), persisted; the chain freed bottom-up by the allocator, each free
//!   nulling the pointer it was freed from; the last free (from the log) disarms it.
//! - Creation (P-FPT-19): magic and `root` nulled first, the header with magic 0 and disarmed
//!   logs, the first (empty, bottom) node allocated into `root` and persisted, the magic last.
//! - Byte bounds (rules P-FPT-31..34): a key block is allocated into a slot, or freed from a
//!   slot whose bit was cleared, only while the root's **slot log** names the slot (offset and
//!   slot persisted, then the segment word; disarmed after the commit or the free); a split's
//!   separator block is reserved in the parent before the alloc log is armed; a detach frees
//!   the parent slot's block after its bit, a chain's and a shrunk root's blocks with their
//!   nodes; a split drops the old node's references to the moved blocks (nulled, fenced)
//!   before the disarm; a leftmost key is lowered to the empty key in one step (the block's
//!   free from the slot, or a null first word). B2: no invalid slot names a block at rest.
//! - Open replays at most the three logs: O(pending log), no walk of the nodes.
//! - Lookups scan the valid slots of the nodes on the routed path in place (unsorted nodes, no
//!   allocation; per level only the node's first five lines and the followed child pointer
//!   are read) and fall back to a full floor search when separators left above the remaining
//!   keys lead to a bottom node without a bound ≤ the key. Every search is bounded in node
//!   visits, so a damaged index with shared children is `Corrupted`, not a runaway walk.
//!
//! Every value read from PM (pointers, tags, levels, bitmaps, the header) is validated before
//! use; a damaged index is [`StorageError::Corrupted`] in every build profile, never a panic.
//!
//! # Concurrency
//! One writer: every modification takes `&mut self`; lookups and scans take `&self` and run
//! while no modification is in flight (the borrow rules guarantee it within one handle; two
//! handles on one index are not supported). The allocator may be shared with other structures
//! used by other threads.

use std::collections::HashSet;
use std::mem::offset_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_pmem::{PPtr, PoolSet};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::layout_var::{KeyForm, key_form};
pub use super::pbound::{
    BoundForm, PV_KEY_BYTES, PVINDEX_ROOT_SIZE, PVNODE_SIZE, PVNODE_TAG, PVarNodeImage,
};
use super::pbound::{NodeImg, pointer_raw, resolve_key_block};
use crate::alloc::PAllocator;
use crate::storage::{StorageError, StorageResult};

// ----- layout -----

/// Most slots (entries) a node can hold; an index's fan-out is chosen at creation, 4..=32.
pub const PN_MAX_SLOTS: u32 = 32;
/// The fan-out of [`PersistentIndex::create`].
pub const PN_DEFAULT_FANOUT: u32 = 32;
/// The smallest fan-out (a split leaves at least two entries on each side).
pub const PN_MIN_FANOUT: u32 = 4;
/// Bytes per node (13 cache lines; a PAllocator class of its own).
pub const PNODE_SIZE: u64 = 832;
/// Bytes of the index root block (3 cache lines).
pub const PINDEX_ROOT_SIZE: u64 = 192;
/// `"FERRPIX1"`: the index root's magic, stored last at creation.
pub const PINDEX_MAGIC: u64 = u64::from_le_bytes(*b"FERRPIX1");
/// The index root format version this build reads and writes.
pub const PINDEX_VERSION: u32 = 1;
/// `"FERRPNOD"`: every node's first word.
pub const PNODE_TAG: u64 = u64::from_le_bytes(*b"FERRPNOD");
/// Deepest level an index can reach (far above any pool's capacity at fan-out 4).
pub const PN_MAX_LEVEL: u64 = 40;

/// Node visits one search may make: far above the 2 × 41 + 1 a valid index needs (see
/// `PersistentIndex::visit`).
const SEARCH_BUDGET: u64 = 64 * (PN_MAX_LEVEL + 1);

/// Alloc-log kinds.
const KIND_SPLIT: u64 = 1;
const KIND_GROW: u64 = 2;
/// Free-log kinds.
const KIND_DETACH: u64 = 3;
const KIND_SHRINK: u64 = 4;

/// A node as it lies in persistent memory (832 bytes, 64-byte aligned).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PNodeImage {
    /// [`PNODE_TAG`].
    pub tag: u64,
    /// Validity bitmap: bit i = slot i valid; the node's commit word.
    pub bitmap: u64,
    /// 0 for a bottom node (children are leaves), else the children's level + 1.
    pub level: u64,
    /// Zero.
    pub reserved: [u64; 5],
    /// Slot keys (lower bounds, or separators above level 0).
    pub keys: [u64; PN_MAX_SLOTS as usize],
    /// Slot children: nodes of `level - 1`, or leaves at level 0.
    pub children: [PPtr; PN_MAX_SLOTS as usize],
}

/// Byte offset of a node's bitmap.
pub const N_BITMAP: u64 = offset_of!(PNodeImage, bitmap) as u64;
/// Byte offset of a node's level.
pub const N_LEVEL: u64 = offset_of!(PNodeImage, level) as u64;
/// Byte offset of a node's first key.
pub const N_KEYS: u64 = offset_of!(PNodeImage, keys) as u64;
/// Byte offset of a node's first child pointer.
pub const N_CHILDREN: u64 = offset_of!(PNodeImage, children) as u64;

const _: () = assert!(size_of::<PNodeImage>() as u64 == PNODE_SIZE);
const _: () = assert!(N_BITMAP == 8 && N_LEVEL == 16 && N_KEYS == 64 && N_CHILDREN == 320);

/// The checksummed, immutable part of the index root (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PIndexHeader {
    /// [`PINDEX_MAGIC`] once creation finished; 0 while it runs.
    pub magic: u64,
    /// [`PINDEX_VERSION`].
    pub version: u32,
    /// The fan-out (slots used per node), 4..=32.
    pub fanout: u32,
    /// Bytes per node ([`PNODE_SIZE`]).
    pub node_size: u32,
    /// Bytes per key (8: `u64` bounds).
    pub key_size: u32,
    /// Compatible feature flags (none).
    pub compat: u64,
    /// Incompatible feature flags (none; any set bit is refused).
    pub incompat: u64,
    /// crc32c of bytes 0..40 computed with the final magic.
    pub checksum: u32,
    /// Zero.
    pub reserved0: u32,
}

/// The alloc log (split, grow): one cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct AllocLog {
    /// Split: the node being split. Grow: the old root.
    pub node: PPtr,
    /// The new node, allocated into here: its segment word arms the log.
    pub new: PPtr,
    /// Split: the parent. Grow: null.
    pub parent: PPtr,
    /// `1` split, `2` grow.
    pub kind: u64,
    /// Zero.
    pub reserved: u64,
}

/// The free log (detach, shrink): one cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct FreeLog {
    /// Detach: the top of the chain being removed. Shrink: the old root. Its segment word
    /// arms the log; the allocator's free of it disarms the log.
    pub node: PPtr,
    /// Detach: the node the chain hangs from. Shrink: null.
    pub parent: PPtr,
    /// `3` detach, `4` shrink.
    pub kind: u64,
    /// Zero.
    pub reserved: [u64; 3],
}

/// The index root block (192 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PIndexRootImage {
    /// Identity, geometry, checksum.
    pub header: PIndexHeader,
    /// The root node (never null in a created index).
    pub root: PPtr,
    /// Split and grow.
    pub alloc_log: AllocLog,
    /// Detach and shrink.
    pub free_log: FreeLog,
}

/// Byte offset of the root-node pointer in the index root.
pub const IX_ROOT: u64 = offset_of!(PIndexRootImage, root) as u64;
/// The alloc log's node.
pub const IX_A_NODE: u64 = offset_of!(PIndexRootImage, alloc_log) as u64;
/// The alloc log's new node (its arm word).
pub const IX_A_NEW: u64 = IX_A_NODE + offset_of!(AllocLog, new) as u64;
/// The alloc log's parent.
pub const IX_A_PARENT: u64 = IX_A_NODE + offset_of!(AllocLog, parent) as u64;
/// The alloc log's kind.
pub const IX_A_KIND: u64 = IX_A_NODE + offset_of!(AllocLog, kind) as u64;
/// The free log's node (its arm word).
pub const IX_F_NODE: u64 = offset_of!(PIndexRootImage, free_log) as u64;
/// The free log's parent.
pub const IX_F_PARENT: u64 = IX_F_NODE + offset_of!(FreeLog, parent) as u64;
/// The free log's kind.
pub const IX_F_KIND: u64 = IX_F_NODE + offset_of!(FreeLog, kind) as u64;

const _: () = assert!(size_of::<PIndexHeader>() == 48);
const _: () = assert!(size_of::<AllocLog>() == 64 && size_of::<FreeLog>() == 64);
const _: () = assert!(size_of::<PIndexRootImage>() as u64 == PINDEX_ROOT_SIZE);
const _: () = assert!(IX_ROOT == 48 && IX_A_NODE == 64 && IX_A_NEW == 80 && IX_A_PARENT == 96);
const _: () = assert!(IX_A_KIND == 112 && IX_F_NODE == 128 && IX_F_PARENT == 144);
const _: () = assert!(IX_F_KIND == 160);

impl PIndexHeader {
    /// The header this build writes for `fanout`, with magic 0 and its checksum.
    pub fn in_progress(fanout: u32) -> PIndexHeader {
        Self::in_progress_of(fanout, PNODE_SIZE as u32, 8)
    }

    /// The header of an index of `node_size`-byte nodes and `key_size`-byte key slots (the
    /// byte form: 1 600 and 32), with magic 0 and its checksum.
    pub fn in_progress_of(fanout: u32, node_size: u32, key_size: u32) -> PIndexHeader {
        let mut h = PIndexHeader {
            magic: 0,
            version: PINDEX_VERSION,
            fanout,
            node_size,
            key_size,
            compat: 0,
            incompat: 0,
            checksum: 0,
            reserved0: 0,
        };
        h.checksum = h.crc();
        h
    }

    /// crc32c of bytes 0..40 with the final magic in place of the magic word.
    pub fn crc(&self) -> u32 {
        let mut c = *self;
        c.magic = PINDEX_MAGIC;
        crc32c::crc32c(&c.as_bytes()[..40])
    }
}

impl PIndexRootImage {
    /// The root as creation's first persist writes it: magic 0, `root` as given, both logs
    /// disarmed.
    pub fn in_progress(fanout: u32, root: PPtr) -> PIndexRootImage {
        PIndexRootImage {
            header: PIndexHeader::in_progress(fanout),
            root,
            alloc_log: AllocLog {
                node: PPtr::NULL,
                new: PPtr::NULL,
                parent: PPtr::NULL,
                kind: 0,
                reserved: 0,
            },
            free_log: FreeLog { node: PPtr::NULL, parent: PPtr::NULL, kind: 0, reserved: [0; 3] },
        }
    }
}

impl PNodeImage {
    /// An empty node of `level`.
    pub fn empty(level: u64) -> PNodeImage {
        PNodeImage {
            tag: PNODE_TAG,
            bitmap: 0,
            level,
            reserved: [0; 5],
            keys: [0; PN_MAX_SLOTS as usize],
            children: [PPtr::NULL; PN_MAX_SLOTS as usize],
        }
    }
}

/// Byte offset in a byte-bound index root of the **slot log**'s node pointer (line 3; its
/// segment word arms the log, P-FPT-31). The `u64` root has no line 3.
pub const IX_S_NODE: u64 = 192;
/// The slot log's slot number.
pub const IX_S_SLOT: u64 = 208;

const _: () = assert!(IX_S_NODE == PINDEX_ROOT_SIZE && IX_S_SLOT + 8 <= PVINDEX_ROOT_SIZE);

fn empty_node<B: BoundForm>(level: u64) -> NodeImg<B::Raw> {
    NodeImg {
        tag: B::NODE_TAG,
        bitmap: 0,
        level,
        keys: [B::EMPTY_RAW; PN_MAX_SLOTS as usize],
        children: [PPtr::NULL; PN_MAX_SLOTS as usize],
    }
}

/// Global offset of slot `s`'s key words in the node at `g`.
fn key_at<B: BoundForm>(g: u64, s: u64) -> u64 {
    g + N_KEYS + s * u64::from(B::KEY_SIZE)
}

/// Global offset of slot `s`'s child pointer in the node at `g`.
fn child_at<B: BoundForm>(g: u64, s: u64) -> u64 {
    g + B::N_CHILDREN + s * 16
}

// ----- helpers -----

fn corrupt(what: impl Into<String>, at: PPtr) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("fptree index {at:?}") }
}

fn field(p: PPtr, off: u64) -> PPtr {
    PPtr::new(p.segment, p.offset + off)
}

/// A free the index asked for was refused: the pointer it read from PM names no allocated
/// block, i.e. damage (never the caller's argument), so `Corrupted` (which poisons).
fn freed(e: StorageError, from: PPtr) -> StorageError {
    match e {
        StorageError::InvalidArgument(why) => corrupt(format!("freeing a block: {why}"), from),
        e => e,
    }
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

/// Stores a 16-byte pointer at `g` (16-aligned): offset word, then segment word (`Release`).
/// Not failure-atomic: callers persist it under an armed log or null → valid offset first.
fn store_pptr(set: &PoolSet, g: u64, p: PPtr) -> StorageResult<()> {
    set.store_u64(g + 8, p.offset, Ordering::Relaxed)?;
    set.store_u64(g, p.segment, Ordering::Release)?;
    Ok(())
}

/// Stores a slot's raw key words (the first word last; the slot is invisible until its bit).
fn store_raw<B: BoundForm>(set: &PoolSet, at: u64, raw: B::Raw) -> StorageResult<()> {
    let words = B::words(&raw);
    for i in (1..words.len()).rev() {
        set.store_u64(at + 8 * i as u64, words[i], Ordering::Relaxed)?;
    }
    set.store_u64(at, words[0], Ordering::Release)?;
    Ok(())
}

/// Most nodes any walk can meet: one per node-sized piece of every live segment.
fn node_limit<B: BoundForm>(set: &PoolSet) -> u64 {
    set.segments().iter().map(|s| s.data_len / B::NODE_SIZE).sum::<u64>() + 1
}

/// The index of the child a key routes to among `es` (sorted, non-empty): the greatest
/// separator ≤ key, or the leftmost child when every separator is above the key (N2).
fn route<B: BoundForm>(es: &[Entry<B>], key: &B::Ref) -> usize {
    es.partition_point(|e| e.0.borrow() <= key).saturating_sub(1)
}

/// What the index root leads to.
enum RootState {
    Valid,
    Resumable,
    NoHeader,
}

fn root_state<B: BoundForm>(h: &PIndexHeader, at: PPtr) -> StorageResult<RootState> {
    if h.magic == PINDEX_MAGIC {
        if h.version != PINDEX_VERSION || h.incompat != 0 {
            return Err(StorageError::Incompatible {
                what: format!("fptree index version {} incompat {:#x}", h.version, h.incompat),
                at: format!("fptree index {at:?}"),
            });
        }
        if h.checksum != h.crc() {
            return Err(corrupt("index root checksum mismatch", at));
        }
        if !(PN_MIN_FANOUT..=PN_MAX_SLOTS).contains(&h.fanout)
            || u64::from(h.node_size) != B::NODE_SIZE
            || h.key_size != B::KEY_SIZE
        {
            return Err(StorageError::Incompatible {
                what: format!(
                    "fptree index with fan-out {}, {}-byte nodes, {}-byte keys (this handle: {})",
                    h.fanout,
                    h.node_size,
                    h.key_size,
                    B::NAME
                ),
                at: format!("fptree index {at:?}"),
            });
        }
        return Ok(RootState::Valid);
    }
    if h.magic == 0
        && h.checksum == h.crc()
        && h.version == PINDEX_VERSION
        && h.key_size == B::KEY_SIZE
    {
        // This build's header with magic 0: a creation that wrote its header.
        return Ok(RootState::Resumable);
    }
    if h.checksum == h.crc() {
        return Err(corrupt(format!("bad index root magic {:#x}", h.magic), at));
    }
    Ok(RootState::NoHeader)
}

/// A valid entry of a node: (key, child, slot).
type Entry<B> = (B, PPtr, usize);

/// The reused key buffers of one lookup's descent ([`PIndex::floor_on_path`]).
struct Held<B: BoundForm> {
    cur: B::Held,
    best: B::Held,
    low: B::Held,
    next: B::Held,
    prev: B::Held,
    next_slot: Option<usize>,
    prev_slot: Option<usize>,
}

impl<B: BoundForm> Default for Held<B> {
    fn default() -> Self {
        Held {
            cur: B::Held::default(),
            best: B::Held::default(),
            low: B::Held::default(),
            next: B::Held::default(),
            prev: B::Held::default(),
            next_slot: None,
            prev_slot: None,
        }
    }
}

/// A lookup's answer with its neighbours in the routed bottom node
/// ([`PIndex::lookup_near_k`]).
#[derive(Clone, Debug)]
pub struct Near<B> {
    /// The greatest bound ≤ the key.
    pub bound: B,
    /// Its leaf.
    pub leaf: PPtr,
    /// The next entry, if the same bottom node holds it (and it was asked for).
    pub next: Option<(B, PPtr)>,
    /// The previous entry, likewise.
    pub prev: Option<(B, PPtr)>,
}

/// A node: its pointer, its global offset and the copy read from PM.
#[derive(Debug)]
struct Node<B: BoundForm> {
    p: PPtr,
    g: u64,
    img: NodeImg<B::Raw>,
}

impl<B: BoundForm> Clone for Node<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: BoundForm> Copy for Node<B> {}

/// What [`PIndex::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexReport {
    /// Nodes reachable from the root.
    pub nodes: u64,
    /// Levels (the root's level + 1).
    pub height: u64,
    /// (bound, leaf) entries in the bottom nodes.
    pub entries: u64,
    /// Key blocks named by separators (byte bounds only).
    pub key_blocks: u64,
}

/// The persistent inner index over bounds of form `B` (see the module docs):
/// [`PersistentIndex`] for `u64` bounds, [`PersistentIndexVar`] for byte bounds.
#[derive(Debug)]
pub struct PIndex<B: BoundForm> {
    alloc: Arc<PAllocator>,
    set: Arc<PoolSet>,
    root_slot: PPtr,
    /// The index root block and its global offset.
    rb: PPtr,
    rg: u64,
    fanout: u32,
    /// Entry count once known (`u64::MAX`: not counted yet; counted on the first `len()`).
    len: AtomicU64,
    poisoned: bool,
    /// A key block reserved for `bound` in (node, slot) by [`PIndex::prepare_insert_k`] (byte
    /// bounds): the slot log is armed on it until the insert uses it or it is given back.
    reserved: Option<(B, PPtr, u64)>,
}

/// The index of `u64` bounds (the fixed-key tree's).
pub type PersistentIndex = PIndex<u64>;
/// The index of byte bounds (the byte-key tree's).
pub type PersistentIndexVar = PIndex<Box<[u8]>>;

impl<B: BoundForm> PIndex<B> {
    /// Creates an index with the default fan-out (see [`PIndex::create_with_fanout`]).
    pub fn create(alloc: Arc<PAllocator>, root_slot: PPtr) -> StorageResult<PIndex<B>> {
        Self::create_with_fanout(alloc, root_slot, PN_DEFAULT_FANOUT)
    }

    /// Creates an index whose root block is allocated into `root_slot` (16-aligned, holding
    /// null, or an index root whose creation did not finish: a crashed `create` is finished by
    /// calling it again). `fanout` (4..=32, even) is the entries per node; small fan-outs make
    /// deep trees from few entries (tests, crash targets). Errors: `InvalidArgument` (bad
    /// fan-out, an index already there), `PoolFull` (nothing stays allocated from a null slot).
    pub fn create_with_fanout(
        alloc: Arc<PAllocator>,
        root_slot: PPtr,
        fanout: u32,
    ) -> StorageResult<PIndex<B>> {
        if !(PN_MIN_FANOUT..=PN_MAX_SLOTS).contains(&fanout) || !fanout.is_multiple_of(2) {
            return Err(StorageError::InvalidArgument(format!(
                "index fan-out {fanout}: an even number in {PN_MIN_FANOUT}..={PN_MAX_SLOTS}"
            )));
        }
        let set = alloc.pool().clone();
        let slot = set
            .resolve_range(root_slot, 16)
            .map_err(|e| StorageError::InvalidArgument(format!("root slot {root_slot:?}: {e}")))?;
        let rb = set.load_pptr(slot)?;
        if rb.is_null() {
            let rb = alloc.allocate(B::ROOT_SIZE, root_slot)?;
            let mut ix = PIndex::new(alloc, root_slot, rb, fanout)?;
            return match ix.init(true) {
                Ok(()) => Ok(ix),
                Err(e @ StorageError::PoolFull { .. }) => {
                    // The first node did not fit: give the root block back (the slot is null).
                    ix.alloc.deallocate(root_slot)?;
                    Err(e)
                }
                Err(e) => Err(e),
            };
        }
        let mut ix = PIndex::new(alloc, root_slot, rb, fanout)?;
        let h: PIndexHeader = set.read_struct(ix.rg)?;
        match root_state::<B>(&h, rb)? {
            RootState::Valid => Err(StorageError::InvalidArgument(format!(
                "an index already exists at {rb:?} (root slot {root_slot:?})"
            ))),
            RootState::Resumable => {
                ix.fanout = h.fanout.clamp(PN_MIN_FANOUT, PN_MAX_SLOTS);
                ix.init(false)?;
                Ok(ix)
            }
            RootState::NoHeader => {
                ix.init(true)?;
                Ok(ix)
            }
        }
    }

    /// Opens the index whose root block pointer is at `root_slot` and replays its logs
    /// (nothing else: no node is read but the ones a log names). Run the allocator's recovery
    /// first. Errors: `InvalidArgument` (null slot), `Corrupted` (what starts with `"no index
    /// root header"`: a creation that crashed before its first persist — finish it with
    /// `create` — or damage), `Corrupted`/`Incompatible` for a damaged or foreign index (an
    /// index of the other bound form is `Incompatible`).
    pub fn open(alloc: Arc<PAllocator>, root_slot: PPtr) -> StorageResult<PIndex<B>> {
        let set = alloc.pool().clone();
        let slot = set
            .resolve_range(root_slot, 16)
            .map_err(|e| StorageError::InvalidArgument(format!("root slot {root_slot:?}: {e}")))?;
        let rb = set.load_pptr(slot)?;
        if rb.is_null() {
            return Err(StorageError::InvalidArgument(format!(
                "no index: root slot {root_slot:?} holds null"
            )));
        }
        let mut ix = PIndex::new(alloc, root_slot, rb, PN_DEFAULT_FANOUT)?;
        let h: PIndexHeader = set.read_struct(ix.rg)?;
        match root_state::<B>(&h, rb)? {
            RootState::Valid => {
                ix.fanout = h.fanout;
                ix.recover_slot_log()?;
                ix.recover_alloc_log()?;
                ix.recover_free_log()?;
            }
            RootState::Resumable => {
                ix.fanout = h.fanout.clamp(PN_MIN_FANOUT, PN_MAX_SLOTS);
                ix.init(false)?;
            }
            RootState::NoHeader => {
                return Err(corrupt(
                    "no index root header (a creation that crashed before its first persist, or damage)",
                    rb,
                ));
            }
        }
        Ok(ix)
    }

    fn new(alloc: Arc<PAllocator>, root_slot: PPtr, rb: PPtr, fanout: u32) -> StorageResult<Self> {
        let rg = resolve_block(alloc.pool(), rb, B::ROOT_SIZE, "index root")?;
        Ok(PIndex {
            set: alloc.pool().clone(),
            alloc,
            root_slot,
            rb,
            rg,
            fanout,
            len: AtomicU64::new(u64::MAX),
            poisoned: false,
            reserved: None,
        })
    }

    /// Creation (P-FPT-19), resumable as the tree's (P-FPT-13): a fresh block gets its magic and
    /// `root` nulled first; the header with magic 0 and disarmed logs; the first node allocated
    /// into `root` (unless a resumed creation did), written empty and persisted; the magic.
    fn init(&mut self, fresh: bool) -> StorageResult<()> {
        let set = self.set.clone();
        let r = self.rg;
        let root = if fresh {
            set.store_u64(r, 0, Ordering::Relaxed)?;
            set.store_u64(r + IX_ROOT, PPtr::NULL.segment, Ordering::Release)?;
            set.persist_rule("P-FPT-19", r, 64)?; // ORDER(P-FPT-19): magic and root nulled before the header
            PPtr::NULL
        } else {
            set.load_pptr(r + IX_ROOT)?
        };
        let mut img = PIndexRootImage::in_progress(self.fanout, root);
        img.header = PIndexHeader::in_progress_of(self.fanout, B::NODE_SIZE as u32, B::KEY_SIZE);
        set.write_struct(r, &img)?;
        if B::ROOT_SIZE > PINDEX_ROOT_SIZE {
            // The slot log's line: disarmed.
            set.write_bytes(r + PINDEX_ROOT_SIZE, &[0; 64])?;
            set.store_u64(r + IX_S_NODE, PPtr::NULL.segment, Ordering::Relaxed)?;
        }
        set.persist_rule("P-FPT-19", r, B::ROOT_SIZE)?; // ORDER(P-FPT-19): header (magic 0), root and disarmed logs
        let root = if root.is_null() {
            self.alloc.allocate(B::NODE_SIZE, field(self.rb, IX_ROOT))?
        } else {
            root
        };
        let g = resolve_block(&set, root, B::NODE_SIZE, "first node")?;
        B::write_node(&set, g, &empty_node::<B>(0))?;
        set.persist_rule("P-FPT-19", g, B::NODE_SIZE)?; // ORDER(P-FPT-19): an empty bottom node before the magic
        set.store_u64(r, PINDEX_MAGIC, Ordering::Release)?;
        set.persist_rule("P-FPT-19", r, 8)?; // ORDER(P-FPT-19): the magic commits creation
        self.len.store(0, Ordering::Relaxed);
        Ok(())
    }

    // ----- node access -----

    fn full(&self) -> u64 {
        (1u64 << self.fanout) - 1
    }

    fn root_ptr(&self) -> StorageResult<PPtr> {
        Ok(self.set.load_pptr(self.rg + IX_ROOT)?)
    }

    /// Checks a node's line 0 (N1: tag, bitmap within the fan-out, level).
    fn check_head(&self, p: PPtr, img: &NodeImg<B::Raw>, level: Option<u64>) -> StorageResult<()> {
        if img.tag != B::NODE_TAG {
            return Err(corrupt(format!("not an index node (tag {:#x})", img.tag), p));
        }
        if img.bitmap & !self.full() != 0 {
            return Err(corrupt(format!("bitmap {:#x} beyond the fan-out", img.bitmap), p));
        }
        if img.level > PN_MAX_LEVEL || level.is_some_and(|l| img.level != l) {
            return Err(corrupt(format!("level {} where {level:?} was expected", img.level), p));
        }
        Ok(())
    }

    /// Reads and validates a node (N1; its level, if `level` is given).
    fn node(&self, p: PPtr, level: Option<u64>) -> StorageResult<Node<B>> {
        let g = resolve_block(&self.set, p, B::NODE_SIZE, "index node")?;
        let img =
            B::read_node(&self.set, g).map_err(|e| corrupt(format!("unreadable node: {e}"), p))?;
        self.check_head(p, &img, level)?;
        Ok(Node { p, g, img })
    }

    /// The node's valid entries, decoded and sorted, with the checks a reader needs: distinct
    /// keys, a non-root node non-empty (N3), children non-null and aligned.
    fn entries(&self, n: &Node<B>, is_root: bool) -> StorageResult<Vec<Entry<B>>> {
        let mut es = Vec::with_capacity(n.img.bitmap.count_ones() as usize);
        for s in (0..PN_MAX_SLOTS as usize).filter(|&s| n.img.bitmap & (1 << s) != 0) {
            es.push((B::decode(&self.set, n.img.keys[s], s, n.p)?, n.img.children[s], s));
        }
        es.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if es.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(corrupt("a key appears twice in one node", n.p));
        }
        if es.is_empty() && !(is_root && n.img.level == 0) {
            return Err(corrupt("an empty node that is not an empty bottom root", n.p));
        }
        for e in &es {
            if e.1.is_null() || !e.1.offset.is_multiple_of(64) {
                return Err(corrupt(format!("slot {}: bad child {:?}", e.2, e.1), n.p));
            }
        }
        Ok(es)
    }

    fn root_node(&self) -> StorageResult<Node<B>> {
        self.node(self.root_ptr()?, None)
    }

    fn check_open(&self) -> StorageResult<()> {
        if self.poisoned { Err(StorageError::Poisoned) } else { Ok(()) }
    }

    // ----- lookups -----

    /// The greatest bound ≤ `key` (or < `key` if `strict`) in the subtree of `n`.
    fn floor_in(
        &self,
        n: &Node<B>,
        is_root: bool,
        key: &B::Ref,
        strict: bool,
    ) -> StorageResult<Option<(B, PPtr)>> {
        self.floor_rec(n, is_root, key, strict, &mut { SEARCH_BUDGET })
    }

    /// Takes one node visit from a search's `budget` ([`SEARCH_BUDGET`]). In a valid index a
    /// floor or ceiling search visits at most 2 × height + 1 nodes (at each level only the
    /// routed child can come back empty-handed, and then along a single path; its neighbour
    /// succeeds); only a damaged index (children shared between nodes) could make it revisit
    /// nodes exponentially often, and it is stopped here as `Corrupted`.
    fn visit(&self, budget: &mut u64, at: PPtr) -> StorageResult<()> {
        *budget = budget.checked_sub(1).ok_or_else(|| {
            corrupt("a search visited more nodes than a valid index needs (shared children)", at)
        })?;
        Ok(())
    }

    fn floor_rec(
        &self,
        n: &Node<B>,
        is_root: bool,
        key: &B::Ref,
        strict: bool,
        budget: &mut u64,
    ) -> StorageResult<Option<(B, PPtr)>> {
        self.visit(budget, n.p)?;
        let mut es = self.entries(n, is_root)?;
        let below = |k: &B| if strict { k.borrow() < key } else { k.borrow() <= key };
        if n.img.level == 0 {
            return Ok(es.drain(..).rev().find(|e| below(&e.0)).map(|e| (e.0, e.1)));
        }
        if es.is_empty() {
            return Ok(None);
        }
        // The routed child, then its left neighbours (at most one step back is ever needed:
        // a non-empty subtree to the left holds only keys below the routed separator, N2).
        let i = route(&es, key);
        for j in (0..=i).rev() {
            let c = self.node(es[j].1, Some(n.img.level - 1))?;
            if let Some(r) = self.floor_rec(&c, false, key, strict, budget)? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// The smallest bound ≥ `key` (or > `key` if `strict`) in the subtree of `n`.
    fn ceil_in(
        &self,
        n: &Node<B>,
        is_root: bool,
        key: &B::Ref,
        strict: bool,
    ) -> StorageResult<Option<(B, PPtr)>> {
        self.ceil_rec(n, is_root, key, strict, &mut { SEARCH_BUDGET })
    }

    fn ceil_rec(
        &self,
        n: &Node<B>,
        is_root: bool,
        key: &B::Ref,
        strict: bool,
        budget: &mut u64,
    ) -> StorageResult<Option<(B, PPtr)>> {
        self.visit(budget, n.p)?;
        let mut es = self.entries(n, is_root)?;
        let above = |k: &B| if strict { k.borrow() > key } else { k.borrow() >= key };
        if n.img.level == 0 {
            return Ok(es.drain(..).find(|e| above(&e.0)).map(|e| (e.0, e.1)));
        }
        if es.is_empty() {
            return Ok(None);
        }
        let i = route(&es, key);
        for e in &es[i..] {
            let c = self.node(e.1, Some(n.img.level - 1))?;
            if let Some(r) = self.ceil_rec(&c, false, key, strict, budget)? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// The leaf with the greatest bound ≤ `key`, and that bound (`None`: every bound is above
    /// `key`, or the index is empty).
    pub fn lookup_with_bound_k(&self, key: &B::Ref) -> StorageResult<Option<(B, PPtr)>> {
        self.check_open()?;
        self.floor(key)
    }

    /// The greatest bound ≤ `key`: the routed path scanned in place, else the full search.
    fn floor(&self, key: &B::Ref) -> StorageResult<Option<(B, PPtr)>> {
        Ok(self.near(key, false, false)?.map(|n| (n.bound, n.leaf)))
    }

    /// [`PIndex::lookup_with_bound_k`] with, when asked (`next`, `prev`) and found in the
    /// routed bottom node, the entries just after and just before it (a scan step's
    /// neighbours: a bound between two entries of one bottom node lies in that node's range,
    /// N2, so it would be in that node). At the node's edge a neighbour is `None`: ask
    /// [`PIndex::successor_k`] / [`PIndex::predecessor_k`].
    pub fn lookup_near_k(
        &self,
        key: &B::Ref,
        next: bool,
        prev: bool,
    ) -> StorageResult<Option<Near<B>>> {
        self.check_open()?;
        self.near(key, next, prev)
    }

    fn near(&self, key: &B::Ref, next: bool, prev: bool) -> StorageResult<Option<Near<B>>> {
        let mut h = Held::<B>::default();
        if let Some((g, s)) = self.floor_on_path(key, next, prev, &mut h)? {
            let entry = |s: Option<usize>, k: &B::Held| -> StorageResult<Option<(B, PPtr)>> {
                s.map(|s| {
                    Ok((B::owned(B::held(k)), self.set.load_pptr(child_at::<B>(g, s as u64))?))
                })
                .transpose()
            };
            return Ok(Some(Near {
                bound: B::owned(B::held(&h.best)),
                leaf: self.set.load_pptr(child_at::<B>(g, s as u64))?,
                next: entry(h.next_slot, &h.next)?,
                prev: entry(h.prev_slot, &h.prev)?,
            }));
        }
        let hit = self.floor_in(&self.root_node()?, true, key, false)?;
        Ok(hit.map(|(bound, leaf)| Near { bound, leaf, next: None, prev: None }))
    }

    /// Reads and validates a node's line 0 and keys only (N1 as [`PIndex::node`] checks it),
    /// for the lookup's fast path, which then reads the one child pointer it follows.
    fn node_head(&self, p: PPtr, level: Option<u64>) -> StorageResult<Node<B>> {
        let g = resolve_block(&self.set, p, B::NODE_SIZE, "index node")?;
        let img =
            B::read_head(&self.set, g).map_err(|e| corrupt(format!("unreadable node: {e}"), p))?;
        self.check_head(p, &img, level)?;
        Ok(Node { p, g, img })
    }

    /// The lookup's fast path: descends the routed path only, scanning each node's valid slots
    /// in place (no sort, no allocation: keys are decoded into `h`'s reused buffers). A bound
    /// ≤ `key` in the routed bottom node is the answer (N2: every bound to the right of the
    /// path is above `key`, every bound to the left below the routed node's range): its
    /// node's global offset and slot, its bound in `h.best`, and (if asked) the node's entries
    /// just after and before it in `h.next` / `h.prev`. `None` when that node has none (a
    /// separator left above the keys that remain, a key below every bound, a node without
    /// entries): the caller runs the full search, which also validates what this path does
    /// not (N1's distinct keys, N3).
    fn floor_on_path(
        &self,
        key: &B::Ref,
        next: bool,
        prev: bool,
        h: &mut Held<B>,
    ) -> StorageResult<Option<(u64, usize)>> {
        let q = B::query(key);
        let mut n = self.node_head(self.root_ptr()?, None)?;
        for _ in 0..=PN_MAX_LEVEL {
            let mut best = None::<usize>;
            let mut bits = n.img.bitmap;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                B::hold(&self.set, n.img.keys[s], s, n.p, &mut h.cur)?;
                if B::cmp_query(&h.cur, q).is_le()
                    && best.is_none_or(|_| B::cmp_held(&h.cur, &h.best).is_gt())
                {
                    std::mem::swap(&mut h.cur, &mut h.best);
                    best = Some(s);
                }
            }
            if n.img.level == 0 {
                let Some(b) = best else { return Ok(None) };
                if next || prev {
                    self.neighbours(&n, b, next, prev, h)?;
                }
                return Ok(Some((n.g, b)));
            }
            let s = match best {
                Some(s) => s,
                // Every separator is above the key: the leftmost child (N2).
                None => match self.lowest_slot(&n, h)? {
                    Some(s) => s,
                    None => return Ok(None),
                },
            };
            let child = self.set.load_pptr(child_at::<B>(n.g, s as u64))?;
            n = self.node_head(child, Some(n.img.level - 1))?;
        }
        Ok(None)
    }

    /// The slot of the smallest valid key of `n` (`None`: no valid slot).
    fn lowest_slot(&self, n: &Node<B>, h: &mut Held<B>) -> StorageResult<Option<usize>> {
        let mut low = None::<usize>;
        let mut bits = n.img.bitmap;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            B::hold(&self.set, n.img.keys[s], s, n.p, &mut h.cur)?;
            if low.is_none_or(|_| B::cmp_held(&h.cur, &h.low).is_lt()) {
                std::mem::swap(&mut h.cur, &mut h.low);
                low = Some(s);
            }
        }
        Ok(low)
    }

    /// The entries of the bottom node `n` just above and just below the key in `h.best`
    /// (slot `b`), into `h.next` / `h.prev` with their slots.
    fn neighbours(
        &self,
        n: &Node<B>,
        b: usize,
        next: bool,
        prev: bool,
        h: &mut Held<B>,
    ) -> StorageResult<()> {
        let mut bits = n.img.bitmap & !(1u64 << b);
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            B::hold(&self.set, n.img.keys[s], s, n.p, &mut h.cur)?;
            let (k, o) = (&h.cur, B::cmp_held(&h.cur, &h.best));
            if next && o.is_gt() && h.next_slot.is_none_or(|_| B::cmp_held(k, &h.next).is_lt()) {
                std::mem::swap(&mut h.cur, &mut h.next);
                h.next_slot = Some(s);
            } else if prev
                && o.is_lt()
                && h.prev_slot.is_none_or(|_| B::cmp_held(k, &h.prev).is_gt())
            {
                std::mem::swap(&mut h.cur, &mut h.prev);
                h.prev_slot = Some(s);
            }
        }
        Ok(())
    }

    /// The leaf with the greatest bound ≤ `key`.
    pub fn lookup_k(&self, key: &B::Ref) -> StorageResult<Option<PPtr>> {
        self.check_open()?;
        let mut h = Held::<B>::default();
        if let Some((g, s)) = self.floor_on_path(key, false, false, &mut h)? {
            return Ok(Some(self.set.load_pptr(child_at::<B>(g, s as u64))?));
        }
        Ok(self.floor_in(&self.root_node()?, true, key, false)?.map(|(_, l)| l))
    }

    /// The entry with the smallest bound > `key` (ascending scans: the next leaf).
    pub fn successor_k(&self, key: &B::Ref) -> StorageResult<Option<(B, PPtr)>> {
        self.check_open()?;
        self.ceil_in(&self.root_node()?, true, key, true)
    }

    /// The entry with the greatest bound < `key` (descending scans: the previous leaf).
    pub fn predecessor_k(&self, key: &B::Ref) -> StorageResult<Option<(B, PPtr)>> {
        self.check_open()?;
        self.floor_in(&self.root_node()?, true, key, true)
    }

    /// The entry with the smallest bound.
    pub fn first(&self) -> StorageResult<Option<(B, PPtr)>> {
        self.check_open()?;
        self.ceil_in(&self.root_node()?, true, B::lowest().borrow(), false)
    }

    /// The entry with the greatest bound.
    pub fn last(&self) -> StorageResult<Option<(B, PPtr)>> {
        self.check_open()?;
        let root = self.root_node()?;
        let mut budget = SEARCH_BUDGET;
        self.last_rec(&root, true, &mut budget)
    }

    /// The greatest bound of the subtree of `n` (the rightmost non-empty path).
    fn last_rec(
        &self,
        n: &Node<B>,
        is_root: bool,
        budget: &mut u64,
    ) -> StorageResult<Option<(B, PPtr)>> {
        self.visit(budget, n.p)?;
        let mut es = self.entries(n, is_root)?;
        if n.img.level == 0 {
            return Ok(es.pop().map(|e| (e.0, e.1)));
        }
        for e in es.iter().rev() {
            let c = self.node(e.1, Some(n.img.level - 1))?;
            if let Some(r) = self.last_rec(&c, false, budget)? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// Every entry in bound order (a walk of the whole index: for tests and tools).
    pub fn entries_in_order(&self) -> StorageResult<Vec<(B, PPtr)>> {
        self.check_open()?;
        let mut out = Vec::new();
        self.walk(|_, es, level| {
            if level == 0 {
                out.extend(es.iter().map(|e| (e.0.clone(), e.1)));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Number of entries. The first call after open counts them (a walk of the bottom nodes;
    /// open itself never walks); later calls are O(1).
    pub fn len(&self) -> StorageResult<u64> {
        self.check_open()?;
        let n = self.len.load(Ordering::Relaxed);
        if n != u64::MAX {
            return Ok(n);
        }
        let mut n = 0u64;
        self.walk(|_, es, level| {
            if level == 0 {
                n += es.len() as u64;
            }
            Ok(())
        })?;
        self.len.store(n, Ordering::Relaxed);
        Ok(n)
    }

    /// Whether the index holds no entry.
    pub fn is_empty(&self) -> StorageResult<bool> {
        Ok(self.len()? == 0)
    }

    /// The allocator the index lives on.
    pub fn allocator(&self) -> &Arc<PAllocator> {
        &self.alloc
    }

    /// Where the caller keeps the index root pointer.
    pub fn root_slot(&self) -> PPtr {
        self.root_slot
    }

    /// Entries per node.
    pub fn fanout(&self) -> u32 {
        self.fanout
    }

    /// Every block the index owns: its root block, its nodes (pre-order) with, for byte
    /// bounds, the key blocks their valid slots name, and a key block reserved by
    /// `prepare_insert` and not used yet. A caller that knows every user of the allocator
    /// checks N5 (no leak) against [`PAllocator::check`]'s allocated blocks. Run it when no
    /// log is armed (after open).
    pub fn blocks(&self) -> StorageResult<Vec<PPtr>> {
        let mut out = vec![self.rb];
        self.walk(|n, es, _| {
            out.push(n.p);
            out.extend(es.iter().filter_map(|e| B::block(n.img.keys[e.2])));
            Ok(())
        })?;
        if let Some((_, node, s)) = &self.reserved {
            let g = resolve_block(&self.set, *node, B::NODE_SIZE, "index node")?;
            let raw = B::read_node(&self.set, g)?.keys[*s as usize];
            out.extend(B::block(raw));
        }
        Ok(out)
    }

    /// Pre-order walk in key order with validation (levels, N3, a bound on the node count and
    /// on revisits): `f(node, sorted entries, level)`.
    fn walk(
        &self,
        mut f: impl FnMut(&Node<B>, &[Entry<B>], u64) -> StorageResult<()>,
    ) -> StorageResult<()> {
        let limit = node_limit::<B>(&self.set);
        let mut seen = HashSet::new();
        let root = self.root_node()?;
        // Explicit stack of (node, is_root), children pushed in reverse key order.
        let mut stack = vec![(root, true)];
        while let Some((n, is_root)) = stack.pop() {
            if !seen.insert((n.p.segment, n.p.offset)) || seen.len() as u64 > limit {
                return Err(corrupt("a node is reachable twice (a cycle or shared child)", n.p));
            }
            let es = self.entries(&n, is_root)?;
            f(&n, &es, n.img.level)?;
            if n.img.level > 0 {
                for e in es.iter().rev() {
                    stack.push((self.node(e.1, Some(n.img.level - 1))?, false));
                }
            }
        }
        Ok(())
    }

    /// Checks N1–N4 (and for byte bounds B2, B3: no invalid slot names a key block, no key
    /// block is named twice) against persistent memory (N5 needs every user of the allocator:
    /// see [`PIndex::blocks`]); `Corrupted` says which failed and where.
    pub fn check(&self) -> StorageResult<IndexReport> {
        self.check_open()?;
        let set = &self.set;
        if !set.load_pptr(self.rg + IX_A_NEW)?.is_null() {
            return Err(corrupt("the alloc log is armed", self.rb));
        }
        if !set.load_pptr(self.rg + IX_F_NODE)?.is_null() {
            return Err(corrupt("the free log is armed", self.rb));
        }
        if B::ROOT_SIZE > PINDEX_ROOT_SIZE
            && self.reserved.is_none()
            && !set.load_pptr(self.rg + IX_S_NODE)?.is_null()
        {
            return Err(corrupt("the slot log is armed", self.rb));
        }
        let limit = node_limit::<B>(set);
        let mut seen = HashSet::new();
        let mut blocks = HashSet::new();
        let root = self.root_node()?;
        let height = root.img.level + 1;
        let mut report = IndexReport { nodes: 0, height, entries: 0, key_blocks: 0 };
        // (node, is_root, lower bound (None: open), upper bound (None: open))
        let mut stack = vec![(root, true, None::<B>, None::<B>)];
        while let Some((n, is_root, lo, hi)) = stack.pop() {
            if !seen.insert((n.p.segment, n.p.offset)) || seen.len() as u64 > limit {
                return Err(corrupt("a node is reachable twice", n.p));
            }
            report.nodes += 1;
            let es = self.entries(&n, is_root)?;
            for s in 0..PN_MAX_SLOTS as usize {
                let raw = n.img.keys[s];
                let valid = n.img.bitmap & (1 << s) != 0;
                if B::damaged(raw) {
                    return Err(corrupt(format!("slot {s}: damaged key words"), n.p));
                }
                let reserved =
                    self.reserved.as_ref().is_some_and(|r| r.1 == n.p && r.2 == s as u64);
                match B::block(raw) {
                    Some(_) if !valid && !reserved => {
                        return Err(corrupt(
                            format!("B2: invalid slot {s} names a key block"),
                            n.p,
                        ));
                    }
                    Some(b) if valid => {
                        if !blocks.insert((b.segment, b.offset)) {
                            return Err(corrupt(
                                format!("B3: slot {s}'s key block is named twice"),
                                n.p,
                            ));
                        }
                        report.key_blocks += 1;
                    }
                    _ => {}
                }
            }
            for (i, e) in es.iter().enumerate() {
                // N2: every key of this subtree lies in [lo, hi) — but an inner node's leftmost
                // key lowered to the empty key (byte bounds) may lie below `lo`.
                let below_ok = i == 0 && n.img.level > 0 && B::LOWERS_TO_EMPTY;
                if hi.as_ref().is_some_and(|h| e.0 >= *h)
                    || (!below_ok && lo.as_ref().is_some_and(|l| e.0 < *l))
                {
                    return Err(corrupt(
                        format!("key {:?} outside its range [{lo:?}, {hi:?})", e.0),
                        n.p,
                    ));
                }
                if n.img.level > 0 {
                    let c = self.node(e.1, Some(n.img.level - 1))?;
                    let clo = match &lo {
                        Some(l) if *l > e.0 => Some(l.clone()),
                        _ => Some(e.0.clone()),
                    };
                    let chi = es.get(i + 1).map(|x| x.0.clone()).or_else(|| hi.clone());
                    stack.push((c, false, clo, chi));
                }
            }
            if n.img.level == 0 {
                report.entries += es.len() as u64;
            }
        }
        let n = self.len.load(Ordering::Relaxed);
        if n != u64::MAX && n != report.entries {
            return Err(corrupt(format!("{} entries, {n} counted", report.entries), self.rb));
        }
        Ok(report)
    }

    // ----- modifications -----

    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> StorageResult<T>) -> StorageResult<T> {
        self.check_open()?;
        let r = f(self);
        if let Err(e) = &r
            && !matches!(e, StorageError::PoolFull { .. } | StorageError::InvalidArgument(_))
        {
            self.poisoned = true;
        }
        r
    }

    /// Inserts `bound → leaf` (a non-null, 64-byte aligned leaf pointer). Idempotent: an
    /// existing identical pair is `Ok(false)` and changes nothing (the tree's split recovery
    /// re-calls it). Errors: `InvalidArgument` if `bound` maps to another leaf (nothing
    /// changed); `PoolFull` if a node split or a separator's key block finds no space (the
    /// index is unchanged in content and usable; a split that completed before stays, it is
    /// invisible).
    pub fn insert_k(&mut self, bound: &B::Ref, leaf: PPtr) -> StorageResult<bool> {
        if leaf.is_null() || !leaf.offset.is_multiple_of(64) {
            return Err(StorageError::InvalidArgument(format!("leaf pointer {leaf:?}")));
        }
        self.guarded(|ix| {
            ix.release_reserved_unless(Some(bound))?;
            ix.insert_inner(bound, leaf)
        })
    }

    fn insert_inner(&mut self, bound: &B::Ref, leaf: PPtr) -> StorageResult<bool> {
        if let Some((b, l)) = self.floor(bound)?
            && b.borrow() == bound
        {
            if l == leaf {
                return Ok(false);
            }
            return Err(StorageError::InvalidArgument(format!(
                "bound {bound:?} already maps to {l:?}, not {leaf:?}"
            )));
        }
        let bottom = self.room_for(bound)?;
        self.insert_slot(&bottom, bound, leaf)?;
        self.count(1);
        Ok(true)
    }

    /// Makes room for `bound` without inserting it: every grow and split that
    /// `insert(bound, _)` would make, and (byte bounds) the key block a long bound needs,
    /// reserved in the slot it will take, so that the insert that follows (with no other
    /// modification in between) allocates nothing and cannot fail with `PoolFull`. The tree
    /// calls it before a leaf split, whose index insert must not fail once the split is
    /// durable. `PoolFull`: the index is unchanged in content (splits that completed stay,
    /// invisible) and usable. A present bound needs nothing. Any other modification first
    /// gives an unused reservation back ([`PIndex::release_reserved`]).
    pub fn prepare_insert_k(&mut self, bound: &B::Ref) -> StorageResult<()> {
        self.guarded(|ix| {
            ix.release_reserved_unless(Some(bound))?;
            if ix.floor(bound)?.is_none_or(|(b, _)| b.borrow() != bound) {
                let bottom = ix.room_for(bound)?;
                if B::inline(bound).is_none() && ix.reserved.is_none() {
                    let s = ix.free_slot(&bottom)?;
                    ix.reserve_block(&bottom, s, bound)?;
                }
            }
            Ok(())
        })
    }

    /// Gives back a key block reserved by `prepare_insert` and not used (the tree calls it
    /// when its split fails after the preparation; every other modification does it first).
    pub fn release_reserved(&mut self) -> StorageResult<()> {
        self.guarded(|ix| ix.release_reserved_unless(None))
    }

    fn release_reserved_unless(&mut self, keep: Option<&B::Ref>) -> StorageResult<()> {
        let Some((b, node, s)) = self.reserved.take() else { return Ok(()) };
        if keep.is_some_and(|k| b.borrow() == k) {
            self.reserved = Some((b, node, s));
            return Ok(());
        }
        let from = field(node, N_KEYS + s * u64::from(B::KEY_SIZE));
        // P-FPT-33: the slot's bit is clear; the allocator frees the block and nulls the
        // slot in one transaction, then the slot log is disarmed.
        self.alloc.deallocate(from).map_err(|e| freed(e, from))?;
        self.disarm_slot_log()
    }

    /// The descent of an insert: grows a full root, lowers leftmost separators above `bound`
    /// (`u64` bounds, P-FPT-14), splits every full node on the path; returns the bottom node
    /// `bound` goes to, which has a free slot.
    fn room_for(&mut self, bound: &B::Ref) -> StorageResult<Node<B>> {
        let root = self.root_node()?;
        if root.img.bitmap == self.full() {
            self.grow(&root)?;
        }
        let mut cur = self.root_node()?;
        loop {
            let es = self.entries(&cur, cur.p == self.root_ptr()?)?;
            if cur.img.level == 0 {
                return Ok(cur);
            }
            if bound < es[0].0.borrow() {
                // N2: the leftmost separator stays ≤ every key below it, so a split's
                // separator (a key above the node's smallest) never equals it.
                self.lower_separator(&cur, es[0].2, bound)?;
            }
            let i = route(&es, bound);
            let child = self.node(es[i].1, Some(cur.img.level - 1))?;
            if child.img.bitmap == self.full() {
                self.split(&child, &cur)?;
                cur = self.node(cur.p, Some(cur.img.level))?; // re-route in the parent
            } else {
                cur = child;
            }
        }
    }

    /// How many nodes `insert(bound, _)` would allocate now: 0 if `bound` is present; else two
    /// for a full root (the grow and the old root's split) plus one per full node below it on
    /// the routed path (a split leaves both halves with room and does not change the nodes
    /// below, so the path's later nodes are split as they are now). Lets a caller predict
    /// `PoolFull` (tests, crash targets). Key blocks (byte bounds) are not counted.
    pub fn allocations_for_k(&self, bound: &B::Ref) -> StorageResult<u64> {
        self.check_open()?;
        if self.floor(bound)?.is_some_and(|(b, _)| b.borrow() == bound) {
            return Ok(0);
        }
        let root = self.root_node()?;
        let mut n = if root.img.bitmap == self.full() { 2 } else { 0 };
        let mut cur = root;
        let mut is_root = true;
        while cur.img.level > 0 {
            let es = self.entries(&cur, is_root)?;
            let child = self.node(es[route(&es, bound)].1, Some(cur.img.level - 1))?;
            if child.img.bitmap == self.full() {
                n += 1;
            }
            cur = child;
            is_root = false;
        }
        Ok(n)
    }

    /// Adjusts the entry count if it is known (an unknown count stays unknown: a modification
    /// never walks the index).
    fn count(&self, d: i64) {
        let _ = self.len.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n != u64::MAX).then(|| n.wrapping_add_signed(d))
        });
    }

    /// The first free slot of `n`.
    fn free_slot(&self, n: &Node<B>) -> StorageResult<u64> {
        let free = !n.img.bitmap & self.full();
        if free == 0 {
            return Err(corrupt("inserting into a full node", n.p));
        }
        Ok(u64::from(free.trailing_zeros()))
    }

    /// Arms the slot log on slot `s` of `node` (P-FPT-31): the node's offset word and the slot
    /// number durable first, then the segment word (null → valid, no torn pointer without M2).
    /// While it is armed, open frees a key block the slot names if the slot's bit is clear.
    fn arm_slot_log(&self, node: PPtr, s: u64) -> StorageResult<()> {
        let set = &self.set;
        set.store_u64(self.rg + IX_S_SLOT, s, Ordering::Relaxed)?;
        set.store_u64(self.rg + IX_S_NODE + 8, node.offset, Ordering::Relaxed)?;
        set.persist_rule("P-FPT-31", self.rg + IX_S_NODE, 64)?; // ORDER(P-FPT-31): node offset and slot before the arm
        set.store_u64(self.rg + IX_S_NODE, node.segment, Ordering::Release)?;
        Ok(set.persist_rule("P-FPT-31", self.rg + IX_S_NODE, 8)?) // ORDER(P-FPT-31): the segment word arms the slot log before the block is allocated or freed
    }

    /// Disarms the slot log: one 8-byte store, persisted (P-FPT-31) before any later step
    /// (a stale log could name a slot that later holds a moved reference).
    fn disarm_slot_log(&self) -> StorageResult<()> {
        self.set.store_u64(self.rg + IX_S_NODE, PPtr::NULL.segment, Ordering::Release)?;
        Ok(self.set.persist_rule("P-FPT-31", self.rg + IX_S_NODE, 8)?) // ORDER(P-FPT-31): disarm after the slot's commit or free is durable
    }

    /// Reserves a key block for the long `key` in free slot `s` of `n`: arms the slot log on
    /// it, then allocates the block into the slot (the allocator's redo makes the pointer
    /// durable, P-FPT-32). `PoolFull` disarms the log and leaves nothing allocated.
    fn reserve_block(&mut self, n: &Node<B>, s: u64, key: &B::Ref) -> StorageResult<PPtr> {
        let at = key_at::<B>(n.g, s);
        self.arm_slot_log(n.p, s)?;
        // B2: the free slot's first word is null or inline; the allocator needs null. Not
        // persisted: a durable inline word in an invalid slot is ignored by recovery.
        if self.set.load_u64(at, Ordering::Acquire)? != PPtr::NULL.segment {
            self.set.store_u64(at, PPtr::NULL.segment, Ordering::Release)?;
        }
        let len = B::bytes(key).len() as u64;
        match self.alloc.allocate(len, field(n.p, at - n.g)) {
            Ok(block) => {
                self.reserved = Some((B::owned(key), n.p, s));
                Ok(block)
            }
            Err(e) => {
                self.disarm_slot_log()?;
                Err(e)
            }
        }
    }

    /// Writes (key, child) into a free slot of `n`, persisted, then commits it with one bitmap
    /// store (P-FPT-14). A long byte key takes its reserved slot and block, or reserves them
    /// now (P-FPT-32: the key bytes and the slot's words are flushed with the child before the
    /// fence), and the slot log is disarmed after the commit (P-FPT-31).
    fn insert_slot(&mut self, n: &Node<B>, key: &B::Ref, child: PPtr) -> StorageResult<()> {
        let set = self.set.clone();
        let (s, raw) = match B::inline(key) {
            Some(raw) => (self.free_slot(n)?, Some(raw)),
            None => {
                let s = match &self.reserved {
                    Some((b, node, s)) if b.borrow() == key && *node == n.p => *s,
                    _ => {
                        self.release_reserved_unless(None)?;
                        let s = self.free_slot(n)?;
                        self.reserve_block(n, s, key)?;
                        s
                    }
                };
                (s, None)
            }
        };
        let at = key_at::<B>(n.g, s);
        match raw {
            Some(raw) => store_raw::<B>(&set, at, raw)?,
            None => {
                let block = set.load_pptr(at)?;
                let bytes = B::bytes(key);
                let bg = resolve_block(&set, block, bytes.len() as u64, "reserved key block")?;
                set.write_bytes(bg, bytes)?;
                let w = pointer_raw(block, bytes).ok_or_else(|| corrupt("a long key", n.p))?;
                set.store_u64(at + 16, w[2], Ordering::Relaxed)?;
                set.store_u64(at + 24, w[3], Ordering::Relaxed)?;
                set.flush_rule("P-FPT-32", bg, bytes.len() as u64)?; // ORDER(P-FPT-32): the key bytes before the bitmap
            }
        }
        store_pptr(&set, child_at::<B>(n.g, s), child)?;
        set.flush_rule("P-FPT-14", at, u64::from(B::KEY_SIZE))?; // ORDER(P-FPT-14): the key before the bitmap
        set.flush_rule("P-FPT-14", child_at::<B>(n.g, s), 16)?; // ORDER(P-FPT-14): the child before the bitmap
        set.fence_rule("P-FPT-14"); // ORDER(P-FPT-14): slot durable before the commit store
        self.publish_bitmap(n, n.img.bitmap | (1 << s))?;
        if raw.is_none() {
            self.reserved = None;
            self.disarm_slot_log()?;
        }
        Ok(())
    }

    /// Clears slot `s` of `n` (a remove's commit, P-FPT-14) and frees the key block it names
    /// after the bit is durable (P-FPT-33), under the slot log so that a crash between the two
    /// steps cannot leak the block.
    fn clear_slot(&mut self, n: &Node<B>, s: usize) -> StorageResult<()> {
        let Some(_) = B::block(n.img.keys[s]) else {
            return self.publish_bitmap(n, n.img.bitmap & !(1 << s));
        };
        self.arm_slot_log(n.p, s as u64)?;
        self.publish_bitmap(n, n.img.bitmap & !(1 << s))?;
        self.free_key(n.p, s as u64)?;
        self.disarm_slot_log()
    }

    /// Frees the key block slot `s` of node `p` names (the allocator nulls the slot's first
    /// word in the same transaction: P-FPT-33); nothing if it names none.
    fn free_key(&self, p: PPtr, s: u64) -> StorageResult<()> {
        if !B::KEY_BLOCKS {
            return Ok(());
        }
        let g = resolve_block(&self.set, p, B::NODE_SIZE, "index node")?;
        let off = N_KEYS + s * u64::from(B::KEY_SIZE);
        let w0 = self.set.load_u64(g + off, Ordering::Acquire)?;
        let w1 = self.set.load_u64(g + off + 8, Ordering::Acquire)?;
        if key_form(w0) != KeyForm::Pointer {
            return Ok(());
        }
        resolve_key_block(&self.set, PPtr::new(w0, w1), 1)
            .map_err(|e| corrupt(format!("slot {s}: {e}"), p))?;
        let from = field(p, off);
        // P-FPT-33: after the slot stopped naming it durably (or as the head re-key, P-FPT-34).
        self.alloc.deallocate(from).map_err(|e| freed(e, from))
    }

    /// Lowers the leftmost key of `n` (slot `slot`) to `key` (`u64` bounds: one 8-byte store in
    /// a valid slot, persisted, P-FPT-14; byte bounds: to the empty key whatever `key` is, by
    /// freeing the slot's key block from the slot or nulling its first word, P-FPT-34). Persisted before
    /// what relies on it (an insert below it; a head leaf's free, see
    /// [`PIndex::lower_first_k`]). Routing ignores the leftmost separator and sends keys below
    /// every bound to the first entry, so either value routes alike after a crash.
    fn lower_separator(&self, n: &Node<B>, slot: usize, key: &B::Ref) -> StorageResult<()> {
        let at = key_at::<B>(n.g, slot as u64);
        if !B::LOWERS_TO_EMPTY {
            let raw =
                B::inline(key).ok_or_else(|| corrupt("a bound without an inline form", n.p))?;
            self.set.store_u64(at, B::words(&raw)[0], Ordering::Release)?;
            return Ok(self.set.persist_rule("P-FPT-14", at, 8)?); // ORDER(P-FPT-14): the lowered leftmost key before what relies on it
        }
        if B::block(n.img.keys[slot]).is_some() {
            // One allocator transaction frees the block and nulls the first word: the slot
            // then holds the empty key (B1).
            return self.free_key(n.p, slot as u64);
        }
        self.set.store_u64(at, PPtr::NULL.segment, Ordering::Release)?;
        Ok(self.set.persist_rule("P-FPT-34", at, 8)?) // ORDER(P-FPT-34): the head's bound is the empty key before the old head is freed
    }

    /// Re-keys the entry with the smallest bound to `key` if its bound is above it (the tree
    /// calls it when its head leaf is deleted: the next leaf becomes the head, whose bound
    /// must be the lowest, T5 of the tree). Top-down along the leftmost path, each node's
    /// leftmost key is lowered (`u64`: one 8-byte store, persisted, P-FPT-14; byte bounds:
    /// to the empty key, P-FPT-34: call it with the empty key), the bottom one last: N2 holds after every store, and
    /// routing does not change (keys below every bound already went to the first entry), so
    /// a crash between the stores leaves a valid index and the call can be redone.
    /// `Ok(false)`: nothing was above `key` (or the index is empty). Never needs space.
    pub fn lower_first_k(&mut self, key: &B::Ref) -> StorageResult<bool> {
        self.guarded(|ix| {
            ix.release_reserved_unless(None)?;
            let mut cur = ix.root_node()?;
            let mut is_root = true;
            let mut lowered = false;
            loop {
                let es = ix.entries(&cur, is_root)?;
                let Some((k0, child, slot)) = es.first() else { return Ok(lowered) };
                if k0.borrow() > key {
                    ix.lower_separator(&cur, *slot, key)?;
                    lowered = true;
                }
                if cur.img.level == 0 {
                    return Ok(lowered);
                }
                // Levels strictly decrease (checked by `node`): at most PN_MAX_LEVEL steps.
                cur = ix.node(*child, Some(cur.img.level - 1))?;
                is_root = false;
            }
        })
    }

    /// The commit store of a node insert or remove (P-FPT-14).
    fn publish_bitmap(&self, n: &Node<B>, bitmap: u64) -> StorageResult<()> {
        self.set.store_u64(n.g + N_BITMAP, bitmap, Ordering::Release)?;
        Ok(self.set.persist_rule("P-FPT-14", n.g + N_BITMAP, 8)?) // ORDER(P-FPT-14): the single commit store
    }

    /// Arms the alloc log for `kind` on `node` (and `parent`), then allocates the new node into
    /// it (P-FPT-16). `PoolFull` leaves the log disarmed and nothing changed.
    fn arm_alloc_log(&self, kind: u64, node: PPtr, parent: PPtr) -> StorageResult<PPtr> {
        let set = &self.set;
        store_pptr(set, self.rg + IX_A_NODE, node)?;
        store_pptr(set, self.rg + IX_A_PARENT, parent)?;
        set.store_u64(self.rg + IX_A_KIND, kind, Ordering::Relaxed)?;
        set.persist_rule("P-FPT-16", self.rg + IX_A_NODE, 64)?; // ORDER(P-FPT-16): node, parent, kind before the arm
        self.alloc.allocate(B::NODE_SIZE, field(self.rb, IX_A_NEW))
    }

    /// Disarms the alloc log: one 8-byte store of `new`'s segment word (P-FPT-17).
    fn disarm_alloc_log(&self) -> StorageResult<()> {
        self.set.store_u64(self.rg + IX_A_NEW, PPtr::NULL.segment, Ordering::Release)?;
        Ok(self.set.persist_rule("P-FPT-17", self.rg + IX_A_NEW, 8)?) // ORDER(P-FPT-17): disarm after the step is durable
    }

    /// Grow: a new root with one entry (`u64`: the old root's smallest key; bytes: the empty
    /// key) → the old root.
    fn grow(&mut self, old: &Node<B>) -> StorageResult<()> {
        if old.img.level >= PN_MAX_LEVEL {
            return Err(corrupt("the index is at its deepest level", old.p));
        }
        let new = self.arm_alloc_log(KIND_GROW, old.p, PPtr::NULL)?;
        self.finish_grow(old.p, new)
    }

    fn finish_grow(&self, old: PPtr, new: PPtr) -> StorageResult<()> {
        let set = &self.set;
        let o = self.node(old, None)?;
        let es = self.entries(&o, true)?;
        let mut img = empty_node::<B>(o.img.level + 1);
        let k = B::grow_key(es.first().map(|e| &e.0));
        img.keys[0] = B::inline(k.borrow()).ok_or_else(|| corrupt("a grown root's key", old))?;
        img.children[0] = old;
        img.bitmap = 1;
        let g = resolve_block(set, new, B::NODE_SIZE, "new root")?;
        B::write_node(set, g, &img)?;
        set.persist_rule("P-FPT-15", g, B::NODE_SIZE)?; // ORDER(P-FPT-15): the new root before it is published
        // valid → valid, may tear: redone from the armed log.
        store_pptr(set, self.rg + IX_ROOT, new)?;
        set.persist_rule("P-FPT-17", self.rg + IX_ROOT, 16)?; // ORDER(P-FPT-17): the root switch before the disarm
        self.disarm_alloc_log()
    }

    /// Split of the full node `n` whose parent `parent` has a free slot. A long separator's
    /// key block is reserved in the parent first, so that the armed split cannot fail for
    /// space (`PoolFull` before the arm changes nothing; after the node's allocation fails,
    /// the reservation is given back).
    fn split(&mut self, n: &Node<B>, parent: &Node<B>) -> StorageResult<()> {
        let sep = self.split_separator(n)?;
        self.release_reserved_unless(None)?;
        if B::inline(sep.borrow()).is_none() {
            let s = self.free_slot(parent)?;
            self.reserve_block(parent, s, sep.borrow())?;
        }
        let new = match self.arm_alloc_log(KIND_SPLIT, n.p, parent.p) {
            Ok(new) => new,
            Err(e) => {
                self.release_reserved_unless(None)?;
                return Err(e);
            }
        };
        self.finish_split(n.p, parent.p, new)
    }

    /// The separator of the full node `n`'s halves (deterministic: recovery recomputes it from
    /// the unchanged node).
    fn split_separator(&self, n: &Node<B>) -> StorageResult<B> {
        let es = self.entries(n, false)?;
        let half = (self.fanout / 2) as usize;
        if es.len() != self.fanout as usize {
            return Err(corrupt("splitting a node that is not full", n.p));
        }
        Ok(B::split_separator(&es[half - 1].0, &es[half].0, n.img.level == 0))
    }

    /// Steps after the allocation, idempotent: the new node with the upper half (P-FPT-15), its
    /// entry in the parent unless there (P-FPT-14), the old node's lower half (P-FPT-17), the
    /// moved key references dropped from the old node (P-FPT-34), the disarm. Requires the old
    /// node still full (recovery checks first).
    fn finish_split(&mut self, node: PPtr, parent: PPtr, new: PPtr) -> StorageResult<()> {
        let set = self.set.clone();
        let n = self.node(node, None)?;
        let p = self.node(parent, Some(n.img.level + 1))?;
        let es = self.entries(&n, false)?;
        if n.img.bitmap != self.full() {
            return Err(corrupt("splitting a node that is not full", node));
        }
        let half = (self.fanout / 2) as usize;
        let upper = &es[half..];
        let sep = self.split_separator(&n)?;
        let mut img = empty_node::<B>(n.img.level);
        for (s, e) in upper.iter().enumerate() {
            img.keys[s] = n.img.keys[e.2];
            img.children[s] = e.1;
            img.bitmap |= 1 << s;
        }
        let g = resolve_block(&set, new, B::NODE_SIZE, "new node")?;
        B::write_node(&set, g, &img)?;
        set.persist_rule("P-FPT-15", g, B::NODE_SIZE)?; // ORDER(P-FPT-15): the upper half before it is published
        let pes = self.entries(&p, true)?;
        if !pes.iter().any(|e| e.1 == new) {
            self.insert_slot(&p, sep.borrow(), new)?;
        }
        let keep = upper.iter().fold(n.img.bitmap, |b, e| b & !(1u64 << e.2));
        set.store_u64(n.g + N_BITMAP, keep, Ordering::Release)?;
        set.persist_rule("P-FPT-17", n.g + N_BITMAP, 8)?; // ORDER(P-FPT-17): the logical split before the disarm
        self.drop_moved_references(&n, keep)?;
        self.disarm_alloc_log()
    }

    /// After a split's logical step: the old node's invalid slots that still name key blocks
    /// (the upper half's, now the new node's) get their first word nulled, flushed and fenced
    /// before the disarm (P-FPT-34, B2/B3); until the disarm a crash redoes it.
    fn drop_moved_references(&self, n: &Node<B>, keep: u64) -> StorageResult<()> {
        let mut any = false;
        for s in (0..PN_MAX_SLOTS as usize).filter(|&s| keep & (1 << s) == 0) {
            let at = key_at::<B>(n.g, s as u64);
            if B::KEY_BLOCKS
                && key_form(self.set.load_u64(at, Ordering::Acquire)?) == KeyForm::Pointer
            {
                self.set.store_u64(at, PPtr::NULL.segment, Ordering::Release)?;
                self.set.flush_rule("P-FPT-34", at, 8)?; // ORDER(P-FPT-34): the moved reference dropped before the disarm
                any = true;
            }
        }
        if any {
            self.set.fence_rule("P-FPT-34"); // ORDER(P-FPT-34): the dropped references durable before the disarm
        }
        Ok(())
    }

    /// Removes `bound`; `Ok(false)` if absent. Never needs space.
    pub fn remove_k(&mut self, bound: &B::Ref) -> StorageResult<bool> {
        self.guarded(|ix| {
            ix.release_reserved_unless(None)?;
            ix.remove_inner(bound)
        })
    }

    fn remove_inner(&mut self, bound: &B::Ref) -> StorageResult<bool> {
        self.normalize_root()?;
        // The path root → bottom node; the bound, if present, is in the routed subtree (N2).
        let mut path: Vec<(Node<B>, Vec<Entry<B>>, usize)> = Vec::new();
        let mut cur = self.root_node()?;
        loop {
            let es = self.entries(&cur, path.is_empty())?;
            if cur.img.level == 0 {
                let Some(pos) = es.iter().position(|e| e.0.borrow() == bound) else {
                    return Ok(false);
                };
                path.push((cur, es, pos));
                break;
            }
            let i = route(&es, bound);
            let child = self.node(es[i].1, Some(cur.img.level - 1))?;
            path.push((cur, es, i));
            cur = child;
        }
        let b = path.len() - 1;
        if path[b].1.len() > 1 || b == 0 {
            let (node, es, pos) = &path[b];
            let s = es[*pos].2;
            let node = *node;
            self.clear_slot(&node, s)?;
        } else {
            // The bottom node would empty: detach the highest ancestor whose chain down to it
            // holds one entry per node. After `normalize_root` the root has ≥ 2 entries, so
            // the chain stops below it.
            let mut top = b;
            while top > 1 && path[top - 1].1.len() == 1 {
                top -= 1;
            }
            let (parent, pes, i) = &path[top - 1];
            let (parent, s) = (*parent, pes[*i].2);
            self.detach(path[top].0.p, &parent, s)?;
        }
        self.count(-1);
        self.normalize_root()?;
        Ok(true)
    }

    /// Replaces a root above level 0 that holds one entry by its child (a shrink step each).
    fn normalize_root(&mut self) -> StorageResult<()> {
        loop {
            let r = self.root_node()?;
            if r.img.level == 0 || r.img.bitmap.count_ones() != 1 {
                return Ok(());
            }
            self.arm_free_log(KIND_SHRINK, r.p, PPtr::NULL)?;
            self.finish_shrink(r.p)?;
        }
    }

    /// Arms the free log (P-FPT-18): parent, kind and the node's offset word durable first,
    /// then the node's segment word (null → valid, no torn pointer without M2).
    fn arm_free_log(&self, kind: u64, node: PPtr, parent: PPtr) -> StorageResult<()> {
        let set = &self.set;
        store_pptr(set, self.rg + IX_F_PARENT, parent)?;
        set.store_u64(self.rg + IX_F_KIND, kind, Ordering::Relaxed)?;
        set.store_u64(self.rg + IX_F_NODE + 8, node.offset, Ordering::Relaxed)?;
        set.persist_rule("P-FPT-18", self.rg + IX_F_NODE, 64)?; // ORDER(P-FPT-18): parent, kind, offset before the arm
        set.store_u64(self.rg + IX_F_NODE, node.segment, Ordering::Release)?;
        Ok(set.persist_rule("P-FPT-18", self.rg + IX_F_NODE, 8)?) // ORDER(P-FPT-18): the segment word arms the log
    }

    fn finish_shrink(&self, old: PPtr) -> StorageResult<()> {
        let set = &self.set;
        let o = self.node(old, None)?;
        let es = self.entries(&o, true)?;
        let [(_, child, slot)] = es.as_slice() else {
            return Err(corrupt("shrinking a root that does not hold one entry", old));
        };
        if o.img.level == 0 {
            return Err(corrupt("shrinking a bottom root", old));
        }
        self.node(*child, Some(o.img.level - 1))?;
        // valid → valid, may tear: redone from the armed log.
        store_pptr(set, self.rg + IX_ROOT, *child)?;
        set.persist_rule("P-FPT-17", self.rg + IX_ROOT, 16)?; // ORDER(P-FPT-17): the root switch before the old root is freed
        // P-FPT-33: the old root's separator block goes before the root itself.
        self.free_key(old, *slot as u64)?;
        let log = field(self.rb, IX_F_NODE);
        self.alloc.deallocate(log).map_err(|e| freed(e, log)) // the free disarms the log (P-FPT-18)
    }

    /// Detach: clear `top`'s entry (slot `slot`) in `parent` — the commit of the remove —,
    /// free that slot's key block, and free the chain below it.
    fn detach(&mut self, top: PPtr, parent: &Node<B>, slot: usize) -> StorageResult<()> {
        self.arm_free_log(KIND_DETACH, top, parent.p)?;
        self.publish_bitmap(parent, parent.img.bitmap & !(1 << slot))?;
        self.free_key(parent.p, slot as u64)?;
        self.free_chain(top)
    }

    /// Frees the detached chain from `top` down (single-entry nodes, at most to level 0),
    /// bottom-up: each node's valid key blocks first (P-FPT-33), then the node from its
    /// parent's child pointer (the allocator nulls it durably), `top` last from the free log,
    /// which disarms it (P-FPT-18). Idempotent: a nulled child pointer ends the chain, a
    /// nulled key word is skipped.
    fn free_chain(&self, top: PPtr) -> StorageResult<()> {
        let mut chain = vec![self.node(top, None)?];
        let mut slots = Vec::new();
        loop {
            let n = chain[chain.len() - 1];
            if n.img.level == 0 {
                break;
            }
            if n.img.bitmap.count_ones() != 1 {
                return Err(corrupt("a detached node that does not hold one entry", n.p));
            }
            let s = u64::from(n.img.bitmap.trailing_zeros());
            let c = n.img.children[s as usize];
            if c.is_null() {
                break;
            }
            slots.push(field(n.p, B::N_CHILDREN + s * 16));
            chain.push(self.node(c, Some(n.img.level - 1))?);
            if chain.len() as u64 > PN_MAX_LEVEL + 1 {
                return Err(corrupt("a detached chain deeper than the deepest level", top));
            }
        }
        let keys = |n: &Node<B>| -> StorageResult<()> {
            for s in (0..PN_MAX_SLOTS as usize).filter(|&s| n.img.bitmap & (1 << s) != 0) {
                self.free_key(n.p, s as u64)?;
            }
            Ok(())
        };
        for (i, from) in slots.iter().enumerate().rev() {
            keys(&chain[i + 1])?;
            self.alloc.deallocate(*from).map_err(|e| freed(e, *from))?;
        }
        keys(&chain[0])?;
        let log = field(self.rb, IX_F_NODE);
        self.alloc.deallocate(log).map_err(|e| freed(e, log)) // the free disarms the log (P-FPT-18)
    }

    // ----- recovery -----

    /// Finishes the slot log (byte bounds): if the logged slot's bit is clear and it names a
    /// key block, the block is freed from the slot (an insert that did not commit, a remove
    /// or a reservation whose free did not run); then the log is disarmed.
    fn recover_slot_log(&mut self) -> StorageResult<()> {
        if B::ROOT_SIZE <= PINDEX_ROOT_SIZE {
            return Ok(());
        }
        let node = self.set.load_pptr(self.rg + IX_S_NODE)?;
        if node.is_null() {
            return Ok(());
        }
        let s = self.set.load_u64(self.rg + IX_S_SLOT, Ordering::Acquire)?;
        if s >= u64::from(self.fanout) {
            return Err(corrupt(format!("the slot log names slot {s}"), self.rb));
        }
        let n = self.node(node, None)?;
        if n.img.bitmap & (1 << s) == 0 {
            self.free_key(node, s)?;
        }
        self.disarm_slot_log()
    }

    /// Finishes an armed split or grow (or finds it had published and only drops the moved
    /// references and disarms).
    fn recover_alloc_log(&mut self) -> StorageResult<()> {
        let set = self.set.clone();
        let new = set.load_pptr(self.rg + IX_A_NEW)?;
        if new.is_null() {
            return Ok(()); // disarmed, or the allocation never committed
        }
        let node = set.load_pptr(self.rg + IX_A_NODE)?;
        let kind = set.load_u64(self.rg + IX_A_KIND, Ordering::Acquire)?;
        if node.is_null() || node == new {
            return Err(corrupt("the alloc log names a new node but no node", self.rb));
        }
        resolve_block(&set, new, B::NODE_SIZE, "logged new node")?;
        match kind {
            KIND_GROW => self.finish_grow(node, new),
            KIND_SPLIT => {
                let parent = set.load_pptr(self.rg + IX_A_PARENT)?;
                let n = self.node(node, None)?;
                if n.img.bitmap == self.full() {
                    self.finish_split(node, parent, new)
                } else {
                    // The old node already kept its lower half: the parent holds the new node.
                    self.drop_moved_references(&n, n.img.bitmap)?;
                    self.disarm_alloc_log()
                }
            }
            k => Err(corrupt(format!("alloc log kind {k}"), self.rb)),
        }
    }

    /// Finishes an armed detach or shrink.
    fn recover_free_log(&mut self) -> StorageResult<()> {
        let set = self.set.clone();
        let node = set.load_pptr(self.rg + IX_F_NODE)?;
        if node.is_null() {
            return Ok(());
        }
        let kind = set.load_u64(self.rg + IX_F_KIND, Ordering::Acquire)?;
        match kind {
            KIND_SHRINK => self.finish_shrink(node),
            KIND_DETACH => {
                let parent = set.load_pptr(self.rg + IX_F_PARENT)?;
                let p = self.node(parent, None)?;
                // The slot naming the chain: still valid (clear it), or cleared with its key
                // block not freed yet (B2: no other invalid slot names a block).
                for s in (0..self.fanout as usize).filter(|&s| p.img.children[s] == node) {
                    if p.img.bitmap & (1 << s) != 0 {
                        self.publish_bitmap(&p, p.img.bitmap & !(1 << s))?;
                    }
                    self.free_key(parent, s as u64)?;
                }
                self.free_chain(node)
            }
            k => Err(corrupt(format!("free log kind {k}"), self.rb)),
        }
    }
}

/// The `u64` index's API with bounds passed by value (its original signatures).
impl PIndex<u64> {
    /// The leaf with the greatest bound ≤ `key`, and that bound.
    pub fn lookup_with_bound(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        self.lookup_with_bound_k(&key)
    }
    /// The leaf with the greatest bound ≤ `key`.
    pub fn lookup(&self, key: u64) -> StorageResult<Option<PPtr>> {
        self.lookup_k(&key)
    }
    /// See [`PIndex::lookup_near_k`].
    pub fn lookup_near(
        &self,
        key: u64,
        next: bool,
        prev: bool,
    ) -> StorageResult<Option<Near<u64>>> {
        self.lookup_near_k(&key, next, prev)
    }
    /// The entry with the smallest bound > `key`.
    pub fn successor(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        self.successor_k(&key)
    }
    /// The entry with the greatest bound < `key`.
    pub fn predecessor(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        self.predecessor_k(&key)
    }
    /// See [`PIndex::insert_k`].
    pub fn insert(&mut self, bound: u64, leaf: PPtr) -> StorageResult<bool> {
        self.insert_k(&bound, leaf)
    }
    /// See [`PIndex::prepare_insert_k`].
    pub fn prepare_insert(&mut self, bound: u64) -> StorageResult<()> {
        self.prepare_insert_k(&bound)
    }
    /// See [`PIndex::allocations_for_k`].
    pub fn allocations_for(&self, bound: u64) -> StorageResult<u64> {
        self.allocations_for_k(&bound)
    }
    /// See [`PIndex::lower_first_k`].
    pub fn lower_first(&mut self, key: u64) -> StorageResult<bool> {
        self.lower_first_k(&key)
    }
    /// See [`PIndex::remove_k`].
    pub fn remove(&mut self, bound: u64) -> StorageResult<bool> {
        self.remove_k(&bound)
    }
}

/// The byte index's API with bounds passed as slices.
impl PIndex<Box<[u8]>> {
    /// The leaf with the greatest bound ≤ `key`, and that bound.
    pub fn lookup_with_bound(&self, key: &[u8]) -> StorageResult<Option<(Box<[u8]>, PPtr)>> {
        self.lookup_with_bound_k(key)
    }
    /// The leaf with the greatest bound ≤ `key`.
    pub fn lookup(&self, key: &[u8]) -> StorageResult<Option<PPtr>> {
        self.lookup_k(key)
    }
    /// See [`PIndex::lookup_near_k`].
    pub fn lookup_near(
        &self,
        key: &[u8],
        next: bool,
        prev: bool,
    ) -> StorageResult<Option<Near<Box<[u8]>>>> {
        self.lookup_near_k(key, next, prev)
    }
    /// The entry with the smallest bound > `key`.
    pub fn successor(&self, key: &[u8]) -> StorageResult<Option<(Box<[u8]>, PPtr)>> {
        self.successor_k(key)
    }
    /// The entry with the greatest bound < `key`.
    pub fn predecessor(&self, key: &[u8]) -> StorageResult<Option<(Box<[u8]>, PPtr)>> {
        self.predecessor_k(key)
    }
    /// See [`PIndex::insert_k`].
    pub fn insert(&mut self, bound: &[u8], leaf: PPtr) -> StorageResult<bool> {
        self.insert_k(bound, leaf)
    }
    /// See [`PIndex::prepare_insert_k`].
    pub fn prepare_insert(&mut self, bound: &[u8]) -> StorageResult<()> {
        self.prepare_insert_k(bound)
    }
    /// See [`PIndex::allocations_for_k`].
    pub fn allocations_for(&self, bound: &[u8]) -> StorageResult<u64> {
        self.allocations_for_k(bound)
    }
    /// See [`PIndex::lower_first_k`].
    pub fn lower_first(&mut self, key: &[u8]) -> StorageResult<bool> {
        self.lower_first_k(key)
    }
    /// See [`PIndex::remove_k`].
    pub fn remove(&mut self, bound: &[u8]) -> StorageResult<bool> {
        self.remove_k(bound)
    }
}
