//! Reads through the write buffer: a transaction's own writes overlaid on the committed data
//! it sees at its snapshot.
//!
//! # Invariants
//! - O1: [`get`] returns the buffered image of the key if the transaction wrote it (`None` if
//!   it deleted it), else the committed row visible at the snapshot.
//! - O2: [`scan`] returns, in the scan's order, the rows of the merged view whose key on the
//!   access path lies in the range and that pass every filter, at most `limit`: buffered live
//!   rows, plus committed rows whose primary key the transaction did not write. The limit is
//!   applied after merging and filtering.
//! - O3: [`Scanned::examined`] is the range the scan depended on: the requested range, or, when
//!   the limit stopped the scan, the part up to (ascending) or from (descending) the key of the
//!   last row returned; empty for `limit == 0`. Recording it (not the whole range) keeps a
//!   limited scan from conflicting with writes beyond what it returned.
//!
//! # Ordering and concurrency
//! Reads the engine's [`Committed`] view, which the caller keeps stable (C4).

use std::borrow::Cow;

use super::Committed;
use super::writes::WriteSet;
use crate::encoding::ByteRange;
use crate::error::Result;
use crate::query::{Direction, Filter, LoweredScan, matches_all};
use crate::schema::Table;
use crate::value::Row;

/// The result of a [`scan`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Scanned {
    /// The rows, in scan order.
    pub rows: Vec<Row>,
    /// The range the result depends on (O3).
    pub examined: ByteRange,
}

/// The row with primary key `pk` in the transaction's view (O1).
pub(crate) fn get<C: Committed + ?Sized>(
    writes: &WriteSet,
    committed: &C,
    table: &Table,
    pk: &[u8],
    snapshot: u64,
) -> Result<Option<Row>> {
    if let Some(w) = writes.get(table.name(), pk) {
        return Ok(w.row.clone());
    }
    Ok(committed.get(table, pk, snapshot)?.map(Cow::into_owned))
}

