//! The restart benchmark (`ferrite bench restart`): how soon, and how fast, a Ferrite database
//! serves an OLTP workload again after the process running it was killed with SIGKILL at
//! steady state.
//!
//! # One run (one workload size and one configuration)
//! 1. **Load** (this process): a fresh database on a file-backed pool set in `dir` (under
//!    `/dev/shm` by default), created with the configuration's [`Options`], loaded by the
//!    workload's own loader ([`OltpWorkload::load`]), then closed cleanly.
//! 2. **Warm child** (a fresh process, [`Role::Warm`]): opens the database and runs the
//!    workload on `threads` threads. After `warm` it reports the steady-state throughput (the
//!    commits of the second half of the warm window over its length) and its commits so far
//!    on its stdout, once it has committed at least `warm_txns`; it keeps running until the
//!    parent kills it with SIGKILL, so the kill lands at steady state, inside transactions.
//! 3. **Measuring child** (another fresh process, [`Role::Measure`]): takes the time `t0`
//!    just before `Database::open`, opens (recovery), records when `open` returned, the
//!    recovery report's own times, and when the first transaction of the workload committed
//!    (the earliest of the threads' first commits, from `t0`); it runs the workload for `after`
//!    after `open` returned (to the next bucket boundary, and on until it committed
//!    `after_txns`), counting commits per `bucket` of time since `t0` (per-thread
//!    counters, no lock or shared write on the hot path), then runs the engine's check
//!    (`Database::check`) with every worker stopped and reports everything on its stdout.
//!
//! The parent turns the reports into [`RunResult`]s: a CSV (one row per bucket: seconds since
//! restart at the bucket's end, transactions/s in it, configuration), an SVG per workload size
//! (throughput over seconds since restart, one line per configuration, a vertical marker at
//! each configuration's time to first commit and a dashed line at its pre-crash steady state)
//! and a text summary (time to open, to first commit, to 90 % of the pre-crash steady state).
//!
//! # Configurations
//! A configuration is a name and a set of settings applied to the database's [`Options`]
//! ([`RestartConfig`]); each runs on a database of its own (settings of SOFORT are fixed at
//! creation). The settings known are listed in [`SETTINGS`]; a recovery strategy (instant,
//! adaptive) is one more arm in [`RestartConfig::options`] and one line in [`PRESETS`].
//!
//! # Protocol (child → parent, one line each on the child's stdout, after [`TAG`])
//! - warm child: `steady <tx_per_s> <commits>`, then `alive` every 50 ms (unread; a failed
//!   write means the parent is gone, and the child exits) until it is killed;
//! - measuring child: `open <ns>`, `recovery <key>=<value> …`, `first <ns>` (or `first none`),
//!   `bucket <index> <commits>` for every bucket, `check ok <summary>` or
//!   `check failed <what>`, `done <commits>`;
//! - either: `error <text>` before it exits with a failure.
//!
//! # Concurrency and time
//! Worker threads share nothing on the hot path but the database: the warm child's per-thread
//! commit counters are relaxed atomics on separate cache lines, read by its main thread; the
//! measuring child's buckets are thread-local and merged after the threads joined. Times are
//! measured, never asserted: the tests check the structure (buckets, the kill, the check).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrite::{EngineKind, Options};

use crate::campaign::{ChildGuard, spawn_piped};
use crate::oltp::tatp::Tatp;
use crate::oltp::tpcc::TpccWorkload;
use crate::oltp::{self, OltpSubject, OltpWorkload, TpccScale};
use crate::subject::{LatencyModel, OpError, SubjectSetup};
use crate::workload::{Distribution, WorkloadParams};

/// What starts every protocol line.
pub const TAG: &str = "FERRITE-RESTART ";

/// Most buckets of one run.
pub const MAX_BUCKETS: u64 = 1_000_000;

/// Most worker threads.
pub const MAX_THREADS: usize = 256;

/// A restart benchmark error.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// The engine failed.
    #[error("engine: {0}")]
    Engine(#[from] OpError),
    /// Spawning, killing or reading a child, or the file system.
    #[error("{0}")]
    Io(String),
    /// A child broke the protocol or reported a failure.
    #[error("child: {0}")]
    Child(String),
}

fn usage(s: impl Into<String>) -> RestartError {
    RestartError::Usage(s.into())
}

/// The settings a configuration may name, with what they set.
pub const SETTINGS: &[(&str, &str)] = &[
    ("slots", "SofortConfig::slots: transaction slots (1..=960)"),
    ("alloc_slots", "SofortConfig::alloc_slots: slots of the persistent allocator"),
    ("recovery", "SofortConfig::recovery: sync (indexes rebuilt before open returns) or instant"),
    (
        "recovery_threads",
        "SofortConfig::recovery_threads: index rebuild threads (0: one per index)",
    ),
    (
        "help",
        "SofortConfig::lookup_help: how a primary-key lookup on an index still being rebuilt \
         helps it (bounded: at most left/21 rows, then a scan of the rest, the default; full: \
         until 4096 rows are left)",
    ),
    (
        "placement",
        "SofortConfig::index_placement: where every index lives (dram, hybrid, persistent)",
    ),
    (
        "strategy",
        "SofortConfig::recovery_strategy: a label of the seed's Table 6.1 (rk.Q1.R1, !rk.Q1.R1, \
         rk.Qad.R2ad, sync.R2); overrides recovery and recovery_threads",
    ),
    (
        "past_sample",
        "SofortConfig::past_sample_every: one statement in N per thread counted into the past \
         workload kept in PM for adaptive recovery's ranking (0: off; default 64)",
    ),
    (
        "prefault",
        "pmem prefault (true/false): populate every segment's pages when mapped (the \
         benchmark's default: true), inside open's time",
    ),
];

