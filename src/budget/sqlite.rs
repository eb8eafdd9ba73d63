//! The embedded store, the default for a single gateway: the books in one
//! SQLite file that survives a restart and a `kill -9` at any instant
//! (DESIGN.md, "Stores").
//!
//! One thread owns the file (`writer`): every call is a job on its queue,
//! and concurrent calls share one transaction and one commit. A call is
//! answered only once its change is committed, so an answered reserve or
//! settle is never lost by a crash. Time is the gateway's clock, read on
//! that thread: with one process per file, it is the store's clock.
//!
//! `schema` opens the file (and locks it to one gateway), `books` holds the
//! protocol's rules as statements, `counters` the counters the writer
//! keeps in memory and writes once per transaction, `aggregates` the spend
//! per day, key and model that every ledger entry adds to, `records` the
//! admin API's keys and orgs, `control` the operator's adjustments and the
//! list of open holds. `checkpoint` copies the log into the file on a
//! thread of its own.

mod aggregates;
mod alerts;
mod books;
mod checkpoint;
mod control;
mod counters;
mod records;
mod schema;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use rusqlite::{Connection, TransactionBehavior};

pub use schema::SqliteOpenError;

use super::aggregates::first_kept_day;
use super::records::{AuditEntry, RecordSet, RecordWrite, WriteOutcome};
use super::{
    AdjustOutcome, Adjustment, ClaimedReserve, OnExpiry, OpenHold, Reconciliation, ReserveOutcome,
    ReserveRequest, RunState, Scope, ScopeState, SettleOutcome, Settlement, SpendQuery, SpendRow,
    StoreError, DEFAULT_AGGREGATE_RETENTION_DAYS, DEFAULT_CLOSED_RECORD, DEFAULT_LEDGER_RETENTION,
    DEFAULT_RUN_TTL,
};
use crate::money::UsdMicros;
use books::Rules;
use writer::Job;

/// How many due reservations one `reserve` expires (and closed records it
/// forgets) before its own work; the periodic sweep takes the rest.
const LAZY_SWEEP_LIMIT: usize = 64;

/// A handle to the store; clones share the same file and writer.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    queue: mpsc::Sender<Box<dyn Job>>,
    path: PathBuf,
    rules: Rules,
    ledger_retention: TimeDelta,
    /// How many days back the sweep keeps spend aggregate rows; set once
    /// at start (`with_aggregate_retention_days`), after the handle exists.
    aggregate_retention_days: AtomicU32,
    /// How long a run is kept after its last call, in milliseconds.
    run_ttl_ms: AtomicI64,
}

/// What a store is opened with besides its file.
struct Settings {
    rules: Rules,
    ledger_retention: Duration,
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
    /// Opens (creating or upgrading) the file at `path` as its one gateway.
    /// A second process on the same file is refused, naming the holder.
    pub fn open(
        path: &Path,
        settle_epsilon: UsdMicros,
        ledger_retention: Duration,
        closed_record: Duration,
        on_expiry: OnExpiry,
    ) -> Result<Self, SqliteOpenError> {
        let (conn, lock) = schema::open_owner(path)?;
        let rules = Rules {
            epsilon: settle_epsilon,
            on_expiry,
            closed_ms: millis(closed_record),
            run_ttl_ms: millis(DEFAULT_RUN_TTL),
        };
        Ok(Self::start(
            conn,
            Clock::Wall,
            TransactionBehavior::Immediate,
            path,
            Settings {
                rules,
                ledger_retention,
            },
            lock,
        ))
    }

    /// Opens the file at `path` to read it beside the gateway that owns it
    /// (`tollgate reconcile`): nothing is created, locked or written.
    pub fn open_reader(path: &Path) -> Result<Self, SqliteOpenError> {
        let conn = schema::open_reader(path)?;
        let rules = Rules {
            epsilon: 0,
            on_expiry: OnExpiry::Charge,
            closed_ms: millis(DEFAULT_CLOSED_RECORD),
            run_ttl_ms: millis(DEFAULT_RUN_TTL),
        };
        Ok(Self::start(
            conn,
            Clock::Wall,
            TransactionBehavior::Deferred,
            path,
            Settings {
                rules,
                ledger_retention: DEFAULT_LEDGER_RETENTION,
            },
            None,
        ))
    }

