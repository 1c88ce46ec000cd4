//! The tree's inner index, in one of two placements chosen at creation and recorded in the
//! tree root (`docs/design/fptree.md`, "The fully persistent variant"):
//!
//! - [`IndexPlacement::Dram`] (the hybrid tree, the default): a DRAM [`OlcIndex`] of lower
//!   bounds → leaf global offsets, rebuilt from the leaf list at every open.
//! - [`IndexPlacement::Persistent`]: the [`PersistentIndex`] in PM (bounds → leaf `PPtr`s),
//!   opened by replaying its own logs: open reads no leaf and rebuilds nothing. Its bounds are
//!   the key kind's owned form (`u64`, or byte separators in key slots: `pbound.rs`).
//!
//! # Invariants
//! - I1 (both): every leaf of the list has exactly one entry, in list order; a key routes to the
//!   entry with the greatest bound ≤ key.
//! - I2 (both): the head's bound is the lowest key (re-keyed when the head leaf is deleted).
//!   Every other leaf's bound is ≤ its smallest key and above the previous leaf's largest
//!   key. (The persistent placement once kept the next leaf's own bound, which let a later
//!   split's separator fall below it and lose keys: `docs/design/fptree.md`.)
//!
//! # Ordering
//! The index's own persist order is P-FPT-14..19 (`persistent.rs`). The tree calls
//! [`Index::insert`] after a split is durable and before its split log is disarmed (also from
//! split recovery: the insert is idempotent), and [`Index::remove`] after a deleted leaf is
//! unlinked and before it is freed (also from delete recovery). Both are rules P-FPT-27/28 of
//! `docs/design/persistence.md`.
//!
//! # Concurrency
//! Every method takes `&self`; the tree serializes index *changes* (splits and leaf
//! deletions) under its structure-modification lock, so each placement sees one changer at a
//! time, and lookups run beside it:
//! - DRAM: [`OlcIndex`] is concurrent by itself (optimistic lock coupling); a lookup's
//!   [`IndexPin`] is the OLC pin of the nodes its answer rests on.
//! - Persistent: [`PersistentIndex`] was written for one thread, so it sits behind a
//!   `RwLock` (readers share it for one descent; a change takes it exclusively) and a DRAM
//!   version `ver` that every change moves to odd before and to even after it. A lookup's pin
//!   is the (even) version read under the read lock; it is still valid while `ver` holds that
//!   value. Coarse (any split anywhere fails every older pin), but pins are only rechecked
//!   after a leaf lock or a leaf read, so a stale pin costs one retry.
//! - Head re-key (I2), DRAM: the lowest bound is first pointed at the new head (an in-place
//!   value replacement), then the new head's own bound is removed; between the two steps
//!   both entries name the new head, so no lookup ever finds no leaf. Persistent: the old
//!   head's entry removed and the new first entry re-keyed within one change (readers wait
//!   on the lock; the version moves).

use std::borrow::Borrow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use ferrite_pmem::{PPtr, PoolSet};

use super::key::KeyKind;
use super::olc::{IndexKey, OlcIndex, Pin, Routed};
use super::pbound::BoundForm;
use super::persistent::{PIndex, PN_DEFAULT_FANOUT};
use crate::storage::{StorageError, StorageResult};

/// The root's incompatible-feature flag of the fully persistent variant (bit 1): the index
/// root's `PPtr` is at [`R_INDEX`]; builds that do not know it refuse the tree rather than
/// rebuild a DRAM index beside an index they would not maintain.
pub const INCOMPAT_PERSISTENT_INDEX: u64 = 1 << 1;

/// Byte offset in the tree root of the persistent index root's `PPtr` (line 2, after the
/// delete log's two pointers; null in every other tree). Outside the header checksum, like
/// `head`: it is written once, by the allocator, during creation.
pub const R_INDEX: u64 = 160;

/// Where a tree's inner nodes live (chosen at creation, recorded in the root).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IndexPlacement {
    /// DRAM, rebuilt from the leaf list at every open (the hybrid FPTree).
    #[default]
    Dram,
    /// Persistent memory ([`PIndex`]): nothing is rebuilt at open.
    Persistent,
}

