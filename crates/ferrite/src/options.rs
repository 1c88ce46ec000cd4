//! Database options: which engine, and the persistence layer's options.
//!
//! Every engine is chosen here ([`EngineKind`]) and describes what it does to concurrent
//! transactions ([`Concurrency`]) and whether it keeps anything across a restart
//! ([`EngineKind::is_persistent`]). Environment variables never reach this type directly.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The engine behind a [`crate::Database`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// SOFORT, **the default**: a persistent multi-version column store on persistent memory
    /// (a pool-set directory at the database path), updated in place without a write-ahead
    /// log; serializable read-write transactions (MVOCC, validated at commit), snapshot
    /// read-only ones; a commit is durable when it returns. Design: `docs/design/sofort.md`.
    #[default]
    Sofort,
    /// The in-memory reference engine: **not persistent** (nothing survives the process), a
    /// `BTreeMap` per table and index, multi-version snapshots and optimistic, serializable
    /// validation at commit. It is the test oracle of the conformance suite, reachable with
    /// `Options::new().engine(EngineKind::Reference)`.
    Reference,
    /// The paged engine (`docs/design/paged.md`): every table and index a B+-tree of slotted
    /// pages resident in a PM pool set (a directory at the database path), made durable by
    /// `protocol`; one read-write transaction at a time (a second gets `Busy`), snapshot
    /// readers. Page size and checkpoint interval: [`PagedConfig`].
    Paged {
        /// The commit protocol.
        protocol: PagedProtocol,
    },
}

/// The paged engine's commit protocol (`docs/design/paged.md` §8).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PagedProtocol {
    /// SQLite's rollback journal: originals to a journal, sync, pages in place, sync,
    /// invalidate the journal (three syncs per commit).
    Journal,
    /// SQLite's write-ahead log: changed pages appended as frames, one sync per commit,
    /// checkpoints into the pages every [`PagedConfig::checkpoint_frames`] frames and at close.
    Wal,
    /// FASH (failure-atomic slotted paging with slot-header logging): pages in PM changed in
    /// place, records written only into free space, the changed slot headers through a small
    /// redo log with an 8-byte commit mark. PM store only.
    Fash,
    /// FAST: FASH, plus the commit of a transaction whose header change fits one aligned
    /// 8-byte word by storing that word (no log). PM store only.
    Fast,
    /// NVWAL (Kim et al., ASPLOS 2016): a write-ahead log in PM of byte-range diff frames
    /// packed into a user-level heap of blocks, committed with one persist barrier for the
    /// frames and one for the commit mark ([`PagedConfig::nvwal_sync`]); checkpoints as the
    /// WAL. Runs on the PM store only ([`PagedStore::Pm`]; the file store gives
    /// `InvalidArgument`).
    Nvwal,
}

impl PagedProtocol {
    /// Stable lower-case name (`journal`, `wal`, `fash`, `fast`, `nvwal`).
    pub fn name(self) -> &'static str {
        match self {
            PagedProtocol::Journal => "journal",
            PagedProtocol::Wal => "wal",
            PagedProtocol::Fash => "fash",
            PagedProtocol::Fast => "fast",
            PagedProtocol::Nvwal => "nvwal",
        }
    }
}

/// How NVWAL makes a commit's frames durable (spec `fast-fash-nvwal.md` §4.3, §4.4;
/// `docs/design/paged.md` §8.4).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NvwalSync {
    /// Transaction-aware lazy synchronization (the paper's "L"): every frame is copied
    /// without a flush, then all are flushed and fenced once, then the commit mark is stored,
    /// flushed and fenced: two fences per commit.
    #[default]
    Lazy,
    /// Eager synchronization (the paper's "E"): each frame is flushed and fenced as it is
    /// copied, then the commit mark: one fence per frame, plus one.
    Eager,
    /// Asynchronous commit (the paper's "CS"): frames are never flushed; only the commit
    /// frame's header (commit mark and the checksum chain that covers every earlier frame)
    /// is flushed and fenced. **Not durable**: a crash can lose acknowledged commits whose
    /// frames the cache had not written back; recovery keeps the longest prefix of commits
    /// whose frames verify (atomicity holds, durability does not). A performance bound, as
    /// in the paper, not a mode for data that matters.
    Checksum,
}

