//! Any Ferrite engine ([`EngineKind`]) through the public `Database` API: one table per
//! workload table with columns `k i64` (primary key) and `v bytes`. Nothing here names an
//! engine: the engine's settings come from [`Options::engine_settings`], and reads go through
//! [`ferrite::Read`], which both kinds of transaction implement.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use ferrite::{
    Database, EngineKind, Error, Key, Options, PagedStore, Read, Scan, SofortIndexPlacement,
    TableSchema, Type, Value,
};

use super::{
    Body, Family, OpError, Ops, Session, Subject, SubjectInfo, SubjectSetup, TableId, TxnKind,
};
use crate::subject::LatencyModel;

pub(super) fn open(
    options: Options,
    dir: &Path,
    setup: &SubjectSetup,
) -> Result<Box<dyn Subject>, OpError> {
    let info = info(&options, setup);
    let db = Database::create(dir.join("ferrite-db"), options).map_err(engine_err)?;
    for t in &setup.tables {
        db.create_table(
            TableSchema::new(*t).column("k", Type::I64).column("v", Type::Bytes).primary_key("k"),
        )
        .map_err(engine_err)?;
    }
    Ok(Box::new(FerriteSubject { db, tables: setup.tables.clone(), info }))
}

/// The database options of `kind` for `setup` (flush instruction, injected latency). Pool
/// segments are prefaulted when mapped, as PMDK's pool is prefaulted at creation
/// (`subject/pmdk.rs`): neither engine pays first-touch page faults inside the timed phase.
/// Segments are sized from the run's data, as PMDK's pool is ([`segment_size_for`]).
pub(crate) fn options(kind: EngineKind, setup: &SubjectSetup) -> Options {
    let mut pmem = ferrite::pmem::Options::new()
        .prefault(true)
        .segment_size(segment_size_for(setup.data_bytes));
    if let Some(f) = setup.flush {
        pmem = pmem.flush(f);
    }
    pmem = match setup.latency_model {
        LatencyModel::Barrier => pmem.barrier_latency_ns(setup.latency_ns),
        LatencyModel::Line => pmem.line_latency_ns(setup.latency_ns),
    };
    Options::new().engine(kind).pmem(pmem)
}

/// The pool segment size for a run that holds about `data_bytes`: twice that, as a power of
/// two, between 4 MiB and the default 128 MiB. A run of the default scales gets the default;
/// a small one (the smoke pass: each of its hundreds of points creates a pool) no longer
/// creates, prefaults and removes 128 MiB per point, which was most of the smoke pass's time
/// (in the kernel). A pool that outgrows its first segment adds segments, as any pool set.
pub(crate) fn segment_size_for(data_bytes: u64) -> u64 {
    const MIN: u64 = 4 << 20;
    data_bytes
        .saturating_mul(2)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX)
        .clamp(MIN, ferrite::pmem::DEFAULT_SEGMENT_SIZE)
}

/// The benchmark name of the Ferrite engine `options` open: the engine's name, with the SOFORT
/// index placement appended when it is not the default (`sofort-hybrid`, as
/// [`super::EngineId::SofortPlaced`] names it), and `-file` for the paged engine on the file
/// store ([`super::EngineId::PagedFile`]).
pub(crate) fn engine_name(options: &Options) -> String {
    let kind = options.engine_kind();
    let placement = options.sofort_config().index_placement;
    let sync = options.paged_config().nvwal_sync;
    if let EngineKind::Paged { protocol } = kind
        && is_file_store(options)
    {
        super::EngineId::PagedFile(protocol).name()
    } else if kind == EngineKind::Sofort && placement != SofortIndexPlacement::default() {
        super::EngineId::SofortPlaced(placement).name()
    } else if kind.name() == "paged-nvwal" && sync != ferrite::NvwalSync::default() {
        super::EngineId::NvwalSynced(sync).name()
    } else {
        kind.name().to_owned()
    }
}

/// Whether `options` run the paged engine on its file store (block files, no pool).
fn is_file_store(options: &Options) -> bool {
    matches!(options.engine_kind(), EngineKind::Paged { .. })
        && options.paged_config().store == PagedStore::File
}

