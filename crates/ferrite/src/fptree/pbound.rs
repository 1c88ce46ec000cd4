//! The two stored forms of a persistent index bound (`persistent.rs`): `u64` bounds inline in
//! the node (the original index, unchanged on media) and byte bounds (the byte-key tree's
//! separators) in 32-byte key slots of the v2 leaf slot's form (`layout_var.rs`): up to 23
//! bytes inline, longer ones in a key block allocated into the slot. Design:
//! `docs/design/fptree.md`, "Byte separators in the persistent index"; layout:
//! `docs/design/format.md`.
//!
//! # Invariants
//! - B1 (one word decides): a byte key slot's first word alone says null, inline or pointer
//!   (S1 of `layout_var.rs`); in a *valid* slot null means the empty key (the lowest bound,
//!   written by the head re-key, which frees a key block and nulls the word in one allocator
//!   transaction).
//! - B2 (V1 for nodes): in a quiescent index an invalid slot names no key block. A key block is
//!   named by exactly one valid slot of one node (B3, V2 for nodes).
//! - B4: `u64` bounds keep the original node (832 bytes, tag `FERRPNOD`), index root (192
//!   bytes) and header key size 8, byte for byte.
//!
//! # Ordering and concurrency
//! Pure encoding, decoding and whole-node copies of local images; the persist order of key
//! blocks (rules P-FPT-31..34) is in `persistent.rs`, which alone writes nodes.

use std::borrow::Borrow;
use std::fmt::Debug;

use ferrite_pmem::{PPtr, PoolSet};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::key::{INLINE_MAX, shortest_separator};
use super::layout_var::{EMPTY_SLOT, KeyForm, SlotKey, decode_slot, encode_inline, key_form};
use super::persistent::PNodeImage;
use crate::storage::{StorageError, StorageResult};

/// Most slots (entries) of a node.
pub const SLOTS: usize = 32;

/// A node as the index works on it in DRAM: every slot's raw key words (meaningful only for a
/// valid slot, and for the leak rules of invalid ones) and child pointer.
#[derive(Clone, Copy, Debug)]
pub struct NodeImg<R> {
    /// The node tag.
    pub tag: u64,
    /// Validity bitmap (the node's commit word).
    pub bitmap: u64,
    /// 0 for a bottom node.
    pub level: u64,
    /// Raw key words per slot.
    pub keys: [R; SLOTS],
    /// Children per slot (all null when only the head of the node was read).
    pub children: [PPtr; SLOTS],
}

/// A byte-bound node as it lies in persistent memory (1 600 bytes, 25 lines, PAllocator class
/// 1 664): line 0 as the `u64` node's, 32 key slots of 32 bytes (bytes 64..1088), 32 child
/// pointers (bytes 1088..1600).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PVarNodeImage {
    /// [`PVNODE_TAG`].
    pub tag: u64,
    /// Validity bitmap.
    pub bitmap: u64,
    /// Level (0: children are leaves).
    pub level: u64,
    /// Zero.
    pub reserved: [u64; 5],
    /// Key slots (four words each, the v2 leaf slot's form with `w2` unused and zero).
    pub keys: [[u64; 4]; SLOTS],
    /// Children.
    pub children: [PPtr; SLOTS],
}

/// `"FERRPNDV"`: a byte-bound node's tag.
pub const PVNODE_TAG: u64 = u64::from_le_bytes(*b"FERRPNDV");
/// Bytes of a byte-bound node.
pub const PVNODE_SIZE: u64 = 1600;
/// Bytes of a byte-bound index root (the `u64` root's three lines plus the slot log).
pub const PVINDEX_ROOT_SIZE: u64 = 256;
/// Bytes per key slot of a byte-bound node.
pub const PV_KEY_BYTES: u64 = 32;

const _: () = assert!(size_of::<PVarNodeImage>() as u64 == PVNODE_SIZE);
const _: () = assert!(std::mem::offset_of!(PVarNodeImage, keys) == 64);
const _: () = assert!(std::mem::offset_of!(PVarNodeImage, children) == 1088);

