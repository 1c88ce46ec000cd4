//! Table schemas: typed columns, a one-column primary key, secondary indexes.
//!
//! # Invariants
//! - A table created in a database passed [`Table::new`]'s checks: a non-empty name, at least one
//!   column, unique non-empty column names, a primary key naming an `i64`, `str` or `bytes`
//!   column, unique index names (never `"primary"`, which names the primary key in errors), and
//!   every index over one or more distinct existing columns.
//! - Every row stored in a table has exactly one value per column, each of the column's type
//!   ([`Table::check_row`]); engines may rely on it and on the positions recorded in [`Table`].
//! - The primary key is unique; a `unique` index makes the tuple of its columns unique.
//!
//! Schemas are immutable once created: there is no `ALTER TABLE`.

use std::collections::BTreeMap;

use crate::encoding::{encode_key, encode_value};
use crate::error::SchemaError;
use crate::value::{Type, Value};

/// The name reserved for the primary key where an index name is expected (in
/// [`crate::Error::DuplicateKey`]).
pub const PRIMARY: &str = "primary";

/// A column: a name and a type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    name: String,
    ty: Type,
}

impl Column {
    /// A column.
    pub fn new(name: impl Into<String>, ty: Type) -> Self {
        Column { name: name.into(), ty }
    }

    /// The column's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The column's type.
    pub fn ty(&self) -> Type {
        self.ty
    }
}

/// A secondary index: a name, the indexed columns (in key order), and whether it is unique.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexSchema {
    name: String,
    columns: Vec<String>,
    unique: bool,
}

impl IndexSchema {
    /// The index's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The indexed columns, in key order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Whether no two rows may have equal values in all indexed columns.
    pub fn is_unique(&self) -> bool {
        self.unique
    }
}

/// The definition of a table, built with builder methods and passed to
/// [`crate::Database::create_table`], which checks it.
///
/// ```
/// use ferrite::{TableSchema, Type};
/// let schema = TableSchema::new("usertable")
///     .column("k", Type::I64)
///     .column("v", Type::Bytes)
///     .column("email", Type::Str)
///     .primary_key("k")
///     .index("by_v", ["v"])
///     .unique_index("by_email", ["email"]);
/// assert_eq!(schema.columns().len(), 3);
/// assert_eq!(schema.primary_key_column(), Some("k"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSchema {
    name: String,
    columns: Vec<Column>,
    primary_key: Option<String>,
    indexes: Vec<IndexSchema>,
}

impl TableSchema {
    /// A table with no columns yet.
    pub fn new(name: impl Into<String>) -> Self {
        TableSchema {
            name: name.into(),
            columns: Vec::new(),
            primary_key: None,
            indexes: Vec::new(),
        }
    }

    /// Appends a column.
    pub fn column(mut self, name: impl Into<String>, ty: Type) -> Self {
        self.columns.push(Column::new(name, ty));
        self
    }

    /// Names the primary-key column (required; `i64`, `str` or `bytes`).
    pub fn primary_key(mut self, column: impl Into<String>) -> Self {
        self.primary_key = Some(column.into());
        self
    }

    /// Adds a non-unique secondary index over `columns` (in key order).
    pub fn index<I, S>(self, name: impl Into<String>, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.add_index(name.into(), columns, false)
    }

    /// Adds a unique secondary index over `columns` (in key order).
    pub fn unique_index<I, S>(self, name: impl Into<String>, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.add_index(name.into(), columns, true)
    }

    fn add_index<I, S>(mut self, name: String, columns: I, unique: bool) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let columns = columns.into_iter().map(Into::into).collect();
        self.indexes.push(IndexSchema { name, columns, unique });
        self
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The columns, in row order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The primary-key column, if one was named.
    pub fn primary_key_column(&self) -> Option<&str> {
        self.primary_key.as_deref()
    }

    /// The secondary indexes.
    pub fn indexes(&self) -> &[IndexSchema] {
        &self.indexes
    }
}

/// A checked index: column positions resolved.
#[derive(Clone, Debug)]
pub(crate) struct Index {
    pub name: String,
    pub columns: Vec<usize>,
    pub unique: bool,
}

