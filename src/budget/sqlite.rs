//! The embedded store, the default for a single gateway: the books in one
//! SQLite file that survives a restart and a `kill -9` at any instant
//! (docs/design.md, "Stores").
//!
//! A reserve, a settle, an expiry or an adjustment is decided in memory,
//! on the `desk`, under one lock: the desk holds every open reservation,
//! the counters in use and which exec ids the file knows, so a call never
//! waits for the file. Its changes are appended to the `journal` (one
//! `pwrite` into the page cache, which a killed process cannot take back)
//! before it is answered, and the `writer` thread posts them to the file a
//! few milliseconds later, many calls to a transaction. Opening the file
//! posts what the journal holds beyond what the file has, before the first
//! call, so an answered call is never lost by a crash. Time is the
//! gateway's clock, read under the desk's lock: with one process per file,
//! it is the store's clock.
//!
//! The rules are `budget::books`, the same as the memory store's; the
//! `desk` is what they read and change here. `schema` opens the file (and
//! locks it to one gateway), `record` keeps a reservation as a row,
//! `change` what the rules decide as the journal keeps it and as posting
//! writes it, `counters` the counters the writer keeps in memory and
//! writes once per transaction, `aggregates` the spend per day, key and
//! model, `records` the admin API's keys and orgs, `upkeep` forgetting,
//! folding and reconciling, `checkpoint` copies the log into the file
//! on a thread of its own, and `damage` decides what start-up does with a
//! journal that cannot be read whole.

mod aggregates;
mod alerts;
mod change;
mod checkpoint;
mod counters;
mod damage;
mod desk;
mod journal;
mod record;
mod records;
mod schema;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod upkeep;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use chrono::{DateTime, TimeDelta, Utc};
use rusqlite::{Connection, TransactionBehavior};

pub use schema::SqliteOpenError;

use super::aggregates::first_kept_day;
use super::books;
use super::caps;
use super::records::{AuditEntry, RecordSet, RecordWrite, WriteOutcome};
use super::store::{Books, Records, Reports, Upkeep};
use super::{
    AdjustOutcome, Adjustment, ClaimedReserve, CustomerSeen, OpenHold, Reconciliation,
    ReserveOutcome, ReserveRequest, Rules, RunState, Scope, ScopeState, SettleOutcome, Settlement,
    SpendQuery, SpendRow, StoreError,
};
use crate::money::UsdMicros;
use desk::{Batch, Desk};
use journal::Journal;
use writer::{Msg, Writer};

/// How many due reservations one `reserve` expires before its own work;
/// the periodic sweep takes the rest.
const LAZY_SWEEP_LIMIT: usize = 64;

/// How many reservations the periodic sweep expires per hold of the
/// desk's lock.
const SWEEP_PAGE: usize = 256;

/// A handle to the store; clones share the same file, desk and writer.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    queue: mpsc::Sender<Msg>,
    /// The owner's books in memory; a reader beside it has none.
    desk: Option<Arc<Mutex<Desk>>>,
    clock: Clock,
    path: PathBuf,
    rules: Rules,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The desk holds a sender too, so the writer is told to stop.
        let _ = self.queue.send(Msg::Stop);
    }
}

/// Where the store's time comes from: the wall clock, or in tests a clock
/// moved by hand.
#[derive(Clone)]
pub(crate) enum Clock {
    Wall,
    #[cfg(test)]
    Manual(Arc<super::memory::testing::ManualClock>),
}

impl Clock {
    fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::Wall => Utc::now(),
            #[cfg(test)]
            Clock::Manual(clock) => clock.now(),
        }
    }
}

impl SqliteStore {
    /// Opens (creating or upgrading) the file at `path` as its one gateway,
    /// posting what its journal holds beyond it, to keep its books by
    /// `rules`. A second process on the same file is refused, naming the
    /// holder.
    pub fn open(path: &Path, rules: Rules) -> Result<Self, SqliteOpenError> {
        let (conn, lock) = schema::open_owner(path)?;
        Self::start_owner(conn, lock, Clock::Wall, path, rules)
    }

