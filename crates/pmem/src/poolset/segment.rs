//! Segment files of a pool set: their names (`seg-<id>.pm`), exclusive creation with backing
//! space allocated up front, and reading a segment's header without mapping it.
//!
//! # Invariants
//! - A segment file is created with `create_new` (never over an existing file) and its space
//!   is `fallocate`d before anyone maps it (conventions §2.8: a full file system is
//!   `PoolFull`, never SIGBUS). A half-created file is removed by its [`SegmentGuard`] unless
//!   the creator disarms it.
//! - Only segment 0's file carries the set's `flock`.
//!
//! # Ordering
//! None here: the segment header's P-PM-1 order is written by the caller through the mapping.
//!
//! # Concurrency
//! Plain functions; the pool set calls them under its membership mutex (or before the set
//! exists).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zerocopy::FromBytes;

use crate::error::{Error, Result};
use crate::header::SegmentHeader;
use crate::platform;
use crate::pool::RemoveOnError;
use crate::pptr::SegmentId;

pub(super) fn seg_name(id: SegmentId) -> String {
    format!("seg-{id:06}.pm")
}

pub(super) fn seg_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(seg_name(id))
}

pub(super) fn parse_seg_name(name: &str) -> Option<SegmentId> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".pm")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(super) fn read_seg_header(file: &File, path: &Path) -> Result<Option<SegmentHeader>> {
    let mut buf = [0u8; size_of::<SegmentHeader>()];
    match file.read_exact_at(&mut buf, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Error::io("read", path, e)),
    }
    Ok(SegmentHeader::read_from_bytes(&buf).ok())
}

/// A half-created segment file, removed on drop unless disarmed.
pub(super) struct SegmentGuard<'a>(RemoveOnError<'a>);
impl SegmentGuard<'_> {
    pub(super) fn disarm(mut self) {
        self.0.0 = None;
    }
}

/// Creates `path` exclusively, locks nothing (the set's lock is on segment 0), allocates
/// `size` bytes of space.
pub(super) fn create_segment_file<'a>(
    path: &'a Path,
    size: u64,
    dir: &Path,
) -> Result<(File, SegmentGuard<'a>)> {
    let space = platform::fs_space(dir).map_err(|e| Error::io("statvfs", dir, e))?;
    if size > space.available {
        return Err(Error::PoolFull {
            path: path.to_path_buf(),
            requested: size,
            available: space.available,
        });
    }
    let file = match OpenOptions::new().read(true).write(true).create_new(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(Error::AlreadyExists { path: path.to_path_buf() });
        }
        Err(e) => return Err(Error::io("create", path, e)),
    };
    let guard = SegmentGuard(RemoveOnError(Some(path)));
    if path.file_name().is_some_and(|n| n == "seg-000000.pm")
        && !platform::try_lock_exclusive(&file).map_err(|e| Error::io("flock", path, e))?
    {
        return Err(Error::Locked { path: path.to_path_buf() });
    }
    platform::allocate_space(&file, size).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT) => Error::PoolFull {
            path: path.to_path_buf(),
            requested: size,
            available: space.available,
        },
        _ => Error::io("fallocate", path, e),
    })?;
    Ok((file, guard))
}
