//! Rows as record values of the paged engine's table trees (`docs/design/paged.md` §5), and
//! the catalog's records (§9).
//!
//! ```text
//!  row:      per column, in schema order: i64 / f64 as 8 bytes (f64 by its bits), bytes / str
//!            as a u32 length then the bytes (all little-endian)
//!  catalog:  key = table name; value = version u8 (1) | table root u32 | n u16 |
//!            n index roots u32 | the schema (engine::common::schema_codec)
//! ```
//!
//! # Invariants
//! - `decode(t, encode(r)) == r` for every row `r` that passes `t.check_row`; decoding never
//!   panics and returns `Corrupted` for bytes no row encodes to (short, long, bad UTF-8).

use super::bytes::{u16_at, u32_at, u64_at};
use super::pages::PageNo;
use crate::engine::common::schema_codec;
use crate::error::{Error, Result};
use crate::schema::Table;
use crate::value::{Row, Type, Value};

fn corrupt(what: impl Into<String>, table: &str) -> Error {
    Error::Corrupted { what: what.into(), at: format!("paged table {table:?}") }
}

/// Encodes a checked row.
pub(crate) fn encode(row: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 * row.len());
    for v in row {
        match v {
            Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => out.extend_from_slice(&x.to_bits().to_le_bytes()),
            Value::Bytes(b) => {
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Value::Str(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
    out
}

/// Decodes a row of `table` (see the module invariants).
pub(crate) fn decode(table: &Table, b: &[u8]) -> Result<Row> {
    let mut row = Vec::with_capacity(table.arity());
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let end = at.checked_add(n).filter(|&e| e <= b.len());
        let end = end.ok_or_else(|| corrupt("row record too short", table.name()))?;
        let s = &b[*at..end];
        *at = end;
        Ok(s)
    };
    for c in table.schema.columns() {
        let v = match c.ty() {
            Type::I64 => Value::I64(u64_at(take(&mut at, 8)?, 0) as i64),
            Type::F64 => Value::F64(f64::from_bits(u64_at(take(&mut at, 8)?, 0))),
            Type::Bytes | Type::Str => {
                let n = u32_at(take(&mut at, 4)?, 0) as usize;
                let bytes = take(&mut at, n)?.to_vec();
                if c.ty() == Type::Str {
                    Value::Str(
                        String::from_utf8(bytes)
                            .map_err(|_| corrupt("a str value is not UTF-8", table.name()))?,
                    )
                } else {
                    Value::Bytes(bytes)
                }
            }
        };
        row.push(v);
    }
    if at != b.len() {
        return Err(corrupt("row record too long", table.name()));
    }
    Ok(row)
}

/// A table as the catalog stores it.
#[derive(Clone, Debug)]
pub(crate) struct CatalogEntry {
    /// The checked schema.
    pub table: Table,
    /// The table tree's root.
    pub root: PageNo,
    /// Each secondary index's tree root, in schema order.
    pub index_roots: Vec<PageNo>,
}

/// Encodes a catalog record's value.
pub(crate) fn encode_entry(e: &CatalogEntry) -> Result<Vec<u8>> {
    let mut out = vec![1u8];
    out.extend_from_slice(&e.root.to_le_bytes());
    out.extend_from_slice(&(e.index_roots.len() as u16).to_le_bytes());
    for r in &e.index_roots {
        out.extend_from_slice(&r.to_le_bytes());
    }
    out.extend_from_slice(&schema_codec::encode(&e.table)?);
    Ok(out)
}

/// Decodes a catalog record of table `name`.
pub(crate) fn decode_entry(name: &str, b: &[u8]) -> Result<CatalogEntry> {
    let bad = |what: &str| corrupt(format!("catalog record: {what}"), name);
    if b.len() < 7 || b[0] != 1 {
        return Err(bad("short or of an unknown version"));
    }
    let (root, n) = (u32_at(b, 1), usize::from(u16_at(b, 5)));
    let schema_at = 7 + 4 * n;
    if b.len() < schema_at {
        return Err(bad("short index list"));
    }
    let index_roots: Vec<PageNo> = (0..n).map(|i| u32_at(b, 7 + 4 * i)).collect();
    let table = schema_codec::decode(&b[schema_at..])?;
    if table.name() != name || table.indexes.len() != n || root == 0 || index_roots.contains(&0) {
        return Err(bad("does not match its key or its schema"));
    }
    Ok(CatalogEntry { table, root, index_roots })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TableSchema;

    fn table() -> Table {
        Table::new(
            TableSchema::new("t")
                .column("id", Type::I64)
                .column("x", Type::F64)
                .column("s", Type::Str)
                .column("b", Type::Bytes)
                .primary_key("id")
                .index("by_s", ["s"]),
        )
        .unwrap()
    }

    #[test]
    fn rows_round_trip_and_bad_bytes_are_corruption() {
        let t = table();
        let r = vec![
            Value::I64(-5),
            Value::F64(2.5),
            Value::Str("héllo".into()),
            Value::Bytes(vec![0, 1, 2]),
        ];
        let b = encode(&r);
        assert_eq!(decode(&t, &b).unwrap(), r);
        for cut in 0..b.len() {
            assert!(matches!(decode(&t, &b[..cut]), Err(Error::Corrupted { .. })), "{cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(matches!(decode(&t, &long), Err(Error::Corrupted { .. })));
        let mut bad_utf8 = b.clone();
        bad_utf8[8 + 8 + 4] = 0xFF;
        assert!(matches!(decode(&t, &bad_utf8), Err(Error::Corrupted { .. })));
    }

    #[test]
    fn catalog_records_round_trip() {
        let e = CatalogEntry { table: table(), root: 7, index_roots: vec![9] };
        let b = encode_entry(&e).unwrap();
        let back = decode_entry("t", &b).unwrap();
        assert_eq!((back.root, back.index_roots.clone()), (7, vec![9]));
        assert_eq!(back.table.name(), "t");
        assert!(matches!(decode_entry("u", &b), Err(Error::Corrupted { .. })));
        assert!(matches!(decode_entry("t", &b[..5]), Err(Error::Corrupted { .. })));
    }
}
