//! The one thread that writes the file. It posts the desk's journal
//! records a moment after the first of them comes (so one transaction
//! takes many calls), and runs the store's other operations (the admin
//! API's records, alerts, the sweep's upkeep, reconcile) as jobs, each
//! answered once the transaction holding it is committed.
//!
//! A posting that fails changes nothing in the file: its records stay in
//! the journal and are posted again, a little later, until the file takes
//! them, so the store recovers by itself once the disk does. A failed job
//! answers `Unavailable`, having changed nothing.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::change;
use super::checkpoint::{LogLength, MAX_LOG_BYTES};
use super::counters::Counters;
use super::desk::{Batch, Desk};
use super::record::invalid;
use super::Clock;
use crate::budget::{ScopeKind, StoreError};
#[cfg(test)]
use crate::money::UsdMicros;
use crate::money::UsdMicrosDelta;

/// The most jobs one transaction takes: enough to absorb a burst, few
/// enough that one commit never holds a job up for long.
const MAX_BATCH: usize = 512;

/// The least time between two postings, per call in flight when the last
/// one took its batch. The writer posts as soon as it is woken unless it
/// posted less than that long ago: then it waits for the rest, and the
/// records of every call meanwhile share one transaction. With many calls
/// in flight, most of them reserve and settle between two postings, and
/// their row is written once, settled; with one at a time, the file's
/// readers (`sqlite3`) are at most a couple of milliseconds behind.
pub(super) const POST_GAP: Duration = Duration::from_millis(2);

/// The longest wait between two postings, however many calls are in
/// flight.
pub(super) const MAX_POST_GAP: Duration = Duration::from_millis(20);

/// How long a posting the file refused waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// What the writer is sent.
pub(super) enum Msg {
    Job(Box<dyn Job>),
    /// The desk has journal records to post.
    Wake,
    /// The store's last handle is gone: post what is left, and stop.
    Stop,
    /// Stop at once, leaving the desk's records to the journal, as a
    /// crash would.
    #[cfg(test)]
    Crash,
    /// Hold postings back (`false`) or let them go again.
    #[cfg(test)]
    Posting(bool),
}

/// What a job works on: the writer's connection, inside its open
/// transaction, the counters it keeps in memory (`counters`), and what the
/// desk must learn once the transaction commits.
pub(super) struct Db<'c> {
    conn: &'c Connection,
    counters: Counters,
    /// Exec ids the transaction forgot (their retry horizon passed).
    forgotten: Vec<String>,
}

