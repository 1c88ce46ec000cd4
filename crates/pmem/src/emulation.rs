//! Persist-latency and write-bandwidth emulation (Quartz/Pelley style), per pool; its delay
//! primitive also serves the block files' emulated sync latency (below).
//!
//! Real PM is slower to persist than the DRAM this project runs on. A pool configured with
//! `Options::barrier_latency_ns`, `line_latency_ns` or `write_bandwidth_mbps` makes every
//! [`Space::fence`](crate::Space::fence) wait, after its `SFENCE`, for
//!
//! ```text
//! delay = barrier_ns + lines · line_ns                      (fixed + per-line model)
//! and, with a bandwidth cap, until this barrier's reservation on the pool's shared
//! "device" ends: reserve (lines·64 + nt_bytes) / bandwidth after the device's previous
//! reservation (CAS on one word; one reservation per barrier)
//! ```
//!
//! where `lines` and `nt_bytes` are what the calling thread flushed or stored non-temporally
//! since its previous fence. The wait starts after an `MFENCE`, i.e. after the real
//! write-back has completed, so the emulated latency adds to the real cost instead of
//! overlapping it (an `SFENCE` alone lets the spin loop start while flushes still drain). This is the delay primitive of `../shared/specs/kolli-pelley.md`
//! Part C (C.2, C.3), grounded in Pelley et al. §4 and Kolli et al. §7.1. The wait is a busy
//! loop against a deadline on the calibrated time-stamp counter (`RDTSCP`), never a count of
//! loop iterations; without an invariant TSC it falls back to the monotonic clock.
//!
//! The requested delay is added to the thread's `Counters::injected_ns`: with only a barrier
//! latency `D`, `injected_ns == fences × D` exactly.
//!
//! Block files have a latency of their own, outside this per-pool emulator:
//! `Options::sync_latency_ns` is the time every real `BlockFile::sync` waits after its
//! `fdatasync` returns (an emulated flash device on tmpfs). It is handed to the file with
//! `BlockFile::set_sync_latency_ns` (the paged engine's file store does so), waits with the
//! same primitive, [`delay_ns`], and is counted the same way: `injected_ns == syncs × D` for a
//! sync latency `D` alone. It is not part of [`Latency`] and never turns this emulator on
//! for a pool.
//!
//! # Concurrency
//! Pending line counts are thread-local (a fence completes only its own thread's flushes, M4);
//! the bandwidth device is one atomic word per pool, shared by all threads of that pool.

use std::cell::Cell;
use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::arch;
use crate::counters;

/// The calibrated clock the emulator spins on.
#[derive(Clone, Copy, Debug)]
pub struct ClockInfo {
    /// Whether the time-stamp counter is used (invariant TSC present and calibration
    /// consistent); otherwise the monotonic clock is.
    pub tsc: bool,
    /// TSC ticks per nanosecond (1.0 for the monotonic clock).
    pub ticks_per_ns: f64,
    /// Relative disagreement of the two calibration windows (|a-b|/a).
    pub calibration_spread: f64,
    /// Fixed cost of the delay primitive itself (reading the clock to start, the loop exit),
    /// in ticks, measured at calibration and subtracted from every requested delay.
    pub overshoot_ticks: u64,
    /// Why the TSC is not used, if it is not.
    pub fallback_reason: Option<&'static str>,
}

static CLOCK: OnceLock<ClockInfo> = OnceLock::new();
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn calibrate() -> ClockInfo {
    let f = arch::cpu_features();
    let mono = |reason| ClockInfo {
        tsc: false,
        ticks_per_ns: 1.0,
        calibration_spread: 0.0,
        overshoot_ticks: 0,
        fallback_reason: Some(reason),
    };
    if !cfg!(target_arch = "x86_64") {
        return mono("not x86-64");
    }
    if !f.invariant_tsc {
        return mono("no invariant TSC (CPUID 80000007H:EDX[8])");
    }
    let window = |ms| {
        let t0 = Instant::now();
        let c0 = arch::rdtscp();
        std::thread::sleep(Duration::from_millis(ms));
        let c1 = arch::rdtscp();
        let ns = t0.elapsed().as_nanos() as f64;
        (c1.wrapping_sub(c0)) as f64 / ns
    };
    // Two windows of 60 ms (≥100 ms in total, as the spec asks); they must agree.
    let a = window(60);
    let b = window(60);
    let spread = ((a - b) / a).abs();
    if !(a.is_finite() && a > 0.01) {
        return mono("TSC does not advance");
    }
    if spread > 0.02 {
        return ClockInfo { calibration_spread: spread, ..mono("TSC rate unstable (>2% spread)") };
    }
    let mut c = ClockInfo {
        tsc: true,
        ticks_per_ns: (a + b) / 2.0,
        calibration_spread: spread,
        overshoot_ticks: 0,
        fallback_reason: None,
    };
    c.overshoot_ticks = measure_overshoot(&c);
    c
}