/// A checked table schema with resolved positions; what engines work with.
#[derive(Clone, Debug)]
pub(crate) struct Table {
    pub schema: TableSchema,
    /// Position of the primary-key column.
    pub pk: usize,
    pub indexes: Vec<Index>,
    columns_by_name: BTreeMap<String, usize>,
}

impl Table {
    /// Checks `schema` (see the module invariants).
    pub fn new(schema: TableSchema) -> Result<Table, SchemaError> {
        let table = schema.name.clone();
        let invalid =
            |reason: String| SchemaError::InvalidDefinition { table: table.clone(), reason };
        if schema.name.is_empty() {
            return Err(invalid("the table name is empty".into()));
        }
        if schema.columns.is_empty() {
            return Err(invalid("a table needs at least one column".into()));
        }
        let mut columns_by_name = BTreeMap::new();
        for (i, c) in schema.columns.iter().enumerate() {
            if c.name.is_empty() {
                return Err(invalid(format!("column {i} has an empty name")));
            }
            if columns_by_name.insert(c.name.clone(), i).is_some() {
                return Err(invalid(format!("column {:?} is declared twice", c.name)));
            }
        }
        let Some(pk_name) = schema.primary_key.as_deref() else {
            return Err(invalid("no primary key was named".into()));
        };
        let Some(&pk) = columns_by_name.get(pk_name) else {
            return Err(invalid(format!("primary key {pk_name:?} is not a column")));
        };
        let pk_ty = schema.columns.get(pk).map_or(Type::I64, Column::ty);
        if !pk_ty.can_be_primary_key() {
            return Err(invalid(format!(
                "primary key {pk_name:?} has type {pk_ty}; use i64, str or bytes"
            )));
        }
        let mut indexes = Vec::with_capacity(schema.indexes.len());
        let mut index_names = BTreeMap::new();
        for ix in &schema.indexes {
            if ix.name.is_empty() || ix.name == PRIMARY {
                return Err(invalid(format!("index name {:?} is empty or reserved", ix.name)));
            }
            if index_names.insert(ix.name.clone(), ()).is_some() {
                return Err(invalid(format!("index {:?} is declared twice", ix.name)));
            }
            if ix.columns.is_empty() {
                return Err(invalid(format!("index {:?} has no columns", ix.name)));
            }
            let mut cols = Vec::with_capacity(ix.columns.len());
            for c in &ix.columns {
                let Some(&pos) = columns_by_name.get(c) else {
                    return Err(invalid(format!("index {:?} names unknown column {c:?}", ix.name)));
                };
                if cols.contains(&pos) {
                    return Err(invalid(format!("index {:?} names column {c:?} twice", ix.name)));
                }
                cols.push(pos);
            }
            indexes.push(Index { name: ix.name.clone(), columns: cols, unique: ix.unique });
        }
        Ok(Table { schema, pk, indexes, columns_by_name })
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.schema.name
    }

    /// Number of columns.
    pub fn arity(&self) -> usize {
        self.schema.columns.len()
    }

    /// The type of column `pos`.
    pub fn column_type(&self, pos: usize) -> Option<Type> {
        self.schema.columns.get(pos).map(Column::ty)
    }

    /// The name of column `pos`.
    pub fn column_name(&self, pos: usize) -> &str {
        self.schema.columns.get(pos).map_or("?", Column::name)
    }

    /// The position of column `name`.
    pub fn column(&self, name: &str) -> Result<usize, SchemaError> {
        self.columns_by_name.get(name).copied().ok_or_else(|| SchemaError::UnknownColumn {
            table: self.name().to_owned(),
            column: name.to_owned(),
        })
    }

    /// The position of index `name` in [`Table::indexes`].
    pub fn index(&self, name: &str) -> Result<usize, SchemaError> {
        self.indexes.iter().position(|ix| ix.name == name).ok_or_else(|| {
            SchemaError::UnknownIndex { table: self.name().to_owned(), index: name.to_owned() }
        })
    }

