//! The one connection that writes the file, and the thread that runs it
//! when calls come together.
//!
//! A call that finds no other call in the store runs its own transaction on
//! its own thread: one call alone pays for its statements and its commit
//! and nothing else, no hop to another thread and back. A call that finds
//! others there queues its work for the writer thread, which takes every
//! call queued so far into one transaction (group commit): under load,
//! concurrent calls share one commit instead of paying one each, and a
//! commit's pages are written once for all of them.
//!
//! No call is answered before the transaction holding its change is
//! committed, and a failed transaction answers every call in it
//! `Unavailable`, having changed nothing: the gateway fails closed, and the
//! next transaction tries again, so the store recovers by itself once the
//! disk does.
//!
//! The connection is held only while SQLite works, never across an await:
//! a transaction takes tens of microseconds (a commit appends to the log
//! without a disk flush), which a runtime worker spends as it spends the
//! memory store's lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, TryLockError};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::Clock;
use crate::budget::StoreError;

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

/// How often (in transactions) the writer looks at the log's size.
const LOG_LOOK_EVERY: u32 = 64;

/// What a call does in the writer's transaction: `Err` is SQLite failing
/// (the whole transaction is rolled back), `Ok` the store's answer.
type Op<T> = Box<dyn FnOnce(&Connection, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send>;

/// The receiver of a call's answer, answered once its transaction's fate is
/// known (already, when the calling thread ran it).
pub(super) type Answered<T> = oneshot::Receiver<Result<T, StoreError>>;

/// The connection and what it writes with, shared by the callers and the
/// writer thread.
pub(super) struct Writer {
    held: Mutex<Held>,
    /// Calls in the store: queued, or in a transaction not yet ended. Only
    /// a call that finds none runs on its own thread, so under load every
    /// call joins the writer thread's batches.
    inside: AtomicUsize,
    clock: Clock,
    /// `Immediate` for the owner (it writes), `Deferred` for a reader
    /// beside it.
    behavior: TransactionBehavior,
    /// The file's write-ahead log, watched by the owner only.
    log: Option<String>,
    label: String,
}

/// What only the holder of the connection touches.
struct Held {
    conn: Connection,
    since_look: u32,
}

/// The callers' side: the connection, and the queue of the writer thread.
/// When the last one is dropped the queue closes and the thread ends.
pub(super) struct Calls {
    writer: Arc<Writer>,
    queue: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    pub(super) fn new(
        conn: Connection,
        clock: Clock,
        behavior: TransactionBehavior,
        label: String,
    ) -> Writer {
        let log =
            matches!(behavior, TransactionBehavior::Immediate).then(|| format!("{label}-wal"));
        Writer {
            held: Mutex::new(Held {
                conn,
                since_look: 0,
            }),
            inside: AtomicUsize::new(0),
            clock,
            behavior,
            log,
            label,
        }
    }

    /// Starts the writer thread; `keep` (the file's lock, say) is dropped
    /// on it once the last transaction is done and the connection closed.
    pub(super) fn start(self, keep: impl Send + 'static) -> Calls {
        let writer = Arc::new(self);
        let (queue, jobs) = mpsc::channel();
        let thread = Arc::clone(&writer);
        let spawned = std::thread::Builder::new()
            .name("tollgate-sqlite".to_owned())
            .spawn(move || {
                thread.run_queue(&jobs);
                // The callers' handle went first: this is the last one, so
                // the connection closes here, before `keep` lets go.
                drop(thread);
                drop(keep);
            });
        if let Err(error) = spawned {
            // Queued calls then find the queue closed and fail closed.
            tracing::error!(%error, "could not start the store's writer thread");
        }
        Calls { writer, queue }
    }

    /// The writer thread: takes every call queued by the time it holds the
    /// connection into one transaction, until the queue closes.
    fn run_queue(&self, jobs: &mpsc::Receiver<Box<dyn Job>>) {
        while let Ok(first) = jobs.recv() {
            let mut held = self.hold();
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let taken = batch.len();
            self.run(&mut held, batch);
            self.inside.fetch_sub(taken, Ordering::AcqRel);
        }
    }

    /// The connection, waiting for a calling thread's transaction to end.
    fn hold(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic inside a transaction rolled it back on the way out, so
        // the connection is as good as before.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `batch` in one transaction and answers each call once the
    /// transaction's fate is known.
    fn run(&self, held: &mut Held, batch: Vec<Box<dyn Job>>) {
        if let Some(log) = &self.log {
            held.since_look += 1;
            if held.since_look >= LOG_LOOK_EVERY {
                held.since_look = 0;
                restart_long_log(&held.conn, log, &self.label);
            }
        }
        let tx = match held.conn.transaction_with_behavior(self.behavior) {
            Ok(tx) => tx,
            Err(error) => {
                let error = failure(&self.label, &error.to_string());
                batch.into_iter().for_each(|job| job.fail(&error));
                return;
            }
        };
        let mut answers = Vec::with_capacity(batch.len());
        let mut jobs = batch.into_iter();
        let mut failed = None;
        // After a failure SQLite may already have rolled the transaction
        // back, so no later call may run: it would run outside it.
        for job in jobs.by_ref() {
            let answer = job.run(&tx, &self.clock);
            failed = answer.failed();
            answers.push(answer);
            if failed.is_some() {
                break;
            }
        }
        let committed = match failed {
            // Dropping the transaction rolls it back.
            Some(error) => Err(failure(&self.label, &error)),
            None => tx
                .commit()
                .map_err(|e| failure(&self.label, &e.to_string())),
        };
        let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
        for answer in answers {
            answer.send(committed);
        }
        if let Err(error) = committed {
            jobs.for_each(|job| job.fail(error));
        }
    }
}

impl Calls {
    /// Runs `op` in a transaction of its own on this thread if no other
    /// call is in the store; else queues it for the writer thread's next
    /// transaction.
    pub(super) fn call<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
    ) -> Answered<T> {
        let writer = &self.writer;
        if writer.inside.fetch_add(1, Ordering::AcqRel) == 0 {
            let held = match writer.held.try_lock() {
                Ok(held) => Some(held),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut held) = held {
                let (job, answer) = job(op);
                writer.run(&mut held, vec![job]);
                drop(held);
                writer.inside.fetch_sub(1, Ordering::AcqRel);
                return answer;
            }
        }
        self.send(op)
    }

    /// Queues `op` for the writer thread: for work over the whole file
    /// (the sweep, reconcile), which would hold a runtime worker too long.
    pub(super) fn queue<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
    ) -> Answered<T> {
        self.writer.inside.fetch_add(1, Ordering::AcqRel);
        self.send(op)
    }

    /// Queues `op`, already counted inside, for the writer thread.
    fn send<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
    ) -> Answered<T> {
        let (job, answer) = job(op);
        if let Err(mpsc::SendError(job)) = self.queue.send(job) {
            self.writer.inside.fetch_sub(1, Ordering::AcqRel);
            job.fail("the store's writer thread has stopped");
        }
        answer
    }
}

