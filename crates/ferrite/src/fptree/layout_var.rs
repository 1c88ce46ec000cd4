//! On-media layout of the FPTree's v2 leaf (byte keys), drawn in `docs/design/fptree.md`,
//! "Variable-size keys (part II)": line 0 exactly as the v1 leaf (fingerprints, bitmap, lock,
//! `next`), then 32 slots of 32 bytes (four `u64` words, two slots per cache line).
//!
//! # Invariants
//! - S1 (form by one word): a slot's first word `w0` alone says what the slot holds: `u64::MAX`
//!   (the null segment) = no key block; a value below 2^63 = the segment id of a key block
//!   (`w0`, `w1` form a [`PPtr`]); a top byte `0x80 | len` with `len <= 23` = an inline key.
//!   Every other value is damage. An 8-byte store is failure-atomic (axiom M1), so no torn
//!   slot can make recovery take inline key bytes for a pointer.
//! - S2 (canonical form): keys of up to [`INLINE_MAX`] bytes are always inline, longer ones
//!   always in a key block; inline padding bytes are zero.
//! - S3: a pointer slot's `w3` holds the key's length (`u16`, little-endian, bytes 0..2) and its
//!   first six bytes (bytes 2..8), so a length mismatch or a different prefix is decided
//!   without reading the key block.
//!
//! # Ordering and concurrency
//! Pure encoding and decoding of local copies; every word is written and read whole by the
//! tree (conventions §2 rule 3). The tree's persist order is in the design doc (P-FPT-20..25).

use std::mem::offset_of;

use ferrite_pmem::PPtr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::key::{INLINE_MAX, MAX_KEY_LEN};
use super::layout::{L_BITMAP, L_FP, L_LOCK, L_NEXT, M};

/// Bytes per v2 slot.
pub const VAR_SLOT_BYTES: u64 = 32;
/// Bytes per v2 leaf (17 cache lines; PAllocator serves it from class 1 152).
pub const VAR_LEAF_SIZE: u64 = 1088;
/// The root's incompatible-feature flag of a byte-key tree (v2 leaves).
pub const INCOMPAT_BYTE_KEYS: u64 = 1;
/// The tag bit of an inline key in the top byte of `w0`.
pub const INLINE_TAG: u8 = 0x80;
/// The words of an empty slot: no key block, nothing inline.
pub const EMPTY_SLOT: [u64; 4] = [u64::MAX, 0, 0, 0];

/// A v2 leaf as it lies in persistent memory (1 088 bytes, 64-byte aligned).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct VarLeafImage {
    /// One fingerprint byte per slot (written as whole `u64` words).
    pub fp: [u8; M],
    /// Validity bitmap; bit i = slot i valid; the commit word of the leaf.
    pub bitmap: u64,
    /// The concurrent tree's leaf lock; zero here. Words of earlier opens are never reset:
    /// they read unlocked in a later epoch (VL5, P-FPT-30).
    pub lock: u64,
    /// The next leaf of the list (null: this is the last leaf).
    pub next: PPtr,
    /// The slots, four words each (see [`decode_slot`]).
    pub slots: [[u64; 4]; M],
}

/// Byte offset of the first slot.
pub const VL_SLOTS: u64 = offset_of!(VarLeafImage, slots) as u64;

const _: () = assert!(size_of::<VarLeafImage>() as u64 == VAR_LEAF_SIZE);
const _: () = assert!(VL_SLOTS == 64 && VAR_SLOT_BYTES * M as u64 + VL_SLOTS == VAR_LEAF_SIZE);
// Line 0 is the v1 leaf's line 0: bitmap, lock and link code is shared by both kinds.
const _: () = assert!(offset_of!(VarLeafImage, fp) as u64 == L_FP);
const _: () = assert!(offset_of!(VarLeafImage, bitmap) as u64 == L_BITMAP);
const _: () = assert!(offset_of!(VarLeafImage, lock) as u64 == L_LOCK);
const _: () = assert!(offset_of!(VarLeafImage, next) as u64 == L_NEXT);
// Slots are 32-aligned from a line boundary: a slot (and its PPtr) never straddles a line, and
// the PPtr is 16-aligned as PAllocator's `allocate(into)` and `deallocate(from)` need.
const _: () = assert!(VL_SLOTS.is_multiple_of(64) && 64 % VAR_SLOT_BYTES == 0);
const _: () = assert!(INLINE_MAX == 23 && MAX_KEY_LEN <= u16::MAX as usize);

