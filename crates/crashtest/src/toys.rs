//! Seeded-defect toy targets: each persists a tiny structure with one deliberate ordering bug,
//! and each has a corrected twin. The tester must find every bug and pass every twin (the
//! worked examples of the dissertation's §7.2, spec `../shared/specs/crash-testing.md` §3.9).
//!
//! The structures:
//! - **append array**: a count word `n` at data offset 0 and `u64` values from offset 64
//!   (eight per line). Appending `v` must make `a[n] = v` durable before `n + 1`.
//! - **commit-word records**: records of four words, one per line from offset 1024, and a
//!   validity bitmap word at offset 0. A record's bit must become durable after its data.
//! - **block-file log** (no pool: a simulated [`BlockFile`]): a count word at offset 0 and
//!   records of 700 bytes (two sectors each) from offset 512, one per 1 KiB. Appending must
//!   sync the record before the count that commits it is written (and sync the count before
//!   the append counts as done).
//!
//! | Toy | Bug | Found by |
//! |---|---|---|
//! | `toy-missing-flush` | `a[n]` is never flushed; `n` is persisted | the durable image after `n`'s fence |
//! | `toy-missing-fence` | `a[n]` and `n` are flushed in one epoch (no fence between) | the stash: the subset {n} without a[n] |
//! | `toy-wrong-order` | `n + 1` is persisted before `a[n]` | the durable image between the two persists |
//! | `toy-commit-first` | a record's bit is persisted before its data | the durable image between the two persists |
//! | `toy-early-store` | `n + 1` is stored (unflushed) before `a[n]` is persisted | only eviction: `n`'s line written back early |
//! | `toy-same-line` | value and count share a line and one persist, relying on M2 undeclared | only tearing |
//! | `toy-recovery-unsafe` | recovery retires its redo log before applying it | only a crash inside recovery (nesting) |
//! | `toy-handoff` | a thread hands off data it flushed without a fence; another commits it | threads: the committer's fence does not persist the producer's flush |
//! | `toy-missing-fsync` | a block-file log writes a record and its commit word with one sync for both | the subsets of unsynced sectors: the commit word's sector without the record's |
//!
//! Each `-fixed` twin is the same code with the bug corrected; each toy states the weakest
//! mode that finds it ([`Target::expect`]), and the tests check that weaker modes do not.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite_pmem::{BlockFile, CrashImage, Error, Options, Pool, SimDomain};

use crate::explore::DynTarget;
use crate::target::{Axioms, Ctx, Expect, Mode, ModelOp, ModelView, Target};

const POOL: u64 = 64 * 1024;
const APPENDS: u64 = 24;
const ARRAY: u64 = 64;
const RECORDS: u64 = 12;
const RECORD_BASE: u64 = 1024;

fn opts() -> Options {
    Options::default().layout("crashtest-toy")
}

/// The value of the `i`-th append or record word (never zero, so a lost store is visible).
fn value(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x0101_0101_0101_0101)
}

/// Model operation of the toys: the `i`-th append, or the `i`-th record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToyOp(pub u64);

impl ModelOp for ToyOp {
    fn encode(&self) -> String {
        self.0.to_string()
    }
    fn decode(s: &str) -> Option<Self> {
        s.parse().ok().map(ToyOp)
    }
}

/// The append-array variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendBug {
    /// The corrected code.
    None,
    /// `a[n]` never flushed.
    MissingFlush,
    /// No fence between the flush of `a[n]` and the flush of `n`.
    MissingFence,
    /// `n` persisted before `a[n]`.
    WrongOrder,
    /// `n + 1` stored (not flushed) before `a[n]` is persisted: fine unless the cache writes
    /// `n`'s line back early.
    EarlyStore,
}

/// A toy appending to a persistent array.
#[derive(Debug)]
pub struct AppendToy {
    name: &'static str,
    summary: &'static str,
    bug: AppendBug,
}

