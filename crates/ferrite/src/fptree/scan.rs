//! Ordered range scans of the FPTree in both directions, with a limit (deliverable 5 of [D2]).
//! Design: `docs/design/fptree.md`, "Range scans".
//!
//! # Invariants
//! - S-SCAN-1 (order): entries are handed to the callback in strictly ascending key order
//!   ([`Direction::Forward`]) or strictly descending order ([`Direction::Backward`]), each key
//!   within the range exactly once, at most `limit` of them.
//! - S-SCAN-2 (leaf order): a leaf's valid slots are unsorted; each visited leaf is copied once
//!   into one local image reused for the whole scan (one bounds check per leaf), its in-range
//!   entries collected into a stack array of at most 32 and sorted there. No heap allocation
//!   per leaf for `u64` keys; byte keys are copied into one scratch buffer reused for the
//!   whole scan.
//! - S-SCAN-3 (leaf walk): leaves are taken from the inner index (T5; the DRAM index, or the
//!   persistent index for a tree whose index is in PM: both give a step's neighbours from the
//!   routed bottom node, and their successor/predecessor at its edge), not from the
//!   persistent `next` links, in both directions: leaves are singly linked, so a backward scan needs the
//!   index to find a leaf's predecessor, and one walk for both directions keeps them equal. The
//!   walk starts at the leaf that routes the range's first key and stops at the first leaf
//!   whose bound shows it cannot hold a key of the range.
//!
//! # Ordering
//! Read-only: no store, flush or fence. Every word is read with relaxed loads through a local
//! copy (conventions §2 rule 2); a damaged leaf (bitmap bits beyond the last slot, a slot that
//! does not decode) is `Corrupted`, never a panic.
//!
//! - S-SCAN-4 (validated leaves): a leaf is emitted only from a copy taken between its lock
//!   word's snapshot and a successful validation (conventions §2 rule 4), while the key that
//!   routed the step still routes to it (the index pin); the leaf's reach (the next bound
//!   forward, its own bound backward) is read under that pin (one descent,
//!   `Index::route_near`, when the leaf's index node holds it) or from the index inside that
//!   window (at a node's edge). After an emitted step, the next one takes its entry from the
//!   same pinned level-0 node without a descent while the node validates against that pin
//!   (the level-0 cursor, `Index::route_step`: the same answer and pin a descent would give).
//!   A failed
//!   validation redoes the step from the index; a later leaf emits only keys beyond the last
//!   key emitted. So every key present for the scan's whole duration is emitted once, in
//!   order, and each leaf's part is the state of one instant.
//!
//! # Concurrency
//! Scans run beside writers (the tree is `Sync`) and take no lock: see S-SCAN-4 and
//! [`Tree::scan_leaves`]. What is read before a validation is garbage: an error from it is a
//! retry; only an error read from a validated copy is returned.

use std::borrow::Borrow;
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::{ControlFlow, RangeBounds};

use super::hooks::{self, Point};
use super::index::IndexPin;
use super::layout::{FULL, LeafImage, M};
use super::layout_var::{SlotKey, VarLeafImage, decode_slot};
use super::olc::IndexKey;
use super::vlock::VersionLock;
use super::{ByteKey, Tree, U64Key, corrupt, resolve_block};
use crate::storage::{StorageError, StorageResult};
use zerocopy::{FromZeros, IntoBytes};

/// The order in which a scan visits keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Direction {
    /// Ascending key order.
    #[default]
    Forward,
    /// Descending key order.
    Backward,
}

/// Whether `key` lies above the lower bound `lo`.
#[inline(always)]
fn above<Q: ?Sized + Ord>(lo: Bound<&Q>, key: &Q) -> bool {
    match lo {
        Included(l) => key >= l,
        Excluded(l) => key > l,
        Unbounded => true,
    }
}

/// Whether `key` lies below the upper bound `hi`.
#[inline(always)]
fn below<Q: ?Sized + Ord>(hi: Bound<&Q>, key: &Q) -> bool {
    match hi {
        Included(h) => key <= h,
        Excluded(h) => key < h,
        Unbounded => true,
    }
}

/// Whether the range `(lo, hi)` holds no key at all.
fn empty_range<Q: ?Sized + Ord>(lo: Bound<&Q>, hi: Bound<&Q>) -> bool {
    match (lo, hi) {
        (Included(l), Included(h)) => l > h,
        (Included(l), Excluded(h)) | (Excluded(l), Included(h)) | (Excluded(l), Excluded(h)) => {
            l >= h
        }
        _ => false,
    }
}