/// Named configurations that `--config NAME` (without settings) stands for.
pub const PRESETS: &[(&str, &str)] = &[
    // Synchronous recovery (the default): `open` returns with every DRAM index rebuilt.
    ("sync", ""),
    // Instant recovery: open returns once rows are classified; indexes rebuilt behind it.
    ("instant", "recovery=instant"),
    // Adaptive recovery: ranked by the restart workload, threads released as benefit falls.
    ("adaptive", "strategy=rk.Qad.R2ad"),
];

/// A named set of settings of the database's [`Options`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartConfig {
    /// Name (a line of the plot; letters, digits, `-`, `_`).
    pub name: String,
    /// `(setting, value)` in the order given.
    pub settings: Vec<(String, String)>,
}

impl RestartConfig {
    /// Parses `NAME` (a preset of [`PRESETS`]) or `NAME=SETTING=VALUE,SETTING=VALUE…`
    /// (`NAME=` is the defaults under a name of one's own).
    pub fn parse(s: &str) -> Result<RestartConfig, RestartError> {
        let (name, rest) = match s.split_once('=') {
            Some((n, r)) => (n, Some(r)),
            None => (s, None),
        };
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(usage(format!(
                "configuration {s:?}: the name must be letters, digits, '-' or '_'"
            )));
        }
        let rest = match rest {
            Some(r) => r,
            None => PRESETS.iter().find(|p| p.0 == name).map(|p| p.1).ok_or_else(|| {
                let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
                usage(format!(
                    "configuration {name:?}: no such preset (presets: {}); give settings as \
                     NAME=SETTING=VALUE,…",
                    names.join(", ")
                ))
            })?,
        };
        let mut settings = Vec::new();
        for part in rest.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                usage(format!("configuration {name:?}: setting {part:?} is not SETTING=VALUE"))
            })?;
            settings.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        let c = RestartConfig { name: name.to_owned(), settings };
        c.options(Options::new())?;
        Ok(c)
    }

    /// The value named `v` among `choices`, for setting `k`.
    fn pick<T: Copy>(&self, k: &str, v: &str, choices: &[(&str, T)]) -> Result<T, RestartError> {
        choices.iter().find(|(n, _)| *n == v).map(|&(_, x)| x).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            usage(format!("configuration {:?}: {k}={v:?}: one of {}", self.name, names.join(", ")))
        })
    }

    /// `base` with this configuration's settings applied.
    pub fn options(&self, base: Options) -> Result<Options, RestartError> {
        let mut sofort = base.sofort_config();
        let mut pmem = base.pmem_options().clone();
        for (k, v) in &self.settings {
            let num = || -> Result<u32, RestartError> {
                v.parse().map_err(|_| {
                    usage(format!("configuration {:?}: {k}={v:?} is not a number", self.name))
                })
            };
            match k.as_str() {
                "slots" => sofort.slots = num()?,
                "alloc_slots" => sofort.alloc_slots = num()?,
                "recovery" => {
                    use ferrite::RecoveryMode::{Instant, Synchronous};
                    sofort.recovery =
                        self.pick(k, v, &[("sync", Synchronous), ("instant", Instant)])?;
                }
                "recovery_threads" => sofort.recovery_threads = num()?,
                "help" => {
                    use ferrite::LookupHelp::{Bounded, Full};
                    sofort.lookup_help =
                        self.pick(k, v, &[("full", Full), ("bounded", Bounded)])?;
                }
                "past_sample" => sofort.past_sample_every = num()?,
                "placement" => {
                    sofort.index_placement = v.parse().map_err(|e| {
                        usage(format!("configuration {:?}: {k}={v:?}: {e}", self.name))
                    })?;
                }
                "strategy" => {
                    let s: ferrite::RecoveryStrategy = v.parse().map_err(|e| {
                        usage(format!("configuration {:?}: {k}={v:?}: {e}", self.name))
                    })?;
                    sofort.recovery_strategy = Some(s);
                }
                "prefault" => {
                    let on = v.parse().map_err(|_| {
                        usage(format!("configuration {:?}: {k}={v:?}: true or false", self.name))
                    })?;
                    pmem = pmem.prefault(on);
                }
                _ => {
                    let known: Vec<&str> = SETTINGS.iter().map(|s| s.0).collect();
                    return Err(usage(format!(
                        "configuration {:?}: unknown setting {k:?} (known: {})",
                        self.name,
                        known.join(", ")
                    )));
                }
            }
        }
        Ok(base.sofort(sofort).pmem(pmem))
    }

    /// `NAME=SETTING=VALUE,…` (what [`RestartConfig::parse`] reads back).
    pub fn encode(&self) -> String {
        let s: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}={}", self.name, s.join(","))
    }
}

impl fmt::Display for RestartConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.settings.is_empty() {
            write!(f, "{} (defaults)", self.name)
        } else {
            let s: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            write!(f, "{} ({})", self.name, s.join(", "))
        }
    }
}

/// The workload and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartWorkload {
    /// TATP with this many subscribers.
    Tatp {
        /// Subscribers.
        subscribers: u32,
    },
    /// TPC-C at this scale.
    Tpcc(TpccScale),
}

