//! Ordered range scans of the FPTree in both directions, with a limit (deliverable 5 of [D2]).
//! Design: `docs/design/fptree.md`, "Range scans".
//!
//! # Invariants
//! - S-SCAN-1 (order): entries are handed to the callback in strictly ascending key order
//!   ([`Direction::Forward`]) or strictly descending order ([`Direction::Backward`]), each key
//!   within the range exactly once, at most `limit` of them.
//! - S-SCAN-2 (leaf order): a leaf's valid slots are unsorted; each visited leaf is copied once
//!   into a local image (one bounds check per leaf), its in-range entries collected into a stack
//!   array of at most 32 and sorted there. No heap allocation per leaf for `u64` keys; byte
//!   keys are copied into one scratch buffer reused for the whole scan.
//! - S-SCAN-3 (leaf walk): leaves are taken from the inner index (T5; the DRAM map, or the
//!   persistent index's successor/predecessor for a tree whose index is in PM), not from the
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
//! # Concurrency
//! The tree is single-threaded (`&self` methods exclude every writer by Rust's borrow rules), so
//! a scan sees one state. The concurrent tree must, per leaf, read the leaf's version, copy the
//! leaf, validate the version (conventions §2 rule 4) and retry the leaf on a mismatch, and
//! re-route from the last key emitted when the leaf it stands on was split or removed; that is
//! not built here (see the design doc).

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::{ControlFlow, RangeBounds};

use super::index::Index;
use super::layout::{FULL, LeafImage, M};
use super::layout_var::{SlotKey, VarLeafImage, decode_slot};
use super::olc::IndexKey;
use super::{ByteKey, Tree, U64Key, corrupt, resolve_block};
use crate::storage::{StorageError, StorageResult};

/// How many leaves ahead of the one being read a scan prefetches.
const PREFETCH_DEPTH: usize = 4;

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

impl<K: IndexKey> Tree<K> {
    /// Visits, in `dir` order, the global offsets of the leaves that may hold keys in
    /// `(lo, hi)` (S-SCAN-3). `visit` returns `Break` to stop. The next leaf of the walk is
    /// prefetched (its first lines) while the current one is visited.
    fn scan_leaves(
        &self,
        lo: Bound<&K::Key>,
        hi: Bound<&K::Key>,
        dir: Direction,
        mut visit: impl FnMut(u64) -> StorageResult<ControlFlow<()>>,
    ) -> StorageResult<()> {
        let set = self.set();
        let no_leaf = || corrupt("the index has no leaf with the lowest bound", self.root);
        // Leaves lie scattered in the pool (allocated in split order), so a scan is bound by
        // memory latency: every line of the leaves `PREFETCH_DEPTH` steps ahead is requested
        // while the current one is sorted (measured in `docs/benchmarks.md`, "FPTree II").
        let prefetch = |g: u64| {
            for line in 0..K::LEAF_SIZE.div_ceil(64) {
                set.prefetch(g + 64 * line);
            }
        };
        let index = match &self.index {
            Index::Dram(m) => m,
            Index::Persistent(_) => return self.scan_leaves_persistent(lo, hi, dir, visit),
        };
        // The entries `PREFETCH_DEPTH` steps ahead of the walk, taken from the index one
        // neighbour query at a time (one allocation per scan, none per leaf).
        let mut ahead: VecDeque<(K::Owned, u64)> = VecDeque::with_capacity(PREFETCH_DEPTH);
        match dir {
            Direction::Forward => {
                // The leaf routing the first key of the range (T5), then every later leaf
                // until one starts above the range.
                let start = match lo {
                    Included(l) | Excluded(l) => index.lookup_with_bound(l),
                    Unbounded => index.first(),
                };
                let (mut bound, mut g) = start.ok_or_else(no_leaf)?;
                let mut more = true; // whether the index may hold further entries in range
                loop {
                    // A leaf's keys are ≥ its bound: past the range once the bound is.
                    if !below(hi, bound.borrow()) {
                        break;
                    }
                    while more && ahead.len() < PREFETCH_DEPTH {
                        let from = ahead.back().map_or(bound.borrow(), |(b, _)| b.borrow());
                        match index.successor(from) {
                            Some((b, n)) if below(hi, b.borrow()) => {
                                prefetch(n);
                                ahead.push_back((b, n));
                            }
                            _ => more = false,
                        }
                    }
                    if visit(g)?.is_break() {
                        break;
                    }
                    match ahead.pop_front() {
                        Some((b, n)) => (bound, g) = (b, n),
                        None => break,
                    }
                }
            }
            Direction::Backward => {
                // The leaf routing the last key of the range, then its predecessors until the
                // one that routes the range's lower bound (earlier leaves hold smaller keys).
                let start = match hi {
                    Included(h) | Excluded(h) => index.lookup_with_bound(h),
                    Unbounded => index.last(),
                };
                let last = |bound: &K::Key| match lo {
                    Included(l) | Excluded(l) => bound <= l,
                    Unbounded => false,
                };
                let (mut bound, mut g) = start.ok_or_else(no_leaf)?;
                let mut more = !last(bound.borrow());
                loop {
                    while more && ahead.len() < PREFETCH_DEPTH {
                        let from = ahead.back().map_or(bound.borrow(), |(b, _)| b.borrow());
                        match index.predecessor(from) {
                            Some((b, n)) => {
                                prefetch(n);
                                more = !last(b.borrow());
                                ahead.push_back((b, n));
                            }
                            None => more = false,
                        }
                    }
                    if visit(g)?.is_break() || last(bound.borrow()) {
                        break;
                    }
                    match ahead.pop_front() {
                        Some((b, n)) => (bound, g) = (b, n),
                        None => break,
                    }
                }
            }
        }
        Ok(())
    }

