//! Subjects: the engines a benchmark runs, behind one small interface.
//!
//! A [`Subject`] is an opened database with the workload's tables: key-value tables of 8-byte
//! keys (below 2^63) and byte values. Each worker thread opens its own [`Session`] (a
//! connection, a reader handle) and runs transactions through it: [`Session::run`] executes a
//! body against [`Ops`] (`get`, `insert`, `update`, `delete`, `scan`, `count`) in one
//! transaction, committing when the body returns `Ok` and rolling back otherwise. A retryable
//! failure ([`OpError::Retryable`], a conflict; [`OpError::Busy`], another writer is open on an
//! engine that admits one at a time) means the runner may run the whole body again.
//!
//! Engines are named by [`EngineId`]: every Ferrite [`EngineKind`] (so a new Ferrite engine
//! shows up here with no change), the SOFORT engine with its indexes in PM
//! ([`EngineId::SofortPlaced`], run on request), the paged engine on its file store
//! ([`EngineId::PagedFile`], run on request, with an emulated sync latency), and the
//! baselines of `ferrite-baselines`. Adding a baseline is a variant of [`EngineId`] plus one
//! module implementing [`Subject`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use ferrite::pmem::FlushKind;
use ferrite::{EngineKind, PagedProtocol, PagedStore, SofortIndexPlacement};

pub(crate) mod ferrite_db;
pub(crate) mod lmdb;
#[cfg(feature = "pmdk")]
mod pmdk;
pub(crate) mod sqlite;

/// Table number within a subject (the position in the workload's table list).
pub type TableId = usize;

/// Whether a transaction may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnKind {
    /// Reads only (a snapshot where the engine offers one).
    ReadOnly,
    /// Reads and writes.
    ReadWrite,
}

/// Why an operation or a transaction failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// A conflict: running the whole transaction again may succeed.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The engine admits one read-write transaction at a time and another one is open
    /// (`ferrite::WhileWriting::Busy`, SQLite's `SQLITE_BUSY`): running the whole transaction
    /// again once it ends may succeed. The runner counts these apart from conflict aborts.
    #[error("busy: {0}")]
    Busy(String),
    /// The engine ran out of space.
    #[error("{0}")]
    Full(String),
    /// Any other failure of the engine (or a misuse, such as a write in a read-only
    /// transaction).
    #[error("{0}")]
    Engine(String),
}

impl OpError {
    /// Whether running the whole transaction again may succeed (a conflict or a busy engine).
    pub fn is_retryable(&self) -> bool {
        matches!(self, OpError::Retryable(_) | OpError::Busy(_))
    }
}

impl From<ferrite_baselines::Error> for OpError {
    fn from(e: ferrite_baselines::Error) -> Self {
        if matches!(e, ferrite_baselines::Error::Busy(_)) {
            OpError::Busy(e.to_string())
        } else if e.is_retryable() {
            OpError::Retryable(e.to_string())
        } else if matches!(e, ferrite_baselines::Error::Full { .. }) {
            OpError::Full(e.to_string())
        } else {
            OpError::Engine(e.to_string())
        }
    }
}

