//! The OLTP layer on LMDB (`ferrite_baselines::lmdb`), a key-value mapping.
//!
//! Mapping: one LMDB database per table (`MDB_INTEGERKEY`), keyed by the packed primary key
//! ([`TableDef::pack`], order-preserving, below 2^63); the value is the whole row in the
//! encoding below. `get`/`delete` are one LMDB call; `update` and `add` read, decode, change
//! and write the row back; a primary-key scan is a cursor over the packed-key interval of its
//! range, ascending. A unique index on one `i64` column (TATP's `sub_nbr`) is a second
//! database keyed by the column's value (non-negative, below 2^63) whose value is the packed
//! primary key (8 bytes, little-endian); insert, delete, update and add maintain it in the
//! same LMDB transaction, and an index scan (an equality or a range on the column, ascending)
//! reads the index database then each row by its primary key. Not mapped (refused with an
//! error): other indexes (non-unique, several or non-`i64` columns: a schema with one does not
//! open) and descending scans. TPC-B and TATP need nothing more; TPC-C does.
//!
//! Row encoding (little-endian): per column in order, a tag byte then the value: `0` i64
//! (8 bytes), `1` f64 (8 bytes, IEEE bits), `2` str and `3` bytes (u32 length, then the
//! bytes). Decoding checks every tag and length: a malformed value is an error, not a panic.

use std::path::Path;
use std::sync::Arc;

use ferrite::Value;
use ferrite_baselines::lmdb::{Lmdb, LmdbReader, LmdbTxn};

use super::{ColType, OltpBody, OltpOps, OltpSession, OltpSubject, Range, Row, Schema, TableId};
use crate::subject::lmdb::{config, info};
use crate::subject::{OpError, SubjectInfo, SubjectSetup, TxnKind};

pub(super) fn open(
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    let mut names: Vec<&str> = schema.tables.iter().map(|t| t.name).collect();
    let mut index_dbs = Vec::new();
    for t in &schema.tables {
        let mut dbs = Vec::new();
        for i in &t.indexes {
            let one_int = matches!(i.columns[..], [c] if t.columns[c].ty == ColType::I64);
            if !i.unique || !one_int {
                return Err(OpError::Engine(format!(
                    "LMDB mapping: index {} of {} is not a unique index on one i64 column, \
                     which is all the mapping has",
                    i.name, t.name
                )));
            }
            dbs.push(names.len());
            names.push(i.name);
        }
        index_dbs.push(dbs);
    }
    let db = Lmdb::create(&dir.join("lmdb"), &config(setup), &names)?;
    let mut info = info(&db);
    info.config.insert(
        "oltp.mapping".into(),
        "one database per table keyed by the packed primary key (MDB_INTEGERKEY); value = the \
         row, tagged little-endian encoding; update/add = get + put; a unique i64 index = a \
         database from the column's value to the packed primary key"
            .into(),
    );
    Ok(Box::new(LmdbOltp { db, schema: Arc::clone(schema), index_dbs, info }))
}