/// What recovery of a toy finds: nothing (the pool's creation never finished), or its words.
#[derive(Debug)]
pub enum ToyState {
    /// The image holds no complete pool.
    NoPool,
    /// The count (or bitmap) word and the values.
    Words {
        /// `n`, or the validity bitmap.
        head: u64,
        /// The array values, or the records' first words.
        values: Vec<u64>,
    },
}

fn open(image: &CrashImage) -> Result<Option<Pool>, String> {
    match Pool::open_sim(image, &opts()) {
        Ok(p) => Ok(Some(p)),
        Err(Error::Incomplete { .. }) => Ok(None),
        Err(e) => Err(format!("the pool does not open: {e}")),
    }
}

impl Target for AppendToy {
    type Op = ToyOp;
    type Recovered = ToyState;

    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn expect(&self) -> Expect {
        match self.bug {
            AppendBug::None => Expect::Pass,
            AppendBug::MissingFlush | AppendBug::WrongOrder => Expect::FoundBy(Mode::Base),
            AppendBug::MissingFence => Expect::FoundBy(Mode::Stash),
            AppendBug::EarlyStore => Expect::FoundBy(Mode::Evict),
        }
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-PM-1", "P-TOY-2"]
    }

    fn workload(&self, ctx: &mut Ctx<ToyOp>) -> Result<(), String> {
        let p = ctx.create_pool(POOL, &opts())?;
        let e = |e: Error| e.to_string();
        for i in 0..APPENDS {
            let t = ctx.begin(ToyOp(i));
            let slot = ARRAY + i * 8;
            match self.bug {
                AppendBug::None => {
                    p.store_u64(slot, value(i), Ordering::Relaxed).map_err(e)?;
                    p.persist_rule("P-TOY-1", slot, 8).map_err(e)?; // ORDER(P-TOY-1): value before count
                    p.store_u64(0, i + 1, Ordering::Release).map_err(e)?;
                    p.persist_rule("P-TOY-2", 0, 8).map_err(e)?; // ORDER(P-TOY-2): the count commits
                }
                AppendBug::MissingFlush => {
                    p.store_u64(slot, value(i), Ordering::Relaxed).map_err(e)?;
                    p.store_u64(0, i + 1, Ordering::Release).map_err(e)?;
                    p.persist_rule("P-TOY-2", 0, 8).map_err(e)?; // ORDER(P-TOY-2): BUG: value never flushed
                }
                AppendBug::MissingFence => {
                    p.store_u64(slot, value(i), Ordering::Relaxed).map_err(e)?;
                    p.flush_rule("P-TOY-1", slot, 8).map_err(e)?; // ORDER(P-TOY-1): BUG: no fence follows
                    p.store_u64(0, i + 1, Ordering::Release).map_err(e)?;
                    p.flush_rule("P-TOY-2", 0, 8).map_err(e)?; // ORDER(P-TOY-2): same epoch as the value
                    p.fence_rule("P-TOY-2"); // ORDER(P-TOY-2): one fence for both
                }
                AppendBug::EarlyStore => {
                    p.store_u64(slot, value(i), Ordering::Relaxed).map_err(e)?;
                    p.store_u64(0, i + 1, Ordering::Release).map_err(e)?; // BUG: before a[n] is durable
                    p.persist_rule("P-TOY-1", slot, 8).map_err(e)?; // ORDER(P-TOY-1): value
                    p.persist_rule("P-TOY-2", 0, 8).map_err(e)?; // ORDER(P-TOY-2): count
                }
                AppendBug::WrongOrder => {
                    p.store_u64(0, i + 1, Ordering::Release).map_err(e)?;
                    p.persist_rule("P-TOY-2", 0, 8).map_err(e)?; // ORDER(P-TOY-2): BUG: count first
                    p.store_u64(slot, value(i), Ordering::Relaxed).map_err(e)?;
                    p.persist_rule("P-TOY-1", slot, 8).map_err(e)?; // ORDER(P-TOY-1): value after
                }
            }
            ctx.done(t);
        }
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<ToyState, String> {
        let Some(p) = open(image)? else { return Ok(ToyState::NoPool) };
        let n = p.load_u64(0, Ordering::Acquire).map_err(|e| e.to_string())?;
        if n > APPENDS {
            return Err(format!("count n = {n} exceeds the {APPENDS} appends ever made"));
        }
        let values = (0..n)
            .map(|i| p.load_u64(ARRAY + i * 8, Ordering::Acquire))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Ok(ToyState::Words { head: n, values })
    }

    fn check(&self, r: &ToyState, m: &ModelView<ToyOp>) -> Result<(), String> {
        let committed = m.committed.len() as u64;
        let (n, values) = match r {
            ToyState::NoPool if committed == 0 => return Ok(()),
            ToyState::NoPool => {
                return Err(format!("expected {committed} committed appends, found no pool"));
            }
            ToyState::Words { head, values } => (*head, values),
        };
        let max = committed + m.in_flight.len() as u64;
        if n < committed || n > max {
            return Err(format!(
                "expected a count between {committed} (committed) and {max} (with in-flight), found n = {n}"
            ));
        }
        for (i, &v) in values.iter().enumerate() {
            if v != value(i as u64) {
                return Err(format!(
                    "n = {n} but a[{i}] = {v:#x}; expected {:#x} ({} append #{i})",
                    value(i as u64),
                    if (i as u64) < committed { "committed" } else { "in-flight" }
                ));
            }
        }
        Ok(())
    }
}

/// A toy publishing records with a validity bitmap (the commit word).
#[derive(Debug)]
pub struct CommitToy {
    name: &'static str,
    summary: &'static str,
    commit_first: bool,
}

impl Target for CommitToy {
    type Op = ToyOp;
    type Recovered = ToyState;

    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn expect(&self) -> Expect {
        if self.commit_first { Expect::FoundBy(Mode::Base) } else { Expect::Pass }
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-PM-1", "P-TOY-3", "P-TOY-4"]
    }

