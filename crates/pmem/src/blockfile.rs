//! Block files: ordinary files read and written at offsets (`pread`/`pwrite`) and made durable
//! with `fdatasync`, for the page file, rollback journal and WAL of a paged engine. Two
//! backends behind one type: a real file, or a file of a [`SimDomain`] whose crash model the
//! tester explores (`sim/blocks.rs`).
//!
//! # Invariants
//! - Durability follows the block-file axioms of `docs/design/persistence.md` §1: a 512-byte
//!   sector write is atomic (B1); nothing written is durable before the file's next
//!   [`BlockFile::sync`], which makes every earlier write and length change of **that file**
//!   durable (B2); a sync orders nothing of other files or of persistent memory (B3).
//!   Creation and removal are durable when they return (the real backend syncs the
//!   directory; the simulated one applies them to the durable state at once).
//! - Reads past the end of the file are not errors: the bytes past the end read as zeros and
//!   [`BlockFile::read_at`] returns how many bytes came from the file (as SQLite's VFS does
//!   with a short read), so a caller that needs the whole range compares the count.
//! - A file is open through at most one handle at a time: the real backend takes an exclusive
//!   `flock`, the simulated one a flag in the domain; a second opener gets
//!   [`Error::Locked`]. Dropping the handle releases it.
//!
//! # Sync-latency emulation
//! On tmpfs `fdatasync` costs next to nothing, where a flash device takes microseconds to
//! hundreds of microseconds. A handle given a latency with [`BlockFile::set_sync_latency_ns`]
//! (from `Options::sync_latency_ns`; 0 by default) busy-waits that long after every real
//! `fdatasync` has returned, with the persist-latency emulator's delay primitive
//! ([`emulation::delay_ns`](crate::emulation::delay_ns)), and adds it to the thread's
//! `Counters::injected_ns`, as a fence's emulated latency is: with a latency `D`, `n` syncs
//! inject exactly `n × D`. A failed `fdatasync` waits nothing. The simulated backend ignores
//! the latency (its syncs are events of the tester's crash model, not timed).
//!
//! # Ordering
//! The handle adds no ordering of its own: calls reach the file (or the domain) in the order
//! they are made. Every write and sync is counted in the calling thread's [`Counters`]
//! (`file_bytes_written`, `syncs`). Simulated writes, length changes and syncs are events of
//! the domain with the caller's `#[track_caller]` site (and rule, through the `*_rule`
//! methods); a sync's event comes **before** it takes effect, a crash point.
//!
//! # Concurrency
//! `BlockFile` is `Send + Sync` and every method takes `&self`: concurrent writes to disjoint
//! ranges are fine; overlapping concurrent writes leave one of them per byte, as `pwrite` does.
//!
//! [`Counters`]: crate::Counters

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::counters;
use crate::emulation;
use crate::error::{Error, Result};
use crate::platform;
use crate::sim::{SimDomain, Site};

enum Backend {
    Real { file: File, path: PathBuf },
    Sim { domain: Arc<SimDomain>, name: String, id: u64 },
}

/// A file accessed at offsets and synced explicitly (see the module docs).
pub struct BlockFile {
    backend: Backend,
    /// Emulated latency of every real sync, ns (0: none).
    sync_latency_ns: u64,
}

impl fmt::Debug for BlockFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.backend {
            Backend::Real { path, .. } => f.debug_struct("BlockFile").field("path", path).finish(),
            Backend::Sim { name, .. } => f.debug_struct("BlockFile").field("sim", name).finish(),
        }
    }
}

#[track_caller]
fn site(rule: Option<&'static str>) -> Site {
    Site { location: Location::caller(), rule }
}

fn lock_or_fail(file: &File, path: &Path) -> Result<()> {
    match platform::try_lock_exclusive(file) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Locked { path: path.to_path_buf() }),
        Err(e) => Err(Error::io("flock", path, e)),
    }
}

fn sync_parent(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    platform::sync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))
}

impl BlockFile {
    /// Creates an empty file at `path` (which must not exist: [`Error::AlreadyExists`]),
    /// locks it, and syncs its directory so the creation is durable.
    pub fn create(path: impl AsRef<Path>) -> Result<BlockFile> {
        let path = path.as_ref();
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(|e| {
                match e.kind() {
                    std::io::ErrorKind::AlreadyExists => {
                        Error::AlreadyExists { path: path.to_path_buf() }
                    }
                    _ => Error::io("create", path, e),
                }
            })?;
        lock_or_fail(&file, path)?;
        sync_parent(path)?;
        Ok(BlockFile {
            backend: Backend::Real { file, path: path.to_path_buf() },
            sync_latency_ns: 0,
        })
    }