/// The operations inside one transaction.
pub trait Ops {
    /// Copies the value of `key` into `out`; `false` if there is none.
    fn get(&mut self, table: TableId, key: u64, out: &mut Vec<u8>) -> Result<bool, OpError>;
    /// Inserts; `false` (and no effect) if the key exists.
    fn insert(&mut self, table: TableId, key: u64, value: &[u8]) -> Result<bool, OpError>;
    /// Replaces the value; `false` (and no effect) if the key does not exist.
    fn update(&mut self, table: TableId, key: u64, value: &[u8]) -> Result<bool, OpError>;
    /// Deletes; `false` if the key does not exist.
    fn delete(&mut self, table: TableId, key: u64) -> Result<bool, OpError>;
    /// Visits up to `limit` records with key `>= start` in key order; returns how many.
    fn scan(
        &mut self,
        table: TableId,
        start: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, OpError>;
    /// Number of records (for consistency checks, never on a timed path).
    fn count(&mut self, table: TableId) -> Result<u64, OpError>;
}

/// The body of a transaction.
pub type Body<'b> = dyn FnMut(&mut dyn Ops) -> Result<(), OpError> + 'b;

/// One thread's connection to a subject.
pub trait Session {
    /// Runs `body` in one transaction of `kind`: commits (durably, as the engine defines it)
    /// if it returns `Ok`, rolls back otherwise.
    fn run(&mut self, kind: TxnKind, body: &mut Body<'_>) -> Result<(), OpError>;
}

/// Which side of a comparison an engine is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// A Ferrite engine (pmem counters apply, latency injection applies).
    Ferrite,
    /// A baseline of `ferrite-baselines` (no pmem counters, no injected latency).
    Baseline,
}

/// What a subject is and how it is configured, as printed in every result.
#[derive(Clone, Debug)]
pub struct SubjectInfo {
    /// Registry name (`reference`, `sqlite-wal-full`, ...).
    pub engine: String,
    /// Human label (`SQLite WAL+FULL`).
    pub label: String,
    /// Ferrite or baseline.
    pub family: Family,
    /// Whether committed data survives the process.
    pub persistent: bool,
    /// Short durability label for tables ("non-persistent (in-memory)", "fsync per commit").
    pub durability_short: String,
    /// What a commit survives, in one sentence.
    pub durability: String,
    /// Effective configuration (engine settings, library versions, options).
    pub config: BTreeMap<String, String>,
}

/// An opened engine with the workload's tables.
pub trait Subject: Send + Sync {
    /// What it is.
    fn info(&self) -> &SubjectInfo;
    /// A new session for the calling thread.
    fn session(&self) -> Result<Box<dyn Session + '_>, OpError>;
    /// Called after loading, before warm-up and timing (e.g. SQLite checkpoints its WAL).
    fn before_timing(&self) -> Result<(), OpError> {
        Ok(())
    }
}

/// How injected latency is applied to Ferrite's pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LatencyModel {
    /// Extra latency per persist barrier (fence): `ferrite_pmem::Options::barrier_latency_ns`.
    Barrier,
    /// Extra latency per flushed line: `ferrite_pmem::Options::line_latency_ns`.
    Line,
}

impl LatencyModel {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            LatencyModel::Barrier => "barrier",
            LatencyModel::Line => "line",
        }
    }
}

impl std::str::FromStr for LatencyModel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "barrier" => Ok(LatencyModel::Barrier),
            "line" => Ok(LatencyModel::Line),
            other => Err(format!("unknown latency model {other:?} (expected barrier or line)")),
        }
    }
}

/// What a subject is opened with.
#[derive(Clone, Debug)]
pub struct SubjectSetup {
    /// The workload's tables, in [`TableId`] order.
    pub tables: Vec<&'static str>,
    /// Bytes of data the run is expected to hold at most (sizes caches, maps and pools).
    pub data_bytes: u64,
    /// Injected latency for Ferrite's pools, ns (baselines ignore it and run at 0).
    pub latency_ns: u64,
    /// How the latency is injected.
    pub latency_model: LatencyModel,
    /// Flush instruction for Ferrite's pools (`None`: the best the CPU has).
    pub flush: Option<FlushKind>,
    /// Emulated latency of every block-file sync, ns, for the engines on the paged file store
    /// ([`EngineId::PagedFile`]: `ferrite_pmem::Options::sync_latency_ns`); every other engine
    /// ignores it.
    pub sync_latency_ns: u64,
}

#[cfg(test)]
impl SubjectSetup {
    /// Tests: one table `t`, 1 MiB of data, no injected latency, the best flush.
    pub(crate) fn small() -> SubjectSetup {
        SubjectSetup {
            tables: vec!["t"],
            data_bytes: 1 << 20,
            latency_ns: 0,
            latency_model: LatencyModel::Barrier,
            flush: None,
            sync_latency_ns: 0,
        }
    }
}

