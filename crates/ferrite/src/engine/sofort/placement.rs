//! Where an index lives (`docs/design/sofort.md` §13): the DRAM index of `index.rs` under an
//! `RwLock`, or an FPTree with byte keys in PM (hybrid: inner nodes in DRAM; persistent:
//! inner nodes in PM). One enum, matched once per call, so the DRAM path costs one branch.
//!
//! # Invariants
//! - A tree entry is `key ‖ row id` (eight bytes, most significant first) → row id, where `key`
//!   is the encoded index key ([`IxKey`]). The keys of one index are prefix-free
//!   (`crate::encoding` E2), so the entries' byte order is the `(key, row id)` order of the
//!   DRAM index and `rows(key)` is the range `[key ‖ 0, key ‖ u64::MAX]`.
//! - An entry is at most `fptree::MAX_KEY_LEN` bytes: a longer key is refused before anything
//!   is written ([`check_key_len`]).
//!
//! # Ordering
//! A tree operation is durable when it returns (the FPTree's own rules, P-FPT-n). What SOFORT
//! must order around it (P-SOF-20, P-SOF-21) is done by the callers in `txn.rs`.
//!
//! # Concurrency
//! The DRAM index under its `RwLock`; the tree is `Sync` (`&self` operations, its own leaf
//! locks). Readers re-check the key and the visibility of every candidate, so a candidate
//! list need not be a snapshot.

use std::ops::{Bound, ControlFlow};
use std::sync::RwLock;

use super::index::{EntryBound, Index, Rows, above_lo, below_hi};
use super::ixkey::IxKey;
use super::rebuild::IxState;
use super::{SofortError, SofortResult};
use std::sync::Arc;

use ferrite_pmem::PPtr;

use super::layout::{IX_DRAM, IX_HYBRID, IX_PERSISTENT};
use crate::SofortIndexPlacement;
use crate::alloc::PAllocator;
use crate::fptree::{Direction, FPTreeVar, IndexPlacement, MAX_KEY_LEN, TreeOptions};
use crate::storage::{StorageError, StorageResult};

/// Bytes of the row-id suffix of a tree entry.
const ROW_BYTES: usize = 8;

/// The longest encoded index key a tree index holds.
pub(super) const MAX_TREE_KEY: usize = MAX_KEY_LEN - ROW_BYTES;

/// One index (see the module docs).
#[derive(Debug)]
pub(super) enum IndexStore {
    /// In DRAM, rebuilt at open (in the background after an instant open: `rebuild.rs`).
    Dram(RwLock<IxState>),
    /// An FPTree in PM (hybrid or persistent, as its root records).
    Tree(Box<FPTreeVar>),
}

/// The tree entry of `(key, r)`.
pub(super) fn entry_bytes(key: &[u8], r: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(key.len() + ROW_BYTES);
    b.extend_from_slice(key);
    // Most significant byte first (no endian helpers in the workspace: see `crate::encoding`).
    b.extend((0..ROW_BYTES).rev().map(|i| (r >> (8 * i)) as u8));
    b
}

/// The `(key, row id)` of a tree entry, checked against its value (the row id again).
fn split_entry(bytes: &[u8], value: u64) -> StorageResult<(IxKey, u64)> {
    let bad = || StorageError::corrupted("an index entry without its row id", "SOFORT index");
    let cut = bytes.len().checked_sub(ROW_BYTES).ok_or_else(bad)?;
    let r = bytes[cut..].iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b));
    if r != value {
        return Err(bad());
    }
    Ok((IxKey::new(&bytes[..cut]), r))
}

/// `Err(len)` if a key of `len` bytes does not fit a tree index.
pub(super) fn check_key_len(key: &IxKey) -> Result<(), usize> {
    let len = key.as_slice().len();
    if len > MAX_TREE_KEY { Err(len) } else { Ok(()) }
}

