//! Test control over the SQLite store: its clock, its ledger read back
//! whole, and a size limit standing in for a full disk. Compiled only into
//! tests.

use std::path::Path;
use std::sync::Arc;

use super::{schema, upkeep, writer, Clock, SqliteStore};
use crate::budget::memory::testing::ManualClock;
use crate::budget::{LedgerEntry, Rules, StoreError};

impl SqliteStore {
    /// A store on the file at `path` (waiting for a store on it that was
    /// just dropped to let go) whose every deadline and period id
    /// comes from `clock`.
    pub(crate) fn with_clock(path: &Path, rules: Rules, clock: Arc<ManualClock>) -> Self {
        // A store on the same file dropped just before may still be letting
        // go of it on its writer thread.
        let mut tries = 0;
        let (conn, lock) = loop {
            match schema::open_owner(path) {
                Err(schema::SqliteOpenError::Locked { .. }) if tries < 200 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                opened => break opened.unwrap(),
            }
        };
        Self::start_owner(conn, lock, Clock::Manual(clock), path, rules).unwrap()
    }

    /// Every ledger entry not yet folded, oldest first.
    pub(crate) async fn ledger(&self) -> Vec<LedgerEntry> {
        self.call(|db, _| upkeep::ledger(db.conn()).map(Ok))
            .await
            .unwrap()
    }

    /// Stops the store as a crash would: the writer ends without posting
    /// what the desk holds, which is left in the journal.
    pub(crate) fn crash(self) {
        let _ = self.shared.queue.send(writer::Msg::Crash);
    }

    /// Stops (or starts again) posting the journal to the file, as if the
    /// writer were held up.
    pub(crate) fn set_posting(&self, on: bool) {
        let _ = self.shared.queue.send(writer::Msg::Posting(on));
    }

    /// How many journal records the file may refuse before reserves fail
    /// closed.
    pub(crate) fn set_max_backlog(&self, records: usize) {
        if let Some(desk) = &self.shared.desk {
            writer::lock(desk).set_max_backlog(records);
        }
    }

    /// Leaves the journal's disk `bytes` for appends (`None`: no limit),
    /// as a full disk would: the append that needs more writes what fits
    /// and fails with `ENOSPC`.
    pub(crate) fn limit_journal_room(&self, bytes: Option<u64>) {
        if let Some(desk) = &self.shared.desk {
            writer::lock(desk).set_journal_room(bytes);
        }
    }

    /// Caps the file at `pages` pages (`None`: no cap), as a full disk
    /// would: a transaction that needs more fails with `SQLITE_FULL`.
    pub(crate) async fn limit_pages(&self, pages: Option<u32>) -> Result<(), StoreError> {
        self.call(move |db, _| {
            let conn = db.conn();
            let pages = pages.map_or(i64::from(u32::MAX) * 4, i64::from);
            let _: i64 =
                conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                    row.get(0)
                })?;
            Ok(Ok(()))
        })
        .await
    }
}
