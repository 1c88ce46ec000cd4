//! SVG plots (plotters) of thread and latency sweeps, drawn from a results CSV
//! ([`crate::report::write_csv`]), so a CSV can be re-plotted later (`--plot FILE`).
//!
//! Per workload: `<workload>-threads.svg` (transactions/s over thread counts, one line per
//! engine and injected latency) when the run had more than one thread count, and
//! `<workload>-latency.svg` (transactions/s of Ferrite engines over injected latency, one line
//! per engine and thread count; baselines as dashed horizontal lines at their 0 ns figure,
//! labelled "baseline, 0 ns") when it had more than one latency, with `<workload>-p99-latency.svg`
//! beside it (p99 transaction latency in µs over injected latency, the same lines). The x axis
//! names the latency model (per barrier or per flushed line) when the run used one.
//!
//! Across workloads: when the run had a micro-benchmark at more than one size (`insert1`,
//! `insert8`, …, `insert512`), `<kind>-per-txn-flushes.svg` (lines flushed per transaction
//! over operations per transaction, log–log, one line per Ferrite engine at one thread and no
//! injected latency; baselines have no counts) and `<kind>-per-txn-throughput.svg`
//! (operations/s over operations per transaction, log–log, every engine), as the FAST paper's
//! Figure 10.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::report::{CsvRow, read_csv, si};

type Series = Vec<(String, Vec<(f64, f64)>, bool)>;

/// Draws every plot the CSV supports into `out_dir`; returns the files written.
pub fn plots_from_csv(csv: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rows = read_csv(csv)?;
    plots_from_rows(&rows, out_dir)
}

