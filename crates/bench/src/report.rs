//! Results and reports: one [`PointResult`] per point; the human table (with a ratio column
//! against a reference engine), JSON and CSV files; and the shape check the smoke tests use
//! (every series has every point).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::spec::{Point, RunSpec, Stop, Warmup};
use crate::subject::{EngineId, SubjectInfo};
use crate::workload::{Check, WorkloadId};

/// Everything measured at one point, with the effective configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointResult {
    /// Workload name.
    pub workload: String,
    /// Workload parameters.
    pub workload_params: BTreeMap<String, String>,
    /// Engine registry name.
    pub engine: String,
    /// Engine label.
    pub label: String,
    /// `ferrite` or `baseline`.
    pub family: String,
    /// Whether committed data survives the process.
    pub persistent: bool,
    /// Short durability label.
    pub durability: String,
    /// Worker threads.
    pub threads: usize,
    /// Injected latency, ns (0 for baselines).
    pub latency_ns: u64,
    /// How it was injected (`barrier`/`line`), or `none` for baselines.
    pub latency_model: String,
    /// Emulated latency per block-file sync, µs (`--sync-latency-us`; engines on the paged
    /// file store only, 0 for every other).
    #[serde(default)]
    pub sync_latency_us: u64,
    /// Committed transactions in the timed phase.
    pub txns: u64,
    /// Operations in them.
    pub ops: u64,
    /// Timed phase, seconds (longest worker).
    pub seconds: f64,
    /// Transactions per second.
    pub tx_per_s: f64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Throughput of every run of the point (`--repeat`); the reported run is the median.
    #[serde(default)]
    pub tx_per_s_runs: Vec<f64>,
    /// Throughput relative to the reference row of the same workload and thread count.
    pub ratio: Option<f64>,
    /// Latency percentiles and extremes, µs.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Attempts that failed with a conflict and were run again.
    pub aborts: u64,
    /// Attempts refused because the engine admits one writer at a time and another was open
    /// (`Busy`), run again after a back-off; not counted in `aborts`.
    #[serde(default)]
    pub busy: u64,
    /// Latency, aborts and busy retries per transaction type of the workload (one entry for single-type
    /// workloads).
    #[serde(default)]
    pub txn_types: Vec<TxnTypeResult>,
    /// Lines flushed per transaction (Ferrite engines; `None` = n/a).
    pub flushes_per_tx: Option<f64>,
    /// Fences per transaction.
    pub fences_per_tx: Option<f64>,
    /// Block-file syncs per transaction (`Counters::syncs`: 0 for engines that keep no block
    /// file).
    #[serde(default)]
    pub syncs_per_tx: Option<f64>,
    /// Bytes stored to PM per transaction (ordinary + non-temporal).
    pub bytes_per_tx: Option<f64>,
    /// Injected latency per transaction, ns.
    pub injected_ns_per_tx: Option<f64>,
    /// Time inside the engine's commit protocol per transaction, µs (engines that report it:
    /// the paged engine, `Counters::commit_ns`).
    #[serde(default)]
    pub commit_us_per_tx: Option<f64>,
    /// Loading time, seconds (untimed).
    pub load_seconds: f64,
    /// The workload's consistency checks.
    pub checks: Vec<Check>,
    /// Remarks.
    pub notes: Vec<String>,
    /// Why the point failed, if it did.
    pub error: Option<String>,
    /// Effective configuration: engine settings, library versions, durability, medium, flush
    /// instruction, injected latency.
    pub config: BTreeMap<String, String>,
}

impl PointResult {
    /// An empty result for point `p` of `spec`.
    pub fn new(p: &Point, spec: &RunSpec, workload_params: BTreeMap<String, String>) -> Self {
        let ferrite = p.engine.family() == crate::subject::Family::Ferrite;
        PointResult {
            workload: p.workload.name(),
            workload_params,
            engine: p.engine.name(),
            label: p.engine.name(),
            family: if ferrite { "ferrite".into() } else { "baseline".into() },
            persistent: false,
            durability: String::new(),
            threads: p.threads,
            latency_ns: p.latency_ns,
            latency_model: if ferrite { spec.latency_model.name().into() } else { "none".into() },
            sync_latency_us: spec.sync_latency_us_of(p.engine),
            txns: 0,
            ops: 0,
            seconds: 0.0,
            tx_per_s: 0.0,
            ops_per_s: 0.0,
            tx_per_s_runs: Vec::new(),
            ratio: None,
            p50_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
            max_us: 0.0,
            mean_us: 0.0,
            aborts: 0,
            busy: 0,
            txn_types: Vec::new(),
            flushes_per_tx: None,
            fences_per_tx: None,
            syncs_per_tx: None,
            bytes_per_tx: None,
            injected_ns_per_tx: None,
            commit_us_per_tx: None,
            load_seconds: 0.0,
            checks: Vec::new(),
            notes: Vec::new(),
            error: None,
            config: BTreeMap::new(),
        }
    }

