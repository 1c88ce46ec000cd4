//! Typed errors of the persistence layer.
//!
//! Every failure a caller can cause with bad input (a corrupt or foreign file, a wrong version,
//! an out-of-bounds offset, a full file system) maps to its own variant, so that the engine above
//! can report it precisely and never has to parse messages. Nothing in this crate panics on bad
//! input.

use std::path::PathBuf;

use crate::mode::{DurabilityMode, FlushKind, UnknownName};

/// Result type of the persistence layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of the persistence layer.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pool's header (or a segment header) failed validation: wrong magic, checksum mismatch,
    /// a size or offset that does not match the file. The file was not changed.
    #[error("pool {}: corrupt: {what}", path.display())]
    Corrupt {
        /// The pool file (or `<volatile>`).
        path: PathBuf,
        /// What failed validation.
        what: String,
    },

    /// The pool's creation did not finish: its magic was never written (see rule P-PM-1). Such a
    /// file holds no data; it may be removed and created again.
    #[error("pool {}: incomplete: its creation did not finish (no magic)", path.display())]
    Incomplete {
        /// The pool file.
        path: PathBuf,
    },

    /// The pool was written by a format version or with incompatible features this build does
    /// not understand.
    #[error(
        "pool {}: format version {found} (incompatible flags {incompat_flags:#x}) is not \
         supported; this build reads version {supported} (incompatible flags {known_incompat:#x})",
        path.display()
    )]
    WrongVersion {
        /// The pool file.
        path: PathBuf,
        /// Version found in the header.
        found: u32,
        /// Highest version this build reads.
        supported: u32,
        /// Incompatible-feature flags found in the header.
        incompat_flags: u64,
        /// Incompatible-feature flags this build understands.
        known_incompat: u64,
    },

    /// The pool belongs to another application layout (for example an FPTree pool opened as a
    /// SOFORT pool).
    #[error("pool {}: layout is {found:?}, expected {expected:?}", path.display())]
    WrongLayout {
        /// The pool file.
        path: PathBuf,
        /// Layout the caller asked for.
        expected: String,
        /// Layout recorded in the header.
        found: String,
    },

    /// The file (or requested size) is smaller than the smallest valid pool.
    #[error("pool {}: {size} bytes is too small (the minimum is {min} bytes)", path.display())]
    TooSmall {
        /// The pool file.
        path: PathBuf,
        /// Size found or requested.
        size: u64,
        /// Minimum size.
        min: u64,
    },

    /// There is not enough space: the file system cannot back the requested size, or a request
    /// does not fit in the pool.
    #[error("pool {}: full: {requested} bytes requested, {available} available", path.display())]
    PoolFull {
        /// The pool file or directory.
        path: PathBuf,
        /// Bytes requested.
        requested: u64,
        /// Bytes available.
        available: u64,
    },

    /// Another opener (in this or another process) holds the pool's lock.
    #[error("pool {}: locked by another opener", path.display())]
    Locked {
        /// The pool file.
        path: PathBuf,
    },

    /// The pool file does not exist.
    #[error("pool {}: not found", path.display())]
    NotFound {
        /// The pool file.
        path: PathBuf,
    },

    /// `create` was asked to create a pool where a file already exists.
    #[error("pool {}: already exists", path.display())]
    AlreadyExists {
        /// The pool file.
        path: PathBuf,
    },

    /// A pool-set directory holds a segment file of another pool set.
    #[error(
        "pool set segment {}: belongs to pool {}, not to this pool {}",
        path.display(), uuid_str(found), uuid_str(expected)
    )]
    ForeignSegment {
        /// The segment file.
        path: PathBuf,
        /// UUID of the pool set being opened.
        expected: [u8; 16],
        /// UUID recorded in the segment.
        found: [u8; 16],
    },

    /// A segment that the pool set's segment table lists has no file.
    #[error("pool set {}: segment {id} is missing", path.display())]
    MissingSegment {
        /// The pool-set directory.
        path: PathBuf,
        /// The missing segment's id.
        id: u64,
    },

    /// A persistent pointer does not resolve: null, an unknown segment, or an offset outside
    /// its segment.
    #[error("persistent pointer {segment}:{offset:#x} does not resolve: {reason}")]
    BadPointer {
        /// Segment id of the pointer.
        segment: u64,
        /// Offset of the pointer.
        offset: u64,
        /// Why.
        reason: &'static str,
    },

    /// An access fell outside the pool's addressable range.
    #[error("access of {len} bytes at offset {off} is outside the pool ({size} bytes)")]
    OutOfBounds {
        /// Offset of the access.
        off: u64,
        /// Length of the access.
        len: u64,
        /// Addressable size.
        size: u64,
    },

    /// A word access was not aligned to its width.
    #[error("offset {off} is not {align}-byte aligned")]
    Misaligned {
        /// Offset of the access.
        off: u64,
        /// Required alignment.
        align: u64,
    },

    /// The flush instruction asked for in `Options` is not available on this CPU.
    #[error("flush instruction {0} is not supported by this CPU")]
    UnsupportedFlush(FlushKind),

    /// The durability mode asked for in `Options` cannot be provided for this file.
    #[error("durability mode {mode} is not available for {}: {reason}", path.display())]
    ModeUnavailable {
        /// The pool file.
        path: PathBuf,
        /// Requested mode.
        mode: DurabilityMode,
        /// Why it is not available (for example `MAP_SYNC refused: EOPNOTSUPP`).
        reason: String,
    },

    /// An argument is invalid (empty layout name, a size that is not a multiple of the page
    /// size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// An operating-system call failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`open`, `mmap`, `msync`, ...).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        Error::Corrupt { path: path.into(), what: what.into() }
    }
}

impl From<UnknownName> for Error {
    fn from(e: UnknownName) -> Self {
        Error::InvalidArgument(e.to_string())
    }
}

/// Formats a UUID as `8-4-4-4-12` hex.
pub fn uuid_str(u: &[u8; 16]) -> String {
    let s: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &s[0..8], &s[8..12], &s[12..16], &s[16..20], &s[20..32])
}
