//! Key kinds of the FPTree: fixed `u64` keys (the v1 leaf) and byte-string keys (the v2 leaf,
//! `layout_var.rs`). Design: `docs/design/fptree.md`, "Variable-size keys (part II)".
//!
//! # Invariants
//! - K1 (order): `ByteKey` keys are ordered bytewise (a key sorts before its extensions), the
//!   order of the API's memcomparable encoded keys; `U64Key` keys numerically.
//! - K2 (stable fingerprints): [`fingerprint_bytes`] and [`super::fingerprint`] are pure
//!   functions of the key bytes, identical across builds, processes and machines (they are
//!   persisted; golden values are tested). Neither depends on the host's byte order.
//! - K3 (separators): for `left_max < right_min`, `separator(left_max, right_min)` returns a
//!   bound `b` with `left_max < b <= right_min`; for byte keys it is the shortest such prefix of
//!   `right_min` (so DRAM bounds stay short).
//! - K4 (limit): a byte key has at most [`MAX_KEY_LEN`] bytes; a longer one is
//!   `InvalidArgument`, checked before anything is written.
//!
//! # Ordering and concurrency
//! The key-level functions are pure functions on DRAM values. The hidden leaf operations of
//! [`KeyKind`] are the tree's per-kind steps (run under the leaf's lock, or as validated reads): they delegate to
//! the fixed-key methods in `mod.rs` and to the byte-key functions in `var.rs`, which state
//! their persist order.

use std::fmt::Debug;
use std::ops::Bound;

use ferrite_pmem::{PPtr, PoolSet};

use super::pbound::BoundForm;
use super::{Leaf, LeafSummary, Tree};
use crate::storage::{StorageError, StorageResult};

/// The longest byte key (bytes).
pub const MAX_KEY_LEN: usize = 4096;

/// The longest byte key stored inline in a v2 leaf slot; longer keys live in a key block.
pub const INLINE_MAX: usize = 23;

/// Multiplier of both fingerprints (the 64-bit golden ratio).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The fingerprint of a byte key: one byte of a word-wise multiply–xorshift hash over the key's
/// 8-byte little-endian chunks (the last one zero-padded), with the length mixed in first so
/// that keys differing only in trailing zero bytes differ in hash. Stable (K2).
pub fn fingerprint_bytes(key: &[u8]) -> u8 {
    let mut h = (key.len() as u64).wrapping_mul(GOLDEN) ^ 0x243F_6A88_85A3_08D3;
    for chunk in key.chunks(8) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(GOLDEN);
        h ^= h >> 29;
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    h ^= h >> 32;
    (h >> 56) as u8
}

/// The shortest prefix of `right_min` that is greater than `left_max` (K3), or `None` unless
/// `left_max < right_min`.
pub fn shortest_separator(left_max: &[u8], right_min: &[u8]) -> Option<Box<[u8]>> {
    if left_max >= right_min {
        return None;
    }
    // The first position where they differ; `left_max` may be a proper prefix of `right_min`
    // (then the position is its length, which is < `right_min.len()`).
    let i = left_max.iter().zip(right_min).take_while(|(a, b)| a == b).count();
    Some(right_min[..=i].into())
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::U64Key {}
    impl Sealed for super::ByteKey {}
}