impl NvwalSync {
    /// Stable lower-case name (`lazy`, `eager`, `checksum`).
    pub fn name(self) -> &'static str {
        match self {
            NvwalSync::Lazy => "lazy",
            NvwalSync::Eager => "eager",
            NvwalSync::Checksum => "checksum",
        }
    }
}

/// Settings of the paged engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PagedConfig {
    /// Page size in bytes: a power of two from 512 to 65536 (default 4096), fixed when the
    /// database is created; `open` uses the stored one.
    pub page_size: usize,
    /// WAL (and NVWAL) frames after which a commit checkpoints (default 1000, SQLite's; 0:
    /// only at close).
    pub checkpoint_frames: u64,
    /// Where the pages live (default [`PagedStore::Pm`]); chosen at creation, and `open`
    /// must name the same one.
    pub store: PagedStore,
    /// The DRAM page cache, in pages (default 2000, SQLite's classic default; 0: no cache).
    /// The file store caches below its protocol; on the PM store the pager caches committed
    /// page images, so that a page is copied out of PM once rather than at every read.
    pub cache_pages: usize,
    /// Whether the PM medium keeps axiom M2 (stores to one cache line become durable in
    /// program order; `docs/design/persistence.md`). Default false: Intel and AMD document
    /// only 8-byte atomicity. When true, FAST persists in-place bytes that share a line with
    /// its commit word with the word's one flush (`docs/design/paged.md` §8).
    pub same_line_order: bool,
    /// NVWAL's commit synchronization (default [`NvwalSync::Lazy`]); other protocols ignore it.
    pub nvwal_sync: NvwalSync,
}

impl Default for PagedConfig {
    fn default() -> Self {
        PagedConfig {
            page_size: 4096,
            checkpoint_frames: 1000,
            store: PagedStore::Pm,
            cache_pages: 2000,
            same_line_order: false,
            nvwal_sync: NvwalSync::Lazy,
        }
    }
}

/// Where a paged database keeps its pages and its log (journal or WAL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PagedStore {
    /// Pages resident in a PM pool set, read and written in place; the log is a file of the
    /// same pool set. The database path is the pool set's directory.
    #[default]
    Pm,
    /// Pages in an ordinary file (`pread`/`pwrite`/`fdatasync`) behind a DRAM page cache of
    /// [`PagedConfig::cache_pages`] pages; the log is a second file. The database path is a
    /// directory holding files `pages` and `log`.
    File,
}

impl PagedStore {
    /// The store's name in settings and reports: `pm` or `file`.
    pub fn name(self) -> &'static str {
        match self {
            PagedStore::Pm => "pm",
            PagedStore::File => "file",
        }
    }
}

/// What the rest of the crate needs to know about an engine: one record per [`EngineKind`].
struct KindInfo {
    name: &'static str,
    persistent: bool,
    concurrency: Concurrency,
}

