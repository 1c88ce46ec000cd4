//! Seeded-defect toy targets: each persists a tiny structure with one deliberate ordering bug,
//! and each has a corrected twin. The tester must find every bug and pass every twin (the
//! worked examples of the dissertation's §7.2, spec `../shared/specs/crash-testing.md` §3.9).
//!
//! The structures:
//! - **append array**: a count word `n` at data offset 0 and `u64` values from offset 64
//!   (eight per line). Appending `v` must make `a[n] = v` durable before `n + 1`.
//! - **commit-word records**: records of four words, one per line from offset 1024, and a
//!   validity bitmap word at offset 0. A record's bit must become durable after its data.
//!
//! | Toy | Bug | Found by |
//! |---|---|---|
//! | `toy-missing-flush` | `a[n]` is never flushed; `n` is persisted | the durable image after `n`'s fence |
//! | `toy-missing-fence` | `a[n]` and `n` are flushed in one epoch (no fence between) | the stash: the subset {n} without a[n] |
//! | `toy-wrong-order` | `n + 1` is persisted before `a[n]` | the durable image between the two persists |
//! | `toy-commit-first` | a record's bit is persisted before its data | the durable image between the two persists |
//!
//! Each `-fixed` twin is the same code with the bug corrected.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite_pmem::{CrashImage, Error, Options, Pool};

use crate::explore::DynTarget;
use crate::target::{Ctx, ModelOp, ModelView, Target};

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
    let append = |name, summary, bug| -> Box<dyn DynTarget> {
        Box::new(Arc::new(AppendToy { name, summary, bug }))
    };
    let commit = |name, summary, commit_first| -> Box<dyn DynTarget> {
        Box::new(Arc::new(CommitToy { name, summary, commit_first }))
    };
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
    ]
}
