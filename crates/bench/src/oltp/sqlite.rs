//! The OLTP layer on SQLite (`ferrite_baselines::sqlite`), as SQL.
//!
//! Mapping (conventions §6, SQLite at its best): `CREATE TABLE t (… NOT NULL, PRIMARY KEY
//! (key columns)) WITHOUT ROWID`, so a row lives in its primary-key B-tree under the real
//! composite key; `CREATE [UNIQUE] INDEX` per index; every operation one statement, prepared
//! once per connection and cached (`get` a `SELECT` by key, `add` one `UPDATE … SET c = c + ?
//! … RETURNING c`, a scan one `SELECT … [INDEXED BY index] WHERE prefix AND range ORDER BY …
//! LIMIT`); explicit transactions (`BEGIN IMMEDIATE` for writers). Types: `i64` INTEGER, `f64`
//! REAL, `str` TEXT, `bytes` BLOB.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use ferrite::Value;
use ferrite_baselines::Error as BaselineError;
use ferrite_baselines::sqlite::{SqlValue, SqlValueRef, Sqlite, SqliteConn, SqliteTxn};

use super::{
    ColType, OltpBody, OltpOps, OltpSession, OltpSubject, Range, Row, Schema, TableDef, TableId,
};
use crate::subject::sqlite::{config, info};
use crate::subject::{EngineId, OpError, SubjectInfo, SubjectSetup, TxnKind};

pub(super) fn open(
    id: EngineId,
    dir: &Path,
    setup: &SubjectSetup,
    schema: &Arc<Schema>,
) -> Result<Box<dyn OltpSubject>, OpError> {
    let (cfg, label, short) = config(id, setup);
    let mut ddl = Vec::new();
    for t in &schema.tables {
        let cols: Vec<String> = t
            .columns
            .iter()
            .map(|c| {
                let ty = match c.ty {
                    ColType::I64 => "INTEGER",
                    ColType::F64 => "REAL",
                    ColType::Str => "TEXT",
                    ColType::Bytes => "BLOB",
                };
                format!("{} {ty} NOT NULL", c.name)
            })
            .collect();
        ddl.push(format!(
            "CREATE TABLE {} ({}, PRIMARY KEY ({})) WITHOUT ROWID",
            t.name,
            cols.join(", "),
            names(t, &t.key)
        ));
        for i in &t.indexes {
            ddl.push(format!(
                "CREATE {}INDEX {} ON {} ({})",
                if i.unique { "UNIQUE " } else { "" },
                i.name,
                t.name,
                names(t, &i.columns)
            ));
        }
    }
    let db = Sqlite::create_with_schema(
        &dir.join("sqlite.db"),
        cfg,
        &ddl,
        "the workload's tables, each WITHOUT ROWID with its composite PRIMARY KEY, and its \
         indexes (see oltp.ddl)",
    )?;
    let mut info = info(id, &db, label, short);
    info.config.insert("oltp.ddl".into(), ddl.join("; "));
    Ok(Box::new(SqliteOltp { db, schema: Arc::clone(schema), info }))
}

fn names(t: &TableDef, cols: &[usize]) -> String {
    cols.iter().map(|&c| t.columns[c].name).collect::<Vec<_>>().join(", ")
}

struct SqliteOltp {
    db: Sqlite,
    schema: Arc<Schema>,
    info: SubjectInfo,
}

impl OltpSubject for SqliteOltp {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn OltpSession + '_>, OpError> {
        Ok(Box::new(SqliteSession {
            conn: self.db.connect()?,
            schema: &self.schema,
            sql: HashMap::new(),
        }))
    }

    fn before_timing(&self) -> Result<(), OpError> {
        Ok(self.db.checkpoint()?)
    }
}

/// The SQL text of one statement shape, built once per session.
type SqlCache = HashMap<(TableId, Shape), Arc<str>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Shape {
    Get,
    Insert,
    Delete,
    /// Columns set, as a bit mask (ascending column order).
    Update(u64),
    Add(usize),
    /// Index (`usize::MAX`: primary), prefix length, lower and upper bound kinds (0 none, 1
    /// included, 2 excluded), descending, limited.
    Scan(usize, usize, u8, u8, bool, bool),
}