/// What a Ferrite subject opened with `options` and `setup` is.
pub(crate) fn info(options: &Options, setup: &SubjectSetup) -> SubjectInfo {
    let kind = options.engine_kind();
    let file_store = is_file_store(options);
    let settings = options.engine_settings();
    let name = engine_name(options);
    let flush = setup
        .flush
        .or_else(ferrite::pmem::best_flush)
        .map_or_else(|| "none available".to_owned(), |f| f.name().to_owned());
    let mut config: BTreeMap<String, String> = settings.into_iter().collect();
    config.insert("ferrite_version".into(), env!("CARGO_PKG_VERSION").into());
    config.insert("persistent".into(), kind.is_persistent().to_string());
    let c = kind.concurrency();
    config
        .insert("concurrency".into(), format!("writers {:?}, readers {:?}", c.writers, c.readers));
    config.insert(
        "commit".into(),
        if kind.is_persistent() {
            "Transaction::commit (durable on return)".into()
        } else {
            "Transaction::commit (committed in memory on return; nothing is durable)".into()
        },
    );
    config.insert("pmem.flush".into(), flush);
    config.insert(
        format!("pmem.{}_latency_ns", setup.latency_model.name()),
        setup.latency_ns.to_string(),
    );
    if !kind.is_persistent() {
        config.insert(
            "pmem.note".into(),
            "this engine keeps no pool: the pmem options (flush, injected latency) have no \
             effect on it"
                .into(),
        );
    }
    let nvwal = kind == EngineKind::Paged { protocol: ferrite::PagedProtocol::Nvwal };
    if file_store {
        let sync_ns = options.pmem_options().sync_latency();
        config.insert("pmem.sync_latency_ns".into(), sync_ns.to_string());
        let note = if nvwal {
            "NVWAL on the file store: the pages are an ordinary file synced with fdatasync at \
             checkpoints, each sync followed by the emulated pmem.sync_latency_ns; the log is \
             a pool set, to which the flush instruction and the injected PM latency apply"
        } else {
            "the file store keeps no pool: pages and log are ordinary files synced with \
             fdatasync, each sync followed by the emulated pmem.sync_latency_ns; the flush \
             instruction and the injected PM latency have no effect on it"
        };
        config.insert("pmem.note".into(), note.into());
    }
    let (durability_short, durability) = if file_store && nvwal {
        (
            "flush+fence per commit, fdatasync per checkpoint".to_owned(),
            "durable on commit (see ferrite info)".to_owned(),
        )
    } else if file_store {
        ("fdatasync per commit".to_owned(), "durable on commit (see ferrite info)".to_owned())
    } else if kind.is_persistent() {
        ("flush+fence per commit".to_owned(), "durable on commit (see ferrite info)".to_owned())
    } else {
        (
            "non-persistent (in-memory)".to_owned(),
            "non-persistent (in-memory): commit means committed in memory; nothing survives \
             the process"
                .to_owned(),
        )
    };
    let label = if kind.is_persistent() {
        format!("Ferrite {name}")
    } else {
        format!("Ferrite {name} (non-persistent)")
    };
    SubjectInfo {
        engine: name,
        label,
        family: Family::Ferrite,
        persistent: kind.is_persistent(),
        durability_short,
        durability,
        config,
    }
}

/// A Ferrite error as an operation error (busy, retryable, full, or other).
pub(crate) fn engine_err(e: Error) -> OpError {
    if matches!(e, Error::Busy(_)) {
        OpError::Busy(e.to_string())
    } else if e.is_retryable() {
        OpError::Retryable(e.to_string())
    } else if matches!(e, Error::PoolFull { .. }) {
        OpError::Full(e.to_string())
    } else {
        OpError::Engine(e.to_string())
    }
}

fn key(k: u64) -> Result<i64, OpError> {
    i64::try_from(k).map_err(|_| OpError::Engine(format!("key {k:#x} is not below 2^63")))
}

struct FerriteSubject {
    db: Database,
    tables: Vec<&'static str>,
    info: SubjectInfo,
}

impl Subject for FerriteSubject {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, OpError> {
        Ok(Box::new(FerriteSession { s: self }))
    }
}

struct FerriteSession<'a> {
    s: &'a FerriteSubject,
}

