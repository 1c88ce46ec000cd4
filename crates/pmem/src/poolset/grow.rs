//! Changing a pool set's membership: adding segments (P-PM-8), removing them (P-PM-9), and
//! punching holes into a segment's file.
//!
//! # Invariants
//! - A failed add leaves the set as it was: no bitmap bit, no file, no hole in the
//!   reservation (the range is refilled with anonymous memory, see `reserve`), and the bump
//!   pointer unchanged.
//! - Segment ids are not reused within one open: an id removed during this open stays
//!   retired until the set is reopened, so a stale `PPtr` held by a thread across a
//!   concurrent remove resolves to [`Error::BadPointer`], never into the segment that would
//!   otherwise get its id. Together with PS3 (ranges are not reused while open), a removed
//!   segment can neither be re-addressed by id nor by global offset. The cost: at most
//!   [`MAX_SEGMENTS`] segments can be added per open (the reservation bounds the same count
//!   in bytes anyway).
//!
//! # Ordering
//! - P-PM-1 per segment: header persisted before its magic.
//! - P-PM-8 (add): file complete (magic persisted, directory synced) before its bitmap bit is
//!   set and persisted.
//! - P-PM-9 (remove): bit cleared and persisted before the range is replaced and the file
//!   unlinked.
//!
//! # Concurrency
//! Every change runs under the set's membership mutex; access and resolution proceed
//! concurrently (lock-free) and never observe a half-added segment (it is published only
//! after P-PM-8) or fault on a removed one (PS2).

use std::fs::OpenOptions;
use std::sync::atomic::Ordering;

use zerocopy::IntoBytes;

use crate::error::{Error, Result};
use crate::header::{HEADER_AREA, SEGMENT_BITMAP_OFF, SEGMENT_MAGIC, SegmentHeader};
use crate::options::MAX_SEGMENTS;
use crate::platform;
use crate::pool::{check_size, now_ns};
use crate::pptr::{PPtr, SegmentId};

use super::segment::{create_segment_file, seg_name, seg_path};
use super::{Inner, PoolSet, sim_site};

impl PoolSet {
    /// Adds a segment of the default segment size; returns its id.
    pub fn grow(&self) -> Result<SegmentId> {
        self.add_segment(self.segment_size())
    }

