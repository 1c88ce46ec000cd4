//! Crash-simulation tester of Ferrite and every crash target.
//!
//! Built on the simulated persistence domain of `ferrite-pmem`; see
//! `docs/design/crash-testing.md`. Nothing is implemented here yet.
#![forbid(unsafe_code)]