/// Options of [`super::Tree::create_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeOptions {
    /// Where the inner nodes live.
    pub index: IndexPlacement,
    /// Entries per persistent index node (an even number in 4..=32; ignored for DRAM). Small
    /// fan-outs make deep indexes from few leaves (tests, crash targets).
    pub index_fanout: u32,
}

impl Default for TreeOptions {
    fn default() -> TreeOptions {
        TreeOptions { index: IndexPlacement::Dram, index_fanout: PN_DEFAULT_FANOUT }
    }
}

impl TreeOptions {
    /// The fully persistent variant with the default fan-out.
    pub fn persistent() -> TreeOptions {
        TreeOptions { index: IndexPlacement::Persistent, ..TreeOptions::default() }
    }
}

/// The inner index of a tree (see the module docs).
pub(super) enum Index<K: KeyKind> {
    Dram(Box<OlcIndex<K>>),
    Persistent(Box<Shared<K::Owned>>),
}

/// The persistent index shared by the tree's threads (module docs, "Concurrency").
pub(super) struct Shared<B: BoundForm> {
    ix: RwLock<PIndex<B>>,
    /// Even while no change runs; +1 before and +1 after every change.
    ver: AtomicU64,
}

impl<B: BoundForm> Shared<B> {
    /// The index for a lookup (shared with other lookups; waits for a change to end).
    pub(super) fn read(&self) -> RwLockReadGuard<'_, PIndex<B>> {
        // A panic while holding the lock leaves the PM index as its own persist order left
        // it (every change is crash-consistent), so the guard is used as it is.
        self.ix.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one change of the index exclusively, with `ver` odd while it runs.
    fn change<T>(&self, f: impl FnOnce(&mut PIndex<B>) -> T) -> T {
        let mut g: RwLockWriteGuard<'_, PIndex<B>> =
            self.ix.write().unwrap_or_else(|e| e.into_inner());
        self.ver.fetch_add(1, Ordering::AcqRel);
        let r = f(&mut g);
        self.ver.fetch_add(1, Ordering::Release);
        r
    }
}

/// What a lookup's answer rests on ([`Index::lookup_pinned`], [`Index::still_valid`]).
#[derive(Clone, Debug)]
pub(super) enum IndexPin {
    /// The OLC index's node versions.
    Olc(Pin),
    /// The persistent index's change version.
    Ver(u64),
}

impl<K: KeyKind> std::fmt::Debug for Index<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Index::Dram(_) => f.write_str("Index::Dram(OlcIndex)"),
            Index::Persistent(s) => f.debug_tuple("Index::Persistent").field(&*s.read()).finish(),
        }
    }
}

fn empty() -> StorageError {
    lost("the index is empty")
}

fn lost(what: &str) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: "fptree index".into() }
}

/// An [`OlcIndex`] route with its pin as an [`IndexPin`].
fn olc_routed<O>(r: Routed<O>) -> Routed<O, IndexPin> {
    Routed {
        bound: r.bound,
        leaf: r.leaf,
        pin: IndexPin::Olc(r.pin),
        next: r.next,
        prev: r.prev,
        at: r.at,
    }
}

/// A leaf pointer from the persistent index, resolved to its global offset (64-byte aligned,
/// a whole leaf).
fn resolve<K: KeyKind>(set: &PoolSet, p: PPtr) -> StorageResult<u64> {
    if !p.offset.is_multiple_of(64) {
        return Err(lost("a leaf pointer in the index is not 64-byte aligned"));
    }
    set.resolve_range(p, K::LEAF_SIZE).map_err(|e| StorageError::Corrupted {
        what: format!("a leaf pointer in the index: {e}"),
        at: format!("fptree index {p:?}"),
    })
}

impl<K: IndexKey> Index<K> {
    /// The persistent placement over `ix`.
    pub(super) fn persistent(ix: PIndex<K::Owned>) -> Self {
        Index::Persistent(Box::new(Shared { ix: RwLock::new(ix), ver: AtomicU64::new(0) }))
    }