    /// Checks that `v` has column `pos`'s type.
    pub fn check_value(&self, pos: usize, v: &Value) -> Result<(), SchemaError> {
        let expected = self.column_type(pos).ok_or_else(|| SchemaError::UnknownColumn {
            table: self.name().to_owned(),
            column: format!("#{pos}"),
        })?;
        if v.ty() == expected {
            Ok(())
        } else {
            Err(SchemaError::TypeMismatch {
                table: self.name().to_owned(),
                column: self.column_name(pos).to_owned(),
                expected,
                found: v.ty(),
            })
        }
    }

    /// Checks a whole row: arity and every value's type.
    pub fn check_row(&self, row: &[Value]) -> Result<(), SchemaError> {
        if row.len() != self.arity() {
            return Err(SchemaError::Arity {
                table: self.name().to_owned(),
                expected: self.arity(),
                found: row.len(),
            });
        }
        row.iter().enumerate().try_for_each(|(i, v)| self.check_value(i, v))
    }

    /// Checks a primary-key value and encodes it.
    pub fn encode_pk_value(&self, key: &Value) -> Result<Vec<u8>, SchemaError> {
        self.check_value(self.pk, key)?;
        Ok(encode_key([key]))
    }

    /// The primary-key value of a checked row.
    pub fn pk_value<'r>(&self, row: &'r [Value]) -> Option<&'r Value> {
        row.get(self.pk)
    }

    /// The encoded primary key of a checked row.
    pub fn encode_pk(&self, row: &[Value]) -> Vec<u8> {
        encode_key(row.get(self.pk))
    }

    /// The encoded values of index `ix`'s columns of a checked row (the index key without the
    /// primary-key suffix).
    pub fn index_prefix(&self, ix: &Index, row: &[Value]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        for v in ix.columns.iter().filter_map(|&c| row.get(c)) {
            encode_value(&mut out, v);
        }
        out
    }

    /// The full index entry key of a checked row: index columns, then the encoded primary key
    /// (which makes entries of a non-unique index distinct).
    pub fn index_entry(&self, ix: &Index, row: &[Value], pk: &[u8]) -> Vec<u8> {
        let mut out = self.index_prefix(ix, row);
        out.extend_from_slice(pk);
        out
    }

    /// The values of index `ix`'s columns of a checked row.
    pub fn index_values(&self, ix: &Index, row: &[Value]) -> Vec<Value> {
        ix.columns.iter().filter_map(|&c| row.get(c).cloned()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> TableSchema {
        TableSchema::new("t").column("k", Type::I64).column("v", Type::Str)
    }

    #[test]
    fn rejects_bad_definitions() {
        let bad = [
            base(),
            base().primary_key("nope"),
            TableSchema::new("t").column("k", Type::F64).primary_key("k"),
            base().column("k", Type::I64).primary_key("k"),
            base().primary_key("k").index("i", ["v"]).index("i", ["k"]),
            base().primary_key("k").index("i", Vec::<String>::new()),
            base().primary_key("k").index("i", ["v", "v"]),
            base().primary_key("k").index("primary", ["v"]),
            base().primary_key("k").index("i", ["w"]),
            TableSchema::new("").column("k", Type::I64).primary_key("k"),
            TableSchema::new("t").primary_key("k"),
        ];
        for s in bad {
            assert!(
                matches!(Table::new(s.clone()), Err(SchemaError::InvalidDefinition { .. })),
                "{s:?} accepted"
            );
        }
    }

    #[test]
    fn checks_rows() {
        let t = Table::new(base().primary_key("k").index("by_v", ["v"])).expect("valid");
        assert!(t.check_row(&[Value::I64(1), Value::from("a")]).is_ok());
        assert!(matches!(t.check_row(&[Value::I64(1)]), Err(SchemaError::Arity { .. })));
        assert!(matches!(
            t.check_row(&[Value::from("a"), Value::from("a")]),
            Err(SchemaError::TypeMismatch { .. })
        ));
        assert!(matches!(t.column("zz"), Err(SchemaError::UnknownColumn { .. })));
        assert!(matches!(t.index("zz"), Err(SchemaError::UnknownIndex { .. })));
    }
}
