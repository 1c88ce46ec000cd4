//! The write buffer: a transaction's own inserts, updates and deletes, kept in DRAM until
//! commit.
//!
//! # Invariants
//! - W1: per table and encoded primary key, one [`Write`]: the row's final image in this
//!   transaction (`None`: deleted). A later write of the same key replaces the image.
//! - W2: [`Write::inserted`] is set by the *first* write of the key in this transaction and
//!   says that the key had no row in the transaction's view then; later writes keep it. The
//!   commit-time primary-key check ([`super::unique::check_at_commit`]) tests only such keys.
//! - W3: every buffered table keeps the `Arc<Table>` it was written with, so commit needs no
//!   catalog lookup (schemas are immutable).
//!
//! # Ordering and concurrency
//! DRAM only, owned by one transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::index::key_on_path;
use crate::encoding::ByteRange;
use crate::error::Result;
use crate::query::{AccessPath, Direction};
use crate::schema::Table;
use crate::value::Row;

/// A buffered write (W1, W2).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Write {
    /// The row's final image in this transaction (`None`: deleted).
    pub row: Option<Row>,
    /// The key had no row in this transaction's view when it first wrote it.
    pub inserted: bool,
}

/// The buffered writes of one table.
#[derive(Clone, Debug)]
pub(crate) struct TableWrites {
    /// The table (W3).
    pub table: Arc<Table>,
    /// Encoded primary key to its write.
    pub rows: BTreeMap<Vec<u8>, Write>,
}

/// A transaction's write buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteSet {
    tables: BTreeMap<String, TableWrites>,
}

impl WriteSet {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The buffered write of `pk` in `table`.
    pub fn get(&self, table: &str, pk: &[u8]) -> Option<&Write> {
        self.tables.get(table).and_then(|t| t.rows.get(pk))
    }

    /// Whether this transaction wrote `pk` in `table`.
    pub fn contains(&self, table: &str, pk: &[u8]) -> bool {
        self.get(table, pk).is_some()
    }

    /// Buffers `row` (`None`: delete) as the image of `pk` (W1, W2).
    pub fn buffer(&mut self, table: &Arc<Table>, pk: Vec<u8>, row: Option<Row>, inserted: bool) {
        let tw = self
            .tables
            .entry(table.name().to_owned())
            .or_insert_with(|| TableWrites { table: Arc::clone(table), rows: BTreeMap::new() });
        match tw.rows.get_mut(&pk) {
            Some(existing) => existing.row = row,
            None => {
                tw.rows.insert(pk, Write { row, inserted });
            }
        }
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(|t| t.rows.is_empty())
    }

    /// Number of buffered keys.
    pub fn len(&self) -> usize {
        self.tables.values().map(|t| t.rows.len()).sum()
    }

    /// The buffered tables, by name.
    pub fn tables(&self) -> impl Iterator<Item = &TableWrites> {
        self.tables.values()
    }

    /// The buffered live rows of `table` whose key on `path` lies in `range`, as
    /// `(key on path, row)` in `direction` order (deletes have no key on any path).
    pub fn in_range<'a>(
        &'a self,
        table: &Table,
        path: AccessPath,
        range: &ByteRange,
        direction: Direction,
    ) -> Result<Vec<(Vec<u8>, &'a Row)>> {
        let Some(tw) = self.tables.get(table.name()) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (pk, w) in &tw.rows {
            let Some(row) = &w.row else { continue };
            let key = key_on_path(table, path, row, pk)?;
            if range.contains(&key) {
                out.push((key, row));
            }
        }
        if path != AccessPath::Primary {
            out.sort_by(|a, b| a.0.cmp(&b.0));
        }
        if direction == Direction::Descending {
            out.reverse();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::common::testing::{row, table};

    #[test]
    fn first_write_decides_inserted_and_last_image_wins() {
        let t = Arc::new(table());
        let mut w = WriteSet::new();
        let pk = t.encode_pk(&row(1, 1, "a"));
        w.buffer(&t, pk.clone(), Some(row(1, 1, "a")), true);
        w.buffer(&t, pk.clone(), Some(row(1, 2, "a")), false);
        w.buffer(&t, pk.clone(), None, false);
        assert_eq!(w.get("t", &pk), Some(&Write { row: None, inserted: true }));
        assert_eq!(w.len(), 1);
        assert!(!w.is_empty());
        assert!(
            w.in_range(&t, AccessPath::Primary, &ByteRange::all(), Direction::Ascending)
                .is_ok_and(|v| v.is_empty())
        );
    }

    #[test]
    fn in_range_orders_by_the_access_path() {
        let t = Arc::new(table());
        let mut w = WriteSet::new();
        for (k, a) in [(1, 30), (2, 10), (3, 20)] {
            let r = row(k, a, &format!("v{k}"));
            w.buffer(&t, t.encode_pk(&r), Some(r), true);
        }
        let keys = |path, dir| -> Vec<i64> {
            w.in_range(&t, path, &ByteRange::all(), dir)
                .expect("range")
                .iter()
                .filter_map(|(_, r)| r[0].as_i64())
                .collect()
        };
        assert_eq!(keys(AccessPath::Primary, Direction::Ascending), [1, 2, 3]);
        assert_eq!(keys(AccessPath::Index(0), Direction::Ascending), [2, 3, 1]);
        assert_eq!(keys(AccessPath::Index(0), Direction::Descending), [1, 3, 2]);
    }
}
