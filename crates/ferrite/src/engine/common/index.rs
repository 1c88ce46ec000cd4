//! Secondary-index maintenance: which entries a row has, and which entries to insert and
//! remove when a row changes.
//!
//! An index entry's key is the encoded index columns followed by the encoded primary key
//! ([`Table::index_entry`]), so entries of a non-unique index are distinct and an entry names
//! its row. Index `n` is position `n` of [`Table::indexes`].
//!
//! # Invariants
//! - I1: [`entries`] of a row are exactly one entry per secondary index, in index order.
//! - I2: applying [`diff`]`(old, new)` (remove, then insert) to a set of entries holding
//!   exactly `old`'s entries leaves exactly `new`'s; entries the two rows share are in neither
//!   list, so an update of unindexed columns touches no index.
//! - I3: a multi-version engine applies `insert` at commit and defers `remove` until no
//!   snapshot sees the old version (readers then skip entries that are not [`is_current`] for
//!   the version they see); a single-version engine applies both at commit.
//!
//! # Ordering and concurrency
//! Pure functions over checked rows; no state.

use crate::encoding::ByteRange;
use crate::error::{Error, Result};
use crate::query::AccessPath;
use crate::schema::Table;
use crate::value::Value;

/// One entry of secondary index `index`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct IndexEntry {
    /// Position in [`Table::indexes`].
    pub index: usize,
    /// The entry key: index columns, then the primary key.
    pub key: Vec<u8>,
}

/// The entries to insert and to remove when a row changes (I2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexDiff {
    /// Entries the new row has and the old one had not.
    pub insert: Vec<IndexEntry>,
    /// Entries the old row had and the new one has not.
    pub remove: Vec<IndexEntry>,
}

/// Every secondary-index entry of a checked row with encoded primary key `pk` (I1).
pub(crate) fn entries(table: &Table, row: &[Value], pk: &[u8]) -> Vec<IndexEntry> {
    table
        .indexes
        .iter()
        .enumerate()
        .map(|(index, ix)| IndexEntry { index, key: table.index_entry(ix, row, pk) })
        .collect()
}

/// What changes in the indexes when the row with primary key `pk` goes from `old` to `new`
/// (`None`: absent). Both rows must have primary key `pk`.
pub(crate) fn diff(
    table: &Table,
    pk: &[u8],
    old: Option<&[Value]>,
    new: Option<&[Value]>,
) -> IndexDiff {
    let mut d = IndexDiff::default();
    for (index, ix) in table.indexes.iter().enumerate() {
        let before = old.map(|r| table.index_entry(ix, r, pk));
        let after = new.map(|r| table.index_entry(ix, r, pk));
        if before == after {
            continue;
        }
        if let Some(key) = before {
            d.remove.push(IndexEntry { index, key });
        }
        if let Some(key) = after {
            d.insert.push(IndexEntry { index, key });
        }
    }
    d
}

/// Whether `entry` (a key of index `index`) is the entry of `row` (primary key `pk`): a reader
/// that reached a row through an entry skips it unless it is (I3).
pub(crate) fn is_current(
    table: &Table,
    index: usize,
    row: &[Value],
    pk: &[u8],
    entry: &[u8],
) -> bool {
    table.indexes.get(index).is_some_and(|ix| {
        let prefix = table.index_prefix(ix, row);
        entry.len() == prefix.len() + pk.len() && entry.starts_with(&prefix) && entry.ends_with(pk)
    })
}

/// The key of a row on an access path: its primary key, or its entry in the index.
pub(crate) fn key_on_path(
    table: &Table,
    path: AccessPath,
    row: &[Value],
    pk: &[u8],
) -> Result<Vec<u8>> {
    match path {
        AccessPath::Primary => Ok(pk.to_vec()),
        AccessPath::Index(i) => table
            .indexes
            .get(i)
            .map(|ix| table.index_entry(ix, row, pk))
            .ok_or_else(|| no_index(table, i)),
    }
}

