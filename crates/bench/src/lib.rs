//! Workloads, the benchmark runner and its reports. Nothing is implemented here yet.
#![forbid(unsafe_code)]