    /// Takes label, durability and configuration from the opened subject.
    pub fn set_subject(&mut self, info: &SubjectInfo) {
        self.label = info.label.clone();
        self.persistent = info.persistent;
        self.durability = info.durability_short.clone();
        self.config = info.config.clone();
        self.config.insert("durability".into(), info.durability.clone());
    }

    /// Whether it ran and every check held.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.checks.iter().all(|c| c.ok)
    }
}

/// The timed phase of one transaction type at one point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TxnTypeResult {
    /// The workload's name for the type.
    pub name: String,
    /// Committed transactions of the type.
    pub txns: u64,
    /// Attempts of the type that failed with a conflict and were run again.
    pub aborts: u64,
    /// Attempts of the type refused as busy and run again.
    #[serde(default)]
    pub busy: u64,
    /// Latency percentiles, µs, from the first attempt to the commit.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
}

/// A whole run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// When (UTC).
    pub date: String,
    /// Where.
    pub machine: Machine,
    /// The command line.
    pub command: String,
    /// Build profile remark (`release`, or a warning).
    pub build: String,
    /// Run-wide settings (duration, scale, medium, ...).
    pub settings: BTreeMap<String, String>,
    /// Engine the ratio column compares with.
    pub ratio_to: Option<String>,
    /// The points.
    pub results: Vec<PointResult>,
}

impl Report {
    /// Fills in the ratio of every result against the `ratio_to` row of the same workload and
    /// thread count at zero injected latency.
    pub fn compute_ratios(&mut self) {
        let Some(reference) = self.ratio_to.clone() else { return };
        let refs: BTreeMap<(String, usize), f64> = self
            .results
            .iter()
            .filter(|r| r.engine == reference && r.latency_ns == 0 && r.error.is_none())
            .map(|r| ((r.workload.clone(), r.threads), r.tx_per_s))
            .collect();
        for r in &mut self.results {
            r.ratio = refs
                .get(&(r.workload.clone(), r.threads))
                .filter(|&&v| v > 0.0 && r.error.is_none())
                .map(|v| r.tx_per_s / v);
        }
    }

    /// Writes `results.json` and `results.csv` into `dir` (created).
    pub fn write_files(
        &self,
        dir: &Path,
    ) -> std::io::Result<(std::path::PathBuf, std::path::PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("results.json");
        std::fs::write(&json, serde_json::to_string_pretty(self).map_err(std::io::Error::other)?)?;
        let csv = dir.join("results.csv");
        write_csv(&self.results, &csv)?;
        Ok((json, csv))
    }
}

/// One CSV row (flat; `n/a` where a figure does not apply).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CsvRow {
    /// Workload.
    pub workload: String,
    /// Engine name.
    pub engine: String,
    /// Engine label.
    pub label: String,
    /// `ferrite` / `baseline`.
    pub family: String,
    /// Persistent?
    pub persistent: bool,
    /// Durability label.
    pub durability: String,
    /// Threads.
    pub threads: usize,
    /// Injected latency, ns.
    pub latency_ns: u64,
    /// Latency model.
    pub latency_model: String,
    /// Emulated latency per block-file sync, µs (file-store engines; 0 for every other, and in
    /// files written before the column existed).
    #[serde(default)]
    pub sync_latency_us: u64,
    /// Transactions.
    pub txns: u64,
    /// Operations.
    pub ops: u64,
    /// Seconds.
    pub seconds: f64,
    /// Transactions/s.
    pub tx_per_s: f64,
    /// Operations/s.
    pub ops_per_s: f64,
    /// Ratio to the reference row (`n/a` if none).
    pub ratio: String,
    /// p50 µs.
    pub p50_us: f64,
    /// p99 µs.
    pub p99_us: f64,
    /// p99.9 µs.
    pub p999_us: f64,
    /// max µs.
    pub max_us: f64,
    /// Aborts (conflicts).
    pub aborts: u64,
    /// Busy retries (absent in files written before the column existed).
    #[serde(default)]
    pub busy: u64,
    /// Flushes per transaction, or `n/a`.
    pub flushes_per_tx: String,
    /// Fences per transaction, or `n/a`.
    pub fences_per_tx: String,
    /// Block-file syncs per transaction, or `n/a` (absent in older files).
    #[serde(default = "not_available")]
    pub syncs_per_tx: String,
    /// Bytes per transaction, or `n/a`.
    pub bytes_per_tx: String,
    /// µs inside the commit protocol per transaction, or `n/a` (absent in older files).
    #[serde(default = "not_available")]
    pub commit_us_per_tx: String,
    /// `ok`, `FAILED` or `error`.
    pub checks: String,
    /// Workload parameters, `k=v;k=v`.
    pub params: String,
}