/// The descriptor's code of a placement.
pub(super) fn placement_code(p: SofortIndexPlacement) -> u64 {
    match p {
        SofortIndexPlacement::Dram => IX_DRAM,
        SofortIndexPlacement::Hybrid => IX_HYBRID,
        SofortIndexPlacement::Persistent => IX_PERSISTENT,
    }
}

/// The placement of a descriptor's code (`None`: unknown, the descriptor is corrupt).
pub(super) fn placement_of_code(code: u64) -> Option<SofortIndexPlacement> {
    match code {
        IX_DRAM => Some(SofortIndexPlacement::Dram),
        IX_HYBRID => Some(SofortIndexPlacement::Hybrid),
        IX_PERSISTENT => Some(SofortIndexPlacement::Persistent),
        _ => None,
    }
}

impl IndexStore {
    /// The index placed as `p` whose tree (if any) has its root slot at `slot`: an empty DRAM
    /// index, or the tree opened (a hybrid tree rebuilds its inner nodes) or, if its creation
    /// did not finish (slot null, or a root without header), created (durable on return).
    pub fn open(
        alloc: &Arc<PAllocator>,
        slot: PPtr,
        p: SofortIndexPlacement,
    ) -> StorageResult<IndexStore> {
        let index = match p {
            SofortIndexPlacement::Dram => return Ok(IndexStore::dram()),
            SofortIndexPlacement::Hybrid => IndexPlacement::Dram,
            SofortIndexPlacement::Persistent => IndexPlacement::Persistent,
        };
        let create = || {
            FPTreeVar::create_with(alloc.clone(), slot, TreeOptions { index, ..Default::default() })
        };
        let root = alloc.pool().load_pptr(alloc.pool().resolve_range(slot, 16)?)?;
        let tree = if root.is_null() {
            create()?
        } else {
            match FPTreeVar::open(alloc.clone(), slot) {
                Err(StorageError::Corrupted { what, .. }) if what.starts_with("no root header") => {
                    create()?
                }
                r => r?,
            }
        };
        if tree.placement() != index {
            return Err(StorageError::corrupted(
                "an index tree's placement differs from its descriptor's",
                "SOFORT index",
            ));
        }
        Ok(IndexStore::Tree(Box::new(tree)))
    }

    /// An empty DRAM index.
    pub fn dram() -> IndexStore {
        IndexStore::Dram(RwLock::new(IxState::default()))
    }

    /// The DRAM index with its rebuild state (`None`: a tree, complete at open).
    #[inline]
    pub fn dram_state(&self) -> Option<&RwLock<IxState>> {
        match self {
            IndexStore::Dram(ix) => Some(ix),
            IndexStore::Tree(_) => None,
        }
    }

    /// Where the index lives.
    pub fn placement(&self) -> SofortIndexPlacement {
        match self {
            IndexStore::Dram(_) => SofortIndexPlacement::Dram,
            IndexStore::Tree(t) => match t.placement() {
                crate::fptree::IndexPlacement::Dram => SofortIndexPlacement::Hybrid,
                crate::fptree::IndexPlacement::Persistent => SofortIndexPlacement::Persistent,
            },
        }
    }

    /// Whether the index is in PM (its entries survive a crash).
    #[inline]
    pub fn is_pm(&self) -> bool {
        matches!(self, IndexStore::Tree(_))
    }

    /// Adds `(key, r)` (present already: no change). A tree refuses a key longer than
    /// [`MAX_TREE_KEY`] with `InvalidArgument` (callers check first) and may be `PoolFull`.
    pub fn insert(&self, key: IxKey, r: u64) -> SofortResult<()> {
        match self {
            IndexStore::Dram(ix) => {
                // Straight into a pending index too (W3 of `rebuild.rs`).
                ix.write().unwrap_or_else(|p| p.into_inner()).ix.insert(key, r);
                Ok(())
            }
            IndexStore::Tree(t) => {
                if check_key_len(&key).is_err() {
                    return Err(StorageError::InvalidArgument(format!(
                        "an index key of {} bytes: a PM index holds at most {MAX_TREE_KEY}",
                        key.as_slice().len()
                    ))
                    .into());
                }
                t.insert(&entry_bytes(key.as_slice(), r), r)?;
                Ok(())
            }
        }
    }