/// Every engine the harness knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineId {
    /// A Ferrite engine.
    Ferrite(EngineKind),
    /// The SOFORT engine with every index at this placement (`docs/design/sofort.md` §13;
    /// `hybrid` or `persistent`: the default placement, DRAM, is `Ferrite(Sofort)`).
    SofortPlaced(SofortIndexPlacement),
    /// The paged engine under NVWAL with a synchronization other than the default lazy one
    /// (`paged-nvwal-eager`, `paged-nvwal-checksum`; `docs/design/paged.md` §8.4): run on
    /// request, for the lazy-against-eager comparison of the NVWAL paper.
    NvwalSynced(ferrite::NvwalSync),
    /// The paged engine under this protocol on its file store (`PagedStore::File`: files
    /// `pages` and `log` in the database directory, synced with `fdatasync`, plus the run's
    /// emulated sync latency; NVWAL: `pages` and its log in the pool set `log.pm`;
    /// `paged-journal-file`, `paged-wal-file`, `paged-nvwal-file`): run on request, for WAL
    /// against NVWAL with a flash device's sync latency.
    PagedFile(PagedProtocol),
    /// SQLite, WAL journal, `synchronous=FULL`.
    SqliteWalFull,
    /// SQLite, WAL journal, `synchronous=NORMAL`.
    SqliteWalNormal,
    /// SQLite, rollback journal (`DELETE`), `synchronous=FULL`.
    SqliteJournalFull,
    /// LMDB, durable on commit.
    Lmdb,
    /// PMDK libpmemobj B+-tree (needs the `pmdk` feature).
    Pmdk,
}

impl EngineId {
    /// Every engine, available or not, in table order (Ferrite's first).
    pub fn all() -> Vec<EngineId> {
        let mut v: Vec<EngineId> = EngineKind::ALL.iter().map(|&k| EngineId::Ferrite(k)).collect();
        v.extend([
            EngineId::SofortPlaced(SofortIndexPlacement::Hybrid),
            EngineId::SofortPlaced(SofortIndexPlacement::Persistent),
            EngineId::NvwalSynced(ferrite::NvwalSync::Eager),
            EngineId::NvwalSynced(ferrite::NvwalSync::Checksum),
            EngineId::PagedFile(PagedProtocol::Journal),
            EngineId::PagedFile(PagedProtocol::Wal),
            EngineId::PagedFile(PagedProtocol::Nvwal),
            EngineId::SqliteWalFull,
            EngineId::SqliteWalNormal,
            EngineId::SqliteJournalFull,
            EngineId::Lmdb,
            EngineId::Pmdk,
        ]);
        v
    }

    /// Every engine this build can run.
    pub fn available() -> Vec<EngineId> {
        EngineId::available_in(ferrite_baselines::PMDK_AVAILABLE)
    }

    /// Every engine a build with (`pmdk`) or without the PMDK baseline can run. (Taking the
    /// build as an argument lets one test build check the answers of both.)
    fn available_in(pmdk: bool) -> Vec<EngineId> {
        EngineId::all().into_iter().filter(|e| e.is_available_in(pmdk)).collect()
    }

    /// What `ferrite bench` runs by default: every available engine except non-persistent
    /// Ferrite engines (the in-memory reference engine is the test oracle, not a contender; it
    /// runs on request, `--engines reference`, labelled non-persistent), the SOFORT engine's
    /// PM index placements (on request: `--engines sofort-hybrid,sofort-persistent`), NVWAL's
    /// other synchronizations and the paged engine on the file store (`paged-wal-file`, ...).
    pub fn defaults() -> Vec<EngineId> {
        EngineId::available()
            .into_iter()
            .filter(|e| match e {
                EngineId::Ferrite(k) => k.is_persistent(),
                EngineId::SofortPlaced(_) | EngineId::NvwalSynced(_) | EngineId::PagedFile(_) => {
                    false
                }
                _ => true,
            })
            .collect()
    }

    /// What the smoke pass (`ferrite bench --smoke`, `tests/smoke.rs`) runs: every available
    /// engine but NVWAL's eager and checksum variants, which are `paged-nvwal` with another
    /// commit path (covered by NVWAL's unit tests and `crates/ferrite/tests/paged_counts.rs`),
    /// and the paged engine on the file store, the same engine on another store (covered by
    /// `crates/ferrite/tests/engines_paged.rs`).
    pub fn smoke() -> Vec<EngineId> {
        EngineId::available()
            .into_iter()
            .filter(|e| !matches!(e, EngineId::NvwalSynced(_) | EngineId::PagedFile(_)))
            .collect()
    }