/// Leaf steps a scan takes before it computes its bound on the walk (the pool's capacity in
/// leaves): below it the walk is bounded anyway, and a damaged tree's cycle is still caught
/// at max(this, the capacity) steps.
const SHORT_WALK: u64 = 1024;

/// One call of a scan's leaf visitor ([`Tree::scan_leaves`]).
enum Visit {
    /// Copy the in-range entries of the leaf at this global offset that lie beyond the last
    /// key emitted (in the scan's direction), sorted. The leaf may be changing: what is read
    /// is garbage until the walk validates it, and an error is a retry unless it validates.
    Read(u64),
    /// The last read validated: hand its entries to the caller.
    Emit,
}

/// How far up the next leaf of a backward walk must reach.
enum Reach<O> {
    /// The first leaf: it holds the key it is routed by, which is the range's upper end.
    Key,
    /// The last leaf: nothing may follow it.
    End,
    /// Up to the bound of the leaf visited before it.
    Bound(O),
}

impl<K: IndexKey> Tree<K> {
    /// Visits, in `dir` order, the leaves that may hold keys in `(lo, hi)` (S-SCAN-3), each
    /// as a validated snapshot (S-SCAN-4): `visit(Read(g))` copies the leaf between the
    /// leaf's version snapshot and its validation; only a validated copy is emitted
    /// (`visit(Emit)`, which returns `Break` to stop). A failed validation reads the same
    /// step again from the index.
    ///
    /// A step is routed by a key `x` (one pinned descent, `Index::route_near`: the key routes
    /// to the leaf for the whole read), which also yields the leaf's reach, covered by the
    /// same pin (at an index node's edge it is asked inside the read instead): forward, the
    /// next bound (where the next step starts); backward, the leaf's own bound (the next step
    /// is its predecessor, which must reach up to it, else a split came between and the step
    /// is redone). An unlocked leaf's keys are exactly the tree's keys in its index
    /// range (every index change that moves a leaf's range is made under that leaf's lock),
    /// so consecutive validated steps cover the range without a gap.
    fn scan_leaves(
        &self,
        lo: Bound<&K::Key>,
        hi: Bound<&K::Key>,
        dir: Direction,
        mut visit: impl FnMut(Visit) -> StorageResult<ControlFlow<()>>,
    ) -> StorageResult<()> {
        let set = self.set();
        // Leaves lie scattered in the pool (allocated in split order), so a scan is bound by
        // memory latency: the next leaf's lines are requested as soon as the index names it,
        // before the current leaf is validated and emitted (`docs/benchmarks.md`, "FPTree II").
        let prefetch = |g: u64| {
            for line in 0..K::LEAF_SIZE.div_ceil(64) {
                set.prefetch(g + 64 * line);
            }
        };
        // The walk's bound (a cycle in a damaged tree must not run forever) costs a pass over
        // the pool set's segment table: computed only once a walk is long enough to need it,
        // not for every short scan.
        let mut limit: Option<u64> = None;
        let mut too_long = |steps: u64| {
            steps > SHORT_WALK
                && steps > *limit.get_or_insert_with(|| super::walk_limit(set, K::LEAF_SIZE))
        };
        let mut steps = 0u64;
        let mut round = 0u32;
        match dir {
            Direction::Forward => {
                let mut x: K::Owned = match lo {
                    Included(l) | Excluded(l) => K::to_owned_key(l),
                    Unbounded => K::lowest(),
                };
                // The last emitted step's index pin and position (the level-0 cursor).
                let mut cursor: Option<(IndexPin, usize)> = None;
                loop {
                    // The leaf, its pin and (inside its level-0 node) the next entry, so the
                    // next leaf is prefetched before this one is read: the next entry of the
                    // last step's node under its pin, else (the node's edge, a changed node,
                    // a retried step) one descent.
                    let r =
                        self.index.route_step(set, cursor.take(), x.borrow(), true, true, false)?;
                    let g = r.leaf;
                    if let Some((_, n)) = &r.next {
                        prefetch(*n);
                    }
                    hooks::at(Point::ScanRouted, g);
                    let w = self.leaf_word(g)?;
                    let Some(v) = w.read_begin()? else {
                        super::pause(&mut round);
                        continue;
                    };
                    let read = visit(Visit::Read(g));
                    // At a node's edge the next bound is asked inside the window instead.
                    let next = match r.next {
                        Some(n) => Ok(Some(n)),
                        None => self.index.next_entry(set, x.borrow()).inspect(|n| {
                            if let Some((_, n)) = n {
                                prefetch(*n);
                            }
                        }),
                    };
                    hooks::at(Point::ScanCopied, g);
                    if !w.validate(v)? || !self.index.still_valid(&r.pin) {
                        super::pause(&mut round);
                        continue;
                    }
                    if read?.is_break() {
                        return Ok(());
                    }
                    let next = next?;
                    if visit(Visit::Emit)?.is_break() {
                        return Ok(());
                    }
                    match next {
                        // A leaf's keys are ≥ its bound: past the range once the bound is.
                        Some((b, _)) if below(hi, b.borrow()) => x = b,
                        _ => return Ok(()),
                    }
                    cursor = Some((r.pin, r.at));
                    steps += 1;
                    if too_long(steps) {
                        break;
                    }
                }
            }
            Direction::Backward => {
                let (mut x, mut reach): (K::Owned, Reach<K::Owned>) = match hi {
                    Included(h) | Excluded(h) => (K::to_owned_key(h), Reach::Key),
                    Unbounded => (self.index.last_entry(set)?.0, Reach::End),
                };
                let mut cursor: Option<(IndexPin, usize)> = None;
                loop {
                    // The leaf, its own bound, its pin and (inside its level-0 node) the
                    // previous entry and, after the first step, the next one: from the last
                    // step's node under its pin (the cursor), else one descent.
                    let up_needed = !matches!(reach, Reach::Key);
                    let r = self.index.route_step(
                        set,
                        cursor.take(),
                        x.borrow(),
                        false,
                        up_needed,
                        true,
                    )?;
                    let g = r.leaf;
                    if let Some((_, n)) = &r.prev {
                        prefetch(*n);
                    }
                    hooks::at(Point::ScanRouted, g);
                    let w = self.leaf_word(g)?;
                    let Some(v) = w.read_begin()? else {
                        super::pause(&mut round);
                        continue;
                    };
                    let read = visit(Visit::Read(g));
                    let up = match (&reach, r.next) {
                        (Reach::Key, _) => Ok(None),
                        (_, Some(n)) => Ok(Some(n)),
                        // A node's edge: asked inside the window.
                        (_, None) => self.index.next_entry(set, x.borrow()),
                    };
                    hooks::at(Point::ScanCopied, g);
                    if !w.validate(v)? || !self.index.still_valid(&r.pin) {
                        super::pause(&mut round);
                        continue;
                    }
                    if read?.is_break() {
                        return Ok(());
                    }
                    let bound = r.bound;
                    let up = up?;
                    let reaches = match (&reach, &up) {
                        (Reach::Key, _) | (Reach::End, None) | (Reach::Bound(_), None) => true,
                        (Reach::End, Some(_)) => false,
                        (Reach::Bound(b), Some((ub, _))) => ub >= b,
                    };
                    if !reaches {
                        // A split came between this leaf and the one visited before: the
                        // predecessor is asked again.
                        if let Reach::Bound(b) = &reach {
                            match self.index.prev_entry(set, b.borrow())? {
                                Some((pb, _)) => x = pb,
                                None => return Ok(()),
                            }
                        } else if let Reach::End = reach {
                            x = self.index.last_entry(set)?.0;
                        }
                        super::pause(&mut round);
                        continue;
                    }
                    if visit(Visit::Emit)?.is_break() {
                        return Ok(());
                    }
                    // The leaf holds every key from its bound up: done once that is at or
                    // below the range's lower end.
                    if let Included(l) | Excluded(l) = lo
                        && bound.borrow() <= l
                    {
                        return Ok(());
                    }
                    // The predecessor: from the step's descent (read under the pin, which held
                    // through the validation), else (a node's edge) asked now.
                    let prev = match r.prev {
                        Some(p) => Some(p),
                        None => self.index.prev_entry(set, bound.borrow())?.inspect(|(_, n)| {
                            prefetch(*n);
                        }),
                    };
                    match prev {
                        Some((pb, _)) => {
                            x = pb;
                            reach = Reach::Bound(bound);
                        }
                        None => return Ok(()),
                    }
                    cursor = Some((r.pin, r.at));
                    steps += 1;
                    if too_long(steps) {
                        break;
                    }
                }
            }
        }
        Err(corrupt("a scan met more leaves than the pool can hold", self.root))
    }

