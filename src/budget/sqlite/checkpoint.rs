//! Checkpoints, on a thread of their own.
//!
//! A commit appends its pages to the write-ahead log without a disk flush
//! (`synchronous = NORMAL`); a checkpoint copies the log into the database
//! file and flushes both, which takes milliseconds, and SQLite would run it
//! inside whichever commit crossed its threshold, holding every call queued
//! behind that commit. So the writer never checkpoints
//! (`wal_autocheckpoint = 0`) and this thread does, on its own connection,
//! every two seconds, and sooner when the writer asks, each time the log
//! has grown by a few megabytes. A `PASSIVE` checkpoint never waits for
//! the writer nor holds it up; once it has copied the whole log, the
//! writer's next commit starts the log again from its beginning.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// How often the log is copied into the database file.
pub(super) const EVERY: Duration = Duration::from_secs(2);

/// Starts checkpointing the file at `path` `every` so often, and at once on
/// each of the writer's `requests`, until the writer drops their sender
/// (it ended).
pub(super) fn spawn(path: PathBuf, requests: Receiver<()>, every: Duration) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-sqlite-checkpoint".to_owned())
        .spawn(move || run(&path, &requests, every));
    if let Err(error) = spawned {
        tracing::error!(%error, "could not start the store's checkpoint thread; its log will grow");
    }
}

fn run(path: &std::path::Path, requests: &Receiver<()>, every: Duration) {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match Connection::open_with_flags(path, flags).and_then(|conn| {
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(conn)
    }) {
        Ok(conn) => conn,
        Err(error) => {
            tracing::error!(file = %path.display(), %error, "cannot checkpoint the store; its log will grow");
            return;
        }
    };
    let mut failing = false;
    while !matches!(
        requests.recv_timeout(every),
        Err(RecvTimeoutError::Disconnected)
    ) {
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            Ok(()) => failing = false,
            // A full disk fails the checkpoint as it fails the calls; said
            // once, until a checkpoint succeeds again.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(file = %path.display(), %error, "checkpoint failed; retrying");
            }
            Err(_) => {}
        }
    }
}