    /// Removes `(key, r)` if present (idempotent: recovery deletes entries that may be gone).
    pub fn remove(&self, key: &IxKey, r: u64) -> SofortResult<()> {
        match self {
            IndexStore::Dram(ix) => {
                let mut g = ix.write().unwrap_or_else(|p| p.into_inner());
                let st = &mut *g;
                st.ix.remove(key, r);
                // Not indexed yet by a pending rebuild: never to be (W3, FIX-12).
                if let Some(p) = st.pending.as_mut()
                    && p.unindexed(r)
                {
                    p.removed.insert(r);
                }
                Ok(())
            }
            IndexStore::Tree(t) => {
                if check_key_len(key).is_ok() {
                    t.delete(&entry_bytes(key.as_slice(), r))?;
                }
                Ok(())
            }
        }
    }

    /// The row ids of `key`, ascending (`None`: none).
    pub fn rows(&self, key: &IxKey) -> SofortResult<Option<Rows>> {
        match self {
            IndexStore::Dram(ix) => Ok(ix.read().unwrap_or_else(|p| p.into_inner()).ix.rows(key)),
            IndexStore::Tree(t) => {
                if check_key_len(key).is_err() {
                    return Ok(None);
                }
                let (lo, hi) =
                    (entry_bytes(key.as_slice(), 0), entry_bytes(key.as_slice(), u64::MAX));
                let mut rows = Vec::new();
                let mut bad = None;
                t.scan(
                    (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
                    Direction::Forward,
                    usize::MAX,
                    |k, v| match split_entry(k, v) {
                        Ok((_, r)) => {
                            rows.push(r);
                            ControlFlow::Continue(())
                        }
                        Err(e) => {
                            bad = Some(e);
                            ControlFlow::Break(())
                        }
                    },
                )?;
                if let Some(e) = bad {
                    return Err(e.into());
                }
                Ok(match rows[..] {
                    [] => None,
                    [r] => Some(Rows::One(r)),
                    _ => Some(Rows::Many(Box::new(rows))),
                })
            }
        }
    }

    /// Up to `max` entries within the entry bounds `(lo, hi)`, in entry order (descending if
    /// not `ascending`).
    ///
    /// A tree is scanned over byte bounds that contain every entry within `(lo, hi)`: from
    /// `lo`'s key (an entry `(k, r) ≥ (lo_k, lo_r)` has `k ≥ lo_k`, so `k ‖ r ≥ lo_k`) to
    /// `hi`'s key followed by eight `0xff` (an entry with `k < hi_k` differs from `hi_k` at a
    /// byte both hold, as no key is a proper prefix of a bound: E2). The entries come in
    /// `(key, row id)` order, so those within `(lo, hi)` are one run of the scan: the ones
    /// before it are skipped and the scan stops at the first one after it.
    pub fn candidates(
        &self,
        lo: &EntryBound,
        hi: &EntryBound,
        ascending: bool,
        max: usize,
    ) -> SofortResult<Vec<(IxKey, u64)>> {
        let t = match self {
            IndexStore::Dram(ix) => {
                let g = ix.read().unwrap_or_else(|p| p.into_inner());
                return Ok(g.ix.candidates(lo, hi, ascending, max));
            }
            IndexStore::Tree(t) => t,
        };
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        let after_lo = |e: &(IxKey, u64)| above_lo(lo, &e.0, e.1);
        let before_hi = |e: &(IxKey, u64)| below_hi(hi, &e.0, e.1);
        let from = match lo {
            Bound::Included((k, _)) | Bound::Excluded((k, _)) => Some(k.as_slice().to_vec()),
            Bound::Unbounded => None,
        };
        let to = match hi {
            Bound::Included((k, _)) | Bound::Excluded((k, _)) => {
                let mut b = k.as_slice().to_vec();
                b.extend_from_slice(&[0xff; ROW_BYTES]);
                Some(b)
            }
            Bound::Unbounded => None,
        };
        let range = (
            from.as_deref().map_or(Bound::Unbounded, Bound::Included),
            to.as_deref().map_or(Bound::Unbounded, Bound::Included),
        );
        let dir = if ascending { Direction::Forward } else { Direction::Backward };
        let mut bad = None;
        t.scan(range, dir, usize::MAX, |k, v| {
            let e = match split_entry(k, v) {
                Ok(e) => e,
                Err(e) => {
                    bad = Some(e);
                    return ControlFlow::Break(());
                }
            };
            // Ascending: skip until `after_lo`, stop at the first beyond `hi`; descending:
            // the other way round.
            let (enter, inside) = if ascending {
                (after_lo(&e), before_hi(&e))
            } else {
                (before_hi(&e), after_lo(&e))
            };
            if !enter {
                return ControlFlow::Continue(());
            }
            if !inside {
                return ControlFlow::Break(());
            }
            out.push(e);
            if out.len() < max { ControlFlow::Continue(()) } else { ControlFlow::Break(()) }
        })?;
        if let Some(e) = bad {
            return Err(e.into());
        }
        Ok(out)
    }

    /// Every entry, in order.
    fn all(&self) -> SofortResult<Vec<(IxKey, u64)>> {
        self.candidates(&Bound::Unbounded, &Bound::Unbounded, true, usize::MAX)
    }

    /// Checks the index against `expect` (the entries of the rows in use): `Err` says what
    /// differs. Returns the number of entries.
    pub fn check_against(&self, expect: &Index) -> SofortResult<Result<u64, String>> {
        match self {
            IndexStore::Dram(ix) => {
                let g = ix.read().unwrap_or_else(|p| p.into_inner());
                let ix = &g.ix;
                if !ix.is_consistent() {
                    return Ok(Err("the index's structure is inconsistent".into()));
                }
                if *ix != *expect {
                    return Ok(Err(format!("{} entries, {} rows in use", ix.len(), expect.len())));
                }
                Ok(Ok(ix.len() as u64))
            }
            IndexStore::Tree(t) => {
                let rep = t.check()?;
                let got = self.all()?;
                let want =
                    expect.candidates(&Bound::Unbounded, &Bound::Unbounded, true, usize::MAX);
                if rep.keys != got.len() as u64 {
                    return Ok(Err(format!(
                        "the tree counts {} keys and holds {}",
                        rep.keys,
                        got.len()
                    )));
                }
                if got != want {
                    let first = got.iter().zip(&want).position(|(a, b)| a != b);
                    return Ok(Err(format!(
                        "{} entries, {} rows in use (first difference at {first:?})",
                        got.len(),
                        want.len()
                    )));
                }
                Ok(Ok(got.len() as u64))
            }
        }
    }
}

/// The error of a key too long for a PM index.
pub(super) fn key_too_long(index: &str, len: usize) -> SofortError {
    SofortError::ValueTooLarge {
        column: format!("(key of {index})"),
        len: len as u64,
        max: MAX_TREE_KEY as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::random_bound;
    use super::*;
    use ferrite_pmem::internals::testing::test_seed;
    use ferrite_pmem::{Options, PoolSet, SplitMix64};
    use std::collections::BTreeSet;

    /// Keys of a two-column index (a string of 1..=3 letters, then an `i64`), encoded as the
    /// engine encodes them: prefix-free, some sharing their first eight bytes.
    fn key(i: u64) -> IxKey {
        let s = "abc"[..1 + (i % 3) as usize].to_owned();
        IxKey::new(&crate::encoding::encode_key(&[
            crate::value::Value::Str(s),
            crate::value::Value::I64((i / 3) as i64 - 3),
        ]))
    }

    /// Each PM placement against the DRAM index as the model: random inserts, removes (also
    /// of absent entries), `rows` and bounded scans in both directions, then a reopen.
    #[test]
    fn tree_placements_agree_with_the_dram_index() {
        let seed = test_seed();
        eprintln!("seed {seed:#x} (FERRITE_TEST_SEED to replay)");
        for p in [SofortIndexPlacement::Hybrid, SofortIndexPlacement::Persistent] {
            let set = PoolSet::create_sim(&Options::default().segment_size(1 << 20)).unwrap();
            let alloc = Arc::new(PAllocator::create(Arc::new(set), 1).unwrap());
            let slot = alloc.root_location();
            let ix = IndexStore::open(&alloc, slot, p).unwrap();
            assert_eq!(ix.placement(), p);
            let model = IndexStore::dram();
            let mut pairs = BTreeSet::new();
            let mut rng = SplitMix64::new(seed);
            for step in 0..3_000 {
                let (k, r) = (key(rng.next_u64() % 24), rng.next_u64() % 5);
                match rng.next_u64() % 4 {
                    0 | 1 => {
                        ix.insert(k.clone(), r).unwrap();
                        model.insert(k.clone(), r).unwrap();
                        pairs.insert((k, r));
                    }
                    2 => {
                        ix.remove(&k, r).unwrap();
                        model.remove(&k, r).unwrap();
                        pairs.remove(&(k, r));
                    }
                    _ => {
                        let b = |rng: &mut SplitMix64| random_bound(rng, key, 24, 6);
                        let (lo, hi) = (b(&mut rng), b(&mut rng));
                        let max = (rng.next_u64() % 6) as usize + 1;
                        for asc in [true, false] {
                            assert_eq!(
                                ix.candidates(&lo, &hi, asc, max).unwrap(),
                                model.candidates(&lo, &hi, asc, max).unwrap(),
                                "{p:?} step {step}: {lo:?} {hi:?} asc {asc} max {max}"
                            );
                        }
                    }
                }
                let k = key(rng.next_u64() % 24);
                assert_eq!(ix.rows(&k).unwrap(), model.rows(&k).unwrap(), "{p:?} step {step}");
            }
            let IndexStore::Dram(m) = &model else { unreachable!() };
            let expect = m.read().unwrap();
            assert_eq!(ix.check_against(&expect.ix).unwrap(), Ok(pairs.len() as u64));
            // Reopened from the same slot: the same entries (a hybrid tree rebuilds its inner
            // nodes from the leaves).
            drop(ix);
            let ix = IndexStore::open(&alloc, slot, p).unwrap();
            assert_eq!(ix.check_against(&expect.ix).unwrap(), Ok(pairs.len() as u64));
        }
    }

    #[test]
    fn a_key_longer_than_a_tree_holds_is_refused_and_never_found() {
        let set = PoolSet::create_sim(&Options::default().segment_size(1 << 20)).unwrap();
        let alloc = Arc::new(PAllocator::create(Arc::new(set), 1).unwrap());
        let ix =
            IndexStore::open(&alloc, alloc.root_location(), SofortIndexPlacement::Hybrid).unwrap();
        let long = IxKey::new(&vec![7u8; MAX_TREE_KEY + 1]);
        assert!(check_key_len(&long).is_err());
        let err = ix.insert(long.clone(), 1).unwrap_err();
        assert!(matches!(err, SofortError::Storage(StorageError::InvalidArgument(_))), "{err:?}");
        assert_eq!(ix.rows(&long).unwrap(), None);
        ix.remove(&long, 1).unwrap();
        let max = IxKey::new(&vec![7u8; MAX_TREE_KEY]);
        ix.insert(max.clone(), 1).unwrap();
        assert_eq!(ix.rows(&max).unwrap(), Some(Rows::One(1)));
        assert_eq!(entry_bytes(b"k", 0x0102).len(), 9);
        assert_eq!(split_entry(&entry_bytes(b"k", 0x0102), 0x0102).unwrap().1, 0x0102);
        assert!(split_entry(&entry_bytes(b"k", 0x0102), 3).is_err());
    }
}