    /// Adds a segment of `size` bytes (a multiple of 4 KiB, at least 8 KiB; the data area is
    /// `size - 4096`), following P-PM-8. Concurrent access to other segments continues
    /// unaffected. Errors: [`Error::PoolFull`] when the reservation, the segment ids of this
    /// open or the file system are exhausted; the pool set is then unchanged.
    pub fn add_segment(&self, size: u64) -> Result<SegmentId> {
        check_size(&self.dir, size)?;
        let mut inner = self.inner_lock();
        let voff = inner.next_voff;
        let end = voff.checked_add(size).filter(|&e| e <= self.space.len());
        let Some(end) = end else {
            return Err(Error::PoolFull {
                path: self.dir.clone(),
                requested: size,
                available: self.space.len().saturating_sub(voff),
            });
        };
        let id = self.free_id(&inner)?;
        let name = seg_name(id);
        let path = seg_path(&self.dir, id);
        let mut guard = None;
        match &self.space.sim {
            Some(sim) => {
                // A simulated reservation zeroes what was written before it is reused.
                self.space.mapping().note_used(usize::try_from(end).unwrap_or(usize::MAX));
                let _ = sim.file_remove(&name, sim_site()); // an orphan, if any
                sim.file_create(&name, size, Some(self.space.region.sub(voff, size)?), sim_site())?;
            }
            None => {
                if path.exists() {
                    // Not in the bitmap and we hold the set's lock: an orphan. Remove it.
                    std::fs::remove_file(&path)
                        .map_err(|e| Error::io("remove orphan", &path, e))?;
                }
                let (file, g) = create_segment_file(&path, size, &self.dir)?;
                self.map_segment(&file, &path, voff, size)?;
                guard = Some(g);
            }
        }
        let word = SEGMENT_BITMAP_OFF + id / 64 * 8;
        let bit = 1u64 << (id % 64);
        let hdr = SegmentHeader::new(self.uuid, id, size, self.layout, now_ns());
        let r = &self.space;
        let write = || -> Result<()> {
            r.write_bytes(voff, hdr.as_bytes())?;
            r.persist_rule("P-PM-1", voff, size_of::<SegmentHeader>() as u64)?; // ORDER(P-PM-1): header before magic
            r.store_u64(voff, SEGMENT_MAGIC, Ordering::Release)?;
            r.persist_rule("P-PM-1", voff, 8)?; // ORDER(P-PM-1): the magic completes the segment
            self.sync_dir()?;
            r.fetch_or_u64(word, bit, Ordering::AcqRel)?;
            r.persist_rule("P-PM-8", word, 8) // ORDER(P-PM-8): the bitmap bit adds the complete segment
        };
        if let Err(e) = write() {
            // Undo: the bit (if it was set; its persist may have failed), the simulated file,
            // and the range's memory. The guard removes the real file.
            if r.load_u64(word, Ordering::Acquire).is_ok_and(|w| w & bit != 0) {
                let _ = r.fetch_and_u64(word, !bit, Ordering::AcqRel);
                let _ = r.persist_rule("P-PM-8", word, 8); // ORDER(P-PM-8): the failed segment leaves the bitmap
            }
            if let Some(sim) = &self.space.sim {
                let _ = sim.file_remove(&name, sim_site());
            }
            let addr = self.addr(voff, size)?;
            self.fill_with_anon(addr, size as usize);
            return Err(e);
        }
        if let Some(g) = guard {
            g.disarm();
        }
        self.publish(id, voff, size);
        inner.next_voff = end;
        Ok(id)
    }

    /// The lowest id that is neither live (bitmap) nor retired during this open.
    fn free_id(&self, inner: &Inner) -> Result<SegmentId> {
        for w in 0..MAX_SEGMENTS / 64 {
            let live = self.space.load_u64(SEGMENT_BITMAP_OFF + w * 8, Ordering::Acquire)?;
            let taken = live | inner.retired[w as usize];
            if taken != u64::MAX {
                return Ok(w * 64 + u64::from(taken.trailing_ones()));
            }
        }
        Err(Error::PoolFull {
            path: self.dir.clone(),
            requested: 1,
            available: 0, // no free segment id in this open
        })
    }

    /// Removes segment `id` (not 0) following P-PM-9: its bitmap bit is cleared and
    /// persisted, then its range is replaced by anonymous memory and its file unlinked.
    ///
    /// The caller promises that no live data remains in the segment (the allocator removes
    /// only empty segments). A reader still inside reads zeros, never faults (PS2); a pointer
    /// into the segment resolves to [`Error::BadPointer`] from now on, also after later grows
    /// (the id is not reused while the set is open).
    pub fn remove_segment(&self, id: SegmentId) -> Result<()> {
        if id == 0 {
            return Err(Error::InvalidArgument("segment 0 cannot be removed".into()));
        }
        let mut inner = self.inner_lock();
        let Some((voff, size)) = self.locate(id) else {
            return Err(Error::BadPointer { segment: id, offset: 0, reason: "no such segment" });
        };
        let word = SEGMENT_BITMAP_OFF + id / 64 * 8;
        self.space.fetch_and_u64(word, !(1 << (id % 64)), Ordering::AcqRel)?;
        self.space.persist_rule("P-PM-9", word, 8)?; // ORDER(P-PM-9): leave the set before the file goes
        inner.retired[(id / 64) as usize] |= 1 << (id % 64);
        self.unpublish(id, voff);
        let addr = self.addr(voff, size)?;
        self.fill_with_anon(addr, size as usize);
        match &self.space.sim {
            Some(sim) => sim.file_remove(&seg_name(id), sim_site())?,
            None => {
                let path = seg_path(&self.dir, id);
                std::fs::remove_file(&path).map_err(|e| Error::io("unlink", &path, e))?;
            }
        }
        self.sync_dir()
    }