fn job<T: Send + 'static>(
    op: impl FnOnce(&Connection, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
) -> (Box<dyn Job>, Answered<T>) {
    let (reply, answer) = oneshot::channel();
    let job = Box::new(Call {
        op: Box::new(op),
        reply,
    });
    (job, answer)
}

/// A queued call, type-erased so calls of every kind share one queue.
trait Job: Send {
    /// Runs the call in the open transaction and keeps its answer until the
    /// transaction's fate is known.
    fn run(self: Box<Self>, conn: &Connection, clock: &Clock) -> Box<dyn Answer>;
    /// Answers without running: the transaction could not begin.
    fn fail(self: Box<Self>, error: &str);
}

/// A call's answer, held until its transaction commits or fails.
trait Answer {
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
    fn run(self: Box<Self>, conn: &Connection, clock: &Clock) -> Box<dyn Answer> {
        let result = (self.op)(conn, clock);
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

/// Copies what is left of a log grown past [`MAX_LOG_BYTES`] into the
/// database and starts it again from its beginning.
fn restart_long_log(conn: &Connection, log: &str, label: &str) {
    let long = std::fs::metadata(log).is_ok_and(|meta| meta.len() > MAX_LOG_BYTES);
    if !long {
        return;
    }
    if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
        tracing::warn!(file = label, %error, "could not restart the store's log");
    }
}

/// Logs a failed transaction and says what the callers are told.
fn failure(label: &str, error: &str) -> String {
    tracing::error!(file = label, %error, "the store's transaction failed; its calls were refused and nothing was changed");
    format!("sqlite store {label}: {error}")
}