/// Byte offset of slot `i` in a v2 leaf.
pub const fn var_slot_offset(i: usize) -> u64 {
    VL_SLOTS + VAR_SLOT_BYTES * i as u64
}

impl VarLeafImage {
    /// An empty leaf: no valid slot, every slot empty, no next leaf.
    pub fn empty() -> VarLeafImage {
        VarLeafImage { fp: [0; M], bitmap: 0, lock: 0, next: PPtr::NULL, slots: [EMPTY_SLOT; M] }
    }

    /// The valid slots (bits ≥ 32 of the bitmap are ignored here; readers check them).
    pub fn valid(&self) -> impl Iterator<Item = usize> + '_ {
        (0..M).filter(|&s| self.bitmap & (1 << s) != 0)
    }
}

/// What a slot's first word says (S1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyForm {
    /// No key block and no inline key.
    Empty,
    /// An inline key of this many bytes.
    Inline(usize),
    /// `w0`, `w1` are the [`PPtr`] of a key block.
    Pointer,
    /// No valid form: damage.
    Invalid,
}

/// The form of a slot whose first word is `w0` (S1).
pub const fn key_form(w0: u64) -> KeyForm {
    if w0 == u64::MAX {
        return KeyForm::Empty;
    }
    if w0 >> 63 == 0 {
        return KeyForm::Pointer;
    }
    let tag = (w0 >> 56) as u8;
    let len = (tag & !INLINE_TAG) as usize;
    if len <= INLINE_MAX { KeyForm::Inline(len) } else { KeyForm::Invalid }
}

/// A slot's key as decoded from its four words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKey {
    /// No key.
    Empty,
    /// A key of `len` bytes held in the slot.
    Inline {
        /// Its length (≤ 23).
        len: u8,
        /// The key, zero-padded.
        bytes: [u8; INLINE_MAX],
    },
    /// A key of `len` bytes held in the key block `block`.
    Pointer {
        /// The key block.
        block: PPtr,
        /// Its length (24 ..= 4 096).
        len: u16,
        /// Its first six bytes.
        prefix: [u8; 6],
    },
}

impl SlotKey {
    /// The key's length in bytes (0 for an empty slot).
    pub fn len(&self) -> usize {
        match self {
            SlotKey::Empty => 0,
            SlotKey::Inline { len, .. } => usize::from(*len),
            SlotKey::Pointer { len, .. } => usize::from(*len),
        }
    }

    /// Whether the slot holds no key.
    pub fn is_empty(&self) -> bool {
        matches!(self, SlotKey::Empty)
    }

    /// The key's bytes if they are inline.
    pub fn inline(&self) -> Option<&[u8]> {
        match self {
            SlotKey::Inline { len, bytes } => Some(&bytes[..usize::from(*len)]),
            _ => None,
        }
    }
}

/// Decodes a slot into its key and value. `Err` names the damage (the tree reports it as
/// `Corrupted` with the leaf's address): an invalid `w0`, a pointer slot whose length is not in
/// 24 ..= 4 096, or nonzero inline padding (S2).
pub fn decode_slot(w: [u64; 4]) -> Result<(SlotKey, u64), &'static str> {
    match key_form(w[0]) {
        KeyForm::Empty => Ok((SlotKey::Empty, w[2])),
        KeyForm::Invalid => Err("the slot's first word is neither null, a pointer nor inline"),
        KeyForm::Pointer => {
            let w3 = w[3].to_le_bytes();
            let len = u16::from_le_bytes([w3[0], w3[1]]);
            if usize::from(len) <= INLINE_MAX || usize::from(len) > MAX_KEY_LEN {
                return Err("a key block's length is out of range");
            }
            let mut prefix = [0u8; 6];
            prefix.copy_from_slice(&w3[2..]);
            Ok((SlotKey::Pointer { block: PPtr::new(w[0], w[1]), len, prefix }, w[2]))
        }
        KeyForm::Inline(len) => {
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..7].copy_from_slice(&w[0].to_le_bytes()[..7]);
            bytes[7..15].copy_from_slice(&w[1].to_le_bytes());
            bytes[15..].copy_from_slice(&w[3].to_le_bytes());
            if bytes[len..].iter().any(|&b| b != 0) {
                return Err("an inline key's padding is not zero");
            }
            Ok((SlotKey::Inline { len: len as u8, bytes }, w[2]))
        }
    }
}