    /// The baselines this build can run.
    pub fn baselines() -> Vec<EngineId> {
        EngineId::baselines_in(ferrite_baselines::PMDK_AVAILABLE)
    }

    fn baselines_in(pmdk: bool) -> Vec<EngineId> {
        EngineId::available_in(pmdk)
            .into_iter()
            .filter(|e| e.family() == Family::Baseline)
            .collect()
    }

    /// Whether this build can run it.
    pub fn is_available(self) -> bool {
        self.is_available_in(ferrite_baselines::PMDK_AVAILABLE)
    }

    /// Whether a build with (`pmdk`) or without the PMDK baseline can run it.
    fn is_available_in(self, pmdk: bool) -> bool {
        match self {
            EngineId::Pmdk => pmdk,
            _ => true,
        }
    }

    /// Registry name.
    pub fn name(self) -> String {
        match self {
            EngineId::Ferrite(k) => k.name().to_owned(),
            EngineId::SofortPlaced(p) => format!("{}-{}", EngineKind::Sofort.name(), p.name()),
            EngineId::NvwalSynced(s) => format!("paged-nvwal-{}", s.name()),
            EngineId::PagedFile(p) => format!("{}-file", EngineKind::Paged { protocol: p }.name()),
            EngineId::SqliteWalFull => "sqlite-wal-full".into(),
            EngineId::SqliteWalNormal => "sqlite-wal-normal".into(),
            EngineId::SqliteJournalFull => "sqlite-journal-full".into(),
            EngineId::Lmdb => "lmdb".into(),
            EngineId::Pmdk => "pmdk".into(),
        }
    }

    /// Ferrite or baseline.
    pub fn family(self) -> Family {
        match self {
            EngineId::Ferrite(_)
            | EngineId::SofortPlaced(_)
            | EngineId::NvwalSynced(_)
            | EngineId::PagedFile(_) => Family::Ferrite,
            _ => Family::Baseline,
        }
    }

    /// One line for `--list`.
    pub fn describe(self) -> String {
        self.describe_in(ferrite_baselines::PMDK_AVAILABLE)
    }

    /// [`EngineId::describe`] in a build with (`pmdk`) or without the PMDK baseline.
    fn describe_in(self, pmdk: bool) -> String {
        match self {
            EngineId::Ferrite(k) if k.is_persistent() => format!("Ferrite {k} engine"),
            EngineId::Ferrite(k) => format!("Ferrite {k} engine: non-persistent (in-memory)"),
            EngineId::SofortPlaced(SofortIndexPlacement::Hybrid) => {
                "Ferrite sofort engine, every index a hybrid FPTree (leaves in PM)".into()
            }
            EngineId::SofortPlaced(p) => {
                format!("Ferrite sofort engine, every index at placement {}", p.name())
            }
            EngineId::NvwalSynced(s) => {
                format!("Ferrite paged-nvwal engine, {} synchronization", s.name())
            }
            EngineId::PagedFile(p) => format!(
                "Ferrite {} engine on the file store (fdatasync per sync point, plus \
                 --sync-latency-us)",
                EngineKind::Paged { protocol: p }
            ),
            EngineId::SqliteWalFull => "SQLite, WAL, synchronous=FULL (fsync per commit)".into(),
            EngineId::SqliteWalNormal => {
                "SQLite, WAL, synchronous=NORMAL (fsync at checkpoints)".into()
            }
            EngineId::SqliteJournalFull => {
                "SQLite, rollback journal, synchronous=FULL (fsync per commit)".into()
            }
            EngineId::Lmdb => "LMDB, durable on commit (fsync per commit)".into(),
            EngineId::Pmdk if self.is_available_in(pmdk) => {
                "PMDK libpmemobj B+-tree, one pmemobj transaction per commit".into()
            }
            EngineId::Pmdk => {
                "PMDK libpmemobj (not in this build: build with `--features ferrite-bench/pmdk`, \
                 which needs `apt-get install libpmemobj-dev pkg-config`)"
                    .into()
            }
        }
    }