    fn start(
        conn: Connection,
        clock: Clock,
        behavior: TransactionBehavior,
        path: &Path,
        settings: Settings,
        lock: impl Into<Option<schema::OwnerLock>>,
    ) -> Self {
        let (queue, jobs) = mpsc::channel();
        let label = path.display().to_string();
        let lock = lock.into();
        // The owner checkpoints its file; a reader leaves that to it.
        let checkpointing = lock.is_some().then(|| {
            let (checkpoints, requests) = mpsc::sync_channel::<()>(1);
            checkpoint::spawn(path.to_owned(), requests, checkpoint::EVERY);
            checkpoints
        });
        // The thread owns the lock: it is released only once the last
        // transaction is done, not when the last handle drops.
        let spawned = std::thread::Builder::new()
            .name("tollgate-sqlite".to_owned())
            .spawn(move || {
                let _lock = lock;
                writer::run(conn, clock, behavior, jobs, label, checkpointing);
            });
        if let Err(error) = spawned {
            // Every call then finds the queue closed and fails closed.
            tracing::error!(%error, "could not start the store's writer thread");
        }
        SqliteStore {
            shared: Arc::new(Shared {
                queue,
                path: path.to_owned(),
                rules: settings.rules,
                ledger_retention: to_delta(settings.ledger_retention),
                aggregate_retention_days: AtomicU32::new(DEFAULT_AGGREGATE_RETENTION_DAYS),
                run_ttl_ms: AtomicI64::new(millis(DEFAULT_RUN_TTL)),
            }),
        }
    }

    /// How many days back the sweep keeps spend aggregate rows.
    pub fn with_aggregate_retention_days(self, days: u32) -> Self {
        self.shared
            .aggregate_retention_days
            .store(days, Ordering::Relaxed);
        self
    }

    /// How long a run is kept after its last call.
    pub fn with_run_ttl(self, ttl: Duration) -> Self {
        self.shared.run_ttl_ms.store(millis(ttl), Ordering::Relaxed);
        self
    }

    /// The rules every operation follows, with the run TTL set now.
    fn rules(&self) -> Rules {
        Rules {
            run_ttl_ms: self.shared.run_ttl_ms.load(Ordering::Relaxed),
            ..self.shared.rules
        }
    }

    /// The file the store keeps its books in.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Runs `op` on the writer thread, in its next transaction.
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

    /// Reserves `req.amount` against the key and its org, all or nothing;
    /// a retry with the same `exec_id` gets the first answer.
    pub async fn reserve(&self, req: &ReserveRequest) -> Result<ReserveOutcome, StoreError> {
        match self.reserve_under(req, None).await? {
            ClaimedReserve::Ran(outcome) => Ok(outcome),
            // Only a claim can make a duplicate.
            ClaimedReserve::Duplicate => Err(StoreError::Refused(
                "a reserve without a claim was called a duplicate".to_owned(),
            )),
        }
    }

    /// Reserves like [`SqliteStore::reserve`], unless an open reservation
    /// under another exec id holds `claim`.
    pub async fn reserve_claimed(
        &self,
        req: &ReserveRequest,
        claim: &str,
    ) -> Result<ClaimedReserve, StoreError> {
        self.reserve_under(req, Some(claim.to_owned())).await
    }

    async fn reserve_under(
        &self,
        req: &ReserveRequest,
        claim: Option<String>,
    ) -> Result<ClaimedReserve, StoreError> {
        let rules = self.rules();
        let req = req.clone();
        let (outcome, expired) = self
            .call(move |db, clock| {
                let now = clock.now();
                let expired = books::expire_due(db, rules, now, LAZY_SWEEP_LIMIT)?;
                books::forget_due(db.conn(), now, LAZY_SWEEP_LIMIT)?;
                let outcome = books::reserve(db, rules, &req, claim.as_deref(), now)?;
                Ok(Ok((outcome, expired)))
            })
            .await?;
        self.log_expired(expired);
        Ok(outcome)
    }

    /// Settles a reservation with its actual cost, exactly once.
    pub async fn settle(&self, settlement: &Settlement) -> Result<SettleOutcome, StoreError> {
        let rules = self.rules();
        let settlement = settlement.clone();
        self.call(move |db, clock| books::settle(db, rules, &settlement, clock.now()))
            .await
    }

    /// Applies an operator's refund or credit, once per exec id.
    pub async fn adjust(&self, adjustment: &Adjustment) -> Result<AdjustOutcome, StoreError> {
        let rules = self.rules();
        let adjustment = adjustment.clone();
        self.call(move |db, clock| control::adjust(db, rules, &adjustment, clock.now()))
            .await
    }