/// Appends the encoding of `row` to `out`.
pub fn encode_row(row: &[Value], out: &mut Vec<u8>) -> Result<(), OpError> {
    for v in row {
        match v {
            Value::I64(i) => {
                out.push(0);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Value::F64(f) => {
                out.push(1);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Value::Str(s) => {
                out.push(2);
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Bytes(b) => {
                out.push(3);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            other => {
                return Err(OpError::Engine(format!("LMDB mapping: no encoding for {other:?}")));
            }
        }
    }
    Ok(())
}

/// Decodes a row of `columns` values (checked against their types).
pub fn decode_row(mut bytes: &[u8], columns: &[ColType], row: &mut Row) -> Result<(), OpError> {
    let bad = || OpError::Engine("LMDB mapping: malformed row".into());
    fn take<'b>(bytes: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
        let (head, tail) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = tail;
        Some(head)
    }
    row.clear();
    for &ty in columns {
        let tag = take(&mut bytes, 1).ok_or_else(bad)?[0];
        let v = match (tag, ty) {
            (0, ColType::I64) | (1, ColType::F64) => {
                let b: [u8; 8] =
                    take(&mut bytes, 8).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
                if tag == 0 {
                    Value::I64(i64::from_le_bytes(b))
                } else {
                    Value::F64(f64::from_bits(u64::from_le_bytes(b)))
                }
            }
            (2, ColType::Str) | (3, ColType::Bytes) => {
                let len: [u8; 4] =
                    take(&mut bytes, 4).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
                let data = take(&mut bytes, u32::from_le_bytes(len) as usize).ok_or_else(bad)?;
                if tag == 2 {
                    Value::Str(std::str::from_utf8(data).map_err(|_| bad())?.to_owned())
                } else {
                    Value::Bytes(data.to_vec())
                }
            }
            _ => return Err(bad()),
        };
        row.push(v);
    }
    if bytes.is_empty() { Ok(()) } else { Err(bad()) }
}

struct LmdbOltp {
    db: Lmdb,
    schema: Arc<Schema>,
    /// LMDB database of each index, per table.
    index_dbs: Vec<Vec<usize>>,
    info: SubjectInfo,
}

impl OltpSubject for LmdbOltp {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn OltpSession + '_>, OpError> {
        Ok(Box::new(LmdbSession { s: self, reader: self.db.reader()? }))
    }
}

struct LmdbSession<'a> {
    s: &'a LmdbOltp,
    reader: LmdbReader,
}

impl OltpSession for LmdbSession<'_> {
    fn run(&mut self, kind: TxnKind, body: &mut OltpBody<'_>) -> Result<(), OpError> {
        let (schema, idx) = (&*self.s.schema, &self.s.index_dbs[..]);
        match kind {
            TxnKind::ReadWrite => {
                self.s.db.write(|t| body(&mut LmdbOps { t, schema, idx, buf: Vec::new() }))
            }
            TxnKind::ReadOnly => {
                self.reader.read(|t| body(&mut LmdbOps { t, schema, idx, buf: Vec::new() }))
            }
        }
    }
}

struct LmdbOps<'t, 'a, 's> {
    t: &'t mut LmdbTxn<'a>,
    schema: &'s Schema,
    idx: &'s [Vec<usize>],
    buf: Vec<u8>,
}

impl LmdbOps<'_, '_, '_> {
    fn types(&self, t: TableId) -> Result<Vec<ColType>, OpError> {
        Ok(self.schema.table(t)?.columns.iter().map(|c| c.ty).collect())
    }

    /// `(database, key)` of each index entry of `row` in table `t`.
    fn index_entries(&self, t: TableId, row: &[Value]) -> Result<Vec<(usize, u64)>, OpError> {
        let td = self.schema.table(t)?;
        let dbs = self.idx.get(t).map_or(&[][..], |d| &d[..]);
        td.indexes
            .iter()
            .zip(dbs)
            .map(|(i, &db)| {
                let v = row.get(i.columns[0]).and_then(Value::as_i64);
                match v {
                    Some(v) if v >= 0 => Ok((db, v as u64)),
                    _ => Err(OpError::Engine(format!(
                        "{}: LMDB mapping: index {} needs a non-negative i64",
                        td.name, i.name
                    ))),
                }
            })
            .collect()
    }

    fn index_taken(&mut self, db: usize, key: u64) -> Result<bool, OpError> {
        let mut scratch = Vec::new();
        Ok(self.t.get(db, key, &mut scratch)?)
    }

    /// Reads, changes and writes back row `key`; `None` if absent.
    fn modify<R>(
        &mut self,
        t: TableId,
        key: &[i64],
        change: impl FnOnce(&mut Row) -> Result<R, OpError>,
    ) -> Result<Option<R>, OpError> {
        let mut row = Row::new();
        if !self.get(t, key, &mut row)? {
            return Ok(None);
        }
        let old = self.index_entries(t, &row)?;
        let r = change(&mut row)?;
        let td = self.schema.table(t)?;
        td.check_row(&row)?;
        let pk = td.pack(key)?;
        for ((db, was), (_, now)) in old.into_iter().zip(self.index_entries(t, &row)?) {
            if was != now {
                if self.index_taken(db, now)? {
                    return Err(OpError::Engine(format!(
                        "{}: unique index value {now} exists",
                        td.name
                    )));
                }
                self.t.delete(db, was)?;
                self.t.insert(db, now, &pk.to_le_bytes())?;
            }
        }
        self.buf.clear();
        encode_row(&row, &mut self.buf)?;
        self.t.update(t, pk, &self.buf)?;
        Ok(Some(r))
    }
}

