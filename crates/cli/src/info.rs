//! `ferrite info [PATH]`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use ferrite_pmem::probe::{self, PathReport};
use ferrite_pmem::{DurabilityMode, FlushKind, Options};

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Directory where pools would live, or a pool file (its header is validated and printed).
    /// Defaults to /dev/shm where it exists, else the current directory.
    path: Option<PathBuf>,
    /// Force a flush instruction (clwb, clflushopt, clflush) instead of the best one.
    #[arg(long, env = "FERRITE_FLUSH")]
    flush: Option<FlushKind>,
    /// Force a durability mode (pmem, emulated, msync) instead of detecting it.
    #[arg(long, env = "FERRITE_MODE")]
    mode: Option<DurabilityMode>,
    /// Declare eADR (caches in the persistence domain): flushes are elided, fences kept.
    #[arg(long, env = "FERRITE_EADR")]
    eadr: bool,
    /// Emulated extra latency per persist barrier, in ns.
    #[arg(long, env = "FERRITE_BARRIER_NS", default_value_t = 0)]
    barrier_ns: u64,
    /// Emulated extra latency per flushed line, in ns.
    #[arg(long, env = "FERRITE_LINE_NS", default_value_t = 0)]
    line_ns: u64,
    /// Emulated write-bandwidth cap in MB/s (0 = unlimited).
    #[arg(long, env = "FERRITE_BANDWIDTH_MBPS", default_value_t = 0)]
    bandwidth_mbps: u64,
    /// Segment size of pool sets, in bytes.
    #[arg(long, env = "FERRITE_SEGMENT_SIZE", default_value_t = ferrite_pmem::DEFAULT_SEGMENT_SIZE)]
    segment_size: u64,
}

impl InfoArgs {
    /// The `Options` these flags describe.
    pub fn options(&self) -> Options {
        let mut opts = Options::default()
            .eadr(self.eadr)
            .barrier_latency_ns(self.barrier_ns)
            .line_latency_ns(self.line_ns)
            .write_bandwidth_mbps(self.bandwidth_mbps)
            .segment_size(self.segment_size);
        if let Some(f) = self.flush {
            opts = opts.flush(f);
        }
        if let Some(m) = self.mode {
            opts = opts.durability(m);
        }
        opts
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn run(args: &InfoArgs) -> anyhow::Result<ExitCode> {
    let path = args.path.clone().unwrap_or_else(|| {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() { shm } else { PathBuf::from(".") }
    });
    let opts = args.options();

    let (cpu, best) = probe::cpu();
    println!("Ferrite {}", env!("CARGO_PKG_VERSION"));
    println!();
    println!("CPU: {} ({} logical cores)", cpu_model(), num_cpus());
    println!(
        "  clflush {}  clflushopt {}  clwb {}  movnti/sse2 {}  avx512f {}  rtm/tsx {}  invariant-tsc {}",
        yes(cpu.clflush),
        yes(cpu.clflushopt),
        yes(cpu.clwb),
        yes(cpu.sse2),
        yes(cpu.avx512f),
        yes(cpu.rtm),
        yes(cpu.invariant_tsc),
    );
    println!("  cache line (CPUID): {} bytes", cpu.clflush_line_size);
    match best {
        Some(b) => println!("  best flush instruction: {b} (clwb > clflushopt > clflush)"),
        None => println!("  no cache-line flush instruction: only msync mode is usable"),
    }
    println!();

    let r =
        probe::probe_path(&path, &opts).with_context(|| format!("probing {}", path.display()))?;
    print_report(&path, &r);
    println!();
    print_config(&opts, &r);
    Ok(ExitCode::SUCCESS)
}

fn print_config(opts: &Options, r: &PathReport) {
    let lat = opts.latency();
    println!("Effective configuration (ferrite_pmem::Options; see docs/configuration.md)");
    println!("  layout: {}", opts.layout_name());
    println!(
        "  durability: {} ({})",
        r.decision.mode,
        if opts.durability_mode().is_some() { "forced" } else { "detected" }
    );
    println!(
        "  flush: {} ({})",
        r.flush,
        if opts.flush_kind().is_some() { "forced" } else { "best available" }
    );
    println!("  eadr: {}", opts.is_eadr());
    println!(
        "  segment size: {} bytes; pool-set reservation: {} bytes",
        opts.segment_size_bytes(),
        opts.max_pool_size_bytes()
    );
    if lat.is_active() {
        let c = ferrite_pmem::emulation::clock();
        let bw = if lat.bandwidth_mbps == 0 {
            "unlimited".to_owned()
        } else {
            format!("{} MB/s", lat.bandwidth_mbps)
        };
        println!(
            "  latency emulation: {} ns per barrier, {} ns per line, bandwidth {bw}",
            lat.barrier_ns, lat.line_ns
        );
        match c.fallback_reason {
            None => println!(
                "  emulation clock: TSC, {:.4} ticks/ns (calibration spread {:.4}%, \
                 primitive cost {} ticks subtracted)",
                c.ticks_per_ns,
                c.calibration_spread * 100.0,
                c.overshoot_ticks
            ),
            Some(why) => println!("  emulation clock: monotonic clock ({why})"),
        }
    } else {
        println!("  latency emulation: off");
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn print_report(path: &std::path::Path, r: &PathReport) {
    println!("Path: {}", path.display());
    println!(
        "  file system: {} (magic {:#x}) at {}, {} free of {}",
        r.fs_name,
        r.fs_magic,
        r.dir.display(),
        gib(r.available),
        gib(r.total)
    );
    match r.map_sync {
        Ok(()) => println!("  MAP_SYNC: accepted"),
        Err(e) => println!("  MAP_SYNC: refused ({e})"),
    }
    println!("  durability mode: {} ({})", r.decision.mode, r.decision.reason);
    println!("  guarantee: {}", r.decision.mode.guarantee());
    if r.decision.mode == DurabilityMode::Msync {
        println!("  flush: msync(MS_SYNC) of the covering pages (no cache-line instruction)");
    } else {
        println!(
            "  flush instruction: {}{}",
            r.flush,
            if r.eadr { " (elided: eADR declared)" } else { "" }
        );
    }
    let flush_word =
        if r.decision.mode == DurabilityMode::Msync { "msync" } else { r.flush.name() };
    println!(
        "  measured: persist barrier (8-byte store + {flush_word} + sfence) {:.1} ns",
        r.persist_barrier_ns
    );
    println!(
        "  measured: dependent read of a line just flushed {:.1} ns (of a cached line {:.1} ns)",
        r.read_after_flush_ns, r.cached_read_ns
    );
    if let Some(pool) = &r.pool {
        println!();
        match pool {
            Ok(s) => {
                let h = &s.header;
                println!("Pool file: valid");
                println!("  layout: {}", h.layout_str().unwrap_or("?"));
                println!(
                    "  format version: {} (compat {:#x}, incompat {:#x})",
                    h.version, h.compat_flags, h.incompat_flags
                );
                println!(
                    "  size: {} bytes (data area {} bytes)",
                    h.pool_size,
                    h.pool_size.saturating_sub(h.data_offset)
                );
                println!("  uuid: {}", uuid(&h.uuid));
                println!(
                    "  last shutdown: {}",
                    if s.clean { "clean" } else { "not clean (or still open)" }
                );
            }
            Err(e) => println!("Pool file: INVALID: {e}"),
        }
    }
}

fn uuid(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    let s = h.concat();
    format!("{}-{}-{}-{}-{}", &s[0..8], &s[8..12], &s[12..16], &s[16..20], &s[20..32])
}