impl RestartWorkload {
    /// `tatp` or `tpcc`.
    pub fn name(&self) -> &'static str {
        match self {
            RestartWorkload::Tatp { .. } => "tatp",
            RestartWorkload::Tpcc(_) => "tpcc",
        }
    }

    /// The size as printed (`1000000 subscribers`, `2 warehouses`).
    pub fn size(&self) -> String {
        match self {
            RestartWorkload::Tatp { subscribers } => format!("{subscribers} subscribers"),
            RestartWorkload::Tpcc(s) if s.items == 100_000 && s.customers == 3000 => {
                format!("{} warehouses", s.warehouses)
            }
            RestartWorkload::Tpcc(s) => format!(
                "{} warehouses ({} items, {} customers per district)",
                s.warehouses, s.items, s.customers
            ),
        }
    }

    /// A short tag for file names and the CSV (`tatp-1000000`, `tpcc-2w`).
    pub fn tag(&self) -> String {
        match self {
            RestartWorkload::Tatp { subscribers } => format!("tatp-{subscribers}"),
            RestartWorkload::Tpcc(s) => format!("tpcc-{}w", s.warehouses),
        }
    }

    fn encode(&self) -> String {
        match self {
            RestartWorkload::Tatp { subscribers } => format!("tatp:{subscribers}"),
            RestartWorkload::Tpcc(s) => {
                format!("tpcc:{},{},{}", s.warehouses, s.items, s.customers)
            }
        }
    }

    fn decode(s: &str) -> Result<RestartWorkload, RestartError> {
        let bad = || usage(format!("bad workload {s:?}"));
        let num = |x: &str| x.parse::<u32>().map_err(|_| bad());
        match s.split_once(':') {
            Some(("tatp", n)) => Ok(RestartWorkload::Tatp { subscribers: num(n)? }),
            Some(("tpcc", rest)) => {
                let v: Vec<u32> = rest.split(',').map(num).collect::<Result<_, _>>()?;
                let [warehouses, items, customers] = v[..] else { return Err(bad()) };
                Ok(RestartWorkload::Tpcc(TpccScale { warehouses, items, customers }))
            }
            _ => Err(bad()),
        }
    }

    /// The benchmark workload (its loader, schema and workers) for `threads` threads.
    pub fn oltp(&self, seed: u64, threads: usize) -> Box<dyn OltpWorkload> {
        let p = WorkloadParams {
            scale: 0,
            value_size: 0,
            distribution: Distribution::Uniform,
            theta: 0.99,
            seed,
            threads,
            planned_txns: None,
        };
        match self {
            RestartWorkload::Tatp { subscribers } => Box::new(Tatp::new(*subscribers, &p)),
            RestartWorkload::Tpcc(scale) => Box::new(TpccWorkload::new(*scale, &p)),
        }
    }
}

/// How a restart benchmark runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The workload sizes, in order.
    pub workloads: Vec<RestartWorkload>,
    /// The configurations, in order (each size runs each).
    pub configs: Vec<RestartConfig>,
    /// Worker threads in both children.
    pub threads: usize,
    /// The warm child's run before the kill.
    pub warm: Duration,
    /// The warm child commits at least this many transactions before the kill.
    pub warm_txns: u64,
    /// The measuring child's run after `open` returned (rounded up to whole buckets).
    pub after: Duration,
    /// The measuring child commits at least this many transactions (more buckets if the
    /// window was not enough).
    pub after_txns: u64,
    /// Bucket width.
    pub bucket: Duration,
    /// Seed of the population and the workers.
    pub seed: u64,
    /// Directory for the databases (each run's in a fresh subdirectory, removed after it).
    pub dir: PathBuf,
}