    /// The leaf (global offset) routing `key`, with the pin of what the answer rests on.
    /// DRAM: `None` from the OLC index (an empty index) is damage, as in [`Index::route`].
    #[inline]
    pub(super) fn lookup_pinned(
        &self,
        set: &PoolSet,
        key: &K::Key,
    ) -> StorageResult<(u64, IndexPin)> {
        match self {
            Index::Dram(m) => m
                .lookup_pinned(key)
                .map(|(g, p)| (g, IndexPin::Olc(p)))
                .ok_or_else(|| lost("the index has no leaf with the lowest bound")),
            Index::Persistent(s) => {
                let ix = s.read();
                // Even: no change runs while the read lock is held.
                let v = s.ver.load(Ordering::Acquire);
                // The leaf only: no owned copy of its bound.
                let p = match ix.lookup_k(key)? {
                    Some(p) => p,
                    None => ix.first()?.ok_or_else(|| lost("the persistent index is empty"))?.1,
                };
                Ok((resolve::<K>(set, p)?, IndexPin::Ver(v)))
            }
        }
    }

    /// [`Index::lookup_pinned`] for a scan step: also the routing entry's bound and, where one
    /// descent finds them (inside one level-0 node: [`OlcIndex::route_near`],
    /// [`PIndex::lookup_near_k`]), the next (`next`) and previous (`prev`) entries, covered by
    /// the pin. A neighbour not found so (asked for, at a node's edge) is `None`: the caller
    /// asks [`Index::next_entry`] / [`Index::prev_entry`].
    #[inline]
    pub(super) fn route_near(
        &self,
        set: &PoolSet,
        key: &K::Key,
        next: bool,
        prev: bool,
    ) -> StorageResult<Routed<K::Owned, IndexPin>> {
        match self {
            Index::Dram(m) => m
                .route_near(key, next, prev)
                .map(olc_routed)
                .ok_or_else(|| lost("the index has no leaf with the lowest bound")),
            Index::Persistent(s) => {
                let ix = s.read();
                // Even: no change runs while the read lock is held.
                let v = s.ver.load(Ordering::Acquire);
                let Some(n) = ix.lookup_near_k(key, next, prev)? else {
                    // Below every bound (only before the head's bound is the lowest key).
                    let (bound, leaf) = Self::persistent_route(set, &ix, key)?;
                    return Ok(Routed {
                        bound,
                        leaf,
                        pin: IndexPin::Ver(v),
                        next: None,
                        prev: None,
                        at: 0,
                    });
                };
                Ok(Routed {
                    bound: n.bound,
                    leaf: resolve::<K>(set, n.leaf)?,
                    pin: IndexPin::Ver(v),
                    next: Self::persistent_hit(set, n.next)?,
                    prev: Self::persistent_hit(set, n.prev)?,
                    at: 0,
                })
            }
        }
    }

    /// A scan step's route: from the level-0 cursor ([`OlcIndex::step`]) when `cursor` (the
    /// last step's pin and position) is given and its node still validates — the entry after
    /// (`forward`) or before the last one, with its neighbours, from the same pinned DRAM
    /// index node without a descent, under the same pin — else (no cursor, the node's edge,
    /// a changed node, the persistent placement) one descent, [`Index::route_near`] of `key`.
    #[inline]
    pub(super) fn route_step(
        &self,
        set: &PoolSet,
        cursor: Option<(IndexPin, usize)>,
        key: &K::Key,
        forward: bool,
        next: bool,
        prev: bool,
    ) -> StorageResult<Routed<K::Owned, IndexPin>> {
        if let (Index::Dram(m), Some((IndexPin::Olc(pin), at))) = (self, &cursor)
            && let Some(r) = m.step(pin, *at, forward, next, prev)
        {
            return Ok(olc_routed(r));
        }
        self.route_near(set, key, next, prev)
    }

    /// Whether the answer pinned by `pin` still holds (the key still routes to the leaf).
    #[inline]
    pub(super) fn still_valid(&self, pin: &IndexPin) -> bool {
        match (self, pin) {
            (Index::Dram(m), IndexPin::Olc(p)) => m.still_valid(p),
            (Index::Persistent(s), IndexPin::Ver(v)) => {
                std::sync::atomic::fence(Ordering::Acquire);
                s.ver.load(Ordering::Relaxed) == *v
            }
            _ => false,
        }
    }