    /// Opens the file at `path` to read it beside the gateway that owns it
    /// (`tollgate reconcile`): nothing is created, locked or written.
    pub fn open_reader(path: &Path) -> Result<Self, SqliteOpenError> {
        let conn = schema::open_reader(path)?;
        let (queue, jobs) = mpsc::channel();
        let writer = Writer {
            conn,
            clock: Clock::Wall,
            behavior: TransactionBehavior::Deferred,
            label: path.display().to_string(),
            desk: None,
            checkpoints: None,
        };
        spawn_writer(writer, jobs, None);
        Ok(Self::handle(
            queue,
            None,
            Clock::Wall,
            path,
            Rules::default(),
        ))
    }

    /// Posts the journal's records the file lacks, loads the desk, and
    /// starts the writer and the checkpoints.
    fn start_owner(
        conn: Connection,
        lock: schema::OwnerLock,
        clock: Clock,
        path: &Path,
        rules: Rules,
    ) -> Result<Self, SqliteOpenError> {
        let label = path.display().to_string();
        let (journal, posted) = recover(path, &conn)?;
        let (queue, jobs) = mpsc::channel();
        let desk = schema::open_desk_reader(path).and_then(|file| {
            Desk::load(file, journal, posted, queue.clone(), label.clone())
                .map_err(|e| schema::classify(path, e))
        })?;
        let desk = Arc::new(Mutex::new(desk));
        let (checkpoints, requests) = mpsc::sync_channel::<()>(1);
        checkpoint::spawn(path.to_owned(), requests, checkpoint::EVERY);
        let writer = Writer {
            conn,
            clock: clock.clone(),
            behavior: TransactionBehavior::Immediate,
            label,
            desk: Some(Arc::clone(&desk)),
            checkpoints: Some(checkpoints),
        };
        spawn_writer(writer, jobs, Some(lock));
        Ok(Self::handle(queue, Some(desk), clock, path, rules))
    }

    fn handle(
        queue: mpsc::Sender<Msg>,
        desk: Option<Arc<Mutex<Desk>>>,
        clock: Clock,
        path: &Path,
        rules: Rules,
    ) -> Self {
        SqliteStore {
            shared: Arc::new(Shared {
                queue,
                desk,
                clock,
                path: path.to_owned(),
                rules,
            }),
        }
    }

    /// The file the store keeps its books in.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Runs `op` on the writer thread, in its next transaction, once the
    /// journal records written before it are posted.
    async fn call<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut writer::Db<'_>, &Clock) -> rusqlite::Result<Result<T, StoreError>>
            + Send
            + 'static,
    ) -> Result<T, StoreError> {
        let answer = writer::call(&self.shared.queue, op)?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the store's writer has stopped".to_owned()))?
    }

    /// Runs `op` on the desk, at the store's time, and appends what it
    /// changed to the journal before answering; if the journal cannot take
    /// it, or the file cannot be read, nothing of it happened.
    fn on_desk<T>(
        &self,
        op: impl FnOnce(&mut Desk, DateTime<Utc>) -> rusqlite::Result<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let Some(desk) = &self.shared.desk else {
            return Err(StoreError::Refused(format!(
                "sqlite store {} is open to read only",
                self.shared.path.display()
            )));
        };
        let mut desk = writer::lock(desk);
        let now = self.shared.clock.now();
        match op(&mut desk, now) {
            Ok(answer) => {
                desk.commit()?;
                answer
            }
            Err(error) => {
                desk.rollback();
                tracing::error!(file = %self.shared.path.display(), %error, "cannot read the store's file; the call was refused and nothing was changed");
                Err(StoreError::Unavailable(format!(
                    "sqlite store {}: {error}",
                    self.shared.path.display()
                )))
            }
        }
    }

    /// Runs a reserve on the desk after the bounded lazy sweep, unless the
    /// file has refused its postings for longer than the journal may hold.
    fn after_lazy_sweep<T>(
        &self,
        reserve: impl FnOnce(&mut Desk, &Rules, DateTime<Utc>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let rules = &self.shared.rules;
        let (outcome, expired) = self.on_desk(|desk, now| {
            if let Some(refusal) = desk.refusal() {
                return Ok(Err(refusal));
            }
            let expired = books::expire_due(desk, rules, now, LAZY_SWEEP_LIMIT)?;
            let outcome = reserve(desk, rules, now)?;
            Ok(Ok((outcome, expired)))
        })?;
        self.log_expired(expired);
        Ok(outcome)
    }

    fn log_expired(&self, expired: usize) {
        if expired > 0 {
            super::log_expired(None, expired, self.shared.rules.on_expiry);
        }
    }
}

// === impl Books for SqliteStore ===

