//! Typed values, rows and keys.
//!
//! # Invariants
//! - A [`Value`] has one of the four column [`Type`]s; there is no NULL (every column of every
//!   row holds a value of the column's type).
//! - The order of values ([`Ord`]) is the order every engine must use for keys and scans: `i64`
//!   numerically (negative before positive), `f64` by IEEE 754 `totalOrder` (`-NaN < -inf < ... <
//!   -0.0 < +0.0 < ... < +inf < NaN`), bytes and strings lexicographically by byte. Equality
//!   agrees with that order, so `F64(NaN) == F64(NaN)` and `F64(-0.0) != F64(0.0)`.
//! - Values of different types never meet in a checked operation (the schema layer rejects them);
//!   across types the order is `I64 < F64 < Bytes < Str`, only so that the order is total.
//! - A [`Key`] is a tuple of values compared lexicographically; when a key bounds a scan it is a
//!   *prefix*: only as many leading columns are compared as the key has (see [`crate::Scan`]).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// The type of a column.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A signed 64-bit integer.
    I64,
    /// A 64-bit IEEE 754 float, ordered by `totalOrder`.
    F64,
    /// A byte string.
    Bytes,
    /// A UTF-8 string.
    Str,
}

impl Type {
    /// Stable lower-case name (`i64`, `f64`, `bytes`, `str`).
    pub fn name(self) -> &'static str {
        match self {
            Type::I64 => "i64",
            Type::F64 => "f64",
            Type::Bytes => "bytes",
            Type::Str => "str",
        }
    }

    /// Whether a primary key may have this type (`i64`, `bytes` and `str` may; `f64` may not).
    pub fn can_be_primary_key(self) -> bool {
        !matches!(self, Type::F64)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One typed value: a cell of a row, a key component, or a predicate operand.
///
/// Convert from Rust values with `From`: `Value::from(7)`, `Value::from(2.5)`,
/// `Value::from("text")`, `Value::from(b"raw".to_vec())`.
///
/// ```
/// use ferrite::Value;
/// assert!(Value::from(-5) < Value::from(3));            // numeric, not byte order
/// assert!(Value::from("apple") < Value::from("banana"));
/// assert_eq!(Value::from(7).as_i64(), Some(7));
/// assert_eq!(Value::from("x").as_i64(), None);
/// ```
#[non_exhaustive]
#[derive(Clone, Debug)]
pub enum Value {
    /// A signed 64-bit integer.
    I64(i64),
    /// A 64-bit float.
    F64(f64),
    /// A byte string.
    Bytes(Vec<u8>),
    /// A UTF-8 string.
    Str(String),
}

/// A row: one value per column, in the order the table's schema declares the columns.
pub type Row = Vec<Value>;

impl Value {
    /// The value's type.
    pub fn ty(&self) -> Type {
        match self {
            Value::I64(_) => Type::I64,
            Value::F64(_) => Type::F64,
            Value::Bytes(_) => Type::Bytes,
            Value::Str(_) => Type::Str,
        }
    }

    /// The integer, if this is an `I64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::I64(v) => Some(*v),
            _ => None,
        }
    }

    /// The float, if this is an `F64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            _ => None,
        }
    }

    /// The bytes, if this is a `Bytes`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(v) => Some(v),
            _ => None,
        }
    }

    /// The string, if this is a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(v) => Some(v),
            _ => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Value::I64(_) => 0,
            Value::F64(_) => 1,
            Value::Bytes(_) => 2,
            Value::Str(_) => 3,
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Value::I64(a), Value::I64(b)) => a.cmp(b),
            (Value::F64(a), Value::F64(b)) => a.total_cmp(b),
            (Value::Bytes(a), Value::Bytes(b)) => a.cmp(b),
            (Value::Str(a), Value::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Value::I64(v) => v.hash(state),
            // Bit-pattern hashing agrees with `total_cmp` equality.
            Value::F64(v) => v.to_bits().hash(state),
            Value::Bytes(v) => v.hash(state),
            Value::Str(v) => v.hash(state),
        }
    }
}

impl fmt::Display for Value {
    /// Integers and floats as numbers, strings quoted, bytes as `x'0a1b'`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v:?}"),
            Value::Str(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => {
                f.write_str("x'")?;
                for b in v {
                    write!(f, "{b:02x}")?;
                }
                f.write_str("'")
            }
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::I64(v)
    }
}

impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::I64(i64::from(v))
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::I64(i64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::F64(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Bytes(v.to_vec())
    }
}

