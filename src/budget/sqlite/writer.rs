//! The one thread that talks to the file. Calls queue up while a commit is
//! under way and the next transaction takes them all (group commit), so
//! concurrent calls share one commit instead of waiting for one each. No
//! call is answered before the transaction holding its change is committed,
//! and a failed transaction answers every call in it `Unavailable`, having
//! changed nothing: the gateway fails closed, and the next transaction
//! tries again, so the store recovers by itself once the disk does.

use std::sync::mpsc;

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

/// A queued call, type-erased so calls of every kind share one queue.
pub(super) trait Job: Send {
    /// Runs the call in the open transaction and keeps its answer until the
    /// transaction's fate is known.
    fn run(self: Box<Self>, conn: &Connection, clock: &Clock) -> Box<dyn Answer>;
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

/// Queues `op` for the writer and returns the receiver of its answer.
pub(super) fn call<T: Send + 'static>(
    queue: &mpsc::Sender<Box<dyn Job>>,
    op: impl FnOnce(&Connection, &Clock) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
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
) {
    let log = matches!(behavior, TransactionBehavior::Immediate).then(|| format!("{label}-wal"));
    let mut since_look = 0u32;
    while let Ok(first) = queue.recv() {
        since_look += 1;
        if since_look >= LOG_LOOK_EVERY {
            since_look = 0;
            if let Some(log) = &log {
                restart_long_log(&conn, log, &label);
            }
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let tx = match conn.transaction_with_behavior(behavior) {
            Ok(tx) => tx,
            Err(error) => {
                let error = failure(&label, &error.to_string());
                batch.into_iter().for_each(|job| job.fail(&error));
                continue;
            }
        };
        let mut answers = Vec::with_capacity(batch.len());
        let mut jobs = batch.into_iter();
        let mut failed = None;
        // After a failure SQLite may already have rolled the transaction
        // back, so no later call may run: it would run outside it.
        for job in jobs.by_ref() {
            let answer = job.run(&tx, &clock);
            failed = answer.failed();
            answers.push(answer);
            if failed.is_some() {
                break;
            }
        }
        let committed = match failed {
            // Dropping the transaction rolls it back.
            Some(error) => Err(failure(&label, &error)),
            None => tx.commit().map_err(|e| failure(&label, &e.to_string())),
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