/// The range of index `index` holding the entries whose index columns equal `row`'s: where a
/// unique index's duplicates of `row` would be.
pub(crate) fn same_values_range(table: &Table, index: usize, row: &[Value]) -> Result<ByteRange> {
    let ix = table.indexes.get(index).ok_or_else(|| no_index(table, index))?;
    Ok(ByteRange::prefix(table.index_prefix(ix, row)))
}

pub(crate) fn no_index(table: &Table, index: usize) -> Error {
    Error::Corrupted {
        what: format!("table {:?} has no index #{index}", table.name()),
        at: "engine catalog".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::common::testing::table;

    fn row(k: i64, a: i64, b: &str) -> Vec<Value> {
        vec![Value::I64(k), Value::I64(a), Value::from(b)]
    }

    #[test]
    fn entries_are_one_per_index() {
        let t = table();
        let r = row(1, 2, "x");
        let pk = t.encode_pk(&r);
        let e = entries(&t, &r, &pk);
        assert_eq!(e.len(), t.indexes.len());
        for (n, entry) in e.iter().enumerate() {
            assert_eq!(entry.index, n);
            assert!(is_current(&t, n, &r, &pk, &entry.key));
            assert!(!is_current(&t, n, &row(1, 3, "x"), &pk, &entry.key) || n == 1);
        }
    }

    #[test]
    fn diff_touches_only_changed_indexes() {
        let t = table();
        let old = row(1, 2, "x");
        let pk = t.encode_pk(&old);
        // Changing `b` moves the entry of `by_b` (index 1) only.
        let new = row(1, 2, "y");
        let d = diff(&t, &pk, Some(&old), Some(&new));
        assert_eq!(
            d.remove,
            vec![IndexEntry { index: 1, key: entries(&t, &old, &pk)[1].key.clone() }]
        );
        assert_eq!(
            d.insert,
            vec![IndexEntry { index: 1, key: entries(&t, &new, &pk)[1].key.clone() }]
        );
        // No change, no work.
        assert_eq!(diff(&t, &pk, Some(&old), Some(&old)), IndexDiff::default());
        // Insert and delete add and remove every entry.
        assert_eq!(diff(&t, &pk, None, Some(&new)).insert, entries(&t, &new, &pk));
        assert_eq!(diff(&t, &pk, Some(&old), None).remove, entries(&t, &old, &pk));
        assert_eq!(diff(&t, &pk, None, None), IndexDiff::default());
    }

    #[test]
    fn applying_a_diff_yields_the_new_entries() {
        let t = table();
        let rows = [row(7, 1, "a"), row(7, 1, "b"), row(7, 2, "b"), row(7, 2, "b")];
        let pk = t.encode_pk(&rows[0]);
        let mut set: std::collections::BTreeSet<IndexEntry> =
            entries(&t, &rows[0], &pk).into_iter().collect();
        for w in rows.windows(2) {
            let d = diff(&t, &pk, Some(&w[0]), Some(&w[1]));
            for e in &d.remove {
                assert!(set.remove(e), "removed an entry that was not there: {e:?}");
            }
            for e in d.insert {
                assert!(set.insert(e), "inserted an entry twice");
            }
            let want: std::collections::BTreeSet<IndexEntry> =
                entries(&t, &w[1], &pk).into_iter().collect();
            assert_eq!(set, want);
        }
    }

    #[test]
    fn key_on_path_and_missing_index() {
        let t = table();
        let r = row(1, 2, "x");
        let pk = t.encode_pk(&r);
        assert_eq!(key_on_path(&t, AccessPath::Primary, &r, &pk).ok(), Some(pk.clone()));
        assert!(key_on_path(&t, AccessPath::Index(0), &r, &pk).is_ok_and(|k| k.ends_with(&pk)));
        assert!(matches!(
            key_on_path(&t, AccessPath::Index(9), &r, &pk),
            Err(Error::Corrupted { .. })
        ));
        assert!(
            same_values_range(&t, 0, &r)
                .is_ok_and(|range| range.contains(&entries(&t, &r, &pk)[0].key))
        );
    }
}
