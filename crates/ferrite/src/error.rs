//! Typed errors of the database API.
//!
//! # Invariants
//! - Bad input (an unknown table or column, a value of the wrong type, a duplicate key, a key
//!   that is not there) is a typed error, never a panic; an operation that fails this way has no
//!   effect and leaves its transaction usable.
//! - [`Error::Conflict`] dooms the transaction it is returned to: every later operation and the
//!   commit return `Conflict` again; drop (or abort) it and retry the whole transaction.
//! - Only [`Error::Conflict`] and [`Error::Busy`] are retryable ([`Error::is_retryable`]).
//!
//! Errors of the persistence layer convert with `From<ferrite_pmem::Error>`; the mapping is
//! written out on that impl.

use std::io;

use crate::value::{Key, Type, Value};

/// Result type of the database API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of the database API.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The transaction conflicts with a concurrent one and was aborted (or will abort at commit).
    /// **Retryable**: run the whole transaction again.
    #[error("transaction conflict: {reason}")]
    Conflict {
        /// What the conflict was about (for diagnostics only).
        reason: String,
    },

    /// The engine cannot admit the request now (for example a second writer on an engine with
    /// one writer at a time). Nothing was changed. **Retryable**, possibly after a back-off.
    #[error("busy: {0}")]
    Busy(String),

    /// `update` or `delete` named a primary key that has no row.
    #[error("table {table:?}: no row with key {key}")]
    NotFound {
        /// The table.
        table: String,
        /// The primary-key value.
        key: Value,
    },

    /// An insert or update would give two rows the same primary key or the same key in a
    /// unique index.
    #[error("table {table:?}: duplicate key {key} in {index}")]
    DuplicateKey {
        /// The table.
        table: String,
        /// The index (`"primary"` for the primary key).
        index: String,
        /// The duplicated key.
        key: Key,
    },

    /// The request does not fit the schema.
    #[error(transparent)]
    Schema(#[from] SchemaError),

    /// Stored data failed validation.
    #[error("corrupted: {what} (at {at})")]
    Corrupted {
        /// What failed validation.
        what: String,
        /// Where: a file, an offset, a structure.
        at: String,
    },

    /// Stored data is valid but was written by an incompatible format version or for another
    /// layout.
    #[error("incompatible: {what} (at {at})")]
    Incompatible {
        /// What does not match.
        what: String,
        /// Where.
        at: String,
    },

    /// There is no space left: the pool or the file system is full.
    #[error("pool full at {at}: {requested} bytes requested, {available} available")]
    PoolFull {
        /// The pool file or directory.
        at: String,
        /// Bytes requested.
        requested: u64,
        /// Bytes available.
        available: u64,
    },

    /// Another opener (this process or another) holds the database's lock. Not retryable in a
    /// loop: the other opener has to close the database first.
    #[error("{at}: locked by another opener")]
    Locked {
        /// The locked file.
        at: String,
    },

    /// A persist failed or an invariant broke in the middle of a commit: the handle refuses
    /// every call until the database is reopened.
    #[error("the database handle is poisoned by an earlier failure; reopen it")]
    Poisoned,

    /// A `str`/`bytes` value is longer than the engine stores (SOFORT: 15360 bytes, one heap
    /// chunk, until a large-value allocator exists). The operation had no effect; the
    /// transaction stays usable.
    #[error("table {table:?} column {column:?}: a value of {len} bytes exceeds the limit of {max}")]
    ValueTooLarge {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The value's length in bytes.
        len: u64,
        /// The largest length stored.
        max: u64,
    },

    /// The engine does not support the request (for example `open` of an engine that keeps
    /// nothing on disk).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// [`crate::Database::resume`] or [`crate::Database::abort_unfinished`] named no
    /// unfinished transaction: it never existed, or was already resumed, aborted, or aborted
    /// by the timeout. Nothing was changed.
    #[error("no unfinished transaction {0:#x}")]
    UnknownTransaction(u64),

    /// An argument is invalid (a bad option, a ticket of another database, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// An operating-system call failed. A missing database is an `Io` error of kind
    /// `NotFound`, an existing one at `create` of kind `AlreadyExists`.
    #[error("{op} {at}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file involved.
        at: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Whether running the same transaction again may succeed: `true` for [`Error::Conflict`]
    /// and [`Error::Busy`], `false` for everything else.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::Busy(_))
    }

    pub(crate) fn conflict(reason: impl Into<String>) -> Self {
        Error::Conflict { reason: reason.into() }
    }
}