struct SqliteSession<'a> {
    conn: SqliteConn,
    schema: &'a Schema,
    sql: SqlCache,
}

impl OltpSession for SqliteSession<'_> {
    fn run(&mut self, kind: TxnKind, body: &mut OltpBody<'_>) -> Result<(), OpError> {
        let (schema, sql) = (self.schema, &mut self.sql);
        match kind {
            TxnKind::ReadWrite => self.conn.write(|t| body(&mut SqliteOps { t, schema, sql })),
            TxnKind::ReadOnly => self.conn.read(|t| body(&mut SqliteOps { t, schema, sql })),
        }
    }
}

struct SqliteOps<'t, 'c, 's> {
    t: &'t mut SqliteTxn<'c>,
    schema: &'s Schema,
    sql: &'s mut SqlCache,
}

fn key_where(t: &TableDef, first: usize) -> String {
    let mut s = String::new();
    for (i, &c) in t.key.iter().enumerate() {
        if i > 0 {
            s.push_str(" AND ");
        }
        let _ = write!(s, "{} = ?{}", t.columns[c].name, first + i);
    }
    s
}

fn build(t: &TableDef, shape: Shape) -> String {
    let all = names(t, &(0..t.columns.len()).collect::<Vec<_>>());
    let n = t.key.len();
    match shape {
        Shape::Get => format!("SELECT {all} FROM {} WHERE {}", t.name, key_where(t, 1)),
        Shape::Insert => {
            let params: Vec<String> = (1..=t.columns.len()).map(|i| format!("?{i}")).collect();
            format!("INSERT INTO {} ({all}) VALUES ({})", t.name, params.join(", "))
        }
        Shape::Delete => format!("DELETE FROM {} WHERE {}", t.name, key_where(t, 1)),
        Shape::Update(mask) => {
            let sets: Vec<String> = (0..t.columns.len())
                .filter(|c| mask >> c & 1 == 1)
                .enumerate()
                .map(|(i, c)| format!("{} = ?{}", t.columns[c].name, n + 1 + i))
                .collect();
            format!("UPDATE {} SET {} WHERE {}", t.name, sets.join(", "), key_where(t, 1))
        }
        Shape::Add(c) => {
            let col = t.columns[c].name;
            format!(
                "UPDATE {} SET {col} = {col} + ?{} WHERE {} RETURNING {col}",
                t.name,
                n + 1,
                key_where(t, 1)
            )
        }
        Shape::Scan(index, eq, lo, hi, desc, limited) => {
            let mut order: Vec<usize> =
                if index == usize::MAX { t.key.clone() } else { t.indexes[index].columns.clone() };
            let cols = order.clone();
            if index != usize::MAX {
                order.extend(t.key.iter().filter(|k| !cols.contains(k)));
            }
            let mut conds = Vec::new();
            let mut p = 0;
            for &c in cols.iter().take(eq) {
                p += 1;
                conds.push(format!("{} = ?{p}", t.columns[c].name));
            }
            if let Some(&next) = cols.get(eq) {
                for (kind, incl, excl) in [(lo, ">=", ">"), (hi, "<=", "<")] {
                    if kind != 0 {
                        p += 1;
                        let op = if kind == 1 { incl } else { excl };
                        conds.push(format!("{} {op} ?{p}", t.columns[next].name));
                    }
                }
            }
            let dir = if desc { " DESC" } else { "" };
            let order: Vec<String> =
                order.iter().map(|&c| format!("{}{dir}", t.columns[c].name)).collect();
            let mut s = format!("SELECT {all} FROM {}", t.name);
            if index != usize::MAX {
                // An index scan uses its index: without statistics the planner may pick the
                // primary key when it yields the ORDER BY (TPC-C's newest order of a
                // customer, descending with LIMIT 1, then walks the whole district).
                let _ = write!(s, " INDEXED BY {}", t.indexes[index].name);
            }
            if !conds.is_empty() {
                let _ = write!(s, " WHERE {}", conds.join(" AND "));
            }
            let _ = write!(s, " ORDER BY {}", order.join(", "));
            if limited {
                let _ = write!(s, " LIMIT ?{}", p + 1);
            }
            s
        }
    }
}

