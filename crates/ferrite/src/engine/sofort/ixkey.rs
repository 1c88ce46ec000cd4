//! Keys of the DRAM indexes: an encoded key (`crate::encoding`) held inline when it is short,
//! compared through its first eight bytes as one integer before any byte loop.
//!
//! # Invariants
//! - `head` is the first eight bytes of the key, big-endian, zero-padded: for byte strings
//!   `a`, `b`, `head(a) < head(b)` implies `a < b` (at the first differing position below
//!   eight either both bytes are real, or `a` ended there and is a proper prefix of `b`), so
//!   comparing `head` first and the bytes on a tie is the byte-string order.
//! - Keys of at most [`INLINE`] bytes live in the struct (an `i64` primary key is eight bytes,
//!   a two-column integer key sixteen): building, cloning and dropping one allocates nothing.
//!
//! # Ordering / concurrency
//! A plain value; the indexes that hold it are locked by their tables.

use std::cmp::Ordering;
use std::fmt;

/// Bytes held inline.
const INLINE: usize = 22;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

/// An index key (see the module docs).
#[derive(Clone)]
pub struct IxKey {
    head: u64,
    repr: Repr,
}

const _: () = assert!(std::mem::size_of::<IxKey>() == 32);

impl IxKey {
    /// The key `bytes`.
    #[inline]
    pub fn new(bytes: &[u8]) -> IxKey {
        // Most significant byte first (a DRAM-only value; no endian helper, as in
        // `crate::encoding`).
        let head =
            (0..8).fold(0u64, |acc, i| acc << 8 | u64::from(bytes.get(i).copied().unwrap_or(0)));
        let repr = if bytes.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            Repr::Inline { len: bytes.len() as u8, buf }
        } else {
            Repr::Heap(bytes.into())
        };
        IxKey { head, repr }
    }

    /// The key of `len <= 8` bytes whose head is `head` (its bytes beyond `len` are zero).
    #[inline]
    pub fn from_head(head: u64, len: usize) -> IxKey {
        let len = len.min(8);
        let mut buf = [0u8; INLINE];
        for (i, b) in buf.iter_mut().enumerate().take(len) {
            *b = (head >> (56 - 8 * i)) as u8;
        }
        IxKey { head, repr: Repr::Inline { len: len as u8, buf } }
    }

    /// The first eight bytes, big-endian, zero-padded (orders keys before their bytes do).
    #[inline]
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The key's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.repr {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)],
            Repr::Heap(b) => b,
        }
    }
}

impl PartialEq for IxKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.as_slice() == other.as_slice()
    }
}

impl Eq for IxKey {}

impl PartialEq<[u8]> for IxKey {
    #[inline]
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialOrd for IxKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IxKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match self.head.cmp(&other.head) {
            Ordering::Equal => self.as_slice().cmp(other.as_slice()),
            o => o,
        }
    }
}

impl fmt::Debug for IxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IxKey(")?;
        for b in self.as_slice() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_key_comes_back_from_its_head() {
        for len in 0..=8 {
            let b: Vec<u8> = (0..len).map(|i| 0xa0 + i as u8).collect();
            let k = IxKey::new(&b);
            assert_eq!(IxKey::from_head(k.head(), len), k, "len {len}");
        }
    }

    #[test]
    fn short_and_long_keys_keep_their_bytes() {
        for len in [0, 1, 7, 8, 9, 22, 23, 100] {
            let b: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            assert_eq!(IxKey::new(&b).as_slice(), &b[..], "len {len}");
        }
    }

    #[test]
    fn prefixes_and_zero_bytes_order_as_byte_strings() {
        // Zero padding in `head` must not make a key equal to its extension by zeros.
        let keys: [&[u8]; 6] = [b"", b"\0", b"ab", b"ab\0", b"ab\0\0\0\0\0\0", b"ab\0\0\0\0\0\0\0"];
        for a in keys {
            for b in keys {
                assert_eq!(IxKey::new(a).cmp(&IxKey::new(b)), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn order_and_equality_are_the_byte_order(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..30),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..30),
        ) {
            let (x, y) = (IxKey::new(&a), IxKey::new(&b));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(x == y, a == b);
        }
    }
}