impl<const N: usize> From<&[u8; N]> for Value {
    fn from(v: &[u8; N]) -> Self {
        Value::Bytes(v.to_vec())
    }
}

/// Builds a [`Row`] from Rust values: `row![1, "name", 2.5]` is
/// `vec![Value::from(1), Value::from("name"), Value::from(2.5)]`.
///
/// ```
/// use ferrite::{Value, row};
/// assert_eq!(row![7, "x"], vec![Value::I64(7), Value::Str("x".into())]);
/// ```
#[macro_export]
macro_rules! row {
    ($($v:expr),* $(,)?) => {
        vec![$($crate::Value::from($v)),*]
    };
}

/// A key: a tuple of values, used as a primary-key value, an index key, or a scan bound.
///
/// Keys compare lexicographically. As a scan bound a key is a **prefix**: a bound with `k`
/// values compares only the first `k` columns of the index key, so on an index over `(w, d, o)`
/// the range `Key::from((1, 2))..=Key::from((1, 2))` covers every entry with `w = 1, d = 2`.
///
/// ```
/// use ferrite::{Key, Value};
/// let k = Key::from((1, "a"));
/// assert_eq!(k.values(), &[Value::I64(1), Value::Str("a".into())]);
/// assert_eq!(Key::from(5).len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Vec<Value>);

impl Key {
    /// A key of the given values.
    pub fn new(values: Vec<Value>) -> Self {
        Key(values)
    }

    /// The empty key (as a lower bound: everything).
    pub fn empty() -> Self {
        Key(Vec::new())
    }

    /// The values.
    pub fn values(&self) -> &[Value] {
        &self.0
    }

    /// The values, by value.
    pub fn into_values(self) -> Vec<Value> {
        self.0
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the key has no values.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [single] = self.0.as_slice() {
            return write!(f, "{single}");
        }
        f.write_str("(")?;
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v}")?;
        }
        f.write_str(")")
    }
}

impl From<Vec<Value>> for Key {
    fn from(v: Vec<Value>) -> Self {
        Key(v)
    }
}

impl From<&[Value]> for Key {
    fn from(v: &[Value]) -> Self {
        Key(v.to_vec())
    }
}

impl From<Value> for Key {
    fn from(v: Value) -> Self {
        Key(vec![v])
    }
}

impl From<&Value> for Key {
    fn from(v: &Value) -> Self {
        Key(vec![v.clone()])
    }
}

macro_rules! key_from_scalar {
    ($($t:ty),*) => {$(
        impl From<$t> for Key {
            fn from(v: $t) -> Self {
                Key(vec![Value::from(v)])
            }
        }
    )*};
}
key_from_scalar!(i64, i32, u32, f64, &str, String, Vec<u8>, &[u8]);

impl<const N: usize> From<&[u8; N]> for Key {
    fn from(v: &[u8; N]) -> Self {
        Key(vec![Value::from(v)])
    }
}

impl<A: Into<Value>, B: Into<Value>> From<(A, B)> for Key {
    fn from((a, b): (A, B)) -> Self {
        Key(vec![a.into(), b.into()])
    }
}

impl<A: Into<Value>, B: Into<Value>, C: Into<Value>> From<(A, B, C)> for Key {
    fn from((a, b, c): (A, B, C)) -> Self {
        Key(vec![a.into(), b.into(), c.into()])
    }
}

impl<A: Into<Value>, B: Into<Value>, C: Into<Value>, D: Into<Value>> From<(A, B, C, D)> for Key {
    fn from((a, b, c, d): (A, B, C, D)) -> Self {
        Key(vec![a.into(), b.into(), c.into(), d.into()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_numeric_and_total() {
        assert!(Value::from(-1) < Value::from(0));
        assert!(Value::from(i64::MIN) < Value::from(i64::MAX));
        assert!(Value::from(-0.0) < Value::from(0.0));
        assert!(Value::from(f64::INFINITY) < Value::from(f64::NAN));
        assert_eq!(Value::from(f64::NAN), Value::from(f64::NAN));
        assert!(Value::from("a") < Value::from("ab"));
        assert!(Value::from(&b"\x00"[..]) < Value::from(&b"\x00\x00"[..]));
    }

    #[test]
    fn display() {
        assert_eq!(Value::from(b"\x0a\xff").to_string(), "x'0aff'");
        assert_eq!(Key::from((1, "a")).to_string(), "(1, \"a\")");
        assert_eq!(Key::from(3).to_string(), "3");
    }
}