impl<'c> Db<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Db {
            conn,
            counters: Counters::default(),
            forgotten: Vec::new(),
        }
    }

    /// The connection, for every table but `counters`, which is read and
    /// moved through [`Db::counter`] and [`Db::move_counter`].
    pub(super) fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// `(spent, reserved)` of one scope and period, as posted.
    #[cfg(test)]
    pub(super) fn counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
    ) -> rusqlite::Result<(UsdMicros, UsdMicros)> {
        self.counters.get(self.conn, kind, id, period_id)
    }

    /// Moves one counter by signed amounts, never below zero.
    pub(super) fn move_counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    ) -> rusqlite::Result<()> {
        self.counters
            .add(self.conn, kind, id, period_id, spent, reserved)
    }

    /// Deletes one counter's row.
    pub(super) fn forget_counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
    ) -> rusqlite::Result<()> {
        self.counters.drop_one(kind, id, period_id);
        self.conn
            .prepare_cached(
                "DELETE FROM counters WHERE scope_kind = ?1 AND scope_id = ?2 AND period_id = ?3",
            )?
            .execute((kind.as_str(), id, period_id))?;
        Ok(())
    }

    /// Deletes every counter of one scope, in any period.
    pub(super) fn forget_scope(&mut self, kind: ScopeKind, id: &str) -> rusqlite::Result<()> {
        self.counters.drop_scope(kind, id);
        self.conn
            .prepare_cached("DELETE FROM counters WHERE scope_kind = ?1 AND scope_id = ?2")?
            .execute((kind.as_str(), id))?;
        Ok(())
    }

    /// The connection with every counter moved so far written and none
    /// kept in memory, for statements that read or change the `counters`
    /// table themselves.
    pub(super) fn counters_in_sql(&mut self) -> rusqlite::Result<&'c Connection> {
        self.counters.write(self.conn)?;
        self.counters.forget();
        Ok(self.conn)
    }

    /// Tells the desk, once committed, that the file forgot these records.
    pub(super) fn forgot(&mut self, exec_ids: Vec<String>) {
        self.forgotten.extend(exec_ids);
    }

    pub(super) fn begin(&self, behavior: TransactionBehavior) -> rusqlite::Result<()> {
        // The owner writes; a reader beside it only reads.
        let begin = match behavior {
            TransactionBehavior::Immediate => "BEGIN IMMEDIATE",
            _ => "BEGIN DEFERRED",
        };
        self.conn.prepare_cached(begin)?.execute([])?;
        Ok(())
    }

    /// Writes the moved counters and commits; on failure, rolls back.
    pub(super) fn commit(&mut self) -> rusqlite::Result<()> {
        let committed = self
            .counters
            .write(self.conn)
            .and_then(|()| self.conn.prepare_cached("COMMIT")?.execute([]));
        match committed {
            Ok(_) => Ok(()),
            Err(error) => {
                self.rollback();
                Err(error)
            }
        }
    }

    /// Undoes the open transaction, if SQLite has not already, and
    /// forgets the counters it moved.
    pub(super) fn rollback(&mut self) {
        self.counters.forget();
        self.forgotten.clear();
        if !self.conn.is_autocommit() {
            // A rollback that fails leaves nothing to do: SQLite then
            // rolls back on its own.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// Posts `batch` and records how far the journal is posted, in one
    /// transaction.
    pub(super) fn post(&mut self, batch: &Batch) -> rusqlite::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.begin(TransactionBehavior::Immediate)?;
        let posted = self.apply(batch).and_then(|()| self.commit());
        if posted.is_err() {
            self.rollback();
        }
        posted
    }

    /// Writes `batch` into the open transaction, and how far the journal
    /// is posted.
    pub(super) fn apply(&mut self, batch: &Batch) -> rusqlite::Result<()> {
        let Some(last) = batch.last_seq() else {
            return Ok(());
        };
        let mut changes = Vec::new();
        for (seq, payload) in batch.records() {
            let decided = change::decode(payload)
                .map_err(|e| invalid(format!("journal record {seq} cannot be read: {e}")))?;
            changes.extend(decided);
        }
        change::post(self, changes.iter())?;
        self.conn
            .prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'journal_seq'")?
            .execute([last.to_string()])?;
        Ok(())
    }
}