    /// Opens the existing file at `path` ([`Error::NotFound`] if there is none) and locks it
    /// ([`Error::Locked`] if another handle, in this or another process, holds it).
    pub fn open(path: impl AsRef<Path>) -> Result<BlockFile> {
        let path = path.as_ref();
        let file =
            OpenOptions::new().read(true).write(true).open(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::NotFound { path: path.to_path_buf() },
                _ => Error::io("open", path, e),
            })?;
        lock_or_fail(&file, path)?;
        Ok(BlockFile {
            backend: Backend::Real { file, path: path.to_path_buf() },
            sync_latency_ns: 0,
        })
    }

    /// Removes the file at `path` and syncs its directory ([`Error::NotFound`] if there is
    /// none).
    pub fn remove(path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::remove_file(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotFound { path: path.to_path_buf() },
            _ => Error::io("remove", path, e),
        })?;
        sync_parent(path)
    }

    /// Creates an empty block file called `name` in `domain` (durable at once: a crash point
    /// for the tester) and opens it.
    #[track_caller]
    pub fn create_sim(domain: &Arc<SimDomain>, name: &str) -> Result<BlockFile> {
        let id = domain.block_create(name, true, site(None))?;
        Ok(BlockFile {
            backend: Backend::Sim { domain: domain.clone(), name: name.to_owned(), id },
            sync_latency_ns: 0,
        })
    }

    /// Opens block file `name` of `domain` (e.g. a domain made from a crash image with
    /// [`SimDomain::open_block_image`] or [`SimDomain::add_block_files`]).
    pub fn open_sim(domain: &Arc<SimDomain>, name: &str) -> Result<BlockFile> {
        let id = domain.block_open(name)?;
        Ok(BlockFile {
            backend: Backend::Sim { domain: domain.clone(), name: name.to_owned(), id },
            sync_latency_ns: 0,
        })
    }

    /// Removes block file `name` of `domain` (durable at once). A handle still open on it
    /// gets [`Error::NotFound`] from then on.
    #[track_caller]
    pub fn remove_sim(domain: &Arc<SimDomain>, name: &str) -> Result<()> {
        domain.block_remove(name, site(None))
    }

    /// Reads `buf.len()` bytes at `off`. Bytes past the end of the file read as zeros; returns
    /// how many bytes came from the file (less than `buf.len()` only at the end of the file).
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize> {
        match &self.backend {
            Backend::Real { file, path } => {
                let mut n = 0;
                while n < buf.len() {
                    match file.read_at(&mut buf[n..], off + n as u64) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(Error::io("pread", path, e)),
                    }
                }
                buf[n..].fill(0);
                Ok(n)
            }
            Backend::Sim { domain, name, id } => domain.block_read(name, *id, off, buf),
        }
    }

    /// Writes `data` at `off`, extending the file if it ends before `off + data.len()` (a gap
    /// reads as zeros). Not durable before the next [`BlockFile::sync`].
    #[track_caller]
    pub fn write_at(&self, off: u64, data: &[u8]) -> Result<()> {
        self.write_at_site(off, data, site(None))
    }

    /// [`BlockFile::write_at`], naming the ordering rule the write implements.
    #[track_caller]
    pub fn write_at_rule(&self, rule: &'static str, off: u64, data: &[u8]) -> Result<()> {
        self.write_at_site(off, data, site(Some(rule)))
    }

    fn write_at_site(&self, off: u64, data: &[u8], at: Site) -> Result<()> {
        match &self.backend {
            Backend::Real { file, path } => {
                file.write_all_at(data, off).map_err(|e| Error::io("pwrite", path, e))?
            }
            Backend::Sim { domain, name, id } => {
                domain.block_write(name, Some(*id), off, data, at)?
            }
        }
        counters::add_file_written(data.len() as u64);
        Ok(())
    }

    /// Makes every earlier write and length change of this file durable (`fdatasync`).
    #[track_caller]
    pub fn sync(&self) -> Result<()> {
        self.sync_site(site(None))
    }

    /// [`BlockFile::sync`], naming the ordering rule the sync implements.
    #[track_caller]
    pub fn sync_rule(&self, rule: &'static str) -> Result<()> {
        self.sync_site(site(Some(rule)))
    }

    fn sync_site(&self, at: Site) -> Result<()> {
        match &self.backend {
            Backend::Real { file, path } => {
                file.sync_data().map_err(|e| Error::io("fdatasync", path, e))?;
                let ns = self.sync_latency_ns;
                if ns != 0 {
                    emulation::delay_ns(ns);
                    counters::add_injected(ns);
                }
            }
            Backend::Sim { domain, name, id } => domain.block_sync(name, Some(*id), at)?,
        }
        counters::add_sync();
        Ok(())
    }

    /// Sets the emulated latency, in nanoseconds, that every later [`BlockFile::sync`] of a
    /// real file waits after its `fdatasync` returns (0: none, the default; see the module
    /// docs). Simulated files ignore it.
    pub fn set_sync_latency_ns(&mut self, ns: u64) {
        self.sync_latency_ns = ns;
    }

    /// The emulated sync latency set with [`BlockFile::set_sync_latency_ns`], ns.
    pub fn sync_latency_ns(&self) -> u64 {
        self.sync_latency_ns
    }

    /// Sets the file's length: truncates, or extends with zeros. Not durable before the next
    /// [`BlockFile::sync`].
    #[track_caller]
    pub fn set_len(&self, len: u64) -> Result<()> {
        match &self.backend {
            Backend::Real { file, path } => {
                file.set_len(len).map_err(|e| Error::io("ftruncate", path, e))
            }
            Backend::Sim { domain, name, id } => {
                domain.block_set_len(name, Some(*id), len, site(None))
            }
        }
    }

    /// The file's current length (what reads see, durable or not).
    pub fn len(&self) -> Result<u64> {
        match &self.backend {
            Backend::Real { file, path } => {
                file.metadata().map(|m| m.len()).map_err(|e| Error::io("fstat", path, e))
            }
            Backend::Sim { domain, name, id } => domain.block_len(name, *id),
        }
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// The simulated domain of a simulated file.
    pub fn sim(&self) -> Option<&Arc<SimDomain>> {
        match &self.backend {
            Backend::Real { .. } => None,
            Backend::Sim { domain, .. } => Some(domain),
        }
    }
}

impl Drop for BlockFile {
    fn drop(&mut self) {
        if let Backend::Sim { domain, name, id } = &self.backend {
            domain.block_close(name, *id);
        }
    }
}
