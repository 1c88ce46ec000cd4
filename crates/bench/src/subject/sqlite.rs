//! The SQLite baselines (`ferrite_baselines::sqlite`) as subjects.

use std::path::Path;

use ferrite_baselines::sqlite::{
    self, JournalMode, Sqlite, SqliteConfig, SqliteConn, SqliteTxn, Synchronous,
};

use super::{
    Body, EngineId, Family, OpError, Ops, Session, Subject, SubjectInfo, SubjectSetup, TableId,
    TxnKind, settings_map,
};

pub(super) fn open(
    id: EngineId,
    dir: &Path,
    setup: &SubjectSetup,
) -> Result<Box<dyn Subject>, OpError> {
    let (config, label, short) = config(id, setup);
    let db = Sqlite::create(&dir.join("sqlite.db"), config, &setup.tables)?;
    let info = info(id, &db, label, short);
    Ok(Box::new(SqliteSubject { db, info }))
}

/// The configuration of the SQLite baseline `id` for `setup`, its label and its short
/// durability label.
pub(crate) fn config(
    id: EngineId,
    setup: &SubjectSetup,
) -> (SqliteConfig, &'static str, &'static str) {
    let (journal, sync, label, short) = match id {
        EngineId::SqliteWalFull => {
            (JournalMode::Wal, Synchronous::Full, "SQLite WAL+FULL", "fsync per commit")
        }
        EngineId::SqliteWalNormal => {
            (JournalMode::Wal, Synchronous::Normal, "SQLite WAL+NORMAL", "fsync at checkpoint")
        }
        _ => (JournalMode::Rollback, Synchronous::Full, "SQLite journal+FULL", "fsync per commit"),
    };
    let mut config = SqliteConfig::new(journal, sync);
    // A page cache large enough for the working set: twice the data, at least 64 MiB.
    config.cache_kib = (setup.data_bytes.saturating_mul(2) / 1024).max(64 * 1024);
    (config, label, short)
}

/// What the opened SQLite baseline `id` is.
pub(crate) fn info(id: EngineId, db: &Sqlite, label: &str, short: &str) -> SubjectInfo {
    let mut cfg = settings_map("", db.settings());
    cfg.insert("library".into(), format!("SQLite {} (bundled, rusqlite)", sqlite::version()));
    let durability = db.config().durability().to_owned();
    SubjectInfo {
        engine: id.name(),
        label: label.into(),
        family: Family::Baseline,
        persistent: true,
        durability_short: short.into(),
        durability,
        config: cfg,
    }
}

struct SqliteSubject {
    db: Sqlite,
    info: SubjectInfo,
}

impl Subject for SqliteSubject {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, OpError> {
        Ok(Box::new(SqliteSession { conn: self.db.connect()? }))
    }

    fn before_timing(&self) -> Result<(), OpError> {
        Ok(self.db.checkpoint()?)
    }
}

struct SqliteSession {
    conn: SqliteConn,
}

impl Session for SqliteSession {
    fn run(&mut self, kind: TxnKind, body: &mut Body<'_>) -> Result<(), OpError> {
        match kind {
            TxnKind::ReadWrite => self.conn.write(|t| body(&mut SqliteOps(t))),
            TxnKind::ReadOnly => self.conn.read(|t| body(&mut SqliteOps(t))),
        }
    }
}

struct SqliteOps<'t, 'c>(&'t mut SqliteTxn<'c>);

impl Ops for SqliteOps<'_, '_> {
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
