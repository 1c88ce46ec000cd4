//! Internals for Ferrite's own tests, tester and benchmarks; exempt from semver.

pub mod testing;
