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
//! [`LogLength`] tells the writer how long its log is. A store that is
//! flushed (as the gateway does when it stops) is copied whole and its
//! log emptied ([`truncate`]), so the file it leaves needs no log beside
//! it.

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// How often the log is copied into the database file.
pub(super) const EVERY: Duration = Duration::from_secs(2);

/// The checkpoint thread copies the log into the database without holding
/// the writer up, but the log starts again from its beginning only when a
/// commit finds it all copied, which a writer that never pauses never
/// does. Past this size the writer itself copies the rest and starts the
/// log again: one short stall of the postings per this many bytes of
/// calls, instead of a log that grows as long as the load lasts.
pub(super) const MAX_LOG_BYTES: u64 = 32 * 1024 * 1024;

/// Each time the log has grown by this much, the checkpoint thread is
/// asked to copy it into the database now rather than at its next turn:
/// what the writer must copy itself when it starts the log again is then
/// only what came after.
pub(super) const COPY_EVERY_BYTES: u64 = 4 * 1024 * 1024;

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

/// How long [`truncate`] waits for a reader or the writer to finish.
const TRUNCATE_WAIT: Duration = Duration::from_secs(5);

/// Copies the whole log into the database file and empties it, waiting
/// for any reader or commit in progress: the file then holds every call,
/// with nothing left in its `-wal`.
pub(super) fn truncate(path: &std::path::Path) -> rusqlite::Result<()> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(TRUNCATE_WAIT)?;
    // `busy` is 1 when a reader or writer kept the log from being emptied.
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))?;
    if busy != 0 {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("the log is still in use".to_owned()),
        ));
    }
    Ok(())
}

fn run(path: &std::path::Path, requests: &Receiver<()>, every: Duration) {
    super::background(super::CHECKPOINT_NICENESS);
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
        })
    }

    fn bytes(&self) -> u64 {
        self.frames.load(Ordering::Relaxed) * self.frame_bytes
    }

    /// Asks the checkpoint thread to copy the log now if it has grown by
    /// [`COPY_EVERY_BYTES`] since it last asked (or started again).
    pub(super) fn ask_for_copy(&mut self, checkpoints: &SyncSender<()>) {
        let bytes = self.bytes();
        if bytes >= self.next_copy {
            // One request waiting is enough: a full queue is one the
            // thread has yet to take.
            let _ = checkpoints.try_send(());
            self.next_copy = bytes + COPY_EVERY_BYTES;
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
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
            tracing::warn!(file = label, %error, "could not restart the store's log");
        }
        true
    }
}