    /// [`Tree::scan_leaves`] for a tree whose index is in PM (S-SCAN-3 with the persistent
    /// index): the first leaf is routed as for the DRAM index, every further one is the index's
    /// successor (forward) or predecessor (backward) of the current bound: one index descent
    /// per leaf, no prefetch (the next leaf is known only after that descent).
    fn scan_leaves_persistent(
        &self,
        lo: Bound<&K::Key>,
        hi: Bound<&K::Key>,
        dir: Direction,
        mut visit: impl FnMut(u64) -> StorageResult<ControlFlow<()>>,
    ) -> StorageResult<()> {
        let set = self.set();
        let limit = super::walk_limit(set, K::LEAF_SIZE);
        let (mut bound, mut g) = match (dir, lo, hi) {
            (Direction::Forward, Included(l) | Excluded(l), _) => self.index.route_bound(set, l)?,
            (Direction::Backward, _, Included(h) | Excluded(h)) => {
                self.index.route_bound(set, h)?
            }
            (Direction::Forward, Unbounded, _) => self.index.first_entry(set)?,
            (Direction::Backward, _, Unbounded) => self.index.last_entry(set)?,
        };
        for _ in 0..limit {
            // Forward: a leaf's keys are ≥ its bound, so the walk is past the range once the
            // bound is.
            if dir == Direction::Forward && !below(hi, bound.borrow()) {
                return Ok(());
            }
            if visit(g)?.is_break() {
                return Ok(());
            }
            // Backward: the leaf whose bound is ≤ the range's lower end is the last one.
            if let (Direction::Backward, Included(l) | Excluded(l)) = (dir, lo)
                && bound.borrow() <= l
            {
                return Ok(());
            }
            let next = match dir {
                Direction::Forward => self.index.next_entry(set, bound.borrow())?,
                Direction::Backward => self.index.prev_entry(set, bound.borrow())?,
            };
            match next {
                Some((b, n)) => (bound, g) = (b, n),
                None => return Ok(()),
            }
        }
        Err(corrupt("the persistent index has more entries than the pool holds leaves", self.root))
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
        self.scan_leaves(lo, hi, dir, |g| {
            let l: LeafImage = set
                .read_struct(g)
                .map_err(|e| corrupt(format!("unreadable leaf: {e}"), self.at(g)))?;
            if l.bitmap & !FULL != 0 {
                return Err(corrupt(
                    format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap),
                    self.at(g),
                ));
            }
            let mut n = 0;
            let mut bits = l.bitmap;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let [k, v] = l.kv[s];
                if above(lo, &k) && below(hi, &k) {
                    entries[n] = (k, v);
                    n += 1;
                }
            }
            let e = &mut entries[..n];
            sort_pairs(e);
            Ok(emit(e, dir, &mut left, |&(k, v)| f(k, v)))
        })?;
        Ok(limit - left)
    }

    /// The persistent pointer of the leaf at `g` for messages (null if it no longer resolves).
    fn at(&self, g: u64) -> ferrite_pmem::PPtr {
        self.set.to_pptr(g).unwrap_or(ferrite_pmem::PPtr::NULL)
    }
}

/// Sorts at most 32 `(key, value)` pairs by key (keys are distinct): an insertion sort on the
/// stack, which for this size beats the general sort's dispatch.
#[inline(always)]
fn sort_pairs(e: &mut [(u64, u64)]) {
    for i in 1..e.len() {
        let x = e[i];
        let mut j = i;
        while j > 0 && e[j - 1].0 > x.0 {
            e[j] = e[j - 1];
            j -= 1;
        }
        e[j] = x;
    }
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
        // The visited leaf's key bytes (one buffer for the whole scan: S-SCAN-2).
        let mut scratch: Vec<u8> = Vec::new();
        self.scan_leaves(lo, hi, dir, |g| {
            let at = || set.to_pptr(g).unwrap_or(ferrite_pmem::PPtr::NULL);
            let l: VarLeafImage =
                set.read_struct(g).map_err(|e| corrupt(format!("unreadable leaf: {e}"), at()))?;
            if l.bitmap & !FULL != 0 {
                return Err(corrupt(
                    format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap),
                    at(),
                ));
            }
            scratch.clear();
            let mut n = 0;
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
                        let bg = resolve_block(&set, block, u64::from(len), "key block")?;
                        scratch.resize(start + usize::from(len), 0);
                        set.read_into(bg, &mut scratch[start..])?;
                    }
                }
                let key = &scratch[start..];
                if above(lo, key) && below(hi, key) {
                    let (start, len) = (start as u32, key.len() as u32);
                    entries[n] = VarEntry { head: head_of(key), start, len, value };
                    n += 1;
                } else {
                    scratch.truncate(start);
                }
            }
            let key = |e: &VarEntry| &scratch[e.start as usize..(e.start + e.len) as usize];
            let e = &mut entries[..n];
            e.sort_unstable_by(|a, b| a.head.cmp(&b.head).then_with(|| key(a).cmp(key(b))));
            Ok(emit(e, dir, &mut left, |x| f(key(x), x.value)))
        })?;
        Ok(limit - left)
    }
}