fn to_sql(v: &Value) -> SqlValue {
    match v {
        Value::I64(i) => SqlValue::Integer(*i),
        Value::F64(f) => SqlValue::Real(*f),
        Value::Str(s) => SqlValue::Text(s.clone()),
        Value::Bytes(b) => SqlValue::Blob(b.clone()),
        // A type this layer does not declare (`ColType` has none other): rows are checked
        // against the schema before they get here.
        _ => SqlValue::Null,
    }
}

fn from_sql(v: &SqlValueRef<'_>) -> Result<Value, OpError> {
    Ok(match v {
        SqlValueRef::Integer(i) => Value::I64(*i),
        SqlValueRef::Real(f) => Value::F64(*f),
        SqlValueRef::Text(t) => Value::Str(
            std::str::from_utf8(t).map_err(|_| OpError::Engine("TEXT not UTF-8".into()))?.into(),
        ),
        SqlValueRef::Blob(b) => Value::Bytes(b.to_vec()),
        SqlValueRef::Null => return Err(OpError::Engine("NULL in a NOT NULL column".into())),
    })
}

fn bound_kind(b: &Bound<Value>) -> (u8, Option<&Value>) {
    match b {
        Bound::Unbounded => (0, None),
        Bound::Included(v) => (1, Some(v)),
        Bound::Excluded(v) => (2, Some(v)),
    }
}

