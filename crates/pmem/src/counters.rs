//! Per-thread persistence counters: lines flushed per instruction, fences, bytes stored,
//! non-temporal bytes, `msync` calls, elided flushes (eADR), and for block files
//! ([`BlockFile`](crate::BlockFile)) bytes written and syncs.
//!
//! The counters are thread-local plain cells: incrementing one costs a TLS add, never an atomic
//! or a shared cache line, so they stay on in release builds and benchmarks. They count what
//! **this thread** did through **any** pool. A benchmark worker takes a [`Counters::snapshot`]
//! before and after its work and subtracts (`after - before`); a multi-threaded benchmark sums
//! its workers' differences.
//!
//! ```
//! use ferrite_pmem::{Counters, Options, Pool};
//! let pool = Pool::create_volatile(64 * 1024, &Options::default()).unwrap();
//! let before = Counters::snapshot();
//! pool.store_u64(0, 7, std::sync::atomic::Ordering::Relaxed).unwrap();
//! pool.persist(0, 8).unwrap();
//! let d = Counters::snapshot() - before;
//! assert_eq!((d.lines_flushed(), d.fences, d.bytes_stored), (1, 1, 8));
//! ```

use std::cell::Cell;
use std::ops::{Add, Sub};

use crate::FlushKind;

/// A snapshot (or a difference of two snapshots) of one thread's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lines written back with `CLWB`.
    pub clwb_lines: u64,
    /// Lines written back with `CLFLUSHOPT`.
    pub clflushopt_lines: u64,
    /// Lines written back with `CLFLUSH`.
    pub clflush_lines: u64,
    /// Lines whose flush was skipped because the pool declares eADR.
    pub elided_lines: u64,
    /// `msync` calls made by flushes in `Msync` mode.
    pub msync_calls: u64,
    /// Pages covered by those `msync` calls.
    pub msync_pages: u64,
    /// Store fences (`SFENCE`), including those of `persist`.
    pub fences: u64,
    /// Bytes written with ordinary stores (word stores, CAS/fetch-or that wrote, bulk writes).
    pub bytes_stored: u64,
    /// Bytes written with non-temporal stores.
    pub nt_bytes: u64,
    /// Nanoseconds of latency injected by the emulator (barrier and per-line delays, bandwidth
    /// waits) and by block-file syncs (`Options::sync_latency_ns`).
    pub injected_ns: u64,
    /// Bytes written to block files (`BlockFile::write_at`, real or simulated).
    pub file_bytes_written: u64,
    /// Block-file syncs (`BlockFile::sync`: `fdatasync`, or a simulated sync).
    pub syncs: u64,
    /// Nanoseconds an engine spent inside its commit protocol, as the engine reports them
    /// ([`Counters::add_commit_ns`]; the paged engine's protocols do), so that a benchmark
    /// can compare the cost of commit protocols apart from the rest of a transaction.
    pub commit_ns: u64,
}

impl Counters {
    /// This thread's counters now.
    pub fn snapshot() -> Counters {
        LOCAL.with(|c| Counters {
            clwb_lines: c.clwb_lines.get(),
            clflushopt_lines: c.clflushopt_lines.get(),
            clflush_lines: c.clflush_lines.get(),
            elided_lines: c.elided_lines.get(),
            msync_calls: c.msync_calls.get(),
            msync_pages: c.msync_pages.get(),
            fences: c.fences.get(),
            bytes_stored: c.bytes_stored.get(),
            nt_bytes: c.nt_bytes.get(),
            injected_ns: c.injected_ns.get(),
            file_bytes_written: c.file_bytes_written.get(),
            syncs: c.syncs.get(),
            commit_ns: c.commit_ns.get(),
        })
    }

    /// Adds `ns` nanoseconds to this thread's [`Counters::commit_ns`] (called by an engine
    /// around its commit protocol).
    pub fn add_commit_ns(ns: u64) {
        bump(|l| &l.commit_ns, ns);
    }

    /// Lines written back by any flush instruction.
    pub fn lines_flushed(&self) -> u64 {
        self.clwb_lines + self.clflushopt_lines + self.clflush_lines
    }

    /// Lines written back with `kind`.
    pub fn lines_flushed_with(&self, kind: FlushKind) -> u64 {
        match kind {
            FlushKind::Clwb => self.clwb_lines,
            FlushKind::Clflushopt => self.clflushopt_lines,
            FlushKind::Clflush => self.clflush_lines,
        }
    }

