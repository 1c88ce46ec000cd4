//! Baseline engines (SQLite, LMDB, PMDK libpmemobj) that Ferrite's benchmarks run side by side
//! with Ferrite's engines. Nothing is implemented here yet.
