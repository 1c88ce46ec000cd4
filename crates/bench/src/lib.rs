//! Ferrite's benchmark harness: workloads, the runner, reports and plots, and the
//! `ferrite bench` command.
//!
//! In the spirit of LevelDB's `db_bench` (named workloads, run side by side on several
//! engines) and PiBench: every workload ([`workload::WorkloadId`]: the NVWAL/FAST insert
//! micro-benchmark and its update/delete variants, YCSB A–F) runs on every engine
//! ([`subject::EngineId`]: each Ferrite engine through the public `Database` API, and the
//! baselines of `ferrite-baselines`: SQLite in three journal/sync settings, LMDB, PMDK) through
//! one small interface ([`subject::Subject`]). The runner ([`runner`]) loads untimed, warms up,
//! times transactions on worker threads (throughput, p50/p99/p99.9 latency, aborts, and for
//! Ferrite engines flushes, fences and bytes per transaction from `ferrite::pmem::Counters`),
//! and runs each workload's consistency checks. Reports ([`report`]) print a side-by-side table
//! with a ratio column and write JSON, CSV and SVG plots ([`plot`]). [`calibrate`] compares the
//! baselines with the calibration anchors of the project's conventions.
//!
//! Typed OLTP workloads (TPC-B, TATP, TPC-C) run through a second, typed interface
//! ([`oltp`]: multi-column rows, composite keys, index and range scans), mapped natively onto
//! each engine, and reach the same runner through [`workload::PointWorkload`].
//!
//! Adding a workload: a variant of [`workload::WorkloadId`] and a module implementing
//! [`workload::Workload`] (key-value) or [`oltp::OltpWorkload`] (typed). Adding an engine: a Ferrite engine appears by itself (every
//! `EngineKind`); a baseline is a variant of [`subject::EngineId`] and a module implementing
//! [`subject::Subject`].
//!
//! The restart benchmark ([`restart`], `ferrite bench restart`) kills a child running TATP or
//! TPC-C on SOFORT with SIGKILL at steady state and measures, in a fresh process, the time to
//! open, to the first commit and the throughput over time after the restart.
//!
//! Performance is measured here and never asserted in tests; tests check shapes and
//! consistency.
#![forbid(unsafe_code)]

pub mod calibrate;
pub mod campaign;
pub mod cli;
pub mod keys;
pub mod machine;
pub mod oltp;
pub mod plot;
pub mod report;
pub mod restart;
pub mod restart_cli;
pub mod runner;
pub mod spec;
pub mod subject;
pub mod workload;
