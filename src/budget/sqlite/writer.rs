//! The one thread that talks to the file. Calls queue up while a commit is
//! under way and the next transaction takes them all (group commit), so
//! concurrent calls share one commit instead of waiting for one each. No
//! call is answered before the transaction holding its change is committed,
//! and a failed transaction answers every call in it `Unavailable`, having
//! changed nothing: the gateway fails closed, and the next transaction
//! tries again, so the store recovers by itself once the disk does.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::counters::Counters;
use super::Clock;
use crate::budget::{ScopeKind, StoreError};
use crate::money::{UsdMicros, UsdMicrosDelta};

/// The most calls one transaction takes: enough to absorb a burst, few
/// enough that one commit never holds a call up for long.
const MAX_BATCH: usize = 512;

/// The checkpoint thread copies the log into the database without holding
/// the writer up, but the log starts again from its beginning only when a
/// commit finds it all copied, which a writer that never pauses never
/// does. Past this size the writer itself copies the rest and starts the
/// log again: one short stall per this many bytes of calls, instead of a
/// log that grows as long as the load lasts.
const MAX_LOG_BYTES: u64 = 32 * 1024 * 1024;

/// Each time the log has grown by this much while calls come several at a
/// time, the checkpoint thread is asked to copy it into the database now
/// rather than at its next turn: what the writer must copy itself when it
/// starts the log again is then only what came after, and every call
/// waiting meanwhile waits for a disk flush or two instead of for a copy
/// of the whole log (a tenth of a second). Calls that come one at a time
/// are better served by fewer copies: each one's flushes slow the
/// writer's own appends while they run, and a stall holds up one call.
pub(super) const COPY_EVERY_BYTES: u64 = 4 * 1024 * 1024;

/// What a call does in the writer's transaction: `Err` is SQLite failing
/// (the whole transaction is rolled back), `Ok` the store's answer.
type Op<T> = Box<dyn FnOnce(&mut Db<'_>, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send>;

/// What a call works on: the writer's connection, inside its open
/// transaction, and the counters it keeps in memory (`counters`).
pub(super) struct Db<'c> {
    conn: &'c Connection,
    counters: Counters,
}