    fn persistent_route(
        set: &PoolSet,
        ix: &PIndex<K::Owned>,
        key: &K::Key,
    ) -> StorageResult<(K::Owned, u64)> {
        let (b, p) = match ix.lookup_with_bound_k(key)? {
            Some(hit) => hit,
            None => ix.first()?.ok_or_else(|| lost("the persistent index is empty"))?,
        };
        Ok((b, resolve::<K>(set, p)?))
    }

    pub(super) fn placement(&self) -> IndexPlacement {
        match self {
            Index::Dram(_) => IndexPlacement::Dram,
            Index::Persistent(_) => IndexPlacement::Persistent,
        }
    }

    /// The entry routing `key`: (bound, leaf global offset).
    #[inline]
    pub(super) fn route_bound(
        &self,
        set: &PoolSet,
        key: &K::Key,
    ) -> StorageResult<(K::Owned, u64)> {
        match self {
            Index::Dram(m) => m
                .lookup_with_bound(key)
                .ok_or_else(|| lost("the index has no leaf with the lowest bound")),
            Index::Persistent(s) => Self::persistent_route(set, &s.read(), key),
        }
    }

    /// The leaf (global offset) routing `key`.
    #[inline]
    pub(super) fn route(&self, set: &PoolSet, key: &K::Key) -> StorageResult<u64> {
        match self {
            Index::Dram(m) => {
                m.lookup(key).ok_or_else(|| lost("the index has no leaf with the lowest bound"))
            }
            Index::Persistent(_) => Ok(self.route_bound(set, key)?.1),
        }
    }

    /// The leaf before the one whose bound is `bound` (`None`: that leaf is the head).
    pub(super) fn prev(&self, set: &PoolSet, bound: &K::Key) -> StorageResult<Option<u64>> {
        match self {
            Index::Dram(m) => Ok(m.predecessor(bound).map(|(_, g)| g)),
            Index::Persistent(s) => {
                s.read().predecessor_k(bound)?.map(|(_, p)| resolve::<K>(set, p)).transpose()
            }
        }
    }

    /// The entry with the greatest bound: (bound, leaf global offset).
    pub(super) fn last_entry(&self, set: &PoolSet) -> StorageResult<(K::Owned, u64)> {
        let hit = match self {
            Index::Dram(m) => return m.last().ok_or_else(empty),
            Index::Persistent(s) => s.read().last()?,
        };
        Self::persistent_hit(set, hit)?.ok_or_else(empty)
    }

    /// The entry with the smallest bound above `bound`.
    pub(super) fn next_entry(
        &self,
        set: &PoolSet,
        bound: &K::Key,
    ) -> StorageResult<Option<(K::Owned, u64)>> {
        match self {
            Index::Dram(m) => Ok(m.successor(bound)),
            Index::Persistent(s) => Self::persistent_hit(set, s.read().successor_k(bound)?),
        }
    }

    /// The entry with the greatest bound below `bound`.
    pub(super) fn prev_entry(
        &self,
        set: &PoolSet,
        bound: &K::Key,
    ) -> StorageResult<Option<(K::Owned, u64)>> {
        match self {
            Index::Dram(m) => Ok(m.predecessor(bound)),
            Index::Persistent(s) => Self::persistent_hit(set, s.read().predecessor_k(bound)?),
        }
    }

    /// A persistent index's answer as (bound of the key kind, resolved leaf offset).
    fn persistent_hit(
        set: &PoolSet,
        hit: Option<(K::Owned, PPtr)>,
    ) -> StorageResult<Option<(K::Owned, u64)>> {
        hit.map(|(b, p)| Ok((b, resolve::<K>(set, p)?))).transpose()
    }

    /// Number of leaves (entries). The persistent index counts them on the first call after
    /// open (a walk of its bottom nodes; a damaged index counts as 0, and `check` reports it).
    pub(super) fn leaves(&self) -> u64 {
        match self {
            Index::Dram(m) => m.len() as u64,
            Index::Persistent(s) => s.read().len().unwrap_or(0),
        }
    }

    /// Makes room for `bound` before a leaf split (persistent: [`PersistentIndex::prepare_insert`],
    /// so that the insert after the durable split cannot fail for want of space).
    pub(super) fn prepare(&self, bound: &K::Key) -> StorageResult<()> {
        match self {
            Index::Dram(_) => Ok(()),
            Index::Persistent(s) => s.change(|ix| ix.prepare_insert_k(bound)),
        }
    }