impl Plan {
    /// Checks the plan's numbers (typed errors, no panics later).
    pub fn validate(&self) -> Result<(), RestartError> {
        if self.workloads.is_empty() || self.configs.is_empty() {
            return Err(usage("at least one workload size and one configuration"));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(usage(format!("--threads {}: 1..={MAX_THREADS}", self.threads)));
        }
        if self.bucket.is_zero() {
            return Err(usage("--bucket must be more than 0"));
        }
        if self.after.is_zero() {
            return Err(usage("--after must be more than 0"));
        }
        // The buckets also cover `open`; bound the window itself here.
        if self.after.as_nanos() / self.bucket.as_nanos() >= u128::from(MAX_BUCKETS) {
            return Err(usage(format!(
                "--after / --bucket is {} buckets: at most {MAX_BUCKETS}",
                self.after.as_nanos() / self.bucket.as_nanos()
            )));
        }
        let mut names: Vec<&str> = self.configs.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(usage("two configurations have the same name"));
        }
        for w in &self.workloads {
            match w {
                RestartWorkload::Tatp { subscribers: 0 } => {
                    return Err(usage("--scale: at least 1 subscriber"));
                }
                RestartWorkload::Tpcc(s) if s.clamped() != *s => {
                    let c = s.clamped();
                    return Err(usage(format!(
                        "TPC-C scale {} warehouses, {} items, {} customers per district is out \
                         of range (nearest valid: {}, {}, {})",
                        s.warehouses, s.items, s.customers, c.warehouses, c.items, c.customers
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Which child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Runs until killed; reports its steady state first.
    Warm,
    /// Opens after the kill and measures.
    Measure,
}

/// What a child needs (parent → child as one string, [`ChildSpec::encode`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ChildSpec {
    /// Which child.
    pub role: Role,
    /// The database directory (what `oltp::open_ferrite` was given).
    pub dir: PathBuf,
    /// The workload and size.
    pub workload: RestartWorkload,
    /// The configuration.
    pub config: RestartConfig,
    /// Threads.
    pub threads: usize,
    /// Seed.
    pub seed: u64,
    /// Warm: the window; measure: the run after `open`.
    pub window: Duration,
    /// Warm: commits before reporting; measure: commits before stopping (with the window).
    pub min_txns: u64,
    /// Measure: bucket width (warm: unused).
    pub bucket: Duration,
}

impl ChildSpec {
    /// One line per field, `name=value`.
    pub fn encode(&self) -> String {
        format!(
            "role={}\ndir={}\nworkload={}\nconfig={}\nthreads={}\nseed={}\nwindow_ns={}\n\
             min_txns={}\nbucket_ns={}",
            match self.role {
                Role::Warm => "warm",
                Role::Measure => "measure",
            },
            self.dir.display(),
            self.workload.encode(),
            self.config.encode(),
            self.threads,
            self.seed,
            self.window.as_nanos(),
            self.min_txns,
            self.bucket.as_nanos()
        )
    }

    /// Parses [`ChildSpec::encode`]'s output.
    pub fn decode(s: &str) -> Result<ChildSpec, RestartError> {
        let fields: BTreeMap<&str, &str> = s.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| fields.get(k).copied().ok_or_else(|| usage(format!("child: no {k}")));
        let num = |k: &str| -> Result<u64, RestartError> {
            get(k)?.parse().map_err(|_| usage(format!("child: bad {k}")))
        };
        Ok(ChildSpec {
            role: match get("role")? {
                "warm" => Role::Warm,
                "measure" => Role::Measure,
                r => return Err(usage(format!("child: bad role {r:?}"))),
            },
            dir: PathBuf::from(get("dir")?),
            workload: RestartWorkload::decode(get("workload")?)?,
            config: RestartConfig::parse(get("config")?)?,
            threads: usize::try_from(num("threads")?).map_err(|_| usage("child: bad threads"))?,
            seed: num("seed")?,
            window: Duration::from_nanos(num("window_ns")?),
            min_txns: num("min_txns")?,
            bucket: Duration::from_nanos(num("bucket_ns")?),
        })
    }
}

/// The subject setup of a restart database (no injected latency, the best flush).
fn setup(w: &dyn OltpWorkload) -> SubjectSetup {
    SubjectSetup {
        tables: w.schema().tables.iter().map(|t| t.name).collect(),
        data_bytes: w.loaded_bytes() * 2 + (8 << 20),
        latency_ns: 0,
        latency_model: LatencyModel::Barrier,
        flush: None,
        sync_latency_ns: 0,
    }
}

/// The options of a run: the benchmark's (prefaulted pool, best flush) with the
/// configuration's settings.
fn options(config: &RestartConfig, setup: &SubjectSetup) -> Result<Options, RestartError> {
    config.options(crate::subject::ferrite_db::options(EngineKind::Sofort, setup))
}

fn line(s: &str) -> Result<(), RestartError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{TAG}{s}")
        .and_then(|()| out.flush())
        .map_err(|e| RestartError::Io(format!("stdout: {e}")))
}

/// A counter on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// Runs one transaction of `worker` to its commit (retrying retryable failures); `false` when
/// the worker has nothing left.
fn run_one(
    worker: &mut dyn oltp::OltpWorker,
    session: &mut dyn oltp::OltpSession,
) -> Result<bool, OpError> {
    if worker.plan().is_none() {
        return Ok(false);
    }
    crate::workload::retry(|| worker.execute(session))?;
    worker.committed();
    Ok(true)
}

/// The child's side (either role): runs as `spec` says, reporting on stdout. A failure is
/// reported as an `error` line too.
pub fn run_child(spec: &ChildSpec) -> Result<(), RestartError> {
    let res = match spec.role {
        Role::Warm => warm_child(spec),
        Role::Measure => measure_child(spec),
    };
    if let Err(e) = &res {
        let _ = line(&format!("error {}", e.to_string().replace('\n', " ")));
    }
    res
}

fn warm_child(spec: &ChildSpec) -> Result<(), RestartError> {
    let w = spec.workload.oltp(spec.seed, spec.threads);
    let setup = setup(w.as_ref());
    // The warm child's open is not the one measured: it recovers synchronously, so that the
    // steady state it reports is not taken while indexes are still being rebuilt (instant and
    // adaptive configurations would otherwise report their own recovery as the steady state).
    let opts = options(&spec.config, &setup)?;
    let mut sofort = opts.sofort_config();
    sofort.recovery = ferrite::RecoveryMode::Synchronous;
    sofort.recovery_strategy = None;
    let subject = oltp::reopen_ferrite(opts.sofort(sofort), &spec.dir, &setup, w.schema())?;
    let counters: Vec<Padded> = (0..spec.threads).map(|_| Padded::default()).collect();
    let failed = AtomicBool::new(false);
    let error: std::sync::Mutex<Option<OpError>> = std::sync::Mutex::new(None);
    let total = || counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum::<u64>();
    std::thread::scope(|s| -> Result<(), RestartError> {
        for (t, counter) in counters.iter().enumerate() {
            let (subject, w, failed, error) = (subject.as_ref(), w.as_ref(), &failed, &error);
            s.spawn(move || {
                let res = (|| -> Result<(), OpError> {
                    let mut session = subject.session()?;
                    let mut worker = w.worker(t);
                    // Runs until the process is killed (or another thread failed).
                    while !failed.load(Ordering::Relaxed) {
                        if !run_one(worker.as_mut(), session.as_mut())? {
                            break;
                        }
                        counter.0.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })();
                if let Err(e) = res {
                    failed.store(true, Ordering::Relaxed);
                    *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            });
        }
        // Whatever ends the main thread's part (a failed worker, a closed pipe: the parent is
        // gone), the workers stop, so the scope can end.
        let main = || -> Result<(), RestartError> {
            let start = Instant::now();
            std::thread::sleep(spec.window / 2);
            let (c1, t1) = (total(), Instant::now());
            let rest = spec.window.saturating_sub(start.elapsed());
            std::thread::sleep(rest);
            // At least `min_txns` in all, and at least one commit inside the measured half (a
            // window too short for the machine would otherwise report a steady state of 0).
            while (total() < spec.min_txns || total() == c1) && !failed.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let (c2, t2) = (total(), Instant::now());
            if failed.load(Ordering::Relaxed) {
                let e = error.lock().unwrap_or_else(|p| p.into_inner()).take();
                return Err(
                    e.map_or_else(|| RestartError::Child("a worker failed".into()), Into::into)
                );
            }
            let secs = (t2 - t1).as_secs_f64().max(1e-9);
            line(&format!("steady {:.1} {c2}", (c2 - c1) as f64 / secs))?;
            // Steady state: wait for the SIGKILL while the workers run. The `alive` lines end the
            // child if the parent is gone (the write fails on the closed pipe); the parent does not
            // read them (a full pipe only blocks this thread, not the workers).
            while !failed.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                line("alive")?;
            }
            let e = error.lock().unwrap_or_else(|p| p.into_inner()).take();
            Err(e.map_or_else(|| RestartError::Child("the workers stopped".into()), Into::into))
        };
        let res = main();
        failed.store(true, Ordering::Relaxed);
        res
    })
}

/// One measuring thread's result: its first commit (ns since `t0`) and commits per bucket.
struct Measured {
    first_ns: Option<u64>,
    buckets: Vec<u64>,
}

fn measure_child(spec: &ChildSpec) -> Result<(), RestartError> {
    if spec.bucket.is_zero() {
        return Err(usage("child: zero bucket"));
    }
    let w = spec.workload.oltp(spec.seed, spec.threads);
    let setup = setup(w.as_ref());
    let options = options(&spec.config, &setup)?;
    let t0 = Instant::now();
    let subject = oltp::reopen_ferrite(options, &spec.dir, &setup, w.schema())?;
    let opened = t0.elapsed();
    line(&format!("open {}", opened.as_nanos()))?;
    line(&format!("recovery {}", recovery_fields(subject.as_ref())))?;
    // The window ends on a bucket boundary, so every bucket is whole.
    let bucket_ns = spec.bucket.as_nanos();
    let n = (opened + spec.window).as_nanos().div_ceil(bucket_ns).clamp(1, u128::from(MAX_BUCKETS));
    let end = Duration::from_nanos(u64::try_from(n * bucket_ns).unwrap_or(u64::MAX));
    let n = n as usize;
    let per_thread = spec.min_txns.div_ceil(spec.threads as u64);
    let outs: Vec<Result<Measured, OpError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (subject, w) = (subject.as_ref(), w.as_ref());
                s.spawn(move || -> Result<Measured, OpError> {
                    let mut m = Measured { first_ns: None, buckets: vec![0; n] };
                    let mut session = subject.session()?;
                    let mut worker = w.worker(t);
                    let mut done = 0u64;
                    // Until the window's end, and at least this thread's share of `min_txns`
                    // (more buckets then).
                    while t0.elapsed() < end || done < per_thread {
                        if !run_one(worker.as_mut(), session.as_mut())? {
                            break;
                        }
                        let at = t0.elapsed().as_nanos();
                        done += 1;
                        m.first_ns.get_or_insert(at as u64);
                        let i = (at / bucket_ns).min(u128::from(MAX_BUCKETS) - 1) as usize;
                        if i >= m.buckets.len() {
                            m.buckets.resize(i + 1, 0);
                        }
                        m.buckets[i] += 1;
                    }
                    Ok(m)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(OpError::Engine("a worker panicked".into()))))
            .collect()
    });
    let mut first: Option<u64> = None;
    let mut buckets = vec![0u64; n];
    for o in outs {
        let m = o?;
        if let Some(f) = m.first_ns {
            first = Some(first.map_or(f, |x| x.min(f)));
        }
        if m.buckets.len() > buckets.len() {
            buckets.resize(m.buckets.len(), 0);
        }
        for (b, c) in buckets.iter_mut().zip(&m.buckets) {
            *b += c;
        }
    }
    line(&match first {
        Some(f) => format!("first {f}"),
        None => "first none".into(),
    })?;
    for (i, c) in buckets.iter().enumerate() {
        line(&format!("bucket {i} {c}"))?;
    }
    match subject.engine_check() {
        Some(Ok(summary)) => line(&format!("check ok {}", summary.replace('\n', " ")))?,
        Some(Err(e)) => line(&format!("check failed {}", e.to_string().replace('\n', " ")))?,
        None => line("check failed the engine has no check")?,
    }
    line(&format!("done {}", buckets.iter().sum::<u64>()))?;
    drop(subject);
    Ok(())
}

/// The recovery report as `key=value` fields (times in ns).
fn recovery_fields(subject: &dyn OltpSubject) -> String {
    let Some(r) = subject.recovery_report() else { return "none=1".into() };
    format!(
        "time_to_open_ns={} time_to_first_transaction_ns={} time_to_index_rebuild_ns={} \
         clean_shutdown={} committed_areas={} rolled_forward={} undone={} live_rows={} \
         garbage_rows={} tables={}",
        r.time_to_open.as_nanos(),
        r.time_to_first_transaction.as_nanos(),
        r.time_to_index_rebuild.as_nanos(),
        u8::from(r.clean_shutdown),
        r.committed_areas,
        r.rolled_forward,
        r.undone,
        r.live_rows,
        r.garbage_rows,
        r.tables
    )
}

/// What one run (workload size × configuration) measured.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    /// The workload and size.
    pub workload: RestartWorkload,
    /// The configuration.
    pub config: RestartConfig,
    /// Loading the fresh database (parent).
    pub load: Duration,
    /// The warm child's steady-state throughput before the kill, tx/s.
    pub steady_tx_s: f64,
    /// The warm child's commits before the kill was sent (at least).
    pub warm_commits: u64,
    /// The signal that ended the warm child (9 after SIGKILL).
    pub warm_signal: Option<i32>,
    /// Until `Database::open` returned, from just before it.
    pub open: Duration,
    /// Until the first transaction of the workload committed, from just before `open`.
    pub first_commit: Option<Duration>,
    /// The recovery report's fields (`time_to_open_ns`, …), as the child printed them.
    pub recovery: BTreeMap<String, u64>,
    /// Bucket width.
    pub bucket: Duration,
    /// Commits per bucket of time since just before `open`.
    pub buckets: Vec<u64>,
    /// The engine's check after the run: `Ok(summary)` or `Err(what broke)`.
    pub check: Result<String, String>,
}

impl RunResult {
    /// `(seconds since restart at the bucket's end, tx/s in the bucket)`.
    pub fn series(&self) -> Vec<(f64, f64)> {
        let w = self.bucket.as_secs_f64();
        self.buckets.iter().enumerate().map(|(i, &c)| ((i + 1) as f64 * w, c as f64 / w)).collect()
    }

    /// Seconds since restart until a bucket first reached `fraction` of the pre-crash steady
    /// state (at that bucket's end); `None` if none did.
    pub fn time_to_fraction(&self, fraction: f64) -> Option<f64> {
        let target = self.steady_tx_s * fraction;
        self.series().into_iter().find(|&(_, tx)| tx >= target && tx > 0.0).map(|(t, _)| t)
    }

    /// Mean tx/s over the buckets after `open` returned.
    pub fn mean_after_open(&self) -> f64 {
        let w = self.bucket.as_secs_f64();
        let from = (self.open.as_secs_f64() / w).ceil() as usize;
        let tail = self.buckets.get(from..).unwrap_or(&[]);
        if tail.is_empty() {
            0.0
        } else {
            tail.iter().sum::<u64>() as f64 / (tail.len() as f64 * w)
        }
    }
}

fn spawn(
    launch: &dyn Fn(&ChildSpec) -> Command,
    spec: &ChildSpec,
) -> Result<(ChildGuard, BufReader<std::process::ChildStdout>), RestartError> {
    spawn_piped(launch(spec)).map_err(RestartError::Io)
}

/// The next protocol line (verb and the rest), `None` at end of file.
fn next_line(
    r: &mut BufReader<std::process::ChildStdout>,
) -> Result<Option<(String, String)>, RestartError> {
    let mut buf = String::new();
    loop {
        buf.clear();
        match r.read_line(&mut buf) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(RestartError::Io(format!("read the child: {e}"))),
        }
        let Some(pos) = buf.find(TAG) else { continue };
        let body = buf[pos + TAG.len()..].trim_end();
        let (verb, rest) = body.split_once(' ').unwrap_or((body, ""));
        if verb == "error" {
            return Err(RestartError::Child(rest.to_owned()));
        }
        return Ok(Some((verb.to_owned(), rest.to_owned())));
    }
}

fn protocol(what: impl fmt::Display) -> RestartError {
    RestartError::Child(format!("protocol: {what}"))
}

/// Runs one workload size with one configuration (module docs, steps 1–3), in a fresh
/// directory under `plan.dir` that is removed afterwards.
pub fn run_one_config(
    plan: &Plan,
    workload: RestartWorkload,
    config: &RestartConfig,
    launch: &dyn Fn(&ChildSpec) -> Command,
) -> Result<RunResult, RestartError> {
    let dir = plan.dir.join(format!("{}-{}", workload.tag(), config.name));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| RestartError::Io(format!("remove {}: {e}", dir.display())))?;
    }
    let res = run_in(plan, workload, config, launch, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    res
}