impl EngineKind {
    /// Every engine this build knows. The conformance suite, the benchmark harness and the
    /// registered crash targets iterate this list, so a new engine is tested and benchmarked
    /// without further changes. The paged engine is in it under each protocol
    /// ([`EngineKind::PAGED`]).
    pub const ALL: &'static [EngineKind] = &[
        EngineKind::Sofort,
        EngineKind::Reference,
        EngineKind::Paged { protocol: PagedProtocol::Journal },
        EngineKind::Paged { protocol: PagedProtocol::Wal },
        EngineKind::Paged { protocol: PagedProtocol::Fash },
        EngineKind::Paged { protocol: PagedProtocol::Fast },
        EngineKind::Paged { protocol: PagedProtocol::Nvwal },
    ];

    /// The paged engine under each of its protocols.
    pub const PAGED: &'static [EngineKind] = &[
        EngineKind::Paged { protocol: PagedProtocol::Journal },
        EngineKind::Paged { protocol: PagedProtocol::Wal },
        EngineKind::Paged { protocol: PagedProtocol::Fash },
        EngineKind::Paged { protocol: PagedProtocol::Fast },
        EngineKind::Paged { protocol: PagedProtocol::Nvwal },
    ];

    /// Every engine this build knows (the same as [`EngineKind::ALL`]).
    pub fn all() -> impl Iterator<Item = EngineKind> {
        EngineKind::ALL.iter().copied()
    }

    /// The engines that keep committed data across a restart.
    pub fn persistent() -> impl Iterator<Item = EngineKind> {
        EngineKind::all().filter(|k| k.is_persistent())
    }

    // Adding an engine: one arm here, one line in `engine/registry.rs`.
    fn info(self) -> KindInfo {
        match self {
            EngineKind::Sofort => KindInfo {
                name: "sofort",
                persistent: true,
                concurrency: Concurrency {
                    writers: WhileWriting::Proceed,
                    readers: WhileWriting::Proceed,
                },
            },
            EngineKind::Reference => KindInfo {
                name: "reference",
                persistent: false,
                concurrency: Concurrency {
                    writers: WhileWriting::Proceed,
                    readers: WhileWriting::Proceed,
                },
            },
            EngineKind::Paged { protocol } => KindInfo {
                name: match protocol {
                    PagedProtocol::Journal => "paged-journal",
                    PagedProtocol::Wal => "paged-wal",
                    PagedProtocol::Fash => "paged-fash",
                    PagedProtocol::Fast => "paged-fast",
                    PagedProtocol::Nvwal => "paged-nvwal",
                },
                persistent: true,
                concurrency: Concurrency {
                    writers: WhileWriting::Busy,
                    readers: WhileWriting::Proceed,
                },
            },
        }
    }

    /// Stable lower-case name (`sofort`, `reference`, `paged-journal`, `paged-wal`,
    /// `paged-nvwal`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether committed data survives closing the database (and a crash). `false` for
    /// [`EngineKind::Reference`]: its "durable" means "committed in memory".
    pub fn is_persistent(self) -> bool {
        self.info().persistent
    }

    /// What the engine does to a transaction that starts or reads while a read-write
    /// transaction is open.
    pub fn concurrency(self) -> Concurrency {
        self.info().concurrency
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineKind {
    type Err = Error;

    /// Parses a name as [`EngineKind::name`] prints it (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Error> {
        let known = || EngineKind::ALL.iter().copied();
        known().find(|k| k.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
            let names: Vec<&str> = known().map(|k| k.name()).collect();
            Error::InvalidArgument(format!(
                "unknown engine {s:?} (expected one of {})",
                names.join(", ")
            ))
        })
    }
}

/// What a transaction meets while another, read-write transaction is open.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhileWriting {
    /// It proceeds without waiting. A read-only transaction reads its snapshot; a read-write
    /// transaction runs optimistically, and a conflict aborts one of the two (see
    /// `docs/design/api.md` for which).
    Proceed,
    /// `begin` (or the first conflicting operation) returns [`Error::Busy`] at once.
    Busy,
    /// `begin` (or the operation) waits until the writer finishes. A thread must then never
    /// hold two transactions at once: it would wait for itself.
    Block,
}

/// An engine's concurrency contract (see [`EngineKind::concurrency`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Concurrency {
    /// What a second read-write transaction (`begin`) meets while one is open.
    pub writers: WhileWriting,
    /// What a read-only transaction (`begin_read`) meets while a read-write one is open.
    pub readers: WhileWriting,
}

/// Settings of the reference engine. Its one knob exists for tests (`ferrite::internals`), so
/// this type is not exported at the crate root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReferenceConfig {
    /// Validate read sets and write-write conflicts at commit. `false` builds a **broken**
    /// engine (lost updates, write skew, phantoms) that the conformance suite must reject.
    pub validation: bool,
}

impl Default for ReferenceConfig {
    fn default() -> Self {
        ReferenceConfig { validation: true }
    }
}

use crate::engine::sofort::{LookupHelp, RecoveryMode};

/// Where a SOFORT index lives (`docs/design/sofort.md` §13). Chosen per index when its table
/// is created and stored in the table's descriptor: `open` uses the stored placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SofortIndexPlacement {
    /// In DRAM, rebuilt by the recovery scan at every open (the fastest to use).
    #[default]
    Dram,
    /// An FPTree with byte keys: leaves in PM, inner nodes in DRAM rebuilt from the leaves at
    /// open.
    Hybrid,
    /// An FPTree with its inner nodes in PM too: nothing is rebuilt at open.
    Persistent,
}

impl SofortIndexPlacement {
    /// Stable lower-case name (`dram`, `hybrid`, `persistent`).
    pub fn name(self) -> &'static str {
        match self {
            SofortIndexPlacement::Dram => "dram",
            SofortIndexPlacement::Hybrid => "hybrid",
            SofortIndexPlacement::Persistent => "persistent",
        }
    }
}

