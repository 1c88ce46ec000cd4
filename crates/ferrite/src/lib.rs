//! Ferrite: an embedded, transactional storage engine for persistent memory.
//!
//! The engine's subsystems (allocator, FPTree, SOFORT, slotted-page engine) and the public
//! `Database` API land here in later issues; the persistence layer they all stand on is
//! [`ferrite_pmem`].
#![forbid(unsafe_code)]

pub use ferrite_pmem as pmem;