    fn zip(self, o: Counters, f: impl Fn(u64, u64) -> u64) -> Counters {
        Counters {
            clwb_lines: f(self.clwb_lines, o.clwb_lines),
            clflushopt_lines: f(self.clflushopt_lines, o.clflushopt_lines),
            clflush_lines: f(self.clflush_lines, o.clflush_lines),
            elided_lines: f(self.elided_lines, o.elided_lines),
            msync_calls: f(self.msync_calls, o.msync_calls),
            msync_pages: f(self.msync_pages, o.msync_pages),
            fences: f(self.fences, o.fences),
            bytes_stored: f(self.bytes_stored, o.bytes_stored),
            nt_bytes: f(self.nt_bytes, o.nt_bytes),
            injected_ns: f(self.injected_ns, o.injected_ns),
            file_bytes_written: f(self.file_bytes_written, o.file_bytes_written),
            syncs: f(self.syncs, o.syncs),
            commit_ns: f(self.commit_ns, o.commit_ns),
        }
    }
}

impl Sub for Counters {
    type Output = Counters;
    /// Difference of two snapshots of the same thread (`later - earlier`); saturates at zero.
    fn sub(self, earlier: Counters) -> Counters {
        self.zip(earlier, u64::saturating_sub)
    }
}

impl Add for Counters {
    type Output = Counters;
    /// Sum, for combining the differences of several worker threads.
    fn add(self, o: Counters) -> Counters {
        self.zip(o, u64::saturating_add)
    }
}

struct Local {
    clwb_lines: Cell<u64>,
    clflushopt_lines: Cell<u64>,
    clflush_lines: Cell<u64>,
    elided_lines: Cell<u64>,
    msync_calls: Cell<u64>,
    msync_pages: Cell<u64>,
    fences: Cell<u64>,
    bytes_stored: Cell<u64>,
    nt_bytes: Cell<u64>,
    injected_ns: Cell<u64>,
    file_bytes_written: Cell<u64>,
    syncs: Cell<u64>,
    commit_ns: Cell<u64>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            clwb_lines: Cell::new(0),
            clflushopt_lines: Cell::new(0),
            clflush_lines: Cell::new(0),
            elided_lines: Cell::new(0),
            msync_calls: Cell::new(0),
            msync_pages: Cell::new(0),
            fences: Cell::new(0),
            bytes_stored: Cell::new(0),
            nt_bytes: Cell::new(0),
            injected_ns: Cell::new(0),
            file_bytes_written: Cell::new(0),
            syncs: Cell::new(0),
            commit_ns: Cell::new(0),
        }
    };
}

#[inline]
fn bump(f: impl FnOnce(&Local) -> &Cell<u64>, n: u64) {
    // `try_with`: counting must never panic, even during thread-local destruction.
    let _ = LOCAL.try_with(|l| {
        let c = f(l);
        c.set(c.get().wrapping_add(n));
    });
}

#[inline]
pub(crate) fn add_flushed(kind: FlushKind, lines: u64) {
    match kind {
        FlushKind::Clwb => bump(|l| &l.clwb_lines, lines),
        FlushKind::Clflushopt => bump(|l| &l.clflushopt_lines, lines),
        FlushKind::Clflush => bump(|l| &l.clflush_lines, lines),
    }
}
#[inline]
pub(crate) fn add_elided(lines: u64) {
    bump(|l| &l.elided_lines, lines);
}
#[inline]
pub(crate) fn add_msync(pages: u64) {
    bump(|l| &l.msync_calls, 1);
    bump(|l| &l.msync_pages, pages);
}
#[inline]
pub(crate) fn add_fence() {
    bump(|l| &l.fences, 1);
}
#[inline]
pub(crate) fn add_stored(bytes: u64) {
    bump(|l| &l.bytes_stored, bytes);
}
#[inline]
pub(crate) fn add_nt(bytes: u64) {
    bump(|l| &l.nt_bytes, bytes);
}
#[inline]
pub(crate) fn add_injected(ns: u64) {
    bump(|l| &l.injected_ns, ns);
}
#[inline]
pub(crate) fn add_file_written(bytes: u64) {
    bump(|l| &l.file_bytes_written, bytes);
}
#[inline]
pub(crate) fn add_sync() {
    bump(|l| &l.syncs, 1);
}