    /// Checks the handle and the arguments common to both kinds' scans; `true`: nothing to do.
    fn scan_trivial(
        &self,
        lo: Bound<&K::Key>,
        hi: Bound<&K::Key>,
        limit: usize,
    ) -> StorageResult<bool> {
        if self.is_poisoned() {
            return Err(StorageError::Poisoned);
        }
        Ok(limit == 0 || empty_range(lo, hi))
    }
}

/// Emits `n` sorted entries of `entries` in `dir` order until the limit or the callback stops
/// the scan; returns `Break` when the scan is over.
#[inline(always)]
fn emit<E>(
    entries: &[E],
    dir: Direction,
    left: &mut usize,
    mut f: impl FnMut(&E) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut one = |e: &E| {
        *left -= 1;
        if f(e).is_break() || *left == 0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    match dir {
        Direction::Forward => entries.iter().try_for_each(&mut one),
        Direction::Backward => entries.iter().rev().try_for_each(&mut one),
    }
}

impl Tree<U64Key> {
    /// Calls `f(key, value)` for the keys in `range`, in `dir` order, at most `limit` times;
    /// `f` returns `ControlFlow::Break(())` to stop early. Returns the number of calls.
    pub fn scan(
        &self,
        range: impl RangeBounds<u64>,
        dir: Direction,
        limit: usize,
        mut f: impl FnMut(u64, u64) -> ControlFlow<()>,
    ) -> StorageResult<usize> {
        let (lo, hi) = (range.start_bound(), range.end_bound());
        if self.scan_trivial(lo, hi, limit)? {
            return Ok(0);
        }
        let set = self.set.clone();
        let mut left = limit;
        // (key, value) of the visited leaf's in-range entries, sorted (S-SCAN-2).
        let mut entries = [(0u64, 0u64); M];
        let mut n = 0;
        // The last key emitted: later leaves emit only beyond it (S-SCAN-4).
        let mut last: Option<u64> = None;
        // The visited leaf's copy, one buffer for the whole scan (copied into in place: a
        // by-value copy per leaf cost a second pass over its 576 bytes).
        let mut l = LeafImage::new_zeroed();
        self.scan_leaves(lo, hi, dir, |visit| {
            let g = match visit {
                Visit::Emit => {
                    let e = &entries[..n];
                    let Some(&(edge, _)) = (match dir {
                        Direction::Forward => e.last(),
                        Direction::Backward => e.first(),
                    }) else {
                        return Ok(ControlFlow::Continue(()));
                    };
                    let r = emit(e, dir, &mut left, |&(k, v)| f(k, v));
                    last = Some(edge);
                    return Ok(r);
                }
                Visit::Read(g) => g,
            };
            n = 0;
            set.read_into(g, l.as_mut_bytes())
                .map_err(|e| corrupt(format!("unreadable leaf: {e}"), self.at(g)))?;
            if l.bitmap & !FULL != 0 {
                return Err(corrupt(
                    format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap),
                    self.at(g),
                ));
            }
            let beyond = |k: u64| match (dir, last) {
                (_, None) => true,
                (Direction::Forward, Some(x)) => k > x,
                (Direction::Backward, Some(x)) => k < x,
            };
            let (mut keys, mut vals) = ([0u64; M], [0u64; M]);
            let mut bits = l.bitmap;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let [k, v] = l.kv[s];
                if above(lo, &k) && below(hi, &k) && beyond(k) {
                    (keys[n], vals[n]) = (k, v);
                    n += 1;
                }
            }
            if !sort_by_rank(&keys[..n], &vals[..n], &mut entries) {
                return Err(corrupt("a key appears twice in the leaf", self.at(g)));
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(limit - left)
    }

    /// The persistent pointer of the leaf at `g` for messages (null if it no longer resolves).
    fn at(&self, g: u64) -> ferrite_pmem::PPtr {
        self.set.to_pptr(g).unwrap_or(ferrite_pmem::PPtr::NULL)
    }
}

const _: () = assert!(M.is_power_of_two());

/// Places the entries `(keys[i], vals[i])` (at most 32) into `out` in ascending key order, each
/// at its rank: the number of keys below it. The ranks are sums of comparisons, not branches
/// on them: an insertion sort of a leaf's unsorted slots mispredicted on nearly every key and
/// was most of a scan's per-leaf work (`docs/benchmarks.md`, "FPTree II"). `false` if two keys
/// are equal (a torn or damaged copy): then the ranks are not a permutation.
#[inline(always)]
fn sort_by_rank(keys: &[u64], vals: &[u64], out: &mut [(u64, u64); M]) -> bool {
    let mut sum = 0;
    for (&k, &v) in keys.iter().zip(vals) {
        let rank: usize = keys.iter().map(|&x| usize::from(x < k)).sum();
        // rank < keys.len() ≤ M: `k` itself is not below `k`.
        out[rank & (M - 1)] = (k, v);
        sum += rank;
    }
    // Distinct keys have the ranks 0..n, whose sum is n(n − 1)/2; an equal pair sums less.
    let n = keys.len();
    sum == n * n.saturating_sub(1) / 2
}

/// A byte key of the visited leaf: its first 8 bytes as a big-endian word (zero-padded), where
/// its bytes start in the scratch buffer, its length, its value.
#[derive(Clone, Copy, Default)]
struct VarEntry {
    head: u64,
    start: u32,
    len: u32,
    value: u64,
}

/// The first 8 bytes of `key`, zero-padded, as a big-endian word: when two keys' heads differ,
/// their order is the keys' bytewise order (the first differing byte decides, and a key that
/// ends early pads with zeros, as its being a prefix makes it smaller); equal heads need the
/// full comparison.
fn head_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    b.iter().fold(0u64, |h, &x| (h << 8) | u64::from(x))
}

impl Tree<ByteKey> {
    /// Calls `f(key, value)` for the keys in `range` (bytewise order), in `dir` order, at most
    /// `limit` times; `f` returns `ControlFlow::Break(())` to stop early. Returns the number of
    /// calls. Pass `(Bound<&[u8]>, Bound<&[u8]>)` or `..` as the range.
    pub fn scan<'a>(
        &self,
        range: impl RangeBounds<[u8]> + 'a,
        dir: Direction,
        limit: usize,
        mut f: impl FnMut(&[u8], u64) -> ControlFlow<()>,
    ) -> StorageResult<usize> {
        let (lo, hi) = (range.start_bound(), range.end_bound());
        if self.scan_trivial(lo, hi, limit)? {
            return Ok(0);
        }
        let set = self.set.clone();
        let mut left = limit;
        let mut entries = [VarEntry::default(); M];
        let mut n = 0;
        // The visited leaf's key bytes (one buffer for the whole scan: S-SCAN-2).
        let mut scratch: Vec<u8> = Vec::new();
        // The last key emitted (`None` before the first): later leaves emit only beyond it.
        let mut last: Option<Vec<u8>> = None;
        // The visited leaf's copy (one buffer for the whole scan, as for `u64` keys).
        let mut l = VarLeafImage::new_zeroed();
        self.scan_leaves(lo, hi, dir, |visit| {
            let g = match visit {
                Visit::Emit => {
                    let key = |e: &VarEntry| &scratch[e.start as usize..(e.start + e.len) as usize];
                    let e = &entries[..n];
                    let Some(edge) = (match dir {
                        Direction::Forward => e.last(),
                        Direction::Backward => e.first(),
                    }) else {
                        return Ok(ControlFlow::Continue(()));
                    };
                    let r = emit(e, dir, &mut left, |x| f(key(x), x.value));
                    let l = last.get_or_insert_with(Vec::new);
                    l.clear();
                    l.extend_from_slice(key(edge));
                    return Ok(r);
                }
                Visit::Read(g) => g,
            };
            n = 0;
            let at = || set.to_pptr(g).unwrap_or(ferrite_pmem::PPtr::NULL);
            set.read_into(g, l.as_mut_bytes())
                .map_err(|e| corrupt(format!("unreadable leaf: {e}"), at()))?;
            if l.bitmap & !FULL != 0 {
                return Err(corrupt(
                    format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap),
                    at(),
                ));
            }
            scratch.clear();
            let mut bits = l.bitmap;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let (k, value) =
                    decode_slot(l.slots[s]).map_err(|e| corrupt(format!("slot {s}: {e}"), at()))?;
                let start = scratch.len();
                match k {
                    SlotKey::Empty => {
                        return Err(corrupt(format!("valid slot {s} holds no key"), at()));
                    }
                    SlotKey::Inline { len, bytes } => {
                        scratch.extend_from_slice(&bytes[..usize::from(len)]);
                    }
                    SlotKey::Pointer { block, len, .. } => {
                        hooks::at(Point::ScanKeyBlock, g);
                        let bg = resolve_block(&set, block, u64::from(len), "key block")?;
                        scratch.resize(start + usize::from(len), 0);
                        set.read_into(bg, &mut scratch[start..])?;
                    }
                }
                let key = &scratch[start..];
                let beyond = match (dir, &last) {
                    (_, None) => true,
                    (Direction::Forward, Some(x)) => key > &x[..],
                    (Direction::Backward, Some(x)) => key < &x[..],
                };
                if above(lo, key) && below(hi, key) && beyond {
                    let (start, len) = (start as u32, key.len() as u32);
                    entries[n] = VarEntry { head: head_of(key), start, len, value };
                    n += 1;
                } else {
                    scratch.truncate(start);
                }
            }
            let key = |e: &VarEntry| &scratch[e.start as usize..(e.start + e.len) as usize];
            entries[..n]
                .sort_unstable_by(|a, b| a.head.cmp(&b.head).then_with(|| key(a).cmp(key(b))));
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(limit - left)
    }
}
