//! The persistent inner index of the fully persistent FPTree variant: a B+-tree of `u64`
//! lower bounds → leaf pointers whose nodes live in persistent memory, so that a tree opens
//! without rebuilding its inner nodes (design: `docs/design/fptree.md`, "Persistent inner
//! nodes (part II)"; layout: `docs/design/format.md`).
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
//! - Open replays at most the two logs: O(pending log), no walk of the nodes.
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
        let mut h = PIndexHeader {
            magic: 0,
            version: PINDEX_VERSION,
            fanout,
            node_size: PNODE_SIZE as u32,
            key_size: 8,
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

    /// The valid entries (key, child, slot), sorted by key.
    fn sorted(&self) -> Vec<Entry> {
        let mut v: Vec<Entry> = (0..PN_MAX_SLOTS as usize)
            .filter(|&s| self.bitmap & (1 << s) != 0)
            .map(|s| (self.keys[s], self.children[s], s))
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }
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
        StorageError::InvalidArgument(why) => corrupt(format!("freeing a node: {why}"), from),
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

/// Most nodes any walk can meet: one per node-sized piece of every live segment.
fn node_limit(set: &PoolSet) -> u64 {
    set.segments().iter().map(|s| s.data_len / PNODE_SIZE).sum::<u64>() + 1
}

/// The index of the child a key routes to among `es` (sorted, non-empty): the greatest
/// separator ≤ key, or the leftmost child when every separator is above the key (N2).
fn route(es: &[Entry], key: u64) -> usize {
    es.partition_point(|e| e.0 <= key).saturating_sub(1)
}

/// What the index root leads to.
enum RootState {
    Valid,
    Resumable,
    NoHeader,
}

fn root_state(h: &PIndexHeader, at: PPtr) -> StorageResult<RootState> {
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
            || u64::from(h.node_size) != PNODE_SIZE
            || h.key_size != 8
        {
            return Err(StorageError::Incompatible {
                what: format!(
                    "fptree index with fan-out {}, {}-byte nodes, {}-byte keys",
                    h.fanout, h.node_size, h.key_size
                ),
                at: format!("fptree index {at:?}"),
            });
        }
        return Ok(RootState::Valid);
    }
    if h.magic == 0 && h.checksum == h.crc() && h.version == PINDEX_VERSION {
        // This build's header with magic 0: a creation that wrote its header.
        return Ok(RootState::Resumable);
    }
    if h.checksum == h.crc() {
        return Err(corrupt(format!("bad index root magic {:#x}", h.magic), at));
    }
    Ok(RootState::NoHeader)
}

/// A valid entry of a node: (key, child, slot).
type Entry = (u64, PPtr, usize);

/// A node: its pointer, its global offset and the copy read from PM.
#[derive(Clone, Copy, Debug)]
struct Node {
    p: PPtr,
    g: u64,
    img: PNodeImage,
}

/// A node's first five lines (tag, bitmap, level, reserved, keys): what a lookup's descent
/// reads of each node.
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct NodeHead {
    tag: u64,
    bitmap: u64,
    level: u64,
    reserved: [u64; 5],
    keys: [u64; PN_MAX_SLOTS as usize],
}

const _: () = assert!(size_of::<NodeHead>() as u64 == N_CHILDREN);

/// What [`PersistentIndex::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexReport {
    /// Nodes reachable from the root.
    pub nodes: u64,
    /// Levels (the root's level + 1).
    pub height: u64,
    /// (bound, leaf) entries in the bottom nodes.
    pub entries: u64,
}

/// The persistent inner index (see the module docs).
#[derive(Debug)]
pub struct PersistentIndex {
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
}

