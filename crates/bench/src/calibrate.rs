//! Calibration against the anchors of conventions §6: the single-insert workload (`insert1`:
//! one 8-byte-key, 100-byte-value insert per transaction, one thread, tmpfs) on every
//! baseline, and the two persistence primitives measured through `ferrite-pmem`. Each figure is
//! printed next to its anchor; a row more than 25 % worse is flagged (and must be explained or
//! fixed, conventions §6).
//!
//! The anchors are the project's reference figures for its 2-core machines, not results: they
//! are what a measured figure is compared with, never printed as a measurement.

use std::sync::atomic::Ordering;
use std::time::Instant;

use ferrite::pmem::{Options, Pool};

use crate::report::{PointResult, render_table, si};

/// One anchor of conventions §6.
#[derive(Clone, Copy, Debug)]
pub struct Anchor {
    /// Engine registry name, or the primitive.
    pub what: &'static str,
    /// The figure.
    pub value: f64,
    /// `tx/s` (higher is better) or `ns` (lower is better).
    pub unit: &'static str,
}

/// Baseline anchors (single thread, one insert per transaction, tmpfs), tx/s.
pub const BASELINE_ANCHORS: [Anchor; 5] = [
    Anchor { what: "sqlite-wal-full", value: 46_600.0, unit: "tx/s" },
    Anchor { what: "sqlite-wal-normal", value: 53_000.0, unit: "tx/s" },
    Anchor { what: "sqlite-journal-full", value: 15_500.0, unit: "tx/s" },
    Anchor { what: "lmdb", value: 121_000.0, unit: "tx/s" },
    Anchor { what: "pmdk", value: 483_000.0, unit: "tx/s" },
];

/// Primitive anchors, ns.
pub const PRIMITIVE_ANCHORS: [Anchor; 2] = [
    Anchor { what: "one store+clwb+sfence", value: 160.0, unit: "ns" },
    Anchor { what: "two persist barriers", value: 330.0, unit: "ns" },
];

/// A measured figure next to its anchor.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CalibrationRow {
    /// What.
    pub what: String,
    /// Measured.
    pub measured: f64,
    /// Anchor.
    pub anchor: f64,
    /// Unit.
    pub unit: String,
    /// Measured over anchor for tx/s, anchor over measured for ns (so > 1 is better).
    pub relative: f64,
    /// More than 25 % worse than the anchor.
    pub flagged: bool,
}

fn row(a: &Anchor, measured: f64) -> CalibrationRow {
    let relative = if a.unit == "ns" { a.value / measured } else { measured / a.value };
    CalibrationRow {
        what: a.what.into(),
        measured,
        anchor: a.value,
        unit: a.unit.into(),
        relative,
        // NaN (nothing measured) is flagged too.
        flagged: relative.is_nan() || relative < 0.75,
    }
}

/// Rows for the baselines that ran (from `insert1` results).
pub fn baseline_rows(results: &[PointResult]) -> Vec<CalibrationRow> {
    BASELINE_ANCHORS
        .iter()
        .filter_map(|a| {
            results
                .iter()
                .find(|r| r.engine == a.what && r.workload == "insert1" && r.error.is_none())
                .map(|r| row(a, r.tx_per_s))
        })
        .collect()
}

/// Measures the two primitives on a pool in `dir` (mean of `iters` iterations each): one
/// 8-byte store + flush of its line + fence; two of those to different lines.
pub fn primitive_rows(dir: &std::path::Path, iters: u64) -> Result<Vec<CalibrationRow>, String> {
    let opts = Options::default();
    let pool =
        Pool::create(dir.join("calibrate.pool"), 8 << 20, &opts).map_err(|e| e.to_string())?;
    pool.fill(0, pool.size(), 0).map_err(|e| e.to_string())?;
    let lines = 4096u64;
    let one = |i: u64| -> Result<(), String> {
        let off = (i % lines) * 64;
        pool.store_u64(off, i, Ordering::Relaxed).map_err(|e| e.to_string())?;
        pool.persist(off, 8).map_err(|e| e.to_string()) // ORDER(P-APP-2): the measured barrier; orders nothing
    };
    for i in 0..iters / 10 {
        one(i)?;
    }
    let t = Instant::now();
    for i in 0..iters {
        one(i)?;
    }
    let single = t.elapsed().as_nanos() as f64 / iters as f64;
    let t = Instant::now();
    for i in 0..iters {
        one(2 * i)?;
        one(2 * i + 1)?;
    }
    let double = t.elapsed().as_nanos() as f64 / iters as f64;
    drop(pool);
    let _ = std::fs::remove_file(dir.join("calibrate.pool"));
    Ok(vec![row(&PRIMITIVE_ANCHORS[0], single), row(&PRIMITIVE_ANCHORS[1], double)])
}

/// The PMDK anchor's own transaction (allocate a 100-byte value, point an undo-logged array
/// slot at it; no index) run `n` times through the shim on a fresh pool in `dir`: what the
/// anchor measures, next to the `insert1` row (which adds a B+-tree insert of a random key).
#[cfg(feature = "pmdk")]
pub fn pmdk_raw_row(dir: &std::path::Path, n: u64) -> Result<Option<CalibrationRow>, String> {
    use ferrite_baselines::pmdk::{Pmdk, PmdkConfig};
    let path = dir.join("calibrate-pmdk.pool");
    let db = Pmdk::create(&path, &PmdkConfig { pool_size: n * 200 + (64 << 20) }, &["t"])
        .map_err(|e| e.to_string())?;
    let took = db.raw_alloc_slot(n, 100).map_err(|e| e.to_string())?;
    drop(db);
    let _ = std::fs::remove_file(&path);
    let anchor =
        Anchor { what: "pmdk raw txn: alloc + slot update, no index", ..BASELINE_ANCHORS[4] };
    Ok(Some(row(&anchor, n as f64 / took.as_secs_f64())))
}

/// Without the `pmdk` feature there is no PMDK row.
#[cfg(not(feature = "pmdk"))]
pub fn pmdk_raw_row(_dir: &std::path::Path, _n: u64) -> Result<Option<CalibrationRow>, String> {
    Ok(None)
}

/// The calibration table.
pub fn table(rows: &[CalibrationRow]) -> String {
    let mut t = vec![vec![
        "what".to_owned(),
        "measured".into(),
        "anchor (conventions §6)".into(),
        "measured/anchor".into(),
        "flag".into(),
    ]];
    for r in rows {
        let fmt =
            |v: f64| if r.unit == "ns" { format!("{v:.0} ns") } else { format!("{} tx/s", si(v)) };
        let ratio = if r.unit == "ns" { r.measured / r.anchor } else { r.relative };
        t.push(vec![
            r.what.clone(),
            fmt(r.measured),
            fmt(r.anchor),
            format!("{ratio:.2}"),
            if r.flagged { "LOW: more than 25% worse than the anchor".into() } else { "ok".into() },
        ]);
    }
    render_table(&t)
}
