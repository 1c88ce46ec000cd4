//! Queries: predicates, projections and ordered scans, and how they are lowered for engines.
//!
//! # Invariants
//! - A query is checked against the schema before an engine sees it: every column and index
//!   exists and every operand has its column's type; engines receive column positions and
//!   encoded key ranges ([`crate::encoding`]) only.
//! - `select` returns rows in primary-key order; `scan` returns them in the order of its access
//!   path (primary key, or index key then primary key), ascending or descending.
//! - A scan bound is a key *prefix* (see [`crate::Key`]); ranges whose lower bound lies above
//!   their upper bound are empty, never an error.

use std::ops::{Bound, RangeBounds};

use crate::encoding::{ByteRange, encode_key};
use crate::error::{Result, SchemaError};
use crate::schema::{PRIMARY, Table};
use crate::value::{Key, Row, Value};

/// A condition on one column. A `select` takes a conjunction (a slice) of them.
///
/// ```
/// use ferrite::Predicate;
/// let ps = [Predicate::eq("warehouse", 3), Predicate::range("amount", 10.0..=20.0)];
/// assert_eq!(ps[0].column(), "warehouse");
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Predicate {
    /// The column equals the value.
    Eq(String, Value),
    /// The column lies between the bounds.
    Range(String, Bound<Value>, Bound<Value>),
}

impl Predicate {
    /// `column = value`.
    pub fn eq(column: impl Into<String>, value: impl Into<Value>) -> Self {
        Predicate::Eq(column.into(), value.into())
    }

    /// `column` within `range` (any Rust range: `1..5`, `..=9`, `"a".."m"`).
    pub fn range<V, R>(column: impl Into<String>, range: R) -> Self
    where
        V: Into<Value> + Clone,
        R: RangeBounds<V>,
    {
        let conv = |b: Bound<&V>| b.map(|v| v.clone().into());
        Predicate::Range(column.into(), conv(range.start_bound()), conv(range.end_bound()))
    }

    /// The column the predicate tests.
    pub fn column(&self) -> &str {
        match self {
            Predicate::Eq(c, _) | Predicate::Range(c, _, _) => c,
        }
    }
}

/// Which columns a query returns.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Projection {
    /// Every column, in schema order.
    #[default]
    All,
    /// The named columns, in the given order (a column may appear twice).
    Columns(Vec<String>),
}

impl Projection {
    /// The named columns.
    pub fn columns<I, S>(columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Projection::Columns(columns.into_iter().map(Into::into).collect())
    }

    /// Resolves the projection to column positions (`None`: all).
    pub(crate) fn resolve(&self, table: &Table) -> Result<Option<Vec<usize>>> {
        match self {
            Projection::All => Ok(None),
            Projection::Columns(cols) => {
                Ok(Some(cols.iter().map(|c| table.column(c)).collect::<Result<_, _>>()?))
            }
        }
    }
}

/// Applies resolved projection positions to rows.
pub(crate) fn project(rows: Vec<Row>, positions: Option<&[usize]>) -> Vec<Row> {
    match positions {
        None => rows,
        Some(pos) => rows
            .into_iter()
            .map(|r| pos.iter().filter_map(|&p| r.get(p).cloned()).collect())
            .collect(),
    }
}

/// Scan order.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Smallest key first.
    #[default]
    Ascending,
    /// Largest key first.
    Descending,
}

/// An ordered range scan over the primary key or a secondary index.
///
/// Bounds are key prefixes ([`Key`]): on an index over `(w, d, o)`, `.range((1, 2)..=(1, 2))`
/// returns every row with `w = 1, d = 2`, ordered by `o` and then by primary key.
///
/// ```
/// use ferrite::{Direction, Scan};
/// // The 10 largest primary keys below 1000, largest first (YCSB-E style, reversed).
/// let s = Scan::primary().range(..1000).direction(Direction::Descending).limit(10);
/// // Every entry of index `by_wd` for w = 1, d = 2.
/// let t = Scan::index("by_wd").prefix((1, 2));
/// # let _ = (s, t);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    index: Option<String>,
    lower: Bound<Key>,
    upper: Bound<Key>,
    direction: Direction,
    limit: Option<usize>,
    projection: Projection,
}

impl Scan {
    /// A scan over the primary key: everything, ascending, no limit, all columns.
    pub fn primary() -> Self {
        Scan {
            index: None,
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            direction: Direction::Ascending,
            limit: None,
            projection: Projection::All,
        }
    }

    /// A scan over the secondary index `name`.
    pub fn index(name: impl Into<String>) -> Self {
        Scan { index: Some(name.into()), ..Scan::primary() }
    }

    /// Restricts the scan to a range of keys (prefixes).
    pub fn range<K, R>(mut self, range: R) -> Self
    where
        K: Into<Key> + Clone,
        R: RangeBounds<K>,
    {
        self.lower = range.start_bound().map(|k| k.clone().into());
        self.upper = range.end_bound().map(|k| k.clone().into());
        self
    }

