//! Configuration of a pool: the one place where durability mode, flush instruction and the
//! other knobs of the persistence layer are chosen.
//!
//! Every field has a sensible default ("detect"); environment variables never reach this type
//! directly (the CLI and benchmarks turn them into `Options`, see `docs/configuration.md`).
//!
//! Dependencies point one way: `options` → `mode` ← `error` (the durability mode and flush
//! kind live in `mode`, which imports neither).

use crate::emulation::Latency;
use crate::mode::{DurabilityMode, FlushKind};

/// Options of a pool. `Options::default()` detects everything.
///
/// ```
/// use ferrite_pmem::{DurabilityMode, FlushKind, Options};
/// let opts = Options::default()
///     .layout("my-app")
///     .flush(FlushKind::Clflush)
///     .durability(DurabilityMode::Emulated);
/// assert_eq!(opts.flush_kind(), Some(FlushKind::Clflush));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    layout: String,
    durability: Option<DurabilityMode>,
    flush: Option<FlushKind>,
    eadr: bool,
    latency: Latency,
    sync_latency_ns: u64,
    segment_size: u64,
    max_pool_size: Option<u64>,
    prefault: bool,
}

/// Layout name used when none is given.
pub const DEFAULT_LAYOUT: &str = "ferrite";
/// Default segment size of a pool set: 128 MiB, as in the dissertation (seed 001 §3.4.3).
pub const DEFAULT_SEGMENT_SIZE: u64 = 128 << 20;
/// Most segments a pool set can have (the size of its live-segment bitmap).
pub const MAX_SEGMENTS: u64 = 24 * 1024;

impl Default for Options {
    fn default() -> Self {
        Options {
            layout: DEFAULT_LAYOUT.to_owned(),
            durability: None,
            flush: None,
            eadr: false,
            latency: Latency::default(),
            sync_latency_ns: 0,
            segment_size: DEFAULT_SEGMENT_SIZE,
            max_pool_size: None,
            prefault: false,
        }
    }
}

impl Options {
    /// Default options (detect mode and flush instruction, layout `"ferrite"`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the layout name written at creation and required at open (at most 32 bytes of
    /// printable ASCII).
    pub fn layout(mut self, layout: impl Into<String>) -> Self {
        self.layout = layout.into();
        self
    }

    /// Forces a durability mode instead of detecting it. Opening fails with
    /// [`Error::ModeUnavailable`](crate::Error::ModeUnavailable) when the file cannot provide it (`Pmem` without `MAP_SYNC`).
    pub fn durability(mut self, mode: DurabilityMode) -> Self {
        self.durability = Some(mode);
        self
    }

    /// Forces a flush instruction instead of the best one CPUID reports. Opening fails with
    /// [`Error::UnsupportedFlush`](crate::Error::UnsupportedFlush) when the CPU lacks it.
    pub fn flush(mut self, kind: FlushKind) -> Self {
        self.flush = Some(kind);
        self
    }

    /// Declares that the platform has eADR (caches inside the persistence domain): flushes are
    /// skipped (and counted as elided), fences are kept. Default `false`: eADR cannot be
    /// detected reliably from user space.
    pub fn eadr(mut self, eadr: bool) -> Self {
        self.eadr = eadr;
        self
    }

    /// Extra nanoseconds every fence waits (emulated persist-barrier latency; 0 = off).
    pub fn barrier_latency_ns(mut self, ns: u64) -> Self {
        self.latency.barrier_ns = ns;
        self
    }

    /// Extra nanoseconds a fence waits per line the thread flushed since its previous fence
    /// (0 = off).
    pub fn line_latency_ns(mut self, ns: u64) -> Self {
        self.latency.line_ns = ns;
        self
    }

    /// Emulated write-bandwidth cap of the pool in MB/s (10^6 bytes/s; 0 = unlimited).
    pub fn write_bandwidth_mbps(mut self, mbps: u64) -> Self {
        self.latency.bandwidth_mbps = mbps;
        self
    }

    /// Extra nanoseconds every sync of a real block file waits after its `fdatasync` returns
    /// (emulated block-device sync latency, e.g. a flash device's 2–363 µs, on a medium where
    /// `fdatasync` costs nothing, such as tmpfs; 0 = off). Pools ignore it: it reaches a
    /// [`BlockFile`](crate::BlockFile) through `BlockFile::set_sync_latency_ns`, called by
    /// whoever opens the file with these options; simulated block files ignore it too.
    /// Counted in `Counters::injected_ns` like the persist latencies above.
    pub fn sync_latency_ns(mut self, ns: u64) -> Self {
        self.sync_latency_ns = ns;
        self
    }

    /// Size of the segments a pool set creates by default (a multiple of 4 KiB, at least
    /// 8 KiB). Default 128 MiB; tests use KiBs to MiBs.
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self
    }

    /// Virtual address space a pool set reserves at open (bounds the pool set's total size in
    /// this session). Default: `segment_size × 16384`, capped at 64 TiB.
    pub fn max_pool_size(mut self, bytes: u64) -> Self {
        self.max_pool_size = Some(bytes);
        self
    }

    /// Populates every segment file's pages when it is mapped (created, opened or grown),
    /// so that the first store to a page takes no page fault (on tmpfs, the kernel zeroes a
    /// page at its first fault even after `fallocate`). Costs the time to populate the whole
    /// segment up front and its whole size in memory. Best effort: a kernel without
    /// `MADV_POPULATE_WRITE` (before Linux 5.14) leaves the pages to fault as usual. No effect
    /// on heap-backed or simulated pools. Default off; the benchmark harness turns it on for
    /// Ferrite's pools, as it prefaults PMDK's pool.
    pub fn prefault(mut self, on: bool) -> Self {
        self.prefault = on;
        self
    }

    /// Whether segments are populated when mapped (see [`Options::prefault`]).
    pub fn is_prefault(&self) -> bool {
        self.prefault
    }

    /// The latency-emulation settings.
    pub fn latency(&self) -> Latency {
        self.latency
    }

    /// The emulated latency of a block-file sync, ns (see [`Options::sync_latency_ns`]).
    pub fn sync_latency(&self) -> u64 {
        self.sync_latency_ns
    }

    /// The default segment size.
    pub fn segment_size_bytes(&self) -> u64 {
        self.segment_size
    }

    /// The virtual reservation of a pool set.
    pub fn max_pool_size_bytes(&self) -> u64 {
        self.max_pool_size.unwrap_or_else(|| self.segment_size.saturating_mul(16384).min(64 << 40))
    }

    /// The virtual reservation, when set explicitly.
    pub fn max_pool_size_explicit(&self) -> Option<u64> {
        self.max_pool_size
    }

    /// The layout name.
    pub fn layout_name(&self) -> &str {
        &self.layout
    }

    /// The forced durability mode, if any.
    pub fn durability_mode(&self) -> Option<DurabilityMode> {
        self.durability
    }

    /// The forced flush instruction, if any.
    pub fn flush_kind(&self) -> Option<FlushKind> {
        self.flush
    }

    /// Whether eADR is declared.
    pub fn is_eadr(&self) -> bool {
        self.eadr
    }
}