/// A request that does not fit the schema (or a schema that is not valid).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// No table of that name.
    #[error("no table {0:?}")]
    UnknownTable(String),

    /// `create_table` of a name that exists.
    #[error("table {0:?} already exists")]
    TableExists(String),

    /// No column of that name in the table.
    #[error("table {table:?} has no column {column:?}")]
    UnknownColumn {
        /// The table.
        table: String,
        /// The column asked for.
        column: String,
    },

    /// No index of that name on the table.
    #[error("table {table:?} has no index {index:?}")]
    UnknownIndex {
        /// The table.
        table: String,
        /// The index asked for.
        index: String,
    },

    /// A value's type differs from its column's.
    #[error("table {table:?} column {column:?}: expected {expected}, found {found}")]
    TypeMismatch {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The column's type.
        expected: Type,
        /// The value's type.
        found: Type,
    },

    /// A row has the wrong number of values.
    #[error("table {table:?}: a row has {expected} values, found {found}")]
    Arity {
        /// The table.
        table: String,
        /// Number of columns.
        expected: usize,
        /// Number of values given.
        found: usize,
    },

    /// A scan bound has more values than the index has columns.
    #[error("table {table:?} {index}: a key has at most {max} values, found {found}")]
    KeyArity {
        /// The table.
        table: String,
        /// The index (`"primary"` for the primary key).
        index: String,
        /// Number of key columns.
        max: usize,
        /// Number of values given.
        found: usize,
    },

    /// `update` tried to change the primary key (delete and insert instead).
    #[error("table {table:?}: update cannot change primary-key column {column:?}")]
    PrimaryKeyUpdate {
        /// The table.
        table: String,
        /// The primary-key column.
        column: String,
    },

    /// `create_table` got an invalid definition.
    #[error("table {table:?}: invalid definition: {reason}")]
    InvalidDefinition {
        /// The table.
        table: String,
        /// What is wrong.
        reason: String,
    },
}

/// How persistence-layer errors map:
///
/// | `ferrite_pmem::Error` | `ferrite::Error` |
/// |---|---|
/// | `Corrupt`, `Incomplete`, `ForeignSegment`, `MissingSegment`, `BadPointer`, `OutOfBounds`, `Misaligned` | `Corrupted` (a pointer that does not resolve, or an access outside the pool or misaligned, can only come from stored data that is wrong) |
/// | `WrongVersion`, `WrongLayout` | `Incompatible` |
/// | `PoolFull` | `PoolFull` |
/// | `Locked` | `Locked` (not `Busy`: retrying in a loop does not help) |
/// | `NotFound`, `AlreadyExists` | `Io` of kind `NotFound` / `AlreadyExists` |
/// | `TooSmall`, `UnsupportedFlush`, `ModeUnavailable`, `InvalidArgument` | `InvalidArgument` |
/// | `Io` | `Io` |
/// | anything newer | `Io` of kind `Other` wrapping it |
impl From<ferrite_pmem::Error> for Error {
    fn from(e: ferrite_pmem::Error) -> Self {
        use ferrite_pmem::Error as P;
        let shown = |p: &std::path::Path| p.display().to_string();
        match e {
            P::Corrupt { path, what } => Error::Corrupted { what, at: shown(&path) },
            P::Incomplete { ref path } => {
                Error::Corrupted { what: "pool creation did not finish".into(), at: shown(path) }
            }
            P::OutOfBounds { off, len, size } => Error::Corrupted {
                what: format!("access of {len} bytes outside the pool ({size} bytes)"),
                at: format!("offset {off}"),
            },
            P::ForeignSegment { ref path, .. } | P::MissingSegment { ref path, .. } => {
                Error::Corrupted { what: e.to_string(), at: shown(path) }
            }
            P::BadPointer { segment, offset, reason } => Error::Corrupted {
                what: format!("persistent pointer does not resolve: {reason}"),
                at: format!("segment {segment} offset {offset:#x}"),
            },
            P::Misaligned { off, align } => Error::Corrupted {
                what: format!("access not {align}-byte aligned"),
                at: format!("offset {off}"),
            },
            P::WrongVersion { ref path, .. } | P::WrongLayout { ref path, .. } => {
                Error::Incompatible { what: e.to_string(), at: shown(path) }
            }
            P::PoolFull { path, requested, available } => {
                Error::PoolFull { at: shown(&path), requested, available }
            }
            P::Locked { path } => Error::Locked { at: shown(&path) },
            P::NotFound { path } => Error::Io {
                op: "open",
                at: shown(&path),
                source: io::Error::from(io::ErrorKind::NotFound),
            },
            P::AlreadyExists { path } => Error::Io {
                op: "create",
                at: shown(&path),
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            },
            P::TooSmall { .. }
            | P::UnsupportedFlush(_)
            | P::ModeUnavailable { .. }
            | P::InvalidArgument(_) => Error::InvalidArgument(e.to_string()),
            P::Io { op, path, source } => Error::Io { op, at: shown(&path), source },
            other => Error::Io { op: "pmem", at: String::new(), source: io::Error::other(other) },
        }
    }
}

