//! Order-preserving ("memcomparable") byte encoding of key tuples, shared by the engines.
//!
//! # Invariants
//! - E1 (order): for tuples `a`, `b` of values whose types agree column by column,
//!   `encode(a) < encode(b)` (bytewise) iff `a < b` in [`Value`]'s order.
//! - E2 (prefix-free per component): the encoding of a value is never a proper prefix of the
//!   encoding of another value of the same type, so a byte string starts with `encode(p)` iff its
//!   first `p.len()` components equal `p`. This is what makes prefix bounds exact.
//!
//! Per type: `i64` as 8 big-endian bytes with the sign bit flipped; `f64` as its 8 big-endian bits
//! with the sign bit flipped for non-negative numbers and all bits flipped for negative ones
//! (this reproduces `total_cmp`); bytes and strings with every `0x00` escaped as `0x00 0xFF` and a
//! `0x00 0x01` terminator. The encoding carries no type tags: the schema fixes each column's type.

use std::ops::Bound;

use crate::value::Value;

/// Appends `v`'s encoding to `out`.
pub(crate) fn encode_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::I64(x) => push_u64(out, (*x as u64) ^ (1 << 63)),
        Value::F64(x) => {
            let bits = x.to_bits();
            let key = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
            push_u64(out, key);
        }
        Value::Bytes(b) => push_escaped(out, b),
        Value::Str(s) => push_escaped(out, s.as_bytes()),
    }
}

/// The encoding of a tuple of values.
pub(crate) fn encode_key<'a>(values: impl IntoIterator<Item = &'a Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for v in values {
        encode_value(&mut out, v);
    }
    out
}

fn push_u64(out: &mut Vec<u8>, x: u64) {
    // Most significant byte first, so that byte order is numeric order (no `to_be_bytes`: the
    // workspace denies endian-named helpers to keep on-media byte order explicit).
    for shift in (0..8).rev() {
        out.push((x >> (shift * 8)) as u8);
    }
}

