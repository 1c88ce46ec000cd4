//! The LMDB baseline (`ferrite_baselines::lmdb`) as a subject.

use std::path::Path;

use ferrite_baselines::lmdb::{self, Lmdb, LmdbConfig, LmdbReader, LmdbTxn};

use super::{
    Body, EngineId, Family, OpError, Ops, Session, Subject, SubjectInfo, SubjectSetup, TableId,
    TxnKind, settings_map,
};

pub(super) fn open(dir: &Path, setup: &SubjectSetup) -> Result<Box<dyn Subject>, OpError> {
    let db = Lmdb::create(&dir.join("lmdb"), &config(setup), &setup.tables)?;
    let info = info(&db);
    Ok(Box::new(LmdbSubject { db, info }))
}

/// The LMDB configuration for `setup`.
pub(crate) fn config(setup: &SubjectSetup) -> LmdbConfig {
    // The map is address space only (the file grows with use): leave ample room.
    let map_size = setup.data_bytes.saturating_mul(4).max(4 << 30);
    LmdbConfig { map_size, max_readers: 126 }
}

/// What the opened LMDB baseline is.
pub(crate) fn info(db: &Lmdb) -> SubjectInfo {
    let mut config = settings_map("", db.settings());
    config.insert("library".into(), format!("{} (bundled, lmdb-master-sys)", lmdb::version()));
    SubjectInfo {
        engine: EngineId::Lmdb.name(),
        label: "LMDB".into(),
        family: Family::Baseline,
        persistent: true,
        durability_short: "fsync per commit".into(),
        durability: lmdb::DURABILITY.into(),
        config,
    }
}

struct LmdbSubject {
    db: Lmdb,
    info: SubjectInfo,
}

impl Subject for LmdbSubject {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, OpError> {
        Ok(Box::new(LmdbSession { db: &self.db, reader: self.db.reader()? }))
    }
}

struct LmdbSession<'a> {
    db: &'a Lmdb,
    reader: LmdbReader,
}

impl Session for LmdbSession<'_> {
    fn run(&mut self, kind: TxnKind, body: &mut Body<'_>) -> Result<(), OpError> {
        match kind {
            TxnKind::ReadWrite => self.db.write(|t| body(&mut LmdbOps(t))),
            TxnKind::ReadOnly => self.reader.read(|t| body(&mut LmdbOps(t))),
        }
    }
}

struct LmdbOps<'t, 'a>(&'t mut LmdbTxn<'a>);

impl Ops for LmdbOps<'_, '_> {
    fn get(&mut self, table: TableId, key: u64, out: &mut Vec<u8>) -> Result<bool, OpError> {
        Ok(self.0.get(table, key, out)?)
    }
    fn insert(&mut self, table: TableId, key: u64, value: &[u8]) -> Result<bool, OpError> {
        Ok(self.0.insert(table, key, value)?)
    }
    fn update(&mut self, table: TableId, key: u64, value: &[u8]) -> Result<bool, OpError> {
        Ok(self.0.update(table, key, value)?)
    }
    fn delete(&mut self, table: TableId, key: u64) -> Result<bool, OpError> {
        Ok(self.0.delete(table, key)?)
    }
    fn scan(
        &mut self,
        table: TableId,
        start: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, OpError> {
        Ok(self.0.scan(table, start, limit, visit)?)
    }
    fn count(&mut self, table: TableId) -> Result<u64, OpError> {
        Ok(self.0.count(table)?)
    }
}