/// Scans the transaction's view (O2, O3).
pub(crate) fn scan<C: Committed + ?Sized>(
    writes: &WriteSet,
    committed: &C,
    table: &Table,
    scan: &LoweredScan,
    filters: &[Filter],
    snapshot: u64,
) -> Result<Scanned> {
    let range = &scan.range;
    if scan.limit == Some(0) || range.is_empty() {
        return Ok(Scanned { rows: Vec::new(), examined: ByteRange::empty() });
    }
    let asc = scan.direction == Direction::Ascending;
    let mut buffered =
        writes.in_range(table, scan.path, range, scan.direction)?.into_iter().peekable();
    let name = table.name();
    let mut committed = committed
        .range(table, scan.path, range, scan.direction, snapshot)?
        .filter(|v| !v.as_ref().is_ok_and(|v| writes.contains(name, &v.pk)))
        .peekable();

    let mut rows = Vec::new();
    loop {
        let take_buffered = match (committed.peek(), buffered.peek()) {
            (None, None) => break,
            // An engine error is taken (and returned) as soon as it is next in line.
            (Some(Err(_)), _) | (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(Ok(c)), Some((bk, _))) => {
                if asc {
                    bk.as_slice() < &*c.key
                } else {
                    bk.as_slice() > &*c.key
                }
            }
        };
        let (key, row): (Cow<'_, [u8]>, Cow<'_, Row>) = if take_buffered {
            let Some((k, r)) = buffered.next() else { break };
            (Cow::Owned(k), Cow::Borrowed(r))
        } else {
            let Some(v) = committed.next() else { break };
            let v = v?;
            (v.key, v.row)
        };
        if matches_all(filters, &row) {
            rows.push(row.into_owned());
            if scan.limit.is_some_and(|n| rows.len() >= n) {
                return Ok(Scanned { rows, examined: range.narrowed(&key, asc) });
            }
        }
    }
    Ok(Scanned { rows, examined: range.clone() })
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;
    use std::sync::Arc;

    use super::*;
    use crate::engine::common::testing::{MapView, row, table};
    use crate::query::AccessPath;
    use crate::value::Value;

    fn lowered(path: AccessPath, direction: Direction, limit: Option<usize>) -> LoweredScan {
        LoweredScan { path, range: ByteRange::all(), direction, limit }
    }

    fn ks(rows: &[Row]) -> Vec<i64> {
        rows.iter().filter_map(|r| r[0].as_i64()).collect()
    }

    /// Committed rows 1, 3, 5 (snapshot 1); the transaction updates 3, deletes 5, inserts 2
    /// and 6.
    fn fixture() -> (Arc<Table>, MapView, WriteSet) {
        let t = Arc::new(table());
        let mut view = MapView::new(&t);
        for k in [1, 3, 5] {
            view.commit(row(k, k * 10, &format!("c{k}")), 1);
        }
        let mut w = WriteSet::new();
        let put = |w: &mut WriteSet, r: Row, ins| w.buffer(&t, t.encode_pk(&r), Some(r), ins);
        put(&mut w, row(3, 99, "own3"), false);
        put(&mut w, row(2, 20, "own2"), true);
        put(&mut w, row(6, 5, "own6"), true);
        w.buffer(&t, t.encode_pk(&row(5, 0, "")), None, false);
        (t, view, w)
    }

    #[test]
    fn get_prefers_own_writes() {
        let (t, view, w) = fixture();
        let pk = |k: i64| t.encode_pk(&row(k, 0, ""));
        assert_eq!(get(&w, &view, &t, &pk(3), 1).ok(), Some(Some(row(3, 99, "own3"))));
        assert_eq!(get(&w, &view, &t, &pk(5), 1).ok(), Some(None));
        assert_eq!(get(&w, &view, &t, &pk(1), 1).ok(), Some(Some(row(1, 10, "c1"))));
        // At snapshot 0 nothing committed is visible, own writes still are.
        assert_eq!(get(&w, &view, &t, &pk(1), 0).ok(), Some(None));
        assert_eq!(get(&w, &view, &t, &pk(2), 0).ok(), Some(Some(row(2, 20, "own2"))));
    }

    #[test]
    fn scan_merges_in_order_both_ways() {
        let (t, view, w) = fixture();
        let s =
            |path, dir| scan(&w, &view, &t, &lowered(path, dir, None), &[], 1).expect("scan").rows;
        assert_eq!(ks(&s(AccessPath::Primary, Direction::Ascending)), [1, 2, 3, 6]);
        assert_eq!(ks(&s(AccessPath::Primary, Direction::Descending)), [6, 3, 2, 1]);
        // by_a: 1->10, 2->20, 3->99 (own update moved it), 6->5.
        assert_eq!(ks(&s(AccessPath::Index(0), Direction::Ascending)), [6, 1, 2, 3]);
        assert_eq!(ks(&s(AccessPath::Index(0), Direction::Descending)), [3, 2, 1, 6]);
    }

    #[test]
    fn limit_applies_after_merge_and_filter_and_narrows_the_range() {
        let (t, view, w) = fixture();
        let filter =
            Filter { column: 1, lower: Bound::Included(Value::I64(15)), upper: Bound::Unbounded };
        let out = scan(
            &w,
            &view,
            &t,
            &lowered(AccessPath::Primary, Direction::Ascending, Some(1)),
            &[filter],
            1,
        )
        .expect("scan");
        assert_eq!(ks(&out.rows), [2]);
        let pk2 = t.encode_pk(&row(2, 0, ""));
        assert_eq!(out.examined, ByteRange::all().narrowed(&pk2, true));
        let out = scan(
            &w,
            &view,
            &t,
            &lowered(AccessPath::Primary, Direction::Descending, Some(2)),
            &[],
            1,
        )
        .expect("scan");
        assert_eq!(ks(&out.rows), [6, 3]);
        let pk3 = t.encode_pk(&row(3, 0, ""));
        assert_eq!(out.examined, ByteRange::all().narrowed(&pk3, false));
        // No limit reached: the whole range; limit 0: nothing examined.
        let all = scan(
            &w,
            &view,
            &t,
            &lowered(AccessPath::Primary, Direction::Ascending, Some(10)),
            &[],
            1,
        )
        .expect("scan");
        assert_eq!(all.examined, ByteRange::all());
        let none = scan(
            &w,
            &view,
            &t,
            &lowered(AccessPath::Primary, Direction::Ascending, Some(0)),
            &[],
            1,
        )
        .expect("scan");
        assert!(none.rows.is_empty() && none.examined.is_empty());
    }

    #[test]
    fn engine_errors_surface() {
        let (t, mut view, w) = fixture();
        view.fail_ranges = true;
        assert!(
            scan(&w, &view, &t, &lowered(AccessPath::Primary, Direction::Ascending, None), &[], 1)
                .is_err()
        );
    }
}