fn push_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.push(0);
    out.push(1);
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None` when
/// there is none (`prefix` is empty or all `0xFF`).
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// A range of encoded keys, built from prefix bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ByteRange {
    /// Lower bound.
    pub lower: Bound<Vec<u8>>,
    /// Upper bound.
    pub upper: Bound<Vec<u8>>,
}

impl ByteRange {
    /// Every key.
    pub fn all() -> Self {
        ByteRange { lower: Bound::Unbounded, upper: Bound::Unbounded }
    }

    /// The keys whose leading components lie within the prefix bounds: `Included(p)` as a lower
    /// bound admits every key starting with `p` and above, `Excluded(p)` only keys above all of
    /// those; symmetrically for the upper bound.
    pub fn from_prefix_bounds(lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> Self {
        let lower = match lower {
            Bound::Included(p) => Bound::Included(p),
            Bound::Excluded(p) => match prefix_successor(&p) {
                Some(s) => Bound::Included(s),
                // Nothing sorts after every extension of an all-0xFF prefix: empty range.
                None => return ByteRange::empty(),
            },
            Bound::Unbounded => Bound::Unbounded,
        };
        let upper = match upper {
            Bound::Included(p) => match prefix_successor(&p) {
                Some(s) => Bound::Excluded(s),
                None => Bound::Unbounded,
            },
            Bound::Excluded(p) => Bound::Excluded(p),
            Bound::Unbounded => Bound::Unbounded,
        };
        ByteRange { lower, upper }
    }

    /// An empty range.
    pub fn empty() -> Self {
        ByteRange { lower: Bound::Excluded(Vec::new()), upper: Bound::Excluded(Vec::new()) }
    }

    /// Every key starting with `prefix`.
    pub fn prefix(prefix: Vec<u8>) -> Self {
        ByteRange::from_prefix_bounds(Bound::Included(prefix.clone()), Bound::Included(prefix))
    }

    /// Whether the range holds no key. `BTreeMap::range` panics on such ranges when the bounds
    /// are inverted, so callers test this first.
    pub fn is_empty(&self) -> bool {
        match (&self.lower, &self.upper) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b))
            | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
            (Bound::Unbounded, Bound::Excluded(b)) => b.is_empty(),
            _ => false,
        }
    }

    /// Whether `k` lies in the range.
    pub fn contains(&self, k: &[u8]) -> bool {
        let above = match &self.lower {
            Bound::Included(a) => k >= a.as_slice(),
            Bound::Excluded(a) => k > a.as_slice(),
            Bound::Unbounded => true,
        };
        let below = match &self.upper {
            Bound::Included(b) => k <= b.as_slice(),
            Bound::Excluded(b) => k < b.as_slice(),
            Bound::Unbounded => true,
        };
        above && below
    }

    /// The bounds as borrowed slices, for `BTreeMap::range`. Callers must check
    /// [`ByteRange::is_empty`] first.
    pub fn as_slices(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (as_slice(&self.lower), as_slice(&self.upper))
    }

    /// The range narrowed to `[lower, k]` (ascending scan stopped at `k`) or `[k, upper]`.
    pub fn narrowed(&self, k: &[u8], ascending: bool) -> Self {
        if ascending {
            ByteRange { lower: self.lower.clone(), upper: Bound::Included(k.to_vec()) }
        } else {
            ByteRange { lower: Bound::Included(k.to_vec()), upper: self.upper.clone() }
        }
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same_type_values() -> impl Strategy<Value = (Value, Value)> {
        prop_oneof![
            (any::<i64>(), any::<i64>()).prop_map(|(a, b)| (Value::I64(a), Value::I64(b))),
            (any::<f64>(), any::<f64>()).prop_map(|(a, b)| (Value::F64(a), Value::F64(b))),
            (
                proptest::collection::vec(0u8..4, 0..5),
                proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xFF)], 0..5)
            )
                .prop_map(|(a, b)| (Value::Bytes(a), Value::Bytes(b))),
            ("[a-c\u{0}]{0,4}", "[a-c\u{0}]{0,4}")
                .prop_map(|(a, b)| (Value::Str(a), Value::Str(b))),
        ]
    }

    proptest! {
        #[test]
        fn order_preserved(pair in same_type_values(), tail in any::<i64>()) {
            let (a, b) = pair;
            prop_assert_eq!(encode_key([&a]).cmp(&encode_key([&b])), a.cmp(&b));
            // E1 over tuples, E2 through a trailing component.
            let t = Value::I64(tail);
            prop_assert_eq!(encode_key([&a, &t]).cmp(&encode_key([&b, &t])), a.cmp(&b));
            if a != b {
                prop_assert!(!encode_key([&b, &t]).starts_with(&encode_key([&a])));
            }
        }
    }

    #[test]
    fn special_floats_and_ints() {
        let vals = [
            Value::F64(-f64::NAN),
            Value::F64(f64::NEG_INFINITY),
            Value::F64(-1.5),
            Value::F64(-0.0),
            Value::F64(0.0),
            Value::F64(f64::MIN_POSITIVE),
            Value::F64(f64::INFINITY),
            Value::F64(f64::NAN),
        ];
        for w in vals.windows(2) {
            if let [a, b] = w {
                assert!(encode_key([a]) < encode_key([b]), "{a} < {b}");
            }
        }
        assert!(encode_key([&Value::I64(-1)]) < encode_key([&Value::I64(0)]));
        assert!(encode_key([&Value::I64(i64::MIN)]) < encode_key([&Value::I64(-1)]));
    }

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_successor(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        let p = encode_key([&Value::I64(5)]);
        let ext = encode_key([&Value::I64(5), &Value::I64(9)]);
        let r =
            ByteRange::from_prefix_bounds(Bound::Included(p.clone()), Bound::Included(p.clone()));
        assert!(r.contains(&ext) && r.contains(&p));
        let r = ByteRange::from_prefix_bounds(Bound::Excluded(p.clone()), Bound::Unbounded);
        assert!(!r.contains(&ext));
        let r = ByteRange::from_prefix_bounds(Bound::Unbounded, Bound::Excluded(p));
        assert!(!r.contains(&ext));
        assert!(ByteRange::empty().is_empty());
        assert!(!ByteRange::all().is_empty());
    }
}