fn run_in(
    plan: &Plan,
    workload: RestartWorkload,
    config: &RestartConfig,
    launch: &dyn Fn(&ChildSpec) -> Command,
    dir: &Path,
) -> Result<RunResult, RestartError> {
    // 1. Load, then close.
    let load_start = Instant::now();
    {
        let w = workload.oltp(plan.seed, plan.threads);
        let setup = setup(w.as_ref());
        let subject = oltp::open_ferrite(options(config, &setup)?, dir, &setup, w.schema())?;
        w.load(subject.as_ref())?;
    }
    let load = load_start.elapsed();
    let spec = |role, window, min_txns| ChildSpec {
        role,
        dir: dir.to_path_buf(),
        workload,
        config: config.clone(),
        threads: plan.threads,
        seed: plan.seed,
        window,
        min_txns,
        bucket: plan.bucket,
    };
    // 2. The warm child, killed at steady state.
    let (mut guard, mut out) = spawn(launch, &spec(Role::Warm, plan.warm, plan.warm_txns))?;
    let (steady_tx_s, warm_commits) = match next_line(&mut out)? {
        Some((v, rest)) if v == "steady" => {
            let mut f = rest.split_whitespace();
            let tx: f64 = f.next().and_then(|x| x.parse().ok()).ok_or_else(|| protocol(&rest))?;
            let n: u64 = f.next().and_then(|x| x.parse().ok()).ok_or_else(|| protocol(&rest))?;
            (tx, n)
        }
        Some((v, rest)) => return Err(protocol(format!("warm child: {v} {rest}"))),
        None => {
            let status = guard.0.wait().map_err(|e| RestartError::Io(format!("wait: {e}")))?;
            return Err(RestartError::Child(format!(
                "the warm child ended before its steady state ({status}); its error is on \
                 stderr"
            )));
        }
    };
    guard.0.kill().map_err(|e| RestartError::Io(format!("SIGKILL: {e}")))?;
    let status = guard.0.wait().map_err(|e| RestartError::Io(format!("wait: {e}")))?;
    drop(guard);
    drop(out);
    let warm_signal = {
        use std::os::unix::process::ExitStatusExt as _;
        status.signal()
    };
    // 3. The measuring child.
    let (mut guard, mut out) = spawn(launch, &spec(Role::Measure, plan.after, plan.after_txns))?;
    let mut r = RunResult {
        workload,
        config: config.clone(),
        load,
        steady_tx_s,
        warm_commits,
        warm_signal,
        open: Duration::ZERO,
        first_commit: None,
        recovery: BTreeMap::new(),
        bucket: plan.bucket,
        buckets: Vec::new(),
        check: Err("no check reported".into()),
    };
    let ns = |s: &str| s.trim().parse::<u64>().map_err(|_| protocol(format!("number {s:?}")));
    let mut done = false;
    while let Some((verb, rest)) = next_line(&mut out)? {
        match verb.as_str() {
            "open" => r.open = Duration::from_nanos(ns(&rest)?),
            "recovery" => {
                for kv in rest.split_whitespace() {
                    let (k, v) = kv.split_once('=').ok_or_else(|| protocol(kv))?;
                    r.recovery.insert(k.to_owned(), ns(v)?);
                }
            }
            "first" if rest == "none" => r.first_commit = None,
            "first" => r.first_commit = Some(Duration::from_nanos(ns(&rest)?)),
            "bucket" => {
                let (i, c) = rest.split_once(' ').ok_or_else(|| protocol(&rest))?;
                if ns(i)? != r.buckets.len() as u64 {
                    return Err(protocol(format!("bucket {i} out of order")));
                }
                r.buckets.push(ns(c)?);
            }
            "check" => {
                r.check = match rest.split_once(' ').unwrap_or((&rest, "")) {
                    ("ok", s) => Ok(s.to_owned()),
                    (_, s) => Err(s.to_owned()),
                };
            }
            "done" => done = true,
            other => return Err(protocol(format!("measuring child: {other} {rest}"))),
        }
    }
    let status = guard.0.wait().map_err(|e| RestartError::Io(format!("wait: {e}")))?;
    drop(guard);
    if !done || !status.success() {
        return Err(RestartError::Child(format!(
            "the measuring child did not finish ({status}); its error is on stderr"
        )));
    }
    Ok(r)
}

