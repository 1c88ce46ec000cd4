//! The error type of the building blocks (`alloc`, `fptree`, and the PM logs engines share).
//!
//! Building blocks sit below every engine and know nothing of tables, transactions or the
//! `Database` API, so they do not return [`crate::Error`]: they return [`StorageError`], and an
//! engine converts it at its boundary with `From<StorageError> for crate::Error` (the mapping is
//! written out on that impl in `error.rs`).
//!
//! # Invariants
//! - A building block that returns an error other than [`StorageError::Poisoned`] has made no
//!   durable change that recovery would not undo: the operation failed as a whole.
//! - Stored data that fails validation (a bad magic, checksum, offset or length) is
//!   [`StorageError::Corrupted`], in every build profile: never a panic or an overflow.

/// Result type of the building blocks.
pub type StorageResult<T, E = StorageError> = std::result::Result<T, E>;

/// An error of a persistent building block (allocator, tree, log).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Stored data failed validation.
    #[error("corrupted: {what} (at {at})")]
    Corrupted {
        /// What failed validation.
        what: String,
        /// Where: a structure, a segment and offset.
        at: String,
    },

    /// Stored data is valid but of an incompatible format version or layout.
    #[error("incompatible: {what} (at {at})")]
    Incompatible {
        /// What does not match.
        what: String,
        /// Where.
        at: String,
    },

    /// No space is left for the request.
    #[error("pool full at {at}: {requested} bytes requested, {available} available")]
    PoolFull {
        /// The structure or pool that is full.
        at: String,
        /// Bytes requested.
        requested: u64,
        /// Bytes available.
        available: u64,
    },

    /// An argument is invalid (a size out of range, a pointer that is not an allocated block).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// An earlier persist failed or an invariant broke mid-operation; the structure refuses
    /// every call until it is reopened.
    #[error("poisoned by an earlier failure; reopen")]
    Poisoned,

    /// The persistence layer failed.
    #[error(transparent)]
    Pmem(#[from] ferrite_pmem::Error),
}

impl StorageError {
    /// A `Corrupted` error.
    pub fn corrupted(what: impl Into<String>, at: impl Into<String>) -> Self {
        StorageError::Corrupted { what: what.into(), at: at.into() }
    }
}