fn not_available() -> String {
    "n/a".into()
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
}

impl CsvRow {
    fn from(r: &PointResult) -> Self {
        CsvRow {
            workload: r.workload.clone(),
            engine: r.engine.clone(),
            label: r.label.clone(),
            family: r.family.clone(),
            persistent: r.persistent,
            durability: r.durability.clone(),
            threads: r.threads,
            latency_ns: r.latency_ns,
            latency_model: r.latency_model.clone(),
            sync_latency_us: r.sync_latency_us,
            txns: r.txns,
            ops: r.ops,
            seconds: r.seconds,
            tx_per_s: r.tx_per_s,
            ops_per_s: r.ops_per_s,
            ratio: opt(r.ratio, 4),
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            p999_us: r.p999_us,
            max_us: r.max_us,
            aborts: r.aborts,
            busy: r.busy,
            flushes_per_tx: opt(r.flushes_per_tx, 3),
            fences_per_tx: opt(r.fences_per_tx, 3),
            syncs_per_tx: opt(r.syncs_per_tx, 3),
            bytes_per_tx: opt(r.bytes_per_tx, 1),
            commit_us_per_tx: opt(r.commit_us_per_tx, 3),
            checks: if r.error.is_some() {
                "error".into()
            } else if r.ok() {
                "ok".into()
            } else {
                "FAILED".into()
            },
            params: r
                .workload_params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(";"),
        }
    }
}

/// Writes the results as CSV.
pub fn write_csv(results: &[PointResult], path: &Path) -> std::io::Result<()> {
    let mut w = csv::Writer::from_path(path).map_err(std::io::Error::other)?;
    for r in results {
        w.serialize(CsvRow::from(r)).map_err(std::io::Error::other)?;
    }
    w.flush()
}