impl PersistentIndex {
    /// Creates an index with the default fan-out (see [`PersistentIndex::create_with_fanout`]).
    pub fn create(alloc: Arc<PAllocator>, root_slot: PPtr) -> StorageResult<PersistentIndex> {
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
    ) -> StorageResult<PersistentIndex> {
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
            let rb = alloc.allocate(PINDEX_ROOT_SIZE, root_slot)?;
            let mut ix = PersistentIndex::new(alloc, root_slot, rb, fanout)?;
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
        let mut ix = PersistentIndex::new(alloc, root_slot, rb, fanout)?;
        let h: PIndexHeader = set.read_struct(ix.rg)?;
        match root_state(&h, rb)? {
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

    /// Opens the index whose root block pointer is at `root_slot` and replays its two logs
    /// (nothing else: no node is read). Run the allocator's recovery first. Errors:
    /// `InvalidArgument` (null slot), `Corrupted` (what starts with `"no index root header"`:
    /// a creation that crashed before its first persist — finish it with `create` — or damage),
    /// `Corrupted`/`Incompatible` for a damaged or foreign index.
    pub fn open(alloc: Arc<PAllocator>, root_slot: PPtr) -> StorageResult<PersistentIndex> {
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
        let mut ix = PersistentIndex::new(alloc, root_slot, rb, PN_DEFAULT_FANOUT)?;
        let h: PIndexHeader = set.read_struct(ix.rg)?;
        match root_state(&h, rb)? {
            RootState::Valid => {
                ix.fanout = h.fanout;
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

    fn new(
        alloc: Arc<PAllocator>,
        root_slot: PPtr,
        rb: PPtr,
        fanout: u32,
    ) -> StorageResult<PersistentIndex> {
        let rg = resolve_block(alloc.pool(), rb, PINDEX_ROOT_SIZE, "index root")?;
        Ok(PersistentIndex {
            set: alloc.pool().clone(),
            alloc,
            root_slot,
            rb,
            rg,
            fanout,
            len: AtomicU64::new(u64::MAX),
            poisoned: false,
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
        set.write_struct(r, &PIndexRootImage::in_progress(self.fanout, root))?;
        set.persist_rule("P-FPT-19", r, PINDEX_ROOT_SIZE)?; // ORDER(P-FPT-19): header (magic 0), root and disarmed logs
        let root = if root.is_null() {
            self.alloc.allocate(PNODE_SIZE, field(self.rb, IX_ROOT))?
        } else {
            root
        };
        let g = resolve_block(&set, root, PNODE_SIZE, "first node")?;
        set.write_struct(g, &PNodeImage::empty(0))?;
        set.persist_rule("P-FPT-19", g, PNODE_SIZE)?; // ORDER(P-FPT-19): an empty bottom node before the magic
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

    /// Reads and validates a node (N1; its level, if `level` is given).
    fn node(&self, p: PPtr, level: Option<u64>) -> StorageResult<Node> {
        let g = resolve_block(&self.set, p, PNODE_SIZE, "index node")?;
        let img: PNodeImage =
            self.set.read_struct(g).map_err(|e| corrupt(format!("unreadable node: {e}"), p))?;
        if img.tag != PNODE_TAG {
            return Err(corrupt(format!("not an index node (tag {:#x})", img.tag), p));
        }
        if img.bitmap & !self.full() != 0 {
            return Err(corrupt(format!("bitmap {:#x} beyond the fan-out", img.bitmap), p));
        }
        if img.level > PN_MAX_LEVEL {
            return Err(corrupt(format!("level {}", img.level), p));
        }
        if let Some(l) = level
            && img.level != l
        {
            return Err(corrupt(format!("level {} where {l} was expected", img.level), p));
        }
        Ok(Node { p, g, img })
    }

    /// The node's entries sorted, with the checks a reader needs: distinct keys, a non-root
    /// node non-empty (N3), children non-null and aligned.
    fn entries(&self, n: &Node, is_root: bool) -> StorageResult<Vec<Entry>> {
        let es = n.img.sorted();
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

    fn root_node(&self) -> StorageResult<Node> {
        self.node(self.root_ptr()?, None)
    }

    fn check_open(&self) -> StorageResult<()> {
        if self.poisoned { Err(StorageError::Poisoned) } else { Ok(()) }
    }

    // ----- lookups -----

    /// The greatest bound ≤ `key` (or < `key` if `strict`) in the subtree of `n`.
    fn floor_in(
        &self,
        n: &Node,
        is_root: bool,
        key: u64,
        strict: bool,
    ) -> StorageResult<Option<(u64, PPtr)>> {
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
        n: &Node,
        is_root: bool,
        key: u64,
        strict: bool,
        budget: &mut u64,
    ) -> StorageResult<Option<(u64, PPtr)>> {
        self.visit(budget, n.p)?;
        let es = self.entries(n, is_root)?;
        let below = |k: u64| if strict { k < key } else { k <= key };
        if n.img.level == 0 {
            return Ok(es.iter().rev().find(|e| below(e.0)).map(|e| (e.0, e.1)));
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
        n: &Node,
        is_root: bool,
        key: u64,
        strict: bool,
    ) -> StorageResult<Option<(u64, PPtr)>> {
        self.ceil_rec(n, is_root, key, strict, &mut { SEARCH_BUDGET })
    }

    fn ceil_rec(
        &self,
        n: &Node,
        is_root: bool,
        key: u64,
        strict: bool,
        budget: &mut u64,
    ) -> StorageResult<Option<(u64, PPtr)>> {
        self.visit(budget, n.p)?;
        let es = self.entries(n, is_root)?;
        let above = |k: u64| if strict { k > key } else { k >= key };
        if n.img.level == 0 {
            return Ok(es.iter().find(|e| above(e.0)).map(|e| (e.0, e.1)));
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
    pub fn lookup_with_bound(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        self.check_open()?;
        self.floor(key)
    }

    /// The greatest bound ≤ `key`: the routed path scanned in place, else the full search.
    fn floor(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        if let Some(hit) = self.floor_on_path(key)? {
            return Ok(Some(hit));
        }
        self.floor_in(&self.root_node()?, true, key, false)
    }

    /// Reads and validates a node's first five lines only (tag, bitmap, level, keys: N1 as
    /// [`PersistentIndex::node`] checks it), for the lookup's fast path, which then reads the
    /// one child pointer it follows.
    fn node_head(&self, p: PPtr, level: Option<u64>) -> StorageResult<(u64, NodeHead)> {
        let g = resolve_block(&self.set, p, PNODE_SIZE, "index node")?;
        let h: NodeHead =
            self.set.read_struct(g).map_err(|e| corrupt(format!("unreadable node: {e}"), p))?;
        if h.tag != PNODE_TAG {
            return Err(corrupt(format!("not an index node (tag {:#x})", h.tag), p));
        }
        if h.bitmap & !self.full() != 0 {
            return Err(corrupt(format!("bitmap {:#x} beyond the fan-out", h.bitmap), p));
        }
        if h.level > PN_MAX_LEVEL || level.is_some_and(|l| h.level != l) {
            return Err(corrupt(format!("level {} where {level:?} was expected", h.level), p));
        }
        Ok((g, h))
    }

    /// The lookup's fast path: descends the routed path only, scanning each node's valid slots
    /// in place (no sort, no allocation). A bound ≤ `key` in the routed bottom node is the
    /// answer (N2: every bound to the right of the path is above `key`, every bound to the
    /// left below the routed node's range). `None` when that node has none (a separator left
    /// above the keys that remain, a key below every bound, a node without entries): the
    /// caller runs the full search, which also validates what this path does not (N1's
    /// distinct keys, N3).
    fn floor_on_path(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        let (mut g, mut n) = self.node_head(self.root_ptr()?, None)?;
        for _ in 0..=PN_MAX_LEVEL {
            let (mut best, mut low) = (None::<usize>, None::<usize>);
            let mut bits = n.bitmap;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let k = n.keys[s];
                if k <= key && best.is_none_or(|b| k > n.keys[b]) {
                    best = Some(s);
                }
                if low.is_none_or(|l| k < n.keys[l]) {
                    low = Some(s);
                }
            }
            if n.level == 0 {
                return match best {
                    Some(s) => {
                        Ok(Some((n.keys[s], self.set.load_pptr(g + N_CHILDREN + s as u64 * 16)?)))
                    }
                    None => Ok(None),
                };
            }
            let Some(s) = best.or(low) else { return Ok(None) };
            let child = self.set.load_pptr(g + N_CHILDREN + s as u64 * 16)?;
            (g, n) = self.node_head(child, Some(n.level - 1))?;
        }
        Ok(None)
    }

    /// The leaf with the greatest bound ≤ `key`.
    pub fn lookup(&self, key: u64) -> StorageResult<Option<PPtr>> {
        Ok(self.lookup_with_bound(key)?.map(|(_, l)| l))
    }

    /// The entry with the smallest bound > `key` (ascending scans: the next leaf).
    pub fn successor(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        self.check_open()?;
        self.ceil_in(&self.root_node()?, true, key, true)
    }

    /// The entry with the greatest bound < `key` (descending scans: the previous leaf).
    pub fn predecessor(&self, key: u64) -> StorageResult<Option<(u64, PPtr)>> {
        self.check_open()?;
        self.floor_in(&self.root_node()?, true, key, true)
    }

    /// The entry with the smallest bound.
    pub fn first(&self) -> StorageResult<Option<(u64, PPtr)>> {
        self.check_open()?;
        self.ceil_in(&self.root_node()?, true, 0, false)
    }

    /// The entry with the greatest bound.
    pub fn last(&self) -> StorageResult<Option<(u64, PPtr)>> {
        self.check_open()?;
        self.floor_in(&self.root_node()?, true, u64::MAX, false)
    }

    /// Every entry in bound order (a walk of the whole index: for tests and tools).
    pub fn entries_in_order(&self) -> StorageResult<Vec<(u64, PPtr)>> {
        self.check_open()?;
        let mut out = Vec::new();
        self.walk(|_, es, level| {
            if level == 0 {
                out.extend(es.iter().map(|e| (e.0, e.1)));
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

    /// Every block the index owns: its root block, then its nodes (pre-order). A caller that
    /// knows every user of the allocator checks N5 (no leak) against
    /// [`PAllocator::check`]'s allocated blocks. Run it when no log is armed (after open).
    pub fn blocks(&self) -> StorageResult<Vec<PPtr>> {
        let mut out = vec![self.rb];
        self.walk(|n, _, _| {
            out.push(n.p);
            Ok(())
        })?;
        Ok(out)
    }

    /// Pre-order walk in key order with validation (levels, N3, a bound on the node count and
    /// on revisits): `f(node, sorted entries, level)`.
    fn walk(
        &self,
        mut f: impl FnMut(&Node, &[Entry], u64) -> StorageResult<()>,
    ) -> StorageResult<()> {
        let limit = node_limit(&self.set);
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

    /// Checks N1–N4 against persistent memory (N5 needs every user of the allocator: see
    /// [`PersistentIndex::blocks`]); `Corrupted` says which failed and where.
    pub fn check(&self) -> StorageResult<IndexReport> {
        self.check_open()?;
        let set = &self.set;
        if !set.load_pptr(self.rg + IX_A_NEW)?.is_null() {
            return Err(corrupt("the alloc log is armed", self.rb));
        }
        if !set.load_pptr(self.rg + IX_F_NODE)?.is_null() {
            return Err(corrupt("the free log is armed", self.rb));
        }
        let limit = node_limit(set);
        let mut seen = HashSet::new();
        let root = self.root_node()?;
        let height = root.img.level + 1;
        let mut report = IndexReport { nodes: 0, height, entries: 0 };
        // (node, is_root, lower bound (None: open), upper bound (None: open))
        let mut stack = vec![(root, true, None::<u64>, None::<u64>)];
        while let Some((n, is_root, lo, hi)) = stack.pop() {
            if !seen.insert((n.p.segment, n.p.offset)) || seen.len() as u64 > limit {
                return Err(corrupt("a node is reachable twice", n.p));
            }
            report.nodes += 1;
            let es = self.entries(&n, is_root)?;
            for (i, e) in es.iter().enumerate() {
                // N2: every key of this subtree lies in [lo, hi).
                if hi.is_some_and(|h| e.0 >= h) || lo.is_some_and(|l| e.0 < l) {
                    return Err(corrupt(
                        format!("key {} outside its range [{lo:?}, {hi:?})", e.0),
                        n.p,
                    ));
                }
                if n.img.level > 0 {
                    let c = self.node(e.1, Some(n.img.level - 1))?;
                    let clo = Some(e.0);
                    let chi = es.get(i + 1).map(|x| x.0).or(hi);
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
    /// changed); `PoolFull` if a node split finds no space (the index is unchanged in content
    /// and usable; a split that completed before stays, it is invisible).
    pub fn insert(&mut self, bound: u64, leaf: PPtr) -> StorageResult<bool> {
        if leaf.is_null() || !leaf.offset.is_multiple_of(64) {
            return Err(StorageError::InvalidArgument(format!("leaf pointer {leaf:?}")));
        }
        self.guarded(|ix| ix.insert_inner(bound, leaf))
    }

    fn insert_inner(&mut self, bound: u64, leaf: PPtr) -> StorageResult<bool> {
        if let Some((b, l)) = self.floor(bound)?
            && b == bound
        {
            if l == leaf {
                return Ok(false);
            }
            return Err(StorageError::InvalidArgument(format!(
                "bound {bound} already maps to {l:?}, not {leaf:?}"
            )));
        }
        let bottom = self.room_for(bound)?;
        self.insert_slot(&bottom, bound, leaf)?;
        self.count(1);
        Ok(true)
    }

    /// Makes room for `bound` without inserting it: every grow and split that
    /// `insert(bound, _)` would make, so that the insert that follows (with no other
    /// modification in between) allocates nothing and cannot fail with `PoolFull`. The tree
    /// calls it before a leaf split, whose index insert must not fail once the split is
    /// durable. `PoolFull`: the index is unchanged in content (splits that completed stay,
    /// invisible) and usable. A present bound needs nothing.
    pub fn prepare_insert(&mut self, bound: u64) -> StorageResult<()> {
        self.guarded(|ix| {
            if ix.floor(bound)?.is_none_or(|(b, _)| b != bound) {
                ix.room_for(bound)?;
            }
            Ok(())
        })
    }

    /// The descent of an insert: grows a full root, lowers leftmost separators above `bound`
    /// (P-FPT-14), splits every full node on the path; returns the bottom node `bound` goes
    /// to, which has a free slot.
    fn room_for(&mut self, bound: u64) -> StorageResult<Node> {
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
            if bound < es[0].0 {
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
    /// `PoolFull` (tests, crash targets).
    pub fn allocations_for(&self, bound: u64) -> StorageResult<u64> {
        self.check_open()?;
        if self.floor(bound)?.is_some_and(|(b, _)| b == bound) {
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

    /// Writes (key, child) into a free slot of `n`, persisted, then commits it with one bitmap
    /// store (P-FPT-14).
    fn insert_slot(&self, n: &Node, key: u64, child: PPtr) -> StorageResult<()> {
        let set = &self.set;
        let free = !n.img.bitmap & self.full();
        if free == 0 {
            return Err(corrupt("inserting into a full node", n.p));
        }
        let s = u64::from(free.trailing_zeros());
        set.store_u64(n.g + N_KEYS + s * 8, key, Ordering::Relaxed)?;
        store_pptr(set, n.g + N_CHILDREN + s * 16, child)?;
        set.flush_rule("P-FPT-14", n.g + N_KEYS + s * 8, 8)?; // ORDER(P-FPT-14): the key before the bitmap
        set.flush_rule("P-FPT-14", n.g + N_CHILDREN + s * 16, 16)?; // ORDER(P-FPT-14): the child before the bitmap
        set.fence_rule("P-FPT-14"); // ORDER(P-FPT-14): slot durable before the commit store
        self.publish_bitmap(n, n.img.bitmap | (1 << s))
    }

    /// Lowers the leftmost key of `n` (slot `slot`) to `key`: one 8-byte store in a valid slot,
    /// persisted before what relies on it (an insert below it; a head leaf's free, see
    /// [`PersistentIndex::lower_first`]) (P-FPT-14). Routing ignores the leftmost separator and
    /// sends keys below every bound to the first entry, so either value routes alike after a
    /// crash.
    fn lower_separator(&self, n: &Node, slot: usize, key: u64) -> StorageResult<()> {
        let at = n.g + N_KEYS + slot as u64 * 8;
        self.set.store_u64(at, key, Ordering::Release)?;
        Ok(self.set.persist_rule("P-FPT-14", at, 8)?) // ORDER(P-FPT-14): the lowered leftmost key before what relies on it
    }

    /// Re-keys the entry with the smallest bound to `key` if its bound is above it (the tree
    /// calls it when its head leaf is deleted: the next leaf becomes the head, whose bound
    /// must be the lowest, T5 of the tree). Top-down along the leftmost path, each node's
    /// leftmost key is lowered (one 8-byte store, persisted, P-FPT-14), the bottom one last:
    /// N2 holds after every store, and routing does not change (keys below every bound
    /// already went to the first entry), so a crash between the stores leaves a valid index
    /// and the call can be redone. `Ok(false)`: nothing was above `key` (or the index is
    /// empty). Never needs space.
    pub fn lower_first(&mut self, key: u64) -> StorageResult<bool> {
        self.guarded(|ix| {
            let mut cur = ix.root_node()?;
            let mut is_root = true;
            let mut lowered = false;
            loop {
                let es = ix.entries(&cur, is_root)?;
                let Some(&(k0, child, slot)) = es.first() else { return Ok(lowered) };
                if k0 > key {
                    ix.lower_separator(&cur, slot, key)?;
                    lowered = true;
                }
                if cur.img.level == 0 {
                    return Ok(lowered);
                }
                // Levels strictly decrease (checked by `node`): at most PN_MAX_LEVEL steps.
                cur = ix.node(child, Some(cur.img.level - 1))?;
                is_root = false;
            }
        })
    }

    /// The commit store of a node insert or remove (P-FPT-14).
    fn publish_bitmap(&self, n: &Node, bitmap: u64) -> StorageResult<()> {
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
        self.alloc.allocate(PNODE_SIZE, field(self.rb, IX_A_NEW))
    }

    /// Disarms the alloc log: one 8-byte store of `new`'s segment word (P-FPT-17).
    fn disarm_alloc_log(&self) -> StorageResult<()> {
        self.set.store_u64(self.rg + IX_A_NEW, PPtr::NULL.segment, Ordering::Release)?;
        Ok(self.set.persist_rule("P-FPT-17", self.rg + IX_A_NEW, 8)?) // ORDER(P-FPT-17): disarm after the step is durable
    }

    /// Grow: a new root with one entry (the old root's smallest key → the old root).
    fn grow(&mut self, old: &Node) -> StorageResult<()> {
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
        let mut img = PNodeImage::empty(o.img.level + 1);
        img.keys[0] = es.first().map_or(0, |e| e.0);
        img.children[0] = old;
        img.bitmap = 1;
        let g = resolve_block(set, new, PNODE_SIZE, "new root")?;
        set.write_struct(g, &img)?;
        set.persist_rule("P-FPT-15", g, PNODE_SIZE)?; // ORDER(P-FPT-15): the new root before it is published
        // valid → valid, may tear: redone from the armed log.
        store_pptr(set, self.rg + IX_ROOT, new)?;
        set.persist_rule("P-FPT-17", self.rg + IX_ROOT, 16)?; // ORDER(P-FPT-17): the root switch before the disarm
        self.disarm_alloc_log()
    }

    /// Split of the full node `n` whose parent `parent` has a free slot.
    fn split(&mut self, n: &Node, parent: &Node) -> StorageResult<()> {
        let new = self.arm_alloc_log(KIND_SPLIT, n.p, parent.p)?;
        self.finish_split(n.p, parent.p, new)
    }

    /// Steps after the allocation, idempotent: the new node with the upper half (P-FPT-15), its
    /// entry in the parent unless there (P-FPT-14), the old node's lower half (P-FPT-17), the
    /// disarm. Requires the old node still full (recovery checks first).
    fn finish_split(&self, node: PPtr, parent: PPtr, new: PPtr) -> StorageResult<()> {
        let set = &self.set;
        let n = self.node(node, None)?;
        let p = self.node(parent, Some(n.img.level + 1))?;
        let es = self.entries(&n, false)?;
        if n.img.bitmap != self.full() {
            return Err(corrupt("splitting a node that is not full", node));
        }
        let half = (self.fanout / 2) as usize;
        let upper = &es[half..];
        let sep = upper[0].0;
        let mut img = PNodeImage::empty(n.img.level);
        for (s, e) in upper.iter().enumerate() {
            img.keys[s] = e.0;
            img.children[s] = e.1;
            img.bitmap |= 1 << s;
        }
        let g = resolve_block(set, new, PNODE_SIZE, "new node")?;
        set.write_struct(g, &img)?;
        set.persist_rule("P-FPT-15", g, PNODE_SIZE)?; // ORDER(P-FPT-15): the upper half before it is published
        let pes = self.entries(&p, true)?;
        if !pes.iter().any(|e| e.1 == new) {
            self.insert_slot(&p, sep, new)?;
        }
        let keep = upper.iter().fold(n.img.bitmap, |b, e| b & !(1u64 << e.2));
        set.store_u64(n.g + N_BITMAP, keep, Ordering::Release)?;
        set.persist_rule("P-FPT-17", n.g + N_BITMAP, 8)?; // ORDER(P-FPT-17): the logical split before the disarm
        self.disarm_alloc_log()
    }

    /// Removes `bound`; `Ok(false)` if absent. Never needs space.
    pub fn remove(&mut self, bound: u64) -> StorageResult<bool> {
        self.guarded(|ix| ix.remove_inner(bound))
    }

    fn remove_inner(&mut self, bound: u64) -> StorageResult<bool> {
        self.normalize_root()?;
        // The path root → bottom node; the bound, if present, is in the routed subtree (N2).
        let mut path: Vec<(Node, Vec<Entry>, usize)> = Vec::new();
        let mut cur = self.root_node()?;
        loop {
            let es = self.entries(&cur, path.is_empty())?;
            if cur.img.level == 0 {
                let Some(pos) = es.iter().position(|e| e.0 == bound) else { return Ok(false) };
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
            self.publish_bitmap(node, node.img.bitmap & !(1 << es[*pos].2))?;
        } else {
            // The bottom node would empty: detach the highest ancestor whose chain down to it
            // holds one entry per node. After `normalize_root` the root has ≥ 2 entries, so
            // the chain stops below it.
            let mut top = b;
            while top > 1 && path[top - 1].1.len() == 1 {
                top -= 1;
            }
            let (parent, pes, i) = &path[top - 1];
            self.detach(path[top].0.p, parent, pes[*i].2)?;
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
        let [(_, child, _)] = es.as_slice() else {
            return Err(corrupt("shrinking a root that does not hold one entry", old));
        };
        if o.img.level == 0 {
            return Err(corrupt("shrinking a bottom root", old));
        }
        self.node(*child, Some(o.img.level - 1))?;
        // valid → valid, may tear: redone from the armed log.
        store_pptr(set, self.rg + IX_ROOT, *child)?;
        set.persist_rule("P-FPT-17", self.rg + IX_ROOT, 16)?; // ORDER(P-FPT-17): the root switch before the old root is freed
        let log = field(self.rb, IX_F_NODE);
        self.alloc.deallocate(log).map_err(|e| freed(e, log)) // the free disarms the log (P-FPT-18)
    }

    /// Detach: clear `top`'s entry (slot `slot`) in `parent` — the commit of the remove — and
    /// free the chain below it.
    fn detach(&mut self, top: PPtr, parent: &Node, slot: usize) -> StorageResult<()> {
        self.arm_free_log(KIND_DETACH, top, parent.p)?;
        self.publish_bitmap(parent, parent.img.bitmap & !(1 << slot))?;
        self.free_chain(top)
    }

    /// Frees the detached chain from `top` down (single-entry nodes, at most to level 0),
    /// bottom-up: each node is freed from its parent's child pointer (the allocator nulls it
    /// durably), `top` last from the free log, which disarms it (P-FPT-18). Idempotent: a
    /// nulled child pointer ends the chain.
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
            slots.push(field(n.p, N_CHILDREN + s * 16));
            chain.push(self.node(c, Some(n.img.level - 1))?);
            if chain.len() as u64 > PN_MAX_LEVEL + 1 {
                return Err(corrupt("a detached chain deeper than the deepest level", top));
            }
        }
        for from in slots.iter().rev() {
            self.alloc.deallocate(*from).map_err(|e| freed(e, *from))?;
        }
        let log = field(self.rb, IX_F_NODE);
        self.alloc.deallocate(log).map_err(|e| freed(e, log)) // the free disarms the log (P-FPT-18)
    }

    // ----- recovery -----

    /// Finishes an armed split or grow (or finds it had published and only disarms).
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
        resolve_block(&set, new, PNODE_SIZE, "logged new node")?;
        match kind {
            KIND_GROW => self.finish_grow(node, new),
            KIND_SPLIT => {
                let parent = set.load_pptr(self.rg + IX_A_PARENT)?;
                let n = self.node(node, None)?;
                if n.img.bitmap == self.full() {
                    self.finish_split(node, parent, new)
                } else {
                    // The old node already kept its lower half: the parent holds the new node.
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
                if let Some(s) = (0..self.fanout as usize)
                    .find(|&s| p.img.bitmap & (1 << s) != 0 && p.img.children[s] == node)
                {
                    self.publish_bitmap(&p, p.img.bitmap & !(1 << s))?;
                }
                self.free_chain(node)
            }
            k => Err(corrupt(format!("free log kind {k}"), self.rb)),
        }
    }
}