/// Each call is decided on the desk, under its lock, and journaled before
/// it is answered.
impl Books for SqliteStore {
    /// Reserves `req.amount` against the key and its org, all or nothing;
    /// a retry with the same `exec_id` gets the first answer.
    async fn reserve(&self, req: &ReserveRequest) -> Result<ReserveOutcome, StoreError> {
        self.after_lazy_sweep(|desk, rules, now| books::reserve(desk, rules, req, now))
    }

    /// Reserves like [`SqliteStore::reserve`], unless an open reservation
    /// under another exec id holds `claim`.
    async fn reserve_claimed(
        &self,
        req: &ReserveRequest,
        claim: &str,
    ) -> Result<ClaimedReserve, StoreError> {
        self.after_lazy_sweep(|desk, rules, now| {
            books::reserve_claimed(desk, rules, req, claim, now)
        })
    }

    /// Settles a reservation with its actual cost, exactly once.
    async fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        self.on_desk(|desk, now| books::settle(desk, &self.shared.rules, settlement, now))
    }

    /// Applies an operator's refund or credit, once per exec id.
    async fn adjust(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        self.on_desk(|desk, now| books::adjust(desk, &self.shared.rules, adjustment, now))
    }

    /// The scope's counters in the period current on the store's clock.
    async fn scope_state(&self, scope: &Scope) -> Result<ScopeState, StoreError> {
        self.on_desk(|desk, now| books::scope_state(desk, scope, now).map(Ok))
    }

    /// A run's cap and counters, if it is remembered.
    async fn run_state(&self, id: &str) -> Result<Option<RunState>, StoreError> {
        self.on_desk(|desk, _| books::run_state(desk, id).map(Ok))
    }

    async fn customers(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CustomerSeen>, StoreError> {
        let customers = self.on_desk(|desk, _| desk.customers_of(key, after, limit).map(Ok))?;
        Ok(customers
            .into_iter()
            .map(|(id, last_call)| CustomerSeen {
                id,
                last_call: books::record::from_millis(last_call),
            })
            .collect())
    }

    /// Up to `limit` open reservations, oldest first.
    async fn open_holds(&self, limit: usize) -> Result<Vec<OpenHold>, StoreError> {
        self.on_desk(|desk, _| Ok(Ok(desk.open_holds(limit))))
    }
}

// === impl Reports for SqliteStore ===

impl Reports for SqliteStore {
    /// The spend aggregate rows `query` wants, by day, key and model.
    async fn spend(&self, query: &SpendQuery) -> Result<Vec<SpendRow>, StoreError> {
        let query = query.clone();
        self.call(move |db, _| aggregates::spend(db.conn(), &query).map(Ok))
            .await
    }

    /// How many reservations are open and the sum of their amounts.
    async fn open_reservations(&self) -> Result<(usize, UsdMicros), StoreError> {
        self.on_desk(|desk, _| Ok(Ok(desk.open_sum())))
    }

    /// Every scope and period of the books with its counter, folded sum,
    /// ledger sum and open sum, sorted by scope and period. Beside the
    /// gateway that owns the file, or on a file no gateway runs on, the
    /// books are the file and what its journal holds beyond it.
    async fn reconcile(&self) -> Result<Vec<Reconciliation>, StoreError> {
        if self.shared.desk.is_some() {
            return self
                .call(|db, _| upkeep::reconcile(db.counters_in_sql()?).map(Ok))
                .await;
        }
        let path = self.shared.path.clone();
        tokio::task::spawn_blocking(move || reconcile_with_journal(&path))
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
            .map_err(|e| {
                StoreError::Unavailable(format!("sqlite store {}: {e}", self.shared.path.display()))
            })
    }
}

// === impl Upkeep for SqliteStore ===

impl Upkeep for SqliteStore {
    /// Whether the writer answers and the file can be read.
    async fn ping(&self) -> Result<(), StoreError> {
        self.call(|db, _| {
            db.conn().query_row("SELECT 1", [], |_| Ok(()))?;
            Ok(Ok(()))
        })
        .await
    }