/// Reads a CSV written by [`write_csv`].
pub fn read_csv(path: &Path) -> Result<Vec<CsvRow>, String> {
    let mut rd = csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    rd.deserialize()
        .collect::<Result<Vec<CsvRow>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Human-friendly throughput: `46.6K`, `1.23M`.
pub fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else if v >= 1e3 {
        format!("{:.2}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Throughput cell: the figure, and with several runs the half-range around it
/// (`332.4K ±4%`).
fn throughput(r: &PointResult) -> String {
    let runs = &r.tx_per_s_runs;
    if runs.len() > 1 && r.tx_per_s > 0.0 {
        let (lo, hi) = runs.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        format!("{} ±{:.0}%", si(r.tx_per_s), (hi - lo) / 2.0 / r.tx_per_s * 100.0)
    } else {
        si(r.tx_per_s)
    }
}

fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Renders rows as an aligned text table (first row is the header).
pub fn render_table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = widths[c] - s.chars().count();
                // Text columns left-aligned, numbers right-aligned.
                if c < 3 {
                    format!("{s}{}", " ".repeat(pad))
                } else {
                    format!("{}{s}", " ".repeat(pad))
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    out
}

/// The side-by-side table of a report.
pub fn table(report: &Report) -> String {
    let sweep = report.results.iter().any(|r| r.latency_ns != 0);
    let ratio_head = match &report.ratio_to {
        Some(r) => format!("x {r}"),
        None => "ratio".into(),
    };
    let mut rows = vec![
        [
            "workload",
            "engine",
            "durability",
            "thr",
            "inj ns",
            "tx/s",
            &ratio_head,
            "p50 us",
            "p99 us",
            "p99.9 us",
            "aborts",
            "busy",
            "flush/tx",
            "fence/tx",
            "B/tx",
            "checks",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect::<Vec<_>>(),
    ];
    let mut last_group: Option<(String, usize)> = None;
    for r in &report.results {
        let group = (r.workload.clone(), r.threads);
        if last_group.as_ref().is_some_and(|g| *g != group) {
            rows.push(Vec::new());
        }
        last_group = Some(group);
        let inj = if r.family == "baseline" && sweep {
            "0 (baseline)".to_owned()
        } else {
            r.latency_ns.to_string()
        };
        if let Some(e) = &r.error {
            rows.push(vec![
                r.workload.clone(),
                r.label.clone(),
                r.durability.clone(),
                r.threads.to_string(),
                inj,
                format!("ERROR: {e}"),
            ]);
            continue;
        }
        let ratio = match (r.ratio, &report.ratio_to) {
            (Some(_), Some(reference)) if *reference == r.engine && r.latency_ns == 0 => {
                "1 (ref)".into()
            }
            (Some(x), _) if x >= 10.0 => format!("{x:.1}"),
            (Some(x), _) => format!("{x:.2}"),
            (None, _) => "n/a".into(),
        };
        rows.push(vec![
            r.workload.clone(),
            r.label.clone(),
            r.durability.clone(),
            r.threads.to_string(),
            inj,
            throughput(r),
            ratio,
            us(r.p50_us),
            us(r.p99_us),
            us(r.p999_us),
            r.aborts.to_string(),
            r.busy.to_string(),
            opt(r.flushes_per_tx, 1),
            opt(r.fences_per_tx, 1),
            opt(r.bytes_per_tx, 0),
            if r.ok() { "ok".into() } else { "FAILED".into() },
        ]);
    }
    render_table(&rows)
}

/// The per-transaction-type table of the points whose workload has more than one type (TATP,
/// TPC-C): committed transactions, their share of the point, latency percentiles, aborts and
/// busy retries per type. `None` when no point has types.
pub fn types_table(report: &Report) -> Option<String> {
    let mut rows = vec![
        [
            "workload", "engine", "thr", "inj ns", "type", "txns", "share", "p50 us", "p99 us",
            "p99.9 us", "aborts", "busy",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect::<Vec<_>>(),
    ];
    let mut any = false;
    for r in report.results.iter().filter(|r| r.error.is_none() && r.txn_types.len() > 1) {
        if any {
            rows.push(Vec::new());
        }
        any = true;
        let total: u64 = r.txn_types.iter().map(|t| t.txns).sum();
        for t in &r.txn_types {
            let share = if total == 0 { 0.0 } else { 100.0 * t.txns as f64 / total as f64 };
            rows.push(vec![
                r.workload.clone(),
                r.label.clone(),
                r.threads.to_string(),
                r.latency_ns.to_string(),
                t.name.clone(),
                t.txns.to_string(),
                format!("{share:.1}%"),
                us(t.p50_us),
                us(t.p99_us),
                us(t.p999_us),
                t.aborts.to_string(),
                t.busy.to_string(),
            ]);
        }
    }
    any.then(|| render_table(&rows))
}

/// Everything printed after a run: header, table, engine configurations, checks.
pub fn summary(report: &Report) -> String {
    let mut s = String::new();
    let m = &report.machine;
    let _ = writeln!(s, "Ferrite bench, {} UTC", report.date);
    let _ = writeln!(
        s,
        "Machine: {}, {} logical cores, {} RAM, Linux {}",
        m.cpu, m.cores, m.memory, m.kernel
    );
    let _ = writeln!(s, "Build: {}", report.build);
    for (k, v) in &report.settings {
        let _ = writeln!(s, "{k}: {v}");
    }
    let _ = writeln!(s);
    s.push_str(&table(report));
    let _ = writeln!(s);
    if let Some(t) = types_table(report) {
        let _ = writeln!(s, "Per transaction type (latency from the first attempt to the commit):");
        s.push_str(&t);
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "Engines (effective configuration; full detail in results.json):");
    let mut seen = BTreeSet::new();
    for r in &report.results {
        if r.error.is_some() && r.config.is_empty() || !seen.insert(r.engine.clone()) {
            continue;
        }
        let _ = writeln!(
            s,
            "  {} [{}]: {}",
            r.label,
            r.engine,
            r.config.get("durability").map_or("", String::as_str)
        );
        for (k, v) in &r.config {
            if k == "durability" || k == "compile_options" {
                continue;
            }
            let _ = writeln!(s, "      {k}: {v}");
        }
    }
    let _ = writeln!(s);
    let failed: Vec<&PointResult> = report.results.iter().filter(|r| !r.ok()).collect();
    if failed.is_empty() {
        let _ = writeln!(
            s,
            "Checks: all {} points passed their workload consistency checks.",
            report.results.len()
        );
    } else {
        let _ = writeln!(s, "Checks: {} of {} points FAILED:", failed.len(), report.results.len());
        for r in failed {
            let what: Vec<String> = match &r.error {
                Some(e) => vec![e.clone()],
                None => r
                    .checks
                    .iter()
                    .filter(|c| !c.ok)
                    .map(|c| format!("{}: {}", c.name, c.detail))
                    .collect(),
            };
            let _ =
                writeln!(s, "  {} {} t{}: {}", r.workload, r.engine, r.threads, what.join("; "));
        }
    }
    let notes: BTreeSet<String> = report
        .results
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("{} {}: {n}", r.workload, r.engine)))
        .collect();
    for n in notes {
        let _ = writeln!(s, "Note: {n}");
    }
    s
}

/// Checks the shape of a run's output against its spec: every expected point is present
/// exactly once and ran, every series (an engine's points over threads, and a Ferrite engine's
/// over latencies) has every point, figures are finite, baselines carry no pmem counters and
/// Ferrite engines do, and the CSV and JSON files (if given) hold the same rows. Returns the
/// problems found.
pub fn shape_problems(
    spec: &RunSpec,
    report: &Report,
    files: Option<(&Path, &Path)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let expected = spec.points();
    let key = |w: &str, e: &str, t: usize, l: u64| format!("{w}/{e}/t{t}/{l}ns");
    let mut have: BTreeMap<String, usize> = BTreeMap::new();
    for r in &report.results {
        *have.entry(key(&r.workload, &r.engine, r.threads, r.latency_ns)).or_default() += 1;
    }
    for p in &expected {
        let k = key(&p.workload.name(), &p.engine.name(), p.threads, p.latency_ns);
        match have.get(&k) {
            Some(1) => {}
            Some(n) => problems.push(format!("point {k} appears {n} times")),
            None => problems.push(format!("series point {k} is missing")),
        }
    }
    if report.results.len() != expected.len() {
        problems.push(format!("{} results for {} points", report.results.len(), expected.len()));
    }
    for r in &report.results {
        let k = key(&r.workload, &r.engine, r.threads, r.latency_ns);
        if let Some(e) = &r.error {
            problems.push(format!("{k}: error {e}"));
            continue;
        }
        if r.txns == 0 {
            problems.push(format!("{k}: no transaction measured"));
        }
        let figures = [r.tx_per_s, r.ops_per_s, r.seconds, r.p50_us, r.p99_us, r.p999_us, r.max_us];
        if figures.iter().any(|v| !v.is_finite() || *v < 0.0)
            || !(r.p50_us <= r.p99_us && r.p99_us <= r.p999_us && r.p999_us <= r.max_us)
        {
            problems.push(format!("{k}: figures out of shape {figures:?}"));
        }
        let counters = [r.flushes_per_tx, r.fences_per_tx, r.syncs_per_tx, r.bytes_per_tx];
        match r.family.as_str() {
            "baseline" if counters.iter().any(Option::is_some) => {
                problems.push(format!("{k}: a baseline carries pmem counters"))
            }
            "ferrite" if counters.iter().any(Option::is_none) => {
                problems.push(format!("{k}: a Ferrite engine lacks pmem counters"))
            }
            _ => {}
        }
        if r.family == "baseline" && r.latency_ns != 0 {
            problems.push(format!("{k}: a baseline with injected latency"));
        }
        if r.sync_latency_us != 0
            && !EngineId::parse(&r.engine).is_ok_and(|e| matches!(e, EngineId::PagedFile(_)))
        {
            problems.push(format!("{k}: a sync latency on an engine not on the file store"));
        }
        if r.config.get("durability").is_none_or(String::is_empty) {
            problems.push(format!("{k}: no durability in the configuration"));
        }
        if r.checks.is_empty() {
            problems.push(format!("{k}: no consistency check ran"));
        }
        for c in r.checks.iter().filter(|c| !c.ok) {
            problems.push(format!("{k}: check failed: {}: {}", c.name, c.detail));
        }
        let engine = EngineId::parse(&r.engine);
        if engine.is_ok_and(|e| matches!(e, EngineId::Ferrite(k) if !k.is_persistent()))
            && !r.durability.contains("non-persistent")
        {
            problems.push(format!("{k}: a non-persistent engine not labelled as such"));
        }
    }
    if let Some((json, csv)) = files {
        match read_csv(csv) {
            Ok(rows) => {
                let want: Vec<CsvRow> = report.results.iter().map(CsvRow::from).collect();
                if rows.len() != want.len() {
                    problems.push(format!("CSV has {} rows, expected {}", rows.len(), want.len()));
                }
                for (a, b) in rows.iter().zip(&want) {
                    if (a.workload.as_str(), a.engine.as_str(), a.threads, a.latency_ns)
                        != (b.workload.as_str(), b.engine.as_str(), b.threads, b.latency_ns)
                    {
                        problems.push(format!("CSV row {}/{} out of order", a.workload, a.engine));
                    }
                    if a.family == "baseline"
                        && (a.flushes_per_tx != "n/a"
                            || a.fences_per_tx != "n/a"
                            || a.syncs_per_tx != "n/a")
                    {
                        problems.push(format!("CSV: baseline {} prints counters", a.engine));
                    }
                }
            }
            Err(e) => problems.push(format!("CSV unreadable: {e}")),
        }
        match std::fs::read_to_string(json)
            .map_err(|e| e.to_string())
            .and_then(|s| serde_json::from_str::<Report>(&s).map_err(|e| e.to_string()))
        {
            Ok(r) if r.results.len() == report.results.len() => {}
            Ok(r) => problems.push(format!(
                "JSON has {} results, expected {}",
                r.results.len(),
                report.results.len()
            )),
            Err(e) => problems.push(format!("JSON unreadable: {e}")),
        }
    }
    problems
}

/// Run-wide settings as printed and stored.
pub fn settings_of(spec: &RunSpec, medium: &str) -> BTreeMap<String, String> {
    let mut stop = match spec.stop {
        Stop::Duration(d) => format!("{:.1} s per point", d.as_secs_f64()),
        Stop::Txns(n) => format!("{n} transactions per point"),
    };
    if spec.repeat > 1 {
        stop.push_str(&format!(
            ", {} runs per point (fresh database each; the median run is shown, ± is half the \
             range of the runs)",
            spec.repeat
        ));
    }
    let warm = match spec.warmup {
        Warmup::Duration(d) => format!("{:.1} s", d.as_secs_f64()),
        Warmup::Txns(n) => format!("{n} transactions"),
    };
    let mut data = String::new();
    if spec.workloads.iter().any(|w| matches!(w, WorkloadId::Micro(..) | WorkloadId::Ycsb(_))) {
        data = format!(
            "key-value workloads: scale {} records, {}-byte values, 8-byte keys, {} (θ={}), \
             seed {}",
            spec.scale,
            spec.value_size,
            spec.distribution.name(),
            spec.theta,
            spec.seed
        );
    }
    for w in &spec.workloads {
        if let WorkloadId::Tpcb(sc) = w {
            if !data.is_empty() {
                data.push_str("; ");
            }
            data.push_str(&format!(
                "tpcb: {} branches, 10 tellers and {} accounts per branch, seed {}",
                sc.branches, sc.accounts_per_branch, spec.seed
            ));
        }
        if let WorkloadId::Tatp(n) = w {
            if !data.is_empty() {
                data.push_str("; ");
            }
            data.push_str(&format!("tatp: {n} subscribers, seed {}", spec.seed));
        }
        if let WorkloadId::Tpcc(sc) = w {
            if !data.is_empty() {
                data.push_str("; ");
            }
            data.push_str(&format!(
                "tpcc: {} warehouses, {} items, {} customers per district, seed {}",
                sc.warehouses, sc.items, sc.customers, spec.seed
            ));
        }
    }
    let mut settings = BTreeMap::from([
        (
            "Timed phase".into(),
            format!("{stop} after a warm-up of {warm} (loading untimed, separate session)"),
        ),
        ("Data".into(), data),
        ("Medium".into(), medium.to_owned()),
        (
            "Injected latency".into(),
            format!(
                "{} ns per {} (Ferrite engines only; baselines run at 0)",
                spec.latencies.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
                if spec.latency_model == crate::subject::LatencyModel::Barrier {
                    "persist barrier"
                } else {
                    "flushed line"
                }
            ),
        ),
    ]);
    if spec.has_file_store() || spec.sync_latency_us != 0 {
        settings.insert(
            "Injected sync latency".into(),
            format!(
                "{} µs per block-file sync, after each fdatasync (engines on the paged file \
                 store only: paged-*-file; column sync_latency_us)",
                spec.sync_latency_us
            ),
        );
    }
    settings
}
