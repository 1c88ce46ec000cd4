//! The reference engine's committed data: version chains per primary key, index maps, and
//! garbage collection; and its [`Committed`] view for the lifted machinery.
//!
//! # Invariants
//! R1-R3 of the engine (see [`super`]): chains with increasing timestamps, index entries of
//! every retained live version, and collection that keeps what open snapshots see.
//!
//! # Ordering and concurrency
//! Volatile; the engine's data lock guards a [`Data`] (shared for views, exclusive for apply
//! and collection).

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::encoding::ByteRange;
use crate::engine::common::index::{self, entries, is_current, no_index};
use crate::engine::common::writes::WriteSet;
use crate::engine::common::{Committed, EntryIter, Visible, VisibleIter};
use crate::error::{Error, Result};
use crate::query::{AccessPath, Direction};
use crate::schema::Table;
use crate::value::Row;

/// Every table's committed data.
#[derive(Debug, Default)]
pub(super) struct Data {
    pub tables: BTreeMap<String, TableData>,
    /// Timestamp of the last commit (0: none yet).
    pub last_ts: u64,
}

/// One table's committed data.
#[derive(Debug)]
pub(super) struct TableData {
    /// Encoded primary key to its version chain (R1).
    pub rows: BTreeMap<Vec<u8>, Vec<Version>>,
    /// One map per secondary index: entry key to encoded primary key (R2).
    pub indexes: Vec<BTreeMap<Vec<u8>, Vec<u8>>>,
}

/// One version of a row.
#[derive(Clone, Debug)]
pub(super) struct Version {
    pub ts: u64,
    /// `None`: a tombstone.
    pub row: Option<Row>,
}

fn visible(chain: &[Version], ts: u64) -> Option<&Row> {
    chain.iter().rev().find(|v| v.ts <= ts).and_then(|v| v.row.as_ref())
}

fn latest_row(chain: &[Version]) -> Option<&Row> {
    chain.last().and_then(|v| v.row.as_ref())
}

pub(super) fn missing(what: String) -> Error {
    Error::Corrupted { what, at: "reference engine memory".into() }
}

/// An iterator in ascending or descending order.
fn ordered<'a, I>(it: I, direction: Direction) -> Box<dyn Iterator<Item = I::Item> + 'a>
where
    I: DoubleEndedIterator + 'a,
{
    match direction {
        Direction::Descending => Box::new(it.rev()),
        _ => Box::new(it),
    }
}

impl TableData {
    pub fn new(table: &Table) -> Self {
        TableData { rows: BTreeMap::new(), indexes: vec![BTreeMap::new(); table.indexes.len()] }
    }

    fn index(&self, table: &Table, i: usize) -> Result<&BTreeMap<Vec<u8>, Vec<u8>>> {
        self.indexes.get(i).ok_or_else(|| no_index(table, i))
    }
}

impl Data {
    pub fn table(&self, name: &str) -> Result<&TableData> {
        self.tables.get(name).ok_or_else(|| missing(format!("table {name:?} has no data")))
    }

    /// Applies a validated write set under timestamp `ts`: one new version per written key
    /// (R1) and the index entries the new rows add (R2; entries the old version loses stay
    /// until collection, I3).
    pub fn apply(&mut self, writes: &WriteSet, ts: u64) -> Result<()> {
        for tw in writes.tables() {
            let table = &*tw.table;
            let td = self
                .tables
                .get_mut(table.name())
                .ok_or_else(|| missing(format!("table {:?} has no data", table.name())))?;
            for (pk, w) in &tw.rows {
                let old = td.rows.get(pk).and_then(|c| latest_row(c));
                if w.row.is_none() && old.is_none() {
                    continue; // inserted and deleted again, or (validation off) already gone
                }
                let diff = index::diff(table, pk, old.map(Vec::as_slice), w.row.as_deref());
                for e in diff.insert {
                    let map =
                        td.indexes.get_mut(e.index).ok_or_else(|| no_index(table, e.index))?;
                    map.insert(e.key, pk.clone());
                }
                td.rows.entry(pk.clone()).or_default().push(Version { ts, row: w.row.clone() });
            }
        }
        Ok(())
    }

    /// R3 for every chain the write set touched.
    pub fn collect_garbage(&mut self, writes: &WriteSet, active: &[u64]) {
        for tw in writes.tables() {
            let Some(td) = self.tables.get_mut(tw.table.name()) else { continue };
            for pk in tw.rows.keys() {
                collect_chain(td, &tw.table, pk, active);
            }
        }
    }
}