/// Median ticks by which a 1 µs delay overruns, net of the cost of the two clock reads that
/// measure it.
fn measure_overshoot(c: &ClockInfo) -> u64 {
    const N: usize = 2001;
    let want = ns_to_ticks(c, 1_000);
    let mut empty: Vec<u64> = (0..N)
        .map(|_| {
            let t0 = arch::rdtscp();
            arch::rdtscp().wrapping_sub(t0)
        })
        .collect();
    let mut over: Vec<u64> = (0..N)
        .map(|_| {
            let t0 = arch::rdtscp();
            let start = now_ticks(c);
            spin_until(c, start + want);
            arch::rdtscp().wrapping_sub(t0).saturating_sub(want)
        })
        .collect();
    empty.sort_unstable();
    over.sort_unstable();
    over[N / 2].saturating_sub(empty[N / 2])
}

/// The emulator's clock, calibrated on first use (about 120 ms, once per process).
pub fn clock() -> ClockInfo {
    *CLOCK.get_or_init(calibrate)
}

#[inline]
fn now_ticks(c: &ClockInfo) -> u64 {
    if c.tsc { arch::rdtscp() } else { EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64 }
}

#[inline]
fn ns_to_ticks(c: &ClockInfo, ns: u64) -> u64 {
    (ns as f64 * c.ticks_per_ns) as u64
}

#[inline]
fn ticks_to_ns(c: &ClockInfo, ticks: u64) -> u64 {
    (ticks as f64 / c.ticks_per_ns) as u64
}

#[inline]
fn spin_until(c: &ClockInfo, deadline: u64) {
    while now_ticks(c) < deadline {
        arch::pause();
    }
}

/// Busy-waits `ns` nanoseconds on the calibrated clock (the emulator's delay primitive).
pub fn delay_ns(ns: u64) {
    let c = clock();
    let start = now_ticks(&c);
    spin_until(&c, start.saturating_add(ns_to_ticks(&c, ns).saturating_sub(c.overshoot_ticks)));
}

thread_local! {
    static PENDING_LINES: Cell<u64> = const { Cell::new(0) };
    static PENDING_NT: Cell<u64> = const { Cell::new(0) };
}

/// Latency settings of one pool (all zero: emulation off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Extra nanoseconds per persist barrier (fence).
    pub barrier_ns: u64,
    /// Extra nanoseconds per line flushed since the thread's previous fence.
    pub line_ns: u64,
    /// Write-bandwidth cap in MB/s (10^6 bytes per second); 0 = unlimited.
    pub bandwidth_mbps: u64,
}

impl Latency {
    /// Whether any emulation is configured.
    pub fn is_active(&self) -> bool {
        self.barrier_ns != 0 || self.line_ns != 0 || self.bandwidth_mbps != 0
    }

    /// The fixed and per-line delay of a fence after `lines` flushed lines, ns. Saturating:
    /// absurd settings give an absurdly long wait, never an overflow panic.
    fn fixed_ns(&self, lines: u64) -> u64 {
        self.barrier_ns.saturating_add(lines.saturating_mul(self.line_ns))
    }