    /// Gives back what [`Index::prepare`] reserved and the split did not use (a split that
    /// failed after the preparation).
    pub(super) fn unprepare(&self) -> StorageResult<()> {
        match self {
            Index::Dram(_) => Ok(()),
            Index::Persistent(s) => s.change(|ix| ix.release_reserved()),
        }
    }

    /// Adds the entry of a new leaf (idempotent for the persistent index: split recovery calls
    /// it again). A `PoolFull` here means `prepare` was skipped: reported as corruption, so
    /// the tree poisons its handle (the split is durable; reopening finishes the insert).
    pub(super) fn insert(&self, bound: K::Owned, leaf_g: u64, leaf: PPtr) -> StorageResult<()> {
        match self {
            Index::Dram(m) => {
                m.insert(bound.borrow(), leaf_g)?;
                Ok(())
            }
            Index::Persistent(s) => match s.change(|ix| ix.insert_k(bound.borrow(), leaf)) {
                Ok(_) => Ok(()),
                Err(StorageError::PoolFull { .. }) => {
                    Err(lost("the index insert of a durable split found no space"))
                }
                Err(e) => Err(e),
            },
        }
    }

    /// Removes the entry `bound` of a deleted leaf (absent: nothing). The head's bound moves
    /// to the next leaf (I2; the tree's T5): DRAM by replacing the lowest entry; persistent by
    /// re-keying the new first entry to the lowest bound in the same change
    /// ([`PersistentIndex::lower_first`]), which is a no-op unless the head went.
    pub(super) fn remove(&self, bound: &K::Key) -> StorageResult<()> {
        match self {
            Index::Dram(m) => {
                let lowest = K::lowest();
                if bound == lowest.borrow() {
                    // The head leaf goes: the next leaf becomes the head and its bound the
                    // lowest (I2). The lowest entry is pointed at it first (one in-place
                    // replacement), then its own entry is removed: no lookup in between
                    // finds no leaf (module docs).
                    match m.successor(bound) {
                        Some((b, l)) => {
                            m.insert(lowest.borrow(), l)?;
                            m.remove(b.borrow());
                        }
                        None => {
                            m.remove(bound);
                        }
                    }
                } else {
                    m.remove(bound);
                }
                Ok(())
            }
            Index::Persistent(s) => {
                s.change(|ix| {
                    ix.remove_k(bound)?;
                    ix.lower_first_k(K::lowest().borrow())
                })?;
                Ok(())
            }
        }
    }

    /// Re-keys the head leaf's entry to the lowest bound if it is above it (persistent; DRAM
    /// keeps it there always): the redo of [`Index::remove`]'s second step in delete
    /// recovery. A no-op when nothing is above the lowest bound.
    pub(super) fn lower_head(&self) -> StorageResult<()> {
        match self {
            Index::Dram(_) => Ok(()),
            Index::Persistent(s) => s.change(|ix| ix.lower_first_k(K::lowest().borrow())).map(drop),
        }
    }

    /// Every entry in bound order: (bound, leaf global offset).
    pub(super) fn entries(&self, set: &PoolSet) -> StorageResult<Vec<(K::Owned, u64)>> {
        match self {
            Index::Dram(m) => {
                let mut out = Vec::with_capacity(m.len());
                let mut at = m.first();
                while let Some((b, g)) = at {
                    at = m.successor(b.borrow());
                    out.push((b, g));
                }
                Ok(out)
            }
            Index::Persistent(s) => s
                .read()
                .entries_in_order()?
                .into_iter()
                .map(|(b, p)| Ok((b, resolve::<K>(set, p)?)))
                .collect(),
        }
    }

    /// The persistent index's own blocks (its root and nodes); none for DRAM.
    pub(super) fn blocks(&self) -> StorageResult<Vec<PPtr>> {
        match self {
            Index::Dram(_) => Ok(Vec::new()),
            Index::Persistent(s) => s.read().blocks(),
        }
    }

    /// The persistent index's own integrity check (N1–N4); nothing for DRAM.
    pub(super) fn check(&self) -> StorageResult<()> {
        match self {
            Index::Dram(_) => Ok(()),
            Index::Persistent(s) => s.read().check().map(drop),
        }
    }
}