    /// Sets the lower bound alone.
    pub fn lower(mut self, bound: Bound<Key>) -> Self {
        self.lower = bound;
        self
    }

    /// Sets the upper bound alone.
    pub fn upper(mut self, bound: Bound<Key>) -> Self {
        self.upper = bound;
        self
    }

    /// Restricts the scan to keys starting with `prefix` (same as `range(p..=p)`).
    pub fn prefix(self, prefix: impl Into<Key>) -> Self {
        let p = prefix.into();
        self.lower(Bound::Included(p.clone())).upper(Bound::Included(p))
    }

    /// Sets the direction.
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Largest key first (same as `direction(Direction::Descending)`).
    pub fn descending(self) -> Self {
        self.direction(Direction::Descending)
    }

    /// Returns at most `n` rows.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Returns only the given columns.
    pub fn columns<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.projection = Projection::columns(columns);
        self
    }

    /// Sets the projection.
    pub fn projection(mut self, projection: Projection) -> Self {
        self.projection = projection;
        self
    }

    /// The projection.
    pub(crate) fn projection_ref(&self) -> &Projection {
        &self.projection
    }

    /// Checks the scan against `table` and lowers it for an engine.
    pub(crate) fn lower_for(&self, table: &Table) -> Result<LoweredScan> {
        let (path, columns, index_name) = match &self.index {
            None => (AccessPath::Primary, vec![table.pk], PRIMARY),
            Some(name) => {
                let ix = table.index(name)?;
                let cols = table.indexes.get(ix).map(|i| i.columns.clone()).unwrap_or_default();
                (AccessPath::Index(ix), cols, name.as_str())
            }
        };
        let encode = |key: &Key| -> Result<Vec<u8>> {
            if key.len() > columns.len() {
                return Err(SchemaError::KeyArity {
                    table: table.name().to_owned(),
                    index: index_name.to_owned(),
                    max: columns.len(),
                    found: key.len(),
                }
                .into());
            }
            for (v, &c) in key.values().iter().zip(&columns) {
                table.check_value(c, v)?;
            }
            Ok(encode_key(key.values()))
        };
        let lower = map_bound(self.lower.as_ref(), encode)?;
        let upper = map_bound(self.upper.as_ref(), encode)?;
        Ok(LoweredScan {
            path,
            range: ByteRange::from_prefix_bounds(lower, upper),
            direction: self.direction,
            limit: self.limit,
        })
    }
}

fn map_bound<T, U>(b: Bound<&T>, f: impl FnOnce(&T) -> Result<U>) -> Result<Bound<U>> {
    Ok(match b {
        Bound::Included(v) => Bound::Included(f(v)?),
        Bound::Excluded(v) => Bound::Excluded(f(v)?),
        Bound::Unbounded => Bound::Unbounded,
    })
}

/// Which ordered structure a scan walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessPath {
    /// The primary key.
    Primary,
    /// Secondary index number `n` of [`Table::indexes`].
    Index(usize),
}

/// A scan checked against the schema.
#[derive(Clone, Debug)]
pub(crate) struct LoweredScan {
    pub path: AccessPath,
    pub range: ByteRange,
    pub direction: Direction,
    pub limit: Option<usize>,
}

/// A checked predicate: a column position and value bounds (`Eq` is `[v, v]`).
#[derive(Clone, Debug)]
pub(crate) struct Filter {
    pub column: usize,
    pub lower: Bound<Value>,
    pub upper: Bound<Value>,
}

impl Filter {
    /// Whether the row satisfies the predicate.
    pub fn matches(&self, row: &[Value]) -> bool {
        let Some(v) = row.get(self.column) else { return false };
        let above = match &self.lower {
            Bound::Included(l) => v >= l,
            Bound::Excluded(l) => v > l,
            Bound::Unbounded => true,
        };
        let below = match &self.upper {
            Bound::Included(u) => v <= u,
            Bound::Excluded(u) => v < u,
            Bound::Unbounded => true,
        };
        above && below
    }

    fn eq_value(&self) -> Option<&Value> {
        match (&self.lower, &self.upper) {
            (Bound::Included(a), Bound::Included(b)) if a == b => Some(a),
            _ => None,
        }
    }
}

/// Whether the row satisfies every filter.
pub(crate) fn matches_all(filters: &[Filter], row: &[Value]) -> bool {
    filters.iter().all(|f| f.matches(row))
}

/// A `select` planned for an engine: an access path and range, plus every predicate as a filter
/// (the range only narrows what is read; the filters decide).
#[derive(Clone, Debug)]
pub(crate) struct SelectPlan {
    pub scan: LoweredScan,
    pub filters: Vec<Filter>,
}