/// What the tree needs to know about its keys (sealed: the two kinds below are the only ones,
/// each with its own leaf layout and format flag).
pub trait KeyKind: sealed::Sealed + Debug + Send + Sync + 'static {
    /// The borrowed key callers pass in (`u64`, `[u8]`).
    type Key: ?Sized + Ord + Debug;
    /// The owned form the DRAM index holds (`u64`, `Box<[u8]>`): never a pointer into PM, so
    /// freeing a key block cannot leave a dangling bound (DEFECT-4); also the stored form of
    /// the persistent index's bounds (`pbound.rs`).
    type Owned: BoundForm<Ref = Self::Key>;
    /// Name in messages.
    const NAME: &'static str;
    /// The root header's incompatible-feature flag that marks this kind (0 for `u64` keys: the
    /// v1 format is unchanged).
    const INCOMPAT: u64;
    /// Bytes of a leaf of this kind.
    const LEAF_SIZE: u64;
    /// Bytes of one leaf slot.
    const SLOT_BYTES: u64;

    /// The key's fingerprint (K2).
    fn fingerprint(key: &Self::Key) -> u8;
    /// `Ok` if the tree can hold `key` (K4); `InvalidArgument` otherwise.
    fn validate(key: &Self::Key) -> StorageResult<()>;
    /// The smallest key: the head leaf's bound.
    fn lowest() -> Self::Owned;
    /// A bound between two leaves (K3).
    fn separator(left_max: &Self::Key, right_min: &Self::Key) -> Option<Self::Owned>;
    /// An owned copy of `key`.
    fn to_owned_key(key: &Self::Key) -> Self::Owned;
    // ----- the tree's per-kind leaf steps (used by `Tree` only; hidden, not an API) -----

    /// The valid slot of `leaf` holding `key`.
    #[doc(hidden)]
    fn find(t: &Tree<Self>, leaf: u64, key: &Self::Key) -> StorageResult<Option<usize>>
    where
        Self: Sized;
    /// The value of slot `slot` of `leaf`.
    #[doc(hidden)]
    fn value(t: &Tree<Self>, leaf: u64, slot: usize) -> StorageResult<u64>
    where
        Self: Sized;
    /// Writes a new `key → value` into free slot `slot` and persists it, still invisible.
    #[doc(hidden)]
    fn write_new(
        t: &Tree<Self>,
        leaf: u64,
        slot: usize,
        key: &Self::Key,
        value: u64,
    ) -> StorageResult<()>
    where
        Self: Sized;
    /// Writes the key of valid slot `from` with a new value into free slot `slot` of the same
    /// leaf and persists it, still invisible (an update).
    #[doc(hidden)]
    fn write_moved(
        t: &Tree<Self>,
        leaf: u64,
        slot: usize,
        from: usize,
        key: &Self::Key,
        value: u64,
    ) -> StorageResult<()>
    where
        Self: Sized;
    /// After an update's commit: the old slot gives up its key reference.
    #[doc(hidden)]
    fn release_moved(t: &Tree<Self>, leaf: u64, from: usize) -> StorageResult<()>
    where
        Self: Sized;
    /// After a delete's commit: the slot's key block is freed.
    #[doc(hidden)]
    fn release_deleted(t: &Tree<Self>, leaf: u64, slot: usize) -> StorageResult<()>
    where
        Self: Sized;
    /// Frees every key block the (unlinked, logged) leaf names, before the leaf is freed.
    #[doc(hidden)]
    fn release_leaf_keys(t: &Tree<Self>, leaf: Leaf) -> StorageResult<()>
    where
        Self: Sized;
    /// Writes the new leaf of a split from the full `leaf` and persists it: returns the left
    /// half's largest key, the right half's smallest and the new leaf's bitmap.
    #[doc(hidden)]
    fn split_copy(
        t: &Tree<Self>,
        leaf: Leaf,
        new: Leaf,
    ) -> StorageResult<(Self::Owned, Self::Owned, u64)>
    where
        Self: Sized;
    /// After the logical split: the old leaf gives up its references to the moved keys.
    #[doc(hidden)]
    fn after_logical_split(t: &Tree<Self>, leaf: Leaf, right: u64) -> StorageResult<()>
    where
        Self: Sized;
    /// Writes an empty leaf at global offset `g` (not persisted).
    #[doc(hidden)]
    fn write_empty_leaf(set: &PoolSet, g: u64) -> StorageResult<()>;
    /// One leaf of the rebuild: resets its lock, repairs interrupted key-block work, checks
    /// it, returns its next leaf, key count and key range.
    #[doc(hidden)]
    fn rebuild_leaf(t: &Tree<Self>, leaf: Leaf) -> StorageResult<LeafSummary<Self::Owned>>
    where
        Self: Sized;
    /// Appends the valid pairs of `leaf` within `bounds`, sorted by key, to `out`.
    #[doc(hidden)]
    fn leaf_pairs(
        t: &Tree<Self>,
        leaf: Leaf,
        bounds: (Bound<&Self::Key>, Bound<&Self::Key>),
        out: &mut Vec<(Self::Owned, u64)>,
    ) -> StorageResult<()>
    where
        Self: Sized;
    /// Checks the kind's slot invariants of one leaf (fingerprints; V1, V3 for byte keys; V1
    /// not where `pending` says the leaf's leak rule has not run in this open).
    #[doc(hidden)]
    fn check_leaf(t: &Tree<Self>, leaf: Leaf, pending: bool) -> StorageResult<()>
    where
        Self: Sized;
    /// The leaf's leak rule (byte keys, V1): an invalid slot naming a key block that a valid
    /// slot names drops the reference, any other frees the block. Run by the hybrid tree's
    /// rebuild and, with a persistent index, at a leaf's first lock in an open.
    #[doc(hidden)]
    fn repair_leaf(t: &Tree<Self>, leaf: Leaf) -> StorageResult<()>
    where
        Self: Sized;
    /// Appends the key blocks the leak rule would free (invalid slots naming a block no valid
    /// slot of the leaf names) to `out`: the tree's until the leaf's first lock in this open.
    #[doc(hidden)]
    fn pending_blocks(t: &Tree<Self>, leaf: Leaf, out: &mut Vec<PPtr>) -> StorageResult<()>
    where
        Self: Sized;
    /// Appends the key blocks named by the valid slots of `leaf` to `out`.
    #[doc(hidden)]
    fn key_blocks(t: &Tree<Self>, leaf: Leaf, out: &mut Vec<PPtr>) -> StorageResult<()>
    where
        Self: Sized;
}