/// A queued job, type-erased so jobs of every kind share one queue.
pub(super) trait Job: Send {
    /// Runs the job in the open transaction and keeps its answer until the
    /// transaction's fate is known.
    fn run(self: Box<Self>, db: &mut Db<'_>, clock: &Clock) -> Box<dyn Answer>;
    /// Answers without running: the transaction could not begin.
    fn fail(self: Box<Self>, error: &str);
}

/// A job's answer, held until its transaction commits or fails.
pub(super) trait Answer: Send {
    fn send(self: Box<Self>, committed: Result<(), &str>);
    /// Whether SQLite failed running the job, so the transaction must not
    /// commit.
    fn failed(&self) -> Option<String>;
}

/// What a job does in the writer's transaction: `Err` is SQLite failing
/// (the whole transaction is rolled back), `Ok` the store's answer.
type Op<T> = Box<dyn FnOnce(&mut Db<'_>, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send>;

struct Call<T> {
    op: Op<T>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

struct Ran<T> {
    result: rusqlite::Result<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T: Send + 'static> Job for Call<T> {
    fn run(self: Box<Self>, db: &mut Db<'_>, clock: &Clock) -> Box<dyn Answer> {
        let result = (self.op)(db, clock);
        Box::new(Ran {
            result,
            reply: self.reply,
        })
    }

    fn fail(self: Box<Self>, error: &str) {
        // The caller may have gone (its request was dropped): nobody to tell.
        let _ = self
            .reply
            .send(Err(StoreError::Unavailable(error.to_owned())));
    }
}

impl<T: Send + 'static> Answer for Ran<T> {
    fn send(self: Box<Self>, committed: Result<(), &str>) {
        let answer = match (committed, self.result) {
            (Ok(()), Ok(answer)) => answer,
            (Ok(()), Err(error)) => Err(StoreError::Unavailable(error.to_string())),
            (Err(error), _) => Err(StoreError::Unavailable(error.to_owned())),
        };
        let _ = self.reply.send(answer);
    }

    fn failed(&self) -> Option<String> {
        self.result.as_ref().err().map(ToString::to_string)
    }
}

/// Queues `op` for the writer and returns the receiver of its answer.
pub(super) fn call<T: Send + 'static>(
    queue: &mpsc::Sender<Msg>,
    op: impl FnOnce(&mut Db<'_>, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
) -> Result<oneshot::Receiver<Result<T, StoreError>>, StoreError> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Msg::Job(Box::new(Call {
            op: Box::new(op),
            reply,
        })))
        .map_err(|_| StoreError::Unavailable("the store's writer has stopped".to_owned()))?;
    Ok(answer)
}

/// The desk, whoever panicked holding it: its draft is undone, so it holds
/// only what the journal holds.
pub(super) fn lock(desk: &Mutex<Desk>) -> MutexGuard<'_, Desk> {
    desk.lock().unwrap_or_else(|poisoned| {
        desk.clear_poison();
        let mut desk = poisoned.into_inner();
        desk.rollback();
        desk
    })
}

/// The writer: its connection and what it keeps between transactions.
pub(super) struct Writer {
    pub conn: Connection,
    pub clock: Clock,
    /// `Immediate` for the owner (it writes), `Deferred` for a reader
    /// beside it.
    pub behavior: TransactionBehavior,
    pub label: String,
    /// The owner's desk; a reader has none.
    pub desk: Option<Arc<Mutex<Desk>>>,
    pub checkpoints: Option<SyncSender<()>>,
}