    /// The device time of a fence's `lines` flushed lines and `nt` non-temporal bytes under
    /// the bandwidth cap, ns (`None`: no cap, or nothing written). Saturating, as above.
    fn device_ns(&self, lines: u64, nt: u64) -> Option<u64> {
        let bytes = lines.saturating_mul(64).saturating_add(nt);
        // bytes / (MB/s · 10^6 B/MB) s = bytes · 1000 / MB/s ns
        (self.bandwidth_mbps != 0 && bytes != 0)
            .then(|| bytes.saturating_mul(1000) / self.bandwidth_mbps)
    }
}

/// The per-pool emulator (see the module docs).
pub(crate) struct Emulator {
    latency: Latency,
    clock: ClockInfo,
    /// Tick at which the emulated device is free again (bandwidth model).
    device_free_at: AtomicU64,
}

impl fmt::Debug for Emulator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emulator").field("latency", &self.latency).finish_non_exhaustive()
    }
}

impl Emulator {
    pub fn new(latency: Latency) -> Option<Emulator> {
        latency.is_active().then(|| Emulator {
            latency,
            clock: clock(),
            device_free_at: AtomicU64::new(0),
        })
    }

    /// Records `lines` flushed and `nt_bytes` stored non-temporally by this thread.
    #[inline]
    pub fn note(&self, lines: u64, nt_bytes: u64) {
        let _ = PENDING_LINES.try_with(|c| c.set(c.get().saturating_add(lines)));
        if nt_bytes != 0 {
            let _ = PENDING_NT.try_with(|c| c.set(c.get().saturating_add(nt_bytes)));
        }
    }

    /// Called after the `SFENCE` of a fence: waits for the emulated persist latency.
    pub fn on_fence(&self) {
        let lines = PENDING_LINES.try_with(|c| c.replace(0)).unwrap_or(0);
        let nt = PENDING_NT.try_with(|c| c.replace(0)).unwrap_or(0);
        let l = &self.latency;
        let fixed_ns = l.fixed_ns(lines);
        let c = &self.clock;
        // SFENCE does not stop later non-store instructions: without this the spin would
        // overlap the real write-back instead of adding to it.
        arch::mfence();
        let start = now_ticks(c);
        let mut deadline =
            start.saturating_add(ns_to_ticks(c, fixed_ns).saturating_sub(c.overshoot_ticks));
        let mut extra_ns = 0;
        if let Some(device_ns) = l.device_ns(lines, nt) {
            let dur = ns_to_ticks(c, device_ns);
            let mut old = self.device_free_at.load(Ordering::Relaxed);
            let end = loop {
                let new = old.max(start).saturating_add(dur);
                match self.device_free_at.compare_exchange_weak(
                    old,
                    new,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break new,
                    Err(cur) => old = cur,
                }
            };
            if end > deadline {
                extra_ns = ticks_to_ns(c, end - deadline);
                deadline = end;
            }
        }
        spin_until(c, deadline);
        counters::add_injected(fixed_ns.saturating_add(extra_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::Latency;

    /// Regression ([R2] item 9): a fence computed `barrier_ns + lines · line_ns` and
    /// `(lines · 64 + nt) · 1000` unchecked, so absurd settings (a line latency near
    /// `u64::MAX`, or a huge count of non-temporal bytes under a bandwidth cap) panicked on
    /// overflow inside `Space::fence` in every build with overflow checks (tests, the CI
    /// profile). The delays now saturate; ordinary settings give the exact figures.
    #[test]
    fn fence_delays_saturate_and_are_exact_otherwise() {
        let absurd = Latency { barrier_ns: u64::MAX - 1, line_ns: u64::MAX / 2, bandwidth_mbps: 1 };
        assert_eq!(absurd.fixed_ns(3), u64::MAX);
        assert_eq!(absurd.device_ns(u64::MAX, u64::MAX), Some(u64::MAX));
        let l = Latency { barrier_ns: 100, line_ns: 10, bandwidth_mbps: 2_000 };
        assert_eq!(l.fixed_ns(4), 140);
        // 4 lines + 64 NT bytes = 320 bytes at 2,000 MB/s: 160 ns.
        assert_eq!(l.device_ns(4, 64), Some(160));
        assert_eq!(l.device_ns(0, 0), None);
        assert_eq!(Latency { bandwidth_mbps: 0, ..l }.device_ns(4, 0), None);
    }
}