impl std::str::FromStr for SofortIndexPlacement {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [SofortIndexPlacement::Dram, SofortIndexPlacement::Hybrid, SofortIndexPlacement::Persistent]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                crate::Error::InvalidArgument(format!(
                    "index placement {s:?}: one of dram, hybrid, persistent"
                ))
            })
    }
}

/// A placement for one index of one table (see [`SofortConfig::index_placement`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexPlacementOverride {
    /// The table's name.
    pub table: String,
    /// The secondary index's name; `None`: the primary key.
    pub index: Option<String>,
    /// Where it lives.
    pub placement: SofortIndexPlacement,
}

/// Settings of the SOFORT engine ([`EngineKind::Sofort`]). `slots` and `alloc_slots` are used
/// when a database is **created** (they are stored in its catalog; `open` reads them back and
/// ignores these); the index placements when a **table** is created (stored in its
/// descriptor); the recovery settings are used by `open` and stored nowhere.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SofortConfig {
    /// Transaction slots: the most transactions (read-only ones included) open at once;
    /// `begin` beyond that returns `Error::Busy`. 1..=960, default 64.
    pub slots: u32,
    /// Slots of the persistent allocator (concurrent allocations). Default 4.
    pub alloc_slots: u32,
    /// How `open` rebuilds the DRAM indexes: before it returns (`Synchronous`, the default)
    /// or in the background while transactions run (`Instant`; see
    /// [`crate::Database::wait_recovered`]).
    pub recovery: RecoveryMode,
    /// Index rebuild threads (one index per thread at a time; 0: one per index, at most the
    /// machine's parallelism). Default 0.
    pub recovery_threads: u32,
    /// How a primary-key lookup on an index still being rebuilt (instant or adaptive recovery)
    /// helps the rebuild: [`LookupHelp::Bounded`] (the default: a share, then a scan of the
    /// rest) or [`LookupHelp::Full`] (until at most 4 096 rows are left).
    pub lookup_help: LookupHelp,
    /// Adaptive recovery (seed 001 ch. 6): a configuration of its Table 6.1, parsed from
    /// the seed's labels (`"rk.Q^ad.R2^ad".parse()`, `rk.Q1.R1`, `¬rk.Q1.R1`, `sync.R2`; see
    /// [`crate::RecoveryStrategy`]). When set it overrides `recovery` and `recovery_threads`:
    /// synchronous for `¬rk.Q0.Rz`, instant otherwise, with `z` rebuild threads, jobs in rank
    /// order for `rk`, threads released as the best pending benefit falls for `^ad`.
    /// Default `None`.
    pub recovery_strategy: Option<crate::RecoveryStrategy>,
    /// Test hook (instant recovery): no index rebuild passes this many rows of its table
    /// until [`crate::Database::hold_rebuild`] moves the hold.
    #[doc(hidden)]
    pub rebuild_hold: Option<u64>,
    /// Where the indexes (primary and secondary) of a new table live unless
    /// `index_overrides` names them. Default [`SofortIndexPlacement::Dram`].
    pub index_placement: SofortIndexPlacement,
    /// Per-index placements (the last one naming an index wins).
    pub index_overrides: Vec<IndexPlacementOverride>,
    /// The past workload (adaptive recovery's `WoPast`, `docs/design/sofort.md` §16.1): one
    /// statement in this many per thread is counted (0: none). Default 64.
    pub past_sample_every: u32,
    /// The past workload's PM block is written every this many sampled statements (0: only at
    /// close), by the thread whose sample reaches the count. Default 4096.
    pub past_persist_every: u64,
}

impl Default for SofortConfig {
    fn default() -> Self {
        let d = crate::engine::sofort::SofortOptions::default();
        SofortConfig {
            slots: d.slots,
            alloc_slots: d.alloc_slots,
            recovery: RecoveryMode::Synchronous,
            recovery_threads: 0,
            lookup_help: LookupHelp::Bounded,
            recovery_strategy: None,
            rebuild_hold: None,
            index_placement: SofortIndexPlacement::Dram,
            index_overrides: Vec::new(),
            past_sample_every: crate::engine::sofort::DEFAULT_PAST_SAMPLE_EVERY,
            past_persist_every: crate::engine::sofort::DEFAULT_PAST_PERSIST_EVERY,
        }
    }
}

