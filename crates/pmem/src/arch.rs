//! CPU instructions of the persistence layer: cache-line flushes, the store fence,
//! non-temporal stores, CPUID feature detection and the time-stamp counter.
//!
//! # Ordering
//! Every instruction here is emitted with `asm!` **without** `nomem`, `readonly` or `pure`, so
//! the compiler treats it as reading and writing any memory and never moves loads or stores
//! across it (conventions §2 rule 5). `core::arch` has no `clwb`/`clflushopt` intrinsics, so
//! all flushes use `asm!` for uniformity.
//!
//! On x86-64, `CLWB` and `CLFLUSHOPT` are ordered with older stores to the same line, with
//! `SFENCE`, and with locked instructions, but not with each other or with stores to other
//! lines; `SFENCE` waits for all of them to complete. `CLFLUSH` is ordered with stores and other
//! `CLFLUSH`es. `MOVNTI` stores are weakly ordered and drained by `SFENCE`.

/// CPU features that matter to persistence, read once from CPUID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// `CLFLUSH` (CPUID.1:EDX\[19\]).
    pub clflush: bool,
    /// `CLFLUSHOPT` (CPUID.(7,0):EBX\[23\]).
    pub clflushopt: bool,
    /// `CLWB` (CPUID.(7,0):EBX\[24\]).
    pub clwb: bool,
    /// SSE2, hence `MOVNTI` (CPUID.1:EDX\[26\]).
    pub sse2: bool,
    /// AVX-512 Foundation (CPUID.(7,0):EBX\[16\]).
    pub avx512f: bool,
    /// Restricted transactional memory (CPUID.(7,0):EBX\[11\]). The seeds' HTM paths need it;
    /// Ferrite never does.
    pub rtm: bool,
    /// Invariant TSC (CPUID.80000007H:EDX\[8\]): the TSC ticks at a constant rate.
    pub invariant_tsc: bool,
    /// Cache-line size reported by CPUID.1:EBX\[15:8\] × 8 (0 when unknown).
    pub clflush_line_size: u32,
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::asm;
    use core::arch::x86_64::{__cpuid, __cpuid_count, CpuidResult};

    use super::CpuFeatures;

    fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
        // `__cpuid_count` is available on every x86-64 CPU (CPUID is part of the base ISA).
        #[allow(unused_unsafe)]
        // SAFETY: CPUID has no memory effects and exists on every x86-64 processor.
        unsafe {
            __cpuid_count(leaf, sub)
        }
    }

    pub fn detect() -> CpuFeatures {
        #[allow(unused_unsafe)]
        // SAFETY: CPUID has no memory effects and exists on every x86-64 processor.
        let max_leaf = unsafe { __cpuid(0) }.eax;
        #[allow(unused_unsafe)]
        // SAFETY: as above.
        let max_ext = unsafe { __cpuid(0x8000_0000) }.eax;
        let l1 = cpuid(1, 0);
        let l7 = if max_leaf >= 7 {
            cpuid(7, 0)
        } else {
            CpuidResult { eax: 0, ebx: 0, ecx: 0, edx: 0 }
        };
        let invariant_tsc = max_ext >= 0x8000_0007 && cpuid(0x8000_0007, 0).edx & (1 << 8) != 0;
        CpuFeatures {
            clflush: l1.edx & (1 << 19) != 0,
            clflushopt: l7.ebx & (1 << 23) != 0,
            clwb: l7.ebx & (1 << 24) != 0,
            sse2: l1.edx & (1 << 26) != 0,
            avx512f: l7.ebx & (1 << 16) != 0,
            rtm: l7.ebx & (1 << 11) != 0,
            invariant_tsc,
            clflush_line_size: ((l1.ebx >> 8) & 0xff) * 8,
        }
    }

    /// # Safety
    /// `p` must point into memory mapped in this process (any alignment; the line containing
    /// it is written back). The CPU must support `CLWB`.
    #[inline(always)]
    pub unsafe fn clwb(p: *const u8) {
        // SAFETY: the caller guarantees `p` is mapped and CLWB is supported.
        unsafe { asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)) }
    }

    /// # Safety
    /// As [`clwb`], for `CLFLUSHOPT`.
    #[inline(always)]
    pub unsafe fn clflushopt(p: *const u8) {
        // SAFETY: the caller guarantees `p` is mapped and CLFLUSHOPT is supported.
        unsafe { asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags)) }
    }

    /// # Safety
    /// As [`clwb`], for `CLFLUSH`.
    #[inline(always)]
    pub unsafe fn clflush(p: *const u8) {
        // SAFETY: the caller guarantees `p` is mapped; CLFLUSH exists on every x86-64 CPU.
        unsafe { asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags)) }
    }

    /// Store fence: earlier stores, non-temporal stores and `CLWB`/`CLFLUSHOPT`s complete before
    /// later stores.
    #[inline(always)]
    pub fn sfence() {
        // SAFETY: SFENCE has no operands and cannot fault; it is a compiler barrier because the
        // asm block may access memory.
        unsafe { asm!("sfence", options(nostack, preserves_flags)) }
    }

    /// Full fence: waits until all earlier loads, stores and flushes have completed (used by
    /// the latency emulator so that the injected delay starts after the real write-back).
    #[inline(always)]
    pub fn mfence() {
        // SAFETY: MFENCE has no operands and cannot fault.
        unsafe { asm!("mfence", options(nostack, preserves_flags)) }
    }

    /// # Safety
    /// `p` must be valid for an 8-byte write, 8-byte aligned, and no Rust reference may cover
    /// it.
    #[inline(always)]
    pub unsafe fn movnti(p: *mut u64, v: u64) {
        // SAFETY: the caller guarantees `p` is writable and aligned.
        unsafe {
            asm!("movnti [{0}], {1}", in(reg) p, in(reg) v, options(nostack, preserves_flags))
        }
    }

    /// Reads the time-stamp counter after all earlier instructions have executed (`RDTSCP`).
    #[inline(always)]
    pub fn rdtscp() -> u64 {
        let lo: u32;
        let hi: u32;
        // SAFETY: RDTSCP reads the TSC and TSC_AUX into registers; no memory is accessed.
        unsafe {
            asm!("rdtscp", out("eax") lo, out("edx") hi, out("ecx") _, options(nostack, nomem, preserves_flags))
        }
        (u64::from(hi) << 32) | u64::from(lo)
    }

    /// Spin-wait hint.
    #[inline(always)]
    pub fn pause() {
        core::hint::spin_loop();
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    //! Portable fallback: no cache-line flush instruction, so only the `Msync` and `Volatile`
    //! modes are meaningful. Kept so the crate type-checks on other targets.
    use super::CpuFeatures;
    use std::sync::atomic::{Ordering, fence};

    pub fn detect() -> CpuFeatures {
        CpuFeatures::default()
    }
    pub unsafe fn clwb(_p: *const u8) {}
    pub unsafe fn clflushopt(_p: *const u8) {}
    pub unsafe fn clflush(_p: *const u8) {}
    pub fn sfence() {
        fence(Ordering::SeqCst);
    }
    pub fn mfence() {
        fence(Ordering::SeqCst);
    }
    pub unsafe fn movnti(p: *mut u64, v: u64) {
        // SAFETY: the caller guarantees `p` is writable and aligned.
        unsafe { core::sync::atomic::AtomicU64::from_ptr(p).store(v, Ordering::Relaxed) }
    }
    pub fn rdtscp() -> u64 {
        use std::time::Instant;
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
    pub fn pause() {
        core::hint::spin_loop();
    }
}

pub(crate) use imp::{clflush, clflushopt, clwb, movnti, sfence};
#[allow(unused_imports)] // used by the latency emulator
pub(crate) use imp::{mfence, pause, rdtscp};

/// The CPU's persistence features (detected once, then cached).
pub fn cpu_features() -> CpuFeatures {
    static FEATURES: std::sync::OnceLock<CpuFeatures> = std::sync::OnceLock::new();
    *FEATURES.get_or_init(imp::detect)
}

/// Whether the CPU can execute `kind`.
pub fn flush_supported(kind: crate::FlushKind) -> bool {
    let f = cpu_features();
    match kind {
        crate::FlushKind::Clwb => f.clwb,
        crate::FlushKind::Clflushopt => f.clflushopt,
        crate::FlushKind::Clflush => f.clflush,
    }
}

/// The best flush instruction of this CPU: `CLWB` > `CLFLUSHOPT` > `CLFLUSH`.
pub fn best_flush() -> Option<crate::FlushKind> {
    crate::FlushKind::ALL.into_iter().find(|k| flush_supported(*k))
}