/// Fixed 8-byte keys: the v1 leaf, unchanged.
#[derive(Debug, Clone, Copy)]
pub struct U64Key;

/// Byte-string keys up to [`MAX_KEY_LEN`] bytes: the v2 leaf (inline up to [`INLINE_MAX`]
/// bytes, else in a key block).
#[derive(Debug, Clone, Copy)]
pub struct ByteKey;

impl KeyKind for U64Key {
    type Key = u64;
    type Owned = u64;
    const NAME: &'static str = "u64 keys";
    const INCOMPAT: u64 = 0;
    const LEAF_SIZE: u64 = super::layout::LEAF_SIZE;
    const SLOT_BYTES: u64 = 16;

    fn fingerprint(key: &u64) -> u8 {
        super::fingerprint(*key)
    }

    fn validate(_: &u64) -> StorageResult<()> {
        Ok(())
    }

    fn lowest() -> u64 {
        0
    }

    fn separator(left_max: &u64, right_min: &u64) -> Option<u64> {
        // left_max < right_min, so left_max + 1 cannot overflow and is <= right_min.
        (left_max < right_min).then(|| left_max + 1)
    }

    fn to_owned_key(key: &u64) -> u64 {
        *key
    }

    #[inline(always)]
    fn find(t: &Tree<Self>, leaf: u64, key: &u64) -> StorageResult<Option<usize>> {
        t.fixed_find(leaf, *key)
    }

    #[inline(always)]
    fn value(t: &Tree<Self>, leaf: u64, slot: usize) -> StorageResult<u64> {
        t.fixed_value(leaf, slot)
    }

    #[inline(always)]
    fn write_new(
        t: &Tree<Self>,
        leaf: u64,
        slot: usize,
        key: &u64,
        value: u64,
    ) -> StorageResult<()> {
        t.fixed_write_slot(leaf, slot, *key, value)
    }

    #[inline(always)]
    fn write_moved(
        t: &Tree<Self>,
        leaf: u64,
        slot: usize,
        _from: usize,
        key: &u64,
        value: u64,
    ) -> StorageResult<()> {
        t.fixed_write_slot(leaf, slot, *key, value)
    }

    #[inline(always)]
    fn release_moved(_: &Tree<Self>, _: u64, _: usize) -> StorageResult<()> {
        Ok(())
    }

    #[inline(always)]
    fn release_deleted(_: &Tree<Self>, _: u64, _: usize) -> StorageResult<()> {
        Ok(())
    }

    fn release_leaf_keys(_: &Tree<Self>, _: Leaf) -> StorageResult<()> {
        Ok(())
    }

    fn split_copy(t: &Tree<Self>, leaf: Leaf, new: Leaf) -> StorageResult<(u64, u64, u64)> {
        t.fixed_split_copy(leaf, new)
    }

    fn after_logical_split(_: &Tree<Self>, _: Leaf, _: u64) -> StorageResult<()> {
        Ok(())
    }

    fn write_empty_leaf(set: &PoolSet, g: u64) -> StorageResult<()> {
        Ok(set.write_struct(g, &super::layout::LeafImage::empty())?)
    }

    fn rebuild_leaf(t: &Tree<Self>, leaf: Leaf) -> StorageResult<LeafSummary<u64>> {
        t.fixed_rebuild_leaf(leaf)
    }

    fn leaf_pairs(
        t: &Tree<Self>,
        leaf: Leaf,
        bounds: (Bound<&u64>, Bound<&u64>),
        out: &mut Vec<(u64, u64)>,
    ) -> StorageResult<()> {
        t.fixed_pairs(leaf, bounds, out)
    }

    fn check_leaf(t: &Tree<Self>, leaf: Leaf, _: bool) -> StorageResult<()> {
        t.fixed_check_leaf(leaf)
    }

    fn repair_leaf(_: &Tree<Self>, _: Leaf) -> StorageResult<()> {
        Ok(())
    }

    fn pending_blocks(_: &Tree<Self>, _: Leaf, _: &mut Vec<PPtr>) -> StorageResult<()> {
        Ok(())
    }