    /// Parses a registry name (case-insensitive).
    pub fn parse(s: &str) -> Result<EngineId, String> {
        EngineId::all().into_iter().find(|e| e.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
            let names: Vec<String> = EngineId::all().into_iter().map(EngineId::name).collect();
            format!(
                "unknown engine {s:?} (expected one of {}, or all, sqlite, baselines)",
                names.join(", ")
            )
        })
    }

    /// Parses a comma-separated list with the aliases `all`, `baselines`, `sqlite`, `ferrite`.
    pub fn parse_list(items: &[String]) -> Result<Vec<EngineId>, String> {
        EngineId::parse_list_in(items, ferrite_baselines::PMDK_AVAILABLE)
    }

    /// [`EngineId::parse_list`] in a build with (`pmdk`) or without the PMDK baseline.
    fn parse_list_in(items: &[String], pmdk: bool) -> Result<Vec<EngineId>, String> {
        let mut out: Vec<EngineId> = Vec::new();
        let push = |e: EngineId, out: &mut Vec<EngineId>| {
            if !out.contains(&e) {
                out.push(e);
            }
        };
        for item in items.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty())
        {
            match item.to_ascii_lowercase().as_str() {
                "all" => EngineId::available_in(pmdk).into_iter().for_each(|e| push(e, &mut out)),
                "baselines" => {
                    EngineId::baselines_in(pmdk).into_iter().for_each(|e| push(e, &mut out))
                }
                "ferrite" => EngineId::available_in(pmdk)
                    .into_iter()
                    .filter(|e| e.family() == Family::Ferrite)
                    .for_each(|e| push(e, &mut out)),
                "sqlite" => [
                    EngineId::SqliteWalFull,
                    EngineId::SqliteWalNormal,
                    EngineId::SqliteJournalFull,
                ]
                .into_iter()
                .for_each(|e| push(e, &mut out)),
                _ => {
                    let e = EngineId::parse(item)?;
                    if !e.is_available_in(pmdk) {
                        return Err(format!(
                            "engine {item} is not in this build: {}",
                            e.describe_in(pmdk)
                        ));
                    }
                    push(e, &mut out);
                }
            }
        }
        if out.is_empty() {
            return Err("no engine given".into());
        }
        Ok(out)
    }

    /// The database options of a Ferrite engine for `setup` (`None` for a baseline).
    pub fn ferrite_options(self, setup: &SubjectSetup) -> Option<ferrite::Options> {
        match self {
            EngineId::Ferrite(kind) => Some(ferrite_db::options(kind, setup)),
            EngineId::SofortPlaced(p) => Some(
                ferrite_db::options(EngineKind::Sofort, setup)
                    .sofort(ferrite::SofortConfig::default().default_placement(p)),
            ),
            EngineId::NvwalSynced(s) => {
                let kind = EngineKind::Paged { protocol: ferrite::PagedProtocol::Nvwal };
                let o = ferrite_db::options(kind, setup);
                let cfg = ferrite::PagedConfig { nvwal_sync: s, ..o.paged_config() };
                Some(o.paged(cfg))
            }
            EngineId::PagedFile(protocol) => {
                let o = ferrite_db::options(EngineKind::Paged { protocol }, setup);
                let pmem = o.pmem_options().clone().sync_latency_ns(setup.sync_latency_ns);
                let cfg = ferrite::PagedConfig { store: PagedStore::File, ..o.paged_config() };
                Some(o.pmem(pmem).paged(cfg))
            }
            _ => None,
        }
    }

    /// Opens a fresh instance in the directory `dir` (created; must be empty or absent).
    pub fn open(self, dir: &Path, setup: &SubjectSetup) -> Result<Box<dyn Subject>, OpError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| OpError::Engine(format!("create {}: {e}", dir.display())))?;
        if let Some(options) = self.ferrite_options(setup) {
            return ferrite_db::open(options, dir, setup);
        }
        match self {
            EngineId::Ferrite(_)
            | EngineId::SofortPlaced(_)
            | EngineId::NvwalSynced(_)
            | EngineId::PagedFile(_) => Err(OpError::Engine(format!("{self}: no options"))),
            EngineId::SqliteWalFull | EngineId::SqliteWalNormal | EngineId::SqliteJournalFull => {
                sqlite::open(self, dir, setup)
            }
            EngineId::Lmdb => lmdb::open(dir, setup),
            EngineId::Pmdk => open_pmdk(dir, setup),
        }
    }
}