/// As [`plots_from_csv`], from rows already read.
pub fn plots_from_rows(rows: &[CsvRow], out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let rows: Vec<&CsvRow> = rows.iter().filter(|r| r.checks != "error").collect();
    let mut workloads: Vec<&str> = Vec::new();
    for r in &rows {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let mut files = Vec::new();
    for w in workloads {
        let mine: Vec<&&CsvRow> = rows.iter().filter(|r| r.workload == w).collect();
        let mut threads: Vec<usize> = mine.iter().map(|r| r.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        let mut lats: Vec<u64> =
            mine.iter().filter(|r| r.family == "ferrite").map(|r| r.latency_ns).collect();
        lats.sort_unstable();
        lats.dedup();

        if threads.len() > 1 {
            let mut by: BTreeMap<(String, u64), Vec<(f64, f64)>> = BTreeMap::new();
            for r in &mine {
                by.entry((r.label.clone(), r.latency_ns))
                    .or_default()
                    .push((r.threads as f64, r.tx_per_s));
            }
            let series: Series = by
                .into_iter()
                .map(|((label, lat), mut pts)| {
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let name = if lat == 0 { label } else { format!("{label} +{lat} ns") };
                    (name, pts, false)
                })
                .collect();
            let path = out_dir.join(format!("{w}-threads.svg"));
            draw(
                &path,
                &format!("{w}: throughput over threads"),
                "threads",
                "transactions/s",
                Metric::Throughput,
                &series,
            )?;
            files.push(path);
        }
        if lats.len() > 1 {
            let models: Vec<&str> = {
                let mut m: Vec<&str> = mine
                    .iter()
                    .filter(|r| r.family == "ferrite")
                    .map(|r| r.latency_model.as_str())
                    .collect();
                m.sort_unstable();
                m.dedup();
                m
            };
            let x_desc = match models.as_slice() {
                [m] => format!("injected latency (ns per {m})"),
                _ => "injected latency (ns)".to_owned(),
            };
            let (lo, hi) = (lats[0] as f64, lats[lats.len() - 1] as f64);
            for (metric, suffix, y_desc) in [
                (Metric::Throughput, "latency", "transactions/s"),
                (Metric::P99, "p99-latency", "p99 latency (µs)"),
            ] {
                let value = |r: &CsvRow| match metric {
                    Metric::Throughput => r.tx_per_s,
                    Metric::P99 => r.p99_us,
                };
                let mut by: BTreeMap<(String, usize, String), Vec<(f64, f64)>> = BTreeMap::new();
                let mut base: Series = Vec::new();
                for r in &mine {
                    if r.family == "ferrite" {
                        by.entry((r.label.clone(), r.threads, r.latency_model.clone()))
                            .or_default()
                            .push((r.latency_ns as f64, value(r)));
                    } else {
                        base.push((
                            format!("{} t{} (baseline, 0 ns)", r.label, r.threads),
                            vec![(lo, value(r)), (hi, value(r))],
                            true,
                        ));
                    }
                }
                let mut series: Series = by
                    .into_iter()
                    .map(|((label, t, model), mut pts)| {
                        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                        let name = if models.len() > 1 {
                            format!("{label} t{t} ({model})")
                        } else {
                            format!("{label} t{t}")
                        };
                        (name, pts, false)
                    })
                    .collect();
                series.extend(base);
                let path = out_dir.join(format!("{w}-{suffix}.svg"));
                let title = match metric {
                    Metric::Throughput => format!("{w}: throughput over injected latency"),
                    Metric::P99 => format!("{w}: p99 latency over injected latency"),
                };
                draw(&path, &title, &x_desc, y_desc, metric, &series)?;
                files.push(path);
            }
        }
    }
    files.extend(per_txn_plots(&rows, out_dir)?);
    Ok(files)
}

/// Operations per transaction of a micro-benchmark workload name (`insert8` → `("insert", 8)`).
fn micro_size(w: &str) -> Option<(&str, u32)> {
    ["insert", "update", "delete"]
        .into_iter()
        .find_map(|k| w.strip_prefix(k).and_then(|n| n.parse().ok()).map(|n| (k, n)))
}

/// The log–log sweeps over operations per transaction (module docs).
fn per_txn_plots(rows: &[&CsvRow], out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for kind in ["insert", "update", "delete"] {
        let mine: Vec<(u32, &CsvRow)> = rows
            .iter()
            .filter_map(|r| micro_size(&r.workload).filter(|m| m.0 == kind).map(|m| (m.1, *r)))
            .filter(|(_, r)| r.threads == 1 && r.latency_ns == 0)
            .collect();
        let mut sizes: Vec<u32> = mine.iter().map(|m| m.0).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            continue;
        }
        for (suffix, y_desc) in
            [("flushes", "lines flushed per transaction"), ("throughput", "operations/s")]
        {
            let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for (n, r) in &mine {
                let y = match suffix {
                    "flushes" => match r.flushes_per_tx.parse::<f64>() {
                        Ok(v) => v,
                        Err(_) => continue,
                    },
                    _ => r.ops_per_s,
                };
                if y > 0.0 {
                    by.entry(r.label.clone()).or_default().push((f64::from(*n), y));
                }
            }
            let series: Vec<(String, Vec<(f64, f64)>)> = by
                .into_iter()
                .map(|(l, mut pts)| {
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (l, pts)
                })
                .collect();
            if series.is_empty() {
                continue;
            }
            let path = out_dir.join(format!("{kind}-per-txn-{suffix}.svg"));
            let title = format!("{kind}: {y_desc} over {kind}s per transaction (log-log)");
            draw_log_log(&path, &title, &format!("{kind}s per transaction"), y_desc, &series)?;
            files.push(path);
        }
    }
    Ok(files)
}

/// A log–log line plot of `series` (every value positive).
fn draw_log_log(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(90)
        .build_cartesian_2d((x0 / 1.5..x1 * 1.5).log_scale(), (y0 / 1.5..y1 * 1.5).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| si(*v))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(|x| e(&x))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// What a plot's y axis shows.
#[derive(Clone, Copy)]
enum Metric {
    Throughput,
    P99,
}

fn draw(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    metric: Metric,
    series: &Series,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let ymax = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).fold(0.0f64, f64::max);
    let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0 - 1.0, x0 + 1.0) };
    let pad = (x1 - x0) * 0.05;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    let mut chart =
        canvas(&root, title, (x0 - pad)..(x1 + pad), 0.0..(ymax * 1.15).max(1.0), path)?;
    // Thread counts and latencies are whole numbers: label only integral ticks, and ask for no
    // more ticks than there are integers in range (at most 12).
    let xfmt =
        |v: &f64| if (v - v.round()).abs() < 1e-9 { format!("{v:.0}") } else { String::new() };
    let x_labels = ((x1 - x0).round() as usize + 1).clamp(2, 12);
    chart
        .configure_mesh()
        .x_labels(x_labels)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&|v| match metric {
            Metric::Throughput => si(*v),
            Metric::P99 => format!("{v:.1}"),
        })
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, pts, dashed)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = color.stroke_width(2);
        if *dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
                .map_err(|x| e(&x))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(|x| e(&x))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart
                .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
                .map_err(|x| e(&x))?;
        }
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperRight, path)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A white canvas on `root` with `title` and the given axis ranges.
fn canvas<'a, 'b: 'a>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    path: &Path,
) -> Result<Chart<'a, 'b>, String> {
    let e = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(|x| e(&x))?;
    ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(90)
        .build_cartesian_2d(x, y)
        .map_err(|x| e(&x))
}