/// The words of a slot holding `key` inline with `value`; `None` if `key` is longer than
/// [`INLINE_MAX`] (S2).
pub fn encode_inline(key: &[u8], value: u64) -> Option<[u64; 4]> {
    if key.len() > INLINE_MAX {
        return None;
    }
    let mut bytes = [0u8; INLINE_MAX];
    bytes[..key.len()].copy_from_slice(key);
    let mut w0 = [0u8; 8];
    w0[..7].copy_from_slice(&bytes[..7]);
    w0[7] = INLINE_TAG | key.len() as u8;
    let word = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_le_bytes(a)
    };
    Some([u64::from_le_bytes(w0), word(&bytes[7..15]), value, word(&bytes[15..])])
}

/// The words of a slot naming the key block `block` that holds `key`, with `value`; `None` if
/// `key` belongs inline or is too long (S2, K4) or `block` is not a pointer (S1).
pub fn encode_pointer(block: PPtr, key: &[u8], value: u64) -> Option<[u64; 4]> {
    if key.len() <= INLINE_MAX
        || key.len() > MAX_KEY_LEN
        || key_form(block.segment) != KeyForm::Pointer
    {
        return None;
    }
    let mut w3 = [0u8; 8];
    w3[..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    w3[2..].copy_from_slice(&key[..6]);
    Some([block.segment, block.offset, value, u64::from_le_bytes(w3)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_inline_length_round_trips() {
        for len in 0..=INLINE_MAX {
            let key: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37) ^ 0xA5).collect();
            let w = encode_inline(&key, 99).unwrap();
            assert_eq!(key_form(w[0]), KeyForm::Inline(len));
            let (k, v) = decode_slot(w).unwrap();
            assert_eq!((k.inline(), k.len(), v), (Some(&key[..]), len, 99));
        }
        assert!(encode_inline(&[1; INLINE_MAX + 1], 0).is_none());
    }

    #[test]
    fn inline_keys_of_all_ones_never_read_as_null_or_a_pointer() {
        // The top byte of w0 is the tag, never key bytes: 0xFF keys must stay inline (S1).
        for len in 0..=INLINE_MAX {
            let w = encode_inline(&vec![0xFF; len], 1).unwrap();
            assert_eq!(key_form(w[0]), KeyForm::Inline(len), "length {len}");
        }
    }

    #[test]
    fn pointer_slots_round_trip_and_refuse_inline_lengths() {
        let block = PPtr::new(3, 64 * 17);
        let key: Vec<u8> = (0..200u8).collect();
        let w = encode_pointer(block, &key, 7).unwrap();
        assert_eq!(key_form(w[0]), KeyForm::Pointer);
        let (k, v) = decode_slot(w).unwrap();
        assert_eq!(k, SlotKey::Pointer { block, len: 200, prefix: [0, 1, 2, 3, 4, 5] });
        assert_eq!((k.len(), k.inline(), v), (200, None, 7));
        assert!(encode_pointer(block, &[0; INLINE_MAX], 7).is_none());
        assert!(encode_pointer(block, &[0; MAX_KEY_LEN + 1], 7).is_none());
        assert!(encode_pointer(PPtr::NULL, &[0; 30], 7).is_none());
        assert!(encode_pointer(block, &[0; MAX_KEY_LEN], 7).is_some());
    }

    #[test]
    fn damaged_slots_are_errors_not_keys() {
        // A top byte past the largest inline tag, or one of 0x80..0xFE above it.
        for top in [0x98u64, 0xC0, 0xFE] {
            assert_eq!(key_form(top << 56), KeyForm::Invalid);
            assert!(decode_slot([top << 56, 0, 0, 0]).is_err());
        }
        // A pointer slot with an inline length or beyond the limit.
        assert!(decode_slot([0, 64, 0, 23]).is_err());
        assert!(decode_slot([0, 64, 0, (MAX_KEY_LEN + 1) as u64]).is_err());
        // Nonzero inline padding.
        let mut w = encode_inline(b"abc", 0).unwrap();
        w[3] |= 1 << 60;
        assert!(decode_slot(w).is_err());
        assert_eq!(decode_slot(EMPTY_SLOT), Ok((SlotKey::Empty, 0)));
    }

    #[test]
    fn an_empty_v2_leaf_is_all_empty_slots() {
        let l = VarLeafImage::empty();
        assert_eq!(l.as_bytes().len() as u64, VAR_LEAF_SIZE);
        assert!(l.slots.iter().all(|s| key_form(s[0]) == KeyForm::Empty));
        assert_eq!(l.valid().count(), 0);
        assert_eq!(var_slot_offset(0), 64);
        assert_eq!(var_slot_offset(M - 1) + VAR_SLOT_BYTES, VAR_LEAF_SIZE);
    }
}