/// Checks the predicates and picks an access path: an equality or range on the primary key;
/// else the index whose leading columns are covered best by equalities (plus a range on the next
/// column); else a full scan of the primary key.
pub(crate) fn plan_select(table: &Table, predicates: &[Predicate]) -> Result<SelectPlan> {
    let mut filters = Vec::with_capacity(predicates.len());
    for p in predicates {
        let column = table.column(p.column())?;
        let (lower, upper) = match p {
            Predicate::Eq(_, v) => (Bound::Included(v.clone()), Bound::Included(v.clone())),
            Predicate::Range(_, lo, hi) => (lo.clone(), hi.clone()),
        };
        for b in [&lower, &upper] {
            if let Bound::Included(v) | Bound::Excluded(v) = b {
                table.check_value(column, v)?;
            }
        }
        filters.push(Filter { column, lower, upper });
    }

    let on = |col: usize| filters.iter().filter(move |f| f.column == col);
    let eq_on = |col: usize| on(col).find_map(Filter::eq_value);
    let range_on = |col: usize| on(col).find(|f| f.eq_value().is_none());

    let prefix_range = |eqs: Vec<Value>, range: Option<&Filter>| {
        let with = |b: &Bound<Value>, unbounded: Bound<Vec<u8>>| match b {
            Bound::Included(v) => Bound::Included(encode_key(eqs.iter().chain([v]))),
            Bound::Excluded(v) => Bound::Excluded(encode_key(eqs.iter().chain([v]))),
            Bound::Unbounded => unbounded,
        };
        let whole = encode_key(&eqs);
        match range {
            Some(f) => ByteRange::from_prefix_bounds(
                with(&f.lower, Bound::Included(whole.clone())),
                with(&f.upper, Bound::Included(whole)),
            ),
            None => ByteRange::from_prefix_bounds(
                Bound::Included(whole.clone()),
                Bound::Included(whole),
            ),
        }
    };

    let scan =
        |path, range| LoweredScan { path, range, direction: Direction::Ascending, limit: None };

    if let Some(v) = eq_on(table.pk) {
        let range = prefix_range(vec![v.clone()], None);
        return Ok(SelectPlan { scan: scan(AccessPath::Primary, range), filters });
    }
    if let Some(f) = range_on(table.pk) {
        let range = prefix_range(Vec::new(), Some(f));
        return Ok(SelectPlan { scan: scan(AccessPath::Primary, range), filters });
    }

    // (score, index number, equality prefix, range on the next column)
    let mut best: Option<(usize, usize, Vec<Value>, Option<&Filter>)> = None;
    for (n, ix) in table.indexes.iter().enumerate() {
        let eqs: Vec<Value> = ix.columns.iter().map_while(|&c| eq_on(c).cloned()).collect();
        let range = ix.columns.get(eqs.len()).and_then(|&c| range_on(c));
        if eqs.is_empty() && range.is_none() {
            continue;
        }
        let full_unique = ix.unique && eqs.len() == ix.columns.len();
        let score = 4 * eqs.len() + 2 * usize::from(range.is_some()) + usize::from(full_unique);
        if best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, n, eqs, range));
        }
    }
    let plan = match best {
        Some((_, n, eqs, range)) => scan(AccessPath::Index(n), prefix_range(eqs, range)),
        None => scan(AccessPath::Primary, ByteRange::all()),
    };
    Ok(SelectPlan { scan: plan, filters })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TableSchema;
    use crate::value::Type;

    fn table() -> Table {
        Table::new(
            TableSchema::new("t")
                .column("k", Type::I64)
                .column("a", Type::I64)
                .column("b", Type::Str)
                .primary_key("k")
                .index("by_a", ["a"])
                .index("by_ab", ["a", "b"]),
        )
        .expect("valid")
    }

    #[test]
    fn plans_access_paths() {
        let t = table();
        let p = plan_select(&t, &[Predicate::eq("k", 1), Predicate::eq("a", 2)]).expect("plan");
        assert_eq!(p.scan.path, AccessPath::Primary);
        let p =
            plan_select(&t, &[Predicate::eq("a", 1), Predicate::range("b", "x"..)]).expect("plan");
        assert_eq!(p.scan.path, AccessPath::Index(1));
        let p = plan_select(&t, &[Predicate::range("a", 1..4)]).expect("plan");
        assert!(matches!(p.scan.path, AccessPath::Index(_)));
        let p = plan_select(&t, &[Predicate::eq("b", "x")]).expect("plan");
        assert_eq!(p.scan.path, AccessPath::Primary);
        assert_eq!(p.scan.range, ByteRange::all());
        assert!(plan_select(&t, &[Predicate::eq("a", "x")]).is_err());
        assert!(plan_select(&t, &[Predicate::eq("zz", 1)]).is_err());
    }

    #[test]
    fn lowers_scans() {
        let t = table();
        assert!(Scan::index("by_a").prefix((1, 2)).lower_for(&t).is_err());
        assert!(Scan::index("by_ab").prefix((1, "x")).lower_for(&t).is_ok());
        assert!(Scan::index("by_ab").prefix(("x", 1)).lower_for(&t).is_err());
        assert!(Scan::index("nope").lower_for(&t).is_err());
        assert!(
            Scan::primary()
                .range(Key::from(5)..Key::from(1))
                .lower_for(&t)
                .is_ok_and(|s| s.range.is_empty())
        );
    }
}