    /// Returns once every call answered before it is posted to the file
    /// (or the file refused it, which the writer logs).
    /// Posts the journal, then copies the log into the database file
    /// and empties it: a stopped gateway leaves one file, whole. If every
    /// record is posted, the file says so (`meta.stopped_clean_at`): its
    /// journal then holds nothing it lacks, and may be left behind.
    async fn flush(&self) -> Result<(), StoreError> {
        self.call(|_, _| Ok(Ok(()))).await?;
        if let Some(desk) = self.shared.desk.clone() {
            tokio::task::spawn_blocking(move || writer::lock(&desk).mark_stopped_clean())
                .await
                .map_err(|error| StoreError::Unavailable(error.to_string()))?
                .map_err(|error| {
                    StoreError::Unavailable(format!("cannot mark it clean: {error}"))
                })?;
        }
        let path = self.path().to_owned();
        tokio::task::spawn_blocking(move || checkpoint::truncate(&path))
            .await
            .map_err(|error| StoreError::Unavailable(error.to_string()))?
            .map_err(|error| StoreError::Unavailable(format!("checkpoint: {error}")))
    }

    /// Expires every reservation past its deadline, forgets idle runs,
    /// closed records past their retention and adjustments past theirs,
    /// folds ledger entries older than the ledger retention and deletes
    /// aggregate rows older than theirs; returns how many expired.
    async fn sweep(&self) -> Result<usize, StoreError> {
        let rules = &self.shared.rules;
        let mut expired = 0;
        loop {
            let page =
                self.on_desk(|desk, now| books::expire_due(desk, rules, now, SWEEP_PAGE).map(Ok))?;
            expired += page;
            if page < SWEEP_PAGE {
                break;
            }
        }
        self.log_expired(expired);
        self.on_desk(|desk, now| books::forget_idle_runs(desk, rules, now).map(Ok))?;
        self.on_desk(|desk, now| books::forget_idle_customers(desk, rules, now).map(Ok))?;
        let retention = to_delta(rules.ledger_retention);
        let aggregate_days = rules.aggregate_retention_days;
        self.call(move |db, clock| {
            let now = clock.now();
            // The statements below read and change counters themselves.
            let conn = db.counters_in_sql()?;
            let forgotten = upkeep::forget_due(conn, now)?;
            upkeep::forget_adjustments(conn, now)?;
            upkeep::fold_before(conn, upkeep::before(now, retention))?;
            upkeep::forget_windows(conn, &caps::forget_windows_before(now))?;
            aggregates::drop_before(conn, &first_kept_day(now, aggregate_days))?;
            db.forgot(forgotten);
            Ok(Ok(()))
        })
        .await?;
        Ok(expired)
    }
}

// === impl Records for SqliteStore ===

/// The admin API's keys and orgs (see `budget::records`), in the `records`
/// and `audit` tables. Each call is one job on the writer like the books',
/// so a write is answered only once committed.
impl Records for SqliteStore {
    /// The version the documents are at: one row read.
    async fn records_version(&self) -> Result<u64, StoreError> {
        self.call(|db, _| records::version(db.conn()).map(Ok)).await
    }

    /// Every document and the version, read in one transaction.
    async fn records(&self) -> Result<RecordSet, StoreError> {
        self.call(|db, _| records::all(db.conn()).map(Ok)).await
    }

    /// Writes one document if it is at the revision the writer expects,
    /// moving the version on and appending the audit entry, in one
    /// transaction.
    async fn write_record(&self, write: &RecordWrite) -> Result<WriteOutcome, StoreError> {
        let write = write.clone();
        self.call(move |db, clock| records::write(db.conn(), &write, clock.now()).map(Ok))
            .await
    }

    /// Up to `limit` audit entries, newest first, older than `before`.
    async fn audit(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.call(move |db, _| records::audit(db.conn(), before, limit).map(Ok))
            .await
    }
}

/// Starts the writer on a thread of its own. The thread holds the owner's
/// lock: it is released once the last transaction is done, not when the
/// last handle drops.
/// The journal's records after `posted`, as a batch to post.
fn unposted_batch(path: &Path, records: Vec<journal::Logged>, posted: u64) -> Batch {
    let (records, left) = journal::unposted(records, posted);
    if left > 0 {
        tracing::warn!(file = %path.display(), records = left, "journal records after a gap are not posted: the machine lost the ones between (a crash of the machine, not of the gateway)");
    }
    Batch::of(records)
}