    /// Punches a hole of `len` bytes at `p` (both 4 KiB-aligned, inside one segment's data
    /// area): the range reads as zeros afterwards and its file space is released. Durable on
    /// return (a file operation). PAllocator's defragmentation uses it on free big blocks.
    ///
    /// A later store into the range needs file space again: on a file system that is full by
    /// then, such a store raises SIGBUS, as for any file mapping whose space was released.
    pub fn punch_hole(&self, p: PPtr, len: u64) -> Result<()> {
        self.resolve_range(p, len)?;
        if !p.offset.is_multiple_of(HEADER_AREA) || !len.is_multiple_of(HEADER_AREA) {
            return Err(Error::Misaligned { off: p.offset, align: HEADER_AREA });
        }
        if len == 0 {
            return Ok(());
        }
        let _inner = self.inner_lock();
        // Resolved again under the lock: the segment may have been removed meanwhile.
        self.resolve_range(p, len)?;
        let file_off = HEADER_AREA + p.offset;
        match &self.space.sim {
            Some(sim) => sim.file_punch(&seg_name(p.segment), file_off, len, sim_site()),
            None => {
                let path = seg_path(&self.dir, p.segment);
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| Error::io("open", &path, e))?;
                platform::punch_hole(&f, file_off, len).map_err(|e| Error::io("punch", &path, e))
            }
        }
    }

    /// Backs `len` bytes at `p` (both 4 KiB-aligned, inside one segment's data area) with file
    /// space again (`fallocate` mode 0, keeping the size), so that stores into a range that was
    /// punched cannot raise SIGBUS (conventions §2.8). The contents do not change (a hole reads
    /// zeros before and after). Cheap where the range is already backed; a no-op on the sim
    /// domain, whose files are always backed.
    ///
    /// Errors: [`Error::PoolFull`] when the file system has no space left (the range stays a
    /// hole), [`Error::Misaligned`], or a bad pointer.
    pub fn allocate_range(&self, p: PPtr, len: u64) -> Result<()> {
        self.resolve_range(p, len)?;
        if !p.offset.is_multiple_of(HEADER_AREA) || !len.is_multiple_of(HEADER_AREA) {
            return Err(Error::Misaligned { off: p.offset, align: HEADER_AREA });
        }
        if len == 0 || self.space.sim.is_some() {
            return Ok(());
        }
        let _inner = self.inner_lock();
        self.resolve_range(p, len)?;
        let path = seg_path(&self.dir, p.segment);
        let f =
            OpenOptions::new().write(true).open(&path).map_err(|e| Error::io("open", &path, e))?;
        platform::allocate_range(&f, HEADER_AREA + p.offset, len).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT) => Error::PoolFull {
                    path: path.clone(),
                    requested: len,
                    available: platform::fs_space(&self.dir).map_or(0, |s| s.available),
                },
                _ => Error::io("fallocate", &path, e),
            }
        })
    }

    /// The file-system space the pool set's segment files hold, in bytes (the sum of their
    /// allocated blocks, `st_blocks` × 512): what hole punching and segment removal give back.
    /// Errors: [`Error::InvalidArgument`] on the sim domain (no files), an I/O error.
    pub fn fs_footprint(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        if self.space.sim.is_some() {
            return Err(Error::InvalidArgument("a simulated pool set has no files".into()));
        }
        let _inner = self.inner_lock();
        let mut total = 0u64;
        for s in self.segments() {
            let path = seg_path(&self.dir, s.id);
            let m = std::fs::metadata(&path).map_err(|e| Error::io("stat", &path, e))?;
            total = total.saturating_add(m.blocks().saturating_mul(512));
        }
        Ok(total)
    }
}