impl SofortConfig {
    /// Places every index without an override.
    pub fn default_placement(mut self, placement: SofortIndexPlacement) -> Self {
        self.index_placement = placement;
        self
    }

    /// Places the index `index` of table `table` (`None`: its primary key).
    pub fn index_placement(
        mut self,
        table: &str,
        index: Option<&str>,
        placement: SofortIndexPlacement,
    ) -> Self {
        self.index_overrides.push(IndexPlacementOverride {
            table: table.to_owned(),
            index: index.map(str::to_owned),
            placement,
        });
        self
    }

    /// The placement of index `index` (`None`: the primary key) of a new table `table`.
    pub fn placement_of(&self, table: &str, index: Option<&str>) -> SofortIndexPlacement {
        self.index_overrides
            .iter()
            .rev()
            .find(|o| o.table == table && o.index.as_deref() == index)
            .map_or(self.index_placement, |o| o.placement)
    }
}

/// Options of a database: the engine, the persistence layer's options, and per-engine
/// settings (one field per engine that has any; the registry hands every engine the whole
/// `Options`).
///
/// ```
/// use ferrite::{EngineKind, Options};
/// let opts = Options::new()
///     .engine("reference".parse()?)
///     .pmem(ferrite::pmem::Options::new().layout("my-app"));
/// assert_eq!(opts.engine_kind(), EngineKind::Reference);
/// assert_eq!(opts.engine_settings()[0], ("engine".to_owned(), "reference".to_owned()));
/// # Ok::<(), ferrite::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Options {
    engine: EngineKind,
    pmem: ferrite_pmem::Options,
    reference: ReferenceConfig,
    sofort: SofortConfig,
    paged: PagedConfig,
    unfinished_timeout: Option<std::time::Duration>,
}

/// How long an unfinished continuable transaction waits after `open` for a client to resume
/// it before it is aborted, unless [`Options::unfinished_timeout`] says otherwise.
pub const DEFAULT_UNFINISHED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