/// How building-block errors map: each variant to the `ferrite::Error` variant of the same
/// name; `Pmem` through the persistence-layer mapping above.
impl From<crate::storage::StorageError> for Error {
    fn from(e: crate::storage::StorageError) -> Self {
        use crate::storage::StorageError as S;
        match e {
            S::Corrupted { what, at } => Error::Corrupted { what, at },
            S::Incompatible { what, at } => Error::Incompatible { what, at },
            S::PoolFull { at, requested, available } => {
                Error::PoolFull { at, requested, available }
            }
            S::InvalidArgument(m) => Error::InvalidArgument(m),
            S::Poisoned => Error::Poisoned,
            S::Pmem(p) => Error::from(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn pmem_errors_map() {
        let p = || PathBuf::from("/x");
        let full = ferrite_pmem::Error::PoolFull { path: p(), requested: 2, available: 1 };
        assert!(matches!(Error::from(full), Error::PoolFull { requested: 2, .. }));
        let locked = ferrite_pmem::Error::Locked { path: p() };
        assert!(matches!(Error::from(locked), Error::Locked { .. }));
        let corrupt = ferrite_pmem::Error::Corrupt { path: p(), what: "crc".into() };
        assert!(matches!(Error::from(corrupt), Error::Corrupted { .. }));
        let inc = ferrite_pmem::Error::Incomplete { path: p() };
        assert!(matches!(Error::from(inc), Error::Corrupted { .. }));
        let nf = ferrite_pmem::Error::NotFound { path: p() };
        assert!(
            matches!(Error::from(nf), Error::Io { ref source, .. } if source.kind() == io::ErrorKind::NotFound)
        );
        let io = ferrite_pmem::Error::Io { op: "open", path: p(), source: io::Error::other("x") };
        assert!(matches!(Error::from(io), Error::Io { op: "open", .. }));
    }

    #[test]
    fn storage_errors_map() {
        use crate::storage::StorageError as S;
        assert!(matches!(Error::from(S::corrupted("x", "y")), Error::Corrupted { .. }));
        assert!(matches!(Error::from(S::Poisoned), Error::Poisoned));
        let full = S::PoolFull { at: "a".into(), requested: 3, available: 0 };
        assert!(matches!(Error::from(full), Error::PoolFull { requested: 3, .. }));
        let locked = S::Pmem(ferrite_pmem::Error::Locked { path: "/x".into() });
        assert!(matches!(Error::from(locked), Error::Locked { .. }));
    }

    #[test]
    fn retryable() {
        assert!(Error::conflict("x").is_retryable());
        assert!(Error::Busy("x".into()).is_retryable());
        assert!(!Error::Poisoned.is_retryable());
        assert!(!Error::NotFound { table: "t".into(), key: Value::I64(1) }.is_retryable());
    }
}