    fn workload(&self, ctx: &mut Ctx<ToyOp>) -> Result<(), String> {
        let p = ctx.create_pool(POOL, &opts())?;
        let e = |e: Error| e.to_string();
        for i in 0..RECORDS {
            let t = ctx.begin(ToyOp(i));
            let rec = RECORD_BASE + i * 64;
            let data = |p: &Pool| -> Result<(), String> {
                for w in 0..4 {
                    p.store_u64(rec + w * 8, value(i) ^ w, Ordering::Relaxed).map_err(e)?;
                }
                p.persist_rule("P-TOY-3", rec, 32).map_err(e) // ORDER(P-TOY-3): record data
            };
            let commit = |p: &Pool| -> Result<(), String> {
                p.fetch_or_u64(0, 1 << i, Ordering::AcqRel).map_err(e)?;
                p.persist_rule("P-TOY-4", 0, 8).map_err(e) // ORDER(P-TOY-4): the bit commits the record
            };
            if self.commit_first {
                commit(&p)?; // BUG: the commit word before its data
                data(&p)?;
            } else {
                data(&p)?;
                commit(&p)?;
            }
            ctx.done(t);
        }
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<ToyState, String> {
        let Some(p) = open(image)? else { return Ok(ToyState::NoPool) };
        let bits = p.load_u64(0, Ordering::Acquire).map_err(|e| e.to_string())?;
        let mut values = Vec::new();
        for i in 0..RECORDS {
            for w in 0..4 {
                values.push(
                    p.load_u64(RECORD_BASE + i * 64 + w * 8, Ordering::Acquire)
                        .map_err(|e| e.to_string())?,
                );
            }
        }
        Ok(ToyState::Words { head: bits, values })
    }

    fn check(&self, r: &ToyState, m: &ModelView<ToyOp>) -> Result<(), String> {
        let (bits, values) = match r {
            ToyState::NoPool if m.committed.is_empty() => return Ok(()),
            ToyState::NoPool => return Err("expected committed records, found no pool".into()),
            ToyState::Words { head, values } => (*head, values),
        };
        for op in &m.committed {
            if bits & (1 << op.0) == 0 {
                return Err(format!("record {} is committed but its bit is clear", op.0));
            }
        }
        for i in 0..RECORDS {
            if bits & (1 << i) == 0 {
                continue;
            }
            let known = m.committed.iter().chain(&m.in_flight).any(|op| op.0 == i);
            if !known {
                return Err(format!("record {i}'s bit is set but it was never written"));
            }
            for w in 0..4 {
                let got = values[(i * 4 + w) as usize];
                if got != value(i) ^ w {
                    return Err(format!(
                        "record {i} is valid (bit set) but word {w} = {got:#x}; expected {:#x}",
                        value(i) ^ w
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The toys, buggy and fixed, by name.
pub fn toys() -> Vec<Box<dyn DynTarget>> {
    fn boxed<T: Target>(t: T) -> Box<dyn DynTarget> {
        Box::new(Arc::new(t))
    }
    let append = |name, summary, bug| boxed(AppendToy { name, summary, bug });
    let commit = |name, summary, commit_first| boxed(CommitToy { name, summary, commit_first });
    vec![
        append(
            "toy-missing-flush",
            "seeded defect: array value never flushed before the count",
            AppendBug::MissingFlush,
        ),
        append(
            "toy-missing-flush-fixed",
            "twin of toy-missing-flush: value persisted, then count",
            AppendBug::None,
        ),
        append(
            "toy-missing-fence",
            "seeded defect: value and count flushed without a fence between",
            AppendBug::MissingFence,
        ),
        append(
            "toy-missing-fence-fixed",
            "twin of toy-missing-fence: a fence between the two flushes",
            AppendBug::None,
        ),
        append(
            "toy-wrong-order",
            "seeded defect: count persisted before the value",
            AppendBug::WrongOrder,
        ),
        append(
            "toy-wrong-order-fixed",
            "twin of toy-wrong-order: value persisted first",
            AppendBug::None,
        ),
        commit(
            "toy-commit-first",
            "seeded defect: a record's commit bit persisted before its data",
            true,
        ),
        commit(
            "toy-commit-first-fixed",
            "twin of toy-commit-first: data persisted, then the bit",
            false,
        ),
        append(
            "toy-early-store",
            "seeded defect: the count is stored before the value is durable (found only by eviction)",
            AppendBug::EarlyStore,
        ),
        append(
            "toy-early-store-fixed",
            "twin of toy-early-store: the count is stored after the value's persist",
            AppendBug::None,
        ),
        boxed(SameLineToy {
            name: "toy-same-line",
            summary: "seeded defect: value and count on one line with one persist, relying on undeclared M2 (found only by tearing)",
            split: false,
        }),
        boxed(SameLineToy {
            name: "toy-same-line-fixed",
            summary: "twin of toy-same-line: the value is persisted before the count is stored",
            split: true,
        }),
        boxed(RedoToy {
            name: "toy-recovery-unsafe",
            summary: "seeded defect: recovery retires its redo log before applying it (found only by nested crashes)",
            buggy: true,
        }),
        boxed(RedoToy {
            name: "toy-recovery-unsafe-fixed",
            summary: "twin of toy-recovery-unsafe: recovery applies the log, then retires it",
            buggy: false,
        }),
        boxed(HandoffToy {
            name: "toy-handoff",
            summary: "seeded defect: one thread hands off data it flushed but did not fence; another commits it",
            fence: false,
        }),
        boxed(HandoffToy {
            name: "toy-handoff-fixed",
            summary: "twin of toy-handoff: the producer fences before the handoff",
            fence: true,
        }),
        boxed(FsyncToy {
            name: "toy-missing-fsync",
            summary: "seeded defect: a block-file log writes a record and its commit word with one sync for both",
            sync_record: false,
        }),
        boxed(FsyncToy {
            name: "toy-missing-fsync-fixed",
            summary: "twin of toy-missing-fsync: the record is synced before its commit word is written",
            sync_record: true,
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Same-line ordering (tearing)
// ---------------------------------------------------------------------------------------------

const LINE_SLOTS: u64 = 7;

/// Count in word 0 and up to seven values in words 1..8 of one line (data offset 0).
#[derive(Debug)]
pub struct SameLineToy {
    name: &'static str,
    summary: &'static str,
    split: bool,
}

impl Target for SameLineToy {
    type Op = ToyOp;
    type Recovered = ToyState;
    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn axioms(&self) -> Axioms {
        // Deliberately not declaring M2: the buggy variant relies on it without saying so.
        Axioms { m2: false }
    }
    fn expect(&self) -> Expect {
        if self.split { Expect::Pass } else { Expect::FoundBy(Mode::Tear) }
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-PM-1", "P-TOY-2"]
    }
    fn workload(&self, ctx: &mut Ctx<ToyOp>) -> Result<(), String> {
        let p = ctx.create_pool(POOL, &opts())?;
        let e = |e: Error| e.to_string();
        for i in 0..LINE_SLOTS {
            let t = ctx.begin(ToyOp(i));
            let slot = 8 + i * 8;
            p.store_u64(slot, value(i), Ordering::Relaxed).map_err(e)?;
            if self.split {
                p.persist_rule("P-TOY-1", slot, 8).map_err(e)?; // ORDER(P-TOY-1): value first
            }
            p.store_u64(0, i + 1, Ordering::Release).map_err(e)?;
            p.persist_rule("P-TOY-2", 0, 64).map_err(e)?; // ORDER(P-TOY-2): count (one line with the value: M2 in the buggy variant)
            ctx.done(t);
        }
        Ok(())
    }
    fn recover(&self, image: &CrashImage) -> Result<ToyState, String> {
        let Some(p) = open(image)? else { return Ok(ToyState::NoPool) };
        let n = p.load_u64(0, Ordering::Acquire).map_err(|e| e.to_string())?;
        if n > LINE_SLOTS {
            return Err(format!("count n = {n} exceeds the {LINE_SLOTS} appends ever made"));
        }
        let values = (0..n)
            .map(|i| p.load_u64(8 + i * 8, Ordering::Acquire))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Ok(ToyState::Words { head: n, values })
    }
    fn check(&self, r: &ToyState, m: &ModelView<ToyOp>) -> Result<(), String> {
        // The same contract as the append array.
        AppendToy { name: "", summary: "", bug: AppendBug::None }.check(r, m)
    }
}

// ---------------------------------------------------------------------------------------------
// A redo log whose recovery must itself be crash-safe (nested crashes)
// ---------------------------------------------------------------------------------------------

const X: u64 = 0;
const Y: u64 = 64;
const LOG_VALID: u64 = 128;
const LOG_X: u64 = 136;
const LOG_Y: u64 = 144;
const TRANSFERS: u64 = 6;

/// Two counters that must stay equal (`x == y`), moved together through a redo log
/// (valid, new x, new y); recovery redoes a valid log and clears it.
#[derive(Debug)]
pub struct RedoToy {
    name: &'static str,
    summary: &'static str,
    buggy: bool,
}

/// What a redo-toy recovery found.
#[derive(Debug)]
pub enum RedoState {
    /// No complete pool.
    NoPool,
    /// The two counters and the log's valid word after recovery.
    Words {
        /// Counter x.
        x: u64,
        /// Counter y.
        y: u64,
        /// The log's valid word.
        valid: u64,
    },
}

impl Target for RedoToy {
    type Op = ToyOp;
    type Recovered = RedoState;
    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn expect(&self) -> Expect {
        if self.buggy { Expect::FoundBy(Mode::Nested) } else { Expect::Pass }
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-PM-1", "P-TOY-5", "P-TOY-6", "P-TOY-7", "P-TOY-8"]
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        // Recovery's redo persists (P-TOY-7 inside recovery) are needed and detected: a crash
        // inside recovery after a dropped redo of x finds x != y once the log is retired.
        &[(
            "#P-TOY-8 [recovery only]",
            "recovery's retire of the log: the redo is idempotent, so a log left valid by a lost retire is applied again, with the same values, by the next recovery; only new transfers after recovery (which the tester does not run) could expose it",
        )]
    }
    fn workload(&self, ctx: &mut Ctx<ToyOp>) -> Result<(), String> {
        let p = ctx.create_pool(POOL, &opts())?;
        let e = |e: Error| e.to_string();
        for i in 0..TRANSFERS {
            let t = ctx.begin(ToyOp(i));
            let n = i + 1;
            p.store_u64(LOG_X, n, Ordering::Relaxed).map_err(e)?;
            p.store_u64(LOG_Y, n, Ordering::Relaxed).map_err(e)?;
            p.persist_rule("P-TOY-5", LOG_X, 16).map_err(e)?; // ORDER(P-TOY-5): log body before valid
            p.store_u64(LOG_VALID, 1, Ordering::Release).map_err(e)?;
            p.persist_rule("P-TOY-6", LOG_VALID, 8).map_err(e)?; // ORDER(P-TOY-6): log valid before in-place stores
            p.store_u64(X, n, Ordering::Relaxed).map_err(e)?;
            p.persist_rule("P-TOY-7", X, 8).map_err(e)?; // ORDER(P-TOY-7): in-place x
            p.store_u64(Y, n, Ordering::Relaxed).map_err(e)?;
            p.persist_rule("P-TOY-7", Y, 8).map_err(e)?; // ORDER(P-TOY-7): in-place y
            p.store_u64(LOG_VALID, 0, Ordering::Release).map_err(e)?;
            p.persist_rule("P-TOY-8", LOG_VALID, 8).map_err(e)?; // ORDER(P-TOY-8): retire the log last
            ctx.done(t);
        }
        Ok(())
    }
    fn recover(&self, image: &CrashImage) -> Result<RedoState, String> {
        let Some(p) = open(image)? else { return Ok(RedoState::NoPool) };
        let e = |e: Error| e.to_string();
        if p.load_u64(LOG_VALID, Ordering::Acquire).map_err(e)? == 1 {
            let (nx, ny) = (
                p.load_u64(LOG_X, Ordering::Acquire).map_err(e)?,
                p.load_u64(LOG_Y, Ordering::Acquire).map_err(e)?,
            );
            let clear = |p: &Pool| -> Result<(), String> {
                p.store_u64(LOG_VALID, 0, Ordering::Release).map_err(e)?;
                p.persist_rule("P-TOY-8", LOG_VALID, 8).map_err(e) // ORDER(P-TOY-8): retire the log
            };
            if self.buggy {
                clear(&p)?; // BUG: the log is gone before it is applied
            }
            p.store_u64(X, nx, Ordering::Relaxed).map_err(e)?;
            p.persist_rule("P-TOY-7", X, 8).map_err(e)?; // ORDER(P-TOY-7): redo x
            p.store_u64(Y, ny, Ordering::Relaxed).map_err(e)?;
            p.persist_rule("P-TOY-7", Y, 8).map_err(e)?; // ORDER(P-TOY-7): redo y
            if !self.buggy {
                clear(&p)?;
            }
        }
        Ok(RedoState::Words {
            x: p.load_u64(X, Ordering::Acquire).map_err(e)?,
            y: p.load_u64(Y, Ordering::Acquire).map_err(e)?,
            valid: p.load_u64(LOG_VALID, Ordering::Acquire).map_err(e)?,
        })
    }
    fn check(&self, r: &RedoState, m: &ModelView<ToyOp>) -> Result<(), String> {
        let c = m.committed.len() as u64;
        let (x, y, valid) = match r {
            RedoState::NoPool if c == 0 => return Ok(()),
            RedoState::NoPool => {
                return Err(format!("expected {c} committed transfers, found no pool"));
            }
            RedoState::Words { x, y, valid } => (*x, *y, *valid),
        };
        if x != y {
            return Err(format!("expected x == y after recovery, found x = {x}, y = {y}"));
        }
        if valid != 0 {
            return Err(format!("expected the log retired after recovery, found valid = {valid}"));
        }
        let max = c + m.in_flight.len() as u64;
        if y < c || y > max {
            return Err(format!("expected between {c} and {max} transfers, found {y}"));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// A handoff between threads (needs threads)
// ---------------------------------------------------------------------------------------------

/// A producer thread writes a record and hands it to a committer thread, which sets the
/// record's bit. The producer must persist (flush **and fence**) before the handoff: the
/// committer's fence does not complete the producer's flushes (axiom M4, rule P0).
#[derive(Debug)]
pub struct HandoffToy {
    name: &'static str,
    summary: &'static str,
    fence: bool,
}

impl Target for HandoffToy {
    type Op = ToyOp;
    type Recovered = ToyState;
    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn expect(&self) -> Expect {
        if self.fence { Expect::Pass } else { Expect::FoundBy(Mode::Threads) }
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-PM-1", "P-TOY-4"]
    }
    fn workload(&self, ctx: &mut Ctx<ToyOp>) -> Result<(), String> {
        let p = ctx.create_pool(POOL, &opts())?;
        let (tx, rx) = std::sync::mpsc::channel::<(u64, crate::target::OpToken)>();
        let ctx = &*ctx;
        let fence = self.fence;
        let p = &p;
        std::thread::scope(|s| {
            let producer = s.spawn(move || -> Result<(), String> {
                let e = |e: Error| e.to_string();
                for i in 0..RECORDS {
                    let t = ctx.begin(ToyOp(i));
                    let rec = RECORD_BASE + i * 64;
                    for w in 0..4 {
                        p.store_u64(rec + w * 8, value(i) ^ w, Ordering::Relaxed).map_err(e)?;
                    }
                    p.flush_rule("P-TOY-3", rec, 32).map_err(e)?; // ORDER(P-TOY-3): record data
                    if fence {
                        p.fence_rule("P-TOY-3"); // ORDER(P-TOY-3): durable before the handoff (P0)
                    }
                    tx.send((i, t)).map_err(|_| "committer gone".to_owned())?;
                }
                Ok(())
            });
            let committer = s.spawn(move || -> Result<(), String> {
                let e = |e: Error| e.to_string();
                while let Ok((i, t)) = rx.recv() {
                    p.fetch_or_u64(0, 1 << i, Ordering::AcqRel).map_err(e)?;
                    p.persist_rule("P-TOY-4", 0, 8).map_err(e)?; // ORDER(P-TOY-4): the bit commits
                    ctx.done(t);
                }
                Ok(())
            });
            let a = producer.join().map_err(|_| "producer panicked".to_owned())?;
            let b = committer.join().map_err(|_| "committer panicked".to_owned())?;
            a.and(b)
        })
    }
    fn recover(&self, image: &CrashImage) -> Result<ToyState, String> {
        CommitToy { name: "", summary: "", commit_first: false }.recover(image)
    }
    fn check(&self, r: &ToyState, m: &ModelView<ToyOp>) -> Result<(), String> {
        CommitToy { name: "", summary: "", commit_first: false }.check(r, m)
    }
}

// ---------------------------------------------------------------------------------------------
// A log in a block file (sector crash model)
// ---------------------------------------------------------------------------------------------

const LOG_FILE: &str = "log";
const LOG_RECORDS: u64 = 6;
const LOG_BASE: u64 = 512;
const LOG_STRIDE: u64 = 1024;
/// Longer than a sector, so a record's write can tear between its two sectors.
const LOG_RECORD_LEN: usize = 700;

/// The bytes of the `i`-th record (none zero, so a lost sector is visible).
fn log_record(i: u64) -> Vec<u8> {
    (0..LOG_RECORD_LEN as u64).map(|j| (((i + 1) * 37 + j) % 255 + 1) as u8).collect()
}

/// Appends records to a log kept in a simulated block file: write the record, sync, write the
/// count word that commits it, sync. The defect writes the count before the one sync, so a
/// crash may keep the count's sector and lose (or tear) the record's.
#[derive(Debug)]
pub struct FsyncToy {
    name: &'static str,
    summary: &'static str,
    sync_record: bool,
}

/// What recovery of the block-file log finds.
#[derive(Debug)]
pub enum LogState {
    /// The image holds no log file.
    NoFile,
    /// The committed count and the records it covers.
    Log {
        /// The count word.
        count: u64,
        /// Records `0..count` as read.
        records: Vec<Vec<u8>>,
    },
}

impl Target for FsyncToy {
    type Op = ToyOp;
    type Recovered = LogState;
    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn expect(&self) -> Expect {
        if self.sync_record { Expect::Pass } else { Expect::FoundBy(Mode::Stash) }
    }
    fn rules(&self) -> &'static [&'static str] {
        if self.sync_record { &["P-TOY-9", "P-TOY-10"] } else { &["P-TOY-10"] }
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "#P-TOY-11 [recovery only]",
            "recovery's truncation only cuts bytes past the committed count, which no recovery \
             reads; if it is lost, the next recovery cuts them again",
        )]
    }
    fn workload(&self, ctx: &mut Ctx<ToyOp>) -> Result<(), String> {
        let f = ctx.create_block_file(LOG_FILE)?;
        let e = |e: Error| e.to_string();
        for i in 0..LOG_RECORDS {
            let t = ctx.begin(ToyOp(i));
            f.write_at(LOG_BASE + i * LOG_STRIDE, &log_record(i)).map_err(e)?;
            if self.sync_record {
                f.sync_rule("P-TOY-9").map_err(e)?; // ORDER(P-TOY-9): the record before its commit word
            } // BUG (without it): the count below may persist before the record
            f.write_at(0, &(i + 1).to_le_bytes()).map_err(e)?;
            f.sync_rule("P-TOY-10").map_err(e)?; // ORDER(P-TOY-10): the count commits the record
            ctx.done(t);
        }
        Ok(())
    }
    fn recover(&self, image: &CrashImage) -> Result<LogState, String> {
        if image.block(LOG_FILE).is_none() {
            return Ok(LogState::NoFile);
        }
        let e = |e: Error| e.to_string();
        let d = SimDomain::open_block_image(image).map_err(e)?;
        let f = BlockFile::open_sim(&d, LOG_FILE).map_err(e)?;
        let mut word = [0u8; 8];
        f.read_at(0, &mut word).map_err(e)?;
        let count = u64::from_le_bytes(word);
        if count > LOG_RECORDS {
            return Err(format!("count = {count} exceeds the {LOG_RECORDS} records ever written"));
        }
        let mut records = Vec::new();
        for i in 0..count {
            let mut r = vec![0u8; LOG_RECORD_LEN];
            f.read_at(LOG_BASE + i * LOG_STRIDE, &mut r).map_err(e)?;
            records.push(r);
        }
        // Cut what an unfinished append left past the committed records.
        let end = LOG_BASE + count * LOG_STRIDE;
        if f.len().map_err(e)? > end {
            f.set_len(end).map_err(e)?;
            f.sync_rule("P-TOY-11").map_err(e)?; // ORDER(P-TOY-11): drop the uncommitted tail
        }
        Ok(LogState::Log { count, records })
    }
    fn check(&self, r: &LogState, m: &ModelView<ToyOp>) -> Result<(), String> {
        let c = m.committed.len() as u64;
        let (count, records) = match r {
            LogState::NoFile if c == 0 => return Ok(()),
            LogState::NoFile => {
                return Err(format!("expected {c} committed records, found no log"));
            }
            LogState::Log { count, records } => (*count, records),
        };
        let max = c + m.in_flight.len() as u64;
        if count < c || count > max {
            return Err(format!(
                "expected a count between {c} (committed) and {max} (with in-flight), found {count}"
            ));
        }
        for (i, r) in records.iter().enumerate() {
            let want = log_record(i as u64);
            if *r != want {
                let bad = (0..LOG_RECORD_LEN).filter(|&j| r[j] != want[j]).count();
                return Err(format!(
                    "count = {count} but record {i} has {bad} of {LOG_RECORD_LEN} bytes wrong; \
                     expected it whole ({})",
                    if (i as u64) < c { "committed" } else { "in-flight" }
                ));
            }
        }
        Ok(())
    }
}
