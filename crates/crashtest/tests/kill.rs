//! Process-kill test of the SOFORT engine on a file-backed database ([E1]).
//!
//! The test re-executes its own binary as a child (never `fork`): the child opens (or creates)
//! the database, commits transactions and writes each acknowledged commit's sequence number to
//! stdout (a pipe) after `commit` (or `wait_durable`) returned. The parent reads the
//! acknowledgements, kills the child with SIGKILL after a seeded number `N` of them (so nothing
//! depends on timing: the child is somewhere after its `N`-th acknowledgement), reopens the
//! database and verifies it, then runs the next round on the same database.
//!
//! Every transaction moves an amount between two accounts, appends a `log` row with the next
//! sequence number (what it moved, and what it did to the `churn` table) and inserts, updates
//! or deletes one row of the small `churn` table (payloads of varying length, so row slots and
//! heap space are reused and garbage is collected). Some transactions abort. A quarter of them
//! are continuable (`begin_continuable`: every statement durable at its end); a kill inside one
//! leaves it unfinished. The verification after every kill:
//! - the database opens (recovery);
//! - an unfinished continuable transaction (at most one) is invisible; it is then resumed and
//!   finished from its completed statements (its parameters are a function of the child's seed
//!   and its sequence number) and committed, or aborted (seeded), before the checks below;
//! - every acknowledged sequence number is present, the log is `1..=max` without a gap, and at
//!   most one unacknowledged transaction (the one in flight) is there;
//! - replaying the log from the initial state gives exactly the account balances and the churn
//!   table (so no transaction is partial), and the total of the balances never changed;
//! - every secondary index holds exactly its table's rows.
//!
//! Rounds: 30 by default; `FERRITE_KILL_ROUNDS` sets another count (the long mode, documented in
//! `docs/design/sofort.md` and `docs/configuration.md`). The seed is printed and
//! `FERRITE_TEST_SEED` replays it. The database lives under `FERRITE_POOL_DIR` (default a unique
//! directory under `/dev/shm`, removed afterwards).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use ferrite::{Database, EngineKind, Options, Row, Scan, TableSchema, Type, Value};
use ferrite_pmem::SplitMix64;
use ferrite_pmem::internals::testing::TestDir;

/// Set (to the database path) only in the child.
const CHILD_PATH: &str = "FERRITE_KILL_CHILD_PATH";
/// The child's seed and round number.
const CHILD_SEED: &str = "FERRITE_KILL_CHILD_SEED";
const CHILD_ROUND: &str = "FERRITE_KILL_CHILD_ROUND";
/// What precedes an acknowledged sequence number on the child's stdout.
const ACK: &str = "FERRITE-ACK ";

const ACCOUNTS: i64 = 8;
const START_BALANCE: i64 = 1000;
const CHURN_KEYS: i64 = 12;
/// A child stops by itself after this many commits (if its parent went away).
const CHILD_MAX_COMMITS: u64 = 200_000;

fn options() -> Options {
    let kind: EngineKind = "sofort".parse().expect("this build has the SOFORT engine");
    Options::new()
        .engine(kind)
        .pmem(ferrite_pmem::Options::default().layout("ferrite-kill-test").segment_size(1 << 20))
}

fn schemas() -> [TableSchema; 3] {
    [
        TableSchema::new("account")
            .column("id", Type::I64)
            .column("balance", Type::I64)
            .primary_key("id"),
        // One row per committed transaction: sequence number, round, transfer, churn action
        // (0 delete, 1 upsert) on churn key `ck`.
        TableSchema::new("log")
            .column("seq", Type::I64)
            .column("round", Type::I64)
            .column("from", Type::I64)
            .column("to", Type::I64)
            .column("amount", Type::I64)
            .column("ck", Type::I64)
            .column("action", Type::I64)
            .primary_key("seq")
            .index("by_round", ["round"]),
        TableSchema::new("churn")
            .column("k", Type::I64)
            .column("seq", Type::I64)
            .column("code", Type::Str)
            .column("payload", Type::Bytes)
            .primary_key("k")
            .unique_index("by_code", ["code"])
            .index("by_seq", ["seq"]),
    ]
}

/// The churn row written by transaction `seq` for key `k`: its payload length and bytes are a
/// function of `(seq, k)`, so a torn or stale value is recognised.
fn churn_row(seq: i64, k: i64) -> Row {
    let mut r = SplitMix64::new((seq as u64) << 8 | k as u64);
    let len = match r.next_u64() % 4 {
        0 => 0,
        1 => r.next_u64() % 700,
        _ => r.next_u64() % 90,
    };
    let payload: Vec<u8> = (0..len).map(|_| r.next_u64() as u8).collect();
    vec![Value::I64(k), Value::I64(seq), Value::Str(format!("{seq}-{k}")), Value::Bytes(payload)]
}

