//! Helpers shared by integration tests (`mod common;` in each test file that uses them).

pub mod fixture;
pub mod fptree;