/// A byte-bound node's first 1 088 bytes (line 0 and the key slots): what a lookup's descent
/// reads of each node.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
struct PVarNodeHead {
    tag: u64,
    bitmap: u64,
    level: u64,
    reserved: [u64; 5],
    keys: [[u64; 4]; SLOTS],
}

/// The `u64` node's first five lines.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
struct PNodeHead {
    tag: u64,
    bitmap: u64,
    level: u64,
    reserved: [u64; 5],
    keys: [u64; SLOTS],
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for Box<[u8]> {}
}

fn corrupt(what: impl Into<String>, at: PPtr) -> StorageError {
    StorageError::Corrupted { what: what.into(), at: format!("fptree index {at:?}") }
}

/// The stored form of an index bound (sealed: `u64` and `Box<[u8]>`).
pub trait BoundForm:
    sealed::Sealed + Ord + Clone + Debug + Send + Sync + Borrow<Self::Ref> + 'static
{
    /// The borrowed bound callers pass (`u64`, `[u8]`).
    type Ref: ?Sized + Ord + Debug;
    /// A slot's raw key words (`u64`, `[u64; 4]`).
    type Raw: Copy + Debug + PartialEq + Send + Sync;
    /// Name in messages.
    const NAME: &'static str;
    /// The header's `key_size`: bytes per key slot.
    const KEY_SIZE: u32;
    /// Bytes per node.
    const NODE_SIZE: u64;
    /// Bytes of the index root block.
    const ROOT_SIZE: u64;
    /// Every node's first word.
    const NODE_TAG: u64;
    /// Byte offset of a node's first child pointer.
    const N_CHILDREN: u64;
    /// The raw words of an empty slot.
    const EMPTY_RAW: Self::Raw;
    /// Whether a leftmost key above an inserted bound is lowered to the empty key (bytes: one
    /// failure-atomic step, a key block's free from the slot or one null word) rather than to
    /// the bound itself (`u64`: one 8-byte store). Lowered so, an inner node's leftmost key
    /// may lie below the node's own range; it still bounds its first child's keys from below.
    const LOWERS_TO_EMPTY: bool;
    /// Whether slots can name key blocks.
    const KEY_BLOCKS: bool;

    /// The raw words as a slice.
    fn words(raw: &Self::Raw) -> &[u64];
    /// An owned copy.
    fn owned(r: &Self::Ref) -> Self;
    /// The lowest bound (0, the empty key).
    fn lowest() -> Self;
    /// Reads a whole node at global offset `g`.
    fn read_node(set: &PoolSet, g: u64) -> StorageResult<NodeImg<Self::Raw>>;
    /// Reads a node's line 0 and keys (children left null).
    fn read_head(set: &PoolSet, g: u64) -> StorageResult<NodeImg<Self::Raw>>;
    /// Writes a whole node at `g` (not persisted).
    fn write_node(set: &PoolSet, g: u64, n: &NodeImg<Self::Raw>) -> StorageResult<()>;
    /// The bound a valid slot's words hold (key blocks read and validated).
    fn decode(set: &PoolSet, raw: Self::Raw, slot: usize, at: PPtr) -> StorageResult<Self> {
        let mut h = Self::Held::default();
        Self::hold(set, raw, slot, at, &mut h)?;
        Ok(Self::owned(Self::held(&h)))
    }
    /// A decoded bound in a buffer the caller reuses: no heap allocation for a `u64` or an
    /// inline byte bound (the lookup's descent compares every valid key of a node).
    type Held: Default;
    /// Decodes a valid slot's words into `h`, as [`BoundForm::decode`] does.
    fn hold(
        set: &PoolSet,
        raw: Self::Raw,
        slot: usize,
        at: PPtr,
        h: &mut Self::Held,
    ) -> StorageResult<()>;
    /// The bound `h` holds.
    fn held(h: &Self::Held) -> &Self::Ref;
    /// A query key's form for [`BoundForm::cmp_query`], computed once per descent.
    type Query<'a>: Copy;
    /// The query form of `key`.
    fn query(key: &Self::Ref) -> Self::Query<'_>;
    /// The order of a held bound against a query key (as `held(h).cmp(key)`).
    fn cmp_query(h: &Self::Held, q: Self::Query<'_>) -> std::cmp::Ordering;
    /// The order of two held bounds (as `held(a).cmp(held(b))`).
    fn cmp_held(a: &Self::Held, b: &Self::Held) -> std::cmp::Ordering;
    /// The key block the words name, if they are in pointer form.
    fn block(raw: Self::Raw) -> Option<PPtr>;
    /// Whether the words are damage in any slot (no valid form).
    fn damaged(raw: Self::Raw) -> bool;
    /// The words of `key` if it is stored in the slot itself (`None`: it needs a key block).
    fn inline(key: &Self::Ref) -> Option<Self::Raw>;
    /// The key's bytes (for a key block).
    fn bytes(key: &Self::Ref) -> &[u8];
    /// The separator a node split publishes in the parent: above the lower half's largest
    /// key and ≤ the upper half's smallest. At level 0 (`bottom`) every key of the lower half
    /// is a bound, so the shortest such key is correct (suffix truncation); above, the lower
    /// half's subtrees may hold bounds between its largest separator and the upper half's
    /// smallest, so the upper half's smallest key is copied.
    fn split_separator(lower_max: &Self, upper_min: &Self, bottom: bool) -> Self;
    /// The key of a grown root's single entry, given the old root's smallest.
    fn grow_key(smallest: Option<&Self>) -> Self;
}

/// The whole-node and head reads and the whole-node write of a node image type `$img` whose
/// first `size_of::<$head>()` bytes are `$head` (the same field names in both forms).
macro_rules! node_io {
    ($img:ident, $head:ident) => {
        fn read_node(set: &PoolSet, g: u64) -> StorageResult<NodeImg<Self::Raw>> {
            let i: $img = set.read_struct(g)?;
            Ok(NodeImg {
                tag: i.tag,
                bitmap: i.bitmap,
                level: i.level,
                keys: i.keys,
                children: i.children,
            })
        }

        fn read_head(set: &PoolSet, g: u64) -> StorageResult<NodeImg<Self::Raw>> {
            let h: $head = set.read_struct(g)?;
            Ok(NodeImg {
                tag: h.tag,
                bitmap: h.bitmap,
                level: h.level,
                keys: h.keys,
                children: [PPtr::NULL; SLOTS],
            })
        }

        fn write_node(set: &PoolSet, g: u64, n: &NodeImg<Self::Raw>) -> StorageResult<()> {
            let i = $img {
                tag: n.tag,
                bitmap: n.bitmap,
                level: n.level,
                reserved: [0; 5],
                keys: n.keys,
                children: n.children,
            };
            Ok(set.write_struct(g, &i)?)
        }
    };
}

impl BoundForm for u64 {
    type Ref = u64;
    type Raw = u64;
    const NAME: &'static str = "u64 bounds";
    const KEY_SIZE: u32 = 8;
    const NODE_SIZE: u64 = super::persistent::PNODE_SIZE;
    const ROOT_SIZE: u64 = super::persistent::PINDEX_ROOT_SIZE;
    const NODE_TAG: u64 = super::persistent::PNODE_TAG;
    const N_CHILDREN: u64 = super::persistent::N_CHILDREN;
    const EMPTY_RAW: u64 = 0;
    const LOWERS_TO_EMPTY: bool = false;
    const KEY_BLOCKS: bool = false;

    fn words(raw: &u64) -> &[u64] {
        std::slice::from_ref(raw)
    }

    fn owned(r: &u64) -> u64 {
        *r
    }

    fn lowest() -> u64 {
        0
    }

    node_io!(PNodeImage, PNodeHead);

    type Held = u64;

    #[inline(always)]
    fn decode(_: &PoolSet, raw: u64, _: usize, _: PPtr) -> StorageResult<u64> {
        Ok(raw)
    }

    #[inline(always)]
    fn hold(_: &PoolSet, raw: u64, _: usize, _: PPtr, h: &mut u64) -> StorageResult<()> {
        *h = raw;
        Ok(())
    }

    #[inline(always)]
    fn held(h: &u64) -> &u64 {
        h
    }

    type Query<'a> = u64;

    #[inline(always)]
    fn query(key: &u64) -> u64 {
        *key
    }

    #[inline(always)]
    fn cmp_query(h: &u64, q: u64) -> std::cmp::Ordering {
        h.cmp(&q)
    }

    #[inline(always)]
    fn cmp_held(a: &u64, b: &u64) -> std::cmp::Ordering {
        a.cmp(b)
    }

    fn block(_: u64) -> Option<PPtr> {
        None
    }

    fn damaged(_: u64) -> bool {
        false
    }

    fn inline(key: &u64) -> Option<u64> {
        Some(*key)
    }

    fn bytes(key: &u64) -> &[u8] {
        key.as_bytes()
    }

    fn split_separator(_: &u64, upper_min: &u64, _: bool) -> u64 {
        *upper_min
    }

    fn grow_key(smallest: Option<&u64>) -> u64 {
        smallest.copied().unwrap_or(0)
    }
}

/// A byte bound decoded into a reusable buffer ([`BoundForm::hold`]): inline keys in the
/// array, longer ones in `block` (grown once, reused), and its head for word comparisons.
#[derive(Clone, Debug, Default)]
pub struct HeldBytes {
    len: usize,
    inline: [u8; INLINE_MAX],
    block: Vec<u8>,
    /// The first 24 bytes, zero-padded, as big-endian words ([`head_words`]).
    head: [u64; 3],
}

/// A key's first 24 bytes, zero-padded, as three big-endian words: comparing heads orders
/// keys as their bytes do wherever the heads differ (a shorter key's padding is below any
/// byte a longer key has there, or equal to a zero byte, and then the heads tie).
#[inline(always)]
fn head_words(key: &[u8]) -> [u64; 3] {
    let mut b = [0u8; 24];
    let n = key.len().min(24);
    b[..n].copy_from_slice(&key[..n]);
    // Most significant byte first (numeric order = byte order), on any host.
    std::array::from_fn(|i| {
        u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8])).swap_bytes()
    })
}

