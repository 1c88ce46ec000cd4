//! Rebuilding a domain from a recorded trace.
//!
//! # Invariants
//! - The rebuilt domain owns the memory of every file it creates (the file's working image is
//!   a [`SimBuffer`] kept in the file itself), so the domain can be moved anywhere, out of the
//!   [`Replay`] included, and every later capture reads live memory. (An earlier version kept
//!   the buffers in a private field next to a public `domain` field: moving the domain out
//!   freed its working images.)
//! - After replaying the same events, the working image, the durable image, the dirty lines
//!   and every recorded thread's pending lines equal the recording domain's; so do the block
//!   files' working and durable contents and unsynced versions (their handles are not
//!   replayed: replayed block files are closed).
//!
//! # Concurrency
//! Replay runs on the calling thread; flushes and fences are applied **as the thread that
//! recorded them** (pending sets keyed by the recorded thread index).

use std::fmt;
use std::panic::Location;

use crate::error::{Error, Result};

use super::buffer::SimBuffer;
use super::{EventKind, SimDomain, Site, TraceEvent};

/// A domain rebuilt by [`replay`]. The domain owns the memory of its files, so it may be
/// moved out of this struct.
pub struct Replay {
    /// The rebuilt domain: capture images from it as from the original.
    pub domain: SimDomain,
}

impl fmt::Debug for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replay").field("domain", &self.domain).finish()
    }
}

/// Rebuilds a domain from a recorded trace: files are created, stores written, flushes and
/// fences applied **as the thread that recorded them** (pending sets keyed by the recorded
/// thread index), so the working image, the durable image, the dirty lines and every
/// thread's pending lines equal the recording domain's after the same events. Sites of the
/// replayed events are not preserved (hooks on the replay see this function's location).
pub fn replay(events: &[TraceEvent], eadr: bool) -> Result<Replay> {
    let domain = SimDomain::new(eadr);
    let site = Site { location: Location::caller(), rule: None };
    let bad = |e: &TraceEvent, why: &str| {
        Error::InvalidArgument(format!("trace event {} cannot be replayed: {why}", e.seq))
    };
    for e in events {
        match e.kind {
            EventKind::FileCreate => {
                let len = usize::try_from(e.len).map_err(|_| bad(e, "file too large"))?;
                domain.file_create_owned(&e.file, e.len, SimBuffer::new(len)?, site)?;
            }
            EventKind::FileRemove => domain.file_remove(&e.file, site)?,
            EventKind::FilePunch => domain.file_punch(&e.file, e.offset, e.len, site)?,
            // A close changes nothing durable; the files stay in the domain (D4).
            EventKind::Close => {}
            EventKind::Store | EventKind::NtStore => {
                let (addr, region) = {
                    let g = domain.read_gate();
                    let f = g.files.get(&e.file).ok_or_else(|| bad(e, "unknown file"))?;
                    let w = f.working.ok_or_else(|| bad(e, "file not mapped"))?;
                    (w.addr_of(e.offset, e.data.len() as u64)?, w)
                };
                let nt = e.kind == EventKind::NtStore;
                let data = &e.data;
                if nt {
                    region.write_bytes(e.offset, data)?;
                    let g = domain.read_gate();
                    if let Some(f) = g.files.get(&e.file) {
                        domain.add_nt_pending(e.thread, f, e.offset, data.len() as u64);
                    }
                } else {
                    domain.store(addr, data.len() as u64, site, false, || {
                        region.write_bytes(e.offset, data)
                    })?;
                }
            }
            EventKind::Flush => {
                let addr = {
                    let g = domain.read_gate();
                    let f = g.files.get(&e.file).ok_or_else(|| bad(e, "unknown file"))?;
                    let w = f.working.ok_or_else(|| bad(e, "file not mapped"))?;
                    w.addr_of(e.offset, e.len)?
                };
                domain.flush_as(e.thread, addr, e.len, site);
            }
            EventKind::Fence => domain.fence_as(e.thread, site),
            EventKind::BlockCreate => {
                domain.block_create(&e.file, false, site)?;
            }
            EventKind::BlockRemove => domain.block_remove(&e.file, site)?,
            EventKind::BlockWrite => domain.block_write(&e.file, None, e.offset, &e.data, site)?,
            EventKind::BlockSetLen => domain.block_set_len(&e.file, None, e.len, site)?,
            EventKind::BlockSync => domain.block_sync(&e.file, None, site)?,
        }
    }
    Ok(Replay { domain })
}