impl SqliteOps<'_, '_, '_> {
    fn sql(&mut self, t: TableId, shape: Shape) -> Result<(Arc<str>, &TableDef), OpError> {
        let td = self.schema.table(t)?;
        let s = self.sql.entry((t, shape)).or_insert_with(|| build(td, shape).into());
        Ok((Arc::clone(s), td))
    }

    fn key_params(td: &TableDef, key: &[i64]) -> Result<Vec<SqlValue>, OpError> {
        td.pack(key)?; // the same key checks as every engine
        Ok(key.iter().map(|&k| SqlValue::Integer(k)).collect())
    }

    fn rows(
        &mut self,
        sql: &str,
        params: &[SqlValue],
        visit: &mut dyn FnMut(&[Value]),
    ) -> Result<usize, OpError> {
        let mut err = None;
        let mut row = Row::new();
        let n = self.t.query(sql, params, &mut |vals| {
            row.clear();
            for v in vals {
                match from_sql(v) {
                    Ok(v) => row.push(v),
                    Err(e) => err = Some(e),
                }
            }
            visit(&row);
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}

impl OltpOps for SqliteOps<'_, '_, '_> {
    fn get(&mut self, t: TableId, key: &[i64], row: &mut Row) -> Result<bool, OpError> {
        let (sql, td) = self.sql(t, Shape::Get)?;
        let params = Self::key_params(td, key)?;
        let mut found = false;
        self.rows(&sql, &params, &mut |r| {
            row.clear();
            row.extend_from_slice(r);
            found = true;
        })?;
        Ok(found)
    }

    fn insert(&mut self, t: TableId, row: Row) -> Result<bool, OpError> {
        let (sql, td) = self.sql(t, Shape::Insert)?;
        td.check_row(&row)?;
        td.row_key(&row)?;
        let params: Vec<SqlValue> = row.iter().map(to_sql).collect();
        match self.t.execute(&sql, &params) {
            Ok(_) => Ok(true),
            Err(BaselineError::Constraint(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn update(&mut self, t: TableId, key: &[i64], set: &[(usize, Value)]) -> Result<bool, OpError> {
        let td = self.schema.table(t)?;
        let mut mask = 0u64;
        for (c, v) in set {
            let ok = td.columns.get(*c).is_some_and(|col| col.ty.matches(v));
            if !ok || td.key.contains(c) || *c >= 64 || mask >> c & 1 == 1 {
                return Err(OpError::Engine(format!("{}: bad update of column {c}", td.name)));
            }
            mask |= 1 << c;
        }
        let (sql, td) = self.sql(t, Shape::Update(mask))?;
        let mut params = Self::key_params(td, key)?;
        let mut sorted: Vec<&(usize, Value)> = set.iter().collect();
        sorted.sort_by_key(|(c, _)| *c);
        params.extend(sorted.iter().map(|(_, v)| to_sql(v)));
        Ok(self.t.execute(&sql, &params)? == 1)
    }

    fn add(
        &mut self,
        t: TableId,
        key: &[i64],
        column: usize,
        delta: i64,
    ) -> Result<Option<i64>, OpError> {
        let td = self.schema.table(t)?;
        if td.columns.get(column).is_none_or(|c| c.ty != ColType::I64) || td.key.contains(&column) {
            return Err(OpError::Engine(format!("{}: add to column {column}", td.name)));
        }
        let (sql, td) = self.sql(t, Shape::Add(column))?;
        let mut params = Self::key_params(td, key)?;
        params.push(SqlValue::Integer(delta));
        let mut new = None;
        self.rows(&sql, &params, &mut |r| new = r.first().and_then(Value::as_i64))?;
        Ok(new)
    }

    fn delete(&mut self, t: TableId, key: &[i64]) -> Result<bool, OpError> {
        let (sql, td) = self.sql(t, Shape::Delete)?;
        let params = Self::key_params(td, key)?;
        Ok(self.t.execute(&sql, &params)? == 1)
    }

    fn scan(
        &mut self,
        t: TableId,
        range: &Range,
        visit: &mut dyn FnMut(&[Value]),
    ) -> Result<usize, OpError> {
        let td = self.schema.table(t)?;
        let cols = match range.index {
            None => td.key.len(),
            Some(i) => td
                .indexes
                .get(i)
                .ok_or_else(|| OpError::Engine(format!("{}: no index #{i}", td.name)))?
                .columns
                .len(),
        };
        if range.eq.len() > cols || (range.eq.len() == cols && range.has_bounds()) {
            return Err(OpError::Engine(format!("{}: range longer than the key", td.name)));
        }
        let (lo, lo_v) = bound_kind(&range.lo);
        let (hi, hi_v) = bound_kind(&range.hi);
        let shape = Shape::Scan(
            range.index.unwrap_or(usize::MAX),
            range.eq.len(),
            lo,
            hi,
            range.descending,
            range.limit.is_some(),
        );
        let (sql, _) = self.sql(t, shape)?;
        let mut params: Vec<SqlValue> = range.eq.iter().map(to_sql).collect();
        params.extend(lo_v.into_iter().chain(hi_v).map(to_sql));
        if let Some(n) = range.limit {
            params.push(SqlValue::Integer(i64::try_from(n).unwrap_or(i64::MAX)));
        }
        self.rows(&sql, &params, visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::TableDef;

    #[test]
    fn statements_name_the_key_and_the_index() {
        let s = Schema::new(vec![
            TableDef::new("orders")
                .column("w", ColType::I64)
                .column("o", ColType::I64)
                .column("c", ColType::I64)
                .column("note", ColType::Str)
                .key(&[("w", 8), ("o", 24)])
                .index("orders_by_c", &["w", "c"], false),
        ])
        .unwrap();
        let t = s.table(0).unwrap();
        assert_eq!(
            build(t, Shape::Get),
            "SELECT w, o, c, note FROM orders WHERE w = ?1 AND o = ?2"
        );
        assert_eq!(
            build(t, Shape::Update(0b1100)),
            "UPDATE orders SET c = ?3, note = ?4 WHERE w = ?1 AND o = ?2"
        );
        assert_eq!(
            build(t, Shape::Add(2)),
            "UPDATE orders SET c = c + ?3 WHERE w = ?1 AND o = ?2 RETURNING c"
        );
        assert_eq!(
            build(t, Shape::Scan(usize::MAX, 1, 2, 0, true, true)),
            "SELECT w, o, c, note FROM orders WHERE w = ?1 AND o > ?2 ORDER BY w DESC, o DESC \
             LIMIT ?3"
        );
        // Regression: an index scan names its index. Without it SQLite's planner (no
        // statistics) answered TPC-C's newest order of a customer (index prefix, descending,
        // LIMIT 1) by walking the district's orders in primary-key order.
        assert_eq!(
            build(t, Shape::Scan(0, 2, 0, 0, false, false)),
            "SELECT w, o, c, note FROM orders INDEXED BY orders_by_c WHERE w = ?1 AND c = ?2 \
             ORDER BY w, c, o"
        );
    }
}