/// R3 for one chain: keep the newest version and, for every active snapshot, the version it
/// sees; drop the oldest kept version too if it is a tombstone (seeing nothing is the same as
/// seeing a tombstone). Index entries no kept version uses go with the dropped versions.
fn collect_chain(td: &mut TableData, table: &Table, pk: &[u8], active: &[u64]) {
    let Some(chain) = td.rows.get_mut(pk) else { return };
    let mut keep = vec![false; chain.len()];
    if let Some(last) = keep.last_mut() {
        *last = true;
    }
    for &s in active {
        if let Some(k) = chain.iter().rposition(|v| v.ts <= s).and_then(|i| keep.get_mut(i)) {
            *k = true;
        }
    }
    if let Some(first) = keep.iter().position(|&k| k)
        && chain.get(first).is_some_and(|v| v.row.is_none())
        && let Some(k) = keep.get_mut(first)
    {
        *k = false;
    }
    let mut removed = Vec::new();
    for (v, k) in std::mem::take(chain).into_iter().zip(keep) {
        if k {
            chain.push(v);
        } else if let Some(row) = v.row {
            removed.push(row);
        }
    }
    let kept: Vec<_> =
        chain.iter().filter_map(|v| v.row.as_ref()).flat_map(|r| entries(table, r, pk)).collect();
    for old in &removed {
        for e in entries(table, old, pk) {
            if !kept.contains(&e)
                && let Some(map) = td.indexes.get_mut(e.index)
            {
                map.remove(&e.key);
            }
        }
    }
    if chain.is_empty() {
        td.rows.remove(pk);
    }
}

/// The committed data as the lifted machinery reads it, under the data lock (C4).
#[derive(Debug)]
pub(super) struct View<'d> {
    pub data: &'d Data,
}

impl Committed for View<'_> {
    fn last_commit(&self) -> u64 {
        self.data.last_ts
    }

    fn get(&self, table: &Table, pk: &[u8], snapshot: u64) -> Result<Option<Cow<'_, Row>>> {
        let td = self.data.table(table.name())?;
        Ok(td.rows.get(pk).and_then(|c| visible(c, snapshot)).map(Cow::Borrowed))
    }

    fn range<'a>(
        &'a self,
        table: &'a Table,
        path: AccessPath,
        range: &ByteRange,
        direction: Direction,
        snapshot: u64,
    ) -> Result<VisibleIter<'a>> {
        if range.is_empty() {
            return Ok(Box::new(std::iter::empty()));
        }
        let td = self.data.table(table.name())?;
        match path {
            AccessPath::Primary => {
                let it = td.rows.range::<[u8], _>(range.as_slices());
                Ok(Box::new(ordered(it, direction).filter_map(move |(pk, chain)| {
                    let row = visible(chain, snapshot)?;
                    let pk = pk.as_slice();
                    Some(Ok(Visible {
                        key: Cow::Borrowed(pk),
                        pk: Cow::Borrowed(pk),
                        row: Cow::Borrowed(row),
                    }))
                })))
            }
            AccessPath::Index(i) => {
                let it = td.index(table, i)?.range::<[u8], _>(range.as_slices());
                Ok(Box::new(ordered(it, direction).filter_map(move |(entry, pk)| {
                    let row = td.rows.get(pk).and_then(|c| visible(c, snapshot))?;
                    // Skip entries of other versions of the row (R2).
                    is_current(table, i, row, pk, entry).then_some(Ok(Visible {
                        key: Cow::Borrowed(entry.as_slice()),
                        pk: Cow::Borrowed(pk.as_slice()),
                        row: Cow::Borrowed(row),
                    }))
                })))
            }
        }
    }

    fn latest_change(&self, table: &Table, pk: &[u8]) -> Result<Option<u64>> {
        let td = self.data.table(table.name())?;
        Ok(td.rows.get(pk).and_then(|c| c.last()).map(|v| v.ts))
    }

    fn latest_row(&self, table: &Table, pk: &[u8]) -> Result<Option<Cow<'_, Row>>> {
        let td = self.data.table(table.name())?;
        Ok(td.rows.get(pk).and_then(|c| latest_row(c)).map(Cow::Borrowed))
    }

    fn entries<'a>(
        &'a self,
        table: &'a Table,
        path: AccessPath,
        range: &ByteRange,
    ) -> Result<EntryIter<'a>> {
        if range.is_empty() {
            return Ok(Box::new(std::iter::empty()));
        }
        let td = self.data.table(table.name())?;
        match path {
            AccessPath::Primary => Ok(Box::new(
                td.rows
                    .range::<[u8], _>(range.as_slices())
                    .map(|(pk, _)| Ok(Cow::Borrowed(pk.as_slice()))),
            )),
            AccessPath::Index(i) => Ok(Box::new(
                td.index(table, i)?
                    .range::<[u8], _>(range.as_slices())
                    .map(|(_, pk)| Ok(Cow::Borrowed(pk.as_slice()))),
            )),
        }
    }
}