/// `held(a).cmp(b)` given `b`'s head: the heads decide where they differ; where they tie and
/// both keys are at most 24 bytes long, each key is the other's prefix up to zeros, so the
/// shorter is smaller; otherwise the bytes are compared.
#[inline(always)]
fn cmp_heads(a: &HeldBytes, b_head: [u64; 3], b: &[u8]) -> std::cmp::Ordering {
    match a.head.cmp(&b_head) {
        std::cmp::Ordering::Equal if a.len <= 24 && b.len() <= 24 => a.len.cmp(&b.len()),
        std::cmp::Ordering::Equal => <Box<[u8]> as BoundForm>::held(a).cmp(b),
        o => o,
    }
}

/// Resolves a key block pointer read from PM (64-byte aligned, `len` bytes inside a segment).
pub(super) fn resolve_key_block(set: &PoolSet, block: PPtr, len: u64) -> Result<u64, String> {
    if block.is_null() || !block.offset.is_multiple_of(64) {
        return Err(format!("key block {block:?} is null or not 64-byte aligned"));
    }
    set.resolve_range(block, len).map_err(|e| e.to_string())
}

impl BoundForm for Box<[u8]> {
    type Ref = [u8];
    type Raw = [u64; 4];
    const NAME: &'static str = "byte bounds";
    const KEY_SIZE: u32 = PV_KEY_BYTES as u32;
    const NODE_SIZE: u64 = PVNODE_SIZE;
    const ROOT_SIZE: u64 = PVINDEX_ROOT_SIZE;
    const NODE_TAG: u64 = PVNODE_TAG;
    const N_CHILDREN: u64 = 1088;
    const EMPTY_RAW: [u64; 4] = EMPTY_SLOT;
    const LOWERS_TO_EMPTY: bool = true;
    const KEY_BLOCKS: bool = true;