/// The books of the file at `path` with its journal's records posted to
/// them, in a transaction rolled back once read: the file is left as it
/// was, and its owner's postings wait for the few milliseconds this takes.
fn reconcile_with_journal(path: &Path) -> Result<Vec<Reconciliation>, String> {
    let conn = schema::open_reader(path).map_err(|e| e.to_string())?;
    if let Err(error) = conn.execute_batch("BEGIN IMMEDIATE") {
        // A file this process may not write: its journal cannot be
        // applied to it, and no gateway can be writing it either.
        if error.sqlite_error_code() != Some(rusqlite::ErrorCode::ReadOnly) {
            return Err(error.to_string());
        }
        return upkeep::reconcile(&conn).map_err(|e| e.to_string());
    }
    let read = (|| {
        let posted = schema::journal_seq(&conn).map_err(|e| e.to_string())?;
        let owner = schema::store_id(&conn).map_err(|e| e.to_string())?;
        let records =
            Journal::read(path, owner).map_err(|e| format!("cannot read its journal: {e}"))?;
        let batch = unposted_batch(path, records, posted);
        let mut db = writer::Db::new(&conn);
        db.apply(&batch).map_err(|e| e.to_string())?;
        let conn = db.counters_in_sql().map_err(|e| e.to_string())?;
        upkeep::reconcile(conn).map_err(|e| e.to_string())
    })();
    let _ = conn.execute_batch("ROLLBACK");
    read
}

/// How much the writer yields to the threads serving calls: its postings
/// are bursts of CPU that a call's wake-up should not wait behind, and
/// they lose nothing by coming a moment later.
const WRITER_NICENESS: i32 = 5;

/// The checkpoint thread's: it only copies the log.
const CHECKPOINT_NICENESS: i32 = 10;

/// Lowers this thread's priority by `niceness` (Linux gives each thread
/// its own); where that fails, it runs as it was.
fn background(niceness: i32) {
    let tid = rustix::thread::gettid();
    if let Err(error) = rustix::process::setpriority_process(Some(tid), niceness) {
        tracing::debug!(%error, "could not lower a store thread's priority");
    }
}

fn spawn_writer(writer: Writer, jobs: mpsc::Receiver<Msg>, lock: Option<schema::OwnerLock>) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-sqlite".to_owned())
        .spawn(move || {
            let _lock = lock;
            background(WRITER_NICENESS);
            writer.run(&jobs);
        });
    if let Err(error) = spawned {
        // Every job then finds the queue closed and fails closed.
        tracing::error!(%error, "could not start the store's writer thread");
    }
}

/// Posts the journal's records that follow the last one the file has, in
/// one transaction, then empties the journal; returns it and the sequence
/// number posted up to. A journal that may hold answered calls it cannot
/// give (`damage`), or a record whose checksum holds but which this binary
/// cannot read, refuses the start.
fn recover(path: &Path, conn: &Connection) -> Result<(Journal, u64), SqliteOpenError> {
    let open_error = |reason: String| SqliteOpenError::Open {
        path: path.to_owned(),
        reason,
    };
    let sql = |e| schema::classify(path, e);
    let parts =
        journal::scan(path).map_err(|e| open_error(format!("cannot read its journal: {e}")))?;
    let posted = schema::journal_seq(conn).map_err(sql)?;
    let owner = schema::store_id(conn).map_err(sql)?;
    let clean = schema::stopped_clean_at(conn).map_err(sql)?;
    let batch = Batch::of(damage::check(path, parts, posted, owner, clean)?);
    let reached = batch.last_seq().unwrap_or(posted);
    if !batch.is_empty() {
        writer::Db::new(conn).post(&batch).map_err(|e| {
            let reason = format!("cannot post its journal: {e}");
            match e {
                // A whole record this binary cannot read: it may be an
                // answered call, so the file is not served without it.
                rusqlite::Error::InvalidColumnType(..) => SqliteOpenError::Corrupt {
                    path: path.to_owned(),
                    reason,
                },
                _ => open_error(reason),
            }
        })?;
        tracing::info!(file = %path.display(), records = batch.len(), "posted the journal records the last run left");
    }
    // The id is in the file before any journal file carries it.
    let owner = match owner {
        Some(id) => id,
        None => schema::new_store_id(conn).map_err(sql)?,
    };
    let journal = Journal::create(path, owner)
        .map_err(|e| open_error(format!("cannot empty its journal: {e}")))?;
    // From here on the journal holds this run's calls: until it stops
    // cleanly, a missing journal file may have cost some.
    schema::set_stopped_clean_at(conn, None).map_err(sql)?;
    Ok((journal, reached))
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

fn to_delta(duration: std::time::Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}