enum Txn {
    Read(ferrite::ReadTransaction),
    Write(ferrite::Transaction),
}

struct FerriteOps<'a> {
    txn: Txn,
    tables: &'a [&'static str],
}

impl Session for FerriteSession<'_> {
    fn run(&mut self, kind: TxnKind, body: &mut Body<'_>) -> Result<(), OpError> {
        let txn = match kind {
            TxnKind::ReadOnly => Txn::Read(self.s.db.begin_read().map_err(engine_err)?),
            TxnKind::ReadWrite => Txn::Write(self.s.db.begin().map_err(engine_err)?),
        };
        let mut ops = FerriteOps { txn, tables: &self.s.tables };
        body(&mut ops)?;
        match ops.txn {
            // A read-only transaction has nothing to commit; dropping it ends it.
            Txn::Read(_) => Ok(()),
            Txn::Write(t) => t.commit().map_err(engine_err),
        }
    }
}

impl FerriteOps<'_> {
    fn table(&self, t: TableId) -> Result<&'static str, OpError> {
        self.tables.get(t).copied().ok_or_else(|| OpError::Engine(format!("no table #{t}")))
    }

    fn writer(&mut self) -> Result<&mut ferrite::Transaction, OpError> {
        match &mut self.txn {
            Txn::Write(t) => Ok(t),
            Txn::Read(_) => Err(OpError::Engine("write in a read-only transaction".into())),
        }
    }

    /// Either kind of transaction, for reads.
    fn reader(&mut self) -> &mut dyn Read {
        match &mut self.txn {
            Txn::Write(t) => t,
            Txn::Read(r) => r,
        }
    }
}

fn bytes_of(v: &Value) -> Result<&[u8], OpError> {
    v.as_bytes().ok_or_else(|| OpError::Engine("column v is not bytes".into()))
}