/// Runs every workload size with every configuration, calling `progress` after each run.
pub fn run(
    plan: &Plan,
    launch: &dyn Fn(&ChildSpec) -> Command,
    progress: &mut dyn FnMut(&RunResult),
) -> Result<Vec<RunResult>, RestartError> {
    plan.validate()?;
    std::fs::create_dir_all(&plan.dir)
        .map_err(|e| RestartError::Io(format!("create {}: {e}", plan.dir.display())))?;
    let mut out = Vec::new();
    for &w in &plan.workloads {
        for c in &plan.configs {
            let r = run_one_config(plan, w, c, launch)?;
            progress(&r);
            out.push(r);
        }
    }
    Ok(out)
}

/// The CSV of `results`: `workload,size,config,seconds_since_restart,tx_per_s` (a row per
/// bucket; seconds at the bucket's end).
pub fn csv(results: &[RunResult]) -> String {
    let mut s = String::from("workload,size,config,seconds_since_restart,tx_per_s\n");
    for r in results {
        for (t, tx) in r.series() {
            s.push_str(&format!(
                "{},{},{},{t:.3},{tx:.1}\n",
                r.workload.name(),
                r.workload.tag(),
                r.config.name
            ));
        }
    }
    s
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The text summary of `results`.
pub fn summary(results: &[RunResult]) -> String {
    let mut s = String::new();
    for r in results {
        let rec = |k: &str| {
            r.recovery.get(k).map_or_else(|| "n/a".into(), |&v| ms(Duration::from_nanos(v)))
        };
        let t90 = r
            .time_to_fraction(0.9)
            .map_or_else(|| "not reached".to_owned(), |t| format!("{:.0} ms", t * 1e3));
        s.push_str(&format!(
            "{} {}, configuration {}:\n\
             \x20 load {:.1} s; pre-crash steady state {:.0} tx/s ({} commits at its report, \
             just before the kill; warm child ended by signal {})\n\
             \x20 time to open {} (recovery report: open {}, first transaction {}, index \
             rebuild {}; {} live rows, {} committed areas, {} rolled forward, {} undone)\n\
             \x20 time to first commit {}; time to 90 % of the pre-crash steady state {}; mean \
             after open {:.0} tx/s\n\
             \x20 check after the run: {}\n",
            r.workload.name(),
            r.workload.size(),
            r.config,
            r.load.as_secs_f64(),
            r.steady_tx_s,
            r.warm_commits,
            r.warm_signal.map_or_else(|| "none".into(), |x| x.to_string()),
            ms(r.open),
            rec("time_to_open_ns"),
            rec("time_to_first_transaction_ns"),
            rec("time_to_index_rebuild_ns"),
            r.recovery.get("live_rows").copied().unwrap_or(0),
            r.recovery.get("committed_areas").copied().unwrap_or(0),
            r.recovery.get("rolled_forward").copied().unwrap_or(0),
            r.recovery.get("undone").copied().unwrap_or(0),
            r.first_commit.map_or_else(|| "none".into(), ms),
            t90,
            r.mean_after_open(),
            match &r.check {
                Ok(x) => format!("ok ({x})"),
                Err(e) => format!("FAILED: {e}"),
            }
        ));
    }
    s
}

/// Writes `restart.csv`, `restart-summary.txt` and one SVG per workload size into `out`;
/// returns the files written.
pub fn write_outputs(
    results: &[RunResult],
    out: &Path,
    header: &str,
) -> Result<Vec<PathBuf>, RestartError> {
    let io = |p: &Path, e: std::io::Error| RestartError::Io(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let mut files = Vec::new();
    let p = out.join("restart.csv");
    std::fs::write(&p, csv(results)).map_err(|e| io(&p, e))?;
    files.push(p);
    let p = out.join("restart-summary.txt");
    std::fs::write(&p, format!("{header}{}", summary(results))).map_err(|e| io(&p, e))?;
    files.push(p);
    let mut tags: Vec<RestartWorkload> = Vec::new();
    for r in results {
        if !tags.contains(&r.workload) {
            tags.push(r.workload);
        }
    }
    for w in tags {
        let lines: Vec<crate::plot::RestartLine> = results
            .iter()
            .filter(|r| r.workload == w)
            .map(|r| crate::plot::RestartLine {
                name: r.config.name.clone(),
                points: r.series(),
                first_commit_s: r.first_commit.map(|d| d.as_secs_f64()),
                steady_tx_s: r.steady_tx_s,
            })
            .collect();
        let p = out.join(format!("restart-{}.svg", w.tag()));
        let title = format!("{} {}: throughput after SIGKILL and restart", w.name(), w.size());
        crate::plot::restart_plot(&p, &title, &lines).map_err(RestartError::Io)?;
        files.push(p);
    }
    Ok(files)
}

/// Parses a duration: `5s`, `100ms`, `250us`, or plain seconds (`0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, RestartError> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| {
        usage(format!("duration {s:?}: a number with an optional unit s, ms or us"))
    })?;
    let secs = v * scale;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(usage(format!("duration {s:?}: between 0 and 1 day")));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_parse_and_refuse_bad_settings() {
        let c = RestartConfig::parse("sync").unwrap();
        assert_eq!(c.name, "sync");
        assert!(c.settings.is_empty());
        let c = RestartConfig::parse("small=slots=8,alloc_slots=2,prefault=false").unwrap();
        let o = c.options(Options::new().pmem(ferrite::pmem::Options::new().prefault(true)));
        let o = o.unwrap();
        assert_eq!(o.sofort_config().slots, 8);
        assert!(!o.pmem_options().is_prefault());
        assert_eq!(RestartConfig::parse(&c.encode()).unwrap(), c);
        let o = RestartConfig::parse("adaptive").unwrap().options(Options::new()).unwrap();
        let want: ferrite::RecoveryStrategy = "rk.Qad.R2ad".parse().unwrap();
        assert_eq!(o.sofort_config().recovery_strategy, Some(want));
        let c = RestartConfig::parse("h=placement=hybrid,recovery=instant,recovery_threads=3");
        let o = c.unwrap().options(Options::new()).unwrap().sofort_config();
        assert_eq!(o.index_placement, ferrite::SofortIndexPlacement::Hybrid);
        assert_eq!((o.recovery, o.recovery_threads), (ferrite::RecoveryMode::Instant, 3));
        for bad in [
            "",
            "a b=",
            "nope",
            "x=slots",
            "x=slots=many",
            "x=color=red",
            "x=prefault=1",
            "x=recovery=lazy",
            "x=placement=disk",
            "x=strategy=rk.Q1",
            "x=strategy=!rk.Qad.R2ad",
        ] {
            assert!(
                matches!(RestartConfig::parse(bad), Err(RestartError::Usage(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn durations_and_specs_round_trip() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        for bad in ["", "x", "-1s", "1e9", "5m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        let spec = ChildSpec {
            role: Role::Measure,
            dir: "/dev/shm/x".into(),
            workload: RestartWorkload::Tpcc(TpccScale { warehouses: 2, items: 10, customers: 30 }),
            config: RestartConfig::parse("a=slots=4").unwrap(),
            threads: 2,
            seed: 7,
            window: Duration::from_millis(1500),
            min_txns: 3,
            bucket: Duration::from_millis(100),
        };
        assert_eq!(ChildSpec::decode(&spec.encode()).unwrap(), spec);
        let tatp = ChildSpec { workload: RestartWorkload::Tatp { subscribers: 9 }, ..spec };
        assert_eq!(ChildSpec::decode(&tatp.encode()).unwrap(), tatp);
    }

    #[test]
    fn series_and_time_to_fraction() {
        let r = RunResult {
            workload: RestartWorkload::Tatp { subscribers: 1 },
            config: RestartConfig::parse("sync").unwrap(),
            load: Duration::ZERO,
            steady_tx_s: 100.0,
            warm_commits: 1,
            warm_signal: Some(9),
            open: Duration::from_millis(150),
            first_commit: Some(Duration::from_millis(160)),
            recovery: BTreeMap::new(),
            bucket: Duration::from_millis(100),
            buckets: vec![0, 5, 8, 9, 10],
            check: Ok(String::new()),
        };
        let s = r.series();
        assert_eq!(s.len(), 5);
        assert!((s[1].0 - 0.2).abs() < 1e-9 && (s[1].1 - 50.0).abs() < 1e-9);
        assert_eq!(r.time_to_fraction(0.9).map(|t| (t * 10.0).round()), Some(4.0));
        assert_eq!(r.time_to_fraction(1.5), None);
        // Buckets from the one after open returned: 8, 9, 10 per 0.1 s.
        assert!((r.mean_after_open() - 90.0).abs() < 1e-9);
        let csv = csv(&[r]);
        assert_eq!(csv.lines().count(), 6);
        assert!(csv.lines().nth(1).unwrap().starts_with("tatp,tatp-1,sync,0.100,0.0"));
    }
}