impl OltpOps for LmdbOps<'_, '_, '_> {
    fn get(&mut self, t: TableId, key: &[i64], row: &mut Row) -> Result<bool, OpError> {
        let k = self.schema.table(t)?.pack(key)?;
        if !self.t.get(t, k, &mut self.buf)? {
            return Ok(false);
        }
        decode_row(&self.buf, &self.types(t)?, row)?;
        Ok(true)
    }

    fn insert(&mut self, t: TableId, row: Row) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        td.check_row(&row)?;
        let k = td.row_key(&row)?;
        let entries = self.index_entries(t, &row)?;
        for &(db, ik) in &entries {
            if self.index_taken(db, ik)? {
                return Ok(false);
            }
        }
        self.buf.clear();
        encode_row(&row, &mut self.buf)?;
        if !self.t.insert(t, k, &self.buf)? {
            return Ok(false);
        }
        for (db, ik) in entries {
            self.t.insert(db, ik, &k.to_le_bytes())?;
        }
        Ok(true)
    }

    fn update(&mut self, t: TableId, key: &[i64], set: &[(usize, Value)]) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        if set.iter().any(|(c, _)| td.key.contains(c) || *c >= td.columns.len()) {
            return Err(OpError::Engine(format!("{}: bad update", td.name)));
        }
        let done = self.modify(t, key, |row| {
            for (c, v) in set {
                row[*c] = v.clone();
            }
            Ok(())
        })?;
        Ok(done.is_some())
    }

    fn add(
        &mut self,
        t: TableId,
        key: &[i64],
        column: usize,
        delta: i64,
    ) -> Result<Option<i64>, OpError> {
        let td = self.schema.table(t)?;
        if td.key.contains(&column) {
            return Err(OpError::Engine(format!("{}: add to a key column", td.name)));
        }
        self.modify(t, key, |row| {
            let new = row
                .get(column)
                .and_then(Value::as_i64)
                .and_then(|old| old.checked_add(delta))
                .ok_or_else(|| OpError::Engine("add: not an i64, or overflow".into()))?;
            row[column] = Value::I64(new);
            Ok(new)
        })
    }

    fn delete(&mut self, t: TableId, key: &[i64]) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        let k = td.pack(key)?;
        if td.indexes.is_empty() {
            return Ok(self.t.delete(t, k)?);
        }
        let mut row = Row::new();
        if !self.get(t, key, &mut row)? {
            return Ok(false);
        }
        for (db, ik) in self.index_entries(t, &row)? {
            self.t.delete(db, ik)?;
        }
        Ok(self.t.delete(t, k)?)
    }

    fn scan(
        &mut self,
        t: TableId,
        range: &Range,
        visit: &mut dyn FnMut(&[Value]),
    ) -> Result<usize, OpError> {
        let td = self.schema.table(t)?;
        if range.descending {
            return Err(OpError::Engine(format!(
                "{}: LMDB mapping: descending scans are not mapped",
                td.name
            )));
        }
        if let Some(i) = range.index {
            return self.index_scan(t, i, range, visit);
        }
        let Some((start, end)) = td.pack_range(range)? else { return Ok(0) };
        let types = self.types(t)?;
        let mut row = Row::new();
        let mut err = None;
        let n =
            self.t.scan_range(t, start, end, range.limit.unwrap_or(usize::MAX), &mut |_, v| {
                match decode_row(v, &types, &mut row) {
                    Ok(()) => visit(&row),
                    Err(e) => err = Some(e),
                }
            })?;
        match err {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}

impl LmdbOps<'_, '_, '_> {
    /// A scan of a unique one-column `i64` index: the index database's interval, then each
    /// row by its packed primary key.
    fn index_scan(
        &mut self,
        t: TableId,
        i: usize,
        range: &Range,
        visit: &mut dyn FnMut(&[Value]),
    ) -> Result<usize, OpError> {
        let td = self.schema.table(t)?;
        let db = self.idx.get(t).and_then(|d| d.get(i)).copied();
        let bad =
            || OpError::Engine(format!("{}: LMDB mapping: bad index scan {range:?}", td.name));
        let db = db.ok_or_else(bad)?;
        let int = |v: &Value| v.as_i64().ok_or_else(bad);
        // The interval [start, end) of non-negative column values.
        let (start, end): (i128, i128) = match (&range.eq[..], range.has_bounds()) {
            ([v], false) => (i128::from(int(v)?), i128::from(int(v)?) + 1),
            ([], _) => {
                let start = match &range.lo {
                    std::ops::Bound::Included(v) => i128::from(int(v)?),
                    std::ops::Bound::Excluded(v) => i128::from(int(v)?) + 1,
                    std::ops::Bound::Unbounded => 0,
                };
                let end = match &range.hi {
                    std::ops::Bound::Included(v) => i128::from(int(v)?) + 1,
                    std::ops::Bound::Excluded(v) => i128::from(int(v)?),
                    std::ops::Bound::Unbounded => 1 << 63,
                };
                (start, end)
            }
            _ => return Err(bad()),
        };
        let (start, end) = (start.clamp(0, 1 << 63) as u64, end.clamp(0, 1 << 63) as u64);
        if start >= end {
            return Ok(0);
        }
        let mut pks = Vec::new();
        let limit = range.limit.unwrap_or(usize::MAX);
        self.t.scan_range(db, start, end, limit, &mut |_, v| {
            pks.push(<[u8; 8]>::try_from(v).map(u64::from_le_bytes));
        })?;
        let types = self.types(t)?;
        let mut row = Row::new();
        for pk in &pks {
            let pk =
                pk.map_err(|_| OpError::Engine("LMDB mapping: malformed index entry".into()))?;
            if !self.t.get(t, pk, &mut self.buf)? {
                return Err(OpError::Engine(format!(
                    "{}: LMDB mapping: index entry for a missing row {pk}",
                    td.name
                )));
            }
            decode_row(&self.buf, &types, &mut row)?;
            visit(&row);
        }
        Ok(pks.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_malformed_ones_are_errors() {
        let types = [ColType::I64, ColType::F64, ColType::Str, ColType::Bytes];
        let row = vec![
            Value::I64(-5),
            Value::F64(2.5),
            Value::Str("ab".into()),
            Value::Bytes(vec![1, 2, 3]),
        ];
        let mut buf = Vec::new();
        encode_row(&row, &mut buf).unwrap();
        assert_eq!(buf.len(), 9 + 9 + 7 + 8);
        assert_eq!(&buf[..9], &[0, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        let mut out = Row::new();
        decode_row(&buf, &types, &mut out).unwrap();
        assert_eq!(out, row);
        for cut in 0..buf.len() {
            assert!(decode_row(&buf[..cut], &types, &mut out).is_err(), "cut at {cut}");
        }
        let mut long = buf.clone();
        long.push(0);
        assert!(decode_row(&long, &types, &mut out).is_err(), "trailing bytes");
        assert!(decode_row(&buf, &[ColType::F64; 4], &mut out).is_err(), "wrong type");
    }
}
