//! The `ferrite` command line.
#![forbid(unsafe_code)]
fn main() {}