impl<'c> Db<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Db {
            conn,
            counters: Counters::default(),
        }
    }

    /// The connection, for every table but `counters`, which is read and
    /// moved through [`Db::counter`] and [`Db::move_counter`].
    pub(super) fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// `(spent, reserved)` of one scope and period.
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

    /// The connection with every counter moved so far written and none
    /// kept in memory, for statements that read or change the `counters`
    /// table themselves.
    pub(super) fn counters_in_sql(&mut self) -> rusqlite::Result<&'c Connection> {
        self.counters.write(self.conn)?;
        self.counters.forget();
        Ok(self.conn)
    }

    fn begin(&self, behavior: TransactionBehavior) -> rusqlite::Result<()> {
        // The owner writes; a reader beside it only reads.
        let begin = match behavior {
            TransactionBehavior::Immediate => "BEGIN IMMEDIATE",
            _ => "BEGIN DEFERRED",
        };
        self.conn.prepare_cached(begin)?.execute([])?;
        Ok(())
    }

    /// Writes the moved counters and commits; on failure, rolls back.
    fn commit(&mut self) -> rusqlite::Result<()> {
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
    fn rollback(&mut self) {
        self.counters.forget();
        if !self.conn.is_autocommit() {
            // A rollback that fails leaves nothing to do: SQLite then
            // rolls back on its own.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// A queued call, type-erased so calls of every kind share one queue.
pub(super) trait Job: Send {
    /// Runs the call in the open transaction and keeps its answer until the
    /// transaction's fate is known.
    fn run(self: Box<Self>, db: &mut Db<'_>, clock: &Clock) -> Box<dyn Answer>;
    /// Answers without running: the transaction could not begin.
    fn fail(self: Box<Self>, error: &str);
}

/// A call's answer, held until its transaction commits or fails.
pub(super) trait Answer: Send {
    fn send(self: Box<Self>, committed: Result<(), &str>);
    /// Whether SQLite failed running the call, so the transaction must not
    /// commit.
    fn failed(&self) -> Option<String>;
}

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
    queue: &mpsc::Sender<Box<dyn Job>>,
    op: impl FnOnce(&mut Db<'_>, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
) -> Result<oneshot::Receiver<Result<T, StoreError>>, StoreError> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Box::new(Call {
            op: Box::new(op),
            reply,
        }))
        .map_err(|_| StoreError::Unavailable("the store's writer has stopped".to_owned()))?;
    Ok(answer)
}

/// The writer's loop: runs until every handle to the store is gone.
/// `behavior` is `Immediate` for the owner (it writes) and `Deferred` for a
/// reader beside it.
pub(super) fn run(
    mut conn: Connection,
    clock: Clock,
    behavior: TransactionBehavior,
    queue: mpsc::Receiver<Box<dyn Job>>,
    label: String,
    checkpoints: Option<SyncSender<()>>,
) {
    let owner = matches!(behavior, TransactionBehavior::Immediate);
    let mut log = owner
        .then(|| LogLength::watch(&mut conn, &label, MAX_LOG_BYTES))
        .flatten();
    let mut db = Db::new(&conn);
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Err(error) = db.begin(behavior) {
            let error = failure(&label, &error.to_string());
            batch.into_iter().for_each(|job| job.fail(&error));
            continue;
        }
        let mut answers = Vec::with_capacity(batch.len());
        let mut jobs = batch.into_iter();
        let mut failed = None;
        // After a failure SQLite may already have rolled the transaction
        // back, so no later call may run: it would run outside it.
        for job in jobs.by_ref() {
            let answer = job.run(&mut db, &clock);
            failed = answer.failed();
            answers.push(answer);
            if failed.is_some() {
                break;
            }
        }
        let committed = match failed {
            Some(error) => {
                db.rollback();
                Err(failure(&label, &error))
            }
            None => db.commit().map_err(|e| failure(&label, &e.to_string())),
        };
        let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
        let calls = answers.len();
        for answer in answers {
            answer.send(committed);
        }
        if let Err(error) = committed {
            jobs.for_each(|job| job.fail(error));
        }
        if owner {
            db.counters.trim();
        } else {
            // Beside an owner, the file changes under the reader.
            db.counters.forget();
        }
        if let Some(log) = &mut log {
            log.committed(calls);
            if !log.restart_if_long(&conn, &label) {
                if let Some(checkpoints) = &checkpoints {
                    log.ask_for_copy(checkpoints);
                }
            }
        }
    }
}

/// How long the write-ahead log is, as SQLite reports it after each commit
/// (the number of frames it holds, which drops to the commit's own when
/// the log starts again from its beginning). The log's file keeps its
/// length when the log starts again, so the file's size says nothing of
/// what is still to copy.
pub(super) struct LogLength {
    frames: Arc<AtomicU64>,
    frame_bytes: u64,
    max_bytes: u64,
    /// The length past which the checkpoint thread is next asked to copy.
    next_copy: u64,
    /// Calls and commits since it was last asked, or the log restarted.
    calls: u64,
    commits: u64,
}

impl LogLength {
    /// Watches the log of `conn`, to be started again past `max_bytes`.
    pub(super) fn watch(conn: &mut Connection, label: &str, max_bytes: u64) -> Option<LogLength> {
        let page_bytes: u64 = match conn.query_row("PRAGMA page_size", [], |row| row.get(0)) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(file = label, %error, "cannot read the store's page size; its log is not watched");
                return None;
            }
        };
        let frames = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&frames);
        let hooked = conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, frames: c_int| {
            seen.store(u64::try_from(frames).unwrap_or(0), Ordering::Relaxed);
            Ok(())
        }));
        if let Err(error) = hooked {
            tracing::warn!(file = label, %error, "cannot watch the store's log");
            return None;
        }
        Some(LogLength {
            frames,
            // Each frame is a page behind a 24-byte header.
            frame_bytes: page_bytes + 24,
            max_bytes,
            next_copy: COPY_EVERY_BYTES,
            calls: 0,
            commits: 0,
        })
    }

    /// Counts a commit of `calls` calls.
    pub(super) fn committed(&mut self, calls: usize) {
        self.calls += calls as u64;
        self.commits += 1;
    }

    fn bytes(&self) -> u64 {
        self.frames.load(Ordering::Relaxed) * self.frame_bytes
    }

    /// Asks the checkpoint thread to copy the log now if it has grown by
    /// [`COPY_EVERY_BYTES`] since it last asked (or started again) and the
    /// commits meanwhile held one and a half calls each or more.
    pub(super) fn ask_for_copy(&mut self, checkpoints: &SyncSender<()>) {
        let bytes = self.bytes();
        if bytes >= self.next_copy {
            if 2 * self.calls >= 3 * self.commits {
                // One request waiting is enough: a full queue is one the
                // thread has yet to take.
                let _ = checkpoints.try_send(());
            }
            self.next_copy = bytes + COPY_EVERY_BYTES;
            self.calls = 0;
            self.commits = 0;
        } else {
            // The log started again since: count from where it is.
            self.next_copy = self.next_copy.min(bytes + COPY_EVERY_BYTES);
        }
    }

    /// Copies what is left of a log grown past its limit into the
    /// database and starts it again from its beginning; says whether it
    /// did.
    pub(super) fn restart_if_long(&mut self, conn: &Connection, label: &str) -> bool {
        if self.bytes() <= self.max_bytes {
            return false;
        }
        self.frames.store(0, Ordering::Relaxed);
        self.next_copy = COPY_EVERY_BYTES;
        self.calls = 0;
        self.commits = 0;
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
            tracing::warn!(file = label, %error, "could not restart the store's log");
        }
        true
    }
}

/// Logs a failed transaction and says what the callers are told.
fn failure(label: &str, error: &str) -> String {
    tracing::error!(file = label, %error, "the store's transaction failed; its calls were refused and nothing was changed");
    format!("sqlite store {label}: {error}")
}
