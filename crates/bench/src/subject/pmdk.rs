//! The PMDK libpmemobj baseline (`ferrite_baselines::pmdk`, feature `pmdk`) as a subject.

use std::path::Path;

use ferrite_baselines::pmdk::{self, Pmdk, PmdkConfig, PmdkTxn};

use super::{
    Body, EngineId, Family, OpError, Ops, Session, Subject, SubjectInfo, SubjectSetup, TableId,
    TxnKind, settings_map,
};

pub(super) fn open(dir: &Path, setup: &SubjectSetup) -> Result<Box<dyn Subject>, OpError> {
    // The pool is allocated (and prefaulted) whole at creation: size it from the data the run
    // may write, with room for the allocator's headers (values land in 128-byte classes for
    // 100-byte values) and the tree's leaves (about 35 bytes per entry), plus 64 MiB.
    let pool_size = setup.data_bytes.saturating_mul(5) / 2 + (64 << 20);
    let db = Pmdk::create(&dir.join("pmdk.pool"), &PmdkConfig { pool_size }, &setup.tables)?;
    let mut config = settings_map("", db.settings());
    config.insert("library".into(), format!("libpmemobj {} (Debian, C shim)", pmdk::VERSION));
    Ok(Box::new(PmdkSubject {
        db,
        info: SubjectInfo {
            engine: EngineId::Pmdk.name(),
            label: "PMDK libpmemobj".into(),
            family: Family::Baseline,
            persistent: true,
            durability_short: "flush+fence per commit".into(),
            durability: pmdk::DURABILITY.into(),
            config,
        },
    }))
}

struct PmdkSubject {
    db: Pmdk,
    info: SubjectInfo,
}

impl Subject for PmdkSubject {
    fn info(&self) -> &SubjectInfo {
        &self.info
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, OpError> {
        Ok(Box::new(PmdkSession { db: &self.db }))
    }
}

struct PmdkSession<'a> {
    db: &'a Pmdk,
}

impl Session for PmdkSession<'_> {
    fn run(&mut self, kind: TxnKind, body: &mut Body<'_>) -> Result<(), OpError> {
        match kind {
            TxnKind::ReadWrite => self.db.write(|t| body(&mut PmdkOps(t))),
            TxnKind::ReadOnly => self.db.read(|t| body(&mut PmdkOps(t))),
        }
    }
}

struct PmdkOps<'t, 'a>(&'t mut PmdkTxn<'a>);

impl Ops for PmdkOps<'_, '_> {
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
