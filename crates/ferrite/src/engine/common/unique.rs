//! Primary-key and unique-index checks.
//!
//! # Invariants
//! - U1 (at each write, [`check_pk_free`], [`check_unique_in_view`]): an insert's primary key
//!   has no row in the transaction's view, and no other row in the view has the written row's
//!   values in a unique index. The probed unique ranges go into the read set, so a concurrent
//!   committer that takes the value makes validation fail.
//! - U2 (at commit, [`check_at_commit`], against the latest committed data): no key the
//!   transaction inserted (W2) was committed by another transaction after its snapshot, and no
//!   other row, as it will be after this commit (own writes first, else the latest committed
//!   row), holds a written row's values in a unique index. A violation is `DuplicateKey`.
//! - U3: both checks are constraints, not isolation: they run even when an engine switches
//!   validation off.
//!
//! # Ordering and concurrency
//! Reads the engine's view (stable, C4) and the transaction's buffers.

use std::borrow::Cow;
use std::sync::Arc;

use super::Committed;
use super::index::same_values_range;
use super::overlay;
use super::reads::ReadSet;
use super::writes::WriteSet;
use crate::error::{Error, Result};
use crate::query::{AccessPath, Direction, LoweredScan};
use crate::schema::{PRIMARY, Table};
use crate::value::{Key, Value};

/// `DuplicateKey` on the primary key of `row`.
pub(crate) fn duplicate_pk(table: &Table, row: &[Value]) -> Error {
    let key = table.pk_value(row).cloned().map(Key::from).unwrap_or_default();
    Error::DuplicateKey { table: table.name().to_owned(), index: PRIMARY.to_owned(), key }
}

/// `DuplicateKey` on unique index `index` for `row`'s values.
pub(crate) fn duplicate_index(table: &Table, index: usize, row: &[Value]) -> Error {
    let (name, values) = match table.indexes.get(index) {
        Some(ix) => (ix.name.clone(), table.index_values(ix, row)),
        None => (format!("#{index}"), Vec::new()),
    };
    Error::DuplicateKey { table: table.name().to_owned(), index: name, key: Key::new(values) }
}

/// U1, primary key: `DuplicateKey` if `pk` has a row in the transaction's view.
pub(crate) fn check_pk_free<C: Committed + ?Sized>(
    writes: &WriteSet,
    committed: &C,
    table: &Table,
    row: &[Value],
    pk: &[u8],
    snapshot: u64,
) -> Result<()> {
    match overlay::get(writes, committed, table, pk, snapshot)? {
        Some(_) => Err(duplicate_pk(table, row)),
        None => Ok(()),
    }
}

/// U1, unique indexes: `DuplicateKey` if a row other than `pk` holds `row`'s values in a unique
/// index of the transaction's view; records every probed range in `reads`.
pub(crate) fn check_unique_in_view<C: Committed + ?Sized>(
    reads: &mut ReadSet,
    writes: &WriteSet,
    committed: &C,
    table: &Arc<Table>,
    row: &[Value],
    pk: &[u8],
    snapshot: u64,
) -> Result<()> {
    for (i, _) in table.indexes.iter().enumerate().filter(|(_, ix)| ix.unique) {
        let scan = LoweredScan {
            path: AccessPath::Index(i),
            range: same_values_range(table, i, row)?,
            direction: Direction::Ascending,
            limit: None,
        };
        let found = overlay::scan(writes, committed, table, &scan, &[], snapshot)?;
        reads.range(table, scan.path, found.examined);
        if found.rows.iter().any(|holder| table.encode_pk(holder) != pk) {
            return Err(duplicate_index(table, i, row));
        }
    }
    Ok(())
}

