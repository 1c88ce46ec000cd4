//! `ferrite-pmem`: the only way Ferrite touches persistent memory.
//!
//! It owns pools (files mapped shared, or heap memory for tests), the flush and fence
//! instructions, checked word/byte/struct access, and per-thread persistence counters. Every
//! other Ferrite crate is `#![forbid(unsafe_code)]` and reaches persistent memory only through
//! this crate's safe API. Design: `docs/design/persistence.md`; header format:
//! `docs/design/format.md`.
//!
//! # Invariants
//! - No Rust reference (`&[u8]`, `&T`) is ever created over a mapping; words are accessed as
//!   `AtomicU64` through `from_ptr`, bulk data through relaxed word loops into local copies
//!   (conventions §2). Every access is bounds- and alignment-checked and returns `Err` rather
//!   than panicking or faulting.
//! - Memory is never released under a live `Space`: every space (a pool's, a view, a clone)
//!   holds the mapping that owns its memory, so a view may outlive its pool or pool set
//!   (`docs/design/persistence.md` §3a).
//! - A pool's backing space is allocated before it is mapped (no SIGBUS on a full tmpfs), and an
//!   open pool holds an exclusive `flock`.
//!
//! # Ordering
//! `flush(range)` starts write-back of every overlapping line with the pool's instruction
//! (`CLWB` > `CLFLUSHOPT` > `CLFLUSH`, chosen from CPUID, overridable in [`Options`]);
//! `fence()` is `SFENCE`; `persist = flush + fence`. The media axioms (M1: aligned 8-byte
//! stores are failure-atomic; M2: same-line stores persist in order, assumed only where a
//! structure says so) and the rules `P-PM-n` are in `docs/design/persistence.md`.
//!
//! # Concurrency
//! [`Pool`], [`PoolSet`] and [`Space`] are `Send + Sync`; all access methods take `&self`. A fence orders only the calling
//! thread's flushes. Counters are thread-local.
//!
//! ```
//! use std::sync::atomic::Ordering;
//! use ferrite_pmem::{Options, Pool};
//!
//! let pool = Pool::create_volatile(64 * 1024, &Options::default())?;
//! pool.write_bytes(64, b"hello")?;
//! pool.persist(64, 5)?;                               // data first ...
//! pool.store_u64(0, 1, Ordering::Release)?;           // ... then the commit word
//! pool.persist(0, 8)?;
//! let mut buf = [0u8; 5];
//! pool.read_into(64, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! # Ok::<(), ferrite_pmem::Error>(())
//! ```

mod arch;
mod blockfile;
mod counters;
pub mod emulation;
mod error;
pub mod header;
mod image;
mod mapping;
mod mode;
mod options;
pub mod platform;
mod pool;
mod poolset;
mod pptr;
pub mod probe;
mod region;
pub mod sim;
mod space;

pub use arch::{CpuFeatures, best_flush, cpu_features, flush_supported};
pub use blockfile::BlockFile;
pub use counters::Counters;
pub use emulation::Latency;
pub use error::{Error, Result, uuid_str};
pub use image::{CrashImage, ImageFile, ImageSpec, Pick, SplitMix64};
pub use mode::{DurabilityMode, FlushKind, UnknownName};
pub use options::{DEFAULT_LAYOUT, DEFAULT_SEGMENT_SIZE, MAX_SEGMENTS, Options};
pub use pool::{ModeDecision, Pool, PoolSummary, SIM_POOL_FILE, inspect};
pub use poolset::{PoolSet, SegmentInfo};
pub use pptr::{POff, PPtr, SegmentId};
pub use region::CACHE_LINE;
pub use sim::SimDomain;
pub use space::Space;

#[doc(hidden)]
pub mod internals;