    fn key_blocks(_: &Tree<Self>, _: Leaf, _: &mut Vec<PPtr>) -> StorageResult<()> {
        Ok(())
    }
}

impl KeyKind for ByteKey {
    type Key = [u8];
    type Owned = Box<[u8]>;
    const NAME: &'static str = "byte keys";
    const INCOMPAT: u64 = super::layout_var::INCOMPAT_BYTE_KEYS;
    const LEAF_SIZE: u64 = super::layout_var::VAR_LEAF_SIZE;
    const SLOT_BYTES: u64 = super::layout_var::VAR_SLOT_BYTES;

    fn fingerprint(key: &[u8]) -> u8 {
        fingerprint_bytes(key)
    }

    fn validate(key: &[u8]) -> StorageResult<()> {
        if key.len() > MAX_KEY_LEN {
            return Err(StorageError::InvalidArgument(format!(
                "a key of {} bytes: at most {MAX_KEY_LEN}",
                key.len()
            )));
        }
        Ok(())
    }

    fn lowest() -> Box<[u8]> {
        Box::default()
    }

    fn separator(left_max: &[u8], right_min: &[u8]) -> Option<Box<[u8]>> {
        shortest_separator(left_max, right_min)
    }

    fn to_owned_key(key: &[u8]) -> Box<[u8]> {
        key.into()
    }

    fn find(t: &Tree<Self>, leaf: u64, key: &[u8]) -> StorageResult<Option<usize>> {
        super::var::find(t, leaf, key)
    }

    fn value(t: &Tree<Self>, leaf: u64, slot: usize) -> StorageResult<u64> {
        super::var::value(t, leaf, slot)
    }

    fn write_new(
        t: &Tree<Self>,
        leaf: u64,
        slot: usize,
        key: &[u8],
        value: u64,
    ) -> StorageResult<()> {
        super::var::write_new(t, leaf, slot, key, value)
    }

    fn write_moved(
        t: &Tree<Self>,
        leaf: u64,
        slot: usize,
        from: usize,
        _key: &[u8],
        value: u64,
    ) -> StorageResult<()> {
        super::var::write_moved(t, leaf, slot, from, value)
    }

    fn release_moved(t: &Tree<Self>, leaf: u64, from: usize) -> StorageResult<()> {
        super::var::release_moved(t, leaf, from)
    }

    fn release_deleted(t: &Tree<Self>, leaf: u64, slot: usize) -> StorageResult<()> {
        super::var::release_deleted(t, leaf, slot)
    }

    fn release_leaf_keys(t: &Tree<Self>, leaf: Leaf) -> StorageResult<()> {
        super::var::release_leaf_keys(t, leaf)
    }

    fn split_copy(
        t: &Tree<Self>,
        leaf: Leaf,
        new: Leaf,
    ) -> StorageResult<(Box<[u8]>, Box<[u8]>, u64)> {
        super::var::split_copy(t, leaf, new)
    }

    fn after_logical_split(t: &Tree<Self>, leaf: Leaf, right: u64) -> StorageResult<()> {
        super::var::after_logical_split(t, leaf, right)
    }

    fn write_empty_leaf(set: &PoolSet, g: u64) -> StorageResult<()> {
        Ok(set.write_struct(g, &super::layout_var::VarLeafImage::empty())?)
    }

    fn rebuild_leaf(t: &Tree<Self>, leaf: Leaf) -> StorageResult<LeafSummary<Box<[u8]>>> {
        super::var::rebuild_leaf(t, leaf)
    }

    fn leaf_pairs(
        t: &Tree<Self>,
        leaf: Leaf,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        out: &mut Vec<(Box<[u8]>, u64)>,
    ) -> StorageResult<()> {
        super::var::leaf_pairs(t, leaf, bounds, out)
    }

    fn check_leaf(t: &Tree<Self>, leaf: Leaf, pending: bool) -> StorageResult<()> {
        super::var::check_leaf(t, leaf, pending)
    }

    fn repair_leaf(t: &Tree<Self>, leaf: Leaf) -> StorageResult<()> {
        super::var::repair_leaf(t, leaf)
    }

    fn pending_blocks(t: &Tree<Self>, leaf: Leaf, out: &mut Vec<PPtr>) -> StorageResult<()> {
        super::var::pending_blocks(t, leaf, out)
    }

    fn key_blocks(t: &Tree<Self>, leaf: Leaf, out: &mut Vec<PPtr>) -> StorageResult<()> {
        super::var::key_blocks(t, leaf, out)
    }
}