impl Ops for FerriteOps<'_> {
    fn get(&mut self, table: TableId, k: u64, out: &mut Vec<u8>) -> Result<bool, OpError> {
        let t = self.table(table)?;
        let k = key(k)?;
        let row = self.reader().get(t, Value::I64(k)).map_err(engine_err)?;
        match row {
            Some(row) => {
                let v = row.get(1).ok_or_else(|| OpError::Engine("short row".into()))?;
                out.clear();
                out.extend_from_slice(bytes_of(v)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn insert(&mut self, table: TableId, k: u64, value: &[u8]) -> Result<bool, OpError> {
        let t = self.table(table)?;
        let k = key(k)?;
        match self.writer()?.insert(t, vec![Value::I64(k), Value::Bytes(value.to_vec())]) {
            Ok(()) => Ok(true),
            Err(Error::DuplicateKey { .. }) => Ok(false),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn update(&mut self, table: TableId, k: u64, value: &[u8]) -> Result<bool, OpError> {
        let t = self.table(table)?;
        let k = key(k)?;
        match self.writer()?.update(t, k, [("v", Value::Bytes(value.to_vec()))]) {
            Ok(()) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn delete(&mut self, table: TableId, k: u64) -> Result<bool, OpError> {
        let t = self.table(table)?;
        let k = key(k)?;
        match self.writer()?.delete(t, k) {
            Ok(()) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn scan(
        &mut self,
        table: TableId,
        start: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, OpError> {
        let t = self.table(table)?;
        let scan = Scan::primary().lower(Bound::Included(Key::from(key(start)?))).limit(limit);
        let rows = self.reader().scan(t, &scan).map_err(engine_err)?;
        for row in &rows {
            let k = row
                .first()
                .and_then(Value::as_i64)
                .ok_or_else(|| OpError::Engine("column k is not i64".into()))?;
            let v = row.get(1).ok_or_else(|| OpError::Engine("short row".into()))?;
            visit(k as u64, bytes_of(v)?);
        }
        Ok(rows.len())
    }

    fn count(&mut self, table: TableId) -> Result<u64, OpError> {
        let t = self.table(table)?;
        let scan = Scan::primary().columns(["k"]);
        let rows = self.reader().scan(t, &scan).map_err(engine_err)?;
        Ok(rows.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subject::EngineId;
    use ferrite::pmem::internals::testing::TestDir;

    #[test]
    fn segments_are_sized_from_the_data() {
        const MIB: u64 = 1 << 20;
        assert_eq!(segment_size_for(0), 4 * MIB);
        assert_eq!(segment_size_for(3 * MIB), 8 * MIB);
        assert_eq!(segment_size_for(9 * MIB), 32 * MIB);
        assert_eq!(segment_size_for(40 * MIB), 128 * MIB);
        assert_eq!(segment_size_for(u64::MAX), ferrite::pmem::DEFAULT_SEGMENT_SIZE);
        let setup = SubjectSetup { data_bytes: 20 * MIB, ..SubjectSetup::small() };
        let o = options(EngineKind::Sofort, &setup);
        assert_eq!(o.pmem_options().segment_size_bytes(), 64 * MIB);
        assert!(o.pmem_options().is_prefault());
    }

    #[test]
    fn every_engine_opens_and_reports_its_settings() {
        let dir = TestDir::new("bench-ferrite-subjects");
        let setup = SubjectSetup::small();
        for kind in EngineKind::all() {
            assert!(
                EngineId::all().contains(&EngineId::Ferrite(kind)),
                "{kind} is not benchmarked"
            );
        }
        for id in EngineId::all().into_iter().filter(|e| e.family() == Family::Ferrite) {
            let subject = match id.open(&dir.path().join(id.name()), &setup) {
                Ok(s) => s,
                Err(e) => panic!("{id}: {e}"),
            };
            assert_eq!(subject.info().engine, id.name());
            let config = &subject.info().config;
            let options = id.ferrite_options(&setup).expect("a Ferrite engine has options");
            for (k, v) in options.engine_settings() {
                assert_eq!(config.get(&k), Some(&v), "{id}: setting {k}");
            }
            if let EngineId::SofortPlaced(p) = id {
                assert_eq!(config.get("sofort.index_placement"), Some(&p.name().to_owned()));
            }
            if let EngineId::PagedFile(_) = id {
                assert_eq!(config.get("paged.store").map(String::as_str), Some("file"), "{id}");
                let per_commit = if id == EngineId::PagedFile(ferrite::PagedProtocol::Nvwal) {
                    "flush+fence per commit, fdatasync per checkpoint"
                } else {
                    "fdatasync per commit"
                };
                assert_eq!(subject.info().durability_short, per_commit);
                let db = dir.path().join(id.name()).join("ferrite-db");
                if id == EngineId::PagedFile(ferrite::PagedProtocol::Nvwal) {
                    assert!(db.join("log.pm").is_dir(), "{id}: NVWAL's log is a pool set");
                } else {
                    assert!(db.join("log").is_file(), "{id}");
                }
            }
            // One write and one read through the session, so the adapter is exercised.
            let mut session = subject.session().expect("session");
            session
                .run(TxnKind::ReadWrite, &mut |ops| ops.insert(0, 7, b"v").map(drop))
                .expect("insert");
            let mut out = Vec::new();
            session
                .run(TxnKind::ReadOnly, &mut |ops| {
                    assert!(ops.get(0, 7, &mut out)?);
                    Ok(())
                })
                .expect("get");
            assert_eq!(out, b"v");
        }
    }

    /// The bench's file-store engine gets the run's sync latency: a commit through a session
    /// injects exactly the latency per sync.
    #[test]
    fn a_file_store_engine_injects_the_sync_latency_per_sync() {
        const D: u64 = 5_000;
        let dir = TestDir::new("bench-ferrite-file-sync");
        let setup = SubjectSetup { sync_latency_ns: D, ..SubjectSetup::small() };
        let id = EngineId::PagedFile(ferrite::PagedProtocol::Wal);
        let subject = id.open(dir.path(), &setup).expect("open");
        assert_eq!(subject.info().config.get("pmem.sync_latency_ns"), Some(&D.to_string()));
        let mut session = subject.session().expect("session");
        let before = ferrite::pmem::Counters::snapshot();
        session.run(TxnKind::ReadWrite, &mut |ops| ops.insert(0, 1, b"v").map(drop)).unwrap();
        let d = ferrite::pmem::Counters::snapshot() - before;
        assert!(d.syncs >= 1, "a WAL commit syncs its log");
        assert_eq!(d.injected_ns, d.syncs * D);
    }
}
