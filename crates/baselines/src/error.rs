//! The one error type of the baselines.

use std::path::PathBuf;

/// What went wrong in a baseline engine.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite failed (other than busy/locked, which is [`Error::Busy`]).
    #[error("sqlite: {0}")]
    Sqlite(rusqlite::Error),
    /// A constraint failed (SQLite `SQLITE_CONSTRAINT`: a duplicate primary or unique key).
    /// The statement had no effect; the transaction stays usable.
    #[error("constraint: {0}")]
    Constraint(String),
    /// The engine could not admit the transaction now (SQLite `SQLITE_BUSY`/`SQLITE_LOCKED`
    /// after its busy timeout). Retrying the whole transaction may succeed.
    #[error("busy: {0}")]
    Busy(String),
    /// An LMDB call failed.
    #[error("lmdb: {op}: {message} (code {code})")]
    Lmdb {
        /// The LMDB function.
        op: &'static str,
        /// Its return code.
        code: i32,
        /// `mdb_strerror` of the code.
        message: String,
    },
    /// A PMDK (libpmemobj) call failed.
    #[error("pmdk: {op}: {message}")]
    Pmdk {
        /// The operation.
        op: &'static str,
        /// `pmemobj_errormsg` or the shim's message.
        message: String,
    },
    /// The database ran out of space (LMDB map full, PMDK pool full).
    #[error("{engine} is full: {detail}")]
    Full {
        /// Which engine.
        engine: &'static str,
        /// What ran out and how to get more.
        detail: String,
    },
    /// A bad argument (table name, key out of range, write in a read-only transaction).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A file-system call failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether running the whole transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Busy(_))
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Busy(e.to_string()),
            Some(ErrorCode::ConstraintViolation) => Error::Constraint(e.to_string()),
            _ => Error::Sqlite(e),
        }
    }
}

/// Result of the baselines.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks that `name` is a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 bytes), so it
/// can name an SQL table or an LMDB database without quoting.
pub(crate) fn check_table_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "table name {name:?} is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 64 bytes)"
        )))
    }
}

/// Keys are `u64` below 2^63, so that SQLite's signed `INTEGER` orders them like every other
/// engine does.
pub(crate) fn check_key(key: u64) -> Result<i64> {
    i64::try_from(key)
        .map_err(|_| Error::InvalidArgument(format!("key {key:#x} is not below 2^63")))
}