    /// Up to `limit` open reservations, oldest first.
    pub async fn open_holds(&self, limit: usize) -> Result<Vec<OpenHold>, StoreError> {
        self.call(move |db, _| control::open_holds(db.conn(), limit).map(Ok))
            .await
    }

    /// A run's cap and counters, if it is remembered.
    pub async fn run_state(&self, id: &str) -> Result<Option<RunState>, StoreError> {
        let id = id.to_owned();
        self.call(move |db, _| books::run_state(db, &id).map(Ok))
            .await
    }

    /// The scope's counters in the period current on the store's clock.
    pub async fn scope_state(&self, scope: &Scope) -> Result<ScopeState, StoreError> {
        let scope = scope.clone();
        self.call(move |db, clock| books::scope_state(db, &scope, clock.now()).map(Ok))
            .await
    }

    /// Whether the writer answers and the file can be read.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.call(|db, _| {
            db.conn().query_row("SELECT 1", [], |_| Ok(()))?;
            Ok(Ok(()))
        })
        .await
    }

    /// Expires every reservation past its deadline, forgets closed records
    /// past their retention, folds ledger entries older than the ledger
    /// retention and deletes aggregate rows older than theirs; returns how
    /// many expired.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let rules = self.rules();
        let retention = self.shared.ledger_retention;
        let aggregate_days = self.shared.aggregate_retention_days.load(Ordering::Relaxed);
        let expired = self
            .call(move |db, clock| {
                let now = clock.now();
                let expired = books::expire_due(db, rules, now, usize::MAX)?;
                // The statements below read and change counters
                // themselves.
                let conn = db.counters_in_sql()?;
                books::forget_due(conn, now, usize::MAX)?;
                control::forget_adjustments(conn, now)?;
                books::forget_idle_runs(conn, rules, now)?;
                books::fold_before(conn, books::before(now, retention))?;
                aggregates::drop_before(conn, &first_kept_day(now, aggregate_days))?;
                Ok(Ok(expired))
            })
            .await?;
        self.log_expired(expired);
        Ok(expired)
    }

    /// The spend aggregate rows `query` wants, by day, key and model.
    pub async fn spend(&self, query: &SpendQuery) -> Result<Vec<SpendRow>, StoreError> {
        let query = query.clone();
        self.call(move |db, _| aggregates::spend(db.conn(), &query).map(Ok))
            .await
    }

    /// How many reservations are open and the sum of their amounts.
    pub async fn open_reservations(&self) -> Result<(usize, UsdMicros), StoreError> {
        self.call(|db, _| books::open_reservations(db.conn()).map(Ok))
            .await
    }

    /// Every scope and period in the file with its counter, folded sum,
    /// ledger sum and open sum, sorted by scope and period.
    pub async fn reconcile(&self) -> Result<Vec<Reconciliation>, StoreError> {
        self.call(|db, _| books::reconcile(db.counters_in_sql()?).map(Ok))
            .await
    }

    fn log_expired(&self, expired: usize) {
        if expired > 0 {
            super::log_expired(None, expired, self.shared.rules.on_expiry);
        }
    }
}

/// The admin API's keys and orgs (see `budget::records`), in the `records`
/// and `audit` tables. Each call is one job on the writer like the books',
/// so a write is answered only once committed.
impl SqliteStore {
    /// The version the documents are at: one row read.
    pub async fn records_version(&self) -> Result<u64, StoreError> {
        self.call(|db, _| records::version(db.conn()).map(Ok)).await
    }

    /// Every document and the version, read in one transaction.
    pub async fn records(&self) -> Result<RecordSet, StoreError> {
        self.call(|db, _| records::all(db.conn()).map(Ok)).await
    }

    /// Writes one document if it is at the revision the writer expects,
    /// moving the version on and appending the audit entry, in one
    /// transaction.
    pub async fn write_record(&self, write: &RecordWrite) -> Result<WriteOutcome, StoreError> {
        let write = write.clone();
        self.call(move |db, clock| records::write(db.conn(), &write, clock.now()).map(Ok))
            .await
    }

    /// Up to `limit` audit entries, newest first, older than `before`.
    pub async fn audit(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.call(move |db, _| records::audit(db.conn(), before, limit).map(Ok))
            .await
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn to_delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}