#[cfg(test)]
mod tests {
    use ferrite_pmem::SplitMix64;

    use super::*;

    #[test]
    fn byte_fingerprints_are_stable() {
        // Golden values (cross-checked with an independent reimplementation of the
        // definition): persisted fingerprints must never change across builds.
        assert_eq!(fingerprint_bytes(b""), 0x7D);
        assert_eq!(fingerprint_bytes(b"a"), 0xB7);
        assert_eq!(fingerprint_bytes(b"ferrite"), 0xCA);
        assert_eq!(fingerprint_bytes(&[0u8; 8]), 0x99);
        assert_eq!(fingerprint_bytes(&[0u8; 9]), 0x3A);
        assert_eq!(fingerprint_bytes(&[0xAB; 4096]), 0x3D);
    }

    #[test]
    fn byte_fingerprints_spread_over_all_values() {
        // 65 536 distinct keys of the shapes the API encodes (an escaped string and a
        // big-endian integer): every fingerprint value must occur, none more than 1.5× its
        // expected 256 times (a biased byte would cost extra key probes).
        let mut counts = [0u32; 256];
        for i in 0u32..65_536 {
            let k = if i % 2 == 0 {
                format!("user{i}").into_bytes()
            } else {
                // An encoded i64: sign bit flipped, most significant byte first.
                let x = u64::from(i) ^ (1 << 63);
                (0..8).rev().map(|b| (x >> (b * 8)) as u8).collect()
            };
            counts[usize::from(fingerprint_bytes(&k))] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 128 && *max < 384, "fingerprint counts between {min} and {max}");
    }

    #[test]
    fn keys_that_differ_only_in_trailing_zeros_hash_differently() {
        // The zero-padding of the last chunk must not make "a" and "a\0" the same hash input.
        let distinct = (0..16usize)
            .map(|n| {
                let mut k = vec![7u8; 5];
                k.resize(5 + n, 0);
                fingerprint_bytes(&k)
            })
            .collect::<std::collections::BTreeSet<_>>();
        assert!(distinct.len() > 8, "{distinct:?}");
    }

    #[test]
    fn separators_are_the_shortest_bound_between_two_keys() {
        assert_eq!(&*shortest_separator(b"abc", b"abd").unwrap(), b"abd");
        assert_eq!(&*shortest_separator(b"abc", b"b").unwrap(), b"b");
        assert_eq!(&*shortest_separator(b"ab", b"abzz").unwrap(), b"abz");
        assert_eq!(&*shortest_separator(b"", b"\0").unwrap(), b"\0");
        assert_eq!(&*shortest_separator(b"a\xff\xff", b"b\0").unwrap(), b"b");
        assert!(shortest_separator(b"b", b"a").is_none());
        assert!(shortest_separator(b"a", b"a").is_none());
        assert_eq!(U64Key::separator(&7, &100), Some(8));
        assert_eq!(U64Key::separator(&(u64::MAX - 1), &u64::MAX), Some(u64::MAX));
        assert_eq!(U64Key::separator(&5, &5), None);
    }

    #[test]
    fn random_separators_lie_between_their_keys_and_no_shorter_prefix_does() {
        let seed = ferrite_pmem::internals::testing::test_seed();
        println!("seed {seed:#x}");
        let mut rng = SplitMix64::new(seed);
        // A three-letter alphabet and short keys make shared prefixes and prefix pairs common.
        let key = |rng: &mut SplitMix64| -> Vec<u8> {
            let len = (rng.next_u64() % 6) as usize;
            (0..len).map(|_| (rng.next_u64() % 3) as u8).collect()
        };
        for _ in 0..20_000 {
            let (a, b) = (key(&mut rng), key(&mut rng));
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            match shortest_separator(&lo, &hi) {
                None => assert_eq!(lo, hi),
                Some(s) => {
                    assert!(*lo < *s && *s <= *hi, "{lo:?} < {s:?} <= {hi:?} (seed {seed:#x})");
                    assert!(hi.starts_with(&s));
                    assert!(*lo >= hi[..s.len() - 1], "a shorter bound exists (seed {seed:#x})");
                }
            }
        }
    }

    #[test]
    fn the_key_limit_is_checked() {
        assert!(ByteKey::validate(&[]).is_ok());
        assert!(ByteKey::validate(&[1; MAX_KEY_LEN]).is_ok());
        assert!(matches!(
            ByteKey::validate(&[1; MAX_KEY_LEN + 1]),
            Err(StorageError::InvalidArgument(_))
        ));
        assert!(ByteKey::lowest().is_empty());
        assert_eq!(U64Key::lowest(), 0);
    }
}
