//! What a run is: the run specification ([`RunSpec`]), its points ([`Point`]), and how long
//! each point runs and warms up ([`Stop`], [`Warmup`]).
//!
//! These types sit below both the runner and the reports, so that dependencies go one way:
//! `runner` → `report` → `spec` (and `runner` → `spec`); `report` never imports `runner`.

use std::path::PathBuf;
use std::time::Duration;

use ferrite::pmem::FlushKind;

use crate::subject::{EngineId, Family, LatencyModel};
use crate::workload::{Distribution, WorkloadId};

/// How long the timed phase of a point runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stop {
    /// For this long.
    Duration(Duration),
    /// For this many transactions in total (split across the threads).
    Txns(u64),
}

/// How long a point warms up before timing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Warmup {
    /// For this long.
    Duration(Duration),
    /// For this many transactions in total.
    Txns(u64),
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Workloads, in order.
    pub workloads: Vec<WorkloadId>,
    /// Engines, in order.
    pub engines: Vec<EngineId>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Injected latencies for Ferrite engines, ns (baselines run at 0 only).
    pub latencies: Vec<u64>,
    /// How latency is injected.
    pub latency_model: LatencyModel,
    /// Flush instruction for Ferrite's pools (`None`: best available).
    pub flush: Option<FlushKind>,
    /// Emulated latency of every block-file sync, µs, for the engines on the paged file store
    /// ([`EngineId::PagedFile`]); one value for the whole run (0: none).
    pub sync_latency_us: u64,
    /// Timed phase.
    pub stop: Stop,
    /// Warm-up.
    pub warmup: Warmup,
    /// Records loaded (see each workload).
    pub scale: u64,
    /// Value size, bytes.
    pub value_size: usize,
    /// YCSB request distribution.
    pub distribution: Distribution,
    /// Zipfian constant.
    pub theta: f64,
    /// Seed.
    pub seed: u64,
    /// Runs per point; the run with the median throughput is reported.
    pub repeat: usize,
    /// The run's directory (fresh, exists); each point gets a subdirectory, removed after it.
    pub dir: PathBuf,
}

/// One point of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Workload.
    pub workload: WorkloadId,
    /// Engine.
    pub engine: EngineId,
    /// Worker threads.
    pub threads: usize,
    /// Injected latency, ns.
    pub latency_ns: u64,
}

impl RunSpec {
    /// Every point, grouped by workload, then thread count, then engine (a Ferrite engine once
    /// per latency, a baseline once, at 0); an engine that does not run a workload
    /// ([`WorkloadId::supports`]) has no point there.
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        let mut lats = self.latencies.clone();
        if lats.is_empty() {
            lats.push(0);
        }
        for &workload in &self.workloads {
            for &threads in &self.threads {
                for &engine in self.engines.iter().filter(|&&e| workload.supports(e)) {
                    let ls: &[u64] = if engine.family() == Family::Ferrite { &lats } else { &[0] };
                    for &latency_ns in ls {
                        v.push(Point { workload, engine, threads, latency_ns });
                    }
                }
            }
        }
        v
    }

    /// Whether any point injects latency.
    pub fn sweeps_latency(&self) -> bool {
        self.latencies.iter().any(|&l| l != 0)
    }

    /// The sync latency `engine` runs with, µs: the run's for an engine on the file store,
    /// 0 for every other engine (they sync no block file, or sync outside Ferrite).
    pub fn sync_latency_us_of(&self, engine: EngineId) -> u64 {
        if matches!(engine, EngineId::PagedFile(_)) { self.sync_latency_us } else { 0 }
    }

    /// Whether any engine of the run is on the paged file store.
    pub fn has_file_store(&self) -> bool {
        self.engines.iter().any(|e| matches!(e, EngineId::PagedFile(_)))
    }
}
