//! A small in-memory [`Committed`] implementation for the unit tests of the lifted modules:
//! multi-version chains per primary key, index entries of every version kept (C3), nothing
//! collected.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::index::{entries, is_current, key_on_path};
use super::{Committed, EntryIter, Visible, VisibleIter};
use crate::encoding::ByteRange;
use crate::error::{Error, Result};
use crate::query::{AccessPath, Direction};
use crate::schema::{Table, TableSchema};
use crate::value::{Row, Type, Value};

/// Table `t(k i64 primary key, a i64, b str)` with index `by_a(a)` and unique index `by_b(b)`.
pub(crate) fn table() -> Table {
    Table::new(
        TableSchema::new("t")
            .column("k", Type::I64)
            .column("a", Type::I64)
            .column("b", Type::Str)
            .primary_key("k")
            .index("by_a", ["a"])
            .unique_index("by_b", ["b"]),
    )
    .expect("valid schema")
}

/// A row of [`table`].
pub(crate) fn row(k: i64, a: i64, b: &str) -> Row {
    vec![Value::I64(k), Value::I64(a), Value::from(b)]
}

/// Committed data of one table.
#[derive(Debug)]
pub(crate) struct MapView {
    table: Arc<Table>,
    chains: BTreeMap<Vec<u8>, Vec<(u64, Option<Row>)>>,
    last: u64,
    /// Make every `range` call yield an error (to test that errors surface).
    pub fail_ranges: bool,
}

impl MapView {
    pub fn new(table: &Arc<Table>) -> Self {
        MapView { table: Arc::clone(table), chains: BTreeMap::new(), last: 0, fail_ranges: false }
    }

    /// Commits `row` at `ts` (timestamps must not decrease).
    pub fn commit(&mut self, row: Row, ts: u64) {
        let pk = self.table.encode_pk(&row);
        self.chains.entry(pk).or_default().push((ts, Some(row)));
        self.last = self.last.max(ts);
    }

    /// Commits a delete of `pk` at `ts`.
    pub fn delete(&mut self, pk: &[u8], ts: u64) {
        self.chains.entry(pk.to_vec()).or_default().push((ts, None));
        self.last = self.last.max(ts);
    }

    fn visible(&self, pk: &[u8], s: u64) -> Option<&Row> {
        self.chains.get(pk)?.iter().rev().find(|v| v.0 <= s)?.1.as_ref()
    }
}

impl Committed for MapView {
    fn last_commit(&self) -> u64 {
        self.last
    }

    fn get(&self, _table: &Table, pk: &[u8], snapshot: u64) -> Result<Option<Cow<'_, Row>>> {
        Ok(self.visible(pk, snapshot).map(Cow::Borrowed))
    }

    fn range<'a>(
        &'a self,
        table: &'a Table,
        path: AccessPath,
        range: &ByteRange,
        direction: Direction,
        snapshot: u64,
    ) -> Result<VisibleIter<'a>> {
        if self.fail_ranges {
            let e = Error::Corrupted { what: "test".into(), at: "test".into() };
            return Ok(Box::new(std::iter::once(Err(e))));
        }
        let mut out = Vec::new();
        for pk in self.chains.keys() {
            if let Some(row) = self.visible(pk, snapshot) {
                let key = key_on_path(table, path, row, pk)?;
                if range.contains(&key) {
                    out.push(Visible {
                        key: Cow::Owned(key),
                        pk: Cow::Borrowed(pk.as_slice()),
                        row: Cow::Borrowed(row),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        if direction == Direction::Descending {
            out.reverse();
        }
        Ok(Box::new(out.into_iter().map(Ok)))
    }

    fn latest_change(&self, _table: &Table, pk: &[u8]) -> Result<Option<u64>> {
        Ok(self.chains.get(pk).and_then(|c| c.last()).map(|v| v.0))
    }

    fn latest_row(&self, _table: &Table, pk: &[u8]) -> Result<Option<Cow<'_, Row>>> {
        Ok(self.chains.get(pk).and_then(|c| c.last()).and_then(|v| v.1.as_ref()).map(Cow::Borrowed))
    }

    fn entries<'a>(
        &'a self,
        table: &'a Table,
        path: AccessPath,
        range: &ByteRange,
    ) -> Result<EntryIter<'a>> {
        let mut set = BTreeSet::new();
        for (pk, chain) in &self.chains {
            match path {
                AccessPath::Primary => {
                    set.insert((pk.clone(), pk.clone()));
                }
                AccessPath::Index(i) => {
                    for row in chain.iter().filter_map(|v| v.1.as_ref()) {
                        for e in entries(table, row, pk).into_iter().filter(|e| e.index == i) {
                            debug_assert!(is_current(table, i, row, pk, &e.key));
                            set.insert((e.key, pk.clone()));
                        }
                    }
                }
            }
        }
        let pks: Vec<Vec<u8>> =
            set.into_iter().filter(|(k, _)| range.contains(k)).map(|(_, pk)| pk).collect();
        Ok(Box::new(pks.into_iter().map(|pk| Ok(Cow::Owned(pk)))))
    }
}
