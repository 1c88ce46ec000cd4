//! Log files: the byte file a protocol keeps beside the pages (the rollback journal, the WAL),
//! on the same medium as the page store: file [`super::pmfile::LOG`] of the PM files, or a
//! [`BlockFile`] beside the page file ([`super::file::LOG_FILE`]).
//!
//! # Invariants
//! - L1: a byte written with `write_at` is durable once a later `sync` of this thread
//!   returns; before that, after a crash it holds its old or its new content (PM: per 8-byte
//!   word; block files: per 512-byte sector).
//! - L2: a log file has no durable length of its own: its user validates what it reads
//!   (headers and records carry checksums).
//!
//! # Ordering
//! As the page stores (`super`): the caller names the rule; methods are `#[track_caller]`.
//!
//! # Concurrency
//! Used by the one writer (commit, checkpoint, recovery); `Send + Sync`.

use std::sync::Arc;

use ferrite_pmem::BlockFile;

use super::pmfile::{LOG, PmFiles};
use crate::error::{Error, Result};

/// A protocol's log file (see the module docs).
#[derive(Debug)]
pub(crate) enum LogFile {
    /// File [`LOG`] of the database's PM files.
    Pm(Arc<PmFiles>),
    /// An ordinary file: its length is the capacity, `ensure` extends it.
    Block(BlockFile),
}

impl LogFile {
    /// Bytes readable and writable without growing.
    pub(crate) fn capacity(&self) -> Result<u64> {
        match self {
            LogFile::Pm(f) => f.capacity(LOG),
            LogFile::Block(f) => Ok(f.len()?),
        }
    }

    /// Grows the file to at least `len` bytes.
    #[track_caller]
    pub(crate) fn ensure(&self, len: u64) -> Result<()> {
        match self {
            LogFile::Pm(f) => f.ensure(LOG, len),
            LogFile::Block(f) => {
                if f.len()? < len {
                    f.set_len(len)?;
                }
                Ok(())
            }
        }
    }

    /// Reads `buf.len()` bytes at `off`. Errors: `Corrupted` past the capacity.
    pub(crate) fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            LogFile::Pm(f) => f.read_at(LOG, off, buf),
            LogFile::Block(f) => {
                if f.read_at(off, buf)? < buf.len() {
                    return Err(Error::Corrupted {
                        what: format!("{} bytes at {off} lie past the end of the log", buf.len()),
                        at: "paged log file".into(),
                    });
                }
                Ok(())
            }
        }
    }

    /// Writes `data` at `off` (L1), for the caller's ordering rule `rule`.
    #[track_caller]
    pub(crate) fn write_at(&self, off: u64, data: &[u8], rule: &'static str) -> Result<()> {
        match self {
            LogFile::Pm(f) => f.write_at(LOG, off, data, rule),
            LogFile::Block(f) => Ok(f.write_at_rule(rule, off, data)?),
        }
    }

    /// Makes every earlier write of this thread durable (the caller's rule `rule`).
    #[track_caller]
    pub(crate) fn sync(&self, rule: &'static str) -> Result<()> {
        match self {
            LogFile::Pm(f) => {
                f.sync(rule); // ORDER(P-PG-0): the caller's sync point; its rule says what it orders
                Ok(())
            }
            LogFile::Block(f) => Ok(f.sync_rule(rule)?), // ORDER(P-PG-0): the caller's sync point; its rule says what it orders
        }
    }
}
