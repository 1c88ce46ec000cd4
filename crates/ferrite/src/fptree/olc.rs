//! A concurrent ordered index for the FPTree's inner nodes: a B+-tree in DRAM whose nodes are
//! arenas of atomics addressed by `u32` ids, each with a version lock ([`super::vlock`]),
//! synchronized by optimistic lock coupling. It maps leaf lower bounds (`u64` keys or byte
//! keys, [`IndexKey`]) to leaf offsets (`u64`) and answers "the leaf of a key" (greatest bound
//! ≤ key) and ordered neighbour queries for scans. Design: `docs/design/fptree.md`,
//! "Concurrency (part II)".
//!
//! # Invariants
//! - O1 (levels): every level-0 node is at the same depth; a child of a level-`l` node has
//!   level `l − 1`. The root is reached through the header word (root id, height), which only
//!   grows (no root collapse).
//! - O2 (order): a level-0 node holds `count` entries `(bound, value)` sorted strictly
//!   ascending. An inner node holds `count ≥ 1` children; `keys[i]` for `1 ≤ i < count` are
//!   strictly ascending separators and every bound in child `i`'s subtree lies in
//!   `[keys[i], keys[i+1])` (with `keys[0]` ignored: −∞, and `keys[count]`: the node's own
//!   upper fence). Removing a child widens its left neighbour's range (or, for child 0, its
//!   right neighbour's) without touching it, which keeps O2.
//! - O3 (ownership): every stored byte key (an entry's bound or an inner separator) is a copy
//!   in the index's own key words, referenced by exactly one slot; never a pointer into
//!   persistent memory (DEFECT-4). Inner `keys[0]` owns nothing.
//! - O4 (underflow): nodes are never merged or rebalanced. A level-0 node whose last entry is
//!   removed is unlinked (with every ancestor that would be left without children, up to the
//!   lowest one with another child) and its id freed; when every ancestor has only that child
//!   the empty node stays (only then may a level-0 node be empty). Underfull nodes are
//!   compacted by the next [`OlcIndex::bulk_load`] (every open).
//! - O5 (writers): a node's words are written only by the holder of its lock, and every
//!   written node is unlocked with a new version; a node is unlocked only after every node of
//!   the same operation is written (a split holds the node, its parent — or the header — and
//!   the new node at once; a removal holds every node it unlinks and the node it unlinks them
//!   from).
//!
//! # Concurrency and ordering
//! Readers take no locks. A reader snapshots the header and the root's version, then couples
//! down: it reads a child's version before validating the parent it read the child's id from,
//! and restarts on a failed validation, a locked or obsolete node, or any value a consistent
//! node could not hold (an id outside the arena, a level that does not descend, a count above
//! the fan-out, a key handle out of range). It records every node it read in a read set and,
//! before returning, validates all of them again: every snapshot was taken before the first
//! of these final validations and each node is unchanged until its own, so at the instant of
//! the first final validation every node read held exactly what was read. With O5 (no node
//! of a multi-node change is readable in an intermediate state by a validating reader) the
//! answer is that of one instant: lookups and neighbour queries are linearizable.
//!
//! Answers from the key's own node: when the answer lies in the level-0 node the key routes
//! to (the common case), only that node is validated at the end. Coupling validated every
//! ancestor after the node's snapshot, so the key was in the node's range then; a node's
//! range narrows only when the node itself is split (its version moves) and widens when a
//! neighbour is unlinked (that neighbour was empty), so at the node's final validation the
//! key is still in its range and every bound of that range is in the node: the answer is
//! the one of that instant. A pinned lookup ([`OlcIndex::lookup_pinned`]) hands these
//! versions to the caller, who revalidates them after taking the leaf's snapshot or lock
//! (lock coupling from the index into the leaf): every bound that would change the key's
//! route lies in the pinned node (or, in the neighbour case, in one of the pinned nodes).
//!
//! Writers descend the same way, then upgrade (CAS) the versions of exactly the nodes they
//! change; a failed upgrade unlocks what it holds unchanged and restarts, so no writer waits
//! while holding a lock (no deadlock). Inserts split full nodes on the way down (so a parent
//! always has room for one more separator); a root split locks the header.
//!
//! # Memory reclamation (why reuse without epochs is safe)
//! Node ids and key words are reused at once, and readers are made safe against reuse by
//! validation: (1) all memory is arenas of atomics that are never unmapped (reading any id or
//! word is safe Rust; a bad id or handle reads as "restart"); (2) a node is freed only after
//! it was unlinked under its parent's lock and marked obsolete under its own, and it is
//! revived above every version it had (VL4), so a reader or writer holding a snapshot of the
//! old incarnation fails validation; (3) a key handle is freed only by a writer holding the
//! lock of the node whose slot referenced it, after taking that lock; whoever reuses the
//! words issues a release fence after taking them from the free list and before writing
//! them. A reader that loads bytes written by the reuser therefore synchronizes (through its
//! acquire fence in `validate`) with that fence, which happens after the first writer locked
//! the node; its validation of that node sees the lock or a later version and fails. Garbage
//! compared before validation only steers the reader, bounded by the fan-out, the height
//! and the key limit.

use std::cmp::Ordering as Cmp;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::key::{ByteKey, KeyKind, MAX_KEY_LEN, U64Key};
use super::vlock::{Locked, TryLock, Version, VersionLock, ok};
use crate::storage::{StorageError, StorageResult};

/// Entries of a level-0 node and children of an inner node. 32 and 64 measured alike for
/// lookups at 50 K–1 M leaves, 128 slower (more lines per binary search); 64 keeps the tree a
/// level lower (`docs/design/fptree.md`, "Concurrency (part II)").
pub const FANOUT: usize = 64;

/// The tallest tree the index builds (a root split beyond it is refused with `PoolFull`;
/// 64^12 leaves is far beyond any pool).
pub const MAX_HEIGHT: usize = 12;

/// Spin rounds of a restart before it yields.
const SPIN_ROUNDS: u32 = 64;

// ---------------------------------------------------------------------------------------------
// Arenas: chunks of `T` created on first use, found by id without locks, never freed.

const DIR: usize = 1024;

/// A directory of lazily created chunks.
type Dir<T> = Box<[OnceLock<T>]>;

struct Arena<T> {
    shift: u32,
    top: Dir<Dir<Box<[T]>>>,
    chunks: AtomicU64,
}

impl<T: Default> Arena<T> {
    fn new(shift: u32) -> Self {
        Arena { shift, top: (0..DIR).map(|_| OnceLock::new()).collect(), chunks: AtomicU64::new(0) }
    }

    /// Elements the arena can ever hold.
    fn capacity(&self) -> u64 {
        (DIR as u64 * DIR as u64) << self.shift
    }

    #[inline]
    fn get(&self, i: u64) -> Option<&T> {
        let c = (i >> self.shift) as usize;
        let mid = self.top.get(c / DIR)?.get()?;
        let chunk = mid.get(c % DIR)?.get()?;
        chunk.get((i & ((1 << self.shift) - 1)) as usize)
    }

    /// The element, creating its chunk if needed; `None` beyond the capacity.
    fn ensure(&self, i: u64) -> Option<&T> {
        let c = (i >> self.shift) as usize;
        let mid =
            self.top.get(c / DIR)?.get_or_init(|| (0..DIR).map(|_| OnceLock::new()).collect());
        let chunk = mid[c % DIR].get_or_init(|| {
            self.chunks.fetch_add(1, Ordering::Relaxed);
            (0..1usize << self.shift).map(|_| T::default()).collect()
        });
        chunk.get((i & ((1 << self.shift) - 1)) as usize)
    }

    fn memory_bytes(&self) -> u64 {
        let slot = size_of::<OnceLock<Box<[T]>>>() as u64;
        let mids = self.top.iter().filter(|m| m.get().is_some()).count() as u64;
        let chunk = (size_of::<T>() as u64) << self.shift;
        self.top.len() as u64 * size_of::<OnceLock<Box<[OnceLock<Box<[T]>>]>>>() as u64
            + mids * DIR as u64 * slot
            + self.chunks.load(Ordering::Relaxed) * chunk
    }
}

// ---------------------------------------------------------------------------------------------
// Byte keys in DRAM words.

/// Bytes of a key handle's length field.
const LEN_BITS: u32 = 16;
const _: () = assert!(MAX_KEY_LEN < 1 << LEN_BITS);

/// Free-list size classes of key words: 1, 2, 4, … 512 words (a 4 KiB key).
const CLASSES: usize = 10;
const _: () = assert!(MAX_KEY_LEN.div_ceil(8) <= 1 << (CLASSES - 1));

/// The words that hold the index's byte keys (O3). A key of `len` bytes is stored big-endian
/// in `ceil(len / 8)` words, the last one zero-padded, so comparing words numerically and then
/// lengths is comparing the bytes; it is named by a handle `word << 16 | len`.
pub struct KeyStore {
    words: Arena<AtomicU64>,
    alloc: Mutex<KeyAlloc>,
}

#[derive(Default)]
struct KeyAlloc {
    next: u64,
    free: [Vec<u64>; CLASSES],
}

impl fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyStore").field("bytes", &self.memory_bytes()).finish()
    }
}

fn class_of(words: usize) -> usize {
    words.next_power_of_two().trailing_zeros() as usize
}

fn be_word(chunk: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..chunk.len()].copy_from_slice(chunk);
    // Most significant byte first (numeric order = byte order), independent of the host.
    u64::from_le_bytes(b).swap_bytes()
}