fn seed() -> u64 {
    ferrite_pmem::internals::testing::test_seed()
}

// ----- the child -----

/// The child's role: runs only when the parent set `CHILD_PATH` (a no-op in a normal run).
#[test]
fn kill_child() {
    let Some(path) = std::env::var_os(CHILD_PATH) else { return };
    let num = |name: &str| -> u64 {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name}"))
    };
    if let Err(e) = child(Path::new(&path), num(CHILD_SEED), num(CHILD_ROUND) as i64) {
        panic!("child: {e}");
    }
}

fn child(path: &Path, seed: u64, round: i64) -> ferrite::Result<()> {
    let db = if path.exists() {
        Database::open(path, options())?
    } else {
        let db = Database::create(path, options())?;
        for s in schemas() {
            db.create_table(s)?;
        }
        let mut tx = db.begin()?;
        for id in 0..ACCOUNTS {
            tx.insert("account", vec![Value::I64(id), Value::I64(START_BALANCE)])?;
        }
        tx.commit()?;
        db
    };
    let mut r = db.begin_read()?;
    let last = r.scan("log", &Scan::primary().descending().limit(1))?;
    drop(r);
    let mut seq = last.first().and_then(|row| row[0].as_i64()).unwrap_or(0);
    let mut rng = SplitMix64::new(seed);
    let mut out = std::io::stdout().lock();
    for _ in 0..CHILD_MAX_COMMITS {
        let next = seq + 1;
        let p = Params::of(seed, next);
        if rng.next_u64().is_multiple_of(4) {
            // Continuable: every statement durable at its end; a kill inside leaves it
            // unfinished, and the parent resumes (and finishes) or aborts it.
            let mut tx = db.begin_continuable()?;
            transfer(&mut tx, &p, next, round, 0)?;
            tx.commit()?;
        } else {
            let mut tx = db.begin()?;
            transfer(&mut tx, &p, next, round, 0)?;
            match rng.next_u64() % 8 {
                0 => {
                    tx.abort();
                    continue;
                }
                1 => {
                    let ticket = tx.commit_deferred()?;
                    db.wait_durable(&ticket)?;
                }
                _ => tx.commit()?,
            }
        }
        seq = next;
        // A closed pipe (the parent is gone) ends the child.
        if writeln!(out, "{ACK}{seq}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
    }
    db.close()
}

/// The parameters of the transaction with sequence number `seq` of a child with seed `seed`:
/// a function of both, so the parent can finish a resumed one.
struct Params {
    from: i64,
    to: i64,
    amount: i64,
    ck: i64,
    /// Whether an existing churn row is deleted (else rewritten).
    delete: bool,
}

impl Params {
    fn of(seed: u64, seq: i64) -> Params {
        let mut rng = SplitMix64::new(seed ^ (seq as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let from = (rng.next_u64() % ACCOUNTS as u64) as i64;
        let to = (from + 1 + (rng.next_u64() % (ACCOUNTS as u64 - 1)) as i64) % ACCOUNTS;
        let amount = (rng.next_u64() % 100) as i64;
        let ck = (rng.next_u64() % CHURN_KEYS as u64) as i64;
        Params { from, to, amount, ck, delete: rng.next_u64().is_multiple_of(3) }
    }
}

/// Statements of [`transfer`] (each API call on the transaction is one).
const TRANSFER_STATEMENTS: u32 = 7;

/// Transaction `seq`'s work in `tx`: read and update the `from` balance (statements 1, 2),
/// read and update the `to` balance (3, 4), read the churn row (5), delete, rewrite or insert it (6), append the log row (7).
/// Statements up to `done` already ran (a resumed continuable transaction): their writes are
/// skipped, and the values they read are read again (the transaction's snapshot is its old
/// one, and a value is read again only while the transaction has not written it yet, so it
/// is the value read then); after the churn write (6) its action is what the row shows now.
fn transfer(
    tx: &mut ferrite::Transaction,
    p: &Params,
    seq: i64,
    round: i64,
    done: u32,
) -> ferrite::Result<()> {
    let bal = |tx: &mut ferrite::Transaction, id: i64| -> ferrite::Result<i64> {
        Ok(tx.get("account", id)?.and_then(|r| r[1].as_i64()).unwrap_or(0))
    };
    if done < 2 {
        let bf = bal(tx, p.from)?;
        tx.update("account", p.from, [("balance", bf - p.amount)])?;
    }
    if done < 4 {
        let bt = bal(tx, p.to)?;
        tx.update("account", p.to, [("balance", bt + p.amount)])?;
    }
    let exists = tx.get("churn", p.ck)?.is_some();
    let action = if done >= 6 { i64::from(exists) } else { i64::from(!exists || !p.delete) };
    if done < 6 {
        match (exists, action) {
            (true, 0) => tx.delete("churn", p.ck)?,
            (true, _) => {
                let row = churn_row(seq, p.ck);
                tx.update(
                    "churn",
                    p.ck,
                    [
                        ("seq", row[1].clone()),
                        ("code", row[2].clone()),
                        ("payload", row[3].clone()),
                    ],
                )?
            }
            (false, _) => tx.insert("churn", churn_row(seq, p.ck))?,
        }
    }
    if done < TRANSFER_STATEMENTS {
        tx.insert(
            "log",
            [seq, round, p.from, p.to, p.amount, p.ck, action]
                .into_iter()
                .map(Value::I64)
                .collect(),
        )?;
    }
    Ok(())
}

/// What the parent did with unfinished continuable transactions.
#[derive(Default)]
struct Unfinished {
    resumed: u64,
    aborted: u64,
}

// ----- the parent -----

/// Kills the child if the parent fails before it does.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The largest acknowledged sequence number in the complete lines of `r` until `stop` of them
/// were read (`None`: until end of file), and how many were read.
fn read_acks(r: &mut BufReader<ChildStdout>, stop: Option<u64>, max: &mut i64) -> u64 {
    let mut n = 0;
    let mut line = String::new();
    while stop.is_none_or(|s| n < s) {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.ends_with('\n') => {
                if let Some(pos) = line.find(ACK) {
                    let v: i64 = line[pos + ACK.len()..].trim().parse().expect("an ack number");
                    assert!(v > *max, "acks out of order: {v} after {max}");
                    *max = v;
                    n += 1;
                }
            }
            Ok(_) => break, // an incomplete last line: the child died while writing it
        }
    }
    n
}

fn rows(r: &mut ferrite::ReadTransaction, table: &str) -> Vec<Row> {
    r.scan(table, &Scan::primary()).unwrap_or_else(|e| panic!("scan {table}: {e}"))
}

/// Reopens the database and checks it against the acknowledgements (see the module docs).
/// Returns the largest sequence number present.
///
/// First, an unfinished continuable transaction (the one a kill interrupted; at most one) must
/// be invisible (the log ends at the last acknowledged commit); it is then resumed and
/// finished from its completed statements (`resume`: the parameters are the child's, from
/// `child_seed`) and committed, or aborted, as `rng` says.
fn verify(
    path: &Path,
    acked: i64,
    round: i64,
    child_seed: u64,
    rng: &mut SplitMix64,
    un: &mut Unfinished,
) -> i64 {
    let db = Database::open(path, options())
        .unwrap_or_else(|e| panic!("round {round}: the database does not reopen: {e}"));
    let unfinished = db.unfinished_transactions().expect("unfinished_transactions");
    assert!(unfinished.len() <= 1, "round {round}: one transaction runs at a time: {unfinished:?}");
    if let Some(u) = unfinished.first() {
        let mut r = db.begin_read().expect("begin_read");
        let last = r.scan("log", &Scan::primary().descending().limit(1)).expect("scan log");
        let visible = last.first().and_then(|row| row[0].as_i64()).unwrap_or(0);
        assert_eq!(
            visible, acked,
            "round {round}: an unfinished transaction's effects are visible"
        );
        drop(r);
        assert!(u.statements <= TRANSFER_STATEMENTS, "round {round}: {u:?}");
        if rng.next_u64().is_multiple_of(2) {
            let mut tx = db.resume(u.id).unwrap_or_else(|e| panic!("round {round}: resume: {e}"));
            transfer(&mut tx, &Params::of(child_seed, acked + 1), acked + 1, round, u.statements)
                .unwrap_or_else(|e| panic!("round {round}: finishing the resumed {u:?}: {e}"));
            tx.commit()
                .unwrap_or_else(|e| panic!("round {round}: commit of the resumed {u:?}: {e}"));
            un.resumed += 1;
        } else {
            db.abort_unfinished(u.id).unwrap_or_else(|e| panic!("round {round}: abort: {e}"));
            un.aborted += 1;
        }
    }
    // The engine's own invariants first (no transaction is open yet), then the replay and
    // index checks against the acknowledgements.
    if let Err(e) = db.check() {
        panic!("round {round}: the engine's check() failed after recovery: {e}");
    }
    let mut r = db.begin_read().expect("begin_read");
    let log = rows(&mut r, "log");
    let accounts = rows(&mut r, "account");
    let churn = rows(&mut r, "churn");
    let max = log.last().and_then(|row| row[0].as_i64()).unwrap_or(0);
    for (i, row) in log.iter().enumerate() {
        assert_eq!(row[0].as_i64(), Some(i as i64 + 1), "round {round}: the log has a gap at {i}");
    }
    assert!(
        max >= acked,
        "round {round}: acknowledged commit {acked} lost (the log ends at {max})"
    );
    assert!(max <= acked + 1, "round {round}: {max} in the log, only {acked} acknowledged");
    // Replay the log.
    let mut balances: BTreeMap<i64, i64> = (0..ACCOUNTS).map(|id| (id, START_BALANCE)).collect();
    let mut want_churn: BTreeMap<i64, Row> = BTreeMap::new();
    for row in &log {
        let f: Vec<i64> = row.iter().map(|v| v.as_i64().expect("i64")).collect();
        let (seq, from, to, amount, ck, action) = (f[0], f[2], f[3], f[4], f[5], f[6]);
        *balances.get_mut(&from).expect("account") -= amount;
        *balances.get_mut(&to).expect("account") += amount;
        if action == 0 {
            want_churn.remove(&ck);
        } else {
            want_churn.insert(ck, churn_row(seq, ck));
        }
    }
    let got: BTreeMap<i64, i64> = accounts
        .iter()
        .map(|r| (r[0].as_i64().expect("id"), r[1].as_i64().expect("balance")))
        .collect();
    assert_eq!(
        got.values().sum::<i64>(),
        ACCOUNTS * START_BALANCE,
        "round {round}: the total changed"
    );
    assert_eq!(got, balances, "round {round}: balances differ from the log's replay");
    let got_churn: BTreeMap<i64, Row> =
        churn.iter().map(|r| (r[0].as_i64().expect("k"), r.clone())).collect();
    assert!(
        got_churn == want_churn,
        "round {round}: the churn table differs from the log's replay"
    );
    // Secondary indexes hold exactly the rows.
    for (table, index, all) in
        [("log", "by_round", &log), ("churn", "by_code", &churn), ("churn", "by_seq", &churn)]
    {
        let mut via = r
            .scan(table, &Scan::index(index))
            .unwrap_or_else(|e| panic!("scan {table}.{index}: {e}"));
        via.sort();
        let mut want = all.clone();
        want.sort();
        assert!(via == want, "round {round}: index {table}.{index} disagrees with the table");
    }
    drop(r);
    db.close().unwrap_or_else(|e| panic!("round {round}: close: {e}"));
    max
}

fn rounds() -> u64 {
    std::env::var("FERRITE_KILL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(30)
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_commit() {
    if std::env::var_os(CHILD_PATH).is_some() {
        return; // a child runs only `kill_child`
    }
    let seed = seed();
    let rounds = rounds();
    let dir = TestDir::new("kill");
    let path: PathBuf = dir.join("db");
    let mut rng = SplitMix64::new(seed);
    let exe = std::env::current_exe().expect("current_exe");
    let mut acked = 0i64;
    let mut committed_total = 0u64;
    let mut un = Unfinished::default();
    for round in 0..rounds as i64 {
        let n = 1 + rng.next_u64() % 80;
        let child_seed = rng.next_u64();
        let child = Command::new(&exe)
            .args(["--exact", "kill_child", "--nocapture", "--quiet", "--test-threads=1"])
            .env(CHILD_PATH, &path)
            .env(CHILD_SEED, child_seed.to_string())
            .env(CHILD_ROUND, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let mut guard = Guard(child);
        let mut out = BufReader::new(guard.0.stdout.take().expect("piped stdout"));
        let got = read_acks(&mut out, Some(n), &mut acked);
        if got < n {
            let status = guard.0.wait().expect("wait");
            panic!(
                "round {round} (seed {seed:#x}): the child ended after {got} of {n} acks: {status}"
            );
        }
        guard.0.kill().expect("SIGKILL the child");
        // Acks written before the kill are acknowledged commits too.
        read_acks(&mut out, None, &mut acked);
        drop(guard);
        let max = verify(&path, acked, round, child_seed, &mut rng, &mut un);
        committed_total = max as u64;
        acked = max; // the in-flight transaction, if it survived, is now acknowledged state
    }
    eprintln!(
        "{rounds} kills, {committed_total} commits survived, all verified; unfinished continuable \
         transactions: {} resumed and committed, {} aborted (seed {seed:#x})",
        un.resumed, un.aborted
    );
}