    fn words(raw: &[u64; 4]) -> &[u64] {
        raw
    }

    fn owned(r: &[u8]) -> Box<[u8]> {
        r.into()
    }

    fn lowest() -> Box<[u8]> {
        Box::default()
    }

    node_io!(PVarNodeImage, PVarNodeHead);

    type Held = HeldBytes;

    fn hold(
        set: &PoolSet,
        raw: [u64; 4],
        slot: usize,
        at: PPtr,
        h: &mut HeldBytes,
    ) -> StorageResult<()> {
        let (k, _) = decode_slot(raw).map_err(|e| corrupt(format!("slot {slot}: {e}"), at))?;
        match k {
            // B1: null in a valid slot is the empty key.
            SlotKey::Empty => {
                h.len = 0;
                h.head = [0; 3];
            }
            SlotKey::Inline { len, bytes } => {
                h.len = usize::from(len);
                h.inline = bytes;
                h.head = head_words(&bytes);
            }
            SlotKey::Pointer { block, len, prefix } => {
                let len = usize::from(len);
                let g = resolve_key_block(set, block, len as u64)
                    .map_err(|e| corrupt(format!("a separator's key block: {e}"), at))?;
                h.block.resize(len, 0);
                set.read_into(g, &mut h.block[..len])?;
                if h.block[..6] != prefix {
                    return Err(corrupt(format!("slot {slot}: key block and prefix differ"), at));
                }
                h.len = len;
                h.head = head_words(&h.block);
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn held(h: &HeldBytes) -> &[u8] {
        // S2: keys of up to INLINE_MAX bytes are inline, longer ones in a block.
        if h.len <= INLINE_MAX { &h.inline[..h.len] } else { &h.block[..h.len] }
    }

    type Query<'a> = ([u64; 3], &'a [u8]);

    #[inline(always)]
    fn query(key: &[u8]) -> ([u64; 3], &[u8]) {
        (head_words(key), key)
    }

    #[inline(always)]
    fn cmp_query(h: &HeldBytes, q: ([u64; 3], &[u8])) -> std::cmp::Ordering {
        cmp_heads(h, q.0, q.1)
    }

    #[inline(always)]
    fn cmp_held(a: &HeldBytes, b: &HeldBytes) -> std::cmp::Ordering {
        cmp_heads(a, b.head, Self::held(b))
    }

    fn block(raw: [u64; 4]) -> Option<PPtr> {
        (key_form(raw[0]) == KeyForm::Pointer).then(|| PPtr::new(raw[0], raw[1]))
    }

    fn damaged(raw: [u64; 4]) -> bool {
        key_form(raw[0]) == KeyForm::Invalid
    }

    fn inline(key: &[u8]) -> Option<[u64; 4]> {
        // w2 (the leaf's value word) is unused in a node: 0.
        encode_inline(key, 0)
    }

    fn bytes(key: &[u8]) -> &[u8] {
        key
    }

    fn split_separator(lower_max: &Box<[u8]>, upper_min: &Box<[u8]>, bottom: bool) -> Box<[u8]> {
        if bottom {
            shortest_separator(lower_max, upper_min).unwrap_or_else(|| upper_min.clone())
        } else {
            upper_min.clone()
        }
    }

    fn grow_key(_: Option<&Box<[u8]>>) -> Box<[u8]> {
        // The empty key is ≤ every bound (a leftmost key may lie below the node's range).
        Box::default()
    }
}

/// The slot words of a key of `key.len()` > [`INLINE_MAX`] bytes in the block `block`, with
/// `w2` zero.
pub(super) fn pointer_raw(block: PPtr, key: &[u8]) -> Option<[u64; 4]> {
    if key.len() <= INLINE_MAX {
        return None;
    }
    super::layout_var::encode_pointer(block, key, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_bounds_choose_inline_up_to_23_bytes() {
        assert!(<Box<[u8]> as BoundForm>::inline(&[7; 23]).is_some());
        assert!(<Box<[u8]> as BoundForm>::inline(&[7; 24]).is_none());
        assert!(pointer_raw(PPtr::new(1, 64), &[7; 24]).is_some());
        assert!(pointer_raw(PPtr::new(1, 64), &[7; 23]).is_none());
    }

    #[test]
    fn separators_are_truncated_only_at_the_bottom() {
        let (a, b): (Box<[u8]>, Box<[u8]>) =
            (b"abcdef".as_slice().into(), b"abzzzz".as_slice().into());
        assert_eq!(&*<Box<[u8]> as BoundForm>::split_separator(&a, &b, true), b"abz");
        assert_eq!(&*<Box<[u8]> as BoundForm>::split_separator(&a, &b, false), b"abzzzz");
        assert_eq!(<u64 as BoundForm>::split_separator(&3, &9, true), 9);
    }
}