/// U2: the written rows against the latest committed data.
pub(crate) fn check_at_commit<C: Committed + ?Sized>(
    writes: &WriteSet,
    committed: &C,
    snapshot: u64,
) -> Result<()> {
    for tw in writes.tables() {
        let table = &*tw.table;
        for (pk, w) in &tw.rows {
            let Some(row) = &w.row else { continue };
            if w.inserted
                && committed.latest_change(table, pk)?.is_some_and(|ts| ts > snapshot)
                && committed.latest_row(table, pk)?.is_some()
            {
                return Err(duplicate_pk(table, row));
            }
            for (i, ix) in table.indexes.iter().enumerate().filter(|(_, ix)| ix.unique) {
                let prefix = table.index_prefix(ix, row);
                let range = same_values_range(table, i, row)?;
                for other in committed.entries(table, AccessPath::Index(i), &range)? {
                    let other = other?;
                    if *other == **pk {
                        continue;
                    }
                    let current: Option<Cow<'_, _>> = match tw.rows.get(&*other) {
                        Some(own) => own.row.as_ref().map(Cow::Borrowed),
                        None => committed.latest_row(table, &other)?,
                    };
                    if current.is_some_and(|r| table.index_prefix(ix, &r) == prefix) {
                        return Err(duplicate_index(table, i, row));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::common::reads::ReadKind;
    use crate::engine::common::testing::{MapView, row, table};

    fn dup_on(r: Result<()>, index: &str) -> bool {
        matches!(r, Err(Error::DuplicateKey { index: i, .. }) if i == index)
    }

    #[test]
    fn in_view_checks_see_own_writes_and_record_probes() {
        let t = Arc::new(table());
        let mut v = MapView::new(&t);
        v.commit(row(1, 1, "x"), 1);
        let mut w = WriteSet::new();
        let mut reads = ReadSet::new(true);
        let r2 = row(2, 2, "y");
        let pk2 = t.encode_pk(&r2);
        assert!(check_pk_free(&w, &v, &t, &r2, &pk2, 1).is_ok());
        assert!(dup_on(
            check_pk_free(&w, &v, &t, &row(1, 0, ""), &t.encode_pk(&row(1, 0, "")), 1),
            PRIMARY
        ));
        // "x" is taken by committed row 1.
        let clash = row(2, 2, "x");
        assert!(dup_on(check_unique_in_view(&mut reads, &w, &v, &t, &clash, &pk2, 1), "by_b"));
        assert!(matches!(reads.iter().last().map(|r| &r.kind), Some(ReadKind::Range { .. })));
        // Once this transaction moves row 1 away from "x", the value is free in its view.
        let pk1 = t.encode_pk(&row(1, 0, ""));
        w.buffer(&t, pk1, Some(row(1, 1, "z")), false);
        assert!(check_unique_in_view(&mut reads, &w, &v, &t, &clash, &pk2, 1).is_ok());
        // A row never clashes with itself.
        assert!(
            check_unique_in_view(
                &mut reads,
                &w,
                &v,
                &t,
                &row(1, 1, "z"),
                &t.encode_pk(&row(1, 0, "")),
                1
            )
            .is_ok()
        );
    }

    #[test]
    fn at_commit_sees_concurrent_committers() {
        let t = Arc::new(table());
        let mut v = MapView::new(&t);
        v.commit(row(1, 1, "x"), 1);
        // The transaction (snapshot 1) inserts 2 with "y" and 3 with "w".
        let mut w = WriteSet::new();
        for r in [row(2, 2, "y"), row(3, 3, "w")] {
            w.buffer(&t, t.encode_pk(&r), Some(r), true);
        }
        assert!(check_at_commit(&w, &v, 1).is_ok());
        // Another transaction commits key 2 first.
        v.commit(row(2, 9, "q"), 2);
        assert!(dup_on(check_at_commit(&w, &v, 1), PRIMARY));
        // ... and deletes it again: the key is free.
        v.delete(&t.encode_pk(&row(2, 0, "")), 3);
        assert!(check_at_commit(&w, &v, 1).is_ok());
        // Another transaction commits value "w" under key 4.
        v.commit(row(4, 4, "w"), 4);
        assert!(dup_on(check_at_commit(&w, &v, 1), "by_b"));
        // If this transaction also rewrote row 4 away from "w", there is no clash.
        w.buffer(&t, t.encode_pk(&row(4, 0, "")), Some(row(4, 4, "v")), false);
        assert!(check_at_commit(&w, &v, 1).is_ok());
    }
}