impl Options {
    /// Sets how long an unfinished continuable transaction found by `open` waits to be
    /// resumed ([`crate::Database::resume`]) before it is aborted (default
    /// [`DEFAULT_UNFINISHED_TIMEOUT`], 10 minutes). A background thread of the database
    /// aborts it; [`crate::Database::reap_unfinished`] does the same for a given time.
    pub fn unfinished_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.unfinished_timeout = Some(timeout);
        self
    }

    /// The timeout of unfinished continuable transactions.
    pub fn unfinished_timeout_value(&self) -> std::time::Duration {
        self.unfinished_timeout.unwrap_or(DEFAULT_UNFINISHED_TIMEOUT)
    }

    /// Default options: the default engine and default persistence options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Chooses the engine.
    pub fn engine(mut self, engine: EngineKind) -> Self {
        self.engine = engine;
        self
    }

    /// Sets the SOFORT engine's settings (used when a database is created).
    pub fn sofort(mut self, config: SofortConfig) -> Self {
        self.sofort = config;
        self
    }

    /// The SOFORT engine's settings.
    pub fn sofort_config(&self) -> SofortConfig {
        self.sofort.clone()
    }

    /// Sets the paged engine's settings (page size: used when a database is created).
    pub fn paged(mut self, config: PagedConfig) -> Self {
        self.paged = config;
        self
    }

    /// The paged engine's settings.
    pub fn paged_config(&self) -> PagedConfig {
        self.paged
    }

    /// Sets the persistence layer's options (durability mode, flush instruction, layout name,
    /// segment size, maximum pool size), used by persistent engines when they create or open
    /// their pool sets.
    pub fn pmem(mut self, pmem: ferrite_pmem::Options) -> Self {
        self.pmem = pmem;
        self
    }

    /// The chosen engine.
    pub fn engine_kind(&self) -> EngineKind {
        self.engine
    }

    /// The persistence layer's options.
    pub fn pmem_options(&self) -> &ferrite_pmem::Options {
        &self.pmem
    }

    /// The chosen engine's effective settings as `(name, value)` pairs, starting with
    /// `("engine", name)`: what benchmark reports print, so that every engine's settings
    /// appear there without the harness knowing them.
    pub fn engine_settings(&self) -> Vec<(String, String)> {
        let mut v = vec![("engine".to_owned(), self.engine.name().to_owned())];
        match self.engine {
            EngineKind::Sofort => {
                let pm = &self.pmem;
                v.push(("sofort.slots".to_owned(), self.sofort.slots.to_string()));
                v.push(("sofort.alloc_slots".to_owned(), self.sofort.alloc_slots.to_string()));
                let placement = self.sofort.index_placement.name().to_owned();
                v.push(("sofort.index_placement".to_owned(), placement));
                for o in &self.sofort.index_overrides {
                    let ix = o.index.as_deref().unwrap_or("primary key");
                    v.push((
                        format!("sofort.index_placement[{}.{ix}]", o.table),
                        o.placement.name().to_owned(),
                    ));
                }
                let past = (self.sofort.past_sample_every, self.sofort.past_persist_every);
                v.push(("sofort.past_sample_every".to_owned(), past.0.to_string()));
                v.push(("sofort.past_persist_every".to_owned(), past.1.to_string()));
                v.push(("pmem.segment_size".to_owned(), pm.segment_size_bytes().to_string()));
                let max =
                    pm.max_pool_size_explicit().map_or("default".to_owned(), |b| b.to_string());
                v.push(("pmem.max_pool_size".to_owned(), max));
                let mode = pm.durability_mode().map_or("detect".to_owned(), |m| format!("{m:?}"));
                v.push(("pmem.durability".to_owned(), mode));
                v.push(("pmem.prefault".to_owned(), pm.is_prefault().to_string()));
            }
            EngineKind::Reference => {
                let on = if self.reference.validation { "on" } else { "off (broken, tests only)" };
                v.push(("reference.validation".to_owned(), on.to_owned()));
            }
            EngineKind::Paged { protocol } => {
                v.push(("paged.protocol".to_owned(), protocol.name().to_owned()));
                v.push(("paged.store".to_owned(), self.paged.store.name().to_owned()));
                v.push(("paged.page_size".to_owned(), self.paged.page_size.to_string()));
                if matches!(protocol, PagedProtocol::Wal | PagedProtocol::Nvwal) {
                    let every = self.paged.checkpoint_frames.to_string();
                    v.push(("paged.checkpoint_frames".to_owned(), every));
                }
                if protocol == PagedProtocol::Fast {
                    let m2 = self.paged.same_line_order.to_string();
                    v.push(("paged.same_line_order".to_owned(), m2));
                }
                if protocol == PagedProtocol::Nvwal {
                    let sync = self.paged.nvwal_sync.name().to_owned();
                    v.push(("paged.nvwal_sync".to_owned(), sync));
                }
                v.push(("paged.cache_pages".to_owned(), self.paged.cache_pages.to_string()));
                if self.paged.store == PagedStore::Pm {
                    let pm = &self.pmem;
                    v.push(("pmem.segment_size".to_owned(), pm.segment_size_bytes().to_string()));
                    let mode =
                        pm.durability_mode().map_or("detect".to_owned(), |m| format!("{m:?}"));
                    v.push(("pmem.durability".to_owned(), mode));
                }
            }
        }
        v
    }

    /// Sets the reference engine's settings (reached through `ferrite::internals`).
    pub(crate) fn with_reference(mut self, config: ReferenceConfig) -> Self {
        self.reference = config;
        self
    }

    /// The reference engine's settings.
    pub(crate) fn reference_config(&self) -> ReferenceConfig {
        self.reference
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &k in EngineKind::ALL {
            assert_eq!(k.name().parse::<EngineKind>().ok(), Some(k));
            assert_eq!(k.name().to_uppercase().parse::<EngineKind>().ok(), Some(k));
        }
        assert!(matches!("nope".parse::<EngineKind>(), Err(Error::InvalidArgument(_))));
        assert!(!EngineKind::Reference.is_persistent());
        assert!(EngineKind::Sofort.is_persistent());
        assert_eq!(EngineKind::default(), EngineKind::Sofort);
        let s = Options::new().engine_settings();
        assert_eq!(s[0], ("engine".to_owned(), "sofort".to_owned()));
        assert!(s.iter().any(|(k, v)| k == "sofort.slots" && v == "64"));
        assert_eq!(EngineKind::all().count(), EngineKind::ALL.len());
        assert!(EngineKind::PAGED.iter().all(|k| EngineKind::ALL.contains(k)));
        assert!(EngineKind::persistent().all(EngineKind::is_persistent));
    }
}
