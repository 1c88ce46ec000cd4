//! The schema encoding of a table descriptor, shared by the engines that store schemas (SOFORT
//! `docs/design/sofort.md` §2.3, the paged engine's catalog `docs/design/paged.md` §9).
//!
//! # Invariants
//! - `decode(encode(s))` rebuilds a schema equal to `s`; decoding never panics: every length,
//!   count and position is checked, and the result passes `Table::new` again, else it is
//!   `Corrupted`.

use crate::schema::{Table, TableSchema};
use crate::storage::{StorageError, StorageResult};
use crate::value::Type;

const VERSION: u8 = 1;

fn ty_code(t: Type) -> u8 {
    match t {
        Type::I64 => 0,
        Type::F64 => 1,
        Type::Bytes => 2,
        Type::Str => 3,
    }
}

fn put_name(out: &mut Vec<u8>, s: &str) -> StorageResult<()> {
    let n = u16::try_from(s.len())
        .map_err(|_| StorageError::InvalidArgument(format!("name of {} bytes", s.len())))?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_u16(out: &mut Vec<u8>, v: usize) -> StorageResult<()> {
    let n = u16::try_from(v).map_err(|_| StorageError::InvalidArgument(format!("count {v}")))?;
    out.extend_from_slice(&n.to_le_bytes());
    Ok(())
}

/// Encodes a checked table's schema.
pub(crate) fn encode(t: &Table) -> StorageResult<Vec<u8>> {
    let s = &t.schema;
    let mut out = vec![VERSION];
    put_name(&mut out, s.name())?;
    put_u16(&mut out, s.columns().len())?;
    for c in s.columns() {
        put_name(&mut out, c.name())?;
        out.push(ty_code(c.ty()));
    }
    put_u16(&mut out, t.pk)?;
    put_u16(&mut out, t.indexes.len())?;
    for ix in &t.indexes {
        put_name(&mut out, &ix.name)?;
        out.push(u8::from(ix.unique));
        put_u16(&mut out, ix.columns.len())?;
        for &c in &ix.columns {
            put_u16(&mut out, c)?;
        }
    }
    Ok(out)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

fn bad(what: impl Into<String>) -> StorageError {
    StorageError::corrupted(what, "SOFORT table descriptor schema")
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> StorageResult<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| bad(format!("truncated at byte {} (needs {n} more)", self.at)))?;
        let r = &self.b[self.at..end];
        self.at = end;
        Ok(r)
    }
    fn u8(&mut self) -> StorageResult<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> StorageResult<usize> {
        let b = self.bytes(2)?;
        Ok(usize::from(u16::from_le_bytes([b[0], b[1]])))
    }
    fn name(&mut self) -> StorageResult<String> {
        let n = self.u16()?;
        String::from_utf8(self.bytes(n)?.to_vec()).map_err(|_| bad("a name is not UTF-8"))
    }
}

/// Decodes and re-checks a schema.
pub(crate) fn decode(b: &[u8]) -> StorageResult<Table> {
    let mut r = Reader { b, at: 0 };
    if r.u8()? != VERSION {
        return Err(bad("unknown schema encoding version"));
    }
    let mut s = TableSchema::new(r.name()?);
    let ncols = r.u16()?;
    let mut names = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let name = r.name()?;
        let ty = match r.u8()? {
            0 => Type::I64,
            1 => Type::F64,
            2 => Type::Bytes,
            3 => Type::Str,
            t => return Err(bad(format!("unknown column type {t}"))),
        };
        names.push(name.clone());
        s = s.column(name, ty);
    }
    let pk = r.u16()?;
    let pk_name = names.get(pk).ok_or_else(|| bad(format!("primary key column {pk}")))?;
    s = s.primary_key(pk_name.clone());
    let nix = r.u16()?;
    for _ in 0..nix {
        let name = r.name()?;
        let unique = match r.u8()? {
            0 => false,
            1 => true,
            u => return Err(bad(format!("unique flag {u}"))),
        };
        let n = r.u16()?;
        let mut cols = Vec::with_capacity(n);
        for _ in 0..n {
            let c = r.u16()?;
            cols.push(names.get(c).ok_or_else(|| bad(format!("index column {c}")))?.clone());
        }
        s = if unique { s.unique_index(name, cols) } else { s.index(name, cols) };
    }
    if r.at != b.len() {
        return Err(bad("trailing bytes"));
    }
    Table::new(s).map_err(|e| bad(format!("the stored schema is invalid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let t = Table::new(
            TableSchema::new("usertable")
                .column("k", Type::I64)
                .column("v", Type::Bytes)
                .column("email", Type::Str)
                .column("score", Type::F64)
                .primary_key("k")
                .index("by_v", ["v", "score"])
                .unique_index("by_email", ["email"]),
        )
        .expect("valid");
        let b = encode(&t).expect("encodes");
        let d = decode(&b).expect("decodes");
        assert_eq!(d.schema, t.schema);
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "prefix of {n} bytes accepted");
        }
        let mut bad = b.clone();
        bad[0] = 9;
        assert!(decode(&bad).is_err());
    }
}