impl KeyStore {
    fn new() -> Self {
        KeyStore { words: Arena::new(12), alloc: Mutex::new(KeyAlloc::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeyAlloc> {
        self.alloc.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new handle holding `key` (at most [`MAX_KEY_LEN`] bytes, checked by the caller).
    fn store(&self, key: &[u8]) -> StorageResult<u64> {
        let n = key.len().div_ceil(8);
        if n == 0 {
            return Ok(0);
        }
        let class = class_of(n);
        let w = {
            let mut a = self.lock();
            match a.free[class].pop() {
                Some(w) => w,
                None => {
                    let w = a.next;
                    let end = w + (1 << class);
                    // A handle keeps the word index in its upper 48 bits.
                    if end > self.words.capacity().min(1 << (64 - LEN_BITS)) {
                        return Err(StorageError::PoolFull {
                            at: "fptree inner index key words".into(),
                            requested: 8 << class,
                            available: 0,
                        });
                    }
                    a.next = end;
                    w
                }
            }
        };
        // The reclamation argument of the module docs: the words may have been freed by a
        // writer holding a node lock; this fence orders that lock before the stores below
        // for any reader that loads them.
        std::sync::atomic::fence(Ordering::Release);
        for (i, chunk) in key.chunks(8).enumerate() {
            let word = self.words.ensure(w + i as u64).ok_or_else(|| StorageError::PoolFull {
                at: "fptree inner index key words".into(),
                requested: 8,
                available: 0,
            })?;
            word.store(be_word(chunk), Ordering::Relaxed);
        }
        Ok(w << LEN_BITS | key.len() as u64)
    }

    /// Returns a handle's words to the free list (the caller holds the lock of the node whose
    /// slot referenced it, O3).
    fn free(&self, h: u64) {
        let len = (h & ((1 << LEN_BITS) - 1)) as usize;
        if len == 0 {
            return;
        }
        self.lock().free[class_of(len.div_ceil(8))].push(h >> LEN_BITS);
    }

    /// Compares the key of handle `h` with a prepared query; `None` if `h` is not a handle a
    /// consistent node could hold (the caller restarts).
    #[inline]
    fn cmp(&self, h: u64, q: &ByteQuery) -> Option<Cmp> {
        let len = (h & ((1 << LEN_BITS) - 1)) as usize;
        if len > MAX_KEY_LEN {
            return None;
        }
        let w0 = h >> LEN_BITS;
        let qw = q.words();
        for (i, qword) in qw.iter().enumerate().take(len.div_ceil(8)) {
            let a = self.words.get(w0 + i as u64)?.load(Ordering::Relaxed);
            match a.cmp(qword) {
                Cmp::Equal => {}
                o => return Some(o),
            }
        }
        Some(len.cmp(&q.len))
    }

    /// Copies handle `h`'s words into `out`; `false` if `h` is out of range.
    fn read(&self, h: u64, out: &mut Vec<u64>) -> bool {
        out.clear();
        let len = (h & ((1 << LEN_BITS) - 1)) as usize;
        if len > MAX_KEY_LEN {
            return false;
        }
        for i in 0..len.div_ceil(8) as u64 {
            match self.words.get((h >> LEN_BITS) + i) {
                Some(w) => out.push(w.load(Ordering::Relaxed)),
                None => return false,
            }
        }
        true
    }

    fn memory_bytes(&self) -> u64 {
        let a = self.lock();
        self.words.memory_bytes() + a.free.iter().map(|f| f.capacity() as u64 * 8).sum::<u64>()
    }
}

/// A byte key prepared for comparisons with stored keys: its big-endian padded words.
#[derive(Debug)]
pub struct ByteQuery {
    inline: [u64; 8],
    heap: Vec<u64>,
    len: usize,
}

impl ByteQuery {
    fn new(key: &[u8]) -> Self {
        let mut q = ByteQuery { inline: [0; 8], heap: Vec::new(), len: key.len() };
        if key.len() <= 64 {
            for (i, c) in key.chunks(8).enumerate() {
                q.inline[i] = be_word(c);
            }
        } else {
            q.heap = key.chunks(8).map(be_word).collect();
        }
        q
    }

    #[inline]
    fn words(&self) -> &[u64] {
        if self.len <= 64 { &self.inline[..self.len.div_ceil(8)] } else { &self.heap }
    }
}

// ---------------------------------------------------------------------------------------------
// Key kinds.

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::U64Key {}
    impl Sealed for super::ByteKey {}
}

/// How the index stores and compares the separators of a key kind: `u64` keys sit in the
/// node's key word itself; byte keys are handles into the index's [`KeyStore`] (O3).
pub trait IndexKey: KeyKind + sealed::Sealed {
    /// A key prepared for repeated comparisons.
    type Query: fmt::Debug;
    /// A stored key copied out during an optimistic read (garbage until validated).
    type Snap: Default + fmt::Debug;

    /// Prepares `key`.
    fn prepare(key: &Self::Key) -> Self::Query;
    /// Compares stored word `w` with `q`; `None` if `w` cannot be a stored key.
    fn cmp(keys: &KeyStore, w: u64, q: &Self::Query) -> Option<Cmp>;
    /// A stored word holding a copy of `key`.
    fn store(keys: &KeyStore, key: &Self::Key) -> StorageResult<u64>;
    /// A new stored word holding the same key as `w` (a separator copied up at a split).
    fn copy(keys: &KeyStore, w: u64) -> StorageResult<u64>;
    /// Frees stored word `w` (its slot's node is locked).
    fn free(keys: &KeyStore, w: u64);
    /// Copies the key of `w` into `snap`; `false` if `w` cannot be a stored key.
    fn snap(keys: &KeyStore, w: u64, snap: &mut Self::Snap) -> bool;
    /// The owned key of a validated snapshot.
    fn owned(w: u64, snap: &Self::Snap) -> Self::Owned;
}

impl IndexKey for U64Key {
    type Query = u64;
    type Snap = ();

    #[inline]
    fn prepare(key: &u64) -> u64 {
        *key
    }

    #[inline]
    fn cmp(_: &KeyStore, w: u64, q: &u64) -> Option<Cmp> {
        Some(w.cmp(q))
    }

    fn store(_: &KeyStore, key: &u64) -> StorageResult<u64> {
        Ok(*key)
    }

    fn copy(_: &KeyStore, w: u64) -> StorageResult<u64> {
        Ok(w)
    }

    fn free(_: &KeyStore, _: u64) {}

    fn snap(_: &KeyStore, _: u64, _: &mut ()) -> bool {
        true
    }

    fn owned(w: u64, _: &()) -> u64 {
        w
    }
}

impl IndexKey for ByteKey {
    type Query = ByteQuery;
    type Snap = Vec<u64>;

    fn prepare(key: &[u8]) -> ByteQuery {
        ByteQuery::new(key)
    }

    #[inline]
    fn cmp(keys: &KeyStore, w: u64, q: &ByteQuery) -> Option<Cmp> {
        keys.cmp(w, q)
    }

    fn store(keys: &KeyStore, key: &[u8]) -> StorageResult<u64> {
        ByteKey::validate(key)?;
        keys.store(key)
    }

    fn copy(keys: &KeyStore, w: u64) -> StorageResult<u64> {
        let mut words = Vec::new();
        if !keys.read(w, &mut words) {
            return Err(StorageError::corrupted("inner index key handle out of range", "DRAM"));
        }
        keys.store(&Self::owned(w, &words))
    }

    fn free(keys: &KeyStore, w: u64) {
        keys.free(w)
    }

    fn snap(keys: &KeyStore, w: u64, snap: &mut Vec<u64>) -> bool {
        keys.read(w, snap)
    }

    fn owned(w: u64, snap: &Vec<u64>) -> Box<[u8]> {
        let len = ((w & ((1 << LEN_BITS) - 1)) as usize).min(snap.len() * 8);
        snap.iter().flat_map(|x| x.swap_bytes().to_le_bytes()).take(len).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes.

/// One node: a version word, `count | level << 16`, and `FANOUT` key and value words (values
/// are child ids in inner nodes, leaf offsets at level 0).
struct Node {
    ver: AtomicU64,
    meta: AtomicU64,
    keys: [AtomicU64; FANOUT],
    vals: [AtomicU64; FANOUT],
}

impl Default for Node {
    fn default() -> Self {
        Node {
            ver: AtomicU64::new(0),
            meta: AtomicU64::new(0),
            keys: std::array::from_fn(|_| AtomicU64::new(0)),
            vals: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

fn meta(count: usize, level: usize) -> u64 {
    count as u64 | (level as u64) << 16
}

/// `(count, level)` of a meta word; `None` if no consistent node holds it.
#[inline]
fn unmeta(m: u64) -> Option<(usize, usize)> {
    let (count, level) = ((m & 0xFFFF) as usize, (m >> 16) as usize);
    (count <= FANOUT && level < MAX_HEIGHT).then_some((count, level))
}

impl Node {
    #[inline]
    fn key(&self, i: usize) -> u64 {
        self.keys[i].load(Ordering::Relaxed)
    }

    #[inline]
    fn val(&self, i: usize) -> u64 {
        self.vals[i].load(Ordering::Relaxed)
    }

    #[inline]
    fn set(&self, i: usize, k: u64, v: u64) {
        self.keys[i].store(k, Ordering::Relaxed);
        self.vals[i].store(v, Ordering::Relaxed);
    }
}

/// The header word: root id in the low 32 bits, height (levels) above.
fn header(root: u32, height: usize) -> u64 {
    u64::from(root) | (height as u64) << 32
}

/// What a seek looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The greatest entry ≤ the key.
    Le,
    /// The greatest entry < the key.
    Lt,
    /// The smallest entry > the key.
    Gt,
    /// The smallest entry ≥ the key.
    Ge,
}

impl Mode {
    fn forward(self) -> bool {
        matches!(self, Mode::Gt | Mode::Ge)
    }
}

/// Nodes read by an optimistic operation, validated together at its end.
struct ReadSet {
    inline: [(u32, Version); 2 * MAX_HEIGHT],
    n: usize,
    spill: Vec<(u32, Version)>,
}

impl ReadSet {
    fn new() -> Self {
        ReadSet { inline: [(0, Version::PLACEHOLDER); 2 * MAX_HEIGHT], n: 0, spill: Vec::new() }
    }

    fn clear(&mut self) {
        self.n = 0;
        self.spill.clear();
    }

    fn push(&mut self, id: u32, v: Version) {
        if self.n < self.inline.len() {
            self.inline[self.n] = (id, v);
            self.n += 1;
        } else {
            self.spill.push((id, v));
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(u32, Version)> {
        self.inline[..self.n].iter().chain(&self.spill)
    }
}

/// One step of a descent: the node, its snapshot, the child index taken and its count.
#[derive(Clone, Copy, Debug)]
struct Step {
    id: u32,
    v: Version,
    idx: usize,
    count: usize,
}

/// The index versions a pinned lookup's answer rests on ([`OlcIndex::lookup_pinned`]): the
/// level-0 node that held it, or (rarely: the answer came from a neighbouring node) every
/// node the lookup read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// The key's own level-0 node.
    One(u32, Version),
    /// Every node read.
    Many(Box<[(u32, Version)]>),
}

/// The neighbours of the routed entry a pinned route also copies out of the same level-0 node
/// ([`OlcIndex::route_near`]), under the same validation.
struct Near<K: IndexKey> {
    want_next: bool,
    want_prev: bool,
    /// (key word, value) of entry `i + 1` / `i − 1` when the node holds it.
    next: Option<(u64, u64)>,
    prev: Option<(u64, u64)>,
    next_snap: K::Snap,
    prev_snap: K::Snap,
    /// The routed entry's position in its level-0 node.
    at: usize,
}

impl<K: IndexKey> Near<K> {
    fn new(want_next: bool, want_prev: bool) -> Self {
        Near {
            want_next,
            want_prev,
            next: None,
            prev: None,
            next_snap: K::Snap::default(),
            prev_snap: K::Snap::default(),
            at: 0,
        }
    }
}

/// What [`OlcIndex::route_near`] found: the entry routing the key and its neighbours.
#[derive(Debug)]
pub struct Routed<O, P = Pin> {
    /// The routing entry's bound (the greatest bound ≤ the key).
    pub bound: O,
    /// Its value (the leaf).
    pub leaf: u64,
    /// The versions the answer rests on (covering the neighbours returned).
    pub pin: P,
    /// The next entry, when the routed entry's level-0 node holds it; `None` at the node's
    /// edge (or when not asked): [`OlcIndex::successor`] knows.
    pub next: Option<(O, u64)>,
    /// The previous entry, likewise ([`OlcIndex::predecessor`] at the edge).
    pub prev: Option<(O, u64)>,
    /// The routed entry's position in its level-0 node, for [`OlcIndex::step`] (meaningful
    /// only with a [`Pin::One`]).
    pub at: usize,
}

/// A stored key word and its copied-out key (validated).
type Stored<K> = (u64, <K as IndexKey>::Snap);

/// Where one descent of a seek records what it read: its read set, the answer's key copy, the
/// answer's own node (when the answer came from it) and the neighbours asked for.
type SeekOut<'a, K> = (
    &'a mut ReadSet,
    &'a mut <K as IndexKey>::Snap,
    &'a mut Option<(u32, Version)>,
    Option<&'a mut Near<K>>,
);

/// Why an operation must restart from the root.
struct Restart;

type Attempt<T> = Result<T, Restart>;

/// The concurrent ordered index of leaf bounds (see the module docs). `K` is the key kind.
pub struct OlcIndex<K: KeyKind> {
    head_ver: AtomicU64,
    head: AtomicU64,
    nodes: Arena<Node>,
    node_alloc: Mutex<NodeAlloc>,
    keys: KeyStore,
    len: AtomicU64,
    _kind: std::marker::PhantomData<K>,
}

#[derive(Default)]
struct NodeAlloc {
    next: u32,
    free: Vec<u32>,
}

impl<K: IndexKey> fmt::Debug for OlcIndex<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OlcIndex")
            .field("kind", &K::NAME)
            .field("len", &self.len())
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

impl<K: IndexKey> Default for OlcIndex<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: IndexKey> OlcIndex<K> {
    /// An empty index: one empty level-0 root.
    pub fn new() -> Self {
        let idx = Self::empty();
        let (root, l) = idx.alloc_node().expect("the first node of an empty arena");
        root.meta.store(meta(0, 0), Ordering::Relaxed);
        ok(root.ver.unlock(l.1));
        idx.head.store(header(l.0, 1), Ordering::Release);
        idx
    }

    fn empty() -> Self {
        OlcIndex {
            head_ver: AtomicU64::new(0),
            head: AtomicU64::new(0),
            nodes: Arena::new(6),
            node_alloc: Mutex::new(NodeAlloc::default()),
            keys: KeyStore::new(),
            len: AtomicU64::new(0),
            _kind: std::marker::PhantomData,
        }
    }

    /// Builds an index from entries in strictly ascending bound order, full nodes bottom-up
    /// (the restart path: no locks, no searches). Unsorted or duplicate bounds and keys over
    /// the limit are `InvalidArgument`.
    pub fn bulk_load<I>(entries: I) -> StorageResult<Self>
    where
        I: IntoIterator<Item = (K::Owned, u64)>,
    {
        use std::borrow::Borrow;
        let idx = Self::empty();
        // Level 0: (node id, its smallest bound) per node.
        let mut level: Vec<(u32, Option<K::Owned>)> = Vec::new();
        let mut prev: Option<K::Owned> = None;
        let mut cur: Option<(u32, Locked, usize)> = None;
        let mut n = 0u64;
        for (bound, val) in entries {
            let b: &K::Key = bound.borrow();
            K::validate(b)?;
            if let Some(p) = &prev
                && p.borrow() >= b
            {
                return Err(StorageError::InvalidArgument(format!(
                    "bulk load of the inner index: bounds not strictly ascending ({p:?}, then {b:?})"
                )));
            }
            if cur.as_ref().is_some_and(|c| c.2 == FANOUT) {
                let (id, l, count) = cur.take().expect("checked");
                idx.finish_node(id, l, count, 0);
            }
            if cur.is_none() {
                let (_, (id, l)) = idx.alloc_node()?;
                level.push((id, Some(bound.clone())));
                cur = Some((id, l, 0));
            }
            let (id, _, count) = cur.as_mut().expect("set above");
            let node = idx.node(*id).expect("allocated");
            node.set(*count, K::store(&idx.keys, b)?, val);
            *count += 1;
            n += 1;
            prev = Some(bound);
        }
        match cur {
            Some((id, l, count)) => idx.finish_node(id, l, count, 0),
            None => {
                let (_, (id, l)) = idx.alloc_node()?;
                idx.finish_node(id, l, 0, 0);
                level.push((id, None));
            }
        }
        // Inner levels: FANOUT children per node; separator i = a copy of child i's smallest
        // bound (keys[0] owns nothing, O3).
        let mut height = 1;
        while level.len() > 1 {
            let mut up = Vec::with_capacity(level.len().div_ceil(FANOUT));
            for group in level.chunks(FANOUT) {
                let (_, (id, l)) = idx.alloc_node()?;
                let node = idx.node(id).expect("allocated");
                for (i, (child, min)) in group.iter().enumerate() {
                    let k = match (i, min) {
                        (0, _) => 0,
                        (_, Some(m)) => K::store(&idx.keys, m.borrow())?,
                        (_, None) => unreachable!("only a lone empty node has no bound"),
                    };
                    node.set(i, k, u64::from(*child));
                }
                idx.finish_node(id, l, group.len(), height);
                up.push((id, group[0].1.clone()));
            }
            level = up;
            height += 1;
            if height > MAX_HEIGHT {
                return Err(idx.too_tall());
            }
        }
        idx.head.store(header(level[0].0, height), Ordering::Release);
        idx.len.store(n, Ordering::Relaxed);
        Ok(idx)
    }

    fn finish_node(&self, id: u32, l: Locked, count: usize, level: usize) {
        let node = self.node(id).expect("allocated");
        node.meta.store(meta(count, level), Ordering::Relaxed);
        ok(node.ver.unlock(l));
    }

    fn too_tall(&self) -> StorageError {
        StorageError::PoolFull {
            at: format!("fptree inner index: more than {MAX_HEIGHT} levels"),
            requested: 1,
            available: 0,
        }
    }

    /// Entries (leaf bounds) in the index; exact while no writer runs.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    /// Whether the index has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// DRAM the index holds: node chunks, key words, directories and free lists.
    pub fn memory_bytes(&self) -> u64 {
        let free = self.node_alloc.lock().unwrap_or_else(|p| p.into_inner()).free.capacity();
        size_of::<Self>() as u64
            + self.nodes.memory_bytes()
            + self.keys.memory_bytes()
            + free as u64 * 4
    }

    /// The value (leaf) of the greatest bound ≤ `key`; `None` if every bound is greater.
    pub fn lookup(&self, key: &K::Key) -> Option<u64> {
        self.seek(Some(&K::prepare(key)), Mode::Le, false).map(|(_, v)| v)
    }

    /// [`Self::lookup`] for lock coupling into the leaf: also returns a [`Pin`] of the index
    /// versions the answer rests on. The tree takes the leaf's version snapshot (a reader) or
    /// its lock (a writer) and only then checks [`Self::still_valid`]; if the pin still holds,
    /// the leaf was the key's leaf when its snapshot or lock was taken (a split or removal of
    /// a leaf changes the index while holding the leaf's lock, so it either happened before
    /// the lookup or moves the pinned versions). See the design doc, "leaf coupling".
    pub fn lookup_pinned(&self, key: &K::Key) -> Option<(u64, Pin)> {
        self.seek_pinned(Some(&K::prepare(key)), Mode::Le, false, true, None)
            .and_then(|(_, v, pin)| pin.map(|p| (v, p)))
    }

    /// [`Self::lookup_pinned`] with the routing entry's bound and, when the same level-0 node
    /// holds them, its next (`next`) and previous (`prev`) entries: one descent for a scan
    /// step. Everything returned was read under the node versions of the pin, so while
    /// [`Self::still_valid`] holds, the neighbours are still the routed entry's neighbours
    /// (a bound between them would be inserted into that node, or split it). At a node's
    /// edge a neighbour is `None` and the caller asks [`Self::successor`] or
    /// [`Self::predecessor`]. `None` for an empty index.
    pub fn route_near(&self, key: &K::Key, next: bool, prev: bool) -> Option<Routed<K::Owned>> {
        let mut near = Near::<K>::new(next, prev);
        let ((w, snap), leaf, pin) =
            self.seek_pinned(Some(&K::prepare(key)), Mode::Le, true, true, Some(&mut near))?;
        Some(Self::routed(w, &snap, leaf, pin?, near))
    }

    /// The entry after (`forward`) or before the one a [`Self::route_near`] or an earlier
    /// step routed (`pin`, `at`), taken from the same pinned level-0 node without a descent, with its
    /// neighbours as `route_near` gives them, under the same pin: the scan's level-0 cursor.
    /// `None` when the entry is not in that node (the node's edge), the route rests on more
    /// than one node ([`Pin::Many`]) or the node has changed since the pin (the caller
    /// descends instead).
    ///
    /// Why the same pin covers the new entry: the pin's snapshot was taken in a coupled
    /// descent, so every bound the node held then lay in its range (O2), and that range
    /// narrows only when the node itself changes (its version moves). While the node
    /// validates against the pin, the new entry's bound therefore still routes to this node,
    /// and to the new entry within it: exactly what a fresh `route_near` of that bound would
    /// have returned and pinned (module docs, "answers from the key's own node").
    pub fn step(
        &self,
        pin: &Pin,
        at: usize,
        forward: bool,
        next: bool,
        prev: bool,
    ) -> Option<Routed<K::Owned>> {
        let Pin::One(id, v) = *pin else { return None };
        let node = self.node(id)?;
        let count = Self::count(node, 0).ok()?;
        let i = if forward { at + 1 } else { at.checked_sub(1)? };
        if i >= count {
            return None;
        }
        let mut near = Near::<K>::new(next, prev);
        let mut snap = K::Snap::default();
        self.near(node, count, i, Some(&mut near)).ok()?;
        // Validates the node against the pin: the entry and its neighbours are of that state.
        let (w, leaf) = self.finish(node, i, true, Err(v), &mut snap).ok()?;
        Some(Self::routed(w, &snap, leaf, Pin::One(id, v), near))
    }

    /// A route's answer from the routed entry's validated key word, copy and value.
    fn routed(w: u64, snap: &K::Snap, leaf: u64, pin: Pin, near: Near<K>) -> Routed<K::Owned> {
        let owned = |(w, v): (u64, u64), s: &K::Snap| (K::owned(w, s), v);
        Routed {
            bound: K::owned(w, snap),
            leaf,
            pin,
            next: near.next.map(|e| owned(e, &near.next_snap)),
            prev: near.prev.map(|e| owned(e, &near.prev_snap)),
            at: near.at,
        }
    }

    /// The greatest bound ≤ `key` and its value.
    pub fn lookup_with_bound(&self, key: &K::Key) -> Option<(K::Owned, u64)> {
        self.seek_owned(&K::prepare(key), Mode::Le)
    }

    /// The smallest bound > `bound` and its value (the next leaf, for forward scans).
    pub fn successor(&self, bound: &K::Key) -> Option<(K::Owned, u64)> {
        self.seek_owned(&K::prepare(bound), Mode::Gt)
    }

    /// The greatest bound < `bound` and its value (the previous leaf, for backward scans).
    pub fn predecessor(&self, bound: &K::Key) -> Option<(K::Owned, u64)> {
        self.seek_owned(&K::prepare(bound), Mode::Lt)
    }

    /// The smallest bound ≥ `key` and its value.
    pub fn ceiling(&self, key: &K::Key) -> Option<(K::Owned, u64)> {
        self.seek_owned(&K::prepare(key), Mode::Ge)
    }

    /// The smallest bound and its value (the head leaf).
    pub fn first(&self) -> Option<(K::Owned, u64)> {
        self.seek(None, Mode::Ge, true).map(|((w, snap), v)| (K::owned(w, &snap), v))
    }

    /// The greatest bound and its value (the tail leaf, where backward scans start).
    pub fn last(&self) -> Option<(K::Owned, u64)> {
        self.seek(None, Mode::Le, true).map(|((w, snap), v)| (K::owned(w, &snap), v))
    }

    fn seek_owned(&self, q: &K::Query, mode: Mode) -> Option<(K::Owned, u64)> {
        self.seek(Some(q), mode, true).map(|((w, snap), v)| (K::owned(w, &snap), v))
    }

    #[inline]
    fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.get(u64::from(id))
    }

    /// A node id taken from the free list or the arena, its word claimed (locked) by the
    /// caller (VL4).
    fn alloc_node(&self) -> StorageResult<(&Node, (u32, Locked))> {
        let id = {
            let mut a = self.node_alloc.lock().unwrap_or_else(|p| p.into_inner());
            match a.free.pop() {
                Some(id) => id,
                None => {
                    let id = a.next;
                    if u64::from(id) >= self.nodes.capacity() {
                        return Err(StorageError::PoolFull {
                            at: "fptree inner index nodes".into(),
                            requested: size_of::<Node>() as u64,
                            available: 0,
                        });
                    }
                    a.next += 1;
                    id
                }
            }
        };
        let full = || StorageError::PoolFull {
            at: "fptree inner index nodes".into(),
            requested: size_of::<Node>() as u64,
            available: 0,
        };
        let node = self.nodes.ensure(u64::from(id)).ok_or_else(full)?;
        let l = ok(node.ver.claim()).ok_or_else(|| {
            StorageError::corrupted("a free inner-index node is locked", format!("node {id}"))
        })?;
        Ok((node, (id, l)))
    }

    /// Returns the id of a node its caller unlocked obsolete.
    fn free_node(&self, id: u32) {
        self.node_alloc.lock().unwrap_or_else(|p| p.into_inner()).free.push(id);
    }

    /// Index of the child of `node` (an inner node with `count` children) whose range holds
    /// `q`: the last `i ≥ 1` with `keys[i] ≤ q`, else 0.
    #[inline]
    fn route(&self, node: &Node, count: usize, q: &K::Query) -> Attempt<usize> {
        // The first i in 1..count with keys[i] > q, minus one.
        let (mut lo, mut hi) = (1, count.max(1));
        while lo < hi {
            let mid = (lo + hi) / 2;
            match K::cmp(&self.keys, node.key(mid), q).ok_or(Restart)? {
                Cmp::Greater => hi = mid,
                _ => lo = mid + 1,
            }
        }
        Ok(lo - 1)
    }

    /// The first `i < count` whose key is > `q` (`strict`) or ≥ `q`; `count` if none.
    #[inline]
    fn bound_in(&self, node: &Node, count: usize, q: &K::Query, strict: bool) -> Attempt<usize> {
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let c = K::cmp(&self.keys, node.key(mid), q).ok_or(Restart)?;
            let after = if strict { c == Cmp::Greater } else { c != Cmp::Less };
            if after {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// Takes a snapshot of the header and the root; the root's id, node, snapshot and level.
    fn begin(&self) -> Attempt<(u32, &Node, Version, usize)> {
        let hv = ok(self.head_ver.read_begin()).ok_or(Restart)?;
        let h = self.head.load(Ordering::Relaxed);
        let (root_id, height) = (h as u32, (h >> 32) as usize);
        let root = self.node(root_id).ok_or(Restart)?;
        let v = ok(root.ver.read_begin()).ok_or(Restart)?;
        if height == 0 || height > MAX_HEIGHT || !ok(self.head_ver.validate(hv)) {
            return Err(Restart);
        }
        Ok((root_id, root, v, height - 1))
    }

    /// Reads `node`'s meta word, checking the level it must have.
    #[inline]
    fn count(node: &Node, level: usize) -> Attempt<usize> {
        match unmeta(node.meta.load(Ordering::Relaxed)) {
            Some((count, l)) if l == level => Ok(count),
            _ => Err(Restart),
        }
    }

    /// The child `idx` of `node` (snapshot `v`), coupled: its snapshot is taken before `node`
    /// is validated.
    #[inline]
    fn child(&self, node: &Node, v: Version, idx: usize) -> Attempt<(u32, &Node, Version)> {
        let id = u32::try_from(node.val(idx)).map_err(|_| Restart)?;
        let child = self.node(id).ok_or(Restart)?;
        let cv = ok(child.ver.read_begin()).ok_or(Restart)?;
        if !ok(node.ver.validate(v)) {
            return Err(Restart);
        }
        Ok((id, child, cv))
    }

    fn pause(round: &mut u32) {
        if *round < SPIN_ROUNDS {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        *round = round.saturating_add(1);
    }

    /// The entry `mode` selects for `q`, or with `q = None` the first (forward modes) or last
    /// (backward modes) entry; with `want_key` its key is copied out. Retries until a
    /// validated answer (lock-free: restarts only when a writer changed a node read).
    fn seek(&self, q: Option<&K::Query>, mode: Mode, want_key: bool) -> Option<(Stored<K>, u64)> {
        self.seek_pinned(q, mode, want_key, false, None).map(|(k, v, _)| (k, v))
    }

    /// [`Self::seek`], also returning (with `want_pin`) the versions the answer rests on.
    fn seek_pinned(
        &self,
        q: Option<&K::Query>,
        mode: Mode,
        want_key: bool,
        want_pin: bool,
        mut near: Option<&mut Near<K>>,
    ) -> Option<(Stored<K>, u64, Option<Pin>)> {
        let mut reads = ReadSet::new();
        let mut snap = K::Snap::default();
        let mut round = 0;
        loop {
            reads.clear();
            let mut own = None;
            let at = (&mut reads, &mut snap, &mut own, near.as_deref_mut());
            match self.seek_once(q, mode, want_key, at) {
                Ok(r) => {
                    let pin = want_pin.then(|| match own {
                        Some((id, v)) => Pin::One(id, v),
                        None => Pin::Many(reads.iter().copied().collect()),
                    });
                    return r.map(|(w, v)| ((w, snap), v, pin));
                }
                Err(Restart) => Self::pause(&mut round),
            }
        }
    }

    /// Whether nothing the answer of a pinned lookup rests on has changed since: while this
    /// holds, the key still routes to the same leaf (see [`Self::lookup_pinned`]).
    pub fn still_valid(&self, pin: &Pin) -> bool {
        let check =
            |&(id, v): &(u32, Version)| self.node(id).is_some_and(|n| ok(n.ver.validate(v)));
        match pin {
            Pin::One(id, v) => check(&(*id, *v)),
            Pin::Many(all) => all.iter().all(check),
        }
    }

    fn seek_once(
        &self,
        q: Option<&K::Query>,
        mode: Mode,
        want_key: bool,
        (reads, snap, own, mut near): SeekOut<'_, K>,
    ) -> Attempt<Option<(u64, u64)>> {
        let (mut id, mut node, mut v, mut level) = self.begin()?;
        let top = level;
        let mut path = [Step { id: 0, v: Version::PLACEHOLDER, idx: 0, count: 0 }; MAX_HEIGHT];
        let mut depth = 0;
        // Descend along q.
        loop {
            reads.push(id, v);
            let count = Self::count(node, level)?;
            if level == 0 {
                let found = self.pick(node, count, q, mode)?;
                if let Some(i) = found {
                    // Found in the level-0 node of q: coupling validated every ancestor after
                    // this node's snapshot, so validating this node alone suffices (module
                    // docs, "answers from the key's own node").
                    *own = Some((id, v));
                    self.near(node, count, i, near)?;
                    return self.finish(node, i, want_key, Err(v), snap).map(Some);
                }
                break;
            }
            if count == 0 {
                return Err(Restart);
            }
            let idx = match q {
                Some(q) => self.route(node, count, q)?,
                None if mode.forward() => 0,
                None => count - 1,
            };
            path[depth] = Step { id, v, idx, count };
            depth += 1;
            let (cid, child, cv) = self.child(node, v, idx)?;
            (id, node, v, level) = (cid, child, cv, level - 1);
        }
        // Not in the level-0 node of q: move to the neighbouring subtree in the mode's
        // direction, descending along its edge, past empty level-0 nodes (O4).
        let forward = mode.forward();
        loop {
            let step = loop {
                if depth == 0 {
                    return self.validate_all(reads).map(|()| None);
                }
                let s = &mut path[depth - 1];
                if forward && s.idx + 1 < s.count {
                    s.idx += 1;
                    break *s;
                }
                if !forward && s.idx > 0 {
                    s.idx -= 1;
                    break *s;
                }
                depth -= 1;
            };
            let parent = self.node(step.id).ok_or(Restart)?;
            let (mut cid, mut child, mut cv) = self.child(parent, step.v, step.idx)?;
            // path[d] is at level top − d, so the child of path[depth − 1] is at top − depth.
            let mut level = top - depth;
            loop {
                reads.push(cid, cv);
                let count = Self::count(child, level)?;
                if level == 0 {
                    if let Some(i) = self.pick(child, count, None, mode)? {
                        self.near(child, count, i, near.as_deref_mut())?;
                        return self.finish(child, i, want_key, Ok(reads), snap).map(Some);
                    }
                    break;
                }
                if count == 0 || depth >= MAX_HEIGHT {
                    return Err(Restart);
                }
                let idx = if forward { 0 } else { count - 1 };
                path[depth] = Step { id: cid, v: cv, idx, count };
                depth += 1;
                let (nid, n, nv) = self.child(child, cv, idx)?;
                (cid, child, cv, level) = (nid, n, nv, level - 1);
            }
        }
    }

    /// The entry of a level-0 node that `mode` selects for `q` (or, with `q = None`, its
    /// last entry for backward modes and its first for forward ones).
    #[inline]
    fn pick(
        &self,
        node: &Node,
        count: usize,
        q: Option<&K::Query>,
        mode: Mode,
    ) -> Attempt<Option<usize>> {
        let Some(q) = q else {
            return Ok((count > 0).then(|| if mode.forward() { 0 } else { count - 1 }));
        };
        Ok(match mode {
            Mode::Le => self.bound_in(node, count, q, true)?.checked_sub(1),
            Mode::Lt => self.bound_in(node, count, q, false)?.checked_sub(1),
            Mode::Gt => Some(self.bound_in(node, count, q, true)?).filter(|&i| i < count),
            Mode::Ge => Some(self.bound_in(node, count, q, false)?).filter(|&i| i < count),
        })
    }

    /// Copies the neighbours of entry `i` that `near` asks for and `node` (of `count`
    /// entries) holds; the caller's validation of `node` then covers them.
    #[inline]
    fn near(&self, node: &Node, count: usize, i: usize, near: Option<&mut Near<K>>) -> Attempt<()> {
        let Some(near) = near else { return Ok(()) };
        let take = |j: usize, snap: &mut K::Snap| {
            let (k, v) = (node.key(j), node.val(j));
            K::snap(&self.keys, k, snap).then_some((k, v)).ok_or(Restart)
        };
        near.next = None;
        near.prev = None;
        near.at = i;
        if near.want_next && i + 1 < count {
            near.next = Some(take(i + 1, &mut near.next_snap)?);
        }
        if near.want_prev && i > 0 {
            near.prev = Some(take(i - 1, &mut near.prev_snap)?);
        }
        Ok(())
    }

    /// Reads entry `i` of `node` (and its key), then validates: `Err(v)` validates `node`
    /// alone against its snapshot `v`, `Ok(reads)` every node read.
    fn finish(
        &self,
        node: &Node,
        i: usize,
        want_key: bool,
        check: Result<&ReadSet, Version>,
        snap: &mut K::Snap,
    ) -> Attempt<(u64, u64)> {
        let (k, val) = (node.key(i), node.val(i));
        if want_key && !K::snap(&self.keys, k, snap) {
            return Err(Restart);
        }
        match check {
            Ok(reads) => self.validate_all(reads)?,
            Err(v) if ok(node.ver.validate(v)) => {}
            Err(_) => return Err(Restart),
        }
        Ok((k, val))
    }

    fn validate_all(&self, reads: &ReadSet) -> Attempt<()> {
        for &(id, v) in reads.iter() {
            let node = self.node(id).ok_or(Restart)?;
            if !ok(node.ver.validate(v)) {
                return Err(Restart);
            }
        }
        Ok(())
    }

    /// Maps `bound` to `leaf`; returns the value it replaced, if any. `InvalidArgument` for a
    /// key over the limit; `PoolFull` if the index's arenas are exhausted.
    pub fn insert(&self, bound: &K::Key, leaf: u64) -> StorageResult<Option<u64>> {
        K::validate(bound)?;
        let q = K::prepare(bound);
        // The bound's stored copy, made once (freed if the bound already exists).
        let mut stored = Some(K::store(&self.keys, bound)?);
        let mut round = 0;
        loop {
            match self.insert_once(&q, &mut stored, leaf) {
                Ok(r) => {
                    if let Some(w) = stored {
                        K::free(&self.keys, w);
                    }
                    return r;
                }
                Err(Restart) => Self::pause(&mut round),
            }
        }
    }

    fn insert_once(
        &self,
        q: &K::Query,
        stored: &mut Option<u64>,
        leaf: u64,
    ) -> Attempt<StorageResult<Option<u64>>> {
        let (mut id, mut node, mut v, mut level) = self.begin()?;
        let mut parent: Option<(u32, Version, usize)> = None;
        loop {
            let count = Self::count(node, level)?;
            if count == FANOUT {
                // Split on the way down: the parent (checked not full on its own turn) takes
                // the new separator.
                // Restart after the split either way; an exhausted arena is the caller's error.
                return match self.split(parent, (id, v), level)? {
                    Ok(()) => Err(Restart),
                    Err(e) => Ok(Err(e)),
                };
            }
            if level > 0 {
                if count == 0 {
                    return Err(Restart);
                }
                let idx = self.route(node, count, q)?;
                let (cid, child, cv) = self.child(node, v, idx)?;
                parent = Some((id, v, idx));
                (id, node, v, level) = (cid, child, cv, level - 1);
                continue;
            }
            let pos = self.bound_in(node, count, q, false)?;
            let exists = pos < count && K::cmp(&self.keys, node.key(pos), q) == Some(Cmp::Equal);
            let TryLock::Acquired(l) = ok(node.ver.try_upgrade(v)) else {
                return Err(Restart);
            };
            if exists {
                let old = node.val(pos);
                node.vals[pos].store(leaf, Ordering::Relaxed);
                ok(node.ver.unlock(l));
                return Ok(Ok(Some(old)));
            }
            for i in (pos..count).rev() {
                node.set(i + 1, node.key(i), node.val(i));
            }
            node.set(pos, stored.take().expect("stored once per insert"), leaf);
            node.meta.store(meta(count + 1, 0), Ordering::Relaxed);
            ok(node.ver.unlock(l));
            self.len.fetch_add(1, Ordering::Relaxed);
            return Ok(Ok(None));
        }
    }

    /// Splits the full node `(id, v)` at `level` whose parent is `parent` (id, snapshot,
    /// child index) or, for the root, the header. `Err(Restart)` if a snapshot is stale;
    /// `Ok(Err(_))` if the arenas are exhausted. Either way the caller restarts.
    fn split(
        &self,
        parent: Option<(u32, Version, usize)>,
        (id, v): (u32, Version),
        level: usize,
    ) -> Attempt<StorageResult<()>> {
        // Lock top-down: the parent (or the header), then the node; never wait.
        let (plock, hlock) = match parent {
            Some((pid, pv, _)) => {
                let p = self.node(pid).ok_or(Restart)?;
                match ok(p.ver.try_upgrade(pv)) {
                    TryLock::Acquired(l) => (Some((p, l)), None),
                    _ => return Err(Restart),
                }
            }
            None => {
                let hv = ok(self.head_ver.read_begin()).ok_or(Restart)?;
                let h = self.head.load(Ordering::Relaxed);
                if h as u32 != id {
                    return Err(Restart);
                }
                match ok(self.head_ver.try_upgrade(hv)) {
                    TryLock::Acquired(l) => (None, Some((h, l))),
                    _ => return Err(Restart),
                }
            }
        };
        let release = |plock: Option<(&Node, Locked)>, hlock: Option<(u64, Locked)>| {
            if let Some((p, l)) = plock {
                ok(p.ver.unlock_unchanged(l));
            }
            if let Some((_, l)) = hlock {
                ok(self.head_ver.unlock_unchanged(l));
            }
        };
        let node = self.node(id).ok_or(Restart)?;
        let nl = match ok(node.ver.try_upgrade(v)) {
            TryLock::Acquired(l) => l,
            _ => {
                release(plock, hlock);
                return Err(Restart);
            }
        };
        // Everything is locked and unchanged since it was read: the node is full (FANOUT),
        // the parent has room.
        let r = (|| -> StorageResult<()> {
            let half = FANOUT / 2;
            let sep =
                if level == 0 { K::copy(&self.keys, node.key(half))? } else { node.key(half) };
            let (sib, (sid, sl)) = match self.alloc_node() {
                Ok(x) => x,
                Err(e) => {
                    if level == 0 {
                        K::free(&self.keys, sep);
                    }
                    return Err(e);
                }
            };
            let new_root = if let Some((h, _)) = &hlock {
                if (h >> 32) as usize >= MAX_HEIGHT {
                    Err(self.too_tall())
                } else {
                    self.alloc_node().map(Some)
                }
            } else {
                Ok(None)
            };
            let new_root = match new_root {
                Ok(r) => r,
                Err(e) => {
                    ok(sib.ver.unlock_obsolete(sl));
                    self.free_node(sid);
                    if level == 0 {
                        K::free(&self.keys, sep);
                    }
                    return Err(e);
                }
            };
            for i in half..FANOUT {
                sib.set(i - half, node.key(i), node.val(i));
            }
            if level > 0 {
                // The separator moved up; keys[0] of an inner node owns nothing (O3).
                sib.keys[0].store(0, Ordering::Relaxed);
            }
            sib.meta.store(meta(FANOUT - half, level), Ordering::Relaxed);
            node.meta.store(meta(half, level), Ordering::Relaxed);
            match (&plock, new_root) {
                (Some((p, _)), _) => {
                    let (_, _, pidx) = parent.expect("locked a parent");
                    let pcount = unmeta(p.meta.load(Ordering::Relaxed)).map_or(0, |m| m.0);
                    for i in (pidx + 1..pcount).rev() {
                        p.set(i + 1, p.key(i), p.val(i));
                    }
                    p.set(pidx + 1, sep, u64::from(sid));
                    p.meta.store(meta(pcount + 1, level + 1), Ordering::Relaxed);
                }
                (None, Some((root, (rid, rl)))) => {
                    root.set(0, 0, u64::from(id));
                    root.set(1, sep, u64::from(sid));
                    root.meta.store(meta(2, level + 1), Ordering::Relaxed);
                    ok(root.ver.unlock(rl));
                    self.head.store(header(rid, level + 2), Ordering::Relaxed);
                }
                (None, None) => unreachable!("a root split allocates a root"),
            }
            ok(sib.ver.unlock(sl));
            Ok(())
        })();
        match r {
            Ok(()) => {
                ok(node.ver.unlock(nl));
                if let Some((p, l)) = plock {
                    ok(p.ver.unlock(l));
                }
                if let Some((_, l)) = hlock {
                    ok(self.head_ver.unlock(l));
                }
                Ok(Ok(()))
            }
            Err(e) => {
                ok(node.ver.unlock_unchanged(nl));
                release(plock, hlock);
                Ok(Err(e))
            }
        }
    }

    /// Removes `bound`; returns its value, or `None` if it is not in the index. A level-0
    /// node left empty is unlinked (O4).
    pub fn remove(&self, bound: &K::Key) -> Option<u64> {
        let q = K::prepare(bound);
        let mut round = 0;
        loop {
            match self.remove_once(&q) {
                Ok(r) => return r,
                Err(Restart) => Self::pause(&mut round),
            }
        }
    }

    fn remove_once(&self, q: &K::Query) -> Attempt<Option<u64>> {
        let (mut id, mut node, mut v, mut level) = self.begin()?;
        let mut path = [Step { id: 0, v: Version::PLACEHOLDER, idx: 0, count: 0 }; MAX_HEIGHT];
        let mut depth = 0;
        while level > 0 {
            let count = Self::count(node, level)?;
            if count == 0 {
                return Err(Restart);
            }
            let idx = self.route(node, count, q)?;
            path[depth] = Step { id, v, idx, count };
            depth += 1;
            let (cid, child, cv) = self.child(node, v, idx)?;
            (id, node, v, level) = (cid, child, cv, level - 1);
        }
        let count = Self::count(node, 0)?;
        let pos = self.bound_in(node, count, q, false)?;
        if pos >= count || K::cmp(&self.keys, node.key(pos), q).ok_or(Restart)? != Cmp::Equal {
            return if ok(node.ver.validate(v)) { Ok(None) } else { Err(Restart) };
        }
        // The lowest ancestor that keeps another child if the node empties (O4).
        let cut = if count == 1 { path[..depth].iter().rposition(|s| s.count > 1) } else { None };
        let Some(j) = cut else {
            // Remove the entry in place.
            let TryLock::Acquired(l) = ok(node.ver.try_upgrade(v)) else {
                return Err(Restart);
            };
            let (k, old) = (node.key(pos), node.val(pos));
            for i in pos + 1..count {
                node.set(i - 1, node.key(i), node.val(i));
            }
            node.meta.store(meta(count - 1, 0), Ordering::Relaxed);
            K::free(&self.keys, k);
            ok(node.ver.unlock(l));
            self.len.fetch_sub(1, Ordering::Relaxed);
            return Ok(Some(old));
        };
        // Unlink the chain path[j+1..] + node from path[j]: lock top-down, all or nothing.
        let mut held: Vec<(&Node, Locked)> = Vec::with_capacity(depth - j + 1);
        let chain = path[j..depth].iter().map(|s| (s.id, s.v)).chain(std::iter::once((id, v)));
        for (nid, nv) in chain {
            let n = self.node(nid).ok_or(Restart);
            let got = n.map(|n| (n, ok(n.ver.try_upgrade(nv))));
            match got {
                Ok((n, TryLock::Acquired(l))) => held.push((n, l)),
                _ => {
                    for (n, l) in held {
                        ok(n.ver.unlock_unchanged(l));
                    }
                    return Err(Restart);
                }
            }
        }
        let (top, rest) = held.split_first_mut().expect("at least the cut node");
        let (p, pidx, pcount) = (top.0, path[j].idx, path[j].count);
        if pidx == 0 {
            // keys[1] becomes keys[0], which owns nothing (O3).
            K::free(&self.keys, p.key(1));
            for i in 1..pcount {
                p.set(i - 1, p.key(i), p.val(i));
            }
            p.keys[0].store(0, Ordering::Relaxed);
        } else {
            K::free(&self.keys, p.key(pidx));
            for i in pidx + 1..pcount {
                p.set(i - 1, p.key(i), p.val(i));
            }
        }
        p.meta.store(meta(pcount - 1, depth - j), Ordering::Relaxed);
        let (k, old) = (node.key(pos), node.val(pos));
        K::free(&self.keys, k);
        let _ = rest;
        let mut held = held.into_iter();
        let (p, pl) = held.next().expect("the cut node");
        let freed: Vec<u32> = path[j + 1..depth].iter().map(|s| s.id).chain([id]).collect();
        for (n, l) in held {
            ok(n.ver.unlock_obsolete(l));
        }
        ok(p.ver.unlock(pl));
        for nid in freed {
            self.free_node(nid);
        }
        self.len.fetch_sub(1, Ordering::Relaxed);
        Ok(Some(old))
    }

    /// Checks O1–O3 on a quiescent index (tests and diagnostics): `Err` names the first
    /// violation.
    pub fn check(&self) -> Result<(), String> {
        let h = self.head.load(Ordering::Acquire);
        let (root, height) = (h as u32, (h >> 32) as usize);
        if height == 0 || height > MAX_HEIGHT {
            return Err(format!("height {height}"));
        }
        let mut n = 0u64;
        self.check_node(root, height - 1, None, None, true, &mut n)?;
        if n != self.len.load(Ordering::Relaxed) {
            return Err(format!("{n} entries, len says {}", self.len()));
        }
        Ok(())
    }

    fn check_node(
        &self,
        id: u32,
        level: usize,
        lo: Option<u64>,
        hi: Option<u64>,
        alone: bool,
        n: &mut u64,
    ) -> Result<(), String> {
        let node = self.node(id).ok_or(format!("node {id} outside the arena"))?;
        let ver = node.ver.load(Ordering::Relaxed);
        if ver & (super::vlock::LOCKED | super::vlock::OBSOLETE) != 0 {
            return Err(format!("node {id} locked or obsolete: {ver:#x}"));
        }
        let (count, l) = unmeta(node.meta.load(Ordering::Relaxed)).ok_or("bad meta")?;
        if l != level {
            return Err(format!("node {id} at level {l}, expected {level}"));
        }
        let snap = |w: u64| {
            let mut s = K::Snap::default();
            K::snap(&self.keys, w, &mut s).then(|| K::owned(w, &s)).ok_or("bad key handle")
        };
        let in_range = |k: &K::Owned| -> bool {
            use std::borrow::Borrow;
            let k: &K::Key = k.borrow();
            let lo_ok = lo.is_none_or(|w| snap(w).map(|b| b.borrow() <= k).unwrap_or(false));
            let hi_ok = hi.is_none_or(|w| snap(w).map(|b| k < b.borrow()).unwrap_or(false));
            lo_ok && hi_ok
        };
        if level == 0 {
            if count == 0 && !alone {
                return Err(format!("empty level-0 node {id} with siblings"));
            }
            let mut prev: Option<K::Owned> = None;
            for i in 0..count {
                let k = snap(node.key(i))?;
                if prev.as_ref().is_some_and(|p| *p >= k) {
                    return Err(format!("node {id}: entries not ascending at {i}"));
                }
                if !in_range(&k) {
                    return Err(format!("node {id}: entry {k:?} outside its range"));
                }
                prev = Some(k);
            }
            *n += count as u64;
            return Ok(());
        }
        if count == 0 {
            return Err(format!("inner node {id} without children"));
        }
        for i in 0..count {
            let clo = if i == 0 { lo } else { Some(node.key(i)) };
            if i > 0 && !in_range(&snap(node.key(i))?) {
                return Err(format!("node {id}: separator {i} outside its range"));
            }
            let chi = if i + 1 < count { Some(node.key(i + 1)) } else { hi };
            let child = u32::try_from(node.val(i)).map_err(|_| "child id")?;
            self.check_node(child, level - 1, clo, chi, alone && count == 1, n)?;
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound::{Excluded, Unbounded};
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Barrier};

    use ferrite_pmem::SplitMix64;
    use ferrite_pmem::internals::testing::test_seed;

    use super::*;

    /// The answers of the model for every query the index offers.
    fn model_le<K: Ord + Clone>(m: &BTreeMap<K, u64>, k: &K) -> Option<(K, u64)> {
        m.range(..=k.clone()).next_back().map(|(k, v)| (k.clone(), *v))
    }
    fn model_lt<K: Ord + Clone>(m: &BTreeMap<K, u64>, k: &K) -> Option<(K, u64)> {
        m.range(..k.clone()).next_back().map(|(k, v)| (k.clone(), *v))
    }
    fn model_gt<K: Ord + Clone>(m: &BTreeMap<K, u64>, k: &K) -> Option<(K, u64)> {
        m.range((Excluded(k.clone()), Unbounded)).next().map(|(k, v)| (k.clone(), *v))
    }
    fn model_ge<K: Ord + Clone>(m: &BTreeMap<K, u64>, k: &K) -> Option<(K, u64)> {
        m.range(k.clone()..).next().map(|(k, v)| (k.clone(), *v))
    }

    /// Every query of the index against the model at one key.
    fn queries_agree<K: IndexKey>(
        idx: &OlcIndex<K>,
        m: &BTreeMap<K::Owned, u64>,
        k: &K::Owned,
        seed: u64,
    ) {
        use std::borrow::Borrow;
        let kb: &K::Key = k.borrow();
        let le = model_le(m, k);
        assert_eq!(idx.lookup(kb), le.as_ref().map(|e| e.1), "lookup {k:?} (seed {seed:#x})");
        assert_eq!(idx.lookup_with_bound(kb), le, "lookup_with_bound {k:?} (seed {seed:#x})");
        assert_eq!(idx.predecessor(kb), model_lt(m, k), "predecessor {k:?} (seed {seed:#x})");
        assert_eq!(idx.successor(kb), model_gt(m, k), "successor {k:?} (seed {seed:#x})");
        assert_eq!(idx.ceiling(kb), model_ge(m, k), "ceiling {k:?} (seed {seed:#x})");
        // One descent's route and neighbours: each neighbour it returns is the model's.
        let r = idx.route_near(kb, true, true);
        assert_eq!(r.is_some(), le.is_some(), "route_near {k:?} (seed {seed:#x})");
        if let (Some(r), Some((b, leaf))) = (r, le) {
            assert_eq!((&r.bound, r.leaf), (&b, leaf), "route_near {k:?} (seed {seed:#x})");
            assert!(idx.still_valid(&r.pin), "route_near's pin {k:?} (seed {seed:#x})");
            if let Some(n) = r.next {
                assert_eq!(Some(n), model_gt(m, &b), "route_near next {k:?} (seed {seed:#x})");
            }
            if let Some(p) = r.prev {
                assert_eq!(Some(p), model_lt(m, &b), "route_near prev {k:?} (seed {seed:#x})");
            }
            // The level-0 cursor: a step either way, where the node holds it, is the model's
            // neighbour, with the neighbours of its own.
            for forward in [true, false] {
                let Some(s) = idx.step(&r.pin, r.at, forward, true, true) else { continue };
                let want = if forward { model_gt(m, &b) } else { model_lt(m, &b) };
                let got = Some((s.bound.clone(), s.leaf));
                assert_eq!(got, want, "step {forward} from {k:?} (seed {seed:#x})");
                assert_eq!(s.pin, r.pin, "a step keeps the pin (seed {seed:#x})");
                if let Some(n) = s.next {
                    assert_eq!(Some(n), model_gt(m, &s.bound), "step's next (seed {seed:#x})");
                }
                if let Some(p) = s.prev {
                    assert_eq!(Some(p), model_lt(m, &s.bound), "step's prev (seed {seed:#x})");
                }
            }
        }
    }

    /// Checks the structure and walks the whole index both ways through the neighbour
    /// queries: the walk must be the model's key order.
    fn full_agreement<K: IndexKey>(idx: &OlcIndex<K>, m: &BTreeMap<K::Owned, u64>, seed: u64) {
        use std::borrow::Borrow;
        idx.check().unwrap_or_else(|e| panic!("{e} (seed {seed:#x})"));
        assert_eq!(idx.len(), m.len(), "len (seed {seed:#x})");
        let mut fwd = Vec::new();
        let mut cur = idx.first();
        while let Some((k, v)) = cur {
            cur = idx.successor(k.borrow());
            fwd.push((k, v));
        }
        let want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(fwd, want, "forward walk (seed {seed:#x})");
        let mut back = Vec::new();
        let mut cur = idx.last();
        while let Some((k, v)) = cur {
            cur = idx.predecessor(k.borrow());
            back.push((k, v));
        }
        back.reverse();
        assert_eq!(back, want, "backward walk (seed {seed:#x})");
    }

    /// Random inserts, updates, removes and queries against a `BTreeMap`; `key` draws a key.
    /// Removal bursts empty whole level-0 nodes so unlinking (O4) and key reuse run often.
    fn model_run<K: IndexKey>(
        idx: &OlcIndex<K>,
        m: &mut BTreeMap<K::Owned, u64>,
        seed: u64,
        ops: usize,
        mut key: impl FnMut(&mut SplitMix64) -> K::Owned,
    ) {
        use std::borrow::Borrow;
        let mut rng = SplitMix64::new(seed);
        for op in 0..ops {
            let k = key(&mut rng);
            let kb: &K::Key = k.borrow();
            match rng.next_u64() % 10 {
                0..=3 => {
                    let v = rng.next_u64() >> 1;
                    let got = idx.insert(kb, v).expect("insert");
                    assert_eq!(got, m.insert(k.clone(), v), "insert {k:?} (seed {seed:#x})");
                }
                4..=5 => {
                    assert_eq!(
                        idx.remove(kb),
                        m.remove::<K::Owned>(&k),
                        "remove {k:?} (seed {seed:#x})"
                    );
                }
                6 => {
                    // Remove a run of present keys from k upwards.
                    let run: Vec<_> =
                        m.range::<K::Owned, _>(k.clone()..).take(80).map(|e| e.0.clone()).collect();
                    for r in run {
                        assert_eq!(
                            idx.remove(r.borrow()),
                            m.remove::<K::Owned>(&r),
                            "(seed {seed:#x})"
                        );
                    }
                }
                _ => queries_agree(idx, m, &k, seed),
            }
            if op % 2000 == 0 {
                full_agreement(idx, m, seed);
            }
        }
        full_agreement(idx, m, seed);
    }

    fn u64_key(space: u64) -> impl FnMut(&mut SplitMix64) -> u64 {
        move |rng| rng.next_u64() % space
    }

    /// Byte keys over a two-letter alphabet (shared prefixes and prefix pairs are common),
    /// mostly short, some long, a few at the limit.
    fn byte_key(rng: &mut SplitMix64) -> Box<[u8]> {
        let len = match rng.next_u64() % 64 {
            0 => MAX_KEY_LEN - (rng.next_u64() % 2) as usize,
            1..=4 => 60 + (rng.next_u64() % 1000) as usize,
            _ => (rng.next_u64() % 12) as usize,
        };
        let fill = b'a' + (rng.next_u64() % 2) as u8;
        (0..len).map(|i| if i < 12 { b'a' + (rng.next_u64() % 2) as u8 } else { fill }).collect()
    }

    #[test]
    fn u64_bounds_agree_with_a_btreemap() {
        let seed = test_seed();
        println!("seed {seed:#x}");
        let idx = OlcIndex::<U64Key>::new();
        let mut m = BTreeMap::new();
        full_agreement(&idx, &m, seed);
        model_run(&idx, &mut m, seed, 60_000, u64_key(20_000));
        // Drain everything: the index ends as one empty level-0 node reached through the
        // remaining single-child chain, and takes inserts again.
        let keys: Vec<u64> = m.keys().copied().collect();
        for k in keys {
            assert_eq!(idx.remove(&k), m.remove(&k));
        }
        full_agreement(&idx, &m, seed);
        assert_eq!(idx.lookup(&5), None);
        model_run(&idx, &mut m, seed ^ 1, 5_000, u64_key(1_000));
    }

    #[test]
    fn byte_bounds_agree_with_a_btreemap() {
        let seed = test_seed();
        println!("seed {seed:#x}");
        let idx = OlcIndex::<ByteKey>::new();
        let mut m = BTreeMap::new();
        model_run(&idx, &mut m, seed, 30_000, byte_key);
        // The key words of removed bounds are reused, not leaked: after removing everything
        // and inserting the same amount again, the key arena has not grown by more than the
        // free lists' rounding.
        let keys: Vec<Box<[u8]>> = m.keys().cloned().collect();
        for k in &keys {
            assert!(idx.remove(k).is_some());
            m.remove(k);
        }
        let before = idx.keys.lock().next;
        for (i, k) in keys.iter().enumerate() {
            idx.insert(k, i as u64).unwrap();
            m.insert(k.clone(), i as u64);
        }
        assert_eq!(idx.keys.lock().next, before, "freed key words are reused (seed {seed:#x})");
        full_agreement(&idx, &m, seed);
    }

    #[test]
    fn bulk_load_builds_full_nodes_then_takes_every_operation() {
        let seed = test_seed();
        println!("seed {seed:#x}");
        for n in [0u64, 1, 63, 64, 65, 64 * 64, 64 * 64 + 1, 100_000] {
            let m: BTreeMap<u64, u64> = (0..n).map(|i| (i * 7 + 3, i)).collect();
            let idx = OlcIndex::<U64Key>::bulk_load(m.clone()).unwrap();
            full_agreement(&idx, &m, seed);
            // Full nodes: the fewest nodes any tree of this fan-out can have at level 0.
            let nodes = u64::from(idx.node_alloc.lock().unwrap().next);
            let leaves = n.div_ceil(FANOUT as u64).max(1);
            assert!(nodes <= leaves + leaves.div_ceil(FANOUT as u64 - 1) + 1, "{n}: {nodes}");
            let mut m = m;
            model_run(&idx, &mut m, seed ^ n, 4_000, u64_key(n * 7 + 100));
        }
        let m: BTreeMap<Box<[u8]>, u64> = {
            let mut rng = SplitMix64::new(seed);
            (0..5_000).map(|i| (byte_key(&mut rng), i)).collect()
        };
        let idx = OlcIndex::<ByteKey>::bulk_load(m.clone()).unwrap();
        full_agreement(&idx, &m, seed);
        let mut m = m;
        model_run(&idx, &mut m, seed, 10_000, byte_key);
    }

    #[test]
    fn bulk_load_refuses_bad_input_with_errors() {
        let unsorted = OlcIndex::<U64Key>::bulk_load([(5, 1), (3, 2)]);
        assert!(matches!(unsorted, Err(StorageError::InvalidArgument(_))));
        let dup = OlcIndex::<U64Key>::bulk_load([(5, 1), (5, 2)]);
        assert!(matches!(dup, Err(StorageError::InvalidArgument(_))));
        let long: Box<[u8]> = vec![1u8; MAX_KEY_LEN + 1].into();
        let too_long = OlcIndex::<ByteKey>::bulk_load([(long.clone(), 1)]);
        assert!(matches!(too_long, Err(StorageError::InvalidArgument(_))));
        let idx = OlcIndex::<ByteKey>::new();
        assert!(matches!(idx.insert(&long, 1), Err(StorageError::InvalidArgument(_))));
        assert_eq!(idx.len(), 0);
        idx.check().unwrap();
    }

    /// The reclamation argument of the module docs, step by step: a reader that read a slot
    /// naming a byte key, whose words are then freed and reused for another key, compares
    /// against the new bytes, and its validation of the node must fail.
    #[test]
    fn a_reader_of_a_freed_and_reused_separator_fails_validation() {
        let idx = OlcIndex::<ByteKey>::new();
        idx.insert(b"apple-pie", 1).unwrap();
        idx.insert(b"banana-split", 2).unwrap();
        let h = idx.head.load(Ordering::Acquire);
        let root = idx.node(h as u32).unwrap();
        // The reader: snapshot, then the slot of "banana-split".
        let v = ok(root.ver.read_begin()).unwrap();
        let handle = root.key(1);
        let q = ByteQuery::new(b"banana-split");
        assert_eq!(idx.keys.cmp(handle, &q), Some(Cmp::Equal));
        // Writers: remove it (its words are freed) and insert a key of the same word count,
        // which takes the same words from the free list.
        assert_eq!(idx.remove(b"banana-split"), Some(2));
        idx.insert(b"cherry-tart!", 3).unwrap();
        let reused = root.key(1);
        assert_eq!(reused >> LEN_BITS, handle >> LEN_BITS, "the words were reused");
        // The stale handle now names other bytes: garbage, which validation refuses.
        assert_ne!(idx.keys.cmp(handle, &q), Some(Cmp::Equal));
        assert!(!ok(root.ver.validate(v)), "validation must catch the reuse");
        // A fresh read sees the new state.
        assert_eq!(idx.lookup(b"banana-split"), Some(1));
        assert_eq!(idx.lookup(b"cherry-tart!"), Some(3));
    }

    /// A pin is invalidated by every change that could route its key elsewhere: a bound
    /// inserted between the answer and the key, and the removal of the answer; changes
    /// elsewhere leave it valid. The second half builds the rare case where the answer comes
    /// from a neighbouring node (the key's own node holds only greater bounds).
    #[test]
    fn pins_fail_exactly_when_the_route_of_their_key_may_have_changed() {
        let idx =
            OlcIndex::<U64Key>::bulk_load((0..(2 * FANOUT as u64)).map(|i| (i * 10, i))).unwrap();
        let (leaf, pin) = idx.lookup_pinned(&25).unwrap();
        assert_eq!(leaf, 2);
        assert!(matches!(pin, Pin::One(..)));
        assert!(idx.still_valid(&pin));
        let r = idx.route_near(&25, true, true).unwrap();
        assert_eq!((r.bound, r.leaf, r.at), (20, 2, 2));
        // A bound in the other level-0 node: the pin and the level-0 cursor hold.
        idx.insert(&(FANOUT as u64 * 10 + 55), 99).unwrap();
        assert!(idx.still_valid(&pin));
        let s = idx.step(&r.pin, r.at, true, true, false).unwrap();
        assert_eq!((s.bound, s.leaf, s.next, s.at), (30, 3, Some((40, 4)), 3));
        // The node's edges: the cursor stops there (the caller descends).
        let edge = idx.route_near(&0, true, true).unwrap();
        assert!(idx.step(&edge.pin, edge.at, false, true, true).is_none());
        let last = (FANOUT as u64 - 1) * 10;
        let edge = idx.route_near(&last, true, true).unwrap();
        assert_eq!(edge.leaf, FANOUT as u64 - 1);
        assert!(idx.step(&edge.pin, edge.at, true, true, true).is_none());
        // A bound in (20, 25]: the key now routes elsewhere, and the cursor of the node is
        // refused (a step after it would skip the new entry).
        idx.insert(&23, 98).unwrap();
        assert!(!idx.still_valid(&pin));
        assert!(idx.step(&r.pin, r.at, true, true, false).is_none());
        let (leaf, pin) = idx.lookup_pinned(&25).unwrap();
        assert_eq!(leaf, 98);
        assert_eq!(idx.remove(&23), Some(98));
        assert!(!idx.still_valid(&pin), "removing the answer moves the pin");
        // The neighbour case: empty the front of the second node, so a key above its
        // separator but below its first bound finds its answer in the first node.
        let sep = FANOUT as u64 * 10;
        for k in (sep..sep + 50).step_by(10) {
            idx.remove(&k).unwrap();
        }
        idx.check().unwrap();
        let (leaf, pin) = idx.lookup_pinned(&(sep + 20)).unwrap();
        assert_eq!(leaf, FANOUT as u64 - 1);
        assert!(matches!(pin, Pin::Many(..)), "{pin:?}");
        assert!(idx.still_valid(&pin));
        idx.insert(&(sep + 15), 97).unwrap();
        assert!(!idx.still_valid(&pin));
        assert_eq!(idx.lookup(&(sep + 20)), Some(97));
    }

    /// A removed node is freed and its id reused; a snapshot of its old incarnation never
    /// validates against the new one (VL4).
    #[test]
    fn a_reused_node_never_validates_an_old_snapshot() {
        let idx = OlcIndex::<U64Key>::bulk_load((0..(2 * FANOUT as u64)).map(|i| (i, i))).unwrap();
        idx.check().unwrap();
        // The second level-0 node: bounds FANOUT..2·FANOUT.
        let h = idx.head.load(Ordering::Acquire);
        let root = idx.node(h as u32).unwrap();
        let second = root.val(1) as u32;
        let v = ok(idx.node(second).unwrap().ver.read_begin()).unwrap();
        for k in FANOUT as u64..2 * FANOUT as u64 {
            assert_eq!(idx.remove(&k), Some(k));
        }
        idx.check().unwrap();
        assert_eq!(idx.node_alloc.lock().unwrap().free, vec![second]);
        // Splitting the first node takes the freed id.
        for k in 1000..1001 {
            idx.insert(&k, k).unwrap();
        }
        assert!(idx.node_alloc.lock().unwrap().free.is_empty());
        let node = idx.node(second).unwrap();
        assert!(ok(node.ver.read_begin()).is_some(), "revived");
        assert!(!ok(node.ver.validate(v)), "the old snapshot must fail");
        assert!(node.ver.load(Ordering::Relaxed) > v.raw());
        idx.check().unwrap();
    }

    #[test]
    fn memory_stays_a_small_share_of_the_data() {
        // 100 000 leaves of 1 KiB (the v1 leaf is ~1.1 KiB): the index must stay well under
        // the 3 % goal (bulk-loaded full nodes ≈ 17 bytes per leaf plus fixed directories).
        let n = 100_000u64;
        let idx = OlcIndex::<U64Key>::bulk_load((0..n).map(|i| (i * 64, i))).unwrap();
        let bytes = idx.memory_bytes();
        println!("inner index: {bytes} bytes for {n} leaves ({} per leaf)", bytes / n);
        assert!(bytes < n * 1024 * 3 / 100, "{bytes} bytes");
        assert!(bytes > n * 16, "counts at least the entries: {bytes}");
    }

    /// Stable bounds that no writer touches: every lookup of one of them (and of any key
    /// between it and the next churned key) must return its leaf, whatever the writers do.
    const STABLE_STEP: u64 = 1_000;

    fn leaf_of(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8
    }

    /// Writers insert and remove disjoint key sets (their own residue classes between the
    /// stable bounds) in rounds; readers check stable lookups and that every neighbour answer
    /// is a real entry. Each writer's results are checked against its own model (its keys are
    /// its own, so every result is determined); the final content equals the union of the
    /// models. The threads only meet at a barrier; the amount of work is fixed.
    fn concurrent_run(writers: u64, readers: u64, seed: u64) {
        const STABLES: u64 = 300;
        const ROUNDS: usize = 6;
        const PER_ROUND: usize = 4_000;
        let idx = Arc::new(
            OlcIndex::<U64Key>::bulk_load(
                (0..STABLES).map(|i| (i * STABLE_STEP, leaf_of(i * STABLE_STEP))),
            )
            .unwrap(),
        );
        let barrier = Arc::new(Barrier::new((writers + readers) as usize));
        let mut handles = Vec::new();
        for w in 0..writers {
            let (idx, barrier) = (Arc::clone(&idx), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                let mut rng = SplitMix64::new(seed ^ (w + 1));
                let mut mine = BTreeMap::new();
                barrier.wait();
                for _ in 0..ROUNDS {
                    for _ in 0..PER_ROUND {
                        // A key of writer w: never a stable bound, never another writer's.
                        let slot = rng.next_u64() % (STABLES * (STABLE_STEP / 8));
                        let k = slot / (STABLE_STEP / 8) * STABLE_STEP
                            + (slot % (STABLE_STEP / 8)) * 8
                            + 1
                            + w;
                        if rng.next_u64().is_multiple_of(3) {
                            assert_eq!(idx.remove(&k), mine.remove(&k), "seed {seed:#x}");
                        } else {
                            let got = idx.insert(&k, leaf_of(k)).unwrap();
                            assert_eq!(got, mine.insert(k, leaf_of(k)), "seed {seed:#x}");
                        }
                    }
                    // Empty whole stretches now and then: unlinks and node reuse.
                    let from = (rng.next_u64() % STABLES) * STABLE_STEP;
                    let gone: Vec<u64> =
                        mine.range(from..from + 20 * STABLE_STEP).map(|e| *e.0).collect();
                    for k in gone {
                        assert_eq!(idx.remove(&k), mine.remove(&k), "seed {seed:#x}");
                    }
                }
                mine
            }));
        }
        for r in 0..readers {
            let (idx, barrier) = (Arc::clone(&idx), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                let mut rng = SplitMix64::new(seed ^ (r + 1) << 32);
                barrier.wait();
                for _ in 0..ROUNDS * PER_ROUND {
                    let s = (rng.next_u64() % STABLES) * STABLE_STEP;
                    assert_eq!(idx.lookup(&s), Some(leaf_of(s)), "lookup {s} (seed {seed:#x})");
                    assert_eq!(idx.lookup_with_bound(&s), Some((s, leaf_of(s))), "seed {seed:#x}");
                    // A neighbour is a real entry, in the right place.
                    if let Some((k, v)) = idx.successor(&s) {
                        assert!(k > s && k <= s + STABLE_STEP && v == leaf_of(k), "{s}: {k}");
                    }
                    if let Some((k, v)) = idx.predecessor(&s) {
                        assert!(k < s && k + STABLE_STEP >= s && v == leaf_of(k), "{s}: {k}");
                    }
                }
                BTreeMap::new()
            }));
        }
        let mut model: BTreeMap<u64, u64> =
            (0..STABLES).map(|i| (i * STABLE_STEP, leaf_of(i * STABLE_STEP))).collect();
        for h in handles {
            model.extend(h.join().expect("a thread failed"));
        }
        full_agreement(&idx, &model, seed);
    }

    #[test]
    fn two_writers_and_two_readers_agree_with_the_model() {
        let seed = test_seed();
        println!("seed {seed:#x}");
        concurrent_run(2, 2, seed);
    }

    #[test]
    fn four_writers_agree_with_the_model() {
        let seed = test_seed();
        println!("seed {seed:#x}");
        concurrent_run(4, 0, seed);
    }

    /// Byte keys under concurrency: writers churn keys of the same lengths as the stable
    /// ones, so freed key words are reused all the time while readers compare against them.
    #[test]
    fn byte_key_readers_survive_key_word_reuse() {
        let seed = test_seed();
        println!("seed {seed:#x}");
        const STABLES: u64 = 200;
        const OPS: usize = 20_000;
        let stable = |i: u64| format!("key-{:06}-", i * 10).into_bytes();
        let idx = Arc::new(
            OlcIndex::<ByteKey>::bulk_load((0..STABLES).map(|i| (stable(i).into_boxed_slice(), i)))
                .unwrap(),
        );
        let barrier = Arc::new(Barrier::new(4));
        let mut handles = Vec::new();
        for w in 0..2u64 {
            let (idx, barrier) = (Arc::clone(&idx), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                let mut rng = SplitMix64::new(seed ^ (w + 1));
                let mut mine: BTreeMap<Box<[u8]>, u64> = BTreeMap::new();
                barrier.wait();
                for _ in 0..OPS {
                    let i = rng.next_u64() % STABLES;
                    let k: Box<[u8]> =
                        format!("key-{:06}-", i * 10 + 1 + w + 2 * (rng.next_u64() % 4))
                            .into_bytes()
                            .into();
                    if rng.next_u64().is_multiple_of(2) {
                        assert_eq!(idx.remove(&k), mine.remove(&k), "seed {seed:#x}");
                    } else {
                        let got = idx.insert(&k, 1_000_000 + i).unwrap();
                        assert_eq!(got, mine.insert(k, 1_000_000 + i), "seed {seed:#x}");
                    }
                }
                mine
            }));
        }
        for r in 0..2u64 {
            let (idx, barrier) = (Arc::clone(&idx), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                let mut rng = SplitMix64::new(seed ^ (r + 7) << 40);
                barrier.wait();
                for _ in 0..OPS {
                    let i = rng.next_u64() % STABLES;
                    let s = stable(i);
                    assert_eq!(idx.lookup(&s), Some(i), "seed {seed:#x}");
                    let (b, v) = idx.lookup_with_bound(&s).unwrap();
                    assert_eq!((&*b, v), (&s[..], i), "seed {seed:#x}");
                }
                BTreeMap::new()
            }));
        }
        let mut model: BTreeMap<Box<[u8]>, u64> =
            (0..STABLES).map(|i| (stable(i).into_boxed_slice(), i)).collect();
        for h in handles {
            model.extend(h.join().expect("a thread failed"));
        }
        full_agreement(&idx, &model, seed);
    }

    /// A miniature tree for the leaf-lock protocol of the design doc, on lock words in a
    /// (simulated) pool through `PmWord`: "leaves" are sorted arrays of [`MINI_CAP`] pairs in
    /// the pool (`lock, count, pairs`), routed by an [`OlcIndex`]. Writers lock the leaf, then
    /// check their pin; a full leaf is split under its lock (the new leaf is written, its lock
    /// word 0, before the index publishes it; the old leaf shrinks and unlocks after).
    /// Readers snapshot the leaf, check the pin, read, validate. Persisting is left out: its
    /// order is the tree's P-FPT rules; this checks visibility and exclusion.
    struct Mini {
        set: ferrite_pmem::PoolSet,
        idx: OlcIndex<U64Key>,
        next: AtomicU64,
        end: u64,
    }

    const MINI_CAP: u64 = 4;
    const MINI_LEAF: u64 = 128;

    fn mini_value(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
    }

    impl Mini {
        fn new() -> Self {
            use ferrite_pmem::{Options, PoolSet};
            let set = PoolSet::create_sim(&Options::default().segment_size(4 << 20)).unwrap();
            let seg = set.segments()[0];
            let m = Mini {
                set,
                idx: OlcIndex::new(),
                next: AtomicU64::new(seg.data_offset),
                end: seg.data_offset + seg.data_len,
            };
            m.idx.insert(&0, m.alloc_leaf()).unwrap();
            m
        }

        fn word(&self, off: u64) -> crate::fptree::vlock::PmWord<'_> {
            crate::fptree::vlock::PmWord::new(&self.set, off)
        }

        fn alloc_leaf(&self) -> u64 {
            let off = self.next.fetch_add(MINI_LEAF, Ordering::Relaxed);
            assert!(off + MINI_LEAF <= self.end, "test pool too small");
            self.set.store_u64(off, 0, Ordering::Relaxed).unwrap();
            self.set.store_u64(off + 8, 0, Ordering::Relaxed).unwrap();
            off
        }

        fn ld(&self, off: u64) -> u64 {
            self.set.load_u64(off, Ordering::Relaxed).unwrap()
        }

        fn st(&self, off: u64, v: u64) {
            self.set.store_u64(off, v, Ordering::Relaxed).unwrap();
        }

        fn pairs(&self, leaf: u64) -> Vec<(u64, u64)> {
            let n = self.ld(leaf + 8).min(MINI_CAP);
            (0..n).map(|i| (self.ld(leaf + 16 + 16 * i), self.ld(leaf + 24 + 16 * i))).collect()
        }

        fn put_pairs(&self, leaf: u64, pairs: &[(u64, u64)]) {
            for (i, p) in pairs.iter().enumerate() {
                self.st(leaf + 16 + 16 * i as u64, p.0);
                self.st(leaf + 24 + 16 * i as u64, p.1);
            }
            self.st(leaf + 8, pairs.len() as u64);
        }

        /// Inserts (`Some`) or removes (`None`) `k`; returns the old value.
        fn write(&self, k: u64, v: Option<u64>) -> Option<u64> {
            loop {
                let (leaf, pin) = self.idx.lookup_pinned(&k).unwrap();
                let w = self.word(leaf);
                let Some(l) = w.lock().unwrap() else { continue };
                if !self.idx.still_valid(&pin) {
                    w.unlock_unchanged(l).unwrap();
                    continue;
                }
                let pairs = self.pairs(leaf);
                let pos = pairs.partition_point(|p| p.0 < k);
                let found = pairs.get(pos).filter(|p| p.0 == k).map(|p| p.1);
                let mut new = pairs.clone();
                match (found, v) {
                    (Some(_), Some(v)) => new[pos].1 = v,
                    (Some(_), None) => {
                        new.remove(pos);
                    }
                    (None, Some(v)) if (pairs.len() as u64) < MINI_CAP => new.insert(pos, (k, v)),
                    (None, Some(_)) => {
                        let half = pairs.len() / 2;
                        let nl = self.alloc_leaf();
                        self.put_pairs(nl, &pairs[half..]);
                        self.idx.insert(&pairs[half].0, nl).unwrap();
                        self.st(leaf + 8, half as u64);
                        w.unlock(l).unwrap();
                        continue;
                    }
                    (None, None) => {}
                }
                self.put_pairs(leaf, &new);
                w.unlock(l).unwrap();
                return found;
            }
        }

        /// The reader's steps: the leaf and pin, then the leaf's snapshot (`None`: retry).
        fn read_begin(&self, k: u64) -> Option<(u64, Pin, Version)> {
            let (leaf, pin) = self.idx.lookup_pinned(&k).unwrap();
            let v = self.word(leaf).read_begin().unwrap()?;
            Some((leaf, pin, v))
        }

        /// The rest of a read: check the pin, read (garbage until validated: the count is
        /// clamped, offsets stay in the leaf), validate.
        fn read_finish(&self, k: u64, (leaf, pin, v): (u64, Pin, Version)) -> Option<Option<u64>> {
            if !self.idx.still_valid(&pin) {
                return None;
            }
            let got = self.pairs(leaf).iter().find(|p| p.0 == k).map(|p| p.1);
            self.word(leaf).validate(v).unwrap().then_some(got)
        }

        fn read(&self, k: u64) -> Option<u64> {
            loop {
                if let Some(r) = self.read_begin(k).and_then(|b| self.read_finish(k, b)) {
                    return r;
                }
            }
        }
    }

    /// The interleaving the pin exists for, step by step: a reader found the leaf of a key,
    /// then the leaf split (the key moved to the new leaf) and unlocked before the reader took
    /// its snapshot. The snapshot and the leaf's validation succeed; only the pin catches
    /// that the leaf no longer holds the key. (Without the pin check this reads "absent".)
    #[test]
    fn a_pin_catches_a_split_between_the_index_lookup_and_the_leaf_snapshot() {
        let m = Mini::new();
        for k in [10, 20, 30, 40] {
            m.write(k, Some(mini_value(k)));
        }
        let (leaf, pin) = m.idx.lookup_pinned(&40).unwrap();
        m.write(35, Some(mini_value(35))); // splits: 30 and 40 move to a new leaf
        let v = m.word(leaf).read_begin().unwrap().unwrap();
        assert!(!m.pairs(leaf).iter().any(|p| p.0 == 40), "the key left the leaf");
        assert!(m.word(leaf).validate(v).unwrap(), "the leaf itself is consistent");
        assert_eq!(m.read_finish(40, (leaf, pin, v)), None, "the pin must fail");
        assert_eq!(m.read(40), Some(mini_value(40)));
    }

    /// The protocol under threads: readers of keys that never change must always find them,
    /// although the leaves holding them split under their feet; writers' results follow
    /// their own models; the final leaves, walked in index order, hold exactly the model.
    #[test]
    fn leaf_coupling_with_pm_lock_words_serves_readers_during_splits() {
        const KEYS: u64 = 1_500; // per class: stable (k % 3 == 0) and one per writer
        let seed = test_seed();
        println!("seed {seed:#x}");
        let m = Arc::new(Mini::new());
        let mut rng = SplitMix64::new(seed);
        let mut stable: Vec<u64> = (0..KEYS).map(|i| 3 * i).collect();
        for i in (1..stable.len()).rev() {
            stable.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for &k in &stable {
            assert_eq!(m.write(k, Some(mini_value(k))), None);
        }
        let barrier = Arc::new(Barrier::new(4));
        let mut handles = Vec::new();
        for wr in 1..=2u64 {
            let (m, barrier) = (Arc::clone(&m), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                let mut rng = SplitMix64::new(seed ^ wr);
                let mut mine = BTreeMap::new();
                barrier.wait();
                for _ in 0..10 * KEYS {
                    let k = 3 * (rng.next_u64() % KEYS) + wr;
                    if rng.next_u64().is_multiple_of(4) {
                        assert_eq!(m.write(k, None), mine.remove(&k), "seed {seed:#x}");
                    } else {
                        let old = m.write(k, Some(mini_value(k)));
                        assert_eq!(old, mine.insert(k, mini_value(k)), "seed {seed:#x}");
                    }
                }
                mine
            }));
        }
        for r in 0..2u64 {
            let (m, barrier) = (Arc::clone(&m), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                let mut rng = SplitMix64::new(seed ^ (r + 100));
                barrier.wait();
                for _ in 0..10 * KEYS {
                    let k = rng.next_u64() % (3 * KEYS);
                    let got = m.read(k);
                    if k.is_multiple_of(3) {
                        assert_eq!(got, Some(mini_value(k)), "stable key {k} (seed {seed:#x})");
                    } else {
                        let ok = got.is_none() || got == Some(mini_value(k));
                        assert!(ok, "{k} (seed {seed:#x})");
                    }
                }
                BTreeMap::new()
            }));
        }
        let mut model: BTreeMap<u64, u64> = stable.iter().map(|&k| (k, mini_value(k))).collect();
        for h in handles {
            model.extend(h.join().expect("a thread failed"));
        }
        for k in 0..3 * KEYS {
            assert_eq!(m.read(k), model.get(&k).copied(), "{k} (seed {seed:#x})");
        }
        let mut all = Vec::new();
        let mut cur = m.idx.first();
        while let Some((b, leaf)) = cur {
            all.extend(m.pairs(leaf));
            assert_eq!(m.ld(leaf) & 1, 0, "no leaf is left locked");
            cur = m.idx.successor(&b);
        }
        assert_eq!(all, model.into_iter().collect::<Vec<_>>(), "seed {seed:#x}");
        m.idx.check().unwrap();
    }

    /// Restart-path, lookup and insert costs at 50 K, 500 K and 1 M leaves, lookups beside a
    /// `BTreeMap` of the same bounds (release build; a rough figure, not a benchmark):
    /// `cargo test -p ferrite --release --lib olc::tests::measure -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn measure() {
        // About the leaves of 1 M and 10 M keys (≈ 20 keys per leaf), and 1 M leaves.
        for n in [50_000u64, 500_000, 1_000_000] {
            measure_at(n);
        }
    }

    fn measure_at(n: u64) {
        let t = std::time::Instant::now();
        let idx = OlcIndex::<U64Key>::bulk_load((0..n).map(|i| (i << 10, i))).unwrap();
        let load = t.elapsed();
        let mut rng = SplitMix64::new(1);
        let probes: Vec<u64> = (0..n.max(500_000)).map(|_| rng.next_u64() % (n << 10)).collect();
        let t = std::time::Instant::now();
        let mut sum = 0u64;
        for p in &probes {
            sum = sum.wrapping_add(idx.lookup(p).unwrap());
        }
        let look = t.elapsed();
        let model: BTreeMap<u64, u64> = (0..n).map(|i| (i << 10, i)).collect();
        let t = std::time::Instant::now();
        for p in &probes {
            sum = sum.wrapping_add(*model.range(..=p).next_back().unwrap().1);
        }
        let btree = t.elapsed();
        let t = std::time::Instant::now();
        let fresh = OlcIndex::<U64Key>::new();
        for p in &probes {
            fresh.insert(p, 1).unwrap();
        }
        let ins = t.elapsed();
        println!(
            "{n} leaves, fan-out {FANOUT}: bulk_load {:.1} ns/leaf, lookup {:.1} ns (BTreeMap range {:.1} ns), \
             insert {:.1} ns, {} bytes ({:.1} per leaf), checksum {sum}",
            load.as_nanos() as f64 / n as f64,
            look.as_nanos() as f64 / probes.len() as f64,
            btree.as_nanos() as f64 / probes.len() as f64,
            ins.as_nanos() as f64 / probes.len() as f64,
            idx.memory_bytes(),
            idx.memory_bytes() as f64 / n as f64,
        );
    }
}