/// Draws the legend at `position` and writes the file.
fn finish<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    root: &DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    position: SeriesLabelPosition,
    path: &Path,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(position)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// One line of a restart plot ([`restart_plot`]): a configuration's throughput over seconds
/// since restart, when its first transaction committed, and its pre-crash steady state.
#[derive(Clone, Debug)]
pub struct RestartLine {
    /// The configuration's name.
    pub name: String,
    /// `(seconds since restart, transactions/s)`.
    pub points: Vec<(f64, f64)>,
    /// Seconds since restart of the first commit, if any.
    pub first_commit_s: Option<f64>,
    /// The pre-crash steady state, transactions/s.
    pub steady_tx_s: f64,
}

/// Draws the restart benchmark's plot: throughput over seconds since restart, one line per
/// configuration, a dotted horizontal line at its pre-crash steady state and a vertical marker
/// at its first commit (labelled with the time).
pub fn restart_plot(path: &Path, title: &str, lines: &[RestartLine]) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let x1 = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)).fold(0.0f64, f64::max);
    let x1 = if x1 > 0.0 { x1 } else { 1.0 };
    let ymax = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1).chain([l.steady_tx_s]))
        .fold(0.0f64, f64::max);
    let ytop = (ymax * 1.15).max(1.0);
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    let mut chart = canvas(&root, title, 0.0..x1 * 1.02, 0.0..ytop, path)?;
    chart
        .configure_mesh()
        .x_desc("seconds since restart (SIGKILL, then open)")
        .y_desc("committed transactions/s")
        .y_label_formatter(&|v| si(*v))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, l) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = color.stroke_width(2);
        // Each bucket drawn as a step: flat over its width.
        let width = l.points.first().map_or(0.0, |p| p.0);
        let mut steps = Vec::with_capacity(l.points.len() * 2);
        for &(x, y) in &l.points {
            steps.push((x - width, y));
            steps.push((x, y));
        }
        chart
            .draw_series(LineSeries::new(steps, style))
            .map_err(|x| e(&x))?
            .label(l.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        let thin = color.stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, l.steady_tx_s), (x1, l.steady_tx_s)],
                3,
                4,
                thin,
            ))
            .map_err(|x| e(&x))?
            .label(format!("{}: before the kill ({} tx/s)", l.name, si(l.steady_tx_s)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], thin));
        if let Some(t) = l.first_commit_s {
            chart
                .draw_series(DashedLineSeries::new(vec![(t, 0.0), (t, ytop)], 8, 5, style))
                .map_err(|x| e(&x))?
                .label(format!("{}: first commit at {:.1} ms", l.name, t * 1e3))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart
                .draw_series([TriangleMarker::new((t, 0.0), 7, color.filled())])
                .map_err(|x| e(&x))?;
        }
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, family: &str, threads: usize, latency_ns: u64, tx: f64) -> CsvRow {
        CsvRow {
            workload: "w".into(),
            engine: label.into(),
            label: label.into(),
            family: family.into(),
            persistent: true,
            durability: "d".into(),
            threads,
            latency_ns,
            latency_model: "barrier".into(),
            sync_latency_us: 0,
            txns: 1,
            ops: 1,
            seconds: 1.0,
            tx_per_s: tx,
            ops_per_s: tx,
            ratio: "n/a".into(),
            p50_us: 1.0,
            p99_us: 1.0,
            p999_us: 1.0,
            max_us: 1.0,
            aborts: 0,
            busy: 0,
            flushes_per_tx: "n/a".into(),
            fences_per_tx: "n/a".into(),
            syncs_per_tx: "n/a".into(),
            bytes_per_tx: "n/a".into(),
            commit_us_per_tx: "n/a".into(),
            checks: "ok".into(),
            params: String::new(),
        }
    }

    fn texts(path: &Path) -> Vec<String> {
        let s = std::fs::read_to_string(path).unwrap();
        s.split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>'))
            .map(|(_, rest)| rest.split("</text>").next().unwrap_or("").trim().to_owned())
            .collect()
    }

    #[test]
    fn sweeps_are_plotted_with_clean_axes_and_labelled_baselines() {
        let dir = std::env::temp_dir().join(format!("ferrite-plot-test-{}", std::process::id()));
        let mut rows = Vec::new();
        for t in [1usize, 2, 4] {
            for l in [0u64, 300, 1000] {
                rows.push(row("Ferrite x", "ferrite", t, l, 1000.0 * t as f64 - l as f64 / 10.0));
            }
            rows.push(row("LMDB", "baseline", t, 0, 500.0 * t as f64));
        }
        let files = plots_from_rows(&rows, &dir).unwrap();
        assert_eq!(files.len(), 3);
        let th = texts(&files[0]);
        for n in ["1", "2", "4"] {
            assert_eq!(th.iter().filter(|t| *t == n).count(), 1, "tick {n} in {th:?}");
        }
        let lat = texts(&files[1]);
        assert!(lat.iter().any(|t| t == "LMDB t1 (baseline, 0 ns)"), "{lat:?}");
        assert!(lat.iter().any(|t| t == "Ferrite x t4"), "{lat:?}");
        assert!(lat.iter().any(|t| t == "injected latency (ns per barrier)"), "{lat:?}");
        let p99 = texts(&files[2]);
        assert!(files[2].ends_with("w-p99-latency.svg"), "{files:?}");
        assert!(p99.iter().any(|t| t == "p99 latency (µs)"), "{p99:?}");
        assert!(p99.iter().any(|t| t == "LMDB t2 (baseline, 0 ns)"), "{p99:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn inserts_per_transaction_are_plotted_log_log_with_counts_of_ferrite_engines_only() {
        let dir = std::env::temp_dir().join(format!("ferrite-plot-per-txn-{}", std::process::id()));
        let mut rows = Vec::new();
        for n in [1u32, 8, 64, 512] {
            let mut f = row("Ferrite fash", "ferrite", 1, 0, 1000.0 / f64::from(n));
            f.workload = format!("insert{n}");
            f.flushes_per_tx = format!("{:.1}", 7.0 * f64::from(n));
            let mut b = row("SQLite", "baseline", 1, 0, 500.0 / f64::from(n));
            b.workload = format!("insert{n}");
            rows.extend([f, b]);
        }
        let files = plots_from_rows(&rows, &dir).unwrap();
        let names: Vec<String> =
            files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["insert-per-txn-flushes.svg", "insert-per-txn-throughput.svg"]);
        let fl = texts(&files[0]);
        assert!(fl.iter().any(|t| t == "Ferrite fash"), "{fl:?}");
        assert!(!fl.iter().any(|t| t == "SQLite"), "baselines have no counts: {fl:?}");
        assert!(fl.iter().any(|t| t == "inserts per transaction"), "{fl:?}");
        let th = texts(&files[1]);
        assert!(th.iter().any(|t| t == "SQLite") && th.iter().any(|t| t == "Ferrite fash"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_restart_plot_has_a_line_per_configuration_and_first_commit_markers() {
        let dir = std::env::temp_dir().join(format!("ferrite-plot-restart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.svg");
        let line = |name: &str, first: Option<f64>| RestartLine {
            name: name.into(),
            points: (1..=20).map(|i| (f64::from(i) * 0.1, 1000.0 * f64::from(i.min(10)))).collect(),
            first_commit_s: first,
            steady_tx_s: 9000.0,
        };
        restart_plot(&path, "t", &[line("sync", Some(0.0123)), line("other", None)]).unwrap();
        let t = texts(&path);
        assert!(t.iter().any(|x| x == "sync"), "{t:?}");
        assert!(t.iter().any(|x| x == "other"), "{t:?}");
        assert!(t.iter().any(|x| x == "sync: first commit at 12.3 ms"), "{t:?}");
        assert!(!t.iter().any(|x| x.starts_with("other: first commit")), "{t:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