impl Writer {
    /// Serves `queue` until the store's last handle is gone.
    pub(super) fn run(mut self, queue: &Receiver<Msg>) {
        let owner = matches!(self.behavior, TransactionBehavior::Immediate);
        let mut log = owner
            .then(|| LogLength::watch(&mut self.conn, &self.label, MAX_LOG_BYTES))
            .flatten();
        let conn = &self.conn;
        let mut db = Db::new(conn);
        let mut unposted: Option<Batch> = None;
        // When the desk's records are next posted; `None`: it has none.
        let mut post_at: Option<Instant> = None;
        #[cfg(test)]
        let mut posting = true;
        #[cfg(not(test))]
        let posting = true;
        let mut last_post = Instant::now()
            .checked_sub(MAX_POST_GAP)
            .unwrap_or_else(Instant::now);
        let mut gap = POST_GAP;
        loop {
            let received = match post_at {
                None => queue.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(at) => queue.recv_timeout(at.saturating_duration_since(Instant::now())),
            };
            let mut jobs = Vec::new();
            let mut stop = false;
            match received {
                Ok(Msg::Wake) => {
                    let at = post_at.get_or_insert(last_post + gap);
                    if *at > Instant::now() {
                        continue;
                    }
                }
                Ok(Msg::Job(job)) => jobs.push(job),
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => stop = true,
                Err(RecvTimeoutError::Timeout) => {}
                #[cfg(test)]
                Ok(Msg::Crash) => return,
                #[cfg(test)]
                Ok(Msg::Posting(on)) => posting = on,
            }
            while !stop && jobs.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(Msg::Job(job)) => jobs.push(job),
                    // The posting below takes those records too.
                    Ok(Msg::Wake) => {}
                    Ok(Msg::Stop) => stop = true,
                    #[cfg(test)]
                    Ok(Msg::Crash) => return,
                    #[cfg(test)]
                    Ok(Msg::Posting(on)) => posting = on,
                    Err(_) => break,
                }
            }
            post_at = None;
            if let Some(desk) = self.desk.as_ref().filter(|_| posting) {
                last_post = Instant::now();
                let (posted, in_flight) = post_all(&mut db, desk, &mut unposted, &self.label);
                gap = (POST_GAP * u32::try_from(in_flight.max(1)).unwrap_or(u32::MAX))
                    .min(MAX_POST_GAP);
                if !posted {
                    post_at = Some(last_post + RETRY_AFTER);
                }
            }
            if !jobs.is_empty() {
                self.run_jobs(&mut db, jobs);
            }
            if owner {
                db.counters.trim();
            } else {
                // Beside an owner, the file changes under the reader.
                db.counters.forget();
            }
            if let Some(log) = &mut log {
                if !log.restart_if_long(conn, &self.label) {
                    if let Some(checkpoints) = &self.checkpoints {
                        log.ask_for_copy(checkpoints);
                    }
                }
            }
            if stop {
                if unposted.is_some() {
                    tracing::warn!(file = %self.label, "the store stops with journal records its file refused; they are posted when it opens again");
                }
                return;
            }
        }
    }

    /// Runs `jobs` in one transaction and answers them once it commits.
    fn run_jobs(&self, db: &mut Db<'_>, jobs: Vec<Box<dyn Job>>) {
        if let Err(error) = db.begin(self.behavior) {
            let error = failure(&self.label, &error.to_string());
            jobs.into_iter().for_each(|job| job.fail(&error));
            return;
        }
        let mut answers = Vec::with_capacity(jobs.len());
        let mut jobs = jobs.into_iter();
        let mut failed = None;
        // After a failure SQLite may already have rolled the transaction
        // back, so no later job may run: it would run outside it.
        for job in jobs.by_ref() {
            let answer = job.run(db, &self.clock);
            failed = answer.failed();
            answers.push(answer);
            if failed.is_some() {
                break;
            }
        }
        let committed = match failed {
            Some(error) => {
                db.rollback();
                Err(failure(&self.label, &error))
            }
            None => db
                .commit()
                .map_err(|e| failure(&self.label, &e.to_string())),
        };
        if committed.is_ok() && !db.forgotten.is_empty() {
            if let Some(desk) = &self.desk {
                lock(desk).forget_known(&db.forgotten);
            }
        }
        db.forgotten.clear();
        let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
        for answer in answers {
            answer.send(committed);
        }
        if let Err(error) = committed {
            jobs.for_each(|job| job.fail(error));
        }
    }
}

/// Posts the records the desk has (after a batch the file refused before,
/// if any); says whether the file took them, and how many calls were in
/// flight. What comes in meanwhile waits for the next posting.
fn post_all(
    db: &mut Db<'_>,
    desk: &Mutex<Desk>,
    unposted: &mut Option<Batch>,
    label: &str,
) -> (bool, usize) {
    let mut in_flight = 0;
    let mut retried = unposted.is_some();
    loop {
        let batch = match unposted.take() {
            Some(batch) => batch,
            None => {
                let mut desk = lock(desk);
                in_flight = desk.open_count();
                match desk.take_batch() {
                    Some(batch) => batch,
                    None => return (true, in_flight),
                }
            }
        };
        match db.post(&batch) {
            Ok(()) => lock(desk).posted(&batch),
            Err(error) => {
                let error = format!("cannot write its file: {error}");
                tracing::warn!(file = label, %error, records = batch.len(), "posting the journal failed; retrying");
                lock(desk).posting_failed(&error);
                *unposted = Some(batch);
                return (false, in_flight);
            }
        }
        if !std::mem::take(&mut retried) {
            return (true, in_flight);
        }
    }
}

/// Logs a failed transaction and says what the callers are told.
fn failure(label: &str, error: &str) -> String {
    tracing::error!(file = label, %error, "the store's transaction failed; its calls were refused and nothing was changed");
    format!("sqlite store {label}: {error}")
}