#[cfg(feature = "pmdk")]
fn open_pmdk(dir: &Path, setup: &SubjectSetup) -> Result<Box<dyn Subject>, OpError> {
    pmdk::open(dir, setup)
}

#[cfg(not(feature = "pmdk"))]
fn open_pmdk(_dir: &Path, _setup: &SubjectSetup) -> Result<Box<dyn Subject>, OpError> {
    Err(OpError::Engine(EngineId::Pmdk.describe()))
}

impl fmt::Display for EngineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Settings pairs into a configuration map, each key prefixed.
pub(crate) fn settings_map(prefix: &str, pairs: &[(String, String)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (format!("{prefix}{k}"), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases() {
        for e in EngineId::all() {
            assert_eq!(EngineId::parse(&e.name()), Ok(e));
        }
        assert!(EngineId::parse("nope").is_err());
        let l =
            EngineId::parse_list(&["sqlite,reference".into(), "sqlite-wal-full".into()]).unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[3], EngineId::Ferrite(EngineKind::Reference));
        assert_eq!(EngineId::parse_list(&["all".into()]).unwrap(), EngineId::available());
        assert!(EngineId::parse_list(&[]).is_err());
        assert_eq!(
            EngineId::parse_list(&["pmdk".into()]).is_ok(),
            ferrite_baselines::PMDK_AVAILABLE
        );
        // Both kinds of build, whichever this one is (CI tests the build with PMDK only).
        for pmdk in [false, true] {
            let only = EngineId::parse_list_in(&["pmdk".into()], pmdk);
            assert_eq!(only.is_ok(), pmdk, "{only:?}");
            if !pmdk {
                let e = only.unwrap_err();
                assert!(e.contains("not in this build") && e.contains("libpmemobj-dev"), "{e}");
            }
            let all = EngineId::parse_list_in(&["all".into()], pmdk).unwrap();
            assert_eq!(all.contains(&EngineId::Pmdk), pmdk);
            assert_eq!(EngineId::baselines_in(pmdk).contains(&EngineId::Pmdk), pmdk);
            assert_eq!(all, EngineId::available_in(pmdk));
        }
        // The file-store engines: named after the protocol, run on request only.
        let file: Vec<EngineId> = EngineId::parse_list(&[
            "paged-journal-file,PAGED-WAL-FILE".into(),
            "paged-nvwal-file".into(),
        ])
        .unwrap();
        assert_eq!(
            file,
            [PagedProtocol::Journal, PagedProtocol::Wal, PagedProtocol::Nvwal]
                .map(EngineId::PagedFile)
        );
        for e in &file {
            assert!(e.is_available() && e.family() == Family::Ferrite, "{e}");
            assert!(!EngineId::defaults().contains(e) && !EngineId::smoke().contains(e), "{e}");
            assert!(e.describe().contains("file store"), "{e}");
        }
        assert!(EngineId::parse("paged-fast-file").is_err(), "FAST needs PM");
    }

    #[test]
    fn file_store_engines_get_the_file_store_and_the_sync_latency() {
        let setup =
            SubjectSetup { latency_ns: 300, sync_latency_ns: 50_000, ..SubjectSetup::small() };
        let o = EngineId::PagedFile(PagedProtocol::Wal).ferrite_options(&setup).unwrap();
        assert_eq!(o.engine_kind(), EngineKind::Paged { protocol: PagedProtocol::Wal });
        assert_eq!(o.paged_config().store, PagedStore::File);
        assert_eq!(o.pmem_options().sync_latency(), 50_000);
        // Every other Ferrite engine keeps its store and no sync latency.
        for e in EngineId::all().into_iter().filter(|e| !matches!(e, EngineId::PagedFile(_))) {
            if let Some(o) = e.ferrite_options(&setup) {
                assert_eq!(o.paged_config().store, PagedStore::Pm, "{e}");
                assert_eq!(o.pmem_options().sync_latency(), 0, "{e}");
            }
        }
    }
}
